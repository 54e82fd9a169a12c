/*
 * headlog.c -- the head log's records and their liveness over a segment
 * log (common/seglog.h); see headlog.h.
 */
#include "headlog.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/kv.h"
#include "common/log.h"
#include "common/seglog.h"
#include "common/strtab.h"

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
	bool legacy;           /* a .log file of the older framing (replay only) */
};

struct ing_headlog {
	pthread_mutex_t mu;
	struct sm_seglog *sl;
	bool sync;
	struct seg *seg;       /* in order, legacy ones first */
	uint32_t nseg, cap;
	struct kmap floors;    /* tenant -> committed gen */
	bool inspect;          /* changes nothing on disk (headlog.h) */
	bool wfailed;          /* appends refused (headlog.h, Errors) */
	int werrno;
	char wwhy[SM_ERR_MSG_MAX];
	int64_t wprobe_ns;
};

static int legacy_list(struct ing_headlog *l, uint64_t **out, uint32_t *nout,
    struct sm_err *err);

static void
legacy_path(const struct ing_headlog *l, uint64_t no, char *p, size_t n)
{
	snprintf(p, n, "%s/%016llx.log", sm_seglog_dir(l->sl),
	    (unsigned long long)no);
}

static void
seg_path(const struct ing_headlog *l, const struct seg *s, char *p, size_t n)
{
	if (s->legacy)
		legacy_path(l, s->no, p, n);
	else
		sm_seglog_path(l->sl, s->no, p, n);
}

int
ing_headlog_open(const char *dir, bool sync, struct ing_headlog **out,
    struct sm_err *err)
{
	struct sm_seglog_cfg cfg = { .dir = dir, .name = "head log",
	    .seg_bytes = ING_HEADLOG_SEGMENT_BYTES };
	struct ing_headlog *l;
	uint64_t *nos;
	uint32_t nno;
	int rv;

	*out = NULL;
	if ((l = sm_calloc(1, sizeof(*l))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	pthread_mutex_init(&l->mu, NULL);
	l->sync = sync;
	if ((rv = sm_seglog_open(&cfg, &l->sl, err)) != 0) {
		ing_headlog_close(l);
		return (rv);
	}
	/* New segments sort after an older version's. */
	if ((rv = legacy_list(l, &nos, &nno, err)) != 0) {
		ing_headlog_close(l);
		return (rv);
	}
	if (nno > 0)
		sm_seglog_number_from(l->sl, nos[nno - 1] + 1);
	sm_free(nos);
	*out = l;
	return (0);
}

void
ing_headlog_close(struct ing_headlog *l)
{
	if (l == NULL)
		return;
	sm_seglog_close(l->sl);
	for (uint32_t i = 0; i < l->nseg; i++)
		kmap_fini(&l->seg[i].tmax);
	sm_free(l->seg);
	kmap_fini(&l->floors);
	pthread_mutex_destroy(&l->mu);
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
	struct sm_seglog_pos tail = sm_seglog_tail(l->sl);
	struct sm_err err;
	uint32_t w = 0;
	char p[4200];

	for (uint32_t i = 0; i < l->nseg; i++) {
		struct seg *s = &l->seg[i];
		bool cur = !s->legacy && s->no == tail.no;
		int rv;

		if (s->keep || !seg_dead(l, s) || (cur && s->bytes == 0)) {
			l->seg[w++] = *s;
			continue;
		}
		seg_path(l, s, p, sizeof(p));
		if (s->legacy)
			rv = unlink(p) != 0 && errno != ENOENT ?
			    sm_err_set(&err, SM_EIO, "%s", strerror(errno)) : 0;
		else
			rv = sm_seglog_remove(l->sl, s->no, &err);
		if (rv != 0) {
			sm_warn("ingester", "head log: cannot delete a dead "
			    "segment\tpath=%s err=\"%s\"", p, err.msg);
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

/* Refuse appends after the segment log failed (`cause`; caller holds
 * mu): SM_EIO naming it in err. */
static int
fail(struct ing_headlog *l, const struct sm_err *cause, struct sm_err *err)
{
	l->wfailed = true;
	l->werrno = sm_seglog_errno(l->sl);
	l->wprobe_ns = sm_mono_ns();
	snprintf(l->wwhy, sizeof(l->wwhy), "%s", cause->msg);
	return (sm_err_set(err, SM_EIO, "%s", l->wwhy));
}

static int
append(struct ing_headlog *l, uint8_t kind, const char *tenant,
    uint64_t gen, uint64_t seq, const void *rec, size_t n, struct sm_err *err)
{
	uint8_t hp[BODY_MIN + SM_KEY_MAX];
	size_t tl = strlen(tenant), hn = BODY_MIN + tl;
	struct iovec iov[2];
	struct sm_seglog_pos end = { 0, 0 };
	struct sm_err serr;
	struct seg *s;
	uint64_t *tm, no;
	int rv = 0;

	if (tl == 0 || tl > SM_KEY_MAX || hn + n > SM_SEGLOG_MAX_BODY)
		return (sm_err_set(err, SM_EINVAL, "head log: bad record "
		    "(tenant %zu bytes, %zu bytes)", tl, n));
	hp[0] = kind;
	hp[1] = (uint8_t)(tl >> 8);
	hp[2] = (uint8_t)tl;
	memcpy(hp + 3, tenant, tl);
	sm_put_be64(hp + 3 + tl, gen);
	sm_put_be64(hp + 11 + tl, seq);
	iov[0] = (struct iovec){ hp, hn };
	iov[1] = (struct iovec){ (void *)(uintptr_t)rec, n };
	pthread_mutex_lock(&l->mu);
	if (l->wfailed) {
		rv = sm_err_set(err, SM_EIO, "%s", l->wwhy);
		goto out;
	}
	if (sm_seglog_reserve(l->sl, hn + n, &no, &serr) != 0) {
		rv = fail(l, &serr, err);
		goto out;
	}
	if (l->nseg == 0 || l->seg[l->nseg - 1].no != no ||
	    l->seg[l->nseg - 1].legacy) {
		if (l->nseg == l->cap && SM_GROW(l->seg, l->cap,
		    (size_t)l->nseg + 1, 8) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		memset(&l->seg[l->nseg], 0, sizeof(l->seg[0]));
		l->seg[l->nseg++].no = no;
	}
	s = &l->seg[l->nseg - 1];
	/* Its bookkeeping first: a failure here writes nothing. */
	if ((tm = kmap_put(&s->tmax, tenant, tl, gen)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	*tm = SM_MAX(*tm, gen);
	if (sm_seglog_append(l->sl, iov, n > 0 ? 2 : 1, &end, &serr) != 0) {
		rv = fail(l, &serr, err);
		goto out;
	}
	s->bytes = end.off;
out:
	pthread_mutex_unlock(&l->mu);
	if (rv != 0 || !l->sync)
		return (rv);
	/* Group commit: one fdatasync covers every record before it. */
	if (sm_seglog_sync(l->sl, &end, &serr) != 0) {
		pthread_mutex_lock(&l->mu);
		rv = fail(l, &serr, err);
		pthread_mutex_unlock(&l->mu);
	}
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
		if (l->werrno != ENOSPC || (statvfs(sm_seglog_dir(l->sl),
		    &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize >=
		    SPACE_MIN))
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

/* The body b[0..n) of a record as *r; false when it is not one. */
static bool
body_parse(const uint8_t *b, size_t n, struct rec *r)
{
	size_t tl;

	if (n < BODY_MIN)
		return (false);
	tl = (size_t)b[1] << 8 | b[2];
	if (tl == 0 || tl > SM_KEY_MAX || BODY_MIN + tl > n ||
	    (b[0] != 'W' && b[0] != 'C'))
		return (false);
	r->kind = b[0];
	r->tenant = (const char *)b + 3;
	r->tl = tl;
	r->gen = sm_get_be64(b + 3 + tl);
	r->seq = sm_get_be64(b + 11 + tl);
	r->rec = b + BODY_MIN + tl;
	r->n = n - BODY_MIN - tl;
	return (true);
}

/*
 * The older framing, kept to replay a head log an older version left
 * (docs/architecture.md, "On-disk formats"): the same header and body,
 * but the check is the low 32 bits of mix(XXH3(len) ^ mix(XXH3(kind ..
 * seq)) ^ XXH3(rec)), split where the body's record begins.
 */
static size_t
legacy_parse(const uint8_t *p, size_t avail, struct rec *r)
{
	uint32_t bl, chk;

	if (avail < SM_SEGLOG_HDR)
		return (0);
	bl = sm_get_be32(p);
	if (bl > avail - SM_SEGLOG_HDR || !body_parse(p + SM_SEGLOG_HDR, bl, r))
		return (0);
	chk = (uint32_t)sm_hash_u64(sm_hash(p, 4) ^ sm_hash_u64(sm_hash(
	    p + SM_SEGLOG_HDR, BODY_MIN + r->tl)) ^ sm_hash(r->rec, r->n));
	return (chk == sm_get_be32(p + 4) ? SM_SEGLOG_HDR + bl : 0);
}

/*
 * The record at p[0..avail) of segment s as *r: its length, or 0 when the
 * bytes are not a whole valid record (cut short, a bad length or check).
 */
static size_t
rec_parse(const struct seg *s, const uint8_t *p, size_t avail, struct rec *r)
{
	const uint8_t *b;
	size_t n, len;

	if (s->legacy)
		return (legacy_parse(p, avail, r));
	len = sm_seglog_parse(p, avail, &b, &n);
	return (len > 0 && body_parse(b, n, r) ? len : 0);
}

/* The numbers of an older version's segments (NNNNNNNNNNNNNNNN.log). */
static int
legacy_list(struct ing_headlog *l, uint64_t **out, uint32_t *nout,
    struct sm_err *err)
{
	size_t n = 0;
	int rv;

	*nout = 0;
	if ((rv = sm_seglog_numbers(sm_seglog_dir(l->sl), ".log", out, &n,
	    err)) != 0)
		return (sm_err_prefix(err, "head log"));
	*nout = (uint32_t)n;
	return (0);
}

/* Segment s read whole into *buf (*len bytes). */
static int
seg_read(struct ing_headlog *l, const struct seg *s, uint8_t **buf,
    size_t *len, struct sm_err *err)
{
	char p[4200];

	if (!s->legacy)
		return (sm_seglog_read(l->sl, s->no, buf, len, err));
	seg_path(l, s, p, sizeof(p));
	if (sm_read_file(p, buf, len, err) != 0)
		return (sm_err_prefix(err, "head log"));
	return (0);
}

/* Cut segment s at off (a torn tail). */
static int
seg_truncate(struct ing_headlog *l, const struct seg *s, size_t off,
    struct sm_err *err)
{
	char p[4200];

	if (!s->legacy)
		return (sm_seglog_truncate(l->sl, s->no, off, err));
	seg_path(l, s, p, sizeof(p));
	if (truncate(p, (off_t)off) != 0)
		return (sm_err_set(err, SM_EIO, "%s", strerror(errno)));
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
	uint64_t *lnos = NULL, *nos = NULL, *valid = NULL;
	uint32_t nlno = 0, nno;
	size_t nnew = 0;
	uint8_t k[SM_KEY_MAX + 16];
	char tenant[SM_KEY_MAX + 1];
	int rv;

	memset(&cancels, 0, sizeof(cancels));
	memset(&gens, 0, sizeof(gens));
	pthread_mutex_lock(&l->mu);
	SM_ASSERT(l->nseg == 0 && sm_seglog_tail(l->sl).no == 0);
	/* An older version's segments first: theirs are the older writes. */
	if ((rv = legacy_list(l, &lnos, &nlno, err)) != 0 ||
	    (rv = sm_seglog_list(l->sl, &nos, &nnew, err)) != 0)
		goto out;
	nno = nlno + (uint32_t)nnew;
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
		s->legacy = i < nlno;
		s->no = s->legacy ? lnos[i] : nos[i - nlno];
		l->nseg++;
		if ((rv = seg_read(l, s, &b, &len, err)) != 0)
			goto out;
		while (off < len && (rl = rec_parse(s, b + off, len - off,
		    &r)) > 0) {
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
			struct sm_err terr;
			char p[4200];

			seg_path(l, s, p, sizeof(p));
			sm_warn("ingester", "head log: torn tail %s\t"
			    "segment=%s offset=%zu bytes=%zu", l->inspect ?
			    "(a write in flight at a crash; the server cuts "
			    "it off at open)" : "cut off", p, off, len - off);
			if (!l->inspect && seg_truncate(l, s, off, &terr) != 0)
				sm_warn("ingester", "head log: cannot cut the "
				    "torn tail\tsegment=%s err=\"%s\"", p,
				    terr.msg);
		} else {
			char p[4200];

			seg_path(l, s, p, sizeof(p));
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
		const struct seg *s = &l->seg[i];
		uint8_t *b;
		size_t len, off = 0, rl;
		struct rec r;

		if (kmap_ids(&gens) <= 1)
			break;
		if ((rv = seg_read(l, s, &b, &len, err)) != 0)
			goto out;
		len = SM_MIN(len, valid[i]);
		while (off < len && (rl = rec_parse(s, b + off, len - off,
		    &r)) > 0) {
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
	sm_free(lnos);
	sm_free(nos);
	sm_free(valid);
	return (rv);
}
