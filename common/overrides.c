/*
 * overrides.c -- per-tenant limits from -runtime-config.file (overrides.h).
 *
 * The file is read whole through common/yaml.h (the whole file is a few
 * KiB at most) and turned into a sorted array of {tenant, limits}; lookups
 * bsearch it under a read lock.  The reload thread is the keys file's
 * (auth.c) with the names changed.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "buf.h"
#include "flags.h"
#include "log.h"
#include "metrics.h"
#include "overrides.h"
#include "tenant.h"
#include "watch.h"
#include "yaml.h"

struct ov_tenant {
	char t_id[SM_TENANT_MAX_LEN + 1];
	struct sm_limits t_lim;
	uint32_t t_set;               /* bit i: ov_keys[i] is set */
};

/* One loaded file; immutable once built. */
struct ov_tab {
	struct ov_tenant *t_v;        /* sorted by t_id */
	size_t t_n;
};

struct sm_overrides {
	char *o_path;                 /* NULL: no file */

	pthread_rwlock_t o_lock;      /* protects o_tab */
	struct ov_tab *o_tab;

	struct sm_watch *o_watch;     /* reloads o_path (watch.h) */
	_Atomic int64_t o_changed_ns; /* sm_overrides_changed_ns */
};

static struct sm_metric *m_fail, *m_ok;

static const struct sm_metric_def ov_metric_defs[] = {
	{ &m_ok, SM_METRIC_COUNTER, "smolder_runtime_config_reloads_total",
	    "Runtime config (-runtime-config.file) loads that succeeded.",
	    NULL, NULL, 0 },
	{ &m_fail, SM_METRIC_COUNTER,
	    "smolder_runtime_config_reload_failures_total",
	    "Runtime config loads that failed (the previous overrides were "
	    "kept).", NULL, NULL, 0 },
};

static struct sm_metric_set ov_metric_set = SM_METRIC_SET(ov_metric_defs);

static void
ov_tab_free(struct ov_tab *t)
{
	if (t == NULL)
		return;
	sm_free(t->t_v);
	sm_free(t);
}

static int
ov_cmp(const void *a, const void *b)
{
	return (strcmp(((const struct ov_tenant *)a)->t_id,
	    ((const struct ov_tenant *)b)->t_id));
}

/* A scalar with no text, or "null": YAML's "nothing here". */
static bool
ov_empty(const struct sm_yaml_node *n)
{
	const char *s = sm_yaml_scalar(n);

	return (s != NULL && (s[0] == '\0' || strcmp(s, "null") == 0));
}

/* The keys known, where they go, and how they parse. */
/* The keys known, where they go, how they parse, and the flag that
 * gives their default (sm_limits_from_flags). */
static const struct ov_key {
	const char *k_name;
	size_t k_off;
	enum { OV_MB, OV_INT, OV_INT_POS, OV_DURATION } k_kind;
	const char *k_flag;
} ov_keys[] = {
#define OV_K(name, kind, flag) \
	{ #name, offsetof(struct sm_limits, name), kind, flag }
	OV_K(ingestion_rate_mb, OV_MB, "distributor.ingestion-rate-limit-mb"),
	OV_K(ingestion_burst_size_mb, OV_MB,
	    "distributor.ingestion-burst-size-mb"),
	OV_K(max_label_name_length, OV_INT, "validation.max-length-label-name"),
	OV_K(max_label_value_length, OV_INT,
	    "validation.max-length-label-value"),
	OV_K(max_label_names_per_series, OV_INT,
	    "validation.max-label-names-per-series"),
	OV_K(max_profile_size_bytes, OV_INT_POS,
	    "validation.max-profile-size-bytes"),
	OV_K(max_profile_stacktrace_samples, OV_INT,
	    "validation.max-profile-stacktrace-samples"),
	OV_K(max_profile_stacktrace_sample_labels, OV_INT,
	    "validation.max-profile-stacktrace-sample-labels"),
	OV_K(max_profile_stacktrace_depth, OV_INT,
	    "validation.max-profile-stacktrace-depth"),
	OV_K(max_profile_symbol_value_length, OV_INT,
	    "validation.max-profile-symbol-value-length"),
	{ "max_query_length", offsetof(struct sm_limits, max_query_length_ms),
	    OV_DURATION, "querier.max-query-length" },
	{ "max_query_lookback", offsetof(struct sm_limits,
	    max_query_lookback_ms), OV_DURATION, "querier.max-query-lookback" },
	{ "compactor_blocks_retention_period", offsetof(struct sm_limits,
	    compactor_blocks_retention_period_ms), OV_DURATION,
	    "compactor.blocks-retention-period" },
	OV_K(max_flamegraph_nodes_default, OV_INT_POS,
	    "querier.max-flamegraph-nodes-default"),
	OV_K(max_flamegraph_nodes_max, OV_INT,
	    "querier.max-flamegraph-nodes-max"),
	OV_K(max_concurrent_queries, OV_INT,
	    "querier.max-concurrent-queries-per-tenant"),
	OV_K(max_global_series_per_tenant, OV_INT,
	    "ingester.max-global-series-per-tenant"),
	OV_K(max_local_series_per_tenant, OV_INT,
	    "ingester.max-local-series-per-tenant"),
	OV_K(ingestion_tenant_shard_size, OV_INT,
	    "distributor.ingestion-tenant-shard-size"),
#undef OV_K
};

/* Set one limit from `key: value`; unknown keys are logged, not fatal. */
static int
ov_set(const char *path, const char *tenant, const struct sm_yaml_node *k,
    const struct sm_yaml_node *v, struct sm_limits *l, uint32_t *set,
    struct sm_err *err)
{
	const char *key = sm_yaml_scalar(k), *s = sm_yaml_scalar(v);
	const struct ov_key *d = NULL;
	char *end = NULL;
	long long i;
	double x;

	if (key == NULL)
		return (sm_err_set(err, SM_EINVAL, "%s:%zu: tenant %s: a "
		    "limit name must be a string", path, (size_t)sm_yaml_line(k),
		    tenant));
	for (size_t j = 0; j < SM_ARRAY_LEN(ov_keys); j++)
		if (strcmp(key, ov_keys[j].k_name) == 0) {
			d = &ov_keys[j];
			*set |= 1u << j;
		}
	if (d == NULL) {
		sm_warn("overrides", "ignoring a limit Smolder does not "
		    "implement\tpath=%s tenant=%s limit=%s", path, tenant, key);
		return (0);
	}
	errno = 0;
	if (d->k_kind == OV_DURATION) {
		int64_t ms;

		/* Go durations ("24h", "30m"); 0 = no limit. */
		if (s == NULL || (strcmp(s, "0") != 0 &&
		    sm_parse_duration_ms(s, &ms) != 0) ||
		    (strcmp(s, "0") != 0 && ms < 0))
			return (sm_err_set(err, SM_EINVAL, "%s:%zu: tenant %s: "
			    "%s must be a duration such as 24h (0 = no limit)",
			    path, (size_t)sm_yaml_line(v), tenant, key));
		*(int64_t *)(void *)((char *)l + d->k_off) =
		    strcmp(s, "0") == 0 ? 0 : ms;
		return (0);
	}
	if (d->k_kind == OV_MB) {
		x = s != NULL ? strtod(s, &end) : NAN;
		if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 ||
		    !isfinite(x) || x < 0)
			return (sm_err_set(err, SM_EINVAL, "%s:%zu: tenant %s: "
			    "%s must be a number >= 0", path,
			    (size_t)sm_yaml_line(v), tenant, key));
		*(double *)(void *)((char *)l + d->k_off) = x;
		return (0);
	}
	i = s != NULL ? strtoll(s, &end, 10) : -1;
	if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || i < 0 ||
	    (d->k_kind == OV_INT_POS && i == 0) || i > UINT32_MAX)
		return (sm_err_set(err, SM_EINVAL, "%s:%zu: tenant %s: %s must "
		    "be an integer %s", path, (size_t)sm_yaml_line(v), tenant,
		    key, d->k_kind == OV_INT_POS ? "> 0" : ">= 0"));
	*(int64_t *)(void *)((char *)l + d->k_off) = i;
	return (0);
}

/* The document's root -> a new table. */
static int
ov_build(const char *path, const struct sm_yaml *y, struct ov_tab **out,
    struct sm_err *err)
{
	const struct sm_yaml_node *root, *ovs = NULL;
	struct ov_tab *t;
	int rv;

	*out = NULL;
	if ((t = sm_calloc(1, sizeof(*t))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "overrides: out of memory"));
	root = sm_yaml_root(y);
	if (ov_empty(root))
		root = NULL;    /* an empty document: no overrides */
	if (root != NULL && !sm_yaml_is_map(root)) {
		rv = sm_err_set(err, SM_EINVAL, "%s: the runtime config must "
		    "be a mapping", path);
		goto fail;
	}
	for (size_t i = 0; i < sm_yaml_len(root); i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(y, root, i));

		if (k != NULL && strcmp(k, "overrides") == 0)
			ovs = sm_yaml_value(y, root, i);
		else
			sm_warn("overrides", "ignoring a section Smolder does "
			    "not implement\tpath=%s section=%s", path,
			    k != NULL ? k : "?");
	}
	if (ov_empty(ovs))
		ovs = NULL;     /* `overrides:` with nothing under it */
	if (ovs == NULL)
		goto done;
	if (!sm_yaml_is_map(ovs)) {
		rv = sm_err_set(err, SM_EINVAL, "%s:%d: overrides must be a "
		    "mapping of tenant ids", path, sm_yaml_line(ovs));
		goto fail;
	}
	t->t_n = sm_yaml_len(ovs);
	if (t->t_n > 0 && (t->t_v = sm_calloc(t->t_n,
	    sizeof(*t->t_v))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "overrides: out of memory");
		goto fail;
	}
	for (size_t i = 0; i < t->t_n; i++) {
		const struct sm_yaml_node *kn = sm_yaml_key(y, ovs, i);
		const struct sm_yaml_node *vn = sm_yaml_value(y, ovs, i);
		struct ov_tenant *e = &t->t_v[i];
		const char *id;

		if ((id = sm_yaml_scalar(kn)) == NULL) {
			rv = sm_err_set(err, SM_EINVAL, "%s:%d: a tenant id "
			    "must be a string", path, sm_yaml_line(kn));
			goto fail;
		}
		if ((rv = sm_tenant_validate(id, err)) != 0) {
			sm_err_prefix(err, "%s:%d", path, sm_yaml_line(kn));
			goto fail;
		}
		snprintf(e->t_id, sizeof(e->t_id), "%s", id);
		if (sm_yaml_scalar(vn) != NULL && sm_yaml_scalar(vn)[0] ==
		    '\0')
			continue;       /* `tenant:` alone: the defaults */
		if (!sm_yaml_is_map(vn)) {
			rv = sm_err_set(err, SM_EINVAL, "%s:%d: tenant %s: "
			    "limits must be a mapping", path, sm_yaml_line(vn),
			    id);
			goto fail;
		}
		for (size_t q = 0; q < sm_yaml_len(vn); q++)
			if ((rv = ov_set(path, id, sm_yaml_key(y, vn, q),
			    sm_yaml_value(y, vn, q), &e->t_lim, &e->t_set,
			    err)) != 0)
				goto fail;
	}
	if (t->t_n > 1)
		qsort(t->t_v, t->t_n, sizeof(*t->t_v), ov_cmp);
	for (size_t i = 1; i < t->t_n; i++)
		if (strcmp(t->t_v[i - 1].t_id, t->t_v[i].t_id) == 0) {
			rv = sm_err_set(err, SM_EINVAL, "%s: tenant %s is "
			    "listed twice", path, t->t_v[i].t_id);
			goto fail;
		}
done:
	*out = t;
	return (0);
fail:
	ov_tab_free(t);
	return (rv);
}

/* Read and parse the whole file into a new table. */
static int
ov_load(const char *path, struct ov_tab **out, struct sm_err *err)
{
	struct sm_yaml *y;
	int rv;

	*out = NULL;
	if ((rv = sm_yaml_load_file(path, &y, err)) != 0) {
		if (rv == SM_EIO)
			sm_err_prefix(err, "runtime config");
		return (rv);
	}
	rv = ov_build(path, y, out, err);
	sm_yaml_free(y);
	return (rv);
}

/* The watch's load function: read the file, swap the table in. */
static int
ov_load_cb(void *arg, const char *path, struct sm_err *err)
{
	struct sm_overrides *o = arg;
	struct ov_tab *t, *old;
	int rv;

	if ((rv = ov_load(path, &t, err)) != 0)
		return (rv);
	pthread_rwlock_wrlock(&o->o_lock);
	old = o->o_tab;
	o->o_tab = t;
	if (old != NULL)
		atomic_store(&o->o_changed_ns, sm_mono_ns());
	pthread_rwlock_unlock(&o->o_lock);
	ov_tab_free(old);
	sm_info("overrides", "runtime config loaded\tpath=%s tenants=%zu",
	    path, t->t_n);
	return (0);
}

/* The watch's result function: every attempt, for the metrics. */
static void
ov_result_cb(void *arg, int rv)
{
	(void)arg;
	sm_counter_inc(sm_metric_child0(rv == 0 ? m_ok : m_fail));
}

int
sm_overrides_reload(struct sm_overrides *o, struct sm_err *err)
{
	if (o->o_watch == NULL)
		return (0);
	return (sm_watch_check(o->o_watch, err));
}

int
sm_overrides_create(const char *path, int64_t reload_ms,
    struct sm_overrides **out, struct sm_err *err)
{
	struct sm_overrides *o;
	struct sm_watch_conf wc = {
		.component = "overrides",
		.what = "runtime config",
		.keeping = "keeping the previous overrides",
		.load = ov_load_cb,
		.result = ov_result_cb,
	};
	int rv;

	*out = NULL;
	sm_metrics_register_once(&ov_metric_set);
	if (path != NULL && path[0] == '\0')
		path = NULL;
	if (path != NULL && reload_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "-runtime-config.reload-"
		    "period must be > 0"));
	if ((o = sm_calloc(1, sizeof(*o))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "overrides: out of memory"));
	pthread_rwlock_init(&o->o_lock, NULL);
	if (path == NULL) {
		*out = o;
		return (0);
	}
	if ((o->o_path = sm_strdup(path)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "overrides: out of memory");
		goto fail;
	}
	wc.path = path;
	wc.period_ms = reload_ms;
	wc.arg = o;
	if ((rv = sm_watch_create(&wc, &o->o_watch, err)) != 0)
		goto fail;
	*out = o;
	return (0);
fail:
	sm_overrides_destroy(o);
	return (rv);
}

void
sm_overrides_destroy(struct sm_overrides *o)
{
	if (o == NULL)
		return;
	sm_watch_destroy(o->o_watch);
	ov_tab_free(o->o_tab);
	pthread_rwlock_destroy(&o->o_lock);
	sm_free(o->o_path);
	sm_free(o);
}

void
sm_overrides_get(struct sm_overrides *o, const char *tenant,
    const struct sm_limits *def, struct sm_limits *out)
{
	const struct ov_tenant *e;
	struct ov_tenant key;

	*out = *def;
	if (o == NULL || tenant == NULL)
		return;
	snprintf(key.t_id, sizeof(key.t_id), "%s", tenant);
	pthread_rwlock_rdlock(&o->o_lock);
	if (o->o_tab != NULL && o->o_tab->t_n > 0 &&
	    (e = bsearch(&key, o->o_tab->t_v, o->o_tab->t_n, sizeof(key),
	    ov_cmp)) != NULL) {
		for (size_t j = 0; j < SM_ARRAY_LEN(ov_keys); j++) {
			const struct ov_key *d = &ov_keys[j];

			if ((e->t_set & (1u << j)) == 0)
				continue;
			if (d->k_kind == OV_MB)
				*(double *)(void *)((char *)out + d->k_off) =
				    *(const double *)(const void *)(
				    (const char *)&e->t_lim + d->k_off);
			else
				*(int64_t *)(void *)((char *)out + d->k_off) =
				    *(const int64_t *)(const void *)(
				    (const char *)&e->t_lim + d->k_off);
		}
	}
	pthread_rwlock_unlock(&o->o_lock);
}

int
sm_overrides_tenants(struct sm_overrides *o, char ***ids, size_t *n)
{
	char **v = NULL;
	size_t k = 0;
	int rv = 0;

	*ids = NULL;
	*n = 0;
	if (o == NULL)
		return (0);
	pthread_rwlock_rdlock(&o->o_lock);
	if (o->o_tab != NULL && o->o_tab->t_n > 0) {
		if ((v = sm_calloc(o->o_tab->t_n, sizeof(*v))) == NULL) {
			rv = SM_ENOMEM;
			goto out;
		}
		for (; k < o->o_tab->t_n; k++)
			if ((v[k] = sm_strdup(o->o_tab->t_v[k].t_id)) ==
			    NULL) {
				rv = SM_ENOMEM;
				break;
			}
	}
out:
	pthread_rwlock_unlock(&o->o_lock);
	if (rv != 0) {
		sm_overrides_tenants_free(v, k);
		return (rv);
	}
	*ids = v;
	*n = k;
	return (0);
}

void
sm_overrides_tenants_free(char **ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sm_free(ids[i]);
	sm_free(ids);
}

int64_t
sm_overrides_changed_ns(struct sm_overrides *o)
{
	return (o == NULL ? 0 : atomic_load(&o->o_changed_ns));
}

size_t
sm_overrides_ntenants(struct sm_overrides *o)
{
	size_t n;

	pthread_rwlock_rdlock(&o->o_lock);
	n = o->o_tab != NULL ? o->o_tab->t_n : 0;
	pthread_rwlock_unlock(&o->o_lock);
	return (n);
}

/* --- showing limits ------------------------------------------------------ */

void
sm_limits_from_flags(const struct sm_flags *fs, struct sm_limits *out)
{
	memset(out, 0, sizeof(*out));
	for (size_t j = 0; j < SM_ARRAY_LEN(ov_keys); j++) {
		const struct ov_key *d = &ov_keys[j];
		const struct sm_flag_ent *e = sm_flags_find(fs, d->k_flag);
		char *p = (char *)out + d->k_off;

		if (e == NULL)
			continue;
		if (d->k_kind == OV_MB) {
			const char *v = *(char *const *)e->ptr;

			*(double *)(void *)p = v != NULL ? strtod(v, NULL) : 0;
		} else if (e->f->type != SM_FLAG_STRING &&
		    e->f->type != SM_FLAG_BOOL) {
			*(int64_t *)(void *)p = *(const int64_t *)e->ptr;
		}
	}
}

/* One limit's value as text: MiB as %g, durations as Go writes them. */
static void
ov_value_text(const struct ov_key *d, const struct sm_limits *l, char *buf,
    size_t n)
{
	const char *p = (const char *)l + d->k_off;

	if (d->k_kind == OV_MB)
		(void)snprintf(buf, n, "%.17g", *(const double *)(const void *)p);
	else if (d->k_kind == OV_DURATION)
		(void)sm_format_duration_ms(*(const int64_t *)(const void *)p,
		    buf, n);
	else
		(void)snprintf(buf, n, "%lld",
		    (long long)*(const int64_t *)(const void *)p);
}

void
sm_limits_write_json(const struct sm_limits *l, struct sm_buf *out)
{
	char v[64];

	/* Pyroscope's three first, as its /api/v1/tenant_limits names
	 * them; then every limit under its runtime-config key. */
	(void)snprintf(v, sizeof(v), "%.17g", l->ingestion_rate_mb);
	sm_buf_printf(out, "{\"ingestion_rate\":%s,\"ingestion_burst_size\":"
	    "%lld,\"max_global_series_per_user\":%lld", v,
	    (long long)l->ingestion_burst_size_mb,
	    (long long)l->max_global_series_per_tenant);
	for (size_t j = 0; j < SM_ARRAY_LEN(ov_keys); j++) {
		const struct ov_key *d = &ov_keys[j];

		ov_value_text(d, l, v, sizeof(v));
		if (d->k_kind == OV_DURATION)
			sm_buf_printf(out, ",\"%s\":\"%s\"", d->k_name, v);
		else
			sm_buf_printf(out, ",\"%s\":%s", d->k_name, v);
	}
	sm_buf_puts(out, "}\n");
}

static bool
ov_differs(const struct ov_key *d, const struct sm_limits *a,
    const struct sm_limits *b)
{
	const char *x = (const char *)a + d->k_off, *y = (const char *)b +
	    d->k_off;

	if (d->k_kind == OV_MB)
		return (*(const double *)(const void *)x !=
		    *(const double *)(const void *)y);
	return (*(const int64_t *)(const void *)x !=
	    *(const int64_t *)(const void *)y);
}

int
sm_overrides_write_yaml(struct sm_overrides *o, const struct sm_limits *def,
    bool diff, struct sm_buf *out)
{
	char **ids = NULL;
	size_t n = 0;
	int rv;

	if ((rv = sm_overrides_tenants(o, &ids, &n)) != 0)
		return (rv);
	sm_buf_puts(out, n == 0 ? "overrides: {}\n" : "overrides:\n");
	for (size_t i = 0; i < n; i++) {
		struct sm_limits l;
		bool any = false;

		sm_overrides_get(o, ids[i], def, &l);
		/* Tenant ids may hold YAML's indicators (tenant.h allows
		 * !*'()): a JSON string is a YAML double-quoted key. */
		sm_buf_puts(out, "  ");
		sm_buf_json_str(out, ids[i], strlen(ids[i]));
		sm_buf_puts(out, ":");
		for (size_t j = 0; j < SM_ARRAY_LEN(ov_keys); j++) {
			const struct ov_key *d = &ov_keys[j];
			char v[64];

			if (diff && !ov_differs(d, &l, def))
				continue;
			ov_value_text(d, &l, v, sizeof(v));
			sm_buf_printf(out, "\n    %s: %s", d->k_name, v);
			any = true;
		}
		sm_buf_puts(out, any ? "\n" : " {}\n");
	}
	sm_overrides_tenants_free(ids, n);
	return (0);
}
