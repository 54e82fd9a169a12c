/*
 * peers.h -- a component's view of its peers (the other processes that
 * run it): which are healthy.  The distributors divide each tenant's
 * ingestion rate by their number (distributor/ratelimit.h); the scrapers
 * share their targets among themselves (scraper/scraper.h).
 *
 * Neither has a ring (the ring holds ingesters, ring.h), so the view is a
 * small prober, not a membership protocol:
 *
 *   <flag>    comma-separated entries, each either a base URL
 *             http://host:port (every peer, this one included: the same
 *             list can be given to all) or dns+host:port, a name
 *             re-resolved every probe round to all its addresses (a
 *             Kubernetes headless service; port = the peers' HTTP port).
 *             Both forms may be mixed.
 *
 * Every period each entry gets GET <url>/ready, concurrently, within the
 * timeout.  A peer is healthy while its last probe answered 200 with the
 * component's header (X-Smolder-Distributor, X-Smolder-Scraper: <id>;
 * cmd/main.c's /ready sets it in processes that run the component; the
 * id is random per process).  So:
 *   - a process that is not ready (stopping, a distributor with no write
 *     quorum) does not count;
 *   - a URL that answers 200 without the header runs no such component
 *     (an ingester, a querier, a proxy) and does not count (warned once);
 *   - this process recognises itself by its own id and always counts
 *     itself once, whether its own URL is listed, missing, unreachable
 *     from itself, or resolved under several addresses;
 *   - several URLs answering with one id (a name and an address, IPv4
 *     and IPv6) count once.
 * N = 1 + distinct healthy ids other than ours; before the first round N
 * is 1 and the healthy ids are ours alone.  While an entry has never
 * answered it is probed every second (at most the period), so a starting
 * cluster settles quickly.
 *
 * Probes use libcurl, with no proxy: peers are in-cluster addresses, and
 * http_proxy from the environment must not route them elsewhere.
 *
 * Time: the period is waited on cfg.clock (common/clock.h; NULL = the
 * real clock), so a test with a manual clock runs a round exactly when it
 * moves the clock, and counts them (sm_peers_rounds) instead of sleeping.
 * The probes' own timeout is libcurl's, on the real clock.
 *
 * Metrics (names from the configuration): a gauge of N and a counter of
 * failed probes.  Locking: the prober thread owns the entries; N is an
 * atomic read without a lock, the healthy ids a copy under a mutex.
 */
#ifndef SM_PEERS_H
#define SM_PEERS_H

#include <stdint.h>

#include "clock.h"
#include "sm.h"

#define SM_PEER_ID_LEN 32               /* hex digits of a process id */

struct sm_peers_cfg {
	const char *spec;               /* the flag's value, "" = none */
	const char *flag;               /* "-distributor.peers" (messages) */
	const char *component;          /* log component: "distributor" */
	const char *header;             /* "X-Smolder-Distributor" */
	const char *self_id;            /* this process's id */
	int64_t period_ms;
	int64_t timeout_ms;
	/* The clock the period is waited on; NULL = the real clock.  A
	 * manual one must outlive the view. */
	const struct sm_clock *clock;
	/* The metrics' names and help texts. */
	const char *m_healthy, *m_healthy_help;
	const char *m_failures, *m_failures_help;
};

struct sm_peers;

/*
 * Parse the entries (SM_EINVAL with a message naming the bad one) and
 * create the view, N = 1.  An empty spec is valid: *out = NULL, and
 * sm_peers_healthy(NULL) is 1.
 */
int sm_peers_create(const struct sm_peers_cfg *cfg,
    struct sm_peers **out, struct sm_err *err);

/* Start the prober thread (its first round runs at once). */
int sm_peers_start(struct sm_peers *p, struct sm_err *err);

/* Stop the prober; blocks for at most one probe round. */
void sm_peers_stop(struct sm_peers *p);
void sm_peers_destroy(struct sm_peers *p);

/* Healthy peers, this one included (>= 1).  Lock-free. */
uint32_t sm_peers_healthy(const struct sm_peers *p);

/*
 * Probe rounds completed since the start (0 for a NULL view), counted
 * after each round has published N: a test that moved a manual clock
 * waits for it to grow.  Lock-free.
 */
uint64_t sm_peers_rounds(const struct sm_peers *p);

/*
 * The healthy peers' ids, this one's included, sorted and unique, into
 * ids (room for max); their number (>= 1).  A NULL view has this one
 * alone: `self` then.
 */
uint32_t sm_peers_ids(const struct sm_peers *p, const char *self,
    char (*ids)[SM_PEER_ID_LEN + 1], uint32_t max);

/*
 * Count `n` answers: ids[i] is the header's id of a peer whose last
 * probe succeeded, or NULL/"" for a failed probe or another component.  Returns 1 + the distinct ids other than `self`.
 * Exposed for the unit test.
 */
uint32_t sm_peers_count(const char *self, const char *const *ids,
    uint32_t n);

#endif /* SM_PEERS_H */
