/*
 * querier.c -- the querier module: configuration, flags, lifecycle.
 */
#include "qry_int.h"

#include <string.h>

#include "common/metrics.h"

#define SM_FLAG_STRUCT struct qry_config
static const struct sm_flag qry_flag_tab[] = {
	SM_FLAG_I64("querier.max-flamegraph-nodes-default",
	    SM_FLAG_INT, max_nodes_default,
	    "8192",
	    "Flamegraph nodes returned when a query does not set maxNodes."),
	SM_FLAG_I64("querier.max-flamegraph-nodes-max",
	    SM_FLAG_INT, max_nodes_max,
	    "1048576",
	    "Largest maxNodes a query may ask for (0 = no limit)."),
	SM_FLAG_I64("querier.timeout", SM_FLAG_DURATION, timeout_ms,
	    "1m",
	    "Deadline of each internal call a query makes to an ingester."),
	SM_FLAG_I64("querier.max-query-length",
	    SM_FLAG_DURATION, max_query_length_ms,
	    "0",
	    "Longest time range a query may cover (0 = no limit); longer "
	    "ranges get 400."),
	SM_FLAG_I64("querier.straggler-wait", SM_FLAG_DURATION, straggler_ms,
	    "250ms",
	    "Once the ingesters that answered can complete a query (the "
	    "others are within the replication factor's read-failure "
	    "budget), wait at most this long -- or as long as the query "
	    "has taken, if longer -- for the rest, then answer without "
	    "them (a frozen or overloaded replica). 0 = wait for every "
	    "ingester, up to -querier.timeout."),
	SM_FLAG_I64("querier.max-concurrent-queries-per-tenant",
	    SM_FLAG_INT, max_concurrent,
	    "0",
	    "Queries one tenant may have running at once in this querier; "
	    "more get 429 at once, other tenants are unaffected (0 = no "
	    "limit; per tenant: max_concurrent_queries)."),
	SM_FLAG_I64("querier.max-query-lookback",
	    SM_FLAG_DURATION, max_query_lookback_ms,
	    "0",
	    "How far back from now queries may read (0 = no limit); a "
	    "query's start is moved up to now minus this, a query that "
	    "ends before it answers empty (per tenant: "
	    "max_query_lookback)."),
	SM_FLAG_I64("querier.query-ingesters-within",
	    SM_FLAG_DURATION, ingesters_within_ms,
	    "13h",
	    "A query whose range ends longer ago than this asks only the "
	    "ingesters that hold data from before its end (each says how "
	    "old its oldest data is in its heartbeat) and the "
	    "store-gateways, not every ingester. Only in effect while "
	    "-validation.reject-older-than plus -ring.heartbeat-timeout "
	    "is within it (and not 0), so no upload can arrive that far "
	    "back (0 = always ask every ingester)."),
	SM_FLAG_SWITCH("querier.shuffle-sharding-ingesters-enabled", confine,
	    "true",
	    "A shuffle-sharded tenant's query (ingestion_tenant_shard_size) "
	    "asks only the ingesters that hold something of it, as their "
	    "heartbeats tell, not every ingester; the tenant's first "
	    "writes to an ingester are acknowledged up to 2 "
	    "-ring.heartbeat-period plus 1s later so no answer misses "
	    "them. In effect once shard sizes have not changed for 2 "
	    "-runtime-config.reload-period plus that hold."),
	SM_FLAG_STR("recording-rules.remote-write-url", rr_url, "",
	    "Evaluate the tenants' recording rules (settings.v1 "
	    "RecordingRulesService) and send their series to this Prometheus "
	    "remote-write endpoint (http://host:9090/api/v1/write); a new "
	    "rule is first backfilled over -recording-rules.backfill-period. "
	    "Empty: rules are stored but not evaluated. Give it to one "
	    "querier."),
	SM_FLAG_I64("recording-rules.evaluation-interval", SM_FLAG_DURATION,
	    rr_interval_ms, "1m",
	    "The step of every rule's series (one sample per step and group: "
	    "the sum of the step's values) and how often the rules are "
	    "evaluated."),
	SM_FLAG_I64("recording-rules.evaluation-delay", SM_FLAG_DURATION,
	    rr_delay_ms, "1m",
	    "A step is evaluated once it ended this long ago, so uploads "
	    "that arrive late still count; a step's sample is sent once."),
	SM_FLAG_I64("recording-rules.backfill-period", SM_FLAG_DURATION,
	    rr_backfill_ms, "720h",
	    "How far back a new rule's series is computed from stored "
	    "history (the tiers for long ranges) before it follows new data."),
	SM_FLAG_I64("recording-rules.remote-write-timeout", SM_FLAG_DURATION,
	    rr_timeout_ms, "30s",
	    "Deadline of each remote-write request; a failed one is retried "
	    "at the next evaluation from where the rule stood."),
};
#undef SM_FLAG_STRUCT

SM_FLAGS_ADD_FN(qry_flags_add, struct qry_config, qry_flag_tab)

void
qry_tenant_limits(struct querier *q, const char *tenant,
    struct sm_limits *out)
{
	struct sm_limits def;

	memset(&def, 0, sizeof(def));
	def.max_query_length_ms = q->cfg.max_query_length_ms;
	def.max_query_lookback_ms = q->cfg.max_query_lookback_ms;
	def.max_flamegraph_nodes_default = q->cfg.max_nodes_default;
	def.max_flamegraph_nodes_max = q->cfg.max_nodes_max;
	def.max_concurrent_queries = q->cfg.max_concurrent;
	def.ingestion_tenant_shard_size = q->cfg.shard_size;
	sm_overrides_get(q->cfg.overrides, tenant, &def, out);
}

int
qry_limit_range(struct querier *q, const char *tenant, int64_t *start,
    int64_t *end, bool *all_time, bool *empty, struct sm_err *err)
{
	struct sm_limits lim;

	*empty = false;
	qry_tenant_limits(q, tenant, &lim);
	if (lim.max_query_lookback_ms > 0) {
		int64_t now = sm_now_ms();
		int64_t min = now - lim.max_query_lookback_ms;

		if (all_time != NULL && *all_time) {
			/* All time is the lookback window. */
			*all_time = false;
			*start = min;
			*end = now;
			return (0);
		}
		if (*end < min) {
			*empty = true;
			return (0);
		}
		if (*start < min)
			*start = min;
	}
	if (all_time != NULL && *all_time)
		return (0);
	if (lim.max_query_length_ms > 0 && *end - *start >
	    lim.max_query_length_ms)
		return (sm_err_set(err, SM_EINVAL, "the query time range "
		    "exceeds the limit (max_query_length, actual: %llds, "
		    "limit: %llds)", (long long)(*end - *start) / 1000,
		    (long long)lim.max_query_length_ms / 1000));
	return (0);
}

/* --- the gate at every query route (gate.h) ---------------------------- */

/* One query route: the handler it guards. */
struct qry_route {
	struct querier *q;
	sm_connect_fn cfn;      /* one of the two */
	sm_http_fn hfn;
	void *arg;
	struct qry_route *next;
};

static struct qry_route *
route_new(struct querier *q, sm_connect_fn cfn, sm_http_fn hfn, void *arg)
{
	struct qry_route *rt;

	if ((rt = sm_calloc(1, sizeof(*rt))) == NULL)
		return (NULL);
	rt->q = q;
	rt->cfn = cfn;
	rt->hfn = hfn;
	rt->arg = arg;
	rt->next = q->routes;
	q->routes = rt;
	return (rt);
}

static struct sm_metric *m_refused;

static double
gate_inflight(void *arg)
{
	return ((double)qry_gate_total(&((struct querier *)arg)->gate));
}

/* Admit a query of the request's tenant; *tenant NULL if not counted. */
static int
route_enter(struct querier *q, struct sm_http_req *r, const char **tenant,
    struct sm_err *err)
{
	struct sm_limits lim;
	int rv;

	*tenant = NULL;
	/* A request without a valid tenant is refused by its handler. */
	if (sm_http_tenant(r, q->cfg.multitenancy, tenant, err) != 0) {
		sm_err_clear(err);
		*tenant = NULL;
		return (0);
	}
	qry_tenant_limits(q, *tenant, &lim);
	if ((rv = qry_gate_enter(&q->gate, *tenant,
	    lim.max_concurrent_queries, err)) != 0) {
		if (rv == SM_ELIMIT)
			sm_counter_inc(sm_metric_child(m_refused, *tenant));
		*tenant = NULL;
	}
	return (rv);
}

static int
route_connect(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct qry_route *rt = arg;
	const char *tenant;
	int rv;

	if ((rv = route_enter(rt->q, call->http, &tenant, err)) != 0)
		return (rv);
	rv = rt->cfn(rt->arg, call, req, resp, err);
	if (tenant != NULL)
		qry_gate_leave(&rt->q->gate, tenant);
	return (rv);
}

static void
route_http(struct sm_http_req *r, void *arg)
{
	struct qry_route *rt = arg;
	const char *tenant;
	struct sm_err err;

	sm_err_clear(&err);
	if (route_enter(rt->q, r, &tenant, &err) != 0) {
		int status;
		const char *code;

		sm_http_status_for(err.code, &status, &code);
		sm_http_reply_error(r, status, code, "%s", err.msg);
		return;
	}
	rt->hfn(r, rt->arg);
	if (tenant != NULL)
		qry_gate_leave(&rt->q->gate, tenant);
}

int
qry_route_connect(struct querier *q, const char *path,
    const ProtobufCMessageDescriptor *in, sm_connect_fn fn, void *arg,
    size_t body_max)
{
	struct qry_route *rt;

	if ((rt = route_new(q, fn, NULL, arg)) == NULL)
		return (SM_ENOMEM);
	return (sm_connect_route_as(q->http, SM_SCOPE_READ, path, in,
	    route_connect, rt, body_max));
}

int
qry_route_http(struct querier *q, const char *method, const char *path,
    sm_http_fn fn, void *arg, size_t body_max)
{
	struct qry_route *rt;

	if ((rt = route_new(q, NULL, fn, arg)) == NULL)
		return (SM_ENOMEM);
	return (sm_http_route_as(q->http, SM_SCOPE_READ, method, path,
	    route_http, rt, body_max));
}

int
qry_route_methods(struct querier *q, const struct qry_method *m, size_t n)
{
	char path[128];
	int rv;

	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/querier.v1.QuerierService/%s",
		    m[i].method);
		if ((rv = qry_route_connect(q, path, m[i].in, m[i].fn, q,
		    0)) != 0)
			return (rv);
	}
	return (0);
}

static void
routes_free(struct querier *q)
{
	while (q->routes != NULL) {
		struct qry_route *rt = q->routes;

		q->routes = rt->next;
		sm_free(rt);
	}
}

int
qry_create(const struct qry_config *cfg, struct sm_http *http,
    struct sm_ring *ring, struct querier **out, struct sm_err *err)
{
	struct querier *q;
	int rv;

	*out = NULL;
	if (cfg->timeout_ms <= 0 || cfg->max_nodes_default <= 0 ||
	    cfg->straggler_ms < 0)
		return (sm_err_set(err, SM_EINVAL, "querier: timeout and "
		    "default max nodes must be > 0, straggler wait >= 0"));
	if ((q = sm_calloc(1, sizeof(*q))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	q->cfg = *cfg;
	q->http = http;
	q->ring = ring;
	q->created_ns = sm_mono_ns();
	qry_gate_init(&q->gate);
	if (m_refused == NULL)
		m_refused = sm_metric_register(SM_METRIC_COUNTER,
		    "smolder_querier_queries_refused_total", "Queries refused "
		    "because their tenant already ran max_concurrent_queries.",
		    (const char *const[]){ "tenant", NULL }, NULL, 0);
	sm_metric_gauge_fn("smolder_querier_queries_inflight", "Queries "
	    "running in this querier (all tenants).", gate_inflight, q);
	if ((rv = qry_render_register(q)) != 0 ||
	    (rv = qry_labels_register(q)) != 0 ||
	    (rv = qry_connect_register(q)) != 0 ||
	    (rv = qry_settings_register(q)) != 0 ||
	    (rv = qry_rules_register(q)) != 0 ||
	    (rv = qry_webui_register(q)) != 0) {
		qry_destroy(q);         /* no rules thread yet: q->rules NULL */
		return (sm_err_set(err, rv, "querier: registering routes: %s",
		    sm_strerror(rv)));
	}
	if ((rv = qry_rules_start(q, &q->rules, err)) != 0) {
		qry_destroy(q);         /* qry_rules_start left q->rules NULL */
		return (rv);
	}
	*out = q;
	return (0);
}

void
qry_destroy(struct querier *q)
{
	if (q == NULL)
		return;
	qry_rules_stop(q->rules);
	sm_metric_gauge_fn_remove(q);
	routes_free(q);
	qry_gate_fini(&q->gate);
	sm_free(q);
}
