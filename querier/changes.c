/*
 * changes.c -- top changes: which functions' share of the profile changed
 * most between two merges ("what got slower after the deploy"), for
 * GET /api/top-changes (render.c) and the web UI's Changes view.
 *
 * For each side (a merged tree, struct sm_mtree) and each function name:
 *   - self: the sum of the values of the nodes of that name (the samples
 *     whose leaf frame it is);
 *   - total: the sum of the values of the samples whose stack has that
 *     name anywhere, each sample once however often the name recurs in
 *     its stack (a node's subtree counts unless an ancestor has the same
 *     name).
 * A share is a value over its side's total (the sum of every value).  A
 * function's change is its right share minus its left share, self or
 * total as asked; the answer lists the functions by that change,
 * largest rise first, names breaking ties, at most `limit` of them.
 * Shares, not values, so two ranges of different lengths or two label
 * sets of different sizes compare.
 *
 * Cost: linear in the two trees' nodes (one depth-first walk each, child
 * lists built by counting), plus a sort of the functions.  Locking: none;
 * the trees are the caller's.
 */
#include "qry_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"

struct fn_stat {
	int64_t self[2], total[2];
	uint32_t name;          /* in the union table */
};

struct changes {
	struct sm_strtab names;    /* the union of both sides' names */
	struct fn_stat *v;         /* per union name */
	uint32_t n, cap;
	int64_t side_total[2];
	bool by_self;
};

static struct fn_stat *
changes_fn(struct changes *c, const struct sm_str *s)
{
	uint32_t id;

	if (sm_strtab_intern(&c->names, s->p, s->len, &id) != 0)
		return (NULL);
	while (id >= c->n) {
		if (c->n == c->cap) {
			uint32_t ncap = c->cap ? c->cap * 2 : 256;
			struct fn_stat *nv = sm_realloc(c->v, (size_t)ncap *
			    sizeof(*nv));

			if (nv == NULL)
				return (NULL);
			c->v = nv;
			c->cap = ncap;
		}
		memset(&c->v[c->n], 0, sizeof(c->v[c->n]));
		c->v[c->n].name = c->n;
		c->n++;
	}
	return (&c->v[id]);
}

/*
 * Side `side`'s self and total per function of merged tree m.  0 or
 * SM_ENOMEM.
 */
static int
changes_side(struct changes *c, const struct sm_mtree *m, int side)
{
	const struct sm_tree *t = &m->tree;
	uint32_t n = t->n, *first = NULL, *next = NULL, *stack = NULL,
	    *active = NULL, *fn = NULL, sp = 0;
	int64_t *tot = NULL;
	int rv = SM_ENOMEM;

	if (n <= 1)
		return (0);
	tot = sm_calloc(n, sizeof(*tot));
	first = sm_malloc((size_t)n * sizeof(*first));
	next = sm_malloc((size_t)n * sizeof(*next));
	stack = sm_malloc(2 * (size_t)n * sizeof(*stack));
	fn = sm_malloc((size_t)n * sizeof(*fn));
	active = sm_calloc(SM_MAX(m->names.n, 1), sizeof(*active));
	if (tot == NULL || first == NULL || next == NULL || stack == NULL ||
	    fn == NULL || active == NULL)
		goto out;
	/* subtree totals (parents come before their children) */
	for (uint32_t i = 0; i < n; i++) {
		tot[i] = m->self[i];
		first[i] = UINT32_MAX;
	}
	for (uint32_t i = n - 1; i >= 1; i--) {
		SM_ASSERT(t->parent[i] < i);
		tot[t->parent[i]] = sm_add_sat(tot[t->parent[i]], tot[i]);
		next[i] = first[t->parent[i]];
		first[t->parent[i]] = i;
	}
	c->side_total[side] = tot[0];
	for (uint32_t i = 1; i < n; i++) {
		struct fn_stat *f;

		SM_ASSERT(t->name[i] < m->names.n);
		if ((f = changes_fn(c, &m->names.strs[t->name[i]])) == NULL)
			goto out;
		fn[i] = (uint32_t)(f - c->v);
		f->self[side] = sm_add_sat(f->self[side], m->self[i]);
	}
	/* Depth first from the root's children: a node's subtree counts
	 * for its name unless an ancestor on the path has the same name.
	 * A node is pushed once (entered) and again as its exit mark (the
	 * top bit). */
	for (uint32_t ch = first[0]; ch != UINT32_MAX; ch = next[ch])
		stack[sp++] = ch;
	while (sp > 0) {
		uint32_t i = stack[--sp];

		if (i & 0x80000000u) {
			active[t->name[i & 0x7fffffffu]]--;
			continue;
		}
		if (active[t->name[i]]++ == 0)
			c->v[fn[i]].total[side] = sm_add_sat(
			    c->v[fn[i]].total[side], tot[i]);
		/* the exit mark under the children: the stack holds the
		 * path's exit marks and pending siblings, under 2n */
		if (sp >= 2 * n) {
			rv = SM_EINTERNAL;
			goto out;
		}
		stack[sp++] = i | 0x80000000u;
		for (uint32_t ch = first[i]; ch != UINT32_MAX; ch = next[ch]) {
			if (sp >= 2 * n) {
				rv = SM_EINTERNAL;
				goto out;
			}
			stack[sp++] = ch;
		}
	}
	rv = 0;
out:
	sm_free(tot);
	sm_free(first);
	sm_free(next);
	sm_free(stack);
	sm_free(fn);
	sm_free(active);
	return (rv);
}

static double
share(int64_t v, int64_t total)
{
	return (total == 0 ? 0.0 : (double)v / (double)total);
}

static double
change_of(const struct changes *c, const struct fn_stat *f)
{
	if (c->by_self)
		return (share(f->self[1], c->side_total[1]) -
		    share(f->self[0], c->side_total[0]));
	return (share(f->total[1], c->side_total[1]) -
	    share(f->total[0], c->side_total[0]));
}

static int
fn_cmp(const void *a, const void *b, void *arg)
{
	const struct changes *c = arg;
	const struct fn_stat *x = a, *y = b;
	double dx = change_of(c, x), dy = change_of(c, y);
	const struct sm_str *nx, *ny;

	if (dx != dy)
		return (dx > dy ? -1 : 1);
	nx = &c->names.strs[x->name];
	ny = &c->names.strs[y->name];
	return (sm_bytes_cmp(nx->p, nx->len, ny->p, ny->len));
}

static void
put_side(struct sm_buf *out, const struct changes *c,
    const struct fn_stat *f, int side)
{
	sm_buf_printf(out, "{\"self\":%lld,\"total\":%lld,\"selfShare\":%.9g,"
	    "\"totalShare\":%.9g}", (long long)f->self[side],
	    (long long)f->total[side], share(f->self[side],
	    c->side_total[side]), share(f->total[side], c->side_total[side]));
}

int
qry_changes_json(const struct sm_mtree *left, const struct sm_mtree *right,
    bool by_self, uint32_t limit, struct sm_buf *out, struct sm_err *err)
{
	struct changes c;
	int rv;

	memset(&c, 0, sizeof(c));
	c.by_self = by_self;
	if (sm_strtab_init(&c.names) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = changes_side(&c, left, 0)) != 0 ||
	    (rv = changes_side(&c, right, 1)) != 0) {
		sm_err_set(err, rv, rv == SM_ENOMEM ? "out of memory" :
		    "top changes: a merged tree is not a tree");
		goto out;
	}
	qsort_r(c.v, c.n, sizeof(*c.v), fn_cmp, &c);
	sm_buf_printf(out, "{\"left\":{\"total\":%lld,\"profiles\":%llu},"
	    "\"right\":{\"total\":%lld,\"profiles\":%llu},\"by\":\"%s\","
	    "\"functions\":[", (long long)c.side_total[0],
	    (unsigned long long)left->profiles, (long long)c.side_total[1],
	    (unsigned long long)right->profiles, by_self ? "self" : "total");
	for (uint32_t i = 0, k = 0; i < c.n && k < limit; i++) {
		const struct fn_stat *f = &c.v[i];
		const struct sm_str *nm = &c.names.strs[f->name];

		if (f->self[0] == 0 && f->self[1] == 0 && f->total[0] == 0 &&
		    f->total[1] == 0)
			continue;       /* a name only the tables have */
		if (k++ > 0)
			sm_buf_putc(out, ',');
		sm_buf_puts(out, "{\"name\":");
		sm_buf_json_str(out, nm->p, nm->len);
		sm_buf_puts(out, ",\"left\":");
		put_side(out, &c, f, 0);
		sm_buf_puts(out, ",\"right\":");
		put_side(out, &c, f, 1);
		sm_buf_printf(out, ",\"selfChange\":%.9g,\"totalChange\":%.9g}",
		    share(f->self[1], c.side_total[1]) - share(f->self[0],
		    c.side_total[0]), share(f->total[1], c.side_total[1]) -
		    share(f->total[0], c.side_total[0]));
	}
	sm_buf_printf(out, "],\"functionsTotal\":%u}\n", c.n);
	rv = 0;
out:
	sm_strtab_fini(&c.names);
	sm_free(c.v);
	return (rv);
}
