/*
 * engine.h -- the querier's query engine: select, plan, fan out, merge.
 *
 * The HTTP handlers (render.c for the legacy /render and /render-diff,
 * connect_api.c for querier.v1) only parse their wire format into a
 * smolder.v1.Select and shape what the engine returns; everything that
 * touches ingesters is here:
 *
 *   qry_query      one query's state: the ring view (a fan, transport
 *                  only) and one replica plan per lane (a Diff has two
 *                  lanes, left and right);
 *   qry_merge*     plan each lane, then one fan-out round carrying every
 *                  lane's merge requests, folded into merge trees; a
 *                  target lost mid-query restarts the query without it
 *                  (at most QRY_MAX_ATTEMPTS times);
 *   qry_series*    per-step totals under a lane's plan (after a merge, the
 *                  same plan serves the timeline without new Stats rounds);
 *   qry_tree_select the stack-trace selector (call_site, go_pgo) applied to
 *                  a merged tree.
 *
 * The tenant's range limits (max_query_lookback, then max_query_length:
 * qry_limit_range, qry_int.h) are applied here, once per query, to every
 * lane's select before anything is asked: the plans and the ingesters see
 * the start moved up to the lookback; a lane whose range ended before it
 * asks no ingester and merges to an empty tree / no series (a Diff's
 * other side still runs); callers shape that as they shape "nothing
 * matched", which is Pyroscope's empty answer with success.
 *
 * Ownership: a qry_query owns its fan, plans and answers; strings of the
 * merge trees' metadata and of series labels point into the answers, so
 * keep the query until the result is written, then qry_query_fini().
 * Locking: none; one query, one thread.
 */
#ifndef QRY_ENGINE_H
#define QRY_ENGINE_H

#include "common/mtree.h"
#include "common/selector.h"
#include "common/tiers.h"

#include "google/v1/profile.pb-c.h"
#include "types/v1/types.pb-c.h"

struct querier;

struct qry_query {
	struct querier *q;
	struct qry_fan fan;
	struct qry_plan plan[QRY_MAX_LANES];
	uint32_t nlanes;
	struct sm_arena *arena;          /* per-round requests */
	/* Each lane's select with the tenant's range limits applied
	 * (qry_limit_range, engine.c query_limits): what the plans see. */
	Smolder__V1__Select lim[QRY_MAX_LANES];
	bool empty[QRY_MAX_LANES];       /* ended before max_query_lookback */
	/* Each lane's resolutions (downsampling tiers, common/tiers.h):
	 * a merge reads at the coarsest widths the range allows, a series
	 * at widths dividing its step, other RPCs raw. */
	Smolder__V1__Resolution res[QRY_MAX_LANES][SM_TIERS_PIECES_MAX];
	Smolder__V1__Resolution *resp[QRY_MAX_LANES][SM_TIERS_PIECES_MAX];
	int64_t step[QRY_MAX_LANES];
	/* When set, every plan is narrowed to these raw buckets
	 * (qry_plan_restrict), read raw: individual profiles
	 * (profile_sel.c).  Borrowed. */
	const struct qry_bucket *only;
	size_t nonly;
};

void qry_query_init(struct qry_query *x, struct querier *q);
void qry_query_fini(struct qry_query *x);

/* The selector as RPC matchers, allocated in `a`.  0 or SM_ENOMEM. */
int qry_select_pb(const struct sm_selector *s, const char *tenant,
    int64_t start, int64_t end, struct sm_arena *a, Smolder__V1__Select *sel);

/* Pyroscope's timeline step for a range (ms in, ms out). */
int64_t qry_calc_step_ms(int64_t from_ms, int64_t until_ms);

/*
 * Merge `sel` into `m` (fresh from sm_mtree_init) through the fan-out and
 * the replica plan.  Returns 0 or an error code with `err` set.  Each
 * answer is freed once summed; m->meta's strings are copied to the
 * query's arena and stay valid until the query's next fan-out
 * (qry_series, ...) or qry_query_fini().
 */
int qry_merge(struct qry_query *x, const Smolder__V1__Select *sel,
    struct sm_mtree *m, struct sm_err *err);

/* The same for nlanes (<= QRY_MAX_LANES) selects at once: one plan per
 * lane, one fan-out round for all merges. */
int qry_merge_lanes(struct qry_query *x, const Smolder__V1__Select *const *sel,
    struct sm_mtree *const *m, uint32_t nlanes, struct sm_err *err);

/*
 * A planned round of another per-select RPC (SpanMerge, ...): plan `sel`
 * as qry_merge does, send each target build(arg, its planned select,
 * arena) (NULL: out of memory), and hand every answer to fold().  A
 * target lost mid-query restarts the query without it, after reset()
 * dropped what fold() gathered, at most QRY_MAX_ATTEMPTS times.
 */
struct qry_custom {
	const char *method;              /* for logs and metrics */
	Smolder__V1__Response__ResultCase result;   /* expected answer */
	Smolder__V1__Request *(*build)(void *arg,
	    const Smolder__V1__Select *ts, struct sm_arena *a);
	int (*fold)(void *arg, const Smolder__V1__Response *resp,
	    struct sm_err *err);
	int (*reset)(void *arg);         /* 0 or SM_ENOMEM */
	void *arg;
};

int qry_planned(struct qry_query *x, const Smolder__V1__Select *sel,
    const struct qry_custom *c, struct sm_err *err);

/* One merged time series (group_by label values, points by time). */
struct qry_series {
	Types__V1__LabelPair **labels;
	uint32_t nlabels;
	int64_t *ts;
	double *v;
	uint32_t n;
	double sum;                      /* of v, for top-N limits */
	uint64_t *cnt;                   /* profiles behind v[i], or NULL if
	                                  * an ingester did not count them */
};

/*
 * Whether lane `lane`'s plan (a merge's) also serves a series of `step`:
 * its resolutions are the ones that step asks for.  When not, plan the
 * series anew (qry_series_select on a fresh query): a merge over days
 * reads day-wide tiers, which a finer timeline step cannot use.
 */
bool qry_series_fits(const struct qry_query *x, uint32_t lane, int64_t step);

/*
 * Fan a series request out under lane `lane`'s plan (which must be for
 * sr->select: a qry_merge of it ran just before, and qry_series_fits) and
 * sum the answers per (group, timestamp).  Output in `a`, groups sorted by label values.
 * SM_EAGAIN when a target the plan counted on failed.
 */
int qry_series(struct qry_query *x, uint32_t lane,
    const Smolder__V1__SeriesRequest *sr, struct sm_arena *a,
    struct qry_series **out, uint32_t *nout, struct sm_err *err);

/*
 * Plan sr->select and run qry_series, retrying without failed ingesters.
 * Group labels point into the query's answers: copy them before
 * qry_query_fini.
 */
int qry_series_select(struct qry_query *x,
    const Smolder__V1__SeriesRequest *sr, struct sm_arena *a,
    struct qry_series **out, uint32_t *nout, struct sm_err *err);

/*
 * Apply a stack-trace selector to a merged tree: call_site keeps only the
 * stacks whose root-first frames start with the call site's names (the
 * prefix frames stay in the stacks); go_pgo.keep_locations > 0 then keeps
 * only the leaf-most keep_locations frames of every stack (Smolder keeps
 * no line numbers, so aggregate_callees changes nothing).  `m` is
 * replaced in place; NULL or an empty selector leaves it as is.
 */
int qry_tree_select(struct sm_mtree *m,
    const Types__V1__StackTraceSelector *sts, struct sm_err *err);

/*
 * The merged tree `m` as Pyroscope's tree bytes (treebytes.c), allocated
 * in `a` (*len 0 for an empty tree); max_nodes > 0 truncates into "other"
 * nodes as Pyroscope does.  0, SM_ENOMEM or SM_ETOOBIG.
 */
int qry_tree_bytes(const struct sm_mtree *m, int64_t max_nodes,
    struct sm_arena *a, uint8_t **out, size_t *len);

/*
 * Span selectors (span_api.c): sel[0..n) as span ids, each 16 hex digits
 * (SM_EINVAL naming the first that is not), sorted and unique, in `a`.
 * qry_span_merge merges the samples of `sel` that carried one of those
 * span ids into `m`, under the replica plan of every merge.
 */
int qry_span_ids(char *const *sel, size_t n, struct sm_arena *a,
    uint64_t **out, size_t *nout, struct sm_err *err);
int qry_span_merge(struct qry_query *x, const Smolder__V1__Select *sel,
    uint64_t *ids, size_t nids, struct sm_mtree *m, struct sm_err *err);

/*
 * profile_id_selector (profile_sel.c): the merge of the uploads with
 * these ids (UUID strings) in `sel` into `m`, exact or refused: SM_EINVAL
 * for an id that is not a UUID, SM_EUNSUPPORTED when a selected upload
 * shares its series' 10 s bucket with one not selected.  Ids not in the
 * selection merge nothing.
 */
int qry_profile_merge(struct qry_query *x, const Smolder__V1__Select *sel,
    char *const *ids, size_t nids, struct sm_mtree *m, struct sm_err *err);

/* One upload as a Profiles answer lists it (profile_sel.c, heatmap). */
struct qry_pref {
	uint64_t fp;            /* its series */
	int64_t t;              /* bucket start or sample time, ms */
	const uint8_t *id;      /* 16 bytes, borrowed from the answer */
};

/* qsort order of struct qry_pref: by series, time, then id. */
int qry_pref_cmp(const void *a, const void *b);

/* The order of two sorted label sets (an answer's series): pair by pair,
 * name then value (strcmp), then the shorter first. */
int qry_labels_cmp(Types__V1__LabelPair *const *a, size_t na,
    Types__V1__LabelPair *const *b, size_t nb);

struct sm_ptype;

/*
 * The merged tree `m` as a Graphviz call graph of the type `pt` (dot.c),
 * a NUL-terminated string of *len bytes in `a`: the max_nodes functions
 * of largest cum value (80 when 0).  0 or SM_ENOMEM.
 */
int qry_dot_build(const struct sm_mtree *m, const struct sm_ptype *pt,
    int64_t max_nodes, struct sm_arena *a, char **out, size_t *len);

/*
 * The merged tree `m` as a google.v1.Profile of the type `pt` (pprof.c),
 * allocated in `a`; max_nodes > 0 truncates as Pyroscope does (cut
 * subtrees summed into an "other" frame).  Values are signed: negative
 * stacks come out as they went in.  0 or SM_ENOMEM.
 */
int qry_pprof_build(const struct sm_mtree *m, const struct sm_ptype *pt,
    int64_t start_ms, int64_t end_ms, int64_t max_nodes, struct sm_arena *a,
    Google__V1__Profile **out, struct sm_err *err);

#endif /* QRY_ENGINE_H */
