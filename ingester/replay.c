/*
 * replay.c -- the store at open: retention floors, blocks, head-log replay.
 * See db.h (the design) and db_int.h (rooms, ownership, locking).
 */
#include "db_int.h"

/* --- open, replay --------------------------------------------------------- */

static int
db_scan_floor(void *arg, const char *tenant, int64_t floor_ms)
{
	return (ing_floor_put(arg, tenant, floor_ms));
}

static int
db_scan_local_floor(void *arg, const char *tenant, int64_t floor_ms)
{
	struct ing_tenant *t;

	if (ing_tenant_get(arg, tenant, &t) != 0)
		return (SM_ENOMEM);
	atomic_store(&t->local_floor_ms, floor_ms);
	return (0);
}

static int
db_scan_block(void *arg, const char *tenant, const struct ing_block_meta *m)
{
	struct ing_db *db = arg;
	struct ing_tenant *t;

	/* Retention reached it before the process stopped, or it was
	 * merged into another block (a tombstone, store.h): delete now. */
	if (m->merged || (!m->broken && m->max_t <= ing_db_floor(db, tenant)))
		return (ing_retire_add(db, tenant, m->gen, INT64_MIN));
	if (ing_tenant_get(db, tenant, &t) != 0 ||
	    ing_tenant_add_block(t, m) != 0)
		return (SM_ENOMEM);
	return (0);
}

/* Before the first record of a head (tenant, gen): the spilled buckets
 * and written-ahead data parts a crashed process left under its gen
 * (store.h). */
static int
db_replay_gen(void *arg, const char *tenant, uint64_t gen)
{
	struct ing_db *db = arg;
	struct sm_err err;

	if (ing_store_uncommitted_drop(db->store, tenant, gen, &err) != 0)
		sm_warn("ingester", "dropping stale spilled buckets failed\t"
		    "tenant=%s head=%llu err=\"%s\"", tenant,
		    (unsigned long long)gen, err.msg);
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

	if (a == NULL)
		return (SM_ENOMEM);
	al = sm_arena_pbc(a);
	req = smolder__v1__request__unpack(&al, n, rec);
	sm_err_clear(&err);
	if (req == NULL || req->method_case !=
	    SMOLDER__V1__REQUEST__METHOD_WRITE ||
	    ing_write_validate(req->write, &err) != 0 ||
	    strcmp(req->write->tenant, tenant) != 0) {
		sm_error("ingester", "head log: undecodable record skipped\t"
		    "tenant=%s seq=%llu err=\"%s\"", tenant,
		    (unsigned long long)seq, err.msg);
		goto out;
	}
	if ((rv = ing_tenant_get(db, tenant, &t)) != 0)
		goto out;
	id = ing_write_id(req->write);
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
ing_db_replay(struct ing_db *db, struct sm_err *err)
{
	uint64_t max_gen = 0, max_seq = 0, corrupt = 0, blocks = 0;
	int64_t t0 = sm_mono_ns(), fl;
	int rv;

	if ((rv = ing_store_floor_get(db->store, &fl, err)) != 0)
		return (rv);
	atomic_store(&db->floor_ms, fl);
	if ((rv = ing_store_floors_scan(db->store, db_scan_floor, db,
	    err)) != 0)
		return (rv);
	if ((rv = ing_store_blocks_scan(db->store, db_scan_block, db,
	    err)) != 0 || (rv = ing_store_local_floors_scan(db->store,
	    db_scan_local_floor, db, err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < db->n; i++) {
		struct ing_tenant *t = db->t[i];

		for (uint32_t b = 0; b < t->nblocks; b++)
			max_gen = SM_MAX(max_gen, t->blocks[b].gen);
		blocks += t->nblocks;
	}
	if ((rv = ing_store_log_replay(db->store, db_replay_gen,
	    db_replay_one, db, &max_gen, &max_seq, &corrupt, err)) != 0) {
		sm_err_prefix(err, "head log replay");
		return (rv);
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
	return (0);
}
