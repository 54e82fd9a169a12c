/*
 * complete_test.c -- the complete-answer rule of complete.c: which data
 * ranges the witness records call missing (a member that left, a wiped
 * disk, covered or not by the bucket, a fold or a restore), and how the
 * missing replicas count against the read budget, point by point and in
 * zones.
 */
#include <stdio.h>
#include <string.h>

#include "sm_test.h"
#include "common/ring.h"
#include "querier/qry_int.h"

#define INC_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define INC_A2 "a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2"
#define INC_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define INC_C "cccccccccccccccccccccccccccccccc"
#define INC_D "dddddddddddddddddddddddddddddddd"
#define INC_E "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
#define FOLD "ffffffffffffffffffffffffffffffff"

struct rec {
	Smolder__V1__Witness w;
	Smolder__V1__WitnessPeer p[8], *pp[8];
	Smolder__V1__Coverage c[4], *cp[4];
};

static void
rec_init(struct rec *r)
{
	memset(r, 0, sizeof(*r));
	smolder__v1__witness__init(&r->w);
	r->w.peers = r->pp;
	r->w.restored = r->cp;
}

static void
rec_peer(struct rec *r, const char *id, const char *zone, const char *inc,
    int64_t first, int64_t last)
{
	Smolder__V1__WitnessPeer *p = &r->p[r->w.n_peers];

	smolder__v1__witness_peer__init(p);
	p->id = (char *)id;
	p->zone = (char *)zone;
	p->incarnation = (char *)inc;
	p->first_ms = first;
	p->last_ms = last;
	r->pp[r->w.n_peers++] = p;
}

static void
rec_restored(struct rec *r, const char *inc, int64_t min, int64_t max)
{
	Smolder__V1__Coverage *c = &r->c[r->w.n_restored];

	smolder__v1__coverage__init(c);
	c->incarnation = (char *)inc;
	c->min_ms = min;
	c->max_ms = max;
	r->cp[r->w.n_restored++] = c;
}

static struct sm_ring_snap *
ring(const char *const *ids, uint32_t n, const char *const *zones)
{
	struct sm_ring_snap *s = NULL;

	SM_REQUIRE(sm_ring_snap_build_ids(ids, n, 16, 3, NULL, &s) == 0);
	if (zones != NULL)
		SM_REQUIRE(sm_ring_snap_set_zones(s, zones) == 0);
	return (s);
}

/* The snapshot sorts members by id: the record of member `id`. */
static uint32_t
idx(const struct sm_ring_snap *s, const char *id)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (strcmp(s->id[i], id) == 0)
			return (i);
	SM_REQUIRE(0);
	return (0);
}

/*
 * Scale-in without a bucket: d and e left; c, a and b remember sharing
 * writes with them over [1000, 5000] and [3000, 9000].  Both missing at
 * [3000, 5000] (two units > RF 3's budget of one), one elsewhere.
 */
static void
test_scale_in(void)
{
	const char *ids[] = { "a", "b", "c" };
	struct sm_ring_snap *s = ring(ids, 3, NULL);
	struct rec r[3];
	struct qry_wit_in wi[3];
	struct qry_gap *g = NULL;
	uint8_t lost[3] = { 0 };
	uint32_t n = 0;
	char why[512];

	for (int i = 0; i < 3; i++)
		rec_init(&r[i]);
	rec_peer(&r[0], "d", "", INC_D, 1000, 5000);
	rec_peer(&r[1], "d", "", INC_D, 1500, 4000);
	rec_peer(&r[2], "e", "", INC_E, 3000, 9000);
	wi[idx(s, "a")] = (struct qry_wit_in){ &r[0].w, INC_A };
	wi[idx(s, "b")] = (struct qry_wit_in){ &r[1].w, INC_B };
	wi[idx(s, "c")] = (struct qry_wit_in){ &r[2].w, INC_C };
	SM_CHECK_EQ(qry_gaps_find(s, wi, NULL, 0, 0, 20000, &g, &n), 0);
	SM_CHECK_EQ(n, 2);
	SM_CHECK_EQ(qry_gaps_units(s, lost, g, n, why, sizeof(why)), 2);
	SM_CHECKF(strstr(why, "d (incarnation dddddddd, not in the ring)") !=
	    NULL && strstr(why, "e (") != NULL, "%s", why);
	sm_free(g);
	/* A range that only d's data is in: one unit, within budget. */
	SM_CHECK_EQ(qry_gaps_find(s, wi, NULL, 0, 0, 2500, &g, &n), 0);
	SM_CHECK_EQ(n, 1);
	SM_CHECK_EQ(g[0].from, 1000);
	SM_CHECK_EQ(g[0].to, 2500);
	SM_CHECK_EQ(qry_gaps_units(s, lost, g, n, NULL, 0), 1);
	/* ... unless a member is down as well. */
	lost[idx(s, "b")] = 1;
	SM_CHECK_EQ(qry_gaps_units(s, lost, g, n, why, sizeof(why)), 2);
	SM_CHECKF(strstr(why, "b (down)") != NULL, "%s", why);
	sm_free(g);
	/* After their data: nothing missing. */
	SM_CHECK_EQ(qry_gaps_find(s, wi, NULL, 0, 9001, 20000, &g, &n), 0);
	SM_CHECK_EQ(n, 0);
	sm_free(g);
	sm_ring_release(s);
}

/*
 * With the bucket: d's source covers [0, 4999] and the fold [5000, 6999],
 * so d is whole; e (no source) misses [3000, 4999] and [7000, 9000].
 */
static void
test_bucket_covers(void)
{
	const char *ids[] = { "a", "b", "c" };
	struct sm_ring_snap *s = ring(ids, 3, NULL);
	struct rec r;
	struct qry_wit_in wi[3] = { { NULL, INC_A }, { NULL, INC_B },
	    { NULL, INC_C } };
	struct qry_fan_src src[3] = {
		{ .id = INC_D, .min_t = 0, .max_t = 4999 },
		{ .id = FOLD, .min_t = 5000, .max_t = 6999 },
		{ .id = INC_A, .min_t = 0, .max_t = 100000 },
	};
	struct qry_gap *g = NULL;
	uint8_t lost[3] = { 0 };
	uint32_t n = 0;

	rec_init(&r);
	rec_peer(&r, "d", "", INC_D, 1000, 5000);
	rec_peer(&r, "e", "", INC_E, 3000, 9000);
	wi[idx(s, "a")].w = &r.w;
	SM_CHECK_EQ(qry_gaps_find(s, wi, src, 3, 0, 20000, &g, &n), 0);
	SM_CHECK_EQ(n, 2);
	SM_CHECK(strcmp(g[0].key, "m:e") == 0 && strcmp(g[1].key, "m:e") == 0);
	SM_CHECK_EQ(g[0].from, 3000);
	SM_CHECK_EQ(g[0].to, 4999);
	SM_CHECK_EQ(g[1].from, 7000);
	SM_CHECK_EQ(g[1].to, 9000);
	SM_CHECK_EQ(qry_gaps_units(s, lost, g, n, NULL, 0), 1);
	sm_free(g);
	sm_ring_release(s);
}

/*
 * A wiped disk: member a now runs INC_A2; its peers remember INC_A over
 * [0, 8000].  It restored its blocks up to 6000: [6001, 8000] is missing
 * (the unshipped tail); with b's old incarnation missing at [7000, 9000]
 * too, two units at 7000.  Disjoint tails are one unit each.
 */
static void
test_wiped(void)
{
	const char *ids[] = { "a", "b", "c" };
	struct sm_ring_snap *s = ring(ids, 3, NULL);
	struct rec ra, rc;
	struct qry_wit_in wi[3];
	struct qry_gap *g = NULL;
	uint8_t lost[3] = { 0 };
	uint32_t n = 0;

	rec_init(&ra);
	rec_init(&rc);
	rec_restored(&ra, INC_A, 0, 6000);
	rec_peer(&rc, "a", "", INC_A, 0, 8000);
	rec_peer(&rc, "a", "", INC_A2, 8500, 20000);   /* serving: no gap */
	rec_peer(&rc, "b", "", "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0", 0, 9000);
	wi[idx(s, "a")] = (struct qry_wit_in){ &ra.w, INC_A2 };
	wi[idx(s, "b")] = (struct qry_wit_in){ NULL, INC_B };
	wi[idx(s, "c")] = (struct qry_wit_in){ &rc.w, INC_C };
	SM_CHECK_EQ(qry_gaps_find(s, wi, NULL, 0, 0, 20000, &g, &n), 0);
	SM_CHECK_EQ(n, 2);
	SM_CHECK_EQ(qry_gaps_units(s, lost, g, n, NULL, 0), 2);
	sm_free(g);
	/* b restored up to 9000 as well: only a's tail, one unit. */
	rec_restored(&ra, "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0", 0, 9000);
	SM_CHECK_EQ(qry_gaps_find(s, wi, NULL, 0, 0, 20000, &g, &n), 0);
	SM_CHECK_EQ(n, 1);
	SM_CHECK_EQ(g[0].from, 6001);
	SM_CHECK_EQ(g[0].to, 8000);
	SM_CHECKF(strstr(g[0].who, "its disk was replaced") != NULL, "%s",
	    g[0].who);
	SM_CHECK_EQ(qry_gaps_units(s, lost, g, n, NULL, 0), 1);
	sm_free(g);
	sm_ring_release(s);
}

/* Zone-aware: gaps and lost members of one zone are one unit. */
static void
test_zones(void)
{
	const char *ids[] = { "a", "b", "c", "d", "e", "f" };
	const char *zones[] = { "z1", "z1", "z2", "z2", "z3", "z3" };
	struct sm_ring_snap *s = ring(ids, 6, zones);
	struct rec r;
	struct qry_wit_in wi[6] = { { 0 } };
	struct qry_gap *g = NULL;
	uint8_t lost[6] = { 0 };
	uint32_t n = 0;

	SM_REQUIRE(s->zone_aware);
	rec_init(&r);
	rec_peer(&r, "g", "z1", INC_D, 0, 5000);   /* left zone z1 */
	wi[idx(s, "c")].w = &r.w;
	SM_CHECK_EQ(qry_gaps_find(s, wi, NULL, 0, 0, 20000, &g, &n), 0);
	SM_CHECK_EQ(n, 1);
	lost[idx(s, "a")] = 1;                      /* down, zone z1 too */
	SM_CHECK_EQ(qry_gaps_units(s, lost, g, n, NULL, 0), 1);
	lost[idx(s, "e")] = 1;                      /* and one of z3 */
	SM_CHECK_EQ(qry_gaps_units(s, lost, g, n, NULL, 0), 2);
	sm_free(g);
	sm_ring_release(s);
}

SM_TEST_MAIN(
	{ "scale-in: the members that left are missing where their data "
	    "is", test_scale_in },
	{ "the bucket's sources and the fold cover what they hold",
	    test_bucket_covers },
	{ "a wiped disk: its restored blocks cover, the tail is missing",
	    test_wiped },
	{ "zone-aware: one unit per zone", test_zones },
)
