/*
 * db.c -- open and close, the tenant table, the sources of a query.
 * See db.h (the design) and db_int.h (rooms, ownership, locking).
 */
#include "db_int.h"

#include <sys/random.h>

#include "common/ring.h"

struct sm_metric *ing_m_cuts, *ing_m_cut_fail;
struct sm_metric *ing_m_spilled, *ing_m_spill_fail;
struct sm_metric *ing_m_mem_refused, *ing_m_mem_cuts;
static struct sm_metric *m_active, *m_refused;

static const struct sm_metric_def db_metric_defs[] = {
	{ &ing_m_cuts, SM_METRIC_COUNTER, "smolder_ingester_block_cuts_total",
	    "Heads cut into blocks.", NULL, NULL, 0 },
	{ &ing_m_cut_fail, SM_METRIC_COUNTER,
	    "smolder_ingester_block_cut_failures_total", "Block cuts that "
	    "failed and will be retried.", NULL, NULL, 0 },
	{ &ing_m_spilled, SM_METRIC_COUNTER,
	    "smolder_ingester_head_spilled_bytes_total", "Packed pair bytes "
	    "of sealed head buckets written to the store and dropped from "
	    "memory (-ingester.head-spill-interval).", NULL, NULL, 0 },
	{ &ing_m_spill_fail, SM_METRIC_COUNTER,
	    "smolder_ingester_head_spill_failures_total",
	    "Spills of sealed head buckets that failed (the buckets stay in "
	    "memory; the next tick retries).", NULL, NULL, 0 },
	{ &ing_m_mem_refused, SM_METRIC_COUNTER,
	    "smolder_ingester_memory_refusals_total", "Writes refused with "
	    "503 because the process was over -ingester.head-max-bytes "
	    "(measured RSS).", NULL, NULL, 0 },
	{ &ing_m_mem_cuts, SM_METRIC_COUNTER,
	    "smolder_ingester_memory_cuts_total", "Ticks that cut every head "
	    "for -ingester.head-max-bytes (memory plus what the cut takes "
	    "over 80% of it).", NULL, NULL, 0 },
	{ &m_active, SM_METRIC_GAUGE, "smolder_ingester_active_series",
	    "Series in the tenant's head (what the active-series limit "
	    "counts), by tenant.", SM_METRIC_LABELS("tenant"), NULL, 0 },
	{ &m_refused, SM_METRIC_COUNTER,
	    "smolder_ingester_series_limit_refusals_total",
	    "Writes refused because they would take the tenant's head past "
	    "its active-series limit, by tenant.", SM_METRIC_LABELS("tenant"),
	    NULL, 0 },
};

static struct sm_metric_set db_metric_set = SM_METRIC_SET(db_metric_defs);

/* --- lock assertions (db_int.h) ------------------------------------------ */

#ifndef NDEBUG
/* The locks this thread took through ING_LOCK & co and holds. */
static _Thread_local const void *held[8];
static _Thread_local uint32_t nheld;

void
ing_lock_note(const void *l)
{
	SM_ASSERT(nheld < SM_ARRAY_LEN(held));
	held[nheld++] = l;
}

void
ing_lock_forget(const void *l)
{
	for (uint32_t i = nheld; i > 0; i--) {
		if (held[i - 1] == l) {
			held[i - 1] = held[--nheld];
			return;
		}
	}
	SM_ASSERT(!"unlocking a lock this thread does not hold");
}

bool
ing_lock_held(const void *l)
{
	for (uint32_t i = 0; i < nheld; i++) {
		if (held[i] == l)
			return (true);
	}
	return (false);
}
#endif

/* --- tenants -------------------------------------------------------------- */

static void
tenant_free(struct ing_tenant *t)
{
	ing_head_unref(t->head);
	for (uint32_t i = 0; i < t->ncutting; i++)
		ing_head_unref(t->cutting[i]);
	sm_free(t->cutting);
	sm_free(t->blocks);
	ing_ids_fini(&t->ids);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	sm_free(t->id);
	sm_free(t);
}

static uint32_t
tenant_pos(const struct ing_db *db, const char *id, int *found)
{
	uint32_t lo;

	ING_ASSERT_HELD(&db->lock);
	SM_LOWER_BOUND(lo, db->n, mid, strcmp(db->t[mid]->id, id) < 0);
	*found = lo < db->n && strcmp(db->t[lo]->id, id) == 0;
	return (lo);
}

struct ing_tenant *
ing_tenant_find(struct ing_db *db, const char *id)
{
	struct ing_tenant *t = NULL;
	uint32_t i;
	int found;

	ING_RDLOCK(&db->lock);
	i = tenant_pos(db, id, &found);
	if (found)
		t = db->t[i];
	ING_RWUNLOCK(&db->lock);
	return (t);
}

struct ing_tenant *
ing_tenant_at(struct ing_db *db, uint32_t i)
{
	struct ing_tenant *t;

	ING_RDLOCK(&db->lock);
	t = i < db->n ? db->t[i] : NULL;
	ING_RWUNLOCK(&db->lock);
	return (t);
}

int
ing_tenant_get(struct ing_db *db, const char *id, struct ing_tenant **out)
{
	struct ing_tenant *t;
	uint32_t i;
	int found, rv = 0;

	if ((*out = ing_tenant_find(db, id)) != NULL)
		return (0);
	ING_WRLOCK(&db->lock);
	i = tenant_pos(db, id, &found);
	if (found) {
		*out = db->t[i];
		goto out;
	}
	if ((rv = SM_GROW(db->t, db->cap, db->n + 1, 8)) != 0)
		goto out;
	if ((t = sm_calloc(1, sizeof(*t))) == NULL ||
	    (t->id = sm_strdup(id)) == NULL) {
		sm_free(t);
		rv = SM_ENOMEM;
		goto out;
	}
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	t->listed_ns = sm_mono_ns();
	atomic_init(&t->local_floor_ms, INT64_MIN);
	/* From the database's random start (tenants_ver): a plan made
	 * before a restart never matches the epoch after it. */
	atomic_init(&t->drop_epoch, atomic_load(&db->tenants_ver));
	t->m_active = sm_metric_child(m_active, t->id);
	t->m_refused = sm_metric_child(m_refused, t->id);
	ing_ids_init(&t->ids, db->cfg.idempotency_window_ms > 0 ?
	    db->cfg.idempotency_window_ms : 60000,
	    db->cfg.idempotency_max > 0 ? db->cfg.idempotency_max : 1000000);
	if (ing_db_head_create(db, t->id, &t->head) != 0) {
		t->head = NULL;
		tenant_free(t);
		rv = SM_ENOMEM;
		goto out;
	}
	memmove(&db->t[i + 1], &db->t[i], (size_t)(db->n - i) * sizeof(*db->t));
	db->t[i] = t;
	db->n++;
	/* never 0: a prober's "none held" */
	if (atomic_fetch_add(&db->tenants_ver, 1) + 1 == 0)
		atomic_fetch_add(&db->tenants_ver, 1);
	*out = t;
out:
	ING_RWUNLOCK(&db->lock);
	return (rv);
}

int
ing_db_head_create(struct ing_db *db, const char *tenant,
    struct ing_head **out)
{
	struct ing_head *h;
	int rv;

	if ((rv = ing_head_create(atomic_fetch_add(&db->next_gen, 1),
	    db->cfg.bucket_ms, &h)) != 0)
		return (rv);
	h->span_ms = db->cfg.block_ms;
	if (db->store != NULL && (rv = ing_head_attach(h, db->store,
	    tenant)) != 0) {
		ing_head_unref(h);
		return (rv);
	}
	*out = h;
	return (0);
}

int
ing_tenant_add_block(struct ing_tenant *t, const struct ing_block_meta *m)
{
	uint32_t i;

	if (SM_GROW(t->blocks, t->blocks_cap, t->nblocks + 1, 8) != 0)
		return (SM_ENOMEM);
	for (i = t->nblocks; i > 0 && t->blocks[i - 1].gen > m->gen; i--)
		t->blocks[i] = t->blocks[i - 1];
	t->blocks[i] = *m;
	t->blocks[i].shipped = false;   /* the shipper learns it (ship.h) */
	t->nblocks++;
	return (0);
}

int
ing_db_open(const struct ing_db_cfg *cfg, struct ing_store *store,
    struct ing_db **out, struct sm_err *err)
{
	struct ing_db *db;
	int rv;

	sm_metrics_register_once(&db_metric_set);
	ing_compact_metrics_init();
	*out = NULL;
	if ((db = sm_calloc(1, sizeof(*db))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	db->cfg = *cfg;
	db->store = store;
	pthread_rwlock_init(&db->lock, NULL);
	pthread_mutex_init(&db->cut_mu, NULL);
	pthread_mutex_init(&db->compact_mu, NULL);
	pthread_mutex_init(&db->retire_mu, NULL);
	pthread_mutex_init(&db->retention_mu, NULL);
	pthread_mutex_init(&db->floor_mu, NULL);
	atomic_init(&db->next_gen, 1);
	atomic_init(&db->next_seq, 1);
	{
		uint64_t v = 0;

		/* getrandom(2) does not fail for 8 bytes once the pool is
		 * up; the clock is a fallback that still differs per run */
		if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
			v = (uint64_t)sm_now_ms() * 1000003u;
		atomic_init(&db->tenants_ver, v | 1);
	}
	atomic_init(&db->floor_ms, INT64_MIN);
	if (store != NULL && (rv = ing_db_replay(db, err)) != 0)
		goto fail;
	*out = db;
	return (0);
fail:
	ing_db_close(db);
	return (rv);
}

void
ing_db_close(struct ing_db *db)
{
	if (db == NULL)
		return;
	for (uint32_t i = 0; i < db->n; i++)
		tenant_free(db->t[i]);
	sm_free(db->t);
	for (uint32_t i = 0; i < db->nretired; i++)
		sm_free(db->retired[i].tenant);
	sm_free(db->retired);
	pthread_rwlock_destroy(&db->lock);
	pthread_mutex_destroy(&db->cut_mu);
	pthread_mutex_destroy(&db->compact_mu);
	pthread_mutex_destroy(&db->retire_mu);
	ing_floors_free(db);
	pthread_mutex_destroy(&db->retention_mu);
	pthread_mutex_destroy(&db->floor_mu);
	sm_free(db);
}

int
ing_sources_get(struct ing_db *db, const char *tenant, int64_t start,
    int64_t end, int all_time, struct ing_sources *src, struct sm_err *err)
{
	struct ing_tenant *t;

	memset(src, 0, sizeof(*src));
	if (tenant == NULL || (t = ing_tenant_find(db, tenant)) == NULL)
		return (0);
	ING_LOCK(&t->mu);
	/* Every head being cut too, however many: a query that skipped one
	 * would answer short. */
	if ((src->heads = sm_malloc((size_t)(t->ncutting + 1) *
	    sizeof(*src->heads))) == NULL || (t->nblocks > 0 &&
	    (src->blocks = sm_malloc((size_t)t->nblocks *
	    sizeof(*src->blocks))) == NULL)) {
		ING_UNLOCK(&t->mu);
		sm_free(src->heads);
		src->heads = NULL;
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	src->heads[src->nheads++] = t->head;
	ing_head_ref(t->head);
	for (uint32_t i = 0; i < t->ncutting; i++) {
		src->heads[src->nheads++] = t->cutting[i];
		ing_head_ref(t->cutting[i]);
	}
	for (uint32_t i = 0; i < t->nblocks; i++) {
		const struct ing_block_meta *m = &t->blocks[i];

		/* Tier blocks repeat raw data (block.h): the query reads one
		 * or the raw buckets it covers, never both (tiers.h). */
		if (all_time || (m->min_t < end && m->max_t > start))
			src->blocks[src->nblocks++] = *m;
	}
	ING_UNLOCK(&t->mu);
	return (0);
}

void
ing_sources_put(struct ing_sources *src)
{
	for (uint32_t i = 0; i < src->nheads; i++)
		ing_head_unref(src->heads[i]);
	sm_free(src->heads);
	sm_free(src->blocks);
}

/* A block whose meta and index are both damaged answers nothing. */
int
ing_sources_usable(const char *tenant, const struct ing_block_meta *m,
    struct sm_err *err)
{
	if (!m->broken)
		return (0);
	return (sm_err_set(err, SM_ECORRUPT, "corrupt block %s/%llu: its meta "
	    "and index are damaged, so its time range is unknown and no "
	    "answer for this tenant can be complete", tenant,
	    (unsigned long long)m->gen));
}

uint64_t
ing_db_tenants_version(struct ing_db *db)
{
	return (atomic_load(&db->tenants_ver));
}


int
ing_db_tenants(struct ing_db *db, struct sm_arena *a, uint64_t **out,
    uint32_t *n, uint64_t *version)
{
	uint64_t *h;

	ING_RDLOCK(&db->lock);
	*version = atomic_load(&db->tenants_ver);
	if ((h = sm_arena_alloc(a, (size_t)SM_MAX(db->n, 1) *
	    sizeof(*h))) == NULL) {
		ING_RWUNLOCK(&db->lock);
		return (SM_ENOMEM);
	}
	for (uint32_t i = 0; i < db->n; i++)
		h[i] = sm_ring_tenant_hash(db->t[i]->id);
	*n = db->n;
	ING_RWUNLOCK(&db->lock);
	qsort(h, *n, sizeof(*h), sm_u64_cmp);
	*out = h;
	return (0);
}

void
ing_db_stats(struct ing_db *db, struct ing_db_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->data_min = INT64_MAX;
	ING_RDLOCK(&db->lock);
	st->tenants = db->n;
	for (uint32_t i = 0; i < db->n; i++) {
		struct ing_tenant *t = db->t[i];

		ING_LOCK(&t->mu);
		st->series += t->head->set.nseries;
		st->head_bytes += ing_head_bytes(t->head);
		st->cutting += t->ncutting;
		st->blocks += t->nblocks;
		/* Heads' times are read without their locks, as their
		 * series counts are: a figure for the ring, one heartbeat
		 * old at worst (querier/fanout.c says how it is used). */
		if (t->head->set.nseries > 0)
			st->data_min = SM_MIN(st->data_min,
			    t->head->set.min_t);
		for (uint32_t k = 0; k < t->ncutting; k++)
			if (t->cutting[k]->set.nseries > 0)
				st->data_min = SM_MIN(st->data_min,
				    t->cutting[k]->set.min_t);
		for (uint32_t b = 0; b < t->nblocks; b++) {
			st->block_bytes += t->blocks[b].bytes;
			st->data_min = SM_MIN(st->data_min,
			    t->blocks[b].broken ? INT64_MIN :
			    t->blocks[b].min_t);
		}
		ING_UNLOCK(&t->mu);
	}
	ING_RWUNLOCK(&db->lock);
}

void
ing_db_blocks_free(struct ing_db_block *v, uint32_t n)
{
	ING_TENANT_RECS_FREE(v, n);
}

int
ing_db_blocks(struct ing_db *db, bool all, struct ing_db_block **out,
    uint32_t *n)
{
	struct ing_db_block *v = NULL;
	uint32_t nv = 0, cap = 0;
	int rv = 0;

	ING_RDLOCK(&db->lock);
	for (uint32_t i = 0; i < db->n && rv == 0; i++) {
		struct ing_tenant *t = db->t[i];

		ING_LOCK(&t->mu);
		for (uint32_t b = 0; b < t->nblocks && rv == 0; b++) {
			if (t->blocks[b].shipped && !all)
				continue;
			if ((rv = SM_GROW(v, cap, nv + 1, 64)) != 0)
				break;
			if ((v[nv].tenant = sm_strdup(t->id)) == NULL) {
				rv = SM_ENOMEM;
				break;
			}
			v[nv++].meta = t->blocks[b];
		}
		ING_UNLOCK(&t->mu);
	}
	ING_RWUNLOCK(&db->lock);
	if (rv != 0) {
		ing_db_blocks_free(v, nv);
		return (rv);
	}
	*out = v;
	*n = nv;
	return (0);
}

/* Index of block gen in t->blocks (sorted by gen), or t->nblocks. */
static uint32_t
block_find(const struct ing_tenant *t, uint64_t gen)
{
	uint32_t lo;

	SM_LOWER_BOUND(lo, t->nblocks, mid, t->blocks[mid].gen < gen);
	return (lo < t->nblocks && t->blocks[lo].gen == gen ? lo :
	    t->nblocks);
}

void
ing_db_block_shipped(struct ing_db *db, const char *tenant, uint64_t gen)
{
	struct ing_tenant *t = ing_tenant_find(db, tenant);
	uint32_t i;

	if (t == NULL)
		return;
	ING_LOCK(&t->mu);
	if ((i = block_find(t, gen)) < t->nblocks)
		t->blocks[i].shipped = true;
	ING_UNLOCK(&t->mu);
}

/* Take the blocks of t in drop[] out of t->blocks (t->mu held) and queue
 * them for deletion; how many were listed. */
static uint32_t
blocks_take(struct ing_db *db, struct ing_tenant *t, const uint64_t *drop,
    uint32_t ndrop, int64_t now)
{
	uint32_t taken = 0;

	ING_ASSERT_HELD(&t->mu);
	for (uint32_t d = 0; d < ndrop; d++) {
		uint32_t i = block_find(t, drop[d]);

		if (i == t->nblocks)
			continue;
		if (ing_retire_add(db, t->id, drop[d], now) != 0)
			sm_warn("ingester", "out of memory queueing a block "
			    "for deletion; it stays on disk\ttenant=%s gen=%llu",
			    t->id, (unsigned long long)drop[d]);
		memmove(&t->blocks[i], &t->blocks[i + 1],
		    (t->nblocks - i - 1) * sizeof(*t->blocks));
		t->nblocks--;
		taken++;
	}
	return (taken);
}

int
ing_db_block_adopt(struct ing_db *db, const char *tenant, uint64_t gen,
    const uint8_t *mv, size_t mn, const uint64_t *drop, uint32_t ndrop,
    struct sm_err *err)
{
	struct ing_block_meta m;
	struct ing_tenant *t;
	int rv;

	if ((rv = ing_block_meta_decode(mv, mn, &m, err)) != 0)
		return (rv);
	if (m.gen != gen)
		return (sm_err_set(err, SM_ECORRUPT, "block %llu: its meta "
		    "says gen %llu", (unsigned long long)gen,
		    (unsigned long long)m.gen));
	if ((rv = ing_tenant_get(db, tenant, &t)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	ING_LOCK(&t->mu);
	if (block_find(t, gen) == t->nblocks &&
	    (rv = ing_tenant_add_block(t, &m)) != 0) {
		ING_UNLOCK(&t->mu);
		return (sm_err_set(err, rv, "out of memory"));
	}
	t->blocks[block_find(t, gen)].shipped = true;
	(void)blocks_take(db, t, drop, ndrop, sm_now_ms());
	ING_UNLOCK(&t->mu);
	return (0);
}

bool
ing_db_block_drop(struct ing_db *db, const char *tenant, uint64_t gen)
{
	struct ing_tenant *t = ing_tenant_find(db, tenant);
	uint32_t n;

	if (t == NULL)
		return (false);
	ING_LOCK(&t->mu);
	n = blocks_take(db, t, &gen, 1, sm_now_ms());
	if (n > 0)
		atomic_fetch_add(&t->drop_epoch, 1);
	ING_UNLOCK(&t->mu);
	return (n > 0);
}

int
ing_db_local_drop(struct ing_db *db, const char *tenant, const uint64_t *gens,
    uint32_t n, int64_t floor_ms, struct sm_err *err)
{
	struct ing_tenant *t = ing_tenant_find(db, tenant);
	int rv;

	if (t == NULL || n == 0)
		return (0);
	if (floor_ms > atomic_load(&t->local_floor_ms)) {
		if (db->store != NULL && (rv = ing_store_local_floor_put(
		    db->store, tenant, floor_ms, err)) != 0)
			return (rv);
		atomic_store(&t->local_floor_ms, floor_ms);
	}
	ING_LOCK(&t->mu);
	if (blocks_take(db, t, gens, n, sm_now_ms()) > 0)
		atomic_fetch_add(&t->drop_epoch, 1);
	ING_UNLOCK(&t->mu);
	return (0);
}

int64_t
ing_db_local_floor(struct ing_db *db, const char *tenant)
{
	struct ing_tenant *t = ing_tenant_find(db, tenant);

	return (t == NULL ? INT64_MIN : atomic_load(&t->local_floor_ms));
}

uint64_t
ing_db_drop_epoch(struct ing_db *db, const char *tenant)
{
	struct ing_tenant *t = ing_tenant_find(db, tenant);

	return (t == NULL ? 0 : atomic_load(&t->drop_epoch));
}

int
ing_db_drop_check(struct ing_db *db, const char *tenant, uint64_t planned,
    struct sm_err *err)
{
	uint64_t now = ing_db_drop_epoch(db, tenant);

	if (now == planned)
		return (0);
	return (sm_err_set(err, SM_EAGAIN, "changed since the plan: blocks "
	    "of the tenant left this target's service meanwhile (local "
	    "retention, or a compactor fold now standing for them; drop "
	    "epoch %llu, planned at %llu); plan again",
	    (unsigned long long)now, (unsigned long long)planned));
}
