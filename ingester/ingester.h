/*
 * ingester.h -- the ingester component (docs/architecture.md §1): owns the durable
 * database of its tenants (ingester/db.h) and serves smolder.v1 RPCs
 * (write, merge, series, labels) on its RPC URL.
 *
 * Lifecycle: ing_create (configure, register HTTP routes) -> ing_start
 * (open the store, serve RPC, replay the head log in the background) ->
 * ready (ing_ready) -> ing_stop (stop serving, finish the replay or the cut
 * in progress, close the store) -> ing_destroy.
 *
 * Until the replay is done every RPC but Health answers SM_EUNAVAIL
 * ("replaying"), so no write is accepted before the head log is back in
 * memory; /ready is 503 meanwhile.  Health answers JOINING then, ACTIVE
 * once ready, LEAVING while stopping, always with -instance.id, which is
 * how the rings of distributors and queriers track this ingester.  A replay that fails (the
 * store cannot be read) is fatal: the ingester logs it, marks itself failed
 * and raises SIGTERM so the process exits non-zero.
 *
 * HTTP: POST /ingester/flush cuts every head into a block now (as
 * Pyroscope's /ingester/flush does) and, with a bucket, uploads every
 * block not yet there (ship.h); 200 when done, 503 when the cut is done
 * but the bucket failed (the blocks wait on disk and ship later).
 *
 * RPC methods: Write, Merge, Series, Labels, Stats (replica
 * de-duplication), Analyze (index statistics for AnalyzeQuery and
 * GetProfileStats), SpanMerge, Profiles, Health (the ring), Retention,
 * CompactPlan and Compact (the compactor), Settings (tenant settings),
 * Sources (a store-gateway's: what it serves of a tenant, gateway.h).
 * Every Write notes its replicas in the witness record (witness.h), which
 * Health answers carry with the data directory's incarnation, so queriers
 * know who held what (querier/complete.c); Health also carries the list
 * of tenants held when the prober's copy is out of date (db.h,
 * ing_db_tenants), so a shuffle-sharded tenant's queries know which
 * ingesters are bystanders to it (querier/qry_int.h).
 *
 * Leaving (scale-in, or a disk that will not come back).  POST
 * /ingester/shutdown, and SIGTERM when a bucket is configured and
 * -ingester.leave-on-shutdown is on (ing_leave, called by main before
 * anything stops): the ingester turns LEAVING (the rings stop sending it
 * writes), still takes the writes that come until none has come for 2 s
 * (at most 15 s; ingester.c, ING_LEAVE_QUIET_MS) -- so every write
 * its peers were told it is a replica of (witness.h) is in what it ships,
 * as far as the rings' heartbeats allow --, then refuses writes
 * (SM_EUNAVAIL: they land on the other replicas), waits for the writes in
 * flight, cuts every head into blocks, ships until nothing
 * is pending, and -- with store-gateways (-store-gateway.sharding-ring.*)
 * -- waits until, for every tenant it holds, each owner store-gateway that answers
 * (at least one) serves its source with all its blocks (gateway.h,
 * ing_gw_served).  Only then may it go: /ingester/shutdown answers 200
 * and the process exits; its data is in the bucket and served.  The
 * disk remembers it (store.h, the left record): a process started again
 * on it -- a StatefulSet restarts the pod before it is scaled away --
 * comes up LEAVING and sealed, serving reads and taking no writes, and
 * says so in its log; an empty data directory makes the instance new
 * again (it restores from the bucket).  Past
 * -ingester.leave-timeout it gives up: /ingester/shutdown answers 503
 * saying what is missing and the ingester stays (LEAVING: still readable
 * directly, kept out of the rings; asking again retries), SIGTERM logs
 * it and exits with the data on its disk.  At SIGTERM a bucket that
 * fails is not waited for at all (a shutdown never hangs on a store that
 * is down).  A restart that keeps its disk may skip the wait
 * (-ingester.leave-on-shutdown=false).
 *
 * Local retention.  With a bucket and store-gateways, after each ship
 * pass the blocks older than -ingester.local-retention (by their data's
 * end) that every answering owner gateway of their tenant serves
 * (gateway.h, ing_gw_served; at least one must answer) are dropped from
 * this disk (db.h, ing_db_local_drop: the tenant's local
 * floor rises, and no tier is built below it).  Without gateways nothing
 * is dropped: the bucket alone does not answer queries.
 *
 * Store-gateway role (cfg.gateway; -target=store-gateway, gateway.h):
 * the same process serves history from the bucket.  It refuses Write,
 * Retention, Compact* and Settings (SM_EUNSUPPORTED), answers Sources,
 * and requires smolder.v1.Select.source on every read, which it serves
 * from that source's blocks only; an ingester refuses a select naming a
 * source (SM_EINVAL).  Its queries queue for the RPC workers rather than
 * being refused (an ingester keeps a worker for writes and answers
 * SM_ELIMIT past the rest; a query asks a gateway once per source, at
 * once).  It turns ready after its first sync pass over the
 * bucket; POST /store-gateway/sync runs a pass now (200 with the counts,
 * 503 with the bucket's error).
 *
 * Fault injection (tests only).  With SMOLDER_TEST_FAULTS=write:P in the
 * environment, one Write RPC in P fails one allocation, the k-th one the
 * write makes in its thread (sm_fault_thread_after; k drawn from the
 * write's number, log-uniformly in 1..256; a write that allocates less
 * succeeds).  The head write is all or nothing (head.h), so the write is
 * refused (SM_ENOMEM) and nothing of it is served, now or after a
 * replay.  A warning is logged at start when it is on.
 * tests/integration/test_fault_writes.py checks that the served totals
 * are exactly the acknowledged writes, before and after kill -9.
 *
 * Locking: RPC workers call into the db concurrently; see db.h.
 */
#ifndef ING_INGESTER_H
#define ING_INGESTER_H

#include <stdbool.h>

#include "common/bucket.h"
#include "common/buf.h"
#include "common/flags.h"
#include "common/http.h"
#include "common/ring.h"
#include "common/sm.h"

struct ing_config {
	char *rpc_url;            /* -rpc.listen-address (set by main) */
	char *data_dir;           /* -data.dir (set by main) */
	char *instance_id;        /* -instance.id (set by main) */
	char *instance_zone;      /* -instance.zone (set by main) */
	int64_t min_ready_ms;     /* -ingester.min-ready-duration */
	int64_t rpc_max_conns;    /* -rpc.max-connections (set by main) */
	int64_t rpc_workers;      /* -ingester.rpc-workers */
	int64_t rpc_recv_max;     /* -ingester.rpc-max-message-bytes */
	int64_t bucket_ms;        /* -ingester.bucket-duration */
	bool wal_sync;            /* -ingester.wal-sync */
	int64_t block_ms;         /* -ingester.block-duration */
	int64_t head_max_bytes;   /* -ingester.head-max-bytes */
	int64_t block_cache;      /* -ingester.block-cache-bytes */
	int64_t rocksdb_cache;    /* -ingester.rocksdb-cache-bytes */
	int64_t write_buffer;     /* -ingester.rocksdb-write-buffer-bytes */
	int64_t idempotency_ms;   /* -ingester.idempotency-window */
	int64_t min_free_disk;    /* -ingester.min-free-disk, 0 = off */
	int64_t merge_max_bytes;  /* -ingester.merge-max-bytes, 0 = off */
	int64_t spill_ms;         /* -ingester.head-spill-interval, 0 = off */
	int64_t ship_ms;          /* -ingester.ship-interval */
	bool restore;             /* -ingester.restore-from-bucket */
	int64_t ship_workers;     /* -ingester.ship-concurrency */
	struct sm_bucket *bucket; /* history's home (set by main; NULL: none;
				   * borrowed, outlives the ingester) */
	int64_t local_retention_ms; /* -ingester.local-retention */
	bool leave_on_shutdown;   /* -ingester.leave-on-shutdown */
	int64_t leave_timeout_ms; /* -ingester.leave-timeout */
	/* Store-gateway role (gateway.h; all set by main): no writes, no
	 * shipping, blocks loaded from the bucket and served per source. */
	bool gateway;
	struct sm_ring *gw_ring;  /* the store-gateways (borrowed, started by
				   * main; NULL: none): an ingester's leave
				   * and local retention ask them, a
				   * gateway shares tenants by it */
	int64_t gw_sync_ms;       /* -store-gateway.sync-interval */
	int64_t gw_cache_bytes;   /* -store-gateway.data-cache-bytes */
	int64_t gw_page_bytes;    /* -store-gateway.data-page-bytes */
	int64_t gw_workers;       /* -store-gateway.sync-concurrency */
	int64_t ring_tokens;      /* -ring.tokens */
	int64_t tenant_hold_ms;   /* a tenant new to the tenant list holds
				   * its writes' acks this long (set by main
				   * from -ring.heartbeat-period; 0 = no
				   * hold: common/ring.h, "Confined
				   * reads") */
	bool rpc_direct;          /* a distributor shares the process: its
				   * writes call ing_serve in its own thread
				   * (common/rpc.h, Direct calls; set by
				   * main) */
};

struct ingester;

/*
 * Leave (above): 0 when everything is shipped and served, else
 * SM_ETIMEDOUT or the bucket's error with what is missing in err.  Runs
 * once; a second call returns the first one's result.
 */
int ing_leave(struct ingester *ing, struct sm_err *err);

/* True once this data directory has left for good: POST
 * /ingester/shutdown completed and the disk's left record is set (now or
 * before this start).  A leave at SIGTERM does not retire it: the same
 * instance may start again on the disk and rejoin. */
bool ing_retired(const struct ingester *ing);

/* Leave at shutdown when -ingester.leave-on-shutdown and a bucket say
 * so (logs the outcome); no-op otherwise. */
void ing_leave_on_shutdown(struct ingester *ing);

/* The flag table for this config (bound to `cfg`). */
int ing_flags_add(struct sm_flags *fs, struct ing_config *cfg,
    struct sm_err *err);

struct ingester;

int ing_create(const struct ing_config *cfg, struct sm_http *http,
    struct ingester **out, struct sm_err *err);
int ing_start(struct ingester *ing, struct sm_err *err);
bool ing_ready(const struct ingester *ing);
/*
 * Ready and ACTIVE for -ingester.min-ready-duration (*wait_ms: how much
 * longer), so every ring that probes it has seen it ACTIVE: /ready waits
 * for it, and a rollout that stops the next member once this one is
 * ready never has two down in the readers' eyes.  In-process members
 * (inproc://) are settled once ready.
 */
bool ing_settled(struct ingester *ing, int64_t *wait_ms);
/* SIGTERM with -shutdown-delay: Health says LEAVING from now on (rings
 * stop sending it reads and writes) while it still serves what comes.
 * Not for an in-process member (-target=all): its process keeps taking
 * writes through the delay. */
void ing_drain(struct ingester *ing);
/* False, with the reason in why, while writes are refused: over the
 * memory bound (db.h, ing_db_tick), or the storage refuses them (a full
 * disk, an I/O error; see sm_kv_writable).  /ready is then 503 and the
 * ingester's Health says READONLY (common/ring.h: rings send its writes
 * to the next token owner and keep reading from it); it turns true again
 * by itself once memory is back under the bound or RocksDB has
 * recovered. */
bool ing_writable(struct ingester *ing, char *why, size_t whylen);
bool ing_failed(const struct ingester *ing);
void ing_stop(struct ingester *ing);
void ing_destroy(struct ingester *ing);

/*
 * Serve one packed smolder.v1.Request and append the packed Response to
 * `resp` (the RPC handler; exposed for tests).  Always writes a response;
 * returns the error code it carries.
 */
int ing_serve(void *ing, const uint8_t *req, size_t len, struct sm_buf *resp);

#endif /* ING_INGESTER_H */
