/*
 * batch_test.c -- the write batch: series identity, pair folding, pruning
 * and encoding.
 */
#include "sm_test.h"

#include "distributor/batch.h"
#include "smolder/v1/rpc.pb-c.h"

static const struct sm_label base[] = {
	{ "__name__", "process_cpu" }, { "service_name", "app" },
};

/* Add the stack "a;b;...;leaf" (root first) to series idx. */
static void
add_stack(struct dist_batch *b, uint32_t idx, const char *stack, int64_t v)
{
	char buf[256];
	uint32_t node = 0, name;
	char *save = NULL, *tok;

	snprintf(buf, sizeof(buf), "%s", stack);
	for (tok = strtok_r(buf, ";", &save); tok != NULL;
	    tok = strtok_r(NULL, ";", &save)) {
		SM_REQUIRE(dist_batch_frame(b, tok, strlen(tok), &name) == 0);
		SM_REQUIRE(dist_batch_node(b, node, name, &node) == 0);
	}
	SM_REQUIRE(dist_batch_add(b, idx, node, v) == 0);
}

static void
test_series_identity(void)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	struct sm_label rev[] = { base[1], base[0] };
	struct sm_label bad[] = { { "__name__", "process_cpu" } };
	uint32_t i1, i2, i3, i4;

	dist_limits_default(&lim);
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	SM_CHECK_EQ(dist_batch_series(&b, base, 2, 1000, &i1, &err), 0);
	SM_CHECK_EQ(dist_batch_series(&b, rev, 2, 1000, &i2, &err), 0);
	SM_CHECK_EQ(i1, i2);   /* order of labels does not matter */
	SM_CHECK_EQ(dist_batch_series(&b, base, 2, 2000, &i3, &err), 0);
	SM_CHECK(i3 != i1);    /* the time is part of the identity */
	SM_CHECK_EQ(dist_batch_series(&b, bad, 1, 1000, &i4, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "service name is required") != NULL);
	SM_CHECK_STR(b.series[i1].labels[0].name, "__name__");
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

/* __session_id__ never splits a series (max_sessions_per_series = 0). */
static void
test_session_id_dropped(void)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	struct sm_label s1[] = { base[0], base[1], { "__session_id__", "1" } };
	struct sm_label s2[] = { { "__session_id__", "2" }, base[1], base[0] };
	uint32_t i0, i1, i2;

	dist_limits_default(&lim);
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	SM_CHECK_EQ(dist_batch_series(&b, base, 2, 0, &i0, &err), 0);
	SM_CHECK_EQ(dist_batch_series(&b, s1, 3, 0, &i1, &err), 0);
	SM_CHECK_EQ(dist_batch_series(&b, s2, 3, 0, &i2, &err), 0);
	SM_CHECK_EQ(i0, i1);
	SM_CHECK_EQ(i0, i2);
	SM_CHECK_EQ(b.nseries, 1);
	SM_CHECK_EQ(b.series[0].nlabels, 2);
	SM_CHECK(sm_labels_get(b.series[0].labels, b.series[0].nlabels,
	    "__session_id__") == NULL);
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

static void
test_finish_folds_and_drops(void)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	struct sm_label other[] = { { "__name__", "memory" },
		{ "service_name", "app" } };
	uint32_t s0, s1;

	dist_limits_default(&lim);
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	SM_REQUIRE(dist_batch_series(&b, base, 2, 0, &s0, &err) == 0);
	SM_REQUIRE(dist_batch_series(&b, other, 2, 0, &s1, &err) == 0);
	add_stack(&b, s0, "a;b", 3);
	add_stack(&b, s0, "a;c", 1);
	add_stack(&b, s0, "a;b", 2);     /* repeated stack: summed */
	add_stack(&b, s0, "d", 0);       /* zero: ignored */
	add_stack(&b, s0, "e", -5);      /* negative: kept (signed) */
	add_stack(&b, s0, "f", 4);       /* cancels out: no pair */
	add_stack(&b, s0, "f", -4);
	add_stack(&b, s1, "x", 0);       /* series left empty: dropped */
	SM_REQUIRE(dist_batch_finish(&b) == 0);
	SM_CHECK_EQ(b.nseries, 1);
	SM_CHECK_EQ(b.series[0].n, 3);
	SM_CHECK(b.series[0].node[0] < b.series[0].node[1]);
	SM_CHECK(b.series[0].node[1] < b.series[0].node[2]);
	SM_CHECK_EQ(dist_batch_series_total(&b, 0), 1);
	SM_CHECK_EQ(b.series[0].value[0] + b.series[0].value[1], 6);
	SM_CHECK_EQ(b.series[0].value[2], -5);
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

static void
test_symbol_truncation_keeps_tail(void)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	uint32_t id;

	dist_limits_default(&lim);
	lim.max_symbol_len = 4;
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	SM_REQUIRE(dist_batch_frame(&b, "abcdefgh", 8, &id) == 0);
	SM_CHECK_STR(sm_strtab_str(&b.strings, id, NULL), "efgh");
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

static void
test_encode_prunes_and_roundtrips(void)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	struct sm_buf out = SM_BUF_INIT;
	uint8_t id[16] = { 1, 2, 3 };
	Smolder__V1__Request *req;
	Smolder__V1__WriteRequest *w;
	uint32_t s0, name, unused;

	dist_limits_default(&lim);
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	b.meta.spy_name = "gospy";
	SM_REQUIRE(dist_batch_series(&b, base, 2, 12345, &s0, &err) == 0);
	add_stack(&b, s0, "main;work;leaf", 7);
	add_stack(&b, s0, "main;idle", 0);   /* node exists, no value */
	SM_REQUIRE(dist_batch_frame(&b, "orphan", 6, &name) == 0);
	SM_REQUIRE(dist_batch_node(&b, 0, name, &unused) == 0);
	SM_REQUIRE(dist_batch_finish(&b) == 0);
	SM_REQUIRE(dist_batch_encode(&b, "tenant-x", id, NULL, 0, 0,
	    &out) == 0);
	req = smolder__v1__request__unpack(NULL, out.len, (uint8_t *)out.b);
	SM_REQUIRE(req != NULL);
	SM_REQUIRE(req->method_case == SMOLDER__V1__REQUEST__METHOD_WRITE);
	w = req->write;
	SM_CHECK_STR(w->tenant, "tenant-x");
	SM_CHECK_EQ(w->profile_id.len, 16);
	SM_CHECK_EQ(w->profile_id.data[2], 3);
	/* Only main, work, leaf survive: "idle" and "orphan" are pruned. */
	SM_CHECK_EQ(w->tree->n_parent, 3);
	SM_CHECK_EQ(w->tree->n_strings, 4);   /* "" + 3 names */
	SM_CHECK_STR(w->tree->strings[0], "");
	for (size_t i = 0; i < w->tree->n_parent; i++)
		SM_CHECK(w->tree->parent[i] <= i);   /* parents first */
	SM_CHECK_EQ(w->n_series, 1);
	SM_CHECK_EQ(w->series[0]->time_ms, 12345);
	SM_CHECK_EQ(w->series[0]->n_node, 1);
	SM_CHECK_EQ(w->series[0]->node[0], 3);
	SM_CHECK_EQ(w->series[0]->value[0], 7);
	SM_CHECK_STR(w->series[0]->meta->spy_name, "gospy");
	SM_CHECK_STR(w->tree->strings[w->tree->name[2]], "leaf");
	/* The message the bytes were packed from (for a direct call,
	 * common/rpc.h): it packs to the same bytes, and a string the batch
	 * never set is "" as unpacking gives it, not NULL. */
	{
		struct sm_buf again = SM_BUF_INIT;
		Smolder__V1__Request *m = NULL;
		const Smolder__V1__SeriesMeta *mm;
		uint8_t *p2;
		size_t n2;

		SM_REQUIRE(dist_batch_encode_rep(&b, "tenant-x", id, NULL, 0, 0,
		    NULL, 0, &again, &m) == 0 && m != NULL);
		SM_CHECK(again.len == out.len &&
		    memcmp(again.b, out.b, out.len) == 0);
		n2 = protobuf_c_message_get_packed_size(&m->base);
		SM_REQUIRE((p2 = malloc(n2 + 1)) != NULL);
		SM_CHECK_EQ(protobuf_c_message_pack(&m->base, p2), n2);
		SM_CHECK(n2 == out.len && memcmp(p2, out.b, n2) == 0);
		free(p2);
		mm = m->write->series[0]->meta;
		SM_CHECK(mm->units != NULL && mm->aggregation != NULL);
		SM_CHECK_STR(mm->units, w->series[0]->meta->units);
		SM_CHECK_STR(mm->aggregation, w->series[0]->meta->aggregation);
		SM_CHECK_STR(mm->spy_name, "gospy");
		sm_buf_fini(&again);
	}
	smolder__v1__request__free_unpacked(req, NULL);
	sm_buf_fini(&out);
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

static void
test_budget_failure_is_clean(void)
{
	/* A tiny arena: the batch must fail with ENOMEM, not crash. */
	struct sm_arena *a = sm_arena_create(4096);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	uint32_t s0, node = 0, name;
	int rv = 0;

	dist_limits_default(&lim);
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	SM_REQUIRE(dist_batch_series(&b, base, 2, 0, &s0, &err) == 0);
	SM_REQUIRE(dist_batch_frame(&b, "f", 1, &name) == 0);
	SM_REQUIRE(dist_batch_node(&b, 0, name, &node) == 0);
	for (int i = 0; i < 100000 && rv == 0; i++)
		rv = dist_batch_add(&b, s0, node, 1);
	SM_CHECK_EQ(rv, SM_ENOMEM);
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

/* Frame names: NUL refused, invalid UTF-8 repaired, after truncation. */
static void
test_frame_names(void)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	uint32_t id, id2, len;
	const char *s;

	dist_limits_default(&lim);
	lim.max_symbol_len = 4;
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	SM_CHECK_EQ(dist_batch_frame(&b, "a\0b", 3, &id), SM_EMALFORMED);
	SM_CHECK_EQ(dist_batch_frame(&b, "x\xffy", 3, &id), 0);
	s = sm_strtab_str(&b.strings, id, &len);
	SM_CHECK(len == 5 && memcmp(s, "x\xef\xbf\xbdy", 5) == 0);
	/* The tail truncation cuts "\xc3\xa9" in two: the orphan
	 * continuation byte is replaced, so the name stays valid UTF-8. */
	SM_CHECK_EQ(dist_batch_frame(&b, "zz\xc3\xa9" "abc", 7, &id2), 0);
	s = sm_strtab_str(&b.strings, id2, &len);
	SM_CHECK(len == 6 && memcmp(s, "\xef\xbf\xbd" "abc", 6) == 0);
	/* A NUL cut off by the truncation does not matter. */
	SM_CHECK_EQ(dist_batch_frame(&b, "\0xabcd", 6, &id), 0);
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

SM_TEST_MAIN(
	{ "frame names: NUL refused, invalid UTF-8 replaced", test_frame_names },
	{ "series identity: labels in any order, time, validation", test_series_identity },
	{ "__session_id__ is dropped: one series across sessions", test_session_id_dropped },
	{ "finish sums repeats, keeps negatives, drops zero/empty", test_finish_folds_and_drops },
	{ "long symbols keep their tail", test_symbol_truncation_keeps_tail },
	{ "encode prunes unreachable nodes and round-trips", test_encode_prunes_and_roundtrips },
	{ "arena budget exhaustion fails cleanly", test_budget_failure_is_clean },
)
