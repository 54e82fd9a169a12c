/*
 * cluster_quorum_test.c -- write quorum and replica loss on the
 * in-process cluster tier (smc_test.h): three ingesters, RF 3.
 */
#include "smc_test.h"

static void
test_quorum(void)
{
	struct smc *c;
	int64_t t = smc_now_s() - 300;
	int st, ok = 0;

	SM_REQUIRE((c = smc_test_cluster(3, 3, NULL)) != NULL);
	SM_CHECK_EQ(smc_put(c, "q.cpu", t, "up", 5), 200);
	ok += 5;

	/* One of three down: a write quorum (2) is left, both before the
	 * ring notices (the dead replica fails fast) and after. */
	smc_ingester_stop(c, 2);
	SM_CHECK_EQ(smc_put(c, "q.cpu", t, "one_down_early", 7), 200);
	ok += 7;
	SM_REQUIRE(smc_wait_ring(c, SMC_TIMEOUT_MS));
	SM_CHECK_EQ(smc_put(c, "q.cpu", t + 20, "one_down", 11), 200);
	ok += 11;
	SMC_CHECK_TOTAL(c, "q.cpu{}", t - 60, t + 60, SMC_CPU_UNIT * ok);

	/* Two of three down: nothing is acknowledged, queries refuse to
	 * answer incompletely. */
	smc_ingester_stop(c, 1);
	st = smc_put(c, "q_early.cpu", t, "two_down_early", 13);
	SM_CHECKF(st == 503, "write with 2 of 3 down, before the ring "
	    "noticed: %d", st);
	SM_REQUIRE(smc_wait_ring(c, SMC_TIMEOUT_MS));
	st = smc_put(c, "q_late.cpu", t, "two_down", 17);
	SM_CHECKF(st == 503, "write with 2 of 3 down: %d", st);
	(void)smc_total(c, "q.cpu{}", t - 60, t + 60, &st);
	SM_CHECKF(st == 503, "query with 2 of 3 down: %d", st);

	/* Both back: every acknowledged write is there exactly once; the
	 * write refused up front reached no ingester. */
	SM_CHECK(smc_test_ingester_start(c, 1));
	SM_CHECK(smc_test_ingester_start(c, 2));
	SM_REQUIRE(smc_wait_ring(c, SMC_TIMEOUT_MS));
	SMC_CHECK_TOTAL(c, "q.cpu{}", t - 60, t + 60, SMC_CPU_UNIT * ok);
	SMC_CHECK_TOTAL(c, "q_late.cpu{}", t - 60, t + 60, 0);
	SM_CHECK_EQ(smc_put(c, "q.cpu", t, "back", 19), 200);
	ok += 19;
	SMC_CHECK_TOTAL(c, "q.cpu{}", t - 60, t + 60, SMC_CPU_UNIT * ok);
	smc_destroy(c);
}

static void
test_replica_loss_and_rejoin(void)
{
	struct smc *c;
	int64_t t = smc_now_s() - 300;
	int ok = 0;

	SM_REQUIRE((c = smc_test_cluster(3, 3, NULL)) != NULL);
	/* ing-0 misses every write of the second round, then rejoins on
	 * the same data dir: it replays the first round and lacks the
	 * second, which is still counted exactly once. */
	ok = smc_test_missed_round(c, "r.cpu", 4, t, 0, "before", 3,
	    "while_down", 100);
	SMC_CHECK_TOTAL(c, "r.cpu{pod=\"p2\"}", t - 60, t + 60,
	    SMC_CPU_UNIT * (3 + 2 + 100 + 2));

	/* Now lose a replica that has everything: the rejoined one (which
	 * does not) and the third still answer in full. */
	SM_REQUIRE(smc_test_ingester_down(c, 1));
	SMC_CHECK_TOTAL(c, "r.cpu{}", t - 60, t + 60, SMC_CPU_UNIT * ok);
	SM_REQUIRE(smc_test_ingester_back(c, 1));
	SMC_CHECK_TOTAL(c, "r.cpu{}", t - 60, t + 60, SMC_CPU_UNIT * ok);
	smc_destroy(c);
}

/*
 * The harness's own failure paths: an unknown flag fails before anything
 * starts; a replication factor the ring refuses fails after the ingesters
 * are up, which must tear them down (ASan's leak check runs at exit).
 */
static void
test_bad_config(void)
{
	static const char *const bad[] = { "-no.such-flag=1", NULL };
	struct smc_cfg cfg = { .ningesters = 2, .rf = 1, .flags = bad };
	struct smc *c = NULL;
	struct sm_err err;

	sm_err_clear(&err);
	SM_CHECK_EQ(smc_start(&cfg, &c, &err), SM_EINVAL);
	SM_CHECK(c == NULL);
	SM_CHECKF(strstr(err.msg, "no.such-flag") != NULL, "%s", err.msg);

	cfg.flags = NULL;
	cfg.rf = 17;
	sm_err_clear(&err);
	SM_CHECK_EQ(smc_start(&cfg, &c, &err), SM_EINVAL);
	SM_CHECK(c == NULL);
	SM_CHECKF(strstr(err.msg, "replication-factor") != NULL, "%s",
	    err.msg);
}

SM_TEST_MAIN(
	{ "harness: a bad configuration fails cleanly", test_bad_config },
	{ "quorum: 1 of 3 down writes, 2 of 3 down is 503",
	    test_quorum },
	{ "replica loss and rejoin: counted once",
	    test_replica_loss_and_rejoin },
)
