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
#include "fuzz_batch.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const spies[] = { "gospy", "pyspy", "dotnetspy",
	    NULL };
	struct sm_label base[1] = { { "service_name", "fuzz" } };
	struct dist_pprof_in in = { base, 1, spies[size % 4], NULL, 0, NULL,
	    1700000000000 };
	struct fuzz_batch f;
	struct sm_err err;
	int rv;

	/* Every 7th input runs on a tight budget to reach SM_ENOMEM. */
	if (fuzz_batch_open(&f, size % 7 == 3 ? 64 * 1024 : 256u << 20) != 0)
		return (0);
	sm_err_clear(&err);
	rv = dist_pprof_ingest(data, size, &in, &f.b, &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(rv == SM_EMALFORMED || rv == SM_ELIMIT ||
		    rv == SM_EINVAL || rv == SM_ENOMEM || rv == SM_ETOOBIG,
		    "unexpected code %d (%s)", rv, err.msg);
	} else if ((rv = dist_batch_finish(&f.b)) == 0) {
		fuzz_batch_check_positive(&f.b);
	} else {
		FUZZ_CHECK(rv == SM_ENOMEM, "finish: %d", rv);
	}
	fuzz_batch_close(&f);
	return (0);
}
