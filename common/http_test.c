/*
 * http_test.c -- the HTTP server against a tiny blocking socket client.
 *
 * Every test starts a server on 127.0.0.1 port 0 in this process and talks
 * raw HTTP/1.1 to it, so what is checked is what goes over the wire:
 * status lines, headers, JSON error bodies, when connections are closed.
 */
#include "sm_test.h"
#include "sm_test_errwire.h"
#include "sm_test_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/buf.h"
#include "common/http.h"
#include "common/log.h"

/* --- the client ---------------------------------------------------------- */

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static void
sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int
cli_sends(int fd, const char *s)
{
	return (sm_test_send(fd, s, strlen(s)));
}

/* Send req on fd: the response must have `status`. */
static void
exchange(int fd, const char *req, int status)
{
	struct sm_test_resp rs;

	SM_CHECK(cli_sends(fd, req) == 0);
	SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
	SM_CHECKF(rs.status == status, "status %d, want %d", rs.status,
	    status);
	sm_test_resp_free(&rs);
}

/* One request on a fresh connection. */
static int
cli_do(unsigned port, const void *req, size_t n, struct sm_test_resp *rs)
{
	int fd = sm_test_connect(port, 5000), rv;

	if (fd < 0)
		return (-1);
	rv = sm_test_send(fd, req, n) == 0 ? sm_test_read_resp(fd, rs) : -1;
	close(fd);
	return (rv);
}

static int
cli_get(unsigned port, const char *target, struct sm_test_resp *rs)
{
	char req[2048];

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n"
	    "Connection: close\r\n\r\n", target);
	return (cli_do(port, req, strlen(req), rs));
}

/* Wait until the peer closes: returns ms waited, or -1 on data/timeout. */
static int64_t
cli_wait_closed(int fd, int max_ms)
{
	int64_t t0 = now_ms();
	char c;

	sm_test_sock_timeout(fd, max_ms);
	for (;;) {
		ssize_t k = recv(fd, &c, 1, 0);

		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return (now_ms() - t0);
		if (k < 0 && errno == EINTR)
			continue;
		return (-1);
	}
}

/* --- the server ---------------------------------------------------------- */

static atomic_int slow_started;

static void
h_hello(struct sm_http_req *r, void *arg)
{
	sm_http_reply_text(r, 200, "hello %s", (const char *)arg);
}

static void
h_echo(struct sm_http_req *r, void *arg)
{
	const unsigned char *b;
	size_t n;
	char len[32];

	b = sm_http_body(r, &n);
	SM_CHECK(b != NULL && b[n] == '\0');
	snprintf(len, sizeof(len), "%zu", n);
	sm_http_set_header(r, "X-Body-Len", len);
	sm_http_reply(r, 200, "application/octet-stream", b, n);
}

static void
h_method(struct sm_http_req *r, void *arg)
{
	sm_http_reply_text(r, 200, "%s %s", sm_http_method(r),
	    sm_http_path(r));
}

static int
q_each(void *arg, const char *k, const char *v)
{
	struct sm_buf *b = arg;

	sm_buf_printf(b, "[%s]=[%s]\n", k, v);
	return (strcmp(k, "stop") == 0);
}

static void
h_query(struct sm_http_req *r, void *arg)
{
	struct sm_buf b = SM_BUF_INIT;
	const char *x = sm_http_query(r, "x"), *nope = sm_http_query(r, "nope");

	sm_buf_printf(&b, "x=%s nope=%s\n", x ? x : "(null)",
	    nope ? nope : "(null)");
	sm_http_query_each(r, q_each, &b);
	sm_http_reply_buf(r, 200, "text/plain", &b);
	SM_CHECK(b.len == 0);
	sm_buf_fini(&b);
}

static void
h_headers(struct sm_http_req *r, void *arg)
{
	const char *a = sm_http_header(r, "x-test-HEADER");
	const char *m = sm_http_header(r, "X-Missing");

	sm_http_reply_text(r, 200, "%s|%s", a ? a : "(null)",
	    m ? m : "(null)");
}

static void
h_noreply(struct sm_http_req *r, void *arg)
{
	sm_http_set_header(r, "X-Lost", "1");
	SM_CHECK(!sm_http_replied(r));
}

static void
h_error(struct sm_http_req *r, void *arg)
{
	sm_http_reply_error(r, 400, "invalid_argument", "bad \"name\": %s",
	    "<a>\n");
	SM_CHECK(sm_http_replied(r));
}

static void
h_slow(struct sm_http_req *r, void *arg)
{
	atomic_store(&slow_started, 1);
	sleep_ms((int)(intptr_t)arg);
	sm_http_reply(r, 200, NULL, "slow", 4);
}

static void
h_remote(struct sm_http_req *r, void *arg)
{
	sm_http_reply_text(r, 200, "%s", sm_http_remote(r));
}

static void
h_status(struct sm_http_req *r, void *arg)
{
	int status;
	const char *code;

	sm_http_status_for(SM_ELIMIT, &status, &code);
	sm_http_set_header(r, "X-A", "1");
	sm_http_set_header(r, "X-B", "two words");
	sm_http_reply_error(r, status, code, "slow down");
}

/* 5xx messages as storage and fan-out errors look (?m=N picks one). */
/* /stream: 1000 pieces "line <i>\n", then done() counts itself. */
static atomic_int stream_done;

struct stream_st {
	int i;
};

static int
stream_piece(void *arg, struct sm_buf *out)
{
	struct stream_st *st = arg;

	sm_buf_printf(out, "line %d\n", st->i++);
	return (st->i == 1000 ? 1 : 0);
}

static void
stream_free(void *arg)
{
	free(arg);
	atomic_fetch_add(&stream_done, 1);
}

static void
h_stream(struct sm_http_req *r, void *arg)
{
	struct stream_st *st = calloc(1, sizeof(*st));

	(void)arg;
	sm_http_reply_stream(r, 200, "text/plain", stream_piece, stream_free,
	    st);
}

static const struct {
	const char *code;
	const char *msg;
	const char *client;       /* NULL: generic */
} err5xx[] = {
	{ "unavailable", "ingester tcp://10.1.2.3:9095: IO error: No space "
	    "left on device: While appending to file: /var/lib/x/000004.log",
	    "ingester IO error: No space left on device: While appending to "
	    "file: [path] (request id " },
	{ "internal", "out of memory", NULL },
	{ "unknown", "x", NULL },
	{ "data_loss", "tcp://10.1.2.3:9095: corrupt block t/12, part tree: "
	    "checksum mismatch", "corrupt block t/12, part tree: checksum "
	    "mismatch (request id " },
	{ "unavailable", "ingester 10.1.2.3:9095 is down, quorum 2",
	    "ingester [address] is down, quorum 2 (request id " },
	{ "unavailable", "open \"./data/x\" failed",
	    "open \\\"[path]\\\" failed (request id " },
	{ "unavailable", "C:\\data failed", "[path] failed (request id " },
	{ "unavailable", "write quorum not reached", "write quorum not "
	    "reached\"}" },
};

static void
h_5xx(struct sm_http_req *r, void *arg)
{
	const char *m = sm_http_query(r, "m");
	size_t i = m != NULL ? (size_t)atoi(m) : 0;

	(void)arg;
	sm_http_reply_error(r, i == 1 || i == 2 || i == 3 ? 500 : 503,
	    err5xx[i].code, "%s", err5xx[i].msg);
}

static struct sm_http *
srv_start_cfg(struct sm_http_cfg *cfg)
{
	struct sm_http *h = NULL;
	struct sm_err err;

	sm_err_clear(&err);
	if (sm_http_create(cfg, &h, &err) != 0) {
		fprintf(stderr, "create: %s\n", err.msg);
		return (NULL);
	}
	SM_CHECK(sm_http_route(h, "GET", "/hello", h_hello, "world", 0) == 0);
	SM_CHECK(sm_http_route(h, "POST", "/echo", h_echo, NULL,
	    4u << 20) == 0);
	SM_CHECK(sm_http_route(h, "POST", "/small", h_echo, NULL, 1024) == 0);
	SM_CHECK(sm_http_route(h, NULL, "/any", h_method, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/multi", h_method, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "POST", "/multi", h_method, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/query", h_query, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/headers", h_headers, NULL, 0) ==
	    0);
	SM_CHECK(sm_http_route(h, "GET", "/noreply", h_noreply, NULL, 0) ==
	    0);
	SM_CHECK(sm_http_route(h, "GET", "/error", h_error, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/5xx", h_5xx, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/slow", h_slow, (void *)400, 0) ==
	    0);
	SM_CHECK(sm_http_route(h, "GET", "/slower", h_slow, (void *)1600,
	    0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/remote", h_remote, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/status", h_status, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/stream", h_stream, NULL, 0) == 0);
	if (sm_http_start(h, &err) != 0) {
		fprintf(stderr, "start: %s\n", err.msg);
		sm_http_destroy(h);
		return (NULL);
	}
	return (h);
}

static void
srv_cfg(struct sm_http_cfg *cfg)
{
	sm_log_set_level(SM_LOG_ERROR);     /* no "listening" lines */
	sm_http_cfg_default(cfg);
	cfg->listen = "127.0.0.1:0";
	cfg->threads = 2;
	cfg->conn_limit = 64;
	cfg->conn_timeout_s = 5;
}

static struct sm_http *
srv_start(void)
{
	struct sm_http_cfg cfg;

	srv_cfg(&cfg);
	return (srv_start_cfg(&cfg));
}

/* --- tests --------------------------------------------------------------- */

/* /block: runs until the test releases it. */
static atomic_int block_started, block_release;

static void
h_block(struct sm_http_req *r, void *arg)
{
	(void)arg;
	atomic_fetch_add(&block_started, 1);
	while (!atomic_load(&block_release))
		sleep_ms(5);
	sm_http_reply(r, 200, NULL, "done", 4);
}

/* /fair: records its tenant in start order, runs until released. */
static char fair_order[8];
static atomic_int fair_started, fair_release;

static void
h_fair(struct sm_http_req *r, void *arg)
{
	const char *t = sm_http_header(r, "X-Scope-OrgID");
	int i = atomic_fetch_add(&fair_started, 1);

	(void)arg;
	if (i < (int)sizeof(fair_order))
		fair_order[i] = t != NULL ? t[0] : '?';
	while (atomic_load(&fair_release) <= i)
		sleep_ms(5);
	sm_http_reply(r, 200, NULL, "ok", 2);
}

static struct sm_http *
pool_srv(unsigned write_workers, unsigned query_workers)
{
	struct sm_http_cfg cfg;
	struct sm_http *h = NULL;
	struct sm_err err;

	srv_cfg(&cfg);
	cfg.threads = 1;                   /* one event thread */
	cfg.write_workers = write_workers;
	cfg.query_workers = query_workers;
	SM_REQUIRE(sm_http_create(&cfg, &h, &err) == 0);
	SM_CHECK(sm_http_route_as(h, SM_SCOPE_READ, "GET", "/block", h_block,
	    NULL, 0) == 0);
	SM_CHECK(sm_http_route_as(h, SM_SCOPE_READ, "GET", "/fair", h_fair,
	    NULL, 0) == 0);
	SM_CHECK(sm_http_route_as(h, SM_SCOPE_PUBLIC, "GET", "/ready",
	    h_hello, "ready", 0) == 0);
	SM_CHECK(sm_http_route_as(h, SM_SCOPE_WRITE, "POST", "/write",
	    h_echo, NULL, 0) == 0);
	SM_REQUIRE(sm_http_start(h, &err) == 0);
	return (h);
}

/* Start GET /block on its own connection; returns the fd. */
static int
block_begin(unsigned port, int want_started)
{
	static const char rq[] = "GET /block HTTP/1.1\r\nHost: t\r\n\r\n";
	int fd = sm_test_connect(port, 10000);

	SM_REQUIRE(fd >= 0 && sm_test_send(fd, rq, sizeof(rq) - 1) == 0);
	for (int i = 0; i < 1000 && atomic_load(&block_started) <
	    want_started; i++)
		sleep_ms(5);
	return (fd);
}

/*
 * "Queries cannot hurt writes": with one event thread, a query
 * handler that never returns (until released) holds up neither /ready nor
 * a write, and a second query waits for the query worker rather than
 * failing.  With the pools off (0 workers) the same /ready cannot be
 * answered while the handler runs -- the behaviour the pools remove.
 */
static void
test_pools_keep_probes_and_writes_apart(void)
{
	static const char wr[] = "POST /write HTTP/1.1\r\nHost: t\r\n"
	    "Connection: close\r\nContent-Length: 3\r\n\r\nabc";
	struct sm_http *h;
	struct sm_test_resp rs = { .body = NULL };
	int fd1, fd2, fd;

	atomic_store(&block_started, 0);
	atomic_store(&block_release, 0);
	SM_REQUIRE((h = pool_srv(1, 1)) != NULL);
	fd1 = block_begin(sm_http_port(h), 1);
	SM_REQUIRE(atomic_load(&block_started) == 1);
	SM_CHECK(cli_get(sm_http_port(h), "/ready", &rs) == 0 &&
	    rs.status == 200 && strcmp((char *)rs.body, "hello ready\n") == 0);
	sm_test_resp_free(&rs);
	SM_CHECK(cli_do(sm_http_port(h), wr, sizeof(wr) - 1, &rs) == 0 &&
	    rs.status == 200 && strcmp((char *)rs.body, "abc") == 0);
	sm_test_resp_free(&rs);
	/* A second query queues behind the first (one query worker). */
	fd2 = block_begin(sm_http_port(h), 2);
	SM_CHECK_EQ(atomic_load(&block_started), 1);
	SM_CHECK_EQ(atomic_load(&block_release), 0);
	atomic_store(&block_release, 1);
	SM_CHECK(sm_test_read_resp(fd1, &rs) == 0 && rs.status == 200);
	sm_test_resp_free(&rs);
	SM_CHECK(sm_test_read_resp(fd2, &rs) == 0 && rs.status == 200);
	sm_test_resp_free(&rs);
	SM_CHECK_EQ(atomic_load(&block_started), 2);
	close(fd1);
	close(fd2);
	sm_http_destroy(h);

	/* Pools off: /ready waits behind the handler on the one thread. */
	atomic_store(&block_started, 0);
	atomic_store(&block_release, 0);
	SM_REQUIRE((h = pool_srv(0, 0)) != NULL);
	fd1 = block_begin(sm_http_port(h), 1);
	SM_REQUIRE(atomic_load(&block_started) == 1);
	fd = sm_test_connect(sm_http_port(h), 300);
	SM_REQUIRE(fd >= 0);
	SM_CHECK(cli_sends(fd, "GET /ready HTTP/1.1\r\nHost: t\r\n"
	    "Connection: close\r\n\r\n") == 0);
	SM_CHECK(sm_test_read_resp(fd, &rs) != 0);    /* timed out */
	sm_test_resp_free(&rs);
	close(fd);
	atomic_store(&block_release, 1);
	SM_CHECK(sm_test_read_resp(fd1, &rs) == 0 && rs.status == 200);
	sm_test_resp_free(&rs);
	close(fd1);
	sm_http_destroy(h);
}

static void
test_listen_addresses(void)
{
	static const char *good[] = { "127.0.0.1:0", ":0", "0", "localhost:0",
	    "0.0.0.0:4040", "4040", ":65535" };
	static const char *bad[] = { "", "abc", "1.2.3:80", "127.0.0.1:70000",
	    "host:", "[::1]:80", "example.com:80", "127.0.0.1:-1",
	    "127.0.0.1:80x", ":" };
	struct sm_http_cfg cfg;
	struct sm_http *h;
	struct sm_err err;

	sm_http_cfg_default(&cfg);
	for (size_t i = 0; i < SM_ARRAY_LEN(good); i++) {
		cfg.listen = good[i];
		h = NULL;
		SM_CHECKF(sm_http_create(&cfg, &h, &err) == 0, "%s", good[i]);
		SM_CHECK(h == NULL || sm_http_port(h) == 0);
		sm_http_destroy(h);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++) {
		cfg.listen = bad[i];
		h = (struct sm_http *)&cfg;
		sm_err_clear(&err);
		SM_CHECKF(sm_http_create(&cfg, &h, &err) == SM_EINVAL, "%s",
		    bad[i]);
		SM_CHECK(h == NULL);
		SM_CHECK(err.code == SM_EINVAL && err.msg[0] != '\0');
	}
	cfg.listen = ":0";
	cfg.conn_timeout_s = 0;
	SM_CHECK(sm_http_create(&cfg, &h, NULL) == SM_EINVAL);
	sm_http_destroy(NULL);
}

static void
test_localhost_listen(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;
	struct sm_test_resp rs;

	srv_cfg(&cfg);
	cfg.listen = "localhost:0";
	SM_REQUIRE((h = srv_start_cfg(&cfg)) != NULL);
	SM_CHECK(sm_http_port(h) != 0);
	SM_REQUIRE(cli_get(sm_http_port(h), "/hello", &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_start_errors(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *a, *b = NULL;
	struct sm_err err;
	char addr[64];

	SM_REQUIRE((a = srv_start()) != NULL);
	srv_cfg(&cfg);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", sm_http_port(a));
	cfg.listen = addr;
	SM_REQUIRE(sm_http_create(&cfg, &b, &err) == 0);
	sm_err_clear(&err);
	SM_CHECK(sm_http_start(b, &err) == SM_EIO);
	SM_CHECK(strstr(err.msg, addr) != NULL);
	sm_http_destroy(b);
	SM_CHECK(sm_http_start(a, &err) == SM_EINVAL);
	sm_http_destroy(a);
}

static void
test_routing(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	unsigned port;
	const char *post = "POST /any HTTP/1.1\r\nHost: t\r\n"
	    "Content-Length: 0\r\nConnection: close\r\n\r\n";
	const char *put = "PUT /multi HTTP/1.1\r\nHost: t\r\n"
	    "Content-Length: 3\r\nConnection: close\r\n\r\nabc";

	SM_REQUIRE((h = srv_start()) != NULL);
	port = sm_http_port(h);

	SM_REQUIRE(cli_get(port, "/hello", &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_STR((char *)rs.body, "hello world\n");
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"),
	    "text/plain; charset=utf-8");
	sm_test_resp_free(&rs);

	SM_REQUIRE(cli_get(port, "/any?x=1", &rs) == 0);
	SM_CHECK_STR((char *)rs.body, "GET /any\n");
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_do(port, post, strlen(post), &rs) == 0);
	SM_CHECK_STR((char *)rs.body, "POST /any\n");
	sm_test_resp_free(&rs);

	/* Same path, per-method handlers. */
	SM_REQUIRE(cli_get(port, "/multi", &rs) == 0);
	SM_CHECK_STR((char *)rs.body, "GET /multi\n");
	sm_test_resp_free(&rs);

	/* Paths are exact: no prefix match, no trailing-slash folding. */
	SM_REQUIRE(cli_get(port, "/hello/", &rs) == 0);
	SM_CHECK_EQ(rs.status, 404);
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_get(port, "/hell", &rs) == 0);
	SM_CHECK_EQ(rs.status, 404);
	sm_test_resp_free(&rs);

	/* 405, with Allow and a body sent along. */
	SM_REQUIRE(cli_do(port, put, strlen(put), &rs) == 0);
	SM_CHECK_EQ(rs.status, 405);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Allow"), "GET, POST");
	SM_CHECK_STR((char *)rs.body, "{\"code\":\"unimplemented\","
	    "\"message\":\"method PUT not allowed for /multi\"}");
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_do(port, post, strlen(post), &rs) == 0);
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_duplicate_route(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;

	srv_cfg(&cfg);
	SM_REQUIRE(sm_http_create(&cfg, &h, NULL) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/a", h_method, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, "GET", "/a", h_method, NULL, 0) ==
	    SM_EEXIST);
	SM_CHECK(sm_http_route(h, "POST", "/a", h_method, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, NULL, "/a", h_method, NULL, 0) == 0);
	SM_CHECK(sm_http_route(h, NULL, "/a", h_method, NULL, 0) ==
	    SM_EEXIST);
	sm_http_destroy(h);
}

static void
test_not_found(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	unsigned port;
	int fd;
	const char *post = "POST /nope HTTP/1.1\r\nHost: t\r\n"
	    "Content-Length: 5\r\n\r\nhello";

	SM_REQUIRE((h = srv_start()) != NULL);
	port = sm_http_port(h);
	SM_REQUIRE(cli_get(port, "/nope?a=b", &rs) == 0);
	SM_CHECK_EQ(rs.status, 404);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"), "application/json");
	SM_CHECK_STR((char *)rs.body,
	    "{\"code\":\"not_found\",\"message\":\"path not found: /nope\"}");
	sm_test_resp_free(&rs);

	/* Without a body, a 404 keeps the connection usable. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	exchange(fd, "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n", 404);
	exchange(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", 200);
	close(fd);

	/* With one, the body is read and dropped first, so the connection
	 * stays usable. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	exchange(fd, post, 404);
	exchange(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", 200);
	close(fd);
	sm_http_destroy(h);
}

/*
 * A client that writes its whole body before reading (connect-node) must
 * read the 404 / 405, not fail with EPIPE: bodies up to 1 MiB (here 900
 * KiB, announced or chunked) are drained first.
 */
static void
test_not_found_drains_body(void)
{
	static const size_t n = 900u << 10;
	struct sm_http *h;
	struct sm_test_resp rs;
	unsigned port;
	char *body, hdr[256], chunk[64];
	int fd;

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE((body = malloc(n)) != NULL);
	memset(body, 'x', n);
	port = sm_http_port(h);
	for (int k = 0; k < 2; k++) {
		const char *path = k == 0 ? "/nope" : "/hello";

		SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
		snprintf(hdr, sizeof(hdr), "%s %s HTTP/1.1\r\nHost: t\r\n"
		    "Content-Length: %zu\r\n\r\n", k == 0 ? "POST" : "PUT",
		    path, n);
		SM_CHECK(cli_sends(fd, hdr) == 0);
		SM_CHECK(sm_test_send(fd, body, n) == 0);
		SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
		SM_CHECK_EQ(rs.status, k == 0 ? 404 : 405);
		sm_test_resp_free(&rs);
		/* Still usable. */
		exchange(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", 200);
		close(fd);
	}
	/* Chunked. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	SM_CHECK(cli_sends(fd, "POST /nope HTTP/1.1\r\nHost: t\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n") == 0);
	for (int i = 0; i < 9; i++) {
		snprintf(chunk, sizeof(chunk), "%zx\r\n", n / 9);
		SM_CHECK(cli_sends(fd, chunk) == 0);
		SM_CHECK(sm_test_send(fd, body, n / 9) == 0);
		SM_CHECK(cli_sends(fd, "\r\n") == 0);
	}
	exchange(fd, "0\r\n\r\n", 404);
	close(fd);
	free(body);
	sm_http_destroy(h);
}

static void
test_query_decoding(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE(cli_get(sm_http_port(h), "/query?a=hello%20world&b=1+2"
	    "&c=%2B&x=first&empty=&bare&x=second&name=app.cpu%7Bk%3Dv%7D"
	    "&caf%C3%A9=%C3%A9t%C3%A9&bad=%zz&Case=1", &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_STR((char *)rs.body,
	    "x=first nope=(null)\n"
	    "[a]=[hello world]\n"
	    "[b]=[1 2]\n"
	    "[c]=[+]\n"
	    "[x]=[first]\n"
	    "[empty]=[]\n"
	    "[bare]=[]\n"
	    "[x]=[second]\n"
	    "[name]=[app.cpu{k=v}]\n"
	    "[caf\xc3\xa9]=[\xc3\xa9t\xc3\xa9]\n"
	    "[bad]=[%zz]\n"
	    "[Case]=[1]\n");
	sm_test_resp_free(&rs);

	/* Lookups are case-sensitive, "+" in a path is not a space, early
	 * stop of query_each. */
	SM_REQUIRE(cli_get(sm_http_port(h), "/query?X=upper&stop=1&after=2",
	    &rs) == 0);
	SM_CHECK_STR((char *)rs.body, "x=(null) nope=(null)\n[X]=[upper]\n"
	    "[stop]=[1]\n");
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_get(sm_http_port(h), "/query", &rs) == 0);
	SM_CHECK_STR((char *)rs.body, "x=(null) nope=(null)\n");
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_get(sm_http_port(h), "/hel+lo", &rs) == 0);
	SM_CHECK_EQ(rs.status, 404);
	SM_CHECK(strstr((char *)rs.body, "/hel+lo") != NULL);
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_get(sm_http_port(h), "/hel%6Co", &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_headers(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	const char *req = "GET /headers HTTP/1.1\r\nHost: t\r\n"
	    "X-TEST-header: some value\r\nConnection: close\r\n\r\n";

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE(cli_do(sm_http_port(h), req, strlen(req), &rs) == 0);
	SM_CHECK_STR((char *)rs.body, "some value|(null)\n");
	sm_test_resp_free(&rs);

	/* Response headers: only what the handler set, plus Content-Type. */
	SM_REQUIRE(cli_get(sm_http_port(h), "/status", &rs) == 0);
	SM_CHECK_EQ(rs.status, 429);
	SM_CHECK_STR(sm_test_resp_header(&rs, "X-A"), "1");
	SM_CHECK_STR(sm_test_resp_header(&rs, "X-B"), "two words");
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"), "application/json");
	SM_CHECK_STR((char *)rs.body, "{\"code\":\"resource_exhausted\","
	    "\"message\":\"slow down\"}");
	sm_test_resp_free(&rs);

	SM_REQUIRE(cli_get(sm_http_port(h), "/remote", &rs) == 0);
	SM_CHECK(strncmp((char *)rs.body, "127.0.0.1:", 10) == 0);
	SM_CHECK(atoi((char *)rs.body + 10) > 0);
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_error_body_shape(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE(cli_get(sm_http_port(h), "/error", &rs) == 0);
	SM_CHECK_EQ(rs.status, 400);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"), "application/json");
	/* Go's encoding/json escaping: quotes, <, > and the newline. */
	SM_CHECK_STR((char *)rs.body, "{\"code\":\"invalid_argument\","
	    "\"message\":\"bad \\\"name\\\": \\u003ca\\u003e\\n\"}");
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_5xx_messages(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	char path[32], want[160];

	SM_REQUIRE((h = srv_start()) != NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(err5xx); i++) {
		const char *rid;

		snprintf(path, sizeof(path), "/5xx?m=%zu", i);
		SM_REQUIRE(cli_get(sm_http_port(h), path, &rs) == 0);
		rid = sm_test_resp_header(&rs, "X-Request-Id");
		SM_CHECK(rid != NULL && rid[0] != '\0');
		if (err5xx[i].client == NULL) {
			snprintf(want, sizeof(want), " (request id %.64s)\"}",
			    rid != NULL ? rid : "?");
			SM_CHECKF(strstr((char *)rs.body, want) != NULL &&
			    (strstr((char *)rs.body, "internal error") != NULL ||
			    strstr((char *)rs.body, "service unavailable") !=
			    NULL), "case %zu: body %s", i, rs.body);
		} else {
			SM_CHECKF(strstr((char *)rs.body, err5xx[i].client) !=
			    NULL, "case %zu: body %s, want ...%s", i, rs.body,
			    err5xx[i].client);
		}
		SM_CHECKF(strstr((char *)rs.body, "10.1.2.3") == NULL &&
		    strstr((char *)rs.body, "tcp:") == NULL &&
		    strstr((char *)rs.body, "000004") == NULL,
		    "case %zu: body %s", i, rs.body);
		sm_test_resp_free(&rs);
	}
	sm_http_destroy(h);
}

static void
test_noreply_500(void)
{
	char want[160];
	struct sm_http *h;
	struct sm_test_resp rs;

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE(cli_get(sm_http_port(h), "/noreply", &rs) == 0);
	SM_CHECK_EQ(rs.status, 500);
	SM_CHECK(sm_test_resp_header(&rs, "X-Lost") == NULL);
	/* Generic for the client, with the request id (http.c). */
	SM_REQUIRE(sm_test_resp_header(&rs, "X-Request-Id") != NULL);
	snprintf(want, sizeof(want), "{\"code\":\"internal\",\"message\":"
	    "\"internal error (request id %.64s)\"}",
	    sm_test_resp_header(&rs, "X-Request-Id"));
	SM_CHECK_STR((char *)rs.body, want);
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_get(sm_http_port(h), "/hello", &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static int
post_body(unsigned port, const char *path, const void *body, size_t n,
    struct sm_test_resp *rs)
{
	char head[256];
	int fd, rv = -1;

	snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\nHost: t\r\n"
	    "Content-Length: %zu\r\nContent-Type: application/octet-stream"
	    "\r\n\r\n", path, n);
	if ((fd = sm_test_connect(port, 5000)) < 0)
		return (-1);
	if (cli_sends(fd, head) == 0 && sm_test_send(fd, body, n) == 0)
		rv = sm_test_read_resp(fd, rs);
	close(fd);
	return (rv);
}

static void
test_body_echo(void)
{
	static const unsigned char bin[] = { 0, 1, 2, '\r', '\n', 0, 0, 0xff,
	    '-', '-', 0 };
	struct sm_http *h;
	struct sm_test_resp rs;
	unsigned char *big;
	size_t nbig = 1u << 20;

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE(post_body(sm_http_port(h), "/echo", bin, sizeof(bin),
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_EQ(rs.len, sizeof(bin));
	SM_CHECK(memcmp(rs.body, bin, sizeof(bin)) == 0);
	SM_CHECK_STR(sm_test_resp_header(&rs, "X-Body-Len"), "11");
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"),
	    "application/octet-stream");
	sm_test_resp_free(&rs);

	/* Empty body: never NULL, NUL-terminated. */
	SM_REQUIRE(post_body(sm_http_port(h), "/echo", "", 0, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_EQ(rs.len, 0);
	sm_test_resp_free(&rs);

	/* Expect: 100-continue (curl sends it for large bodies). */
	{
		char interim[64] = { 0 };
		size_t got = 0;
		int fd;

		SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
		SM_CHECK(cli_sends(fd, "POST /echo HTTP/1.1\r\nHost: t\r\n"
		    "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n") == 0);
		while (got < 25 && recv(fd, interim + got, 1, 0) == 1)
			got++;
		SM_CHECK(strncmp(interim, "HTTP/1.1 100 Continue\r\n\r\n", 25)
		    == 0);
		SM_CHECK(cli_sends(fd, "12345") == 0);
		SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		SM_CHECK_STR((char *)rs.body, "12345");
		sm_test_resp_free(&rs);
		close(fd);
	}

	SM_REQUIRE((big = malloc(nbig)) != NULL);
	for (size_t i = 0; i < nbig; i++)
		big[i] = (unsigned char)(i * 2654435761u >> 13);
	SM_REQUIRE(post_body(sm_http_port(h), "/echo", big, nbig, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_EQ(rs.len, nbig);
	SM_CHECK(rs.len == nbig && memcmp(rs.body, big, nbig) == 0);
	sm_test_resp_free(&rs);
	free(big);
	sm_http_destroy(h);
}

static const char too_big_1024[] = "{\"code\":\"invalid_argument\","
    "\"message\":\"request body too large: limit 1024 bytes\"}";

static void
check_healthy(unsigned port)
{
	struct sm_test_resp rs;

	SM_REQUIRE(cli_get(port, "/hello", &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);
}

static void
test_413_content_length(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	unsigned port;
	char body[1024];
	int fd;

	SM_REQUIRE((h = srv_start()) != NULL);
	port = sm_http_port(h);
	memset(body, 'a', sizeof(body));

	/* Exactly the limit is fine. */
	SM_REQUIRE(post_body(port, "/small", body, sizeof(body), &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_EQ(rs.len, 1024);
	sm_test_resp_free(&rs);

	/* One byte over: answered from the headers, body never sent. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	SM_CHECK(cli_sends(fd, "POST /small HTTP/1.1\r\nHost: t\r\n"
	    "Content-Length: 1025\r\n\r\n") == 0);
	SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
	SM_CHECK_EQ(rs.status, 413);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"), "application/json");
	SM_CHECK_STR((char *)rs.body, too_big_1024);
	sm_test_resp_free(&rs);
	SM_CHECK(cli_wait_closed(fd, 2000) >= 0);
	close(fd);

	/* A huge announced body with Expect: 100-continue gets no 100. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	exchange(fd, "POST /small HTTP/1.1\r\nHost: t\r\n"
	    "Expect: 100-continue\r\n"
	    "Content-Length: 99999999999999\r\n\r\n", 413);
	close(fd);

	/* Over the limit while part of the body is already on its way. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	SM_CHECK(cli_sends(fd, "POST /small HTTP/1.1\r\nHost: t\r\n"
	    "Content-Length: 100000\r\n\r\n") == 0);
	SM_CHECK(sm_test_send(fd, body, sizeof(body)) == 0);
	SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
	SM_CHECK_EQ(rs.status, 413);
	sm_test_resp_free(&rs);
	close(fd);

	check_healthy(port);
	sm_http_destroy(h);
}

/* Send `total` bytes as chunks of `chunk` bytes, then the last chunk. */
static int
send_chunked(int fd, const char *path, size_t total, size_t chunk)
{
	char head[256], line[32];
	char *buf = malloc(chunk);
	int rv = 0;

	memset(buf, 'z', chunk);
	snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\nHost: t\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n", path);
	rv = cli_sends(fd, head);
	while (rv == 0 && total > 0) {
		size_t n = SM_MIN(total, chunk);

		snprintf(line, sizeof(line), "%zx\r\n", n);
		rv = cli_sends(fd, line);
		if (rv == 0)
			rv = sm_test_send(fd, buf, n);
		if (rv == 0)
			rv = cli_sends(fd, "\r\n");
		total -= n;
	}
	if (rv == 0)
		rv = cli_sends(fd, "0\r\n\r\n");
	free(buf);
	return (rv);
}

static void
test_413_chunked(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	unsigned port;
	int fd;

	SM_REQUIRE((h = srv_start()) != NULL);
	port = sm_http_port(h);

	/* Within the limit. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	SM_CHECK(send_chunked(fd, "/small", 1000, 100) == 0);
	SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_EQ(rs.len, 1000);
	sm_test_resp_free(&rs);
	close(fd);

	/* Over it: the rest is drained and the client gets its 413. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	SM_CHECK(send_chunked(fd, "/small", 8192, 512) == 0);
	SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
	SM_CHECK_EQ(rs.status, 413);
	SM_CHECK_STR((char *)rs.body, too_big_1024);
	sm_test_resp_free(&rs);
	close(fd);
	check_healthy(port);

	/* Far over it: the server hangs up instead of draining forever. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	(void)send_chunked(fd, "/small", 8u << 20, 64u << 10);
	SM_CHECK(sm_test_read_resp(fd, &rs) != 0);
	close(fd);
	check_healthy(port);
	sm_http_destroy(h);
}

static void
test_header_too_large(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	struct sm_buf b = SM_BUF_INIT;
	int fd;

	SM_REQUIRE((h = srv_start()) != NULL);
	sm_buf_puts(&b, "GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: ");
	for (int i = 0; i < 100000; i++)
		sm_buf_putc(&b, 'a');
	sm_buf_puts(&b, "\r\n\r\n");
	SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	if (sm_test_send(fd, b.b, b.len) == 0 && sm_test_read_resp(fd, &rs) == 0) {
		SM_CHECK_EQ(rs.status, 431);
		sm_test_resp_free(&rs);
	}
	close(fd);
	sm_buf_fini(&b);
	check_healthy(sm_http_port(h));
	sm_http_destroy(h);
}

static void
test_keepalive_many(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	unsigned port;
	int fd;

	SM_REQUIRE((h = srv_start()) != NULL);
	port = sm_http_port(h);
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	for (int i = 0; i < 300; i++) {
		char req[256];

		snprintf(req, sizeof(req), "POST /echo HTTP/1.1\r\nHost: t\r\n"
		    "Content-Length: %d\r\n\r\n%.*s", i % 7 + 1, i % 7 + 1,
		    "abcdefg");
		SM_REQUIRE(cli_sends(fd, req) == 0);
		SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		SM_CHECK_EQ(rs.len, (size_t)(i % 7 + 1));
		sm_test_resp_free(&rs);
	}
	close(fd);
	for (int i = 0; i < 200; i++) {
		SM_REQUIRE(cli_get(port, i % 3 == 0 ? "/nope" : "/hello",
		    &rs) == 0);
		SM_CHECK_EQ(rs.status, i % 3 == 0 ? 404 : 200);
		sm_test_resp_free(&rs);
	}
	sm_http_destroy(h);
}

struct conc_arg {
	unsigned port;
	int failures;
};

static void *
conc_client(void *p)
{
	struct conc_arg *a = p;
	char body[3000];
	struct sm_test_resp rs;

	memset(body, 'q', sizeof(body));
	for (int i = 0; i < 40; i++) {
		if (post_body(a->port, "/echo", body, sizeof(body), &rs) != 0 ||
		    rs.status != 200 || rs.len != sizeof(body))
			a->failures++;
		sm_test_resp_free(&rs);
	}
	return (NULL);
}

static void
test_concurrent_clients(void)
{
	struct sm_http *h;
	pthread_t t[8];
	struct conc_arg a[8];

	SM_REQUIRE((h = srv_start()) != NULL);
	for (int i = 0; i < 8; i++) {
		a[i].port = sm_http_port(h);
		a[i].failures = 0;
		SM_REQUIRE(pthread_create(&t[i], NULL, conc_client, &a[i]) ==
		    0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		SM_CHECK_EQ(a[i].failures, 0);
	}
	sm_http_destroy(h);
}

static void
test_connection_limit(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;
	struct sm_test_resp rs;
	int fds[4], extra, rv;
	unsigned port;

	srv_cfg(&cfg);
	cfg.conn_limit = 4;
	SM_REQUIRE((h = srv_start_cfg(&cfg)) != NULL);
	port = sm_http_port(h);
	/* Four kept-alive connections, each answered once. */
	for (int i = 0; i < 4; i++) {
		SM_REQUIRE((fds[i] = sm_test_connect(port, 5000)) >= 0);
		SM_CHECK(cli_sends(fds[i],
		    "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
		SM_REQUIRE(sm_test_read_resp(fds[i], &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		sm_test_resp_free(&rs);
	}
	/*
	 * The fifth is not served: each worker stops accepting at its share
	 * of the limit, so the connection waits in the kernel's backlog.
	 */
	SM_REQUIRE((extra = sm_test_connect(port, 5000)) >= 0);
	sm_test_sock_timeout(extra, 700);
	SM_CHECK(cli_sends(extra, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
	    == 0);
	rv = sm_test_read_resp(extra, &rs);
	SM_CHECKF(rv != 0 && (errno == EAGAIN || errno == EWOULDBLOCK),
	    "rv %d errno %d", rv, errno);
	/* The others keep working. */
	SM_CHECK(cli_sends(fds[0], "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n") ==
	    0);
	SM_REQUIRE(sm_test_read_resp(fds[0], &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);
	/* A freed slot lets the waiting one in. */
	close(fds[1]);
	sm_test_sock_timeout(extra, 3000);
	SM_REQUIRE(sm_test_read_resp(extra, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);
	close(extra);
	close(fds[0]);
	close(fds[2]);
	close(fds[3]);
	sm_http_destroy(h);
}

static void
test_per_ip_limit(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;
	struct sm_test_resp rs;
	int fds[2], extra;

	srv_cfg(&cfg);
	cfg.per_ip_limit = 2;
	SM_REQUIRE((h = srv_start_cfg(&cfg)) != NULL);
	for (int i = 0; i < 2; i++) {
		SM_REQUIRE((fds[i] = sm_test_connect(sm_http_port(h), 5000)) >= 0);
		SM_CHECK(cli_sends(fds[i],
		    "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
		SM_REQUIRE(sm_test_read_resp(fds[i], &rs) == 0);
		sm_test_resp_free(&rs);
	}
	/* The third from the same address is accepted and closed at once. */
	SM_REQUIRE((extra = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	(void)cli_sends(extra, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	SM_CHECK(sm_test_read_resp(extra, &rs) != 0);
	close(extra);
	close(fds[0]);
	close(fds[1]);
	sleep_ms(100);
	check_healthy(sm_http_port(h));
	sm_http_destroy(h);
}

/*
 * The idle timeout (1 s) is libmicrohttpd's, on the real clock: each case
 * checks that the connection is closed (waiting up to 10 s for it) and
 * not before most of the timeout passed -- a lower bound, which a loaded
 * machine cannot break.
 */
static void
test_idle_timeout(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;
	struct sm_test_resp rs;
	int64_t waited;
	int fd;

	srv_cfg(&cfg);
	cfg.conn_timeout_s = 1;
	SM_REQUIRE((h = srv_start_cfg(&cfg)) != NULL);

	/* A connection that never sends anything. */
	SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	waited = cli_wait_closed(fd, 10000);
	SM_CHECKF(waited >= 700, "waited %lld ms", (long long)waited);
	close(fd);

	/* A kept-alive connection after one request. */
	SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	SM_CHECK(cli_sends(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
	SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
	sm_test_resp_free(&rs);
	waited = cli_wait_closed(fd, 10000);
	SM_CHECKF(waited >= 700, "waited %lld ms", (long long)waited);
	close(fd);

	/* Slowloris: headers started, never finished. */
	SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	SM_CHECK(cli_sends(fd, "GET /hello HTTP/1.1\r\nHost: t\r\nX-A: b")
	    == 0);
	sleep_ms(300);
	SM_CHECK(cli_sends(fd, "c") == 0);
	waited = cli_wait_closed(fd, 10000);
	SM_CHECKF(waited >= 700, "waited %lld ms", (long long)waited);
	close(fd);

	/* Body started, never finished. */
	SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	SM_CHECK(cli_sends(fd, "POST /echo HTTP/1.1\r\nHost: t\r\n"
	    "Content-Length: 100\r\n\r\nabc") == 0);
	waited = cli_wait_closed(fd, 10000);
	SM_CHECKF(waited >= 700, "waited %lld ms", (long long)waited);
	close(fd);
	check_healthy(sm_http_port(h));
	sm_http_destroy(h);
}

/*
 * The header deadline with many connections at once, opened in three
 * waves: every trickler is cut, none before its own deadline (a lower
 * bound, which a loaded machine cannot break); connections closed by
 * the client before their deadline, and one whose request completed (it
 * now has the 30 s idle deadline), are left alone; the server stays
 * healthy.  This drives the deadline heap through inserts, removals from
 * its middle, a deadline cleared and set again, and pops in order.
 */
#define DL_WAVES 3
#define DL_PER 30
/* Far above the waves' ~0.5 s of set-up, so a stalled machine cannot
 * cut wave 0 before the test has closed or served some of it. */
#define DL_MS 2000

static void
test_header_deadline_many(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;
	struct sm_test_resp rs;
	int fd[DL_WAVES][DL_PER];
	int64_t opened[DL_WAVES][DL_PER];
	int cut = 0;
	char c;

	srv_cfg(&cfg);
	cfg.conn_limit = 256;
	cfg.per_ip_limit = 0;
	cfg.conn_timeout_s = 30;
	cfg.header_timeout_ms = DL_MS;
	SM_REQUIRE((h = srv_start_cfg(&cfg)) != NULL);
	for (int w = 0; w < DL_WAVES; w++) {
		for (int i = 0; i < DL_PER; i++) {
			opened[w][i] = now_ms();
			SM_REQUIRE((fd[w][i] = sm_test_connect(sm_http_port(h),
			    5000)) >= 0);
			SM_CHECK(cli_sends(fd[w][i], "GET /hello HTTP/1.1\r\n"
			    "Host: t\r\nX-A: b") == 0);
		}
		sleep_ms(150);
	}
	/* Before wave 0's deadline: a third of waves 0 and 1 go away, and
	 * wave 0's first connection completes its request. */
	for (int w = 0; w < 2; w++)
		for (int i = 1 + w; i < DL_PER; i += 3) {
			close(fd[w][i]);
			fd[w][i] = -1;
		}
	SM_CHECK(cli_sends(fd[0][0], "\r\n\r\n") == 0);
	SM_REQUIRE(sm_test_read_resp(fd[0][0], &rs) == 0);
	SM_CHECK(rs.status == 200);
	sm_test_resp_free(&rs);
	for (int w = 0; w < DL_WAVES; w++)
		for (int i = 0; i < DL_PER; i++) {
			int64_t waited;

			if (fd[w][i] < 0 || (w == 0 && i == 0))
				continue;
			waited = cli_wait_closed(fd[w][i], 10000);
			SM_CHECKF(waited >= 0 && now_ms() - opened[w][i] >=
			    DL_MS, "wave %d conn %d: closed after %lld ms "
			    "(waited %lld)", w, i,
			    (long long)(now_ms() - opened[w][i]),
			    (long long)waited);
			cut += waited >= 0;
			close(fd[w][i]);
		}
	SM_CHECKF(cut == DL_WAVES * DL_PER - 2 * (DL_PER / 3) - 1,
	    "%d cut", cut);
	/* The served connection is idle now, with 30 s to send more. */
	sm_test_sock_timeout(fd[0][0], 200);
	SM_CHECK(recv(fd[0][0], &c, 1, 0) < 0 &&
	    (errno == EAGAIN || errno == EWOULDBLOCK));
	exchange(fd[0][0], "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", 200);
	close(fd[0][0]);
	check_healthy(sm_http_port(h));
	sm_http_destroy(h);
}

static void
test_slow_handler_beats_timeout(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;
	struct sm_test_resp rs;

	/* The handler runs longer than the idle timeout: reply still sent. */
	srv_cfg(&cfg);
	cfg.conn_timeout_s = 1;
	SM_REQUIRE((h = srv_start_cfg(&cfg)) != NULL);
	SM_REQUIRE(cli_get(sm_http_port(h), "/slower", &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_STR((char *)rs.body, "slow");
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

struct inflight {
	unsigned port;
	int rv;
	struct sm_test_resp rs;
};

static void *
inflight_client(void *p)
{
	struct inflight *f = p;

	f->rv = cli_get(f->port, "/slow", &f->rs);
	return (NULL);
}

static void
test_stop_in_flight(void)
{
	struct sm_http *h;
	struct inflight f;
	pthread_t t;
	int64_t t0, took;
	int fd;

	SM_REQUIRE((h = srv_start()) != NULL);
	memset(&f, 0, sizeof(f));
	f.port = sm_http_port(h);
	atomic_store(&slow_started, 0);
	SM_REQUIRE(pthread_create(&t, NULL, inflight_client, &f) == 0);
	for (int i = 0; i < 200 && atomic_load(&slow_started) == 0; i++)
		sleep_ms(5);
	SM_CHECK(atomic_load(&slow_started) == 1);
	t0 = now_ms();
	sm_http_stop(h);
	took = now_ms() - t0;
	pthread_join(t, NULL);
	SM_CHECK_EQ(f.rv, 0);
	SM_CHECK_EQ(f.rs.status, 200);
	SM_CHECK_STR((char *)f.rs.body, "slow");
	sm_test_resp_free(&f.rs);
	/* it waited for the handler (a lower bound: load only adds) */
	SM_CHECKF(took >= 200, "stop took %lld ms", (long long)took);
	/* No longer listening; stop is idempotent. */
	fd = sm_test_connect(f.port, 5000);
	SM_CHECK(fd < 0);
	if (fd >= 0)
		close(fd);
	sm_http_stop(h);
	sm_http_stop(h);
	sm_http_destroy(h);
}

static void
test_stop_idle_and_unstarted(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;
	int fd;

	/* An idle kept-alive connection does not hold stop up. */
	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	sleep_ms(50);
	sm_http_stop(h);
	SM_CHECK(cli_wait_closed(fd, 2000) >= 0);
	close(fd);
	sm_http_destroy(h);

	srv_cfg(&cfg);
	SM_REQUIRE(sm_http_create(&cfg, &h, NULL) == 0);
	sm_http_stop(h);
	sm_http_stop(h);
	SM_CHECK(sm_http_port(h) == 0);
	sm_http_destroy(h);
}

static void
test_status_for(void)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(sm_test_err_wire); i++) {
		int status = 0;
		const char *code = NULL;

		sm_http_status_for(sm_test_err_wire[i].rv, &status, &code);
		SM_CHECK_EQ(status, sm_test_err_wire[i].status);
		SM_CHECK_STR(code, sm_test_err_wire[i].code);
	}
}

/* Read everything until the peer closes; malloc'd, NUL-terminated. */
static char *
cli_read_all(int fd, size_t *lenp)
{
	size_t cap = 1 << 16, len = 0;
	char *b = malloc(cap);

	for (;;) {
		ssize_t k;

		if (len + 1 == cap)
			b = realloc(b, cap *= 2);
		if ((k = recv(fd, b + len, cap - len - 1, 0)) <= 0)
			break;
		len += (size_t)k;
	}
	b[len] = '\0';
	*lenp = len;
	return (b);
}

static void
test_stream(void)
{
	static const char *req10 = "GET /stream HTTP/1.0\r\nHost: t\r\n\r\n";
	static const char *req11 = "GET /stream HTTP/1.1\r\nHost: t\r\n"
	    "Connection: close\r\n\r\n";
	struct sm_buf want = SM_BUF_INIT;
	struct sm_http *h;
	unsigned port;
	size_t len;
	char *all, *body;
	int fd;

	for (int i = 0; i < 1000; i++)
		sm_buf_printf(&want, "line %d\n", i);
	sm_buf_putc(&want, '\0');
	atomic_store(&stream_done, 0);
	SM_REQUIRE((h = srv_start()) != NULL);
	port = sm_http_port(h);

	/* HTTP/1.0: the body until close, exactly the pieces joined. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	SM_REQUIRE(cli_sends(fd, req10) == 0);
	all = cli_read_all(fd, &len);
	close(fd);
	SM_CHECK(strncmp(all, "HTTP/1.", 7) == 0 && strstr(all, " 200 ") !=
	    NULL);
	SM_REQUIRE((body = strstr(all, "\r\n\r\n")) != NULL);
	SM_CHECK_STR(body + 4, want.b);
	free(all);

	/* HTTP/1.1: chunked. */
	SM_REQUIRE((fd = sm_test_connect(port, 5000)) >= 0);
	SM_REQUIRE(cli_sends(fd, req11) == 0);
	all = cli_read_all(fd, &len);
	close(fd);
	SM_CHECK(strcasestr(all, "Transfer-Encoding: chunked") != NULL);
	SM_CHECK(strstr(all, "line 999\n") != NULL);
	free(all);

	sm_http_destroy(h);
	SM_CHECK_EQ(atomic_load(&stream_done), 2);
	sm_buf_fini(&want);
}

/* Send GET /fair as tenant `t` on a new connection; returns the fd. */
static int
fair_send(unsigned port, const char *t)
{
	char rq[128];
	int fd = sm_test_connect(port, 10000);

	snprintf(rq, sizeof(rq), "GET /fair HTTP/1.1\r\nHost: t\r\n"
	    "X-Scope-OrgID: %s\r\n\r\n", t);
	SM_REQUIRE(fd >= 0 && cli_sends(fd, rq) == 0);
	return (fd);
}

/*
 * Fair share: two query workers, both running tenant a's queries; a queues
 * a third, then b queues one.  When one of a's finishes, b's runs before
 * a's third, which a plain FIFO would have run first.
 */
static void
test_pool_fair_share(void)
{
	struct sm_http *h;
	struct sm_test_resp rs = { .body = NULL };
	int fd[4];

	memset(fair_order, 0, sizeof(fair_order));
	atomic_store(&fair_started, 0);
	atomic_store(&fair_release, 0);
	SM_REQUIRE((h = pool_srv(1, 2)) != NULL);
	fd[0] = fair_send(sm_http_port(h), "a");
	fd[1] = fair_send(sm_http_port(h), "a");
	for (int i = 0; i < 1000 && atomic_load(&fair_started) < 2; i++)
		sleep_ms(5);
	fd[2] = fair_send(sm_http_port(h), "a");
	for (int i = 0; i < 1000 && sm_http_waiting(h) < 1; i++)
		sleep_ms(5);
	fd[3] = fair_send(sm_http_port(h), "b");
	for (int i = 0; i < 1000 && sm_http_waiting(h) < 2; i++)
		sleep_ms(5);
	SM_CHECK_EQ(sm_http_waiting(h), 2);
	atomic_store(&fair_release, 1);       /* a's first query ends */
	for (int i = 0; i < 1000 && atomic_load(&fair_started) < 3; i++)
		sleep_ms(5);
	atomic_store(&fair_release, 4);
	for (int i = 0; i < 4; i++) {
		SM_CHECK(sm_test_read_resp(fd[i], &rs) == 0 &&
		    rs.status == 200);
		sm_test_resp_free(&rs);
		close(fd[i]);
	}
	SM_CHECK(memcmp(fair_order, "aaba", 4) == 0);
	sm_http_destroy(h);
}

SM_TEST_MAIN(
	{ "worker pools: fair share between tenants", test_pool_fair_share },
	{ "worker pools: a blocked query holds up neither /ready nor writes", test_pools_keep_probes_and_writes_apart },
	{ "streamed reply: pieces joined, chunked on 1.1, done once", test_stream },
	{ "listen addresses: host:port, :port, port, localhost", test_listen_addresses },
	{ "listen on localhost:0", test_localhost_listen },
	{ "start: address in use is SM_EIO, second start SM_EINVAL", test_start_errors },
	{ "routing: GET/POST/any, exact paths, 405 with Allow", test_routing },
	{ "duplicate route is SM_EEXIST", test_duplicate_route },
	{ "404 drains a body first (no EPIPE), 405 too, chunked too", test_not_found_drains_body },
	{ "404 with a JSON body, keep-alive without a body", test_not_found },
	{ "query decoding: %XX, +, repeated and bare keys", test_query_decoding },
	{ "request headers are case-insensitive; response headers", test_headers },
	{ "error body is Pyroscope's JSON shape", test_error_body_shape },
	{ "handler without a reply gets 500", test_noreply_500 },
	{ "5xx bodies: no paths or addresses, request id",
	    test_5xx_messages },
	{ "body echo: binary with NULs, empty, 100-continue, 1 MiB", test_body_echo },
	{ "413 by Content-Length, server healthy after", test_413_content_length },
	{ "413 by chunked body over the cap, server healthy after", test_413_chunked },
	{ "oversized headers get 431", test_header_too_large },
	{ "many sequential requests, keep-alive and not", test_keepalive_many },
	{ "concurrent clients", test_concurrent_clients },
	{ "connection limit: 5th of 4 waits, others work", test_connection_limit },
	{ "per-IP connection limit", test_per_ip_limit },
	{ "idle timeout: idle, kept-alive, slowloris, stalled body", test_idle_timeout },
	{ "header deadline: 90 connections in waves, each cut at its own", test_header_deadline_many },
	{ "handler slower than the idle timeout still replies", test_slow_handler_beats_timeout },
	{ "stop waits for the in-flight handler", test_stop_in_flight },
	{ "stop: idle connections, unstarted server, idempotent", test_stop_idle_and_unstarted },
	{ "status_for maps SM_E* to HTTP and Connect codes", test_status_for },
)
