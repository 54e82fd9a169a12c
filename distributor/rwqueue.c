/*
 * rwqueue.c -- a FIFO over a segment log (common/seglog.h) and a commit
 * file; see rwqueue.h.
 */
#include "rwqueue.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>


#include "common/byteorder.h"
#include "common/gz.h"
#include "common/log.h"
#include "common/seglog.h"

#define LEGACY_HDR 8
#define RWQ_SLOT 64
#define RWQ_SLOT_USED 36
#define RWQ_MAGIC 0x43515752u     /* "RWQC" little-endian */

struct rwq {
	char *dir;
	struct rwq_config cfg;
	int lockfd, cfd;              /* LOCK, commit */
	struct sm_seglog *sl;         /* the records */

	pthread_mutex_t mu;           /* guards the writer and the counts */
	uint64_t n, bytes;            /* not yet committed */

	/* Consumer side (one thread; rseq/roff read by rwq_append never). */
	struct sm_seglog_reader rd;
	uint64_t rseq, roff;          /* next record to peek */
	uint64_t pk_seq, pk_off, pk_len; /* the peeked record, pk_len 0: none */
	uint64_t gen;                 /* of the last commit slot written */
	uint64_t lowseq;              /* lowest segment that may exist */
};

static uint32_t
rec_crc(const uint8_t *lenb, const void *p, size_t n)
{
	return (sm_crc32(sm_crc32(0, lenb, 4), p, n));
}

static int
full_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
	const uint8_t *p = buf;

	while (n > 0) {
		ssize_t k = pwrite(fd, p, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return (SM_EIO);
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return (0);
}

/* Write commit slot gen+1 for (seq, off, flags).  Called by the consumer. */
static int
commit_write(struct rwq *q, uint64_t seq, uint64_t off, uint32_t flags)
{
	uint8_t s[RWQ_SLOT];
	uint64_t g = q->gen + 1;

	memset(s, 0, sizeof(s));
	sm_put_le32(s, RWQ_MAGIC);
	sm_put_le64(s + 4, g);
	sm_put_le64(s + 12, seq);
	sm_put_le64(s + 20, off);
	sm_put_le32(s + 28, flags);
	sm_put_le32(s + 32, sm_crc32(0, s, 32));
	if (full_pwrite(q->cfd, s, sizeof(s), (g & 1) * RWQ_SLOT) != 0) {
		sm_error("remote-write", "queue commit write failed\tdir=%s "
		    "err=\"%s\"", q->dir, strerror(errno));
		return (SM_EIO);
	}
	q->gen = g;
	return (0);
}

/* The newest valid commit slot; false when none. */
static bool
commit_read(struct rwq *q, uint64_t *seq, uint64_t *off, uint32_t *flags)
{
	uint8_t s[2 * RWQ_SLOT];
	ssize_t k = pread(q->cfd, s, sizeof(s), 0);
	bool found = false;

	for (int i = 0; i < 2; i++) {
		const uint8_t *p = s + i * RWQ_SLOT;

		if (k < (i + 1) * RWQ_SLOT_USED + i * (RWQ_SLOT - RWQ_SLOT_USED))
			continue;
		if (sm_get_le32(p) != RWQ_MAGIC || sm_get_le32(p + 32) !=
		    sm_crc32(0, p, 32))
			continue;
		if (found && sm_get_le64(p + 4) <= q->gen)
			continue;
		found = true;
		q->gen = sm_get_le64(p + 4);
		*seq = sm_get_le64(p + 12);
		*off = sm_get_le64(p + 20);
		*flags = sm_get_le32(p + 28);
	}
	return (found);
}


/* --- an older version's segments --------------------------------------- */

/*
 * Before the segment log, records sat in <seq>.seg files framed
 *   u32 len | u32 crc | payload[len]
 * little-endian, crc = CRC-32 (zlib) of the four len bytes then the
 * payload, and the commit file named (seq, off) in them.  At open they are
 * copied into the segment log in order from the commit point, the commit
 * moves to the first copy, and only then do the old files go.  A crash
 * while copying leaves the old files and the commit as they were: the
 * next open deletes the partial copy (while .seg files exist nothing else
 * writes the segment log) and copies again.  Kept so an upgrade loses no
 * queued record (docs/architecture.md, "On-disk formats").
 */
static void
legacy_path(const struct rwq *q, uint64_t seq, char *buf, size_t sz)
{
	snprintf(buf, sz, "%s/%016" PRIx64 ".seg", q->dir, seq);
}

/* Copy one legacy segment's records from `off` into the log. */
static int
legacy_copy(struct rwq *q, uint64_t seq, uint64_t off, bool *first_copied,
    uint64_t *first_no, struct rwq_open_info *info, struct sm_err *err)
{
	char path[4096];
	uint8_t *b = NULL;
	size_t len = 0;
	int rv = 0;

	legacy_path(q, seq, path, sizeof(path));
	if ((rv = sm_read_file(path, &b, &len, err)) != 0)
		return (rv == SM_ENOTFOUND ? 0 : sm_err_prefix(err,
		    "remote-write queue"));
	while (off < len) {
		uint64_t rl;
		struct iovec v;
		uint64_t no;

		if (len - off < LEGACY_HDR)
			break;
		rl = sm_get_le32(b + off);
		if (rl > RWQ_MAX_RECORD || rl > len - off - LEGACY_HDR ||
		    rec_crc(b + off, b + off + LEGACY_HDR, rl) !=
		    sm_get_le32(b + off + 4))
			break;
		v = (struct iovec){ b + off + LEGACY_HDR, rl };
		if ((rv = sm_seglog_reserve(q->sl, rl, &no, err)) != 0 ||
		    (rv = sm_seglog_append(q->sl, &v, 1, NULL, err)) != 0)
			goto out;
		if (!*first_copied) {
			*first_copied = true;
			*first_no = no;
		}
		off += LEGACY_HDR + rl;
	}
	if (off < len) {
		sm_warn("remote-write", "queue segment of an older version has "
		    "a torn or corrupt record, the rest not copied\tfile=%s "
		    "at=%" PRIu64 " cut_bytes=%zu", path, off, len - off);
		info->corrupt_bytes += len - off;
		info->corrupt_segments++;
	}
out:
	sm_free(b);
	return (rv);
}

static int
legacy_upgrade(struct rwq *q, struct rwq_open_info *info, struct sm_err *err)
{
	uint64_t *old = NULL, *part = NULL, cseq = 0, coff = 0, first = 0;
	size_t nold = 0, npart = 0;
	uint32_t cflags = 0;
	bool have, copied = false;
	char path[4096];
	int rv;

	if ((rv = sm_seglog_numbers(q->dir, ".seg", &old, &nold, err)) != 0)
		return (sm_err_prefix(err, "remote-write queue"));
	if (nold == 0)
		return (0);
	/* A partial copy of an interrupted upgrade. */
	if ((rv = sm_seglog_list(q->sl, &part, &npart, err)) != 0)
		goto out;
	for (size_t i = 0; i < npart; i++)
		if ((rv = sm_seglog_remove(q->sl, part[i], err)) != 0)
			goto out;
	sm_seglog_number_from(q->sl, old[nold - 1] + 1);
	have = commit_read(q, &cseq, &coff, &cflags);
	if (!have) {
		cseq = old[0];
		coff = 0;
	}
	for (size_t i = 0; i < nold; i++) {
		if (old[i] < cseq)
			continue;
		if ((rv = legacy_copy(q, old[i], old[i] == cseq ? coff : 0,
		    &copied, &first, info, err)) != 0)
			goto out;
	}
	sm_seglog_seal(q->sl);
	/* The in-flight mark stays with the record it was on, now first. */
	if ((rv = commit_write(q, copied ? first : old[nold - 1] + 1, 0,
	    copied ? cflags & 1 : 0)) != 0 || fdatasync(q->cfd) != 0) {
		rv = sm_err_set(err, SM_EIO, "remote-write queue: cannot "
		    "write the commit file in %s", q->dir);
		goto out;
	}
	for (size_t i = 0; i < nold; i++) {
		legacy_path(q, old[i], path, sizeof(path));
		(void)unlink(path);
	}
	sm_info("remote-write", "queue of an older version copied into the "
	    "segment log\tdir=%s segments=%zu", q->dir, nold);
out:
	sm_free(old);
	sm_free(part);
	return (rv);
}

/* --- the queue ------------------------------------------------------------ */

/*
 * Check the records of segment `seq` from `off`; truncate at the first bad
 * one.  Adds the good records to q->n / q->bytes.  *first_ok: a valid
 * record starts at `off`.
 */
static int
scan_segment(struct rwq *q, uint64_t seq, uint64_t off,
    struct rwq_open_info *info, bool *first_ok, struct sm_err *err)
{
	struct sm_seglog_reader rd;
	uint64_t start = off;
	int rv;

	*first_ok = false;
	sm_seglog_reader_init(&rd);
	for (;;) {
		void *b;
		size_t n;
		uint64_t next;

		rv = sm_seglog_read_at(q->sl, &rd, seq, off, UINT64_MAX, &b,
		    &n, &next);
		if (rv != 0)
			break;
		sm_free(b);
		if (off == start)
			*first_ok = true;
		q->n++;
		q->bytes += next - off;
		off = next;
	}
	sm_seglog_reader_fini(&rd);
	if (rv == SM_ECORRUPT) {
		char path[4096];
		struct stat st;

		sm_seglog_path(q->sl, seq, path, sizeof(path));
		if (stat(path, &st) == 0 && (uint64_t)st.st_size > off) {
			sm_warn("remote-write", "queue segment has a torn or "
			    "corrupt record, truncated\tfile=%s at=%" PRIu64
			    " cut_bytes=%" PRIu64, path, off,
			    (uint64_t)st.st_size - off);
			info->corrupt_bytes += (uint64_t)st.st_size - off;
		}
		info->corrupt_segments++;
		return (sm_seglog_truncate(q->sl, seq, off, err));
	}
	if (rv == SM_ENOTFOUND)
		return (0);
	return (sm_err_set(err, rv, "remote-write queue: cannot read "
	    "segment %016" PRIx64 " in %s", seq, q->dir));
}

/* Open (creating it) the queue's file `name` read-write into *fd (-1 on
 * failure).  The directory name is at most 3000 bytes (rwq_open). */
static int
queue_file_open(struct rwq *q, const char *name, int *fd, struct sm_err *err)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", q->dir, name);
	if ((*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
		return (sm_err_set(err, SM_EIO, "remote-write queue: %s: %s",
		    path, strerror(errno)));
	return (0);
}

int
rwq_open(const struct rwq_config *cfg, struct rwq **out,
    struct rwq_open_info *info, struct sm_err *err)
{
	struct sm_seglog_cfg scfg = { .dir = cfg->dir,
	    .name = "remote-write queue", .seg_bytes = cfg->seg_bytes };
	struct rwq *q;
	uint64_t *segs = NULL, cseq = 0, coff = 0, no;
	uint32_t cflags = 0;
	size_t nsegs = 0;
	bool have, first_ok;
	int rv;

	*out = NULL;
	memset(info, 0, sizeof(*info));
	if (strlen(cfg->dir) > 3000)
		return (sm_err_set(err, SM_EINVAL, "remote-write queue: "
		    "directory name too long"));
	if ((q = sm_calloc(1, sizeof(*q))) == NULL ||
	    (q->dir = sm_strdup(cfg->dir)) == NULL) {
		sm_free(q);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	q->cfg = *cfg;
	q->cfg.dir = q->dir;
	if (q->cfg.seg_bytes == 0)
		q->cfg.seg_bytes = 16u << 20;
	scfg.seg_bytes = q->cfg.seg_bytes;
	q->lockfd = q->cfd = -1;
	sm_seglog_reader_init(&q->rd);
	pthread_mutex_init(&q->mu, NULL);
	if ((rv = sm_seglog_open(&scfg, &q->sl, err)) != 0)
		goto fail;
	if ((rv = queue_file_open(q, "LOCK", &q->lockfd, err)) != 0)
		goto fail;
	if (flock(q->lockfd, LOCK_EX | LOCK_NB) != 0) {
		rv = sm_err_set(err, SM_EIO, "remote-write queue: %s is in use "
		    "by another process", q->dir);
		goto fail;
	}
	if ((rv = queue_file_open(q, "commit", &q->cfd, err)) != 0)
		goto fail;
	if ((rv = legacy_upgrade(q, info, err)) != 0 ||
	    (rv = sm_seglog_list(q->sl, &segs, &nsegs, err)) != 0)
		goto fail;
	have = commit_read(q, &cseq, &coff, &cflags);
	if (!have) {
		cseq = nsegs > 0 ? segs[0] : 0;
		coff = 0;
		if (nsegs > 0)
			sm_warn("remote-write", "queue commit file missing or "
			    "unreadable, sending from the oldest segment\t"
			    "dir=%s", q->dir);
	}
	for (size_t i = 0; i < nsegs; i++) {
		if (segs[i] < cseq) {
			(void)sm_seglog_remove(q->sl, segs[i], NULL);
			continue;
		}
		if ((rv = scan_segment(q, segs[i], segs[i] == cseq ? coff : 0,
		    info, &first_ok, err)) != 0)
			goto fail;
		if (segs[i] == cseq && first_ok && (cflags & 1))
			info->head_in_flight = true;
	}
	q->rseq = q->lowseq = cseq;
	q->roff = coff;
	/* Appends go to a new segment, after every one there. */
	sm_seglog_number_from(q->sl, cseq + 1);
	if ((rv = sm_seglog_reserve(q->sl, 0, &no, err)) != 0)
		goto fail;
	/* Persist the start point without the flag: it was read above. */
	if ((rv = commit_write(q, cseq, coff, cflags & 1)) != 0) {
		sm_err_set(err, rv, "remote-write queue: cannot write the "
		    "commit file in %s", q->dir);
		goto fail;
	}
	sm_free(segs);
	*out = q;
	return (0);
fail:
	sm_free(segs);
	rwq_close(q);
	return (rv);
}

void
rwq_close(struct rwq *q)
{
	if (q == NULL)
		return;
	sm_seglog_close(q->sl);
	sm_seglog_reader_fini(&q->rd);
	if (q->cfd >= 0) {
		(void)fdatasync(q->cfd);
		close(q->cfd);
	}
	if (q->lockfd >= 0)
		close(q->lockfd);
	pthread_mutex_destroy(&q->mu);
	sm_free(q->dir);
	sm_free(q);
}

int
rwq_append(struct rwq *q, const struct iovec *iov, int niov)
{
	struct sm_err err;
	uint64_t len = 0, no;
	int rv;

	for (int i = 0; i < niov; i++)
		len += iov[i].iov_len;
	if (len > RWQ_MAX_RECORD)
		return (SM_ELIMIT);
	pthread_mutex_lock(&q->mu);
	if (q->n + 1 > q->cfg.max_entries ||
	    q->bytes + SM_SEGLOG_HDR + len > q->cfg.max_bytes) {
		pthread_mutex_unlock(&q->mu);
		return (SM_ELIMIT);
	}
	if ((rv = sm_seglog_reserve(q->sl, len, &no, &err)) != 0 ||
	    (rv = sm_seglog_append(q->sl, iov, niov, NULL, &err)) != 0) {
		sm_error("remote-write", "queue append failed\tdir=%s "
		    "err=\"%s\"", q->dir, err.msg);
		rv = SM_EIO;
	} else {
		q->n++;
		q->bytes += SM_SEGLOG_HDR + len;
	}
	pthread_mutex_unlock(&q->mu);
	return (rv);
}

/*
 * Segments before rseq are done once a commit at or after rseq is
 * written: unlink them.
 */
static void
drop_old_segments(struct rwq *q)
{
	while (q->lowseq < q->rseq) {
		if (q->rd.no == q->lowseq)
			sm_seglog_reader_fini(&q->rd);
		(void)sm_seglog_remove(q->sl, q->lowseq, NULL);
		q->lowseq++;
	}
}

/* The live segment and its committed size: where the writer is. */
static int
writer_at(struct rwq *q, struct sm_seglog_pos *w)
{
	struct sm_err err;
	uint64_t no;
	int rv = 0;

	pthread_mutex_lock(&q->mu);
	*w = sm_seglog_tail(q->sl);
	/* Sealed after a bad record and not reopened yet. */
	if (w->no == 0 && (rv = sm_seglog_reserve(q->sl, 0, &no, &err)) == 0)
		*w = sm_seglog_tail(q->sl);
	pthread_mutex_unlock(&q->mu);
	return (rv);
}

/*
 * Nothing to read: the counts are exact again (0), and segments left
 * behind go once the position is committed.
 */
static void
reader_at_end(struct rwq *q)
{
	struct sm_seglog_pos w;

	pthread_mutex_lock(&q->mu);
	w = sm_seglog_tail(q->sl);
	if (q->rseq == w.no && q->roff >= w.off) {
		q->n = 0;
		q->bytes = 0;
	}
	pthread_mutex_unlock(&q->mu);
	if (q->lowseq < q->rseq && commit_write(q, q->rseq, q->roff, 0) == 0)
		drop_old_segments(q);
}

int
rwq_peek(struct rwq *q, void **p, size_t *n, uint64_t *skipped)
{
	*p = NULL;
	*n = 0;
	q->pk_len = 0;
	for (;;) {
		struct sm_seglog_pos w;
		uint64_t next, limit;
		char path[4096];
		struct stat st;
		int rv;

		if (writer_at(q, &w) != 0)
			return (SM_EIO);
		if (q->rseq > w.no)
			return (SM_ENOTFOUND);
		limit = q->rseq == w.no ? w.off : UINT64_MAX;
		rv = sm_seglog_read_at(q->sl, &q->rd, q->rseq, q->roff, limit,
		    p, n, &next);
		if (rv == 0) {
			q->pk_seq = q->rseq;
			q->pk_off = q->roff;
			q->pk_len = next - q->roff;
			return (0);
		}
		if (rv == SM_ENOTFOUND) {
			/* At the end of the live segment, or past a done or
			 * missing one. */
			if (q->rseq == w.no) {
				reader_at_end(q);
				return (SM_ENOTFOUND);
			}
			q->rseq++;
			q->roff = 0;
			continue;
		}
		if (rv != SM_ECORRUPT)
			return (rv);
		/* Changed on disk since the open scan: skip the segment. */
		sm_warn("remote-write", "queue record failed its check, rest "
		    "of the segment skipped\tdir=%s seq=%016" PRIx64 " at=%"
		    PRIu64, q->dir, q->rseq, q->roff);
		sm_seglog_path(q->sl, q->rseq, path, sizeof(path));
		if (limit == UINT64_MAX)
			limit = stat(path, &st) == 0 ? (uint64_t)st.st_size :
			    q->roff;
		if (skipped != NULL && limit > q->roff)
			*skipped += limit - q->roff;
		pthread_mutex_lock(&q->mu);
		/* The counts cannot be known exactly: start over at 0. */
		if (q->rseq == w.no) {
			q->n = 0;
			q->bytes = 0;
			/* Appends go on in a new segment, after the bad one. */
			sm_seglog_seal(q->sl);
		}
		pthread_mutex_unlock(&q->mu);
		q->rseq++;
		q->roff = 0;
	}
}

int
rwq_mark(struct rwq *q, bool in_flight)
{
	if (q->pk_len == 0)
		return (0);
	return (commit_write(q, q->pk_seq, q->pk_off, in_flight ? 1 : 0));
}

int
rwq_commit(struct rwq *q)
{
	int rv;

	if (q->pk_len == 0)
		return (0);
	q->rseq = q->pk_seq;
	q->roff = q->pk_off + q->pk_len;
	rv = commit_write(q, q->rseq, q->roff, 0);
	pthread_mutex_lock(&q->mu);
	if (q->n > 0)
		q->n--;
	q->bytes = q->bytes >= q->pk_len ? q->bytes - q->pk_len : 0;
	pthread_mutex_unlock(&q->mu);
	q->pk_len = 0;
	/* Only once the commit says so: segments before rseq are done. */
	if (rv == 0)
		drop_old_segments(q);
	return (rv);
}

void
rwq_stats(struct rwq *q, uint64_t *n, uint64_t *bytes)
{
	pthread_mutex_lock(&q->mu);
	*n = q->n;
	*bytes = q->bytes;
	pthread_mutex_unlock(&q->mu);
}
