/*
 * headlog.h -- the head log: every write an ingester acknowledges,
 * appended to segment files under <data.dir>/headlog until the block cut
 * from its head commits.  Owned by the store (store.h, which keeps the
 * old RocksDB head family only to replay what an older version left).
 *
 * Why files and not RocksDB.  In the head column family every
 * record was copied into a memtable, flushed with LZ4, compacted, and
 * then deleted within the hour: perf of B1 put RocksDB's put, flush and
 * LZ4 at ~11% of ingest CPU, and B5 held 3-7 MB of head memtables.  A
 * record here is one write() at the end of a file.
 *
 * Files: a segment log (common/seglog.h: NNNNNNNNNNNNNNNN.wal files of
 * checked records).  Each open starts a new segment, and so does an
 * append that finds the current one past ING_HEADLOG_SEGMENT_BYTES.
 * Segments an older version wrote (NNNNNNNNNNNNNNNN.log, the same header
 * with another check) are replayed first and deleted once dead, never
 * appended to (docs/architecture.md, "On-disk formats").
 *
 * Record body: u8 kind, be16 tenant length, tenant, be64 gen, be64 seq,
 * [rec].  Kind 'W' is a write (rec: the packed smolder.v1.Request as the
 * distributor sent it); kind 'C' cancels the write (tenant, gen, seq),
 * whose apply failed after it was logged (write.c): replay skips it.
 *
 * Durability: an append is one write() under the log's mutex, before the
 * write is applied and acknowledged, so kill -9 keeps it (page cache).
 * With `sync` (-ingester.wal-sync) it returns after an fdatasync that
 * covers it; one fdatasync covers every record written before it (group
 * commit), and a new segment's directory entry is synced before it takes
 * a record.
 *
 * Commit (store.h): a block commit's synced batch records the tenant's
 * committed generation; every record of that tenant with gen <= it is
 * dead.  ing_headlog_committed tells the log, which deletes every segment
 * whose records are all dead (per tenant in it: its largest gen <= the
 * tenant's floor); the current segment is closed first when all of it is
 * dead, so an idle ingester keeps no log on disk.
 *
 * Replay: segments in order; dead and cancelled records are skipped.  A
 * record cut short, or failing its check, at the end of the last segment
 * was in flight at a crash (never acknowledged): the segment is truncated
 * there.  Anywhere else it is corruption: counted, reported, and the rest
 * of that segment is skipped (lengths after it cannot be trusted); the
 * file is never deleted (it is reported at every open until an operator
 * removes it; its records before the damage replay while they live).
 * Each segment is read twice, one at a time: pass 1 gathers the cancels and
 * the live (tenant, gen)s (gen_fn must run before any record of a gen, and
 * a cancel follows its write), pass 2 applies the writes.  Reading twice
 * was chosen over holding the whole log in memory: it can be gigabytes.
 *
 * Errors: a failed append (ENOSPC, EIO) is undone (the segment truncated
 * to where the record began; if that fails too, the next append starts a
 * new segment) and returned as SM_EIO naming the cause.  The log is then
 * not writable (ing_headlog_writable: /ready and the write path refuse)
 * until a probe passes: for ENOSPC, free space on its file system again;
 * for anything else, a second later (the next append tries again).
 *
 * Locking: thread-safe.  `mu` guards the segments' bookkeeping (which
 * tenants and gens each holds) and the floors, and is held around each
 * append so a segment is never deleted between taking a record and
 * recording it; the group commit's fdatasync runs outside it (the segment
 * log's own locks, taken after `mu`).
 */
#ifndef ING_HEADLOG_H
#define ING_HEADLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sm.h"

#define ING_HEADLOG_SEGMENT_BYTES ((uint64_t)64 << 20)

struct ing_headlog;

/* Open (creating) the log in `dir`.  0, SM_EIO, SM_ENOMEM. */
int ing_headlog_open(const char *dir, bool sync, struct ing_headlog **out,
    struct sm_err *err);
void ing_headlog_close(struct ing_headlog *l);

/*
 * Inspect only (smolder-admin verify): from now on nothing in the
 * directory changes -- replay neither cuts a torn tail (it is reported)
 * nor deletes dead segments, and appends are refused.  Call before replay.
 */
void ing_headlog_inspect(struct ing_headlog *l);

/* Set tenant's committed generation as read at open (before replay). */
int ing_headlog_floor(struct ing_headlog *l, const char *tenant,
    uint64_t gen);

/*
 * Replay every live record: first gen_fn(arg, tenant, gen) once for each
 * (tenant, gen) that has one, then fn(arg, tenant, gen, seq, rec, n) for
 * each, in the order they were written.  *max_gen / *max_seq are raised
 * to the largest seen (dead records included); *corrupt counts records
 * skipped as corrupt.  A callback's non-zero return stops the replay with
 * that code.  Call once, after the floors and before any append.
 */
int ing_headlog_replay(struct ing_headlog *l,
    int (*gen_fn)(void *arg, const char *tenant, uint64_t gen),
    int (*fn)(void *arg, const char *tenant, uint64_t gen, uint64_t seq,
    const uint8_t *rec, size_t n), void *arg, uint64_t *max_gen,
    uint64_t *max_seq, uint64_t *corrupt, struct sm_err *err);

/* Append a write record, durably (above).  0, SM_EIO, SM_ENOMEM. */
int ing_headlog_append(struct ing_headlog *l, const char *tenant,
    uint64_t gen, uint64_t seq, const void *rec, size_t n,
    struct sm_err *err);

/* Append a cancel of the write (tenant, gen, seq). */
int ing_headlog_cancel(struct ing_headlog *l, const char *tenant,
    uint64_t gen, uint64_t seq, struct sm_err *err);

/* The tenant's records up to gen are dead (its commit is durable):
 * delete the segments that hold nothing else. */
void ing_headlog_committed(struct ing_headlog *l, const char *tenant,
    uint64_t gen);

/* False while appends are refused (above), with the cause in why. */
bool ing_headlog_writable(struct ing_headlog *l, char *why, size_t whylen);

/* Bytes in the log's segments. */
uint64_t ing_headlog_bytes(struct ing_headlog *l);

#endif /* ING_HEADLOG_H */
