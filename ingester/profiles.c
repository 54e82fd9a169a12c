/*
 * profiles.c -- individual-profile records of a head; see profiles.h.
 */
#include "profiles.h"

#include <stdlib.h>
#include <string.h>

int
ing_profs_add(struct ing_profs *p, uint64_t fp, int64_t t,
    const uint8_t id[16], int64_t total)
{
	struct ing_prof_rec *r;

	if (SM_GROW(p->v, p->cap, p->n + 1, 64) != 0)
		return (SM_ENOMEM);
	r = &p->v[p->n++];
	r->fp = fp;
	r->t = t;
	r->total = total;
	memcpy(r->id, id, 16);
	return (0);
}

void
ing_profs_fini(struct ing_profs *p)
{
	sm_free(p->v);
	memset(p, 0, sizeof(*p));
}

uint64_t
ing_profs_bytes(const struct ing_profs *p)
{
	return ((uint64_t)p->cap * sizeof(*p->v));
}

int
ing_prof_cmp(const void *a, const void *b)
{
	const struct ing_prof_rec *x = a, *y = b;
	int c;

	if ((c = SM_CMP(x->fp, y->fp)) != 0 || (c = SM_CMP(x->t, y->t)) != 0)
		return (c);
	return (memcmp(x->id, y->id, 16));
}

uint32_t
ing_profs_sort(struct ing_prof_rec *v, uint32_t n)
{
	uint32_t w = 0;

	if (n == 0)
		return (0);     /* qsort(NULL, 0) is undefined */
	qsort(v, n, sizeof(*v), ing_prof_cmp);
	for (uint32_t i = 0; i < n; i++) {
		if (w > 0 && ing_prof_cmp(&v[w - 1], &v[i]) == 0)
			continue;
		v[w++] = v[i];
	}
	return (w);
}
