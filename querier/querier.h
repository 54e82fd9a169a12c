/*
 * querier.h -- the querier component (docs/architecture.md §1): the HTTP query API.
 *
 * Routes (docs/wire-formats.md §3), read-scoped unless said, each a file
 * of this directory:
 *   GET /render, /pyroscope/render: the flamegraph and its timeline
 *     (format json, the flamebearer profile; format collapsed, folded
 *     text); GET /render-diff, /pyroscope/render-diff: two of them as a
 *     diff; GET /api/top-changes: the functions whose share rose most
 *     between two of them (changes.c); GET /api/function-timeline: one
 *     function's series (render.c);
 *   GET /labels, /label-values, /pyroscope/label-values, /api/apps: label
 *     names and values, the application list (labels.c);
 *   POST querier.v1.QuerierService over Connect: ProfileTypes,
 *     LabelNames, LabelValues, Series, SelectMergeStacktraces,
 *     SelectSeries, Diff, SelectMergeProfile (connect_api.c),
 *     SelectMergeSpanProfile (span_api.c), SelectHeatmap
 *     (heatmap_api.c), GetProfileStats and AnalyzeQuery (stats_api.c);
 *   POST settings.v1.RecordingRulesService ListRecordingRules and
 *     GetRecordingRule, and (admin-scoped) UpsertRecordingRule and
 *     DeleteRecordingRule (rules.c), whose evaluator thread -- with
 *     -recording-rules.remote-write-url -- sends every rule's series to
 *     Prometheus;
 *   POST settings.v1.SettingsService Get, Set and Delete,
 *     capabilities.v1.FeatureFlagsService GetFeatureFlags and
 *     version.v1.Version Version (settings.c); vcs.v1.VCSService
 *     GithubApp, GithubLogin, GithubRefresh, GetFile, GetCommit and
 *     GetCommits answer 501 unimplemented (settings.c: no source links);
 *   /ui/app.css, /ui/app.js, /ui/favicon.svg: the web UI's files,
 *     public (webui.c).
 *
 * A query fans out to the healthy ingesters of the ring (only those
 * holding something of a shuffle-sharded tenant) over the internal
 * RPC (querier/fanout.c) -- and, with cfg.gw_ring, to the sources the
 * tenant's store-gateways serve from the bucket (ingester/gateway.h) --
 * with replicas de-duplicated per (series, bucket) by a plan
 * (querier/plan.c), merges the partial trees into one, truncates
 * once to maxNodes and renders.  The timeline comes from a second fan-out
 * of per-step totals under the same plan.
 *
 * Limits: max_query_length, max_query_lookback and
 * max_flamegraph_nodes_default/_max are the -querier.* flags, replaced per
 * tenant by the runtime overrides (common/overrides.h) when cfg.overrides
 * is set (qry_tenant_limits); max_query_lookback and max_query_length are
 * applied to every query API's range by one rule (qry_limit_range,
 * qry_int.h);
 * max_concurrent_queries bounds each tenant's queries in flight at every
 * query route (gate.h).
 *
 * Ownership: the querier borrows the HTTP server, the ring and the
 * overrides; all must outlive it.  Locking: handlers run concurrently on HTTP pool
 * threads and share nothing mutable.
 */
#ifndef QRY_QUERIER_H
#define QRY_QUERIER_H

#include <stdbool.h>

#include "common/flags.h"
#include "common/tiers.h"
#include "common/http.h"
#include "common/overrides.h"
#include "common/ring.h"

struct qry_config {
	int64_t max_nodes_default;    /* -querier.max-flamegraph-nodes-default */
	int64_t max_nodes_max;        /* -querier.max-flamegraph-nodes-max */
	int64_t timeout_ms;           /* -querier.timeout */
	int64_t max_query_length_ms;  /* -querier.max-query-length, 0 = off */
	int64_t max_query_lookback_ms; /* -querier.max-query-lookback, 0 off */
	int64_t straggler_ms;         /* -querier.straggler-wait, 0 = off */
	int64_t ingesters_within_ms;  /* -querier.query-ingesters-within,
	                               * 0 = ask every ingester always */
	int64_t reject_older_ms;      /* -validation.reject-older-than (main):
	                               * the skip above is safe only when
	                               * no upload can land that far back */
	int64_t heartbeat_timeout_ms; /* -ring.heartbeat-timeout (main): how
	                               * old a data_min report may be */
	int64_t shard_size;           /* -distributor.ingestion-tenant-shard-
	                               * size (main; per tenant: overrides):
	                               * whose failures a tenant's query
	                               * counts (querier/fanout.c) */
	int64_t max_concurrent;       /* -querier.max-concurrent-queries-
	                               * per-tenant, 0 = off (gate.h) */
	bool confine;                 /* -querier.shuffle-sharding-
	                               * ingesters-enabled */
	char *rr_url;                 /* -recording-rules.* (rules.h) */
	int64_t rr_interval_ms;
	int64_t rr_delay_ms;
	int64_t rr_backfill_ms;
	int64_t rr_timeout_ms;
	int64_t confine_settle_ms;    /* main: sm_ring_confine_settle_ms */
	bool multitenancy;            /* -auth.multitenancy-enabled (main) */
	struct sm_overrides *overrides; /* borrowed from main; NULL = flags */
	struct sm_tiers tiers;        /* -compactor.downsample-tiers (main) */
	struct sm_ring *gw_ring;      /* the store-gateways (main; borrowed,
				       * NULL: none) */
	/* NULL in the binary.  The in-process cluster tier's seam
	 * (tests/cluster/sm_cluster.h): called on the query's thread after
	 * each plan is made and before its data round, so a test can land
	 * a write between the two. */
	void (*after_plan)(void *arg);
	void *after_plan_arg;
};

int qry_flags_add(struct sm_flags *fs, struct qry_config *cfg,
    struct sm_err *err);

struct querier;

int qry_create(const struct qry_config *cfg, struct sm_http *http,
    struct sm_ring *ring, struct querier **out, struct sm_err *err);
void qry_destroy(struct querier *q);

#endif /* QRY_QUERIER_H */
