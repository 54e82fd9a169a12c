/*
 * cluster_handoff_test.c -- replica placement beyond RF members on the
 * in-process cluster tier (smc_test.h).
 */
#include "smc_test.h"

/*
 * Five ingesters, RF 3: with one down, a series it replicates is written
 * to the next healthy token owner instead (sm_ring_replicas), so after it
 * rejoins four ingesters hold parts of the series in different
 * combinations; every series still counts once, with all five up and with
 * any one of them down.
 */
static void
test_handoff_five(void)
{
	struct smc *c;
	int64_t t = smc_now_s() - 300;
	int ok = 0;

	SM_REQUIRE((c = smc_test_cluster(5, 3, NULL)) != NULL);
	ok = smc_test_missed_round(c, "h.cpu", 10, t, 3, "first", 1,
	    "second", 20);
	for (unsigned down = 0; down < 5; down++) {
		SM_REQUIRE(smc_test_ingester_down(c, down));
		SMC_CHECK_TOTAL(c, "h.cpu{}", t - 60, t + 60,
		    SMC_CPU_UNIT * ok);
		SMC_CHECK_TOTAL(c, "h.cpu{pod=\"p7\"}", t - 60, t + 60,
		    SMC_CPU_UNIT * (1 + 7 + 20 + 7));
		SM_REQUIRE(smc_test_ingester_back(c, down));
	}
	smc_destroy(c);
}

SM_TEST_MAIN(
	{ "5 ingesters: handoff to the next owner, counted once",
	    test_handoff_five },
)
