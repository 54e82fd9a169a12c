/*
 * complete.c -- can an answer over a data-time range be complete?  The
 * rule (docs/architecture.md §4.3, "Complete answers"; qry_int.h):
 *
 * A write at data time t was sent to its replicas (WriteRequest.replicas)
 * and acknowledged by a quorum of them, so an answer holds it when at
 * most RF - quorum of those replicas are missing.  A replica is an
 * incarnation of an ingester (a wiped disk makes a new one).  At time t a
 * replica is missing when:
 *   - it is a ring member that is down or failed (the fan's lost[]: the
 *     whole range), or
 *   - it is not in the ring any more (scaled in) or its member now runs
 *     another incarnation (a lost disk), and no block of its in the
 *     bucket covers t: neither its source on a store-gateway (Sources:
 *     each incarnation's first block start and last block end), nor the
 *     compactor's fold source, nor the blocks its successor restored
 *     (Witness.restored).
 * Who was a replica when comes from the members' witness records
 * (ingester/witness.h): every ingester that shared writes with an
 * incarnation knows the data-time range of those writes, so one record
 * that survives is enough.  The missing replicas are counted in read units
 * (zones on a zone-aware ring, members otherwise; common/ring.h) at every
 * point of the range; the answer is complete while the largest count is
 * within the ring's read budget.  The rule is conservative: a range is
 * called missing even when no write of it went to the missing replica.
 */
#include "qry_int.h"

#include <stdlib.h>
#include <string.h>

/* The compactor's fold source (ingester/ship.h, ING_FOLD_INC): it stands
 * for every replica of the hours it folded. */
#define QRY_FOLD_SOURCE "ffffffffffffffffffffffffffffffff"

struct cov {
	int64_t min, max;
};

static int
cov_cmp(const void *a, const void *b)
{
	const struct cov *x = a, *y = b;

	return (SM_CMP(x->min, y->min));
}

/* The read unit of member id `id` in zone `zone` ("" none). */
static void
unit_key(const struct sm_ring_snap *s, const char *id, const char *zone,
    char *out, size_t n)
{
	if (s->zone_aware && zone != NULL && zone[0] != '\0')
		snprintf(out, n, "z:%s", zone);
	else
		snprintf(out, n, "m:%s", id);
}

/* Append [from, to] of `who` to the gap list. */
static int
gap_add(struct qry_gap **g, uint32_t *n, uint32_t *cap,
    const struct sm_ring_snap *s, const char *id, const char *zone,
    const char *inc, const char *why, int64_t from, int64_t to)
{
	struct qry_gap *x;

	if (SM_GROW(*g, *cap, *n + 1, 8) != 0)
		return (SM_ENOMEM);
	x = &(*g)[(*n)++];
	memset(x, 0, sizeof(*x));
	unit_key(s, id, zone, x->key, sizeof(x->key));
	snprintf(x->who, sizeof(x->who), "%s (incarnation %.8s, %s)", id,
	    inc, why);
	x->from = from;
	x->to = to;
	return (0);
}

/* One replica incarnation some member witnessed: the hull of what they
 * saw. */
struct ent {
	const Smolder__V1__WitnessPeer *p;
	int64_t first, last;
};

int
qry_gaps_find(const struct sm_ring_snap *s, const struct qry_wit_in *wi,
    const struct qry_fan_src *src, uint32_t nsrc, int64_t start,
    int64_t end, struct qry_gap **out, uint32_t *nout)
{
	struct qry_gap *g = NULL;
	struct cov *cv = NULL;
	struct ent *ev = NULL;
	uint32_t n = 0, cap = 0, ccap = 0, ne = 0, ecap = 0;

	*out = NULL;
	*nout = 0;
	/* 1. Every incarnation witnessed, once, over the union of what its
	 * peers saw. */
	for (uint32_t m = 0; m < s->n; m++) {
		const Smolder__V1__Witness *w = wi[m].w;

		for (size_t k = 0; w != NULL && k < w->n_peers; k++) {
			const Smolder__V1__WitnessPeer *p = w->peers[k];
			uint32_t e;

			if (p->id == NULL || p->incarnation == NULL ||
			    p->first_ms > p->last_ms)
				continue;
			for (e = 0; e < ne && (strcmp(ev[e].p->id, p->id) != 0 ||
			    strcmp(ev[e].p->incarnation, p->incarnation) != 0);
			    e++)
				;
			if (e < ne) {
				ev[e].first = SM_MIN(ev[e].first, p->first_ms);
				ev[e].last = SM_MAX(ev[e].last, p->last_ms);
				continue;
			}
			if (SM_GROW(ev, ecap, ne + 1, 16) != 0)
				goto nomem;
			ev[ne++] = (struct ent){ p, p->first_ms, p->last_ms };
		}
	}
	/* 2. Those not serving now, where nothing in the bucket covers
	 * them. */
	for (uint32_t e = 0; e < ne; e++) {
		const Smolder__V1__WitnessPeer *p = ev[e].p;
		int64_t a = SM_MAX(start, ev[e].first);
		int64_t b = SM_MIN(end, ev[e].last);
		uint32_t nc = 0, j;
		bool member = false;
		const char *why;

		if (a > b)
			continue;
		/* An incarnation still a member (serving, or down: lost[]
		 * counts it over the whole range) is no gap. */
		for (j = 0; j < s->n; j++) {
			if (s->id[j] == NULL || strcmp(s->id[j], p->id) != 0)
				continue;
			member = true;
			if (wi[j].inc != NULL &&
			    strcmp(wi[j].inc, p->incarnation) == 0)
				break;
		}
		if (j < s->n)
			continue;
		for (uint32_t i = 0; i < nsrc; i++) {
			if (strcmp(src[i].id, p->incarnation) != 0 &&
			    strcmp(src[i].id, QRY_FOLD_SOURCE) != 0)
				continue;
			if (SM_GROW(cv, ccap, nc + 1, 8) != 0)
				goto nomem;
			cv[nc++] = (struct cov){ src[i].min_t, src[i].max_t };
		}
		for (uint32_t m = 0; m < s->n; m++) {
			const Smolder__V1__Witness *o = wi[m].w;

			for (size_t q = 0; o != NULL && q < o->n_restored;
			    q++) {
				if (strcmp(o->restored[q]->incarnation,
				    p->incarnation) != 0)
					continue;
				if (SM_GROW(cv, ccap, nc + 1, 8) != 0)
					goto nomem;
				cv[nc++] = (struct cov){ o->restored[q]->min_ms,
				    o->restored[q]->max_ms };
			}
		}
		if (nc > 1)
			qsort(cv, nc, sizeof(*cv), cov_cmp);
		why = member ? "its disk was replaced" : "not in the ring";
		for (uint32_t i = 0; i < nc && a <= b; i++) {
			if (cv[i].min > a && gap_add(&g, &n, &cap, s, p->id,
			    p->zone, p->incarnation, why, a,
			    SM_MIN(b, cv[i].min - 1)) != 0)
				goto nomem;
			if (cv[i].max >= a) {
				if (cv[i].max == INT64_MAX)
					a = INT64_MAX;
				else
					a = cv[i].max + 1;
			}
			if (a == INT64_MAX)
				break;
		}
		if (a <= b && a != INT64_MAX && gap_add(&g, &n, &cap, s, p->id,
		    p->zone, p->incarnation, why, a, b) != 0)
			goto nomem;
	}
	sm_free(cv);
	sm_free(ev);
	*out = g;
	*nout = n;
	return (0);
nomem:
	sm_free(cv);
	sm_free(ev);
	sm_free(g);
	return (SM_ENOMEM);
}

uint32_t
qry_gaps_units(const struct sm_ring_snap *s, const uint8_t *lost,
    const struct qry_gap *g, uint32_t n, char *why, size_t whylen)
{
	char (*keys)[128] = NULL;
	uint32_t nbase = 0, best = 0, best_at = UINT32_MAX, nkeys;

	if ((keys = sm_malloc((size_t)(s->n + n + 1) * sizeof(*keys))) ==
	    NULL) {
		/* No memory to judge: every gap counts on its own. */
		return (sm_ring_read_units(s, lost) + n);
	}
	for (uint32_t i = 0; i < s->n; i++) {
		char k[128];
		uint32_t j;

		if (!lost[i])
			continue;
		unit_key(s, s->id[i] != NULL ? s->id[i] : s->m[i]->url,
		    s->zone[i], k, sizeof(k));
		for (j = 0; j < nbase && strcmp(keys[j], k) != 0; j++)
			;
		if (j == nbase)
			memcpy(keys[nbase++], k, sizeof(k));
	}
	best = nbase;
	/* The count is largest at some gap's start. */
	for (uint32_t i = 0; i < n; i++) {
		nkeys = nbase;
		for (uint32_t j = 0; j < n; j++) {
			uint32_t k;

			if (g[j].from > g[i].from || g[j].to < g[i].from)
				continue;
			for (k = 0; k < nkeys && strcmp(keys[k], g[j].key) != 0;
			    k++)
				;
			if (k == nkeys)
				memcpy(keys[nkeys++], g[j].key,
				    sizeof(keys[0]));
		}
		if (nkeys > best) {
			best = nkeys;
			best_at = i;
		}
	}
	if (why != NULL && whylen > 0) {
		size_t off = 0;

		why[0] = '\0';
		if (best_at != UINT32_MAX) {
			char ts[32];

			off = (size_t)snprintf(why, whylen, "data from %s is "
			    "missing from", sm_time_utc(g[best_at].from, ts,
			    sizeof(ts)));
			for (uint32_t j = 0; j < n && off < whylen; j++) {
				if (g[j].from > g[best_at].from ||
				    g[j].to < g[best_at].from)
					continue;
				off += (size_t)snprintf(why + off, whylen - off,
				    " %s;", g[j].who);
			}
			for (uint32_t i = 0; i < s->n && off < whylen; i++)
				if (lost[i])
					off += (size_t)snprintf(why + off,
					    whylen - off, " %s (down);",
					    s->id[i] != NULL ? s->id[i] :
					    s->m[i]->url);
		}
	}
	sm_free(keys);
	return (best);
}
