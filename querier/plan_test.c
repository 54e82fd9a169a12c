/*
 * plan_test.c -- the replica plan (plan.c) driven by a fake ingester set:
 * in-memory series with per-bucket upload counts and values, answering
 * the plan's Stats rounds as ingester/query.c does, and a merge that honours
 * the plan's picks.  Every case checks that each (series, bucket) is
 * counted exactly once and that the merged total equals the truth (the
 * value of a replica that saw every upload): RF 1, agreeing replicas, a
 * lost replica, divergent replicas, both at once, a replica that
 * fails in the detail round (SM_EAGAIN), and ingesters picked before
 * store-gateway sources holding the same uploads.
 */
#include "sm_test.h"

#include "common/hash.h"
#include "querier/qry_int.h"

#define FK_MAX_ING 3
#define FK_MAX_SERIES 8
#define FK_MAX_BUCKETS 8

struct fk_bucket {
	int64_t t;
	uint32_t count;     /* uploads merged into the bucket */
	int64_t value;      /* their total */
	uint64_t ids[4];    /* with_ids: the uploads' id hashes, sorted */
};

struct fk_series {
	uint64_t fp;
	struct fk_bucket b[FK_MAX_BUCKETS];
	uint32_t nb;
};

struct fk_ing {
	struct fk_series s[FK_MAX_SERIES];   /* sorted by fp */
	uint32_t ns;
	int lost;                            /* 1: never answers */
	int fail_detail;                     /* 1: fails a detail round */
	uint64_t drop_epoch;                 /* its Stats answer's */
};

struct fk_set {
	struct fk_ing ing[FK_MAX_ING];
	uint32_t n;
	struct sm_arena *a;                  /* answers */
	uint32_t rounds, detail_rounds;
	int with_ids;                        /* detail rounds carry ids */
};

/* The digest is any function linear in the per-bucket counts. */
static uint64_t
fk_mix(int64_t t)
{
	return (sm_hash_u64((uint64_t)t) | 1);
}

static const Smolder__V1__Pick *
fk_pick(const Smolder__V1__Select *sel, uint64_t fp)
{
	for (size_t i = 0; i < sel->n_picks; i++)
		if (sel->picks[i]->fp == fp)
			return (sel->picks[i]);
	return (NULL);
}

static int
fk_in(const uint64_t *v, size_t n, uint64_t fp)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == fp)
			return (1);
	return (0);
}

static int
fk_round(void *arg, Smolder__V1__Request *const *reqs, uint32_t nreqs,
    const uint8_t *must, const Smolder__V1__Response **ans,
    struct sm_err *err)
{
	struct fk_set *fs = arg;
	int again = 0;

	fs->rounds++;
	for (uint32_t i = 0; i < fs->n; i++) {
		const Smolder__V1__Request *r = reqs[nreqs == 1 ? 0 : i];
		const Smolder__V1__StatsRequest *sr;
		Smolder__V1__Response *resp;
		Smolder__V1__StatsResponse *st;
		struct fk_ing *ing = &fs->ing[i];

		ans[i] = NULL;
		if (r == NULL)
			continue;
		SM_REQUIRE(r->method_case == SMOLDER__V1__REQUEST__METHOD_STATS);
		sr = r->stats;
		if (sr->n_detail > 0 && i == 0)
			fs->detail_rounds++;
		if (ing->lost || (sr->n_detail > 0 && ing->fail_detail)) {
			if (must != NULL && must[i])
				again = 1;
			continue;
		}
		resp = sm_arena_alloc(fs->a, sizeof(*resp));
		st = sm_arena_alloc(fs->a, sizeof(*st));
		SM_REQUIRE(resp != NULL && st != NULL);
		smolder__v1__response__init(resp);
		smolder__v1__stats_response__init(st);
		resp->result_case = SMOLDER__V1__RESPONSE__RESULT_STATS;
		resp->stats = st;
		st->drop_epoch = ing->drop_epoch;
		st->series = sm_arena_calloc(fs->a, FK_MAX_SERIES,
		    sizeof(*st->series));
		for (uint32_t k = 0; k < ing->ns; k++) {
			const struct fk_series *s = &ing->s[k];
			Smolder__V1__SeriesStat *ss;
			int detail = fk_in(sr->detail, sr->n_detail, s->fp);

			if (sr->select->picked && fk_pick(sr->select, s->fp) ==
			    NULL)
				continue;
			ss = sm_arena_alloc(fs->a, sizeof(*ss));
			smolder__v1__series_stat__init(ss);
			ss->fp = s->fp;
			if (detail) {
				ss->t = sm_arena_calloc(fs->a, s->nb + 1, 8);
				ss->count = sm_arena_calloc(fs->a, s->nb + 1, 4);
			}
			if (detail && fs->with_ids && sr->ids) {
				ss->nids = sm_arena_calloc(fs->a, s->nb + 1, 4);
				ss->ids = sm_arena_calloc(fs->a,
				    4 * s->nb + 1, 8);
			}
			for (uint32_t b = 0; b < s->nb; b++) {
				ss->profiles += s->b[b].count;
				ss->digest += s->b[b].count * fk_mix(s->b[b].t);
				if (detail) {
					ss->t[ss->n_t++] = s->b[b].t;
					ss->count[ss->n_count++] = s->b[b].count;
				}
				if (ss->nids != NULL) {
					ss->nids[ss->n_nids++] = s->b[b].count;
					for (uint32_t u = 0; u < s->b[b].count;
					    u++)
						ss->ids[ss->n_ids++] =
						    s->b[b].ids[u];
				}
			}
			st->series[st->n_series++] = ss;
		}
		ans[i] = resp;
	}
	if (again)
		return (sm_err_set(err, SM_EAGAIN, "a planned target failed"));
	return (0);
}

/* A merge of the whole set under plan p: each target sums what its
 * select picks.  *dup counts (series, bucket) pairs taken twice. */
static int64_t
fk_merge(const struct fk_set *fs, const struct qry_plan *p, int *dup)
{
	struct { uint64_t fp; int64_t t; } seen[FK_MAX_ING * FK_MAX_SERIES *
	    FK_MAX_BUCKETS];
	uint32_t nseen = 0;
	int64_t total = 0;

	*dup = 0;
	for (uint32_t i = 0; i < fs->n; i++) {
		const Smolder__V1__Select *sel = qry_plan_select(p, i);
		const struct fk_ing *ing = &fs->ing[i];

		if (sel == NULL || ing->lost)
			continue;
		for (uint32_t k = 0; k < ing->ns; k++) {
			const struct fk_series *s = &ing->s[k];
			const Smolder__V1__Pick *pk = NULL;

			if (sel->picked && (pk = fk_pick(sel, s->fp)) == NULL)
				continue;
			for (uint32_t b = 0; b < s->nb; b++) {
				int want = pk == NULL || (pk->n_t == 0 &&
				    pk->n_neg == 0);

				for (size_t j = 0; !want && j < pk->n_t; j++)
					want = pk->t[j] == s->b[b].t;
				for (size_t j = 0; !want && pk != NULL &&
				    j < pk->n_neg; j++)
					want = pk->neg[j] == s->b[b].t ? -1 : 0;
				if (!want)
					continue;
				if (want < 0) {      /* a combination's minus */
					total -= s->b[b].value;
					continue;
				}
				for (uint32_t z = 0; z < nseen; z++)
					if (seen[z].fp == s->fp &&
					    seen[z].t == s->b[b].t)
						(*dup)++;
				seen[nseen].fp = s->fp;
				seen[nseen++].t = s->b[b].t;
				total += s->b[b].value;
			}
		}
	}
	return (total);
}

/* Series fp with buckets at 10, 20, 30 holding 2 uploads of 50 each. */
static void
fk_add_series(struct fk_ing *ing, uint64_t fp)
{
	struct fk_series *s = &ing->s[ing->ns++];

	memset(s, 0, sizeof(*s));
	s->fp = fp;
	for (int b = 0; b < 3; b++) {
		s->b[s->nb].t = 10 * (b + 1);
		s->b[s->nb].count = 2;
		s->b[s->nb].value = 100;
		s->nb++;
	}
}

/* Replica `ing` missed one upload of bucket t of series fp. */
static void
fk_miss(struct fk_ing *ing, uint64_t fp, int64_t t)
{
	for (uint32_t k = 0; k < ing->ns; k++) {
		if (ing->s[k].fp != fp)
			continue;
		for (uint32_t b = 0; b < ing->s[k].nb; b++) {
			if (ing->s[k].b[b].t == t) {
				ing->s[k].b[b].count--;
				ing->s[k].b[b].value -= 50;
			}
		}
	}
}

/* n ingesters all holding series 1..nseries (RF = n). */
static void
fk_init(struct fk_set *fs, uint32_t n, uint32_t nseries)
{
	memset(fs, 0, sizeof(*fs));
	fs->n = n;
	fs->a = sm_arena_create(0);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t s = 1; s <= nseries; s++)
			fk_add_series(&fs->ing[i], s * 0x100000001ULL);
}

/* Plan with targets [0, nlocal) local (ingesters), the rest bucket
 * sources. */
static int
fk_plan_local(struct fk_set *fs, uint32_t rf, uint32_t nlocal,
    struct qry_plan *p, Smolder__V1__Select *sel)
{
	struct qry_plan_io io = { .n = fs->n, .rf = rf, .nlocal = nlocal,
	    .round = fk_round, .arg = fs };
	struct sm_err err;

	smolder__v1__select__init(sel);
	sel->tenant = "t";
	sel->start_ms = 0;
	sel->end_ms = 100;
	qry_plan_init(p);
	return (qry_plan_make(p, &io, sel, &err));
}

static int
fk_plan(struct fk_set *fs, uint32_t rf, struct qry_plan *p,
    Smolder__V1__Select *sel)
{
	return (fk_plan_local(fs, rf, 0, p, sel));
}

static void
test_rf1_no_plan(void)
{
	struct fk_set fs;
	struct qry_plan p;
	Smolder__V1__Select sel;
	int dup;

	/* RF 1: each ingester holds different series; no Stats round. */
	memset(&fs, 0, sizeof(fs));
	fs.n = 3;
	fs.a = sm_arena_create(0);
	for (uint32_t i = 0; i < 3; i++)
		fk_add_series(&fs.ing[i], 100 + i);
	SM_REQUIRE(fk_plan(&fs, 1, &p, &sel) == 0);
	SM_CHECK(p.sel == NULL);
	SM_CHECK_EQ(fs.rounds, 0);
	for (uint32_t i = 0; i < 3; i++)
		SM_CHECK(qry_plan_select(&p, i) == &sel);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 900);
	SM_CHECK_EQ(dup, 0);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);
}

static void
test_agreeing_replicas(void)
{
	struct fk_set fs;
	struct qry_plan p;
	Smolder__V1__Select sel;
	uint8_t must[FK_MAX_ING];
	uint32_t asked = 0;
	int dup;

	fk_init(&fs, 3, 6);
	fs.ing[1].drop_epoch = 5;           /* it dropped blocks 5 times */
	SM_REQUIRE(fk_plan(&fs, 3, &p, &sel) == 0);
	SM_CHECK_EQ(fs.rounds, 1);          /* no detail round */
	SM_CHECK_EQ(p.nseries, 6);
	SM_CHECK_EQ(p.ndivergent, 0);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 6 * 300);
	SM_CHECK_EQ(dup, 0);
	qry_plan_must(&p, must);
	for (uint32_t i = 0; i < 3; i++) {
		const Smolder__V1__Select *s = qry_plan_select(&p, i);

		asked += must[i];
		/* each select carries its target's drop epoch back (the
		 * target refuses the read if it moved meanwhile) */
		if (s != NULL) {
			SM_CHECK(s->drop_checked);
			SM_CHECK_EQ(s->drop_epoch, i == 1 ? 5 : 0);
		}
	}
	SM_CHECK(asked >= 2);               /* work is spread */
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);
}

static void
test_detail_failure_again(void)
{
	struct fk_set fs;
	struct qry_plan p;
	Smolder__V1__Select sel;
	uint64_t fp = 1 * 0x100000001ULL;
	int dup;

	/* A target the detail round counts on fails: SM_EAGAIN, and the
	 * plan made without it (the engine's retry) is complete. */
	fk_init(&fs, 3, 3);
	fk_miss(&fs.ing[1], fp, 10);
	fs.ing[0].fail_detail = 1;
	SM_CHECK_EQ(fk_plan(&fs, 3, &p, &sel), SM_EAGAIN);
	qry_plan_fini(&p);
	fs.ing[0].lost = 1;
	SM_REQUIRE(fk_plan(&fs, 3, &p, &sel) == 0);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 3 * 300);
	SM_CHECK_EQ(dup, 0);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);
}

/* Series fp on replica ing: bucket t holds the uploads ids[0..n) of 50
 * each (ids as small integers, sorted). */
static void
fk_ids(struct fk_ing *ing, uint64_t fp, int64_t t, const uint64_t *ids,
    uint32_t n)
{
	for (uint32_t k = 0; k < ing->ns; k++) {
		if (ing->s[k].fp != fp)
			continue;
		for (uint32_t b = 0; b < ing->s[k].nb; b++) {
			if (ing->s[k].b[b].t != t)
				continue;
			ing->s[k].b[b].count = n;
			ing->s[k].b[b].value = 50 * (int64_t)n;
			memcpy(ing->s[k].b[b].ids, ids, n * sizeof(*ids));
		}
	}
}

/* Every bucket of every series: uploads 1 and 2 (what fk_add_series
 * counts), so only the buckets a test changes differ. */
static void
fk_ids_all(struct fk_set *fs)
{
	static const uint64_t both[] = { 1, 2 };

	fs->with_ids = 1;
	for (uint32_t i = 0; i < fs->n; i++)
		for (uint32_t k = 0; k < fs->ing[i].ns; k++)
			for (uint32_t b = 0; b < fs->ing[i].s[k].nb; b++)
				fk_ids(&fs->ing[i], fs->ing[i].s[k].fp,
				    fs->ing[i].s[k].b[b].t, both, 2);
}

/*
 * RF 3 cases that differ only in how the replicas' holdings differ: which
 * replica is lost, which uploads each missed (fk_miss) or holds by id
 * (fk_ids, over fk_ids_all), and what the plan and the merge must give.
 */
struct fk_edit {
	uint32_t ing;
	uint64_t fp;
	int64_t t;
	const uint64_t *ids;        /* NULL: fk_miss; else fk_ids, nids */
	uint32_t nids;
};

struct replica_case {
	const char *name;
	uint32_t nseries;
	int lost;                   /* the replica lost, -1: none */
	bool with_ids;              /* fk_ids_all before the edits */
	struct fk_edit edit[3];
	uint32_t nedit;
	int64_t total;              /* the merge's */
	int ndivergent, ncombined;  /* -1: not checked */
	int detail_rounds;          /* -1: not checked */
	bool lost_unasked;          /* the lost replica gets no select */
	bool once;                  /* no (series, bucket) merged twice */
};

#define FP(k) ((k) * 0x100000001ULL)

static const uint64_t ids_1[] = { 1 }, ids_2[] = { 2 };
static const uint64_t ids_12[] = { 1, 2 }, ids_23[] = { 2, 3 };

static const struct replica_case replica_cases[] = {
	{ "RF 3, a lost replica: complete without it", .nseries = 5,
	    .lost = 1, .total = 5 * 300, .ndivergent = -1, .ncombined = -1,
	    .detail_rounds = -1, .lost_unasked = true, .once = true },
	/* Each of two replicas missed a different upload of one series;
	 * the third missed one in the same bucket as the first. */
	{ "RF 3, divergent replicas: bucket by bucket, largest count",
	    .nseries = 4, .lost = -1, .edit = { { 0, FP(2), 10, NULL, 0 },
	    { 1, FP(2), 30, NULL, 0 }, { 2, FP(2), 10, NULL, 0 } },
	    .nedit = 3, .total = 4 * 300, .ndivergent = 1, .ncombined = -1,
	    .detail_rounds = 1, .once = true },
	/* One replica down, one of the two left missed an upload: the
	 * other one has the bucket whole. */
	{ "RF 3, lost and divergent at once", .nseries = 4, .lost = 2,
	    .edit = { { 0, FP(3), 20, NULL, 0 } }, .nedit = 1,
	    .total = 4 * 300, .ndivergent = 1, .ncombined = -1,
	    .detail_rounds = -1, .once = true },
	/* Bucket 20 of one series: uploads 1, 2, 3; no replica holds all
	 * three (the one that did has left), but A + B - C is exact. */
	{ "no replica holds a bucket whole: A + B - C from the uploads' ids",
	    .nseries = 3, .lost = -1, .with_ids = true,
	    .edit = { { 0, FP(2), 20, ids_12, 2 }, { 1, FP(2), 20, ids_23, 2 },
	    { 2, FP(2), 20, ids_2, 1 } }, .nedit = 3, .total = 3 * 300 + 50,
	    .ndivergent = 1, .ncombined = 1, .detail_rounds = -1 },
	/* One replica lost; the other two hold different uploads of
	 * bucket 10, {1} and {2, 3}: A + B. */
	{ "two replicas hold different uploads of a bucket: A + B",
	    .nseries = 2, .lost = 2, .with_ids = true,
	    .edit = { { 0, FP(1), 10, ids_1, 1 }, { 1, FP(1), 10, ids_23, 2 } },
	    .nedit = 2, .total = 2 * 300 + 50, .ndivergent = -1,
	    .ncombined = 1, .detail_rounds = -1 },
};

/* What replica ing holds in bucket t of series fp (0: nothing). */
static uint32_t
fk_count(const struct fk_ing *ing, uint64_t fp, int64_t t)
{
	for (uint32_t k = 0; k < ing->ns; k++) {
		if (ing->s[k].fp != fp)
			continue;
		for (uint32_t b = 0; b < ing->s[k].nb; b++)
			if (ing->s[k].b[b].t == t)
				return (ing->s[k].b[b].count);
	}
	return (0);
}

/*
 * The counts plan p's picks check (Pick.count, neg_count: what the plan
 * saw, so a target can refuse a read after a change): as long as t and
 * neg when set, each non-zero one what its target holds there.  Returns
 * how many picks check some bucket, -1 when one is wrong.
 */
static int
fk_checked_picks(const struct fk_set *fs, const struct qry_plan *p)
{
	int n = 0;

	for (uint32_t i = 0; i < fs->n; i++) {
		const Smolder__V1__Select *sel = qry_plan_select(p, i);

		for (size_t k = 0; sel != NULL && k < sel->n_picks; k++) {
			const Smolder__V1__Pick *pk = sel->picks[k];
			bool any = false;

			if ((pk->n_count != 0 && pk->n_count != pk->n_t) ||
			    (pk->n_neg_count != 0 &&
			    pk->n_neg_count != pk->n_neg))
				return (-1);
			for (size_t j = 0; j < pk->n_count + pk->n_neg_count;
			    j++) {
				bool neg = j >= pk->n_count;
				uint32_t want = neg ?
				    pk->neg_count[j - pk->n_count] :
				    pk->count[j];
				int64_t t = neg ? pk->neg[j - pk->n_count] :
				    pk->t[j];

				if (want == 0)
					continue;
				if (want != fk_count(&fs->ing[i], pk->fp, t))
					return (-1);
				any = true;
			}
			n += any;
		}
	}
	return (n);
}

static void
replica_case_run(const struct replica_case *c)
{
	struct fk_set fs;
	struct qry_plan p;
	Smolder__V1__Select sel;
	int dup;

	fk_init(&fs, 3, c->nseries);
	if (c->with_ids)
		fk_ids_all(&fs);
	if (c->lost >= 0)
		fs.ing[c->lost].lost = 1;
	for (uint32_t i = 0; i < c->nedit; i++) {
		const struct fk_edit *e = &c->edit[i];

		if (e->ids == NULL)
			fk_miss(&fs.ing[e->ing], e->fp, e->t);
		else
			fk_ids(&fs.ing[e->ing], e->fp, e->t, e->ids, e->nids);
	}
	SM_REQUIRE(fk_plan(&fs, 3, &p, &sel) == 0);
	if (c->lost_unasked)
		SM_CHECK(qry_plan_select(&p, (uint32_t)c->lost) == NULL);
	if (c->detail_rounds >= 0)
		SM_CHECK_EQ(fs.detail_rounds, c->detail_rounds);
	if (c->ndivergent >= 0)
		SM_CHECK_EQ(p.ndivergent, c->ndivergent);
	if (c->ncombined >= 0)
		SM_CHECK_EQ(p.ncombined, c->ncombined);
	/* A combination's members (two or three picks) check their
	 * counts; a plan with none checks nothing. */
	if (p.ncombined > 0)
		SM_CHECKF(fk_checked_picks(&fs, &p) >= 2, "%d checked picks",
		    fk_checked_picks(&fs, &p));
	else
		SM_CHECK_EQ(fk_checked_picks(&fs, &p), 0);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), c->total);
	if (c->once)
		SM_CHECK_EQ(dup, 0);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);
}

static void
test_replica_cases(void)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(replica_cases); i++) {
		int failed = sm_test_st.failed;

		replica_case_run(&replica_cases[i]);
		if (sm_test_st.failed != failed)
			printf("  in case: %s\n", replica_cases[i].name);
	}
}

static void
test_unresolved_is_an_error(void)
{
	static const uint64_t a[] = { 1, 2 }, b[] = { 2, 3 };
	struct fk_set fs;
	struct qry_plan p;
	Smolder__V1__Select sel;
	uint64_t fp = 1 * 0x100000001ULL;
	struct qry_plan_io io;
	struct sm_err err;

	/* {1, 2} and {2, 3} with the third replica lost: no replica and no
	 * combination counts each upload once -- the plan refuses rather
	 * than give the larger count's short answer. */
	fk_init(&fs, 3, 2);
	fk_ids_all(&fs);
	fs.ing[2].lost = 1;
	fk_ids(&fs.ing[0], fp, 30, a, 2);
	fk_ids(&fs.ing[1], fp, 30, b, 2);
	fk_ids(&fs.ing[1], fp, 20, a, 1);    /* and a count that differs */
	io = (struct qry_plan_io){ .n = fs.n, .rf = 3, .round = fk_round,
	    .arg = &fs };
	smolder__v1__select__init(&sel);
	sel.tenant = "t";
	sel.end_ms = 100;
	qry_plan_init(&p);
	SM_CHECK_EQ(qry_plan_make(&p, &io, &sel, &err), SM_EUNAVAIL);
	SM_CHECK(strstr(err.msg, "incomplete") != NULL);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);
}

/* Narrowed to some buckets: each once, the rest not at all, whatever the
 * plan made of the series (whole, bucket by bucket, RF 1). */
static void
test_restrict(void)
{
	uint64_t f1 = 0x100000001ULL, f2 = 2 * 0x100000001ULL;
	const struct qry_bucket w[] = { { f1, 20 }, { f2, 10 }, { f2, 30 },
	    { 9 * 0x100000001ULL, 10 } };      /* a series nobody holds */
	const struct qry_bucket w2[] = { { f2, 10 }, { f2, 20 } };
	struct fk_set fs;
	struct qry_plan p;
	Smolder__V1__Select sel;
	int dup;

	/* agreeing replicas: whole-series picks become bucket picks */
	fk_init(&fs, 3, 4);
	SM_REQUIRE(fk_plan(&fs, 3, &p, &sel) == 0);
	SM_REQUIRE(qry_plan_restrict(&p, w, SM_ARRAY_LEN(w)) == 0);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 3 * 100);
	SM_CHECK_EQ(dup, 0);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);

	/* divergent replicas: bucket picks keep only the wanted ones */
	fk_init(&fs, 3, 4);
	fk_miss(&fs.ing[0], f2, 10);
	fk_miss(&fs.ing[1], f2, 30);
	fk_miss(&fs.ing[2], f2, 10);
	SM_REQUIRE(fk_plan(&fs, 3, &p, &sel) == 0);
	SM_CHECK_EQ(p.ndivergent, 1);
	SM_REQUIRE(qry_plan_restrict(&p, w, SM_ARRAY_LEN(w)) == 0);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 3 * 100);
	SM_CHECK_EQ(dup, 0);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);

	/* A + B - C in bucket 20 of f2 (as in replica_cases): the
	 * narrowed picks keep the counts they check */
	fk_init(&fs, 3, 3);
	fk_ids_all(&fs);
	fk_ids(&fs.ing[0], f2, 20, ids_12, 2);
	fk_ids(&fs.ing[1], f2, 20, ids_23, 2);
	fk_ids(&fs.ing[2], f2, 20, ids_2, 1);
	SM_REQUIRE(fk_plan(&fs, 3, &p, &sel) == 0);
	SM_CHECK_EQ(p.ncombined, 1);
	SM_REQUIRE(qry_plan_restrict(&p, w2, SM_ARRAY_LEN(w2)) == 0);
	SM_CHECKF(fk_checked_picks(&fs, &p) >= 2, "%d checked picks",
	    fk_checked_picks(&fs, &p));
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 100 + 150);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);

	/* RF 1, no plan: every target narrowed to the buckets */
	memset(&fs, 0, sizeof(fs));
	fs.n = 2;
	fs.a = sm_arena_create(0);
	fk_add_series(&fs.ing[0], f1);
	fk_add_series(&fs.ing[1], f2);
	SM_REQUIRE(fk_plan(&fs, 1, &p, &sel) == 0);
	SM_CHECK(p.sel == NULL);
	SM_REQUIRE(qry_plan_restrict(&p, w, SM_ARRAY_LEN(w)) == 0);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 3 * 100);
	SM_CHECK_EQ(dup, 0);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);
}

/* Replica `ing` no longer holds bucket t of any series (local retention
 * dropped its block after the bucket got it). */
static void
fk_drop(struct fk_ing *ing, int64_t t)
{
	for (uint32_t k = 0; k < ing->ns; k++) {
		struct fk_series *s = &ing->s[k];

		for (uint32_t b = 0; b < s->nb; b++) {
			if (s->b[b].t != t)
				continue;
			memmove(&s->b[b], &s->b[b + 1], (s->nb - b - 1) *
			    sizeof(s->b[b]));
			s->nb--;
			break;
		}
	}
}

/* Does every pick of target i take only bucket t (no whole series)? */
static bool
fk_only_bucket(const struct qry_plan *p, uint32_t i, int64_t t)
{
	const Smolder__V1__Select *sel = qry_plan_select(p, i);

	if (sel == NULL)
		return (true);
	for (size_t k = 0; k < sel->n_picks; k++) {
		const Smolder__V1__Pick *pk = sel->picks[k];

		if (pk->n_t == 0 || pk->n_neg != 0)
			return (false);
		for (size_t j = 0; j < pk->n_t; j++)
			if (pk->t[j] != t)
				return (false);
	}
	return (true);
}

static void
test_local_first(void)
{
	struct fk_set fs;
	struct qry_plan p;
	Smolder__V1__Select sel;
	uint8_t must[FK_MAX_ING];
	int dup;

	/* An ingester (target 0) and two gateways' copies of its source
	 * (1, 2) agree on every series: the ingester reads them all, the
	 * gateways are not asked for data. */
	fk_init(&fs, 3, 6);
	SM_REQUIRE(fk_plan_local(&fs, 2, 1, &p, &sel) == 0);
	SM_CHECK_EQ(p.ndivergent, 0);
	qry_plan_must(&p, must);
	SM_CHECK(must[0] && !must[1] && !must[2]);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 6 * 300);
	SM_CHECK_EQ(dup, 0);
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);

	/* The ingester's local retention dropped the oldest bucket: only
	 * that bucket is read from a gateway, the rest from the ingester --
	 * with and without the uploads' ids. */
	for (int ids = 0; ids < 2; ids++) {
		fk_init(&fs, 3, 6);
		fs.with_ids = ids;
		fk_drop(&fs.ing[0], 10);
		SM_REQUIRE(fk_plan_local(&fs, 2, 1, &p, &sel) == 0);
		SM_CHECK_EQ(p.ndivergent, 6);
		qry_plan_must(&p, must);
		SM_CHECK(must[0] && (must[1] || must[2]));
		SM_CHECK(fk_only_bucket(&p, 1, 10) && fk_only_bucket(&p, 2, 10));
		SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 6 * 300);
		SM_CHECK_EQ(dup, 0);
		qry_plan_fini(&p);
		sm_arena_destroy(fs.a);
	}

	/* No local target holds it (the ingester that shipped it left):
	 * the gateways' copies are read, as replicas are. */
	fk_init(&fs, 3, 6);
	fs.ing[0].ns = 0;
	SM_REQUIRE(fk_plan_local(&fs, 2, 1, &p, &sel) == 0);
	SM_CHECK_EQ(fk_merge(&fs, &p, &dup), 6 * 300);
	SM_CHECK_EQ(dup, 0);
	qry_plan_must(&p, must);
	SM_CHECK(!must[0] && (must[1] || must[2]));
	qry_plan_fini(&p);
	sm_arena_destroy(fs.a);
}

SM_TEST_MAIN(
	{ "RF 1: no plan, every target sums its own series", test_rf1_no_plan },
	{ "RF 3, agreeing replicas: each series once, one Stats round", test_agreeing_replicas },
	{ "RF 3: lost, divergent and partial replicas (replica_cases)", test_replica_cases },
	{ "a failure in the detail round asks for a retry", test_detail_failure_again },
	{ "no replica nor combination holds a bucket whole: 503, not short", test_unresolved_is_an_error },
	{ "a plan narrowed to some buckets takes each once", test_restrict },
	{ "local first: ingesters read what they hold, gateways the rest", test_local_first },
)
