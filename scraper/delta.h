/*
 * delta.h -- cumulative pprof profiles made into deltas, per target and
 * profile: what the scraper stores of a heap, mutex or block profile
 * fetched from /debug/pprof (Go's cumulative counters since the process
 * started) is what happened between two scrapes, as an agent's push would
 * carry it.
 *
 * Which values are cumulative: sample types named alloc_objects,
 * alloc_space, contentions or delay (Go runtime/pprof's counters since
 * start).  Every other type (inuse_*, samples/cpu of a CPU profile,
 * goroutine) is a snapshot or a window already and is kept as it comes.
 * A profile with no cumulative type passes through unchanged and keeps no
 * state.
 *
 * The rule, per (target, profile), for a profile with cumulative types:
 *   - a sample's identity is its stack -- per location, each line's
 *     function name, file and line, or the mapping's file and the address
 *     when it has no lines -- and its string labels, hashed to 64 bits
 *     (samples of one identity are summed first);
 *   - the first profile only primes the state: nothing is emitted;
 *   - a later one emits, per identity, its cumulative values minus the
 *     previous profile's (an identity not seen before counts from 0) and
 *     its snapshot values as they are; a sample whose emitted values are
 *     all zero is dropped;
 *   - a value lower than before means the process restarted (its
 *     counters began again): that profile re-bases -- it primes the
 *     state, as a first one does, and emits nothing -- so a restart
 *     makes no negative delta and no spike;
 *   - the emitted profile keeps the input's tables; its time is the
 *     scrape's and its duration the time since the previous scrape.
 * State: per identity 8 bytes of hash plus 8 per cumulative type, in one
 * sorted array (scr_delta_bytes() counts it, for the scraper's limit).
 *
 * Errors: SM_EMALFORMED for bytes that are not a pprof (nothing changes).
 * Locking: none; one scrape of a (target, profile) at a time.
 */
#ifndef SCR_DELTA_H
#define SCR_DELTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/sm.h"

struct scr_delta {
	uint64_t *keys;      /* sorted */
	int64_t *vals;       /* nkeys * ncum */
	uint32_t nkeys;
	uint32_t ncum;       /* cumulative types of the primed profile */
	int64_t last_ns;     /* the previous scrape's time; 0 = not primed */
};

/* What scr_delta_apply made of a profile. */
enum scr_delta_out {
	SCR_DELTA_PASS,      /* no cumulative type: `out` is the input */
	SCR_DELTA_PRIMED,    /* first or re-based: nothing to store */
	SCR_DELTA_EMIT,      /* `out` holds the delta profile */
};

void scr_delta_init(struct scr_delta *d);
void scr_delta_fini(struct scr_delta *d);
/* Forget the state (the next profile primes again). */
void scr_delta_reset(struct scr_delta *d);
size_t scr_delta_bytes(const struct scr_delta *d);
/* dst (initialised, its state dropped) becomes a copy of src.  0 or
 * SM_ENOMEM (dst reset). */
int scr_delta_copy(struct scr_delta *dst, const struct scr_delta *src);

/*
 * Apply the rule to the uncompressed pprof raw[0..len) scraped at now_ns.
 * On SCR_DELTA_EMIT and SCR_DELTA_PASS the profile to store is appended to
 * `out` (a pprof; for PASS, the input bytes).  *rebased is set when a
 * fall in a counter re-based the state.  0, SM_EMALFORMED (state kept) or
 * SM_ENOMEM (state reset).
 */
int scr_delta_apply(struct scr_delta *d, const uint8_t *raw, size_t len,
    int64_t now_ns, enum scr_delta_out *what, bool *rebased,
    struct sm_buf *out, struct sm_err *err);

#endif /* SCR_DELTA_H */
