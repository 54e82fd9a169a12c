/*
 * flamegraph.h -- turning a merged stack tree into what users see: the
 * flamebearer (Pyroscope's flamegraph JSON, also the querier.v1 FlameGraph
 * message) and collapsed ("folded") text.
 *
 * Input is a tree (common/tree.h), the string table its names index, and
 * one self value per node (self[0], the root, is normally 0).  Nodes whose
 * subtree total is 0 do not exist for rendering.
 *
 * Flamebearer, byte-compatible with Pyroscope (pkg/model/flamegraph.go,
 * tree.go; docs/wire-formats.md §3):
 *   - children are ordered by name (bytewise), as Pyroscope's tree keeps
 *     them; a child's x starts at parent_x + parent_self (self on the left);
 *   - truncation to max_nodes happens once here, after the full merge:
 *     min_total = the max_nodes-th largest total among non-root nodes (0
 *     when max_nodes < 1 or there are <= max_nodes non-root nodes), as
 *     Pyroscope v1's /pyroscope/render computes it (og's older renderer
 *     counted the root, so its cuts are one node tighter); a child with
 *     total < min_total,
 *     or one literally named "other", is folded into a single "other" child
 *     (self = total) placed after the kept children.  Totals never change;
 *   - names are indexed in the order a LIFO depth-first walk first meets
 *     them (root -> "total" at index 0, then the last child first), and each
 *     distinct name appears once;
 *   - each level lists its nodes left to right as [x, total, self, name]
 *     with x delta-encoded against the end (x + total) of the previous node
 *     in the level;
 *   - numTicks is the root total; maxSelf is the largest self of any
 *     emitted node ("other" nodes included).
 *   Worked example (docs/wire-formats.md §3): a;b=3, a;c=1, d=2 gives
 *     names  ["total","d","a","c","b"]
 *     levels [[0,6,0,0],[0,4,0,2,0,2,2,1],[0,3,3,4,0,1,1,3]]
 *
 * Collapsed: one line "f1;f2;...;leaf <self>\n" per node with self > 0,
 * root first, in depth-first order with children by name.  Not truncated.
 *
 * Ownership: an sm_fg owns its arrays (sm_fg_fini frees them); its `names`
 * point into the caller's string table, which must outlive it.
 * Locking: none; the caller holds whatever lock protects the tree.
 */
#ifndef SM_FLAMEGRAPH_H
#define SM_FLAMEGRAPH_H

#include "buf.h"
#include "strtab.h"
#include "tree.h"

/* A rendered flamegraph, shaped like querier.v1.FlameGraph. */
struct sm_fg {
	const char **names;      /* nnames borrowed pointers (NUL-terminated) */
	uint32_t *name_len;
	uint32_t nnames;
	int64_t **levels;        /* nlevels arrays of 4 * count values */
	uint32_t *level_len;     /* values (not nodes) per level */
	uint32_t nlevels;
	int64_t total;           /* numTicks */
	int64_t max_self;
	int diff;                /* 1: levels hold 7-tuples (a diff) */
	int64_t left_ticks;      /* diff only */
	int64_t right_ticks;
	void *own;               /* diff: the union the names point into */
};

/*
 * Build the flamebearer of `t` (self values `self[0..t->n)`, names from
 * `names`) truncated to `max_nodes` (<= 0: no truncation).  An empty tree
 * gives one level holding the root [0,0,0,0] and names ["total"], as
 * Pyroscope does.  Returns 0 or SM_ENOMEM; on failure *fg is left empty.
 */
int sm_fg_build(const struct sm_tree *t, const struct sm_strtab *names,
    const int64_t *self, int64_t max_nodes, struct sm_fg *fg);

void sm_fg_fini(struct sm_fg *fg);

/*
 * Build the diff flamebearer (querier.v1.FlameGraphDiff) of a left and a
 * right tree, as Pyroscope's NewFlamegraphDiff does:
 *   - the two trees are aligned on their union (a frame path present on
 *     one side only is a node with 0 on the other), children by name;
 *   - each node is [xL, totalL, selfL, xR, totalR, selfR, nameIdx], the
 *     two x columns delta-encoded independently per level;
 *   - min_total = the max_nodes-th largest max(totalL, totalR) over the
 *     union's nodes, root included (0 when there are no more nodes than
 *     max_nodes, or max_nodes < 1); a child is kept when either side
 *     reaches it, the rest fold into one "other" node per parent (both
 *     sides, self = total), emitted when either side is non-zero;
 *   - names are keyed by string, so a real "other" frame shares the
 *     synthetic one's index while a real "total" frame gets its own;
 *   - total = leftTicks + rightTicks (the two root totals); maxSelf is
 *     the largest self of either side among emitted nodes.
 * Unlike sm_fg_build, the names point into a union table the sm_fg owns,
 * so the input tables may go away first.  0 or SM_ENOMEM.
 */
int sm_fg_build_diff(const struct sm_tree *lt, const struct sm_strtab *ln,
    const int64_t *lself, const struct sm_tree *rt,
    const struct sm_strtab *rn, const int64_t *rself, int64_t max_nodes,
    struct sm_fg *fg);

/*
 * Append the `flamebearer` JSON object:
 *   {"names":[...],"levels":[[...],...],"numTicks":N,"maxSelf":M}
 * Strings are escaped as Go's encoding/json does (sm_buf_json_str).
 */
void sm_fg_write_json(const struct sm_fg *fg, struct sm_buf *out);

/*
 * Append collapsed text for every node with self > 0 (see above).  Values
 * are printed as integers.  Returns 0 or SM_ENOMEM (also check the buffer).
 */
int sm_fg_write_collapsed(const struct sm_tree *t,
    const struct sm_strtab *names, const int64_t *self, struct sm_buf *out);

/*
 * The same text in pieces, for a streamed answer: open walks
 * nothing yet (it builds the sorted view, O(nodes) memory); each next()
 * appends whole lines to `out` until it holds at least `want` bytes or
 * the walk ends, and returns 0 (more to come), 1 (done) or SM_ENOMEM /
 * the buffer's error.  t, names and self are borrowed and must stay
 * unchanged until close.  Concatenated pieces equal
 * sm_fg_write_collapsed()'s text.  close(NULL) is a no-op.
 */
struct sm_fg_collapsed;
int sm_fg_collapsed_open(const struct sm_tree *t,
    const struct sm_strtab *names, const int64_t *self,
    struct sm_fg_collapsed **out);
int sm_fg_collapsed_next(struct sm_fg_collapsed *c, struct sm_buf *out,
    size_t want);
void sm_fg_collapsed_close(struct sm_fg_collapsed *c);

#endif /* SM_FLAMEGRAPH_H */
