/*
 * varint_test.c -- the varint codec against protobuf's and Go's rules:
 * round trips at every length, the ten-byte limit, truncation and zigzag.
 */
#include "common/varint.h"

#include <string.h>

#include "sm_test.h"

static void
test_round_trip(void)
{
	static const uint64_t vals[] = { 0, 1, 127, 128, 300, 16383, 16384,
	    (1ull << 32) - 1, 1ull << 35, (1ull << 56) + 5, 1ull << 62,
	    1ull << 63, UINT64_MAX };

	for (size_t i = 0; i < SM_ARRAY_LEN(vals); i++) {
		uint8_t b[SM_UVARINT_MAX + 2];
		const uint8_t *p = b;
		uint64_t v = 0;
		size_t n = sm_uvarint_put(b, vals[i]), want = 1;

		for (uint64_t x = vals[i]; x >= 0x80; x >>= 7)
			want++;
		SM_CHECKF(n == want, "value %" PRIu64 ": %zu bytes", vals[i], n);
		SM_CHECK(sm_uvarint_get(&p, b + n, &v) == 0);
		SM_CHECKF(v == vals[i], "value %" PRIu64, vals[i]);
		SM_CHECK(p == b + n);
	}
}

static void
test_known_bytes(void)
{
	/* protobuf's documentation example: 300 = ac 02 */
	uint8_t b[SM_UVARINT_MAX];
	static const uint8_t max[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	    0xff, 0xff, 0xff, 0x01 };

	SM_CHECK_EQ(sm_uvarint_put(b, 300), 2);
	SM_CHECK(b[0] == 0xac && b[1] == 0x02);
	SM_CHECK_EQ(sm_uvarint_put(b, UINT64_MAX), 10);
	SM_CHECK(memcmp(b, max, sizeof(max)) == 0);
}

static void
test_errors(void)
{
	static const uint8_t trunc[] = { 0x80, 0x80 };
	static const uint8_t over[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	    0xff, 0xff, 0xff, 0x02 };
	static const uint8_t eleven[] = { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
	    0x80, 0x80, 0x80, 0x80, 0x00 };
	static const uint8_t nonmin[] = { 0x81, 0x00 };
	static const uint8_t two[] = { 0xac, 0x02 };
	const uint8_t *p;
	uint64_t v = 7;

	p = trunc;
	SM_CHECK_EQ(sm_uvarint_get(&p, trunc + sizeof(trunc), &v),
	    SM_UVARINT_SHORT);
	SM_CHECK(p == trunc && v == 7);          /* untouched on failure */
	p = trunc;
	SM_CHECK_EQ(sm_uvarint_get(&p, trunc, &v), SM_UVARINT_SHORT);
	p = over;
	SM_CHECK_EQ(sm_uvarint_get(&p, over + sizeof(over), &v),
	    SM_UVARINT_OVERFLOW);
	p = eleven;                              /* tenth byte has 0x80 */
	SM_CHECK_EQ(sm_uvarint_get(&p, eleven + sizeof(eleven), &v),
	    SM_UVARINT_OVERFLOW);
	SM_CHECK(strcmp(sm_uvarint_why(SM_UVARINT_SHORT),
	    "truncated varint") == 0);
	p = two;                 /* two bytes, `end` after the first */
	SM_CHECK_EQ(sm_uvarint_get(&p, two + 1, &v), SM_UVARINT_SHORT);
	SM_CHECK(sm_uvarint_get(&p, two + 2, &v) == 0 && v == 300 &&
	    p == two + 2);
	p = nonmin;                              /* accepted, as protobuf */
	SM_CHECK(sm_uvarint_get(&p, nonmin + 2, &v) == 0 && v == 1);
}

static void
test_zigzag(void)
{
	static const int64_t vals[] = { 0, -1, 1, -2, 2147483647,
	    -2147483648LL, INT64_MAX, INT64_MIN };
	static const uint64_t enc[] = { 0, 1, 2, 3, 4294967294ull,
	    4294967295ull, UINT64_MAX - 1, UINT64_MAX };

	for (size_t i = 0; i < SM_ARRAY_LEN(vals); i++) {
		SM_CHECK(sm_zigzag_enc(vals[i]) == enc[i]);
		SM_CHECK(sm_zigzag_dec(enc[i]) == vals[i]);
	}
}

SM_TEST_MAIN(
	{ "round trip at every length", test_round_trip },
	{ "protobuf's bytes for 300 and UINT64_MAX", test_known_bytes },
	{ "truncated, overflowing and non-minimal input", test_errors },
	{ "zigzag as protobuf's sint64", test_zigzag },
)
