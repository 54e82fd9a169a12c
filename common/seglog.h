/*
 * seglog.h -- the segment log: a directory of numbered, append-only files
 * of checked records.  The one implementation under every log Smolder
 * keeps on local disk: the ingester's head log (ingester/headlog.h), the
 * remote-write queue and the distributor's durable hints (both through
 * distributor/rwqueue.h).  What a record means, when it is dead and when
 * its segment may go is the owner's; this module owns the files, the
 * framing, torn-write undo, rotation and syncing.
 *
 * Files, in cfg.dir (created with any missing parents):
 *   NNNNNNNNNNNNNNNN.wal   16 hex digits, increasing; a new segment always
 *                          gets a number above every segment there.
 * A record:
 *   offset  size  field
 *   0       4     len    big-endian, bytes of body (<= SM_SEGLOG_MAX_BODY)
 *   4       4     check  the low 32 bits of sm_hash() (XXH3-64) of the
 *                        four len bytes followed by the body
 *   8       len   body
 * Nothing else is in a file (no header, no padding), so a segment is a
 * concatenation of records and its valid prefix is found by parsing from
 * offset 0: a torn write (a crash in the middle of an append) leaves a
 * tail that fails to parse, which sm_seglog_parse() reports as such.
 *
 * Writing.  One record is one writev() loop at the end of the current
 * segment.  sm_seglog_reserve() picks the segment the next record goes
 * to: the current one, or a new one when there is none, it was sealed,
 * a failed append could not be undone, or the record would take it past
 * cfg.seg_bytes (a record larger than that gets a segment of its own).
 * A new segment's predecessor is fdatasync()ed and closed, and the
 * directory is fsync()ed before the new one takes a record.  A failed
 * append is undone (the file truncated to where the record began) so
 * nothing of it stays; the errno is kept for the owner's probes
 * (sm_seglog_errno).
 *
 * Durability.  An append is in the page cache when it returns: it
 * survives the process being killed.  sm_seglog_sync() makes every record
 * up to a position durable with one fdatasync() for all the appends
 * before it (group commit); it runs outside the owner's lock so appends go
 * on meanwhile.
 *
 * Errors: SM_EIO (the message names the file and strerror), SM_ENOMEM,
 * SM_EINVAL (a record too large), SM_ECORRUPT (a record that fails to
 * parse where a whole one was expected), SM_ENOTFOUND (no such segment).
 *
 * Locking: `mu` guards the writer (descriptor, current segment, its
 * size); `sync_mu` serialises fdatasync.  Every call may come from any
 * thread, but reserve + append of one record must not interleave with
 * another writer's: the owner holds its own lock around the pair (it also
 * keeps its bookkeeping of what each segment holds under that lock).
 * Lock order: owner's lock -> mu; sync_mu -> mu.
 */
#ifndef SM_SEGLOG_H
#define SM_SEGLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "sm.h"

#define SM_SEGLOG_HDR 8
#define SM_SEGLOG_MAX_BODY ((uint32_t)1 << 30)

struct sm_seglog_cfg {
	const char *dir;
	const char *name;        /* in messages: "head log" */
	uint64_t seg_bytes;      /* 0: 64 MiB */
};

/* A place in the log: segment `no`, byte `off` (no 0: none). */
struct sm_seglog_pos {
	uint64_t no;
	uint64_t off;
};

struct sm_seglog;

/* Open (creating) the directory.  0, SM_EIO, SM_ENOMEM. */
int sm_seglog_open(const struct sm_seglog_cfg *cfg, struct sm_seglog **out,
    struct sm_err *err);
/* fdatasync and close the current segment; free.  NULL is a no-op. */
void sm_seglog_close(struct sm_seglog *l);

/* The directory, as opened. */
const char *sm_seglog_dir(const struct sm_seglog *l);
/* The path of segment `no` in buf. */
void sm_seglog_path(const struct sm_seglog *l, uint64_t no, char *buf,
    size_t n);
/* The segment numbers on disk, sorted; *nos is the caller's to free. */
int sm_seglog_list(struct sm_seglog *l, uint64_t **nos, size_t *n,
    struct sm_err *err);
/*
 * The numbers of the files NNNNNNNNNNNNNNNN<suffix> in dir, sorted; *nos
 * is the caller's to free.  For owners that also read files of an older
 * format beside their segments.
 */
int sm_seglog_numbers(const char *dir, const char *suffix, uint64_t **nos,
    size_t *n, struct sm_err *err);
/* New segments get numbers >= no (an owner's older files sort first). */
void sm_seglog_number_from(struct sm_seglog *l, uint64_t no);

/*
 * The segment a record of `body` bytes will go to (above), created if
 * need be; its number in *no.  0, SM_EIO, SM_ENOMEM, SM_EINVAL.
 */
int sm_seglog_reserve(struct sm_seglog *l, size_t body, uint64_t *no,
    struct sm_err *err);
/*
 * Append one record, the concatenation of iov[0..niov), to the segment
 * the last reserve named; *end (may be NULL) is the position after it.
 * On failure nothing of it stays (above).  0, SM_EIO, SM_EINVAL.
 */
int sm_seglog_append(struct sm_seglog *l, const struct iovec *iov, int niov,
    struct sm_seglog_pos *end, struct sm_err *err);
/* Every record before `upto` is on disk (group commit).  0, SM_EIO. */
int sm_seglog_sync(struct sm_seglog *l, const struct sm_seglog_pos *upto,
    struct sm_err *err);
/* Close the current segment (synced); the next reserve starts a new one. */
void sm_seglog_seal(struct sm_seglog *l);
/* The current segment and its size (no 0: none open). */
struct sm_seglog_pos sm_seglog_tail(struct sm_seglog *l);
/* errno of the last failed write, create or sync (0: none). */
int sm_seglog_errno(struct sm_seglog *l);

/* Delete segment `no` (closed first if current).  ENOENT is success. */
int sm_seglog_remove(struct sm_seglog *l, uint64_t no, struct sm_err *err);
/* Cut segment `no` at `off` (a torn tail).  0, SM_EIO. */
int sm_seglog_truncate(struct sm_seglog *l, uint64_t no, uint64_t off,
    struct sm_err *err);

/*
 * The record at p[0..avail): its whole length (header included), with
 * its body in *body / *n; 0 when the bytes are not a whole valid record
 * (cut short, a length past avail, a failed check).
 */
size_t sm_seglog_parse(const uint8_t *p, size_t avail, const uint8_t **body,
    size_t *n);
/* Segment `no` read whole into *buf (sm_malloc()ed, *len bytes). */
int sm_seglog_read(struct sm_seglog *l, uint64_t no, uint8_t **buf,
    size_t *len, struct sm_err *err);

/*
 * One record at a time, for logs too large to read whole: a reader keeps
 * one segment open.  sm_seglog_read_at() reads the record at (no, off)
 * that must end by `limit` (UINT64_MAX: the file's size) into *body
 * (sm_malloc()ed, *n bytes; the caller frees) and its end in *next.
 * SM_ENOTFOUND: no such segment, or off is at the limit (the end);
 * SM_ECORRUPT: the bytes there are not a whole valid record; SM_EIO,
 * SM_ENOMEM.  A reader is used by one thread.
 */
struct sm_seglog_reader {
	int fd;
	uint64_t no;
};

void sm_seglog_reader_init(struct sm_seglog_reader *r);
void sm_seglog_reader_fini(struct sm_seglog_reader *r);
int sm_seglog_read_at(struct sm_seglog *l, struct sm_seglog_reader *r,
    uint64_t no, uint64_t off, uint64_t limit, void **body, size_t *n,
    uint64_t *next);

#endif /* SM_SEGLOG_H */
