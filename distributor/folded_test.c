/*
 * folded_test.c -- folded, lines and trie ingest bodies: the speedscope
 * and FlameGraph collapsed fixtures, counts, scaling, depth, text
 * decoding, and hand-built tries (including every truncation).
 */
#include "distributor/folded.h"

#include <glob.h>

#include "sm_test.h"

struct fx {
	struct sm_arena *a;
	struct dist_limits lim;
	struct dist_batch b;
	uint32_t series;
	struct sm_err err;
	int64_t *total, *self;  /* per frame name id, after fx_finish */
};

static void
fx_init(struct fx *f)
{
	static const struct sm_label ls[] = {
		{ "service_name", "app" },
		{ "__name__", "process_cpu" },
	};

	memset(f, 0, sizeof(*f));
	f->a = sm_arena_create(0);
	SM_REQUIRE(f->a != NULL);
	dist_limits_default(&f->lim);
	SM_REQUIRE(dist_batch_init(&f->b, f->a, &f->lim) == 0);
	SM_REQUIRE(dist_batch_series(&f->b, ls, 2, 1000, &f->series,
	    &f->err) == 0);
}

static void
fx_fini(struct fx *f)
{
	dist_batch_fini(&f->b);
	sm_arena_destroy(f->a);
	free(f->total);
	free(f->self);
}

/*
 * Finish the batch and compute per frame name: self (values whose leaf
 * has that name) and total (values of stacks containing the name, once
 * per stack even when it recurs).
 */
static void
fx_finish(struct fx *f)
{
	uint32_t nstr = sm_strtab_count(&f->b.strings), stamp = 0;
	uint32_t *mark;

	SM_REQUIRE(dist_batch_finish(&f->b) == 0);
	f->total = calloc(nstr, sizeof(*f->total));
	f->self = calloc(nstr, sizeof(*f->self));
	mark = calloc(nstr, sizeof(*mark));
	SM_REQUIRE(f->total != NULL && f->self != NULL && mark != NULL);
	for (uint32_t k = 0; k < f->b.nseries; k++) {
		const struct dist_series *s = &f->b.series[k];

		for (uint32_t j = 0; j < s->n; j++) {
			uint32_t nd = s->node[j];

			f->self[f->b.tree.name[nd]] += s->value[j];
			stamp++;
			for (; nd != 0; nd = f->b.tree.parent[nd]) {
				uint32_t nm = f->b.tree.name[nd];

				if (mark[nm] != stamp) {
					mark[nm] = stamp;
					f->total[nm] += s->value[j];
				}
			}
		}
	}
	free(mark);
}

static int64_t
fx_total(const struct fx *f)
{
	return (f->b.nseries == 0 ? 0 : dist_batch_series_total(&f->b, 0));
}

/* Distinct stacks stored (after finish). */
static uint32_t
fx_stacks(const struct fx *f)
{
	return (f->b.nseries == 0 ? 0 : f->b.series[0].n);
}

static void
check_frame(const struct fx *f, const char *name, int64_t total,
    int64_t self)
{
	uint32_t id;

	if (sm_strtab_find(&f->b.strings, name, strlen(name), &id) != 0) {
		SM_TEST_FAILF("frame \"%s\" not found", name);
		return;
	}
	SM_CHECKF(f->total[id] == total && f->self[id] == self,
	    "frame %s: total %lld self %lld, want %lld %lld", name,
	    (long long)f->total[id], (long long)f->self[id],
	    (long long)total, (long long)self);
}

/* Value stored for the exact stack "a;b;c" (0 if none). */
static int64_t
fx_stack_value(const struct fx *f, const char *stack)
{
	uint32_t nd = 0, id;
	const char *p = stack;

	for (;;) {
		const char *e = strchr(p, ';');
		size_t l = e != NULL ? (size_t)(e - p) : strlen(p);

		if (sm_strtab_find(&f->b.strings, p, l, &id) != 0 ||
		    sm_tree_find(&f->b.tree, nd, id, &nd) != 0)
			return (0);
		if (e == NULL)
			break;
		p = e + 1;
	}
	for (uint32_t j = 0; j < fx_stacks(f); j++) {
		if (f->b.series[0].node[j] == nd)
			return (f->b.series[0].value[j]);
	}
	return (0);
}

static int
parse_folded(struct fx *f, const char *s, int64_t scale)
{
	return (dist_folded_parse((const uint8_t *)s, strlen(s), &f->b,
	    f->series, scale, &f->err));
}

/* A fresh fx with the folded text s parsed (required) and finished. */
static void
fx_folded(struct fx *f, const char *s, int64_t scale)
{
	fx_init(f);
	SM_REQUIRE(parse_folded(f, s, scale) == 0);
	fx_finish(f);
}

/* A fresh fx with the len bytes of s parsed as lines (required) and
 * finished. */
static void
fx_lines(struct fx *f, const char *s, size_t len, int64_t scale)
{
	fx_init(f);
	SM_REQUIRE(dist_lines_parse((const uint8_t *)s, len, &f->b, f->series,
	    scale, &f->err) == 0);
	fx_finish(f);
}

/* The finished fx's total and its number of stacks. */
static void
check_counts(struct fx *f, int64_t total, uint32_t stacks)
{
	SM_CHECK_EQ(fx_total(f), total);
	SM_CHECK_EQ(fx_stacks(f), stacks);
}

/* Read tests/data/<name>, else ../shared/testdata/profiles/<name>. */
static unsigned char *
read_fixture(const char *name, size_t *len)
{
	char rel[512], path[1024];
	unsigned char *b;

	snprintf(rel, sizeof(rel), "tests/data/%s", name);
	if ((b = sm_test_read_file(sm_test_path(path, sizeof(path), rel),
	    len)) != NULL)
		return (b);
	snprintf(rel, sizeof(rel), "../shared/testdata/profiles/%s", name);
	return (sm_test_read_file(sm_test_path(path, sizeof(path), rel), len));
}

/* Parse a fixture as folded text into a fresh, finished fx. */
static void
fx_fixture(struct fx *f, const char *name)
{
	unsigned char *body;
	size_t len = 0;

	body = read_fixture(name, &len);
	if (body == NULL)
		SM_SKIP_CORPUS("%s absent (tests/data and ../shared/testdata/profiles)",
		    name);
	fx_init(f);
	SM_CHECKF(dist_folded_parse(body, len, &f->b, f->series, 1,
	    &f->err) == 0, "%s: %s", name, f->err.msg);
	free(body);
	fx_finish(f);
}

/* speedscope simple*.txt: a=14/0, b=14/5, c=5/5, d=4/4 (SOURCES.md). */
static void
check_simple(const char *name)
{
	struct fx f;

	fx_fixture(&f, name);
	check_frame(&f, "a", 14, 0);
	check_frame(&f, "b", 14, 5);
	check_frame(&f, "c", 5, 5);
	check_frame(&f, "d", 4, 4);
	check_counts(&f, 14, 3);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b;c"), 5);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b;d"), 4);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 5);
	/* Only a, b, c, d (and "") were interned: no \r, no BOM. */
	SM_CHECK_EQ(sm_strtab_count(&f.b.strings), 5);
	fx_fini(&f);
}

static void
test_speedscope_simple(void)
{
	check_simple("speedscope__simple.txt");
}

static void
test_speedscope_crlf(void)
{
	check_simple("speedscope__simple-crlf.txt");
}

static void
test_speedscope_utf16le(void)
{
	check_simple("speedscope__simple-utf16-le.txt");
}

static void
test_speedscope_utf16be(void)
{
	check_simple("speedscope__simple-utf16-be.txt");
}

static void
test_speedscope_recursion(void)
{
	struct fx f;

	fx_fixture(&f, "speedscope__recursion.txt");
	check_counts(&f, 10, 7);
	/* Recursive frames count once per stack in a frame's total. */
	check_frame(&f, "a", 9, 1);
	check_frame(&f, "b", 9, 5);
	check_frame(&f, "c", 4, 4);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b;a;b"), 2);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b;a;b;c"), 2);
	fx_fini(&f);
}

static void
test_speedscope_alternating(void)
{
	struct fx f;

	fx_fixture(&f, "speedscope__alternating.txt");
	check_counts(&f, 182, 2);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b") + fx_stack_value(&f, "c;d"),
	    182);
	fx_fini(&f);
}

static void
test_speedscope_tall(void)
{
	struct fx f;
	char name[2] = { 0, 0 };

	fx_fixture(&f, "speedscope__tall.txt");
	SM_CHECK_EQ(fx_total(&f), 1);
	SM_REQUIRE(fx_stacks(&f) == 1);
	SM_CHECK_EQ(sm_tree_depth(&f.b.tree, f.b.series[0].node[0]), 26);
	for (char c = 'a'; c <= 'z'; c++) {
		name[0] = c;
		check_frame(&f, name, 1, c == 'z');
	}
	fx_fini(&f);
}

/* Sum of the counts of a collapsed text, scanned independently. */
static int64_t
scan_counts(const unsigned char *t, size_t len, uint32_t *lines)
{
	int64_t sum = 0;
	size_t i = 0;

	*lines = 0;
	while (i < len) {
		size_t e = i, sp = (size_t)-1;

		while (e < len && t[e] != '\n') {
			if (t[e] == ' ')
				sp = e;
			e++;
		}
		if (sp != (size_t)-1) {
			sum += strtoll((const char *)t + sp + 1, NULL, 10);
			(*lines)++;
		}
		i = e + 1;
	}
	return (sum);
}

static void
test_flamegraph_collapsed(void)
{
	static const char *pats[] = {
		"tests/data/flamegraph__*-collapsed-*.txt",
		"../shared/testdata/profiles/flamegraph__*-collapsed-*.txt",
	};
	char pat[1024];
	glob_t g;
	size_t done = 0;

	for (size_t p = 0; p < SM_ARRAY_LEN(pats) && done == 0; p++) {
		if (glob(sm_test_path(pat, sizeof(pat), pats[p]), 0, NULL,
		    &g) != 0)
			continue;
		for (size_t i = 0; i < g.gl_pathc; i++) {
			struct fx f;
			size_t len = 0;
			unsigned char *body;
			uint32_t lines;
			int64_t want;

			body = sm_test_read_file(g.gl_pathv[i], &len);
			SM_REQUIRE(body != NULL);
			want = scan_counts(body, len, &lines);
			fx_init(&f);
			SM_CHECKF(dist_folded_parse(body, len, &f.b, f.series,
			    1, &f.err) == 0, "%s: %s", g.gl_pathv[i],
			    f.err.msg);
			fx_finish(&f);
			SM_CHECKF(fx_total(&f) == want && want > 0,
			    "%s: total %lld, want %lld", g.gl_pathv[i],
			    (long long)fx_total(&f), (long long)want);
			SM_CHECK(fx_stacks(&f) >= 1 && fx_stacks(&f) <= lines);
			fx_fini(&f);
			free(body);
			done++;
		}
		globfree(&g);
	}
	if (done == 0)
		SM_SKIP_CORPUS("no flamegraph__*-collapsed-*.txt (tests/data, "
		    "../shared/testdata/profiles)");
	SM_CHECK(done >= 8);
}

static void
test_bad_counts(void)
{
	static const char *bad[] = {
		"a;b 1\na;c x\n", "a;b 1.5", "a;b ", "a;b 99999999999999999999",
		"a;b 9223372036854775808", "a;b --1", "a;b +", "a;b -",
		"a;b 1 2 3x", "a;b 0x10", "a;b \xef\xbc\x91",
	};
	struct fx f;

	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++) {
		fx_init(&f);
		SM_CHECKF(parse_folded(&f, bad[i], 1) == SM_EMALFORMED,
		    "accepted: %s", bad[i]);
		SM_CHECK_EQ(f.err.code, SM_EMALFORMED);
		SM_CHECK(strstr(f.err.msg, "line") != NULL);
		fx_fini(&f);
	}
	fx_init(&f);
	SM_CHECK(parse_folded(&f, "ok 1\n\n# c 1\nok 2\na;c zz\n", 1) ==
	    SM_EMALFORMED);
	SM_CHECKF(strstr(f.err.msg, "line 5") != NULL &&
	    strstr(f.err.msg, "\"zz\"") != NULL, "%s", f.err.msg);
	fx_fini(&f);
}

/* Atoi syntax: signs accepted, counts <= 0 dropped, int64 bounds. */
static void
test_count_syntax(void)
{
	struct fx f;

	fx_folded(&f, "a +3\nb -3\nc 0\nd -0\ne 007\n"
	    "f 9223372036854775807\ng -9223372036854775808\n", 1);
	SM_CHECK_EQ(fx_stack_value(&f, "a"), 3);
	SM_CHECK_EQ(fx_stack_value(&f, "e"), 7);
	SM_CHECK_EQ(fx_stack_value(&f, "f"), INT64_MAX);
	SM_CHECK_EQ(fx_stacks(&f), 3);
	fx_fini(&f);
}

/* Skipped lines, CRLF, last line without newline, empty frames. */
static void
test_folded_lines_and_frames(void)
{
	struct fx f;

	fx_folded(&f, "# comment 12\n\nno_space_here\r\n"
	    "a;b 2\r\na;;b 3\n 4\na;b 5\r\n;x; 6\r\n\r\nlast 7", 1);
	SM_CHECK_EQ(fx_total(&f), 2 + 3 + 4 + 5 + 6 + 7);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 7);
	SM_CHECK_EQ(fx_stack_value(&f, "a;;b"), 3);
	SM_CHECK_EQ(fx_stack_value(&f, ""), 4);
	SM_CHECK_EQ(fx_stack_value(&f, ";x;"), 6);
	SM_CHECK_EQ(fx_stack_value(&f, "last"), 7);
	/* Frames with spaces: the count is after the LAST space. */
	fx_fini(&f);
	fx_folded(&f, "main;do work 10\n", 1);
	SM_CHECK_EQ(fx_stack_value(&f, "main;do work"), 10);
	fx_fini(&f);
	/* Empty body: nothing, no error. */
	fx_init(&f);
	SM_CHECK(dist_folded_parse((const uint8_t *)"", 0, &f.b, f.series, 1,
	    &f.err) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_total(&f), 0);
	fx_fini(&f);
}

static void
test_scale(void)
{
	struct fx f;

	fx_folded(&f, "a;b 3\na 1\n", 10000000);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 30000000);
	SM_CHECK_EQ(fx_total(&f), 40000000);
	fx_fini(&f);

	fx_init(&f);
	SM_CHECK(parse_folded(&f, "a 1\nb 1000\n", INT64_MAX / 100) ==
	    SM_EMALFORMED);
	SM_CHECKF(strstr(f.err.msg, "overflow") != NULL &&
	    strstr(f.err.msg, "line 2") != NULL, "%s", f.err.msg);
	fx_fini(&f);

	/* Exactly INT64_MAX is fine. */
	fx_folded(&f, "a 7\n", INT64_MAX / 7);
	SM_CHECK_EQ(fx_stack_value(&f, "a"), INT64_MAX / 7 * 7);
	fx_fini(&f);
}

static void
test_depth_cap(void)
{
	struct fx f;

	fx_init(&f);
	f.lim.max_depth = 3;
	SM_REQUIRE(parse_folded(&f, "a;b;c;d;e 2\na;b;c 1\na;b 4\n", 1) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b;c"), 3);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 4);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b;c;d"), 0);
	SM_CHECK_EQ(fx_total(&f), 7);
	fx_fini(&f);

	/* Default limit 1000: a 1500-frame stack keeps 1000 root frames. */
	{
		struct sm_buf s = SM_BUF_INIT;
		uint32_t nd;

		for (int i = 0; i < 1500; i++)
			sm_buf_printf(&s, "%sf%d", i ? ";" : "", i);
		sm_buf_puts(&s, " 1\n");
		SM_REQUIRE(sm_buf_error(&s) == 0);
		fx_folded(&f, s.b, 1);
		SM_REQUIRE(fx_stacks(&f) == 1);
		nd = f.b.series[0].node[0];
		SM_CHECK_EQ(sm_tree_depth(&f.b.tree, nd), 1000);
		SM_CHECK_STR(sm_strtab_str(&f.b.strings, f.b.tree.name[nd],
		    NULL), "f999");
		fx_fini(&f);
		sm_buf_fini(&s);
	}
}

static void
test_lines(void)
{
	static const char body[] = "a;b\na;b\r\nc\n\n\r\na;b;c\nc";
	struct fx f;

	fx_lines(&f, body, sizeof(body) - 1, 1);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 2);
	SM_CHECK_EQ(fx_stack_value(&f, "c"), 2);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b;c"), 1);
	SM_CHECK_EQ(fx_total(&f), 5);
	fx_fini(&f);

	/* Scaled; counts are not parsed ("x 5" is a frame). */
	fx_lines(&f, "x 5\nx 5\n", 8, 10);
	SM_CHECK_EQ(fx_stack_value(&f, "x 5"), 20);
	fx_fini(&f);

	/* UTF-16 works for lines too. */
	fx_lines(&f, "\xff\xfe" "a\0;\0b\0", 8, 1);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 1);
	fx_fini(&f);
}

static void
test_text_decode(void)
{
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;
	const char *out;
	size_t n;
	static const uint8_t plain[] = "a;b 1";
	static const uint8_t bom8[] = "\xef\xbb\xbf" "a;b 1";
	/* "a€😀" + unpaired high, unpaired low, high at the end. */
	static const uint8_t le[] = { 0xff, 0xfe, 'a', 0, 0xac, 0x20,
	    0x3d, 0xd8, 0x00, 0xde, 0x3d, 0xd8, 'x', 0, 0x00, 0xde,
	    0x3d, 0xd8 };
	static const uint8_t be[] = { 0xfe, 0xff, 0, 'a', 0x20, 0xac,
	    0xd8, 0x3d, 0xde, 0x00, 0xd8, 0x3d, 0, 'x', 0xde, 0x00,
	    0xd8, 0x3d };
	static const char want[] = "a\xe2\x82\xac\xf0\x9f\x98\x80"
	    "\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd";

	SM_REQUIRE(a != NULL);
	SM_REQUIRE(dist_text_decode(plain, 5, a, &out, &n, &err) == 0);
	SM_CHECK(out == (const char *)plain && n == 5);
	SM_REQUIRE(dist_text_decode(bom8, 8, a, &out, &n, &err) == 0);
	SM_CHECK(out == (const char *)bom8 + 3 && n == 5);
	SM_REQUIRE(dist_text_decode(le, sizeof(le), a, &out, &n, &err) == 0);
	SM_CHECK_EQ(n, sizeof(want) - 1);
	SM_CHECK(memcmp(out, want, sizeof(want) - 1) == 0);
	SM_REQUIRE(dist_text_decode(be, sizeof(be), a, &out, &n, &err) == 0);
	SM_CHECK_EQ(n, sizeof(want) - 1);
	SM_CHECK(memcmp(out, want, sizeof(want) - 1) == 0);
	/* BOM only: empty text. */
	SM_REQUIRE(dist_text_decode(le, 2, a, &out, &n, &err) == 0);
	SM_CHECK_EQ(n, 0);
	/* Odd UTF-16 length. */
	SM_CHECK_EQ(dist_text_decode(le, 5, a, &out, &n, &err),
	    SM_EMALFORMED);
	SM_CHECK(strstr(err.msg, "odd") != NULL);
	/* Arena budget exhausted. */
	{
		struct sm_arena *tiny = sm_arena_create(4);

		SM_REQUIRE(tiny != NULL);
		SM_CHECK_EQ(dist_text_decode(le, sizeof(le), tiny, &out, &n,
		    &err), SM_ENOMEM);
		sm_arena_destroy(tiny);
	}
	sm_arena_destroy(a);
}

/* --- trie -------------------------------------------------------------- */

struct tbuf {
	uint8_t b[512];
	size_t n;
};

static void
tb_uvarint(struct tbuf *t, uint64_t v)
{
	while (v >= 0x80) {
		t->b[t->n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	t->b[t->n++] = (uint8_t)v;
}

static void
tb_node(struct tbuf *t, const char *name, uint64_t value, uint64_t kids)
{
	tb_uvarint(t, strlen(name));
	memcpy(t->b + t->n, name, strlen(name));
	t->n += strlen(name);
	tb_uvarint(t, value);
	tb_uvarint(t, kids);
}

/*
 * Keys a;b=3, a;c=2, a=1, main.f;g=300, x=5 as a byte-prefix trie:
 *   "" {"a"=1 {";" {"b"=3, "c"=2}}, "main.f" {";g"=300}, "x"=5}
 */
static void
tb_sample(struct tbuf *t)
{
	t->n = 0;
	tb_node(t, "", 0, 3);
	tb_node(t, "a", 1, 1);
	tb_node(t, ";", 0, 2);
	tb_node(t, "b", 3, 0);
	tb_node(t, "c", 2, 0);
	tb_node(t, "main.f", 0, 1);
	tb_node(t, ";g", 300, 0);
	tb_node(t, "x", 5, 0);
}

static int
parse_trie(struct fx *f, const struct tbuf *t, size_t n, int64_t scale)
{
	return (dist_trie_parse(t->b, n, &f->b, f->series, scale, &f->err));
}

static void
test_trie(void)
{
	struct tbuf t;
	struct fx f;

	tb_sample(&t);
	fx_init(&f);
	SM_REQUIRE(parse_trie(&f, &t, t.n, 1) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 3);
	SM_CHECK_EQ(fx_stack_value(&f, "a;c"), 2);
	SM_CHECK_EQ(fx_stack_value(&f, "a"), 1);
	SM_CHECK_EQ(fx_stack_value(&f, "main.f;g"), 300);
	SM_CHECK_EQ(fx_stack_value(&f, "x"), 5);
	check_counts(&f, 311, 5);
	check_frame(&f, "a", 6, 1);
	fx_fini(&f);

	/* Scaled. */
	fx_init(&f);
	SM_REQUIRE(parse_trie(&f, &t, t.n, 10) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_total(&f), 3110);
	fx_fini(&f);

	/* Two tries back to back (Pyroscope reads until EOF). */
	{
		struct tbuf t2;

		tb_sample(&t2);
		memcpy(t2.b + t2.n, t.b, t.n);
		t2.n += t.n;
		fx_init(&f);
		SM_REQUIRE(parse_trie(&f, &t2, t2.n, 1) == 0);
		fx_finish(&f);
		SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 6);
		SM_CHECK_EQ(fx_total(&f), 622);
		fx_fini(&f);
	}

	/* Empty body: nothing. */
	fx_init(&f);
	SM_CHECK(parse_trie(&f, &t, 0, 1) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_total(&f), 0);
	fx_fini(&f);

	/* A single root with a value and a depth cap. */
	t.n = 0;
	tb_node(&t, "p;q;r;s", 9, 0);
	fx_init(&f);
	f.lim.max_depth = 2;
	SM_REQUIRE(parse_trie(&f, &t, t.n, 1) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_stack_value(&f, "p;q"), 9);
	fx_fini(&f);
}

/* Every proper prefix of t is refused by `parse` as malformed, naming
 * the format `what`. */
static void
check_prefixes(const struct tbuf *t, int (*parse)(const uint8_t *, size_t,
    struct dist_batch *, uint32_t, int64_t, struct sm_err *),
    const char *what)
{
	for (size_t n = 1; n < t->n; n++) {
		struct fx f;

		fx_init(&f);
		SM_CHECKF(parse(t->b, n, &f.b, f.series, 1, &f.err) ==
		    SM_EMALFORMED, "%s: prefix of %zu/%zu bytes accepted", what,
		    n, t->n);
		SM_CHECK(strstr(f.err.msg, what) != NULL);
		fx_fini(&f);
	}
}

/*
 * The same stacks as og's dictionary-free tree: one path component a
 * node, root "" (its value 7 is not counted):
 *   "" =7 {a=1 {b=3, c=2}, main.f {g=300}, x=5, "" =4 {y=6}}
 * The nameless first-level node's own 4 is not counted either, its
 * child is the stack ";y" (an empty frame, then y), as Pyroscope reads.
 */
static void
tb_tree(struct tbuf *t)
{
	t->n = 0;
	tb_node(t, "", 7, 4);
	tb_node(t, "a", 1, 2);
	tb_node(t, "b", 3, 0);
	tb_node(t, "c", 2, 0);
	tb_node(t, "main.f", 0, 1);
	tb_node(t, "g", 300, 0);
	tb_node(t, "x", 5, 0);
	tb_node(t, "", 4, 1);
	tb_node(t, "y", 6, 0);
}

static void
test_tree(void)
{
	struct tbuf t;
	struct fx f;

	tb_tree(&t);
	fx_init(&f);
	SM_REQUIRE(dist_tree_parse(t.b, t.n, &f.b, f.series, 1, &f.err) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_stack_value(&f, "a;b"), 3);
	SM_CHECK_EQ(fx_stack_value(&f, "a;c"), 2);
	SM_CHECK_EQ(fx_stack_value(&f, "a"), 1);
	SM_CHECK_EQ(fx_stack_value(&f, "main.f;g"), 300);
	SM_CHECK_EQ(fx_stack_value(&f, "x"), 5);
	SM_CHECK_EQ(fx_stack_value(&f, ";y"), 6);
	SM_CHECK_EQ(fx_total(&f), 317);
	fx_fini(&f);

	/* Scaled; bytes after the root's subtree ignored. */
	t.b[t.n++] = 0x05;
	fx_init(&f);
	SM_REQUIRE(dist_tree_parse(t.b, t.n, &f.b, f.series, 10, &f.err) ==
	    0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_total(&f), 3170);
	fx_fini(&f);

	/* A name holding ';' is several frames; a depth cap keeps the
	 * root side. */
	t.n = 0;
	tb_node(&t, "root", 0, 1);
	tb_node(&t, "p;q", 0, 1);
	tb_node(&t, "r", 9, 0);
	fx_init(&f);
	f.lim.max_depth = 2;
	SM_REQUIRE(dist_tree_parse(t.b, t.n, &f.b, f.series, 1, &f.err) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_stack_value(&f, "p;q"), 9);
	fx_fini(&f);

	/* An empty body is malformed; a lone root is an empty profile. */
	fx_init(&f);
	SM_CHECK(dist_tree_parse(t.b, 0, &f.b, f.series, 1, &f.err) ==
	    SM_EMALFORMED);
	fx_fini(&f);
	t.n = 0;
	tb_node(&t, "", 5, 0);
	fx_init(&f);
	SM_CHECK(dist_tree_parse(t.b, t.n, &f.b, f.series, 1, &f.err) == 0);
	fx_finish(&f);
	SM_CHECK_EQ(fx_total(&f), 0);
	fx_fini(&f);

	/* Every proper prefix is truncated. */
	tb_tree(&t);
	check_prefixes(&t, dist_tree_parse, "tree");
	/* More children than the bytes left can hold. */
	t.n = 0;
	tb_node(&t, "", 0, 1000);
	tb_node(&t, "a", 1, 0);
	fx_init(&f);
	SM_CHECK(dist_tree_parse(t.b, t.n, &f.b, f.series, 1, &f.err) ==
	    SM_EMALFORMED);
	SM_CHECK(strstr(f.err.msg, "cannot fit") != NULL);
	fx_fini(&f);
}

/* Every proper prefix of a trie is truncated; none may be accepted. */
static void
test_trie_truncated(void)
{
	struct tbuf t;

	tb_sample(&t);
	check_prefixes(&t, dist_trie_parse, "trie");
}

static void
test_trie_malformed(void)
{
	struct tbuf t;
	struct fx f;

	/* A child count the remaining bytes cannot hold. */
	t.n = 0;
	tb_node(&t, "", 0, 1000000);
	tb_node(&t, "a", 1, 0);
	fx_init(&f);
	SM_CHECK_EQ(parse_trie(&f, &t, t.n, 1), SM_EMALFORMED);
	SM_CHECK(strstr(f.err.msg, "children") != NULL);
	fx_fini(&f);

	/* A name longer than the body. */
	t.n = 0;
	tb_uvarint(&t, 1000);
	t.b[t.n++] = 'a';
	fx_init(&f);
	SM_CHECK_EQ(parse_trie(&f, &t, t.n, 1), SM_EMALFORMED);
	fx_fini(&f);

	/* A varint of 11 bytes; one whose 10th byte overflows. */
	t.n = 0;
	for (int i = 0; i < 11; i++)
		t.b[t.n++] = 0xff;
	fx_init(&f);
	SM_CHECK_EQ(parse_trie(&f, &t, t.n, 1), SM_EMALFORMED);
	SM_CHECK(strstr(f.err.msg, "overflows") != NULL);
	fx_fini(&f);

	/* A value above INT64_MAX, then a value that overflows when scaled. */
	t.n = 0;
	tb_node(&t, "a", (uint64_t)INT64_MAX + 1, 0);
	fx_init(&f);
	SM_CHECK_EQ(parse_trie(&f, &t, t.n, 1), SM_EMALFORMED);
	fx_fini(&f);
	t.n = 0;
	tb_node(&t, "a", 1000, 0);
	fx_init(&f);
	SM_CHECK_EQ(parse_trie(&f, &t, t.n, INT64_MAX / 100), SM_EMALFORMED);
	SM_CHECK(strstr(f.err.msg, "overflow") != NULL);
	fx_fini(&f);
	fx_init(&f);
	SM_CHECK_EQ(parse_trie(&f, &t, t.n, INT64_MAX / 1000), 0);
	fx_fini(&f);
}

/* A deep trie (one name per level) must not recurse. */
static void
test_trie_deep(void)
{
	enum { D = 20000 };
	uint8_t *b = malloc(D * 4 + 16);
	struct fx f;
	size_t n = 0;

	SM_REQUIRE(b != NULL);
	for (int i = 0; i < D; i++) {
		b[n++] = 1;
		b[n++] = i == 0 ? 'r' : ';';   /* keys r, r;, r;;, ... */
		b[n++] = i == D - 1 ? 1 : 0;
		b[n++] = i == D - 1 ? 0 : 1;
	}
	fx_init(&f);
	f.lim.max_depth = 0;            /* no cap */
	SM_REQUIRE(dist_trie_parse(b, n, &f.b, f.series, 1, &f.err) == 0);
	fx_finish(&f);
	SM_REQUIRE(fx_stacks(&f) == 1);
	SM_CHECK_EQ(sm_tree_depth(&f.b.tree, f.b.series[0].node[0]), D);
	fx_fini(&f);
	free(b);
}

/* Random and mutated bodies: a clean result or a clean error, no crash. */
static void
test_random_bodies(void)
{
	static const uint8_t alpha[] = { 'a', ';', ' ', '1', '\n', '\r', '#',
	    '-', '+', 0, 0xff, 0xfe, 0xd8, 0x80 };
	uint64_t st = 0x2545f4914f6cdd1dULL;
	struct tbuf t;

	for (int it = 0; it < 3000; it++) {
		uint8_t body[96];
		size_t n;
		struct fx f;
		int rv[4];

		st ^= st << 13;
		st ^= st >> 7;
		st ^= st << 17;
		n = st % sizeof(body);
		if (it % 3 == 0) {
			tb_sample(&t);
			memcpy(body, t.b, SM_MIN(t.n, sizeof(body)));
			n = SM_MIN(t.n, sizeof(body));
		}
		for (size_t i = 0; i < n; i++) {
			st ^= st << 13;
			st ^= st >> 7;
			st ^= st << 17;
			if (it % 3 == 0) {
				if (st % 8 == 0)
					body[i] = (uint8_t)(st >> 8);
			} else {
				body[i] = alpha[(st >> 8) % sizeof(alpha)];
			}
		}
		fx_init(&f);
		f.lim.max_depth = 4;
		rv[0] = dist_folded_parse(body, n, &f.b, f.series, 3, &f.err);
		rv[1] = dist_lines_parse(body, n, &f.b, f.series, 3, &f.err);
		rv[2] = dist_trie_parse(body, n, &f.b, f.series, 3, &f.err);
		rv[3] = dist_tree_parse(body, n, &f.b, f.series, 3, &f.err);
		for (int k = 0; k < 4; k++)
			SM_CHECKF(rv[k] == 0 || rv[k] == SM_EMALFORMED,
			    "iteration %d parser %d: %d", it, k, rv[k]);
		fx_finish(&f);
		fx_fini(&f);
		if (sm_test_st.failed != 0)
			break;
	}
}

SM_TEST_MAIN(
	{ "speedscope simple.txt", test_speedscope_simple },
	{ "speedscope simple-crlf.txt", test_speedscope_crlf },
	{ "speedscope simple-utf16-le.txt", test_speedscope_utf16le },
	{ "speedscope simple-utf16-be.txt", test_speedscope_utf16be },
	{ "speedscope recursion.txt", test_speedscope_recursion },
	{ "speedscope alternating.txt", test_speedscope_alternating },
	{ "speedscope tall.txt", test_speedscope_tall },
	{ "FlameGraph collapsed goldens: totals", test_flamegraph_collapsed },
	{ "bad counts fail with the line", test_bad_counts },
	{ "count syntax as strconv.Atoi", test_count_syntax },
	{ "skipped lines, CRLF, empty frames", test_folded_lines_and_frames },
	{ "scale and overflow", test_scale },
	{ "depth cap keeps root frames", test_depth_cap },
	{ "lines format", test_lines },
	{ "text decoding (BOMs, UTF-16)", test_text_decode },
	{ "trie format", test_trie },
	{ "trie: every truncation fails", test_trie_truncated },
	{ "trie: malformed nodes", test_trie_malformed },
	{ "trie: 20k deep", test_trie_deep },
	{ "tree format (og, dictionary-free)", test_tree },
	{ "random and mutated bodies", test_random_bodies },
)
