/*
 * ratelimit_test.c -- the token bucket and the per-tenant table of
 * ratelimit.h, and Pyroscope's byte formatting in the 429 message.  The
 * table reads a manual clock (common/clock.h) that each step puts at
 * the instant it names: nothing here depends on how fast it runs.
 */
#include "distributor/ratelimit.h"

#include <string.h>

#include "sm_test.h"

#define SEC 1000000000LL

static void
test_bucket(void)
{
	struct dist_bucket b;

	memset(&b, 0, sizeof(b));
	/* 100 B/s, burst 50: starts full. */
	SM_CHECK(dist_bucket_take(&b, 100, 50, 1 * SEC, 30));
	SM_CHECK(dist_bucket_take(&b, 100, 50, 1 * SEC, 20));
	SM_CHECK(!dist_bucket_take(&b, 100, 50, 1 * SEC, 1));
	/* A refusal takes nothing: 0.1 s later 10 tokens are there. */
	SM_CHECK(!dist_bucket_take(&b, 100, 50, 1 * SEC + SEC / 10, 11));
	SM_CHECK(dist_bucket_take(&b, 100, 50, 1 * SEC + SEC / 10, 10));
	/* Refill caps at the burst. */
	SM_CHECK(!dist_bucket_take(&b, 100, 50, 10 * SEC, 51));
	SM_CHECK(dist_bucket_take(&b, 100, 50, 10 * SEC, 50));
	/* Larger than the burst: never. */
	SM_CHECK(!dist_bucket_take(&b, 100, 50, 100 * SEC, 60));
	/* A lower burst caps the tokens at once; a raised one fills later. */
	SM_CHECK(!dist_bucket_take(&b, 100, 10, 100 * SEC, 11));
	SM_CHECK(dist_bucket_take(&b, 100, 1000, 100 * SEC, 10));
	SM_CHECK(!dist_bucket_take(&b, 100, 1000, 100 * SEC, 1));
	SM_CHECK(dist_bucket_take(&b, 100, 1000, 110 * SEC, 1000));
	/* Rate 0: no limit. */
	SM_CHECK(dist_bucket_take(&b, 0, 0, 110 * SEC, 1e12));
}

/* Put manual clock c at monotonic time t (it only moves forward). */
static void
at(struct sm_clock *c, int64_t t)
{
	SM_REQUIRE(t >= sm_clock_mono_ns(c));
	sm_clock_manual_advance(c, t - sm_clock_mono_ns(c));
}

static void
test_table(void)
{
	struct dist_ratelim *rl;
	struct sm_clock clk;
	struct sm_err err;

	sm_clock_manual_init(&clk, 1 * SEC, 0);
	SM_CHECK_EQ(dist_ratelim_create(&clk, &rl), 0);
	/* 1 MiB burst: a 1 MiB upload passes, the next is refused with
	 * Pyroscope's message; another tenant is untouched. */
	SM_CHECK_EQ(dist_ratelim_take(rl, "a", 0.001, 1, 1, 1 << 20, &err), 0);
	SM_CHECK_EQ(dist_ratelim_take(rl, "a", 0.001, 1, 1, 4096, &err),
	    SM_ELIMIT);
	SM_CHECK_STR(err.msg, "push rate limit (1.0 KiB) exceeded while "
	    "adding 4.0 KiB");
	SM_CHECK_EQ(dist_ratelim_take(rl, "b", 0.001, 1, 1, 1 << 20, &err), 0);
	SM_CHECK_EQ(dist_ratelim_take(rl, "a", 0, 1, 1, 1 << 30, &err), 0);
	/* 4 s at 0.001 MiB/s (1048.576 B/s) refill 4194 bytes: the
	 * refused 4 KiB passes now, and 99 bytes more do not. */
	at(&clk, 5 * SEC);
	SM_CHECK_EQ(dist_ratelim_take(rl, "a", 0.001, 1, 1, 4096, &err), 0);
	SM_CHECK_EQ(dist_ratelim_take(rl, "a", 0.001, 1, 1, 99, &err),
	    SM_ELIMIT);
	SM_CHECK_EQ(dist_ratelim_take(rl, "a", 0.001, 1, 1, 98, &err), 0);
	dist_ratelim_destroy(rl);
}

/*
 * Shared among N healthy distributors: the bucket refills at rate / N,
 * the burst stays whole; a change of N keeps the tokens (capped at the
 * burst) and applies from the next check on.
 */
static void
test_shared(void)
{
	struct dist_ratelim *rl;
	struct sm_clock clk;
	struct sm_err err;
	const size_t mib = 1u << 20, half = mib / 2, quarter = mib / 4;

	sm_clock_manual_init(&clk, 1 * SEC, 0);
	SM_CHECK_EQ(dist_ratelim_create(&clk, &rl), 0);
	/* Rate 1 MiB/s, burst 1 MiB, 2 distributors: starts full (the
	 * whole burst), then refills at 0.5 MiB/s. */
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 2, mib, &err), 0);
	at(&clk, 2 * SEC);
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 2, half + 1, &err),
	    SM_ELIMIT);
	/* The message names the tenant's whole rate, not the share. */
	SM_CHECK_STR(err.msg, "push rate limit (1.0 MiB) exceeded while "
	    "adding 512 KiB");
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 2, half, &err), 0);
	/* N 2 -> 1: no tokens appear at the change... */
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 1, 1, &err), SM_ELIMIT);
	/* ...the refill after it is the whole rate: 0.5 s = 0.5 MiB. */
	at(&clk, 2 * SEC + SEC / 2);
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 1, half + 1, &err),
	    SM_ELIMIT);
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 1, half, &err), 0);
	/* N 1 -> 4 at 3 s: the half second before the change refilled at
	 * the old share (1 MiB/s), the next second at 0.25 MiB/s. */
	at(&clk, 3 * SEC);
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 4, half, &err), 0);
	at(&clk, 4 * SEC);
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 4, quarter + 1, &err),
	    SM_ELIMIT);
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 4, quarter, &err), 0);
	/* Kept tokens are capped at the burst, whatever N: after a long
	 * pause a full burst passes, and not a byte more. */
	at(&clk, 100 * SEC);
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 4, mib, &err), 0);
	SM_CHECK_EQ(dist_ratelim_take(rl, "t", 1, 1, 4, 1, &err), SM_ELIMIT);
	/* N = 0 counts as 1 (never a division by zero): a second refills
	 * the whole rate. */
	SM_CHECK_EQ(dist_ratelim_take(rl, "u", 1, 1, 0, mib, &err), 0);
	at(&clk, 101 * SEC);
	SM_CHECK_EQ(dist_ratelim_take(rl, "u", 1, 1, 0, mib, &err), 0);
	/* Over 10 s at N = 2 a distributor admits burst + rate x 10 / 2. */
	{
		size_t got = 0;

		for (int64_t t = 1; t <= 1000; t++) {
			at(&clk, 101 * SEC + t * SEC / 100);
			if (dist_ratelim_take(rl, "v", 1, 1, 2, 64 << 10,
			    &err) == 0)
				got += 64 << 10;
		}
		SM_CHECK(got >= mib + 5 * mib - (64 << 10));
		SM_CHECK(got <= mib + 5 * mib);
	}
	dist_ratelim_destroy(rl);
}

static void
test_ibytes(void)
{
	static const struct {
		uint64_t n;
		const char *s;
	} cases[] = {
		{ 0, "0 B" }, { 9, "9 B" }, { 512, "512 B" },
		{ 1536, "1.5 KiB" }, { 4u << 20, "4.0 MiB" },
		{ 12u << 20, "12 MiB" }, { 1000, "1000 B" },
	};
	char buf[32];

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		dist_ibytes(cases[i].n, buf, sizeof(buf));
		SM_CHECK_STR(buf, cases[i].s);
	}
}

SM_TEST_MAIN(
	{ "token bucket: burst, refill, refusal takes nothing, changes",
	    test_bucket },
	{ "per-tenant table and the 429 message", test_table },
	{ "shared bucket: rate / healthy distributors, N changes keep "
	    "tokens", test_shared },
	{ "humanize.IBytes", test_ibytes },
)
