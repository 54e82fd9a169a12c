/*
 * tiers.h -- reading downsampling tiers at a query's resolution
 * (docs/architecture.md §7, "Downsampling tiers").
 *
 * Raw blocks stay until retention.  A tier block (block.h: tier_ms > 0,
 * built by compact.c) adds, for one day-long window [cover_start,
 * cover_end), the exact sums of every raw block of its tenant with
 * gen <= cover_gen, each bucket floored to tier_ms.  Data written late
 * for the window lands in heads and raw blocks with larger gens, which no
 * existing tier block covers.
 *
 * A query asks for resolutions (smolder.v1.Select.resolution): aligned
 * ranges [start, end) read at width r.  In such a range every bucket
 * counts at floor(t, r), and for each window the ingester reads
 *   - the chosen tier block: among the source's tier blocks of that
 *     window whose tier_ms divides r, the coarsest, then the one with the
 *     largest cover_gen (a rebuild after late data supersedes the old
 *     one, which may linger until its deletion);
 *   - every raw bucket of a head, or of a raw block with gen above the
 *     chosen block's cover_gen (all of them when none is chosen).
 * Outside every resolution range buckets are read raw, exactly as before
 * tiers existed, and tier blocks are not read.  The answer is therefore
 * the same whether a replica compacted a window or not, and before and
 * after compaction: representation never shows through, only the
 * requested resolution does.  This is what keeps replicas de-duplicable
 * by the querier's plan (stats, digests and picks all use floored times).
 *
 * A query that does not honour resolutions (span merges, profile lists,
 * label and series listings) builds its ing_res from no select: raw
 * buckets only, tier blocks skipped.
 *
 * Only tier blocks whose window is one aligned day (ING_TIER_WINDOW_MS)
 * are read; any other is ignored (never double counted).
 *
 * Retention: a resolution range is cut to start at the first multiple of
 * its width at or after the select's start (which ing_select_floor raised
 * to the retention floor), so no tier bucket holding data from before the
 * floor is read; what lies between the floor and that multiple is read
 * raw, as on a replica without tiers.
 *
 * Ownership: an ing_res copies the select's resolutions and owns its
 * window table.  Locking: none; one query, one
 * thread.  Errors: ing_res_validate gives SM_EINVAL for resolutions that
 * are not sorted, disjoint, aligned and positive.
 */
#ifndef ING_TIERS_H
#define ING_TIERS_H

#include <stdbool.h>

#include "db_int.h"

#define ING_RES_MAX 64              /* resolutions in one select */

/* The chosen tier block of one (resolution, window). */
struct ing_res_win {
	int64_t r;
	int64_t start, end;
	uint64_t gen, cover_gen;
	int64_t tier_ms;
};

struct ing_res_piece {
	int64_t start_ms, end_ms, width_ms;
};

struct ing_res {
	struct ing_res_piece p[ING_RES_MAX];   /* sorted */
	size_t np;
	struct ing_res_win *w;         /* sorted by (r, start) */
	uint32_t nw;
};

/* Check sel->resolution.  0 or SM_EINVAL. */
int ing_res_validate(const struct ing_select *sel, struct sm_err *err);

/* The resolutions of `sel` (NULL: raw only) over the tier blocks among
 * `src`.  0 or SM_ENOMEM. */
int ing_res_init(struct ing_res *res, const struct ing_select *sel,
    const struct ing_sources *src, struct sm_err *err);
void ing_res_fini(struct ing_res *res);

/* The width asked for at t; 0 = raw. */
int64_t ing_res_width(const struct ing_res *res, int64_t t);

/*
 * Whether the bucket starting at t of block m (NULL: a head) is read, and
 * *ft its time at the query's resolution.
 */
bool ing_res_bucket(const struct ing_res *res, const struct ing_block_meta *m,
    int64_t t, int64_t *ft);

/*
 * Whether block m may have a bucket read in [start, end) (a head: always):
 * false when every bucket it has there is covered or not chosen, so the
 * query need not read its index at all.
 */
bool ing_res_source(const struct ing_res *res, const struct ing_block_meta *m,
    int64_t start, int64_t end);

#endif /* ING_TIERS_H */
