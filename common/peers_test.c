/*
 * peers_test.c -- a component's peer view (peers.h): counting
 * answers, parsing -distributor.peers, and the prober against live HTTP
 * servers (a peer, a non-distributor, a dead port, this process itself).
 * The prober waits on a manual clock (common/clock.h): the test runs
 * rounds by moving it and counts them, so every check is of what a
 * whole round saw, never of how long something took.
 */
#include "common/peers.h"

#define TEST_HEADER "X-Smolder-Distributor"

#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/http.h"
#include "common/log.h"

#include "sm_test.h"
#include "sm_test_httpd.h"

static void
test_count(void)
{
	const char *none[] = { NULL };
	const char *ids[] = { "self", "a", NULL, "", "a", "b", "self" };

	SM_CHECK_EQ(sm_peers_count("self", none, 0), 1u);
	SM_CHECK_EQ(sm_peers_count("self", none, 1), 1u);
	/* self counts once whether listed or not; a twice, b once. */
	SM_CHECK_EQ(sm_peers_count("self", ids, SM_ARRAY_LEN(ids)), 3u);
	SM_CHECK_EQ(sm_peers_count("other", ids, SM_ARRAY_LEN(ids)), 4u);
}

static int
create_clock(const char *spec, int64_t period, int64_t timeout,
    const struct sm_clock *clock, struct sm_peers **p)
{
	struct sm_peers_cfg c = {
		.spec = spec, .flag = "-test.peers", .component = "test",
		.header = TEST_HEADER, .self_id = "self", .period_ms = period,
		.timeout_ms = timeout, .clock = clock,
		.m_healthy = "smolder_test_healthy_peers",
		.m_healthy_help = "test", .m_failures =
		    "smolder_test_peer_probe_failures_total",
		.m_failures_help = "test",
	};
	struct sm_err err;

	sm_err_clear(&err);
	return (sm_peers_create(&c, p, &err));
}

static int
create(const char *spec, int64_t period, int64_t timeout,
    struct sm_peers **p)
{
	return (create_clock(spec, period, timeout, NULL, p));
}

static void
test_parse(void)
{
	static const char *const bad[] = { "foo", "http://", "ftp://a:1",
	    "dns+nocolon", "dns+:1", "http://a b:1", "http://a:1,bogus" };
	struct sm_peers *p;

	SM_CHECK_EQ(create("", 5000, 1000, &p), 0);
	SM_CHECK(p == NULL);
	SM_CHECK_EQ(sm_peers_healthy(NULL), 1u);
	SM_CHECK_EQ(create(" , ,", 5000, 1000, &p), 0);
	SM_CHECK(p == NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++) {
		SM_CHECKF(create(bad[i], 5000, 1000, &p) == SM_EINVAL,
		    "%s", bad[i]);
		SM_CHECK(p == NULL);
	}
	SM_CHECK_EQ(create("http://a:1", 5000, 6000, &p), SM_EINVAL);
	SM_CHECK_EQ(create("http://a:1", 5, 1, &p), SM_EINVAL);
	SM_CHECK_EQ(create(" http://a:1/ , dns+b.example:4040,"
	    "https://[::1]:2,http://a:1", 5000, 1000, &p), 0);
	SM_REQUIRE(p != NULL);
	SM_CHECK_EQ(sm_peers_healthy(p), 1u);     /* before any probe */
	sm_peers_destroy(p);
}

/* A fake /ready: answers `status` with `id` in the header. */
struct fake {
	const char *id;                 /* NULL: no header */
	atomic_int status;
	struct sm_http *h;
};

static void
fake_ready(struct sm_http_req *r, void *arg)
{
	struct fake *f = arg;

	if (f->id != NULL)
		sm_http_set_header(r, TEST_HEADER, f->id);
	sm_http_reply_text(r, atomic_load(&f->status), "ready");
}

static bool
fake_start(struct fake *f, const char *id)
{
	const struct sm_test_route routes[] = {
		{ "GET", "/ready", fake_ready, f },
	};

	f->id = id;
	atomic_init(&f->status, 200);
	f->h = sm_test_httpd_start(1, routes, SM_ARRAY_LEN(routes));
	return (f->h != NULL);
}

#define PERIOD_MS 1000

/*
 * Let n more probe rounds run and wait (at most 10 s) until they have:
 * the clock moves one period whenever the prober has not finished a round
 * for a few ms (an advance that came while a round was still running is
 * spent on nothing, so it is repeated).  The last of the n rounds started
 * after this call did, so with n >= 2 it saw whatever changed before it.
 */
static bool
rounds(struct sm_peers *p, struct sm_clock *clk, uint64_t n)
{
	uint64_t want = sm_peers_rounds(p) + n;

	for (int i = 0; i < 10000; i++) {
		if (sm_peers_rounds(p) >= want)
			return (true);
		if (i % 5 == 0)
			sm_clock_manual_advance(clk, PERIOD_MS * 1000000LL);
		usleep(1000);
	}
	return (false);
}

static void
test_live(void)
{
	struct fake self, a, notdist;
	struct sm_peers *p = NULL;
	struct sm_clock clk;
	char spec[512];
	struct sm_err err;

	sm_log_set_level(SM_LOG_ERROR);
	sm_clock_manual_init(&clk, 1000000000LL, 0);
	SM_REQUIRE(fake_start(&self, "self"));
	SM_REQUIRE(fake_start(&a, "peer-a"));
	SM_REQUIRE(fake_start(&notdist, NULL));
	/* Self listed, a listed twice (by address and by name), a
	 * non-distributor, a dead port. */
	snprintf(spec, sizeof(spec), "http://127.0.0.1:%u,"
	    "http://127.0.0.1:%u,http://localhost:%u/,http://127.0.0.1:%u,"
	    "http://127.0.0.1:%d", sm_http_port(self.h), sm_http_port(a.h),
	    sm_http_port(a.h), sm_http_port(notdist.h), sm_test_free_port());
	SM_REQUIRE(create_clock(spec, PERIOD_MS, PERIOD_MS, &clk, &p) == 0 &&
	    p != NULL);
	SM_CHECK_EQ(sm_peers_rounds(p), 0u);
	sm_err_clear(&err);
	SM_REQUIRE(sm_peers_start(p, &err) == 0);
	/* the first round runs at once, without the clock moving */
	for (int i = 0; i < 10000 && sm_peers_rounds(p) == 0; i++)
		usleep(1000);
	SM_CHECK_EQ(sm_peers_healthy(p), 2u);
	{
		/* the healthy ids, sorted, ours among them, once each */
		char ids[8][SM_PEER_ID_LEN + 1];
		uint32_t n = sm_peers_ids(p, "self", ids, 8);

		SM_CHECK_EQ(n, 2u);
		SM_CHECK_STR(ids[0], "peer-a");
		SM_CHECK_STR(ids[1], "self");
		SM_CHECK_EQ(sm_peers_ids(NULL, "me", ids, 8), 1u);
		SM_CHECK_STR(ids[0], "me");
	}
	/* a not ready (503): only this one is left, at the next round. */
	atomic_store(&a.status, 503);
	SM_REQUIRE(rounds(p, &clk, 2));
	SM_CHECK_EQ(sm_peers_healthy(p), 1u);
	/* Back, and counted again. */
	atomic_store(&a.status, 200);
	SM_REQUIRE(rounds(p, &clk, 2));
	SM_CHECK_EQ(sm_peers_healthy(p), 2u);
	/* a gone: its connection is refused. */
	sm_http_destroy(a.h);
	SM_REQUIRE(rounds(p, &clk, 2));
	SM_CHECK_EQ(sm_peers_healthy(p), 1u);
	/* Never more than 1 + the distinct ids: stays 1, round after
	 * round. */
	SM_REQUIRE(rounds(p, &clk, 3));
	SM_CHECK_EQ(sm_peers_healthy(p), 1u);
	sm_peers_destroy(p);
	sm_http_destroy(notdist.h);
	sm_http_destroy(self.h);
}

SM_TEST_MAIN(
	{ "count: self once, distinct ids, failed probes not counted",
	    test_count },
	{ "parse -distributor.peers: URLs, dns+, errors, empty = none",
	    test_parse },
	{ "live probes: peer, duplicate, not a distributor, dead, "
	    "not ready, back, gone; the healthy ids", test_live },
)
