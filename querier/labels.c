/*
 * labels.c -- label and app listing endpoints (docs/wire-formats.md §3):
 *
 *   GET /labels[?query=&from=&until=]           og: label names
 *   GET /label-values?label=X[&query=...]       og: values; __name__ gives
 *                                               og app names "svc.cpu"
 *   GET /pyroscope/label-values?label=X          v1: __name__ gives
 *                                               profile type ids
 *   GET /api/apps                                og: app list with metadata
 *
 * `query` is optional and takes any /render query form; `from`/`until` are
 * optional attime values -- when both are absent the whole stored history
 * is searched (og Pyroscope listed every app regardless of time).
 * The tenant's range limits apply (qry_int.h qry_limit_range): with
 * max_query_lookback "the whole history" is the lookback window, a range
 * that ended before it lists nothing (200, empty list), and an explicit
 * range is held to max_query_length.
 *
 * Decisions: /labels lists the names users tag with -- internal names
 * starting with "__" are left out, except __name__ (og listed it); the
 * Connect LabelNames method returns every name.  og app names exist only
 * for profile types that have a legacy suffix (common/ptype.h
 * sm_legacy_suffix_for), so every listed name can be queried back with
 * FlameQL; units come from the type (objects, bytes, samples) as og
 * showed them, sampleRate and spyName from the upload's metadata.
 * Errors use Pyroscope's JSON error body.
 */
#include "qry_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/attime.h"
#include "common/labels.h"
#include "common/ptype.h"
#include "common/selector.h"
#include "common/auth.h"
#include "common/tenant.h"

static int
cmp_str(const void *a, const void *b)
{
	return (strcmp(*(char *const *)a, *(char *const *)b));
}

/* A sorted, unique array of strings (arena-owned). */
struct strset {
	char **v;
	uint32_t n, cap;
};

static int
strset_add(struct strset *s, struct sm_arena *a, const char *x)
{
	if (s->n == s->cap) {
		uint32_t ncap = s->cap ? s->cap * 2 : 64;
		char **nv = sm_arena_grow(a, s->v, s->n, ncap, sizeof(*nv));

		if (nv == NULL)
			return (SM_ENOMEM);
		s->v = nv;
		s->cap = ncap;
	}
	if ((s->v[s->n] = sm_arena_strndup(a, x, strlen(x))) == NULL)
		return (SM_ENOMEM);
	s->n++;
	return (0);
}

static void
strset_finish(struct strset *s)
{
	uint32_t w = 0;

	if (s->n > 0)
		qsort(s->v, s->n, sizeof(*s->v), cmp_str);
	for (uint32_t i = 0; i < s->n; i++) {
		if (w == 0 || strcmp(s->v[w - 1], s->v[i]) != 0)
			s->v[w++] = s->v[i];
	}
	s->n = w;
}

static void
reply_strset(struct sm_http_req *r, const struct strset *s)
{
	struct sm_buf out = SM_BUF_INIT;

	sm_buf_putc(&out, '[');
	for (uint32_t i = 0; i < s->n; i++) {
		if (i > 0)
			sm_buf_putc(&out, ',');
		sm_buf_json_str(&out, s->v[i], strlen(s->v[i]));
	}
	sm_buf_puts(&out, "]\n");
	if (sm_buf_error(&out) != 0) {
		sm_buf_fini(&out);
		sm_http_reply_error(r, 500, "internal", "out of memory");
		return;
	}
	sm_http_reply_buf(r, 200, "application/json", &out);
}

/*
 * The selection of a label request: tenant, optional query, optional
 * range.  Fills `sel` (matchers in `a`) and *all_time, with the tenant's
 * range limits applied (qry_limit_range); *empty when the range ended
 * before max_query_lookback (nothing to list).
 */
static int
label_select(struct querier *q, struct sm_http_req *r, struct sm_query *qq,
    struct sm_arena *a, Smolder__V1__Select *sel, int *all_time, bool *empty,
    struct sm_err *err)
{
	bool at;
	const char *tenant, *query, *from, *until;
	int64_t now = sm_now_ms();
	int rv;

	smolder__v1__select__init(sel);
	if ((rv = sm_http_tenant(r, q->cfg.multitenancy, &tenant,
	    err)) != 0)
		return (rv);
	sel->tenant = (char *)tenant;
	query = sm_http_query(r, "query");
	if (query != NULL && query[0] != '\0' &&
	    (rv = sm_query_parse(qq, query, err)) != 0)
		return (rv);
	from = sm_http_query(r, "from");
	until = sm_http_query(r, "until");
	*all_time = (from == NULL || *from == '\0') &&
	    (until == NULL || *until == '\0');
	if (!*all_time) {
		if ((rv = sm_attime_parse(from != NULL && *from ? from : "0",
		    now, &sel->start_ms, err)) != 0 ||
		    (rv = sm_attime_parse(until != NULL && *until ? until :
		    "now", now, &sel->end_ms, err)) != 0)
			return (rv);
		if (sel->start_ms > sel->end_ms)
			return (sm_err_set(err, SM_EINVAL, "invalid time "
			    "range: from is after until"));
	}
	at = *all_time;
	if ((rv = qry_limit_range(q, tenant, &sel->start_ms, &sel->end_ms,
	    &at, empty, err)) != 0)
		return (rv);
	*all_time = at;
	sel->n_matchers = qq->sel.n;
	sel->matchers = sm_arena_alloc(a, (size_t)SM_MAX(qq->sel.n, 1) *
	    sizeof(*sel->matchers));
	if (sel->matchers == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < qq->sel.n; i++) {
		Smolder__V1__Matcher *m = sm_arena_alloc(a, sizeof(*m));

		if (m == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		smolder__v1__matcher__init(m);
		m->type = (Smolder__V1__MatchType)qq->sel.m[i].type;
		m->name = qq->sel.m[i].name;
		m->value = qq->sel.m[i].value;
		sel->matchers[i] = m;
	}
	return (0);
}

/* Label sets in the ingesters' order (pairwise by name, then value;
 * shorter first). */
static int
labelset_cmp(const void *a, const void *b)
{
	const struct qry_labelset *x = a, *y = b;

	for (uint32_t i = 0; i < x->n && i < y->n; i++) {
		int c = strcmp(x->v[i].name, y->v[i].name);

		if (c == 0)
			c = strcmp(x->v[i].value, y->v[i].value);
		if (c != 0)
			return (c);
	}
	return (SM_CMP(x->n, y->n));
}

void
qry_labelsets_dedupe(struct qry_labels_result *r)
{
	uint32_t k = 0;

	if (r->nsets < 2)
		return;
	qsort(r->sets, r->nsets, sizeof(*r->sets), labelset_cmp);
	for (uint32_t i = 0; i < r->nsets; i++) {
		if (k > 0 && labelset_cmp(&r->sets[k - 1], &r->sets[i]) == 0)
			continue;   /* a replica's copy */
		r->sets[k++] = r->sets[i];
	}
	r->nsets = k;
}

int
qry_labels(struct querier *q, const Smolder__V1__LabelsRequest *lr,
    struct sm_arena *a, struct qry_labels_result *out, struct sm_err *err)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	struct qry_fan f;
	struct strset names = { NULL, 0, 0 };
	int rv;

	memset(out, 0, sizeof(*out));
	qry_fan_init(&f);
	req.method_case = SMOLDER__V1__REQUEST__METHOD_LABELS;
	req.labels = (Smolder__V1__LabelsRequest *)lr;
	if ((rv = qry_fanout_same(q, &f, &req, "labels", err)) != 0)
		goto out;
	for (uint32_t i = 0; i < f.n; i++) {
		const Smolder__V1__Response *resp = f.calls[i].resp;
		const Smolder__V1__LabelsResponse *l;

		if (f.calls[i].rv != 0)
			continue;
		if (resp->result_case != SMOLDER__V1__RESPONSE__RESULT_LABELS) {
			rv = sm_err_set(err, SM_EPROTO, "ingester answered "
			    "without a labels result");
			goto out;
		}
		l = resp->labels;
		for (size_t k = 0; k < l->n_names; k++) {
			if ((rv = strset_add(&names, a, l->names[k])) != 0)
				goto oom;
		}
		for (size_t k = 0; k < l->n_series; k++) {
			struct qry_labelset *ls;
			const Types__V1__Labels *src = l->series[k];
			const Smolder__V1__SeriesMeta *m = k < l->n_meta ?
			    l->meta[k] : NULL;

			if (out->nsets == out->sets_cap) {
				uint32_t ncap = out->sets_cap ?
				    out->sets_cap * 2 : 32;
				struct qry_labelset *ns = sm_arena_grow(a,
				    out->sets, out->nsets, ncap, sizeof(*ns));

				if (ns == NULL)
					goto oom;
				out->sets = ns;
				out->sets_cap = ncap;
			}
			ls = &out->sets[out->nsets++];
			memset(ls, 0, sizeof(*ls));
			ls->n = (uint32_t)src->n_labels;
			ls->v = sm_arena_alloc(a, (size_t)SM_MAX(ls->n, 1) *
			    sizeof(*ls->v));
			if (ls->v == NULL)
				goto oom;
			for (uint32_t j = 0; j < ls->n; j++) {
				const char *nm = src->labels[j]->name;
				const char *vv = src->labels[j]->value;

				ls->v[j].name = sm_arena_strndup(a, nm,
				    strlen(nm));
				ls->v[j].value = sm_arena_strndup(a, vv,
				    strlen(vv));
				if (ls->v[j].name == NULL ||
				    ls->v[j].value == NULL)
					goto oom;
			}
			if (m != NULL) {
				ls->spy = sm_arena_strndup(a, m->spy_name,
				    strlen(m->spy_name));
				ls->sample_rate = m->sample_rate;
				if (ls->spy == NULL)
					goto oom;
			}
		}
	}
	strset_finish(&names);
	out->names = names.v;
	out->nnames = names.n;
	qry_labelsets_dedupe(out);
	rv = 0;
	goto out;
oom:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	qry_fan_close(&f, true);
	return (rv);
}

/* GET /labels, /label-values, /pyroscope/label-values. */
static void
label_handler(struct sm_http_req *r, struct querier *q, int names_only,
    int v1)
{
	Smolder__V1__LabelsRequest lr = SMOLDER__V1__LABELS_REQUEST__INIT;
	Smolder__V1__Select sel;
	struct qry_labels_result res;
	struct strset out = { NULL, 0, 0 };
	struct sm_query qq;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;
	const char *label = NULL;
	char *names[] = { SM_LABEL_SERVICE_NAME, SM_LABEL_NAME, SM_LABEL_TYPE,
		SM_LABEL_UNIT };
	int all_time, rv, apps = 0;
	bool empty;

	sm_err_clear(&err);
	sm_query_init(&qq);
	if (a == NULL) {
		sm_http_reply_error(r, 503, "unavailable", "out of memory");
		sm_query_fini(&qq);
		return;
	}
	if (!names_only) {
		label = sm_http_query(r, "label");
		if (label == NULL || label[0] == '\0') {
			sm_http_reply_error(r, 400, "invalid_argument", "%s",
			    v1 ? "label parameter is required" :
			    "invalid parameter: \"label parameter is "
			    "required\"");
			goto done;
		}
	}
	if ((rv = label_select(q, r, &qq, a, &sel, &all_time, &empty,
	    &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		goto done;
	}
	lr.select = &sel;
	lr.all_time = all_time;
	if (names_only) {
		lr.kind = SMOLDER__V1__LABELS_KIND__LABEL_NAMES;
	} else if (strcmp(label, SM_LABEL_NAME) == 0 && !v1) {
		/* og app names, built from (service, type) sets. */
		lr.kind = SMOLDER__V1__LABELS_KIND__SERIES_LABELS;
		lr.n_label_names = SM_ARRAY_LEN(names);
		lr.label_names = names;
		apps = 1;
	} else {
		lr.kind = SMOLDER__V1__LABELS_KIND__LABEL_VALUES;
		lr.name = (char *)(v1 && strcmp(label, SM_LABEL_NAME) == 0 ?
		    SM_LABEL_PROFILE_TYPE : label);
	}
	memset(&res, 0, sizeof(res));
	if (!empty && (rv = qry_labels(q, &lr, a, &res, &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		goto done;
	}
	for (uint32_t i = 0; i < res.nnames && !apps; i++) {
		if (names_only && strncmp(res.names[i], "__", 2) == 0 &&
		    strcmp(res.names[i], SM_LABEL_NAME) != 0)
			continue;
		if (strset_add(&out, a, res.names[i]) != 0)
			goto oom;
	}
	for (uint32_t i = 0; i < res.nsets && apps; i++) {
		char app[4096];

		if (qry_app_name(&res.sets[i], app, sizeof(app)) &&
		    strset_add(&out, a, app) != 0)
			goto oom;
	}
	strset_finish(&out);
	reply_strset(r, &out);
	goto done;
oom:
	sm_http_reply_error(r, 500, "internal", "out of memory");
done:
	sm_query_fini(&qq);
	sm_arena_destroy(a);
}

bool
qry_app_name(const struct qry_labelset *ls, char *dst, size_t n)
{
	const char *svc = sm_labels_get(ls->v, ls->n, SM_LABEL_SERVICE_NAME);
	const char *metric = sm_labels_get(ls->v, ls->n, SM_LABEL_NAME);
	const char *type = sm_labels_get(ls->v, ls->n, SM_LABEL_TYPE);
	const char *unit = sm_labels_get(ls->v, ls->n, SM_LABEL_UNIT);
	const char *suffix;
	int w;

	if (svc == NULL || metric == NULL || type == NULL || unit == NULL)
		return (false);
	if ((suffix = sm_legacy_suffix_for(metric, type, unit)) == NULL)
		return (false);
	w = snprintf(dst, n, "%s.%s", svc, suffix);
	return (w > 0 && (size_t)w < n);
}

static void
labels_h(struct sm_http_req *r, void *arg)
{
	label_handler(r, arg, 1, 0);
}

static void
label_values_h(struct sm_http_req *r, void *arg)
{
	label_handler(r, arg, 0, 0);
}

static void
label_values_v1_h(struct sm_http_req *r, void *arg)
{
	label_handler(r, arg, 0, 1);
}

/* One application of /api/apps: its name and a label set that has it. */
struct app {
	char *name;
	const struct qry_labelset *ls;
};

/* By name; the sets of one name stay in their order (ls points into one
 * array), so the first set of each name still comes first. */
static int
app_cmp(const void *a, const void *b)
{
	const struct app *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return (c != 0 ? c : SM_CMP(x->ls, y->ls));
}

/* GET /api/apps: [{"name","spyName","sampleRate","units"}] by name. */
static void
apps_handler(struct sm_http_req *r, void *arg)
{
	struct querier *q = arg;
	Smolder__V1__LabelsRequest lr = SMOLDER__V1__LABELS_REQUEST__INIT;
	Smolder__V1__Select sel = SMOLDER__V1__SELECT__INIT;
	struct qry_labels_result res;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_buf out = SM_BUF_INIT;
	struct strset done = { NULL, 0, 0 };
	struct sm_err err;
	const char *tenant;
	char *names[] = { SM_LABEL_SERVICE_NAME, SM_LABEL_NAME, SM_LABEL_TYPE,
		SM_LABEL_UNIT };
	struct app *apps = NULL;
	uint32_t napps = 0;
	bool all_time = true, empty;
	int rv;

	sm_err_clear(&err);
	if (a == NULL) {
		sm_http_reply_error(r, 503, "unavailable", "out of memory");
		return;
	}
	if ((rv = sm_http_tenant(r, q->cfg.multitenancy, &tenant,
	    &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		goto out;
	}
	sel.tenant = (char *)tenant;
	/* All time, which max_query_lookback narrows (qry_limit_range). */
	if ((rv = qry_limit_range(q, tenant, &sel.start_ms, &sel.end_ms,
	    &all_time, &empty, &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		goto out;
	}
	lr.select = &sel;
	lr.all_time = all_time;
	lr.kind = SMOLDER__V1__LABELS_KIND__SERIES_LABELS;
	lr.n_label_names = SM_ARRAY_LEN(names);
	lr.label_names = names;
	if ((rv = qry_labels(q, &lr, a, &res, &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		goto out;
	}
	if ((apps = sm_arena_alloc(a, (size_t)SM_MAX(res.nsets, 1) *
	    sizeof(*apps))) == NULL)
		goto oom;
	for (uint32_t i = 0; i < res.nsets; i++) {
		char name[4096];

		if (!qry_app_name(&res.sets[i], name, sizeof(name)))
			continue;
		if ((apps[napps].name = sm_arena_strndup(a, name,
		    strlen(name))) == NULL)
			goto oom;
		apps[napps++].ls = &res.sets[i];
	}
	/* Sort by name; the first set of each name gives its metadata. */
	qsort(apps, napps, sizeof(*apps), app_cmp);
	sm_buf_putc(&out, '[');
	for (uint32_t i = 0; i < napps; i++) {
		const struct qry_labelset *ls = apps[i].ls;
		const char *units;
		uint32_t rate;

		if (done.n > 0 && strcmp(done.v[done.n - 1], apps[i].name) == 0)
			continue;
		if (strset_add(&done, a, apps[i].name) != 0)
			goto oom;
		sm_ptype_render_units(sm_labels_get(ls->v, ls->n,
		    SM_LABEL_TYPE), sm_labels_get(ls->v, ls->n, SM_LABEL_UNIT),
		    &units, &rate);
		if (done.n > 1)
			sm_buf_putc(&out, ',');
		sm_buf_puts(&out, "{\"name\":");
		sm_buf_json_str(&out, apps[i].name, strlen(apps[i].name));
		sm_buf_puts(&out, ",\"spyName\":");
		sm_buf_json_str(&out, ls->spy ? ls->spy : "",
		    ls->spy ? strlen(ls->spy) : 0);
		sm_buf_printf(&out, ",\"sampleRate\":%u,\"units\":",
		    ls->sample_rate);
		sm_buf_json_str(&out, units, strlen(units));
		sm_buf_putc(&out, '}');
	}
	sm_buf_puts(&out, "]\n");
	if (sm_buf_error(&out) != 0)
		goto oom;
	sm_http_reply_buf(r, 200, "application/json", &out);
	goto out;
oom:
	sm_http_reply_error(r, 500, "internal", "out of memory");
out:
	sm_buf_fini(&out);
	sm_arena_destroy(a);
}

int
qry_labels_register(struct querier *q)
{
	static const struct {
		const char *path;
		sm_http_fn fn;
	} routes[] = {
		{ "/labels", labels_h },
		{ "/label-values", label_values_h },
		{ "/pyroscope/label-values", label_values_v1_h },
		{ "/api/apps", apps_handler },
	};
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(routes); i++) {
		if ((rv = qry_route_http(q, "GET",
		    routes[i].path,
		    routes[i].fn, q, 0)) != 0)
			return (rv);
	}
	return (0);
}
