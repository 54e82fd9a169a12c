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
 *      are given whole to one of them, spread by fingerprint over the
 *      local ones (below) when any agrees.
 *   3. Series on which they disagree get a second Stats round for their
 *      per-bucket counts and the hashes of each bucket's upload ids
 *      (StatsRequest.ids); each bucket goes to a target holding every
 *      upload of the union (the one that merged the most, ties to a local
 *      one, then spread by time), else to an exact combination of targets
 *      (common/combo.h: A + B, A + B - C; a subtracted target gets the
 *      bucket in its pick's `neg` and negates it), else the plan fails
 *      with SM_EUNAVAIL saying so (plan_buckets).  A bucket whose ids some target cannot
 *      give goes to the one that merged the most.
 *   4. Each target's merge or series request carries its picks
 *      (smolder.v1.Select.picks); a target with none is not asked.
 *
 * What the plan counted on may also leave a target before the read:
 * local retention drops an ingester's shipped blocks, whose buckets the
 * plan took from it (local first, below); a store-gateway drops a
 * source's blocks once a compactor fold, a source the Sources round may
 * not have listed, stands for them.  Each target's select carries the
 * drop epoch its Stats answer reported (Select.drop_checked;
 * ingester/db.h, ing_db_drop_epoch); a target whose epoch moved since
 * refuses the read the same way, and the new plan (with a new Sources
 * round) takes those buckets from where they are now.
 *
 * A combination is exact for the uploads this plan saw only: one that
 * lands on a member before the read (a write; a hint delivered to a
 * replica that was down) would count twice, or not at all.  So the picks
 * of a combined bucket carry the count each member held there
 * (Pick.count, neg_count); the member refuses the read with SM_EAGAIN
 * when its count differs afterwards (ingester/db.h, ing_db_picks_check)
 * and the query is planned again (fanout.c: no target is excluded for
 * it).  A bucket one target holds whole is not checked: what lands on it
 * meanwhile is newer than the plan and counted once.
 *
 * Complete when, for every bucket, some answering replica or combination
 * of replicas saw every acknowledged upload of that bucket: true with one
 * replica down, since a write acknowledged by a quorum of RF is on a
 * majority, and across ring changes, where a replica that left took some
 * of a bucket's uploads and one that joined has only the later ones.
 * Replicas that agree in the first round by count and count digest but
 * hold different uploads (each missed a different one, and the one that
 * had both is gone) are not seen: the distributors' hints make them whole
 * (distributor/hints.h; docs/reliability.md §4.4).
 *
 * RF 1 (every write on one ingester) and single-target fans need no plan:
 * summing all answers is exact.
 *
 * Local first.  Where an ingester and a store-gateway's source hold the
 * same uploads (a block an ingester shipped and still keeps), either is
 * exact; the ingester is picked (qry_plan_io.nlocal): it reads its own
 * disk and head, where the gateway reads data parts from the bucket by
 * ranged GET.  So the recent window, which ingesters keep
 * (-ingester.local-retention), is read from ingesters and what only the
 * bucket holds from the gateways -- the querier's time split, decided
 * per bucket by what each target holds rather than by an age, so a
 * source whose ingester left or lost its disk is read from the bucket
 * whatever its age.
 *
 * The plan is its own state (struct qry_plan, qry_int.h) and reaches the
 * ingesters only through a qry_plan_io round function: the engine wires
 * it to a fan (engine.c), plan_test.c to a fake ingester set, so lost
 * replicas, divergent replicas and RF 1 are tested without processes.
 */
#include "qry_int.h"

#include <pthread.h>
#include <string.h>

#include "common/combo.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/metrics.h"

static struct sm_metric *m_plans, *m_divergent, *m_combined, *m_unresolved;

static const struct sm_metric_def plan_metric_defs[] = {
	{ &m_plans, SM_METRIC_COUNTER, "smolder_querier_dedup_plans_total",
	    "Queries whose replicas were de-duplicated with a stats plan.",
	    NULL, NULL, 0 },
	{ &m_divergent, SM_METRIC_COUNTER,
	    "smolder_querier_divergent_series_total", "Series on which "
	    "replicas disagreed (one missed writes) and were picked bucket by "
	    "bucket.", NULL, NULL, 0 },
	{ &m_combined, SM_METRIC_COUNTER,
	    "smolder_querier_combined_buckets_total", "Buckets no replica "
	    "held whole, answered exactly by a combination of replicas (A + "
	    "B, A + B - C) from their uploads' ids.", NULL, NULL, 0 },
	{ &m_unresolved, SM_METRIC_COUNTER,
	    "smolder_querier_unresolved_buckets_total", "Buckets no replica "
	    "nor exact combination of replicas held whole: their queries "
	    "answered 503.", NULL, NULL, 0 },
};

static struct sm_metric_set plan_metric_set = SM_METRIC_SET(plan_metric_defs);

/* One target's stat of one series. */
struct plan_ent {
	uint64_t fp;
	uint32_t target;
	uint64_t profiles, digest;
	const Smolder__V1__SeriesStat *st;
};

SM_CMP_FN2(ent_cmp, struct plan_ent, fp, target)

static int
pick_cmp(const void *a, const void *b)
{
	const Smolder__V1__Pick *x = *(Smolder__V1__Pick *const *)a;
	const Smolder__V1__Pick *y = *(Smolder__V1__Pick *const *)b;

	return (SM_CMP(x->fp, y->fp));
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

/* A pick under construction: its added and subtracted bucket lists, and
 * the counts checked in each (Pick.count, neg_count; 0: not checked),
 * kept as long as the lists and dropped by pick_b_done when all are 0. */
struct pick_b {
	Smolder__V1__Pick *pk;
	uint32_t cap, ncap;
	bool checked;
};

static int
pick_time(struct sm_arena *a, struct plan_tgt *tg, uint64_t fp,
    struct pick_b *pb, int64_t t, bool neg, uint32_t check)
{
	int64_t **v;
	uint32_t **c;
	size_t *n, *nc;
	uint32_t *cap;

	if (pb->pk == NULL && pick_add(a, tg, fp, &pb->pk) != 0)
		return (SM_ENOMEM);
	v = neg ? &pb->pk->neg : &pb->pk->t;
	n = neg ? &pb->pk->n_neg : &pb->pk->n_t;
	c = neg ? &pb->pk->neg_count : &pb->pk->count;
	nc = neg ? &pb->pk->n_neg_count : &pb->pk->n_count;
	cap = neg ? &pb->ncap : &pb->cap;
	if (*n == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 16;
		int64_t *nv = sm_arena_grow(a, *v, *n, ncap, sizeof(*nv));
		uint32_t *cv = sm_arena_grow(a, *c, *n, ncap, sizeof(*cv));

		if (nv == NULL || cv == NULL)
			return (SM_ENOMEM);
		*v = nv;
		*c = cv;
		*cap = ncap;
	}
	(*c)[*n] = check;
	(*v)[(*n)++] = t;
	*nc = *n;
	pb->checked |= check != 0;
	return (0);
}

/* A pick with no checked bucket carries no counts. */
static void
pick_b_done(struct pick_b *pb)
{
	if (pb->pk != NULL && !pb->checked) {
		pb->pk->n_count = pb->pk->n_neg_count = 0;
		pb->pk->count = pb->pk->neg_count = NULL;
	}
}

/* Entry i's ids of its bucket at position pos: *ids and *n, false when
 * they are not known (an older ingester, a tier bucket, a block from
 * before upload records). */
static bool
bucket_ids(const struct plan_ent *e, size_t pos, const size_t *id_off,
    const uint64_t **ids, uint32_t *n)
{
	const Smolder__V1__SeriesStat *st = e->st;

	if (pos >= st->n_nids || st->nids[pos] == UINT32_MAX ||
	    id_off[pos] + st->nids[pos] > st->n_ids)
		return (false);
	*ids = st->ids + id_off[pos];
	*n = st->nids[pos];
	return (true);
}

/*
 * Bucket by bucket for one divergent series: entries ent[0..n) (one per
 * target, from the detail round, with the ids of each bucket's uploads).
 * For each bucket: the union of the targets' uploads, and for each
 * upload the targets holding it; a target holding all of them is taken
 * alone (the one that merged the most, ties to a local one, then spread
 * by time); when none does, an exact integer combination of targets
 * (common/combo.h: A + B, A + B - C); when none exists, the bucket is
 * unresolved (st->unresolved and the first one's place): the query will
 * say so rather than answer short.  A bucket whose ids some target does
 * not know is taken from the target that merged the most, as before ids
 * were kept.
 */
struct plan_st {
	size_t unresolved, combined, unverified;
	uint64_t fp;                   /* the first unresolved bucket */
	int64_t t;
	uint32_t nu;
};

#define PLAN_IDS_MAX 4096            /* uploads of one bucket compared */

static int
plan_buckets(struct sm_arena *a, struct plan_tgt *tg,
    const struct plan_ent *ent, size_t n, uint32_t nlocal,
    struct plan_st *ps)
{
	size_t pos[32], *idoff[32];
	struct pick_b pb[32];
	uint64_t *u = NULL;
	uint32_t *masks = NULL;
	int rv = 0;

	if (n > SM_ARRAY_LEN(pos))
		n = SM_ARRAY_LEN(pos);
	for (size_t i = 0; i < n; i++) {
		const Smolder__V1__SeriesStat *st = ent[i].st;
		size_t off = 0;

		pos[i] = 0;
		pb[i] = (struct pick_b){ 0 };
		/* where each bucket's ids start */
		if ((idoff[i] = sm_arena_alloc(a, (st->n_t + 1) *
		    sizeof(size_t))) == NULL)
			return (SM_ENOMEM);
		for (size_t k = 0; k < st->n_t; k++) {
			idoff[i][k] = off;
			if (k < st->n_nids && st->nids[k] != UINT32_MAX)
				off += st->nids[k];
		}
	}
	if ((u = sm_malloc(PLAN_IDS_MAX * sizeof(*u))) == NULL ||
	    (masks = sm_malloc(PLAN_IDS_MAX * sizeof(*masks))) == NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	for (;;) {
		int64_t t = INT64_MAX;
		uint32_t best = 0, nbest = 0, nu = 0, here = 0, pos_m, neg_m;
		uint32_t cnt[32] = { 0 };
		size_t win = 0;
		bool known = true, combo;
		int prefer = -1;

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
			here |= 1u << i;
			c = pos[i] < ent[i].st->n_count ?
			    ent[i].st->count[pos[i]] : 0;
			cnt[i] = c;
			if (nbest == 0 || c > best || (c == best &&
			    ent[i].target < nlocal && ent[win].target >=
			    nlocal)) {
				best = c;
				nbest = 1;
				win = i;
			} else if (c == best && (ent[i].target < nlocal) ==
			    (ent[win].target < nlocal)) {
				/* Spread ties: the k-th tied by hash of t. */
				nbest++;
				if (sm_hash_u64((uint64_t)t ^ ent[i].fp) %
				    nbest == 0)
					win = i;
			}
		}
		/* the union of the uploads, and who holds each */
		for (size_t i = 0; i < n && known; i++) {
			const uint64_t *ids;
			uint32_t ni;

			if (!((here >> i) & 1))
				continue;
			if (!bucket_ids(&ent[i], pos[i], idoff[i], &ids, &ni)) {
				known = false;
				break;
			}
			for (uint32_t k = 0; k < ni; k++) {
				uint32_t z;

				for (z = 0; z < nu && u[z] != ids[k]; z++)
					;
				if (z == nu) {
					if (nu == PLAN_IDS_MAX) {
						known = false;
						break;
					}
					u[nu] = ids[k];
					masks[nu++] = 0;
				}
				masks[z] |= 1u << i;
			}
		}
		pos_m = 1u << win;
		neg_m = 0;
		if (!known) {
			ps->unverified++;
		} else {
			prefer = (int)win;
			if (nu > 0 && !sm_combo_solve(masks, nu, prefer, &pos_m,
			    &neg_m)) {
				if (ps->unresolved++ == 0) {
					ps->fp = ent[0].fp;
					ps->t = t;
					ps->nu = nu;
				}
				pos_m = 1u << win;   /* planned, not used */
				neg_m = 0;
			}
		}
		/* a combination: more than one target, or one subtracted */
		combo = (pos_m & (pos_m - 1)) != 0 || neg_m != 0;
		ps->combined += combo;
		for (size_t i = 0; i < n; i++) {
			if ((here >> i) & 1)
				pos[i]++;
		}
		/*
		 * A combination is exact for the uploads seen here only: each
		 * of its targets is told how many it held, and refuses the
		 * read if that changed meanwhile (rpc.proto, Pick.count).  A
		 * bucket one target holds whole is not checked: what lands
		 * on it meanwhile is newer, and counted once.
		 */
		for (size_t i = 0; i < n; i++) {
			bool neg = (neg_m >> i) & 1;

			if (!((pos_m >> i) & 1) && !neg)
				continue;
			if ((rv = pick_time(a, &tg[ent[i].target], ent[i].fp,
			    &pb[i], t, neg, combo && cnt[i] > 0 ? cnt[i] :
			    0)) != 0)
				goto out;
		}
	}
	for (size_t i = 0; i < n; i++)
		pick_b_done(&pb[i]);
out:
	sm_free(u);
	sm_free(masks);
	return (rv);
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

/* Whether each of the n targets' picks are sorted by fp, every fp once:
 * what the ingester takes (ingester/query.c refuses others). */
static bool
picks_sorted(const struct plan_tgt *tg, uint32_t n)
{
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t i = 1; i < tg[t].n; i++)
			if (tg[t].v[i - 1]->fp >= tg[t].v[i]->fp)
				return (false);
	return (true);
}

/*
 * 2. Series on which every target agrees go whole to one of them; the
 * others' fps go to *divp (arena-owned, increasing), *ndivp of them.
 * Sets p->nseries.  0 or SM_ENOMEM.
 */
static int
plan_agree(struct qry_plan *p, struct plan_tgt *tg, const struct plan_ent *e,
    size_t ne, uint32_t nlocal, uint64_t **divp, size_t *ndivp)
{
	struct sm_arena *a = p->arena;
	uint64_t *div = NULL;
	size_t ndiv = 0;

	p->nseries = 0;
	for (size_t i = 0; i < ne;) {
		size_t j = i + 1;
		bool same = true;

		size_t nl = e[i].target < nlocal;

		for (; j < ne && e[j].fp == e[i].fp; j++) {
			same &= e[j].profiles == e[i].profiles &&
			    e[j].digest == e[i].digest;
			nl += e[j].target < nlocal;
		}
		p->nseries++;
		if (same) {
			/* entries are sorted by target: the local ones
			 * come first */
			const struct plan_ent *w = &e[i + (e[i].fp >> 17) %
			    (nl > 0 ? nl : j - i)];

			if (pick_add(a, &tg[w->target], w->fp, NULL) != 0)
				return (SM_ENOMEM);
		} else {
			if (div == NULL && (div = sm_arena_alloc(a, ne *
			    sizeof(*div))) == NULL)
				return (SM_ENOMEM);
			div[ndiv++] = e[i].fp;
		}
		i = j;
	}
	*divp = div;
	*ndivp = ndiv;
	return (0);
}

/*
 * 3. The divergent series div[0..ndiv) (increasing): a second Stats round,
 * to the targets holding any of them, for their per-bucket counts and
 * upload ids, then bucket by bucket (plan_buckets) into tg and ps.  *ep
 * (the first round's entries, freed here) and *nep become the second
 * round's.  0, or an error set in err (the round's, SM_EAGAIN included).
 */
static int
plan_divergent(struct qry_plan *p, const struct qry_plan_io *io,
    const Smolder__V1__Select *sel, const Smolder__V1__Response **ans,
    struct plan_tgt *tg, struct plan_ent **ep, size_t *nep,
    uint64_t *div, size_t ndiv, struct plan_st *ps, struct sm_err *err)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__StatsRequest sr = SMOLDER__V1__STATS_REQUEST__INIT;
	Smolder__V1__Request **reqs;
	Smolder__V1__Pick **dpicks;
	Smolder__V1__Select dsel;
	struct sm_arena *a = p->arena;
	struct plan_ent *e = *ep;
	uint8_t *ask;
	int rv;

	for (size_t d = 1; d < ndiv; d++)
		SM_ASSERT(div[d - 1] < div[d]);
	ask = sm_arena_calloc(a, io->n, 1);
	reqs = sm_arena_calloc(a, io->n, sizeof(*reqs));
	dpicks = sm_arena_alloc(a, ndiv * sizeof(*dpicks));
	if (ask == NULL || reqs == NULL || dpicks == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0, d = 0; i < *nep; i++) {
		while (d < ndiv && div[d] < e[i].fp)
			d++;
		if (d < ndiv && div[d] == e[i].fp)
			ask[e[i].target] = 1;
	}
	for (size_t d = 0; d < ndiv; d++) {
		if ((dpicks[d] = sm_arena_alloc(a, sizeof(**dpicks))) == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		smolder__v1__pick__init(dpicks[d]);
		dpicks[d]->fp = div[d];
	}
	dsel = *sel;
	dsel.picked = 1;
	dsel.picks = dpicks;
	dsel.n_picks = ndiv;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_STATS;
	req.stats = &sr;
	sr.select = &dsel;
	sr.detail = div;
	sr.n_detail = ndiv;
	sr.ids = 1;
	for (uint32_t i = 0; i < io->n; i++)
		reqs[i] = ask[i] ? &req : NULL;
	sm_free(e);
	*ep = NULL;
	/* The first round's answers are freed by this one. */
	if ((rv = io->round(io->arg, reqs, io->n, ask, ans, err)) != 0)
		return (rv);
	if (plan_entries(ans, io->n, ep, nep) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	e = *ep;
	for (size_t i = 0; i < *nep;) {
		size_t j = i + 1;

		while (j < *nep && e[j].fp == e[i].fp)
			j++;
		if (plan_buckets(a, tg, &e[i], j - i, io->nlocal, ps) != 0)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		i = j;
	}
	/* Picks must be sorted by fp per target: the agreeing ones were
	 * added in fp order, the divergent ones after them. */
	for (uint32_t t = 0; t < io->n; t++)
		if (tg[t].n > 1)
			qsort(tg[t].v, tg[t].n, sizeof(*tg[t].v), pick_cmp);
	return (0);
}

/* The plan's metrics and log line; SM_EUNAVAIL naming the first bucket
 * no target nor combination holds whole, if any.  Else 0. */
static int
plan_report(struct qry_plan *p, const struct qry_plan_io *io, size_t ndiv,
    const struct plan_st *ps, struct sm_err *err)
{
	char ts[32];

	p->ndivergent = ndiv;
	p->ncombined = ps->combined;
	p->nunresolved = ps->unresolved;
	sm_debug("querier", "plan\ttargets=%u series=%zu divergent=%zu "
	    "combined=%zu unverified=%zu unresolved=%zu", io->n, p->nseries,
	    ndiv, ps->combined, ps->unverified, ps->unresolved);
	sm_counter_inc(sm_metric_child0(m_plans));
	sm_counter_add(sm_metric_child0(m_divergent), ndiv);
	sm_counter_add(sm_metric_child0(m_combined), ps->combined);
	if (ps->unresolved == 0)
		return (0);
	sm_counter_add(sm_metric_child0(m_unresolved), ps->unresolved);
	return (sm_err_set(err, SM_EUNAVAIL, "the answer would be "
	    "incomplete: the replicas diverge and neither one of them "
	    "nor an exact combination holds every upload of %zu "
	    "bucket(s), the first of series %016llx at %s (%u "
	    "uploads); it will be whole once the compactor folds that "
	    "hour in the bucket, or the replicas' hints are delivered",
	    ps->unresolved, (unsigned long long)ps->fp,
	    sm_time_utc(ps->t, ts, sizeof(ts)), ps->nu));
}

/* 4. Each target's select: the query's with the target's picks, NULL
 * for a target with none.  0 or SM_ENOMEM. */
static int
plan_selects(struct qry_plan *p, const Smolder__V1__Select *sel,
    const struct plan_tgt *tg)
{
	struct sm_arena *a = p->arena;

	if ((p->sel = sm_arena_calloc(a, p->n, sizeof(*p->sel))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t t = 0; t < p->n; t++) {
		Smolder__V1__Select *s;

		if (tg[t].n == 0)
			continue;
		if ((s = sm_arena_alloc(a, sizeof(*s))) == NULL)
			return (SM_ENOMEM);
		*s = *sel;
		s->picked = 1;
		s->picks = tg[t].v;
		s->n_picks = tg[t].n;
		/* what the target held may not shrink before the read */
		s->drop_checked = 1;
		s->drop_epoch = p->drop_epoch[t];
		p->sel[t] = s;
	}
	return (0);
}

int
qry_plan_make(struct qry_plan *p, const struct qry_plan_io *io,
    const Smolder__V1__Select *sel, struct sm_err *err)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__StatsRequest sr = SMOLDER__V1__STATS_REQUEST__INIT;
	Smolder__V1__Request *one = &req;
	const Smolder__V1__Response **ans;
	struct plan_ent *e = NULL;
	struct plan_tgt *tg = NULL;
	uint64_t *div = NULL;
	struct plan_st ps = { 0 };
	size_t ne = 0, ndiv = 0;
	struct sm_arena *a;
	int rv;

	qry_plan_fini(p);
	p->base = sel;
	p->n = io->n;
	if (io->rf <= 1 || io->n <= 1)
		return (0);
	sm_metrics_register_once(&plan_metric_set);
	if ((p->arena = sm_arena_create(0)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	a = p->arena;
	if ((ans = sm_arena_calloc(a, io->n, sizeof(*ans))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	/* 1. The stats round. */
	sr.select = (Smolder__V1__Select *)sel;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_STATS;
	req.stats = &sr;
	if ((rv = io->round(io->arg, &one, 1, NULL, ans, err)) != 0)
		return (rv);
	if ((p->drop_epoch = sm_arena_calloc(a, io->n,
	    sizeof(*p->drop_epoch))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < io->n; i++)
		if (ans[i] != NULL && ans[i]->result_case ==
		    SMOLDER__V1__RESPONSE__RESULT_STATS)
			p->drop_epoch[i] = ans[i]->stats->drop_epoch;
	tg = sm_arena_calloc(a, io->n, sizeof(*tg));
	if (tg == NULL || plan_entries(ans, io->n, &e, &ne) != 0 ||
	    plan_agree(p, tg, e, ne, io->nlocal, &div, &ndiv) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	SM_ASSERT(picks_sorted(tg, io->n));
	if (ndiv > 0 && (rv = plan_divergent(p, io, sel, ans, tg, &e, &ne,
	    div, ndiv, &ps, err)) != 0)
		goto out;
	if ((rv = plan_report(p, io, ndiv, &ps, err)) != 0)
		goto out;
	if (plan_selects(p, sel, tg) != 0)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	if (rv != 0)
		p->sel = NULL;
	sm_free(e);
	return (rv);
}

/* --- narrowing to buckets ------------------------------------------------- */

/* The times of w[lo..hi) that are also in v[0..n) (both sorted), into
 * out, with their checked counts (vc, parallel to v, or NULL) into outc;
 * how many. */
static size_t
times_and(const struct qry_bucket *w, size_t lo, size_t hi, const int64_t *v,
    const uint32_t *vc, size_t n, int64_t *out, uint32_t *outc)
{
	size_t k = 0, j = 0;

	for (size_t i = lo; i < hi; i++) {
		while (j < n && v[j] < w[i].t)
			j++;
		if (j < n && v[j] == w[i].t) {
			outc[k] = vc != NULL ? vc[j] : 0;
			out[k++] = w[i].t;
		}
	}
	return (k);
}

int
qry_plan_restrict(struct qry_plan *p, const struct qry_bucket *w, size_t nw)
{
	/* no per-target selects: every target is asked the base (RF 1, one
	 * target), and summing their answers is exact */
	bool all_base = p->sel == NULL;

	if (p->arena == NULL && (p->arena = sm_arena_create(0)) == NULL)
		return (SM_ENOMEM);
	if (all_base && (p->sel = sm_arena_calloc(p->arena, SM_MAX(p->n, 1),
	    sizeof(*p->sel))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < p->n; i++) {
		const Smolder__V1__Select *old = all_base ? p->base : p->sel[i];
		Smolder__V1__Select *ns;
		Smolder__V1__Pick **pk;
		size_t npk = 0;

		if (old == NULL)
			continue;
		SM_ASSERT(old->n_resolution == 0);
		if ((ns = sm_arena_alloc(p->arena, sizeof(*ns))) == NULL ||
		    (pk = sm_arena_calloc(p->arena, SM_MAX(nw, 1),
		    sizeof(*pk))) == NULL)
			return (SM_ENOMEM);
		/* w's series, one at a time, against the target's pick */
		for (size_t lo = 0, hi; lo < nw; lo = hi) {
			const Smolder__V1__Pick *op = NULL;
			Smolder__V1__Pick *np;
			int64_t *t, *neg;
			uint32_t *tc, *negc;
			size_t nt, nneg;

			for (hi = lo + 1; hi < nw && w[hi].fp == w[lo].fp; hi++)
				;
			if (old->picked) {
				size_t a = 0, b = old->n_picks;

				while (a < b) {
					size_t m = a + (b - a) / 2;

					if (old->picks[m]->fp < w[lo].fp)
						a = m + 1;
					else
						b = m;
				}
				if (a == old->n_picks ||
				    old->picks[a]->fp != w[lo].fp)
					continue;   /* not this target's */
				op = old->picks[a];
			}
			if ((np = sm_arena_alloc(p->arena, sizeof(*np))) == NULL ||
			    (t = sm_arena_alloc(p->arena, (hi - lo) *
			    sizeof(*t))) == NULL || (neg = sm_arena_alloc(
			    p->arena, (hi - lo) * sizeof(*neg))) == NULL ||
			    (tc = sm_arena_alloc(p->arena, (hi - lo) *
			    sizeof(*tc))) == NULL || (negc = sm_arena_alloc(
			    p->arena, (hi - lo) * sizeof(*negc))) == NULL)
				return (SM_ENOMEM);
			smolder__v1__pick__init(np);
			if (op == NULL || (op->n_t == 0 && op->n_neg == 0)) {
				/* every bucket of the series: the wanted */
				for (size_t k = lo; k < hi; k++)
					t[k - lo] = w[k].t;
				nt = hi - lo;
				nneg = 0;
			} else {
				nt = times_and(w, lo, hi, op->t, op->n_count ?
				    op->count : NULL, op->n_t, t, tc);
				nneg = times_and(w, lo, hi, op->neg,
				    op->n_neg_count ? op->neg_count : NULL,
				    op->n_neg, neg, negc);
				if (nt == 0 && nneg == 0)
					continue;   /* (empty would mean all) */
				/* the checked counts of the buckets kept */
				if (op->n_count != 0 || op->n_neg_count != 0) {
					np->count = tc;
					np->n_count = nt;
					np->neg_count = negc;
					np->n_neg_count = nneg;
				}
			}
			np->fp = w[lo].fp;
			np->t = t;
			np->n_t = nt;
			np->neg = neg;
			np->n_neg = nneg;
			pk[npk++] = np;
		}
		*ns = *old;
		ns->picked = 1;
		ns->picks = pk;
		ns->n_picks = npk;
		p->sel[i] = npk > 0 ? ns : NULL;
	}
	return (0);
}
