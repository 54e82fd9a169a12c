/*
 * regex_test.c -- the PCRE2 wrapper: whole-subject and partial matches,
 * groups, a bad pattern's message, invalid UTF-8 as "no match", and a
 * catastrophic pattern stopped by the cost limits.
 */
#include "common/regex.h"

#include <string.h>

#include "sm_test.h"

static int
match(const char *pat, unsigned flags, const char *s)
{
	struct sm_regex *re;
	struct sm_regex_md *md;
	struct sm_err err;
	int rc;

	SM_REQUIRE(sm_regex_compile(pat, flags, &re, &err) == 0);
	SM_REQUIRE((md = sm_regex_md_create(2)) != NULL);
	rc = sm_regex_match(re, md, s, strlen(s), &err);
	sm_regex_md_free(md);
	sm_regex_free(re);
	return (rc);
}

static void
test_whole(void)
{
	SM_CHECK_EQ(match("a.c", SM_RE_WHOLE, "abc"), 1);
	SM_CHECK_EQ(match("a.c", SM_RE_WHOLE, "xabc"), 0);
	SM_CHECK_EQ(match("a.c", SM_RE_WHOLE, "abcx"), 0);
	SM_CHECK_EQ(match("a.c", 0, "xabcx"), 1);
	SM_CHECK_EQ(match("a.c", SM_RE_WHOLE, "a\nc"), 0);
	SM_CHECK_EQ(match("a.c", SM_RE_WHOLE | SM_RE_DOTALL, "a\nc"), 1);
	SM_CHECK_EQ(match("a$", SM_RE_DOLLAR_ENDONLY, "a\n"), 0);
	SM_CHECK_EQ(match("a$", 0, "a\n"), 1);
}

static void
test_groups(void)
{
	struct sm_regex *re;
	struct sm_regex_md *md;
	struct sm_err err;
	const char *s = "Lambda$42";
	size_t a, b;

	SM_REQUIRE(sm_regex_compile("^(\\w+)\\$(\\d+)?(x)?$", 0, &re,
	    &err) == 0);
	SM_REQUIRE((md = sm_regex_md_create(3)) != NULL);
	SM_CHECK_EQ(sm_regex_match(re, md, s, strlen(s), &err), 1);
	SM_CHECK(sm_regex_group(md, 0, &a, &b) && a == 0 && b == 9);
	SM_CHECK(sm_regex_group(md, 1, &a, &b) && a == 0 && b == 6);
	SM_CHECK(sm_regex_group(md, 2, &a, &b) && a == 7 && b == 9);
	SM_CHECK(!sm_regex_group(md, 3, &a, &b));    /* did not take part */
	SM_CHECK(!sm_regex_group(md, 9, &a, &b));    /* no such group */
	sm_regex_md_free(md);
	sm_regex_free(re);
}

static void
test_errors(void)
{
	struct sm_regex *re = (struct sm_regex *)1;
	struct sm_err err;

	SM_CHECK_EQ(sm_regex_compile("a(b", 0, &re, &err), SM_EINVAL);
	SM_CHECK(re == NULL);
	SM_CHECK(strstr(err.msg, "offset 3") != NULL);
	/* Invalid UTF-8 is no match, not an error. */
	SM_CHECK_EQ(match(".*", SM_RE_WHOLE | SM_RE_UTF, "a\xff"), 0);
}

static void
test_limits(void)
{
	struct sm_regex *re;
	struct sm_regex_md *md;
	struct sm_err err;
	char s[64];

	memset(s, 'a', 40);
	s[40] = '!';
	s[41] = '\0';
	SM_REQUIRE(sm_regex_compile("(a+)+", SM_RE_WHOLE | SM_RE_LIMITED,
	    &re, &err) == 0);
	SM_REQUIRE((md = sm_regex_md_create(1)) != NULL);
	SM_CHECK_EQ(sm_regex_match(re, md, s, strlen(s), &err), SM_ELIMIT);
	SM_CHECK(strstr(err.msg, "limit") != NULL);
	sm_regex_md_free(md);
	sm_regex_free(re);
}

SM_TEST_MAIN(
	{ "whole and partial matches, flags", test_whole },
	{ "capture groups", test_groups },
	{ "a bad pattern, invalid UTF-8", test_errors },
	{ "cost limits", test_limits },
)
