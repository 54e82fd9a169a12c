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

#include "common/ring.h"

#include "querier.h"

struct querier {
	struct qry_config cfg;
	struct sm_http *http;
	struct sm_ring *ring;
};

/* --- fan-out (fanout.c) and replica de-duplication (plan.c) ---------------- */

/* One ingester's answer in a fan-out round. */
struct qry_call {
	uint32_t member;                 /* index in the fan's snapshot */
	struct sm_arena *arena;          /* owned; holds resp */
	Smolder__V1__Response *resp;     /* when rv == 0 */
	int rv;
	struct sm_err err;
};

#define QRY_MAX_ATTEMPTS 3

/*
 * A query's view of the ring: the healthy members it asks (targets), and
 * the answers of its last round.  Rounds tolerate failed targets as long
 * as failed + unhealthy members stay within the ring's read error budget
 * (sm_ring_max_read_errors: RF - quorum).  A target that fails after the
 * plan gave it data to contribute makes the round return SM_EAGAIN; the
 * query then starts over without it (qry_merge), at most
 * QRY_MAX_ATTEMPTS times.
 */
struct qry_fan {
	struct sm_ring_snap *snap;
	uint32_t *target;                /* member indexes asked */
	uint32_t n;
	uint32_t down;                   /* unhealthy or excluded members */
	uint8_t *excluded;               /* per member (snap->n): failed */
	struct qry_call *calls;          /* last round: n entries */
	struct sm_arena *arena;          /* the plan's picks */
	Smolder__V1__Select **sel;       /* plan: per target, NULL = skip;
					  * NULL array = the query's own select
					  * for every target */
	const Smolder__V1__Select *base; /* the query's select */
};

void qry_fan_init(struct qry_fan *f);

/* Take a ring snapshot and pick targets (healthy, not excluded). */
int qry_fan_open(struct querier *q, struct qry_fan *f, struct sm_err *err);

/* Release everything, keep f->excluded (for a retry) unless `all`. */
void qry_fan_close(struct qry_fan *f, bool all);

/*
 * One round: send reqs[i] to target i (nreqs == 1: the same request to
 * every target; a NULL entry skips the target) and wait for all.  Frees
 * the previous round's answers.  Returns 0 when enough answered (failed
 * targets have calls[i].rv != 0), SM_EAGAIN when a target in `must`
 * (per target, may be NULL) failed -- it is marked excluded --, or the
 * first error when failures exceed the read error budget.
 */
int qry_fan_round(struct querier *q, struct qry_fan *f,
    Smolder__V1__Request *const *reqs, uint32_t nreqs, const char *method,
    const uint8_t *must, struct sm_err *err);

/*
 * Plan `sel` (plan.c): fill f->sel so every (series, bucket) is counted
 * once across replicas.  Leaves f->sel NULL when no de-duplication is
 * needed (RF 1, or a single target).  May run Stats rounds.
 */
int qry_plan(struct querier *q, struct qry_fan *f,
    const Smolder__V1__Select *sel, struct sm_err *err);

/* Which targets the plan gives something to contribute (n entries). */
const uint8_t *qry_plan_must(const struct qry_fan *f, uint8_t *buf);

/* Send a labels request to every target (no plan: labels are sets). */
int qry_fanout_same(struct querier *q, struct qry_fan *f,
    const Smolder__V1__Request *req, const char *method,
    struct sm_err *err);

/* One merged time series (group_by label values, points by time). */
struct qry_series {
	Types__V1__LabelPair **labels;
	uint32_t nlabels;
	int64_t *ts;
	double *v;
	uint32_t n;
};

/*
 * Fan a planned series request out (f must hold a plan for sr->select)
 * and sum the answers per (group, timestamp).  Output in `a`, groups
 * sorted by label values.
 */
int qry_series(struct querier *q, struct qry_fan *f,
    const Smolder__V1__SeriesRequest *sr, struct sm_arena *a,
    struct qry_series **out, uint32_t *nout, struct sm_err *err);

/*
 * Open `f`, plan sr->select and run qry_series, retrying without failed
 * ingesters.  Group labels point into f's answers: copy them before
 * qry_fan_close(f, true).
 */
int qry_series_select(struct querier *q, struct qry_fan *f,
    const Smolder__V1__SeriesRequest *sr, struct sm_arena *a,
    struct qry_series **out, uint32_t *nout, struct sm_err *err);

/* --- merge (render.c) ---------------------------------------------------- */

/* The selector as RPC matchers, allocated in `a`.  0 or SM_ENOMEM. */
int qry_select_pb(const struct sm_selector *s, const char *tenant,
    int64_t start, int64_t end, struct sm_arena *a, Smolder__V1__Select *sel);

/*
 * Plan and fan a merge of `sel` out and fold the answers into `m` (fresh
 * from sm_mtree_init).  `f` (initialised) keeps the ring snapshot, the
 * plan and the responses -- their strings back m's metadata -- until the
 * caller's qry_fan_close(f, true); the plan can serve a following
 * qry_series() of the same select.
 */
int qry_merge(struct querier *q, const Smolder__V1__Select *sel,
    struct sm_mtree *m, struct qry_fan *f, struct sm_err *err);

/* settings.v1, capabilities.v1, version.v1 routes (settings.c). */
int qry_settings_register(struct querier *q);

/* Pyroscope's timeline step for a range (ms in, ms out). */
int64_t qry_calc_step_ms(int64_t from_ms, int64_t until_ms);

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

/* --- HTTP (render.c, labels.c) --------------------------------------------- */

int qry_render_register(struct querier *q);
int qry_labels_register(struct querier *q);
int qry_connect_register(struct querier *q);

#endif /* QRY_INT_H */
