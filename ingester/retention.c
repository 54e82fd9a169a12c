/*
 * retention.c -- the retention floors (default and per tenant), retiring
 * and deleting blocks.
 * See db.h (the design) and db_int.h (rooms, ownership, locking).
 */
#include "db_int.h"

/* --- retention ------------------------------------------------------------ */

/* Queue a block for deletion from disk (at_ms: when it was retired). */
int
ing_retire_add(struct ing_db *db, const char *tenant, uint64_t gen,
    int64_t at_ms)
{
	int rv = 0;

	ING_LOCK(&db->retire_mu);
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
	ING_UNLOCK(&db->retire_mu);
	return (rv);
}

bool
ing_db_block_retiring(struct ing_db *db, const char *tenant, uint64_t gen)
{
	bool found = false;

	ING_LOCK(&db->retire_mu);
	for (uint32_t i = 0; i < db->nretired && !found; i++)
		found = db->retired[i].gen == gen &&
		    strcmp(db->retired[i].tenant, tenant) == 0;
	ING_UNLOCK(&db->retire_mu);
	return (found);
}

/* Delete the retired blocks whose grace period is over (cutter thread). */
void
ing_retire_purge(struct ing_db *db, int64_t now_ms)
{
	uint32_t i = 0;

	ING_LOCK(&db->retire_mu);
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
	ING_UNLOCK(&db->retire_mu);
}

/* --- floors ------------------------------------------------------------- */

/* Index of `tenant` in floors[0..n), or where it goes (*found false). */
static uint32_t
floor_find(const struct db_floor *f, uint32_t n, const char *tenant,
    bool *found)
{
	uint32_t lo;

	SM_LOWER_BOUND(lo, n, mid, strcmp(f[mid].tenant, tenant) < 0);
	*found = lo < n && strcmp(f[lo].tenant, tenant) == 0;
	return (lo);
}

int64_t
ing_db_floor(struct ing_db *db, const char *tenant)
{
	int64_t fl;
	uint32_t i;
	bool found;

	ING_LOCK(&db->floor_mu);
	i = floor_find(db->floors, db->nfloors, tenant, &found);
	fl = found ? db->floors[i].ms : atomic_load(&db->floor_ms);
	ING_UNLOCK(&db->floor_mu);
	return (fl);
}

int
ing_floor_put(struct ing_db *db, const char *tenant, int64_t ms)
{
	uint32_t i;
	bool found;
	char *id;
	int rv = 0;

	ING_LOCK(&db->floor_mu);
	i = floor_find(db->floors, db->nfloors, tenant, &found);
	if (found) {
		db->floors[i].ms = ms;
		goto out;
	}
	if ((rv = SM_GROW(db->floors, db->floors_cap, db->nfloors + 1,
	    8)) != 0)
		goto out;
	if ((id = sm_strdup(tenant)) == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	memmove(&db->floors[i + 1], &db->floors[i],
	    (db->nfloors - i) * sizeof(*db->floors));
	db->floors[i] = (struct db_floor){ id, ms };
	db->nfloors++;
out:
	ING_UNLOCK(&db->floor_mu);
	return (rv);
}

void
ing_floors_free(struct ing_db *db)
{
	ING_TENANT_RECS_FREE(db->floors, db->nfloors);
	db->floors = NULL;
	db->nfloors = db->floors_cap = 0;
}

/*
 * The floors a request sets: every tenant of db->floors and every named
 * one, with its new value; `raise` marks those that change (named ones
 * new to the table always do: they get a floor of their own).  Runs under
 * retention_mu, the only writer of db->floors, so it reads it unlocked.
 */
struct floor_upd {
	const char *tenant;     /* borrowed: db->floors or the request */
	int64_t ms;
	bool named, raise;
};

static int
tf_cmp(const void *a, const void *b)
{
	const struct ing_tenant_floor *x = *(const struct ing_tenant_floor *
	    const *)a, *y = *(const struct ing_tenant_floor *const *)b;

	return (strcmp(x->tenant, y->tenant));
}

static int
upd_cmp(const void *key, const void *e)
{
	return (strcmp(key, ((const struct floor_upd *)e)->tenant));
}

/* O((floors + named) log): the named tenants are sorted first, so a
 * repeated name meets its first entry as the last one appended. */
static int
floor_plan(struct ing_db *db, int64_t before_ms,
    const struct ing_tenant_floor *tf, uint32_t ntf, struct floor_upd **out,
    uint32_t *nout)
{
	int64_t def = atomic_load(&db->floor_ms);
	const struct ing_tenant_floor **st = NULL;
	struct floor_upd *u;
	uint32_t n = 0, nold = db->nfloors;

	*out = NULL;
	*nout = 0;
	if ((u = sm_calloc((size_t)nold + ntf + 1, sizeof(*u))) == NULL ||
	    (st = sm_calloc((size_t)ntf + 1, sizeof(*st))) == NULL) {
		sm_free(u);
		return (SM_ENOMEM);
	}
	for (uint32_t i = 0; i < nold; i++)
		u[n++] = (struct floor_upd){ db->floors[i].tenant,
			db->floors[i].ms, false, false };
	for (uint32_t j = 0; j < ntf; j++)
		st[j] = &tf[j];
	qsort(st, ntf, sizeof(*st), tf_cmp);
	for (uint32_t j = 0; j < ntf; j++) {
		struct floor_upd *e = bsearch(st[j]->tenant, u, nold,
		    sizeof(*u), upd_cmp);

		if (e == NULL && n > nold &&
		    strcmp(u[n - 1].tenant, st[j]->tenant) == 0)
			e = &u[n - 1];
		if (e == NULL) {
			/* New: from the effective floor it had (the
			 * default's, before this request raises it). */
			e = &u[n++];
			*e = (struct floor_upd){ st[j]->tenant, def, true,
				true };
		}
		e->named = true;
		if (st[j]->before_ms > e->ms) {
			e->ms = st[j]->before_ms;
			e->raise = true;
		}
	}
	sm_free(st);
	for (uint32_t i = 0; i < n; i++)
		if (!u[i].named && before_ms > u[i].ms) {
			u[i].ms = before_ms;
			u[i].raise = true;
		}
	*out = u;
	*nout = n;
	return (0);
}

int
ing_db_retention(struct ing_db *db, int64_t before_ms,
    const struct ing_tenant_floor *tf, uint32_t ntf, uint32_t *nblocks,
    struct sm_err *err)
{
	int64_t now = sm_now_ms(), def;
	bool raise_def;
	struct ing_store_floor *put = NULL;
	struct floor_upd *u = NULL;
	uint32_t nu = 0, nput = 0;
	int rv;

	*nblocks = 0;
	ING_LOCK(&db->retention_mu);
	def = atomic_load(&db->floor_ms);
	raise_def = before_ms > def;
	if ((rv = floor_plan(db, before_ms, tf, ntf, &u, &nu)) != 0 ||
	    (put = sm_calloc((size_t)nu + 1, sizeof(*put))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < nu; i++)
		if (u[i].raise)
			put[nput++] = (struct ing_store_floor){ u[i].tenant,
				u[i].ms };
	/* Persist first: after a crash the floors still hide the data. */
	if (db->store != NULL && (rv = ing_store_floors_put(db->store, put,
	    nput, raise_def, before_ms, err)) != 0)
		goto out;
	for (uint32_t i = 0; i < nput; i++) {
		if ((rv = ing_floor_put(db, put[i].tenant, put[i].floor_ms)) !=
		    0) {
			/* Persisted: the next open has it; this process
			 * goes on with the floor it had. */
			rv = sm_err_set(err, rv, "out of memory");
			goto out;
		}
		if (put[i].floor_ms == INT64_MIN)
			sm_info("ingester", "retention floor set\ttenant=%s "
			    "floor_ms=none", put[i].tenant);
		else
			sm_info("ingester", "retention floor set\ttenant=%s "
			    "floor_ms=%lld", put[i].tenant,
			    (long long)put[i].floor_ms);
	}
	if (raise_def)
		atomic_store(&db->floor_ms, before_ms);
	ING_RDLOCK(&db->lock);
	for (uint32_t i = 0; i < db->n; i++) {
		struct ing_tenant *t = db->t[i];
		int64_t fl = ing_db_floor(db, t->id);
		uint32_t k = 0, nt = 0;

		ING_LOCK(&t->mu);
		for (uint32_t b = 0; b < t->nblocks; b++) {
			const struct ing_block_meta *m = &t->blocks[b];

			if (!m->broken && m->max_t <= fl && db->store !=
			    NULL && ing_retire_add(db, t->id, m->gen, now) == 0) {
				nt++;
				continue;
			}
			t->blocks[k++] = *m;
		}
		t->nblocks = k;
		ING_UNLOCK(&t->mu);
		if (nt > 0)
			sm_info("ingester", "retention: blocks retired\t"
			    "tenant=%s floor_ms=%lld blocks=%u", t->id,
			    (long long)fl, nt);
		*nblocks += nt;
	}
	ING_RWUNLOCK(&db->lock);
	if (raise_def || nput > 0 || *nblocks > 0)
		sm_info("ingester", "retention pass\tdefault_floor_ms=%lld "
		    "default_raised=%d tenant_floors_raised=%u "
		    "blocks_retired=%u", (long long)atomic_load(&db->floor_ms),
		    raise_def, nput, *nblocks);
out:
	ING_UNLOCK(&db->retention_mu);
	sm_free(put);
	sm_free(u);
	return (rv);
}

/* Raise sel's start to its tenant's retention floor (db_int.h). */
void
ing_select_floor(struct ing_db *db, struct ing_select *sel)
{
	int64_t fl = ing_db_floor(db, sel->tenant);

	if (sel->start_ms >= fl)
		return;
	sel->start_ms = fl;
	if (sel->end_ms < fl)
		sel->end_ms = fl;    /* empty range */
}
