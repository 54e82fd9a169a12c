/*
 * engine.c -- the query engine (see engine.h): plans, fan-out rounds,
 * merges of trees and series, the stack-trace selector.
 *
 * A query owns one fan (the ring view and the last round's answers) and
 * one plan per lane.  qry_merge_lanes plans every lane first (each plan
 * runs its own Stats rounds through the fan), then sends all lanes' merge
 * requests in one round, so a Diff's left and right merges run on the
 * ingesters at the same time.  If a target the plans counted on fails,
 * the fan marks it excluded and the whole query starts over on a fresh
 * ring snapshot: replicas cover the lost member.
 *
 * Decisions:
 *   - the stack-trace selector is applied to the merged tree in the
 *     querier, not in the ingesters: a tree merge is a sum per frame path,
 *     so filtering by a root-first prefix after the merge equals filtering
 *     every sample before it, and the ingester protocol stays unchanged;
 *   - go_pgo.keep_locations cuts every stack to its leaf-most frames and
 *     merges the stacks that become equal, as Pyroscope's PGO export does;
 *     aggregate_callees only drops line numbers, which Smolder does not
 *     keep, so it changes nothing here;
 *   - a merge answer is freed as soon as it is summed into the tree, so
 *     a query holds one decoded answer at a time, not all of them while
 *     it renders (what bounds a query's memory).
 */
#include "qry_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/metrics.h"

void
qry_query_init(struct qry_query *x, struct querier *q)
{
	memset(x, 0, sizeof(*x));
	x->q = q;
	qry_fan_init(&x->fan);
	for (uint32_t l = 0; l < QRY_MAX_LANES; l++)
		qry_plan_init(&x->plan[l]);
}

void
qry_query_fini(struct qry_query *x)
{
	for (uint32_t l = 0; l < QRY_MAX_LANES; l++)
		qry_plan_fini(&x->plan[l]);
	qry_fan_close(&x->fan, true);
	sm_arena_destroy(x->arena);
	x->arena = NULL;
}

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
	/* Go divides nanoseconds: span_ns / 1500 == span_ms * 2000 / 3
	 * exactly, and span_ms * 2000 cannot overflow for times inside
	 * attime.h's window (span < 2^44 ms), where span_ns could. */
	int64_t iv_ns = ((until_ms - from_ms) * 2000) / 3;

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

/* The plan's transport: a stats round over the query's fan. */
static int
fan_plan_round(void *arg, Smolder__V1__Request *const *reqs, uint32_t nreqs,
    const uint8_t *must, const Smolder__V1__Response **ans,
    struct sm_err *err)
{
	struct qry_query *x = arg;
	struct qry_fan *f = &x->fan;
	int rv;

	rv = qry_fan_round(x->q, f, reqs, nreqs, 1, "stats", must, err);
	for (uint32_t i = 0; i < f->n; i++)
		ans[i] = rv == 0 && f->calls[i].rv == 0 ? f->calls[i].resp :
		    NULL;
	return (rv);
}

/* Open a fresh fan (keeping the excluded members) and the round arena. */
static int
query_open(struct qry_query *x, struct sm_err *err)
{
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	int rv;

	for (uint32_t l = 0; l < QRY_MAX_LANES; l++)
		qry_plan_fini(&x->plan[l]);
	sm_arena_destroy(x->arena);
	if ((x->arena = sm_arena_create(0)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t l = 0; l < x->nlanes; l++) {
		lo = SM_MIN(lo, x->lim[l].start_ms);
		hi = SM_MAX(hi, x->lim[l].end_ms);
	}
	if (lo > hi)
		lo = INT64_MIN, hi = INT64_MAX;
	if ((rv = qry_fan_open(x->q, &x->fan, x->lim[0].tenant, lo, hi,
	    err)) != 0)
		return (rv);
	return (0);
}

/*
 * Lane l's resolutions (common/tiers.h) for reading x->lim[l] at `step`
 * (0: a merge, any tier width; > 0: widths dividing it; < 0: none, raw
 * only), into x->lim[l].resolution.
 */
static void
query_resolutions(struct qry_query *x, uint32_t l, int64_t step)
{
	struct sm_tier_piece pc[SM_TIERS_PIECES_MAX];
	Smolder__V1__Select *sel = &x->lim[l];
	uint32_t n = 0;

	if (step >= 0)
		n = sm_tiers_pieces(&x->q->cfg.tiers, sel->start_ms,
		    sel->end_ms, step, pc);
	for (uint32_t i = 0; i < n; i++) {
		Smolder__V1__Resolution *r = &x->res[l][i];

		smolder__v1__resolution__init(r);
		r->start_ms = pc[i].start;
		r->end_ms = pc[i].end;
		r->width_ms = pc[i].width;
		x->resp[l][i] = r;
	}
	sel->n_resolution = n;
	sel->resolution = n > 0 ? x->resp[l] : NULL;
	x->step[l] = step;
}

/*
 * The tenant's range limits on each lane's select (qry_limit_range), once
 * per query, into x->lim and x->empty, with the resolutions for `step`
 * (query_resolutions); *all_empty when no lane has anything to read (then
 * no fan is opened at all).
 */
static int
query_limits(struct qry_query *x, const Smolder__V1__Select *const *sel,
    uint32_t nlanes, int64_t step, bool *all_empty, struct sm_err *err)
{
	int rv;

	*all_empty = true;
	for (uint32_t l = 0; l < nlanes; l++) {
		x->lim[l] = *sel[l];
		if ((rv = qry_limit_range(x->q, sel[l]->tenant,
		    &x->lim[l].start_ms, &x->lim[l].end_ms, NULL, &x->empty[l],
		    err)) != 0)
			return (rv);
		/* buckets named by their raw starts are read raw */
		query_resolutions(x, l, x->only != NULL ? -1 : step);
		*all_empty = *all_empty && x->empty[l];
	}
	return (0);
}

bool
qry_series_fits(const struct qry_query *x, uint32_t lane, int64_t step)
{
	struct sm_tier_piece pc[SM_TIERS_PIECES_MAX];
	const Smolder__V1__Select *sel = &x->lim[lane];
	uint32_t n;

	if (x->empty[lane])
		return (true);
	n = sm_tiers_pieces(&x->q->cfg.tiers, sel->start_ms, sel->end_ms, step,
	    pc);
	if (n != sel->n_resolution)
		return (false);
	for (uint32_t i = 0; i < n; i++) {
		if (pc[i].start != sel->resolution[i]->start_ms ||
		    pc[i].end != sel->resolution[i]->end_ms ||
		    pc[i].width != sel->resolution[i]->width_ms)
			return (false);
	}
	return (true);
}

/*
 * A plan, waiting out replicas that diverged for a moment: during a
 * rolling restart each replica may have missed different uploads of one
 * bucket, with the hints that make them whole still on their way (they
 * are delivered once the ring sees the member healthy, a heartbeat or
 * so).  A plan that finds buckets no replica or combination holds whole
 * (plan.c) is made again every QRY_DIVERGED_POLL_MS for at most
 * QRY_DIVERGED_WAIT_MS; then the query answers 503 saying so.
 */
#define QRY_DIVERGED_WAIT_MS 3000
#define QRY_DIVERGED_POLL_MS 100

static struct sm_metric *m_waits;

static const struct sm_metric_def waits_metric_defs[] = {
	{ &m_waits, SM_METRIC_COUNTER,
	    "smolder_querier_divergence_waits_total", "Plans made again "
	    "because replicas diverged with no exact combination (hints "
	    "still on their way).", NULL, NULL, 0 },
};

static struct sm_metric_set waits_metric_set =
    SM_METRIC_SET(waits_metric_defs);

static int
plan_waiting(struct qry_plan *p, const struct qry_plan_io *io,
    const Smolder__V1__Select *sel, struct sm_err *err)
{
	int64_t until = sm_now_ms() + QRY_DIVERGED_WAIT_MS;
	int rv;

	for (;;) {
		sm_err_clear(err);
		rv = qry_plan_make(p, io, sel, err);
		if (rv != SM_EUNAVAIL || p->nunresolved == 0 ||
		    sm_now_ms() >= until)
			return (rv);
		sm_metrics_register_once(&waits_metric_set);
		sm_counter_inc(sm_metric_child0(m_waits));
		sm_sleep_ms(QRY_DIVERGED_POLL_MS);
	}
}

/* Plan lane `lane` (x->lim, after query_limits) over the open fan; an
 * empty lane gets a plan that asks no target. */
static int
query_plan(struct qry_query *x, uint32_t lane, struct sm_err *err)
{
	struct qry_plan *p = &x->plan[lane];
	int rv;
	struct qry_plan_io io = {
		.n = x->fan.n,
		.rf = qry_fan_rf(&x->fan),
		.nlocal = x->fan.ni,
		.round = fan_plan_round,
		.arg = x,
	};

	if (x->empty[lane]) {
		qry_plan_fini(p);
		p->base = &x->lim[lane];
		p->n = x->fan.n;
		if ((p->sel = sm_arena_calloc(x->arena, SM_MAX(p->n, 1),
		    sizeof(*p->sel))) == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		return (0);
	}
	rv = qry_plan_make(p, &io, &x->lim[lane], err);
	if (rv != 0 && !(rv == SM_EUNAVAIL && p->nunresolved > 0))
		return (rv);
	/*
	 * Replicas that diverged (each missed different writes) are picked
	 * bucket by bucket, and a bucket at a tier width is an hour or a
	 * day: when every replica missed some write of it, none is
	 * complete there, where at the raw width each 10 s bucket still had
	 * a complete replica.  So such a lane is planned again, raw.
	 */
	if (p->ndivergent > 0 && x->lim[lane].n_resolution > 0) {
		query_resolutions(x, lane, -1);
		rv = plan_waiting(p, &io, &x->lim[lane], err);
	} else if (rv != 0) {
		rv = plan_waiting(p, &io, &x->lim[lane], err);
	}
	if (rv == 0 && x->only != NULL && qry_plan_restrict(p, x->only,
	    x->nonly) != 0)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	if (rv == 0 && x->q->cfg.after_plan != NULL)
		x->q->cfg.after_plan(x->q->cfg.after_plan_arg);
	return (rv);
}

/* Per-target requests of one lane under plan p, in x->arena, into reqs
 * (n entries; NULL = the target is skipped).  0 or SM_ENOMEM. */
static int
planned_requests(struct qry_query *x, const struct qry_plan *p,
    Smolder__V1__Request__MethodCase mc,
    const Smolder__V1__SeriesRequest *tmpl, Smolder__V1__Request **reqs)
{
	for (uint32_t i = 0; i < p->n; i++) {
		const Smolder__V1__Select *sel = qry_plan_select(p, i);
		Smolder__V1__Request *r;

		reqs[i] = NULL;
		if (sel == NULL)
			continue;
		if ((r = sm_arena_alloc(x->arena, sizeof(*r))) == NULL)
			return (SM_ENOMEM);
		smolder__v1__request__init(r);
		r->method_case = mc;
		if (mc == SMOLDER__V1__REQUEST__METHOD_MERGE) {
			Smolder__V1__MergeRequest *m = sm_arena_alloc(x->arena,
			    sizeof(*m));

			if (m == NULL)
				return (SM_ENOMEM);
			smolder__v1__merge_request__init(m);
			m->select = (Smolder__V1__Select *)sel;
			r->merge = m;
		} else {
			Smolder__V1__SeriesRequest *s = sm_arena_alloc(
			    x->arena, sizeof(*s));

			if (s == NULL)
				return (SM_ENOMEM);
			*s = *tmpl;
			s->select = (Smolder__V1__Select *)sel;
			r->series = s;
		}
		reqs[i] = r;
	}
	return (0);
}

/* Point m's metadata strings at copies in `a` (mtree.h: they borrow). */
static int
meta_own(struct sm_mtree *m, struct sm_arena *a)
{
	for (uint32_t k = 0; k < m->nmeta; k++) {
		Smolder__V1__SeriesMeta *e = &m->meta[k];
		char **f[3] = { &e->spy_name, &e->units, &e->aggregation };

		for (int j = 0; j < 3; j++) {
			const char *v = *f[j] != NULL ? *f[j] : "";

			if ((*f[j] = sm_arena_strndup(a, v, strlen(v))) ==
			    NULL)
				return (SM_ENOMEM);
		}
	}
	return (0);
}

/* The end of attempt number `attempt` of a query that starts over on
 * SM_EAGAIN: rv, except that SM_EAGAIN on the last attempt is SM_EUNAVAIL. */
static int
attempt_end(int rv, int attempt, struct sm_err *err)
{
	if (rv == SM_EAGAIN && attempt >= QRY_MAX_ATTEMPTS) {
		/* Prefix the message in place (formatting err->msg into
		 * itself would read what it writes). */
		(void)sm_err_prefix(err, "the query started over %d times "
		    "(targets failing, or replicas changing under its plan)",
		    attempt);
		err->code = SM_EUNAVAIL;
		return (SM_EUNAVAIL);
	}
	return (rv);
}

/* One attempt of a multi-lane merge; SM_EAGAIN to start over. */
static int
merge_attempt(struct qry_query *x, struct sm_mtree *const *m, uint32_t nlanes,
    struct sm_err *err)
{
	struct qry_fan *f = &x->fan;
	Smolder__V1__Request **reqs;
	uint8_t *must;
	uint32_t n;
	int rv;

	if ((rv = query_open(x, err)) != 0)
		return (rv);
	for (uint32_t l = 0; l < nlanes; l++) {
		if ((rv = query_plan(x, l, err)) != 0)
			return (rv);
	}
	n = f->n;
	reqs = sm_arena_calloc(x->arena, (size_t)nlanes * SM_MAX(n, 1),
	    sizeof(*reqs));
	must = sm_arena_alloc(x->arena, (size_t)nlanes * SM_MAX(n, 1));
	if (reqs == NULL || must == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t l = 0; l < nlanes; l++) {
		if (planned_requests(x, &x->plan[l],
		    SMOLDER__V1__REQUEST__METHOD_MERGE, NULL, reqs + l * n) != 0)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		qry_plan_must(&x->plan[l], must + l * n);
	}
	if ((rv = qry_fan_round(x->q, f, reqs, nlanes * n, nlanes, "merge",
	    must, err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < nlanes * n; i++) {
		struct qry_call *c = &f->calls[i];

		if (reqs[i] == NULL || c->rv != 0)
			continue;
		if (c->resp->result_case != SMOLDER__V1__RESPONSE__RESULT_MERGE)
			return (sm_err_set(err, SM_EPROTO, "ingester "
			    "answered without a merge result"));
		if ((rv = sm_mtree_add_pb(m[i / n], c->resp->merge, err)) != 0)
			return (rv);
		/* Summed: drop the decoded answer now rather than at the
		 * end of the query, while the tree is rendered.
		 * The metadata borrows its strings from it: copy them to
		 * the query's arena first. */
		if (meta_own(m[i / n], x->arena) != 0)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		sm_arena_destroy(c->arena);
		c->arena = NULL;
		c->resp = NULL;
	}
	return (0);
}

int
qry_merge_lanes(struct qry_query *x, const Smolder__V1__Select *const *sel,
    struct sm_mtree *const *m, uint32_t nlanes, struct sm_err *err)
{
	bool all_empty;
	int rv;

	SM_ASSERT(nlanes >= 1 && nlanes <= QRY_MAX_LANES);
	x->nlanes = nlanes;
	if ((rv = query_limits(x, sel, nlanes, 0, &all_empty, err)) != 0 ||
	    all_empty)
		return (rv);
	for (int attempt = 1;; attempt++) {
		rv = attempt_end(merge_attempt(x, m, nlanes, err), attempt,
		    err);
		if (rv != SM_EAGAIN)
			return (rv);
		/* Partial sums of this attempt are thrown away. */
		for (uint32_t l = 0; l < nlanes; l++) {
			sm_mtree_fini(m[l]);
			if (sm_mtree_init(m[l]) != 0)
				return (sm_err_set(err, SM_ENOMEM,
				    "out of memory"));
		}
	}
}

/* One attempt of qry_planned; SM_EAGAIN to start over. */
static int
custom_attempt(struct qry_query *x, const struct qry_custom *c,
    struct sm_err *err)
{
	struct qry_fan *f = &x->fan;
	Smolder__V1__Request **reqs;
	uint8_t *must;
	int rv;

	if ((rv = query_open(x, err)) != 0 ||
	    (rv = query_plan(x, 0, err)) != 0)
		return (rv);
	reqs = sm_arena_calloc(x->arena, SM_MAX(f->n, 1), sizeof(*reqs));
	must = sm_arena_alloc(x->arena, SM_MAX(f->n, 1));
	if (reqs == NULL || must == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < f->n; i++) {
		const Smolder__V1__Select *ts = qry_plan_select(&x->plan[0], i);

		if (ts != NULL && (reqs[i] = c->build(c->arg, ts,
		    x->arena)) == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if ((rv = qry_fan_round(x->q, f, reqs, f->n, 1, c->method,
	    qry_plan_must(&x->plan[0], must), err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < f->n; i++) {
		const struct qry_call *call = &f->calls[i];

		if (reqs[i] == NULL || call->rv != 0)
			continue;
		if (call->resp->result_case != c->result)
			return (sm_err_set(err, SM_EPROTO, "ingester answered "
			    "%s without its result", c->method));
		if ((rv = c->fold(c->arg, call->resp, err)) != 0)
			return (rv);
	}
	return (0);
}

int
qry_planned(struct qry_query *x, const Smolder__V1__Select *sel,
    const struct qry_custom *c, struct sm_err *err)
{
	bool empty;
	int rv;

	x->nlanes = 1;
	if ((rv = query_limits(x, &sel, 1, -1, &empty, err)) != 0 || empty)
		return (rv);
	for (int attempt = 1;; attempt++) {
		rv = attempt_end(custom_attempt(x, c, err), attempt, err);
		if (rv != SM_EAGAIN)
			return (rv);
		if (c->reset(c->arg) != 0)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
}

int
qry_merge(struct qry_query *x, const Smolder__V1__Select *sel,
    struct sm_mtree *m, struct sm_err *err)
{
	return (qry_merge_lanes(x, &sel, &m, 1, err));
}

/* A merged (group, timestamp, value) point. */
struct series_pt {
	uint32_t group;
	uint32_t cnt;           /* profiles behind v */
	int64_t ts;
	double v;
};

SM_CMP_FN2(pt_cmp, struct series_pt, group, ts)

int
qry_labels_cmp(Types__V1__LabelPair *const *a, size_t na,
    Types__V1__LabelPair *const *b, size_t nb)
{
	for (size_t i = 0; i < na && i < nb; i++) {
		int c = strcmp(a[i]->name, b[i]->name);

		if (c == 0)
			c = strcmp(a[i]->value, b[i]->value);
		if (c != 0)
			return (c);
	}
	return (SM_CMP(na, nb));
}

static int
labels_cmp(const Types__V1__Series *x, const Types__V1__Series *y)
{
	return (qry_labels_cmp(x->labels, x->n_labels, y->labels,
	    y->n_labels));
}

/* An ingester's series with its per-point profile counts (or NULL). */
struct series_ref {
	const Types__V1__Series *se;
	const Smolder__V1__SeriesCounts *sc;
};

static int
group_ref_cmp(const void *a, const void *b)
{
	return (labels_cmp(((const struct series_ref *)a)->se,
	    ((const struct series_ref *)b)->se));
}

int
qry_series(struct qry_query *x, uint32_t lane,
    const Smolder__V1__SeriesRequest *sr, struct sm_arena *a,
    struct qry_series **out, uint32_t *nout, struct sm_err *err)
{
	struct qry_fan *f = &x->fan;
	Smolder__V1__Request **reqs;
	struct series_ref *groups = NULL;
	struct series_pt *pts = NULL;
	struct qry_series *res;
	uint8_t *must;
	size_t ng = 0, np = 0, k = 0;
	uint32_t nres = 0;
	bool counted = true;
	int rv;

	*out = NULL;
	*nout = 0;
	SM_ASSERT(lane < QRY_MAX_LANES);
	if (x->empty[lane])
		return (0);     /* before the lookback: no series */
	SM_ASSERT(x->plan[lane].n == f->n);
	if ((reqs = sm_arena_calloc(x->arena, SM_MAX(f->n, 1),
	    sizeof(*reqs))) == NULL || (must = sm_arena_alloc(x->arena,
	    SM_MAX(f->n, 1))) == NULL ||
	    planned_requests(x, &x->plan[lane],
	    SMOLDER__V1__REQUEST__METHOD_SERIES, sr, reqs) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = qry_fan_round(x->q, f, reqs, f->n, 1, "series",
	    qry_plan_must(&x->plan[lane], must), err)) != 0)
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
		counted = counted && c->resp->series->n_counts ==
		    c->resp->series->n_series;
		for (size_t j = 0; counted &&
		    j < c->resp->series->n_series; j++)
			counted = c->resp->series->counts[j]->n_profiles ==
			    c->resp->series->series[j]->n_points;
	}
	groups = sm_malloc(SM_MAX(ng, 1) * sizeof(*groups));
	pts = sm_malloc(SM_MAX(np, 1) * sizeof(*pts));
	if (groups == NULL || pts == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	ng = 0;
	for (uint32_t i = 0; i < f->n; i++) {
		const Smolder__V1__SeriesResponse *rs = f->calls[i].resp ?
		    f->calls[i].resp->series : NULL;

		if (f->calls[i].rv != 0)
			continue;
		for (size_t j = 0; j < rs->n_series; j++)
			groups[ng++] = (struct series_ref){ rs->series[j],
			    counted ? rs->counts[j] : NULL };
	}
	/* Distinct groups by label values; points tagged with theirs. */
	if (ng > 1)
		qsort(groups, ng, sizeof(*groups), group_ref_cmp);
	if ((res = sm_arena_calloc(a, SM_MAX(ng, 1), sizeof(*res))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t g = 0; g < ng; g++) {
		const Types__V1__Series *se = groups[g].se;
		const Smolder__V1__SeriesCounts *sc = groups[g].sc;

		if (nres == 0 || labels_cmp(groups[g - 1].se, se) != 0) {
			res[nres].labels = se->labels;   /* call arenas */
			res[nres].nlabels = (uint32_t)se->n_labels;
			nres++;
		}
		for (size_t j = 0; j < se->n_points; j++)
			pts[k++] = (struct series_pt){ nres - 1,
			    sc != NULL ? sc->profiles[j] : 0,
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
		g->cnt = counted ? sm_arena_alloc(a, SM_MAX(n, 1) *
		    sizeof(*g->cnt)) : NULL;
		if (g->ts == NULL || g->v == NULL || (counted && g->cnt == NULL)) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t y = i; y < j; y++) {
			if (y == i || pts[y].ts != pts[y - 1].ts) {
				g->ts[g->n] = pts[y].ts;
				if (counted)
					g->cnt[g->n] = 0;
				g->v[g->n++] = 0;
			}
			g->v[g->n - 1] += pts[y].v;
			/* modulo 2^32 as the ingesters count: a replica's
			 * subtracted bucket (plan.c) comes as its negation */
			if (counted)
				g->cnt[g->n - 1] = (uint32_t)(g->cnt[g->n - 1] +
				    pts[y].cnt);
			g->sum += pts[y].v;
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
qry_series_select(struct qry_query *x,
    const Smolder__V1__SeriesRequest *sr, struct sm_arena *a,
    struct qry_series **out, uint32_t *nout, struct sm_err *err)
{
	const Smolder__V1__Select *sel = sr->select;
	bool empty;
	int rv;

	*out = NULL;
	*nout = 0;
	x->nlanes = 1;
	if ((rv = query_limits(x, &sel, 1, sr->step_ms, &empty, err)) != 0 ||
	    empty)
		return (rv);
	for (int attempt = 1;; attempt++) {
		if ((rv = query_open(x, err)) == 0 &&
		    (rv = query_plan(x, 0, err)) == 0)
			rv = qry_series(x, 0, sr, a, out, nout, err);
		if ((rv = attempt_end(rv, attempt, err)) != SM_EAGAIN)
			return (rv);
	}
}

/* --- stack-trace selector --------------------------------------------------- */

/* Cut every stack with self > 0 to its `keep` leaf-most frames, into a
 * side tree with m's name ids, and add that to `out`. */
static int
tree_keep_leaves(const struct sm_mtree *m, const int64_t *self, uint32_t keep,
    struct sm_mtree *out, struct sm_err *err)
{
	const struct sm_tree *t = &m->tree;
	struct sm_tree tmp;
	int64_t *tself = NULL;
	uint32_t *path = NULL, tcap = 0;
	int rv;

	if ((rv = sm_tree_init(&tmp)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	if ((path = sm_malloc((size_t)keep * sizeof(*path))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 1; i < t->n; i++) {
		uint32_t np = 0, nd = 0;

		if (self[i] <= 0)
			continue;
		for (uint32_t c = i; c != 0 && np < keep; c = t->parent[c])
			path[np++] = c;
		while (np > 0) {
			if ((rv = sm_tree_child(&tmp, nd, t->name[path[--np]],
			    &nd)) != 0) {
				sm_err_set(err, rv, "out of memory");
				goto out;
			}
		}
		if (nd >= tcap) {
			uint32_t ncap = SM_MAX(tmp.cap, nd + 1);
			int64_t *ns = sm_reallocarray(tself, ncap,
			    sizeof(*ns));

			if (ns == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "oom");
				goto out;
			}
			memset(ns + tcap, 0, (ncap - tcap) * sizeof(*ns));
			tself = ns;
			tcap = ncap;
		}
		tself[nd] = sm_add_sat(tself[nd], self[i]);
	}
	if (tmp.n > 1 && tcap < tmp.n) {
		int64_t *ns = sm_reallocarray(tself, tmp.n, sizeof(*ns));

		if (ns == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		memset(ns + tcap, 0, (tmp.n - tcap) * sizeof(*ns));
		tself = ns;
	}
	rv = tmp.n > 1 ? sm_mtree_add_tree(out, tmp.parent, tmp.name, tmp.n,
	    tself, m->names.strs, m->names.n, err) : 0;
out:
	sm_free(path);
	sm_free(tself);
	sm_tree_fini(&tmp);
	return (rv);
}

int
qry_tree_select(struct sm_mtree *m, const Types__V1__StackTraceSelector *sts,
    struct sm_err *err)
{
	const struct sm_tree *t = &m->tree;
	size_t ncs = sts != NULL ? sts->n_call_site : 0;
	uint32_t keep = sts != NULL && sts->go_pgo != NULL ?
	    sts->go_pgo->keep_locations : 0;
	uint32_t *cs = NULL, *depth = NULL;
	uint8_t *ok = NULL;
	int64_t *self = NULL;
	struct sm_mtree out;
	int missing = 0, rv;

	if (ncs == 0 && keep == 0)
		return (0);
	if ((rv = sm_mtree_init(&out)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	cs = sm_malloc(SM_MAX(ncs, 1) * sizeof(*cs));
	depth = sm_malloc((size_t)t->n * sizeof(*depth));
	ok = sm_malloc((size_t)t->n);
	self = sm_malloc((size_t)t->n * sizeof(*self));
	if (cs == NULL || depth == NULL || ok == NULL || self == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	/* A call-site frame no stack has: nothing is under it. */
	for (size_t k = 0; k < ncs; k++) {
		const char *nm = sts->call_site[k]->name;

		if (sm_strtab_find(&m->names, nm, strlen(nm), &cs[k]) != 0)
			missing = 1;
	}
	depth[0] = 0;
	ok[0] = !missing;
	self[0] = 0;
	for (uint32_t i = 1; i < t->n; i++) {
		uint32_t p = t->parent[i], d = depth[p] + 1;

		depth[i] = d;
		ok[i] = ok[p] && (d > ncs || t->name[i] == cs[d - 1]);
		self[i] = ok[i] && d >= ncs ? m->self[i] : 0;
	}
	if (keep == 0)
		rv = sm_mtree_add_tree(&out, t->parent, t->name, t->n, self,
		    m->names.strs, m->names.n, err);
	else
		rv = tree_keep_leaves(m, self, keep, &out, err);
	if (rv != 0)
		goto out;
	out.profiles = m->profiles;
	memcpy(out.meta, m->meta, sizeof(out.meta));
	out.nmeta = m->nmeta;
	sm_mtree_fini(m);
	*m = out;
	memset(&out, 0, sizeof(out));
	rv = 0;
out:
	if (rv != 0)
		sm_mtree_fini(&out);
	sm_free(cs);
	sm_free(depth);
	sm_free(ok);
	sm_free(self);
	return (rv);
}
