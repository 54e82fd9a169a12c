/*
 * selector_test.c -- matchers, the selector parser, the three query forms
 * and the canonical format.
 */
#include "common/selector.h"

#include "sm_test.h"

/* One matcher from (type, value), checked against a value (NULL = absent). */
static bool
m1(enum sm_match_type t, const char *re, const char *v)
{
	struct sm_selector s;
	struct sm_err err;
	bool r;

	sm_selector_init(&s);
	if (sm_selector_add(&s, t, "k", re, &err) != 0) {
		fprintf(stderr, "    add failed: %s\n", err.msg);
		sm_selector_fini(&s);
		return (false);
	}
	r = sm_matcher_match(&s.m[0], v, v != NULL ? strlen(v) : 0);
	sm_selector_fini(&s);
	return (r);
}

/* Parse `sel` and match it against labels given as "k=v" strings. */
static bool
sel_matches(const char *sel, int n, const char **kv)
{
	struct sm_selector s;
	struct sm_label l[16];
	char buf[16][64];
	struct sm_err err;
	bool r;

	for (int i = 0; i < n; i++) {
		char *eq;

		snprintf(buf[i], sizeof(buf[i]), "%s", kv[i]);
		eq = strchr(buf[i], '=');
		*eq = '\0';
		l[i].name = buf[i];
		l[i].value = eq + 1;
	}
	sm_selector_init(&s);
	if (sm_selector_parse(&s, sel, &err) != 0) {
		fprintf(stderr, "    parse failed: %s\n", err.msg);
		sm_selector_fini(&s);
		return (false);
	}
	r = sm_selector_match(&s, l, (uint32_t)n);
	sm_selector_fini(&s);
	return (r);
}

static void
test_operators(void)
{
	SM_CHECK(m1(SM_MATCH_EQ, "a", "a"));
	SM_CHECK(!m1(SM_MATCH_EQ, "a", "b"));
	SM_CHECK(!m1(SM_MATCH_EQ, "a", "ab"));
	SM_CHECK(!m1(SM_MATCH_EQ, "ab", "a"));
	SM_CHECK(m1(SM_MATCH_NEQ, "a", "b"));
	SM_CHECK(!m1(SM_MATCH_NEQ, "a", "a"));
	SM_CHECK(m1(SM_MATCH_RE, "a+", "aaa"));
	SM_CHECK(!m1(SM_MATCH_RE, "a+", "b"));
	SM_CHECK(m1(SM_MATCH_NRE, "a+", "b"));
	SM_CHECK(!m1(SM_MATCH_NRE, "a+", "aa"));
}

static void
test_anchoring(void)
{
	SM_CHECK(!m1(SM_MATCH_RE, "ab", "xaby"));
	SM_CHECK(!m1(SM_MATCH_RE, "ab", "xab"));
	SM_CHECK(!m1(SM_MATCH_RE, "ab", "abx"));
	SM_CHECK(m1(SM_MATCH_RE, "ab", "ab"));
	SM_CHECK(m1(SM_MATCH_RE, "a.*", "abc"));
	SM_CHECK(!m1(SM_MATCH_RE, "a.*", "cba"));
	SM_CHECK(m1(SM_MATCH_NRE, "ab", "xaby"));
	SM_CHECK(!m1(SM_MATCH_NRE, "a.*", "abc"));
	SM_CHECK(m1(SM_MATCH_NRE, "a.*", "bc"));
	/* End anchoring still backtracks into alternatives. */
	SM_CHECK(m1(SM_MATCH_RE, "a|ab", "ab"));
	SM_CHECK(m1(SM_MATCH_RE, "foo|bar", "bar"));
	SM_CHECK(!m1(SM_MATCH_RE, "foo|bar", "foobar"));
	/* '.' matches a newline (RE2 DotNL, as Prometheus). */
	SM_CHECK(m1(SM_MATCH_RE, "a.b", "a\nb"));
	/* UTF-8 mode: '.' is one code point. */
	SM_CHECK(m1(SM_MATCH_RE, "caf.", "caf\xc3\xa9"));
	/* An invalid UTF-8 subject is "no match", never a crash. */
	SM_CHECK(!m1(SM_MATCH_RE, ".*", "\xff"));
	SM_CHECK(m1(SM_MATCH_NRE, ".*", "\xff"));
}

static void
test_empty_value_semantics(void)
{
	/* A missing label matches as "". */
	SM_CHECK(m1(SM_MATCH_EQ, "", NULL));
	SM_CHECK(m1(SM_MATCH_EQ, "", ""));
	SM_CHECK(!m1(SM_MATCH_EQ, "", "x"));
	SM_CHECK(!m1(SM_MATCH_NEQ, "", NULL));
	SM_CHECK(m1(SM_MATCH_NEQ, "", "x"));
	SM_CHECK(!m1(SM_MATCH_EQ, "x", NULL));
	SM_CHECK(m1(SM_MATCH_NEQ, "x", NULL));
	SM_CHECK(m1(SM_MATCH_RE, ".*", NULL));
	SM_CHECK(!m1(SM_MATCH_RE, ".+", NULL));
	SM_CHECK(m1(SM_MATCH_RE, ".+", "x"));
	SM_CHECK(m1(SM_MATCH_NRE, ".+", NULL));
	SM_CHECK(m1(SM_MATCH_RE, "", NULL));
	SM_CHECK(!m1(SM_MATCH_RE, "", "x"));
	SM_CHECK(m1(SM_MATCH_RE, "x|", NULL));

	{
		const char *ls[] = { "service_name=api" };

		SM_CHECK(sel_matches("{env=\"\"}", 1, ls));
		SM_CHECK(!sel_matches("{env!=\"\"}", 1, ls));
		SM_CHECK(sel_matches("{env=~\".*\"}", 1, ls));
		SM_CHECK(!sel_matches("{env=~\".+\"}", 1, ls));
		SM_CHECK(sel_matches("{env!~\"prod\"}", 1, ls));
	}
}

static void
test_multiple_matchers(void)
{
	/* Unsorted label set on purpose. */
	const char *ls[] = { "service_name=api", "env=prod", "__name__=cpu",
		"region=eu-west-1" };

	SM_CHECK(sel_matches("{}", 4, ls));
	SM_CHECK(sel_matches("{service_name=\"api\", env=\"prod\"}", 4, ls));
	SM_CHECK(!sel_matches("{service_name=\"api\", env=\"dev\"}", 4, ls));
	SM_CHECK(sel_matches("{service_name=\"api\",env!=\"dev\",region=~"
	    "\"eu-.*\",__name__!~\"mem.*\"}", 4, ls));
	SM_CHECK(!sel_matches("{service_name=\"api\",env!=\"dev\",region=~"
	    "\"us-.*\"}", 4, ls));
	/* Two matchers on one label: both must hold. */
	SM_CHECK(sel_matches("{env=~\"p.*\", env!=\"pre\"}", 4, ls));
	SM_CHECK(!sel_matches("{env=~\"p.*\", env!=\"prod\"}", 4, ls));
	SM_CHECK(sel_matches("{service_name=\"api\"}", 0, NULL) == false);
}

/* Parse into a fresh selector; returns rv and keeps it for inspection. */
static int
parse(struct sm_selector *s, const char *text, struct sm_err *err)
{
	sm_selector_init(s);
	sm_err_clear(err);
	return (sm_selector_parse(s, text, err));
}

static void
test_parse_syntax(void)
{
	struct sm_selector s;
	struct sm_err err;

	SM_REQUIRE(parse(&s, "{}", &err) == 0);
	SM_CHECK_EQ(s.n, 0);
	sm_selector_fini(&s);

	SM_REQUIRE(parse(&s, " \t{ }\n", &err) == 0);
	SM_CHECK_EQ(s.n, 0);
	sm_selector_fini(&s);

	SM_REQUIRE(parse(&s, "{ a = \"1\" ,b!=\"2\",\n c =~ \"3\" , d!~'4', }",
	    &err) == 0);
	SM_REQUIRE(s.n == 4);
	SM_CHECK_STR(s.m[0].name, "a");
	SM_CHECK_EQ(s.m[0].type, SM_MATCH_EQ);
	SM_CHECK_STR(s.m[0].value, "1");
	SM_CHECK_STR(s.m[1].name, "b");
	SM_CHECK_EQ(s.m[1].type, SM_MATCH_NEQ);
	SM_CHECK_STR(s.m[2].name, "c");
	SM_CHECK_EQ(s.m[2].type, SM_MATCH_RE);
	SM_CHECK_STR(s.m[3].name, "d");
	SM_CHECK_EQ(s.m[3].type, SM_MATCH_NRE);
	SM_CHECK_STR(s.m[3].value, "4");
	sm_selector_fini(&s);

	/* og tag keys have dots; names may start with '_'. */
	SM_REQUIRE(parse(&s, "{k8s.pod.name=\"x\", _a_1=\"y\", __name__=\"z\"}",
	    &err) == 0);
	SM_REQUIRE(s.n == 3);
	SM_CHECK_STR(s.m[0].name, "k8s.pod.name");
	SM_CHECK_STR(s.m[1].name, "_a_1");
	SM_CHECK_STR(s.m[2].name, "__name__");
	sm_selector_fini(&s);
}

static void
test_parse_escapes(void)
{
	struct sm_selector s;
	struct sm_err err;

	SM_REQUIRE(parse(&s, "{a=\"x\\ny\\tz\", b=\"q\\\"q\", c=\"b\\\\s\","
	    " d=\"\\x41\\u00e9\\U0001F600\", e=\"\\101\\a\\b\\f\\r\\v\"}",
	    &err) == 0);
	SM_REQUIRE(s.n == 5);
	SM_CHECK_STR(s.m[0].value, "x\ny\tz");
	SM_CHECK_STR(s.m[1].value, "q\"q");
	SM_CHECK_STR(s.m[2].value, "b\\s");
	SM_CHECK_STR(s.m[3].value, "A\xc3\xa9\xf0\x9f\x98\x80");
	SM_CHECK_STR(s.m[4].value, "A\a\b\f\r\v");
	sm_selector_fini(&s);

	/* Single quotes: Go escapes, \' allowed, " literal. */
	SM_REQUIRE(parse(&s, "{a='it\\'s \"x\"\\n'}", &err) == 0);
	SM_REQUIRE(s.n == 1);
	SM_CHECK_STR(s.m[0].value, "it's \"x\"\n");
	sm_selector_fini(&s);

	/* Backquotes are raw: backslashes and newlines stay. */
	SM_REQUIRE(parse(&s, "{a=`\\d+\\.\\n\"'\nz`}", &err) == 0);
	SM_REQUIRE(s.n == 1);
	SM_CHECK_STR(s.m[0].value, "\\d+\\.\\n\"'\nz");
	sm_selector_fini(&s);

	/* A regex through a raw string and an escaped one agree. */
	SM_REQUIRE(parse(&s, "{a=~`\\d+`, b=~\"\\\\d+\"}", &err) == 0);
	SM_CHECK(sm_matcher_match(&s.m[0], "123", 3));
	SM_CHECK(sm_matcher_match(&s.m[1], "123", 3));
	SM_CHECK(!sm_matcher_match(&s.m[1], "12a", 3));
	sm_selector_fini(&s);

	SM_REQUIRE(parse(&s, "{a=\"\"}", &err) == 0);
	SM_CHECK_STR(s.m[0].value, "");
	sm_selector_fini(&s);
}

/* Parse must fail with SM_EINVAL and the message must contain `want`. */
static void
check_parse_error(const char *text, const char *want)
{
	struct sm_selector s;
	struct sm_err err;
	int rv = parse(&s, text, &err);

	SM_CHECKF(rv == SM_EINVAL, "'%s': rv %d", text, rv);
	SM_CHECKF(strstr(err.msg, want) != NULL,
	    "'%s':\n      got:  %s\n      want: %s", text, err.msg, want);
	SM_CHECKF(s.n == 0, "'%s': %u matchers left", text, s.n);
	sm_selector_fini(&s);
}

static void
test_parse_errors(void)
{
	check_parse_error("", "position 0: expected '{', got end of input");
	check_parse_error("a=\"b\"", "position 0: expected '{', got 'a'");
	check_parse_error("{", "position 1: expected label name or '}', got "
	    "end of input");
	check_parse_error("{a=\"1\"", "position 6: expected ',' or '}', got "
	    "end of input");
	check_parse_error("{a=\"1\" b=\"2\"}", "position 7: expected ',' or "
	    "'}', got 'b'");
	check_parse_error("{1a=\"x\"}", "position 1: expected label name");
	check_parse_error("{a-b=\"x\"}", "position 2: expected one of '=', "
	    "'!=', '=~', '!~', got '-'");
	check_parse_error("{a==\"x\"}", "position 3: expected quoted string, "
	    "got '='");
	check_parse_error("{a=x}", "position 3: expected quoted string, got "
	    "'x'");
	check_parse_error("{a~\"x\"}", "position 2: expected one of");
	check_parse_error("{a=\"x}", "position 3: unterminated quoted string");
	check_parse_error("{a=\"x\ny\"}", "position 3: unterminated quoted "
	    "string (newline)");
	check_parse_error("{a=`x}", "position 3: unterminated");
	check_parse_error("{a=\"\\q\"}", "position 4: unknown escape sequence");
	check_parse_error("{a='\\\"'}", "position 4: unknown escape sequence");
	check_parse_error("{a=\"\\xZZ\"}", "position 4: invalid hex digit");
	check_parse_error("{a=\"\\u12\"}", "position 4: invalid hex digit");
	check_parse_error("{a=\"\\ud800\"}", "position 4: escape sequence is "
	    "an invalid Unicode code point");
	check_parse_error("{a=\"\\U00110000\"}", "invalid Unicode code point");
	check_parse_error("{a=\"\\400\"}", "position 4: octal escape value");
	check_parse_error("{a=\"\\18\"}", "position 4: invalid octal escape");
	check_parse_error("{a=\"\\x00\"}", "position 4: NUL is not allowed");
	check_parse_error("{a=\"\\000\"}", "NUL is not allowed");
	check_parse_error("{a=\"x\"} junk", "position 8: expected end of "
	    "input, got 'j'");
	check_parse_error("{a=\"x\"}}", "position 7: expected end of input");
	check_parse_error("{,}", "position 1: expected label name or '}', got "
	    "','");
	check_parse_error("{a=\"x\",,}", "position 7: expected label name");
	check_parse_error("{\x01}", "got byte 0x01");
}

static void
test_invalid_regex(void)
{
	struct sm_selector s;
	struct sm_err err;

	sm_selector_init(&s);
	SM_CHECK_EQ(sm_selector_add(&s, SM_MATCH_RE, "k", "a(b", &err),
	    SM_EINVAL);
	SM_CHECK(strstr(err.msg, "invalid regular expression for label k: "
	    "\"a(b\"") != NULL);
	SM_CHECK_EQ(s.n, 0);
	SM_CHECK_EQ(sm_selector_add(&s, SM_MATCH_NRE, "k", "[z-a]", &err),
	    SM_EINVAL);
	SM_CHECK_EQ(sm_selector_add(&s, SM_MATCH_RE, "k", "*", NULL),
	    SM_EINVAL);
	SM_CHECK_EQ(s.n, 0);
	/* Invalid UTF-8 in a pattern is a compile error in UTF mode. */
	SM_CHECK_EQ(sm_selector_add(&s, SM_MATCH_RE, "k", "\xff", &err),
	    SM_EINVAL);
	/* = and != never compile, so "a(b" is fine there. */
	SM_CHECK_EQ(sm_selector_add(&s, SM_MATCH_EQ, "k", "a(b", &err), 0);
	SM_CHECK_EQ(s.n, 1);
	SM_CHECK(s.m[0].re == NULL);
	SM_CHECK_EQ(sm_selector_add(&s, (enum sm_match_type)9, "k", "x",
	    &err), SM_EINVAL);
	sm_selector_fini(&s);

	/* Through the parser, the message names the value's position and
	 * earlier matchers of the same call are dropped. */
	check_parse_error("{a=\"1\", b=~\"(\"}", "parse error at position 11: "
	    "invalid regular expression for label b");
}

/* A catastrophic pattern fails fast with a message naming the limit,
 * instead of backtracking 2^n steps or answering "no match". */
static void
test_regex_limits(void)
{
	struct sm_selector s;
	struct sm_err err;
	char v[64];
	int64_t t0;

	memset(v, 'a', 40);
	v[40] = '!';
	v[41] = '\0';
	sm_selector_init(&s);
	SM_REQUIRE(sm_selector_add(&s, SM_MATCH_RE, "v", "(a+)+", &err) == 0);
	SM_REQUIRE(sm_selector_add(&s, SM_MATCH_NRE, "v", "(a+)+", &err) == 0);
	t0 = sm_now_ms();
	sm_err_clear(&err);
	SM_CHECK_EQ(sm_matcher_eval(&s.m[0], v, 41, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "regular expression for label v exceeded "
	    "the match limit of 100000 backtracking steps on a 41-byte "
	    "value: \"(a+)+\"") != NULL);
	SM_CHECK_EQ(sm_matcher_eval(&s.m[1], v, 41, &err), SM_EINVAL);
	/* 2^40 steps unbounded; a few hundred ms even under ASan here. */
	SM_CHECK(sm_now_ms() - t0 < 2000);
	/* The bool form keeps the old "PCRE2 failed" answers. */
	SM_CHECK(!sm_matcher_match(&s.m[0], v, 41));
	SM_CHECK(sm_matcher_match(&s.m[1], v, 41));
	/* Values the pattern decides quickly are unaffected. */
	SM_CHECK_EQ(sm_matcher_eval(&s.m[0], "aaaa", 4, &err), 1);
	SM_CHECK_EQ(sm_matcher_eval(&s.m[0], "aab", 3, &err), 0);
	SM_CHECK_EQ(sm_matcher_eval(&s.m[1], "aab", 3, &err), 1);
	SM_CHECK_EQ(sm_matcher_eval(&s.m[0], NULL, 0, &err), 0);
	sm_selector_fini(&s);

	/* Ordinary patterns over long values stay far below the limits. */
	{
		char big[4097];

		memset(big, 'x', 4096);
		memcpy(big + 2000, "foo", 3);
		big[4096] = '\0';
		sm_selector_init(&s);
		SM_REQUIRE(sm_selector_add(&s, SM_MATCH_RE, "v", ".*foo.*",
		    &err) == 0);
		SM_REQUIRE(sm_selector_add(&s, SM_MATCH_RE, "v",
		    "(x|y)*foo[a-z]*", &err) == 0);
		SM_CHECK_EQ(sm_matcher_eval(&s.m[0], big, 4096, &err), 1);
		SM_CHECK_EQ(sm_matcher_eval(&s.m[1], big, 4096, &err), 1);
		sm_selector_fini(&s);
	}
}

static void
test_parse_appends(void)
{
	struct sm_selector s;
	struct sm_err err;

	sm_selector_init(&s);
	SM_REQUIRE(sm_selector_parse(&s, "{a=\"1\"}", &err) == 0);
	SM_REQUIRE(sm_selector_parse(&s, "{b=\"2\"}", &err) == 0);
	SM_CHECK_EQ(s.n, 2);
	/* A failed parse leaves earlier matchers alone. */
	SM_CHECK_EQ(sm_selector_parse(&s, "{c=\"3\", d=", &err), SM_EINVAL);
	SM_CHECK_EQ(s.n, 2);
	/* Growth past the initial capacity. */
	for (int i = 0; i < 40; i++)
		SM_REQUIRE(sm_selector_parse(&s, "{x=~\"y|z\"}", &err) == 0);
	SM_CHECK_EQ(s.n, 42);
	SM_CHECK(sm_matcher_match(&s.m[41], "z", 1));
	sm_selector_fini(&s);
	SM_CHECK_EQ(s.n, 0);
	SM_CHECK(s.m == NULL);
}

static void
test_format(void)
{
	struct sm_selector s, s2;
	struct sm_buf b = SM_BUF_INIT, b2 = SM_BUF_INIT;
	struct sm_err err;

	SM_REQUIRE(parse(&s, "{ a = 'b', c=~`d.*`, e!=\"\\\"q\\\\\\n\\t\","
	    " f!~\"\\x01\\x7f\\u00a0\\u00e9\", g=\"\\xff\" }", &err) == 0);
	sm_selector_format(&s, &b);
	SM_REQUIRE(sm_buf_error(&b) == 0);
	SM_CHECK_STR(b.b, "{a=\"b\",c=~\"d.*\",e!=\"\\\"q\\\\\\n\\t\","
	    "f!~\"\\x01\\x7f\\u00a0\xc3\xa9\",g=\"\\xff\"}");
	/* The canonical form parses back to the same selector. */
	SM_REQUIRE(parse(&s2, b.b, &err) == 0);
	sm_selector_format(&s2, &b2);
	SM_CHECK_STR(b2.b, b.b);
	SM_CHECK_EQ(s2.n, s.n);
	for (uint32_t i = 0; i < s.n && i < s2.n; i++)
		SM_CHECK_STR(s2.m[i].value, s.m[i].value);
	sm_selector_fini(&s);
	sm_selector_fini(&s2);
	sm_buf_fini(&b);
	sm_buf_fini(&b2);

	sm_selector_init(&s);
	sm_selector_format(&s, &b);
	SM_CHECK_STR(b.b, "{}");
	sm_buf_fini(&b);

	/* Code points whose low byte is a NUL or an escapable control
	 * character are printed as themselves, not as "\" + that byte
	 * (fuzz_selector: U+0E00 came out as a backslash and a NUL). */
	SM_REQUIRE(parse(&s, "{a=\"\u0e00\u010a\u0109\"}", &err) == 0);
	sm_selector_format(&s, &b);
	SM_CHECK_STR(b.b, "{a=\"\xe0\xb8\x80\xc4\x8a\xc4\x89\"}");
	SM_REQUIRE(parse(&s2, b.b, &err) == 0);
	SM_CHECK_STR(s2.m[0].value, s.m[0].value);
	sm_selector_fini(&s);
	sm_selector_fini(&s2);
	sm_buf_fini(&b);
}

/* ---- queries ---- */

static int
qparse(struct sm_query *q, const char *text, struct sm_err *err)
{
	sm_err_clear(err);
	return (sm_query_parse(q, text, err));
}

static void
check_matcher(const struct sm_query *q, uint32_t i, const char *name,
    enum sm_match_type t, const char *value)
{
	SM_CHECKF(i < q->sel.n, "matcher %u of %u", i, q->sel.n);
	if (i >= q->sel.n)
		return;
	SM_CHECK_STR(q->sel.m[i].name, name);
	SM_CHECK_EQ(q->sel.m[i].type, t);
	SM_CHECK_STR(q->sel.m[i].value, value);
}

/* The profile type q names (a type id, not a legacy app name). */
static void
check_qtype(const struct sm_query *q, const char *type_id,
    const char *metric, const char *sample_type, const char *sample_unit)
{
	SM_CHECK_STR(q->type_id, type_id);
	SM_CHECK_STR(q->metric, metric);
	SM_CHECK_STR(q->sample_type, sample_type);
	SM_CHECK_STR(q->sample_unit, sample_unit);
	SM_CHECK(q->app == NULL);
}

/* The matchers a legacy query <app>.<suffix> begins its selector with. */
static void
check_legacy_matchers(const struct sm_query *q, const char *app,
    const char *name, const char *type, const char *unit)
{
	check_matcher(q, 0, "service_name", SM_MATCH_EQ, app);
	check_matcher(q, 1, "__name__", SM_MATCH_EQ, name);
	check_matcher(q, 2, "__type__", SM_MATCH_EQ, type);
	check_matcher(q, 3, "__unit__", SM_MATCH_EQ, unit);
}

/* text is refused with SM_EINVAL and, unless msg is NULL, a message
 * containing msg. */
static void
check_qerr(const char *text, const char *msg)
{
	struct sm_query q;
	struct sm_err err;

	SM_CHECK_EQ(qparse(&q, text, &err), SM_EINVAL);
	if (msg != NULL)
		SM_CHECKF(strstr(err.msg, msg) != NULL, "%s: %s", text,
		    err.msg);
	sm_query_fini(&q);
}

static void
test_query_id_form(void)
{
	struct sm_query q;
	struct sm_err err;

	SM_REQUIRE(qparse(&q, "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
	    "{service_name=\"api\", env=~\"prod|staging\"}", &err) == 0);
	check_qtype(&q, "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
	    "process_cpu", "cpu", "nanoseconds");
	SM_CHECK_EQ(q.sel.n, 3);
	check_matcher(&q, 0, "__profile_type__", SM_MATCH_EQ,
	    "process_cpu:cpu:nanoseconds:cpu:nanoseconds");
	check_matcher(&q, 1, "service_name", SM_MATCH_EQ, "api");
	check_matcher(&q, 2, "env", SM_MATCH_RE, "prod|staging");
	sm_query_fini(&q);

	/* :delta is accepted and dropped; no selector; empty parts. */
	SM_REQUIRE(qparse(&q, "  memory:alloc_space:bytes:space:bytes:delta ",
	    &err) == 0);
	SM_CHECK_STR(q.type_id, "memory:alloc_space:bytes:space:bytes");
	SM_CHECK_EQ(q.sel.n, 1);
	check_matcher(&q, 0, "__profile_type__", SM_MATCH_EQ,
	    "memory:alloc_space:bytes:space:bytes");
	sm_query_fini(&q);

	SM_REQUIRE(qparse(&q, "memory:alloc_space:bytes:: {}", &err) == 0);
	SM_CHECK_STR(q.type_id, "memory:alloc_space:bytes::");
	SM_CHECK_STR(q.sample_unit, "bytes");
	sm_query_fini(&q);

	SM_CHECK_EQ(qparse(&q, "process_cpu:cpu:nanoseconds{a=\"b\"}", &err),
	    SM_EINVAL);
	SM_CHECK(strstr(err.msg, "position 0: profile-type selection must be "
	    "of the form") != NULL);
	SM_CHECK(strstr(err.msg, "got(3)") != NULL);
	SM_CHECK(q.sel.n == 0 && q.type_id == NULL && q.metric == NULL);
	sm_query_fini(&q);

	check_qerr("a:b:c:d:e:f", NULL);
}

static void
test_query_legacy_form(void)
{
	struct sm_query q;
	struct sm_err err;

	SM_REQUIRE(qparse(&q, "myapp.cpu{env=\"prod\"}", &err) == 0);
	SM_CHECK(q.type_id == NULL);
	SM_CHECK_STR(q.app, "myapp");
	SM_CHECK_STR(q.metric, "process_cpu");
	SM_CHECK_STR(q.sample_type, "cpu");
	SM_CHECK_STR(q.sample_unit, "nanoseconds");
	SM_CHECK_EQ(q.sel.n, 5);
	check_legacy_matchers(&q, "myapp", "process_cpu", "cpu", "nanoseconds");
	check_matcher(&q, 4, "env", SM_MATCH_EQ, "prod");
	sm_query_fini(&q);

	/* Dots inside the app name: the last one splits. */
	SM_REQUIRE(qparse(&q, "pyroscope.server.alloc_space", &err) == 0);
	SM_CHECK_STR(q.app, "pyroscope.server");
	SM_CHECK_EQ(q.sel.n, 4);
	check_legacy_matchers(&q, "pyroscope.server", "memory", "alloc_space",
	    "bytes");
	sm_query_fini(&q);

	/* No dot: the type is cpu. */
	SM_REQUIRE(qparse(&q, "my-app/x {}", &err) == 0);
	SM_CHECK_STR(q.app, "my-app/x");
	SM_CHECK_STR(q.metric, "process_cpu");
	sm_query_fini(&q);

	/* wall and its aliases query wall:wall:nanoseconds. */
	SM_REQUIRE(qparse(&q, "svc.wall", &err) == 0);
	check_legacy_matchers(&q, "svc", "wall", "wall", "nanoseconds");
	sm_query_fini(&q);
	SM_REQUIRE(qparse(&q, "svc.seconds", &err) == 0);
	check_matcher(&q, 2, "__type__", SM_MATCH_EQ, "wall");
	sm_query_fini(&q);
	SM_REQUIRE(qparse(&q, "svc.itimer", &err) == 0);
	check_matcher(&q, 1, "__name__", SM_MATCH_EQ, "process_cpu");
	check_matcher(&q, 2, "__type__", SM_MATCH_EQ, "cpu");
	sm_query_fini(&q);
	SM_REQUIRE(qparse(&q, "svc.mutex_count", &err) == 0);
	check_legacy_matchers(&q, "svc", "mutex", "contentions", "count");
	sm_query_fini(&q);
}

static void
test_query_legacy_errors(void)
{
	struct sm_query q;
	struct sm_err err;

	SM_CHECK_EQ(qparse(&q, "myapp.foo{env=\"prod\"}", &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "parse error at position 6: unknown profile "
	    "type: foo");
	SM_CHECK(q.sel.n == 0 && q.app == NULL);
	sm_query_fini(&q);

	check_qerr("myapp.", "unknown profile type: ");
	check_qerr(".cpu", "app name is required");
	check_qerr("my$app.cpu", "position 2: invalid app name \"my$app.cpu\""
	    ": character is not allowed: '$'");

	/* A selector error after a valid prefix: positions are absolute. */
	SM_CHECK_EQ(qparse(&q, "myapp.cpu{env=prod}", &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "position 14: expected quoted string") !=
	    NULL);
	SM_CHECK(q.sel.n == 0 && q.app == NULL && q.metric == NULL);
	sm_query_fini(&q);

	check_qerr("myapp.cpu junk", "position 10: expected '{' or end of "
	    "input, got 'j'");
	check_qerr("", "empty query");
	check_qerr("   ", NULL);
}

static void
test_query_bare_selector(void)
{
	struct sm_query q;
	struct sm_err err;

	SM_REQUIRE(qparse(&q, "{service_name=\"api\", __profile_type__="
	    "\"wall:wall:nanoseconds:cpu:nanoseconds\"}", &err) == 0);
	check_qtype(&q, "wall:wall:nanoseconds:cpu:nanoseconds", "wall", "wall",
	    "nanoseconds");
	SM_CHECK_EQ(q.sel.n, 2);
	check_matcher(&q, 0, "service_name", SM_MATCH_EQ, "api");
	sm_query_fini(&q);

	/* Without an EQ __profile_type__ the type stays unknown. */
	SM_REQUIRE(qparse(&q, "{service_name=\"api\", __profile_type__=~"
	    "\"wall:.*\"}", &err) == 0);
	SM_CHECK(q.type_id == NULL && q.metric == NULL &&
	    q.sample_type == NULL && q.sample_unit == NULL);
	SM_CHECK_EQ(q.sel.n, 2);
	sm_query_fini(&q);

	SM_REQUIRE(qparse(&q, "{__profile_type__=\"not-an-id\"}", &err) == 0);
	SM_CHECK(q.type_id == NULL && q.metric == NULL);
	sm_query_fini(&q);

	SM_REQUIRE(qparse(&q, " {} ", &err) == 0);
	SM_CHECK_EQ(q.sel.n, 0);
	SM_CHECK(q.type_id == NULL);
	sm_query_fini(&q);

	check_qerr("{a=~\"(\"}", "position 4: invalid regular expression");
}

/* Every allocation failure ends in SM_ENOMEM (or success) without leaks;
 * ASan checks the leaks. */
static void
test_query_alloc_failures(void)
{
	static const char *const texts[] = {
		"myapp.cpu{env=~\"p.*\", k8s.ns!=\"x\"}",
		"process_cpu:cpu:nanoseconds:cpu:nanoseconds{a=\"b\"}",
		"{__profile_type__=\"a:b:c:d:e\", z!~\"q\"}",
	};

	for (size_t t = 0; t < SM_ARRAY_LEN(texts); t++) {
		int ok = 0;

		for (long n = 1; n < 200 && !ok; n++) {
			struct sm_query q;
			struct sm_err err;
			int rv;

			sm_fault_alloc_after(n);
			rv = sm_query_parse(&q, texts[t], &err);
			sm_fault_alloc_after(0);
			SM_CHECKF(rv == 0 || rv == SM_ENOMEM, "n=%ld rv=%d %s",
			    n, rv, err.msg);
			if (rv == SM_ENOMEM)
				SM_CHECK(q.sel.n == 0 && q.type_id == NULL);
			ok = rv == 0;
			sm_query_fini(&q);
		}
		SM_CHECKF(ok, "'%s' never succeeded", texts[t]);
	}
}

/* app.goroutines selects the og form and Go's pprof form, nothing else. */
static void
test_legacy_goroutines_both_forms(void)
{
	static const struct sm_label og[] = {
		{ "__name__", "goroutine" },
		{ "__profile_type__", "goroutine:goroutines:count::" },
		{ "__type__", "goroutines" }, { "__unit__", "count" },
		{ "service_name", "app" } };
	static const struct sm_label go[] = {
		{ "__name__", "goroutines" },
		{ "__profile_type__", "goroutines:goroutine:count:goroutine:count" },
		{ "__type__", "goroutine" }, { "__unit__", "count" },
		{ "service_name", "app" } };
	static const struct sm_label cpu[] = {
		{ "__name__", "process_cpu" },
		{ "__profile_type__", "process_cpu:cpu:nanoseconds:cpu:nanoseconds" },
		{ "__type__", "cpu" }, { "__unit__", "nanoseconds" },
		{ "service_name", "app" } };
	static const struct sm_label other[] = {
		{ "__name__", "goroutines" },
		{ "__profile_type__", "goroutines:goroutine:count:goroutine:count" },
		{ "__type__", "goroutine" }, { "__unit__", "count" },
		{ "service_name", "other" } };
	struct sm_query q;
	struct sm_err err;

	SM_REQUIRE(sm_query_parse(&q, "app.goroutines", &err) == 0);
	SM_CHECK(sm_selector_match(&q.sel, og, SM_ARRAY_LEN(og)));
	SM_CHECK(sm_selector_match(&q.sel, go, SM_ARRAY_LEN(go)));
	SM_CHECK(!sm_selector_match(&q.sel, cpu, SM_ARRAY_LEN(cpu)));
	SM_CHECK(!sm_selector_match(&q.sel, other, SM_ARRAY_LEN(other)));
	sm_query_fini(&q);
}

SM_TEST_MAIN(
	{ "query: app.goroutines selects both goroutine forms", test_legacy_goroutines_both_forms },
	{ "matcher: = != =~ !~", test_operators },
	{ "matcher: regexes are fully anchored", test_anchoring },
	{ "matcher: missing label matches as empty",
	    test_empty_value_semantics },
	{ "selector: several matchers, unsorted labels",
	    test_multiple_matchers },
	{ "parse: whitespace, trailing comma, dotted names",
	    test_parse_syntax },
	{ "parse: Go escapes, single quotes, raw strings",
	    test_parse_escapes },
	{ "parse: syntax errors name the position", test_parse_errors },
	{ "parse: invalid regex is EINVAL", test_invalid_regex },
	{ "match: regex cost limits", test_regex_limits },
	{ "parse: appends; all or nothing", test_parse_appends },
	{ "format: canonical text round-trips", test_format },
	{ "query: profile-type id form", test_query_id_form },
	{ "query: legacy FlameQL form", test_query_legacy_form },
	{ "query: legacy errors", test_query_legacy_errors },
	{ "query: bare selector", test_query_bare_selector },
	{ "query: allocation failures", test_query_alloc_failures },
)
