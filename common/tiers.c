/*
 * tiers.c -- downsampling tier widths and query resolutions (tiers.h).
 */
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "common/tiers.h"

int
sm_tiers_parse(const char *s, int64_t bucket_ms, struct sm_tiers *t,
    struct sm_err *err)
{
	char buf[256], *p, *save = NULL;

	memset(t, 0, sizeof(*t));
	if (s == NULL || *s == '\0' || strcmp(s, "none") == 0)
		return (0);
	if (strlen(s) >= sizeof(buf))
		return (sm_err_set(err, SM_EINVAL, "tiers: list too long"));
	strcpy(buf, s);
	for (p = strtok_r(buf, ",", &save); p != NULL;
	    p = strtok_r(NULL, ",", &save)) {
		int64_t w;

		if (t->n == SM_TIERS_MAX)
			return (sm_err_set(err, SM_EINVAL, "tiers: more than "
			    "%d widths", SM_TIERS_MAX));
		if (sm_parse_duration_ms(p, &w) != 0 || w <= 0)
			return (sm_err_set(err, SM_EINVAL, "tiers: %s is not "
			    "a positive duration", p));
		if (bucket_ms > 0 && w % bucket_ms != 0)
			return (sm_err_set(err, SM_EINVAL, "tiers: %s is not "
			    "a multiple of the %lld ms bucket", p,
			    (long long)bucket_ms));
		if (SM_TIERS_DAY_MS % w != 0)
			return (sm_err_set(err, SM_EINVAL, "tiers: %s does "
			    "not divide a day", p));
		if (t->n > 0 && (w <= t->w[t->n - 1] ||
		    w % t->w[t->n - 1] != 0))
			return (sm_err_set(err, SM_EINVAL, "tiers: %s is not "
			    "a multiple of the width before it", p));
		t->w[t->n++] = w;
	}
	return (0);
}

/* Ceiling and floor to a multiple of w (w > 0), for any sign. */
static int64_t
ceil_to(int64_t x, int64_t w)
{
	int64_t f = sm_floor_to(x, w);

	return (f == x ? x : f + w);
}

static void
pieces(const struct sm_tiers *t, const int64_t *use, int k, int64_t lo,
    int64_t hi, struct sm_tier_piece *out, uint32_t *n)
{
	int64_t a, b, w;

	while (k >= 0 && !use[k])
		k--;
	if (k < 0 || lo >= hi)
		return;
	w = t->w[k];
	a = ceil_to(lo, w);
	b = sm_floor_to(hi, w);
	if (a >= b) {
		pieces(t, use, k - 1, lo, hi, out, n);
		return;
	}
	pieces(t, use, k - 1, lo, a, out, n);
	out[(*n)++] = (struct sm_tier_piece){ a, b, w };
	pieces(t, use, k - 1, b, hi, out, n);
}

uint32_t
sm_tiers_pieces(const struct sm_tiers *t, int64_t start, int64_t end,
    int64_t step, struct sm_tier_piece *out)
{
	int64_t use[SM_TIERS_MAX];
	uint32_t n = 0;

	for (uint32_t i = 0; i < t->n; i++)
		use[i] = step == 0 || (step > 0 && step % t->w[i] == 0);
	pieces(t, use, (int)t->n - 1, start, end, out, &n);
	return (n);
}
