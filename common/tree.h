/*
 * tree.h -- the stack tree: call-tree nodes interned by (parent, frame).
 *
 * This is the core structure of Smolder (docs/architecture.md §2).  Node i is the pair
 * (parent[i], name[i]) where `name` is a string id from an sm_strtab owned
 * by the same user (a tenant head, a write request, a query merge).  Node 0
 * is the root; it has no frame (name 0 = "") and is its own parent.  A node
 * is only ever created after its parent, so parent[i] < i for every i > 0:
 *
 *   - a sample is (leaf node id, value);
 *   - merging many samples is a dense-array add, values[leaf] += v, over
 *     node ids, with no hashing and no allocation per sample;
 *   - subtree totals are one reverse pass: for i = n-1 .. 1,
 *     total[parent[i]] += total[i].
 *
 * Children of a node are distinct frames by construction, so a tree never
 * needs sibling merging.  The interning index is an sm_oatab (oatab.h;
 * linear probing, load <= 1/2) of node ids keyed by hash(parent, name); the
 * root is not in it.  A builder with its own proof that a node is new (the
 * pprof decoder's path table) appends it with sm_tree_append() and skips
 * the index: nodes [nidx, n) are then not indexed yet, and the next
 * sm_tree_child() or sm_tree_reserve() indexes them first, so lookups
 * never miss a node.
 *
 * Path-indexed trees (the ingester heads').  A tree made with
 * sm_tree_init_paths() keys its index by the hash of each node's frame
 * path from the root instead: sm_tree_path() folds the content hashes of
 * the frames (sm_hash of their bytes), so a caller holding a whole stack
 * tree to map in (a write) knows every node's slot before it knows a
 * single node id, and can start every probe's cache miss ahead instead of
 * waiting for the parent's probe to return (with (parent, name) keys a
 * chain of new frames probes one miss at a time).  The index costs what
 * the (parent, name) one does; a tag match is still confirmed against the
 * node's parent and name, so a collision costs a probe, never a wrong
 * node.  Such a tree is grown only by sm_tree_child_path(): the other
 * builders would put nodes under keys its lookups never probe.
 *
 * Memory: 8 bytes per node (parent, name) plus the index's 2 to 4 slots of
 * 8 bytes (id and hash tag, so a probe rarely reads parent[] and name[]).
 * Ownership: the tree owns its arrays.  Locking: none; the owner serialises
 * writers against readers.
 */
#ifndef SM_TREE_H
#define SM_TREE_H

#include <stdbool.h>

#include "hash.h"
#include "oatab.h"
#include "sm.h"

struct sm_tree {
	uint32_t *parent;
	uint32_t *name;
	uint32_t n, cap;
	uint32_t nidx;       /* nodes [1, nidx) are in tab; [nidx, n) not yet */
	struct sm_oatab tab; /* node ids 1.. by hash(parent, name), or by
			      * path hash when by_path */
	bool by_path;        /* sm_tree_init_paths() */
};

/* The index's hash of (parent, name). */
static inline uint64_t
sm_tree_hash(uint32_t parent, uint32_t name)
{
	return (sm_hash_u64(((uint64_t)parent << 32) | name));
}

/* Initialise with the root node 0.  Returns 0 or SM_ENOMEM. */
int sm_tree_init(struct sm_tree *t);

/* The same, indexed by frame path (above).  0 or SM_ENOMEM. */
int sm_tree_init_paths(struct sm_tree *t);

/*
 * The root's path hash: random, once per process.  Frame names are the
 * senders' bytes and sm_hash is not keyed, so with a fixed root a sender
 * could make names whose paths share one stretch of the index and turn
 * every probe into a scan; keyed by a secret root, they cannot aim.
 * Nothing stores a path hash, so it need not outlive the process.
 */
uint64_t sm_tree_path_root(void);

/* The path hash of the child of a node whose path hashes to `parent`,
 * for a frame whose bytes sm_hash() to `frame`. */
static inline uint64_t
sm_tree_path(uint64_t parent, uint64_t frame)
{
	return (sm_hash_u64(parent * 0xc2b2ae3d27d4eb4fULL ^ frame));
}

/*
 * In a path-indexed tree: find or create the child of `parent` whose frame
 * is `name`, where `path` is sm_tree_path(parent's path, the frame's
 * sm_hash).  As sm_tree_child otherwise.
 */
int sm_tree_child_path(struct sm_tree *t, uint32_t parent, uint32_t name,
    uint64_t path, uint32_t *out);

/* A hint, as sm_tree_prefetch: start loading the slot of `path`. */
static inline void
sm_tree_prefetch_path(const struct sm_tree *t, uint64_t path)
{
	if (t->tab.slots != NULL)
		__builtin_prefetch(&t->tab.slots[(uint32_t)path &
		    t->tab.mask]);
}
void sm_tree_fini(struct sm_tree *t);

/*
 * Find or create the child of `parent` whose frame is `name`; its id is
 * stored in *out.  `parent` must be an existing node.  Fails only with
 * SM_ENOMEM, or SM_ETOOBIG past 2^31 nodes.
 */
int sm_tree_child(struct sm_tree *t, uint32_t parent, uint32_t name,
    uint32_t *out);

/*
 * Append the child of `parent` whose frame is `name`, which the caller
 * knows the tree does not hold (a duplicate would break the uniqueness
 * every reader relies on), without probing or filling the index; its id
 * is stored in *out.  SM_ENOMEM or SM_ETOOBIG as sm_tree_child.
 */
int sm_tree_append(struct sm_tree *t, uint32_t parent, uint32_t name,
    uint32_t *out);

/*
 * Room for `n` nodes in all in the node arrays only: for a builder that
 * appends (sm_tree_append), whose nodes are indexed only if a lookup ever
 * follows.  0 or SM_ENOMEM; SM_ETOOBIG past 2^31.
 */
int sm_tree_reserve_nodes(struct sm_tree *t, uint32_t n);

/*
 * Make room for `n` nodes in all (the root included), so that creating
 * up to n - sm_tree_size(t) more cannot fail or move anything: a user
 * that knows about how many nodes it will create (the pprof decoder: its
 * profile's location count) saves the doublings and rehashes of growing
 * from 64.  0 or SM_ENOMEM (the tree is unchanged but may have grown
 * capacity); SM_ETOOBIG past 2^31.
 */
int sm_tree_reserve(struct sm_tree *t, uint32_t n);

/*
 * A hint: start loading the index slot where (parent, name) is or would
 * go.  A caller that knows its next lookups a few steps ahead (the head
 * mapping a write's nodes, whose parents come first) overlaps their cache
 * misses instead of taking them one at a time.  No effect on contents.
 */
static inline void
sm_tree_prefetch(const struct sm_tree *t, uint32_t parent, uint32_t name)
{
	if (t->tab.slots != NULL)
		__builtin_prefetch(&t->tab.slots[(uint32_t)sm_tree_hash(parent,
		    name) & t->tab.mask]);
}

/* Find without creating: 0 and *out, or SM_ENOTFOUND. */
int sm_tree_find(const struct sm_tree *t, uint32_t parent, uint32_t name,
    uint32_t *out);

/* Number of nodes including the root. */
static inline uint32_t sm_tree_size(const struct sm_tree *t)
{
	return (t->n);
}

/* Depth of node `id` (root = 0). */
uint32_t sm_tree_depth(const struct sm_tree *t, uint32_t id);

/*
 * Subtree totals from self values: total[i] = self[i] + sum of the totals
 * of i's children, for all n nodes.  `total` may alias nothing else.
 */
void sm_tree_totals(const struct sm_tree *t, const int64_t *self,
    int64_t *total);

/* Heap bytes held (memory accounting). */
size_t sm_tree_mem(const struct sm_tree *t);

#endif /* SM_TREE_H */
