/*
 * fold.h -- the compactor's de-duplication of the bucket
 * (docs/architecture.md §10): every clock hour of a tenant that the
 * replicas shipped as several sources' blocks becomes ONE block, a fold,
 * and the replicas' blocks go.
 *
 * Sources and the fold source.  Each ingester data directory is a source
 * (ingester/gateway.h); RF of them hold each upload.  Folds are blocks of
 * one more source, ING_FOLD_INC (ingester/ship.h), whose meta.json names
 * its clock hour and the blocks it stands for ("fold": {"start", "end",
 * "inputs"}).  The read path needs nothing new: a store-gateway serves the
 * fold source like any other, and the querier's plan counts every
 * (series, bucket) once across ingesters and sources, taking it from the
 * one that merged the most uploads.
 *
 * A pass (the compactor's, with a bucket and the store-gateway ring):
 *   1. one bucket scan (ing_ship_scan: the listing, the bucket indexes,
 *      meta.json of blocks newer than them);
 *   2. deletion marks (reason "folded") for every raw block of another
 *      source whose every clock hour has a live fold listing it; marks
 *      for merged-away inputs ("replaced": their merged block is in the
 *      bucket), second copies ("duplicate") and superseded folds
 *      ("superseded").  Marks follow from what THIS scan saw, so a fold
 *      is marked-on only a pass after it was uploaded and listed; the
 *      bucket pass (bucket_index.h) deletes marked blocks after
 *      -compactor.deletion-delay;
 *   3. due hours: a clock hour that ended -compactor.fold-delay ago, above
 *      the tenant's retention floor, where some live raw block of another
 *      source is not an input of the hour's live fold.  At most
 *      CPT_FOLD_MAX_HOURS per pass (the next pass takes the rest);
 *   4. per due hour: every live raw block of other sources with data in
 *      it (the hours each input has data in are recorded in the folds
 *      that list it: ship.h, ing_fold_ref; until one does, its whole
 *      range)
 *      and the hour's live fold are fetched, checked and imported into a
 *      scratch store (<data.dir>/compactor, emptied at start) under local
 *      tenants of their sources; the per-upload records (block part 'X':
 *      series, time, profile id) say which uploads each source holds in
 *      each (series, bucket); the selection below gives each source a
 *      coefficient; ingester/fold.h builds the block; it is uploaded as a
 *      block of the fold source (ing_ship_put) with the hour's previous
 *      fold in `replaces` and every input -- and the previous fold's
 *      inputs -- in "inputs";
 *   5. tiers: every finished day (ended -compactor.fold-delay ago) whose
 *      hours are all folded gets, per -compactor.downsample-tiers width,
 *      a tier block of the fold source over exactly its folds, listed in
 *      its meta.json ("covers"), unless a live one covers the same folds
 *      (the scan flags a tier whose folds changed: ship.h).  A replica's
 *      tier is marked "folded" once a fold tier of its width and day
 *      exists and none of that replica's raw blocks of the day is left.
 *
 * Exactness, decided.  A bucket's value is the sum of its uploads, so a
 * source that holds every upload of the bucket (the union over sources)
 * gives it exactly: that source is taken (coefficient 1 for it, 0 for the
 * others).  When none does -- two replicas each missed different uploads
 * and the third is gone, or a late block adds uploads to an hour folded
 * before -- summed stacks cannot be split per upload, but integer
 * combinations of whole sources can still be exact: a source holding
 * {a, b} and one holding {c} sum to {a, b, c}; {a, b} + {a, c} - {a}
 * too.  The fold tries every coefficient vector in {-1, 0, 1} over the
 * sources present in that bucket (common/combo.h: at most SM_COMBO_MAX;
 * they are few: RF, the previous fold, a restarted replica's second
 * source) and
 * takes the first whose per-upload sum is exactly one for every upload of
 * the union; pairs, spans and totals follow the same combination, profile
 * counts and individual-profile records are the union's.  When no
 * combination is exact the hour is NOT folded: it keeps its replicas'
 * blocks (nothing is lost from the bucket; queries answer it from the
 * most complete replica, as before), it is logged and counted
 * (`unresolved`), and it is tried again at every pass, since a late block
 * may resolve it.  A bucket whose index counts disagree with its records
 * (blocks from before records existed) is likewise left unfolded.
 *
 * Crash safety: a fold is one object and its meta.json, written last; a
 * crash before it leaves an unfinished upload (deleted by the bucket pass
 * after twice the deletion delay) and the inputs unmarked.  A fold that a
 * lagging listing hides from the next pass is folded again from the same
 * inputs (plus any new ones) under a larger gen, and readers take only the
 * largest gen of an hour (ship.h), so nothing is ever counted twice.
 * Marks only ever follow a fold that this pass saw, and the readers see
 * the fold through the bucket index even when their listing lags.
 *
 * Fault injection (tests only): SMOLDER_TEST_FAULTS=fold-kill makes the
 * compactor SIGKILL itself once its first fold's object is stored,
 * before its meta.json (tests/integration/test_compactor_fold.py).
 *
 * Only one compactor acts on a bucket (bucket_index.h says why and how).
 * Locking: called with the compactor's pass mutex held.  Errors: a bucket
 * error on listing ends the pass; a failure on one hour is counted and
 * logged, and the pass goes on with the next.
 */
#ifndef CPT_FOLD_H
#define CPT_FOLD_H

#include <stdint.h>

#include "common/bucket.h"
#include "common/tiers.h"

#define CPT_FOLD_MAX_HOURS 256      /* folds per pass */
#define CPT_FOLD_MAX_SPAN 48        /* hours one input block may touch */

struct cpt_fold;

struct cpt_fold_stats {
	uint32_t hours;            /* due hours tried */
	uint32_t folded;           /* folds uploaded */
	uint32_t tiers;            /* fold tiers uploaded */
	uint32_t unresolved;       /* hours left unfolded: no exact fold */
	uint32_t failed;           /* hours that failed (bucket, damage) */
	uint32_t marked;           /* deletion marks written */
	uint64_t bytes_read;       /* block objects fetched */
	uint64_t bytes_written;    /* fold objects uploaded */
};

/*
 * A folder for `bucket` (borrowed) with its scratch store in directory
 * `scratch` (emptied now).  0, SM_EIO, SM_ENOMEM.
 */
int cpt_fold_create(struct sm_bucket *bucket, const char *scratch,
    struct cpt_fold **out, struct sm_err *err);
void cpt_fold_destroy(struct cpt_fold *f);

/*
 * One pass (above) at now_ms.  floor(arg, tenant) is the tenant's
 * retention floor (0: keep all).  0 or the scan's error.
 */
int cpt_fold_pass(struct cpt_fold *f, int64_t now_ms, int64_t delay_ms,
    const struct sm_tiers *tiers,
    int64_t (*floor)(void *arg, const char *tenant), void *arg,
    struct cpt_fold_stats *st, struct sm_err *err);

#endif /* CPT_FOLD_H */
