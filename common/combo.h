/*
 * combo.h -- exact integer combinations of replicas.
 *
 * A bucket's value is the sum of its uploads' values, and replicas hold
 * those sums over the uploads each of them got.  When replicas diverged
 * (each missed different uploads, and the one that had them all is gone)
 * no single replica gives the bucket exactly, but an integer combination
 * of whole replicas may: {a, b} + {c}, or {a, b} + {a, c} - {a}.  The
 * compactor's fold (compactor/fold.h) and the querier's read plan
 * (querier/plan.c) both ask this question of one bucket: given, for each
 * upload of the union, the set of replicas holding it (a bit mask), which
 * coefficients in {-1, 0, 1} per replica count every upload exactly once?
 *
 * The answer prefers one replica holding every upload (`prefer` when it
 * does, else the lowest); otherwise the first vector in {-1, 0, 1}^k over
 * the k replicas present, in a fixed order, k <= SM_COMBO_MAX: 3^8 = 6,561
 * vectors at most, each checked against every upload.
 *
 * Locking: none (pure).  Errors: none; false means no exact combination.
 */
#ifndef SM_COMBO_H
#define SM_COMBO_H

#include <stdbool.h>
#include <stdint.h>

#define SM_COMBO_MAX 8      /* replicas of one bucket searched */

/*
 * masks[0..m): the replicas (bits 0..31) holding each upload of the
 * union.  *pos and *neg get the replicas with coefficient +1 and -1.
 */
bool sm_combo_solve(const uint32_t *masks, uint32_t m, int prefer,
    uint32_t *pos, uint32_t *neg);

#endif /* SM_COMBO_H */
