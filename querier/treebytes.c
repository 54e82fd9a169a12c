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

#define TB_OTHER "other"

struct tb_state {
	const struct sm_mtree *m;
	const int64_t *total;
};

static int
i64_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y ? -1 : x < y);
}

static int
child_cmp(const void *a, const void *b, void *arg)
{
	const struct sm_mtree *m = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint32_t lx, ly;
	const char *sx = sm_strtab_str(&m->names, m->tree.name[x], &lx);
	const char *sy = sm_strtab_str(&m->names, m->tree.name[y], &ly);
	int c = memcmp(sx, sy, SM_MIN(lx, ly));

	if (c != 0)
		return (c);
	return (lx < ly ? -1 : lx > ly);
}

static void
put_uvarint(struct sm_buf *b, uint64_t v)
{
	uint8_t t[10];
	size_t n = 0;

	while (v >= 0x80) {
		t[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	t[n++] = (uint8_t)v;
	sm_buf_append(b, t, n);
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

int
qry_tree_bytes(const struct sm_mtree *m, int64_t max_nodes,
    struct sm_arena *a, uint8_t **outp, size_t *lenp)
{
	const struct sm_tree *t = &m->tree;
	uint32_t n = sm_tree_size(t);
	int64_t *total = NULL, *sorted = NULL, min_val = 0;
	int64_t *synth = NULL;      /* self of the synthetic "other" leaves */
	int64_t *extra = NULL;      /* per node: cut folded into its self */
	uint32_t *first = NULL, *kids = NULL, *stack = NULL, *sel = NULL;
	uint8_t *nz = NULL;
	struct sm_buf b = SM_BUF_INIT;
	uint32_t nkept = 0, sp = 0, nother = 0;
	uint32_t olen = (uint32_t)strlen(TB_OTHER);
	int rv = SM_ENOMEM;

	*outp = NULL;
	*lenp = 0;
	if (n >= TB_SYNTH)
		return (SM_ETOOBIG);
	total = sm_malloc((size_t)n * sizeof(*total));
	nz = sm_calloc(n, 1);
	first = sm_calloc((size_t)n + 1, sizeof(*first));
	kids = sm_malloc(SM_MAX((size_t)n, 1) * sizeof(*kids));
	sel = sm_malloc(SM_MAX((size_t)n, 1) * sizeof(*sel));
	stack = sm_malloc(((size_t)n * 2 + 2) * sizeof(*stack));
	synth = sm_malloc(((size_t)n + 1) * sizeof(*synth));
	extra = sm_calloc(n, sizeof(*extra));
	if (total == NULL || nz == NULL || first == NULL || kids == NULL ||
	    sel == NULL || stack == NULL || synth == NULL || extra == NULL)
		goto out;
	sm_tree_totals(t, m->self, total);
	/* Which subtrees hold any value (parents precede children). */
	for (uint32_t i = n; i-- > 1;) {
		if (m->self[i] != 0)
			nz[i] = 1;
		if (nz[i])
			nz[t->parent[i]] = 1;
	}
	if (n <= 1 || !nz[0]) {
		rv = 0;                 /* empty tree: no bytes */
		goto out;
	}
	/* Children lists (CSR), each sorted by name. */
	for (uint32_t i = 1; i < n; i++)
		if (nz[i]) {
			first[t->parent[i] + 1]++;
			nkept++;
		}
	for (uint32_t i = 0; i < n; i++)
		first[i + 1] += first[i];
	{
		uint32_t *fill = sel;   /* reused as cursors */

		memcpy(fill, first, (size_t)n * sizeof(*fill));
		for (uint32_t i = 1; i < n; i++)
			if (nz[i])
				kids[fill[t->parent[i]]++] = i;
	}
	for (uint32_t i = 0; i < n; i++)
		if (first[i + 1] - first[i] > 1)
			qsort_r(&kids[first[i]], first[i + 1] - first[i],
			    sizeof(*kids), child_cmp, (void *)m);
	/* Threshold: the max_nodes-th largest total, else 0 -- so a child
	 * whose total is negative is cut into "other" whatever the size, as
	 * Pyroscope's MarshalTruncate does (its minValue is 0 for a small
	 * tree, and it keeps children whose total is at least that). */
	if (max_nodes > 0 && nkept > (uint64_t)max_nodes) {
		uint32_t k = 0;

		if ((sorted = sm_malloc((size_t)nkept * sizeof(*sorted))) ==
		    NULL)
			goto out;
		for (uint32_t i = 1; i < n; i++)
			if (nz[i])
				sorted[k++] = total[i];
		qsort(sorted, k, sizeof(*sorted), i64_desc);
		min_val = sorted[max_nodes - 1];
	}
	/* Depth-first from the virtual root (node 0). */
	stack[sp++] = 0;
	while (sp > 0) {
		uint32_t id = stack[--sp], nsel = 0, oi = UINT32_MAX;
		const char *name = "";
		uint32_t len = 0;
		int64_t self = 0, cut = 0;

		if (id & TB_SYNTH) {
			put_node(&b, TB_OTHER, olen, synth[id & ~TB_SYNTH], 0);
			continue;
		}
		if (id != 0) {
			name = sm_strtab_str(&m->names, t->name[id], &len);
			self = sm_add_sat(m->self[id], extra[id]);
		}
		for (uint32_t c = first[id]; c < first[id + 1]; c++) {
			uint32_t ch = kids[c], cl;
			const char *cn = sm_strtab_str(&m->names, t->name[ch],
			    &cl);
			bool is_other = cl == olen &&
			    memcmp(cn, TB_OTHER, olen) == 0;

			if (total[ch] >= min_val || is_other) {
				if (is_other)
					oi = nsel;
				sel[nsel++] = ch;
			} else {
				cut = sm_add_sat(cut, total[ch]);
			}
		}
		/* The children, the cut ones as "other" in its name order. */
		if (cut != 0 && oi == UINT32_MAX) {
			uint32_t pos = 0;

			for (; pos < nsel; pos++) {
				uint32_t cl;
				const char *cn = sm_strtab_str(&m->names,
				    t->name[sel[pos]], &cl);
				int c = memcmp(cn, TB_OTHER, SM_MIN(cl, olen));

				if (c > 0 || (c == 0 && cl > olen))
					break;
			}
			memmove(&sel[pos + 1], &sel[pos], (nsel - pos) *
			    sizeof(*sel));
			synth[nother] = cut;
			sel[pos] = TB_SYNTH | nother++;
			nsel++;
		} else if (cut != 0) {
			/* an existing "other" child takes the cut in its
			 * self, as Pyroscope's insert finds it */
			extra[sel[oi]] = cut;
		}
		put_node(&b, name, len, self, nsel);
		for (uint32_t c = 0; c < nsel; c++)
			stack[sp++] = sel[c];
	}
	if ((rv = sm_buf_error(&b)) != 0)
		goto out;
	if ((*outp = sm_arena_alloc(a, SM_MAX(b.len, 1))) == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	memcpy(*outp, b.b, b.len);
	*lenp = b.len;
	rv = 0;
out:
	sm_buf_fini(&b);
	sm_free(total);
	sm_free(sorted);
	sm_free(synth);
	sm_free(extra);
	sm_free(nz);
	sm_free(first);
	sm_free(kids);
	sm_free(sel);
	sm_free(stack);
	return (rv);
}
