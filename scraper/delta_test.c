/*
 * delta_test.c -- the delta rule of delta.h on heap-shaped profiles built
 * here: priming, deltas per stack, snapshots kept, zero deltas dropped,
 * re-basing on a fall, duplicate samples summed, pass-through of a
 * profile with no cumulative type.
 */
#include "scraper/delta.h"

#include <string.h>

#include "google/v1/profile.pb-c.h"
#include "sm_test.h"

#define SEC 1000000000LL

/* A heap-shaped profile: types alloc_objects, inuse_space (or samples,
 * cpu when !heap); functions f1..f3 at locations 1..3; samples given as
 * (leaf location, root location, v0, v1). */
struct smp {
	uint64_t leaf, root;
	int64_t v0, v1;
};

static void
build(bool heap, const struct smp *s, size_t n, struct sm_buf *out)
{
	static char *strs[] = { "", "alloc_objects", "count", "inuse_space",
	    "bytes", "f1", "f2", "f3", "main.go", "samples", "cpu",
	    "nanoseconds" };
	Google__V1__Profile p = GOOGLE__V1__PROFILE__INIT;
	Google__V1__ValueType vt[2], *vtp[2] = { &vt[0], &vt[1] };
	Google__V1__Function fn[3], *fnp[3];
	Google__V1__Line ln[3], *lnp[3];
	Google__V1__Location loc[3], *locp[3];
	Google__V1__Sample smp[8], *smpp[8];
	uint64_t ids[8][2];
	int64_t vals[8][2];
	size_t len;

	for (int i = 0; i < 2; i++) {
		google__v1__value_type__init(&vt[i]);
		vt[i].type = heap ? 1 + 2 * i : 9 + i;
		vt[i].unit = heap ? 2 + 2 * i : (i == 0 ? 2 : 11);
	}
	for (int i = 0; i < 3; i++) {
		google__v1__function__init(&fn[i]);
		fn[i].id = (uint64_t)i + 1;
		fn[i].name = 5 + i;
		fn[i].filename = 8;
		fnp[i] = &fn[i];
		google__v1__line__init(&ln[i]);
		ln[i].function_id = (uint64_t)i + 1;
		ln[i].line = 10 * (i + 1);
		lnp[i] = &ln[i];
		google__v1__location__init(&loc[i]);
		loc[i].id = (uint64_t)i + 1;
		loc[i].line = &lnp[i];
		loc[i].n_line = 1;
		locp[i] = &loc[i];
	}
	for (size_t i = 0; i < n; i++) {
		google__v1__sample__init(&smp[i]);
		ids[i][0] = s[i].leaf;
		ids[i][1] = s[i].root;
		vals[i][0] = s[i].v0;
		vals[i][1] = s[i].v1;
		SM_PB_REPEATED(smp[i], location_id, ids[i]);
		SM_PB_REPEATED(smp[i], value, vals[i]);
		smpp[i] = &smp[i];
	}
	SM_PB_REPEATED(p, sample_type, vtp);
	SM_PB_REPEATED(p, function, fnp);
	SM_PB_REPEATED(p, location, locp);
	p.sample = smpp;
	p.n_sample = n;
	SM_PB_REPEATED(p, string_table, strs);
	len = google__v1__profile__get_packed_size(&p);
	sm_buf_reset(out);
	SM_REQUIRE(sm_buf_reserve(out, len) == 0);
	out->len = google__v1__profile__pack(&p, (uint8_t *)out->b);
}

/* Apply and decode: the emitted samples as (leaf, v0, v1) sorted. */
static enum scr_delta_out
step(struct scr_delta *d, bool heap, const struct smp *s, size_t n,
    int64_t now, bool *rebased, Google__V1__Profile **got)
{
	struct sm_buf in = SM_BUF_INIT, out = SM_BUF_INIT;
	enum scr_delta_out w;
	struct sm_err err;

	build(heap, s, n, &in);
	SM_REQUIRE(scr_delta_apply(d, (uint8_t *)in.b, in.len, now, &w,
	    rebased, &out, &err) == 0);
	*got = NULL;
	if (w != SCR_DELTA_PRIMED)
		*got = google__v1__profile__unpack(NULL, out.len,
		    (uint8_t *)out.b);
	if (w == SCR_DELTA_PASS)
		SM_CHECK(out.len == in.len && memcmp(out.b, in.b, in.len) == 0);
	sm_buf_fini(&in);
	sm_buf_fini(&out);
	return (w);
}

/* Value of type t of the sample whose leaf is `leaf`, or -999. */
static int64_t
val(const Google__V1__Profile *p, uint64_t leaf, int t)
{
	for (size_t i = 0; i < p->n_sample; i++)
		if (p->sample[i]->location_id[0] == leaf)
			return (p->sample[i]->value[t]);
	return (-999);
}

static void
test_heap(void)
{
	struct scr_delta d;
	Google__V1__Profile *p;
	bool rb;
	const struct smp s1[] = { { 1, 3, 10, 100 }, { 2, 3, 5, 50 } };
	/* f1 +4, f2 unchanged (its inuse kept), f3 new */
	const struct smp s2[] = { { 1, 3, 14, 90 }, { 2, 3, 5, 50 },
	    { 3, 3, 7, 0 } };
	/* f2 unchanged with no inuse: dropped; f1 split into two samples
	 * of one stack: summed */
	const struct smp s3[] = { { 1, 3, 10, 0 }, { 1, 3, 6, 0 },
	    { 2, 3, 5, 0 }, { 3, 3, 7, 0 } };
	/* a fall: the process restarted */
	const struct smp s4[] = { { 1, 3, 2, 20 } };
	const struct smp s5[] = { { 1, 3, 5, 20 } };

	scr_delta_init(&d);
	SM_CHECK_EQ(step(&d, true, s1, 2, 10 * SEC, &rb, &p),
	    SCR_DELTA_PRIMED);
	SM_CHECK(!rb);
	SM_CHECK_EQ(d.nkeys, 2);
	SM_CHECK_EQ(scr_delta_bytes(&d), 2 * 16);

	SM_CHECK_EQ(step(&d, true, s2, 3, 20 * SEC, &rb, &p), SCR_DELTA_EMIT);
	SM_REQUIRE(p != NULL);
	SM_CHECK_EQ(p->n_sample, 3);
	SM_CHECK_EQ(val(p, 1, 0), 4);
	SM_CHECK_EQ(val(p, 1, 1), 90);      /* inuse as it is */
	SM_CHECK_EQ(val(p, 2, 0), 0);
	SM_CHECK_EQ(val(p, 2, 1), 50);
	SM_CHECK_EQ(val(p, 3, 0), 7);       /* new: from 0 */
	SM_CHECK_EQ(p->time_nanos, 10 * SEC);
	SM_CHECK_EQ(p->duration_nanos, 10 * SEC);
	google__v1__profile__free_unpacked(p, NULL);

	SM_CHECK_EQ(step(&d, true, s3, 4, 30 * SEC, &rb, &p), SCR_DELTA_EMIT);
	SM_REQUIRE(p != NULL);
	SM_CHECK_EQ(p->n_sample, 1);
	SM_CHECK_EQ(val(p, 1, 0), 2);       /* 16 - 14 */
	google__v1__profile__free_unpacked(p, NULL);

	SM_CHECK_EQ(step(&d, true, s4, 1, 40 * SEC, &rb, &p),
	    SCR_DELTA_PRIMED);
	SM_CHECK(rb);
	SM_CHECK_EQ(step(&d, true, s5, 1, 50 * SEC, &rb, &p), SCR_DELTA_EMIT);
	SM_REQUIRE(p != NULL);
	SM_CHECK_EQ(val(p, 1, 0), 3);       /* counted from the re-base */
	google__v1__profile__free_unpacked(p, NULL);
	scr_delta_fini(&d);
}

static void
test_pass_and_bad(void)
{
	struct scr_delta d;
	Google__V1__Profile *p;
	struct sm_buf out = SM_BUF_INIT;
	enum scr_delta_out w;
	struct sm_err err;
	bool rb;
	const struct smp s[] = { { 1, 3, 3, 30000000 } };

	scr_delta_init(&d);
	SM_CHECK_EQ(step(&d, false, s, 1, 10 * SEC, &rb, &p), SCR_DELTA_PASS);
	SM_REQUIRE(p != NULL);
	google__v1__profile__free_unpacked(p, NULL);
	SM_CHECK_EQ(d.nkeys, 0);
	SM_CHECK_EQ(scr_delta_apply(&d, (const uint8_t *)"\xff\xff", 2,
	    SEC, &w, &rb, &out, &err), SM_EMALFORMED);
	sm_buf_fini(&out);
	scr_delta_fini(&d);
}

/* A failed upload puts the state back: the next delta covers both. */
static void
test_restore(void)
{
	struct scr_delta d, saved;
	Google__V1__Profile *p;
	bool rb;
	const struct smp s1[] = { { 1, 3, 10, 0 } };
	const struct smp s2[] = { { 1, 3, 14, 0 } };
	const struct smp s3[] = { { 1, 3, 20, 0 } };

	scr_delta_init(&d);
	scr_delta_init(&saved);
	SM_CHECK_EQ(step(&d, true, s1, 1, 10 * SEC, &rb, &p),
	    SCR_DELTA_PRIMED);
	SM_REQUIRE(scr_delta_copy(&saved, &d) == 0);
	SM_CHECK_EQ(step(&d, true, s2, 1, 20 * SEC, &rb, &p), SCR_DELTA_EMIT);
	google__v1__profile__free_unpacked(p, NULL);
	SM_REQUIRE(scr_delta_copy(&d, &saved) == 0);   /* upload failed */
	SM_CHECK_EQ(step(&d, true, s3, 1, 30 * SEC, &rb, &p), SCR_DELTA_EMIT);
	SM_REQUIRE(p != NULL);
	SM_CHECK_EQ(val(p, 1, 0), 10);      /* 20 - 10: both intervals */
	SM_CHECK_EQ(p->time_nanos, 10 * SEC);
	SM_CHECK_EQ(p->duration_nanos, 20 * SEC);
	google__v1__profile__free_unpacked(p, NULL);
	scr_delta_fini(&saved);
	scr_delta_fini(&d);
}

/*
 * A location carrying a field numbered 0 behind a non-minimal key (0x81
 * 0x00): protobuf-c unpacks it as an unknown field, and packed again it
 * would be the key 0x01, which no decoder accepts.  The delta drops
 * unknown fields, so what it emits unpacks.
 */
static void
test_unknown_field_zero(void)
{
	static const uint8_t bad_loc[] = { 0x22, 0x0c, 0x08, 0x09, 0x81, 0x00,
	    1, 2, 3, 4, 5, 6, 7, 8 };
	const struct smp s1[] = { { 1, 3, 10, 100 } };
	const struct smp s2[] = { { 1, 3, 14, 90 } };
	struct sm_buf in = SM_BUF_INIT, out = SM_BUF_INIT;
	Google__V1__Profile *p;
	struct scr_delta d;
	enum scr_delta_out w;
	struct sm_err err;
	bool rb;

	scr_delta_init(&d);
	(void)step(&d, true, s1, 1, 10 * SEC, &rb, &p);
	build(true, s2, 1, &in);
	sm_buf_append(&in, bad_loc, sizeof(bad_loc));
	SM_REQUIRE(sm_buf_error(&in) == 0);
	SM_REQUIRE((p = google__v1__profile__unpack(NULL, in.len,
	    (uint8_t *)in.b)) != NULL);          /* protobuf-c takes it */
	google__v1__profile__free_unpacked(p, NULL);
	SM_REQUIRE(scr_delta_apply(&d, (uint8_t *)in.b, in.len, 20 * SEC, &w,
	    &rb, &out, &err) == 0);
	SM_CHECK_EQ(w, SCR_DELTA_EMIT);
	p = google__v1__profile__unpack(NULL, out.len, (uint8_t *)out.b);
	SM_CHECK(p != NULL);
	if (p != NULL) {
		SM_CHECK_EQ(p->n_location, 4);
		SM_CHECK_EQ(val(p, 1, 0), 4);
		google__v1__profile__free_unpacked(p, NULL);
	}
	sm_buf_fini(&in);
	sm_buf_fini(&out);
	scr_delta_fini(&d);
}

SM_TEST_MAIN(
	{ "heap: prime, deltas, snapshots kept, zeros dropped, re-base", test_heap },
	{ "an unknown field numbered 0 is not packed again", test_unknown_field_zero },
	{ "no cumulative type passes; bytes that are not a pprof are refused", test_pass_and_bad },
	{ "a state put back after a failed upload: the next delta covers both", test_restore },
)
