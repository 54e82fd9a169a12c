/*
 * mtree.h -- a merge tree: partial call trees from several sources (an
 * ingester's head and blocks, several ingesters' answers) folded into one.
 *
 * Each source is a tree in topological order (parents before children)
 * with its own string table; adding it is one pass over its nodes,
 * interning names and (parent, name) pairs into this tree and adding self
 * values.  Cost O(nodes) per source with no per-sample work.  Values add
 * with saturation (sm_add_sat).
 *
 * Ownership: the merge tree owns copies of every name.  SeriesMeta entries
 * added from protobuf responses borrow their strings from the response
 * (keep its arena alive while the metadata is used).
 * Locking: none; one query, one thread.
 */
#ifndef SM_MTREE_H
#define SM_MTREE_H

#include "arena.h"
#include "strtab.h"
#include "tree.h"

#include "smolder/v1/rpc.pb-c.h"

#define SM_MTREE_META_MAX 16

struct sm_mtree {
	struct sm_strtab names;
	struct sm_tree tree;
	int64_t *self;            /* per node of `tree` */
	uint32_t self_cap;
	uint64_t profiles;
	Smolder__V1__SeriesMeta meta[SM_MTREE_META_MAX];
	uint32_t nmeta;
};

int sm_mtree_init(struct sm_mtree *m);
void sm_mtree_fini(struct sm_mtree *m);

/*
 * Add a partial tree received over RPC.  Validates it (parents before
 * children, indices in range, one self per node): SM_EPROTO on violation.
 */
int sm_mtree_add_pb(struct sm_mtree *m, const Smolder__V1__MergeResponse *r,
    struct sm_err *err);

/*
 * Add a local tree: node i (1 <= i < n) has parent[i] (< i) and name
 * strs[name[i]]; self[i] its value.  Only nodes with a non-zero subtree
 * are added.  `strs` has nstrs entries.  0 or SM_ENOMEM (SM_ECORRUPT when
 * the arrays break the parent/name rules: they may come from disk).
 */
int sm_mtree_add_tree(struct sm_mtree *m, const uint32_t *parent,
    const uint32_t *name, uint32_t n, const int64_t *self,
    const struct sm_str *strs, uint32_t nstrs, struct sm_err *err);

/* Remember one series' presentation metadata (deduplicated, bounded). */
void sm_mtree_add_meta(struct sm_mtree *m, const Smolder__V1__SeriesMeta *x);

/*
 * The whole tree as a MergeResponse allocated from `a`.  Its strings and
 * its meta entries point into the merge tree, which must outlive the
 * response (or the caller copies them).
 */
int sm_mtree_to_pb(const struct sm_mtree *m, struct sm_arena *a,
    Smolder__V1__MergeResponse *out);

#endif /* SM_MTREE_H */
