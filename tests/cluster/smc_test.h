/*
 * smc_test.h -- checks shared by the in-process cluster tests
 * (tests/cluster/cluster_*_test.c): the harness is sm_cluster.h, the
 * test runner tests/sm_test.h.
 *
 * Every total the tests compare is exact: the sum of the folded values
 * written, scaled as /render reports cpu samples (SMC_CPU_UNIT per
 * sample), so a replica counted twice or a write lost shows as a wrong
 * number.  Writes that got a 5xx are sent under their own service name
 * and never counted in the exact totals (a write refused after reaching
 * one replica may legitimately surface later; nothing promises it does
 * not).
 */
#ifndef SMC_TEST_H
#define SMC_TEST_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sm_cluster.h"
#include "sm_test.h"

#include "common/metrics.h"

/* Longest wait for the ring to see a stop or a (re)start. */
#define SMC_TIMEOUT_MS 20000

/*
 * What /render reports for one folded sample of a legacy ".cpu" app at
 * the default sampleRate: 100 Hz, so 10 ms, in nanoseconds (the type is
 * process_cpu:cpu:nanoseconds; docs/wire-formats.md §6).
 * cluster_dedup_test.c checks it against a single RF 1 ingester.
 */
#define SMC_CPU_UNIT 10000000LL

static inline int64_t
smc_now_s(void)
{
	return (sm_now_ms() / 1000);
}

/* Start a cluster; on failure record it and return NULL. */
static inline struct smc *
smc_test_cluster(unsigned n, unsigned rf, const char *const *flags)
{
	struct smc_cfg cfg = { .ningesters = n, .rf = rf, .flags = flags };
	struct smc *c = NULL;
	struct sm_err err;

	sm_err_clear(&err);
	if (smc_start(&cfg, &c, &err) != 0) {
		SM_TEST_FAILF("cluster of %u (RF %u): %s", n, rf, err.msg);
		return (NULL);
	}
	return (c);
}

/* Start ingester i again; on failure record why and return false. */
static inline bool
smc_test_ingester_start(struct smc *c, unsigned i)
{
	struct sm_err err;

	sm_err_clear(&err);
	if (smc_ingester_start(c, i, &err) != 0) {
		SM_TEST_FAILF("start ingester %u: %s", i, err.msg);
		return (false);
	}
	return (true);
}

/* Stop ingester i and wait for the ring to see it gone; false (and why)
 * when it does not. */
static inline bool
smc_test_ingester_down(struct smc *c, unsigned i)
{
	smc_ingester_stop(c, i);
	if (!smc_wait_ring(c, SMC_TIMEOUT_MS)) {
		SM_TEST_FAILF("the ring did not settle without ingester %u", i);
		return (false);
	}
	return (true);
}

/* Start ingester i again and wait for the ring to see it; false (and
 * why) when either fails. */
static inline bool
smc_test_ingester_back(struct smc *c, unsigned i)
{
	if (!smc_test_ingester_start(c, i))
		return (false);
	if (!smc_wait_ring(c, SMC_TIMEOUT_MS)) {
		SM_TEST_FAILF("the ring did not settle with ingester %u", i);
		return (false);
	}
	return (true);
}

/* Write `count` samples of main;work;<leaf> at t; returns the status. */
static inline int
smc_put(struct smc *c, const char *app, int64_t t, const char *leaf,
    int count)
{
	char body[128];

	snprintf(body, sizeof(body), "main;work;%s %d\n", leaf, count);
	return (smc_ingest(c, app, t, body));
}

/*
 * Write the series <name>{pod=p0} .. <name>{pod=p<n-1>} at t, pod i with
 * base + i samples of main;work;<leaf>, each checked for a 200.  Returns
 * the samples sent: a refused write is already a failure, so the caller's
 * exact totals may count it.
 */
static inline int
smc_put_pods(struct smc *c, const char *name, unsigned n, int64_t t,
    const char *leaf, int base)
{
	int sum = 0;

	for (unsigned i = 0; i < n; i++) {
		char app[64];
		int st;

		snprintf(app, sizeof(app), "%s{pod=p%u}", name, i);
		st = smc_put(c, app, t, leaf, base + (int)i);
		SM_CHECKF(st == 200, "put %s (%s): status %d", app, leaf, st);
		sum += base + (int)i;
	}
	return (sum);
}

/* The /render total (-1 unless 200), the status in *status. */
static inline int64_t
smc_total(struct smc *c, const char *query, int64_t from, int64_t until,
    int *status)
{
	int64_t v = -1;

	*status = smc_render_total(c, query, from, until, &v);
	return (*status == 200 ? v : -1);
}

/* Status and total in one check, with both printed on failure. */
#define SMC_CHECK_TOTAL(c, q, from, until, want)                            \
	do {                                                                \
		int st_;                                                    \
		int64_t got_ = smc_total((c), (q), (from), (until), &st_); \
		SM_CHECKF(st_ == 200 && got_ == (int64_t)(want),            \
		    "%s: status %d total %lld, want 200 and %lld", (q), st_, \
		    (long long)got_, (long long)(want));                    \
	} while (0)

/*
 * The outage both the handoff and the quorum tests start with: a round of
 * smc_put_pods(name, n, leaf1, base1) at t, ingester `down` stopped, a
 * second round (leaf2, base2) it misses; the total of name{} is checked
 * with it down, then again once it is back on its own data dir.  Returns
 * the samples written.  A ring that does not settle ends the test.
 */
static inline int
smc_test_missed_round(struct smc *c, const char *name, unsigned n,
    int64_t t, unsigned down, const char *leaf1, int base1,
    const char *leaf2, int base2)
{
	char q[64];
	int ok = 0;

	snprintf(q, sizeof(q), "%s{}", name);
	ok += smc_put_pods(c, name, n, t, leaf1, base1);
	SM_REQUIRE(smc_test_ingester_down(c, down));
	ok += smc_put_pods(c, name, n, t, leaf2, base2);
	SMC_CHECK_TOTAL(c, q, t - 60, t + 60, SMC_CPU_UNIT * ok);
	SM_REQUIRE(smc_test_ingester_back(c, down));
	SMC_CHECK_TOTAL(c, q, t - 60, t + 60, SMC_CPU_UNIT * ok);
	return (ok);
}

/* A process-wide counter's value (the tier shares the registry). */
static inline double
smc_counter(const char *name)
{
	struct sm_metric *m = sm_metric_register(SM_METRIC_COUNTER, name,
	    "", NULL, NULL, 0);

	return (sm_metric_value(sm_metric_child0(m)));
}

/* The distributor's smolder_distributor_hints gauge (distributor/hints.h):
 * writes waiting for a replica that missed them. */
static inline double
smc_hints_waiting(void)
{
	struct sm_metric *m = sm_metric_register(SM_METRIC_GAUGE,
	    "smolder_distributor_hints", "", NULL, NULL, 0);

	return (m != NULL ? sm_metric_value(sm_metric_child0(m)) : -1);
}

/* Wait until no hint waits (delivered or given up); false on timeout. */
static inline bool
smc_hints_drained(void)
{
	int64_t end = sm_mono_ns() + (int64_t)SMC_TIMEOUT_MS * 1000000;
	double v = -1;

	while (sm_mono_ns() < end) {
		if ((v = smc_hints_waiting()) == 0)
			return (true);
		usleep(20 * 1000);
	}
	fprintf(stderr, "    smolder_distributor_hints: %g\n", v);
	return (false);
}

#endif /* SMC_TEST_H */
