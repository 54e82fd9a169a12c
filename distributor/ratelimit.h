/*
 * ratelimit.h -- per-tenant ingestion rate limit (issue 10): a token
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
 * Local, not shared: Pyroscope divides the tenant's rate among the
 * healthy distributors of its distributor ring.  Smolder has no
 * distributor ring (the ring holds ingesters, ring.h), so each
 * distributor enforces the whole rate for the uploads it receives: with
 * N distributors behind a balancer a tenant may reach N times the rate.
 * Set the overrides to rate/N for a global figure.
 *
 * Memory: one small bucket per tenant seen, kept for the life of the
 * process (tenants are bounded by the keys file or the gateway).
 * Locking: one mutex over the table; a check is O(1) and takes it once.
 */
#ifndef DIST_RATELIMIT_H
#define DIST_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

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

/* Create an empty table.  0 or SM_ENOMEM. */
int dist_ratelim_create(struct dist_ratelim **out);
void dist_ratelim_destroy(struct dist_ratelim *rl);

/*
 * Take n bytes from `tenant`'s bucket (created full on first use) with
 * rate `rate_mb` MiB/s and burst `burst_mb` MiB.  Returns 0, or SM_ELIMIT
 * with Pyroscope's message (`push rate limit (4.0 MiB) exceeded while
 * adding 12 KiB`) in err, or SM_ENOMEM (no memory for a new tenant's
 * bucket: the upload is refused, 503).  Thread-safe.
 */
int dist_ratelim_take(struct dist_ratelim *rl, const char *tenant,
    double rate_mb, double burst_mb, size_t n, struct sm_err *err);

/* Pyroscope's humanize.IBytes: "512 B", "1.5 KiB", "4.0 MiB", "12 MiB". */
void dist_ibytes(uint64_t n, char *out, size_t outlen);

#endif /* DIST_RATELIMIT_H */
