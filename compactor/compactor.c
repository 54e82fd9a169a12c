/*
 * compactor.c -- retention passes over the ring; see compactor.h.
 */
#include "compactor.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/rpc.h"

struct compactor {
	struct cpt_config cfg;
	struct sm_http *http;
	struct sm_ring *ring;
	pthread_mutex_t pass_mu;        /* one pass at a time */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stopping;
	pthread_t thr;
	int started;
};

struct cpt_pass {
	int64_t before_ms;
	uint32_t ingesters, failed, skipped;
	uint64_t retired;
};

static struct sm_metric *m_runs, *m_retired, *m_last_ok;
static pthread_once_t cpt_metrics_once = PTHREAD_ONCE_INIT;

static void
cpt_metrics_register(void)
{
	m_runs = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_compactor_runs_total", "Retention passes by outcome: ok "
	    "(every ingester done), partial, failed.",
	    (const char *const[]){ "status", NULL }, NULL, 0);
	m_retired = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_compactor_blocks_retired_total", "Blocks ingesters "
	    "retired past the retention period.", NULL, NULL, 0);
	m_last_ok = sm_metric_register(SM_METRIC_GAUGE,
	    "smolder_compactor_last_success_timestamp_seconds", "When the "
	    "last pass that reached every ingester ended (unix seconds).",
	    NULL, NULL, 0);
}

const struct sm_flag *
cpt_flags(struct cpt_config *cfg, size_t *n)
{
	static struct sm_flag f[3];

	f[0] = (struct sm_flag){ "compactor.blocks-retention-period",
		SM_FLAG_DURATION, &cfg->retention_ms, "0",
		"Delete profiling data older than this (0 = keep everything). "
		"Ingesters stop serving it at once and drop its blocks." };
	f[1] = (struct sm_flag){ "compactor.compaction-interval",
		SM_FLAG_DURATION, &cfg->interval_ms, "10m",
		"How often the compactor runs a pass over every ingester." };
	f[2] = (struct sm_flag){ "compactor.rpc-timeout", SM_FLAG_DURATION,
		&cfg->timeout_ms, "1m",
		"Deadline of one ingester's part of a pass." };
	*n = SM_ARRAY_LEN(f);
	return (f);
}

/* One retention pass over the healthy ingesters. */
static void
cpt_pass(struct compactor *c, struct cpt_pass *p)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__RetentionRequest rr = SMOLDER__V1__RETENTION_REQUEST__INIT;
	struct sm_ring_snap *s;
	struct sm_rpc_multi *mc = NULL;
	uint8_t buf[32];
	size_t len;
	const char *status;

	memset(p, 0, sizeof(*p));
	if (c->cfg.retention_ms <= 0)
		return;
	pthread_mutex_lock(&c->pass_mu);
	p->before_ms = sm_now_ms() - c->cfg.retention_ms;
	rr.before_ms = p->before_ms;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_RETENTION;
	req.retention = &rr;
	len = smolder__v1__request__pack(&req, buf);
	s = sm_ring_acquire(c->ring);
	if (sm_rpc_multi_create(SM_MAX(s->n, 1), "retention", &mc) != 0) {
		p->failed = s->n;
		goto out;
	}
	p->skipped = s->n - sm_ring_start_healthy(s, mc, buf, len,
	    (int)c->cfg.timeout_ms);
	sm_rpc_multi_wait(mc);
	for (uint32_t k = 0; k < s->n; k++) {
		struct sm_arena *a;
		Smolder__V1__Response *resp;
		struct sm_err err;

		if (!s->healthy[k])
			continue;
		a = sm_arena_create(1 << 20);
		sm_err_clear(&err);
		p->ingesters++;
		if (a != NULL && sm_rpc_multi_response(mc, k, a, &resp,
		    &err) == 0 && resp->result_case ==
		    SMOLDER__V1__RESPONSE__RESULT_RETENTION) {
			p->retired += resp->retention->blocks_deleted;
		} else {
			p->failed++;
			sm_warn("compactor", "retention failed on an ingester\t"
			    "member=%s err=\"%s\"", s->m[k]->url,
			    err.msg);
		}
		sm_arena_destroy(a);
	}
out:
	sm_rpc_multi_destroy(mc);
	sm_ring_release(s);
	status = p->failed == 0 && p->skipped == 0 ? "ok" :
	    p->failed + p->skipped < p->ingesters + p->skipped ? "partial" :
	    "failed";
	sm_counter_inc(sm_metric_child(m_runs, status));
	sm_counter_add(sm_metric_child0(m_retired), p->retired);
	if (strcmp(status, "ok") == 0)
		sm_gauge_set(sm_metric_child0(m_last_ok),
		    (double)sm_now_ms() / 1000);
	sm_info("compactor", "retention pass\tstatus=%s before_ms=%lld "
	    "ingesters=%u failed=%u skipped_unhealthy=%u blocks_retired=%llu",
	    status, (long long)p->before_ms, p->ingesters, p->failed,
	    p->skipped, (unsigned long long)p->retired);
	pthread_mutex_unlock(&c->pass_mu);
}

static void
run_handler(struct sm_http_req *r, void *arg)
{
	struct compactor *c = arg;
	struct cpt_pass p;
	struct sm_buf out = SM_BUF_INIT;

	if (c->cfg.retention_ms <= 0) {
		sm_http_reply_text(r, 200, "{\"retention\":\"disabled\"}\n");
		return;
	}
	cpt_pass(c, &p);
	sm_buf_printf(&out, "{\"before_ms\":%lld,\"ingesters\":%u,"
	    "\"failed\":%u,\"skipped_unhealthy\":%u,\"blocks_retired\":%llu}\n",
	    (long long)p.before_ms, p.ingesters, p.failed, p.skipped,
	    (unsigned long long)p.retired);
	if (sm_buf_error(&out) != 0)
		sm_http_reply_error(r, 500, "internal", "out of memory");
	else
		sm_http_reply_buf(r, p.failed == 0 ? 200 : 503,
		    "application/json", &out);
	sm_buf_fini(&out);
}

static void *
cpt_main(void *arg)
{
	struct compactor *c = arg;

	/* The first pass comes one interval after the start: ingesters keep
	 * their floor across restarts, so nothing is owed at start-up, and
	 * a restarting cluster is not hit by every compactor at once. */
	pthread_mutex_lock(&c->mu);
	while (!c->stopping) {
		struct cpt_pass p;

		sm_cond_wait_ms(&c->cv, &c->mu, c->cfg.interval_ms);
		if (c->stopping)
			break;
		pthread_mutex_unlock(&c->mu);
		cpt_pass(c, &p);
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return (NULL);
}

int
cpt_create(const struct cpt_config *cfg, struct sm_http *http,
    struct sm_ring *ring, struct compactor **out, struct sm_err *err)
{
	struct compactor *c;
	int rv;

	*out = NULL;
	if (cfg->retention_ms < 0 || cfg->interval_ms < 1000 ||
	    cfg->timeout_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "compactor: retention must "
		    "be >= 0, the interval >= 1s, the timeout > 0"));
	pthread_once(&cpt_metrics_once, cpt_metrics_register);
	if ((c = sm_calloc(1, sizeof(*c))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	c->cfg = *cfg;
	c->http = http;
	c->ring = ring;
	pthread_mutex_init(&c->pass_mu, NULL);
	pthread_mutex_init(&c->mu, NULL);
	sm_cond_init(&c->cv);
	if (http != NULL && (rv = sm_http_route(http, "POST", "/compactor/run",
	    run_handler, c, 0)) != 0) {
		cpt_destroy(c);
		return (sm_err_set(err, rv, "compactor: route: %s",
		    sm_strerror(rv)));
	}
	*out = c;
	return (0);
}

int
cpt_start(struct compactor *c, struct sm_err *err)
{
	if (pthread_create(&c->thr, NULL, cpt_main, c) != 0)
		return (sm_err_set(err, SM_ENOMEM, "compactor: thread"));
	c->started = 1;
	if (c->cfg.retention_ms > 0)
		sm_info("compactor", "retention enabled\tperiod_ms=%lld "
		    "interval_ms=%lld", (long long)c->cfg.retention_ms,
		    (long long)c->cfg.interval_ms);
	return (0);
}

void
cpt_stop(struct compactor *c)
{
	if (c == NULL || !c->started)
		return;
	pthread_mutex_lock(&c->mu);
	c->stopping = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thr, NULL);
	c->started = 0;
}

void
cpt_destroy(struct compactor *c)
{
	if (c == NULL)
		return;
	cpt_stop(c);
	pthread_mutex_destroy(&c->pass_mu);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	sm_free(c);
}
