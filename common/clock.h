/*
 * clock.h -- the clock a component reads time from: the real one, or a
 * manual one a test moves by hand.
 *
 * A component that decides from elapsed time (a token bucket's refill, a
 * heartbeat's age, a lease's margin, a prober's period) reads it through a
 * `const struct sm_clock *` and waits on it with sm_clock_wait_until(), so
 * its unit test can put it at any point in time and check what it does
 * there, instead of sleeping and asserting how long something took.
 *
 * Decision: injection per component, not a process-wide hook.  The clock
 * is a field of the component's config struct (sm_ring_cfg, sm_peers_cfg,
 * sm_watch_conf, dist_config; sm_log_limit, which has no other) or an
 * argument of its constructor where it has none (dist_ratelim_create,
 * sm_etcd_lock_start); NULL means the real clock, so every existing
 * designated initializer keeps its behaviour and production code never
 * names a clock.  Why not one global
 * test hook: a test process runs servers, clients and probers at once
 * (an in-process cluster, libcurl's and nng's own timeouts), and moving
 * time for all of them would fire every timeout in the process; per
 * component, the test moves exactly the time of the thing it checks,
 * and two tests of one binary cannot leak a clock into each other.
 *
 * Readings:
 *   - sm_clock_mono_ns(c): monotonic nanoseconds, as sm_mono_ns();
 *   - sm_clock_unix_ms(c): unix milliseconds, as sm_now_ms() (the test
 *     skew SMOLDER_TEST_CLOCK_SKEW_MS included for the real clock).
 * A manual clock starts where sm_clock_manual_init() puts it and moves
 * only by sm_clock_manual_advance(c, ns), which moves both readings
 * together (by ns, and by ns / 10^6 ms): a manual clock has no wall-clock
 * steps.
 *
 * Waits: sm_clock_wait_until(c, cv, mu, deadline_ns) is sm_cond_wait_until()
 * on the clock's monotonic reading: mu held, it returns true when cv is
 * signalled (or wakes spuriously; callers loop on their own predicate) and
 * false once the clock reached deadline_ns.  cv must have been made with
 * sm_cond_init().  On a manual clock the wait sleeps in real slices of
 * SM_CLOCK_MANUAL_SLICE_MS and looks at the clock between them, so a
 * waiter notices an advance within a slice.  Why polling and not a list of
 * waiters woken by the advance: waking one safely needs the waiter's own
 * mutex (or the wake-up can fall between its look at the clock and its
 * wait), and the advancing test holds none of them; the slice costs a
 * test a millisecond, production nothing.
 *
 * Ownership: the caller owns a manual clock (embedded or static; nothing
 * to free) and keeps it alive while any component reads it.  The real
 * clock is the static sm_clock_real (and NULL).  Locking: none; every
 * function is thread-safe (the manual readings are atomics), so a test
 * advances while component threads read.  Errors: none.
 */
#ifndef SM_CLOCK_H
#define SM_CLOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sm.h"

#define SM_CLOCK_MANUAL_SLICE_MS 1

struct sm_clock {
	bool c_manual;                  /* false: the real clock */
	_Atomic int64_t c_mono_ns;      /* manual: the readings */
	_Atomic int64_t c_unix_ms;
};

/* The real clock; a NULL clock pointer means the same. */
extern const struct sm_clock sm_clock_real;

/*
 * Make `c` a manual clock reading mono_ns (> 0: components take 0 for
 * "never") and unix_ms.  Not thread-safe: before any component reads it.
 */
void sm_clock_manual_init(struct sm_clock *c, int64_t mono_ns,
    int64_t unix_ms);

/* Move manual clock `c` forward by ns (>= 0).  Thread-safe. */
void sm_clock_manual_advance(struct sm_clock *c, int64_t ns);

int64_t sm_clock_mono_ns(const struct sm_clock *c);
int64_t sm_clock_unix_ms(const struct sm_clock *c);

/* Above ("Waits").  deadline_ns INT64_MAX: no deadline. */
bool sm_clock_wait_until(const struct sm_clock *c, pthread_cond_t *cv,
    pthread_mutex_t *mu, int64_t deadline_ns);

/* The same with a deadline ms from now on the clock (ms <= 0: now). */
bool sm_clock_wait_ms(const struct sm_clock *c, pthread_cond_t *cv,
    pthread_mutex_t *mu, int64_t ms);

#endif /* SM_CLOCK_H */
