/*
 * ingester.c -- the ingester module: RPC service and lifecycle.
 */
#include "ingester.h"

#include <stdatomic.h>
#include <string.h>

#include "common/arena.h"
#include "common/log.h"
#include "common/rpc.h"

#include "head.h"

struct ingester {
	struct ing_config cfg;
	struct ing_head *head;
	struct sm_rpc_server *rpc;
	atomic_bool ready;
};

/* Per-request memory budget for decoding and building responses. */
#define ING_REQ_BUDGET (1024u << 20)

const struct sm_flag *
ing_flags(struct ing_config *cfg, size_t *n)
{
	static struct sm_flag f[3];

	f[0] = (struct sm_flag){ "ingester.rpc-workers", SM_FLAG_INT,
		&cfg->rpc_workers, "4",
		"Concurrent RPC handlers of the ingester." };
	f[1] = (struct sm_flag){ "ingester.rpc-max-message-bytes",
		SM_FLAG_BYTES, &cfg->rpc_recv_max, "64MiB",
		"Largest internal RPC request the ingester accepts; larger "
		"frames are dropped before allocation." };
	f[2] = (struct sm_flag){ "ingester.bucket-duration",
		SM_FLAG_DURATION, &cfg->bucket_ms, "10s",
		"Width of the time buckets samples are summed into." };
	*n = SM_ARRAY_LEN(f);
	return (f);
}

int
ing_create(const struct ing_config *cfg, struct ingester **out,
    struct sm_err *err)
{
	struct ingester *ing;

	*out = NULL;
	if (cfg->bucket_ms <= 0 || cfg->rpc_workers <= 0 ||
	    cfg->rpc_recv_max <= 0)
		return (sm_err_set(err, SM_EINVAL, "ingester: bucket duration, "
		    "rpc workers and rpc max message size must be > 0"));
	if ((ing = sm_calloc(1, sizeof(*ing))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	ing->cfg = *cfg;
	if (ing_head_create(cfg->bucket_ms, &ing->head) != 0) {
		sm_free(ing);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	*out = ing;
	return (0);
}

int
ing_start(struct ingester *ing, struct sm_err *err)
{
	struct sm_rpc_server_cfg rc = {
		.url = ing->cfg.rpc_url,
		.workers = (unsigned)ing->cfg.rpc_workers,
		.recv_max = (size_t)ing->cfg.rpc_recv_max,
		.send_timeout_ms = 10000,
	};
	int rv;

	if ((rv = sm_rpc_server_start(&rc, ing_serve, ing, &ing->rpc,
	    err)) != 0)
		return (rv);
	atomic_store(&ing->ready, true);
	sm_info("ingester", "serving rpc\turl=%s", ing->cfg.rpc_url);
	return (0);
}

bool
ing_ready(const struct ingester *ing)
{
	return (atomic_load(&ing->ready));
}

void
ing_stop(struct ingester *ing)
{
	atomic_store(&ing->ready, false);
	sm_rpc_server_stop(ing->rpc);
	ing->rpc = NULL;
}

void
ing_destroy(struct ingester *ing)
{
	if (ing == NULL)
		return;
	if (ing->rpc != NULL)
		ing_stop(ing);
	ing_head_destroy(ing->head);
	sm_free(ing);
}

int
ing_serve(void *arg, const uint8_t *data, size_t len, struct sm_buf *resp)
{
	struct ingester *ing = arg;
	Smolder__V1__Response r = SMOLDER__V1__RESPONSE__INIT;
	Smolder__V1__WriteResponse wr = SMOLDER__V1__WRITE_RESPONSE__INIT;
	Smolder__V1__MergeResponse mr;
	Smolder__V1__SeriesResponse sr;
	Smolder__V1__Request *req;
	struct sm_arena *a;
	ProtobufCAllocator al;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	if ((a = sm_arena_create(ING_REQ_BUDGET)) == NULL) {
		sm_rpc_pack_error(SM_ENOMEM, "out of memory", resp);
		return (SM_ENOMEM);
	}
	al = sm_arena_pbc(a);
	req = smolder__v1__request__unpack(&al, len, data);
	if (req == NULL) {
		rv = sm_err_set(&err, SM_EMALFORMED, "undecodable request of "
		    "%zu bytes", len);
		goto out;
	}
	switch (req->method_case) {
	case SMOLDER__V1__REQUEST__METHOD_WRITE: {
		uint32_t ns, np;

		rv = ing_head_write(ing->head, req->write, &ns, &np, &err);
		if (rv == 0) {
			wr.series = ns;
			wr.samples = np;
			r.result_case = SMOLDER__V1__RESPONSE__RESULT_WRITE;
			r.write = &wr;
		}
		break;
	}
	case SMOLDER__V1__REQUEST__METHOD_MERGE:
		if (req->merge->select == NULL) {
			rv = sm_err_set(&err, SM_EMALFORMED, "merge: no select");
			break;
		}
		rv = ing_head_merge(ing->head, req->merge->select, a, &mr,
		    &err);
		if (rv == 0) {
			r.result_case = SMOLDER__V1__RESPONSE__RESULT_MERGE;
			r.merge = &mr;
		}
		break;
	case SMOLDER__V1__REQUEST__METHOD_SERIES:
		rv = ing_head_series(ing->head, req->series, a, &sr, &err);
		if (rv == 0) {
			r.result_case = SMOLDER__V1__RESPONSE__RESULT_SERIES;
			r.series = &sr;
		}
		break;
	default:
		rv = sm_err_set(&err, SM_EUNSUPPORTED, "unsupported method %d",
		    (int)req->method_case);
		break;
	}
out:
	if (rv != 0) {
		if (err.msg[0] == '\0')
			sm_err_set(&err, rv, "%s", sm_strerror(rv));
		sm_rpc_pack_error(rv, err.msg, resp);
	} else {
		sm_rpc_pack_response(&r, resp);
	}
	sm_arena_destroy(a);
	return (rv);
}
