/*
 * rpc.c -- nng REQ/REP transport; see rpc.h for the model and bounds.
 *
 * Server workers are plain threads that each own a REP context and block
 * on aio waits; nng's own task threads only move bytes, so a slow handler
 * never stalls I/O for the others.  Closing the socket completes every
 * pending receive with NNG_ECLOSED, which is how workers learn to exit.
 */
#include "rpc.h"

#include <pthread.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "log.h"

struct rpc_worker {
	struct sm_rpc_server *srv;
	pthread_t thr;
	nng_ctx ctx;
	nng_aio *aio;
	int started;
};

struct sm_rpc_server {
	nng_socket sock;
	sm_rpc_handler fn;
	void *arg;
	int send_timeout_ms;
	struct rpc_worker *w;
	unsigned nw;
	char *url;
};

struct sm_rpc_client {
	nng_socket sock;
	char *url;
};

static int
rpc_map(int nrv)
{
	switch (nrv) {
	case 0:
		return (0);
	case NNG_ENOMEM:
		return (SM_ENOMEM);
	case NNG_ETIMEDOUT:
		return (SM_ETIMEDOUT);
	case NNG_ECLOSED:
		return (SM_ECLOSED);
	case NNG_ECONNREFUSED:
	case NNG_ECONNRESET:
	case NNG_ECONNSHUT:
	case NNG_ECONNABORTED:
	case NNG_EUNREACHABLE:
	case NNG_ESTATE:
		return (SM_EUNAVAIL);
	case NNG_EINVAL:
	case NNG_EADDRINVAL:
	case NNG_ENOTSUP:
		return (SM_EINVAL);
	case NNG_EMSGSIZE:
		return (SM_ETOOBIG);
	default:
		return (SM_EIO);
	}
}

static void *
rpc_worker_main(void *p)
{
	struct rpc_worker *w = p;
	struct sm_rpc_server *s = w->srv;
	struct sm_buf resp = SM_BUF_INIT;

	for (;;) {
		nng_msg *msg, *rep;
		int nrv, rv;

		nng_ctx_recv(w->ctx, w->aio);
		nng_aio_wait(w->aio);
		nrv = nng_aio_result(w->aio);
		if (nrv == NNG_ECLOSED || nrv == NNG_ECANCELED)
			break;
		if (nrv != 0) {
			sm_warn("rpc", "receive failed\turl=%s err=\"%s\"",
			    s->url, nng_strerror(nrv));
			continue;
		}
		msg = nng_aio_get_msg(w->aio);
		sm_buf_reset(&resp);
		rv = s->fn(s->arg, nng_msg_body(msg), nng_msg_len(msg), &resp);
		nng_msg_free(msg);
		if (rv != 0)
			sm_debug("rpc", "handler returned an error\turl=%s "
			    "err=\"%s\"", s->url, sm_strerror(rv));
		if (sm_buf_error(&resp) != 0) {
			sm_buf_reset(&resp);
			sm_rpc_pack_error(SM_ENOMEM,
			    "out of memory building the response", &resp);
		}
		if (nng_msg_alloc(&rep, 0) != 0)
			continue;
		if (resp.len != 0 && nng_msg_append(rep, resp.b, resp.len) != 0) {
			nng_msg_free(rep);
			continue;
		}
		nng_aio_set_msg(w->aio, rep);
		nng_aio_set_timeout(w->aio, s->send_timeout_ms);
		nng_ctx_send(w->ctx, w->aio);
		nng_aio_wait(w->aio);
		nrv = nng_aio_result(w->aio);
		nng_aio_set_timeout(w->aio, NNG_DURATION_INFINITE);
		if (nrv != 0) {
			nng_msg_free(nng_aio_get_msg(w->aio));
			if (nrv == NNG_ECLOSED)
				break;
		}
	}
	sm_buf_fini(&resp);
	return (NULL);
}

int
sm_rpc_server_start(const struct sm_rpc_server_cfg *cfg, sm_rpc_handler fn,
    void *arg, struct sm_rpc_server **out, struct sm_err *err)
{
	struct sm_rpc_server *s;
	int nrv, rv = 0;

	*out = NULL;
	if (cfg->workers == 0)
		return (sm_err_set(err, SM_EINVAL, "rpc: workers must be >= 1"));
	if ((s = sm_calloc(1, sizeof(*s))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	s->fn = fn;
	s->arg = arg;
	s->send_timeout_ms = cfg->send_timeout_ms > 0 ? cfg->send_timeout_ms :
	    10000;
	s->url = sm_strdup(cfg->url);
	s->w = sm_calloc(cfg->workers, sizeof(*s->w));
	if (s->url == NULL || s->w == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto fail;
	}
	if ((nrv = nng_rep0_open(&s->sock)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv), "rpc: open: %s",
		    nng_strerror(nrv));
		goto fail;
	}
	/* Before listening: a peer can never make us allocate more. */
	if ((nrv = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ,
	    cfg->recv_max)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv), "rpc: recv-size-max: %s",
		    nng_strerror(nrv));
		goto fail_sock;
	}
	if ((nrv = nng_listen(s->sock, cfg->url, NULL, 0)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv) == SM_EINVAL ? SM_EINVAL :
		    SM_EIO, "rpc: listen on %s: %s", cfg->url,
		    nng_strerror(nrv));
		goto fail_sock;
	}
	for (unsigned i = 0; i < cfg->workers; i++) {
		struct rpc_worker *w = &s->w[i];

		w->srv = s;
		if ((nrv = nng_ctx_open(&w->ctx, s->sock)) != 0 ||
		    (nrv = nng_aio_alloc(&w->aio, NULL, NULL)) != 0) {
			rv = sm_err_set(err, rpc_map(nrv), "rpc: context: %s",
			    nng_strerror(nrv));
			goto fail_workers;
		}
		if (pthread_create(&w->thr, NULL, rpc_worker_main, w) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "rpc: thread create");
			goto fail_workers;
		}
		w->started = 1;
		s->nw = i + 1;
	}
	*out = s;
	return (0);

fail_workers:
	s->nw = cfg->workers;
	sm_rpc_server_stop(s);
	return (rv);
fail_sock:
	nng_close(s->sock);
fail:
	sm_free(s->url);
	sm_free(s->w);
	sm_free(s);
	return (rv);
}

void
sm_rpc_server_stop(struct sm_rpc_server *s)
{
	if (s == NULL)
		return;
	/* close: wakes every worker with NNG_ECLOSED */
	nng_close(s->sock);
	/* stop: wait for them */
	for (unsigned i = 0; i < s->nw; i++) {
		struct rpc_worker *w = &s->w[i];

		if (w->started)
			pthread_join(w->thr, NULL);
	}
	/* fini */
	for (unsigned i = 0; i < s->nw; i++) {
		struct rpc_worker *w = &s->w[i];

		if (w->aio != NULL) {
			nng_ctx_close(w->ctx);
			nng_aio_free(w->aio);
		}
	}
	sm_free(s->w);
	sm_free(s->url);
	sm_free(s);
}

int
sm_rpc_client_create(const struct sm_rpc_client_cfg *cfg,
    struct sm_rpc_client **out, struct sm_err *err)
{
	struct sm_rpc_client *c;
	int nrv, rv;
	int retry = cfg->dial_retry_ms > 0 ? cfg->dial_retry_ms : 100;

	*out = NULL;
	if ((c = sm_calloc(1, sizeof(*c))) == NULL ||
	    (c->url = sm_strdup(cfg->url)) == NULL) {
		sm_free(c);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if ((nrv = nng_req0_open(&c->sock)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv), "rpc: open: %s",
		    nng_strerror(nrv));
		goto fail;
	}
	if ((nrv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ,
	    cfg->recv_max)) != 0 ||
	    (nrv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME,
	    NNG_DURATION_INFINITE)) != 0 ||
	    (nrv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, retry)) != 0 ||
	    (nrv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT,
	    retry * 20)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv), "rpc: socket options: %s",
		    nng_strerror(nrv));
		goto fail_sock;
	}
	/* Non-blocking: keep retrying in the background until the peer
	 * listens (in -target=all the ingester may start after us). */
	if ((nrv = nng_dial(c->sock, cfg->url, NULL, NNG_FLAG_NONBLOCK)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv) == SM_EINVAL ? SM_EINVAL :
		    SM_EIO, "rpc: dial %s: %s", cfg->url, nng_strerror(nrv));
		goto fail_sock;
	}
	*out = c;
	return (0);
fail_sock:
	nng_close(c->sock);
fail:
	sm_free(c->url);
	sm_free(c);
	return (rv);
}

void
sm_rpc_client_destroy(struct sm_rpc_client *c)
{
	if (c == NULL)
		return;
	nng_close(c->sock);
	sm_free(c->url);
	sm_free(c);
}

const char *
sm_rpc_client_url(const struct sm_rpc_client *c)
{
	return (c->url);
}

int
sm_rpc_call(struct sm_rpc_client *c, const void *req, size_t len,
    int timeout_ms, struct sm_buf *resp)
{
	nng_ctx ctx;
	nng_aio *aio = NULL;
	nng_msg *msg = NULL;
	int64_t deadline = sm_mono_ns() + (int64_t)timeout_ms * 1000000;
	int64_t left;
	int nrv, rv = 0;

	if ((nrv = nng_ctx_open(&ctx, c->sock)) != 0)
		return (rpc_map(nrv));
	if ((nrv = nng_aio_alloc(&aio, NULL, NULL)) != 0 ||
	    (nrv = nng_msg_alloc(&msg, 0)) != 0 ||
	    (len != 0 && (nrv = nng_msg_append(msg, req, len)) != 0)) {
		rv = rpc_map(nrv);
		goto out;
	}
	nng_aio_set_msg(aio, msg);
	nng_aio_set_timeout(aio, timeout_ms);
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	if ((nrv = nng_aio_result(aio)) != 0) {
		/* Not sent: the message is still ours. */
		rv = rpc_map(nrv);
		goto out;
	}
	msg = NULL;
	left = (deadline - sm_mono_ns()) / 1000000;
	nng_aio_set_timeout(aio, left > 0 ? (nng_duration)left : 1);
	nng_ctx_recv(ctx, aio);
	nng_aio_wait(aio);
	if ((nrv = nng_aio_result(aio)) != 0) {
		rv = rpc_map(nrv);
		goto out;
	}
	msg = nng_aio_get_msg(aio);
	sm_buf_append(resp, nng_msg_body(msg), nng_msg_len(msg));
	rv = sm_buf_error(resp);
out:
	if (msg != NULL)
		nng_msg_free(msg);
	if (aio != NULL)
		nng_aio_free(aio);
	nng_ctx_close(ctx);
	return (rv);
}

int
sm_rpc_call_pb(struct sm_rpc_client *c, const Smolder__V1__Request *req,
    int timeout_ms, struct sm_arena *arena, Smolder__V1__Response **out,
    struct sm_err *err)
{
	struct sm_buf in = SM_BUF_INIT, rb = SM_BUF_INIT;
	ProtobufCAllocator al = sm_arena_pbc(arena);
	Smolder__V1__Response *resp;
	size_t sz;
	int rv;

	*out = NULL;
	sz = protobuf_c_message_get_packed_size(&req->base);
	if (sm_buf_reserve(&in, sz) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	protobuf_c_message_pack(&req->base, (uint8_t *)in.b);
	in.len = sz;
	rv = sm_rpc_call(c, in.b, in.len, timeout_ms, &rb);
	if (rv != 0) {
		sm_err_set(err, rv, "rpc to %s: %s", c->url, sm_strerror(rv));
		goto out;
	}
	resp = smolder__v1__response__unpack(&al, rb.len,
	    (const uint8_t *)(rb.b != NULL ? rb.b : ""));
	if (resp == NULL) {
		rv = sm_err_set(err, SM_EPROTO, "rpc to %s: undecodable "
		    "response (%zu bytes)", c->url, rb.len);
		goto out;
	}
	if (resp->code != 0) {
		rv = resp->code;
		if (rv < SM_ENOMEM || rv >= SM_E_LAST_)
			rv = SM_EPROTO;   /* not one of ours */
		sm_err_set(err, rv, "%s", resp->message != NULL ?
		    resp->message : sm_strerror(rv));
		goto out;
	}
	*out = resp;
out:
	sm_buf_fini(&in);
	sm_buf_fini(&rb);
	return (rv);
}

void
sm_rpc_pack_response(const Smolder__V1__Response *resp, struct sm_buf *out)
{
	size_t sz = protobuf_c_message_get_packed_size(&resp->base);

	if (sm_buf_reserve(out, sz) != 0)
		return;
	protobuf_c_message_pack(&resp->base, (uint8_t *)out->b + out->len);
	out->len += sz;
	out->b[out->len] = '\0';
}

void
sm_rpc_pack_error(int code, const char *msg, struct sm_buf *out)
{
	Smolder__V1__Response r = SMOLDER__V1__RESPONSE__INIT;

	r.code = code;
	r.message = (char *)msg;
	sm_rpc_pack_response(&r, out);
}
