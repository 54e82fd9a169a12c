/*
 * hints.h -- hinted handoff: the writes a replica missed, delivered to it
 * once it answers again (docs/reliability.md §4.4, §4.10).
 *
 * Why.  A write is acknowledged once a quorum of its replicas took it; the
 * others miss it: an ingester that is down, restarting, replaying or too
 * slow.  The querier reads around one divergent replica (querier/plan.c
 * takes, per series and bucket, the replica that merged the most uploads),
 * but a rolling restart makes each replica miss the uploads of its own
 * down window, so no replica of a bucket has them all: reads returned
 * 69-88% of what was acknowledged (tests/cluster/README.md).  Hints make
 * the replicas whole again, so the plan has a complete one to pick.
 *
 * What is a hint.  After dist_push acknowledged an upload (never for a
 * refused one: the client retries that itself), every replica that did
 * not take it gets a hint holding the exact WriteRequest bytes it was, or
 * would have been, sent, under the upload's profile id:
 *   - a replica whose call failed or is still in flight at the verdict
 *     (an in-flight call is watched: if it ends well the hint is dropped),
 *     unless it refused the write for good: malformed, or over the
 *     tenant's active-series limit (SM_ELIMIT, push.c);
 *   - a token owner the ring skipped because it was unhealthy (its series
 *     went to the next healthy owner instead; after delivery the series
 *     has RF + 1 copies, which the plan de-duplicates like any replica).
 * The ingester applies a profile id once (ingester/ids.h), so a hint that
 * arrives after the original did after all counts once -- within the
 * ingester's -ingester.idempotency-window (1 m).  A hint whose original
 * call may have been applied (a timeout, a connection lost after
 * sending) and that is older than HINT_AMBIGUOUS_MS (45 s) is therefore
 * delivered only after the member's Profiles RPC says it does not hold
 * the upload (its individual-profile records, ingester/profiles.h, list
 * every upload of its heads and blocks); found, it counts as delivered.
 * Every hint is kept up to -distributor.hints-max-age.
 *
 * Delivery.  One thread, in arrival order per member, each call bounded by
 * -distributor.push.timeout, only to members the ring sees healthy;
 * failures back off from 200 ms, doubling to 5 s; a refusal for good
 * (malformed, or SM_ELIMIT: the member is at the tenant's active-series
 * limit) drops the hint as "rejected".  Members are named by instance id,
 * so a member that comes back at another address still gets its hints.
 *
 * Durable.  With a directory (cfg.dir: <data.dir>/hints) every hint is
 * also appended to its member's FIFO on disk (rwqueue.h, one directory
 * per member) and committed away once resolved, so hints survive a
 * distributor restart and are loaded again at start; a partition of the
 * member lasts as long as -distributor.hints-max-age allows (30 m).
 * Memory and disk are bounded by -distributor.hints-max-bytes; a hint
 * that does not fit is dropped (counted).  A hint the disk refuses is
 * kept in memory (counted: a restart would lose it).  The data is on a
 * quorum either way; a lost hint is a repair not done.
 *
 * Metrics: smolder_distributor_hints{,_bytes} (gauges),
 * smolder_distributor_hints_delivered_total,
 * smolder_distributor_hints_dropped_total{reason=expired|full|rejected|
 * shutdown}, smolder_distributor_hints_loaded_total (found at start),
 * smolder_distributor_hints_disk_failures_total.
 *
 * Locking: dist_hints_add/_pending may be called from any thread.
 */
#ifndef DIST_HINTS_H
#define DIST_HINTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/ring.h"
#include "common/rpc.h"
#include "common/sm.h"

struct dist_hints_cfg {
	const char *dir;          /* on-disk queues; NULL = memory only */
	int64_t max_bytes;        /* -distributor.hints-max-bytes, 0 = off */
	int64_t max_age_ms;       /* -distributor.hints-max-age */
	int64_t timeout_ms;       /* -distributor.push.timeout */
};

struct dist_hints;

/* Start the delivery thread (none when max_bytes is 0: *out = NULL). */
int dist_hints_create(const struct dist_hints_cfg *cfg, struct sm_ring *ring,
    struct dist_hints **out, struct sm_err *err);

/* Stop the thread and drop what is left (reason "shutdown").  NULL ok. */
void dist_hints_destroy(struct dist_hints *h);

/*
 * Queue a hint for the member with instance id `id`: the request bytes
 * (copied).  `mc`/`slot`: the call that carried it, when it may still be
 * in flight (its outcome decides; the hint takes its own reference to mc)
 * -- else NULL.  `ambiguous`: the original may have been applied.
 * No-op on a NULL h.
 */
void dist_hints_add(struct dist_hints *h, const char *id, const void *req,
    size_t len, struct sm_rpc_multi *mc, uint32_t slot, bool ambiguous);

/* Hints waiting (for tests and the gauge). */
uint64_t dist_hints_pending(struct dist_hints *h);

#endif /* DIST_HINTS_H */
