/*
 * regex.h -- regular expressions: the one wrapper of PCRE2 (Debian
 * libpcre2-8), for label matchers (selector.h) and the JFR reader's name
 * rules (distributor/jfr.c).
 *
 * A pattern is compiled once (sm_regex_compile) and is then read-only, so
 * threads may share it; what a match writes -- the group offsets -- lives
 * in a match area (struct sm_regex_md) that belongs to one thread at a
 * time.  JIT compilation is attempted and its failure ignored: the
 * interpreter gives the same answers.
 *
 * Cost.  PCRE2 backtracks, so a pattern such as (a+)+ is exponential in
 * the subject's length.  A pattern compiled with SM_RE_LIMITED gives up
 * on one subject after SM_RE_MATCH_LIMIT backtracking steps,
 * SM_RE_DEPTH_LIMIT nested backtracking points or SM_RE_HEAP_LIMIT_KIB
 * of backtracking memory -- about a millisecond of work -- and
 * sm_regex_match says which limit (SM_ELIMIT, the message naming it)
 * rather than guess.  A subject PCRE2 refuses (invalid UTF-8 under
 * SM_RE_UTF) is "no match".
 *
 * Errors: SM_EINVAL with PCRE2's message and the offset for a bad
 * pattern, SM_ENOMEM, SM_ELIMIT from a match.
 */
#ifndef SM_REGEX_H
#define SM_REGEX_H

#include <stddef.h>

#include "sm.h"

#define SM_RE_MATCH_LIMIT 100000u
#define SM_RE_DEPTH_LIMIT 10000u
#define SM_RE_HEAP_LIMIT_KIB 8192u

enum {
	SM_RE_WHOLE = 1,        /* the whole subject must match (anchored at
				 * both ends, as Prometheus wraps RE2
				 * patterns in ^(?:...)$) */
	SM_RE_UTF = 2,          /* UTF-8 pattern and subjects */
	SM_RE_DOTALL = 4,       /* '.' matches '\n' too (RE2's DotNL) */
	SM_RE_DOLLAR_ENDONLY = 8, /* '$' only at the very end */
	SM_RE_LIMITED = 16,     /* the cost limits above */
};

struct sm_regex;
struct sm_regex_md;

int sm_regex_compile(const char *pattern, unsigned flags,
    struct sm_regex **out, struct sm_err *err);
void sm_regex_free(struct sm_regex *re);

/* A match area with room for `groups` capture groups besides the whole
 * match; NULL when out of memory. */
struct sm_regex_md *sm_regex_md_create(unsigned groups);
void sm_regex_md_free(struct sm_regex_md *md);

/*
 * Match subject s[0..n) with re, writing offsets into md: 1 matched, 0
 * not, or a negative SM_E* (SM_ELIMIT, SM_ENOMEM) with err set.
 */
int sm_regex_match(const struct sm_regex *re, struct sm_regex_md *md,
    const char *s, size_t n, struct sm_err *err);

/* After a match: group g's [start, end) offsets into the subject
 * (g = 0: the whole match); false when the group did not take part. */
bool sm_regex_group(const struct sm_regex_md *md, unsigned g, size_t *start,
    size_t *end);

#endif /* SM_REGEX_H */
