/*
 * span_api.c -- querier.v1.QuerierService/SelectMergeSpanProfile (traces to
 * profiles; Pyroscope's shape, docs/wire-formats.md §4), in the proto and JSON codecs: the
 * merge of the samples that carried the given span ids (the `span_id`
 * pprof label, or `profile_id`, which Pyroscope renames to span_id) in the
 * series of `profile_typeID` + `label_selector` over [start, end].
 *
 * Storage: ingester/spans.h (span samples stay out of the series labels;
 * heads and a block part; smolder.v1.SpanMerge RPC).
 *
 * Fan-out and replicas: the same plan as every merge (plan.c): a series'
 * buckets are taken from one replica, so RF=3 answers equal a single
 * binary's; a span merge request carries the planned Select and the
 * sorted span ids to every target.
 *
 * Decisions:
 *   - span_selector entries are 16 hex digits (an OpenTelemetry span id,
 *     as Grafana sends it from a trace view); anything else is
 *     invalid_argument naming the entry.  Duplicates are merged once.  No
 *     entries means no span: an empty flamegraph (total 0), not the whole
 *     selection.
 *   - start/end are unix ms and both required (as SelectMergeStacktraces);
 *     the range selects buckets (-ingester.bucket-duration), like every
 *     merge.
 *   - max_nodes: 0 = -querier.max-flamegraph-nodes-default, above
 *     -querier.max-flamegraph-nodes-max is invalid_argument.
 *   - format FLAMEGRAPH (or unset) answers the flamegraph, TREE
 *     Pyroscope's tree bytes (`tree`, no flamegraph, max_nodes applied as
 *     for SelectMergeStacktraces TREE); the others answer 501
 *     unimplemented (clients fall back on that), never 400.
 */
#include "qry_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/connect.h"
#include "common/auth.h"
#include "common/flamegraph.h"
#include "common/ptype.h"
#include "common/selector.h"
#include "common/tenant.h"

#include "querier/v1/querier.pb-c.h"

/* SpanMerge(planned select, ids) per target, folded into one tree. */
struct span_round {
	const uint64_t *ids;
	size_t nids;
	struct sm_mtree *m;
};

static Smolder__V1__Request *
span_build(void *arg, const Smolder__V1__Select *ts, struct sm_arena *a)
{
	const struct span_round *sr = arg;
	Smolder__V1__Request *r = sm_arena_alloc(a, sizeof(*r));
	Smolder__V1__SpanMergeRequest *m = sm_arena_alloc(a, sizeof(*m));

	if (r == NULL || m == NULL)
		return (NULL);
	smolder__v1__request__init(r);
	smolder__v1__span_merge_request__init(m);
	m->select = (Smolder__V1__Select *)ts;
	m->span_ids = (uint64_t *)sr->ids;
	m->n_span_ids = sr->nids;
	r->method_case = SMOLDER__V1__REQUEST__METHOD_SPAN_MERGE;
	r->span_merge = m;
	return (r);
}

static int
span_fold(void *arg, const Smolder__V1__Response *resp, struct sm_err *err)
{
	return (sm_mtree_add_pb(((struct span_round *)arg)->m,
	    resp->span_merge, err));
}

static int
span_reset(void *arg)
{
	struct span_round *sr = arg;

	sm_mtree_fini(sr->m);
	return (sm_mtree_init(sr->m) != 0 ? SM_ENOMEM : 0);
}

int
qry_span_merge(struct qry_query *x, const Smolder__V1__Select *sel,
    uint64_t *ids, size_t nids, struct sm_mtree *m, struct sm_err *err)
{
	struct span_round sr = { ids, nids, m };
	const struct qry_custom c = {
		.method = "span_merge",
		.result = SMOLDER__V1__RESPONSE__RESULT_SPAN_MERGE,
		.build = span_build,
		.fold = span_fold,
		.reset = span_reset,
		.arg = &sr,
	};

	return (qry_planned(x, sel, &c, err));
}

int
qry_span_ids(char *const *sel, size_t n, struct sm_arena *a, uint64_t **out,
    size_t *nout, struct sm_err *err)
{
	uint64_t *ids = sm_arena_alloc(a, (n + 1) * sizeof(*ids));
	size_t nids = 0;

	*out = NULL;
	*nout = 0;
	if (ids == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < n; i++) {
		if (sel[i] == NULL || !sm_hex_u64(sel[i], strlen(sel[i]),
		    &ids[nids]))
			return (sm_err_set(err, SM_EINVAL, "invalid span id "
			    "\"%.64s\": expected 16 hex digits", sel[i] != NULL ?
			    sel[i] : ""));
		nids++;
	}
	if (nids > 1) {
		size_t w = 1;

		qsort(ids, nids, sizeof(*ids), sm_u64_cmp);
		for (size_t i = 1; i < nids; i++) {
			if (ids[i] != ids[w - 1])
				ids[w++] = ids[i];
		}
		nids = w;
	}
	*out = ids;
	*nout = nids;
	return (0);
}

int
qry_merge_span_profile(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__SelectMergeSpanProfileRequest *in =
	    (const void *)req;
	Querier__V1__SelectMergeSpanProfileResponse *out;
	Smolder__V1__Select sel;
	struct qry_query x;
	struct sm_selector s;
	struct sm_mtree m;
	const char *tenant;
	int64_t mn = in->max_nodes;
	uint64_t *ids = NULL;
	size_t nids = 0;
	int rv, have_m = 0;

	qry_query_init(&x, q);
	sm_selector_init(&s);
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0)
		goto out;
	if ((rv = qry_check_range(in->start, in->end, err)) != 0)
		goto out;
	if (in->format != QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_UNSPECIFIED &&
	    in->format != QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_FLAMEGRAPH &&
	    in->format != QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_TREE) {
		rv = sm_err_set(err, SM_EUNSUPPORTED, "SelectMergeSpanProfile "
		    "serves the flamegraph and tree formats");
		goto out;
	}
	if ((rv = qry_max_nodes(q, tenant, mn, &mn, err)) != 0)
		goto out;
	if ((rv = qry_span_ids(in->span_selector, in->n_span_selector,
	    call->arena, &ids, &nids, err)) != 0)
		goto out;
	if ((rv = qry_build_selector(in->profile_typeid, in->label_selector,
	    &s, err)) != 0)
		goto out;
	if (qry_select_pb(&s, tenant, in->start, in->end, call->arena,
	    &sel) != 0 || sm_mtree_init(&m) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	have_m = 1;
	if (nids > 0 && (rv = qry_span_merge(&x, &sel, ids, nids, &m,
	    err)) != 0)
		goto out;
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	querier__v1__select_merge_span_profile_response__init(out);
	if (in->format == QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_TREE) {
		/* Pyroscope's tree bytes alone, as SelectMergeStacktraces
		 * answers TREE (treebytes.c); what Pyroscope's own query
		 * frontend asks its queriers for. */
		if ((rv = qry_tree_bytes(&m, mn, call->arena, &out->tree.data,
		    &out->tree.len)) != 0) {
			sm_err_set(err, rv, rv == SM_ENOMEM ? "out of memory" :
			    "merged tree too large");
			goto out;
		}
	} else if ((rv = qry_fg_pb(&m, mn, call->arena, &out->flamegraph,
	    err)) != 0) {
		goto out;
	}
	*resp = &out->base;
	rv = 0;
out:
	qry_merge_fini(call, &x, &s, have_m ? &m : NULL);
	return (rv);
}
