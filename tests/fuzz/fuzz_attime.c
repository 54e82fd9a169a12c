/*
 * fuzz_attime.c -- Pyroscope's attime parser (common/attime.c), reached
 * from /ingest and /render from= and until=.
 *
 * Input: the parameter text (NUL-terminated copy, at most 4 KiB).
 * Properties: 0 or SM_EINVAL with a message; parsing is a function of the
 * text and `now` (the same text parses to the same value twice); "now"
 * plus nothing means now.
 */
#include "common/attime.h"

#include <string.h>

#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const int64_t now_ms = 1700000000123;
	char s[FUZZ_STR_MAX + 1];
	int64_t v1 = 0, v2 = 0;
	struct sm_err err;
	int rv;

	fuzz_cstring(s, data, size);
	sm_err_clear(&err);
	rv = sm_attime_parse(s, now_ms, &v1, &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(rv == SM_EINVAL, "code %d", rv);
		return (0);
	}
	FUZZ_CHECK(sm_attime_parse(s, now_ms, &v2, &err) == 0 && v1 == v2,
	    "not deterministic: %lld vs %lld", (long long)v1, (long long)v2);
	if (strcmp(s, "now") == 0 || s[0] == '\0')
		FUZZ_CHECK(v1 == now_ms, "now = %lld", (long long)v1);
	return (0);
}
