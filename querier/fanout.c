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

static struct sm_metric *m_stragglers;
static pthread_once_t fan_metrics_once = PTHREAD_ONCE_INIT;

static void
fan_metrics_register(void)
{
	m_stragglers = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_querier_straggler_rounds_total", "Fan-out rounds that "
	    "answered without an ingester still silent after "
	    "-querier.straggler-wait.", NULL, NULL, 0);
}

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
	f->target = NULL;
	f->n = 0;
	if (all) {
		sm_free(f->excluded);
		f->excluded = NULL;
	}
	if (f->snap != NULL)
		sm_ring_release(f->snap);
	f->snap = NULL;
}

int
qry_fan_open(struct querier *q, struct qry_fan *f, struct sm_err *err)
{
	struct sm_ring_snap *s;
	uint8_t *ex = f->excluded;

	f->excluded = NULL;
	qry_fan_close(f, true);
	f->excluded = ex;
	f->snap = s = sm_ring_acquire(q->ring);
	if (f->excluded == NULL && (f->excluded = sm_calloc(SM_MAX(s->n, 1),
	    1)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((f->target = sm_malloc((size_t)SM_MAX(s->n, 1) *
	    sizeof(*f->target))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	f->down = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->healthy[i] && !f->excluded[i])
			f->target[f->n++] = i;
		else if (s->id[i] != NULL && s->state[i] != SM_MEMBER_CONFLICT)
			f->down++;   /* a member that owns tokens is missing */
	}
	if (f->n == 0)
		return (sm_err_set(err, SM_EUNAVAIL, "no healthy ingester to "
		    "query (%u members)", s->n));
	if (f->down > sm_ring_max_read_errors(s))
		return (sm_err_set(err, SM_EUNAVAIL, "too many ingesters "
		    "unavailable: %u of %u, at most %u may be with replication "
		    "factor %u", f->down, s->n, sm_ring_max_read_errors(s),
		    s->rf));
	return (0);
}

/*
 * Hedged waiting (issue: a frozen replica must not stall reads).  A round
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

int
qry_fan_round(struct querier *q, struct qry_fan *f,
    Smolder__V1__Request *const *reqs, uint32_t nreqs, uint32_t nlanes,
    const char *method, const uint8_t *must, struct sm_err *err)
{
	struct sm_rpc_multi *mc = NULL;
	struct sm_buf *bufs = NULL;
	uint8_t *tfail = NULL, *asked = NULL;
	uint32_t failed = 0, mustfail = 0, nc, nb, nasked = 0;
	int rv = 0, first = 0, first_answer = 0;

	pthread_once(&fan_metrics_once, fan_metrics_register);
	calls_free(f);
	SM_ASSERT(nlanes >= 1 && nlanes <= QRY_MAX_LANES);
	SM_ASSERT(nreqs == 1 ? nlanes == 1 : nreqs == nlanes * f->n);
	nc = nlanes * f->n;
	nb = nreqs == 1 ? 1 : nc;
	f->nlanes = nlanes;
	if ((f->calls = sm_calloc(SM_MAX(nc, 1), sizeof(*f->calls))) == NULL ||
	    (bufs = sm_calloc(nb, sizeof(*bufs))) == NULL ||
	    (tfail = sm_calloc(SM_MAX(f->n, 1), 1)) == NULL ||
	    (asked = sm_calloc(SM_MAX(f->n, 1), 1)) == NULL ||
	    sm_rpc_multi_create(nc, method, &mc) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < nb; i++) {
		const Smolder__V1__Request *r = reqs[i];
		Smolder__V1__Request rd;
		size_t sz;

		if (r == NULL)
			continue;
		/* The ingester stops when this call's timeout has passed. */
		rd = *r;
		rd.deadline_unix_ms = sm_now_ms() + q->cfg.timeout_ms;
		sz = protobuf_c_message_get_packed_size(&rd.base);
		if (sm_buf_reserve(&bufs[i], sz) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		protobuf_c_message_pack(&rd.base, (uint8_t *)bufs[i].b);
		bufs[i].len = sz;
	}
	for (uint32_t i = 0; i < nc; i++) {
		struct qry_call *c = &f->calls[i];
		const struct sm_buf *b = &bufs[nreqs == 1 ? 0 : i];

		c->member = f->target[i % f->n];
		c->rv = SM_RPC_PENDING;
		if (reqs[nreqs == 1 ? 0 : i] == NULL)
			continue;
		sm_rpc_multi_start(mc, i, f->snap->m[c->member]->client, b->b,
		    b->len, (int)q->cfg.timeout_ms, SM_RPC_FAILFAST);
		nasked += !asked[i % f->n];
		asked[i % f->n] = 1;
	}
	{
		uint32_t budget = sm_ring_max_read_errors(f->snap);
		uint32_t slack = budget > f->down ? budget - f->down : 0;
		struct sm_quorum qw = { .nvoters = f->n, .stride = f->n,
		    .need = nasked > slack ? nasked - slack : 0,
		    .grace_ns = q->cfg.straggler_ms > 0 && slack > 0 ?
		    q->cfg.straggler_ms * 1000000 : SM_QUORUM_ALL };

		if (sm_rpc_multi_wait_quorum(mc, &qw) == SM_QUORUM_MET)
			sm_counter_inc(sm_metric_child0(m_stragglers));
	}
	for (uint32_t i = 0; i < nc; i++) {
		struct qry_call *c = &f->calls[i];

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
		sm_warn("querier", "ingester call failed\tmethod=%s "
		    "member=%s err=\"%s\"", method,
		    f->snap->id[c->member] != NULL ? f->snap->id[c->member] :
		    f->snap->m[c->member]->url, c->err.msg);
		/* The request's own fault: every replica would say so. */
		if (request_error(c->rv)) {
			*err = c->err;
			rv = c->rv;
			goto out;
		}
		if (!tfail[i % f->n]) {
			tfail[i % f->n] = 1;
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
	if (failed == 0)
		goto out;
	if (first_answer != 0)
		first = first_answer;
	if (f->down + failed > sm_ring_max_read_errors(f->snap)) {
		const struct qry_call *c = &f->calls[first - 1];

		/* Too many members lost: their own error (a corrupt block is
		 * data_loss), transport trouble as 503. */
		rv = c->rv == SM_ETIMEDOUT || c->rv == SM_EUNAVAIL ||
		    c->rv == SM_ECLOSED || c->rv == SM_EPROTO ? SM_EUNAVAIL :
		    c->rv;
		sm_err_set(err, rv, "%s", c->err.msg);
		goto out;
	}
	if (mustfail > 0) {
		/* A member the plan counted on is gone (or its copy is
		 * damaged): start over without it; replicas cover it. */
		for (uint32_t i = 0; i < nc; i++) {
			if (f->calls[i].rv != 0 && f->calls[i].rv !=
			    SM_RPC_PENDING && must[i])
				f->excluded[f->calls[i].member] = 1;
		}
		*err = f->calls[first - 1].err;
		rv = SM_EAGAIN;
	}
out:
	sm_rpc_multi_destroy(mc);
	for (uint32_t i = 0; bufs != NULL && i < nb; i++)
		sm_buf_fini(&bufs[i]);
	sm_free(bufs);
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

	if ((rv = qry_fan_open(q, f, err)) != 0)
		return (rv);
	return (qry_fan_round(q, f, &one, 1, 1, method, NULL, err));
}
