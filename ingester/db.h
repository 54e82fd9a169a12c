/*
 * db.h -- the ingester's database: every tenant's head, the heads being
 * cut, and the blocks, over the durable store (docs/architecture.md §2, §3).
 *
 *   ing_db
 *     tenants[]  (sorted by id; the tenant is the first key of everything)
 *       head       the current ing_head, taking writes
 *       cutting[]  heads being turned into blocks (still queried)
 *       blocks[]   metas of committed blocks, sorted by id: raw blocks cut
 *                  from heads and tier blocks (tier_ms > 0, below)
 *
 * Write path (acknowledged only when durable):
 *   1. validate the request (nothing malformed reaches the log);
 *   2. under the tenant mutex: a profile id already written makes the
 *      write a no-op (idempotency, ids.h); else mark it pending, take the
 *      current head h, count the write in h->writers and note h->gen;
 *   3. append the request to the head log under (tenant, h->gen, seq) --
 *      outside any lock, so RocksDB groups concurrent commits;
 *   4. apply it to h (h's write lock), drop h->writers;
 *   5. return: the distributor acknowledges the client.
 * If step 4 fails (out of memory) nothing of the write is in the head (it
 * is all or nothing: head.h), the log record is deleted again and the
 * write fails, so a client retry is not counted twice.  Should that
 * delete fail too, the record is replayed whole at the next open (write.c,
 * ing_db_write).
 *
 * Cut (a block): under the tenant mutex the current head moves to
 * `cutting` and a fresh head with a new generation takes its place; the
 * cutter waits until the old head's writers reach 0, so every write logged
 * with the old generation is in the old head; it encodes the head and
 * commits the block and the deletion of the log range [.., gen] in one
 * synced batch; then the block replaces the head in queries.  A head is cut
 * when its first write is -ingester.block-duration old, when all heads
 * together exceed -ingester.head-max-bytes, or on ing_db_flush().
 *
 * Spill (head.h, "Spilled buckets"): every -ingester.head-spill-interval,
 * and at once for every head when the heads together pass half of
 * -ingester.head-max-bytes, the tick writes each head's sealed buckets to
 * the store and keeps only their summaries in memory.
 *
 * Replay (startup, before serving): every log record is applied, in key
 * order, to one head per tenant; the heads then get generations above every
 * generation seen, so their next cut deletes all replayed records.
 *
 * Queries take references to the sources under the tenant mutex, release
 * it, and read each source: heads under their read lock, blocks through
 * the store's cache.  A damaged block part fails the query with
 * SM_ECORRUPT naming the block; queries that do not touch it are unaffected.
 *
 * Besides the bucketed pairs, a head keeps span samples (spans.h: the
 * values of samples that carried a span_id, per span, for
 * ing_db_span_merge) and one individual-profile record per upload and
 * series (profiles.h: id, time, total, for ing_db_profiles); both are
 * applied by ing_head_write (so replay rebuilds them), counted in the
 * head's bytes, and cut into the block as its 'P' and 'X' parts.
 *
 * Active-series limit (Pyroscope's max_global_series_per_tenant).  A
 * tenant's active series on this ingester are the series of its current
 * head: a series becomes active when a write creates it in the head and
 * stops being active when the head is cut into a block (the block still
 * serves it; a later write to it makes it active again in the new head).
 * Every WriteRequest carries the limit this ingester enforces for the
 * tenant (max_series, 0 = none).  The ingester has no ring view and, in a
 * cluster, not the distributor's flags or runtime config, so the
 * distributor converts the tenant's global limit into this local one from
 * its ring snapshot (global / healthy ingesters * RF, distributor/push.c)
 * and sends it; the ingester only counts and compares.  A write is
 * all-or-nothing: if its new series (distinct, not yet in the head) would
 * take the head past the limit, the whole write is refused with
 * SM_ELIMIT -- the distributor answers 429 resource_exhausted with
 * Pyroscope's message -- and nothing of it is applied, even its series
 * that exist (a partial apply would make a retry double count them).
 * Writes that only touch existing series always pass.  The check runs
 * before the write is logged (no log I/O for a refused write) and again
 * under the head's write lock before anything is applied (concurrent
 * writes may have added series in between; a refusal there deletes the
 * log record, as for SM_ENOMEM).  Replay applies every logged record
 * without a limit: what was acknowledged is kept.  A refused series
 * allocates nothing that lasts, so the head stays bounded by the limit.
 * Metrics: smolder_ingester_active_series{tenant} (gauge, 0 after a cut)
 * and smolder_ingester_series_limit_refusals_total{tenant}.
 *
 * Downsampling tiers (compact.c, block.h "Tier blocks").  Raw
 * blocks stay until retention (like Thanos); tier blocks are ADDITIONAL
 * blocks, one per (tier width, window): the window is a day (86400000 ms)
 * aligned to multiples of it since the epoch, widths a list (default 1h
 * and 1d; 1m allowed), each a multiple of bucket_ms and a divisor of the
 * window.  A tier block holds exactly the buckets in its window of every
 * raw block of its tenant with gen <= its cover_gen, floored to its width.
 * cover_gen is taken when the job runs: (the smallest gen among the
 * tenant's current head and heads being cut) - 1.  Every raw block at or
 * below it exists already (raw blocks come only from heads, and are
 * deleted only by retention), and every later raw block gets a larger gen;
 * data arriving late for a window lands in a head, then in a raw block
 * above cover_gen, which the query side reads raw and the planner later
 * folds into a rebuilt tier block (the old one is then retired).  So no
 * list of inputs is ever stored.  Merged raw blocks (block.h) count as
 * their newest input there (ing_block_cov_gen).  Queries (tiers.h) read,
 * per window and asked resolution r, one tier block (the coarsest whose
 * tier_ms divides r, ties: largest cover_gen) and the raw blocks with
 * coverage gen > its cover_gen; without a resolution, raw blocks only.
 * Retention retires tier blocks like raw ones, by max_t.
 *
 * Memory-only mode (store == NULL, used by unit tests): writes are not
 * logged and heads are never cut.
 *
 * Where it lives: db_int.h (private) lists the rooms -- db.c (open, close,
 * tenants, sources), write.c (writes and cuts), replay.c, retention.c,
 * compact.c (tiers) and query.c (every query, on one series visitor) -- and states ownership,
 * lock order and the lock assertions.
 */
#ifndef ING_DB_H
#define ING_DB_H

#include <stdbool.h>

#include "common/arena.h"
#include "common/selector.h"

#include "head.h"
#include "store.h"

struct ing_db_cfg {
	int64_t bucket_ms;
	int64_t block_ms;             /* cut heads whose first write is older */
	uint64_t head_max_bytes;      /* the memory bound (ing_db_tick) */
	int zstd_level;
	int64_t idempotency_window_ms;   /* 0 = 1 minute (ids.h) */
	uint32_t idempotency_max;        /* ids per tenant generation, 0 = 1M */
	uint64_t merge_max_bytes;     /* merge raw blocks stored below this
					 (compact.c); 0 = no merging */
	int64_t spill_ms;             /* spill each head's sealed buckets
					 this often (head.h); 0 = never */
	/* The process's resident bytes, measured (the ingester passes
	 * sm_mem_stats' rss; tests a fake); NULL = not measured. */
	uint64_t (*rss)(void *arg);
	void *rss_arg;
};

struct ing_db;

/* Open over `store` (may be NULL): scans blocks and replays the log. */
int ing_db_open(const struct ing_db_cfg *cfg, struct ing_store *store,
    struct ing_db **out, struct sm_err *err);
void ing_db_close(struct ing_db *db);

struct ing_write_result {
	uint32_t series, pairs;       /* written */
	bool duplicate;               /* profile id already written: no-op */
	int64_t listed_ns;            /* sm_mono_ns() when the tenant joined
					 the tenant table (ing_db_tenants) */
};

/*
 * Apply one write durably.  `raw` is the packed smolder.v1.Request that
 * carried `req` (logged as is).  A write whose 16-byte profile_id this
 * tenant already wrote (within the idempotency window, ids.h) is not
 * applied again and succeeds with res->duplicate; a concurrent duplicate
 * waits for the first one's outcome.  Returns 0, SM_EMALFORMED (bad
 * request, nothing logged), SM_ELIMIT (over req->max_series, the
 * active-series limit above: nothing applied, nothing kept in the log),
 * SM_EIO / SM_EUNAVAIL (storage, or over the memory bound: ing_db_tick),
 * SM_ENOMEM.
 */
int ing_db_write(struct ing_db *db, const uint8_t *raw, size_t rawlen,
    const Smolder__V1__WriteRequest *req, struct ing_write_result *res,
    struct sm_err *err);

/*
 * Cut what is due (called by the cutter thread every second), and hold
 * the memory bound.  rss is the process's resident memory as measured
 * (cfg.rss; without it the heads' own estimate, ing_head_bytes, stands
 * in and writes are never refused for memory).  With max = cfg.head_max_bytes (0 = no
 * bound) and mem = the larger of rss and the heads' estimate:
 *   - mem > max / 2: spill every head's sealed buckets (head.h);
 *   - mem + ING_MEM_CUT_COST x heads > ING_MEM_CUT_PCT of max: cut
 *     every head into blocks.  A cut needs memory of its own, about
 *     five times the heads' estimate at its peak (measured: a
 *     5,000-series head of 19 MB peaked 94 MB over the RSS before its
 *     cut: spilled buckets and records read back, the encoded block, its
 *     batches and RocksDB's memtables), so it starts early enough for
 *     that to fit.  Only when the heads hold at least max /
 *     ING_MEM_CUT_SHARE, so memory that is not the heads' (caches,
 *     memtables, a query) never turns every tick into a cut of one second
 *     of data;
 *   - rss > ING_MEM_REFUSE_PCT of max, measured again after the cut,
 *     a flush of RocksDB's memtables and a malloc_trim: writes are
 *     refused with SM_EUNAVAIL (503, retryable: Pyroscope's agents
 *     retry) before anything is logged, until rss is back under
 *     ING_MEM_RESUME_PCT.  The process degrades by cutting and refusing,
 *     never by growing past the bound.
 * Every tick then gives free heap pages back once (sm_mem_tidy,
 * common/sm.h), with or without a bound: what spills and cuts freed and
 * what request buffers left in the heaps.
 * Decision: the bound is the whole process's RSS, not the heads': what
 * an operator sizes a container by.  Block caches and RocksDB's memtables
 * count toward it, so -ingester.head-max-bytes must leave them room
 * (the ingester warns at start when caches alone take half of it).
 */
#define ING_MEM_CUT_PCT 80
#define ING_MEM_CUT_COST 5
#define ING_MEM_CUT_SHARE 16
#define ING_MEM_REFUSE_PCT 95
#define ING_MEM_RESUME_PCT 85
void ing_db_tick(struct ing_db *db, int64_t now_ms);

/* True while writes are refused for memory (ing_db_tick). */
bool ing_db_mem_refusing(struct ing_db *db);

/* Cut every non-empty head now (POST /ingester/flush). */
int ing_db_flush(struct ing_db *db, struct sm_err *err);

/* Spill every head's sealed buckets now (head.h, "Spilled buckets"; the
 * tick does it every cfg.spill_ms).  0 or the first head's error. */
int ing_db_spill(struct ing_db *db, struct sm_err *err);

/* --- queries -------------------------------------------------------------- */

/*
 * A query's input: the storage API's own, not the RPC message.
 * The RPC server (ingester.c, query_from_rpc) converts smolder.v1's
 * requests field for field; tests and in-process callers build it
 * directly.  The query borrows every pointer for the call only.
 *
 * A pick (replica de-duplication, querier/plan.c) names a series the
 * select takes and, when nt or nneg > 0, the bucket starts it takes
 * (t: added) and those it subtracts (neg: values and profile counts
 * negated, so the querier's sum of replicas A + B - C is exact where no
 * replica holds a bucket whole); both sorted, unique, disjoint.  count
 * and neg_count, when set (as long as t and neg), are the uploads the
 * querier's plan saw in each bucket, 0 for one not checked: a read whose
 * checked bucket holds another number fails with SM_EAGAIN
 * (ing_db_picks_check).  A resolution (tiers.h) reads [start_ms, end_ms)
 * at width_ms.
 */
struct ing_pick {
	uint64_t fp;
	const int64_t *t;
	size_t nt;
	const int64_t *neg;
	size_t nneg;
	const uint32_t *count;          /* NULL or nt of them */
	const uint32_t *neg_count;      /* NULL or nneg of them */
};

struct ing_resolution {
	int64_t start_ms, end_ms, width_ms;
};

struct ing_matcher {
	enum sm_match_type type;
	const char *name, *value;
};

/* Series by matchers over [start_ms, end_ms); when picked, only the
 * series (and buckets) of picks[] (sorted by fp, unique); resolutions
 * sorted, disjoint, inside the range (merges, series, stats and analyze
 * honour them; the rest read raw data). */
struct ing_select {
	const char *tenant;
	const struct ing_matcher *matchers;
	size_t nmatchers;
	int64_t start_ms, end_ms;
	bool picked;
	const struct ing_pick *picks;
	size_t npicks;
	const struct ing_resolution *res;
	size_t nres;
};

enum ing_labels_kind {
	ING_LABEL_NAMES = 0,       /* distinct label names */
	ING_LABEL_VALUES = 1,      /* distinct values of `name` */
	ING_SERIES_LABELS = 2,     /* distinct label sets (label_names) */
};

/* The select plus what each kind of query adds; each ing_db_* below reads
 * only its own fields (the rest stay zero). */
struct ing_query {
	struct ing_select sel;
	int64_t step_ms;                   /* series */
	const char *const *group_by;       /* series, profiles */
	size_t ngroup_by;
	const char *const *call_site;      /* series: root-first frames a
					    * stack must start with; 0 = any */
	size_t ncall_site;
	const char *function;              /* series: or a function anywhere
					    * in the stack (NULL/"" = none) */
	bool function_self;                /* ... its self values only */
	enum ing_labels_kind kind;         /* labels */
	const char *name;                  /* labels: ING_LABEL_VALUES */
	const char *const *label_names;    /* labels: ING_SERIES_LABELS */
	size_t nlabel_names;
	bool all_time;                     /* labels, analyze */
	const uint64_t *detail;            /* stats: sorted, unique */
	size_t ndetail;
	bool ids;                          /* stats: the detail's upload ids */
	const uint64_t *span_ids;          /* span merge: sorted, unique */
	size_t nspan_ids;
	uint32_t max;                      /* profiles: 0 = 1,000,000 */
};

int ing_db_merge(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__MergeResponse *out, struct sm_err *err);

/*
 * The merge of the span samples (spans.h) of q->span_ids (sorted,
 * unique) in the selected series and buckets (picks as for merges), from
 * heads and blocks.  out->profiles is the number of span records merged.
 * 0, SM_EMALFORMED (unsorted ids), SM_ECORRUPT, SM_ENOMEM.
 */
int ing_db_span_merge(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__MergeResponse *out, struct sm_err *err);

/*
 * The individual-profile records (profiles.h) of the selected series with
 * a time in [start_ms, end_ms), from heads and blocks, sorted by (fp, t,
 * id), and the group_by labels of every selected series.  Picks are
 * ignored.  More than q->max (0 = 1,000,000) records is SM_ELIMIT.
 * 0, SM_EMALFORMED, SM_ELIMIT, SM_ECORRUPT, SM_ENOMEM.
 */
int ing_db_profiles(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__ProfilesResponse *out,
    struct sm_err *err);

int ing_db_series(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__SeriesResponse *out, struct sm_err *err);

/*
 * Per-series profile counts of a selection (smolder.v1.StatsRequest): for
 * every selected series its profiles in range and a digest linear in the
 * per-bucket counts; per-bucket counts for the series in q->detail.
 * Reads heads and block indexes only.
 */
int ing_db_series_stats(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__StatsResponse *out, struct sm_err *err);

/*
 * After a read of q: whether every bucket its picks check (count,
 * neg_count non-zero) still holds the number of uploads the plan saw.
 * Buckets only gain uploads (a write, a hint) or are dropped whole
 * (retention), so the same number after the read means the read saw what
 * the plan saw.  0 when they all do (or none is checked); SM_EAGAIN
 * naming the first that does not; SM_ENOMEM.  Reads heads and block
 * indexes of the checked series only.
 */
int ing_db_picks_check(struct ing_db *db, const struct ing_query *q,
    struct sm_err *err);

/*
 * Index statistics of a selection (smolder.v1.AnalyzeRequest): per matched
 * series its profiles and pairs in range, separately for heads and blocks;
 * the heads and blocks holding a matched series, the pair bytes of the
 * matched head buckets, the stored bytes of those blocks, and the first
 * and last matched bucket start.  Reads heads and block indexes only.
 * all_time: everything above the tenant's retention floor.
 */
int ing_db_analyze(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__AnalyzeResponse *out, struct sm_err *err);

/* Label names, values or series of a selection; all_time: everything
 * above the tenant's retention floor. */
int ing_db_labels(struct ing_db *db, const struct ing_query *q,
    struct sm_arena *a, Smolder__V1__LabelsResponse *out, struct sm_err *err);

/*
 * Retention (smolder.v1.RetentionRequest, from the compactor): floors
 * before which no query returns data (every query of a tenant, all_time
 * ones included, starts at the tenant's effective floor).  Each tenant
 * named in tf[0..ntf) gets a floor of its own, raised to its before_ms;
 * every tenant with a floor of its own that is not named is raised to
 * before_ms (so a tenant whose override is removed follows the default
 * again); the default floor -- of every tenant without a floor of its
 * own, including tenants created later -- is raised to before_ms.
 * INT64_MIN means "keep": that floor is not raised (a named tenant still
 * gets a floor of its own, at its current effective one).  Floors only
 * rise: data once hidden or deleted never comes back, so an override
 * lengthening a tenant's retention keeps only what is still there.  All
 * floors raised are persisted in one synced batch before anything acts
 * on them, so after a crash they still hide the data.  Then every block
 * of a tenant with max_t <= its effective floor (raw and tier blocks
 * alike) leaves the query path at once and is deleted from disk after a
 * grace period (the cutter thread), or at the next open; this runs on
 * every call, so blocks cut from hidden head data go on the next pass.
 * Head data before the floor is hidden and goes when its head is cut.
 * *nblocks gets the blocks retired.  0, SM_EIO, SM_ENOMEM.
 */
struct ing_tenant_floor {
	const char *tenant;
	int64_t before_ms;                /* INT64_MIN: keep */
};

int ing_db_retention(struct ing_db *db, int64_t before_ms,
    const struct ing_tenant_floor *tf, uint32_t ntf, uint32_t *nblocks,
    struct sm_err *err);

/* The retention floor of `tenant`: its own, else the default (INT64_MIN
 * when none).  Takes a leaf mutex. */
int64_t ing_db_floor(struct ing_db *db, const char *tenant);

/* --- downsampling tiers (compact.c) ------------------------------------- */

#define ING_TIER_WINDOW_MS 86400000LL  /* one day: the window of a tier */
#define ING_MERGE_SPAN_MS 3600000LL    /* a merged raw block: one clock hour */

/*
 * One unit of tier work: the tier block of width tier_ms over the window
 * [window_start, window_start + window_ms) of `tenant`.  due: it is to be
 * built (none exists, or the newest one's cover_gen is below the gen of a
 * raw block overlapping the window); superseded: older tier blocks of the
 * same width and window to delete.  nblocks / bytes: the raw blocks
 * overlapping the window and their stored bytes (progress reporting).
 */
/*
 * tier_ms 0: a MERGE job -- merge the tenant's small raw blocks lying in
 * the window into one raw block (compact.c, "Merges"; db cfg
 * merge_max_bytes); planned before the window's tier jobs, due always,
 * nblocks / bytes its inputs.
 */
struct ing_compact_job {
	char *tenant;
	int64_t tier_ms, window_start, window_ms;
	bool due;
	uint32_t superseded;
	uint32_t nblocks;
	uint64_t bytes;
};

/*
 * Plan the tier work of every tenant: for each window fully in the past
 * (its end <= now_ms) and above its tenant's retention floor that a raw
 * block overlaps (or a tier block names), and each width in
 * widths[0..nwidths),
 * a job when it is due or has superseded blocks.  A window is not due
 * while a head of its tenant (current or being cut) has a bucket in it:
 * its data is not in blocks yet, a later pass does it.  Widths must be
 * > 0, multiples of the db's bucket_ms and divisors of window_ms (> 0),
 * else SM_EINVAL.  *jobs (free with ing_compact_jobs_free; NULL when *n is
 * 0) in (tenant, window, width) order.  Memory-only dbs have none.
 * Takes db->lock, each t->mu and each head's read lock, one at a time.
 * 0, SM_EINVAL, SM_ENOMEM.
 */
int ing_db_compact_plan(struct ing_db *db, const int64_t *widths,
    uint32_t nwidths, int64_t window_ms, int64_t now_ms,
    struct ing_compact_job **jobs, uint32_t *n, struct sm_err *err);
void ing_compact_jobs_free(struct ing_compact_job *jobs, uint32_t n);

struct ing_compact_stats {
	bool built;                /* a tier block was committed */
	bool head_overlap;         /* not built: a head holds window data */
	bool empty;                /* not built: no bucket in the window */
	uint64_t gen, cover_gen;   /* of the block built */
	uint32_t inputs;           /* raw blocks read */
	uint32_t series, nnodes;   /* of the block built */
	uint32_t superseded;       /* tier blocks retired */
	uint64_t bytes_read, bytes_written;
};

/*
 * Run one job (see ing_db_compact_plan; tier_ms 0: a merge, whose
 * stats say the merged block's gen, its cover_gen and inputs, and whose
 * inputs are retired rather than superseded tier blocks): re-plan it
 * under the locks -- a
 * job that is no longer due is a no-op returning 0 (st->built false) --
 * build the tier block from the raw blocks with gen <= cover_gen, commit
 * it (one synced batch, ing_store_block_put), publish it, and retire the
 * tier blocks of the same width and window it supersedes (deleted from
 * disk after the grace period, retention.c).  Superseded blocks are
 * retired even when nothing is built.  One job runs per db at a time
 * (db->compact_mu; a second caller waits); no tenant or cut lock is held
 * while reading, merging or encoding.  A failure leaves no new block and
 * nothing changed (a rerun redoes the job).  A raw block whose meta and
 * index are both damaged makes every job of its tenant fail (SM_ECORRUPT:
 * its range is unknown, so no tier block could be exact).
 * 0, SM_EINVAL (bad width or window), SM_ECORRUPT, SM_EIO, SM_ENOMEM.
 */
int ing_db_compact_run(struct ing_db *db, const char *tenant, int64_t tier_ms,
    int64_t window_start, int64_t window_ms, int64_t now_ms,
    struct ing_compact_stats *st, struct sm_err *err);

struct ing_db_stats {
	uint64_t tenants, series, head_bytes, blocks, block_bytes, cutting;
	int64_t data_min;      /* the oldest bucket start held in a head or
				  listed block, every tenant (INT64_MAX:
				  none): a querier skips this ingester for
				  older ranges (HealthResponse.data_min_ms) */
};

void ing_db_stats(struct ing_db *db, struct ing_db_stats *st);

/*
 * The tenant table's version: it changes whenever a tenant is added and
 * starts at a random non-zero value in each process, so a prober that
 * holds the list of an earlier process never mistakes it for this one's
 * (HealthResponse.tenants_version).  Lock-free.
 */
uint64_t ing_db_tenants_version(struct ing_db *db);

/*
 * Every tenant in the table (a tenant stays for the life of the process,
 * so this is a superset of those holding data) as sm_ring_tenant_hash
 * values, sorted ascending, in *out (arena a; *n entries), and the
 * version they belong to.  SM_ENOMEM.
 */
int ing_db_tenants(struct ing_db *db, struct sm_arena *a, uint64_t **out,
    uint32_t *n, uint64_t *version);

/*
 * A copy of the meta of every listed block not known to be in the bucket
 * (meta.shipped false; with `all`, every listed block), every tenant, in (tenant, gen) order: the
 * shipper's worklist (ship.h).  The copy is the caller's
 * (ing_db_blocks_free); a block may be retired or merged away after it
 * was taken, which its reader finds out from the store.  0 or SM_ENOMEM.
 * ing_db_block_shipped sets the in-memory shipped bit of one block (a
 * no-op when it is no longer listed), so later passes skip it without a
 * look at the store.
 */
struct ing_db_block {
	char *tenant;
	struct ing_block_meta meta;
};

int ing_db_blocks(struct ing_db *db, bool all, struct ing_db_block **out,
    uint32_t *n);
void ing_db_blocks_free(struct ing_db_block *v, uint32_t n);
void ing_db_block_shipped(struct ing_db *db, const char *tenant,
    uint64_t gen);

/*
 * A store-gateway's blocks (gateway.h), imported into the store by the
 * caller (ing_store_block_import) and then served from here:
 *
 * ing_db_block_adopt  lists block `gen` of `tenant` (its meta decoded
 *                     from its stored 'M' value mv/mn), marked shipped,
 *                     and takes the blocks whose gens are in drop[] out
 *                     of the list IN THE SAME critical section, so a
 *                     query sees a merged block or its inputs, never
 *                     both.  Taken blocks are deleted from disk after the
 *                     retirement grace (queries that copied their metas
 *                     may still read them).  Adopting a listed gen again
 *                     only applies drop[].  0, SM_ECORRUPT, SM_ENOMEM.
 * ing_db_block_drop   takes one block out the same way; false when it
 *                     was not listed.
 *
 * Only for a database that takes no writes: its own cuts would draw
 * gens from the same space.
 */
int ing_db_block_adopt(struct ing_db *db, const char *tenant, uint64_t gen,
    const uint8_t *mv, size_t mn, const uint64_t *drop, uint32_t ndrop,
    struct sm_err *err);
bool ing_db_block_drop(struct ing_db *db, const char *tenant, uint64_t gen);

/*
 * Local retention (ingester.h): blocks this ingester shipped and the
 * store-gateways serve are dropped from its disk once older than
 * -ingester.local-retention.  ing_db_local_drop first raises and
 * persists the tenant's local floor to floor_ms (the newest max_t of the
 * blocks dropped; store.h 'G'), then takes gens[] out of service as
 * ing_db_block_drop does.  Below the local floor this database's copy is
 * no longer whole, so no tier block is planned or built for a window
 * starting there (compact.c): it would be short.  Queries need nothing
 * more: the querier counts each (series, bucket) from the most complete
 * of the ingesters and the gateways' sources.  ing_db_local_floor:
 * INT64_MIN when the tenant dropped nothing.  0, SM_EIO, SM_ENOMEM.
 */
int ing_db_local_drop(struct ing_db *db, const char *tenant,
    const uint64_t *gens, uint32_t n, int64_t floor_ms, struct sm_err *err);
int64_t ing_db_local_floor(struct ing_db *db, const char *tenant);

/*
 * The tenant's drop epoch: how many times its blocks left service with
 * no replacement here -- ing_db_local_drop (local retention) and
 * ing_db_block_drop (a store-gateway's blocks no longer wanted: marked,
 * folded into another source, not owned) -- as opposed to a merge or an
 * adoption, whose block stands for the ones it takes.  It starts at a
 * random value per process (a restart between a plan and its read
 * shows as a move); 0 for a tenant not held.  The querier's plan
 * (querier/plan.c) reads it with its stats, before the series, and
 * hands it back with the read; ing_db_drop_check after the read: 0 when
 * it has not moved, else SM_EAGAIN "changed since the plan" -- buckets
 * the plan took from here may have left before the read, and the
 * querier plans again.
 */
uint64_t ing_db_drop_epoch(struct ing_db *db, const char *tenant);
int ing_db_drop_check(struct ing_db *db, const char *tenant,
    uint64_t planned, struct sm_err *err);

/* Is block gen of tenant waiting for its deletion from disk?  A caller
 * that would import it again waits until it is gone (the deletion would
 * take the new copy with it). */
bool ing_db_block_retiring(struct ing_db *db, const char *tenant,
    uint64_t gen);

#endif /* ING_DB_H */
