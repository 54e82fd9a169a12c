/*
 * render.c -- GET /render and /pyroscope/render (docs/wire-formats.md §3), and
 * /render-diff and /pyroscope/render-diff (render_diff_handler below),
 * and GET /api/top-changes (changes_handler, ranking by changes.c) and
 * /api/function-timeline (function_handler: a function's series).
 *
 * Parameters: query (FlameQL app.cpu{...}, the profile-type id form, or a
 * bare selector; og's `name` is accepted when query is absent), from and
 * until (attime; default now-1h .. now, as og Pyroscope), maxNodes or
 * max-nodes (0 = the default, 8192), format = json (default) | collapsed |
 * dot | pprof | html, and v1's groupBy and aggregation (sum | avg) for the
 * timeline (render_timeline).
 *
 * The JSON body is the flamebearer profile exactly as Pyroscope v1's shim
 * encodes it (field order and escaping of Go's encoding/json, trailing
 * newline):
 *   {"version":1,"flamebearer":{...},"metadata":{"format":"single",
 *    "spyName":..,"sampleRate":..,"units":..,"name":<sample type>},
 *    "timeline":{"startTime":..,"samples":[..],"durationDelta":..,
 *    "watermarks":null},"groups":null,"heatmap":null}
 * ("groups" is an object of timelines with groupBy).
 * Decisions where Pyroscope v1 is silent or odd, and why:
 *   - metadata.spyName is the spy of the matched series when they all
 *     agree (v1 leaves it empty; the og UI uses it to colour frames);
 *   - the timeline step is Pyroscope's (range / 1500 rounded, >= 15 s);
 *     its start is snapped down to a step multiple and it has
 *     ceil((until - start) / step) points, so the last partial step is
 *     not dropped;
 *   - a range longer than -querier.max-query-length is 400 with
 *     Pyroscope's query_limit message (measured after
 *     max_query_lookback moved its start, as Pyroscope);
 *   - a range that ends before max_query_lookback is an empty profile
 *     (no flamebearer nodes, zero timeline) with 200; one that starts
 *     before it reads from the lookback on, and its timeline still
 *     covers from..until, 0 before the lookback, as Pyroscope's
 *     backfilled timeline;
 *   - format=collapsed is streamed (collapsed_reply below): a failure
 *     after the 200 line can only cut the body short;
 *   - format=dot is Pyroscope v1's: the merged profile as a Graphviz
 *     call graph in the shape `go tool pprof -dot` draws (dot.c), of the
 *     max-nodes functions of largest cum value, 100 when max-nodes is
 *     absent or 0 (v1's default for dot, not the flamegraph's 8192),
 *     text/plain;
 *   - format=pprof is og Pyroscope's: the merged profile as an
 *     uncompressed google.v1.Profile (pprof.c, the whole tree: what
 *     SelectMergeProfile answers for the same selection), as an
 *     attachment named <app>.pprof, application/octet-stream.  A legacy
 *     query names no period: cpu and wall in nanoseconds get
 *     cpu/nanoseconds (what a sample rate gives their series), other
 *     types none;
 *   - groupBy keys groups by the first label given, as v1's keys are,
 *     and adds up the series that share a key (v1 asks for every
 *     groupBy label and lets the last such series overwrite the
 *     others); the main timeline stays the whole selection's (v1
 *     answers zeros in it when more than one group comes back);
 *   - format=html is og Pyroscope's export: one self-contained page,
 *     the web UI with the JSON answer inside (render_html below);
 *   - /render-diff and the function timeline answer JSON only;
 *   - after a large query the freed heap is given back (sm_mem_release,
 *     common/sm.h), from the handler or, for a stream, when it ends.
 */
#include "qry_int.h"
#include "webui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/attime.h"
#include "common/flamegraph.h"
#include "common/log.h"
#include "common/ptype.h"
#include "common/selector.h"
#include "common/auth.h"
#include "common/tenant.h"
#include "common/tls.h"

static void
reply_err(struct sm_http_req *r, int rv, const char *msg)
{
	const char *code;
	int status;

	sm_http_status_for(rv, &status, &code);
	sm_http_reply_error(r, status, code, "%s", msg);
}

/* Answer r with the JSON built in out, or with the error (rv, err) when
 * there is one or out could not be built; a failure of the server's own
 * is logged as `what` failed. */
static void
render_reply(struct sm_http_req *r, struct sm_buf *out, int rv,
    struct sm_err *err, const char *what)
{
	if (rv == 0 && (rv = sm_buf_error(out)) != 0)
		sm_err_set(err, rv, "response too large or out of memory");
	if (rv == 0) {
		sm_http_reply_buf(r, 200, "application/json", out);
		return;
	}
	if (rv == SM_EPROTO || rv == SM_ENOMEM || rv == SM_EINTERNAL)
		sm_error("querier", "%s failed\terr=\"%s\"", what, err->msg);
	reply_err(r, rv, err->msg[0] ? err->msg : sm_strerror(rv));
}

/* The /render answer formats. */
enum render_fmt { RF_JSON, RF_COLLAPSED, RF_DOT, RF_PPROF, RF_HTML };

/* Parsed and validated /render parameters. */
struct render_params {
	struct sm_query q;
	const char *tenant;
	int64_t start, end;
	int64_t max_nodes;         /* the flamegraph's, clamped */
	int64_t asked_nodes;       /* as asked (0: not given) */
	enum render_fmt fmt;
	const char *fmt_name;      /* as asked, for an error */
	const char *query;         /* the query as given */
	const char *group_by;      /* the first groupBy, NULL when none */
	bool avg;                  /* aggregation=avg */
};

static int
render_parse(struct querier *qr, struct sm_http_req *r,
    struct render_params *p, const char *qn, const char *fn, const char *un,
    struct sm_err *err)
{
	const char *query, *fmt, *v;
	int64_t now = sm_now_ms(), mn = 0, x;
	int rv;

	if ((rv = sm_http_tenant(r, qr->cfg.multitenancy, &p->tenant,
	    err)) != 0)
		return (rv);
	query = sm_http_query(r, qn);
	if ((query == NULL || query[0] == '\0') && strcmp(qn, "query") == 0)
		query = sm_http_query(r, "name");
	if (query == NULL || query[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "'%s' is required", qn));
	if ((rv = sm_query_parse(&p->q, query, err)) != 0)
		return (rv);
	p->query = query;
	v = sm_http_query(r, fn);
	if ((rv = sm_attime_parse(v != NULL && *v ? v : "now-1h", now,
	    &p->start, err)) != 0)
		return (rv);
	v = sm_http_query(r, un);
	if ((rv = sm_attime_parse(v != NULL && *v ? v : "now", now, &p->end,
	    err)) != 0)
		return (rv);
	if (p->start > p->end)
		return (sm_err_set(err, SM_EINVAL, "invalid time range: from "
		    "is after until"));
	/* The range limits before any work, for their 400; the engine
	 * applies them to the query itself (the timeline keeps the asked
	 * range: steps before the lookback are 0). */
	{
		int64_t s = p->start, e = p->end;
		bool empty;

		if ((rv = qry_limit_range(qr, p->tenant, &s, &e, NULL, &empty,
		    err)) != 0)
			return (rv);
	}
	/* As Pyroscope: max-nodes, then maxNodes; unparsable or 0 ignored. */
	if ((v = sm_http_query(r, "max-nodes")) != NULL &&
	    sm_parse_int(v, &x) == 0 && x != 0)
		mn = x;
	if ((v = sm_http_query(r, "maxNodes")) != NULL &&
	    sm_parse_int(v, &x) == 0 && x != 0)
		mn = x;
	if ((rv = qry_max_nodes(qr, p->tenant, mn, &p->max_nodes, err)) != 0)
		return (rv);
	p->asked_nodes = mn;
	/* v1: groupBy and aggregation (sum, avg; anything else sums). */
	v = sm_http_query(r, "groupBy");
	p->group_by = v != NULL && v[0] != '\0' ? v : NULL;
	v = sm_http_query(r, "aggregation");
	p->avg = v != NULL && strcmp(v, "avg") == 0;
	fmt = sm_http_query(r, "format");
	p->fmt_name = fmt != NULL && fmt[0] != '\0' ? fmt : "json";
	if (strcmp(p->fmt_name, "json") == 0)
		p->fmt = RF_JSON;
	else if (strcmp(fmt, "collapsed") == 0)
		p->fmt = RF_COLLAPSED;
	else if (strcmp(fmt, "dot") == 0)
		p->fmt = RF_DOT;
	else if (strcmp(fmt, "pprof") == 0)
		p->fmt = RF_PPROF;
	else if (strcmp(fmt, "html") == 0)
		p->fmt = RF_HTML;
	else
		return (sm_err_set(err, SM_EUNSUPPORTED, "format \"%s\" is not "
		    "supported by /render (json, collapsed, dot, pprof, html)",
		    fmt));
	return (0);
}

/* Append one timeline object {"startTime":..,"samples":[..],
 * "durationDelta":..,"watermarks":null}: n steps of `step` ms from
 * `first`. */
static void
timeline_json(struct sm_buf *out, int64_t first, int64_t step, int64_t n,
    const uint64_t *samples)
{
	sm_buf_puts(out, "{\"startTime\":");
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
}

/*
 * The per-step samples of series gs[0..ng) into samples[0..n), with
 * sums and counts as scratch: the sum of their points in each step or,
 * with avg, that sum over the profiles behind it (0 for a step without
 * profiles), truncated to an integer as v1 does.
 */
static void
timeline_fill(const struct qry_series *gs, uint32_t ng, int64_t first,
    int64_t step, int64_t n, bool avg, double *sums, uint64_t *counts,
    uint64_t *samples)
{
	memset(samples, 0, (size_t)n * sizeof(*samples));
	memset(sums, 0, (size_t)n * sizeof(*sums));
	memset(counts, 0, (size_t)n * sizeof(*counts));
	for (uint32_t g = 0; g < ng; g++) {
		for (uint32_t k = 0; k < gs[g].n; k++) {
			int64_t idx = (gs[g].ts[k] - first) / step;

			if (idx < 0 || idx >= n)
				continue;
			if (!avg) {
				samples[idx] += (uint64_t)gs[g].v[k];
				continue;
			}
			sums[idx] += gs[g].v[k];
			if (gs[g].cnt != NULL)
				counts[idx] += gs[g].cnt[k];
		}
	}
	for (int64_t i = 0; avg && i < n; i++)
		samples[i] = counts[i] > 0 && sums[i] > 0 ?
		    (uint64_t)(sums[i] / (double)counts[i]) : 0;
}

/* A group's key in "groups": its group-by value, "*" without one (as
 * Pyroscope v1). */
static const char *
group_key(const struct qry_series *g)
{
	if (g->nlabels > 0 && g->labels[0]->value != NULL &&
	    g->labels[0]->value[0] != '\0')
		return (g->labels[0]->value);
	return ("*");
}

static int
group_key_cmp(const void *a, const void *b)
{
	return (strcmp(group_key(a), group_key(b)));
}

/*
 * Append "timeline":{...} and "groups":..., built from a per-step series
 * fan-out that uses the merge's plan in x when it fits.  The timeline is
 * the whole selection's; with groupBy, "groups" holds one timeline per
 * value of that label ("*": series without it), keys in byte order as
 * Go's encoding/json writes a map, else null.  With aggregation=avg
 * each point is the mean over the profiles of its step (the sum over
 * the count of uploads behind it), truncated as v1 does.
 */
static int
render_timeline(struct qry_query *x, const struct render_params *p,
    const Smolder__V1__Select *sel, struct sm_buf *out, struct sm_err *err)
{
	Smolder__V1__SeriesRequest sr = SMOLDER__V1__SERIES_REQUEST__INIT;
	int64_t step = qry_calc_step_ms(sel->start_ms, sel->end_ms);
	int64_t first = sm_floor_to(sel->start_ms, step);
	int64_t n = sel->end_ms > first ? (sel->end_ms - first + step - 1) /
	    step : 0;
	uint64_t *samples = NULL, *counts = NULL;
	double *sums = NULL;
	struct sm_arena *a = NULL;
	struct qry_query y;
	struct qry_series *gs = NULL;
	uint32_t ng = 0;
	char *gb[1];
	int rv = 0;

	if (n > 1000000)
		return (sm_err_set(err, SM_EINVAL, "timeline too long"));
	qry_query_init(&y, x->q);
	if ((samples = sm_calloc((size_t)SM_MAX(n, 1), sizeof(*samples))) ==
	    NULL || (counts = sm_calloc((size_t)SM_MAX(n, 1),
	    sizeof(*counts))) == NULL || (sums = sm_calloc((size_t)SM_MAX(n,
	    1), sizeof(*sums))) == NULL || (a = sm_arena_create(0)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if (n > 0) {
		sr.select = (Smolder__V1__Select *)sel;
		sr.step_ms = step;
		if (p->group_by != NULL) {
			gb[0] = (char *)p->group_by;
			sr.group_by = gb;
			sr.n_group_by = 1;
		}
		/* The merge's plan when its resolutions suit the step, else
		 * a plan of its own (engine.h, qry_series_fits). */
		if (qry_series_fits(x, 0, step))
			rv = qry_series(x, 0, &sr, a, &gs, &ng, err);
		else
			rv = qry_series_select(&y, &sr, a, &gs, &ng, err);
		if (rv != 0) {
			if (rv == SM_EAGAIN) {
				(void)sm_err_prefix(err, "an ingester failed "
				    "during the query");
				rv = err->code = SM_EUNAVAIL;
			}
			goto out;
		}
		for (uint32_t g = 0; g < ng; g++) {
			if (p->avg && gs[g].n > 0 && gs[g].cnt == NULL) {
				rv = sm_err_set(err, SM_EUNAVAIL, "an ingester "
				    "answered without profile counts (older "
				    "version): aggregation=avg unavailable");
				goto out;
			}
		}
	}
	timeline_fill(gs, ng, first, step, n, p->avg, sums, counts, samples);
	sm_buf_puts(out, "\"timeline\":");
	timeline_json(out, first, step, n, samples);
	sm_buf_puts(out, ",\"groups\":");
	if (p->group_by == NULL) {
		sm_buf_puts(out, "null");
	} else {
		/* One key per value: a series whose value is "*" and one
		 * without the label share "*", and their points add up. */
		if (ng > 1)
			qsort(gs, ng, sizeof(*gs), group_key_cmp);
		sm_buf_putc(out, '{');
		for (uint32_t g = 0, h; g < ng; g = h) {
			const char *key = group_key(&gs[g]);

			for (h = g + 1; h < ng && strcmp(group_key(&gs[h]),
			    key) == 0; h++)
				;
			timeline_fill(&gs[g], h - g, first, step, n, p->avg,
			    sums, counts, samples);
			if (g > 0)
				sm_buf_putc(out, ',');
			sm_buf_json_str(out, key, strlen(key));
			sm_buf_putc(out, ':');
			timeline_json(out, first, step, n, samples);
		}
		sm_buf_putc(out, '}');
	}
	rv = 0;
out:
	qry_query_fini(&y);
	sm_arena_destroy(a);
	sm_free(samples);
	sm_free(counts);
	sm_free(sums);
	return (rv);
}

/*
 * format=collapsed is streamed: the text repeats every path
 * prefix, so for a 16k-stack series it is ~20 MiB, several times the
 * merged tree; built whole, four concurrent renders held four copies.
 * The stream owns the merged tree and the sorted view (O(nodes)) and
 * writes 64 KiB pieces as the client reads.  A failure after the 200
 * line aborts the connection (the client sees a truncated chunked body,
 * never a wrong complete one).
 */
#define COLLAPSED_PIECE (64u * 1024u)

struct collapsed_stream {
	struct sm_mtree *m;
	struct sm_fg_collapsed *c;
};

static int
collapsed_piece(void *arg, struct sm_buf *out)
{
	struct collapsed_stream *cs = arg;

	return (sm_fg_collapsed_next(cs->c, out, COLLAPSED_PIECE));
}

static void
collapsed_done(void *arg)
{
	struct collapsed_stream *cs = arg;
	size_t used = qry_mtree_bytes(cs->m);

	sm_fg_collapsed_close(cs->c);
	sm_mtree_fini(cs->m);
	sm_free(cs->m);
	sm_free(cs);
	sm_mem_release(used);
}

/* Queue the streamed answer; takes m on success (0), else leaves it. */
static int
collapsed_reply(struct sm_http_req *r, struct sm_mtree *m,
    struct sm_err *err)
{
	struct collapsed_stream *cs;
	int rv;

	if ((cs = sm_calloc(1, sizeof(*cs))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = sm_fg_collapsed_open(&m->tree, &m->names, m->self,
	    &cs->c)) != 0) {
		sm_free(cs);
		return (sm_err_set(err, rv, "out of memory"));
	}
	cs->m = m;
	m->nmeta = 0;	/* unused; its strings die with the query's arena */
	sm_http_reply_stream(r, 200, "text/plain; charset=utf-8",
	    collapsed_piece, collapsed_done, cs);
	return (0);
}

/* The profile type of p's query for the dot and pprof answers. */
static int
render_ptype(const struct render_params *p, struct sm_ptype *pt,
    struct sm_err *err)
{
	const struct sm_query *q = &p->q;

	if (q->type_id != NULL) {
		if (sm_ptype_parse(q->type_id, pt) != 0)
			return (sm_err_set(err, SM_EINVAL, "invalid profile "
			    "type id \"%s\"", q->type_id));
		return (0);
	}
	memset(pt, 0, sizeof(*pt));
	snprintf(pt->name, sizeof(pt->name), "%s", q->metric ? q->metric : "");
	snprintf(pt->sample_type, sizeof(pt->sample_type), "%s",
	    q->sample_type ? q->sample_type : "");
	snprintf(pt->sample_unit, sizeof(pt->sample_unit), "%s",
	    q->sample_unit ? q->sample_unit : "");
	/* A legacy cpu or wall query in nanoseconds reads the series that
	 * a sample rate made (common/ptype.h, sm_legacy_type_resolve):
	 * their period is cpu/nanoseconds. */
	if (strcmp(pt->sample_unit, "nanoseconds") == 0 &&
	    (strcmp(pt->name, "process_cpu") == 0 ||
	    strcmp(pt->name, "wall") == 0)) {
		snprintf(pt->period_type, sizeof(pt->period_type), "cpu");
		snprintf(pt->period_unit, sizeof(pt->period_unit),
		    "nanoseconds");
	}
	return (0);
}

/* Answer format=dot or format=pprof from the merged tree m (arena a). */
static int
render_export(struct sm_http_req *r, const struct render_params *p,
    const struct sm_mtree *m, struct sm_arena *a, struct sm_err *err)
{
	Google__V1__Profile *prof;
	struct sm_ptype pt;
	char disp[160], *dot;
	const char *app;
	uint8_t *bytes;
	size_t len, k;
	int rv;

	if ((rv = render_ptype(p, &pt, err)) != 0)
		return (rv);
	if (p->fmt == RF_DOT) {
		if (qry_dot_build(m, &pt, p->asked_nodes > 0 ? p->asked_nodes :
		    100, a, &dot, &len) != 0)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		sm_http_reply(r, 200, "text/plain; charset=utf-8", dot, len);
		return (0);
	}
	if ((rv = qry_pprof_build(m, &pt, p->start, p->end, 0, a, &prof,
	    err)) != 0)
		return (rv);
	len = protobuf_c_message_get_packed_size(&prof->base);
	if ((bytes = sm_arena_alloc(a, SM_MAX(len, 1))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	(void)protobuf_c_message_pack(&prof->base, bytes);
	/* The file name from the app, reduced to characters no header
	 * or file system minds. */
	app = p->q.app != NULL && p->q.app[0] != '\0' ? p->q.app :
	    pt.name[0] != '\0' ? pt.name : "profile";
	k = (size_t)snprintf(disp, sizeof(disp), "attachment; filename=");
	for (const char *c = app; *c != '\0' && k + 7 < sizeof(disp); c++)
		disp[k++] = (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
		    "OPQRSTUVWXYZ0123456789._-", *c) != NULL) ? *c : '_';
	memcpy(disp + k, ".pprof", 7);
	sm_http_set_header(r, "Content-Disposition", disp);
	sm_http_reply(r, 200, "application/octet-stream", bytes, len);
	return (0);
}

/* The embedded UI file `name` (webui.h), or NULL. */
static const struct qry_ui_asset *
ui_asset(const char *name)
{
	for (size_t i = 0; i < qry_ui_nassets; i++)
		if (strcmp(qry_ui_assets[i].name, name) == 0)
			return (&qry_ui_assets[i]);
	return (NULL);
}

/* Append a[0..n) with `from` replaced by `to` (once); 0, or -1 when
 * `from` is not there. */
static int
put_replaced(struct sm_buf *b, const char *a, size_t n, const char *from,
    const char *to, size_t tolen)
{
	const char *hit = memmem(a, n, from, strlen(from));

	if (hit == NULL)
		return (-1);
	sm_buf_append(b, a, (size_t)(hit - a));
	sm_buf_append(b, to, tolen);
	sm_buf_append(b, hit + strlen(from), n - (size_t)(hit - a) -
	    strlen(from));
	return (0);
}

/* 'sha256-<base64>' of lead followed by the file's bytes, into b. */
static int
csp_hash(struct sm_buf *b, const char *lead, const struct qry_ui_asset *f)
{
	struct sm_buf t = SM_BUF_INIT;
	uint8_t d[SM_SHA256_LEN];
	int rv;

	sm_buf_puts(&t, lead);
	sm_buf_append(&t, (const char *)f->data, f->len);
	if ((rv = sm_buf_error(&t)) == 0 &&
	    (rv = sm_sha256(t.b, t.len, d)) == 0) {
		sm_buf_puts(b, "sha256-");
		sm_buf_put_base64(b, d, sizeof(d));
		rv = sm_buf_error(b);
	}
	sm_buf_fini(&t);
	return (rv);
}

/*
 * format=html (og Pyroscope's export): one self-contained page, the web
 * UI (index.html with app.css and app.js inlined) and the answer `json`
 * (what format=json gives: flamebearer, metadata, timeline) in a JSON
 * island the UI opens instead of asking a server (ui/app.js,
 * "Standalone pages").  It opens from a file with no network, which is
 * what an export is for.  Strings in the JSON are escaped as Go escapes
 * them (<, > and & as \u00XX), so no frame name can end the script;
 * served, the page carries a Content-Security-Policy that runs only the
 * inlined app.js and app.css (by their hashes) and fetches nothing.
 */
static int
render_html(struct sm_http_req *r, const struct render_params *p,
    const struct sm_buf *json, struct sm_err *err)
{
	const struct qry_ui_asset *idx = ui_asset("index.html"),
	    *css = ui_asset("app.css"), *js = ui_asset("app.js");
	const char *unit = p->q.sample_unit != NULL ? p->q.sample_unit : "";
	struct sm_buf style = SM_BUF_INIT, script = SM_BUF_INIT,
	    page = SM_BUF_INIT, mid = SM_BUF_INIT, csp = SM_BUF_INIT,
	    hjs = SM_BUF_INIT, hdr = SM_BUF_INIT;
	char title[512];
	int rv = 0;

	if (idx == NULL || css == NULL || js == NULL)
		return (sm_err_set(err, SM_EINTERNAL, "the web UI is not "
		    "embedded in this binary"));
	/* An og query by its app and type, as og titled it; any other by
	 * the query itself. */
	if (p->q.app != NULL && p->q.app[0] != '\0')
		(void)snprintf(title, sizeof(title), "%s %s", p->q.app,
		    p->q.sample_type != NULL ? p->q.sample_type : "");
	else
		(void)snprintf(title, sizeof(title), "%s", p->query);
	/* What the page's own Content-Security-Policy lets run: the two
	 * inlined files, by their SHA-256 (a frame name cannot be one). */
	if (csp_hash(&csp, "\n", css) != 0 || csp_hash(&hjs, "\n", js) != 0)
		return (sm_err_set(err, SM_EINTERNAL, "sha256 failed"));
	sm_buf_puts(&style, "<style>\n");
	sm_buf_append(&style, (const char *)css->data, css->len);
	sm_buf_puts(&style, "</style>");
	sm_buf_puts(&script, "<script type=\"application/json\" "
	    "id=\"smolder-profile\">{\"title\":");
	sm_buf_json_str(&script, title, strlen(title));
	sm_buf_puts(&script, ",\"unit\":");
	sm_buf_puts(&script, strcmp(unit, "nanoseconds") == 0 ? "\"ns\"" :
	    strcmp(unit, "bytes") == 0 ? "\"bytes\"" : "\"count\"");
	sm_buf_puts(&script, ",\"render\":");
	sm_buf_append(&script, json->b, json->len);
	sm_buf_puts(&script, "}</script>\n<script>\n");
	sm_buf_append(&script, (const char *)js->data, js->len);
	sm_buf_puts(&script, "</script>");
	/* index.html's two links become the inlined files; the icon,
	 * which a file cannot fetch, goes. */
	if (put_replaced(&mid, (const char *)idx->data, idx->len,
	    "<link rel=\"stylesheet\" href=\"/ui/app.css\">", style.b,
	    style.len) != 0 ||
	    put_replaced(&page, mid.b, mid.len,
	    "<script src=\"/ui/app.js\"></script>", script.b,
	    script.len) != 0) {
		rv = sm_err_set(err, SM_EINTERNAL, "the web UI's index.html "
		    "does not link app.css and app.js as expected");
		goto out;
	}
	sm_buf_fini(&mid);
	sm_buf_init(&mid);
	if (put_replaced(&mid, page.b, page.len, "<link rel=\"icon\" "
	    "href=\"/ui/favicon.svg\" type=\"image/svg+xml\">", "", 0) != 0)
		sm_buf_append(&mid, page.b, page.len);
	if ((rv = sm_buf_error(&mid)) != 0 || (rv = sm_buf_error(&style)) !=
	    0 || (rv = sm_buf_error(&script)) != 0) {
		rv = sm_err_set(err, rv, "response too large or out of memory");
		goto out;
	}
	sm_buf_printf(&hdr, "default-src 'none'; script-src '%s'; "
	    "style-src '%s'; img-src data:; object-src 'none'; base-uri "
	    "'none'; form-action 'none'; frame-ancestors 'none'", hjs.b,
	    csp.b);
	if ((rv = sm_buf_error(&hdr)) != 0) {
		rv = sm_err_set(err, rv, "out of memory");
		goto out;
	}
	sm_http_set_header(r, "Content-Security-Policy", hdr.b);
	sm_http_set_header(r, "X-Content-Type-Options", "nosniff");
	sm_http_set_header(r, "X-Frame-Options", "DENY");
	sm_http_set_header(r, "Referrer-Policy", "no-referrer");
	sm_http_reply_buf(r, 200, "text/html; charset=utf-8", &mid);
out:
	sm_buf_fini(&csp);
	sm_buf_fini(&hjs);
	sm_buf_fini(&hdr);
	sm_buf_fini(&style);
	sm_buf_fini(&script);
	sm_buf_fini(&page);
	sm_buf_fini(&mid);
	return (rv);
}

static void
render_handler(struct sm_http_req *r, void *arg)
{
	struct querier *qr = arg;
	struct render_params p;
	struct sm_mtree *m = NULL;
	struct qry_query x;
	struct sm_fg fg;
	struct sm_buf out = SM_BUF_INIT;
	Smolder__V1__Select sel;
	struct sm_arena *a = NULL;
	struct sm_err err;
	const char *units, *spy = "";
	uint32_t rate;
	size_t used = 0;
	int rv, have_merge = 0, have_fg = 0;

	sm_err_clear(&err);
	qry_query_init(&x, qr);
	memset(&p, 0, sizeof(p));
	memset(&fg, 0, sizeof(fg));
	sm_query_init(&p.q);
	if ((rv = render_parse(qr, r, &p, "query", "from", "until",
	    &err)) != 0)
		goto reply;
	if ((a = sm_arena_create(0)) == NULL ||
	    qry_select_pb(&p.q.sel, p.tenant, p.start, p.end, a, &sel) != 0) {
		rv = sm_err_set(&err, SM_ENOMEM, "out of memory");
		goto reply;
	}
	if ((m = sm_malloc(sizeof(*m))) == NULL) {
		rv = sm_err_set(&err, SM_ENOMEM, "out of memory");
		goto reply;
	}
	if ((rv = sm_mtree_init(m)) != 0) {
		sm_free(m);
		m = NULL;
		sm_err_set(&err, rv, "out of memory");
		goto reply;
	}
	have_merge = 1;
	if ((rv = qry_merge(&x, &sel, m, &err)) != 0)
		goto reply;
	if (p.fmt == RF_COLLAPSED) {
		if ((rv = collapsed_reply(r, m, &err)) != 0)
			goto reply;
		m = NULL;	/* the stream owns it */
		have_merge = 0;
		goto done;
	}
	if (p.fmt == RF_DOT || p.fmt == RF_PPROF) {
		if ((rv = render_export(r, &p, m, a, &err)) != 0)
			goto reply;
		goto done;
	}
	if ((rv = sm_fg_build(&m->tree, &m->names, m->self, p.max_nodes,
	    &fg)) != 0) {
		sm_err_set(&err, rv, "out of memory");
		goto reply;
	}
	have_fg = 1;
	sm_ptype_render_units(p.q.sample_type != NULL ? p.q.sample_type : "",
	    p.q.sample_unit != NULL ? p.q.sample_unit : "", &units, &rate);
	if (m->nmeta == 1)
		spy = m->meta[0].spy_name;
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
	if ((rv = render_timeline(&x, &p, &sel, &out, &err)) != 0)
		goto reply;
	sm_buf_puts(&out, ",\"heatmap\":null}\n");
	if (p.fmt == RF_HTML) {
		if ((rv = render_html(r, &p, &out, &err)) != 0)
			goto reply;
		goto done;
	}
reply:
	render_reply(r, &out, rv, &err, "render");
done:
	if (have_fg)
		sm_fg_fini(&fg);
	if (have_merge) {
		used = qry_mtree_bytes(m);
		sm_mtree_fini(m);
		sm_free(m);
	}
	qry_query_fini(&x);
	sm_arena_destroy(a);
	sm_query_fini(&p.q);
	used += out.cap;
	sm_buf_fini(&out);
	sm_mem_release(used);
}

/* metadata for a type: {"format":..,"spyName":..,"sampleRate":..,
 * "units":..,"name":..} */
static void
write_metadata(struct sm_buf *out, const char *format, const char *spy,
    const struct sm_query *q)
{
	const char *units;
	uint32_t rate;

	sm_ptype_render_units(q->sample_type != NULL ? q->sample_type : "",
	    q->sample_unit != NULL ? q->sample_unit : "", &units, &rate);
	sm_buf_puts(out, "\"metadata\":{\"format\":\"");
	sm_buf_puts(out, format);
	sm_buf_puts(out, "\",\"spyName\":");
	sm_buf_json_str(out, spy, strlen(spy));
	sm_buf_puts(out, ",\"sampleRate\":");
	sm_buf_put_u64(out, rate);
	sm_buf_puts(out, ",\"units\":");
	sm_buf_json_str(out, units, strlen(units));
	sm_buf_puts(out, ",\"name\":");
	sm_buf_json_str(out, q->sample_type != NULL ? q->sample_type : "",
	    q->sample_type != NULL ? strlen(q->sample_type) : 0);
	sm_buf_putc(out, '}');
}

static int
str_eq(const char *a, const char *b)
{
	return (strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0);
}

/*
 * The two sides of /render-diff and /api/top-changes: the parsed queries,
 * their merge trees (have_m once they need sm_mtree_fini), the fan-out
 * and the arena their selects live in.  two_sides_init before anything
 * can fail, two_sides_fini on every path.
 */
struct two_sides {
	struct render_params p[2];
	struct sm_mtree m[2];
	struct qry_query x;
	struct sm_arena *a;
	int have_m;
};

static void
two_sides_init(struct two_sides *t, struct querier *qr)
{
	memset(t, 0, sizeof(*t));
	qry_query_init(&t->x, qr);
	sm_query_init(&t->p[0].q);
	sm_query_init(&t->p[1].q);
}

static void
two_sides_fini(struct two_sides *t)
{
	if (t->have_m) {
		sm_mtree_fini(&t->m[0]);
		sm_mtree_fini(&t->m[1]);
	}
	qry_query_fini(&t->x);
	sm_arena_destroy(t->a);
	sm_query_fini(&t->p[0].q);
	sm_query_fini(&t->p[1].q);
}

/*
 * Parse leftQuery, leftFrom, leftUntil, rightQuery, rightFrom, rightUntil
 * into t->p, one profile type on both, and merge them in one fan-out into
 * t->m[0] and t->m[1].  `what` names the route in a format error: its
 * answers are JSON only.
 */
static int
two_sides_merge(struct two_sides *t, struct querier *qr,
    struct sm_http_req *r, const char *what, struct sm_err *err)
{
	struct render_params *p = t->p;
	struct sm_mtree *m = t->m, *mp[2] = { &t->m[0], &t->m[1] };
	Smolder__V1__Select sel[2];
	const Smolder__V1__Select *selp[2] = { &sel[0], &sel[1] };
	int rv;

	if ((rv = render_parse(qr, r, &p[0], "leftQuery", "leftFrom",
	    "leftUntil", err)) != 0 || (rv = render_parse(qr, r, &p[1],
	    "rightQuery", "rightFrom", "rightUntil", err)) != 0)
		return (rv);
	if (p[0].fmt != RF_JSON)
		return (sm_err_set(err, SM_EUNSUPPORTED, "format \"%s\" "
		    "is not supported by %s (json)", p[0].fmt_name, what));
	if (!str_eq(p[0].q.sample_type, p[1].q.sample_type) ||
	    !str_eq(p[0].q.sample_unit, p[1].q.sample_unit))
		return (sm_err_set(err, SM_EINVAL, "left and right queries "
		    "must have the same profile type"));
	if ((t->a = sm_arena_create(0)) == NULL ||
	    qry_select_pb(&p[0].q.sel, p[0].tenant, p[0].start, p[0].end,
	    t->a, &sel[0]) != 0 || qry_select_pb(&p[1].q.sel, p[1].tenant,
	    p[1].start, p[1].end, t->a, &sel[1]) != 0 ||
	    sm_mtree_init(&m[0]) != 0 || (sm_mtree_init(&m[1]) != 0 &&
	    (sm_mtree_fini(&m[0]), 1)))
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	t->have_m = 1;
	return (qry_merge_lanes(&t->x, selp, mp, 2, err));
}

/*
 * GET /render-diff and /pyroscope/render-diff: leftQuery, leftFrom,
 * leftUntil, rightQuery, rightFrom, rightUntil, maxNodes / max-nodes,
 * format (json only).  Both sides are merged in one fan-out (engine.c) and
 * rendered as the double flamebearer, as Pyroscope v1's shim over Diff
 * does: metadata.format "double", timeline null, leftTicks and rightTicks
 * at the top level (omitted when 0, Go's omitempty).  The two queries must
 * name the same sample type and unit (else 400, as v1).
 */
static void
render_diff_handler(struct sm_http_req *r, void *arg)
{
	struct querier *qr = arg;
	struct two_sides t;
	struct sm_mtree *m = t.m;
	struct sm_fg fg;
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	const char *spy = "";
	int rv, have_fg = 0;

	sm_err_clear(&err);
	two_sides_init(&t, qr);
	memset(&fg, 0, sizeof(fg));
	if ((rv = two_sides_merge(&t, qr, r, "/render-diff", &err)) != 0)
		goto reply;
	if ((rv = sm_fg_build_diff(&m[0].tree, &m[0].names, m[0].self,
	    &m[1].tree, &m[1].names, m[1].self, t.p[0].max_nodes, &fg)) != 0) {
		sm_err_set(&err, rv, "out of memory");
		goto reply;
	}
	have_fg = 1;
	if (m[0].nmeta == 1 && (m[1].nmeta == 0 ||
	    (m[1].nmeta == 1 && str_eq(m[0].meta[0].spy_name,
	    m[1].meta[0].spy_name))))
		spy = m[0].meta[0].spy_name;
	else if (m[0].nmeta == 0 && m[1].nmeta == 1)
		spy = m[1].meta[0].spy_name;
	sm_buf_puts(&out, "{\"version\":1,\"flamebearer\":");
	sm_fg_write_json(&fg, &out);
	sm_buf_putc(&out, ',');
	write_metadata(&out, "double", spy, &t.p[0].q);
	sm_buf_puts(&out, ",\"timeline\":null,\"groups\":null,"
	    "\"heatmap\":null");
	if (fg.left_ticks != 0) {
		sm_buf_puts(&out, ",\"leftTicks\":");
		sm_buf_put_i64(&out, fg.left_ticks);
	}
	if (fg.right_ticks != 0) {
		sm_buf_puts(&out, ",\"rightTicks\":");
		sm_buf_put_i64(&out, fg.right_ticks);
	}
	sm_buf_puts(&out, "}\n");
reply:
	render_reply(r, &out, rv, &err, "render-diff");
	if (have_fg)
		sm_fg_fini(&fg);
	two_sides_fini(&t);
	sm_buf_fini(&out);
}

/*
 * GET /api/top-changes: leftQuery, leftFrom, leftUntil, rightQuery,
 * rightFrom, rightUntil (as /render-diff: two ranges, or two label sets,
 * of one profile type), by (total, the default, or self), limit (1 to
 * 10000, 20 by default).  Both sides are merged in one fan-out and ranked
 * by changes.c: {"left":{"total","profiles"},"right":{...},"by",
 * "functions":[{"name","left":{"self","total","selfShare","totalShare"},
 * "right":{...},"selfChange","totalChange"}],"functionsTotal"}.
 */
static void
changes_handler(struct sm_http_req *r, void *arg)
{
	struct querier *qr = arg;
	struct two_sides t;
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	const char *by, *v;
	int64_t limit = 20;
	int rv;

	sm_err_clear(&err);
	two_sides_init(&t, qr);
	by = sm_http_query(r, "by");
	if (by != NULL && by[0] != '\0' && strcmp(by, "self") != 0 &&
	    strcmp(by, "total") != 0) {
		rv = sm_err_set(&err, SM_EINVAL, "by must be total or self");
		goto reply;
	}
	if ((v = sm_http_query(r, "limit")) != NULL && v[0] != '\0' &&
	    (sm_parse_int(v, &limit) != 0 || limit < 1 || limit > 10000)) {
		rv = sm_err_set(&err, SM_EINVAL, "limit must be 1 to 10000");
		goto reply;
	}
	if ((rv = two_sides_merge(&t, qr, r, "/api/top-changes", &err)) != 0)
		goto reply;
	rv = qry_changes_json(&t.m[0], &t.m[1], by != NULL &&
	    strcmp(by, "self") == 0, (uint32_t)limit, &out, &err);
reply:
	render_reply(r, &out, rv, &err, "top-changes");
	two_sides_fini(&t);
	sm_buf_fini(&out);
}

/*
 * GET /api/function-timeline: query, from, until (as /render), function
 * (required), self (true: the samples whose leaf it is; else every sample
 * with it anywhere in the stack, once however often it recurs).  The
 * function's series over the selection, in /render's timeline shape and
 * step: {"function","self","timeline":{"startTime","samples",
 * "durationDelta"}}.  The web UI's Changes view opens it per function.
 */
static void
function_handler(struct sm_http_req *r, void *arg)
{
	struct querier *qr = arg;
	Smolder__V1__SeriesRequest sr = SMOLDER__V1__SERIES_REQUEST__INIT;
	struct render_params p;
	Smolder__V1__Select sel;
	struct qry_query x;
	struct qry_series *gs;
	struct sm_buf out = SM_BUF_INIT;
	struct sm_arena *a = NULL;
	struct sm_err err;
	const char *fn, *self;
	int64_t *samples = NULL, step, first, n;
	uint32_t ng;
	int rv;

	sm_err_clear(&err);
	qry_query_init(&x, qr);
	memset(&p, 0, sizeof(p));
	sm_query_init(&p.q);
	if ((rv = render_parse(qr, r, &p, "query", "from", "until",
	    &err)) != 0)
		goto reply;
	fn = sm_http_query(r, "function");
	self = sm_http_query(r, "self");
	if (fn == NULL || fn[0] == '\0') {
		rv = sm_err_set(&err, SM_EINVAL, "'function' is required");
		goto reply;
	}
	if (self != NULL && self[0] != '\0' && strcmp(self, "true") != 0 &&
	    strcmp(self, "false") != 0) {
		rv = sm_err_set(&err, SM_EINVAL, "self must be true or false");
		goto reply;
	}
	step = qry_calc_step_ms(p.start, p.end);
	first = sm_floor_to(p.start, step);
	n = p.end > first ? (p.end - first + step - 1) / step : 0;
	if (n > 1000000) {
		rv = sm_err_set(&err, SM_EINVAL, "timeline too long");
		goto reply;
	}
	if ((a = sm_arena_create(0)) == NULL || (samples = sm_calloc(
	    (size_t)SM_MAX(n, 1), sizeof(*samples))) == NULL ||
	    qry_select_pb(&p.q.sel, p.tenant, p.start, p.end, a, &sel) != 0) {
		rv = sm_err_set(&err, SM_ENOMEM, "out of memory");
		goto reply;
	}
	if (n > 0) {
		sr.select = &sel;
		sr.step_ms = step;
		sr.function = (char *)fn;
		sr.function_self = self != NULL && strcmp(self, "true") == 0;
		if ((rv = qry_series_select(&x, &sr, a, &gs, &ng, &err)) != 0)
			goto reply;
		for (uint32_t g = 0; g < ng; g++) {
			for (uint32_t k = 0; k < gs[g].n; k++) {
				int64_t idx = (gs[g].ts[k] - first) / step;

				if (idx >= 0 && idx < n)
					samples[idx] = sm_add_sat(samples[idx],
					    (int64_t)gs[g].v[k]);
			}
		}
	}
	sm_buf_puts(&out, "{\"function\":");
	sm_buf_json_str(&out, fn, strlen(fn));
	sm_buf_printf(&out, ",\"self\":%s,\"timeline\":{\"startTime\":",
	    sr.function_self ? "true" : "false");
	sm_buf_put_i64(&out, first / 1000);
	sm_buf_puts(&out, ",\"samples\":[");
	for (int64_t i = 0; i < n; i++) {
		if (i > 0)
			sm_buf_putc(&out, ',');
		sm_buf_put_i64(&out, samples[i]);
	}
	sm_buf_puts(&out, "],\"durationDelta\":");
	sm_buf_put_i64(&out, step / 1000);
	sm_buf_puts(&out, "}}\n");
	rv = 0;
reply:
	render_reply(r, &out, rv, &err, "function-timeline");
	qry_query_fini(&x);
	sm_arena_destroy(a);
	sm_free(samples);
	sm_query_fini(&p.q);
	sm_buf_fini(&out);
}

int
qry_render_register(struct querier *q)
{
	static const char *const paths[] = { "/render", "/pyroscope/render" };
	int rv;

	static const char *const dpaths[] = { "/render-diff",
	    "/pyroscope/render-diff" };
	for (size_t i = 0; i < SM_ARRAY_LEN(paths); i++) {
		if ((rv = qry_route_http(q, "GET",
		    paths[i],
		    render_handler, q, 0)) != 0)
			return (rv);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(dpaths); i++) {
		if ((rv = qry_route_http(q, "GET",
		    dpaths[i], render_diff_handler, q, 0)) != 0)
			return (rv);
	}
	if ((rv = qry_route_http(q, "GET", "/api/top-changes",
	    changes_handler, q, 0)) != 0)
		return (rv);
	return (qry_route_http(q, "GET", "/api/function-timeline",
	    function_handler, q, 0));
}
