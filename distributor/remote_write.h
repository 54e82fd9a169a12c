/*
 * remote_write.h -- forward what the distributor accepted to another
 * Pyroscope-compatible endpoint (issue 10, "remote-write out").
 *
 * What is forwarded.  Every upload the distributor acknowledged (after the
 * write quorum, never a refused one) is queued as it arrived: the raw
 * request body, its Content-Type, its query string (name, format,
 * spyName, sampleRate, ...; from and until resolved to the absolute times
 * the distributor used, so a delayed forward keeps the profile's time) and
 * the path it came in on, and sent
 * as POST <url><path>?<query> with
 *   - Authorization: Bearer <-remote-write.key> when a key is set (a Smolder
 *     or Pyroscope receiver behind auth, Grafana Cloud style), and
 *   - X-Scope-OrgID: <source tenant> when the source runs multi-tenant, so
 *     a receiver in header mode keeps tenants apart; a receiver in keys
 *     mode files everything under the key's tenant (its key wins).
 * One key for every tenant: per-tenant keys would need a keys file of
 * plaintext secrets, which this project keeps hashed only.
 *
 * Queue.  Bounded by -remote-write.queue-size entries and
 * -remote-write.queue-max-bytes body bytes; an upload that does not fit is
 * not forwarded (smolder_remote_write_dropped_total{reason="queue_full"},
 * logged) -- the local write already succeeded and the client is never
 * made to wait for the remote side.  Entries are sent in order by one
 * thread with one keep-alive connection (libcurl).
 *
 * Retries and "nothing acknowledged twice".  /ingest has no idempotency
 * id, so a request the receiver may have stored is never sent again:
 *   - no connection (refused, unresolvable, reset before the request was
 *     sent), 429 and 5xx answers: the receiver did not take it; retried
 *     with exponential backoff (RW_MIN_BACKOFF_MS, 100 ms, doubling up
 *     to -remote-write.max-backoff), the queue waits behind it;
 *   - 2xx: sent; other 4xx: the receiver refuses it for good (bad key,
 *     wrong scope, invalid): dropped, reason "rejected", logged with the
 *     status;
 *   - timeout or connection lost after the request was written: the
 *     receiver may have stored it; dropped (at most once), reason
 *     "ambiguous", logged.
 * A Smolder receiver answering 5xx after a partial replica write is the
 * one case a retry can double a profile; Pyroscope's receivers behave the
 * same.
 *
 * Shutdown.  rw_destroy stops taking new entries and keeps sending for at
 * most RW_DRAIN_MS (one attempt per entry, no backoff), then drops the rest
 * (reason "shutdown") with a log line: queued data is in memory only.
 *
 * Metrics: smolder_remote_write_queue_length, _queue_bytes (gauges),
 * _sent_total, _retries_total, _dropped_total{reason}.
 */
#ifndef DIST_REMOTE_WRITE_H
#define DIST_REMOTE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sm.h"

struct rw_config {
	char *url;                /* -remote-write.url; "" = off */
	char *key;                /* -remote-write.key */
	int64_t queue_size;       /* -remote-write.queue-size (entries) */
	int64_t queue_max_bytes;  /* -remote-write.queue-max-bytes */
	int64_t timeout_ms;       /* -remote-write.timeout */
	int64_t max_backoff_ms;   /* -remote-write.max-backoff */
};

struct remote_write;

/*
 * Start the forwarder (a thread) if cfg->url is set; *out stays NULL when
 * it is not.  SM_EINVAL on a URL that is not http:// or https:// or bad
 * sizes.
 */
int rw_create(const struct rw_config *cfg, struct remote_write **out,
    struct sm_err *err);

/* Drain for a short while, stop, free.  NULL is a no-op. */
void rw_destroy(struct remote_write *rw);

/*
 * Queue one accepted upload (copied).  `path` ("/ingest"), `query` (the
 * encoded query string without '?', may be ""), `ctype` (may be NULL),
 * `tenant` (NULL when not multi-tenant).  Never blocks on the network;
 * returns 0 or SM_ELIMIT (queue full: dropped and counted) / SM_ENOMEM.
 * Thread-safe.
 */
int rw_enqueue(struct remote_write *rw, const char *path, const char *query,
    const char *ctype, const char *tenant, const void *body, size_t len);

#endif /* DIST_REMOTE_WRITE_H */
