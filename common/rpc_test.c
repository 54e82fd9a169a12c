/*
 * rpc_test.c -- the nng transport: round trips over inproc and tcp,
 * concurrency, deadlines, teardown, and the frame-size bound.
 *
 * A slow call is one the handler holds at a gate the test opens, not one
 * that sleeps: "still pending" and "ran one at a time" are then facts the
 * test arranged, not durations it measured.
 */
#include "sm_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/rpc.h"

/*
 * The gate "sleep" requests wait at: closed by a test that wants slow
 * calls, opened when they may finish (at the latest after 10 s, so a
 * failed test cannot hang the next).  It counts the requests that
 * entered, and the most that were inside at once.
 */
static struct {
	pthread_once_t once;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool closed;
	int entered, inside, inside_max;
} gate = { .once = PTHREAD_ONCE_INIT };

static void
gate_init(void)
{
	pthread_mutex_init(&gate.mu, NULL);
	sm_cond_init(&gate.cv);
}

/* Lock the gate, initialised on first use. */
static void
gate_lock(void)
{
	pthread_once(&gate.once, gate_init);
	pthread_mutex_lock(&gate.mu);
}

static void
gate_close(void)
{
	gate_lock();
	gate.closed = true;
	gate.entered = gate.inside = gate.inside_max = 0;
	pthread_mutex_unlock(&gate.mu);
}

static void
gate_open(void)
{
	gate_lock();
	gate.closed = false;
	pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
}

static void
gate_pass(void)
{
	int64_t deadline = sm_mono_ns() + 10000 * 1000000LL;

	gate_lock();
	gate.entered++;
	gate.inside++;
	gate.inside_max = SM_MAX(gate.inside_max, gate.inside);
	pthread_cond_broadcast(&gate.cv);
	while (gate.closed && sm_cond_wait_until(&gate.cv, &gate.mu, deadline))
		;
	gate.inside--;
	pthread_mutex_unlock(&gate.mu);
}

/* Wait (at most 10 s) until n requests entered the gate. */
static bool
gate_wait_entered(int n)
{
	int64_t deadline = sm_mono_ns() + 10000 * 1000000LL;
	bool ok;

	gate_lock();
	while (gate.entered < n && sm_cond_wait_until(&gate.cv, &gate.mu,
	    deadline))
		;
	ok = gate.entered >= n;
	pthread_mutex_unlock(&gate.mu);
	return (ok);
}

static int
gate_get(const int *field)
{
	int v;

	gate_lock();
	v = *field;
	pthread_mutex_unlock(&gate.mu);
	return (v);
}

/* Echo handler; a request starting with "sleep" waits at the gate first,
 * one starting with "fail" answers an SM_ELIMIT Response, one starting
 * with "edge" is held for the microseconds in its next two bytes. */
static int
echo(void *arg, const uint8_t *req, size_t len, struct sm_buf *resp)
{
	(void)arg;
	if (len >= 6 && memcmp(req, "edge", 4) == 0) {
		struct timespec ts = { 0, ((long)req[4] << 8 | req[5]) * 1000L };

		nanosleep(&ts, NULL);
	}
	if (len >= 4 && memcmp(req, "fail", 4) == 0) {
		sm_rpc_pack_error(SM_ELIMIT, "over the limit", resp);
		return (SM_ELIMIT);
	}
	if (len >= 5 && memcmp(req, "sleep", 5) == 0)
		gate_pass();
	sm_buf_append(resp, req, len);
	return (0);
}

static const char *
tcp_url(char *buf, size_t n, int port)
{
	snprintf(buf, n, "tcp://127.0.0.1:%d", port);
	return (buf);
}

static struct sm_rpc_server *
start(const char *url, size_t recv_max)
{
	struct sm_rpc_server_cfg cfg = { url, 4, recv_max, 2000, 0, false, 0, NULL };
	struct sm_rpc_server *s = NULL;
	struct sm_err err;

	if (sm_rpc_server_start(&cfg, echo, NULL, &s, &err) != 0)
		fprintf(stderr, "server: %s\n", err.msg);
	return (s);
}

static struct sm_rpc_client *
client(const char *url)
{
	struct sm_rpc_client_cfg cfg = { url, 1 << 24, 20 };
	struct sm_rpc_client *c = NULL;
	struct sm_err err;

	if (sm_rpc_client_create(&cfg, &c, &err) != 0)
		fprintf(stderr, "client: %s\n", err.msg);
	return (c);
}

static void
roundtrip(const char *url)
{
	struct sm_rpc_server *s = start(url, 1 << 20);
	struct sm_rpc_client *c = client(url);
	struct sm_buf resp = SM_BUF_INIT;
	uint8_t big[300000];

	SM_REQUIRE(s != NULL && c != NULL);
	SM_CHECK_EQ(sm_rpc_call(c, "hello", 5, 5000, &resp), 0);
	SM_CHECK_EQ(resp.len, 5);
	SM_CHECK(resp.b != NULL && memcmp(resp.b, "hello", 5) == 0);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 31);
	sm_buf_reset(&resp);
	SM_CHECK_EQ(sm_rpc_call(c, big, sizeof(big), 5000, &resp), 0);
	SM_CHECK_EQ(resp.len, sizeof(big));
	SM_CHECK(memcmp(resp.b, big, sizeof(big)) == 0);
	sm_buf_fini(&resp);
	sm_rpc_client_destroy(c);
	sm_rpc_server_stop(s);
}

static void
test_inproc(void)
{
	roundtrip("inproc://rpc-test-1");
}

static void
test_tcp(void)
{
	char url[64];

	roundtrip(tcp_url(url, sizeof(url), sm_test_free_port()));
}

struct conc {
	struct sm_rpc_client *c;
	int id;
	int ok;
};

static void *
conc_main(void *p)
{
	struct conc *x = p;
	struct sm_buf resp = SM_BUF_INIT;
	char msg[64];

	for (int i = 0; i < 200; i++) {
		int n = snprintf(msg, sizeof(msg), "t%d-%d", x->id, i);

		sm_buf_reset(&resp);
		if (sm_rpc_call(x->c, msg, (size_t)n, 5000, &resp) == 0 &&
		    resp.len == (size_t)n && memcmp(resp.b, msg, (size_t)n) == 0)
			x->ok++;
	}
	sm_buf_fini(&resp);
	return (NULL);
}

static void
test_concurrent_calls_share_a_client(void)
{
	struct sm_rpc_server *s = start("inproc://rpc-test-conc", 1 << 20);
	struct sm_rpc_client *c = client("inproc://rpc-test-conc");
	struct conc x[8];
	pthread_t t[8];

	SM_REQUIRE(s != NULL && c != NULL);
	for (int i = 0; i < 8; i++) {
		x[i] = (struct conc){ c, i, 0 };
		pthread_create(&t[i], NULL, conc_main, &x[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		SM_CHECK_EQ(x[i].ok, 200);   /* every reply matched its call */
	}
	sm_rpc_client_destroy(c);
	sm_rpc_server_stop(s);
}

static void
test_deadline(void)
{
	char url[64];
	struct sm_rpc_server *s = start("inproc://rpc-test-slow", 1 << 20);
	struct sm_rpc_client *c = client("inproc://rpc-test-slow");
	struct sm_buf resp = SM_BUF_INIT;

	SM_REQUIRE(s != NULL && c != NULL);
	/* the handler holds the call: only its deadline can end it */
	gate_close();
	SM_CHECK_EQ(sm_rpc_call(c, "sleep", 5, 300, &resp), SM_ETIMEDOUT);
	gate_open();
	/* No server at all: the call times out, it does not hang. */
	sm_rpc_client_destroy(c);
	c = client(tcp_url(url, sizeof(url), sm_test_free_port()));
	SM_REQUIRE(c != NULL);
	SM_CHECK_EQ(sm_rpc_call(c, "x", 1, 200, &resp), SM_ETIMEDOUT);
	sm_buf_fini(&resp);
	sm_rpc_client_destroy(c);
	sm_rpc_server_stop(s);
}

static void
test_oversize_message_is_dropped(void)
{
	char url[64];
	struct sm_rpc_server *s = start(tcp_url(url, sizeof(url), sm_test_free_port()),
	    1000);
	struct sm_rpc_client *c = s != NULL ? client(url) : NULL;
	struct sm_buf resp = SM_BUF_INIT;
	uint8_t big[2000] = { 0 };

	if (s == NULL || c == NULL) {
		sm_rpc_client_destroy(c);
		sm_rpc_server_stop(s);
		SM_REQUIRE(s != NULL && c != NULL);
	}
	SM_CHECK(sm_rpc_call(c, big, sizeof(big), 500, &resp) != 0);
	/* The server still serves normal requests afterwards. */
	sm_buf_reset(&resp);
	SM_CHECK_EQ(sm_rpc_call(c, "ok", 2, 3000, &resp), 0);
	sm_buf_fini(&resp);
	sm_rpc_client_destroy(c);
	sm_rpc_server_stop(s);
}

/*
 * A peer that speaks the SP/TCP handshake and then announces a frame of
 * 2^60 bytes: the listener must drop the connection without allocating it
 * (an attempt would abort under ASan or fail), and keep serving.
 */
static void
test_2p60_frame_dropped_without_allocation(void)
{
	int port = sm_test_free_port();
	char url[64];
	struct sm_rpc_server *s = start(tcp_url(url, sizeof(url), port),
	    1 << 20);
	struct sm_rpc_client *c;
	struct sockaddr_in sa = { .sin_family = AF_INET,
		.sin_port = htons((uint16_t)port) };
	/* SP header: 0 'S' 'P' 0, protocol REQ0 = 0x30, reserved. */
	uint8_t hello[8] = { 0, 'S', 'P', 0, 0, 0x30, 0, 0 };
	uint8_t frame[8] = { 0x10, 0, 0, 0, 0, 0, 0, 0 };   /* 2^60 */
	uint8_t buf[64];
	struct sm_buf resp = SM_BUF_INIT;
	int fd, got = 0;
	ssize_t n;

	SM_REQUIRE(s != NULL);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	SM_REQUIRE(fd >= 0);
	SM_REQUIRE(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	SM_CHECK(write(fd, hello, sizeof(hello)) == sizeof(hello));
	SM_CHECK(write(fd, frame, sizeof(frame)) == sizeof(frame));
	SM_CHECK(write(fd, "abcd", 4) == 4);
	/* Read the server's header, then expect EOF (connection dropped). */
	for (int i = 0; i < 100; i++) {
		struct timeval tv = { 0, 50000 };

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		n = read(fd, buf, sizeof(buf));
		if (n == 0) {
			got = 1;
			break;
		}
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			got = 1;   /* reset also counts as dropped */
			break;
		}
	}
	SM_CHECK(got);
	close(fd);
	c = client(url);
	SM_REQUIRE(c != NULL);
	SM_CHECK_EQ(sm_rpc_call(c, "still", 5, 3000, &resp), 0);
	sm_buf_fini(&resp);
	sm_rpc_client_destroy(c);
	sm_rpc_server_stop(s);
}

/* Wait (bounded: 10 s, for a loaded machine) until the client has a pipe. */
static int
wait_connected(struct sm_rpc_client *c)
{
	for (int i = 0; i < 1000 && !sm_rpc_client_connected(c); i++)
		usleep(10000);
	return (sm_rpc_client_connected(c));
}

/* A server on each of urls[0..n-1] and a client connected to it. */
static void
pairs_start(const char *const *urls, int n, struct sm_rpc_server **s,
    struct sm_rpc_client **c)
{
	for (int i = 0; i < n; i++) {
		s[i] = start(urls[i], 1 << 20);
		c[i] = client(urls[i]);
		SM_REQUIRE(s[i] != NULL && c[i] != NULL);
		SM_REQUIRE(wait_connected(c[i]));
	}
}

static void
pairs_stop(int n, struct sm_rpc_server **s, struct sm_rpc_client **c)
{
	for (int i = 0; i < n; i++) {
		sm_rpc_client_destroy(c[i]);
		sm_rpc_server_stop(s[i]);
	}
}

/*
 * The round both quorum tests start: "hi" to ca, "sleep" (held at the
 * gate) to cb, "yo" to cc, all fail-fast, timed from *t0.
 */
static void
quorum_round(struct sm_rpc_multi **m, struct sm_rpc_client *ca,
    struct sm_rpc_client *cb, struct sm_rpc_client *cc, int64_t *t0)
{
	SM_REQUIRE(sm_rpc_multi_create(3, "test", m) == 0);
	gate_close();
	*t0 = sm_mono_ns();
	sm_rpc_multi_start(*m, 0, ca, "hi", 2, 5000, SM_RPC_FAILFAST);
	sm_rpc_multi_start(*m, 1, cb, "sleep", 5, 5000, SM_RPC_FAILFAST);
	sm_rpc_multi_start(*m, 2, cc, "yo", 2, 5000, SM_RPC_FAILFAST);
}

/*
 * Replies that race their deadline: calls with a 1 or 2 ms deadline to a
 * handler that holds each for 0 to 2.5 ms, so many replies land as nng's
 * expiry thread cancels them.  Each call ends (answered or timed out) and
 * nothing is used after it is freed (ASan).  A call's context used to be
 * closed from its callback while that thread could still be cancelling
 * on it ("Retiring a call" in rpc.c); hitting that needs the expiry
 * thread preempted between taking and calling the cancel function, so
 * this load exercises the path rather than catching the old order every
 * run.  The test asserts outcomes only, not durations.
 */
static void
test_replies_race_deadlines(void)
{
	char tcp[64];
	const char *urls[2] = { tcp_url(tcp, sizeof(tcp), sm_test_free_port()),
	    "inproc://edge-b" };
	struct sm_rpc_server *s[2];
	struct sm_rpc_client *c[2];
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	int answered = 0, timed_out = 0;

	pairs_start(urls, 2, s, c);
	for (int round = 0; round < 150; round++) {
		struct sm_rpc_multi *m;
		uint8_t req[8][6];

		SM_REQUIRE(sm_rpc_multi_create(8, "edge", &m) == 0);
		for (uint32_t i = 0; i < 8; i++) {
			unsigned us;

			seed = seed * 6364136223846793005ULL + 1;
			us = (unsigned)(seed >> 33) % 2500;
			memcpy(req[i], "edge", 4);
			req[i][4] = (uint8_t)(us >> 8);
			req[i][5] = (uint8_t)us;
			sm_rpc_multi_start(m, i, c[i % 2], req[i], 6,
			    1 + (int)(i % 2), 0);
		}
		sm_rpc_multi_wait(m);
		for (uint32_t i = 0; i < 8; i++) {
			int st = sm_rpc_multi_status(m, i);

			SM_CHECKF(st == 0 || st == SM_ETIMEDOUT,
			    "call %u of round %d: %d", i, round, st);
			answered += st == 0;
			timed_out += st == SM_ETIMEDOUT;
		}
		sm_rpc_multi_destroy(m);
	}
	SM_CHECK_EQ(answered + timed_out, 150 * 8);
	/* Let the late replies land before the pipes go: a pipe torn down
	 * while a reply is being sent on it can wedge nng 1.5's reaper for
	 * the rest of the process ("Closing a socket, bounded" in rpc.c),
	 * and every later test's close would then wait its 5 s and find
	 * its connections never freed.  A handler holds a call 2.5 ms at
	 * most; 300 ms leaves room for a sanitizer build on a busy box. */
	usleep(300 * 1000);
	pairs_stop(2, s, c);
}

/*
 * Three servers, one of them slow: a quorum of 2 of 3 returns as soon as
 * the fast two answered; the slow call completes in the background after
 * the multi was destroyed (ASan checks nothing leaks or is used after
 * free).  A plain wait takes the slow one's time.
 */
static void
test_multi_quorum_returns_early(void)
{
	const char *urls[3] = { "inproc://m-a", "inproc://m-b", "inproc://m-c" };
	struct sm_rpc_server *s[3];
	struct sm_rpc_client *c[3];
	struct sm_rpc_multi *m;
	struct sm_quorum q = { .nvoters = 3, .need = 2,
	    .grace_ns = SM_QUORUM_NOW };
	const uint8_t *d;
	size_t len;
	int64_t t0;

	pairs_start(urls, 3, s, c);
	quorum_round(&m, c[0], c[1], c[2], &t0);
	SM_CHECK_EQ(sm_rpc_multi_wait_quorum(m, &q), SM_QUORUM_MET);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 0), 0);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 1), SM_RPC_PENDING);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 2), 0);
	SM_CHECK_EQ(sm_rpc_multi_reply(m, 2, &d, &len), 0);
	SM_CHECK(len == 2 && memcmp(d, "yo", 2) == 0);
	sm_rpc_multi_destroy(m);
	/* Waiting for everything waits for the slow one: its call entered
	 * the gate before it opens, and has its answer after the wait. */
	SM_REQUIRE(sm_rpc_multi_create(2, "test", &m) == 0);
	sm_rpc_multi_start(m, 0, c[1], "sleep", 5, 5000, 0);
	sm_rpc_multi_start(m, 1, c[0], "x", 1, 5000, 0);
	SM_CHECK(gate_wait_entered(2));
	gate_open();
	sm_rpc_multi_wait(m);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 0), 0);
	SM_CHECK_EQ(sm_rpc_multi_reply(m, 0, &d, &len), 0);
	SM_CHECK(len == 5 && memcmp(d, "sleep", 5) == 0);
	sm_rpc_multi_destroy(m);
	pairs_stop(3, s, c);
}

/*
 * A hedged quorum: once two fast calls answered, the slow one (held at
 * the gate) gets the grace (100 ms, longer than the round so far) and is
 * left pending; SM_QUORUM_ALL waits for it.
 */
static void
test_multi_quorum_grace(void)
{
	const char *urls[2] = { "inproc://d-a", "inproc://d-b" };
	struct sm_rpc_server *s[2];
	struct sm_rpc_client *c[2];
	struct sm_rpc_multi *m;
	struct sm_quorum q = { .nvoters = 3, .need = 2,
	    .grace_ns = 100 * 1000000 };
	int64_t t0, ms;

	pairs_start(urls, 2, s, c);
	quorum_round(&m, c[0], c[1], c[0], &t0);
	SM_CHECK_EQ(sm_rpc_multi_wait_quorum(m, &q), SM_QUORUM_MET);
	/* the grace was given: a lower bound, which no load can break */
	ms = (sm_mono_ns() - t0) / 1000000;
	SM_CHECK(ms >= 100);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 0), 0);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 1), SM_RPC_PENDING);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 2), 0);
	sm_rpc_multi_destroy(m);
	/* SM_QUORUM_ALL: every call. */
	q.grace_ns = SM_QUORUM_ALL;
	q.nvoters = 2;
	SM_REQUIRE(sm_rpc_multi_create(2, "test", &m) == 0);
	sm_rpc_multi_start(m, 0, c[1], "sleep", 5, 5000, 0);
	sm_rpc_multi_start(m, 1, c[0], "x", 1, 5000, 0);
	gate_open();
	SM_CHECK_EQ(sm_rpc_multi_wait_quorum(m, &q), SM_QUORUM_DONE);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 0), 0);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 1), 0);
	sm_rpc_multi_destroy(m);
	pairs_stop(2, s, c);
}

/*
 * Voters and groups: a doomed quorum returns at once with a slow call
 * pending; lanes of one voter (stride) fail together; an unstarted call
 * is absent and dooms a quorum that needed it; each group counts only
 * its own voters.
 */
static void
test_multi_quorum_voters_groups(void)
{
	/* Eight workers: four "sleep" calls are still at the gate at the
	 * end. */
	struct sm_rpc_server_cfg cfg = { "inproc://q-a", 8, 1 << 20, 2000, 0,
		false, 0, NULL };
	struct sm_rpc_server *s = NULL;
	struct sm_rpc_client *c = client("inproc://q-a");
	struct sm_err err;
	struct sm_rpc_multi *m;
	struct sm_quorum q = { .nvoters = 3, .need = 2,
	    .grace_ns = SM_QUORUM_ALL };
	static const uint32_t off[3] = { 0, 2, 3 }, vot[3] = { 0, 1, 2 };

	SM_REQUIRE(sm_rpc_server_start(&cfg, echo, NULL, &s, &err) == 0);
	SM_REQUIRE(c != NULL && wait_connected(c));
	gate_close();
	/* Two failures of three, need 2: doomed without the slow one. */
	SM_REQUIRE(sm_rpc_multi_create(3, "test", &m) == 0);
	sm_rpc_multi_start(m, 0, c, "fail", 4, 5000, 0);
	sm_rpc_multi_start(m, 1, c, "sleep", 5, 5000, 0);
	sm_rpc_multi_start(m, 2, c, "fail", 4, 5000, 0);
	SM_CHECK_EQ(sm_rpc_multi_wait_quorum(m, &q), SM_QUORUM_DOOMED);
	SM_CHECK_EQ(sm_quorum_voter(m, &q, 0), SM_ELIMIT);
	SM_CHECK_EQ(sm_quorum_voter(m, &q, 1), SM_RPC_PENDING);
	sm_rpc_multi_destroy(m);
	/* Stride 2: voter 0 = calls 0 and 2, voter 1 = calls 1 and 3. */
	SM_REQUIRE(sm_rpc_multi_create(4, "test", &m) == 0);
	sm_rpc_multi_start(m, 0, c, "hi", 2, 5000, 0);
	sm_rpc_multi_start(m, 1, c, "x", 1, 5000, 0);
	sm_rpc_multi_start(m, 2, c, "fail", 4, 5000, 0);
	sm_rpc_multi_start(m, 3, c, "y", 1, 5000, 0);
	q = (struct sm_quorum){ .nvoters = 2, .stride = 2, .need = 1,
	    .grace_ns = SM_QUORUM_ALL };
	SM_CHECK_EQ(sm_rpc_multi_wait_quorum(m, &q), SM_QUORUM_DONE);
	SM_CHECK_EQ(sm_quorum_voter(m, &q, 0), SM_ELIMIT);
	SM_CHECK_EQ(sm_quorum_voter(m, &q, 1), 0);
	sm_rpc_multi_destroy(m);
	/* Call 1 never started: absent; needing all three is hopeless. */
	SM_REQUIRE(sm_rpc_multi_create(3, "test", &m) == 0);
	sm_rpc_multi_start(m, 0, c, "sleep", 5, 5000, 0);
	sm_rpc_multi_start(m, 2, c, "sleep", 5, 5000, 0);
	q = (struct sm_quorum){ .nvoters = 3, .need = 3,
	    .grace_ns = SM_QUORUM_NOW };
	SM_CHECK_EQ(sm_quorum_voter(m, &q, 1), SM_RPC_ABSENT);
	SM_CHECK_EQ(sm_rpc_multi_wait_quorum(m, &q), SM_QUORUM_DOOMED);
	sm_rpc_multi_destroy(m);
	/* Groups {0, 1} and {2}, one success each: met with call 0 slow. */
	SM_REQUIRE(sm_rpc_multi_create(3, "test", &m) == 0);
	sm_rpc_multi_start(m, 0, c, "sleep", 5, 5000, 0);
	sm_rpc_multi_start(m, 1, c, "hi", 2, 5000, 0);
	sm_rpc_multi_start(m, 2, c, "yo", 2, 5000, 0);
	q = (struct sm_quorum){ .nvoters = 3, .ngroups = 2, .group_off = off,
	    .group_voter = vot, .need = 1, .grace_ns = SM_QUORUM_NOW };
	SM_CHECK_EQ(sm_rpc_multi_wait_quorum(m, &q), SM_QUORUM_MET);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 0), SM_RPC_PENDING);
	sm_rpc_multi_destroy(m);
	sm_rpc_client_destroy(c);
	gate_open();
	sm_rpc_server_stop(s);
}

/* A client without a connection fails a FAILFAST call at once. */
static void
test_failfast_without_a_connection(void)
{
	char url[64];
	struct sm_rpc_client *c = client(tcp_url(url, sizeof(url),
	    sm_test_free_port()));
	struct sm_rpc_multi *m;
	int64_t t0;

	SM_REQUIRE(c != NULL);
	SM_CHECK(!sm_rpc_client_connected(c));
	SM_REQUIRE(sm_rpc_multi_create(2, "test", &m) == 0);
	t0 = sm_mono_ns();
	sm_rpc_multi_start(m, 0, c, "x", 1, 5000, SM_RPC_FAILFAST);
	sm_rpc_multi_start(m, 1, c, "x", 1, 300, 0);
	sm_rpc_multi_wait(m);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 0), SM_EUNAVAIL);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 1), SM_ETIMEDOUT);
	SM_CHECK((sm_mono_ns() - t0) / 1000000 < 2000);
	sm_rpc_multi_destroy(m);
	sm_rpc_client_destroy(c);
}

/*
 * sm_rpc_client_redial drops the connection (a call waiting on it ends
 * with SM_EUNAVAIL rather than at its deadline) and connects again.
 */
static void
test_redial(void)
{
	char url[64];
	struct sm_rpc_server *s = start(tcp_url(url, sizeof(url),
	    sm_test_free_port()), 1 << 20);
	struct sm_rpc_client *c = client(url);
	struct sm_buf resp = SM_BUF_INIT;
	struct sm_rpc_multi *m;

	SM_REQUIRE(s != NULL && c != NULL);
	SM_CHECK_EQ(sm_rpc_call(c, "one", 3, 5000, &resp), 0);
	SM_REQUIRE(sm_rpc_multi_create(1, "test", &m) == 0);
	gate_close();
	sm_rpc_multi_start(m, 0, c, "sleep", 5, 10000, 0);
	SM_REQUIRE(gate_wait_entered(1));     /* the server holds it */
	SM_CHECK_EQ(sm_rpc_client_redial(c), 0);
	/* with no answer coming, only the redial (SM_EUNAVAIL) or the
	 * deadline (SM_ETIMEDOUT) can end it */
	sm_rpc_multi_wait(m);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 0), SM_EUNAVAIL);
	gate_open();
	sm_rpc_multi_destroy(m);
	for (int i = 0; i < 500 && !sm_rpc_client_connected(c); i++)
		usleep(10 * 1000);
	SM_CHECK(sm_rpc_client_connected(c));
	sm_buf_reset(&resp);
	SM_CHECK_EQ(sm_rpc_call(c, "two", 3, 5000, &resp), 0);
	SM_CHECK(resp.len == 3 && memcmp(resp.b, "two", 3) == 0);
	sm_buf_fini(&resp);
	sm_rpc_client_destroy(c);
	sm_rpc_server_stop(s);
}

/* Reserved workers: with 2 workers, 1 kept for light requests ("ping"),
 * three slow calls at once run one at a time on one worker (two are
 * parked, none refused), and a ping meanwhile is answered while the
 * first of them is still held. */
static atomic_int classified;         /* requests is_ping looked at */

static bool
is_ping(const uint8_t *req, size_t len)
{
	atomic_fetch_add(&classified, 1);
	return (len >= 4 && memcmp(req, "ping", 4) == 0);
}

static void
test_reserved_worker(void)
{
	char url[64];
	struct sm_rpc_server_cfg cfg = { tcp_url(url, sizeof(url),
	    sm_test_free_port()), 2, 1 << 20, 2000, 0, false, 1, is_ping };
	struct sm_rpc_server *s = NULL;
	struct sm_rpc_client *c;
	struct sm_rpc_multi *m;
	struct sm_buf resp = SM_BUF_INIT;
	struct sm_err err;

	SM_REQUIRE(sm_rpc_server_start(&cfg, echo, NULL, &s, &err) == 0);
	SM_REQUIRE((c = client(url)) != NULL);
	SM_CHECK_EQ(sm_rpc_call(c, "ping0", 5, 5000, &resp), 0);
	SM_REQUIRE(sm_rpc_multi_create(3, "test", &m) == 0);
	gate_close();
	atomic_store(&classified, 0);
	for (uint32_t i = 0; i < 3; i++)
		sm_rpc_multi_start(m, i, c, "sleep", 5, 10000, 0);
	/* all three received (classified), one of them held */
	for (int i = 0; i < 10000 && atomic_load(&classified) < 3; i++)
		usleep(1000);
	SM_REQUIRE(gate_wait_entered(1));
	sm_buf_reset(&resp);
	SM_CHECK_EQ(sm_rpc_call(c, "ping1", 5, 5000, &resp), 0);
	SM_CHECK(resp.len == 5 && memcmp(resp.b, "ping1", 5) == 0);
	/* answered while the heavy worker still held the first */
	SM_CHECK_EQ(gate_get(&gate.entered), 1);
	SM_CHECK_EQ(gate_get(&gate.inside), 1);
	gate_open();
	sm_rpc_multi_wait(m);
	for (uint32_t i = 0; i < 3; i++)
		SM_CHECK_EQ(sm_rpc_multi_status(m, i), 0);
	/* one heavy worker: the three ran in turn */
	SM_CHECK_EQ(gate_get(&gate.entered), 3);
	SM_CHECK_EQ(gate_get(&gate.inside_max), 1);
	sm_rpc_multi_destroy(m);
	sm_buf_fini(&resp);
	sm_rpc_client_destroy(c);
	sm_rpc_server_stop(s);
}

/* An error Response's code is the call's status. */
static int
err_handler(void *arg, const uint8_t *req, size_t len, struct sm_buf *resp)
{
	(void)arg;
	(void)req;
	(void)len;
	sm_rpc_pack_error(SM_ELIMIT, "over the limit", resp);
	return (SM_ELIMIT);
}

static void
test_multi_status_is_the_envelope_code(void)
{
	struct sm_rpc_server_cfg cfg = { "inproc://m-err", 1, 1 << 20, 1000,
		0, false, 0, NULL };
	struct sm_rpc_server *s = NULL;
	struct sm_rpc_client *c;
	struct sm_rpc_multi *m;
	struct sm_arena *a = sm_arena_create(0);
	Smolder__V1__Response *r;
	struct sm_err err;

	SM_REQUIRE(sm_rpc_server_start(&cfg, err_handler, NULL, &s, &err) ==
	    0);
	c = client("inproc://m-err");
	SM_REQUIRE(c != NULL && a != NULL);
	SM_REQUIRE(sm_rpc_multi_create(1, "test", &m) == 0);
	sm_rpc_multi_start(m, 0, c, "x", 1, 3000, 0);
	sm_rpc_multi_wait(m);
	SM_CHECK_EQ(sm_rpc_multi_status(m, 0), SM_ELIMIT);
	SM_CHECK_EQ(sm_rpc_multi_response(m, 0, a, &r, &err), SM_ELIMIT);
	SM_CHECK(strstr(err.msg, "over the limit") != NULL);
	sm_rpc_multi_destroy(m);
	sm_arena_destroy(a);
	sm_rpc_client_destroy(c);
	sm_rpc_server_stop(s);
}

/*
 * Connections beyond max_conns are closed before they are added: the third
 * client's calls fail (its pipes are closed as they arrive) until a slot
 * frees up.
 */
static void
test_connection_cap(void)
{
	char url[64];
	struct sm_rpc_server_cfg cfg = { tcp_url(url, sizeof(url),
	    sm_test_free_port()), 2, 1 << 20, 1000, 2, false, 0, NULL };
	struct sm_rpc_server *s = NULL;
	struct sm_rpc_client *c[3];
	struct sm_buf resp = SM_BUF_INIT;
	struct sm_err err;
	int ok = 0;

	SM_REQUIRE(sm_rpc_server_start(&cfg, echo, NULL, &s, &err) == 0);
	for (int i = 0; i < 2; i++) {
		c[i] = client(url);
		SM_REQUIRE(c[i] != NULL);
		SM_CHECK(wait_connected(c[i]));
		SM_CHECK_EQ(sm_rpc_call(c[i], "in", 2, 3000, &resp), 0);
		sm_buf_reset(&resp);
	}
	c[2] = client(url);
	SM_REQUIRE(c[2] != NULL);
	SM_CHECK(sm_rpc_call(c[2], "out", 3, 500, &resp) != 0);
	sm_buf_reset(&resp);
	/* Freeing a slot lets the third in (it keeps redialing). */
	sm_rpc_client_destroy(c[0]);
	for (int i = 0; i < 50 && !ok; i++) {
		ok = sm_rpc_call(c[2], "in", 2, 200, &resp) == 0;
		sm_buf_reset(&resp);
	}
	SM_CHECK(ok);
	sm_buf_fini(&resp);
	sm_rpc_client_destroy(c[1]);
	sm_rpc_client_destroy(c[2]);
	sm_rpc_server_stop(s);
}

static void
test_pb_envelope_errors(void)
{
	struct sm_buf b = SM_BUF_INIT;
	Smolder__V1__Response *r;

	sm_rpc_pack_error(SM_ELIMIT, "too many", &b);
	r = smolder__v1__response__unpack(NULL, b.len, (uint8_t *)b.b);
	SM_REQUIRE(r != NULL);
	SM_CHECK_EQ(r->code, SM_ELIMIT);
	SM_CHECK_STR(r->message, "too many");
	smolder__v1__response__free_unpacked(r, NULL);
	sm_buf_fini(&b);
}

struct slow_call {
	struct sm_rpc_client *c;
	int rv;
	struct sm_buf resp;
};

static void *
slow_call_main(void *p)
{
	struct slow_call *x = p;

	x->rv = sm_rpc_call(x->c, "sleep-tcp", 9, 5000, &x->resp);
	return (NULL);
}

struct stopper {
	struct sm_rpc_server *s;
	atomic_bool begun, done;
};

static void *
stopper_main(void *p)
{
	struct stopper *st = p;

	atomic_store(&st->begun, true);
	sm_rpc_server_stop(st->s);
	atomic_store(&st->done, true);
	return (NULL);
}

/*
 * Stopping a TCP server while a worker is inside its handler: the stop
 * waits for the handler, the reply goes out (or fails cleanly), and
 * nothing touches a closed context (nng 1.5 panicked in nng_ctx_send when
 * the socket was closed first; ASan would see the use after free).
 */
static void
test_stop_during_handler_tcp(void)
{
	char url[64];
	struct sm_rpc_client *c;
	struct slow_call x = { NULL, -1, SM_BUF_INIT };
	struct stopper st = { NULL, false, false };
	pthread_t t, ts;
	int64_t t0;

	tcp_url(url, sizeof(url), sm_test_free_port());
	st.s = start(url, 1 << 20);
	c = client(url);
	SM_REQUIRE(st.s != NULL && c != NULL && wait_connected(c));
	x.c = c;
	gate_close();
	pthread_create(&t, NULL, slow_call_main, &x);
	SM_REQUIRE(gate_wait_entered(1));     /* the worker is in it */
	pthread_create(&ts, NULL, stopper_main, &st);
	while (!atomic_load(&st.begun))
		usleep(1000);
	/* Give the stop time to reach its wait for the handler (no check
	 * rests on this: a stop not yet there only makes the test weaker);
	 * it cannot return while the handler is held. */
	usleep(50 * 1000);
	SM_CHECK(!atomic_load(&st.done));
	t0 = sm_mono_ns();
	gate_open();
	pthread_join(ts, NULL);
	/* then it did not wait for a whole send timeout (2 s) */
	SM_CHECK((sm_mono_ns() - t0) / 1000000 < 2000);
	pthread_join(t, NULL);
	SM_CHECK(x.rv == 0 || x.rv == SM_ETIMEDOUT || x.rv == SM_EUNAVAIL);
	if (x.rv == 0)
		SM_CHECK(x.resp.len == 9 && memcmp(x.resp.b, "sleep-tcp", 9) == 0);
	sm_buf_fini(&x.resp);
	sm_rpc_client_destroy(c);
}

/* Records the handler's thread and the message it was handed (rpc.h,
 * sm_rpc_direct_msg), then echoes (see echo). */
static pthread_t direct_thr;
static const void *direct_seen;

static int
echo_thread(void *arg, const uint8_t *req, size_t len, struct sm_buf *resp)
{
	direct_thr = pthread_self();
	direct_seen = sm_rpc_direct_msg(req);
	return (echo(arg, req, len, resp));
}

/* Call i of a fresh multi, with message `msg` handed along (NULL: none):
 * status, and the reply bytes when `reply` is not NULL. */
static int
one_call_msg(struct sm_rpc_client *c, const void *req, size_t len,
    const void *msg, int flags, struct sm_buf *reply)
{
	struct sm_rpc_multi *m;
	const uint8_t *d;
	size_t n;
	int st;

	SM_REQUIRE(sm_rpc_multi_create(1, "test", &m) == 0);
	sm_rpc_multi_start_msg(m, 0, c, req, len, msg, 3000, flags);
	sm_rpc_multi_wait(m);
	st = sm_rpc_multi_status(m, 0);
	if (reply != NULL) {
		sm_buf_reset(reply);
		if (sm_rpc_multi_reply(m, 0, &d, &n) == 0)
			sm_buf_append(reply, d, n);
	}
	sm_rpc_multi_destroy(m);
	return (st);
}

/* Call i of a fresh multi: status and reply bytes. */
static int
one_call(struct sm_rpc_client *c, const void *req, size_t len, int flags,
    struct sm_buf *reply)
{
	return (one_call_msg(c, req, len, NULL, flags, reply));
}

/*
 * Direct calls (rpc.h): on a direct server, SM_RPC_DIRECT runs the
 * handler in the caller's thread and yields the same status and bytes
 * as the nng path (a plain call on the same client); without the flag,
 * or on a server started without cfg.direct, the call goes over nng.
 * A request over recv_max is left to the transport, and after the server stops the flag changes nothing (FAILFAST fails).
 */
static void
test_direct_calls(void)
{
	struct sm_rpc_server_cfg cfg = { "inproc://direct-a", 2, 64, 1000, 0,
		true, 0, NULL };
	struct sm_rpc_server_cfg plain = { "inproc://direct-b", 2, 1 << 20,
		1000, 0, false, 0, NULL };
	struct sm_rpc_server *s = NULL, *sp = NULL;
	struct sm_rpc_client *c, *cp;
	struct sm_buf r1 = SM_BUF_INIT, r2 = SM_BUF_INIT;
	static const char *const reqs[] = { "hello", "fail now", "" };
	uint8_t big[100];
	struct sm_err err;
	int st;

	SM_REQUIRE(sm_rpc_server_start(&cfg, echo_thread, NULL, &s, &err) ==
	    0);
	SM_REQUIRE(sm_rpc_server_start(&plain, echo_thread, NULL, &sp,
	    &err) == 0);
	c = client("inproc://direct-a");
	cp = client("inproc://direct-b");
	SM_REQUIRE(c != NULL && cp != NULL);
	/* Direct needs no connected pipe. */
	direct_thr = (pthread_t)0;
	SM_CHECK_EQ(one_call(c, "hi", 2, SM_RPC_FAILFAST | SM_RPC_DIRECT,
	    &r1), 0);
	SM_CHECK(pthread_equal(direct_thr, pthread_self()));
	SM_CHECK(r1.len == 2 && memcmp(r1.b, "hi", 2) == 0);
	for (int i = 0; i < 1000 && !sm_rpc_client_connected(c); i++)
		usleep(10 * 1000);
	for (size_t i = 0; i < SM_ARRAY_LEN(reqs); i++) {
		size_t n = strlen(reqs[i]);
		int st1, st2;

		direct_thr = (pthread_t)0;
		st1 = one_call(c, reqs[i], n, SM_RPC_DIRECT, &r1);
		SM_CHECK(pthread_equal(direct_thr, pthread_self()));
		st2 = one_call(c, reqs[i], n, 0, &r2);
		SM_CHECK(!pthread_equal(direct_thr, pthread_self()));
		SM_CHECKF(st1 == st2, "%s: direct %d, nng %d", reqs[i], st1,
		    st2);
		SM_CHECK(r1.len == r2.len && (r1.len == 0 ||
		    memcmp(r1.b, r2.b, r1.len) == 0));
	}
	SM_CHECK_EQ(one_call(c, "fail", 4, SM_RPC_DIRECT, &r1), SM_ELIMIT);
	/* A message handed along reaches a direct call's handler, for its
	 * own request bytes only, and nothing else: not a call without one,
	 * not one over nng, not the thread after the call. */
	{
		static const int msg = 7;

		direct_seen = NULL;
		SM_CHECK_EQ(one_call_msg(c, "hi", 2, &msg, SM_RPC_DIRECT,
		    NULL), 0);
		SM_CHECK(direct_seen == &msg);
		SM_CHECK(sm_rpc_direct_msg("hi") == NULL);
		SM_CHECK_EQ(one_call(c, "hi", 2, SM_RPC_DIRECT, &r1), 0);
		SM_CHECK(direct_seen == NULL);
		direct_seen = &msg;
		SM_CHECK_EQ(one_call_msg(c, "hi", 2, &msg, 0, NULL), 0);
		SM_CHECK(!pthread_equal(direct_thr, pthread_self()));
		SM_CHECK(direct_seen == NULL);
	}
	/* Not a direct server: the flag is ignored. */
	direct_thr = (pthread_t)0;
	SM_CHECK_EQ(one_call(cp, "hi", 2, SM_RPC_DIRECT, &r1), 0);
	SM_CHECK(!pthread_equal(direct_thr, pthread_self()));
	/* Over recv_max (64): left to the transport, whatever it does
	 * with it (over inproc:// nng delivers it anyway). */
	memset(big, 'x', sizeof(big));
	direct_thr = (pthread_t)0;
	st = one_call(c, big, sizeof(big), SM_RPC_DIRECT, &r1);
	SM_CHECK(!pthread_equal(direct_thr, pthread_self()));
	SM_CHECK_EQ(one_call(c, big, sizeof(big), 0, &r2), st);
	/* Stopped: no direct call; FAILFAST on the dead pipe fails. */
	sm_rpc_server_stop(s);
	for (int i = 0; i < 1000 && sm_rpc_client_connected(c); i++)
		usleep(10 * 1000);
	st = one_call(c, "hi", 2, SM_RPC_FAILFAST | SM_RPC_DIRECT, &r1);
	SM_CHECK_EQ(st, SM_EUNAVAIL);
	sm_buf_fini(&r1);
	sm_buf_fini(&r2);
	sm_rpc_client_destroy(c);
	sm_rpc_client_destroy(cp);
	sm_rpc_server_stop(sp);
}

SM_TEST_MAIN(
	{ "round trip over inproc", test_inproc },
	{ "round trip over tcp loopback", test_tcp },
	{ "8 threads x 200 calls on one client", test_concurrent_calls_share_a_client },
	{ "deadlines: slow handler, absent server", test_deadline },
	{ "stop while a tcp handler runs", test_stop_during_handler_tcp },
	{ "a message over recv-size-max is dropped", test_oversize_message_is_dropped },
	{ "a 2^60-byte frame is dropped without allocating", test_2p60_frame_dropped_without_allocation },
	{ "response envelope carries error codes", test_pb_envelope_errors },
	{ "replies racing their deadlines: every call ends, nothing freed twice", test_replies_race_deadlines },
	{ "a multi returns at quorum; late calls finish alone", test_multi_quorum_returns_early },
	{ "a hedged quorum leaves a straggler pending", test_multi_quorum_grace },
	{ "quorum: doom, voters over lanes, absent calls, groups", test_multi_quorum_voters_groups },
	{ "FAILFAST without a connection fails at once", test_failfast_without_a_connection },
	{ "redial drops the connection and connects again", test_redial },
	{ "reserved workers: light requests never wait behind heavy ones", test_reserved_worker },
	{ "a multi call's status is the response code", test_multi_status_is_the_envelope_code },
	{ "connections beyond the cap are refused", test_connection_cap },
	{ "direct calls: caller's thread, same answers as nng", test_direct_calls },
)
