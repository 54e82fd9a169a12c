/*
 * rwqueue.h -- the persistent FIFO under remote-write (remote_write.h): a
 * directory of append-only segment files and a commit file.
 *
 * Files, in <dir> (remote-write uses <data.dir>/remote-write):
 *   LOCK                 flock()ed while open: one process per queue;
 *   NNNNNNNNNNNNNNNN.wal the records: a segment log (common/seglog.h,
 *                        its framing and checks);
 *   commit               two 64-byte slots written alternately, each
 *                          u32 magic "RWQC" | u64 gen | u64 seq | u64 off |
 *                          u32 flags | u32 crc (of the 32 bytes before)
 *                        the slot with the highest valid gen wins, so a
 *                        torn slot write falls back to the one before.
 *                        (seq, off) is the first record not yet sent or
 *                        dropped; flags bit 0 ("in flight") says that
 *                        record may have reached the receiver.
 *
 * Open: segments below the committed seq are deleted (fully sent; a crash
 * came between the commit and the unlink).  Every record from the commit
 * on is read and checked (length within the file and <= RWQ_MAX_RECORD,
 * check); at the first bad one the segment is truncated there (a torn
 * append: crash or power loss in the middle of a write), the cut bytes
 * are reported in `corrupt_bytes`, and the scan goes on with the next
 * segment.  Appends then go to a new segment.  Never aborts on bad data.
 * A queue an older version left (<seq>.seg files, another framing) is
 * first copied into the segment log from its commit point (rwqueue.c,
 * docs/architecture.md "On-disk formats").
 *
 * Durability: appends and commits are plain write()s into the page cache,
 * no fsync per record: they survive the process being killed (SIGKILL,
 * OOM, abort) because the kernel has them once rwq_append returns.  A
 * segment is fdatasync()ed when it is full and a new one starts, and the
 * live segment and the commit file on rwq_close.  A machine crash or power
 * loss can therefore lose the unsynced tail of the live segment (found by
 * the check at the next open and truncated) and roll the commit back to an
 * earlier point (records re-sent: at-least-once).
 *
 * Bounds: `max_bytes` (records' bytes, headers included, not yet
 * committed) and `max_entries`; an append that does not fit is refused
 * with SM_ELIMIT.  Fully committed segments are unlinked as the read
 * position leaves them, so the disk holds at most about max_bytes plus
 * one segment (`seg_bytes`; a record larger than that gets a segment of
 * its own).
 *
 * Locking: one mutex; rwq_append, rwq_stats from any thread.  rwq_peek,
 * rwq_mark and rwq_commit are for one consumer thread.  Errors: SM_EIO
 * (with errno logged), SM_ENOMEM, SM_ELIMIT, SM_ENOTFOUND (empty).
 */
#ifndef DIST_RWQUEUE_H
#define DIST_RWQUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/sm.h"

#define RWQ_MAX_RECORD (1u << 30)

struct rwq_config {
	const char *dir;          /* created when missing (one level) */
	uint64_t max_bytes;
	uint64_t max_entries;
	uint64_t seg_bytes;       /* rotate after this many bytes */
};

struct rwq_open_info {
	bool head_in_flight;      /* the first record was marked (rwq_mark) */
	uint64_t corrupt_bytes;   /* cut off torn / corrupt tails */
	uint64_t corrupt_segments;
};

struct rwq;

int rwq_open(const struct rwq_config *cfg, struct rwq **out,
    struct rwq_open_info *info, struct sm_err *err);
/* fsync, close, free.  NULL is a no-op. */
void rwq_close(struct rwq *q);

/* Append one record, the concatenation of iov[0..niov). */
int rwq_append(struct rwq *q, const struct iovec *iov, int niov);

/*
 * The first record not yet committed, as a sm_malloc()ed copy (*p, *n;
 * the caller frees).  SM_ENOTFOUND when there is none.  A record that
 * fails its CRC here (the disk changed under us) is skipped with the rest
 * of its segment, logged, counted in *skipped_bytes, and the next one is
 * returned.
 */
int rwq_peek(struct rwq *q, void **p, size_t *n, uint64_t *skipped_bytes);

/* Persist "the peeked record may be in flight" (true) or clear it. */
int rwq_mark(struct rwq *q, bool in_flight);

/* The peeked record is done (sent or dropped): advance and persist. */
int rwq_commit(struct rwq *q);

/* Records and bytes not yet committed. */
void rwq_stats(struct rwq *q, uint64_t *n, uint64_t *bytes);

#endif /* DIST_RWQUEUE_H */
