/*
 * rwqueue.c -- see rwqueue.h.
 */
#include "rwqueue.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>


#include "common/gz.h"
#include "common/log.h"

#define RWQ_HDR 8
#define RWQ_SLOT 64
#define RWQ_SLOT_USED 36
#define RWQ_MAGIC 0x43515752u     /* "RWQC" little-endian */

struct rwq {
	char *dir;
	struct rwq_config cfg;
	int lockfd, cfd;              /* LOCK, commit */

	pthread_mutex_t mu;           /* guards the writer and the counts */
	int wfd;                      /* live segment */
	uint64_t wseq, woff;
	uint64_t n, bytes;            /* not yet committed */

	/* Consumer side (one thread; rseq/roff read by rwq_append never). */
	int rfd;
	uint64_t rfd_seq;
	uint64_t rseq, roff;          /* next record to peek */
	uint64_t pk_seq, pk_off, pk_len; /* the peeked record, pk_len 0: none */
	uint64_t gen;                 /* of the last commit slot written */
	uint64_t lowseq;              /* lowest segment that may exist */
};

static void
put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void
put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t
get32(const uint8_t *p)
{
	return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24);
}

static uint64_t
get64(const uint8_t *p)
{
	return ((uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32);
}

static uint32_t
rec_crc(const uint8_t *lenb, const void *p, size_t n)
{
	return (sm_crc32(sm_crc32(0, lenb, 4), p, n));
}

static void
seg_path(const struct rwq *q, uint64_t seq, char *buf, size_t sz)
{
	snprintf(buf, sz, "%s/%016" PRIx64 ".seg", q->dir, seq);
}

static int
full_pread(int fd, void *buf, size_t n, uint64_t off)
{
	uint8_t *p = buf;

	while (n > 0) {
		ssize_t k = pread(fd, p, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return (k < 0 ? SM_EIO : SM_ENOTFOUND);
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return (0);
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
	put32(s, RWQ_MAGIC);
	put64(s + 4, g);
	put64(s + 12, seq);
	put64(s + 20, off);
	put32(s + 28, flags);
	put32(s + 32, sm_crc32(0, s, 32));
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
		if (get32(p) != RWQ_MAGIC || get32(p + 32) !=
		    sm_crc32(0, p, 32))
			continue;
		if (found && get64(p + 4) <= q->gen)
			continue;
		found = true;
		q->gen = get64(p + 4);
		*seq = get64(p + 12);
		*off = get64(p + 20);
		*flags = get32(p + 28);
	}
	return (found);
}


/* The sequence numbers of the segment files, sorted. */
static int
list_segments(const char *dir, uint64_t **out, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t *v = NULL;
	size_t cap = 0;
	int rv = 0;

	*out = NULL;
	*n = 0;
	if (d == NULL)
		return (SM_EIO);
	while ((de = readdir(d)) != NULL) {
		const char *s = de->d_name;
		char *end;
		uint64_t seq;

		if (strlen(s) != 20 || strcmp(s + 16, ".seg") != 0)
			continue;
		errno = 0;
		seq = strtoull(s, &end, 16);
		if (errno != 0 || end != s + 16)
			continue;
		if ((rv = sm_grow(&v, &cap, *n + 1, sizeof(*v), 16)) != 0)
			break;
		v[(*n)++] = seq;
	}
	closedir(d);
	if (rv != 0) {
		sm_free(v);
		*n = 0;
		return (rv);
	}
	if (*n > 1)
		qsort(v, *n, sizeof(*v), sm_u64_cmp);
	*out = v;
	return (0);
}

/*
 * Check the records of segment `seq` from `off`; truncate at the first bad
 * one.  Adds the good records to q->n / q->bytes.  *first_ok: a valid
 * record starts at `off`.
 */
static int
scan_segment(struct rwq *q, uint64_t seq, uint64_t off,
    struct rwq_open_info *info, bool *first_ok)
{
	char path[4096];
	struct stat st;
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint64_t size, start = off;
	int fd, rv = 0;

	*first_ok = false;
	seg_path(q, seq, path, sizeof(path));
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return (errno == ENOENT ? 0 : SM_EIO);
	if (fstat(fd, &st) != 0) {
		close(fd);
		return (SM_EIO);
	}
	size = (uint64_t)st.st_size;
	while (off < size) {
		uint8_t h[RWQ_HDR];
		uint64_t len;

		if (size - off < RWQ_HDR || full_pread(fd, h, RWQ_HDR, off) != 0)
			break;
		len = get32(h);
		if (len > RWQ_MAX_RECORD || len > size - off - RWQ_HDR)
			break;
		if ((rv = sm_grow(&buf, &cap, len + 1, 1, 4096)) != 0)
			goto out;
		if (full_pread(fd, buf, len, off + RWQ_HDR) != 0 ||
		    rec_crc(h, buf, len) != get32(h + 4))
			break;
		if (off == start)
			*first_ok = true;
		q->n++;
		q->bytes += RWQ_HDR + len;
		off += RWQ_HDR + len;
	}
	if (off < size) {
		sm_warn("remote-write", "queue segment has a torn or corrupt "
		    "record, truncated\tfile=%s at=%" PRIu64 " cut_bytes=%"
		    PRIu64, path, off, size - off);
		info->corrupt_bytes += size - off;
		info->corrupt_segments++;
		if (ftruncate(fd, (off_t)off) != 0) {
			rv = SM_EIO;
			goto out;
		}
	}
out:
	sm_free(buf);
	close(fd);
	return (rv);
}

static int
open_writer(struct rwq *q, uint64_t seq)
{
	char path[4096];

	seg_path(q, seq, path, sizeof(path));
	q->wfd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (q->wfd < 0)
		return (SM_EIO);
	q->wseq = seq;
	q->woff = 0;
	return (0);
}

int
rwq_open(const struct rwq_config *cfg, struct rwq **out,
    struct rwq_open_info *info, struct sm_err *err)
{
	struct rwq *q;
	char path[4096];
	uint64_t *segs = NULL, cseq = 0, coff = 0;
	uint32_t cflags = 0;
	size_t nsegs = 0;
	bool have, first_ok;
	int rv;

	*out = NULL;
	memset(info, 0, sizeof(*info));
	if (strlen(cfg->dir) > 3000)
		return (sm_err_set(err, SM_EINVAL, "remote-write queue: "
		    "directory name too long"));
	if (mkdir(cfg->dir, 0755) != 0 && errno != EEXIST)
		return (sm_err_set(err, SM_EIO, "remote-write queue: mkdir %s: "
		    "%s", cfg->dir, strerror(errno)));
	if ((q = sm_calloc(1, sizeof(*q))) == NULL ||
	    (q->dir = sm_strdup(cfg->dir)) == NULL) {
		sm_free(q);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	q->cfg = *cfg;
	q->cfg.dir = q->dir;
	if (q->cfg.seg_bytes == 0)
		q->cfg.seg_bytes = 16u << 20;
	q->lockfd = q->cfd = q->wfd = q->rfd = -1;
	pthread_mutex_init(&q->mu, NULL);
	snprintf(path, sizeof(path), "%s/LOCK", q->dir);
	if ((q->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		rv = sm_err_set(err, SM_EIO, "remote-write queue: %s: %s",
		    path, strerror(errno));
		goto fail;
	}
	if (flock(q->lockfd, LOCK_EX | LOCK_NB) != 0) {
		rv = sm_err_set(err, SM_EIO, "remote-write queue: %s is in use "
		    "by another process", q->dir);
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/commit", q->dir);
	if ((q->cfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		rv = sm_err_set(err, SM_EIO, "remote-write queue: %s: %s",
		    path, strerror(errno));
		goto fail;
	}
	if ((rv = list_segments(q->dir, &segs, &nsegs)) != 0) {
		sm_err_set(err, rv, "remote-write queue: cannot list %s",
		    q->dir);
		goto fail;
	}
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
			seg_path(q, segs[i], path, sizeof(path));
			(void)unlink(path);
			continue;
		}
		if ((rv = scan_segment(q, segs[i], segs[i] == cseq ? coff : 0,
		    info, &first_ok)) != 0) {
			sm_err_set(err, rv, "remote-write queue: cannot read "
			    "segment %016" PRIx64 " in %s", segs[i], q->dir);
			goto fail;
		}
		if (segs[i] == cseq && first_ok && (cflags & 1))
			info->head_in_flight = true;
	}
	q->rseq = q->lowseq = cseq;
	q->roff = coff;
	if ((rv = open_writer(q, SM_MAX(nsegs > 0 ? segs[nsegs - 1] + 1 : 0,
	    cseq + 1))) != 0) {
		sm_err_set(err, rv, "remote-write queue: cannot create a "
		    "segment in %s: %s", q->dir, strerror(errno));
		goto fail;
	}
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
	if (q->wfd >= 0) {
		(void)fdatasync(q->wfd);
		close(q->wfd);
	}
	if (q->rfd >= 0)
		close(q->rfd);
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
	uint8_t h[RWQ_HDR];
	uint32_t c;
	uint64_t len = 0, off;
	int rv = 0;

	for (int i = 0; i < niov; i++)
		len += iov[i].iov_len;
	if (len > RWQ_MAX_RECORD)
		return (SM_ELIMIT);
	put32(h, (uint32_t)len);
	c = sm_crc32(0, h, 4);
	for (int i = 0; i < niov; i++)
		c = sm_crc32(c, iov[i].iov_base, iov[i].iov_len);
	put32(h + 4, c);
	pthread_mutex_lock(&q->mu);
	if (q->wfd < 0) {
		pthread_mutex_unlock(&q->mu);
		return (SM_EIO);
	}
	if (q->n + 1 > q->cfg.max_entries ||
	    q->bytes + RWQ_HDR + len > q->cfg.max_bytes) {
		pthread_mutex_unlock(&q->mu);
		return (SM_ELIMIT);
	}
	if (q->woff > 0 && q->woff + RWQ_HDR + len > q->cfg.seg_bytes) {
		int ofd = q->wfd;

		(void)fdatasync(ofd);
		if (open_writer(q, q->wseq + 1) != 0) {
			sm_error("remote-write", "queue: cannot start a "
			    "segment\tdir=%s err=\"%s\"", q->dir,
			    strerror(errno));
			/* Keep appending to the old one. */
			q->wfd = ofd;
		} else {
			close(ofd);
		}
	}
	off = q->woff;
	rv = full_pwrite(q->wfd, h, RWQ_HDR, off);
	off += RWQ_HDR;
	for (int i = 0; rv == 0 && i < niov; i++) {
		rv = full_pwrite(q->wfd, iov[i].iov_base, iov[i].iov_len, off);
		off += iov[i].iov_len;
	}
	if (rv != 0) {
		sm_error("remote-write", "queue append failed\tdir=%s "
		    "err=\"%s\"", q->dir, strerror(errno));
		(void)ftruncate(q->wfd, (off_t)q->woff);
	} else {
		q->woff = off;
		q->n++;
		q->bytes += RWQ_HDR + len;
	}
	pthread_mutex_unlock(&q->mu);
	return (rv);
}

/* Point q->rfd at segment rseq; false when it does not exist. */
static bool
reader_open(struct rwq *q)
{
	char path[4096];

	if (q->rfd >= 0 && q->rfd_seq == q->rseq)
		return (true);
	if (q->rfd >= 0)
		close(q->rfd);
	seg_path(q, q->rseq, path, sizeof(path));
	q->rfd = open(path, O_RDONLY | O_CLOEXEC);
	q->rfd_seq = q->rseq;
	return (q->rfd >= 0);
}

/*
 * Segments before rseq are done once a commit at or after rseq is
 * written: unlink them.
 */
static void
drop_old_segments(struct rwq *q)
{
	char path[4096];

	while (q->lowseq < q->rseq) {
		if (q->rfd >= 0 && q->rfd_seq == q->lowseq) {
			close(q->rfd);
			q->rfd = -1;
		}
		seg_path(q, q->lowseq, path, sizeof(path));
		(void)unlink(path);
		q->lowseq++;
	}
}

/*
 * Nothing to read: the counts are exact again (0), and segments left
 * behind go once the position is committed.
 */
static void
reader_at_end(struct rwq *q)
{
	pthread_mutex_lock(&q->mu);
	if (q->rseq == q->wseq && q->roff >= q->woff) {
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
		uint64_t wseq, woff, limit, len;
		uint8_t h[RWQ_HDR], *buf;
		struct stat st;

		pthread_mutex_lock(&q->mu);
		wseq = q->wseq;
		woff = q->woff;
		pthread_mutex_unlock(&q->mu);
		if (q->rseq > wseq)
			return (SM_ENOTFOUND);
		if (!reader_open(q)) {
			if (q->rseq >= wseq)
				return (SM_EIO);
			q->rseq++;      /* a gap: nothing there */
			q->roff = 0;
			continue;
		}
		if (q->rseq == wseq)
			limit = woff;
		else if (fstat(q->rfd, &st) == 0)
			limit = (uint64_t)st.st_size;
		else
			return (SM_EIO);
		if (q->roff >= limit) {
			if (q->rseq == wseq) {
				reader_at_end(q);
				return (SM_ENOTFOUND);
			}
			q->rseq++;
			q->roff = 0;
			continue;
		}
		if (limit - q->roff < RWQ_HDR ||
		    full_pread(q->rfd, h, RWQ_HDR, q->roff) != 0 ||
		    (len = get32(h)) > limit - q->roff - RWQ_HDR)
			goto bad;
		if ((buf = sm_malloc(len != 0 ? len : 1)) == NULL)
			return (SM_ENOMEM);
		if (full_pread(q->rfd, buf, len, q->roff + RWQ_HDR) != 0 ||
		    rec_crc(h, buf, len) != get32(h + 4)) {
			sm_free(buf);
			goto bad;
		}
		q->pk_seq = q->rseq;
		q->pk_off = q->roff;
		q->pk_len = RWQ_HDR + len;
		*p = buf;
		*n = len;
		return (0);
bad:
		/* Changed on disk since the open scan: skip the segment. */
		sm_warn("remote-write", "queue record failed its check, rest "
		    "of the segment skipped\tdir=%s seq=%016" PRIx64 " at=%"
		    PRIu64, q->dir, q->rseq, q->roff);
		if (skipped != NULL)
			*skipped += limit - q->roff;
		pthread_mutex_lock(&q->mu);
		/* The counts cannot be known exactly: start over at 0. */
		if (q->rseq == wseq) {
			q->n = 0;
			q->bytes = 0;
			/* Appends go on in a new segment, after the bad one. */
			if (open_writer(q, q->wseq + 1) != 0)
				sm_error("remote-write", "queue: cannot start a "
				    "segment\tdir=%s", q->dir);
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
