/*
 * selector.h -- label matchers, selectors and the two query syntaxes.
 *
 * Matchers (docs/architecture.md §5, PromQL semantics): k="v", k!="v", k=~"re", k!~"re".
 * Regexes are PCRE2 compiled fully anchored (PCRE2_ANCHORED |
 * PCRE2_ENDANCHORED, UTF mode, DOTALL, JIT when available), as Prometheus
 * anchors RE2 and lets '.' match newlines.  A label the series does not
 * have matches as the empty string, so
 * k="" selects series without k, k!="" those with it, and k=~".*" all.
 *
 * Query syntaxes accepted by sm_query_parse (docs/wire-formats.md §3):
 *   - profile-type id form (Pyroscope v1):
 *       process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="api"}
 *     5 colon-separated parts (a 6th ":delta" part is accepted and
 *     ignored); becomes the matcher __profile_type__="<id>".
 *   - legacy FlameQL (og Pyroscope):  myapp.cpu{env="prod"}
 *     the suffix after the last '.' is looked up in the legacy type table
 *     (common/ptype.h) and becomes __name__, __type__ and __unit__
 *     matchers; the rest becomes service_name="myapp".  With no '.', the
 *     type is cpu.  An unknown suffix is an error.
 *   - a bare selector {__profile_type__="...", service_name="..."}.
 *   Values are double-quoted (Go escapes), single-quoted or backquoted.
 *   Whitespace is allowed around tokens; matchers are comma-separated and
 *   a trailing comma is accepted.
 *
 * Ownership: a selector owns copies of its names and values and the
 * compiled regexes; sm_selector_fini frees them.
 * Locking: a selector is used by one thread at a time (PCRE2 match data is
 * per selector).
 */
#ifndef SM_SELECTOR_H
#define SM_SELECTOR_H

#include <stdbool.h>

#include "labels.h"
#include "regex.h"
#include "sm.h"

enum sm_match_type {
	SM_MATCH_EQ = 0,
	SM_MATCH_NEQ = 1,
	SM_MATCH_RE = 2,
	SM_MATCH_NRE = 3,
};

struct sm_matcher {
	enum sm_match_type type;
	char *name;
	char *value;
	struct sm_regex *re;      /* for RE/NRE (regex.h, with its limits) */
	struct sm_regex_md *md;   /* its match area: a selector is used by
				   * one thread at a time */
};

/*
 * Regex cost: patterns are compiled with regex.h's limits (SM_RE_LIMITED:
 * SM_RE_MATCH_LIMIT backtracking steps, SM_RE_DEPTH_LIMIT nested points,
 * SM_RE_HEAP_LIMIT_KIB of memory), so a catastrophic pattern such as
 * (a+)+ costs at most about a millisecond per value; sm_matcher_eval
 * turns a limit into SM_EINVAL naming it.
 */

struct sm_selector {
	struct sm_matcher *m;
	uint32_t n, cap;
};

void sm_selector_init(struct sm_selector *s);
void sm_selector_fini(struct sm_selector *s);

/*
 * Append a matcher (copies name and value, compiles the regex).  Returns 0,
 * SM_EINVAL (bad regex, message in err) or SM_ENOMEM.
 */
int sm_selector_add(struct sm_selector *s, enum sm_match_type type,
    const char *name, const char *value, struct sm_err *err);

/*
 * Parse "{k="v", ...}" (braces required, may be empty) and append its
 * matchers to `s`; label names are [a-zA-Z_][a-zA-Z0-9_.]*.  Returns 0,
 * SM_ENOMEM, or SM_EINVAL with a message naming the offending position
 * (byte offset from 0); on failure `s` is unchanged.
 */
int sm_selector_parse(struct sm_selector *s, const char *text,
    struct sm_err *err);

/*
 * Does the label value (NULL = absent = "") match?  1 or 0, or SM_EINVAL
 * when the regex hit one of the SM_RE_* limits on this value (the message
 * names the limit, the label and the pattern) and SM_ENOMEM.  Queries use
 * this, so a pattern too costly to decide fails instead of answering wrong.
 */
int sm_matcher_eval(const struct sm_matcher *m, const char *value,
    size_t len, struct sm_err *err);

/* sm_matcher_eval as a bool, for callers that cannot fail: a value the
 * regex cannot decide within the limits counts as "no match" for =~ and
 * as "match" for !~ (what PCRE2's failure code gave before the limits). */
bool sm_matcher_match(const struct sm_matcher *m, const char *value,
    size_t len);

/* Do all matchers match the label set (sorted or not)? */
bool sm_selector_match(const struct sm_selector *s, const struct sm_label *v,
    uint32_t n);

/* A parsed /render query. */
struct sm_query {
	struct sm_selector sel;      /* every matcher, type matchers included */
	/* The profile type the query names; parts may be "" for a legacy
	 * query that does not pin the period. */
	char *type_id;               /* full id, or NULL for legacy queries */
	char *metric;                /* __name__, e.g. "process_cpu" */
	char *sample_type;           /* e.g. "cpu" */
	char *sample_unit;           /* e.g. "nanoseconds" */
	char *app;                   /* legacy form: the app name, else NULL */
};

void sm_query_init(struct sm_query *q);
void sm_query_fini(struct sm_query *q);

/*
 * Parse any of the three forms above into `q`, which the call initializes
 * (pass an empty query; sm_query_fini it afterwards).  0, SM_EINVAL
 * (message in err, naming the byte offset) or SM_ENOMEM; on failure `q`
 * is left empty.  The id form's type_id is the 5-part id (":delta"
 * dropped); a legacy query names the sampleRate form of its type
 * (myapp.cpu: process_cpu, cpu, nanoseconds; type_id NULL).
 */
int sm_query_parse(struct sm_query *q, const char *text, struct sm_err *err);

/*
 * Append the selector in canonical text form: {a="b",c=~"d"} with values
 * escaped as Go's %q would.  Used in logs and RPC debugging.
 */
void sm_selector_format(const struct sm_selector *s, struct sm_buf *out);

#endif /* SM_SELECTOR_H */
