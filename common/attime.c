/*
 * attime.c -- Pyroscope's attime parameters; see attime.h for the rules.
 *
 * The input is first normalized as og Pyroscope does: surrounding
 * whitespace is trimmed and every ' ', '_' and ',' is removed, so
 * "1_700_000_000" and "now - 1h" are accepted.  What og did with the
 * rest -- treat anything it could not read as "now", sum several offsets,
 * accept any unit by prefix ("hours", "mfoo") -- is replaced by strict
 * parsing that answers SM_EINVAL, as attime.h explains.
 *
 * An 8-digit string that is not a valid date after 1900 (og's test) is
 * read as unix seconds, like og does; so is every digit string whose
 * length is not 13, 16 or 19.
 *
 * All arithmetic is overflow-checked: a value that does not fit int64
 * milliseconds is SM_EINVAL, never a wrapped time; so is a result outside
 * the time window of attime.h (sm_time_valid).
 */
#include "attime.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

/* Longest normalized input we read; a real time is far shorter. */
#define ATTIME_MAX 64

#define MS_PER_DAY (86400LL * 1000LL)

static int
attime_bad(struct sm_err *err, const char *s)
{
	return (sm_err_set(err, SM_EINVAL, "invalid time '%.100s'", s));
}

static bool
is_leap(int64_t y)
{
	return ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0);
}

/*
 * Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar.
 * Counts whole years from 1970 (the date is at most year 9999, so a loop
 * is cheap and obviously right), then whole months, then days.
 */
static int64_t
days_since_epoch(int64_t y, int m, int d)
{
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31,
		30, 31 };
	int64_t days = 0;

	for (int64_t yy = 1970; yy < y; yy++)
		days += is_leap(yy) ? 366 : 365;
	for (int64_t yy = y; yy < 1970; yy++)
		days -= is_leap(yy) ? 366 : 365;
	for (int mm = 1; mm < m; mm++)
		days += mdays[mm - 1] + (mm == 2 && is_leap(y) ? 1 : 0);
	return (days + d - 1);
}

/* YYYYMMDD -> ms at UTC midnight; false when it is not a date og took. */
static bool
parse_yyyymmdd(const char *s, int64_t *out_ms)
{
	int64_t y = (s[0] - '0') * 1000 + (s[1] - '0') * 100 +
	    (s[2] - '0') * 10 + (s[3] - '0');
	int m = (s[4] - '0') * 10 + (s[5] - '0');
	int d = (s[6] - '0') * 10 + (s[7] - '0');
	int dim;

	if (y <= 1900 || m < 1 || m > 12 || d < 1)
		return (false);
	dim = (m == 2) ? (is_leap(y) ? 29 : 28) :
	    (m == 4 || m == 6 || m == 9 || m == 11) ? 30 : 31;
	if (d > dim)
		return (false);
	*out_ms = days_since_epoch(y, m, d) * MS_PER_DAY;
	return (true);
}

/* Decimal digits s[0..n) to int64; false on overflow. */
static bool
parse_digits(const char *s, size_t n, int64_t *out)
{
	int64_t v = 0;

	for (size_t i = 0; i < n; i++) {
		int dg = s[i] - '0';

		if (v > (INT64_MAX - dg) / 10)
			return (false);
		v = v * 10 + dg;
	}
	*out = v;
	return (true);
}

static const struct {
	const char *name;
	int64_t ms;
} attime_units[] = {
	{ "s", 1000LL },
	{ "m", 60LL * 1000 },
	{ "min", 60LL * 1000 },
	{ "h", 3600LL * 1000 },
	{ "d", MS_PER_DAY },
	{ "w", 7 * MS_PER_DAY },
	{ "mon", 30 * MS_PER_DAY },
	{ "M", 30 * MS_PER_DAY },
	{ "y", 365 * MS_PER_DAY },
};

/* "N<unit>" (no sign) to ms; false unless it is exactly that. */
static bool
parse_offset(const char *s, int64_t *out_ms)
{
	size_t nd = 0;
	int64_t n;

	while (isdigit((unsigned char)s[nd]))
		nd++;
	if (nd == 0 || !parse_digits(s, nd, &n))
		return (false);
	for (size_t i = 0; i < SM_ARRAY_LEN(attime_units); i++) {
		if (strcmp(s + nd, attime_units[i].name) != 0)
			continue;
		if (n > INT64_MAX / attime_units[i].ms)
			return (false);
		*out_ms = n * attime_units[i].ms;
		return (true);
	}
	return (false);
}

int
sm_time_check_range(int64_t start, const char *start_name, int64_t end,
    const char *end_name, struct sm_err *err)
{
	if (!sm_time_valid(start))
		return (sm_err_set(err, SM_EINVAL, "%s time %lld ms out of "
		    "range (valid: %lld .. %lld unix ms)", start_name,
		    (long long)start, SM_TIME_MIN_MS, SM_TIME_MAX_MS));
	if (!sm_time_valid(end))
		return (sm_err_set(err, SM_EINVAL, "%s time %lld ms out of "
		    "range (valid: %lld .. %lld unix ms)", end_name,
		    (long long)end, SM_TIME_MIN_MS, SM_TIME_MAX_MS));
	return (0);
}

static int
attime_parse(const char *s, int64_t now_ms, int64_t *out_ms,
    struct sm_err *err)
{
	char t[ATTIME_MAX + 1];
	size_t b = 0, e = strlen(s), n = 0, i;
	const char *sign;
	int64_t v, off;
	bool digits = true;

	while (b < e && isspace((unsigned char)s[b]))
		b++;
	while (e > b && isspace((unsigned char)s[e - 1]))
		e--;
	for (i = b; i < e; i++) {
		if (s[i] == ' ' || s[i] == '_' || s[i] == ',')
			continue;
		if (n == ATTIME_MAX)
			return (attime_bad(err, s));
		if (!isdigit((unsigned char)s[i]))
			digits = false;
		t[n++] = s[i];
	}
	t[n] = '\0';

	if (n == 0 || strcmp(t, "now") == 0) {
		*out_ms = now_ms;
		return (0);
	}
	if (digits) {
		if (n == 8 && parse_yyyymmdd(t, out_ms))
			return (0);
		if (!parse_digits(t, n, &v))
			return (attime_bad(err, s));
		switch (n) {
		case 13:
			*out_ms = v;
			break;
		case 16:
			*out_ms = v / 1000;
			break;
		case 19:
			*out_ms = v / 1000000;
			break;
		default:
			if (v > INT64_MAX / 1000)
				return (attime_bad(err, s));
			*out_ms = v * 1000;
			break;
		}
		return (0);
	}

	/* now[+-]N<unit>: whatever precedes the sign is "now".  Exactly one
	 * sign: og looked for '+' first and read "now-1h+5m" as now+5m. */
	if ((sign = strpbrk(t, "+-")) == NULL || strpbrk(sign + 1, "+-") != NULL)
		return (attime_bad(err, s));
	if (!parse_offset(sign + 1, &off))
		return (attime_bad(err, s));
	if (*sign == '+') {
		if (now_ms > 0 && off > INT64_MAX - now_ms)
			return (attime_bad(err, s));
		*out_ms = now_ms + off;
	} else {
		if (now_ms < 0 && -off < INT64_MIN - now_ms)
			return (attime_bad(err, s));
		*out_ms = now_ms - off;
	}
	return (0);
}

int
sm_attime_parse(const char *s, int64_t now_ms, int64_t *out_ms,
    struct sm_err *err)
{
	int rv;

	if ((rv = attime_parse(s, now_ms, out_ms, err)) != 0)
		return (rv);
	if (!sm_time_valid(*out_ms))
		return (sm_err_set(err, SM_EINVAL, "invalid time '%.100s': out "
		    "of range (valid: %lld .. %lld unix ms)", s, SM_TIME_MIN_MS,
		    SM_TIME_MAX_MS));
	return (0);
}
