/*
 * peers.c -- the prober of a component's peer view (peers.h).
 */
#include "peers.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "httpc.h"
#include "log.h"
#include "metrics.h"
#include "ring.h"

#define PEERS_STARTING_MS 1000  /* probe interval while one never answered */

struct peer {
	char *url;                      /* base URL, no trailing '/' */
	const char *header;             /* the view's header name */
	int dns_ix;                     /* -1: listed; else its dns+ entry */
	bool ok;                        /* last probe: 200 with an id */
	bool ever;                      /* answered at least once */
	bool warned;                    /* "not a <component>" logged */
	char id[SM_PEER_ID_LEN + 1];  /* from the last good answer */
	/* One probe round. */
	char hdr_id[SM_PEER_ID_LEN + 1];
};

struct dns_entry {
	char *spec, *host, *port;
	bool warned;
};

struct sm_peers {
	struct sm_peers_cfg cfg;
	char self_id[SM_PEER_ID_LEN + 1];
	struct peer *p;                 /* prober only */
	uint32_t np, pcap;
	struct dns_entry *dns;
	uint32_t ndns;
	atomic_uint nhealthy;
	_Atomic uint64_t rounds;
	/* the healthy ids, sorted, this one's included: under mu */
	char (*hids)[SM_PEER_ID_LEN + 1];
	uint32_t nhids;
	struct sm_metric *m_healthy, *m_fail;
	char *flag, *component, *header;
	pthread_t thr;
	bool started;
	pthread_mutex_t mu;             /* protects stopping, hids */
	pthread_cond_t cv;
	bool stopping;
};

uint32_t
sm_peers_count(const char *self, const char *const *ids, uint32_t n)
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

uint64_t
sm_peers_rounds(const struct sm_peers *p)
{
	return (p == NULL ? 0 : atomic_load((_Atomic uint64_t *)&p->rounds));
}

uint32_t
sm_peers_healthy(const struct sm_peers *p)
{
	if (p == NULL)
		return (1);
	return (atomic_load((atomic_uint *)&p->nhealthy));
}

uint32_t
sm_peers_ids(const struct sm_peers *p, const char *self,
    char (*ids)[SM_PEER_ID_LEN + 1], uint32_t max)
{
	uint32_t n;

	if (max == 0)
		return (0);
	if (p == NULL || p->nhids == 0) {
		snprintf(ids[0], sizeof(ids[0]), "%s", p != NULL ?
		    p->self_id : self);
		return (1);
	}
	pthread_mutex_lock((pthread_mutex_t *)&p->mu);
	n = SM_MIN(p->nhids, max);
	memcpy(ids, p->hids, n * sizeof(*ids));
	pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
	return (n);
}

static int
id_cmp(const void *a, const void *b)
{
	return (strcmp((const char *)a, (const char *)b));
}

static int
peer_add(struct sm_peers *p, const char *url, size_t len, int dns_ix)
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
	e->header = p->header;
	p->np++;
	return (0);
}

static void
peer_remove(struct sm_peers *p, uint32_t i)
{
	sm_free(p->p[i].url);
	p->p[i] = p->p[--p->np];
}

/* Parse one trimmed entry of -distributor.peers. */
static int
parse_entry(struct sm_peers *p, const char *s, size_t len,
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
			return (sm_err_set(err, SM_EINVAL, "%s: \"%.*s\" must "
			    "be dns+host:port (the peers' HTTP port)", p->flag,
			    (int)len, s));
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
			return (sm_err_set(err, SM_EINVAL, "%s: \"%.*s\" is "
			    "neither http://host:port nor dns+host:port",
			    p->flag, (int)len, s));
		}
	}
	rv = peer_add(p, tmp, strlen(tmp), -1);
	sm_free(tmp);
	return (rv != 0 ? sm_err_set(err, rv, "out of memory") : 0);
}

int
sm_peers_create(const struct sm_peers_cfg *cfg, struct sm_peers **out,
    struct sm_err *err)
{
	struct sm_peers *p;
	const char *s;
	int rv;

	*out = NULL;
	sm_gauge_set(sm_metric_child0(sm_metric_register(SM_METRIC_GAUGE,
	    cfg->m_healthy, cfg->m_healthy_help, NULL, NULL, 0)), 1);
	if (cfg->period_ms < 10 || cfg->timeout_ms < 1 ||
	    cfg->timeout_ms > cfg->period_ms)
		return (sm_err_set(err, SM_EINVAL, "%s-probe-period must be "
		    ">= 10ms and %s-probe-timeout between 1ms and the period",
		    cfg->flag, cfg->flag));
	for (s = cfg->spec; *s == ' ' || *s == ',' || *s == '\t'; s++)
		;
	if (*s == '\0')
		return (0);
	if (sm_httpc_init() != 0)
		return (sm_err_set(err, SM_EINTERNAL, "%s: libcurl failed to "
		    "initialise", cfg->flag));
	if ((p = sm_calloc(1, sizeof(*p))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	p->cfg = *cfg;
	p->cfg.spec = NULL;             /* not kept */
	snprintf(p->self_id, sizeof(p->self_id), "%s", cfg->self_id);
	p->cfg.self_id = p->self_id;
	p->flag = sm_strdup(cfg->flag);
	p->component = sm_strdup(cfg->component);
	p->header = sm_strdup(cfg->header);
	p->m_healthy = sm_metric_register(SM_METRIC_GAUGE, cfg->m_healthy,
	    cfg->m_healthy_help, NULL, NULL, 0);
	p->m_fail = sm_metric_register(SM_METRIC_COUNTER, cfg->m_failures,
	    cfg->m_failures_help, NULL, NULL, 0);
	atomic_init(&p->nhealthy, 1);
	pthread_mutex_init(&p->mu, NULL);
	sm_cond_init(&p->cv);
	if (p->flag == NULL || p->component == NULL || p->header == NULL) {
		sm_peers_destroy(p);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
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
			sm_peers_destroy(p);
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
peers_dns(struct sm_peers *p)
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
				sm_warn(p->component, "cannot resolve %s\t"
				    "name=%s err=\"%s\"", p->flag, d->spec,
				    err.msg);
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

/* Keep the component header's value. */
static void
peers_header(void *arg, const char *name, const char *value)
{
	struct peer *e = arg;

	if (name != NULL && strcasecmp(name, e->header) == 0)
		snprintf(e->hdr_id, sizeof(e->hdr_id), "%.*s", SM_PEER_ID_LEN,
		    value);
}

/* The outcome of `e`'s finished probe: rv, resp and err from
 * sm_httpc_many.  A transport failure is logged in libcurl's short words
 * (resp->reason), anything else with its message. */
static void
probe_done(struct sm_peers *p, struct peer *e, int rv,
    const struct sm_httpc_resp *resp, const struct sm_err *err)
{
	const char *why = resp->reason != NULL ? resp->reason : err->msg;
	bool ok;

	ok = rv == 0 && resp->status == 200 && e->hdr_id[0] != '\0';
	if (rv == 0 && resp->status == 200 && !ok && !e->warned) {
		sm_warn(p->component, "%s entry is not a %s (no %s in "
		    "/ready), not counted\turl=%s", p->flag, p->component,
		    p->header, e->url);
		e->warned = true;
	}
	if (!ok) {
		sm_counter_inc(sm_metric_child0(p->m_fail));
		if (e->ok)
			sm_info(p->component, "peer unhealthy\turl=%s "
			    "err=\"%s\"", e->url, rv != 0 ? why :
			    "not ready");
	} else {
		if (!e->ok && strcmp(e->hdr_id, p->self_id) != 0)
			sm_info(p->component, "peer healthy\turl=%s", e->url);
		memcpy(e->id, e->hdr_id, sizeof(e->id));
		e->ever = true;
	}
	e->ok = ok;
}

/* Probe every peer's /ready concurrently. */
static void
peers_probe(struct sm_peers *p)
{
	struct sm_httpc_req *rq;
	struct sm_httpc_resp *rs;
	struct sm_err *errs;
	char (*urls)[SM_DNS_URL_MAX + 512];
	int *rvs;
	uint32_t n = p->np;

	if (n == 0)
		return;
	rq = sm_calloc(n, sizeof(*rq));
	rs = sm_calloc(n, sizeof(*rs));
	errs = sm_calloc(n, sizeof(*errs));
	urls = sm_calloc(n, sizeof(*urls));
	rvs = sm_calloc(n, sizeof(*rvs));
	if (rq == NULL || rs == NULL || errs == NULL || urls == NULL ||
	    rvs == NULL) {
		for (uint32_t i = 0; i < n; i++) {
			p->p[i].ok = false;
			sm_counter_inc(sm_metric_child0(p->m_fail));
		}
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct peer *e = &p->p[i];

		e->hdr_id[0] = '\0';
		snprintf(urls[i], sizeof(urls[i]), "%s/ready", e->url);
		rq[i] = (struct sm_httpc_req){ .url = urls[i],
		    .method = "GET", .timeout_ms = p->cfg.timeout_ms,
		    .no_proxy = true, .user_agent = "smolder/" SM_VERSION
		    " peers", .cb_arg = e, .on_header = peers_header };
	}
	(void)sm_httpc_many(rq, rs, rvs, errs, n);
	for (uint32_t i = 0; i < n; i++)
		probe_done(p, &p->p[i], rvs[i], &rs[i], &errs[i]);
out:
	sm_free(rq);
	sm_free(rs);
	sm_free(errs);
	sm_free(urls);
	sm_free(rvs);
}

/* One round: resolve, probe every peer concurrently, publish N. */
static void
peers_round(struct sm_peers *p)
{
	const char **ids;

	peers_dns(p);
	peers_probe(p);
	if ((ids = sm_calloc(p->np + 1, sizeof(*ids))) != NULL) {
		char (*h)[SM_PEER_ID_LEN + 1] = sm_calloc(p->np + 1,
		    sizeof(*h));
		uint32_t n, nh = 0;

		for (uint32_t i = 0; i < p->np; i++)
			ids[i] = p->p[i].ok ? p->p[i].id : NULL;
		n = sm_peers_count(p->self_id, ids, p->np);
		if (h != NULL) {
			/* the healthy ids, sorted and unique, ours among */
			snprintf(h[nh++], sizeof(h[0]), "%s", p->self_id);
			for (uint32_t i = 0; i < p->np; i++)
				if (ids[i] != NULL && ids[i][0] != '\0')
					snprintf(h[nh++], sizeof(h[0]), "%s",
					    ids[i]);
			qsort(h, nh, sizeof(*h), id_cmp);
			{
				uint32_t w = 0;

				for (uint32_t i = 0; i < nh; i++)
					if (w == 0 || strcmp(h[w - 1],
					    h[i]) != 0)
						memmove(h[w++], h[i],
						    sizeof(*h));
				nh = w;
			}
			pthread_mutex_lock(&p->mu);
			sm_free(p->hids);
			p->hids = h;
			p->nhids = nh;
			pthread_mutex_unlock(&p->mu);
		}
		sm_free(ids);
		if (n != atomic_load(&p->nhealthy))
			sm_info(p->component, "healthy peers changed\t"
			    "from=%u to=%u", atomic_load(&p->nhealthy), n);
		atomic_store(&p->nhealthy, n);
		sm_gauge_set(sm_metric_child0(p->m_healthy), n);
	}
	atomic_fetch_add(&p->rounds, 1);
}

static void *
peers_main(void *arg)
{
	struct sm_peers *p = arg;

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
			sm_clock_wait_ms(p->cfg.clock, &p->cv, &p->mu, iv);
	}
	pthread_mutex_unlock(&p->mu);
	return (NULL);
}

int
sm_peers_start(struct sm_peers *p, struct sm_err *err)
{
	if (p == NULL || p->started)
		return (0);
	if (pthread_create(&p->thr, NULL, peers_main, p) != 0)
		return (sm_err_set(err, SM_ENOMEM, "%s: peers thread",
		    p->component));
	p->started = true;
	return (0);
}

void
sm_peers_stop(struct sm_peers *p)
{
	if (p == NULL || !p->started)
		return;
	sm_cond_set_flag(&p->mu, &p->cv, &p->stopping);
	pthread_join(p->thr, NULL);
	p->started = false;
}

void
sm_peers_destroy(struct sm_peers *p)
{
	if (p == NULL)
		return;
	sm_peers_stop(p);
	while (p->np > 0)
		peer_remove(p, p->np - 1);
	sm_free(p->p);
	for (uint32_t k = 0; k < p->ndns; k++) {
		sm_free(p->dns[k].spec);
		sm_free(p->dns[k].host);
		sm_free(p->dns[k].port);
	}
	sm_free(p->dns);
	sm_free(p->hids);
	sm_free(p->flag);
	sm_free(p->component);
	sm_free(p->header);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	sm_free(p);
}
