/*
 * fuzz_pprof.c -- the pprof decoder (distributor/pprof.c) on arbitrary
 * bytes, as /ingest and push.v1 hand it a decompressed body.
 *
 * The input is the profile itself (so the real profiles of tests/data seed
 * it unchanged); its length picks the spy name, which switches on the
 * scripting and dotnet fix-ups.  A small arena budget is part of the run so
 * SM_ENOMEM paths are exercised as well.  Properties: a failure carries its
 * code and a message; a success yields a batch that finishes, and every
 * series value is > 0.
 */
#include "distributor/pprof.h"

#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const spies[] = { "gospy", "pyspy", "dotnetspy",
	    NULL };
	struct sm_label base[1] = { { "service_name", "fuzz" } };
	struct dist_pprof_in in = { base, 1, spies[size % 4], NULL, 0, NULL,
	    1700000000000 };
	struct sm_arena *a;
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	uint32_t i, j;
	int rv;

	/* Every 7th input runs on a tight budget to reach SM_ENOMEM. */
	if ((a = sm_arena_create(size % 7 == 3 ? 64 * 1024 :
	    256u << 20)) == NULL)
		return (0);
	dist_limits_default(&lim);
	if (dist_batch_init(&b, a, &lim) != 0) {
		sm_arena_destroy(a);
		return (0);
	}
	sm_err_clear(&err);
	rv = dist_pprof_ingest(data, size, &in, &b, &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(rv == SM_EMALFORMED || rv == SM_ELIMIT ||
		    rv == SM_EINVAL || rv == SM_ENOMEM || rv == SM_ETOOBIG,
		    "unexpected code %d (%s)", rv, err.msg);
	} else if ((rv = dist_batch_finish(&b)) == 0) {
		for (i = 0; i < b.nseries; i++)
			for (j = 0; j < b.series[i].n; j++)
				FUZZ_CHECK(b.series[i].value[j] > 0,
				    "series %u value %u is %lld", i, j,
				    (long long)b.series[i].value[j]);
	} else {
		FUZZ_CHECK(rv == SM_ENOMEM, "finish: %d", rv);
	}
	dist_batch_fini(&b);
	sm_arena_destroy(a);
	return (0);
}
