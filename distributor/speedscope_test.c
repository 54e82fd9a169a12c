/*
 * speedscope_test.c -- speedscope's file format into a batch: speedscope's
 * own sample files (evented and sampled, one profile and two), the
 * series names and values each unit gives, merging, depth, escapes, and
 * errors: every kind of bad profile, every truncation, random bytes.
 */
#include "distributor/speedscope.h"

#include <stdio.h>

#include "sm_test.h"

#define SCHEMA "\"$schema\":\"https://www.speedscope.app/file-format-schema.json\""

struct fx {
	struct sm_arena *a;
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	int rv;
};

/* Ingest `doc` as an upload named `name` at sampleRate `rate`; the
 * result in f->rv (the batch is finished when it is 0). */
static void
fx_run(struct fx *f, const char *doc, size_t len, const char *name,
    uint32_t rate)
{
	struct dist_key key;

	memset(f, 0, sizeof(*f));
	f->a = sm_arena_create(0);
	SM_REQUIRE(f->a != NULL);
	dist_limits_default(&f->lim);
	SM_REQUIRE(dist_batch_init(&f->b, f->a, &f->lim) == 0);
	SM_REQUIRE(dist_key_parse(name, f->a, &key, &f->err) == 0);
	f->rv = dist_speedscope_ingest((const uint8_t *)doc, len, &key, rate,
	    "unknown", 1000, f->a, &f->b, &f->err);
	if (f->rv == 0)
		SM_REQUIRE(dist_batch_finish(&f->b) == 0);
}

static void
fx_fini(struct fx *f)
{
	dist_batch_fini(&f->b);
	sm_arena_destroy(f->a);
}

static const char *
label(const struct dist_series *s, const char *name)
{
	for (uint32_t i = 0; i < s->nlabels; i++)
		if (strcmp(s->labels[i].name, name) == 0)
			return (s->labels[i].value);
	return (NULL);
}

/* The series whose profile_name is pn (NULL: none), or NULL. */
static const struct dist_series *
series_of(const struct fx *f, const char *pn)
{
	for (uint32_t i = 0; i < f->b.nseries; i++) {
		const char *v = label(&f->b.series[i], "profile_name");

		if ((pn == NULL && v == NULL) || (pn != NULL && v != NULL &&
		    strcmp(v, pn) == 0))
			return (&f->b.series[i]);
	}
	return (NULL);
}

/* Series s as "stack=value" lines in node order, into buf. */
static const char *
dump(const struct fx *f, const struct dist_series *s, char *buf, size_t n)
{
	size_t k = 0;

	buf[0] = '\0';
	for (uint32_t j = 0; s != NULL && j < s->n; j++) {
		uint32_t path[64], d = 0;

		for (uint32_t nd = s->node[j]; nd != 0 && d < 64;
		    nd = f->b.tree.parent[nd])
			path[d++] = nd;
		while (d > 0 && k < n) {
			uint32_t len;
			const char *name = sm_strtab_str(&f->b.strings,
			    f->b.tree.name[path[--d]], &len);

			k += (size_t)snprintf(buf + k, n - k, "%.*s%s",
			    (int)len, name, d > 0 ? ";" : "");
		}
		if (k < n)
			k += (size_t)snprintf(buf + k, n - k, "=%lld ",
			    (long long)s->value[j]);
	}
	return (buf);
}

static char *
read_data(const char *name, size_t *len)
{
	char rel[256], path[1024];

	snprintf(rel, sizeof(rel), "tests/data/%s", name);
	return ((char *)sm_test_read_file(sm_test_path(path, sizeof(path),
	    rel), len));
}

/* speedscope's sample files, all the stacks of simple.txt. */
static void
test_sample_files(void)
{
	static const struct {
		const char *file, *name, *profile, *type, *stacks;
	} cases[] = {
		/* unit none, cpu: a sample is 10 ms at 100 Hz */
		{ "speedscope__simple.speedscope.json", "app", "simple.txt",
		    "process_cpu", "a;b=50000000 a;b;c=50000000 "
		    "a;b;d=40000000 " },
		{ "speedscope__simple-no-pretty-print.speedscope.json", "app",
		    "simple.txt", "process_cpu", "a;b=50000000 "
		    "a;b;c=50000000 a;b;d=40000000 " },
		/* unit seconds: nanoseconds */
		{ "speedscope__simple-sampled.speedscope.json", "app",
		    "simple.speedscope.json", "process_cpu",
		    "a;b=5000000000 a;b;c=5000000000 a;b;d=4000000000 " },
		/* as alloc_objects: the weights themselves */
		{ "speedscope__simple.speedscope.json", "app.alloc_objects",
		    "simple.txt", "memory", "a;b=5 a;b;c=5 a;b;d=4 " },
		/* two profiles: named by unit, seconds is wall */
		{ "speedscope__two-sampled.speedscope.json", "app", "one",
		    "wall", "a;b=5000000000 a;b;c=5000000000 "
		    "a;b;d=4000000000 " },
		{ "speedscope__two-sampled.speedscope.json", "app", "two",
		    "wall", "a;b=5000000000 a;b;c=5000000000 "
		    "a;b;d=4000000000 " },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		struct fx f;
		const struct dist_series *s;
		char buf[512];
		size_t len;
		char *doc = read_data(cases[i].file, &len);

		if (doc == NULL)
			SM_SKIP_CORPUS("tests/data/%s absent", cases[i].file);
		fx_run(&f, doc, len, cases[i].name, 100);
		SM_CHECKF(f.rv == 0, "%s: %s", cases[i].file, f.err.msg);
		s = series_of(&f, cases[i].profile);
		SM_CHECKF(s != NULL, "%s: no series %s", cases[i].file,
		    cases[i].profile);
		if (s != NULL) {
			SM_CHECK_STR(label(s, "__name__"), cases[i].type);
			SM_CHECK_STR(label(s, "service_name"), "app");
			SM_CHECK_STR(dump(&f, s, buf, sizeof(buf)),
			    cases[i].stacks);
		}
		fx_fini(&f);
		free(doc);
	}
}

/* Units and rates give nanoseconds, sample counts or the weights. */
static void
test_units(void)
{
	static const struct {
		const char *unit, *name;
		uint32_t rate;
		const char *type, *stacks;
	} cases[] = {
		{ "nanoseconds", "app", 100, "process_cpu", "f=2 " },
		{ "microseconds", "app", 100, "process_cpu", "f=1500 " },
		{ "milliseconds", "app", 100, "process_cpu", "f=1500000 " },
		{ "seconds", "app", 100, "process_cpu", "f=1500000000 " },
		/* 1.5 samples at 100 Hz, then at 1000 Hz */
		{ "none", "app", 100, "process_cpu", "f=15000000 " },
		{ "none", "app", 1000, "process_cpu", "f=1500000 " },
		/* bytes at the default rate: counts (v1's rate 0) */
		{ "bytes", "app", 100, "process_cpu", "f=2 " },
		{ "milliseconds", "app.wall", 100, "wall", "f=1500000 " },
		/* sampleRate=0: samples:count, the weight rounded */
		{ "seconds", "app", 0, "process_cpu", "f=2 " },
		{ "bytes", "app.alloc_space", 100, "memory", "f=2 " },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		struct fx f;
		char doc[512], buf[256];
		const struct dist_series *s;

		snprintf(doc, sizeof(doc), "{" SCHEMA ",\"shared\":{\"frames\":"
		    "[{\"name\":\"f\"}]},\"profiles\":[{\"type\":\"sampled\","
		    "\"name\":\"p\",\"unit\":\"%s\",\"startValue\":0,"
		    "\"samples\":[[0],[0]],\"weights\":[1,0.5]}]}",
		    cases[i].unit);
		fx_run(&f, doc, strlen(doc), cases[i].name, cases[i].rate);
		SM_CHECKF(f.rv == 0, "%s: %s", cases[i].unit, f.err.msg);
		s = series_of(&f, "p");
		SM_CHECKF(s != NULL, "%s: no series", cases[i].unit);
		if (s != NULL) {
			SM_CHECK_STR(label(s, "__name__"), cases[i].type);
			SM_CHECKF(strcmp(dump(&f, s, buf, sizeof(buf)),
			    cases[i].stacks) == 0, "%s %s rate %u: %s, want %s",
			    cases[i].unit, cases[i].name, cases[i].rate, buf,
			    cases[i].stacks);
		}
		fx_fini(&f);
	}
}

/* Evented: nested frames, fractional times, self time of each level. */
static void
test_evented(void)
{
	const char *doc = "{" SCHEMA ",\"shared\":{\"frames\":[{\"name\":"
	    "\"main\"},{\"name\":\"work\"},{\"name\":\"io\"}]},\"profiles\":"
	    "[{\"type\":\"evented\",\"name\":\"t\",\"unit\":\"milliseconds\","
	    "\"startValue\":10,\"endValue\":20,\"events\":["
	    "{\"type\":\"O\",\"at\":10,\"frame\":0},"
	    "{\"type\":\"O\",\"at\":10.25,\"frame\":1},"
	    "{\"type\":\"O\",\"at\":11,\"frame\":2},"
	    "{\"type\":\"C\",\"at\":11.5,\"frame\":2},"
	    "{\"type\":\"C\",\"at\":13,\"frame\":1},"
	    "{\"type\":\"O\",\"at\":13,\"frame\":2},"
	    "{\"at\":14,\"type\":\"C\",\"frame\":2},"
	    "{\"type\":\"O\",\"at\":15,\"frame\":1}]}]}";
	struct fx f;
	char buf[256];

	fx_run(&f, doc, strlen(doc), "app", 100);
	SM_CHECKF(f.rv == 0, "%s", f.err.msg);
	/* main self 0.25 + 1 (14..15); work 0.75 + 1.5; main;io 1 ms;
	 * work stays open after the last event: nothing after it. */
	SM_CHECK_STR(dump(&f, series_of(&f, "t"), buf, sizeof(buf)),
	    "main=1250000 main;work=2250000 main;work;io=500000 "
	    "main;io=1000000 ");
	fx_fini(&f);
}

/* Equal profiles are one series; a file with several is named by unit,
 * and unit none is then an unknown type, as v1. */
static void
test_merge_and_names(void)
{
	const char *same = "{" SCHEMA ",\"shared\":{\"frames\":[{\"name\":"
	    "\"f\"}]},\"profiles\":["
	    "{\"type\":\"sampled\",\"name\":\"p\",\"unit\":\"none\","
	    "\"startValue\":0,\"samples\":[[0]],\"weights\":[1]},"
	    "{\"type\":\"sampled\",\"name\":\"p\",\"unit\":\"none\","
	    "\"startValue\":0,\"samples\":[[0]],\"weights\":[2]}]}";
	const char *two = "{" SCHEMA ",\"shared\":{\"frames\":[{\"name\":"
	    "\"f\"}]},\"profiles\":["
	    "{\"type\":\"sampled\",\"name\":\"p\",\"unit\":\"none\","
	    "\"samples\":[[0]],\"weights\":[1]},"
	    "{\"type\":\"sampled\",\"name\":\"q\",\"unit\":\"none\","
	    "\"samples\":[[0]],\"weights\":[2]}]}";
	const char *bytes = "{" SCHEMA ",\"shared\":{\"frames\":[{\"name\":"
	    "\"f\"}]},\"profiles\":["
	    "{\"type\":\"sampled\",\"name\":\"p\",\"unit\":\"bytes\","
	    "\"samples\":[[0]],\"weights\":[1]},"
	    "{\"type\":\"sampled\",\"name\":\"\",\"unit\":\"bytes\","
	    "\"samples\":[[0]],\"weights\":[2]}]}";
	struct fx f;
	char buf[256];

	fx_run(&f, same, strlen(same), "app.alloc_objects{env=x}", 100);
	SM_CHECKF(f.rv == 0, "%s", f.err.msg);
	SM_CHECK_EQ(f.b.nseries, 1u);
	SM_CHECK_STR(dump(&f, series_of(&f, "p"), buf, sizeof(buf)),
	    "f=3 ");
	SM_CHECK_STR(label(&f.b.series[0], "env"), "x");
	fx_fini(&f);

	fx_run(&f, two, strlen(two), "app", 100);
	SM_CHECK_EQ(f.rv, SM_EINVAL);
	SM_CHECK_STR(f.err.msg, "unknown profile type: none");
	fx_fini(&f);

	/* bytes: memory:samples:bytes; an empty name gives no label */
	fx_run(&f, bytes, strlen(bytes), "app", 100);
	SM_CHECKF(f.rv == 0, "%s", f.err.msg);
	SM_CHECK_EQ(f.b.nseries, 2u);
	SM_CHECK_STR(dump(&f, series_of(&f, "p"), buf, sizeof(buf)),
	    "f=1 ");
	SM_CHECK_STR(dump(&f, series_of(&f, NULL), buf, sizeof(buf)),
	    "f=2 ");
	if (series_of(&f, NULL) != NULL) {
		SM_CHECK_STR(label(series_of(&f, NULL), "__name__"),
		    "memory");
		SM_CHECK_STR(label(series_of(&f, NULL), "__type__"),
		    "samples");
	}
	fx_fini(&f);
}

/* Escapes in frame names; stacks past max_depth keep the root. */
static void
test_escapes_and_depth(void)
{
	const char *doc = "{" SCHEMA ",\"shared\":{\"frames\":["
	    "{\"name\":\"caf\\u00e9\",\"file\":\"x.py\",\"line\":3},"
	    "{\"name\":\"\\ud83d\\ude00 \\\"q\\\" \\\\ \\/\"},"
	    "{\"name\":\"lone \\ud800!\"}]},\"profiles\":["
	    "{\"type\":\"sampled\",\"name\":\"p\",\"unit\":\"none\","
	    "\"samples\":[[0,1,2]],\"weights\":[1]}]}";
	const char *deep = "{" SCHEMA ",\"shared\":{\"frames\":[{\"name\":"
	    "\"a\"},{\"name\":\"b\"},{\"name\":\"c\"}]},\"profiles\":["
	    "{\"type\":\"sampled\",\"name\":\"p\",\"unit\":\"bytes\","
	    "\"samples\":[[0,1,2]],\"weights\":[1]},"
	    "{\"type\":\"evented\",\"name\":\"p\",\"unit\":\"bytes\","
	    "\"events\":[{\"type\":\"O\",\"at\":0,\"frame\":0},"
	    "{\"type\":\"O\",\"at\":0,\"frame\":1},{\"type\":\"O\",\"at\":0,"
	    "\"frame\":2},{\"type\":\"C\",\"at\":2,\"frame\":2}]}]}";
	struct fx f;
	char buf[256];

	fx_run(&f, doc, strlen(doc), "app.alloc_objects", 100);
	SM_CHECKF(f.rv == 0, "%s", f.err.msg);
	SM_CHECK_STR(dump(&f, series_of(&f, "p"), buf, sizeof(buf)),
	    "caf\xc3\xa9;\xf0\x9f\x98\x80 \"q\" \\ /;lone \xef\xbf\xbd!=1 ");
	fx_fini(&f);

	memset(&f, 0, sizeof(f));
	f.a = sm_arena_create(0);
	SM_REQUIRE(f.a != NULL);
	dist_limits_default(&f.lim);
	f.lim.max_depth = 2;
	SM_REQUIRE(dist_batch_init(&f.b, f.a, &f.lim) == 0);
	{
		struct dist_key key;

		SM_REQUIRE(dist_key_parse("app.alloc_objects", f.a, &key,
		    &f.err) == 0);
		f.rv = dist_speedscope_ingest((const uint8_t *)deep,
		    strlen(deep), &key, 100, "", 1000, f.a, &f.b, &f.err);
	}
	SM_CHECKF(f.rv == 0, "%s", f.err.msg);
	SM_REQUIRE(dist_batch_finish(&f.b) == 0);
	/* sampled a;b;c and evented a;b;c (2) both cut to a;b, in one
	 * series: two profiles, so named by unit (bytes), both "p" */
	SM_CHECK_STR(dump(&f, series_of(&f, "p"), buf, sizeof(buf)),
	    "a;b=3 ");
	fx_fini(&f);
}

/* Each bad document fails with its message, and nothing crashes. */
static void
test_errors(void)
{
#define P(x) "{" SCHEMA ",\"shared\":{\"frames\":[{\"name\":\"a\"}," \
	"{\"name\":\"b\"}]},\"profiles\":[" x "]}"
	static const struct {
		const char *doc, *msg;
	} cases[] = {
		{ "", "speedscope: the document is not a JSON object" },
		{ "[]", "speedscope: the document is not a JSON object" },
		{ "{}", "speedscope: unknown schema: " },
		{ "{\"$schema\":\"https://example.com\"}",
		    "speedscope: unknown schema: https://example.com" },
		{ "{" SCHEMA "} x", "speedscope: data after the document at "
		    "byte 65" },
		{ "{" SCHEMA ",}", "speedscope: expected '\"' at byte 64" },
		{ "{" SCHEMA ",\"profiles\":{}}", "speedscope: \"profiles\" "
		    "is not an array" },
		{ P("{\"type\":\"sampled\",\"unit\":\"years\"}"),
		    "speedscope: invalid profile unit: years" },
		{ P("{\"type\":\"flat\",\"unit\":\"none\"}"),
		    "speedscope: profile type flat not supported" },
		{ P("{\"unit\":\"none\"}"),
		    "speedscope: profile type  not supported" },
		{ P("{\"type\":\"sampled\",\"unit\":\"none\",\"samples\":[[2]],"
		    "\"weights\":[1]}"), "speedscope: invalid frame 2 (the "
		    "file has 2)" },
		{ P("{\"type\":\"sampled\",\"unit\":\"none\",\"samples\":[[0.5]],"
		    "\"weights\":[1]}"), "speedscope: invalid frame 0.5 (the "
		    "file has 2)" },
		{ P("{\"type\":\"sampled\",\"unit\":\"none\",\"samples\":[[0]],"
		    "\"weights\":[-1]}"), "speedscope: negative weight -1" },
		{ P("{\"type\":\"sampled\",\"unit\":\"none\",\"samples\":[[0]],"
		    "\"weights\":[\"1\"]}"), "speedscope: a weight is not a "
		    "number" },
		{ P("{\"type\":\"sampled\",\"unit\":\"none\",\"samples\":[[0],"
		    "[1]],\"weights\":[1]}"), "speedscope: unequal lengths of "
		    "samples and weights: 2 != 1" },
		{ P("{\"type\":\"sampled\",\"unit\":\"none\",\"samples\":[0],"
		    "\"weights\":[1]}"), "speedscope: a sample is not an "
		    "array" },
		{ P("{\"type\":\"evented\",\"unit\":\"none\",\"startValue\":5,"
		    "\"events\":[{\"type\":\"O\",\"at\":4,\"frame\":0}]}"),
		    "speedscope: events out of order, 4 < 5" },
		{ P("{\"type\":\"evented\",\"unit\":\"none\",\"events\":["
		    "{\"type\":\"C\",\"at\":1,\"frame\":0}]}"),
		    "speedscope: no stack to close at 1" },
		{ P("{\"type\":\"evented\",\"unit\":\"none\",\"events\":["
		    "{\"type\":\"O\",\"at\":1,\"frame\":0},{\"type\":\"C\","
		    "\"at\":2,\"frame\":1}]}"),
		    "speedscope: closing non-open frame 1" },
		{ P("{\"type\":\"evented\",\"unit\":\"none\",\"events\":["
		    "{\"type\":\"X\",\"at\":1,\"frame\":0}]}"),
		    "speedscope: unknown event type X" },
		{ P("{\"type\":\"sampled\",\"unit\":\"seconds\",\"samples\":"
		    "[[0]],\"weights\":[1e300]}"), "speedscope: value "
		    "overflows" },
		{ "{" SCHEMA ",\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
		    "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
		    "speedscope: nesting too deep at byte 100" },
		{ "{" SCHEMA ",\"x\":\"a\\qb\"}", "speedscope: bad escape in "
		    "a string at byte 74" },
		{ "{" SCHEMA ",\"x\":\"\\u12\"}", "speedscope: bad \\u escape "
		    "at byte 74" },
		{ "{" SCHEMA ",\"x\":01}", "speedscope: expected ',' at byte "
		    "69" },
		{ "{" SCHEMA ",\"x\":1.}", "speedscope: bad number at byte 68" },
		{ "{" SCHEMA ",\"x\":tru}", "speedscope: unexpected character "
		    "at byte 68" },
		{ "{" SCHEMA ",\"x\":\"a\nb\"}", "speedscope: control "
		    "character in a string at byte 69" },
	};
#undef P

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		struct fx f;

		fx_run(&f, cases[i].doc, strlen(cases[i].doc), "app", 100);
		SM_CHECKF(f.rv == SM_EINVAL && strcmp(f.err.msg,
		    cases[i].msg) == 0, "case %zu: %d \"%s\", want \"%s\"", i,
		    f.rv, f.err.msg, cases[i].msg);
		fx_fini(&f);
	}
}

/* Every proper prefix of a sample file fails; so does each of its bytes
 * replaced, or passes -- without a crash, a leak or a stray value. */
static void
test_truncations_and_mutations(void)
{
	size_t len;
	char *doc = read_data("speedscope__simple.speedscope.json", &len);
	uint32_t st = 12345;

	if (doc == NULL)
		SM_SKIP_CORPUS("tests/data/speedscope__simple.speedscope.json "
		    "absent");
	for (size_t n = 0; n < len; n++) {
		struct fx f;

		/* only trailing blanks may go */
		if (strspn(doc + n, " \n\r\t") == len - n)
			break;
		fx_run(&f, doc, n, "app", 100);
		SM_CHECKF(f.rv == SM_EINVAL, "prefix of %zu bytes: %d", n,
		    f.rv);
		fx_fini(&f);
	}
	for (int it = 0; it < 2000; it++) {
		struct fx f;
		char *m = malloc(len);

		SM_REQUIRE(m != NULL);
		memcpy(m, doc, len);
		for (int k = 0; k < 3; k++) {
			st = st * 1103515245u + 12345u;
			m[(st >> 8) % len] = "{}[],:\"0123456789.eE-OC\\ u"
			    [(st >> 4) % 26];
		}
		fx_run(&f, m, len, "app", 100);
		SM_CHECKF(f.rv == 0 || f.rv == SM_EINVAL, "mutation %d: %d",
		    it, f.rv);
		for (uint32_t i = 0; f.rv == 0 && i < f.b.nseries; i++)
			for (uint32_t j = 0; j < f.b.series[i].n; j++)
				SM_CHECK(f.b.series[i].value[j] > 0);
		fx_fini(&f);
		free(m);
	}
	free(doc);
}

SM_TEST_MAIN(
	{ "speedscope's sample files", test_sample_files },
	{ "units and sample rates", test_units },
	{ "evented: nesting, fractions, open tail", test_evented },
	{ "merged profiles, names by unit", test_merge_and_names },
	{ "escapes and the depth cap", test_escapes_and_depth },
	{ "errors name what is wrong", test_errors },
	{ "truncations and mutations", test_truncations_and_mutations },
)
