/*
 * clock.c -- the real and the manual clock (clock.h).
 */
#include "clock.h"

const struct sm_clock sm_clock_real = { .c_manual = false };

void
sm_clock_manual_init(struct sm_clock *c, int64_t mono_ns, int64_t unix_ms)
{
	SM_ASSERT(mono_ns > 0);
	c->c_manual = true;
	atomic_init(&c->c_mono_ns, mono_ns);
	atomic_init(&c->c_unix_ms, unix_ms);
}

void
sm_clock_manual_advance(struct sm_clock *c, int64_t ns)
{
	int64_t before;

	SM_ASSERT(c->c_manual && ns >= 0);
	/* The unix reading follows the monotonic one's whole milliseconds,
	 * so sub-millisecond steps add up instead of being lost. */
	before = atomic_fetch_add(&c->c_mono_ns, ns);
	atomic_fetch_add(&c->c_unix_ms, (before + ns) / 1000000 -
	    before / 1000000);
}

int64_t
sm_clock_mono_ns(const struct sm_clock *c)
{
	if (c == NULL || !c->c_manual)
		return (sm_mono_ns());
	return (atomic_load(&c->c_mono_ns));
}

int64_t
sm_clock_unix_ms(const struct sm_clock *c)
{
	if (c == NULL || !c->c_manual)
		return (sm_now_ms());
	return (atomic_load(&c->c_unix_ms));
}

bool
sm_clock_wait_until(const struct sm_clock *c, pthread_cond_t *cv,
    pthread_mutex_t *mu, int64_t deadline_ns)
{
	if (c == NULL || !c->c_manual)
		return (sm_cond_wait_until(cv, mu, deadline_ns));
	for (;;) {
		if (deadline_ns != INT64_MAX &&
		    atomic_load(&c->c_mono_ns) >= deadline_ns)
			return (false);
		/* a real slice: true is a signal (or a spurious wake-up) */
		if (sm_cond_wait_until(cv, mu, sm_mono_ns() +
		    SM_CLOCK_MANUAL_SLICE_MS * 1000000LL))
			return (true);
	}
}

bool
sm_clock_wait_ms(const struct sm_clock *c, pthread_cond_t *cv,
    pthread_mutex_t *mu, int64_t ms)
{
	return (sm_clock_wait_until(c, cv, mu, sm_clock_mono_ns(c) +
	    SM_MAX(ms, 0) * 1000000));
}
