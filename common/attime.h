/*
 * attime.h -- Pyroscope's "attime" time parameters (docs/wire-formats.md §2), used by
 * /ingest from/until and /render from/until.
 *
 *   first, as og does, surrounding whitespace is trimmed and every ' ',
 *   '_' and ',' is removed;
 *   digits only: 8 digits = YYYYMMDD (UTC midnight; og's rule: a valid
 *                date with year > 1900, else unix s), 13 = unix ms,
 *                16 = unix us, 19 = unix ns, any other length = unix s;
 *   otherwise:   now[+-]N<unit>, where anything before the sign counts as
 *                "now" (so "-1h" and "now-1h" are equal); units s, m/min,
 *                h, d, w, mon/M, y (30 and 365 days); one offset only;
 *   "now" or "":  now.
 *
 * Time window (every time-taking endpoint, one helper: sm_time_check_range):
 * a time is valid when it lies in [SM_TIME_MIN_MS, SM_TIME_MAX_MS], the
 * instants int64 nanoseconds can hold (1677-09-21 .. 2262-04-11, Go's
 * time.UnixNano range, so Pyroscope itself cannot name others).  Outside
 * it, the request is 400 "time ... out of range" -- never clamped, because
 * a clamped range silently answers another question.  Inside it, any sum
 * or product a query plan makes of times (spans, steps, ns conversions)
 * fits int64 with room to spare.  attime results outside the window
 * (now-100000000y) are "invalid time".
 *
 * Deviation, on purpose: og Pyroscope silently used "now" for text it
 * could not parse; Smolder answers 400 instead, because a typo in a time
 * range otherwise returns a plausible but wrong flamegraph.
 */
#ifndef SM_ATTIME_H
#define SM_ATTIME_H

#include <stdbool.h>

#include "sm.h"

/*
 * Parse `s` relative to `now_ms`; store unix milliseconds in *out_ms.
 * Returns 0 or SM_EINVAL ("invalid time '<s>'" in err).  Values are
 * truncated toward zero when converted to ms (ns/us inputs).
 */
int sm_attime_parse(const char *s, int64_t now_ms, int64_t *out_ms,
    struct sm_err *err);

/* The valid window: INT64_MIN / 1e6 + 1 .. INT64_MAX / 1e6 (ms). */
#define SM_TIME_MIN_MS (-9223372036853LL)
#define SM_TIME_MAX_MS (9223372036853LL)

static inline bool
sm_time_valid(int64_t ms)
{
	return (ms >= SM_TIME_MIN_MS && ms <= SM_TIME_MAX_MS);
}

/*
 * 0 when start and end (unix ms) are both in the window, else SM_EINVAL
 * "<what> time <v> out of range (...)".  `what` names the endpoint's
 * parameters, e.g. "start"/"end" or "from"/"until".  Order is not
 * checked: endpoints differ in what start > end means.
 */
int sm_time_check_range(int64_t start, const char *start_name, int64_t end,
    const char *end_name, struct sm_err *err);

#endif /* SM_ATTIME_H */
