/*
 * kv.h -- Smolder's storage engine interface.  RocksDB is behind it;
 * common/kv_rocks.c is the only file that includes <rocksdb/c.h>
 * (docs/style.md §11).  One sm_kv per ingester, under -data.dir.
 *
 * Column families (docs/architecture.md §3), so each can be tuned and dropped on its own:
 *   SM_KV_HEAD    the head log: every acknowledged write, until a block
 *                 holding it is committed (LZ4-compressed by RocksDB);
 *   SM_KV_BLOCKS  immutable block parts, already zstd-compressed by the
 *                 ingester (no RocksDB compression);
 *   SM_KV_INDEX   per-block index and metadata, and system keys
 *                 (no RocksDB compression);
 *   SM_KV_SPILL   transient data only the process that wrote it reads
 *                 (the ingester's spilled buckets): written without the
 *                 WAL (sm_kv_write_unlogged), emptied at every open
 *                 (dropped and created again), memtables of
 *                 opts.spill_buffer_bytes (no RocksDB compression, no
 *                 bloom filter: it is only scanned).
 *
 * Durability: every write to the first three families goes through the
 * WAL (never disabled; manual_wal_flush stays off).  `sync`
 * (-ingester.wal-sync) makes each write fdatasync the WAL: without it a
 * write survives a process crash, with it a power loss.  A write returns only once RocksDB has it.
 *
 * Keys are byte strings compared bytewise (RocksDB's default comparator);
 * the sm_key helpers build big-endian, length-prefixed keys so byte order is
 * logical order and no tenant id is a prefix of another's keys:
 *   u16 len | tenant bytes | ... fixed-width big-endian fields ...
 *
 * Errors: RocksDB's errptr strings become codes, with the RocksDB text in
 * err: "Corruption" -> SM_ECORRUPT; "Busy", "Incomplete", "TimedOut",
 * "TryAgain" (write stalls) -> SM_EUNAVAIL (503 upstream); "IO error"
 * (ENOSPC included; RocksDB then refuses writes) and anything else ->
 * SM_EIO.  Every read verifies RocksDB's block checksums.
 *
 * Ownership: values returned by sm_kv_get are copied into the caller's
 * buffer.  Iterator keys/values are borrowed until the next move or
 * destroy.  Locking: an sm_kv is thread-safe (RocksDB's guarantee);
 * batches and iterators belong to one thread.
 */
#ifndef SM_KV_H
#define SM_KV_H

#include <stdbool.h>

#include "buf.h"
#include "sm.h"

#include "byteorder.h"   /* sm_put_be32 ...: the values' byte order */

enum sm_kv_cf {
	SM_KV_HEAD = 0,
	SM_KV_BLOCKS = 1,
	SM_KV_INDEX = 2,
	SM_KV_SPILL = 3,
	SM_KV_NCF = 4,
};

struct sm_kv_opts {
	bool sync;                   /* fdatasync the WAL on every write */
	size_t block_cache_bytes;    /* RocksDB LRU cache of SST blocks */
	size_t write_buffer_bytes;   /* memtable size per column family */
	size_t spill_buffer_bytes;   /* ... but SM_KV_SPILL's */
	int max_background_jobs;     /* flush + compaction threads */
};

/* Defaults: no sync, 64 MiB cache, 32 MiB memtables (1 MiB for
 * SM_KV_SPILL), 2 background jobs. */
void sm_kv_opts_default(struct sm_kv_opts *o);

struct sm_kv;
struct sm_kv_batch;
struct sm_kv_iter;

/*
 * Open (creating if missing) the database in directory `path` with the
 * four column families, SM_KV_SPILL empty.  RocksDB's own LOCK makes a
 * second opener fail with SM_EIO.  Returns 0, SM_EIO, SM_ECORRUPT or
 * SM_ENOMEM (message in err).
 */
int sm_kv_open(const char *path, const struct sm_kv_opts *o,
    struct sm_kv **out, struct sm_err *err);

/* Close: waits for background work; NULL is a no-op.  Every iterator
 * must have been destroyed (asserted). */
void sm_kv_close(struct sm_kv *kv);

/* Point read.  0 with the value appended to `val`, SM_ENOTFOUND, or an
 * error code. */
int sm_kv_get(struct sm_kv *kv, enum sm_kv_cf cf, const void *key,
    size_t klen, struct sm_buf *val, struct sm_err *err);

/* A single put, durable per opts.  0 or an error code. */
int sm_kv_put(struct sm_kv *kv, enum sm_kv_cf cf, const void *key,
    size_t klen, const void *val, size_t vlen, struct sm_err *err);

/* --- atomic batches ------------------------------------------------------- */

/* NULL when out of memory. */
struct sm_kv_batch *sm_kv_batch_create(void);
void sm_kv_batch_destroy(struct sm_kv_batch *b);
void sm_kv_batch_clear(struct sm_kv_batch *b);
void sm_kv_batch_put(struct sm_kv_batch *b, enum sm_kv_cf cf,
    const void *key, size_t klen, const void *val, size_t vlen);
void sm_kv_batch_delete(struct sm_kv_batch *b, enum sm_kv_cf cf,
    const void *key, size_t klen);
/* Delete every key in [begin, end); a range with end <= begin is empty and
 * is not recorded. */
void sm_kv_batch_delete_range(struct sm_kv_batch *b, enum sm_kv_cf cf,
    const void *begin, size_t blen, const void *end, size_t elen);
/* Bytes of the batch's representation. */
size_t sm_kv_batch_bytes(const struct sm_kv_batch *b);
uint32_t sm_kv_batch_count(const struct sm_kv_batch *b);

/*
 * Apply the batch atomically (all or nothing, also across a crash), with
 * the WAL; `force_sync` syncs even when opts.sync is off (block commits).
 * If building the batch ran out of memory, nothing is written and this
 * returns SM_ENOMEM (sm_kv_batch_clear resets that).
 */
int sm_kv_write(struct sm_kv *kv, struct sm_kv_batch *b, bool force_sync,
    struct sm_err *err);

/*
 * Apply a batch of SM_KV_SPILL operations only (asserted) without the
 * WAL: atomic in the running process, and gone after a crash or a close
 * (the family is emptied at the next open anyway).  Codes as sm_kv_write.
 */
int sm_kv_write_unlogged(struct sm_kv *kv, struct sm_kv_batch *b,
    struct sm_err *err);

/*
 * Write health.  A write (put or batch) that fails with an I/O
 * error -- no space left, a failing disk -- marks the store unwritable;
 * RocksDB then refuses every write until it has recovered by itself
 * (its SstFileManager retries every 5 s once the free space reaches the
 * memtable size; see docs/operations.md §5, "Storage failures"), or the file system is
 * below the free-space reserve (sm_kv_set_reserve).  While marked, this
 * probes (at most every 200 ms) with a one-key write to the otherwise
 * unused default column family, so readiness comes back without any
 * client write.  True when writable; else false with the last write
 * error in why (may be NULL).  Any successful write clears the mark.
 */
bool sm_kv_writable(struct sm_kv *kv, char *why, size_t whylen);

/*
 * Free-space reserve (0 = none, the default).  With a reserve set,
 * sm_kv_writable() is also false while the file system holding the store
 * has fewer than `bytes` available (statvfs, read at most every 200 ms),
 * with "no space left on device: ... below the reserve" in why.  Callers
 * gate their own writes on it (the ingester refuses head-log writes,
 * never cuts or deletes, which give space back): refusing before RocksDB
 * itself runs out keeps it out of its background-error state, whose
 * recovery polls every 5 s, so writes come back within 200 ms of space
 * being freed.  RocksDB's own ENOSPC handling stays the second line.
 */
void sm_kv_set_reserve(struct sm_kv *kv, uint64_t bytes);

/* --- iteration ------------------------------------------------------------ */

/* An iterator over a consistent snapshot of `cf`.  NULL on ENOMEM.  What
 * it reads does not enter the block cache (scans read each block once;
 * point reads, sm_kv_get, are what the cache is for). */
struct sm_kv_iter *sm_kv_iter_create(struct sm_kv *kv, enum sm_kv_cf cf);
void sm_kv_iter_destroy(struct sm_kv_iter *it);
void sm_kv_iter_seek_first(struct sm_kv_iter *it);
void sm_kv_iter_seek(struct sm_kv_iter *it, const void *key, size_t klen);
bool sm_kv_iter_valid(const struct sm_kv_iter *it);
void sm_kv_iter_next(struct sm_kv_iter *it);
const void *sm_kv_iter_key(const struct sm_kv_iter *it, size_t *klen);
const void *sm_kv_iter_value(const struct sm_kv_iter *it, size_t *vlen);
/* After the iterator became invalid: 0 if it simply ended, else the error
 * that stopped it (e.g. SM_ECORRUPT). */
int sm_kv_iter_status(const struct sm_kv_iter *it, struct sm_err *err);

/* --- maintenance ---------------------------------------------------------- */

/* Flush every column family's memtable to SST files (waits). */
int sm_kv_flush(struct sm_kv *kv, struct sm_err *err);

/* CompactRange over [begin, end) of `cf` (NULL, 0 = open end). */
int sm_kv_compact(struct sm_kv *kv, enum sm_kv_cf cf, const void *begin,
    size_t blen, const void *end, size_t elen, struct sm_err *err);

/* An integer RocksDB property of `cf` ("rocksdb.total-sst-files-size",
 * "rocksdb.estimate-num-keys", ...).  0 or SM_ENOTFOUND. */
int sm_kv_property(struct sm_kv *kv, enum sm_kv_cf cf, const char *name,
    uint64_t *out);

/*
 * Memory RocksDB holds, from its own counters: memtables (active,
 * immutable and pinned, every family), the block cache's charge and the
 * SST readers' index and filter blocks (max_open_files = -1 keeps them
 * all).  Properties it cannot read are 0.
 */
struct sm_kv_mem {
	uint64_t memtables;
	uint64_t block_cache;
	uint64_t table_readers;
};
void sm_kv_memory(struct sm_kv *kv, struct sm_kv_mem *m);

/* Bytes the database occupies on disk (every file in its directory: SST,
 * WAL, MANIFEST, ...). */
uint64_t sm_kv_disk_bytes(struct sm_kv *kv);

/* --- keys ----------------------------------------------------------------- */

#define SM_KEY_MAX 512

struct sm_key {
	uint8_t b[SM_KEY_MAX];
	size_t n;
};

static inline void sm_key_reset(struct sm_key *k)
{
	k->n = 0;
}

/* Append u16 length + bytes (len <= 65535 and room left, else asserts). */
void sm_key_str(struct sm_key *k, const char *s, size_t len);
void sm_key_u8(struct sm_key *k, uint8_t v);
void sm_key_u32(struct sm_key *k, uint32_t v);
void sm_key_u64(struct sm_key *k, uint64_t v);

/* Readers over a key: each returns 0 or SM_ECORRUPT when the key is too
 * short; *off advances. */
int sm_key_get_str(const uint8_t *k, size_t n, size_t *off, const char **s,
    size_t *len);
int sm_key_get_u8(const uint8_t *k, size_t n, size_t *off, uint8_t *v);
int sm_key_get_u32(const uint8_t *k, size_t n, size_t *off, uint32_t *v);
int sm_key_get_u64(const uint8_t *k, size_t n, size_t *off, uint64_t *v);

#endif /* SM_KV_H */
