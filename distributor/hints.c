/*
 * hints.c -- hinted handoff; see hints.h for what and why.
 *
 * The queue is one list in arrival order (a hint per (upload, member));
 * the thread walks it every HINT_TICK_MS or when woken by a new hint,
 * delivers what is due, and never holds the lock across a call.  A member
 * that fails a delivery is not tried again in the same walk, so hints to
 * it stay in order and one dead member costs one timeout per walk.
 *
 * On disk each member has a FIFO (rwqueue.h) in <dir>/<hex of its id>;
 * a record is
 *     u8 version (1) | u8 flags (bit 0: ambiguous) | le64 born (unix ms)
 *     | the WriteRequest bytes
 * and the member's hints are also kept in arrival order in memory (mq):
 * a resolved hint is committed away once every earlier hint of its
 * member is resolved too, so a restart brings back exactly the unresolved
 * ones (and, at worst, a few resolved ones, which the ingester's
 * idempotency makes harmless).
 */
#include "hints.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/log.h"
#include "common/metrics.h"
#include "rwqueue.h"
#include "smolder/v1/rpc.pb-c.h"

#define HINT_TICK_MS 100
#define HINT_MIN_BACKOFF_MS 200
#define HINT_MAX_BACKOFF_MS 5000
/* Under the ingester's default -ingester.idempotency-window (1 m), with
 * room for a delivery's own timeout: an ambiguous hint older than this
 * is delivered only once the member says it does not hold the upload. */
#define HINT_AMBIGUOUS_MS 45000
#define HINT_REC_VERSION 1
#define HINT_HDR 10
#define HINT_SEG_BYTES (8u << 20)

struct mq;

struct hint {
	struct hint *next;              /* the walk's list (mu) */
	struct hint *qnext;             /* its member's, arrival order (mu) */
	struct mq *mq;
	uint8_t *req;
	size_t len;
	struct sm_rpc_multi *mc;        /* original call, maybe in flight */
	uint32_t slot;
	bool ambiguous;
	bool persisted;                 /* a record in mq->q */
	bool done;                      /* resolved, not yet committed */
	int64_t born_ms;                /* wall clock: survives a restart */
	int64_t next_ns;
	int64_t backoff_ms;
};

/* One member's hints: its FIFO on disk and here. */
struct mq {
	struct mq *next;
	char *id;
	struct rwq *q;                  /* NULL: memory only */
	struct hint *first, **last;     /* arrival order (qnext), mu */
};

struct dist_hints {
	struct dist_hints_cfg cfg;
	struct sm_ring *ring;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hint *head, **tail;      /* mu */
	struct mq *mqs;                 /* mu */
	uint64_t n, bytes;              /* mu */
	bool stop;                      /* mu */
	bool disk_warned;
	pthread_t thr;
	int started;
};

static struct sm_metric *m_hints, *m_hint_bytes, *m_delivered, *m_dropped;
static struct sm_metric *m_loaded, *m_disk_fail;

static void hints_free(struct dist_hints *h, bool report);

static const struct sm_metric_def hints_metric_defs[] = {
	{ &m_hints, SM_METRIC_GAUGE, "smolder_distributor_hints",
	    "Writes waiting to be handed to a replica that missed them.", NULL,
	    NULL, 0 },
	{ &m_hint_bytes, SM_METRIC_GAUGE, "smolder_distributor_hints_bytes",
	    "Bytes of the waiting hints.", NULL, NULL, 0 },
	{ &m_delivered, SM_METRIC_COUNTER,
	    "smolder_distributor_hints_delivered_total", "Missed writes "
	    "handed to their replica (or found applied after all).", NULL,
	    NULL, 0 },
	{ &m_dropped, SM_METRIC_COUNTER,
	    "smolder_distributor_hints_dropped_total", "Hints given up: "
	    "expired, queue full, rejected by the ingester, shutdown.",
	    SM_METRIC_LABELS("reason"), NULL, 0 },
	{ &m_loaded, SM_METRIC_COUNTER,
	    "smolder_distributor_hints_loaded_total", "Hints found on disk at "
	    "start (kept across a restart).", NULL, NULL, 0 },
	{ &m_disk_fail, SM_METRIC_COUNTER,
	    "smolder_distributor_hints_disk_failures_total",
	    "Hints kept in memory only because writing them to disk failed (a "
	    "restart would lose them).", NULL, NULL, 0 },
};

static struct sm_metric_set hints_metric_set = SM_METRIC_SET(hints_metric_defs);

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
	return (x->len + sizeof(*x));
}

static void
hint_free(struct hint *x)
{
	if (x == NULL)
		return;
	sm_rpc_multi_destroy(x->mc);
	sm_free(x->req);
	sm_free(x);
}

/* The member's queue directory: <dir>/<hex of id>. */
static void
mq_path(const struct dist_hints *h, const char *id, char *out, size_t n)
{
	size_t off = (size_t)snprintf(out, n, "%s/", h->cfg.dir);

	for (const char *c = id; *c != '\0' && off + 3 < n; c++)
		off += (size_t)snprintf(out + off, n - off, "%02x",
		    (unsigned char)*c);
}

/* Member `id`'s queue, made (and its FIFO opened) when missing (mu held);
 * NULL without memory. */
static struct mq *
mq_get(struct dist_hints *h, const char *id)
{
	struct mq *m;

	for (m = h->mqs; m != NULL; m = m->next)
		if (strcmp(m->id, id) == 0)
			return (m);
	if ((m = sm_calloc(1, sizeof(*m))) == NULL ||
	    (m->id = sm_strdup(id)) == NULL) {
		sm_free(m);
		return (NULL);
	}
	m->last = &m->first;
	if (h->cfg.dir != NULL) {
		char path[4096];
		/* twice the bound: load() re-appends before it commits */
		struct rwq_config rc = { .dir = path,
		    .max_bytes = 2 * (uint64_t)h->cfg.max_bytes,
		    .max_entries = UINT32_MAX, .seg_bytes = HINT_SEG_BYTES };
		struct rwq_open_info info;
		struct sm_err err;

		mq_path(h, id, path, sizeof(path));
		sm_err_clear(&err);
		if ((mkdir(h->cfg.dir, 0755) != 0 && errno != EEXIST) ||
		    rwq_open(&rc, &m->q, &info, &err) != 0) {
			if (!h->disk_warned)
				sm_error("distributor", "hints kept in memory "
				    "only: their queue cannot be opened	"
				    "dir=%s err=\"%s\"", path, err.msg[0] != '\0' ?
				    err.msg : strerror(errno));
			h->disk_warned = true;
			m->q = NULL;
		}
	}
	m->next = h->mqs;
	h->mqs = m;
	return (m);
}

/* Write x's record to its member's FIFO (mu held). */
static void
persist(struct dist_hints *h, struct hint *x)
{
	uint8_t hdr[HINT_HDR];
	struct iovec iov[2];
	uint64_t b = (uint64_t)x->born_ms;

	if (x->mq->q == NULL)
		return;
	hdr[0] = HINT_REC_VERSION;
	hdr[1] = x->ambiguous ? 1 : 0;
	for (int i = 0; i < 8; i++)
		hdr[2 + i] = (uint8_t)(b >> (8 * i));
	iov[0] = (struct iovec){ hdr, sizeof(hdr) };
	iov[1] = (struct iovec){ x->req, x->len };
	if (rwq_append(x->mq->q, iov, 2) == 0) {
		x->persisted = true;
		return;
	}
	sm_counter_inc(sm_metric_child0(m_disk_fail));
	if (!h->disk_warned)
		sm_warn("distributor", "a hint could not be written to disk; "
		    "kept in memory	member=%s", x->mq->id);
	h->disk_warned = true;
}

/* Append x to the walk and its member's order (mu held). */
static void
enqueue(struct dist_hints *h, struct hint *x)
{
	*h->tail = x;
	h->tail = &x->next;
	*x->mq->last = x;
	x->mq->last = &x->qnext;
	account(h, 1, hint_cost(x));
}

/* Free the member's resolved hints at the front of its order, committing
 * their records (mu held). */
static void
mq_advance(struct dist_hints *h, struct mq *m)
{
	struct hint *x;

	while ((x = m->first) != NULL && x->done) {
		m->first = x->qnext;
		if (m->first == NULL)
			m->last = &m->first;
		if (x->persisted && m->q != NULL) {
			void *p = NULL;
			size_t n = 0;
			uint64_t skipped = 0;

			if (rwq_peek(m->q, &p, &n, &skipped) == 0)
				(void)rwq_commit(m->q);
			sm_free(p);
		}
		account(h, -1, hint_cost(x));
		hint_free(x);
	}
}

static void
dropped(const char *why)
{
	sm_counter_inc(sm_metric_child(m_dropped, why));
}

void
dist_hints_add(struct dist_hints *h, const char *id, const void *req,
    size_t len, struct sm_rpc_multi *mc, uint32_t slot, bool ambiguous)
{
	struct hint *x;
	size_t cost = len + sizeof(struct hint);

	if (h == NULL || id == NULL)
		return;
	pthread_mutex_lock(&h->mu);
	if (h->stop || h->bytes + cost > (uint64_t)h->cfg.max_bytes) {
		pthread_mutex_unlock(&h->mu);
		dropped("full");
		return;
	}
	pthread_mutex_unlock(&h->mu);
	if ((x = sm_calloc(1, sizeof(*x))) == NULL ||
	    (x->req = sm_malloc(SM_MAX(len, 1))) == NULL) {
		hint_free(x);
		dropped("full");
		return;
	}
	memcpy(x->req, req, len);
	x->len = len;
	x->ambiguous = ambiguous;
	x->born_ms = sm_now_ms();
	x->next_ns = sm_mono_ns();
	x->backoff_ms = HINT_MIN_BACKOFF_MS;
	if (mc != NULL) {
		sm_rpc_multi_hold(mc);
		x->mc = mc;
		x->slot = slot;
	}
	pthread_mutex_lock(&h->mu);
	if ((x->mq = mq_get(h, id)) == NULL) {
		pthread_mutex_unlock(&h->mu);
		hint_free(x);
		dropped("full");
		return;
	}
	persist(h, x);
	enqueue(h, x);
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

/* Where the member with `id` is in the snapshot, or UINT32_MAX. */
static uint32_t
member_of(const struct sm_ring_snap *s, const char *id)
{
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->id[i] != NULL && s->state[i] != SM_MEMBER_CONFLICT &&
		    strcmp(s->id[i], id) == 0)
			return (i);
	}
	return (UINT32_MAX);
}

/* One call to member m; its answer's code (0 with the answer's bytes in
 * rb) or a transport error. */
static int
call(struct dist_hints *h, struct sm_ring_snap *s, uint32_t m,
    const void *req, size_t len, struct sm_buf *rb,
    Smolder__V1__Response **resp)
{
	int rv;

	*resp = NULL;
	rv = sm_rpc_call(s->m[m]->client, req, len, (int)h->cfg.timeout_ms,
	    rb);
	if (rv != 0)
		return (rv);
	*resp = smolder__v1__response__unpack(NULL, rb->len,
	    (const uint8_t *)(rb->b != NULL ? rb->b : ""));
	return (*resp == NULL ? SM_EPROTO : (*resp)->code);
}

/*
 * Does member m hold the hint's upload already?  An ambiguous hint older
 * than the ingester's idempotency window (its original may have been
 * applied long ago) is looked up in the member's individual-profile
 * records (ingester/profiles.h: every (series, upload) of heads and
 * blocks) through the Profiles RPC: the first series' exact labels at
 * the upload's time.  1 yes, 0 no, < 0 an error (try later).
 */
static int
applied(struct dist_hints *h, struct sm_ring_snap *s, uint32_t m,
    const struct hint *x)
{
	Smolder__V1__Request *w = smolder__v1__request__unpack(NULL, x->len,
	    x->req);
	Smolder__V1__Request q = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__ProfilesRequest pr = SMOLDER__V1__PROFILES_REQUEST__INIT;
	Smolder__V1__Select sel = SMOLDER__V1__SELECT__INIT;
	Smolder__V1__Matcher *mt = NULL, **mp = NULL;
	Smolder__V1__Response *resp = NULL;
	const Smolder__V1__WriteRequest *wr;
	const Smolder__V1__SeriesWrite *sw;
	struct sm_buf rb = SM_BUF_INIT, qb = SM_BUF_INIT;
	int rv = 0;

	if (w == NULL || w->method_case != SMOLDER__V1__REQUEST__METHOD_WRITE ||
	    w->write->n_series == 0 || w->write->profile_id.len != 16) {
		rv = 0;       /* nothing to look up: deliver */
		goto out;
	}
	wr = w->write;
	sw = wr->series[0];
	mt = sm_calloc(SM_MAX(sw->n_labels, 1), sizeof(*mt));
	mp = sm_calloc(SM_MAX(sw->n_labels, 1), sizeof(*mp));
	if (mt == NULL || mp == NULL) {
		rv = -1;
		goto out;
	}
	for (size_t i = 0; i < sw->n_labels; i++) {
		smolder__v1__matcher__init(&mt[i]);
		mt[i].type = SMOLDER__V1__MATCH_TYPE__MATCH_EQ;
		mt[i].name = sw->labels[i]->name;
		mt[i].value = sw->labels[i]->value;
		mp[i] = &mt[i];
	}
	sel.tenant = wr->tenant;
	sel.n_matchers = sw->n_labels;
	sel.matchers = mp;
	sel.start_ms = sw->time_ms;
	sel.end_ms = sw->time_ms + 1;
	pr.select = &sel;
	q.method_case = SMOLDER__V1__REQUEST__METHOD_PROFILES;
	q.profiles = &pr;
	if (sm_buf_reserve(&qb, protobuf_c_message_get_packed_size(
	    &q.base)) != 0) {
		rv = -1;
		goto out;
	}
	qb.len = protobuf_c_message_pack(&q.base, (uint8_t *)qb.b);
	if (call(h, s, m, qb.b, qb.len, &rb, &resp) != 0 || resp == NULL ||
	    resp->result_case != SMOLDER__V1__RESPONSE__RESULT_PROFILES) {
		rv = -1;
		goto out;
	}
	for (size_t i = 0; i < resp->profiles->n_profiles; i++) {
		const Smolder__V1__ProfileRef *p = resp->profiles->profiles[i];

		if (p->id.len == 16 && memcmp(p->id.data,
		    wr->profile_id.data, 16) == 0) {
			rv = 1;
			break;
		}
	}
out:
	if (resp != NULL)
		smolder__v1__response__free_unpacked(resp, NULL);
	if (w != NULL)
		smolder__v1__request__free_unpacked(w, NULL);
	sm_free(mt);
	sm_free(mp);
	sm_buf_fini(&rb);
	sm_buf_fini(&qb);
	return (rv);
}

/* Deliver one hint: 0 (or found there already), or an error code
 * (SM_EAGAIN: not now). */
static int
deliver(struct dist_hints *h, struct hint *x)
{
	struct sm_ring_snap *s = sm_ring_acquire(h->ring);
	struct sm_buf rb = SM_BUF_INIT;
	Smolder__V1__Response *resp = NULL;
	uint32_t m = member_of(s, x->mq->id);
	int rv;

	if (m == UINT32_MAX || !s->writable[m]) {
		sm_ring_release(s);
		return (SM_EAGAIN);
	}
	if (x->ambiguous && sm_now_ms() - x->born_ms >= HINT_AMBIGUOUS_MS) {
		rv = applied(h, s, m, x);
		if (rv != 0) {
			sm_ring_release(s);
			return (rv > 0 ? 0 : SM_EAGAIN);
		}
	}
	rv = call(h, s, m, x->req, x->len, &rb, &resp);
	sm_ring_release(s);
	if (resp != NULL)
		smolder__v1__response__free_unpacked(resp, NULL);
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
	struct mq *failed[16];
	uint32_t nfailed = 0;

	pthread_mutex_lock(&h->mu);
	pp = &h->head;
	while ((x = *pp) != NULL && !h->stop) {
		int64_t now = sm_mono_ns();
		const char *why = NULL;
		bool skip = false;
		int rv;

		pthread_mutex_unlock(&h->mu);
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
			skip = failed[i] == x->mq;
		if (why == NULL && sm_now_ms() - x->born_ms >=
		    h->cfg.max_age_ms)
			why = "expired";
		else if (why == NULL && !skip && now >= x->next_ns) {
			rv = deliver(h, x);
			if (rv == 0) {
				why = "";
			} else if (rejected(rv)) {
				why = "rejected";
				sm_warn("distributor", "hint rejected\t"
				    "member=%s err=\"%s\"", x->mq->id,
				    sm_strerror(rv));
			} else {
				x->next_ns = sm_mono_ns() + x->backoff_ms *
				    1000000;
				x->backoff_ms = SM_MIN(x->backoff_ms * 2,
				    HINT_MAX_BACKOFF_MS);
				if (nfailed < SM_ARRAY_LEN(failed))
					failed[nfailed++] = x->mq;
			}
		}
		pthread_mutex_lock(&h->mu);
		if (why == NULL) {
			pp = &x->next;
			continue;
		}
		/* Unlink x from the walk: new hints are only appended at the
		 * tail.  It leaves its member's order (and the disk) once the
		 * hints before it are resolved too. */
		*pp = x->next;
		if (h->tail == &x->next)
			h->tail = pp;
		x->done = true;
		sm_rpc_multi_destroy(x->mc);
		x->mc = NULL;
		mq_advance(h, x->mq);
		pthread_mutex_unlock(&h->mu);
		if (why[0] == '\0')
			sm_counter_inc(sm_metric_child0(m_delivered));
		else
			dropped(why);
		pthread_mutex_lock(&h->mu);
	}
	pthread_mutex_unlock(&h->mu);
}

/*
 * The hints a previous run left on disk: every member directory under
 * cfg.dir, each record re-appended behind the others and the original
 * committed away (so a crash here loses none; at worst one is there
 * twice, which the ingester's idempotency absorbs).
 */
static void
load(struct dist_hints *h)
{
	DIR *d;
	struct dirent *e;
	uint64_t total = 0;

	if (h->cfg.dir == NULL || (d = opendir(h->cfg.dir)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		char id[256];
		size_t len = strlen(e->d_name), k;
		struct mq *m;
		uint64_t n = 0, bytes = 0;

		if (len == 0 || len % 2 != 0 || len / 2 >= sizeof(id))
			continue;
		for (k = 0; k < len / 2; k++) {
			unsigned v;

			if (sscanf(e->d_name + 2 * k, "%2x", &v) != 1)
				break;
			id[k] = (char)v;
		}
		id[k] = '\0';
		if (k != len / 2 || strlen(id) != k)
			continue;
		pthread_mutex_lock(&h->mu);
		m = mq_get(h, id);
		if (m != NULL && m->q != NULL)
			rwq_stats(m->q, &n, &bytes);
		for (uint64_t i = 0; m != NULL && m->q != NULL && i < n; i++) {
			void *p = NULL;
			size_t pn = 0;
			uint64_t skipped = 0, b = 0;
			struct hint *x = NULL;
			const uint8_t *r;

			if (rwq_peek(m->q, &p, &pn, &skipped) != 0)
				break;
			r = p;
			if (pn > HINT_HDR && r[0] == HINT_REC_VERSION &&
			    h->bytes + pn <= (uint64_t)h->cfg.max_bytes &&
			    (x = sm_calloc(1, sizeof(*x))) != NULL &&
			    (x->req = sm_malloc(pn - HINT_HDR)) != NULL) {
				for (int j = 0; j < 8; j++)
					b |= (uint64_t)r[2 + j] << (8 * j);
				memcpy(x->req, r + HINT_HDR, pn - HINT_HDR);
				x->len = pn - HINT_HDR;
				x->ambiguous = (r[1] & 1) != 0;
				x->born_ms = (int64_t)b;
				x->next_ns = sm_mono_ns();
				x->backoff_ms = HINT_MIN_BACKOFF_MS;
				x->mq = m;
				persist(h, x);
				enqueue(h, x);
				total++;
			} else {
				hint_free(x);
				dropped(pn > HINT_HDR && r[0] == HINT_REC_VERSION ?
				    "full" : "rejected");
			}
			sm_free(p);
			(void)rwq_commit(m->q);
		}
		pthread_mutex_unlock(&h->mu);
	}
	closedir(d);
	if (total > 0) {
		sm_counter_add(sm_metric_child0(m_loaded), total);
		sm_info("distributor", "hints found on disk\tcount=%llu",
		    (unsigned long long)total);
	}
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
	sm_metrics_register_once(&hints_metric_set);
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
	if (cfg->dir != NULL && (h->cfg.dir = sm_strdup(cfg->dir)) == NULL) {
		pthread_cond_destroy(&h->cv);
		pthread_mutex_destroy(&h->mu);
		sm_free(h);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	load(h);
	if (pthread_create(&h->thr, NULL, hints_main, h) != 0) {
		hints_free(h, false);
		return (sm_err_set(err, SM_ENOMEM, "distributor: hints "
		    "thread"));
	}
	h->started = 1;
	*out = h;
	return (0);
}

/* Free everything; what is on disk stays for the next start.  At a
 * shutdown, count what is left as kept (on disk) or dropped (memory). */
static void
hints_free(struct dist_hints *h, bool report)
{
	struct hint *x;
	struct mq *m;
	uint64_t kept = 0, lost = 0;

	while ((m = h->mqs) != NULL) {
		h->mqs = m->next;
		while ((x = m->first) != NULL) {
			m->first = x->qnext;
			if (!x->done) {
				if (x->persisted && m->q != NULL)
					kept++;
				else {
					lost++;
					dropped("shutdown");
				}
			}
			account(h, -1, hint_cost(x));
			hint_free(x);
		}
		rwq_close(m->q);
		sm_free(m->id);
		sm_free(m);
	}
	if (report && (kept > 0 || lost > 0))
		sm_info("distributor", "hints at shutdown\tkept_on_disk=%llu "
		    "dropped=%llu", (unsigned long long)kept,
		    (unsigned long long)lost);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	sm_free((char *)h->cfg.dir);
	sm_free(h);
}

void
dist_hints_destroy(struct dist_hints *h)
{
	if (h == NULL)
		return;
	pthread_mutex_lock(&h->mu);
	h->stop = true;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	if (h->started)
		pthread_join(h->thr, NULL);
	hints_free(h, true);
}
