/*
 * plan.c -- replica de-duplication (docs/architecture.md §4): which ingester contributes
 * which series and buckets, so a series counts once although RF ingesters
 * hold it, and stays complete when a replica is down or missed writes.
 *
 * Writes reach each series' replicas with one profile id, and a bucket of
 * a series counts how many uploads it merged.  Replicas that got the same
 * uploads hold the same (bucket, count) pairs; a replica that missed some
 * holds fewer.  So:
 *
 *   1. Stats round: every target reports, per selected series, its
 *      profile count in range and a digest linear in the per-bucket counts
 *      (ingester/query.c), cheap: block indexes and heads only, no stacks.
 *   2. Series on which all reporting targets agree (same count and digest)
 *      are given whole to one of them, spread by fingerprint.
 *   3. Series on which they disagree get a second Stats round for their
 *      per-bucket counts; each bucket goes to the target that merged the
 *      most uploads into it (ties spread by time).
 *   4. Each target's merge or series request carries its picks
 *      (smolder.v1.Select.picks); a target with none is not asked.
 *
 * Complete when, for every bucket, some answering replica saw every
 * acknowledged upload of that bucket: true with one replica down, since a
 * write acknowledged by a quorum of RF is on a majority, and a replica
 * that missed a write while down has a smaller count.  Two replicas each
 * missing a different upload of one bucket (a rolling restart) are made
 * whole by the distributors' hints (distributor/hints.h); until those are
 * delivered, with the third replica down, such a bucket is short
 * (docs/reliability.md §4.4).
 *
 * RF 1 (every write on one ingester) and single-target fans need no plan:
 * summing all answers is exact.
 *
 * The plan is its own state (struct qry_plan, qry_int.h) and reaches the
 * ingesters only through a qry_plan_io round function: the engine wires
 * it to a fan (engine.c), plan_test.c to a fake ingester set, so lost
 * replicas, divergent replicas and RF 1 are tested without processes.
 */
#include "qry_int.h"

#include <pthread.h>
#include <string.h>

#include "common/hash.h"
#include "common/log.h"
#include "common/metrics.h"

static struct sm_metric *m_plans, *m_divergent;
static pthread_once_t plan_metrics_once = PTHREAD_ONCE_INIT;

static void
plan_metrics_register(void)
{
	m_plans = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_querier_dedup_plans_total", "Queries whose replicas were "
	    "de-duplicated with a stats plan.", NULL, NULL, 0);
	m_divergent = sm_metric_register(SM_METRIC_COUNTER,
	    "smolder_querier_divergent_series_total", "Series on which "
	    "replicas disagreed (one missed writes) and were picked bucket by "
	    "bucket.", NULL, NULL, 0);
}

/* One target's stat of one series. */
struct plan_ent {
	uint64_t fp;
	uint32_t target;
	uint64_t profiles, digest;
	const Smolder__V1__SeriesStat *st;
};

static int
ent_cmp(const void *a, const void *b)
{
	const struct plan_ent *x = a, *y = b;

	if (x->fp != y->fp)
		return (x->fp < y->fp ? -1 : 1);
	return (x->target < y->target ? -1 : x->target > y->target);
}

static int
pick_cmp(const void *a, const void *b)
{
	const Smolder__V1__Pick *x = *(Smolder__V1__Pick *const *)a;
	const Smolder__V1__Pick *y = *(Smolder__V1__Pick *const *)b;

	return (x->fp < y->fp ? -1 : x->fp > y->fp);
}

/* Per-target picks under construction. */
struct plan_tgt {
	Smolder__V1__Pick **v;
	uint32_t n, cap;
};

static int
pick_add(struct sm_arena *a, struct plan_tgt *t, uint64_t fp,
    Smolder__V1__Pick **out)
{
	Smolder__V1__Pick *p;

	if (t->n == t->cap) {
		uint32_t ncap = t->cap ? t->cap * 2 : 64;
		Smolder__V1__Pick **nv = sm_arena_grow(a, t->v, t->n, ncap,
		    sizeof(*nv));

		if (nv == NULL)
			return (SM_ENOMEM);
		t->v = nv;
		t->cap = ncap;
	}
	if ((p = sm_arena_alloc(a, sizeof(*p))) == NULL)
		return (SM_ENOMEM);
	smolder__v1__pick__init(p);
	p->fp = fp;
	t->v[t->n++] = p;
	if (out != NULL)
		*out = p;
	return (0);
}

/* Gather a round's stats answers as entries sorted by (fp, target). */
static int
plan_entries(const Smolder__V1__Response **ans, uint32_t n,
    struct plan_ent **out, size_t *nout)
{
	struct plan_ent *e;
	size_t cnt = 0, k = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (ans[i] != NULL && ans[i]->result_case ==
		    SMOLDER__V1__RESPONSE__RESULT_STATS)
			cnt += ans[i]->stats->n_series;
	}
	if ((e = sm_malloc(SM_MAX(cnt, 1) * sizeof(*e))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < n; i++) {
		if (ans[i] == NULL || ans[i]->result_case !=
		    SMOLDER__V1__RESPONSE__RESULT_STATS)
			continue;
		for (size_t j = 0; j < ans[i]->stats->n_series; j++) {
			const Smolder__V1__SeriesStat *st =
			    ans[i]->stats->series[j];

			e[k++] = (struct plan_ent){ st->fp, i, st->profiles,
			    st->digest, st };
		}
	}
	if (k > 1)
		qsort(e, k, sizeof(*e), ent_cmp);
	*out = e;
	*nout = k;
	return (0);
}

/*
 * Bucket by bucket for one divergent series: entries ent[0..n) (one per
 * target, from the detail round).  Each bucket goes to the target with
 * the largest count.
 */
static int
plan_buckets(struct sm_arena *a, struct plan_tgt *tg,
    const struct plan_ent *ent, size_t n)
{
	size_t pos[64];
	Smolder__V1__Pick *pk[64];
	uint32_t cap[64];

	if (n > SM_ARRAY_LEN(pos))
		n = SM_ARRAY_LEN(pos);
	for (size_t i = 0; i < n; i++) {
		pos[i] = 0;
		pk[i] = NULL;
		cap[i] = 0;
	}
	for (;;) {
		int64_t t = INT64_MAX;
		uint32_t best = 0, nbest = 0;
		size_t win = 0;

		for (size_t i = 0; i < n; i++) {
			if (pos[i] < ent[i].st->n_t && ent[i].st->t[pos[i]] < t)
				t = ent[i].st->t[pos[i]];
		}
		if (t == INT64_MAX)
			break;
		for (size_t i = 0; i < n; i++) {
			uint32_t c;

			if (pos[i] >= ent[i].st->n_t || ent[i].st->t[pos[i]] != t)
				continue;
			c = pos[i] < ent[i].st->n_count ?
			    ent[i].st->count[pos[i]] : 0;
			if (nbest == 0 || c > best) {
				best = c;
				nbest = 1;
				win = i;
			} else if (c == best) {
				/* Spread ties: the k-th tied by hash of t. */
				nbest++;
				if (sm_hash_u64((uint64_t)t ^ ent[i].fp) %
				    nbest == 0)
					win = i;
			}
		}
		for (size_t i = 0; i < n; i++) {
			if (pos[i] < ent[i].st->n_t && ent[i].st->t[pos[i]] == t)
				pos[i]++;
		}
		if (pk[win] == NULL && pick_add(a, &tg[ent[win].target],
		    ent[win].fp, &pk[win]) != 0)
			return (SM_ENOMEM);
		if (pk[win]->n_t == cap[win]) {
			uint32_t ncap = cap[win] ? cap[win] * 2 : 16;
			int64_t *nt = sm_arena_grow(a, pk[win]->t, pk[win]->n_t,
			    ncap, sizeof(*nt));

			if (nt == NULL)
				return (SM_ENOMEM);
			pk[win]->t = nt;
			cap[win] = ncap;
		}
		pk[win]->t[pk[win]->n_t++] = t;
	}
	return (0);
}

void
qry_plan_init(struct qry_plan *p)
{
	memset(p, 0, sizeof(*p));
}

void
qry_plan_fini(struct qry_plan *p)
{
	sm_arena_destroy(p->arena);
	memset(p, 0, sizeof(*p));
}

const Smolder__V1__Select *
qry_plan_select(const struct qry_plan *p, uint32_t i)
{
	SM_ASSERT(i < p->n);
	return (p->sel == NULL ? p->base : p->sel[i]);
}

const uint8_t *
qry_plan_must(const struct qry_plan *p, uint8_t *buf)
{
	for (uint32_t i = 0; i < p->n; i++)
		buf[i] = p->sel == NULL || (p->sel[i] != NULL &&
		    p->sel[i]->n_picks > 0);
	return (buf);
}

int
qry_plan_make(struct qry_plan *p, const struct qry_plan_io *io,
    const Smolder__V1__Select *sel, struct sm_err *err)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__StatsRequest sr = SMOLDER__V1__STATS_REQUEST__INIT;
	Smolder__V1__Request **reqs = NULL;
	const Smolder__V1__Response **ans;
	Smolder__V1__Select dsel;
	struct plan_ent *e = NULL;
	struct plan_tgt *tg = NULL;
	uint64_t *div = NULL;
	uint8_t *ask = NULL;
	Smolder__V1__Pick **dpicks = NULL;
	size_t ne = 0, ndiv = 0;
	struct sm_arena *a;
	int rv;

	qry_plan_fini(p);
	p->base = sel;
	p->n = io->n;
	if (io->rf <= 1 || io->n <= 1)
		return (0);
	pthread_once(&plan_metrics_once, plan_metrics_register);
	if ((p->arena = sm_arena_create(0)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	a = p->arena;
	if ((ans = sm_arena_calloc(a, io->n, sizeof(*ans))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	sr.select = (Smolder__V1__Select *)sel;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_STATS;
	req.stats = &sr;
	{
		Smolder__V1__Request *one = &req;

		if ((rv = io->round(io->arg, &one, 1, NULL, ans, err)) != 0)
			return (rv);
	}
	tg = sm_arena_calloc(a, io->n, sizeof(*tg));
	if (tg == NULL || (rv = plan_entries(ans, io->n, &e, &ne)) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	p->nseries = 0;
	/* 2. Agreeing series go whole to one target. */
	for (size_t i = 0; i < ne;) {
		size_t j = i + 1;
		bool same = true;

		for (; j < ne && e[j].fp == e[i].fp; j++)
			same &= e[j].profiles == e[i].profiles &&
			    e[j].digest == e[i].digest;
		p->nseries++;
		if (same) {
			const struct plan_ent *w = &e[i + (e[i].fp >> 17) %
			    (j - i)];

			if (pick_add(a, &tg[w->target], w->fp, NULL) != 0)
				goto oom;
		} else {
			if (div == NULL && (div = sm_arena_alloc(a, ne *
			    sizeof(*div))) == NULL)
				goto oom;
			div[ndiv++] = e[i].fp;
		}
		i = j;
	}
	/* 3. Divergent series: per-bucket counts, largest count wins. */
	if (ndiv > 0) {
		ask = sm_arena_calloc(a, io->n, 1);
		reqs = sm_arena_calloc(a, io->n, sizeof(*reqs));
		dpicks = sm_arena_alloc(a, ndiv * sizeof(*dpicks));
		if (ask == NULL || reqs == NULL || dpicks == NULL)
			goto oom;
		for (size_t i = 0, d = 0; i < ne; i++) {
			while (d < ndiv && div[d] < e[i].fp)
				d++;
			if (d < ndiv && div[d] == e[i].fp)
				ask[e[i].target] = 1;
		}
		for (size_t d = 0; d < ndiv; d++) {
			if ((dpicks[d] = sm_arena_alloc(a, sizeof(**dpicks))) ==
			    NULL)
				goto oom;
			smolder__v1__pick__init(dpicks[d]);
			dpicks[d]->fp = div[d];
		}
		dsel = *sel;
		dsel.picked = 1;
		dsel.picks = dpicks;
		dsel.n_picks = ndiv;
		sr.select = &dsel;
		sr.detail = div;
		sr.n_detail = ndiv;
		for (uint32_t i = 0; i < io->n; i++)
			reqs[i] = ask[i] ? &req : NULL;
		sm_free(e);
		e = NULL;
		/* The first round's answers are freed by this one. */
		if ((rv = io->round(io->arg, reqs, io->n, ask, ans, err)) != 0)
			goto out;
		if ((rv = plan_entries(ans, io->n, &e, &ne)) != 0)
			goto oom;
		for (size_t i = 0; i < ne;) {
			size_t j = i + 1;

			while (j < ne && e[j].fp == e[i].fp)
				j++;
			if ((rv = plan_buckets(a, tg, &e[i], j - i)) != 0)
				goto oom;
			i = j;
		}
		/* Picks must be sorted by fp per target: the agreeing ones
		 * were added in fp order, the divergent ones after them. */
		for (uint32_t t = 0; t < io->n; t++)
			if (tg[t].n > 1)
				qsort(tg[t].v, tg[t].n,
				    sizeof(*tg[t].v), pick_cmp);
	}
	p->ndivergent = ndiv;
	sm_debug("querier", "plan\ttargets=%u series=%zu divergent=%zu",
	    io->n, p->nseries, ndiv);
	sm_counter_inc(sm_metric_child0(m_plans));
	sm_counter_add(sm_metric_child0(m_divergent), ndiv);
	/* 4. Per-target selects. */
	if ((p->sel = sm_arena_calloc(a, io->n, sizeof(*p->sel))) == NULL)
		goto oom;
	for (uint32_t t = 0; t < io->n; t++) {
		Smolder__V1__Select *s;

		if (tg[t].n == 0)
			continue;
		if ((s = sm_arena_alloc(a, sizeof(*s))) == NULL)
			goto oom;
		*s = *sel;
		s->picked = 1;
		s->picks = tg[t].v;
		s->n_picks = tg[t].n;
		p->sel[t] = s;
	}
	rv = 0;
	goto out;
oom:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	p->sel = NULL;
out:
	sm_free(e);
	return (rv);
}
