/*
 * gateway.c -- the store-gateway's sync (gateway.h tells the design).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/ring.h"
#include "common/rpc.h"

#include "gateway.h"
#include "remote.h"
#include "ship.h"

struct ing_gateway {
	struct ing_db *db;
	struct ing_store *store;
	struct sm_bucket *bucket;
	struct ing_remote *remote;
	uint32_t workers;              /* blocks fetched at once */
	struct sm_ring *ring;          /* borrowed; NULL: own every tenant */
	char *self_id;
	pthread_mutex_t mu;            /* one pass at a time */
	atomic_bool synced;
	uint64_t ring_sig;             /* ring_sig() at the last pass */
	int64_t changed_ms;            /* unowned tenants kept until
					* changed_ms + unowned_grace_ms */
	int64_t unowned_grace_ms;
	/* the ring as the last complete pass began (src_mu): what it owned
	 * then is loaded; NULL before one */
	struct sm_ring_snap *pass;
	bool kill_after_import;        /* SMOLDER_TEST_FAULTS=gateway-kill */
	/* incarnation -> instance, from the last pass (src_mu) */
	pthread_mutex_t src_mu;
	struct gw_src { char inc[33]; char *instance; } *src;
	uint32_t nsrc, srccap;
	/* the blocks of other sources that the folds served stand for, from
	 * the last complete pass (src_mu) */
	struct gw_fold *fold;
	uint32_t nfold;
	/* the owned blocks the last complete pass could not load and
	 * nothing served stands in for (src_mu) */
	struct gw_bad *bad;
	uint32_t nbad;
};

/* A block the gateway owns and could not load (SourcesResponse.unloaded). */
struct gw_bad {
	char *tenant, *key, *error;
	char inc[33];
	int64_t min_t, max_t;
};

static void
gw_bad_free(struct gw_bad *v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		sm_free(v[i].tenant);
		sm_free(v[i].key);
		sm_free(v[i].error);
	}
	sm_free(v);
}

/* A block (tenant, inc, gen) that a served fold stands for. */
struct gw_fold {
	char *tenant;
	char inc[33];
	uint64_t gen;
};

struct gw_folds {
	struct gw_fold *v;
	uint32_t n, cap;
};

static void
gw_folds_free(struct gw_fold *v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		sm_free(v[i].tenant);
	sm_free(v);
}

/* Note the inputs of fold bk, served from now on. */
static int
gw_folds_add(struct gw_folds *f, const struct ing_bucket_block *bk)
{
	if (strcmp(bk->inc, ING_FOLD_INC) != 0)
		return (0);
	for (uint32_t i = 0; i < bk->ninputs; i++) {
		if (SM_GROW(f->v, f->cap, f->n + 1, 64) != 0 ||
		    (f->v[f->n].tenant = sm_strdup(bk->tenant)) == NULL)
			return (SM_ENOMEM);
		memcpy(f->v[f->n].inc, bk->inputs[i].inc, 33);
		f->v[f->n++].gen = bk->inputs[i].gen;
	}
	return (0);
}

static struct sm_metric *m_passes, *m_pass_fail, *m_adopted, *m_dropped;
static struct sm_metric *m_bad, *m_bytes, *m_gets;

static const struct sm_metric_def gw_metric_defs[] = {
	{ &m_passes, SM_METRIC_COUNTER,
	    "smolder_store_gateway_sync_passes_total", "Sync passes over the "
	    "bucket that completed.", NULL, NULL, 0 },
	{ &m_pass_fail, SM_METRIC_COUNTER,
	    "smolder_store_gateway_sync_failures_total", "Sync passes ended "
	    "by a bucket or store error.", NULL, NULL, 0 },
	{ &m_adopted, SM_METRIC_COUNTER,
	    "smolder_store_gateway_blocks_loaded_total", "Blocks fetched from "
	    "the bucket and served.", NULL, NULL, 0 },
	{ &m_dropped, SM_METRIC_COUNTER,
	    "smolder_store_gateway_blocks_dropped_total",
	    "Blocks no longer served (marked, deleted, merged away or no "
	    "longer owned).", NULL, NULL, 0 },
	{ &m_bad, SM_METRIC_COUNTER,
	    "smolder_store_gateway_block_load_failures_total",
	    "Blocks that failed their checks (size, checksums) or could not "
	    "be fetched.", NULL, NULL, 0 },
	{ &m_bytes, SM_METRIC_COUNTER,
	    "smolder_store_gateway_loaded_bytes_total", "Bytes of block "
	    "objects fetched by the sync (whole small objects; the parts but "
	    "the data of larger ones).", NULL, NULL, 0 },
	{ &m_gets, SM_METRIC_COUNTER,
	    "smolder_store_gateway_load_fetches_total", "GETs the sync made "
	    "to load blocks.", NULL, NULL, 0 },
};

static struct sm_metric_set gw_metric_set = SM_METRIC_SET(gw_metric_defs);

int
ing_gateway_create(const struct ing_gateway_cfg *cfg, struct ing_db *db,
    struct ing_store *store, struct ing_gateway **out, struct sm_err *err)
{
	struct ing_gateway *gw;

	sm_metrics_register_once(&gw_metric_set);
	*out = NULL;
	if ((gw = sm_calloc(1, sizeof(*gw))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	gw->db = db;
	gw->store = store;
	gw->bucket = cfg->bucket;
	gw->remote = cfg->remote;
	gw->workers = (uint32_t)SM_MIN(SM_MAX(cfg->workers, 1), 64);
	gw->changed_ms = sm_now_ms();
	gw->unowned_grace_ms = cfg->unowned_grace_ms;
	if (sm_test_fault("gateway-kill")) {
		gw->kill_after_import = true;
		sm_warn("store-gateway", "fault injection: SIGKILL after the "
		    "first block imported, before it is served "
		    "(SMOLDER_TEST_FAULTS)");
	}
	pthread_mutex_init(&gw->mu, NULL);
	pthread_mutex_init(&gw->src_mu, NULL);
	gw->ring = cfg->ring;
	if ((gw->self_id = sm_strdup(cfg->self_id)) == NULL) {
		ing_gateway_destroy(gw);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	*out = gw;
	return (0);
}

void
ing_gateway_destroy(struct ing_gateway *gw)
{
	if (gw == NULL)
		return;
	sm_ring_release(gw->pass);
	sm_free(gw->self_id);
	for (uint32_t i = 0; i < gw->nsrc; i++)
		sm_free(gw->src[i].instance);
	sm_free(gw->src);
	gw_folds_free(gw->fold, gw->nfold);
	gw_bad_free(gw->bad, gw->nbad);
	pthread_mutex_destroy(&gw->mu);
	pthread_mutex_destroy(&gw->src_mu);
	sm_free(gw);
}

bool
ing_gateway_synced(const struct ing_gateway *gw)
{
	return (atomic_load(&gw->synced));
}

static bool
hex32(const char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' &&
		    s[i] <= 'f')))
			return (false);
	}
	return (i == 32);
}

char *
ing_gateway_tenant(struct sm_arena *a, const char *tenant, const char *source,
    struct sm_err *err)
{
	size_t tl = strlen(tenant);
	char *s;

	if (!hex32(source)) {
		sm_err_set(err, SM_EINVAL, "source \"%.40s\" is not an "
		    "incarnation (32 hex digits)", source);
		return (NULL);
	}
	if ((s = sm_arena_alloc(a, tl + 34)) == NULL) {
		sm_err_set(err, SM_ENOMEM, "out of memory");
		return (NULL);
	}
	memcpy(s, tenant, tl);
	s[tl] = ING_GW_SEP;
	memcpy(s + tl + 1, source, 33);
	return (s);
}

/* Our index in snapshot s, or s->n when we are not in it. */
static uint32_t
self_in(const struct ing_gateway *gw, const struct sm_ring_snap *s)
{
	uint32_t i;

	for (i = 0; i < s->n; i++) {
		if (s->id[i] != NULL && strcmp(s->id[i], gw->self_id) == 0)
			break;
	}
	return (i);
}

/* A gateway that has not finished a first pass since it (re)started. */
static bool
unsettled(const struct sm_ring_snap *s, uint32_t m)
{
	return (s->state[m] == SM_MEMBER_PENDING ||
	    s->state[m] == SM_MEMBER_JOINING);
}

/*
 * Is `tenant` one this gateway serves under ring snapshot s (NULL: the
 * gateway serves every tenant)?  When it is one of the owners
 * sm_ring_owners_settling names (gateway.h, Sharding).
 */
static bool
owned_in(const struct ing_gateway *gw, const struct sm_ring_snap *s,
    const char *tenant)
{
	uint32_t own[128], n, self;

	if (s == NULL)
		return (true);
	if ((self = self_in(gw, s)) == s->n)
		return (false);
	n = sm_ring_owners_settling(s, sm_ring_key(tenant, NULL, 0), own);
	for (uint32_t i = 0; i < n; i++) {
		if (own[i] == self)
			return (true);
	}
	return (false);
}

/* What ownership depends on: the member ids and which are unsettled. */
static uint64_t
ring_sig(const struct sm_ring_snap *s)
{
	uint64_t h = 0;

	for (uint32_t m = 0; s != NULL && m < s->n; m++) {
		h = h * 1099511628211ULL + (s->id[m] != NULL ?
		    sm_hash(s->id[m], strlen(s->id[m])) : 0);
		h = h * 1099511628211ULL + unsettled(s, m);
	}
	return (h);
}

/* A held block: its local tenant and gen, and whether it is wanted. */
struct held {
	char *tenant;
	uint64_t gen;
	bool wanted;
};

static int
held_cmp(const void *a, const void *b)
{
	const struct held *x = a, *y = b;
	int c = strcmp(x->tenant, y->tenant);

	return (c != 0 ? c : SM_CMP(x->gen, y->gen));
}

static struct held *
held_find(struct held *v, uint32_t n, const char *tenant, uint64_t gen)
{
	struct held key = { .tenant = (char *)tenant, .gen = gen };

	return (n == 0 ? NULL : bsearch(&key, v, n, sizeof(*v), held_cmp));
}

/* Remember which instance shipped incarnation `inc`. */
static void
src_note(struct ing_gateway *gw, const char *inc, const char *instance)
{
	uint32_t i;

	pthread_mutex_lock(&gw->src_mu);
	for (i = 0; i < gw->nsrc && strcmp(gw->src[i].inc, inc) != 0; i++)
		;
	if (i == gw->nsrc && SM_GROW(gw->src, gw->srccap, gw->nsrc + 1,
	    16) == 0) {
		snprintf(gw->src[i].inc, sizeof(gw->src[i].inc), "%s", inc);
		if ((gw->src[i].instance = sm_strdup(instance)) != NULL)
			gw->nsrc++;
	}
	pthread_mutex_unlock(&gw->src_mu);
}

/*
 * Fetch, check, import and adopt one wanted block: its parts but the data,
 * and a stub for each data part (remote.h).
 */
static int
load(struct ing_gateway *gw, const struct ing_bucket_block *bk,
    const char *lt, struct ing_ship_parts *fetched, struct sm_err *err)
{
	struct ing_ship_parts sp = *fetched;
	struct ing_store_part *parts = NULL;
	struct ing_ship_rec rec = { .shipped = true };
	const struct ing_store_part *mp = NULL;
	uint8_t *stubs = NULL;
	uint64_t dlo = UINT64_MAX, dhi = 0;
	int rv;

	memset(fetched, 0, sizeof(*fetched));
	if ((parts = sm_calloc(SM_MAX(sp.n, 1), sizeof(*parts))) == NULL ||
	    (stubs = sm_malloc((size_t)SM_MAX(sp.n, 1) *
	    ING_REMOTE_STUB)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < sp.n; i++) {
		const struct ing_ship_part *x = &sp.v[i];

		parts[i] = (struct ing_store_part){ x->kind, x->series, x->v,
		    x->n };
		if (x->kind == 'D') {
			uint8_t *st = stubs + (size_t)i * ING_REMOTE_STUB;

			ing_remote_stub(bk->ulid, sp.size, x->off, x->n, st);
			parts[i].v = st;
			parts[i].n = ING_REMOTE_STUB;
			dlo = SM_MIN(dlo, x->off);
			dhi = SM_MAX(dhi, x->off + x->n);
		} else if (x->kind == 'M') {
			mp = &parts[i];
		}
	}
	if (mp == NULL) {
		rv = sm_err_set(err, SM_ECORRUPT, "%s: no meta part",
		    bk->meta_key);
		goto out;
	}
	memcpy(rec.ulid, bk->ulid, 16);
	if ((rv = ing_store_block_import(gw->store, lt, bk->gen, parts, sp.n,
	    &rec, err)) != 0)
		goto out;
	if (gw->kill_after_import)
		kill(getpid(), SIGKILL);
	if ((rv = ing_db_block_adopt(gw->db, lt, bk->gen, mp->v, mp->n,
	    bk->replaces, bk->nreplaces, err)) != 0)
		goto out;
	if (sp.whole)
		ing_remote_warm(gw->remote, bk->ulid,
		    (const uint8_t *)sp.obj.b, sp.size, dlo, dhi);
	sm_counter_add(sm_metric_child0(m_bytes), sp.obj.len);
	sm_counter_add(sm_metric_child0(m_gets), sp.gets);
out:
	sm_free(parts);
	sm_free(stubs);
	ing_ship_parts_fini(&sp);
	return (rv);
}

/*
 * Fetching ahead (-store-gateway.sync-concurrency): the blocks a pass
 * will load are fetched gw->workers at a time, each by a thread of its
 * own, and then imported and adopted one by one in the pass's order (a
 * merged block after its inputs), so a gateway's first sync costs its
 * slowest round trips, not the sum of them.
 */
struct prefetch {
	const struct ing_bucket_block *bk;
	uint32_t idx;                  /* in the scan */
	int rv;
	struct sm_err err;
	struct ing_ship_parts sp;
	struct ing_gateway *gw;
	pthread_t thr;
	bool started;
};

static void *
prefetch_main(void *arg)
{
	struct prefetch *p = arg;

	sm_err_clear(&p->err);
	p->rv = ing_ship_fetch_parts(p->gw->bucket, p->bk,
	    ing_remote_page(p->gw->remote), &p->sp, &p->err);
	return (NULL);
}

/* Fetch the blocks want[0..n) of the scan at once into pf[0..n). */
static void
prefetch_run(struct ing_gateway *gw, const struct ing_bucket_scan *sc,
    const uint32_t *want, uint32_t n, struct prefetch *pf)
{
	for (uint32_t k = 0; k < n; k++) {
		pf[k] = (struct prefetch){ .bk = &sc->v[want[k]],
		    .idx = want[k], .gw = gw };
		pf[k].started = pthread_create(&pf[k].thr, NULL,
		    prefetch_main, &pf[k]) == 0;
		if (!pf[k].started)          /* no thread: fetch it here */
			prefetch_main(&pf[k]);
	}
	for (uint32_t k = 0; k < n; k++)
		if (pf[k].started)
			pthread_join(pf[k].thr, NULL);
}

static void
prefetch_free(struct prefetch *pf, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		ing_ship_parts_fini(&pf[k].sp);
}

/* A merged block not loaded: the inputs it replaces stay in service.
 * True when every one of them is held, so its data is still served. */
static bool
keep_inputs(struct held *h, uint32_t nhb, const char *lt,
    const struct ing_bucket_block *bk)
{
	bool all = bk->nreplaces > 0;

	for (uint32_t k = 0; k < bk->nreplaces; k++) {
		struct held *y = held_find(h, nhb, lt, bk->replaces[k]);

		if (y != NULL)
			y->wanted = true;
		else
			all = false;
	}
	return (all);
}

static int
gw_bad_add(struct gw_bad **v, uint32_t *n, const struct ing_bucket_block *bk,
    const char *why)
{
	struct gw_bad *nv, *b;

	if ((nv = sm_realloc(*v, (*n + 1) * sizeof(*nv))) == NULL)
		return (SM_ENOMEM);
	*v = nv;
	b = &nv[*n];
	memset(b, 0, sizeof(*b));
	memcpy(b->inc, bk->inc, 33);
	b->min_t = bk->min_t;
	b->max_t = bk->max_t;
	if ((b->tenant = sm_strdup(bk->tenant)) == NULL ||
	    (b->key = sm_strdup(bk->meta_key)) == NULL ||
	    (b->error = sm_strdup(why)) == NULL) {
		sm_free(b->tenant);
		sm_free(b->key);
		return (SM_ENOMEM);
	}
	(*n)++;
	return (0);
}

/* One sync pass: what the bucket has, what is held, and what it did. */
struct gw_pass {
	struct ing_bucket_scan sc;
	struct sm_ring_snap *rs;       /* the ring it works under, or NULL */
	struct ing_db_block *hb;
	struct held *h;                /* hb's blocks, sorted (held_find) */
	uint32_t nhb;
	struct sm_arena *a;
	char **lts;                    /* per scanned block: its local
					* tenant, NULL when passed over */
	uint32_t *want, nwant, wpos;   /* the blocks it will try to load,
					* in its order (prefetch_run) */
	struct prefetch *pf;
	uint32_t npf;
	struct gw_folds folds;
	struct gw_bad *bad;
	uint32_t nbad;
	uint32_t nad, ndr;             /* blocks loaded, dropped */
};

static void
pass_fini(struct gw_pass *p)
{
	gw_folds_free(p->folds.v, p->folds.n);
	gw_bad_free(p->bad, p->nbad);
	if (p->pf != NULL)
		prefetch_free(p->pf, p->npf);
	sm_free(p->pf);
	sm_free(p->want);
	sm_free(p->lts);
	sm_arena_destroy(p->a);
	sm_free(p->h);
	ing_db_blocks_free(p->hb, p->nhb);
	ing_ship_scan_free(&p->sc);
	sm_ring_release(p->rs);
}

/* Take the ring the pass works under and note an ownership change;
 * call with gw->mu held (ring_sig, changed_ms).  SM_EAGAIN while this
 * gateway is not in its ring. */
static int
pass_ring(struct ing_gateway *gw, struct gw_pass *p, struct sm_err *err)
{
	uint64_t sig;

	if (gw->ring == NULL)
		return (0);
	p->rs = sm_ring_acquire(gw->ring);
	if (self_in(gw, p->rs) == p->rs->n)
		return (sm_err_set(err, SM_EAGAIN, "%s is not in its "
		    "store-gateway ring yet", gw->self_id));
	if ((sig = ring_sig(p->rs)) != gw->ring_sig) {
		if (gw->ring_sig != 0)
			gw->changed_ms = sm_now_ms();
		gw->ring_sig = sig;
	}
	return (0);
}

/* Scan the bucket and list what is held, each scanned block's local
 * tenant, and the blocks this pass will try to load. */
static int
pass_plan(struct ing_gateway *gw, struct gw_pass *p, struct sm_err *err)
{
	int rv;

	if ((rv = ing_ship_scan(gw->bucket, NULL, NULL, &p->sc, err)) != 0)
		return (rv);
	if (ing_db_blocks(gw->db, true, &p->hb, &p->nhb) != 0 ||
	    (p->h = sm_calloc(SM_MAX(p->nhb, 1), sizeof(*p->h))) == NULL ||
	    (p->a = sm_arena_create(0)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < p->nhb; i++)
		p->h[i] = (struct held){ p->hb[i].tenant, p->hb[i].meta.gen,
		    false };
	if (p->nhb > 1)
		qsort(p->h, p->nhb, sizeof(*p->h), held_cmp);
	if ((p->want = sm_malloc(SM_MAX(p->sc.n, 1) *
	    sizeof(*p->want))) == NULL ||
	    (p->lts = sm_calloc(SM_MAX(p->sc.n, 1), sizeof(*p->lts))) == NULL ||
	    (p->pf = sm_calloc(gw->workers, sizeof(*p->pf))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < p->sc.n; i++) {
		const struct ing_bucket_block *bk = &p->sc.v[i];

		if (bk->marked || bk->replaced || bk->dup)
			continue;
		if ((p->lts[i] = ing_gateway_tenant(p->a, bk->tenant, bk->inc,
		    err)) == NULL)
			return (err->code);
		if (owned_in(gw, p->rs, bk->tenant) && held_find(p->h, p->nhb,
		    p->lts[i], bk->gen) == NULL &&
		    !ing_db_block_retiring(gw->db, p->lts[i], bk->gen))
			p->want[p->nwant++] = i;
	}
	return (0);
}

/* Scanned block i's parts: from the fetches ahead (started here, with
 * the next ones', when they stop short of it), or fetched now. */
static int
pass_fetch(struct ing_gateway *gw, struct gw_pass *p, uint32_t i,
    struct ing_ship_parts *sp, struct sm_err *err)
{
	struct prefetch *f;
	uint32_t pk;

	while (p->wpos < p->nwant && p->want[p->wpos] < i)
		p->wpos++;
	if (p->npf == 0 || p->pf[p->npf - 1].idx < i) {
		prefetch_free(p->pf, p->npf);
		p->npf = SM_MIN(gw->workers, p->nwant - p->wpos);
		prefetch_run(gw, &p->sc, p->want + p->wpos, p->npf, p->pf);
	}
	for (pk = 0; pk < p->npf && p->pf[pk].idx != i; pk++)
		;
	if (pk == p->npf)                /* not foreseen: fetch it now */
		return (ing_ship_fetch_parts(gw->bucket, &p->sc.v[i],
		    ing_remote_page(gw->remote), sp, err));
	f = &p->pf[pk];
	*sp = f->sp;
	memset(&f->sp, 0, sizeof(f->sp));
	if (f->rv != 0)
		*err = f->err;
	return (f->rv);
}

/*
 * Block bk (local tenant lt) is served: note the inputs of a fold, and
 * count its held inputs out of service -- dropped here when `drop`
 * (held from an earlier pass), else already dropped by its adoption.
 */
static int
pass_served(struct ing_gateway *gw, struct gw_pass *p,
    const struct ing_bucket_block *bk, const char *lt, bool drop,
    struct sm_err *err)
{
	if (gw_folds_add(&p->folds, bk) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t k = 0; k < bk->nreplaces; k++) {
		struct held *y = held_find(p->h, p->nhb, lt, bk->replaces[k]);

		if (y != NULL && !y->wanted && (!drop ||
		    ing_db_block_drop(gw->db, lt, y->gen))) {
			y->wanted = true;       /* out of service */
			p->ndr++;
		}
	}
	return (0);
}

/* Record block bk, which failed its checks or its fetch (err), and go
 * on: the pass does not end for one bad block. */
static int
pass_bad(struct gw_pass *p, const struct ing_bucket_block *bk,
    const char *lt, struct sm_err *err)
{
	/* its inputs, if held, keep serving its data; else queries over
	 * its range must say they are short */
	if (!keep_inputs(p->h, p->nhb, lt, bk) &&
	    gw_bad_add(&p->bad, &p->nbad, bk, err->msg) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	sm_counter_inc(sm_metric_child0(m_bad));
	sm_error("store-gateway", "block not loaded\tkey=%s err=\"%s\"",
	    bk->meta_key, err->msg);
	sm_err_clear(err);
	return (0);
}

/* Keep, load or pass over scanned block i; call with gw->mu held. */
static int
pass_block(struct ing_gateway *gw, struct gw_pass *p, uint32_t i,
    struct sm_err *err)
{
	const struct ing_bucket_block *bk = &p->sc.v[i];
	const char *lt = p->lts[i];
	struct ing_ship_parts sp;
	struct held *x;
	int rv;

	if (lt == NULL)                  /* marked, replaced or a dup */
		return (0);
	if (!owned_in(gw, p->rs, bk->tenant)) {
		/* A tenant this gateway no longer owns (its ring changed)
		 * is kept a while, so its new owners can load it first. */
		if (sm_now_ms() - gw->changed_ms < gw->unowned_grace_ms &&
		    (x = held_find(p->h, p->nhb, lt, bk->gen)) != NULL)
			x->wanted = true;
		return (0);
	}
	src_note(gw, bk->inc, bk->instance);
	if ((x = held_find(p->h, p->nhb, lt, bk->gen)) != NULL) {
		x->wanted = true;
		/* inputs merged since: out of service with it */
		return (pass_served(gw, p, bk, lt, true, err));
	}
	if (ing_db_block_retiring(gw->db, lt, bk->gen)) {
		keep_inputs(p->h, p->nhb, lt, bk);
		return (0);           /* the next pass, once it is gone */
	}
	rv = pass_fetch(gw, p, i, &sp, err);
	if (rv == 0)
		rv = load(gw, bk, lt, &sp, err);
	ing_ship_parts_fini(&sp);
	if (rv == 0) {
		p->nad++;
		return (pass_served(gw, p, bk, lt, false, err));
	}
	if (rv == SM_ECORRUPT || rv == SM_ENOTFOUND)
		return (pass_bad(p, bk, lt, err));
	return (rv);
}

/* Serve what a complete pass found: its folds, its bad blocks and its
 * ring (src_mu), and say the gateway has synced. */
static void
pass_publish(struct ing_gateway *gw, struct gw_pass *p)
{
	pthread_mutex_lock(&gw->src_mu);
	gw_folds_free(gw->fold, gw->nfold);
	gw->fold = p->folds.v;
	gw->nfold = p->folds.n;
	gw_bad_free(gw->bad, gw->nbad);
	gw->bad = p->bad;
	gw->nbad = p->nbad;
	sm_ring_release(gw->pass);
	gw->pass = p->rs;
	p->rs = NULL;
	pthread_mutex_unlock(&gw->src_mu);
	p->folds = (struct gw_folds){ 0 };
	p->bad = NULL;
	p->nbad = 0;
	atomic_store(&gw->synced, true);
}

int
ing_gateway_sync(struct ing_gateway *gw, uint32_t *adopted,
    uint32_t *dropped, struct sm_err *err)
{
	struct gw_pass p = { 0 };
	int rv;

	pthread_mutex_lock(&gw->mu);
	if ((rv = pass_ring(gw, &p, err)) != 0 ||
	    (rv = pass_plan(gw, &p, err)) != 0)
		goto out;
	/* Load what is wanted and not held, oldest gen of each source
	 * first (a merged block after the inputs it replaces). */
	for (uint32_t i = 0; i < p.sc.n; i++) {
		if ((rv = pass_block(gw, &p, i, err)) != 0)
			goto out;
	}
	/* Then out of service: what is held and no longer wanted. */
	for (uint32_t i = 0; i < p.nhb; i++) {
		if (!p.h[i].wanted && ing_db_block_drop(gw->db, p.h[i].tenant,
		    p.h[i].gen))
			p.ndr++;
	}
	pass_publish(gw, &p);
out:
	sm_counter_add(sm_metric_child0(m_adopted), p.nad);
	sm_counter_add(sm_metric_child0(m_dropped), p.ndr);
	sm_counter_inc(sm_metric_child0(rv == 0 ? m_passes : m_pass_fail));
	if (p.nad > 0 || p.ndr > 0)
		sm_info("store-gateway", "sync\tloaded=%u dropped=%u "
		    "bucket_blocks=%u", p.nad, p.ndr, p.sc.n);
	if (adopted != NULL)
		*adopted = p.nad;
	if (dropped != NULL)
		*dropped = p.ndr;
	pthread_mutex_unlock(&gw->mu);
	pass_fini(&p);
	return (rv);
}

static int
source_cmp(const void *a, const void *b)
{
	const Smolder__V1__Source *x = *(Smolder__V1__Source *const *)a;
	const Smolder__V1__Source *y = *(Smolder__V1__Source *const *)b;

	return (strcmp(x->id, y->id));
}

/* The sources a Sources answer lists, in the request's arena. */
struct gw_srcs {
	Smolder__V1__Source **v;
	size_t n, cap;
};

/* Whether this gateway vouches for the tenant's sources: it owns the
 * tenant in the ring now and in the ring its last complete pass served. */
static bool
sources_vouch(struct ing_gateway *gw, const char *tenant)
{
	struct sm_ring_snap *now = sm_ring_acquire(gw->ring);
	bool vouch;

	pthread_mutex_lock(&gw->src_mu);
	vouch = owned_in(gw, now, tenant) && gw->pass != NULL &&
	    owned_in(gw, gw->pass, tenant);
	pthread_mutex_unlock(&gw->src_mu);
	sm_ring_release(now);
	return (vouch);
}

/* A new source for incarnation inc, spanning block m, named by the
 * instance that registered inc (src_mu); NULL when the arena is full. */
static Smolder__V1__Source *
sources_new(struct ing_gateway *gw, struct sm_arena *a, const char *inc,
    const struct ing_block_meta *m)
{
	Smolder__V1__Source *s;

	if ((s = sm_arena_alloc(a, sizeof(*s))) == NULL)
		return (NULL);
	smolder__v1__source__init(s);
	s->id = sm_arena_strndup(a, inc, 32);
	s->instance = (char *)"";
	s->min_t = m->min_t;
	s->max_t = m->max_t;
	pthread_mutex_lock(&gw->src_mu);
	for (uint32_t k = 0; k < gw->nsrc; k++) {
		if (strcmp(gw->src[k].inc, inc) == 0)
			s->instance = sm_arena_strndup(a, gw->src[k].instance,
			    strlen(gw->src[k].instance));
	}
	pthread_mutex_unlock(&gw->src_mu);
	if (s->id == NULL || s->instance == NULL)
		return (NULL);
	return (s);
}

/* Count held block m into the source of incarnation inc (its gen too
 * when the request asks for gens); 0 or SM_ENOMEM. */
static int
sources_add_block(struct ing_gateway *gw,
    const Smolder__V1__SourcesRequest *req, struct sm_arena *a,
    struct gw_srcs *l, const char *inc, const struct ing_block_meta *m)
{
	Smolder__V1__Source *s = l->n > 0 ? l->v[l->n - 1] : NULL;

	if (s == NULL || strcmp(s->id, inc) != 0) {
		if (l->n == l->cap) {
			size_t nc = l->cap ? l->cap * 2 : 8;
			Smolder__V1__Source **nv = sm_arena_grow(a, l->v, l->n,
			    nc, sizeof(*nv));

			if (nv == NULL)
				return (SM_ENOMEM);
			l->v = nv;
			l->cap = nc;
		}
		if ((s = sources_new(gw, a, inc, m)) == NULL)
			return (SM_ENOMEM);
		l->v[l->n++] = s;
	}
	s->min_t = SM_MIN(s->min_t, m->min_t);
	s->max_t = SM_MAX(s->max_t, m->max_t);
	if (req->gens) {         /* blocks come in gen order */
		uint64_t *g = sm_arena_grow(a, s->gens, s->n_gens,
		    s->n_gens + 1, sizeof(*g));

		if (g == NULL)
			return (SM_ENOMEM);
		g[s->n_gens++] = m->gen;
		s->gens = g;
	}
	s->blocks++;
	return (0);
}

/* Add a fold's gen to the source `id`, listing the source if no held
 * block did; 0 or SM_ENOMEM. */
static int
sources_add_fold(struct sm_arena *a, struct gw_srcs *l, const char *id,
    uint64_t gen)
{
	Smolder__V1__Source *s;
	uint64_t *g;
	size_t k;

	for (k = 0; k < l->n && strcmp(l->v[k]->id, id) != 0; k++)
		;
	if (k == l->n) {
		Smolder__V1__Source **nv = sm_arena_grow(a, l->v, l->n,
		    l->n + 1, sizeof(*nv));

		if (nv == NULL || (s = sm_arena_alloc(a, sizeof(*s))) == NULL)
			return (SM_ENOMEM);
		l->v = nv;
		l->cap = l->n + 1;
		smolder__v1__source__init(s);
		s->id = sm_arena_strndup(a, id, 32);
		s->instance = (char *)"";
		if (s->id == NULL)
			return (SM_ENOMEM);
		l->v[l->n++] = s;
	}
	s = l->v[k];
	if ((g = sm_arena_grow(a, s->gens, s->n_gens, s->n_gens + 1,
	    sizeof(*g))) == NULL)
		return (SM_ENOMEM);
	g[s->n_gens++] = gen;
	s->gens = g;
	return (0);
}

/* A leaving or retaining ingester asks for one source's gens: a block
 * that a served fold stands for is served too, although the gateway
 * dropped it once the compactor marked it.  Add the tenant's folds of
 * req->source (src_mu); 0 or SM_ENOMEM. */
static int
sources_add_folds(struct ing_gateway *gw,
    const Smolder__V1__SourcesRequest *req, struct sm_arena *a,
    struct gw_srcs *l)
{
	int rv = 0;

	pthread_mutex_lock(&gw->src_mu);
	for (uint32_t i = 0; i < gw->nfold && rv == 0; i++) {
		if (strcmp(gw->fold[i].tenant, req->tenant) != 0 ||
		    strcmp(gw->fold[i].inc, req->source) != 0)
			continue;
		rv = sources_add_fold(a, l, req->source, gw->fold[i].gen);
	}
	pthread_mutex_unlock(&gw->src_mu);
	return (rv);
}

/* Append bad block b to out's unloaded list; 0 or SM_ENOMEM. */
static int
sources_add_unloaded(struct sm_arena *a, const struct gw_bad *b,
    Smolder__V1__SourcesResponse *out)
{
	Smolder__V1__Unloaded **nu, *u;

	if ((nu = sm_arena_grow(a, out->unloaded, out->n_unloaded,
	    out->n_unloaded + 1, sizeof(*nu))) == NULL ||
	    (u = sm_arena_alloc(a, sizeof(*u))) == NULL)
		return (SM_ENOMEM);
	out->unloaded = nu;
	smolder__v1__unloaded__init(u);
	u->source = sm_arena_strndup(a, b->inc, 32);
	u->key = sm_arena_strndup(a, b->key, strlen(b->key));
	u->error = sm_arena_strndup(a, b->error, strlen(b->error));
	u->min_t = b->min_t;
	u->max_t = b->max_t;
	if (u->source == NULL || u->key == NULL || u->error == NULL)
		return (SM_ENOMEM);
	nu[out->n_unloaded++] = u;
	return (0);
}

/* List the tenant's blocks this gateway owns and could not load (of
 * req->source, if named) in out (src_mu); 0 or SM_ENOMEM. */
static int
sources_unloaded(struct ing_gateway *gw,
    const Smolder__V1__SourcesRequest *req, struct sm_arena *a,
    Smolder__V1__SourcesResponse *out)
{
	int rv = 0;

	pthread_mutex_lock(&gw->src_mu);
	for (uint32_t i = 0; i < gw->nbad && rv == 0; i++) {
		const struct gw_bad *b = &gw->bad[i];

		if (strcmp(b->tenant, req->tenant) != 0 ||
		    (req->source != NULL && req->source[0] != '\0' &&
		    strcmp(req->source, b->inc) != 0))
			continue;
		rv = sources_add_unloaded(a, b, out);
	}
	pthread_mutex_unlock(&gw->src_mu);
	return (rv);
}

int
ing_gateway_sources(struct ing_gateway *gw,
    const Smolder__V1__SourcesRequest *req, struct sm_arena *a,
    Smolder__V1__SourcesResponse *out, struct sm_err *err)
{
	const char *tenant = req->tenant;
	struct ing_db_block *hb = NULL;
	struct gw_srcs l = { 0 };
	size_t tl = strlen(tenant);
	uint32_t nhb = 0;
	int rv = 0;

	smolder__v1__sources_response__init(out);
	out->vouch = SMOLDER__V1__SOURCES_RESPONSE__VOUCH__VOUCH_OWNER;
	if (gw->ring != NULL && !sources_vouch(gw, tenant))
		out->vouch = SMOLDER__V1__SOURCES_RESPONSE__VOUCH__VOUCH_NONE;
	if (ing_db_blocks(gw->db, true, &hb, &nhb) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < nhb; i++) {
		const char *lt = hb[i].tenant, *inc = lt + tl + 1;
		const struct ing_block_meta *m = &hb[i].meta;

		if (strncmp(lt, tenant, tl) != 0 || lt[tl] != ING_GW_SEP ||
		    !hex32(inc) || m->broken || (req->source != NULL &&
		    req->source[0] != '\0' && strcmp(req->source, inc) != 0))
			continue;
		if (sources_add_block(gw, req, a, &l, inc, m) != 0)
			goto oom;
	}
	if (req->gens && req->source != NULL && hex32(req->source) &&
	    sources_add_folds(gw, req, a, &l) != 0)
		goto oom;
	if (l.n > 1)
		qsort(l.v, l.n, sizeof(*l.v), source_cmp);
	out->sources = l.v;
	out->n_sources = l.n;
	if (sources_unloaded(gw, req, a, out) != 0)
		goto oom;
	goto out;
oom:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	ing_db_blocks_free(hb, nhb);
	return (rv);
}

/* --- what the gateways serve, asked by a leaving ingester ------------------ */

int
ing_gw_served(struct sm_ring *gws, const char *tenant, const char *inc,
    uint64_t *gens, uint32_t n, uint8_t *served, uint32_t *nanswered,
    struct sm_err *err)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__SourcesRequest sr = SMOLDER__V1__SOURCES_REQUEST__INIT;
	uint32_t own[64], no, answered = 0;
	struct sm_buf b = SM_BUF_INIT;
	struct sm_ring_snap *rs;
	uint32_t *votes;
	int rv = 0;

	*nanswered = 0;
	memset(served, 0, n);
	if (n == 0)
		return (0);
	if (n > 1)
		qsort(gens, n, sizeof(*gens), sm_u64_cmp);
	if ((votes = sm_calloc(n, sizeof(*votes))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	sr.tenant = (char *)tenant;
	sr.source = (char *)inc;
	sr.gens = true;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_SOURCES;
	req.sources = &sr;
	if (sm_buf_reserve(&b, protobuf_c_message_get_packed_size(
	    &req.base)) != 0) {
		sm_free(votes);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	b.len = protobuf_c_message_pack(&req.base, (uint8_t *)b.b);
	rs = sm_ring_acquire(gws);
	no = sm_ring_owners(rs, sm_ring_key(tenant, NULL, 0), NULL, own);
	for (uint32_t i = 0; i < no; i++) {
		struct sm_buf resp = SM_BUF_INIT;
		struct sm_arena *a = sm_arena_create(0);
		Smolder__V1__Response *r = NULL;
		ProtobufCAllocator al;
		int crv;

		if (a == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			break;
		}
		al = sm_arena_pbc(a);
		/* One down would not answer; one not ready has not loaded
		 * what it owns.  (A silent connection is the ring's to
		 * redial.) */
		crv = rs->healthy[own[i]] ? sm_rpc_call(rs->m[own[i]]->client,
		    b.b, b.len, 5000, &resp) : SM_EUNAVAIL;
		if (crv == 0 &&
		    (r = smolder__v1__response__unpack(&al, resp.len,
		    (const uint8_t *)resp.b)) != NULL && r->code == 0 &&
		    r->result_case == SMOLDER__V1__RESPONSE__RESULT_SOURCES &&
		    r->sources->vouch !=
		    SMOLDER__V1__SOURCES_RESPONSE__VOUCH__VOUCH_NONE) {
			answered++;
			for (size_t k = 0; k < r->sources->n_sources; k++) {
				const Smolder__V1__Source *s =
				    r->sources->sources[k];

				if (strcmp(s->id, inc) != 0)
					continue;
				for (size_t g = 0; g < s->n_gens; g++) {
					uint64_t *hit = bsearch(&s->gens[g],
					    gens, n, sizeof(*gens), sm_u64_cmp);

					if (hit != NULL)
						votes[hit - gens]++;
				}
			}
		}
		sm_buf_fini(&resp);
		sm_arena_destroy(a);
	}
	sm_buf_fini(&b);
	sm_ring_release(rs);
	/* served: listed by every owner that answered, and at least one */
	for (uint32_t i = 0; rv == 0 && answered > 0 && i < n; i++)
		served[i] = votes[i] == answered;
	*nanswered = answered;
	sm_free(votes);
	return (rv);
}
