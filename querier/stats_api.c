/*
 * stats_api.c -- querier.v1.QuerierService GetProfileStats and AnalyzeQuery
 * (Pyroscope's shapes, docs/wire-formats.md §4), in the proto and JSON codecs; both are
 * answered from the ingesters' indexes (smolder.v1.Analyze, ingester/db.h
 * ing_db_analyze), never from profile data.
 *
 * GetProfileStats (Drilldown asks it at start-up to decide whether to show
 * its onboarding page): data_ingested is true when the tenant has any
 * series above the retention floor on any ingester; oldest/newest are the
 * first and the last bucket start (unix ms) holding a profile.  Decision:
 * the times are exact to the bucket width (-ingester.bucket-duration, 10 s
 * by default), which is the finest time the index keeps; a profile at t
 * is reported as the start of its bucket, so oldest <= the first profile's
 * time < oldest + width, and the same for newest.  With no data both
 * times are 0 (Pyroscope leaves them unset).
 *
 * AnalyzeQuery(start, end, query): `query` takes any /render query form
 * (a profile-type id with a selector, FlameQL, a bare selector); empty is
 * invalid_argument, as a query that selects nothing to analyze.  Two
 * query scopes, one per kind of storage an ingester reads:
 *   "ingester heads"   in-memory heads; block_count = heads that hold a
 *                      matched series; profile_bytes = the memory of the
 *                      matched buckets' (node, value) pairs;
 *   "ingester blocks"  on-disk blocks; block_count = blocks that hold a
 *                      matched series; profile_bytes = those blocks'
 *                      stored bytes (all parts: a query reads their index,
 *                      tree and the matched series' data).
 * component_count is the number of ingesters that answered.  block_count
 * and profile_bytes add up over ingesters (each replica's blocks are
 * distinct storage the query touches); series_count, profile_count and
 * sample_count ((node, value) pairs) count replicated data once: per
 * series fingerprint the largest count among the ingesters (replicas of a
 * series hold the same profiles; a lagging one holds fewer).  index_bytes
 * and symbol_bytes are 0: the index does not keep the split of a block's
 * bytes by part, and we do not report guesses.  query_impact:
 * total_bytes_in_time_range = the two scopes' profile_bytes,
 * total_queried_series = distinct series across both scopes,
 * deduplication_needed = more than one ingester answered and the ring
 * replicates (RF > 1).  The range limits apply (qry_int.h
 * qry_limit_range): a range before max_query_lookback asks nobody and
 * answers both scopes with zeros (component_count 0); GetProfileStats has
 * no range and is not limited.
 */
#include "qry_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/connect.h"
#include "common/auth.h"
#include "common/selector.h"
#include "common/tenant.h"

#include "querier/v1/querier.pb-c.h"

/* Fan an Analyze request out to every healthy ingester (f is open after). */
static int
analyze_fan(struct querier *q, struct qry_fan *f, Smolder__V1__Select *sel,
    bool all_time, struct sm_err *err)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__AnalyzeRequest ar = SMOLDER__V1__ANALYZE_REQUEST__INIT;
	int rv;

	ar.select = sel;
	ar.all_time = all_time;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_ANALYZE;
	req.analyze = &ar;
	if ((rv = qry_fanout_same(q, f, &req, "analyze", err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < f->n; i++) {
		if (f->calls[i].rv == 0 && f->calls[i].resp->result_case !=
		    SMOLDER__V1__RESPONSE__RESULT_ANALYZE)
			return (sm_err_set(err, SM_EPROTO, "ingester answered "
			    "without an analyze result"));
	}
	return (0);
}

/* Target i's answer to analyze_fan, or NULL when its call failed. */
static const Smolder__V1__AnalyzeResponse *
fan_analyze(const struct qry_fan *f, uint32_t i)
{
	return (f->calls[i].rv == 0 ? f->calls[i].resp->analyze : NULL);
}

/* --- GetProfileStats ------------------------------------------------------ */

static int
m_get_profile_stats(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	Querier__V1__GetProfileStatsResponse *out;
	Smolder__V1__Select sel = SMOLDER__V1__SELECT__INIT;
	struct qry_fan f;
	const char *tenant;
	int rv;

	(void)req;
	qry_fan_init(&f);
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0)
		goto out;
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	querier__v1__get_profile_stats_response__init(out);
	sel.tenant = (char *)tenant;
	if ((rv = analyze_fan(q, &f, &sel, true, err)) != 0)
		goto out;
	for (uint32_t i = 0; i < f.n; i++) {
		const Smolder__V1__AnalyzeResponse *a = fan_analyze(&f, i);

		if (a == NULL)
			continue;
		if (!a->any)
			continue;
		if (!out->data_ingested || a->min_t < out->oldest_profile_time)
			out->oldest_profile_time = a->min_t;
		if (!out->data_ingested || a->max_t > out->newest_profile_time)
			out->newest_profile_time = a->max_t;
		out->data_ingested = true;
	}
	*resp = &out->base;
	rv = 0;
out:
	qry_fan_close(&f, true);
	return (rv);
}

/* --- AnalyzeQuery --------------------------------------------------------- */

struct an_ent {
	uint64_t fp, profiles, samples;
};

static int
an_ent_cmp(const void *a, const void *b)
{
	const struct an_ent *x = a, *y = b;

	return (SM_CMP(x->fp, y->fp));
}

/*
 * Count replicated series once: sorted by fp, per fp the entry with the
 * most profiles.  *series gets the distinct fps.
 */
static void
an_dedupe(struct an_ent *v, size_t n, uint64_t *series, uint64_t *profiles,
    uint64_t *samples)
{
	*series = *profiles = *samples = 0;
	if (n > 1)
		qsort(v, n, sizeof(*v), an_ent_cmp);
	for (size_t i = 0; i < n;) {
		size_t j = i, best = i;

		for (; j < n && v[j].fp == v[i].fp; j++) {
			if (v[j].profiles > v[best].profiles)
				best = j;
		}
		(*series)++;
		*profiles += v[best].profiles;
		*samples += v[best].samples;
		i = j;
	}
}

static Querier__V1__QueryScope *
scope_new(struct sm_arena *a, const char *type, uint64_t components)
{
	Querier__V1__QueryScope *s = sm_arena_alloc(a, sizeof(*s));

	if (s == NULL)
		return (NULL);
	querier__v1__query_scope__init(s);
	s->component_type = (char *)type;
	s->component_count = components;
	return (s);
}

static int
m_analyze_query(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__AnalyzeQueryRequest *in = (const void *)req;
	Querier__V1__AnalyzeQueryResponse *out;
	Querier__V1__QueryScope *hs, *bs;
	Querier__V1__QueryImpact *imp;
	Smolder__V1__Select sel;
	struct an_ent *heads = NULL, *blocks = NULL, *all = NULL;
	size_t nh = 0, nb = 0, ch = 0, cb = 0;
	uint64_t answered = 0, dummy[2];
	struct qry_fan f;
	struct sm_query qq;
	const char *tenant;
	int64_t start, end;
	bool empty;
	int rv;

	qry_fan_init(&f);
	sm_query_init(&qq);
	if ((rv = qry_call_range(q, call, in->start, in->end, &tenant,
	    &start, &end, &empty, err)) != 0)
		goto out;
	if (in->query == NULL || in->query[0] == '\0') {
		rv = sm_err_set(err, SM_EINVAL, "query is required");
		goto out;
	}
	if ((rv = sm_query_parse(&qq, in->query, err)) != 0)
		goto out;
	if ((rv = qry_select_pb(&qq.sel, tenant, start, end,
	    call->arena, &sel)) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if (sel.end_ms <= sel.start_ms)
		sel.end_ms = sel.start_ms + 1;   /* start == end: that ms */
	out = sm_arena_alloc(call->arena, sizeof(*out));
	imp = sm_arena_alloc(call->arena, sizeof(*imp));
	if (out == NULL || imp == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	querier__v1__analyze_query_response__init(out);
	querier__v1__query_impact__init(imp);
	/* Before max_query_lookback nothing is read: no ingester is asked
	 * (f.n stays 0), both scopes are zero. */
	if (!empty && (rv = analyze_fan(q, &f, &sel, false, err)) != 0)
		goto out;
	for (uint32_t i = 0; i < f.n; i++) {
		const Smolder__V1__AnalyzeResponse *a = fan_analyze(&f, i);

		if (a == NULL)
			continue;
		answered++;
		ch += a->n_head_series;
		cb += a->n_block_series;
	}
	heads = sm_malloc(SM_MAX(ch, 1) * sizeof(*heads));
	blocks = sm_malloc(SM_MAX(cb, 1) * sizeof(*blocks));
	all = sm_malloc(SM_MAX(ch + cb, 1) * sizeof(*all));
	hs = scope_new(call->arena, "ingester heads", answered);
	bs = scope_new(call->arena, "ingester blocks", answered);
	out->query_scopes = sm_arena_alloc(call->arena, 2 *
	    sizeof(*out->query_scopes));
	if (heads == NULL || blocks == NULL || all == NULL || hs == NULL ||
	    bs == NULL || out->query_scopes == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < f.n; i++) {
		const Smolder__V1__AnalyzeResponse *a = fan_analyze(&f, i);

		if (a == NULL)
			continue;
		hs->block_count += a->heads;
		hs->profile_bytes += a->head_bytes;
		bs->block_count += a->blocks;
		bs->profile_bytes += a->block_bytes;
		for (size_t k = 0; k < a->n_head_series; k++)
			heads[nh++] = (struct an_ent){ a->head_series[k]->fp,
			    a->head_series[k]->profiles,
			    a->head_series[k]->samples };
		for (size_t k = 0; k < a->n_block_series; k++)
			blocks[nb++] = (struct an_ent){ a->block_series[k]->fp,
			    a->block_series[k]->profiles,
			    a->block_series[k]->samples };
	}
	memcpy(all, heads, nh * sizeof(*all));
	memcpy(all + nh, blocks, nb * sizeof(*all));
	an_dedupe(heads, nh, &hs->series_count, &hs->profile_count,
	    &hs->sample_count);
	an_dedupe(blocks, nb, &bs->series_count, &bs->profile_count,
	    &bs->sample_count);
	an_dedupe(all, nh + nb, &imp->total_queried_series, &dummy[0],
	    &dummy[1]);
	imp->total_bytes_in_time_range = hs->profile_bytes + bs->profile_bytes;
	imp->deduplication_needed = answered > 1 && f.snap != NULL &&
	    f.snap->rf > 1;
	out->query_scopes[0] = hs;
	out->query_scopes[1] = bs;
	out->n_query_scopes = 2;
	out->query_impact = imp;
	*resp = &out->base;
	rv = 0;
out:
	sm_free(heads);
	sm_free(blocks);
	sm_free(all);
	qry_fan_close(&f, true);
	sm_query_fini(&qq);
	return (rv);
}

int
qry_stats_register(struct querier *q)
{
	static const struct qry_method methods[] = {
		{ "GetProfileStats",
		    &querier__v1__get_profile_stats_request__descriptor,
		    m_get_profile_stats },
		{ "AnalyzeQuery",
		    &querier__v1__analyze_query_request__descriptor,
		    m_analyze_query },
	};

	return (qry_route_methods(q, methods, SM_ARRAY_LEN(methods)));
}
