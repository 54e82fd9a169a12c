/*
 * retention.c -- the retention floor, retiring and deleting blocks.
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
	ING_RDLOCK(&db->lock);
	for (uint32_t i = 0; i < db->n; i++) {
		struct ing_tenant *t = db->t[i];
		uint32_t k = 0;

		ING_LOCK(&t->mu);
		for (uint32_t b = 0; b < t->nblocks; b++) {
			const struct ing_block_meta *m = &t->blocks[b];

			if (!m->broken && m->max_t <= before_ms && db->store !=
			    NULL && ing_retire_add(db, t->id, m->gen, now) == 0) {
				(*nblocks)++;
				continue;
			}
			t->blocks[k++] = *m;
		}
		t->nblocks = k;
		ING_UNLOCK(&t->mu);
	}
	ING_RWUNLOCK(&db->lock);
	sm_info("ingester", "retention floor raised\tbefore_ms=%lld "
	    "blocks_retired=%u", (long long)before_ms, *nblocks);
	return (0);
}

/*
 * The select with its start raised to the retention floor (a copy in
 * *tmp when it changes).
 */
const Smolder__V1__Select *
ing_select_floor(struct ing_db *db, const Smolder__V1__Select *sel,
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
