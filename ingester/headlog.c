/*
 * headlog.c -- the head log's segment files; see headlog.h.
 */
#include "headlog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/kv.h"
#include "common/log.h"
#include "common/strtab.h"

#define HDR 8                          /* be32 len, be32 check */
#define BODY_MIN (1 + 2 + 8 + 8)       /* kind, tenant length, gen, seq */
#define PROBE_NS ((int64_t)1000000000)
#define SPACE_MIN ((uint64_t)4 << 20)  /* free bytes that end an ENOSPC */

/* --- a map from key bytes to a u64 ------------------------------------- */

/*
 * The keys are interned in an sm_strtab (ids from 1: id 0 is its empty
 * string, never a key here) and the values sit in a parallel array.  A
 * zeroed map is empty; the table is made on the first put.
 */
struct kmap {
	struct sm_strtab keys;
	uint64_t *v;           /* v[id] */
	uint32_t cap;
};

static uint64_t *
kmap_get(const struct kmap *m, const void *k, size_t kn)
{
	uint32_t id;

	if (m->keys.strs == NULL ||
	    sm_strtab_find(&m->keys, k, kn, &id) != 0)
		return (NULL);
	return (&m->v[id]);
}

/* The value of k, created as `v0` when absent.  NULL: out of memory. */
static uint64_t *
kmap_put(struct kmap *m, const void *k, size_t kn, uint64_t v0)
{
	uint32_t id, n;

	if (m->keys.strs == NULL && sm_strtab_init(&m->keys) != 0)
		return (NULL);
	n = sm_strtab_count(&m->keys);
	/* Room for a new value first, so a new key always has one. */
	if (n >= m->cap && SM_GROW(m->v, m->cap, (size_t)n + 1, 16) != 0)
		return (NULL);
	if (sm_strtab_intern(&m->keys, k, kn, &id) != 0)
		return (NULL);
	if (id == n)
		m->v[id] = v0;
	return (&m->v[id]);
}

/* The number of ids (keys are 1..n-1). */
static uint32_t
kmap_ids(const struct kmap *m)
{
	return (m->keys.strs == NULL ? 0 : sm_strtab_count(&m->keys));
}

static void
kmap_fini(struct kmap *m)
{
	if (m->keys.strs != NULL)
		sm_strtab_fini(&m->keys);
	sm_free(m->v);
	memset(m, 0, sizeof(*m));
}

/* --- the log ------------------------------------------------------------- */

struct seg {
	uint64_t no;
	uint64_t bytes;
	struct kmap tmax;      /* tenant -> the largest gen of its records */
	bool keep;             /* corrupt: left for the operator */
};

struct ing_headlog {
	pthread_mutex_t mu, sync_mu;
	char *dir;
	int dfd;               /* the directory, for fsync */
	bool sync;
	struct seg *seg;       /* in order; the last is current when fd >= 0 */
	uint32_t nseg, cap;
	int fd;
	bool broken;           /* the current one has a bad tail: a new one */
	uint64_t next_no;
	uint64_t synced_no, synced_off;    /* under sync_mu */
	struct kmap floors;    /* tenant -> committed gen */
	bool inspect;          /* changes nothing on disk (headlog.h) */
	bool wfailed;          /* appends refused (headlog.h, Errors) */
	int werrno;
	char wwhy[256];
	int64_t wprobe_ns;
};

static int seg_list(struct ing_headlog *l, uint64_t **out, uint32_t *nout,
    struct sm_err *err);

static void
seg_path(const struct ing_headlog *l, uint64_t no, char *p, size_t n)
{
	snprintf(p, n, "%s/%016llx.log", l->dir, (unsigned long long)no);
}

int
ing_headlog_open(const char *dir, bool sync, struct ing_headlog **out,
    struct sm_err *err)
{
	struct ing_headlog *l;
	uint64_t *nos;
	uint32_t nno;
	int rv;

	*out = NULL;
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return (sm_err_set(err, SM_EIO, "head log: mkdir %s: %s", dir,
		    strerror(errno)));
	if ((l = sm_calloc(1, sizeof(*l))) == NULL ||
	    (l->dir = sm_strdup(dir)) == NULL) {
		sm_free(l);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if ((l->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		int e = errno;

		sm_free(l->dir);
		sm_free(l);
		return (sm_err_set(err, SM_EIO, "head log: open %s: %s", dir,
		    strerror(e)));
	}
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->sync_mu, NULL);
	l->sync = sync;
	l->fd = -1;
	l->next_no = 1;
	/* Numbers above every segment there, replayed or not. */
	if ((rv = seg_list(l, &nos, &nno, err)) != 0) {
		ing_headlog_close(l);
		return (rv);
	}
	if (nno > 0)
		l->next_no = nos[nno - 1] + 1;
	sm_free(nos);
	*out = l;
	return (0);
}

void
ing_headlog_close(struct ing_headlog *l)
{
	if (l == NULL)
		return;
	if (l->fd >= 0) {
		if (l->sync)
			(void)fdatasync(l->fd);
		close(l->fd);
	}
	for (uint32_t i = 0; i < l->nseg; i++)
		kmap_fini(&l->seg[i].tmax);
	sm_free(l->seg);
	kmap_fini(&l->floors);
	close(l->dfd);
	pthread_mutex_destroy(&l->mu);
	pthread_mutex_destroy(&l->sync_mu);
	sm_free(l->dir);
	sm_free(l);
}

void
ing_headlog_inspect(struct ing_headlog *l)
{
	pthread_mutex_lock(&l->mu);
	l->inspect = true;
	l->wfailed = true;
	l->werrno = EROFS;
	snprintf(l->wwhy, sizeof(l->wwhy), "head log: opened to inspect");
	pthread_mutex_unlock(&l->mu);
}

int
ing_headlog_floor(struct ing_headlog *l, const char *tenant, uint64_t gen)
{
	uint64_t *v;

	pthread_mutex_lock(&l->mu);
	if ((v = kmap_put(&l->floors, tenant, strlen(tenant), gen)) != NULL)
		*v = SM_MAX(*v, gen);
	pthread_mutex_unlock(&l->mu);
	return (v != NULL ? 0 : SM_ENOMEM);
}

/* Are all of s's records dead (caller holds mu)? */
static bool
seg_dead(const struct ing_headlog *l, const struct seg *s)
{
	for (uint32_t i = 1; i < kmap_ids(&s->tmax); i++) {
		uint32_t kn;
		const char *k = sm_strtab_str(&s->tmax.keys, i, &kn);
		const uint64_t *f = kmap_get(&l->floors, k, kn);

		if (f == NULL || s->tmax.v[i] > *f)
			return (false);
	}
	return (true);
}

/* Delete every dead segment; the current one is closed first (caller
 * holds mu).  A failed unlink leaves it for the next time. */
static void
gc(struct ing_headlog *l)
{
	uint32_t w = 0;
	char p[4096];

	for (uint32_t i = 0; i < l->nseg; i++) {
		struct seg *s = &l->seg[i];
		bool cur = l->fd >= 0 && i + 1 == l->nseg;

		if (s->keep || !seg_dead(l, s) || (cur && s->bytes == 0)) {
			l->seg[w++] = *s;
			continue;
		}
		if (cur) {
			close(l->fd);
			l->fd = -1;
		}
		seg_path(l, s->no, p, sizeof(p));
		if (unlink(p) != 0 && errno != ENOENT) {
			sm_warn("ingester", "head log: cannot delete a dead "
			    "segment\tpath=%s err=\"%s\"", p, strerror(errno));
			l->seg[w++] = *s;
			continue;
		}
		kmap_fini(&s->tmax);
	}
	l->nseg = w;
}

void
ing_headlog_committed(struct ing_headlog *l, const char *tenant,
    uint64_t gen)
{
	uint64_t *v;

	pthread_mutex_lock(&l->mu);
	if ((v = kmap_put(&l->floors, tenant, strlen(tenant), gen)) != NULL) {
		*v = SM_MAX(*v, gen);
		if (!l->inspect)
			gc(l);
	}
	/* Out of memory: the segments stay until a later commit. */
	pthread_mutex_unlock(&l->mu);
}

/* Refuse appends after a failure (caller holds mu). */
static int
fail(struct ing_headlog *l, int e, struct sm_err *err, const char *what)
{
	l->wfailed = true;
	l->werrno = e;
	l->wprobe_ns = sm_mono_ns();
	snprintf(l->wwhy, sizeof(l->wwhy), "head log: %s: %s", what,
	    strerror(e));
	return (sm_err_set(err, SM_EIO, "%s", l->wwhy));
}

/* Close the current segment (synced in sync mode) and start a new one
 * (caller holds mu). */
static int
seg_new(struct ing_headlog *l, struct sm_err *err)
{
	char p[4096];
	int fd;

	if (l->fd >= 0) {
		if (l->sync && fdatasync(l->fd) != 0)
			return (fail(l, errno, err, "sync"));
		close(l->fd);
		l->fd = -1;
	}
	l->broken = false;
	if (l->nseg == l->cap && SM_GROW(l->seg, l->cap, (size_t)l->nseg + 1,
	    8) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	seg_path(l, l->next_no, p, sizeof(p));
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return (fail(l, errno, err, "create segment"));
	if (l->sync && fsync(l->dfd) != 0) {
		int e = errno;

		close(fd);
		(void)unlink(p);
		return (fail(l, e, err, "sync directory"));
	}
	memset(&l->seg[l->nseg], 0, sizeof(l->seg[0]));
	l->seg[l->nseg++].no = l->next_no++;
	l->fd = fd;
	return (0);
}

static int
append(struct ing_headlog *l, uint8_t kind, const char *tenant,
    uint64_t gen, uint64_t seq, const void *rec, size_t n, struct sm_err *err)
{
	uint8_t hp[HDR + BODY_MIN + SM_KEY_MAX];
	size_t tl = strlen(tenant), hn = HDR + BODY_MIN + tl, total = hn + n;
	uint64_t my_no = 0, my_end = 0, start;
	struct seg *s;
	uint64_t *tm;
	size_t done = 0;
	int rv = 0;

	if (tl == 0 || tl > SM_KEY_MAX || total - HDR > UINT32_MAX)
		return (sm_err_set(err, SM_EINVAL, "head log: bad record "
		    "(tenant %zu bytes, %zu bytes)", tl, n));
	sm_put_be32(hp, (uint32_t)(total - HDR));
	hp[HDR] = kind;
	hp[HDR + 1] = (uint8_t)(tl >> 8);
	hp[HDR + 2] = (uint8_t)tl;
	memcpy(hp + HDR + 3, tenant, tl);
	sm_put_be64(hp + HDR + 3 + tl, gen);
	sm_put_be64(hp + HDR + 11 + tl, seq);
	/* The check covers the length and the body (headlog.h). */
	{
		uint8_t lb[4];

		memcpy(lb, hp, 4);
		sm_put_be32(hp + 4, (uint32_t)sm_hash_u64(sm_hash(lb, 4) ^
		    sm_hash_u64(sm_hash(hp + HDR, hn - HDR)) ^
		    sm_hash(rec, n)));
	}
	pthread_mutex_lock(&l->mu);
	if (l->wfailed) {
		rv = sm_err_set(err, SM_EIO, "%s", l->wwhy);
		goto out;
	}
	if (l->fd < 0 || l->broken || (l->seg[l->nseg - 1].bytes > 0 &&
	    l->seg[l->nseg - 1].bytes + total > ING_HEADLOG_SEGMENT_BYTES)) {
		if ((rv = seg_new(l, err)) != 0)
			goto out;
	}
	s = &l->seg[l->nseg - 1];
	/* Its bookkeeping first: a failure here writes nothing. */
	if ((tm = kmap_put(&s->tmax, tenant, tl, gen)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	*tm = SM_MAX(*tm, gen);
	start = s->bytes;
	while (done < total) {
		ssize_t w;
		int iovcnt = 0;
		struct iovec v[2];

		/* What is left of the two pieces. */
		if (done < hn) {
			v[iovcnt++] = (struct iovec){ hp + done, hn - done };
			if (n > 0)
				v[iovcnt++] = (struct iovec){
				    (void *)(uintptr_t)rec, n };
		} else {
			v[iovcnt++] = (struct iovec){ (uint8_t *)(uintptr_t)rec +
			    (done - hn), total - done };
		}
		w = writev(l->fd, v, iovcnt);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : ENOSPC;

			/* Undone: nothing of it stays. */
			if (done > 0 && ftruncate(l->fd, (off_t)start) != 0)
				l->broken = true;
			rv = fail(l, e, err, "write");
			goto out;
		}
		done += (size_t)w;
	}
	s->bytes += total;
	my_no = s->no;
	my_end = s->bytes;
out:
	pthread_mutex_unlock(&l->mu);
	if (rv != 0 || !l->sync)
		return (rv);

	/* Group commit: one fdatasync covers every record before it. */
	pthread_mutex_lock(&l->sync_mu);
	if (l->synced_no < my_no || (l->synced_no == my_no &&
	    l->synced_off < my_end)) {
		uint64_t no = 0, end = 0;
		int fd = -1;

		pthread_mutex_lock(&l->mu);
		if (l->fd >= 0 && l->seg[l->nseg - 1].no == my_no) {
			no = my_no;
			end = l->seg[l->nseg - 1].bytes;
			/* A copy, so appends go on while it syncs; without
			 * one (no descriptors left), under the mutex. */
			if ((fd = dup(l->fd)) < 0 && fdatasync(l->fd) != 0)
				rv = fail(l, errno, err, "sync");
			else if (fd < 0) {
				l->synced_no = no;
				l->synced_off = end;
			}
		}
		pthread_mutex_unlock(&l->mu);
		/* Else its segment was closed, and synced when it was. */
		if (fd >= 0) {
			if (fdatasync(fd) != 0) {
				int e = errno;

				pthread_mutex_lock(&l->mu);
				rv = fail(l, e, err, "sync");
				pthread_mutex_unlock(&l->mu);
			} else {
				l->synced_no = no;
				l->synced_off = end;
			}
			close(fd);
		}
	}
	pthread_mutex_unlock(&l->sync_mu);
	return (rv);
}

int
ing_headlog_append(struct ing_headlog *l, const char *tenant, uint64_t gen,
    uint64_t seq, const void *rec, size_t n, struct sm_err *err)
{
	return (append(l, 'W', tenant, gen, seq, rec, n, err));
}

int
ing_headlog_cancel(struct ing_headlog *l, const char *tenant, uint64_t gen,
    uint64_t seq, struct sm_err *err)
{
	return (append(l, 'C', tenant, gen, seq, NULL, 0, err));
}

bool
ing_headlog_writable(struct ing_headlog *l, char *why, size_t whylen)
{
	bool ok;

	pthread_mutex_lock(&l->mu);
	if (l->wfailed && !l->inspect &&
	    sm_mono_ns() - l->wprobe_ns >= PROBE_NS) {
		struct statvfs sv;

		l->wprobe_ns = sm_mono_ns();
		if (l->werrno != ENOSPC || (fstatvfs(l->dfd, &sv) == 0 &&
		    (uint64_t)sv.f_bavail * sv.f_frsize >= SPACE_MIN))
			l->wfailed = false;
	}
	ok = !l->wfailed;
	if (!ok && why != NULL && whylen > 0)
		snprintf(why, whylen, "%s", l->wwhy);
	pthread_mutex_unlock(&l->mu);
	return (ok);
}

uint64_t
ing_headlog_bytes(struct ing_headlog *l)
{
	uint64_t b = 0;

	pthread_mutex_lock(&l->mu);
	for (uint32_t i = 0; i < l->nseg; i++)
		b += l->seg[i].bytes;
	pthread_mutex_unlock(&l->mu);
	return (b);
}

/* --- replay -------------------------------------------------------------- */

struct rec {
	uint8_t kind;
	const char *tenant;
	size_t tl;
	uint64_t gen, seq;
	const uint8_t *rec;
	size_t n;
};

/*
 * The record at p[0..avail): 1 and *r with its length in *len, 0 when the
 * bytes are not a whole valid record (cut short, a bad length or check).
 */
static int
rec_parse(const uint8_t *p, size_t avail, struct rec *r, size_t *len)
{
	uint32_t bl, chk;
	size_t tl;

	if (avail < HDR)
		return (0);
	bl = sm_get_be32(p);
	if (bl < BODY_MIN || bl > avail - HDR)
		return (0);
	tl = (size_t)p[HDR + 1] << 8 | p[HDR + 2];
	if (BODY_MIN + tl > bl || tl > SM_KEY_MAX)
		return (0);
	chk = (uint32_t)sm_hash_u64(sm_hash(p, 4) ^ sm_hash_u64(sm_hash(
	    p + HDR, BODY_MIN + tl)) ^ sm_hash(p + HDR + BODY_MIN + tl,
	    bl - BODY_MIN - tl));
	if (chk != sm_get_be32(p + 4) || tl == 0 ||
	    (p[HDR] != 'W' && p[HDR] != 'C'))
		return (0);
	r->kind = p[HDR];
	r->tenant = (const char *)p + HDR + 3;
	r->tl = tl;
	r->gen = sm_get_be64(p + HDR + 3 + tl);
	r->seq = sm_get_be64(p + HDR + 11 + tl);
	r->rec = p + HDR + BODY_MIN + tl;
	r->n = bl - BODY_MIN - tl;
	*len = HDR + bl;
	return (1);
}

static int
no_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y ? -1 : x > y);
}

/* The segment numbers in the directory, sorted. */
static int
seg_list(struct ing_headlog *l, uint64_t **out, uint32_t *nout,
    struct sm_err *err)
{
	uint64_t *v = NULL;
	uint32_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	if ((d = opendir(l->dir)) == NULL)
		return (sm_err_set(err, SM_EIO, "head log: opendir %s: %s",
		    l->dir, strerror(errno)));
	while ((de = readdir(d)) != NULL) {
		unsigned long long no;
		char tail;

		if (strlen(de->d_name) != 20 ||
		    strcmp(de->d_name + 16, ".log") != 0 ||
		    sscanf(de->d_name, "%16llx%c", &no, &tail) != 2 ||
		    tail != '.')
			continue;
		if (n == cap && SM_GROW(v, cap, (size_t)n + 1, 16) != 0) {
			closedir(d);
			sm_free(v);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		v[n++] = no;
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), no_cmp);
	*out = v;
	*nout = n;
	return (0);
}

/* Read segment `no` whole into *buf (*len bytes). */
static int
seg_read(struct ing_headlog *l, uint64_t no, uint8_t **buf, size_t *len,
    struct sm_err *err)
{
	char p[4096];
	struct stat st;
	size_t got = 0;
	uint8_t *b;
	int fd;

	seg_path(l, no, p, sizeof(p));
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) != 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return (sm_err_set(err, SM_EIO, "head log: open %s: %s", p,
		    strerror(e)));
	}
	if ((b = sm_malloc(SM_MAX((size_t)st.st_size, 1))) == NULL) {
		close(fd);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;

			close(fd);
			sm_free(b);
			return (sm_err_set(err, SM_EIO, "head log: read %s: "
			    "%s", p, strerror(e)));
		}
		got += (size_t)r;
	}
	close(fd);
	*buf = b;
	*len = got;
	return (0);
}

/* The key of (tenant, gen[, seq]) in `k`; its length. */
static size_t
rec_key(uint8_t *k, const struct rec *r, bool with_seq)
{
	memcpy(k, r->tenant, r->tl);
	sm_put_be64(k + r->tl, r->gen);
	if (!with_seq)
		return (r->tl + 8);
	sm_put_be64(k + r->tl + 8, r->seq);
	return (r->tl + 16);
}

static bool
rec_dead(const struct ing_headlog *l, const struct rec *r)
{
	const uint64_t *f = kmap_get(&l->floors, r->tenant, r->tl);

	return (f != NULL && r->gen <= *f);
}

int
ing_headlog_replay(struct ing_headlog *l,
    int (*gen_fn)(void *arg, const char *tenant, uint64_t gen),
    int (*fn)(void *arg, const char *tenant, uint64_t gen, uint64_t seq,
    const uint8_t *rec, size_t n), void *arg, uint64_t *max_gen,
    uint64_t *max_seq, uint64_t *corrupt, struct sm_err *err)
{
	struct kmap cancels, gens;
	uint64_t *nos = NULL, *valid = NULL;
	uint32_t nno = 0;
	uint8_t k[SM_KEY_MAX + 16];
	char tenant[SM_KEY_MAX + 1];
	int rv;

	memset(&cancels, 0, sizeof(cancels));
	memset(&gens, 0, sizeof(gens));
	pthread_mutex_lock(&l->mu);
	SM_ASSERT(l->nseg == 0 && l->fd < 0);
	if ((rv = seg_list(l, &nos, &nno, err)) != 0)
		goto out;
	if (nno > 0 && ((valid = sm_calloc(nno, sizeof(*valid))) == NULL ||
	    SM_GROW(l->seg, l->cap, nno, 8) != 0)) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	/* Pass 1: bookkeeping, cancels, the live (tenant, gen)s, the
	 * valid extent of each segment. */
	for (uint32_t i = 0; i < nno; i++) {
		struct seg *s = &l->seg[l->nseg];
		uint8_t *b;
		size_t len, off = 0, rl;
		struct rec r;

		memset(s, 0, sizeof(*s));
		s->no = nos[i];
		l->nseg++;
		l->next_no = SM_MAX(l->next_no, nos[i] + 1);
		if ((rv = seg_read(l, nos[i], &b, &len, err)) != 0)
			goto out;
		while (off < len && rec_parse(b + off, len - off, &r, &rl)) {
			uint64_t *v;

			if ((v = kmap_put(&s->tmax, r.tenant, r.tl, r.gen)) ==
			    NULL || (r.kind == 'C' && kmap_put(&cancels, k,
			    rec_key(k, &r, true), 0) == NULL) ||
			    (r.kind == 'W' && !rec_dead(l, &r) &&
			    kmap_put(&gens, k, rec_key(k, &r, false), 0) ==
			    NULL)) {
				sm_free(b);
				rv = sm_err_set(err, SM_ENOMEM, "out of "
				    "memory");
				goto out;
			}
			*v = SM_MAX(*v, r.gen);
			*max_gen = SM_MAX(*max_gen, r.gen);
			*max_seq = SM_MAX(*max_seq, r.seq);
			off += rl;
		}
		valid[i] = off;
		s->bytes = off;
		sm_free(b);
		if (off == len)
			continue;
		if (i + 1 == nno) {
			/* A write in flight at a crash: cut off. */
			char p[4096];

			seg_path(l, nos[i], p, sizeof(p));
			sm_warn("ingester", "head log: torn tail %s\t"
			    "segment=%s offset=%zu bytes=%zu", l->inspect ?
			    "(a write in flight at a crash; the server cuts "
			    "it off at open)" : "cut off", p, off, len - off);
			if (!l->inspect && truncate(p, (off_t)off) != 0)
				sm_warn("ingester", "head log: cannot cut the "
				    "torn tail\tsegment=%s err=\"%s\"", p,
				    strerror(errno));
		} else {
			char p[4096];

			seg_path(l, nos[i], p, sizeof(p));
			sm_error("ingester", "head log: corrupt record, the "
			    "rest of its segment skipped (the file is kept "
			    "for inspection; delete it to silence this)\t"
			    "segment=%s offset=%zu bytes=%zu", p, off,
			    len - off);
			(*corrupt)++;
			s->keep = true;
		}
	}
	/* The heads' old parts first (store.h), once per (tenant, gen). */
	for (uint32_t i = 1; i < kmap_ids(&gens); i++) {
		uint32_t kn;
		const char *e = sm_strtab_str(&gens.keys, i, &kn);
		size_t tl = kn - 8;

		memcpy(tenant, e, tl);
		tenant[tl] = '\0';
		if ((rv = gen_fn(arg, tenant,
		    sm_get_be64((const uint8_t *)e + tl))) != 0)
			goto out;
	}
	/* Pass 2: the live writes, in order. */
	for (uint32_t i = 0; i < nno; i++) {
		uint8_t *b;
		size_t len, off = 0, rl;
		struct rec r;

		if (kmap_ids(&gens) <= 1)
			break;
		if ((rv = seg_read(l, nos[i], &b, &len, err)) != 0)
			goto out;
		len = SM_MIN(len, valid[i]);
		while (off < len && rec_parse(b + off, len - off, &r, &rl)) {
			off += rl;
			if (r.kind != 'W' || rec_dead(l, &r) ||
			    kmap_get(&cancels, k, rec_key(k, &r, true)) !=
			    NULL)
				continue;
			memcpy(tenant, r.tenant, r.tl);
			tenant[r.tl] = '\0';
			if ((rv = fn(arg, tenant, r.gen, r.seq, r.rec,
			    r.n)) != 0)
				break;
		}
		sm_free(b);
		if (rv != 0)
			goto out;
	}
	if (!l->inspect)
		gc(l);
out:
	pthread_mutex_unlock(&l->mu);
	kmap_fini(&cancels);
	kmap_fini(&gens);
	sm_free(nos);
	sm_free(valid);
	return (rv);
}
