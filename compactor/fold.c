/*
 * fold.c -- the compactor's de-duplication of the bucket (fold.h tells
 * the design; ingester/fold.h builds the block).
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/arena.h"
#include "common/combo.h"
#include "common/log.h"
#include "common/tiers.h"
#include "ingester/fold.h"
#include "ingester/gateway.h"
#include "ingester/ship.h"
#include "ingester/store.h"

#include "bucket_index.h"
#include "fold.h"

#define HOUR_MS 3600000LL
#define FOLD_ZSTD_LEVEL 3

struct cpt_fold {
	struct sm_bucket *bucket;
	struct ing_store *store;
	uint64_t last_gen;             /* the largest fold gen made or seen */
	bool kill_after_object;        /* SMOLDER_TEST_FAULTS=fold-kill */
};

static int
rm_ent(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return (remove(path) != 0 && errno != ENOENT ? -1 : 0);
}

int
cpt_fold_create(struct sm_bucket *bucket, const char *scratch,
    struct cpt_fold **out, struct sm_err *err)
{
	struct sm_kv_opts kvo;
	struct cpt_fold *f;
	int rv;

	*out = NULL;
	/* scratch only: what a crash left is never needed */
	if (nftw(scratch, rm_ent, 16, FTW_DEPTH | FTW_PHYS) != 0 &&
	    errno != ENOENT)
		return (sm_err_set(err, SM_EIO, "emptying %s: %s", scratch,
		    strerror(errno)));
	if (mkdir(scratch, 0755) != 0 && errno != EEXIST)
		return (sm_err_set(err, SM_EIO, "%s: %s", scratch,
		    strerror(errno)));
	if ((f = sm_calloc(1, sizeof(*f))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	sm_kv_opts_default(&kvo);
	kvo.block_cache_bytes = 8u << 20;
	kvo.write_buffer_bytes = 8u << 20;
	kvo.max_background_jobs = 1;
	if ((rv = ing_store_open(scratch, &kvo, 64u << 20, &f->store,
	    err)) != 0) {
		sm_free(f);
		return (rv);
	}
	f->bucket = bucket;
	if (sm_test_fault("fold-kill")) {
		f->kill_after_object = true;
		sm_warn("compactor", "fault injection: SIGKILL once the first "
		    "fold's object is stored, before its meta.json "
		    "(SMOLDER_TEST_FAULTS)");
	}
	*out = f;
	return (0);
}

void
cpt_fold_destroy(struct cpt_fold *f)
{
	if (f == NULL)
		return;
	ing_store_close(f->store);
	sm_free(f);
}

/* --- one tenant's blocks ----------------------------------------------------- */

static bool
is_fold(const struct ing_bucket_block *b)
{
	return (strcmp(b->inc, ING_FOLD_INC) == 0 && b->tier_ms == 0 &&
	    b->fold_end > b->fold_start);
}

/* A tier block of the fold source (ship.h). */
static bool
is_fold_tier(const struct ing_bucket_block *b)
{
	return (strcmp(b->inc, ING_FOLD_INC) == 0 && b->tier_ms > 0 &&
	    b->fold_end > b->fold_start);
}

static bool
is_live(const struct ing_bucket_block *b)
{
	return (!b->marked && !b->replaced && !b->dup);
}

/* The live fold of hour hs (at most one: the scan flags the others). */
static const struct ing_bucket_block *
find_fold(const struct ing_bucket_block *v, uint32_t n, int64_t hs)
{
	for (uint32_t i = 0; i < n; i++)
		if (is_fold(&v[i]) && is_live(&v[i]) && v[i].fold_start == hs)
			return (&v[i]);
	return (NULL);
}

static bool
fold_lists(const struct ing_bucket_block *fold, const char *inc,
    uint64_t gen)
{
	for (uint32_t i = 0; i < fold->ninputs; i++)
		if (fold->inputs[i].gen == gen &&
		    strcmp(fold->inputs[i].inc, inc) == 0)
			return (true);
	return (false);
}

/* A raw block of an ingester source, which folds take as input. */
static bool
is_input(const struct ing_bucket_block *b)
{
	return (strcmp(b->inc, ING_FOLD_INC) != 0 && b->tier_ms == 0 &&
	    b->min_t < b->max_t &&
	    (b->max_t - 1) / HOUR_MS - b->min_t / HOUR_MS < CPT_FOLD_MAX_SPAN);
}

/*
 * The clock hours input b has data in, as some live fold that lists it
 * recorded (ship.h, ing_fold_ref); false while none does.  A block's
 * range [min_t, max_t) spans hours it has no bucket in (an hourly cut
 * spans two; a restart's block may span a day): only the hours with data
 * are folded and waited for.
 */
static bool
input_hours(const struct ing_bucket_block *v, uint32_t n,
    const struct ing_bucket_block *b, int64_t *first, uint64_t *mask)
{
	for (uint32_t i = 0; i < n; i++) {
		if (!is_fold(&v[i]) || !is_live(&v[i]))
			continue;
		for (uint32_t k = 0; k < v[i].ninputs; k++) {
			const struct ing_fold_ref *r = &v[i].inputs[k];

			if (r->gen == b->gen && r->hour_mask != 0 &&
			    strcmp(r->inc, b->inc) == 0) {
				*first = r->first_hour;
				*mask = r->hour_mask;
				return (true);
			}
		}
	}
	return (false);
}

/* May input b have data in hour hs (all of its span while not known)? */
static bool
input_in_hour(const struct ing_bucket_block *v, uint32_t n,
    const struct ing_bucket_block *b, int64_t hs)
{
	int64_t first, k;
	uint64_t mask;

	if (hs + HOUR_MS <= b->min_t || hs >= b->max_t)
		return (false);
	if (!input_hours(v, n, b, &first, &mask))
		return (true);
	k = (hs - first) / HOUR_MS;
	return (hs >= first && k < 64 && (mask >> k) & 1);
}

/* Is every clock hour input b has data in folded by a live fold that
 * lists it (and are those hours known)? */
static bool
folded_all(const struct ing_bucket_block *v, uint32_t n,
    const struct ing_bucket_block *b)
{
	int64_t first;
	uint64_t mask;

	if (!input_hours(v, n, b, &first, &mask))
		return (false);
	for (uint32_t k = 0; k < 64; k++) {
		const struct ing_bucket_block *fold;

		if (!((mask >> k) & 1))
			continue;
		fold = find_fold(v, n, first + (int64_t)k * HOUR_MS);
		if (fold == NULL || !fold_lists(fold, b->inc, b->gen))
			return (false);
	}
	return (true);
}

/* Blocks imported into the scratch store for this tenant. */
struct imp {
	const struct ing_bucket_block *bk;
	char *lt;                      /* local tenant "<tenant>|<inc>" */
	struct ing_block_meta meta;
	int64_t first_hour;            /* the hours it has data in */
	uint64_t hour_mask;
	int rv;                        /* 0: imported; else why not */
};

struct tenant_ctx {
	struct cpt_fold *f;
	const struct ing_bucket_block *v;
	uint32_t n;
	struct sm_arena *a;
	struct imp *imp;
	uint32_t nimp, impcap;
	struct cpt_fold_stats *st;
	int64_t now;
};

/* The clock hours imported block x has buckets in. */
static int
data_hours(struct tenant_ctx *c, struct imp *x, struct sm_err *err)
{
	const struct ing_set *set = NULL;
	struct ing_cache_ent *ent = NULL;
	int rv;

	x->first_hour = sm_floor_to(x->meta.min_t, HOUR_MS);
	x->hour_mask = 0;
	if ((rv = ing_store_block_index(c->f->store, x->lt, &x->meta, &set,
	    &ent, err)) != 0)
		return (rv);
	for (uint32_t k = 0; k < set->nseries; k++) {
		const struct ing_series *sr = set->series[k];

		for (uint32_t i = 0; i < sr->nb; i++) {
			int64_t h = (sm_floor_to(sr->b[i].t, HOUR_MS) -
			    x->first_hour) / HOUR_MS;

			if (h >= 0 && h < 64)
				x->hour_mask |= 1ull << h;
		}
	}
	ing_store_release(c->f->store, ent);
	return (0);
}

/* Import bk into the scratch store, once per pass and tenant. */
static struct imp *
import(struct tenant_ctx *c, const struct ing_bucket_block *bk,
    struct sm_err *err)
{
	struct sm_buf obj = SM_BUF_INIT;
	struct ing_store_part *parts = NULL;
	struct ing_ship_rec rec = { .shipped = true };
	const struct ing_store_part *mp = NULL;
	struct imp *x;
	uint32_t np = 0;

	for (uint32_t i = 0; i < c->nimp; i++)
		if (c->imp[i].bk == bk) {
			if (c->imp[i].rv != 0)
				sm_err_set(err, c->imp[i].rv, "%s: not "
				    "imported before", bk->meta_key);
			return (&c->imp[i]);
		}
	if (SM_GROW(c->imp, c->impcap, c->nimp + 1, 16) != 0) {
		sm_err_set(err, SM_ENOMEM, "out of memory");
		return (NULL);
	}
	x = &c->imp[c->nimp];
	memset(x, 0, sizeof(*x));
	x->bk = bk;
	if ((x->lt = ing_gateway_tenant(c->a, bk->tenant, bk->inc,
	    err)) == NULL) {
		x->rv = err->code;
		return (NULL);
	}
	c->nimp++;
	if ((x->rv = ing_ship_fetch(c->f->bucket, bk, &obj, &parts, &np,
	    err)) != 0)
		goto out;
	c->st->bytes_read += obj.len;
	for (uint32_t i = 0; i < np && mp == NULL; i++)
		mp = parts[i].kind == 'M' ? &parts[i] : NULL;
	if (mp == NULL) {
		x->rv = sm_err_set(err, SM_ECORRUPT, "%s: no meta part",
		    bk->meta_key);
		goto out;
	}
	memcpy(rec.ulid, bk->ulid, 16);
	if ((x->rv = ing_block_meta_decode(mp->v, mp->n, &x->meta,
	    err)) != 0 ||
	    (x->rv = ing_store_block_import(c->f->store, x->lt, bk->gen,
	    parts, np, &rec, err)) != 0)
		goto out;
	x->rv = data_hours(c, x, err);
out:
	sm_free(parts);
	sm_buf_fini(&obj);
	return (x);
}

static void
tenant_ctx_fini(struct tenant_ctx *c)
{
	struct sm_err e;

	for (uint32_t i = 0; i < c->nimp; i++)
		if (c->imp[i].lt != NULL)
			(void)ing_store_block_delete(c->f->store, c->imp[i].lt,
			    c->imp[i].bk->gen, &e);
	sm_free(c->imp);
}

/* --- the selection ----------------------------------------------------------- */

/* One upload's record in one source. */
struct rrec {
	uint64_t fp;
	int64_t bt;                    /* its bucket */
	int64_t t;
	uint8_t id[16];
	int64_t total;
	uint32_t src;
};

/* A source's bucket as its index counts it. */
struct rcnt {
	uint64_t fp;
	int64_t t;
	uint32_t src;
	uint32_t profiles;
};

/* One (series, bucket) of the fold: how each source counts, and the
 * union's upload count. */
struct cell {
	uint64_t fp;
	int64_t t;
	uint32_t pos, neg;             /* coefficient +1 / -1, by source bit */
	uint32_t nu;
};

struct sel {
	struct cell *c;
	uint32_t n;
};

static int
rrec_cmp(const void *a, const void *b)
{
	const struct rrec *x = a, *y = b;
	int c;

	if ((c = SM_CMP(x->fp, y->fp)) != 0 ||
	    (c = SM_CMP(x->bt, y->bt)) != 0 || (c = SM_CMP(x->t, y->t)) != 0 ||
	    (c = memcmp(x->id, y->id, 16)) != 0)
		return (c);
	return (SM_CMP(x->src, y->src));
}

static int
rcnt_cmp(const void *a, const void *b)
{
	const struct rcnt *x = a, *y = b;
	int c;

	if ((c = SM_CMP(x->fp, y->fp)) != 0 || (c = SM_CMP(x->t, y->t)) != 0)
		return (c);
	return (SM_CMP(x->src, y->src));
}

static int
cell_cmp(const void *a, const void *b)
{
	const struct cell *x = a, *y = b;

	return (x->fp != y->fp ? SM_CMP(x->fp, y->fp) : SM_CMP(x->t, y->t));
}

static struct cell *
cell_find(const struct sel *s, uint64_t fp, int64_t t)
{
	struct cell key = { .fp = fp, .t = t };

	return (s->n == 0 ? NULL : bsearch(&key, s->c, s->n, sizeof(*s->c),
	    cell_cmp));
}

static int
sel_coef(void *arg, uint32_t src, uint64_t fp, int64_t t)
{
	const struct cell *c = cell_find(arg, fp, t);

	if (c == NULL || src >= 32)
		return (0);
	return ((c->pos >> src) & 1 ? 1 : (c->neg >> src) & 1 ? -1 : 0);
}

static uint32_t
sel_profiles(void *arg, uint64_t fp, int64_t t)
{
	const struct cell *c = cell_find(arg, fp, t);

	return (c == NULL ? 0 : c->nu);
}

/* --- one hour ---------------------------------------------------------------- */

struct hour {
	struct rrec *r;
	uint32_t nr, rcap;
	struct rcnt *k;
	uint32_t nk, kcap;
	struct ing_prof_rec *u;        /* the union's records */
	uint32_t nu, ucap;
	struct sel sel;
	uint32_t ccap;
	struct ing_fold_input *in;
	uint32_t nin;
	struct ing_fold_ref *refs;
	uint32_t nrefs, refcap;
	uint32_t *masks;
	uint32_t mcap;
};

static void
hour_fini(struct hour *h)
{
	sm_free(h->r);
	sm_free(h->k);
	sm_free(h->u);
	sm_free(h->sel.c);
	sm_free(h->in);
	sm_free(h->refs);
	sm_free(h->masks);
}

/* Input x's records and index counts inside [hs, he), as source src. */
static int
gather_input(struct tenant_ctx *c, struct hour *h, const struct imp *x,
    uint32_t src, int64_t hs, int64_t he, struct sm_err *err)
{
	const struct ing_set *set = NULL;
	struct ing_cache_ent *ent = NULL;
	struct ing_prof_rec *pr = NULL;
	uint32_t npr = 0;
	int rv;

	if ((rv = ing_store_block_profiles(c->f->store, x->lt, &x->meta, &pr,
	    &npr, err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < npr; i++) {
		struct rrec *r;

		if (pr[i].t < hs || pr[i].t >= he)
			continue;
		if (SM_GROW(h->r, h->rcap, h->nr + 1, 256) != 0) {
			rv = SM_ENOMEM;
			goto out;
		}
		r = &h->r[h->nr++];
		r->fp = pr[i].fp;
		r->t = pr[i].t;
		r->bt = sm_floor_to(pr[i].t, x->meta.bucket_ms);
		memcpy(r->id, pr[i].id, 16);
		r->total = pr[i].total;
		r->src = src;
	}
	if ((rv = ing_store_block_index(c->f->store, x->lt, &x->meta, &set,
	    &ent, err)) != 0)
		goto out;
	for (uint32_t k = 0; k < set->nseries; k++) {
		const struct ing_series *sr = set->series[k];

		for (uint32_t i = 0; i < sr->nb; i++) {
			if (sr->b[i].t < hs || sr->b[i].t >= he)
				continue;
			if (SM_GROW(h->k, h->kcap, h->nk + 1, 256) != 0) {
				rv = SM_ENOMEM;
				goto out;
			}
			h->k[h->nk++] = (struct rcnt){ sr->fp, sr->b[i].t,
			    src, sr->b[i].profiles };
		}
	}
out:
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	if (ent != NULL)
		ing_store_release(c->f->store, ent);
	sm_free(pr);
	return (rv);
}

/*
 * The cells of the hour and their coefficients.  0; SM_EAGAIN (err says
 * which cell) when some cell has no exact combination or its records and
 * counts disagree; SM_ENOMEM.
 */
static int
select_cells(struct hour *h, uint32_t nsrc, int prefer, struct sm_err *err)
{
	uint32_t i = 0, j = 0;

	if (h->nr > 1)
		qsort(h->r, h->nr, sizeof(*h->r), rrec_cmp);
	if (h->nk > 1)
		qsort(h->k, h->nk, sizeof(*h->k), rcnt_cmp);
	/* cells from the index counts, summed per (fp, t, source) */
	while (j < h->nk) {
		uint32_t cnt[32] = { 0 }, m = 0;
		struct cell *cl;
		uint32_t e = j;

		while (e < h->nk && h->k[e].fp == h->k[j].fp &&
		    h->k[e].t == h->k[j].t) {
			cnt[h->k[e].src] += h->k[e].profiles;
			e++;
		}
		if (SM_GROW(h->sel.c, h->ccap, h->sel.n + 1, 256) != 0)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		cl = &h->sel.c[h->sel.n++];
		*cl = (struct cell){ h->k[j].fp, h->k[j].t, 0, 0, 0 };
		/* its records: skip those of cells before it */
		while (i < h->nr && (h->r[i].fp < cl->fp || (h->r[i].fp ==
		    cl->fp && h->r[i].bt < cl->t)))
			i++;
		{
			uint32_t rc[32] = { 0 };

			while (i < h->nr && h->r[i].fp == cl->fp &&
			    h->r[i].bt == cl->t) {
				uint32_t s = i, mask = 0;

				while (i < h->nr && h->r[i].fp == cl->fp &&
				    h->r[i].bt == cl->t && h->r[i].t ==
				    h->r[s].t && memcmp(h->r[i].id,
				    h->r[s].id, 16) == 0) {
					mask |= 1u << h->r[i].src;
					rc[h->r[i].src]++;
					i++;
				}
				if (SM_GROW(h->masks, h->mcap, m + 1, 64) != 0 ||
				    SM_GROW(h->u, h->ucap, h->nu + 1, 256) != 0)
					return (sm_err_set(err, SM_ENOMEM,
					    "out of memory"));
				h->masks[m++] = mask;
				h->u[h->nu++] = (struct ing_prof_rec){
				    h->r[s].fp, h->r[s].t, h->r[s].total,
				    { 0 } };
				memcpy(h->u[h->nu - 1].id, h->r[s].id, 16);
			}
			for (uint32_t s = 0; s < nsrc; s++)
				if (rc[s] != cnt[s])
					return (sm_err_set(err, SM_EAGAIN,
					    "series %016llx bucket %lld: "
					    "source %u has %u upload records "
					    "for %u profiles",
					    (unsigned long long)cl->fp,
					    (long long)cl->t, s, rc[s],
					    cnt[s]));
		}
		cl->nu = m;
		if (m == 0 || !sm_combo_solve(h->masks, m, prefer, &cl->pos,
		    &cl->neg))
			return (sm_err_set(err, SM_EAGAIN, "series %016llx "
			    "bucket %lld: no source or exact combination of "
			    "sources holds all %u uploads",
			    (unsigned long long)cl->fp, (long long)cl->t, m));
		j = e;
	}
	return (0);
}

/* The gen of the next fold-source block: above every one made or seen,
 * and the clock's ms, so a restarted compactor keeps them increasing. */
static uint64_t
next_gen(struct tenant_ctx *c)
{
	return ((uint64_t)c->now > c->f->last_gen ? (uint64_t)c->now :
	    c->f->last_gen + 1);
}

/*
 * Store the encoded fold-source block e in the scratch store under ltf,
 * upload it as a block of `tenant` from source sc, and delete it from
 * the scratch store again.  0 or the store's or the bucket's error.
 */
static int
upload(struct tenant_ctx *c, const char *ltf, const char *tenant,
    const struct ing_block_enc *e, struct ing_ship_src *sc,
    char ulid[ING_ULID_LEN + 1], uint64_t *bytes, struct sm_err *err)
{
	struct sm_err e2;
	int rv;

	c->f->last_gen = e->meta.gen;
	rv = e->meta.tier_ms > 0 ? ing_store_block_put(c->f->store, ltf, e,
	    err) : ing_store_block_commit(c->f->store, ltf, e, err);
	if (rv != 0)
		return (rv);
	sc->instance = ING_FOLD_INSTANCE;
	sc->inc = ING_FOLD_INC;
	sc->kill_after_object = c->f->kill_after_object;
	rv = ing_ship_put(c->f->bucket, c->f->store, ltf, tenant, &e->meta, sc,
	    ulid, bytes, err);
	(void)ing_store_block_delete(c->f->store, ltf, e->meta.gen, &e2);
	return (rv);
}

/* Fold hour [hs, hs + 1 h) of the tenant. */
static int
fold_hour(struct tenant_ctx *c, int64_t hs, struct sm_err *err)
{
	const struct ing_bucket_block *old = find_fold(c->v, c->n, hs);
	const char *src_inc[32];
	struct ing_block_enc enc;
	struct ing_ship_src sc = { 0 };
	struct hour h = { 0 };
	int64_t he = hs + HOUR_MS, bucket_ms = 0;
	uint32_t nsrc = 0;
	uint64_t gen, bytes = 0;
	char ulid[ING_ULID_LEN + 1], *ltf;
	int prefer = -1, rv = 0;
	bool empty = false;

	memset(&enc, 0, sizeof(enc));
	if ((h.in = sm_calloc(c->n, sizeof(*h.in))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < c->n; i++) {
		const struct ing_bucket_block *bk = &c->v[i];
		struct imp *x;
		uint32_t s;

		if (bk != old && (!is_live(bk) || !is_input(bk) ||
		    !input_in_hour(c->v, c->n, bk, hs)))
			continue;
		for (s = 0; s < nsrc && strcmp(src_inc[s], bk->inc) != 0; s++)
			;
		if (s == nsrc) {
			if (nsrc == 32) {
				rv = sm_err_set(err, SM_EAGAIN, "more than 32 "
				    "sources");
				goto out;
			}
			src_inc[nsrc++] = bk->inc;
		}
		if (bk == old)
			prefer = (int)s;
		if ((x = import(c, bk, err)) == NULL) {
			rv = err->code;
			goto out;
		}
		if ((rv = x->rv) != 0)
			goto out;
		if (bucket_ms != 0 && x->meta.bucket_ms != bucket_ms) {
			rv = sm_err_set(err, SM_EAGAIN, "bucket widths %lld and "
			    "%lld", (long long)bucket_ms,
			    (long long)x->meta.bucket_ms);
			goto out;
		}
		bucket_ms = x->meta.bucket_ms;
		h.in[h.nin++] = (struct ing_fold_input){ x->lt, x->meta, s };
		if ((rv = gather_input(c, &h, x, s, hs, he, err)) != 0)
			goto out;
		/* what the fold stands for */
		if (bk == old) {
			for (uint32_t k = 0; k < old->ninputs; k++) {
				if (SM_GROW(h.refs, h.refcap, h.nrefs + 1,
				    16) != 0)
					goto nomem;
				h.refs[h.nrefs++] = old->inputs[k];
			}
		} else {
			if (SM_GROW(h.refs, h.refcap, h.nrefs + 1, 16) != 0)
				goto nomem;
			memcpy(h.refs[h.nrefs].inc, bk->inc, 33);
			h.refs[h.nrefs].first_hour = x->first_hour;
			h.refs[h.nrefs].hour_mask = x->hour_mask;
			h.refs[h.nrefs++].gen = bk->gen;
		}
	}
	if (h.nin == 0 || (old != NULL && h.nin == 1))
		goto out;     /* nothing new */
	if ((rv = select_cells(&h, nsrc, prefer, err)) != 0)
		goto out;
	gen = next_gen(c);
	{
		struct ing_fold_sel sel = { sel_coef, sel_profiles, &h.sel };

		if ((rv = ing_fold_build(c->f->store, h.in, h.nin, bucket_ms,
		    hs, he, gen, &sel, h.u, h.nu, FOLD_ZSTD_LEVEL, &enc,
		    &empty, err)) != 0 || empty)
			goto out;
	}
	if ((ltf = ing_gateway_tenant(c->a, c->v[0].tenant, ING_FOLD_INC,
	    err)) == NULL) {
		rv = err->code;
		goto out;
	}
	sc.replaces = old != NULL ? &old->gen : NULL;
	sc.nreplaces = old != NULL;
	sc.fold_start = hs;
	sc.fold_end = he;
	sc.inputs = h.refs;
	sc.ninputs = h.nrefs;
	if ((rv = upload(c, ltf, c->v[0].tenant, &enc, &sc, ulid, &bytes,
	    err)) != 0)
		goto out;
	c->st->folded++;
	c->st->bytes_written += bytes;
	sm_info("compactor", "hour folded\ttenant=%s hour=%lld inputs=%u "
	    "sources=%u series=%u bytes=%llu ulid=%s", c->v[0].tenant,
	    (long long)hs, h.nin, nsrc, enc.meta.nseries,
	    (unsigned long long)bytes, ulid);
	goto out;
nomem:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	ing_block_enc_fini(&enc);
	hour_fini(&h);
	return (rv);
}

/* --- the fold source's tiers ---------------------------------------------------- */

/* Build and upload the tier of width w over the day from ws of the folds
 * fv[0..nf) (sorted by gen). */
static int
fold_tier(struct tenant_ctx *c, int64_t ws, int64_t w,
    const struct ing_bucket_block *const *fv, uint32_t nf, struct sm_err *err)
{
	struct ing_block_meta *metas = NULL;
	struct ing_block_enc enc;
	struct ing_ship_src sc = { 0 };
	uint64_t *covers = NULL, cover_gen = 0, gen, bytes = 0;
	char ulid[ING_ULID_LEN + 1];
	const char *ltf = NULL;
	bool empty = false;
	int rv = 0;

	memset(&enc, 0, sizeof(enc));
	if ((metas = sm_calloc(nf, sizeof(*metas))) == NULL ||
	    (covers = sm_calloc(nf, sizeof(*covers))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < nf; i++) {
		struct imp *x = import(c, fv[i], err);

		if (x == NULL) {
			rv = err->code;
			goto out;
		}
		if ((rv = x->rv) != 0)
			goto out;
		metas[i] = x->meta;
		covers[i] = fv[i]->gen;
		cover_gen = SM_MAX(cover_gen, fv[i]->gen);
		ltf = x->lt;
	}
	gen = next_gen(c);
	if ((rv = ing_fold_tier_build(c->f->store, ltf, metas, nf, w, ws,
	    ws + SM_TIERS_DAY_MS, gen, cover_gen, FOLD_ZSTD_LEVEL, &enc,
	    &empty, err)) != 0 || empty)
		goto out;
	sc.fold_start = ws;
	sc.fold_end = ws + SM_TIERS_DAY_MS;
	sc.covers = covers;
	sc.ncovers = nf;
	if ((rv = upload(c, ltf, fv[0]->tenant, &enc, &sc, ulid, &bytes,
	    err)) != 0)
		goto out;
	c->st->tiers++;
	c->st->bytes_written += bytes;
	sm_info("compactor", "fold tier built\ttenant=%s window=%lld "
	    "width_ms=%lld folds=%u bytes=%llu ulid=%s", fv[0]->tenant,
	    (long long)ws, (long long)w, nf, (unsigned long long)bytes, ulid);
out:
	ing_block_enc_fini(&enc);
	sm_free(metas);
	sm_free(covers);
	return (rv);
}

/* Does live fold tier t cover exactly fv[0..nf) (sorted by gen)? */
static bool
covers_exactly(const struct ing_bucket_block *t,
    const struct ing_bucket_block *const *fv, uint32_t nf)
{
	if (t->ncovers != nf)
		return (false);
	for (uint32_t i = 0; i < nf; i++)
		if (t->covers[i] != fv[i]->gen)
			return (false);
	return (true);
}

/*
 * The fold source's tiers (fold.h): every day window that ended `delay`
 * ago, above the floor, with folds and no hour still due gets a tier per
 * width over exactly its folds, unless one is read already.
 */
static void
fold_tiers(struct tenant_ctx *c, const struct sm_tiers *tiers,
    const int64_t *due, uint32_t ndue, int64_t delay, int64_t fl,
    uint32_t *budget)
{
	const struct ing_bucket_block **fv;
	int64_t *ws = NULL;
	uint32_t nws = 0, wscap = 0;

	if (tiers == NULL || tiers->n == 0 ||
	    (fv = sm_calloc(SM_MAX(c->n, 1), sizeof(*fv))) == NULL)
		return;
	for (uint32_t i = 0; i < c->n; i++) {
		int64_t d = sm_floor_to(c->v[i].fold_start, SM_TIERS_DAY_MS);
		bool seen = false;

		if (!is_fold(&c->v[i]) || !is_live(&c->v[i]))
			continue;
		for (uint32_t k = 0; k < nws && !seen; k++)
			seen = ws[k] == d;
		if (!seen && SM_GROW(ws, wscap, nws + 1, 8) == 0)
			ws[nws++] = d;
	}
	for (uint32_t k = 0; k < nws; k++) {
		int64_t we = ws[k] + SM_TIERS_DAY_MS;
		uint32_t nf = 0;
		bool busy = false;

		if (we > c->now - delay || (fl > 0 && we <= fl))
			continue;
		for (uint32_t j = 0; j < ndue && !busy; j++)
			busy = due[j] >= ws[k] && due[j] < we;
		if (busy)
			continue;     /* an hour of it is still to fold */
		for (uint32_t i = 0; i < c->n; i++)
			if (is_fold(&c->v[i]) && is_live(&c->v[i]) &&
			    c->v[i].fold_start >= ws[k] &&
			    c->v[i].fold_start < we)
				fv[nf++] = &c->v[i];
		for (uint32_t t = 0; t < tiers->n && *budget > 0; t++) {
			bool have = false;
			struct sm_err e;

			for (uint32_t i = 0; i < c->n && !have; i++)
				have = is_fold_tier(&c->v[i]) &&
				    is_live(&c->v[i]) &&
				    c->v[i].tier_ms == tiers->w[t] &&
				    c->v[i].fold_start == ws[k] &&
				    covers_exactly(&c->v[i], fv, nf);
			if (have)
				continue;
			(*budget)--;
			sm_err_clear(&e);
			if (fold_tier(c, ws[k], tiers->w[t], fv, nf, &e) != 0) {
				c->st->failed++;
				sm_error("compactor", "fold tier failed\t"
				    "tenant=%s window=%lld width_ms=%lld "
				    "err=\"%s\"", c->v[0].tenant,
				    (long long)ws[k], (long long)tiers->w[t],
				    e.msg);
			}
		}
	}
	sm_free(ws);
	sm_free(fv);
}

/* --- the pass ------------------------------------------------------------------ */

/* Is replica tier b's data in a fold tier of the same width and window
 * and in folds only (no raw block of its source left there)? */
static bool
tier_superseded(const struct ing_bucket_block *v, uint32_t n,
    const struct ing_bucket_block *b)
{
	bool have = false;

	for (uint32_t i = 0; i < n; i++) {
		const struct ing_bucket_block *x = &v[i];

		if (!is_live(x))
			continue;
		if (is_fold_tier(x) && x->tier_ms == b->tier_ms &&
		    x->fold_start == b->cover_start &&
		    x->fold_end == b->cover_end)
			have = true;
		if (strcmp(x->inc, b->inc) == 0 && x->tier_ms == 0 &&
		    x->min_t < b->cover_end && x->max_t > b->cover_start)
			return (false);
	}
	return (have);
}

/* Write b's deletion mark for `reason`; a failure is logged and the next
 * pass tries again. */
static void
mark_block(struct cpt_fold *f, struct ing_bucket_block *b, int64_t now,
    const char *reason, struct cpt_fold_stats *st)
{
	struct sm_err e;

	if (cpt_bucket_mark(f->bucket, b->meta_key, now, reason, &e) != 0) {
		sm_warn("compactor", "deletion mark not written\tkey=%s "
		    "err=\"%s\"", b->meta_key, e.msg);
		return;
	}
	b->marked = true;
	st->marked++;
}

/* Marks (fold.h, step 2) for the tenant's blocks v[0..n). */
static void
mark_tenant(struct cpt_fold *f, struct ing_bucket_block *v, uint32_t n,
    int64_t now, struct cpt_fold_stats *st)
{
	for (uint32_t i = 0; i < n; i++) {
		struct ing_bucket_block *b = &v[i];
		const char *reason = NULL;

		if (b->marked)
			continue;
		if (b->dup)
			reason = "duplicate";
		else if (b->replaced)
			reason = strcmp(b->inc, ING_FOLD_INC) == 0 ?
			    "superseded" : "replaced";
		else if (is_input(b) && folded_all(v, n, b))
			reason = "folded";
		if (reason != NULL)
			mark_block(f, b, now, reason, st);
	}
	/* a replica's tier once the fold source has its own over the same
	 * window and that replica's raw blocks there are all folded */
	for (uint32_t i = 0; i < n; i++) {
		struct ing_bucket_block *b = &v[i];

		if (is_live(b) && b->tier_ms > 0 &&
		    strcmp(b->inc, ING_FOLD_INC) != 0 &&
		    b->cover_end > b->cover_start && tier_superseded(v, n, b))
			mark_block(f, b, now, "folded", st);
	}
}

static void
fold_tenant(struct cpt_fold *f, struct ing_bucket_block *v, uint32_t n,
    int64_t now, int64_t delay, int64_t fl, const struct sm_tiers *tiers,
    struct cpt_fold_stats *st, uint32_t *budget)
{
	struct tenant_ctx c = { .f = f, .v = v, .n = n, .st = st,
	    .now = now };
	int64_t *due = NULL;
	uint32_t ndue = 0, duecap = 0;

	for (uint32_t i = 0; i < n; i++)
		if (strcmp(v[i].inc, ING_FOLD_INC) == 0 && v[i].gen >
		    f->last_gen)
			f->last_gen = v[i].gen;
	mark_tenant(f, v, n, now, st);
	for (uint32_t i = 0; i < n; i++) {
		const struct ing_bucket_block *b = &v[i];

		if (!is_live(b) || !is_input(b))
			continue;
		for (int64_t hs = sm_floor_to(b->min_t, HOUR_MS);
		    hs < b->max_t; hs += HOUR_MS) {
			const struct ing_bucket_block *fold;
			bool seen = false;

			if (hs + HOUR_MS > now - delay ||
			    (fl > 0 && hs + HOUR_MS <= fl) ||
			    !input_in_hour(v, n, b, hs))
				continue;
			if ((fold = find_fold(v, n, hs)) != NULL &&
			    fold_lists(fold, b->inc, b->gen))
				continue;
			for (uint32_t k = 0; k < ndue && !seen; k++)
				seen = due[k] == hs;
			if (seen)
				continue;
			if (SM_GROW(due, duecap, ndue + 1, 16) != 0) {
				sm_free(due);
				st->failed++;
				return;
			}
			due[ndue++] = hs;
		}
	}
	if (ndue > 1)
		qsort(due, ndue, sizeof(*due), sm_i64_cmp);
	if ((c.a = sm_arena_create(0)) == NULL) {
		sm_free(due);
		st->failed++;
		return;
	}
	for (uint32_t k = 0; k < ndue && *budget > 0; k++) {
		struct sm_err e;
		int rv;

		(*budget)--;
		st->hours++;
		sm_err_clear(&e);
		if ((rv = fold_hour(&c, due[k], &e)) == 0)
			continue;
		if (rv == SM_EAGAIN) {
			st->unresolved++;
			sm_warn("compactor", "hour not folded: no exact fold\t"
			    "tenant=%s hour=%lld why=\"%s\"", v[0].tenant,
			    (long long)due[k], e.msg);
		} else {
			st->failed++;
			sm_error("compactor", "fold failed\ttenant=%s hour=%lld "
			    "err=\"%s\"", v[0].tenant, (long long)due[k],
			    e.msg);
		}
	}
	fold_tiers(&c, tiers, due, ndue, delay, fl, budget);
	tenant_ctx_fini(&c);
	sm_arena_destroy(c.a);
	sm_free(due);
}

int
cpt_fold_pass(struct cpt_fold *f, int64_t now_ms, int64_t delay_ms,
    const struct sm_tiers *tiers,
    int64_t (*floor)(void *arg, const char *tenant), void *arg,
    struct cpt_fold_stats *st, struct sm_err *err)
{
	struct ing_bucket_scan sc = { 0 };
	uint32_t budget = CPT_FOLD_MAX_HOURS;
	int rv;

	memset(st, 0, sizeof(*st));
	if ((rv = ing_ship_scan(f->bucket, NULL, NULL, &sc, err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < sc.n;) {
		uint32_t j = i;

		while (j < sc.n && strcmp(sc.v[j].tenant, sc.v[i].tenant) == 0)
			j++;
		fold_tenant(f, &sc.v[i], j - i, now_ms, delay_ms,
		    floor(arg, sc.v[i].tenant), tiers, st, &budget);
		i = j;
	}
	ing_ship_scan_free(&sc);
	return (0);
}
