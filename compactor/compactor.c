/*
 * compactor.c -- retention and downsampling passes over the ring; see
 * compactor.h.
 */
#include "compactor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/rpc.h"

#include "bucket_index.h"
#include "fold.h"

/* Tier work on one ingester, for GET /compactor (guarded by st_mu). */
struct cpt_member {
	char *id;                       /* or the URL when the id is unknown */
	uint32_t planned, done, noop, failed, pending;
	uint64_t bytes_read, bytes_written;
	char running[160];              /* the job in progress, "" = none */
	char error[200];                /* the last failure */
	int64_t pass_ms;                /* when its last pass ended */
};

struct compactor {
	struct cpt_config cfg;
	struct sm_http *http;
	struct sm_ring *ring;
	pthread_mutex_t pass_mu;        /* one pass at a time */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic bool stopping;
	pthread_t thr;
	int started;
	/* Tier progress of the last (or current) pass. */
	pthread_mutex_t st_mu;
	struct cpt_member *mem;
	uint32_t nmem;
	int64_t tiers_pass_ms;          /* when the last tier pass ended */
	uint32_t tiers_passes;
	struct cpt_fold *fold;          /* NULL: no de-duplication */
};

struct cpt_pass {
	bool locked_out;                /* another compactor holds the lock */
	char holder[256];               /* which, when known */
	bool enabled;                   /* retention ran */
	int64_t before_ms;              /* the default's; 0 = keep */
	uint32_t overrides;             /* tenants with their own retention */
	uint32_t ingesters, failed, skipped;
	uint64_t retired;
	uint32_t jobs_built, jobs_noop, jobs_failed;   /* downsampling */
	bool bucket;                    /* the bucket pass ran */
	int bucket_rv;                  /* its listing's error, 0 = none */
	struct cpt_bucket_stats bst;
	bool fold;                      /* the fold pass ran */
	int fold_rv;                    /* its scan's error, 0 = none */
	struct cpt_fold_stats fst;
};

static struct sm_metric *m_runs, *m_retired, *m_last_ok;
static struct sm_metric *m_jobs, *m_pending, *m_bytes_read, *m_bytes_written;
static struct sm_metric *m_bk_blocks, *m_bk_marked, *m_bk_deleted;
static struct sm_metric *m_bk_partial, *m_bk_fail;
static struct sm_metric *m_fold, *m_fold_read, *m_fold_written;
static struct sm_metric *m_fold_tiers, *m_lock_held;

static const struct sm_metric_def cpt_metric_defs[] = {
	{ &m_lock_held, SM_METRIC_GAUGE, "smolder_compactor_lock_held",
	    "1 while this compactor holds the compactor lock in etcd (its "
	    "passes run), 0 while another does; absent without etcd.", NULL,
	    NULL, 0 },
	{ &m_runs, SM_METRIC_COUNTER, "smolder_compactor_runs_total",
	    "Retention passes by outcome: ok (every ingester done), partial, "
	    "failed.", SM_METRIC_LABELS("status"), NULL, 0 },
	{ &m_retired, SM_METRIC_COUNTER,
	    "smolder_compactor_blocks_retired_total", "Blocks ingesters "
	    "retired past the retention period.", NULL, NULL, 0 },
	{ &m_last_ok, SM_METRIC_GAUGE,
	    "smolder_compactor_last_success_timestamp_seconds",
	    "When the last pass that reached every ingester ended (unix "
	    "seconds).", NULL, NULL, 0 },
	{ &m_jobs, SM_METRIC_COUNTER, "smolder_compactor_jobs_total",
	    "Downsampling jobs by tier width and outcome: built, noop (no "
	    "longer due), failed (after retries).",
	    SM_METRIC_LABELS("tier", "status"), NULL, 0 },
	{ &m_pending, SM_METRIC_GAUGE, "smolder_compactor_jobs_pending",
	    "Downsampling jobs planned and not yet run in the current pass (0 "
	    "between passes).", NULL, NULL, 0 },
	{ &m_fold, SM_METRIC_COUNTER, "smolder_compactor_fold_hours_total",
	    "Tenant-hours of the bucket the de-duplication tried, by outcome: "
	    "folded, unresolved (no exact fold: the replicas' blocks stay), "
	    "failed.", SM_METRIC_LABELS("status"), NULL, 0 },
	{ &m_fold_tiers, SM_METRIC_COUNTER,
	    "smolder_compactor_fold_tiers_total", "Tier blocks of the fold "
	    "source built in the bucket (per width and day).", NULL, NULL, 0 },
	{ &m_fold_read, SM_METRIC_COUNTER,
	    "smolder_compactor_fold_bytes_read_total", "Bytes of block "
	    "objects the de-duplication fetched from the bucket.", NULL,
	    NULL, 0 },
	{ &m_fold_written, SM_METRIC_COUNTER,
	    "smolder_compactor_fold_bytes_written_total",
	    "Bytes of folded block objects uploaded to the bucket.", NULL,
	    NULL, 0 },
	{ &m_bytes_read, SM_METRIC_COUNTER,
	    "smolder_compactor_bytes_read_total", "Stored bytes of the raw "
	    "blocks downsampling jobs read.", NULL, NULL, 0 },
	{ &m_bytes_written, SM_METRIC_COUNTER,
	    "smolder_compactor_bytes_written_total", "Stored bytes of the "
	    "tier blocks downsampling jobs wrote.", NULL, NULL, 0 },
	{ &m_bk_blocks, SM_METRIC_GAUGE, "smolder_compactor_bucket_blocks",
	    "Complete blocks in the bucket at the last bucket pass.", NULL,
	    NULL, 0 },
	{ &m_bk_marked, SM_METRIC_COUNTER,
	    "smolder_compactor_bucket_blocks_marked_total",
	    "Bucket blocks marked for deletion (retention).", NULL, NULL, 0 },
	{ &m_bk_deleted, SM_METRIC_COUNTER,
	    "smolder_compactor_bucket_blocks_deleted_total",
	    "Bucket blocks deleted once their deletion mark was older than "
	    "-compactor.deletion-delay.", NULL, NULL, 0 },
	{ &m_bk_partial, SM_METRIC_COUNTER,
	    "smolder_compactor_bucket_partial_deleted_total",
	    "Unfinished uploads (a block object without meta.json) deleted.",
	    NULL, NULL, 0 },
	{ &m_bk_fail, SM_METRIC_COUNTER,
	    "smolder_compactor_bucket_pass_failures_total",
	    "Bucket passes that could not list the bucket, plus tenants whose "
	    "part of a pass failed (retried at the next pass).", NULL,
	    NULL, 0 },
};

static struct sm_metric_set cpt_metric_set = SM_METRIC_SET(cpt_metric_defs);

#define SM_FLAG_STRUCT struct cpt_config
static const struct sm_flag cpt_flag_tab[] = {
	SM_FLAG_I64("compactor.blocks-retention-period",
	    SM_FLAG_DURATION, retention_ms,
	    "0",
	    "Delete profiling data older than this (0 = keep everything). "
	    "Ingesters stop serving it at once and drop its blocks."),
	SM_FLAG_I64("compactor.compaction-interval",
	    SM_FLAG_DURATION, interval_ms,
	    "10m",
	    "How often the compactor runs a pass over every ingester."),
	SM_FLAG_I64("compactor.rpc-timeout", SM_FLAG_DURATION, timeout_ms,
	    "1m",
	    "Deadline of one ingester's part of a retention pass, and "
	    "of one downsampling job."),
	SM_FLAG_I64("compactor.concurrency", SM_FLAG_INT, concurrency,
	    "1",
	    "Ingesters downsampled at once (each runs one job at a "
	    "time)."),
	SM_FLAG_I64("compactor.job-retries", SM_FLAG_INT, retries,
	    "3",
	    "Attempts of a failed downsampling job within a pass (1 s, "
	    "then 2 s, ... apart); the next pass plans it again."),
	SM_FLAG_I64("compactor.deletion-delay",
	    SM_FLAG_DURATION, deletion_delay_ms,
	    "12h",
	    "How long a bucket block marked for deletion stays before it "
	    "is deleted (longer than any reader's sync interval)."),
	SM_FLAG_I64("compactor.fold-delay", SM_FLAG_DURATION, fold_delay_ms,
	    "1h",
	    "With a bucket and store-gateways: how "
	    "long after a clock hour ends before the replicas' blocks of "
	    "it are folded into one (a block that comes later is folded "
	    "in again)."),
};
#undef SM_FLAG_STRUCT

SM_FLAGS_ADD_FN(cpt_flags_add, struct cpt_config, cpt_flag_tab)

/*
 * The tenants with their own retention (compactor_blocks_retention_period
 * in the runtime config), each before = now - period or 0 (keep), into
 * *out (free with tenant_floors_free).  Tenants listed for other limits
 * only are left out: they follow the default.  0 or SM_ENOMEM.
 */
static int
tenant_floors(struct compactor *c, int64_t now,
    Smolder__V1__TenantRetention **out, size_t *nout)
{
	struct sm_limits def = { 0 }, lim;
	Smolder__V1__TenantRetention *v = NULL;
	char **ids = NULL;
	size_t n = 0, k = 0;
	int rv;

	*out = NULL;
	*nout = 0;
	if ((rv = sm_overrides_tenants(c->cfg.overrides, &ids, &n)) != 0)
		return (rv);
	if (n > 0 && (v = sm_calloc(n, sizeof(*v))) == NULL) {
		sm_overrides_tenants_free(ids, n);
		return (SM_ENOMEM);
	}
	/* A sentinel default tells "not set" from an override of 0. */
	def.compactor_blocks_retention_period_ms = -1;
	for (size_t i = 0; i < n; i++) {
		sm_overrides_get(c->cfg.overrides, ids[i], &def, &lim);
		if (lim.compactor_blocks_retention_period_ms < 0)
			continue;
		smolder__v1__tenant_retention__init(&v[k]);
		v[k].tenant = ids[i];
		ids[i] = NULL;          /* now v's */
		v[k].before_ms = lim.compactor_blocks_retention_period_ms > 0 ?
		    now - lim.compactor_blocks_retention_period_ms : 0;
		k++;
	}
	sm_overrides_tenants_free(ids, n);
	*out = v;
	*nout = k;
	return (0);
}

static void
tenant_floors_free(Smolder__V1__TenantRetention *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sm_free(v[i].tenant);
	sm_free(v);
}

/* Whether c->pass_mu is held (by some thread: a mutex does not say which
 * one), for the asserts of the passes that rely on it. */
static bool
pass_held(struct compactor *c)
{
	if (pthread_mutex_trylock(&c->pass_mu) != 0)
		return (true);
	pthread_mutex_unlock(&c->pass_mu);
	return (false);
}

/* One retention pass over the healthy ingesters (c->pass_mu held). */
static void
retention_pass(struct compactor *c, struct cpt_pass *p)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__RetentionRequest rr = SMOLDER__V1__RETENTION_REQUEST__INIT;
	Smolder__V1__TenantRetention *tv = NULL, **tp = NULL;
	struct sm_ring_snap *s;
	struct sm_rpc_multi *mc = NULL;
	uint8_t *buf = NULL;
	size_t len, ntv = 0;
	int64_t now = sm_now_ms();
	const char *status;

	SM_ASSERT(pass_held(c));
	if (tenant_floors(c, now, &tv, &ntv) != 0) {
		sm_warn("compactor", "retention pass skipped: out of memory");
		return;
	}
	if (c->cfg.retention_ms <= 0 && ntv == 0) {
		tenant_floors_free(tv, ntv);    /* tv may be allocated, empty */
		return;
	}
	p->enabled = true;
	p->overrides = (uint32_t)ntv;
	p->before_ms = c->cfg.retention_ms > 0 ? now - c->cfg.retention_ms :
	    0;
	rr.before_ms = p->before_ms;
	if (ntv > 0 && (tp = sm_calloc(ntv, sizeof(*tp))) == NULL) {
		tenant_floors_free(tv, ntv);
		sm_warn("compactor", "retention pass skipped: out of memory");
		return;
	}
	for (size_t i = 0; i < ntv; i++)
		tp[i] = &tv[i];
	rr.n_tenants = ntv;
	rr.tenants = tp;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_RETENTION;
	req.retention = &rr;
	len = smolder__v1__request__get_packed_size(&req);
	if ((buf = sm_malloc(len + 1)) == NULL) {
		tenant_floors_free(tv, ntv);
		sm_free(tp);
		sm_warn("compactor", "retention pass skipped: out of memory");
		return;
	}
	len = smolder__v1__request__pack(&req, buf);
	tenant_floors_free(tv, ntv);
	sm_free(tp);
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
	/* Each member counted once, asked or skipped (the status relies on it). */
	SM_ASSERT(p->ingesters + p->skipped == s->n &&
	    p->failed <= p->ingesters);
out:
	sm_rpc_multi_destroy(mc);
	sm_ring_release(s);
	sm_free(buf);
	status = p->failed == 0 && p->skipped == 0 ? "ok" :
	    p->failed + p->skipped < p->ingesters + p->skipped ? "partial" :
	    "failed";
	sm_counter_inc(sm_metric_child(m_runs, status));
	sm_counter_add(sm_metric_child0(m_retired), p->retired);
	if (strcmp(status, "ok") == 0)
		sm_gauge_set(sm_metric_child0(m_last_ok),
		    (double)sm_now_ms() / 1000);
	sm_info("compactor", "retention pass\tstatus=%s before_ms=%lld "
	    "tenant_overrides=%u ingesters=%u failed=%u skipped_unhealthy=%u "
	    "blocks_retired=%llu", status, (long long)p->before_ms,
	    p->overrides, p->ingesters, p->failed,
	    p->skipped, (unsigned long long)p->retired);
}

/* --- downsampling tiers ---------------------------------------------------- */

/* "1h", "1d", "1m", or milliseconds: the tier label of metrics. */
static const char *
tier_label(int64_t w, char *buf, size_t n)
{
	if (w == 0)
		snprintf(buf, n, "raw");      /* a merge job (compact.c) */
	else if (w % 86400000 == 0)
		snprintf(buf, n, "%lldd", (long long)(w / 86400000));
	else if (w % 3600000 == 0)
		snprintf(buf, n, "%lldh", (long long)(w / 3600000));
	else if (w % 60000 == 0)
		snprintf(buf, n, "%lldm", (long long)(w / 60000));
	else
		snprintf(buf, n, "%lldms", (long long)w);
	return (buf);
}

/* Wait ms unless the compactor stops first; false when it stops. */
static bool
cpt_sleep(struct compactor *c, int64_t ms)
{
	bool go;

	pthread_mutex_lock(&c->mu);
	if (!c->stopping)
		sm_cond_wait_ms(&c->cv, &c->mu, ms);
	go = !c->stopping;
	pthread_mutex_unlock(&c->mu);
	return (go);
}

static void
member_error(struct compactor *c, uint32_t k, const char *what,
    const char *msg)
{
	pthread_mutex_lock(&c->st_mu);
	snprintf(c->mem[k].error, sizeof(c->mem[k].error), "%s: %s", what,
	    msg);
	pthread_mutex_unlock(&c->st_mu);
}

/* Run one planned job on member k, with retries.  Returns its status. */
static const char *
tiers_job(struct compactor *c, struct sm_ring_snap *s, uint32_t k,
    const Smolder__V1__CompactJob *j, int64_t now_ms)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__CompactRequest cr = SMOLDER__V1__COMPACT_REQUEST__INIT;
	struct sm_err err;
	int64_t attempts = SM_MAX(c->cfg.retries, 1);

	cr.tenant = j->tenant;
	cr.tier_ms = j->tier_ms;
	cr.window_start_ms = j->window_start_ms;
	cr.now_ms = now_ms;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_COMPACT;
	req.compact = &cr;
	for (int64_t at = 1; at <= attempts; at++) {
		Smolder__V1__Response *resp;
		struct sm_arena *a = sm_arena_create(1 << 20);
		int rv;

		sm_err_clear(&err);
		rv = a == NULL ? sm_err_set(&err, SM_ENOMEM, "out of memory") :
		    sm_rpc_call_pb(s->m[k]->client, &req,
		    (int)c->cfg.timeout_ms, a, &resp, &err);
		if (rv == 0 && resp->result_case !=
		    SMOLDER__V1__RESPONSE__RESULT_COMPACT)
			rv = sm_err_set(&err, SM_EPROTO, "answer without a "
			    "compact result");
		if (rv == 0) {
			const Smolder__V1__CompactResponse *r = resp->compact;

			pthread_mutex_lock(&c->st_mu);
			c->mem[k].bytes_read += r->bytes_read;
			c->mem[k].bytes_written += r->bytes_written;
			pthread_mutex_unlock(&c->st_mu);
			sm_counter_add(sm_metric_child0(m_bytes_read),
			    r->bytes_read);
			const char *status = r->built ? "built" : "noop";

			sm_counter_add(sm_metric_child0(m_bytes_written),
			    r->bytes_written);
			sm_arena_destroy(a);
			return (status);
		}
		sm_arena_destroy(a);
		sm_warn("compactor", "downsampling job failed\tmember=%s "
		    "tenant=%s tier_ms=%lld window_start_ms=%lld attempt=%lld "
		    "err=\"%s\"", s->m[k]->url, j->tenant,
		    (long long)j->tier_ms, (long long)j->window_start_ms,
		    (long long)at, err.msg);
		member_error(c, k, "compact", err.msg);
		if (at < attempts && !cpt_sleep(c, 1000 * at))
			break;
	}
	return ("failed");
}

/* Member k's tier work: its plan, then every job in order. */
static void
tiers_member(struct compactor *c, struct sm_ring_snap *s, uint32_t k)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__CompactPlanRequest pr =
	    SMOLDER__V1__COMPACT_PLAN_REQUEST__INIT;
	const Smolder__V1__CompactPlanResponse *plan;
	Smolder__V1__Response *resp;
	struct sm_arena *a;
	struct sm_err err;
	int64_t now_ms = sm_now_ms();
	int rv;

	SM_ASSERT(k < c->nmem);        /* c->mem is s's members, by index */
	pr.widths_ms = c->cfg.tiers.w;
	pr.n_widths_ms = c->cfg.tiers.n;
	pr.now_ms = now_ms;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_COMPACT_PLAN;
	req.compact_plan = &pr;
	sm_err_clear(&err);
	if ((a = sm_arena_create(64u << 20)) == NULL)
		rv = sm_err_set(&err, SM_ENOMEM, "out of memory");
	else
		rv = sm_rpc_call_pb(s->m[k]->client, &req,
		    (int)c->cfg.timeout_ms, a, &resp, &err);
	if (rv == 0 && resp->result_case !=
	    SMOLDER__V1__RESPONSE__RESULT_COMPACT_PLAN)
		rv = sm_err_set(&err, SM_EPROTO, "answer without a plan");
	if (rv != 0) {
		sm_warn("compactor", "downsampling plan failed\tmember=%s "
		    "err=\"%s\"", s->m[k]->url, err.msg);
		member_error(c, k, "plan", err.msg);
		pthread_mutex_lock(&c->st_mu);
		c->mem[k].failed++;
		pthread_mutex_unlock(&c->st_mu);
		sm_arena_destroy(a);
		return;
	}
	plan = resp->compact_plan;
	pthread_mutex_lock(&c->st_mu);
	c->mem[k].planned = c->mem[k].pending = (uint32_t)plan->n_jobs;
	pthread_mutex_unlock(&c->st_mu);
	sm_gauge_add(sm_metric_child0(m_pending), (double)plan->n_jobs);
	for (size_t i = 0; i < plan->n_jobs && !atomic_load(&c->stopping);
	    i++) {
		const Smolder__V1__CompactJob *j = plan->jobs[i];
		const char *status;
		char tl[32];

		tier_label(j->tier_ms, tl, sizeof(tl));
		pthread_mutex_lock(&c->st_mu);
		snprintf(c->mem[k].running, sizeof(c->mem[k].running),
		    "tenant=%s tier=%s window_start_ms=%lld", j->tenant, tl,
		    (long long)j->window_start_ms);
		pthread_mutex_unlock(&c->st_mu);
		status = tiers_job(c, s, k, j, now_ms);
		sm_counter_inc(sm_metric_child(m_jobs, tl, status));
		sm_gauge_add(sm_metric_child0(m_pending), -1);
		pthread_mutex_lock(&c->st_mu);
		c->mem[k].pending--;
		if (strcmp(status, "built") == 0)
			c->mem[k].done++;
		else if (strcmp(status, "noop") == 0)
			c->mem[k].noop++;
		else
			c->mem[k].failed++;
		c->mem[k].running[0] = '\0';
		/* each planned job is pending or has one outcome */
		SM_ASSERT(c->mem[k].done + c->mem[k].noop + c->mem[k].failed +
		    c->mem[k].pending == c->mem[k].planned);
		pthread_mutex_unlock(&c->st_mu);
	}
	pthread_mutex_lock(&c->st_mu);
	sm_gauge_add(sm_metric_child0(m_pending), -(double)c->mem[k].pending);
	c->mem[k].pending = 0;
	c->mem[k].running[0] = '\0';
	c->mem[k].pass_ms = sm_now_ms();
	pthread_mutex_unlock(&c->st_mu);
	sm_arena_destroy(a);
}

struct tiers_run {
	struct compactor *c;
	struct sm_ring_snap *s;
	atomic_uint next;
};

static void *
tiers_worker(void *arg)
{
	struct tiers_run *tr = arg;
	unsigned k;

	while ((k = atomic_fetch_add(&tr->next, 1)) < tr->s->n &&
	    !atomic_load(&tr->c->stopping)) {
		if (tr->s->healthy[k])
			tiers_member(tr->c, tr->s, k);
	}
	return (NULL);
}

/*
 * One downsampling pass (c->pass_mu held): every healthy ingester plans
 * its tier work and runs it job by job, -compactor.concurrency ingesters
 * at once.  *built / *failed: jobs over all ingesters.
 */
static void
tiers_pass(struct compactor *c, struct cpt_pass *p)
{
	struct tiers_run tr = { .c = c };
	pthread_t thr[16];
	uint32_t nthr = 0, want;

	SM_ASSERT(pass_held(c));
	if (c->cfg.tiers.n == 0)
		return;
	tr.s = sm_ring_acquire(c->ring);
	pthread_mutex_lock(&c->st_mu);
	for (uint32_t k = 0; k < c->nmem; k++)
		sm_free(c->mem[k].id);
	sm_free(c->mem);
	c->nmem = 0;
	c->mem = sm_calloc(SM_MAX(tr.s->n, 1), sizeof(*c->mem));
	if (c->mem != NULL) {
		c->nmem = tr.s->n;
		for (uint32_t k = 0; k < tr.s->n; k++)
			c->mem[k].id = sm_strdup(tr.s->id[k] != NULL ?
			    tr.s->id[k] : tr.s->m[k]->url);
	}
	pthread_mutex_unlock(&c->st_mu);
	if (c->mem == NULL) {
		sm_ring_release(tr.s);
		return;
	}
	want = (uint32_t)SM_MIN(SM_MAX(c->cfg.concurrency, 1),
	    (int64_t)SM_ARRAY_LEN(thr));
	want = SM_MIN(want, SM_MAX(tr.s->n, 1));
	for (uint32_t i = 1; i < want; i++) {
		if (pthread_create(&thr[nthr], NULL, tiers_worker, &tr) != 0)
			break;
		nthr++;
	}
	tiers_worker(&tr);
	for (uint32_t i = 0; i < nthr; i++)
		pthread_join(thr[i], NULL);
	pthread_mutex_lock(&c->st_mu);
	for (uint32_t k = 0; k < c->nmem; k++) {
		p->jobs_built += c->mem[k].done;
		p->jobs_failed += c->mem[k].failed;
		p->jobs_noop += c->mem[k].noop;
	}
	c->tiers_pass_ms = sm_now_ms();
	c->tiers_passes++;
	pthread_mutex_unlock(&c->st_mu);
	sm_info("compactor", "downsampling pass\tingesters=%u built=%u "
	    "noop=%u failed=%u", tr.s->n, p->jobs_built, p->jobs_noop,
	    p->jobs_failed);
	sm_ring_release(tr.s);
}

/* --- the bucket ------------------------------------------------------------ */

/* A tenant's retention floor for the bucket pass: the same the
 * ingesters get (retention_pass). */
struct bucket_floor {
	struct compactor *c;
	int64_t now;
};

static int64_t
bucket_floor(void *arg, const char *tenant)
{
	struct bucket_floor *bf = arg;
	struct sm_limits def = { 0 }, lim;

	def.compactor_blocks_retention_period_ms = -1;
	sm_overrides_get(bf->c->cfg.overrides, tenant, &def, &lim);
	if (lim.compactor_blocks_retention_period_ms >= 0)
		return (lim.compactor_blocks_retention_period_ms > 0 ?
		    bf->now - lim.compactor_blocks_retention_period_ms : 0);
	return (bf->c->cfg.retention_ms > 0 ? bf->now -
	    bf->c->cfg.retention_ms : 0);
}

/* The replicas' blocks folded into one per tenant-hour (fold.h). */
static void
fold_pass(struct compactor *c, struct cpt_pass *p)
{
	struct bucket_floor bf = { c, sm_now_ms() };
	struct sm_err err;

	SM_ASSERT(pass_held(c));
	if (c->fold == NULL)
		return;
	p->fold = true;
	sm_err_clear(&err);
	p->fold_rv = cpt_fold_pass(c->fold, bf.now, c->cfg.fold_delay_ms,
	    &c->cfg.tiers, bucket_floor, &bf, &p->fst, &err);
	if (p->fold_rv != 0)
		sm_warn("compactor", "fold pass failed: %s", err.msg);
	sm_counter_add(sm_metric_child(m_fold, "folded"), p->fst.folded);
	sm_counter_add(sm_metric_child0(m_fold_tiers), p->fst.tiers);
	sm_counter_add(sm_metric_child(m_fold, "unresolved"),
	    p->fst.unresolved);
	sm_counter_add(sm_metric_child(m_fold, "failed"), p->fst.failed +
	    (p->fold_rv != 0));
	sm_counter_add(sm_metric_child0(m_bk_marked), p->fst.marked);
	sm_counter_add(sm_metric_child0(m_fold_read), p->fst.bytes_read);
	sm_counter_add(sm_metric_child0(m_fold_written),
	    p->fst.bytes_written);
	if (p->fst.hours > 0 || p->fst.marked > 0 || p->fst.tiers > 0)
		sm_info("compactor", "fold pass	hours=%u folded=%u "
		    "unresolved=%u failed=%u marked=%u read=%llu "
		    "written=%llu", p->fst.hours, p->fst.folded,
		    p->fst.unresolved, p->fst.failed, p->fst.marked,
		    (unsigned long long)p->fst.bytes_read,
		    (unsigned long long)p->fst.bytes_written);
}

static void
bucket_pass(struct compactor *c, struct cpt_pass *p)
{
	struct bucket_floor bf = { c, sm_now_ms() };
	struct sm_err err;

	SM_ASSERT(pass_held(c));
	if (c->cfg.bucket == NULL)
		return;
	p->bucket = true;
	sm_err_clear(&err);
	p->bucket_rv = cpt_bucket_pass(c->cfg.bucket, bf.now,
	    c->cfg.deletion_delay_ms, bucket_floor, &bf, &p->bst, &err);
	if (p->bucket_rv != 0)
		sm_warn("compactor", "bucket pass failed: %s", err.msg);
	sm_gauge_set(sm_metric_child0(m_bk_blocks), p->bst.blocks);
	sm_counter_add(sm_metric_child0(m_bk_marked), p->bst.marked);
	sm_counter_add(sm_metric_child0(m_bk_deleted), p->bst.deleted);
	sm_counter_add(sm_metric_child0(m_bk_partial),
	    p->bst.partial_deleted);
	sm_counter_add(sm_metric_child0(m_bk_fail), p->bst.failed +
	    (p->bucket_rv != 0));
	sm_info("compactor", "bucket pass\ttenants=%u blocks=%u marked=%u "
	    "deleted=%u partial_deleted=%u failed=%u", p->bst.tenants,
	    p->bst.blocks, p->bst.marked, p->bst.deleted,
	    p->bst.partial_deleted, p->bst.failed + (p->bucket_rv != 0));
}

/* A pass: retention, then downsampling, then the bucket's folds, then
 * its marks, deletions and indexes. */
static void
cpt_pass(struct compactor *c, struct cpt_pass *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&c->pass_mu);
	if (c->cfg.lock != NULL) {
		bool held = sm_etcd_lock_held(c->cfg.lock, p->holder,
		    sizeof(p->holder));

		sm_gauge_set(sm_metric_child0(m_lock_held), held ? 1 : 0);
		if (!held) {
			p->locked_out = true;
			pthread_mutex_unlock(&c->pass_mu);
			return;
		}
	}
	retention_pass(c, p);
	tiers_pass(c, p);
	fold_pass(c, p);
	bucket_pass(c, p);
	pthread_mutex_unlock(&c->pass_mu);
}

/* GET /compactor: the tiers and every ingester's progress, as JSON. */
static void
status_handler(struct sm_http_req *r, void *arg)
{
	struct compactor *c = arg;
	struct sm_buf out = SM_BUF_INIT;
	char tl[32];

	sm_buf_printf(&out, "{\"retention_ms\":%lld,\"interval_ms\":%lld,"
	    "\"tiers\":[", (long long)c->cfg.retention_ms,
	    (long long)c->cfg.interval_ms);
	for (uint32_t i = 0; i < c->cfg.tiers.n; i++)
		sm_buf_printf(&out, "%s\"%s\"", i > 0 ? "," : "",
		    tier_label(c->cfg.tiers.w[i], tl, sizeof(tl)));
	pthread_mutex_lock(&c->st_mu);
	sm_buf_printf(&out, "],\"passes\":%u,\"last_pass_ms\":%lld,"
	    "\"ingesters\":[", c->tiers_passes, (long long)c->tiers_pass_ms);
	for (uint32_t k = 0; k < c->nmem; k++) {
		const struct cpt_member *m = &c->mem[k];

		sm_buf_printf(&out, "%s{\"id\":", k > 0 ? "," : "");
		sm_buf_json_str(&out, m->id, strlen(m->id));
		sm_buf_printf(&out, ",\"planned\":%u,\"built\":%u,"
		    "\"noop\":%u,\"failed\":%u,\"pending\":%u,"
		    "\"bytes_read\":%llu,\"bytes_written\":%llu,"
		    "\"pass_ms\":%lld,\"running\":", m->planned, m->done,
		    m->noop, m->failed, m->pending,
		    (unsigned long long)m->bytes_read,
		    (unsigned long long)m->bytes_written, (long long)m->pass_ms);
		sm_buf_json_str(&out, m->running, strlen(m->running));
		sm_buf_puts(&out, ",\"error\":");
		sm_buf_json_str(&out, m->error, strlen(m->error));
		sm_buf_putc(&out, '}');
	}
	pthread_mutex_unlock(&c->st_mu);
	sm_buf_puts(&out, "]}\n");
	if (sm_buf_error(&out) != 0)
		sm_http_reply_error(r, 500, "internal", "out of memory");
	else
		sm_http_reply_buf(r, 200, "application/json", &out);
	sm_buf_fini(&out);
}

static void
run_handler(struct sm_http_req *r, void *arg)
{
	struct compactor *c = arg;
	struct cpt_pass p;
	struct sm_buf out = SM_BUF_INIT;

	cpt_pass(c, &p);
	if (p.locked_out) {
		sm_http_reply_error(r, 503, "unavailable", "another compactor "
		    "holds the compactor lock in etcd (%s): it runs the passes",
		    p.holder[0] != '\0' ? p.holder : "holder not known yet");
		return;
	}
	if (!p.enabled)
		sm_buf_puts(&out, "{\"retention\":\"disabled\"");
	else
		sm_buf_printf(&out, "{\"before_ms\":%lld,"
		    "\"tenant_overrides\":%u,\"ingesters\":%u,"
		    "\"failed\":%u,\"skipped_unhealthy\":%u,"
		    "\"blocks_retired\":%llu", (long long)p.before_ms,
		    p.overrides, p.ingesters, p.failed, p.skipped,
		    (unsigned long long)p.retired);
	sm_buf_printf(&out, ",\"tier_jobs_built\":%u,\"tier_jobs_noop\":%u,"
	    "\"tier_jobs_failed\":%u", p.jobs_built, p.jobs_noop,
	    p.jobs_failed);
	if (p.bucket)
		sm_buf_printf(&out, ",\"bucket\":{\"tenants\":%u,"
		    "\"blocks\":%u,\"marked\":%u,\"deleted\":%u,"
		    "\"partial_deleted\":%u,\"failed\":%u}", p.bst.tenants,
		    p.bst.blocks, p.bst.marked, p.bst.deleted,
		    p.bst.partial_deleted, p.bst.failed + (p.bucket_rv != 0));
	if (p.fold)
		sm_buf_printf(&out, ",\"fold\":{\"hours\":%u,\"folded\":%u,"
		    "\"tiers\":%u,\"unresolved\":%u,\"failed\":%u,"
		    "\"marked\":%u,\"bytes_read\":%llu,\"bytes_written\":%llu}",
		    p.fst.hours, p.fst.folded, p.fst.tiers, p.fst.unresolved,
		    p.fst.failed + (p.fold_rv != 0), p.fst.marked,
		    (unsigned long long)p.fst.bytes_read,
		    (unsigned long long)p.fst.bytes_written);
	sm_buf_puts(&out, "}\n");
	if (sm_buf_error(&out) != 0)
		sm_http_reply_error(r, 500, "internal", "out of memory");
	else
		sm_http_reply_buf(r, p.failed == 0 && p.jobs_failed == 0 &&
		    p.bucket_rv == 0 && p.bst.failed == 0 &&
		    p.fold_rv == 0 && p.fst.failed == 0 ? 200 : 503,
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
	    cfg->deletion_delay_ms < 0 ||
	    cfg->timeout_ms <= 0 || cfg->concurrency < 1 ||
	    cfg->concurrency > 16 || cfg->retries < 1)
		return (sm_err_set(err, SM_EINVAL, "compactor: retention must "
		    "be >= 0, the interval >= 1s, the deletion delay >= 0, "
		    "the timeout > 0, the "
		    "concurrency 1..16 and the job retries >= 1"));
	sm_metrics_register_once(&cpt_metric_set);
	if ((c = sm_calloc(1, sizeof(*c))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	c->cfg = *cfg;
	c->http = http;
	c->ring = ring;
	pthread_mutex_init(&c->pass_mu, NULL);
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->st_mu, NULL);
	sm_cond_init(&c->cv);
	if (cfg->bucket != NULL && cfg->gateways) {
		char dir[4096];

		snprintf(dir, sizeof(dir), "%s/compactor", cfg->data_dir);
		if ((rv = cpt_fold_create(cfg->bucket, dir, &c->fold,
		    err)) != 0) {
			cpt_destroy(c);
			return (rv);
		}
	}
	if (http != NULL && (rv = sm_http_route(http, "POST", "/compactor/run",
	    run_handler, c, 0)) != 0) {
		cpt_destroy(c);
		return (sm_err_set(err, rv, "compactor: route: %s",
		    sm_strerror(rv)));
	}
	if (http != NULL && (rv = sm_http_route(http, "GET", "/compactor",
	    status_handler, c, 0)) != 0) {
		cpt_destroy(c);
		return (sm_err_set(err, rv, "compactor: route: %s",
		    sm_strerror(rv)));
	}
	*out = c;
	return (0);
}

void
cpt_set_lock(struct compactor *c, struct sm_etcd_lock *lock)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&c->pass_mu);
	c->cfg.lock = lock;
	pthread_mutex_unlock(&c->pass_mu);
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
	if (c->cfg.tiers.n > 0)
		sm_info("compactor", "downsampling enabled\ttiers=%u "
		    "interval_ms=%lld concurrency=%lld", c->cfg.tiers.n,
		    (long long)c->cfg.interval_ms,
		    (long long)c->cfg.concurrency);
	return (0);
}

void
cpt_stop(struct compactor *c)
{
	if (c == NULL || !c->started)
		return;
	pthread_mutex_lock(&c->mu);
	atomic_store(&c->stopping, true);
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
	pthread_mutex_destroy(&c->st_mu);
	pthread_cond_destroy(&c->cv);
	for (uint32_t k = 0; k < c->nmem; k++)
		sm_free(c->mem[k].id);
	sm_free(c->mem);
	cpt_fold_destroy(c->fold);
	sm_free(c);
}
