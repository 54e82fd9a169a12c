/*
 * metrics.h -- Prometheus metrics: a process-wide registry of counters,
 * gauges and histograms, exposed as text format 0.0.4 on GET /metrics by
 * every component.
 *
 * Families are registered once, at startup, with a name, help text and at
 * most SM_METRIC_MAX_LABELS label names.  A child (one label-value
 * combination) is found or created with sm_metric_child(); callers on hot
 * paths look children up once and keep the pointer.  Updates are lock-free
 * atomics; lookup/creation of children and exposition take a mutex.
 * Children are never freed while the process runs.
 *
 * Gauge functions are evaluated at scrape time (head bytes, series count).
 *
 * Cardinality is bounded: a family refuses to create more than
 * SM_METRIC_MAX_CHILDREN children and returns a shared "overflow" child
 * whose labels are all "__overflow__", so a hostile label value (a tenant
 * id, a reason) can never grow memory without bound.
 *
 * Names follow Prometheus conventions: smolder_<component>_<what>_<unit>,
 * counters end in _total.
 */
#ifndef SM_METRICS_H
#define SM_METRICS_H

#include "buf.h"
#include "sm.h"

#include <stdatomic.h>

#define SM_METRIC_MAX_LABELS 3
#define SM_METRIC_MAX_CHILDREN 1000

enum sm_metric_kind {
	SM_METRIC_COUNTER,
	SM_METRIC_GAUGE,
	SM_METRIC_HISTOGRAM,
};

struct sm_metric;         /* a family */
struct sm_metric_child;   /* one label combination */

/*
 * Register a family in the process registry.  `labels` is a NULL-terminated
 * array of label names (NULL for none).  For histograms, `buckets` are the
 * upper bounds (ascending, +Inf implied), `nbuckets` of them; NULL selects
 * the default latency buckets (0.001 .. 30 s).  Registering the same name
 * twice returns the existing family (the kinds must agree).  Never fails
 * except on out-of-memory at startup (then NULL, and updates to a NULL
 * family are ignored).
 */
struct sm_metric *sm_metric_register(enum sm_metric_kind kind,
    const char *name, const char *help, const char *const *labels,
    const double *buckets, uint32_t nbuckets);

/*
 * One family of a module's metrics, as a row of a const table: the module
 * lists its families once, with the variable each is kept in, and
 * registers them all with sm_metrics_register_table().  The fields are
 * sm_metric_register()'s arguments.
 */
struct sm_metric_def {
	struct sm_metric **md_metric;      /* where the family is kept */
	enum sm_metric_kind md_kind;
	const char *md_name;
	const char *md_help;
	const char *const *md_labels;      /* NULL-terminated, or NULL */
	const double *md_buckets;          /* histograms; NULL = default */
	uint32_t md_nbuckets;
};

/* Label names for a sm_metric_def row: SM_METRIC_LABELS("tenant").  At
 * file scope the array it makes has static storage. */
#define SM_METRIC_LABELS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/*
 * Register every family of `defs` (n rows) in order, storing each in
 * *md_metric; registering again returns the same families.  Modules
 * usually go through sm_metrics_register_once() below.
 * Locking/Blocking: as sm_metric_register.
 */
void sm_metrics_register_table(const struct sm_metric_def *defs, size_t n);

/*
 * A module's table with the flag that it is registered, so the module
 * registers it from wherever it first needs its metrics:
 *
 *	static struct sm_metric_set x_metric_set = SM_METRIC_SET(x_defs);
 *	...
 *	sm_metrics_register_once(&x_metric_set);
 */
struct sm_metric_set {
	const struct sm_metric_def *ms_defs;
	size_t ms_n;
	_Atomic bool ms_done;
};
#define SM_METRIC_SET(defs) { (defs), SM_ARRAY_LEN(defs), false }

/*
 * Register the set's table the first time any thread calls this; later
 * calls return at once.
 * Locking: a process-wide mutex until the set is registered.  Blocking:
 * only while another thread registers a set.
 */
void sm_metrics_register_once(struct sm_metric_set *s);

/* The child for these label values (as many as the family has labels). */
struct sm_metric_child *sm_metric_child(struct sm_metric *m, ...);

/* The unlabelled child of a family without labels. */
struct sm_metric_child *sm_metric_child0(struct sm_metric *m);

void sm_counter_add(struct sm_metric_child *c, uint64_t v);
static inline void sm_counter_inc(struct sm_metric_child *c)
{
	sm_counter_add(c, 1);
}
void sm_gauge_set(struct sm_metric_child *c, double v);
void sm_gauge_add(struct sm_metric_child *c, double v);
void sm_histogram_observe(struct sm_metric_child *c, double v);

/* Current value (tests): counter total or gauge value. */
double sm_metric_value(struct sm_metric_child *c);

/* A gauge computed at scrape time; `fn` may be called from any thread. */
void sm_metric_gauge_fn(const char *name, const char *help,
    double (*fn)(void *arg), void *arg);

/* Forget gauge functions bound to `arg` (before `arg` is freed). */
void sm_metric_gauge_fn_remove(void *arg);

/* Append the exposition of every family, sorted by name. */
void sm_metrics_write(struct sm_buf *out);

#endif /* SM_METRICS_H */
