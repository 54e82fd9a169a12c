/*
 * fuzz_otlp.c -- OpenTelemetry profiles in (distributor/otlp.c,
 * dist_otlp_convert): what POST /v1development/profiles does with a
 * request body before the Push path.
 *
 * Input: the ExportProfilesServiceRequest bytes.  Properties: a failure
 * is SM_EINVAL or SM_ENOMEM with a message; on success every series has
 * labels (service_name among them) and one sample whose pprof unpacks as
 * a google.v1.Profile whose sample types, locations and every sample's
 * location ids and values agree (what the pprof decoder is then given).
 */
#include <string.h>

#include "common/arena.h"
#include "distributor/dist_int.h"
#include "fuzz.h"
#include "google/v1/profile.pb-c.h"
#include "push/v1/push.pb-c.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sm_arena *a = sm_arena_create(size % 7 == 3 ? 64 * 1024 :
	    64u << 20);
	Push__V1__PushRequest push;
	struct sm_err err;
	int rv;

	if (a == NULL)
		return (0);
	sm_err_clear(&err);
	rv = dist_otlp_convert(data, size, false, a, &push, &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(rv == SM_EINVAL || rv == SM_ENOMEM, "code %d", rv);
		sm_arena_destroy(a);
		return (0);
	}
	for (size_t i = 0; i < push.n_series; i++) {
		const Push__V1__RawProfileSeries *s = push.series[i];
		Google__V1__Profile *p;
		bool svc = false;

		FUZZ_CHECK(s->n_labels > 0 && s->n_samples == 1,
		    "series %zu: %zu labels, %zu samples", i, s->n_labels,
		    s->n_samples);
		for (size_t k = 0; k < s->n_labels; k++)
			svc |= strcmp(s->labels[k]->name, "service_name") == 0;
		FUZZ_CHECK(svc, "series %zu has no service_name", i);
		p = google__v1__profile__unpack(NULL,
		    s->samples[0]->raw_profile.len,
		    s->samples[0]->raw_profile.data);
		FUZZ_CHECK(p != NULL, "series %zu: its pprof does not unpack",
		    i);
		for (size_t k = 0; k < p->n_sample; k++) {
			FUZZ_CHECK(p->sample[k]->n_value == p->n_sample_type,
			    "sample %zu: %zu values, %zu types", k,
			    p->sample[k]->n_value, p->n_sample_type);
			for (size_t l = 0; l < p->sample[k]->n_location_id; l++)
				FUZZ_CHECK(p->sample[k]->location_id[l] >= 1 &&
				    p->sample[k]->location_id[l] <=
				    p->n_location, "location id %llu of %zu",
				    (unsigned long long)
				    p->sample[k]->location_id[l],
				    p->n_location);
		}
		google__v1__profile__free_unpacked(p, NULL);
	}
	sm_arena_destroy(a);
	return (0);
}
