/*
 * qry_int.h -- querier internals shared by its files.
 */
#ifndef QRY_INT_H
#define QRY_INT_H

#include <pthread.h>

#include "common/arena.h"
#include "common/strtab.h"
#include "common/mtree.h"
#include "common/tree.h"

#include "querier.h"

struct querier {
	struct qry_config cfg;
	struct sm_http *http;
	struct sm_rpc_client *const *ing;
	uint32_t ning;
};

/* --- fan-out (fanout.c) --------------------------------------------------- */

struct qry_call {
	struct sm_rpc_client *client;
	const Smolder__V1__Request *req;
	int timeout_ms;
	struct sm_arena *arena;          /* owned; holds resp */
	Smolder__V1__Response *resp;     /* on success */
	int rv;
	struct sm_err err;
	pthread_t thr;
};

/*
 * Send `req` to every ingester concurrently and wait for all (each call has
 * the querier timeout).  *calls gets an array of q->ning results that the
 * caller frees with qry_calls_free().  Returns 0, or the first failure's
 * code with its message in err (all calls are still waited for).
 */
int qry_fanout(struct querier *q, const Smolder__V1__Request *req,
    struct qry_call **calls, struct sm_err *err);
void qry_calls_free(struct qry_call *calls, uint32_t n);

/* --- HTTP (render.c) ------------------------------------------------------ */

int qry_render_register(struct querier *q);

#endif /* QRY_INT_H */
