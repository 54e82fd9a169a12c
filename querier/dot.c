/*
 * dot.c -- a merged tree as a Graphviz call graph (SelectMergeStacktraces
 * format DOT), in the shape `go tool pprof -dot` draws.
 *
 * Nodes are functions (Smolder keeps one name per frame), each with its
 * flat value (self: the stacks that end in it) and its cum value (the
 * stacks that pass through it, counted once per stack however deep the
 * recursion); an edge caller -> callee carries the value of the stacks
 * that make that call.  The `max_nodes` functions of largest cum (by
 * size: values are signed) are drawn, pprof's default of 80 when
 * max_nodes is 0; edges between drawn functions are drawn, the rest
 * left out, and a legend box says how many were.  Font size and edge
 * weight grow with flat and edge value as pprof's do, so large
 * functions stand out; colours are left to the viewer.
 *
 * Every name is written as a DOT quoted string ('"' and '\' escaped,
 * control bytes as spaces), so any frame name gives a graph `dot`
 * accepts.  Cost: O(n * depth) for the recursion check, O(f log f) for
 * the f distinct functions; output in the arena.
 */
#include "qry_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/oatab.h"
#include "common/ptype.h"

#define DOT_DEFAULT_NODES 80

struct dot_edge {
	uint32_t from, to;          /* name ids */
	int64_t v;
};

struct dot_ctx {
	const int64_t *flat, *cum;
};

static int64_t
mag(int64_t v)
{
	return (v < 0 ? -v : v);
}

static int
by_cum_desc(const void *a, const void *b, void *arg)
{
	const struct dot_ctx *c = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int64_t mx = mag(c->cum[x]), my = mag(c->cum[y]);

	return (mx != my ? SM_CMP(my, mx) : SM_CMP(x, y));
}

/* A DOT quoted string's body: '"' and '\' escaped, control bytes as
 * spaces. */
static void
put_quoted(struct sm_buf *b, const char *s, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			sm_buf_putc(b, '\\');
		sm_buf_putc(b, c < 0x20 || c == 0x7f ? ' ' : (char)c);
	}
}

static double
pct(int64_t v, int64_t total)
{
	return (total != 0 ? 100.0 * (double)v / (double)mag(total) : 0.0);
}

int
qry_dot_build(const struct sm_mtree *m, const struct sm_ptype *pt,
    int64_t max_nodes, struct sm_arena *a, char **out, size_t *outlen)
{
	const struct sm_tree *t = &m->tree;
	uint32_t n = t->n, nf = m->names.n, nkept = 0, nall, nedges = 0;
	uint32_t ecap = 0;
	int64_t *tot = NULL, *flat = NULL, *cum = NULL, root = 0;
	uint32_t *order = NULL, *drawn = NULL;   /* drawn[name]: N index + 1 */
	struct dot_edge *edges = NULL;
	struct sm_oatab etab;
	struct sm_buf b = SM_BUF_INIT;
	const char *unit = pt->sample_unit;
	int rv = SM_ENOMEM;

	sm_oatab_init(&etab, 0);
	*out = NULL;
	*outlen = 0;
	tot = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*tot));
	flat = sm_calloc(SM_MAX(nf, 1), sizeof(*flat));
	cum = sm_calloc(SM_MAX(nf, 1), sizeof(*cum));
	order = sm_malloc((size_t)SM_MAX(nf, 1) * sizeof(*order));
	drawn = sm_calloc(SM_MAX(nf, 1), sizeof(*drawn));
	if (tot == NULL || flat == NULL || cum == NULL || order == NULL ||
	    drawn == NULL)
		goto out;
	sm_tree_totals(t, m->self, tot);
	for (uint32_t i = 1; i < n; i++) {
		uint32_t nm = t->name[i], pa = t->parent[i], up;
		struct sm_oatab_it it;
		uint64_t key, h;
		uint32_t idx;

		if (t->parent[i] == 0)
			root = sm_add_sat(root, tot[i]);
		flat[nm] = sm_add_sat(flat[nm], m->self[i]);
		/* cum once per stack: not when an ancestor is the same
		 * function (recursion) */
		for (up = pa; up != 0 && t->name[up] != nm; up = t->parent[up])
			;
		if (up == 0)
			cum[nm] = sm_add_sat(cum[nm], tot[i]);
		if (pa == 0 || tot[i] == 0)
			continue;
		key = (uint64_t)t->name[pa] << 32 | nm;
		h = sm_hash_u64(key);
		for (sm_oatab_probe(&etab, h, &it);
		    (idx = sm_oatab_next(&etab, &it)) != SM_OATAB_NONE;)
			if (((uint64_t)edges[idx].from << 32 | edges[idx].to) ==
			    key)
				break;
		if (idx == SM_OATAB_NONE) {
			if (SM_GROW(edges, ecap, nedges + 1, 64) != 0 ||
			    sm_oatab_insert(&etab, &it, nedges) != 0)
				goto out;
			idx = nedges++;
			edges[idx] = (struct dot_edge){ t->name[pa], nm, 0 };
		}
		edges[idx].v = sm_add_sat(edges[idx].v, tot[i]);
	}
	/* the functions to draw */
	for (uint32_t f = 0; f < nf; f++)
		if (flat[f] != 0 || cum[f] != 0)
			order[nkept++] = f;
	{
		struct dot_ctx c = { flat, cum };

		qsort_r(order, nkept, sizeof(*order), by_cum_desc, &c);
	}
	if (max_nodes <= 0)
		max_nodes = DOT_DEFAULT_NODES;
	nall = nkept;
	if ((uint64_t)nkept > (uint64_t)max_nodes)
		nkept = (uint32_t)max_nodes;
	for (uint32_t k = 0; k < nkept; k++)
		drawn[order[k]] = k + 1;

	sm_buf_puts(&b, "digraph \"smolder\" {\n"
	    "node [style=filled fillcolor=\"#f8f8f8\"]\n"
	    "subgraph cluster_L { \"legend\" [shape=box fontsize=16 label=\"");
	put_quoted(&b, pt->sample_type, (uint32_t)strlen(pt->sample_type));
	sm_buf_printf(&b, "\\lTotal: %" PRId64 " %s\\lShowing %u of %u "
	    "functions\\l\"] }\n", root, unit, nkept, nall);
	for (uint32_t k = 0; k < nkept; k++) {
		uint32_t f = order[k], len;
		const char *nm = sm_strtab_str(&m->names, f, &len);
		double fs = 8.0 + 42.0 * (root != 0 ? (double)mag(flat[f]) /
		    (double)mag(root) : 0.0);

		sm_buf_printf(&b, "N%u [label=\"", k + 1);
		put_quoted(&b, nm, len);
		sm_buf_printf(&b, "\\n%" PRId64 " %s (%.2f%%)\\nof %" PRId64
		    " %s (%.2f%%)\" fontsize=%.0f shape=box tooltip=\"", flat[f],
		    unit, pct(flat[f], root), cum[f], unit, pct(cum[f], root),
		    fs);
		put_quoted(&b, nm, len);
		sm_buf_puts(&b, "\"]\n");
	}
	for (uint32_t e = 0; e < nedges; e++) {
		uint32_t x = drawn[edges[e].from], y = drawn[edges[e].to];
		double w;

		if (x == 0 || y == 0 || edges[e].v == 0)
			continue;
		w = root != 0 ? 100.0 * (double)mag(edges[e].v) /
		    (double)mag(root) : 0.0;
		sm_buf_printf(&b, "N%u -> N%u [label=\" %" PRId64 " %s\" "
		    "weight=%.0f penwidth=%.2f]\n", x, y, edges[e].v, unit,
		    w < 1.0 ? 1.0 : w, 1.0 + 5.0 * w / 100.0);
	}
	sm_buf_puts(&b, "}\n");
	if (sm_buf_error(&b) != 0)
		goto out;
	if ((*out = sm_arena_alloc(a, b.len + 1)) == NULL)
		goto out;
	memcpy(*out, b.b, b.len);
	(*out)[b.len] = '\0';
	*outlen = b.len;
	rv = 0;
out:
	sm_buf_fini(&b);
	sm_oatab_fini(&etab);
	sm_free(tot);
	sm_free(flat);
	sm_free(cum);
	sm_free(order);
	sm_free(drawn);
	sm_free(edges);
	return (rv);
}
