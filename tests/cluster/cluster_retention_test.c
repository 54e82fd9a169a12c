/*
 * cluster_retention_test.c -- retention passes (POST /compactor/run, the
 * compactor's own entry point) on the in-process cluster tier
 * (smc_test.h): three ingesters, RF 3, -compactor.blocks-retention-period=1h;
 * data is placed 3 h and 10 min in the past with explicit timestamps.
 */
#include "smc_test.h"

/*
 * POST /compactor/run: 200, `n` ingesters done, none failed; the
 * "blocks_retired" count of its JSON answer, or -1 (the answer printed).
 */
static long
retention_pass(struct smc *c, unsigned n)
{
	struct sm_buf body = SM_BUF_INIT;
	char want[32];
	int st = smc_http(c, "POST", "/compactor/run", NULL, 0, &body);
	const char *p = body.b != NULL ? strstr(body.b,
	    "\"blocks_retired\":") : NULL;
	long retired = -1;

	snprintf(want, sizeof(want), "\"ingesters\":%u,", n);
	if (st == 200 && p != NULL && strstr(body.b, want) != NULL &&
	    strstr(body.b, "\"failed\":0") != NULL)
		retired = strtol(p + 17, NULL, 10);
	else
		fprintf(stderr, "    /compactor/run: %d %s\n", st,
		    body.b != NULL ? body.b : "");
	sm_buf_fini(&body);
	return (retired);
}

static void
test_retention(void)
{
	static const char *const flags[] = {
		"-compactor.blocks-retention-period=1h", NULL,
	};
	struct smc *c;
	int64_t now = smc_now_s(), old = now - 3 * 3600, recent = now - 600;

	SM_REQUIRE((c = smc_test_cluster(3, 3, flags)) != NULL);
	SM_CHECK_EQ(smc_put(c, "ret.cpu", old, "old", 40), 200);
	SM_CHECK_EQ(smc_put(c, "ret.cpu", recent, "recent", 2), 200);
	SMC_CHECK_TOTAL(c, "ret.cpu{}", now - 4 * 3600, now, SMC_CPU_UNIT * 42);

	/* A pass with one ingester down covers the other two. */
	SM_REQUIRE(smc_test_ingester_down(c, 2));
	SM_CHECK(retention_pass(c, 2) >= 0);
	SMC_CHECK_TOTAL(c, "ret.cpu{}", now - 4 * 3600, now, SMC_CPU_UNIT * 2);
	SMC_CHECK_TOTAL(c, "ret.cpu{}", now - 4 * 3600, now - 2 * 3600, 0);

	/* The missed ingester rejoins with the old data: the next pass
	 * (idempotent on the others) completes the job. */
	SM_REQUIRE(smc_test_ingester_back(c, 2));
	SM_CHECK(retention_pass(c, 3) >= 0);
	SMC_CHECK_TOTAL(c, "ret.cpu{}", now - 4 * 3600, now, SMC_CPU_UNIT * 2);

	/* The floor is persisted: a restarted ingester does not serve the
	 * old data again, whichever replicas answer. */
	smc_ingester_stop(c, 0);
	SM_REQUIRE(smc_test_ingester_back(c, 0));
	SM_REQUIRE(smc_test_ingester_down(c, 1));
	SMC_CHECK_TOTAL(c, "ret.cpu{}", now - 4 * 3600, now, SMC_CPU_UNIT * 2);
	smc_destroy(c);
}

/*
 * Blocks, not heads: with 1 s blocks the old upload is cut into a block
 * of its own on every replica, then the recent one into another; the pass
 * deletes exactly the old block on each of the three ingesters, and the
 * recent one is still read from its block.  (The old block was cut at
 * least a block duration before the pass, so it is complete.)
 */
static void
test_retention_blocks(void)
{
	static const char *const flags[] = {
		"-compactor.blocks-retention-period=1h",
		"-ingester.block-duration=1s", NULL,
	};
	struct smc *c;
	int64_t now = smc_now_s(), old = now - 3 * 3600, recent = now - 600;

	SM_REQUIRE((c = smc_test_cluster(3, 3, flags)) != NULL);
	SM_CHECK_EQ(smc_put(c, "rb.cpu", old, "old", 40), 200);
	SM_REQUIRE(smc_wait_heads_cut(c, SMC_TIMEOUT_MS));
	SM_CHECK_EQ(smc_put(c, "rb.cpu", recent, "recent", 2), 200);
	SM_REQUIRE(smc_wait_heads_cut(c, SMC_TIMEOUT_MS));
	SMC_CHECK_TOTAL(c, "rb.cpu{}", now - 4 * 3600, now,
	    SMC_CPU_UNIT * 42);
	SM_CHECK_EQ(retention_pass(c, 3), 3);
	SMC_CHECK_TOTAL(c, "rb.cpu{}", now - 4 * 3600, now,
	    SMC_CPU_UNIT * 2);
	/* Idempotent: nothing more to retire. */
	SM_CHECK_EQ(retention_pass(c, 3), 0);
	SMC_CHECK_TOTAL(c, "rb.cpu{}", now - 4 * 3600, now,
	    SMC_CPU_UNIT * 2);
	smc_destroy(c);
}

SM_TEST_MAIN(
	{ "retention pass drops old data, also on a late replica",
	    test_retention },
	{ "retention pass deletes whole blocks on every replica",
	    test_retention_blocks },
)
