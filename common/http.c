/*
 * http.c -- Smolder's HTTP server on libmicrohttpd 0.9.75; see http.h.
 *
 * Threads.  MHD runs one epoll loop per pool thread (INTERNAL_POLLING_THREAD
 * | EPOLL | THREAD_POOL_SIZE); the listen socket is shared and each worker
 * owns the connections it accepted.  The access handler, and therefore
 * every route handler, runs on the worker that owns the connection, which
 * is also the only thread MHD lets queue a response for it.
 *
 * Worker pools (http.h says which routes use them).  In step 3 (below) a
 * pooled request's connection is suspended (MHD_ALLOW_SUSPEND_RESUME) and
 * the request queued for its pool.  The worker runs the handler; the
 * reply functions then build the MHD response but do not queue it: they
 * park it in the request (r_resp), and the worker resumes the connection.
 * MHD then calls http_access() again on the connection's event thread,
 * which queues the parked response.  So MHD_queue_response always runs on
 * the connection's own thread, as in the inline case, and nothing of the
 * connection is touched by two threads at once (MHD 0.9.75 would accept a
 * queue from a worker while the connection is suspended, but the event
 * thread may still be reading connection->response just after the
 * suspend).  Once the worker has resumed the connection it never touches
 * the request again: MHD may complete and free it at once.
 *
 * Priority.  Query workers run at nice +HTTP_QUERY_NICE (set once per
 * thread; Linux nice values are per thread): on a saturated machine the
 * scheduler gives the event threads and the write workers about ten times
 * their CPU share, so a burst of heavy queries slows down queries, not
 * writes or probes (bench B8).  Queries are never starved (CFS weights,
 * not strict priority).  A failure to renice (a seccomp profile) is
 * ignored.
 *
 * Fair share.  A free worker takes the oldest waiting request of the
 * tenant with the fewest requests running in that pool (tenant: the key's,
 * else the X-Scope-OrgID header), so one tenant's burst of slow queries
 * cannot hold every worker while another tenant's query waits; within a
 * tenant the order is FIFO.  The scan is over at most the connection
 * limit's requests times the pool's workers, under the server lock.
 *
 * Request life cycle.  MHD calls http_access() several times per request:
 *
 *   1. headers parsed (*con_cls == NULL): allocate the sm_http_req, route
 *      it, check Content-Length against the route's body cap (two
 *      different Content-Length headers are 400 and close the connection),
 *      and the framing rules libmicrohttpd leaves to us
 *      (http_check_framing: Content-Length with Transfer-Encoding, an
 *      unknown transfer coding, whitespace before a colon, two
 *      Authorization fields);
 *   2. once per body fragment (*upload_data_size > 0): append to the heap
 *      body while it fits the cap, otherwise drop the bytes;
 *   3. body complete (*upload_data_size == 0 again): run the handler.
 *
 * The req is freed in http_completed() (MHD_OPTION_NOTIFY_COMPLETED), which
 * MHD calls for every request that reached step 1, however it ended.
 *
 * Rejections (404, 405, 413, 503).  MHD 0.9.75 accepts a response only in
 * step 1 or step 3, never while body bytes are being delivered
 * (MHD_queue_response checks the connection state).  So:
 *
 *   - an unknown path or method (404, 405) with a body of at most
 *     HTTP_DRAIN_MAX (1 MiB; chunked bodies too) is read and dropped, and
 *     answered in step 3: a client that writes its whole body before
 *     reading (connect-node, curl) gets the 404 instead of EPIPE from a
 *     connection closed under it, and the connection stays usable.  A
 *     chunked body that goes past the bound is cut off (MHD_NO), as for
 *     413; an announced larger one is answered at once as below;
 *   - a rejection known in step 1 is answered at once when the request
 *     announced a body (MHD then discards the body and closes the
 *     connection after the reply), and in step 3 when it did not (no body
 *     to skip, so the connection stays usable);
 *   - a chunked body that outgrows the cap in step 2 is freed at once; the
 *     rest is read and dropped without being stored, up to max(256 KiB,
 *     the cap) more bytes, and the 413 is sent in step 3.  So a client
 *     that sends up to twice the limit always gets its 413 with a message
 *     (Go's net/http drains only 256 KiB, but answers first, which MHD
 *     cannot); one that sends more is cut off (MHD_NO closes the
 *     connection): dropping bytes costs bandwidth, never memory, and the
 *     bound stops an endless body from holding a connection forever.
 *
 * Memory per connection: MHD's pool (HTTP_CONN_MEMORY, headers must fit,
 * else MHD answers 431) plus the body, which grows geometrically with the
 * bytes that actually arrived, never past min(Content-Length, cap) + 1, so
 * a client that announces a large body and stalls holds no large buffer.
 *
 * 413 body.  Pyroscope answers an over-limit /ingest body with
 * httputil.ErrorWithStatus(413), whose code is connectgrpc.HTTPToCode(413)
 * = "invalid_argument"; we send the same:
 *   {"code":"invalid_argument","message":"request body too large: limit N bytes"}
 * Error bodies carry no trailing newline (connect-go's form; Pyroscope's
 * ErrorWithStatus adds one, which JSON clients ignore).
 *
 * Connection limits.  Each pool worker gets its share of CONNECTION_LIMIT
 * and stops accepting when it is full, so a connection over the limit
 * waits in the listen backlog until a slot frees (tested).  A connection
 * over PER_IP_CONNECTION_LIMIT is accepted and closed at once.
 *
 * Query strings.  MHD 0.9.75 already decodes them as Go's url.ParseQuery
 * does for well-formed input: "+" is a space in keys and values (not in
 * the path), %XX is decoded, pairs split on "&" only.  A key without "="
 * has a NULL value in MHD, which we report as "".  Malformed escapes
 * ("%zz") are kept literally, where Go would drop the pair.  Keys are
 * compared case-sensitively (MHD's own lookup ignores case), so lookups
 * walk the list instead of calling MHD_lookup_connection_value.
 *
 * Header deadline.  A connection's request headers must be complete
 * within cfg.header_timeout_ms of its opening (and of the end of its
 * previous request, then within the idle timeout), however they trickle:
 * each connection is tracked (NOTIFY_CONNECTION), step 1 clears its
 * deadline, the request's end sets the next, and a reaper thread shuts
 * down (shutdown(2), not close: the descriptor stays libmicrohttpd's,
 * which then reads the end and closes it) every connection past its
 * deadline, counting smolder_http_header_timeouts_total.  The connections
 * are kept in a min-heap on their next deadline (h_due), so the reaper
 * looks only at those that are due: a full scan held h_cmu for
 * milliseconds under 10,000 trickling connections, and every new
 * connection and request waited on it (bench B20 measures that wait).
 *
 * Body rate.  A request body must keep up a minimum rate
 * (cfg.body_min_rate bytes a second, Apache mod_reqtimeout's MinRate):
 * from the end of its headers it has the header timeout, plus a second
 * for every body_min_rate bytes it has delivered, and the reaper cuts it
 * past that (smolder_http_body_timeouts_total) -- so a body trickled a
 * byte at a time is closed however often the bytes come, while a large
 * upload over a slow link, which keeps delivering, is not.  The clock
 * stops when the body is complete (the handler's time is not the
 * client's).
 *
 * Idle timeout.  MHD's CONNECTION_TIMEOUT is an inactivity timeout: it
 * closes connections that send nothing (no request, half a header, half a
 * body) for that long, and a handler that runs longer than it still gets
 * its reply out (both tested).  It is not a deadline: a client that
 * trickles a byte per period keeps its connection.  The total and per-IP
 * limits bound how many such connections one client can hold.
 *
 * Stop.  sm_http_stop() sets `stopping` (new requests, on kept-alive or
 * new connections, get 503 + Connection: close), waits until no handler
 * runs and until queued replies were sent (the latter for at most
 * HTTP_STOP_GRACE_MS), then MHD_stop_daemon() closes the listen socket and
 * whatever is left.  It does not call MHD_quiesce_daemon(): with a thread
 * pool and epoll, MHD 0.9.75 removes the listen FD from a worker's epoll
 * set itself while that worker is at its connection limit, and quiesce
 * then fails to remove it again and panics ("Failed to remove listen FD
 * from epoll set", seen in http_test under ASan load).
 *
 * Authentication (auth.h) runs in step 1, right after routing: each route
 * declares the scope it needs (sm_http_route_as; undeclared = admin), and
 * a refused request is rejected like a 404, before its body is read.
 * The resolved tenant is kept in the request for sm_http_tenant().
 *
 * Request ids and 5xx bodies ("errors without internal paths").
 * Every request gets an id in step 1 (the client's X-Request-Id if it is
 * short and plain, else splitmix64 of a random seed plus a counter: unique
 * within the process, not guessable across restarts) and every response
 * carries it.  Every 5xx error reply goes through http_queue_error(),
 * which logs the handler's message with the id and sends the client a
 * generic one for codes internal/unknown (programming and library errors
 * with no cause a client can act on).  Otherwise paths and addresses are
 * cut out (a word that is a file-system path becomes "[path]", so RocksDB's
 * "IO error: No space left on device: While appending to file: [path]"
 * keeps its cause; a fan-out's "tcp://10.0.0.5:9095: " prefix is dropped,
 * other URLs and IPv4 addresses become "[address]") and the rest is kept, so
 * data_loss still names the corrupt block an operator must repair
 * ("corrupt block t/12, part tree: checksum mismatch").  The id goes into
 * every generic or cleaned message too, so a Connect client that only
 * shows the error
 * JSON still has something to quote to the operator.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <stdatomic.h>
#include <strings.h>
#include <sys/random.h>

#include <microhttpd.h>

#include "auth.h"
#include "hash.h"
#include "tls.h"
#include "log.h"
#include "metrics.h"
#include "tenant.h"

#define HTTP_CONN_MEMORY (64u * 1024u)    /* MHD pool: headers must fit */
#define HTTP_STREAM_BLOCK (64u * 1024u)   /* MHD's copy-out buffer per
					     streamed response */
#define HTTP_LISTEN_BACKLOG 1024u
#define HTTP_DISCARD_MAX (256u * 1024u)   /* body bytes dropped after a 413 */
#define HTTP_DRAIN_MAX (1u << 20)          /* body read before a 404/405 */
#define HTTP_BODY_MIN_CAP (16u * 1024u)
#define HTTP_STOP_GRACE_MS 2000
#define HTTP_REJECT_MSG_MAX 256
#define HTTP_QUERY_NICE 10
#define HTTP_REAPER_MS 250

struct http_route {
	char *method;             /* NULL = any method */
	char *path;
	sm_http_fn fn;
	void *arg;
	size_t body_max;
	unsigned scope;           /* SM_SCOPE_* the caller needs */
	bool operator;            /* a cluster operation (sm_http_route) */
};

enum http_state {
	HTTP_NEW,
	HTTP_RUNNING,
	HTTP_STOPPED,
};

struct sm_http_req;

/* A worker pool; its queue and cv are under the server's h_mu. */
struct http_pool {
	struct sm_http *p_h;
	const char *p_name;           /* "write", "query": metrics label */
	unsigned p_n;                 /* workers configured */
	unsigned p_started;
	pthread_t *p_th;
	struct sm_http_req *p_head;   /* requests waiting, oldest first */
	struct sm_http_req **p_tail;
	unsigned p_queued;
	pthread_cond_t p_cv;
	uint64_t *p_run_tenant;       /* [p_n] tenants of running requests */
	unsigned p_nrun;
};

struct sm_http {
	struct sm_http_cfg h_cfg;
	char *h_listen;               /* copy of cfg.listen */
	struct sockaddr_in h_addr;
	struct sockaddr_in h_admin_addr;
	char *h_admin_listen;         /* NULL: no admin listener */
	struct MHD_Daemon *h_admin;   /* admin routes and /metrics only */
	unsigned h_admin_port;
	struct http_route *h_routes;
	size_t h_nroutes;
	size_t h_routes_cap;
	struct sm_auth *h_auth;       /* borrowed; NULL = no checks */
	struct MHD_Daemon *h_daemon;
	struct MHD_Daemon *h_inner;   /* adopted connections under TLS */
	unsigned h_port;

	/* Live connections by their next deadline (http_notify_conn, the
	 * reaper): a binary min-heap on http_conn.due; h_cmu is taken
	 * alone, never with h_mu. */
	pthread_mutex_t h_cmu;
	struct http_conn **h_due;     /* h_cmu */
	size_t h_ndue, h_due_cap;     /* h_cmu */
	pthread_t h_reaper;
	bool h_reaper_on;
	bool h_reaper_stop;           /* h_cmu */
	pthread_cond_t h_reaper_cv;

	pthread_mutex_t h_mu;         /* protects everything below */
	pthread_cond_t h_cv;
	enum http_state h_state;
	bool h_stopping;              /* new requests get 503 */
	unsigned h_running;           /* handlers executing */
	unsigned h_sending;           /* replies queued, not yet completed */
	bool h_pool_exit;             /* workers return once queues drain */
	struct http_pool h_write;     /* SM_SCOPE_WRITE routes */
	struct http_pool h_query;     /* SM_SCOPE_READ and _ADMIN routes */
	/* The last MHD log line, for start errors: under h_logmu alone,
	 * taken after h_mu or on its own, since libmicrohttpd logs from
	 * calls made with h_mu held (MHD_add_connection in sm_http_adopt)
	 * and h_mu there would deadlock. */
	pthread_mutex_t h_logmu;
	char h_lasterr[256];
};

/*
 * A connection, for the header deadline (the top: "Header deadline").
 * Its socket is shut down by the reaper only while it is tracked:
 * libmicrohttpd calls NOTIFY_CLOSED (which frees it, under h_cmu) before
 * it closes the socket, so the descriptor is never one reused by a newer
 * connection.  Every field is under h_cmu.
 */
struct http_conn {
	size_t hi;                    /* in h_due; HTTP_NOT_DUE: not there */
	int64_t due;                  /* its next deadline (when in h_due) */
	int fd;
	int64_t deadline_ns;          /* 0: a request is being served */
	int64_t body_ns;              /* its body started; 0: no body due */
	uint64_t body_bytes;          /* delivered since body_ns */
	bool cut;                     /* shut down by the reaper */
};

struct http_hdr {
	struct http_hdr *next;
	char *name;
	char *value;
};

enum req_state {
	REQ_BODY,                     /* accumulating the body */
	REQ_REJECT,                   /* answer r_rej_* in step 3; drop body */
	REQ_DONE,                     /* a reply was queued (or parked) */
};

struct sm_http_req {
	struct sm_http *r_h;
	struct MHD_Connection *r_conn;
	const char *r_method;         /* MHD's, valid for the request */
	const char *r_path;
	const struct http_route *r_route;
	enum req_state r_state;

	unsigned char *r_body;
	size_t r_len;
	size_t r_cap;
	size_t r_max;                 /* body cap of the route */
	size_t r_limit;               /* min(Content-Length, r_max) */
	size_t r_dropped;             /* body bytes dropped while rejecting */

	int r_rej_status;
	const char *r_rej_code;
	char *r_rej_allow;            /* Allow header of a 405 */
	char r_rej_msg[HTTP_REJECT_MSG_MAX];

	struct http_hdr *r_hdrs;      /* response headers, newest first */
	bool r_hdr_oom;               /* a set_header allocation failed */
	bool r_replied;
	bool r_reply_failed;          /* building/queueing the reply failed */
	bool r_sending;               /* counted in h_sending */
	bool r_pooled;                /* the handler runs on a worker */
	struct MHD_Response *r_resp;  /* a worker's reply, not queued yet */
	struct sm_http_req *r_next;   /* pool queue */
	uint64_t r_tenant_key;        /* fair share key (hash of the tenant) */
	char r_remote[INET6_ADDRSTRLEN + 8];
	int r_status;                 /* the status queued, 0 = none */
	int64_t r_start_ns;
	bool r_rej_www;               /* 401 in keys mode: WWW-Authenticate */
	bool r_rej_close;             /* framing broken: close after it */
	bool r_authed;                /* r_id is valid */
	struct sm_auth_id r_id;
	char r_reqid[72];
};

static const char http_empty[1] = "";

static struct sm_metric_set http_metric_set;
static struct sm_metric *m_http_waiting, *m_http_hdr_timeouts,
    *m_http_body_timeouts;
static void http_observe(const struct sm_http_req *r);

/* --- helpers ------------------------------------------------------------- */

static int64_t
http_mono_ms(void)
{
	return (sm_mono_ns() / 1000000);
}

static void
http_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* MHD_OPTION_EXTERNAL_LOGGER: one MHD message -> one log line. */
static void
http_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct sm_http *h = cls;
	char msg[512];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	pthread_mutex_lock(&h->h_logmu);
	snprintf(h->h_lasterr, sizeof(h->h_lasterr), "%.*s",
	    (int)sizeof(h->h_lasterr) - 1, msg);
	pthread_mutex_unlock(&h->h_logmu);
	sm_warn("http", "libmicrohttpd: %s", msg);
}

/* MHD_set_panic_func: MHD found its own state broken; log it and die. */
static void
http_mhd_panic(void *cls, const char *file, unsigned int line,
    const char *reason)
{
	sm_error("http", "libmicrohttpd panic\tfile=%s line=%u reason=\"%s\"",
	    file != NULL ? file : "?", line, reason != NULL ? reason : "");
	abort();
}

static pthread_once_t http_panic_once = PTHREAD_ONCE_INIT;

static void
http_panic_init(void)
{
	MHD_set_panic_func(http_mhd_panic, NULL);
}

/*
 * Parse "host:port", ":port" or "port".  The host is an IPv4 literal or
 * "localhost"; an empty host means all interfaces.
 */
int
sm_http_parse_listen(const char *s, struct sockaddr_in *sa, struct sm_err *err)
{
	const char *colon, *ps;
	char host[64];
	unsigned long port;
	char *end;
	size_t hl;

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	if (s == NULL || *s == '\0')
		return (sm_err_set(err, SM_EINVAL,
		    "http listen address is empty"));
	colon = strrchr(s, ':');
	if (colon == NULL) {
		hl = 0;
		ps = s;
	} else {
		hl = (size_t)(colon - s);
		ps = colon + 1;
	}
	if (*ps < '0' || *ps > '9')
		return (sm_err_set(err, SM_EINVAL,
		    "http listen address \"%s\": missing or bad port", s));
	errno = 0;
	port = strtoul(ps, &end, 10);
	if (errno != 0 || *end != '\0' || port > 65535)
		return (sm_err_set(err, SM_EINVAL,
		    "http listen address \"%s\": bad port \"%s\"", s, ps));
	sa->sin_port = htons((uint16_t)port);
	if (hl == 0) {
		sa->sin_addr.s_addr = htonl(INADDR_ANY);
		return (0);
	}
	if (hl >= sizeof(host))
		return (sm_err_set(err, SM_EINVAL,
		    "http listen address \"%s\": host too long", s));
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (strcmp(host, "localhost") == 0) {
		sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return (0);
	}
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return (sm_err_set(err, SM_EINVAL,
		    "http listen address \"%s\": host \"%s\" is not an IPv4 "
		    "address or localhost", s, host));
	return (0);
}

/* --- server -------------------------------------------------------------- */

/* --- worker pools ------------------------------------------------------- */

static void http_run(struct sm_http *h, struct sm_http_req *r);

static void
http_pool_init(struct http_pool *p, struct sm_http *h, const char *name,
    unsigned n)
{
	p->p_h = h;
	p->p_name = name;
	p->p_n = n;
	p->p_tail = &p->p_head;
	pthread_cond_init(&p->p_cv, NULL);
}

static unsigned
http_pool_running(const struct http_pool *p, uint64_t key)
{
	unsigned n = 0;

	for (unsigned i = 0; i < p->p_nrun; i++)
		n += p->p_run_tenant[i] == key;
	return (n);
}

/* Take the request to run next (fair share, see the top).  h_mu held. */
static struct sm_http_req *
http_pool_pick(struct http_pool *p)
{
	struct sm_http_req **best = NULL, **pp;
	unsigned best_n = UINT_MAX;
	struct sm_http_req *r;

	for (pp = &p->p_head; *pp != NULL && best_n > 0; pp = &(*pp)->r_next) {
		unsigned n = http_pool_running(p, (*pp)->r_tenant_key);

		if (n < best_n) {
			best_n = n;
			best = pp;
		}
	}
	if (best == NULL)
		return (NULL);
	r = *best;
	if ((*best = r->r_next) == NULL)
		p->p_tail = best;
	r->r_next = NULL;
	p->p_queued--;
	sm_gauge_set(sm_metric_child(m_http_waiting, p->p_name), p->p_queued);
	SM_ASSERT(p->p_nrun < p->p_n);
	p->p_run_tenant[p->p_nrun++] = r->r_tenant_key;
	return (r);
}

/* A request of tenant `key` finished running.  h_mu held. */
static void
http_pool_done(struct http_pool *p, uint64_t key)
{
	for (unsigned i = 0; i < p->p_nrun; i++) {
		if (p->p_run_tenant[i] == key) {
			p->p_run_tenant[i] = p->p_run_tenant[--p->p_nrun];
			return;
		}
	}
	SM_ASSERT(0);
}

/* The fair-share key of a request: its tenant, hashed.  Event thread. */
static uint64_t
http_tenant_key(struct sm_http_req *r)
{
	const char *t = NULL;

	if (r->r_authed && r->r_id.tenant[0] != '\0')
		t = r->r_id.tenant;
	else
		t = MHD_lookup_connection_value(r->r_conn, MHD_HEADER_KIND,
		    "X-Scope-OrgID");
	return (sm_hash(t != NULL ? t : "", t != NULL ? strlen(t) : 0));
}

static void *
http_pool_main(void *arg)
{
	struct http_pool *p = arg;
	struct sm_http *h = p->p_h;
	struct sm_http_req *r;
	uint64_t key;

	if (p == &h->h_query)
		(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
		    HTTP_QUERY_NICE);
	pthread_mutex_lock(&h->h_mu);
	for (;;) {
		while (p->p_head == NULL && !h->h_pool_exit)
			pthread_cond_wait(&p->p_cv, &h->h_mu);
		if ((r = http_pool_pick(p)) == NULL)
			break;
		key = r->r_tenant_key;
		pthread_mutex_unlock(&h->h_mu);
		http_run(h, r);
		/* From here on MHD may complete and free r. */
		MHD_resume_connection(r->r_conn);
		pthread_mutex_lock(&h->h_mu);
		http_pool_done(p, key);
		if (--h->h_running == 0)
			pthread_cond_broadcast(&h->h_cv);
	}
	pthread_mutex_unlock(&h->h_mu);
	return (NULL);
}

static int
http_pool_start(struct http_pool *p, struct sm_err *err)
{
	if (p->p_n == 0)
		return (0);
	if ((p->p_th = sm_calloc(p->p_n, sizeof(*p->p_th))) == NULL ||
	    (p->p_run_tenant = sm_calloc(p->p_n,
	    sizeof(*p->p_run_tenant))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "http: out of memory"));
	for (; p->p_started < p->p_n; p->p_started++) {
		if (pthread_create(&p->p_th[p->p_started], NULL,
		    http_pool_main, p) != 0)
			return (sm_err_set(err, SM_EIO, "http: cannot start "
			    "the %s pool's threads", p->p_name));
	}
	return (0);
}

/* After MHD stopped: wake the workers (queues are empty) and join them. */
static void
http_pools_stop(struct sm_http *h)
{
	pthread_mutex_lock(&h->h_mu);
	h->h_pool_exit = true;
	pthread_cond_broadcast(&h->h_write.p_cv);
	pthread_cond_broadcast(&h->h_query.p_cv);
	pthread_mutex_unlock(&h->h_mu);
	for (unsigned i = 0; i < h->h_write.p_started; i++)
		pthread_join(h->h_write.p_th[i], NULL);
	for (unsigned i = 0; i < h->h_query.p_started; i++)
		pthread_join(h->h_query.p_th[i], NULL);
	h->h_write.p_started = h->h_query.p_started = 0;
}

/* The pool a route's handler runs on, NULL = inline (http.h). */
static struct http_pool *
http_route_pool(struct sm_http *h, const struct http_route *rt)
{
	struct http_pool *p;

	switch (rt->scope) {
	case SM_SCOPE_WRITE:
		p = &h->h_write;
		break;
	case SM_SCOPE_READ:
	case SM_SCOPE_ADMIN:
		p = &h->h_query;
		break;
	default:
		return (NULL);
	}
	return (p->p_started > 0 ? p : NULL);
}

void
sm_http_cfg_default(struct sm_http_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->listen = ":4040";
	cfg->threads = 4;
	cfg->write_workers = 8;
	cfg->query_workers = 4;
	cfg->conn_limit = 1024;
	cfg->per_ip_limit = 256;
	cfg->conn_timeout_s = 120;
	cfg->default_body_max = 1u << 20;
	cfg->header_timeout_ms = 30000;
}

int
sm_http_create(const struct sm_http_cfg *cfg, struct sm_http **out,
    struct sm_err *err)
{
	struct sm_http *h = NULL;
	struct sockaddr_in sa;
	int rv;

	*out = NULL;
	sm_metrics_register_once(&http_metric_set);
	if ((rv = sm_http_parse_listen(cfg->listen, &sa, err)) != 0)
		return (rv);
	if (cfg->threads == 0 || cfg->conn_timeout_s == 0 ||
	    cfg->default_body_max == 0)
		return (sm_err_set(err, SM_EINVAL, "http: threads, connection "
		    "timeout and body limit must be > 0"));
	if (cfg->conn_limit < cfg->threads)
		return (sm_err_set(err, SM_EINVAL, "http: connection limit %u "
		    "is smaller than the thread pool (%u)", cfg->conn_limit,
		    cfg->threads));
	if ((h = sm_calloc(1, sizeof(*h))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "http: out of memory"));
	if (cfg->admin_listen != NULL && cfg->admin_listen[0] != '\0' &&
	    ((rv = sm_http_parse_listen(cfg->admin_listen, &h->h_admin_addr,
	    err)) != 0 || (h->h_admin_listen = sm_strdup(
	    cfg->admin_listen)) == NULL)) {
		sm_free(h);
		return (rv != 0 ? rv : sm_err_set(err, SM_ENOMEM, "http: out "
		    "of memory"));
	}
	h->h_cfg = *cfg;
	h->h_cfg.admin_listen = h->h_admin_listen;
	h->h_addr = sa;
	h->h_state = HTTP_NEW;
	if ((h->h_listen = sm_strdup(cfg->listen)) == NULL) {
		sm_free(h);
		return (sm_err_set(err, SM_ENOMEM, "http: out of memory"));
	}
	h->h_cfg.listen = h->h_listen;
	pthread_mutex_init(&h->h_mu, NULL);
	pthread_mutex_init(&h->h_logmu, NULL);
	pthread_mutex_init(&h->h_cmu, NULL);
	sm_cond_init(&h->h_reaper_cv);
	sm_cond_init(&h->h_cv);
	http_pool_init(&h->h_write, h, "write", cfg->write_workers);
	http_pool_init(&h->h_query, h, "query", cfg->query_workers);
	*out = h;
	return (0);
}

void
sm_http_set_auth(struct sm_http *h, struct sm_auth *a)
{
	SM_ASSERT(h->h_state == HTTP_NEW);
	h->h_auth = a;
}

int
sm_http_route(struct sm_http *h, const char *method, const char *path,
    sm_http_fn fn, void *arg, size_t body_max)
{
	int rv = sm_http_route_as(h, SM_SCOPE_ADMIN, method, path, fn, arg,
	    body_max);

	/* The route just added is the last; one that changes state is a
	 * cluster operation (http.h, the admin listener). */
	if (rv == 0 && (method == NULL || strcmp(method, "GET") != 0))
		h->h_routes[h->h_nroutes - 1].operator = true;
	return (rv);
}

int
sm_http_route_as(struct sm_http *h, unsigned scope, const char *method,
    const char *path, sm_http_fn fn, void *arg, size_t body_max)
{
	struct http_route *rt;

	SM_ASSERT(h->h_state == HTTP_NEW);
	SM_ASSERT(path != NULL && path[0] == '/' && fn != NULL);
	SM_ASSERT(scope == SM_SCOPE_PUBLIC || scope == SM_SCOPE_READ ||
	    scope == SM_SCOPE_WRITE || scope == SM_SCOPE_ADMIN);
	for (size_t i = 0; i < h->h_nroutes; i++) {
		rt = &h->h_routes[i];
		if (strcmp(rt->path, path) != 0)
			continue;
		if ((rt->method == NULL && method == NULL) ||
		    (rt->method != NULL && method != NULL &&
		    strcmp(rt->method, method) == 0))
			return (SM_EEXIST);
	}
	if (SM_GROW(h->h_routes, h->h_routes_cap, h->h_nroutes + 1, 16) != 0)
		return (SM_ENOMEM);
	rt = &h->h_routes[h->h_nroutes];
	memset(rt, 0, sizeof(*rt));
	if ((rt->path = sm_strdup(path)) == NULL)
		return (SM_ENOMEM);
	if (method != NULL && (rt->method = sm_strdup(method)) == NULL) {
		sm_free(rt->path);
		return (SM_ENOMEM);
	}
	rt->fn = fn;
	rt->arg = arg;
	rt->body_max = body_max != 0 ? body_max : h->h_cfg.default_body_max;
	rt->scope = scope;
	h->h_nroutes++;
	return (0);
}

static enum MHD_Result http_access(void *cls, struct MHD_Connection *conn,
    const char *url, const char *method, const char *version,
    const char *upload_data, size_t *upload_data_size, void **con_cls);
static void http_notify_conn(void *cls, struct MHD_Connection *conn,
    void **socket_ctx, enum MHD_ConnectionNotificationCode toe);
static void *http_reaper_main(void *arg);
static void http_completed(void *cls, struct MHD_Connection *conn,
    void **con_cls, enum MHD_RequestTerminationCode toe);

/*
 * Start one libmicrohttpd daemon on h's routes: the listener (`inner`
 * false: TLS when configured), or the plaintext daemon with no listen
 * socket that serves adopted connections when the listener speaks TLS
 * (sm_http_adopt: the gRPC bridge talks HTTP/1.1 on a socketpair).
 */
static struct MHD_Daemon *
http_daemon_start(struct sm_http *h, bool inner, bool admin)
{
	struct MHD_OptionItem opts[20];
	unsigned flags;
	int n = 0;

	flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
	    MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
	opts[n++] = (struct MHD_OptionItem){ MHD_OPTION_EXTERNAL_LOGGER,
	    (intptr_t)http_mhd_log, h };
	if (inner) {
		flags |= MHD_USE_NO_LISTEN_SOCKET;
	} else {
		opts[n++] = (struct MHD_OptionItem){ MHD_OPTION_SOCK_ADDR, 0,
		    admin ? &h->h_admin_addr : &h->h_addr };
		opts[n++] = (struct MHD_OptionItem){
		    MHD_OPTION_LISTEN_BACKLOG_SIZE, HTTP_LISTEN_BACKLOG,
		    NULL };
	}
	if (h->h_cfg.threads > 1 && !admin)
		opts[n++] = (struct MHD_OptionItem){
		    MHD_OPTION_THREAD_POOL_SIZE, h->h_cfg.threads, NULL };
	opts[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_LIMIT,
	    admin ? SM_MIN(h->h_cfg.conn_limit, 64u) : h->h_cfg.conn_limit,
	    NULL };
	if (h->h_cfg.per_ip_limit > 0)
		opts[n++] = (struct MHD_OptionItem){
		    MHD_OPTION_PER_IP_CONNECTION_LIMIT, h->h_cfg.per_ip_limit,
		    NULL };
	opts[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_TIMEOUT,
	    h->h_cfg.conn_timeout_s, NULL };
	opts[n++] = (struct MHD_OptionItem){
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_CONN_MEMORY, NULL };
	opts[n++] = (struct MHD_OptionItem){ MHD_OPTION_NOTIFY_COMPLETED,
	    (intptr_t)http_completed, h };
	/* Strict: an HTTP/1.1 request without Host is 400 (RFC 9112,
	 * section 3.2), as every real client sends one. */
	opts[n++] = (struct MHD_OptionItem){ MHD_OPTION_STRICT_FOR_CLIENT, 1,
	    NULL };
	if (!inner && h->h_cfg.tls != NULL) {
		flags |= MHD_USE_TLS;
		/* One-pointer options take it in ptr_value. */
		opts[n++] = (struct MHD_OptionItem){
		    MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
		    sm_tls_cert_callback(h->h_cfg.tls) };
		opts[n++] = (struct MHD_OptionItem){
		    MHD_OPTION_HTTPS_PRIORITIES, 0,
		    (void *)sm_tls_priorities(h->h_cfg.tls) };
	}
	opts[n++] = (struct MHD_OptionItem){ MHD_OPTION_NOTIFY_CONNECTION,
	    (intptr_t)http_notify_conn, h };
	opts[n++] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	SM_ASSERT((size_t)n <= SM_ARRAY_LEN(opts));
	return (MHD_start_daemon(flags, 0, NULL, NULL, http_access, h,
	    MHD_OPTION_ARRAY, opts, MHD_OPTION_END));
}

int
sm_http_start(struct sm_http *h, struct sm_err *err)
{
	const union MHD_DaemonInfo *di;

	pthread_mutex_lock(&h->h_mu);
	if (h->h_state != HTTP_NEW) {
		pthread_mutex_unlock(&h->h_mu);
		return (sm_err_set(err, SM_EINVAL, "http: server on %s was "
		    "already started", h->h_listen));
	}
	pthread_mutex_lock(&h->h_logmu);
	h->h_lasterr[0] = '\0';
	pthread_mutex_unlock(&h->h_logmu);
	pthread_mutex_unlock(&h->h_mu);

	pthread_once(&http_panic_once, http_panic_init);
	/* Workers first: a request may be routed to them at once. */
	if (http_pool_start(&h->h_write, err) != 0 ||
	    http_pool_start(&h->h_query, err) != 0) {
		http_pools_stop(h);
		return (SM_EIO);
	}
	errno = 0;
	h->h_daemon = http_daemon_start(h, false, false);
	if (h->h_daemon != NULL && h->h_cfg.tls != NULL &&
	    (h->h_inner = http_daemon_start(h, true, false)) == NULL) {
		MHD_stop_daemon(h->h_daemon);
		h->h_daemon = NULL;
	}
	if (h->h_daemon != NULL && h->h_admin_listen != NULL) {
		const union MHD_DaemonInfo *ai;

		if ((h->h_admin = http_daemon_start(h, false, true)) == NULL) {
			MHD_stop_daemon(h->h_daemon);
			h->h_daemon = NULL;
			if (h->h_inner != NULL)
				MHD_stop_daemon(h->h_inner);
			h->h_inner = NULL;
		} else {
			ai = MHD_get_daemon_info(h->h_admin,
			    MHD_DAEMON_INFO_BIND_PORT);
			h->h_admin_port = ai != NULL ? ai->port :
			    ntohs(h->h_admin_addr.sin_port);
		}
	}
	if (h->h_daemon == NULL) {
		int e = errno;

		pthread_mutex_lock(&h->h_mu);
		pthread_mutex_lock(&h->h_logmu);
		sm_err_set(err, SM_EIO, "http: cannot listen on %s: %s",
		    h->h_listen, h->h_lasterr[0] != '\0' ? h->h_lasterr :
		    e != 0 ? strerror(e) : "libmicrohttpd failed to start");
		pthread_mutex_unlock(&h->h_logmu);
		pthread_mutex_unlock(&h->h_mu);
		http_pools_stop(h);
		return (SM_EIO);
	}
	di = MHD_get_daemon_info(h->h_daemon, MHD_DAEMON_INFO_BIND_PORT);
	pthread_mutex_lock(&h->h_mu);
	h->h_port = di != NULL ? di->port : ntohs(h->h_addr.sin_port);
	h->h_state = HTTP_RUNNING;
	pthread_mutex_unlock(&h->h_mu);
	/* Without the reaper deadlines pass unenforced; the idle timeout
	 * still holds. */
	if (h->h_cfg.header_timeout_ms > 0)
		h->h_reaper_on = pthread_create(&h->h_reaper, NULL,
		    http_reaper_main, h) == 0;
	sm_info("http", "listening\taddress=%s port=%u threads=%u "
	    "write_workers=%u query_workers=%u", h->h_listen, h->h_port,
	    h->h_cfg.threads, h->h_write.p_n, h->h_query.p_n);
	if (h->h_admin != NULL)
		sm_info("http", "admin listener\taddress=%s port=%u",
		    h->h_admin_listen, h->h_admin_port);
	/* What this process serves, for an operator and for
	 * tests/integration/test_contracts.py (every route is named in
	 * its component's header). */
	for (size_t i = 0; i < h->h_nroutes; i++)
		sm_debug("http", "route\tmethod=%s path=%s",
		    h->h_routes[i].method != NULL ? h->h_routes[i].method :
		    "*", h->h_routes[i].path);
	return (0);
}

unsigned
sm_http_waiting(struct sm_http *h)
{
	unsigned n;

	pthread_mutex_lock(&h->h_mu);
	n = h->h_write.p_queued + h->h_query.p_queued;
	pthread_mutex_unlock(&h->h_mu);
	return (n);
}

/*
 * MHD_add_connection() takes the socket in every case (closes it on
 * failure) and counts it against the total and per-IP limits of the
 * address given.  The state check and the call run under h_mu, so the
 * daemon cannot be stopped in between (sm_http_stop() sets h_stopping
 * under h_mu before it stops the daemon).
 */
int
sm_http_adopt(struct sm_http *h, int fd, const struct sockaddr *sa,
    socklen_t salen, struct sm_err *err)
{
	enum MHD_Result ok = MHD_NO;

	pthread_mutex_lock(&h->h_mu);
	if (h->h_state == HTTP_RUNNING && !h->h_stopping &&
	    h->h_daemon != NULL)
		ok = MHD_add_connection(h->h_inner != NULL ? h->h_inner :
		    h->h_daemon, fd, sa, salen);
	else
		(void)close(fd);
	pthread_mutex_unlock(&h->h_mu);
	if (ok != MHD_YES)
		return (sm_err_set(err, SM_EUNAVAIL, "the HTTP server took no "
		    "more connections (stopping, or at its connection "
		    "limit)"));
	return (0);
}

unsigned
sm_http_port(const struct sm_http *h)
{
	return (h->h_port);
}

unsigned
sm_http_admin_port(const struct sm_http *h)
{
	return (h->h_admin_port);
}

void
sm_http_stop(struct sm_http *h)
{
	int64_t deadline;

	pthread_mutex_lock(&h->h_mu);
	if (h->h_state != HTTP_RUNNING) {
		h->h_state = HTTP_STOPPED;
		pthread_mutex_unlock(&h->h_mu);
		return;
	}
	h->h_stopping = true;
	pthread_mutex_unlock(&h->h_mu);

	pthread_mutex_lock(&h->h_mu);
	deadline = http_mono_ms() + HTTP_STOP_GRACE_MS;
	while (h->h_running > 0 ||
	    (h->h_sending > 0 && http_mono_ms() < deadline)) {
		sm_cond_wait_ms(&h->h_cv, &h->h_mu, 50);
	}
	pthread_mutex_unlock(&h->h_mu);

	MHD_stop_daemon(h->h_daemon);
	h->h_daemon = NULL;
	if (h->h_inner != NULL)
		MHD_stop_daemon(h->h_inner);
	h->h_inner = NULL;
	if (h->h_admin != NULL)
		MHD_stop_daemon(h->h_admin);
	h->h_admin = NULL;
	if (h->h_reaper_on) {
		sm_cond_set_flag(&h->h_cmu, &h->h_reaper_cv, &h->h_reaper_stop);
		pthread_join(h->h_reaper, NULL);
		h->h_reaper_on = false;
	}
	http_pools_stop(h);
	pthread_mutex_lock(&h->h_mu);
	h->h_state = HTTP_STOPPED;
	pthread_mutex_unlock(&h->h_mu);
	sm_info("http", "stopped\taddress=%s", h->h_listen);
}

void
sm_http_destroy(struct sm_http *h)
{
	if (h == NULL)
		return;
	sm_http_stop(h);
	for (size_t i = 0; i < h->h_nroutes; i++) {
		sm_free(h->h_routes[i].method);
		sm_free(h->h_routes[i].path);
	}
	sm_free(h->h_routes);
	sm_free(h->h_write.p_th);
	sm_free(h->h_query.p_th);
	sm_free(h->h_write.p_run_tenant);
	sm_free(h->h_query.p_run_tenant);
	pthread_cond_destroy(&h->h_write.p_cv);
	pthread_cond_destroy(&h->h_query.p_cv);
	pthread_cond_destroy(&h->h_cv);
	pthread_mutex_destroy(&h->h_mu);
	pthread_mutex_destroy(&h->h_logmu);
	pthread_cond_destroy(&h->h_reaper_cv);
	pthread_mutex_destroy(&h->h_cmu);
	sm_free(h->h_due);
	sm_free(h->h_listen);
	sm_free(h->h_admin_listen);
	sm_free(h);
}

/* --- request plumbing ---------------------------------------------------- */

/* Forget the headers a handler set (before an internal-error reply). */
static void
http_drop_hdrs(struct sm_http_req *r)
{
	struct http_hdr *hd, *next;

	for (hd = r->r_hdrs; hd != NULL; hd = next) {
		next = hd->next;
		sm_free(hd);
	}
	r->r_hdrs = NULL;
	r->r_hdr_oom = false;
}

static void
http_req_free(struct sm_http_req *r)
{
	http_drop_hdrs(r);
	if (r->r_resp != NULL)
		MHD_destroy_response(r->r_resp);
	sm_free(r->r_rej_allow);
	sm_free(r->r_body);
	sm_free(r);
}

/*
 * Build and queue the response.  `body` is either copied (take == false)
 * or owned by the response (take == true; freed with sm_free even when
 * this fails).  Marks the request replied in every case.
 */
static void http_queue_resp(struct sm_http_req *, int, const char *,
    struct MHD_Response *, bool);

static void
http_queue(struct sm_http_req *r, int status, const char *ctype,
    const void *body, size_t len, bool take, bool close)
{
	struct MHD_Response *resp;

	SM_ASSERT(!r->r_replied);
	r->r_replied = true;
	r->r_state = REQ_DONE;
	r->r_status = status;
	if (len == 0) {
		if (take)
			sm_free((void *)body);
		resp = MHD_create_response_from_buffer(0, (void *)http_empty,
		    MHD_RESPMEM_PERSISTENT);
	} else if (take) {
		resp = MHD_create_response_from_buffer_with_free_callback(len,
		    (void *)body, sm_free);
		if (resp == NULL)
			sm_free((void *)body);
	} else {
		resp = MHD_create_response_from_buffer(len, (void *)body,
		    MHD_RESPMEM_MUST_COPY);
	}
	http_queue_resp(r, status, ctype, resp, close);
}

/*
 * Queue `resp` (NULL: creating it failed) with the common headers, and
 * drop our reference.  The request must be marked replied already.
 */
static void
http_queue_resp(struct sm_http_req *r, int status, const char *ctype,
    struct MHD_Response *resp, bool close)
{
	struct http_hdr *hd;
	bool ok = true;

	if (resp == NULL) {
		sm_error("http", "cannot create response\tpath=%s status=%d",
		    r->r_path, status);
		r->r_reply_failed = true;
		return;
	}
	if (ctype != NULL && MHD_add_response_header(resp,
	    MHD_HTTP_HEADER_CONTENT_TYPE, ctype) != MHD_YES)
		ok = false;
	if (ok && r->r_reqid[0] != '\0' && MHD_add_response_header(resp,
	    "X-Request-Id", r->r_reqid) != MHD_YES)
		ok = false;
	for (hd = r->r_hdrs; hd != NULL && ok; hd = hd->next) {
		if (MHD_add_response_header(resp, hd->name, hd->value) !=
		    MHD_YES)
			ok = false;
	}
	if (close && ok && MHD_add_response_header(resp,
	    MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES)
		ok = false;
	if (ok && r->r_pooled) {
		/* On a worker: parked for the event thread (see the top). */
		r->r_resp = resp;
		resp = NULL;
	} else if (ok && MHD_queue_response(r->r_conn, (unsigned)status,
	    resp) != MHD_YES) {
		ok = false;
	}
	if (resp != NULL)
		MHD_destroy_response(resp);
	if (!ok) {
		sm_error("http", "cannot queue response\tpath=%s status=%d",
		    r->r_path, status);
		r->r_reply_failed = true;
		return;
	}
	pthread_mutex_lock(&r->r_h->h_mu);
	r->r_h->h_sending++;
	r->r_sending = true;
	pthread_mutex_unlock(&r->r_h->h_mu);
}

/* Does `t` (n bytes) contain d+.d+.d+.d+ (an IPv4 address)? */
static bool
http_has_ipv4(const char *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t j = i;
		int dots = 0;

		if (t[i] < '0' || t[i] > '9' || (i > 0 && t[i - 1] >= '0' &&
		    t[i - 1] <= '9'))
			continue;
		for (;;) {
			while (j < n && t[j] >= '0' && t[j] <= '9')
				j++;
			if (j + 1 >= n || t[j] != '.' || t[j + 1] < '0' ||
			    t[j + 1] > '9')
				break;
			dots++;
			j++;
		}
		if (dots >= 3)
			return (true);
	}
	return (false);
}

/*
 * The client's copy of a 5xx message (see the header).  Token by token:
 * an address prefix ("tcp://10.0.0.5:9095:", "inproc://x:") is dropped,
 * another URL or an IPv4 address becomes "[address]", a file-system path
 * (starts with '/', "./", "~/" or holds a '\') becomes "[path]": the
 * cause around it ("No space left on device") is what the client and the
 * operator's dashboards need, the path is what must not leak.  Returns
 * false when the message must be replaced by the generic one (codes
 * internal and unknown, or too long to clean), else true with the cleaned
 * text in `out` and *changed set when something was removed.
 */
static bool
http_msg_clean(const char *code, const char *msg, char *out, size_t outsz,
    bool *changed)
{
	size_t o = 0;
	const char *p = msg;

	*changed = false;
	if (strcmp(code, "internal") == 0 || strcmp(code, "unknown") == 0)
		return (false);
	out[0] = '\0';
	while (*p != '\0') {
		const char *t = p, *c;
		size_t n, lead;
		bool url;

		while (*p != '\0' && *p != ' ')
			p++;
		n = (size_t)(p - t);
		for (lead = 0; lead < n && strchr("\"'(=<[", t[lead]) != NULL;
		    lead++)
			;
		c = t + lead;
		url = memmem(t, n, "://", 3) != NULL;
		if (!url && n > lead && (c[0] == '/' || (c[0] == '.' &&
		    n > lead + 1 && c[1] == '/') || (c[0] == '~' &&
		    n > lead + 1 && c[1] == '/') || memchr(t, '\\', n) != NULL)) {
			size_t tail = 0;

			while (tail < n - lead &&
			    strchr("\"')>],:", t[n - 1 - tail]) != NULL)
				tail++;
			*changed = true;
			o += (size_t)snprintf(o < outsz ? out + o : NULL,
			    o < outsz ? outsz - o : 0, "%.*s[path]%.*s",
			    (int)lead, t, (int)tail, t + n - tail);
		} else if (url && t[n - 1] == ':') {
			*changed = true;
			while (*p == ' ')
				p++;
			continue;
		} else if (url || http_has_ipv4(t, n)) {
			*changed = true;
			o += (size_t)snprintf(o < outsz ? out + o : NULL,
			    o < outsz ? outsz - o : 0, "%.*s[address]%s",
			    (int)lead, t,
			    t[n - 1] == ':' ? ":" : t[n - 1] == ',' ? "," : "");
		} else {
			o += (size_t)snprintf(o < outsz ? out + o : NULL,
			    o < outsz ? outsz - o : 0, "%.*s", (int)n, t);
		}
		while (*p == ' ') {
			o += (size_t)snprintf(o < outsz ? out + o : NULL,
			    o < outsz ? outsz - o : 0, " ");
			p++;
		}
	}
	if (o >= outsz)
		return (false);       /* too long to clean: generic */
	return (true);
}

static const char *
http_generic_msg(int status)
{
	switch (status) {
	case 502:
		return ("bad gateway");
	case 503:
		return ("service unavailable");
	case 504:
		return ("deadline exceeded");
	default:
		return ("internal error");
	}
}

/* 5xx answers logged per second at most (log.h, sm_log_limit). */
#define HTTP_ERR_LOGS_PER_SEC 10

/* {"code":"<code>","message":"<msg>"} as a Pyroscope/Connect error. */
static void
http_queue_error(struct sm_http_req *r, int status, const char *code,
    const char *msg, bool close)
{
	struct sm_buf b = SM_BUF_INIT;
	char clean[SM_ERR_MSG_MAX], safe[SM_ERR_MSG_MAX + 96];
	bool changed;
	size_t len;
	char *p;

	if (status >= 500) {
		static struct sm_log_limit lim;
		uint64_t dropped;

		/* A refusing ingester answers every write 503: capped. */
		if (sm_log_limit_ok(&lim, HTTP_ERR_LOGS_PER_SEC, &dropped))
			sm_error("http", "request failed\trequest_id=%s "
			    "method=%s path=%s status=%d code=%s "
			    "message=\"%s\" suppressed=%llu", r->r_reqid,
			    r->r_method, r->r_path, status, code, msg,
			    (unsigned long long)dropped);
		if (!http_msg_clean(code, msg, clean, sizeof(clean),
		    &changed)) {
			snprintf(safe, sizeof(safe), "%s (request id %s)",
			    http_generic_msg(status), r->r_reqid);
			msg = safe;
		} else if (changed) {
			snprintf(safe, sizeof(safe), "%s (request id %s)",
			    clean, r->r_reqid);
			msg = safe;
		}
	}
	sm_buf_puts(&b, "{\"code\":");
	sm_buf_json_str(&b, code, strlen(code));
	sm_buf_puts(&b, ",\"message\":");
	sm_buf_json_str(&b, msg, strlen(msg));
	sm_buf_putc(&b, '}');
	if (sm_buf_error(&b) != 0) {
		sm_buf_fini(&b);
		sm_error("http", "out of memory building an error reply"
		    "\tpath=%s status=%d", r->r_path, status);
		r->r_replied = true;
		r->r_state = REQ_DONE;
		r->r_reply_failed = true;
		return;
	}
	p = sm_buf_take(&b, &len);
	http_queue(r, status, "application/json", p, len, true, close);
}

/* Remember a rejection to answer in step 3 (or now; see the caller). */
static void
http_reject(struct sm_http_req *r, int status, const char *code,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void
http_reject(struct sm_http_req *r, int status, const char *code,
    const char *fmt, ...)
{
	va_list ap;

	r->r_state = REQ_REJECT;
	r->r_rej_status = status;
	r->r_rej_code = code;
	va_start(ap, fmt);
	vsnprintf(r->r_rej_msg, sizeof(r->r_rej_msg), fmt, ap);
	va_end(ap);
	sm_free(r->r_body);
	r->r_body = NULL;
	r->r_len = r->r_cap = 0;
}

static void
http_send_reject(struct sm_http_req *r)
{
	if (r->r_rej_allow != NULL) {
		struct http_hdr *hd = sm_malloc(sizeof(*hd));

		if (hd != NULL) {
			hd->next = r->r_hdrs;
			hd->name = (char *)MHD_HTTP_HEADER_ALLOW;
			hd->value = r->r_rej_allow;
			r->r_hdrs = hd;
		}
	}
	if (r->r_rej_www)
		sm_http_set_header(r, "WWW-Authenticate",
		    "Bearer realm=\"smolder\"");
	if (r->r_rej_close)
		sm_http_set_header(r, "Connection", "close");
	http_queue_error(r, r->r_rej_status, r->r_rej_code, r->r_rej_msg,
	    false);
}

/* Find the route; on failure record 404/405 in r. */
static void
http_route_req(struct sm_http *h, struct sm_http_req *r)
{
	const struct http_route *any = NULL, *exact = NULL;
	struct sm_buf allow = SM_BUF_INIT;
	bool path_found = false;

	for (size_t i = 0; i < h->h_nroutes; i++) {
		const struct http_route *rt = &h->h_routes[i];

		if (strcmp(rt->path, r->r_path) != 0)
			continue;
		path_found = true;
		if (rt->method == NULL)
			any = rt;
		else if (strcmp(rt->method, r->r_method) == 0)
			exact = rt;
		else {
			if (allow.len != 0)
				sm_buf_puts(&allow, ", ");
			sm_buf_puts(&allow, rt->method);
		}
	}
	r->r_route = exact != NULL ? exact : any;
	if (r->r_route != NULL) {
		sm_buf_fini(&allow);
		r->r_max = r->r_route->body_max;
		return;
	}
	if (!path_found) {
		sm_buf_fini(&allow);
		http_reject(r, MHD_HTTP_NOT_FOUND, "not_found",
		    "path not found: %s", r->r_path);
		return;
	}
	if (sm_buf_error(&allow) == 0)
		r->r_rej_allow = sm_buf_take(&allow, NULL);
	sm_buf_fini(&allow);
	http_reject(r, MHD_HTTP_METHOD_NOT_ALLOWED, "unimplemented",
	    "method %s not allowed for %s", r->r_method, r->r_path);
}

/* --- request ids and authentication ---------------------------------------- */

static _Atomic uint64_t http_reqid_next;
static uint64_t http_reqid_seed;
static pthread_once_t http_reqid_once = PTHREAD_ONCE_INIT;

static void
http_reqid_init(void)
{
	uint64_t s = 0;

	if (getrandom(&s, sizeof(s), GRND_NONBLOCK) != (ssize_t)sizeof(s))
		s = (uint64_t)sm_mono_ns() ^ ((uint64_t)getpid() << 32);
	http_reqid_seed = s;
}

static bool
http_reqid_ok(const char *v)
{
	size_t n = strlen(v);

	if (n == 0 || n > 64)
		return (false);
	for (size_t i = 0; i < n; i++) {
		char c = v[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '_' ||
		    c == '.' || c == ':'))
			return (false);
	}
	return (true);
}

/* The client's X-Request-Id if plain, else a new one (see the header). */
static void
http_reqid(struct MHD_Connection *conn, char *out, size_t outsz)
{
	const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	    "X-Request-Id");
	uint64_t z;

	if (v != NULL && http_reqid_ok(v)) {
		snprintf(out, outsz, "%s", v);
		return;
	}
	pthread_once(&http_reqid_once, http_reqid_init);
	/* splitmix64: a bijection, so distinct counters give distinct ids. */
	z = http_reqid_seed + atomic_fetch_add(&http_reqid_next, 1) *
	    0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	snprintf(out, outsz, "%016" PRIx64, z);
}

struct http_org_count {
	const char *first;
	unsigned n;
};

static enum MHD_Result
http_org_cb(void *cls, enum MHD_ValueKind kind, const char *key,
    const char *value)
{
	struct http_org_count *c = cls;

	(void)kind;
	if (key != NULL && strcasecmp(key, "X-Scope-OrgID") == 0) {
		if (c->n++ == 0)
			c->first = value;
	}
	return (MHD_YES);
}

static void
http_org_headers(struct MHD_Connection *conn, struct http_org_count *c)
{
	c->first = NULL;
	c->n = 0;
	MHD_get_connection_values(conn, MHD_HEADER_KIND, http_org_cb, c);
}

/* --- the deadline heap (h_due, under h_cmu) ------------------------------ */

#define HTTP_NOT_DUE SIZE_MAX

static void
due_set(struct sm_http *h, size_t i, struct http_conn *c)
{
	h->h_due[i] = c;
	c->hi = i;
}

static void
due_up(struct sm_http *h, size_t i)
{
	struct http_conn *c = h->h_due[i];

	while (i > 0 && h->h_due[(i - 1) / 2]->due > c->due) {
		due_set(h, i, h->h_due[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	due_set(h, i, c);
}

static void
due_down(struct sm_http *h, size_t i)
{
	struct http_conn *c = h->h_due[i];

	for (;;) {
		size_t k = 2 * i + 1;

		if (k >= h->h_ndue)
			break;
		if (k + 1 < h->h_ndue && h->h_due[k + 1]->due < h->h_due[k]->due)
			k++;
		if (h->h_due[k]->due >= c->due)
			break;
		due_set(h, i, h->h_due[k]);
		i = k;
	}
	due_set(h, i, c);
}

static void
due_remove(struct sm_http *h, struct http_conn *c)
{
	struct http_conn *m;
	size_t i = c->hi;

	if (i == HTTP_NOT_DUE)
		return;
	c->hi = HTTP_NOT_DUE;
	if (i == --h->h_ndue)
		return;
	m = h->h_due[h->h_ndue];
	due_set(h, i, m);
	due_up(h, i);
	due_down(h, m->hi);
}

/*
 * Connection c's next deadline, 0 for none: its header deadline, or the
 * time its body falls behind the minimum rate (from the end of its
 * headers, the header timeout plus a second for every body_min_rate
 * bytes delivered), whichever comes first.
 */
static int64_t
http_conn_next_due(const struct sm_http *h, const struct http_conn *c)
{
	int64_t due = c->deadline_ns, rate = h->h_cfg.body_min_rate;

	if (c->body_ns != 0 && rate > 0) {
		uint64_t earned = c->body_bytes / (uint64_t)rate;   /* s */

		/* Past that many seconds the rate never bites. */
		if (earned <= (uint64_t)INT64_MAX / 1000000000 / 2) {
			int64_t b = c->body_ns + h->h_cfg.header_timeout_ms *
			    1000000 + (int64_t)earned * 1000000000 +
			    (int64_t)(c->body_bytes % (uint64_t)rate) *
			    1000000000 / rate;

			if (due == 0 || b < due)
				due = b;
		}
	}
	return (due);
}

/*
 * Put c where its deadline says (in the heap, moved, or out of it if it
 * has none).  A connection that cannot be put in (out of memory growing
 * the heap) keeps the idle timeout only, as an untracked one does.
 */
static void
http_conn_requeue(struct sm_http *h, struct http_conn *c)
{
	int64_t due = c->cut ? 0 : http_conn_next_due(h, c);

	if (due == 0) {
		due_remove(h, c);
		return;
	}
	if (c->hi == HTTP_NOT_DUE) {
		if (SM_GROW(h->h_due, h->h_due_cap, h->h_ndue + 1, 256) != 0)
			return;
		c->due = due;
		due_set(h, h->h_ndue++, c);
		due_up(h, c->hi);
		return;
	}
	if (due < c->due) {
		c->due = due;
		due_up(h, c->hi);
	} else if (due > c->due) {
		c->due = due;
		due_down(h, c->hi);
	}
}

/*
 * MHD_OPTION_NOTIFY_CONNECTION: a new connection is tracked with its
 * first header deadline (and, under TLS, its session asks for a client
 * certificate as the policy says, before the handshake); a closed one
 * is freed.
 */
static void
http_notify_conn(void *cls, struct MHD_Connection *conn, void **socket_ctx,
    enum MHD_ConnectionNotificationCode toe)
{
	struct sm_http *h = cls;
	const union MHD_ConnectionInfo *ci;
	struct http_conn *c = *socket_ctx;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (c == NULL)
			return;
		pthread_mutex_lock(&h->h_cmu);
		due_remove(h, c);
		pthread_mutex_unlock(&h->h_cmu);
		sm_free(c);
		*socket_ctx = NULL;
		return;
	}
	if (h->h_cfg.tls != NULL && (ci = MHD_get_connection_info(conn,
	    MHD_CONNECTION_INFO_GNUTLS_SESSION)) != NULL)
		sm_tls_session_start(h->h_cfg.tls, ci->tls_session);
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (h->h_cfg.header_timeout_ms == 0 || ci == NULL ||
	    (c = sm_calloc(1, sizeof(*c))) == NULL)
		return;                 /* untracked: the idle timeout only */
	c->fd = ci->connect_fd;
	c->hi = HTTP_NOT_DUE;
	pthread_mutex_lock(&h->h_cmu);
	c->deadline_ns = sm_mono_ns() + h->h_cfg.header_timeout_ms * 1000000;
	http_conn_requeue(h, c);
	pthread_mutex_unlock(&h->h_cmu);
	*socket_ctx = c;
}

/*
 * Move a connection's header deadline: 0 while a request is served
 * (its headers are in), `ms` from now once it ended (for the next
 * request's headers).
 */
static void
http_conn_deadline(struct sm_http *h, struct MHD_Connection *conn,
    int64_t ms)
{
	const union MHD_ConnectionInfo *ci;
	struct http_conn *c;

	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (ci == NULL || (c = ci->socket_context) == NULL)
		return;
	pthread_mutex_lock(&h->h_cmu);
	c->deadline_ns = ms == 0 ? 0 : sm_mono_ns() + ms * 1000000;
	http_conn_requeue(h, c);
	pthread_mutex_unlock(&h->h_cmu);
}

/*
 * The body of the request on `conn`: started (its headers are in and it
 * has one), `n` more bytes delivered, or complete (done).
 */
static void
http_conn_body(struct sm_http *h, struct MHD_Connection *conn, size_t n,
    bool start, bool done)
{
	const union MHD_ConnectionInfo *ci;
	struct http_conn *c;

	if (h->h_cfg.body_min_rate <= 0)
		return;
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (ci == NULL || (c = ci->socket_context) == NULL)
		return;
	pthread_mutex_lock(&h->h_cmu);
	if (start) {
		c->body_ns = sm_mono_ns();
		c->body_bytes = 0;
	}
	c->body_bytes += n;
	if (done)
		c->body_ns = 0;
	http_conn_requeue(h, c);
	pthread_mutex_unlock(&h->h_cmu);
}

/* The reaper: shut down the connections whose deadline has passed (their
 * headers are late, or their body fell behind the minimum rate): the
 * heap's top while it is due, so a tick costs the connections it cuts,
 * not the connections open. */
static void *
http_reaper_main(void *arg)
{
	struct sm_http *h = arg;

	pthread_mutex_lock(&h->h_cmu);
	while (!h->h_reaper_stop) {
		int64_t now = sm_mono_ns();

		while (h->h_ndue > 0 && h->h_due[0]->due <= now) {
			struct http_conn *c = h->h_due[0];
			bool hdr = c->deadline_ns != 0 &&
			    now >= c->deadline_ns;

			/* shutdown, not close: libmicrohttpd owns the
			 * descriptor and sees the end on its next read. */
			(void)shutdown(c->fd, SHUT_RDWR);
			c->cut = true;
			due_remove(h, c);
			sm_counter_inc(sm_metric_child0(hdr ?
			    m_http_hdr_timeouts : m_http_body_timeouts));
		}
		(void)sm_cond_wait_ms(&h->h_reaper_cv, &h->h_cmu,
		    HTTP_REAPER_MS);
	}
	pthread_mutex_unlock(&h->h_cmu);
	return (NULL);
}

/* Step 1, first: the client certificate the TLS policy wants. */
static void
http_check_peer(struct sm_http *h, struct sm_http_req *r)
{
	const union MHD_ConnectionInfo *ci;
	struct sm_err err;
	const char *code;
	int rv, status;

	if (h->h_cfg.tls == NULL || r->r_state != REQ_BODY)
		return;
	ci = MHD_get_connection_info(r->r_conn,
	    MHD_CONNECTION_INFO_GNUTLS_SESSION);
	if (ci == NULL)
		return;                 /* an adopted, plaintext connection */
	sm_err_clear(&err);
	if ((rv = sm_tls_check_peer(h->h_cfg.tls, ci->tls_session,
	    &err)) == 0)
		return;
	sm_http_status_for(rv, &status, &code);
	sm_debug("http", "refused\trequest_id=%s path=%s remote=%s status=%d "
	    "reason=\"%s\"", r->r_reqid, r->r_path, sm_http_remote(r), status,
	    err.msg);
	http_reject(r, status, code, "%s", err.msg);
}

/* The local port the request's connection was accepted on. */
static unsigned
http_local_port(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci == NULL || getsockname(ci->connect_fd, (struct sockaddr *)&ss,
	    &len) != 0 || ss.ss_family != AF_INET)
		return (0);
	return (ntohs(((struct sockaddr_in *)&ss)->sin_port));
}

/*
 * Step 1, after routing: admin routes (and /metrics, which names every
 * tenant) answer only on the admin listener when there is one; with
 * header-trusted multitenancy (no API keys: anyone can claim any tenant)
 * admin routes answer nowhere else even without one (http.h).
 */
static void
http_check_listener(struct sm_http *h, struct sm_http_req *r)
{
	const struct http_route *rt = r->r_route;
	bool admin_route, on_admin;

	if (r->r_state != REQ_BODY || rt == NULL)
		return;
	admin_route = rt->operator || (h->h_admin != NULL &&
	    h->h_cfg.metrics_on_admin && strcmp(rt->path, "/metrics") == 0);
	if (!admin_route)
		return;
	on_admin = h->h_admin != NULL &&
	    http_local_port(r->r_conn) == h->h_admin_port;
	if (on_admin || (h->h_admin == NULL && (h->h_auth == NULL ||
	    !sm_auth_header_trusted(h->h_auth))))
		return;
	http_reject(r, MHD_HTTP_FORBIDDEN, "permission_denied", "%s is "
	    "served on the admin listener only (-server.admin-listen-address"
	    "%s)", rt->path, h->h_admin != NULL ? "" : ", not set: with "
	    "multitenancy by header and no API keys, admin calls have no "
	    "other way in");
}

/* Step 1, after routing: check the route's scope; reject on failure. */
static void
http_authenticate(struct sm_http *h, struct sm_http_req *r)
{
	const struct http_route *rt = r->r_route;
	struct http_org_count oc;
	struct sm_err err;
	const char *code;
	int rv, status;

	if (h->h_auth == NULL || rt->scope == SM_SCOPE_PUBLIC)
		return;
	http_org_headers(r->r_conn, &oc);
	sm_err_clear(&err);
	rv = sm_auth_check(h->h_auth, rt->scope,
	    MHD_lookup_connection_value(r->r_conn, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_AUTHORIZATION), oc.first, oc.n, &r->r_id, &err);
	if (rv == 0) {
		r->r_authed = true;
		return;
	}
	sm_http_status_for(rv, &status, &code);
	sm_debug("http", "refused\trequest_id=%s path=%s remote=%s status=%d "
	    "reason=\"%s\"", r->r_reqid, r->r_path, sm_http_remote(r), status,
	    err.msg);
	r->r_rej_www = rv == SM_EAUTH && sm_auth_keys_enabled(h->h_auth);
	http_reject(r, status, code, "%s", err.msg);
}


/* What the header block says about framing and credentials. */
struct http_hdr_scan {
	unsigned n_auth;              /* Authorization fields */
	unsigned n_te;                /* Transfer-Encoding fields */
	bool bad_name;                /* a field name with a blank or a
					 control byte (whitespace before the
					 colon) */
};

static enum MHD_Result
http_hdr_scan_iter(void *cls, enum MHD_ValueKind kind, const char *key,
    const char *value)
{
	struct http_hdr_scan *c = cls;

	(void)kind;
	(void)value;
	if (key == NULL || key[0] == '\0') {
		c->bad_name = true;
		return (MHD_YES);
	}
	for (const unsigned char *p = (const unsigned char *)key; *p != '\0';
	    p++) {
		if (*p <= 0x20 || *p == 0x7f)
			c->bad_name = true;
	}
	if (strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0)
		c->n_auth++;
	if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
		c->n_te++;
	return (MHD_YES);
}

/* `te` is exactly the one coding "chunked" (any case, blanks around)? */
static bool
http_te_chunked(const char *te)
{
	size_t n;

	while (*te == ' ' || *te == '\t')
		te++;
	n = strlen(te);
	while (n > 0 && (te[n - 1] == ' ' || te[n - 1] == '\t'))
		n--;
	return (n == 7 && strncasecmp(te, "chunked", 7) == 0);
}

/*
 * RFC 9112's rules for a request's header block and framing, which
 * libmicrohttpd 0.9.75 does not enforce: whitespace between a field name
 * and its colon is 400 (section 5.1); Content-Length together with
 * Transfer-Encoding is 400 (section 6.1: a proxy and this server could
 * disagree on where the body ends -- request smuggling); a transfer
 * coding other than a lone "chunked" is 501 (section 6.1; libmicrohttpd
 * would wait for a body whose end it cannot find); a second
 * Authorization field is 400 (which credential counts is ambiguous).
 * The framing failures close the connection after the answer, as the
 * RFC wants: the rest of the bytes cannot be parsed.  Returns whether the
 * connection must close.
 */
static bool
http_check_framing(struct sm_http_req *r, const char *cl, const char *te)
{
	struct http_hdr_scan sc = { 0, 0, false };

	MHD_get_connection_values(r->r_conn, MHD_HEADER_KIND,
	    http_hdr_scan_iter, &sc);
	if (sc.bad_name)
		http_reject(r, MHD_HTTP_BAD_REQUEST, "invalid_argument",
		    "malformed header field name (whitespace before the "
		    "colon?)");
	else if (te != NULL && cl != NULL)
		http_reject(r, MHD_HTTP_BAD_REQUEST, "invalid_argument",
		    "both Content-Length and Transfer-Encoding");
	else if (te != NULL && (sc.n_te > 1 || !http_te_chunked(te)))
		http_reject(r, MHD_HTTP_NOT_IMPLEMENTED, "unimplemented",
		    "unsupported Transfer-Encoding: only chunked");
	else if (sc.n_auth > 1)
		http_reject(r, MHD_HTTP_BAD_REQUEST, "invalid_argument",
		    "more than one Authorization header");
	else
		return (false);
	r->r_rej_close = sc.n_auth <= 1 || sc.bad_name || te != NULL;
	return (r->r_rej_close);
}

/* Content-Length headers seen (http_cl_scan). */
struct http_cl_scan {
	const char *first;
	bool conflict;
};

static enum MHD_Result
http_cl_iter(void *cls, enum MHD_ValueKind kind, const char *key,
    const char *value)
{
	struct http_cl_scan *c = cls;

	(void)kind;
	if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0 ||
	    value == NULL)
		return (MHD_YES);
	if (c->first == NULL)
		c->first = value;
	else if (strcmp(c->first, value) != 0)
		c->conflict = true;
	return (MHD_YES);
}

static enum MHD_Result
http_begin(struct sm_http *h, struct MHD_Connection *conn, const char *url,
    const char *method, void **con_cls)
{
	struct sm_http_req *r;
	const char *cl, *te;
	unsigned long long n = 0;
	bool has_body, cl_ok = false;
	char *end;

	if ((r = sm_calloc(1, sizeof(*r))) == NULL) {
		sm_error("http", "out of memory for a request; closing");
		return (MHD_NO);
	}
	r->r_h = h;
	r->r_conn = conn;
	r->r_method = method;
	r->r_path = url;
	r->r_state = REQ_BODY;
	r->r_start_ns = sm_mono_ns();
	*con_cls = r;
	http_conn_deadline(h, conn, 0);         /* the headers are in */
	http_reqid(conn, r->r_reqid, sizeof(r->r_reqid));

	cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_CONTENT_LENGTH);
	te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_TRANSFER_ENCODING);
	if (cl != NULL) {
		errno = 0;
		n = strtoull(cl, &end, 10);
		/* MHD already answered 400 to a malformed Content-Length. */
		cl_ok = errno == 0 && end != cl && *end == '\0';
		if (errno == ERANGE)
			n = ULLONG_MAX;
	}
	has_body = te != NULL || (cl != NULL && n != 0);

	http_route_req(h, r);
	if (cl != NULL && r->r_state == REQ_BODY) {
		/* Two different Content-Length headers: the body's framing is
		 * ambiguous (request smuggling), so 400 and close.  Repeats of
		 * the same value are accepted (RFC 9112, section 6.3). */
		struct http_cl_scan cs = { NULL, false };

		MHD_get_connection_values(conn, MHD_HEADER_KIND, http_cl_iter,
		    &cs);
		if (cs.conflict) {
			http_reject(r, MHD_HTTP_BAD_REQUEST, "invalid_argument",
			    "conflicting Content-Length headers");
			has_body = true;
		}
	}
	if (http_check_framing(r, cl, te))
		has_body = true;        /* answer now, then close */
	if (has_body)
		http_conn_body(h, conn, 0, true, false);
	http_check_peer(h, r);
	http_check_listener(h, r);
	if (r->r_state == REQ_BODY)
		http_authenticate(h, r);
	if (r->r_state == REQ_BODY) {
		r->r_limit = r->r_max;
		if (te == NULL && cl != NULL && n > r->r_max)
			http_reject(r, MHD_HTTP_CONTENT_TOO_LARGE,
			    "invalid_argument", "request body too large: "
			    "limit %zu bytes", r->r_max);
		else if (te == NULL && cl_ok)
			r->r_limit = (size_t)n;
	}
	if (r->r_state == REQ_REJECT && has_body &&
	    (r->r_rej_status == MHD_HTTP_NOT_FOUND ||
	    r->r_rej_status == MHD_HTTP_METHOD_NOT_ALLOWED) &&
	    (te != NULL || (cl_ok && n <= HTTP_DRAIN_MAX))) {
		/* Unknown path or method: read and drop the body, answer in
		 * step 3 (see the header), so the client that is still
		 * writing its body reads the 404 instead of EPIPE. */
		r->r_max = HTTP_DRAIN_MAX;
		return (MHD_YES);
	}
	if (r->r_state == REQ_REJECT && has_body) {
		/* Answer now; MHD skips the body and closes afterwards. */
		sm_debug("http", "rejected before the body\tpath=%s status=%d",
		    r->r_path, r->r_rej_status);
		http_send_reject(r);
		return (r->r_reply_failed ? MHD_NO : MHD_YES);
	}
	return (MHD_YES);
}

static int
http_body_append(struct sm_http_req *r, const char *p, size_t n)
{
	size_t need, ncap, lim;
	unsigned char *nb;

	if (n > r->r_max - r->r_len)
		return (SM_ETOOBIG);
	need = r->r_len + n + 1;
	if (need > r->r_cap) {
		lim = SM_MIN(r->r_limit, r->r_max) + 1;
		ncap = r->r_cap != 0 ? r->r_cap : HTTP_BODY_MIN_CAP;
		while (ncap < need)
			ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
		if (ncap > lim)
			ncap = SM_MAX(lim, need);
		if ((nb = sm_realloc(r->r_body, ncap)) == NULL)
			return (SM_ENOMEM);
		r->r_body = nb;
		r->r_cap = ncap;
	}
	memcpy(r->r_body + r->r_len, p, n);
	r->r_len += n;
	r->r_body[r->r_len] = '\0';
	return (0);
}

/* Step 2: one fragment of the body. */
static enum MHD_Result
http_upload(struct sm_http_req *r, const char *data, size_t *size)
{
	size_t n = *size;
	int rv;

	*size = 0;
	if (r->r_state == REQ_BODY) {
		if ((rv = http_body_append(r, data, n)) == 0)
			return (MHD_YES);
		if (rv == SM_ETOOBIG)
			http_reject(r, MHD_HTTP_CONTENT_TOO_LARGE,
			    "invalid_argument", "request body too large: "
			    "limit %zu bytes", r->r_max);
		else
			http_reject(r, MHD_HTTP_INTERNAL_SERVER_ERROR,
			    "internal", "out of memory reading the request "
			    "body");
		return (MHD_YES);
	}
	/* Rejected: drop the bytes, up to a point (see the header). */
	r->r_dropped += n;
	if (r->r_dropped > SM_MAX(HTTP_DISCARD_MAX, r->r_max)) {
		sm_debug("http", "closing: body far over the limit\tpath=%s",
		    r->r_path);
		return (MHD_NO);
	}
	return (MHD_YES);
}

/*
 * Query arguments reach handlers as C strings; one with a NUL byte inside
 * (%00) would be silently cut there, so such requests are refused.
 */
struct http_nul_check {
	const char *key;
	int found;
};

static enum MHD_Result
http_nul_arg(void *cls, enum MHD_ValueKind kind, const char *key,
    size_t key_size, const char *value, size_t value_size)
{
	struct http_nul_check *c = cls;

	(void)kind;
	if ((key != NULL && strlen(key) != key_size) ||
	    (value != NULL && strlen(value) != value_size)) {
		c->key = key;
		c->found = 1;
		return (MHD_NO);
	}
	return (MHD_YES);
}

/* Step 3: the whole request is here. */
static enum MHD_Result
http_finish(struct sm_http *h, struct sm_http_req *r)
{
	const struct http_route *rt = r->r_route;
	struct http_nul_check nc = { NULL, 0 };
	struct http_pool *pool;

	if (r->r_state == REQ_REJECT) {
		http_send_reject(r);
		return (r->r_reply_failed ? MHD_NO : MHD_YES);
	}
	SM_ASSERT(r->r_state == REQ_BODY && rt != NULL);
	MHD_get_connection_values_n(r->r_conn, MHD_GET_ARGUMENT_KIND,
	    http_nul_arg, &nc);
	if (nc.found) {
		char msg[128];

		snprintf(msg, sizeof(msg), "query argument \"%.64s\" contains "
		    "a NUL byte", nc.key != NULL ? nc.key : "");
		http_queue_error(r, MHD_HTTP_BAD_REQUEST, "invalid_argument",
		    msg, false);
		return (r->r_reply_failed ? MHD_NO : MHD_YES);
	}
	pool = http_route_pool(h, rt);
	pthread_mutex_lock(&h->h_mu);
	if (h->h_stopping) {
		pthread_mutex_unlock(&h->h_mu);
		http_queue_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable",
		    "server is shutting down", true);
		return (r->r_reply_failed ? MHD_NO : MHD_YES);
	}
	h->h_running++;
	pthread_mutex_unlock(&h->h_mu);

	if (pool != NULL) {
		/* Suspend before queueing: the worker may resume at once. */
		r->r_pooled = true;
		r->r_tenant_key = http_tenant_key(r);
		MHD_suspend_connection(r->r_conn);
		pthread_mutex_lock(&h->h_mu);
		r->r_next = NULL;
		*pool->p_tail = r;
		pool->p_tail = &r->r_next;
		pool->p_queued++;
		sm_gauge_set(sm_metric_child(m_http_waiting, pool->p_name),
		    pool->p_queued);
		pthread_cond_signal(&pool->p_cv);
		pthread_mutex_unlock(&h->h_mu);
		return (MHD_YES);
	}
	http_run(h, r);
	pthread_mutex_lock(&h->h_mu);
	if (--h->h_running == 0)
		pthread_cond_broadcast(&h->h_cv);
	pthread_mutex_unlock(&h->h_mu);
	return (r->r_reply_failed ? MHD_NO : MHD_YES);
}

/* Run the route's handler; a handler that forgot to reply gets a 500. */
static void
http_run(struct sm_http *h, struct sm_http_req *r)
{
	const struct http_route *rt = r->r_route;

	(void)h;
	rt->fn(r, rt->arg);
	if (!r->r_replied) {
		sm_error("http", "bug: handler returned without a reply"
		    "\tmethod=%s path=%s", r->r_method, r->r_path);
		http_drop_hdrs(r);
		http_queue_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
		    "internal error: the handler did not reply", false);
	}
}

/* Back on the event thread after a worker: queue its parked reply. */
static enum MHD_Result
http_queue_parked(struct sm_http_req *r)
{
	enum MHD_Result ok;

	if (r->r_resp == NULL)
		return (MHD_NO);      /* building the reply failed */
	ok = MHD_queue_response(r->r_conn, (unsigned)r->r_status, r->r_resp);
	MHD_destroy_response(r->r_resp);
	r->r_resp = NULL;
	if (ok != MHD_YES) {
		sm_error("http", "cannot queue response\tpath=%s status=%d",
		    r->r_path, r->r_status);
		r->r_reply_failed = true;
	}
	return (ok);
}

static enum MHD_Result
http_access(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload_data,
    size_t *upload_data_size, void **con_cls)
{
	struct sm_http *h = cls;
	struct sm_http_req *r = *con_cls;

	if (r == NULL)
		return (http_begin(h, conn, url, method, con_cls));
	if (r->r_state == REQ_DONE) {
		/* A worker's reply (MHD calls us again after the resume);
		 * otherwise replied already, and MHD does not call us. */
		*upload_data_size = 0;
		if (r->r_pooled)
			return (http_queue_parked(r));
		return (r->r_reply_failed ? MHD_NO : MHD_YES);
	}
	if (*upload_data_size != 0) {
		http_conn_body(h, conn, *upload_data_size, false, false);
		return (http_upload(r, upload_data, upload_data_size));
	}
	http_conn_body(h, conn, 0, false, true);
	return (http_finish(h, r));
}

static void
http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
    enum MHD_RequestTerminationCode toe)
{
	struct sm_http *h = cls;
	struct sm_http_req *r = *con_cls;

	if (r == NULL)
		return;
	*con_cls = NULL;
	/* The next request on this connection gets the idle timeout for
	 * its headers (a keep-alive may wait that long anyway). */
	if (h->h_cfg.header_timeout_ms > 0)
		http_conn_deadline(h, conn, (int64_t)h->h_cfg.conn_timeout_s *
		    1000);
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
		sm_debug("http", "request ended early\tpath=%s reason=%d",
		    r->r_path, (int)toe);
	http_observe(r);
	if (r->r_sending) {
		pthread_mutex_lock(&h->h_mu);
		if (--h->h_sending == 0)
			pthread_cond_broadcast(&h->h_cv);
		pthread_mutex_unlock(&h->h_mu);
	}
	http_req_free(r);
}

/* --- metrics --------------------------------------------------------------- */

static struct sm_metric *m_http_req, *m_http_dur;

static const struct sm_metric_def http_metric_defs[] = {
	{ &m_http_req, SM_METRIC_COUNTER, "smolder_http_requests_total",
	    "HTTP requests by route and status (route \"unmatched\" for "
	    "unknown paths).", SM_METRIC_LABELS("route", "status"), NULL, 0 },
	{ &m_http_dur, SM_METRIC_HISTOGRAM,
	    "smolder_http_request_duration_seconds", "HTTP request latency "
	    "from headers to the last byte sent, by route.",
	    SM_METRIC_LABELS("route"), NULL, 0 },
	{ &m_http_body_timeouts, SM_METRIC_COUNTER,
	    "smolder_http_body_timeouts_total", "Connections closed because a "
	    "request body fell behind -server.http-body-min-rate.", NULL,
	    NULL, 0 },
	{ &m_http_hdr_timeouts, SM_METRIC_COUNTER,
	    "smolder_http_header_timeouts_total", "Connections closed because "
	    "a request's headers did not arrive in time "
	    "(-server.http-header-timeout), however they trickled.", NULL,
	    NULL, 0 },
	{ &m_http_waiting, SM_METRIC_GAUGE, "smolder_http_requests_waiting",
	    "Requests waiting for a worker of the write or query pool "
	    "(-server.http-*-workers).", SM_METRIC_LABELS("pool"), NULL, 0 },
};

static struct sm_metric_set http_metric_set = SM_METRIC_SET(http_metric_defs);

/* Count a finished request (labels are bounded: routes are ours). */
static void
http_observe(const struct sm_http_req *r)
{
	const char *route = r->r_route != NULL ? r->r_route->path :
	    "unmatched";
	char st[8];

	snprintf(st, sizeof(st), "%d", r->r_status);
	sm_counter_inc(sm_metric_child(m_http_req, route, st));
	sm_histogram_observe(sm_metric_child(m_http_dur, route),
	    (double)(sm_mono_ns() - r->r_start_ns) / 1e9);
}

/* --- inside a handler ---------------------------------------------------- */

const char *
sm_http_method(const struct sm_http_req *r)
{
	return (r->r_method);
}

const char *
sm_http_path(const struct sm_http_req *r)
{
	return (r->r_path);
}

struct http_query_find {
	const char *key;
	const char *value;
};

static enum MHD_Result
http_query_find_cb(void *cls, enum MHD_ValueKind kind, const char *key,
    const char *value)
{
	struct http_query_find *f = cls;

	if (key == NULL || strcmp(key, f->key) != 0)
		return (MHD_YES);
	f->value = value != NULL ? value : http_empty;
	return (MHD_NO);
}

const char *
sm_http_query(struct sm_http_req *r, const char *key)
{
	struct http_query_find f = { key, NULL };

	MHD_get_connection_values(r->r_conn, MHD_GET_ARGUMENT_KIND,
	    http_query_find_cb, &f);
	return (f.value);
}

struct http_query_iter {
	int (*fn)(void *arg, const char *key, const char *value);
	void *arg;
};

static enum MHD_Result
http_query_each_cb(void *cls, enum MHD_ValueKind kind, const char *key,
    const char *value)
{
	struct http_query_iter *it = cls;

	if (key == NULL)
		return (MHD_YES);
	return (it->fn(it->arg, key, value != NULL ? value : http_empty) == 0 ?
	    MHD_YES : MHD_NO);
}

void
sm_http_query_each(struct sm_http_req *r,
    int (*fn)(void *arg, const char *key, const char *value), void *arg)
{
	struct http_query_iter it = { fn, arg };

	MHD_get_connection_values(r->r_conn, MHD_GET_ARGUMENT_KIND,
	    http_query_each_cb, &it);
}

const char *
sm_http_header(struct sm_http_req *r, const char *name)
{
	return (MHD_lookup_connection_value(r->r_conn, MHD_HEADER_KIND,
	    name));
}

const unsigned char *
sm_http_body(const struct sm_http_req *r, size_t *len)
{
	*len = r->r_len;
	return (r->r_body != NULL ? r->r_body :
	    (const unsigned char *)http_empty);
}

int
sm_http_tenant(struct sm_http_req *r, bool multitenancy, const char **out,
    struct sm_err *err)
{
	struct http_org_count oc;

	*out = NULL;
	if (r->r_h->h_auth != NULL) {
		if (!r->r_authed || r->r_id.tenant[0] == '\0')
			return (sm_err_set(err, SM_EAUTH, "no org id"));
		*out = r->r_id.tenant;
		return (0);
	}
	http_org_headers(r->r_conn, &oc);
	if (oc.n > 1)
		return (sm_err_set(err, SM_EINVAL, "more than one "
		    "X-Scope-OrgID header"));
	return (sm_tenant_resolve(multitenancy, oc.first, out, err));
}

const char *
sm_http_request_id(const struct sm_http_req *r)
{
	return (r->r_reqid);
}

const char *
sm_http_remote(const struct sm_http_req *r)
{
	struct sm_http_req *w = (struct sm_http_req *)r;
	const union MHD_ConnectionInfo *ci;
	char host[INET6_ADDRSTRLEN];

	if (w->r_remote[0] != '\0')
		return (w->r_remote);
	ci = MHD_get_connection_info(w->r_conn,
	    MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci == NULL || ci->client_addr == NULL) {
		snprintf(w->r_remote, sizeof(w->r_remote), "unknown");
	} else if (ci->client_addr->sa_family == AF_INET) {
		const struct sockaddr_in *a =
		    (const struct sockaddr_in *)(const void *)ci->client_addr;

		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		snprintf(w->r_remote, sizeof(w->r_remote), "%s:%u", host,
		    ntohs(a->sin_port));
	} else if (ci->client_addr->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a =
		    (const struct sockaddr_in6 *)(const void *)ci->client_addr;

		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		snprintf(w->r_remote, sizeof(w->r_remote), "[%s]:%u", host,
		    ntohs(a->sin6_port));
	} else {
		snprintf(w->r_remote, sizeof(w->r_remote), "unknown");
	}
	return (w->r_remote);
}

void
sm_http_set_header(struct sm_http_req *r, const char *name,
    const char *value)
{
	size_t nl = strlen(name), vl = strlen(value);
	struct http_hdr *hd;

	SM_ASSERT(!r->r_replied);
	if ((hd = sm_malloc(sizeof(*hd) + nl + vl + 2)) == NULL) {
		r->r_hdr_oom = true;
		return;
	}
	hd->name = (char *)(hd + 1);
	hd->value = hd->name + nl + 1;
	memcpy(hd->name, name, nl + 1);
	memcpy(hd->value, value, vl + 1);
	hd->next = r->r_hdrs;
	r->r_hdrs = hd;
}

/* A header could not be stored: the reply would be wrong, send 500. */
static bool
http_hdr_failed(struct sm_http_req *r)
{
	if (!r->r_hdr_oom)
		return (false);
	sm_error("http", "out of memory for a response header\tpath=%s",
	    r->r_path);
	http_drop_hdrs(r);
	http_queue_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
	    "out of memory building the response", false);
	return (true);
}

void
sm_http_reply(struct sm_http_req *r, int status, const char *ctype,
    const void *body, size_t len)
{
	if (http_hdr_failed(r))
		return;
	http_queue(r, status, ctype, body, len, false, false);
}

void
sm_http_reply_buf(struct sm_http_req *r, int status, const char *ctype,
    struct sm_buf *b)
{
	size_t len = 0;
	char *p;

	if (http_hdr_failed(r)) {
		sm_buf_reset(b);
		return;
	}
	if (sm_buf_error(b) != 0) {
		sm_error("http", "response buffer failed: %s\tpath=%s",
		    sm_strerror(sm_buf_error(b)), r->r_path);
		sm_buf_reset(b);
		http_drop_hdrs(r);
		http_queue_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
		    "out of memory building the response", false);
		return;
	}
	p = sm_buf_take(b, &len);
	http_queue(r, status, ctype, p, len, true, false);
}

/* A streamed body: pieces from the producer, copied out as MHD asks. */
struct http_stream {
	sm_http_stream_fn fn;
	void (*done)(void *);
	void *arg;
	struct sm_buf piece;   /* the current piece */
	size_t off;            /* bytes of it already sent */
	bool ended;            /* fn said it was the last piece */
};

/* MHD_ContentReaderCallback: runs on the connection's MHD thread. */
static ssize_t
http_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct http_stream *st = cls;
	size_t n;
	int rv;

	(void)pos;
	while (st->piece.len == st->off) {
		if (st->ended)
			return (MHD_CONTENT_READER_END_OF_STREAM);
		sm_buf_reset(&st->piece);
		st->off = 0;
		rv = st->fn(st->arg, &st->piece);
		if (rv == 0 && sm_buf_error(&st->piece) != 0)
			rv = sm_buf_error(&st->piece);
		if (rv < 0 || rv > 1) {
			sm_error("http", "streamed response failed: %s",
			    sm_strerror(rv));
			return (MHD_CONTENT_READER_END_WITH_ERROR);
		}
		if (rv == 1)
			st->ended = true;
	}
	n = SM_MIN(max, st->piece.len - st->off);
	memcpy(buf, st->piece.b + st->off, n);
	st->off += n;
	return ((ssize_t)n);
}

static void
http_stream_free(void *cls)
{
	struct http_stream *st = cls;

	if (st->done != NULL)
		st->done(st->arg);
	sm_buf_fini(&st->piece);
	sm_free(st);
}

void
sm_http_reply_stream(struct sm_http_req *r, int status, const char *ctype,
    sm_http_stream_fn fn, void (*done)(void *), void *arg)
{
	struct MHD_Response *resp = NULL;
	struct http_stream *st;

	if (http_hdr_failed(r)) {
		if (done != NULL)
			done(arg);
		return;
	}
	if ((st = sm_calloc(1, sizeof(*st))) == NULL) {
		if (done != NULL)
			done(arg);
		http_drop_hdrs(r);
		http_queue_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
		    "out of memory building the response", false);
		return;
	}
	st->fn = fn;
	st->done = done;
	st->arg = arg;
	sm_buf_init(&st->piece);
	SM_ASSERT(!r->r_replied);
	r->r_replied = true;
	r->r_state = REQ_DONE;
	r->r_status = status;
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN,
	    HTTP_STREAM_BLOCK, http_stream_read, st, http_stream_free);
	if (resp == NULL)
		http_stream_free(st);
	http_queue_resp(r, status, ctype, resp, false);
}

void
sm_http_reply_text(struct sm_http_req *r, int status, const char *fmt, ...)
{
	struct sm_buf b = SM_BUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	sm_buf_vprintf(&b, fmt, ap);
	va_end(ap);
	sm_buf_putc(&b, '\n');
	sm_http_reply_buf(r, status, "text/plain; charset=utf-8", &b);
	sm_buf_fini(&b);
}

void
sm_http_reply_error(struct sm_http_req *r, int status, const char *code,
    const char *fmt, ...)
{
	struct sm_buf b = SM_BUF_INIT;
	va_list ap;

	if (http_hdr_failed(r))
		return;
	va_start(ap, fmt);
	sm_buf_vprintf(&b, fmt, ap);
	va_end(ap);
	if (sm_buf_error(&b) != 0) {
		sm_buf_fini(&b);
		http_drop_hdrs(r);
		http_queue_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
		    "out of memory building the response", false);
		return;
	}
	http_queue_error(r, status, code, b.b != NULL ? b.b : "", false);
	sm_buf_fini(&b);
}

int
sm_http_status(const struct sm_http_req *r)
{
	return (r->r_status);
}

bool
sm_http_replied(const struct sm_http_req *r)
{
	return (r->r_replied);
}

void
sm_http_status_for(int rv, int *status, const char **code)
{
	const struct sm_err_wire *w = sm_err_wire(rv);

	*status = w->http_status;
	*code = w->http_code;
}

void
sm_http_reply_rv(struct sm_http_req *r, int rv, const struct sm_err *err)
{
	const char *code;
	int status;

	sm_http_status_for(rv, &status, &code);
	sm_http_reply_error(r, status, code, "%s", err->msg[0] ? err->msg :
	    sm_strerror(rv));
}
