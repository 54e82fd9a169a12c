/*
 * connect_api.c -- Pyroscope's querier.v1.QuerierService over Connect
 * (docs/wire-formats.md §4, §5), the API Grafana's Pyroscope data source and Pyroscope's
 * own UI call, in both the proto and the JSON codec (common/connect.h).
 *
 * Served: ProfileTypes, LabelNames, LabelValues, Series,
 * SelectMergeStacktraces (formats flamegraph and tree;
 * stack_trace_selector),
 * SelectSeries (limit, aggregation SUM/AVERAGE), Diff, SelectMergeProfile
 * (google.v1.Profile).  GetProfileStats and AnalyzeQuery: stats_api.c;
 * SelectMergeSpanProfile: span_api.c; SelectHeatmap: heatmap_api.c.
 * The query work is the engine's (engine.h); handlers here only decode,
 * validate and shape answers.
 *
 * Semantics (Pyroscope v1's querier where it defines them):
 *   - times are unix milliseconds; a merge or series request with start or
 *     end 0 is "missing time range in the query", start > end is
 *     "invalid time range" (both invalid_argument); a time outside
 *     attime.h's window (e.g. start = -2^63) is invalid_argument too;
 *   - ProfileTypes with start = end = 0 lists every stored type;
 *   - the tenant's max_query_lookback and max_query_length apply to every
 *     method here, label methods and ProfileTypes included (qry_int.h
 *     qry_limit_range): a range that ended before the lookback answers
 *     the method's empty message with OK (no names, no series, an empty
 *     flamegraph or pprof, an empty diff side), an earlier start reads
 *     from the lookback on; start = end = 0 (all time) is the lookback
 *     window;
 *   - LabelNames / LabelValues / Series take a list of selector strings
 *     that are OR'ed; none means every series; the answer is sorted and
 *     LabelNames includes the internal "__*" names (Grafana filters them);
 *   - SelectMergeStacktraces' max_nodes: 0 means the default (8192),
 *     above the maximum is invalid_argument, as in Pyroscope;
 *   - SelectSeries' step is in seconds (a double); points sit at multiples
 *     of the step; the value is the sum of the profiles' totals in the step;
 *     limit N keeps the N series with the largest totals, largest first
 *     (Pyroscope's TopSeries); a group-by label a series lacks is left out
 *     of its labels; aggregation AVERAGE makes each point the mean over
 *     the profiles of its step (Pyroscope's avg aggregator: sum of the
 *     profiles' totals / their number), counted by the ingesters per
 *     bucket, so replicas and ingesters combine exactly; the limit then
 *     ranks the averaged series; the group lookups are hashed and the
 *     merge sorts, so all of it is n log n in the series count; a
 *     stack_trace_selector's call_site makes each point the sum of the
 *     stacks through it (the ingesters read the buckets' stacks instead
 *     of their totals: SeriesRequest.call_site, from the downsampling
 *     tiers for long ranges as flamegraphs are), so the series is the
 *     flamegraph of the same selector over time; go_pgo changes no
 *     total; exemplars stay the profiles' own totals;
 *   - SelectMergeStacktraces format TREE answers Pyroscope's tree bytes
 *     (treebytes.c) in `tree` with no flamegraph, max_nodes as for the
 *     flamegraph; PPROF answers in `pprof` what SelectMergeProfile
 *     answers for the same selection and max_nodes (pprof.c: 0 = the
 *     whole tree); DOT answers a Graphviz call graph in `dot` (dot.c:
 *     max_nodes functions, pprof's 80 when 0); a format this version does
 *     not know (and anything but FLAMEGRAPH for Diff) is unimplemented
 *     (501): clients fall back on that;
 *   - SelectMergeStacktraces with span_selector merges only the samples
 *     that carried those span ids (as SelectMergeSpanProfile does,
 *     span_api.c), in any format; with profile_id_selector (here and in
 *     SelectMergeProfile) only the uploads of those ids, exact or 501
 *     (profile_sel.c); trace_id_selector is 501 (trace ids are not kept
 *     per sample: ignoring it would answer more than asked);
 *   - Diff takes max_nodes from the left request (else the right, else the
 *     default) and applies it once to the union of both trees.
 */
#include "qry_int.h"

#include <math.h>
#include <string.h>

#include "common/attime.h"
#include "common/connect.h"
#include "common/flamegraph.h"
#include "common/labels.h"
#include "common/ptype.h"
#include "common/selector.h"
#include "common/auth.h"
#include "common/tenant.h"

#include "querier/v1/querier.pb-c.h"

int
qry_call_tenant(struct querier *q, struct sm_connect_call *call,
    const char **tenant, struct sm_err *err)
{
	return (sm_http_tenant(call->http, q->cfg.multitenancy, tenant, err));
}

int
qry_check_range(int64_t start, int64_t end, struct sm_err *err)
{
	int rv;

	if (start == 0 || end == 0)
		return (sm_err_set(err, SM_EINVAL, "missing time range in the "
		    "query"));
	if ((rv = sm_time_check_range(start, "start", end, "end", err)) != 0)
		return (rv);
	if (start > end)
		return (sm_err_set(err, SM_EINVAL, "invalid time range: start "
		    "is after end"));
	return (0);
}

int
qry_call_range(struct querier *q, struct sm_connect_call *call,
    int64_t start, int64_t end, const char **tenant, int64_t *startp,
    int64_t *endp, bool *empty, struct sm_err *err)
{
	int rv;

	if ((rv = qry_call_tenant(q, call, tenant, err)) != 0)
		return (rv);
	*startp = start;
	*endp = end;
	if ((rv = qry_check_range(start, end, err)) != 0)
		return (rv);
	return (qry_limit_range(q, *tenant, startp, endp, NULL, empty, err));
}

int
qry_build_selector(const char *type_id, const char *label_selector,
    struct sm_selector *s, struct sm_err *err)
{
	int rv;

	sm_selector_init(s);
	if (label_selector != NULL && label_selector[0] != '\0' &&
	    (rv = sm_selector_parse(s, label_selector, err)) != 0)
		return (rv);
	if (type_id != NULL && type_id[0] != '\0') {
		struct sm_ptype pt;

		if (sm_ptype_parse(type_id, &pt) != 0)
			return (sm_err_set(err, SM_EINVAL, "invalid profile "
			    "type id \"%s\"", type_id));
		if ((rv = sm_selector_add(s, SM_MATCH_EQ, SM_LABEL_PROFILE_TYPE,
		    type_id, err)) != 0)
			return (rv);
	}
	return (0);
}

static char *
dupstr(struct sm_arena *a, const char *s)
{
	return (sm_arena_strndup(a, s, strlen(s)));
}

/* --- label methods -------------------------------------------------------- */

/*
 * Run a labels request once per matcher string (OR), or once with none,
 * and union the answers into *names / *sets.
 */
static int
labels_or(struct querier *q, const char *tenant, char **matchers,
    size_t nmatchers, int64_t start, int64_t end,
    Smolder__V1__LabelsKind kind, const char *name, char **label_names,
    size_t nlabel_names, struct sm_arena *a, struct qry_labels_result *res,
    struct sm_err *err)
{
	size_t rounds = nmatchers == 0 ? 1 : nmatchers;
	bool all_time = start == 0 && end == 0, empty;
	int rv = 0;

	memset(res, 0, sizeof(*res));
	if ((rv = sm_time_check_range(start, "start", end, "end", err)) != 0 ||
	    (rv = qry_limit_range(q, tenant, &start, &end, &all_time, &empty,
	    err)) != 0)
		return (rv);
	if (empty)
		return (0);     /* before max_query_lookback: nothing */
	for (size_t i = 0; i < rounds && rv == 0; i++) {
		Smolder__V1__LabelsRequest lr = SMOLDER__V1__LABELS_REQUEST__INIT;
		Smolder__V1__Select sel;
		struct qry_labels_result one;
		struct sm_selector s;

		sm_selector_init(&s);
		if (nmatchers != 0 &&
		    (rv = sm_selector_parse(&s, matchers[i], err)) != 0) {
			sm_selector_fini(&s);
			break;
		}
		if ((rv = qry_select_pb(&s, tenant, start, end, a, &sel)) != 0) {
			sm_selector_fini(&s);
			sm_err_set(err, rv, "out of memory");
			break;
		}
		lr.select = &sel;
		lr.all_time = all_time;
		lr.kind = kind;
		lr.name = (char *)name;
		lr.label_names = label_names;
		lr.n_label_names = nlabel_names;
		rv = qry_labels(q, &lr, a, &one, err);
		sm_selector_fini(&s);
		if (rv != 0)
			break;
		if (i == 0) {
			*res = one;
			continue;
		}
		/* Union: append, then re-sort and dedupe names below. */
		{
			char **nn = sm_arena_alloc(a, (size_t)(res->nnames +
			    one.nnames + 1) * sizeof(char *));
			struct qry_labelset *ns = sm_arena_alloc(a,
			    (size_t)(res->nsets + one.nsets + 1) *
			    sizeof(*ns));

			if (nn == NULL || ns == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "oom");
				break;
			}
			memcpy(nn, res->names, res->nnames * sizeof(char *));
			memcpy(nn + res->nnames, one.names,
			    one.nnames * sizeof(char *));
			memcpy(ns, res->sets, res->nsets * sizeof(*ns));
			memcpy(ns + res->nsets, one.sets,
			    one.nsets * sizeof(*ns));
			res->names = nn;
			res->nnames += one.nnames;
			res->sets = ns;
			res->nsets += one.nsets;
			res->sets_cap = res->nsets;
		}
	}
	if (rv == 0)
		qry_labelsets_dedupe(res);
	return (rv);
}

static int
cmp_cstr(const void *a, const void *b)
{
	return (strcmp(*(char *const *)a, *(char *const *)b));
}

/* Sort and dedupe a string array in place; returns the new count. */
static size_t
uniq(char **v, size_t n)
{
	size_t w = 0;

	if (n == 0)
		return (0);
	qsort(v, n, sizeof(*v), cmp_cstr);
	for (size_t i = 0; i < n; i++) {
		if (w == 0 || strcmp(v[w - 1], v[i]) != 0)
			v[w++] = v[i];
	}
	return (w);
}

/*
 * The sorted, unique label names (kind LABEL_NAMES) or values of `name`
 * (LABEL_VALUES) of the caller's tenant over the OR of `matchers`: what
 * LabelNames and LabelValues answer.  Their answers have the one shape
 * `repeated string names = 1`, so the message of descriptor `d` is filled
 * through that field's descriptor.
 */
static int
label_list(struct querier *q, struct sm_connect_call *call, char **matchers,
    size_t nmatchers, int64_t start, int64_t end, Smolder__V1__LabelsKind kind,
    const char *name, const ProtobufCMessageDescriptor *d,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const ProtobufCFieldDescriptor *f = &d->fields[0];
	struct qry_labels_result res;
	const char *tenant;
	char *out;
	int rv;

	SM_ASSERT(d->n_fields == 1 && f->id == 1 &&
	    f->label == PROTOBUF_C_LABEL_REPEATED &&
	    f->type == PROTOBUF_C_TYPE_STRING);
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0 ||
	    (rv = labels_or(q, tenant, matchers, nmatchers, start, end, kind,
	    name, NULL, 0, call->arena, &res, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, d->sizeof_message)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	protobuf_c_message_init(d, out);
	*(char ***)(void *)(out + f->offset) = res.names;
	*(size_t *)(void *)(out + f->quantifier_offset) = uniq(res.names,
	    res.nnames);
	*resp = (ProtobufCMessage *)(void *)out;
	return (0);
}

static int
m_label_names(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	const Types__V1__LabelNamesRequest *in = (const void *)req;

	return (label_list(arg, call, in->matchers, in->n_matchers, in->start,
	    in->end, SMOLDER__V1__LABELS_KIND__LABEL_NAMES, NULL,
	    &types__v1__label_names_response__descriptor, resp, err));
}

static int
m_label_values(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	const Types__V1__LabelValuesRequest *in = (const void *)req;

	if (in->name == NULL || in->name[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "name is required"));
	return (label_list(arg, call, in->matchers, in->n_matchers, in->start,
	    in->end, SMOLDER__V1__LABELS_KIND__LABEL_VALUES, in->name,
	    &types__v1__label_values_response__descriptor, resp, err));
}

static int
m_profile_types(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	const Querier__V1__ProfileTypesRequest *in = (const void *)req;
	Querier__V1__ProfileTypesResponse *out;
	struct qry_labels_result res;
	const char *tenant;
	size_t n, k = 0;
	int rv;

	if ((rv = qry_call_tenant(arg, call, &tenant, err)) != 0 ||
	    (rv = labels_or(arg, tenant, NULL, 0, in->start, in->end,
	    SMOLDER__V1__LABELS_KIND__LABEL_VALUES, SM_LABEL_PROFILE_TYPE,
	    NULL, 0, call->arena, &res, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	querier__v1__profile_types_response__init(out);
	n = uniq(res.names, res.nnames);
	out->profile_types = sm_arena_alloc(call->arena, (n + 1) *
	    sizeof(*out->profile_types));
	if (out->profile_types == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < n; i++) {
		Types__V1__ProfileType *pt = sm_arena_alloc(call->arena,
		    sizeof(*pt));
		struct sm_ptype p;

		if (pt == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		if (sm_ptype_parse(res.names[i], &p) != 0)
			continue;
		types__v1__profile_type__init(pt);
		pt->id = res.names[i];
		pt->name = dupstr(call->arena, p.name);
		pt->sample_type = dupstr(call->arena, p.sample_type);
		pt->sample_unit = dupstr(call->arena, p.sample_unit);
		pt->period_type = dupstr(call->arena, p.period_type);
		pt->period_unit = dupstr(call->arena, p.period_unit);
		if (pt->name == NULL || pt->sample_type == NULL ||
		    pt->sample_unit == NULL || pt->period_type == NULL ||
		    pt->period_unit == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		out->profile_types[k++] = pt;
	}
	out->n_profile_types = k;
	*resp = &out->base;
	return (0);
}

static int
m_series(void *arg, struct sm_connect_call *call, const ProtobufCMessage *req,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Querier__V1__SeriesRequest *in = (const void *)req;
	Querier__V1__SeriesResponse *out;
	struct qry_labels_result res;
	const char *tenant;
	size_t w = 0;
	int rv;

	if ((rv = qry_call_tenant(arg, call, &tenant, err)) != 0 ||
	    (rv = labels_or(arg, tenant, in->matchers, in->n_matchers,
	    in->start, in->end, SMOLDER__V1__LABELS_KIND__SERIES_LABELS, NULL,
	    in->label_names, in->n_label_names, call->arena, &res, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL ||
	    (out->labels_set = NULL, querier__v1__series_response__init(out),
	    (out->labels_set = sm_arena_alloc(call->arena, (res.nsets + 1) *
	    sizeof(*out->labels_set))) == NULL))
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < res.nsets; i++) {
		const struct qry_labelset *ls = &res.sets[i];
		Types__V1__Labels *l = sm_arena_alloc(call->arena, sizeof(*l));

		/* Sets from several matchers may repeat, but labels_or
		 * sorted and de-duplicated them (qry_labelsets_dedupe): no
		 * pairwise scan here, which made Series quadratic (40k
		 * series: 48 s). */
		if (l == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		types__v1__labels__init(l);
		l->n_labels = ls->n;
		l->labels = sm_arena_alloc(call->arena, (ls->n + 1) *
		    sizeof(*l->labels));
		if (l->labels == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		for (uint32_t k = 0; k < ls->n; k++) {
			Types__V1__LabelPair *lp = sm_arena_alloc(call->arena,
			    sizeof(*lp));

			if (lp == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			types__v1__label_pair__init(lp);
			lp->name = (char *)ls->v[k].name;
			lp->value = (char *)ls->v[k].value;
			l->labels[k] = lp;
		}
		out->labels_set[w++] = l;
	}
	out->n_labels_set = w;
	*resp = &out->base;
	return (0);
}

/* --- SelectMergeStacktraces, Diff, SelectMergeProfile ------------------- */

int
qry_max_nodes(struct querier *q, const char *tenant, int64_t mn, int64_t *out,
    struct sm_err *err)
{
	struct sm_limits lim;

	if (mn < 0)
		return (sm_err_set(err, SM_EINVAL, "max flamegraph nodes limit "
		    "must be set"));
	qry_tenant_limits(q, tenant, &lim);
	if (mn == 0)
		mn = lim.max_flamegraph_nodes_default;
	if (lim.max_flamegraph_nodes_max > 0 &&
	    mn > lim.max_flamegraph_nodes_max)
		return (sm_err_set(err, SM_EINVAL, "max flamegraph nodes limit "
		    "%lld is greater than allowed %lld", (long long)mn,
		    (long long)lim.max_flamegraph_nodes_max));
	*out = mn;
	return (0);
}

/* The select of a merge request's type id, selector and range, in the
 * call's arena.  `s` must be initialised (the caller finalises it). */
static int
merge_select(const char *tenant, const char *type_id, const char *label_sel,
    int64_t start, int64_t end, struct sm_arena *a, struct sm_selector *s,
    Smolder__V1__Select *sel, struct sm_err *err)
{
	int rv;

	if ((rv = qry_check_range(start, end, err)) != 0)
		return (rv);
	sm_selector_fini(s);
	if ((rv = qry_build_selector(type_id, label_sel, s, err)) != 0)
		return (rv);
	if (qry_select_pb(s, tenant, start, end, a, sel) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	return (0);
}

void
qry_merge_fini(struct sm_connect_call *call, struct qry_query *x,
    struct sm_selector *s, struct sm_mtree *m)
{
	if (m != NULL) {
		call->heap_used += qry_mtree_bytes(m);
		sm_mtree_fini(m);
	}
	qry_query_fini(x);
	sm_selector_fini(s);
}

/* The format values SelectMergeStacktraces serves. */
#define FMT_TREE QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_TREE
#define FMT_DOT QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_DOT
#define FMT_PPROF QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_PPROF

static int
check_format(Querier__V1__ProfileFormat f, struct sm_err *err)
{
	if (f == QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_UNSPECIFIED ||
	    f == QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_FLAMEGRAPH ||
	    f == FMT_TREE || f == FMT_DOT || f == FMT_PPROF)
		return (0);
	/* unimplemented (501): a format this version does not know. */
	return (sm_err_set(err, SM_EUNSUPPORTED, "profile format %d is not "
	    "supported", (int)f));
}

/* Copy a rendered flamegraph's names and levels into the arena. */
int
qry_fg_levels(struct sm_arena *a, const struct sm_fg *fg, char ***names,
    size_t *nnames, Querier__V1__Level ***levels, size_t *nlevels)
{
	*names = sm_arena_alloc(a, (fg->nnames + 1) * sizeof(char *));
	*levels = sm_arena_alloc(a, (fg->nlevels + 1) * sizeof(**levels));
	if (*names == NULL || *levels == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < fg->nnames; i++) {
		if (((*names)[i] = sm_arena_strndup(a, fg->names[i],
		    fg->name_len[i])) == NULL)
			return (SM_ENOMEM);
	}
	for (uint32_t i = 0; i < fg->nlevels; i++) {
		Querier__V1__Level *l = sm_arena_alloc(a, sizeof(*l));

		if (l == NULL)
			return (SM_ENOMEM);
		querier__v1__level__init(l);
		l->n_values = fg->level_len[i];
		l->values = sm_arena_alloc(a, ((size_t)l->n_values + 1) *
		    sizeof(int64_t));
		if (l->values == NULL)
			return (SM_ENOMEM);
		memcpy(l->values, fg->levels[i], l->n_values * sizeof(int64_t));
		(*levels)[i] = l;
	}
	*nnames = fg->nnames;
	*nlevels = fg->nlevels;
	return (0);
}

int
qry_fg_pb(const struct sm_mtree *m, int64_t max_nodes, struct sm_arena *a,
    Querier__V1__FlameGraph **out, struct sm_err *err)
{
	Querier__V1__FlameGraph *g;
	struct sm_fg fg;
	int rv;

	if ((rv = sm_fg_build(&m->tree, &m->names, m->self, max_nodes,
	    &fg)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	rv = 0;
	if ((g = sm_arena_alloc(a, sizeof(*g))) == NULL)
		rv = SM_ENOMEM;
	else {
		querier__v1__flame_graph__init(g);
		g->total = fg.total;
		g->max_self = fg.max_self;
		rv = qry_fg_levels(a, &fg, &g->names, &g->n_names, &g->levels,
		    &g->n_levels);
	}
	/* The levels and names are copies in `a`: fg may go now. */
	sm_fg_fini(&fg);
	if (rv != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	*out = g;
	return (0);
}

/*
 * The id selectors a merge may carry: trace ids are not kept per sample
 * (span ids are), so trace_id_selector is refused rather than ignored --
 * ignoring it would answer more than asked; span_selector and
 * profile_id_selector each narrow the merge their own way, not together.
 */
static int
check_id_selectors(size_t ntrace, size_t nspan, size_t nprofile,
    struct sm_err *err)
{
	if (ntrace > 0)
		return (sm_err_set(err, SM_EUNSUPPORTED, "trace_id_selector "
		    "is not served: trace ids are not kept per sample; select "
		    "the trace's spans with span_selector or "
		    "SelectMergeSpanProfile"));
	if (nspan > 0 && nprofile > 0)
		return (sm_err_set(err, SM_EUNSUPPORTED, "span_selector and "
		    "profile_id_selector together are not served"));
	return (0);
}

static int
m_merge_stacktraces(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__SelectMergeStacktracesRequest *in =
	    (const void *)req;
	Querier__V1__SelectMergeStacktracesResponse *out;
	Smolder__V1__Select sel;
	struct qry_query x;
	struct sm_selector s;
	struct sm_mtree m;
	const char *tenant;
	int64_t mn = 0;
	int rv, have_m = 0;

	qry_query_init(&x, q);
	sm_selector_init(&s);
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0 ||
	    (rv = check_format(in->format, err)) != 0 ||
	    (rv = qry_max_nodes(q, tenant, in->max_nodes, &mn, err)) != 0 ||
	    (rv = merge_select(tenant, in->profile_typeid, in->label_selector,
	    in->start, in->end, call->arena, &s, &sel, err)) != 0)
		goto out;
	if ((rv = sm_mtree_init(&m)) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	have_m = 1;
	if ((rv = check_id_selectors(in->n_trace_id_selector,
	    in->n_span_selector, in->n_profile_id_selector, err)) != 0)
		goto out;
	if (in->n_span_selector > 0) {
		uint64_t *ids;
		size_t nids;

		if ((rv = qry_span_ids(in->span_selector,
		    in->n_span_selector, call->arena, &ids, &nids, err)) != 0 ||
		    (rv = qry_span_merge(&x, &sel, ids, nids, &m, err)) != 0)
			goto out;
	} else if (in->n_profile_id_selector > 0) {
		if ((rv = qry_profile_merge(&x, &sel, in->profile_id_selector,
		    in->n_profile_id_selector, &m, err)) != 0)
			goto out;
	} else if ((rv = qry_merge(&x, &sel, &m, err)) != 0) {
		goto out;
	}
	if ((rv = qry_tree_select(&m, in->stack_trace_selector, err)) != 0)
		goto out;
	if (in->format == FMT_TREE) {
		/* Pyroscope's tree bytes alone, no flamegraph. */
		if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
			goto oom;
		querier__v1__select_merge_stacktraces_response__init(out);
		if ((rv = qry_tree_bytes(&m, mn, call->arena, &out->tree.data,
		    &out->tree.len)) != 0) {
			sm_err_set(err, rv, rv == SM_ENOMEM ? "out of memory" :
			    "merged tree too large");
			goto out;
		}
		*resp = &out->base;
		goto out;
	}
	if (in->format == FMT_PPROF || in->format == FMT_DOT) {
		struct sm_ptype pt;

		if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
			goto oom;
		querier__v1__select_merge_stacktraces_response__init(out);
		if (sm_ptype_parse(in->profile_typeid, &pt) != 0) {
			rv = sm_err_set(err, SM_EINVAL, "invalid profile type "
			    "id \"%s\"", in->profile_typeid);
			goto out;
		}
		if (in->format == FMT_DOT) {
			size_t len;

			/* max_nodes as given: pprof's 80 when 0 */
			if (qry_dot_build(&m, &pt, in->max_nodes, call->arena,
			    &out->dot, &len) != 0)
				goto oom;
		} else {
			/* what SelectMergeProfile answers for the same
			 * request: max_nodes as given, 0 = the whole tree */
			if ((out->pprof = sm_arena_alloc(call->arena,
			    sizeof(*out->pprof))) == NULL)
				goto oom;
			querier__v1__pprof_response__init(out->pprof);
			if ((rv = qry_pprof_build(&m, &pt, in->start, in->end,
			    in->max_nodes, call->arena, &out->pprof->profile,
			    err)) != 0)
				goto out;
		}
		*resp = &out->base;
		goto out;
	}
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		goto oom;
	querier__v1__select_merge_stacktraces_response__init(out);
	if ((rv = qry_fg_pb(&m, mn, call->arena, &out->flamegraph, err)) != 0)
		goto out;
	*resp = &out->base;
	rv = 0;
	goto out;
oom:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	qry_merge_fini(call, &x, &s, have_m ? &m : NULL);
	return (rv);
}

/*
 * Diff: both sides merged in one fan-out (two lanes), then the diff
 * flamebearer.  max_nodes: the left request's, else the right's, else the
 * default (Pyroscope always uses its default; honouring the caller's
 * value is what the field promises), applied once to the union.
 */
static int
m_diff(void *arg, struct sm_connect_call *call, const ProtobufCMessage *req,
    ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__DiffRequest *in = (const void *)req;
	const Querier__V1__SelectMergeStacktracesRequest *side[2];
	Querier__V1__DiffResponse *out;
	Querier__V1__FlameGraphDiff *d;
	Smolder__V1__Select sel[2];
	const Smolder__V1__Select *selp[2] = { &sel[0], &sel[1] };
	struct sm_mtree m[2];
	struct sm_mtree *mp[2] = { &m[0], &m[1] };
	struct sm_selector s[2];
	struct qry_query x;
	struct sm_fg fg;
	const char *tenant;
	int64_t mn = 0;
	int rv, have_m = 0, have_fg = 0;

	qry_query_init(&x, q);
	sm_selector_init(&s[0]);
	sm_selector_init(&s[1]);
	side[0] = in->left;
	side[1] = in->right;
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0)
		goto out;
	if (side[0] == NULL || side[1] == NULL) {
		rv = sm_err_set(err, SM_EINVAL, "left and right are required");
		goto out;
	}
	for (int k = 0; k < 2; k++) {
		if ((rv = check_format(side[k]->format, err)) != 0 ||
		    (rv = merge_select(tenant, side[k]->profile_typeid,
		    side[k]->label_selector, side[k]->start, side[k]->end,
		    call->arena, &s[k], &sel[k], err)) != 0)
			goto out;
		if (mn == 0 && side[k]->max_nodes != 0)
			mn = side[k]->max_nodes;
	}
	if ((rv = qry_max_nodes(q, tenant, mn, &mn, err)) != 0)
		goto out;
	if (sm_mtree_init(&m[0]) != 0 || sm_mtree_init(&m[1]) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	have_m = 1;
	if ((rv = qry_merge_lanes(&x, selp, mp, 2, err)) != 0)
		goto out;
	for (int k = 0; k < 2; k++) {
		if ((rv = qry_tree_select(&m[k], side[k]->stack_trace_selector,
		    err)) != 0)
			goto out;
	}
	if ((rv = sm_fg_build_diff(&m[0].tree, &m[0].names, m[0].self,
	    &m[1].tree, &m[1].names, m[1].self, mn, &fg)) != 0) {
		sm_err_set(err, rv, "out of memory");
		goto out;
	}
	have_fg = 1;
	out = sm_arena_alloc(call->arena, sizeof(*out));
	d = sm_arena_alloc(call->arena, sizeof(*d));
	if (out == NULL || d == NULL)
		goto oom;
	querier__v1__diff_response__init(out);
	querier__v1__flame_graph_diff__init(d);
	out->flamegraph = d;
	d->total = fg.total;
	d->max_self = fg.max_self;
	d->leftticks = fg.left_ticks;
	d->rightticks = fg.right_ticks;
	if (qry_fg_levels(call->arena, &fg, &d->names, &d->n_names, &d->levels,
	    &d->n_levels) != 0)
		goto oom;
	*resp = &out->base;
	rv = 0;
	goto out;
oom:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	if (have_fg)
		sm_fg_fini(&fg);
	if (have_m) {
		call->heap_used += qry_mtree_bytes(&m[0]) +
		    qry_mtree_bytes(&m[1]);
		sm_mtree_fini(&m[0]);
		sm_mtree_fini(&m[1]);
	}
	qry_query_fini(&x);
	sm_selector_fini(&s[0]);
	sm_selector_fini(&s[1]);
	return (rv);
}

static int
m_merge_profile(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__SelectMergeProfileRequest *in = (const void *)req;
	Google__V1__Profile *out;
	Smolder__V1__Select sel;
	struct qry_query x;
	struct sm_selector s;
	struct sm_mtree m;
	struct sm_ptype pt;
	const char *tenant;
	int rv, have_m = 0;

	qry_query_init(&x, q);
	sm_selector_init(&s);
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0)
		goto out;
	if (in->max_nodes < 0) {
		rv = sm_err_set(err, SM_EINVAL, "max_nodes must not be "
		    "negative");
		goto out;
	}
	if (in->profile_typeid == NULL || sm_ptype_parse(in->profile_typeid,
	    &pt) != 0) {
		rv = sm_err_set(err, SM_EINVAL, "invalid profile type id "
		    "\"%s\"", in->profile_typeid != NULL ?
		    in->profile_typeid : "");
		goto out;
	}
	if ((rv = merge_select(tenant, in->profile_typeid, in->label_selector,
	    in->start, in->end, call->arena, &s, &sel, err)) != 0)
		goto out;
	if ((rv = sm_mtree_init(&m)) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	have_m = 1;
	if ((rv = check_id_selectors(in->n_trace_id_selector, 0,
	    in->n_profile_id_selector, err)) != 0 ||
	    (rv = (in->n_profile_id_selector > 0 ? qry_profile_merge(&x, &sel,
	    in->profile_id_selector, in->n_profile_id_selector, &m, err) :
	    qry_merge(&x, &sel, &m, err))) != 0 ||
	    (rv = qry_tree_select(&m, in->stack_trace_selector, err)) != 0 ||
	    (rv = qry_pprof_build(&m, &pt, in->start, in->end, in->max_nodes,
	    call->arena, &out, err)) != 0)
		goto out;
	*resp = &out->base;
	rv = 0;
out:
	qry_merge_fini(call, &x, &s, have_m ? &m : NULL);
	return (rv);
}

/* --- SelectSeries --------------------------------------------------------- */

#define AGG_SUM \
	TYPES__V1__TIME_SERIES_AGGREGATION_TYPE__TIME_SERIES_AGGREGATION_TYPE_SUM
#define AGG_AVERAGE \
	TYPES__V1__TIME_SERIES_AGGREGATION_TYPE__TIME_SERIES_AGGREGATION_TYPE_AVERAGE

/* Largest total first; ties keep the label order (qsort is not stable,
 * so compare the labels too). */
static int
series_sum_desc(const void *a, const void *b)
{
	const struct qry_series *x = a, *y = b;

	if (x->sum != y->sum)
		return (x->sum > y->sum ? -1 : 1);
	return (qry_labels_cmp(x->labels, x->nlabels, y->labels, y->nlabels));
}

/* Check SelectSeries' aggregation, limit, stack selector and step; the
 * step in milliseconds (at least 1) in *step_ms. */
static int
series_check(const Querier__V1__SelectSeriesRequest *in, int64_t *step_ms,
    struct sm_err *err)
{
	if (in->aggregation != AGG_SUM && in->aggregation != AGG_AVERAGE)
		return (sm_err_set(err, SM_EINVAL, "unknown aggregation %d",
		    (int)in->aggregation));
	if (in->limit < 0)
		return (sm_err_set(err, SM_EINVAL, "limit must not be "
		    "negative"));
	if (!(in->step > 0) || !isfinite(in->step) || in->step > 1e9)
		return (sm_err_set(err, SM_EINVAL, "step must be a positive "
		    "number of seconds"));
	*step_ms = (int64_t)llround(in->step * 1000);
	if (*step_ms < 1)
		*step_ms = 1;
	return (0);
}

/*
 * AVERAGE: each point of gs[0..ng) becomes the mean over the profiles of
 * its step (the group's summed values over the number of uploads behind
 * them); the totals for the limit are then of the averaged points.
 */
static int
series_average(struct qry_series *gs, uint32_t ng, struct sm_err *err)
{
	for (uint32_t g = 0; g < ng; g++) {
		if (gs[g].n > 0 && gs[g].cnt == NULL)
			return (sm_err_set(err, SM_EUNAVAIL, "an ingester "
			    "answered without profile counts (older "
			    "version): AVERAGE unavailable"));
		gs[g].sum = 0;
		for (uint32_t j = 0; j < gs[g].n; j++) {
			if (gs[g].cnt[j] > 0)
				gs[g].v[j] /= (double)gs[g].cnt[j];
			gs[g].sum += gs[g].v[j];
		}
	}
	return (0);
}

/* One group as a Types__V1__Series in `a` (copied: the group labels live
 * in the fan's answers); NULL when out of memory. */
static Types__V1__Series *
series_pb(struct sm_arena *a, const struct qry_series *g)
{
	Types__V1__Series *c = sm_arena_alloc(a, sizeof(*c));

	if (c == NULL)
		return (NULL);
	types__v1__series__init(c);
	c->n_labels = g->nlabels;
	c->n_points = g->n;
	c->labels = sm_arena_alloc(a, (c->n_labels + 1) * sizeof(*c->labels));
	c->points = sm_arena_alloc(a, (c->n_points + 1) * sizeof(*c->points));
	if (c->labels == NULL || c->points == NULL)
		return (NULL);
	/* A group-by label the series lacks is left out, not given an
	 * empty value (Pyroscope's group key has no such pair). */
	c->n_labels = 0;
	for (size_t j = 0; j < g->nlabels; j++) {
		Types__V1__LabelPair *lp;

		if (g->labels[j]->value == NULL ||
		    g->labels[j]->value[0] == '\0')
			continue;
		if ((lp = sm_arena_alloc(a, sizeof(*lp))) == NULL)
			return (NULL);
		types__v1__label_pair__init(lp);
		lp->name = dupstr(a, g->labels[j]->name);
		lp->value = dupstr(a, g->labels[j]->value);
		c->labels[c->n_labels++] = lp;
	}
	for (size_t j = 0; j < c->n_points; j++) {
		Types__V1__Point *pt = sm_arena_alloc(a, sizeof(*pt));

		if (pt == NULL)
			return (NULL);
		types__v1__point__init(pt);
		pt->value = g->v[j];
		pt->timestamp = g->ts[j];
		c->points[j] = pt;
	}
	return (c);
}

/*
 * Fill `out` with the groups gs[0..ng) in `a`, cut to the top `limit` by
 * total, largest first, as Pyroscope's query frontend (TopSeries); the
 * rest are dropped.
 */
static int
series_response(struct sm_arena *a, struct qry_series *gs, uint32_t ng,
    int64_t limit, Querier__V1__SelectSeriesResponse *out,
    struct sm_err *err)
{
	if (limit > 0 && ng > (uint64_t)limit) {
		qsort(gs, ng, sizeof(*gs), series_sum_desc);
		ng = (uint32_t)limit;
	}
	out->series = sm_arena_alloc(a, (ng + 1) * sizeof(*out->series));
	if (out->series == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t g = 0; g < ng; g++) {
		Types__V1__Series *c = series_pb(a, &gs[g]);

		if (c == NULL)
			return (sm_err_set(err, SM_ENOMEM, "oom"));
		out->series[out->n_series++] = c;
	}
	return (0);
}

/*
 * The stack-trace selector's call site as the ingesters' series filter
 * (SeriesRequest.call_site): each point then sums the stacks through it,
 * as the flamegraph of the same selector shows them.  go_pgo trims frames
 * and changes no total.  0, SM_EINVAL (a frame without a name) or
 * SM_ENOMEM.
 */
static int
series_call_site(const Types__V1__StackTraceSelector *sts,
    struct sm_arena *a, Smolder__V1__SeriesRequest *sr, struct sm_err *err)
{
	size_t n = sts != NULL ? sts->n_call_site : 0;
	char **names;

	if (n == 0)
		return (0);
	if ((names = sm_arena_alloc(a, n * sizeof(*names))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t k = 0; k < n; k++) {
		if (sts->call_site[k] == NULL || sts->call_site[k]->name ==
		    NULL || sts->call_site[k]->name[0] == '\0')
			return (sm_err_set(err, SM_EINVAL, "stack_trace_selector"
			    ": call_site %zu has no name", k));
		names[k] = sts->call_site[k]->name;
	}
	sr->call_site = names;
	sr->n_call_site = n;
	return (0);
}

static int
m_select_series(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__SelectSeriesRequest *in = (const void *)req;
	Querier__V1__SelectSeriesResponse *out;
	Smolder__V1__SeriesRequest sr = SMOLDER__V1__SERIES_REQUEST__INIT;
	Smolder__V1__Select sel;
	struct qry_query x;
	struct qry_series *gs;
	struct sm_selector s;
	const char *tenant;
	int64_t step_ms = 0;
	uint32_t ng;
	int rv;

	qry_query_init(&x, q);
	sm_selector_init(&s);
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0 ||
	    (rv = qry_check_range(in->start, in->end, err)) != 0 ||
	    (rv = series_check(in, &step_ms, err)) != 0 ||
	    (rv = qry_build_selector(in->profile_typeid, in->label_selector,
	    &s, err)) != 0)
		goto out;
	if ((rv = qry_select_pb(&s, tenant, in->start, in->end, call->arena,
	    &sel)) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	sr.select = &sel;
	sr.step_ms = step_ms;
	sr.group_by = in->group_by;
	sr.n_group_by = in->n_group_by;
	if ((rv = series_call_site(in->stack_trace_selector, call->arena,
	    &sr, err)) != 0 ||
	    (rv = qry_series_select(&x, &sr, call->arena, &gs, &ng,
	    err)) != 0)
		goto out;
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	querier__v1__select_series_response__init(out);
	if ((in->aggregation == AGG_AVERAGE &&
	    (rv = series_average(gs, ng, err)) != 0) ||
	    (rv = series_response(call->arena, gs, ng, in->limit, out,
	    err)) != 0)
		goto out;
	if ((rv = qry_series_exemplars(q, &sr, (int)in->exemplar_type, out,
	    call->arena, err)) != 0)
		goto out;
	*resp = &out->base;
	rv = 0;
out:
	qry_query_fini(&x);
	sm_selector_fini(&s);
	return (rv);
}

int
qry_connect_register(struct querier *q)
{
	static const struct qry_method methods[] = {
		{ "ProfileTypes", &querier__v1__profile_types_request__descriptor,
		    m_profile_types },
		{ "LabelNames", &types__v1__label_names_request__descriptor,
		    m_label_names },
		{ "LabelValues", &types__v1__label_values_request__descriptor,
		    m_label_values },
		{ "Series", &querier__v1__series_request__descriptor, m_series },
		{ "SelectMergeStacktraces",
		    &querier__v1__select_merge_stacktraces_request__descriptor,
		    m_merge_stacktraces },
		{ "SelectSeries",
		    &querier__v1__select_series_request__descriptor,
		    m_select_series },
		{ "Diff", &querier__v1__diff_request__descriptor, m_diff },
		{ "SelectMergeProfile",
		    &querier__v1__select_merge_profile_request__descriptor,
		    m_merge_profile },
		{ "SelectMergeSpanProfile",
		    &querier__v1__select_merge_span_profile_request__descriptor,
		    qry_merge_span_profile },
		{ "SelectHeatmap",
		    &querier__v1__select_heatmap_request__descriptor,
		    qry_select_heatmap },
	};
	int rv;

	if ((rv = qry_route_methods(q, methods, SM_ARRAY_LEN(methods))) != 0)
		return (rv);
	return (qry_stats_register(q));
}
