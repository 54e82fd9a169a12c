/*
 * regex.c -- the PCRE2 wrapper (regex.h tells the contract).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>

#include "regex.h"

struct sm_regex {
	pcre2_code *code;
	pcre2_match_context *mc;       /* the cost limits; NULL: PCRE2's */
};

struct sm_regex_md {
	pcre2_match_data *md;
	unsigned pairs;
};

int
sm_regex_compile(const char *pattern, unsigned flags, struct sm_regex **out,
    struct sm_err *err)
{
	struct sm_regex *re;
	PCRE2_UCHAR msg[256];
	PCRE2_SIZE eoff;
	uint32_t opts = 0;
	int ecode;

	*out = NULL;
	if ((re = sm_calloc(1, sizeof(*re))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (flags & SM_RE_WHOLE)
		opts |= PCRE2_ANCHORED | PCRE2_ENDANCHORED;
	if (flags & SM_RE_UTF)
		opts |= PCRE2_UTF;
	if (flags & SM_RE_DOTALL)
		opts |= PCRE2_DOTALL;
	if (flags & SM_RE_DOLLAR_ENDONLY)
		opts |= PCRE2_DOLLAR_ENDONLY;
	re->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
	    opts, &ecode, &eoff, NULL);
	if (re->code == NULL) {
		sm_free(re);
		if (ecode == PCRE2_ERROR_NOMEMORY)
			return (sm_err_set(err, SM_ENOMEM, "out of memory "
			    "compiling a regular expression"));
		if (pcre2_get_error_message(ecode, msg, sizeof(msg)) < 0)
			snprintf((char *)msg, sizeof(msg), "error %d", ecode);
		return (sm_err_set(err, SM_EINVAL, "%s at offset %zu",
		    (const char *)msg, (size_t)eoff));
	}
	/* Failure only means no JIT on this platform or pattern. */
	(void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
	if (flags & SM_RE_LIMITED) {
		if ((re->mc = pcre2_match_context_create(NULL)) == NULL) {
			sm_regex_free(re);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		(void)pcre2_set_match_limit(re->mc, SM_RE_MATCH_LIMIT);
		(void)pcre2_set_depth_limit(re->mc, SM_RE_DEPTH_LIMIT);
		(void)pcre2_set_heap_limit(re->mc, SM_RE_HEAP_LIMIT_KIB);
	}
	*out = re;
	return (0);
}

void
sm_regex_free(struct sm_regex *re)
{
	if (re == NULL)
		return;
	pcre2_code_free(re->code);
	pcre2_match_context_free(re->mc);
	sm_free(re);
}

struct sm_regex_md *
sm_regex_md_create(unsigned groups)
{
	struct sm_regex_md *md = sm_calloc(1, sizeof(*md));

	if (md == NULL)
		return (NULL);
	md->pairs = groups + 1;
	if ((md->md = pcre2_match_data_create(md->pairs, NULL)) == NULL) {
		sm_free(md);
		return (NULL);
	}
	return (md);
}

void
sm_regex_md_free(struct sm_regex_md *md)
{
	if (md == NULL)
		return;
	pcre2_match_data_free(md->md);
	sm_free(md);
}

int
sm_regex_match(const struct sm_regex *re, struct sm_regex_md *md,
    const char *s, size_t n, struct sm_err *err)
{
	int rc;

	rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, 0, 0, md->md, re->mc);
	/* JIT code runs on a 32 KiB machine stack: past it, the interpreter
	 * (heap frames, SM_RE_HEAP_LIMIT_KIB) decides. */
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
		rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, 0, PCRE2_NO_JIT,
		    md->md, re->mc);
	if (rc >= 0)
		return (1);
	switch (rc) {
	case PCRE2_ERROR_NOMATCH:
		return (0);
	case PCRE2_ERROR_MATCHLIMIT:
		return (sm_err_set(err, SM_ELIMIT, "match limit of %u "
		    "backtracking steps", SM_RE_MATCH_LIMIT));
	case PCRE2_ERROR_DEPTHLIMIT:
		return (sm_err_set(err, SM_ELIMIT, "depth limit of %u nested "
		    "backtracking points", SM_RE_DEPTH_LIMIT));
	case PCRE2_ERROR_HEAPLIMIT:
		return (sm_err_set(err, SM_ELIMIT, "heap limit of %u KiB",
		    SM_RE_HEAP_LIMIT_KIB));
	case PCRE2_ERROR_NOMEMORY:
		return (sm_err_set(err, SM_ENOMEM, "out of memory matching a "
		    "regular expression"));
	default:
		/* Invalid UTF-8 in the subject and the like: PCRE2 cannot
		 * match it, which is "no match". */
		return (0);
	}
}

bool
sm_regex_group(const struct sm_regex_md *md, unsigned g, size_t *start,
    size_t *end)
{
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md->md);

	if (g >= md->pairs || ov[2 * g] == PCRE2_UNSET)
		return (false);
	*start = ov[2 * g];
	*end = ov[2 * g + 1];
	return (true);
}
