/*
 * flamegraph_test.c -- flamebearer and collapsed rendering against
 * hand-computed Pyroscope output, properties over random trees, and the
 * shared flamebearer fixture.
 */
#include "common/flamegraph.h"

#include "common/json.h"

#include "sm_test.h"

/* A tree under construction: strings, nodes, self values. */
struct fx {
	struct sm_strtab s;
	struct sm_tree t;
	int64_t *self;
	uint32_t cap;
};

static void
fx_init(struct fx *f)
{
	SM_REQUIRE(sm_strtab_init(&f->s) == 0);
	SM_REQUIRE(sm_tree_init(&f->t) == 0);
	f->cap = 1024;
	f->self = calloc(f->cap, sizeof(*f->self));
	SM_REQUIRE(f->self != NULL);
}

static void
fx_fini(struct fx *f)
{
	sm_strtab_fini(&f->s);
	sm_tree_fini(&f->t);
	free(f->self);
}

/* Node for frame `name` under `parent`, with self grown to fit. */
static uint32_t
fx_node(struct fx *f, uint32_t parent, const char *name, size_t len)
{
	uint32_t id, nd;

	SM_REQUIRE(sm_strtab_intern(&f->s, name, len, &id) == 0);
	SM_REQUIRE(sm_tree_child(&f->t, parent, id, &nd) == 0);
	while (nd >= f->cap) {
		f->self = realloc(f->self, 2 * f->cap * sizeof(*f->self));
		SM_REQUIRE(f->self != NULL);
		memset(f->self + f->cap, 0, f->cap * sizeof(*f->self));
		f->cap *= 2;
	}
	return (nd);
}

/* Add `v` to the stack "a;b;c" (root first). */
static void
fx_add(struct fx *f, const char *stack, int64_t v)
{
	uint32_t nd = 0;
	const char *p = stack;

	for (;;) {
		const char *e = strchr(p, ';');
		size_t len = e != NULL ? (size_t)(e - p) : strlen(p);

		nd = fx_node(f, nd, p, len);
		if (e == NULL)
			break;
		p = e + 1;
	}
	f->self[nd] += v;
}

/* Render the flamebearer JSON into a malloc'd string. */
static char *
fx_json(struct fx *f, int64_t max_nodes)
{
	struct sm_fg fg;
	struct sm_buf b = SM_BUF_INIT;
	char *s;

	SM_REQUIRE(sm_fg_build(&f->t, &f->s, f->self, max_nodes, &fg) == 0);
	sm_fg_write_json(&fg, &b);
	sm_fg_fini(&fg);
	SM_REQUIRE(sm_buf_error(&b) == 0);
	s = sm_buf_take(&b, NULL);
	SM_REQUIRE(s != NULL);
	return (s);
}

static void
check_json(struct fx *f, int64_t max_nodes, const char *want)
{
	char *got = fx_json(f, max_nodes);

	SM_CHECK_STR(got, want);
	sm_free(got);
}

/* fx_init f with stacks st[i] of self value v[i]. */
static void
fx_build(struct fx *f, const char *const *st, const int64_t *v, size_t n)
{
	fx_init(f);
	for (size_t i = 0; i < n; i++)
		fx_add(f, st[i], v[i]);
}

/* f's collapsed text must be `want`. */
static void
check_collapsed(struct fx *f, const char *want)
{
	struct sm_buf b = SM_BUF_INIT;

	SM_REQUIRE(sm_fg_write_collapsed(&f->t, &f->s, f->self, &b) == 0);
	SM_CHECK_STR(b.b, want);
	sm_buf_fini(&b);
}

static void
check_level(const struct sm_fg *fg, uint32_t l, const int64_t *want,
    uint32_t n)
{
	SM_REQUIRE(l < fg->nlevels);
	SM_CHECK_EQ(fg->level_len[l], n);
	for (uint32_t i = 0; i < n && i < fg->level_len[l]; i++)
		SM_CHECKF(fg->levels[l][i] == want[i],
		    "level %u value %u: %lld != %lld", l, i,
		    (long long)fg->levels[l][i], (long long)want[i]);
}

/* docs/wire-formats.md §3 / flamegraph.h: a;b=3, a;c=1, d=2. */
static void
test_worked_example(void)
{
	static const int64_t l0[] = { 0, 6, 0, 0 };
	static const int64_t l1[] = { 0, 4, 0, 2, 0, 2, 2, 1 };
	static const int64_t l2[] = { 0, 3, 3, 4, 0, 1, 1, 3 };
	static const char *names[] = { "total", "d", "a", "c", "b" };
	struct fx f;
	struct sm_fg fg;

	fx_init(&f);
	/* Insertion order must not matter: d first, then c before b. */
	fx_add(&f, "d", 2);
	fx_add(&f, "a;c", 1);
	fx_add(&f, "a;b", 3);
	SM_REQUIRE(sm_fg_build(&f.t, &f.s, f.self, 0, &fg) == 0);
	SM_CHECK_EQ(fg.nnames, 5);
	for (uint32_t i = 0; i < 5 && i < fg.nnames; i++) {
		SM_CHECK_STR(fg.names[i], names[i]);
		SM_CHECK_EQ(fg.name_len[i], strlen(names[i]));
	}
	SM_CHECK_EQ(fg.nlevels, 3);
	check_level(&fg, 0, l0, 4);
	check_level(&fg, 1, l1, 8);
	check_level(&fg, 2, l2, 8);
	SM_CHECK_EQ(fg.total, 6);
	SM_CHECK_EQ(fg.max_self, 3);
	sm_fg_fini(&fg);
	SM_CHECK(fg.levels == NULL && fg.names == NULL);
	check_json(&f, 0,
	    "{\"names\":[\"total\",\"d\",\"a\",\"c\",\"b\"],"
	    "\"levels\":[[0,6,0,0],[0,4,0,2,0,2,2,1],[0,3,3,4,0,1,1,3]],"
	    "\"numTicks\":6,\"maxSelf\":3}");
	/* 5 nodes: any max_nodes >= 5 keeps everything. */
	check_json(&f, 5,
	    "{\"names\":[\"total\",\"d\",\"a\",\"c\",\"b\"],"
	    "\"levels\":[[0,6,0,0],[0,4,0,2,0,2,2,1],[0,3,3,4,0,1,1,3]],"
	    "\"numTicks\":6,\"maxSelf\":3}");
	fx_fini(&f);
}

static void
test_empty_tree(void)
{
	static const char *want = "{\"names\":[\"total\"],"
	    "\"levels\":[[0,0,0,0]],\"numTicks\":0,\"maxSelf\":0}";
	struct fx f;
	struct sm_buf b = SM_BUF_INIT;

	fx_init(&f);
	check_json(&f, 0, want);
	check_json(&f, 1, want);
	/* Nodes whose totals are 0 do not exist. */
	fx_add(&f, "a;b", 0);
	fx_add(&f, "c", 0);
	check_json(&f, 0, want);
	check_json(&f, 1, want);
	SM_CHECK(sm_fg_write_collapsed(&f.t, &f.s, f.self, &b) == 0);
	SM_CHECK_EQ(b.len, 0);
	sm_buf_fini(&b);
	fx_fini(&f);
}

/*
 * a;b=5 a;c=2 a;other=1 d=2 e;f=1: totals a 8, b 5, c 2, other 1, d 2,
 * e 1, f 1 (7 nodes; sorted 8 5 2 2 1 1 1).  Expectations worked by hand
 * with the walk of flamegraph.h.
 */
static void
fx_cut_tree(struct fx *f)
{
	fx_init(f);
	fx_add(f, "e;f", 1);
	fx_add(f, "a;other", 1);
	fx_add(f, "d", 2);
	fx_add(f, "a;c", 2);
	fx_add(f, "a;b", 5);
	fx_add(f, "a;b;zero", 0);    /* exists in the tree, not rendered */
}

static void
test_max_nodes_cuts(void)
{
	/* No cut (also 7 = node count, and 5: 5th largest is 1). */
	static const char *full = "{\"names\":[\"total\",\"e\",\"f\",\"d\","
	    "\"a\",\"other\",\"c\",\"b\"],\"levels\":[[0,11,0,0],"
	    "[0,8,0,4,0,2,2,3,0,1,0,1],"
	    "[0,5,5,7,0,2,2,6,0,1,1,5,2,1,1,2]],"
	    "\"numTicks\":11,\"maxSelf\":5}";
	/* min total 2: 3rd largest; 4th largest ties at 2 too. */
	static const char *cut2 = "{\"names\":[\"total\",\"other\",\"d\","
	    "\"a\",\"c\",\"b\"],\"levels\":[[0,11,0,0],"
	    "[0,8,0,3,0,2,2,2,0,1,1,1],[0,5,5,5,0,2,2,4,0,1,1,1]],"
	    "\"numTicks\":11,\"maxSelf\":5}";
	/* min total 5. */
	static const char *cut5 = "{\"names\":[\"total\",\"other\",\"a\","
	    "\"b\"],\"levels\":[[0,11,0,0],[0,8,0,2,0,3,3,1],"
	    "[0,5,5,3,0,3,3,1]],\"numTicks\":11,\"maxSelf\":5}";
	/* min total 8: maxSelf comes from an "other" node. */
	static const char *cut8 = "{\"names\":[\"total\",\"other\",\"a\"],"
	    "\"levels\":[[0,11,0,0],[0,8,0,2,0,3,3,1],[0,8,8,1]],"
	    "\"numTicks\":11,\"maxSelf\":8}";
	struct fx f;

	fx_cut_tree(&f);
	check_json(&f, 0, full);
	check_json(&f, -3, full);
	check_json(&f, 7, full);
	check_json(&f, 100, full);
	check_json(&f, 5, full);
	check_json(&f, 6, full);
	check_json(&f, 3, cut2);
	check_json(&f, 4, cut2);
	check_json(&f, 2, cut5);
	check_json(&f, 1, cut8);
	fx_fini(&f);
}

/* The same function at several places is one name. */
static void
test_names_dedup(void)
{
	static const char *const st[] = { "a;b", "c;b", "b" };
	static const int64_t v[] = { 1, 2, 3 };
	static const char *const st2[] = { "total", "x;total" };
	static const int64_t v2[] = { 2, 1 };
	struct fx f;

	fx_build(&f, st, v, 3);
	check_json(&f, 0, "{\"names\":[\"total\",\"c\",\"b\",\"a\"],"
	    "\"levels\":[[0,6,0,0],[0,1,0,3,0,3,3,2,0,2,0,1],"
	    "[0,1,1,2,3,2,2,2]],\"numTicks\":6,\"maxSelf\":3}");
	fx_fini(&f);

	/* A frame literally named "total" shares the root's name. */
	fx_build(&f, st2, v2, 2);
	check_json(&f, 0, "{\"names\":[\"total\",\"x\"],"
	    "\"levels\":[[0,3,0,0],[0,2,2,0,0,1,0,1],[2,1,1,0]],"
	    "\"numTicks\":3,\"maxSelf\":2}");
	fx_fini(&f);
}

/* Siblings sort bytewise, shorter first on a common prefix. */
static void
test_byte_order(void)
{
	static const char *const st[] = { "\xc3\xa9t\xc3\xa9", "ab", "a",
		"B", "a;z", "a;\"q\"<&>" };
	static const int64_t v[] = { 1, 1, 1, 1, 1, 1 };
	struct fx f;

	fx_build(&f, st, v, 6);
	check_collapsed(&f, "B 1\na 1\na;\"q\"<&> 1\na;z 1\nab 1\n"
	    "\xc3\xa9t\xc3\xa9 1\n");
	/* Popped last child first; names escaped as Go does. */
	check_json(&f, 0, "{\"names\":[\"total\",\"\xc3\xa9t\xc3\xa9\","
	    "\"ab\",\"a\",\"z\",\"\\\"q\\\"\\u003c\\u0026\\u003e\",\"B\"],"
	    "\"levels\":[[0,6,0,0],[0,1,1,6,0,3,1,3,0,1,1,2,0,1,1,1],"
	    "[2,1,1,5,0,1,1,4]],\"numTicks\":6,\"maxSelf\":1}");
	fx_fini(&f);
}

static void
test_collapsed(void)
{
	static const char *const st[] = { "d", "a;c", "a;b", "a", "a;b;x;y",
		"q;r" };
	static const int64_t v[] = { 2, 1, 3, 4, 7, 0 };
	struct fx f;
	struct sm_buf b;

	fx_build(&f, st, v, 6);
	check_collapsed(&f, "a 4\na;b 3\na;b;x;y 7\na;c 1\nd 2\n");

	/* Output errors are reported. */
	sm_buf_init(&b);
	b.limit = 8;
	SM_CHECK_EQ(sm_fg_write_collapsed(&f.t, &f.s, f.self, &b),
	    SM_ETOOBIG);
	sm_buf_fini(&b);

	/* In pieces (a streamed answer): whole lines, at least `want`
	 * bytes per piece but the last, the same text once joined. */
	for (size_t want = 1; want <= 40; want++) {
		struct sm_fg_collapsed *c;
		struct sm_buf all = SM_BUF_INIT;
		int rv, pieces = 0;

		SM_REQUIRE(sm_fg_collapsed_open(&f.t, &f.s, f.self, &c) == 0);
		do {
			sm_buf_init(&b);
			rv = sm_fg_collapsed_next(c, &b, want);
			SM_CHECK(rv == 0 || rv == 1);
			SM_CHECK(b.len == 0 || b.b[b.len - 1] == '\n');
			if (rv == 0)
				SM_CHECK(b.len >= want);
			sm_buf_append(&all, b.b, b.len);
			sm_buf_fini(&b);
			pieces++;
		} while (rv == 0 && pieces < 100);
		sm_buf_putc(&all, '\0');
		SM_CHECK_STR(all.b, "a 4\na;b 3\na;b;x;y 7\na;c 1\nd 2\n");
		sm_buf_fini(&all);
		sm_fg_collapsed_close(c);
	}
	sm_fg_collapsed_close(NULL);
	fx_fini(&f);
}

/* A stack deeper than any recursion budget, and a wide fan-out. */
static void
test_deep_and_wide(void)
{
	struct fx f;
	struct sm_fg fg;
	struct sm_buf b = SM_BUF_INIT;
	uint32_t nd = 0;
	char name[32];

	fx_init(&f);
	for (int i = 0; i < 20000; i++) {
		snprintf(name, sizeof(name), "f%d", i % 7);
		nd = fx_node(&f, nd, name, strlen(name));
	}
	f.self[nd] = 1;
	for (int i = 0; i < 50000; i++) {
		snprintf(name, sizeof(name), "w%d", i);
		nd = fx_node(&f, 0, name, strlen(name));
		f.self[nd] = i % 3 + 1;
	}
	SM_REQUIRE(sm_fg_build(&f.t, &f.s, f.self, 0, &fg) == 0);
	SM_CHECK_EQ(fg.nlevels, 20001);
	SM_CHECK_EQ(fg.level_len[1], 4 * 50001);
	SM_CHECK_EQ(fg.nnames, 1 + 7 + 50000);
	sm_fg_fini(&fg);
	SM_REQUIRE(sm_fg_build(&f.t, &f.s, f.self, 100, &fg) == 0);
	/*
	 * The 100th largest total is 3 (~16.7k wide nodes hold 3): they are
	 * kept, the chain (total 1) and the other wide nodes become "other".
	 */
	SM_CHECK_EQ(fg.nlevels, 2);
	SM_CHECK_EQ(fg.level_len[1], 4 * (16666 + 1));
	sm_fg_fini(&fg);
	SM_REQUIRE(sm_fg_write_collapsed(&f.t, &f.s, f.self, &b) == 0);
	SM_CHECK(sm_buf_error(&b) == 0);
	sm_buf_fini(&b);
	fx_fini(&f);
}

/* Every allocation failure gives SM_ENOMEM and an empty result. */
static void
test_alloc_failures(void)
{
	struct fx f;
	struct sm_fg fg;
	int rv = -1;

	fx_cut_tree(&f);
	for (long k = 1; k < 200; k++) {
		sm_fault_alloc_after(k);
		rv = sm_fg_build(&f.t, &f.s, f.self, 3, &fg);
		sm_fault_alloc_after(0);
		if (rv == 0)
			break;
		SM_CHECK_EQ(rv, SM_ENOMEM);
		SM_CHECK(fg.levels == NULL && fg.names == NULL &&
		    fg.nlevels == 0 && fg.nnames == 0);
	}
	SM_CHECK_EQ(rv, 0);
	sm_fg_fini(&fg);
	for (long k = 1; k < 200; k++) {
		struct sm_buf b = SM_BUF_INIT;

		sm_fault_alloc_after(k);
		rv = sm_fg_write_collapsed(&f.t, &f.s, f.self, &b);
		sm_fault_alloc_after(0);
		sm_buf_fini(&b);
		if (rv == 0)
			break;
		SM_CHECK_EQ(rv, SM_ENOMEM);
	}
	SM_CHECK_EQ(rv, 0);
	fx_fini(&f);
}

/* --- decoding a flamegraph back, as Pyroscope's MergeFlameGraph does --- */

/* Absolute x of every node: undo the delta encoding (copies levels). */
static int64_t **
fg_absolute(const struct sm_fg *fg)
{
	int64_t **abs = calloc(fg->nlevels, sizeof(*abs));

	SM_REQUIRE(abs != NULL);
	for (uint32_t l = 0; l < fg->nlevels; l++) {
		int64_t prev = 0;

		abs[l] = malloc((fg->level_len[l] + 1) * sizeof(int64_t));
		SM_REQUIRE(abs[l] != NULL);
		memcpy(abs[l], fg->levels[l], fg->level_len[l] *
		    sizeof(int64_t));
		for (uint32_t i = 0; i < fg->level_len[l]; i += 4) {
			int64_t d = abs[l][i] + abs[l][i + 1];

			abs[l][i] += prev;
			prev += d;
		}
	}
	return (abs);
}

static void
fg_absolute_free(const struct sm_fg *fg, int64_t **abs)
{
	for (uint32_t l = 0; l < fg->nlevels; l++)
		free(abs[l]);
	free(abs);
}

/* Index (in values) of the node of level l whose x range holds x. */
static uint32_t
fg_find(const struct sm_fg *fg, int64_t **abs, uint32_t l, int64_t x)
{
	uint32_t lo = 0, hi = fg->level_len[l] / 4;

	/* First node with x > target, minus one (Pyroscope's buildStack). */
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (abs[l][mid * 4] > x)
			hi = mid;
		else
			lo = mid + 1;
	}
	SM_REQUIRE(lo > 0);
	return ((lo - 1) * 4);
}

static int
line_cmp(const void *a, const void *b)
{
	return (strcmp(*(char *const *)a, *(char *const *)b));
}

/* Split text into sorted lines (modifies it). */
static char **
split_lines(char *s, uint32_t *np)
{
	uint32_t n = 0, cap = 16;
	char **v = malloc(cap * sizeof(*v));

	SM_REQUIRE(v != NULL);
	while (s != NULL && *s != '\0') {
		char *e = strchr(s, '\n');

		if (n == cap) {
			cap *= 2;
			v = realloc(v, cap * sizeof(*v));
			SM_REQUIRE(v != NULL);
		}
		v[n++] = s;
		if (e == NULL)
			break;
		*e = '\0';
		s = e + 1;
	}
	qsort(v, n, sizeof(*v), line_cmp);
	*np = n;
	return (v);
}

/* Collapsed text rebuilt from a flamegraph's levels. */
static char *
fg_decode_collapsed(const struct sm_fg *fg)
{
	struct sm_buf b = SM_BUF_INIT;
	int64_t **abs = fg_absolute(fg);
	uint32_t *idx = calloc(fg->nlevels + 1, sizeof(*idx));
	char *s;

	SM_REQUIRE(idx != NULL);
	for (uint32_t l = 1; l < fg->nlevels; l++) {
		for (uint32_t j = 0; j < fg->level_len[l]; j += 4) {
			int64_t x = abs[l][j];

			if (abs[l][j + 2] <= 0)
				continue;
			idx[l] = j;
			for (uint32_t p = l - 1; p >= 1; p--) {
				idx[p] = fg_find(fg, abs, p, x);
				x = abs[p][idx[p]];
			}
			for (uint32_t p = 1; p <= l; p++) {
				uint32_t ni = (uint32_t)abs[p][idx[p] + 3];

				if (p > 1)
					sm_buf_putc(&b, ';');
				sm_buf_append(&b, fg->names[ni], fg->name_len[ni]);
			}
			sm_buf_putc(&b, ' ');
			sm_buf_put_i64(&b, abs[l][j + 2]);
			sm_buf_putc(&b, '\n');
		}
	}
	free(idx);
	fg_absolute_free(fg, abs);
	SM_REQUIRE(sm_buf_error(&b) == 0);
	s = sm_buf_take(&b, NULL);
	return (s != NULL ? s : sm_strdup(""));
}

static uint64_t rng_state;

static uint32_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return ((uint32_t)(rng_state >> 11));
}

/* Check the structural invariants of any rendering of f. */
static void
check_invariants(struct fx *f, const struct sm_fg *fg, int64_t max_nodes,
    int literal_other)
{
	uint32_t n = sm_tree_size(&f->t), m = 0, kept = 0, other_idx = 0;
	int64_t *total = malloc(n * sizeof(*total));
	int64_t *sorted = malloc(n * sizeof(*sorted));
	int64_t **abs = fg_absolute(fg), min_total = 0, self_sum = 0;
	int64_t max_self = 0;

	SM_REQUIRE(total != NULL && sorted != NULL);
	sm_tree_totals(&f->t, f->self, total);
	for (uint32_t i = 1; i < n; i++) {
		self_sum += f->self[i];
		if (total[i] > 0)
			sorted[m++] = total[i];
	}
	qsort(sorted, m, sizeof(*sorted), sm_i64_desc_cmp);
	if (max_nodes >= 1 && (uint64_t)m > (uint64_t)max_nodes)
		min_total = sorted[max_nodes - 1];

	SM_CHECK_EQ(fg->total, total[0]);
	SM_CHECK_EQ(fg->total, self_sum + f->self[0]);
	SM_REQUIRE(fg->nlevels >= 1);
	SM_CHECK_EQ(fg->level_len[0], 4);
	SM_CHECK_EQ(abs[0][0], 0);
	SM_CHECK_EQ(abs[0][1], total[0]);
	SM_CHECK_EQ(abs[0][3], 0);
	SM_CHECK_STR(fg->names[0], "total");
	/* Names are distinct. */
	for (uint32_t i = 0; i < fg->nnames; i++) {
		if (strcmp(fg->names[i], "other") == 0)
			other_idx = i;
		for (uint32_t k = i + 1; k < fg->nnames; k++)
			SM_CHECK(fg->name_len[i] != fg->name_len[k] ||
			    memcmp(fg->names[i], fg->names[k],
			    fg->name_len[i]) != 0);
	}
	for (uint32_t l = 0; l < fg->nlevels; l++) {
		int64_t sum = 0, end = 0;

		SM_CHECK(fg->level_len[l] > 0 && fg->level_len[l] % 4 == 0);
		for (uint32_t j = 0; j < fg->level_len[l]; j += 4) {
			int64_t x = abs[l][j], t = abs[l][j + 1];
			int64_t s = abs[l][j + 2];

			SM_CHECK(t > 0 || fg->total == 0);
			SM_CHECK(s >= 0 && s <= t);
			SM_CHECK(abs[l][j + 3] >= 0 &&
			    abs[l][j + 3] < fg->nnames);
			/* Left to right, no overlap. */
			SM_CHECK(x >= end);
			end = x + t;
			sum += t;
			if (s > max_self)
				max_self = s;
			if (l == 0)
				continue;
			if (abs[l][j + 3] != other_idx || other_idx == 0)
				kept++;
			/* Inside the parent's children range. */
			{
				uint32_t p = fg_find(fg, abs, l - 1, x);
				int64_t px = abs[l - 1][p];

				SM_CHECK(px + abs[l - 1][p + 2] <= x);
				SM_CHECK(x + t <= px + abs[l - 1][p + 1]);
			}
		}
		SM_CHECK(sum <= fg->total);
		if (l == 1)
			SM_CHECK_EQ(sum, fg->total - f->self[0]);
	}
	/* Each node's children add up to total - self: totals never change. */
	for (uint32_t l = 0; l + 1 < fg->nlevels; l++) {
		for (uint32_t j = 0; j < fg->level_len[l]; j += 4) {
			int64_t x0 = abs[l][j] + abs[l][j + 2];
			int64_t x1 = abs[l][j] + abs[l][j + 1], sum = 0;

			for (uint32_t k = 0; k < fg->level_len[l + 1]; k += 4) {
				if (abs[l + 1][k] >= x0 && abs[l + 1][k] < x1)
					sum += abs[l + 1][k + 1];
			}
			SM_CHECK_EQ(sum, abs[l][j + 1] - abs[l][j + 2]);
		}
	}
	SM_CHECK_EQ(fg->max_self, max_self);
	if (!literal_other) {
		/* Kept = every node with total >= min: at least the cap. */
		uint32_t want = 0;

		for (uint32_t i = 0; i < m; i++)
			want += sorted[i] >= min_total;
		SM_CHECK_EQ(kept, want);
		if (max_nodes >= 1)
			SM_CHECK(kept >= SM_MIN((uint64_t)max_nodes, m));
		else
			SM_CHECK_EQ(kept, m);
	}
	fg_absolute_free(fg, abs);
	free(total);
	free(sorted);
}

static void
test_random_property(void)
{
	static const char *alpha[] = { "main", "run", "a", "b", "ab", "",
	    "total", "x;y", "\xe2\x82\xac", "zz" };
	uint32_t trees = 300;

	rng_state = 0x9e3779b97f4a7c15ULL;
	for (uint32_t it = 0; it < trees; it++) {
		int literal_other = it % 5 == 4;
		uint32_t nstacks = 1 + rng() % 60;
		struct fx f;
		struct sm_fg fg;
		struct sm_buf b = SM_BUF_INIT;
		char *dec, **l1, **l2;
		uint32_t n1, n2;

		fx_init(&f);
		for (uint32_t s = 0; s < nstacks; s++) {
			uint32_t depth = 1 + rng() % 9, nd = 0;

			for (uint32_t d = 0; d < depth; d++) {
				const char *nm = alpha[rng() % SM_ARRAY_LEN(alpha)];

				if (literal_other && rng() % 7 == 0)
					nm = "other";
				nd = fx_node(&f, nd, nm, strlen(nm));
			}
			/* Some stacks carry nothing: nodes with total 0. */
			f.self[nd] += rng() % 4 == 0 ? 0 : 1 + rng() % 100;
		}

		/* max_nodes = 0: decoding gives back the collapsed set. */
		SM_REQUIRE(sm_fg_build(&f.t, &f.s, f.self, 0, &fg) == 0);
		check_invariants(&f, &fg, 0, literal_other);
		if (!literal_other) {
			dec = fg_decode_collapsed(&fg);
			SM_REQUIRE(sm_fg_write_collapsed(&f.t, &f.s, f.self,
			    &b) == 0);
			l1 = split_lines(dec, &n1);
			l2 = split_lines(b.b, &n2);
			SM_CHECK_EQ(n1, n2);
			for (uint32_t i = 0; i < n1 && i < n2; i++)
				SM_CHECKF(strcmp(l1[i], l2[i]) == 0,
				    "tree %u line %u: %s != %s", it, i, l1[i],
				    l2[i]);
			free(l1);
			free(l2);
			sm_free(dec);
			sm_buf_fini(&b);
		}
		sm_fg_fini(&fg);

		for (int64_t mn = 1; mn < 40; mn += 1 + (int64_t)(rng() % 6)) {
			SM_REQUIRE(sm_fg_build(&f.t, &f.s, f.self, mn,
			    &fg) == 0);
			check_invariants(&f, &fg, mn, literal_other);
			sm_fg_fini(&fg);
		}
		fx_fini(&f);
		if (sm_test_st.failed != 0)
			break;
	}
}

/* --- the shared Pyroscope flamebearer fixture --------------------------- */

/* Rebuild a tree from a flamebearer's names and (delta) levels. */
static void
fx_from_flamebearer(struct fx *f, struct sm_json *fb, int64_t *ticks)
{
	struct sm_json *names = sm_json_get(fb, "names");
	struct sm_json *levels = sm_json_get(fb, "levels");
	uint32_t *prev_ids = NULL, *cur_ids = NULL;
	int64_t *prev_x = NULL, *cur_x = NULL;
	size_t nprev = 0;

	SM_REQUIRE(sm_json_is_array(names) && sm_json_is_array(levels));
	*ticks = sm_json_int(sm_json_get(fb, "numTicks"));
	fx_init(f);
	for (size_t l = 0; l < sm_json_len(levels); l++) {
		struct sm_json *lv = sm_json_at(levels, l);
		size_t nv = sm_json_len(lv), k = 0;
		int64_t prev = 0;

		SM_REQUIRE(nv % 4 == 0);
		cur_ids = malloc((nv / 4 + 1) * sizeof(*cur_ids));
		cur_x = malloc((nv / 4 + 1) * sizeof(*cur_x));
		SM_REQUIRE(cur_ids != NULL && cur_x != NULL);
		for (size_t j = 0; j < nv; j += 4, k++) {
			int64_t x = sm_json_int(sm_json_at(lv, j));
			int64_t t = sm_json_int(sm_json_at(lv, j + 1));
			int64_t s = sm_json_int(sm_json_at(lv, j + 2));
			size_t ni = (size_t)sm_json_int(
			    sm_json_at(lv, j + 3));
			const char *nm;
			uint32_t parent = 0;

			x += prev;
			prev = x + t;
			cur_x[k] = x;
			if (l == 0) {
				cur_ids[k] = 0;
				f->self[0] = s;
				continue;
			}
			/* Parent: last node of the level above with px <= x. */
			{
				size_t p = nprev;

				while (p > 0 && prev_x[p - 1] > x)
					p--;
				SM_REQUIRE(p > 0);
				parent = prev_ids[p - 1];
			}
			SM_REQUIRE(ni < sm_json_len(names));
			nm = sm_json_str(sm_json_at(names, ni));
			SM_REQUIRE(nm != NULL);
			cur_ids[k] = fx_node(f, parent, nm, strlen(nm));
			f->self[cur_ids[k]] += s;
		}
		free(prev_ids);
		free(prev_x);
		prev_ids = cur_ids;
		prev_x = cur_x;
		nprev = k;
	}
	free(prev_ids);
	free(prev_x);
}

/* True if fg's names and levels equal the flamebearer JSON's exactly. */
static int
fg_equals_json(const struct sm_fg *fg, struct sm_json *fb)
{
	struct sm_json *names = sm_json_get(fb, "names");
	struct sm_json *levels = sm_json_get(fb, "levels");

	if (sm_json_len(names) != fg->nnames ||
	    sm_json_len(levels) != fg->nlevels)
		return (0);
	for (uint32_t i = 0; i < fg->nnames; i++) {
		const char *s = sm_json_str(sm_json_at(names, i));

		if (s == NULL || strlen(s) != fg->name_len[i] ||
		    memcmp(s, fg->names[i], fg->name_len[i]) != 0)
			return (0);
	}
	for (uint32_t l = 0; l < fg->nlevels; l++) {
		struct sm_json *lv = sm_json_at(levels, l);

		if (sm_json_len(lv) != fg->level_len[l])
			return (0);
		for (uint32_t i = 0; i < fg->level_len[l]; i++) {
			if (sm_json_int(sm_json_at(lv, i)) !=
			    fg->levels[l][i])
				return (0);
		}
	}
	return (1);
}

/*
 * SOURCES.md item 11 says this file "converted with MaxNodes=1 must give
 * 2 levels".  That upstream test (og flamebearer/convert TestConvert) runs
 * the og renderer, pkg/og/storage/tree FlamebearerStruct, whose minValue
 * counts the virtual root among the nodes: with MaxNodes=1 the cut-off is
 * the root total (953), every child folds into "other", 2 levels.  The v1
 * renderer Smolder follows (pkg/model NewFlameGraph, tree.go minValue)
 * counts only real nodes: the cut-off is the largest child (823), the
 * 823-wide chain survives down to rideshare/utility.mutexLock (level 14)
 * and its child time.Since (812) becomes "other" at level 15: 16 levels.
 * We assert the v1 result, and that the file itself round-trips exactly.
 */
static void
test_flamebearer_fixture(void)
{
	char path[1024];
	struct sm_json *root, *fb;
	struct sm_err jerr;
	unsigned char *text;
	size_t n = 0;
	struct fx f;
	struct sm_fg fg;
	int64_t ticks = 0;
	int64_t **abs;

	sm_test_path(path, sizeof(path),
	    "../shared/testdata/profiles/pyroscope__flamebearer_profile.json");
	if ((text = sm_test_read_file(path, &n)) == NULL)
		SM_SKIP_CORPUS("shared test data absent: %.160s", path);
	if (sm_json_parse((const char *)text, n, 0, &root, &jerr) != 0) {
		free(text);
		SM_REQUIRE(!"the flamebearer fixture is not JSON");
	}
	free(text);
	fb = sm_json_get(root, "flamebearer");
	if (!sm_json_is_object(fb)) {
		sm_json_free(root);
		SM_REQUIRE(!"no flamebearer object");
	}
	fx_from_flamebearer(&f, fb, &ticks);
	SM_CHECK_EQ(ticks, 953);

	/* Uncut: Pyroscope's own output comes back byte for byte. */
	SM_REQUIRE(sm_fg_build(&f.t, &f.s, f.self, 0, &fg) == 0);
	SM_CHECK_EQ(fg.total, ticks);
	SM_CHECK_EQ(fg.max_self,
	    sm_json_int(sm_json_get(fb, "maxSelf")));
	SM_CHECK(fg_equals_json(&fg, fb));
	check_invariants(&f, &fg, 0, 0);
	sm_fg_fini(&fg);
	/* 41 names, 40 nodes + root: a cap of 1024 changes nothing. */
	SM_REQUIRE(sm_fg_build(&f.t, &f.s, f.self, 1024, &fg) == 0);
	SM_CHECK(fg_equals_json(&fg, fb));
	sm_fg_fini(&fg);

	/* max_nodes = 1, v1 semantics (see above). */
	SM_REQUIRE(sm_fg_build(&f.t, &f.s, f.self, 1, &fg) == 0);
	SM_CHECK_EQ(fg.nlevels, 16);
	SM_CHECK_EQ(fg.total, ticks);
	check_invariants(&f, &fg, 1, 0);
	abs = fg_absolute(&fg);
	SM_REQUIRE(fg.nlevels == 16);
	SM_CHECK_EQ(fg.level_len[1], 8);
	SM_CHECK_STR(fg.names[abs[1][3]], "net/http.(*conn).serve");
	SM_CHECK_EQ(abs[1][1], 823);
	SM_CHECK_STR(fg.names[abs[1][7]], "other");
	SM_CHECK_EQ(abs[1][5], 130);
	SM_CHECK_EQ(abs[1][6], 130);
	SM_CHECK_EQ(fg.level_len[14], 4);
	SM_CHECK_STR(fg.names[abs[14][3]], "rideshare/utility.mutexLock");
	SM_CHECK_EQ(fg.level_len[15], 4);
	SM_CHECK_STR(fg.names[abs[15][3]], "other");
	SM_CHECK_EQ(abs[15][1], 812);
	fg_absolute_free(&fg, abs);
	sm_fg_fini(&fg);
	fx_fini(&f);
	sm_json_free(root);
}

/* Diff of two hand-built trees (computed by hand from Pyroscope's
 * NewFlamegraphDiff), then a cut by max_nodes and a range against
 * itself. */
static void
test_diff(void)
{
	struct fx l, r;
	struct sm_fg fg;
	static const int64_t l0[] = { 0, 4, 0, 0, 3, 0, 0 };
	static const int64_t l1[] = { 0, 4, 0, 0, 1, 0, 2, 0, 0, 0, 0, 2, 2,
	    1 };
	static const int64_t l2[] = { 0, 3, 3, 0, 1, 1, 4, 0, 1, 1, 0, 0, 0,
	    3 };
	static const char *names[] = { "total", "d", "a", "c", "b" };

	fx_init(&l);
	fx_init(&r);
	fx_add(&l, "a;b", 3);
	fx_add(&l, "a;c", 1);
	fx_add(&r, "a;b", 1);
	fx_add(&r, "d", 2);
	SM_REQUIRE(sm_fg_build_diff(&l.t, &l.s, l.self, &r.t, &r.s, r.self, 0,
	    &fg) == 0);
	SM_CHECK_EQ(fg.left_ticks, 4);
	SM_CHECK_EQ(fg.right_ticks, 3);
	SM_CHECK_EQ(fg.total, 7);
	SM_CHECK_EQ(fg.max_self, 3);
	SM_REQUIRE(fg.nnames == 5 && fg.nlevels == 3);
	for (uint32_t i = 0; i < 5; i++)
		SM_CHECK(strcmp(fg.names[i], names[i]) == 0);
	SM_REQUIRE(fg.level_len[0] == 7 && fg.level_len[1] == 14 &&
	    fg.level_len[2] == 14);
	SM_CHECK(memcmp(fg.levels[0], l0, sizeof(l0)) == 0);
	SM_CHECK(memcmp(fg.levels[1], l1, sizeof(l1)) == 0);
	SM_CHECK(memcmp(fg.levels[2], l2, sizeof(l2)) == 0);
	sm_fg_fini(&fg);

	/* 5 nodes, max_nodes 3: min = 3rd largest of max(L, R) over
	 * {root 4, a 4, d 2, b 3, c 1} = 3: d (0/2) and c (1/0) fold. */
	SM_REQUIRE(sm_fg_build_diff(&l.t, &l.s, l.self, &r.t, &r.s, r.self, 3,
	    &fg) == 0);
	SM_CHECK_EQ(fg.total, 7);
	SM_REQUIRE(fg.nlevels == 3);
	SM_CHECK_EQ(fg.level_len[1], 14);    /* a, other(0/2) */
	SM_CHECK_EQ(fg.levels[1][7 + 1], 0);
	SM_CHECK_EQ(fg.levels[1][7 + 4], 2);
	SM_CHECK(strcmp(fg.names[fg.levels[1][7 + 6]], "other") == 0);
	sm_fg_fini(&fg);

	/* Against itself: both sides equal, node by node. */
	SM_REQUIRE(sm_fg_build_diff(&l.t, &l.s, l.self, &l.t, &l.s, l.self, 0,
	    &fg) == 0);
	SM_CHECK_EQ(fg.left_ticks, fg.right_ticks);
	for (uint32_t d = 0; d < fg.nlevels; d++)
		for (uint32_t i = 0; i < fg.level_len[d]; i += 7) {
			SM_CHECK_EQ(fg.levels[d][i], fg.levels[d][i + 3]);
			SM_CHECK_EQ(fg.levels[d][i + 1], fg.levels[d][i + 4]);
			SM_CHECK_EQ(fg.levels[d][i + 2], fg.levels[d][i + 5]);
		}
	sm_fg_fini(&fg);
	fx_fini(&l);
	fx_fini(&r);
}

SM_TEST_MAIN(
	{ "worked example (spec 3) node by node", test_worked_example },
	{ "empty tree is one total root", test_empty_tree },
	{ "max_nodes cuts, ties and a literal other", test_max_nodes_cuts },
	{ "names dedup and a frame named total", test_names_dedup },
	{ "siblings in Go string order, JSON escaping", test_byte_order },
	{ "collapsed text", test_collapsed },
	{ "deep and wide trees without recursion", test_deep_and_wide },
	{ "allocation failures are clean", test_alloc_failures },
	{ "random trees: round trip and invariants", test_random_property },
	{ "pyroscope flamebearer fixture, max_nodes 1",
	    test_flamebearer_fixture },
	{ "diff: 7-tuples, union, max_nodes, against itself", test_diff },
)
