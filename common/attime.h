/*
 * attime.h -- Pyroscope's "attime" time parameters (spec §2), used by
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
 * Deviation, on purpose: og Pyroscope silently used "now" for text it
 * could not parse; Smolder answers 400 instead, because a typo in a time
 * range otherwise returns a plausible but wrong flamegraph.
 */
#ifndef SM_ATTIME_H
#define SM_ATTIME_H

#include "sm.h"

/*
 * Parse `s` relative to `now_ms`; store unix milliseconds in *out_ms.
 * Returns 0 or SM_EINVAL ("invalid time '<s>'" in err).  Values are
 * truncated toward zero when converted to ms (ns/us inputs).
 */
int sm_attime_parse(const char *s, int64_t now_ms, int64_t *out_ms,
    struct sm_err *err);

#endif /* SM_ATTIME_H */
