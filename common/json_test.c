/*
 * json_test.c -- the contract of json.h: parsing and its located errors,
 * getters that read a missing or mistyped value as absent, the builders'
 * ownership, and the exact bytes of the output.
 */
#include "common/json.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "sm_test.h"

static struct sm_json *
parse(const char *s)
{
	struct sm_json *j = NULL;
	struct sm_err err;

	if (sm_json_parse(s, strlen(s), SM_JSON_ANY, &j, &err) != 0)
		fprintf(stderr, "    unexpected error for '%s': %s\n", s,
		    err.msg);
	return (j);
}

/* The compact text of v (flags as sm_json_dump), in a static buffer. */
static const char *
dump(const struct sm_json *v, unsigned flags)
{
	static char out[1024];
	struct sm_buf b = SM_BUF_INIT;

	out[0] = '\0';
	if (sm_json_dump(v, flags, &b) == 0)
		snprintf(out, sizeof(out), "%s", b.b);
	sm_buf_fini(&b);
	return (out);
}

static void
test_parse_ok(void)
{
	struct sm_json *j = parse("{\"a\": [1, 2.5, \"x\", true, false, "
	    "null], \"b\": {\"c\": -9223372036854775808}}");
	struct sm_json *a;

	SM_REQUIRE(j != NULL);
	SM_CHECK(sm_json_is_object(j));
	SM_CHECK_EQ(sm_json_nmembers(j), 2);
	a = sm_json_get(j, "a");
	SM_CHECK(sm_json_is_array(a));
	SM_CHECK_EQ(sm_json_len(a), 6);
	SM_CHECK_EQ(sm_json_kind(sm_json_at(a, 0)), SM_JSON_INTEGER);
	SM_CHECK_EQ(sm_json_kind(sm_json_at(a, 1)), SM_JSON_REAL);
	SM_CHECK_EQ(sm_json_kind(sm_json_at(a, 2)), SM_JSON_STRING);
	SM_CHECK_EQ(sm_json_kind(sm_json_at(a, 3)), SM_JSON_TRUE);
	SM_CHECK_EQ(sm_json_kind(sm_json_at(a, 4)), SM_JSON_FALSE);
	SM_CHECK_EQ(sm_json_kind(sm_json_at(a, 5)), SM_JSON_NULL);
	SM_CHECK_EQ(sm_json_kind(sm_json_at(a, 6)), SM_JSON_NONE);
	SM_CHECK_EQ(sm_json_int(sm_json_at(a, 0)), 1);
	SM_CHECK(sm_json_real(sm_json_at(a, 1)) == 2.5);
	SM_CHECK_STR(sm_json_str(sm_json_at(a, 2)), "x");
	SM_CHECK_EQ(sm_json_strlen(sm_json_at(a, 2)), 1);
	SM_CHECK(sm_json_is_true(sm_json_at(a, 3)));
	SM_CHECK(sm_json_is_bool(sm_json_at(a, 4)));
	SM_CHECK(!sm_json_is_true(sm_json_at(a, 4)));
	SM_CHECK(sm_json_is_null(sm_json_at(a, 5)));
	SM_CHECK(sm_json_int(sm_json_get(sm_json_get(j, "b"), "c")) ==
	    INT64_MIN);
	sm_json_free(j);

	/* n bounds the text: what follows is not read */
	SM_REQUIRE(sm_json_parse("[1]garbage", 3, 0, &j, NULL) == 0);
	SM_CHECK_EQ(sm_json_len(j), 1);
	sm_json_free(j);
}

static void
test_parse_errors(void)
{
	struct sm_json *j = (struct sm_json *)&j;
	struct sm_err err;

	sm_err_clear(&err);
	SM_CHECK_EQ(sm_json_parse("{\"a\":\n  [1,}", 12, 0, &j, &err),
	    SM_EINVAL);
	SM_CHECK(j == NULL);
	SM_CHECKF(strstr(err.msg, " at line 2 column 6") != NULL, "%s",
	    err.msg);
	/* a scalar at the top needs SM_JSON_ANY */
	SM_CHECK_EQ(sm_json_parse("1", 1, 0, &j, &err), SM_EINVAL);
	SM_CHECK(j == NULL);
	SM_CHECK_EQ(sm_json_parse("1", 1, SM_JSON_ANY, &j, &err), 0);
	SM_CHECK_EQ(sm_json_int(j), 1);
	sm_json_free(j);
	/* empty, NUL inside, not UTF-8, too big an integer */
	SM_CHECK_EQ(sm_json_parse("", 0, 0, &j, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_json_parse("[\"a\0b\"]", 7, 0, &j, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_json_parse("[\"\xff\"]", 5, 0, &j, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_json_parse("[9223372036854775808]", 21, 0, &j, &err),
	    SM_EINVAL);
	SM_CHECK(j == NULL);
	/* a NULL err is fine */
	SM_CHECK_EQ(sm_json_parse("{", 1, 0, &j, NULL), SM_EINVAL);
}

static void
test_parse_wide(void)
{
	struct sm_json *j = NULL;
	bool reals = true;

	SM_REQUIRE(sm_json_parse_wide("[1, 2]", 6, 0, &j, &reals, NULL) == 0);
	SM_CHECK(!reals);
	SM_CHECK(sm_json_is_integer(sm_json_at(j, 0)));
	sm_json_free(j);
	SM_REQUIRE(sm_json_parse_wide("[1, 100000000000000000000]", 26, 0,
	    &j, &reals, NULL) == 0);
	SM_CHECK(reals);
	SM_CHECK_EQ(sm_json_kind(sm_json_at(j, 0)), SM_JSON_REAL);
	SM_CHECK(sm_json_real(sm_json_at(j, 1)) == 1e20);
	sm_json_free(j);
	SM_CHECK_EQ(sm_json_parse_wide("[1e400]", 7, 0, &j, &reals, NULL),
	    SM_EINVAL);
	SM_CHECK(!reals);
	SM_CHECK(j == NULL);
}

static void
test_getters_tolerate(void)
{
	struct sm_json *j = parse("{\"s\": \"x\", \"i\": 7, \"r\": 1.0}");
	struct sm_json_it it = SM_JSON_IT_INIT;
	const char *k;
	struct sm_json *v;
	int64_t i = -1;

	SM_REQUIRE(j != NULL);
	/* NULL everywhere */
	SM_CHECK(sm_json_get(NULL, "a") == NULL);
	SM_CHECK(sm_json_at(NULL, 0) == NULL);
	SM_CHECK_EQ(sm_json_len(NULL), 0);
	SM_CHECK_EQ(sm_json_nmembers(NULL), 0);
	SM_CHECK(sm_json_str(NULL) == NULL);
	SM_CHECK_EQ(sm_json_strlen(NULL), 0);
	SM_CHECK_EQ(sm_json_int(NULL), 0);
	SM_CHECK(sm_json_real(NULL) == 0);
	SM_CHECK(!sm_json_is_true(NULL) && !sm_json_is_null(NULL));
	SM_CHECK(!sm_json_next(NULL, &it, &k, &v));
	sm_json_free(NULL);
	SM_CHECK(sm_json_ref(NULL) == NULL);
	SM_CHECK(sm_json_copy(NULL) == NULL);
	/* the wrong kind */
	SM_CHECK(sm_json_get(sm_json_get(j, "s"), "a") == NULL);
	SM_CHECK(sm_json_at(j, 0) == NULL);
	SM_CHECK_EQ(sm_json_len(j), 0);
	SM_CHECK(sm_json_str(sm_json_get(j, "i")) == NULL);
	SM_CHECK_EQ(sm_json_int(sm_json_get(j, "s")), 0);
	SM_CHECK_EQ(sm_json_int(sm_json_get(j, "r")), 0);  /* a real */
	SM_CHECK(sm_json_real(sm_json_get(j, "r")) == 1.0);
	SM_CHECK(sm_json_get(j, "missing") == NULL);
	/* the range check */
	SM_CHECK(sm_json_int_in(sm_json_get(j, "i"), 0, 7, &i) && i == 7);
	i = -1;
	SM_CHECK(!sm_json_int_in(sm_json_get(j, "i"), 8, 9, &i) && i == -1);
	SM_CHECK(!sm_json_int_in(sm_json_get(j, "r"), 0, 9, &i) && i == -1);
	SM_CHECK(!sm_json_int_in(NULL, 0, 9, &i) && i == -1);
	sm_json_free(j);
}

static void
test_iteration(void)
{
	struct sm_json *j = parse("{\"b\": 1, \"a\": 2, \"b\": 3, \"c\": 4}");
	struct sm_json_it it = SM_JSON_IT_INIT;
	char seen[64] = "";
	const char *k;
	struct sm_json *v;

	SM_REQUIRE(j != NULL);
	/* document order; a duplicate key keeps its first place and the
	 * last value */
	while (sm_json_next(j, &it, &k, &v))
		snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen),
		    "%s=%lld ", k, (long long)sm_json_int(v));
	SM_CHECK_STR(seen, "b=3 a=2 c=4 ");
	SM_CHECK(!sm_json_next(j, &it, &k, &v));   /* stays at the end */
	sm_json_free(j);
	/* an array has no members */
	j = parse("[1]");
	it = (struct sm_json_it)SM_JSON_IT_INIT;
	SM_CHECK(!sm_json_next(j, &it, &k, &v));
	SM_CHECK(k == NULL && v == NULL);
	sm_json_free(j);
}

static void
test_build_and_dump(void)
{
	struct sm_json *o = sm_json_object(), *a = sm_json_array();

	SM_REQUIRE(o != NULL && a != NULL);
	SM_CHECK_EQ(sm_json_set_int(o, "z", -1), 0);
	SM_CHECK_EQ(sm_json_set_str(o, "b", "q\"\n\xc3\xa9"), 0);
	SM_CHECK_EQ(sm_json_set_strn(o, "u", "0123456789", 4), 0);
	SM_CHECK_EQ(sm_json_set_real(o, "r", 0.1), 0);
	SM_CHECK_EQ(sm_json_set_real(o, "w", 2), 0);
	SM_CHECK_EQ(sm_json_set_bool(o, "t", true), 0);
	SM_CHECK_EQ(sm_json_set_null(o, "n"), 0);
	SM_CHECK_EQ(sm_json_append_int(a, INT64_MAX), 0);
	SM_CHECK_EQ(sm_json_append_take(a, sm_json_object()), 0);
	SM_CHECK_EQ(sm_json_set_take(o, "a", a), 0);   /* a is o's now */
	SM_CHECK_STR(dump(o, 0), "{\"z\":-1,\"b\":\"q\\\"\\n\xc3\xa9\","
	    "\"u\":\"0123\",\"r\":0.10000000000000001,\"w\":2.0,\"t\":true,"
	    "\"n\":null,\"a\":[9223372036854775807,{}]}");
	SM_CHECK_STR(dump(o, SM_JSON_SORT_KEYS), "{\"a\":[9223372036854775807,"
	    "{}],\"b\":\"q\\\"\\n\xc3\xa9\",\"n\":null,"
	    "\"r\":0.10000000000000001,\"t\":true,\"u\":\"0123\",\"w\":2.0,"
	    "\"z\":-1}");
	/* replacing keeps the place */
	SM_CHECK_EQ(sm_json_set_int(o, "z", 5), 0);
	SM_CHECK_EQ(sm_json_del(o, "b"), 0);
	SM_CHECK_EQ(sm_json_del(o, "b"), SM_ENOTFOUND);
	SM_CHECK(strncmp(dump(o, 0), "{\"z\":5,\"u\":", 11) == 0);
	sm_json_free(o);

	/* sm_json_dumps: a malloc'd string */
	{
		struct sm_json *e = sm_json_object();
		char *s;

		SM_REQUIRE(sm_json_set_str(e, "k", "v") == 0);
		SM_REQUIRE((s = sm_json_dumps(e, SM_JSON_SORT_KEYS)) != NULL);
		SM_CHECK_STR(s, "{\"k\":\"v\"}");
		sm_free(s);
		sm_json_free(e);
		SM_CHECK(sm_json_dumps(NULL, 0) == NULL);
	}
}

static void
test_build_errors(void)
{
	struct sm_json *o = sm_json_object(), *a = sm_json_array();

	SM_REQUIRE(o != NULL && a != NULL);
	/* the wrong container; a taken value is released all the same
	 * (ASan's leak check proves it) */
	SM_CHECK_EQ(sm_json_set_int(a, "k", 1), SM_EINVAL);
	SM_CHECK_EQ(sm_json_set_take(a, "k", sm_json_object()), SM_EINVAL);
	SM_CHECK_EQ(sm_json_append_take(o, sm_json_array()), SM_EINVAL);
	SM_CHECK_EQ(sm_json_del(a, "k"), SM_EINVAL);
	/* NULL: a failed constructor */
	SM_CHECK_EQ(sm_json_set_take(o, "k", NULL), SM_ENOMEM);
	SM_CHECK_EQ(sm_json_set_int(NULL, "k", 1), SM_ENOMEM);
	SM_CHECK_EQ(sm_json_append_take(NULL, sm_json_object()), SM_ENOMEM);
	/* text that is not UTF-8, or holds a NUL */
	SM_CHECK_EQ(sm_json_set_str(o, "k", "\xff"), SM_EINVAL);
	SM_CHECK_EQ(sm_json_set_str(o, "\xc3", "v"), SM_EINVAL);
	SM_CHECK_EQ(sm_json_set_strn(o, "k", "a\0b", 3), SM_EINVAL);
	SM_CHECK_EQ(sm_json_set_str(o, "k", NULL), SM_EINVAL);
	/* no form for NaN or the infinities */
	SM_CHECK_EQ(sm_json_set_real(o, "k", NAN), SM_EINVAL);
	SM_CHECK_EQ(sm_json_set_real(o, "k", INFINITY), SM_EINVAL);
	SM_CHECK_EQ(sm_json_nmembers(o), 0);
	SM_CHECK_EQ(sm_json_dump(NULL, 0, &(struct sm_buf)SM_BUF_INIT),
	    SM_EINVAL);
	sm_json_free(o);
	sm_json_free(a);
}

static void
test_references(void)
{
	struct sm_json *src = parse("{\"m\": {\"x\": 1}}");
	struct sm_json *dst = sm_json_object(), *m, *c;

	SM_REQUIRE(src != NULL && dst != NULL);
	m = sm_json_get(src, "m");
	/* shared: an edit through one shows through the other */
	SM_REQUIRE(sm_json_set_take(dst, "m", sm_json_ref(m)) == 0);
	SM_REQUIRE(sm_json_set_int(m, "y", 2) == 0);
	SM_CHECK_STR(dump(dst, 0), "{\"m\":{\"x\":1,\"y\":2}}");
	/* copied: not */
	SM_REQUIRE((c = sm_json_copy(m)) != NULL);
	SM_REQUIRE(sm_json_del(c, "x") == 0);
	SM_CHECK_STR(dump(m, 0), "{\"x\":1,\"y\":2}");
	SM_CHECK_STR(dump(c, 0), "{\"y\":2}");
	/* the member outlives its first container */
	sm_json_free(src);
	SM_CHECK_EQ(sm_json_int(sm_json_get(sm_json_get(dst, "m"), "x")), 1);
	sm_json_free(dst);
	sm_json_free(c);
}

/* A sorted dump of a parsed meta.json is the same bytes (what the
 * compactor relies on when it copies metas into the bucket index). */
static void
test_round_trip(void)
{
	static const char meta[] = "{\"block_bytes\":123,\"fold\":{\"end\":2,"
	    "\"inputs\":[{\"gen\":18446744073709551,\"incarnation\":\"ab\"}],"
	    "\"start\":1},\"hour_mask\":-1,\"source\":{"
	    "\"replaces\":[]},\"tenant\":\"t\\u0001\"}";
	struct sm_json *j = parse(meta);

	SM_REQUIRE(j != NULL);
	SM_CHECK_STR(dump(j, SM_JSON_SORT_KEYS), meta);
	sm_json_free(j);
}

SM_TEST_MAIN(
	{ "parse: kinds and values; n bounds the text", test_parse_ok },
	{ "parse: SM_EINVAL at line and column, *out NULL",
	    test_parse_errors },
	{ "parse_wide: integers beyond int64 turn the numbers real",
	    test_parse_wide },
	{ "getters: NULL and the wrong kind read as absent",
	    test_getters_tolerate },
	{ "iteration: document order, duplicates", test_iteration },
	{ "builders and dump: compact, insertion or sorted order",
	    test_build_and_dump },
	{ "builders: errors, and _take always takes", test_build_errors },
	{ "references: ref shares, copy does not", test_references },
	{ "round trip: sorted meta.json bytes", test_round_trip },
)
