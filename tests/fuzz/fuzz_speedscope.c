/*
 * fuzz_speedscope.c -- /ingest?format=speedscope (distributor/speedscope.c):
 * the JSON scanner and speedscope's profiles into a write batch.
 *
 * Input: byte 0 picks the upload's name (bits 0-1: app, app.alloc_objects,
 * app.wall, app{profile_name=x}) and sampleRate (bits 2-3: 100, 0, 1000,
 * 4294967295); the rest is the document.  Properties: a failure carries
 * its code and a message; a success yields a batch that finishes with
 * positive values, every series named by the upload.
 */
#include "distributor/speedscope.h"

#include <string.h>

#include "fuzz.h"
#include "fuzz_batch.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *names[] = { "app", "app.alloc_objects", "app.wall",
	    "app{profile_name=x}" };
	static const uint32_t rates[] = { 100, 0, 1000, 4294967295u };
	struct fuzz_batch f;
	struct dist_key key;
	struct sm_err err;
	int rv;

	if (size < 1)
		return (0);
	if (fuzz_batch_open(&f, 256u << 20) != 0)
		return (0);
	sm_err_clear(&err);
	FUZZ_CHECK(dist_key_parse(names[data[0] & 3], f.a, &key, &err) == 0,
	    "key: %s", err.msg);
	rv = dist_speedscope_ingest(data + 1, size - 1, &key,
	    rates[(data[0] >> 2) & 3], "unknown", 1000, f.a, &f.b, &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
	} else if (dist_batch_finish(&f.b) == 0) {
		fuzz_batch_check_positive(&f.b);
		for (uint32_t i = 0; i < f.b.nseries; i++) {
			const char *svc = NULL;

			for (uint32_t k = 0; k < f.b.series[i].nlabels; k++)
				if (strcmp(f.b.series[i].labels[k].name,
				    "service_name") == 0)
					svc = f.b.series[i].labels[k].value;
			FUZZ_CHECK(svc != NULL && strncmp(svc, "app", 3) == 0,
			    "series %u: service_name %s", i,
			    svc != NULL ? svc : "(none)");
		}
	}
	fuzz_batch_close(&f);
	return (0);
}
