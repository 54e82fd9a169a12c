/*
 * cluster_direct_test.c -- the direct write path of -target=all
 * (common/rpc.h, Direct calls: the distributor calls its in-process
 * ingester's handler in its own thread) answers exactly what the RPC path
 * over inproc:// answers: the same HTTP statuses and bodies for accepted
 * writes, malformed uploads and the ingester's own refusal (the
 * active-series limit), the same flamegraphs afterwards, and the same
 * after the ingester is stopped and started again.  The direct-call
 * counter proves which path each cluster took.
 */
#include "smc_test.h"

#define DIRECT_METRIC "smolder_rpc_direct_calls_total"

struct pair {
	struct smc *rpc, *direct;
};

/*
 * `method` `target` (with `body`, or none when NULL) to both clusters:
 * their statuses in *s1 (RPC) and *s2 (direct); their bodies must agree,
 * and not be empty when `nonempty`.  `what` names the request in a
 * failure.
 */
static void
both_http(struct pair *p, const char *method, const char *target,
    const char *body, bool nonempty, const char *what, int *s1, int *s2)
{
	struct sm_buf b1 = SM_BUF_INIT, b2 = SM_BUF_INIT;
	size_t len = body != NULL ? strlen(body) : 0;

	*s1 = smc_http(p->rpc, method, target, body, len, &b1);
	*s2 = smc_http(p->direct, method, target, body, len, &b2);
	SM_CHECKF((!nonempty || b1.len > 0) && b1.len == b2.len &&
	    (b1.len == 0 || memcmp(b1.b, b2.b, b1.len) == 0), "%s: rpc "
	    "\"%.*s\", direct \"%.*s\"", what, (int)b1.len,
	    b1.b != NULL ? b1.b : "", (int)b2.len, b2.b != NULL ? b2.b : "");
	sm_buf_fini(&b1);
	sm_buf_fini(&b2);
}

/* POST one folded upload to both; statuses and bodies must agree.
 * Returns the status (-2 when they differ). */
static int
both_ingest(struct pair *p, const char *app, int64_t t, const char *folded)
{
	struct sm_buf target = SM_BUF_INIT, q = SM_BUF_INIT;
	int s1, s2;

	smc_escape(&q, app);
	sm_buf_printf(&target, "/ingest?name=%.*s&from=%lld&until=%lld"
	    "&format=folded", (int)q.len, q.b, (long long)t, (long long)t);
	SM_REQUIRE(sm_buf_error(&target) == 0);
	both_http(p, "POST", target.b, folded, false, app, &s1, &s2);
	SM_CHECKF(s1 == s2, "%s: rpc %d, direct %d", app, s1, s2);
	sm_buf_fini(&target);
	sm_buf_fini(&q);
	return (s1 == s2 ? s1 : -2);
}

/* The collapsed flamegraph of `query` from both: equal, and 200. */
static void
both_render(struct pair *p, const char *query, int64_t from, int64_t until)
{
	struct sm_buf target = SM_BUF_INIT, q = SM_BUF_INIT;
	int s1, s2;

	smc_escape(&q, query);
	sm_buf_printf(&target, "/render?query=%.*s&from=%lld&until=%lld"
	    "&format=collapsed", (int)q.len, q.b, (long long)from,
	    (long long)until);
	SM_REQUIRE(sm_buf_error(&target) == 0);
	both_http(p, "GET", target.b, NULL, true, query, &s1, &s2);
	SM_CHECKF(s1 == 200 && s2 == 200, "%s: rpc %d, direct %d", query,
	    s1, s2);
	sm_buf_fini(&target);
	sm_buf_fini(&q);
}

/* One write to the RPC cluster alone, then to the direct one alone: the
 * direct-call counter moves only for the second. */
static void
check_paths(struct pair *p, const char *app, int64_t t)
{
	double c0, c1, c2;

	c0 = smc_counter(DIRECT_METRIC);
	SM_CHECK_EQ(smc_put(p->rpc, app, t, "probe", 1), 200);
	c1 = smc_counter(DIRECT_METRIC);
	SM_CHECK_EQ(smc_put(p->direct, app, t, "probe", 1), 200);
	c2 = smc_counter(DIRECT_METRIC);
	SM_CHECKF(c1 == c0 && c2 == c1 + 1, "direct calls %g, %g, %g", c0,
	    c1, c2);
}

static void
test_direct_equals_rpc(void)
{
	static const char *const flags[] = {
		"-ingester.max-global-series-per-tenant=4", NULL };
	struct smc_cfg cr = { .ningesters = 1, .rf = 1, .flags = flags };
	struct smc_cfg cd = cr;
	struct pair p = { NULL, NULL };
	struct sm_err err;
	int64_t t = smc_now_s() - 600;

	cd.direct = true;
	sm_err_clear(&err);
	SM_REQUIRE(smc_start(&cr, &p.rpc, &err) == 0);
	if (smc_start(&cd, &p.direct, &err) != 0) {
		smc_destroy(p.rpc);
		SM_TEST_FAILF("direct cluster: %s", err.msg);
		return;
	}
	check_paths(&p, "de.cpu{k=probe}", t);

	/* Accepted writes: three series, several stacks, two buckets. */
	for (int i = 0; i < 9; i++) {
		char app[64], body[160];

		snprintf(app, sizeof(app), "de.cpu{k=s%d}", i % 3);
		snprintf(body, sizeof(body), "main;work;f%d %d\n"
		    "main;idle %d\nmain;work;f%d;g %d\n", i % 4, i + 1,
		    2 * i + 1, (i + 1) % 4, 3);
		SM_CHECK_EQ(both_ingest(&p, app, t + 60 * (i % 2), body),
		    200);
	}
	/* A malformed upload: refused by the distributor's parser. */
	SM_CHECK_EQ(both_ingest(&p, "de.cpu{k=s0}", t, "main;work x\n"), 400);
	/* The ingester's own refusal: a fifth series is over the limit of
	 * four (probe, s0, s1, s2), 429 with the ingester's message. */
	SM_CHECK_EQ(both_ingest(&p, "de.cpu{k=s9}", t, "main;work 5\n"), 429);
	/* An empty upload: nothing to write, yet answered alike. */
	(void)both_ingest(&p, "de.cpu{k=s0}", t, "");

	both_render(&p, "de.cpu{}", t - 60, t + 600);
	both_render(&p, "de.cpu{k=\"s1\"}", t - 60, t + 600);
	SMC_CHECK_TOTAL(p.direct, "de.cpu{k=\"s9\"}", t - 60, t + 600, 0);

	/* The ingester stopped: both refuse alike; started again (its
	 * direct registration is renewed with its server): both accept. */
	smc_ingester_stop(p.rpc, 0);
	smc_ingester_stop(p.direct, 0);
	SM_CHECK(smc_wait_ring(p.rpc, SMC_TIMEOUT_MS));
	SM_CHECK(smc_wait_ring(p.direct, SMC_TIMEOUT_MS));
	SM_CHECK_EQ(both_ingest(&p, "de.cpu{k=s1}", t, "main;down 1\n"),
	    503);
	SM_CHECK(smc_test_ingester_start(p.rpc, 0));
	SM_CHECK(smc_test_ingester_start(p.direct, 0));
	SM_CHECK(smc_wait_ring(p.rpc, SMC_TIMEOUT_MS));
	SM_CHECK(smc_wait_ring(p.direct, SMC_TIMEOUT_MS));
	check_paths(&p, "de.cpu{k=probe}", t);
	SM_CHECK_EQ(both_ingest(&p, "de.cpu{k=s2}", t, "main;back 7\n"), 200);
	both_render(&p, "de.cpu{}", t - 60, t + 600);

	smc_destroy(p.direct);
	smc_destroy(p.rpc);
}

SM_TEST_MAIN(
	{ "-target=all's direct writes answer as the RPC path",
	  test_direct_equals_rpc },
)
