/*
 * fold.h -- building the block that folds the replicas of one tenant-hour
 * into one (the compactor's de-duplication of the bucket,
 * compactor/fold.h, docs/architecture.md §10).  This file owns the build;
 * the compactor decides what is folded and how each input counts.
 *
 * Inputs are blocks of several *sources* (replicas of parts of a tenant's
 * data, ingester/gateway.h), imported into one store under local tenants
 * of their own.  A source never counts an upload twice, but two sources
 * hold the same uploads, so a fold never simply sums them: the caller's
 * selection gives each (source, series fingerprint, bucket start) a
 * coefficient c in {-1, 0, +1}, and the fold's bucket is the sum over
 * sources of c times the source's bucket (its pairs, summed over the
 * source's blocks), which the caller chose to equal the union of the
 * uploads (compactor/fold.c says how).  Span samples are folded the same
 * way (a key whose sum is 0 is dropped, as in a head).  Profile counts
 * and individual-profile records are not derived from the inputs: the
 * caller hands the union's records, and each bucket's count is the
 * number of them in it (`profiles`).
 *
 * The block is an ordinary raw block (block.h) of width bucket_ms, its
 * buckets inside [ws, we), gen `gen`, cover_gen 0: a query reads it like
 * any block.  Pairs may be 0 where signed sums cancel (allowed, as in a
 * merge).  Errors: SM_ENOMEM, the store's (SM_ECORRUPT naming a damaged
 * input: the fold is not built without it), SM_EINVAL from the encoder.
 * *empty when nothing was selected (nothing encoded).
 */
#ifndef ING_FOLD_H
#define ING_FOLD_H

#include <stdbool.h>
#include <stdint.h>

#include "block.h"
#include "profiles.h"
#include "store.h"

struct ing_fold_sel {
	/* the coefficient of (source, fp, bucket start t) */
	int (*coef)(void *arg, uint32_t source, uint64_t fp, int64_t t);
	/* the uploads in the fold's bucket (fp, t) */
	uint32_t (*profiles)(void *arg, uint64_t fp, int64_t t);
	void *arg;
};

struct ing_fold_input {
	const char *tenant;            /* the local tenant in the store */
	struct ing_block_meta meta;
	uint32_t source;               /* the index passed to coef */
};

int ing_fold_build(struct ing_store *st, const struct ing_fold_input *in,
    uint32_t n, int64_t bucket_ms, int64_t ws, int64_t we, uint64_t gen,
    const struct ing_fold_sel *sel, const struct ing_prof_rec *recs,
    uint32_t nrecs, int level, struct ing_block_enc *e, bool *empty,
    struct sm_err *err);

/*
 * The tier block of width w over the window [ws, we) (block.h, "Tier
 * blocks") of the raw blocks inputs[0..n) of `tenant` in st, as block
 * `gen` with cover_gen: compact.c's tier build on any store (the
 * compactor builds the fold source's tiers from its folds).  Errors as
 * above; SM_EINVAL for w <= 0.
 */
int ing_fold_tier_build(struct ing_store *st, const char *tenant,
    const struct ing_block_meta *inputs, uint32_t n, int64_t w, int64_t ws,
    int64_t we, uint64_t gen, uint64_t cover_gen, int level,
    struct ing_block_enc *e, bool *empty, struct sm_err *err);

#endif /* ING_FOLD_H */
