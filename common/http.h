/*
 * http.h -- Smolder's HTTP server: the only file that includes
 * <microhttpd.h> (docs/style.md §11).
 *
 * One server per process (the `server` module) listens on
 * -http.listen-address; components register routes on it before it starts.
 * libmicrohttpd runs `threads` event threads (internal epoll) that read
 * requests and send replies.  Handlers that may block run elsewhere, so a
 * slow query never holds up a health probe or a write: a
 * route's scope picks where its handler runs --
 *   SM_SCOPE_WRITE            the write pool (`write_workers` threads);
 *   SM_SCOPE_READ, _ADMIN     the query pool (`query_workers` threads):
 *                             queries, flushes, compactor runs;
 *   SM_SCOPE_PUBLIC           inline on the event thread: /ready,
 *                             /metrics and the web UI's static files,
 *                             which never block.
 * A pool of 0 workers runs its routes inline too.  Requests wait for a
 * worker in FIFO order; there are at most as many as connections.
 *
 * Bounds (docs/reliability.md §3, "MHD has no body cap"): every listener limits
 * connections (total and per IP), idle time, the time to send a request's
 * headers (a deadline, not an idle timer: a client trickling a byte at a
 * time is closed at it; slowloris), header memory, and request bodies.  A body larger than the route's limit is refused as soon as
 * Content-Length or the running byte count exceeds it, without buffering
 * the excess: a too-large Content-Length is answered 413 at once; a chunked
 * body that outgrows the limit is drained (at most 256 KiB more) and then
 * answered 413, or the connection is closed.  MHD's PostProcessor is never
 * used.  Framing by RFC 9112: Content-Length with Transfer-Encoding, or
 * whitespace before a field's colon, is 400, a transfer coding other than
 * a lone "chunked" 501, each answered at once and the connection closed;
 * two Authorization fields, or an HTTP/1.1 request without Host, are 400.
 *
 * HTTPS: with cfg.tls (tls.h) the listener speaks TLS only (a plaintext
 * client fails the handshake); the certificate is tls.h's, reloaded when
 * its files change, and each request is checked against the client-auth
 * policy first (401 without a required certificate, 403 with one not from
 * the CA).  Adopted connections (sm_http_adopt) go to a second, plaintext
 * daemon with no listen socket: they come from this process.
 *
 * The admin listener (cfg.admin_listen): a second listener, same routes,
 * same authentication, meant for a private network.  When it exists,
 * the cluster operations (sm_http_route() with a method other than GET:
 * flush, compactor runs, shutdown, store-gateway syncs) answer 403 on the
 * main listener and work on the admin one only; read-only pages (GET
 * /ring) and tenants' own admin calls (settings) stay.  /metrics (it
 * names every tenant) moves there too with cfg.metrics_on_admin; by
 * default it stays where Prometheus scrapes it (the API port), so turning
 * the admin listener on breaks no scrape configuration.
 * Without it, cluster operations stay on the main listener -- except in
 * header mode (multitenancy with no API keys: sm_auth_header_trusted),
 * where anyone can claim any tenant, so they answer 403 everywhere until
 * an admin listener is configured.
 *
 * Routing is exact on the path (no query string); a route may be bound to
 * one method or to all (method NULL).  A path that exists under another
 * method gets 405; an unknown path 404.
 *
 * Request lifetime: the sm_http_req and everything it returns (query
 * values, headers, body) is valid only during the handler call.  A handler
 * must answer exactly once with one of the sm_http_reply* functions; if it
 * returns without answering, the server answers 500 and logs a bug.
 *
 * Locking: route registration is not thread-safe and must finish before
 * sm_http_start(); afterwards the route table is read-only.
 */
#ifndef SM_HTTP_H
#define SM_HTTP_H

#include <stdbool.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "buf.h"
#include "sm.h"

struct sm_http;
struct sm_http_req;
struct sm_tls;

struct sm_http_cfg {
	const char *listen;          /* "host:port", ":port" or "port" */
	unsigned threads;            /* event threads (>= 1) */
	unsigned write_workers;      /* write pool (0 = inline) */
	unsigned query_workers;      /* query pool (0 = inline) */
	unsigned conn_limit;         /* total concurrent connections */
	unsigned per_ip_limit;       /* 0 = no per-IP limit */
	unsigned conn_timeout_s;     /* idle timeout, seconds (> 0) */
	size_t default_body_max;     /* body cap for routes that pass 0 */
	struct sm_tls *tls;          /* HTTPS (tls.h), borrowed; NULL: plain */
	int64_t header_timeout_ms;   /* a request's headers, 0 = no bound */
	int64_t body_min_rate;       /* bytes/s a body keeps up after the
	                              * header timeout's grace (http.c, "Body
	                              * rate"); 0 = none; needs the former */
	const char *admin_listen;    /* admin listener address; NULL: none */
	bool metrics_on_admin;       /* /metrics on the admin listener only */
};

/*
 * Defaults: ":4040", 4 threads, 8 write and 4 query workers, 1024
 * connections, 256 per IP, 120 s, 1 MiB, headers within 30 s.
 * Flood defaults: one address can hold at most a quarter of
 * the connections, so an idle flood from it (1,100 keep-alives) leaves
 * room for everyone else.  The inactivity timeout closes idle keep-alives
 * and stalled headers or bodies (libmicrohttpd 0.9 has one inactivity
 * timeout, no separate header or total-request deadline); it stays at
 * 120 s: a 30 s default wedged the launcher test (test_deploy), which is
 * not understood yet.
 */
void sm_http_cfg_default(struct sm_http_cfg *cfg);

typedef void (*sm_http_fn)(struct sm_http_req *req, void *arg);

/*
 * Create a server (not listening yet).  Returns 0 and *out, or SM_EINVAL
 * (bad listen address, in err) or SM_ENOMEM.
 */
int sm_http_create(const struct sm_http_cfg *cfg, struct sm_http **out,
    struct sm_err *err);

/*
 * Register `fn` for `path` and `method` ("GET", "POST", ... or NULL for
 * any), needing `scope` (auth.h: SM_SCOPE_PUBLIC, _READ, _WRITE, _ADMIN).
 * `body_max` caps the request body (0 = the server default).
 * Returns 0, SM_EEXIST (same path+method twice) or SM_ENOMEM.
 */
int sm_http_route_as(struct sm_http *h, unsigned scope, const char *method,
    const char *path, sm_http_fn fn, void *arg, size_t body_max);

/*
 * sm_http_route_as() with SM_SCOPE_ADMIN: undeclared routes are admin.
 * These are the cluster operations (flush, compactor runs, shutdown,
 * syncs): one with a method other than GET answers only on the admin
 * listener when there is one, and not at all in header mode without one
 * (see "The admin listener" above).  Tenant-scoped admin calls (settings)
 * register with sm_http_route_as().
 */
int sm_http_route(struct sm_http *h, const char *method, const char *path,
    sm_http_fn fn, void *arg, size_t body_max);

/*
 * Authenticate requests with `a` (borrowed; must outlive the server).
 * Before sm_http_start().  Without it no route is checked and
 * sm_http_tenant() falls back to the X-Scope-OrgID header.
 *
 * Checks happen once the headers are in, before the body is read: a
 * request the route's scope refuses is answered 400 (two X-Scope-OrgID
 * headers, invalid tenant id), 401 (no or unknown key, no org id; with
 * WWW-Authenticate in keys mode) or 403 (the key lacks the scope).
 */
struct sm_auth;
void sm_http_set_auth(struct sm_http *h, struct sm_auth *a);

/*
 * Start listening.  Returns 0, SM_EIO with the reason in err, or SM_EINVAL
 * when the server was started before.
 */
int sm_http_start(struct sm_http *h, struct sm_err *err);

/* Requests waiting for a pool worker now (also a gauge in /metrics). */
unsigned sm_http_waiting(struct sm_http *h);

/*
 * Serve the connected socket `fd` as if the server had accepted it from
 * `sa` (per-IP limits and logs see that address): how the gRPC listener
 * (grpc.h) hands each call over.  Takes `fd` in every case.  Returns 0,
 * or SM_EUNAVAIL (stopping, not started, or at a connection limit).
 */
int sm_http_adopt(struct sm_http *h, int fd, const struct sockaddr *sa,
    socklen_t salen, struct sm_err *err);

/*
 * Parse a listen address, "host:port", ":port" or "port" (host: an IPv4
 * literal or "localhost"; empty: every interface).  0 or SM_EINVAL.
 */
int sm_http_parse_listen(const char *s, struct sockaddr_in *sa,
    struct sm_err *err);

/* The bound TCP port (useful with port 0).  0 before start. */
unsigned sm_http_port(const struct sm_http *h);

/* The admin listener's bound port; 0 without one or before start. */
unsigned sm_http_admin_port(const struct sm_http *h);

/*
 * Stop accepting, wait for running handlers to finish, close connections.
 * Idempotent.  Blocks; must not be called from a handler.
 */
void sm_http_stop(struct sm_http *h);

/* Free the server (stops it first).  NULL is a no-op. */
void sm_http_destroy(struct sm_http *h);

/* --- inside a handler ---------------------------------------------------- */

const char *sm_http_method(const struct sm_http_req *r);
const char *sm_http_path(const struct sm_http_req *r);

/*
 * First value of query argument `key`, URL-decoded ("+" is a space, as Go's
 * url.ParseQuery has it); NULL when absent.  "?a" gives "".
 */
const char *sm_http_query(struct sm_http_req *r, const char *key);

/*
 * Call fn for every query argument in order (repeated keys included).
 * Stops early when fn returns non-zero.
 */
void sm_http_query_each(struct sm_http_req *r,
    int (*fn)(void *arg, const char *key, const char *value), void *arg);

/* Header value (case-insensitive name) or NULL. */
const char *sm_http_header(struct sm_http_req *r, const char *name);

/* The request body (may be empty, never NULL; NUL-terminated, not counted). */
const unsigned char *sm_http_body(const struct sm_http_req *r, size_t *len);

/*
 * The request's tenant.  With an authenticator (sm_http_set_auth) this is
 * what it resolved (the key's tenant, the header, or "anonymous");
 * without one it is sm_tenant_resolve(multitenancy, X-Scope-OrgID) with
 * two headers refused.  Returns 0 and *out (valid during the handler),
 * SM_EAUTH or SM_EINVAL with the reason in err.
 */
int sm_http_tenant(struct sm_http_req *r, bool multitenancy,
    const char **out, struct sm_err *err);

/*
 * The request id: the client's X-Request-Id when it is 1..64 characters
 * of [A-Za-z0-9._:-], else a fresh 16-hex-digit id.  Every response
 * carries it in X-Request-Id, and every 5xx is logged with it.
 */
const char *sm_http_request_id(const struct sm_http_req *r);

/* The remote address as text ("127.0.0.1:51234"). */
const char *sm_http_remote(const struct sm_http_req *r);

/* Add a response header; call before the reply.  Copies both strings. */
void sm_http_set_header(struct sm_http_req *r, const char *name,
    const char *value);

/* Answer with a copy of `body`.  `ctype` may be NULL (no Content-Type). */
void sm_http_reply(struct sm_http_req *r, int status, const char *ctype,
    const void *body, size_t len);

/* Answer with the bytes of `b`, taking them (the buffer is left empty). */
void sm_http_reply_buf(struct sm_http_req *r, int status, const char *ctype,
    struct sm_buf *b);

/*
 * Answer with a body produced piece by piece while it is sent, so a large
 * answer never exists whole in memory (four concurrent
 * collapsed renders of a big series held four copies of a 20+ MiB text).
 * The body goes out with chunked transfer encoding (HTTP/1.0 clients: until
 * the connection closes).  fn(arg, out) appends the next piece to `out`
 * (empty at each call; aim for tens of KiB) and returns 0 (more follows),
 * 1 (that was the last piece) or an SM_E* error: the status line is gone
 * by then, so an error (or an `out` error) aborts the connection, which
 * the client sees as a truncated body.  done(arg) (may be NULL) is called
 * exactly once when the response is released -- sent, aborted, or never
 * queued -- and frees what fn needs.  fn and done run on an HTTP thread
 * after the handler returned, so `arg` must not point into the handler's
 * stack or the request.
 */
typedef int (*sm_http_stream_fn)(void *arg, struct sm_buf *out);
void sm_http_reply_stream(struct sm_http_req *r, int status,
    const char *ctype, sm_http_stream_fn fn, void (*done)(void *arg),
    void *arg);

/* Answer with printf-style text/plain; charset=utf-8 and a trailing \n. */
void sm_http_reply_text(struct sm_http_req *r, int status, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));

/*
 * Answer with Pyroscope's JSON error body {"code":"<code>","message":"..."}
 * (docs/wire-formats.md §2 and §5): `code` is a Connect code such as "invalid_argument".
 *
 * 5xx answers never show internals to the client: the full message is
 * logged with the request id; the client gets it with file-system paths
 * replaced by "[path]" and addresses by "[address]" (the cause, such as
 * "No space left on device", stays), or, for codes internal and unknown,
 * a generic message, both with the request id, e.g.
 *   {"code":"internal","message":"internal error (request id 1f2e...)"}.
 */
void sm_http_reply_error(struct sm_http_req *r, int status, const char *code,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* True once a reply has been given. */
bool sm_http_replied(const struct sm_http_req *r);

/* The status of the reply queued so far (0 = none yet). */
int sm_http_status(const struct sm_http_req *r);

/*
 * The plain HTTP API's status and error code for an SM_E* code:
 * sm_err_wire() (sm.h; the one table, in common/sm.c).
 */
void sm_http_status_for(int rv, int *status, const char **code);

/*
 * Answer the failure `rv` (an SM_E* code) with its status and code
 * (sm_http_status_for) and err's message, or sm_strerror(rv) when err
 * has none: the one reply of handlers whose helpers return SM_E* codes.
 */
void sm_http_reply_rv(struct sm_http_req *r, int rv,
    const struct sm_err *err);

#endif /* SM_HTTP_H */
