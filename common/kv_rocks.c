/*
 * kv_rocks.c -- sm_kv on RocksDB 7.8 through its C API; see kv.h for the
 * contract.  This is the only file that includes <rocksdb/c.h> (docs/style.md §11):
 * every errptr string is turned into an SM_E* code here and freed with
 * rocksdb_free, and no RocksDB type escapes.
 *
 * Handles.  An sm_kv owns the rocksdb_t, one column family handle per
 * family (RocksDB requires "default" to be opened too; we never write it),
 * one shared read options object (checksums verified) and three write
 * option objects: `wopts` (sync = opts.sync), `wopts_sync` (sync = 1, for
 * force_sync) and `wopts_nowal` (disableWAL, sm_kv_write_unlogged).
 * Option, table-option, filter and cache objects are only needed while
 * opening: RocksDB copies options and holds the LRU cache and
 * bloom filter through shared pointers, so sm_kv_open destroys its copies
 * on every path.  Column family handles are destroyed before rocksdb_close,
 * as RocksDB requires; every iterator must be destroyed before
 * sm_kv_close (an invariant, counted and asserted).
 *
 * Options, and why:
 *   - create_if_missing, create_missing_column_families: first start on an
 *     empty -data.dir needs nothing else.
 *   - paranoid_checks on: a corrupt file found in the background makes the
 *     database refuse writes instead of carrying on.
 *   - wal_recovery_mode = kPointInTimeRecovery (RocksDB's default, set
 *     explicitly): replay stops at the first bad WAL record, so a torn tail
 *     after a crash loses only the unsynced suffix and never leaves holes.
 *     kAbsoluteConsistency would refuse to open after an ordinary crash.
 *   - manual_wal_flush is left off and disableWAL is set only by
 *     sm_kv_write_unlogged, whose batches touch nothing but the spill
 *     family: kv.h promises that every other write is in the WAL when it
 *     returns.
 *   - wal_bytes_per_sync stays 0: it can sync WAL ranges out of order
 *     (docs/reliability.md §3).  bytes_per_sync = 1 MiB smooths SST writeback.
 *   - atomic_flush is not needed: with the WAL on for every column family
 *     a batch may span (the spill family's batches touch only it), a
 *     batch that spans families is atomic across a crash anyway.
 *   - max_open_files stays -1 (every SST open, index and filter blocks in
 *     memory), which RocksDB recommends when range deletions are used.
 *   - max_total_wal_size = 4 x write_buffer: a rarely written family (the
 *     index) would otherwise pin old WAL files until the default limit of
 *     4 x (sum of all memtables) (~1 GiB with defaults), and restart time
 *     grows with the WAL that must be replayed.
 *   - keep_log_file_num = 10, max_log_file_size = 64 MiB: RocksDB's LOG
 *     files otherwise accumulate (one LOG.old.* per open, 1000 kept).
 *   - Per family: level_compaction_dynamic_level_bytes; write_buffer_size
 *     from opts; one LRU block cache of block_cache_bytes shared by all
 *     families; a 10-bit full bloom filter for blocks and index (point
 *     lookups), none for the head (only ever scanned at replay).  The head
 *     is LZ4-compressed; blocks are already zstd-compressed by the ingester
 *     and index values are small, so both are stored uncompressed.
 *   - SST data block sizes, because max_open_files = -1 keeps every SST's
 *     index (one entry per data block) and filter in memory, so both grow
 *     with the data on disk (B5 with 1,000 series: all table
 *     readers 20.4 MB with RocksDB's 4 KiB everywhere).  The head's blocks
 *     are KV_HEAD_BLOCK_BYTES (256 KiB): it is only read in key order, at
 *     replay (12.9 MB of readers at 64 KiB, most of it the blocks
 *     family's).  The blocks family's are KV_BLOCKS_BLOCK_BYTES (16 KiB):
 *     its small values, the spilled buckets, are read by range scans of
 *     one series, and its large ones (block parts) are a data block each
 *     whatever the size.  Both index blocks are prefix-compressed
 *     (restart interval KV_INDEX_RESTART, 16, instead of a whole key per
 *     entry).  optimize_filters_for_hits on the blocks family: every
 *     point get there is of a part that exists (nothing reads a part
 *     without its block's meta), so the last level, which holds most
 *     keys, needs no filter.  All three are read per SST, so files
 *     written before a change keep their old layout until compacted.
 *   - The spill family (kv.h) holds what only the running process reads,
 *     so it is dropped and created again right after every open (a crash
 *     leaves nothing behind to clean up key by key), written without the
 *     WAL, and its memtables are opts.spill_buffer_bytes (1 MiB by
 *     default) where the others' are write_buffer_bytes: the ingester
 *     spills sealed buckets to take them out of memory, and an 8 MiB
 *     memtable holding them was a fifth of its RSS on B5.  Its
 *     data blocks are KV_BLOCKS_BLOCK_BYTES, its reads series range scans
 *     like the blocks family's, with no filter (no point reads).
 *   - If this librocksdb was built without LZ4, the open fails with "...
 *     is not linked with the binary" before anything is written; we then
 *     log a warning and reopen with the head uncompressed (an SST records
 *     its own compression, so mixing is safe).
 *
 * Batches.  kv.h lets a batch be built before any database is at hand
 * (sm_kv_batch_create takes no sm_kv), but RocksDB's write batch needs
 * column family handles.  A batch is therefore our own op log in an sm_buf:
 *   struct kv_rec (op, cf, alen, blen) | a bytes | b bytes
 * (a = key or range begin, b = value or range end), replayed into a
 * rocksdb_writebatch_t inside sm_kv_write.  The buffer's sticky error makes
 * the void builders safe: sm_kv_write reports SM_ENOMEM and writes nothing.
 * An empty or inverted delete_range is dropped when recorded: it deletes
 * nothing, and RocksDB rejects end < begin only at write time, from inside
 * the memtable insert.
 *
 * Known limit of the 7.8 C API: CompactRange returns no status.
 * sm_kv_compact detects failure through the "rocksdb.background-errors"
 * counter instead (a failed manual compaction counts as one) and recovers
 * the error text from a flush, which reports the background error.
 *
 * Out of memory inside RocksDB is a C++ exception that cannot cross the C
 * API; the process aborts.  Our own allocations report SM_ENOMEM.
 */
#include "kv.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <rocksdb/c.h>

#include "log.h"

#define KV_NCF_ALL (1 + SM_KV_NCF)   /* "default" + ours */
#define KV_BLOOM_BITS 10.0
#define KV_HEAD_BLOCK_BYTES (256u << 10)
#define KV_BLOCKS_BLOCK_BYTES (16u << 10)
#define KV_INDEX_RESTART 16
#define KV_BYTES_PER_SYNC (1u << 20)
#define KV_LOG_FILES_KEPT 10
#define KV_LOG_FILE_BYTES (64u << 20)
/* rocksdb::BottommostLevelCompaction::kForceOptimized (options.h); the C
 * API takes the raw value. */
#define KV_BOTTOMMOST_FORCE_OPTIMIZED 3

/* Indexed by 1 + enum sm_kv_cf; slot 0 is RocksDB's mandatory default. */
static const char *const kv_cf_names[KV_NCF_ALL] = {
	"default", "head", "blocks", "index", "spill",
};

struct sm_kv {
	rocksdb_t *db;
	rocksdb_column_family_handle_t *cf[KV_NCF_ALL];
	rocksdb_readoptions_t *ropts;
	rocksdb_writeoptions_t *wopts;       /* sync = opts.sync */
	rocksdb_writeoptions_t *wopts_sync;  /* sync = 1 (force_sync) */
	rocksdb_writeoptions_t *wopts_nowal; /* disableWAL (the spill family) */
	char *path;
	int niters;                          /* live iterators (atomic) */
	/* Write health (sm_kv_writable): set by a write failing with an I/O
	 * error, cleared by any write that succeeds, the probe included. */
	pthread_mutex_t wmu;
	bool wfailed;                        /* atomic reads outside wmu */
	int64_t wprobe_ns;                   /* last probe (wmu) */
	char wwhy[512];                      /* last write error (wmu) */
	/* Free-space reserve (sm_kv_set_reserve): all under wmu. */
	uint64_t reserve;                    /* bytes, 0 = none */
	int64_t fs_probe_ns;                 /* last statvfs */
	uint64_t fs_free;                    /* bytes available then */
	bool fs_low;                         /* fs_free < reserve */
};

/* The key the write probe puts into the default column family, which
 * holds nothing else. */
#define KV_PROBE_KEY "smolder-write-probe"
/* Probe at most this often while writes fail. */
#define KV_PROBE_EVERY_NS (200LL * 1000000)

struct sm_kv_iter {
	struct sm_kv *kv;
	rocksdb_readoptions_t *ropts;        /* carries the snapshot */
	const rocksdb_snapshot_t *snap;
	rocksdb_iterator_t *it;
};

enum kv_op {
	KV_OP_PUT = 1,
	KV_OP_DELETE = 2,
	KV_OP_DELETE_RANGE = 3,
};

/* Batch record header; followed by alen + blen bytes.  In memory only,
 * never persisted, so native layout is fine (read back with memcpy). */
struct kv_rec {
	uint8_t op;
	uint8_t cf;
	size_t alen;
	size_t blen;
};

struct sm_kv_batch {
	struct sm_buf ops;
	uint32_t count;
};

/* --- errors --------------------------------------------------------------- */

/*
 * RocksDB's Status::ToString() starts with the code's name (status.cc):
 * "Corruption: ", "Resource busy: " (Busy), "Result incomplete: "
 * (Incomplete), "Operation timed out: " (TimedOut), "Operation failed. Try
 * again.: " (TryAgain), "IO error: ", ...
 */
static int
kv_code(const char *e)
{
	static const struct {
		const char *prefix;
		int code;
	} map[] = {
		{ "Corruption", SM_ECORRUPT },
		{ "Resource busy", SM_EUNAVAIL },
		{ "Result incomplete", SM_EUNAVAIL },
		{ "Operation timed out", SM_EUNAVAIL },
		{ "Operation failed. Try again.", SM_EUNAVAIL },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(map); i++)
		if (strncmp(e, map[i].prefix, strlen(map[i].prefix)) == 0)
			return (map[i].code);
	return (SM_EIO);
}

/*
 * Map an errptr string to a code, set err to "<what>: <RocksDB text>",
 * free the string, return the code.  `e` may be NULL (defensive: a C API
 * call that failed without a message) and then means SM_EIO.
 */
static int
kv_fail(struct sm_err *err, char *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
kv_fail(struct sm_err *err, char *e, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	int code;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	code = e != NULL ? kv_code(e) : SM_EIO;
	sm_err_set(err, code, "%s: %s", what,
	    e != NULL ? e : "RocksDB failed without a message");
	rocksdb_free(e);
	return (code);
}

static rocksdb_column_family_handle_t *
kv_cf(const struct sm_kv *kv, enum sm_kv_cf cf)
{
	SM_ASSERT((unsigned)cf < SM_KV_NCF);
	return (kv->cf[1 + cf]);
}

static const char *
kv_cf_name(enum sm_kv_cf cf)
{
	SM_ASSERT((unsigned)cf < SM_KV_NCF);
	return (kv_cf_names[1 + cf]);
}

/* --- open / close --------------------------------------------------------- */

void
sm_kv_opts_default(struct sm_kv_opts *o)
{
	o->sync = false;
	o->block_cache_bytes = (size_t)64 << 20;
	o->write_buffer_bytes = (size_t)32 << 20;
	o->spill_buffer_bytes = (size_t)1 << 20;
	o->max_background_jobs = 2;
}

/* Database-wide options; column family options are copies of these. */
static rocksdb_options_t *
kv_db_options(const struct sm_kv_opts *o)
{
	rocksdb_options_t *dbo = rocksdb_options_create();

	rocksdb_options_set_create_if_missing(dbo, 1);
	rocksdb_options_set_create_missing_column_families(dbo, 1);
	rocksdb_options_set_paranoid_checks(dbo, 1);
	rocksdb_options_set_wal_recovery_mode(dbo,
	    rocksdb_point_in_time_recovery);
	rocksdb_options_set_manual_wal_flush(dbo, 0);
	rocksdb_options_set_max_background_jobs(dbo,
	    SM_MAX(o->max_background_jobs, 1));
	rocksdb_options_set_bytes_per_sync(dbo, KV_BYTES_PER_SYNC);
	rocksdb_options_set_max_total_wal_size(dbo,
	    4 * (uint64_t)o->write_buffer_bytes);
	rocksdb_options_set_keep_log_file_num(dbo, KV_LOG_FILES_KEPT);
	/* RocksDB's own LOG: warnings and errors only (2 = WARN_LEVEL);
	 * Smolder logs what operators need. */
	rocksdb_options_set_info_log_level(dbo, 2);
	rocksdb_options_set_max_log_file_size(dbo, KV_LOG_FILE_BYTES);
	return (dbo);
}

/* One column family's options: a copy of `dbo` plus table settings. */
static rocksdb_options_t *
kv_cf_options(const rocksdb_options_t *dbo, const struct sm_kv_opts *o,
    rocksdb_cache_t *cache, int compression, bool bloom, size_t block_size,
    bool hits)
{
	rocksdb_options_t *co = rocksdb_options_create_copy(
	    (rocksdb_options_t *)dbo);
	rocksdb_block_based_table_options_t *t =
	    rocksdb_block_based_options_create();

	rocksdb_options_set_compression(co, compression);
	rocksdb_options_set_level_compaction_dynamic_level_bytes(co, 1);
	rocksdb_options_set_write_buffer_size(co, o->write_buffer_bytes);
	rocksdb_block_based_options_set_block_cache(t, cache);
	if (block_size != 0) {
		rocksdb_block_based_options_set_block_size(t, block_size);
		rocksdb_block_based_options_set_index_block_restart_interval(
		    t, KV_INDEX_RESTART);
	}
	if (hits)
		rocksdb_options_set_optimize_filters_for_hits(co, 1);
	if (bloom) {
		/* The table options take ownership of the policy. */
		rocksdb_block_based_options_set_filter_policy(t,
		    rocksdb_filterpolicy_create_bloom_full(KV_BLOOM_BITS));
	}
	/* The factory copies the table options (cache and filter included,
	 * by shared pointer), so ours can go now. */
	rocksdb_options_set_block_based_table_factory(co, t);
	rocksdb_block_based_options_destroy(t);
	return (co);
}

/* Empty the spill family of a database just opened (kv.h): drop it and
 * create it again with options `co`.  On failure kv->cf[] may hold a NULL
 * for it. */
static int
kv_spill_empty(struct sm_kv *kv, const rocksdb_options_t *co,
    struct sm_err *err)
{
	rocksdb_column_family_handle_t **h = &kv->cf[1 + SM_KV_SPILL];
	char *e = NULL;

	rocksdb_drop_column_family(kv->db, *h, &e);
	if (e != NULL)
		return (kv_fail(err, e, "kv: drop the spill family of %s",
		    kv->path));
	rocksdb_column_family_handle_destroy(*h);
	*h = rocksdb_create_column_family(kv->db, co,
	    kv_cf_names[1 + SM_KV_SPILL], &e);
	if (*h == NULL || e != NULL) {
		if (*h != NULL) {
			rocksdb_column_family_handle_destroy(*h);
			*h = NULL;
		}
		return (kv_fail(err, e, "kv: create the spill family of %s",
		    kv->path));
	}
	return (0);
}

static rocksdb_t *
kv_open_cfs(const rocksdb_options_t *dbo, rocksdb_options_t **cfo,
    const char *path, rocksdb_column_family_handle_t **cf, char **e)
{
	return (rocksdb_open_column_families(dbo, path, KV_NCF_ALL,
	    kv_cf_names, (const rocksdb_options_t *const *)cfo, cf, e));
}

int
sm_kv_open(const char *path, const struct sm_kv_opts *o, struct sm_kv **out,
    struct sm_err *err)
{
	rocksdb_options_t *dbo = NULL, *cfo[KV_NCF_ALL] = { NULL };
	rocksdb_options_t **head = &cfo[1 + SM_KV_HEAD];
	rocksdb_cache_t *cache = NULL;
	struct sm_kv *kv;
	char *e = NULL;
	int rv = 0;

	SM_ASSERT(path != NULL && o != NULL && out != NULL);
	*out = NULL;
	/* Our allocations first: nothing can fail once the DB is open. */
	if ((kv = sm_calloc(1, sizeof(*kv))) == NULL ||
	    (kv->path = sm_strdup(path)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "kv: out of memory opening %s",
		    path);
		goto out;
	}
	pthread_mutex_init(&kv->wmu, NULL);
	cache = rocksdb_cache_create_lru(o->block_cache_bytes);
	dbo = kv_db_options(o);
	cfo[0] = kv_cf_options(dbo, o, cache, rocksdb_no_compression, false, 0,
	    false);
	*head = kv_cf_options(dbo, o, cache, rocksdb_lz4_compression, false,
	    KV_HEAD_BLOCK_BYTES, false);
	cfo[1 + SM_KV_BLOCKS] = kv_cf_options(dbo, o, cache,
	    rocksdb_no_compression, true, KV_BLOCKS_BLOCK_BYTES, true);
	cfo[1 + SM_KV_INDEX] = kv_cf_options(dbo, o, cache,
	    rocksdb_no_compression, true, 0, false);
	cfo[1 + SM_KV_SPILL] = kv_cf_options(dbo, o, cache,
	    rocksdb_no_compression, false, KV_BLOCKS_BLOCK_BYTES, false);
	rocksdb_options_set_write_buffer_size(cfo[1 + SM_KV_SPILL],
	    o->spill_buffer_bytes);

	kv->db = kv_open_cfs(dbo, cfo, path, kv->cf, &e);
	if (kv->db == NULL && e != NULL &&
	    strstr(e, "is not linked with the binary") != NULL) {
		sm_warn("kv", "LZ4 is not available in librocksdb; the head "
		    "column family is stored uncompressed\tpath=%s err=\"%s\"",
		    path, e);
		rocksdb_free(e);
		e = NULL;
		rocksdb_options_set_compression(*head, rocksdb_no_compression);
		kv->db = kv_open_cfs(dbo, cfo, path, kv->cf, &e);
	}
	if (kv->db == NULL) {
		rv = kv_fail(err, e, "kv: open %s", path);
		goto out;
	}
	if ((rv = kv_spill_empty(kv, cfo[1 + SM_KV_SPILL], err)) != 0) {
		for (size_t i = 0; i < KV_NCF_ALL; i++)
			if (kv->cf[i] != NULL)
				rocksdb_column_family_handle_destroy(
				    kv->cf[i]);
		rocksdb_close(kv->db);
		kv->db = NULL;
		goto out;
	}
	kv->ropts = rocksdb_readoptions_create();
	rocksdb_readoptions_set_verify_checksums(kv->ropts, 1);
	kv->wopts = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(kv->wopts, o->sync ? 1 : 0);
	kv->wopts_sync = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(kv->wopts_sync, 1);
	kv->wopts_nowal = rocksdb_writeoptions_create();
	rocksdb_writeoptions_disable_WAL(kv->wopts_nowal, 1);
	*out = kv;
	kv = NULL;
out:
	if (kv != NULL) {
		/* The DB failed to open, so there are no handles to drop. */
		SM_ASSERT(kv->db == NULL);
		if (kv->path != NULL)
			pthread_mutex_destroy(&kv->wmu);
		sm_free(kv->path);
		sm_free(kv);
	}
	for (size_t i = 0; i < KV_NCF_ALL; i++)
		if (cfo[i] != NULL)
			rocksdb_options_destroy(cfo[i]);
	if (dbo != NULL)
		rocksdb_options_destroy(dbo);
	if (cache != NULL)
		rocksdb_cache_destroy(cache);
	return (rv);
}

void
sm_kv_close(struct sm_kv *kv)
{
	if (kv == NULL)
		return;
	SM_ASSERT(__atomic_load_n(&kv->niters, __ATOMIC_ACQUIRE) == 0);
	for (size_t i = 0; i < KV_NCF_ALL; i++)
		rocksdb_column_family_handle_destroy(kv->cf[i]);
	/* Waits for running flushes and compactions to stop. */
	rocksdb_close(kv->db);
	rocksdb_readoptions_destroy(kv->ropts);
	rocksdb_writeoptions_destroy(kv->wopts);
	rocksdb_writeoptions_destroy(kv->wopts_sync);
	rocksdb_writeoptions_destroy(kv->wopts_nowal);
	pthread_mutex_destroy(&kv->wmu);
	sm_free(kv->path);
	sm_free(kv);
}

/* --- write health --------------------------------------------------------- */

/* Record the outcome of a write: an I/O error (no space included) marks
 * the store unwritable, any success marks it writable again. */
static void
kv_note_write(struct sm_kv *kv, int rv, const struct sm_err *err)
{
	if (rv == 0) {
		if (SM_UNLIKELY(__atomic_load_n(&kv->wfailed,
		    __ATOMIC_ACQUIRE))) {
			pthread_mutex_lock(&kv->wmu);
			if (kv->wfailed)
				sm_info("kv", "writes succeed again\tpath=%s",
				    kv->path);
			__atomic_store_n(&kv->wfailed, false, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&kv->wmu);
		}
		return;
	}
	if (rv != SM_EIO)
		return;
	pthread_mutex_lock(&kv->wmu);
	if (!kv->wfailed)
		sm_error("kv", "writes fail; not ready until they succeed "
		    "again\tpath=%s err=\"%s\"", kv->path,
		    err != NULL ? err->msg : "I/O error");
	snprintf(kv->wwhy, sizeof(kv->wwhy), "%s",
	    err != NULL ? err->msg : "I/O error");
	__atomic_store_n(&kv->wfailed, true, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&kv->wmu);
}

void
sm_kv_set_reserve(struct sm_kv *kv, uint64_t bytes)
{
	pthread_mutex_lock(&kv->wmu);
	kv->reserve = bytes;
	kv->fs_probe_ns = 0;
	kv->fs_low = false;
	pthread_mutex_unlock(&kv->wmu);
}

/* False while the store's file system is below the reserve (why set). */
static bool
kv_space_ok(struct sm_kv *kv, char *why, size_t whylen)
{
	int64_t now = sm_mono_ns();
	bool ok;

	pthread_mutex_lock(&kv->wmu);
	if (kv->reserve == 0) {
		pthread_mutex_unlock(&kv->wmu);
		return (true);
	}
	if (kv->fs_probe_ns == 0 || now - kv->fs_probe_ns >=
	    KV_PROBE_EVERY_NS) {
		struct statvfs vf;
		bool low;

		kv->fs_probe_ns = now;
		if (statvfs(kv->path, &vf) == 0) {
			kv->fs_free = (uint64_t)vf.f_bavail *
			    (uint64_t)vf.f_frsize;
			low = kv->fs_free < kv->reserve;
			if (low && !kv->fs_low)
				sm_error("kv", "free space below the reserve; "
				    "writes refused until it is back\tpath=%s "
				    "free=%" PRIu64 " reserve=%" PRIu64,
				    kv->path, kv->fs_free, kv->reserve);
			else if (!low && kv->fs_low)
				sm_info("kv", "free space above the reserve "
				    "again\tpath=%s free=%" PRIu64, kv->path,
				    kv->fs_free);
			kv->fs_low = low;
		}
	}
	ok = !kv->fs_low;
	if (!ok && why != NULL && whylen > 0)
		snprintf(why, whylen, "no space left on device: %.1f MiB "
		    "available to the data dir, below the %.1f MiB reserve "
		    "(-ingester.min-free-disk)", (double)kv->fs_free /
		    (1 << 20), (double)kv->reserve / (1 << 20));
	pthread_mutex_unlock(&kv->wmu);
	return (ok);
}

bool
sm_kv_writable(struct sm_kv *kv, char *why, size_t whylen)
{
	struct sm_err e;
	char *re = NULL;
	int64_t now;
	bool ok;

	if (!kv_space_ok(kv, why, whylen))
		return (false);
	if (SM_LIKELY(!__atomic_load_n(&kv->wfailed, __ATOMIC_ACQUIRE)))
		return (true);
	now = sm_mono_ns();
	pthread_mutex_lock(&kv->wmu);
	if (kv->wfailed && now - kv->wprobe_ns >= KV_PROBE_EVERY_NS) {
		kv->wprobe_ns = now;
		pthread_mutex_unlock(&kv->wmu);
		rocksdb_put_cf(kv->db, kv->wopts, kv->cf[0], KV_PROBE_KEY,
		    sizeof(KV_PROBE_KEY) - 1, "", 0, &re);
		sm_err_clear(&e);
		kv_note_write(kv, re == NULL ? 0 : kv_fail(&e, re, "kv: write "
		    "probe"), &e);
		pthread_mutex_lock(&kv->wmu);
	}
	ok = !kv->wfailed;
	if (!ok && why != NULL && whylen > 0)
		snprintf(why, whylen, "%s", kv->wwhy);
	pthread_mutex_unlock(&kv->wmu);
	return (ok);
}

/* --- point operations ----------------------------------------------------- */

int
sm_kv_get(struct sm_kv *kv, enum sm_kv_cf cf, const void *key, size_t klen,
    struct sm_buf *val, struct sm_err *err)
{
	rocksdb_pinnableslice_t *ps;
	const char *v;
	size_t vlen;
	char *e = NULL;
	int rv;

	ps = rocksdb_get_pinned_cf(kv->db, kv->ropts, kv_cf(kv, cf), key,
	    klen, &e);
	if (e != NULL) {
		SM_ASSERT(ps == NULL);
		return (kv_fail(err, e, "kv: get %zu-byte key from %s", klen,
		    kv_cf_name(cf)));
	}
	if (ps == NULL)
		return (SM_ENOTFOUND);
	v = rocksdb_pinnableslice_value(ps, &vlen);
	sm_buf_append(val, v, vlen);
	rocksdb_pinnableslice_destroy(ps);
	if ((rv = sm_buf_error(val)) != 0)
		return (sm_err_set(err, rv, "kv: no room for a %zu-byte value "
		    "from %s: %s", vlen, kv_cf_name(cf), sm_strerror(rv)));
	return (0);
}

int
sm_kv_put(struct sm_kv *kv, enum sm_kv_cf cf, const void *key, size_t klen,
    const void *val, size_t vlen, struct sm_err *err)
{
	char *e = NULL;

	rocksdb_put_cf(kv->db, kv->wopts, kv_cf(kv, cf), key, klen, val, vlen,
	    &e);
	if (e != NULL) {
		struct sm_err le;
		int rv;

		sm_err_clear(&le);
		rv = kv_fail(&le, e, "kv: put %zu-byte key into %s", klen,
		    kv_cf_name(cf));
		kv_note_write(kv, rv, &le);
		return (sm_err_set(err, rv, "%s", le.msg));
	}
	kv_note_write(kv, 0, NULL);
	return (0);
}

/* --- batches -------------------------------------------------------------- */

struct sm_kv_batch *
sm_kv_batch_create(void)
{
	struct sm_kv_batch *b = sm_calloc(1, sizeof(*b));

	if (b != NULL)
		sm_buf_init(&b->ops);
	return (b);
}

void
sm_kv_batch_destroy(struct sm_kv_batch *b)
{
	if (b == NULL)
		return;
	sm_buf_fini(&b->ops);
	sm_free(b);
}

void
sm_kv_batch_clear(struct sm_kv_batch *b)
{
	sm_buf_reset(&b->ops);
	b->count = 0;
}

static void
kv_batch_add(struct sm_kv_batch *b, enum kv_op op, enum sm_kv_cf cf,
    const void *a, size_t alen, const void *bb, size_t blen)
{
	struct kv_rec r = { .op = (uint8_t)op, .cf = (uint8_t)cf,
		.alen = alen, .blen = blen };

	SM_ASSERT((unsigned)cf < SM_KV_NCF);
	/* WriteBatch refuses keys and values of 4 GiB or more, and the C
	 * API drops that status: callers bound sizes far below. */
	SM_ASSERT(alen <= UINT32_MAX && blen <= UINT32_MAX);
	SM_ASSERT(b->count < UINT32_MAX);
	sm_buf_append(&b->ops, &r, sizeof(r));
	sm_buf_append(&b->ops, a, alen);
	sm_buf_append(&b->ops, bb, blen);
	if (sm_buf_error(&b->ops) == 0)
		b->count++;
}

void
sm_kv_batch_put(struct sm_kv_batch *b, enum sm_kv_cf cf, const void *key,
    size_t klen, const void *val, size_t vlen)
{
	kv_batch_add(b, KV_OP_PUT, cf, key, klen, val, vlen);
}

void
sm_kv_batch_delete(struct sm_kv_batch *b, enum sm_kv_cf cf, const void *key,
    size_t klen)
{
	kv_batch_add(b, KV_OP_DELETE, cf, key, klen, NULL, 0);
}

void
sm_kv_batch_delete_range(struct sm_kv_batch *b, enum sm_kv_cf cf,
    const void *begin, size_t blen, const void *end, size_t elen)
{
	/* [begin, end) with end <= begin is empty: nothing to delete
	 * (bytewise, RocksDB's default comparator). */
	if (sm_bytes_cmp(begin, blen, end, elen) >= 0)
		return;
	kv_batch_add(b, KV_OP_DELETE_RANGE, cf, begin, blen, end, elen);
}

size_t
sm_kv_batch_bytes(const struct sm_kv_batch *b)
{
	return (b->ops.len);
}

uint32_t
sm_kv_batch_count(const struct sm_kv_batch *b)
{
	return (b->count);
}

/* Replay the op log into a RocksDB write batch (of the spill family's
 * ops only when `spill_only`, asserted). */
static void
kv_batch_fill(struct sm_kv *kv, const struct sm_kv_batch *b,
    rocksdb_writebatch_t *wb, bool spill_only)
{
	size_t off = 0;

	while (off < b->ops.len) {
		rocksdb_column_family_handle_t *cf;
		const char *a, *bb;
		struct kv_rec r;

		SM_ASSERT(b->ops.len - off >= sizeof(r));
		memcpy(&r, b->ops.b + off, sizeof(r));
		off += sizeof(r);
		SM_ASSERT(b->ops.len - off >= r.alen + r.blen);
		a = b->ops.b + off;
		bb = a + r.alen;
		off += r.alen + r.blen;
		SM_ASSERT(!spill_only || r.cf == SM_KV_SPILL);
		cf = kv_cf(kv, (enum sm_kv_cf)r.cf);
		switch (r.op) {
		case KV_OP_PUT:
			rocksdb_writebatch_put_cf(wb, cf, a, r.alen, bb,
			    r.blen);
			break;
		case KV_OP_DELETE:
			rocksdb_writebatch_delete_cf(wb, cf, a, r.alen);
			break;
		case KV_OP_DELETE_RANGE:
			rocksdb_writebatch_delete_range_cf(wb, cf, a, r.alen,
			    bb, r.blen);
			break;
		default:
			SM_ASSERT(!"unknown batch op");
		}
	}
	SM_ASSERT(off == b->ops.len);
	SM_ASSERT((uint32_t)rocksdb_writebatch_count(wb) == b->count);
}

static int
kv_write(struct sm_kv *kv, struct sm_kv_batch *b,
    const rocksdb_writeoptions_t *wo, struct sm_err *err)
{
	rocksdb_writebatch_t *wb;
	char *e = NULL;
	int rv;

	if ((rv = sm_buf_error(&b->ops)) != 0)
		return (sm_err_set(err, rv, "kv: the batch failed while being "
		    "built (%s after %" PRIu32 " ops); nothing was written",
		    sm_strerror(rv), b->count));
	wb = rocksdb_writebatch_create();
	kv_batch_fill(kv, b, wb, wo == kv->wopts_nowal);
	rocksdb_write(kv->db, wo, wb, &e);
	rocksdb_writebatch_destroy(wb);
	if (e != NULL) {
		struct sm_err le;

		sm_err_clear(&le);
		rv = kv_fail(&le, e, "kv: write batch of %" PRIu32 " ops "
		    "(%zu bytes)", b->count, b->ops.len);
		kv_note_write(kv, rv, &le);
		return (sm_err_set(err, rv, "%s", le.msg));
	}
	kv_note_write(kv, 0, NULL);
	return (0);
}

int
sm_kv_write(struct sm_kv *kv, struct sm_kv_batch *b, bool force_sync,
    struct sm_err *err)
{
	return (kv_write(kv, b, force_sync ? kv->wopts_sync : kv->wopts, err));
}

int
sm_kv_write_unlogged(struct sm_kv *kv, struct sm_kv_batch *b,
    struct sm_err *err)
{
	return (kv_write(kv, b, kv->wopts_nowal, err));
}

/* --- iteration ------------------------------------------------------------ */

struct sm_kv_iter *
sm_kv_iter_create(struct sm_kv *kv, enum sm_kv_cf cf)
{
	struct sm_kv_iter *it = sm_calloc(1, sizeof(*it));

	if (it == NULL)
		return (NULL);
	it->kv = kv;
	it->snap = rocksdb_create_snapshot(kv->db);
	it->ropts = rocksdb_readoptions_create();
	rocksdb_readoptions_set_verify_checksums(it->ropts, 1);
	/* Scans (replay, a cut reading spilled buckets back, index scans)
	 * read each block once: they must not evict what point reads
	 * cache, nor grow the cache at a cut's peak (kv.h). */
	rocksdb_readoptions_set_fill_cache(it->ropts, 0);
	rocksdb_readoptions_set_snapshot(it->ropts, it->snap);
	it->it = rocksdb_create_iterator_cf(kv->db, it->ropts, kv_cf(kv, cf));
	__atomic_add_fetch(&kv->niters, 1, __ATOMIC_ACQ_REL);
	return (it);
}

void
sm_kv_iter_destroy(struct sm_kv_iter *it)
{
	int left;

	if (it == NULL)
		return;
	/* The iterator reads through the options and the snapshot. */
	rocksdb_iter_destroy(it->it);
	rocksdb_release_snapshot(it->kv->db, it->snap);
	rocksdb_readoptions_destroy(it->ropts);
	left = __atomic_sub_fetch(&it->kv->niters, 1, __ATOMIC_ACQ_REL);
	SM_ASSERT(left >= 0);
	sm_free(it);
}

void
sm_kv_iter_seek_first(struct sm_kv_iter *it)
{
	rocksdb_iter_seek_to_first(it->it);
}

void
sm_kv_iter_seek(struct sm_kv_iter *it, const void *key, size_t klen)
{
	rocksdb_iter_seek(it->it, key, klen);
}

bool
sm_kv_iter_valid(const struct sm_kv_iter *it)
{
	return (rocksdb_iter_valid(it->it) != 0);
}

void
sm_kv_iter_next(struct sm_kv_iter *it)
{
	SM_ASSERT(rocksdb_iter_valid(it->it));
	rocksdb_iter_next(it->it);
}

const void *
sm_kv_iter_key(const struct sm_kv_iter *it, size_t *klen)
{
	SM_ASSERT(rocksdb_iter_valid(it->it));
	return (rocksdb_iter_key(it->it, klen));
}

const void *
sm_kv_iter_value(const struct sm_kv_iter *it, size_t *vlen)
{
	SM_ASSERT(rocksdb_iter_valid(it->it));
	return (rocksdb_iter_value(it->it, vlen));
}

int
sm_kv_iter_status(const struct sm_kv_iter *it, struct sm_err *err)
{
	char *e = NULL;

	rocksdb_iter_get_error(it->it, &e);
	if (e != NULL)
		return (kv_fail(err, e, "kv: iterate"));
	return (0);
}

/* --- maintenance ---------------------------------------------------------- */

int
sm_kv_flush(struct sm_kv *kv, struct sm_err *err)
{
	rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
	char *e = NULL;
	int rv = 0;

	rocksdb_flushoptions_set_wait(fo, 1);
	for (int cf = 0; cf < SM_KV_NCF; cf++) {
		rocksdb_flush_cf(kv->db, fo, kv_cf(kv, (enum sm_kv_cf)cf), &e);
		if (e != NULL) {
			rv = kv_fail(err, e, "kv: flush %s",
			    kv_cf_name((enum sm_kv_cf)cf));
			break;
		}
	}
	rocksdb_flushoptions_destroy(fo);
	return (rv);
}

static uint64_t
kv_bg_errors(struct sm_kv *kv)
{
	uint64_t n = 0;

	if (rocksdb_property_int(kv->db, "rocksdb.background-errors", &n) != 0)
		n = 0;
	return (n);
}

/*
 * The 7.8 C API drops CompactRange's status.  A failed compaction bumps
 * the background error counter; then a flush of the same family returns
 * the error that stopped the database (a no-op flush otherwise: the
 * compaction already flushed the range), which gives the real code and
 * text.
 */
static int
kv_compact_failed(struct sm_kv *kv, enum sm_kv_cf cf, uint64_t nerr,
    struct sm_err *err)
{
	rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
	char *e = NULL;

	rocksdb_flushoptions_set_wait(fo, 1);
	rocksdb_flush_cf(kv->db, fo, kv_cf(kv, cf), &e);
	rocksdb_flushoptions_destroy(fo);
	if (e != NULL)
		return (kv_fail(err, e, "kv: compact %s", kv_cf_name(cf)));
	return (sm_err_set(err, SM_EIO, "kv: compact %s: failed in the "
	    "background (%" PRIu64 " new background errors; see %s/LOG)",
	    kv_cf_name(cf), nerr, kv->path));
}

int
sm_kv_compact(struct sm_kv *kv, enum sm_kv_cf cf, const void *begin,
    size_t blen, const void *end, size_t elen, struct sm_err *err)
{
	rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
	uint64_t before = kv_bg_errors(kv), after;

	/* Rewrite the bottommost level too, so range-deleted data really
	 * leaves the disk (kIfHaveCompactionFilter, the default, skips it);
	 * don't block automatic compactions meanwhile. */
	rocksdb_compactoptions_set_bottommost_level_compaction(co,
	    KV_BOTTOMMOST_FORCE_OPTIMIZED);
	rocksdb_compactoptions_set_exclusive_manual_compaction(co, 0);
	rocksdb_compact_range_cf_opt(kv->db, kv_cf(kv, cf), co, begin,
	    begin != NULL ? blen : 0, end, end != NULL ? elen : 0);
	rocksdb_compactoptions_destroy(co);
	if ((after = kv_bg_errors(kv)) > before)
		return (kv_compact_failed(kv, cf, after - before, err));
	return (0);
}

int
sm_kv_property(struct sm_kv *kv, enum sm_kv_cf cf, const char *name,
    uint64_t *out)
{
	*out = 0;
	if (rocksdb_property_int_cf(kv->db, kv_cf(kv, cf), name, out) != 0) {
		*out = 0;
		return (SM_ENOTFOUND);
	}
	return (0);
}

void
sm_kv_memory(struct sm_kv *kv, struct sm_kv_mem *m)
{
	uint64_t v;

	memset(m, 0, sizeof(*m));
	for (int cf = 0; cf < SM_KV_NCF; cf++) {
		if (sm_kv_property(kv, (enum sm_kv_cf)cf,
		    "rocksdb.size-all-mem-tables", &v) == 0)
			m->memtables += v;
		if (sm_kv_property(kv, (enum sm_kv_cf)cf,
		    "rocksdb.estimate-table-readers-mem", &v) == 0)
			m->table_readers += v;
	}
	/* One cache shared by every family: read it once. */
	if (sm_kv_property(kv, SM_KV_HEAD, "rocksdb.block-cache-usage",
	    &v) == 0)
		m->block_cache = v;
}

uint64_t
sm_kv_disk_bytes(struct sm_kv *kv)
{
	struct dirent *de;
	uint64_t total = 0;
	DIR *d;

	if ((d = opendir(kv->path)) == NULL)
		return (0);
	while ((de = readdir(d)) != NULL) {
		struct stat st;

		/* Compaction may delete a file between readdir and stat. */
		if (fstatat(dirfd(d), de->d_name, &st,
		    AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (S_ISREG(st.st_mode))
			total += (uint64_t)st.st_size;
	}
	closedir(d);
	return (total);
}

/* --- keys ----------------------------------------------------------------- */

static uint8_t *
kv_key_room(struct sm_key *k, size_t n)
{
	uint8_t *p;

	SM_ASSERT(k->n <= SM_KEY_MAX && n <= SM_KEY_MAX - k->n);
	p = k->b + k->n;
	k->n += n;
	return (p);
}

void
sm_key_str(struct sm_key *k, const char *s, size_t len)
{
	uint8_t *p;

	SM_ASSERT(len <= UINT16_MAX);
	p = kv_key_room(k, 2 + len);
	p[0] = (uint8_t)(len >> 8);
	p[1] = (uint8_t)len;
	if (len != 0)
		memcpy(p + 2, s, len);
}

void
sm_key_u8(struct sm_key *k, uint8_t v)
{
	*kv_key_room(k, 1) = v;
}

void
sm_key_u32(struct sm_key *k, uint32_t v)
{
	sm_put_be32(kv_key_room(k, 4), v);
}

void
sm_key_u64(struct sm_key *k, uint64_t v)
{
	sm_put_be64(kv_key_room(k, 8), v);
}

/* 0 when `need` bytes remain after *off, else SM_ECORRUPT. */
static int
kv_key_need(size_t n, const size_t *off, size_t need)
{
	if (*off > n || n - *off < need)
		return (SM_ECORRUPT);
	return (0);
}

int
sm_key_get_str(const uint8_t *k, size_t n, size_t *off, const char **s,
    size_t *len)
{
	size_t l;

	if (kv_key_need(n, off, 2) != 0)
		return (SM_ECORRUPT);
	l = (size_t)k[*off] << 8 | k[*off + 1];
	if (kv_key_need(n, off, 2 + l) != 0)
		return (SM_ECORRUPT);
	*s = (const char *)k + *off + 2;
	*len = l;
	*off += 2 + l;
	return (0);
}

int
sm_key_get_u8(const uint8_t *k, size_t n, size_t *off, uint8_t *v)
{
	if (kv_key_need(n, off, 1) != 0)
		return (SM_ECORRUPT);
	*v = k[*off];
	*off += 1;
	return (0);
}

int
sm_key_get_u32(const uint8_t *k, size_t n, size_t *off, uint32_t *v)
{
	if (kv_key_need(n, off, 4) != 0)
		return (SM_ECORRUPT);
	*v = sm_get_be32(k + *off);
	*off += 4;
	return (0);
}

int
sm_key_get_u64(const uint8_t *k, size_t n, size_t *off, uint64_t *v)
{
	if (kv_key_need(n, off, 8) != 0)
		return (SM_ECORRUPT);
	*v = sm_get_be64(k + *off);
	*off += 8;
	return (0);
}
