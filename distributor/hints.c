/*
 * hints.c -- hinted handoff; see hints.h for what and why.
 *
 * The queue is one list in arrival order (a hint per (upload, member));
 * the thread walks it every HINT_TICK_MS or when woken by a new hint,
 * delivers what is due, and never holds the lock across a call.  A member
 * that fails a delivery is not tried again in the same walk, so hints to
 * it stay in order and one dead member costs one timeout per walk.
 */
#include "hints.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/metrics.h"
#include "smolder/v1/rpc.pb-c.h"

#define HINT_TICK_MS 100
#define HINT_MIN_BACKOFF_MS 200
#define HINT_MAX_BACKOFF_MS 5000
/* Kept under the ingester's default -ingester.idempotency-window (1 m),
 * with room for a delivery's own timeout. */
#define HINT_AMBIGUOUS_MS 45000

struct hint {
	struct hint *next;
	char *url;
	uint8_t *req;
	size_t len;
	struct sm_rpc_multi *mc;        /* original call, maybe in flight */
	uint32_t slot;
	bool ambiguous;
	int64_t born_ns, next_ns;
	int64_t backoff_ms;
};

struct dist_hints {
	struct dist_hints_cfg cfg;
	struct sm_ring *ring;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hint *head, **tail;      /* mu */
	uint64_t n, bytes;              /* mu */
	bool stop;                      /* mu */
	pthread_t thr;
	int started;
};

static struct sm_metric *m_hints, *m_hint_bytes, *m_delivered, *m_dropped;
static pthread_once_t hints_once = PTHREAD_ONCE_INIT;

static void
hints_metrics(void)
{
	static const char *const reason[] = { "reason", NULL };

	m_hints = sm_metric_register(SM_METRIC_GAUGE,
	    "smolder_distributor_hints", "Writes waiting to be handed to a "
	    "replica that missed them.", NULL, NULL, 0);
	m_hint_bytes = sm_metric_register(SM_METRIC_GAUGE,
	    "smolder_distributor_hints_bytes", "Bytes of the waiting hints.",
	    NULL, NULL, 0);
	m_delivered = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_distributor_hints_delivered_total", "Missed writes "
	    "handed to their replica (or found applied after all).", NULL,
	    NULL, 0);
	m_dropped = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_distributor_hints_dropped_total", "Hints given up: "
	    "expired, queue full, rejected by the ingester, shutdown.",
	    reason, NULL, 0);
}

/* Queue accounting (under mu) and its gauges. */
static void
account(struct dist_hints *h, int sign, size_t cost)
{
	if (sign > 0) {
		h->n++;
		h->bytes += cost;
	} else {
		h->n--;
		h->bytes -= cost;
	}
	sm_gauge_add(sm_metric_child0(m_hints), sign);
	sm_gauge_add(sm_metric_child0(m_hint_bytes), sign * (double)cost);
}

static size_t
hint_cost(const struct hint *x)
{
	return (x->len + strlen(x->url) + sizeof(*x));
}

static void
hint_free(struct hint *x)
{
	if (x == NULL)
		return;
	sm_rpc_multi_destroy(x->mc);
	sm_free(x->url);
	sm_free(x->req);
	sm_free(x);
}

static void
dropped(const char *why)
{
	sm_counter_inc(sm_metric_child(m_dropped, why));
}

void
dist_hints_add(struct dist_hints *h, const char *url, const void *req,
    size_t len, struct sm_rpc_multi *mc, uint32_t slot, bool ambiguous)
{
	struct hint *x;
	size_t cost = len + strlen(url) + sizeof(struct hint);

	if (h == NULL)
		return;
	pthread_mutex_lock(&h->mu);
	if (h->stop || h->bytes + cost > (uint64_t)h->cfg.max_bytes) {
		pthread_mutex_unlock(&h->mu);
		dropped("full");
		return;
	}
	pthread_mutex_unlock(&h->mu);
	if ((x = sm_calloc(1, sizeof(*x))) == NULL ||
	    (x->url = sm_strdup(url)) == NULL ||
	    (x->req = sm_malloc(SM_MAX(len, 1))) == NULL) {
		hint_free(x);
		dropped("full");
		return;
	}
	memcpy(x->req, req, len);
	x->len = len;
	x->ambiguous = ambiguous;
	x->born_ns = x->next_ns = sm_mono_ns();
	x->backoff_ms = HINT_MIN_BACKOFF_MS;
	if (mc != NULL) {
		sm_rpc_multi_hold(mc);
		x->mc = mc;
		x->slot = slot;
	}
	pthread_mutex_lock(&h->mu);
	*h->tail = x;
	h->tail = &x->next;
	account(h, 1, hint_cost(x));
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

uint64_t
dist_hints_pending(struct dist_hints *h)
{
	uint64_t n;

	if (h == NULL)
		return (0);
	pthread_mutex_lock(&h->mu);
	n = h->n;
	pthread_mutex_unlock(&h->mu);
	return (n);
}

/* Where the member with `url` is in the snapshot, or UINT32_MAX. */
static uint32_t
member_of(const struct sm_ring_snap *s, const char *url)
{
	for (uint32_t i = 0; i < s->n; i++) {
		if (strcmp(s->m[i]->url, url) == 0)
			return (i);
	}
	return (UINT32_MAX);
}

/* Deliver one hint: 0, or an error code (SM_EAGAIN: not now). */
static int
deliver(struct dist_hints *h, struct hint *x)
{
	struct sm_ring_snap *s = sm_ring_acquire(h->ring);
	struct sm_buf rb = SM_BUF_INIT;
	Smolder__V1__Response *resp;
	uint32_t m = member_of(s, x->url);
	int rv;

	if (m == UINT32_MAX || !s->writable[m]) {
		sm_ring_release(s);
		return (SM_EAGAIN);
	}
	rv = sm_rpc_call(s->m[m]->client, x->req, x->len,
	    (int)h->cfg.timeout_ms, &rb);
	sm_ring_release(s);
	if (rv == 0) {
		resp = smolder__v1__response__unpack(NULL, rb.len,
		    (const uint8_t *)(rb.b != NULL ? rb.b : ""));
		rv = resp == NULL ? SM_EPROTO : resp->code;
		if (resp != NULL)
			smolder__v1__response__free_unpacked(resp, NULL);
	}
	sm_buf_fini(&rb);
	return (rv);
}

/* Errors that say the request itself is bad: retrying cannot help. */
static bool
rejected(int rv)
{
	return (rv == SM_EMALFORMED || rv == SM_EINVAL || rv == SM_EPROTO ||
	    rv == SM_ETOOBIG || rv == SM_ELIMIT);
}

/* One walk over the queue.  Returns after the stop flag too. */
static void
walk(struct dist_hints *h)
{
	struct hint *x, **pp;
	char *failed[16];
	uint32_t nfailed = 0;

	pthread_mutex_lock(&h->mu);
	pp = &h->head;
	while ((x = *pp) != NULL && !h->stop) {
		int64_t now = sm_mono_ns(), limit;
		const char *why = NULL;
		bool skip = false;
		int rv;

		pthread_mutex_unlock(&h->mu);
		limit = x->ambiguous ? SM_MIN(h->cfg.max_age_ms,
		    HINT_AMBIGUOUS_MS) : h->cfg.max_age_ms;
		if (x->mc != NULL) {
			int st = sm_rpc_multi_status(x->mc, x->slot);

			if (st == SM_RPC_PENDING) {
				skip = true;    /* still in flight */
			} else {
				sm_rpc_multi_destroy(x->mc);
				x->mc = NULL;
				if (st == 0)
					why = "";   /* it got there after all */
				else if (st != SM_ETIMEDOUT &&
				    st != SM_ECLOSED && st != SM_EPROTO)
					x->ambiguous = false;
			}
		}
		for (uint32_t i = 0; !skip && why == NULL && i < nfailed; i++)
			skip = strcmp(failed[i], x->url) == 0;
		if (why == NULL && (now - x->born_ns) / 1000000 >= limit)
			why = "expired";
		else if (why == NULL && !skip && now >= x->next_ns) {
			rv = deliver(h, x);
			if (rv == 0) {
				why = "";
			} else if (rejected(rv)) {
				why = "rejected";
				sm_warn("distributor", "hint rejected\t"
				    "member=%s err=\"%s\"", x->url,
				    sm_strerror(rv));
			} else {
				x->next_ns = sm_mono_ns() + x->backoff_ms *
				    1000000;
				x->backoff_ms = SM_MIN(x->backoff_ms * 2,
				    HINT_MAX_BACKOFF_MS);
				if (nfailed < SM_ARRAY_LEN(failed))
					failed[nfailed++] = x->url;
			}
		}
		pthread_mutex_lock(&h->mu);
		if (why == NULL) {
			pp = &x->next;
			continue;
		}
		/* Unlink x: new hints are only appended at the tail. */
		*pp = x->next;
		if (h->tail == &x->next)
			h->tail = pp;
		account(h, -1, hint_cost(x));
		pthread_mutex_unlock(&h->mu);
		if (why[0] == '\0')
			sm_counter_inc(sm_metric_child0(m_delivered));
		else
			dropped(why);
		/* failed[] may point at this url: keep it comparable. */
		for (uint32_t i = 0; i < nfailed; i++) {
			if (failed[i] == x->url)
				failed[i] = "";
		}
		hint_free(x);
		pthread_mutex_lock(&h->mu);
	}
	pthread_mutex_unlock(&h->mu);
}

static void *
hints_main(void *arg)
{
	struct dist_hints *h = arg;

	pthread_mutex_lock(&h->mu);
	while (!h->stop) {
		pthread_mutex_unlock(&h->mu);
		walk(h);
		pthread_mutex_lock(&h->mu);
		if (h->stop)
			break;
		sm_cond_wait_ms(&h->cv, &h->mu, HINT_TICK_MS);
	}
	pthread_mutex_unlock(&h->mu);
	return (NULL);
}

int
dist_hints_create(const struct dist_hints_cfg *cfg, struct sm_ring *ring,
    struct dist_hints **out, struct sm_err *err)
{
	struct dist_hints *h;

	*out = NULL;
	pthread_once(&hints_once, hints_metrics);
	if (cfg->max_bytes < 0 || cfg->max_age_ms < 0 || cfg->timeout_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "distributor: hints sizes "
		    "and ages must be >= 0"));
	if (cfg->max_bytes == 0 || cfg->max_age_ms == 0 || ring == NULL)
		return (0);
	if ((h = sm_calloc(1, sizeof(*h))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	h->cfg = *cfg;
	h->ring = ring;
	h->tail = &h->head;
	pthread_mutex_init(&h->mu, NULL);
	sm_cond_init(&h->cv);
	if (pthread_create(&h->thr, NULL, hints_main, h) != 0) {
		pthread_cond_destroy(&h->cv);
		pthread_mutex_destroy(&h->mu);
		sm_free(h);
		return (sm_err_set(err, SM_ENOMEM, "distributor: hints "
		    "thread"));
	}
	h->started = 1;
	*out = h;
	return (0);
}

void
dist_hints_destroy(struct dist_hints *h)
{
	struct hint *x;

	if (h == NULL)
		return;
	pthread_mutex_lock(&h->mu);
	h->stop = true;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	if (h->started)
		pthread_join(h->thr, NULL);
	if (h->n > 0)
		sm_warn("distributor", "hints dropped at shutdown\tcount=%llu",
		    (unsigned long long)h->n);
	while ((x = h->head) != NULL) {
		h->head = x->next;
		account(h, -1, hint_cost(x));
		dropped("shutdown");
		hint_free(x);
	}
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	sm_free(h);
}
