/*
 * bucket_index_test.c -- the compactor's bucket pass on a filesystem
 * bucket laid out as ingesters leave it: retention marks, deletion after
 * the delay (meta.json first), unfinished uploads, the bucket index, and
 * tenants kept apart.
 */
#include <string.h>

#include "common/bucket.h"
#include "common/json.h"
#include "compactor/bucket_index.h"
#include "ingester/ship.h"

#include "sm_test.h"

#define HOUR 3600000LL
#define NOW (1800000000000LL)

static char dir[64];
static struct sm_bucket *bk;

static void
put(const char *key, const char *body)
{
	struct sm_err err;

	SM_REQUIRE(sm_bucket_put(bk, key, body, strlen(body), &err) == 0);
}

static bool
exists(const char *key)
{
	struct sm_err err;
	uint64_t size;

	return (sm_bucket_stat(bk, key, &size, &err) == 0);
}

/* A complete block of tenant tk ("tenant" in its meta) made at ms. */
static void
block(const char *tk, const char *tenant, int64_t made_ms, int64_t max_t,
    char ulid[ING_ULID_LEN + 1], bool with_meta)
{
	char key[256], meta[512];

	ing_ulid_make(made_ms, ulid);
	snprintf(key, sizeof(key), "%s/blocks/%s/block", tk, ulid);
	put(key, "block bytes");
	if (!with_meta)
		return;
	snprintf(meta, sizeof(meta), "{\"version\":1,\"ulid\":\"%s\","
	    "\"tenant\":\"%s\",\"min_t\":%lld,\"max_t\":%lld}", ulid, tenant,
	    (long long)(max_t - HOUR), (long long)max_t);
	snprintf(key, sizeof(key), "%s/blocks/%s/meta.json", tk, ulid);
	put(key, meta);
}

static int64_t
floor_fn(void *arg, const char *tenant)
{
	(void)arg;
	/* t1: 24 h retention; t.2 keeps everything */
	return (strcmp(tenant, "t1") == 0 ? NOW - 24 * HOUR : 0);
}

static struct sm_json *
index_of(const char *tk)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_err err;
	char key[128];
	struct sm_json *j = NULL;

	snprintf(key, sizeof(key), "%s/bucket-index.json", tk);
	if (sm_bucket_get(bk, key, 0, SM_BUCKET_WHOLE, &v, &err) == 0)
		(void)sm_json_parse(v.b, v.len, 0, &j, NULL);
	sm_buf_fini(&v);
	return (j);
}

static void
test_pass(void)
{
	struct sm_bucket_cfg c = { 0 };
	struct cpt_bucket_stats st;
	struct sm_err err;
	char old[ING_ULID_LEN + 1], recent[ING_ULID_LEN + 1];
	char part_old[ING_ULID_LEN + 1], part_new[ING_ULID_LEN + 1];
	char other[ING_ULID_LEN + 1], key[256];
	struct sm_json *idx;

	snprintf(dir, sizeof(dir), "/tmp/smolder-bidx-XXXXXX");
	SM_REQUIRE(mkdtemp(dir) != NULL);
	c.backend = (char *)"filesystem";
	c.fs_dir = dir;
	SM_REQUIRE(sm_bucket_open(&c, NULL, &bk, &err) == 0);
	block("t1", "t1", NOW - 48 * HOUR, NOW - 47 * HOUR, old, true);
	block("t1", "t1", NOW - HOUR, NOW - HOUR, recent, true);
	block("t1", "t1", NOW - 72 * HOUR, 0, part_old, false);
	block("t1", "t1", NOW - 2 * HOUR, 0, part_new, false);
	block("t_2E2", "t.2", NOW - 48 * HOUR, NOW - 47 * HOUR, other, true);

	/* pass 1: the old block is marked, the old partial deleted */
	SM_REQUIRE(cpt_bucket_pass(bk, NOW, 12 * HOUR, floor_fn, NULL, &st,
	    &err) == 0);
	SM_CHECK_EQ(st.tenants, 2);
	SM_CHECK_EQ(st.blocks, 3);
	SM_CHECK_EQ(st.marked, 1);
	SM_CHECK_EQ(st.deleted, 0);
	SM_CHECK_EQ(st.partial_deleted, 1);
	SM_CHECK_EQ(st.failed, 0);
	snprintf(key, sizeof(key), "t1/blocks/%s/deletion-mark.json", old);
	SM_CHECK(exists(key));
	snprintf(key, sizeof(key), "t1/blocks/%s/block", part_old);
	SM_CHECK(!exists(key));
	snprintf(key, sizeof(key), "t1/blocks/%s/block", part_new);
	SM_CHECK(exists(key));
	SM_REQUIRE((idx = index_of("t1")) != NULL);
	SM_CHECK_EQ(sm_json_len(sm_json_get(idx, "blocks")), 2);
	SM_CHECK_STR(sm_json_str(sm_json_get(sm_json_at(
	    sm_json_get(idx, "blocks"), 0), "ulid")), old);
	SM_CHECK_EQ(sm_json_int(sm_json_get(sm_json_at(
	    sm_json_get(idx, "blocks"), 0), "deletion_time_ms")), NOW);
	SM_CHECK(sm_json_get(sm_json_at(sm_json_get(idx,
	    "blocks"), 1), "deletion_time_ms") == NULL);
	sm_json_free(idx);
	SM_REQUIRE((idx = index_of("t_2E2")) != NULL);
	SM_CHECK_EQ(sm_json_len(sm_json_get(idx, "blocks")), 1);
	sm_json_free(idx);

	/* pass 2, before the delay: nothing more; the metas come from the
	 * index (a damaged meta.json is not read again) */
	snprintf(key, sizeof(key), "t1/blocks/%s/meta.json", recent);
	put(key, "not json");
	SM_REQUIRE(cpt_bucket_pass(bk, NOW + HOUR, 12 * HOUR, floor_fn, NULL,
	    &st, &err) == 0);
	SM_CHECK_EQ(st.marked, 0);
	SM_CHECK_EQ(st.deleted, 0);
	SM_CHECK_EQ(st.failed, 0);

	/* pass 3, after the delay: deleted, meta.json first; the index
	 * forgets it */
	SM_REQUIRE(cpt_bucket_pass(bk, NOW + 13 * HOUR, 12 * HOUR, floor_fn,
	    NULL, &st, &err) == 0);
	SM_CHECK_EQ(st.deleted, 1);
	SM_CHECK_EQ(st.blocks, 2);
	snprintf(key, sizeof(key), "t1/blocks/%s/meta.json", old);
	SM_CHECK(!exists(key));
	snprintf(key, sizeof(key), "t1/blocks/%s/block", old);
	SM_CHECK(!exists(key));
	snprintf(key, sizeof(key), "t1/blocks/%s/deletion-mark.json", old);
	SM_CHECK(!exists(key));
	SM_REQUIRE((idx = index_of("t1")) != NULL);
	SM_CHECK_EQ(sm_json_len(sm_json_get(idx, "blocks")), 1);
	sm_json_free(idx);
	/* t.2 keeps everything */
	snprintf(key, sizeof(key), "t_2E2/blocks/%s/meta.json", other);
	SM_CHECK(exists(key));

	/* a deletion cut short (meta.json gone, block and mark left) is
	 * finished by the next pass */
	block("t1", "t1", NOW - 50 * HOUR, NOW - 49 * HOUR, old, false);
	snprintf(key, sizeof(key), "t1/blocks/%s/deletion-mark.json", old);
	put(key, "{\"version\":1}");
	SM_REQUIRE(cpt_bucket_pass(bk, NOW + 14 * HOUR, 12 * HOUR, floor_fn,
	    NULL, &st, &err) == 0);
	SM_CHECK(!exists(key));
	snprintf(key, sizeof(key), "t1/blocks/%s/block", old);
	SM_CHECK(!exists(key));

	/* a meta.json without its block object is not indexed */
	block("t_2E2", "t.2", NOW - HOUR, NOW - HOUR, other, true);
	snprintf(key, sizeof(key), "t_2E2/blocks/%s/block", other);
	SM_CHECK(sm_bucket_delete(bk, key, &err) == 0);
	SM_REQUIRE(cpt_bucket_pass(bk, NOW + 14 * HOUR, 12 * HOUR, floor_fn,
	    NULL, &st, &err) == 0);
	SM_REQUIRE((idx = index_of("t_2E2")) != NULL);
	SM_CHECK_EQ(sm_json_len(sm_json_get(idx, "blocks")), 1);
	sm_json_free(idx);

	/* a meta.json that is not JSON, and no index to fall back on:
	 * that tenant fails (counted), the others go on */
	snprintf(key, sizeof(key), "t1/bucket-index.json");
	SM_CHECK(sm_bucket_delete(bk, key, &err) == 0);
	SM_REQUIRE(cpt_bucket_pass(bk, NOW + 15 * HOUR, 12 * HOUR, floor_fn,
	    NULL, &st, &err) == 0);
	SM_CHECK_EQ(st.failed, 1);
	SM_CHECK((idx = index_of("t_2E2")) != NULL);
	sm_json_free(idx);
}

static void
test_teardown(void)
{
	char cmd[128];

	sm_bucket_destroy(bk);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	SM_CHECK(system(cmd) == 0);
}

SM_TEST_MAIN(
	{ "retention marks, deletes after the delay, indexes, partials",
	    test_pass },
	{ "teardown", test_teardown },
)
