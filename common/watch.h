/*
 * watch.h -- a configuration file reloaded when it changes.
 *
 * The keys file (auth.c, -auth.keys-file) and the runtime configuration
 * (overrides.c, -runtime-config.file) are both read at start-up and then
 * re-read, without a restart, when an operator replaces or edits them.
 * This module is the one place that decides when to re-read; what a file
 * means stays with its owner, which passes a load function.
 *
 * When: a thread stats the file every period and loads it when its device,
 * inode, size or modification time changed and then stayed the same for
 * one more period, so a file being rewritten in place is not read
 * half-written.  Each change is tried once, whatever the outcome: a file
 * that does not load is logged once per distinct error ("keeping the
 * previous ...": the owner keeps what it had) and tried again when it
 * changes again.  sm_watch_check() looks at once and loads any change
 * without waiting for it to settle (start-up, tests, an admin "reload
 * now").
 *
 * The load function gets the path and returns 0 or an SM_E* code with
 * `err` set; it swaps in what it read under its owner's own lock.  It
 * runs on the watch thread for polls and on the caller's thread for
 * sm_watch_check(), never on both at once for one watch.  The optional
 * result function is called after every attempt that got as far as
 * stat() (0 or the error, not for "unchanged"), for the owner's metrics.
 *
 * Time: the period is waited on conf.clock (common/clock.h; NULL = the
 * real clock), so a test with a manual clock makes the thread poll when it
 * moves the clock and counts the polls (sm_watch_polls) instead of
 * sleeping.
 *
 * Ownership: the watch copies the path; component, what and keeping must
 * outlive it (string literals), and so must a manual clock.
 * Locking: every function is thread-safe; loads are serialized per watch.
 */
#ifndef SM_WATCH_H
#define SM_WATCH_H

#include <stdint.h>

#include "clock.h"
#include "sm.h"

struct sm_watch;

typedef int (*sm_watch_load_fn)(void *arg, const char *path,
    struct sm_err *err);
typedef void (*sm_watch_result_fn)(void *arg, int rv);

struct sm_watch_conf {
	const char *path;         /* the file (required) */
	int64_t period_ms;        /* > 0 */
	const char *component;    /* log component, e.g. "auth" */
	const char *what;         /* in errors: "keys file" */
	const char *keeping;      /* "keeping the previous keys" */
	sm_watch_load_fn load;
	sm_watch_result_fn result; /* NULL: none */
	void *arg;
	const struct sm_clock *clock; /* NULL: the real clock */
};

/*
 * Load the file once now (an error here is returned and nothing is
 * started), then start the polling thread.  SM_EINVAL for a bad
 * configuration, SM_ENOMEM, or the load's error.
 */
int sm_watch_create(const struct sm_watch_conf *conf, struct sm_watch **out,
    struct sm_err *err);

/* Stop the thread and free.  NULL is a no-op. */
void sm_watch_destroy(struct sm_watch *w);

/*
 * Load the file now if it changed since the last attempt (no settling).
 * Returns 0 (loaded or unchanged) or the stat or load error.
 */
int sm_watch_check(struct sm_watch *w, struct sm_err *err);

/*
 * Polls the thread has finished (each one's load, if any, done): a test
 * that moved a manual clock waits for it to grow.  Lock-free.
 */
uint64_t sm_watch_polls(const struct sm_watch *w);

#endif /* SM_WATCH_H */
