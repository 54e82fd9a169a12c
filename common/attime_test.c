/*
 * attime_test.c -- the attime rules of attime.h, one test per rule.
 */
#include "common/attime.h"

#include <stdbool.h>

#include "sm_test.h"

/* 2023-11-14T22:13:20.123Z */
#define NOW 1700000000123LL

static int64_t
at(const char *s)
{
	struct sm_err err;
	int64_t v = -42;
	int rv = sm_attime_parse(s, NOW, &v, &err);

	if (rv != 0) {
		fprintf(stderr, "    unexpected error for '%s': %s\n", s, err.msg);
		return (INT64_MIN);
	}
	return (v);
}

static int
at_err(const char *s)
{
	struct sm_err err;
	int64_t v = -42;
	int rv;

	sm_err_clear(&err);
	rv = sm_attime_parse(s, NOW, &v, &err);
	if (rv != 0 && strstr(err.msg, "invalid time '") != err.msg)
		return (SM_EINTERNAL);   /* wrong message */
	return (rv);
}

static void
test_now(void)
{
	SM_CHECK_EQ(at("now"), NOW);
	SM_CHECK_EQ(at(""), NOW);
	SM_CHECK_EQ(at("  now  "), NOW);
	SM_CHECK_EQ(at("   "), NOW);
}

static void
test_digits_seconds(void)
{
	/* Any length other than 8, 13, 16, 19 is seconds. */
	SM_CHECK_EQ(at("0"), 0);
	SM_CHECK_EQ(at("1"), 1000);
	SM_CHECK_EQ(at("1700000000"), 1700000000000LL);        /* 10 */
	SM_CHECK_EQ(at("170000000"), 170000000000LL);          /* 9 */
	SM_CHECK_EQ(at("9000000000"), 9000000000000LL);        /* 2255 */
	/* 11, 12, 14 digits of seconds: past 2262, outside the window. */
	SM_CHECK_EQ(at_err("17000000000"), SM_EINVAL);
	SM_CHECK_EQ(at_err("170000000000"), SM_EINVAL);
	SM_CHECK_EQ(at_err("17000000000000"), SM_EINVAL);
	SM_CHECK_EQ(at("0000000000000001"), 0);                /* 16 = us */
	SM_CHECK_EQ(at("1234567"), 1234567000LL);              /* 7 */
}

static void
test_digits_ms_us_ns(void)
{
	SM_CHECK_EQ(at("1700000000123"), 1700000000123LL);          /* 13 */
	SM_CHECK_EQ(at("1700000000123456"), 1700000000123LL);       /* 16 */
	SM_CHECK_EQ(at("1700000000123456789"), 1700000000123LL);    /* 19 */
	/* Truncated toward zero. */
	SM_CHECK_EQ(at("1700000000123999"), 1700000000123LL);
	SM_CHECK_EQ(at("1700000000123999999"), 1700000000123LL);
}

static void
test_digits_yyyymmdd(void)
{
	SM_CHECK_EQ(at("19700101"), 0);
	SM_CHECK_EQ(at("20231114"), 1699920000000LL);
	SM_CHECK_EQ(at("20000229"), 951782400000LL);    /* leap day */
	SM_CHECK_EQ(at("20240301"), 1709251200000LL);
	SM_CHECK_EQ(at("19690101"), -31536000000LL);    /* before 1970 */
	/* Not a date og accepts: unix seconds. */
	SM_CHECK_EQ(at("20230229"), 20230229000LL);     /* not a leap year */
	SM_CHECK_EQ(at("20231301"), 20231301000LL);     /* month 13 */
	SM_CHECK_EQ(at("19000101"), 19000101000LL);     /* year <= 1900 */
	SM_CHECK_EQ(at("99999999"), 99999999000LL);
}

/* "1" followed by zeros, for every length 1..20, against the rules. */
static void
test_digits_every_length(void)
{
	for (int len = 1; len <= 20; len++) {
		char s[32];
		int64_t v = 1, want, got = 0;
		bool ok = true;
		int rv;

		memset(s, '0', (size_t)len);
		s[0] = '1';
		s[len] = '\0';
		for (int i = 1; i < len && i < 19; i++)
			v *= 10;
		switch (len) {
		case 13:
			want = v;
			break;
		case 16:
			want = v / 1000;
			break;
		case 19:
			want = v / 1000000;
			break;
		case 20:
			ok = false;          /* 1e19 > INT64_MAX */
			want = 0;
			break;
		default:
			/* Seconds (8 digits "10000000" is year 1000: not a
			 * date og takes); from 11 digits (1e10 s, year
			 * 2286) past the window of attime.h. */
			ok = len <= 10;
			want = ok ? v * 1000 : 0;
			break;
		}
		rv = sm_attime_parse(s, NOW, &got, NULL);
		if (ok) {
			SM_CHECKF(rv == 0 && got == want, "len %d: rv %d got "
			    "%" PRId64 " want %" PRId64, len, rv, got, want);
		} else {
			SM_CHECKF(rv == SM_EINVAL, "len %d: rv %d", len, rv);
		}
	}
}

static void
test_digits_normalized(void)
{
	SM_CHECK_EQ(at("1_700_000_000"), 1700000000000LL);
	SM_CHECK_EQ(at("1,700,000,000"), 1700000000000LL);
	SM_CHECK_EQ(at(" 1700000000\n"), 1700000000000LL);
}

static void
test_digits_overflow(void)
{
	/* 20 digits do not fit int64; 19 digits of seconds overflow ms. */
	SM_CHECK_EQ(at_err("99999999999999999999"), SM_EINVAL);
	SM_CHECK_EQ(at_err("9999999999999999999"), SM_EINVAL);
	SM_CHECK_EQ(at_err("99999999999999999"), SM_EINVAL);   /* 17, s */
	SM_CHECK_EQ(at_err("12345678901234567890123456789012345678901234567890"
	    "12345678901234567890"), SM_EINVAL);                /* too long */
}

static void
test_relative(void)
{
	SM_CHECK_EQ(at("now-1h"), NOW - 3600000LL);
	SM_CHECK_EQ(at("-1h"), NOW - 3600000LL);
	SM_CHECK_EQ(at("now+30m"), NOW + 1800000LL);
	SM_CHECK_EQ(at("+30m"), NOW + 1800000LL);
	SM_CHECK_EQ(at("now - 1h"), NOW - 3600000LL);
	/* Anything before the sign counts as now. */
	SM_CHECK_EQ(at("whatever-1h"), NOW - 3600000LL);
	SM_CHECK_EQ(at("now-0s"), NOW);
	SM_CHECK_EQ(at("now-1_000s"), NOW - 1000000LL);
}

static void
test_units(void)
{
	SM_CHECK_EQ(at("now-5s"), NOW - 5000LL);
	SM_CHECK_EQ(at("now-5m"), NOW - 300000LL);
	SM_CHECK_EQ(at("now-5min"), NOW - 300000LL);
	SM_CHECK_EQ(at("now-5h"), NOW - 18000000LL);
	SM_CHECK_EQ(at("now-2d"), NOW - 2 * 86400000LL);
	SM_CHECK_EQ(at("now-2w"), NOW - 14 * 86400000LL);
	SM_CHECK_EQ(at("now-1mon"), NOW - 30 * 86400000LL);
	SM_CHECK_EQ(at("now-1M"), NOW - 30 * 86400000LL);
	SM_CHECK_EQ(at("now-1y"), NOW - 365 * 86400000LL);
	SM_CHECK_EQ(at("now+1y"), NOW + 365 * 86400000LL);
}

static void
test_garbage(void)
{
	struct sm_err err;
	int64_t v = 7;

	SM_CHECK_EQ(at_err("yesterday"), SM_EINVAL);
	SM_CHECK_EQ(at_err("nowx"), SM_EINVAL);
	SM_CHECK_EQ(at_err("now-"), SM_EINVAL);
	SM_CHECK_EQ(at_err("now-h"), SM_EINVAL);        /* no number */
	SM_CHECK_EQ(at_err("now-5"), SM_EINVAL);        /* no unit */
	SM_CHECK_EQ(at_err("now-5x"), SM_EINVAL);       /* unknown unit */
	SM_CHECK_EQ(at_err("now-5H"), SM_EINVAL);       /* case matters */
	SM_CHECK_EQ(at_err("now-5hours"), SM_EINVAL);   /* exact units only */
	SM_CHECK_EQ(at_err("now-1h30m"), SM_EINVAL);    /* one offset only */
	SM_CHECK_EQ(at_err("now-1h+5m"), SM_EINVAL);
	SM_CHECK_EQ(at_err("now+-1h"), SM_EINVAL);
	SM_CHECK_EQ(at_err("-1700000000"), SM_EINVAL);
	SM_CHECK_EQ(at_err("1.5"), SM_EINVAL);
	SM_CHECK_EQ(at_err("2023-11-14"), SM_EINVAL);
	SM_CHECK_EQ(at_err("now-99999999999999999999y"), SM_EINVAL);
	SM_CHECK_EQ(at_err("now-999999999999y"), SM_EINVAL);   /* overflow */

	SM_CHECK_EQ(sm_attime_parse("junk", NOW, &v, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "invalid time 'junk'");
	SM_CHECK_EQ(err.code, SM_EINVAL);
	SM_CHECK_EQ(sm_attime_parse("junk", NOW, &v, NULL), SM_EINVAL);
}

static void
test_overflow_near_limits(void)
{
	int64_t v;

	SM_CHECK_EQ(sm_attime_parse("+1s", INT64_MAX - 10, &v, NULL),
	    SM_EINVAL);
	SM_CHECK_EQ(sm_attime_parse("-1s", INT64_MIN + 10, &v, NULL),
	    SM_EINVAL);
	/* Inside int64 but outside the window: refused, not clamped. */
	SM_CHECK_EQ(sm_attime_parse("-1s", INT64_MAX, &v, NULL), SM_EINVAL);
	SM_CHECK_EQ(sm_attime_parse("-1s", SM_TIME_MAX_MS, &v, NULL), 0);
	SM_CHECK_EQ(v, SM_TIME_MAX_MS - 1000);
	SM_CHECK_EQ(sm_attime_parse("+1s", SM_TIME_MAX_MS - 999, &v, NULL),
	    SM_EINVAL);
	SM_CHECK_EQ(sm_attime_parse("+1s", SM_TIME_MIN_MS, &v, NULL), 0);
	SM_CHECK_EQ(v, SM_TIME_MIN_MS + 1000);
	SM_CHECK_EQ(at_err("now-100000000y"), SM_EINVAL);
	SM_CHECK_EQ(at_err("now+100000000y"), SM_EINVAL);
	SM_CHECK_EQ(at("now-200y"), NOW - 200 * 365 * 86400000LL);
}

static void
test_time_check_range(void)
{
	struct sm_err err;

	sm_err_clear(&err);
	SM_CHECK_EQ(sm_time_check_range(0, "start", 0, "end", NULL), 0);
	SM_CHECK_EQ(sm_time_check_range(SM_TIME_MIN_MS, "start",
	    SM_TIME_MAX_MS, "end", NULL), 0);
	SM_CHECK_EQ(sm_time_check_range(INT64_MIN, "start", 0, "end", &err),
	    SM_EINVAL);
	SM_CHECK(strstr(err.msg, "start time") != NULL);
	SM_CHECK_EQ(sm_time_check_range(0, "start", SM_TIME_MAX_MS + 1, "end",
	    &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "end time") != NULL);
	SM_CHECK_EQ(sm_time_check_range(SM_TIME_MIN_MS - 1, "from", 0,
	    "until", NULL), SM_EINVAL);
}

SM_TEST_MAIN(
	{ "now and empty", test_now },
	{ "digits: seconds for other lengths", test_digits_seconds },
	{ "digits: 13 ms, 16 us, 19 ns", test_digits_ms_us_ns },
	{ "digits: 8 = YYYYMMDD, og fallback to seconds",
	    test_digits_yyyymmdd },
	{ "digits: every length 1..20", test_digits_every_length },
	{ "digits: '_', ',' and spaces removed", test_digits_normalized },
	{ "digits: overflow is EINVAL", test_digits_overflow },
	{ "relative: now-1h, -1h, now+30m", test_relative },
	{ "relative: every unit", test_units },
	{ "garbage is EINVAL with message", test_garbage },
	{ "relative: overflow near int64 limits", test_overflow_near_limits },
	{ "time window: sm_time_check_range", test_time_check_range },
)
