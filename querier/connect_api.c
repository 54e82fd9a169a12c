/*
 * connect_api.c -- Pyroscope's querier.v1.QuerierService over Connect
 * (spec §4, §5), the API Grafana's Pyroscope data source and Pyroscope's
 * own UI call, in both the proto and the JSON codec (common/connect.h).
 *
 * Served: ProfileTypes, LabelNames, LabelValues, Series,
 * SelectMergeStacktraces (format flamegraph), SelectSeries.
 * Not yet served (no route, so 404 -> Connect "unimplemented" for
 * clients): SelectMergeProfile (pprof export), Diff, SelectMergeSpanProfile,
 * SelectHeatmap, GetProfileStats, AnalyzeQuery.
 *
 * Semantics (Pyroscope v1's querier where it defines them):
 *   - times are unix milliseconds; a merge or series request with start or
 *     end 0 is "missing time range in the query", start > end is
 *     "invalid time range" (both invalid_argument);
 *   - ProfileTypes with start = end = 0 lists every stored type;
 *   - LabelNames / LabelValues / Series take a list of selector strings
 *     that are OR'ed; none means every series; the answer is sorted and
 *     LabelNames includes the internal "__*" names (Grafana filters them);
 *   - SelectMergeStacktraces' max_nodes: 0 means the default (8192),
 *     above the maximum is invalid_argument, as in Pyroscope;
 *   - SelectSeries' step is in seconds (a double); points sit at multiples
 *     of the step; the value is the sum of the profiles' totals in the step.
 *     aggregation AVERAGE is not implemented yet and is refused with
 *     unimplemented rather than silently summed.
 */
#include "qry_int.h"

#include <math.h>
#include <string.h>

#include "common/connect.h"
#include "common/flamegraph.h"
#include "common/labels.h"
#include "common/ptype.h"
#include "common/selector.h"
#include "common/tenant.h"

#include "querier/v1/querier.pb-c.h"

static int
call_tenant(struct querier *q, struct sm_connect_call *call,
    const char **tenant, struct sm_err *err)
{
	return (sm_tenant_resolve(q->cfg.multitenancy,
	    sm_http_header(call->http, "X-Scope-OrgID"), tenant, err));
}

static int
check_range(int64_t start, int64_t end, struct sm_err *err)
{
	if (start == 0 || end == 0)
		return (sm_err_set(err, SM_EINVAL, "missing time range in the "
		    "query"));
	if (start > end)
		return (sm_err_set(err, SM_EINVAL, "invalid time range: start "
		    "is after end"));
	return (0);
}

/* A selector from a profile type id and a label selector text. */
static int
build_selector(const char *type_id, const char *label_selector,
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
	int rv = 0;

	memset(res, 0, sizeof(*res));
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
		lr.all_time = start == 0 && end == 0;
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

static int
m_label_names(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	const Types__V1__LabelNamesRequest *in = (const void *)req;
	Types__V1__LabelNamesResponse *out;
	struct qry_labels_result res;
	const char *tenant;
	int rv;

	if ((rv = call_tenant(arg, call, &tenant, err)) != 0 ||
	    (rv = labels_or(arg, tenant, in->matchers, in->n_matchers,
	    in->start, in->end, SMOLDER__V1__LABELS_KIND__LABEL_NAMES, NULL,
	    NULL, 0, call->arena, &res, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	types__v1__label_names_response__init(out);
	out->names = res.names;
	out->n_names = uniq(res.names, res.nnames);
	*resp = &out->base;
	return (0);
}

static int
m_label_values(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	const Types__V1__LabelValuesRequest *in = (const void *)req;
	Types__V1__LabelValuesResponse *out;
	struct qry_labels_result res;
	const char *tenant;
	int rv;

	if (in->name == NULL || in->name[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "name is required"));
	if ((rv = call_tenant(arg, call, &tenant, err)) != 0 ||
	    (rv = labels_or(arg, tenant, in->matchers, in->n_matchers,
	    in->start, in->end, SMOLDER__V1__LABELS_KIND__LABEL_VALUES,
	    in->name, NULL, 0, call->arena, &res, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	types__v1__label_values_response__init(out);
	out->names = res.names;
	out->n_names = uniq(res.names, res.nnames);
	*resp = &out->base;
	return (0);
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

	if ((rv = call_tenant(arg, call, &tenant, err)) != 0 ||
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

	if ((rv = call_tenant(arg, call, &tenant, err)) != 0 ||
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
		int dup = 0;

		/* Sets from several matchers may repeat. */
		for (size_t j = 0; j < w && !dup; j++) {
			const Types__V1__Labels *o = out->labels_set[j];

			if (o->n_labels != ls->n)
				continue;
			dup = 1;
			for (uint32_t k = 0; k < ls->n && dup; k++)
				dup = strcmp(o->labels[k]->name,
				    ls->v[k].name) == 0 &&
				    strcmp(o->labels[k]->value,
				    ls->v[k].value) == 0;
		}
		if (dup)
			continue;
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

/* --- SelectMergeStacktraces ----------------------------------------------- */

static int
m_merge_stacktraces(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__SelectMergeStacktracesRequest *in =
	    (const void *)req;
	Querier__V1__SelectMergeStacktracesResponse *out;
	Querier__V1__FlameGraph *fgm;
	Smolder__V1__Select sel;
	struct qry_fan f;
	struct sm_selector s;
	struct sm_mtree m;
	struct sm_fg fg;
	const char *tenant;
	int64_t mn = in->max_nodes;
	int rv, have_m = 0, have_fg = 0;

	qry_fan_init(&f);
	sm_selector_init(&s);
	if ((rv = call_tenant(q, call, &tenant, err)) != 0 ||
	    (rv = check_range(in->start, in->end, err)) != 0)
		goto out;
	if (in->format != QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_UNSPECIFIED &&
	    in->format != QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_FLAMEGRAPH) {
		rv = sm_err_set(err, SM_EUNSUPPORTED, "only the flamegraph "
		    "format is supported");
		goto out;
	}
	if (mn < 0) {
		rv = sm_err_set(err, SM_EINVAL, "max flamegraph nodes limit "
		    "must be set");
		goto out;
	}
	if (mn == 0)
		mn = q->cfg.max_nodes_default;
	if (q->cfg.max_nodes_max > 0 && mn > q->cfg.max_nodes_max) {
		rv = sm_err_set(err, SM_EINVAL, "max flamegraph nodes limit "
		    "%lld is greater than allowed %lld", (long long)mn,
		    (long long)q->cfg.max_nodes_max);
		goto out;
	}
	if ((rv = build_selector(in->profile_typeid, in->label_selector, &s,
	    err)) != 0)
		goto out;
	if ((rv = qry_select_pb(&s, tenant, in->start, in->end, call->arena,
	    &sel)) != 0 || (rv = sm_mtree_init(&m)) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	have_m = 1;
	if ((rv = qry_merge(q, &sel, &m, &f, err)) != 0)
		goto out;
	if ((rv = sm_fg_build(&m.tree, &m.names, m.self, mn, &fg)) != 0) {
		sm_err_set(err, rv, "out of memory");
		goto out;
	}
	have_fg = 1;
	out = sm_arena_alloc(call->arena, sizeof(*out));
	fgm = sm_arena_alloc(call->arena, sizeof(*fgm));
	if (out == NULL || fgm == NULL)
		goto oom;
	querier__v1__select_merge_stacktraces_response__init(out);
	querier__v1__flame_graph__init(fgm);
	out->flamegraph = fgm;
	fgm->total = fg.total;
	fgm->max_self = fg.max_self;
	fgm->n_names = fg.nnames;
	fgm->names = sm_arena_alloc(call->arena, (fg.nnames + 1) *
	    sizeof(char *));
	fgm->n_levels = fg.nlevels;
	fgm->levels = sm_arena_alloc(call->arena, (fg.nlevels + 1) *
	    sizeof(*fgm->levels));
	if (fgm->names == NULL || fgm->levels == NULL)
		goto oom;
	for (uint32_t i = 0; i < fg.nnames; i++) {
		if ((fgm->names[i] = sm_arena_strndup(call->arena,
		    fg.names[i], fg.name_len[i])) == NULL)
			goto oom;
	}
	for (uint32_t i = 0; i < fg.nlevels; i++) {
		Querier__V1__Level *l = sm_arena_alloc(call->arena, sizeof(*l));

		if (l == NULL)
			goto oom;
		querier__v1__level__init(l);
		l->n_values = fg.level_len[i];
		l->values = sm_arena_alloc(call->arena, ((size_t)l->n_values +
		    1) * sizeof(int64_t));
		if (l->values == NULL)
			goto oom;
		memcpy(l->values, fg.levels[i], l->n_values * sizeof(int64_t));
		fgm->levels[i] = l;
	}
	*resp = &out->base;
	rv = 0;
	goto out;
oom:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	if (have_fg)
		sm_fg_fini(&fg);
	if (have_m)
		sm_mtree_fini(&m);
	qry_fan_close(&f, true);
	sm_selector_fini(&s);
	return (rv);
}

/* --- SelectSeries --------------------------------------------------------- */

static int
m_select_series(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	const Querier__V1__SelectSeriesRequest *in = (const void *)req;
	Querier__V1__SelectSeriesResponse *out;
	Smolder__V1__SeriesRequest sr = SMOLDER__V1__SERIES_REQUEST__INIT;
	Smolder__V1__Select sel;
	struct qry_fan f;
	struct qry_series *gs;
	struct sm_selector s;
	const char *tenant;
	int64_t step_ms;
	uint32_t ng;
	int rv;

	qry_fan_init(&f);
	sm_selector_init(&s);
	if ((rv = call_tenant(q, call, &tenant, err)) != 0 ||
	    (rv = check_range(in->start, in->end, err)) != 0)
		goto out;
	if (in->aggregation ==
	    TYPES__V1__TIME_SERIES_AGGREGATION_TYPE__TIME_SERIES_AGGREGATION_TYPE_AVERAGE) {
		rv = sm_err_set(err, SM_EUNSUPPORTED, "aggregation AVERAGE is "
		    "not supported yet");
		goto out;
	}
	if (!(in->step > 0) || !isfinite(in->step) || in->step > 1e9) {
		rv = sm_err_set(err, SM_EINVAL, "step must be a positive "
		    "number of seconds");
		goto out;
	}
	step_ms = (int64_t)llround(in->step * 1000);
	if (step_ms < 1)
		step_ms = 1;
	if ((rv = build_selector(in->profile_typeid, in->label_selector, &s,
	    err)) != 0)
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
	if ((rv = qry_series_select(q, &f, &sr, call->arena, &gs, &ng,
	    err)) != 0)
		goto out;
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	querier__v1__select_series_response__init(out);
	out->series = sm_arena_alloc(call->arena, (ng + 1) *
	    sizeof(*out->series));
	if (out->series == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	/* Copy: the group labels live in the fan's answers. */
	for (uint32_t g = 0; g < ng; g++) {
		Types__V1__Series *c = sm_arena_alloc(call->arena, sizeof(*c));

		if (c == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "oom");
			goto out;
		}
		types__v1__series__init(c);
		c->n_labels = gs[g].nlabels;
		c->n_points = gs[g].n;
		c->labels = sm_arena_alloc(call->arena, (c->n_labels + 1) *
		    sizeof(*c->labels));
		c->points = sm_arena_alloc(call->arena, (c->n_points + 1) *
		    sizeof(*c->points));
		if (c->labels == NULL || c->points == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "oom");
			goto out;
		}
		for (size_t j = 0; j < c->n_labels; j++) {
			Types__V1__LabelPair *lp = sm_arena_alloc(call->arena,
			    sizeof(*lp));

			if (lp == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "oom");
				goto out;
			}
			types__v1__label_pair__init(lp);
			lp->name = dupstr(call->arena, gs[g].labels[j]->name);
			lp->value = dupstr(call->arena, gs[g].labels[j]->value);
			c->labels[j] = lp;
		}
		for (size_t j = 0; j < c->n_points; j++) {
			Types__V1__Point *pt = sm_arena_alloc(call->arena,
			    sizeof(*pt));

			if (pt == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "oom");
				goto out;
			}
			types__v1__point__init(pt);
			pt->value = gs[g].v[j];
			pt->timestamp = gs[g].ts[j];
			c->points[j] = pt;
		}
		out->series[out->n_series++] = c;
	}
	*resp = &out->base;
	rv = 0;
out:
	qry_fan_close(&f, true);
	sm_selector_fini(&s);
	return (rv);
}

int
qry_connect_register(struct querier *q)
{
	static const struct {
		const char *method;
		const ProtobufCMessageDescriptor *in;
		sm_connect_fn fn;
	} methods[] = {
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
	};
	char path[128];
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(methods); i++) {
		snprintf(path, sizeof(path), "/querier.v1.QuerierService/%s",
		    methods[i].method);
		if ((rv = sm_connect_route(q->http, path, methods[i].in,
		    methods[i].fn, q, 0)) != 0)
			return (rv);
	}
	return (0);
}
