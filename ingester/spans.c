/*
 * spans.c -- span samples of a head and the span merge; see spans.h.
 */
#include "spans.h"

#include <stdlib.h>
#include <string.h>

int
ing_spans_add(struct ing_spans *s, uint64_t span, uint64_t fp, int64_t t,
    uint32_t node, int64_t value)
{
	if (SM_GROW(s->v, s->cap, s->n + 1, 64) != 0)
		return (SM_ENOMEM);
	s->v[s->n++] = (struct ing_span_rec){ span, fp, t, value, node };
	return (0);
}

void
ing_spans_fini(struct ing_spans *s)
{
	sm_free(s->v);
	memset(s, 0, sizeof(*s));
}

uint64_t
ing_spans_bytes(const struct ing_spans *s)
{
	return ((uint64_t)s->cap * sizeof(*s->v));
}

static int
rec_cmp(const void *a, const void *b)
{
	const struct ing_span_rec *x = a, *y = b;
	int c;

	if ((c = SM_CMP(x->span, y->span)) != 0 ||
	    (c = SM_CMP(x->fp, y->fp)) != 0 || (c = SM_CMP(x->t, y->t)) != 0)
		return (c);
	return (SM_CMP(x->node, y->node));
}

int
ing_spans_sorted(const struct ing_spans *s, struct ing_span_rec **out,
    uint32_t *n)
{
	struct ing_span_rec *v;
	uint32_t w = 0;

	*out = NULL;
	*n = 0;
	if (s->n == 0)
		return (0);
	if ((v = sm_malloc((size_t)s->n * sizeof(*v))) == NULL)
		return (SM_ENOMEM);
	memcpy(v, s->v, (size_t)s->n * sizeof(*v));
	qsort(v, s->n, sizeof(*v), rec_cmp);
	for (uint32_t i = 0; i < s->n; i++) {
		if (w > 0 && rec_cmp(&v[w - 1], &v[i]) == 0) {
			v[w - 1].value = sm_add_sat(v[w - 1].value, v[i].value);
			continue;
		}
		if (w > 0 && v[w - 1].value == 0)
			w--;            /* signed values that cancelled out */
		v[w++] = v[i];
	}
	if (w > 0 && v[w - 1].value == 0)
		w--;
	*out = v;
	*n = w;
	return (0);
}

uint64_t
ing_spans_sum(const struct ing_span_rec *v, uint32_t n, bool sorted,
    const uint64_t *ids, size_t nids, ing_span_want_fn want, void *arg,
    int64_t *acc)
{
	uint64_t added = 0;

	if (!sorted) {
		for (uint32_t i = 0; i < n; i++) {
			int sg;

			if (!sm_u64_has(ids, nids, v[i].span) ||
			    (sg = want(arg, v[i].fp, v[i].t)) == 0)
				continue;
			acc[v[i].node] = sm_add_sat(acc[v[i].node],
			    sg * v[i].value);
			added += sg > 0 ? 1 : (uint64_t)-1;
		}
		return (added);
	}
	for (size_t k = 0; k < nids; k++) {
		uint32_t lo;

		SM_LOWER_BOUND(lo, n, mid, v[mid].span < ids[k]);
		for (uint32_t i = lo; i < n && v[i].span == ids[k]; i++) {
			int sg;

			if ((sg = want(arg, v[i].fp, v[i].t)) == 0)
				continue;
			acc[v[i].node] = sm_add_sat(acc[v[i].node],
			    sg * v[i].value);
			added += sg > 0 ? 1 : (uint64_t)-1;
		}
	}
	return (added);
}
