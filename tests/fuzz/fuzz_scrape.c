/*
 * fuzz_scrape.c -- what a scraped target sends (scraper/delta.c,
 * scr_delta_apply): a pprof profile, cumulative or not, from any
 * endpoint.
 *
 * Input: a 4-byte little-endian length, then the first scrape's profile
 * (that long, at most the rest) and the second's, applied to one delta
 * state in turn (prime, then delta), then the first again (a fall, or
 * not).
 * Properties: every call returns 0, SM_EMALFORMED or SM_ENOMEM with a
 * message; a PASS answer is the input's bytes; an EMIT answer unpacks as
 * a google.v1.Profile with no more samples than the input; the state's
 * byte count is what its keys take.
 */
#include <string.h>

#include "common/buf.h"
#include "fuzz.h"
#include "google/v1/profile.pb-c.h"
#include "scraper/delta.h"

static void
one(struct scr_delta *d, const uint8_t *p, size_t n, int64_t now)
{
	struct sm_buf out = SM_BUF_INIT;
	enum scr_delta_out what = SCR_DELTA_PRIMED;
	struct sm_err err;
	bool rb;
	int rv;

	sm_err_clear(&err);
	rv = scr_delta_apply(d, p, n, now, &what, &rb, &out, &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(rv == SM_EMALFORMED || rv == SM_ENOMEM, "code %d",
		    rv);
		sm_buf_fini(&out);
		return;
	}
	if (what == SCR_DELTA_PASS)
		FUZZ_CHECK(out.len == n && (n == 0 || memcmp(out.b, p, n) ==
		    0), "PASS changed the bytes");
	if (what == SCR_DELTA_EMIT) {
		Google__V1__Profile *in = google__v1__profile__unpack(NULL, n,
		    p);
		Google__V1__Profile *o = google__v1__profile__unpack(NULL,
		    out.len, (const uint8_t *)out.b);

		FUZZ_CHECK(in != NULL && o != NULL, "EMIT does not unpack");
		FUZZ_CHECK(o->n_sample <= in->n_sample, "%zu samples from %zu",
		    o->n_sample, in->n_sample);
		google__v1__profile__free_unpacked(in, NULL);
		google__v1__profile__free_unpacked(o, NULL);
	}
	FUZZ_CHECK(scr_delta_bytes(d) == (size_t)d->nkeys * (8 + 8 *
	    (size_t)d->ncum), "state bytes");
	sm_buf_fini(&out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct scr_delta d;
	size_t cut;

	if (size < 4)
		return (0);
	cut = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 |
	    (size_t)data[3] << 24;
	cut = SM_MIN(cut, size - 4);
	scr_delta_init(&d);
	one(&d, data + 4, cut, 1000000000LL);
	one(&d, data + 4 + cut, size - 4 - cut, 2000000000LL);
	one(&d, data + 4, cut, 3000000000LL);
	scr_delta_fini(&d);
	return (0);
}
