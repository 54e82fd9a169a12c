/*
 * querier.c -- the querier module: configuration, flags, lifecycle.
 */
#include "qry_int.h"

#include <string.h>

const struct sm_flag *
qry_flags(struct qry_config *cfg, size_t *n)
{
	static struct sm_flag f[5];

	f[0] = (struct sm_flag){ "querier.max-flamegraph-nodes-default",
		SM_FLAG_INT, &cfg->max_nodes_default, "8192",
		"Flamegraph nodes returned when a query does not set maxNodes." };
	f[1] = (struct sm_flag){ "querier.max-flamegraph-nodes-max",
		SM_FLAG_INT, &cfg->max_nodes_max, "1048576",
		"Largest maxNodes a query may ask for (0 = no limit)." };
	f[2] = (struct sm_flag){ "querier.timeout", SM_FLAG_DURATION,
		&cfg->timeout_ms, "1m",
		"Deadline of each internal call a query makes to an ingester." };
	f[3] = (struct sm_flag){ "querier.max-query-length",
		SM_FLAG_DURATION, &cfg->max_query_length_ms, "0",
		"Longest time range a query may cover (0 = no limit); longer "
		"ranges get 400." };
	f[4] = (struct sm_flag){ "querier.straggler-wait",
		SM_FLAG_DURATION, &cfg->straggler_ms, "250ms",
		"Once the ingesters that answered can complete a query (the "
		"others are within the replication factor's read-failure "
		"budget), wait at most this long -- or as long as the query "
		"has taken, if longer -- for the rest, then answer without "
		"them (a frozen or overloaded replica). 0 = wait for every "
		"ingester, up to -querier.timeout." };
	*n = SM_ARRAY_LEN(f);
	return (f);
}

void
qry_tenant_limits(struct querier *q, const char *tenant,
    struct sm_limits *out)
{
	struct sm_limits def;

	memset(&def, 0, sizeof(def));
	def.max_query_length_ms = q->cfg.max_query_length_ms;
	def.max_flamegraph_nodes_default = q->cfg.max_nodes_default;
	def.max_flamegraph_nodes_max = q->cfg.max_nodes_max;
	sm_overrides_get(q->cfg.overrides, tenant, &def, out);
}

int
qry_check_length(struct querier *q, const char *tenant, int64_t start,
    int64_t end, struct sm_err *err)
{
	struct sm_limits lim;

	qry_tenant_limits(q, tenant, &lim);
	if (lim.max_query_length_ms > 0 && end - start >
	    lim.max_query_length_ms)
		return (sm_err_set(err, SM_EINVAL, "the query time range "
		    "exceeds the limit (max_query_length, actual: %llds, "
		    "limit: %llds)", (long long)(end - start) / 1000,
		    (long long)lim.max_query_length_ms / 1000));
	return (0);
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
	if ((rv = qry_render_register(q)) != 0 ||
	    (rv = qry_labels_register(q)) != 0 ||
	    (rv = qry_connect_register(q)) != 0 ||
	    (rv = qry_settings_register(q)) != 0 ||
	    (rv = qry_webui_register(q)) != 0) {
		sm_free(q);
		return (sm_err_set(err, rv, "querier: registering routes: %s",
		    sm_strerror(rv)));
	}
	*out = q;
	return (0);
}

void
qry_destroy(struct querier *q)
{
	sm_free(q);
}
