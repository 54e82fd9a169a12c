/*
 * grpc.h -- gRPC over HTTP/2 (cleartext with prior knowledge, or TLS) for every
 * Connect service the HTTP server serves: the only file that includes
 * <nghttp2/nghttp2.h> (docs/style.md §11).
 *
 * Where.  On a listener of its own, -grpc.listen-address (off when
 * empty).  libmicrohttpd speaks no HTTP/2, and the HTTP listener's
 * accept path (its connection limit leaves excess connections in the
 * backlog, tested) stays MHD's, so gRPC does not share its port: see
 * docs/compatibility.md for the decision.
 *
 * TLS.  With cfg.tls (the HTTP listener's certificate and client-auth
 * policy, tls.h) the listener speaks gRPC over TLS only: the handshake
 * must finish within the 10 s the preface has, negotiate "h2" by ALPN and
 * meet the client-certificate policy, else the connection is closed.
 *
 * How.  A gRPC call is a gRPC-web call in HTTP/2 clothes: the same
 * length-prefixed message, the same grpc-timeout and grpc-encoding; only
 * the trailers travel as HTTP/2 trailers instead of a last frame in the
 * body.  So each gRPC stream becomes one gRPC-web request on the HTTP
 * server (connect.h), handed to it as a connection of its own
 * (sm_http_adopt: a socketpair, with the gRPC client's address): auth,
 * tenancy, scopes, worker pools and fair share, body caps, request ids,
 * logs, metrics and the error mapping are the HTTP server's, one
 * implementation for Connect, gRPC-web and gRPC.  The answer's data
 * frames go back as DATA, its trailer frame as HTTP/2 trailers; a
 * trailers-only gRPC-web answer (an error) becomes a trailers-only gRPC
 * answer; an HTTP rejection (401, 403, 404, 413, 503, ...) becomes the
 * gRPC status of its Connect code (404 -> unimplemented, 413 ->
 * resource_exhausted, as gRPC's spec has them).
 *
 * Protocol checks, as grpc-go's server makes them: a method other than
 * POST is answered :status 405, a content-type other than
 * application/grpc[+proto|+json] :status 415; a request message larger
 * than max_recv_msg gets resource_exhausted without being buffered.
 *
 * Bounds.  At most conn_limit connections (more wait in the backlog) and
 * per_ip_limit from one address (more are closed at once); at most
 * max_streams concurrent streams per connection (SETTINGS; more are
 * refused by nghttp2); 16 KiB of request headers per stream; the
 * connection preface within 10 s; a connection with no stream open and
 * no traffic for idle_timeout_s is closed with GOAWAY; a stream whose
 * request has not arrived whole idle_timeout_s after it opened is reset;
 * an answer over max_send_msg is replaced by resource_exhausted.
 *
 * Threads.  One acceptor thread and one thread per connection, which
 * polls its socket and the socketpairs of its streams; a connection's
 * state (its nghttp2 session and streams) is touched by its own thread
 * only.  The server's mutex guards the connection list and counts.
 *
 * Errors.  sm_grpc_start() returns SM_EINVAL (bad address) or SM_EIO
 * (bind, thread) with the reason in err; after start, failures are per
 * stream (a gRPC status) or per connection (closed, logged at debug).
 */
#ifndef SM_GRPC_H
#define SM_GRPC_H

#include <stdbool.h>

#include "http.h"
#include "sm.h"

struct sm_grpc;

struct sm_grpc_cfg {
	const char *listen;          /* "host:port", ":port" or "port" */
	unsigned conn_limit;         /* concurrent connections (>= 1) */
	unsigned per_ip_limit;       /* 0 = none */
	unsigned idle_timeout_s;     /* (> 0) */
	unsigned max_streams;        /* concurrent streams per connection */
	size_t max_recv_msg;         /* request message cap, bytes */
	size_t max_send_msg;         /* response message cap, bytes */
	struct sm_tls *tls;          /* TLS (tls.h), borrowed; NULL: h2c */
};

/*
 * Defaults: no listener (listen ""), 1024 connections, 256 per IP,
 * 120 s, 100 streams, 16 MiB received, 128 MiB sent.
 */
void sm_grpc_cfg_default(struct sm_grpc_cfg *cfg);

/*
 * Listen on cfg->listen and serve the routes of `http` (borrowed; it must
 * be started before and stopped after this server).  Returns 0 and *out,
 * or an SM_E* code with the reason in err.
 */
int sm_grpc_start(const struct sm_grpc_cfg *cfg, struct sm_http *http,
    struct sm_grpc **out, struct sm_err *err);

/* The bound TCP port (useful with port 0). */
unsigned sm_grpc_port(const struct sm_grpc *g);

/*
 * Stop accepting; give streams in flight up to 2 s to be answered, then
 * close every connection and join every thread.  Frees the server.  NULL
 * is a no-op.  Blocks.
 */
void sm_grpc_stop(struct sm_grpc *g);

/*
 * Tests only (tests/fuzz/fuzz_grpc.c): with `answer` false, feed `data`
 * to a fresh server session as a client's bytes, `chunk` bytes at a
 * time, as one connection would (what the server writes back is
 * dropped; a whole request is answered unavailable, there being no HTTP
 * server); with `answer` true, take `data` as the HTTP server's answer to
 * a call and translate it.  Everything is freed.  Returns the number of
 * requests that arrived whole, or -1 when nghttp2 could not start.
 */
int sm_grpc_feed(const uint8_t *data, size_t len, size_t chunk, bool answer);

#endif /* SM_GRPC_H */
