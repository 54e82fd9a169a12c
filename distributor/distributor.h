/*
 * distributor.h -- the distributor component (docs/architecture.md §1): HTTP ingest.
 *
 * Routes, write-scoped: POST /ingest and /pyroscope/ingest
 * (docs/wire-formats.md §2; ingest.c), push.v1.PusherService/Push
 * over Connect, what Grafana Alloy and Pyroscope's SDKs send
 * (docs/wire-formats.md §4; connect_push.c), and POST
 * /v1development/profiles, OpenTelemetry profiles (otlp.c), also as the
 * Connect method
 * /opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export
 * that OTLP's gRPC exporters call (through common/grpc.h).  A request is
 * authenticated to a tenant, bounded (body size at the HTTP layer,
 * decompressed size, samples, depth, labels), parsed into a write batch
 * (distributor/batch.h) and replicated to RF ingesters of the ring
 * (distributor/push.c); the client gets 200 only after every series of
 * the upload was acknowledged by a write quorum of its replicas.
 *
 * Per-tenant limits: the distributor borrows main's runtime overrides
 * (common/overrides.h, -runtime-config.file).  A request reads its
 * tenant's limits once (dist_tenant_limits): the validation limits
 * (-validation.* unless overridden) bound its parsing, and its bytes are
 * charged to the tenant's ingestion rate (ratelimit.h) before parsing:
 * over the rate is 429 resource_exhausted (Connect too), counted as
 * smolder_distributor_discarded_profiles_total{reason="rate_limited"}.
 * The active-series limits (max_global_series_per_tenant,
 * max_local_series_per_tenant; -ingester.max-*-series-per-tenant flags,
 * read here since the ingesters have neither the ring nor the overrides)
 * are converted per write into the ingester's share and sent with it
 * (push.c); an ingester's refusal is 429 resource_exhausted, counted as
 * reason="series_limit".
 *
 * Several distributors share each tenant's ingestion rate: each takes
 * rate / N, N = the healthy distributors of -distributor.peers (common/peers.h,
 * ratelimit.h); without peers N = 1.
 *
 * Ownership: borrows the HTTP server and the ring.
 * Locking: handlers run concurrently; the only mutable shared state is
 * the rate limiter's buckets and the overrides table, each behind its own
 * lock, and the peers' healthy count (an atomic written by their prober).
 */
#ifndef DIST_DISTRIBUTOR_H
#define DIST_DISTRIBUTOR_H

#include <stdbool.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/http.h"
#include "common/overrides.h"
#include "common/ring.h"
#include "remote_write.h"

struct dist_config {
	int64_t body_limit_mb;          /* -distributor.ingestion-body-limit-mb */
	int64_t push_timeout_ms;        /* -distributor.push.timeout */
	int64_t max_profile_bytes;      /* -validation.max-profile-size-bytes */
	int64_t max_samples;            /* -validation.max-profile-stacktrace-samples */
	int64_t max_sample_labels;      /* -validation.max-profile-stacktrace-sample-labels */
	int64_t max_depth;              /* -validation.max-profile-stacktrace-depth */
	int64_t max_symbol_len;         /* -validation.max-profile-symbol-value-length */
	int64_t max_label_names;        /* -validation.max-label-names-per-series */
	int64_t max_label_name_len;     /* -validation.max-length-label-name */
	int64_t max_label_value_len;    /* -validation.max-length-label-value */
	int64_t reject_older_ms;        /* -validation.reject-older-than, 0 = off */
	int64_t reject_newer_ms;        /* -validation.reject-newer-than, 0 = off */
	bool multitenancy;              /* -auth.multitenancy-enabled (main) */
	struct rw_config rw;            /* -remote-write.* (remote_write.h) */
	int64_t hints_max_bytes;        /* -distributor.hints-max-bytes */
	int64_t hints_max_age_ms;       /* -distributor.hints-max-age */
	char *ingestion_rate_mb;        /* -distributor.ingestion-rate-limit-mb */
	char *ingestion_burst_mb;       /* -distributor.ingestion-burst-size-mb */
	int64_t max_global_series;      /* -ingester.max-global-series-... */
	int64_t shard_size;             /* -distributor.ingestion-tenant-
					 * shard-size, 0 = every ingester */
	int64_t max_local_series;       /* -ingester.max-local-series-... */
	char *peers;                    /* -distributor.peers (common/peers.h) */
	int64_t peers_period_ms;        /* -distributor.peers-probe-period */
	int64_t peers_timeout_ms;       /* -distributor.peers-probe-timeout */
	struct sm_overrides *overrides; /* borrowed from main; NULL = flags */
	int64_t hold_after_change_ms;   /* main: sm_ring_confine_settle_ms;
					 * push.c holds every tenant's new
					 * writes this long after a reload */
	const struct sm_clock *clock;   /* the rate limiter's and the peer
					 * prober's (common/clock.h); NULL =
					 * the real clock, a test's manual
					 * one must outlive the distributor */
};

int dist_flags_add(struct sm_flags *fs, struct dist_config *cfg,
    struct sm_err *err);

struct distributor;

int dist_create(const struct dist_config *cfg, struct sm_http *http,
    struct sm_ring *ring, struct distributor **out, struct sm_err *err);

/* Start / stop the peer prober (common/peers.h); no-ops without peers. */
int dist_start(struct distributor *d, struct sm_err *err);
void dist_stop(struct distributor *d);
void dist_destroy(struct distributor *d);

/*
 * This distributor's random id: /ready answers it in the
 * X-Smolder-Distributor header so peers (and this process) can tell who
 * answered a probe (common/peers.h).
 */
const char *dist_peer_id(const struct distributor *d);

#endif /* DIST_DISTRIBUTOR_H */
