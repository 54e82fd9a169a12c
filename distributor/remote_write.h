/*
 * remote_write.h -- forward what the distributor accepted to another
 * Pyroscope-compatible endpoint ("remote-write out").
 *
 * What is forwarded.  Every write the distributor acknowledged (after the
 * write quorum, never a refused one), as it arrived:
 *   - /ingest (and /pyroscope/ingest): the raw request body, its
 *     Content-Type, its query string (name, format, spyName, sampleRate,
 *     ...; from and until resolved to the absolute times the distributor
 *     used, so a delayed forward keeps the profile's time) and the path it
 *     came in on, sent as POST <url><path>?<query>;
 *   - push.v1.PusherService/Push (connect_push.c): the PushRequest, packed
 *     again as protobuf and sent as POST <url>/push.v1.PusherService/Push
 *     with Content-Type: application/proto.  Every RawSample keeps its ID;
 *     a sample that came without one gets the random UUID its local write
 *     used, so each forwarded sample carries an idempotency key.  A sample
 *     whose pprof has no time_nanos is placed by the receiver at the time
 *     it receives it (the pprof is forwarded unchanged), so a forward
 *     delayed by an outage lands later than it did locally.
 * Both are sent with
 *   - Authorization: Bearer <-remote-write.key> when a key is set (a Smolder
 *     or Pyroscope receiver behind auth, Grafana Cloud style), and
 *   - X-Scope-OrgID: <source tenant> when the source runs multi-tenant, so
 *     a receiver in header mode keeps tenants apart; a receiver in keys
 *     mode files everything under the key's tenant (its key wins).
 * One key for every tenant: per-tenant keys would need a keys file of
 * plaintext secrets, which this project keeps hashed only.
 *
 * Queue (rwqueue.h).  Persistent, in <-data.dir>/remote-write: segment
 * files of CRC-checked records and a commit file holding the position of
 * the first entry not yet sent or dropped.  rw_enqueue appends the entry
 * before the distributor answers the client (a write into the page cache,
 * no fsync), so an acknowledged write is queued even if the process is
 * killed right after the 2xx.  The commit advances when an entry is sent
 * (2xx) or dropped for good; fully sent segments are deleted.  On start
 * the queue resumes from the commit; a torn or corrupt record (a crash in
 * the middle of an append) is found by its length and CRC, cut off with a
 * log line and counted (smolder_remote_write_queue_corrupt_bytes_total);
 * the good entries before it are sent.  No fsync per entry: a process
 * crash loses nothing, a machine crash or power loss can lose the last
 * unsynced appends or roll the commit back (entries re-sent).  Bounded by
 * -remote-write.queue-size entries and -remote-write.queue-max-bytes
 * record bytes on disk (plus at most one 16 MiB segment of sent entries
 * waiting for deletion); a write that does not fit is not forwarded
 * (smolder_remote_write_dropped_total{reason="queue_full"}, logged) --
 * the local write already succeeded and the client is never made to wait
 * for the remote side.  Entries are sent in order by one thread with one
 * keep-alive connection (common/httpc.h).  The queue directory is
 * flock()ed: one process per data dir.
 *
 * Retries and "nothing acknowledged twice".  /ingest has no idempotency
 * id, so an /ingest entry the receiver may have stored is never sent
 * again:
 *   - no connection (refused, unresolvable, reset before the request was
 *     sent), 429 and 5xx answers: the receiver did not take it; retried
 *     with exponential backoff (RW_MIN_BACKOFF_MS, 100 ms, doubling up
 *     to -remote-write.max-backoff), the queue waits behind it;
 *   - 2xx: sent; other 4xx: the receiver refuses it for good (bad key,
 *     wrong scope, invalid): dropped, reason "rejected", logged with the
 *     status;
 *   - timeout or connection lost after the request was written: the
 *     receiver may have stored it; dropped (at most once), reason
 *     "ambiguous", logged;
 *   - across a restart: once the connection is up and just before the
 *     request goes out (httpc's on_send callback), the commit file
 *     marks the entry "in flight"; the mark is cleared when the attempt
 *     ends without reaching the receiver.  An /ingest entry found marked
 *     at the next start was being sent when the process died: dropped as
 *     "ambiguous", not re-sent.  The one remaining window is a 2xx that
 *     arrived but whose commit (a pwrite right after) was not made before
 *     the process died -- microseconds -- or a power loss that loses the
 *     commit: that entry is sent again (at-least-once there).
 * push.v1 entries are idempotent (every sample has an ID): a timeout or a
 * lost connection is retried like "no connection", and an entry in
 * flight at a crash is simply sent again.  A Smolder receiver uses the
 * RawSample.ID as the write's profile id and its ingesters apply an id
 * once within -ingester.idempotency-window (1m by default; ingester/
 * ids.h), so such re-sends are not counted twice while they come within
 * that window.  A Pyroscope receiver parses the ID (uuid.Parse,
 * invalid_argument when it is not a UUID) and stores it as the profile's
 * ID but, as far as we know, does not de-duplicate on it: a Push re-sent
 * after a timeout can be stored twice there.
 * A Smolder receiver answering 5xx after a partial replica write is the
 * one other case a retry can double an /ingest profile; Pyroscope's
 * receivers behave the same.
 *
 * Shutdown.  rw_destroy stops taking new entries and keeps sending for at
 * most RW_DRAIN_MS while the receiver answers; the first failure or the
 * deadline ends it, and what is left stays on disk for the next start.
 *
 * Metrics: smolder_remote_write_queue_length, _queue_bytes (gauges, the
 * queue on disk), _sent_total, _retries_total,
 * _dropped_total{reason=queue_full|rejected|ambiguous|corrupt},
 * _queue_corrupt_bytes_total.
 *
 * Locking: rw->mu guards stop and the wake-up condition; the queue has
 * its own lock (rwqueue.h).  rw_enqueue is called by HTTP workers, the
 * rest runs in the sender thread.
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
	char *tls_ca;             /* -remote-write.tls-ca-path; "" = system */
	char *tls_cert;           /* -remote-write.tls-cert-path (mTLS) */
	char *tls_key;            /* -remote-write.tls-key-path */
	const char *data_dir;     /* -data.dir (main); the queue's home */
};

/* rw_enqueue flags */
#define RW_IDEMPOTENT 0x01        /* carries ids: safe to send again */

struct remote_write;

/*
 * Open the queue and start the forwarder (a thread) if cfg->url is set;
 * *out stays NULL when it is not.  SM_EINVAL on a URL that is not http://
 * or https://, bad sizes or no data dir; SM_EIO when the queue cannot be
 * opened (another process holds it, unreadable).
 */
int rw_create(const struct rw_config *cfg, struct remote_write **out,
    struct sm_err *err);

/* Drain for a short while, stop, close the queue, free.  NULL: no-op. */
void rw_destroy(struct remote_write *rw);

/*
 * Queue one accepted write (appended to the queue file before returning).
 * `path` ("/ingest", "/push.v1.PusherService/Push"), `query` (the encoded
 * query string without '?', may be ""), `ctype` (may be NULL), `tenant`
 * (NULL when not multi-tenant), `flags` (RW_IDEMPOTENT).  Never blocks on
 * the network; returns 0 or SM_ELIMIT (queue full: dropped and counted),
 * SM_EIO (the append failed: dropped, counted as queue_full, logged),
 * SM_ENOMEM.  Thread-safe.
 */
int rw_enqueue(struct remote_write *rw, const char *path, const char *query,
    const char *ctype, const char *tenant, unsigned flags, const void *body,
    size_t len);

#endif /* DIST_REMOTE_WRITE_H */
