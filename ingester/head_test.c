/*
 * head_test.c -- the ingester head: writes, bucket merging, merge and
 * series queries, selectors, tenant isolation, malformed writes and
 * concurrent use.
 */
#include "sm_test.h"

#include <pthread.h>

#include "common/flamegraph.h"
#include "distributor/batch.h"
#include "ingester/head.h"
#include "common/mtree.h"

#define SEC 1000

/* Encode one upload with the given stacks ("a;b=3,a;c=1") for a series. */
static Smolder__V1__Request *
mkwrite(const char *tenant, const char *service, const char *extra_label,
    int64_t t, const char *stacks)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_label ls[3] = { { "__name__", "process_cpu" },
		{ "service_name", service }, { "env", extra_label } };
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	uint8_t id[16] = { 0 };
	char buf[1024], *save = NULL, *item;
	uint32_t s;
	Smolder__V1__Request *req;

	dist_limits_default(&lim);
	if (dist_batch_init(&b, a, &lim) != 0 ||
	    dist_batch_series(&b, ls, extra_label ? 3 : 2, t, &s, &err) != 0)
		abort();
	snprintf(buf, sizeof(buf), "%s", stacks);
	for (item = strtok_r(buf, ",", &save); item != NULL;
	    item = strtok_r(NULL, ",", &save)) {
		char *eq = strrchr(item, '='), *save2 = NULL, *f;
		uint32_t node = 0, name;

		*eq = '\0';
		for (f = strtok_r(item, ";", &save2); f != NULL;
		    f = strtok_r(NULL, ";", &save2)) {
			dist_batch_frame(&b, f, strlen(f), &name);
			dist_batch_node(&b, node, name, &node);
		}
		dist_batch_add(&b, s, node, atoll(eq + 1));
	}
	if (dist_batch_finish(&b) != 0 ||
	    dist_batch_encode(&b, tenant, id, &out) != 0)
		abort();
	req = smolder__v1__request__unpack(NULL, out.len, (uint8_t *)out.b);
	sm_buf_fini(&out);
	dist_batch_fini(&b);
	sm_arena_destroy(a);
	return (req);
}

static int
write_one(struct ing_head *h, const char *tenant, const char *service,
    const char *env, int64_t t, const char *stacks)
{
	Smolder__V1__Request *req = mkwrite(tenant, service, env, t, stacks);
	struct sm_err err;
	uint32_t ns, np;
	int rv;

	rv = ing_head_write(h, req->write, &ns, &np, &err);
	smolder__v1__request__free_unpacked(req, NULL);
	return (rv);
}

/* Merge a selector {name op value} over [start, end) into collapsed text. */
static char *
merge_collapsed(struct ing_head *h, const char *tenant, const char *lname,
    Smolder__V1__MatchType op, const char *lvalue, int64_t start,
    int64_t end, uint64_t *profiles)
{
	Smolder__V1__Select sel = SMOLDER__V1__SELECT__INIT;
	Smolder__V1__Matcher m = SMOLDER__V1__MATCHER__INIT;
	Smolder__V1__Matcher *mp = &m;
	Smolder__V1__MergeResponse mr;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_mtree qm;
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	char *text;

	m.type = op;
	m.name = (char *)lname;
	m.value = (char *)lvalue;
	sel.tenant = (char *)tenant;
	sel.n_matchers = lname != NULL ? 1 : 0;
	sel.matchers = &mp;
	sel.start_ms = start;
	sel.end_ms = end;
	if (ing_head_merge(h, &sel, a, &mr, &err) != 0 ||
	    sm_mtree_init(&qm) != 0 || sm_mtree_add_pb(&qm, &mr, &err) != 0)
		abort();
	if (profiles != NULL)
		*profiles = mr.profiles;
	sm_fg_write_collapsed(&qm.tree, &qm.names, qm.self, &out);
	text = strdup(out.b != NULL ? out.b : "");
	sm_mtree_fini(&qm);
	sm_buf_fini(&out);
	sm_arena_destroy(a);
	return (text);
}

static void
check_collapsed(char *got, const char *want)
{
	SM_CHECK_STR(got, want);
	free(got);
}

static void
test_write_merge_same_bucket(void)
{
	struct ing_head *h;
	uint64_t profiles;

	SM_REQUIRE(ing_head_create(10 * SEC, &h) == 0);
	SM_CHECK_EQ(write_one(h, "t", "app", NULL, 1 * SEC, "a;b=3,a;c=1,d=2"),
	    0);
	SM_CHECK_EQ(write_one(h, "t", "app", NULL, 5 * SEC, "a;c=4,e=1"), 0);
	check_collapsed(merge_collapsed(h, "t", NULL, 0, NULL, 0, 10 * SEC,
	    &profiles), "a;b 3\na;c 5\nd 2\ne 1\n");
	SM_CHECK_EQ(profiles, 2);   /* both uploads in one bucket */
	ing_head_destroy(h);
}

static void
test_bucket_ranges(void)
{
	struct ing_head *h;

	SM_REQUIRE(ing_head_create(10 * SEC, &h) == 0);
	SM_CHECK_EQ(write_one(h, "t", "app", NULL, 0, "x=1"), 0);
	SM_CHECK_EQ(write_one(h, "t", "app", NULL, 10 * SEC, "y=2"), 0);
	SM_CHECK_EQ(write_one(h, "t", "app", NULL, 25 * SEC, "z=4"), 0);
	/* Out of order: lands before the newest bucket. */
	SM_CHECK_EQ(write_one(h, "t", "app", NULL, 12 * SEC, "y=1"), 0);
	check_collapsed(merge_collapsed(h, "t", NULL, 0, NULL, 10 * SEC,
	    20 * SEC, NULL), "y 3\n");
	check_collapsed(merge_collapsed(h, "t", NULL, 0, NULL, 5 * SEC,
	    11 * SEC, NULL), "x 1\ny 3\n");
	check_collapsed(merge_collapsed(h, "t", NULL, 0, NULL, 0, 60 * SEC,
	    NULL), "x 1\ny 3\nz 4\n");
	check_collapsed(merge_collapsed(h, "t", NULL, 0, NULL, 30 * SEC,
	    60 * SEC, NULL), "");
	/* Negative times floor correctly. */
	SM_CHECK_EQ(write_one(h, "t", "app", NULL, -1, "n=1"), 0);
	check_collapsed(merge_collapsed(h, "t", NULL, 0, NULL, -10 * SEC, 0,
	    NULL), "n 1\n");
	ing_head_destroy(h);
}

static void
test_selectors_and_tenants(void)
{
	struct ing_head *h;

	SM_REQUIRE(ing_head_create(10 * SEC, &h) == 0);
	SM_CHECK_EQ(write_one(h, "t", "api", "prod", 0, "p=1"), 0);
	SM_CHECK_EQ(write_one(h, "t", "api", "dev", 0, "d=2"), 0);
	SM_CHECK_EQ(write_one(h, "t", "web", NULL, 0, "w=4"), 0);
	SM_CHECK_EQ(write_one(h, "u", "api", "prod", 0, "other=8"), 0);
	check_collapsed(merge_collapsed(h, "t", "env",
	    SMOLDER__V1__MATCH_TYPE__MATCH_EQ, "prod", 0, SEC, NULL), "p 1\n");
	check_collapsed(merge_collapsed(h, "t", "env",
	    SMOLDER__V1__MATCH_TYPE__MATCH_NEQ, "prod", 0, SEC, NULL),
	    "d 2\nw 4\n");
	check_collapsed(merge_collapsed(h, "t", "service_name",
	    SMOLDER__V1__MATCH_TYPE__MATCH_RE, "a.*", 0, SEC, NULL),
	    "d 2\np 1\n");
	/* env="" selects series without env. */
	check_collapsed(merge_collapsed(h, "t", "env",
	    SMOLDER__V1__MATCH_TYPE__MATCH_EQ, "", 0, SEC, NULL), "w 4\n");
	/* Tenants never see each other. */
	check_collapsed(merge_collapsed(h, "u", NULL, 0, NULL, 0, SEC, NULL),
	    "other 8\n");
	check_collapsed(merge_collapsed(h, "nobody", NULL, 0, NULL, 0, SEC,
	    NULL), "");
	ing_head_destroy(h);
}

static void
test_series_query(void)
{
	struct ing_head *h;
	Smolder__V1__SeriesRequest req = SMOLDER__V1__SERIES_REQUEST__INIT;
	Smolder__V1__Select sel = SMOLDER__V1__SELECT__INIT;
	Smolder__V1__SeriesResponse out;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;
	char *gb[] = { "env" };

	SM_REQUIRE(ing_head_create(10 * SEC, &h) == 0);
	write_one(h, "t", "api", "prod", 0, "a=1");
	write_one(h, "t", "api", "prod", 20 * SEC, "a=2");
	write_one(h, "t", "api", "dev", 40 * SEC, "a=4");
	sel.tenant = "t";
	sel.start_ms = 0;
	sel.end_ms = 60 * SEC;
	req.select = &sel;
	req.step_ms = 30 * SEC;
	SM_REQUIRE(ing_head_series(h, &req, a, &out, &err) == 0);
	SM_REQUIRE(out.n_series == 1);
	SM_CHECK_EQ(out.series[0]->n_points, 2);
	SM_CHECK_EQ(out.series[0]->points[0]->timestamp, 0);
	SM_CHECK(out.series[0]->points[0]->value == 3);
	SM_CHECK_EQ(out.series[0]->points[1]->timestamp, 30 * SEC);
	SM_CHECK(out.series[0]->points[1]->value == 4);
	req.n_group_by = 1;
	req.group_by = gb;
	SM_REQUIRE(ing_head_series(h, &req, a, &out, &err) == 0);
	SM_CHECK_EQ(out.n_series, 2);
	req.step_ms = 0;
	SM_CHECK_EQ(ing_head_series(h, &req, a, &out, &err), SM_EINVAL);
	req.step_ms = 1;
	sel.end_ms = 10000LL * 1000 * SEC;   /* 10^10 steps */
	SM_CHECK_EQ(ing_head_series(h, &req, a, &out, &err), SM_EINVAL);
	sm_arena_destroy(a);
	ing_head_destroy(h);
}

static void
test_malformed_writes(void)
{
	struct ing_head *h;
	Smolder__V1__Request *req;
	struct sm_err err;
	uint32_t ns, np, saved;

	SM_REQUIRE(ing_head_create(10 * SEC, &h) == 0);
	req = mkwrite("t", "app", NULL, 0, "a;b=3,c=1");
	/* Parent after child. */
	saved = req->write->tree->parent[0];
	req->write->tree->parent[0] = 2;
	SM_CHECK_EQ(ing_head_write(h, req->write, &ns, &np, &err),
	    SM_EMALFORMED);
	req->write->tree->parent[0] = saved;
	/* Name index out of range. */
	saved = req->write->tree->name[0];
	req->write->tree->name[0] = 99;
	SM_CHECK_EQ(ing_head_write(h, req->write, &ns, &np, &err),
	    SM_EMALFORMED);
	req->write->tree->name[0] = saved;
	/* A value <= 0. */
	req->write->series[0]->value[0] = 0;
	SM_CHECK_EQ(ing_head_write(h, req->write, &ns, &np, &err),
	    SM_EMALFORMED);
	req->write->series[0]->value[0] = 3;
	/* Unsorted nodes. */
	saved = req->write->series[0]->node[0];
	req->write->series[0]->node[0] = req->write->series[0]->node[1];
	SM_CHECK_EQ(ing_head_write(h, req->write, &ns, &np, &err),
	    SM_EMALFORMED);
	req->write->series[0]->node[0] = saved;
	/* Node beyond the tree. */
	req->write->series[0]->node[1] = 1000;
	SM_CHECK_EQ(ing_head_write(h, req->write, &ns, &np, &err),
	    SM_EMALFORMED);
	smolder__v1__request__free_unpacked(req, NULL);
	ing_head_destroy(h);
}

struct writer {
	struct ing_head *h;
	int id;
};

static void *
writer_main(void *p)
{
	struct writer *w = p;

	for (int i = 0; i < 300; i++) {
		char stacks[64];

		snprintf(stacks, sizeof(stacks), "root;f%d=1,root;g=2", i % 7);
		if (write_one(w->h, "t", "app", NULL, (int64_t)(i % 30) * SEC,
		    stacks) != 0)
			abort();
	}
	return (NULL);
}

static void *
reader_main(void *p)
{
	struct writer *w = p;

	for (int i = 0; i < 50; i++)
		free(merge_collapsed(w->h, "t", NULL, 0, NULL, 0, 60 * SEC,
		    NULL));
	return (NULL);
}

static void
test_concurrent_writers_and_readers(void)
{
	struct ing_head *h;
	struct writer w[6];
	pthread_t t[6];
	uint64_t profiles;
	char *got;

	SM_REQUIRE(ing_head_create(10 * SEC, &h) == 0);
	for (int i = 0; i < 6; i++) {
		w[i] = (struct writer){ h, i };
		pthread_create(&t[i], NULL, i < 4 ? writer_main : reader_main,
		    &w[i]);
	}
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	/* 4 writers x 300 uploads: g = 2 each, f0..f6 = 1 each. */
	got = merge_collapsed(h, "t", NULL, 0, NULL, 0, 60 * SEC, &profiles);
	SM_CHECK_STR(got, "root;f0 172\nroot;f1 172\nroot;f2 172\n"
	    "root;f3 172\nroot;f4 172\nroot;f5 172\nroot;f6 168\n"
	    "root;g 2400\n");
	SM_CHECK_EQ(profiles, 1200);
	free(got);
	ing_head_destroy(h);
}

SM_TEST_MAIN(
	{ "two uploads in one bucket merge", test_write_merge_same_bucket },
	{ "bucket ranges, out-of-order and negative times", test_bucket_ranges },
	{ "selectors and tenant isolation", test_selectors_and_tenants },
	{ "per-step series and group-by", test_series_query },
	{ "malformed writes are refused", test_malformed_writes },
	{ "4 writers and 2 readers concurrently", test_concurrent_writers_and_readers },
)
