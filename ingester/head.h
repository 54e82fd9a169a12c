/*
 * head.h -- the ingester's in-memory head (DESIGN §2), private to ingester/.
 *
 * Structure, per tenant (the tenant id is the first key of everything; no
 * call can touch two tenants):
 *
 *   ing_tenant
 *     frames   sm_strtab       frame names, interned
 *     lstr     sm_strtab       label names and values, interned
 *     tree     sm_tree         (parent, frame) call-tree nodes
 *     series[] ing_series      one per distinct sorted label set
 *       labels                 pointers into lstr
 *       buckets[]              sorted by start time t (bucket_ms wide)
 *         node[], value[]      sorted by node id, values > 0
 *         total, profiles      sum of values; uploads merged
 *
 * A write maps the request's stack tree onto the tenant tree in one pass
 * (parents before children), then adds each series' (node, value) pairs to
 * the bucket holding its timestamp with a sorted merge.  A merge query is a
 * dense-array add over node ids for every matching series and overlapping
 * bucket, followed by one pass that keeps the nodes with a non-zero
 * subtree; the result is a partial tree (MergeResponse) the querier merges
 * with other ingesters' answers.
 *
 * Time: bucket b holds [b.t, b.t + bucket_ms); a query [start, end) reads
 * the buckets that overlap it.
 *
 * Locking: the tenant table has a rwlock (read to find, write to add a
 * tenant).  Each tenant has a rwlock: writes hold it exclusively, queries
 * shared.  String pointers returned from a tenant's tables stay valid for
 * the tenant's lifetime (chunks never move), so responses can be packed
 * after the lock is released.  Tenants are never removed while the head
 * lives.
 *
 * Errors: SM_EMALFORMED for a request that breaks the RPC contract (a
 * parent after its child, a string index out of range, a value <= 0,
 * unsorted nodes), SM_EINVAL for bad selectors, SM_ENOMEM.
 */
#ifndef ING_HEAD_H
#define ING_HEAD_H

#include "common/arena.h"
#include "common/selector.h"

#include "smolder/v1/rpc.pb-c.h"

struct ing_head;

/* bucket_ms > 0.  Returns 0 or SM_ENOMEM. */
int ing_head_create(int64_t bucket_ms, struct ing_head **out);
void ing_head_destroy(struct ing_head *h);

/* Apply one write; the numbers of series and pairs written are returned. */
int ing_head_write(struct ing_head *h, const Smolder__V1__WriteRequest *req,
    uint32_t *series, uint32_t *pairs, struct sm_err *err);

/*
 * Merge every series of `sel` over its time range into `out`, allocated
 * from `a` (strings may point into the tenant's tables).  An unknown tenant
 * gives an empty result.
 */
int ing_head_merge(struct ing_head *h, const Smolder__V1__Select *sel,
    struct sm_arena *a, Smolder__V1__MergeResponse *out, struct sm_err *err);

/*
 * Per-step totals of the selected series, grouped by the `group_by` label
 * values (no grouping: one series with no labels).  Points are at
 * multiples of step_ms (unix epoch aligned), ascending, zero points
 * omitted.  At most 1,000,000 steps per query (SM_EINVAL beyond).
 */
int ing_head_series(struct ing_head *h, const Smolder__V1__SeriesRequest *req,
    struct sm_arena *a, Smolder__V1__SeriesResponse *out, struct sm_err *err);

/* Build a selector from RPC matchers.  0 or SM_EINVAL / SM_ENOMEM. */
int ing_selector_from_pb(const Smolder__V1__Select *sel,
    struct sm_selector *out, struct sm_err *err);

struct ing_head_stats {
	uint64_t tenants, series, nodes, buckets, bytes;
};

void ing_head_stats(struct ing_head *h, struct ing_head_stats *st);

#endif /* ING_HEAD_H */
