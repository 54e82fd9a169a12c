/*
 * cluster_dedup_test.c -- replica de-duplication on the in-process
 * cluster tier (smc_test.h): RF 3 over three ingesters answers exactly
 * what RF 1 over one does, and replicas that each missed a different
 * write still count every upload once.
 */
#include "smc_test.h"

static void
test_dedup_equals_single(void)
{
	static const char *const queries[] = {
		"dd.cpu{}",
		"dd.cpu{env=\"prod\"}",
		"dd.cpu{env=~\"prod|dev\",zone!=\"b\"}",
		"other.cpu{}",
	};
	struct smc *one, *three;
	int64_t t = smc_now_s() - 600, a[SM_ARRAY_LEN(queries)];
	int st;

	SM_REQUIRE((one = smc_test_cluster(1, 1, NULL)) != NULL);
	three = smc_test_cluster(3, 3, NULL);
	if (three == NULL) {
		smc_destroy(one);
		SM_REQUIRE(three != NULL);
	}
	/* Several series, buckets 60 s apart, two apps. */
	for (int i = 0; i < 12; i++) {
		char app[96], leaf[16];
		int64_t at = t + 60 * (i % 4);

		snprintf(app, sizeof(app), "%s{env=%s,zone=%s}",
		    i % 4 == 3 ? "other.cpu" : "dd.cpu",
		    i % 2 ? "prod" : "dev", i % 3 ? "a" : "b");
		snprintf(leaf, sizeof(leaf), "f%d", i % 5);
		SM_CHECK_EQ(smc_put(one, app, at, leaf, i + 1), 200);
		SM_CHECK_EQ(smc_put(three, app, at, leaf, i + 1), 200);
	}
	/* The single ingester holds 1 + ... + 12 = 78 samples: other.cpu
	 * got i = 3, 7, 11 (4 + 8 + 12 = 24 samples), dd.cpu the rest. */
	SMC_CHECK_TOTAL(one, "dd.cpu{}", t - 60, t + 600,
	    SMC_CPU_UNIT * (78 - 24));
	SMC_CHECK_TOTAL(one, "other.cpu{}", t - 60, t + 600,
	    SMC_CPU_UNIT * 24);
	for (size_t q = 0; q < SM_ARRAY_LEN(queries); q++) {
		a[q] = smc_total(one, queries[q], t - 60, t + 600, &st);
		SM_CHECK_EQ(st, 200);
		SMC_CHECK_TOTAL(three, queries[q], t - 60, t + 600, a[q]);
	}
	SM_CHECK(a[2] > 0 && a[2] < a[0]);
	smc_destroy(three);
	smc_destroy(one);
}

/*
 * All three get A; ing-0 misses B (down); ing-1 misses C (down); ing-2
 * has all.  One series, one bucket: without hints the replicas' counts
 * for it are 2, 2 and 3 and the plan takes the divergent path; with hints
 * (distributor/hints.h) each replica gets what it missed once it is back.
 */
static struct smc *
divergent_history(const char *const *flags, int64_t t)
{
	struct smc *c;

	if ((c = smc_test_cluster(3, 3, flags)) == NULL)
		return (NULL);
	SM_CHECK_EQ(smc_put(c, "dv.cpu", t, "a", 1000), 200);
	SM_REQUIRE(smc_test_ingester_down(c, 0));
	SM_CHECK_EQ(smc_put(c, "dv.cpu", t, "b", 200), 200);
	SM_REQUIRE(smc_test_ingester_back(c, 0));
	SM_REQUIRE(smc_test_ingester_down(c, 1));
	SM_CHECK_EQ(smc_put(c, "dv.cpu", t, "c", 30), 200);
	SM_REQUIRE(smc_test_ingester_back(c, 1));
	return (c);
}

/* Hints off: the plan reads around the divergence. */
static void
test_divergent_replicas(void)
{
	static const char *const flags[] = {
		"-distributor.hints-max-bytes=0", NULL };
	struct smc *c;
	int64_t t = smc_now_s() - 300;
	double div0 = smc_counter("smolder_querier_divergent_series_total");

	SM_REQUIRE((c = divergent_history(flags, t)) != NULL);
	SMC_CHECK_TOTAL(c, "dv.cpu{}", t - 60, t + 60, SMC_CPU_UNIT * 1230);
	SM_CHECKF(smc_counter("smolder_querier_divergent_series_total") > div0,
	    "the query took the divergent path (per-bucket picks)");
	/* With ing-2 (the only complete replica) down the bucket is
	 * answered by a replica with 2 of 3 uploads: what hints repair
	 * (below).  Only its bound is checked. */
	SM_REQUIRE(smc_test_ingester_down(c, 2));
	{
		int st;
		int64_t v = smc_total(c, "dv.cpu{}", t - 60, t + 60, &st);

		SM_CHECK_EQ(st, 200);
		SM_CHECKF(v == SMC_CPU_UNIT * 1200 || v == SMC_CPU_UNIT * 1030,
		    "one of the two partial replicas, whole: %lld",
		    (long long)v);
	}
	smc_destroy(c);
}

/* Hints on (the default): every replica whole again, any two exact. */
static void
test_hints_repair_replicas(void)
{
	struct smc *c;
	int64_t t = smc_now_s() - 300;
	double del0 = smc_counter("smolder_distributor_hints_delivered_total");

	SM_REQUIRE((c = divergent_history(NULL, t)) != NULL);
	SM_CHECK(smc_hints_drained());
	SM_CHECKF(smc_counter("smolder_distributor_hints_delivered_total") >=
	    del0 + 2, "both missed uploads were handed over");
	SMC_CHECK_TOTAL(c, "dv.cpu{}", t - 60, t + 60, SMC_CPU_UNIT * 1230);
	for (unsigned i = 0; i < 3; i++) {
		SM_REQUIRE(smc_test_ingester_down(c, i));
		SMC_CHECK_TOTAL(c, "dv.cpu{}", t - 60, t + 60,
		    SMC_CPU_UNIT * 1230);
		SM_REQUIRE(smc_test_ingester_back(c, i));
	}
	smc_destroy(c);
}

/*
 * A bucket no replica holds whole is answered by a combination of
 * replicas (A + B, querier/plan.c); an upload that lands on both between
 * the plan and the read would count twice.  The plan tells each of them
 * how many uploads it saw there (smolder.v1.Pick.count); a read that
 * finds another number answers "changed since the plan", and the querier
 * plans again, so the answer counts it once.
 *
 * Four ingesters, RF 3, hints off, one series, one bucket.  Uploads a1
 * and a2 reach ing-0 and ing-1 only (ing-2 and ing-3 down), b1 ing-2 and
 * ing-3 only (ing-0 and ing-1 down), b2 ing-1 and ing-2 only (ing-0 and
 * ing-3 down).  So, all four up:
 *
 *   ing-0 {a1 a2}   ing-1 {a1 a2 b2}   ing-2 {b1 b2}   ing-3 {b1}
 *
 * No replica holds all four (the counts differ, so the plan compares
 * ids): the plan takes ing-1 + ing-3 or ing-0 + ing-2.  The hook writes
 * c after that plan and before its read; c reaches three of the four
 * (its owners), so at least one member of the combination: the read
 * finds it changed whichever it is.  The owners follow from the ring's
 * tokens, fixed by the instance ids: for "ef.cpu" c reaches both members,
 * and the answer without the check is a1 + a2 + b1 + b2 + 2c (1814, not
 * 1807).  Whichever one missed c, some pair is still exact for the plan
 * made again.
 */
struct plan_race {
	struct smc *c;              /* NULL: not armed yet */
	int64_t t;
	int plans, status;
};

/* Write c once, after the first plan, and wait until all three of its
 * owners applied it: the put returns at a quorum of two, and a third copy
 * landing after the second plan would be caught too -- a third plan, a
 * correct answer, but not the race this test sets up. */
static void
plan_race_write(void *arg)
{
	struct plan_race *r = arg;
	double w0;
	int64_t end;

	if (r->c == NULL || r->plans++ > 0)
		return;
	w0 = smc_counter("smolder_ingester_writes_total");
	r->status = smc_put(r->c, "ef.cpu", r->t, "c", 7);
	end = sm_mono_ns() + (int64_t)SMC_TIMEOUT_MS * 1000000;
	while (smc_counter("smolder_ingester_writes_total") < w0 + 3 &&
	    sm_mono_ns() < end)
		usleep(2000);
}

static void
test_write_between_plan_and_read(void)
{
	static const char *const flags[] = {
		"-distributor.hints-max-bytes=0", NULL };
	struct plan_race race = { 0 };
	struct smc_cfg cfg = { .ningesters = 4, .rf = 3, .flags = flags,
		.after_plan = plan_race_write, .after_plan_arg = &race };
	struct smc *c = NULL;
	struct sm_err err;
	int64_t t = smc_now_s() - 300;
	double comb0 = smc_counter("smolder_querier_combined_buckets_total");
	double chg0 = smc_counter("smolder_querier_plan_changed_total");

	sm_err_clear(&err);
	if (smc_start(&cfg, &c, &err) != 0) {
		SM_TEST_FAILF("cluster of 4 (RF 3): %s", err.msg);
		return;
	}
	SM_REQUIRE(smc_test_ingester_down(c, 2));
	SM_REQUIRE(smc_test_ingester_down(c, 3));
	SM_CHECK_EQ(smc_put(c, "ef.cpu", t, "a1", 1000), 200);
	SM_CHECK_EQ(smc_put(c, "ef.cpu", t, "a2", 500), 200);
	SM_REQUIRE(smc_test_ingester_back(c, 2));
	SM_REQUIRE(smc_test_ingester_back(c, 3));
	SM_REQUIRE(smc_test_ingester_down(c, 0));
	SM_REQUIRE(smc_test_ingester_down(c, 1));
	SM_CHECK_EQ(smc_put(c, "ef.cpu", t, "b1", 200), 200);
	SM_REQUIRE(smc_test_ingester_back(c, 1));
	SM_REQUIRE(smc_test_ingester_down(c, 3));
	SM_CHECK_EQ(smc_put(c, "ef.cpu", t, "b2", 100), 200);
	SM_REQUIRE(smc_test_ingester_back(c, 0));
	SM_REQUIRE(smc_test_ingester_back(c, 3));
	race.t = t;
	race.c = c;
	SMC_CHECK_TOTAL(c, "ef.cpu{}", t - 60, t + 60, SMC_CPU_UNIT * 1807);
	SM_CHECK_EQ(race.plans, 2);
	SM_CHECK_EQ(race.status, 200);
	SM_CHECKF(smc_counter("smolder_querier_combined_buckets_total") >
	    comb0, "the plan combined two replicas");
	SM_CHECKF(smc_counter("smolder_querier_plan_changed_total") > chg0,
	    "the read found the bucket changed and the query planned again");
	smc_destroy(c);
}

SM_TEST_MAIN(
	{ "RF 3 over 3 ingesters answers what RF 1 over 1 does",
	    test_dedup_equals_single },
	{ "divergent replicas (hints off): each upload once",
	    test_divergent_replicas },
	{ "hints make divergent replicas whole: any two exact",
	    test_hints_repair_replicas },
	{ "a write between the plan and the read counts once",
	    test_write_between_plan_and_read },
)
