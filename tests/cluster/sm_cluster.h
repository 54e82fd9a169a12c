/*
 * sm_cluster.h -- the in-process cluster tier: N ingesters, one
 * distributor, one querier and one compactor in the test process, the
 * ingesters serving their RPC on inproc:// URLs and named by the ring the
 * others share, the HTTP API on a loopback ephemeral port.
 *
 * Everything is the real component: configs come from the components' own
 * flag tables (ing_flags, dist_flags, qry_flags, cpt_flags) parsed with
 * sm_flags_parse, so defaults are the binary's defaults and a test
 * overrides them with the same "-name=value" strings a user would pass;
 * then ing_create/ing_start, sm_ring_create/start, dist_create, qry_create,
 * cpt_create/start, exactly the calls cmd/main.c's module table makes.
 * Requests go over loopback HTTP through the real routes (/ingest,
 * /render, /compactor/run, /ring, /metrics).
 *
 * Ingester i is "ing-<i>" at inproc://smc-<pid>-<cluster>-<i>, with its own
 * data directory under a mkdtemp() root that smc_destroy() removes.  Each
 * ingester can be stopped (replica loss: ing_stop + ing_destroy, the
 * in-process equivalent of a crash after its last acknowledged write, the
 * WAL on disk) and started again on the same directory and URL (rejoin:
 * replay, then ACTIVE); the ring's nng dialer reconnects by itself.
 *
 * Time: the code reads the wall clock (sm_now_ms) and has no fake clock,
 * so tests place data in time with explicit from/until (with
 * -validation.reject-older-than=0) rather than by waiting.  The ring is
 * probed every 100 ms (each probe's own timeout) with a 1.5 s heartbeat
 * timeout: fast, yet not so tight that several ASan test processes on a
 * loaded machine mark a live ingester unhealthy (50 ms probes did).
 * Tests wait on conditions (smc_wait_ring), never a fixed time.
 *
 * When to use this tier and when tests/integration/cluster.py: see
 * tests/cluster/README.md.
 *
 * Ingester HTTP routes (/ingester/flush) are not registered: N ingesters
 * cannot share one route table, and a test that needs a cut uses the
 * multi-process tier.
 */
#ifndef SM_CLUSTER_H
#define SM_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/sm.h"

#define SMC_MAX_INGESTERS 8

struct smc_cfg {
	unsigned ningesters;        /* 1..SMC_MAX_INGESTERS */
	unsigned rf;                /* -distributor.replication-factor */
	const char *const *flags;   /* extra "-name=value", NULL-terminated */
	bool direct;                /* the distributor's writes call the
				     * ingesters' handler directly, as in
				     * -target=all (common/rpc.h, Direct
				     * calls); false: over inproc:// */
	/* Called on the query's thread after each plan and before its data
	 * round (querier.h, qry_config.after_plan); NULL: none. */
	void (*after_plan)(void *arg);
	void *after_plan_arg;
};

struct smc;

/* Start the cluster and wait until every ingester is healthy in the ring. */
int smc_start(const struct smc_cfg *cfg, struct smc **out, struct sm_err *err);

/* Stop everything (reverse start order), free, remove the data dirs. */
void smc_destroy(struct smc *c);

/* Stop ingester i (its data stays on disk).  Idempotent. */
void smc_ingester_stop(struct smc *c, unsigned i);

/* Start ingester i again on its data dir and URL (replays its head log). */
int smc_ingester_start(struct smc *c, unsigned i, struct sm_err *err);

/*
 * Wait (polling the ring snapshot every 10 ms, at most timeout_ms) until
 * the ring agrees with the harness: every running ingester healthy and
 * heard from since its last start, every stopped one not healthy.  Call
 * it after stopping or starting ingesters and before the next request,
 * so a test checks the steady state and not a race with the prober.
 * Returns true when reached.
 */
bool smc_wait_ring(struct smc *c, int64_t timeout_ms);

/*
 * smc_wait_ring, and every running ingester's health answer, asked after
 * this call, reports no series in its heads (a fresh head after a cut):
 * with a short -ingester.block-duration, what was written before the call
 * has been cut into a block (or is being cut; queries read both).
 */
bool smc_wait_heads_cut(struct smc *c, int64_t timeout_ms);

/* The HTTP port (127.0.0.1). */
unsigned smc_port(const struct smc *c);

/*
 * One HTTP request to the cluster: `target` is the path with its query
 * string (already escaped).  The response body goes to `body` (may be
 * NULL).  Returns the status code, or -1 on a transport error.
 */
int smc_http(struct smc *c, const char *method, const char *target,
    const void *req, size_t len, struct sm_buf *body);

/* URL-escape `s` into `out` (for query string values). */
void smc_escape(struct sm_buf *out, const char *s);

/*
 * POST /ingest?name=<name>&from=<from_s>&until=<from_s>&format=folded with
 * the folded body; returns the status.
 */
int smc_ingest(struct smc *c, const char *name, int64_t from_s,
    const char *folded);

/*
 * GET /render?query=<query>&from=..&until=..&format=collapsed and sum the
 * values of every line into *total.  Returns the status.
 */
int smc_render_total(struct smc *c, const char *query, int64_t from_s,
    int64_t until_s, int64_t *total);

#endif /* SM_CLUSTER_H */
