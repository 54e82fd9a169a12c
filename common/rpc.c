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
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "log.h"
#include "metrics.h"
#include "varint.h"

struct rpc_worker {
	struct sm_rpc_server *srv;
	pthread_t thr;
	nng_ctx ctx;
	nng_aio *aio;
	int started;
};

/* Pipe ids of a socket, for the connection cap and connectedness. */
struct rpc_pipes {
	pthread_mutex_t mu;
	uint32_t *id;
	unsigned n, cap, max;       /* max == 0: no cap */
	atomic_uint count;
	uint64_t refused;
};

struct sm_rpc_server {
	nng_socket sock;
	sm_rpc_handler fn;
	void *arg;
	int send_timeout_ms;
	struct rpc_worker *w;
	unsigned nw;
	char *url;
	struct rpc_pipes pipes;
	atomic_bool stopping;
	size_t recv_max;
	struct sm_rpc_server *direct_next;  /* on rpc_direct, when cfg.direct */
	/* cfg.reserve (see rpc.h, "Reserved workers"), under pmu: workers
	 * running a request that is not light, and the requests parked
	 * because taking them would have left fewer than `reserve` workers
	 * free, each with the context it must be answered on.  pmu also
	 * orders a worker's start of a receive against stop's cancel (see
	 * "Stopping a server"). */
	unsigned reserve;
	bool (*light)(const uint8_t *req, size_t len);
	pthread_mutex_t pmu;
	unsigned heavy;
	struct rpc_parked *parked;
	uint32_t nparked, parked_head, parked_cap;
};

struct rpc_parked {
	nng_ctx ctx;
	nng_msg *msg;
};

/* Requests parked at most (beyond: refused with SM_ELIMIT). */
#define RPC_PARKED_MAX 4096

/*
 * Direct calls (SM_RPC_DIRECT): the servers started with cfg.direct, by
 * URL.  A direct call holds the read lock while the handler runs, so
 * sm_rpc_server_stop() (write lock, unlinking) returns only after every
 * direct call in progress finished -- as it joins its workers.  The lock
 * prefers writers, so a steady stream of writes cannot starve a stop;
 * hence a handler must not make a direct call itself (none does).
 */
static pthread_rwlock_t rpc_direct_lock =
    PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static struct sm_rpc_server *rpc_direct;

/*
 * Stopping a server.  nng 1.5 can crash (a destroyed mutex in
 * nng_ctx_send) when the socket is closed while a worker is inside its
 * handler and then sends the reply on a context that closing tore down.
 * So the socket is closed only after every worker has returned: stop sets
 * `stopping` and cancels the workers' receives; a worker finishes the
 * request in hand (its reply is sent), sees the flag and returns.  A
 * worker looks at the flag and starts its receive under pmu, and stop
 * sets the flag and cancels under pmu, so every receive is either started
 * before the cancel (and cancelled by it) or never started.  So receives
 * wait without a timeout: polling the flag instead (a timeout of a few
 * hundred ms, 16 or more workers) keeps nng's timer thread awake in a
 * server nobody calls, about 2 % of a core per idle process.
 */

/*
 * Closing a socket, bounded.  nng 1.5.2 (Debian 12) can hang in nng_close
 * for ever: when a peer's pipe is torn down while an operation on it has
 * begun but is not yet scheduled, the pipe's reaper waits on that
 * operation, which never completes, and nng_close waits on the pipe
 * (nanomsg/nng#1813, fixed in nng 1.8).  An ingester stopped just after
 * its peers reconnected hit it about once in a hundred stops (the main
 * thread in nng_close, the reaper thread waiting).  So nng_close runs in
 * a helper thread and its caller waits at most RPC_CLOSE_WAIT_MS: past
 * that the stop goes on, warns, and leaves the socket and the owner's
 * memory to the helper, which frees them if nng ever returns (a stopping
 * process exits without waiting for it).  The owner's memory has to wait
 * for the close because nng still calls pipes_cb on it until then.
 */
#define RPC_CLOSE_WAIT_MS 5000

struct rpc_closer {
	nng_socket sock;
	void (*fin)(void *);        /* frees the owner once the socket is closed */
	void *arg;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;                  /* nng_close returned */
	bool abandoned;             /* the caller stopped waiting: helper frees */
};

static void
closer_free(struct rpc_closer *cl)
{
	pthread_cond_destroy(&cl->cv);
	pthread_mutex_destroy(&cl->mu);
	sm_free(cl);
}

static void *
closer_main(void *p)
{
	struct rpc_closer *cl = p;
	bool abandoned;

	nng_close(cl->sock);
	pthread_mutex_lock(&cl->mu);
	cl->done = true;
	abandoned = cl->abandoned;
	pthread_cond_signal(&cl->cv);
	pthread_mutex_unlock(&cl->mu);
	if (abandoned) {
		cl->fin(cl->arg);
		closer_free(cl);
	}
	return (NULL);
}

/* nng_close(sock), then fin(arg), without waiting on nng for ever (above). */
static void
rpc_close(nng_socket sock, const char *url, void (*fin)(void *), void *arg)
{
	struct rpc_closer *cl = sm_calloc(1, sizeof(*cl));
	int64_t deadline = sm_mono_ns() + (int64_t)RPC_CLOSE_WAIT_MS * 1000000;
	pthread_t thr;

	if (cl == NULL)
		goto inline_close;
	cl->sock = sock;
	cl->fin = fin;
	cl->arg = arg;
	pthread_mutex_init(&cl->mu, NULL);
	sm_cond_init(&cl->cv);
	if (pthread_create(&thr, NULL, closer_main, cl) != 0) {
		closer_free(cl);
		goto inline_close;
	}
	pthread_mutex_lock(&cl->mu);
	while (!cl->done && sm_cond_wait_until(&cl->cv, &cl->mu, deadline))
		;
	if (cl->done) {
		pthread_mutex_unlock(&cl->mu);
		pthread_join(thr, NULL);
		closer_free(cl);
		fin(arg);
		return;
	}
	cl->abandoned = true;
	pthread_mutex_unlock(&cl->mu);
	pthread_detach(thr);
	sm_warn("rpc", "closing the socket did not finish within %d ms (nng "
	    "1.5 can hang there, nanomsg/nng#1813); left to a helper thread\t"
	    "url=%s", RPC_CLOSE_WAIT_MS, url != NULL ? url : "");
	return;
inline_close:
	nng_close(sock);
	fin(arg);
}

struct rpc_op;

/*
 * ops lists the concurrent calls (sm_rpc_multi_start) in flight on the
 * socket, under mu.  sm_rpc_client_destroy cancels them and waits for
 * their callbacks before it closes the socket: a hedged or quorum caller
 * leaves stragglers running, and closing a socket under a context whose
 * callback is about to close that context is a use after free inside
 * nng (it aborted rpc_test once in a few hundred runs).
 */
struct sm_rpc_client {
	nng_socket sock;
	nng_dialer dialer;          /* replaced by sm_rpc_client_redial, under mu */
	char *url;
	struct rpc_pipes pipes;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct rpc_op *ops;         /* in flight, linked through op->next */
	uint32_t live;              /* ops on the list or finishing */
	bool closing;               /* destroy has begun: start no receive */
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

/* --- pipe accounting ------------------------------------------------------- */

static void
pipes_init(struct rpc_pipes *p, unsigned max)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	p->max = max;
}

static void
pipes_fini(struct rpc_pipes *p)
{
	sm_free(p->id);
	pthread_mutex_destroy(&p->mu);
}

/*
 * ADD_PRE (server: refuse beyond the cap) and ADD_POST (client) record the
 * pipe; REM_POST forgets it if it was recorded.  A pipe closed in ADD_PRE
 * is never recorded, so the count stays exact either way.
 */
static void
pipes_cb(nng_pipe np, nng_pipe_ev ev, void *arg)
{
	struct rpc_pipes *p = arg;
	uint32_t id = nng_pipe_id(np);

	pthread_mutex_lock(&p->mu);
	if (ev == NNG_PIPE_EV_REM_POST) {
		for (unsigned i = 0; i < p->n; i++) {
			if (p->id[i] == id) {
				p->id[i] = p->id[--p->n];
				atomic_store(&p->count, p->n);
				break;
			}
		}
	} else if (p->max != 0 && p->n >= p->max) {
		p->refused++;
		pthread_mutex_unlock(&p->mu);
		nng_pipe_close(np);
		return;
	} else {
		if (SM_GROW(p->id, p->cap, p->n + 1, 16) != 0) {
			pthread_mutex_unlock(&p->mu);
			nng_pipe_close(np);
			return;
		}
		p->id[p->n++] = id;
		atomic_store(&p->count, p->n);
	}
	pthread_mutex_unlock(&p->mu);
}

/* --- mutual TLS (sm_rpc_tls_set) ------------------------------------------- */

static nng_tls_config *rpc_tls_server, *rpc_tls_client;

/* A PEM file's text (NUL-terminated, at most 1 MiB), or NULL. */
static char *
rpc_read_pem(const char *path, struct sm_err *err)
{
	FILE *f = fopen(path, "rb");
	char *b = NULL;
	size_t n = 0;

	if (f != NULL && (b = sm_malloc((1u << 20) + 1)) != NULL) {
		n = fread(b, 1, 1u << 20, f);
		b[n] = '\0';
	}
	if (f != NULL)
		fclose(f);
	if (b == NULL || n == 0 || n == 1u << 20) {
		sm_free(b);
		sm_err_set(err, SM_EINVAL, "rpc tls: cannot read %s (missing, "
		    "empty or over 1 MiB)", path);
		return (NULL);
	}
	return (b);
}

static int
rpc_tls_config(nng_tls_mode mode, const char *cert, const char *key,
    const char *ca, const char *name, nng_tls_config **out,
    struct sm_err *err)
{
	nng_tls_config *c;
	int nrv;

	if ((nrv = nng_tls_config_alloc(&c, mode)) != 0)
		return (sm_err_set(err, SM_EINVAL, "rpc tls: %s",
		    nng_strerror(nrv)));
	if ((nrv = nng_tls_config_own_cert(c, cert, key, NULL)) != 0 ||
	    (nrv = nng_tls_config_ca_chain(c, ca, NULL)) != 0 ||
	    (nrv = nng_tls_config_auth_mode(c,
	    NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
	    (nrv = nng_tls_config_version(c, NNG_TLS_1_2,
	    NNG_TLS_1_3)) != 0 ||
	    (name != NULL && name[0] != '\0' &&
	    (nrv = nng_tls_config_server_name(c, name)) != 0)) {
		nng_tls_config_free(c);
		return (sm_err_set(err, SM_EINVAL, "rpc tls: the %s "
		    "certificate, key or CA: %s", mode == NNG_TLS_MODE_SERVER ?
		    "server" : "client", nng_strerror(nrv)));
	}
	*out = c;
	return (0);
}

int
sm_rpc_tls_set(const struct sm_rpc_tls_cfg *cfg, struct sm_err *err)
{
	char *cert = NULL, *key = NULL, *ca = NULL;
	int rv = SM_EINVAL;

	sm_rpc_tls_clear();
	if ((cert = rpc_read_pem(cfg->cert_path, err)) == NULL ||
	    (key = rpc_read_pem(cfg->key_path, err)) == NULL ||
	    (ca = rpc_read_pem(cfg->ca_path, err)) == NULL)
		goto out;
	if ((rv = rpc_tls_config(NNG_TLS_MODE_SERVER, cert, key, ca, NULL,
	    &rpc_tls_server, err)) != 0 ||
	    (rv = rpc_tls_config(NNG_TLS_MODE_CLIENT, cert, key, ca,
	    cfg->server_name, &rpc_tls_client, err)) != 0)
		sm_rpc_tls_clear();
out:
	sm_free(cert);
	if (key != NULL)
		explicit_bzero(key, strlen(key));
	sm_free(key);
	sm_free(ca);
	return (rv);
}

void
sm_rpc_tls_clear(void)
{
	if (rpc_tls_server != NULL)
		nng_tls_config_free(rpc_tls_server);
	if (rpc_tls_client != NULL)
		nng_tls_config_free(rpc_tls_client);
	rpc_tls_server = rpc_tls_client = NULL;
}

/*
 * The URL to listen on or dial: with mutual TLS on, tcp://h:p becomes
 * tls+tcp://h:p (into buf); other transports are as given.
 */
static const char *
rpc_url(const char *url, char *buf, size_t cap)
{
	if (rpc_tls_server == NULL || strncmp(url, "tcp://", 6) != 0 ||
	    (size_t)snprintf(buf, cap, "tls+%s", url) >= cap)
		return (url);
	return (buf);
}

/* TCP keepalive, so the pipe of a peer that vanished is eventually reaped. */
static int
rpc_listen(nng_socket sock, const char *url)
{
	char ubuf[512];
	nng_listener l;
	int nrv;

	url = rpc_url(url, ubuf, sizeof(ubuf));
	if ((nrv = nng_listener_create(&l, sock, url)) != 0)
		return (nrv);
	if (strncmp(url, "tcp", 3) == 0 || strncmp(url, "tls+tcp", 7) == 0)
		(void)nng_listener_set_bool(l, NNG_OPT_TCP_KEEPALIVE, true);
	if (strncmp(url, "tls+", 4) == 0 && (nrv = nng_listener_set_ptr(l,
	    NNG_OPT_TLS_CONFIG, rpc_tls_server)) != 0) {
		nng_listener_close(l);
		return (nrv);
	}
	if ((nrv = nng_listener_start(l, 0)) != 0)
		nng_listener_close(l);
	return (nrv);
}

static int
rpc_dial(nng_socket sock, const char *url, nng_dialer *out)
{
	char ubuf[512];
	nng_dialer d;
	int nrv;

	url = rpc_url(url, ubuf, sizeof(ubuf));
	if ((nrv = nng_dialer_create(&d, sock, url)) != 0)
		return (nrv);
	if (strncmp(url, "tcp", 3) == 0 || strncmp(url, "tls+tcp", 7) == 0)
		(void)nng_dialer_set_bool(d, NNG_OPT_TCP_KEEPALIVE, true);
	if (strncmp(url, "tls+", 4) == 0 && (nrv = nng_dialer_set_ptr(d,
	    NNG_OPT_TLS_CONFIG, rpc_tls_client)) != 0) {
		nng_dialer_close(d);
		return (nrv);
	}
	/* Non-blocking: keep retrying in the background until the peer
	 * listens. */
	if ((nrv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0)
		nng_dialer_close(d);
	else if (out != NULL)
		*out = d;
	return (nrv);
}

/* Run the handler on one request; `resp` gets the reply bytes (an error
 * Response when building it ran out of memory).  Workers and direct
 * calls both come here, so they answer alike. */
static void
rpc_handle(struct sm_rpc_server *s, const uint8_t *req, size_t len,
    struct sm_buf *resp)
{
	int rv;

	sm_buf_reset(resp);
	rv = s->fn(s->arg, req, len, resp);
	if (rv != 0)
		sm_debug("rpc", "handler returned an error\turl=%s "
		    "err=\"%s\"", s->url, sm_strerror(rv));
	if (sm_buf_error(resp) != 0) {
		sm_buf_reset(resp);
		sm_rpc_pack_error(SM_ENOMEM,
		    "out of memory building the response", resp);
	}
}

/* Send `resp` as the reply on ctx (through aio); false once the socket
 * closed. */
static bool
rpc_reply(struct sm_rpc_server *s, nng_ctx ctx, nng_aio *aio,
    const struct sm_buf *resp)
{
	nng_msg *rep;
	int nrv;

	if (nng_msg_alloc(&rep, 0) != 0)
		return (true);
	if (resp->len != 0 && nng_msg_append(rep, resp->b, resp->len) != 0) {
		nng_msg_free(rep);
		return (true);
	}
	nng_aio_set_msg(aio, rep);
	nng_aio_set_timeout(aio, s->send_timeout_ms);
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	nrv = nng_aio_result(aio);
	if (nrv != 0) {
		nng_msg_free(nng_aio_get_msg(aio));
		if (nrv == NNG_ECLOSED)
			return (false);
	}
	return (true);
}

/*
 * Reserved workers: may this worker take a request that is not light
 * (true, counted in s->heavy), or must it park it?  Parking moves the
 * request and its context to the queue and gives the worker a fresh
 * context; a full queue (or no context) refuses it with SM_ELIMIT.
 */
static bool
rpc_take_heavy(struct rpc_worker *w, nng_msg *msg, struct sm_buf *resp,
    bool *closed)
{
	struct sm_rpc_server *s = w->srv;
	nng_ctx fresh;

	*closed = false;
	pthread_mutex_lock(&s->pmu);
	if (s->heavy + s->reserve < s->nw) {
		s->heavy++;
		pthread_mutex_unlock(&s->pmu);
		return (true);
	}
	/* a FIFO at [parked_head, parked_head + nparked): slide it to the
	 * front before growing */
	if (s->parked_head > 0 && s->parked_head + s->nparked ==
	    s->parked_cap) {
		memmove(s->parked, s->parked + s->parked_head,
		    s->nparked * sizeof(*s->parked));
		s->parked_head = 0;
	}
	if (s->nparked < RPC_PARKED_MAX && SM_GROW(s->parked, s->parked_cap,
	    s->parked_head + s->nparked + 1, 16) == 0 &&
	    nng_ctx_open(&fresh, s->sock) == 0) {
		s->parked[s->parked_head + s->nparked] =
		    (struct rpc_parked){ w->ctx, msg };
		s->nparked++;
		w->ctx = fresh;
		pthread_mutex_unlock(&s->pmu);
		return (false);
	}
	pthread_mutex_unlock(&s->pmu);
	sm_buf_reset(resp);
	sm_rpc_pack_error(SM_ELIMIT, "too many requests queued on this "
	    "server; retry shortly", resp);
	nng_msg_free(msg);
	*closed = !rpc_reply(s, w->ctx, w->aio, resp);
	return (false);
}

/* A worker done with a heavy request: serve the parked ones, then count
 * itself free.  False once the socket closed. */
static bool
rpc_drain_parked(struct rpc_worker *w, struct sm_buf *resp)
{
	struct sm_rpc_server *s = w->srv;

	for (;;) {
		struct rpc_parked pk;
		bool ok;

		pthread_mutex_lock(&s->pmu);
		if (s->nparked == 0 || atomic_load(&s->stopping)) {
			s->heavy--;
			pthread_mutex_unlock(&s->pmu);
			return (true);
		}
		pk = s->parked[s->parked_head++];
		if (--s->nparked == 0)
			s->parked_head = 0;
		pthread_mutex_unlock(&s->pmu);
		rpc_handle(s, nng_msg_body(pk.msg), nng_msg_len(pk.msg), resp);
		nng_msg_free(pk.msg);
		ok = rpc_reply(s, pk.ctx, w->aio, resp);
		nng_ctx_close(pk.ctx);
		if (!ok) {
			pthread_mutex_lock(&s->pmu);
			s->heavy--;
			pthread_mutex_unlock(&s->pmu);
			return (false);
		}
	}
}

static void *
rpc_worker_main(void *p)
{
	struct rpc_worker *w = p;
	struct sm_rpc_server *s = w->srv;
	struct sm_buf resp = SM_BUF_INIT;

	for (;;) {
		nng_msg *msg;
		bool heavy = false, closed = false, ok;
		int nrv;

		pthread_mutex_lock(&s->pmu);
		if (atomic_load(&s->stopping)) {
			pthread_mutex_unlock(&s->pmu);
			break;
		}
		nng_aio_set_timeout(w->aio, NNG_DURATION_INFINITE);
		nng_ctx_recv(w->ctx, w->aio);
		pthread_mutex_unlock(&s->pmu);
		nng_aio_wait(w->aio);
		nrv = nng_aio_result(w->aio);
		if (nrv == NNG_ETIMEDOUT || nrv == NNG_ECANCELED)
			continue;       /* look at `stopping` again */
		if (nrv == NNG_ECLOSED)
			break;
		if (nrv != 0) {
			sm_warn("rpc", "receive failed\turl=%s err=\"%s\"",
			    s->url, nng_strerror(nrv));
			continue;
		}
		msg = nng_aio_get_msg(w->aio);
		if (s->reserve > 0 && !s->light(nng_msg_body(msg),
		    nng_msg_len(msg))) {
			if (!rpc_take_heavy(w, msg, &resp, &closed)) {
				if (closed)
					break;
				continue;       /* parked, or refused */
			}
			heavy = true;
		}
		rpc_handle(s, nng_msg_body(msg), nng_msg_len(msg), &resp);
		nng_msg_free(msg);
		ok = rpc_reply(s, w->ctx, w->aio, &resp);
		if (heavy && !rpc_drain_parked(w, &resp))
			break;
		if (!ok)
			break;
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
	s->recv_max = cfg->recv_max;
	pthread_mutex_init(&s->pmu, NULL);
	if (cfg->reserve > 0 && cfg->light != NULL &&
	    cfg->reserve < cfg->workers) {
		s->reserve = cfg->reserve;
		s->light = cfg->light;
	}
	pipes_init(&s->pipes, cfg->max_conns > 0 ? cfg->max_conns : 1024);
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
	    cfg->recv_max)) != 0 ||
	    (nrv = nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_PRE, pipes_cb,
	    &s->pipes)) != 0 ||
	    (nrv = nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, pipes_cb,
	    &s->pipes)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv), "rpc: recv-size-max: %s",
		    nng_strerror(nrv));
		goto fail_sock;
	}
	if ((nrv = rpc_listen(s->sock, cfg->url)) != 0) {
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
	if (cfg->direct) {
		pthread_rwlock_wrlock(&rpc_direct_lock);
		s->direct_next = rpc_direct;
		rpc_direct = s;
		pthread_rwlock_unlock(&rpc_direct_lock);
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
	pipes_fini(&s->pipes);
	sm_free(s->url);
	sm_free(s->w);
	sm_free(s);
	return (rv);
}

/* What the server owns besides its socket (after the close: rpc_close). */
static void
server_fin(void *p)
{
	struct sm_rpc_server *s = p;

	for (unsigned i = 0; i < s->nw; i++) {
		struct rpc_worker *w = &s->w[i];

		/* aio first: freeing it waits out an expiry still using
		 * the context (see "Retiring a call"). */
		if (w->aio != NULL) {
			nng_aio_free(w->aio);
			nng_ctx_close(w->ctx);
		}
	}
	/* parked requests never answered: the callers time out (the
	 * socket is closed, so no reply could be sent) */
	for (uint32_t k = 0; k < s->nparked; k++) {
		struct rpc_parked *pk = &s->parked[s->parked_head + k];

		nng_msg_free(pk->msg);
		nng_ctx_close(pk->ctx);
	}
	sm_free(s->parked);
	pthread_mutex_destroy(&s->pmu);
	pipes_fini(&s->pipes);
	sm_free(s->w);
	sm_free(s->url);
	sm_free(s);
}

void
sm_rpc_server_stop(struct sm_rpc_server *s)
{
	if (s == NULL)
		return;
	/* no new direct call; wait for those in progress */
	pthread_rwlock_wrlock(&rpc_direct_lock);
	for (struct sm_rpc_server **pp = &rpc_direct; *pp != NULL;
	    pp = &(*pp)->direct_next) {
		if (*pp == s) {
			*pp = s->direct_next;
			break;
		}
	}
	pthread_rwlock_unlock(&rpc_direct_lock);
	/* stop the workers (see "Stopping a server"), then close */
	pthread_mutex_lock(&s->pmu);
	atomic_store(&s->stopping, true);
	for (unsigned i = 0; i < s->nw; i++)
		if (s->w[i].aio != NULL)
			nng_aio_cancel(s->w[i].aio);
	pthread_mutex_unlock(&s->pmu);
	for (unsigned i = 0; i < s->nw; i++) {
		struct rpc_worker *w = &s->w[i];

		if (w->started)
			pthread_join(w->thr, NULL);
	}
	rpc_close(s->sock, s->url, server_fin, s);
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
	pipes_init(&c->pipes, 0);
	pthread_mutex_init(&c->mu, NULL);
	sm_cond_init(&c->cv);
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
	    retry * 5)) != 0 ||
	    (nrv = nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, pipes_cb,
	    &c->pipes)) != 0 ||
	    (nrv = nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipes_cb,
	    &c->pipes)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv), "rpc: socket options: %s",
		    nng_strerror(nrv));
		goto fail_sock;
	}
	/* In -target=all the ingester may start after us: rpc_dial retries
	 * in the background. */
	if ((nrv = rpc_dial(c->sock, cfg->url, &c->dialer)) != 0) {
		rv = sm_err_set(err, rpc_map(nrv) == SM_EINVAL ? SM_EINVAL :
		    SM_EIO, "rpc: dial %s: %s", cfg->url, nng_strerror(nrv));
		goto fail_sock;
	}
	*out = c;
	return (0);
fail_sock:
	nng_close(c->sock);
fail:
	pipes_fini(&c->pipes);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	sm_free(c->url);
	sm_free(c);
	return (rv);
}

static void client_cancel_ops(struct sm_rpc_client *c);

/* What the client owns besides its socket (after the close: rpc_close). */
static void
client_fin(void *p)
{
	struct sm_rpc_client *c = p;

	pipes_fini(&c->pipes);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	sm_free(c->url);
	sm_free(c);
}

void
sm_rpc_client_destroy(struct sm_rpc_client *c)
{
	if (c == NULL)
		return;
	client_cancel_ops(c);
	rpc_close(c->sock, c->url, client_fin, c);
}

/*
 * A fresh dialer in place of the old one: closing the old one closes its
 * pipe (a connection that went silent behind a partition, which TCP
 * would otherwise keep retransmitting into for up to ~15 minutes, at
 * intervals growing to 2) and cancels a connect whose SYNs are being
 * dropped (the kernel backs those off to a minute apart).
 */
int
sm_rpc_client_redial(struct sm_rpc_client *c)
{
	int nrv = 0;

	pthread_mutex_lock(&c->mu);
	if (!c->closing) {
		(void)nng_dialer_close(c->dialer);
		nrv = rpc_dial(c->sock, c->url, &c->dialer);
	}
	pthread_mutex_unlock(&c->mu);
	return (rpc_map(nrv));
}

bool
sm_rpc_client_connected(const struct sm_rpc_client *c)
{
	return (atomic_load(&((struct sm_rpc_client *)c)->pipes.count) > 0);
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

Smolder__V1__Select *
sm_rpc_req_select(const Smolder__V1__Request *req)
{
	switch (req->method_case) {
	case SMOLDER__V1__REQUEST__METHOD_MERGE:
		return (req->merge->select);
	case SMOLDER__V1__REQUEST__METHOD_SERIES:
		return (req->series->select);
	case SMOLDER__V1__REQUEST__METHOD_LABELS:
		return (req->labels->select);
	case SMOLDER__V1__REQUEST__METHOD_STATS:
		return (req->stats->select);
	case SMOLDER__V1__REQUEST__METHOD_ANALYZE:
		return (req->analyze->select);
	case SMOLDER__V1__REQUEST__METHOD_SPAN_MERGE:
		return (req->span_merge->select);
	case SMOLDER__V1__REQUEST__METHOD_PROFILES:
		return (req->profiles->select);
	default:
		return (NULL);
	}
}

/* --- concurrent calls ------------------------------------------------------ */

enum { OP_SEND, OP_RECV };

struct rpc_op {
	struct sm_rpc_multi *m;
	uint32_t i;
	int stage;
	nng_ctx ctx;
	nng_aio *aio;
	int64_t start_ns, deadline_ns;
	struct sm_rpc_client *c;    /* set while on c->ops */
	struct rpc_op *next, **prevp;
};

struct rpc_result {
	atomic_int status;          /* SM_RPC_PENDING until done */
	int transport;              /* 0 or the transport error */
	nng_msg *msg;               /* the reply, when transport == 0 */
	struct sm_rpc_client *client;
};

struct sm_rpc_multi {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t n, started, done;
	int refs;                   /* the waiter + every call in flight */
	const char *method;
	struct rpc_result *r;
};

static struct sm_metric *m_rpc_lat, *m_rpc_direct;

static const struct sm_metric_def rpc_metric_defs[] = {
	{ &m_rpc_lat, SM_METRIC_HISTOGRAM,
	    "smolder_rpc_client_duration_seconds", "Internal RPC calls as "
	    "seen by the caller: time from send to reply, by method and "
	    "outcome.", SM_METRIC_LABELS("method", "status"), NULL, 0 },
	{ &m_rpc_direct, SM_METRIC_COUNTER, "smolder_rpc_direct_calls_total",
	    "Internal RPC calls served in the caller's thread by a server of "
	    "the same process (-target=all writes), not over nng.", NULL,
	    NULL, 0 },
};

static struct sm_metric_set rpc_metric_set = SM_METRIC_SET(rpc_metric_defs);

/*
 * The code of a smolder.v1.Response without unpacking it: field 1 (code,
 * sint32) is packed first when non-zero.  Anything unexpected is left for
 * the full unpack to judge (0 here).
 */
static int
envelope_code(const uint8_t *p, size_t n)
{
	const uint8_t *q = p + 1;
	uint64_t v;
	int64_t code;

	if (n == 0 || p[0] != 0x08)
		return (0);
	if (sm_uvarint_get(&q, p + n, &v) != 0)
		return (SM_EPROTO);
	code = sm_zigzag_dec(v);
	if (code < SM_ENOMEM || code >= SM_E_LAST_)
		return (SM_EPROTO);
	return ((int)code);
}

static const char *
status_label(int st)
{
	switch (st) {
	case 0:
		return ("ok");
	case SM_ETIMEDOUT:
		return ("timeout");
	case SM_EUNAVAIL:
		return ("unavailable");
	default:
		return ("error");
	}
}

static void
multi_unref_locked(struct sm_rpc_multi *m)
{
	int last = --m->refs == 0;

	pthread_mutex_unlock(&m->mu);
	if (!last)
		return;
	for (uint32_t i = 0; i < m->n; i++) {
		if (m->r[i].msg != NULL)
			nng_msg_free(m->r[i].msg);
	}
	sm_free(m->r);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	sm_free(m);
}

/*
 * Retiring a call.  nng 1.5.2's expiry thread takes an expired aio's
 * cancel function and its argument (the call's context) under its lock,
 * then calls the function with the lock released.  If the reply lands in
 * that window, the aio completes, and a callback that closed the context
 * at once would free it under the expiry thread, which then locks a mutex
 * inside freed memory (a distributor died so in the nng:aio:expire thread
 * under a write burst whose calls ran close to their deadline).  Freeing
 * the aio waits for an expiry in progress (nni_aio_fini waits while the
 * aio is "expiring"), so a call is retired in that order -- aio freed,
 * then context closed -- and not from its own callback, which freeing the
 * aio would wait for: a thread of this module's does it.  The client
 * counts the call as live until then, so sm_rpc_client_destroy still
 * closes the socket only after every context of it.
 */
static pthread_mutex_t retire_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t retire_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t retire_once = PTHREAD_ONCE_INIT;
static struct rpc_op *retire_head;
static bool retire_running;

static void
op_unlive(struct sm_rpc_client *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	if (--c->live == 0)
		pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void *
retire_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&retire_mu);
	for (;;) {
		struct rpc_op *op;

		while (retire_head == NULL)
			pthread_cond_wait(&retire_cv, &retire_mu);
		op = retire_head;
		retire_head = op->next;
		pthread_mutex_unlock(&retire_mu);
		nng_aio_free(op->aio);          /* waits out an expiry */
		nng_ctx_close(op->ctx);
		op_unlive(op->c);
		sm_free(op);
		pthread_mutex_lock(&retire_mu);
	}
	return (NULL);
}

static void
retire_start(void)
{
	pthread_t t;
	pthread_attr_t at;

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	retire_running = pthread_create(&t, &at, retire_main, NULL) == 0;
	pthread_attr_destroy(&at);
}

/* Retire op (aio and context); from its callback, so not here. */
static void
op_retire(struct rpc_op *op)
{
	pthread_once(&retire_once, retire_start);
	if (!retire_running) {
		/* No thread: the old order, the race left open rather than
		 * a call that never ends. */
		nng_ctx_close(op->ctx);
		nng_aio_reap(op->aio);
		op_unlive(op->c);
		sm_free(op);
		return;
	}
	/* The thread drains the list before it waits again: only a push
	 * onto an empty list needs to wake it (one wake-up per burst of
	 * calls, not per call). */
	pthread_mutex_lock(&retire_mu);
	if (retire_head == NULL)
		pthread_cond_signal(&retire_cv);
	op->next = retire_head;
	retire_head = op;
	pthread_mutex_unlock(&retire_mu);
}

/* Record call op's outcome; the op is retired (from its own callback). */
static void
op_finish(struct rpc_op *op, int transport, nng_msg *msg)
{
	struct sm_rpc_multi *m = op->m;
	struct rpc_result *r = &m->r[op->i];
	int st = transport;

	if (transport == 0)
		st = envelope_code(nng_msg_body(msg), nng_msg_len(msg));
	if (m_rpc_lat != NULL)
		sm_histogram_observe(sm_metric_child(m_rpc_lat, m->method,
		    status_label(st)), (double)(sm_mono_ns() - op->start_ns) /
		    1e9);
	/* Off the list before the aio goes (destroy cancels what is on it),
	 * counted until the context is closed (destroy then closes the
	 * socket). */
	if (op->c != NULL) {
		pthread_mutex_lock(&op->c->mu);
		if ((*op->prevp = op->next) != NULL)
			op->next->prevp = op->prevp;
		pthread_mutex_unlock(&op->c->mu);
	}
	pthread_mutex_lock(&m->mu);
	r->transport = transport;
	r->msg = msg;
	atomic_store(&r->status, st);
	m->done++;
	pthread_cond_broadcast(&m->cv);
	multi_unref_locked(m);
	if (op->aio != NULL)
		op_retire(op);
	else {
		op_unlive(op->c);
		sm_free(op);
	}
}

static void
op_cb(void *arg)
{
	struct rpc_op *op = arg;
	int nrv = nng_aio_result(op->aio);
	int64_t left;

	if (op->stage == OP_SEND) {
		if (nrv != 0) {
			/* Not sent: the message is still ours. */
			nng_msg_free(nng_aio_get_msg(op->aio));
			op_finish(op, rpc_map(nrv), NULL);
			return;
		}
		op->stage = OP_RECV;
		pthread_mutex_lock(&op->c->mu);
		if (op->c->closing) {
			pthread_mutex_unlock(&op->c->mu);
			op_finish(op, SM_EUNAVAIL, NULL);
			return;
		}
		pthread_mutex_unlock(&op->c->mu);
		left = (op->deadline_ns - sm_mono_ns()) / 1000000;
		nng_aio_set_timeout(op->aio, left > 0 ? (nng_duration)left : 1);
		nng_ctx_recv(op->ctx, op->aio);
		return;
	}
	if (nrv != 0) {
		op_finish(op, rpc_map(nrv), NULL);
		return;
	}
	op_finish(op, 0, nng_aio_get_msg(op->aio));
}

int
sm_rpc_multi_create(uint32_t n, const char *method, struct sm_rpc_multi **out)
{
	struct sm_rpc_multi *m;

	sm_metrics_register_once(&rpc_metric_set);
	*out = NULL;
	if ((m = sm_calloc(1, sizeof(*m))) == NULL ||
	    (m->r = sm_calloc(SM_MAX(n, 1), sizeof(*m->r))) == NULL) {
		sm_free(m);
		return (SM_ENOMEM);
	}
	pthread_mutex_init(&m->mu, NULL);
	sm_cond_init(&m->cv);
	m->n = n;
	m->refs = 1;
	m->method = method;
	for (uint32_t i = 0; i < n; i++)
		atomic_init(&m->r[i].status, SM_RPC_PENDING);
	*out = m;
	return (0);
}

/*
 * The request message of one call, in a function of its own so that
 * tests/lsan.supp can name exactly this allocation: nng 1.5.2 (Debian 12)
 * loses one reference to a req0 request when a pipe closes while the
 * request is being handed to it (req0_pipe_close closes the pipe's send
 * aio before it takes the socket lock; req0_run_send_queue, on another
 * thread, still finds the pipe ready, clones the message into that aio,
 * and tcptran_pipe_send returns on the failed nni_aio_begin without
 * freeing it).  At most one message per connection torn down, not per
 * call; nothing in Smolder can release it.  Kept out of line so the name
 * is in every allocation stack.
 */
static int __attribute__((noinline))
rpc_request_msg(nng_msg **out, const void *req, size_t len)
{
	nng_msg *msg;
	int nrv;

	*out = NULL;
	if ((nrv = nng_msg_alloc(&msg, 0)) != 0)
		return (nrv);
	if (len != 0 && (nrv = nng_msg_append(msg, req, len)) != 0) {
		nng_msg_free(msg);
		return (nrv);
	}
	*out = msg;
	return (0);
}

/* The direct call running on this thread: its bytes and their message. */
static _Thread_local struct {
	const void *req, *msg;
} rpc_direct_cur;

const void *
sm_rpc_direct_msg(const void *req)
{
	return (req != NULL && req == rpc_direct_cur.req ?
	    rpc_direct_cur.msg : NULL);
}

/*
 * Call op in this thread when c's URL names a direct server of this
 * process: the server's handler, its reply as an nng message, op
 * finished.  A request above the server's recv_max is left to the
 * transport, which drops it as it would from any peer.  Returns false
 * (op untouched) when the call is not direct.
 */
static bool
rpc_direct_call(struct rpc_op *op, struct sm_rpc_client *c, const void *req,
    size_t len, const void *msg)
{
	struct sm_rpc_server *s;
	struct sm_buf resp = SM_BUF_INIT;
	nng_msg *rep = NULL;
	int nrv;

	pthread_rwlock_rdlock(&rpc_direct_lock);
	for (s = rpc_direct; s != NULL; s = s->direct_next) {
		if (strcmp(s->url, c->url) == 0)
			break;
	}
	if (s == NULL || len > s->recv_max) {
		pthread_rwlock_unlock(&rpc_direct_lock);
		return (false);
	}
	rpc_direct_cur.req = msg != NULL ? req : NULL;
	rpc_direct_cur.msg = msg;
	rpc_handle(s, req, len, &resp);
	rpc_direct_cur.req = rpc_direct_cur.msg = NULL;
	pthread_rwlock_unlock(&rpc_direct_lock);
	if (m_rpc_direct != NULL)
		sm_counter_inc(sm_metric_child0(m_rpc_direct));
	if ((nrv = nng_msg_alloc(&rep, 0)) == 0 && resp.len != 0 &&
	    (nrv = nng_msg_append(rep, resp.b, resp.len)) != 0) {
		nng_msg_free(rep);
		rep = NULL;
	}
	sm_buf_fini(&resp);
	op_finish(op, nrv != 0 ? rpc_map(nrv) : 0, rep);
	return (true);
}

void
sm_rpc_multi_start(struct sm_rpc_multi *m, uint32_t i,
    struct sm_rpc_client *c, const void *req, size_t len, int timeout_ms,
    int flags)
{
	sm_rpc_multi_start_msg(m, i, c, req, len, NULL, timeout_ms, flags);
}

void
sm_rpc_multi_start_msg(struct sm_rpc_multi *m, uint32_t i,
    struct sm_rpc_client *c, const void *req, size_t len, const void *decoded,
    int timeout_ms, int flags)
{
	struct rpc_op *op;
	nng_msg *msg = NULL;
	int nrv;

	SM_ASSERT(i < m->n);
	pthread_mutex_lock(&m->mu);
	SM_ASSERT(m->r[i].client == NULL);
	m->r[i].client = c;
	m->started++;
	m->refs++;
	pthread_mutex_unlock(&m->mu);
	if ((op = sm_calloc(1, sizeof(*op))) == NULL) {
		pthread_mutex_lock(&m->mu);
		m->r[i].transport = SM_ENOMEM;
		atomic_store(&m->r[i].status, SM_ENOMEM);
		m->done++;
		pthread_cond_broadcast(&m->cv);
		multi_unref_locked(m);
		return;
	}
	op->m = m;
	op->i = i;
	op->start_ns = sm_mono_ns();
	op->deadline_ns = op->start_ns + (int64_t)timeout_ms * 1000000;
	if ((flags & SM_RPC_DIRECT) && rpc_direct_call(op, c, req, len, decoded))
		return;
	if ((flags & SM_RPC_FAILFAST) && !sm_rpc_client_connected(c)) {
		op_finish(op, SM_EUNAVAIL, NULL);
		return;
	}
	if ((nrv = nng_ctx_open(&op->ctx, c->sock)) != 0) {
		op_finish(op, rpc_map(nrv), NULL);
		return;
	}
	if ((nrv = nng_aio_alloc(&op->aio, op_cb, op)) != 0) {
		nng_ctx_close(op->ctx);
		op_finish(op, rpc_map(nrv), NULL);
		return;
	}
	if ((nrv = rpc_request_msg(&msg, req, len)) != 0) {
		op_finish(op, rpc_map(nrv), NULL);
		return;
	}
	op->stage = OP_SEND;
	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		pthread_mutex_unlock(&c->mu);
		nng_msg_free(msg);
		op_finish(op, SM_EUNAVAIL, NULL);
		return;
	}
	op->c = c;
	if ((op->next = c->ops) != NULL)
		c->ops->prevp = &op->next;
	op->prevp = &c->ops;
	c->ops = op;
	c->live++;
	pthread_mutex_unlock(&c->mu);
	nng_aio_set_msg(op->aio, msg);
	nng_aio_set_timeout(op->aio, timeout_ms > 0 ? timeout_ms : 1);
	nng_ctx_send(op->ctx, op->aio);
}

/*
 * Cancel every call in flight on c and wait for their callbacks.  The
 * cancel is repeated every 10 ms: a callback between its send and its
 * receive misses one, and then sees closing.
 */
static void
client_cancel_ops(struct sm_rpc_client *c)
{
	pthread_mutex_lock(&c->mu);
	c->closing = true;
	while (c->live != 0) {
		for (struct rpc_op *op = c->ops; op != NULL; op = op->next)
			nng_aio_cancel(op->aio);
		(void)sm_cond_wait_until(&c->cv, &c->mu,
		    sm_mono_ns() + 10 * 1000000);
	}
	pthread_mutex_unlock(&c->mu);
}

void
sm_rpc_multi_wait(struct sm_rpc_multi *m)
{
	pthread_mutex_lock(&m->mu);
	while (m->done < m->started)
		pthread_cond_wait(&m->cv, &m->mu);
	pthread_mutex_unlock(&m->mu);
}

int
sm_quorum_voter(const struct sm_rpc_multi *m, const struct sm_quorum *q,
    uint32_t v)
{
	uint32_t step = q->stride != 0 ? q->stride : m->n;
	int st = SM_RPC_ABSENT;

	SM_ASSERT(v < m->n);
	for (uint32_t i = v; i < m->n; i += step) {
		int c;

		if (m->r[i].client == NULL)
			continue;          /* not started */
		c = atomic_load(&((struct sm_rpc_multi *)m)->r[i].status);
		if (c != 0 && c != SM_RPC_PENDING)
			return (c);        /* failed */
		if (c == SM_RPC_PENDING || st == SM_RPC_ABSENT)
			st = c;
	}
	return (st);
}

/* Every group met (1), one doomed (-1), or neither yet (0).  Lock held. */
static int
quorum_eval(const struct sm_rpc_multi *m, const struct sm_quorum *q)
{
	uint32_t ng = q->ngroups != 0 ? q->ngroups : 1;
	int all = 1;

	for (uint32_t g = 0; g < ng; g++) {
		uint32_t lo = q->ngroups != 0 ? q->group_off[g] : 0;
		uint32_t hi = q->ngroups != 0 ? q->group_off[g + 1] :
		    q->nvoters;
		uint32_t ok = 0, silent = 0;

		for (uint32_t k = lo; k < hi; k++) {
			int st = sm_quorum_voter(m, q, q->ngroups != 0 ?
			    q->group_voter[k] : k);

			ok += st == 0;
			silent += st == SM_RPC_PENDING;
		}
		if (ok >= q->need)
			continue;
		if (ok + silent < q->need)
			return (-1);
		all = 0;
	}
	return (all);
}

enum sm_quorum_end
sm_rpc_multi_wait_quorum(struct sm_rpc_multi *m, const struct sm_quorum *q)
{
	int64_t start = sm_mono_ns(), deadline = INT64_MAX;
	enum sm_quorum_end end;

	SM_ASSERT(q->nvoters <= m->n);
	pthread_mutex_lock(&m->mu);
	for (;;) {
		int e;

		if (m->done == m->started) {
			end = SM_QUORUM_DONE;
			break;
		}
		if ((e = quorum_eval(m, q)) < 0) {
			end = SM_QUORUM_DOOMED;
			break;
		}
		if (e > 0 && q->grace_ns == SM_QUORUM_NOW) {
			end = SM_QUORUM_MET;
			break;
		}
		if (e > 0 && q->grace_ns > 0 && deadline == INT64_MAX) {
			int64_t now = sm_mono_ns();

			deadline = now + SM_MAX(q->grace_ns, now - start);
		}
		if (!sm_cond_wait_until(&m->cv, &m->mu, deadline)) {
			end = m->done == m->started ? SM_QUORUM_DONE :
			    SM_QUORUM_MET;
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return (end);
}

int
sm_rpc_multi_status(const struct sm_rpc_multi *m, uint32_t i)
{
	SM_ASSERT(i < m->n);
	return (atomic_load(&((struct sm_rpc_multi *)m)->r[i].status));
}

int
sm_rpc_multi_reply(const struct sm_rpc_multi *m, uint32_t i,
    const uint8_t **data, size_t *len)
{
	const struct rpc_result *r = &m->r[i];
	int st;

	*data = NULL;
	*len = 0;
	pthread_mutex_lock((pthread_mutex_t *)&m->mu);
	st = atomic_load(&((struct rpc_result *)r)->status);
	if (st != SM_RPC_PENDING && r->transport == 0) {
		*data = nng_msg_body(r->msg);
		*len = nng_msg_len(r->msg);
		st = 0;
	}
	pthread_mutex_unlock((pthread_mutex_t *)&m->mu);
	return (st == SM_RPC_PENDING ? SM_RPC_PENDING : st != 0 ? r->transport :
	    0);
}

int
sm_rpc_multi_response(const struct sm_rpc_multi *m, uint32_t i,
    struct sm_arena *arena, Smolder__V1__Response **out, struct sm_err *err)
{
	ProtobufCAllocator al = sm_arena_pbc(arena);
	Smolder__V1__Response *resp;
	const char *url = m->r[i].client != NULL ?
	    m->r[i].client->url : "?";
	const uint8_t *data;
	size_t len;
	int rv;

	*out = NULL;
	if ((rv = sm_rpc_multi_reply(m, i, &data, &len)) != 0) {
		if (rv == SM_RPC_PENDING)
			rv = SM_ETIMEDOUT;
		return (sm_err_set(err, rv, "rpc to %s: %s", url,
		    sm_strerror(rv)));
	}
	resp = smolder__v1__response__unpack(&al, len,
	    data != NULL ? data : (const uint8_t *)"");
	if (resp == NULL)
		return (sm_err_set(err, SM_EPROTO, "rpc to %s: undecodable "
		    "response (%zu bytes)", url, len));
	if (resp->code != 0) {
		rv = resp->code;
		if (rv < SM_ENOMEM || rv >= SM_E_LAST_)
			rv = SM_EPROTO;
		return (sm_err_set(err, rv, "%s: %s", url,
		    resp->message != NULL ? resp->message : sm_strerror(rv)));
	}
	*out = resp;
	return (0);
}

void
sm_rpc_multi_hold(struct sm_rpc_multi *m)
{
	pthread_mutex_lock(&m->mu);
	m->refs++;
	pthread_mutex_unlock(&m->mu);
}

void
sm_rpc_multi_destroy(struct sm_rpc_multi *m)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->mu);
	multi_unref_locked(m);
}
