/*
 * qry_int.h -- querier internals shared by its files.
 */
#ifndef QRY_INT_H
#define QRY_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "common/labels.h"
#include "common/selector.h"

#include "common/arena.h"
#include "common/strtab.h"
#include "common/mtree.h"
#include "common/tree.h"

#include "common/auth.h"
#include "common/connect.h"
#include "common/http.h"
#include "common/ring.h"

#include "gate.h"
#include "querier.h"

struct qry_route;

struct querier {
	struct qry_config cfg;
	struct sm_http *http;
	struct sm_ring *ring;
	struct qry_gate gate;         /* queries in flight per tenant */
	struct qry_route *routes;     /* what the gate wraps (querier.c) */
	int64_t created_ns;           /* sm_mono_ns() at qry_create */
	struct qry_rules *rules;      /* the evaluator (rules.c), or NULL */
};

/*
 * Register a query route (SM_SCOPE_READ) behind the gate (gate.h): the
 * request's tenant is admitted before `fn` runs, or refused with 429
 * resource_exhausted when it already runs max_concurrent_queries.  Every
 * route that reads profiles, labels or series registers this way.
 */
int qry_route_connect(struct querier *q, const char *path,
    const ProtobufCMessageDescriptor *in, sm_connect_fn fn, void *arg,
    size_t body_max);
int qry_route_http(struct querier *q, const char *method, const char *path,
    sm_http_fn fn, void *arg, size_t body_max);

/* A method of querier.v1.QuerierService and its handler. */
struct qry_method {
	const char *method;
	const ProtobufCMessageDescriptor *in;
	sm_connect_fn fn;
};

/* Route /querier.v1.QuerierService/<method> of each of m[0..n) with
 * qry_route_connect (arg q).  0 or the first route's error. */
int qry_route_methods(struct querier *q, const struct qry_method *m,
    size_t n);

/*
 * The query limits of `tenant` (max_query_length_ms,
 * max_query_lookback_ms, max_flamegraph_nodes_default/_max and
 * max_concurrent_queries of *out): its runtime overrides
 * (common/overrides.h) over the -querier.* flags.  Other fields of *out
 * are not meaningful.  Thread-safe.
 */
void qry_tenant_limits(struct querier *q, const char *tenant,
    struct sm_limits *out);

/*
 * The range limits of `tenant` on a query over [*start, *end] (ms), as
 * Pyroscope's ValidateRangeRequest, in its order:
 *
 *   max_query_lookback  with now - lookback = min: a range that ends
 *                       before min reads nothing -- *empty = true and 0,
 *                       not an error: the API answers its empty shape
 *                       with success, as when no series matches; a start
 *                       before min is moved up to min (*start changed);
 *   max_query_length    then, on the range left: longer is SM_EINVAL
 *                       with Pyroscope's message.
 *
 * `all_time` (label queries, NULL elsewhere): in, the request has no
 * range (start = end = 0, every stored series); with a lookback it
 * becomes [min, now] and *all_time false; all time is not checked
 * against max_query_length (it never was).
 *
 * Where it is applied -- every API that reads profiles, series or labels,
 * so no API reads more than the limits:
 *   - the engine (engine.c query_limits), once per query before any
 *     fan-out, for every lane: /render, /render-diff (and /pyroscope/
 *     ones), SelectMergeStacktraces, SelectMergeProfile, Diff (each side
 *     on its own), SelectSeries, SelectMergeSpanProfile; an empty lane
 *     asks no ingester and its merge tree / series stay empty;
 *   - render_parse, for a 400 before any work (the engine applies it
 *     again; the rule is idempotent);
 *   - label queries: /labels, /label-values, /pyroscope/label-values,
 *     /api/apps (labels.c) and LabelNames, LabelValues, Series and
 *     ProfileTypes (connect_api.c labels_or): "series and metadata" in
 *     Pyroscope's words, so a profile type or label seen only before the
 *     lookback is not listed;
 *   - the fan-outs without a plan: SelectHeatmap, SelectSeries exemplars
 *     (heatmap_api.c) and AnalyzeQuery (stats_api.c);
 *   - not GetProfileStats: it has no range (it tells whether the tenant
 *     has any data at all, for Drilldown's onboarding page).
 */
int qry_limit_range(struct querier *q, const char *tenant, int64_t *start,
    int64_t *end, bool *all_time, bool *empty, struct sm_err *err);

/* --- fan-out (fanout.c) ------------------------------------------------ */

/* One ingester's answer in a fan-out round. */
struct qry_call {
	uint32_t member;                 /* index in the fan's snapshot (an
					  * ingester target) or in its
					  * gateway snapshot (a source) */
	struct sm_arena *arena;          /* owned; holds resp */
	Smolder__V1__Response *resp;     /* when rv == 0 */
	int rv;
	struct sm_err err;
};

#define QRY_MAX_ATTEMPTS 3
#define QRY_MAX_LANES 2

/*
 * A query's view of the ring: the healthy members it asks (targets), and
 * the answers of its last round.  Rounds tolerate failed targets as long
 * as failed + unhealthy members, plus the replicas no longer serving
 * whose data the bucket does not hold (complete.c: the gaps, counted at
 * the worst point of the range), stay within the ring's read error budget
 * (sm_ring_max_read_errors: RF - quorum).  A target that fails after the
 * plan gave it data to contribute makes the round return SM_EAGAIN; the
 * query then starts over without it (engine.c), at most
 * QRY_MAX_ATTEMPTS times.  A target that answers SM_EAGAIN itself (a
 * bucket the plan combined changed under it, plan.c) is not failing:
 * the round returns SM_EAGAIN with nobody excluded, and the query starts
 * over with a new plan, within the same attempts.
 *
 * With store-gateways (cfg.gw_ring), the fan has more targets after the
 * ingesters: one per (gateway, source) that the healthy gateways that
 * vouch for the tenant list in a Sources round at open (ingester/
 * gateway.h; every gateway is asked, not only the owners this querier
 * computes, so an owner is found while a ring change rolls out), each
 * asked with smolder.v1.Select.source set.  A source is a replica of part of the
 * data, so the plan counts every (series, bucket) once across ingesters
 * and sources alike.  Gateway targets are outside the ingester budget and
 * follow their own rule: a round fails (SM_EUNAVAIL, naming the gateway,
 * the source and the cause) when some source has no answering target,
 * since that source may hold the only copy left of its data (a scaled-in
 * or wiped ingester); a failed gateway target the plan counted on makes
 * the round SM_EAGAIN, and the retry asks that source's other gateways.
 * Opening fails with SM_EUNAVAIL when no owner gateway of the tenant
 * answers Sources: history cannot be vouched for.
 *
 * Shuffle sharding (a tenant whose shard size is set: ring.h,
 * sm_ring_shard).  A query asks only the members that may hold something
 * of the tenant: a member whose tenant list, asked for within its hold,
 * lacks the tenant holds nothing of it (ring.h, "Confined reads":
 * distributors hold a sharded tenant's first writes to a member until
 * every querier has heard of them), so it is QRY_CONFINED and not asked.
 * That needs no agreement on the shard, only on whether the tenant is
 * sharded: a querier confines once shard sizes have not changed here for
 * cfg.confine_settle_ms (fan_confining).  A member outside the tenant's
 * shard whose list lacks the tenant, however old the list, is a
 * QRY_BYSTANDER: its being down, or failing or staying silent in a
 * round, costs the tenant's query nothing of its error budget.  So one
 * tenant whose flood takes its own shard's ingesters down does not turn
 * every other tenant's queries into 503s.  A member whose list is
 * unknown counts as usual.  What the bystander rule trusts: a member that
 * took a write of the tenant since its last Health answer is in the
 * shard as the querier sees it -- true except while the querier and a
 * distributor disagree on the members or the shard size (a heartbeat, or
 * a runtime-config reload) -- and the write's other replicas answer.
 *
 * A round may carry several lanes (a Diff's left and right merges): lane
 * l's request to target i is reqs[l * n + i] and its answer
 * calls[l * n + i]; all go out at once.  A target counts once against the
 * error budget however many of its lanes failed.
 *
 * The fan is transport only: which series each target contributes is the
 * plan's business (struct qry_plan).
 */
struct qry_fan_src {
	uint32_t gw;                     /* member index in gsnap */
	char id[33];                     /* the source (incarnation) */
	char instance[64];               /* who shipped it (logs) */
	int64_t min_t, max_t;            /* its first block's start, its
					    last block's end */
};

/*
 * Complete answers (complete.c has the rule).  A gap is a data-time range
 * [from, to] that a replica incarnation no longer serving was sent writes
 * for and that nothing in the bucket covers; key is its read unit.
 */
struct qry_gap {
	char key[128];
	char who[200];
	int64_t from, to;
};

/* Per ring member: its witness record and incarnation (NULL: unknown). */
struct qry_wit_in {
	const Smolder__V1__Witness *w;
	const char *inc;
};

/* The gaps of an answer over [start, end]: heap array (*out, *n).  0 or
 * SM_ENOMEM. */
int qry_gaps_find(const struct sm_ring_snap *s, const struct qry_wit_in *wi,
    const struct qry_fan_src *src, uint32_t nsrc, int64_t start,
    int64_t end, struct qry_gap **out, uint32_t *n);

/*
 * The read units missing at the worst point of the range: the lost[]
 * members (whole range) and the gaps there.  `why` (may be NULL) gets
 * what is missing at that point, for an error.
 */
uint32_t qry_gaps_units(const struct sm_ring_snap *s, const uint8_t *lost,
    const struct qry_gap *g, uint32_t n, char *why, size_t whylen);

#define QRY_BYSTANDER 1   /* outside the shard, its list lacks the tenant */
#define QRY_CONFINED  2   /* surely holds nothing of it: not asked */

struct qry_fan {
	struct sm_ring_snap *snap;
	uint32_t *target;                /* ingester member indexes: [0, ni) */
	uint32_t n;                      /* targets: ingesters, then sources */
	uint32_t ni;                     /* ingester targets */
	uint32_t down;                   /* read units (common/ring.h) of
					    the unhealthy or excluded
					    members */
	uint8_t *lost;                   /* per member (snap->n): those */
	struct qry_gap *gaps;            /* complete.c; counted with lost */
	uint32_t ngaps;
	uint8_t *excluded;               /* per member (snap->n): failed */
	uint8_t *bystander;              /* per member (snap->n): 0, or
					  * QRY_BYSTANDER, QRY_CONFINED
					  * (qry_fan_open); NULL: none */
	struct sm_ring_snap *gsnap;      /* store-gateways; NULL: none */
	struct qry_fan_src *src;         /* targets [ni, n): src[i - ni] */
	uint8_t *gexcluded;              /* per gateway (gsnap->n): failed */
	uint32_t gexcluded_n;
	struct qry_call *calls;          /* last round: nlanes * n entries */
	uint32_t nlanes;
};

void qry_fan_init(struct qry_fan *f);

/* Take a ring snapshot and pick targets (healthy, not excluded), and the
 * sources of `tenant` on the store-gateways when there are any; an answer
 * over data times [start, end] that cannot be complete (complete.c) is
 * SM_EUNAVAIL here, saying what is missing. */
int qry_fan_open(struct querier *q, struct qry_fan *f, const char *tenant,
    int64_t start, int64_t end, struct sm_err *err);

/* The replication factor the plan assumes: a fan with sources always has
 * copies to de-duplicate. */
static inline uint32_t
qry_fan_rf(const struct qry_fan *f)
{
	return (f->n > f->ni && f->snap->rf < 2 ? 2 : f->snap->rf);
}

/* Release everything, keep f->excluded (for a retry) unless `all`. */
void qry_fan_close(struct qry_fan *f, bool all);

/*
 * One round of `nlanes` lanes: send reqs[l * n + i] to target i (nreqs ==
 * 1: the same request to every target, one lane; a NULL entry skips) and
 * wait for all.  Frees the previous round's answers.  Returns 0 when
 * enough answered (failed calls have rv != 0), SM_EAGAIN when a call in
 * `must` (same indexing as reqs, may be NULL) failed -- its target is
 * marked excluded --, or the first error when failures exceed the read
 * error budget.
 */
int qry_fan_round(struct querier *q, struct qry_fan *f,
    Smolder__V1__Request *const *reqs, uint32_t nreqs, uint32_t nlanes,
    const char *method, const uint8_t *must, struct sm_err *err);

/* Send a labels request to every target (no plan: labels are sets). */
int qry_fanout_same(struct querier *q, struct qry_fan *f,
    const Smolder__V1__Request *req, const char *method,
    struct sm_err *err);

/* --- replica plan (plan.c) ------------------------------------------------ */

/*
 * How the plan talks to the targets, so it can be driven by a fan
 * (engine.c) or by a fake ingester set (plan_test.c).  round() sends
 * reqs[i] to target i (nreqs == 1: the same to all; NULL skips), fills
 * ans[i] with each answer (NULL for a failed or skipped target; valid
 * until the next round) and returns like qry_fan_round.
 */
struct qry_plan_io {
	uint32_t n;                      /* targets */
	uint32_t rf;                     /* replication factor */
	uint32_t nlocal;                 /* targets [0, nlocal) read their
					  * own disks (ingesters), the rest
					  * the bucket (store-gateway
					  * sources): among targets that
					  * hold the same uploads, a local
					  * one is picked (0: none) */
	int (*round)(void *arg, Smolder__V1__Request *const *reqs,
	    uint32_t nreqs, const uint8_t *must,
	    const Smolder__V1__Response **ans, struct sm_err *err);
	void *arg;
};

/*
 * A replica plan: which target contributes which series (and buckets) of
 * one select, so every (series, bucket) counts once.  Owns its arena.
 */
struct qry_plan {
	struct sm_arena *arena;          /* picks and per-target selects */
	const Smolder__V1__Select *base; /* the query's select (borrowed) */
	Smolder__V1__Select **sel;       /* per target, NULL = skip; NULL
					  * array = base for every target */
	uint32_t n;                      /* targets */
	size_t nseries, ndivergent;      /* for logs and tests */
	size_t ncombined;                /* buckets from a combination */
	size_t nunresolved;              /* buckets none could answer: the
					  * plan failed (SM_EUNAVAIL) */
	uint64_t *drop_epoch;            /* per target, as the Stats round
					  * saw it: each select carries it
					  * back (Select.drop_checked) */
};

void qry_plan_init(struct qry_plan *p);
void qry_plan_fini(struct qry_plan *p);

/*
 * Plan `sel` over io's targets.  Leaves p->sel NULL when no
 * de-duplication is needed (RF 1, or a single target).  Runs one or two
 * Stats rounds through io.  SM_EAGAIN from a round is passed up.
 */
int qry_plan_make(struct qry_plan *p, const struct qry_plan_io *io,
    const Smolder__V1__Select *sel, struct sm_err *err);

/* Target i's select under the plan: NULL when it has nothing to give. */
const Smolder__V1__Select *qry_plan_select(const struct qry_plan *p,
    uint32_t i);

/* One raw bucket of one series. */
struct qry_bucket {
	uint64_t fp;
	int64_t t;
};

/*
 * Narrow a made plan to the buckets w[0..nw) (sorted by (fp, t), unique):
 * each target's picks keep only those buckets -- a whole-series pick
 * becomes a pick of the series' wanted buckets, a bucket pick (or a
 * subtracted one) stays only when wanted -- and a target left with none
 * is not asked.  Exact because the plan is exact bucket by bucket.  The
 * plan's selects must be raw (no resolutions: w holds raw bucket
 * starts).  0 or SM_ENOMEM.
 */
int qry_plan_restrict(struct qry_plan *p, const struct qry_bucket *w,
    size_t nw);

/* Which targets the plan gives something to contribute (p->n entries). */
const uint8_t *qry_plan_must(const struct qry_plan *p, uint8_t *buf);

/* settings.v1, capabilities.v1, version.v1 routes (settings.c). */
int qry_settings_register(struct querier *q);

#include "engine.h"

/* --- labels (labels.c) ---------------------------------------------------- */

/* One distinct (restricted) label set with its upload metadata. */
struct qry_labelset {
	struct sm_label *v;
	uint32_t n;
	char *spy;
	uint32_t sample_rate;
};

struct qry_labels_result {
	char **names;             /* sorted, unique (names or values) */
	uint32_t nnames;
	struct qry_labelset *sets;
	uint32_t nsets, sets_cap;
};

/* Sort label sets and drop duplicates (replicas answer the same sets). */
void qry_labelsets_dedupe(struct qry_labels_result *r);

/* Fan a labels request out and merge the answers (arena-owned). */
int qry_labels(struct querier *q, const Smolder__V1__LabelsRequest *lr,
    struct sm_arena *a, struct qry_labels_result *out, struct sm_err *err);

/* "service.suffix" for a set holding service_name, __name__, __type__ and
 * __unit__, when the type has an og suffix. */
bool qry_app_name(const struct qry_labelset *ls, char *dst, size_t n);

/* --- HTTP (render.c, labels.c, connect_api.c) --------------------------------------------- */

/*
 * Rough heap bytes of a merged tree (per node: parent, name, self, hash
 * slot, plus the names), for sm_mem_release() after a query: a large
 * merge leaves its freed blocks in the thread's malloc arena.
 */
static inline size_t
qry_mtree_bytes(const struct sm_mtree *m)
{
	return ((size_t)m->tree.n * 32 + (size_t)m->names.n * 96);
}

int qry_render_register(struct querier *q);
int qry_labels_register(struct querier *q);
int qry_connect_register(struct querier *q);
int qry_webui_register(struct querier *q);
/* GetProfileStats, AnalyzeQuery (stats_api.c). */
int qry_stats_register(struct querier *q);
/* The Connect handlers (sm_connect_fn) of SelectMergeSpanProfile
 * (span_api.c) and SelectHeatmap (heatmap_api.c), routed with the others
 * by qry_connect_register. */
int qry_merge_span_profile(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err);
int qry_select_heatmap(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err);

/*
 * Shared by the Connect handlers (defined in connect_api.c):
 * qry_call_tenant  the tenant of a Connect call (sm_http_tenant under the
 *                  querier's multitenancy setting);
 * qry_check_range  start and end (ms) present, inside attime.h's window,
 *                  start <= end; else SM_EINVAL with Pyroscope's words;
 * qry_call_range   qry_call_tenant, then [start, end] checked
 *                  (qry_check_range) and cut to the tenant's range limits
 *                  (qry_limit_range) into *startp and *endp; *empty when
 *                  nothing of it is left to read;
 * qry_build_selector  `s` (initialised here) from a label selector text and
 *                  a profile type id (either may be NULL or empty);
 * qry_fg_levels    a flamegraph's names and levels as querier.v1 messages
 *                  in arena `a` (0 or SM_ENOMEM);
 * qry_fg_pb        the flamegraph of merged tree `m` cut to `max_nodes`,
 *                  as a querier.v1.FlameGraph in arena `a` (0, or
 *                  SM_ENOMEM set in `err`);
 * qry_max_nodes    a request's max flamegraph nodes `mn` checked against
 *                  the tenant's limits into *out (0: the tenant's
 *                  default); SM_EINVAL with Pyroscope's words;
 * qry_merge_fini   the end of a merge handler: its query and selector,
 *                  and its merged tree `m` (NULL when not made), whose
 *                  bytes count to the call's heap (sm_mem_release after
 *                  a large call).
 */
struct Querier__V1__Level;
struct Querier__V1__FlameGraph;
struct sm_fg;
int qry_call_tenant(struct querier *q, struct sm_connect_call *call,
    const char **tenant, struct sm_err *err);
int qry_check_range(int64_t start, int64_t end, struct sm_err *err);
int qry_call_range(struct querier *q, struct sm_connect_call *call,
    int64_t start, int64_t end, const char **tenant, int64_t *startp,
    int64_t *endp, bool *empty, struct sm_err *err);
int qry_build_selector(const char *type_id, const char *label_selector,
    struct sm_selector *s, struct sm_err *err);
int qry_fg_levels(struct sm_arena *a, const struct sm_fg *fg, char ***names,
    size_t *nnames, struct Querier__V1__Level ***levels, size_t *nlevels);
int qry_fg_pb(const struct sm_mtree *m, int64_t max_nodes,
    struct sm_arena *a, struct Querier__V1__FlameGraph **out,
    struct sm_err *err);
int qry_max_nodes(struct querier *q, const char *tenant, int64_t mn,
    int64_t *out, struct sm_err *err);
void qry_merge_fini(struct sm_connect_call *call, struct qry_query *x,
    struct sm_selector *s, struct sm_mtree *m);

struct Querier__V1__SelectSeriesResponse;

/*
 * SelectSeries exemplars (heatmap_api.c): for exemplar_type INDIVIDUAL,
 * give every point of `out` (answered for sr) one exemplar -- the largest
 * individual profile behind it (profile id, time, total); SPAN is
 * SM_EUNSUPPORTED; other types leave `out` as is.
 */
int qry_series_exemplars(struct querier *q,
    const Smolder__V1__SeriesRequest *sr, int exemplar_type,
    struct Querier__V1__SelectSeriesResponse *out, struct sm_arena *a,
    struct sm_err *err);

/*
 * Top changes (changes.c): the functions of two merges ranked by the rise
 * of their share (self, or total) from left to right, at most `limit`, as
 * the JSON of GET /api/top-changes into out.  0, SM_ENOMEM.
 */
int qry_changes_json(const struct sm_mtree *left, const struct sm_mtree *right,
    bool by_self, uint32_t limit, struct sm_buf *out, struct sm_err *err);

/*
 * Tenant settings registers (settings.c: last-writer-wins, majority
 * quorums over every ingester).  qry_settings_put writes one (*winner:
 * the stored winner, newer than s or s itself); qry_settings_list reads
 * the tenant's, merged and repaired, tombstones included, sorted by name;
 * qry_settings_tenants lists the tenants holding a live register whose
 * name starts with `prefix`, sorted.  All in `a`.  0, SM_EUNAVAIL (no
 * majority answered), SM_EINVAL, SM_ENOMEM.
 */
#define QRY_SETTING_RESERVED "smolder."
int qry_settings_put(struct querier *q, const char *tenant,
    Smolder__V1__TenantSetting *s, struct sm_arena *a,
    const Smolder__V1__TenantSetting **winner, struct sm_err *err);
int qry_settings_list(struct querier *q, const char *tenant,
    struct sm_arena *a, Smolder__V1__TenantSetting ***out, size_t *nout,
    struct sm_err *err);
int qry_settings_tenants(struct querier *q, const char *prefix,
    struct sm_arena *a, char ***out, size_t *nout, struct sm_err *err);

/*
 * Recording rules (rules.c): settings.v1.RecordingRulesService's routes,
 * and the evaluator thread, started when -recording-rules.remote-write-url
 * is set (*out NULL otherwise) and stopped (joined, freed) by
 * qry_rules_stop (NULL: no-op).
 */
struct qry_rules;
int qry_rules_register(struct querier *q);
int qry_rules_start(struct querier *q, struct qry_rules **out,
    struct sm_err *err);
void qry_rules_stop(struct qry_rules *rr);

#endif /* QRY_INT_H */
