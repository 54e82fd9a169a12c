/*
 * compact_test.c -- downsampling tier blocks (ingester/compact.c) over a
 * RocksDB store: a multi-day history with several cuts, planned and
 * compacted, every tier block decoded through the store API and checked
 * exactly against sums computed from what the test wrote; late data and
 * the rebuild that supersedes a tier block; a head holding window data
 * keeps the window out of the plan; allocation faults at every point of
 * a run leave nothing behind; a reopen brings the tier fields back.
 * Merges of small raw blocks: contents (pairs, profiles, spans, profile
 * records) identical before and after, queries identical, tiers built
 * before or after still exact, the coverage-boundary precondition,
 * allocation faults, and reopens with the tombstoned inputs on disk.
 */
#include "sm_test.h"
#include "sm_test_disk.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "distributor/batch.h"
#include "ingester/db.h"
#include "ingester/db_int.h"
#include "ingester/store.h"

#define SEC 1000LL
#define HOUR (3600 * SEC)
#define DAY (24 * HOUR)
#define T0 (20000 * DAY)     /* a day-aligned fake epoch (2024-10) */
#define NSER 3
#define NSTACK 12
#define NHOUR 60             /* hours of history kept in `want` */

static const int64_t widths[2] = { HOUR, DAY };
static uint64_t next_id = 1;
static uint64_t merge_max;   /* the db's merge_max_bytes (0: no merges) */
static bool with_spans;      /* mkwrite adds span samples */

/* What the test wrote, per series, stack and hour since T0. */
struct want {
	int64_t v[NSER][NSTACK][NHOUR];
	uint32_t profiles[NSER][NHOUR];
};

static const char *const svc[NSER] = { "api", "api", "db" };
static const char *const pname[NSER] = { "process_cpu", "memory", "process_cpu" };

static void
stack_name(int k, char *buf, size_t n)
{
	snprintf(buf, n, "main;f%d;g%d", k / 3, k % 3);
}

/* One upload at t (ms since T0) of every series, recorded in w. */
static void
mkwrite(int64_t t, struct want *w, struct sm_buf *out)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	uint8_t id[16] = { 0 };
	int64_t step = t / (10 * SEC);
	struct sm_err err;

	memcpy(id, &next_id, sizeof(next_id));
	next_id++;
	dist_limits_default(&lim);
	SM_REQUIRE(dist_batch_init(&b, a, &lim) == 0);
	b.meta.spy_name = "gospy";
	for (int s = 0; s < NSER; s++) {
		struct sm_label ls[2] = { { "__name__", pname[s] },
			{ "service_name", svc[s] } };
		int k[2];
		int64_t v[2];
		uint32_t idx;

		k[0] = (int)((step + s) % NSTACK);
		k[1] = (int)((step * 7 + 3 + s) % NSTACK);
		if (k[1] == k[0])
			k[1] = (k[0] + 1) % NSTACK;
		/* Series 1 has negative pairs but a positive total (records
		 * with totals <= 0 are covered by spans_test). */
		v[0] = (s == 1 ? 7 : 1) + step % 17;
		v[1] = s == 1 ? -(1 + step % 5) : 2 + step % 3;
		SM_REQUIRE(dist_batch_series(&b, ls, 2, T0 + t, &idx,
		    &err) == 0);
		for (int i = 0; i < 2; i++) {
			char name[32], *save = NULL, *f;
			uint32_t node = 0, fr;

			stack_name(k[i], name, sizeof(name));
			for (f = strtok_r(name, ";", &save); f != NULL;
			    f = strtok_r(NULL, ";", &save)) {
				SM_REQUIRE(dist_batch_frame(&b, f, strlen(f),
				    &fr) == 0);
				SM_REQUIRE(dist_batch_node(&b, node, fr,
				    &node) == 0);
			}
			SM_REQUIRE(dist_batch_add(&b, idx, node, v[i]) == 0);
			if (with_spans && i == 0)
				SM_REQUIRE(dist_batch_span(&b, idx, node, v[i],
				    1 + (uint64_t)step % 3) == 0);
			if (w != NULL && t / HOUR < NHOUR)
				w->v[s][k[i]][t / HOUR] += v[i];
		}
		if (w != NULL && t / HOUR < NHOUR)
			w->profiles[s][t / HOUR]++;
	}
	SM_REQUIRE(dist_batch_finish(&b) == 0);
	SM_REQUIRE(dist_batch_encode(&b, "t", id, NULL, 0, 0, out) == 0);
	dist_batch_fini(&b);
	sm_arena_destroy(a);
}

static void
write_at(struct ing_db *db, int64_t t, struct want *w)
{
	struct sm_buf raw = SM_BUF_INIT;
	struct ing_write_result res;
	struct sm_err err;

	mkwrite(t, w, &raw);
	SM_REQUIRE(disk_write_raw(db, &raw, 0, &res, &err) == 0);
}

/* --- a db over a temp dir ------------------------------------------------ */

/* A db (sm_test_disk.h) with a huge block duration and the current
 * merge_max; a reopen keeps the configuration it was created with. */
static void
disk_init(struct disk *d)
{
	struct ing_db_cfg cfg = { 10 * SEC, 1000 * DAY, 0, 3, 0, 0, merge_max,
	    0, NULL, NULL };

	disk_create(d, "cpttest", &cfg);
}

static void
disk_open(struct disk *d)
{
	disk_reopen(d);
}

static void
flush(struct ing_db *db)
{
	struct sm_err err;

	SM_REQUIRE(ing_db_flush(db, &err) == 0);
}

/* A copy of tenant t's block metas (free with free()). */
static struct ing_block_meta *
blocks(struct ing_db *db, uint32_t *n)
{
	struct ing_tenant *t = ing_tenant_find(db, "t");
	struct ing_block_meta *m;

	if (t == NULL) {          /* not written yet */
		*n = 0;
		m = malloc(sizeof(*m));
		SM_REQUIRE(m != NULL);
		return (m);
	}
	pthread_mutex_lock(&t->mu);
	*n = t->nblocks;
	m = malloc(sizeof(*m) * (t->nblocks + 1));
	SM_REQUIRE(m != NULL);
	if (t->nblocks > 0)
		memcpy(m, t->blocks, sizeof(*m) * t->nblocks);
	pthread_mutex_unlock(&t->mu);
	return (m);
}

/* Every block on disk: a scan of the store. */
struct scan {
	uint64_t gens[256];
	struct ing_block_meta m[256];
	uint32_t n;
};

static int
scan_one(void *arg, const char *tenant, const struct ing_block_meta *m)
{
	struct scan *s = arg;

	(void)tenant;
	if (s->n < 256) {
		s->gens[s->n] = m->gen;
		s->m[s->n++] = *m;
	}
	return (0);
}

static void
scan(struct ing_store *st, struct scan *s)
{
	struct sm_err err;

	memset(s, 0, sizeof(*s));
	SM_REQUIRE(ing_store_blocks_scan(st, scan_one, s, &err) == 0);
}

static uint32_t
plan(struct ing_db *db, int64_t now, struct ing_compact_job **jobs)
{
	struct sm_err err;
	uint32_t n;

	SM_REQUIRE(ing_db_compact_plan(db, widths, 2, ING_TIER_WINDOW_MS, now,
	    jobs, &n, &err) == 0);
	return (n);
}

/* Run every job of a plan at `now`; returns the number built. */
static uint32_t
run_all(struct ing_db *db, int64_t now)
{
	struct ing_compact_job *jobs;
	uint32_t n = plan(db, now, &jobs), built = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct ing_compact_stats st;
		struct sm_err err;
		int rv = ing_db_compact_run(db, jobs[i].tenant, jobs[i].tier_ms,
		    jobs[i].window_start, jobs[i].window_ms, now, &st, &err);

		SM_CHECK_EQ(rv, 0);
		if (rv != 0)
			fprintf(stderr, "run: %s\n", err.msg);
		built += st.built;
	}
	ing_compact_jobs_free(jobs, n);
	return (built);
}

/* The stack index of a node's frame path, or -1. */
static int
path_of(const struct ing_block_tree *tr, uint32_t node)
{
	char path[128] = "", tmp[128];
	char name[32];

	for (uint32_t c = node; c != 0; c = tr->parent[c]) {
		snprintf(tmp, sizeof(tmp), "%s%s%s", tr->frames[tr->name[c]].p,
		    path[0] != '\0' ? ";" : "", path);
		memcpy(path, tmp, sizeof(path));
	}
	for (int k = 0; k < NSTACK; k++) {
		stack_name(k, name, sizeof(name));
		if (strcmp(name, path) == 0)
			return (k);
	}
	return (-1);
}

static int
series_of(const struct ing_series *sr)
{
	const char *n = NULL, *s = NULL;

	for (uint32_t i = 0; i < sr->nlabels; i++) {
		if (strcmp(sr->labels[i].name, "__name__") == 0)
			n = sr->labels[i].value;
		if (strcmp(sr->labels[i].name, "service_name") == 0)
			s = sr->labels[i].value;
	}
	for (int k = 0; k < NSER; k++)
		if (n != NULL && s != NULL && strcmp(n, pname[k]) == 0 &&
		    strcmp(s, svc[k]) == 0)
			return (k);
	return (-1);
}

/*
 * Check one tier block against `w`: every tier bucket of every series,
 * its profiles, total and every (stack, value), exactly; and that every
 * (series, tier bucket) the test wrote into the window is there.
 * Returns the number of tier buckets checked.
 */
static uint32_t
check_tier(struct ing_store *st, const struct ing_block_meta *m,
    const struct want *w)
{
	const struct ing_set *set;
	const struct ing_block_tree *tr;
	struct ing_cache_ent *e1, *e2;
	struct sm_err err;
	uint32_t nb = 0, expect_nb = 0;
	int64_t hpb = m->tier_ms / HOUR;    /* hours per tier bucket */

	SM_REQUIRE(ing_store_block_index(st, "t", m, &set, &e1, &err) == 0);
	SM_REQUIRE(ing_store_block_tree(st, "t", m, &tr, &e2, &err) == 0);
	SM_CHECK_EQ(set->nseries, NSER);
	for (uint32_t k = 0; k < set->nseries; k++) {
		const struct ing_series *sr = set->series[k];
		struct sm_arena *a = sm_arena_create(0);
		struct ing_bucket *bk;
		int s = series_of(sr);

		SM_REQUIRE(s >= 0);
		SM_CHECK_STR(ing_set_str(set, sr->meta.spy), "gospy");
		SM_REQUIRE(ing_store_block_data(st, "t", m, k, sr, a, &bk,
		    &err) == 0);
		for (uint32_t b = 0; b < sr->nb; b++) {
			int64_t h0 = (bk[b].t - T0) / HOUR, got[NSTACK] = { 0 };
			int64_t total = 0;
			uint32_t prof = 0;

			SM_CHECK_EQ(bk[b].t % m->tier_ms, 0);
			SM_CHECK(bk[b].t >= m->cover_start &&
			    bk[b].t < m->cover_end);
			SM_REQUIRE(h0 >= 0 && h0 + hpb <= NHOUR);
			for (uint32_t j = 0; j < bk[b].n; j++) {
				int p = path_of(tr, bk[b].node[j]);

				SM_REQUIRE(p >= 0);
				got[p] += bk[b].value[j];
			}
			for (int64_t hh = h0; hh < h0 + hpb; hh++)
				prof += w->profiles[s][hh];
			for (int p = 0; p < NSTACK; p++) {
				int64_t want = 0;

				for (int64_t hh = h0; hh < h0 + hpb; hh++)
					want += w->v[s][p][hh];
				SM_CHECK_EQ(got[p], want);
				total += want;
			}
			SM_CHECK_EQ(bk[b].profiles, prof);
			SM_CHECK_EQ(bk[b].total, total);
			nb++;
		}
		sm_arena_destroy(a);
	}
	/* Nothing written into the window is missing. */
	for (int s = 0; s < NSER; s++)
		for (int64_t h = (m->cover_start - T0) / HOUR; h <
		    (m->cover_end - T0) / HOUR && h < NHOUR; h += hpb) {
			uint32_t prof = 0;

			for (int64_t hh = h; hh < h + hpb; hh++)
				prof += w->profiles[s][hh];
			expect_nb += prof > 0;
		}
	SM_CHECK_EQ(nb, expect_nb);
	ing_store_release(st, e1);
	ing_store_release(st, e2);
	return (nb);
}

/* Check every tier block of the db; returns how many. */
static uint32_t
check_all_tiers(struct disk *d, const struct want *w, uint32_t *nbuckets)
{
	uint32_t n, ntier = 0;
	struct ing_block_meta *m = blocks(d->db, &n);
	uint64_t max_raw = 0;

	*nbuckets = 0;
	for (uint32_t i = 0; i < n; i++)
		if (m[i].tier_ms == 0)
			max_raw = SM_MAX(max_raw, ing_block_cov_gen(&m[i]));
	for (uint32_t i = 0; i < n; i++) {
		if (m[i].tier_ms == 0)
			continue;
		ntier++;
		SM_CHECK_EQ(m[i].bucket_ms, m[i].tier_ms);
		SM_CHECK_EQ(m[i].cover_end - m[i].cover_start,
		    ING_TIER_WINDOW_MS);
		SM_CHECK(m[i].cover_gen >= max_raw);
		SM_CHECK_EQ(m[i].nspans, 0);
		SM_CHECK_EQ(m[i].nprofiles, 0);
		*nbuckets += check_tier(d->store, &m[i], w);
	}
	free(m);
	return (ntier);
}

/* 2 days and 6 hours of uploads every 10 s, cut every 5 hours. */
/* Tenant t over the two whole days, read at `width` (0: raw). */
static void
two_days(struct ing_query *q, struct ing_resolution *r, int64_t width)
{
	memset(q, 0, sizeof(*q));
	q->sel.tenant = "t";
	q->sel.start_ms = T0;
	q->sel.end_ms = T0 + 2 * DAY;
	*r = (struct ing_resolution){ T0, T0 + 2 * DAY, width };
	if (width > 0) {
		q->sel.res = r;
		q->sel.nres = 1;
	}
}

/* The merge of every series over the two whole days, read at `width`
 * (0: raw): the sum of its self values, and its profiles in the high
 * bits' place (a mismatch in either shows). */
static int64_t
merge_total(struct ing_db *db, int64_t width)
{
	struct ing_query q;
	struct ing_resolution r;
	Smolder__V1__MergeResponse out;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;
	int64_t sum = 0;

	SM_REQUIRE(a != NULL);
	two_days(&q, &r, width);
	SM_REQUIRE(ing_db_merge(db, &q, a, &out, &err) == 0);
	for (size_t i = 0; i < out.n_self; i++)
		sum += out.self[i];
	sum += (int64_t)out.profiles << 40;
	sm_arena_destroy(a);
	return (sum);
}

/* The profiles the stats of the same select count, over every series. */
static uint64_t
stats_profiles(struct ing_db *db, int64_t width)
{
	struct ing_query q;
	struct ing_resolution r;
	Smolder__V1__StatsResponse out;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;
	uint64_t n = 0;

	SM_REQUIRE(a != NULL);
	two_days(&q, &r, width);
	SM_REQUIRE(ing_db_series_stats(db, &q, a, &out, &err) == 0);
	for (size_t i = 0; i < out.n_series; i++) {
		/* Profiles in the low bits, the digests (what the querier's
		 * plan compares between replicas) mixed into the high ones. */
		n += out.series[i]->profiles;
		n += (out.series[i]->digest ^ out.series[i]->fp) << 32;
	}
	sm_arena_destroy(a);
	return (n);
}

/* A day and an hour of uploads every minute, cut every 6 hours. */
static void
day_of_minutes(struct disk *d, struct want *w)
{
	for (int64_t t = 0; t < DAY + HOUR; t += 60 * SEC) {
		write_at(d->db, t, w);
		if (t % (6 * HOUR) == 6 * HOUR - 60 * SEC)
			flush(d->db);
	}
	flush(d->db);
}

static void
history(struct disk *d, struct want *w, int64_t until)
{
	for (int64_t t = 0; t < until; t += 10 * SEC) {
		write_at(d->db, t, w);
		if (t % (5 * HOUR) == 5 * HOUR - 10 * SEC)
			flush(d->db);
	}
	flush(d->db);
}

static void
test_history_exact(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w));
	struct ing_compact_job *jobs;
	int64_t now = T0 + 2 * DAY + 6 * HOUR;
	uint64_t before_h, before_d;
	uint32_t n, nb;

	SM_REQUIRE(w != NULL);
	disk_init(&d);
	history(&d, w, 2 * DAY + 6 * HOUR);
	/* Windows 0 and 1 are over, window 2 is not: 2 x 2 jobs. */
	n = plan(d.db, now, &jobs);
	SM_CHECK_EQ(n, 4);
	for (uint32_t i = 0; i < n; i++) {
		SM_CHECK(jobs[i].due);
		SM_CHECK_EQ(jobs[i].superseded, 0);
		SM_CHECK(jobs[i].window_start == T0 ||
		    jobs[i].window_start == T0 + DAY);
		SM_CHECK(jobs[i].nblocks >= 5);
		SM_CHECK(jobs[i].bytes > 0);
	}
	ing_compact_jobs_free(jobs, n);
	/* Stats at 1 h and 1 d before the tiers exist (raw buckets floored
	 * on the fly): a replica that has not compacted yet. */
	before_h = stats_profiles(d.db, HOUR);
	before_d = stats_profiles(d.db, DAY);
	SM_CHECK_EQ(run_all(d.db, now), 4);
	SM_CHECK_EQ(check_all_tiers(&d, w, &nb), 4);
	/* The same stats, digests included, read from the tier blocks: a
	 * replica that has compacted answers exactly as one that has not. */
	SM_CHECK(stats_profiles(d.db, HOUR) == before_h);
	SM_CHECK(stats_profiles(d.db, DAY) == before_d);
	/* 2 windows x 3 series x (24 hourly + 1 daily) buckets. */
	SM_CHECK_EQ(nb, 2 * NSER * 25);
	/* Done: nothing is due any more; a rerun is a no-op. */
	SM_CHECK_EQ(plan(d.db, now, &jobs), 0);
	ing_compact_jobs_free(jobs, 0);
	{
		struct ing_compact_stats st;
		struct sm_err err;

		SM_CHECK_EQ(ing_db_compact_run(d.db, "t", HOUR, T0, DAY, now,
		    &st, &err), 0);
		SM_CHECK(!st.built);
	}
	/* Queries read the tier blocks where asked (tiers.h) and never
	 * count anything twice: merges and stats at 1 h and 1 d equal the
	 * raw ones. */
	for (int k = 0; k < 2; k++) {
		int64_t width = k == 0 ? HOUR : DAY;

		SM_CHECK(merge_total(d.db, 0) == merge_total(d.db, width));
		/* Profile counts (digests differ: they hash bucket times,
		 * which the width floors). */
		SM_CHECK((uint32_t)stats_profiles(d.db, 0) ==
		    (uint32_t)stats_profiles(d.db, width));
		SM_CHECK(merge_total(d.db, width) > 0);
	}
	disk_fini(&d);
	free(w);
}

static void
test_late_data_rebuild(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w));
	struct ing_compact_job *jobs;
	int64_t now = T0 + DAY + HOUR;
	struct ing_block_meta old[2];
	uint32_t n, nb, k = 0;
	struct ing_block_meta *m;
	struct scan sc;

	SM_REQUIRE(w != NULL);
	disk_init(&d);
	day_of_minutes(&d, w);
	SM_CHECK_EQ(run_all(d.db, now), 2);
	m = blocks(d.db, &n);
	for (uint32_t i = 0; i < n; i++)
		if (m[i].tier_ms > 0 && k < 2)
			old[k++] = m[i];
	free(m);
	SM_REQUIRE(k == 2);
	/* Late data for window 0, cut into a raw block above cover_gen. */
	write_at(d.db, 3 * HOUR + 20 * SEC, w);
	write_at(d.db, 23 * HOUR + 50 * SEC, w);
	flush(d.db);
	n = plan(d.db, now, &jobs);
	SM_CHECK_EQ(n, 2);
	for (uint32_t i = 0; i < n; i++) {
		SM_CHECK(jobs[i].due);
		SM_CHECK_EQ(jobs[i].window_start, T0);
	}
	ing_compact_jobs_free(jobs, n);
	SM_CHECK_EQ(run_all(d.db, now), 2);
	/* The new ones hold the late data, the old ones left the list. */
	SM_CHECK_EQ(check_all_tiers(&d, w, &nb), 2);
	m = blocks(d.db, &n);
	for (uint32_t i = 0; i < n; i++) {
		SM_CHECK(m[i].gen != old[0].gen && m[i].gen != old[1].gen);
		if (m[i].tier_ms > 0)
			SM_CHECK(m[i].cover_gen > old[0].cover_gen);
	}
	free(m);
	/* Still on disk during the grace period; gone after it. */
	scan(d.store, &sc);
	SM_CHECK_EQ(sc.n, n + 2);
	ing_retire_purge(d.db, sm_now_ms() + DB_RETIRE_GRACE_MS + 1);
	scan(d.store, &sc);
	SM_CHECK_EQ(sc.n, n);
	for (uint32_t i = 0; i < sc.n; i++)
		SM_CHECK(sc.gens[i] != old[0].gen && sc.gens[i] != old[1].gen);
	SM_CHECK_EQ(plan(d.db, now, &jobs), 0);
	ing_compact_jobs_free(jobs, 0);

	/* Again, but "crash" between the commit and the deletion: reopen
	 * before the purge; the planner finds the superseded blocks. */
	write_at(d.db, 5 * HOUR, w);
	flush(d.db);
	SM_CHECK_EQ(run_all(d.db, now), 2);
	disk_close(&d);
	disk_open(&d);
	n = plan(d.db, now, &jobs);
	SM_CHECK_EQ(n, 2);
	for (uint32_t i = 0; i < n; i++) {
		SM_CHECK(!jobs[i].due);
		SM_CHECK_EQ(jobs[i].superseded, 1);
	}
	ing_compact_jobs_free(jobs, n);
	SM_CHECK_EQ(run_all(d.db, now), 0);
	ing_retire_purge(d.db, INT64_MAX / 2);
	SM_CHECK_EQ(check_all_tiers(&d, w, &nb), 2);
	SM_CHECK_EQ(plan(d.db, now, &jobs), 0);
	ing_compact_jobs_free(jobs, 0);
	disk_fini(&d);
	free(w);
}

/*
 * Local retention (db.h): once blocks of a window were dropped from this
 * disk (the store-gateways serve them), no tier is planned or built for
 * it -- it would be short -- and the local floor survives a reopen.
 */
static void
test_local_floor(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w));
	struct ing_compact_job *jobs;
	struct ing_compact_stats st;
	int64_t now = T0 + DAY + HOUR;
	struct ing_block_meta *m;
	struct sm_err err;
	uint64_t gen, e0;
	int64_t end;
	uint32_t n;

	SM_REQUIRE(w != NULL);
	disk_init(&d);
	day_of_minutes(&d, w);
	m = blocks(d.db, &n);
	SM_REQUIRE(n >= 2);
	gen = m[0].gen;
	end = m[0].max_t;
	free(m);
	SM_CHECK_EQ(ing_db_local_floor(d.db, "t"), INT64_MIN);
	/* A read planned before the drop passes until it ... */
	e0 = ing_db_drop_epoch(d.db, "t");
	SM_CHECK_EQ(ing_db_drop_check(d.db, "t", e0, &err), 0);
	SM_CHECK_EQ(ing_db_local_drop(d.db, "t", &gen, 1, end, &err), 0);
	SM_CHECK_EQ(ing_db_local_floor(d.db, "t"), end);
	/* ... and is refused after it (the plan may have counted on the
	 * block); one planned after it passes. */
	SM_CHECK_EQ(ing_db_drop_check(d.db, "t", e0, &err), SM_EAGAIN);
	SM_CHECKF(strstr(err.msg, "changed since the plan") != NULL, "%s",
	    err.msg);
	SM_CHECK_EQ(ing_db_drop_epoch(d.db, "t"), e0 + 1);
	SM_CHECK_EQ(ing_db_drop_check(d.db, "t", e0 + 1, &err), 0);
	/* Dropping a block no longer held moves nothing. */
	SM_CHECK_EQ(ing_db_local_drop(d.db, "t", &gen, 1, end, &err), 0);
	SM_CHECK(!ing_db_block_drop(d.db, "t", gen));
	SM_CHECK_EQ(ing_db_drop_epoch(d.db, "t"), e0 + 1);
	SM_CHECK_EQ(ing_db_drop_epoch(d.db, "u"), 0);
	m = blocks(d.db, &n);
	for (uint32_t i = 0; i < n; i++)
		SM_CHECK(m[i].gen != gen);
	free(m);
	SM_CHECK_EQ(plan(d.db, now, &jobs), 0);
	ing_compact_jobs_free(jobs, 0);
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", HOUR, T0, ING_TIER_WINDOW_MS,
	    now, &st, &err), 0);
	SM_CHECK(!st.built);
	disk_close(&d);
	disk_open(&d);
	SM_CHECK_EQ(ing_db_local_floor(d.db, "t"), end);
	SM_CHECK_EQ(plan(d.db, now, &jobs), 0);
	ing_compact_jobs_free(jobs, 0);
	SM_CHECK_EQ(run_all(d.db, now), 0);
	/* Reopened, the epoch starts elsewhere; a store-gateway's drop of a
	 * held block moves it too. */
	SM_CHECK(ing_db_drop_epoch(d.db, "t") != e0 + 1);
	e0 = ing_db_drop_epoch(d.db, "t");
	m = blocks(d.db, &n);
	SM_REQUIRE(n >= 1);
	SM_CHECK(ing_db_block_drop(d.db, "t", m[0].gen));
	free(m);
	SM_CHECK_EQ(ing_db_drop_epoch(d.db, "t"), e0 + 1);
	disk_fini(&d);
	free(w);
}

static void
test_head_holds_window(void)
{
	struct disk d;
	struct ing_compact_job *jobs;
	struct ing_compact_stats st;
	struct sm_err err;
	int64_t now = T0 + 2 * DAY;
	uint32_t n;

	disk_init(&d);
	for (int64_t t = 0; t < 2 * DAY; t += 30 * 60 * SEC)
		write_at(d.db, t, NULL);
	flush(d.db);
	/* A late write to window 0 sits in the head: only window 1. */
	write_at(d.db, 7 * HOUR, NULL);
	n = plan(d.db, now, &jobs);
	SM_CHECK_EQ(n, 2);
	for (uint32_t i = 0; i < n; i++)
		SM_CHECK_EQ(jobs[i].window_start, T0 + DAY);
	ing_compact_jobs_free(jobs, n);
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", HOUR, T0, DAY, now, &st,
	    &err), 0);
	SM_CHECK(!st.built && st.head_overlap);
	/* A window that is not over is never built. */
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", HOUR, T0 + DAY, DAY,
	    T0 + DAY + HOUR, &st, &err), 0);
	SM_CHECK(!st.built);
	/* Bad widths and windows. */
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", 7 * SEC, T0, DAY, now, &st,
	    &err), SM_EINVAL);
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", 7 * HOUR, T0, DAY, now, &st,
	    &err), SM_EINVAL);
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", HOUR, T0 + HOUR, DAY, now,
	    &st, &err), SM_EINVAL);
	SM_CHECK_EQ(ing_db_compact_plan(d.db, (int64_t[]){ 0 }, 1, DAY, now,
	    &jobs, &n, &err), SM_EINVAL);
	/* Unknown tenant: nothing to do. */
	SM_CHECK_EQ(ing_db_compact_run(d.db, "nobody", HOUR, T0, DAY, now,
	    &st, &err), 0);
	SM_CHECK(!st.built);
	flush(d.db);
	n = plan(d.db, now, &jobs);
	SM_CHECK_EQ(n, 4);
	ing_compact_jobs_free(jobs, n);
	disk_fini(&d);
}

/*
 * ing_db_compact_run of tenant t's day 0 at `tier` (0: a merge) with its
 * 1st, 2nd, ... allocation failing until a run succeeds (its stats in
 * *st).  Every failed run is SM_ENOMEM and builds nothing: the db still
 * serves its n0 blocks and the store holds before's (none of them marked
 * merged, when `unmerged`).  Returns how many runs failed.
 */
static uint32_t
compact_under_faults(struct disk *d, int64_t tier, int64_t now, uint32_t n0,
    const struct scan *before, bool unmerged, struct ing_compact_stats *st)
{
	struct scan after;
	struct sm_err err;
	uint32_t n, failures = 0;
	int rv = -1;

	for (long fault = 1; fault < 200000; fault++) {
		sm_fault_alloc_after(fault);
		rv = ing_db_compact_run(d->db, "t", tier, T0, DAY, now, st,
		    &err);
		sm_fault_alloc_after(0);
		if (rv == 0)
			break;
		failures++;
		SM_CHECK_EQ(rv, SM_ENOMEM);
		SM_CHECK(!st->built);
		free(blocks(d->db, &n));
		SM_CHECK_EQ(n, n0);
		scan(d->store, &after);
		SM_CHECK_EQ(after.n, before->n);
		for (uint32_t i = 0; unmerged && i < after.n; i++)
			SM_CHECK(!after.m[i].merged);
	}
	SM_CHECK_EQ(rv, 0);
	SM_CHECK(st->built);
	return (failures);
}

static void
test_faults_and_reopen(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w));
	struct ing_compact_job *jobs;
	struct ing_compact_stats st;
	struct sm_err err;
	int64_t now = T0 + DAY;
	struct scan before, after;
	uint32_t n0, n, nb;
	struct ing_block_meta *m;

	SM_REQUIRE(w != NULL);
	disk_init(&d);
	for (int64_t t = 0; t < DAY; t += 20 * 60 * SEC) {
		write_at(d.db, t, w);
		if (t == 12 * HOUR)
			flush(d.db);
	}
	flush(d.db);
	free(blocks(d.db, &n0));
	scan(d.store, &before);
	SM_CHECK(compact_under_faults(&d, HOUR, now, n0, &before, false,
	    &st) > 20);
	/* Nothing failed half-way: one tier block, exact. */
	SM_CHECK_EQ(check_all_tiers(&d, w, &nb), 1);
	SM_CHECK_EQ(nb, NSER * 24);
	disk_close(&d);
	/* Reopen: the scan brings the tier fields back, nothing left over. */
	disk_open(&d);
	scan(d.store, &after);
	SM_CHECK_EQ(after.n, before.n + 1);
	m = blocks(d.db, &n);
	SM_CHECK_EQ(n, n0 + 1);
	for (uint32_t i = 0; i < n; i++) {
		if (m[i].gen != st.gen)
			continue;
		SM_CHECK_EQ(m[i].tier_ms, HOUR);
		SM_CHECK_EQ(m[i].bucket_ms, HOUR);
		SM_CHECK_EQ(m[i].cover_start, T0);
		SM_CHECK_EQ(m[i].cover_end, T0 + DAY);
		SM_CHECK_EQ(m[i].cover_gen, st.cover_gen);
	}
	free(m);
	SM_CHECK_EQ(ing_db_compact_plan(d.db, widths, 1, ING_TIER_WINDOW_MS,
	    now, &jobs, &n, &err), 0);
	SM_CHECK_EQ(n, 0);
	ing_compact_jobs_free(jobs, n);
	disk_fini(&d);
	free(w);
}

/*
 * The expected side computed from the raw blocks instead: every bucket in
 * the window of every raw block with gen <= cover_gen, by hour.
 */
static void
want_from_raw(struct ing_store *st, const struct ing_block_meta *m,
    uint32_t n, const struct ing_block_meta *tier, struct want *w)
{
	memset(w, 0, sizeof(*w));
	for (uint32_t i = 0; i < n; i++) {
		const struct ing_set *set;
		const struct ing_block_tree *tr;
		struct ing_cache_ent *e1, *e2;
		struct sm_err err;

		if (m[i].tier_ms != 0 || m[i].gen > tier->cover_gen)
			continue;
		SM_REQUIRE(ing_store_block_index(st, "t", &m[i], &set, &e1,
		    &err) == 0);
		SM_REQUIRE(ing_store_block_tree(st, "t", &m[i], &tr, &e2,
		    &err) == 0);
		for (uint32_t k = 0; k < set->nseries; k++) {
			const struct ing_series *sr = set->series[k];
			struct sm_arena *a = sm_arena_create(0);
			struct ing_bucket *bk;
			int s = series_of(sr);

			SM_REQUIRE(s >= 0);
			SM_REQUIRE(ing_store_block_data(st, "t", &m[i], k, sr, a,
			    &bk, &err) == 0);
			for (uint32_t b = 0; b < sr->nb; b++) {
				int64_t h = (bk[b].t - T0) / HOUR;

				if (bk[b].t < tier->cover_start ||
				    bk[b].t >= tier->cover_end)
					continue;
				SM_REQUIRE(h >= 0 && h < NHOUR);
				w->profiles[s][h] += bk[b].profiles;
				for (uint32_t j = 0; j < bk[b].n; j++) {
					int p = path_of(tr, bk[b].node[j]);

					SM_REQUIRE(p >= 0);
					w->v[s][p][h] += bk[b].value[j];
				}
			}
			sm_arena_destroy(a);
		}
		ing_store_release(st, e1);
		ing_store_release(st, e2);
	}
}

struct writer {
	struct ing_db *db;
	struct want *w;
	atomic_int done;
};

/* Uploads every minute over two days, late ones into day 0 while day 1
 * is written, a cut every 3 hours. */
static void *
writer_main(void *arg)
{
	struct writer *wr = arg;
	struct sm_err err;

	for (int64_t t = 0; t < 2 * DAY; t += 60 * SEC) {
		write_at(wr->db, t, wr->w);
		if (t >= DAY && t % (37 * 60 * SEC) == 0)
			write_at(wr->db, t - DAY + 30 * SEC, wr->w);
		if (t % (3 * HOUR) == 0 && ing_db_flush(wr->db, &err) != 0)
			abort();
	}
	if (ing_db_flush(wr->db, &err) != 0)
		abort();
	atomic_store(&wr->done, 1);
	return (NULL);
}

static void
test_concurrent_cuts(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w)), *raw = calloc(1, sizeof(*raw));
	struct writer wr;
	pthread_t th;
	int64_t now = T0 + 2 * DAY;
	uint32_t passes = 0, checked = 0, nb;

	SM_REQUIRE(w != NULL && raw != NULL);
	disk_init(&d);
	wr.db = d.db;
	wr.w = w;
	atomic_init(&wr.done, 0);
	SM_REQUIRE(pthread_create(&th, NULL, writer_main, &wr) == 0);
	/* Jobs while writes and cuts go on: every tier block built holds
	 * exactly the raw blocks at or below its cover_gen. */
	while (!atomic_load(&wr.done)) {
		struct ing_block_meta *m;
		uint32_t n;

		(void)run_all(d.db, now);
		passes++;
		m = blocks(d.db, &n);
		for (uint32_t i = 0; i < n; i++) {
			if (m[i].tier_ms == 0)
				continue;
			want_from_raw(d.store, m, n, &m[i], raw);
			(void)check_tier(d.store, &m[i], raw);
			checked++;
		}
		free(m);
	}
	SM_REQUIRE(pthread_join(th, NULL) == 0);
	/* Then everything, against what was written. */
	(void)run_all(d.db, now);
	SM_CHECK_EQ(check_all_tiers(&d, w, &nb), 4);
	SM_CHECK_EQ(nb, 2 * NSER * 25);
	fprintf(stderr, "concurrent: %u passes, %u tier blocks checked "
	    "against raw blocks\n", passes, checked);
	SM_CHECK(passes > 0);
	disk_fini(&d);
	free(w);
	free(raw);
}

static void
test_corrupt_input_and_retention(void)
{
	struct disk d;
	struct ing_compact_stats st;
	struct ing_block_meta *m;
	struct sm_err err;
	struct scan before, after;
	int64_t now = T0 + 2 * DAY;
	uint32_t n, nret, ntier = 0;
	uint64_t first_raw = 0;

	disk_init(&d);
	for (int64_t t = 0; t < 2 * DAY; t += 30 * 60 * SEC) {
		write_at(d.db, t, NULL);
		if (t == 6 * HOUR || t == DAY + 6 * HOUR)
			flush(d.db);
	}
	flush(d.db);
	/* A damaged data part of a raw block of window 0: that window's
	 * job fails, nothing is written; window 1 is unaffected. */
	m = blocks(d.db, &n);
	first_raw = m[0].gen;
	SM_REQUIRE(m[0].tier_ms == 0 && m[0].min_t < T0 + DAY);
	free(m);
	disk_damage(&d, first_raw, 'D', 1);
	scan(d.store, &before);
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", HOUR, T0, DAY, now, &st,
	    &err), SM_ECORRUPT);
	SM_CHECK(!st.built);
	scan(d.store, &after);
	SM_CHECK_EQ(after.n, before.n);
	free(blocks(d.db, &n));
	SM_CHECK_EQ(n, before.n);
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", HOUR, T0 + DAY, DAY, now,
	    &st, &err), 0);
	SM_CHECK(st.built);
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", DAY, T0 + DAY, DAY, now,
	    &st, &err), 0);
	SM_CHECK(st.built);
	/* Retention retires tier blocks like raw ones, by max_t. */
	SM_CHECK_EQ(ing_db_retention(d.db, T0 + DAY + 6 * HOUR, NULL, 0,
	    &nret, &err), 0);
	m = blocks(d.db, &n);
	for (uint32_t i = 0; i < n; i++) {
		SM_CHECK(m[i].max_t > T0 + DAY + 6 * HOUR);
		ntier += m[i].tier_ms > 0;
	}
	free(m);
	SM_CHECK_EQ(ntier, 2);     /* window 1's, ending at T0 + 2 days */
	SM_CHECK_EQ(ing_db_retention(d.db, T0 + 2 * DAY, NULL, 0, &nret,
	    &err), 0);
	m = blocks(d.db, &n);
	for (uint32_t i = 0; i < n; i++)
		SM_CHECK_EQ(m[i].tier_ms, 0);
	free(m);
	SM_CHECK(nret >= 2);
	disk_fini(&d);
}

/* One block holding a write 5 s before the epoch and one at T0: windows
 * are floored toward -inf, and the ~20,000 empty days between them are
 * not planned (ING_COMPACT_MAX_SPAN). */
static void
test_far_apart_and_negative(void)
{
	struct disk d;
	struct ing_compact_job *jobs;
	struct ing_compact_stats st;
	struct ing_block_meta *m;
	struct sm_err err;
	int64_t now = T0 + DAY;
	uint32_t n, ntier = 0;

	disk_init(&d);
	write_at(d.db, -T0 - 5 * SEC, NULL);
	write_at(d.db, 0, NULL);
	flush(d.db);
	n = plan(d.db, now, &jobs);
	SM_CHECK_EQ(n, 4);
	for (uint32_t i = 0; i < n; i++)
		SM_CHECK(jobs[i].window_start == -DAY ||
		    jobs[i].window_start == T0);
	ing_compact_jobs_free(jobs, n);
	SM_CHECK_EQ(ing_db_compact_run(d.db, "t", HOUR, -DAY, DAY, now, &st,
	    &err), 0);
	SM_CHECK(st.built && st.series == NSER);
	m = blocks(d.db, &n);
	for (uint32_t i = 0; i < n; i++) {
		const struct ing_set *set;
		struct ing_cache_ent *e;

		if (m[i].tier_ms == 0)
			continue;
		ntier++;
		SM_CHECK_EQ(m[i].min_t, -HOUR);
		SM_CHECK_EQ(m[i].max_t, 0);
		SM_CHECK_EQ(m[i].cover_start, -DAY);
		SM_REQUIRE(ing_store_block_index(d.store, "t", &m[i], &set, &e,
		    &err) == 0);
		for (uint32_t k = 0; k < set->nseries; k++) {
			SM_CHECK_EQ(set->series[k]->nb, 1);
			SM_CHECK_EQ(set->series[k]->b[0].t, -HOUR);
			SM_CHECK_EQ(set->series[k]->b[0].profiles, 1);
		}
		ing_store_release(d.store, e);
	}
	free(m);
	SM_CHECK_EQ(ntier, 1);
	disk_fini(&d);
}

/* --- merges of small raw blocks ------------------------------------------ */

static uint64_t
mix(uint64_t a, uint64_t b)
{
	uint64_t z = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/* Linear digests of every raw block's contents: pairs by (series, bucket
 * time, stack), profiles by (series, bucket time), span values by (span,
 * series, time, stack), profile records.  Equal sums give equal digests
 * however they are split between blocks. */
struct digest {
	uint64_t pairs, profiles, spans, recs;
	int64_t vsum, ssum;
	uint64_t nprof, nrec, nbuckets;
};

static void
digest_raw(struct disk *d, struct digest *g)
{
	uint32_t n;
	struct ing_block_meta *m = blocks(d->db, &n);
	struct sm_err err;

	memset(g, 0, sizeof(*g));
	for (uint32_t i = 0; i < n; i++) {
		const struct ing_set *set;
		const struct ing_block_tree *tr;
		struct ing_cache_ent *e1, *e2;
		struct ing_span_rec *sp;
		struct ing_prof_rec *pr;
		uint32_t nsp, npr;

		if (m[i].tier_ms != 0)
			continue;
		SM_REQUIRE(ing_store_block_index(d->store, "t", &m[i], &set,
		    &e1, &err) == 0);
		SM_REQUIRE(ing_store_block_tree(d->store, "t", &m[i], &tr, &e2,
		    &err) == 0);
		for (uint32_t k = 0; k < set->nseries; k++) {
			const struct ing_series *sr = set->series[k];
			struct sm_arena *a = sm_arena_create(0);
			struct ing_bucket *bk;

			SM_REQUIRE(ing_store_block_data(d->store, "t", &m[i], k,
			    sr, a, &bk, &err) == 0);
			for (uint32_t b = 0; b < sr->nb; b++) {
				uint64_t key = mix(sr->fp, (uint64_t)bk[b].t);

				g->profiles += bk[b].profiles * key;
				g->nprof += bk[b].profiles;
				g->nbuckets++;
				for (uint32_t j = 0; j < bk[b].n; j++) {
					int p = path_of(tr, bk[b].node[j]);

					SM_REQUIRE(p >= 0);
					g->pairs += (uint64_t)bk[b].value[j] *
					    mix(key, (uint64_t)p);
					g->vsum += bk[b].value[j];
				}
			}
			sm_arena_destroy(a);
		}
		SM_REQUIRE(ing_store_block_spans(d->store, "t", &m[i], &sp, &nsp,
		    &err) == 0);
		for (uint32_t j = 0; j < nsp; j++) {
			int p = path_of(tr, sp[j].node);

			SM_REQUIRE(p >= 0);
			g->spans += (uint64_t)sp[j].value * mix(mix(sp[j].span,
			    sp[j].fp), mix((uint64_t)sp[j].t, (uint64_t)p));
			g->ssum += sp[j].value;
		}
		free(sp);
		SM_REQUIRE(ing_store_block_profiles(d->store, "t", &m[i], &pr,
		    &npr, &err) == 0);
		for (uint32_t j = 0; j < npr; j++) {
			uint64_t id;

			memcpy(&id, pr[j].id, sizeof(id));
			g->recs += mix(mix(pr[j].fp, (uint64_t)pr[j].t),
			    mix(id, (uint64_t)pr[j].total));
			g->nrec++;
		}
		free(pr);
		ing_store_release(d->store, e1);
		ing_store_release(d->store, e2);
	}
	free(m);
}

static void
digest_same(const struct digest *a, const struct digest *b)
{
	SM_CHECK_EQ(a->pairs, b->pairs);
	SM_CHECK_EQ(a->profiles, b->profiles);
	SM_CHECK_EQ(a->spans, b->spans);
	SM_CHECK_EQ(a->recs, b->recs);
	SM_CHECK_EQ(a->vsum, b->vsum);
	SM_CHECK_EQ(a->ssum, b->ssum);
	SM_CHECK_EQ(a->nprof, b->nprof);
	SM_CHECK_EQ(a->nrec, b->nrec);
}

/* Every query answer the tests compare, raw and at 1 h and 1 d. */
struct answers {
	int64_t merge[3];
	uint64_t stats[3];
};

static void
answers(struct ing_db *db, struct answers *a)
{
	static const int64_t ws[3] = { 0, HOUR, DAY };

	for (int i = 0; i < 3; i++) {
		a->merge[i] = merge_total(db, ws[i]);
		a->stats[i] = stats_profiles(db, ws[i]);
	}
}

static void
answers_same(const struct answers *a, const struct answers *b)
{
	for (int i = 0; i < 3; i++) {
		SM_CHECK_EQ(a->merge[i], b->merge[i]);
		SM_CHECK_EQ(a->stats[i], b->stats[i]);
	}
}

/* Six 10-minute blocks in hour 2 of day 0 (heads cut early) plus a late
 * write into the first one's bucket times, cut on its own (so two inputs
 * share a bucket time); one block of day 1.  Returns the raw blocks of
 * day 0. */
static uint32_t
small_blocks(struct disk *d, struct want *w)
{
	uint32_t n, k = 0;
	struct ing_block_meta *m;

	for (int64_t b = 0; b < 6; b++) {
		int64_t t0 = 2 * HOUR + b * 10 * 60 * SEC;

		for (int64_t t = t0; t < t0 + 10 * 60 * SEC; t += 2 * 60 * SEC)
			write_at(d->db, t, w);
		flush(d->db);
	}
	write_at(d->db, 2 * HOUR, w);             /* late: same bucket */
	write_at(d->db, 2 * HOUR + 5 * SEC, w);   /* and the same again */
	flush(d->db);
	write_at(d->db, DAY + HOUR, w);
	flush(d->db);
	m = blocks(d->db, &n);
	for (uint32_t i = 0; i < n; i++)
		k += m[i].tier_ms == 0 && m[i].max_t <= T0 + DAY;
	free(m);
	return (k);
}

/* Run the merge job of day 0; returns its stats. */
static void
merge_day0(struct disk *d, int64_t now, struct ing_compact_stats *st)
{
	struct sm_err err;
	int rv = ing_db_compact_run(d->db, "t", 0, T0, DAY, now, st, &err);

	SM_CHECK_EQ(rv, 0);
	if (rv != 0)
		fprintf(stderr, "merge: %s\n", err.msg);
}

static void
test_merge_exact(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w));
	struct ing_compact_job *jobs;
	struct ing_compact_stats st;
	struct digest g0, g1;
	struct answers a0, a1;
	struct ing_block_meta *m;
	int64_t now = T0 + 2 * DAY;
	uint64_t max_gen = 0;
	uint32_t n, nin, nb, nday0 = 0;

	SM_REQUIRE(w != NULL);
	merge_max = 16 << 20;
	with_spans = true;
	disk_init(&d);
	nin = small_blocks(&d, w);
	SM_CHECK_EQ(nin, 7);
	m = blocks(d.db, &n);
	for (uint32_t i = 0; i < n; i++)
		if (m[i].max_t <= T0 + DAY)
			max_gen = SM_MAX(max_gen, m[i].gen);
	free(m);
	digest_raw(&d, &g0);
	SM_CHECK(g0.ssum != 0 && g0.nrec > 0);
	answers(d.db, &a0);
	/* The plan: a merge job for day 0 first, then its tier jobs; day 1
	 * has one block only. */
	n = plan(d.db, now, &jobs);
	SM_REQUIRE(n >= 3);
	SM_CHECK_EQ(jobs[0].tier_ms, 0);
	SM_CHECK_EQ(jobs[0].window_start, T0);
	SM_CHECK_EQ(jobs[0].nblocks, 7);
	SM_CHECK(jobs[0].due);
	for (uint32_t i = 1; i < n; i++)
		SM_CHECK(jobs[i].tier_ms > 0);
	ing_compact_jobs_free(jobs, n);

	merge_day0(&d, now, &st);
	SM_CHECK(st.built);
	SM_CHECK_EQ(st.inputs, 7);
	SM_CHECK_EQ(st.cover_gen, max_gen);
	SM_CHECK(st.gen > max_gen);
	SM_CHECK(st.bytes_written < st.bytes_read);
	m = blocks(d.db, &n);
	for (uint32_t i = 0; i < n; i++) {
		if (m[i].max_t > T0 + DAY)
			continue;
		nday0++;
		SM_CHECK_EQ(m[i].gen, st.gen);
		SM_CHECK_EQ(m[i].tier_ms, 0);
		SM_CHECK_EQ(m[i].bucket_ms, 10 * SEC);
		SM_CHECK_EQ(m[i].cover_gen, max_gen);
		SM_CHECK_EQ(ing_block_cov_gen(&m[i]), max_gen);
		SM_CHECK_EQ(m[i].min_t, T0 + 2 * HOUR);
		SM_CHECK(m[i].max_t <= T0 + 3 * HOUR);     /* one clock hour */
		SM_CHECK(m[i].nspans > 0 && m[i].nprofiles > 0);
	}
	free(m);
	SM_CHECK_EQ(nday0, 1);
	digest_raw(&d, &g1);
	digest_same(&g0, &g1);
	SM_CHECK(g1.nbuckets < g0.nbuckets);    /* the shared times merged */
	answers(d.db, &a1);
	answers_same(&a0, &a1);
	/* Nothing left to merge; tiers built after the merge are exact. */
	n = plan(d.db, now, &jobs);
	for (uint32_t i = 0; i < n; i++)
		SM_CHECK(jobs[i].tier_ms > 0);
	ing_compact_jobs_free(jobs, n);
	SM_CHECK_EQ(run_all(d.db, now), 4);
	SM_CHECK_EQ(check_all_tiers(&d, w, &nb), 4);
	answers(d.db, &a1);
	answers_same(&a0, &a1);
	SM_CHECK_EQ(plan(d.db, now, &jobs), 0);
	ing_compact_jobs_free(jobs, 0);
	disk_fini(&d);
	merge_max = 0;
	with_spans = false;
	free(w);
}

/* small_blocks in a fresh d, then their tiers only (merging is off while
 * they are built); *a0 is what the db answers then. */
static void
tiered_small_blocks(struct disk *d, struct want *w, int64_t now,
    struct answers *a0)
{
	disk_init(d);
	(void)small_blocks(d, w);
	d->db->cfg.merge_max_bytes = 0;
	SM_CHECK_EQ(run_all(d->db, now), 4);
	d->db->cfg.merge_max_bytes = merge_max;
	answers(d->db, a0);
}

/* Tiers built BEFORE the merge cover the merged block (no double count);
 * a raw block above a tier's cover_gen keeps the merge out until the
 * tier is rebuilt. */
static void
test_merge_after_tiers(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w));
	struct ing_compact_job *jobs;
	struct ing_compact_stats st;
	struct answers a0, a1;
	int64_t now = T0 + 2 * DAY;
	uint32_t n, nb;

	SM_REQUIRE(w != NULL);
	merge_max = 16 << 20;
	tiered_small_blocks(&d, w, now, &a0);
	/* Late data for hour 2 of day 0 above the tiers' cover_gen: the
	 * inputs straddle it, so no merge is planned and a forced run is a
	 * no-op. */
	write_at(d.db, 2 * HOUR + 55 * 60 * SEC, w);
	flush(d.db);
	n = plan(d.db, now, &jobs);
	for (uint32_t i = 0; i < n; i++)
		SM_CHECK(jobs[i].tier_ms > 0);
	SM_CHECK_EQ(n, 2);                 /* day 0's tiers are due again */
	ing_compact_jobs_free(jobs, n);
	merge_day0(&d, now, &st);
	SM_CHECK(!st.built);
	/* Without the late block the merge proceeds (a fresh db). */
	disk_fini(&d);
	tiered_small_blocks(&d, w, now, &a0);
	merge_day0(&d, now, &st);
	SM_CHECK(st.built);
	answers(d.db, &a1);
	answers_same(&a0, &a1);
	/* The old tiers still cover it: nothing due. */
	SM_CHECK_EQ(plan(d.db, now, &jobs), 0);
	ing_compact_jobs_free(jobs, 0);
	memset(w, 0, sizeof(*w));
	disk_fini(&d);
	merge_max = 0;
	free(w);
	(void)nb;
}

/* Allocation faults leave the inputs served; a reopen after the commit
 * (tombstoned inputs still on disk) serves the merged block only. */
static void
test_merge_faults_and_reopen(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w));
	struct ing_compact_stats st;
	struct digest g0, g1;
	struct answers a0, a1;
	struct scan before, after;
	int64_t now = T0 + 2 * DAY;
	uint32_t n0, n, nmerged = 0;
	struct ing_block_meta *m;

	SM_REQUIRE(w != NULL);
	merge_max = 16 << 20;
	with_spans = true;
	disk_init(&d);
	(void)small_blocks(&d, w);
	free(blocks(d.db, &n0));
	scan(d.store, &before);
	digest_raw(&d, &g0);
	answers(d.db, &a0);
	SM_CHECK(compact_under_faults(&d, 0, now, n0, &before, true,
	    &st) > 20);
	answers(d.db, &a1);
	answers_same(&a0, &a1);
	free(blocks(d.db, &n));
	SM_CHECK_EQ(n, n0 - 6);
	/* On disk: the merged block and the 7 inputs, tombstoned. */
	scan(d.store, &after);
	SM_CHECK_EQ(after.n, before.n + 1);
	for (uint32_t i = 0; i < after.n; i++)
		nmerged += after.m[i].merged;
	SM_CHECK_EQ(nmerged, 7);
	/* "Crash" before the deletion: reopen with the inputs' parts and
	 * their tombstones on disk.  Only the merged block is served. */
	disk_close(&d);
	disk_open(&d);
	m = blocks(d.db, &n);
	SM_CHECK_EQ(n, n0 - 6);
	for (uint32_t i = 0; i < n; i++)
		SM_CHECK(m[i].gen == st.gen || m[i].min_t >= T0 + DAY);
	free(m);
	digest_raw(&d, &g1);
	digest_same(&g0, &g1);
	answers(d.db, &a1);
	answers_same(&a0, &a1);
	/* The open queued the inputs for deletion: they go, tombstones
	 * with them. */
	ing_retire_purge(d.db, INT64_MAX / 2);
	scan(d.store, &after);
	SM_CHECK_EQ(after.n, n);
	for (uint32_t i = 0; i < after.n; i++)
		SM_CHECK(!after.m[i].merged);
	disk_close(&d);
	disk_open(&d);
	answers(d.db, &a1);
	answers_same(&a0, &a1);
	disk_fini(&d);
	merge_max = 0;
	with_spans = false;
	free(w);
}

/* A head of generation 9 with `bucket_ms` buckets, holding one write at
 * 5 h 20 s. */
static struct ing_head *
head_of_one_write(int64_t bucket_ms)
{
	struct sm_buf raw = SM_BUF_INIT;
	Smolder__V1__Request *req;
	struct ing_head *h;
	struct sm_err err;
	uint32_t ns, np;

	mkwrite(5 * HOUR + 20 * SEC, NULL, &raw);
	req = smolder__v1__request__unpack(NULL, raw.len, (uint8_t *)raw.b);
	SM_REQUIRE(req != NULL);
	SM_REQUIRE(ing_head_create(9, bucket_ms, &h) == 0);
	SM_REQUIRE(ing_head_write(h, req->write, 0, &ns, &np, &err) == 0);
	smolder__v1__request__free_unpacked(req, NULL);
	sm_buf_fini(&raw);
	return (h);
}

/* The encoders over a head, through its encoder input (block.h). */
static int
enc_tier(struct ing_head *h, int64_t ws, int64_t we, uint64_t cover_gen,
    struct ing_block_enc *e, struct sm_err *err)
{
	struct ing_block_src src;
	int rv;

	SM_REQUIRE(ing_head_block_src(h, &src, err) == 0);
	rv = ing_block_encode_tier(&src, 3, ws, we, cover_gen, e, err);
	ing_head_block_src_fini(&src);
	return (rv);
}

static int
enc_merged(struct ing_head *h, uint64_t cover_gen, struct ing_block_enc *e,
    struct sm_err *err)
{
	struct ing_block_src src;
	int rv;

	SM_REQUIRE(ing_head_block_src(h, &src, err) == 0);
	rv = cover_gen == UINT64_MAX ? ing_block_encode(&src, 3, e, err) :
	    ing_block_encode_merged(&src, 3, cover_gen, e, err);
	ing_head_block_src_fini(&src);
	return (rv);
}

/* ing_block_encode_tier refuses what breaks the tier rules (SM_EINVAL:
 * a caller's mistake) and writes the fields a decode gives back. */
static void
test_encode_tier_rules(void)
{
	struct ing_block_enc e;
	struct ing_block_meta m;
	struct ing_head *h = head_of_one_write(HOUR);
	struct sm_err err;

	/* A head from writes carries profile records: not a tier block. */
	SM_CHECK_EQ(enc_tier(h, T0, T0 + DAY, 4, &e, &err),
	    SM_EINVAL);
	ing_profs_fini(&h->profs);
	/* Buckets outside the window, an unaligned window. */
	SM_CHECK_EQ(enc_tier(h, T0 + DAY, T0 + 2 * DAY, 4, &e, &err),
	    SM_EINVAL);
	SM_CHECK(strstr(err.msg, "tier") != NULL);
	SM_CHECK_EQ(enc_tier(h, T0 + 1, T0 + DAY, 4, &e, &err), SM_EINVAL);
	SM_CHECK_EQ(enc_tier(h, T0, T0 + DAY, 4, &e, &err), 0);
	SM_CHECK_EQ(ing_block_meta_decode((const uint8_t *)e.m.b, e.m.len, &m,
	    &err), 0);
	SM_CHECK(m.gen == 9 && m.tier_ms == HOUR && m.bucket_ms == HOUR &&
	    m.min_t == T0 + 5 * HOUR && m.max_t == T0 + 6 * HOUR &&
	    m.cover_start == T0 && m.cover_end == T0 + DAY &&
	    m.cover_gen == 4);
	ing_block_enc_fini(&e);
	ing_head_unref(h);
}

/* ing_block_encode_merged: a raw block whose cover_gen (> 0, below its
 * gen) decodes back with spans and profiles kept; the rest is refused. */
static void
test_encode_merged_rules(void)
{
	struct ing_block_enc e;
	struct ing_block_meta m;
	struct ing_head *h = head_of_one_write(10 * SEC);
	struct sm_err err;

	SM_CHECK_EQ(enc_merged(h, 0, &e, &err), SM_EINVAL);
	SM_CHECK_EQ(enc_merged(h, 9, &e, &err), SM_EINVAL);
	SM_CHECK_EQ(enc_merged(h, 4, &e, &err), 0);
	SM_CHECK_EQ(ing_block_meta_decode((const uint8_t *)e.m.b, e.m.len, &m,
	    &err), 0);
	SM_CHECK(m.gen == 9 && m.tier_ms == 0 && m.bucket_ms == 10 * SEC &&
	    m.cover_start == 0 && m.cover_end == 0 && m.cover_gen == 4 &&
	    m.nprofiles == NSER);
	SM_CHECK_EQ(ing_block_cov_gen(&m), 4);
	SM_CHECK_EQ(ing_block_meta_from_index((const uint8_t *)e.index.b,
	    e.index.len, &m, &err), 0);
	SM_CHECK_EQ(m.cover_gen, 4);
	ing_block_enc_fini(&e);
	/* A plain raw block counts as its own gen. */
	SM_CHECK_EQ(enc_merged(h, UINT64_MAX, &e, &err), 0);
	SM_CHECK_EQ(ing_block_meta_decode((const uint8_t *)e.m.b, e.m.len, &m,
	    &err), 0);
	SM_CHECK_EQ(ing_block_cov_gen(&m), 9);
	ing_block_enc_fini(&e);
	ing_head_unref(h);
}

/* Queries running while merges swap blocks: every answer is the same. */
struct qloop {
	struct ing_db *db;
	struct answers want;
	atomic_bool stop;
	uint32_t n, bad;
};

static void *
qloop_main(void *arg)
{
	struct qloop *q = arg;

	while (!atomic_load(&q->stop)) {
		int64_t v = merge_total(q->db, 0);
		uint64_t st = stats_profiles(q->db, HOUR);

		q->bad += v != q->want.merge[0] || st != q->want.stats[1];
		q->n++;
	}
	return (NULL);
}

static void
test_merge_during_queries(void)
{
	struct disk d;
	struct want *w = calloc(1, sizeof(*w));
	struct ing_compact_stats st;
	struct qloop q;
	pthread_t th;
	int64_t now = T0 + 2 * DAY;

	SM_REQUIRE(w != NULL);
	merge_max = 16 << 20;
	disk_init(&d);
	memset(&q, 0, sizeof(q));
	q.db = d.db;
	/* Three rounds: small blocks, merge (the merged block joins the
	 * next round's inputs while below the limit). */
	for (int round = 0; round < 3; round++) {
		for (int64_t t = round * HOUR; t < round * HOUR + 30 * 60 * SEC;
		    t += 5 * 60 * SEC) {
			write_at(d.db, t, w);
			if (t % (10 * 60 * SEC) == 0)
				flush(d.db);
		}
		flush(d.db);
		answers(d.db, &q.want);
		atomic_store(&q.stop, false);
		SM_REQUIRE(pthread_create(&th, NULL, qloop_main, &q) == 0);
		merge_day0(&d, now, &st);
		usleep(20000);
		atomic_store(&q.stop, true);
		pthread_join(th, NULL);
		SM_CHECK(st.built);
		SM_CHECK(st.inputs >= 2);
		ing_retire_purge(d.db, INT64_MAX / 2);
	}
	SM_CHECK(q.n > 0);
	SM_CHECK_EQ(q.bad, 0);
	disk_fini(&d);
	merge_max = 0;
	free(w);
}

SM_TEST_MAIN(
	{ "tier blocks of a multi-day history are exact", test_history_exact },
	{ "late data: the window is rebuilt, the old block retired",
	    test_late_data_rebuild },
	{ "below the local floor no tier is planned or built",
	    test_local_floor },
	{ "a head with data in a window keeps it out of the plan",
	    test_head_holds_window },
	{ "allocation faults leave nothing; reopen keeps the tier fields",
	    test_faults_and_reopen },
	{ "jobs during writes and cuts: exact up to cover_gen",
	    test_concurrent_cuts },
	{ "a damaged input fails its job only; retention retires tiers",
	    test_corrupt_input_and_retention },
	{ "timestamps far apart and before the epoch",
	    test_far_apart_and_negative },
	{ "tier encoding refuses broken rules, decodes back",
	    test_encode_tier_rules },
	{ "merged encoding: cover_gen on a raw block, decoded back",
	    test_encode_merged_rules },
	{ "merging small raw blocks keeps contents and answers exact",
	    test_merge_exact },
	{ "tiers built before a merge still cover it; a straddled "
	    "cover_gen keeps the merge out", test_merge_after_tiers },
	{ "merge: allocation faults leave the inputs; reopen serves the "
	    "merged block only", test_merge_faults_and_reopen },
	{ "queries during merges give the same answers",
	    test_merge_during_queries },
)
