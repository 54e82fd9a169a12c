/*
 * write.c -- writes (validation, head log, apply) and cuts (block encode
 * and commit, retries).
 * See db.h (the design) and db_int.h (rooms, ownership, locking).
 */
#include "db_int.h"

/* --- validation ----------------------------------------------------------- */

/* Everything ing_head_write relies on, checked before anything is logged. */
int
ing_write_validate(const Smolder__V1__WriteRequest *req, struct sm_err *err)
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
const uint8_t *
ing_write_id(const Smolder__V1__WriteRequest *req)
{
	return (req->profile_id.len == ING_ID_LEN ? req->profile_id.data :
	    NULL);
}

/* --- writes --------------------------------------------------------------- */

static void
writer_done(struct ing_tenant *t, struct ing_head *h, const uint8_t *id,
    int ok)
{
	ING_LOCK(&t->mu);
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
	ING_UNLOCK(&t->mu);
}

int
ing_db_write(struct ing_db *db, const uint8_t *raw, size_t rawlen,
    const Smolder__V1__WriteRequest *req, struct ing_write_result *res,
    struct sm_err *err)
{
	const uint8_t *id = ing_write_id(req);
	struct ing_tenant *t;
	struct ing_head *h;
	uint64_t gen, seq;
	int rv;

	memset(res, 0, sizeof(*res));
	if ((rv = ing_write_validate(req, err)) != 0)
		return (rv);
	/* Over the memory bound (ing_db_tick): refused before the log. */
	if (atomic_load_explicit(&db->mem_refuse, memory_order_relaxed)) {
		sm_counter_inc(sm_metric_child0(ing_m_mem_refused));
		return (sm_err_set(err, SM_EUNAVAIL, "ingester over its "
		    "memory bound (-ingester.head-max-bytes %llu MiB, "
		    "resident %llu MiB): heads are being cut; retry",
		    (unsigned long long)(db->cfg.head_max_bytes >> 20),
		    (unsigned long long)(__atomic_load_n(&db->mem_rss,
		    __ATOMIC_RELAXED) >> 20)));
	}
	if ((rv = ing_tenant_get(db, req->tenant, &t)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	res->listed_ns = t->listed_ns;
	ING_LOCK(&t->mu);
	if (id != NULL) {
		enum ing_id_state st;

		/* A duplicate in flight: wait for its outcome. */
		while ((st = ing_ids_get(&t->ids, id)) == ING_ID_PENDING)
			pthread_cond_wait(&t->cv, &t->mu);
		if (st == ING_ID_DONE) {
			ING_UNLOCK(&t->mu);
			res->duplicate = true;
			return (0);
		}
		if (ing_ids_set(&t->ids, id, ING_ID_PENDING, sm_now_ms()) != 0) {
			ING_UNLOCK(&t->mu);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
	}
	h = t->head;
	atomic_fetch_add(&h->writers, 1);
	gen = h->gen;
	ING_UNLOCK(&t->mu);
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
	ING_ASSERT_HELD(&t->mu);
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

	ING_ASSERT_HELD(&db->cut_mu);
	ING_RDLOCK(&h->lock);
	if (h->set.nseries == 0) {
		ING_RWUNLOCK(&h->lock);
		/* Nothing to keep; its log records (if any) still go. */
		memset(&e, 0, sizeof(e));
		e.meta.gen = h->gen;
		rv = 0;
		goto drop;
	}
	{
		struct ing_block_src src;

		if ((rv = ing_head_block_src(h, &src, err)) == 0) {
			rv = ing_block_encode(&src, db->cfg.zstd_level, &e,
			    err);
			ing_head_block_src_fini(&src);
		}
	}
	ING_RWUNLOCK(&h->lock);
	if (rv != 0)
		return (rv);
	/* Room for the meta before the commit, so publishing it cannot
	 * fail: a committed block missing from t->blocks would be skipped
	 * by queries until the next open, and a tier job's cover_gen
	 * (compact.c) could pass it, leaving that tier block inexact.  Two
	 * slots: one cut (cut_mu) and one tier job (compact_mu) may each
	 * publish one block after reserving. */
	ING_LOCK(&t->mu);
	rv = SM_GROW(t->blocks, t->blocks_cap, (size_t)t->nblocks + 2, 8);
	ING_UNLOCK(&t->mu);
	if (rv != 0) {
		ing_block_enc_fini(&e);
		return (sm_err_set(err, rv, "out of memory"));
	}
	if ((rv = ing_store_block_commit(db->store, t->id, &e, err)) != 0) {
		ing_block_enc_fini(&e);
		return (rv);
	}
	ING_LOCK(&t->mu);
	rv = ing_tenant_add_block(t, &e.meta);
	cutting_remove(t, h);
	ING_UNLOCK(&t->mu);
	sm_info("ingester", "block cut\ttenant=%s block=%llu series=%u "
	    "nodes=%u bytes=%llu", t->id, (unsigned long long)e.meta.gen,
	    e.meta.nseries, e.meta.nnodes, (unsigned long long)e.meta.bytes);
	ing_block_enc_fini(&e);
	ing_head_unref(h);
	sm_counter_inc(sm_metric_child0(ing_m_cuts));
	atomic_fetch_add(&db->ncommits, 1);
	return (rv == 0 ? 0 : sm_err_set(err, rv, "out of memory"));
drop:
	ING_LOCK(&t->mu);
	cutting_remove(t, h);
	ING_UNLOCK(&t->mu);
	ing_head_unref(h);
	return (rv);
}

/* Swap in a fresh head and cut the old one.  Caller holds db->cut_mu. */
static int
tenant_cut(struct ing_db *db, struct ing_tenant *t, struct sm_err *err)
{
	struct ing_head *h, *nh;
	int rv;

	ING_ASSERT_HELD(&db->cut_mu);
	if ((rv = ing_db_head_create(db, t->id, &nh)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	ING_LOCK(&t->mu);
	if (SM_GROW(t->cutting, t->cutting_cap, t->ncutting + 1, 4) != 0) {
		ING_UNLOCK(&t->mu);
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
	ING_UNLOCK(&t->mu);
	return (cut_commit(db, t, h, err));
}

static uint64_t
heads_bytes(struct ing_db *db)
{
	uint64_t total = 0;

	ING_RDLOCK(&db->lock);
	for (uint32_t i = 0; i < db->n; i++)
		total += ing_head_bytes(db->t[i]->head);
	ING_RWUNLOCK(&db->lock);
	return (total);
}

/* Cut heads that are due: all of them with `force` (a flush) or `over`
 * (the memory bound).  Caller holds db->cut_mu. */
static int
db_cut(struct ing_db *db, int64_t now_ms, int force, bool over,
    struct sm_err *err)
{
	uint64_t cuts0 = atomic_load(&db->ncommits);
	int first_rv = 0;

	ING_ASSERT_HELD(&db->cut_mu);
	for (uint32_t i = 0;; i++) {
		struct ing_tenant *t;
		struct ing_head *retry = NULL;
		int due, rv = 0;

		if ((t = ing_tenant_at(db, i)) == NULL)
			break;
		ING_LOCK(&t->mu);
		if (t->ncutting > 0) {
			retry = t->cutting[0];   /* a failed earlier cut */
			ing_head_ref(retry);
		}
		due = t->first_write_ms != 0 && (force || over ||
		    now_ms - t->first_write_ms >= db->cfg.block_ms);
		ING_UNLOCK(&t->mu);
		if (retry != NULL) {
			rv = cut_commit(db, t, retry, err);
			ing_head_unref(retry);
		}
		if (rv == 0 && due)
			rv = tenant_cut(db, t, err);
		if (rv != 0) {
			sm_counter_inc(sm_metric_child0(ing_m_cut_fail));
			sm_error("ingester", "block cut failed; will retry\t"
			    "tenant=%s err=\"%s\"", t->id, err->msg);
			if (first_rv == 0)
				first_rv = rv;
		}
	}
	/* Once per round, not per block (store.h) */
	if (atomic_load(&db->ncommits) != cuts0) {
		struct sm_err e2;

		if (ing_store_reclaim(db->store, &e2) != 0)
			sm_warn("ingester", "memtable flush after a cut failed "
			    "(space comes back at the next)\terr=\"%s\"",
			    e2.msg);
	}
	return (first_rv);
}

/*
 * Spill the heads' sealed buckets (head.h, "Spilled buckets"): each
 * tenant's head every -ingester.head-spill-interval or once it holds
 * ING_SPILL_MIN bytes of them, and every head with `all` (the tick when
 * the heads together use more than half of -ingester.head-max-bytes:
 * spilling before cutting, a cut costs a block per tenant, a spill only
 * the I/O; ing_db_spill).  Caller holds db->cut_mu.  A failure is logged
 * and counted, the buckets stay in memory and the next tick tries again;
 * the first one is returned.  What a spill frees goes back to the
 * system through the tick's one trim (ing_db_tick).
 */
static int
db_spill(struct ing_db *db, int64_t now_ms, bool all, struct sm_err *err)
{
	int first = 0;

	ING_ASSERT_HELD(&db->cut_mu);
	for (uint32_t i = 0;; i++) {
		struct ing_tenant *t;
		struct ing_head *h;
		struct sm_err e;
		uint64_t bytes = 0;
		bool due;

		if ((t = ing_tenant_at(db, i)) == NULL)
			break;
		ING_LOCK(&t->mu);
		h = t->head;
		due = all || (t->first_write_ms != 0 &&
		    (now_ms - t->last_spill_ms >= db->cfg.spill_ms ||
		    atomic_load_explicit(&h->sealed_bytes,
		    memory_order_relaxed) >= ING_SPILL_MIN));
		if (due) {
			ing_head_ref(h);
			t->last_spill_ms = now_ms;
		}
		ING_UNLOCK(&t->mu);
		if (!due)
			continue;
		sm_err_clear(&e);
		if (ing_head_spill(h, all, &bytes, &e) != 0) {
			sm_counter_inc(sm_metric_child0(ing_m_spill_fail));
			sm_error("ingester", "spilling sealed buckets failed; "
			    "will retry\ttenant=%s err=\"%s\"", t->id, e.msg);
			if (first == 0) {
				first = e.code;
				if (err != NULL)
					*err = e;
			}
		}
		sm_counter_add(sm_metric_child0(ing_m_spilled), bytes);
		ing_head_unref(h);
	}
	return (first);
}

/* Percent of x, without overflow for any byte count. */
static uint64_t
pct(uint64_t x, unsigned p)
{
	return (x / 100 * p + x % 100 * p / 100);
}

/*
 * The memory bound's decisions (db.h, ing_db_tick), after the spill and
 * the cut: re-measure (a cut frees the heads, the trim gives their pages
 * back) and refuse or resume writes, logging each change once.
 */
static void
mem_refuse_update(struct ing_db *db, uint64_t rss)
{
	uint64_t max = db->cfg.head_max_bytes;
	bool was = atomic_load(&db->mem_refuse), now = was;

	if (max == 0 || rss == 0)
		now = false;
	else if (rss > pct(max, ING_MEM_REFUSE_PCT))
		now = true;
	else if (rss < pct(max, ING_MEM_RESUME_PCT))
		now = false;
	if (now == was)
		return;
	atomic_store(&db->mem_refuse, now);
	if (now)
		sm_error("ingester", "over the memory bound: refusing writes "
		    "(503) until resident memory is under %u%%	"
		    "rss_mib=%llu head_max_bytes_mib=%llu",
		    ING_MEM_RESUME_PCT, (unsigned long long)(rss >> 20),
		    (unsigned long long)(max >> 20));
	else
		sm_info("ingester", "back under the memory bound: writes "
		    "accepted	rss_mib=%llu head_max_bytes_mib=%llu",
		    (unsigned long long)(rss >> 20),
		    (unsigned long long)(max >> 20));
}

static uint64_t
rss_now(struct ing_db *db)
{
	return (db->cfg.rss != NULL ? db->cfg.rss(db->cfg.rss_arg) : 0);
}

void
ing_db_tick(struct ing_db *db, int64_t now_ms)
{
	uint64_t max = db->cfg.head_max_bytes, heads, mem, rss;
	struct sm_err err;
	bool over, trimmed = false;

	if (db->store == NULL)
		return;
	sm_err_clear(&err);
	ING_LOCK(&db->cut_mu);
	rss = rss_now(db);
	heads = heads_bytes(db);
	mem = rss > heads ? rss : heads;
	__atomic_store_n(&db->mem_rss, rss, __ATOMIC_RELAXED);
	if (db->cfg.spill_ms > 0)
		(void)db_spill(db, now_ms, max != 0 && mem > max / 2, NULL);
	/* What the cut itself will take, on top of what is resident. */
	over = max != 0 && heads >= max / ING_MEM_CUT_SHARE &&
	    mem + ING_MEM_CUT_COST * heads > pct(max, ING_MEM_CUT_PCT);
	if (over)
		sm_counter_inc(sm_metric_child0(ing_m_mem_cuts));
	(void)db_cut(db, now_ms, 0, over, &err);
	if (rss != 0 && (over || rss > pct(max, ING_MEM_REFUSE_PCT))) {
		/* What a cut frees is many small blocks, and the heaps hold
		 * freed request buffers: give the pages back now, then judge
		 * by what is left.  Near the bound the memtables go too
		 * (up to 2 x write buffer per family). */
		if (rss > pct(max, ING_MEM_REFUSE_PCT)) {
			struct sm_err e2;

			if (ing_store_flush_memtables(db->store, &e2) != 0)
				sm_warn("ingester", "flushing memtables for "
				    "the memory bound failed	err=\"%s\"",
				    e2.msg);
		}
		sm_mem_release(SM_MEM_TRIM_MIN);
		trimmed = true;
		rss = rss_now(db);
		__atomic_store_n(&db->mem_rss, rss, __ATOMIC_RELAXED);
	}
	mem_refuse_update(db, rss);
	ING_UNLOCK(&db->cut_mu);
	/* One trim per tick: what spills and cuts freed, and the free
	 * pages request buffers left in the heaps (common/sm.h,
	 * sm_mem_tidy), unless the bound above has just trimmed.  Outside
	 * cut_mu: a trim takes milliseconds and needs no lock of ours. */
	if (!trimmed)
		(void)sm_mem_tidy();
	ing_retire_purge(db, now_ms);
}

bool
ing_db_mem_refusing(struct ing_db *db)
{
	return (atomic_load(&db->mem_refuse));
}

/* Spill every head's sealed buckets, or (cut) cut every head, now, under
 * cut_mu; nothing to do without a store. */
static int
db_spill_or_cut(struct ing_db *db, bool cut, struct sm_err *err)
{
	int rv;

	if (db->store == NULL)
		return (0);
	ING_LOCK(&db->cut_mu);
	rv = cut ? db_cut(db, sm_now_ms(), 1, false, err) :
	    db_spill(db, sm_now_ms(), true, err);
	ING_UNLOCK(&db->cut_mu);
	return (rv);
}

int
ing_db_spill(struct ing_db *db, struct sm_err *err)
{
	return (db_spill_or_cut(db, false, err));
}

int
ing_db_flush(struct ing_db *db, struct sm_err *err)
{
	return (db_spill_or_cut(db, true, err));
}
