/*
 * qry_int.h -- querier internals shared by its files.
 */
#ifndef QRY_INT_H
#define QRY_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "common/labels.h"
#include "common/selector.h"

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

/* --- merge (render.c) ---------------------------------------------------- */

/* The selector as RPC matchers, allocated in `a`.  0 or SM_ENOMEM. */
int qry_select_pb(const struct sm_selector *s, const char *tenant,
    int64_t start, int64_t end, struct sm_arena *a, Smolder__V1__Select *sel);

/*
 * Fan a merge of `sel` out to every ingester and fold the answers into
 * `m`.  *calls holds the responses (their strings back m's metadata) until
 * the caller frees them with qry_calls_free().
 */
int qry_merge(struct querier *q, const Smolder__V1__Select *sel,
    struct sm_mtree *m, struct qry_call **calls, struct sm_err *err);

/* Pyroscope's timeline step for a range (ms in, ms out). */
int64_t qry_calc_step_ms(int64_t from_ms, int64_t until_ms);

/* --- labels (labels.c) ---------------------------------------------------- */

/* One distinct (restricted) label set with its upload metadata. */
struct qry_labelset {
	struct sm_label *v;
	uint32_t n;
	char *spy;
	uint32_t sample_rate;
};

struct qry_labels_result {
	char **names;             /* sorted, unique (names or values) */
	uint32_t nnames;
	struct qry_labelset *sets;
	uint32_t nsets, sets_cap;
};

/* Fan a labels request out and merge the answers (arena-owned). */
int qry_labels(struct querier *q, const Smolder__V1__LabelsRequest *lr,
    struct sm_arena *a, struct qry_labels_result *out, struct sm_err *err);

/* "service.suffix" for a set holding service_name, __name__, __type__ and
 * __unit__, when the type has an og suffix. */
bool qry_app_name(const struct qry_labelset *ls, char *dst, size_t n);

/* --- HTTP (render.c, labels.c) --------------------------------------------- */

int qry_render_register(struct querier *q);
int qry_labels_register(struct querier *q);
int qry_connect_register(struct querier *q);

#endif /* QRY_INT_H */
