/*
 * overrides.h -- per-tenant limits: defaults from flags, overridden per
 * tenant by a runtime configuration file reloaded without a restart.
 *
 * The file is Pyroscope's (Cortex's) runtime config, -runtime-config.file,
 * YAML, with the limit names of Pyroscope's limits.yaml:
 *
 *   overrides:
 *     tenant-a:
 *       ingestion_rate_mb: 4
 *       ingestion_burst_size_mb: 2
 *
 * A tenant not listed, or a limit not set for a listed tenant, has the
 * default (the flag's value).  Limits supported (flag, default):
 *
 *   ingestion_rate_mb         -distributor.ingestion-rate-limit-mb, 0
 *                             MiB/s of request bodies a tenant may send
 *                             (token bucket refill rate,
 *                             distributor/ratelimit.h); 0 = no limit
 *   ingestion_burst_size_mb   -distributor.ingestion-burst-size-mb, 2
 *                             MiB the bucket holds (the largest upload
 *                             that can ever pass)
 *
 * and the validation limits, each overriding its -validation.* flag for
 * the tenant (integers >= 0, max_profile_size_bytes > 0; meanings as the
 * flags, docs/configuration.md):
 *
 *   max_label_name_length, max_label_value_length,
 *   max_label_names_per_series, max_profile_size_bytes,
 *   max_profile_stacktrace_samples, max_profile_stacktrace_sample_labels,
 *   max_profile_stacktrace_depth, max_profile_symbol_value_length
 *
 * and the query limits, overriding the -querier.* flags:
 *
 *   max_query_length              a Go duration ("24h"; 0 = no limit)
 *   max_query_lookback            a Go duration ("720h"; 0 = no limit):
 *                                 how far back from now a query may read
 *                                 (querier/qry_int.h qry_limit_range)
 *   max_flamegraph_nodes_default  integer > 0
 *   max_flamegraph_nodes_max      integer >= 0 (0 = no limit)
 *   max_concurrent_queries        integer >= 0 (0 = no limit; Smolder's,
 *                                 querier/gate.h)
 *
 * and the active-series limits, overriding the -ingester.* flags (read by
 * the distributor, which sends each ingester its local limit:
 * distributor/push.c; integers >= 0, 0 = no limit):
 *
 *   max_global_series_per_tenant  -ingester.max-global-series-per-tenant,
 *                                 0: series of the tenant across the
 *                                 cluster, enforced per ingester as
 *                                 global / healthy ingesters * RF
 *   max_local_series_per_tenant   -ingester.max-local-series-per-tenant,
 *                                 0: series of the tenant per ingester
 *
 * and the tenant's shard (read by the distributor, distributor/push.c):
 *
 *   ingestion_tenant_shard_size   -distributor.ingestion-tenant-shard-size,
 *                                 0: every ingester
 *
 * and the retention, overriding -compactor.blocks-retention-period (read
 * by the compactor each pass, compactor/compactor.h):
 *
 *   compactor_blocks_retention_period  a Go duration ("720h"; 0 = keep
 *                                 the tenant's data forever, whatever
 *                                 the flag says)
 *
 * Default rate 0, not Pyroscope's 4: Smolder counts request bytes as
 * received (ratelimit.h) and a bucket refuses any upload larger than its
 * burst, so Pyroscope's 4/2 would start refusing, on upgrade, every
 * upload over 2 MiB that Smolder accepts today (valid profiles up to
 * max_profile_size_bytes = 4 MiB, JFR recordings up to the 256 MiB body
 * limit).  The limit is opt-in: -distributor.ingestion-rate-limit-mb=4
 * gives Pyroscope's behaviour for every tenant.
 *
 * Default series limits 0, not Pyroscope's 5000 global: Smolder had no
 * series limit, and a head holds a tenant's series for up to
 * -ingester.block-duration (1h), so 5000 would start refusing, on
 * upgrade, the uploads of every tenant with more series than that, which
 * work today.  Opt in per tenant, or with the flags for all.
 *
 * A "MB" is 2^20 bytes, as in Pyroscope (bytesInMB = 1048576); the two
 * _mb values are decimal numbers >= 0 (fractions allowed: 0.5 is 512 KiB).
 *
 * Decisions where Pyroscope is silent or where we differ:
 *   - keys Smolder does not implement (other Pyroscope limits, other
 *     top-level sections such as multi_kv_config) are ignored and logged
 *     at load, so a Pyroscope runtime config can be used as is; Pyroscope
 *     itself parses strictly because it knows every key;
 *   - a known key with a value not valid for it (above), a tenant id that
 *     is not valid (tenant.h), a duplicate tenant, or YAML that does not
 *     parse makes the whole file invalid;
 *   - an empty file, or one without `overrides`, means no overrides.
 *
 * Reload (common/watch.h, as the keys file): a thread stats the file every
 * reload period (-runtime-config.reload-period, 10s as Pyroscope) and
 * reloads it when its inode, size or mtime changed and then stayed the same for one
 * more period (rename a new file over the old one to change it
 * atomically; a change takes effect within two periods).  The new table is
 * built aside and swapped in under a write lock: a lookup sees the whole
 * old table or the whole new one.  A file that does not parse (or cannot
 * be read) keeps the previous overrides, is logged with the reason
 * (file:line:column from libyaml) and counted in
 * smolder_runtime_config_reload_failures_total; it is tried again when it
 * changes once more.  The file must be valid at startup.  /ready is not
 * affected by a bad file.
 *
 * Defaults: the table holds only what the file sets; each consumer passes
 * its own defaults (its flags) to sm_overrides_get(), so the distributor
 * and the querier each keep their flags and one instance serves both.
 *
 * Ownership: main creates the one instance (-runtime-config.* flags) and
 * lends it to the distributor, the querier and the compactor
 * (dist_config.overrides, qry_config.overrides, cpt_config.overrides;
 * NULL = flags only), destroying it after them.
 * Locking: every function is thread-safe.
 */
#ifndef SM_OVERRIDES_H
#define SM_OVERRIDES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sm.h"

/* The limits of one tenant (names: the YAML keys). */
struct sm_limits {
	double ingestion_rate_mb;        /* MiB/s; 0 = no rate limit */
	double ingestion_burst_size_mb;  /* MiB */
	/* Validation (distributor/batch.h, struct dist_limits), integers. */
	int64_t max_label_name_length;
	int64_t max_label_value_length;
	int64_t max_label_names_per_series;
	int64_t max_profile_size_bytes;               /* > 0 */
	int64_t max_profile_stacktrace_samples;       /* 0 = no limit */
	int64_t max_profile_stacktrace_sample_labels; /* 0 = no limit */
	int64_t max_profile_stacktrace_depth;
	int64_t max_profile_symbol_value_length;
	/* Query (querier/querier.h, struct qry_config). */
	int64_t max_query_length_ms;                  /* 0 = no limit */
	int64_t max_query_lookback_ms;                /* 0 = no limit */
	int64_t max_flamegraph_nodes_default;         /* > 0 */
	int64_t max_flamegraph_nodes_max;             /* 0 = no limit */
	int64_t max_concurrent_queries;               /* 0 = no limit */
	/* Active series (distributor/push.c, ingester/db.h). */
	int64_t max_global_series_per_tenant;         /* 0 = no limit */
	int64_t max_local_series_per_tenant;          /* 0 = no limit */
	/* Shuffle sharding (distributor/push.c). */
	int64_t ingestion_tenant_shard_size;          /* 0 = every ingester */
	/* Retention (compactor/compactor.h). */
	int64_t compactor_blocks_retention_period_ms; /* 0 = keep forever */
};

struct sm_overrides;

/*
 * Create.  `path` NULL or "" means no file: every tenant has the
 * defaults.  With a file, it is loaded now
 * (an invalid file fails here) and a thread polls it every `reload_ms`
 * (> 0).  Returns 0 and *out, SM_EINVAL (bad file or arguments, reason in
 * err), SM_EIO (unreadable) or SM_ENOMEM.
 */
int sm_overrides_create(const char *path, int64_t reload_ms,
    struct sm_overrides **out, struct sm_err *err);

/* Stop the reload thread and free.  NULL is a no-op. */
void sm_overrides_destroy(struct sm_overrides *o);

/*
 * The limits of `tenant`: the caller's defaults `def` with the fields the
 * file sets for that tenant replaced, into *out (fields the caller does
 * not use are simply ignored).  `o` NULL: *out = *def.  Takes the table's
 * read lock; O(log tenants).
 */
void sm_overrides_get(struct sm_overrides *o, const char *tenant,
    const struct sm_limits *def, struct sm_limits *out);

/*
 * Re-read the file now if it changed, without waiting for it to settle.
 * Returns 0 (reloaded or unchanged) or the load error (old table kept).
 */
int sm_overrides_reload(struct sm_overrides *o, struct sm_err *err);

/*
 * A copy of the ids of the tenants the file lists (any limit set), in
 * sorted order, taken under the read lock: *ids (free with
 * sm_overrides_tenants_free; NULL when *n is 0).  `o` NULL: none.
 * 0 or SM_ENOMEM.
 */
int sm_overrides_tenants(struct sm_overrides *o, char ***ids, size_t *n);
void sm_overrides_tenants_free(char **ids, size_t n);

/*
 * When the table was last replaced by a reload (sm_mono_ns(); 0: never
 * since create; `o` NULL: 0).  Queriers and distributors time their
 * shuffle-sharding reads from it (ring.h, "Confined reads").  Lock-free.
 */
int64_t sm_overrides_changed_ns(struct sm_overrides *o);

/*
 * Showing limits (common/status.h): the defaults the -flags of `fs` give
 * every limit (each key's flag is in overrides.c's table), into *out;
 * one tenant's limits as JSON -- Pyroscope's /api/v1/tenant_limits
 * fields (ingestion_rate, ingestion_burst_size,
 * max_global_series_per_user) first, then every limit by its key above,
 * durations as Go writes them ("24h0m0s"); and the runtime config as
 * loaded, as YAML: every tenant the file lists with all its limits
 * (defaults `def` filled in), or with `diff` only those that differ
 * from `def`.  sm_overrides_write_yaml: 0 or SM_ENOMEM.
 */
struct sm_flags;
struct sm_buf;
void sm_limits_from_flags(const struct sm_flags *fs, struct sm_limits *out);
void sm_limits_write_json(const struct sm_limits *l, struct sm_buf *out);
int sm_overrides_write_yaml(struct sm_overrides *o,
    const struct sm_limits *def, bool diff, struct sm_buf *out);

/* Number of tenants with overrides (tests, log). */
size_t sm_overrides_ntenants(struct sm_overrides *o);

#endif /* SM_OVERRIDES_H */
