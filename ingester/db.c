/*
 * db.c -- tenants, durable writes, cuts, replay and queries; see db.h.
 */
#include "db.h"

#include <stdatomic.h>
#include <string.h>

#include "common/attime.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mtree.h"

#include "ids.h"

struct ing_tenant {
	char *id;
	pthread_mutex_t mu;
	pthread_cond_t cv;                /* a head's writers reached 0 */
	struct ing_head *head;
	int64_t first_write_ms;           /* of the current head, 0 = none */
	struct ing_head **cutting;
	uint32_t ncutting, cutting_cap;
	struct ing_block_meta *blocks;    /* sorted by gen */
	uint32_t nblocks, blocks_cap;
	struct ing_ids ids;               /* recent profile ids (mu) */
	struct sm_metric_child *m_active; /* active series gauge */
	struct sm_metric_child *m_refused;
};

struct ing_db {
	struct ing_db_cfg cfg;
	struct ing_store *store;
	pthread_rwlock_t lock;            /* the tenant table */
	struct ing_tenant **t;            /* sorted by id */
	uint32_t n, cap;
	atomic_uint_fast64_t next_gen;
	atomic_uint_fast64_t next_seq;
	pthread_mutex_t cut_mu;           /* one cut at a time */
	/* Retention: nothing before the floor is served; retired blocks
	 * are deleted from disk after a grace period (queries that copied
	 * their meta before the retirement may still be reading them). */
	_Atomic int64_t floor_ms;
	pthread_mutex_t retire_mu;
	struct db_retired *retired;
	uint32_t nretired, retired_cap;
};

struct db_retired {
	char *tenant;
	uint64_t gen;
	int64_t at_ms;
};

#define DB_RETIRE_GRACE_MS 60000

static struct sm_metric *m_cuts, *m_cut_fail, *m_active, *m_refused;

static void
db_metrics_init(void)
{
	if (m_cuts != NULL)
		return;
	m_cuts = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_ingester_block_cuts_total",
	    "Heads cut into blocks.", NULL, NULL, 0);
	m_cut_fail = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_ingester_block_cut_failures_total",
	    "Block cuts that failed and will be retried.", NULL, NULL, 0);
	m_active = sm_metric_register(SM_METRIC_GAUGE,
	    "smolder_ingester_active_series", "Series in the tenant's head "
	    "(what the active-series limit counts), by tenant.",
	    (const char *const[]){ "tenant", NULL }, NULL, 0);
	m_refused = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_ingester_series_limit_refusals_total", "Writes refused "
	    "because they would take the tenant's head past its "
	    "active-series limit, by tenant.",
	    (const char *const[]){ "tenant", NULL }, NULL, 0);
}

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
	uint32_t lo = 0, hi = db->n;

	*found = 0;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		int c = strcmp(db->t[mid]->id, id);

		if (c == 0) {
			*found = 1;
			return (mid);
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo);
}

static struct ing_tenant *
tenant_find(struct ing_db *db, const char *id)
{
	struct ing_tenant *t = NULL;
	uint32_t i;
	int found;

	pthread_rwlock_rdlock(&db->lock);
	i = tenant_pos(db, id, &found);
	if (found)
		t = db->t[i];
	pthread_rwlock_unlock(&db->lock);
	return (t);
}

static int
tenant_get(struct ing_db *db, const char *id, struct ing_tenant **out)
{
	struct ing_tenant *t;
	uint32_t i;
	int found, rv = 0;

	if ((*out = tenant_find(db, id)) != NULL)
		return (0);
	pthread_rwlock_wrlock(&db->lock);
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
	t->m_active = sm_metric_child(m_active, t->id);
	t->m_refused = sm_metric_child(m_refused, t->id);
	ing_ids_init(&t->ids, db->cfg.idempotency_window_ms > 0 ?
	    db->cfg.idempotency_window_ms : 60000,
	    db->cfg.idempotency_max > 0 ? db->cfg.idempotency_max : 1000000);
	if (ing_head_create(atomic_fetch_add(&db->next_gen, 1),
	    db->cfg.bucket_ms, &t->head) != 0) {
		t->head = NULL;
		tenant_free(t);
		rv = SM_ENOMEM;
		goto out;
	}
	memmove(&db->t[i + 1], &db->t[i], (size_t)(db->n - i) * sizeof(*db->t));
	db->t[i] = t;
	db->n++;
	*out = t;
out:
	pthread_rwlock_unlock(&db->lock);
	return (rv);
}

static int
tenant_add_block(struct ing_tenant *t, const struct ing_block_meta *m)
{
	uint32_t i;

	if (SM_GROW(t->blocks, t->blocks_cap, t->nblocks + 1, 8) != 0)
		return (SM_ENOMEM);
	for (i = t->nblocks; i > 0 && t->blocks[i - 1].gen > m->gen; i--)
		t->blocks[i] = t->blocks[i - 1];
	t->blocks[i] = *m;
	t->nblocks++;
	return (0);
}

/* --- validation ----------------------------------------------------------- */

/* Everything ing_head_write relies on, checked before anything is logged. */
static int
write_validate(const Smolder__V1__WriteRequest *req, struct sm_err *err)
{
	const Smolder__V1__StackTree *rt = req->tree;

	if (req->tenant == NULL || req->tenant[0] == '\0')
		return (sm_err_set(err, SM_EMALFORMED, "write: no tenant"));
	if (rt == NULL || rt->n_parent != rt->n_name || rt->n_strings == 0)
		return (sm_err_set(err, SM_EMALFORMED, "write: bad stack tree"));
	for (size_t i = 0; i < rt->n_parent; i++) {
		if (rt->parent[i] > i || rt->name[i] >= rt->n_strings)
			return (sm_err_set(err, SM_EMALFORMED, "write: stack "
			    "tree node %zu has parent %u / name %u out of "
			    "range", i + 1, rt->parent[i], rt->name[i]));
	}
	for (size_t k = 0; k < req->n_series; k++) {
		const Smolder__V1__SeriesWrite *w = req->series[k];

		if (w->n_node != w->n_value)
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "%zu has %zu nodes and %zu values", k, w->n_node,
			    w->n_value));
		for (size_t j = 0; j < w->n_node; j++) {
			if (w->node[j] == 0 || w->node[j] > rt->n_parent ||
			    w->value[j] == 0 ||
			    (j > 0 && w->node[j] <= w->node[j - 1]))
				return (sm_err_set(err, SM_EMALFORMED, "write: "
				    "series %zu pair %zu is invalid", k, j));
		}
		if (ing_head_spans_check(w, k, (uint32_t)rt->n_parent, err) != 0)
			return (SM_EMALFORMED);
		for (size_t i = 0; i < w->n_labels; i++) {
			const Types__V1__LabelPair *lp = w->labels[i];

			if (lp->name == NULL || lp->value == NULL ||
			    (i > 0 && strcmp(w->labels[i - 1]->name,
			    lp->name) >= 0))
				return (sm_err_set(err, SM_EMALFORMED, "write: "
				    "series %zu labels not sorted and unique",
				    k));
		}
	}
	return (0);
}

/* The write's idempotency key, or NULL when it carries none. */
static const uint8_t *
write_id(const Smolder__V1__WriteRequest *req)
{
	return (req->profile_id.len == ING_ID_LEN ? req->profile_id.data :
	    NULL);
}

/* --- retention ------------------------------------------------------------ */

/* Queue a block for deletion from disk (at_ms: when it was retired). */
static int
retire_add(struct ing_db *db, const char *tenant, uint64_t gen, int64_t at_ms)
{
	int rv = 0;

	pthread_mutex_lock(&db->retire_mu);
	if ((rv = SM_GROW(db->retired, db->retired_cap, db->nretired + 1,
	    16)) != 0)
		goto out;
	if ((db->retired[db->nretired].tenant = sm_strdup(tenant)) == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	db->retired[db->nretired].gen = gen;
	db->retired[db->nretired].at_ms = at_ms;
	db->nretired++;
out:
	pthread_mutex_unlock(&db->retire_mu);
	return (rv);
}

/* Delete the retired blocks whose grace period is over (cutter thread). */
static void
retire_purge(struct ing_db *db, int64_t now_ms)
{
	uint32_t i = 0;

	pthread_mutex_lock(&db->retire_mu);
	while (i < db->nretired) {
		struct db_retired r = db->retired[i];
		struct sm_err err;

		if (r.at_ms != INT64_MIN && now_ms - r.at_ms <
		    DB_RETIRE_GRACE_MS) {
			i++;
			continue;
		}
		sm_err_clear(&err);
		if (ing_store_block_delete(db->store, r.tenant, r.gen,
		    &err) != 0) {
			sm_warn("ingester", "retention: block delete failed, "
			    "will retry\ttenant=%s block=%llu err=\"%s\"",
			    r.tenant, (unsigned long long)r.gen, err.msg);
			i++;
			continue;
		}
		sm_info("ingester", "retention: block deleted\ttenant=%s "
		    "block=%llu", r.tenant, (unsigned long long)r.gen);
		sm_free(r.tenant);
		db->retired[i] = db->retired[--db->nretired];
	}
	pthread_mutex_unlock(&db->retire_mu);
}

int
ing_db_retention(struct ing_db *db, int64_t before_ms, uint32_t *nblocks,
    struct sm_err *err)
{
	int64_t now = sm_now_ms();
	int rv;

	*nblocks = 0;
	if (before_ms <= atomic_load(&db->floor_ms))
		return (0);
	/* Persist first: after a crash the floor still hides the data. */
	if (db->store != NULL && (rv = ing_store_floor_set(db->store,
	    before_ms, err)) != 0)
		return (rv);
	atomic_store(&db->floor_ms, before_ms);
	pthread_rwlock_rdlock(&db->lock);
	for (uint32_t i = 0; i < db->n; i++) {
		struct ing_tenant *t = db->t[i];
		uint32_t k = 0;

		pthread_mutex_lock(&t->mu);
		for (uint32_t b = 0; b < t->nblocks; b++) {
			const struct ing_block_meta *m = &t->blocks[b];

			if (!m->broken && m->max_t <= before_ms && db->store !=
			    NULL && retire_add(db, t->id, m->gen, now) == 0) {
				(*nblocks)++;
				continue;
			}
			t->blocks[k++] = *m;
		}
		t->nblocks = k;
		pthread_mutex_unlock(&t->mu);
	}
	pthread_rwlock_unlock(&db->lock);
	sm_info("ingester", "retention floor raised\tbefore_ms=%lld "
	    "blocks_retired=%u", (long long)before_ms, *nblocks);
	return (0);
}

/*
 * The select with its start raised to the retention floor (a copy in
 * *tmp when it changes).
 */
static const Smolder__V1__Select *
select_floor(struct ing_db *db, const Smolder__V1__Select *sel,
    Smolder__V1__Select *tmp)
{
	int64_t fl = atomic_load(&db->floor_ms);

	if (sel == NULL || sel->start_ms >= fl)
		return (sel);
	*tmp = *sel;
	tmp->start_ms = fl;
	if (tmp->end_ms < fl)
		tmp->end_ms = fl;    /* empty range */
	return (tmp);
}

/* --- open, replay --------------------------------------------------------- */

static int
db_scan_block(void *arg, const char *tenant, const struct ing_block_meta *m)
{
	struct ing_db *db = arg;
	struct ing_tenant *t;

	/* Retention reached it before the process stopped: delete now. */
	if (!m->broken && m->max_t <= atomic_load(&db->floor_ms))
		return (retire_add(db, tenant, m->gen, INT64_MIN));
	if (tenant_get(db, tenant, &t) != 0 || tenant_add_block(t, m) != 0)
		return (SM_ENOMEM);
	return (0);
}

static int
db_replay_one(void *arg, const char *tenant, uint64_t gen, uint64_t seq,
    const uint8_t *rec, size_t n)
{
	struct ing_db *db = arg;
	struct sm_arena *a = sm_arena_create(0);
	ProtobufCAllocator al;
	Smolder__V1__Request *req;
	struct ing_tenant *t;
	struct sm_err err;
	const uint8_t *id;
	uint32_t ns, np;
	int rv = 0;

	(void)gen;
	if (a == NULL)
		return (SM_ENOMEM);
	al = sm_arena_pbc(a);
	req = smolder__v1__request__unpack(&al, n, rec);
	sm_err_clear(&err);
	if (req == NULL || req->method_case !=
	    SMOLDER__V1__REQUEST__METHOD_WRITE ||
	    write_validate(req->write, &err) != 0 ||
	    strcmp(req->write->tenant, tenant) != 0) {
		sm_error("ingester", "head log: undecodable record skipped\t"
		    "tenant=%s seq=%llu err=\"%s\"", tenant,
		    (unsigned long long)seq, err.msg);
		goto out;
	}
	if ((rv = tenant_get(db, tenant, &t)) != 0)
		goto out;
	id = write_id(req->write);
	if (id != NULL && ing_ids_get(&t->ids, id) == ING_ID_DONE) {
		sm_warn("ingester", "head log: duplicate profile id skipped\t"
		    "tenant=%s seq=%llu", tenant, (unsigned long long)seq);
		goto out;
	}
	/* All or nothing (head.h): a failure here fails the open with
	 * nothing of this record applied. */
	rv = ing_head_write(t->head, req->write, 0, &ns, &np, &err);
	if (rv == 0 && id != NULL)
		rv = ing_ids_set(&t->ids, id, ING_ID_DONE, sm_now_ms());
	if (rv == 0 && t->first_write_ms == 0)
		t->first_write_ms = sm_now_ms();
out:
	sm_arena_destroy(a);
	return (rv);
}

int
ing_db_open(const struct ing_db_cfg *cfg, struct ing_store *store,
    struct ing_db **out, struct sm_err *err)
{
	struct ing_db *db;
	uint64_t max_gen = 0, max_seq = 0, corrupt = 0, blocks = 0;
	int64_t t0 = sm_mono_ns();
	int rv;

	db_metrics_init();
	*out = NULL;
	if ((db = sm_calloc(1, sizeof(*db))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	db->cfg = *cfg;
	db->store = store;
	pthread_rwlock_init(&db->lock, NULL);
	pthread_mutex_init(&db->cut_mu, NULL);
	pthread_mutex_init(&db->retire_mu, NULL);
	atomic_init(&db->next_gen, 1);
	atomic_init(&db->next_seq, 1);
	atomic_init(&db->floor_ms, INT64_MIN);
	if (store != NULL) {
		int64_t fl;

		if ((rv = ing_store_floor_get(store, &fl, err)) != 0)
			goto fail;
		atomic_store(&db->floor_ms, fl);
		if ((rv = ing_store_blocks_scan(store, db_scan_block, db,
		    err)) != 0)
			goto fail;
		for (uint32_t i = 0; i < db->n; i++) {
			struct ing_tenant *t = db->t[i];

			for (uint32_t b = 0; b < t->nblocks; b++)
				max_gen = SM_MAX(max_gen, t->blocks[b].gen);
			blocks += t->nblocks;
		}
		if ((rv = ing_store_log_replay(store, db_replay_one, db,
		    &max_gen, &max_seq, &corrupt, err)) != 0) {
			sm_err_prefix(err, "head log replay");
			goto fail;
		}
		/* Generations above everything on disk for every head, so
		 * their next cut drops all replayed records too. */
		for (uint32_t b = 0; b < db->n; b++) {
			struct ing_tenant *t = db->t[b];

			for (uint32_t k = 0; k < t->nblocks; k++)
				max_gen = SM_MAX(max_gen, t->blocks[k].gen);
		}
		atomic_store(&db->next_gen, max_gen + 1);
		atomic_store(&db->next_seq, max_seq + 1);
		for (uint32_t i = 0; i < db->n; i++) {
			db->t[i]->head->gen = atomic_fetch_add(&db->next_gen, 1);
			sm_gauge_set(db->t[i]->m_active, (double)atomic_load(
			    &db->t[i]->head->nseries));
		}
		sm_info("ingester", "storage opened\ttenants=%u blocks=%llu "
		    "replayed_head_records_max_seq=%llu corrupt_records=%llu "
		    "ms=%lld", db->n, (unsigned long long)blocks,
		    (unsigned long long)max_seq, (unsigned long long)corrupt,
		    (long long)((sm_mono_ns() - t0) / 1000000));
	}
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
	pthread_mutex_destroy(&db->retire_mu);
	sm_free(db);
}

/* --- writes --------------------------------------------------------------- */

static void
writer_done(struct ing_tenant *t, struct ing_head *h, const uint8_t *id,
    int ok)
{
	pthread_mutex_lock(&t->mu);
	if (ok && h == t->head && t->first_write_ms == 0)
		t->first_write_ms = sm_now_ms();
	/* A head's series only grow; a cut head no longer counts. */
	if (h == t->head)
		sm_gauge_set(t->m_active, (double)atomic_load(&h->nseries));
	/* Remembered as done, or forgotten so a retry is applied.  Setting
	 * an existing id cannot fail (no allocation). */
	if (id != NULL)
		(void)ing_ids_set(&t->ids, id, ok ? ING_ID_DONE :
		    ING_ID_ABSENT, sm_now_ms());
	atomic_fetch_sub(&h->writers, 1);
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

int
ing_db_write(struct ing_db *db, const uint8_t *raw, size_t rawlen,
    const Smolder__V1__WriteRequest *req, struct ing_write_result *res,
    struct sm_err *err)
{
	const uint8_t *id = write_id(req);
	struct ing_tenant *t;
	struct ing_head *h;
	uint64_t gen, seq;
	int rv;

	memset(res, 0, sizeof(*res));
	if ((rv = write_validate(req, err)) != 0)
		return (rv);
	if ((rv = tenant_get(db, req->tenant, &t)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	pthread_mutex_lock(&t->mu);
	if (id != NULL) {
		enum ing_id_state st;

		/* A duplicate in flight: wait for its outcome. */
		while ((st = ing_ids_get(&t->ids, id)) == ING_ID_PENDING)
			pthread_cond_wait(&t->cv, &t->mu);
		if (st == ING_ID_DONE) {
			pthread_mutex_unlock(&t->mu);
			res->duplicate = true;
			return (0);
		}
		if (ing_ids_set(&t->ids, id, ING_ID_PENDING, sm_now_ms()) != 0) {
			pthread_mutex_unlock(&t->mu);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
	}
	h = t->head;
	atomic_fetch_add(&h->writers, 1);
	gen = h->gen;
	pthread_mutex_unlock(&t->mu);
	/* Over the active-series limit: refused before the log. */
	if ((rv = ing_head_series_check(h, req, req->max_series, err)) != 0) {
		if (rv == SM_ELIMIT)
			sm_counter_inc(t->m_refused);
		writer_done(t, h, id, 0);
		return (rv);
	}
	seq = atomic_fetch_add(&db->next_seq, 1);
	if (db->store != NULL && (rv = ing_store_log_append(db->store,
	    req->tenant, gen, seq, raw, rawlen, err)) != 0) {
		writer_done(t, h, id, 0);
		return (rv);
	}
	/*
	 * A write that fails to apply is not applied at all (head.h, All or
	 * nothing) and not acknowledged, so it must not come back at replay
	 * either: its record is deleted.  Decision, for the one case where
	 * that delete fails (a store error, logged): the record stays and
	 * replay applies it whole, so the write the client was told failed
	 * is there once; a retry with the same profile id is then a
	 * duplicate (replay marks the id done), one under a new id counts
	 * it twice.  The same holds for a write logged just before a
	 * kill -9, whose client never got an answer: replayed whole, at
	 * least once.  A write is never half there.
	 */
	rv = ing_head_write(h, req, req->max_series, &res->series,
	    &res->pairs, err);
	if (rv == SM_ELIMIT)
		sm_counter_inc(t->m_refused);
	if (rv != 0 && db->store != NULL) {
		struct sm_err e2;

		/* Not applied, so not acknowledged: unlog it too. */
		if (ing_store_log_delete(db->store, req->tenant, gen, seq,
		    &e2) != 0)
			sm_error("ingester", "could not unlog a failed write\t"
			    "tenant=%s seq=%llu err=\"%s\"", req->tenant,
			    (unsigned long long)seq, e2.msg);
	}
	writer_done(t, h, id, rv == 0);
	return (rv);
}

/* --- cuts ----------------------------------------------------------------- */

/* Remove `h` from t->cutting (caller holds t->mu). */
static void
cutting_remove(struct ing_tenant *t, struct ing_head *h)
{
	for (uint32_t i = 0; i < t->ncutting; i++) {
		if (t->cutting[i] == h) {
			memmove(&t->cutting[i], &t->cutting[i + 1],
			    (size_t)(t->ncutting - i - 1) *
			    sizeof(*t->cutting));
			t->ncutting--;
			return;
		}
	}
}

/*
 * Turn one head that is already in t->cutting (and has no writers) into a
 * block.  On failure it stays in `cutting` (still queried) and the next
 * tick retries.  Caller holds db->cut_mu.
 */
static int
cut_commit(struct ing_db *db, struct ing_tenant *t, struct ing_head *h,
    struct sm_err *err)
{
	struct ing_block_enc e;
	int rv;

	pthread_rwlock_rdlock(&h->lock);
	if (h->set.nseries == 0) {
		pthread_rwlock_unlock(&h->lock);
		/* Nothing to keep; its log records (if any) still go. */
		memset(&e, 0, sizeof(e));
		e.meta.gen = h->gen;
		rv = 0;
		goto drop;
	}
	rv = ing_block_encode(h, db->cfg.zstd_level, &e, err);
	pthread_rwlock_unlock(&h->lock);
	if (rv != 0)
		return (rv);
	if ((rv = ing_store_block_commit(db->store, t->id, &e, err)) != 0) {
		ing_block_enc_fini(&e);
		return (rv);
	}
	pthread_mutex_lock(&t->mu);
	rv = tenant_add_block(t, &e.meta);
	cutting_remove(t, h);
	pthread_mutex_unlock(&t->mu);
	sm_info("ingester", "block cut\ttenant=%s block=%llu series=%u "
	    "nodes=%u bytes=%llu", t->id, (unsigned long long)e.meta.gen,
	    e.meta.nseries, e.meta.nnodes, (unsigned long long)e.meta.bytes);
	ing_block_enc_fini(&e);
	ing_head_unref(h);
	sm_counter_inc(sm_metric_child0(m_cuts));
	return (rv == 0 ? 0 : sm_err_set(err, rv, "out of memory"));
drop:
	pthread_mutex_lock(&t->mu);
	cutting_remove(t, h);
	pthread_mutex_unlock(&t->mu);
	ing_head_unref(h);
	return (rv);
}

/* Swap in a fresh head and cut the old one.  Caller holds db->cut_mu. */
static int
tenant_cut(struct ing_db *db, struct ing_tenant *t, struct sm_err *err)
{
	struct ing_head *h, *nh;
	int rv;

	if ((rv = ing_head_create(atomic_fetch_add(&db->next_gen, 1),
	    db->cfg.bucket_ms, &nh)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	pthread_mutex_lock(&t->mu);
	if (SM_GROW(t->cutting, t->cutting_cap, t->ncutting + 1, 4) != 0) {
		pthread_mutex_unlock(&t->mu);
		ing_head_unref(nh);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	h = t->head;
	t->cutting[t->ncutting++] = h;
	t->head = nh;
	t->first_write_ms = 0;
	sm_gauge_set(t->m_active, 0);    /* h's series leave the head */
	/* Every write logged with h's generation must be in h. */
	while (atomic_load(&h->writers) > 0)
		pthread_cond_wait(&t->cv, &t->mu);
	pthread_mutex_unlock(&t->mu);
	return (cut_commit(db, t, h, err));
}

static uint64_t
heads_bytes(struct ing_db *db)
{
	uint64_t total = 0;

	pthread_rwlock_rdlock(&db->lock);
	for (uint32_t i = 0; i < db->n; i++)
		total += ing_head_bytes(db->t[i]->head);
	pthread_rwlock_unlock(&db->lock);
	return (total);
}

/* Cut heads that are due (all with force).  Caller holds db->cut_mu. */
static int
db_cut(struct ing_db *db, int64_t now_ms, int force, struct sm_err *err)
{
	int over = !force && db->cfg.head_max_bytes != 0 &&
	    heads_bytes(db) > db->cfg.head_max_bytes;
	int first_rv = 0;

	for (uint32_t i = 0;; i++) {
		struct ing_tenant *t;
		struct ing_head *retry = NULL;
		int due, rv = 0;

		pthread_rwlock_rdlock(&db->lock);
		t = i < db->n ? db->t[i] : NULL;
		pthread_rwlock_unlock(&db->lock);
		if (t == NULL)
			break;
		pthread_mutex_lock(&t->mu);
		if (t->ncutting > 0) {
			retry = t->cutting[0];   /* a failed earlier cut */
			ing_head_ref(retry);
		}
		due = t->first_write_ms != 0 && (force || over ||
		    now_ms - t->first_write_ms >= db->cfg.block_ms);
		pthread_mutex_unlock(&t->mu);
		if (retry != NULL) {
			rv = cut_commit(db, t, retry, err);
			ing_head_unref(retry);
		}
		if (rv == 0 && due)
			rv = tenant_cut(db, t, err);
		if (rv != 0) {
			sm_counter_inc(sm_metric_child0(m_cut_fail));
			sm_error("ingester", "block cut failed; will retry\t"
			    "tenant=%s err=\"%s\"", t->id, err->msg);
			if (first_rv == 0)
				first_rv = rv;
		}
	}
	return (first_rv);
}

void
ing_db_tick(struct ing_db *db, int64_t now_ms)
{
	struct sm_err err;

	if (db->store == NULL)
		return;
	sm_err_clear(&err);
	pthread_mutex_lock(&db->cut_mu);
	(void)db_cut(db, now_ms, 0, &err);
	pthread_mutex_unlock(&db->cut_mu);
	retire_purge(db, now_ms);
}

int
ing_db_flush(struct ing_db *db, struct sm_err *err)
{
	int rv;

	if (db->store == NULL)
		return (0);
	pthread_mutex_lock(&db->cut_mu);
	rv = db_cut(db, sm_now_ms(), 1, err);
	pthread_mutex_unlock(&db->cut_mu);
	return (rv);
}

/* --- sources -------------------------------------------------------------- */

/* What a query reads for one tenant, taken under the tenant mutex. */
struct sources {
	struct ing_head *heads[16];
	uint32_t nheads;
	struct ing_block_meta *blocks;
	uint32_t nblocks;
};

static int
sources_get(struct ing_db *db, const char *tenant, int64_t start, int64_t end,
    int all_time, struct sources *src, struct sm_err *err)
{
	struct ing_tenant *t;

	memset(src, 0, sizeof(*src));
	if (tenant == NULL || (t = tenant_find(db, tenant)) == NULL)
		return (0);
	pthread_mutex_lock(&t->mu);
	src->heads[src->nheads++] = t->head;
	ing_head_ref(t->head);
	for (uint32_t i = 0; i < t->ncutting && src->nheads <
	    SM_ARRAY_LEN(src->heads); i++) {
		src->heads[src->nheads++] = t->cutting[i];
		ing_head_ref(t->cutting[i]);
	}
	if (t->nblocks > 0 && (src->blocks = sm_malloc((size_t)t->nblocks *
	    sizeof(*src->blocks))) == NULL) {
		pthread_mutex_unlock(&t->mu);
		for (uint32_t i = 0; i < src->nheads; i++)
			ing_head_unref(src->heads[i]);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	for (uint32_t i = 0; i < t->nblocks; i++) {
		const struct ing_block_meta *m = &t->blocks[i];

		if (all_time || (m->min_t < end && m->max_t > start))
			src->blocks[src->nblocks++] = *m;
	}
	pthread_mutex_unlock(&t->mu);
	return (0);
}

static void
sources_put(struct sources *src)
{
	for (uint32_t i = 0; i < src->nheads; i++)
		ing_head_unref(src->heads[i]);
	sm_free(src->blocks);
}

/* A block whose meta and index are both damaged answers nothing. */
static int
block_usable(const char *tenant, const struct ing_block_meta *m,
    struct sm_err *err)
{
	if (!m->broken)
		return (0);
	return (sm_err_set(err, SM_ECORRUPT, "corrupt block %s/%llu: its meta "
	    "and index are damaged, so its time range is unknown and no "
	    "answer for this tenant can be complete", tenant,
	    (unsigned long long)m->gen));
}

/*
 * Call fn(arg, set, bucket_ms, ss, y) for every source's index: the heads'
 * sets under their read locks, with their yields (set.h, Yielding), the
 * blocks' indexes through the cache (no data part is read; y NULL).  Stops
 * at the first non-zero return.
 */
static int
sources_each_index(struct ing_db *db, const char *tenant,
    const struct sources *src, const struct sm_selector *ss,
    int (*fn)(void *arg, const struct ing_set *s, int64_t bucket_ms,
    const struct sm_selector *ss, const struct ing_yield *y,
    struct sm_err *err), void *arg,
    struct sm_err *err)
{
	int rv = 0;

	for (uint32_t i = 0; i < src->nheads && rv == 0; i++) {
		struct ing_head *h = src->heads[i];
		struct ing_yield y = ing_head_yield(h);

		pthread_rwlock_rdlock(&h->lock);
		rv = fn(arg, &h->set, h->bucket_ms, ss, &y, err);
		pthread_rwlock_unlock(&h->lock);
	}
	for (uint32_t i = 0; i < src->nblocks && rv == 0; i++) {
		const struct ing_set *idx;
		struct ing_cache_ent *ie;

		if ((rv = block_usable(tenant, &src->blocks[i], err)) != 0 ||
		    (rv = ing_store_block_index(db->store, tenant,
		    &src->blocks[i], &idx, &ie, err)) != 0)
			break;
		rv = fn(arg, idx, src->blocks[i].bucket_ms, ss, NULL, err);
		ing_store_release(db->store, ie);
	}
	return (rv);
}

/* --- picks (replica de-duplication, querier/plan.c) ------------------------ */

/*
 * The pick of series `fp` when the select is picked: NULL means the series
 * is not wanted here.  Picks are validated sorted (select_validate).
 */
static const Smolder__V1__Pick *
pick_find(const Smolder__V1__Select *sel, uint64_t fp)
{
	size_t lo = 0, hi = sel->n_picks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (sel->picks[mid]->fp < fp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo < sel->n_picks && sel->picks[lo]->fp == fp ?
	    sel->picks[lo] : NULL);
}

/* Does the series' pick (NULL: not picked, so every bucket) take t? */
static bool
pick_bucket(const Smolder__V1__Pick *pk, int64_t t)
{
	size_t lo = 0, hi;

	if (pk == NULL || pk->n_t == 0)
		return (true);
	hi = pk->n_t;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pk->t[mid] < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo < pk->n_t && pk->t[lo] == t);
}

/*
 * Whether series `sr` takes part at all, and its pick: false when the
 * select is picked and the series is not among the picks.
 */
static bool
series_picked(const Smolder__V1__Select *sel, uint64_t fp,
    const Smolder__V1__Pick **pk)
{
	*pk = NULL;
	if (!sel->picked)
		return (true);
	return ((*pk = pick_find(sel, fp)) != NULL);
}

/* --- merge ---------------------------------------------------------------- */

static void
meta_of(const struct ing_set *s, const struct ing_series *sr,
    Smolder__V1__SeriesMeta *m)
{
	smolder__v1__series_meta__init(m);
	m->spy_name = (char *)ing_set_str(s, sr->meta.spy);
	m->units = (char *)ing_set_str(s, sr->meta.units);
	m->aggregation = (char *)ing_set_str(s, sr->meta.aggregation);
	m->sample_rate = sr->meta.sample_rate;
}

/* Add the values of series `sr` (buckets b) in range, and picked, to acc. */
static uint64_t
acc_buckets(const struct ing_bucket *b, uint32_t nb, int64_t bucket_ms,
    int64_t start, int64_t end, const Smolder__V1__Pick *pk, int64_t *acc)
{
	uint64_t profiles = 0;

	for (uint32_t k = ing_buckets_first(b, nb, bucket_ms, start); k < nb && ing_bucket_overlaps(&b[k], bucket_ms,
	    start, end); k++) {
		if (!pick_bucket(pk, b[k].t))
			continue;
		if (b[k].packed != NULL) {
			struct ing_pair_cur c;
			uint32_t node;
			int64_t v;

			ing_pairs_begin(&b[k], &c);
			while (ing_pairs_next(&c, &node, &v))
				acc[node] = sm_add_sat(acc[node], v);
		} else {
			for (uint32_t j = 0; j < b[k].n; j++)
				acc[b[k].node[j]] = sm_add_sat(
				    acc[b[k].node[j]], b[k].value[j]);
		}
		profiles += b[k].profiles;
	}
	return (profiles);
}

/*
 * Metadata strings of a block index live in the cache; the merge tree
 * borrows meta strings, so copy them into the arena first.
 */
static void
add_meta_copy(struct sm_mtree *mt, struct sm_arena *a,
    const Smolder__V1__SeriesMeta *x)
{
	Smolder__V1__SeriesMeta c = *x;

	c.spy_name = sm_arena_strndup(a, x->spy_name, strlen(x->spy_name));
	c.units = sm_arena_strndup(a, x->units, strlen(x->units));
	c.aggregation = sm_arena_strndup(a, x->aggregation,
	    strlen(x->aggregation));
	if (c.spy_name != NULL && c.units != NULL && c.aggregation != NULL)
		sm_mtree_add_meta(mt, &c);
}

/*
 * Make acc (*nacc counters) cover the head's tree, which writes grow while
 * a query yields.  0 or SM_ENOMEM.
 */
static int
acc_cover(int64_t **acc, uint32_t *nacc, uint32_t n)
{
	int64_t *na;

	if (n <= *nacc)
		return (0);
	if ((na = sm_realloc(*acc, (size_t)n * sizeof(*na))) == NULL)
		return (SM_ENOMEM);
	memset(na + *nacc, 0, (size_t)(n - *nacc) * sizeof(*na));
	*acc = na;
	*nacc = n;
	return (0);
}

static int
merge_head(struct ing_head *h, const struct sm_selector *ss,
    const Smolder__V1__Select *sel, struct sm_mtree *mt, struct sm_arena *a,
    struct sm_err *err)
{
	struct ing_yield y = ing_head_yield(h);
	uint32_t *ids = NULL, n = 0, nacc = 0;
	int64_t *acc = NULL;
	int rv;

	pthread_rwlock_rdlock(&h->lock);
	if ((rv = ing_set_select(&h->set, ss, sel->start_ms, sel->end_ms,
	    h->bucket_ms, &y, &ids, &n, err)) != 0 || n == 0)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		const struct ing_series *sr;
		const Smolder__V1__Pick *pk;
		Smolder__V1__SeriesMeta m;

		/* The tree may have grown during a yield. */
		ing_yield(&y);
		if ((rv = acc_cover(&acc, &nacc, h->tree.n)) != 0)
			goto out;
		sr = h->set.series[ids[i]];
		if (!series_picked(sel, sr->fp, &pk))
			continue;
		mt->profiles += acc_buckets(sr->b, sr->nb, h->bucket_ms,
		    sel->start_ms, sel->end_ms, pk, acc);
		meta_of(&h->set, sr, &m);
		add_meta_copy(mt, a, &m);
	}
	if ((rv = acc_cover(&acc, &nacc, h->tree.n)) != 0)
		goto out;
	rv = sm_mtree_add_tree(mt, h->tree.parent, h->tree.name, h->tree.n,
	    acc, h->frames.strs, h->frames.n, err);
out:
	pthread_rwlock_unlock(&h->lock);
	sm_free(ids);
	sm_free(acc);
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	return (rv);
}

static int
merge_block(struct ing_db *db, const char *tenant,
    const struct ing_block_meta *m, const struct sm_selector *ss,
    const Smolder__V1__Select *sel, struct sm_mtree *mt, struct sm_arena *a,
    struct sm_err *err)
{
	const struct ing_set *idx;
	const struct ing_block_tree *tree = NULL;
	struct ing_cache_ent *ie = NULL, *te = NULL;
	struct sm_arena *scratch = NULL;
	uint32_t *ids = NULL, n = 0;
	int64_t *acc = NULL;
	int rv;

	if ((rv = block_usable(tenant, m, err)) != 0 ||
	    (rv = ing_store_block_index(db->store, tenant, m, &idx, &ie,
	    err)) != 0)
		return (rv);
	if ((rv = ing_set_select(idx, ss, sel->start_ms, sel->end_ms,
	    m->bucket_ms, NULL, &ids, &n, err)) != 0 || n == 0)
		goto out;
	if ((rv = ing_store_block_tree(db->store, tenant, m, &tree, &te,
	    err)) != 0)
		goto out;
	acc = sm_calloc(tree->n, sizeof(*acc));
	scratch = sm_arena_create(0);
	if (acc == NULL || scratch == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct ing_series *sr = idx->series[ids[i]];
		const Smolder__V1__Pick *pk;
		struct ing_bucket *b;
		Smolder__V1__SeriesMeta sm;

		if (!series_picked(sel, sr->fp, &pk))
			continue;
		sm_arena_reset(scratch);
		if ((rv = ing_store_block_data(db->store, tenant, m, ids[i],
		    sr, scratch, &b, err)) != 0)
			goto out;
		mt->profiles += acc_buckets(b, sr->nb, m->bucket_ms,
		    sel->start_ms, sel->end_ms, pk, acc);
		meta_of(idx, sr, &sm);
		add_meta_copy(mt, a, &sm);
	}
	rv = sm_mtree_add_tree(mt, tree->parent, tree->name, tree->n, acc,
	    tree->frames, tree->nframes, err);
	if (rv == SM_ECORRUPT)
		sm_err_prefix(err, "block %s/%llu", tenant,
		    (unsigned long long)m->gen);
out:
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	sm_free(ids);
	sm_free(acc);
	sm_arena_destroy(scratch);
	if (te != NULL)
		ing_store_release(db->store, te);
	ing_store_release(db->store, ie);
	return (rv);
}

/* Selector from RPC matchers. */
static int
selector_from_pb(const Smolder__V1__Select *sel, struct sm_selector *out,
    struct sm_err *err)
{
	int rv;

	for (size_t i = 0; i < sel->n_picks; i++) {
		const Smolder__V1__Pick *pk = sel->picks[i];

		if (i > 0 && sel->picks[i - 1]->fp >= pk->fp)
			return (sm_err_set(err, SM_EINVAL, "picks not sorted "
			    "by fingerprint"));
		for (size_t k = 1; k < pk->n_t; k++) {
			if (pk->t[k - 1] >= pk->t[k])
				return (sm_err_set(err, SM_EINVAL, "pick %zu: "
				    "bucket times not sorted", i));
		}
	}
	sm_selector_init(out);
	for (size_t i = 0; i < sel->n_matchers; i++) {
		const Smolder__V1__Matcher *m = sel->matchers[i];

		if ((int)m->type < 0 ||
		    m->type > SMOLDER__V1__MATCH_TYPE__MATCH_NRE ||
		    m->name == NULL || m->value == NULL) {
			sm_selector_fini(out);
			return (sm_err_set(err, SM_EINVAL, "bad matcher %zu", i));
		}
		if ((rv = sm_selector_add(out, (enum sm_match_type)m->type,
		    m->name, m->value, err)) != 0) {
			sm_selector_fini(out);
			return (rv);
		}
	}
	return (0);
}

int
ing_db_merge(struct ing_db *db, const Smolder__V1__Select *sel,
    struct sm_arena *a, Smolder__V1__MergeResponse *out, struct sm_err *err)
{
	Smolder__V1__Select fsel;
	struct sm_selector ss;
	struct sources src;
	struct sm_mtree mt;
	int rv;

	smolder__v1__merge_response__init(out);
	sel = select_floor(db, sel, &fsel);
	if ((rv = selector_from_pb(sel, &ss, err)) != 0)
		return (rv);
	if (sm_mtree_init(&mt) != 0) {
		sm_selector_fini(&ss);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if ((rv = sources_get(db, sel->tenant, sel->start_ms, sel->end_ms, 0,
	    &src, err)) != 0)
		goto out;
	for (uint32_t i = 0; i < src.nheads && rv == 0; i++)
		rv = merge_head(src.heads[i], &ss, sel, &mt, a, err);
	for (uint32_t i = 0; i < src.nblocks && rv == 0; i++)
		rv = merge_block(db, sel->tenant, &src.blocks[i], &ss, sel, &mt,
		    a, err);
	sources_put(&src);
	if (rv != 0)
		goto out;
	/* The response outlives the merge tree: copy its names and the
	 * metadata entries (their strings are already in the arena). */
	if ((rv = sm_mtree_to_pb(&mt, a, out)) == 0) {
		for (size_t i = 0; i < out->tree->n_strings && rv == 0; i++) {
			const struct sm_str *x = &mt.names.strs[i];

			if ((out->tree->strings[i] = sm_arena_strndup(a, x->p,
			    x->len)) == NULL)
				rv = SM_ENOMEM;
		}
		for (size_t i = 0; i < out->n_meta && rv == 0; i++) {
			Smolder__V1__SeriesMeta *c = sm_arena_alloc(a,
			    sizeof(*c));

			if (c == NULL)
				rv = SM_ENOMEM;
			else {
				*c = *out->meta[i];
				out->meta[i] = c;
			}
		}
	}
	if (rv != 0)
		sm_err_set(err, rv, "out of memory");
out:
	sm_mtree_fini(&mt);
	sm_selector_fini(&ss);
	return (rv);
}

/* --- series (time series of totals) --------------------------------------- */

#define SERIES_MAX_STEPS 1000000
#define SERIES_MAX_GROUPS 10000
/*
 * Groups x steps: every group holds one double per step, so without this a
 * request with 750k steps grouped by a label with 170 values zeroed 1 GiB
 * (the request budget) before failing with "out of memory", for seconds
 * (fuzz_rpc: regressions/rpc/series-steps-x-groups).  10^7 points is 80
 * MB, e.g. 7 days at a 1-minute step for 990 groups.
 */
#define SERIES_MAX_POINTS 10000000

struct series_group {
	char **values;          /* one per group_by label ("" if absent) */
	double *points;         /* per step */
	uint32_t *profiles;     /* per step: uploads behind points[] */
	uint64_t h;             /* of values, for the group table */
};

/*
 * Groups are found through an open-addressing table on the hash of their
 * label values, so a request over many series and groups stays linear
 * (a scan of the groups per series was quadratic).
 */
struct series_acc {
	const Smolder__V1__SeriesRequest *req;
	struct sm_arena *a;
	int64_t first, step, nsteps;
	struct series_group *g;
	uint32_t ng, gcap;
	struct sm_oatab tab;    /* group index by sm_hash_u64(h) */
};

/* Hash of a group's label values (each with its length, so ("ab", "c")
 * and ("a", "bc") differ). */
static uint64_t
series_group_hash(const char *const *v, uint32_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;

	for (uint32_t j = 0; j < n; j++) {
		size_t len = strlen(v[j]);

		h = sm_hash_seed(v[j], len, h ^ len);
	}
	return (h);
}

/*
 * The group of series sr (found through a hash table of the groups' label
 * values, so a query is linear in the series it reads however many groups
 * there are), created on first use.  NULL with *rv set on a limit or
 * SM_ENOMEM.
 */
static struct series_group *
series_group_of(struct series_acc *x, const struct ing_series *sr, int *rv)
{
	uint32_t ngb = (uint32_t)x->req->n_group_by;
	const char *vals[64];
	const char **v = vals;
	struct series_group *gr = NULL;
	struct sm_oatab_it it;
	uint32_t k;
	uint64_t h;

	*rv = 0;
	if (ngb > SM_ARRAY_LEN(vals) &&
	    (v = sm_calloc(ngb, sizeof(*v))) == NULL) {
		*rv = SM_ENOMEM;
		return (NULL);
	}
	for (uint32_t j = 0; j < ngb; j++) {
		v[j] = sm_labels_get(sr->labels, sr->nlabels,
		    x->req->group_by[j]);
		if (v[j] == NULL)
			v[j] = "";
	}
	h = series_group_hash(v, ngb);
	/* Room first: the probe below then ends where the insert goes. */
	if ((*rv = sm_oatab_reserve(&x->tab, x->ng + 1)) != 0)
		goto out;
	for (sm_oatab_probe(&x->tab, sm_hash_u64(h), &it);
	    (k = sm_oatab_next(&x->tab, &it)) != SM_OATAB_NONE;) {
		struct series_group *o = &x->g[k];
		uint32_t j;

		if (o->h != h)
			continue;
		for (j = 0; j < ngb && strcmp(o->values[j], v[j]) == 0; j++)
			;
		if (j == ngb) {
			gr = o;
			goto out;
		}
	}
	if (x->ng == SERIES_MAX_GROUPS ||
	    (int64_t)(x->ng + 1) * x->nsteps > SERIES_MAX_POINTS) {
		*rv = SM_ELIMIT;
		goto out;
	}
	if (x->ng == x->gcap) {
		uint32_t ncap = x->gcap ? x->gcap * 2 : 8;
		struct series_group *ng = sm_arena_grow(x->a, x->g, x->ng, ncap,
		    sizeof(*ng));

		if (ng == NULL) {
			*rv = SM_ENOMEM;
			goto out;
		}
		x->g = ng;
		x->gcap = ncap;
	}
	gr = &x->g[x->ng];
	gr->h = h;
	gr->values = sm_arena_alloc(x->a, (size_t)SM_MAX(ngb, 1) *
	    sizeof(char *));
	gr->points = sm_arena_calloc(x->a, (size_t)x->nsteps, sizeof(double));
	gr->profiles = sm_arena_calloc(x->a, (size_t)x->nsteps,
	    sizeof(uint32_t));
	if (gr->values == NULL || gr->points == NULL || gr->profiles == NULL) {
		*rv = SM_ENOMEM;
		gr = NULL;
		goto out;
	}
	for (uint32_t j = 0; j < ngb; j++) {
		if ((gr->values[j] = sm_arena_strndup(x->a, v[j],
		    strlen(v[j]))) == NULL) {
			*rv = SM_ENOMEM;
			gr = NULL;
			goto out;
		}
	}
	*rv = sm_oatab_insert(&x->tab, &it, x->ng);   /* reserved: 0 */
	SM_ASSERT(*rv == 0);
	x->ng++;
out:
	if (v != vals)
		sm_free(v);
	return (gr);
}

/* Add the bucket totals of the selected series of set s. */
static int
series_set(void *arg, const struct ing_set *s, int64_t bucket_ms,
    const struct sm_selector *ss, const struct ing_yield *y,
    struct sm_err *err)
{
	struct series_acc *x = arg;
	const Smolder__V1__Select *sel = x->req->select;
	uint32_t *ids = NULL, n = 0;
	int rv;

	if ((rv = ing_set_select(s, ss, sel->start_ms, sel->end_ms, bucket_ms,
	    y, &ids, &n, err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		const struct ing_series *sr;
		const Smolder__V1__Pick *pk;
		struct series_group *gr;

		ing_yield(y);
		sr = s->series[ids[i]];
		if (!series_picked(sel, sr->fp, &pk))
			continue;
		if ((gr = series_group_of(x, sr, &rv)) == NULL)
			break;
		for (uint32_t k = ing_series_first_bucket(sr, bucket_ms,
		    sel->start_ms); k < sr->nb && ing_bucket_overlaps(&sr->b[k],
		    bucket_ms, sel->start_ms, sel->end_ms); k++) {
			int64_t slot;

			if (!pick_bucket(pk, sr->b[k].t))
				continue;
			slot = (sm_floor_to(sr->b[k].t, x->step) -
			    x->first) / x->step;
			slot = SM_MAX(slot, 0);
			slot = SM_MIN(slot, x->nsteps - 1);
			gr->points[slot] += (double)sr->b[k].total;
			gr->profiles[slot] += sr->b[k].profiles;
		}
	}
	sm_free(ids);
	return (rv);
}

static int
group_cmp(const void *a, const void *b, void *arg)
{
	const struct series_group *x = a, *y = b;
	uint32_t n = *(const uint32_t *)arg;

	for (uint32_t j = 0; j < n; j++) {
		int c = strcmp(x->values[j], y->values[j]);

		if (c != 0)
			return (c);
	}
	return (0);
}

int
ing_db_series(struct ing_db *db, const Smolder__V1__SeriesRequest *req,
    struct sm_arena *a, Smolder__V1__SeriesResponse *out, struct sm_err *err)
{
	const Smolder__V1__Select *sel = req->select;
	Smolder__V1__SeriesRequest freq;
	Smolder__V1__Select fsel;
	struct series_acc x;
	struct sm_selector ss;
	struct sources src;
	uint32_t ngb;
	int rv = 0;

	smolder__v1__series_response__init(out);
	if (sel == NULL || req->step_ms <= 0 || sel->end_ms <= sel->start_ms)
		return (sm_err_set(err, SM_EINVAL, "series: bad range or step"));
	/* The step arithmetic below is exact only inside the time window
	 * (attime.h); the querier checks it too, this guards the RPC. */
	if ((rv = sm_time_check_range(sel->start_ms, "series: start",
	    sel->end_ms, "end", err)) != 0)
		return (rv);
	if ((sel = select_floor(db, sel, &fsel)) != req->select) {
		if (sel->end_ms <= sel->start_ms)
			return (0);   /* all of it is past retention */
		freq = *req;
		freq.select = (Smolder__V1__Select *)sel;
		req = &freq;
	}
	memset(&x, 0, sizeof(x));
	x.req = req;
	x.a = a;
	x.step = req->step_ms;
	x.first = sm_floor_to(sel->start_ms, x.step);
	x.nsteps = (sel->end_ms - x.first + x.step - 1) / x.step;
	if (x.nsteps > SERIES_MAX_STEPS)
		return (sm_err_set(err, SM_EINVAL, "series: %lld steps exceed "
		    "the limit of %d", (long long)x.nsteps, SERIES_MAX_STEPS));
	ngb = (uint32_t)req->n_group_by;
	if ((rv = selector_from_pb(sel, &ss, err)) != 0)
		return (rv);
	if ((rv = sources_get(db, sel->tenant, sel->start_ms, sel->end_ms, 0,
	    &src, err)) != 0)
		goto out_sel;
	rv = sources_each_index(db, sel->tenant, &src, &ss, series_set, &x, err);
	sources_put(&src);
	if (rv != 0) {
		if (rv == SM_ELIMIT && x.ng == SERIES_MAX_GROUPS)
			sm_err_set(err, rv, "series: more than %d groups",
			    SERIES_MAX_GROUPS);
		else if (rv == SM_ELIMIT)
			sm_err_set(err, rv, "series: more than %d points "
			    "(%u groups of %lld steps); use a longer step or "
			    "fewer group-by labels", SERIES_MAX_POINTS,
			    x.ng + 1, (long long)x.nsteps);
		else if (rv == SM_ENOMEM)
			sm_err_set(err, rv, "out of memory");
		goto out_sel;
	}
	/* Groups in a stable order (by their label values), whatever the
	 * order the sources were read in. */
	if (x.ng > 1)
		qsort_r(x.g, x.ng, sizeof(*x.g), group_cmp, &ngb);
	out->n_series = x.ng;
	out->n_counts = x.ng;
	out->series = sm_arena_alloc(a, (size_t)SM_MAX(x.ng, 1) *
	    sizeof(*out->series));
	out->counts = sm_arena_alloc(a, (size_t)SM_MAX(x.ng, 1) *
	    sizeof(*out->counts));
	if (out->series == NULL || out->counts == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out_sel;
	}
	for (uint32_t gi = 0; gi < x.ng; gi++) {
		Types__V1__Series *se = sm_arena_alloc(a, sizeof(*se));
		Smolder__V1__SeriesCounts *sc = sm_arena_alloc(a, sizeof(*sc));
		size_t np = 0;

		if (se == NULL || sc == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out_sel;
		}
		types__v1__series__init(se);
		smolder__v1__series_counts__init(sc);
		/* A step with profiles is a point even if its values cancel
		 * out (signed samples): AVERAGE needs it. */
		for (int64_t i = 0; i < x.nsteps; i++)
			np += x.g[gi].points[i] != 0 || x.g[gi].profiles[i] != 0;
		se->n_labels = ngb;
		se->labels = sm_arena_alloc(a, (size_t)SM_MAX(ngb, 1) *
		    sizeof(*se->labels));
		se->n_points = np;
		se->points = sm_arena_alloc(a, SM_MAX(np, 1) *
		    sizeof(*se->points));
		sc->profiles = sm_arena_alloc(a, SM_MAX(np, 1) *
		    sizeof(*sc->profiles));
		if (se->labels == NULL || se->points == NULL ||
		    sc->profiles == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out_sel;
		}
		for (uint32_t j = 0; j < ngb; j++) {
			Types__V1__LabelPair *lp = sm_arena_alloc(a,
			    sizeof(*lp));

			if (lp == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "out of memory");
				goto out_sel;
			}
			types__v1__label_pair__init(lp);
			lp->name = req->group_by[j];
			lp->value = x.g[gi].values[j];
			se->labels[j] = lp;
		}
		np = 0;
		for (int64_t i = 0; i < x.nsteps; i++) {
			Types__V1__Point *pt;

			if (x.g[gi].points[i] == 0 && x.g[gi].profiles[i] == 0)
				continue;
			if ((pt = sm_arena_alloc(a, sizeof(*pt))) == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "out of memory");
				goto out_sel;
			}
			types__v1__point__init(pt);
			pt->timestamp = x.first + i * x.step;
			pt->value = x.g[gi].points[i];
			sc->profiles[np] = x.g[gi].profiles[i];
			se->points[np++] = pt;
		}
		sc->n_profiles = np;
		out->series[gi] = se;
		out->counts[gi] = sc;
	}
out_sel:
	sm_oatab_fini(&x.tab);
	sm_selector_fini(&ss);
	return (rv);
}

/* --- stats (replica de-duplication) ------------------------------------- */

struct stat_tc {
	int64_t t;
	uint32_t count;
};

struct stat_acc {
	uint64_t fp, profiles, digest;
	bool detail;
	struct stat_tc *b;          /* detail: buckets, unsorted */
	uint32_t n, cap;
};

struct stats_acc {
	const Smolder__V1__StatsRequest *req;
	struct sm_arena *a;
	struct stat_acc *v;
	uint32_t n, cap;
	struct sm_oatab tab;        /* index by sm_hash_u64(fp) */
};

#define STATS_MAX_SERIES 10000000u

/* Linear in the counts: a bucket split between sources sums the same. */
static inline uint64_t
bucket_mix(int64_t t)
{
	return (sm_hash_u64((uint64_t)t) | 1);
}

static bool
fp_in(const uint64_t *v, size_t n, uint64_t fp)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v[mid] < fp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo < n && v[lo] == fp);
}

static struct stat_acc *
stats_get(struct stats_acc *x, uint64_t fp)
{
	struct sm_oatab_it it;
	uint32_t k;

	if ((x->n + 1) * 2 > x->tab.nslots &&
	    (x->n >= STATS_MAX_SERIES ||
	    sm_oatab_reserve(&x->tab, x->n + 1) != 0))
		return (NULL);
	for (sm_oatab_probe(&x->tab, sm_hash_u64(fp), &it);
	    (k = sm_oatab_next(&x->tab, &it)) != SM_OATAB_NONE;) {
		if (x->v[k].fp == fp)
			return (&x->v[k]);
	}
	if (x->n == x->cap) {
		uint32_t ncap = x->cap ? x->cap * 2 : 64;
		struct stat_acc *nv = sm_reallocarray(x->v, ncap, sizeof(*nv));

		if (nv == NULL)
			return (NULL);
		x->v = nv;
		x->cap = ncap;
	}
	memset(&x->v[x->n], 0, sizeof(x->v[x->n]));
	x->v[x->n].fp = fp;
	x->v[x->n].detail = fp_in(x->req->detail, x->req->n_detail, fp);
	k = (uint32_t)sm_oatab_insert(&x->tab, &it, x->n);   /* reserved: 0 */
	SM_ASSERT(k == 0);
	x->n++;
	return (&x->v[x->n - 1]);
}

/* Count the in-range buckets of the selected series of set s. */
static int
stats_set(void *arg, const struct ing_set *s, int64_t bucket_ms,
    const struct sm_selector *ss, const struct ing_yield *y,
    struct sm_err *err)
{
	struct stats_acc *x = arg;
	const Smolder__V1__Select *sel = x->req->select;
	uint32_t *ids = NULL, n = 0;
	int rv;

	if ((rv = ing_set_select(s, ss, sel->start_ms, sel->end_ms, bucket_ms,
	    y, &ids, &n, err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		const struct ing_series *sr;
		const Smolder__V1__Pick *pk;
		struct stat_acc *st;

		ing_yield(y);
		sr = s->series[ids[i]];
		/* Picks restrict the series here; bucket lists are ignored
		 * (stats are what the querier picks buckets from). */
		if (!series_picked(sel, sr->fp, &pk))
			continue;
		if ((st = stats_get(x, sr->fp)) == NULL) {
			rv = SM_ENOMEM;
			break;
		}
		for (uint32_t k = ing_series_first_bucket(sr, bucket_ms,
		    sel->start_ms); k < sr->nb && ing_bucket_overlaps(&sr->b[k],
		    bucket_ms, sel->start_ms, sel->end_ms); k++) {
			const struct ing_bucket *b = &sr->b[k];

			st->profiles += b->profiles;
			st->digest += (uint64_t)b->profiles * bucket_mix(b->t);
			if (!st->detail)
				continue;
			if (st->n == st->cap) {
				uint32_t ncap = st->cap ? st->cap * 2 : 64;
				struct stat_tc *nb = sm_arena_grow(x->a, st->b,
				    st->n, ncap, sizeof(*nb));

				if (nb == NULL) {
					rv = SM_ENOMEM;
					break;
				}
				st->b = nb;
				st->cap = ncap;
			}
			st->b[st->n++] = (struct stat_tc){ b->t, b->profiles };
		}
	}
	sm_free(ids);
	return (rv);
}

static int
stat_cmp(const void *a, const void *b)
{
	const struct stat_acc *x = a, *y = b;

	return (x->fp < y->fp ? -1 : x->fp > y->fp);
}

static int
tc_cmp(const void *a, const void *b)
{
	const struct stat_tc *x = a, *y = b;

	return (x->t < y->t ? -1 : x->t > y->t);
}

/* A detail's buckets sorted by time, equal times (split buckets) summed,
 * as the response's arrays.  0 or SM_ENOMEM. */
static int
detail_output(struct stat_acc *st, struct sm_arena *a,
    Smolder__V1__SeriesStat *out)
{
	uint32_t k = 0;

	if (st->n > 1)
		qsort(st->b, st->n, sizeof(*st->b), tc_cmp);
	out->t = sm_arena_alloc(a, (size_t)SM_MAX(st->n, 1) * sizeof(int64_t));
	out->count = sm_arena_alloc(a, (size_t)SM_MAX(st->n, 1) *
	    sizeof(uint32_t));
	if (out->t == NULL || out->count == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < st->n; i++) {
		if (k > 0 && out->t[k - 1] == st->b[i].t) {
			out->count[k - 1] += st->b[i].count;
			continue;
		}
		out->t[k] = st->b[i].t;
		out->count[k++] = st->b[i].count;
	}
	out->n_t = out->n_count = k;
	return (0);
}

int
ing_db_series_stats(struct ing_db *db, const Smolder__V1__StatsRequest *req,
    struct sm_arena *a, Smolder__V1__StatsResponse *out, struct sm_err *err)
{
	const Smolder__V1__Select *sel = req->select;
	Smolder__V1__StatsRequest freq;
	Smolder__V1__Select fsel;
	struct stats_acc x;
	struct sm_selector ss;
	struct sources src;
	int rv = 0;

	smolder__v1__stats_response__init(out);
	if (sel == NULL || sel->end_ms <= sel->start_ms)
		return (sm_err_set(err, SM_EINVAL, "stats: bad range"));
	if ((sel = select_floor(db, sel, &fsel)) != req->select) {
		if (sel->end_ms <= sel->start_ms)
			return (0);   /* all of it is past retention */
		freq = *req;
		freq.select = (Smolder__V1__Select *)sel;
		req = &freq;
	}
	for (size_t i = 1; i < req->n_detail; i++) {
		if (req->detail[i - 1] >= req->detail[i])
			return (sm_err_set(err, SM_EINVAL, "stats: detail not "
			    "sorted"));
	}
	memset(&x, 0, sizeof(x));
	x.req = req;
	x.a = a;
	if ((rv = selector_from_pb(sel, &ss, err)) != 0)
		return (rv);
	if ((rv = sources_get(db, sel->tenant, sel->start_ms, sel->end_ms, 0,
	    &src, err)) != 0)
		goto out;
	rv = sources_each_index(db, sel->tenant, &src, &ss, stats_set, &x, err);
	sources_put(&src);
	if (rv != 0) {
		if (rv == SM_ENOMEM)
			sm_err_set(err, rv, "out of memory");
		goto out;
	}
	if (x.n > 1)
		qsort(x.v, x.n, sizeof(*x.v), stat_cmp);
	out->n_series = x.n;
	out->series = sm_arena_alloc(a, (size_t)SM_MAX(x.n, 1) *
	    sizeof(*out->series));
	if (out->series == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < x.n; i++) {
		Smolder__V1__SeriesStat *st = sm_arena_alloc(a, sizeof(*st));

		if (st == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		smolder__v1__series_stat__init(st);
		st->fp = x.v[i].fp;
		st->profiles = x.v[i].profiles;
		st->digest = x.v[i].digest;
		if (x.v[i].detail && detail_output(&x.v[i], a, st) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		out->series[i] = st;
	}
out:
	sm_free(x.v);
	sm_oatab_fini(&x.tab);
	sm_selector_fini(&ss);
	return (rv);
}

/* --- labels --------------------------------------------------------------- */

/*
 * Distinct strings (names or values) or distinct restricted label sets,
 * collected across sources.  Strings are interned in `names`; label sets
 * are kept as arrays of interned ids keyed by their fingerprint.
 */
struct labels_acc {
	const Smolder__V1__LabelsRequest *req;
	struct sm_strtab names;          /* collected strings */
	struct lset {
		uint64_t fp;
		uint32_t *ids;               /* 2 * n interned ids */
		uint32_t n;
		uint32_t meta[3];            /* spy, units, aggregation ids */
		uint32_t rate;
	} *sets;
	uint32_t nsets, sets_cap;
	struct sm_oatab tab;             /* set index by sm_hash_u64(fp) */
};

/* The index of label set (fp, ids, n), or SM_OATAB_NONE with `it` where
 * it would go.  A hash table, so SERIES_LABELS is linear in the series it
 * reads (a scan of every set collected so far made 40k series take 48 s). */
static uint32_t
lset_find(const struct labels_acc *x, uint64_t fp, const uint32_t *ids,
    uint32_t n, struct sm_oatab_it *it)
{
	uint32_t k;

	for (sm_oatab_probe(&x->tab, sm_hash_u64(fp), it);
	    (k = sm_oatab_next(&x->tab, it)) != SM_OATAB_NONE;) {
		const struct lset *o = &x->sets[k];

		if (o->fp == fp && o->n == n &&
		    memcmp(o->ids, ids, (size_t)n * 8) == 0)
			return (k);
	}
	return (SM_OATAB_NONE);
}

static bool
label_wanted(const Smolder__V1__LabelsRequest *req, const char *name)
{
	if (req->n_label_names == 0)
		return (true);
	for (size_t i = 0; i < req->n_label_names; i++) {
		if (strcmp(req->label_names[i], name) == 0)
			return (true);
	}
	return (false);
}

static int
labels_series(struct labels_acc *x, const struct ing_set *s,
    const struct ing_series *sr)
{
	const Smolder__V1__LabelsRequest *req = x->req;
	struct sm_oatab_it it;
	struct lset ls;
	uint32_t k = 0, tmp[2 * 64];
	int rv;

	switch (req->kind) {
	case SMOLDER__V1__LABELS_KIND__LABEL_NAMES:
		for (uint32_t i = 0; i < sr->nlabels; i++) {
			if ((rv = sm_strtab_intern(&x->names,
			    sr->labels[i].name, strlen(sr->labels[i].name),
			    &k)) != 0)
				return (rv);
		}
		return (0);
	case SMOLDER__V1__LABELS_KIND__LABEL_VALUES: {
		const char *v = sm_labels_get(sr->labels, sr->nlabels,
		    req->name != NULL ? req->name : "");

		if (v == NULL)
			return (0);
		return (sm_strtab_intern(&x->names, v, strlen(v), &k));
	}
	default:
		break;
	}
	/* A restricted label set. */
	memset(&ls, 0, sizeof(ls));
	for (uint32_t i = 0; i < sr->nlabels && ls.n < 64; i++) {
		if (!label_wanted(req, sr->labels[i].name))
			continue;
		if ((rv = sm_strtab_intern(&x->names, sr->labels[i].name,
		    strlen(sr->labels[i].name), &tmp[2 * ls.n])) != 0 ||
		    (rv = sm_strtab_intern(&x->names, sr->labels[i].value,
		    strlen(sr->labels[i].value), &tmp[2 * ls.n + 1])) != 0)
			return (rv);
		ls.n++;
	}
	ls.fp = sm_hash(tmp, (size_t)ls.n * 2 * sizeof(uint32_t));
	/* Room first: the probe below then ends where the insert goes. */
	if ((rv = sm_oatab_reserve(&x->tab, x->nsets + 1)) != 0)
		return (rv);
	if (lset_find(x, ls.fp, tmp, ls.n, &it) != SM_OATAB_NONE)
		return (0);
	{
		const char *m[3] = { ing_set_str(s, sr->meta.spy),
			ing_set_str(s, sr->meta.units),
			ing_set_str(s, sr->meta.aggregation) };

		for (int j = 0; j < 3; j++) {
			if ((rv = sm_strtab_intern(&x->names, m[j],
			    strlen(m[j]), &ls.meta[j])) != 0)
				return (rv);
		}
	}
	ls.rate = sr->meta.sample_rate;
	if (SM_GROW(x->sets, x->sets_cap, x->nsets + 1, 16) != 0)
		return (SM_ENOMEM);
	if ((ls.ids = sm_malloc((size_t)SM_MAX(ls.n, 1) * 8)) == NULL)
		return (SM_ENOMEM);
	memcpy(ls.ids, tmp, (size_t)ls.n * 8);
	rv = sm_oatab_insert(&x->tab, &it, x->nsets);   /* reserved: 0 */
	SM_ASSERT(rv == 0);
	x->sets[x->nsets++] = ls;
	return (0);
}

static int
labels_set(void *arg, const struct ing_set *s, int64_t bucket_ms,
    const struct sm_selector *ss, const struct ing_yield *y,
    struct sm_err *err)
{
	struct labels_acc *x = arg;
	const Smolder__V1__Select *sel = x->req->select;
	int64_t start = x->req->all_time ? 1 : sel->start_ms;
	int64_t end = x->req->all_time ? 0 : sel->end_ms;
	uint32_t *ids = NULL, n = 0;
	int rv;

	if ((rv = ing_set_select(s, ss, start, end, bucket_ms, y, &ids, &n,
	    err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		ing_yield(y);
		rv = labels_series(x, s, s->series[ids[i]]);
	}
	sm_free(ids);
	return (rv);
}

static int
str_cmp(const void *a, const void *b)
{
	return (strcmp(*(char *const *)a, *(char *const *)b));
}

static int
lset_cmp(const void *a, const void *b, void *arg)
{
	const struct lset *x = a, *y = b;
	const struct sm_strtab *t = arg;

	for (uint32_t i = 0; i < 2 * x->n && i < 2 * y->n; i++) {
		int c = strcmp(sm_strtab_str(t, x->ids[i], NULL),
		    sm_strtab_str(t, y->ids[i], NULL));

		if (c != 0)
			return (c);
	}
	return (x->n < y->n ? -1 : x->n > y->n);
}

static int
labels_output(struct labels_acc *x, struct sm_arena *a,
    Smolder__V1__LabelsResponse *out)
{
	const struct sm_strtab *t = &x->names;

	if (x->req->kind != SMOLDER__V1__LABELS_KIND__SERIES_LABELS) {
		/* Every interned string but "" (id 0) is an answer. */
		uint32_t n = t->n > 0 ? t->n - 1 : 0;

		out->names = sm_arena_alloc(a, (size_t)SM_MAX(n, 1) *
		    sizeof(char *));
		if (out->names == NULL)
			return (SM_ENOMEM);
		for (uint32_t i = 0; i < n; i++) {
			if ((out->names[i] = sm_arena_strndup(a,
			    t->strs[i + 1].p, t->strs[i + 1].len)) == NULL)
				return (SM_ENOMEM);
		}
		/* An empty value is a real answer for LABEL_VALUES only if
		 * some series carries it, which labels cannot: drop it. */
		if (n > 0)
			qsort(out->names, n, sizeof(char *), str_cmp);
		out->n_names = n;
		return (0);
	}
	if (x->nsets > 0)
		qsort_r(x->sets, x->nsets, sizeof(*x->sets), lset_cmp,
		    (void *)&x->names);
	out->series = sm_arena_alloc(a, (size_t)SM_MAX(x->nsets, 1) *
	    sizeof(*out->series));
	out->meta = sm_arena_alloc(a, (size_t)SM_MAX(x->nsets, 1) *
	    sizeof(*out->meta));
	if (out->series == NULL || out->meta == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < x->nsets; i++) {
		const struct lset *ls = &x->sets[i];
		Types__V1__Labels *l = sm_arena_alloc(a, sizeof(*l));
		Smolder__V1__SeriesMeta *m = sm_arena_alloc(a, sizeof(*m));

		if (l == NULL || m == NULL)
			return (SM_ENOMEM);
		types__v1__labels__init(l);
		smolder__v1__series_meta__init(m);
		l->n_labels = ls->n;
		l->labels = sm_arena_alloc(a, (size_t)SM_MAX(ls->n, 1) *
		    sizeof(*l->labels));
		if (l->labels == NULL)
			return (SM_ENOMEM);
		for (uint32_t j = 0; j < ls->n; j++) {
			Types__V1__LabelPair *lp = sm_arena_alloc(a,
			    sizeof(*lp));
			uint32_t nl, vl;
			const char *nm = sm_strtab_str(t, ls->ids[2 * j], &nl);
			const char *vv = sm_strtab_str(t, ls->ids[2 * j + 1],
			    &vl);

			if (lp == NULL)
				return (SM_ENOMEM);
			types__v1__label_pair__init(lp);
			lp->name = sm_arena_strndup(a, nm, nl);
			lp->value = sm_arena_strndup(a, vv, vl);
			if (lp->name == NULL || lp->value == NULL)
				return (SM_ENOMEM);
			l->labels[j] = lp;
		}
		m->spy_name = sm_arena_strndup(a, sm_strtab_str(t,
		    ls->meta[0], NULL), strlen(sm_strtab_str(t, ls->meta[0],
		    NULL)));
		m->units = sm_arena_strndup(a, sm_strtab_str(t, ls->meta[1],
		    NULL), strlen(sm_strtab_str(t, ls->meta[1], NULL)));
		m->aggregation = sm_arena_strndup(a, sm_strtab_str(t,
		    ls->meta[2], NULL), strlen(sm_strtab_str(t, ls->meta[2],
		    NULL)));
		m->sample_rate = ls->rate;
		if (m->spy_name == NULL || m->units == NULL ||
		    m->aggregation == NULL)
			return (SM_ENOMEM);
		out->series[i] = l;
		out->meta[i] = m;
	}
	out->n_series = out->n_meta = x->nsets;
	return (0);
}

int
ing_db_labels(struct ing_db *db, const Smolder__V1__LabelsRequest *req,
    struct sm_arena *a, Smolder__V1__LabelsResponse *out, struct sm_err *err)
{
	const Smolder__V1__Select *sel = req->select;
	Smolder__V1__LabelsRequest freq;
	Smolder__V1__Select fsel;
	struct labels_acc x;
	struct sm_selector ss;
	struct sources src;
	int rv;

	smolder__v1__labels_response__init(out);
	if (sel == NULL)
		return (sm_err_set(err, SM_EINVAL, "labels: no select"));
	if (!req->all_time &&
	    (sel = select_floor(db, sel, &fsel)) != req->select) {
		freq = *req;
		freq.select = (Smolder__V1__Select *)sel;
		req = &freq;
	}
	memset(&x, 0, sizeof(x));
	x.req = req;
	if (sm_strtab_init(&x.names) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = selector_from_pb(sel, &ss, err)) != 0)
		goto out_names;
	if ((rv = sources_get(db, sel->tenant, sel->start_ms, sel->end_ms,
	    req->all_time, &src, err)) != 0)
		goto out_sel;
	rv = sources_each_index(db, sel->tenant, &src, &ss, labels_set, &x, err);
	sources_put(&src);
	if (rv == 0)
		rv = labels_output(&x, a, out);
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
out_sel:
	sm_selector_fini(&ss);
out_names:
	for (uint32_t i = 0; i < x.nsets; i++)
		sm_free(x.sets[i].ids);
	sm_free(x.sets);
	sm_oatab_fini(&x.tab);
	sm_strtab_fini(&x.names);
	return (rv);
}

void
ing_db_stats(struct ing_db *db, struct ing_db_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_rwlock_rdlock(&db->lock);
	st->tenants = db->n;
	for (uint32_t i = 0; i < db->n; i++) {
		struct ing_tenant *t = db->t[i];

		pthread_mutex_lock(&t->mu);
		st->series += t->head->set.nseries;
		st->head_bytes += ing_head_bytes(t->head);
		st->cutting += t->ncutting;
		st->blocks += t->nblocks;
		for (uint32_t b = 0; b < t->nblocks; b++)
			st->block_bytes += t->blocks[b].bytes;
		pthread_mutex_unlock(&t->mu);
	}
	pthread_rwlock_unlock(&db->lock);
}

/* --- analyze (querier AnalyzeQuery, GetProfileStats) ---------------------- */

/*
 * Per-source index statistics of a selection: every head and block is
 * read through its index only (bucket summaries: profiles and pair
 * counts), never its data.  Series are accumulated per kind of source
 * (heads, blocks) by fingerprint; a series split over several heads or
 * blocks is summed.
 */
struct an_ser {
	uint64_t fp, profiles, samples;
};

struct an_acc {
	struct an_ser *v;
	uint32_t n, cap;
};

static int
an_add(struct an_acc *x, uint64_t fp, uint64_t profiles, uint64_t samples)
{
	if (SM_GROW(x->v, x->cap, x->n + 1, 64) != 0)
		return (SM_ENOMEM);
	x->v[x->n++] = (struct an_ser){ fp, profiles, samples };
	return (0);
}

static int
an_cmp(const void *a, const void *b)
{
	const struct an_ser *x = a, *y = b;

	return (x->fp < y->fp ? -1 : x->fp > y->fp);
}

/* Sorted by fp, equal fps summed, as response entries in `a`. */
static int
an_output(struct an_acc *x, struct sm_arena *a,
    Smolder__V1__AnalyzeSeries ***out, size_t *nout)
{
	uint32_t k = 0;

	if (x->n > 1)
		qsort(x->v, x->n, sizeof(*x->v), an_cmp);
	for (uint32_t i = 0; i < x->n; i++) {
		if (k > 0 && x->v[k - 1].fp == x->v[i].fp) {
			x->v[k - 1].profiles += x->v[i].profiles;
			x->v[k - 1].samples += x->v[i].samples;
		} else {
			x->v[k++] = x->v[i];
		}
	}
	if ((*out = sm_arena_alloc(a, (size_t)SM_MAX(k, 1) *
	    sizeof(**out))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < k; i++) {
		Smolder__V1__AnalyzeSeries *s = sm_arena_alloc(a, sizeof(*s));

		if (s == NULL)
			return (SM_ENOMEM);
		smolder__v1__analyze_series__init(s);
		s->fp = x->v[i].fp;
		s->profiles = x->v[i].profiles;
		s->samples = x->v[i].samples;
		(*out)[i] = s;
	}
	*nout = k;
	return (0);
}

/*
 * The selected series of one set into `acc`; *matched tells whether any
 * was; *pair_bytes (may be NULL) gets the pair memory of their buckets in
 * range; out->min_t / max_t are widened.
 */
static int
an_set(const struct ing_set *s, int64_t bucket_ms, const struct ing_yield *y,
    const struct sm_selector *ss, int64_t start, int64_t end,
    struct an_acc *acc, bool *matched, uint64_t *pair_bytes,
    Smolder__V1__AnalyzeResponse *out, struct sm_err *err)
{
	uint32_t *ids = NULL, n = 0;
	int rv;

	*matched = false;
	if ((rv = ing_set_select(s, ss, start, end, bucket_ms, y, &ids, &n,
	    err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		const struct ing_series *sr;
		uint64_t profiles = 0, samples = 0;

		ing_yield(y);
		sr = s->series[ids[i]];
		for (uint32_t k = ing_series_first_bucket(sr, bucket_ms, start);
		    k < sr->nb && ing_bucket_overlaps(&sr->b[k], bucket_ms,
		    start, end); k++) {
			const struct ing_bucket *b = &sr->b[k];

			profiles += b->profiles;
			samples += b->n;
			if (pair_bytes != NULL)
				*pair_bytes += ing_bucket_pair_bytes(b);
			if (!out->any || b->t < out->min_t)
				out->min_t = b->t;
			if (!out->any || b->t > out->max_t)
				out->max_t = b->t;
			out->any = true;
		}
		if (profiles == 0)
			continue;
		*matched = true;
		rv = an_add(acc, sr->fp, profiles, samples);
	}
	sm_free(ids);
	return (rv);
}

int
ing_db_analyze(struct ing_db *db, const Smolder__V1__AnalyzeRequest *req,
    struct sm_arena *a, Smolder__V1__AnalyzeResponse *out, struct sm_err *err)
{
	const Smolder__V1__Select *sel = req->select;
	Smolder__V1__Select fsel;
	struct an_acc heads = { 0 }, blocks = { 0 };
	struct sm_selector ss;
	struct sources src;
	int64_t start, end;
	bool matched;
	int rv;

	smolder__v1__analyze_response__init(out);
	out->bucket_ms = db->cfg.bucket_ms;
	if (sel == NULL)
		return (sm_err_set(err, SM_EINVAL, "analyze: no select"));
	if (!req->all_time && sel->end_ms <= sel->start_ms)
		return (sm_err_set(err, SM_EINVAL, "analyze: bad range"));
	if (req->all_time) {
		/* Everything above the retention floor (halved bounds keep
		 * bucket arithmetic from overflowing). */
		start = SM_MAX(atomic_load(&db->floor_ms), INT64_MIN / 2);
		end = INT64_MAX / 2;
	} else {
		sel = select_floor(db, sel, &fsel);
		start = sel->start_ms;
		end = sel->end_ms;
		if (end <= start)
			return (0);   /* all of it is past retention */
	}
	if ((rv = selector_from_pb(sel, &ss, err)) != 0)
		return (rv);
	if ((rv = sources_get(db, sel->tenant, start, end, req->all_time, &src,
	    err)) != 0)
		goto out_sel;
	for (uint32_t i = 0; i < src.nheads && rv == 0; i++) {
		struct ing_head *h = src.heads[i];

		pthread_rwlock_rdlock(&h->lock);
		struct ing_yield y = ing_head_yield(h);

		rv = an_set(&h->set, h->bucket_ms, &y, &ss, start, end, &heads,
		    &matched, &out->head_bytes, out, err);
		pthread_rwlock_unlock(&h->lock);
		if (rv == 0 && matched)
			out->heads++;
	}
	for (uint32_t i = 0; i < src.nblocks && rv == 0; i++) {
		const struct ing_block_meta *m = &src.blocks[i];
		const struct ing_set *idx;
		struct ing_cache_ent *ie;

		if ((rv = block_usable(sel->tenant, m, err)) != 0 ||
		    (rv = ing_store_block_index(db->store, sel->tenant, m,
		    &idx, &ie, err)) != 0)
			break;
		rv = an_set(idx, m->bucket_ms, NULL, &ss, start, end, &blocks,
		    &matched, NULL, out, err);
		ing_store_release(db->store, ie);
		if (rv == 0 && matched) {
			out->blocks++;
			out->block_bytes += m->bytes;
		}
	}
	sources_put(&src);
	if (rv == 0 && ((rv = an_output(&heads, a, &out->head_series,
	    &out->n_head_series)) != 0 || (rv = an_output(&blocks, a,
	    &out->block_series, &out->n_block_series)) != 0))
		rv = SM_ENOMEM;
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
out_sel:
	sm_selector_fini(&ss);
	sm_free(heads.v);
	sm_free(blocks.v);
	return (rv);
}

/* --- span merge (spans.h) ------------------------------------------------- */

/* The selected series of one source, sorted by fp, with their picks. */
struct span_sel {
	uint64_t *fp;
	const Smolder__V1__Pick **pk;
	uint32_t n;
	int64_t start, end, bucket_ms;
};

static int
span_fp_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y ? -1 : x > y);
}

/* Build x from the series ids of set s (ing_set_select's answer). */
static int
span_sel_build(struct span_sel *x, const struct ing_set *s,
    const uint32_t *ids, uint32_t n, const Smolder__V1__Select *sel)
{
	x->fp = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*x->fp));
	x->pk = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*x->pk));
	x->n = 0;
	if (x->fp == NULL || x->pk == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < n; i++) {
		const Smolder__V1__Pick *pk;

		if (series_picked(sel, s->series[ids[i]]->fp, &pk))
			x->fp[x->n++] = s->series[ids[i]]->fp;
	}
	qsort(x->fp, x->n, sizeof(*x->fp), span_fp_cmp);
	for (uint32_t i = 0; i < x->n; i++) {
		const Smolder__V1__Pick *pk;

		series_picked(sel, x->fp[i], &pk);
		x->pk[i] = pk;
	}
	return (0);
}

static void
span_sel_fini(struct span_sel *x)
{
	sm_free(x->fp);
	sm_free(x->pk);
}

static bool
span_want(void *arg, uint64_t fp, int64_t t)
{
	const struct span_sel *x = arg;
	uint32_t lo = 0, hi = x->n;

	if (!(t < x->end && t + x->bucket_ms > x->start))
		return (false);
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (x->fp[mid] < fp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo < x->n && x->fp[lo] == fp && pick_bucket(x->pk[lo], t));
}

static int
span_merge_head(struct ing_head *h, const struct sm_selector *ss,
    const Smolder__V1__SpanMergeRequest *req, const Smolder__V1__Select *sel,
    struct sm_mtree *mt, struct sm_err *err)
{
	struct span_sel x = { 0 };
	uint32_t *ids = NULL, n = 0;
	int64_t *acc = NULL;
	int rv;

	pthread_rwlock_rdlock(&h->lock);
	if (h->spans.n == 0) {
		rv = 0;
		goto out;
	}
	if ((rv = ing_set_select(&h->set, ss, sel->start_ms, sel->end_ms,
	    h->bucket_ms, NULL, &ids, &n, err)) != 0 || n == 0)
		goto out;
	x.start = sel->start_ms;
	x.end = sel->end_ms;
	x.bucket_ms = h->bucket_ms;
	if ((rv = span_sel_build(&x, &h->set, ids, n, sel)) != 0 ||
	    (acc = sm_calloc(h->tree.n, sizeof(*acc))) == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	mt->profiles += ing_spans_sum(h->spans.v, h->spans.n, false,
	    req->span_ids, req->n_span_ids, span_want, &x, acc);
	rv = sm_mtree_add_tree(mt, h->tree.parent, h->tree.name, h->tree.n,
	    acc, h->frames.strs, h->frames.n, err);
out:
	pthread_rwlock_unlock(&h->lock);
	span_sel_fini(&x);
	sm_free(ids);
	sm_free(acc);
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	return (rv);
}

static int
span_merge_block(struct ing_db *db, const char *tenant,
    const struct ing_block_meta *m, const struct sm_selector *ss,
    const Smolder__V1__SpanMergeRequest *req, const Smolder__V1__Select *sel,
    struct sm_mtree *mt, struct sm_err *err)
{
	const struct ing_set *idx;
	const struct ing_block_tree *tree = NULL;
	struct ing_cache_ent *ie = NULL, *te = NULL;
	struct ing_span_rec *sp = NULL;
	struct span_sel x = { 0 };
	uint32_t *ids = NULL, n = 0, nsp = 0;
	int64_t *acc = NULL;
	int rv;

	if (m->nspans == 0)
		return (0);
	if ((rv = block_usable(tenant, m, err)) != 0 ||
	    (rv = ing_store_block_index(db->store, tenant, m, &idx, &ie,
	    err)) != 0)
		return (rv);
	if ((rv = ing_set_select(idx, ss, sel->start_ms, sel->end_ms,
	    m->bucket_ms, NULL, &ids, &n, err)) != 0 || n == 0)
		goto out;
	x.start = sel->start_ms;
	x.end = sel->end_ms;
	x.bucket_ms = m->bucket_ms;
	if ((rv = span_sel_build(&x, idx, ids, n, sel)) != 0)
		goto out;
	if (x.n == 0)
		goto out;
	if ((rv = ing_store_block_spans(db->store, tenant, m, &sp, &nsp,
	    err)) != 0 ||
	    (rv = ing_store_block_tree(db->store, tenant, m, &tree, &te,
	    err)) != 0)
		goto out;
	if ((acc = sm_calloc(tree->n, sizeof(*acc))) == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	mt->profiles += ing_spans_sum(sp, nsp, true, req->span_ids,
	    req->n_span_ids, span_want, &x, acc);
	rv = sm_mtree_add_tree(mt, tree->parent, tree->name, tree->n, acc,
	    tree->frames, tree->nframes, err);
	if (rv == SM_ECORRUPT)
		sm_err_prefix(err, "block %s/%llu", tenant,
		    (unsigned long long)m->gen);
out:
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	span_sel_fini(&x);
	sm_free(ids);
	sm_free(acc);
	sm_free(sp);
	if (te != NULL)
		ing_store_release(db->store, te);
	ing_store_release(db->store, ie);
	return (rv);
}

int
ing_db_span_merge(struct ing_db *db, const Smolder__V1__SpanMergeRequest *req,
    struct sm_arena *a, Smolder__V1__MergeResponse *out, struct sm_err *err)
{
	const Smolder__V1__Select *sel;
	Smolder__V1__Select fsel;
	struct sm_selector ss;
	struct sources src;
	struct sm_mtree mt;
	int rv;

	smolder__v1__merge_response__init(out);
	if (req == NULL || req->select == NULL)
		return (sm_err_set(err, SM_EMALFORMED, "span merge: no select"));
	for (size_t i = 1; i < req->n_span_ids; i++) {
		if (req->span_ids[i - 1] >= req->span_ids[i])
			return (sm_err_set(err, SM_EMALFORMED, "span merge: "
			    "span ids not sorted and unique"));
	}
	sel = select_floor(db, req->select, &fsel);
	if ((rv = selector_from_pb(sel, &ss, err)) != 0)
		return (rv);
	if (sm_mtree_init(&mt) != 0) {
		sm_selector_fini(&ss);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if (req->n_span_ids == 0 || (rv = sources_get(db, sel->tenant,
	    sel->start_ms, sel->end_ms, 0, &src, err)) != 0)
		goto done;
	for (uint32_t i = 0; i < src.nheads && rv == 0; i++)
		rv = span_merge_head(src.heads[i], &ss, req, sel, &mt, err);
	for (uint32_t i = 0; i < src.nblocks && rv == 0; i++)
		rv = span_merge_block(db, sel->tenant, &src.blocks[i], &ss, req,
		    sel, &mt, err);
	sources_put(&src);
done:
	if (rv == 0 && (rv = sm_mtree_to_pb(&mt, a, out)) == 0) {
		for (size_t i = 0; i < out->tree->n_strings && rv == 0; i++) {
			const struct sm_str *s = &mt.names.strs[i];

			if ((out->tree->strings[i] = sm_arena_strndup(a, s->p,
			    s->len)) == NULL)
				rv = SM_ENOMEM;
		}
		out->n_meta = 0;
		if (rv != 0)
			sm_err_set(err, rv, "out of memory");
	}
	sm_mtree_fini(&mt);
	sm_selector_fini(&ss);
	return (rv);
}

/* --- individual profiles (profiles.h) ------------------------------------ */

#define PROFILES_MAX_DEFAULT 1000000u

struct prof_out {
	struct ing_prof_rec r;
	int64_t bt;                    /* bucket start */
};

static int
prof_out_cmp(const void *a, const void *b)
{
	return (ing_prof_cmp(&((const struct prof_out *)a)->r,
	    &((const struct prof_out *)b)->r));
}

struct prof_acc {
	const Smolder__V1__ProfilesRequest *req;
	const Smolder__V1__Select *sel;
	struct sm_arena *a;
	uint32_t max;
	struct prof_out *v;
	uint32_t n, cap;
	Smolder__V1__SeriesGroup **g;
	uint32_t ng, gcap;
	uint64_t *fp;                  /* scratch: this source's series */
};

static int
prof_push(struct prof_acc *x, const struct ing_prof_rec *r, int64_t bucket_ms,
    struct sm_err *err)
{
	if (x->n >= x->max)
		return (sm_err_set(err, SM_ELIMIT, "the query selects more "
		    "than %u individual profiles; narrow the range or the "
		    "selector", x->max));
	if (SM_GROW(x->v, x->cap, x->n + 1, 256) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	x->v[x->n].r = *r;
	x->v[x->n++].bt = sm_floor_to(r->t, bucket_ms);
	return (0);
}

/* The group_by labels of series sr, copied into the arena. */
static int
prof_group(struct prof_acc *x, const struct ing_series *sr, struct sm_err *err)
{
	Smolder__V1__SeriesGroup *g;

	if (SM_GROW(x->g, x->gcap, x->ng + 1, 64) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((g = sm_arena_alloc(x->a, sizeof(*g))) == NULL ||
	    (g->labels = NULL, smolder__v1__series_group__init(g),
	    (g->labels = sm_arena_alloc(x->a, (x->req->n_group_by + 1) *
	    sizeof(*g->labels))) == NULL))
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	g->fp = sr->fp;
	for (size_t k = 0; k < x->req->n_group_by; k++) {
		for (uint32_t i = 0; i < sr->nlabels; i++) {
			Types__V1__LabelPair *lp;

			if (strcmp(sr->labels[i].name, x->req->group_by[k]) != 0)
				continue;
			if ((lp = sm_arena_alloc(x->a, sizeof(*lp))) == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			types__v1__label_pair__init(lp);
			lp->name = sm_arena_strndup(x->a, sr->labels[i].name,
			    strlen(sr->labels[i].name));
			lp->value = sm_arena_strndup(x->a, sr->labels[i].value,
			    strlen(sr->labels[i].value));
			if (lp->name == NULL || lp->value == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			g->labels[g->n_labels++] = lp;
			break;
		}
	}
	x->g[x->ng++] = g;
	return (0);
}

static bool
fp_sorted_has(const uint64_t *v, uint32_t n, uint64_t fp)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (v[mid] < fp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo < n && v[lo] == fp);
}

/* Add the records of one source (its set s and records v). */
static int
prof_source(struct prof_acc *x, const struct ing_set *s, int64_t bucket_ms,
    const struct sm_selector *ss, const struct ing_prof_rec *v, uint32_t nv,
    struct sm_err *err)
{
	const Smolder__V1__Select *sel = x->sel;
	uint32_t *ids = NULL, n = 0, nf = 0;
	int rv;

	/* No yield: v may be the head's records, which a write moves. */
	if ((rv = ing_set_select(s, ss, sel->start_ms, sel->end_ms, bucket_ms,
	    NULL, &ids, &n, err)) != 0)
		goto out;
	if (n == 0)
		goto out;
	sm_free(x->fp);
	if ((x->fp = sm_malloc((size_t)n * sizeof(*x->fp))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		x->fp[nf++] = s->series[ids[i]]->fp;
		rv = prof_group(x, s->series[ids[i]], err);
	}
	if (rv != 0)
		goto out;
	qsort(x->fp, nf, sizeof(*x->fp), span_fp_cmp);
	for (uint32_t i = 0; i < nv && rv == 0; i++) {
		if (v[i].t < sel->start_ms || v[i].t >= sel->end_ms ||
		    !fp_sorted_has(x->fp, nf, v[i].fp))
			continue;
		rv = prof_push(x, &v[i], bucket_ms, err);
	}
out:
	sm_free(ids);
	return (rv);
}

static int
group_fp_cmp(const void *a, const void *b)
{
	const Smolder__V1__SeriesGroup *x = *(Smolder__V1__SeriesGroup *const *)a;
	const Smolder__V1__SeriesGroup *y = *(Smolder__V1__SeriesGroup *const *)b;

	return (x->fp < y->fp ? -1 : x->fp > y->fp);
}

int
ing_db_profiles(struct ing_db *db, const Smolder__V1__ProfilesRequest *req,
    struct sm_arena *a, Smolder__V1__ProfilesResponse *out,
    struct sm_err *err)
{
	struct prof_acc x;
	Smolder__V1__Select fsel;
	struct sm_selector ss;
	struct sources src;
	uint32_t w = 0;
	int rv;

	smolder__v1__profiles_response__init(out);
	if (req == NULL || req->select == NULL)
		return (sm_err_set(err, SM_EMALFORMED, "profiles: no select"));
	memset(&x, 0, sizeof(x));
	x.req = req;
	x.a = a;
	x.max = req->max != 0 ? req->max : PROFILES_MAX_DEFAULT;
	x.sel = select_floor(db, req->select, &fsel);
	if ((rv = selector_from_pb(x.sel, &ss, err)) != 0)
		return (rv);
	if ((rv = sources_get(db, x.sel->tenant, x.sel->start_ms,
	    x.sel->end_ms, 0, &src, err)) != 0)
		goto done;
	for (uint32_t i = 0; i < src.nheads && rv == 0; i++) {
		struct ing_head *h = src.heads[i];

		pthread_rwlock_rdlock(&h->lock);
		rv = prof_source(&x, &h->set, h->bucket_ms, &ss, h->profs.v,
		    h->profs.n, err);
		pthread_rwlock_unlock(&h->lock);
	}
	for (uint32_t i = 0; i < src.nblocks && rv == 0; i++) {
		const struct ing_block_meta *m = &src.blocks[i];
		const struct ing_set *idx;
		struct ing_cache_ent *ie;
		struct ing_prof_rec *pr = NULL;
		uint32_t npr = 0;

		if ((rv = block_usable(x.sel->tenant, m, err)) != 0 ||
		    (rv = ing_store_block_index(db->store, x.sel->tenant, m,
		    &idx, &ie, err)) != 0)
			break;
		if ((rv = ing_store_block_profiles(db->store, x.sel->tenant, m,
		    &pr, &npr, err)) == 0)
			rv = prof_source(&x, idx, m->bucket_ms, &ss, pr, npr,
			    err);
		sm_free(pr);
		ing_store_release(db->store, ie);
	}
	sources_put(&src);
	if (rv != 0)
		goto done;
	if (x.n > 0)    /* qsort(NULL, 0) is undefined */
		qsort(x.v, x.n, sizeof(*x.v), prof_out_cmp);
	out->profiles = sm_arena_alloc(a, ((size_t)x.n + 1) *
	    sizeof(*out->profiles));
	if (out->profiles == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto done;
	}
	for (uint32_t i = 0; i < x.n; i++) {
		Smolder__V1__ProfileRef *r;

		if (i > 0 && prof_out_cmp(&x.v[i - 1], &x.v[i]) == 0)
			continue;
		if ((r = sm_arena_alloc(a, sizeof(*r))) == NULL ||
		    (r->id.data = NULL, smolder__v1__profile_ref__init(r),
		    (r->id.data = sm_arena_alloc(a, 16)) == NULL)) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto done;
		}
		r->fp = x.v[i].r.fp;
		r->time_ms = x.v[i].r.t;
		r->total = x.v[i].r.total;
		r->bucket_t = x.v[i].bt;
		memcpy(r->id.data, x.v[i].r.id, 16);
		r->id.len = 16;
		out->profiles[out->n_profiles++] = r;
	}
	if (x.ng > 0) {
		qsort(x.g, x.ng, sizeof(*x.g), group_fp_cmp);
		for (uint32_t i = 0; i < x.ng; i++) {
			if (w == 0 || x.g[w - 1]->fp != x.g[i]->fp)
				x.g[w++] = x.g[i];
		}
		out->groups = sm_arena_alloc(a, (size_t)w * sizeof(*x.g));
		if (out->groups == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto done;
		}
		memcpy(out->groups, x.g, (size_t)w * sizeof(*x.g));
		out->n_groups = w;
	}
done:
	sm_free(x.v);
	sm_free(x.g);
	sm_free(x.fp);
	sm_selector_fini(&ss);
	return (rv);
}
