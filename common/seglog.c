/*
 * seglog.c -- numbered segment files of checked records; see seglog.h.
 */
#include "seglog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"
#include "kv.h"

#define SUFFIX ".wal"
#define DEFAULT_SEG_BYTES ((uint64_t)64 << 20)

struct sm_seglog {
	pthread_mutex_t mu, sync_mu;
	char *dir;
	char name[64];
	int dfd;                 /* the directory, for fsync */
	uint64_t seg_bytes;
	int fd;                  /* current segment, -1: none */
	uint64_t cur, bytes;     /* its number and size */
	bool broken;             /* an append could not be undone */
	uint64_t next_no;
	int last_errno;
	struct sm_seglog_pos synced;   /* under sync_mu */
};

static uint32_t
rec_check(const uint8_t lenb[4], const struct iovec *iov, int niov)
{
	struct sm_hash_stream h;

	sm_hash_stream_init(&h);
	sm_hash_stream_add(&h, lenb, 4);
	for (int i = 0; i < niov; i++)
		sm_hash_stream_add(&h, iov[i].iov_base, iov[i].iov_len);
	return ((uint32_t)sm_hash_stream_digest(&h));
}

void
sm_seglog_path(const struct sm_seglog *l, uint64_t no, char *buf, size_t n)
{
	snprintf(buf, n, "%s/%016" PRIx64 SUFFIX, l->dir, no);
}

const char *
sm_seglog_dir(const struct sm_seglog *l)
{
	return (l->dir);
}

int
sm_seglog_numbers(const char *dir, const char *suffix, uint64_t **nos,
    size_t *nout, struct sm_err *err)
{
	size_t sl = strlen(suffix), n = 0, cap = 0;
	uint64_t *v = NULL;
	struct dirent *de;
	DIR *d;

	*nos = NULL;
	*nout = 0;
	if ((d = opendir(dir)) == NULL)
		return (sm_err_set(err, SM_EIO, "opendir %s: %s", dir,
		    strerror(errno)));
	while ((de = readdir(d)) != NULL) {
		const char *s = de->d_name;
		uint64_t no;

		if (strlen(s) != 16 + sl || strcmp(s + 16, suffix) != 0 ||
		    !sm_hex_u64(s, 16, &no))
			continue;
		if (SM_GROW(v, cap, n + 1, 16) != 0) {
			closedir(d);
			sm_free(v);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		v[n++] = no;
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), sm_u64_cmp);
	*nos = v;
	*nout = n;
	return (0);
}

int
sm_seglog_list(struct sm_seglog *l, uint64_t **nos, size_t *nout,
    struct sm_err *err)
{
	return (sm_seglog_numbers(l->dir, SUFFIX, nos, nout, err));
}

int
sm_seglog_open(const struct sm_seglog_cfg *cfg, struct sm_seglog **out,
    struct sm_err *err)
{
	struct sm_seglog *l;
	uint64_t *nos;
	size_t n;
	int rv;

	*out = NULL;
	if (strlen(cfg->dir) > 4000)
		return (sm_err_set(err, SM_EINVAL, "%s: directory name too "
		    "long", cfg->name));
	if (sm_mkdir_p(cfg->dir) != 0)
		return (sm_err_set(err, SM_EIO, "%s: mkdir %s: %s", cfg->name,
		    cfg->dir, strerror(errno)));
	if ((l = sm_calloc(1, sizeof(*l))) == NULL ||
	    (l->dir = sm_strdup(cfg->dir)) == NULL) {
		sm_free(l);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	snprintf(l->name, sizeof(l->name), "%s", cfg->name);
	l->seg_bytes = cfg->seg_bytes != 0 ? cfg->seg_bytes : DEFAULT_SEG_BYTES;
	l->fd = -1;
	l->next_no = 1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->sync_mu, NULL);
	if ((l->dfd = open(cfg->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		rv = sm_err_set(err, SM_EIO, "%s: open %s: %s", l->name,
		    cfg->dir, strerror(errno));
		sm_seglog_close(l);
		return (rv);
	}
	if ((rv = sm_seglog_list(l, &nos, &n, err)) != 0) {
		sm_seglog_close(l);
		return (rv);
	}
	if (n > 0)
		l->next_no = nos[n - 1] + 1;
	sm_free(nos);
	*out = l;
	return (0);
}

void
sm_seglog_close(struct sm_seglog *l)
{
	if (l == NULL)
		return;
	if (l->fd >= 0) {
		(void)fdatasync(l->fd);
		close(l->fd);
	}
	if (l->dfd >= 0)
		close(l->dfd);
	pthread_mutex_destroy(&l->mu);
	pthread_mutex_destroy(&l->sync_mu);
	sm_free(l->dir);
	sm_free(l);
}

void
sm_seglog_number_from(struct sm_seglog *l, uint64_t no)
{
	pthread_mutex_lock(&l->mu);
	l->next_no = SM_MAX(l->next_no, no);
	pthread_mutex_unlock(&l->mu);
}

/* Keep errno for the owner and say what failed (caller holds mu). */
static int
io_fail(struct sm_seglog *l, int e, struct sm_err *err, const char *what,
    uint64_t no)
{
	char p[4200];

	l->last_errno = e;
	sm_seglog_path(l, no, p, sizeof(p));
	return (sm_err_set(err, SM_EIO, "%s: %s %s: %s", l->name, what, p,
	    strerror(e)));
}

/* Close the current segment, synced (caller holds mu). */
static int
seal_locked(struct sm_seglog *l, struct sm_err *err)
{
	int rv = 0;

	if (l->fd < 0)
		return (0);
	if (fdatasync(l->fd) != 0)
		rv = io_fail(l, errno, err, "sync", l->cur);
	close(l->fd);
	l->fd = -1;
	return (rv);
}

/* Start segment next_no (caller holds mu). */
static int
seg_new(struct sm_seglog *l, struct sm_err *err)
{
	char p[4200];
	int fd, rv;

	if ((rv = seal_locked(l, err)) != 0)
		return (rv);
	sm_seglog_path(l, l->next_no, p, sizeof(p));
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return (io_fail(l, errno, err, "create", l->next_no));
	/* Its directory entry is durable before it holds a record. */
	if (fsync(l->dfd) != 0) {
		int e = errno;

		close(fd);
		(void)unlink(p);
		return (io_fail(l, e, err, "sync the directory of", l->next_no));
	}
	l->fd = fd;
	l->cur = l->next_no++;
	l->bytes = 0;
	l->broken = false;
	return (0);
}

int
sm_seglog_reserve(struct sm_seglog *l, size_t body, uint64_t *no,
    struct sm_err *err)
{
	uint64_t total = SM_SEGLOG_HDR + (uint64_t)body;
	int rv = 0;

	*no = 0;
	if (body > SM_SEGLOG_MAX_BODY)
		return (sm_err_set(err, SM_EINVAL, "%s: a record of %zu bytes "
		    "(at most %" PRIu32 ")", l->name, body,
		    SM_SEGLOG_MAX_BODY));
	pthread_mutex_lock(&l->mu);
	if (l->fd < 0 || l->broken ||
	    (l->bytes > 0 && l->bytes + total > l->seg_bytes))
		rv = seg_new(l, err);
	if (rv == 0)
		*no = l->cur;
	pthread_mutex_unlock(&l->mu);
	return (rv);
}

int
sm_seglog_append(struct sm_seglog *l, const struct iovec *iov, int niov,
    struct sm_seglog_pos *end, struct sm_err *err)
{
	uint8_t h[SM_SEGLOG_HDR];
	struct iovec v[1 + 8];
	uint64_t body = 0, start;
	size_t total, done = 0;
	int rv = 0;

	if (niov < 0 || niov > 8)
		return (sm_err_set(err, SM_EINVAL, "%s: %d pieces in a record "
		    "(at most 8)", l->name, niov));
	for (int i = 0; i < niov; i++)
		body += iov[i].iov_len;
	if (body > SM_SEGLOG_MAX_BODY)
		return (sm_err_set(err, SM_EINVAL, "%s: a record of %" PRIu64
		    " bytes", l->name, body));
	sm_put_be32(h, (uint32_t)body);
	sm_put_be32(h + 4, rec_check(h, iov, niov));
	total = SM_SEGLOG_HDR + (size_t)body;
	pthread_mutex_lock(&l->mu);
	SM_ASSERT(l->fd >= 0 && !l->broken);   /* sm_seglog_reserve first */
	start = l->bytes;
	while (done < total) {
		int nv = 0;
		size_t skip = done;
		ssize_t w;

		/* What is left of the pieces. */
		if (skip < SM_SEGLOG_HDR) {
			v[nv++] = (struct iovec){ h + skip, SM_SEGLOG_HDR - skip };
			skip = 0;
		} else {
			skip -= SM_SEGLOG_HDR;
		}
		for (int i = 0; i < niov; i++) {
			if (skip >= iov[i].iov_len) {
				skip -= iov[i].iov_len;
				continue;
			}
			v[nv++] = (struct iovec){ (uint8_t *)iov[i].iov_base +
			    skip, iov[i].iov_len - skip };
			skip = 0;
		}
		w = writev(l->fd, v, nv);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : ENOSPC;

			/* Undone: nothing of it stays. */
			if (done > 0 && ftruncate(l->fd, (off_t)start) != 0)
				l->broken = true;
			rv = io_fail(l, e, err, "write", l->cur);
			goto out;
		}
		done += (size_t)w;
	}
	l->bytes += total;
	if (end != NULL)
		*end = (struct sm_seglog_pos){ l->cur, l->bytes };
out:
	pthread_mutex_unlock(&l->mu);
	return (rv);
}

int
sm_seglog_sync(struct sm_seglog *l, const struct sm_seglog_pos *upto,
    struct sm_err *err)
{
	int rv = 0;

	pthread_mutex_lock(&l->sync_mu);
	if (l->synced.no < upto->no || (l->synced.no == upto->no &&
	    l->synced.off < upto->off)) {
		struct sm_seglog_pos at = { 0, 0 };
		int fd = -1;

		pthread_mutex_lock(&l->mu);
		if (l->fd >= 0 && l->cur == upto->no) {
			at = (struct sm_seglog_pos){ l->cur, l->bytes };
			/* A copy, so appends go on while it syncs; without
			 * one (no descriptors left), under the mutex. */
			if ((fd = dup(l->fd)) < 0) {
				if (fdatasync(l->fd) != 0)
					rv = io_fail(l, errno, err, "sync",
					    l->cur);
				else
					l->synced = at;
			}
		}
		pthread_mutex_unlock(&l->mu);
		/* Else its segment was closed, and synced when it was. */
		if (fd >= 0) {
			if (fdatasync(fd) != 0) {
				int e = errno;

				pthread_mutex_lock(&l->mu);
				rv = io_fail(l, e, err, "sync", at.no);
				pthread_mutex_unlock(&l->mu);
			} else {
				l->synced = at;
			}
			close(fd);
		}
	}
	pthread_mutex_unlock(&l->sync_mu);
	return (rv);
}

void
sm_seglog_seal(struct sm_seglog *l)
{
	pthread_mutex_lock(&l->mu);
	(void)seal_locked(l, NULL);
	pthread_mutex_unlock(&l->mu);
}

struct sm_seglog_pos
sm_seglog_tail(struct sm_seglog *l)
{
	struct sm_seglog_pos p = { 0, 0 };

	pthread_mutex_lock(&l->mu);
	if (l->fd >= 0)
		p = (struct sm_seglog_pos){ l->cur, l->bytes };
	pthread_mutex_unlock(&l->mu);
	return (p);
}

int
sm_seglog_errno(struct sm_seglog *l)
{
	int e;

	pthread_mutex_lock(&l->mu);
	e = l->last_errno;
	pthread_mutex_unlock(&l->mu);
	return (e);
}

int
sm_seglog_remove(struct sm_seglog *l, uint64_t no, struct sm_err *err)
{
	char p[4200];
	int rv = 0;

	pthread_mutex_lock(&l->mu);
	if (l->fd >= 0 && l->cur == no) {
		close(l->fd);
		l->fd = -1;
	}
	sm_seglog_path(l, no, p, sizeof(p));
	if (unlink(p) != 0 && errno != ENOENT)
		rv = io_fail(l, errno, err, "delete", no);
	pthread_mutex_unlock(&l->mu);
	return (rv);
}

int
sm_seglog_truncate(struct sm_seglog *l, uint64_t no, uint64_t off,
    struct sm_err *err)
{
	char p[4200];
	int rv = 0;

	pthread_mutex_lock(&l->mu);
	sm_seglog_path(l, no, p, sizeof(p));
	if (truncate(p, (off_t)off) != 0)
		rv = io_fail(l, errno, err, "truncate", no);
	else if (l->fd >= 0 && l->cur == no)
		l->bytes = SM_MIN(l->bytes, off);
	pthread_mutex_unlock(&l->mu);
	return (rv);
}

size_t
sm_seglog_parse(const uint8_t *p, size_t avail, const uint8_t **body,
    size_t *n)
{
	struct iovec v;
	uint32_t bl;

	if (avail < SM_SEGLOG_HDR)
		return (0);
	bl = sm_get_be32(p);
	if (bl > SM_SEGLOG_MAX_BODY || bl > avail - SM_SEGLOG_HDR)
		return (0);
	v = (struct iovec){ (void *)(uintptr_t)(p + SM_SEGLOG_HDR), bl };
	if (rec_check(p, &v, 1) != sm_get_be32(p + 4))
		return (0);
	*body = p + SM_SEGLOG_HDR;
	*n = bl;
	return (SM_SEGLOG_HDR + (size_t)bl);
}

static int
full_pread(int fd, void *buf, size_t n, uint64_t off)
{
	uint8_t *p = buf;

	while (n > 0) {
		ssize_t k = pread(fd, p, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return (-1);
		if (k == 0) {
			errno = EIO;     /* shorter than fstat said */
			return (-1);
		}
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return (0);
}

int
sm_seglog_read(struct sm_seglog *l, uint64_t no, uint8_t **buf, size_t *len,
    struct sm_err *err)
{
	char p[4200];
	int rv;

	sm_seglog_path(l, no, p, sizeof(p));
	if ((rv = sm_read_file(p, buf, len, err)) != 0)
		sm_err_prefix(err, "%s", l->name);
	return (rv);
}

void
sm_seglog_reader_init(struct sm_seglog_reader *r)
{
	r->fd = -1;
	r->no = 0;
}

void
sm_seglog_reader_fini(struct sm_seglog_reader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	sm_seglog_reader_init(r);
}

int
sm_seglog_read_at(struct sm_seglog *l, struct sm_seglog_reader *r,
    uint64_t no, uint64_t off, uint64_t limit, void **body, size_t *n,
    uint64_t *next)
{
	uint8_t h[SM_SEGLOG_HDR], *b;
	struct iovec v;
	uint32_t bl;

	*body = NULL;
	*n = 0;
	if (r->fd < 0 || r->no != no) {
		char p[4200];

		sm_seglog_reader_fini(r);
		sm_seglog_path(l, no, p, sizeof(p));
		if ((r->fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
			return (errno == ENOENT ? SM_ENOTFOUND : SM_EIO);
		r->no = no;
	}
	if (limit == UINT64_MAX) {
		struct stat st;

		if (fstat(r->fd, &st) != 0)
			return (SM_EIO);
		limit = (uint64_t)st.st_size;
	}
	if (off >= limit)
		return (SM_ENOTFOUND);
	if (limit - off < SM_SEGLOG_HDR ||
	    full_pread(r->fd, h, SM_SEGLOG_HDR, off) != 0)
		return (SM_ECORRUPT);
	bl = sm_get_be32(h);
	if (bl > SM_SEGLOG_MAX_BODY || bl > limit - off - SM_SEGLOG_HDR)
		return (SM_ECORRUPT);
	if ((b = sm_malloc(bl != 0 ? bl : 1)) == NULL)
		return (SM_ENOMEM);
	v = (struct iovec){ b, bl };
	if (full_pread(r->fd, b, bl, off + SM_SEGLOG_HDR) != 0 ||
	    rec_check(h, &v, 1) != sm_get_be32(h + 4)) {
		sm_free(b);
		return (SM_ECORRUPT);
	}
	*body = b;
	*n = bl;
	*next = off + SM_SEGLOG_HDR + bl;
	return (0);
}
