/*
 * dist_int.h -- distributor internals shared by its files.
 */
#ifndef DIST_INT_H
#define DIST_INT_H

#include "common/metrics.h"
#include "common/overrides.h"
#include "common/ring.h"

#include "batch.h"
#include "distributor.h"
#include "hints.h"
#include "common/peers.h"

/* The /ready header by which distributors count each other
 * (common/peers.h). */
#define DIST_PEER_HEADER "X-Smolder-Distributor"
#include "ratelimit.h"

struct distributor {
	struct dist_config cfg;
	struct dist_limits limits;      /* from the flags; per tenant:
					 * dist_tenant_limits() */
	struct sm_http *http;
	struct sm_ring *ring;
	struct remote_write *rw;        /* NULL: no -remote-write.url */
	struct dist_hints *hints;       /* NULL: hinted handoff off */
	struct sm_limits deflim;        /* the flags, as overrides take them */
	struct dist_ratelim *ratelim;   /* per-tenant buckets, owned */
	struct sm_peers *peers;         /* NULL: no -distributor.peers */
	char peer_id[SM_PEER_ID_LEN + 1];       /* random, per process */
};

/*
 * The limits of `tenant` now: its runtime overrides over the flags, as
 * read (*sl) and as the batch takes them (*dl, valid while the caller
 * keeps it: a batch borrows it).  A request takes them once, so a reload
 * in the middle of it does not mix two sets.
 */
void dist_tenant_limits(struct distributor *d, const char *tenant,
    struct sm_limits *sl, struct dist_limits *dl);

/*
 * Charge `n` request bytes to `tenant`'s ingestion rate (ratelimit.h)
 * under its limits `sl`.  0, or SM_ELIMIT with Pyroscope's message in err
 * (the caller replies 429 resource_exhausted), or SM_ENOMEM.
 */
int dist_rate_check(struct distributor *d, const char *tenant,
    const struct sm_limits *sl, size_t n, struct sm_err *err);

/*
 * Replicate the finished batch `b` of `tenant` to its ingesters (push.c):
 * every series goes to the RF healthy replicas its ring key maps to, as
 * one WriteRequest per ingester carrying the series it holds, all under
 * one profile id: `profile_id` (16 bytes) when not NULL -- a client's
 * idempotency key, so a retry is applied once -- else a random one.
 * Returns 0 once every series is acknowledged by a quorum
 * of its replicas; the remaining replicas finish in the background.
 * SM_EUNAVAIL when too few ingesters are healthy or answered (nothing may
 * be reported as written), SM_ETIMEDOUT, SM_EINTERNAL (an ingester found
 * the write malformed: our bug), SM_ENOMEM.
 */
int dist_push(struct distributor *d, const char *tenant,
    struct dist_batch *b, const uint8_t *profile_id, struct sm_err *err);

/*
 * The active-series limit an ingester enforces for a tenant whose limits
 * are `global` (max_global_series_per_tenant) and `local`
 * (max_local_series_per_tenant), with `nhealthy` healthy ring members and
 * replication factor `rf` (push.c explains the formula).  0 = no limit.
 */
uint32_t dist_series_limit(uint32_t global, uint32_t local, uint32_t nhealthy,
    uint32_t rf);

/*
 * Count an upload's outcome in the distributor metrics: a refusal under
 * `reason` (discarded_profiles_total's label), or NULL for Pyroscope's
 * discard reason that the error message `msg` names (samples_limit,
 * label_name_too_long, not_in_ingestion_window, ...; ingest.c has the
 * table), else the one its HTTP status implies (429 = rate_limited, 422 =
 * malformed_profile, ...).  dist_push's SM_ELIMIT is "series_limit" (an
 * ingester's active-series limit, push.c).
 */
void dist_observe(const char *tenant, int status, size_t len,
    uint32_t nseries, const char *reason, const char *msg);

/* Register push.v1.PusherService/Push (connect_push.c). */
int dist_connect_register(struct distributor *d, struct sm_err *err);

/*
 * A push.v1 PushRequest through Push's whole path (connect_push.c: decode
 * and validate every sample, then write them, remote-write), the tenant
 * from call->http, allocations in call->arena.  For other protocols that
 * arrive as pprof series (otlp.c).  0 or SM_E* with err set.
 */
struct sm_connect_call;
typedef struct Push__V1__PushRequest Push__V1__PushRequest;
int dist_push_call(struct distributor *d, struct sm_connect_call *call,
    const Push__V1__PushRequest *req, struct sm_err *err);

/* POST /v1development/profiles: OpenTelemetry profiles in (otlp.c). */
int dist_otlp_register(struct distributor *d, struct sm_err *err);

/*
 * An ExportProfilesServiceRequest body (protobuf, or OTLP JSON when
 * `json`) as the PushRequest it becomes
 * (otlp.c's mapping), everything in `a`.  0, SM_EINVAL (malformed, an
 * index outside its table) or SM_ENOMEM, with err set.  Also the fuzz
 * target's entry (tests/fuzz/fuzz_otlp.c).
 */
struct sm_arena;
int dist_otlp_convert(const uint8_t *body, size_t len, bool json,
    struct sm_arena *a, Push__V1__PushRequest *out, struct sm_err *err);

#endif /* DIST_INT_H */
