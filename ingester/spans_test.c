/*
 * spans_test.c -- span samples (ingester/spans.h): the span merge over
 * heads, head log replay, blocks (the 'P' part) and both together;
 * selectors, time ranges and picks; malformed span triples refused before
 * the log; a damaged 'P' part failing only span queries of its block; the
 * head memory counting the records.  And individual-profile records
 * (ingester/profiles.h, the 'X' part): ids, exact times, totals and
 * group labels over heads, replay and blocks; the record limit; a damaged
 * 'X' part.
 */
#include "sm_test.h"
#include "sm_test_disk.h"

#include <stdlib.h>
#include <unistd.h>

#include "common/flamegraph.h"
#include "common/labels.h"
#include "common/mtree.h"
#include "distributor/batch.h"
#include "ingester/db.h"
#include "ingester/store.h"

#define SEC 1000

static uint64_t next_id = 1;

/*
 * One upload for series {service_name=app[, env]} at t: items
 * "a;b=3@7" (stack a;b, value 3, span 7; no "@" = no span), comma
 * separated.
 */
static void
mkwrite(const char *env, int64_t t, const char *stacks, struct sm_buf *out)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_label ls[3] = { { "__name__", "process_cpu" },
		{ "service_name", "app" }, { "env", env } };
	struct sm_err err;
	uint8_t id[16] = { 0 };
	char buf[8192], *save = NULL, *item;
	uint32_t s;
	uint64_t idv = next_id++;

	memcpy(id, &idv, sizeof(idv));
	dist_limits_default(&lim);
	if (dist_batch_init(&b, a, &lim) != 0 ||
	    dist_batch_series(&b, ls, env ? 3 : 2, t, &s, &err) != 0)
		abort();
	snprintf(buf, sizeof(buf), "%s", stacks);
	for (item = strtok_r(buf, ",", &save); item != NULL;
	    item = strtok_r(NULL, ",", &save)) {
		char *at = strchr(item, '@'), *eq, *save2 = NULL, *f;
		uint32_t node = 0, name;

		if (at != NULL)
			*at = '\0';
		eq = strrchr(item, '=');
		*eq = '\0';
		for (f = strtok_r(item, ";", &save2); f != NULL;
		    f = strtok_r(NULL, ";", &save2)) {
			dist_batch_frame(&b, f, strlen(f), &name);
			dist_batch_node(&b, node, name, &node);
		}
		dist_batch_add(&b, s, node, atoll(eq + 1));
		if (at != NULL)
			dist_batch_span(&b, s, node, atoll(eq + 1),
			    strtoull(at + 1, NULL, 10));
	}
	if (dist_batch_finish(&b) != 0 ||
	    dist_batch_encode(&b, "t", id, NULL, 0, 0, out) != 0)
		abort();
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

static int
write_one(struct ing_db *db, const char *env, int64_t t, const char *stacks)
{
	struct sm_buf raw = SM_BUF_INIT;
	struct ing_write_result res;
	struct sm_err err;

	mkwrite(env, t, stacks, &raw);
	return (disk_write_raw(db, &raw, 0, &res, &err));
}

/*
 * Span merge of spans (sorted) over [start, end), env = `env` when not
 * NULL, optional picks; collapsed text or "ERR <code>".
 */
static char *
span_collapsed(struct ing_db *db, const uint64_t *spans, size_t nspans,
    const char *env, int64_t start, int64_t end,
    const struct ing_pick *picks, size_t npicks)
{
	struct ing_matcher m = { SM_MATCH_EQ, "env", env };
	struct ing_query req = { 0 };
	Smolder__V1__MergeResponse mr;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;

	req.sel.tenant = "t";
	req.sel.nmatchers = env != NULL ? 1 : 0;
	req.sel.matchers = &m;
	req.sel.start_ms = start;
	req.sel.end_ms = end;
	req.sel.picked = picks != NULL;
	req.sel.picks = picks;
	req.sel.npicks = npicks;
	req.span_ids = spans;
	req.nspan_ids = nspans;
	return (disk_collapsed(ing_db_span_merge(db, &req, a, &mr, &err), &mr,
	    a, NULL));
}

static void
check(char *got, const char *want)
{
	SM_CHECK_STR(got, want);
	free(got);
}

static void
disk_init(struct disk *d)
{
	struct ing_db_cfg cfg = { 10 * SEC, 3600 * SEC, 0, 3, 0, 0, 0, 0, NULL,
	    NULL };

	disk_create(d, "spantest", &cfg);
}

static void
disk_open(struct disk *d)
{
	disk_reopen(d);
}

static const uint64_t S1[] = { 1 }, S2[] = { 2 }, S12[] = { 1, 2 },
    S3[] = { 3 }, SBIG[] = { 0xfedcba9876543210ull };

/* The same answers wherever the records live. */
static void
check_all(struct ing_db *db, const char *where)
{
	fprintf(stderr, "# %s\n", where);
	check(span_collapsed(db, S1, 1, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b 5\nx 4\n");
	check(span_collapsed(db, S2, 1, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b 2\nc 1\n");
	check(span_collapsed(db, S12, 2, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b 7\nc 1\nx 4\n");
	check(span_collapsed(db, S3, 1, NULL, 0, 60 * SEC, NULL, 0), "");
	check(span_collapsed(db, SBIG, 1, NULL, 0, 60 * SEC, NULL, 0),
	    "z 9\n");
	/* Selector: only env=prod's samples. */
	check(span_collapsed(db, S12, 2, "prod", 0, 60 * SEC, NULL, 0),
	    "x 4\n");
	/* Time range: the bucket [20 s, 30 s) only. */
	check(span_collapsed(db, S12, 2, NULL, 20 * SEC, 30 * SEC, NULL, 0),
	    "a;b 4\nc 1\n");
	check(span_collapsed(db, S12, 2, NULL, 40 * SEC, 60 * SEC, NULL, 0),
	    "");
}

static void
write_fixture(struct ing_db *db)
{
	/* Bucket 0: span 1 on a;b (3), no span on c; bucket 20 s: span 1
	 * on a;b (2), span 2 on a;b (2) and c (1); env=prod: span 1 on x. */
	SM_CHECK_EQ(write_one(db, NULL, 0, "a;b=3@1,c=5,a;b=1"), 0);
	SM_CHECK_EQ(write_one(db, NULL, 21 * SEC, "a;b=2@1,a;b=2@2,c=1@2"),
	    0);
	SM_CHECK_EQ(write_one(db, "prod", 5 * SEC,
	    "x=4@1,z=9@18364758544493064720"), 0);
}

static void
test_heads_replay_blocks(void)
{
	struct disk d;
	struct sm_err err;

	disk_init(&d);
	write_fixture(d.db);
	check_all(d.db, "heads");
	disk_close(&d);
	disk_open(&d);
	check_all(d.db, "replayed heads");
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	check_all(d.db, "a block");
	disk_close(&d);
	disk_open(&d);
	check_all(d.db, "a block after reopen");
	/* A head and a block together: span 2 again in the head. */
	SM_CHECK_EQ(write_one(d.db, NULL, 22 * SEC, "c=6@2,q=1"), 0);
	check(span_collapsed(d.db, S2, 1, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b 2\nc 7\n");
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	check(span_collapsed(d.db, S2, 1, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b 2\nc 7\n");
	disk_fini(&d);
}

static void
test_picks(void)
{
	struct disk d;
	struct sm_err err;
	struct ing_pick p = { 0 };
	struct sm_label ls[2] = { { "__name__", "process_cpu" },
		{ "service_name", "app" } };
	int64_t t20 = 20 * SEC;

	disk_init(&d);
	write_fixture(d.db);
	p.fp = sm_labels_fingerprint(ls, 2);
	for (int round = 0; round < 2; round++) {
		/* The series without env, all its buckets. */
		check(span_collapsed(d.db, S1, 1, NULL, 0, 60 * SEC, &p, 1),
		    "a;b 5\n");
		/* Only its bucket at 20 s. */
		p.t = &t20;
		p.nt = 1;
		check(span_collapsed(d.db, S12, 2, NULL, 0, 60 * SEC, &p, 1),
		    "a;b 4\nc 1\n");
		p.t = NULL;
		p.nt = 0;
		SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	}
	disk_fini(&d);
}

/* Write req (packed) after `mut` changed its first series. */
static int
write_mutated(struct ing_db *db, void (*mut)(Smolder__V1__SeriesWrite *))
{
	struct sm_buf raw = SM_BUF_INIT, again = SM_BUF_INIT;
	Smolder__V1__Request *req;
	struct ing_write_result res;
	struct sm_err err;
	size_t n;
	int rv;

	mkwrite(NULL, 0, "a;b=3@1,a;c=2@1,d=1@2", &raw);
	req = smolder__v1__request__unpack(NULL, raw.len, (uint8_t *)raw.b);
	mut(req->write->series[0]);
	n = protobuf_c_message_get_packed_size(&req->base);
	SM_REQUIRE(sm_buf_reserve(&again, n) == 0);
	protobuf_c_message_pack(&req->base, (uint8_t *)again.b);
	rv = ing_db_write(db, (uint8_t *)again.b, n, req->write, &res, &err);
	smolder__v1__request__free_unpacked(req, NULL);
	sm_buf_fini(&raw);
	sm_buf_fini(&again);
	return (rv);
}

static void
mut_len(Smolder__V1__SeriesWrite *w)
{
	w->n_span_value--;
}

static void
mut_order(Smolder__V1__SeriesWrite *w)
{
	uint64_t x = w->span_id[0];

	w->span_id[0] = w->span_id[2];
	w->span_id[2] = x;
}

static void
mut_node(Smolder__V1__SeriesWrite *w)
{
	w->span_node[2] = 1000;   /* not a node of the write's tree */
}

static void
mut_zero(Smolder__V1__SeriesWrite *w)
{
	w->span_value[1] = 0;
}

static void
mut_none(Smolder__V1__SeriesWrite *w)
{
	(void)w;
}

/* A delta profile: every pair and span sample negative. */
static void
mut_negate(Smolder__V1__SeriesWrite *w)
{
	for (size_t i = 0; i < w->n_value; i++)
		w->value[i] = -w->value[i];
	for (size_t i = 0; i < w->n_span_value; i++)
		w->span_value[i] = -w->span_value[i];
}

static void
test_signed_spans(void)
{
	struct disk d;
	struct sm_err err;

	disk_init(&d);
	SM_CHECK_EQ(write_mutated(d.db, mut_negate), 0);
	check(span_collapsed(d.db, S12, 2, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b -3\na;c -2\nd -1\n");
	/* The same write once more, positive: the records cancel out and
	 * leave nothing, in the head and in the block cut from it. */
	SM_CHECK_EQ(write_mutated(d.db, mut_none), 0);
	check(span_collapsed(d.db, S12, 2, NULL, 0, 60 * SEC, NULL, 0), "");
	SM_CHECK_EQ(write_mutated(d.db, mut_negate), 0);
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	check(span_collapsed(d.db, S12, 2, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b -3\na;c -2\nd -1\n");
	disk_close(&d);
	disk_open(&d);
	check(span_collapsed(d.db, S12, 2, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b -3\na;c -2\nd -1\n");
	disk_fini(&d);
}

static void
test_malformed_spans(void)
{
	struct disk d;

	disk_init(&d);
	SM_CHECK_EQ(write_mutated(d.db, mut_len), SM_EMALFORMED);
	SM_CHECK_EQ(write_mutated(d.db, mut_order), SM_EMALFORMED);
	SM_CHECK_EQ(write_mutated(d.db, mut_node), SM_EMALFORMED);
	SM_CHECK_EQ(write_mutated(d.db, mut_zero), SM_EMALFORMED);
	/* Nothing reached the log: a reopen replays nothing. */
	disk_close(&d);
	disk_open(&d);
	check(span_collapsed(d.db, S12, 2, NULL, 0, 60 * SEC, NULL, 0), "");
	SM_CHECK_EQ(write_mutated(d.db, mut_none), 0);
	check(span_collapsed(d.db, S12, 2, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b 3\na;c 2\nd 1\n");
	/* Unsorted span ids in a query are malformed too. */
	{
		static const uint64_t bad[] = { 2, 1 };

		check(span_collapsed(d.db, bad, 2, NULL, 0, 60 * SEC, NULL, 0),
		    "ERR -30998");
	}
	disk_fini(&d);
}

static void
test_damaged_spans_part(void)
{
	struct disk d;
	struct sm_err err;
	struct sm_kv *kv;
	struct sm_buf v = SM_BUF_INIT;
	struct sm_key k;

	disk_init(&d);
	write_fixture(d.db);
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	disk_close(&d);
	disk_open(&d);
	kv = ing_store_kv(d.store);
	ing_key_part(&k, "t", 1, 'P', 0);
	SM_REQUIRE(sm_kv_get(kv, SM_KV_BLOCKS, k.b, k.n, &v, &err) == 0);
	v.b[v.len / 2 + 6] ^= 0x40;
	SM_REQUIRE(sm_kv_put(kv, SM_KV_BLOCKS, k.b, k.n, v.b, v.len, &err) ==
	    0);
	sm_buf_fini(&v);
	check(span_collapsed(d.db, S1, 1, NULL, 0, 60 * SEC, NULL, 0),
	    "ERR -30997");   /* SM_ECORRUPT */
	/* The ordinary merge does not read the part. */
	{
		struct ing_query q = { .sel = { .tenant = "t",
			.start_ms = 0, .end_ms = 60 * SEC } };
		Smolder__V1__MergeResponse mr;
		struct sm_arena *a = sm_arena_create(0);

		SM_CHECK_EQ(ing_db_merge(d.db, &q, a, &mr, &err), 0);
		SM_CHECK(mr.tree != NULL && mr.tree->n_parent > 0);
		sm_arena_destroy(a);
	}
	disk_fini(&d);
}

static void
test_head_bytes(void)
{
	struct disk d;
	struct ing_db_stats a, b;
	char buf[4096];
	size_t o = 0;

	disk_init(&d);
	SM_CHECK_EQ(write_one(d.db, NULL, 0, "a=1"), 0);
	ing_db_stats(d.db, &a);
	for (int i = 0; i < 200; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%sa=1@%d",
		    i ? "," : "", i + 1);
	/* The same stack under 200 spans: one pair, 200 span records. */
	SM_CHECK_EQ(write_one(d.db, NULL, 0, buf), 0);
	ing_db_stats(d.db, &b);
	SM_CHECK(b.head_bytes >= a.head_bytes + 200 * sizeof(struct
	    ing_span_rec));
	disk_fini(&d);
}

/* Profiles of [start, end) grouped by env, as "t:total:id0:bt|..." and
 * the groups as "env=..;" or "ERR <code>". */
static char *
profiles_text(struct ing_db *db, int64_t start, int64_t end, uint32_t max)
{
	struct ing_query req = { 0 };
	Smolder__V1__ProfilesResponse out;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_buf b = SM_BUF_INIT;
	const char *gb[] = { "env" };
	char tmp[128], *text;
	struct sm_err err;
	int rv;

	req.sel.tenant = "t";
	req.sel.start_ms = start;
	req.sel.end_ms = end;
	req.group_by = gb;
	req.ngroup_by = 1;
	req.max = max;
	if ((rv = ing_db_profiles(db, &req, a, &out, &err)) != 0) {
		snprintf(tmp, sizeof(tmp), "ERR %d", rv);
		sm_arena_destroy(a);
		return (strdup(tmp));
	}
	/* canon() sorts the records (fps are hashes). */
	for (size_t i = 0; i < out.n_profiles; i++) {
		const Smolder__V1__ProfileRef *x = out.profiles[i];
		uint64_t id;

		memcpy(&id, x->id.data, 8);
		snprintf(tmp, sizeof(tmp), "%lld:%lld:%llu:%lld|",
		    (long long)x->time_ms, (long long)x->total,
		    (unsigned long long)id, (long long)x->bucket_t);
		sm_buf_append(&b, tmp, strlen(tmp));
	}
	for (size_t i = 0; i < out.n_groups; i++) {
		const Smolder__V1__SeriesGroup *g = out.groups[i];

		snprintf(tmp, sizeof(tmp), "[%s]", g->n_labels == 1 ?
		    g->labels[0]->value : "");
		sm_buf_append(&b, tmp, strlen(tmp));
	}
	text = strdup(b.b != NULL ? b.b : "");
	sm_buf_fini(&b);
	sm_arena_destroy(a);
	return (text);
}

/* Sort the '|'-separated records and the "[..]" groups of a text. */
static char *
canon(char *s)
{
	char *parts[64], *groups[16], *save = NULL, *p, *g;
	size_t np = 0, ng = 0, o = 0;
	char *out;

	if (strncmp(s, "ERR", 3) == 0)
		return (s);
	out = calloc(1, strlen(s) + 8);
	g = strchr(s, '[');
	if (g != NULL) {
		char *q = g;

		*g = '\0';
		q++;
		while (q != NULL && *q != '\0' && ng < 16) {
			char *e = strchr(q, ']');

			*e = '\0';
			groups[ng++] = q;
			q = e + 1;
			if (*q == '[')
				q++;
		}
	}
	for (p = strtok_r(s, "|", &save); p != NULL && np < 64;
	    p = strtok_r(NULL, "|", &save))
		parts[np++] = p;
	for (size_t i = 1; i < np; i++)
		for (size_t j = i; j > 0 && strcmp(parts[j - 1], parts[j]) > 0;
		    j--) {
			char *t = parts[j];

			parts[j] = parts[j - 1];
			parts[j - 1] = t;
		}
	for (size_t i = 1; i < ng; i++)
		for (size_t j = i; j > 0 && strcmp(groups[j - 1], groups[j]) >
		    0; j--) {
			char *t = groups[j];

			groups[j] = groups[j - 1];
			groups[j - 1] = t;
		}
	for (size_t i = 0; i < np; i++)
		o += (size_t)sprintf(out + o, "%s|", parts[i]);
	for (size_t i = 0; i < ng; i++)
		o += (size_t)sprintf(out + o, "[%s]", groups[i]);
	free(s);
	return (out);
}

static void
check_profiles(struct ing_db *db, uint64_t id0, const char *where)
{
	char want[512];

	fprintf(stderr, "# profiles: %s\n", where);
	/* Uploads id0 (t 1500, total 4), id0+1 (t 5000, prod, total 9),
	 * id0+2 (t 21000, total 7). */
	snprintf(want, sizeof(want), "1500:4:%llu:0|21000:7:%llu:20000|"
	    "5000:9:%llu:0|[][prod]", (unsigned long long)id0,
	    (unsigned long long)(id0 + 2), (unsigned long long)(id0 + 1));
	check(canon(profiles_text(db, 0, 60 * SEC, 0)), want);
	/* Exact times: [1500, 1501) and [1501, 21000). */
	/* Groups: every selected series (bucket [0, 10 s) holds both). */
	snprintf(want, sizeof(want), "1500:4:%llu:0|[][prod]",
	    (unsigned long long)id0);
	check(canon(profiles_text(db, 1500, 1501, 0)), want);
	snprintf(want, sizeof(want), "5000:9:%llu:0|[][prod]",
	    (unsigned long long)(id0 + 1));
	check(canon(profiles_text(db, 1501, 21000, 0)), want);
	/* More than max records. */
	check(profiles_text(db, 0, 60 * SEC, 2), "ERR -30995");
}

static void
test_profiles(void)
{
	struct disk d;
	struct sm_err err;
	uint64_t id0;

	disk_init(&d);
	id0 = next_id;
	SM_CHECK_EQ(write_one(d.db, NULL, 1500, "a;b=3@1,c=1"), 0);
	SM_CHECK_EQ(write_one(d.db, "prod", 5000, "x=9"), 0);
	SM_CHECK_EQ(write_one(d.db, NULL, 21000, "a;b=7"), 0);
	check_profiles(d.db, id0, "heads");
	disk_close(&d);
	disk_open(&d);
	check_profiles(d.db, id0, "replayed heads");
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	check_profiles(d.db, id0, "a block");
	disk_close(&d);
	disk_open(&d);
	check_profiles(d.db, id0, "a block after reopen");
	disk_fini(&d);
	/* Damage the 'X' part of block 1: profiles fail, merges do not. */
	disk_init(&d);
	SM_CHECK_EQ(write_one(d.db, NULL, 1500, "a;b=3@1,c=1"), 0);
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	{
		struct sm_kv *kv = ing_store_kv(d.store);
		struct sm_buf v = SM_BUF_INIT;
		struct sm_key k;

		ing_key_part(&k, "t", 1, 'X', 0);
		SM_REQUIRE(sm_kv_get(kv, SM_KV_BLOCKS, k.b, k.n, &v, &err) ==
		    0);
		v.b[v.len / 2 + 6] ^= 0x40;
		SM_REQUIRE(sm_kv_put(kv, SM_KV_BLOCKS, k.b, k.n, v.b, v.len,
		    &err) == 0);
		sm_buf_fini(&v);
	}
	check(profiles_text(d.db, 0, 60 * SEC, 0), "ERR -30997");
	check(span_collapsed(d.db, S1, 1, NULL, 0, 60 * SEC, NULL, 0),
	    "a;b 3\n");
	disk_fini(&d);
	/* A delta profile's upload may sum to 0 or below: its record is
	 * kept and read back from a block (the 'X' part stores the total's
	 * two's-complement bits; such blocks were refused before). */
	disk_init(&d);
	id0 = next_id;
	SM_CHECK_EQ(write_one(d.db, NULL, 1500, "a;b=3,c=-7"), 0);
	SM_CHECK_EQ(write_one(d.db, NULL, 2500, "a;b=4,c=-4"), 0);
	SM_REQUIRE(ing_db_flush(d.db, &err) == 0);
	disk_close(&d);
	disk_open(&d);
	{
		char want[160];

		snprintf(want, sizeof(want), "1500:-4:%llu:0|2500:0:%llu:0|[]",
		    (unsigned long long)id0, (unsigned long long)(id0 + 1));
		check(canon(profiles_text(d.db, 0, 60 * SEC, 0)), want);
	}
	disk_fini(&d);
}

SM_TEST_MAIN(
	{ "span merge: heads, replay, blocks, both", test_heads_replay_blocks },
	{ "span merge honours picks per series and bucket", test_picks },
	{ "malformed span triples are refused before the log", test_malformed_spans },
	{ "signed span samples: negative, cancelling, in blocks",
	    test_signed_spans },
	{ "a damaged spans part fails only span queries", test_damaged_spans_part },
	{ "head memory counts span records", test_head_bytes },
	{ "individual-profile records: heads, replay, blocks, limit, damage", test_profiles },
)
