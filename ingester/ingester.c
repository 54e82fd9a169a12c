/*
 * ingester.c -- the ingester module: storage lifecycle, replay, the cutter
 * thread, the RPC service and /ingester/flush.  See ingester.h.
 *
 * Queries cannot take every RPC worker.  Each of the -ingester.rpc-workers
 * handlers serves one request at a time, and writes and health checks
 * share them with queries; four slow queries once held all four for a
 * minute, so health probes timed out and every write got 503.  At most
 * rpc-workers - 1 queries (merge, series, labels, stats; at least 1) run at
 * once; one more is refused at once with SM_ELIMIT ("too many concurrent
 * queries", 429 to the client, not a replica failure for the querier)
 * rather than queued, since a queued query would hold its worker while it
 * waits.  Writes and health always find a free worker.  Regex cost is
 * bounded per value (common/selector.c) and matched once per distinct
 * value (ingester/set.c), so a query's own duration is bounded too.
 *
 * Queries run at normal priority here, on purpose: they hold a head's
 * read lock while they select, and a write waits for that lock, so a
 * query at lower priority (tried: its own thread at nice +10) held writes
 * up longer on a saturated machine (bench B8: write p99 206 ms against
 * 119-150 ms).  The querier's query workers are niced instead
 * (common/http.c): they hold no lock a write needs.
 */
#include "ingester.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/arena.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/rpc.h"
#include "common/tenant.h"

#include "db.h"
#include "gateway.h"
#include "remote.h"
#include "settings.h"
#include "ship.h"
#include "store.h"
#include "witness.h"

struct ingester {
	struct ing_config cfg;
	struct sm_http *http;
	struct ing_store *store;
	struct ing_db *db;              /* set when the replay is done */
	struct sm_rpc_server *rpc;
	pthread_t replay_thr, cutter_thr, ship_thr;
	int replay_started, cutter_started, ship_started;
	struct ing_ship *ship;          /* NULL: no bucket configured */
	struct ing_gateway *gw;         /* the store-gateway role, else NULL */
	struct ing_remote *remote;      /* its data parts' reader (remote.h) */
	struct ing_witness *wit;        /* ingesters only (witness.h) */
	char inc[33];                   /* the data directory's incarnation */
	pthread_t gw_thr;
	int gw_started;
	atomic_bool ready, failed, stopping;
	_Atomic int64_t ready_at_ms;      /* when it turned ready */
	_Atomic int64_t ready_ns;         /* the same, sm_mono_ns() */
	atomic_bool draining;             /* SIGTERM: LEAVING in Health */
	atomic_bool leaving;            /* ing_leave: LEAVING */
	atomic_bool sealed;             /* ing_leave: no more writes */
	atomic_uint writes_inflight;    /* past the sealed check */
	_Atomic int64_t last_write_ms;  /* the last write's arrival */
	pthread_mutex_t leave_mu;       /* one leave; its result */
	int left;                       /* 0 not run, 1 done, -1 failed */
	struct sm_err leave_err;
	atomic_bool retired;            /* the disk's left record is set */
	atomic_uint queries;            /* query RPCs being served */
	uint32_t fault_every;           /* SMOLDER_TEST_FAULTS (ingester.h) */
	atomic_uint_fast64_t fault_n;
	pthread_mutex_t mu;
	pthread_cond_t cv;              /* wakes the cutter to stop */
};

/* Per-request memory budget for decoding and building responses. */
#define ING_REQ_BUDGET (1024u << 20)

static struct sm_metric *m_writes, *m_write_fail, *m_write_dup, *m_rpc_dur;
static struct sm_metric *m_expired;
static struct sm_metric *m_restored, *m_restore_fail;
static struct sm_metric *m_local_dropped;

/* An armed write fails one of its first 2^ING_FAULT_BITS allocations. */
#define ING_FAULT_BITS 8

/* Clock skew allowed between a caller's deadline and this host. */
#define ING_DEADLINE_SKEW_MS 1000

/* A leave takes writes until none came for this long (about a ring
 * heartbeat, -ring.heartbeat-period's default 2s: every ring has heard
 * LEAVING), waiting at most the second figure (ingester.h, Leaving). */
#define ING_LEAVE_QUIET_MS 2000
#define ING_LEAVE_QUIET_MAX_MS 15000

/* Memtables that can be full at once: two (one flushing) for each column
 * family written, blocks and index (the head log is files: headlog.h),
 * and two of the spill family's ING_SPILL_MEMTABLE bytes (store.h). */
#define ING_MEMTABLES 4
#define ING_SPILL_MEMTABLE ((uint64_t)1 << 20)

/* Ready now; /ready waits -ingester.min-ready-duration more (ing_settled). */
static void
set_ready(struct ingester *ing)
{
	atomic_store(&ing->ready_at_ms, sm_now_ms());
	atomic_store(&ing->ready_ns, sm_mono_ns());
	atomic_store(&ing->ready, true);
}

#define SM_FLAG_STRUCT struct ing_config
static const struct sm_flag ing_flag_tab[] = {
	SM_FLAG_I64("ingester.rpc-workers", SM_FLAG_INT, rpc_workers,
	    "4",
	    "Concurrent RPC handlers of the ingester."),
	SM_FLAG_I64("ingester.rpc-max-message-bytes",
	    SM_FLAG_BYTES, rpc_recv_max,
	    "64MiB",
	    "Largest internal RPC request the ingester accepts; larger "
	    "frames are dropped before allocation."),
	SM_FLAG_I64("ingester.bucket-duration", SM_FLAG_DURATION, bucket_ms,
	    "10s",
	    "Width of the time buckets samples are summed into."),
	SM_FLAG_SWITCH("ingester.wal-sync", wal_sync,
	    "false",
	    "fsync the head log on every write: survives power loss "
	    "(off: survives a process crash)."),
	SM_FLAG_I64("ingester.block-duration", SM_FLAG_DURATION, block_ms,
	    "1h",
	    "Cut a tenant's head into an immutable block this long after "
	    "its first write."),
	SM_FLAG_I64("ingester.head-max-bytes", SM_FLAG_BYTES, head_max_bytes,
	    "1GiB",
	    "The process's memory bound, measured (resident memory): over "
	    "half of it sealed buckets are spilled; when memory plus what "
	    "a cut takes (5x the heads) passes 80%, every head is cut into "
	    "blocks; over 95% writes are refused with 503 until under 85%. "
	    "Caches count toward it (0 = no bound)."),
	SM_FLAG_I64("ingester.block-cache-bytes", SM_FLAG_BYTES, block_cache,
	    "256MiB",
	    "Memory for decoded block indexes and symbol tables."),
	SM_FLAG_I64("ingester.rocksdb-cache-bytes",
	    SM_FLAG_BYTES, rocksdb_cache,
	    "64MiB",
	    "RocksDB's block cache (compressed and raw SST blocks)."),
	SM_FLAG_I64("ingester.idempotency-window",
	    SM_FLAG_DURATION, idempotency_ms,
	    "1m",
	    "Remember written profile ids at least this long, so a resent "
	    "or retried write is not counted twice (must exceed "
	    "-distributor.push.timeout)."),
	SM_FLAG_I64("ingester.min-free-disk", SM_FLAG_BYTES, min_free_disk,
	    "64MiB",
	    "Refuse writes (503, not ready) while the data dir's file "
	    "system has less free space than this, so storage never runs "
	    "out mid-write and writes resume within 200 ms of space being "
	    "freed; cuts and deletes go on (0 = no reserve)."),
	SM_FLAG_I64("ingester.merge-max-bytes", SM_FLAG_BYTES, merge_max_bytes,
	    "16MiB",
	    "Compactor passes merge a tenant's small raw blocks (heads "
	    "cut early) lying in one past clock hour, each stored in "
	    "less than this, into one block kept below it (0 = no "
	    "merging)."),
	SM_FLAG_I64("ingester.head-spill-interval", SM_FLAG_DURATION, spill_ms,
	    "1m",
	    "Write the heads' sealed buckets (every bucket of a series "
	    "but its newest) to the store at least this often, and as "
	    "soon as a head holds 1 MiB of them, keeping only their "
	    "totals in memory, and the profile records with them; "
	    "queries and the block cut read them back (0 = keep them in "
	    "memory)."),
	SM_FLAG_I64("ingester.rocksdb-write-buffer-bytes",
	    SM_FLAG_BYTES, write_buffer,
	    "8MiB",
	    "Size of each RocksDB memtable (one per column family written: "
	    "blocks and index; up to two each while one is flushed): "
	    "less memory, or fewer and larger flushes. At least 1MiB. "
	    "The spilled buckets' family has 1MiB ones of its own."),
	SM_FLAG_I64("ingester.ship-interval", SM_FLAG_DURATION, ship_ms,
	    "10s",
	    "How often blocks not yet in the bucket are uploaded (with "
	    "-storage.backend set; a flush ships at once)."),
	SM_FLAG_SWITCH("ingester.restore-from-bucket", restore,
	    "true",
	    "With -storage.backend, an ingester whose data directory is "
	    "empty (new or wiped) restores the blocks its -instance.id "
	    "shipped before it turns ready."),
	SM_FLAG_I64("ingester.ship-concurrency", SM_FLAG_INT, ship_workers,
	    "4",
	    "Blocks uploaded to the bucket at once (1-32)."),
	SM_FLAG_SWITCH("ingester.leave-on-shutdown", leave_on_shutdown,
	    "true",
	    "With -storage.backend, SIGTERM leaves as POST "
	    "/ingester/shutdown does: cut and ship every block and wait "
	    "until store-gateways serve them before exiting (false: a "
	    "restart that keeps its disk)."),
	SM_FLAG_I64("ingester.leave-timeout",
	    SM_FLAG_DURATION, leave_timeout_ms,
	    "5m",
	    "How long a leave waits for the bucket and the store-gateways "
	    "before it gives up."),
	SM_FLAG_I64("ingester.local-retention",
	    SM_FLAG_DURATION, local_retention_ms,
	    "24h",
	    "With -storage.backend and -store-gateway.sharding-ring."
	    "members, blocks whose data is older than this are dropped "
	    "from the local disk once the store-gateways serve them "
	    "(0 = keep every block until retention)."),
	SM_FLAG_I64("ingester.min-ready-duration",
	    SM_FLAG_DURATION, min_ready_ms,
	    "5s",
	    "In a cluster, /ready turns 200 only this long after the "
	    "ingester (or store-gateway) turned ACTIVE, so every ring has "
	    "seen it by then (more than -ring.heartbeat-period): a rollout "
	    "that stops the next one at once fails no query."),
};
#undef SM_FLAG_STRUCT

SM_FLAGS_ADD_FN(ing_flags_add, struct ing_config, ing_flag_tab)

/* --- metrics -------------------------------------------------------------- */

/* The uint64_t of ing_db_stats at offset `off`, one gauge each; 0 until
 * the ingester is ready. */
static double
g_db_stat(void *arg, size_t off)
{
	struct ingester *ing = arg;
	struct ing_db_stats st;
	uint64_t v;

	if (!atomic_load(&ing->ready))
		return (0);
	ing_db_stats(ing->db, &st);
	memcpy(&v, (const char *)&st + off, sizeof(v));
	return ((double)v);
}

static double
g_series(void *arg)
{
	return (g_db_stat(arg, offsetof(struct ing_db_stats, series)));
}

static double
g_head_bytes(void *arg)
{
	return (g_db_stat(arg, offsetof(struct ing_db_stats, head_bytes)));
}

static double
g_blocks(void *arg)
{
	return (g_db_stat(arg, offsetof(struct ing_db_stats, blocks)));
}

static double
g_block_bytes(void *arg)
{
	return (g_db_stat(arg, offsetof(struct ing_db_stats, block_bytes)));
}

static double
g_disk(void *arg)
{
	struct ingester *ing = arg;

	return (ing->store != NULL ? (double)ing_store_disk_bytes(ing->store) :
	    0);
}

/*
 * The memory bound's measurement (db.h, ing_db_tick).  Decision: a build
 * with AddressSanitizer does not measure (the heads' estimate stands in):
 * its RSS is mostly shadow memory and the quarantine of freed blocks
 * (256 MiB), not what the process would hold, and the test suite runs
 * under it.
 */
#if defined(__SANITIZE_ADDRESS__)
#define ING_MEASURE_RSS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ING_MEASURE_RSS 0
#endif
#endif
#ifndef ING_MEASURE_RSS
#define ING_MEASURE_RSS 1
#endif

static uint64_t
measured_rss(void *arg)
{
	struct sm_mem_stats m;

	(void)arg;
	sm_mem_stats(&m);
	return (m.rss);
}

/* RocksDB's own memory counters (sm_kv_memory), one gauge each. */
static double
g_kv_mem(struct ingester *ing, int which)
{
	struct sm_kv_mem m;

	if (ing->store == NULL)
		return (0);
	sm_kv_memory(ing_store_kv(ing->store), &m);
	return ((double)(which == 0 ? m.memtables : which == 1 ?
	    m.block_cache : m.table_readers));
}

static double
g_kv_memtables(void *arg)
{
	return (g_kv_mem(arg, 0));
}

static double
g_kv_cache(void *arg)
{
	return (g_kv_mem(arg, 1));
}

static double
g_kv_readers(void *arg)
{
	return (g_kv_mem(arg, 2));
}

static double
g_ready(void *arg)
{
	struct ingester *ing = arg;

	return (atomic_load(&ing->ready) ? 1 : 0);
}

static const struct sm_metric_def ing_metric_defs[] = {
	{ &m_writes, SM_METRIC_COUNTER, "smolder_ingester_writes_total",
	    "Writes (uploads) made durable and applied.", NULL, NULL, 0 },
	{ &m_write_fail, SM_METRIC_COUNTER,
	    "smolder_ingester_write_failures_total", "Writes refused or "
	    "failed (not acknowledged).", NULL, NULL, 0 },
	{ &m_write_dup, SM_METRIC_COUNTER,
	    "smolder_ingester_duplicate_writes_total", "Writes whose profile "
	    "id was already written (resends, retries): acknowledged, not "
	    "applied again.", NULL, NULL, 0 },
	{ &m_expired, SM_METRIC_COUNTER,
	    "smolder_ingester_requests_expired_total", "Queries dropped or "
	    "stopped because their caller's deadline had passed, by method.",
	    SM_METRIC_LABELS("method"), NULL, 0 },
	{ &m_restored, SM_METRIC_COUNTER,
	    "smolder_ingester_restored_blocks_total", "Blocks restored from "
	    "the bucket into an empty data directory.", NULL, NULL, 0 },
	{ &m_restore_fail, SM_METRIC_COUNTER,
	    "smolder_ingester_restore_failures_total", "Restores from the "
	    "bucket that failed (the ingester started with what it had "
	    "restored).", NULL, NULL, 0 },
	{ &m_local_dropped, SM_METRIC_COUNTER,
	    "smolder_ingester_local_blocks_dropped_total",
	    "Blocks dropped from the local disk by -ingester.local-retention "
	    "once the store-gateways served them.", NULL, NULL, 0 },
	{ &m_rpc_dur, SM_METRIC_HISTOGRAM,
	    "smolder_ingester_rpc_duration_seconds", "Internal RPCs served by "
	    "the ingester, by method and outcome.",
	    SM_METRIC_LABELS("method", "status"), NULL, 0 },
};

static void
ing_metrics_init(struct ingester *ing)
{
	sm_metrics_register_table(ing_metric_defs,
	    SM_ARRAY_LEN(ing_metric_defs));
	sm_metric_gauge_fn("smolder_ingester_head_series",
	    "Series in the ingester's heads.", g_series, ing);
	sm_metric_gauge_fn("smolder_ingester_head_bytes",
	    "Approximate memory of the ingester's heads.", g_head_bytes, ing);
	sm_metric_gauge_fn("smolder_ingester_blocks",
	    "Blocks the ingester serves.", g_blocks, ing);
	sm_metric_gauge_fn("smolder_ingester_block_bytes",
	    "Stored (compressed) bytes of the blocks the ingester serves, "
	    "raw and downsampling tiers.", g_block_bytes, ing);
	sm_metric_gauge_fn("smolder_ingester_disk_bytes",
	    "Bytes of the ingester's RocksDB files on disk.", g_disk, ing);
	sm_metric_gauge_fn("smolder_ingester_kv_memtable_bytes",
	    "RocksDB memtables (active, immutable, pinned), every family.",
	    g_kv_memtables, ing);
	sm_metric_gauge_fn("smolder_ingester_kv_block_cache_bytes",
	    "RocksDB block cache in use.", g_kv_cache, ing);
	sm_metric_gauge_fn("smolder_ingester_kv_table_readers_bytes",
	    "RocksDB SST index and filter blocks held open.", g_kv_readers,
	    ing);
	sm_metric_gauge_fn("smolder_ingester_ready",
	    "1 once the head log is replayed and writes are accepted.",
	    g_ready, ing);
}

/* --- HTTP ----------------------------------------------------------------- */

static void
flush_handler(struct sm_http_req *r, void *arg)
{
	struct ingester *ing = arg;
	struct sm_err err;

	sm_err_clear(&err);
	if (!atomic_load(&ing->ready)) {
		sm_http_reply_error(r, 503, "unavailable", "ingester not "
		    "ready: replaying its head log");
		return;
	}
	if (ing_db_flush(ing->db, &err) != 0) {
		sm_http_reply_error(r, 500, "internal", "flush failed: %s",
		    err.msg);
		return;
	}
	/* As Mimir's flush: the blocks are in the bucket when it answers
	 * 200.  A bucket that fails leaves them cut and waiting here. */
	if (ing->ship != NULL && ing_ship_pass(ing->ship, NULL, &err) != 0) {
		sm_http_reply_error(r, 503, "unavailable", "flushed; blocks "
		    "wait for the bucket: %s", err.msg);
		return;
	}
	sm_http_reply_text(r, 200, "flushed");
}

/* --- leaving ---------------------------------------------------------------- */

/* This data directory's incarnation: the source the gateways name. */
static int
incarnation_hex(struct ingester *ing, char hex[33], struct sm_err *err)
{
	uint8_t inc[16];
	int rv;

	if ((rv = ing_store_incarnation(ing->store, inc, err)) != 0)
		return (rv);
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", inc[i]);
	return (0);
}


/* A pause of a loop or of a leave's polling (woken early by a stop). */
static void
nap(struct ingester *ing, int64_t ms)
{
	pthread_mutex_lock(&ing->mu);
	if (!atomic_load(&ing->stopping))
		sm_cond_wait_ms(&ing->cv, &ing->mu, ms);
	pthread_mutex_unlock(&ing->mu);
}

/*
 * Wait until the store-gateways serve every block (ingester.h): for each
 * tenant, every gen it lists (ing_gw_served, the check local retention
 * uses too).
 */
static int
leave_wait_gateways(struct ingester *ing, bool patient, int64_t deadline,
    struct sm_err *err)
{
	struct ing_db_block *v = NULL;
	uint64_t *gens = NULL;
	uint8_t *served = NULL;
	uint32_t nv = 0, i = 0, ntenants = 0;
	const char *hex = ing->inc;
	int rv;

	if ((rv = ing_db_blocks(ing->db, true, &v, &nv)) != 0 ||
	    (gens = sm_calloc(SM_MAX(nv, 1), sizeof(*gens))) == NULL ||
	    (served = sm_calloc(SM_MAX(nv, 1), 1)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	while (i < nv) {                /* (tenant, gen) order */
		uint32_t n = 0, answered = 0, nserved = 0;

		while (i + n < nv && strcmp(v[i + n].tenant, v[i].tenant) == 0) {
			gens[n] = v[i + n].meta.gen;
			n++;
		}
		if ((rv = ing_gw_served(ing->cfg.gw_ring, v[i].tenant, hex, gens, n, served,
		    &answered, err)) != 0)
			goto out;
		for (uint32_t k = 0; k < n; k++)
			nserved += served[k];
		if (nserved == n) {
			i += n;
			ntenants++;
			continue;
		}
		/* at shutdown, gateways that are all down are not waited
		 * for (the blocks are in the bucket) */
		if (answered == 0 && !patient) {
			rv = sm_err_set(err, SM_EUNAVAIL, "no store-gateway of "
			    "tenant %s answers", v[i].tenant);
			goto out;
		}
		if (sm_now_ms() >= deadline) {
			rv = sm_err_set(err, SM_ETIMEDOUT, "the store-gateways "
			    "serve %u of tenant %s's %u blocks (%u tenants "
			    "served)", nserved, v[i].tenant, n, ntenants);
			goto out;
		}
		nap(ing, 500);
	}
	sm_info("ingester", "leave: the store-gateways serve every block\t"
	    "tenants=%u blocks=%u", ntenants, nv);
out:
	sm_free(gens);
	sm_free(served);
	ing_db_blocks_free(v, nv);
	return (rv);
}

static int
leave_run(struct ingester *ing, bool patient, struct sm_err *err)
{
	int64_t deadline = sm_now_ms() + ing->cfg.leave_timeout_ms;
	int rv;

	if (!atomic_load(&ing->ready))
		return (sm_err_set(err, SM_EUNAVAIL, "ingester not ready: "
		    "replaying its head log"));
	if (ing->ship == NULL)
		return (sm_err_set(err, SM_EINVAL, "no bucket "
		    "(-storage.backend): there is nowhere to leave the "
		    "blocks"));
	atomic_store(&ing->leaving, true);
	sm_info("ingester", "leaving: taking the writes still coming, then "
	    "cutting and shipping every block");
	/* The rings stop sending once they hear LEAVING; a write refused
	 * before that would be in its peers' witness records but not in the
	 * bucket. */
	for (int64_t until = sm_now_ms() + ING_LEAVE_QUIET_MAX_MS;
	    sm_now_ms() < until && sm_now_ms() - atomic_load(
	    &ing->last_write_ms) < ING_LEAVE_QUIET_MS;)
		nap(ing, 50);
	atomic_store(&ing->sealed, true);
	while (atomic_load(&ing->writes_inflight) > 0)
		nap(ing, 1);
	sm_info("ingester", "leaving: no more writes; cutting and shipping "
	    "every block");
	if ((rv = ing_db_flush(ing->db, err)) != 0)
		return (rv);
	for (uint32_t last = UINT32_MAX;;) {
		uint32_t pending;

		sm_err_clear(err);
		rv = ing_ship_pass(ing->ship, NULL, err);
		pending = ing_ship_pending(ing->ship);
		if (rv == 0 && pending == 0)
			break;
		/* At shutdown a bucket that fails, or blocks that cannot be
		 * shipped (damaged), are not waited for: they stay on the
		 * disk. */
		if (!patient && (rv != 0 || pending >= last)) {
			if (rv == 0)
				sm_err_set(err, SM_EIO, "%u blocks cannot be "
				    "shipped", pending);
			sm_err_prefix(err, "leave");
			return (rv != 0 ? rv : SM_EIO);
		}
		last = pending;
		if (sm_now_ms() >= deadline) {
			if (rv == 0)
				sm_err_set(err, SM_ETIMEDOUT, "%u blocks not "
				    "shipped", ing_ship_pending(ing->ship));
			sm_err_prefix(err, "leave timed out");
			return (SM_ETIMEDOUT);
		}
		nap(ing, 1000);
	}
	if (ing->cfg.gw_ring != NULL &&
	    (rv = leave_wait_gateways(ing, patient, deadline, err)) != 0) {
		sm_err_prefix(err, "leave");
		return (rv);
	}
	sm_info("ingester", "left: every block is in the bucket%s",
	    ing->cfg.gw_ring != NULL ? " and served by the store-gateways" : "");
	return (0);
}

/* One leave; later calls get its result (a failed patient one may be
 * retried: the operator asks again). */
static int
leave_once(struct ingester *ing, bool patient, struct sm_err *err)
{
	int rv;

	pthread_mutex_lock(&ing->leave_mu);
	if (ing->left == 0 || (ing->left == -1 && patient)) {
		sm_err_clear(&ing->leave_err);
		rv = leave_run(ing, patient, &ing->leave_err);
		ing->left = rv == 0 ? 1 : -1;
		if (rv != 0 && ing->leave_err.code == 0)
			ing->leave_err.code = rv;
	}
	rv = ing->left == 1 ? 0 : ing->leave_err.code;
	*err = ing->leave_err;
	pthread_mutex_unlock(&ing->leave_mu);
	return (rv);
}

int
ing_leave(struct ingester *ing, struct sm_err *err)
{
	return (leave_once(ing, true, err));
}

/* The shutdown's leave, in a thread of its own so it can be bounded. */
struct leave_job {
	struct ingester *ing;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	int rv;
	struct sm_err err;
};

static void *
leave_main(void *arg)
{
	struct leave_job *j = arg;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	rv = leave_once(j->ing, false, &err);
	pthread_mutex_lock(&j->mu);
	j->rv = rv;
	j->err = err;
	j->done = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
	return (NULL);
}

void
ing_leave_on_shutdown(struct ingester *ing)
{
	struct leave_job j = { .ing = ing };
	int64_t deadline;
	pthread_t thr;

	if (ing == NULL || ing->cfg.gateway || ing->cfg.bucket == NULL ||
	    !ing->cfg.leave_on_shutdown || ing->ship == NULL)
		return;
	pthread_mutex_init(&j.mu, NULL);
	sm_cond_init(&j.cv);
	if (pthread_create(&thr, NULL, leave_main, &j) != 0) {
		sm_error("ingester", "shutdown without a leave: no thread");
		goto out;
	}
	/* A store that hangs must not hold the shutdown past the leave's
	 * bound: cancelling the bucket ends the upload in flight. */
	deadline = sm_now_ms() + ing->cfg.leave_timeout_ms;
	pthread_mutex_lock(&j.mu);
	while (!j.done && sm_now_ms() < deadline)
		sm_cond_wait_ms(&j.cv, &j.mu, SM_MAX(deadline - sm_now_ms(),
		    1));
	pthread_mutex_unlock(&j.mu);
	if (!j.done)
		sm_bucket_cancel(ing->cfg.bucket);
	pthread_join(thr, NULL);
	if (j.rv != 0)
		sm_error("ingester", "shutdown without a complete leave; the "
		    "rest stays on this disk\terr=\"%s\"", j.err.msg);
out:
	pthread_mutex_destroy(&j.mu);
	pthread_cond_destroy(&j.cv);
}

/* POST /ingester/shutdown: leave, then exit (ingester.h). */
static void
shutdown_handler(struct sm_http_req *r, void *arg)
{
	struct ingester *ing = arg;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	if ((rv = ing_leave(ing, &err)) != 0) {
		/* it is not safe to go: say what is missing; it stays */
		sm_http_reply_error(r, rv == SM_EINVAL ? 400 : 503,
		    rv == SM_EINVAL ? "invalid_argument" : "unavailable",
		    "%s", err.msg);
		return;
	}
	/* Remembered on the disk: a process restarted on it (a StatefulSet
	 * restarts the pod before it is scaled away) comes back LEAVING
	 * instead of joining the ring again. */
	if (ing_store_left_put(ing->store, sm_now_ms(), &err) != 0)
		sm_error("ingester", "left, but the disk did not keep it: a "
		    "restart on this data directory joins the ring again	"
		    "err=\"%s\"", err.msg);
	else
		atomic_store(&ing->retired, true);
	sm_http_reply_text(r, 200, "left: every block is in the bucket and "
	    "served; shutting down");
	kill(getpid(), SIGTERM);
}

/* --- lifecycle ------------------------------------------------------------ */

/*
 * Write fault injection (ingester.h, "Fault injection"): parse
 * SMOLDER_TEST_FAULTS=write:P.  Anything else set there is refused in the
 * log and ignored.
 */
static void
fault_config(struct ingester *ing)
{
	const char *v = getenv("SMOLDER_TEST_FAULTS");
	char *end;
	unsigned long p;

	if (v == NULL || v[0] == '\0' || sm_test_fault("ship-kill"))
		return;     /* ship-kill is ship.h's */
	if (strncmp(v, "write:", 6) != 0 ||
	    (p = strtoul(v + 6, &end, 10)) == 0 || *end != '\0' ||
	    p > UINT32_MAX) {
		sm_warn("ingester", "SMOLDER_TEST_FAULTS=%s ignored (expected "
		    "write:P, P >= 1)", v);
		return;
	}
	ing->fault_every = (uint32_t)p;
	sm_warn("ingester", "TEST FAULT INJECTION: one write in %lu fails an "
	    "allocation (SMOLDER_TEST_FAULTS)", p);
}

/* Arm the calling thread's allocation fault for write number n, or not. */
static void
fault_arm(struct ingester *ing)
{
	uint64_t n, z;

	if (ing->fault_every == 0)
		return;
	n = atomic_fetch_add(&ing->fault_n, 1);
	if (n % ing->fault_every != ing->fault_every - 1)
		return;
	/* k log-uniform in 1..2^ING_FAULT_BITS: small writes and the early
	 * steps of big ones get their share. */
	z = sm_hash_u64(n);
	sm_fault_thread_after((long)(1 + z % ((uint64_t)1 << (z >> 56) %
	    (ING_FAULT_BITS + 1))));
}

/* POST /store-gateway/sync: one sync pass now (gateway.h). */
static void
gw_sync_handler(struct sm_http_req *r, void *arg)
{
	struct ingester *ing = arg;
	struct sm_err err;
	uint32_t loaded = 0, dropped = 0;
	char body[128];

	if (ing->gw == NULL) {
		sm_http_reply_error(r, 503, "unavailable", "store-gateway not "
		    "started yet");
		return;
	}
	sm_err_clear(&err);
	if (ing_gateway_sync(ing->gw, &loaded, &dropped, &err) != 0) {
		sm_http_reply_error(r, 503, "unavailable", "sync failed: %s",
		    err.msg);
		return;
	}
	if (!atomic_load(&ing->ready))
		set_ready(ing);
	snprintf(body, sizeof(body), "{\"loaded\":%u,\"dropped\":%u}\n",
	    loaded, dropped);
	sm_http_reply(r, 200, "application/json", body, strlen(body));
}

int
ing_create(const struct ing_config *cfg, struct sm_http *http,
    struct ingester **out, struct sm_err *err)
{
	struct ingester *ing;
	int rv;

	*out = NULL;
	if (cfg->bucket_ms <= 0 || cfg->rpc_workers <= 0 ||
	    cfg->rpc_recv_max <= 0 || cfg->block_ms <= 0 ||
	    cfg->head_max_bytes < 0 || cfg->block_cache < 0 ||
	    cfg->rocksdb_cache < 0 || cfg->idempotency_ms <= 0 ||
	    cfg->min_free_disk < 0 || cfg->merge_max_bytes < 0 ||
	    cfg->spill_ms < 0 || cfg->write_buffer < ((int64_t)1 << 20) ||
	    cfg->instance_id == NULL || cfg->instance_id[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "ingester: durations, rpc "
		    "workers and message size must be > 0, sizes >= 0 "
		    "(write buffers >= 1MiB), and -instance.id set"));
	if (cfg->bucket != NULL && (cfg->ship_ms < 100 ||
	    cfg->ship_workers < 1 || cfg->ship_workers > ING_SHIP_WORKERS_MAX))
		return (sm_err_set(err, SM_EINVAL, "ingester: "
		    "-ingester.ship-interval must be >= 100ms and "
		    "-ingester.ship-concurrency 1..%d", ING_SHIP_WORKERS_MAX));
	if (cfg->head_max_bytes != 0 && (uint64_t)cfg->block_cache +
	    (uint64_t)cfg->rocksdb_cache + ING_MEMTABLES *
	    (uint64_t)cfg->write_buffer + 2 * ING_SPILL_MEMTABLE >
	    (uint64_t)cfg->head_max_bytes / 2)
		sm_warn("ingester", "caches and memtables alone can take half "
		    "of -ingester.head-max-bytes, the process's memory bound: "
		    "heads will be cut early and writes refused	"
		    "head_max_bytes=%lld block_cache_bytes=%lld "
		    "rocksdb_cache_bytes=%lld write_buffer_bytes=%lld",
		    (long long)cfg->head_max_bytes,
		    (long long)cfg->block_cache, (long long)cfg->rocksdb_cache,
		    (long long)cfg->write_buffer);
	if (cfg->gateway && (cfg->bucket == NULL || cfg->gw_sync_ms < 100))
		return (sm_err_set(err, SM_EINVAL, "store-gateway: it needs a "
		    "bucket (-storage.backend) and -store-gateway.sync-interval "
		    ">= 100ms"));
	if ((ing = sm_calloc(1, sizeof(*ing))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	ing->cfg = *cfg;
	ing->http = http;
	pthread_mutex_init(&ing->mu, NULL);
	pthread_mutex_init(&ing->leave_mu, NULL);
	sm_cond_init(&ing->cv);
	if (http != NULL && cfg->gateway)
		rv = sm_http_route(http, "POST", "/store-gateway/sync",
		    gw_sync_handler, ing, 0);
	else if (http != NULL && (rv = sm_http_route(http, "POST",
	    "/ingester/flush", flush_handler, ing, 0)) == 0)
		rv = sm_http_route(http, "POST", "/ingester/shutdown",
		    shutdown_handler, ing, 0);
	else
		rv = 0;
	if (rv != 0) {
		ing_destroy(ing);
		return (sm_err_set(err, rv, "ingester: route: %s",
		    sm_strerror(rv)));
	}
	ing_metrics_init(ing);
	fault_config(ing);
	*out = ing;
	return (0);
}

static void
witness_save(struct ingester *ing)
{
	struct sm_err err;

	sm_err_clear(&err);
	if (ing_witness_save(ing->wit, &err) != 0)
		sm_warn("ingester", "cannot store the witness record; will "
		    "retry\terr=\"%s\"", err.msg);
}

static void *
cutter_main(void *arg)
{
	struct ingester *ing = arg;

	while (!atomic_load(&ing->stopping)) {
		ing_db_tick(ing->db, sm_now_ms());
		witness_save(ing);
		nap(ing, 1000);
	}
	return (NULL);
}

/*
 * A bound the process cannot get under: what is resident once storage is
 * open, less the heads (a cut frees them), plus memtables filling up to
 * two per family, over the refusal threshold.  Writes would be refused as
 * soon as load starts and never resume while it lasts (db.h, ing_db_tick:
 * nothing a cut or a trim frees brings RSS down), so say so at start.
 */
static void
floor_check(struct ingester *ing)
{
	uint64_t rss = measured_rss(NULL), base, memt, max;
	struct ing_db_stats st;

	ing_db_stats(ing->db, &st);
	max = (uint64_t)ing->cfg.head_max_bytes;
	base = rss - SM_MIN(rss, st.head_bytes);
	memt = ING_MEMTABLES * (uint64_t)ing->cfg.write_buffer +
	    2 * ING_SPILL_MEMTABLE;
	if (base + memt > max / 100 * ING_MEM_RESUME_PCT)
		sm_warn("ingester", "-ingester.head-max-bytes is below what "
		    "this process holds without any head: writes will be "
		    "refused (503) under load; raise it	head_max_bytes_mib=%llu "
		    "resident_without_heads_mib=%llu memtables_mib=%llu",
		    (unsigned long long)(max >> 20),
		    (unsigned long long)(base >> 20),
		    (unsigned long long)(memt >> 20));
}

/*
 * A new or wiped data directory with a bucket: restore the blocks this
 * instance shipped (ship.h, ing_ship_restore) before the database opens,
 * so the replica is whole again when it turns ready.  A failure is logged
 * and counted and the ingester starts with what it restored: its peers
 * still hold the data, as they did before restores existed.  Except a
 * refusal before the first block (SM_EAUTH: wrong credentials, or sealed
 * objects and no -storage.encryption.key-file): that is a configuration
 * error, which would otherwise leave a replica -- or the single binary,
 * which has no peer -- answering without its history; the process stops
 * (returns SM_EAUTH) and the still-empty directory restores at the next
 * start.
 */
/* The witness record keeps what each restored incarnation covers: the
 * queriers then know which part of its old data this replica has. */
static void
restored_cb(void *arg, const char *inc, int64_t min_t, int64_t max_t)
{
	ing_witness_restored(arg, inc, min_t, max_t);
}

static int
restore(struct ingester *ing, struct sm_err *fatal)
{
	struct sm_err err;
	uint64_t bytes = 0;
	uint32_t blocks = 0;
	int64_t t0 = sm_now_ms();
	int rv;

	if (ing->cfg.bucket == NULL || !ing->cfg.restore ||
	    !ing_store_empty(ing->store))
		return (0);
	sm_info("ingester", "empty data directory: restoring this instance's "
	    "blocks from the bucket\tinstance=%s", ing->cfg.instance_id);
	sm_err_clear(&err);
	rv = ing_ship_restore(ing->store, ing->cfg.bucket,
	    ing->cfg.instance_id, &blocks, &bytes, restored_cb, ing->wit,
	    &err);
	if (blocks > 0)
		witness_save(ing);
	sm_counter_add(sm_metric_child0(m_restored), blocks);
	if (rv != 0) {
		sm_counter_inc(sm_metric_child0(m_restore_fail));
		if (rv == SM_EAUTH && blocks == 0)
			return (sm_err_set(fatal, rv, "restore from the bucket "
			    "refused: %s", err.msg));
		sm_error("ingester", "restore from the bucket failed; starting "
		    "with what was restored\tblocks=%u err=\"%s\"", blocks,
		    err.msg);
		return (0);
	}
	sm_info("ingester", "restored from the bucket\tblocks=%u bytes=%llu "
	    "ms=%lld", blocks, (unsigned long long)bytes,
	    (long long)(sm_now_ms() - t0));
	return (0);
}

/* The shipper's thread (ship.h): a pass every -ingester.ship-interval;
 * apart from the cutter, since an upload may wait on the bucket for its
 * timeouts and retries. */
/* One tenant's local-retention candidates (ship thread). */
static void
local_drop_tenant(struct ingester *ing, const char *tenant, const char *inc,
    uint64_t *gens, const int64_t *max_t, uint32_t n)
{
	uint8_t *served = NULL;
	uint64_t *drop = NULL, *sorted = NULL;
	uint32_t nd = 0, answered = 0;
	int64_t floor = INT64_MIN;
	struct sm_err err;

	sm_err_clear(&err);
	if ((served = sm_calloc(n, 1)) == NULL ||
	    (drop = sm_calloc(n, sizeof(*drop))) == NULL ||
	    (sorted = sm_calloc(n, sizeof(*sorted))) == NULL)
		goto out;
	memcpy(sorted, gens, n * sizeof(*gens));
	if (ing_gw_served(ing->cfg.gw_ring, tenant, inc, sorted, n, served, &answered,
	    &err) != 0 || answered == 0)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		if (!served[i])
			continue;
		drop[nd++] = sorted[i];
		for (uint32_t k = 0; k < n; k++)   /* its end, for the floor */
			if (gens[k] == sorted[i])
				floor = SM_MAX(floor, max_t[k]);
	}
	if (nd > 0 && ing_db_local_drop(ing->db, tenant, drop, nd, floor,
	    &err) == 0) {
		sm_counter_add(sm_metric_child0(m_local_dropped), nd);
		sm_info("ingester", "local retention: blocks served by the "
		    "store-gateways dropped\ttenant=%s blocks=%u local_floor_ms="
		    "%lld", tenant, nd, (long long)floor);
	} else if (nd > 0) {
		sm_warn("ingester", "local retention failed\ttenant=%s "
		    "err=\"%s\"", tenant, err.msg);
	}
out:
	sm_free(served);
	sm_free(drop);
	sm_free(sorted);
}

/*
 * Local retention (ingester.h): after a ship pass, drop what is old
 * enough and served by the store-gateways.
 */
static void
local_retention(struct ingester *ing)
{
	struct ing_db_block *v = NULL;
	uint64_t *gens = NULL;
	int64_t *max_t = NULL, cutoff;
	uint32_t nv = 0, k = 0;
	struct sm_err err;

	if (ing->cfg.local_retention_ms <= 0 || ing->cfg.gw_ring == NULL ||
	    ing->ship == NULL)
		return;
	sm_err_clear(&err);
	if (ing_db_blocks(ing->db, true, &v, &nv) != 0)
		goto out;
	if ((gens = sm_calloc(SM_MAX(nv, 1), sizeof(*gens))) == NULL ||
	    (max_t = sm_calloc(SM_MAX(nv, 1), sizeof(*max_t))) == NULL)
		goto out;
	cutoff = sm_now_ms() - ing->cfg.local_retention_ms;
	for (uint32_t i = 0; i <= nv; i++) {     /* (tenant, gen) order */
		if (i > 0 && (i == nv || strcmp(v[i].tenant,
		    v[i - 1].tenant) != 0)) {
			if (k > 0)
				local_drop_tenant(ing, v[i - 1].tenant,
				    ing->inc, gens, max_t, k);
			k = 0;
		}
		if (i == nv)
			break;
		if (!v[i].meta.broken && v[i].meta.max_t <= cutoff) {
			gens[k] = v[i].meta.gen;
			max_t[k++] = v[i].meta.max_t;
		}
	}
out:
	sm_free(gens);
	sm_free(max_t);
	ing_db_blocks_free(v, nv);
}

static void *
ship_main(void *arg)
{
	struct ingester *ing = arg;
	int64_t last_fail_log = 0;

	while (!atomic_load(&ing->stopping)) {
		struct sm_err err;
		int64_t now = sm_now_ms();

		sm_err_clear(&err);
		if (ing_ship_pass(ing->ship, NULL, &err) != 0) {
			if (now - last_fail_log >= 60000) {
				/* once a minute while the bucket is down */
				sm_warn("ship", "%s	pending=%u", err.msg,
				    ing_ship_pending(ing->ship));
				last_fail_log = now;
			}
		} else if (!atomic_load(&ing->leaving)) {
			local_retention(ing);
		}
		nap(ing, ing->cfg.ship_ms);
	}
	return (NULL);
}

/* The store-gateway's sync loop: ready after the first complete pass. */
static void *
gw_main(void *arg)
{
	struct ingester *ing = arg;
	int64_t last_fail_log = 0;

	while (!atomic_load(&ing->stopping)) {
		struct sm_err err;
		int64_t now = sm_now_ms();

		sm_err_clear(&err);
		if (ing_gateway_sync(ing->gw, NULL, NULL, &err) != 0) {
			if (now - last_fail_log >= 60000) {
				sm_warn("store-gateway", "sync failed: %s",
				    err.msg);
				last_fail_log = now;
			}
		} else if (!atomic_load(&ing->ready)) {
			set_ready(ing);
			sm_info("store-gateway", "ready: first sync done");
		}
		nap(ing, atomic_load(&ing->ready) ? ing->cfg.gw_sync_ms :
		    SM_MIN(ing->cfg.gw_sync_ms, 1000));
	}
	return (NULL);
}

/* Storage could not start: log why (`what: err`), mark the ingester
 * failed and stop the process as SIGTERM does (main shuts down). */
static void
start_failed(struct ingester *ing, const char *comp, const char *what,
    const struct sm_err *err)
{
	sm_error(comp, "%s: %s", what, err->msg);
	atomic_store(&ing->failed, true);
	kill(getpid(), SIGTERM);
}

static void *
replay_main(void *arg)
{
	struct ingester *ing = arg;
	struct ing_db_cfg dc = {
		.bucket_ms = ing->cfg.bucket_ms,
		.block_ms = ing->cfg.block_ms,
		.head_max_bytes = (uint64_t)ing->cfg.head_max_bytes,
		.rss = ING_MEASURE_RSS ? measured_rss : NULL,
		.zstd_level = 3,
		.idempotency_window_ms = ing->cfg.idempotency_ms,
		.merge_max_bytes = (uint64_t)ing->cfg.merge_max_bytes,
		.spill_ms = ing->cfg.spill_ms,
	};
	struct sm_err err;

	sm_err_clear(&err);
	if (!ing->cfg.gateway && restore(ing, &err) != 0) {
		start_failed(ing, "ingester", "cannot start", &err);
		return (NULL);
	}
	if (ing_db_open(&dc, ing->store, &ing->db, &err) != 0) {
		start_failed(ing, "ingester", "cannot load storage", &err);
		return (NULL);
	}
	if (ing->cfg.gateway) {
		struct ing_gateway_cfg gc = {
			.ring = ing->cfg.gw_ring,
			.self_id = ing->cfg.instance_id,
			.unowned_grace_ms = 3 * ing->cfg.gw_sync_ms,
			.bucket = ing->cfg.bucket,
			.remote = ing->remote,
			.workers = ing->cfg.gw_workers,
		};

		if (ing_gateway_create(&gc, ing->db, ing->store, &ing->gw,
		    &err) != 0) {
			start_failed(ing, "store-gateway", "cannot start", &err);
			return (NULL);
		}
		pthread_mutex_lock(&ing->mu);
		if (!atomic_load(&ing->stopping) &&
		    pthread_create(&ing->cutter_thr, NULL, cutter_main,
		    ing) == 0)
			ing->cutter_started = 1;
		if (!atomic_load(&ing->stopping) &&
		    pthread_create(&ing->gw_thr, NULL, gw_main, ing) == 0)
			ing->gw_started = 1;
		pthread_mutex_unlock(&ing->mu);
		sm_info("store-gateway", "storage open; syncing from the "
		    "bucket");
		return (NULL);
	}
	if (ing->cfg.bucket != NULL && ing_ship_create(ing->db, ing->store,
	    ing->cfg.bucket, ing->cfg.instance_id,
	    (uint32_t)ing->cfg.ship_workers, &ing->ship, &err) != 0) {
		start_failed(ing, "ingester", "cannot start shipping", &err);
		return (NULL);
	}
	pthread_mutex_lock(&ing->mu);
	if (!atomic_load(&ing->stopping) &&
	    pthread_create(&ing->cutter_thr, NULL, cutter_main, ing) == 0)
		ing->cutter_started = 1;
	if (ing->ship != NULL && !atomic_load(&ing->stopping) &&
	    pthread_create(&ing->ship_thr, NULL, ship_main, ing) == 0)
		ing->ship_started = 1;
	pthread_mutex_unlock(&ing->mu);
	if (ING_MEASURE_RSS && ing->cfg.head_max_bytes != 0)
		floor_check(ing);
	set_ready(ing);
	sm_info("ingester", "ready");
	return (NULL);
}

/*
 * A data directory that left (POST /ingester/shutdown completed) starts
 * LEAVING and sealed: it serves reads of what it holds and takes no
 * writes, so a pod restarted before it is scaled away does not join the
 * ring again (ingester.h, "Leaving").
 */
static int
left_check(struct ingester *ing, struct sm_err *err)
{
	char when[32];
	int64_t ms = 0;
	int rv;

	if ((rv = ing_store_left_get(ing->store, &ms, err)) == SM_ENOTFOUND) {
		sm_err_clear(err);
		return (0);
	}
	if (rv != 0)
		return (rv);
	atomic_store(&ing->leaving, true);
	atomic_store(&ing->sealed, true);
	atomic_store(&ing->retired, true);
	ing->left = 1;
	sm_time_utc(ms, when, sizeof(when));
	sm_warn("ingester", "this data directory left the ring at %s (POST "
	    "/ingester/shutdown): serving reads only, taking no writes. To "
	    "use this instance again, start it on an empty data directory "
	    "(it restores from the bucket)", when);
	return (0);
}

/* The RPC server's light requests: Health (small; anything that does
 * not decode is answered at once too). */
static bool
ing_rpc_light(const uint8_t *req, size_t len)
{
	Smolder__V1__Request *r;
	bool light;

	if (len > 64)
		return (false);
	if ((r = smolder__v1__request__unpack(NULL, len, req)) == NULL)
		return (true);
	light = r->method_case == SMOLDER__V1__REQUEST__METHOD_HEALTH;
	smolder__v1__request__free_unpacked(r, NULL);
	return (light);
}

int
ing_start(struct ingester *ing, struct sm_err *err)
{
	struct sm_rpc_server_cfg rc = {
		.url = ing->cfg.rpc_url,
		.workers = (unsigned)ing->cfg.rpc_workers,
		.recv_max = (size_t)ing->cfg.rpc_recv_max,
		.send_timeout_ms = 10000,
		.max_conns = (unsigned)ing->cfg.rpc_max_conns,
		/* A distributor in this process calls ing_serve for its
		 * writes directly (common/rpc.h, Direct calls). */
		.direct = ing->cfg.rpc_direct,
		/* A store-gateway lets queries take every worker (below,
		 * ing_serve); one is kept for Health (common/rpc.h,
		 * Reserved workers), so a hung bucket does not make the
		 * rings call it dead. */
		.reserve = ing->cfg.gateway && ing->cfg.rpc_workers > 1 ? 1 : 0,
		.light = ing_rpc_light,
	};
	struct sm_kv_opts kvo;
	char path[4096];
	int rv;

	sm_kv_opts_default(&kvo);
	kvo.sync = ing->cfg.wal_sync;
	kvo.block_cache_bytes = (size_t)ing->cfg.rocksdb_cache;
	kvo.write_buffer_bytes = (size_t)ing->cfg.write_buffer;
	kvo.spill_buffer_bytes = (size_t)ING_SPILL_MEMTABLE;
	snprintf(path, sizeof(path), "%s", ing->cfg.data_dir);
	if ((rv = ing_store_open(path, &kvo, (size_t)ing->cfg.block_cache,
	    &ing->store, err)) != 0)
		return (rv);
	sm_kv_set_reserve(ing_store_kv(ing->store),
	    (uint64_t)ing->cfg.min_free_disk);
	if (ing->cfg.gateway) {
		if ((rv = ing_remote_create(ing->cfg.bucket,
		    (uint64_t)ing->cfg.gw_cache_bytes,
		    (uint64_t)ing->cfg.gw_page_bytes, &ing->remote, err)) != 0)
			return (sm_err_prefix(err, "-store-gateway.data-page-"
			    "bytes"));
		ing_store_set_remote(ing->store, ing_remote_read, ing->remote);
	}
	if (!ing->cfg.gateway &&
	    ((rv = incarnation_hex(ing, ing->inc, err)) != 0 ||
	    (rv = ing_witness_open(ing->store, ing->cfg.instance_id,
	    &ing->wit, err)) != 0))
		return (rv);
	if (!ing->cfg.gateway && (rv = left_check(ing, err)) != 0)
		return (rv);
	/* Serve RPC at once: until the replay finishes every call gets
	 * "unavailable", so clients fail fast instead of waiting. */
	if ((rv = sm_rpc_server_start(&rc, ing_serve, ing, &ing->rpc,
	    err)) != 0)
		return (rv);
	if (pthread_create(&ing->replay_thr, NULL, replay_main, ing) != 0)
		return (sm_err_set(err, SM_ENOMEM, "ingester: thread"));
	ing->replay_started = 1;
	sm_info("ingester", "serving rpc; replaying the head log\turl=%s "
	    "data=%s", ing->cfg.rpc_url, path);
	return (0);
}

bool
ing_retired(const struct ingester *ing)
{
	return (atomic_load(&ing->retired));
}

bool
ing_ready(const struct ingester *ing)
{
	return (atomic_load(&ing->ready));
}

/* A member of other processes' rings (not -target=all's inproc://). */
static bool
in_cluster(const struct ingester *ing)
{
	return (ing->cfg.rpc_url != NULL &&
	    strncmp(ing->cfg.rpc_url, "inproc://", 9) != 0);
}

bool
ing_settled(struct ingester *ing, int64_t *wait_ms)
{
	int64_t at = atomic_load(&ing->ready_at_ms), left;

	*wait_ms = 0;
	/* in-process members are seen at once */
	if (!atomic_load(&ing->ready) || ing->cfg.min_ready_ms <= 0 ||
	    !in_cluster(ing))
		return (atomic_load(&ing->ready));
	left = at + ing->cfg.min_ready_ms - sm_now_ms();
	*wait_ms = left > 0 ? left : 0;
	return (left <= 0);
}

void
ing_drain(struct ingester *ing)
{
	/* In one process the rings are its own: a LEAVING member would
	 * refuse the writes the delay is there to serve. */
	if (ing != NULL && in_cluster(ing))
		atomic_store(&ing->draining, true);
}

bool
ing_writable(struct ingester *ing, char *why, size_t whylen)
{
	if (ing->store == NULL)
		return (true);
	if (ing->db != NULL && ing_db_mem_refusing(ing->db)) {
		snprintf(why, whylen, "over its memory bound "
		    "(-ingester.head-max-bytes): writes refused until resident "
		    "memory is under %d%% of it", ING_MEM_RESUME_PCT);
		return (false);
	}
	if (ing_store_writable(ing->store, why, whylen))
		return (true);
	/* the reason names its part */
	{
		char s[512];

		snprintf(s, sizeof(s), "%s", why);
		snprintf(why, whylen, "storage: %s", s);
	}
	return (false);
}

bool
ing_failed(const struct ingester *ing)
{
	return (atomic_load(&ing->failed));
}

/* Join thread thr if *started says it runs; it no longer does. */
static void
join_started(pthread_t thr, int *started)
{
	if (*started) {
		pthread_join(thr, NULL);
		*started = 0;
	}
}

void
ing_stop(struct ingester *ing)
{
	atomic_store(&ing->ready, false);
	pthread_mutex_lock(&ing->mu);
	atomic_store(&ing->stopping, true);
	pthread_cond_broadcast(&ing->cv);
	pthread_mutex_unlock(&ing->mu);
	/* No RPC in flight after this, so no write races the shutdown. */
	sm_rpc_server_stop(ing->rpc);
	ing->rpc = NULL;
	sm_info("ingester", "rpc stopped; joining the replay and the cutter");
	join_started(ing->replay_thr, &ing->replay_started);
	join_started(ing->cutter_thr, &ing->cutter_started);
	join_started(ing->ship_thr, &ing->ship_started);
	join_started(ing->gw_thr, &ing->gw_started);
}

void
ing_destroy(struct ingester *ing)
{
	if (ing == NULL)
		return;
	if (ing->rpc != NULL || ing->replay_started || ing->cutter_started ||
	    ing->ship_started || ing->gw_started)
		ing_stop(ing);
	sm_metric_gauge_fn_remove(ing);
	ing_ship_destroy(ing->ship);
	ing_gateway_destroy(ing->gw);
	ing_db_close(ing->db);
	if (ing->wit != NULL && ing->store != NULL)
		witness_save(ing);
	ing_witness_close(ing->wit);
	ing_store_close(ing->store);
	ing_remote_destroy(ing->remote);
	pthread_mutex_destroy(&ing->mu);
	pthread_mutex_destroy(&ing->leave_mu);
	pthread_cond_destroy(&ing->cv);
	sm_free(ing);
}

/* --- RPC ------------------------------------------------------------------ */

static const char *
method_name(Smolder__V1__Request__MethodCase c)
{
	switch (c) {
	case SMOLDER__V1__REQUEST__METHOD_WRITE:
		return ("write");
	case SMOLDER__V1__REQUEST__METHOD_MERGE:
		return ("merge");
	case SMOLDER__V1__REQUEST__METHOD_SERIES:
		return ("series");
	case SMOLDER__V1__REQUEST__METHOD_LABELS:
		return ("labels");
	case SMOLDER__V1__REQUEST__METHOD_STATS:
		return ("stats");
	case SMOLDER__V1__REQUEST__METHOD_HEALTH:
		return ("health");
	case SMOLDER__V1__REQUEST__METHOD_RETENTION:
		return ("retention");
	case SMOLDER__V1__REQUEST__METHOD_SETTINGS:
		return ("settings");
	case SMOLDER__V1__REQUEST__METHOD_ANALYZE:
		return ("analyze");
	case SMOLDER__V1__REQUEST__METHOD_SPAN_MERGE:
		return ("span_merge");
	case SMOLDER__V1__REQUEST__METHOD_PROFILES:
		return ("profiles");
	case SMOLDER__V1__REQUEST__METHOD_COMPACT_PLAN:
		return ("compact_plan");
	case SMOLDER__V1__REQUEST__METHOD_COMPACT:
		return ("compact");
	case SMOLDER__V1__REQUEST__METHOD_SOURCES:
		return ("sources");
	default:
		return ("unknown");
	}
}

/* Health: answered even while replaying, so the ring sees JOINING. */
static void
serve_health(struct ingester *ing, const Smolder__V1__HealthRequest *hreq,
    Smolder__V1__Response *r, Smolder__V1__HealthResponse *h,
    struct sm_arena *a)
{
	struct ing_db_stats st;

	h->instance_id = ing->cfg.instance_id;
	if (ing->wit != NULL) {
		h->incarnation = ing->inc;
		h->witness = ing_witness_get(ing->wit, a);
	}
	h->now_ms = sm_now_ms();
	if (ing->cfg.instance_zone != NULL)
		h->zone = ing->cfg.instance_zone;
	if (atomic_load(&ing->stopping) || atomic_load(&ing->leaving) ||
	    atomic_load(&ing->draining))
		h->state = SMOLDER__V1__MEMBER_STATE__MEMBER_LEAVING;
	else if (!atomic_load(&ing->ready))
		h->state = SMOLDER__V1__MEMBER_STATE__MEMBER_JOINING;
	else {
		char why[8];

		/* Refusing writes (memory, disk): the rings send them to
		 * the next token owner and keep reading from it. */
		h->state = ing->cfg.gateway || ing_writable(ing, why,
		    sizeof(why)) ? SMOLDER__V1__MEMBER_STATE__MEMBER_ACTIVE :
		    SMOLDER__V1__MEMBER_STATE__MEMBER_READONLY;
		ing_db_stats(ing->db, &st);
		h->series = st.series;
		h->head_bytes = st.head_bytes;
		h->data_min_ms = st.data_min;
		h->has_data_min = true;
		/* the tenant list, when the prober's is not this one */
		h->tenants_version = ing_db_tenants_version(ing->db);
		h->tenant_hold_ms = (uint32_t)SM_MIN(SM_MAX(
		    ing->cfg.tenant_hold_ms, 0), UINT32_MAX);
		if (hreq == NULL || hreq->tenants_version !=
		    h->tenants_version) {
			uint32_t n = 0;

			if (ing_db_tenants(ing->db, a, &h->tenants, &n,
			    &h->tenants_version) == 0) {
				h->n_tenants = n;
				h->has_tenants = true;
			}
		}
	}
	r->result_case = SMOLDER__V1__RESPONSE__RESULT_HEALTH;
	r->health = h;
}

/*
 * What is left of the hold of a tenant that joined the tenant list at
 * listed_ns (common/ring.h, "Confined reads").  Tenants listed before the
 * ingester turned ready hold nothing: the first list a prober gets from
 * this process (only once ready) has them.
 */
static uint32_t
write_hold_ms(struct ingester *ing, int64_t listed_ns)
{
	int64_t left;

	if (ing->cfg.tenant_hold_ms <= 0 || listed_ns <= atomic_load(
	    &ing->ready_ns))
		return (0);
	left = listed_ns + ing->cfg.tenant_hold_ms * 1000000 - sm_mono_ns();
	return (left <= 0 ? 0 : (uint32_t)SM_MIN((left + 999999) / 1000000,
	    UINT32_MAX));
}

/* One request's method, and its answer (the Response's parts). */
struct ing_call {
	struct ingester *ing;
	Smolder__V1__Request *req;
	const uint8_t *data;
	size_t len;
	struct sm_arena *a;
	Smolder__V1__Response *r;
	struct sm_err *err;
	Smolder__V1__WriteResponse wr;
	Smolder__V1__RetentionResponse ret;
	Smolder__V1__MergeResponse mr;
	Smolder__V1__SeriesResponse sr;
	Smolder__V1__LabelsResponse lr;
	Smolder__V1__StatsResponse str;
	Smolder__V1__SettingsResponse setr;
	Smolder__V1__AnalyzeResponse anr;
	Smolder__V1__ProfilesResponse pfr;
	Smolder__V1__CompactPlanResponse cpr;
	Smolder__V1__CompactResponse cr;
	Smolder__V1__SourcesResponse srcr;
};

/* Retention (compactor): on the wire a before_ms <= 0 means "keep"
 * (rpc.proto); a tenant that is not a valid id is refused, not stored. */
static int
serve_retention(struct ing_call *c, struct sm_err *err)
{
	const Smolder__V1__RetentionRequest *q = c->req->retention;
	struct ing_tenant_floor *tf = NULL;
	int64_t floor;
	int rv;

	if (q->n_tenants > 0 && (tf = sm_arena_alloc(c->a,
	    q->n_tenants * sizeof(*tf))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < q->n_tenants; i++) {
		const Smolder__V1__TenantRetention *e = q->tenants[i];

		if (e == NULL || (rv = sm_tenant_validate(e->tenant, err)) != 0)
			return (e == NULL ? sm_err_set(err, SM_EINVAL,
			    "retention: empty tenant entry") : rv);
		tf[i].tenant = e->tenant;
		tf[i].before_ms = e->before_ms > 0 ? e->before_ms : INT64_MIN;
	}
	if ((rv = ing_db_retention(c->ing->db, q->before_ms > 0 ?
	    q->before_ms : INT64_MIN, tf, (uint32_t)q->n_tenants,
	    &c->ret.blocks_deleted, err)) != 0)
		return (rv);
	/* What no tenant keeps needs no witness any more. */
	floor = q->before_ms > 0 ? q->before_ms : INT64_MIN;

	for (size_t i = 0; i < q->n_tenants; i++)
		floor = SM_MIN(floor, tf[i].before_ms);
	if (floor != INT64_MIN)
		ing_witness_expire(c->ing->wit, floor);
	return (0);
}

/* The compactor's plan (compact_plan): every job, into the arena. */
static int
serve_compact_plan(struct ing_call *c)
{
	const Smolder__V1__CompactPlanRequest *q = c->req->compact_plan;
	struct ing_compact_job *jobs = NULL;
	uint32_t n = 0;
	int rv;

	if (q->n_widths_ms > 16)
		return (sm_err_set(c->err, SM_EMALFORMED, "compact_plan: %zu "
		    "widths", q->n_widths_ms));
	if ((rv = ing_db_compact_plan(c->ing->db, q->widths_ms,
	    (uint32_t)q->n_widths_ms, ING_TIER_WINDOW_MS, q->now_ms, &jobs, &n,
	    c->err)) != 0)
		return (rv);
	smolder__v1__compact_plan_response__init(&c->cpr);
	if (n > 0 && (c->cpr.jobs = sm_arena_calloc(c->a, n,
	    sizeof(*c->cpr.jobs))) == NULL)
		rv = SM_ENOMEM;
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		Smolder__V1__CompactJob *j = sm_arena_alloc(c->a, sizeof(*j));
		char *tn = sm_arena_strndup(c->a, jobs[i].tenant,
		    strlen(jobs[i].tenant));

		if (j == NULL || tn == NULL) {
			rv = SM_ENOMEM;
			break;
		}
		smolder__v1__compact_job__init(j);
		j->tenant = tn;
		j->tier_ms = jobs[i].tier_ms;
		j->window_start_ms = jobs[i].window_start;
		j->due = jobs[i].due;
		j->superseded = jobs[i].superseded;
		j->blocks = jobs[i].nblocks;
		j->bytes = jobs[i].bytes;
		c->cpr.jobs[c->cpr.n_jobs++] = j;
	}
	ing_compact_jobs_free(jobs, n);
	if (rv != 0)
		return (sm_err_set(c->err, rv, "out of memory"));
	c->r->result_case = SMOLDER__V1__RESPONSE__RESULT_COMPACT_PLAN;
	c->r->compact_plan = &c->cpr;
	return (0);
}

/* One job (compact). */
static int
serve_compact(struct ing_call *c)
{
	const Smolder__V1__CompactRequest *q = c->req->compact;
	struct ing_compact_stats st;
	int rv;

	if (q->tenant == NULL || q->tenant[0] == '\0')
		return (sm_err_set(c->err, SM_EMALFORMED, "compact: no "
		    "tenant"));
	memset(&st, 0, sizeof(st));
	if ((rv = ing_db_compact_run(c->ing->db, q->tenant, q->tier_ms,
	    q->window_start_ms, ING_TIER_WINDOW_MS, q->now_ms, &st,
	    c->err)) != 0)
		return (rv);
	smolder__v1__compact_response__init(&c->cr);
	c->cr.built = st.built;
	c->cr.head_overlap = st.head_overlap;
	c->cr.inputs = st.inputs;
	c->cr.series = st.series;
	c->cr.superseded = st.superseded;
	c->cr.bytes_read = st.bytes_read;
	c->cr.bytes_written = st.bytes_written;
	c->r->result_case = SMOLDER__V1__RESPONSE__RESULT_COMPACT;
	c->r->compact = &c->cr;
	return (0);
}

/*
 * The storage API's query (db.h) from an RPC request: the select's
 * matchers, picks and resolutions copied into the call's arena; strings
 * and packed arrays borrowed from the decoded request, which outlives the
 * call.  The extras of each kind are set by the caller.  0, SM_EMALFORMED
 * (no select), SM_ENOMEM.
 */
static int
query_from_rpc(const Smolder__V1__Select *in, const char *what,
    struct sm_arena *a, struct ing_query *q, struct sm_err *err)
{
	struct ing_select *sel = &q->sel;
	struct ing_matcher *m;
	struct ing_pick *pk;
	struct ing_resolution *res;

	memset(q, 0, sizeof(*q));
	if (in == NULL)
		return (sm_err_set(err, SM_EMALFORMED, "%s: no select", what));
	m = sm_arena_alloc(a, SM_MAX(in->n_matchers, 1) * sizeof(*m));
	pk = sm_arena_alloc(a, SM_MAX(in->n_picks, 1) * sizeof(*pk));
	res = sm_arena_alloc(a, SM_MAX(in->n_resolution, 1) * sizeof(*res));
	if (m == NULL || pk == NULL || res == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < in->n_matchers; i++)
		m[i] = (struct ing_matcher){
			(enum sm_match_type)in->matchers[i]->type,
			in->matchers[i]->name, in->matchers[i]->value };
	for (size_t i = 0; i < in->n_picks; i++) {
		const Smolder__V1__Pick *p = in->picks[i];

		if ((p->n_count != 0 && p->n_count != p->n_t) ||
		    (p->n_neg_count != 0 && p->n_neg_count != p->n_neg))
			return (sm_err_set(err, SM_EMALFORMED, "%s: pick %zu: "
			    "%zu counts for %zu buckets, %zu for %zu "
			    "subtracted", what, i, p->n_count, p->n_t,
			    p->n_neg_count, p->n_neg));
		pk[i] = (struct ing_pick){ p->fp, p->t, p->n_t, p->neg,
			p->n_neg, p->n_count != 0 ? p->count : NULL,
			p->n_neg_count != 0 ? p->neg_count : NULL };
	}
	for (size_t i = 0; i < in->n_resolution; i++)
		res[i] = (struct ing_resolution){ in->resolution[i]->start_ms,
			in->resolution[i]->end_ms, in->resolution[i]->width_ms };
	*sel = (struct ing_select){ .tenant = in->tenant, .matchers = m,
		.nmatchers = in->n_matchers, .start_ms = in->start_ms,
		.end_ms = in->end_ms, .picked = in->picked, .picks = pk,
		.npicks = in->n_picks, .res = res, .nres = in->n_resolution };
	return (0);
}

/* The query of a read request (query_from_rpc plus its kind's fields). */
static int
query_of(const Smolder__V1__Request *req, struct sm_arena *a,
    struct ing_query *q, struct sm_err *err)
{
	int rv;

	switch (req->method_case) {
	case SMOLDER__V1__REQUEST__METHOD_MERGE:
		return (query_from_rpc(req->merge->select, "merge", a, q,
		    err));
	case SMOLDER__V1__REQUEST__METHOD_SERIES:
		if ((rv = query_from_rpc(req->series->select, "series", a, q,
		    err)) != 0)
			return (rv);
		q->step_ms = req->series->step_ms;
		q->group_by = (const char *const *)req->series->group_by;
		q->ngroup_by = req->series->n_group_by;
		q->call_site = (const char *const *)req->series->call_site;
		q->ncall_site = req->series->n_call_site;
		q->function = req->series->function;
		q->function_self = req->series->function_self;
		return (0);
	case SMOLDER__V1__REQUEST__METHOD_LABELS:
		if ((rv = query_from_rpc(req->labels->select, "labels", a, q,
		    err)) != 0)
			return (rv);
		q->kind = (enum ing_labels_kind)req->labels->kind;
		q->name = req->labels->name;
		q->label_names = (const char *const *)req->labels->label_names;
		q->nlabel_names = req->labels->n_label_names;
		q->all_time = req->labels->all_time;
		return (0);
	case SMOLDER__V1__REQUEST__METHOD_STATS:
		if ((rv = query_from_rpc(req->stats->select, "stats", a, q,
		    err)) != 0)
			return (rv);
		q->detail = req->stats->detail;
		q->ndetail = req->stats->n_detail;
		q->ids = req->stats->ids;
		return (0);
	case SMOLDER__V1__REQUEST__METHOD_ANALYZE:
		if ((rv = query_from_rpc(req->analyze->select, "analyze", a, q,
		    err)) != 0)
			return (rv);
		q->all_time = req->analyze->all_time;
		return (0);
	case SMOLDER__V1__REQUEST__METHOD_SPAN_MERGE:
		if ((rv = query_from_rpc(req->span_merge->select, "span merge",
		    a, q, err)) != 0)
			return (rv);
		q->span_ids = req->span_merge->span_ids;
		q->nspan_ids = req->span_merge->n_span_ids;
		return (0);
	case SMOLDER__V1__REQUEST__METHOD_PROFILES:
		if ((rv = query_from_rpc(req->profiles->select, "profiles", a,
		    q, err)) != 0)
			return (rv);
		q->group_by = (const char *const *)req->profiles->group_by;
		q->ngroup_by = req->profiles->n_group_by;
		q->max = req->profiles->max;
		return (0);
	default:
		memset(q, 0, sizeof(*q));
		return (0);
	}
}

/*
 * What each role serves (ingester.h): a store-gateway reads one source
 * per request, under its local tenant (gateway.h), and takes no writes
 * or compactor calls; an ingester has no sources.
 */
static int
role_check(struct ingester *ing, const Smolder__V1__Request *req,
    struct sm_arena *a, struct ing_query *q, struct sm_err *err)
{
	const Smolder__V1__Select *sel = sm_rpc_req_select(req);
	Smolder__V1__Request__MethodCase mc = req->method_case;

	if (!ing->cfg.gateway) {
		if (mc == SMOLDER__V1__REQUEST__METHOD_SOURCES)
			return (sm_err_set(err, SM_EUNSUPPORTED, "sources: not "
			    "a store-gateway"));
		if (sel != NULL && sel->source != NULL && sel->source[0] != '\0')
			return (sm_err_set(err, SM_EINVAL, "%s: a select "
			    "naming a source goes to a store-gateway, not an "
			    "ingester", method_name(mc)));
		return (0);
	}
	if (mc == SMOLDER__V1__REQUEST__METHOD_SOURCES)
		return (0);
	if (sel == NULL)
		return (sm_err_set(err, SM_EUNSUPPORTED, "%s: a store-gateway "
		    "serves reads only", method_name(mc)));
	if (sel->source == NULL || sel->source[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "%s: a store-gateway "
		    "serves one source per request and the select names none",
		    method_name(mc)));
	if ((q->sel.tenant = ing_gateway_tenant(a, sel->tenant, sel->source,
	    err)) == NULL)
		return (err->code);
	return (0);
}

/*
 * Once a method's handler succeeded, point the response's oneof at its
 * result (the union member and its case must agree, so they are set
 * together).
 */
#define REPLY_IF_OK(rcase, member, val) do {				\
	if (rv == 0) {							\
		r->result_case = SMOLDER__V1__RESPONSE__RESULT_##rcase;	\
		r->member = (val);					\
	}								\
} while (0)

static int
ing_dispatch(struct ing_call *c)
{
	struct ingester *ing = c->ing;
	Smolder__V1__Request *req = c->req;
	Smolder__V1__Response *r = c->r;
	struct sm_arena *a = c->a;
	struct sm_err *err = c->err;
	const Smolder__V1__Select *sel;
	struct ing_query q;
	int rv;

	if ((rv = query_of(req, a, &q, err)) != 0 ||
	    (rv = role_check(ing, req, a, &q, err)) != 0)
		return (rv);
	switch (req->method_case) {
	case SMOLDER__V1__REQUEST__METHOD_SOURCES:
		rv = ing_gateway_sources(ing->gw, req->sources, a, &c->srcr,
		    err);
		REPLY_IF_OK(SOURCES, sources, &c->srcr);
		break;
	case SMOLDER__V1__REQUEST__METHOD_WRITE: {
		struct ing_write_result res;
		char why[512];

		atomic_store(&ing->last_write_ms, sm_now_ms());
		atomic_fetch_add(&ing->writes_inflight, 1);
		if (atomic_load(&ing->sealed)) {
			atomic_fetch_sub(&ing->writes_inflight, 1);
			rv = sm_err_set(err, SM_EUNAVAIL, "ingester leaving: "
			    "it takes no more writes");
			sm_counter_inc(sm_metric_child0(m_write_fail));
			break;
		}
		/* A full disk (the reserve, or RocksDB's own error) refuses
		 * here, before the head log is touched. */
		if (ing->store != NULL && !ing_store_writable(ing->store,
		    why, sizeof(why))) {
			atomic_fetch_sub(&ing->writes_inflight, 1);
			rv = sm_err_set(err, SM_EIO, "storage refuses writes: "
			    "%s", why);
			sm_counter_inc(sm_metric_child0(m_write_fail));
			break;
		}
		fault_arm(ing);
		rv = ing_db_write(ing->db, c->data, c->len, req->write, &res,
		    err);
		sm_fault_thread_after(0);
		if (rv == 0)
			ing_witness_record(ing->wit, req->write);
		atomic_fetch_sub(&ing->writes_inflight, 1);
		if (rv == 0) {
			c->wr.series = res.series;
			c->wr.samples = res.pairs;
			c->wr.duplicate = res.duplicate;
			c->wr.tenant_hold_ms = write_hold_ms(ing,
			    res.listed_ns);
			r->result_case = SMOLDER__V1__RESPONSE__RESULT_WRITE;
			r->write = &c->wr;
			sm_counter_inc(sm_metric_child0(res.duplicate ?
			    m_write_dup : m_writes));
		} else {
			sm_counter_inc(sm_metric_child0(m_write_fail));
		}
		break;
	}
	case SMOLDER__V1__REQUEST__METHOD_MERGE:
		rv = ing_db_merge(ing->db, &q, a, &c->mr, err);
		REPLY_IF_OK(MERGE, merge, &c->mr);
		break;
	case SMOLDER__V1__REQUEST__METHOD_SERIES:
		rv = ing_db_series(ing->db, &q, a, &c->sr, err);
		REPLY_IF_OK(SERIES, series, &c->sr);
		break;
	case SMOLDER__V1__REQUEST__METHOD_LABELS:
		rv = ing_db_labels(ing->db, &q, a, &c->lr, err);
		REPLY_IF_OK(LABELS, labels, &c->lr);
		break;
	case SMOLDER__V1__REQUEST__METHOD_STATS: {
		/* Read before the series: a drop during the stats shows as
		 * a move at the read (ing_db_drop_check). */
		uint64_t de = ing_db_drop_epoch(ing->db, q.sel.tenant);

		rv = ing_db_series_stats(ing->db, &q, a, &c->str, err);
		c->str.drop_epoch = de;
		REPLY_IF_OK(STATS, stats, &c->str);
		break;
	}
	case SMOLDER__V1__REQUEST__METHOD_ANALYZE:
		rv = ing_db_analyze(ing->db, &q, a, &c->anr, err);
		REPLY_IF_OK(ANALYZE, analyze, &c->anr);
		break;
	case SMOLDER__V1__REQUEST__METHOD_SPAN_MERGE:
		rv = ing_db_span_merge(ing->db, &q, a, &c->mr, err);
		REPLY_IF_OK(SPAN_MERGE, span_merge, &c->mr);
		break;
	case SMOLDER__V1__REQUEST__METHOD_PROFILES:
		rv = ing_db_profiles(ing->db, &q, a, &c->pfr, err);
		REPLY_IF_OK(PROFILES, profiles, &c->pfr);
		break;
	case SMOLDER__V1__REQUEST__METHOD_RETENTION:
		rv = serve_retention(c, err);
		REPLY_IF_OK(RETENTION, retention, &c->ret);
		break;
	case SMOLDER__V1__REQUEST__METHOD_COMPACT_PLAN:
		rv = serve_compact_plan(c);
		break;
	case SMOLDER__V1__REQUEST__METHOD_COMPACT:
		rv = serve_compact(c);
		break;
	case SMOLDER__V1__REQUEST__METHOD_SETTINGS:
		rv = ing_settings_serve(ing_store_kv(ing->store), req->settings,
		    a, &c->setr, err);
		REPLY_IF_OK(SETTINGS, settings, &c->setr);
		break;
	default:
		rv = sm_err_set(err, SM_EUNSUPPORTED, "unsupported method %d",
		    (int)req->method_case);
		break;
	}
	/* Buckets the plan answers with a combination of replicas: exact
	 * only if none changed since it was made (db.h, ing_db_picks_check). */
	if (rv == 0 && q.sel.picked)
		rv = ing_db_picks_check(ing->db, &q, err);
	/* Blocks the plan may have counted on here, dropped since (db.h,
	 * ing_db_drop_check; rpc.proto, Select.drop_checked).  After the
	 * read: a drop before it has moved the epoch by then. */
	if (rv == 0 && req->method_case !=
	    SMOLDER__V1__REQUEST__METHOD_STATS &&
	    (sel = sm_rpc_req_select(req)) != NULL && sel->drop_checked)
		rv = ing_db_drop_check(ing->db, q.sel.tenant, sel->drop_epoch,
		    err);
	return (rv);
}

#undef REPLY_IF_OK

int
ing_serve(void *arg, const uint8_t *data, size_t len, struct sm_buf *resp)
{
	struct ingester *ing = arg;
	Smolder__V1__Response r = SMOLDER__V1__RESPONSE__INIT;
	Smolder__V1__HealthResponse hr = SMOLDER__V1__HEALTH_RESPONSE__INIT;
	struct ing_call c;
	Smolder__V1__Request *req = NULL;
	struct sm_arena *a;
	ProtobufCAllocator al;
	struct sm_err err;
	const char *method = "unknown";
	int64_t t0 = sm_mono_ns();
	bool query = false;
	int rv;

	sm_err_clear(&err);
	memset(&c, 0, sizeof(c));
	smolder__v1__write_response__init(&c.wr);
	smolder__v1__retention_response__init(&c.ret);
	if ((a = sm_arena_create(ING_REQ_BUDGET)) == NULL) {
		sm_rpc_pack_error(SM_ENOMEM, "out of memory", resp);
		return (SM_ENOMEM);
	}
	al = sm_arena_pbc(a);
	/* A direct call's caller may hand its message along (rpc.h);
	 * read-only like an unpacked one. */
	req = (Smolder__V1__Request *)sm_rpc_direct_msg(data);
	if (req == NULL)
		req = smolder__v1__request__unpack(&al, len, data);
	if (req == NULL) {
		rv = sm_err_set(&err, SM_EMALFORMED, "undecodable request of "
		    "%zu bytes", len);
		goto out;
	}
	method = method_name(req->method_case);
	if (req->method_case == SMOLDER__V1__REQUEST__METHOD_HEALTH) {
		serve_health(ing, req->health, &r, &hr, a);
		rv = 0;
		goto out;
	}
	if (!atomic_load(&ing->ready)) {
		rv = sm_err_set(&err, SM_EUNAVAIL, ing->cfg.gateway ?
		    "store-gateway not ready: its first sync from the bucket "
		    "is not done" : "ingester not ready: replaying its head "
		    "log");
		goto out;
	}
	/* Reads and compaction jobs share rpc_workers - 1 workers, so one is
	 * always left for writes (a tier job may run for seconds). */
	if (req->method_case == SMOLDER__V1__REQUEST__METHOD_MERGE ||
	    req->method_case == SMOLDER__V1__REQUEST__METHOD_SERIES ||
	    req->method_case == SMOLDER__V1__REQUEST__METHOD_LABELS ||
	    req->method_case == SMOLDER__V1__REQUEST__METHOD_STATS ||
	    req->method_case == SMOLDER__V1__REQUEST__METHOD_ANALYZE ||
	    req->method_case == SMOLDER__V1__REQUEST__METHOD_SPAN_MERGE ||
	    req->method_case == SMOLDER__V1__REQUEST__METHOD_PROFILES ||
	    req->method_case == SMOLDER__V1__REQUEST__METHOD_COMPACT_PLAN ||
	    req->method_case == SMOLDER__V1__REQUEST__METHOD_COMPACT) {
		unsigned max = ing->cfg.rpc_workers > 1 ?
		    (unsigned)ing->cfg.rpc_workers - 1 : 1;

		/* A store-gateway takes no writes: no worker is kept for
		 * them, and a query's calls for several sources queue for
		 * the workers instead of being refused -- parked by the RPC
		 * server beyond all workers but the one kept for Health
		 * (ing_start: a gateway whose bucket hangs, every worker in
		 * a ranged GET, still answers its probes). */
		if (ing->cfg.gateway)
			max = UINT_MAX;
		if (atomic_fetch_add(&ing->queries, 1) >= max) {
			atomic_fetch_sub(&ing->queries, 1);
			rv = sm_err_set(&err, SM_ELIMIT, "too many concurrent "
			    "queries on this ingester (%u, one worker is kept "
			    "for writes); retry shortly", max);
			goto out;
		}
		query = true;
	}
	/*
	 * The caller's deadline (querier/fanout.c): a query that waited past
	 * it (a queue, a stopped process) is not started, and one that runs
	 * past it stops at the next sm_deadline_passed() poll (ing_set_select
	 * per head and block) -- nobody waits for the answer any more.
	 * Writes always run: they are acknowledged work.
	 */
	if (req->deadline_unix_ms > 0 && req->method_case !=
	    SMOLDER__V1__REQUEST__METHOD_WRITE) {
		int64_t late = sm_now_ms() - (req->deadline_unix_ms +
		    ING_DEADLINE_SKEW_MS);

		if (late > 0) {
			sm_counter_inc(sm_metric_child(m_expired, method));
			rv = sm_err_set(&err, SM_ETIMEDOUT, "the caller's "
			    "deadline passed %lld ms before the ingester "
			    "started the %s", (long long)late, method);
			goto out;
		}
		sm_deadline_set(req->deadline_unix_ms + ING_DEADLINE_SKEW_MS);
	}
	c.ing = ing;
	c.req = req;
	c.data = data;
	c.len = len;
	c.a = a;
	c.r = &r;
	c.err = &err;
	rv = ing_dispatch(&c);
out:
	/* Stopped on the way (the deadline is still set): counted. */
	if (rv == SM_ETIMEDOUT && sm_deadline_passed())
		sm_counter_inc(sm_metric_child(m_expired, method));
	sm_deadline_set(0);
	if (query)
		atomic_fetch_sub(&ing->queries, 1);
	if (rv != 0) {
		if (err.msg[0] == '\0')
			sm_err_set(&err, rv, "%s", sm_strerror(rv));
		sm_rpc_pack_error(rv, err.msg, resp);
	} else {
		sm_rpc_pack_response(&r, resp);
	}
	sm_arena_destroy(a);
	sm_histogram_observe(sm_metric_child(m_rpc_dur, method, rv == 0 ? "ok" :
	    sm_strerror(rv)), (double)(sm_mono_ns() - t0) / 1e9);
	return (rv);
}
