/*
 * fanout.c -- ask the ring's healthy ingesters, concurrently (nng aio via
 * sm_rpc_multi: no thread per call), and collect their answers; see
 * qry_int.h for the error budget and retries.
 */
#include "qry_int.h"

#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "common/metrics.h"

static struct sm_metric *m_stragglers, *m_incomplete, *m_skipped;
static struct sm_metric *m_confined, *m_src_skipped, *m_changed;

static const struct sm_metric_def fan_metric_defs[] = {
	{ &m_incomplete, SM_METRIC_COUNTER, "smolder_querier_incomplete_total",
	    "Queries refused with 503 because replicas that left the ring or "
	    "lost their disk held data of the range that no answering member "
	    "or bucket source holds (querier/complete.c).", NULL, NULL, 0 },
	{ &m_stragglers, SM_METRIC_COUNTER,
	    "smolder_querier_straggler_rounds_total", "Fan-out rounds that "
	    "answered without an ingester still silent after "
	    "-querier.straggler-wait.", NULL, NULL, 0 },
	{ &m_skipped, SM_METRIC_COUNTER,
	    "smolder_querier_ingesters_skipped_total", "Ingesters not asked "
	    "by a query over a range older than "
	    "-querier.query-ingesters-within because they hold no data from "
	    "before its end.", NULL, NULL, 0 },
	{ &m_confined, SM_METRIC_COUNTER,
	    "smolder_querier_ingesters_confined_total", "Ingesters not asked "
	    "by a shuffle-sharded tenant's query because they hold nothing of "
	    "the tenant (-querier.shuffle-sharding-ingesters-enabled).", NULL,
	    NULL, 0 },
	{ &m_src_skipped, SM_METRIC_COUNTER,
	    "smolder_querier_store_sources_skipped_total", "Store-gateway "
	    "sources (a shipping ingester's incarnation, or the compactor's "
	    "folds) not asked by a query because none of their blocks "
	    "overlaps its range.", NULL, NULL, 0 },
	{ &m_changed, SM_METRIC_COUNTER,
	    "smolder_querier_plan_changed_total", "Data rounds started over "
	    "because what the plan counted on changed before the read: a "
	    "bucket answered by a combination of replicas gained an upload "
	    "on one of them, or a target took blocks out of service "
	    "meanwhile (local retention, a compactor fold; querier/plan.c).",
	    NULL, NULL, 0 },
};

static struct sm_metric_set fan_metric_set = SM_METRIC_SET(fan_metric_defs);

/* Memory one ingester's answer may take once decoded. */
#define QRY_CALL_BUDGET (1024u << 20)

void
qry_fan_init(struct qry_fan *f)
{
	memset(f, 0, sizeof(*f));
}

static void
calls_free(struct qry_fan *f)
{
	if (f->calls == NULL)
		return;
	for (uint32_t i = 0; i < f->n * f->nlanes; i++)
		sm_arena_destroy(f->calls[i].arena);
	sm_free(f->calls);
	f->calls = NULL;
	f->nlanes = 0;
}

void
qry_fan_close(struct qry_fan *f, bool all)
{
	calls_free(f);
	sm_free(f->target);
	sm_free(f->lost);
	f->lost = NULL;
	sm_free(f->bystander);
	f->bystander = NULL;
	sm_free(f->gaps);
	f->gaps = NULL;
	f->ngaps = 0;
	f->target = NULL;
	sm_free(f->src);
	f->src = NULL;
	f->n = f->ni = 0;
	if (all) {
		sm_free(f->excluded);
		f->excluded = NULL;
		sm_free(f->gexcluded);
		f->gexcluded = NULL;
		f->gexcluded_n = 0;
	}
	if (f->snap != NULL)
		sm_ring_release(f->snap);
	f->snap = NULL;
	if (f->gsnap != NULL)
		sm_ring_release(f->gsnap);
	f->gsnap = NULL;
}

/* The gateway's name for logs and errors. */
static const char *
gw_name(const struct sm_ring_snap *g, uint32_t m)
{
	return (g->id[m] != NULL ? g->id[m] : g->m[m]->url);
}

static int pack_req(const Smolder__V1__Request *r, const char *source,
    int64_t deadline, struct sm_buf *b);

/* An unloaded block one answering owner reported, and how many did. */
struct fan_bad {
	char key[256], error[256], source[33];
	int64_t min_t, max_t;
	uint32_t owners;
	uint64_t gws;               /* which gateways (index < 64) said so */
};

/* Count the blocks owner m could not load over [start, end] in *bad. */
static int
fan_bad_note(struct fan_bad **bad, uint32_t *nbad,
    const Smolder__V1__SourcesResponse *sr, uint32_t m, int64_t start,
    int64_t end)
{
	for (size_t k = 0; k < sr->n_unloaded; k++) {
		const Smolder__V1__Unloaded *u = sr->unloaded[k];
		uint32_t j;

		if (u->max_t < start || u->min_t > end)
			continue;
		for (j = 0; j < *nbad && strcmp((*bad)[j].key, u->key) != 0;
		    j++)
			;
		if (j == *nbad) {
			struct fan_bad *nb = sm_realloc(*bad, (*nbad + 1) *
			    sizeof(*nb));

			if (nb == NULL)
				return (SM_ENOMEM);
			*bad = nb;
			memset(&nb[j], 0, sizeof(nb[j]));
			snprintf(nb[j].key, sizeof(nb[j].key), "%s", u->key);
			snprintf(nb[j].error, sizeof(nb[j].error), "%s",
			    u->error);
			snprintf(nb[j].source, sizeof(nb[j].source), "%s",
			    u->source);
			nb[j].min_t = u->min_t;
			nb[j].max_t = u->max_t;
			(*nbad)++;
		}
		(*bad)[j].owners++;
		if (m < 64)
			(*bad)[j].gws |= (uint64_t)1 << m;
	}
	return (0);
}

/*
 * Add the sources gateway m lists as targets of the fan, but those whose
 * blocks all lie outside [start, end] (Source.min_t and max_t span every
 * block the gateway serves of it): they would answer nothing, so a query
 * of the recent window asks only the sources shipped in it, and the
 * ingesters (plan.c, "Local first").  *skipped counts them.
 */
static int
fan_src_take(struct qry_fan *f, uint32_t *cap, uint32_t m,
    const Smolder__V1__SourcesResponse *sr, int64_t start, int64_t end,
    uint32_t *skipped)
{
	for (size_t k = 0; k < sr->n_sources; k++) {
		const Smolder__V1__Source *so = sr->sources[k];
		struct qry_fan_src *fs;

		if (so->max_t < start || so->min_t > end) {
			(*skipped)++;
			continue;
		}
		if (SM_GROW(f->src, *cap, f->n - f->ni + 1, 8) != 0)
			return (SM_ENOMEM);
		fs = &f->src[f->n - f->ni];
		fs->gw = m;
		snprintf(fs->id, sizeof(fs->id), "%s", so->id);
		fs->min_t = so->min_t;
		fs->max_t = so->max_t;
		snprintf(fs->instance, sizeof(fs->instance), "%s",
		    so->instance);
		f->n++;
	}
	return (0);
}

/*
 * A block over the range that an owner could not load: that owner's copy
 * of its source lacks it, so the source is read from the owners that
 * loaded it; when every answering owner failed on it (the object is
 * damaged), the answer would be short: 503 naming it.
 */
static int
fan_bad_drop(struct qry_fan *f, const struct sm_ring_snap *g,
    const struct fan_bad *bad, uint32_t nbad, uint32_t owners_answered,
    const char *tenant, struct sm_err *err)
{
	for (uint32_t j = 0; j < nbad; j++) {
		char a0[32], a1[32];

		if (bad[j].owners >= owners_answered || g->n > 64) {
			sm_time_utc(bad[j].min_t, a0, sizeof(a0));
			sm_time_utc(bad[j].max_t, a1, sizeof(a1));
			return (sm_err_set(err, SM_EUNAVAIL, "the answer would "
			    "be incomplete: no store-gateway could load block "
			    "%s (%s to %s) of tenant %s: %s", bad[j].key, a0,
			    a1, tenant, bad[j].error));
		}
		for (uint32_t k = 0; k < f->n - f->ni;) {
			struct qry_fan_src *fs = &f->src[k];

			if (fs->gw < 64 && (bad[j].gws >> fs->gw & 1) &&
			    strcmp(fs->id, bad[j].source) == 0) {
				memmove(fs, fs + 1, (f->n - f->ni - k - 1) *
				    sizeof(*fs));
				f->n--;
			} else {
				k++;
			}
		}
	}
	return (0);
}

/*
 * The Sources round (qry_int.h): every healthy, not excluded gateway is
 * asked -- not only the owners this querier computes, so an owner is
 * found while views of the ring differ (a ring being changed).  Each
 * (gateway, source) a vouching gateway lists becomes a target; what a
 * gateway that does not vouch lists is not read (below).  SM_EUNAVAIL
 * when no owner of the tenant answers and vouches
 * (SourcesResponse.vouch: an owner in its own ring too, that has loaded
 * the tenant; ingester/gateway.h): history cannot be vouched for.
 */
static int
fan_sources(struct querier *q, struct qry_fan *f, const char *tenant,
    int64_t start, int64_t end, struct sm_err *err)
{
	struct fan_bad *bad = NULL;
	uint32_t nbad = 0;
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__SourcesRequest sr = SMOLDER__V1__SOURCES_REQUEST__INIT;
	struct sm_ring_snap *g;
	struct sm_rpc_multi *mc = NULL;
	struct sm_buf *bufs = NULL;
	struct sm_err last;
	uint8_t *owner = NULL;
	int64_t deadline = sm_now_ms() + q->cfg.timeout_ms;
	uint32_t own[128], no, asked = 0, owners_answered = 0, cap = 0;
	uint32_t skipped = 0;
	int rv = 0;

	f->gsnap = g = sm_ring_acquire(q->cfg.gw_ring);
	if (f->gexcluded == NULL || f->gexcluded_n != g->n) {
		sm_free(f->gexcluded);
		if ((f->gexcluded = sm_calloc(SM_MAX(g->n, 1), 1)) == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		f->gexcluded_n = g->n;
	}
	if ((owner = sm_calloc(SM_MAX(g->n, 1), 1)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	no = sm_ring_owners_settling(g, sm_ring_key(tenant, NULL, 0), own);
	for (uint32_t i = 0; i < no; i++)
		owner[own[i]] = 1;
	sm_err_clear(&last);
	snprintf(last.msg, sizeof(last.msg), "no owner is healthy");
	sr.tenant = (char *)tenant;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_SOURCES;
	req.sources = &sr;
	if ((bufs = sm_calloc(SM_MAX(g->n, 1), sizeof(*bufs))) == NULL ||
	    sm_rpc_multi_create(SM_MAX(g->n, 1), "sources", &mc) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t m = 0; m < g->n; m++) {
		if (!g->healthy[m] || f->gexcluded[m])
			continue;
		if (pack_req(&req, NULL, sm_ring_member_deadline(g->m[m],
		    deadline), &bufs[m]) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		sm_rpc_multi_start(mc, m, g->m[m]->client, bufs[m].b,
		    bufs[m].len, (int)q->cfg.timeout_ms, SM_RPC_FAILFAST);
		asked++;
	}
	if (asked > 0)
		sm_rpc_multi_wait(mc);
	for (uint32_t m = 0; m < g->n && asked > 0; m++) {
		struct sm_arena *a;
		Smolder__V1__Response *resp;
		struct sm_err e;

		if (!g->healthy[m] || f->gexcluded[m])
			continue;
		if ((a = sm_arena_create(QRY_CALL_BUDGET)) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		sm_err_clear(&e);
		if (sm_rpc_multi_response(mc, m, a, &resp, &e) != 0 ||
		    resp->result_case != SMOLDER__V1__RESPONSE__RESULT_SOURCES) {
			if (e.msg[0] == '\0')
				snprintf(e.msg, sizeof(e.msg), "no sources in "
				    "the answer");
			sm_warn("querier", "store-gateway sources call failed\t"
			    "gateway=%s err=\"%s\"", gw_name(g, m), e.msg);
			if (owner[m])
				sm_err_set(&last, SM_EUNAVAIL, "%s: %.400s",
				    gw_name(g, m), e.msg);
			sm_arena_destroy(a);
			continue;
		}
		/*
		 * A gateway that does not vouch for the tenant -- not an
		 * owner in its own ring (our view or its is behind a ring
		 * change), or one that has not loaded it yet -- is not
		 * counted and its sources are not read: it may be dropping
		 * the tenant's blocks (no longer owned, past the grace)
		 * between this call and the data round, and a source read
		 * from it could then be silently short.  An owner that
		 * vouches holds every block of every source of the tenant
		 * (gateway.h).
		 */
		if (resp->sources->vouch ==
		    SMOLDER__V1__SOURCES_RESPONSE__VOUCH__VOUCH_NONE) {
			if (owner[m])
				sm_err_set(&last, SM_EUNAVAIL, "%s owns it in "
				    "this querier's ring but has not loaded it",
				    gw_name(g, m));
			sm_arena_destroy(a);
			continue;
		}
		owners_answered += owner[m];
		if ((owner[m] && fan_bad_note(&bad, &nbad, resp->sources, m,
		    start, end) != 0) ||
		    fan_src_take(f, &cap, m, resp->sources, start, end,
		    &skipped) != 0) {
			sm_arena_destroy(a);
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		sm_arena_destroy(a);
	}
	if (skipped > 0) {
		sm_metrics_register_once(&fan_metric_set);
		sm_counter_add(sm_metric_child0(m_src_skipped), skipped);
	}
	if (owners_answered == 0)
		rv = sm_err_set(err, SM_EUNAVAIL, "history unavailable: no "
		    "store-gateway owning tenant %s answered (%u owners; %s)",
		    tenant, no, last.msg);
	if (rv == 0)
		rv = fan_bad_drop(f, g, bad, nbad, owners_answered, tenant,
		    err);
out:
	sm_free(bad);
	sm_rpc_multi_destroy(mc);
	for (uint32_t m = 0; bufs != NULL && m < g->n; m++)
		sm_buf_fini(&bufs[m]);
	sm_free(bufs);
	sm_free(owner);
	return (rv);
}

/*
 * The gaps of an answer over [start, end] (complete.c), from the members'
 * witness records as the ring last heard them.
 */
static int
fan_gaps(struct qry_fan *f, int64_t start, int64_t end, struct sm_err *err)
{
	const struct sm_ring_snap *s = f->snap;
	Smolder__V1__Witness **w;
	struct qry_wit_in *wi;
	int rv = 0;

	w = sm_calloc(SM_MAX(s->n, 1), sizeof(*w));
	wi = sm_calloc(SM_MAX(s->n, 1), sizeof(*wi));
	if (w == NULL || wi == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < s->n; i++) {
		uint8_t *b;
		size_t n;

		wi[i].inc = s->inc[i][0] != '\0' ? s->inc[i] : NULL;
		if (s->m[i] == NULL)
			continue;
		if (sm_ring_member_witness(s->m[i], &b, &n) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		if (b != NULL) {
			w[i] = smolder__v1__witness__unpack(NULL, n, b);
			sm_free(b);
			wi[i].w = w[i];
		}
	}
	if (qry_gaps_find(s, wi, f->src, f->n - f->ni, start, end, &f->gaps,
	    &f->ngaps) != 0)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	for (uint32_t i = 0; w != NULL && i < s->n; i++)
		if (w[i] != NULL)
			smolder__v1__witness__free_unpacked(w[i], NULL);
	sm_free(w);
	sm_free(wi);
	return (rv);
}

/*
 * May a query leave out the members that surely hold nothing of its
 * tenant (common/ring.h, "Confined reads")?  Once shard sizes have not
 * changed in this process for the settle time: until then a distributor
 * may still see the tenant unsharded and not hold its new writes.
 */
static bool
fan_confining(struct querier *q, int64_t now_ns)
{
	int64_t since = SM_MAX(q->created_ns,
	    sm_overrides_changed_ns(q->cfg.overrides));

	return (q->cfg.confine && now_ns - since >=
	    q->cfg.confine_settle_ms * 1000000);
}

/*
 * The tenant's bystanders (qry_int.h, "Shuffle sharding"), when it has a
 * shard: QRY_BYSTANDER for a member outside the shard whose tenant list
 * lacks the tenant, QRY_CONFINED for a member that surely holds nothing
 * of it (fan_confining) -- not asked while healthy.  0 or SM_ENOMEM.
 */
static int
fan_bystanders(struct querier *q, struct qry_fan *f, const char *tenant)
{
	const struct sm_ring_snap *s = f->snap;
	struct sm_limits lim;
	uint8_t *by;
	uint64_t th;
	uint32_t nb = 0;
	int64_t now_ns = sm_mono_ns();
	bool whole, confining;

	qry_tenant_limits(q, tenant, &lim);
	if (lim.ingestion_tenant_shard_size <= 0 || s->n == 0)
		return (0);
	if ((by = sm_calloc(s->n, 1)) == NULL)
		return (SM_ENOMEM);
	whole = sm_ring_shard(s, tenant, (uint32_t)SM_MIN(
	    lim.ingestion_tenant_shard_size, UINT32_MAX), by) == 0;
	confining = fan_confining(q, now_ns);
	th = sm_ring_tenant_hash(tenant);
	for (uint32_t i = 0; i < s->n; i++) {
		uint8_t v = 0;

		if (!whole && !by[i] && sm_ring_member_tenant(s->m[i], th) == 0)
			v = QRY_BYSTANDER;
		if (confining && sm_ring_member_lacks(s->m[i], th, now_ns))
			v = QRY_CONFINED;
		by[i] = v;
		nb += v != 0;
	}
	if (nb == 0) {
		sm_free(by);
		return (0);
	}
	f->bystander = by;
	return (0);
}

int
qry_fan_open(struct querier *q, struct qry_fan *f, const char *tenant,
    int64_t start, int64_t end, struct sm_err *err)
{
	struct sm_ring_snap *s;
	uint8_t *ex = f->excluded;
	uint32_t keep = UINT32_MAX, skipped = 0, confined = 0;
	bool skip_old;
	int rv;

	f->excluded = NULL;
	qry_fan_close(f, false);
	f->excluded = ex;
	f->snap = s = sm_ring_acquire(q->ring);
	if (f->excluded == NULL && (f->excluded = sm_calloc(SM_MAX(s->n, 1),
	    1)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (tenant != NULL && (rv = fan_bystanders(q, f, tenant)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	if ((f->target = sm_malloc((size_t)SM_MAX(s->n, 1) *
	    sizeof(*f->target))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((f->lost = sm_calloc(SM_MAX(s->n, 1), 1)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	/* A range that ended long enough ago is asked of the ingesters that
	 * hold data from before its end only: the others would answer
	 * nothing, and nothing can arrive there any more (flag
	 * -querier.query-ingesters-within; HealthResponse.data_min_ms).
	 * One healthy ingester is always asked, so a fan has one. */
	/* Only while no upload can arrive at or before `end`: uploads older
	 * than -validation.reject-older-than are refused, and a member's
	 * data_min is at most a heartbeat timeout old, so every upload it
	 * took since it reported is newer than now - (reject-older-than +
	 * heartbeat timeout).  With reject-older-than 0 (any age accepted)
	 * or above the window, every ingester is asked. */
	skip_old = q->cfg.ingesters_within_ms > 0 && q->cfg.reject_older_ms >
	    0 && q->cfg.reject_older_ms + q->cfg.heartbeat_timeout_ms <=
	    q->cfg.ingesters_within_ms && end != INT64_MAX &&
	    end < sm_now_ms() - q->cfg.ingesters_within_ms;
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->healthy[i] && !f->excluded[i]) {
			if ((skip_old && !sm_ring_member_holds(s->m[i],
			    end + 1)) || (f->bystander != NULL &&
			    f->bystander[i] == QRY_CONFINED)) {
				if (keep == UINT32_MAX)
					keep = i;
				if (f->bystander != NULL && f->bystander[i] ==
				    QRY_CONFINED)
					confined++;
				else
					skipped++;
				continue;
			}
			f->target[f->n++] = i;
		} else if (s->id[i] != NULL && s->state[i] !=
		    SM_MEMBER_CONFLICT && (f->bystander == NULL ||
		    !f->bystander[i] || f->excluded[i]))
			f->lost[i] = 1;   /* a member that owns tokens is missing */
	}
	if (f->n == 0 && keep != UINT32_MAX) {
		f->target[f->n++] = keep;
		if (f->bystander != NULL && f->bystander[keep] == QRY_CONFINED)
			confined--;
		else
			skipped--;
	}
	if (skipped > 0 || confined > 0) {
		sm_metrics_register_once(&fan_metric_set);
		sm_counter_add(sm_metric_child0(m_skipped), skipped);
		sm_counter_add(sm_metric_child0(m_confined), confined);
	}
	/* members, or zones of a zone-aware ring (common/ring.h) */
	f->down = sm_ring_read_units(s, f->lost);
	f->ni = f->n;
	if (f->n == 0)
		return (sm_err_set(err, SM_EUNAVAIL, "no healthy ingester to "
		    "query (%u members)", s->n));
	if (f->down > sm_ring_max_read_errors(s))
		return (sm_err_set(err, SM_EUNAVAIL, "too many ingesters "
		    "unavailable: %u of %u, at most %u may be with replication "
		    "factor %u", f->down, s->n, sm_ring_max_read_errors(s),
		    s->rf));
	if (q->cfg.gw_ring != NULL && tenant != NULL &&
	    (rv = fan_sources(q, f, tenant, start, end, err)) != 0)
		return (rv);
	if (s->rf > 1 && (rv = fan_gaps(f, start, end, err)) != 0)
		return (rv);
	if (f->ngaps > 0) {
		char why[1024];

		f->down = qry_gaps_units(s, f->lost, f->gaps, f->ngaps, why,
		    sizeof(why));
		if (f->down > sm_ring_max_read_errors(s)) {
			sm_metrics_register_once(&fan_metric_set);
			sm_counter_inc(sm_metric_child0(m_incomplete));
		}
		if (f->down > sm_ring_max_read_errors(s))
			return (sm_err_set(err, SM_EUNAVAIL, "the answer would "
			    "be incomplete: %u replicas missing where at most "
			    "%u may be with replication factor %u: %s",
			    f->down, sm_ring_max_read_errors(s), s->rf, why));
	}
	return (0);
}

/*
 * Hedged waiting (a frozen replica must not stall reads).  A round
 * waits for every call, except that once the targets still silent, plus
 * those that failed, plus the members already down, fit in the ring's
 * read-failure budget (sm_ring_max_read_errors: any RF - budget replicas
 * of a series hold every acknowledged write), the silent ones get a grace
 * period -- -querier.straggler-wait, or as long as the round has taken so
 * far if that is longer -- and then count as failed (SM_ETIMEDOUT).  In
 * sm_quorum's terms (rpc.h): each target is a voter (its lanes' calls), one
 * group of every target asked, which needs all but the budget's slack; a
 * round that can no longer meet it ends at once.  The callers treat the
 * silent as any lost member: the plan's stats round gives them no picks, a
 * data round that needed one retries without it (SM_EAGAIN), a set union
 * (labels) simply lacks their copy.  Their calls finish in the background.
 */
/* Errors about the request itself rather than the member answering. */
static bool
request_error(int rv)
{
	return (rv == SM_EINVAL || rv == SM_EMALFORMED || rv == SM_ELIMIT ||
	    rv == SM_ETOOBIG || rv == SM_EUNSUPPORTED || rv == SM_EAUTH);
}

/* Pack `r` with the deadline, and the source when one is given. */
static int
pack_req(const Smolder__V1__Request *r, const char *source,
    int64_t deadline, struct sm_buf *b)
{
	Smolder__V1__Request rd = *r;
	Smolder__V1__Select *sel = sm_rpc_req_select(&rd);
	char *keep = NULL;
	size_t sz;

	rd.deadline_unix_ms = deadline;
	/* The caller's request, borrowed for the packing only: nothing
	 * else reads it meanwhile (rounds pack before they send). */
	if (source != NULL && sel != NULL) {
		keep = sel->source;
		sel->source = (char *)source;
	}
	sz = protobuf_c_message_get_packed_size(&rd.base);
	if (sm_buf_reserve(b, sz) == 0) {
		protobuf_c_message_pack(&rd.base, (uint8_t *)b->b);
		b->len = sz;
	}
	if (source != NULL && sel != NULL)
		sel->source = keep;
	return (b->len == sz ? 0 : SM_ENOMEM);
}

/*
 * Pack and start every call of the round that has a request (nc calls,
 * target i % f->n); *nasked counts the targets asked.  The member stops
 * when this call's timeout has passed: each call carries the deadline in
 * the member's own clock (common/ring.h, sm_ring_member_deadline), so a
 * skewed clock fails nothing.
 */
static int
round_start(struct querier *q, struct qry_fan *f,
    Smolder__V1__Request *const *reqs, uint32_t nreqs, uint32_t nc,
    int64_t deadline, struct sm_rpc_multi *mc, struct sm_buf *cbufs,
    uint8_t *asked, uint32_t *nasked)
{
	for (uint32_t i = 0; i < nc; i++) {
		struct qry_call *c = &f->calls[i];
		const Smolder__V1__Request *r = reqs[nreqs == 1 ? 0 : i];
		const struct sm_buf *b = &cbufs[i];
		uint32_t t = i % f->n;
		struct sm_ring_member *m;

		c->rv = SM_RPC_PENDING;
		if (t < f->ni) {
			c->member = f->target[t];
			m = f->snap->m[c->member];
		} else {
			c->member = f->src[t - f->ni].gw;
			m = f->gsnap->m[c->member];
		}
		if (r == NULL)
			continue;
		if (pack_req(r, t >= f->ni ? f->src[t - f->ni].id : NULL,
		    sm_ring_member_deadline(m, deadline), &cbufs[i]) != 0)
			return (SM_ENOMEM);
		sm_rpc_multi_start(mc, i, m->client, b->b, b->len,
		    (int)q->cfg.timeout_ms, SM_RPC_FAILFAST);
		*nasked += !asked[t];
		asked[t] = 1;
	}
	return (0);
}

/* Wait for the round's calls, hedging the stragglers ("Hedged waiting"). */
static void
round_wait(struct querier *q, const struct qry_fan *f,
    struct sm_rpc_multi *mc, uint32_t nasked)
{
	/* In members: a zone-aware ring may lose whole zones (the check
	 * after the round counts what was lost in zones, so a slack too
	 * generous for members of several zones ends in 503, never in a
	 * short answer). */
	uint32_t budget = sm_ring_max_read_errors(f->snap);
	uint32_t slack = budget > f->down ? (budget - f->down) *
	    f->snap->zone_members_max : 0;
	struct sm_quorum qw = { .nvoters = f->n, .stride = f->n,
	    .need = nasked > slack ? nasked - slack : 0,
	    .grace_ns = q->cfg.straggler_ms > 0 && slack > 0 ?
	    q->cfg.straggler_ms * 1000000 : SM_QUORUM_ALL };

	/* Sources have no budget of their own (qry_int.h): no straggler is
	 * given up on while there are any.  The need keeps the ingesters'
	 * slack, so a failed ingester within the budget does not doom the
	 * round. */
	if (f->n > f->ni)
		qw.grace_ns = SM_QUORUM_ALL;
	if (sm_rpc_multi_wait_quorum(mc, &qw) == SM_QUORUM_MET)
		sm_counter_inc(sm_metric_child0(m_stragglers));
}

/* Log the failure of call c, to target t of the fan. */
static void
round_warn(const struct qry_fan *f, const struct qry_call *c, uint32_t t,
    const char *method)
{
	if (t < f->ni)
		sm_warn("querier", "ingester call failed\tmethod=%s "
		    "member=%s err=\"%s\"", method,
		    f->snap->id[c->member] != NULL ?
		    f->snap->id[c->member] :
		    f->snap->m[c->member]->url, c->err.msg);
	else
		sm_warn("querier", "store-gateway call failed\t"
		    "method=%s gateway=%s source=%s instance=%s "
		    "err=\"%s\"", method, gw_name(f->gsnap, c->member),
		    f->src[t - f->ni].id, f->src[t - f->ni].instance,
		    c->err.msg);
}

/* The read units lost: the members lost so far, and the ingester targets
 * that failed this round (tfail); f->lost is left as it was. */
static uint32_t
round_lost_units(struct qry_fan *f, const uint8_t *tfail)
{
	uint32_t units;

	for (uint32_t t = 0; t < f->ni; t++)
		if (tfail[t])
			f->lost[f->target[t]] = 1;
	units = qry_gaps_units(f->snap, f->lost, f->gaps, f->ngaps, NULL, 0);
	for (uint32_t t = 0; t < f->ni; t++)
		if (tfail[t] && !f->excluded[f->target[t]])
			f->lost[f->target[t]] = 0;
	return (units);
}

/* SM_EUNAVAIL when a source's call failed and no other gateway asked
 * answered for it: it may hold the only copy left.  Else 0. */
static int
round_sources_covered(const struct qry_fan *f, const uint8_t *tfail,
    const uint8_t *asked, struct sm_err *err)
{
	for (uint32_t t = f->ni; t < f->n; t++) {
		const struct qry_fan_src *fs = &f->src[t - f->ni];
		const struct qry_call *c = NULL;
		bool covered = false;

		if (!tfail[t])
			continue;
		for (uint32_t u = f->ni; u < f->n && !covered; u++)
			covered = u != t && asked[u] && !tfail[u] &&
			    strcmp(f->src[u - f->ni].id, fs->id) == 0;
		if (covered)
			continue;
		for (uint32_t l = 0; l < f->nlanes && c == NULL; l++)
			if (f->calls[l * f->n + t].rv != 0 &&
			    f->calls[l * f->n + t].rv != SM_RPC_PENDING)
				c = &f->calls[l * f->n + t];
		return (sm_err_set(err, SM_EUNAVAIL, "history unavailable: "
		    "store-gateway %s failed for source %s (from %s) and no "
		    "other answered for it: %s", gw_name(f->gsnap, fs->gw),
		    fs->id, fs->instance, c != NULL ? c->err.msg :
		    "no answer"));
	}
	return (0);
}

/*
 * A member the plan counted on (must) is gone, or its copy is damaged:
 * exclude every such member so the caller starts over without it
 * (replicas cover it).  SM_EAGAIN, with the error of call `first` (1-based;
 * 0: the first such call).
 */
static int
round_exclude(struct qry_fan *f, uint32_t nc, const uint8_t *must,
    int first, struct sm_err *err)
{
	for (uint32_t i = 0; i < nc; i++) {
		const struct qry_call *c = &f->calls[i];

		if (c->rv == 0 || c->rv == SM_RPC_PENDING || !must[i])
			continue;
		if (i % f->n < f->ni)
			f->excluded[c->member] = 1;
		else
			f->gexcluded[c->member] = 1;
		if (first == 0)
			first = (int)i + 1;
	}
	*err = f->calls[first - 1].err;
	return (SM_EAGAIN);
}

int
qry_fan_round(struct querier *q, struct qry_fan *f,
    Smolder__V1__Request *const *reqs, uint32_t nreqs, uint32_t nlanes,
    const char *method, const uint8_t *must, struct sm_err *err)
{
	struct sm_rpc_multi *mc = NULL;
	struct sm_buf *cbufs = NULL;
	uint8_t *tfail = NULL, *asked = NULL;
	uint32_t failed = 0, mustfail = 0, nc, nasked = 0, lost_units = 0;
	int rv = 0, first = 0, first_answer = 0, changed = 0;
	int64_t deadline = sm_now_ms() + q->cfg.timeout_ms;

	sm_metrics_register_once(&fan_metric_set);
	calls_free(f);
	SM_ASSERT(nlanes >= 1 && nlanes <= QRY_MAX_LANES);
	SM_ASSERT(nreqs == 1 ? nlanes == 1 : nreqs == nlanes * f->n);
	nc = nlanes * f->n;
	f->nlanes = nlanes;
	if ((f->calls = sm_calloc(SM_MAX(nc, 1), sizeof(*f->calls))) == NULL ||
	    (cbufs = sm_calloc(SM_MAX(nc, 1), sizeof(*cbufs))) == NULL ||
	    (tfail = sm_calloc(SM_MAX(f->n, 1), 1)) == NULL ||
	    (asked = sm_calloc(SM_MAX(f->n, 1), 1)) == NULL ||
	    sm_rpc_multi_create(nc, method, &mc) != 0 ||
	    round_start(q, f, reqs, nreqs, nc, deadline, mc, cbufs, asked,
	    &nasked) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	round_wait(q, f, mc, nasked);
	for (uint32_t i = 0; i < nc; i++) {
		struct qry_call *c = &f->calls[i];
		uint32_t t = i % f->n;

		if (reqs[nreqs == 1 ? 0 : i] == NULL)
			continue;
		if ((c->arena = sm_arena_create(QRY_CALL_BUDGET)) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		sm_err_clear(&c->err);
		c->rv = sm_rpc_multi_response(mc, i, c->arena, &c->resp,
		    &c->err);
		if (c->rv == 0)
			continue;
		/* A checked bucket changed since the plan (plan.c): the
		 * target is fine, the plan is stale. */
		if (c->rv == SM_EAGAIN) {
			if (changed == 0)
				changed = (int)i + 1;
			continue;
		}
		round_warn(f, c, t, method);
		/* The request's own fault: every replica would say so. */
		if (request_error(c->rv)) {
			*err = c->err;
			rv = c->rv;
			goto out;
		}
		if (t >= f->ni) {
			tfail[t] = 1;
			if (must != NULL && must[i])
				mustfail++;
			continue;
		}
		/* A bystander holds nothing of the tenant: its failure
		 * costs nothing (qry_int.h, "Shuffle sharding"). */
		if (f->bystander != NULL && f->bystander[c->member]) {
			if (must != NULL && must[i])
				mustfail++;   /* it did hold some after all */
			continue;
		}
		if (!tfail[t]) {
			tfail[t] = 1;
			failed++;
		}
		/* The first answer's words, rather than a call cut short
		 * ("timed out") because the round had already failed. */
		if (first == 0)
			first = (int)i + 1;
		if (first_answer == 0 && sm_rpc_multi_status(mc, i) !=
		    SM_RPC_PENDING)
			first_answer = (int)i + 1;
		if (must != NULL && must[i])
			mustfail++;
	}
	if (changed != 0) {
		/* Start over with the same targets, none excluded. */
		sm_counter_inc(sm_metric_child0(m_changed));
		sm_debug("querier", "plan changed\tmethod=%s err=\"%s\"",
		    method, f->calls[changed - 1].err.msg);
		*err = f->calls[changed - 1].err;
		rv = SM_EAGAIN;
		goto out;
	}
	if (first_answer != 0)
		first = first_answer;
	if (failed > 0)
		lost_units = round_lost_units(f, tfail);
	if (failed > 0 && lost_units > sm_ring_max_read_errors(f->snap)) {
		const struct qry_call *c = &f->calls[first - 1];

		/* Too many members lost: their own error (a corrupt block is
		 * data_loss), transport trouble as 503. */
		rv = c->rv == SM_ETIMEDOUT || c->rv == SM_EUNAVAIL ||
		    c->rv == SM_ECLOSED || c->rv == SM_EPROTO ? SM_EUNAVAIL :
		    c->rv;
		sm_err_set(err, rv, "%s", c->err.msg);
		goto out;
	}
	if ((rv = round_sources_covered(f, tfail, asked, err)) != 0)
		goto out;
	if (mustfail > 0)
		rv = round_exclude(f, nc, must, first, err);
out:
	sm_rpc_multi_destroy(mc);
	for (uint32_t i = 0; cbufs != NULL && i < nc; i++)
		sm_buf_fini(&cbufs[i]);
	sm_free(cbufs);
	sm_free(tfail);
	sm_free(asked);
	return (rv);
}

int
qry_fanout_same(struct querier *q, struct qry_fan *f,
    const Smolder__V1__Request *req, const char *method, struct sm_err *err)
{
	Smolder__V1__Request *one = (Smolder__V1__Request *)req;
	int rv;

	const Smolder__V1__Select *sel = sm_rpc_req_select(one);
	bool all = one->method_case == SMOLDER__V1__REQUEST__METHOD_LABELS &&
	    one->labels->all_time;

	if ((rv = qry_fan_open(q, f, sel != NULL ? sel->tenant : NULL,
	    sel != NULL && !all ? sel->start_ms : INT64_MIN,
	    sel != NULL && !all ? sel->end_ms : INT64_MAX, err)) != 0)
		return (rv);
	return (qry_fan_round(q, f, &one, 1, 1, method, NULL, err));
}
