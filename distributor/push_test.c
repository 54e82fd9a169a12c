/*
 * push_test.c -- the active-series limit an ingester is sent
 * (dist_series_limit, push.c): Cortex's global-to-local conversion, the
 * local limit, and the edges (fewer members than RF, rounding, none).
 */
#include "distributor/dist_int.h"

#include "sm_test.h"

/* dist_series_limit(global, local, nhealthy, rf) == want, and why. */
static const struct {
	uint32_t global, local, nhealthy, rf, want;
	const char *why;
} limit_cases[] = {
	{ 0, 0, 3, 3, 0, "no limits: none" },
	{ 50, 0, 1, 1, 50, "one binary: the global limit itself" },
	{ 50, 0, 3, 3, 50, "3 ingesters, RF 3: each holds every series" },
	{ 5000, 0, 6, 3, 2500, "6 ingesters, RF 3: half of the series each" },
	{ 10, 0, 4, 1, 2, "4 ingesters, RF 1: a quarter, rounded down" },
	{ 50, 0, 2, 3, 50, "fewer healthy ingesters than RF: never above "
	    "the global limit (Pyroscope's global / n * RF would give 75)" },
	{ 1, 0, 10, 1, 1, "rounding never turns a limit into \"no limit\"" },
	{ 5000, 100, 6, 3, 100, "the lower of local and converted global "
	    "applies" },
	{ 60, 100, 6, 3, 30, "the converted global, lower than local" },
	{ 0, 100, 6, 3, 100, "the local limit alone" },
	{ 50, 0, 0, 3, 0, "no healthy ingester: the global limit is ignored "
	    "(Pyroscope)" },
	{ 50, 7, 0, 3, 7, "no healthy ingester: the local limit stays" },
	{ UINT32_MAX, 0, 3, 3, UINT32_MAX, "no overflow near UINT32_MAX" },
};

static void
test_series_limit(void)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(limit_cases); i++) {
		uint32_t got = dist_series_limit(limit_cases[i].global,
		    limit_cases[i].local, limit_cases[i].nhealthy,
		    limit_cases[i].rf);

		SM_CHECKF(got == limit_cases[i].want, "%s: got %u, want %u",
		    limit_cases[i].why, got, limit_cases[i].want);
	}
}

SM_TEST_MAIN(
	{ "global series limit converted to an ingester's", test_series_limit },
)
