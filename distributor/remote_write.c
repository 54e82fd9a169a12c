/*
 * remote_write.c -- see remote_write.h.
 */
#include "remote_write.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "common/buf.h"
#include "common/byteorder.h"
#include "common/httpc.h"
#include "common/log.h"
#include "common/metrics.h"

#include "rwqueue.h"

#define RW_MIN_BACKOFF_MS 100
#define RW_DRAIN_MS 5000
#define RW_URL_MAX 8192
#define RW_SEGMENT_BYTES (16ull << 20)

/*
 * A queued entry, as one queue record:
 *   u8 version (1) | u8 flags (RW_IDEMPOTENT) | u16 0 |
 *   u32 n | path and query ("/ingest?name=..."), n bytes |
 *   u32 n | Content-Type, n bytes (RW_NONE: none) |
 *   u32 n | tenant, n bytes (RW_NONE: none) |
 *   body (the rest)
 * Decoded in place: the strings point into the record.
 */
#define RW_REC_VERSION 1
#define RW_NONE 0xffffffffu

struct rw_entry {
	void *rec;                /* owns everything below */
	char *url;                /* base + path + ?query (allocated) */
	char *ctype;              /* NULL: none */
	char *tenant;             /* NULL: none */
	const void *body;
	size_t len;
	unsigned flags;
};

struct remote_write {
	struct rw_config cfg;
	char *base;               /* url without a trailing '/' */
	char *auth_hdr;           /* "Authorization: Bearer ..." or NULL */
	struct rwq *q;

	pthread_mutex_t mu;       /* protects the fields below */
	pthread_cond_t cv;        /* an append, or stop */
	bool stop;
	pthread_t thread;
	bool started;
	bool head_in_flight;      /* from rwq_open, for the first entry */
	bool marked;              /* this attempt marked the entry in flight */
};

static pthread_once_t rw_once = PTHREAD_ONCE_INIT;
static struct sm_metric *m_qlen, *m_qbytes, *m_sent, *m_retries, *m_dropped,
    *m_corrupt;
static bool rw_http_ok;

static const struct sm_metric_def rw_metric_defs[] = {
	{ &m_qlen, SM_METRIC_GAUGE, "smolder_remote_write_queue_length",
	    "Accepted writes waiting in the remote-write queue (on disk).",
	    NULL, NULL, 0 },
	{ &m_qbytes, SM_METRIC_GAUGE, "smolder_remote_write_queue_bytes",
	    "Bytes of the remote-write queue records waiting to be forwarded "
	    "(on disk).", NULL, NULL, 0 },
	{ &m_sent, SM_METRIC_COUNTER, "smolder_remote_write_sent_total",
	    "Writes the remote-write receiver acknowledged (2xx).", NULL,
	    NULL, 0 },
	{ &m_retries, SM_METRIC_COUNTER, "smolder_remote_write_retries_total",
	    "Remote-write attempts that failed and will be retried (no "
	    "connection, 429, 5xx; and timeouts of push.v1 entries).", NULL,
	    NULL, 0 },
	{ &m_dropped, SM_METRIC_COUNTER, "smolder_remote_write_dropped_total",
	    "Writes not forwarded, by reason: queue_full, rejected (4xx), "
	    "ambiguous (an /ingest upload that may have reached the receiver: "
	    "timeout after sending, or in flight when the process stopped), "
	    "corrupt (unreadable queue record).", SM_METRIC_LABELS("reason"),
	    NULL, 0 },
	{ &m_corrupt, SM_METRIC_COUNTER,
	    "smolder_remote_write_queue_corrupt_bytes_total",
	    "Bytes of torn or corrupt remote-write queue records cut off "
	    "(crash in the middle of an append, disk damage).", NULL,
	    NULL, 0 },
};

static void
rw_init_once(void)
{
	rw_http_ok = sm_httpc_init() == 0;
	sm_metrics_register_table(rw_metric_defs,
	    SM_ARRAY_LEN(rw_metric_defs));
}

static void
rw_entry_free(struct rw_entry *e)
{
	sm_free(e->url);
	sm_free(e->rec);
	memset(e, 0, sizeof(*e));
}

static void
rw_gauges(struct remote_write *rw)
{
	uint64_t n, bytes;

	rwq_stats(rw->q, &n, &bytes);
	sm_gauge_set(sm_metric_child0(m_qlen), (double)n);
	sm_gauge_set(sm_metric_child0(m_qbytes), (double)bytes);
}

static void
rw_drop(const char *reason)
{
	sm_counter_inc(sm_metric_child(m_dropped, reason));
}

int
rw_enqueue(struct remote_write *rw, const char *path, const char *query,
    const char *ctype, const char *tenant, unsigned flags, const void *body,
    size_t len)
{
	struct sm_buf h = SM_BUF_INIT;
	uint8_t w[4];
	struct iovec iov[2];
	size_t pl = strlen(path), ql = strlen(query);
	int rv;

	sm_buf_putc(&h, RW_REC_VERSION);
	sm_buf_putc(&h, (int)(flags & RW_IDEMPOTENT));
	sm_buf_putc(&h, 0);
	sm_buf_putc(&h, 0);
	sm_put_le32(w, (uint32_t)(pl + (ql != 0 ? ql + 1 : 0)));
	sm_buf_append(&h, w, 4);
	sm_buf_append(&h, path, pl);
	if (ql != 0) {
		sm_buf_putc(&h, '?');
		sm_buf_append(&h, query, ql);
	}
	sm_put_le32(w, ctype != NULL ? (uint32_t)strlen(ctype) : RW_NONE);
	sm_buf_append(&h, w, 4);
	if (ctype != NULL)
		sm_buf_append(&h, ctype, strlen(ctype));
	sm_put_le32(w, tenant != NULL ? (uint32_t)strlen(tenant) : RW_NONE);
	sm_buf_append(&h, w, 4);
	if (tenant != NULL)
		sm_buf_append(&h, tenant, strlen(tenant));
	if (sm_buf_error(&h) != 0) {
		sm_buf_fini(&h);
		return (SM_ENOMEM);
	}
	iov[0] = (struct iovec){ h.b, h.len };
	iov[1] = (struct iovec){ (void *)(uintptr_t)body, len };
	pthread_mutex_lock(&rw->mu);
	rv = rw->stop ? SM_ELIMIT : 0;
	pthread_mutex_unlock(&rw->mu);
	if (rv == 0)
		rv = rwq_append(rw->q, iov, 2);
	sm_buf_fini(&h);
	if (rv == SM_ELIMIT) {
		uint64_t n, b;

		rwq_stats(rw->q, &n, &b);
		rw_drop("queue_full");
		sm_warn("remote-write", "queue full, write not forwarded"
		    "\tqueued=%" PRIu64 " queued_bytes=%" PRIu64 " bytes=%zu "
		    "tenant=%s", n, b, len, tenant != NULL ? tenant : "");
		return (SM_ELIMIT);
	}
	if (rv != 0) {
		rw_drop("queue_full");
		sm_warn("remote-write", "queue append failed, write not "
		    "forwarded\tbytes=%zu tenant=%s", len,
		    tenant != NULL ? tenant : "");
		return (rv);
	}
	pthread_mutex_lock(&rw->mu);
	rw_gauges(rw);
	pthread_cond_signal(&rw->cv);
	pthread_mutex_unlock(&rw->mu);
	return (0);
}

/* Decode a queue record (taking it); false when it is not one. */
static bool
rw_decode(struct remote_write *rw, void *rec, size_t n, struct rw_entry *e)
{
	const uint8_t *p = rec, *end = p + n;
	char *s[3] = { NULL, NULL, NULL };

	memset(e, 0, sizeof(*e));
	e->rec = rec;
	if (n < 4 || p[0] != RW_REC_VERSION)
		return (false);
	e->flags = p[1];
	p += 4;
	for (int i = 0; i < 3; i++) {
		uint32_t l;

		if (end - p < 4)
			return (false);
		l = sm_get_le32(p);
		p += 4;
		if (l == RW_NONE && i > 0)
			continue;
		if (l > (size_t)(end - p))
			return (false);
		if ((s[i] = sm_strndup((const char *)p, l)) == NULL) {
			sm_free(s[0]);
			sm_free(s[1]);
			return (false);
		}
		p += l;
	}
	e->body = p;
	e->len = (size_t)(end - p);
	/* The url owns one allocation; ctype and tenant ride in it. */
	{
		size_t bl = strlen(rw->base), ul = strlen(s[0]);
		size_t cl = s[1] != NULL ? strlen(s[1]) + 1 : 0;
		size_t tl = s[2] != NULL ? strlen(s[2]) + 1 : 0;

		e->url = sm_malloc(bl + ul + 1 + cl + tl);
		if (e->url != NULL) {
			memcpy(e->url, rw->base, bl);
			memcpy(e->url + bl, s[0], ul + 1);
			if (s[1] != NULL) {
				e->ctype = e->url + bl + ul + 1;
				memcpy(e->ctype, s[1], cl);
			}
			if (s[2] != NULL) {
				e->tenant = e->url + bl + ul + 1 + cl;
				memcpy(e->tenant, s[2], tl);
			}
		}
	}
	for (int i = 0; i < 3; i++)
		sm_free(s[i]);
	return (e->url != NULL);
}

/*
 * httpc calls this once the connection is up, right before the request
 * goes out: from here on an /ingest entry may reach the receiver, so the
 * queue remembers it (rwq_mark) in case the process dies mid-request.
 */
static void
rw_on_send(void *arg)
{
	struct remote_write *rw = arg;

	if (!rw->marked && rwq_mark(rw->q, true) == 0)
		rw->marked = true;
}

enum rw_outcome { RW_SENT, RW_RETRY, RW_REJECTED, RW_AMBIGUOUS };

/* One attempt.  `status` gets the HTTP status (0 when none). */
static enum rw_outcome
rw_send(struct remote_write *rw, const struct rw_entry *e, long *status,
    char *why, size_t whysz)
{
	char ctype[512], tenant[512];
	const char *h[5];
	size_t nh = 0;
	struct sm_httpc_req rq = { 0 };
	struct sm_httpc_resp resp;
	struct sm_err err = { 0 };
	int rv;

	*status = 0;
	why[0] = '\0';
	/* "Expect:" off: no 100-continue round trip for large bodies. */
	h[nh++] = "Expect:";
	if (e->ctype != NULL) {
		snprintf(ctype, sizeof(ctype), "Content-Type: %s", e->ctype);
		h[nh++] = ctype;
	}
	if (e->tenant != NULL) {
		snprintf(tenant, sizeof(tenant), "X-Scope-OrgID: %s",
		    e->tenant);
		h[nh++] = tenant;
	}
	if (rw->auth_hdr != NULL)
		h[nh++] = rw->auth_hdr;
	h[nh] = NULL;
	rq.url = e->url;
	rq.headers = h;
	rq.body = e->body;
	rq.len = e->len;
	rq.timeout_ms = rw->cfg.timeout_ms;
	rq.connect_timeout_ms = SM_MIN(rw->cfg.timeout_ms, 5000);
	rq.user_agent = "smolder/" SM_VERSION " remote-write";
	/* https receivers: a private CA, and a client certificate for one
	 * that wants mutual TLS. */
	rq.ca_file = rw->cfg.tls_ca;
	rq.tls_cert = rw->cfg.tls_cert;
	rq.tls_key = rw->cfg.tls_key;
	/* Idempotent entries are re-sent anyway: no need to mark them. */
	if (!(e->flags & RW_IDEMPOTENT)) {
		rq.on_send = rw_on_send;
		rq.cb_arg = rw;
	}
	if ((rv = sm_httpc_do(&rq, &resp, NULL, &err)) != 0) {
		snprintf(why, whysz, "%s", resp.reason != NULL ? resp.reason :
		    err.msg);
		/* Nothing reached the receiver (or nothing was sent); else
		 * only a push.v1 entry, which carries its IDs, is harmless
		 * to send again. */
		if (resp.unsent || resp.reason == NULL)
			return (RW_RETRY);
		return ((e->flags & RW_IDEMPOTENT) ? RW_RETRY : RW_AMBIGUOUS);
	}
	*status = resp.status;
	if (*status >= 200 && *status < 300)
		return (RW_SENT);
	snprintf(why, whysz, "HTTP %ld", *status);
	if (*status == 429 || *status >= 500)
		return (RW_RETRY);
	return (RW_REJECTED);
}

/* Wait up to ms or until stop; returns rw->stop.  Called with mu held. */
static bool
rw_sleep(struct remote_write *rw, int64_t ms)
{
	int64_t deadline = sm_mono_ns() + ms * 1000000;

	while (!rw->stop && sm_cond_wait_until(&rw->cv, &rw->mu, deadline))
		;
	return (rw->stop);
}

static bool
rw_empty(struct remote_write *rw)
{
	uint64_t n, b;

	rwq_stats(rw->q, &n, &b);
	return (n == 0);
}

static void *
rw_main(void *arg)
{
	struct remote_write *rw = arg;
	int64_t backoff = RW_MIN_BACKOFF_MS, drain_until = 0;
	char why[SM_ERR_MSG_MAX + 64];
	bool first = true;

	pthread_mutex_lock(&rw->mu);
	for (;;) {
		struct rw_entry e;
		enum rw_outcome o;
		uint64_t skipped = 0;
		void *rec;
		size_t n;
		long status;
		int rv;

		while (!rw->stop && rw_empty(rw))
			pthread_cond_wait(&rw->cv, &rw->mu);
		if (rw->stop && drain_until == 0)
			drain_until = sm_mono_ns() / 1000000 + RW_DRAIN_MS;
		if (drain_until != 0 && sm_mono_ns() / 1000000 > drain_until)
			break;
		pthread_mutex_unlock(&rw->mu);
		rv = rwq_peek(rw->q, &rec, &n, &skipped);
		if (skipped != 0) {
			sm_counter_add(sm_metric_child0(m_corrupt),
			    skipped);
			rw_drop("corrupt");
		}
		if (rv == SM_ENOTFOUND) {
			pthread_mutex_lock(&rw->mu);
			rw_gauges(rw);
			if (rw->stop)
				break;
			continue;
		}
		if (rv != 0) {
			sm_error("remote-write", "cannot read the queue, will "
			    "retry\terr=%s", sm_strerror(rv));
			pthread_mutex_lock(&rw->mu);
			rw_sleep(rw, backoff);
			backoff = SM_MIN(backoff * 2, rw->cfg.max_backoff_ms);
			if (rw->stop)
				break;
			continue;
		}
		rw->marked = false;
		if (!rw_decode(rw, rec, n, &e)) {
			rw_entry_free(&e);
			(void)rwq_commit(rw->q);
			rw_drop("corrupt");
			sm_warn("remote-write", "undecodable queue record "
			    "dropped\treason=corrupt bytes=%zu", n);
			pthread_mutex_lock(&rw->mu);
			rw_gauges(rw);
			first = false;
			continue;
		}
		if (first && rw->head_in_flight &&
		    !(e.flags & RW_IDEMPOTENT)) {
			/* Being sent when the last process stopped. */
			o = RW_AMBIGUOUS;
			status = 0;
			snprintf(why, sizeof(why), "in flight when the process "
			    "stopped");
		} else {
			o = rw_send(rw, &e, &status, why, sizeof(why));
		}
		first = false;
		pthread_mutex_lock(&rw->mu);
		if (o == RW_RETRY) {
			pthread_mutex_unlock(&rw->mu);
			/* Nothing reached the receiver: forget the mark. */
			if (rw->marked)
				(void)rwq_mark(rw->q, false);
			rw_entry_free(&e);
			pthread_mutex_lock(&rw->mu);
			if (rw->stop)
				break;    /* stays queued for the next start */
			sm_counter_inc(sm_metric_child0(m_retries));
			if (backoff == RW_MIN_BACKOFF_MS)
				sm_warn("remote-write", "send failed, will retry"
				    "\turl=%s err=\"%s\"", rw->base, why);
			rw_sleep(rw, backoff);
			backoff = SM_MIN(backoff * 2, rw->cfg.max_backoff_ms);
			continue;
		}
		if (o == RW_SENT && backoff != RW_MIN_BACKOFF_MS)
			sm_info("remote-write", "sending again\turl=%s",
			    rw->base);
		backoff = RW_MIN_BACKOFF_MS;
		pthread_mutex_unlock(&rw->mu);
		if ((rv = rwq_commit(rw->q)) != 0)
			sm_error("remote-write", "queue commit failed: the "
			    "entry may be sent again after a restart\terr=%s",
			    sm_strerror(rv));
		if (o == RW_SENT) {
			sm_counter_inc(sm_metric_child0(m_sent));
		} else {
			const char *reason = o == RW_REJECTED ? "rejected" :
			    "ambiguous";

			rw_drop(reason);
			sm_warn("remote-write", "write dropped\treason=%s "
			    "err=\"%s\" path=%.64s tenant=%s bytes=%zu", reason,
			    why, e.url + strlen(rw->base),
			    e.tenant != NULL ? e.tenant : "", e.len);
		}
		rw_entry_free(&e);
		pthread_mutex_lock(&rw->mu);
		rw_gauges(rw);
	}
	if (!rw_empty(rw)) {
		uint64_t n, b;

		rwq_stats(rw->q, &n, &b);
		sm_info("remote-write", "stopping; queued writes stay on disk "
		    "for the next start\tqueued=%" PRIu64 " bytes=%" PRIu64, n,
		    b);
	}
	pthread_mutex_unlock(&rw->mu);
	return (NULL);
}

int
rw_create(const struct rw_config *cfg, struct remote_write **out,
    struct sm_err *err)
{
	struct remote_write *rw;
	struct rwq_config qc;
	struct rwq_open_info qi;
	char dir[4096];
	size_t n;
	int rv;

	*out = NULL;
	if (cfg->url == NULL || cfg->url[0] == '\0')
		return (0);
	if (strncasecmp(cfg->url, "http://", 7) != 0 &&
	    strncasecmp(cfg->url, "https://", 8) != 0)
		return (sm_err_set(err, SM_EINVAL, "-remote-write.url must "
		    "start with http:// or https://"));
	if (strlen(cfg->url) > RW_URL_MAX / 2 || strchr(cfg->url, '?') !=
	    NULL)
		return (sm_err_set(err, SM_EINVAL, "-remote-write.url: too "
		    "long or has a query string"));
	if (cfg->queue_size <= 0 || cfg->queue_max_bytes <= 0 ||
	    cfg->timeout_ms <= 0 || cfg->max_backoff_ms < RW_MIN_BACKOFF_MS)
		return (sm_err_set(err, SM_EINVAL, "remote-write: queue size "
		    "and bytes and timeout must be > 0, max backoff >= %dms",
		    RW_MIN_BACKOFF_MS));
	if (cfg->key != NULL && (strchr(cfg->key, '\r') != NULL ||
	    strchr(cfg->key, '\n') != NULL || strlen(cfg->key) > 1024))
		return (sm_err_set(err, SM_EINVAL, "-remote-write.key: bad "
		    "characters or too long"));
	if ((cfg->tls_cert != NULL && cfg->tls_cert[0] != '\0') !=
	    (cfg->tls_key != NULL && cfg->tls_key[0] != '\0'))
		return (sm_err_set(err, SM_EINVAL, "-remote-write.tls-cert-path "
		    "and -remote-write.tls-key-path go together"));
	if (cfg->data_dir == NULL || cfg->data_dir[0] == '\0' ||
	    strlen(cfg->data_dir) > 3000)
		return (sm_err_set(err, SM_EINVAL, "remote-write: its queue "
		    "needs -data.dir"));
	pthread_once(&rw_once, rw_init_once);
	if (!rw_http_ok)
		return (sm_err_set(err, SM_EINTERNAL, "remote-write: libcurl "
		    "initialisation failed"));
	if ((rw = sm_calloc(1, sizeof(*rw))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	rw->cfg = *cfg;
	rw->base = sm_strdup(cfg->url);
	if (rw->base != NULL) {
		n = strlen(rw->base);
		while (n > 0 && rw->base[n - 1] == '/')
			rw->base[--n] = '\0';
	}
	if (cfg->key != NULL && cfg->key[0] != '\0') {
		n = strlen(cfg->key) + 32;
		if ((rw->auth_hdr = sm_malloc(n)) != NULL)
			snprintf(rw->auth_hdr, n, "Authorization: Bearer %s",
			    cfg->key);
	}
	if (rw->base == NULL || (cfg->key != NULL && cfg->key[0] != '\0' &&
	    rw->auth_hdr == NULL)) {
		sm_free(rw->base);
		sm_free(rw->auth_hdr);
		sm_free(rw);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	/* The config strings belong to the flags; keep no pointers to them. */
	rw->cfg.url = NULL;
	rw->cfg.key = NULL;
	rw->cfg.data_dir = NULL;
	pthread_mutex_init(&rw->mu, NULL);
	sm_cond_init(&rw->cv);
	/* The data dir may not exist yet (a distributor-only target). */
	if (mkdir(cfg->data_dir, 0755) != 0 && errno != EEXIST) {
		rv = sm_err_set(err, SM_EIO, "remote-write: mkdir %s: %s",
		    cfg->data_dir, strerror(errno));
		rw_destroy(rw);
		return (rv);
	}
	snprintf(dir, sizeof(dir), "%s/remote-write", cfg->data_dir);
	qc.dir = dir;
	qc.max_bytes = (uint64_t)cfg->queue_max_bytes;
	qc.max_entries = (uint64_t)cfg->queue_size;
	qc.seg_bytes = SM_MIN(RW_SEGMENT_BYTES, SM_MAX((uint64_t)
	    cfg->queue_max_bytes / 8, 1u << 20));
	if ((rv = rwq_open(&qc, &rw->q, &qi, err)) != 0) {
		rw_destroy(rw);
		return (rv);
	}
	rw->head_in_flight = qi.head_in_flight;
	if (qi.corrupt_bytes != 0)
		sm_counter_add(sm_metric_child0(m_corrupt),
		    qi.corrupt_bytes);
	rw_gauges(rw);
	if (pthread_create(&rw->thread, NULL, rw_main, rw) != 0) {
		rw_destroy(rw);
		return (sm_err_set(err, SM_ENOMEM, "remote-write: cannot "
		    "start its thread"));
	}
	rw->started = true;
	{
		uint64_t qn, qb;

		rwq_stats(rw->q, &qn, &qb);
		sm_info("remote-write", "forwarding accepted writes\turl=%s "
		    "auth=%s queue=%s queued=%" PRIu64 " queued_bytes=%" PRIu64
		    " corrupt_bytes=%" PRIu64, rw->base, rw->auth_hdr != NULL ?
		    "bearer" : "none", dir, qn, qb, qi.corrupt_bytes);
	}
	*out = rw;
	return (0);
}

void
rw_destroy(struct remote_write *rw)
{
	if (rw == NULL)
		return;
	sm_cond_set_flag(&rw->mu, &rw->cv, &rw->stop);
	if (rw->started)
		pthread_join(rw->thread, NULL);
	rwq_close(rw->q);
	pthread_cond_destroy(&rw->cv);
	pthread_mutex_destroy(&rw->mu);
	if (rw->auth_hdr != NULL) {
		memset(rw->auth_hdr, 0, strlen(rw->auth_hdr));
		sm_free(rw->auth_hdr);
	}
	sm_free(rw->base);
	sm_free(rw);
}
