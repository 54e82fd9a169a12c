/*
 * log.c -- see log.h.
 */

#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = SM_LOG_INFO;

static const char *const log_names[] = { "debug", "info", "warn", "error" };

int
sm_log_parse_level(const char *s, enum sm_log_level *out)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(log_names); i++) {
		if (strcmp(s, log_names[i]) == 0) {
			*out = (enum sm_log_level)i;
			return (0);
		}
	}
	return (SM_EINVAL);
}

void
sm_log_set_level(enum sm_log_level lvl)
{
	atomic_store(&log_level, (int)lvl);
}

int
sm_log_enabled(enum sm_log_level lvl)
{
	return ((int)lvl >= atomic_load_explicit(&log_level,
	    memory_order_relaxed));
}

void
sm_log(enum sm_log_level lvl, const char *component, const char *fmt, ...)
{
	char line[2048], msg[1536];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	size_t n = 0;
	char *extra;
	ssize_t w;

	if (!sm_log_enabled(lvl))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	extra = strchr(msg, '\t');
	if (extra != NULL)
		*extra++ = '\0';

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n += strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
	n += (size_t)snprintf(line + n, sizeof(line) - n,
	    ".%03ldZ level=%s component=%s msg=\"", ts.tv_nsec / 1000000,
	    log_names[lvl], component);
	/* Quote the message: escape " and \ and control bytes. */
	for (const char *p = msg; *p != '\0' && n < sizeof(line) - 8; p++) {
		unsigned char c = (unsigned char)*p;

		if (c == '"' || c == '\\') {
			line[n++] = '\\';
			line[n++] = (char)c;
		} else if (c < 0x20) {
			line[n++] = ' ';
		} else {
			line[n++] = (char)c;
		}
	}
	if (n < sizeof(line) - 2)
		line[n++] = '"';
	if (extra != NULL && n < sizeof(line) - 2) {
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %s",
		    extra);
		if (n > sizeof(line) - 2)
			n = sizeof(line) - 2;
	}
	line[n++] = '\n';
	w = write(STDERR_FILENO, line, n);
	(void)w;
}

bool
sm_log_limit_ok(struct sm_log_limit *l, uint32_t per_sec,
    uint64_t *suppressed)
{
	int64_t now = sm_clock_mono_ns(l->clock) / 1000000000;

	*suppressed = 0;
	if (atomic_load_explicit(&l->sec, memory_order_relaxed) != now) {
		atomic_store_explicit(&l->sec, now, memory_order_relaxed);
		atomic_store_explicit(&l->n, 0, memory_order_relaxed);
	}
	if (atomic_fetch_add_explicit(&l->n, 1, memory_order_relaxed) >=
	    per_sec) {
		atomic_fetch_add_explicit(&l->dropped, 1,
		    memory_order_relaxed);
		return (false);
	}
	*suppressed = atomic_exchange_explicit(&l->dropped, 0,
	    memory_order_relaxed);
	return (true);
}
