/*
 * sm_test_clock.h -- driving a background thread that waits on a manual
 * clock (common/clock.h) from a test (header-only, like sm_test.h).
 */
#ifndef SM_TEST_CLOCK_H
#define SM_TEST_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "common/clock.h"

/*
 * Let n more of a thread's periodic steps run (count(arg) is how many
 * have), moving clk by `step` ns at a time, and wait (at most 10 s) until
 * they have.  A clock step that came while the thread was still busy is
 * spent on nothing, so it is repeated after 200 ms without progress; the
 * clock moves at most n steps otherwise.
 */
static inline bool
sm_test_clock_steps(struct sm_clock *clk, int64_t step, uint64_t n,
    uint64_t (*count)(const void *), const void *arg)
{
	uint64_t want = count(arg) + n, seen = count(arg);

	sm_clock_manual_advance(clk, step);
	for (int i = 0, idle = 0; i < 10000; i++, idle++) {
		uint64_t now = count(arg);

		if (now >= want)
			return (true);
		if (now != seen || idle == 200) {
			seen = now;
			idle = 0;
			sm_clock_manual_advance(clk, step);
		}
		usleep(1000);
	}
	return (false);
}

#endif /* SM_TEST_CLOCK_H */
