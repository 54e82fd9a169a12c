/*
 * peers.c -- the prober of the distributors' peer view (peers.h).
 */
#include "peers.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/ring.h"

#define PEERS_STARTING_MS 1000  /* probe interval while one never answered */

struct peer {
	char *url;                      /* base URL, no trailing '/' */
	int dns_ix;                     /* -1: listed; else its dns+ entry */
	bool ok;                        /* last probe: 200 with an id */
	bool ever;                      /* answered at least once */
	bool warned;                    /* "not a distributor" logged */
	char id[DIST_PEER_ID_LEN + 1];  /* from the last good answer */
	/* One probe round. */
	CURL *easy;
	char hdr_id[DIST_PEER_ID_LEN + 1];
};

struct dns_entry {
	char *spec, *host, *port;
	bool warned;
};

struct dist_peers {
	struct dist_peers_cfg cfg;
	char self_id[DIST_PEER_ID_LEN + 1];
	struct peer *p;                 /* prober only */
	uint32_t np, pcap;
	struct dns_entry *dns;
	uint32_t ndns;
	atomic_uint nhealthy;
	pthread_t thr;
	bool started;
	pthread_mutex_t mu;             /* protects stopping */
	pthread_cond_t cv;
	bool stopping;
};

static struct sm_metric *m_healthy, *m_fail;
static pthread_once_t peers_once = PTHREAD_ONCE_INIT;
static bool peers_curl_ok;

static void
peers_init_once(void)
{
	peers_curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
	m_healthy = sm_metric_register(SM_METRIC_GAUGE,
	    "smolder_distributor_healthy_peers", "Healthy distributors "
	    "sharing each tenant's ingestion rate, this one included (the "
	    "rate is divided by it; 1 without -distributor.peers).",
	    NULL, NULL, 0);
	m_fail = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_distributor_peer_probe_failures_total", "Probes of "
	    "-distributor.peers that failed (no answer, not ready, not a "
	    "distributor).", NULL, NULL, 0);
}

uint32_t
dist_peers_count(const char *self, const char *const *ids, uint32_t n)
{
	uint32_t count = 1;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t j;

		if (ids[i] == NULL || ids[i][0] == '\0' ||
		    strcmp(ids[i], self) == 0)
			continue;
		for (j = 0; j < i; j++)
			if (ids[j] != NULL && strcmp(ids[j], ids[i]) == 0)
				break;
		if (j == i)
			count++;
	}
	return (count);
}

uint32_t
dist_peers_healthy(const struct dist_peers *p)
{
	if (p == NULL)
		return (1);
	return (atomic_load((atomic_uint *)&p->nhealthy));
}

static int
peer_add(struct dist_peers *p, const char *url, size_t len, int dns_ix)
{
	struct peer *e;

	while (len > 0 && url[len - 1] == '/')
		len--;
	for (uint32_t i = 0; i < p->np; i++)
		if (strlen(p->p[i].url) == len &&
		    strncmp(p->p[i].url, url, len) == 0)
			return (0);             /* listed twice: one probe */
	if (SM_GROW(p->p, p->pcap, p->np + 1, 8) != 0)
		return (SM_ENOMEM);
	e = &p->p[p->np];
	memset(e, 0, sizeof(*e));
	if ((e->url = sm_strndup(url, len)) == NULL)
		return (SM_ENOMEM);
	e->dns_ix = dns_ix;
	p->np++;
	return (0);
}

static void
peer_remove(struct dist_peers *p, uint32_t i)
{
	sm_free(p->p[i].url);
	p->p[i] = p->p[--p->np];
}

/* Parse one trimmed entry of -distributor.peers. */
static int
parse_entry(struct dist_peers *p, const char *s, size_t len,
    struct sm_err *err)
{
	char *tmp;
	int rv;

	if ((tmp = sm_strndup(s, len)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (strncmp(tmp, "dns+", 4) == 0) {
		struct dns_entry d = { 0 };
		struct dns_entry *nd;

		if ((rv = sm_dns_split(tmp, &d.host, &d.port)) != 0) {
			sm_free(tmp);
			if (rv == SM_ENOMEM)
				return (sm_err_set(err, rv, "out of memory"));
			return (sm_err_set(err, SM_EINVAL, "-distributor.peers: "
			    "\"%.*s\" must be dns+host:port (the distributors' "
			    "HTTP port)", (int)len, s));
		}
		nd = sm_realloc(p->dns, (p->ndns + 1) * sizeof(*nd));
		if (nd == NULL) {
			sm_free(d.host);
			sm_free(d.port);
			sm_free(tmp);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		d.spec = tmp;
		p->dns = nd;
		p->dns[p->ndns++] = d;
		return (0);
	}
	{
		const char *host = NULL;

		if (strncmp(tmp, "http://", 7) == 0)
			host = tmp + 7;
		else if (strncmp(tmp, "https://", 8) == 0)
			host = tmp + 8;
		if (host == NULL || *host == '\0' || *host == '/' ||
		    strpbrk(tmp, " \t?#") != NULL) {
			sm_free(tmp);
			return (sm_err_set(err, SM_EINVAL, "-distributor.peers: "
			    "\"%.*s\" is neither http://host:port nor "
			    "dns+host:port", (int)len, s));
		}
	}
	rv = peer_add(p, tmp, strlen(tmp), -1);
	sm_free(tmp);
	return (rv != 0 ? sm_err_set(err, rv, "out of memory") : 0);
}

int
dist_peers_create(const struct dist_peers_cfg *cfg, struct dist_peers **out,
    struct sm_err *err)
{
	struct dist_peers *p;
	const char *s;
	int rv;

	*out = NULL;
	pthread_once(&peers_once, peers_init_once);
	sm_gauge_set(sm_metric_child0(m_healthy), 1);
	if (cfg->period_ms < 10 || cfg->timeout_ms < 1 ||
	    cfg->timeout_ms > cfg->period_ms)
		return (sm_err_set(err, SM_EINVAL, "-distributor.peers-probe-"
		    "period must be >= 10ms and -distributor.peers-probe-"
		    "timeout between 1ms and the period"));
	for (s = cfg->spec; *s == ' ' || *s == ',' || *s == '\t'; s++)
		;
	if (*s == '\0')
		return (0);
	if (!peers_curl_ok)
		return (sm_err_set(err, SM_EINTERNAL, "-distributor.peers: "
		    "libcurl failed to initialise"));
	if ((p = sm_calloc(1, sizeof(*p))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	p->cfg = *cfg;
	p->cfg.spec = NULL;             /* not kept */
	snprintf(p->self_id, sizeof(p->self_id), "%s", cfg->self_id);
	p->cfg.self_id = p->self_id;
	atomic_init(&p->nhealthy, 1);
	pthread_mutex_init(&p->mu, NULL);
	sm_cond_init(&p->cv);
	while (*s != '\0') {
		const char *end = strchr(s, ',');
		size_t len = end != NULL ? (size_t)(end - s) : strlen(s);

		while (len > 0 && isspace((unsigned char)*s)) {
			s++;
			len--;
		}
		while (len > 0 && isspace((unsigned char)s[len - 1]))
			len--;
		if (len > 0 && (rv = parse_entry(p, s, len, err)) != 0) {
			dist_peers_destroy(p);
			return (rv);
		}
		if (end == NULL)
			break;
		s = end + 1;
	}
	*out = p;
	return (0);
}

/* Re-resolve every dns+ entry; an entry that fails keeps its peers. */
static void
peers_dns(struct dist_peers *p)
{
	for (uint32_t k = 0; k < p->ndns; k++) {
		struct dns_entry *d = &p->dns[k];
		char (*urls)[SM_DNS_URL_MAX] = NULL;
		uint32_t n = 0;
		struct sm_err err;

		sm_err_clear(&err);
		if (sm_dns_resolve(d->host, d->port, "http", &urls, &n,
		    &err) != 0) {
			if (!d->warned)
				sm_warn("distributor", "cannot resolve "
				    "-distributor.peers\tname=%s err=\"%s\"",
				    d->spec, err.msg);
			d->warned = true;
			continue;
		}
		d->warned = false;
		for (uint32_t i = 0; i < p->np;) {
			uint32_t j;

			if (p->p[i].dns_ix != (int)k) {
				i++;
				continue;
			}
			for (j = 0; j < n && strcmp(urls[j], p->p[i].url) != 0;
			    j++)
				;
			if (j == n)
				peer_remove(p, i);
			else
				i++;
		}
		for (uint32_t j = 0; j < n; j++)
			if (peer_add(p, urls[j], strlen(urls[j]), (int)k) != 0)
				break;
		sm_free(urls);
	}
}

static size_t
peers_discard(char *ptr, size_t size, size_t nmemb, void *arg)
{
	(void)ptr;
	(void)arg;
	return (size * nmemb);
}

/* Keep the X-Smolder-Distributor header's value. */
static size_t
peers_header(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct peer *e = arg;
	size_t len = size * nmemb, hl = strlen(DIST_PEER_HEADER);

	if (len > hl + 1 && strncasecmp(ptr, DIST_PEER_HEADER, hl) == 0 &&
	    ptr[hl] == ':') {
		const char *v = ptr + hl + 1;
		size_t vl = len - hl - 1;

		while (vl > 0 && (*v == ' ' || *v == '\t')) {
			v++;
			vl--;
		}
		while (vl > 0 && isspace((unsigned char)v[vl - 1]))
			vl--;
		if (vl > DIST_PEER_ID_LEN)
			vl = DIST_PEER_ID_LEN;
		memcpy(e->hdr_id, v, vl);
		e->hdr_id[vl] = '\0';
	}
	return (len);
}

/* Start a probe of `e` on `mh`.  False when it cannot be started. */
static bool
probe_start(struct dist_peers *p, CURLM *mh, struct peer *e)
{
	char url[SM_DNS_URL_MAX + 512];

	e->hdr_id[0] = '\0';
	if ((e->easy = curl_easy_init()) == NULL)
		return (false);
	snprintf(url, sizeof(url), "%s/ready", e->url);
	curl_easy_setopt(e->easy, CURLOPT_URL, url);
	curl_easy_setopt(e->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e->easy, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(e->easy, CURLOPT_TIMEOUT_MS, (long)p->cfg.timeout_ms);
	curl_easy_setopt(e->easy, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)p->cfg.timeout_ms);
	curl_easy_setopt(e->easy, CURLOPT_WRITEFUNCTION, peers_discard);
	curl_easy_setopt(e->easy, CURLOPT_HEADERFUNCTION, peers_header);
	curl_easy_setopt(e->easy, CURLOPT_HEADERDATA, e);
	curl_easy_setopt(e->easy, CURLOPT_PRIVATE, e);
	curl_easy_setopt(e->easy, CURLOPT_USERAGENT, "smolder/" SM_VERSION
	    " peers");
	if (curl_multi_add_handle(mh, e->easy) != CURLM_OK) {
		curl_easy_cleanup(e->easy);
		e->easy = NULL;
		return (false);
	}
	return (true);
}

/* The outcome of `e`'s finished probe (`cc`). */
static void
probe_done(struct dist_peers *p, struct peer *e, CURLcode cc)
{
	long status = 0;
	bool ok;

	if (cc == CURLE_OK)
		curl_easy_getinfo(e->easy, CURLINFO_RESPONSE_CODE, &status);
	ok = cc == CURLE_OK && status == 200 && e->hdr_id[0] != '\0';
	if (cc == CURLE_OK && status == 200 && !ok && !e->warned) {
		sm_warn("distributor", "-distributor.peers entry is not a "
		    "distributor (no " DIST_PEER_HEADER " in /ready), not "
		    "counted\turl=%s", e->url);
		e->warned = true;
	}
	if (!ok) {
		sm_counter_inc(sm_metric_child0(m_fail));
		if (e->ok)
			sm_info("distributor", "peer distributor unhealthy\t"
			    "url=%s err=\"%s\"", e->url, cc != CURLE_OK ?
			    curl_easy_strerror(cc) : "not ready");
	} else {
		if (!e->ok && strcmp(e->hdr_id, p->self_id) != 0)
			sm_info("distributor", "peer distributor healthy\t"
			    "url=%s", e->url);
		memcpy(e->id, e->hdr_id, sizeof(e->id));
		e->ever = true;
	}
	e->ok = ok;
}

/* One round: resolve, probe every peer concurrently, publish N. */
static void
peers_round(struct dist_peers *p)
{
	const char **ids;
	CURLM *mh;
	int running = 0;

	peers_dns(p);
	if ((mh = curl_multi_init()) == NULL)
		return;
	for (uint32_t i = 0; i < p->np; i++) {
		if (!probe_start(p, mh, &p->p[i])) {
			p->p[i].ok = false;
			sm_counter_inc(sm_metric_child0(m_fail));
		}
	}
	do {
		CURLMsg *msg;
		int left;

		if (curl_multi_perform(mh, &running) != CURLM_OK)
			break;
		while ((msg = curl_multi_info_read(mh, &left)) != NULL) {
			struct peer *e = NULL;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE,
			    (char **)&e);
			probe_done(p, e, msg->data.result);
		}
		if (running > 0)
			curl_multi_poll(mh, NULL, 0, 100, NULL);
	} while (running > 0);
	for (uint32_t i = 0; i < p->np; i++) {
		struct peer *e = &p->p[i];

		if (e->easy == NULL)
			continue;
		curl_multi_remove_handle(mh, e->easy);
		curl_easy_cleanup(e->easy);
		e->easy = NULL;
	}
	curl_multi_cleanup(mh);
	if ((ids = sm_calloc(p->np + 1, sizeof(*ids))) != NULL) {
		uint32_t n;

		for (uint32_t i = 0; i < p->np; i++)
			ids[i] = p->p[i].ok ? p->p[i].id : NULL;
		n = dist_peers_count(p->self_id, ids, p->np);
		sm_free(ids);
		if (n != atomic_load(&p->nhealthy))
			sm_info("distributor", "healthy distributors changed\t"
			    "from=%u to=%u", atomic_load(&p->nhealthy), n);
		atomic_store(&p->nhealthy, n);
		sm_gauge_set(sm_metric_child0(m_healthy), n);
	}
}

static void *
peers_main(void *arg)
{
	struct dist_peers *p = arg;

	pthread_mutex_lock(&p->mu);
	while (!p->stopping) {
		int64_t iv = p->cfg.period_ms;

		pthread_mutex_unlock(&p->mu);
		peers_round(p);
		for (uint32_t i = 0; i < p->np; i++)
			if (!p->p[i].ever)
				iv = SM_MIN(iv, PEERS_STARTING_MS);
		if (p->np == 0 && p->ndns > 0)
			iv = SM_MIN(iv, PEERS_STARTING_MS);
		pthread_mutex_lock(&p->mu);
		if (!p->stopping)
			sm_cond_wait_ms(&p->cv, &p->mu, iv);
	}
	pthread_mutex_unlock(&p->mu);
	return (NULL);
}

int
dist_peers_start(struct dist_peers *p, struct sm_err *err)
{
	if (p == NULL || p->started)
		return (0);
	if (pthread_create(&p->thr, NULL, peers_main, p) != 0)
		return (sm_err_set(err, SM_ENOMEM, "distributor: peers thread"));
	p->started = true;
	return (0);
}

void
dist_peers_stop(struct dist_peers *p)
{
	if (p == NULL || !p->started)
		return;
	pthread_mutex_lock(&p->mu);
	p->stopping = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thr, NULL);
	p->started = false;
}

void
dist_peers_destroy(struct dist_peers *p)
{
	if (p == NULL)
		return;
	dist_peers_stop(p);
	while (p->np > 0)
		peer_remove(p, p->np - 1);
	sm_free(p->p);
	for (uint32_t k = 0; k < p->ndns; k++) {
		sm_free(p->dns[k].spec);
		sm_free(p->dns[k].host);
		sm_free(p->dns[k].port);
	}
	sm_free(p->dns);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	sm_free(p);
}
