/*
 * pprof_test.c -- tests for the pprof decoder (pprof.h).
 *
 * Synthetic profiles are built with the protobuf-c generated code and
 * packed with protobuf_c_message_pack; wire shapes protobuf-c never emits
 * (unpacked repeated scalars, unknown fields of every wire type, groups)
 * are attached as "unknown fields", which protobuf-c packs verbatim.
 * Results are checked as collapsed text ("root;...;leaf value" lines,
 * sorted) rebuilt from the finished batch's tree and string table, and as
 * formatted series label sets.
 *
 * Real profiles come from tests/data/ or ../shared/testdata/profiles/
 * (relative to the source root); a missing file skips the test.  The
 * expected collapsed hashes (FNV-1a 64 over the sorted collapsed text of
 * one sample type) were computed from `go tool pprof -symbolize=none -raw`
 * output, not from this decoder.
 */
#include "distributor/pprof.h"

#include "common/gz.h"
#include "google/v1/profile.pb-c.h"
#include "sm_test.h"
#define BATCH_RUN_IN struct dist_pprof_in
#define BATCH_RUN_INGEST dist_pprof_ingest
#include "sm_test_batch.h"

/* --- profile builder ------------------------------------------------------ */

#define TB_MAX 256

struct tb {
	struct sm_arena *a;
	Google__V1__Profile p;
	Google__V1__ValueType pt;
	char *str[4 * TB_MAX];
	Google__V1__ValueType *st[16];
	Google__V1__Mapping *map[TB_MAX];
	Google__V1__Location *loc[TB_MAX];
	Google__V1__Function *fn[TB_MAX];
	Google__V1__Sample *smp[4 * TB_MAX];
	uint64_t id_base, id_mult;   /* generated ids: base + k * mult + 1 */
};

static void *
tb_zalloc(struct tb *t, size_t n)
{
	void *p = sm_arena_calloc(t->a, 1, n);

	SM_REQUIRE(p != NULL);
	return (p);
}

static void
tb_init(struct tb *t)
{
	memset(t, 0, sizeof(*t));
	t->a = sm_arena_create(0);
	SM_REQUIRE(t->a != NULL);
	google__v1__profile__init(&t->p);
	t->str[0] = "";
	t->p.string_table = t->str;
	t->p.n_string_table = 1;
	t->p.sample_type = t->st;
	t->p.mapping = t->map;
	t->p.location = t->loc;
	t->p.function = t->fn;
	t->p.sample = t->smp;
	t->id_mult = 1;
}

static void
tb_fini(struct tb *t)
{
	sm_arena_destroy(t->a);
}

static int64_t
tb_str(struct tb *t, const char *s)
{
	for (size_t i = 0; i < t->p.n_string_table; i++) {
		if (strcmp(t->str[i], s) == 0)
			return ((int64_t)i);
	}
	SM_REQUIRE(t->p.n_string_table < SM_ARRAY_LEN(t->str));
	t->str[t->p.n_string_table] = sm_arena_strndup(t->a, s, strlen(s));
	return ((int64_t)t->p.n_string_table++);
}

static void
tb_type(struct tb *t, const char *type, const char *unit)
{
	Google__V1__ValueType *v = tb_zalloc(t, sizeof(*v));

	google__v1__value_type__init(v);
	v->type = tb_str(t, type);
	v->unit = tb_str(t, unit);
	SM_REQUIRE(t->p.n_sample_type < SM_ARRAY_LEN(t->st));
	t->st[t->p.n_sample_type++] = v;
}

static void
tb_period(struct tb *t, const char *type, const char *unit)
{
	google__v1__value_type__init(&t->pt);
	t->pt.type = tb_str(t, type);
	t->pt.unit = tb_str(t, unit);
	t->p.period_type = &t->pt;
	t->p.period = 10000000;
}

/* The usual CPU shape: samples/count, cpu/nanoseconds, period cpu/ns. */
static void
tb_cpu(struct tb *t)
{
	tb_type(t, "samples", "count");
	tb_type(t, "cpu", "nanoseconds");
	tb_period(t, "cpu", "nanoseconds");
}

static uint64_t
tb_next_id(struct tb *t, size_t k)
{
	return (t->id_base + (uint64_t)k * t->id_mult + 1);
}

static uint64_t
tb_func(struct tb *t, uint64_t id, const char *name, const char *sys,
    const char *file)
{
	Google__V1__Function *f = tb_zalloc(t, sizeof(*f));

	google__v1__function__init(f);
	f->id = id;
	f->name = tb_str(t, name);
	f->system_name = tb_str(t, sys);
	f->filename = tb_str(t, file);
	SM_REQUIRE(t->p.n_function < TB_MAX);
	t->fn[t->p.n_function++] = f;
	return (id);
}

static void
tb_mapping(struct tb *t, uint64_t id, const char *file)
{
	Google__V1__Mapping *m = tb_zalloc(t, sizeof(*m));

	google__v1__mapping__init(m);
	m->id = id;
	m->filename = tb_str(t, file);
	m->memory_start = 0x400000;
	m->memory_limit = 0x800000;
	SM_REQUIRE(t->p.n_mapping < TB_MAX);
	t->map[t->p.n_mapping++] = m;
}

/* A location; `fids` lists its lines' function ids, line[0] first. */
static Google__V1__Location *
tb_loc(struct tb *t, uint64_t id, uint64_t mapping, uint64_t addr,
    const uint64_t *fids, size_t nlines)
{
	Google__V1__Location *l = tb_zalloc(t, sizeof(*l));

	google__v1__location__init(l);
	l->id = id;
	l->mapping_id = mapping;
	l->address = addr;
	l->n_line = nlines;
	l->line = tb_zalloc(t, SM_MAX(nlines, 1) * sizeof(*l->line));
	for (size_t i = 0; i < nlines; i++) {
		l->line[i] = tb_zalloc(t, sizeof(*l->line[i]));
		google__v1__line__init(l->line[i]);
		l->line[i]->function_id = fids[i];
		l->line[i]->line = 10 + (int64_t)i;
	}
	SM_REQUIRE(t->p.n_location < TB_MAX);
	t->loc[t->p.n_location++] = l;
	return (l);
}

/* Location id of a one-line location for function `name` (made once). */
static uint64_t
tb_frame(struct tb *t, const char *name)
{
	int64_t s = tb_str(t, name);
	uint64_t fid = 0;

	for (size_t i = 0; i < t->p.n_function; i++) {
		if (t->fn[i]->name == s)
			fid = t->fn[i]->id;
	}
	if (fid == 0)
		fid = tb_func(t, tb_next_id(t, t->p.n_function), name, "",
		    "main.go");
	for (size_t i = 0; i < t->p.n_location; i++) {
		if (t->loc[i]->n_line == 1 &&
		    t->loc[i]->line[0]->function_id == fid)
			return (t->loc[i]->id);
	}
	return (tb_loc(t, tb_next_id(t, t->p.n_location), 0, 0x1000 +
	    t->p.n_location, &fid, 1)->id);
}

static Google__V1__Sample *
tb_sample_ids(struct tb *t, const uint64_t *locs, size_t nlocs,
    const int64_t *vals, size_t nvals)
{
	Google__V1__Sample *s = tb_zalloc(t, sizeof(*s));

	google__v1__sample__init(s);
	s->n_location_id = nlocs;
	s->location_id = tb_zalloc(t, SM_MAX(nlocs, 1) * sizeof(uint64_t));
	if (nlocs != 0)
		memcpy(s->location_id, locs, nlocs * sizeof(uint64_t));
	s->n_value = nvals;
	s->value = tb_zalloc(t, SM_MAX(nvals, 1) * sizeof(int64_t));
	if (nvals != 0)
		memcpy(s->value, vals, nvals * sizeof(int64_t));
	s->label = tb_zalloc(t, 16 * sizeof(*s->label));
	SM_REQUIRE(t->p.n_sample < SM_ARRAY_LEN(t->smp));
	t->smp[t->p.n_sample++] = s;
	return (s);
}

/*
 * A sample for "root;mid;leaf" (root first, one location per frame name)
 * with values v0 and, if the profile has two types, v1.
 */
static Google__V1__Sample *
tb_stack(struct tb *t, const char *stack, int64_t v0, int64_t v1)
{
	uint64_t ids[64];
	size_t n = 0;
	char buf[1024], *save = NULL, *tok;
	int64_t vals[2] = { v0, v1 };

	snprintf(buf, sizeof(buf), "%s", stack);
	for (tok = strtok_r(buf, ";", &save); tok != NULL;
	    tok = strtok_r(NULL, ";", &save)) {
		SM_REQUIRE(n < SM_ARRAY_LEN(ids));
		ids[n++] = tb_frame(t, tok);
	}
	/* location_id[0] is the leaf. */
	for (size_t i = 0; i < n / 2; i++) {
		uint64_t x = ids[i];

		ids[i] = ids[n - 1 - i];
		ids[n - 1 - i] = x;
	}
	return (tb_sample_ids(t, ids, n, vals, t->p.n_sample_type));
}

static Google__V1__Label *
tb_label(struct tb *t, Google__V1__Sample *s, const char *k, const char *v)
{
	Google__V1__Label *l = tb_zalloc(t, sizeof(*l));

	google__v1__label__init(l);
	l->key = tb_str(t, k);
	if (v != NULL)
		l->str = tb_str(t, v);
	SM_REQUIRE(s->n_label < 16);
	s->label[s->n_label++] = l;
	return (l);
}

static void
tb_numlabel(struct tb *t, Google__V1__Sample *s, const char *k, int64_t v)
{
	Google__V1__Label *l = tb_label(t, s, k, NULL);

	l->num = v;
	l->num_unit = tb_str(t, "bytes");
}

static uint8_t *
tb_pack(struct tb *t, size_t *len)
{
	size_t n = protobuf_c_message_get_packed_size(&t->p.base);
	uint8_t *out = sm_arena_alloc(t->a, SM_MAX(n, 1));

	SM_REQUIRE(out != NULL);
	SM_REQUIRE(protobuf_c_message_pack(&t->p.base, out) == n);
	*len = n;
	return (out);
}

/* --- unknown fields (raw wire shapes) -------------------------------------- */

static size_t
put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;

	do {
		p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v != 0);
	return (n);
}

static void
uf_add(struct tb *t, ProtobufCMessage *m, uint32_t tag, int wt,
    const uint8_t *data, size_t len)
{
	ProtobufCMessageUnknownField *u;

	if (m->n_unknown_fields == 0)
		m->unknown_fields = tb_zalloc(t, 32 * sizeof(*u));
	SM_REQUIRE(m->n_unknown_fields < 32);
	u = &m->unknown_fields[m->n_unknown_fields++];
	u->tag = tag;
	u->wire_type = (ProtobufCWireType)wt;
	u->len = len;
	u->data = tb_zalloc(t, SM_MAX(len, 1));
	memcpy(u->data, data, len);
}

static void
uf_varint(struct tb *t, ProtobufCMessage *m, uint32_t tag, uint64_t v)
{
	uint8_t b[10];

	uf_add(t, m, tag, 0, b, put_varint(b, v));
}

/* One field of every wire type, tags chosen unknown to profile.proto. */
static void
uf_all(struct tb *t, ProtobufCMessage *m)
{
	uint8_t b[64];
	size_t n;

	uf_varint(t, m, 100, UINT64_MAX);
	memset(b, 0xab, 8);
	uf_add(t, m, 101, 1, b, 8);
	n = put_varint(b, 5);
	memcpy(b + n, "hello", 5);
	uf_add(t, m, 102, 2, b, n + 5);
	uf_add(t, m, 103, 5, b, 4);
	/* A group holding a varint, a nested group and a string. */
	n = put_varint(b, 1u << 3 | 0);
	n += put_varint(b + n, 300);
	n += put_varint(b + n, 7u << 3 | 3);
	n += put_varint(b + n, 7u << 3 | 4);
	n += put_varint(b + n, 2u << 3 | 2);
	n += put_varint(b + n, 2);
	b[n++] = 'h';
	b[n++] = 'i';
	n += put_varint(b + n, 104u << 3 | 4);
	uf_add(t, m, 104, 3, b, n);
}

/* --- running the decoder ------------------------------------------------------ */

/* A run (sm_test_batch.h) from the Go spy. */
static void
run_init(struct run *r)
{
	run_open(r);
	r->in.spy_name = "gospy";
}

static int
run_tb(struct run *r, struct tb *t)
{
	size_t n;
	uint8_t *p = tb_pack(t, &n);

	return (run_go(r, p, n));
}

/* CHECK_RUN_FAILS on the profile t builds. */
#define CHECK_TB_FAILS(t, code, needle)                                     \
	do {                                                                \
		size_t tb_n_;                                               \
		uint8_t *tb_p_ = tb_pack((t), &tb_n_);                      \
									    \
		CHECK_RUN_FAILS(tb_p_, tb_n_, code, needle);                \
	} while (0)

/* --- reading the batch back -------------------------------------------------- */

/*
 * Collapsed text of the series whose __type__ is `type` (all of them when
 * type is NULL, or only series `only` when only >= 0): sorted lines
 * "root;...;leaf value\n", equal stacks summed.  Caller frees.
 */
struct series_sel {
	const char *type;
	int only;
};

static bool
series_selected(const struct dist_series *s, uint32_t k, const void *arg)
{
	const struct series_sel *sel = arg;
	const char *ty = sm_labels_get(s->labels, s->nlabels, SM_LABEL_TYPE);

	return (!((sel->only >= 0 && (uint32_t)sel->only != k) ||
	    (sel->type != NULL && (ty == NULL || strcmp(ty, sel->type) != 0))));
}

static char *
collapse(const struct dist_batch *b, const char *type, int only,
    size_t *nlines)
{
	struct series_sel sel = { type, only };

	return (batch_collapse(b, series_selected, &sel, true, nlines));
}

#define CHECK_COLLAPSED(b, type, want)                                      \
	do {                                                                \
		char *got_ = collapse((b), (type), -1, NULL);               \
		SM_CHECK_STR(got_, (want));                                 \
		free(got_);                                                 \
	} while (0)

static char *
series_labels(const struct dist_batch *b, uint32_t k)
{
	struct sm_buf buf = SM_BUF_INIT;
	char *s;

	sm_labels_format(b->series[k].labels, b->series[k].nlabels, &buf);
	SM_REQUIRE(sm_buf_error(&buf) == 0);
	s = sm_buf_take(&buf, NULL);
	sm_buf_fini(&buf);
	return (s);
}

/* Index of the series whose formatted label set is `want`, or -1. */
static int
find_series(const struct dist_batch *b, const char *want)
{
	int found = -1;

	for (uint32_t k = 0; k < b->nseries; k++) {
		char *s = series_labels(b, k);

		if (strcmp(s, want) == 0)
			found = (int)k;
		sm_free(s);
	}
	if (found < 0) {
		fprintf(stderr, "    no series %s; have:\n", want);
		for (uint32_t k = 0; k < b->nseries; k++) {
			char *s = series_labels(b, k);

			fprintf(stderr, "      %s\n", s);
			sm_free(s);
		}
	}
	return (found);
}

static int64_t
type_total(const struct dist_batch *b, const char *type)
{
	int64_t t = 0;

	for (uint32_t k = 0; k < b->nseries; k++) {
		const char *ty = sm_labels_get(b->series[k].labels,
		    b->series[k].nlabels, SM_LABEL_TYPE);

		if (ty != NULL && strcmp(ty, type) == 0)
			t += dist_batch_series_total(b, k);
	}
	return (t);
}

static uint64_t
fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s != '\0'; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ULL;
	}
	return (h);
}

#define CPU_LABELS(extra)                                                   \
	"{__name__=\"process_cpu\", __period_type__=\"cpu\", "              \
	"__period_unit__=\"nanoseconds\", "                                 \
	"__profile_type__=\"process_cpu:cpu:nanoseconds:cpu:nanoseconds\", "\
	"__type__=\"cpu\", __unit__=\"nanoseconds\"" extra "}"
#define SAMPLES_LABELS(extra)                                               \
	"{__name__=\"process_cpu\", __period_type__=\"cpu\", "              \
	"__period_unit__=\"nanoseconds\", "                                 \
	"__profile_type__=\"process_cpu:samples:count:cpu:nanoseconds\", "  \
	"__type__=\"samples\", __unit__=\"count\"" extra "}"

/* --- conversion ------------------------------------------------------------------ */

static void
test_basic(void)
{
	struct tb t;
	struct run r;

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;work;leaf", 2, 20);
	tb_stack(&t, "main;work", 1, 10);
	tb_stack(&t, "main;work;leaf", 3, 30);
	tb_stack(&t, "main;idle", 1, 10);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	SM_CHECK_EQ(r.b.nseries, 2);
	SM_CHECK(find_series(&r.b, CPU_LABELS(", service_name=\"app\"")) >= 0);
	SM_CHECK(find_series(&r.b,
	    SAMPLES_LABELS(", service_name=\"app\"")) >= 0);
	CHECK_COLLAPSED(&r.b, "samples",
	    "main;idle 1\nmain;work 1\nmain;work;leaf 5\n");
	CHECK_COLLAPSED(&r.b, "cpu",
	    "main;idle 10\nmain;work 10\nmain;work;leaf 50\n");
	SM_CHECK_EQ(r.b.series[0].time_ms, 1700000000000);
	run_fini(&r);
	tb_fini(&t);
}

/*
 * Two profiles into one batch (a multipart or Connect upload): the second
 * decode's walk must find the nodes the first made (it appends only what
 * it can prove new), and a later sm_tree_child user of the same batch
 * sees every node; the tree never holds two equal (parent, frame) nodes.
 */
static void
test_two_profiles_one_batch(void)
{
	struct tb t1, t2;
	struct run r;
	uint8_t *p;
	size_t n;
	uint32_t nd, work;

	tb_init(&t1);
	tb_cpu(&t1);
	tb_stack(&t1, "main;work;leaf", 2, 20);
	tb_stack(&t1, "main;idle", 1, 10);
	tb_init(&t2);
	tb_cpu(&t2);
	t2.id_base = 40;   /* other location ids for the same frames */
	tb_stack(&t2, "main;work;other", 4, 40);
	tb_stack(&t2, "main;work;leaf", 1, 10);
	tb_stack(&t2, "gc;work", 1, 10);
	run_init(&r);
	p = tb_pack(&t1, &n);
	SM_REQUIRE(dist_pprof_ingest(p, n, &r.in, &r.b, &r.err) == 0);
	p = tb_pack(&t2, &n);
	SM_REQUIRE(dist_pprof_ingest(p, n, &r.in, &r.b, &r.err) == 0);
	/* root, main, work, leaf, idle, other, gc, gc;work */
	SM_CHECK_EQ(sm_tree_size(&r.b.tree), 8);
	for (uint32_t i = 1; i < sm_tree_size(&r.b.tree); i++)
		for (uint32_t j = i + 1; j < sm_tree_size(&r.b.tree); j++)
			SM_CHECK(r.b.tree.parent[i] != r.b.tree.parent[j] ||
			    r.b.tree.name[i] != r.b.tree.name[j]);
	/* A lookup after the appends finds them (the index catches up). */
	SM_REQUIRE(sm_tree_find(&r.b.tree, 0, r.b.tree.name[1], &nd) == 0);
	SM_CHECK_EQ(nd, 1);
	SM_REQUIRE(dist_batch_node(&r.b, 1, r.b.tree.name[2], &work) == 0);
	SM_CHECK_EQ(work, 2);
	SM_CHECK_EQ(sm_tree_size(&r.b.tree), 8);
	SM_REQUIRE(dist_batch_finish(&r.b) == 0);
	CHECK_COLLAPSED(&r.b, "cpu", "gc;work 10\nmain;idle 10\n"
	    "main;work;leaf 30\nmain;work;other 40\n");
	run_fini(&r);
	tb_fini(&t1);
	tb_fini(&t2);
}

static void
test_inline_order(void)
{
	struct tb t;
	struct run r;
	uint64_t f[4], l1, l2;
	int64_t v[2] = { 1, 7 };

	tb_init(&t);
	tb_cpu(&t);
	f[0] = tb_func(&t, 11, "inlined_leaf", "", "a.go");
	f[1] = tb_func(&t, 12, "inlined_mid", "", "a.go");
	f[2] = tb_func(&t, 13, "caller", "", "a.go");
	f[3] = tb_func(&t, 14, "main", "", "a.go");
	/* line[0] is the innermost inlined callee, the last the caller. */
	l1 = tb_loc(&t, 5, 0, 0x10, f, 3)->id;
	l2 = tb_loc(&t, 6, 0, 0x20, &f[3], 1)->id;
	tb_sample_ids(&t, (uint64_t[]){ l1, l2 }, 2, v, 2);
	tb_sample_ids(&t, (uint64_t[]){ l1, l1, l2 }, 3, v, 2);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "cpu",
	    "main;caller;inlined_mid;inlined_leaf 7\n"
	    "main;caller;inlined_mid;inlined_leaf;caller;inlined_mid;"
	    "inlined_leaf 7\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_address_frames(void)
{
	struct tb t;
	struct run r;
	uint64_t la, lb, lc, ld, le, fm;
	int64_t v[2] = { 1, 1 };

	tb_init(&t);
	tb_cpu(&t);
	tb_mapping(&t, 1, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	tb_mapping(&t, 2, "");
	tb_mapping(&t, 3, "bare-binary");
	fm = tb_func(&t, 1, "main", "", "m.go");
	la = tb_loc(&t, 1, 1, 0x7f0012ab, NULL, 0)->id;
	lb = tb_loc(&t, 2, 0, 0xDEADBEEF, NULL, 0)->id;
	lc = tb_loc(&t, 3, 2, 0x10, NULL, 0)->id;
	ld = tb_loc(&t, 4, 3, 0, NULL, 0)->id;
	le = tb_loc(&t, 5, 99, 0xabc, NULL, 0)->id;   /* unknown mapping */
	tb_loc(&t, 6, 1, 0x400000, &fm, 1);
	tb_sample_ids(&t, (uint64_t[]){ la, 6 }, 2, v, 2);
	tb_sample_ids(&t, (uint64_t[]){ lb, 6 }, 2, v, 2);
	tb_sample_ids(&t, (uint64_t[]){ lc, 6 }, 2, v, 2);
	tb_sample_ids(&t, (uint64_t[]){ ld, 6 }, 2, v, 2);
	tb_sample_ids(&t, (uint64_t[]){ le, la, 6 }, 3, v, 2);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "cpu",
	    "main;0x0 [bare-binary] 1\n"
	    "main;0x10 1\n"
	    "main;0x7f0012ab [libc.so.6] 1\n"
	    "main;0x7f0012ab [libc.so.6];0xabc 1\n"
	    "main;0xdeadbeef 1\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_function_names(void)
{
	struct tb t;
	struct run r;
	uint64_t f[3];
	int64_t v[2] = { 1, 1 };

	tb_init(&t);
	tb_cpu(&t);
	f[0] = tb_func(&t, 1, "", "_ZN3foo3barEv", "f.cc");
	f[1] = tb_func(&t, 2, "", "", "f.cc");
	f[2] = tb_func(&t, 3, "root", "sys_root", "f.cc");
	tb_loc(&t, 1, 0, 1, &f[0], 1);
	tb_loc(&t, 2, 0, 2, &f[1], 1);
	tb_loc(&t, 3, 0, 3, &f[2], 1);
	tb_sample_ids(&t, (uint64_t[]){ 1, 2, 3 }, 3, v, 2);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	/* name, else system_name, else "" (kept as a frame). */
	CHECK_COLLAPSED(&r.b, "cpu", "root;;_ZN3foo3barEv 1\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_label_split(void)
{
	struct tb t;
	struct run r;
	Google__V1__Sample *s;
	int k;

	tb_init(&t);
	tb_cpu(&t);
	s = tb_stack(&t, "main;a", 1, 10);
	tb_label(&t, s, "foo", "x");
	s = tb_stack(&t, "main;b", 2, 20);
	tb_label(&t, s, "foo", "y");
	s = tb_stack(&t, "main;a", 4, 40);
	tb_label(&t, s, "foo", "x");
	tb_stack(&t, "main;c", 8, 80);
	/* Same set in another order, with a conflicting base label and a
	 * duplicate key (the first one wins). */
	s = tb_stack(&t, "main;d", 16, 160);
	tb_label(&t, s, "env", "staging");
	tb_label(&t, s, "foo", "x");
	tb_label(&t, s, "foo", "ignored");
	run_init(&r);
	r.base[1] = (struct sm_label){ "env", "prod" };
	r.in.nbase = 2;
	SM_REQUIRE(run_tb(&r, &t) == 0);
	SM_CHECK_EQ(r.b.nseries, 6);
	k = find_series(&r.b, CPU_LABELS(", env=\"prod\", foo=\"x\", "
	    "service_name=\"app\""));
	SM_REQUIRE(k >= 0);
	{
		char *c = collapse(&r.b, NULL, k, NULL);

		SM_CHECK_STR(c, "main;a 50\nmain;d 160\n");
		free(c);
	}
	k = find_series(&r.b, SAMPLES_LABELS(", env=\"prod\", foo=\"y\", "
	    "service_name=\"app\""));
	SM_REQUIRE(k >= 0);
	SM_CHECK_EQ(dist_batch_series_total(&r.b, (uint32_t)k), 2);
	k = find_series(&r.b, CPU_LABELS(", env=\"prod\", "
	    "service_name=\"app\""));
	SM_REQUIRE(k >= 0);
	SM_CHECK_EQ(dist_batch_series_total(&r.b, (uint32_t)k), 80);
	SM_CHECK_EQ(type_total(&r.b, "samples"), 31);
	SM_CHECK_EQ(type_total(&r.b, "cpu"), 310);
	run_fini(&r);
	tb_fini(&t);
}

static void
test_exemplar_labels(void)
{
	struct tb t;
	struct run r;
	Google__V1__Sample *s;
	char id[32];

	tb_init(&t);
	tb_cpu(&t);
	for (int i = 0; i < 6; i++) {
		s = tb_stack(&t, "main;a", 1, 10);
		snprintf(id, sizeof(id), "%016x", 0xabc0 + i);
		tb_label(&t, s, i % 3 == 0 ? "span_id" : i % 3 == 1 ?
		    "trace_id" : "profile_id", id);
		tb_numlabel(&t, s, "bytes", 100 + i);   /* ignored */
	}
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	SM_CHECK_EQ(r.b.nseries, 2);
	SM_CHECK(find_series(&r.b, CPU_LABELS(", service_name=\"app\"")) >= 0);
	CHECK_COLLAPSED(&r.b, "cpu", "main;a 60\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_values_dropped(void)
{
	struct tb t;
	struct run r;
	int64_t v[2] = { 5, 5 };

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;zero", 0, 10);
	tb_stack(&t, "main;neg", -3, 10);
	tb_stack(&t, "main;none", 0, -10);
	tb_stack(&t, "main;ok", 1, 10);
	tb_sample_ids(&t, NULL, 0, v, 2);   /* empty stack */
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	/* Zero values are dropped per type; negative ones are kept. */
	CHECK_COLLAPSED(&r.b, "samples", "main;neg -3\nmain;ok 1\n");
	CHECK_COLLAPSED(&r.b, "cpu",
	    "main;neg 10\nmain;none -10\nmain;ok 10\nmain;zero 10\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_depth_cap(void)
{
	struct tb t;
	struct run r;
	uint64_t f[3], l;
	int64_t v[2] = { 1, 1 };

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "a;b;c;d;e", 1, 1);
	tb_stack(&t, "a;b;c", 2, 2);
	tb_stack(&t, "a;b", 4, 4);
	f[0] = tb_func(&t, 100, "in0", "", "x.go");
	f[1] = tb_func(&t, 101, "in1", "", "x.go");
	f[2] = tb_func(&t, 102, "in2", "", "x.go");
	l = tb_loc(&t, 100, 0, 0x99, f, 3)->id;
	/* a;b then a 3-frame location crossing the cap. */
	tb_sample_ids(&t, (uint64_t[]){ l, tb_frame(&t, "b"),
	    tb_frame(&t, "a") }, 3, v, 2);
	run_init(&r);
	r.lim.max_depth = 3;
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "samples", "a;b 4\na;b;c 3\na;b;in2 1\n");
	run_fini(&r);
	run_init(&r);
	r.lim.max_depth = 0;   /* off */
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "samples",
	    "a;b 4\na;b;c 2\na;b;c;d;e 1\na;b;in2;in1;in0 1\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_symbol_truncation(void)
{
	struct tb t;
	struct run r;

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;github.com/x/y.(*T).VeryLongMethodName", 1, 1);
	run_init(&r);
	r.lim.max_symbol_len = 10;
	SM_REQUIRE(run_tb(&r, &t) == 0);
	/* Pyroscope keeps the tail of an over-long symbol. */
	CHECK_COLLAPSED(&r.b, "cpu", "main;MethodName 1\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_period_and_type_labels(void)
{
	struct tb t;
	struct run r;

	tb_init(&t);
	tb_type(&t, "alloc_space", "bytes");
	tb_stack(&t, "main;alloc", 100, 0);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);   /* no period_type */
	SM_CHECK(find_series(&r.b, "{__name__=\"memory\", "
	    "__period_type__=\"\", __period_unit__=\"\", "
	    "__profile_type__=\"memory:alloc_space:bytes::\", "
	    "__type__=\"alloc_space\", __unit__=\"bytes\", "
	    "service_name=\"app\"}") >= 0);
	run_fini(&r);
	run_init(&r);
	r.in.metric = "custom";
	SM_REQUIRE(run_tb(&r, &t) == 0);
	SM_CHECK(find_series(&r.b, "{__name__=\"custom\", "
	    "__period_type__=\"\", __period_unit__=\"\", "
	    "__profile_type__=\"custom:alloc_space:bytes::\", "
	    "__type__=\"alloc_space\", __unit__=\"bytes\", "
	    "service_name=\"app\"}") >= 0);
	run_fini(&r);
	tb_fini(&t);
}

/* Ids far apart use the sorted map; duplicates resolve to the first. */
static void
test_sparse_ids(void)
{
	struct tb t;
	struct run r;

	tb_init(&t);
	t.id_base = 1ull << 40;
	t.id_mult = 0x123456789ull;
	tb_cpu(&t);
	tb_stack(&t, "main;a;b", 1, 1);
	tb_stack(&t, "main;c", 2, 2);
	tb_stack(&t, "main;a;b", 4, 4);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "samples", "main;a;b 5\nmain;c 2\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_unknown_fields_skipped(void)
{
	struct tb t;
	struct run r;
	Google__V1__Sample *s;
	Google__V1__Label *l;

	tb_init(&t);
	tb_cpu(&t);
	tb_mapping(&t, 1, "/bin/app");
	s = tb_stack(&t, "main;a;b", 1, 10);
	l = tb_label(&t, s, "k", "v");
	tb_stack(&t, "main;c", 2, 20);
	uf_all(&t, &t.p.base);
	uf_all(&t, &t.st[0]->base);
	uf_all(&t, &t.pt.base);
	uf_all(&t, &s->base);
	uf_all(&t, &l->base);
	uf_all(&t, &t.map[0]->base);
	uf_all(&t, &t.loc[0]->base);
	uf_all(&t, &t.loc[0]->line[0]->base);
	uf_all(&t, &t.fn[1]->base);
	/* doc_url (15) and Line.column (3): known upstream, not in
	 * Pyroscope's copy. */
	t.p.doc_url = tb_str(&t, "https://example.com");
	t.loc[1]->line[0]->column = 7;
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	SM_CHECK_EQ(r.b.nseries, 4);
	CHECK_COLLAPSED(&r.b, "cpu", "main;a;b 10\nmain;c 20\n");
	SM_CHECK(find_series(&r.b, CPU_LABELS(", k=\"v\", "
	    "service_name=\"app\"")) >= 0);
	run_fini(&r);
	/* A known field with a foreign wire type (Function.name as fixed32)
	 * is refused, as Pyroscope's decoder refuses it. */
	uf_add(&t, &t.fn[0]->base, 2, 5, (const uint8_t *)"abcd", 4);
	run_init(&r);
	SM_CHECK(run_tb(&r, &t) == SM_EMALFORMED);
	SM_CHECK(strstr(r.err.msg, "wrong wire type") != NULL);
	run_fini(&r);
	tb_fini(&t);
}

static void
test_packed_unpacked(void)
{
	struct tb t;
	struct run r;
	Google__V1__Sample *s;
	uint64_t ids[3];

	tb_init(&t);
	tb_cpu(&t);
	ids[0] = tb_frame(&t, "leaf");
	ids[1] = tb_frame(&t, "mid");
	ids[2] = tb_frame(&t, "root");
	/* Packed (protobuf-c's proto3 default). */
	tb_sample_ids(&t, ids, 3, (int64_t[]){ 1, 10 }, 2);
	/* Unpacked: one varint field per element. */
	s = tb_sample_ids(&t, NULL, 0, NULL, 0);
	for (int i = 0; i < 3; i++)
		uf_varint(&t, &s->base, 1, ids[i]);
	uf_varint(&t, &s->base, 2, 2);
	uf_varint(&t, &s->base, 2, 20);
	/* Mixed: packed leaf, unpacked rest; values split likewise. */
	s = tb_sample_ids(&t, ids, 1, (int64_t[]){ 4 }, 1);
	uf_varint(&t, &s->base, 1, ids[1]);
	uf_varint(&t, &s->base, 1, ids[2]);
	uf_varint(&t, &s->base, 2, 40);
	/* Negative values are 10-byte varints, unpacked too (kept:
	 * values are signed). */
	s = tb_sample_ids(&t, ids, 3, NULL, 0);
	uf_varint(&t, &s->base, 2, (uint64_t)(int64_t)-5);
	uf_varint(&t, &s->base, 2, 80);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "samples", "root;mid;leaf 2\n");
	CHECK_COLLAPSED(&r.b, "cpu", "root;mid;leaf 150\n");
	run_fini(&r);
	tb_fini(&t);
}

/* --- naming ----------------------------------------------------------------------- */

struct metric_case {
	const char *types[6];
	const char *want;
};

static uint32_t
ntypes_of(const char *const *v)
{
	uint32_t n = 0;

	while (n < 6 && v[n] != NULL)
		n++;
	return (n);
}

static void
test_metric_naming(void)
{
	static const struct metric_case cases[] = {
		{ { "samples", "cpu" }, "process_cpu" },
		{ { "cpu" }, "process_cpu" },
		{ { "samples" }, "process_cpu" },          /* samples -> cpu */
		{ { "alloc_objects", "alloc_space", "inuse_objects",
		    "inuse_space" }, "memory" },
		{ { "inuse_objects", "inuse_space" }, "memory" },
		{ { "objects", "space" }, "memory" },
		{ { "total_alloc_space" }, "memory" },      /* substring */
		{ { "contentions", "delay" }, "mutex" },    /* mutex_count */
		{ { "delay" }, "mutex" },
		{ { "goroutine" }, "goroutines" },
		{ { "goroutines" }, "goroutines" },
		{ { "samples", "wall" }, "wall" },          /* wall first */
		{ { "sample", "wall" }, "wall" },
		{ { "exception", "alloc_samples" }, "memory" },  /* alloc_ */
		{ { "exception", "lock_count" }, "lock_count" },
		{ { "foo", "bar" }, "bar" },                /* the last one */
		{ { "block_count" }, "block" },
		{ { "mutex_duration" }, "mutex" },
		{ { "" }, "" },
		{ { NULL }, "" },
	};
	static const struct dist_st_config block[] = {
		{ "contentions", "block_count" },
		{ "delay", "block_duration" },
	};
	static const struct dist_st_config misc[] = {
		{ "goroutine", "goroutines" },
		{ "samples", "" },                /* empty: no display name */
		{ "x", "my_cpu_time" },
		{ "y", "weird" },
		{ "y", "later_wins" },
	};
	const char *t1[] = { "contentions", "delay" };
	const char *t2[] = { "goroutine" };
	const char *t3[] = { "samples" };
	const char *t4[] = { "x" };
	const char *t5[] = { "y" };

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		const char *got = dist_pprof_metric(cases[i].types,
		    ntypes_of(cases[i].types), NULL, 0);

		SM_CHECKF(strcmp(got, cases[i].want) == 0,
		    "case %zu: got \"%s\", want \"%s\"", i, got, cases[i].want);
	}
	SM_CHECK_STR(dist_pprof_metric(t1, 2, block, 2), "block");
	SM_CHECK_STR(dist_pprof_metric(t2, 1, misc, 5), "goroutines");
	/* A config replaces the defaults: samples is not cpu any more. */
	SM_CHECK_STR(dist_pprof_metric(t3, 1, misc, 5), "samples");
	SM_CHECK_STR(dist_pprof_metric(t3, 1, misc, 0), "samples");
	SM_CHECK_STR(dist_pprof_metric(t4, 1, misc, 5), "process_cpu");
	SM_CHECK_STR(dist_pprof_metric(t5, 1, misc, 5), "later_wins");
}

static void
test_display_names_ingest(void)
{
	static const struct dist_st_config cfg[] = {
		{ "contentions", "block_count" },
		{ "delay", "block_duration" },
	};
	struct tb t;
	struct run r;

	tb_init(&t);
	tb_type(&t, "contentions", "count");
	tb_type(&t, "delay", "nanoseconds");
	tb_period(&t, "contentions", "count");
	tb_stack(&t, "main;lock", 3, 3000);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	SM_CHECK(find_series(&r.b, "{__name__=\"mutex\", "
	    "__period_type__=\"contentions\", __period_unit__=\"count\", "
	    "__profile_type__=\"mutex:delay:nanoseconds:contentions:count\", "
	    "__type__=\"delay\", __unit__=\"nanoseconds\", "
	    "service_name=\"app\"}") >= 0);
	run_fini(&r);
	run_init(&r);
	r.in.st_config = cfg;
	r.in.nst_config = 2;
	SM_REQUIRE(run_tb(&r, &t) == 0);
	SM_CHECK(find_series(&r.b, "{__name__=\"block\", "
	    "__period_type__=\"contentions\", __period_unit__=\"count\", "
	    "__profile_type__=\"block:contentions:count:contentions:count\", "
	    "__type__=\"contentions\", __unit__=\"count\", "
	    "service_name=\"app\"}") >= 0);
	run_fini(&r);
	tb_fini(&t);
}

static void
test_scripting_rename(void)
{
	static const char *const spies[] = { "pyspy", "rbspy", "scripting" };
	struct tb t;
	struct run r;
	uint64_t f[2];
	int64_t v[1] = { 3 };

	tb_init(&t);
	tb_type(&t, "samples", "count");
	tb_period(&t, "", "milliseconds");
	f[0] = tb_func(&t, 1, "work", "", "app/main.py");
	f[1] = tb_func(&t, 2, "<module>", "", "main.py");
	tb_loc(&t, 1, 0, 0, &f[0], 1);
	tb_loc(&t, 2, 0, 0, &f[1], 1);
	tb_sample_ids(&t, (uint64_t[]){ 1, 2 }, 2, v, 1);
	for (size_t i = 0; i < SM_ARRAY_LEN(spies); i++) {
		run_init(&r);
		r.in.spy_name = spies[i];
		SM_REQUIRE(run_tb(&r, &t) == 0);
		CHECK_COLLAPSED(&r.b, "samples",
		    "main.py:-1 - <module>;app/main.py:-1 - work 3\n");
		SM_CHECK(find_series(&r.b, "{__name__=\"process_cpu\", "
		    "__period_type__=\"\", __period_unit__=\"milliseconds\", "
		    "__profile_type__=\"process_cpu:samples:count::"
		    "milliseconds\", __type__=\"samples\", "
		    "__unit__=\"count\", service_name=\"app\"}") >= 0);
		run_fini(&r);
	}
	run_init(&r);
	r.in.spy_name = "gospy";
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "samples", "<module>;work 3\n");
	run_fini(&r);
	tb_fini(&t);
}

/* A broken .NET profile: every function id is 0, and '-' in types. */
static void
build_dotnet(struct tb *t, bool equal_counts)
{
	int64_t v[2] = { 1000, 1 };

	tb_type(t, "cpu", "nanoseconds");
	tb_type(t, "alloc-samples", "count");
	tb_func(t, 0, "Main", "", "");
	tb_func(t, 0, "Worker", "", "");
	tb_func(t, 0, "Spin", "", "");
	/* Location i must get function i (its id), whatever its lines say. */
	tb_loc(t, 7, 0, 0, (uint64_t[]){ 7 }, 1);
	tb_loc(t, 8, 0, 0, (uint64_t[]){ 8 }, 1);
	if (equal_counts)
		tb_loc(t, 9, 0, 0, (uint64_t[]){ 9 }, 1);
	tb_sample_ids(t, (uint64_t[]){ 8, 7 }, 2, v, 2);
}

static void
test_dotnet_fix(void)
{
	struct tb t;
	struct run r;

	tb_init(&t);
	build_dotnet(&t, true);
	run_init(&r);
	SM_CHECK(run_tb(&r, &t) == SM_EMALFORMED);
	CHECK_FAIL(&r, SM_EMALFORMED, "function[0] has id 0");
	run_fini(&r);
	run_init(&r);
	r.in.spy_name = "dotnetspy";
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "cpu", "Main;Worker 1000\n");
	CHECK_COLLAPSED(&r.b, "alloc_samples", "Main;Worker 1\n");
	SM_CHECK(find_series(&r.b, "{__name__=\"process_cpu\", "
	    "__period_type__=\"\", __period_unit__=\"\", "
	    "__profile_type__=\"process_cpu:alloc_samples:count::\", "
	    "__type__=\"alloc_samples\", __unit__=\"count\", "
	    "service_name=\"app\"}") >= 0);
	run_fini(&r);
	tb_fini(&t);

	/* Unequal function and location counts: no fix, still id 0. */
	tb_init(&t);
	build_dotnet(&t, false);
	run_init(&r);
	r.in.spy_name = "dotnetspy";
	run_tb(&r, &t);
	CHECK_FAIL(&r, SM_EMALFORMED, "has id 0");
	run_fini(&r);
	tb_fini(&t);
}

/* --- validation: one test per malformed_profile check -------------------------- */

static void
test_bad_empty_profile(void)
{
	struct tb t;

	tb_init(&t);
	tb_stack(&t, "main", 0, 0);
	CHECK_TB_FAILS(&t, SM_EMALFORMED, "empty profile");
	CHECK_RUN_FAILS(NULL, 0, SM_EMALFORMED, "empty profile");
	tb_fini(&t);
}

static void
test_bad_location_id_zero(void)
{
	struct tb t;
	uint64_t f;

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;a", 1, 1);
	f = tb_func(&t, 50, "z", "", "");
	tb_loc(&t, 0, 0, 0, &f, 1);
	CHECK_TB_FAILS(&t, SM_EMALFORMED, "location[2] has id 0");
	tb_fini(&t);
}

static void
test_bad_function_id_zero(void)
{
	struct tb t;

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;a", 1, 1);
	tb_func(&t, 0, "z", "", "");
	CHECK_TB_FAILS(&t, SM_EMALFORMED, "function[2] has id 0");
	tb_fini(&t);
}

static void
test_bad_value_count(void)
{
	struct tb t;
	uint64_t l;

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;a", 1, 1);
	l = tb_frame(&t, "main");
	tb_sample_ids(&t, &l, 1, (int64_t[]){ 1, 2, 3 }, 3);
	CHECK_TB_FAILS(&t, SM_EMALFORMED,
	    "sample[1] has 3 values but the profile has 2 sample types");
	t.smp[1]->n_value = 1;
	CHECK_TB_FAILS(&t, SM_EMALFORMED, "sample[1] has 1 values");
	tb_fini(&t);
}

static void
test_bad_string_table_zero(void)
{
	struct tb t;

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;a", 1, 1);
	t.str[0] = "nonempty";
	CHECK_TB_FAILS(&t, SM_EMALFORMED, "string_table[0] must be \"\"");
	t.p.n_string_table = 0;
	CHECK_TB_FAILS(&t, SM_EMALFORMED, "string_table is empty");
	tb_fini(&t);
}

static void
test_bad_string_index(void)
{
	struct tb t;
	struct run r;
	Google__V1__Label *l;
	int64_t *fields[10];
	static const char *const what[10] = {
		"sample_type[1].type", "sample_type[0].unit",
		"sample[0].label[0].key", "sample[0].label[0].str",
		"function[0].name", "function[1].system_name",
		"function[0].filename", "mapping[0].filename",
		"mapping[0].build_id", "period_type.type",
	};
	static const int64_t bad[3] = { 1000, -1, INT64_MAX };

	tb_init(&t);
	tb_cpu(&t);
	tb_mapping(&t, 1, "/bin/x");
	l = tb_label(&t, tb_stack(&t, "main;a", 1, 1), "k", "v");
	fields[0] = &t.st[1]->type;
	fields[1] = &t.st[0]->unit;
	fields[2] = &l->key;
	fields[3] = &l->str;
	fields[4] = &t.fn[0]->name;
	fields[5] = &t.fn[1]->system_name;
	fields[6] = &t.fn[0]->filename;
	fields[7] = &t.map[0]->filename;
	fields[8] = &t.map[0]->build_id;
	fields[9] = &t.pt.type;
	for (size_t i = 0; i < SM_ARRAY_LEN(fields); i++) {
		for (size_t j = 0; j < SM_ARRAY_LEN(bad); j++) {
			int64_t saved = *fields[i];

			*fields[i] = bad[j];
			run_init(&r);
			run_tb(&r, &t);
			CHECK_FAIL(&r, SM_EMALFORMED, what[i]);
			CHECK_FAIL(&r, SM_EMALFORMED, "out of range");
			run_fini(&r);
			*fields[i] = saved;
		}
	}
	run_init(&r);
	SM_CHECK(run_tb(&r, &t) == 0);   /* restored: valid again */
	run_fini(&r);
	tb_fini(&t);
}

static void
test_bad_unknown_location(void)
{
	struct tb t;
	int64_t v[2] = { 1, 1 };

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;a", 1, 1);
	tb_sample_ids(&t, (uint64_t[]){ 1, 77 }, 2, v, 2);
	CHECK_TB_FAILS(&t, SM_EMALFORMED,
	    "sample[1] references unknown location id 77");
	t.smp[1]->location_id[1] = 0;
	CHECK_TB_FAILS(&t, SM_EMALFORMED, "unknown location id 0");
	tb_fini(&t);
}

static void
test_bad_unknown_function(void)
{
	struct tb t;

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;a", 1, 1);
	tb_loc(&t, 40, 0, 0, (uint64_t[]){ 1, 99 }, 2);
	CHECK_TB_FAILS(&t, SM_EMALFORMED,
	    "location[2] (id 40) line[1] references unknown function id 99");
	tb_fini(&t);
}

static void
test_bad_sample_type_dash(void)
{
	struct tb t;

	tb_init(&t);
	tb_type(&t, "alloc-space", "bytes");
	tb_stack(&t, "main;a", 1, 0);
	CHECK_TB_FAILS(&t, SM_EMALFORMED,
	    "sample_type[0] \"alloc-space\" contains '-'");
	tb_fini(&t);
}

static void
test_bad_utf8(void)
{
	static const char *const bad[] = {
		"\xff", "ok\xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80",
	};
	struct tb t;
	struct run r;

	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++) {
		tb_init(&t);
		tb_cpu(&t);
		tb_stack(&t, "main;a", 1, 1);
		tb_str(&t, bad[i]);   /* unused by any sample: still checked */
		CHECK_TB_FAILS(&t, SM_EMALFORMED, "is not valid UTF-8");
		tb_fini(&t);
	}
	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;caf\xc3\xa9;\xe2\x82\xac;\xf0\x9f\x94\xa5", 1, 1);
	run_init(&r);
	SM_REQUIRE(run_tb(&r, &t) == 0);
	CHECK_COLLAPSED(&r.b, "samples",
	    "main;caf\xc3\xa9;\xe2\x82\xac;\xf0\x9f\x94\xa5 1\n");
	run_fini(&r);
	tb_fini(&t);
}

static void
test_samples_limit(void)
{
	struct tb t;
	struct run r;

	tb_init(&t);
	tb_cpu(&t);
	for (int i = 0; i < 3; i++)
		tb_stack(&t, "main;a", 1, 1);
	run_init(&r);
	r.lim.max_samples = 2;
	run_tb(&r, &t);
	CHECK_FAIL(&r, SM_ELIMIT, "the profile with labels "
	    "'{service_name=\"app\"}' exceeds the samples count limit "
	    "(max_profile_stacktrace_samples, actual: 3, limit: 2)");
	run_fini(&r);
	run_init(&r);
	r.lim.max_samples = 3;
	SM_CHECK(run_tb(&r, &t) == 0);
	run_fini(&r);
	run_init(&r);
	r.lim.max_samples = 0;
	SM_CHECK(run_tb(&r, &t) == 0);
	run_fini(&r);
	tb_fini(&t);
}

static void
test_sample_labels_limit(void)
{
	struct tb t;
	struct run r;
	Google__V1__Sample *s;

	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;a", 1, 1);
	s = tb_stack(&t, "main;b", 1, 1);
	tb_label(&t, s, "a", "1");
	tb_label(&t, s, "span_id", "1234");     /* counted too */
	tb_numlabel(&t, s, "bytes", 12);        /* and this */
	run_init(&r);
	r.lim.max_sample_labels = 2;
	run_tb(&r, &t);
	CHECK_FAIL(&r, SM_EMALFORMED, "sample[1] has 3 labels, more than "
	    "the limit of 2");
	run_fini(&r);
	run_init(&r);
	r.lim.max_sample_labels = 3;
	SM_CHECK(run_tb(&r, &t) == 0);
	run_fini(&r);
	tb_fini(&t);
}

static void
test_bad_wire(void)
{
	struct tb t;
	uint8_t *p, *q;
	size_t n;
	static const struct {
		uint8_t b[12];
		size_t n;
		const char *msg;
	} raw[] = {
		{ { 0x0f }, 1, "invalid wire type" },          /* field 1, wt 7 */
		{ { 0x00 }, 1, "invalid field number" },
		{ { 0x0a, 0x05, 0x08 }, 3, "runs past its message" },
		{ { 0x48, 0x80 }, 2, "truncated varint" },
		{ { 0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		    0x7f }, 11, "overflows 64 bits" },
		/* field 16 is unknown, so any wire type is skipped... */
		{ { 0x85, 0x01, 0x01, 0x02 }, 4, "truncated fixed-width" },
		{ { 0x83, 0x01, 0x08, 0x01 }, 4, "unterminated group" },
		{ { 0x83, 0x01, 0x54 }, 3, "mismatched end group" },
		{ { 0x84, 0x01 }, 2, "unexpected end group" },
		/* ...but a known one must have its declared wire type:
		 * Sample (2) as a varint, time_nanos (9) as fixed32. */
		{ { 0x10, 0x05 }, 2, "wrong wire type" },
		{ { 0x4d, 0x01, 0x02, 0x03, 0x04 }, 5, "wrong wire type" },
		/* sample_type whose ValueType is cut in a varint */
		{ { 0x0a, 0x02, 0x08, 0x80, 0x32, 0x00 }, 6,
		    "sample_type[0]: truncated" },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(raw); i++) {
		CHECK_RUN_FAILS(raw[i].b, raw[i].n, SM_EMALFORMED, raw[i].msg);
	}
	/* A valid profile cut anywhere inside a field is malformed. */
	tb_init(&t);
	tb_cpu(&t);
	tb_stack(&t, "main;a", 1, 1);
	p = tb_pack(&t, &n);
	CHECK_RUN_FAILS(p, n - 1, SM_EMALFORMED,
	    "malformed profile: Profile: ");
	/* Corrupt a nested message: a location whose line is cut. */
	q = malloc(n + 16);
	SM_REQUIRE(q != NULL);
	{
		Google__V1__Location *l = t.loc[0];
		size_t ln = protobuf_c_message_get_packed_size(&l->base);
		uint8_t *lb = malloc(ln), *o = q;

		SM_REQUIRE(lb != NULL);
		protobuf_c_message_pack(&l->base, lb);
		/* Profile header: sample_type etc. from the valid pack, then
		 * a location with a truncated last byte of its line. */
		memcpy(o, p, n);
		o += n;
		*o++ = 0x22;                   /* field 4, wt 2 */
		*o++ = (uint8_t)(ln - 1);
		memcpy(o, lb, ln - 1);
		o += ln - 1;
		CHECK_RUN_FAILS(q, (size_t)(o - q), SM_EMALFORMED,
		    "location[2]");
		free(lb);
	}
	free(q);
	tb_fini(&t);
}

/* --- real profiles ---------------------------------------------------------- */

/*
 * Load a test profile (gunzipped when it starts with 1f 8b) into arena
 * memory.  NULL when the file is in neither data directory.
 */
static uint8_t *
load_profile(struct sm_arena *a, const char *name, size_t *n)
{
	static const char *const dirs[] = { "tests/data",
	    "../shared/testdata/profiles" };
	char path[1024];
	unsigned char *raw = NULL;
	size_t len = 0;
	uint8_t *out;
	struct sm_err err;

	for (size_t i = 0; i < SM_ARRAY_LEN(dirs) && raw == NULL; i++) {
		char rel[512];

		snprintf(rel, sizeof(rel), "%s/%s", dirs[i], name);
		raw = sm_test_read_file(sm_test_path(path, sizeof(path), rel),
		    &len);
	}
	if (raw == NULL)
		return (NULL);
	if (sm_is_gzip(raw, len)) {
		SM_REQUIRE(sm_gunzip(raw, len, 64u << 20, a, &out, n,
		    &err) == 0);
	} else {
		out = sm_arena_alloc(a, SM_MAX(len, 1));
		SM_REQUIRE(out != NULL);
		memcpy(out, raw, len);
		*n = len;
	}
	free(raw);
	return (out);
}

#define LOAD_OR_SKIP(a, name, np, p)                                        \
	do {                                                                \
		(p) = load_profile((a), (name), (np));                      \
		if ((p) == NULL) {                                          \
			sm_arena_destroy(a);                                \
			SM_SKIP_CORPUS("test data %s not found in tests/data/ or " \
			    "../shared/testdata/profiles/", (name));        \
		}                                                           \
	} while (0)

struct type_want {
	const char *type;
	int64_t total;
	size_t nlines;       /* 0: not checked */
	uint64_t fnv;        /* 0: not checked */
};

static void
check_file(const char *name, const char *spy, const struct type_want *w,
    size_t nw, uint32_t nseries)
{
	struct sm_arena *fa = sm_arena_create(0);
	struct run r;
	uint8_t *p;
	size_t n;

	SM_REQUIRE(fa != NULL);
	LOAD_OR_SKIP(fa, name, &n, p);
	run_init(&r);
	r.lim.max_samples = 0;   /* pprof__large.cpu has 20430 samples */
	if (spy != NULL)
		r.in.spy_name = spy;
	SM_CHECKF(run_go(&r, p, n) == 0, "%s: %s", name, r.err.msg);
	if (r.rv == 0) {
		SM_CHECK_EQ(r.b.nseries, nseries);
		for (size_t i = 0; i < nw; i++) {
			size_t nl;
			char *c = collapse(&r.b, w[i].type, -1, &nl);

			SM_CHECKF(type_total(&r.b, w[i].type) == w[i].total,
			    "%s %s: total %lld, want %lld", name, w[i].type,
			    (long long)type_total(&r.b, w[i].type),
			    (long long)w[i].total);
			if (w[i].nlines != 0)
				SM_CHECKF(nl == w[i].nlines, "%s %s: %zu "
				    "stacks, want %zu", name, w[i].type, nl,
				    w[i].nlines);
			if (w[i].fnv != 0)
				SM_CHECKF(fnv1a(c) == w[i].fnv, "%s %s: "
				    "collapsed hash %016llx, want %016llx",
				    name, w[i].type,
				    (unsigned long long)fnv1a(c),
				    (unsigned long long)w[i].fnv);
			free(c);
		}
	}
	run_fini(&r);
	sm_arena_destroy(fa);
}

static void
test_file_pprof_sample_cpu(void)
{
	struct sm_arena *fa = sm_arena_create(0);
	struct run r;
	uint8_t *p;
	size_t n;

	SM_REQUIRE(fa != NULL);
	LOAD_OR_SKIP(fa, "pprof__sample.cpu", &n, p);
	run_init(&r);
	SM_REQUIRE(run_go(&r, p, n) == 0);
	/* Expected text: go tool pprof -raw, inline frames expanded. */
	CHECK_COLLAPSED(&r.b, "samples",
	    "runtime.main;main.main;main.busyLoop 15\n"
	    "runtime.main;main.main;main.busyLoop;math.Abs 11\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapassign_fast64 4\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapassign_fast64;"
	    "runtime.growWork;runtime.evacuate 6\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapassign_fast64;"
	    "runtime.growWork;runtime.evacuate;runtime.typedmemmove;"
	    "runtime.memmove 1\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapassign_fast64;"
	    "runtime.tooManyOverflowBuckets 1\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapassign_fast64;"
	    "runtime.typedmemmove;runtime.memmove 1\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapiternext 128\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapiternext;"
	    "runtime.(*bmap).overflow 3\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapiternext;"
	    "runtime.(*bmap).overflow;runtime.add 1\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapiternext;"
	    "runtime.(*hmap).growing 2\n"
	    "runtime.main;main.main;main.busyLoop;runtime.mapiternext;"
	    "runtime.add 3\n");
	{
		char *c = collapse(&r.b, "cpu", -1, NULL);

		SM_CHECK(fnv1a(c) == 0x391d8c07bdaf9f8eULL);
		free(c);
	}
	run_fini(&r);
	sm_arena_destroy(fa);
}

static void
test_file_pyroscope_cpu(void)
{
	static const struct type_want w[] = {
		{ "samples", 47, 0, 0 },
		{ "cpu", 470000000, 0, 0 },
	};

	check_file("pyroscope__cpu.pb.gz", NULL, w, 2, 2);
}

static void
test_file_pprof_large(void)
{
	static const struct type_want w[] = {
		{ "samples", 24029, 20362, 0x3472102d46a8f8a4ULL },
		{ "cpu", 240290000000, 20362, 0x59f47d37cef3cb96ULL },
	};

	check_file("pprof__large.cpu", NULL, w, 2, 2);
}

static void
test_file_parca_alloc_objects(void)
{
	static const struct type_want w[] = {
		{ "alloc_objects", 310797348, 2138, 0x3e7d11d1e1e34d4eULL },
		{ "alloc_space", 116044559690, 2138, 0x5e3305da73f609d1ULL },
		{ "inuse_objects", 74172, 20, 0xf39f4d32d1f21f95ULL },
		{ "inuse_space", 14730706, 20, 0x04e6fd1a115aa372ULL },
	};

	check_file("parca__alloc_objects.pb.gz", NULL, w, 4, 4);
}

static void
test_file_cppbench_addresses(void)
{
	static const struct type_want w[] = {
		{ "cpu", 7120000000, 50, 0xb70526a821de0622ULL },
	};

	check_file("pprof__cppbench.cpu_no_samples_type", NULL, w, 1, 1);
}

static void
test_file_pyroscope_heap(void)
{
	static const struct type_want w[] = {
		{ "alloc_objects", 196607841, 370, 0x711917b9c96e1e91ULL },
		{ "alloc_space", 13434386318, 370, 0x5e8c678d607c0e76ULL },
		{ "inuse_objects", 22156072, 63, 0x36dbe605c6437bc0ULL },
		{ "inuse_space", 1602645059, 63, 0x3d3b426868ad7519ULL },
	};

	/* The same profile raw and gzipped. */
	check_file("pyroscope__heap.pb.gz", NULL, w, 4, 4);
	check_file("pyroscope__heap.pb", NULL, w, 4, 4);
}

static void
test_file_go_cpu_labels(void)
{
	struct sm_arena *fa = sm_arena_create(0);
	struct run r;
	uint8_t *p;
	size_t n;
	static const struct {
		const char *extra;
		int64_t samples;
	} want[] = {
		{ ", foo=\"bar\", function=\"slow\", service_name=\"app\"", 674 },
		{ ", foo=\"bar\", function=\"fast\", service_name=\"app\"", 150 },
		{ ", foo=\"bar\", service_name=\"app\"", 49 },
	};
	char buf[512];

	SM_REQUIRE(fa != NULL);
	LOAD_OR_SKIP(fa, "pyroscope__go.cpu.labels.pprof", &n, p);
	run_init(&r);
	SM_REQUIRE(run_go(&r, p, n) == 0);
	/* profile_id labels do not split: 3 label sets x 2 types. */
	SM_CHECK_EQ(r.b.nseries, 6);
	for (size_t i = 0; i < SM_ARRAY_LEN(want); i++) {
		int k;

		snprintf(buf, sizeof(buf), SAMPLES_LABELS("%s"), want[i].extra);
		k = find_series(&r.b, buf);
		SM_CHECK(k >= 0);
		if (k >= 0)
			SM_CHECK_EQ(dist_batch_series_total(&r.b, (uint32_t)k),
			    want[i].samples);
		snprintf(buf, sizeof(buf), CPU_LABELS("%s"), want[i].extra);
		k = find_series(&r.b, buf);
		SM_CHECK(k >= 0);
		if (k >= 0)
			SM_CHECK_EQ(dist_batch_series_total(&r.b, (uint32_t)k),
			    want[i].samples * 10000000);
	}
	SM_CHECK_EQ(type_total(&r.b, "samples"), 873);
	SM_CHECK_EQ(type_total(&r.b, "cpu"), 8730000000);
	run_fini(&r);
	sm_arena_destroy(fa);
}

static void
test_file_invalid_utf8(void)
{
	struct sm_arena *fa = sm_arena_create(0);
	uint8_t *p;
	size_t n;

	SM_REQUIRE(fa != NULL);
	LOAD_OR_SKIP(fa, "pyroscope__invalid_utf8.pb.gz", &n, p);
	CHECK_RUN_FAILS(p, n, SM_EMALFORMED, "is not valid UTF-8");
	sm_arena_destroy(fa);
}

static void
test_file_dotnet(void)
{
	struct sm_arena *fa = sm_arena_create(0);
	struct run r;
	uint8_t *p;
	size_t n;

	SM_REQUIRE(fa != NULL);
	LOAD_OR_SKIP(fa, "pyroscope__dotnet-pprof-3.pb.gz", &n, p);
	SM_CHECK(!sm_is_gzip(p, n));   /* raw despite its name */
	CHECK_RUN_FAILS(p, n, SM_EMALFORMED, "function[0] has id 0");
	run_init(&r);
	r.in.spy_name = "dotnetspy";
	SM_REQUIRE(run_go(&r, p, n) == 0);
	/* Only cpu has non-zero values; the other five types are empty. */
	SM_CHECK_EQ(r.b.nseries, 1);
	SM_CHECK(find_series(&r.b, "{__name__=\"process_cpu\", "
	    "__period_type__=\"\", __period_unit__=\"nanoseconds\", "
	    "__profile_type__=\"process_cpu:cpu:nanoseconds::nanoseconds\", "
	    "__type__=\"cpu\", __unit__=\"nanoseconds\", "
	    "service_name=\"app\"}") >= 0);
	SM_CHECK_EQ(type_total(&r.b, "cpu"), 5653000000);
	run_fini(&r);
	sm_arena_destroy(fa);
}

static void
test_file_parca_normalizer(void)
{
	struct sm_arena *fa = sm_arena_create(0);
	struct run r;
	uint8_t *p;
	size_t n;
	char first[SM_ERR_MSG_MAX];

	SM_REQUIRE(fa != NULL);
	LOAD_OR_SKIP(fa, "parca__normalizer__profile.pb.gz", &n, p);
	/* Sample type "" gives metric "": the series labels are invalid. */
	for (int i = 0; i < 2; i++) {
		run_init(&r);
		run_go(&r, p, n);
		CHECK_FAIL(&r, SM_EINVAL, "invalid metric name ''");
		if (i == 0)
			snprintf(first, sizeof(first), "%s", r.err.msg);
		else
			SM_CHECK_STR(r.err.msg, first);
		run_fini(&r);
	}
	/* With a metric override the profile goes through. */
	run_init(&r);
	r.in.metric = "goroutines";
	SM_REQUIRE(run_go(&r, p, n) == 0);
	SM_CHECK_EQ(type_total(&r.b, ""), 53);
	run_fini(&r);
	sm_arena_destroy(fa);
}

static void
test_file_pyspy(void)
{
	struct sm_arena *fa = sm_arena_create(0);
	struct run r;
	uint8_t *p;
	size_t n;
	char *c;

	SM_REQUIRE(fa != NULL);
	LOAD_OR_SKIP(fa, "pyroscope__pyspy-1.pb.gz", &n, p);
	run_init(&r);
	r.in.spy_name = "pyspy";
	SM_REQUIRE(run_go(&r, p, n) == 0);
	SM_CHECK_EQ(type_total(&r.b, "samples"), 781);
	c = collapse(&r.b, "samples", -1, NULL);
	SM_CHECKF(strstr(c, "main.py:-1 - <module>;main.py:-1 - "
	    "fast_function;main.py:-1 - work 143\n") != NULL, "%s", c);
	free(c);
	SM_CHECK(find_series(&r.b, "{__name__=\"process_cpu\", "
	    "__period_type__=\"\", __period_unit__=\"milliseconds\", "
	    "__profile_type__=\"process_cpu:samples:count::milliseconds\", "
	    "__type__=\"samples\", __unit__=\"count\", "
	    "function=\"fast\", service_name=\"app\"}") >= 0);
	run_fini(&r);
	sm_arena_destroy(fa);
}

static void
test_file_block_config(void)
{
	static const struct dist_st_config cfg[] = {
		{ "contentions", "block_count" },
		{ "delay", "block_duration" },
	};
	struct sm_arena *fa = sm_arena_create(0);
	struct run r;
	uint8_t *p;
	size_t n;

	SM_REQUIRE(fa != NULL);
	LOAD_OR_SKIP(fa, "pyroscope__req_3.pprof", &n, p);
	run_init(&r);
	r.in.st_config = cfg;   /* pyroscope__req_3.st.json */
	r.in.nst_config = 2;
	SM_REQUIRE(run_go(&r, p, n) == 0);
	SM_CHECK_STR(sm_labels_get(r.b.series[0].labels,
	    r.b.series[0].nlabels, SM_LABEL_NAME), "block");
	SM_CHECK_EQ(type_total(&r.b, "contentions"), 43);
	SM_CHECK_EQ(type_total(&r.b, "delay"), 22674240703);
	run_fini(&r);
	sm_arena_destroy(fa);
}

static void
test_file_legacy_rejected(void)
{
	static const char *const files[] = { "pprof__gobench.cpu",
	    "pprof__java.cpu" };

	for (size_t i = 0; i < SM_ARRAY_LEN(files); i++) {
		struct sm_arena *fa = sm_arena_create(0);
		uint8_t *p;
		size_t n;

		SM_REQUIRE(fa != NULL);
		LOAD_OR_SKIP(fa, files[i], &n, p);
		CHECK_RUN_FAILS(p, n, SM_EMALFORMED, "malformed profile");
		sm_arena_destroy(fa);
	}
}

/* --- robustness ----------------------------------------------------------------- */

static uint64_t
xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (*s);
}

/* One decode of untrusted bytes: any outcome but a crash is fine, as long
 * as failures are reported with an error code and a message. */
static int
fuzz_one(const uint8_t *p, size_t n, size_t budget)
{
	struct sm_arena *a = sm_arena_create(budget);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	struct sm_label base[1] = { { "service_name", "app" } };
	struct dist_pprof_in in = { base, 1, "gospy", NULL, 0, NULL, 1 };
	int rv;

	SM_REQUIRE(a != NULL);
	dist_limits_default(&lim);
	lim.max_samples = 0;
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	sm_err_clear(&err);
	rv = dist_pprof_ingest(p, n, &in, &b, &err);
	SM_CHECKF(rv == 0 || rv == SM_EMALFORMED || rv == SM_EINVAL ||
	    rv == SM_ENOMEM || rv == SM_ELIMIT, "rv %d", rv);
	if (rv != 0)
		SM_CHECKF(err.code == rv && err.msg[0] != '\0', "rv %d: '%s'",
		    rv, err.msg);
	if (rv == 0)
		SM_CHECK(dist_batch_finish(&b) == 0);
	dist_batch_fini(&b);
	sm_arena_destroy(a);
	return (rv);
}

static void
fuzz_bytes(const char *what, const uint8_t *p, size_t n, size_t ntrunc,
    int nmut, uint64_t seed)
{
	uint8_t *m = malloc(SM_MAX(n, 1));
	size_t step = n <= ntrunc ? 1 : n / ntrunc;
	int ok = 0, bad = 0;

	SM_REQUIRE(m != NULL);
	SM_CHECKF(fuzz_one(p, n, 0) == 0, "%s does not decode", what);
	for (size_t len = 0; len < n; len += step) {
		if (fuzz_one(p, len, 0) == 0)
			ok++;
		else
			bad++;
	}
	/* The last bytes matter most: cut every one of the final 64. */
	for (size_t len = n > 64 ? n - 64 : 0; len < n; len++)
		(void)fuzz_one(p, len, 0);
	for (int i = 0; i < nmut && n != 0; i++) {
		size_t pos = xorshift(&seed) % n;
		int k = (int)(xorshift(&seed) % 4);

		memcpy(m, p, n);
		if (k == 0)
			m[pos] = (uint8_t)xorshift(&seed);
		else if (k == 1)
			m[pos] ^= (uint8_t)(1u << (xorshift(&seed) % 8));
		else if (k == 2)
			m[pos] = 0xff;
		else
			m[pos] = (uint8_t)(m[pos] + 1);
		if (fuzz_one(m, n, 0) == 0)
			ok++;
		else
			bad++;
	}
	printf("    %s: %zu bytes, %d decoded, %d rejected\n", what, n, ok,
	    bad);
	free(m);
}

/* A small profile using every feature: labels, inline, addresses. */
static uint8_t *
rich_profile(struct tb *t, size_t *n)
{
	Google__V1__Sample *s;
	uint64_t f[3];

	tb_init(t);
	tb_cpu(t);
	tb_mapping(t, 1, "/lib/libfoo.so");
	f[0] = tb_func(t, 900, "inl", "", "i.go");
	f[1] = tb_func(t, 901, "outer", "", "i.go");
	tb_loc(t, 900, 1, 0x1234, f, 2);
	tb_loc(t, 901, 1, 0x5678, NULL, 0);
	f[2] = tb_frame(t, "main");
	s = tb_sample_ids(t, (uint64_t[]){ 901, 900, f[2] }, 3,
	    (int64_t[]){ 1, 10 }, 2);
	tb_label(t, s, "foo", "bar");
	tb_label(t, s, "span_id", "abcd");
	s = tb_stack(t, "main;x;y", 2, 20);
	tb_label(t, s, "foo", "baz");
	tb_numlabel(t, s, "bytes", 4096);
	tb_stack(t, "main;x", 3, 30);
	return (tb_pack(t, n));
}

static void
test_fuzz_synthetic(void)
{
	struct tb t;
	size_t n;
	uint8_t *p = rich_profile(&t, &n);

	fuzz_bytes("synthetic", p, n, n, 4000, 0x9e3779b97f4a7c15ULL);
	tb_fini(&t);
}

static void
test_fuzz_files(void)
{
	static const struct {
		const char *name;
		size_t ntrunc;
		int nmut;
	} files[] = {
		{ "pyroscope__cpu.pb.gz", 1u << 20, 3000 },
		{ "pprof__sample.cpu", 1u << 20, 2000 },
		{ "pyroscope__go.cpu.labels.pprof", 2000, 1000 },
		{ "pyroscope__heap.pb", 2000, 1000 },
		{ "pprof__large.cpu", 300, 0 },
	};
	int found = 0;

	for (size_t i = 0; i < SM_ARRAY_LEN(files); i++) {
		struct sm_arena *fa = sm_arena_create(0);
		uint8_t *p;
		size_t n;

		SM_REQUIRE(fa != NULL);
		if ((p = load_profile(fa, files[i].name, &n)) != NULL) {
			found++;
			fuzz_bytes(files[i].name, p, n, files[i].ntrunc,
			    files[i].nmut, 0x2545f4914f6cdd1dULL + i);
		}
		sm_arena_destroy(fa);
	}
	if (found == 0)
		SM_SKIP_CORPUS("no test profiles found in tests/data/ or "
		    "../shared/testdata/profiles/");
}

/* Every arena budget below what a decode needs fails cleanly. */
static void
test_arena_budget(void)
{
	struct tb t;
	size_t n, used;
	uint8_t *p = rich_profile(&t, &n);
	struct run r;

	run_init(&r);
	SM_REQUIRE(run_go(&r, p, n) == 0);
	used = sm_arena_used(r.a);
	run_fini(&r);
	for (size_t budget = 16; budget < used + 4096; budget += 16) {
		int rv = fuzz_one(p, n, budget);

		SM_CHECKF(rv == 0 || rv == SM_ENOMEM, "budget %zu: rv %d",
		    budget, rv);
		if (budget >= used + 2048)
			SM_CHECKF(rv == 0, "budget %zu (used %zu): rv %d",
			    budget, used, rv);
	}
	tb_fini(&t);
}

/* Every failing heap allocation (batch tables, arena blocks) is clean. */
static void
test_alloc_faults(void)
{
	struct tb t;
	size_t n;
	uint8_t *p = rich_profile(&t, &n);
	int fails = 0;

	for (long k = 1; k < 400; k++) {
		struct sm_arena *a = sm_arena_create(0);
		struct dist_limits lim;
		struct dist_batch b;
		struct sm_err err;
		struct dist_pprof_in in = { NULL, 0, "gospy", NULL, 0,
		    "process_cpu", 1 };
		int rv;

		if (a == NULL)
			continue;
		dist_limits_default(&lim);
		in.base = (struct sm_label[]){ { "service_name", "x" } };
		in.nbase = 1;
		/* The batch is set up first: a failure inside
		 * dist_batch_init() leaks the half-built string table
		 * (sm_strtab_init does not undo itself), which is not this
		 * decoder's to fix. */
		rv = dist_batch_init(&b, a, &lim);
		if (rv == 0) {
			sm_fault_alloc_after(k);
			rv = dist_pprof_ingest(p, n, &in, &b, &err);
			if (rv == 0)
				rv = dist_batch_finish(&b);
			sm_fault_alloc_after(0);
			dist_batch_fini(&b);
		}
		SM_CHECKF(rv == 0 || rv == SM_ENOMEM, "fault %ld: rv %d", k,
		    rv);
		fails += rv != 0;
		sm_arena_destroy(a);
	}
	SM_CHECK(fails > 0);
	tb_fini(&t);
}

SM_TEST_MAIN(
	{ "basic profile: two types, collapsed stacks", test_basic },
	{ "two profiles into one batch: one tree, no twins",
	    test_two_profiles_one_batch },
	{ "inline lines expand last to first", test_inline_order },
	{ "address-only frames with and without mapping", test_address_frames },
	{ "function name falls back to system_name", test_function_names },
	{ "string labels split series, base wins", test_label_split },
	{ "span_id/trace_id/profile_id and numeric labels do not split",
	    test_exemplar_labels },
	{ "zero values and empty stacks are dropped, negatives kept", test_values_dropped },
	{ "depth cap keeps root frames", test_depth_cap },
	{ "symbols are truncated keeping the tail", test_symbol_truncation },
	{ "type and period labels", test_period_and_type_labels },
	{ "sparse ids use the sorted map", test_sparse_ids },
	{ "unknown fields of every wire type are skipped",
	    test_unknown_fields_skipped },
	{ "packed, unpacked and mixed repeated scalars", test_packed_unpacked },
	{ "metric naming table", test_metric_naming },
	{ "sample_type_config display names", test_display_names_ingest },
	{ "pyspy/rbspy/scripting function rename", test_scripting_rename },
	{ "dotnetspy function id and sample type fix", test_dotnet_fix },
	{ "malformed: empty profile", test_bad_empty_profile },
	{ "malformed: location id 0", test_bad_location_id_zero },
	{ "malformed: function id 0", test_bad_function_id_zero },
	{ "malformed: value count differs from sample types",
	    test_bad_value_count },
	{ "malformed: string_table[0] not empty", test_bad_string_table_zero },
	{ "malformed: string index out of range", test_bad_string_index },
	{ "malformed: sample references unknown location",
	    test_bad_unknown_location },
	{ "malformed: line references unknown function",
	    test_bad_unknown_function },
	{ "malformed: sample type contains '-'", test_bad_sample_type_dash },
	{ "malformed: invalid UTF-8 string", test_bad_utf8 },
	{ "limit: samples (SM_ELIMIT)", test_samples_limit },
	{ "limit: labels per sample", test_sample_labels_limit },
	{ "malformed: undecodable wire data", test_bad_wire },
	{ "file: pprof__sample.cpu collapsed", test_file_pprof_sample_cpu },
	{ "file: pyroscope__cpu.pb.gz totals", test_file_pyroscope_cpu },
	{ "file: pprof__large.cpu totals and stacks", test_file_pprof_large },
	{ "file: parca__alloc_objects.pb.gz", test_file_parca_alloc_objects },
	{ "file: pprof__cppbench address frames", test_file_cppbench_addresses },
	{ "file: pyroscope__heap raw and gzip", test_file_pyroscope_heap },
	{ "file: pyroscope__go.cpu.labels.pprof series split",
	    test_file_go_cpu_labels },
	{ "file: pyroscope__invalid_utf8.pb.gz rejected",
	    test_file_invalid_utf8 },
	{ "file: pyroscope__dotnet-pprof-3.pb.gz needs dotnetspy",
	    test_file_dotnet },
	{ "file: parca__normalizer__profile.pb.gz empty metric",
	    test_file_parca_normalizer },
	{ "file: pyroscope__pyspy-1.pb.gz rename", test_file_pyspy },
	{ "file: pyroscope__req_3.pprof with block config",
	    test_file_block_config },
	{ "file: legacy non-protobuf profiles rejected",
	    test_file_legacy_rejected },
	{ "robustness: synthetic truncations and mutations",
	    test_fuzz_synthetic },
	{ "robustness: real file truncations and mutations", test_fuzz_files },
	{ "robustness: every arena budget", test_arena_budget },
	{ "robustness: failing heap allocations", test_alloc_faults },
)
