/*
 * render.c -- GET /render and /pyroscope/render (spec §3).
 *
 * Parameters: query (FlameQL app.cpu{...}, the profile-type id form, or a
 * bare selector; og's `name` is accepted when query is absent), from and
 * until (attime; default now-1h .. now, as og Pyroscope), maxNodes or
 * max-nodes (0 = the default, 8192), format = json (default) | collapsed.
 *
 * The JSON body is the flamebearer profile exactly as Pyroscope v1's shim
 * encodes it (field order and escaping of Go's encoding/json, trailing
 * newline):
 *   {"version":1,"flamebearer":{...},"metadata":{"format":"single",
 *    "spyName":..,"sampleRate":..,"units":..,"name":<sample type>},
 *    "timeline":{"startTime":..,"samples":[..],"durationDelta":..,
 *    "watermarks":null},"groups":null,"heatmap":null}
 * Decisions where Pyroscope v1 is silent or odd, and why:
 *   - metadata.spyName is the spy of the matched series when they all
 *     agree (v1 leaves it empty; the og UI uses it to colour frames);
 *   - the timeline step is Pyroscope's (range / 1500 rounded, >= 15 s);
 *     its start is snapped down to a step multiple and it has
 *     ceil((until - start) / step) points, so the last partial step is
 *     not dropped;
 *   - a range longer than -querier.max-query-length is 400 with
 *     Pyroscope's query_limit message.
 */
#include "qry_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/attime.h"
#include "common/flamegraph.h"
#include "common/log.h"
#include "common/ptype.h"
#include "common/selector.h"
#include "common/tenant.h"

/* Pyroscope's CalcPointInterval: (until - from) / 1500, minimum 15 s,
 * rounded to a "nice" interval.  Milliseconds in and out. */

int64_t
qry_calc_step_ms(int64_t from_ms, int64_t until_ms)
{
	static const struct {
		int64_t upto, step;
	} r[] = {
		{ 10, 1 }, { 15, 10 }, { 35, 20 }, { 75, 50 }, { 150, 100 },
		{ 350, 200 }, { 750, 500 }, { 1500, 1000 }, { 3500, 2000 },
		{ 7500, 5000 }, { 12500, 10000 }, { 17500, 15000 },
		{ 25000, 20000 }, { 45000, 30000 }, { 90000, 60000 },
		{ 210000, 120000 }, { 450000, 300000 }, { 750000, 600000 },
		{ 1050000, 900000 }, { 1500000, 1200000 },
		{ 2700000, 1800000 }, { 5400000, 3600000 },
		{ 9000000, 7200000 }, { 16200000, 10800000 },
		{ 32400000, 21600000 }, { 86400000, 43200000 },
		{ 172800000, 86400000 }, { 604800000, 86400000 },
		{ 1814400000, 604800000 },
	};
	/* Go divides nanoseconds; do the same to round identically. */
	int64_t iv_ns = ((until_ms - from_ms) * 1000000) / 1500;

	if (iv_ns < 15000000000LL)
		return (15000);
	for (size_t i = 0; i < SM_ARRAY_LEN(r); i++) {
		if (iv_ns <= r[i].upto * 1000000)
			return (r[i].step);
	}
	if (iv_ns < 3628800000LL * 1000000)
		return (2592000000LL);
	return (31536000000LL);
}

static void
reply_err(struct sm_http_req *r, int rv, const char *msg)
{
	const char *code;
	int status;

	sm_http_status_for(rv, &status, &code);
	sm_http_reply_error(r, status, code, "%s", msg);
}

/* The selector as RPC matchers, allocated in `a`. */
int
qry_select_pb(const struct sm_selector *s, const char *tenant,
    int64_t start, int64_t end, struct sm_arena *a, Smolder__V1__Select *sel)
{

	smolder__v1__select__init(sel);
	sel->tenant = (char *)tenant;
	sel->start_ms = start;
	sel->end_ms = end;
	sel->n_matchers = s->n;
	sel->matchers = sm_arena_alloc(a, (size_t)SM_MAX(s->n, 1) *
	    sizeof(*sel->matchers));
	if (sel->matchers == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < s->n; i++) {
		Smolder__V1__Matcher *m = sm_arena_alloc(a, sizeof(*m));

		if (m == NULL)
			return (SM_ENOMEM);
		smolder__v1__matcher__init(m);
		m->type = (Smolder__V1__MatchType)s->m[i].type;
		m->name = s->m[i].name;
		m->value = s->m[i].value;
		sel->matchers[i] = m;
	}
	return (0);
}

/* Parsed and validated /render parameters. */
struct render_params {
	struct sm_query q;
	const char *tenant;
	int64_t start, end;
	int64_t max_nodes;
	int collapsed;
};

static int
render_parse(struct querier *qr, struct sm_http_req *r,
    struct render_params *p, struct sm_err *err)
{
	const char *query, *fmt, *v;
	int64_t now = sm_now_ms(), mn = 0, x;
	int rv;

	if ((rv = sm_tenant_resolve(qr->cfg.multitenancy,
	    sm_http_header(r, "X-Scope-OrgID"), &p->tenant, err)) != 0)
		return (rv);
	query = sm_http_query(r, "query");
	if (query == NULL || query[0] == '\0')
		query = sm_http_query(r, "name");
	if (query == NULL || query[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "'query' is required"));
	if ((rv = sm_query_parse(&p->q, query, err)) != 0)
		return (rv);
	v = sm_http_query(r, "from");
	if ((rv = sm_attime_parse(v != NULL && *v ? v : "now-1h", now,
	    &p->start, err)) != 0)
		return (rv);
	v = sm_http_query(r, "until");
	if ((rv = sm_attime_parse(v != NULL && *v ? v : "now", now, &p->end,
	    err)) != 0)
		return (rv);
	if (p->start > p->end)
		return (sm_err_set(err, SM_EINVAL, "invalid time range: from "
		    "is after until"));
	if (qr->cfg.max_query_length_ms > 0 &&
	    p->end - p->start > qr->cfg.max_query_length_ms)
		return (sm_err_set(err, SM_EINVAL, "the query time range "
		    "exceeds the limit (max_query_length, actual: %llds, "
		    "limit: %llds)", (long long)(p->end - p->start) / 1000,
		    (long long)qr->cfg.max_query_length_ms / 1000));
	/* As Pyroscope: max-nodes, then maxNodes; unparsable or 0 ignored. */
	if ((v = sm_http_query(r, "max-nodes")) != NULL &&
	    sm_parse_int(v, &x) == 0 && x != 0)
		mn = x;
	if ((v = sm_http_query(r, "maxNodes")) != NULL &&
	    sm_parse_int(v, &x) == 0 && x != 0)
		mn = x;
	if (mn < 0)
		return (sm_err_set(err, SM_EINVAL, "max flamegraph nodes "
		    "limit must be set"));
	if (mn == 0)
		mn = qr->cfg.max_nodes_default;
	if (qr->cfg.max_nodes_max > 0 && mn > qr->cfg.max_nodes_max)
		return (sm_err_set(err, SM_EINVAL, "max flamegraph nodes limit "
		    "%lld is greater than allowed %lld", (long long)mn,
		    (long long)qr->cfg.max_nodes_max));
	p->max_nodes = mn;
	fmt = sm_http_query(r, "format");
	if (fmt == NULL || fmt[0] == '\0' || strcmp(fmt, "json") == 0)
		p->collapsed = 0;
	else if (strcmp(fmt, "collapsed") == 0)
		p->collapsed = 1;
	else
		return (sm_err_set(err, SM_EUNSUPPORTED, "format \"%s\" is not "
		    "supported by /render (json, collapsed)", fmt));
	return (0);
}

/* Per-target requests for the plan in f, built in f->arena. */
static Smolder__V1__Request **
planned_requests(struct qry_fan *f, Smolder__V1__Request__MethodCase mc,
    const Smolder__V1__SeriesRequest *tmpl)
{
	Smolder__V1__Request **reqs;

	if (f->arena == NULL && (f->arena = sm_arena_create(0)) == NULL)
		return (NULL);
	if ((reqs = sm_arena_calloc(f->arena, f->n, sizeof(*reqs))) == NULL)
		return (NULL);
	for (uint32_t i = 0; i < f->n; i++) {
		const Smolder__V1__Select *sel = f->sel == NULL ? f->base :
		    f->sel[i];
		Smolder__V1__Request *r;

		if (sel == NULL)
			continue;
		if ((r = sm_arena_alloc(f->arena, sizeof(*r))) == NULL)
			return (NULL);
		smolder__v1__request__init(r);
		r->method_case = mc;
		if (mc == SMOLDER__V1__REQUEST__METHOD_MERGE) {
			Smolder__V1__MergeRequest *m = sm_arena_alloc(f->arena,
			    sizeof(*m));

			if (m == NULL)
				return (NULL);
			smolder__v1__merge_request__init(m);
			m->select = (Smolder__V1__Select *)sel;
			r->merge = m;
		} else {
			Smolder__V1__SeriesRequest *x = sm_arena_alloc(
			    f->arena, sizeof(*x));

			if (x == NULL)
				return (NULL);
			*x = *tmpl;
			x->select = (Smolder__V1__Select *)sel;
			r->series = x;
		}
		reqs[i] = r;
	}
	return (reqs);
}

int
qry_merge(struct querier *qr, const Smolder__V1__Select *sel,
    struct sm_mtree *m, struct qry_fan *f, struct sm_err *err)
{
	for (int attempt = 1;; attempt++) {
		Smolder__V1__Request **reqs;
		uint8_t *must;
		int rv;

		if ((rv = qry_fan_open(qr, f, err)) != 0)
			return (rv);
		if ((rv = qry_plan(qr, f, sel, err)) == 0) {
			if ((reqs = planned_requests(f,
			    SMOLDER__V1__REQUEST__METHOD_MERGE, NULL)) == NULL ||
			    (must = sm_arena_alloc(f->arena, SM_MAX(f->n, 1))) ==
			    NULL)
				return (sm_err_set(err, SM_ENOMEM,
				    "out of memory"));
			rv = qry_fan_round(qr, f, reqs, f->n, "merge",
			    qry_plan_must(f, must), err);
		}
		if (rv == SM_EAGAIN && attempt < QRY_MAX_ATTEMPTS)
			continue;
		if (rv == SM_EAGAIN)
			return (sm_err_set(err, SM_EUNAVAIL, "ingesters kept "
			    "failing during the query: %s", err->msg));
		if (rv != 0)
			return (rv);
		for (uint32_t i = 0; i < f->n; i++) {
			const struct qry_call *c = &f->calls[i];

			if (c->rv != 0)
				continue;
			if (c->resp->result_case !=
			    SMOLDER__V1__RESPONSE__RESULT_MERGE)
				return (sm_err_set(err, SM_EPROTO, "ingester "
				    "answered without a merge result"));
			if ((rv = sm_mtree_add_pb(m, c->resp->merge, err)) != 0)
				return (rv);
		}
		return (0);
	}
}

/* A merged (group, timestamp, value) point. */
struct series_pt {
	uint32_t group;
	int64_t ts;
	double v;
};

static int
pt_cmp(const void *a, const void *b)
{
	const struct series_pt *x = a, *y = b;

	if (x->group != y->group)
		return (x->group < y->group ? -1 : 1);
	return (x->ts < y->ts ? -1 : x->ts > y->ts);
}

static int
labels_cmp(const Types__V1__Series *x, const Types__V1__Series *y)
{
	size_t n = SM_MIN(x->n_labels, y->n_labels);

	for (size_t i = 0; i < n; i++) {
		int c = strcmp(x->labels[i]->name, y->labels[i]->name);

		if (c == 0)
			c = strcmp(x->labels[i]->value, y->labels[i]->value);
		if (c != 0)
			return (c);
	}
	return (x->n_labels < y->n_labels ? -1 : x->n_labels > y->n_labels);
}

static int
group_ptr_cmp(const void *a, const void *b)
{
	return (labels_cmp(*(Types__V1__Series *const *)a,
	    *(Types__V1__Series *const *)b));
}

int
qry_series(struct querier *q, struct qry_fan *f,
    const Smolder__V1__SeriesRequest *sr, struct sm_arena *a,
    struct qry_series **out, uint32_t *nout, struct sm_err *err)
{
	Smolder__V1__Request **reqs;
	Types__V1__Series **groups = NULL;
	struct series_pt *pts = NULL;
	struct qry_series *res;
	uint8_t *must;
	size_t ng = 0, np = 0, k = 0;
	uint32_t nres = 0;
	int rv;

	*out = NULL;
	*nout = 0;
	if ((reqs = planned_requests(f, SMOLDER__V1__REQUEST__METHOD_SERIES,
	    sr)) == NULL || (must = sm_arena_alloc(f->arena,
	    SM_MAX(f->n, 1))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = qry_fan_round(q, f, reqs, f->n, "series",
	    qry_plan_must(f, must), err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < f->n; i++) {
		const struct qry_call *c = &f->calls[i];

		if (c->rv != 0)
			continue;
		if (c->resp->result_case != SMOLDER__V1__RESPONSE__RESULT_SERIES)
			return (sm_err_set(err, SM_EPROTO, "ingester answered "
			    "without a series result"));
		ng += c->resp->series->n_series;
		for (size_t j = 0; j < c->resp->series->n_series; j++)
			np += c->resp->series->series[j]->n_points;
	}
	groups = sm_malloc(SM_MAX(ng, 1) * sizeof(*groups));
	pts = sm_malloc(SM_MAX(np, 1) * sizeof(*pts));
	if (groups == NULL || pts == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	ng = 0;
	for (uint32_t i = 0; i < f->n; i++) {
		const struct qry_call *c = &f->calls[i];

		if (c->rv != 0)
			continue;
		for (size_t j = 0; j < c->resp->series->n_series; j++)
			groups[ng++] = c->resp->series->series[j];
	}
	/* Distinct groups by label values; points tagged with theirs. */
	if (ng > 1)
		qsort(groups, ng, sizeof(*groups), group_ptr_cmp);
	if ((res = sm_arena_calloc(a, SM_MAX(ng, 1), sizeof(*res))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t g = 0; g < ng; g++) {
		const Types__V1__Series *se = groups[g];

		if (nres == 0 || labels_cmp(groups[g - 1], se) != 0) {
			res[nres].labels = se->labels;   /* call arenas */
			res[nres].nlabels = (uint32_t)se->n_labels;
			nres++;
		}
		for (size_t j = 0; j < se->n_points; j++)
			pts[k++] = (struct series_pt){ nres - 1,
			    se->points[j]->timestamp, se->points[j]->value };
	}
	if (k > 1)
		qsort(pts, k, sizeof(*pts), pt_cmp);
	for (size_t i = 0; i < k;) {
		struct qry_series *g = &res[pts[i].group];
		size_t j = i, n = 0;

		while (j < k && pts[j].group == pts[i].group) {
			if (j == i || pts[j].ts != pts[j - 1].ts)
				n++;
			j++;
		}
		g->ts = sm_arena_alloc(a, SM_MAX(n, 1) * sizeof(*g->ts));
		g->v = sm_arena_alloc(a, SM_MAX(n, 1) * sizeof(*g->v));
		if (g->ts == NULL || g->v == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t x = i; x < j; x++) {
			if (x == i || pts[x].ts != pts[x - 1].ts) {
				g->ts[g->n] = pts[x].ts;
				g->v[g->n++] = pts[x].v;
			} else {
				g->v[g->n - 1] += pts[x].v;
			}
		}
		i = j;
	}
	*out = res;
	*nout = nres;
	rv = 0;
out:
	sm_free(groups);
	sm_free(pts);
	return (rv);
}

int
qry_series_select(struct querier *q, struct qry_fan *f,
    const Smolder__V1__SeriesRequest *sr, struct sm_arena *a,
    struct qry_series **out, uint32_t *nout, struct sm_err *err)
{
	for (int attempt = 1;; attempt++) {
		int rv;

		if ((rv = qry_fan_open(q, f, err)) != 0)
			return (rv);
		if ((rv = qry_plan(q, f, sr->select, err)) == 0)
			rv = qry_series(q, f, sr, a, out, nout, err);
		if (rv == SM_EAGAIN && attempt < QRY_MAX_ATTEMPTS)
			continue;
		if (rv == SM_EAGAIN)
			return (sm_err_set(err, SM_EUNAVAIL, "ingesters kept "
			    "failing during the query: %s", err->msg));
		return (rv);
	}
}

/* Append "timeline":{...} built from a per-step series fan-out that uses
 * the merge's plan in f. */
static int
render_timeline(struct querier *qr, struct qry_fan *f,
    const Smolder__V1__Select *sel, struct sm_buf *out, struct sm_err *err)
{
	Smolder__V1__SeriesRequest sr = SMOLDER__V1__SERIES_REQUEST__INIT;
	int64_t step = qry_calc_step_ms(sel->start_ms, sel->end_ms);
	int64_t first = sm_floor_to(sel->start_ms, step);
	int64_t n = sel->end_ms > first ? (sel->end_ms - first + step - 1) /
	    step : 0;
	uint64_t *samples = NULL;
	struct sm_arena *a = NULL;
	struct qry_series *gs;
	uint32_t ng;
	int rv = 0;

	if (n > 1000000)
		return (sm_err_set(err, SM_EINVAL, "timeline too long"));
	if ((samples = sm_calloc((size_t)SM_MAX(n, 1), sizeof(*samples))) ==
	    NULL || (a = sm_arena_create(0)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if (n > 0) {
		sr.select = (Smolder__V1__Select *)sel;
		sr.step_ms = step;
		if ((rv = qry_series(qr, f, &sr, a, &gs, &ng, err)) != 0) {
			if (rv == SM_EAGAIN)
				rv = sm_err_set(err, SM_EUNAVAIL, "an ingester "
				    "failed during the query: %s", err->msg);
			goto out;
		}
		for (uint32_t g = 0; g < ng; g++) {
			for (uint32_t k = 0; k < gs[g].n; k++) {
				int64_t idx = (gs[g].ts[k] - first) / step;

				if (idx >= 0 && idx < n)
					samples[idx] += (uint64_t)gs[g].v[k];
			}
		}
	}
	sm_buf_puts(out, "\"timeline\":{\"startTime\":");
	sm_buf_put_i64(out, first / 1000);
	sm_buf_puts(out, ",\"samples\":[");
	for (int64_t i = 0; i < n; i++) {
		if (i > 0)
			sm_buf_putc(out, ',');
		sm_buf_put_u64(out, samples[i]);
	}
	sm_buf_puts(out, "],\"durationDelta\":");
	sm_buf_put_i64(out, step / 1000);
	sm_buf_puts(out, ",\"watermarks\":null}");
	rv = 0;
out:
	sm_arena_destroy(a);
	sm_free(samples);
	return (rv);
}

static void
render_handler(struct sm_http_req *r, void *arg)
{
	struct querier *qr = arg;
	struct render_params p;
	struct sm_mtree m;
	struct qry_fan f;
	struct sm_fg fg;
	struct sm_buf out = SM_BUF_INIT;
	Smolder__V1__Select sel;
	struct sm_arena *a = NULL;
	struct sm_err err;
	const char *units, *spy = "";
	uint32_t rate;
	int rv, have_merge = 0, have_fg = 0;

	sm_err_clear(&err);
	qry_fan_init(&f);
	memset(&p, 0, sizeof(p));
	memset(&fg, 0, sizeof(fg));
	sm_query_init(&p.q);
	if ((rv = render_parse(qr, r, &p, &err)) != 0)
		goto fail;
	if ((a = sm_arena_create(0)) == NULL ||
	    qry_select_pb(&p.q.sel, p.tenant, p.start, p.end, a, &sel) != 0) {
		rv = sm_err_set(&err, SM_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rv = sm_mtree_init(&m)) != 0) {
		sm_err_set(&err, rv, "out of memory");
		goto fail;
	}
	have_merge = 1;
	if ((rv = qry_merge(qr, &sel, &m, &f, &err)) != 0)
		goto fail;
	if (p.collapsed) {
		if ((rv = sm_fg_write_collapsed(&m.tree, &m.names, m.self,
		    &out)) != 0 || (rv = sm_buf_error(&out)) != 0) {
			sm_err_set(&err, rv, "out of memory");
			goto fail;
		}
		sm_http_reply_buf(r, 200, "text/plain; charset=utf-8", &out);
		goto done;
	}
	if ((rv = sm_fg_build(&m.tree, &m.names, m.self, p.max_nodes,
	    &fg)) != 0) {
		sm_err_set(&err, rv, "out of memory");
		goto fail;
	}
	have_fg = 1;
	sm_ptype_render_units(p.q.sample_type != NULL ? p.q.sample_type : "",
	    p.q.sample_unit != NULL ? p.q.sample_unit : "", &units, &rate);
	if (m.nmeta == 1)
		spy = m.meta[0].spy_name;
	sm_buf_puts(&out, "{\"version\":1,\"flamebearer\":");
	sm_fg_write_json(&fg, &out);
	sm_buf_puts(&out, ",\"metadata\":{\"format\":\"single\",\"spyName\":");
	sm_buf_json_str(&out, spy, strlen(spy));
	sm_buf_puts(&out, ",\"sampleRate\":");
	sm_buf_put_u64(&out, rate);
	sm_buf_puts(&out, ",\"units\":");
	sm_buf_json_str(&out, units, strlen(units));
	sm_buf_puts(&out, ",\"name\":");
	sm_buf_json_str(&out, p.q.sample_type != NULL ? p.q.sample_type : "",
	    p.q.sample_type != NULL ? strlen(p.q.sample_type) : 0);
	sm_buf_puts(&out, "},");
	if ((rv = render_timeline(qr, &f, &sel, &out, &err)) != 0)
		goto fail;
	sm_buf_puts(&out, ",\"groups\":null,\"heatmap\":null}\n");
	if ((rv = sm_buf_error(&out)) != 0) {
		sm_err_set(&err, rv, "response too large or out of memory");
		goto fail;
	}
	sm_http_reply_buf(r, 200, "application/json", &out);
	goto done;
fail:
	if (rv == SM_EPROTO || rv == SM_ENOMEM || rv == SM_EINTERNAL)
		sm_error("querier", "render failed\terr=\"%s\"", err.msg);
	reply_err(r, rv, err.msg[0] ? err.msg : sm_strerror(rv));
done:
	if (have_fg)
		sm_fg_fini(&fg);
	if (have_merge)
		sm_mtree_fini(&m);
	qry_fan_close(&f, true);
	sm_arena_destroy(a);
	sm_query_fini(&p.q);
	sm_buf_fini(&out);
}

int
qry_render_register(struct querier *q)
{
	static const char *const paths[] = { "/render", "/pyroscope/render" };
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(paths); i++) {
		if ((rv = sm_http_route(q->http, "GET", paths[i],
		    render_handler, q, 0)) != 0)
			return (rv);
	}
	return (0);
}
