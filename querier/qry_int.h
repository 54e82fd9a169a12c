/*
 * qry_int.h -- querier internals shared by its files.
 */
#ifndef QRY_INT_H
#define QRY_INT_H

#include <pthread.h>

#include "common/arena.h"
#include "common/strtab.h"
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

/* --- merging partial trees (merge.c) -------------------------------------- */

#define QRY_META_MAX 16

struct qry_merge {
	struct sm_strtab names;
	struct sm_tree tree;
	int64_t *self;          /* per node of `tree` */
	uint32_t self_cap;
	uint64_t profiles;
	Smolder__V1__SeriesMeta meta[QRY_META_MAX];   /* strings borrowed */
	uint32_t nmeta;
};

int qry_merge_init(struct qry_merge *m);
void qry_merge_fini(struct qry_merge *m);

/*
 * Add one ingester's partial tree.  Validates the message (parents before
 * children, indices in range, one self per node): SM_EPROTO on violation.
 * Metadata strings are borrowed from `r` (keep its arena alive).
 */
int qry_merge_add(struct qry_merge *m, const Smolder__V1__MergeResponse *r,
    struct sm_err *err);

/* --- HTTP (render.c) ------------------------------------------------------ */

int qry_render_register(struct querier *q);

#endif /* QRY_INT_H */
