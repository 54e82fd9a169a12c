/*
 * gateway.h -- the store-gateway's sync: which blocks of the bucket this
 * process serves, kept in its own database (docs/architecture.md §10).
 *
 * A store-gateway is an ingester process in another role (ingester.h,
 * cfg.gateway): it takes no writes, ships nothing, and serves the same
 * query RPCs (merge, series, labels, stats, analyze, span merge,
 * profiles, tiers through resolutions) from blocks it imports from the
 * bucket.  This file decides what it imports and drops.
 *
 * Sources.  A source is one ingester data directory (meta.json's
 * source.incarnation).  Sources of one tenant are replicas of parts of
 * its data, so a gateway never sums them: each is served as a tenant of
 * its own in the local database, named ING_GW_TENANT(tenant, source) =
 * "<tenant>|<source>" ('|' is not valid in a tenant id, common/tenant.h),
 * under the source's own generations -- so a merged block's `replaces`
 * and a tier block's cover_gen keep their meaning (block.h) -- and the
 * querier asks for one source per request (smolder.v1.Select.source) and
 * counts every (series, bucket) once across ingesters and sources with
 * its replica plan (querier/plan.c).
 *
 * Sharding.  Tenants are spread over the store-gateway ring (common/
 * ring.h: the members of -store-gateway.sharding-ring.members, or with
 * -store-gateway.sharding-ring.store=etcd the keys under
 * <-ring.etcd.prefix>store-gateways/, where each gateway registers
 * itself) by the token walk on sm_ring_key(tenant).  A gateway serves
 * the tenants it is one of the -store-gateway.sharding-ring.
 * replication-factor token owners of, whatever the health of the
 * others, so every tenant is held by RF gateways and losing one loses
 * no answer; the querier computes the same owners from the same ids.
 * While an owner is unsettled (PENDING or JOINING: it has not finished
 * its first pass since it joined or restarted), the gateways that would
 * own the tenant without the unsettled members serve it too, so a
 * gateway joining never leaves a tenant with fewer than RF loaded
 * owners (Mimir's store-gateways extend the replica set alike).  Without
 * a ring the one gateway serves every tenant.  A gateway does not pass
 * before it sees itself in its ring.
 *
 * Exactness across ring changes.  A Sources answer says whether the
 * gateway vouches for the tenant (SourcesResponse.vouch): it does when
 * it is one of the tenant's owners (above, sm_ring_owners_settling) in
 * its current ring and was one (so loaded it) when its last complete
 * pass began.  A gateway that lost the tenant (it may still hold it
 * through the grace below) or gained it since that pass does not.  The
 * querier counts an answer only when both its own ring and the
 * gateway's make it an owner, and reads sources only from gateways that
 * vouch -- one that does not may be dropping the tenant's blocks
 * between the Sources call and the data round (querier/fanout.c,
 * fan_sources) -- so neither side's view lagging behind a ring change
 * can pass a partial list off as the tenant's history: the answer is
 * exact or a 503.  With the
 * settling owners a gateway joining costs no 503 at all; one leaving
 * costs 503s for its tenants until their new owners have synced, unless
 * RF >= 2 leaves each of them another loaded owner.
 *
 * A sync pass (every -store-gateway.sync-interval, and at POST
 * /store-gateway/sync):
 *   1. one bucket scan (ship.h, ing_ship_scan: a LIST, the compactor's
 *      bucket indexes, meta.json of blocks newer than them);
 *   2. wanted: every complete block of an owned tenant that is not
 *      marked for deletion, not replaced by a merged block of its source
 *      and not a second copy of one (source, gen);
 *   3. each wanted block not held is loaded (fetched `workers` at a
 *      time ahead of the import, gateway.c "Fetching ahead"): its parts
 *      but the data
 *      (ship.h, ing_ship_fetch_parts: whole and checked whole when it is
 *      no larger than a data page, else by range), imported in one synced
 *      batch with a stub for each data part (remote.h: the data stays in
 *      the bucket and is read by range as queries need it) and adopted,
 *      taking the gens it replaces out of service in
 *      the same step (db.h, ing_db_block_adopt) -- so a query sees a
 *      merged block or its inputs, never both, never neither;
 *   4. then every held block no longer wanted (marked, deleted, merged
 *      away, or of a tenant no longer owned) is taken out of service and
 *      deleted after the retirement grace.  A tenant no longer owned is
 *      kept for three sync intervals after the ring last changed (its
 *      ids, or which members are unsettled) or the gateway started:
 *      while a ring change rolls out, its new owners load it before the
 *      old ones let it go, and queriers ask every gateway for sources,
 *      not only the owners they compute.
 * A kill -9 anywhere in a pass is harmless: an imported block not yet
 * adopted is listed at the next start, and inputs a merged block replaced
 * may still be on disk then (their deletion waits out a grace), but the
 * gateway serves nothing before its first complete pass, which drops
 * whatever is not wanted (tests/integration/test_store_gateway.py, with
 * SMOLDER_TEST_FAULTS=gateway-kill: SIGKILL after the first import).
 * A block that fails its checks is logged, counted and skipped (the
 * ingesters that shipped it, or its other replicas' sources, hold its
 * data); the pass goes on.  A bucket error ends the pass; what was done
 * stays.  The gateway turns ready (Health ACTIVE) after its first
 * complete pass, so a querier never counts on a gateway that has not
 * loaded what it owns.
 *
 * Folds.  The compactor's folds (compactor/fold.h) are blocks of one
 * more source, served like any other; of one hour's folds only the
 * largest gen is wanted (ship.h).  A gateway remembers which blocks of
 * other sources its folds stand for, and answers a Sources call for one
 * source with gens (a leaving or retaining ingester's) with those gens
 * too: they are served, by the fold, although the gateway dropped the
 * blocks once the compactor marked them.
 *
 * A tenant's retention floor is applied through the compactor's deletion
 * marks, a block at a time.
 *
 * Locking: one pass at a time (gw->mu); the database's own locks do the
 * rest (db.h).  Errors: SM_EAGAIN from a pass before the gateway is in
 * its ring; the bucket's and the store's errors from a pass.
 */
#ifndef ING_GATEWAY_H
#define ING_GATEWAY_H

#include <stdbool.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/bucket.h"
#include "common/ring.h"
#include "smolder/v1/rpc.pb-c.h"

#include "db.h"
#include "remote.h"
#include "store.h"

#define ING_GW_SEP '|'

struct ing_gateway_cfg {
	struct sm_ring *ring;        /* the store-gateways (borrowed, started;
				      * NULL: this one serves every tenant) */
	const char *self_id;         /* -instance.id */
	int64_t unowned_grace_ms;    /* keep tenants not owned (any more)
				      * this long after the start */
	struct sm_bucket *bucket;    /* borrowed */
	struct ing_remote *remote;   /* borrowed: the data parts' reader
				      * (remote.h), the store's hook */
	int64_t workers;             /* blocks fetched at once (1-64;
				      * -store-gateway.sync-concurrency) */
};

struct ing_gateway;

int ing_gateway_create(const struct ing_gateway_cfg *cfg, struct ing_db *db,
    struct ing_store *store, struct ing_gateway **out, struct sm_err *err);
void ing_gateway_destroy(struct ing_gateway *gw);

/* One pass (above); *adopted and *dropped count its changes (may be
 * NULL).  0 or the first bucket or store error. */
int ing_gateway_sync(struct ing_gateway *gw, uint32_t *adopted,
    uint32_t *dropped, struct sm_err *err);

/* Has a pass completed? */
bool ing_gateway_synced(const struct ing_gateway *gw);

/* The local tenant of (tenant, source) in arena a; NULL when the source
 * is not 32 hex digits (SM_EINVAL in err) or out of memory. */
char *ing_gateway_tenant(struct sm_arena *a, const char *tenant,
    const char *source, struct sm_err *err);

/* The sources held for req->tenant (only req->source when set; with
 * their gens when req->gens), sorted by id, and the tenant's owned
 * blocks the last pass could not load with nothing standing in for them
 * (out->unloaded: the querier answers 503 for their range), in arena a. */
int ing_gateway_sources(struct ing_gateway *gw,
    const Smolder__V1__SourcesRequest *req, struct sm_arena *a,
    Smolder__V1__SourcesResponse *out, struct sm_err *err);

/*
 * Asked by an ingester that leaves or drops blocks (ingester.h,
 * "Leaving", "Local retention"), of the store-gateways of ring `gws`:
 * which of gens[0..n) (sorted here) of source `inc` the owner gateways
 * of `tenant` serve (the healthy ones are asked): served[i] is set
 * when every owner that answered lists gens[i] (and one did).  A block
 * served is one the querier can count on once the ingester drops it: a
 * gateway that is down now is not ready again before it loaded every
 * block it owns.  0 or SM_ENOMEM.
 */
int ing_gw_served(struct sm_ring *gws, const char *tenant,
    const char *inc, uint64_t *gens, uint32_t n, uint8_t *served,
    uint32_t *nanswered, struct sm_err *err);

#endif /* ING_GATEWAY_H */
