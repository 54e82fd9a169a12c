/*
 * db_test.c -- the ingester database: writes, bucket merging, merge,
 * series and label queries, selectors, tenant isolation, malformed writes
 * and concurrent use (memory-only); and, over a real RocksDB store, block
 * cuts, replay after reopen, and corruption that stays in its block.
 */
#include "common/ring.h"
#include "sm_test.h"
#include "sm_test_disk.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/mtree.h"
#include "common/flamegraph.h"
#include "distributor/batch.h"
#include "ingester/db.h"
#include "ingester/db_int.h"
#include "ingester/head.h"
#include "ingester/set.h"
#include "ingester/store.h"

#define SEC 1000

static _Atomic uint64_t next_id = 1;
static uint64_t use_id;      /* non-zero: the next mkwrite's profile id */
static uint32_t use_max_series;  /* mkwrite's WriteRequest.max_series */

/*
 * Add the stacks "a;b=3,a;c=1" to series s of b, every sample with
 * `span` when it is not 0.
 */
static void
add_stacks(struct dist_batch *b, uint32_t s, const char *stacks,
    uint64_t span)
{
	char buf[1024], *save = NULL, *item;

	snprintf(buf, sizeof(buf), "%s", stacks);
	for (item = strtok_r(buf, ",", &save); item != NULL;
	    item = strtok_r(NULL, ",", &save)) {
		char *eq = strrchr(item, '='), *save2 = NULL, *f;
		uint32_t node = 0, name;

		*eq = '\0';
		for (f = strtok_r(item, ";", &save2); f != NULL;
		    f = strtok_r(NULL, ";", &save2)) {
			dist_batch_frame(b, f, strlen(f), &name);
			dist_batch_node(b, node, name, &node);
		}
		dist_batch_add(b, s, node, atoll(eq + 1));
		if (span != 0)
			dist_batch_span(b, s, node, atoll(eq + 1), span);
	}
}

/*
 * Encode one upload with the given stacks ("a;b=3,a;c=1") for a series.
 * Every upload gets a fresh profile id unless use_id is set.
 */
static void
mkwrite(const char *tenant, const char *service, const char *env, int64_t t,
    const char *stacks, struct sm_buf *out)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_label ls[3] = { { "__name__", "process_cpu" },
		{ "service_name", service }, { "env", env } };
	struct sm_err err;
	uint8_t id[16] = { 0 };
	uint32_t s;
	uint64_t idv = use_id != 0 ? use_id : atomic_fetch_add(&next_id, 1);

	memcpy(id, &idv, sizeof(idv));
	dist_limits_default(&lim);
	if (dist_batch_init(&b, a, &lim) != 0 ||
	    dist_batch_series(&b, ls, env ? 3 : 2, t, &s, &err) != 0)
		abort();
	b.meta.spy_name = "gospy";
	add_stacks(&b, s, stacks, 0);
	if (dist_batch_finish(&b) != 0 ||
	    dist_batch_encode(&b, tenant, id, NULL, 0, use_max_series,
	    out) != 0)
		abort();
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

static int
write_one(struct ing_db *db, const char *tenant, const char *service,
    const char *env, int64_t t, const char *stacks)
{
	struct sm_buf raw = SM_BUF_INIT;
	struct sm_err err;
	struct ing_write_result res;
	int rv;

	mkwrite(tenant, service, env, t, stacks, &raw);
	rv = disk_write_raw(db, &raw, 0, &res, &err);
	if (rv == 0 && res.duplicate)
		rv = 1;   /* tests see duplicates as 1 */
	return (rv);
}

/* Merge `sel` into collapsed text, or "ERR <code>" when the merge fails. */
static char *
collapse_select(struct ing_db *db, const struct ing_query *q,
    uint64_t *profiles)
{
	Smolder__V1__MergeResponse mr;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;

	return (disk_collapsed(ing_db_merge(db, q, a, &mr, &err), &mr, a,
	    profiles));
}

/* Merge {lname op lvalue} over [start, end) (see collapse_select). */
static char *
merge_collapsed(struct ing_db *db, const char *tenant, const char *lname,
    enum sm_match_type op, const char *lvalue, int64_t start,
    int64_t end, uint64_t *profiles)
{
	struct ing_matcher m = { op, lname, lvalue };
	struct ing_query q = { .sel = { .tenant = tenant, .matchers = &m,
		.nmatchers = lname != NULL ? 1 : 0, .start_ms = start,
		.end_ms = end } };

	return (collapse_select(db, &q, profiles));
}

static void
check_collapsed(char *got, const char *want)
{
	SM_CHECK_STR(got, want);
	free(got);
}

/* Every series of `tenant` merged over [0, end) is `want`. */
static void
check_merged(struct ing_db *db, const char *tenant, int64_t end,
    const char *want)
{
	check_collapsed(merge_collapsed(db, tenant, NULL, 0, NULL, 0, end,
	    NULL), want);
}

static struct ing_db *
mem_db(void)
{
	struct ing_db_cfg cfg = { 10 * SEC, 3600 * SEC, 0, 3, 0, 0, 0, 0, NULL,
	    NULL };
	struct ing_db *db = NULL;
	struct sm_err err;

	if (ing_db_open(&cfg, NULL, &db, &err) != 0)
		abort();
	return (db);
}

static void
test_write_merge_same_bucket(void)
{
	struct ing_db *db = mem_db();
	uint64_t profiles;

	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 1 * SEC,
	    "a;b=3,a;c=1,d=2"), 0);
	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 5 * SEC, "a;c=4,e=1"), 0);
	check_collapsed(merge_collapsed(db, "t", NULL, 0, NULL, 0, 10 * SEC,
	    &profiles), "a;b 3\na;c 5\nd 2\ne 1\n");
	SM_CHECK_EQ(profiles, 2);   /* both uploads in one bucket */
	ing_db_close(db);
}

/* The tenant list of Health: sorted hashes; its version moves on an add
 * only; two databases (processes) start at different versions. */
static void
test_tenant_list(void)
{
	struct ing_db *db = mem_db(), *db2 = mem_db();
	struct sm_arena *a = sm_arena_create(0);
	uint64_t *h, v0, v1, v2;
	uint32_t n;

	SM_REQUIRE(a != NULL);
	SM_CHECK_EQ(ing_db_tenants(db, a, &h, &n, &v0), 0);
	SM_CHECK_EQ(n, 0);
	SM_CHECK(v0 != 0 && v0 == ing_db_tenants_version(db));
	SM_CHECK(ing_db_tenants_version(db2) != v0);
	SM_CHECK_EQ(write_one(db, "b", "app", NULL, 1 * SEC, "a=1"), 0);
	SM_CHECK_EQ(write_one(db, "a", "app", NULL, 1 * SEC, "a=1"), 0);
	SM_CHECK_EQ(write_one(db, "c", "app", NULL, 1 * SEC, "a=1"), 0);
	SM_CHECK_EQ(ing_db_tenants(db, a, &h, &n, &v1), 0);
	SM_REQUIRE(n == 3);
	SM_CHECK(v1 != v0 && v1 != 0);
	SM_CHECK(h[0] < h[1] && h[1] < h[2]);
	for (const char *t = "abc"; *t != '\0'; t++) {
		char id[2] = { *t, '\0' };
		uint64_t x = sm_ring_tenant_hash(id);

		SM_CHECK(x == h[0] || x == h[1] || x == h[2]);
	}
	/* a write of a known tenant leaves the version */
	SM_CHECK_EQ(write_one(db, "a", "app", NULL, 2 * SEC, "a=1"), 0);
	SM_CHECK_EQ(ing_db_tenants(db, a, &h, &n, &v2), 0);
	SM_CHECK_EQ(v2, v1);
	SM_CHECK_EQ(n, 3);
	sm_arena_destroy(a);
	ing_db_close(db);
	ing_db_close(db2);
}

/* A spilled bucket at t, in sums_expect's want[]. */
#define SPILLED(t) ((t) + 1000000)

/* Check that iterating sr over [start, end) gives the times want[0..n)
 * (SPILLED(t): a spilled one). */
static void
sums_expect(const struct ing_series *sr, int64_t start, int64_t end,
    const int64_t *want, uint32_t n)
{
	struct ing_bucket_it it;
	const struct ing_bucket *b;
	uint32_t k = 0;

	ing_bucket_it_init(&it, sr, 10, start, end);
	while ((b = ing_bucket_it_next(&it)) != NULL) {
		SM_REQUIRE(k < n);
		SM_CHECK_EQ(b->t, want[k] >= SPILLED(-1000) ?
		    want[k] - SPILLED(0) : want[k]);
		SM_CHECK_EQ(b->spilled != 0, want[k] >= SPILLED(-1000));
		/* Every field survives the encoding (set by sum_bucket). */
		SM_CHECK_EQ(b->profiles, (uint32_t)(b->t / 10 + 21));
		SM_CHECK_EQ(b->total, b->t * 1000003 - 7);
		SM_CHECK_EQ(b->n, (uint32_t)(b->t / 10 + 40) * 1000);
		if (b->spilled)         /* not kept (set.h): in sp.bytes */
			SM_CHECK_EQ(b->packed_len, 0);
		k++;
	}
	SM_CHECK_EQ(k, n);
}

static struct ing_bucket
sum_bucket(int64_t t, uint8_t *packed)
{
	return ((struct ing_bucket){ .t = t,
	    .profiles = (uint32_t)(t / 10 + 21), .total = t * 1000003 - 7,
	    .n = (uint32_t)(t / 10 + 40) * 1000, .packed = packed,
	    .packed_len = (uint32_t)(t + 300) });
}

/*
 * Spilled summaries (set.h): appended, interleaved with later spills,
 * taken back by a late write, and walked with the resident buckets in
 * time order (bucket width 10; negative times too).
 */
static void
test_spilled_summaries(void)
{
	static uint8_t dummy;
	struct ing_series sr;
	struct ing_bucket b[4], res[1];
	struct ing_bucket one;
	struct ing_sums ns;
	int64_t grown, total = 0;

	memset(&sr, 0, sizeof(sr));
	res[0] = sum_bucket(60, NULL);
	sr.b = res;
	sr.nb = 1;
	/* Unpacked buckets are not moved. */
	b[0] = sum_bucket(0, &dummy);
	b[1] = sum_bucket(20, NULL);
	b[2] = sum_bucket(40, &dummy);
	SM_REQUIRE(ing_sums_add(&sr, 10, b, 3, 0, &grown) == 0);
	total += grown;
	SM_CHECK_EQ(sr.sp.n, 2);
	SM_CHECK_EQ(sr.sp.last_t, 40);
	SM_CHECK_EQ(sr.sp.bytes, 300 + 340);
	SM_CHECK(sr.sp.len <= 2 * ING_SUM_MAX && (int64_t)sr.sp.cap == total);
	sums_expect(&sr, INT64_MIN, INT64_MAX,
	    (int64_t[]){ SPILLED(0), SPILLED(40), 60 }, 3);
	/* Appended: all newer than the last. */
	b[0] = sum_bucket(50, &dummy);
	SM_REQUIRE(ing_sums_add(&sr, 10, b, 1, 0, &grown) == 0);
	total += grown;
	sums_expect(&sr, INT64_MIN, INT64_MAX,
	    (int64_t[]){ SPILLED(0), SPILLED(40), SPILLED(50), 60 }, 4);
	/* Interleaved: before, between and negative. */
	b[0] = sum_bucket(-30, &dummy);
	b[1] = sum_bucket(10, &dummy);
	b[2] = sum_bucket(30, &dummy);
	b[3] = sum_bucket(35, NULL);
	SM_REQUIRE(ing_sums_add(&sr, 10, b, 4, 0, &grown) == 0);
	total += grown;
	SM_CHECK_EQ(sr.sp.n, 6);
	SM_CHECK_EQ(sr.sp.last_t, 50);
	SM_CHECK_EQ(sr.sp.bytes, 6 * 300 - 30 + 0 + 10 + 30 + 40 + 50);
	SM_CHECK_EQ((int64_t)sr.sp.cap, total);
	sums_expect(&sr, INT64_MIN, INT64_MAX,
	    (int64_t[]){ SPILLED(-30), SPILLED(0), SPILLED(10), SPILLED(30),
	    SPILLED(40), SPILLED(50), 60 }, 7);
	/* Ranges: a bucket overlaps [start, end) by its width. */
	sums_expect(&sr, 15, 45,
	    (int64_t[]){ SPILLED(10), SPILLED(30), SPILLED(40) }, 3);
	sums_expect(&sr, 55, 61, (int64_t[]){ SPILLED(50), 60 }, 2);
	sums_expect(&sr, 61, 100, (int64_t[]){ 60 }, 1);
	sums_expect(&sr, -100, -25, (int64_t[]){ SPILLED(-30) }, 1);
	sums_expect(&sr, 20, 20, NULL, 0);
	sums_expect(&sr, 1000, 2000, NULL, 0);
	/* Single summaries. */
	SM_CHECK(ing_sums_get(&sr, 10, 30, &one));
	SM_CHECK(one.spilled && one.t == 30 && one.total == 30 * 1000003 - 7);
	SM_CHECK(ing_sums_get(&sr, 10, -30, NULL));
	SM_CHECK(!ing_sums_get(&sr, 10, 20, NULL));
	SM_CHECK(!ing_sums_get(&sr, 10, 60, NULL));
	SM_CHECK(!ing_sums_get(&sr, 10, -40, NULL));
	/* Taken back: without -30, 30 and 50 (a late write's reserve). */
	SM_REQUIRE(ing_sums_without(&sr, 10, (int64_t[]){ -30, 30, 50 }, 3,
	    270 + 330 + 350, &ns) == 0);
	SM_CHECK_EQ(ns.n, 3);
	SM_CHECK_EQ(ns.last_t, 40);
	SM_CHECK_EQ(ns.bytes, 300 + 310 + 340);
	sm_free(sr.sp.p);
	sr.sp = ns;
	sums_expect(&sr, INT64_MIN, INT64_MAX,
	    (int64_t[]){ SPILLED(0), SPILLED(10), SPILLED(40), 60 }, 4);
	/* All of them: none left. */
	SM_REQUIRE(ing_sums_without(&sr, 10, (int64_t[]){ 0, 10, 40 }, 3,
	    300 + 310 + 340, &ns) == 0);
	SM_CHECK_EQ(ns.n, 0);
	SM_CHECK_EQ(ns.bytes, 0);
	SM_CHECK(ns.p == NULL && ns.len == 0);
	sm_free(sr.sp.p);
	sr.sp = ns;
	sums_expect(&sr, INT64_MIN, INT64_MAX, (int64_t[]){ 60 }, 1);
}

/*
 * Room (set.h): a live series spilling one bucket at a time, every 3rd
 * bucket (cadence 30), in a head whose block ends at t = 3600: once its
 * cadence is known sp is sized for the rest at once, within a few
 * percent, and does not grow again.  A backfill (until_t behind the data)
 * and an unknown until_t grow by a quarter.
 */
static void
test_sums_room(void)
{
	static uint8_t dummy;
	struct ing_series sr;
	struct ing_bucket b;
	int64_t grown, total = 0;
	uint32_t reallocs = 0;

	memset(&sr, 0, sizeof(sr));
	for (int64_t t = 0; t < 3600; t += 30) {
		b = sum_bucket(t, &dummy);
		SM_REQUIRE(ing_sums_add(&sr, 10, &b, 1, 3600, &grown) == 0);
		reallocs += grown != 0;
		total += grown;
	}
	SM_CHECK_EQ(sr.sp.n, 120);
	SM_CHECK_EQ((int64_t)sr.sp.cap, total);
	SM_CHECK(reallocs <= 3);
	SM_CHECK(sr.sp.len <= sr.sp.cap && sr.sp.cap <= sr.sp.len +
	    sr.sp.len / 8 + 2 * ING_SUM_MAX);
	sums_expect(&sr, 0, 30, (int64_t[]){ SPILLED(0) }, 1);
	sm_free(sr.sp.p);
	/* At a real epoch the first summary's t is long (against 0): the
	 * room still follows the others' size. */
	memset(&sr, 0, sizeof(sr));
	for (int64_t t = 0; t < 3600; t += 10) {
		int64_t e = 1700000000000LL;

		b = sum_bucket(e + t, &dummy);
		SM_REQUIRE(ing_sums_add(&sr, 10, &b, 1, e + 3600, &grown) ==
		    0);
	}
	SM_CHECK_EQ(sr.sp.n, 360);
	SM_CHECK(sr.sp.len <= sr.sp.cap && sr.sp.cap <= sr.sp.len +
	    sr.sp.len / 16 + 2 * ING_SUM_MAX);
	sm_free(sr.sp.p);
	/* No end known, or one behind the data: a quarter at a time. */
	for (int64_t until = 0; until >= -10; until -= 10) {
		memset(&sr, 0, sizeof(sr));
		reallocs = 0;
		for (int64_t t = 0; t < 3600; t += 30) {
			b = sum_bucket(t, &dummy);
			SM_REQUIRE(ing_sums_add(&sr, 10, &b, 1, until,
			    &grown) == 0);
			reallocs += grown != 0;
		}
		SM_CHECK(reallocs > 5);
		SM_CHECK(sr.sp.cap <= sr.sp.len + sr.sp.len / 4 +
		    ING_SUM_MAX);
		sm_free(sr.sp.p);
	}
}

static void
test_bucket_ranges(void)
{
	struct ing_db *db = mem_db();

	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 0, "x=1"), 0);
	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 10 * SEC, "y=2"), 0);
	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 25 * SEC, "z=4"), 0);
	/* Out of order: lands before the newest bucket. */
	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 12 * SEC, "y=1"), 0);
	check_collapsed(merge_collapsed(db, "t", NULL, 0, NULL, 10 * SEC,
	    20 * SEC, NULL), "y 3\n");
	check_collapsed(merge_collapsed(db, "t", NULL, 0, NULL, 5 * SEC,
	    11 * SEC, NULL), "x 1\ny 3\n");
	check_merged(db, "t", 60 * SEC, "x 1\ny 3\nz 4\n");
	check_collapsed(merge_collapsed(db, "t", NULL, 0, NULL, 30 * SEC,
	    60 * SEC, NULL), "");
	/* Negative times floor correctly. */
	SM_CHECK_EQ(write_one(db, "t", "app", NULL, -1, "n=1"), 0);
	check_collapsed(merge_collapsed(db, "t", NULL, 0, NULL, -10 * SEC, 0,
	    NULL), "n 1\n");
	ing_db_close(db);
}

static void
test_selectors_and_tenants(void)
{
	static const struct {
		const char *lname;
		enum sm_match_type op;
		const char *lvalue, *want;
	} sel[] = {
		{ "env", SM_MATCH_EQ, "prod", "p 1\n" },
		{ "env", SM_MATCH_NEQ, "prod", "d 2\nw 4\n" },
		{ "service_name", SM_MATCH_RE, "a.*", "d 2\np 1\n" },
		{ "service_name", SM_MATCH_RE, "a", "" },
		{ "env", SM_MATCH_NRE, "p.*", "d 2\nw 4\n" },
		/* env="" selects series without env. */
		{ "env", SM_MATCH_EQ, "", "w 4\n" },
	};
	struct ing_db *db = mem_db();

	SM_CHECK_EQ(write_one(db, "t", "api", "prod", 0, "p=1"), 0);
	SM_CHECK_EQ(write_one(db, "t", "api", "dev", 0, "d=2"), 0);
	SM_CHECK_EQ(write_one(db, "t", "web", NULL, 0, "w=4"), 0);
	SM_CHECK_EQ(write_one(db, "u", "api", "prod", 0, "other=8"), 0);
	for (size_t i = 0; i < SM_ARRAY_LEN(sel); i++)
		check_collapsed(merge_collapsed(db, "t", sel[i].lname,
		    sel[i].op, sel[i].lvalue, 0, SEC, NULL), sel[i].want);
	/* Tenants never see each other. */
	check_merged(db, "u", SEC, "other 8\n");
	check_merged(db, "nobody", SEC, "");
	ing_db_close(db);
}

static void
test_series_query(void)
{
	struct ing_db *db = mem_db();
	struct ing_query req = { 0 };
	Smolder__V1__SeriesResponse out;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;
	const char *gb[] = { "env" };

	write_one(db, "t", "api", "prod", 0, "a=1");
	write_one(db, "t", "api", "prod", 20 * SEC, "a=2");
	write_one(db, "t", "api", "dev", 40 * SEC, "a=4");
	req.sel.tenant = "t";
	req.sel.start_ms = 0;
	req.sel.end_ms = 60 * SEC;
	req.step_ms = 30 * SEC;
	SM_REQUIRE(ing_db_series(db, &req, a, &out, &err) == 0);
	SM_REQUIRE(out.n_series == 1);
	SM_CHECK_EQ(out.series[0]->n_points, 2);
	SM_CHECK_EQ(out.series[0]->points[0]->timestamp, 0);
	SM_CHECK(out.series[0]->points[0]->value == 3);
	SM_CHECK_EQ(out.series[0]->points[1]->timestamp, 30 * SEC);
	SM_CHECK(out.series[0]->points[1]->value == 4);
	req.ngroup_by = 1;
	req.group_by = gb;
	SM_REQUIRE(ing_db_series(db, &req, a, &out, &err) == 0);
	SM_CHECK_EQ(out.n_series, 2);
	req.step_ms = 0;
	SM_CHECK_EQ(ing_db_series(db, &req, a, &out, &err), SM_EINVAL);
	req.step_ms = 1;
	req.sel.end_ms = 10000LL * 1000 * SEC;   /* 10^10 steps */
	SM_CHECK_EQ(ing_db_series(db, &req, a, &out, &err), SM_EINVAL);
	/* 11 groups of 10^6 steps: past SERIES_MAX_POINTS (10^7), refused
	 * before the 11th group's 8 MB are allocated; at half the steps all
	 * 11 groups answer. */
	for (int i = 0; i < 9; i++) {
		char env[8];

		snprintf(env, sizeof(env), "e%d", i);
		write_one(db, "t", "api", env, 0, "a=1");
	}
	req.step_ms = 1;
	req.sel.end_ms = 1000 * SEC;
	sm_err_clear(&err);
	SM_CHECK_EQ(ing_db_series(db, &req, a, &out, &err), SM_ELIMIT);
	SM_CHECK(strstr(err.msg, "more than 10000000 points (11 groups of "
	    "1000000 steps)") != NULL);
	req.step_ms = 2;
	SM_REQUIRE(ing_db_series(db, &req, a, &out, &err) == 0);
	SM_CHECK_EQ(out.n_series, 11);
	sm_arena_destroy(a);
	ing_db_close(db);
}

static void
test_labels_query(void)
{
	struct ing_db *db = mem_db();
	struct ing_query req = { 0 };
	Smolder__V1__LabelsResponse out;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;
	const char *names[] = { "service_name" };

	write_one(db, "t", "api", "prod", 0, "a=1");
	write_one(db, "t", "api", "dev", 0, "a=1");
	write_one(db, "t", "web", NULL, 100 * SEC, "a=1");
	req.sel.tenant = "t";
	req.all_time = 1;
	req.kind = ING_LABEL_NAMES;
	SM_REQUIRE(ing_db_labels(db, &req, a, &out, &err) == 0);
	SM_REQUIRE(out.n_names == 3);
	SM_CHECK_STR(out.names[0], "__name__");
	SM_CHECK_STR(out.names[1], "env");
	SM_CHECK_STR(out.names[2], "service_name");
	req.kind = ING_LABEL_VALUES;
	req.name = "env";
	SM_REQUIRE(ing_db_labels(db, &req, a, &out, &err) == 0);
	SM_REQUIRE(out.n_names == 2);
	SM_CHECK_STR(out.names[0], "dev");
	SM_CHECK_STR(out.names[1], "prod");
	/* A time range excludes web. */
	req.all_time = 0;
	req.sel.start_ms = 0;
	req.sel.end_ms = 10 * SEC;
	req.name = "service_name";
	SM_REQUIRE(ing_db_labels(db, &req, a, &out, &err) == 0);
	SM_REQUIRE(out.n_names == 1);
	SM_CHECK_STR(out.names[0], "api");
	/* Distinct restricted sets with their metadata. */
	req.all_time = 1;
	req.kind = ING_SERIES_LABELS;
	req.nlabel_names = 1;
	req.label_names = names;
	SM_REQUIRE(ing_db_labels(db, &req, a, &out, &err) == 0);
	SM_REQUIRE(out.n_series == 2);
	SM_CHECK_STR(out.series[0]->labels[0]->value, "api");
	SM_CHECK_STR(out.series[1]->labels[0]->value, "web");
	SM_CHECK_STR(out.meta[0]->spy_name, "gospy");
	sm_arena_destroy(a);
	ing_db_close(db);
}

static void
test_malformed_writes(void)
{
	struct ing_db *db = mem_db();
	struct sm_buf raw = SM_BUF_INIT;
	Smolder__V1__Request *req;
	struct sm_err err;
	struct ing_write_result res;
	uint32_t saved;
	Smolder__V1__WriteRequest *w;

	mkwrite("t", "app", NULL, 0, "a;b=3,c=1", &raw);
	req = smolder__v1__request__unpack(NULL, raw.len, (uint8_t *)raw.b);
	w = req->write;
#define BAD() SM_CHECK_EQ(ing_db_write(db, (uint8_t *)raw.b, raw.len, w, \
	&res, &err), SM_EMALFORMED)
	saved = w->tree->parent[0];
	w->tree->parent[0] = 2;          /* parent after child */
	BAD();
	w->tree->parent[0] = saved;
	saved = w->tree->name[0];
	w->tree->name[0] = 99;           /* name out of range */
	BAD();
	w->tree->name[0] = saved;
	w->series[0]->value[0] = 0;      /* value <= 0 */
	BAD();
	w->series[0]->value[0] = 3;
	saved = w->series[0]->node[0];
	w->series[0]->node[0] = w->series[0]->node[1];   /* unsorted */
	BAD();
	w->series[0]->node[0] = saved;
	w->series[0]->node[1] = 1000;    /* node beyond the tree */
	BAD();
#undef BAD
	/* None of it reached the data. */
	check_merged(db, "t", SEC, "");
	smolder__v1__request__free_unpacked(req, NULL);
	sm_buf_fini(&raw);
	ing_db_close(db);
}

struct worker {
	struct ing_db *db;
	int id;
};

static void *
writer_main(void *p)
{
	struct worker *w = p;

	for (int i = 0; i < 300; i++) {
		char stacks[64];

		snprintf(stacks, sizeof(stacks), "root;f%d=1,root;g=2", i % 7);
		if (write_one(w->db, "t", "app", NULL, (int64_t)(i % 30) * SEC,
		    stacks) != 0)
			abort();
	}
	return (NULL);
}

static void *
reader_main(void *p)
{
	struct worker *w = p;

	for (int i = 0; i < 50; i++)
		free(merge_collapsed(w->db, "t", NULL, 0, NULL, 0, 60 * SEC,
		    NULL));
	return (NULL);
}

static const char *const concurrent_want =
    "root;f0 172\nroot;f1 172\nroot;f2 172\nroot;f3 172\nroot;f4 172\n"
    "root;f5 172\nroot;f6 168\nroot;g 2400\n";

static void
test_concurrent_writers_and_readers(void)
{
	struct ing_db *db = mem_db();
	struct worker w[6];
	pthread_t t[6];
	uint64_t profiles;

	for (int i = 0; i < 6; i++) {
		w[i] = (struct worker){ db, i };
		pthread_create(&t[i], NULL, i < 4 ? writer_main : reader_main,
		    &w[i]);
	}
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	/* 4 writers x 300 uploads: g = 2 each, f0..f6 = 1 each. */
	check_collapsed(merge_collapsed(db, "t", NULL, 0, NULL, 0, 60 * SEC,
	    &profiles), concurrent_want);
	SM_CHECK_EQ(profiles, 1200);
	ing_db_close(db);
}

/*
 * Yielding (set.h): a query holding a head's read lock lets a waiting write
 * in at its next yield, and the write's series are there afterwards.
 * Without the yield the loop below never ends (the write waits for the
 * lock this thread holds); the bound turns that into a failure.
 */
struct head_writer {
	struct ing_head *h;
	const Smolder__V1__WriteRequest *w;
	int rv;
};

static void *
head_writer_main(void *p)
{
	struct head_writer *hw = p;
	uint32_t ns, np;
	struct sm_err err;

	hw->rv = ing_head_write(hw->h, hw->w, 0, &ns, &np, &err);
	return (NULL);
}

static void
test_query_yields_to_write(void)
{
	struct sm_buf raw = SM_BUF_INIT;
	Smolder__V1__Request *req;
	struct ing_head *h;
	struct ing_yield y;
	struct head_writer hw;
	pthread_t t;
	int64_t until = sm_mono_ns() + 10 * (int64_t)1000000000;

	SM_CHECK_EQ(ing_head_create(1, 10 * SEC, &h), 0);
	y = ing_head_yield(h);
	mkwrite("t", "app", "e1", 0, "root;f=1", &raw);
	req = smolder__v1__request__unpack(NULL, raw.len, (uint8_t *)raw.b);
	SM_CHECK(req != NULL && req->write != NULL);
	hw = (struct head_writer){ h, req->write, -1 };
	pthread_rwlock_rdlock(&h->lock);          /* a query's hold */
	pthread_create(&t, NULL, head_writer_main, &hw);
	while (h->set.nseries == 0 && sm_mono_ns() < until)
		ing_yield(&y);
	SM_CHECK_EQ(h->set.nseries, 1);
	pthread_rwlock_unlock(&h->lock);
	pthread_join(t, NULL);
	SM_CHECK_EQ(hw.rv, 0);
	SM_CHECK_EQ(atomic_load(&h->lock_waiting), 0);
	/* Nothing waits: a yield keeps the lock and returns at once. */
	pthread_rwlock_rdlock(&h->lock);
	ing_yield(&y);
	SM_CHECK_EQ(pthread_rwlock_trywrlock(&h->lock), EBUSY);
	pthread_rwlock_unlock(&h->lock);
	smolder__v1__request__free_unpacked(req, NULL);
	sm_buf_fini(&raw);
	ing_head_unref(h);
}

/*
 * Queries over many series while writes add series, frames and tree nodes
 * under them: every query yields often, so it reads a tree that grew and
 * series arrays that moved (ASan checks the reads).  What each query sees
 * is bounded by the writes before it started and after it ended, and every
 * series' total is whole.
 */
enum { YW_SERIES = 400, YW_WRITES = 300 };

static _Atomic int yw_done;

static void *
yield_writer_main(void *p)
{
	struct ing_db *db = p;

	for (int i = 0; i < YW_WRITES; i++) {
		char env[32], stacks[96];

		/* New series and new frames: the tree and arrays grow. */
		snprintf(env, sizeof(env), "w%d", i);
		snprintf(stacks, sizeof(stacks), "root;new%d;leaf%d=1", i, i);
		if (write_one(db, "t", "app", env, 0, stacks) != 0)
			abort();
		/* And an existing series' bucket. */
		snprintf(env, sizeof(env), "e%d", i % YW_SERIES);
		if (write_one(db, "t", "app", env, 0, "root;old=1") != 0)
			abort();
	}
	atomic_store(&yw_done, 1);
	return (NULL);
}

static int64_t
collapsed_total(const char *text)
{
	int64_t sum = 0;

	for (const char *l = text; *l != '\0'; ) {
		const char *sp = strchr(l, ' '), *nl = strchr(l, '\n');

		if (sp == NULL || nl == NULL)
			break;
		sum += atoll(sp + 1);
		l = nl + 1;
	}
	return (sum);
}

static void
test_queries_while_writes_grow_the_head(void)
{
	struct ing_db *db = mem_db();
	pthread_t t;
	int64_t last = 0;
	int queries = 0;

	for (int i = 0; i < YW_SERIES; i++) {
		char env[32];

		snprintf(env, sizeof(env), "e%d", i);
		SM_CHECK_EQ(write_one(db, "t", "app", env, 0, "root;old=1"), 0);
	}
	atomic_store(&yw_done, 0);
	pthread_create(&t, NULL, yield_writer_main, db);
	while (!atomic_load(&yw_done) || queries < 3) {
		char *got = merge_collapsed(db, "t", NULL, 0, NULL, 0,
		    60 * SEC, NULL);
		int64_t tot = collapsed_total(got);

		/* Writes only add; every write adds 1 or 2 in full. */
		SM_CHECK(tot >= last);
		SM_CHECK(tot >= YW_SERIES && tot <= YW_SERIES + 2 * YW_WRITES);
		last = tot;
		free(got);
		queries++;
	}
	pthread_join(t, NULL);
	{
		char *got = merge_collapsed(db, "t", NULL, 0, NULL, 0,
		    60 * SEC, NULL);

		SM_CHECK_EQ(collapsed_total(got), YW_SERIES + 2 * YW_WRITES);
		free(got);
	}
	ing_db_close(db);
}

/* --- with a RocksDB store ------------------------------------------------- */

/* A db (sm_test_disk.h) cutting blocks every block_ms. */
static void
disk_init(struct disk *d, int64_t block_ms)
{
	struct ing_db_cfg cfg = { 10 * SEC, block_ms, 0, 3, 0, 0, 0, 0, NULL,
	    NULL };

	disk_create(d, "dbtest", &cfg);
}

/* Reopen with another block duration. */
static void
disk_open(struct disk *d, int64_t block_ms)
{
	d->cfg.block_ms = block_ms;
	disk_reopen(d);
}

static void
test_replay_after_reopen(void)
{
	struct disk d;

	disk_init(&d, 3600 * SEC);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "a;b=3,c=1"), 0);
	SM_CHECK_EQ(write_one(d.db, "u", "app", NULL, 0, "x=5"), 0);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, SEC, "a;b=1"), 0);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_merged(d.db, "t", 60 * SEC, "a;b 4\nc 1\n");
	check_merged(d.db, "u", 60 * SEC, "x 5\n");
	/* Writes after a replay go on, and replay again. */
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "c=2"), 0);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_merged(d.db, "t", 60 * SEC, "a;b 4\nc 3\n");
	disk_fini(&d);
}

static void
test_cut_blocks_and_reopen(void)
{
	struct disk d;
	struct sm_err err;
	struct ing_db_stats st;

	disk_init(&d, 3600 * SEC);
	SM_CHECK_EQ(write_one(d.db, "t", "app", "prod", 0, "a;b=3,c=1"), 0);
	SM_CHECK_EQ(write_one(d.db, "t", "web", NULL, 20 * SEC, "w=7"), 0);
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	ing_db_stats(d.db, &st);
	SM_CHECK_EQ(st.blocks, 1);
	SM_CHECK_EQ(st.series, 0);   /* the new head is empty */
	/* After the cut the block answers. */
	SM_CHECK_EQ(write_one(d.db, "t", "app", "prod", 5 * SEC, "a;b=1"), 0);
	check_merged(d.db, "t", 60 * SEC, "a;b 4\nc 1\nw 7\n");
	check_collapsed(merge_collapsed(d.db, "t", "env",
	    SM_MATCH_EQ, "prod", 0, 60 * SEC, NULL),
	    "a;b 4\nc 1\n");
	check_collapsed(merge_collapsed(d.db, "t", NULL, 0, NULL, 20 * SEC,
	    30 * SEC, NULL), "w 7\n");
	/* Reopen: the block is read back and the newer write replayed;
	 * the cut one is not replayed twice. */
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	ing_db_stats(d.db, &st);
	SM_CHECK_EQ(st.blocks, 1);
	check_merged(d.db, "t", 60 * SEC, "a;b 4\nc 1\nw 7\n");
	/* A second cut after the replay; reopen again. */
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	ing_db_stats(d.db, &st);
	SM_CHECK_EQ(st.blocks, 2);
	check_merged(d.db, "t", 60 * SEC, "a;b 4\nc 1\nw 7\n");
	disk_fini(&d);
}

/* A write whose stack tree repeats a child (nodes 1 and 2 are both "a"
 * under the root) is summed into one pair, and its block reads back
 * (fuzz_rpc: the two pairs were kept apart and the block was rejected as
 * corrupt). */
static void
test_repeated_tree_child(void)
{
	struct disk d;
	struct sm_buf raw = SM_BUF_INIT;
	struct sm_buf re = SM_BUF_INIT;
	Smolder__V1__Request *req;
	struct ing_write_result res;
	struct sm_err err;

	disk_init(&d, 3600 * SEC);
	mkwrite("t", "app", NULL, 0, "a=1,b=2", &raw);
	req = smolder__v1__request__unpack(NULL, raw.len, (uint8_t *)raw.b);
	SM_REQUIRE(req != NULL && req->write->tree->n_parent == 2);
	req->write->tree->name[1] = req->write->tree->name[0];
	sm_buf_reserve(&re, smolder__v1__request__get_packed_size(req));
	re.len = smolder__v1__request__pack(req, (uint8_t *)re.b);
	SM_CHECK_EQ(ing_db_write(d.db, (uint8_t *)re.b, re.len, req->write,
	    &res, &err), 0);
	check_merged(d.db, "t", 60 * SEC, "a 3\n");
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	check_merged(d.db, "t", 60 * SEC, "a 3\n");
	smolder__v1__request__free_unpacked(req, NULL);
	sm_buf_fini(&raw);
	sm_buf_fini(&re);
	disk_fini(&d);
}

static void
test_corruption_stays_in_its_block(void)
{
	static const char kinds[] = { 'I', 'S', 'T', 'D' };
	struct sm_err err;

	for (size_t i = 0; i < sizeof(kinds); i++) {
		struct disk d;

		disk_init(&d, 3600 * SEC);
		/* Block A: times 0..10 s; block B: 100..110 s. */
		SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "a=1"), 0);
		SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
		SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 100 * SEC, "b=2"),
		    0);
		SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
		disk_close(&d);
		disk_open(&d, 3600 * SEC);
		/* Block A is generation 1 (the first head). */
		disk_damage(&d, 1, kinds[i], 0);
		disk_close(&d);
		disk_open(&d, 3600 * SEC);
		check_collapsed(merge_collapsed(d.db, "t", NULL, 0, NULL,
		    100 * SEC, 120 * SEC, NULL), "b 2\n");
		check_collapsed(merge_collapsed(d.db, "t", NULL, 0, NULL, 0,
		    10 * SEC, NULL), "ERR -30997");   /* SM_ECORRUPT */
		/* And the healthy block again, after the failure. */
		check_collapsed(merge_collapsed(d.db, "t", NULL, 0, NULL,
		    100 * SEC, 120 * SEC, NULL), "b 2\n");
		disk_fini(&d);
	}
}

static void
test_damaged_meta(void)
{
	struct sm_err err;
	struct disk d;

	/* Meta alone damaged: rebuilt from the index, answers are exact. */
	disk_init(&d, 3600 * SEC);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "a=1"), 0);
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 100 * SEC, "b=2"), 0);
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	disk_damage(&d, 1, 'M', 0);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_merged(d.db, "t", 10 * SEC, "a 1\n");
	check_merged(d.db, "t", 200 * SEC, "a 1\nb 2\n");
	/* Meta and index damaged: the range is unknown, so no query of the
	 * tenant can be complete -- they fail instead of under-counting;
	 * other tenants are untouched. */
	SM_CHECK_EQ(write_one(d.db, "u", "app", NULL, 0, "x=3"), 0);
	disk_damage(&d, 1, 'I', 0);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_collapsed(merge_collapsed(d.db, "t", NULL, 0, NULL, 100 * SEC,
	    200 * SEC, NULL), "ERR -30997");
	check_merged(d.db, "u", 10 * SEC, "x 3\n");
	disk_fini(&d);
}

/* --- idempotency, picks, stats ---------------------------------------------- */

static void
test_duplicate_profile_ids(void)
{
	struct ing_db *db = mem_db();

	use_id = 77;
	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 0, "a;b=3"), 0);
	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 0, "a;b=3"), 1);
	/* Another tenant's id space is its own. */
	SM_CHECK_EQ(write_one(db, "u", "app", NULL, 0, "a;b=3"), 0);
	use_id = 0;
	SM_CHECK_EQ(write_one(db, "t", "app", NULL, 0, "a;b=3"), 0);
	check_merged(db, "t", 60 * SEC, "a;b 6\n");
	check_merged(db, "u", 60 * SEC, "a;b 3\n");
	ing_db_close(db);
}

/* A resend after a crash: the id comes back with the head log. */
static void
test_duplicate_after_replay(void)
{
	struct disk d;

	disk_init(&d, 3600 * SEC);
	use_id = 4242;
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "x=5"), 0);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "x=5"), 1);
	use_id = 0;
	check_merged(d.db, "t", 60 * SEC, "x 5\n");
	disk_fini(&d);
}

/* Merge with picks: only the picked series, and buckets when listed. */
static char *
merge_picked(struct ing_db *db, const struct ing_pick *picks, size_t n,
    int64_t end)
{
	struct ing_query req = { 0 };
	char *text;

	req.sel.tenant = "t";
	req.sel.start_ms = 0;
	req.sel.end_ms = end;
	req.sel.picked = 1;
	req.sel.picks = picks;
	req.sel.npicks = n;
	text = collapse_select(db, &req, NULL);
	if (strncmp(text, "ERR", 3) == 0)
		text[3] = '\0';
	return (text);
}

/* Fingerprint of the test series {__name__=process_cpu, service_name=s}. */
static uint64_t
fp_of(const char *service)
{
	struct sm_label ls[2] = { { "__name__", "process_cpu" },
		{ "service_name", service } };

	return (sm_labels_fingerprint(ls, 2));
}

static void
test_picks(void)
{
	struct ing_db *db = mem_db();
	int64_t tb[1] = { 10 * SEC };
	uint64_t fa = fp_of("a"), fb = fp_of("b");
	struct ing_pick pa = { .fp = fa }, pb = { .fp = fb }, v[2];

	SM_CHECK_EQ(write_one(db, "t", "a", NULL, 0, "x=1"), 0);
	SM_CHECK_EQ(write_one(db, "t", "a", NULL, 10 * SEC, "x=2"), 0);
	SM_CHECK_EQ(write_one(db, "t", "b", NULL, 0, "y=4"), 0);
	SM_CHECK_EQ(write_one(db, "t", "b", NULL, 10 * SEC, "y=8"), 0);
	v[0] = fa < fb ? pa : pb;
	v[1] = fa < fb ? pb : pa;
	check_collapsed(merge_picked(db, v, 2, 60 * SEC), "x 3\ny 12\n");
	/* Only a. */
	v[0] = pa;
	check_collapsed(merge_picked(db, v, 1, 60 * SEC), "x 3\n");
	/* Nothing picked: nothing. */
	check_collapsed(merge_picked(db, v, 0, 60 * SEC), "");
	/* b's second bucket only. */
	pb.t = tb;
	pb.nt = 1;
	v[0] = pb;
	check_collapsed(merge_picked(db, v, 1, 60 * SEC), "y 8\n");
	/* Unsorted picks are refused. */
	v[0] = fa < fb ? pb : pa;
	v[1] = fa < fb ? pa : pb;
	check_collapsed(merge_picked(db, v, 2, 60 * SEC), "ERR");
	/* b's first bucket added, its second subtracted (a replica's part in
	 * A + B - C, querier/plan.c). */
	{
		int64_t t0[1] = { 0 };

		pb.t = t0;
		pb.nt = 1;
		pb.neg = tb;
		pb.nneg = 1;
		v[0] = pb;
		check_collapsed(merge_picked(db, v, 1, 60 * SEC), "y -4\n");
		/* only subtracted */
		pb.nt = 0;
		v[0] = pb;
		check_collapsed(merge_picked(db, v, 1, 60 * SEC), "y -8\n");
		/* a bucket both added and subtracted is refused */
		pb.t = tb;
		pb.nt = 1;
		v[0] = pb;
		check_collapsed(merge_picked(db, v, 1, 60 * SEC), "ERR");
	}
	ing_db_close(db);
}

/* ing_db_picks_check of the select over tenant t with picks v[0..n). */
static int
picks_check(struct ing_db *db, const struct ing_pick *v, size_t n,
    struct sm_err *err)
{
	struct ing_query q = { 0 };

	q.sel.tenant = "t";
	q.sel.start_ms = 0;
	q.sel.end_ms = 60 * SEC;
	q.sel.picked = 1;
	q.sel.picks = v;
	q.sel.npicks = n;
	sm_err_clear(err);
	return (ing_db_picks_check(db, &q, err));
}

/* The counts a combination's picks check (db.h, ing_db_picks_check):
 * unchanged passes, an upload more or a bucket gone is SM_EAGAIN, a 0
 * is not checked, nor is a pick without counts. */
static void
test_picks_check(void)
{
	struct ing_db *db = mem_db();
	int64_t t2[2] = { 0, 10 * SEC }, t0[1] = { 0 }, t1[1] = { 10 * SEC };
	int64_t t3[1] = { 20 * SEC };
	uint32_t c11[2] = { 1, 1 }, c12[2] = { 1, 2 }, c10[2] = { 1, 0 };
	uint32_t c1[1] = { 1 };
	struct ing_pick pk = { .fp = fp_of("a"), .t = t2, .nt = 2 };
	struct sm_err err;

	SM_CHECK_EQ(write_one(db, "t", "a", NULL, 0, "x=1"), 0);
	SM_CHECK_EQ(write_one(db, "t", "a", NULL, 10 * SEC, "x=2"), 0);
	SM_CHECK_EQ(picks_check(db, &pk, 1, &err), 0);   /* no counts */
	pk.count = c11;
	SM_CHECK_EQ(picks_check(db, &pk, 1, &err), 0);
	pk.count = c12;
	SM_CHECK_EQ(picks_check(db, &pk, 1, &err), SM_EAGAIN);
	SM_CHECKF(strstr(err.msg, "changed since the plan") != NULL &&
	    strstr(err.msg, "holds 1 uploads") != NULL, "%s", err.msg);
	pk.count = c10;
	SM_CHECK_EQ(picks_check(db, &pk, 1, &err), 0);
	/* A's part in A + B - C: bucket 0 added, bucket 10 subtracted. */
	pk = (struct ing_pick){ .fp = fp_of("a"), .t = t0, .nt = 1,
		.neg = t1, .nneg = 1, .count = c1, .neg_count = c1 };
	SM_CHECK_EQ(picks_check(db, &pk, 1, &err), 0);
	/* An upload lands in the subtracted bucket after the plan. */
	SM_CHECK_EQ(write_one(db, "t", "a", NULL, 10 * SEC, "x=4"), 0);
	SM_CHECK_EQ(picks_check(db, &pk, 1, &err), SM_EAGAIN);
	/* A checked bucket the target no longer holds. */
	pk = (struct ing_pick){ .fp = fp_of("a"), .t = t3, .nt = 1,
		.count = c1 };
	SM_CHECK_EQ(picks_check(db, &pk, 1, &err), SM_EAGAIN);
	SM_CHECKF(strstr(err.msg, "holds 0 uploads") != NULL, "%s", err.msg);
	/* A series the target does not hold at all. */
	pk.fp = fp_of("zz");
	pk.t = t0;
	SM_CHECK_EQ(picks_check(db, &pk, 1, &err), SM_EAGAIN);
	ing_db_close(db);
}

static bool stats_with_ids;    /* stats_of asks for the uploads' ids */

static Smolder__V1__StatsResponse *
stats_of(struct ing_db *db, const uint64_t *detail, size_t nd,
    struct sm_arena *a)
{
	struct ing_query req = { 0 };
	Smolder__V1__StatsResponse *out = sm_arena_alloc(a, sizeof(*out));
	struct sm_err err;

	req.sel.tenant = "t";
	req.sel.start_ms = 0;
	req.sel.end_ms = 3600 * SEC;
	req.detail = (uint64_t *)detail;
	req.ndetail = nd;
	req.ids = stats_with_ids;
	SM_REQUIRE(ing_db_series_stats(db, &req, a, out, &err) == 0);
	return (out);
}

/*
 * Two "replicas" with the same uploads, one of them cut into a block in
 * the middle of a bucket: same counts and digest.  A replica missing an
 * upload differs, and the detail says in which bucket.
 */
static void
test_stats_digest(void)
{
	struct disk d;
	struct ing_db *mem = mem_db();
	struct sm_arena *a = sm_arena_create(0);
	Smolder__V1__StatsResponse *x, *y;
	struct sm_err err;
	uint64_t fa = fp_of("a");

	disk_init(&d, 3600 * SEC);
	for (int i = 0; i < 6; i++) {
		int64_t t = (int64_t)i * 4 * SEC;

		use_id = 1000 + (uint64_t)i;
		SM_CHECK_EQ(write_one(d.db, "t", "a", NULL, t, "x=1"), 0);
		SM_CHECK_EQ(write_one(mem, "t", "a", NULL, t, "x=1"), 0);
		if (i == 1)   /* cut inside the first bucket */
			SM_CHECK_EQ(ing_db_flush(d.db, &err), 0);
	}
	use_id = 0;
	SM_CHECK_EQ(write_one(mem, "t", "b", NULL, 0, "y=1"), 0);
	x = stats_of(d.db, NULL, 0, a);
	y = stats_of(mem, NULL, 0, a);
	SM_REQUIRE(x->n_series == 1 && y->n_series == 2);
	SM_CHECK_EQ(x->series[0]->fp, fa);
	SM_CHECK(y->series[0]->fp == fa || y->series[1]->fp == fa);
	if (y->series[0]->fp != fa) {
		Smolder__V1__SeriesStat *t = y->series[0];

		y->series[0] = y->series[1];
		y->series[1] = t;
	}
	SM_CHECK_EQ(x->series[0]->profiles, 6);
	SM_CHECK_EQ(y->series[0]->profiles, 6);
	SM_CHECK_EQ(x->series[0]->digest, y->series[0]->digest);
	/* One more upload in the second bucket on one replica only. */
	use_id = 2000;
	SM_CHECK_EQ(write_one(mem, "t", "a", NULL, 15 * SEC, "x=1"), 0);
	use_id = 0;
	y = stats_of(mem, &fa, 1, a);
	x = stats_of(d.db, &fa, 1, a);
	if (y->series[0]->fp != fa)
		y->series[0] = y->series[1];
	SM_CHECK(x->series[0]->digest != y->series[0]->digest);
	/* Buckets 0 s (uploads at 0, 4, 8), 10 s (12, 16), 20 s (20). */
	SM_REQUIRE(x->series[0]->n_t == 3 && y->series[0]->n_t == 3);
	SM_CHECK_EQ(x->series[0]->t[0], 0);          /* split bucket summed */
	SM_CHECK_EQ(x->series[0]->count[0], 3);
	SM_CHECK_EQ(x->series[0]->t[1], 10 * SEC);
	SM_CHECK_EQ(x->series[0]->count[1], 2);
	SM_CHECK_EQ(x->series[0]->count[2], 1);
	SM_CHECK_EQ(y->series[0]->count[1], 3);
	/* With ids: each bucket's uploads, from the block's records and the
	 * head's -- the split bucket's from both. */
	stats_with_ids = true;
	x = stats_of(d.db, &fa, 1, a);
	y = stats_of(mem, &fa, 1, a);
	stats_with_ids = false;
	if (y->series[0]->fp != fa)
		y->series[0] = y->series[1];
	SM_REQUIRE(x->series[0]->n_nids == 3 && y->series[0]->n_nids == 3);
	SM_CHECK_EQ(x->series[0]->nids[0], 3);
	SM_CHECK_EQ(x->series[0]->nids[1], 2);
	SM_CHECK_EQ(x->series[0]->nids[2], 1);
	SM_CHECK_EQ(y->series[0]->nids[1], 3);
	SM_CHECK_EQ(x->series[0]->n_ids, 6);
	SM_REQUIRE(y->series[0]->n_ids == 7);
	/* the same uploads hash alike on both; the extra one is in y's
	 * second bucket only */
	SM_CHECK(memcmp(x->series[0]->ids, y->series[0]->ids,
	    3 * sizeof(uint64_t)) == 0);
	{
		uint8_t id[16] = { 0 };
		uint64_t v = 2000, h;
		int found = 0;

		memcpy(id, &v, sizeof(v));
		h = sm_hash(id, 16);
		for (int k = 3; k < 6; k++)
			found += y->series[0]->ids[k] == h;
		SM_CHECK_EQ(found, 1);
		for (int k = 0; k < 6; k++)
			SM_CHECK(x->series[0]->ids[k] != h);
	}
	sm_arena_destroy(a);
	ing_db_close(mem);
	disk_fini(&d);
}

/* 1 when block `id` of `tenant` has its tree part on disk. */
static int
tenant_block_exists(struct disk *d, const char *tenant, uint64_t id)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_err err;
	struct sm_key k;
	int rv;

	ing_key_part(&k, tenant, id, 'T', 0);
	rv = sm_kv_get(ing_store_kv(d->store), SM_KV_BLOCKS, k.b, k.n, &v,
	    &err);
	sm_buf_fini(&v);
	return (rv == 0);
}

/* 1 when block `id` of tenant "t" has its tree part on disk. */
static int
block_part_exists(struct disk *d, uint64_t id)
{
	return (tenant_block_exists(d, "t", id));
}

/*
 * Retention: blocks that end before the floor leave the query path at once
 * and the disk after the grace period (or at the next open); head data
 * before the floor is hidden; the floor survives a restart.
 */
static void
test_retention(void)
{
	struct disk d;
	struct sm_err err;
	uint32_t n;

	disk_init(&d, 3600 * SEC);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "old=1"), 0);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 10 * SEC, "old=2"), 0);
	SM_CHECK_EQ(ing_db_flush(d.db, &err), 0);          /* block [0, 20s) */
	SM_CHECK_EQ(block_part_exists(&d, 1), 1);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 20 * SEC, "mid=4"), 0);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 100 * SEC, "new=8"), 0);
	check_merged(d.db, "t", 200 * SEC, "mid 4\nnew 8\nold 3\n");
	SM_CHECK_EQ(ing_db_retention(d.db, 30 * SEC, NULL, 0, &n, &err), 0);
	SM_CHECK_EQ(n, 1);
	/* The block is out; the head's bucket at 20 s is hidden too. */
	check_merged(d.db, "t", 200 * SEC, "new 8\n");
	check_merged(d.db, "t", 25 * SEC, "");
	/* A lower floor changes nothing. */
	SM_CHECK_EQ(ing_db_retention(d.db, 5 * SEC, NULL, 0, &n, &err), 0);
	SM_CHECK_EQ(n, 0);
	check_merged(d.db, "t", 200 * SEC, "new 8\n");
	/* Restart: the floor holds; the retired block is deleted on the
	 * first tick after the open. */
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_merged(d.db, "t", 200 * SEC, "new 8\n");
	SM_CHECK_EQ(block_part_exists(&d, 1), 1);
	ing_db_tick(d.db, sm_now_ms());
	SM_CHECK_EQ(block_part_exists(&d, 1), 0);
	disk_fini(&d);
}

/*
 * The memory bound (db.h, ing_db_tick) on a fake measurement: when RSS
 * plus what a cut would take passes 80% of head_max_bytes the heads are
 * cut (only while they hold a sixteenth of it), over 95% writes are refused with SM_EUNAVAIL before the log, and
 * they resume under 85%, not before.  What was acknowledged stays.
 */
static uint64_t
fake_rss(void *arg)
{
	return (*(uint64_t *)arg);
}

static void
test_memory_bound(void)
{
	struct ing_db_stats st;
	struct disk d;
	uint64_t rss = 0, max;
	char stack[64];

	uint64_t one;
	int nw;

	disk_init(&d, 3600 * SEC);
	/* Enough writes that one write's head is a third of them. */
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "main;f0000=1"), 0);
	ing_db_stats(d.db, &st);
	one = st.head_bytes;
	for (nw = 1; nw < 5000 && st.head_bytes < 3 * one; nw++) {
		snprintf(stack, sizeof(stack), "main;f%04d=1", nw);
		SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, nw * SEC, stack),
		    0);
		ing_db_stats(d.db, &st);
	}
	SM_CHECK(st.head_bytes >= 3 * one);
	max = st.head_bytes * 8;      /* the heads hold an eighth of it, */
				      /* one write's head under a 16th */
	disk_close(&d);
	d.cfg.head_max_bytes = max;
	d.cfg.rss = fake_rss;
	d.cfg.rss_arg = &rss;
	disk_open(&d, 3600 * SEC);    /* the replay brings the head back */

	/* Under 80% with what a cut would take (the heads, an eighth of
	 * max, and 5 x that again): nothing happens. */
	rss = max / 100 * 5;
	ing_db_tick(d.db, sm_now_ms());
	ing_db_stats(d.db, &st);
	SM_CHECK_EQ(st.blocks, 0);
	SM_CHECK(!ing_db_mem_refusing(d.db));
	/* Over 80%: the heads are cut, writes still accepted. */
	rss = max / 100 * 90;
	ing_db_tick(d.db, sm_now_ms());
	ing_db_stats(d.db, &st);
	SM_CHECK_EQ(st.blocks, 1);
	SM_CHECK(!ing_db_mem_refusing(d.db));
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 6000 * SEC, "main;g=2"),
	    0);
	/* Still over 80%, but the new head is small: no cut of nothing. */
	ing_db_tick(d.db, sm_now_ms());
	ing_db_stats(d.db, &st);
	SM_CHECK_EQ(st.blocks, 1);
	/* Over 95%: refused, before the log (nothing applied). */
	rss = max / 100 * 96;
	ing_db_tick(d.db, sm_now_ms());
	SM_CHECK(ing_db_mem_refusing(d.db));
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 6001 * SEC, "main;h=4"),
	    SM_EUNAVAIL);
	/* Between 85% and 95%: still refused (hysteresis). */
	rss = max / 100 * 90;
	ing_db_tick(d.db, sm_now_ms());
	SM_CHECK(ing_db_mem_refusing(d.db));
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 6002 * SEC, "main;h=4"),
	    SM_EUNAVAIL);
	/* Under 85%: accepted again. */
	rss = max / 100 * 84;
	ing_db_tick(d.db, sm_now_ms());
	SM_CHECK(!ing_db_mem_refusing(d.db));
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 6003 * SEC, "main;h=8"),
	    0);
	/* Every acknowledged write, none of the refused ones; and again
	 * after a restart (the refused ones were never logged). */
	for (int k = 0; k < 2; k++) {
		char want[5000 * 16 + 64];
		size_t n = 0;

		for (int i = 0; i < nw; i++)
			n += (size_t)snprintf(want + n, sizeof(want) - n,
			    "main;f%04d 1\n", i);
		snprintf(want + n, sizeof(want) - n, "main;g 2\nmain;h 8\n");
		check_merged(d.db, "t", 7000 * SEC, want);
		if (k == 0) {
			disk_close(&d);
			rss = 0;
			disk_open(&d, 3600 * SEC);
		}
	}
	disk_fini(&d);
}

/* The service_name values of `tenant` over all time, comma-joined. */
static char *
services_all_time(struct ing_db *db, const char *tenant)
{
	struct ing_query req = { 0 };
	Smolder__V1__LabelsResponse out;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_buf b = SM_BUF_INIT;
	struct sm_err err;
	char *text;

	req.sel.tenant = (char *)tenant;
	req.all_time = 1;
	req.kind = ING_LABEL_VALUES;
	req.name = "service_name";
	if (ing_db_labels(db, &req, a, &out, &err) != 0)
		sm_buf_puts(&b, "ERR");
	else
		for (size_t i = 0; i < out.n_names; i++)
			sm_buf_printf(&b, "%s%s", i > 0 ? "," : "",
			    out.names[i]);
	text = strdup(b.b != NULL ? b.b : "");
	sm_buf_fini(&b);
	sm_arena_destroy(a);
	return (text);
}

/* The floors test_retention_tenants sets: a's and the default 30 s, b
 * none, c 50 s. */
static void
check_tenant_floors(struct ing_db *db)
{
	SM_CHECK_EQ(ing_db_floor(db, "a"), 30 * SEC);
	SM_CHECK_EQ(ing_db_floor(db, "b"), INT64_MIN);
	SM_CHECK_EQ(ing_db_floor(db, "c"), 50 * SEC);
	SM_CHECK_EQ(ing_db_floor(db, "later"), 30 * SEC);
}

/*
 * Retention per tenant: a named tenant gets a floor of its own ("keep"
 * for b, 50 s for c before c has any data), every other tenant the
 * default; each sees only its own data above its floor (merge and
 * all-time labels), across a reopen; floors never lower; a tenant no
 * longer named follows the default again.
 */
static void
test_retention_tenants(void)
{
	struct ing_tenant_floor tf[3];
	struct disk d;
	struct sm_err err;
	uint32_t n;

	disk_init(&d, 3600 * SEC);
	SM_CHECK_EQ(write_one(d.db, "a", "olda", NULL, 0, "old=1"), 0);
	SM_CHECK_EQ(write_one(d.db, "b", "oldb", NULL, 10 * SEC, "old=2"), 0);
	SM_CHECK_EQ(ing_db_flush(d.db, &err), 0);     /* a: gen 1, b: gen 2 */
	SM_CHECK_EQ(tenant_block_exists(&d, "a", 1), 1);
	SM_CHECK_EQ(tenant_block_exists(&d, "b", 2), 1);
	SM_CHECK_EQ(write_one(d.db, "a", "mida", NULL, 20 * SEC, "mid=4"), 0);
	SM_CHECK_EQ(write_one(d.db, "a", "app", NULL, 100 * SEC, "new=8"), 0);
	SM_CHECK_EQ(write_one(d.db, "b", "app", NULL, 100 * SEC, "new=16"), 0);
	tf[0] = (struct ing_tenant_floor){ "b", INT64_MIN };
	tf[1] = (struct ing_tenant_floor){ "c", 50 * SEC };
	SM_CHECK_EQ(ing_db_retention(d.db, 30 * SEC, tf, 2, &n, &err), 0);
	SM_CHECK_EQ(n, 1);                            /* a's block */
	check_tenant_floors(d.db);
	check_merged(d.db, "a", 200 * SEC, "new 8\n");
	check_collapsed(services_all_time(d.db, "a"), "app");
	check_merged(d.db, "b", 200 * SEC, "new 16\nold 2\n");
	check_collapsed(services_all_time(d.db, "b"), "app,oldb");
	/* c was named before it had data here: its own floor holds. */
	SM_CHECK_EQ(write_one(d.db, "c", "early", NULL, 40 * SEC, "e=1"), 0);
	SM_CHECK_EQ(write_one(d.db, "c", "app", NULL, 60 * SEC, "l=2"), 0);
	check_merged(d.db, "c", 200 * SEC, "l 2\n");
	check_collapsed(services_all_time(d.db, "c"), "app");
	/* Lower floors change nothing, named or default. */
	tf[0] = (struct ing_tenant_floor){ "a", 1 * SEC };
	tf[1] = (struct ing_tenant_floor){ "c", 2 * SEC };
	tf[2] = (struct ing_tenant_floor){ "b", INT64_MIN };
	SM_CHECK_EQ(ing_db_retention(d.db, 5 * SEC, tf, 3, &n, &err), 0);
	SM_CHECK_EQ(n, 0);
	SM_CHECK_EQ(ing_db_floor(d.db, "a"), 30 * SEC);
	SM_CHECK_EQ(ing_db_floor(d.db, "c"), 50 * SEC);
	SM_CHECK_EQ(ing_db_floor(d.db, "later"), 30 * SEC);
	check_merged(d.db, "a", 200 * SEC, "new 8\n");
	/* Reopen: every floor holds; a's retired block goes on the first
	 * tick, b's stays. */
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_tenant_floors(d.db);
	check_merged(d.db, "a", 200 * SEC, "new 8\n");
	check_collapsed(services_all_time(d.db, "a"), "app");
	check_merged(d.db, "b", 200 * SEC, "new 16\nold 2\n");
	check_merged(d.db, "c", 200 * SEC, "l 2\n");
	ing_db_tick(d.db, sm_now_ms());
	SM_CHECK_EQ(tenant_block_exists(&d, "a", 1), 0);
	SM_CHECK_EQ(tenant_block_exists(&d, "b", 2), 1);
	/* b no longer named (its override removed): it follows the default
	 * again and loses its block; c keeps its higher floor. */
	SM_CHECK_EQ(ing_db_retention(d.db, 40 * SEC, NULL, 0, &n, &err), 0);
	SM_CHECK_EQ(n, 1);
	SM_CHECK_EQ(ing_db_floor(d.db, "b"), 40 * SEC);
	SM_CHECK_EQ(ing_db_floor(d.db, "c"), 50 * SEC);
	check_merged(d.db, "b", 200 * SEC, "new 16\n");
	check_collapsed(services_all_time(d.db, "b"), "app");
	/* A name given twice gets the higher floor; a default of "keep"
	 * leaves the default and the unnamed b as they are. */
	tf[0] = (struct ing_tenant_floor){ "d", 70 * SEC };
	tf[1] = (struct ing_tenant_floor){ "c", INT64_MIN };
	tf[2] = (struct ing_tenant_floor){ "d", 10 * SEC };
	SM_CHECK_EQ(ing_db_retention(d.db, INT64_MIN, tf, 3, &n, &err), 0);
	SM_CHECK_EQ(n, 0);
	SM_CHECK_EQ(ing_db_floor(d.db, "d"), 70 * SEC);
	SM_CHECK_EQ(ing_db_floor(d.db, "c"), 50 * SEC);
	SM_CHECK_EQ(ing_db_floor(d.db, "b"), 40 * SEC);
	SM_CHECK_EQ(ing_db_floor(d.db, "later"), 40 * SEC);
	disk_fini(&d);
}

/* Bytes of the store's SST files (the data; RocksDB's logs, manifests
 * and options files are left out: each open adds some). */
static uint64_t
sst_bytes(struct disk *d)
{
	char path[128];
	struct dirent *de;
	uint64_t total = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "%s/rocksdb", d->dir);
	if ((dir = opendir(path)) == NULL)
		return (0);
	while ((de = readdir(dir)) != NULL) {
		size_t l = strlen(de->d_name);
		struct stat st;

		if (l > 4 && strcmp(de->d_name + l - 4, ".sst") == 0 &&
		    fstatat(dirfd(dir), de->d_name, &st, 0) == 0)
			total += (uint64_t)st.st_size;
	}
	closedir(dir);
	return (total);
}

/*
 * Disk usage drops: two tenants with the same 200 uploads each, cut into
 * blocks; retention retires all of a's (b keeps everything), the blocks
 * are deleted at the next open's first tick; after a full compaction the
 * SST files shrink by about half (figures printed against the same-run
 * baseline, taken after the same full compaction).
 */
static void
test_retention_disk(void)
{
	struct ing_tenant_floor tf[2] = { { "a", 3000 * SEC },
		{ "b", INT64_MIN } };
	char stacks[1024];
	uint64_t before, after, pb = 0;
	struct disk d;
	struct sm_err err;
	uint32_t n;

	disk_init(&d, 3600 * SEC);
	for (int i = 0; i < 200; i++) {
		size_t o = 0;

		for (int j = 0; j < 40 && o < sizeof(stacks) - 32; j++)
			o += (size_t)snprintf(stacks + o, sizeof(stacks) - o,
			    "%sf%d;g%d=%d", j > 0 ? "," : "", i, j,
			    (i * 7919 + j * 104729) % 100000 + 1);
		SM_REQUIRE(write_one(d.db, "a", "app", NULL, i * 10 * SEC,
		    stacks) == 0);
		SM_REQUIRE(write_one(d.db, "b", "app", NULL, i * 10 * SEC,
		    stacks) == 0);
	}
	SM_CHECK_EQ(ing_db_flush(d.db, &err), 0);
	SM_CHECK_EQ(ing_store_compact(d.store, &err), 0);
	before = sst_bytes(&d);
	SM_CHECK_EQ(ing_db_retention(d.db, INT64_MIN, tf, 2, &n, &err), 0);
	SM_CHECK_EQ(n, 1);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	ing_db_tick(d.db, sm_now_ms());
	SM_CHECK_EQ(ing_store_compact(d.store, &err), 0);
	after = sst_bytes(&d);
	printf("retention disk: SST bytes %llu before, %llu after retiring "
	    "tenant a's block (b kept)\n", (unsigned long long)before,
	    (unsigned long long)after);
	SM_CHECK(after < before * 3 / 4);
	SM_CHECK(after > before / 4);       /* b's block is still there */
	check_merged(d.db, "a", 3000 * SEC, "");
	free(merge_collapsed(d.db, "b", NULL, 0, NULL, 0, 3000 * SEC, &pb));
	SM_CHECK_EQ(pb, 200);
	disk_fini(&d);
}

/* Pack a bucket's arrays, read them back (cursor, unpack): same pairs. */
static void
pack_roundtrip(const uint32_t *node, const int64_t *value, uint32_t n,
    uint32_t max_len)
{
	struct ing_bucket b = { 0 };
	struct ing_pair_cur c;
	uint32_t k = 0, nd;
	int64_t v;

	b.n = n;
	b.node = malloc((n ? n : 1) * sizeof(*b.node));
	b.value = malloc((n ? n : 1) * sizeof(*b.value));
	SM_REQUIRE(b.node != NULL && b.value != NULL);
	if (n != 0) {
		memcpy(b.node, node, n * sizeof(*node));
		memcpy(b.value, value, n * sizeof(*value));
	}
	SM_REQUIRE(ing_bucket_pack(&b) == 0);
	SM_CHECK(b.packed != NULL && b.node == NULL && b.value == NULL);
	SM_CHECK(b.packed_len <= max_len);
	SM_CHECK_EQ(ing_bucket_pair_bytes(&b), b.packed_len);
	ing_pairs_begin(&b, &c);
	while (ing_pairs_next(&c, &nd, &v)) {
		SM_CHECK(k < n && nd == node[k] && v == value[k]);
		k++;
	}
	SM_CHECK_EQ(k, n);
	SM_REQUIRE(ing_bucket_unpack(&b) == 0);
	SM_CHECK(b.packed == NULL);
	for (k = 0; k < n; k++)
		SM_CHECK(b.node[k] == node[k] && b.value[k] == value[k]);
	free(b.node);
	free(b.value);
}

static void
test_bucket_pack(void)
{
	/* CPU: values are count x 10 ms, packed as counts */
	uint32_t n1[] = { 1, 2, 3, 10, 12, 200, 201 };
	int64_t v1[] = { 10000000, 20000000, 10000000, 30000000, 10000000,
		1270000000, 10000000 };
	/* extremes: big node gaps, a saturated value, gcd 1 */
	uint32_t n2[] = { 1, 4000000000u, UINT32_MAX };
	int64_t v2[] = { 3, INT64_MAX, 1 };

	/* signed values (delta profiles), the extremes of int64 */
	uint32_t n3[] = { 1, 2, 3, 4 };
	int64_t v3[] = { -20, 30, INT64_MIN, -1 };
	int64_t v4[] = { INT64_MIN };
	int64_t v5[] = { -30000000, 10000000 };

	/* g = 10^7 in 4 bytes, then 2 bytes a pair; one more each for the
	 * node delta 188 and the value 127 (zigzag 254) */
	pack_roundtrip(n1, v1, 7, 4 + 7 * 2 + 2);
	pack_roundtrip(n2, v2, 3, 64);
	pack_roundtrip(n3, v3, 4, 64);
	pack_roundtrip(n3, v4, 1, 16);
	pack_roundtrip(n3, v5, 2, 4 + 2 * 2);
	pack_roundtrip(NULL, NULL, 0, 1);
}

/*
 * Analyze over [start, end) (all_time ignores it), with an optional
 * {service_name=svc}; the response lives in `a`.
 */
static int
analyze(struct ing_db *db, const char *tenant, const char *svc,
    int64_t start, int64_t end, bool all_time, struct sm_arena *a,
    Smolder__V1__AnalyzeResponse *out)
{
	struct ing_query req = { 0 };
	struct ing_matcher m = { SM_MATCH_EQ, "service_name", svc };
	struct sm_err err;

	req.sel.tenant = tenant;
	req.sel.nmatchers = svc != NULL ? 1 : 0;
	req.sel.matchers = &m;
	req.sel.start_ms = start;
	req.sel.end_ms = end;
	req.all_time = all_time;
	return (ing_db_analyze(db, &req, a, out, &err));
}

static void
check_an(const Smolder__V1__AnalyzeSeries *s, uint64_t fp, uint64_t profiles,
    uint64_t samples)
{
	SM_CHECK_EQ(s->fp, fp);
	SM_CHECK_EQ(s->profiles, profiles);
	SM_CHECK_EQ(s->samples, samples);
}

static void
test_analyze(void)
{
	struct disk d;
	struct sm_err err;
	struct sm_arena *a = sm_arena_create(0);
	Smolder__V1__AnalyzeResponse r;
	uint64_t fa = fp_of("app"), fw = fp_of("web");
	int ia = fa < fw ? 0 : 1;

	disk_init(&d, 3600 * SEC);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 0, "a;b=3,c=1"), 0);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 20 * SEC, "a;b=1"), 0);
	SM_CHECK_EQ(write_one(d.db, "t", "web", NULL, 25 * SEC, "w=7"), 0);
	/* All in the head. */
	SM_REQUIRE(analyze(d.db, "t", NULL, 0, 60 * SEC, false, a, &r) == 0);
	SM_REQUIRE(r.n_head_series == 2);
	check_an(r.head_series[ia], fa, 2, 3);
	check_an(r.head_series[1 - ia], fw, 1, 1);
	SM_CHECK_EQ(r.n_block_series, 0);
	SM_CHECK_EQ(r.heads, 1);
	SM_CHECK_EQ(r.blocks, 0);
	SM_CHECK(r.head_bytes > 0);
	SM_CHECK(r.any);
	SM_CHECK_EQ(r.min_t, 0);
	SM_CHECK_EQ(r.max_t, 20 * SEC);
	SM_CHECK_EQ(r.bucket_ms, 10 * SEC);
	/* Cut, then one more write to the new head. */
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	SM_CHECK_EQ(write_one(d.db, "t", "app", NULL, 40 * SEC, "c=2"), 0);
	SM_REQUIRE(analyze(d.db, "t", NULL, 0, 60 * SEC, false, a, &r) == 0);
	SM_REQUIRE(r.n_block_series == 2 && r.n_head_series == 1);
	check_an(r.block_series[ia], fa, 2, 3);
	check_an(r.block_series[1 - ia], fw, 1, 1);
	check_an(r.head_series[0], fa, 1, 1);
	SM_CHECK_EQ(r.blocks, 1);
	SM_CHECK(r.block_bytes > 0);
	SM_CHECK_EQ(r.heads, 1);
	SM_CHECK_EQ(r.max_t, 40 * SEC);
	/* A range and a selector narrow it. */
	SM_REQUIRE(analyze(d.db, "t", NULL, 30 * SEC, 60 * SEC, false, a,
	    &r) == 0);
	SM_CHECK_EQ(r.n_block_series, 0);
	SM_CHECK_EQ(r.blocks, 0);
	SM_CHECK_EQ(r.block_bytes, 0);
	SM_REQUIRE(r.n_head_series == 1);
	check_an(r.head_series[0], fa, 1, 1);
	SM_REQUIRE(analyze(d.db, "t", "web", 0, 60 * SEC, false, a, &r) == 0);
	SM_REQUIRE(r.n_block_series == 1);
	check_an(r.block_series[0], fw, 1, 1);
	SM_CHECK_EQ(r.n_head_series, 0);
	SM_CHECK_EQ(r.heads, 0);
	SM_CHECK_EQ(r.head_bytes, 0);
	SM_CHECK_EQ(r.min_t, 20 * SEC);
	SM_CHECK_EQ(r.max_t, 20 * SEC);
	/* All time, after a restart; another tenant sees nothing. */
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	SM_REQUIRE(analyze(d.db, "t", NULL, 0, 0, true, a, &r) == 0);
	SM_CHECK(r.any);
	SM_CHECK_EQ(r.min_t, 0);
	SM_CHECK_EQ(r.max_t, 40 * SEC);
	SM_CHECK_EQ(r.n_block_series + r.n_head_series, 3);
	SM_REQUIRE(analyze(d.db, "nobody", NULL, 0, 0, true, a, &r) == 0);
	SM_CHECK(!r.any);
	SM_CHECK_EQ(r.n_head_series + r.n_block_series, 0);
	/* A bad range is refused. */
	SM_CHECK_EQ(analyze(d.db, "t", NULL, 60 * SEC, 0, false, a, &r),
	    SM_EINVAL);
	disk_fini(&d);
	sm_arena_destroy(a);
}

/*
 * One upload with a series per service in `svcs` (comma-separated), each
 * with the single stack "<frame>" = 1, at time 0 -- or 20 s for "name+",
 * the same series again as a second SeriesWrite -- under use_max_series.
 */
static int
write_services(struct ing_db *db, const char *tenant, const char *svcs,
    const char *frame)
{
	struct sm_arena *a = sm_arena_create(0);
	struct sm_buf raw = SM_BUF_INIT;
	struct ing_write_result res;
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	uint8_t id[16] = { 0 };
	uint64_t idv = atomic_fetch_add(&next_id, 1);
	char buf[256], *save = NULL, *svc;
	uint32_t name, node, s;
	int rv;

	memcpy(id, &idv, sizeof(idv));
	dist_limits_default(&lim);
	if (dist_batch_init(&b, a, &lim) != 0)
		abort();
	b.meta.spy_name = "gospy";
	dist_batch_frame(&b, frame, strlen(frame), &name);
	dist_batch_node(&b, 0, name, &node);
	snprintf(buf, sizeof(buf), "%s", svcs);
	for (svc = strtok_r(buf, ",", &save); svc != NULL;
	    svc = strtok_r(NULL, ",", &save)) {
		struct sm_label ls[2] = { { "__name__", "process_cpu" },
			{ "service_name", svc } };
		size_t n = strlen(svc);
		int64_t t = 0;

		if (n > 0 && svc[n - 1] == '+') {
			svc[n - 1] = '\0';
			t = 20 * SEC;
		}
		if (dist_batch_series(&b, ls, 2, t, &s, &err) != 0)
			abort();
		dist_batch_add(&b, s, node, 1);
	}
	if (dist_batch_finish(&b) != 0 || dist_batch_encode(&b, tenant, id,
	    NULL, 0, use_max_series, &raw) != 0)
		abort();
	rv = disk_write_raw(db, &raw, 0, &res, &err);
	if (rv == SM_ELIMIT && strstr(err.msg, "Maximum active series limit "
	    "exceeded (") == NULL)
		rv = -1;        /* not Pyroscope's message: fails the caller */
	dist_batch_fini(&b);
	sm_arena_destroy(a);
	return (rv);
}

static uint64_t
head_series(struct ing_db *db, uint64_t *head_bytes)
{
	struct ing_db_stats st;

	ing_db_stats(db, &st);
	if (head_bytes != NULL)
		*head_bytes = st.head_bytes;
	return (st.series);
}

/*
 * The active-series limit (db.h): with a limit of 3, three series pass;
 * a write adding a 4th is refused whole -- its existing series too --
 * with nothing applied (no series, frame or byte; not replayed after a
 * restart); existing series keep taking writes; another tenant is not
 * affected; and once the head is cut its series are no longer active, so
 * new series fit again.
 */
static void
test_series_limit(void)
{
	struct disk d;
	struct sm_err err;
	uint64_t bytes, bytes2;
	char svc[32];

	disk_init(&d, 3600 * SEC);
	use_max_series = 3;
	SM_CHECK_EQ(write_services(d.db, "t", "s0", "old"), 0);
	SM_CHECK_EQ(write_services(d.db, "t", "s1,s2", "old"), 0);
	SM_CHECK_EQ(head_series(d.db, &bytes), 3);
	/* A 4th series, alone or mixed with existing ones: refused. */
	SM_CHECK_EQ(write_services(d.db, "t", "s3", "fresh"), SM_ELIMIT);
	SM_CHECK_EQ(write_services(d.db, "t", "s0,s3", "fresh"), SM_ELIMIT);
	for (int i = 0; i < 500; i++) {
		snprintf(svc, sizeof(svc), "flood%d", i);
		SM_CHECK_EQ(write_services(d.db, "t", svc, svc), SM_ELIMIT);
	}
	SM_CHECK_EQ(head_series(d.db, &bytes2), 3);
	SM_CHECK_EQ(bytes2, bytes);     /* nothing allocated that lasts */
	check_merged(d.db, "t", 60 * SEC, "old 3\n");
	/* Existing series keep taking writes, together or alone. */
	SM_CHECK_EQ(write_services(d.db, "t", "s0,s1,s2", "old"), 0);
	SM_CHECK_EQ(write_services(d.db, "t", "s2", "more"), 0);
	/* A write carrying one new series twice counts it once. */
	SM_CHECK_EQ(write_services(d.db, "u", "a,b", "u"), 0);
	SM_CHECK_EQ(write_services(d.db, "u", "c,c+", "u"), 0);
	SM_CHECK_EQ(write_services(d.db, "u", "d", "u"), SM_ELIMIT);
	/* No limit (0): anything goes, for the other tenant too. */
	use_max_series = 0;
	SM_CHECK_EQ(write_services(d.db, "v", "a,b,c,d,e", "v"), 0);
	use_max_series = 3;
	check_merged(d.db, "t", 60 * SEC, "more 1\nold 6\n");
	/* Replay: the refused writes were not kept in the log. */
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_merged(d.db, "t", 60 * SEC, "more 1\nold 6\n");
	SM_CHECK_EQ(write_services(d.db, "t", "s3", "fresh"), SM_ELIMIT);
	/* A cut: the head is empty, its series no longer active. */
	SM_CHECK_EQ(ing_db_flush(d.db, &err), 0);
	SM_CHECK_EQ(head_series(d.db, NULL), 0);
	SM_CHECK_EQ(write_services(d.db, "t", "s3,s4", "fresh"), 0);
	SM_CHECK_EQ(write_services(d.db, "t", "s0", "old"), 0);
	SM_CHECK_EQ(write_services(d.db, "t", "s5", "fresh"), SM_ELIMIT);
	SM_CHECK_EQ(write_services(d.db, "t", "s4", "fresh"), 0);
	/* The block and the new head together serve everything taken. */
	check_merged(d.db, "t", 60 * SEC, "fresh 3\nmore 1\nold 7\n");
	use_max_series = 0;
	disk_fini(&d);
}

struct limit_worker {
	struct ing_db *db;
	int id;
	atomic_int *ok, *refused;
};

static void *
limit_writer(void *p)
{
	struct limit_worker *w = p;

	for (int i = 0; i < 100; i++) {
		char svc[32];
		int rv;

		snprintf(svc, sizeof(svc), "w%d-%d", w->id, i);
		rv = write_services(w->db, "t", svc, "x");
		if (rv == 0)
			atomic_fetch_add(w->ok, 1);
		else if (rv == SM_ELIMIT)
			atomic_fetch_add(w->refused, 1);
		else
			abort();
	}
	return (NULL);
}

/*
 * Four writers racing to add 400 new series under a limit of 50: exactly
 * 50 are accepted and the head holds exactly 50 (the check under the
 * head's write lock, not just the one before the log, decides).
 */
static void
test_series_limit_concurrent(void)
{
	struct ing_db *db = mem_db();
	struct limit_worker w[4];
	atomic_int ok = 0, refused = 0;
	pthread_t t[4];

	use_max_series = 50;
	for (int i = 0; i < 4; i++) {
		w[i] = (struct limit_worker){ db, i, &ok, &refused };
		pthread_create(&t[i], NULL, limit_writer, &w[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	use_max_series = 0;
	SM_CHECK_EQ(atomic_load(&ok), 50);
	SM_CHECK_EQ(atomic_load(&refused), 350);
	SM_CHECK_EQ(head_series(db, NULL), 50);
	check_merged(db, "t", 60 * SEC, "x 50\n");
	ing_db_close(db);
}

/*
 * The lock assertions (db_int.h): a lock taken through ING_LOCK & co is
 * held until it is dropped, by this thread only, and asserting a lock
 * that is not held aborts (in a child process).
 */
#ifndef NDEBUG
static void *
held_elsewhere(void *arg)
{
	return ((void *)(intptr_t)ing_lock_held(arg));
}
#endif

static void
test_lock_assertions(void)
{
#ifdef NDEBUG
	/* Release build: the macros are the plain pthread calls and the
	 * assertion is compiled away (db_int.h). */
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;

	ING_ASSERT_HELD(&mu);          /* not held: no abort */
	ING_LOCK(&mu);
	SM_CHECK_EQ(pthread_mutex_trylock(&mu), EBUSY);
	ING_UNLOCK(&mu);
	SM_CHECK_EQ(pthread_mutex_trylock(&mu), 0);
	pthread_mutex_unlock(&mu);
	ING_WRLOCK(&rw);
	SM_CHECK_EQ(pthread_rwlock_tryrdlock(&rw), EBUSY);
	ING_RWUNLOCK(&rw);
	ING_RDLOCK(&rw);
	SM_CHECK_EQ(pthread_rwlock_trywrlock(&rw), EBUSY);
	ING_RWUNLOCK(&rw);
	SM_CHECK_EQ(pthread_rwlock_trywrlock(&rw), 0);
	pthread_rwlock_unlock(&rw);
#else
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
	pthread_t th;
	void *other;
	pid_t pid;
	int st;

	SM_CHECK(!ing_lock_held(&mu));
	ING_LOCK(&mu);
	ING_RDLOCK(&rw);
	SM_CHECK(ing_lock_held(&mu));
	SM_CHECK(ing_lock_held(&rw));
	SM_REQUIRE(pthread_create(&th, NULL, held_elsewhere, &mu) == 0);
	SM_REQUIRE(pthread_join(th, &other) == 0);
	SM_CHECK(other == NULL);
	ING_UNLOCK(&mu);
	SM_CHECK(!ing_lock_held(&mu));
	SM_CHECK(ing_lock_held(&rw));
	ING_RWUNLOCK(&rw);
	SM_CHECK(!ing_lock_held(&rw));
	fflush(NULL);
	if ((pid = fork()) == 0) {
		ING_ASSERT_HELD(&mu);
		_exit(0);
	}
	SM_REQUIRE(pid > 0);
	SM_REQUIRE(waitpid(pid, &st, 0) == pid);
	SM_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
#endif
}

/* --- all-or-nothing writes (head.h, "All or nothing") --------------------- */

/* One series of a multi-series write: {service_name, [lname=lvalue]} at t. */
struct wspec {
	const char *service, *lname, *lvalue;
	int64_t t;
	const char *stacks;     /* "a;b=3,c=1" */
	uint64_t span;          /* non-zero: every sample carries this span */
};

static void
mkmulti(const struct wspec *sp, size_t nsp, uint64_t idv, struct sm_buf *out)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	uint8_t id[16] = { 0 };

	memcpy(id, &idv, sizeof(idv));
	dist_limits_default(&lim);
	if (dist_batch_init(&b, a, &lim) != 0)
		abort();
	b.meta.spy_name = "gospy";
	for (size_t k = 0; k < nsp; k++) {
		struct sm_label ls[3] = { { "__name__", "process_cpu" },
			{ "service_name", sp[k].service },
			{ sp[k].lname, sp[k].lvalue } };
		uint32_t s;

		if (dist_batch_series(&b, ls, sp[k].lname ? 3 : 2, sp[k].t, &s,
		    &err) != 0)
			abort();
		add_stacks(&b, s, sp[k].stacks, sp[k].span);
	}
	if (dist_batch_finish(&b) != 0 ||
	    dist_batch_encode(&b, "t", id, NULL, 0, 0, out) != 0)
		abort();
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

/*
 * The write the fault loops inject into: several series, existing and
 * new (one with a label name the head lacks), new frames, one series
 * twice in one (packed) bucket, one in its open bucket, one in a new
 * bucket, span samples.  The base: a at 0 s and 10 s (0 s is packed), b
 * at 10 s (open), e at 0 s.
 */
static const struct wspec aon_write[] = {
	{ "a", NULL, NULL, 2 * SEC, "main;work=5,main;fresh=2", 0 },
	{ "a", NULL, NULL, 5 * SEC, "main;work=1", 0 },
	{ "a", NULL, NULL, 25 * SEC, "main;late=3", 0 },
	{ "b", NULL, NULL, 15 * SEC, "main;work=4", 0 },
	{ "c", "env", "new", 15 * SEC, "main;cnew=7,main;work=1", 0xabcdef },
	{ "d", "region", "eu", 15 * SEC, "x;y=1", 0x1234 },
	{ "e", NULL, NULL, 30 * SEC, "main;work=9", 0 },
};

static const struct wspec aon_base[] = {
	{ "a", NULL, NULL, 0, "main;work=1", 0 },
	{ "a", NULL, NULL, 10 * SEC, "main;work=2", 0 },
	{ "b", NULL, NULL, 10 * SEC, "main;work=3,other=1", 0 },
	{ "e", NULL, NULL, 0, "main;work=1", 0x1234 },
};

static void
head_path(const struct ing_head *h, uint32_t node, struct sm_buf *b)
{
	uint32_t st[64], n = 0;

	while (node != 0 && n < 64) {
		st[n++] = node;
		node = h->tree.parent[node];
	}
	while (n-- > 0)
		sm_buf_printf(b, "%s%s", sm_strtab_str(&h->frames,
		    h->tree.name[st[n]], NULL), n > 0 ? ";" : "");
}

/*
 * Everything a head answers from, as text: series (labels, metadata,
 * buckets with their pairs by stack path), the index's names, values and
 * postings, span and profile records and the counters; `bytes` adds the
 * pair-bytes accounting and which buckets are packed (a write whose pack
 * failed succeeded all the same: packing only saves memory).  Node ids are written as paths, so an unused
 * node a failed write left in the tree changes nothing here.
 */
static char *
head_dump(const struct ing_head *h, bool bytes)
{
	const struct ing_set *set = &h->set;
	const struct ing_index *x = &set->index;
	struct sm_buf b = SM_BUF_INIT;
	struct ing_prof_rec *pr;
	uint32_t npr;
	struct sm_err err;
	char *out;

	sm_buf_printf(&b, "series=%u writes=%llu t=[%lld,%lld]\n",
	    set->nseries, (unsigned long long)h->writes,
	    (long long)set->min_t, (long long)set->max_t);
	if (bytes)
		sm_buf_printf(&b, "pair_bytes=%llu\n",
		    (unsigned long long)h->pair_bytes);
	for (uint32_t i = 0; i < set->nseries; i++) {
		const struct ing_series *sr = set->series[i];

		sm_buf_printf(&b, "s%u fp=%016llx", i,
		    (unsigned long long)sr->fp);
		for (uint32_t k = 0; k < sr->nlabels; k++)
			sm_buf_printf(&b, " %s=%s", sr->labels[k].name,
			    sr->labels[k].value);
		sm_buf_printf(&b, " spy=%s rate=%u\n", ing_set_str(set,
		    sr->meta.spy), sr->meta.sample_rate);
		for (uint32_t k = 0; k < sr->nb; k++) {
			const struct ing_bucket *bk = &sr->b[k];
			struct ing_pair_cur c;
			uint32_t node;
			int64_t v;

			sm_buf_printf(&b, "  t=%lld profiles=%u total=%lld",
			    (long long)bk->t, bk->profiles,
			    (long long)bk->total);
			if (bytes)      /* a failed pack only costs memory */
				sm_buf_printf(&b, " packed=%d",
				    bk->packed != NULL);
			sm_buf_putc(&b, ':');
			ing_pairs_begin(bk, &c);
			while (ing_pairs_next(&c, &node, &v)) {
				sm_buf_putc(&b, ' ');
				head_path(h, node, &b);
				sm_buf_printf(&b, "=%lld", (long long)v);
			}
			sm_buf_putc(&b, '\n');
		}
	}
	for (uint32_t i = 0; i < x->nnames; i++) {
		sm_buf_printf(&b, "name %s:", ing_set_str(set, x->names[i]));
		for (uint32_t j = 0; j < x->values[i].n; j++) {
			uint32_t v = x->values[i].ids[j];
			const struct ing_posting *p = ing_index_get(x,
			    x->names[i], v);

			sm_buf_printf(&b, " %s[", ing_set_str(set, v));
			for (uint32_t q = 0; p != NULL && q < p->n; q++)
				sm_buf_printf(&b, "%s%u", q ? "," : "",
				    p->ids[q]);
			sm_buf_putc(&b, ']');
		}
		sm_buf_putc(&b, '\n');
	}
	sm_buf_printf(&b, "postings=%u\n", x->nlists);
	for (uint32_t i = 0; i < h->spans.n; i++) {
		const struct ing_span_rec *r = &h->spans.v[i];

		sm_buf_printf(&b, "span %llx fp=%016llx t=%lld ",
		    (unsigned long long)r->span, (unsigned long long)r->fp,
		    (long long)r->t);
		head_path(h, r->node, &b);
		sm_buf_printf(&b, "=%lld\n", (long long)r->value);
	}
	/* Sorted: a spilled head's records come back in another order. */
	SM_REQUIRE(ing_head_profs((struct ing_head *)h, true, &pr, &npr,
	    &err) == 0);
	for (uint32_t i = 0; i < npr; i++) {
		const struct ing_prof_rec *r = &pr[i];
		uint64_t idv;

		memcpy(&idv, r->id, sizeof(idv));
		sm_buf_printf(&b, "prof fp=%016llx t=%lld id=%llu total=%lld\n",
		    (unsigned long long)r->fp, (long long)r->t,
		    (unsigned long long)idv, (long long)r->total);
	}
	sm_free(pr);
	out = strdup(b.b != NULL ? b.b : "");
	sm_buf_fini(&b);
	return (out);
}

/* Apply spec sp[0..n) to h as one write with profile id idv. */
static int
head_write_spec(struct ing_head *h, const struct wspec *sp, size_t n,
    uint64_t idv, long fault)
{
	struct sm_buf raw = SM_BUF_INIT;
	Smolder__V1__Request *req;
	struct sm_err err;
	uint32_t ns, np;
	int rv;

	mkmulti(sp, n, idv, &raw);
	req = smolder__v1__request__unpack(NULL, raw.len, (uint8_t *)raw.b);
	SM_REQUIRE(req != NULL);
	sm_fault_alloc_after(fault);
	rv = ing_head_write(h, req->write, 0, &ns, &np, &err);
	sm_fault_alloc_after(0);
	smolder__v1__request__free_unpacked(req, NULL);
	sm_buf_fini(&raw);
	return (rv);
}

/*
 * A series' newest bucket written again stays unpacked (a hot bucket:
 * many uploads a bucket would otherwise unpack and pack it every time)
 * until a later bucket opens; a bucket written once, or late, is packed.
 * A write into a hot bucket that holds all its nodes adds in place, one
 * that brings a new node merges.  The pairs are the same either way (a
 * pair that sums to 0 stays, as a merge keeps it).
 */
static void
test_hot_bucket_unpacked(void)
{
	static const struct wspec w[] = {
		{ "a", NULL, NULL, 0, "main;work=1", 0 },
		{ "a", NULL, NULL, 2 * SEC, "main;work=2", 0 },
		{ "a", NULL, NULL, 3 * SEC, "main;x=1", 0 },
		/* every node there: added in place */
		{ "a", NULL, NULL, 4 * SEC, "main;work=5,main;x=2", 0 },
		{ "a", NULL, NULL, 4 * SEC, "main;x=-3", 0 },
		/* one node new: merged */
		{ "a", NULL, NULL, 6 * SEC, "main;work=1,main;y=1", 0 },
		{ "a", NULL, NULL, 12 * SEC, "main;work=4", 0 },
		{ "a", NULL, NULL, 5 * SEC, "main;late=1", 0 },
	};
	static const char *const want[] = {
		"t=0 profiles=1 total=1 packed=1: main;work=1\n",
		"t=0 profiles=2 total=3 packed=0: main;work=3\n",
		"t=0 profiles=3 total=4 packed=0: main;work=3 main;x=1\n",
		"t=0 profiles=4 total=11 packed=0: main;work=8 main;x=3\n",
		"t=0 profiles=5 total=8 packed=0: main;work=8 main;x=0\n",
		"t=0 profiles=6 total=10 packed=0: main;work=9 main;x=0 "
		"main;y=1\n",
		"t=0 profiles=6 total=10 packed=1: main;work=9 main;x=0 "
		"main;y=1\n  t=10000 profiles=1 total=4 packed=1: main;work=4\n",
		"t=0 profiles=7 total=11 packed=1: main;work=9 main;x=0 "
		"main;y=1 main;late=1\n  t=10000 profiles=1 total=4 packed=1",
	};
	struct ing_head *h;

	SM_REQUIRE(ing_head_create(1, 10 * SEC, &h) == 0);
	for (size_t i = 0; i < SM_ARRAY_LEN(w); i++) {
		char *d;

		SM_REQUIRE(head_write_spec(h, &w[i], 1, 200 + i, 0) == 0);
		d = head_dump(h, true);
		if (strstr(d, want[i]) == NULL)
			SM_TEST_FAILF("write %zu: want \"%s\" in\n%s", i, want[i],
			    d);
		free(d);
	}
	ing_head_unref(h);
}

static struct ing_head *
aon_base_head(void)
{
	struct ing_head *h;

	SM_REQUIRE(ing_head_create(1, 10 * SEC, &h) == 0);
	for (size_t i = 0; i < SM_ARRAY_LEN(aon_base); i++)
		SM_REQUIRE(head_write_spec(h, &aon_base[i], 1, 100 + i, 0) ==
		    0);
	return (h);
}

/*
 * Fail the n-th allocation of one write, for n = 1, 2, ... until the
 * write succeeds: after every failure the head is exactly as before it
 * (series, buckets, pairs, index, spans, profiles, counters, pair bytes);
 * after the success exactly as a head that took the write once without
 * faults.  Then a write of only new series, to cover reserving the index
 * for a head that lacks the names.
 */
static void
test_head_write_all_or_nothing(void)
{
	struct ing_head *h = aon_base_head(), *ref = aon_base_head();
	char *before = head_dump(h, true), *want, *got;
	long n;
	int rv = -1, failures = 0;

	SM_REQUIRE(head_write_spec(ref, aon_write, SM_ARRAY_LEN(aon_write), 7,
	    0) == 0);
	want = head_dump(ref, false);
	for (n = 1; n < 10000; n++) {
		rv = head_write_spec(h, aon_write, SM_ARRAY_LEN(aon_write), 7,
		    n);
		if (rv == 0)
			break;
		SM_CHECK_EQ(rv, SM_ENOMEM);
		failures++;
		got = head_dump(h, true);
		if (strcmp(got, before) != 0) {
			fprintf(stderr, "after failure %ld:\n%s\nwant:\n%s\n",
			    n, got, before);
			SM_CHECK(0);
			free(got);
			break;
		}
		free(got);
	}
	SM_CHECK_EQ(rv, 0);
	SM_CHECK(failures >= 20);   /* the write allocates that often */
	got = head_dump(h, false);
	SM_CHECK_STR(got, want);
	free(got);
	/* Every bucket but a series' newest is packed again. */
	for (uint32_t i = 0; i < h->set.nseries; i++) {
		for (uint32_t k = 0; k + 1 < h->set.series[i]->nb; k++)
			SM_CHECK(h->set.series[i]->b[k].packed != NULL);
	}
	free(before);
	free(want);
	ing_head_unref(h);
	ing_head_unref(ref);

	/* New series only, into an empty head: new names, values, lists. */
	h = NULL;
	SM_REQUIRE(ing_head_create(1, 10 * SEC, &h) == 0);
	SM_REQUIRE(ing_head_create(1, 10 * SEC, &ref) == 0);
	SM_REQUIRE(head_write_spec(ref, aon_write, SM_ARRAY_LEN(aon_write), 7,
	    0) == 0);
	want = head_dump(ref, false);
	before = head_dump(h, true);
	failures = 0;
	for (n = 1; n < 10000; n++) {
		if ((rv = head_write_spec(h, aon_write,
		    SM_ARRAY_LEN(aon_write), 7, n)) == 0)
			break;
		failures++;
		got = head_dump(h, true);
		SM_CHECK_STR(got, before);
		free(got);
	}
	SM_CHECK_EQ(rv, 0);
	SM_CHECK(failures >= 20);
	got = head_dump(h, false);
	SM_CHECK_STR(got, want);
	free(got);
	free(before);
	free(want);
	ing_head_unref(h);
	ing_head_unref(ref);
}

/* Write spec sp as one upload with profile id idv through the db. */
static int
db_write_spec(struct ing_db *db, const struct wspec *sp, size_t n,
    uint64_t idv, long fault)
{
	struct sm_buf raw = SM_BUF_INIT;
	struct ing_write_result res;
	struct sm_err err;
	int rv;

	mkmulti(sp, n, idv, &raw);
	rv = disk_write_raw(db, &raw, fault, &res, &err);
	if (rv == 0 && res.duplicate)
		rv = 1;
	return (rv);
}

/* What a tenant's queries answer: merge, series per service, stats. */
static char *
db_answers(struct ing_db *db)
{
	struct ing_query req = { 0 };
	Smolder__V1__SeriesResponse out;
	Smolder__V1__StatsResponse *st;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_buf b = SM_BUF_INIT;
	struct sm_err err;
	const char *gb[] = { "service_name" };
	char *m, *text;
	uint64_t profiles;

	m = merge_collapsed(db, "t", NULL, 0, NULL, 0, 60 * SEC, &profiles);
	sm_buf_printf(&b, "merge profiles=%llu\n%s",
	    (unsigned long long)profiles, m);
	free(m);
	req.sel.tenant = "t";
	req.sel.start_ms = 0;
	req.sel.end_ms = 60 * SEC;
	req.step_ms = 10 * SEC;
	req.ngroup_by = 1;
	req.group_by = gb;
	SM_REQUIRE(ing_db_series(db, &req, a, &out, &err) == 0);
	for (size_t i = 0; i < out.n_series; i++) {
		sm_buf_printf(&b, "series");
		for (size_t k = 0; k < out.series[i]->n_labels; k++)
			sm_buf_printf(&b, " %s=%s",
			    out.series[i]->labels[k]->name,
			    out.series[i]->labels[k]->value);
		for (size_t k = 0; k < out.series[i]->n_points; k++)
			sm_buf_printf(&b, " %lld:%g",
			    (long long)out.series[i]->points[k]->timestamp,
			    out.series[i]->points[k]->value);
		sm_buf_putc(&b, '\n');
	}
	st = stats_of(db, NULL, 0, a);
	for (size_t i = 0; i < st->n_series; i++)
		sm_buf_printf(&b, "stat %016llx profiles=%llu digest=%016llx\n",
		    (unsigned long long)st->series[i]->fp,
		    (unsigned long long)st->series[i]->profiles,
		    (unsigned long long)st->series[i]->digest);
	{
		struct ing_query pq = { .sel = req.sel };
		Smolder__V1__ProfilesResponse po;

		SM_REQUIRE(ing_db_profiles(db, &pq, a, &po, &err) == 0);
		for (size_t i = 0; i < po.n_profiles; i++) {
			const Smolder__V1__ProfileRef *r = po.profiles[i];
			uint64_t idv;

			SM_REQUIRE(r->id.len == 16);
			memcpy(&idv, r->id.data, sizeof(idv));
			sm_buf_printf(&b, "profile %016llx t=%lld total=%lld "
			    "bucket=%lld id=%llx\n",
			    (unsigned long long)r->fp, (long long)r->time_ms,
			    (long long)r->total, (long long)r->bucket_t,
			    (unsigned long long)idv);
		}
	}
	sm_buf_printf(&b, "head series=%llu\n",
	    (unsigned long long)head_series(db, NULL));
	text = strdup(b.b);
	sm_buf_fini(&b);
	sm_arena_destroy(a);
	return (text);
}

/* aon_base into the store-backed `disk` and the memory-only `mem`, then
 * aon_write into mem (and into disk too when `both`). */
static void
aon_prepare(struct ing_db *disk, struct ing_db *mem, bool both)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(aon_base); i++) {
		SM_REQUIRE(db_write_spec(disk, &aon_base[i], 1, 100 + i, 0) ==
		    0);
		SM_REQUIRE(db_write_spec(mem, &aon_base[i], 1, 100 + i, 0) ==
		    0);
	}
	if (both)
		SM_REQUIRE(db_write_spec(disk, aon_write,
		    SM_ARRAY_LEN(aon_write), 7, 0) == 0);
	SM_REQUIRE(db_write_spec(mem, aon_write, SM_ARRAY_LEN(aon_write), 7,
	    0) == 0);
}

/*
 * The same over a RocksDB store: a write whose n-th allocation fails is
 * not acknowledged, its log record is deleted, and the answers -- before
 * and after close/reopen (replay) -- are exactly the acknowledged
 * writes'; the final success is there once, also after replay, and its
 * retry is a duplicate.  A record whose unlogging failed stays and is
 * replayed whole (head.h): written to the log without applying it, it
 * comes back as exactly that write.
 */
static void
test_db_write_all_or_nothing_replay(void)
{
	struct ing_db *mem = mem_db();
	struct disk d;
	char *before, *want;
	long n;
	int rv = -1, failures = 0;

	disk_init(&d, 3600 * SEC);
	aon_prepare(d.db, mem, false);
	want = db_answers(mem);
	before = db_answers(d.db);
	SM_CHECK(strcmp(want, before) != 0);
	for (n = 1; n < 10000; n++) {
		rv = db_write_spec(d.db, aon_write, SM_ARRAY_LEN(aon_write), 7,
		    n);
		if (rv == 0)
			break;
		failures++;
		check_collapsed(db_answers(d.db), before);
		/* Replay brings back only what was acknowledged. */
		disk_close(&d);
		disk_open(&d, 3600 * SEC);
		check_collapsed(db_answers(d.db), before);
	}
	SM_CHECK_EQ(rv, 0);
	SM_CHECK(failures >= 20);
	check_collapsed(db_answers(d.db), want);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_collapsed(db_answers(d.db), want);
	SM_CHECK_EQ(db_write_spec(d.db, aon_write, SM_ARRAY_LEN(aon_write), 7,
	    0), 1);
	check_collapsed(db_answers(d.db), want);
	free(before);
	free(want);
	disk_fini(&d);
	ing_db_close(mem);

	/* A logged record that was never applied (its unlog failed) is
	 * replayed whole. */
	mem = mem_db();
	disk_init(&d, 3600 * SEC);
	aon_prepare(d.db, mem, false);
	want = db_answers(mem);
	{
		struct sm_buf raw = SM_BUF_INIT;
		struct sm_err err;

		mkmulti(aon_write, SM_ARRAY_LEN(aon_write), 7, &raw);
		SM_REQUIRE(ing_store_log_append(d.store, "t", 1, 1000,
		    (uint8_t *)raw.b, raw.len, &err) == 0);
		sm_buf_fini(&raw);
	}
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	check_collapsed(db_answers(d.db), want);
	/* The client's retry with the same profile id is a duplicate. */
	SM_CHECK_EQ(db_write_spec(d.db, aon_write, SM_ARRAY_LEN(aon_write), 7,
	    0), 1);
	free(want);
	disk_fini(&d);
	ing_db_close(mem);
}

/* Spilled buckets of tenant "t"'s head (and, in *resident, its packed
 * sealed ones still in memory). */
static uint32_t
spilled_count(struct ing_db *db, uint32_t *resident)
{
	struct ing_tenant *t = ing_tenant_find(db, "t");
	struct ing_head *h = t->head;
	uint32_t n = 0, r = 0;

	pthread_rwlock_rdlock(&h->lock);
	for (uint32_t i = 0; i < h->set.nseries; i++) {
		const struct ing_series *sr = h->set.series[i];

		/* A series' newest bucket is never spilled (head.c); the
		 * spilled ones are summaries in sp (set.h). */
		n += sr->sp.n;
		for (uint32_t k = 0; k + 1 < sr->nb; k++)
			r += sr->b[k].packed != NULL;
	}
	pthread_rwlock_unlock(&h->lock);
	if (resident != NULL)
		*resident = r;
	return (n);
}

/*
 * A digest of every pair of tenant t's head, spilled ones read back
 * through `cur` (NULL: an iterator per series).
 */
static uint64_t
head_pairs_digest(struct ing_db *db, struct ing_spill_cur *cur)
{
	struct ing_head *h = ing_tenant_find(db, "t")->head;
	struct sm_arena *a = sm_arena_create(0);
	uint64_t d = 0;
	struct sm_err err;

	SM_REQUIRE(a != NULL);
	pthread_rwlock_rdlock(&h->lock);
	for (uint32_t i = 0; i < h->set.nseries; i++) {
		const struct ing_bucket *b;
		uint32_t nb;

		sm_arena_reset(a);
		SM_REQUIRE(ing_head_buckets(h, h->set.series[i], INT64_MIN,
		    INT64_MAX, a, cur, &b, &nb, &err) == 0);
		for (uint32_t k = 0; k < nb; k++)
			d = sm_hash_u64(d ^ sm_hash(b[k].packed,
			    b[k].packed_len) ^ (uint64_t)b[k].t);
	}
	pthread_rwlock_unlock(&h->lock);
	sm_arena_destroy(a);
	return (d);
}

/* db_answers without its last line (the head's series count), for a db
 * whose head was cut compared with one whose head was not. */
static char *
answers_no_head(struct ing_db *db)
{
	char *a = db_answers(db), *p = strstr(a, "head series=");

	if (p != NULL)
		*p = '\0';
	return (a);
}

/* Spilled-bucket keys of tenant "t" in the store (store.h: kind 'B' after
 * the tenant, u16 length + "t", and the u64 gen). */
static uint32_t
spill_keys(struct disk *d)
{
	struct sm_kv_iter *it = sm_kv_iter_create(ing_store_kv(d->store),
	    SM_KV_SPILL);
	uint32_t n = 0;

	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		size_t kn;
		const uint8_t *k = sm_kv_iter_key(it, &kn);

		n += kn == 2 + 1 + 8 + 1 + 4 + 8 && k[2 + 1 + 8] == 'B';
	}
	sm_kv_iter_destroy(it);
	return (n);
}

/* The answers of db (answers_no_head without `head`) are `want`. */
static void
answers_are(struct ing_db *db, const char *want, bool head)
{
	char *got = head ? db_answers(db) : answers_no_head(db);

	SM_CHECK_STR(got, want);
	free(got);
}

static const struct wspec spill_late[] = {
	{ "a", NULL, NULL, 3 * SEC, "main;late=11,main;work=2", 0 },
	{ "b", NULL, NULL, 12 * SEC, "main;lateb=5", 0 },
	{ "f", NULL, NULL, 40 * SEC, "main;f=1", 0 },
};

/*
 * Spilled buckets (head.h): a head whose sealed buckets were written to
 * the store answers every query exactly as a memory-only db with the same
 * writes -- after the spill, after late writes into spilled buckets
 * (read back, merged, spilled again), under allocation faults in such a
 * write (refused whole, nothing changed), after a cut that encodes
 * spilled buckets, and after close and replay; the head's pair bytes
 * drop by what was spilled.  The answers include the profiles query, so
 * the spilled profile records (read back from their chunks) are checked
 * the same way.
 */
static void
test_spill_answers(void)
{
	struct ing_db *mem = mem_db();
	struct ing_spill_cur cur = { 0 };
	struct disk d;
	uint64_t before_bytes, after_bytes;
	uint32_t resident;
	char *want, *before;
	struct sm_err err;
	int rv = -1;
	long n;

	disk_init(&d, 3600 * SEC);
	aon_prepare(d.db, mem, true);
	want = db_answers(mem);
	(void)head_series(d.db, &before_bytes);
	SM_CHECK_EQ(spilled_count(d.db, &resident), 0);
	SM_CHECK(resident > 0);
	SM_CHECK_EQ(ing_db_spill(d.db, &err), 0);
	SM_CHECK(spilled_count(d.db, &resident) > 0);
	SM_CHECK_EQ(resident, 0);
	{
		/* The profile records went too, as one chunk. */
		struct ing_head *h = ing_tenant_find(d.db, "t")->head;

		SM_CHECK_EQ(h->profs.n, 0);
		SM_CHECK_EQ(h->prof_chunks, 1);
		SM_CHECK(h->profs_spilled > 0);
	}
	(void)head_series(d.db, &after_bytes);
	SM_CHECK(after_bytes < before_bytes);
	answers_are(d.db, want, true);
	free(want);

	SM_CHECK(spill_keys(&d) > 0);
	/* One spill cursor for what follows: the late writes' buckets are
	 * spilled again under the same keys, and the cursor must not read
	 * them through its old iterator (head.h, struct ing_spill_cur). */
	SM_CHECK_EQ(head_pairs_digest(d.db, &cur), head_pairs_digest(d.db,
	    NULL));

	/* Late writes into spilled buckets, first under faults. */
	SM_REQUIRE(db_write_spec(mem, spill_late, SM_ARRAY_LEN(spill_late), 8,
	    0) == 0);
	want = db_answers(mem);
	before = db_answers(d.db);
	for (n = 1; n < 10000; n++) {
		if ((rv = db_write_spec(d.db, spill_late,
		    SM_ARRAY_LEN(spill_late), 8, n)) == 0)
			break;
		answers_are(d.db, before, true);
	}
	SM_CHECK_EQ(rv, 0);
	answers_are(d.db, want, true);
	SM_CHECK_EQ(ing_db_spill(d.db, &err), 0);
	SM_CHECK_EQ(spilled_count(d.db, &resident), 3);
	answers_are(d.db, want, true);
	SM_CHECK_EQ(head_pairs_digest(d.db, &cur), head_pairs_digest(d.db,
	    NULL));
	ing_spill_cur_fini(&cur);

	/* A cut encodes the spilled buckets; they go with the head. */
	free(want);
	want = answers_no_head(mem);
	SM_CHECK_EQ(ing_db_flush(d.db, &err), 0);
	answers_are(d.db, want, false);
	{
		struct sm_kv_iter *it = sm_kv_iter_create(
		    ing_store_kv(d.store), SM_KV_HEAD);
		uint32_t keys = 0;

		for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
		    sm_kv_iter_next(it))
			keys++;
		sm_kv_iter_destroy(it);
		SM_CHECK_EQ(keys, 0);          /* the log went with the cut */
		SM_CHECK_EQ(spill_keys(&d), 0);   /* so did the spilled buckets */
	}

	/* Spilled, then closed: the replay rebuilds the head from the log. */
	SM_REQUIRE(db_write_spec(d.db, aon_base, SM_ARRAY_LEN(aon_base), 9,
	    0) == 0);
	SM_REQUIRE(db_write_spec(mem, aon_base, SM_ARRAY_LEN(aon_base), 9,
	    0) == 0);
	SM_REQUIRE(db_write_spec(d.db, &aon_base[1], 1, 10, 0) == 0);
	SM_REQUIRE(db_write_spec(mem, &aon_base[1], 1, 10, 0) == 0);
	SM_CHECK_EQ(ing_db_spill(d.db, &err), 0);
	SM_CHECK(spilled_count(d.db, NULL) > 0);
	free(want);
	want = answers_no_head(mem);
	answers_are(d.db, want, false);
	disk_close(&d);
	disk_open(&d, 3600 * SEC);
	answers_are(d.db, want, false);
	SM_CHECK_EQ(ing_db_spill(d.db, &err), 0);
	answers_are(d.db, want, false);
	free(before);
	free(want);
	disk_fini(&d);
	ing_db_close(mem);
}

struct spiller {
	struct ing_db *db;
	atomic_bool stop;
	uint32_t passes;
};

static void *
spiller_main(void *p)
{
	struct spiller *sp = p;
	struct sm_err err;

	while (!atomic_load(&sp->stop)) {
		if (ing_db_spill(sp->db, &err) != 0)
			abort();
		sp->passes++;
	}
	return (NULL);
}

/*
 * Spills racing writes and queries: four writers send 300 uploads each
 * into three buckets in turn (every write after the first round lands in
 * a sealed bucket, often a spilled one), a reader merges, and a thread
 * spills in a loop.  The total is exact, and the last spill leaves the
 * sealed buckets on disk.
 */
static void
test_spill_concurrent(void)
{
	struct disk d;
	struct worker w[6];
	struct spiller sp;
	pthread_t t[6], st;
	uint64_t profiles;
	struct sm_err err;

	disk_init(&d, 3600 * SEC);
	sp.db = d.db;
	sp.passes = 0;
	atomic_init(&sp.stop, false);
	pthread_create(&st, NULL, spiller_main, &sp);
	for (int i = 0; i < 6; i++) {
		w[i] = (struct worker){ d.db, i };
		pthread_create(&t[i], NULL, i < 4 ? writer_main : reader_main,
		    &w[i]);
	}
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	atomic_store(&sp.stop, true);
	pthread_join(st, NULL);
	SM_CHECK(sp.passes > 0);
	check_collapsed(merge_collapsed(d.db, "t", NULL, 0, NULL, 0, 60 * SEC,
	    &profiles), concurrent_want);
	SM_CHECK_EQ(profiles, 1200);
	SM_CHECK_EQ(ing_db_spill(d.db, &err), 0);
	SM_CHECK_EQ(spilled_count(d.db, NULL), 2);
	check_collapsed(merge_collapsed(d.db, "t", NULL, 0, NULL, 0, 60 * SEC,
	    &profiles), concurrent_want);
	SM_CHECK_EQ(ing_db_flush(d.db, &err), 0);
	check_collapsed(merge_collapsed(d.db, "t", NULL, 0, NULL, 0, 60 * SEC,
	    &profiles), concurrent_want);
	SM_CHECK_EQ(profiles, 1200);
	disk_fini(&d);
}

SM_TEST_MAIN(
	{ "memory bound: cut at 80%, refuse at 95%, resume under 85%",
	  test_memory_bound },
	{ "two uploads in one bucket merge", test_write_merge_same_bucket },
	{ "a hot newest bucket stays unpacked", test_hot_bucket_unpacked },
	{ "the tenant list: sorted hashes, a version per add", test_tenant_list },
	{ "packed buckets read back the same pairs", test_bucket_pack },
	{ "bucket ranges, out-of-order and negative times", test_bucket_ranges },
	{ "spilled summaries: append, interleave, take back, walk",
	    test_spilled_summaries },
	{ "spilled summaries: room sized by cadence", test_sums_room },
	{ "selectors and tenant isolation", test_selectors_and_tenants },
	{ "per-step series and group-by", test_series_query },
	{ "label names, values and series sets", test_labels_query },
	{ "malformed writes are refused before the log", test_malformed_writes },
	{ "4 writers and 2 readers concurrently", test_concurrent_writers_and_readers },
	{ "a query yields the head lock to a waiting write", test_query_yields_to_write },
	{ "queries stay whole while writes grow the head", test_queries_while_writes_grow_the_head },
	{ "reopen replays the head log", test_replay_after_reopen },
	{ "blocks are cut, queried and reopened", test_cut_blocks_and_reopen },
	{ "a damaged part fails only its block's queries", test_corruption_stays_in_its_block },
	{ "a repeated tree child is summed; its block reads back", test_repeated_tree_child },
	{ "a damaged meta is rebuilt; meta+index fails the tenant", test_damaged_meta },
	{ "a profile id is written once per tenant", test_duplicate_profile_ids },
	{ "a duplicate is recognised after a restart", test_duplicate_after_replay },
	{ "picks restrict series and buckets, and subtract some", test_picks },
	{ "picks' checked counts: a changed bucket is SM_EAGAIN",
	    test_picks_check },
	{ "stats: digests match across splits, detail per bucket, ids", test_stats_digest },
	{ "retention: a floor hides, retires and deletes old data", test_retention },
	{ "retention per tenant: own floors, default, reopen, never lower",
	    test_retention_tenants },
	{ "retention per tenant: disk usage drops", test_retention_disk },
	{ "analyze: index statistics per heads and blocks", test_analyze },
	{ "the series limit refuses new series whole", test_series_limit },
	{ "the series limit holds under racing writers",
	    test_series_limit_concurrent },
	{ "lock assertions know the locks this thread holds",
	    test_lock_assertions },
	{ "spilled buckets: same answers, late writes, faults, cut, replay",
	    test_spill_answers },
	{ "spills racing writes and merges: exact totals",
	    test_spill_concurrent },
	{ "a head write is all or nothing under allocation faults",
	    test_head_write_all_or_nothing },
	{ "a failed write is not replayed; a logged one replays whole",
	    test_db_write_all_or_nothing_replay },
)
