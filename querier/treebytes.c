/*
 * treebytes.c -- a merged tree as Pyroscope's tree bytes
 * (SelectMergeStacktraces format TREE, the `tree` field of the answer).
 *
 * Encoding (Pyroscope's function-name tree, as its Tree.Bytes writes and
 * UnmarshalTree reads it): nodes in depth-first order from a virtual root
 * with an empty name and self 0; each node is
 *     uvarint(len(name)) name-bytes uvarint(self) uvarint(nchildren)
 * and its children follow, each with its whole subtree, last child (in
 * byte order of the names) first: the writer pushes the sorted children
 * on a stack.  Decoders do not depend on the order, but matching it makes
 * Smolder's bytes identical to Pyroscope's for the same tree.  Self values
 * are written as uint64 (a negative self, which Smolder keeps for signed
 * samples, reads back as the same int64 in Go).  An empty tree is zero
 * bytes.
 *
 * Truncation as Pyroscope's: the threshold is the max_nodes-th largest
 * subtree total when there are more nodes than that, else 0; children
 * below it are cut and their totals summed into one "other" child (added
 * to an existing "other" child's self if there is one), so every total is
 * kept -- which also folds each subtree with a negative total (a delta or
 * diff profile) into "other", as Pyroscope's bytes do.  Subtrees whose
 * values are all zero are not written (Pyroscope's trees never hold them).
 *
 * Cost: O(n log n) for n nodes (the sort of children by name and of the
 * totals for the threshold); memory O(n) beside the output.
 */
#include "qry_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/varint.h"

#define TB_OTHER "other"

/* The working arrays of one encoding, each of the tree's size. */
struct tb_state {
	const struct sm_mtree *m;
	uint32_t n;
	int64_t *total;             /* per node: its subtree's total */
	int64_t *synth;             /* self of the synthetic "other" leaves */
	int64_t *extra;             /* per node: cut folded into its self */
	uint32_t *first, *kids;     /* children (CSR): kids[first[i]..] */
	uint32_t *stack, *sel;
	uint8_t *nz;                /* per node: its subtree holds a value */
	uint32_t nkept;             /* nodes with nz set, the root aside */
	uint32_t nother;            /* synthetic "other" leaves so far */
	int64_t min_val;            /* children below it are cut */
};

static int
child_cmp(const void *a, const void *b, void *arg)
{
	const struct sm_mtree *m = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint32_t lx, ly;
	const char *sx = sm_strtab_str(&m->names, m->tree.name[x], &lx);
	const char *sy = sm_strtab_str(&m->names, m->tree.name[y], &ly);

	return (sm_bytes_cmp(sx, lx, sy, ly));
}

static void
put_uvarint(struct sm_buf *b, uint64_t v)
{
	uint8_t t[SM_UVARINT_MAX];

	sm_buf_append(b, t, sm_uvarint_put(t, v));
}

static void
put_node(struct sm_buf *b, const char *name, size_t len, int64_t self,
    uint32_t nchildren)
{
	put_uvarint(b, len);
	sm_buf_append(b, name, len);
	put_uvarint(b, (uint64_t)self);
	put_uvarint(b, nchildren);
}

/* Stack entries: a node id, or (TB_SYNTH | x) for a synthetic "other"
 * leaf whose self is other[x]. */
#define TB_SYNTH 0x80000000u

/* Allocate st's working arrays for a tree of st->n nodes. */
static int
tb_alloc(struct tb_state *st)
{
	uint32_t n = st->n;

	st->total = sm_malloc((size_t)n * sizeof(*st->total));
	st->nz = sm_calloc(n, 1);
	st->first = sm_calloc((size_t)n + 1, sizeof(*st->first));
	st->kids = sm_malloc(SM_MAX((size_t)n, 1) * sizeof(*st->kids));
	st->sel = sm_malloc(SM_MAX((size_t)n, 1) * sizeof(*st->sel));
	st->stack = sm_malloc(((size_t)n * 2 + 2) * sizeof(*st->stack));
	st->synth = sm_malloc(((size_t)n + 1) * sizeof(*st->synth));
	st->extra = sm_calloc(n, sizeof(*st->extra));
	if (st->total == NULL || st->nz == NULL || st->first == NULL ||
	    st->kids == NULL || st->sel == NULL || st->stack == NULL ||
	    st->synth == NULL || st->extra == NULL)
		return (SM_ENOMEM);
	return (0);
}

/* Free st's working arrays. */
static void
tb_free(struct tb_state *st)
{
	sm_free(st->total);
	sm_free(st->synth);
	sm_free(st->extra);
	sm_free(st->nz);
	sm_free(st->first);
	sm_free(st->kids);
	sm_free(st->sel);
	sm_free(st->stack);
}

/* Mark which subtrees hold any value (parents precede children). */
static void
tb_mark_values(struct tb_state *st)
{
	const struct sm_tree *t = &st->m->tree;

	for (uint32_t i = st->n; i-- > 1;) {
		if (st->m->self[i] != 0)
			st->nz[i] = 1;
		if (st->nz[i])
			st->nz[t->parent[i]] = 1;
	}
}

/* Build the children lists (CSR) of the nodes holding a value, each
 * sorted by name, and count those nodes. */
static void
tb_children(struct tb_state *st)
{
	const struct sm_tree *t = &st->m->tree;
	uint32_t n = st->n, *first = st->first;
	uint32_t *fill = st->sel;   /* reused as cursors */

	for (uint32_t i = 1; i < n; i++)
		if (st->nz[i]) {
			first[t->parent[i] + 1]++;
			st->nkept++;
		}
	for (uint32_t i = 0; i < n; i++)
		first[i + 1] += first[i];
	memcpy(fill, first, (size_t)n * sizeof(*fill));
	for (uint32_t i = 1; i < n; i++)
		if (st->nz[i])
			st->kids[fill[t->parent[i]]++] = i;
	for (uint32_t i = 0; i < n; i++)
		if (first[i + 1] - first[i] > 1)
			qsort_r(&st->kids[first[i]], first[i + 1] - first[i],
			    sizeof(*st->kids), child_cmp, (void *)st->m);
}

/*
 * Set the threshold: the max_nodes-th largest total, else 0 -- so a child
 * whose total is negative is cut into "other" whatever the size, as
 * Pyroscope's MarshalTruncate does (its minValue is 0 for a small tree,
 * and it keeps children whose total is at least that).  0 or SM_ENOMEM.
 */
static int
tb_threshold(struct tb_state *st, int64_t max_nodes)
{
	int64_t *sorted;
	uint32_t k = 0;

	st->min_val = 0;
	if (max_nodes <= 0 || st->nkept <= (uint64_t)max_nodes)
		return (0);
	if ((sorted = sm_malloc((size_t)st->nkept * sizeof(*sorted))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 1; i < st->n; i++)
		if (st->nz[i])
			sorted[k++] = st->total[i];
	qsort(sorted, k, sizeof(*sorted), sm_i64_desc_cmp);
	st->min_val = sorted[max_nodes - 1];
	sm_free(sorted);
	return (0);
}

/*
 * Choose the children of node `id` that are written into st->sel (the
 * count returned), in name order: those at or above the threshold and an
 * "other" child; the cut ones become a synthetic "other" leaf, or add to
 * the self of an existing "other" child, as Pyroscope's insert finds it.
 */
static uint32_t
tb_select(struct tb_state *st, uint32_t id, uint32_t olen)
{
	const struct sm_mtree *m = st->m;
	uint32_t *sel = st->sel, nsel = 0, oi = UINT32_MAX;
	int64_t cut = 0;

	for (uint32_t c = st->first[id]; c < st->first[id + 1]; c++) {
		uint32_t ch = st->kids[c], cl;
		const char *cn = sm_strtab_str(&m->names, m->tree.name[ch],
		    &cl);
		bool is_other = cl == olen && memcmp(cn, TB_OTHER, olen) == 0;

		if (st->total[ch] >= st->min_val || is_other) {
			if (is_other)
				oi = nsel;
			sel[nsel++] = ch;
		} else {
			cut = sm_add_sat(cut, st->total[ch]);
		}
	}
	if (cut != 0 && oi == UINT32_MAX) {
		uint32_t pos = 0;

		for (; pos < nsel; pos++) {
			uint32_t cl;
			const char *cn = sm_strtab_str(&m->names,
			    m->tree.name[sel[pos]], &cl);
			int c = memcmp(cn, TB_OTHER, SM_MIN(cl, olen));

			if (c > 0 || (c == 0 && cl > olen))
				break;
		}
		memmove(&sel[pos + 1], &sel[pos], (nsel - pos) * sizeof(*sel));
		st->synth[st->nother] = cut;
		sel[pos] = TB_SYNTH | st->nother++;
		nsel++;
	} else if (cut != 0) {
		st->extra[sel[oi]] = cut;
	}
	return (nsel);
}

/* Write the tree depth-first from the virtual root (node 0) into b. */
static void
tb_write(struct tb_state *st, struct sm_buf *b)
{
	const struct sm_mtree *m = st->m;
	uint32_t olen = (uint32_t)strlen(TB_OTHER), sp = 0;

	st->stack[sp++] = 0;
	while (sp > 0) {
		uint32_t id = st->stack[--sp], nsel;
		const char *name = "";
		uint32_t len = 0;
		int64_t self = 0;

		if (id & TB_SYNTH) {
			put_node(b, TB_OTHER, olen, st->synth[id & ~TB_SYNTH],
			    0);
			continue;
		}
		if (id != 0) {
			name = sm_strtab_str(&m->names, m->tree.name[id], &len);
			self = sm_add_sat(m->self[id], st->extra[id]);
		}
		nsel = tb_select(st, id, olen);
		put_node(b, name, len, self, nsel);
		for (uint32_t c = 0; c < nsel; c++)
			st->stack[sp++] = st->sel[c];
	}
}

int
qry_tree_bytes(const struct sm_mtree *m, int64_t max_nodes,
    struct sm_arena *a, uint8_t **outp, size_t *lenp)
{
	struct tb_state st = { .m = m, .n = sm_tree_size(&m->tree) };
	struct sm_buf b = SM_BUF_INIT;
	int rv;

	*outp = NULL;
	*lenp = 0;
	if (st.n >= TB_SYNTH)
		return (SM_ETOOBIG);
	if ((rv = tb_alloc(&st)) != 0)
		goto out;
	sm_tree_totals(&m->tree, m->self, st.total);
	tb_mark_values(&st);
	if (st.n <= 1 || !st.nz[0])
		goto out;               /* empty tree: no bytes */
	tb_children(&st);
	if ((rv = tb_threshold(&st, max_nodes)) != 0)
		goto out;
	tb_write(&st, &b);
	if ((rv = sm_buf_error(&b)) != 0)
		goto out;
	if ((*outp = sm_arena_alloc(a, SM_MAX(b.len, 1))) == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	memcpy(*outp, b.b, b.len);
	*lenp = b.len;
out:
	sm_buf_fini(&b);
	tb_free(&st);
	return (rv);
}
