/*
 * tiers.c -- reading downsampling tiers at a query's resolution (tiers.h).
 */
#include "tiers.h"

int
ing_res_validate(const struct ing_select *sel, struct sm_err *err)
{
	if (sel->nres > ING_RES_MAX)
		return (sm_err_set(err, SM_EINVAL, "%zu resolutions exceed the "
		    "limit of %d", sel->nres, ING_RES_MAX));
	for (size_t i = 0; i < sel->nres; i++) {
		const struct ing_resolution *p = &sel->res[i];

		if (p->width_ms <= 0 || p->start_ms >= p->end_ms ||
		    p->start_ms % p->width_ms != 0 ||
		    p->end_ms % p->width_ms != 0)
			return (sm_err_set(err, SM_EINVAL, "resolution %zu: "
			    "[start, end) must be a non-empty range aligned "
			    "to a positive width", i));
		if (i > 0 && sel->res[i - 1].end_ms > p->start_ms)
			return (sm_err_set(err, SM_EINVAL, "resolution %zu: "
			    "ranges must be sorted and disjoint", i));
	}
	return (0);
}

static int
win_cmp(const void *a, const void *b)
{
	const struct ing_res_win *x = a, *y = b;

	return (x->r != y->r ? SM_CMP(x->r, y->r) : SM_CMP(x->start, y->start));
}

/* Does tier block m beat the chosen `w` (same r and window)? */
static bool
win_better(const struct ing_block_meta *m, const struct ing_res_win *w)
{
	if (m->tier_ms != w->tier_ms)
		return (m->tier_ms > w->tier_ms);
	return (m->cover_gen > w->cover_gen);
}

int
ing_res_init(struct ing_res *res, const struct ing_select *sel,
    const struct ing_sources *src, struct sm_err *err)
{
	int64_t rs[ING_RES_MAX];
	uint32_t nr = 0, ntier = 0;

	memset(res, 0, sizeof(*res));
	if (sel == NULL || sel->nres == 0)
		return (0);
	SM_ASSERT(sel->nres <= ING_RES_MAX);
	for (size_t i = 0; i < sel->nres; i++) {
		const struct ing_resolution *q = &sel->res[i];
		int64_t w = q->width_ms, lo = q->start_ms;
		int64_t f = sm_floor_to(sel->start_ms, w);

		/* Not before the select's start (the retention floor). */
		if (lo < sel->start_ms)
			lo = f == sel->start_ms ? f : f + w;
		if (lo < q->end_ms)
			res->p[res->np++] = (struct ing_res_piece){ lo,
			    q->end_ms, w };
	}
	/* The distinct widths asked for. */
	for (size_t i = 0; i < res->np; i++) {
		uint32_t k = 0;

		while (k < nr && rs[k] != res->p[i].width_ms)
			k++;
		if (k == nr)
			rs[nr++] = res->p[i].width_ms;
	}
	for (uint32_t i = 0; i < src->nblocks; i++)
		ntier += src->blocks[i].tier_ms > 0;
	if (ntier == 0)
		return (0);
	if ((res->w = sm_malloc((size_t)ntier * nr * sizeof(*res->w))) ==
	    NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	/* One entry per (r, window): the best tier block that fits r. */
	for (uint32_t k = 0; k < nr; k++) {
		uint32_t first = res->nw;

		for (uint32_t i = 0; i < src->nblocks; i++) {
			const struct ing_block_meta *m = &src->blocks[i];
			struct ing_res_win *w = NULL;

			if (m->tier_ms <= 0 || m->broken ||
			    rs[k] % m->tier_ms != 0 ||
			    m->cover_start % ING_TIER_WINDOW_MS != 0 ||
			    m->cover_end != m->cover_start + ING_TIER_WINDOW_MS)
				continue;
			for (uint32_t j = first; j < res->nw; j++) {
				if (res->w[j].start == m->cover_start) {
					w = &res->w[j];
					break;
				}
			}
			if (w != NULL && !win_better(m, w))
				continue;
			if (w == NULL)
				w = &res->w[res->nw++];
			*w = (struct ing_res_win){ .r = rs[k],
				.start = m->cover_start, .end = m->cover_end,
				.gen = m->gen, .cover_gen = m->cover_gen,
				.tier_ms = m->tier_ms };
		}
	}
	if (res->nw > 1)
		qsort(res->w, res->nw, sizeof(*res->w), win_cmp);
	return (0);
}

void
ing_res_fini(struct ing_res *res)
{
	sm_free(res->w);
	memset(res, 0, sizeof(*res));
}

/* The index of the resolution range holding t, or -1. */
static ssize_t
res_piece(const struct ing_res *res, int64_t t)
{
	size_t lo;

	SM_LOWER_BOUND(lo, res->np, mid, res->p[mid].end_ms <= t);
	if (lo < res->np && res->p[lo].start_ms <= t)
		return ((ssize_t)lo);
	return (-1);
}

int64_t
ing_res_width(const struct ing_res *res, int64_t t)
{
	ssize_t i = res->np > 0 ? res_piece(res, t) : -1;

	return (i < 0 ? 0 : res->p[i].width_ms);
}

/* The chosen tier block for (r, the window holding t), or NULL. */
static const struct ing_res_win *
res_win(const struct ing_res *res, int64_t r, int64_t t)
{
	uint32_t lo;

	SM_LOWER_BOUND(lo, res->nw, mid, res->w[mid].r < r ||
	    (res->w[mid].r == r && res->w[mid].end <= t));
	if (lo < res->nw && res->w[lo].r == r && res->w[lo].start <= t &&
	    t < res->w[lo].end)
		return (&res->w[lo]);
	return (NULL);
}

bool
ing_res_bucket(const struct ing_res *res, const struct ing_block_meta *m,
    int64_t t, int64_t *ft)
{
	int64_t r = ing_res_width(res, t);
	const struct ing_res_win *w;

	*ft = t;
	if (r == 0)
		return (m == NULL || m->tier_ms == 0);
	*ft = sm_floor_to(t, r);
	if (m == NULL)
		return (true);            /* a head: never covered */
	w = res_win(res, r, t);
	if (m->tier_ms > 0)
		return (w != NULL && w->gen == m->gen);
	return (w == NULL || ing_block_cov_gen(m) > w->cover_gen);
}

bool
ing_res_source(const struct ing_res *res, const struct ing_block_meta *m,
    int64_t start, int64_t end)
{
	int64_t x, hi;

	if (m == NULL)
		return (true);
	if (start > end) {            /* no time filter (ing_set_select) */
		start = INT64_MIN / 2;
		end = INT64_MAX / 2;
	}
	if (m->tier_ms > 0) {
		/* Read when chosen for a width asked for in its window. */
		for (uint32_t i = 0; i < res->nw; i++) {
			const struct ing_res_win *w = &res->w[i];
			int64_t lo = SM_MAX(SM_MAX(w->start, m->min_t), start);
			int64_t up = SM_MIN(SM_MIN(w->end, m->max_t), end);

			if (w->gen != m->gen)
				continue;
			for (size_t k = 0; k < res->np; k++) {
				if (res->p[k].width_ms == w->r &&
				    res->p[k].start_ms < up &&
				    res->p[k].end_ms > lo)
					return (true);
			}
		}
		return (false);
	}
	/* A raw block: read unless every bucket it may have in range lies
	 * in a resolution range whose window's chosen block covers it.  A
	 * bucket starting before `start` may still overlap it. */
	x = SM_MAX(m->min_t, start - m->bucket_ms + 1);
	hi = SM_MIN(m->max_t, end);
	while (x < hi) {
		ssize_t i = res->np > 0 ? res_piece(res, x) : -1;
		const struct ing_res_win *w;

		if (i < 0)
			return (true);
		w = res_win(res, res->p[i].width_ms, x);
		if (w == NULL || ing_block_cov_gen(m) > w->cover_gen)
			return (true);
		x = SM_MIN(w->end, res->p[i].end_ms);
	}
	return (false);
}
