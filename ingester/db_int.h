/*
 * db_int.h -- what the files of the ingester's database share (private:
 * include it only from ingester/db*.c, write.c, replay.c, retention.c,
 * compact.c and query.c; everyone else uses db.h; docs/style.md §3).
 *
 * The rooms (db.h tells the design; these say where it lives):
 *   db.c         open and close, the tenant table, the sources of a query
 *                (which heads and blocks it reads), ing_db_stats
 *   write.c      writes (validation, head log, apply) and cuts (block
 *                encode and commit, retries), ing_db_tick / ing_db_flush
 *   replay.c     the store at open: retention floor, block scan, head-log
 *                replay, generations
 *   retention.c  the retention floors (default and per tenant), retiring
 *                and deleting blocks
 *   compact.c    tier blocks: the planner and the job that
 *                builds one (its header comment)
 *   query.c      merge, span merge, series, stats, labels, analyze and
 *                profiles, on one series visitor (its header comment)
 *
 * Ownership:
 *   - db owns the tenants (db->t, sorted by id; a tenant is never freed
 *     before ing_db_close, so a struct ing_tenant pointer found under
 *     db->lock stays valid after it is released).
 *   - a tenant owns one reference to its head and to each head in
 *     `cutting`; a query or a cut that uses a head after releasing t->mu
 *     takes its own (ing_head_ref; `refs` in head.h).
 *   - t->blocks holds metas by value, raw and tier blocks alike; a query
 *     copies the ones it reads (struct ing_sources, raw and tier blocks
 *     alike; tiers.h says which it reads), so retention or a tier job may
 *     drop them meanwhile (the files stay for DB_RETIRE_GRACE_MS,
 *     retention.c).  A cut and a tier job reserve their slot in it
 *     before committing, so a committed block is always listed.
 *
 * Locking, in the order they may nest (never the other way round):
 *   db->retention_mu one ing_db_retention at a time (held for the whole
 *                 call: computing, persisting and applying the floors,
 *                 retiring blocks); outermost.
 *   db->compact_mu one tier job at a time (compact.c); held for the whole
 *                 job, reading and encoding included, and never together
 *                 with db->cut_mu (a job takes db->lock, t->mu and
 *                 retire_mu inside it, briefly).
 *   db->cut_mu    one cut (or flush) at a time: cut_commit, tenant_cut,
 *                 db_cut run with it held.
 *   db->lock      rwlock over the tenant table (t, n, cap): readers find
 *                 a tenant, ing_tenant_get adds one under the write lock.
 *   t->mu         the tenant's head pointer, first_write_ms, cutting[],
 *                 blocks[], ids, and the `writers` handshake: a write
 *                 counts itself in h->writers under t->mu, a cut waits on
 *                 t->cv until they reach 0.
 *   db->retire_mu the retired-block list (taken inside t->mu by
 *                 ing_db_retention).
 *   db->floor_mu  the tenant floor table (floors[]); a leaf, taken
 *                 briefly anywhere (ing_db_floor) with nothing inside it.
 *   head->lock    the head's contents (head.h); never held together with
 *                 t->mu: a cut releases it before taking t->mu, a query
 *                 takes it after releasing t->mu.
 *
 * Lock assertions: pthread cannot say whether the calling thread holds a
 * mutex or rwlock, so builds without NDEBUG (the Debug / ASan build) keep
 * a per-thread list of the locks this thread took through ING_LOCK /
 * ING_RDLOCK / ING_WRLOCK and dropped through ING_UNLOCK (eight slots; a
 * thread here holds at most three at once), and ING_ASSERT_HELD(l)
 * aborts when l is not on it.  Release builds compile the list and the
 * check away (the macros are the plain pthread calls).  Only this
 * component's rooms use them; head.c's own write lock and the yield in
 * set.h (which gives a read lock up and takes it back before returning)
 * do not change what the thread holds when they return.
 */
#ifndef ING_DB_INT_H
#define ING_DB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/metrics.h"

#include "db.h"
#include "ids.h"

struct ing_tenant {
	char *id;
	pthread_mutex_t mu;
	pthread_cond_t cv;                /* a head's writers reached 0 */
	struct ing_head *head;
	int64_t first_write_ms;           /* of the current head, 0 = none */
	int64_t listed_ns;                /* sm_mono_ns() when it joined the
					   * table (the tenant list) */
	_Atomic int64_t local_floor_ms;   /* db.h "Local retention";
					   * INT64_MIN = none */
	_Atomic uint64_t drop_epoch;      /* db.h, ing_db_drop_epoch */
	int64_t last_spill_ms;            /* write.c db_spill (cut_mu) */
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
	atomic_uint_fast64_t tenants_ver; /* bumped under lock (write) when a
					   * tenant is added; ing_db_tenants */
	atomic_uint_fast64_t next_gen;
	atomic_uint_fast64_t next_seq;
	atomic_uint_fast64_t ncommits;    /* blocks cut (write.c: a round
					   * that cut one reclaims space) */
	pthread_mutex_t cut_mu;           /* one cut at a time */
	atomic_bool mem_refuse;           /* over the memory bound: writes
					   * refused (ing_db_tick) */
	uint64_t mem_rss;                 /* last measured rss (cut_mu) */
	pthread_mutex_t compact_mu;       /* one tier job at a time */
	/* Retention: nothing before the floor is served; retired blocks
	 * are deleted from disk after a grace period (queries that copied
	 * their meta before the retirement may still be reading them). */
	_Atomic int64_t floor_ms;         /* the default floor */
	/* Tenants' own floors, sorted by tenant (floor_mu; changed only
	 * under retention_mu).  A table in the db, not a field of struct
	 * ing_tenant: the compactor names every overridden tenant to every
	 * ingester, including ones this ingester has no data of yet, and a
	 * tenant created later must start from its stored floor. */
	pthread_mutex_t retention_mu;
	pthread_mutex_t floor_mu;
	struct db_floor *floors;
	uint32_t nfloors, floors_cap;
	pthread_mutex_t retire_mu;
	struct db_retired *retired;
	uint32_t nretired, retired_cap;
};

struct db_floor {
	char *tenant;
	int64_t ms;
};

struct db_retired {
	char *tenant;
	uint64_t gen;
	int64_t at_ms;
};

#define DB_RETIRE_GRACE_MS 60000

/* Block cut and spill metrics (registered by ing_db_open, counted by
 * write.c). */
extern struct sm_metric *ing_m_cuts, *ing_m_cut_fail;
extern struct sm_metric *ing_m_spilled, *ing_m_spill_fail;
extern struct sm_metric *ing_m_mem_refused, *ing_m_mem_cuts;

/* A new head for `tenant`, with the next gen, attached to the store when
 * there is one (head.h, "Spilled buckets").  0 or SM_ENOMEM. */
int ing_db_head_create(struct ing_db *db, const char *tenant,
    struct ing_head **out);

/* Compaction metrics (compact.c), registered by ing_db_open. */
void ing_compact_metrics_init(void);
/* A query read a tier block (smolder_ingester_tier_blocks_read_total). */
void ing_tier_read_count(void);

/* --- lock assertions (above) ------------------------------------------- */

#ifndef NDEBUG
void ing_lock_note(const void *l);
void ing_lock_forget(const void *l);
bool ing_lock_held(const void *l);
#define ING_LOCK(m)	(pthread_mutex_lock(m), ing_lock_note(m))
#define ING_RDLOCK(l)	(pthread_rwlock_rdlock(l), ing_lock_note(l))
#define ING_WRLOCK(l)	(pthread_rwlock_wrlock(l), ing_lock_note(l))
#define ING_UNLOCK(m)	(ing_lock_forget(m), pthread_mutex_unlock(m))
#define ING_RWUNLOCK(l)	(ing_lock_forget(l), pthread_rwlock_unlock(l))
#define ING_ASSERT_HELD(l) SM_ASSERT(ing_lock_held(l))
#else
#define ING_LOCK(m)	((void)pthread_mutex_lock(m))
#define ING_RDLOCK(l)	((void)pthread_rwlock_rdlock(l))
#define ING_WRLOCK(l)	((void)pthread_rwlock_wrlock(l))
#define ING_UNLOCK(m)	((void)pthread_mutex_unlock(m))
#define ING_RWUNLOCK(l)	((void)pthread_rwlock_unlock(l))
#define ING_ASSERT_HELD(l) ((void)0)
#endif

/* --- tenants (db.c) ------------------------------------------------------ */

/* The tenant `id`, or NULL (takes db->lock shared). */
struct ing_tenant *ing_tenant_find(struct ing_db *db, const char *id);

/* The i-th tenant in id order, or NULL past the last (takes db->lock
 * shared): a walk over every tenant that holds no lock between them. */
struct ing_tenant *ing_tenant_at(struct ing_db *db, uint32_t i);

/* Free each of the n records of v (a heap array of structs with a heap
 * `tenant` string: block lists, job lists, floors), then v. */
#define ING_TENANT_RECS_FREE(v, n) do {					\
	for (uint32_t i_ = 0; i_ < (n); i_++)				\
		sm_free((v)[i_].tenant);				\
	sm_free(v);							\
} while (0)

/* The tenant `id`, created with an empty head when new.  0 or SM_ENOMEM. */
int ing_tenant_get(struct ing_db *db, const char *id, struct ing_tenant **out);

/* Insert a block meta in gen order (caller holds t->mu, or is alone:
 * open).  0 or SM_ENOMEM. */
int ing_tenant_add_block(struct ing_tenant *t, const struct ing_block_meta *m);

/* --- writes (write.c) ---------------------------------------------------- */

/* Everything ing_head_write relies on.  0 or SM_EMALFORMED. */
int ing_write_validate(const Smolder__V1__WriteRequest *req,
    struct sm_err *err);

/* The write's idempotency key, or NULL when it carries none. */
const uint8_t *ing_write_id(const Smolder__V1__WriteRequest *req);

/* --- replay (replay.c) --------------------------------------------------- */

/* Read the store into a new db (ing_db_open, db->store != NULL): the
 * floors, the blocks, the head log; 0 or the store's error. */
int ing_db_replay(struct ing_db *db, struct sm_err *err);

/* --- retention (retention.c) --------------------------------------------- */

/* Queue a block for deletion from disk (at_ms: when it was retired;
 * INT64_MIN: at once).  0 or SM_ENOMEM. */
int ing_retire_add(struct ing_db *db, const char *tenant, uint64_t gen,
    int64_t at_ms);

/* Delete the retired blocks whose grace period is over (cutter thread). */
void ing_retire_purge(struct ing_db *db, int64_t now_ms);

/* Insert or set a tenant's own floor in db->floors (open, or under
 * retention_mu).  0 or SM_ENOMEM. */
int ing_floor_put(struct ing_db *db, const char *tenant, int64_t ms);

/* Free the floor table (close). */
void ing_floors_free(struct ing_db *db);

/* Raise sel->start_ms to its tenant's retention floor (ing_db_floor);
 * an end below it too, making the range empty. */
void ing_select_floor(struct ing_db *db, struct ing_select *sel);

/* --- sources (db.c) ------------------------------------------------------ */

/* What a query reads for one tenant, taken under the tenant mutex. */
struct ing_sources {
	struct ing_head **heads;      /* the head, then every head being cut */
	uint32_t nheads;
	struct ing_block_meta *blocks;
	uint32_t nblocks;
};

/* Take references to what a query of `tenant` over [start, end) reads
 * (all_time: every block): its heads and the metas of the overlapping
 * blocks.  An unknown tenant has none.  0 or SM_ENOMEM. */
int ing_sources_get(struct ing_db *db, const char *tenant, int64_t start,
    int64_t end, int all_time, struct ing_sources *src, struct sm_err *err);

/* Drop what ing_sources_get took. */
void ing_sources_put(struct ing_sources *src);

/* 0, or SM_ECORRUPT naming the block when its meta and index are both
 * damaged (it answers nothing). */
int ing_sources_usable(const char *tenant, const struct ing_block_meta *m,
    struct sm_err *err);

#endif /* ING_DB_INT_H */
