/*
 * rpc.h -- internal RPC over nng REQ/REP: the only file that includes
 * <nng/nng.h> (docs/style.md §11).
 *
 * A server binds a REP socket to a URL (inproc://name in -target=all,
 * tcp://host:port in a cluster) and runs `workers` threads, each owning an
 * nng context and looping receive -> handler -> send; a handler may block.
 * A client dials a REQ socket and issues concurrent calls, one nng context
 * per call, each with its own deadline.
 *
 * Message bodies are opaque bytes here; smolder.v1.Request/Response
 * (proto/smolder/v1/rpc.proto) are packed and unpacked by the helpers at
 * the bottom, so the transport never depends on the message set.
 *
 * Bounds (docs/reliability.md §3): every socket sets NNG_OPT_RECVMAXSZ before it
 * listens or dials, so a peer announcing a 2^60-byte frame is dropped
 * without the allocation; sends and receives have timeouts; the REQ resend
 * timer is disabled (NNG_DURATION_INFINITE) so a slow server is never sent
 * a duplicate write -- a lost reply surfaces as SM_ETIMEDOUT instead, and
 * idempotency by profile id is the ingester's job.
 *
 * Connections: nng has no connection limit, so the server counts its pipes
 * (nng_pipe_notify) and closes any pipe beyond `max_conns` before it is
 * added; TCP keepalive is on so a vanished peer's pipe is reaped (after
 * hours: the ring redials a member that stops answering its probes, see
 * sm_rpc_client_redial).  A client
 * tracks whether it has a connected pipe (sm_rpc_client_connected), and a
 * call made with SM_RPC_FAILFAST on a client without one fails at once
 * with SM_EUNAVAIL instead of queueing until its deadline: the ring only
 * routes to members it has just heard from, so a missing pipe means the
 * peer is gone.
 *
 * Concurrent calls (sm_rpc_multi) are nng aio state machines -- send, then
 * receive on the call's own context -- with no thread per call: the
 * querier's fan-out and the distributor's replication both start every
 * call, then wait on one condition variable until all answered or until
 * their own predicate (a write quorum) is satisfied.  Calls still in
 * flight when the waiter leaves finish in the background; the multi is
 * reference-counted by the waiter and by each pending call.
 *
 * Direct calls.  In -target=all the distributor and its
 * ingester share the process, and handing every write through inproc://
 * cost two thread switches plus nng's copies on one core (bench B1: 15%
 * of the server in context switches).  A server started with cfg.direct
 * is registered by URL; sm_rpc_multi_start() with SM_RPC_DIRECT on a
 * client of that URL runs the server's handler in the caller's thread on
 * the same request bytes and records its reply bytes exactly as a worker
 * would have sent them, so the caller sees the same statuses and
 * responses (common/rpc_test.c compares both paths).  What differs: the
 * call cannot time out (it is the caller's own CPU time; the handler
 * bounds its own work), and it does not take one of the server's
 * workers.  The handler must not keep thread state across calls (the
 * ingester's per-request deadline is cleared before it returns).  Only
 * the distributor's writes use it; queries keep the workers, whose count
 * bounds them.  sm_rpc_server_stop() waits for direct calls in progress.
 * A caller that built the request as a message before packing it may hand
 * that message along (sm_rpc_multi_start_msg): the handler of a direct
 * call then finds it with sm_rpc_direct_msg() and need not unpack the
 * bytes it was packed into (the ingester's unpack of a write was 3.4 % of
 * the single binary's ingest samples, B1).  The message must be exactly
 * what unpacking those bytes gives, strings never NULL (protobuf-c gives
 * "" for an absent one), and it stays the caller's, read-only, for the
 * call.  Over nng the message is ignored: the bytes are what travels.
 *
 * Reserved workers.  A server whose requests may all block (a
 * store-gateway's reads, with the bucket hung) would leave none of its
 * workers to answer the rings' health probes, and be declared dead.
 * With cfg.reserve = R and a cfg.light classifier, at most workers - R
 * workers run requests that are not light; a worker that receives one
 * beyond that parks it (request and nng context, FIFO, at most 4096;
 * beyond, SM_ELIMIT) and goes back to receiving, and a worker that
 * finishes a heavy request serves the parked ones first.  So R workers
 * always answer light requests at once, and nothing is refused that
 * would have queued before.
 *
 * Teardown is close -> stop -> fini (docs/style.md §8): sm_rpc_server_stop()
 * stops the workers (each finishes the request in hand), joins them, then
 * closes the socket.  Closing waits at most 5 s on nng (rpc.c, "Closing a
 * socket, bounded": nng 1.5 can hang there for ever); past that the stop
 * returns with a warning and a helper thread finishes the close and the
 * freeing.  sm_rpc_client_destroy() closes the same way.
 * Locking: a client may be shared by any number of threads.
 */
#ifndef SM_RPC_H
#define SM_RPC_H

#include <stdbool.h>

#include "arena.h"
#include "buf.h"
#include "sm.h"

#include "smolder/v1/rpc.pb-c.h"

struct sm_rpc_server;
struct sm_rpc_client;

/*
 * Handle one request: `req` holds the request bytes; append the response
 * bytes to `resp`.  The return value is logged when non-zero (the handler
 * should still have written a Response carrying the error code); when resp
 * is empty the server answers with an empty message.
 */
typedef int (*sm_rpc_handler)(void *arg, const uint8_t *req, size_t len,
    struct sm_buf *resp);

struct sm_rpc_server_cfg {
	const char *url;           /* "inproc://x" or "tcp://host:port" */
	unsigned workers;          /* concurrent handlers (>= 1) */
	size_t recv_max;           /* largest accepted request, bytes */
	int send_timeout_ms;       /* replying to a stuck peer gives up */
	unsigned max_conns;        /* pipes beyond this are closed (0 = 1024) */
	bool direct;               /* SM_RPC_DIRECT calls from this process
				    * run the handler in the caller's thread */
	unsigned reserve;          /* workers kept for `light` requests
				    * (below); 0 = none */
	bool (*light)(const uint8_t *req, size_t len);
};

int sm_rpc_server_start(const struct sm_rpc_server_cfg *cfg,
    sm_rpc_handler fn, void *arg, struct sm_rpc_server **out,
    struct sm_err *err);

/* Stop and join the workers, close the socket (bounded, above), free.
 * NULL is a no-op.  Blocks. */
void sm_rpc_server_stop(struct sm_rpc_server *s);

struct sm_rpc_client_cfg {
	const char *url;
	size_t recv_max;           /* largest accepted response, bytes */
	int dial_retry_ms;         /* reconnect interval (nng reconnmint);
				    * backoff stops at 5x, so a restarted
				    * peer is reconnected within that */
};

/*
 * Create a client and start dialing in the background (the peer need not be
 * up yet).  Returns 0, SM_EINVAL (bad URL) or SM_ENOMEM.
 */
int sm_rpc_client_create(const struct sm_rpc_client_cfg *cfg,
    struct sm_rpc_client **out, struct sm_err *err);
void sm_rpc_client_destroy(struct sm_rpc_client *c);

/*
 * One call: send `req`, wait up to `timeout_ms` for the reply and append it
 * to `resp`.  Returns 0, SM_ETIMEDOUT, SM_EUNAVAIL (no connection, or the
 * peer went away mid-call), SM_ECLOSED or SM_ENOMEM.  Thread-safe.
 */
int sm_rpc_call(struct sm_rpc_client *c, const void *req, size_t len,
    int timeout_ms, struct sm_buf *resp);

/* The URL this client dials. */
const char *sm_rpc_client_url(const struct sm_rpc_client *c);

/*
 * Drop the connection and any connect attempt in progress and dial again.
 * For a peer that stopped answering on a connection the kernel still
 * holds open (a network partition: packets dropped, no reset), so the
 * connection comes back within a dial once the network does, instead of
 * when TCP's backed-off retransmissions next get through.  Calls in flight
 * on the old connection fail (SM_EUNAVAIL) or time out.  Returns 0 or
 * the dial's error (the old dialer is gone either way; the next redial
 * tries again).
 */
int sm_rpc_client_redial(struct sm_rpc_client *c);

/* True when the client has at least one connected pipe.  Lock-free. */
bool sm_rpc_client_connected(const struct sm_rpc_client *c);

/* --- concurrent calls ------------------------------------------------------ */

#define SM_RPC_FAILFAST 1   /* no connected pipe: fail now with SM_EUNAVAIL */
#define SM_RPC_DIRECT 2     /* a direct server of this process: call its
			     * handler here (see "Direct calls" above) */
#define SM_RPC_PENDING 1    /* sm_rpc_multi_status(): not answered yet */

struct sm_rpc_multi;

/*
 * A set of up to `n` calls waited for together.  `method` (a static
 * string) labels the client latency metric.  Returns 0 or SM_ENOMEM.
 */
int sm_rpc_multi_create(uint32_t n, const char *method,
    struct sm_rpc_multi **out);

/*
 * Start call `i` (each i at most once): `req` is copied, the call gets
 * `timeout_ms` for send and reply together.  Never blocks, except a
 * direct call (SM_RPC_DIRECT), which runs to completion here.  A call
 * that cannot start completes at once with its error.
 */
void sm_rpc_multi_start(struct sm_rpc_multi *m, uint32_t i,
    struct sm_rpc_client *c, const void *req, size_t len, int timeout_ms,
    int flags);

/* The same, with `msg`, the message `req` was packed from (see "Direct
 * calls" above; NULL: none). */
void sm_rpc_multi_start_msg(struct sm_rpc_multi *m, uint32_t i,
    struct sm_rpc_client *c, const void *req, size_t len, const void *msg,
    int timeout_ms, int flags);

/*
 * In a server's handler: the message its request bytes `req` were packed
 * from, when this is a direct call whose caller handed it along, else
 * NULL (the handler unpacks `req` as always).
 */
const void *sm_rpc_direct_msg(const void *req);

/* Block until every started call completed. */
void sm_rpc_multi_wait(struct sm_rpc_multi *m);

/*
 * Quorum: the one rule by which every fan-out over the ring (distributor
 * push, querier rounds, settings, compactor passes) decides when it has
 * heard enough.
 *
 * Calls are grouped into voters: voter v's calls are v, v + stride,
 * v + 2 stride, ... below the multi's n (stride 0: call v alone), so the
 * querier's several calls (lanes) to one ingester make one voter.  A voter
 * has succeeded when every started call of it answered success, failed
 * when one of them failed, and is silent while none failed and one is
 * pending; a voter none of whose calls was started (an unhealthy member,
 * a member the plan does not ask) is absent and never counts.
 *
 * Voters are grouped (ngroups 0: one group of every voter; otherwise
 * group g holds group_voter[group_off[g] .. group_off[g + 1]), e.g. the
 * replicas of one series).  A group is met once `need` of its voters
 * succeeded, and doomed once its successful and silent voters together
 * are fewer than `need`: it can never be met.
 *
 * sm_rpc_multi_wait_quorum() returns when every started call answered
 * (SM_QUORUM_DONE), at once when a group is doomed (SM_QUORUM_DOOMED:
 * fail fast), or, once every group is met, after `grace_ns`:
 *   SM_QUORUM_NOW    (0) at once -- the writes' rule: quorum acknowledged;
 *   > 0              a hedge: the silent voters get max(grace_ns, the time
 *                    the wait has taken so far) more, so a slow but
 *                    working replica of a heavy query is not cut off early
 *                    while a frozen one cannot stall the caller;
 *   SM_QUORUM_ALL    (< 0) not at all: wait for every call (or doom).
 * Returning SM_QUORUM_MET means calls are still pending (stragglers); they
 * keep SM_RPC_PENDING and finish in the background.
 */
struct sm_quorum {
	uint32_t nvoters;
	uint32_t stride;
	uint32_t ngroups;
	const uint32_t *group_off;      /* ngroups + 1 offsets */
	const uint32_t *group_voter;
	uint32_t need;
	int64_t grace_ns;
};

#define SM_QUORUM_NOW 0
#define SM_QUORUM_ALL (-1)

enum sm_quorum_end {
	SM_QUORUM_DONE,
	SM_QUORUM_MET,
	SM_QUORUM_DOOMED
};

enum sm_quorum_end sm_rpc_multi_wait_quorum(struct sm_rpc_multi *m,
    const struct sm_quorum *q);

/* Voter v's state now: 0 (succeeded), SM_RPC_PENDING (silent), the first
 * failed call's status, or SM_RPC_ABSENT. */
#define SM_RPC_ABSENT 2
int sm_quorum_voter(const struct sm_rpc_multi *m, const struct sm_quorum *q,
    uint32_t v);

/*
 * Call i's status: SM_RPC_PENDING, a transport error (SM_ETIMEDOUT,
 * SM_EUNAVAIL, ...), the error code of the peer's smolder.v1.Response, or
 * 0 for a successful response.  Call from `enough` or after the wait.
 */
int sm_rpc_multi_status(const struct sm_rpc_multi *m, uint32_t i);

/*
 * Call i's response bytes (status 0 or a peer error code), valid until
 * sm_rpc_multi_destroy().  Returns 0 or the transport error/PENDING.
 */
int sm_rpc_multi_reply(const struct sm_rpc_multi *m, uint32_t i,
    const uint8_t **data, size_t *len);

/*
 * Unpack call i's smolder.v1.Response into `arena` (see sm_rpc_call_pb for
 * the return values and err).
 */
int sm_rpc_multi_response(const struct sm_rpc_multi *m, uint32_t i,
    struct sm_arena *arena, Smolder__V1__Response **out, struct sm_err *err);

/* Drop the waiter's reference; calls in flight finish in the background. */
void sm_rpc_multi_destroy(struct sm_rpc_multi *m);

/*
 * One more reference to m, released by its own sm_rpc_multi_destroy():
 * another owner (the distributor's hints) keeps watching calls still in
 * flight after the waiter is done.
 */
void sm_rpc_multi_hold(struct sm_rpc_multi *m);

/* --- smolder.v1 envelope helpers ----------------------------------------- */

/*
 * Pack `req`, call, and unpack the Response into `arena` (*out is valid
 * until the arena is dropped).  A transport failure returns its code; a
 * Response carrying a non-zero code returns that code with the peer's
 * message in err.  Returns 0 only for a successful response.
 */
int sm_rpc_call_pb(struct sm_rpc_client *c, const Smolder__V1__Request *req,
    int timeout_ms, struct sm_arena *arena, Smolder__V1__Response **out,
    struct sm_err *err);

/* Append the packed form of `resp` to `out`. */
void sm_rpc_pack_response(const Smolder__V1__Response *resp,
    struct sm_buf *out);

/* Append a Response carrying only an error code and message. */
void sm_rpc_pack_error(int code, const char *msg, struct sm_buf *out);

/*
 * The Select of a read request (Merge, Series, Labels, Stats, Analyze,
 * SpanMerge, Profiles), or NULL for any other method: the ingester reads
 * the selection from it, the querier writes the source into it.
 */
Smolder__V1__Select *sm_rpc_req_select(const Smolder__V1__Request *req);

/*
 * Mutual TLS for every tcp:// listener and dialer of the process: once
 * set, tcp://host:port is listened on and dialed as nng's
 * tls+tcp://host:port (mbedTLS, TLS 1.2 or 1.3), each side presenting
 * `cert_path`/`key_path` and requiring the other's to chain to
 * `ca_path`, so only holders of a certificate from the cluster's CA can
 * call a server or answer a client.  A client checks the server's
 * certificate names `server_name` when given (nng's mbedTLS cannot check
 * an IP address against a certificate, so a cluster dialing IPs names a
 * DNS name every member's certificate carries), else the URL's host.
 * Every member of a cluster must agree: a TLS client and a plaintext
 * server never connect.  inproc:// is untouched.  Call before any server
 * or client is made; the files are read once (rotating them takes a
 * rolling restart).  0, or SM_EINVAL with err.  sm_rpc_tls_clear() frees
 * the configuration (at exit).
 */
struct sm_rpc_tls_cfg {
	const char *cert_path;
	const char *key_path;
	const char *ca_path;
	const char *server_name;     /* NULL or "": the URL's host */
};
int sm_rpc_tls_set(const struct sm_rpc_tls_cfg *cfg, struct sm_err *err);
void sm_rpc_tls_clear(void);

#endif /* SM_RPC_H */
