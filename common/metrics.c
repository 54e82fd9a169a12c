/*
 * metrics.c -- the process-wide Prometheus registry; see metrics.h.
 *
 * Structures.  The registry is an array of families sorted by name, so
 * registration is a binary search and exposition walks it in order.  Each
 * family keeps its children in an array sorted by label values (compared
 * label by label, bytewise): lookup is a binary search, the exposition is
 * deterministic and needs no sort and no allocation, and with at most
 * SM_METRIC_MAX_CHILDREN children an insertion's memmove costs nothing
 * next to how rarely children are created.  A family without labels has
 * exactly one child, created at registration, so its zero sample is exposed
 * from the start.
 *
 * A child is one allocation: the struct, its histogram buckets (flexible
 * array) and then copies of its label values.  Children and families are
 * never freed; callers keep raw pointers for the life of the process.  The
 * registry stays reachable from a static, so LeakSanitizer does not count
 * it as a leak.
 *
 * Updates never lock.  A counter is an atomic uint64.  A gauge is a double
 * stored as its uint64 bit pattern; set is a store, add a CAS loop.  A
 * histogram child keeps a non-cumulative count per bucket (+Inf last) and
 * its sum as double bits (CAS loop).  There is deliberately no separate
 * count atomic: _count is the total of the bucket counts, computed at
 * scrape, so le="+Inf" and _count agree in every exposition.  With a
 * separate counter a scrape racing an observation could show more
 * observations in the buckets than in _count, which histogram_quantile()
 * does not forgive.  _sum may lag the buckets by observations in flight,
 * as in every lock-free client.  All atomics are relaxed: a scrape needs
 * each value to be torn-free, not ordered against the others.
 *
 * Locking.  Two mutexes, always taken in this order:
 *   r_fn_lock  the gauge-function bindings.  sm_metrics_write() holds it
 *              while it calls the functions, and sm_metric_gauge_fn() and
 *              sm_metric_gauge_fn_remove() hold it while they edit the
 *              list, which is what makes "remove, then free arg" safe.
 *   r_lock     the family array and every family's child array.
 * Gauge functions run with r_fn_lock held and r_lock NOT held, so a
 * function may take its own locks (a head lock, say) while another thread
 * holding that lock looks up a child, without a lock-order inversion.
 *
 * Cardinality.  A labelled family creates at most SM_METRIC_MAX_CHILDREN
 * children; past that, and for any label value that cannot be exposed
 * safely, the family's shared overflow child (every label "__overflow__")
 * is returned.  Unsafe values are those longer than METRICS_VALUE_MAX bytes
 * (1000 such children would otherwise bound their count but not their
 * bytes) and those that are not valid UTF-8 (Prometheus rejects the whole
 * scrape on one such value).  Asking for the overflow label set by name
 * also yields the overflow child, so that series is never exposed twice.
 *
 * Gauge functions.  Several bindings may share a name (two ingesters in one
 * test process, say); the family's single sample is then the sum of their
 * values.  Once all of a name's bindings are removed the family disappears
 * from the exposition until a binding is added again.
 *
 * Traps.  Mistakes in registration are programming errors and SM_ASSERT:
 * an invalid metric or label name, more than SM_METRIC_MAX_LABELS labels,
 * buckets that are not strictly ascending, or a second registration whose
 * kind or label names differ from the first (help text and buckets of a
 * second registration are ignored).  Only out-of-memory yields NULL.  A
 * gauge function must not call sm_metrics_write() or sm_metric_gauge_fn*():
 * r_fn_lock is not recursive.
 */
#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "labels.h"

#define METRICS_OVERFLOW "__overflow__"
#define METRICS_VALUE_MAX 256u    /* bytes of one label value */
#define METRICS_BUCKETS_MAX 64u   /* finite histogram buckets */

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
    "metric updates need lock-free 64-bit atomics");

struct sm_metric_child {
	struct sm_metric *c_fam;
	enum sm_metric_kind c_kind;     /* copy of c_fam->f_kind, no deref */
	const char *c_values[SM_METRIC_MAX_LABELS];  /* in the same block */
	_Atomic uint64_t c_val;         /* counter total, or gauge value /
	                                   histogram sum as double bits */
	_Atomic uint64_t c_bkt[];       /* histogram: f_nbounds + 1 counts */
};

struct sm_metric {
	enum sm_metric_kind f_kind;
	char *f_name;
	char *f_help;
	char *f_labels[SM_METRIC_MAX_LABELS];
	uint32_t f_nlabels;
	double *f_bounds;               /* histogram upper bounds, finite */
	uint32_t f_nbounds;
	struct sm_metric_child **f_children;  /* sorted by label values */
	uint32_t f_nchildren;
	uint32_t f_cap;
	struct sm_metric_child *f_overflow;   /* created on first need */
	bool f_is_fn;                   /* a gauge-function family */
	uint32_t f_fn_n;                /* its bindings (r_fn_lock) */
	double f_fn_sum;                /* their sum at this scrape */
};

struct metrics_fn {
	struct sm_metric *b_fam;
	double (*b_fn)(void *);
	void *b_arg;
};

static struct {
	pthread_mutex_t r_fn_lock;
	pthread_mutex_t r_lock;
	struct sm_metric **r_fams;      /* sorted by name (r_lock) */
	uint32_t r_nfams;
	uint32_t r_cap;
	struct metrics_fn *r_fns;       /* bindings (r_fn_lock) */
	uint32_t r_nfns;
	uint32_t r_fns_cap;
} metrics_reg = {
	.r_fn_lock = PTHREAD_MUTEX_INITIALIZER,
	.r_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Latency buckets in seconds, 1 ms .. 30 s. */
static const double metrics_default_buckets[] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
	10, 30,
};

static const char *const metrics_overflow_values[SM_METRIC_MAX_LABELS] = {
	METRICS_OVERFLOW, METRICS_OVERFLOW, METRICS_OVERFLOW,
};

static inline uint64_t
metrics_d2u(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof(u));
	return (u);
}

static inline double
metrics_u2d(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof(d));
	return (d);
}

static void
metrics_lock(pthread_mutex_t *mx)
{
	int rv = pthread_mutex_lock(mx);

	SM_ASSERT(rv == 0);
}

static void
metrics_unlock(pthread_mutex_t *mx)
{
	int rv = pthread_mutex_unlock(mx);

	SM_ASSERT(rv == 0);
}

/* [a-zA-Z_][a-zA-Z0-9_]*, not reserved ("__" prefix, "le" on histograms). */
static bool
metrics_label_name_valid(const char *s, enum sm_metric_kind kind)
{
	if (s[0] == '\0' || (s[0] >= '0' && s[0] <= '9'))
		return (false);
	if (s[0] == '_' && s[1] == '_')
		return (false);
	if (kind == SM_METRIC_HISTOGRAM && strcmp(s, "le") == 0)
		return (false);
	for (const char *p = s; *p != '\0'; p++) {
		char c = *p;

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_'))
			return (false);
	}
	return (true);
}

/* The family named `name`, or NULL with *posp its insertion point. */
static struct sm_metric *
metrics_find(const char *name, uint32_t *posp)
{
	uint32_t lo = 0, hi = metrics_reg.r_nfams;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int r = strcmp(name, metrics_reg.r_fams[mid]->f_name);

		if (r == 0)
			return (metrics_reg.r_fams[mid]);
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	*posp = lo;
	return (NULL);
}

/* Insert `f` at `pos` of the registry.  Call with r_lock held. */
static int
metrics_insert_family(struct sm_metric *f, uint32_t pos)
{
	struct sm_metric **fams;

	if (SM_GROW(metrics_reg.r_fams, metrics_reg.r_cap,
	    metrics_reg.r_nfams + 1, 32) != 0)
		return (SM_ENOMEM);
	fams = metrics_reg.r_fams;
	memmove(&fams[pos + 1], &fams[pos],
	    (metrics_reg.r_nfams - pos) * sizeof(*fams));
	fams[pos] = f;
	metrics_reg.r_nfams++;
	return (0);
}

/* A child of `f` with copies of `values` (f->f_nlabels of them), zeroed. */
static struct sm_metric_child *
metrics_child_alloc(struct sm_metric *f, const char *const *values)
{
	uint32_t nb = f->f_kind == SM_METRIC_HISTOGRAM ? f->f_nbounds + 1 : 0;
	size_t len[SM_METRIC_MAX_LABELS];
	size_t sz = sizeof(struct sm_metric_child) + nb * sizeof(uint64_t);
	struct sm_metric_child *c;
	char *p;

	for (uint32_t i = 0; i < f->f_nlabels; i++) {
		len[i] = strlen(values[i]);
		sz += len[i] + 1;
	}
	if ((c = sm_calloc(1, sz)) == NULL)
		return (NULL);
	c->c_fam = f;
	c->c_kind = f->f_kind;
	atomic_init(&c->c_val, 0);      /* 0, 0.0 and a 0.0 sum alike */
	for (uint32_t i = 0; i < nb; i++)
		atomic_init(&c->c_bkt[i], 0);
	p = (char *)&c->c_bkt[nb];
	for (uint32_t i = 0; i < f->f_nlabels; i++) {
		memcpy(p, values[i], len[i] + 1);
		c->c_values[i] = p;
		p += len[i] + 1;
	}
	return (c);
}

static void
metrics_family_free(struct sm_metric *f)
{
	if (f == NULL)
		return;
	for (uint32_t i = 0; i < f->f_nchildren; i++)
		sm_free(f->f_children[i]);
	sm_free(f->f_children);
	for (uint32_t i = 0; i < f->f_nlabels; i++)
		sm_free(f->f_labels[i]);
	sm_free(f->f_bounds);
	sm_free(f->f_help);
	sm_free(f->f_name);
	sm_free(f);
}

/*
 * A new family, not yet in the registry.  A plain family without labels
 * gets its only child now; a gauge-function family has no children.
 */
static struct sm_metric *
metrics_family_alloc(enum sm_metric_kind kind, bool is_fn, const char *name,
    const char *help, const char *const *labels, uint32_t nlabels,
    const double *bounds, uint32_t nbounds)
{
	struct sm_metric *f;

	if ((f = sm_calloc(1, sizeof(*f))) == NULL)
		return (NULL);
	f->f_kind = kind;
	f->f_is_fn = is_fn;
	if ((f->f_name = sm_strdup(name)) == NULL ||
	    (f->f_help = sm_strdup(help != NULL ? help : "")) == NULL)
		goto fail;
	for (; f->f_nlabels < nlabels; f->f_nlabels++) {
		f->f_labels[f->f_nlabels] = sm_strdup(labels[f->f_nlabels]);
		if (f->f_labels[f->f_nlabels] == NULL)
			goto fail;
	}
	if (nbounds != 0) {
		f->f_bounds = sm_reallocarray(NULL, nbounds, sizeof(double));
		if (f->f_bounds == NULL)
			goto fail;
		memcpy(f->f_bounds, bounds, nbounds * sizeof(double));
		f->f_nbounds = nbounds;
	}
	if (nlabels == 0 && !is_fn) {
		if ((f->f_children = sm_calloc(1, sizeof(*f->f_children))) ==
		    NULL)
			goto fail;
		f->f_cap = 1;
		if ((f->f_children[0] = metrics_child_alloc(f, NULL)) == NULL)
			goto fail;
		f->f_nchildren = 1;
	}
	return (f);
fail:
	metrics_family_free(f);
	return (NULL);
}

/* True if `f` was registered with this kind and these label names. */
static bool
metrics_same_shape(const struct sm_metric *f, enum sm_metric_kind kind,
    const char *const *labels, uint32_t nlabels)
{
	if (f->f_is_fn || f->f_kind != kind || f->f_nlabels != nlabels)
		return (false);
	for (uint32_t i = 0; i < nlabels; i++) {
		if (strcmp(f->f_labels[i], labels[i]) != 0)
			return (false);
	}
	return (true);
}

/*
 * Register a family; see metrics.h.
 * Locking: takes r_lock.  Blocking: no (a short critical section).
 * Ownership: names, help, labels and buckets are copied.
 * Returns: the family (existing or new), NULL only on out-of-memory.
 */
struct sm_metric *
sm_metric_register(enum sm_metric_kind kind, const char *name,
    const char *help, const char *const *labels, const double *buckets,
    uint32_t nbuckets)
{
	struct sm_metric *f;
	uint32_t nlabels = 0, pos;

	SM_ASSERT(kind == SM_METRIC_COUNTER || kind == SM_METRIC_GAUGE ||
	    kind == SM_METRIC_HISTOGRAM);
	SM_ASSERT(name != NULL && sm_metric_name_valid(name, strlen(name)));
	for (; labels != NULL && labels[nlabels] != NULL; nlabels++) {
		SM_ASSERT(nlabels < SM_METRIC_MAX_LABELS);
		SM_ASSERT(metrics_label_name_valid(labels[nlabels], kind));
		for (uint32_t j = 0; j < nlabels; j++)
			SM_ASSERT(strcmp(labels[j], labels[nlabels]) != 0);
	}
	if (kind != SM_METRIC_HISTOGRAM) {
		buckets = NULL;
		nbuckets = 0;
	} else if (buckets == NULL) {
		buckets = metrics_default_buckets;
		nbuckets = SM_ARRAY_LEN(metrics_default_buckets);
	}
	/* +Inf is implied; accept it spelled out as the last bound. */
	if (nbuckets != 0 && isinf(buckets[nbuckets - 1]) &&
	    buckets[nbuckets - 1] > 0)
		nbuckets--;
	SM_ASSERT(nbuckets <= METRICS_BUCKETS_MAX);
	for (uint32_t i = 0; i < nbuckets; i++)
		SM_ASSERT(!isnan(buckets[i]) &&
		    (i == 0 || buckets[i - 1] < buckets[i]));

	metrics_lock(&metrics_reg.r_lock);
	if ((f = metrics_find(name, &pos)) != NULL) {
		SM_ASSERT(metrics_same_shape(f, kind, labels, nlabels));
		goto out;
	}
	f = metrics_family_alloc(kind, false, name, help, labels, nlabels,
	    buckets, nbuckets);
	if (f != NULL && metrics_insert_family(f, pos) != 0) {
		metrics_family_free(f);
		f = NULL;
	}
out:
	metrics_unlock(&metrics_reg.r_lock);
	return (f);
}

void
sm_metrics_register_table(const struct sm_metric_def *defs, size_t n)
{
	SM_ASSERT(defs != NULL || n == 0);
	for (size_t i = 0; i < n; i++) {
		SM_ASSERT(defs[i].md_metric != NULL);
		*defs[i].md_metric = sm_metric_register(defs[i].md_kind,
		    defs[i].md_name, defs[i].md_help, defs[i].md_labels,
		    defs[i].md_buckets, defs[i].md_nbuckets);
	}
}

void
sm_metrics_register_once(struct sm_metric_set *s)
{
	static pthread_mutex_t once_mu = PTHREAD_MUTEX_INITIALIZER;

	if (atomic_load_explicit(&s->ms_done, memory_order_acquire))
		return;
	metrics_lock(&once_mu);
	if (!atomic_load_explicit(&s->ms_done, memory_order_relaxed)) {
		sm_metrics_register_table(s->ms_defs, s->ms_n);
		atomic_store_explicit(&s->ms_done, true,
		    memory_order_release);
	}
	metrics_unlock(&once_mu);
}

/* Label-by-label comparison of `values` with a child's. */
static int
metrics_values_cmp(const struct sm_metric *f, const char *const *values,
    const struct sm_metric_child *c)
{
	for (uint32_t i = 0; i < f->f_nlabels; i++) {
		int r = strcmp(values[i], c->c_values[i]);

		if (r != 0)
			return (r);
	}
	return (0);
}

/*
 * The child with `values`, created if the family has room.  Sets *fullp
 * when it has none.  Returns NULL when full or out of memory.
 * Call with r_lock held.
 */
static struct sm_metric_child *
metrics_child_lookup(struct sm_metric *f, const char *const *values,
    bool *fullp)
{
	struct sm_metric_child *c;
	uint32_t lo = 0, hi = f->f_nchildren;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int r = metrics_values_cmp(f, values, f->f_children[mid]);

		if (r == 0)
			return (f->f_children[mid]);
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (f->f_nchildren >= SM_METRIC_MAX_CHILDREN) {
		*fullp = true;
		return (NULL);
	}
	if (f->f_nchildren == f->f_cap) {
		uint32_t ncap = SM_MIN(f->f_cap ? f->f_cap * 2 : 8,
		    SM_METRIC_MAX_CHILDREN);
		struct sm_metric_child **nc = sm_reallocarray(f->f_children,
		    ncap, sizeof(*nc));

		if (nc == NULL)
			return (NULL);
		f->f_children = nc;
		f->f_cap = ncap;
	}
	if ((c = metrics_child_alloc(f, values)) == NULL)
		return (NULL);
	memmove(&f->f_children[lo + 1], &f->f_children[lo],
	    (f->f_nchildren - lo) * sizeof(*f->f_children));
	f->f_children[lo] = c;
	f->f_nchildren++;
	return (c);
}

/*
 * The child for `values` of a labelled family, the overflow child when the
 * values are unsafe or the family is full, NULL on out-of-memory.
 */
static struct sm_metric_child *
metrics_child_get(struct sm_metric *f, const char *const *values)
{
	struct sm_metric_child *c = NULL;
	bool unsafe = false, overflow = true, full = false;

	SM_ASSERT(f->f_nlabels > 0 && !f->f_is_fn);
	for (uint32_t i = 0; i < f->f_nlabels; i++) {
		size_t n = strlen(values[i]);

		if (n > METRICS_VALUE_MAX || !sm_utf8_valid(values[i], n))
			unsafe = true;
		if (strcmp(values[i], METRICS_OVERFLOW) != 0)
			overflow = false;
	}
	metrics_lock(&metrics_reg.r_lock);
	if (!unsafe && !overflow)
		c = metrics_child_lookup(f, values, &full);
	if (unsafe || overflow || full) {
		if (f->f_overflow == NULL)
			f->f_overflow = metrics_child_alloc(f,
			    metrics_overflow_values);
		c = f->f_overflow;
	}
	metrics_unlock(&metrics_reg.r_lock);
	return (c);
}

/*
 * Find or create a child.  A NULL value counts as "".
 * Locking: takes r_lock.  Blocking: no.
 * Ownership: the values are copied; the child lives as long as the process.
 * Returns: the child, the overflow child (see above), or NULL when `m` is
 * NULL or memory ran out.
 */
struct sm_metric_child *
sm_metric_child(struct sm_metric *m, ...)
{
	const char *values[SM_METRIC_MAX_LABELS];
	va_list ap;

	if (m == NULL)
		return (NULL);
	if (m->f_nlabels == 0)
		return (sm_metric_child0(m));
	va_start(ap, m);
	for (uint32_t i = 0; i < m->f_nlabels; i++) {
		values[i] = va_arg(ap, const char *);
		if (values[i] == NULL)
			values[i] = "";
	}
	va_end(ap);
	return (metrics_child_get(m, values));
}

/*
 * The only child of an unlabelled family (created at registration and
 * never moved, so no lock is needed).  Returns NULL when `m` is NULL.
 */
struct sm_metric_child *
sm_metric_child0(struct sm_metric *m)
{
	if (m == NULL)
		return (NULL);
	SM_ASSERT(m->f_nlabels == 0 && m->f_nchildren == 1);
	return (m->f_children[0]);
}

/* Lock-free; NULL is ignored.  The total wraps at 2^64. */
void
sm_counter_add(struct sm_metric_child *c, uint64_t v)
{
	if (c == NULL)
		return;
	SM_ASSERT(c->c_kind == SM_METRIC_COUNTER);
	atomic_fetch_add_explicit(&c->c_val, v, memory_order_relaxed);
}

/* Lock-free; NULL is ignored. */
void
sm_gauge_set(struct sm_metric_child *c, double v)
{
	if (c == NULL)
		return;
	SM_ASSERT(c->c_kind == SM_METRIC_GAUGE);
	atomic_store_explicit(&c->c_val, metrics_d2u(v), memory_order_relaxed);
}

/* Add to a double kept as bits; a CAS loop, retried under contention. */
static void
metrics_add_double(_Atomic uint64_t *p, double v)
{
	uint64_t old = atomic_load_explicit(p, memory_order_relaxed);

	while (!atomic_compare_exchange_weak_explicit(p, &old,
	    metrics_d2u(metrics_u2d(old) + v), memory_order_relaxed,
	    memory_order_relaxed))
		;
}

/* Lock-free; NULL is ignored. */
void
sm_gauge_add(struct sm_metric_child *c, double v)
{
	if (c == NULL)
		return;
	SM_ASSERT(c->c_kind == SM_METRIC_GAUGE);
	metrics_add_double(&c->c_val, v);
}

/*
 * Lock-free; NULL is ignored.  The bucket is the first whose bound is
 * >= v (le is inclusive); NaN lands in +Inf and makes the sum NaN, as in
 * the Go client.
 */
void
sm_histogram_observe(struct sm_metric_child *c, double v)
{
	const struct sm_metric *f;
	uint32_t lo = 0, hi;

	if (c == NULL)
		return;
	SM_ASSERT(c->c_kind == SM_METRIC_HISTOGRAM);
	f = c->c_fam;
	hi = f->f_nbounds;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (v <= f->f_bounds[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	atomic_fetch_add_explicit(&c->c_bkt[lo], 1, memory_order_relaxed);
	metrics_add_double(&c->c_val, v);
}

/* Observations of a histogram child: the total of its bucket counts. */
static uint64_t
metrics_hist_count(const struct sm_metric_child *c)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i <= c->c_fam->f_nbounds; i++)
		n += atomic_load_explicit(&c->c_bkt[i], memory_order_relaxed);
	return (n);
}

/*
 * Current value: a counter's total, a gauge's value or, for a histogram,
 * its number of observations; 0 for NULL.  Lock-free.
 */
double
sm_metric_value(struct sm_metric_child *c)
{
	uint64_t u;

	if (c == NULL)
		return (0);
	if (c->c_kind == SM_METRIC_HISTOGRAM)
		return ((double)metrics_hist_count(c));
	u = atomic_load_explicit(&c->c_val, memory_order_relaxed);
	return (c->c_kind == SM_METRIC_COUNTER ? (double)u : metrics_u2d(u));
}

/*
 * Bind `fn(arg)` to the gauge `name`; see the opening comment for several
 * bindings of one name.  Binding the same (fn, arg) twice is a no-op.
 * Locking: takes r_fn_lock, then r_lock; waits for a scrape in progress.
 * Ownership: `arg` stays the caller's; it must outlive the binding.
 * Returns: nothing; out of memory drops the binding (the gauge is absent).
 */
void
sm_metric_gauge_fn(const char *name, const char *help,
    double (*fn)(void *arg), void *arg)
{
	struct sm_metric *f;
	struct metrics_fn *b;
	uint32_t pos;

	SM_ASSERT(name != NULL && sm_metric_name_valid(name, strlen(name)));
	SM_ASSERT(fn != NULL);
	metrics_lock(&metrics_reg.r_fn_lock);
	metrics_lock(&metrics_reg.r_lock);
	if ((f = metrics_find(name, &pos)) != NULL) {
		SM_ASSERT(f->f_is_fn);
	} else if ((f = metrics_family_alloc(SM_METRIC_GAUGE, true, name, help,
	    NULL, 0, NULL, 0)) != NULL && metrics_insert_family(f, pos) != 0) {
		metrics_family_free(f);
		f = NULL;
	}
	metrics_unlock(&metrics_reg.r_lock);
	if (f == NULL)
		goto out;
	for (uint32_t i = 0; i < metrics_reg.r_nfns; i++) {
		b = &metrics_reg.r_fns[i];
		if (b->b_fam == f && b->b_fn == fn && b->b_arg == arg)
			goto out;
	}
	if (SM_GROW(metrics_reg.r_fns, metrics_reg.r_fns_cap,
	    metrics_reg.r_nfns + 1, 16) != 0)
		goto out;
	b = &metrics_reg.r_fns[metrics_reg.r_nfns++];
	b->b_fam = f;
	b->b_fn = fn;
	b->b_arg = arg;
	f->f_fn_n++;
out:
	metrics_unlock(&metrics_reg.r_fn_lock);
}

/*
 * Drop every binding whose argument is `arg`, under any name.
 * Locking: takes r_fn_lock.  Blocking: waits for a scrape that is calling
 * gauge functions, so once it returns no function runs with `arg` and the
 * caller may free it.  Do not call it holding a lock a gauge function
 * takes.
 */
void
sm_metric_gauge_fn_remove(void *arg)
{
	uint32_t n = 0;

	metrics_lock(&metrics_reg.r_fn_lock);
	for (uint32_t i = 0; i < metrics_reg.r_nfns; i++) {
		struct metrics_fn *b = &metrics_reg.r_fns[i];

		if (b->b_arg == arg) {
			SM_ASSERT(b->b_fam->f_fn_n > 0);
			b->b_fam->f_fn_n--;
			continue;
		}
		metrics_reg.r_fns[n++] = *b;
	}
	metrics_reg.r_nfns = n;
	metrics_unlock(&metrics_reg.r_fn_lock);
}

/*
 * Append `s`, escaping backslash and newline, and double quotes too when
 * `quote` (label values; HELP text keeps its quotes).
 */
static void
metrics_put_escaped(struct sm_buf *out, const char *s, bool quote)
{
	const char *run = s;

	for (; *s != '\0'; s++) {
		const char *esc;

		if (*s == '\\')
			esc = "\\\\";
		else if (*s == '\n')
			esc = "\\n";
		else if (*s == '"' && quote)
			esc = "\\\"";
		else
			continue;
		sm_buf_append(out, run, (size_t)(s - run));
		sm_buf_puts(out, esc);
		run = s + 1;
	}
	sm_buf_append(out, run, (size_t)(s - run));
}

/*
 * A double as Go's strconv.FormatFloat(v, 'g', -1, 64), which the Go client
 * uses: the fewest significant digits that read back as `v`, in exponent
 * form when the decimal exponent is < -4 or >= 6, as Go decides for the
 * shortest form ("100000", "1e+06", "0.0001", "1e-05").  The digits are
 * printf's correct rounding at the shortest round-tripping precision; in
 * rare cases next to a power of two Go's search finds a string one digit
 * shorter.  Both read back as the same double.
 */
static void
metrics_put_double(struct sm_buf *out, double v)
{
	char tmp[40];
	int prec, exp;

	if (isnan(v)) {
		sm_buf_puts(out, "NaN");
		return;
	}
	if (isinf(v)) {
		sm_buf_puts(out, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	/* 17 significant digits always read back exactly. */
	for (prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	exp = atoi(strchr(tmp, 'e') + 1);
	if (exp < -4 || exp >= 6)
		sm_buf_puts(out, tmp);
	else
		sm_buf_printf(out, "%.*f", SM_MAX(prec - 1 - exp, 0), v);
}

/* `name` + `suffix`, then the labels in braces, with le="..." if `le`. */
static void
metrics_put_series(struct sm_buf *out, const struct sm_metric *f,
    const char *suffix, const struct sm_metric_child *c, const double *le)
{
	sm_buf_puts(out, f->f_name);
	sm_buf_puts(out, suffix);
	if (f->f_nlabels == 0 && le == NULL)
		return;
	sm_buf_putc(out, '{');
	for (uint32_t i = 0; i < f->f_nlabels; i++) {
		if (i > 0)
			sm_buf_putc(out, ',');
		sm_buf_puts(out, f->f_labels[i]);
		sm_buf_puts(out, "=\"");
		metrics_put_escaped(out, c->c_values[i], true);
		sm_buf_putc(out, '"');
	}
	if (le != NULL) {
		sm_buf_puts(out, f->f_nlabels > 0 ? ",le=\"" : "le=\"");
		metrics_put_double(out, *le);
		sm_buf_putc(out, '"');
	}
	sm_buf_putc(out, '}');
}

/* The sample lines of one child. */
static void
metrics_write_child(struct sm_buf *out, const struct sm_metric *f,
    const struct sm_metric_child *c)
{
	static const double inf = INFINITY;
	uint64_t u = atomic_load_explicit(&c->c_val, memory_order_relaxed);
	uint64_t cum = 0;

	switch (f->f_kind) {
	case SM_METRIC_COUNTER:
	case SM_METRIC_GAUGE:
		metrics_put_series(out, f, "", c, NULL);
		sm_buf_putc(out, ' ');
		if (f->f_kind == SM_METRIC_COUNTER)
			sm_buf_put_u64(out, u);
		else
			metrics_put_double(out, metrics_u2d(u));
		sm_buf_putc(out, '\n');
		break;
	case SM_METRIC_HISTOGRAM:
		for (uint32_t i = 0; i <= f->f_nbounds; i++) {
			cum += atomic_load_explicit(&c->c_bkt[i],
			    memory_order_relaxed);
			metrics_put_series(out, f, "_bucket", c,
			    i < f->f_nbounds ? &f->f_bounds[i] : &inf);
			sm_buf_putc(out, ' ');
			sm_buf_put_u64(out, cum);
			sm_buf_putc(out, '\n');
		}
		metrics_put_series(out, f, "_sum", c, NULL);
		sm_buf_putc(out, ' ');
		metrics_put_double(out, metrics_u2d(u));
		sm_buf_putc(out, '\n');
		metrics_put_series(out, f, "_count", c, NULL);
		sm_buf_putc(out, ' ');
		sm_buf_put_u64(out, cum);
		sm_buf_putc(out, '\n');
		break;
	}
}

/* HELP, TYPE and samples of one family.  Call with both locks held. */
static void
metrics_write_family(struct sm_buf *out, const struct sm_metric *f)
{
	static const char *const kind_names[] = {
		[SM_METRIC_COUNTER] = "counter",
		[SM_METRIC_GAUGE] = "gauge",
		[SM_METRIC_HISTOGRAM] = "histogram",
	};

	if (f->f_is_fn && f->f_fn_n == 0)
		return;
	sm_buf_puts(out, "# HELP ");
	sm_buf_puts(out, f->f_name);
	sm_buf_putc(out, ' ');
	metrics_put_escaped(out, f->f_help, false);
	sm_buf_puts(out, "\n# TYPE ");
	sm_buf_puts(out, f->f_name);
	sm_buf_putc(out, ' ');
	sm_buf_puts(out, kind_names[f->f_kind]);
	sm_buf_putc(out, '\n');
	if (f->f_is_fn) {
		sm_buf_puts(out, f->f_name);
		sm_buf_putc(out, ' ');
		metrics_put_double(out, f->f_fn_sum);
		sm_buf_putc(out, '\n');
		return;
	}
	for (uint32_t i = 0; i < f->f_nchildren; i++)
		metrics_write_child(out, f, f->f_children[i]);
	if (f->f_overflow != NULL)
		metrics_write_child(out, f, f->f_overflow);
}

/*
 * Append the exposition (text format 0.0.4): families by name, children by
 * label values, the overflow child last.
 * Locking: takes r_fn_lock, calls the gauge functions, then takes r_lock
 * for the walk; updates proceed meanwhile, child lookups wait for the walk.
 * Blocking: as long as the slowest gauge function.
 * Ownership: appends to `out`; errors stay in its sticky flag.
 */
void
sm_metrics_write(struct sm_buf *out)
{
	metrics_lock(&metrics_reg.r_fn_lock);
	for (uint32_t i = 0; i < metrics_reg.r_nfns; i++)
		metrics_reg.r_fns[i].b_fam->f_fn_sum = 0;
	for (uint32_t i = 0; i < metrics_reg.r_nfns; i++) {
		struct metrics_fn *b = &metrics_reg.r_fns[i];

		b->b_fam->f_fn_sum += b->b_fn(b->b_arg);
	}
	metrics_lock(&metrics_reg.r_lock);
	for (uint32_t i = 0; i < metrics_reg.r_nfams; i++)
		metrics_write_family(out, metrics_reg.r_fams[i]);
	metrics_unlock(&metrics_reg.r_lock);
	metrics_unlock(&metrics_reg.r_fn_lock);
}
