/*
 * gate_test.c -- the rules of gate.h: a tenant at its limit is refused
 * with SM_ELIMIT while others go on, 0 means no limit, every enter pairs
 * with its leave even when the limit changes between them, free slots are
 * reused, and under threads no tenant ever runs more than its limit.
 */
#include "querier/gate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sm_test.h"

static void
test_limit(void)
{
	struct qry_gate g;
	struct sm_err err = { 0 };

	qry_gate_init(&g);
	SM_CHECK_EQ(qry_gate_enter(&g, "a", 2, &err), 0);
	SM_CHECK_EQ(qry_gate_enter(&g, "a", 2, &err), 0);
	SM_CHECK_EQ(qry_gate_enter(&g, "a", 2, &err), SM_ELIMIT);
	SM_CHECKF(strstr(err.msg, "too many concurrent queries for tenant a")
	    != NULL, "%s", err.msg);
	SM_CHECK_EQ(qry_gate_inflight(&g, "a"), 2);
	/* Another tenant is not affected. */
	SM_CHECK_EQ(qry_gate_enter(&g, "b", 2, &err), 0);
	SM_CHECK_EQ(qry_gate_inflight(&g, "b"), 1);
	/* One leaves: one more is admitted. */
	qry_gate_leave(&g, "a");
	SM_CHECK_EQ(qry_gate_enter(&g, "a", 2, &err), 0);
	/* 0 (or less): no limit, still counted. */
	for (int i = 0; i < 100; i++)
		SM_CHECK_EQ(qry_gate_enter(&g, "a", 0, &err), 0);
	SM_CHECK_EQ(qry_gate_inflight(&g, "a"), 102);
	/* A limit lowered while queries run: refused until under it. */
	SM_CHECK_EQ(qry_gate_enter(&g, "a", 1, &err), SM_ELIMIT);
	for (int i = 0; i < 102; i++)
		qry_gate_leave(&g, "a");
	SM_CHECK_EQ(qry_gate_inflight(&g, "a"), 0);
	SM_CHECK_EQ(qry_gate_enter(&g, "a", 1, &err), 0);
	qry_gate_leave(&g, "a");
	qry_gate_leave(&g, "b");
	SM_CHECK_EQ(g.n, 0);
	qry_gate_fini(&g);
}

static void
test_slots(void)
{
	struct qry_gate g;
	struct sm_err err = { 0 };
	char t[32];

	qry_gate_init(&g);
	for (int i = 0; i < 100; i++) {
		snprintf(t, sizeof(t), "t%d", i);
		SM_CHECK_EQ(qry_gate_enter(&g, t, 1, &err), 0);
	}
	SM_CHECK_EQ(g.n, 100);
	/* Free slots in the middle are reused, the tail is dropped. */
	qry_gate_leave(&g, "t10");
	SM_CHECK_EQ(qry_gate_enter(&g, "new", 1, &err), 0);
	SM_CHECK_EQ(g.n, 100);
	SM_CHECK_STR(g.v[10].tenant, "new");
	for (int i = 0; i < 100; i++) {
		snprintf(t, sizeof(t), "t%d", i);
		if (i != 10)
			qry_gate_leave(&g, t);
	}
	SM_CHECK_EQ(g.n, 11);
	qry_gate_leave(&g, "new");
	SM_CHECK_EQ(g.n, 0);
	/* An allocation failure is SM_ENOMEM and changes nothing. */
	qry_gate_fini(&g);
	qry_gate_init(&g);
	sm_fault_alloc_after(1);
	SM_CHECK_EQ(qry_gate_enter(&g, "a", 1, &err), SM_ENOMEM);
	sm_fault_alloc_after(0);
	SM_CHECK_EQ(qry_gate_inflight(&g, "a"), 0);
	SM_CHECK_EQ(qry_gate_enter(&g, "a", 1, &err), 0);
	qry_gate_leave(&g, "a");
	qry_gate_fini(&g);
}

#define NTHREADS 8
#define LIMIT 3

static struct qry_gate tg;
static atomic_int running[2], peak[2], refused;

static void *
worker(void *arg)
{
	int k = (int)(intptr_t)arg % 2;
	const char *tenant = k == 0 ? "x" : "y";
	struct sm_err err;

	for (int i = 0; i < 300; i++) {
		int now;

		if (qry_gate_enter(&tg, tenant, LIMIT, &err) != 0) {
			atomic_fetch_add(&refused, 1);
			continue;
		}
		now = atomic_fetch_add(&running[k], 1) + 1;
		for (int p = atomic_load(&peak[k]); now > p &&
		    !atomic_compare_exchange_weak(&peak[k], &p, now);)
			;
		usleep(100);    /* a query runs a while */
		atomic_fetch_sub(&running[k], 1);
		qry_gate_leave(&tg, tenant);
	}
	return (NULL);
}

static void
test_threads(void)
{
	pthread_t th[NTHREADS];

	qry_gate_init(&tg);
	for (intptr_t i = 0; i < NTHREADS; i++)
		SM_REQUIRE(pthread_create(&th[i], NULL, worker, (void *)i) ==
		    0);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	SM_CHECKF(atomic_load(&peak[0]) <= LIMIT && atomic_load(&peak[1]) <=
	    LIMIT, "peaks %d, %d over %d", atomic_load(&peak[0]),
	    atomic_load(&peak[1]), LIMIT);
	/* 4 threads per tenant, limit 3: some were refused. */
	SM_CHECK(atomic_load(&refused) > 0);
	SM_CHECK_EQ(qry_gate_inflight(&tg, "x"), 0);
	SM_CHECK_EQ(qry_gate_inflight(&tg, "y"), 0);
	printf("# %d refusals over %d attempts\n", atomic_load(&refused),
	    NTHREADS * 300);
	qry_gate_fini(&tg);
}

SM_TEST_MAIN(
	{ "limit per tenant; others unaffected; 0 = none; lowered limit",
	    test_limit },
	{ "slots: reused in the middle, dropped at the tail; ENOMEM",
	    test_slots },
	{ "threads: no tenant ever over its limit", test_threads },
)
