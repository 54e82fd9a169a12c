/*
 * ratelimit.h -- per-tenant ingestion rate limit: a token
 * bucket of bytes per tenant, after Pyroscope's ingestion rate limiter
 * (golang.org/x/time/rate under it).
 *
 * A bucket holds at most `burst` bytes and refills at `rate` bytes/s; it
 * starts full.  An upload of n bytes passes when n tokens are there and
 * takes them; otherwise it is refused and takes nothing (so a refused
 * client that retries does not dig the hole deeper).  An upload larger
 * than the burst can never pass, as in Pyroscope.  A rate of 0 means no
 * limit (a Smolder decision: to stop a tenant, remove its keys).  When a
 * tenant's rate or burst changes (a runtime config reload) its bucket
 * keeps its tokens, capped at the new burst.
 *
 * What is counted (a decision; Pyroscope counts the decompressed profile
 * size after parsing): the request body as received -- /ingest's body,
 * or the sum of Push's raw_profile bytes -- so that an over-rate upload
 * is refused before any decompression or parsing is spent on it.  With
 * gzip bodies a tenant therefore gets several times more profile data
 * per MB than in Pyroscope; set the limits with that in mind.
 *
 * Shared among the healthy distributors (Pyroscope's and Cortex's
 * "global" strategy): each distributor's bucket refills at the tenant's
 * rate / N, N = the healthy distributors it knows of (common/peers.h), itself
 * included, so N distributors behind a balancer together admit about the
 * tenant's rate.  The burst is not divided (Cortex keeps it per
 * distributor): a tenant may send up to N x burst at once across the
 * cluster, and an upload up to the burst always fits one bucket.
 * Decisions:
 *   - no -distributor.peers: N = 1, each distributor enforces the whole
 *     rate (the single binary, and the behaviour before peers existed);
 *   - a peer whose last probe failed (down, unreachable, not ready) is
 *     not counted: the others each take a bigger share, as in Pyroscope,
 *     so a dead distributor does not shrink the tenant's rate.  The
 *     price is a window of about one probe period on each change: a
 *     peer that died is still counted until its next failed probe (the
 *     cluster admits less than the rate), and one that comes back admits
 *     the whole rate until its first round counts the others, while they
 *     do not count it yet (the cluster admits more, at most N x rate);
 *   - the error message names the tenant's whole rate, not the share
 *     (what the operator configured);
 *   - a change of N takes effect on the next check of each bucket: the
 *     bucket keeps its tokens (capped at the burst, as for a reload), and
 *     the time since its last check refills at the old share;
 *   - the balancer is assumed to spread a tenant's uploads evenly; with
 *     one tenant pinned to one distributor (keep-alive connections) that
 *     tenant gets only rate / N.  This is the global strategy's known
 *     trade, not a bug.
 *
 * Time: the table reads the clock it was created with (common/clock.h;
 * NULL = the real one), so the unit test puts the buckets at any instant
 * with a manual clock instead of sleeping; dist_bucket_take takes the
 * time as an argument and reads no clock at all.
 *
 * Memory: one small bucket per tenant seen, kept for the life of the
 * process (tenants are bounded by the keys file or the gateway).
 * Locking: one mutex over the table; a check is O(1) and takes it once.
 */
#ifndef DIST_RATELIMIT_H
#define DIST_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/sm.h"

struct dist_bucket {
	double b_tokens;
	double b_rate;        /* bytes/s */
	double b_burst;       /* bytes */
	int64_t b_last_ns;    /* monotonic time of b_tokens */
};

/*
 * Take n bytes from `b` at `now_ns` with the tenant's current `rate` and
 * `burst` (bytes/s, bytes).  True when allowed.  Not locked: the caller
 * serializes.  A zeroed bucket is valid (it is filled on first use).
 */
bool dist_bucket_take(struct dist_bucket *b, double rate, double burst,
    int64_t now_ns, double n);

struct dist_ratelim;

/* Create an empty table reading `clock` (NULL: the real clock; a manual
 * one must outlive the table).  0 or SM_ENOMEM. */
int dist_ratelim_create(const struct sm_clock *clock,
    struct dist_ratelim **out);
void dist_ratelim_destroy(struct dist_ratelim *rl);

/*
 * Take n bytes from `tenant`'s bucket (created full on first use) with
 * the tenant's rate `rate_mb` MiB/s shared by `ndist` healthy
 * distributors (the bucket refills at rate_mb / ndist; 0 counts as 1)
 * and burst `burst_mb` MiB.  Returns 0, or SM_ELIMIT with Pyroscope's
 * message (`push rate limit (4.0 MiB) exceeded while adding 12 KiB`, the
 * tenant's whole rate) in err, or SM_ENOMEM (no memory for a new
 * tenant's bucket: the upload is refused, 503).  Thread-safe.
 */
int dist_ratelim_take(struct dist_ratelim *rl, const char *tenant,
    double rate_mb, double burst_mb, uint32_t ndist, size_t n,
    struct sm_err *err);

/* Pyroscope's humanize.IBytes: "512 B", "1.5 KiB", "4.0 MiB", "12 MiB". */
void dist_ibytes(uint64_t n, char *out, size_t outlen);

#endif /* DIST_RATELIMIT_H */
