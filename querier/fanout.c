/*
 * fanout.c -- send one request to every ingester at once.
 *
 * One thread per ingester per query: ingesters are few (the ring size) and
 * each call blocks in nng for at most the query timeout.  A single
 * ingester (-target=all) is called inline.
 */
#include "qry_int.h"

#include <string.h>

#define QRY_CALL_BUDGET (1024u << 20)

static void *
qry_call_main(void *p)
{
	struct qry_call *c = p;

	c->rv = sm_rpc_call_pb(c->client, c->req, c->timeout_ms, c->arena,
	    &c->resp, &c->err);
	return (NULL);
}

void
qry_calls_free(struct qry_call *calls, uint32_t n)
{
	if (calls == NULL)
		return;
	for (uint32_t i = 0; i < n; i++)
		sm_arena_destroy(calls[i].arena);
	sm_free(calls);
}

int
qry_fanout(struct querier *q, const Smolder__V1__Request *req,
    struct qry_call **out, struct sm_err *err)
{
	struct qry_call *calls;
	int rv = 0;

	*out = NULL;
	if (q->ning == 0)
		return (sm_err_set(err, SM_EUNAVAIL, "no ingesters"));
	if ((calls = sm_calloc(q->ning, sizeof(*calls))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < q->ning; i++) {
		struct qry_call *c = &calls[i];

		c->client = q->ing[i];
		c->req = req;
		c->timeout_ms = (int)q->cfg.timeout_ms;
		if ((c->arena = sm_arena_create(QRY_CALL_BUDGET)) == NULL) {
			qry_calls_free(calls, q->ning);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
	}
	if (q->ning == 1) {
		qry_call_main(&calls[0]);
	} else {
		for (uint32_t i = 0; i < q->ning; i++) {
			if (pthread_create(&calls[i].thr, NULL, qry_call_main,
			    &calls[i]) != 0)
				qry_call_main(&calls[i]);   /* degrade */
			else
				calls[i].thr = calls[i].thr;
		}
		for (uint32_t i = 0; i < q->ning; i++) {
			if (calls[i].thr != 0)
				pthread_join(calls[i].thr, NULL);
		}
	}
	for (uint32_t i = 0; i < q->ning; i++) {
		if (calls[i].rv != 0) {
			rv = calls[i].rv;
			if (err != NULL)
				*err = calls[i].err;
			break;
		}
	}
	*out = calls;
	return (rv);
}
