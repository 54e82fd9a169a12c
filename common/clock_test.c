/*
 * clock_test.c -- the real and the manual clock (clock.h): readings,
 * advances from several threads, and waits that end on a signal or when
 * the clock reaches their deadline.
 */
#include "common/clock.h"

#include <pthread.h>
#include <stdatomic.h>

#include "sm_test.h"

#define MS 1000000LL

static void
test_real(void)
{
	int64_t m0 = sm_mono_ns(), u0 = sm_now_ms();
	int64_t m = sm_clock_mono_ns(NULL), u = sm_clock_unix_ms(NULL);

	SM_CHECK(m >= m0 && m - m0 < 1000 * MS);
	SM_CHECK(u >= u0 && u - u0 < 1000);
	m = sm_clock_mono_ns(&sm_clock_real);
	SM_CHECK(m >= m0 && m - m0 < 1000 * MS);
	SM_CHECK(sm_clock_unix_ms(&sm_clock_real) >= u0);
}

static void
test_manual(void)
{
	struct sm_clock c;

	sm_clock_manual_init(&c, 5 * MS, 1700000000000LL);
	SM_CHECK_EQ(sm_clock_mono_ns(&c), 5 * MS);
	SM_CHECK_EQ(sm_clock_unix_ms(&c), 1700000000000LL);
	sm_clock_manual_advance(&c, 2 * MS);
	SM_CHECK_EQ(sm_clock_mono_ns(&c), 7 * MS);
	SM_CHECK_EQ(sm_clock_unix_ms(&c), 1700000000002LL);
	/* Sub-millisecond steps add up on the unix reading too. */
	for (int i = 0; i < 4; i++)
		sm_clock_manual_advance(&c, MS / 4);
	SM_CHECK_EQ(sm_clock_mono_ns(&c), 8 * MS);
	SM_CHECK_EQ(sm_clock_unix_ms(&c), 1700000000003LL);
	sm_clock_manual_advance(&c, 0);
	SM_CHECK_EQ(sm_clock_mono_ns(&c), 8 * MS);
}

struct adv {
	struct sm_clock *c;
};

static void *
adv_main(void *arg)
{
	struct adv *a = arg;

	for (int i = 0; i < 10000; i++)
		sm_clock_manual_advance(a->c, 1000);
	return (NULL);
}

/* Advances from several threads are all counted. */
static void
test_manual_threads(void)
{
	struct sm_clock c;
	struct adv a = { &c };
	pthread_t th[4];

	sm_clock_manual_init(&c, 1, 0);
	for (int i = 0; i < 4; i++)
		SM_REQUIRE(pthread_create(&th[i], NULL, adv_main, &a) == 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	SM_CHECK_EQ(sm_clock_mono_ns(&c), 1 + 4 * 10000 * 1000LL);
	SM_CHECK_EQ(sm_clock_unix_ms(&c), 40);
}

struct waiter {
	const struct sm_clock *c;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int64_t deadline_ns;
	bool go;                        /* under mu */
	atomic_int state;               /* 0 waiting, 1 signalled, 2 timed out */
};

static void *
wait_main(void *arg)
{
	struct waiter *w = arg;
	bool woke = true;

	pthread_mutex_lock(&w->mu);
	while (!w->go && (woke = sm_clock_wait_until(w->c, &w->cv, &w->mu,
	    w->deadline_ns)))
		;
	pthread_mutex_unlock(&w->mu);
	atomic_store(&w->state, woke ? 1 : 2);
	return (NULL);
}

static void
waiter_init(struct waiter *w, const struct sm_clock *c, int64_t deadline)
{
	w->c = c;
	pthread_mutex_init(&w->mu, NULL);
	sm_cond_init(&w->cv);
	w->deadline_ns = deadline;
	w->go = false;
	atomic_init(&w->state, 0);
}

static void
waiter_fini(struct waiter *w)
{
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
}

/* Poll (at most 10 s) until the waiter ended. */
static int
waiter_end(struct waiter *w)
{
	for (int i = 0; i < 10000 && atomic_load(&w->state) == 0; i++)
		usleep(1000);
	return (atomic_load(&w->state));
}

/* A waiter on c with this deadline ends at a signal, signalled (1). */
static void
check_signal_ends_wait(const struct sm_clock *c, int64_t deadline)
{
	struct waiter w;
	pthread_t th;

	waiter_init(&w, c, deadline);
	SM_REQUIRE(pthread_create(&th, NULL, wait_main, &w) == 0);
	pthread_mutex_lock(&w.mu);
	w.go = true;
	pthread_cond_signal(&w.cv);
	pthread_mutex_unlock(&w.mu);
	SM_CHECK_EQ(waiter_end(&w), 1);
	pthread_join(th, NULL);
	waiter_fini(&w);
}

/*
 * A manual clock's wait ends when the clock reaches its deadline, however
 * little real time passed, and never before; a signal ends it early.
 */
static void
test_manual_wait(void)
{
	struct sm_clock c;
	struct waiter w;
	pthread_t th;

	sm_clock_manual_init(&c, 1000 * MS, 0);
	/* a deadline already reached: false at once */
	waiter_init(&w, &c, 1000 * MS);
	pthread_mutex_lock(&w.mu);
	SM_CHECK(!sm_clock_wait_until(&c, &w.cv, &w.mu, 1000 * MS));
	SM_CHECK(!sm_clock_wait_ms(&c, &w.cv, &w.mu, 0));
	pthread_mutex_unlock(&w.mu);
	waiter_fini(&w);

	/* an hour of clock time, reached in two advances */
	waiter_init(&w, &c, sm_clock_mono_ns(&c) + 3600000 * MS);
	SM_REQUIRE(pthread_create(&th, NULL, wait_main, &w) == 0);
	sm_clock_manual_advance(&c, 3600000 * MS - 1);
	/* one nanosecond short: still waiting after several slices */
	usleep(20 * 1000);
	SM_CHECK_EQ(atomic_load(&w.state), 0);
	sm_clock_manual_advance(&c, 1);
	SM_CHECK_EQ(waiter_end(&w), 2);
	pthread_join(th, NULL);
	waiter_fini(&w);

	/* a signal ends it with the clock standing still */
	check_signal_ends_wait(&c, sm_clock_mono_ns(&c) + 1000 * MS);
}

/* The real clock's wait is sm_cond_wait_until's: a past deadline is false
 * at once, a signal true. */
static void
test_real_wait(void)
{
	struct waiter w;

	waiter_init(&w, NULL, sm_mono_ns() - 1);
	pthread_mutex_lock(&w.mu);
	SM_CHECK(!sm_clock_wait_until(NULL, &w.cv, &w.mu, w.deadline_ns));
	SM_CHECK(!sm_clock_wait_ms(NULL, &w.cv, &w.mu, 0));
	pthread_mutex_unlock(&w.mu);
	waiter_fini(&w);

	check_signal_ends_wait(&sm_clock_real, INT64_MAX);
}

SM_TEST_MAIN(
	{ "real clock: NULL and sm_clock_real read the system clocks",
	    test_real },
	{ "manual clock: moves only when advanced, both readings together",
	    test_manual },
	{ "manual clock: advances from several threads all count",
	    test_manual_threads },
	{ "manual clock waits: end at the deadline, not before; a signal "
	    "ends them", test_manual_wait },
	{ "real clock waits: past deadline at once, a signal", test_real_wait },
)
