/*
 * bucket_index.h -- the compactor owns the bucket
 * (docs/architecture.md §10): it is the only writer that deletes, and the
 * only writer of each tenant's bucket index.  The ingesters only add blocks (ingester/ship.h
 * owns the block layout).
 *
 * One pass, every compaction interval (and POST /compactor/run):
 *   1. LIST the bucket once (the compactor is the one reader that may
 *      list: listings can lag on Swift and Ceph, and nothing here is lost
 *      by a late one -- a block missed now is seen at the next pass).
 *   2. Per tenant: every block with a meta.json whose data ends before
 *      the tenant's retention floor (the same floors the ingesters get:
 *      -compactor.blocks-retention-period, or the tenant's
 *      compactor_blocks_retention_period) gets a deletion mark,
 *      <tenant>/blocks/<ULID>/deletion-mark.json {"version":1, "ulid",
 *      "deletion_time_ms", "reason":"retention"}.  The de-duplication
 *      (fold.h) writes marks of its own before this pass (reasons
 *      "folded", "replaced", "duplicate", "superseded"), which the
 *      steps below treat alike.
 *   3. A block whose mark is older than -compactor.deletion-delay is
 *      deleted: meta.json FIRST (so it is never a complete block again),
 *      then the block object, then the mark.  A reader that synced the
 *      index before the mark still finds every object for the whole delay,
 *      so the delay must exceed the readers' sync interval.
 *   4. A block object without meta.json (an upload that did not finish)
 *      whose ULID is older than twice the deletion delay is deleted: an
 *      ingester retries an unfinished upload at every ship pass, so one
 *      that old was given up (its data directory is gone).
 *   5. The tenant's bucket index, <tenant>/bucket-index.json, is written
 *      (a meta.json whose block object is missing is left out, logged):
 *      {"version":1, "updated_at_ms", "blocks": [the meta.json of every
 *      complete block, with "deletion_time_ms" when marked]} in ULID
 *      order.  The read path reads it instead of listing.  metas are
 *      immutable, so a pass reads only the meta.json files its previous
 *      index does not hold.
 *
 * One compactor acts on a bucket at a time: with etcd, the holder of the
 * compactor lock (compactor.h); without it, the compactor is a singleton
 * of its cluster (deploy/ starts at most one; two clusters sharing a
 * bucket use distinct -storage.prefix values).  S3-compatible stores such
 * as Swift have no conditional PUT, so a lock in the bucket could not be
 * exact; two compactors would still not lose data (marks and deletions
 * are idempotent, and both follow the same floors), only repeat work.
 *
 * Errors: a failure on one tenant is counted, logged and leaves that
 * tenant for the next pass; the others go on.  Locking: called with the
 * compactor's pass mutex held; no state of its own between passes.
 */
#ifndef CPT_BUCKET_INDEX_H
#define CPT_BUCKET_INDEX_H

#include <stdint.h>

#include "common/bucket.h"

struct cpt_bucket_stats {
	uint32_t tenants;          /* tenants with blocks in the bucket */
	uint32_t blocks;           /* complete blocks (meta.json) */
	uint32_t marked;           /* deletion marks written */
	uint32_t deleted;          /* blocks deleted after their delay */
	uint32_t partial_deleted;  /* unfinished uploads deleted */
	uint32_t failed;           /* tenants whose pass failed */
};

/*
 * One pass over `b` (above).  floor(arg, tenant) is the tenant's
 * retention floor in unix ms (0: keep everything).  0, or the listing's
 * error (nothing was done); per-tenant failures are in st->failed.
 */
int cpt_bucket_pass(struct sm_bucket *b, int64_t now_ms,
    int64_t deletion_delay_ms,
    int64_t (*floor)(void *arg, const char *tenant), void *arg,
    struct cpt_bucket_stats *st, struct sm_err *err);

/*
 * Write the deletion mark of the block whose meta.json is meta_key
 * ("<tk>/blocks/<ULID>/meta.json"), made at now_ms for `reason`
 * ("retention", or the de-duplication's: fold.h).  0, SM_EINVAL for
 * another key, or the bucket's error.
 */
int cpt_bucket_mark(struct sm_bucket *b, const char *meta_key, int64_t now_ms,
    const char *reason, struct sm_err *err);

#endif /* CPT_BUCKET_INDEX_H */
