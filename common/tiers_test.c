/*
 * tiers_test.c -- tier lists and the resolutions a query asks for: the
 * pieces cover exactly the aligned part of the range at the coarsest
 * usable width, edges at finer ones, raw ends left out.
 */
#include "common/tiers.h"

#include "sm_test.h"

#define H 3600000LL
#define D 86400000LL

static void
test_parse(void)
{
	struct sm_tiers t;
	struct sm_err err;

	SM_CHECK(sm_tiers_parse("1h,1d", 10000, &t, &err) == 0);
	SM_CHECK(t.n == 2 && t.w[0] == H && t.w[1] == D);
	SM_CHECK(sm_tiers_parse("1m,1h,1d", 10000, &t, &err) == 0 && t.n == 3);
	SM_CHECK(sm_tiers_parse("none", 10000, &t, &err) == 0 && t.n == 0);
	SM_CHECK(sm_tiers_parse("", 10000, &t, &err) == 0 && t.n == 0);
	/* not increasing, not a multiple, not dividing a day, not a bucket
	 * multiple, garbage */
	SM_CHECK(sm_tiers_parse("1d,1h", 10000, &t, &err) == SM_EINVAL);
	SM_CHECK(sm_tiers_parse("40m,1h", 10000, &t, &err) == SM_EINVAL);
	SM_CHECK(sm_tiers_parse("7h", 10000, &t, &err) == SM_EINVAL);
	SM_CHECK(sm_tiers_parse("15s", 10000, &t, &err) == SM_EINVAL);
	SM_CHECK(sm_tiers_parse("1h,x", 10000, &t, &err) == SM_EINVAL);
	SM_CHECK(sm_tiers_parse("1h,1h", 10000, &t, &err) == SM_EINVAL);
}

/* The pieces are sorted, disjoint, aligned, inside the range, and every
 * point outside them is within one finer width of an edge. */
static void
check_pieces(const struct sm_tiers *t, int64_t s, int64_t e, int64_t step)
{
	struct sm_tier_piece pc[SM_TIERS_PIECES_MAX];
	uint32_t n = sm_tiers_pieces(t, s, e, step, pc);

	SM_CHECK(n <= SM_TIERS_PIECES_MAX);
	for (uint32_t i = 0; i < n; i++) {
		SM_CHECK(pc[i].start < pc[i].end);
		SM_CHECK(pc[i].start % pc[i].width == 0);
		SM_CHECK(pc[i].end % pc[i].width == 0);
		SM_CHECK(pc[i].start >= s && pc[i].end <= e);
		SM_CHECK(step == 0 || step % pc[i].width == 0);
		if (i > 0)
			SM_CHECK(pc[i - 1].end <= pc[i].start);
	}
}

static void
test_pieces(void)
{
	struct sm_tiers t;
	struct sm_tier_piece pc[SM_TIERS_PIECES_MAX];
	struct sm_err err;
	int64_t s = 30 * D + 5 * H + 1234, e = 60 * D + 7 * H + 999;
	uint32_t n;

	SM_CHECK(sm_tiers_parse("1h,1d", 10000, &t, &err) == 0);
	/* A merge: days inside, hours at the edges, raw at the ends. */
	n = sm_tiers_pieces(&t, s, e, 0, pc);
	SM_CHECKF(n == 3, "%u pieces", n);
	SM_CHECK(pc[0].start == 30 * D + 6 * H && pc[0].end == 31 * D &&
	    pc[0].width == H);
	SM_CHECK(pc[1].start == 31 * D && pc[1].end == 60 * D &&
	    pc[1].width == D);
	SM_CHECK(pc[2].start == 60 * D && pc[2].end == 60 * D + 7 * H &&
	    pc[2].width == H);
	/* A series with a 30-minute step can use neither width. */
	SM_CHECK(sm_tiers_pieces(&t, s, e, 30 * 60000, pc) == 0);
	/* With a 2-hour step only hours. */
	n = sm_tiers_pieces(&t, s, e, 2 * H, pc);
	SM_CHECK(n == 1 && pc[0].width == H && pc[0].start == 30 * D + 6 * H &&
	    pc[0].end == 60 * D + 7 * H);
	/* A range inside one hour: raw only. */
	SM_CHECK(sm_tiers_pieces(&t, 5 * H + 1, 6 * H - 1, 0, pc) == 0);
	/* Aligned ranges: one piece; negative times floor correctly. */
	n = sm_tiers_pieces(&t, -2 * D, 2 * D, 0, pc);
	SM_CHECK(n == 1 && pc[0].start == -2 * D && pc[0].end == 2 * D);
	n = sm_tiers_pieces(&t, -D - 1, -H + 1, 0, pc);
	SM_CHECK(n == 1 && pc[0].start == -D && pc[0].end == -H &&
	    pc[0].width == H);
	/* No tiers: nothing. */
	SM_CHECK(sm_tiers_parse("none", 10000, &t, &err) == 0);
	SM_CHECK(sm_tiers_pieces(&t, s, e, 0, pc) == 0);
	/* Many ranges keep the invariants. */
	SM_CHECK(sm_tiers_parse("1m,1h,1d", 10000, &t, &err) == 0);
	for (int64_t a = -3 * D; a < 3 * D; a += 7 * H + 13 * 60000 + 17)
		for (int64_t len = 1; len < 5 * D; len = len * 3 + 11111)
			for (int k = 0; k < 4; k++)
				check_pieces(&t, a, a + len, (int64_t[]){ 0,
				    60000, 2 * H, D }[k]);
}

SM_TEST_MAIN(
	{ "tier lists: order, multiples, a day", test_parse },
	{ "resolutions: coarsest inside, finer at the edges", test_pieces },
)
