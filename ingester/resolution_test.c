/*
 * resolution_test.c -- which buckets a query reads at its resolutions
 * (tiers.h): one tier block per (width, day), the coarsest that fits and
 * then the newest cover; raw buckets only where no chosen tier covers
 * their block; whole blocks skipped when nothing of them is read.
 */
#include "tiers.h"

#include "sm_test.h"

#define H 3600000LL
#define D 86400000LL

static struct ing_block_meta
raw(uint64_t gen, int64_t lo, int64_t hi)
{
	return ((struct ing_block_meta){ .gen = gen, .min_t = lo,
	    .max_t = hi, .bucket_ms = 10000 });
}

static struct ing_block_meta
tier(uint64_t gen, int64_t w, int64_t day, uint64_t cover_gen)
{
	return ((struct ing_block_meta){ .gen = gen, .min_t = day,
	    .max_t = day + D, .bucket_ms = w, .tier_ms = w,
	    .cover_start = day, .cover_end = day + D,
	    .cover_gen = cover_gen });
}

/* A select asking [lo, hi) at width w (two ranges when lo2 < hi2). */
struct q {
	struct ing_select sel;
	struct ing_resolution r[2];
};

static void
q_init(struct q *q, int64_t w, int64_t lo, int64_t hi, int64_t w2,
    int64_t lo2, int64_t hi2)
{
	memset(q, 0, sizeof(*q));
	q->r[0] = (struct ing_resolution){ lo, hi, w };
	q->r[1] = (struct ing_resolution){ lo2, hi2, w2 };
	q->sel.res = q->r;
	q->sel.nres = lo2 < hi2 ? 2 : 1;
	q->sel.start_ms = lo;
	q->sel.end_ms = lo2 < hi2 ? hi2 : hi;
}

static void
test_choice(void)
{
	/* Day 0: raw blocks 1..3, a 1h tier covering gen <= 2 (gen 10), a
	 * 1d tier covering gen <= 1 (gen 11), an older 1h tier (gen 9,
	 * cover 1), and a 1h tier of a 2-day window (ignored). */
	struct ing_block_meta m[] = {
		raw(1, 0, 8 * H), raw(2, 8 * H, 16 * H), raw(3, 2 * H, 3 * H),
		tier(9, H, 0, 1), tier(10, H, 0, 2), tier(11, D, 0, 1),
	};
	struct ing_block_meta odd = tier(12, H, 0, 3);
	struct ing_block_meta all[7];
	struct ing_sources src = { .blocks = all, .nblocks = 7 };
	struct ing_res res;
	struct sm_err err;
	struct q q;
	int64_t ft;

	memcpy(all, m, sizeof(m));
	odd.cover_end = 2 * D;
	all[6] = odd;

	/* At 1 h: the newest 1h tier (gen 10) is read, the older one and
	 * the 1d tier are not; raw 1 and 2 are covered, raw 3 is not. */
	q_init(&q, H, 0, D, 0, 0, 0);
	SM_CHECK(ing_res_validate(&q.sel, &err) == 0);
	SM_CHECK(ing_res_init(&res, &q.sel, &src, &err) == 0);
	SM_CHECK(ing_res_bucket(&res, &m[4], 5 * H, &ft) && ft == 5 * H);
	SM_CHECK(!ing_res_bucket(&res, &m[3], 5 * H, &ft));
	SM_CHECK(!ing_res_bucket(&res, &m[5], 0, &ft));
	SM_CHECK(!ing_res_bucket(&res, &odd, 5 * H, &ft));
	SM_CHECK(!ing_res_bucket(&res, &m[0], 5 * H + 10000, &ft));
	SM_CHECK(ing_res_bucket(&res, &m[2], 2 * H + 20000, &ft) &&
	    ft == 2 * H);
	SM_CHECK(ing_res_bucket(&res, NULL, 7 * H + 1, &ft) && ft == 7 * H);
	SM_CHECK(!ing_res_source(&res, &m[0], 0, D));
	SM_CHECK(!ing_res_source(&res, &m[1], 0, D));
	SM_CHECK(ing_res_source(&res, &m[2], 0, D));
	SM_CHECK(ing_res_source(&res, &m[4], 0, D));
	SM_CHECK(!ing_res_source(&res, &m[3], 0, D));
	SM_CHECK(!ing_res_source(&res, &m[5], 0, D));
	SM_CHECK(!ing_res_source(&res, &odd, 0, D));
	ing_res_fini(&res);

	/* At 1 d: the 1d tier (cover 1) is coarsest: raw 2 and 3 are read
	 * floored to the day, raw 1 is covered, the 1h tiers are not read. */
	q_init(&q, D, 0, D, 0, 0, 0);
	SM_CHECK(ing_res_init(&res, &q.sel, &src, &err) == 0);
	SM_CHECK(ing_res_bucket(&res, &m[5], 0, &ft) && ft == 0);
	SM_CHECK(!ing_res_bucket(&res, &m[4], 3 * H, &ft));
	SM_CHECK(!ing_res_bucket(&res, &m[0], 3 * H, &ft));
	SM_CHECK(ing_res_bucket(&res, &m[1], 9 * H, &ft) && ft == 0);
	SM_CHECK(ing_res_bucket(&res, &m[2], 2 * H, &ft) && ft == 0);
	SM_CHECK(!ing_res_source(&res, &m[0], 0, D));
	SM_CHECK(ing_res_source(&res, &m[1], 0, D));
	ing_res_fini(&res);
}

static void
test_edges(void)
{
	struct ing_block_meta m[] = {
		raw(1, 0, 2 * D), tier(5, H, 0, 1), tier(6, H, D, 1),
	};
	struct ing_sources src = { .blocks = m, .nblocks = 3 };
	struct ing_res res, none;
	struct sm_err err;
	struct q q;
	int64_t ft;

	/* [2h, 1d + 5h) at 1 h, the query starting at 1h+30m: raw before
	 * 2h, tiers inside, raw after. */
	q_init(&q, H, 2 * H, D + 5 * H, 0, 0, 0);
	q.sel.start_ms = H + 30 * 60000;
	q.sel.end_ms = D + 5 * H + 1234;
	SM_CHECK(ing_res_init(&res, &q.sel, &src, &err) == 0);
	SM_CHECK(ing_res_width(&res, H + 40 * 60000) == 0);
	SM_CHECK(ing_res_width(&res, 2 * H) == H);
	SM_CHECK(ing_res_width(&res, D + 5 * H) == 0);
	SM_CHECK(ing_res_bucket(&res, &m[0], H + 40 * 60000, &ft) &&
	    ft == H + 40 * 60000);
	SM_CHECK(!ing_res_bucket(&res, &m[0], 3 * H, &ft));
	SM_CHECK(!ing_res_bucket(&res, &m[1], H, &ft));   /* raw there */
	SM_CHECK(ing_res_bucket(&res, &m[1], 2 * H, &ft));
	SM_CHECK(ing_res_bucket(&res, &m[2], D + 4 * H, &ft));
	SM_CHECK(!ing_res_bucket(&res, &m[2], D + 5 * H, &ft));
	SM_CHECK(ing_res_source(&res, &m[0], q.sel.start_ms, q.sel.end_ms));
	ing_res_fini(&res);
	/* A raw block wholly inside the covered part is skipped, one whose
	 * bucket before the start overlaps it is not. */
	{
		struct ing_block_meta in = raw(1, 3 * H, 4 * H);
		struct ing_block_meta edge = raw(1, 2 * H - 5000, 3 * H);

		q_init(&q, H, 2 * H, D, 0, 0, 0);
		SM_CHECK(ing_res_init(&res, &q.sel, &src, &err) == 0);
		SM_CHECK(!ing_res_source(&res, &in, 2 * H, D));
		SM_CHECK(ing_res_source(&res, &edge, 2 * H, D));
		ing_res_fini(&res);
	}
	/* No resolution: raw only, tier blocks never. */
	SM_CHECK(ing_res_init(&none, NULL, &src, &err) == 0);
	SM_CHECK(ing_res_bucket(&none, &m[0], 3 * H, &ft) && ft == 3 * H);
	SM_CHECK(!ing_res_bucket(&none, &m[1], 3 * H, &ft));
	SM_CHECK(!ing_res_source(&none, &m[1], 0, 2 * D));
	SM_CHECK(ing_res_source(&none, &m[0], 0, 2 * D));
	ing_res_fini(&none);
}

/* A select whose start was raised to the retention floor reads no tier
 * bucket from before it: the range is cut to the next aligned start. */
static void
test_floor(void)
{
	struct ing_block_meta m[] = {
		raw(1, 0, 2 * D), tier(5, D, 0, 1), tier(6, D, D, 1),
	};
	struct ing_sources src = { .blocks = m, .nblocks = 3 };
	struct ing_res res;
	struct sm_err err;
	struct q q;
	int64_t ft;

	q_init(&q, D, 0, 2 * D, 0, 0, 0);
	q.sel.start_ms = 5 * H;                 /* the floor */
	SM_CHECK(ing_res_init(&res, &q.sel, &src, &err) == 0);
	SM_CHECK(ing_res_width(&res, 4 * H) == 0);
	SM_CHECK(ing_res_width(&res, D) == D);
	SM_CHECK(!ing_res_bucket(&res, &m[1], 0, &ft));
	SM_CHECK(!ing_res_source(&res, &m[1], 5 * H, 2 * D));
	SM_CHECK(ing_res_bucket(&res, &m[0], 6 * H, &ft) && ft == 6 * H);
	SM_CHECK(ing_res_bucket(&res, &m[2], D, &ft) && ft == D);
	SM_CHECK(!ing_res_bucket(&res, &m[0], D + H, &ft));
	ing_res_fini(&res);
	/* A floor past the whole range leaves no resolution. */
	q.sel.start_ms = 2 * D - 1;
	SM_CHECK(ing_res_init(&res, &q.sel, &src, &err) == 0);
	SM_CHECK(res.np == 0);
	ing_res_fini(&res);
}

static void
test_validate(void)
{
	struct sm_err err;
	struct q q;

	q_init(&q, H, 0, D, D, D, 3 * D);
	SM_CHECK(ing_res_validate(&q.sel, &err) == 0);
	q_init(&q, H, 0, D + 1, 0, 0, 0);
	SM_CHECK(ing_res_validate(&q.sel, &err) == SM_EINVAL);
	q_init(&q, 0, 0, D, 0, 0, 0);
	SM_CHECK(ing_res_validate(&q.sel, &err) == SM_EINVAL);
	q_init(&q, H, 0, 2 * D, D, D, 3 * D);      /* overlapping */
	SM_CHECK(ing_res_validate(&q.sel, &err) == SM_EINVAL);
	q_init(&q, H, 2 * H, H, 0, 0, 0);          /* empty */
	SM_CHECK(ing_res_validate(&q.sel, &err) == SM_EINVAL);
}

SM_TEST_MAIN(
	{ "the coarsest fitting tier, the newest cover, raw above it",
	  test_choice },
	{ "edges read raw, covered blocks skipped, no resolution = raw",
	  test_edges },
	{ "the retention floor cuts a resolution to its next start",
	  test_floor },
	{ "resolutions must be sorted, disjoint, aligned", test_validate },
)
