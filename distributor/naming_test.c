/*
 * naming_test.c -- the /ingest name parameter and the labels it produces.
 */
#include "distributor/naming.h"

#include "sm_test.h"

static struct sm_arena *arena;

static void
fresh_arena(void)
{
	sm_arena_destroy(arena);
	arena = sm_arena_create(0);
	SM_REQUIRE(arena != NULL);
}

static int
kparse(const char *name, struct dist_key *k, struct sm_err *err)
{
	fresh_arena();
	sm_err_clear(err);
	return (dist_key_parse(name, arena, k, err));
}

/* Tags as "k=v,k=v" for compact checks. */
static const char *
tags_str(const struct dist_key *k)
{
	static char buf[512];
	size_t o = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < k->ntags && o < sizeof(buf); i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%s=%s",
		    i ? "," : "", k->tags[i].name, k->tags[i].value);
	return (buf);
}

/* `name` parses, with the tags `want` (as tags_str gives them). */
static void
check_tags(const char *name, const char *want)
{
	struct dist_key k;
	struct sm_err err;
	int rv = kparse(name, &k, &err);

	SM_CHECKF(rv == 0, "%s: %s", name, err.msg);
	if (rv == 0)
		SM_CHECK_STR(tags_str(&k), want);
}

/* `name` is refused, SM_EINVAL with the message `msg`. */
static void
check_refused(const char *name, const char *msg)
{
	struct dist_key k;
	struct sm_err err;

	SM_CHECK_EQ(kparse(name, &k, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, msg);
}

/* Sorted labels as {a="b", ...} for compact checks. */
static const char *
labels_str(struct sm_label *v, uint32_t n)
{
	static char buf[1024];
	struct sm_buf b = SM_BUF_INIT;

	sm_labels_sort(v, n);
	sm_labels_format(v, n, &b);
	snprintf(buf, sizeof(buf), "%s", b.b != NULL ? b.b : "");
	sm_buf_fini(&b);
	return (buf);
}

static void
check_valid(struct sm_label *v, uint32_t n)
{
	struct sm_label_limits lim;
	struct sm_err err;

	sm_label_limits_default(&lim);
	sm_labels_sort(v, n);
	sm_err_clear(&err);
	SM_CHECKF(sm_labels_validate(v, n, &lim, NULL, &err) == 0, "%s",
	    err.msg);
}

static void
test_parse_basic(void)
{
	struct dist_key k;
	struct sm_err err;

	SM_REQUIRE(kparse("myapp.cpu{env=prod,region=eu-west-1}", &k,
	    &err) == 0);
	SM_CHECK_STR(k.app, "myapp.cpu");
	SM_CHECK_EQ(k.ntags, 2);
	SM_CHECK_STR(tags_str(&k), "env=prod,region=eu-west-1");

	SM_REQUIRE(kparse("foo", &k, &err) == 0);
	SM_CHECK_STR(k.app, "foo");
	SM_CHECK_EQ(k.ntags, 0);

	SM_REQUIRE(kparse("foo{}", &k, &err) == 0);
	SM_CHECK_STR(k.app, "foo");
	SM_CHECK_EQ(k.ntags, 0);

	/* Pyroscope's "simple values with spaces work". */
	SM_REQUIRE(kparse(" foo { bar = 1 , baz = 2 } ", &k, &err) == 0);
	SM_CHECK_STR(k.app, "foo");
	SM_CHECK_STR(tags_str(&k), "bar=1,baz=2");

	/* Input order is kept (not sorted). */
	check_tags("foo{baz=1,bar=2}", "baz=1,bar=2");
}

static void
test_parse_characters(void)
{
	struct dist_key k;
	struct sm_err err;

	SM_REQUIRE(kparse("my-app/v1.2_X{k8s.pod_name=web-1}", &k, &err) == 0);
	SM_CHECK_STR(k.app, "my-app/v1.2_X");
	SM_CHECK_STR(tags_str(&k), "k8s.pod_name=web-1");

	/* Values may hold anything but ',' and '}'. */
	check_tags("a{v= x{y=z w \xc3\xa9 }", "v=x{y=z w \xc3\xa9");

	SM_CHECK_EQ(kparse("my app{a=b}", &k, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "invalid service name: my app: character is not "
	    "allowed: ' '");
	SM_CHECK(k.app == NULL && k.tags == NULL && k.ntags == 0);
	check_refused("caf\xc3\xa9.cpu",
	    "invalid service name: caf\xc3\xa9.cpu: "
	    "character is not allowed: '\xc3\xa9'");
	check_refused("app\x01", "invalid service name: app\x01: character is "
	    "not allowed: '\\x01'");
	check_refused("app{a-b=1}", "invalid label name: a-b: character is not "
	    "allowed: '-'");
	check_refused("app{a b=1}", "invalid label name: a b: character is not "
	    "allowed: ' '");
	/* A key runs to '=': "a,b" is one (bad) key, as in Pyroscope. */
	check_refused("app{a,b=1}", "invalid label name: a,b: character is not "
	    "allowed: ','");
}

static void
test_parse_required_and_reserved(void)
{
	struct dist_key k;
	struct sm_err err;

	check_refused("", "service name is required");
	check_refused("   ", "service name is required");
	check_refused("{env=prod}", "service name is required");
	check_refused(" {env=prod}", "service name is required");
	check_refused("app{=v}", "label name is required");
	check_refused("app{ =v}", "label name is required");
	check_refused("app{__name__=x}", "label name is reserved: __name__");
	SM_CHECK_EQ(kparse("app{a=1, __name__ = x}", &k, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "label name is reserved: __name__");
	SM_CHECK(k.ntags == 0 && k.app == NULL);
	SM_CHECK_EQ(dist_key_parse("app", arena, &k, NULL), 0);
	SM_CHECK_EQ(dist_key_parse("", arena, &k, NULL), SM_EINVAL);
}

static void
test_parse_dunder_tags(void)
{
	check_tags("app{__session_id__=abc,__x__=1,__delta__=true,"
	    "_single=2,__=3}", "__session_id__=abc,_single=2");
}

static void
test_parse_duplicates_and_empty(void)
{
	/* Decision: last value wins, at the first key's position. */
	check_tags("app{a=1,b=2,a=3}", "a=3,b=2");
	/* An empty value removes the tag. */
	check_tags("app{a=,b=2}", "b=2");
	check_tags("app{a=1,b=2,a= }", "b=2");
	check_tags("app{a=1,b=2,a=,a=4}", "b=2,a=4");
}

static void
test_parse_edges(void)
{
	struct dist_key k;
	struct sm_err err;

	/* Trailing comma; text after '}' ignored; a key without '='
	 * dropped (all as Pyroscope). */
	check_tags("app{a=1,}", "a=1");
	check_tags("app{a=1}junk{b=2}", "a=1");
	check_tags("app{a=1,b}", "a=1");
	SM_REQUIRE(kparse("app{b", &k, &err) == 0);
	SM_CHECK_EQ(k.ntags, 0);
	/* Decision: a name ending inside a value keeps the tag. */
	check_tags("app{a=1,env=prod", "a=1,env=prod");
	/* The app name may not contain '}' and such. */
	SM_CHECK_EQ(kparse("app}{a=1}", &k, &err), SM_EINVAL);
}

static void
test_profile_id(void)
{
	struct dist_key k;
	struct sm_err err;

	SM_REQUIRE(kparse("app{profile_id=abc}", &k, &err) == 0);
	SM_CHECK(dist_key_has_profile_id(&k));
	SM_REQUIRE(kparse("app{profile_id=}", &k, &err) == 0);
	SM_CHECK(!dist_key_has_profile_id(&k));
	SM_REQUIRE(kparse("app{span_id=abc}", &k, &err) == 0);
	SM_CHECK(!dist_key_has_profile_id(&k));
}

static void
test_pprof_labels(void)
{
	struct dist_key k;
	struct sm_err err;
	struct sm_label *v;
	uint32_t n;

	SM_REQUIRE(kparse("my.app{env=prod}", &k, &err) == 0);
	SM_REQUIRE(dist_key_pprof_labels(&k, "gospy", arena, &v, &n) == 0);
	SM_CHECK_STR(labels_str(v, n), "{__service_name__=\"my.app\", "
	    "env=\"prod\", pyroscope_spy=\"gospy\", service_name=\"my.app\"}");

	/* A service_name tag wins; the copy follows it. */
	SM_REQUIRE(kparse("app{service_name=svc}", &k, &err) == 0);
	SM_REQUIRE(dist_key_pprof_labels(&k, "javaspy", arena, &v, &n) == 0);
	SM_CHECK_STR(labels_str(v, n), "{__service_name__=\"svc\", "
	    "pyroscope_spy=\"javaspy\", service_name=\"svc\"}");

	/* No spy name: no label; a pyroscope_spy tag wins. */
	SM_REQUIRE(kparse("app", &k, &err) == 0);
	SM_REQUIRE(dist_key_pprof_labels(&k, NULL, arena, &v, &n) == 0);
	SM_CHECK_STR(labels_str(v, n), "{__service_name__=\"app\", "
	    "service_name=\"app\"}");
	SM_REQUIRE(dist_key_pprof_labels(&k, "", arena, &v, &n) == 0);
	SM_CHECK_EQ(n, 2);
	SM_REQUIRE(kparse("app{pyroscope_spy=custom}", &k, &err) == 0);
	SM_REQUIRE(dist_key_pprof_labels(&k, "gospy", arena, &v, &n) == 0);
	SM_CHECK_STR(labels_str(v, n), "{__service_name__=\"app\", "
	    "pyroscope_spy=\"custom\", service_name=\"app\"}");
}

static int
legacy(const char *name, uint32_t rate, struct dist_legacy *l,
    struct sm_err *err)
{
	struct dist_key k;
	int rv;

	if ((rv = kparse(name, &k, err)) != 0)
		return (rv);
	return (dist_key_legacy(&k, rate, "gospy", arena, l, err));
}

/* `name` at `rate` Hz maps, into *l, to valid labels that labels_str
 * renders as `want`, with values scaled by `scale`. */
static void
check_legacy(struct dist_legacy *l, const char *name, uint32_t rate,
    int64_t scale, const char *want)
{
	struct sm_err err;

	SM_REQUIRE(legacy(name, rate, l, &err) == 0);
	SM_CHECK_EQ(l->scale, scale);
	SM_CHECK_STR(labels_str(l->labels, l->nlabels), want);
	check_valid(l->labels, l->nlabels);
}

static void
test_legacy_cpu(void)
{
	struct dist_legacy l;
	struct sm_err err;

	check_legacy(&l, "myapp.cpu{env=prod}", 100, 10000000, "{"
	    "__name__=\"process_cpu\", "
	    "__period_type__=\"cpu\", "
	    "__period_unit__=\"nanoseconds\", "
	    "__profile_type__=\"process_cpu:cpu:nanoseconds:cpu:nanoseconds\", "
	    "__service_name__=\"myapp\", "
	    "__type__=\"cpu\", "
	    "__unit__=\"nanoseconds\", "
	    "env=\"prod\", "
	    "pyroscope_spy=\"gospy\", "
	    "service_name=\"myapp\"}");
	SM_CHECK_STR(l.type.name, "process_cpu");
	SM_CHECK_STR(l.type.sample_type, "cpu");
	SM_CHECK_STR(l.type.period_type, "cpu");

	/* sampleRate 0: samples:count, no period, scale 1. */
	check_legacy(&l, "myapp.cpu", 0, 1, "{"
	    "__name__=\"process_cpu\", "
	    "__profile_type__=\"process_cpu:samples:count::\", "
	    "__service_name__=\"myapp\", "
	    "__type__=\"samples\", "
	    "__unit__=\"count\", "
	    "pyroscope_spy=\"gospy\", "
	    "service_name=\"myapp\"}");

	/* No dot: cpu, the whole name is the service. */
	SM_REQUIRE(legacy("myapp", 100, &l, &err) == 0);
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "service_name"),
	    "myapp");
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "__profile_type__"),
	    "process_cpu:cpu:nanoseconds:cpu:nanoseconds");
	/* Only the last dot splits. */
	SM_REQUIRE(legacy("pyroscope.server.cpu", 50, &l, &err) == 0);
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "service_name"),
	    "pyroscope.server");
	SM_CHECK_EQ(l.scale, 20000000);
}

static void
test_legacy_other_types(void)
{
	struct dist_legacy l;
	struct sm_err err;

	check_legacy(&l, "myapp.alloc_space", 100, 1, "{"
	    "__name__=\"memory\", "
	    "__profile_type__=\"memory:alloc_space:bytes::\", "
	    "__service_name__=\"myapp\", "
	    "__type__=\"alloc_space\", "
	    "__unit__=\"bytes\", "
	    "pyroscope_spy=\"gospy\", "
	    "service_name=\"myapp\"}");

	SM_REQUIRE(legacy("myapp.wall", 100, &l, &err) == 0);
	SM_CHECK_EQ(l.scale, 10000000);
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "__profile_type__"),
	    "wall:wall:nanoseconds:cpu:nanoseconds");
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "__name__"), "wall");
	check_valid(l.labels, l.nlabels);

	SM_REQUIRE(legacy("myapp.goroutines", 100, &l, &err) == 0);
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "__profile_type__"),
	    "goroutine:goroutines:count::");
	check_valid(l.labels, l.nlabels);
}

static void
test_legacy_every_suffix_validates(void)
{
	static const char *const suffixes[] = { "cpu", "itimer", "wall",
		"seconds", "nanoseconds", "microseconds", "milliseconds",
		"inuse_objects", "alloc_objects", "inuse_space", "alloc_space",
		"goroutines", "mutex_count", "mutex_duration", "block_count",
		"lock_count", "block_duration", "lock_duration",
		"alloc_in_new_tlab_objects", "alloc_outside_tlab_objects",
		"alloc_in_new_tlab_bytes", "alloc_outside_tlab_bytes", "live",
		"exceptions", "bytes" };
	static const uint32_t rates[] = { 0, 100, 4000000000u };

	for (size_t i = 0; i < SM_ARRAY_LEN(suffixes); i++) {
		for (size_t r = 0; r < SM_ARRAY_LEN(rates); r++) {
			struct dist_legacy l;
			struct sm_err err;
			char name[128];

			snprintf(name, sizeof(name), "svc.%s{env=prod,"
			    "__session_id__=s1}", suffixes[i]);
			SM_CHECKF(legacy(name, rates[r], &l, &err) == 0, "%s: %s",
			    name, err.msg);
			SM_CHECK(l.scale >= 1);
			check_valid(l.labels, l.nlabels);
		}
	}
}

static void
test_legacy_service_name_tag(void)
{
	struct dist_legacy l;
	struct sm_err err;

	SM_REQUIRE(legacy("myapp.cpu{service_name=svc}", 100, &l, &err) == 0);
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "service_name"), "svc");
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "__service_name__"),
	    "svc");
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "app_name"), "myapp");
	check_valid(l.labels, l.nlabels);

	/* An app_name tag is kept, not duplicated. */
	SM_REQUIRE(legacy("myapp.cpu{service_name=svc,app_name=mine}", 100, &l,
	    &err) == 0);
	SM_CHECK_STR(sm_labels_get(l.labels, l.nlabels, "app_name"), "mine");
	check_valid(l.labels, l.nlabels);

	/* Without a service_name tag there is no app_name. */
	SM_REQUIRE(legacy("myapp.cpu", 100, &l, &err) == 0);
	SM_CHECK(sm_labels_get(l.labels, l.nlabels, "app_name") == NULL);

	/* ".cpu": no service name unless a tag gives one. */
	SM_CHECK_EQ(legacy(".cpu", 100, &l, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "service name is required");
	SM_CHECK(l.labels == NULL && l.nlabels == 0);
	SM_REQUIRE(legacy(".cpu{service_name=svc}", 100, &l, &err) == 0);
	SM_CHECK(sm_labels_get(l.labels, l.nlabels, "app_name") == NULL);
	check_valid(l.labels, l.nlabels);
}

static void
test_legacy_unknown_suffix(void)
{
	struct dist_legacy l;
	struct sm_err err;

	SM_CHECK_EQ(legacy("myapp.foo{env=prod}", 100, &l, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "unknown profile type: foo");
	SM_CHECK(l.labels == NULL);
	SM_CHECK_EQ(legacy("myapp.", 100, &l, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "unknown profile type: ");
	SM_CHECK_EQ(legacy("my.app", 100, &l, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "unknown profile type: app");
}

/* A tiny arena budget makes every allocation point fail in turn. */
static void
test_arena_exhaustion(void)
{
	const char *name = "myapp.cpu{env=prod,region=eu,service_name=svc}";
	bool ok = false;

	for (size_t budget = 16; budget < 8192 && !ok; budget += 16) {
		struct sm_arena *a = sm_arena_create(budget);
		struct dist_key k;
		struct dist_legacy l;
		struct sm_label *v;
		uint32_t n;
		struct sm_err err;
		int rv;

		SM_REQUIRE(a != NULL);
		rv = dist_key_parse(name, a, &k, &err);
		if (rv == 0)
			rv = dist_key_pprof_labels(&k, "gospy", a, &v, &n);
		if (rv == 0)
			rv = dist_key_legacy(&k, 100, "gospy", a, &l, &err);
		SM_CHECKF(rv == 0 || rv == SM_ENOMEM, "budget %zu rv %d",
		    budget, rv);
		if (rv == 0) {
			ok = true;
			check_valid(l.labels, l.nlabels);
		}
		sm_arena_destroy(a);
	}
	SM_CHECK(ok);
}

static void
test_cleanup(void)
{
	sm_arena_destroy(arena);
	arena = NULL;
}

SM_TEST_MAIN(
	{ "parse: app and tags", test_parse_basic },
	{ "parse: allowed characters", test_parse_characters },
	{ "parse: required and reserved names",
	    test_parse_required_and_reserved },
	{ "parse: __ tags dropped except __session_id__",
	    test_parse_dunder_tags },
	{ "parse: duplicate keys (last wins), empty values",
	    test_parse_duplicates_and_empty },
	{ "parse: trailing comma, junk, unterminated", test_parse_edges },
	{ "profile_id tag", test_profile_id },
	{ "pprof labels", test_pprof_labels },
	{ "legacy: cpu with and without sampleRate", test_legacy_cpu },
	{ "legacy: alloc_space, wall, goroutines", test_legacy_other_types },
	{ "legacy: every suffix validates", test_legacy_every_suffix_validates },
	{ "legacy: service_name tag and app_name",
	    test_legacy_service_name_tag },
	{ "legacy: unknown suffix", test_legacy_unknown_suffix },
	{ "arena exhaustion is ENOMEM", test_arena_exhaustion },
	{ "cleanup", test_cleanup },
)
