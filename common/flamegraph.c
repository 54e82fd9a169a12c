/*
 * flamegraph.c -- flamebearer and collapsed rendering; see flamegraph.h.
 *
 * Both renderers need the same view of the tree (struct fg_view): which
 * nodes exist, and every node's children ordered by name.  A node exists
 * when its subtree holds a non-zero self value (values are signed; for
 * non-negative ones: its total is > 0) and its parent exists (the root
 * always does).  The view is built without comparing strings per node:
 *
 *   1. totals by sm_tree_totals(), then the existence mark (parent[i] < i,
 *      so one forward pass settles it);
 *   2. the (name id, node) pairs of existing nodes are radix sorted by name
 *      id, which yields the distinct names; only those are sorted by their
 *      bytes (memcmp, then shorter first: Go's string order).  Each node
 *      gets the rank of its name in that order.  Siblings never share a
 *      rank: a tree has one child per (parent, name id) and a string table
 *      one id per byte string;
 *   3. child lists in CSR form: existing nodes counting-sorted by rank,
 *      then stably by parent, so kids[off[p] .. off[p + 1]) are p's
 *      children in name order.
 *
 * Cost: O(nodes + names log names) time, a few arrays of O(nodes) heap
 * memory, all freed before returning.  Nothing recurses: trees can be
 * millions of nodes and thousands of frames deep.
 *
 * The flamebearer walk replicates Pyroscope's NewFlameGraph (see the
 * header): a LIFO stack seeded with the root; a popped node is appended to
 * its level, then its kept children are pushed left to right at increasing
 * x, then one synthetic "other" child holding the total of the rest.
 * Pyroscope appends to per-level stacks and reads them back reversed; we
 * record every emitted node in pop order and place the records into their
 * levels walking that record list backwards, which is the same thing.
 */
#include "flamegraph.h"

#include <string.h>

#define FG_NONE UINT32_MAX          /* "does not exist" / "not assigned" */
#define FG_ROOT_NAME "total"
#define FG_OTHER_NAME "other"

/* A distinct name of the view, in name order once sorted. */
struct fg_name {
	const char *p;
	uint32_t len;
	uint32_t uid;    /* order of first sight in the radix-sorted pairs */
};

struct fg_view {
	uint32_t n;              /* tree nodes, root included */
	uint32_t m;              /* existing non-root nodes */
	uint32_t u;              /* distinct names among them */
	int64_t *total;          /* n subtree totals */
	uint32_t *rank;          /* n: name rank, FG_NONE if not existing */
	uint32_t *off;           /* n + 1: child ranges into kids */
	uint32_t *kids;          /* m children, grouped by parent */
	struct fg_name *names;   /* u names by rank */
	uint32_t rank_total;     /* rank of "total", or FG_NONE */
	uint32_t rank_other;     /* rank of "other", or FG_NONE */
};

static void
fg_view_fini(struct fg_view *v)
{
	sm_free(v->total);
	sm_free(v->rank);
	sm_free(v->off);
	sm_free(v->kids);
	sm_free(v->names);
	memset(v, 0, sizeof(*v));
}

static int
fg_name_cmp(const void *a, const void *b)
{
	const struct fg_name *x = a, *y = b;

	return (sm_bytes_cmp(x->p, x->len, y->p, y->len));
}

static inline int
fg_name_is(const struct fg_name *nm, const char *s)
{
	size_t l = strlen(s);

	return (nm->len == l && memcmp(nm->p, s, l) == 0);
}

/*
 * Sort `a` (n pairs packed as name << 32 | node) by the high 32 bits: LSD
 * radix, two passes of 16 bits, stable.  `tmp` holds n entries and `cnt`
 * 65536 counters.  The result ends up back in `a`.
 */
static void
fg_sort_by_name(uint64_t *a, uint64_t *tmp, uint32_t n, uint32_t *cnt)
{
	for (int shift = 32; shift < 64; shift += 16) {
		uint32_t sum = 0;

		memset(cnt, 0, 65536 * sizeof(*cnt));
		for (uint32_t i = 0; i < n; i++)
			cnt[(a[i] >> shift) & 0xffff]++;
		for (uint32_t d = 0; d < 65536; d++) {
			uint32_t c = cnt[d];

			cnt[d] = sum;
			sum += c;
		}
		for (uint32_t i = 0; i < n; i++)
			tmp[cnt[(a[i] >> shift) & 0xffff]++] = a[i];
		memcpy(a, tmp, (size_t)n * sizeof(*a));
	}
}

/*
 * Step 2: distinct names of the existing nodes, sorted, and each node's
 * rank (v->rank[i] != FG_NONE marks the existing nodes on entry).  `tmp`
 * holds m u64 and `cnt` 65536 counters.  Returns 0 or SM_ENOMEM.
 */
static int
fg_view_rank(struct fg_view *v, const struct sm_tree *t,
    const struct sm_strtab *strs, uint64_t *tmp, uint32_t *cnt)
{
	uint64_t *pairs;
	uint32_t *map, u = 0, j = 0;

	if ((pairs = sm_malloc((size_t)v->m * sizeof(*pairs))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 1; i < v->n; i++) {
		if (v->rank[i] != FG_NONE)
			pairs[j++] = (uint64_t)t->name[i] << 32 | i;
	}
	fg_sort_by_name(pairs, tmp, v->m, cnt);
	for (j = 0; j < v->m; j++) {
		uint32_t name = (uint32_t)(pairs[j] >> 32);

		if (j == 0 || name != (uint32_t)(pairs[j - 1] >> 32)) {
			v->names[u].p = sm_strtab_str(strs, name,
			    &v->names[u].len);
			v->names[u].uid = u;
			u++;
		}
		v->rank[(uint32_t)pairs[j]] = u - 1;    /* uid for now */
	}
	sm_free(pairs);
	v->u = u;
	qsort(v->names, u, sizeof(*v->names), fg_name_cmp);
	map = (uint32_t *)tmp;          /* uid -> rank; tmp holds 2m u32 */
	for (uint32_t r = 0; r < u; r++) {
		map[v->names[r].uid] = r;
		if (fg_name_is(&v->names[r], FG_ROOT_NAME))
			v->rank_total = r;
		else if (fg_name_is(&v->names[r], FG_OTHER_NAME))
			v->rank_other = r;
	}
	for (uint32_t i = 1; i < v->n; i++) {
		if (v->rank[i] != FG_NONE)
			v->rank[i] = map[v->rank[i]];
	}
	return (0);
}

/*
 * Step 3: child lists.  Existing nodes counting-sorted by rank into
 * `order` (m entries), then placed stably by parent.  `cnt` holds u + 1
 * counters.  Returns 0 or SM_ENOMEM.
 */
static int
fg_view_kids(struct fg_view *v, const struct sm_tree *t, uint32_t *order,
    uint32_t *cnt)
{
	uint32_t *cur;

	memset(cnt, 0, ((size_t)v->u + 1) * sizeof(*cnt));
	for (uint32_t i = 1; i < v->n; i++) {
		if (v->rank[i] != FG_NONE)
			cnt[v->rank[i] + 1]++;
	}
	for (uint32_t r = 0; r < v->u; r++)
		cnt[r + 1] += cnt[r];
	for (uint32_t i = 1; i < v->n; i++) {
		if (v->rank[i] != FG_NONE)
			order[cnt[v->rank[i]]++] = i;
	}
	for (uint32_t j = 0; j < v->m; j++)
		v->off[t->parent[order[j]] + 1]++;
	for (uint32_t i = 0; i < v->n; i++)
		v->off[i + 1] += v->off[i];
	if ((cur = sm_malloc((size_t)v->n * sizeof(*cur))) == NULL)
		return (SM_ENOMEM);
	memcpy(cur, v->off, (size_t)v->n * sizeof(*cur));
	for (uint32_t j = 0; j < v->m; j++) {
		uint32_t c = order[j];

		v->kids[cur[t->parent[c]]++] = c;
	}
	sm_free(cur);
	return (0);
}

/*
 * Build the view of `t` (see the file comment).  Returns 0 or SM_ENOMEM;
 * on failure the view is empty.
 */
static int
fg_view_init(struct fg_view *v, const struct sm_tree *t,
    const struct sm_strtab *strs, const int64_t *self)
{
	uint32_t n = t->n, m = 0;
	uint64_t *tmp = NULL;
	uint32_t *cnt = NULL, *order = NULL;
	int rv = SM_ENOMEM;

	memset(v, 0, sizeof(*v));
	SM_ASSERT(n >= 1);
	v->n = n;
	v->rank_total = v->rank_other = FG_NONE;
	v->total = sm_malloc((size_t)n * sizeof(*v->total));
	v->rank = sm_malloc((size_t)n * sizeof(*v->rank));
	v->off = sm_calloc((size_t)n + 1, sizeof(*v->off));
	if (v->total == NULL || v->rank == NULL || v->off == NULL)
		goto out;
	/* 1. Totals and existence.  Values are signed (delta profiles), so
	 * a node exists when a non-zero self value lies in its subtree: a
	 * backward pass marks those (in v->rank, as 1), then a forward pass
	 * (parents come first) keeps the marked nodes whose parent exists.
	 * For non-negative values this is exactly "total > 0". */
	sm_tree_totals(t, self, v->total);
	for (uint32_t i = 0; i < n; i++)
		v->rank[i] = 0;
	for (uint32_t i = n; i-- > 1;) {
		SM_ASSERT(t->parent[i] < i);
		if (self[i] != 0 || v->rank[i] != 0) {
			v->rank[i] = 1;
			v->rank[t->parent[i]] = 1;
		}
	}
	v->rank[0] = 0;
	for (uint32_t i = 1; i < n; i++) {
		if (v->rank[i] != 0 && v->rank[t->parent[i]] != FG_NONE) {
			v->rank[i] = 0;
			m++;
		} else {
			v->rank[i] = FG_NONE;
		}
	}
	v->m = m;
	if (m == 0) {
		rv = 0;
		goto out;
	}
	tmp = sm_malloc((size_t)m * sizeof(*tmp));
	cnt = sm_malloc((size_t)SM_MAX(65536u, (size_t)m + 1) * sizeof(*cnt));
	order = sm_malloc((size_t)m * sizeof(*order));
	v->names = sm_malloc((size_t)m * sizeof(*v->names));
	v->kids = sm_malloc((size_t)m * sizeof(*v->kids));
	if (tmp == NULL || cnt == NULL || order == NULL || v->names == NULL ||
	    v->kids == NULL)
		goto out;
	if ((rv = fg_view_rank(v, t, strs, tmp, cnt)) != 0 ||
	    (rv = fg_view_kids(v, t, order, cnt)) != 0)
		goto out;
	rv = 0;
out:
	sm_free(tmp);
	sm_free(cnt);
	sm_free(order);
	if (rv != 0)
		fg_view_fini(v);
	return (rv);
}

/*
 * Pyroscope's minValue: 0 when max_nodes < 1 or there are no more than
 * max_nodes existing nodes (root excluded); else the max_nodes-th largest
 * total, counted with multiplicity.  Pyroscope finds it with a bounded
 * min-heap over a DFS that prunes subtrees whose total is not above the
 * heap minimum; since a child's total never exceeds its parent's, a plain
 * scan with the same bounded heap gives the same value.
 */
static int
fg_min_total(const struct fg_view *v, int64_t max_nodes, int64_t *minp)
{
	uint32_t k, hn = 0;
	int64_t *h;

	*minp = 0;
	if (max_nodes < 1 || (uint64_t)v->m <= (uint64_t)max_nodes)
		return (0);
	k = (uint32_t)max_nodes;        /* < m, so it fits */
	if ((h = sm_malloc((size_t)k * sizeof(*h))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 1; i < v->n; i++) {
		int64_t x = v->total[i];
		uint32_t c, p;

		if (v->rank[i] == FG_NONE)
			continue;
		if (hn < k) {
			for (c = hn++; c > 0 && h[(c - 1) / 2] > x; c = p) {
				p = (c - 1) / 2;
				h[c] = h[p];
			}
			h[c] = x;
			continue;
		}
		if (x <= h[0])
			continue;
		for (c = 0;;) {
			uint32_t l = 2 * c + 1, s = l;

			if (l >= k)
				break;
			if (l + 1 < k && h[l + 1] < h[l])
				s = l + 1;
			if (h[s] >= x)
				break;
			h[c] = h[s];
			c = s;
		}
		h[c] = x;
	}
	SM_ASSERT(hn == k);
	*minp = h[0];
	sm_free(h);
	return (0);
}

/* A pending node of the walk; node == FG_NONE is a synthetic "other". */
struct fg_item {
	uint32_t node;
	uint32_t level;
	int64_t x;
	int64_t other;
};

/* An emitted node, in pop order. */
struct fg_rec {
	int64_t x, total, self;
	uint32_t name, level;
};

struct fg_union;
static void fg_union_fini(struct fg_union *u);
static void fg_union_free(struct fg_union *u);

void
sm_fg_fini(struct sm_fg *fg)
{
	if (fg->levels != NULL) {
		for (uint32_t i = 0; i < fg->nlevels; i++)
			sm_free(fg->levels[i]);
	}
	sm_free(fg->levels);
	sm_free(fg->level_len);
	sm_free(fg->names);
	sm_free(fg->name_len);
	if (fg->own != NULL)
		fg_union_free(fg->own);
	memset(fg, 0, sizeof(*fg));
}

/*
 * The output name index in *slot, assigning the next one to (p, len) when
 * *slot is still FG_NONE.  At most u + 2 names are assigned: fg->names
 * was sized for that.
 */
static uint32_t
fg_slot_name(struct sm_fg *fg, uint32_t *slot, const char *p, uint32_t len)
{
	if (*slot == FG_NONE) {
		*slot = fg->nnames++;
		fg->names[*slot] = p;
		fg->name_len[*slot] = len;
	}
	return (*slot);
}

/*
 * Size fg->levels for levels 0..maxlevel: width values per record, each
 * record's level read at level0 + i * stride (the walks' record types
 * differ).  *fillp gets a zeroed per-level cursor for the caller to free.
 * Returns 0 or SM_ENOMEM (fg then holds partial arrays).
 */
static int
fg_levels_alloc(struct sm_fg *fg, uint32_t maxlevel, const uint32_t *level0,
    size_t stride, uint32_t nrec, uint32_t width, uint32_t **fillp)
{
	fg->nlevels = maxlevel + 1;
	fg->levels = sm_calloc(fg->nlevels, sizeof(*fg->levels));
	fg->level_len = sm_calloc(fg->nlevels, sizeof(*fg->level_len));
	if (fg->levels == NULL || fg->level_len == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < nrec; i++) {
		uint32_t l = *(const uint32_t *)(const void *)
		    ((const char *)level0 + (size_t)i * stride);

		fg->level_len[l] += width;
	}
	for (uint32_t l = 0; l < fg->nlevels; l++) {
		fg->levels[l] = sm_malloc((size_t)SM_MAX(fg->level_len[l], 1) *
		    sizeof(int64_t));
		if (fg->levels[l] == NULL)
			return (SM_ENOMEM);
	}
	if ((*fillp = sm_calloc(fg->nlevels, sizeof(**fillp))) == NULL)
		return (SM_ENOMEM);
	return (0);
}

/*
 * Size fg's name arrays for v's u names plus "total" and "other", give
 * index 0 to the root, and set *by_rankp (the caller frees it) to a
 * per-rank output index, all FG_NONE (unassigned).  Returns 0 or
 * SM_ENOMEM (fg then holds partial arrays).
 */
static int
fg_names_init(struct sm_fg *fg, const struct fg_view *v, uint32_t **by_rankp)
{
	uint32_t *by_rank;

	fg->names = sm_malloc(((size_t)v->u + 2) * sizeof(*fg->names));
	fg->name_len = sm_malloc(((size_t)v->u + 2) * sizeof(*fg->name_len));
	*by_rankp = by_rank = sm_malloc(((size_t)v->u + 1) * sizeof(*by_rank));
	if (fg->names == NULL || fg->name_len == NULL || by_rank == NULL)
		return (SM_ENOMEM);
	for (uint32_t r = 0; r < v->u; r++)
		by_rank[r] = FG_NONE;
	fg->names[0] = FG_ROOT_NAME;
	fg->name_len[0] = sizeof(FG_ROOT_NAME) - 1;
	fg->nnames = 1;
	return (0);
}

/* State of the flamebearer walk. */
struct fg_walk {
	const struct fg_view *v;
	const int64_t *self;
	int64_t min_total;
	struct sm_fg *fg;            /* names are assigned as met */
	uint32_t *by_rank;           /* output name index per rank */
	uint32_t other_idx;          /* output name index of "other" */
	struct fg_item *stk;
	uint32_t nstk, stk_cap;
	struct fg_rec *rec;          /* emitted nodes, in pop order */
	uint32_t nrec, rec_cap;
	uint32_t maxlevel;
	int64_t max_self;
};

/* Output name index of a popped item, assigning it on first sight. */
static uint32_t
fg_name_index(struct fg_walk *w, uint32_t node)
{
	struct sm_fg *fg = w->fg;
	const char *p;
	uint32_t len, *slot;

	if (node == 0)
		return (0);             /* "total", assigned up front */
	if (node == FG_NONE) {
		slot = &w->other_idx;
		p = FG_OTHER_NAME;
		len = sizeof(FG_OTHER_NAME) - 1;
	} else {
		uint32_t r = w->v->rank[node];

		slot = &w->by_rank[r];
		p = w->v->names[r].p;
		len = w->v->names[r].len;
	}
	return (fg_slot_name(fg, slot, p, len));
}

static int
fg_push(struct fg_walk *w, uint32_t node, uint32_t level, int64_t x,
    int64_t other)
{
	if (SM_GROW(w->stk, w->stk_cap, w->nstk + 1, 64) != 0)
		return (SM_ENOMEM);
	w->stk[w->nstk++] = (struct fg_item){ node, level, x, other };
	return (0);
}

/*
 * The walk of NewFlameGraph: pop, record, push the kept children left to
 * right, then one "other" for the rest.  Returns 0 or SM_ENOMEM.
 */
static int
fg_walk_run(struct fg_walk *w)
{
	const struct fg_view *v = w->v;

	if (fg_push(w, 0, 0, 0, 0) != 0)
		return (SM_ENOMEM);
	while (w->nstk > 0) {
		struct fg_item it = w->stk[--w->nstk];
		struct fg_rec *r;
		int64_t cur, other = 0;

		if (SM_GROW(w->rec, w->rec_cap, w->nrec + 1, 256) != 0)
			return (SM_ENOMEM);
		r = &w->rec[w->nrec++];
		r->x = it.x;
		r->level = it.level;
		r->total = it.node == FG_NONE ? it.other : v->total[it.node];
		r->self = it.node == FG_NONE ? it.other : w->self[it.node];
		r->name = fg_name_index(w, it.node);
		w->max_self = SM_MAX(w->max_self, r->self);
		w->maxlevel = SM_MAX(w->maxlevel, it.level);
		if (it.node == FG_NONE)
			continue;
		cur = sm_add_sat(it.x, r->self);
		for (uint32_t k = v->off[it.node]; k < v->off[it.node + 1];
		    k++) {
			uint32_t c = v->kids[k];

			if (v->total[c] < w->min_total ||
			    v->rank[c] == v->rank_other) {
				other = sm_add_sat(other, v->total[c]);
				continue;
			}
			if (fg_push(w, c, it.level + 1, cur, 0) != 0)
				return (SM_ENOMEM);
			cur = sm_add_sat(cur, v->total[c]);
		}
		if (other != 0 &&
		    fg_push(w, FG_NONE, it.level + 1, cur, other) != 0)
			return (SM_ENOMEM);
	}
	return (0);
}

/*
 * Lay the records out per level, last popped first (Pyroscope's reversed
 * per-level stacks), and delta-encode x against the end of the previous
 * node.  Returns 0 or SM_ENOMEM (fg then holds partial arrays).
 */
static int
fg_place(struct sm_fg *fg, const struct fg_rec *rec, uint32_t nrec,
    uint32_t maxlevel)
{
	uint32_t *fill;
	int rv;

	if ((rv = fg_levels_alloc(fg, maxlevel, &rec[0].level, sizeof(*rec),
	    nrec, 4, &fill)) != 0)
		return (rv);
	for (uint32_t i = nrec; i-- > 0;) {
		const struct fg_rec *r = &rec[i];
		int64_t *d = fg->levels[r->level] + fill[r->level];

		d[0] = r->x;
		d[1] = r->total;
		d[2] = r->self;
		d[3] = r->name;
		fill[r->level] += 4;
	}
	sm_free(fill);
	for (uint32_t l = 0; l < fg->nlevels; l++) {
		int64_t prev = 0, *d = fg->levels[l];

		for (uint32_t i = 0; i < fg->level_len[l]; i += 4) {
			int64_t x = d[i];

			/* Offsets and totals saturate (sm_add_sat), so the
			 * delta and the end may too; never wrap. */
			if (__builtin_sub_overflow(x, prev, &d[i]))
				d[i] = x < 0 ? INT64_MIN : INT64_MAX;
			prev = sm_add_sat(x, d[i + 1]);
		}
	}
	return (0);
}

int
sm_fg_build(const struct sm_tree *t, const struct sm_strtab *names,
    const int64_t *self, int64_t max_nodes, struct sm_fg *fg)
{
	struct fg_view v;
	struct fg_walk w;
	int rv;

	memset(fg, 0, sizeof(*fg));
	memset(&w, 0, sizeof(w));
	if ((rv = fg_view_init(&v, t, names, self)) != 0)
		return (rv);
	w.v = &v;
	w.self = self;
	w.fg = fg;
	w.other_idx = FG_NONE;
	if ((rv = fg_min_total(&v, max_nodes, &w.min_total)) != 0)
		goto out;
	if ((rv = fg_names_init(fg, &v, &w.by_rank)) != 0)
		goto out;
	if (v.rank_total != FG_NONE)
		w.by_rank[v.rank_total] = 0;  /* a frame named "total" */
	if ((rv = fg_walk_run(&w)) != 0 ||
	    (rv = fg_place(fg, w.rec, w.nrec, w.maxlevel)) != 0)
		goto out;
	fg->total = v.total[0];
	fg->max_self = w.max_self;
out:
	sm_free(w.stk);
	sm_free(w.rec);
	sm_free(w.by_rank);
	fg_view_fini(&v);
	if (rv != 0)
		sm_fg_fini(fg);
	return (rv);
}

void
sm_fg_write_json(const struct sm_fg *fg, struct sm_buf *out)
{
	sm_buf_puts(out, "{\"names\":[");
	for (uint32_t i = 0; i < fg->nnames; i++) {
		if (i != 0)
			sm_buf_putc(out, ',');
		sm_buf_json_str(out, fg->names[i], fg->name_len[i]);
	}
	sm_buf_puts(out, "],\"levels\":[");
	for (uint32_t l = 0; l < fg->nlevels; l++) {
		if (l != 0)
			sm_buf_putc(out, ',');
		sm_buf_putc(out, '[');
		for (uint32_t i = 0; i < fg->level_len[l]; i++) {
			if (i != 0)
				sm_buf_putc(out, ',');
			sm_buf_put_i64(out, fg->levels[l][i]);
		}
		sm_buf_putc(out, ']');
	}
	sm_buf_puts(out, "],\"numTicks\":");
	sm_buf_put_i64(out, fg->total);
	sm_buf_puts(out, ",\"maxSelf\":");
	sm_buf_put_i64(out, fg->max_self);
	sm_buf_putc(out, '}');
}

/*
 * Pre-order depth-first walk, children by name.  The root has no frame, so
 * its own self (0 in every merged tree) has no line to go on and is not
 * printed.  Each existing node is pushed once: the stack never exceeds m,
 * nor the path the deepest existing node.  The walk's state lives in
 * struct sm_fg_collapsed so that it can stop after any line and resume:
 * a streamed answer holds one piece of text at a time, never the whole
 * (which repeats every path prefix and is many times the tree's size).
 */
struct sm_fg_collapsed {
	const struct sm_tree *t;
	const struct sm_strtab *names;
	const int64_t *self;
	struct fg_view v;
	uint32_t *stk, *depth, *path, nstk;
};

void
sm_fg_collapsed_close(struct sm_fg_collapsed *c)
{
	if (c == NULL)
		return;
	sm_free(c->stk);
	sm_free(c->depth);
	sm_free(c->path);
	fg_view_fini(&c->v);
	sm_free(c);
}

int
sm_fg_collapsed_open(const struct sm_tree *t, const struct sm_strtab *names,
    const int64_t *self, struct sm_fg_collapsed **out)
{
	struct sm_fg_collapsed *c;
	int rv;

	*out = NULL;
	if ((c = sm_calloc(1, sizeof(*c))) == NULL)
		return (SM_ENOMEM);
	c->t = t;
	c->names = names;
	c->self = self;
	if ((rv = fg_view_init(&c->v, t, names, self)) != 0) {
		sm_free(c);
		return (rv);
	}
	if (c->v.m > 0) {
		c->stk = sm_malloc((size_t)c->v.m * sizeof(*c->stk));
		c->depth = sm_malloc((size_t)c->v.m * sizeof(*c->depth));
		c->path = sm_malloc((size_t)c->v.m * sizeof(*c->path));
		if (c->stk == NULL || c->depth == NULL || c->path == NULL) {
			sm_fg_collapsed_close(c);
			return (SM_ENOMEM);
		}
		for (uint32_t k = c->v.off[1]; k-- > c->v.off[0];) {
			c->stk[c->nstk] = c->v.kids[k];
			c->depth[c->nstk++] = 1;
		}
	}
	*out = c;
	return (0);
}

int
sm_fg_collapsed_next(struct sm_fg_collapsed *c, struct sm_buf *out,
    size_t want)
{
	const struct fg_view *v = &c->v;

	while (c->nstk > 0) {
		uint32_t nd = c->stk[--c->nstk], d = c->depth[c->nstk];

		c->path[d - 1] = nd;
		for (uint32_t k = v->off[nd + 1]; k-- > v->off[nd];) {
			c->stk[c->nstk] = v->kids[k];
			c->depth[c->nstk++] = d + 1;
		}
		if (c->self[nd] == 0)
			continue;
		for (uint32_t i = 0; i < d; i++) {
			const char *s;
			uint32_t len;

			if (i != 0)
				sm_buf_putc(out, ';');
			s = sm_strtab_str(c->names, c->t->name[c->path[i]],
			    &len);
			sm_buf_append(out, s, len);
		}
		sm_buf_putc(out, ' ');
		sm_buf_put_i64(out, c->self[nd]);
		sm_buf_putc(out, '\n');
		if (sm_buf_error(out) != 0)
			return (sm_buf_error(out));
		if (out->len >= want)
			return (c->nstk > 0 ? 0 : 1);
	}
	return (1);
}

int
sm_fg_write_collapsed(const struct sm_tree *t,
    const struct sm_strtab *names, const int64_t *self, struct sm_buf *out)
{
	struct sm_fg_collapsed *c;
	int rv;

	if ((rv = sm_fg_collapsed_open(t, names, self, &c)) != 0)
		return (rv);
	rv = sm_fg_collapsed_next(c, out, SIZE_MAX);
	sm_fg_collapsed_close(c);
	return (rv == 1 ? 0 : rv);
}

/* --- diff ------------------------------------------------------------------ */

/*
 * The union of two trees: one node per frame path present on either side,
 * names interned in an own string table, and each side's self values.
 */
struct fg_union {
	struct sm_tree t;
	struct sm_strtab s;
	int64_t *self[2];
	int64_t *sum;
};

static void
fg_union_fini(struct fg_union *u)
{
	sm_tree_fini(&u->t);
	sm_free(u->self[0]);
	sm_free(u->self[1]);
	sm_free(u->sum);
}

static void
fg_union_free(struct fg_union *u)
{
	fg_union_fini(u);
	sm_strtab_fini(&u->s);
	sm_free(u);
}

/* Map side tree `t` into the union; map[i] = union node or FG_NONE. */
static int
fg_union_add(struct fg_union *u, const struct sm_tree *t,
    const struct sm_strtab *names, const int64_t *self, uint32_t *map)
{
	int64_t *tot;
	uint32_t *smap;
	int rv = SM_ENOMEM;

	tot = sm_malloc((size_t)t->n * sizeof(*tot));
	smap = sm_calloc(SM_MAX(sm_strtab_count(names), 1), sizeof(*smap));
	if (tot == NULL || smap == NULL)
		goto out;
	sm_tree_totals(t, self, tot);
	map[0] = 0;
	for (uint32_t i = 1; i < t->n; i++) {
		uint32_t nm = t->name[i], p = map[t->parent[i]];

		map[i] = FG_NONE;
		if (tot[i] <= 0 || p == FG_NONE)
			continue;
		if (smap[nm] == 0) {
			const char *s;
			uint32_t len, id;

			s = sm_strtab_str(names, nm, &len);
			if ((rv = sm_strtab_intern(&u->s, s, len, &id)) != 0)
				goto out;
			smap[nm] = id + 1;
		}
		if ((rv = sm_tree_child(&u->t, p, smap[nm] - 1, &map[i])) != 0)
			goto out;
	}
	rv = 0;
out:
	sm_free(tot);
	sm_free(smap);
	return (rv);
}

static int
fg_union_init(struct fg_union *u, const struct sm_tree *const t[2],
    const struct sm_strtab *const names[2], const int64_t *const self[2])
{
	uint32_t *map[2] = { NULL, NULL };
	int rv = SM_ENOMEM;

	memset(u, 0, sizeof(*u));
	if ((rv = sm_tree_init(&u->t)) != 0)
		return (rv);
	if ((rv = sm_strtab_init(&u->s)) != 0) {
		sm_tree_fini(&u->t);
		return (rv);
	}
	rv = SM_ENOMEM;
	for (int k = 0; k < 2; k++) {
		if ((map[k] = sm_malloc((size_t)t[k]->n * sizeof(**map))) ==
		    NULL)
			goto out;
		if ((rv = fg_union_add(u, t[k], names[k], self[k], map[k])) !=
		    0)
			goto out;
		rv = SM_ENOMEM;
	}
	for (int k = 0; k < 2; k++) {
		if ((u->self[k] = sm_calloc(u->t.n, sizeof(int64_t))) == NULL)
			goto out;
		for (uint32_t i = 1; i < t[k]->n; i++) {
			if (map[k][i] != FG_NONE && self[k][i] > 0)
				u->self[k][map[k][i]] += self[k][i];
		}
	}
	if ((u->sum = sm_malloc((size_t)u->t.n * sizeof(int64_t))) == NULL)
		goto out;
	for (uint32_t i = 0; i < u->t.n; i++)
		u->sum[i] = sm_add_sat(u->self[0][i], u->self[1][i]);
	rv = 0;
out:
	sm_free(map[0]);
	sm_free(map[1]);
	if (rv != 0) {
		fg_union_fini(u);
		sm_strtab_fini(&u->s);
	}
	return (rv);
}

/* A pending node of the diff walk; node == FG_NONE is "other". */
struct fg_ditem {
	uint32_t node, level;
	int64_t x[2];
	int64_t other[2];
};

/* An emitted diff node, in pop order. */
struct fg_drec {
	int64_t x[2], total[2], self[2];
	uint32_t name, level;
};

struct fg_dwalk {
	const struct fg_view *v;
	const int64_t *self[2], *total[2];
	int64_t min_total;
	struct sm_fg *fg;
	uint32_t *by_rank, other_idx;
	struct fg_ditem *stk;
	uint32_t nstk, stk_cap;
	struct fg_drec *rec;
	uint32_t nrec, rec_cap, maxlevel;
	int64_t max_self;
};

static uint32_t
fg_dname(struct fg_dwalk *w, uint32_t node)
{
	struct sm_fg *fg = w->fg;
	uint32_t *slot, r = 0;
	const char *p = FG_OTHER_NAME;
	uint32_t len = sizeof(FG_OTHER_NAME) - 1;

	if (node == 0)
		return (0);
	/* Pyroscope keys names by string: a real "other" frame shares
	 * its index with the synthetic one. */
	if (node != FG_NONE && (r = w->v->rank[node]) != w->v->rank_other) {
		slot = &w->by_rank[r];
		p = w->v->names[r].p;
		len = w->v->names[r].len;
	} else {
		slot = &w->other_idx;
	}
	return (fg_slot_name(fg, slot, p, len));
}

static int
fg_dpush(struct fg_dwalk *w, const struct fg_ditem *it)
{
	if (SM_GROW(w->stk, w->stk_cap, w->nstk + 1, 64) != 0)
		return (SM_ENOMEM);
	w->stk[w->nstk++] = *it;
	return (0);
}

/* NewFlamegraphDiff's walk: as fg_walk_run, on both sides at once; a
 * child is kept when either side's total reaches min_total. */
static int
fg_dwalk_run(struct fg_dwalk *w)
{
	const struct fg_view *v = w->v;
	struct fg_ditem root = { 0, 0, { 0, 0 }, { 0, 0 } };

	if (fg_dpush(w, &root) != 0)
		return (SM_ENOMEM);
	while (w->nstk > 0) {
		struct fg_ditem it = w->stk[--w->nstk], ch;
		struct fg_drec *r;
		int64_t cur[2], other[2] = { 0, 0 };

		if (SM_GROW(w->rec, w->rec_cap, w->nrec + 1, 256) != 0)
			return (SM_ENOMEM);
		r = &w->rec[w->nrec++];
		r->level = it.level;
		for (int k = 0; k < 2; k++) {
			r->x[k] = it.x[k];
			r->total[k] = it.node == FG_NONE ? it.other[k] :
			    w->total[k][it.node];
			r->self[k] = it.node == FG_NONE ? it.other[k] :
			    w->self[k][it.node];
			w->max_self = SM_MAX(w->max_self, r->self[k]);
			cur[k] = it.x[k] + r->self[k];
		}
		r->name = fg_dname(w, it.node);
		w->maxlevel = SM_MAX(w->maxlevel, it.level);
		if (it.node == FG_NONE)
			continue;
		for (uint32_t k = v->off[it.node]; k < v->off[it.node + 1];
		    k++) {
			uint32_t c = v->kids[k];

			if (w->total[0][c] < w->min_total &&
			    w->total[1][c] < w->min_total) {
				other[0] += w->total[0][c];
				other[1] += w->total[1][c];
				continue;
			}
			ch = (struct fg_ditem){ c, it.level + 1,
			    { cur[0], cur[1] }, { 0, 0 } };
			if (fg_dpush(w, &ch) != 0)
				return (SM_ENOMEM);
			cur[0] += w->total[0][c];
			cur[1] += w->total[1][c];
		}
		if (other[0] != 0 || other[1] != 0) {
			ch = (struct fg_ditem){ FG_NONE, it.level + 1,
			    { cur[0], cur[1] }, { other[0], other[1] } };
			if (fg_dpush(w, &ch) != 0)
				return (SM_ENOMEM);
		}
	}
	return (0);
}

static int
fg_dplace(struct sm_fg *fg, const struct fg_drec *rec, uint32_t nrec,
    uint32_t maxlevel)
{
	uint32_t *fill;
	int rv;

	if ((rv = fg_levels_alloc(fg, maxlevel, &rec[0].level, sizeof(*rec),
	    nrec, 7, &fill)) != 0)
		return (rv);
	for (uint32_t i = nrec; i-- > 0;) {
		const struct fg_drec *r = &rec[i];
		int64_t *d = fg->levels[r->level] + fill[r->level];

		d[0] = r->x[0];
		d[1] = r->total[0];
		d[2] = r->self[0];
		d[3] = r->x[1];
		d[4] = r->total[1];
		d[5] = r->self[1];
		d[6] = r->name;
		fill[r->level] += 7;
	}
	sm_free(fill);
	for (uint32_t l = 0; l < fg->nlevels; l++) {
		for (int off = 0; off <= 3; off += 3) {
			int64_t prev = 0, *d = fg->levels[l];

			for (uint32_t i = (uint32_t)off; i < fg->level_len[l];
			    i += 7) {
				d[i] -= prev;
				prev += d[i] + d[i + 1];
			}
		}
	}
	return (0);
}

int
sm_fg_build_diff(const struct sm_tree *lt, const struct sm_strtab *ln,
    const int64_t *lself, const struct sm_tree *rt,
    const struct sm_strtab *rn, const int64_t *rself, int64_t max_nodes,
    struct sm_fg *fg)
{
	const struct sm_tree *t[2] = { lt, rt };
	const struct sm_strtab *nm[2] = { ln, rn };
	const int64_t *sf[2] = { lself, rself };
	struct fg_union *u;
	struct fg_view v;
	struct fg_dwalk w;
	int64_t *tot[2] = { NULL, NULL }, *mx = NULL, *vt;
	int have_view = 0, rv;

	memset(fg, 0, sizeof(*fg));
	memset(&w, 0, sizeof(w));
	if ((u = sm_calloc(1, sizeof(*u))) == NULL)
		return (SM_ENOMEM);
	if ((rv = fg_union_init(u, t, nm, sf)) != 0) {
		sm_free(u);
		return (rv);
	}
	fg->own = u;             /* the names point into u->s */
	if ((rv = fg_view_init(&v, &u->t, &u->s, u->sum)) != 0)
		goto out;
	have_view = 1;
	rv = SM_ENOMEM;
	for (int k = 0; k < 2; k++) {
		if ((tot[k] = sm_malloc((size_t)u->t.n * sizeof(int64_t))) ==
		    NULL)
			goto out;
		sm_tree_totals(&u->t, u->self[k], tot[k]);
	}
	/* combineMinValues: the max_nodes-th largest max(left, right)
	 * over the union's nodes, the root included. */
	if ((mx = sm_malloc((size_t)u->t.n * sizeof(int64_t))) == NULL)
		goto out;
	for (uint32_t i = 0; i < u->t.n; i++)
		mx[i] = SM_MAX(tot[0][i], tot[1][i]);
	w.min_total = 0;
	if (max_nodes >= 1 && (uint64_t)v.m + 1 > (uint64_t)max_nodes) {
		if (max_nodes == 1) {
			w.min_total = mx[0];
		} else {
			vt = v.total;
			v.total = mx;
			rv = fg_min_total(&v, max_nodes - 1, &w.min_total);
			v.total = vt;
			if (rv != 0)
				goto out;
		}
	}
	w.v = &v;
	w.fg = fg;
	w.self[0] = u->self[0];
	w.self[1] = u->self[1];
	w.total[0] = tot[0];
	w.total[1] = tot[1];
	w.other_idx = FG_NONE;
	if ((rv = fg_names_init(fg, &v, &w.by_rank)) != 0)
		goto out;
	if ((rv = fg_dwalk_run(&w)) != 0 ||
	    (rv = fg_dplace(fg, w.rec, w.nrec, w.maxlevel)) != 0)
		goto out;
	fg->left_ticks = tot[0][0];
	fg->right_ticks = tot[1][0];
	fg->total = sm_add_sat(tot[0][0], tot[1][0]);
	fg->max_self = w.max_self;
	fg->diff = 1;
	rv = 0;
out:
	sm_free(w.stk);
	sm_free(w.rec);
	sm_free(w.by_rank);
	sm_free(tot[0]);
	sm_free(tot[1]);
	sm_free(mx);
	if (have_view)
		fg_view_fini(&v);
	if (rv != 0)
		sm_fg_fini(fg);
	return (rv);
}
