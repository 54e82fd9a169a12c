/*
 * remote_write.c -- see remote_write.h.
 */
#include "remote_write.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "common/log.h"
#include "common/metrics.h"

#define RW_MIN_BACKOFF_MS 100
#define RW_DRAIN_MS 5000
#define RW_URL_MAX 8192

struct rw_entry {
	struct rw_entry *next;
	char *url;                /* full URL: base + path + ?query */
	char *ctype;              /* NULL: none */
	char *tenant;             /* NULL: none */
	void *body;
	size_t len;
};

struct remote_write {
	struct rw_config cfg;
	char *base;               /* url without a trailing '/' */
	char *auth_hdr;           /* "Authorization: Bearer ..." or NULL */

	pthread_mutex_t mu;       /* protects the fields below */
	pthread_cond_t cv;
	struct rw_entry *head, *tail;
	size_t n, bytes;
	bool stop;
	pthread_t thread;
	bool started;
};

static pthread_once_t rw_once = PTHREAD_ONCE_INIT;
static struct sm_metric *m_qlen, *m_qbytes, *m_sent, *m_retries, *m_dropped;
static bool rw_curl_ok;

static void
rw_init_once(void)
{
	rw_curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
	m_qlen = sm_metric_register(SM_METRIC_GAUGE,
	    "smolder_remote_write_queue_length", "Accepted uploads waiting "
	    "to be forwarded by remote-write.", NULL, NULL, 0);
	m_qbytes = sm_metric_register(SM_METRIC_GAUGE,
	    "smolder_remote_write_queue_bytes", "Body bytes waiting to be "
	    "forwarded by remote-write.", NULL, NULL, 0);
	m_sent = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_remote_write_sent_total", "Uploads the remote-write "
	    "receiver acknowledged (2xx).", NULL, NULL, 0);
	m_retries = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_remote_write_retries_total", "Remote-write attempts "
	    "that failed and will be retried (no connection, 429, 5xx).",
	    NULL, NULL, 0);
	m_dropped = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_remote_write_dropped_total", "Uploads not forwarded, by "
	    "reason: queue_full, rejected (4xx), ambiguous (timeout after "
	    "sending), shutdown.", (const char *const[]){ "reason", NULL },
	    NULL, 0);
}

static void
rw_entry_free(struct rw_entry *e)
{
	if (e == NULL)
		return;
	sm_free(e->url);
	sm_free(e->ctype);
	sm_free(e->tenant);
	sm_free(e->body);
	sm_free(e);
}

static void
rw_gauges(struct remote_write *rw)
{
	sm_gauge_set(sm_metric_child0(m_qlen), (double)rw->n);
	sm_gauge_set(sm_metric_child0(m_qbytes), (double)rw->bytes);
}

static void
rw_drop(const char *reason)
{
	sm_counter_inc(sm_metric_child(m_dropped, reason));
}

int
rw_enqueue(struct remote_write *rw, const char *path, const char *query,
    const char *ctype, const char *tenant, const void *body, size_t len)
{
	struct rw_entry *e;
	size_t ul;

	pthread_mutex_lock(&rw->mu);
	if (rw->stop || rw->n + 1 > (size_t)rw->cfg.queue_size ||
	    rw->bytes + len > (size_t)rw->cfg.queue_max_bytes) {
		size_t n = rw->n;

		pthread_mutex_unlock(&rw->mu);
		rw_drop("queue_full");
		sm_warn("remote-write", "queue full, upload not forwarded"
		    "\tqueued=%zu bytes=%zu tenant=%s", n, len,
		    tenant != NULL ? tenant : "");
		return (SM_ELIMIT);
	}
	pthread_mutex_unlock(&rw->mu);
	if ((e = sm_calloc(1, sizeof(*e))) == NULL)
		return (SM_ENOMEM);
	ul = strlen(rw->base) + strlen(path) + strlen(query) + 2;
	e->url = sm_malloc(ul);
	e->body = sm_malloc(len != 0 ? len : 1);
	e->ctype = ctype != NULL ? sm_strdup(ctype) : NULL;
	e->tenant = tenant != NULL ? sm_strdup(tenant) : NULL;
	if (e->url == NULL || e->body == NULL ||
	    (ctype != NULL && e->ctype == NULL) ||
	    (tenant != NULL && e->tenant == NULL)) {
		rw_entry_free(e);
		return (SM_ENOMEM);
	}
	snprintf(e->url, ul, "%s%s%s%s", rw->base, path,
	    query[0] != '\0' ? "?" : "", query);
	memcpy(e->body, body, len);
	e->len = len;
	pthread_mutex_lock(&rw->mu);
	/* Checked again: the lock was dropped for the copies. */
	if (rw->stop || rw->n + 1 > (size_t)rw->cfg.queue_size ||
	    rw->bytes + len > (size_t)rw->cfg.queue_max_bytes) {
		pthread_mutex_unlock(&rw->mu);
		rw_entry_free(e);
		rw_drop("queue_full");
		return (SM_ELIMIT);
	}
	if (rw->tail != NULL)
		rw->tail->next = e;
	else
		rw->head = e;
	rw->tail = e;
	rw->n++;
	rw->bytes += len;
	rw_gauges(rw);
	pthread_cond_signal(&rw->cv);
	pthread_mutex_unlock(&rw->mu);
	return (0);
}

static size_t
rw_discard(char *p, size_t size, size_t n, void *arg)
{
	(void)p;
	(void)arg;
	return (size * n);
}

enum rw_outcome { RW_SENT, RW_RETRY, RW_REJECTED, RW_AMBIGUOUS };

/* One attempt.  `status` gets the HTTP status (0 when none). */
static enum rw_outcome
rw_send(struct remote_write *rw, CURL *c, const struct rw_entry *e,
    long *status, char *why, size_t whysz)
{
	struct curl_slist *h = NULL, *nh;
	char line[512];
	CURLcode cc;
	bool hdr_ok = true;

	*status = 0;
	why[0] = '\0';
	/* "Expect:" off: no 100-continue round trip for large bodies. */
	if ((nh = curl_slist_append(h, "Expect:")) == NULL)
		hdr_ok = false;
	else
		h = nh;
	if (hdr_ok && e->ctype != NULL) {
		snprintf(line, sizeof(line), "Content-Type: %s", e->ctype);
		if ((nh = curl_slist_append(h, line)) == NULL)
			hdr_ok = false;
		else
			h = nh;
	}
	if (hdr_ok && e->tenant != NULL) {
		snprintf(line, sizeof(line), "X-Scope-OrgID: %s", e->tenant);
		if ((nh = curl_slist_append(h, line)) == NULL)
			hdr_ok = false;
		else
			h = nh;
	}
	if (hdr_ok && rw->auth_hdr != NULL) {
		if ((nh = curl_slist_append(h, rw->auth_hdr)) == NULL)
			hdr_ok = false;
		else
			h = nh;
	}
	if (!hdr_ok) {
		curl_slist_free_all(h);
		snprintf(why, whysz, "out of memory");
		return (RW_RETRY);
	}
	curl_easy_setopt(c, CURLOPT_URL, e->url);
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, e->body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)e->len);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	cc = curl_easy_perform(c);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(h);
	switch (cc) {
	case CURLE_OK:
		break;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_OUT_OF_MEMORY:
		/* Nothing reached the receiver. */
		snprintf(why, whysz, "%s", curl_easy_strerror(cc));
		return (RW_RETRY);
	default:
		snprintf(why, whysz, "%s", curl_easy_strerror(cc));
		return (RW_AMBIGUOUS);
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
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

static void *
rw_main(void *arg)
{
	struct remote_write *rw = arg;
	int64_t backoff = RW_MIN_BACKOFF_MS, drain_until = 0;
	char why[CURL_ERROR_SIZE + 64];
	CURL *c = curl_easy_init();

	if (c != NULL) {
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)rw->cfg.timeout_ms);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
		    (long)SM_MIN(rw->cfg.timeout_ms, 5000));
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, rw_discard);
		curl_easy_setopt(c, CURLOPT_USERAGENT, "smolder/"
		    SM_VERSION " remote-write");
	}
	pthread_mutex_lock(&rw->mu);
	for (;;) {
		struct rw_entry *e;
		enum rw_outcome o;
		long status;

		while (rw->head == NULL && !rw->stop)
			pthread_cond_wait(&rw->cv, &rw->mu);
		if (rw->stop && drain_until == 0)
			drain_until = sm_mono_ns() / 1000000 + RW_DRAIN_MS;
		if (rw->head == NULL ||
		    (drain_until != 0 && sm_mono_ns() / 1000000 > drain_until))
			break;
		e = rw->head;
		pthread_mutex_unlock(&rw->mu);
		if (c == NULL) {
			o = RW_RETRY;
			status = 0;
			snprintf(why, sizeof(why), "curl_easy_init failed");
		} else {
			o = rw_send(rw, c, e, &status, why, sizeof(why));
		}
		pthread_mutex_lock(&rw->mu);
		if (o == RW_RETRY && !rw->stop) {
			sm_counter_inc(sm_metric_child0(m_retries));
			if (backoff == RW_MIN_BACKOFF_MS)
				sm_warn("remote-write", "send failed, will retry"
				    "\turl=%s err=\"%s\" queued=%zu", rw->base,
				    why, rw->n);
			rw_sleep(rw, backoff);
			backoff = SM_MIN(backoff * 2, rw->cfg.max_backoff_ms);
			continue;
		}
		if (o == RW_SENT && backoff != RW_MIN_BACKOFF_MS)
			sm_info("remote-write", "sending again\turl=%s "
			    "queued=%zu", rw->base, rw->n);
		backoff = RW_MIN_BACKOFF_MS;
		rw->head = e->next;
		if (rw->head == NULL)
			rw->tail = NULL;
		rw->n--;
		rw->bytes -= e->len;
		rw_gauges(rw);
		if (o == RW_SENT) {
			sm_counter_inc(sm_metric_child0(m_sent));
		} else {
			const char *reason = o == RW_REJECTED ? "rejected" :
			    o == RW_AMBIGUOUS ? "ambiguous" : "shutdown";

			rw_drop(reason);
			sm_warn("remote-write", "upload dropped\treason=%s "
			    "err=\"%s\" tenant=%s bytes=%zu", reason, why,
			    e->tenant != NULL ? e->tenant : "", e->len);
		}
		pthread_mutex_unlock(&rw->mu);
		rw_entry_free(e);
		pthread_mutex_lock(&rw->mu);
	}
	if (rw->n != 0)
		sm_warn("remote-write", "shutting down, queued uploads "
		    "dropped\tqueued=%zu bytes=%zu", rw->n, rw->bytes);
	while (rw->head != NULL) {
		struct rw_entry *e = rw->head;

		rw->head = e->next;
		rw_drop("shutdown");
		rw_entry_free(e);
	}
	rw->tail = NULL;
	rw->n = rw->bytes = 0;
	rw_gauges(rw);
	pthread_mutex_unlock(&rw->mu);
	if (c != NULL)
		curl_easy_cleanup(c);
	return (NULL);
}

int
rw_create(const struct rw_config *cfg, struct remote_write **out,
    struct sm_err *err)
{
	struct remote_write *rw;
	size_t n;

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
	pthread_once(&rw_once, rw_init_once);
	if (!rw_curl_ok)
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
	pthread_mutex_init(&rw->mu, NULL);
	sm_cond_init(&rw->cv);
	rw_gauges(rw);
	if (pthread_create(&rw->thread, NULL, rw_main, rw) != 0) {
		rw_destroy(rw);
		return (sm_err_set(err, SM_ENOMEM, "remote-write: cannot "
		    "start its thread"));
	}
	rw->started = true;
	sm_info("remote-write", "forwarding accepted uploads\turl=%s "
	    "auth=%s", rw->base, rw->auth_hdr != NULL ? "bearer" : "none");
	*out = rw;
	return (0);
}

void
rw_destroy(struct remote_write *rw)
{
	if (rw == NULL)
		return;
	pthread_mutex_lock(&rw->mu);
	rw->stop = true;
	pthread_cond_broadcast(&rw->cv);
	pthread_mutex_unlock(&rw->mu);
	if (rw->started)
		pthread_join(rw->thread, NULL);
	while (rw->head != NULL) {
		struct rw_entry *e = rw->head;

		rw->head = e->next;
		rw_entry_free(e);
	}
	pthread_cond_destroy(&rw->cv);
	pthread_mutex_destroy(&rw->mu);
	if (rw->auth_hdr != NULL) {
		memset(rw->auth_hdr, 0, strlen(rw->auth_hdr));
		sm_free(rw->auth_hdr);
	}
	sm_free(rw->base);
	sm_free(rw);
}
