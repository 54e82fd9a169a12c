/*
 * fuzz_selector.c -- the query and selector parsers (common/selector.c):
 * sm_query_parse for /render's query= and Connect label selectors, then
 * the canonical form sm_selector_format writes.
 *
 * Input: the query text (NUL-terminated copy, at most 4 KiB).  Properties:
 * 0, or SM_EINVAL / SM_ENOMEM with a message and an empty query; a parsed
 * selector formats to text that parses back to a selector formatting to
 * the same text (a fixed point), and matching it against a label set
 * returns (regexes run with the limits the module sets), and
 * sm_matcher_eval answers 0 or 1, or fails with a message naming a limit.
 */
#include "common/selector.h"

#include <string.h>

#include "common/buf.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct sm_label ls[] = {
		{ "__name__", "process_cpu" },
		{ "service_name", "api" },
		{ "env", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!" },
	};
	char s[FUZZ_STR_MAX + 1];
	struct sm_query q;
	struct sm_selector sel;
	struct sm_buf f1, f2;
	struct sm_err err;
	int rv;

	fuzz_cstring(s, data, size);
	sm_query_init(&q);
	sm_err_clear(&err);
	rv = sm_query_parse(&q, s, &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(q.sel.n == 0 && q.type_id == NULL &&
		    q.metric == NULL && q.app == NULL, "query not empty");
		sm_query_fini(&q);
		return (0);
	}
	(void)sm_selector_match(&q.sel, ls, 3);
	/* Each matcher decides every value, or fails naming a regex limit
	 * (SM_EINVAL, common/selector.c "Regex cost"). */
	for (uint32_t i = 0; i < q.sel.n; i++) {
		for (uint32_t j = 0; j < 3; j++) {
			rv = sm_matcher_eval(&q.sel.m[i], ls[j].value,
			    strlen(ls[j].value), &err);
			if (rv < 0) {
				FUZZ_CHECK_ERR(rv, &err);
				FUZZ_CHECK(rv == SM_EINVAL || rv == SM_ENOMEM,
				    "eval: %d", rv);
			} else {
				FUZZ_CHECK(rv == 0 || rv == 1, "eval: %d", rv);
			}
		}
	}

	sm_buf_init(&f1);
	sm_buf_init(&f2);
	sm_selector_format(&q.sel, &f1);
	sm_buf_putc(&f1, '\0');
	FUZZ_CHECK(f1.err == 0, "format: %d", f1.err);
	sm_selector_init(&sel);
	rv = sm_selector_parse(&sel, f1.b, &err);
	FUZZ_CHECK(rv == 0, "formatted selector %s does not parse: %s", f1.b,
	    err.msg);
	FUZZ_CHECK(sel.n == q.sel.n, "%u matchers, then %u", q.sel.n, sel.n);
	sm_selector_format(&sel, &f2);
	sm_buf_putc(&f2, '\0');
	FUZZ_CHECK(f2.len == f1.len && memcmp(f1.b, f2.b, f1.len) == 0,
	    "format not a fixed point:\n  %s\n  %s", f1.b, f2.b);
	sm_selector_fini(&sel);
	sm_buf_fini(&f1);
	sm_buf_fini(&f2);
	sm_query_fini(&q);
	return (0);
}
