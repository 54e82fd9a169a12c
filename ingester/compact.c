/*
 * compact.c -- downsampling tiers and raw block merges: the
 * planner, the job that builds one tier block, and the job that merges a
 * tenant's small raw blocks of one day into one.  db.h ("Downsampling
 * tiers") gives the design, block.h ("Tier blocks", "Merged raw blocks")
 * the meaning of the blocks' fields; db_int.h the rooms and the lock
 * order.
 *
 * Plan (ing_db_compact_plan).  Per tenant, under t->mu, copy the block
 * metas and take references to the heads; then, under each head's read
 * lock (never with t->mu), read the head's bucket range.  Windows are the
 * day-aligned windows that a raw block's [min_t, max_t) or a tier block's
 * window touches, ending at or before now and above its tenant's
 * retention floor.
 * Per (width w, window W): the raw blocks overlapping W, their largest gen
 * R (coverage gens, ing_block_cov_gen: a merged block counts as its
 * newest input); the tier blocks (w, W), the best of them B = largest
 * (cover_gen, gen).  Before a window's tier jobs, its merge job when one
 * is due (Merges, below).
 * Due when some raw block overlaps W and (no B, or B.cover_gen < R), and
 * no head has a bucket in W.  Every (w, W) tier block other than B is
 * superseded.
 *   Decisions: a head's range is [its smallest bucket start, its largest
 *   + bucket_ms): coarse (a head with one late bucket far back holds back
 *   the windows in between) but cheap and never wrong -- exactness never
 *   depends on it (cover_gen does that); it only avoids building a tier
 *   block that is stale at once.  Windows come from metas alone, without
 *   reading any index, so a window a raw block's range spans but where it
 *   has no bucket is planned too; if no raw block has a bucket there the
 *   run finds nothing to build (st->empty) and the planner will list it
 *   again: cheap (index reads only), and rare for continuous profiling.
 *   A block whose range spans more than ING_COMPACT_MAX_SPAN windows (a
 *   hostile timestamp) adds only its first and last windows: skipping
 *   windows is always safe, queries then read raw blocks.
 *
 * Run (ing_db_compact_run), under db->compact_mu (one job per db):
 *   1. under t->mu: copy the metas, cover_gen = (smallest gen of the
 *      current head and the heads being cut) - 1, head references;
 *   2. re-plan the one (w, W) as above; not due = a no-op (superseded
 *      blocks are still retired, step 6);
 *   3. inputs: the raw blocks with coverage gen <= cover_gen overlapping
 *      W (all of
 *      them are in the copy: a head's block is published in the same
 *      t->mu section that removes it from `cutting`);
 *   4. build, holding no db lock: a fresh ing_head (bucket_ms = w) is the
 *      builder.  Per input block: its tree and index through the store's
 *      cache, every series with a bucket in W mapped by labels onto the
 *      builder's series (metadata of the first input that has it), its
 *      data decoded into an arena freed as soon as the series is merged.
 *      A node is mapped lazily, ancestors first, by sm_tree_child_path with its
 *      frame interned into the builder's frames, so only stacks with data
 *      in W enter the tier's tree.  Consecutive buckets of a series that
 *      floor (sm_floor_to) to one tier bucket are summed into a dense
 *      array over the builder's node ids (tree.h: a merge is an array
 *      add) with the list of nodes touched; only that list is sorted, and
 *      merged once into the tier bucket, which is kept packed (set.h)
 *      between merges: memory is the tier's packed pairs, 16 bytes per
 *      builder node, plus one input series.  (Sorting every gathered pair
 *      instead cost 7x: a day of one series is 345k pairs over ~1k
 *      nodes.)  Profiles are summed; a
 *      bucket's total is recomputed from its summed values (sm_add_sat,
 *      as block decoding checks it).  Pairs that cancel to 0 are kept: an
 *      input bucket never has 0 pairs, and neither does a tier bucket;
 *   5. encode (ing_block_encode_tier) with a fresh gen from db->next_gen
 *      (tier gens only need to be unique), reserve a slot in t->blocks,
 *      commit (ing_store_block_put: one synced batch, no head-log delete);
 *   6. under t->mu: add the meta to t->blocks, and retire every other
 *      (w, W) tier block with ing_retire_add (deleted after the grace
 *      period, so a query that copied its meta can finish).
 * Failure before the commit leaves nothing: the builder is freed and the
 * block was never written (fault-injection tested).  After the commit the
 * job succeeds: a failed retire keeps the old block listed, and the
 * planner reports it superseded again.  Publishing cannot fail: the job
 * and a cut each reserve two slots in t->blocks before their commit (one
 * cut and one job run at a time, retention only removes); should it fail
 * anyway, the new block is deleted again, or left for the next open,
 * where it is a valid block like any other.
 * Crash safety follows: before the batch nothing is stored and a rerun
 * redoes the job; after it the block is found by the scan at open
 * (replay.c), and superseded blocks left by a crash before their deletion
 * are found by the planner.
 *
 * Merges (a job with tier_ms 0; block.h "Merged raw blocks").  Heads cut
 * early -- under -ingester.head-max-bytes, by flushes, after restarts --
 * leave small raw blocks, each with its own symbol table and tree; a
 * merge makes those of one clock hour one block.  Decision: a merged
 * block spans at most one clock hour (ING_MERGE_SPAN_MS), not a day,
 * because a query reads a raw block's series data whole: a flamegraph
 * whose range edge falls in a day-long merged block would read a day of
 * raw pairs to use minutes of them (bench B7 reads two such edges), where
 * hourly blocks cost an hour.  Regular hourly cuts span two clock hours
 * and so are not merged.  One merge per window and pass (the first hour
 * that has one); later passes take the others.  Inputs (merge_pick),
 * re-picked under the locks when the job runs: raw blocks of the tenant
 * lying WHOLLY inside one clock hour of the window, of the db's
 * bucket width, each stored below db->cfg.merge_max_bytes
 * (-ingester.merge-max-bytes; 0 = off) and taken in gen order while their
 * sum stays below it (a merged block is never larger than its inputs'
 * sum -- one table and tree instead of many -- so it stays below too);
 * at least two; the window fully past, above the retention floor, no head
 * holding a bucket in it (as for tier jobs).  Precondition for exactness:
 * every tier block over the window has all the inputs' coverage gens <=
 * its cover_gen or all above it; otherwise a merge would split a
 * coverage boundary, so it waits (a rebuilt tier covers all of them).
 * Later tier blocks take cover_gen from heads, above every input, so the
 * merged block stays consistent with them.
 *   The build is the tier builder with w = 0: bucket times kept (same
 *   width), pairs of an equal (series, time) summed -- a late write can
 *   put one bucket time in two inputs --, profiles and totals summed,
 *   and span records (nodes mapped onto the merged tree) and profile
 *   records carried over (merge_records; the encoder sorts them and sums
 *   equal span keys, as for a head).  The merged block gets a fresh gen
 *   and cover_gen = the largest coverage gen of its inputs.
 *   Commit: ONE synced batch holds its parts and a tombstone per input
 *   (ing_store_block_merge, store.h); then under t->mu the inputs leave
 *   t->blocks and the merged block enters (a query's copy of the metas
 *   has one or the other, never both), and the inputs are retired
 *   (deleted after the grace period, so queries holding their metas
 *   finish).  The scan at open retires every tombstoned block (replay.c).
 *   So after a kill -9: before the batch, the inputs alone; after it, the
 *   merged block alone, whether or not the inputs are deleted yet.  A
 *   failure before the batch leaves nothing (fault-injection tested).
 *   Decision: a damaged input (or an undecodable 'P'/'X' part) fails the
 *   job (SM_ECORRUPT) rather than merging without it: dropping records
 *   would lose data, and the job is retried each pass.
 *
 * Metrics: smolder_ingester_compaction_jobs_total{tier,status} (tier
 * "raw" for merges; status
 * built, noop, skipped: a head overlaps, empty, failed),
 * smolder_ingester_compaction_bytes_read_total (stored bytes of the input
 * blocks) and smolder_ingester_compaction_bytes_written_total.
 */
#include "db_int.h"
#include "fold.h"

#include <stdio.h>

#define ING_COMPACT_MAX_SPAN 64    /* windows one block may add */

static struct sm_metric *m_jobs, *m_read, *m_written, *m_tier_reads;

static const struct sm_metric_def ing_compact_metric_defs[] = {
	{ &m_tier_reads, SM_METRIC_COUNTER,
	    "smolder_ingester_tier_blocks_read_total", "Tier blocks queries "
	    "read at a downsampling resolution (instead of raw buckets).",
	    NULL, NULL, 0 },
	{ &m_jobs, SM_METRIC_COUNTER, "smolder_ingester_compaction_jobs_total",
	    "Tier and merge jobs run, by tier width (raw: merges) and outcome "
	    "(built, noop, skipped, empty, failed).",
	    SM_METRIC_LABELS("tier", "status"), NULL, 0 },
	{ &m_read, SM_METRIC_COUNTER,
	    "smolder_ingester_compaction_bytes_read_total",
	    "Stored bytes of the raw blocks read by tier and merge jobs.",
	    NULL, NULL, 0 },
	{ &m_written, SM_METRIC_COUNTER,
	    "smolder_ingester_compaction_bytes_written_total",
	    "Stored bytes of the tier and merged blocks written.", NULL,
	    NULL, 0 },
};

static struct sm_metric_set ing_compact_metric_set =
    SM_METRIC_SET(ing_compact_metric_defs);

void
ing_compact_metrics_init(void)
{
	sm_metrics_register_once(&ing_compact_metric_set);
}

static void
count_job(int64_t w, const char *status)
{
	char tier[32];

	if (w == 0)
		snprintf(tier, sizeof(tier), "raw");     /* a merge job */
	else if (w % 86400000 == 0)
		snprintf(tier, sizeof(tier), "%lldd", (long long)(w / 86400000));
	else if (w % 3600000 == 0)
		snprintf(tier, sizeof(tier), "%lldh", (long long)(w / 3600000));
	else if (w % 60000 == 0)
		snprintf(tier, sizeof(tier), "%lldm", (long long)(w / 60000));
	else if (w % 1000 == 0)
		snprintf(tier, sizeof(tier), "%llds", (long long)(w / 1000));
	else
		snprintf(tier, sizeof(tier), "%lldms", (long long)w);
	sm_counter_inc(sm_metric_child(m_jobs, tier, status));
}

/* --- what a tenant looks like ------------------------------------------- */

/* A copy of one tenant's state (plan and run). */
struct snap {
	struct ing_block_meta *m;
	uint32_t n;
	uint64_t cover_gen;
	struct ing_head *heads[16];
	uint32_t nheads;
	bool heads_all;                /* all heads referenced */
	int64_t hmin[16], hmax[16];    /* heads' ranges [hmin, hmax) */
};

static void
snap_fini(struct snap *s)
{
	for (uint32_t i = 0; i < s->nheads; i++)
		ing_head_unref(s->heads[i]);
	sm_free(s->m);
	memset(s, 0, sizeof(*s));
}

/* Copy t's metas, cover_gen and head ranges.  0 or SM_ENOMEM. */
static int
snap_take(struct ing_tenant *t, struct snap *s)
{
	uint64_t low;

	memset(s, 0, sizeof(*s));
	ING_LOCK(&t->mu);
	if (t->nblocks > 0 && (s->m = sm_malloc((size_t)t->nblocks *
	    sizeof(*s->m))) == NULL) {
		ING_UNLOCK(&t->mu);
		return (SM_ENOMEM);
	}
	if (t->nblocks > 0)
		memcpy(s->m, t->blocks, (size_t)t->nblocks * sizeof(*s->m));
	s->n = t->nblocks;
	low = t->head->gen;
	s->heads[s->nheads++] = t->head;
	ing_head_ref(t->head);
	s->heads_all = true;
	for (uint32_t i = 0; i < t->ncutting; i++) {
		low = SM_MIN(low, t->cutting[i]->gen);
		if (s->nheads < SM_ARRAY_LEN(s->heads)) {
			s->heads[s->nheads++] = t->cutting[i];
			ing_head_ref(t->cutting[i]);
		} else {
			s->heads_all = false;
		}
	}
	ING_UNLOCK(&t->mu);
	s->cover_gen = low - 1;
	for (uint32_t i = 0; i < s->nheads; i++) {
		struct ing_head *h = s->heads[i];

		ING_RDLOCK(&h->lock);
		s->hmin[i] = h->set.min_t;
		s->hmax[i] = h->set.max_t <= INT64_MAX - h->bucket_ms ?
		    h->set.max_t + h->bucket_ms : INT64_MAX;
		ING_RWUNLOCK(&h->lock);
	}
	return (0);
}

/* Does a head hold a bucket in [ws, we)?  (A head past the 16 copied
 * counts as holding one: a later pass does the window.) */
static bool
snap_head_overlap(const struct snap *s, int64_t ws, int64_t we)
{
	if (!s->heads_all)
		return (true);
	for (uint32_t i = 0; i < s->nheads; i++)
		if (s->hmin[i] <= s->hmax[i] && s->hmin[i] < we &&
		    s->hmax[i] > ws)
			return (true);
	return (false);
}

static bool
is_tier_of(const struct ing_block_meta *m, int64_t w, int64_t ws, int64_t we)
{
	return (!m->broken && m->tier_ms == w && m->cover_start == ws &&
	    m->cover_end == we);
}

/* Is a better than b as the tier block of its (w, W)? */
static bool
tier_better(const struct ing_block_meta *a, const struct ing_block_meta *b)
{
	return (a->cover_gen > b->cover_gen || (a->cover_gen == b->cover_gen &&
	    a->gen > b->gen));
}

/* The verdict on one (w, W) over metas m[0..n). */
struct verdict {
	bool due;
	uint32_t superseded;
	uint32_t nraw;
	uint64_t bytes;
	uint64_t max_raw;
};

static void
judge(const struct ing_block_meta *m, uint32_t n, int64_t w, int64_t ws,
    int64_t we, struct verdict *v)
{
	const struct ing_block_meta *best = NULL;
	uint32_t ntier = 0;

	memset(v, 0, sizeof(*v));
	for (uint32_t i = 0; i < n; i++) {
		if (m[i].broken)
			continue;
		if (m[i].tier_ms == 0 && m[i].min_t < we && m[i].max_t > ws) {
			v->nraw++;
			v->bytes += m[i].bytes;
			v->max_raw = SM_MAX(v->max_raw, ing_block_cov_gen(&m[i]));
		} else if (is_tier_of(&m[i], w, ws, we)) {
			ntier++;
			if (best == NULL || tier_better(&m[i], best))
				best = &m[i];
		}
	}
	v->superseded = ntier > 0 ? ntier - 1 : 0;
	v->due = v->nraw > 0 && (best == NULL || best->cover_gen < v->max_raw);
}

static int
check_args(struct ing_db *db, const int64_t *widths, uint32_t nwidths,
    int64_t window_ms, struct sm_err *err)
{
	if (window_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "tier window %lld ms: not "
		    "positive", (long long)window_ms));
	for (uint32_t i = 0; i < nwidths; i++) {
		int64_t w = widths[i];

		if (w <= 0 || w % db->cfg.bucket_ms != 0 || window_ms % w != 0)
			return (sm_err_set(err, SM_EINVAL, "tier width %lld ms: "
			    "must be a multiple of the bucket width (%lld ms) "
			    "and divide the window (%lld ms)", (long long)w,
			    (long long)db->cfg.bucket_ms,
			    (long long)window_ms));
	}
	return (0);
}

/*
 * The raw blocks lying wholly in [ws, we) to merge: indexes into m[0..n)
 * in gen order, into pick[]; returns how many (0 when fewer than two, or
 * when they straddle a tier block's cover_gen).  *bytes: theirs.
 */
static uint32_t
merge_pick_span(const struct ing_block_meta *m, uint32_t n,
    int64_t bucket_ms, uint64_t max_bytes, int64_t ws, int64_t we,
    uint32_t *pick, uint64_t *bytes)
{
	uint64_t sum = 0;
	uint32_t k = 0;

	*bytes = 0;
	if (max_bytes == 0)
		return (0);
	for (uint32_t i = 0; i < n; i++) {
		const struct ing_block_meta *x = &m[i];

		if (x->broken || x->merged || x->tier_ms != 0 ||
		    x->bucket_ms != bucket_ms || x->min_t < ws ||
		    x->max_t > we || x->bytes >= max_bytes ||
		    sum + x->bytes >= max_bytes)
			continue;
		pick[k++] = i;
		sum += x->bytes;
	}
	if (k < 2)
		return (0);
	/* Every tier block over the window covers all inputs or none. */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t below = 0;

		if (m[i].broken || m[i].tier_ms == 0 ||
		    m[i].cover_start >= we || m[i].cover_end <= ws)
			continue;
		for (uint32_t j = 0; j < k; j++)
			below += ing_block_cov_gen(&m[pick[j]]) <= m[i].cover_gen;
		if (below != 0 && below != k)
			return (0);
	}
	*bytes = sum;
	return (k);
}

/*
 * The raw blocks of the window [ws, we) to merge (Merges, above): those
 * of its first clock hour holding two or more that can merge.  A merged
 * block never spans more than an hour, so a query whose range edge falls
 * in it reads at most an hour of raw data there, as from an hourly cut.
 */
static uint32_t
merge_pick(const struct ing_block_meta *m, uint32_t n, int64_t bucket_ms,
    uint64_t max_bytes, int64_t ws, int64_t we, uint32_t *pick,
    uint64_t *bytes)
{
	*bytes = 0;
	for (int64_t h = ws; h < we && h <= INT64_MAX - ING_MERGE_SPAN_MS;
	    h += ING_MERGE_SPAN_MS) {
		uint32_t k = merge_pick_span(m, n, bucket_ms, max_bytes, h,
		    SM_MIN(h + ING_MERGE_SPAN_MS, we), pick, bytes);

		if (k > 0)
			return (k);
	}
	return (0);
}

/* --- plan ----------------------------------------------------------------- */

/* Add the windows [lo, hi) touches to *ws (see ING_COMPACT_MAX_SPAN). */
static int
add_windows(int64_t lo, int64_t hi, int64_t window_ms, int64_t **ws,
    uint32_t *n, uint32_t *cap)
{
	int64_t first = sm_floor_to(lo, window_ms);
	int64_t last = sm_floor_to(hi - 1, window_ms);
	uint64_t span = ((uint64_t)last - (uint64_t)first) /
	    (uint64_t)window_ms + 1;

	for (uint64_t k = 0; k < span; k++) {
		if (span > ING_COMPACT_MAX_SPAN && k == 1)
			k = span - 1;
		if (SM_GROW(*ws, *cap, (size_t)*n + 1, 16) != 0)
			return (SM_ENOMEM);
		(*ws)[(*n)++] = (int64_t)((uint64_t)first + k *
		    (uint64_t)window_ms);
	}
	return (0);
}

/*
 * A new job at the end of jobs[0..*n) for tenant's window [w0, w0 +
 * window_ms) of tier tier_ms (0: a merge), zeroed but for those; *n
 * counts it only once the caller has filled it in.  NULL: out of memory.
 */
static struct ing_compact_job *
job_add(struct ing_compact_job **jobs, uint32_t *n, uint32_t *cap,
    const char *tenant, int64_t tier_ms, int64_t w0, int64_t window_ms)
{
	struct ing_compact_job *j;

	if (SM_GROW(*jobs, *cap, (size_t)*n + 1, 16) != 0)
		return (NULL);
	j = &(*jobs)[*n];
	memset(j, 0, sizeof(*j));
	if ((j->tenant = sm_strdup(tenant)) == NULL)
		return (NULL);
	j->tier_ms = tier_ms;
	j->window_start = w0;
	j->window_ms = window_ms;
	return (j);
}

static int
plan_tenant(struct ing_db *db, struct ing_tenant *t, const int64_t *widths,
    uint32_t nwidths, int64_t window_ms, int64_t now_ms,
    struct ing_compact_job **jobs, uint32_t *n, uint32_t *cap)
{
	int64_t floor = ing_db_floor(db, t->id);
	int64_t lfloor = ing_db_local_floor(db, t->id);
	struct snap s;
	int64_t *ws = NULL;
	uint32_t nws = 0, wcap = 0, *pick = NULL;
	int rv;

	if ((rv = snap_take(t, &s)) != 0)
		return (rv);
	if ((pick = sm_malloc((size_t)SM_MAX(s.n, 1) * sizeof(*pick))) ==
	    NULL) {
		rv = SM_ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < s.n && rv == 0; i++) {
		const struct ing_block_meta *m = &s.m[i];

		if (m->broken)
			continue;
		if (m->tier_ms == 0)
			rv = add_windows(m->min_t, m->max_t, window_ms, &ws,
			    &nws, &wcap);
		else if (m->cover_start % window_ms == 0 &&
		    m->cover_end - m->cover_start == window_ms)
			rv = add_windows(m->cover_start, m->cover_end,
			    window_ms, &ws, &nws, &wcap);
	}
	if (rv != 0)
		goto out;
	if (nws > 0)
		qsort(ws, nws, sizeof(*ws), sm_i64_cmp);
	for (uint32_t i = 0; i < nws; i++) {
		int64_t w0 = ws[i], w1;

		if ((i > 0 && ws[i - 1] == w0) ||
		    w0 > INT64_MAX - window_ms)
			continue;
		w1 = w0 + window_ms;
		if (w1 > now_ms || w1 <= floor)
			continue;
		/* A merge job first: the window's tier jobs then read one
		 * block instead of many. */
		if (!snap_head_overlap(&s, w0, w1)) {
			uint64_t mbytes;
			uint32_t nm = merge_pick(s.m, s.n, db->cfg.bucket_ms,
			    db->cfg.merge_max_bytes, w0, w1, pick, &mbytes);
			struct ing_compact_job *j;

			if (nm > 0) {
				if ((j = job_add(jobs, n, cap, t->id, 0, w0,
				    window_ms)) == NULL) {
					rv = SM_ENOMEM;
					goto out;
				}
				j->due = true;
				j->nblocks = nm;
				j->bytes = mbytes;
				(*n)++;
			}
		}
		/* Below the local floor the raw blocks are partly gone
		 * (served by the store-gateways): a tier built from what is
		 * left would be short. */
		for (uint32_t k = 0; k < nwidths && w0 >= lfloor; k++) {
			struct verdict v;
			struct ing_compact_job *j;

			judge(s.m, s.n, widths[k], w0, w1, &v);
			if (v.due && snap_head_overlap(&s, w0, w1))
				v.due = false;
			if (!v.due && v.superseded == 0)
				continue;
			if ((j = job_add(jobs, n, cap, t->id, widths[k], w0,
			    window_ms)) == NULL) {
				rv = SM_ENOMEM;
				goto out;
			}
			j->due = v.due;
			j->superseded = v.superseded;
			j->nblocks = v.nraw;
			j->bytes = v.bytes;
			(*n)++;
		}
	}
out:
	sm_free(pick);
	sm_free(ws);
	snap_fini(&s);
	return (rv);
}

void
ing_compact_jobs_free(struct ing_compact_job *jobs, uint32_t n)
{
	ING_TENANT_RECS_FREE(jobs, n);
}

int
ing_db_compact_plan(struct ing_db *db, const int64_t *widths,
    uint32_t nwidths, int64_t window_ms, int64_t now_ms,
    struct ing_compact_job **jobs, uint32_t *n, struct sm_err *err)
{
	struct ing_compact_job *v = NULL;
	uint32_t nv = 0, cap = 0;
	int rv;

	*jobs = NULL;
	*n = 0;
	if ((rv = check_args(db, widths, nwidths, window_ms, err)) != 0)
		return (rv);
	if (db->store == NULL)
		return (0);
	for (uint32_t i = 0;; i++) {
		struct ing_tenant *t;

		/* Tenants are never freed before close (db_int.h). */
		if ((t = ing_tenant_at(db, i)) == NULL)
			break;
		if ((rv = plan_tenant(db, t, widths, nwidths, window_ms,
		    now_ms, &v, &nv, &cap)) != 0) {
			ing_compact_jobs_free(v, nv);
			return (sm_err_set(err, rv, "planning tier jobs: out of "
			    "memory"));
		}
	}
	*jobs = v;
	*n = nv;
	return (0);
}

/* --- build ---------------------------------------------------------------- */

struct pair {
	uint32_t node;
	int64_t value;
};

/* One builder node's sum in the tier bucket being gathered. */
struct slot {
	int64_t v;
	bool seen;
};

/* The builder and the state of the input block being merged. */
struct build {
	struct ing_head *h;             /* the tier block being built */
	int64_t w, ws, we;              /* w 0: a merge (times kept) */
	/* the current input block */
	const struct ing_block_tree *tree;
	uint32_t *map;                  /* input node -> builder node + 1 */
	uint64_t *pmap;                 /* input node -> its path hash, where
					 * mapped (the builder's tree is a
					 * head's: path-indexed) */
	uint32_t *fmap;                 /* input frame -> builder frame + 1 */
	uint64_t *fhash;                /* input frame -> sm_hash, where
					 * fmap is set */
	uint32_t *stack;                /* for map_node */
	/* the tier bucket being gathered: a dense sum over builder nodes
	 * and the nodes touched */
	struct slot *slot;
	size_t nslot;
	uint32_t *touched;
	size_t ntouched, tcap;
	struct pair *p;
	size_t pcap;
	/* a fold (fold.h): the coefficient of each (source, fp, bucket) of
	 * the inputs, and the current input's source; NULL: a tier or a
	 * merge */
	const struct ing_fold_sel *fold;
	uint32_t src;
};

/* The coefficient of input bucket (fp, t) in the block being built: 1
 * for a tier or a merge; the selection's for a fold. */
static int
fold_coef(const struct build *b, uint64_t fp, int64_t t)
{
	return (b->fold == NULL ? 1 : b->fold->coef(b->fold->arg, b->src, fp,
	    t));
}

/* v times a coefficient of +-1, saturating. */
static int64_t
fold_scale(int64_t v, int c)
{
	if (c > 0)
		return (v);
	return (v == INT64_MIN ? INT64_MAX : -v);
}

/* The builder's node for input node i (its ancestors mapped first). */
static int
map_node(struct build *b, uint32_t i, uint32_t *out)
{
	const struct ing_block_tree *t = b->tree;
	uint32_t depth = 0, cur = i;
	int rv;

	while (cur != 0 && b->map[cur] == 0) {
		b->stack[depth++] = cur;
		cur = t->parent[cur];
	}
	while (depth > 0) {
		uint32_t k = b->stack[--depth], name = t->name[k], parent;
		uint64_t path;

		if (b->fmap[name] == 0) {
			uint32_t id;

			b->fhash[name] = sm_hash(t->frames[name].p,
			    t->frames[name].len);
			if ((rv = sm_strtab_intern_hashed(&b->h->frames,
			    t->frames[name].p, t->frames[name].len,
			    b->fhash[name], &id)) != 0)
				return (rv);
			b->fmap[name] = id + 1;
		}
		if (t->parent[k] == 0) {
			parent = 0;
			path = sm_tree_path_root();
		} else {
			parent = b->map[t->parent[k]] - 1;
			path = b->pmap[t->parent[k]];
		}
		path = sm_tree_path(path, b->fhash[name]);
		if ((rv = sm_tree_child_path(&b->h->tree, parent,
		    b->fmap[name] - 1, path, &cur)) != 0)
			return (rv);
		b->map[k] = cur + 1;
		b->pmap[k] = path;
	}
	*out = i == 0 ? 0 : b->map[i] - 1;
	return (0);
}

/* Add (node, v) to the tier bucket being gathered. */
static int
gather(struct build *b, uint32_t node, int64_t v)
{
	if (node >= b->nslot) {
		size_t n = SM_MAX((size_t)b->h->tree.n, 2 * b->nslot);
		struct slot *ns;

		n = SM_MAX(n, (size_t)node + 1);
		if ((ns = sm_reallocarray(b->slot, n, sizeof(*ns))) == NULL)
			return (SM_ENOMEM);
		memset(ns + b->nslot, 0, (n - b->nslot) * sizeof(*ns));
		b->slot = ns;
		b->nslot = n;
	}
	if (!b->slot[node].seen) {
		if (SM_GROW(b->touched, b->tcap, b->ntouched + 1, 256) != 0)
			return (SM_ENOMEM);
		b->touched[b->ntouched++] = node;
		b->slot[node].seen = true;
	}
	b->slot[node].v = sm_add_sat(b->slot[node].v, v);
	return (0);
}

/* Forget the gathered sums (after a flush or a failure). */
static void
gather_reset(struct build *b)
{
	for (size_t i = 0; i < b->ntouched; i++)
		b->slot[b->touched[i]] = (struct slot){ 0, false };
	b->ntouched = 0;
}

/*
 * Merge the gathered pairs (sorted, unique) and `profiles` into osr's
 * bucket at tt; the result is kept packed when packing succeeds.
 */
static int
bucket_merge(struct build *b, struct ing_series *osr, int64_t tt,
    uint32_t profiles, const struct pair *p, size_t np)
{
	static const struct ing_bucket none;
	struct ing_bucket *bk = NULL, nb;
	struct ing_pair_cur c;
	uint32_t lo, k = 0, cn = 0;
	int64_t cv = 0, total = 0;
	size_t j = 0, cap;
	bool more;

	SM_LOWER_BOUND(lo, osr->nb, mid, osr->b[mid].t < tt);
	if (lo < osr->nb && osr->b[lo].t == tt)
		bk = &osr->b[lo];
	else if (SM_GROW(osr->b, osr->cap, (size_t)osr->nb + 1, 4) != 0)
		return (SM_ENOMEM);
	cap = np + (bk != NULL ? bk->n : 0);
	memset(&nb, 0, sizeof(nb));
	nb.node = sm_malloc(SM_MAX(cap, 1) * sizeof(*nb.node));
	nb.value = sm_malloc(SM_MAX(cap, 1) * sizeof(*nb.value));
	if (nb.node == NULL || nb.value == NULL) {
		sm_free(nb.node);
		sm_free(nb.value);
		return (SM_ENOMEM);
	}
	/* A sorted merge of the bucket's pairs and the gathered ones. */
	ing_pairs_begin(bk != NULL ? bk : &none, &c);
	more = ing_pairs_next(&c, &cn, &cv);
	while (more || j < np) {
		if (more && (j == np || cn < p[j].node)) {
			nb.node[k] = cn;
			nb.value[k] = cv;
			more = ing_pairs_next(&c, &cn, &cv);
		} else if (more && cn == p[j].node) {
			nb.node[k] = cn;
			nb.value[k] = sm_add_sat(cv, p[j++].value);
			more = ing_pairs_next(&c, &cn, &cv);
		} else {
			nb.node[k] = p[j].node;
			nb.value[k] = p[j++].value;
		}
		total = sm_add_sat(total, nb.value[k]);
		k++;
	}
	nb.t = tt;
	nb.n = k;
	nb.total = total;
	nb.profiles = profiles;
	if (bk != NULL) {
		nb.profiles = bk->profiles > UINT32_MAX - profiles ?
		    UINT32_MAX : bk->profiles + profiles;
		ing_bucket_pairs_free(bk);
	} else {
		memmove(&osr->b[lo + 1], &osr->b[lo], (size_t)(osr->nb - lo) *
		    sizeof(*osr->b));
		osr->nb++;
		bk = &osr->b[lo];
		b->h->set.min_t = SM_MIN(b->h->set.min_t, tt);
		b->h->set.max_t = SM_MAX(b->h->set.max_t, tt);
	}
	*bk = nb;
	(void)ing_bucket_pack(bk);   /* unpacked on failure: same pairs */
	return (0);
}

/* Merge the gathered sums, sorted by node, into osr at tt. */
static int
flush_group(struct build *b, struct ing_series *osr, int64_t tt,
    uint32_t profiles)
{
	size_t n = b->ntouched;
	int rv;

	if (n == 0 && profiles == 0)
		return (0);
	if (SM_GROW(b->p, b->pcap, SM_MAX(n, 1), 64) != 0)
		return (SM_ENOMEM);
	qsort(b->touched, n, sizeof(*b->touched), sm_u32_cmp);
	for (size_t i = 0; i < n; i++) {
		b->p[i].node = b->touched[i];
		b->p[i].value = b->slot[b->touched[i]].v;
	}
	gather_reset(b);
	rv = bucket_merge(b, osr, tt, profiles, b->p, n);
	return (rv);
}

/* Merge series k of input block m into the builder. */
static int
merge_series(struct ing_store *st, const char *tenant,
    const struct ing_block_meta *m, const struct ing_set *set, uint32_t k,
    struct build *b, struct sm_err *err)
{
	const struct ing_series *sr = set->series[k];
	struct ing_series *osr;
	struct ing_bucket *bk;
	struct sm_arena *a;
	uint32_t first = ing_series_first_bucket(sr, m->bucket_ms, b->ws);
	uint32_t profiles = 0;
	int64_t tt = 0;
	bool open = false;
	int rv;

	/* Only buckets starting in the window count (block.h). */
	while (first < sr->nb && sr->b[first].t < b->ws)
		first++;
	if (first == sr->nb || sr->b[first].t >= b->we)
		return (0);
	if (b->fold != NULL) {
		/* a fold: only a series with a selected bucket enters */
		while (first < sr->nb && sr->b[first].t < b->we &&
		    fold_coef(b, sr->fp, sr->b[first].t) == 0)
			first++;
		if (first == sr->nb || sr->b[first].t >= b->we)
			return (0);
	}
	if ((rv = ing_set_series(&b->h->set, sr->labels, sr->nlabels,
	    ing_set_str(set, sr->meta.spy), ing_set_str(set, sr->meta.units),
	    ing_set_str(set, sr->meta.aggregation), sr->meta.sample_rate,
	    &osr)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	if ((a = sm_arena_create(0)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = ing_store_block_data(st, tenant, m, k, sr, a, &bk,
	    err)) != 0)
		goto out;
	for (uint32_t i = first; i < sr->nb && bk[i].t < b->we; i++) {
		int64_t bt = b->w > 0 ? sm_floor_to(bk[i].t, b->w) : bk[i].t;
		int c = fold_coef(b, sr->fp, bk[i].t);

		if (c == 0)
			continue;
		if (open && bt != tt) {
			if ((rv = flush_group(b, osr, tt, profiles)) != 0)
				goto nomem;
			profiles = 0;
		}
		tt = bt;
		open = true;
		/* a fold sets the counts from its records afterwards */
		if (b->fold == NULL)
			profiles = profiles > UINT32_MAX - bk[i].profiles ?
			    UINT32_MAX : profiles + bk[i].profiles;
		for (uint32_t j = 0; j < bk[i].n; j++) {
			uint32_t node;

			if (bk[i].node[j] >= b->tree->n) {
				rv = sm_err_set(err, SM_ECORRUPT, "block %s/%llu "
				    "series %u: node %u past its tree", tenant,
				    (unsigned long long)m->gen, k,
				    bk[i].node[j]);
				goto out;
			}
			if ((rv = map_node(b, bk[i].node[j], &node)) != 0 ||
			    (rv = gather(b, node, fold_scale(bk[i].value[j],
			    c))) != 0)
				goto nomem;
		}
	}
	if (open && (rv = flush_group(b, osr, tt, profiles)) != 0)
		goto nomem;
	rv = 0;
	goto out;
nomem:
	sm_err_set(err, rv, "building tier block: %s", sm_strerror(rv));
out:
	gather_reset(b);
	sm_arena_destroy(a);
	return (rv);
}

/*
 * A merge: carry input block m's span records (nodes mapped onto the
 * builder's tree) and profile records into the builder's head; its
 * encoding sorts them (spans summed per key, as a head's are).
 */
static int
merge_records(struct ing_store *st, const char *tenant,
    const struct ing_block_meta *m, struct build *b, struct sm_err *err)
{
	struct ing_span_rec *sp = NULL;
	struct ing_prof_rec *pr = NULL;
	uint32_t nsp = 0, npr = 0;
	int rv;

	if ((rv = ing_store_block_spans(st, tenant, m, &sp, &nsp,
	    err)) != 0 ||
	    (rv = ing_store_block_profiles(st, tenant, m, &pr, &npr,
	    err)) != 0)
		goto out;
	for (uint32_t i = 0; i < nsp; i++) {
		uint32_t node;
		int c = fold_coef(b, sp[i].fp, sp[i].t);

		if (c == 0 || (b->fold != NULL && (sp[i].t < b->ws ||
		    sp[i].t >= b->we)))
			continue;
		if (sp[i].node >= b->tree->n) {
			rv = sm_err_set(err, SM_ECORRUPT, "block %s/%llu span "
			    "node %u past its tree", tenant,
			    (unsigned long long)m->gen, sp[i].node);
			goto out;
		}
		if ((rv = map_node(b, sp[i].node, &node)) != 0 ||
		    (rv = ing_spans_add(&b->h->spans, sp[i].span, sp[i].fp,
		    sp[i].t, node, fold_scale(sp[i].value, c))) != 0) {
			rv = sm_err_set(err, rv, "merging spans: %s",
			    sm_strerror(rv));
			goto out;
		}
	}
	for (uint32_t i = 0; b->fold == NULL && i < npr; i++) {
		if ((rv = ing_profs_add(&b->h->profs, pr[i].fp, pr[i].t,
		    pr[i].id, pr[i].total)) != 0) {
			rv = sm_err_set(err, rv, "merging profile records: %s",
			    sm_strerror(rv));
			goto out;
		}
	}
out:
	sm_free(sp);
	sm_free(pr);
	return (rv);
}

/* Merge every series of input block m with a bucket in the window. */
static int
merge_block(struct ing_store *st, const char *tenant,
    const struct ing_block_meta *m, struct build *b, struct sm_err *err)
{
	const struct ing_set *set = NULL;
	struct ing_cache_ent *tent = NULL, *ient = NULL;
	int rv;

	if ((rv = ing_store_block_tree(st, tenant, m, &b->tree, &tent,
	    err)) != 0 ||
	    (rv = ing_store_block_index(st, tenant, m, &set, &ient,
	    err)) != 0)
		goto out;
	b->map = sm_calloc(b->tree->n, sizeof(*b->map));
	b->pmap = sm_malloc((size_t)b->tree->n * sizeof(*b->pmap));
	b->stack = sm_malloc((size_t)b->tree->n * sizeof(*b->stack));
	b->fmap = sm_calloc(SM_MAX(b->tree->nframes, 1), sizeof(*b->fmap));
	b->fhash = sm_malloc(SM_MAX(b->tree->nframes, 1) *
	    sizeof(*b->fhash));
	if (b->map == NULL || b->pmap == NULL || b->stack == NULL ||
	    b->fmap == NULL || b->fhash == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t k = 0; k < set->nseries && rv == 0; k++)
		rv = merge_series(st, tenant, m, set, k, b, err);
	if (rv == 0 && b->w == 0)
		rv = merge_records(st, tenant, m, b, err);
out:
	sm_free(b->map);
	sm_free(b->pmap);
	sm_free(b->stack);
	sm_free(b->fmap);
	sm_free(b->fhash);
	b->map = b->stack = b->fmap = NULL;
	b->pmap = b->fhash = NULL;
	b->tree = NULL;
	if (ient != NULL)
		ing_store_release(st, ient);
	if (tent != NULL)
		ing_store_release(st, tent);
	return (rv);
}

/* Start builder b of window [ws, we) on an empty head of bucket width
 * `width`, with *e and *empty cleared.  0 or SM_ENOMEM. */
static int
build_init(struct build *b, int64_t ws, int64_t we, int64_t width,
    struct ing_block_enc *e, bool *empty, struct sm_err *err)
{
	memset(b, 0, sizeof(*b));
	memset(e, 0, sizeof(*e));
	*empty = false;
	b->ws = ws;
	b->we = we;
	if (ing_head_create(0, width, &b->h) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	return (0);
}

/* Free a builder's gathering state and its head. */
static void
build_fini(struct build *b)
{
	sm_free(b->p);
	sm_free(b->slot);
	sm_free(b->touched);
	ing_head_unref(b->h);
}

/*
 * Build and encode the tier block of (w, [ws, we)) from inputs[0..n) of
 * `tenant` in store st into *e, as block `gen` (or a fresh one from
 * *next, taken only when a block is built) with zstd `level`; w 0:
 * the merged raw block of inputs (bucket width bucket_ms).  *empty when
 * no input has a bucket in the window (nothing encoded).
 */
static int
tier_build(struct ing_store *st, const char *tenant,
    const struct ing_block_meta *inputs, uint32_t n, int64_t bucket_ms,
    int64_t w, int64_t ws, int64_t we, uint64_t gen, _Atomic uint64_t *next,
    uint64_t cover_gen, int level, struct ing_block_enc *e, bool *empty,
    struct sm_err *err)
{
	struct build b;
	int rv;

	if ((rv = build_init(&b, ws, we, w > 0 ? w : bucket_ms, e, empty,
	    err)) != 0)
		return (rv);
	b.w = w;
	for (uint32_t i = 0; i < n && rv == 0; i++)
		rv = merge_block(st, tenant, &inputs[i], &b, err);
	if (rv == 0 && b.h->set.nseries == 0)
		*empty = true;
	else if (rv == 0) {
		struct ing_block_src src;

		b.h->gen = next != NULL ? atomic_fetch_add(next, 1) : gen;
		if ((rv = ing_head_block_src(b.h, &src, err)) == 0) {
			rv = w == 0 ? ing_block_encode_merged(&src, level,
			    cover_gen, e, err) :
			    ing_block_encode_tier(&src, level, ws, we,
			    cover_gen, e, err);
			ing_head_block_src_fini(&src);
		}
	}
	build_fini(&b);
	return (rv);
}

/* tier_build on db's store, with a fresh gen (tier gens only need to be
 * unique). */
static int
build_tier(struct ing_db *db, const char *tenant,
    const struct ing_block_meta *inputs, uint32_t n, int64_t w, int64_t ws,
    int64_t we, uint64_t cover_gen, struct ing_block_enc *e, bool *empty,
    struct sm_err *err)
{
	return (tier_build(db->store, tenant, inputs, n, db->cfg.bucket_ms, w,
	    ws, we, 0, &db->next_gen, cover_gen, db->cfg.zstd_level, e, empty,
	    err));
}

int
ing_fold_tier_build(struct ing_store *st, const char *tenant,
    const struct ing_block_meta *inputs, uint32_t n, int64_t w, int64_t ws,
    int64_t we, uint64_t gen, uint64_t cover_gen, int level,
    struct ing_block_enc *e, bool *empty, struct sm_err *err)
{
	if (w <= 0)
		return (sm_err_set(err, SM_EINVAL, "a tier needs a width"));
	return (tier_build(st, tenant, inputs, n, 0, w, ws, we, gen, NULL,
	    cover_gen, level, e, empty, err));
}

/* --- run ------------------------------------------------------------------ */

/*
 * Under t->mu: retire every (w, W) tier block but the best one.  Returns
 * how many were retired; a block whose retirement fails stays listed (the
 * planner reports it again).
 */
static uint32_t
retire_superseded(struct ing_db *db, struct ing_tenant *t, int64_t w,
    int64_t ws, int64_t we)
{
	const struct ing_block_meta *best = NULL;
	uint64_t best_gen;
	uint32_t k = 0, n = 0;
	int64_t now = sm_now_ms();

	ING_ASSERT_HELD(&t->mu);
	for (uint32_t i = 0; i < t->nblocks; i++)
		if (is_tier_of(&t->blocks[i], w, ws, we) && (best == NULL ||
		    tier_better(&t->blocks[i], best)))
			best = &t->blocks[i];
	if (best == NULL)
		return (0);
	best_gen = best->gen;
	for (uint32_t i = 0; i < t->nblocks; i++) {
		const struct ing_block_meta *m = &t->blocks[i];

		if (is_tier_of(m, w, ws, we) && m->gen != best_gen &&
		    ing_retire_add(db, t->id, m->gen, now) == 0) {
			sm_info("ingester", "tier block superseded\ttenant=%s "
			    "block=%llu cover_gen=%llu", t->id,
			    (unsigned long long)m->gen,
			    (unsigned long long)m->cover_gen);
			n++;
			continue;
		}
		t->blocks[k++] = *m;
	}
	t->nblocks = k;
	return (n);
}

/*
 * Slots in t->blocks for a new meta, taken before the block is stored so
 * publishing it cannot fail (write.c's cut_commit reserves the same way).
 */
static int
meta_slots(struct ing_tenant *t, struct sm_err *err)
{
	int rv;

	ING_LOCK(&t->mu);
	rv = SM_GROW(t->blocks, t->blocks_cap, (size_t)t->nblocks + 2, 8);
	ING_UNLOCK(&t->mu);
	if (rv != 0)
		return (sm_err_set(err, rv, "out of memory"));
	return (0);
}

/* The job built (and stored) block m. */
static void
stats_built(struct ing_compact_stats *st, const struct ing_block_meta *m)
{
	st->built = true;
	st->gen = m->gen;
	st->series = m->nseries;
	st->nnodes = m->nnodes;
	st->bytes_written = m->bytes;
}

static int
compact_run(struct ing_db *db, struct ing_tenant *t, int64_t w, int64_t ws,
    int64_t we, struct ing_compact_stats *st, struct sm_err *err)
{
	struct ing_block_meta *inputs = NULL;
	struct ing_block_enc e;
	struct verdict v;
	struct snap s;
	uint32_t ni = 0;
	bool empty, published;
	int rv;

	memset(&e, 0, sizeof(e));
	if ((rv = snap_take(t, &s)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	judge(s.m, s.n, w, ws, we, &v);
	if (v.due && snap_head_overlap(&s, ws, we)) {
		v.due = false;
		st->head_overlap = true;
	}
	if (!v.due)
		goto cleanup;
	for (uint32_t i = 0; i < s.n; i++) {
		if (s.m[i].broken) {
			rv = ing_sources_usable(t->id, &s.m[i], err);
			goto out;
		}
	}
	if ((inputs = sm_malloc((size_t)SM_MAX(s.n, 1) *
	    sizeof(*inputs))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < s.n; i++) {
		const struct ing_block_meta *m = &s.m[i];

		if (m->tier_ms == 0 && ing_block_cov_gen(m) <= s.cover_gen &&
		    m->min_t < we && m->max_t > ws) {
			inputs[ni++] = *m;
			st->bytes_read += m->bytes;
		}
	}
	st->inputs = ni;
	st->cover_gen = s.cover_gen;
	if ((rv = build_tier(db, t->id, inputs, ni, w, ws, we, s.cover_gen,
	    &e, &empty, err)) != 0)
		goto out;
	if (empty) {
		st->empty = true;
		goto cleanup;
	}
	if ((rv = meta_slots(t, err)) != 0 ||
	    (rv = ing_store_block_put(db->store, t->id, &e, err)) != 0)
		goto out;
	stats_built(st, &e.meta);
	ING_LOCK(&t->mu);
	published = ing_tenant_add_block(t, &e.meta) == 0;
	ING_UNLOCK(&t->mu);
	if (!published) {
		struct sm_err e2;

		/* Not listed, so no query has it: delete it again; should
		 * that fail, it is a valid block found at the next open. */
		sm_err_clear(&e2);
		(void)ing_store_block_delete(db->store, t->id, e.meta.gen,
		    &e2);
		st->built = false;
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	sm_info("ingester", "tier block built\ttenant=%s block=%llu tier_ms=%lld "
	    "window=%lld cover_gen=%llu inputs=%u series=%u nodes=%u "
	    "bytes_read=%llu bytes=%llu", t->id, (unsigned long long)e.meta.gen,
	    (long long)w, (long long)ws, (unsigned long long)s.cover_gen, ni,
	    e.meta.nseries, e.meta.nnodes,
	    (unsigned long long)st->bytes_read,
	    (unsigned long long)e.meta.bytes);
cleanup:
	ING_LOCK(&t->mu);
	st->superseded = retire_superseded(db, t, w, ws, we);
	ING_UNLOCK(&t->mu);
	rv = 0;
out:
	ing_block_enc_fini(&e);
	sm_free(inputs);
	snap_fini(&s);
	return (rv);
}

/*
 * A merge job (Merges, above): re-pick the inputs of [ws, we) under the
 * locks, build the merged block, commit it with the inputs' tombstones,
 * then swap it for them in t->blocks and retire them.
 */
static int
merge_run(struct ing_db *db, struct ing_tenant *t, int64_t ws, int64_t we,
    struct ing_compact_stats *st, struct sm_err *err)
{
	struct ing_block_meta *inputs = NULL;
	struct ing_block_enc e;
	struct snap s;
	uint64_t *gens = NULL, cover = 0, bytes;
	uint32_t *pick = NULL, ni, k, nretired = 0;
	int64_t now = sm_now_ms();
	bool empty;
	int rv;

	memset(&e, 0, sizeof(e));
	if ((rv = snap_take(t, &s)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	if ((pick = sm_malloc((size_t)SM_MAX(s.n, 1) * sizeof(*pick))) ==
	    NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if (snap_head_overlap(&s, ws, we)) {
		st->head_overlap = true;
		goto out;
	}
	ni = merge_pick(s.m, s.n, db->cfg.bucket_ms, db->cfg.merge_max_bytes,
	    ws, we, pick, &bytes);
	if (ni == 0)
		goto out;                 /* no longer due: a no-op */
	inputs = sm_malloc((size_t)ni * sizeof(*inputs));
	gens = sm_malloc((size_t)ni * sizeof(*gens));
	if (inputs == NULL || gens == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < ni; i++) {
		inputs[i] = s.m[pick[i]];
		gens[i] = inputs[i].gen;
		cover = SM_MAX(cover, ing_block_cov_gen(&inputs[i]));
	}
	st->inputs = ni;
	st->bytes_read = bytes;
	st->cover_gen = cover;
	if ((rv = build_tier(db, t->id, inputs, ni, 0, ws, we, cover, &e,
	    &empty, err)) != 0)
		goto out;
	if (empty) {
		st->empty = true;
		goto out;
	}
	if ((rv = meta_slots(t, err)) != 0 ||
	    (rv = ing_store_block_merge(db->store, t->id, &e, gens, ni,
	    err)) != 0)
		goto out;
	stats_built(st, &e.meta);
	/* The swap: queries copy metas under t->mu, so each sees the inputs
	 * or the merged block, never both.  An input that fails to enter the
	 * retire list stays on disk with its tombstone: the next open
	 * deletes it. */
	ING_LOCK(&t->mu);
	k = 0;
	for (uint32_t i = 0; i < t->nblocks; i++) {
		bool input = false;

		for (uint32_t j = 0; j < ni && !input; j++)
			input = t->blocks[i].gen == gens[j];
		if (!input) {
			t->blocks[k++] = t->blocks[i];
			continue;
		}
		nretired += ing_retire_add(db, t->id, t->blocks[i].gen,
		    now) == 0;
	}
	t->nblocks = k;
	rv = ing_tenant_add_block(t, &e.meta);   /* reserved: cannot fail */
	ING_UNLOCK(&t->mu);
	SM_ASSERT(rv == 0);
	sm_info("ingester", "raw blocks merged\ttenant=%s block=%llu "
	    "window=%lld cover_gen=%llu inputs=%u retired=%u series=%u "
	    "nodes=%u bytes_read=%llu bytes=%llu", t->id,
	    (unsigned long long)e.meta.gen, (long long)ws,
	    (unsigned long long)cover, ni, nretired, e.meta.nseries,
	    e.meta.nnodes, (unsigned long long)bytes,
	    (unsigned long long)e.meta.bytes);
out:
	ing_block_enc_fini(&e);
	sm_free(inputs);
	sm_free(gens);
	sm_free(pick);
	snap_fini(&s);
	return (rv);
}

int
ing_db_compact_run(struct ing_db *db, const char *tenant, int64_t tier_ms,
    int64_t window_start, int64_t window_ms, int64_t now_ms,
    struct ing_compact_stats *st, struct sm_err *err)
{
	struct ing_tenant *t;
	int64_t we;
	int rv;

	memset(st, 0, sizeof(*st));
	if ((rv = check_args(db, &tier_ms, tier_ms == 0 ? 0 : 1, window_ms,
	    err)) != 0)
		return (rv);
	if (window_start % window_ms != 0 ||
	    window_start > INT64_MAX - window_ms)
		return (sm_err_set(err, SM_EINVAL, "tier window start %lld: "
		    "not a multiple of %lld ms", (long long)window_start,
		    (long long)window_ms));
	we = window_start + window_ms;
	if (db->store == NULL || we > now_ms ||
	    we <= ing_db_floor(db, tenant) ||
	    (tier_ms != 0 && window_start < ing_db_local_floor(db, tenant)) ||
	    (t = ing_tenant_find(db, tenant)) == NULL) {
		count_job(tier_ms, "noop");
		return (0);
	}
	ING_LOCK(&db->compact_mu);
	if (tier_ms == 0)
		rv = merge_run(db, t, window_start, we, st, err);
	else
		rv = compact_run(db, t, tier_ms, window_start, we, st, err);
	ING_UNLOCK(&db->compact_mu);
	if (rv != 0) {
		count_job(tier_ms, "failed");
		sm_warn("ingester", "%s job failed\ttenant=%s tier_ms=%lld "
		    "window=%lld err=\"%s\"", tier_ms == 0 ? "merge" : "tier",
		    tenant, (long long)tier_ms,
		    (long long)window_start, err->msg);
		return (rv);
	}
	sm_counter_add(sm_metric_child0(m_read), st->bytes_read);
	sm_counter_add(sm_metric_child0(m_written), st->bytes_written);
	count_job(tier_ms, st->built ? "built" : st->head_overlap ? "skipped" :
	    st->empty ? "empty" : "noop");
	return (0);
}

void
ing_tier_read_count(void)
{
	if (m_tier_reads != NULL)
		sm_counter_inc(sm_metric_child0(m_tier_reads));
}

/* --- folds (fold.h) --------------------------------------------------------- */

int
ing_fold_build(struct ing_store *st, const struct ing_fold_input *in,
    uint32_t n, int64_t bucket_ms, int64_t ws, int64_t we, uint64_t gen,
    const struct ing_fold_sel *sel, const struct ing_prof_rec *recs,
    uint32_t nrecs, int level, struct ing_block_enc *e, bool *empty,
    struct sm_err *err)
{
	struct build b;
	int rv;

	if ((rv = build_init(&b, ws, we, bucket_ms, e, empty, err)) != 0)
		return (rv);
	b.fold = sel;
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		if (in[i].meta.bucket_ms != bucket_ms) {
			rv = sm_err_set(err, SM_EINVAL, "block %s/%llu: bucket "
			    "width %lld, the fold's is %lld", in[i].tenant,
			    (unsigned long long)in[i].meta.gen,
			    (long long)in[i].meta.bucket_ms,
			    (long long)bucket_ms);
			break;
		}
		b.src = in[i].source;
		rv = merge_block(st, in[i].tenant, &in[i].meta, &b, err);
	}
	for (uint32_t i = 0; i < nrecs && rv == 0; i++) {
		if (recs[i].t < ws || recs[i].t >= we)
			continue;
		if ((rv = ing_profs_add(&b.h->profs, recs[i].fp, recs[i].t,
		    recs[i].id, recs[i].total)) != 0)
			rv = sm_err_set(err, rv, "out of memory");
	}
	/* each bucket counts the union's uploads in it */
	for (uint32_t k = 0; rv == 0 && k < b.h->set.nseries; k++) {
		struct ing_series *sr = b.h->set.series[k];

		for (uint32_t i = 0; i < sr->nb; i++)
			sr->b[i].profiles = sel->profiles(sel->arg, sr->fp,
			    sr->b[i].t);
	}
	if (rv == 0 && b.h->set.nseries == 0)
		*empty = true;
	else if (rv == 0) {
		struct ing_block_src src;

		b.h->gen = gen;
		if ((rv = ing_head_block_src(b.h, &src, err)) == 0) {
			rv = ing_block_encode(&src, level, e, err);
			ing_head_block_src_fini(&src);
		}
	}
	build_fini(&b);
	return (rv);
}
