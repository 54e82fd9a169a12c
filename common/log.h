/*
 * log.h -- leveled, thread-safe logging to stderr in logfmt, the format
 * Pyroscope and Grafana's tools emit:
 *
 *   ts=2026-11-21T18:30:00.123Z level=info component=ingester msg="..."
 *
 * The level is global (-log.level=debug|info|warn|error).  A line is built
 * in a local buffer and written with one write(2), so lines from several
 * threads never interleave.
 */
#ifndef SM_LOG_H
#define SM_LOG_H

#include "clock.h"
#include "sm.h"

enum sm_log_level {
	SM_LOG_DEBUG = 0,
	SM_LOG_INFO = 1,
	SM_LOG_WARN = 2,
	SM_LOG_ERROR = 3,
};

/* Parse "debug", "info", "warn" or "error".  Returns 0 or SM_EINVAL. */
int sm_log_parse_level(const char *s, enum sm_log_level *out);

void sm_log_set_level(enum sm_log_level lvl);
int sm_log_enabled(enum sm_log_level lvl);

/*
 * Log one line.  `component` names the module ("distributor"); `fmt` is the
 * message.  Extra key=value pairs are written by the caller inside fmt after
 * a "\t" separator: sm_log(SM_LOG_WARN, "http", "slow request\tpath=%s", p)
 * renders as msg="slow request" path=/render.
 */
void sm_log(enum sm_log_level lvl, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sm_debug(c, ...) \
	do { if (sm_log_enabled(SM_LOG_DEBUG)) sm_log(SM_LOG_DEBUG, c, __VA_ARGS__); } while (0)
#define sm_info(c, ...) sm_log(SM_LOG_INFO, c, __VA_ARGS__)
#define sm_warn(c, ...) sm_log(SM_LOG_WARN, c, __VA_ARGS__)
#define sm_error(c, ...) sm_log(SM_LOG_ERROR, c, __VA_ARGS__)

/*
 * A per-call-site cap on lines per second, for lines an overload repeats
 * once per request (every 503 while an ingester refuses writes over its
 * memory bound, every failed write behind it): the first `per_sec` lines
 * of each second are written, the rest counted, and the next line written
 * carries the count as suppressed=N.  Zero-initialised static storage is
 * ready to use and reads the real clock; `clock` (common/clock.h), set
 * before first use, makes it read another (a test's manual clock, which
 * must outlive it).  Thread-safe (atomics; a line may slip past the cap
 * when two threads cross a second together).
 */
struct sm_log_limit {
	_Atomic int64_t sec;
	_Atomic uint32_t n;
	_Atomic uint64_t dropped;
	const struct sm_clock *clock;   /* NULL: the real clock */
};
/* true: write this line (with *suppressed lines dropped since the last
 * written one); false: drop it. */
bool sm_log_limit_ok(struct sm_log_limit *l, uint32_t per_sec,
    uint64_t *suppressed);

#endif /* SM_LOG_H */
