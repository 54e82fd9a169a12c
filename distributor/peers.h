/*
 * peers.h -- the distributors' view of each other: how many are healthy,
 * the divisor of every tenant's ingestion rate (ratelimit.h).
 *
 * Smolder has no distributor ring (the ring holds ingesters, ring.h), so
 * the view is a small prober, not a membership protocol:
 *
 *   -distributor.peers  comma-separated entries, each either a base URL
 *                       http://host:port (every distributor, this one
 *                       included: the same list can be given to all) or
 *                       dns+host:port, a name re-resolved every probe
 *                       round to all its addresses (a Kubernetes headless
 *                       service; port = the distributors' HTTP port).
 *                       Both forms may be mixed.
 *
 * Every -distributor.peers-probe-period each entry gets GET <url>/ready,
 * concurrently, deadline -distributor.peers-probe-timeout.  A peer is
 * healthy while its last probe answered 200 with the header
 * X-Smolder-Distributor: <id> (cmd/main.c's /ready sets it in processes
 * that run a distributor; the id is random per process).  So:
 *   - a process that is not ready (its ring has no write quorum, it is
 *     stopping) does not count: it takes no uploads anyway;
 *   - a URL that answers 200 without the header is not a distributor
 *     (an ingester, a querier, a proxy) and does not count (warned once);
 *   - this distributor recognises itself by its own id and always counts
 *     itself once, whether its own URL is listed, missing, unreachable
 *     from itself, or resolved under several addresses;
 *   - several URLs answering with one id (a name and an address, IPv4
 *     and IPv6) count once.
 * N = 1 + distinct healthy ids other than ours; before the first round N
 * is 1.  While an entry has never answered it is probed every second
 * (at most the period), so a starting cluster settles quickly.
 *
 * Probes use libcurl (as remote_write.c), with no proxy: peers are
 * in-cluster addresses, and http_proxy from the environment must not
 * route them elsewhere.
 *
 * Metrics: smolder_distributor_healthy_peers (gauge, N),
 * smolder_distributor_peer_probe_failures_total (counter).
 * Locking: the prober thread owns the entries; N is an atomic the hot
 * path reads without a lock.
 */
#ifndef DIST_PEERS_H
#define DIST_PEERS_H

#include <stdint.h>

#include "common/sm.h"

#define DIST_PEER_ID_LEN 32             /* hex digits of a process id */
#define DIST_PEER_HEADER "X-Smolder-Distributor"

struct dist_peers_cfg {
	const char *spec;               /* -distributor.peers, "" = none */
	const char *self_id;            /* this distributor's id */
	int64_t period_ms;              /* -distributor.peers-probe-period */
	int64_t timeout_ms;             /* -distributor.peers-probe-timeout */
};

struct dist_peers;

/*
 * Parse the entries (SM_EINVAL with a message naming the bad one) and
 * create the view, N = 1.  An empty spec is valid: *out = NULL, and
 * dist_peers_healthy(NULL) is 1.
 */
int dist_peers_create(const struct dist_peers_cfg *cfg,
    struct dist_peers **out, struct sm_err *err);

/* Start the prober thread (its first round runs at once). */
int dist_peers_start(struct dist_peers *p, struct sm_err *err);

/* Stop the prober; blocks for at most one probe round. */
void dist_peers_stop(struct dist_peers *p);
void dist_peers_destroy(struct dist_peers *p);

/* Healthy distributors, this one included (>= 1).  Lock-free. */
uint32_t dist_peers_healthy(const struct dist_peers *p);

/*
 * Count `n` answers: ids[i] is the X-Smolder-Distributor id of a peer
 * whose last probe succeeded, or NULL/"" for a failed probe or a
 * non-distributor.  Returns 1 + the distinct ids other than `self`.
 * Exposed for the unit test.
 */
uint32_t dist_peers_count(const char *self, const char *const *ids,
    uint32_t n);

#endif /* DIST_PEERS_H */
