/*
 * push_test.c -- the active-series limit an ingester is sent
 * (dist_series_limit, push.c): Cortex's global-to-local conversion, the
 * local limit, and the edges (fewer members than RF, rounding, none).
 */
#include "distributor/dist_int.h"

#include "sm_test.h"

static void
test_series_limit(void)
{
	/* No limits: none. */
	SM_CHECK_EQ(dist_series_limit(0, 0, 3, 3), 0);
	/* One binary: the global limit itself. */
	SM_CHECK_EQ(dist_series_limit(50, 0, 1, 1), 50);
	/* 3 ingesters, RF 3: each holds every series. */
	SM_CHECK_EQ(dist_series_limit(50, 0, 3, 3), 50);
	/* 6 ingesters, RF 3: half of the series each. */
	SM_CHECK_EQ(dist_series_limit(5000, 0, 6, 3), 2500);
	/* 4 ingesters, RF 1: a quarter, rounded down. */
	SM_CHECK_EQ(dist_series_limit(10, 0, 4, 1), 2);
	/* Fewer healthy ingesters than RF: never above the global limit
	 * (Pyroscope's global / n * RF would give 75). */
	SM_CHECK_EQ(dist_series_limit(50, 0, 2, 3), 50);
	/* Rounding never turns a limit into "no limit". */
	SM_CHECK_EQ(dist_series_limit(1, 0, 10, 1), 1);
	/* The lower of local and converted global applies. */
	SM_CHECK_EQ(dist_series_limit(5000, 100, 6, 3), 100);
	SM_CHECK_EQ(dist_series_limit(60, 100, 6, 3), 30);
	SM_CHECK_EQ(dist_series_limit(0, 100, 6, 3), 100);
	/* No healthy ingester: the global limit is ignored (Pyroscope). */
	SM_CHECK_EQ(dist_series_limit(50, 0, 0, 3), 0);
	SM_CHECK_EQ(dist_series_limit(50, 7, 0, 3), 7);
	/* No overflow near UINT32_MAX. */
	SM_CHECK_EQ(dist_series_limit(UINT32_MAX, 0, 3, 3), UINT32_MAX);
}

SM_TEST_MAIN(
	{ "global series limit converted to an ingester's", test_series_limit },
)
