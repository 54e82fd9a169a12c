/*
 * store.h -- where an ingester's data lives on disk: the head log's
 * segment files under <data.dir>/headlog (headlog.h) and one RocksDB
 * (common/kv.h) under <data.dir>/rocksdb holding the blocks.
 * ingester/block.h owns the block format; this file owns keys.
 *
 * Keys (big-endian, length-prefixed tenant first, so byte order is logical
 * order and one tenant's keys never interleave with another's):
 *
 *   column family  key                                      value
 *   head           str(tenant) u64 gen  u64 seq             log record
 *                                                           (legacy)
 *   index          str(tenant) u64 id   u8 'M'              block meta
 *   index          str(tenant) u64 id   u8 'I'              block index
 *   index          str(tenant) u64 id   u8 'Z'              tombstone (empty)
 *   blocks         str(tenant) u64 id   u8 'S'              block symbols
 *   blocks         str(tenant) u64 id   u8 'T'              block tree
 *   blocks         str(tenant) u64 id   u8 'D' u32 series   block data
 *   blocks         str(tenant) u64 id   u8 'P'              block spans
 *   blocks         str(tenant) u64 id   u8 'X'              block profiles
 *   spill          str(tenant) u64 gen  u8 'B' u32 series u64 t
 *                                                           spilled bucket
 *   spill          str(tenant) u64 gen  u8 'C' u32 chunk    spilled profile
 *                                                           records
 *   index          str("") u8 'R'                           retention floor
 *   index          str("") u8 'F' str(tenant)               tenant's floor
 *   index          str("") u8 'L' str(tenant)               u64 committed
 *                                                           gen (head log)
 *   index          str("") u8 'U' str(tenant) u64 id        ship record
 *   index          str("") u8 'N'                           incarnation
 *                                                           (16 bytes)
 *   index          str("") u8 'G' str(tenant)               local floor
 *                                                           (be64 ms)
 *   index          str("") u8 'W'                           witness record
 *                                                           (witness.h)
 *   index          str("") u8 'E'                           left: when a
 *                                                           leave asked for
 *                                                           by POST
 *                                                           /ingester/
 *                                                           shutdown
 *                                                           completed
 *                                                           (be64 ms)
 *
 * str() is a u16 length and the bytes.  `gen` is the generation of the
 * head a write went to; a block's id is the generation of the head it was
 * cut from.  `seq` orders writes within the ingester.
 *
 * The head log is headlog.h's segment files.  The head column family
 * held it before (its memtables, flushes and compactions cost ~11% of
 * ingest CPU); what an older version left there is replayed
 * first, in key order, and deleted by the commits as before.  Its record:
 * u8 'H', u8 version (1), be32 checksum (low 32 bits of XXH3 of the
 * rest), then the packed smolder.v1.Request exactly as the distributor
 * sent it.
 *
 * Spilled bucket (head.h, "Spilled buckets"): the packed pairs of one
 * sealed bucket of head `gen` (set.h, "Packed buckets": exactly the bytes
 * the head held), keyed by the series' index in the head and the bucket
 * start (t with its sign bit flipped, so keys sort by t).  They are
 * derived data: written without a sync, and never read by a process that
 * did not write them (every head of a process has a gen above all gens
 * on disk at its open).  So they have a column family of their own, the
 * spill family (common/kv.h): written without the WAL, emptied at every
 * open (nothing a crash left needs finding), with 1 MiB memtables where
 * the blocks family's are -ingester.rocksdb-write-buffer-bytes (8 MiB):
 * they went through the blocks family's before, and its memtable was a
 * fifth of B5's RSS.  They are not in the log's range: the
 * block commit drops the log while queries that took the head before the
 * cut may still read them, so a head's spilled buckets are dropped when its
 * last reference goes (ing_store_spill_drop, a range delete).  Versions
 * before the spill family wrote kinds 'B' and 'C' into the blocks
 * family: the replay's ing_store_uncommitted_drop still deletes them
 * there, and a committed block's range delete takes any under it.
 *
 * Spilled profile records (head.h, "Spilled buckets"): chunk k holds the
 * head's individual-profile records (profiles.h) that the k-th spill pass
 * took, as the in-memory structs (40 bytes each, host byte order: only
 * the process that wrote them reads them, as above); a read checks that
 * the length is a whole number of records.  Same family and lifetime as
 * the spilled buckets: ing_store_spill_drop deletes kinds 'B' and 'C' of
 * the gen in one range, [gen 'B', gen 'D').
 *
 * A block is committed in ONE synced batch that writes all its parts and
 * the tenant's committed generation 'L' (= the block's id; every log
 * record of the tenant with gen <= it is dead: replay skips it, and
 * headlog.h deletes the segments holding nothing else once the batch is
 * durable), and deletes the legacy log range [tenant|0|0,
 * tenant|gen+1|0): after a crash either the block exists and its log is
 * dead, or neither changed.
 * Written ahead: a cut's data parts 'D' (most of a block) go first, in
 * unsynced batches of about ING_STORE_AHEAD_BYTES, and the commit batch
 * carries the rest; until it lands they are parts of no block (nothing
 * reads 'D' without the block's meta).  A crash in between leaves them
 * under a gen whose head log is still there, and the replay drops
 * [gen 'B', gen 'E') of every gen it finds in the log
 * (ing_store_uncommitted_drop): a gen with log records has no committed
 * block, since the commit deletes them.  A failed commit is retried with
 * the same gen and series order, so its parts are overwritten.  Why
 * (B9): one batch of the whole block was copied three times
 * (our batch, RocksDB's WriteBatch, the memtable) at the cut's peak.
 * A tier block (block.h, "Tier blocks"; built by compact.c from blocks,
 * not from a head) is written by ing_store_block_put: the same one synced
 * batch of its parts, and never a deletion of the head log (its id is a
 * fresh generation, not a head's, so the range below it may hold the log
 * of heads not yet cut).  Its id shares the key space of raw blocks (ids
 * are unique per ingester); scans, reads, retention and deletes treat it
 * like any block.
 *
 * A merged raw block (block.h, "Merged raw blocks") is written by
 * ing_store_block_merge: one synced batch of its parts AND a tombstone
 * 'Z' for every input block.  A block with a tombstone is merged away:
 * the scan at open hands it over with `merged` set (replay.c queues it for
 * deletion instead of serving it), so after a crash either the inputs
 * alone or the merged block alone is served.  The tombstone sorts after
 * its block's 'M' and 'I' and is removed with them by
 * ing_store_block_delete (a range delete over tenant|id).
 *
 * Corruption: a failed checksum, a RocksDB "Corruption" status or an
 * undecodable part is logged with its key, counted in
 * smolder_ingester_corruptions_total{part}, and returned as SM_ECORRUPT
 * naming the tenant, block and part; it never stops other blocks from
 * being read.  A corrupt log record is skipped at replay with the same
 * reporting (its write is lost; RocksDB's own WAL checksums make this a
 * disk fault, not a crash effect).
 *
 * Locking: thread-safe (RocksDB and the cache lock themselves).
 */
#ifndef ING_STORE_H
#define ING_STORE_H

#include "common/kv.h"

#include "block.h"
#include "cache.h"

struct ing_store;

/* Open the store of data directory `dir` (its rocksdb and headlog);
 * kvo->sync also syncs the head log (headlog.h). */
int ing_store_open(const char *dir, const struct sm_kv_opts *kvo,
    size_t cache_bytes, struct ing_store **out, struct sm_err *err);
void ing_store_close(struct ing_store *s);

/* Append one log record durably (headlog.h: kill -9 keeps it; synced per
 * -ingester.wal-sync). */
int ing_store_log_append(struct ing_store *s, const char *tenant,
    uint64_t gen, uint64_t seq, const void *rec, size_t n,
    struct sm_err *err);

/* Cancel one log record (a write whose apply failed after logging):
 * replay skips it. */
int ing_store_log_delete(struct ing_store *s, const char *tenant,
    uint64_t gen, uint64_t seq, struct sm_err *err);

/*
 * Replay the head log, the legacy head family first: gen_fn(arg, tenant,
 * gen) (when not NULL) before the first record of each (tenant, gen), then
 * fn(arg, tenant, gen, seq, rec, n) for every live record (rec is the
 * packed Request).  *max_gen / *max_seq get the largest values seen.
 * Corrupt records are reported and skipped (*corrupt counts them).  A
 * callback's non-zero return stops the replay with that code.  Once per
 * open, before any append.
 */
/* Open the head log to inspect only (headlog.h, ing_headlog_inspect):
 * smolder-admin verify changes nothing.  Before ing_store_log_replay. */
void ing_store_log_inspect(struct ing_store *s);

int ing_store_log_replay(struct ing_store *s,
    int (*gen_fn)(void *arg, const char *tenant, uint64_t gen),
    int (*fn)(void *arg, const char *tenant, uint64_t gen, uint64_t seq,
    const uint8_t *rec, size_t n), void *arg, uint64_t *max_gen,
    uint64_t *max_seq, uint64_t *corrupt, struct sm_err *err);

/* Can writes be logged?  False while RocksDB or the head log refuses
 * them (a full disk, an I/O error), with the cause in why. */
bool ing_store_writable(struct ing_store *s, char *why, size_t whylen);

/* Bytes in the head log's segments. */
uint64_t ing_store_log_bytes(struct ing_store *s);

/*
 * Every stored block's meta: fn(arg, tenant, meta).  A damaged or missing
 * meta is reported and rebuilt from the copy in the block's index; when
 * the index is damaged too, the block is handed over with `broken` set and
 * an unknown range (INT64_MIN..INT64_MAX), so every query of its tenant
 * fails with SM_ECORRUPT naming it rather than silently missing its data.
 */
int ing_store_blocks_scan(struct ing_store *s,
    int (*fn)(void *arg, const char *tenant, const struct ing_block_meta *m),
    void *arg, struct sm_err *err);

/* Commit an encoded raw block (tier_ms 0) for `tenant` and drop the head
 * log range up to and including its generation. */
int ing_store_block_commit(struct ing_store *s, const char *tenant,
    const struct ing_block_enc *e, struct sm_err *err);

/*
 * Reclaim the space of what cuts made dead: flushing every column
 * family's memtable lets RocksDB delete the WAL files that held the
 * heads' spilled buckets and the blocks' parts (a WAL file goes only once
 * no memtable needs it).  Once per cut round (write.c), not per block:
 * every flush makes an SST per family.  0 or the flush's error (the space
 * comes back at a later flush).
 */
int ing_store_reclaim(struct ing_store *s, struct sm_err *err);

/*
 * Commit an encoded tier block (tier_ms > 0) for `tenant` in one synced
 * batch, leaving the head log alone (above).  0, SM_EIO, SM_ENOMEM; on
 * failure nothing of it is stored.
 */
int ing_store_block_put(struct ing_store *s, const char *tenant,
    const struct ing_block_enc *e, struct sm_err *err);

/*
 * Commit an encoded merged raw block (tier_ms 0, cover_gen > 0) and a
 * tombstone for each of inputs[0..ninputs) in one synced batch, leaving
 * the head log alone.  0, SM_EIO, SM_ENOMEM; on failure nothing of it is
 * stored.
 */
int ing_store_block_merge(struct ing_store *s, const char *tenant,
    const struct ing_block_enc *e, const uint64_t *inputs, uint32_t ninputs,
    struct sm_err *err);

/*
 * Decoded parts, through the cache.  The returned object is valid until
 * ing_store_release(ent).  SM_ECORRUPT (reported) when the part is damaged.
 */
int ing_store_block_index(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, const struct ing_set **out,
    struct ing_cache_ent **ent, struct sm_err *err);
int ing_store_block_tree(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, const struct ing_block_tree **out,
    struct ing_cache_ent **ent, struct sm_err *err);
void ing_store_release(struct ing_store *s, struct ing_cache_ent *ent);

/* One series' buckets with their pairs, decoded into the arena. */
int ing_store_block_data(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, uint32_t series,
    const struct ing_series *sr, struct sm_arena *a,
    struct ing_bucket **out, struct sm_err *err);

/*
 * A block's span records (spans.h), decoded into a heap array (sm_free);
 * none (*out NULL) when its meta counts none.  Not cached.
 */
int ing_store_block_spans(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, struct ing_span_rec **out, uint32_t *n,
    struct sm_err *err);

/* A block's individual-profile records (profiles.h), sorted; like
 * ing_store_block_spans. */
int ing_store_block_profiles(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, struct ing_prof_rec **out, uint32_t *n,
    struct sm_err *err);

/*
 * Retention (compactor): the floors before which nothing is served, kept
 * under system keys (an empty tenant, never a valid one) in the index
 * family, big-endian int64 values: the default floor ('R', INT64_MIN
 * when never set) and each tenant's own floor ('F' + the tenant; only
 * tenants a RetentionRequest named have one, db.h ing_db_retention).
 * ing_store_floors_put writes the n tenant floors and, when set_default,
 * the default in ONE synced batch.  ing_store_floors_scan calls fn for
 * every tenant floor (SM_ECORRUPT on a malformed one; fn's error stops
 * it).  Deleting a block removes all its parts in one synced batch (range
 * deletes over tenant|id) and compacts that range.
 */
struct ing_store_floor {
	const char *tenant;
	int64_t floor_ms;
};

int ing_store_floor_get(struct ing_store *s, int64_t *floor_ms,
    struct sm_err *err);
int ing_store_floors_put(struct ing_store *s, const struct ing_store_floor *v,
    uint32_t n, bool set_default, int64_t default_ms, struct sm_err *err);
int ing_store_floors_scan(struct ing_store *s,
    int (*fn)(void *arg, const char *tenant, int64_t floor_ms), void *arg,
    struct sm_err *err);
int ing_store_block_delete(struct ing_store *s, const char *tenant,
    uint64_t id, struct sm_err *err);

/*
 * Local floors (db.h, "Local retention"): below a tenant's local floor
 * ('G' + the tenant, be64 ms) this ingester dropped blocks that the
 * store-gateways serve, so its own copy of that range is no longer whole.
 * ing_store_local_floor_put writes one (synced); the scan calls fn for
 * each (SM_ECORRUPT on a malformed one).
 */
int ing_store_local_floor_put(struct ing_store *s, const char *tenant,
    int64_t floor_ms, struct sm_err *err);
int ing_store_local_floors_scan(struct ing_store *s,
    int (*fn)(void *arg, const char *tenant, int64_t floor_ms), void *arg,
    struct sm_err *err);

/* Bytes on disk (every RocksDB file and the head log's segments). */
uint64_t ing_store_disk_bytes(struct ing_store *s);

/* Flush memtables and compact everything (tests, benchmarks, admin). */
int ing_store_compact(struct ing_store *s, struct sm_err *err);

/* The underlying database (smolder-admin). */
struct sm_kv *ing_store_kv(struct ing_store *s);

/* Write RocksDB's memtables out, freeing their memory (the memory bound,
 * db.h ing_db_tick); a no-op when they hold less than 1 MiB. */
int ing_store_flush_memtables(struct ing_store *s, struct sm_err *err);

/*
 * Spilled buckets (above).  ing_store_spill_put adds one to a batch;
 * ing_store_spill_write applies the batch, without the WAL.
 * ing_store_spill_read (through `it`, or an iterator of its own when it is
 * NULL) calls fn(arg, t, bytes, n) for every spilled bucket of (tenant,
 * gen, series)
 * with t0 <= t <= t1, in t order; fn's non-zero return stops it (and is
 * returned).  0, SM_EIO, SM_ENOMEM.
 */
struct ing_store_iter;

void ing_store_spill_put(struct sm_kv_batch *b, const char *tenant,
    uint64_t gen, uint32_t series, int64_t t, const void *v, size_t n);
int ing_store_spill_write(struct ing_store *s, struct sm_kv_batch *b,
    struct sm_err *err);
int ing_store_spill_read(struct ing_store *s, struct ing_store_iter *it,
    const char *tenant, uint64_t gen, uint32_t series, int64_t t0,
    int64_t t1, int (*fn)(void *arg, int64_t t, const uint8_t *v, size_t n),
    void *arg, struct sm_err *err);

/*
 * An iterator over the spill family that many ing_store_spill_read calls
 * share (`it` above; NULL makes one per call): a query or a cut reads one
 * series after another, and each new RocksDB iterator costs a snapshot
 * and a seek through every level's index.  It reads the store as of its
 * creation: the caller makes a new one when what it must see may have
 * been written since (head.h, struct ing_spill_cur).  0 or SM_ENOMEM.
 * One thread at a time.
 */
int ing_store_iter_new(struct ing_store *s, struct ing_store_iter **out,
    struct sm_err *err);
void ing_store_iter_free(struct ing_store_iter *it);
/*
 * Spilled profile records (above): ing_store_recs_put adds chunk `chunk`
 * to a batch; ing_store_recs_read calls fn(arg, bytes, n) for every chunk
 * of (tenant, gen), in chunk order; fn's non-zero return stops it (and is
 * returned).  0, SM_EIO, SM_ENOMEM.
 */
void ing_store_recs_put(struct sm_kv_batch *b, const char *tenant,
    uint64_t gen, uint32_t chunk, const void *v, size_t n);
int ing_store_recs_read(struct ing_store *s, const char *tenant, uint64_t gen,
    int (*fn)(void *arg, const uint8_t *v, size_t n), void *arg,
    struct sm_err *err);
/* Drop every spilled bucket and record chunk of head (tenant, gen);
 * without the WAL. */
int ing_store_spill_drop(struct ing_store *s, const char *tenant, uint64_t gen,
    struct sm_err *err);

/* At replay, for a gen found in the head log (so no block was committed
 * under it): drop any data parts a cut wrote ahead ("Written ahead"
 * above) and what an older version spilled into the blocks family; not
 * synced. */
int ing_store_uncommitted_drop(struct ing_store *s, const char *tenant,
    uint64_t gen, struct sm_err *err);
#define ING_STORE_AHEAD_BYTES ((size_t)4 << 20)

/*
 * Ship records (ingester/ship.h: blocks uploaded to the bucket).  One per
 * block that was shipped, is being shipped, or is a merged block: 16
 * bytes of ULID (all zero: none assigned yet), u8 shipped (0 or 1), be32
 * ninputs, ninputs x be64 gen.  The inputs are the blocks a merged block
 * replaces; ing_store_block_merge writes them in the batch that commits
 * the merged block, so the bucket can learn what it replaces even after
 * the inputs are deleted here.  ing_store_block_delete deletes the
 * record with the block.  Written synced.  The incarnation is 16 random
 * bytes made at the first open of a data directory: a wiped ingester
 * comes back as a new source, so its generations, which start again
 * from 1, never collide in the bucket with the old ones.
 */
struct ing_ship_rec {
	uint8_t ulid[16];
	bool shipped;
	uint64_t *inputs;          /* heap (ing_ship_rec_fini) */
	uint32_t ninputs;
};

/* 0, SM_ENOTFOUND (no record), SM_ECORRUPT, SM_ENOMEM. */
int ing_store_ship_get(struct ing_store *s, const char *tenant, uint64_t id,
    struct ing_ship_rec *r, struct sm_err *err);
int ing_store_ship_put(struct ing_store *s, const char *tenant, uint64_t id,
    const struct ing_ship_rec *r, struct sm_err *err);
void ing_ship_rec_fini(struct ing_ship_rec *r);
/* This data directory's incarnation, made (and stored, synced) at the
 * first call. */
int ing_store_incarnation(struct ing_store *s, uint8_t out[16],
    struct sm_err *err);

/*
 * Every stored value of block `id` exactly as stored (block.h: header,
 * checksum, payload), index family first: fn(arg, kind, series, v, n)
 * with series set for 'D' parts; tombstones are skipped.  Values are
 * borrowed for the call.  fn's non-zero return stops it.
 */
int ing_store_block_parts(struct ing_store *s, const char *tenant,
    uint64_t id, int (*fn)(void *arg, char kind, uint32_t series,
    const uint8_t *v, size_t n), void *arg, struct sm_err *err);

/*
 * A block restored from the bucket (ship.h, ing_ship_restore): its parts,
 * exactly as the block object holds them (each value with its header and
 * checksum, block.h), are written under (tenant, gen) with the ship record
 * r in ONE synced batch, so a crash leaves the block whole or absent.
 * The parts must include 'M' and 'I'.  0, SM_EIO, SM_ENOMEM.
 */
struct ing_store_part {
	char kind;
	uint32_t series;           /* 'D' only */
	const uint8_t *v;
	size_t n;
};

int ing_store_block_import(struct ing_store *s, const char *tenant,
    uint64_t gen, const struct ing_store_part *parts, uint32_t nparts,
    const struct ing_ship_rec *r, struct sm_err *err);

/* The left record ('E' above; ingester.h, "Leaving"): SM_ENOTFOUND
 * when this data directory never left.  Put is synced. */
int ing_store_left_get(struct ing_store *s, int64_t *ms, struct sm_err *err);
int ing_store_left_put(struct ing_store *s, int64_t ms, struct sm_err *err);

/* The witness record (witness.h), packed: SM_ENOTFOUND when none is
 * stored yet.  Put replaces it (a system key, like the incarnation). */
int ing_store_witness_get(struct ing_store *s, struct sm_buf *v,
    struct sm_err *err);
int ing_store_witness_put(struct ing_store *s, const uint8_t *v, size_t n,
    struct sm_err *err);

/* Does the data directory hold nothing yet: no block, no head-log record
 * (a new or wiped disk)? */
bool ing_store_empty(struct ing_store *s);

/*
 * Remote data parts (remote.h): a store-gateway leaves the data parts of
 * the blocks it imports in the bucket and stores a stub under each 'D'
 * key.  A 'D' value that is a stub is handed to fn (set once, before the
 * first read), which replaces it with the part's bytes; its error is the
 * read's.  Without fn a stub is a damaged part.
 */
typedef int (*ing_store_remote_fn)(void *arg, const char *tenant,
    const uint8_t *stub, size_t n, struct sm_buf *out, struct sm_err *err);
void ing_store_set_remote(struct ing_store *s, ing_store_remote_fn fn,
    void *arg);

/* Key builders, shared with smolder-admin. */
void ing_key_head(struct sm_key *k, const char *tenant, uint64_t gen,
    uint64_t seq);
void ing_key_spill(struct sm_key *k, const char *tenant, uint64_t gen,
    uint32_t series, int64_t t);
void ing_key_part(struct sm_key *k, const char *tenant, uint64_t id,
    char kind, uint32_t series);

#endif /* ING_STORE_H */
