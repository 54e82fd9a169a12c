/*
 * compactor.h -- the compactor component (docs/architecture.md §1): the policy over time.
 *
 * The work runs where the data is, inside each ingester on its own
 * RocksDB; the compactor plans and schedules it over the ring and exposes
 * it.  Retention: every -compactor.compaction-interval (the first pass
 * one interval after the start) it sends every healthy ingester a
 * smolder.v1.RetentionRequest with before = now - retention period (the
 * flag; <= 0 on the wire when it is 0) and, for every tenant the runtime
 * config lists with compactor_blocks_retention_period (common/overrides.h),
 * that tenant's own before = now - its period (0 = keep: sent as 0).  A
 * pass runs retention when the flag or any tenant's override is set; the
 * overrides are read afresh each pass, so a reload takes effect at the
 * next one.  The ingester raises its retention floors (persisted), after
 * which no query of a tenant returns data before its floor, and deletes
 * the blocks that end before it (ingester/db.h, ing_db_retention).
 * Floors are monotonic, so passes are idempotent: a pass cut short by a
 * crash or an unhealthy ingester is simply completed by the next one; and
 * lengthening a tenant's retention keeps only what is still there.
 *
 * The bucket (with -storage.backend): after retention and downsampling,
 * with store-gateways (-store-gateway.sharding-ring.*) a pass folds the
 * replicas' blocks of each tenant-hour into one (compactor/fold.h), then it marks,
 * deletes and indexes the bucket's blocks by the same floors
 * (compactor/bucket_index.h): the compactor is the only process that
 * deletes from the bucket.
 *
 * HTTP: POST /compactor/run runs a pass now and answers what it did as
 * JSON ({"before_ms":...,"tenant_overrides":n,"ingesters":n,"failed":n,
 * "blocks_retired":n,..., "bucket":{...}, "fold":{"hours", "folded",
 * "unresolved", "failed", "marked", "bytes_read", "bytes_written"}}).
 * GET /compactor shows the downsampling tiers and each ingester's
 * progress through them (planned, built, failed, pending, bytes, what
 * runs now, the last error) as JSON.
 * Metrics: smolder_compactor_runs_total{status}, ..._blocks_retired_total,
 * ..._last_success_timestamp_seconds, ..._fold_hours_total{status},
 * ..._fold_bytes_read_total, ..._fold_bytes_written_total.
 *
 * One compactor at a time: with -ring.etcd.endpoints, a pass runs only
 * while this compactor holds the lock <prefix>compactor/lock in etcd
 * (common/etcd.h, sm_etcd_lock_*: a lease of 15 s kept alive every 5 s);
 * another compactor's passes are skipped, and its POST /compactor/run
 * answers 503 naming the holder (smolder_compactor_lock_held).  Without
 * etcd the compactor is a singleton by deployment (bucket_index.h).
 *
 * Ownership: borrows the HTTP server, the ring and the overrides.  Locking: one pass at a
 * time (a mutex); the scheduler thread and /compactor/run share it.
 */
#ifndef CPT_COMPACTOR_H
#define CPT_COMPACTOR_H

#include "common/bucket.h"
#include "common/etcd.h"
#include "common/flags.h"
#include "common/http.h"
#include "common/overrides.h"
#include "common/ring.h"
#include "common/tiers.h"

struct cpt_config {
	int64_t retention_ms;     /* -compactor.blocks-retention-period, 0 = keep */
	int64_t interval_ms;      /* -compactor.compaction-interval */
	int64_t timeout_ms;       /* -compactor.rpc-timeout */
	int64_t concurrency;      /* -compactor.concurrency: ingesters at once */
	int64_t retries;          /* -compactor.job-retries */
	struct sm_tiers tiers;    /* -compactor.downsample-tiers (main) */
	struct sm_overrides *overrides; /* borrowed (main); NULL = none */
	int64_t deletion_delay_ms; /* -compactor.deletion-delay */
	struct sm_bucket *bucket;  /* borrowed (main); NULL = none */
	int64_t fold_delay_ms;     /* -compactor.fold-delay */
	bool gateways;             /* store-gateways are configured: the
				      bucket has a read path, so its
				      replicas are folded (fold.h) */
	const char *data_dir;      /* -data.dir: the fold's scratch store */
	struct sm_etcd_lock *lock; /* borrowed (main); NULL = no etcd */
};

int cpt_flags_add(struct sm_flags *fs, struct cpt_config *cfg,
    struct sm_err *err);

struct compactor;

int cpt_create(const struct cpt_config *cfg, struct sm_http *http,
    struct sm_ring *ring, struct compactor **out, struct sm_err *err);
/* Set (or clear, NULL) the etcd lock passes need; between passes. */
void cpt_set_lock(struct compactor *c, struct sm_etcd_lock *lock);
int cpt_start(struct compactor *c, struct sm_err *err);
void cpt_stop(struct compactor *c);
void cpt_destroy(struct compactor *c);

#endif /* CPT_COMPACTOR_H */
