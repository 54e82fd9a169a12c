/*
 * connect_push_test.c -- push.v1 Push helpers: RawSample.ID parsing (the
 * idempotency key of a pushed sample).
 */
#include "sm_test.h"

#include "distributor/dist_int.h"

static void
test_uuid_forms(void)
{
	static const uint8_t want[16] = { 0x0b, 0x3c, 0x7c, 0x4e, 0x4a, 0x8d,
		0x4b, 0x8e, 0x9f, 0x5e, 0x2d, 0x1c, 0x0a, 0x9b, 0x8e, 0x7f };
	static const char *const ok[] = {
		"0b3c7c4e-4a8d-4b8e-9f5e-2d1c0a9b8e7f",
		"0B3C7C4E-4A8D-4B8E-9F5E-2D1C0A9B8E7F",
		"0b3c7c4e4a8d4b8e9f5e2d1c0a9b8e7f",
		"{0b3c7c4e-4a8d-4b8e-9f5e-2d1c0a9b8e7f}",
		"urn:uuid:0b3c7c4e-4a8d-4b8e-9f5e-2d1c0a9b8e7f",
	};
	static const char *const bad[] = {
		"", "x", "0b3c7c4e-4a8d-4b8e-9f5e-2d1c0a9b8e7", /* 35 */
		"0b3c7c4e-4a8d-4b8e-9f5e-2d1c0a9b8e7g",
		"0b3c7c4e+4a8d-4b8e-9f5e-2d1c0a9b8e7f",
		"0b3c7c4e4a8d4b8e9f5e2d1c0a9b8e7",
		"{0b3c7c4e-4a8d-4b8e-9f5e-2d1c0a9b8e7f]",
		"0b3c7c4e-4a8d-4b8e-9f5e-2d1c0a9b8e7f0",
	};
	uint8_t id[16];

	for (size_t i = 0; i < SM_ARRAY_LEN(ok); i++) {
		memset(id, 0, sizeof(id));
		SM_CHECK_EQ(sm_uuid_parse(ok[i], id), 0);
		SM_CHECK(memcmp(id, want, sizeof(id)) == 0);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++)
		SM_CHECK_EQ(sm_uuid_parse(bad[i], id), SM_EINVAL);
}

SM_TEST_MAIN(
	{ "UUID forms of Go's uuid.Parse, and refusals", test_uuid_forms },
)
