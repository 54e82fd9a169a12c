/*
 * sm_test_batch.h -- reading a distributor batch back as collapsed text,
 * for the parsers' unit tests (pprof_test, jfr_test).
 *
 * A test gathers (stack, value) lines with cl_push -- stack_str gives a
 * sample's "root;...;leaf" -- and cl_render sorts them, sums equal
 * stacks and renders "stack value\n" lines, so two parses (or a parse
 * and a golden) compare as strings.  Every string pushed is owned by
 * the array and freed by cl_render.
 *
 * batch_ingested checks what a parser's ingest returned: a failure
 * carries its code and a message, a success finishes the batch.
 * CHECK_FAIL expects a run (anything with `rv` and `err`) to have
 * failed with `code` and `needle` in its message.
 *
 * A test that defines BATCH_RUN_IN (its parser's input struct) and
 * BATCH_RUN_INGEST (the parser's ingest function) before including this
 * header gets `struct run` -- one parse into a batch of its own -- with
 * run_open, run_fini and run_go; the parsers take the same arguments, so
 * only the input differs.
 */
#ifndef SM_TEST_BATCH_H
#define SM_TEST_BATCH_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributor/batch.h"
#include "sm_test.h"

struct cline {
	char *s;
	int64_t v;
};

static inline int
cline_cmp(const void *x, const void *y)
{
	return (strcmp(((const struct cline *)x)->s,
	    ((const struct cline *)y)->s));
}

/* The stack of node `leaf`, "root;...;leaf"; malloc'd. */
static inline char *
stack_str(const struct dist_batch *b, uint32_t leaf)
{
	uint32_t depth = 0, i = 0, *path;
	size_t len = 1;
	char *s, *o;

	for (uint32_t nd = leaf; nd != 0; nd = b->tree.parent[nd]) {
		depth++;
		len += b->strings.strs[b->tree.name[nd]].len + 1;
	}
	path = malloc((SM_MAX(depth, 1)) * sizeof(*path));
	s = o = malloc(len);
	SM_REQUIRE(path != NULL && s != NULL);
	for (uint32_t nd = leaf; nd != 0; nd = b->tree.parent[nd])
		path[i++] = nd;
	*o = '\0';
	while (i-- > 0) {
		const struct sm_str *e = &b->strings.strs[b->tree.name[path[i]]];

		memcpy(o, e->p, e->len);
		o += e->len;
		if (i != 0)
			*o++ = ';';
		*o = '\0';
	}
	free(path);
	return (s);
}

/* Append (s, val) to the growing array *v; takes s. */
static inline void
cl_push(struct cline **v, size_t *n, size_t *cap, char *s, int64_t val)
{
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 64;
		*v = realloc(*v, *cap * sizeof(**v));
		SM_REQUIRE(*v != NULL);
	}
	(*v)[*n].s = s;
	(*v)[(*n)++].v = val;
}

/*
 * Sort v[0..n), sum equal stacks and render "stack v\n" lines; sums <= 0
 * are dropped unless keep_nonpositive (a golden leaves out what cancels,
 * a decoder's own output shows it).  *nlines (when not NULL) is the
 * number of lines rendered.  Frees the strings, not v.  Malloc'd.
 */
static inline char *
cl_render(struct cline *v, size_t n, bool keep_nonpositive, size_t *nlines)
{
	size_t out = 0, len = 1, lines = 0;
	char *txt, *o;

	if (n != 0)
		qsort(v, n, sizeof(*v), cline_cmp);
	for (size_t i = 0; i < n; i++) {
		if (out > 0 && strcmp(v[out - 1].s, v[i].s) == 0) {
			v[out - 1].v += v[i].v;
			free(v[i].s);
			continue;
		}
		v[out++] = v[i];
	}
	for (size_t i = 0; i < out; i++)
		len += strlen(v[i].s) + 24;
	txt = o = malloc(len);
	SM_REQUIRE(txt != NULL);
	*o = '\0';
	for (size_t i = 0; i < out; i++) {
		if (keep_nonpositive || v[i].v > 0) {
			o += sprintf(o, "%s %lld\n", v[i].s, (long long)v[i].v);
			lines++;
		}
		free(v[i].s);
	}
	if (nlines != NULL)
		*nlines = lines;
	return (txt);
}

/*
 * cl_render of the samples of b's series k for which keep(series, k, arg)
 * holds, one line per stack.  Malloc'd.
 */
static inline char *
batch_collapse(const struct dist_batch *b,
    bool (*keep)(const struct dist_series *, uint32_t, const void *),
    const void *arg, bool keep_nonpositive, size_t *nlines)
{
	struct cline *v = NULL;
	size_t n = 0, cap = 0;
	char *txt;

	for (uint32_t k = 0; k < b->nseries; k++) {
		const struct dist_series *s = &b->series[k];

		if (!keep(s, k, arg))
			continue;
		for (uint32_t j = 0; j < s->n; j++)
			cl_push(&v, &n, &cap, stack_str(b, s->node[j]),
			    s->value[j]);
	}
	txt = cl_render(v, n, keep_nonpositive, nlines);
	free(v);
	return (txt);
}

/* A parser's ingest answered rv into b: check and finish.  Returns rv. */
static inline int
batch_ingested(int rv, const struct sm_err *err, struct dist_batch *b)
{
	if (rv != 0)
		SM_CHECKF(err->code == rv && err->msg[0] != '\0',
		    "rv %d without a message", rv);
	if (rv == 0)
		SM_REQUIRE(dist_batch_finish(b) == 0);
	return (rv);
}

/* Expect failure with `code` and `needle` in the message. */
#define CHECK_FAIL(r, code, needle)                                         \
	do {                                                                \
		SM_CHECKF((r)->rv == (code), "rv %d (%s), want %s; msg: %s",\
		    (r)->rv, sm_strerror((r)->rv), sm_strerror(code),       \
		    (r)->err.msg);                                          \
		SM_CHECKF(strstr((r)->err.msg, (needle)) != NULL,           \
		    "message \"%s\" lacks \"%s\"", (r)->err.msg, (needle)); \
	} while (0)

#ifdef BATCH_RUN_IN
struct run {
	struct sm_arena *a;
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	struct sm_label base[4];
	BATCH_RUN_IN in;
	int rv;
};

/*
 * A fresh run under the default limits (the batch reads them from r->lim,
 * so a test may change them before it parses), at 1700000000000 ms with
 * the one base label service_name="app".
 */
static inline void
run_open(struct run *r)
{
	memset(r, 0, sizeof(*r));
	r->a = sm_arena_create(0);
	SM_REQUIRE(r->a != NULL);
	dist_limits_default(&r->lim);
	SM_REQUIRE(dist_batch_init(&r->b, r->a, &r->lim) == 0);
	r->base[0] = (struct sm_label){ "service_name", "app" };
	r->in.base = r->base;
	r->in.nbase = 1;
	r->in.time_ms = 1700000000000;
}

static inline void
run_fini(struct run *r)
{
	dist_batch_fini(&r->b);
	sm_arena_destroy(r->a);
}

/* Ingest and, on success, finish the batch.  Returns the parser's rv. */
static inline int
run_go(struct run *r, const uint8_t *p, size_t n)
{
	sm_err_clear(&r->err);
	r->rv = BATCH_RUN_INGEST(p, n, &r->in, &r->b, &r->err);
	return (batch_ingested(r->rv, &r->err, &r->b));
}

/* A run of the test's run_init() on p[0..n) that must fail as CHECK_FAIL
 * says (a macro, so a failure names the caller's line). */
#define CHECK_RUN_FAILS(p, n, code, needle)                                 \
	do {                                                                \
		struct run run_;                                            \
									    \
		run_init(&run_);                                            \
		run_go(&run_, (p), (n));                                    \
		CHECK_FAIL(&run_, code, needle);                            \
		run_fini(&run_);                                            \
	} while (0)
#endif /* BATCH_RUN_IN */

#endif
