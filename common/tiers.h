/*
 * tiers.h -- the downsampling tiers, as configured, and the resolutions a
 * query asks for (docs/architecture.md §7, "Downsampling tiers").
 *
 * -compactor.downsample-tiers lists tier widths ("1h,1d"; "" or "none":
 * no tiers).  The compactor builds a tier block per width and day-long
 * window (ingester/compact.c); the querier, which takes the same flag,
 * asks each query at resolutions made of those widths (sm_tiers_pieces)
 * and every ingester answers at them whether or not it has built the
 * tiers yet (ingester/tiers.h), so the flag may differ between processes
 * without changing any answer -- only its speed.
 *
 * Rules (sm_tiers_parse, SM_EINVAL naming the entry otherwise): at most
 * SM_TIERS_MAX widths, strictly increasing, each a multiple of the bucket
 * width and of the width before it, each dividing one day.
 *
 * Decision: the default is 1h,1d.  A 1-minute tier is allowed but not
 * the default: a minute merges six 10 s profiles whose stacks mostly
 * differ, so it would store a third or more of the raw pairs again,
 * against the goal of tiers adding at most 15% (bench B7), while 1h and
 * 1d add a few percent and serve every range past a day.
 *
 * Locking: none (values).  Errors: SM_EINVAL.
 */
#ifndef SM_TIERS_H
#define SM_TIERS_H

#include "common/sm.h"

#define SM_TIERS_MAX 6
#define SM_TIERS_DEFAULT "1h,1d"
#define SM_TIERS_DAY_MS 86400000LL

struct sm_tiers {
	int64_t w[SM_TIERS_MAX];     /* increasing */
	uint32_t n;
};

int sm_tiers_parse(const char *s, int64_t bucket_ms, struct sm_tiers *t,
    struct sm_err *err);

/* A range [start, end) read at `width`. */
struct sm_tier_piece {
	int64_t start, end, width;
};

#define SM_TIERS_PIECES_MAX (2 * SM_TIERS_MAX + 1)

/*
 * The resolutions for a query over [start, end): the aligned interior of
 * the range at the coarsest usable width, its edges at the next finer
 * width, and so on; what is left at the two ends is read raw.  A width
 * is usable when `step` is 0 (a merge: any) or a multiple of it (a
 * series: points of `step` stay exact).  Sorted and disjoint, inside
 * [start, end); returns how many (<= SM_TIERS_PIECES_MAX) were put in out.
 */
uint32_t sm_tiers_pieces(const struct sm_tiers *t, int64_t start, int64_t end,
    int64_t step, struct sm_tier_piece *out);

#endif /* SM_TIERS_H */
