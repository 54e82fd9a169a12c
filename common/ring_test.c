/*
 * ring_test.c -- the ring: balance of token placement, replica sets and
 * unhealthy members, consistency when a member joins, member lists, and
 * live health probing of in-process members (ACTIVE, JOINING, missed
 * heartbeats, id conflicts, DNS discovery).  The live rings wait on a
 * manual clock (common/clock.h): the test runs probe rounds by moving it,
 * so a missed heartbeat is a clock step, not a wait for the timeout.
 */
#include "sm_test.h"
#include "sm_test_clock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ring.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t
next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (rng);
}

/* Members "ingester-0" .. */
static struct sm_ring_snap *
ring_of(uint32_t n, uint32_t tokens, uint32_t rf, const uint8_t *healthy)
{
	char **ids = calloc(n, sizeof(*ids));
	struct sm_ring_snap *s = NULL;

	for (uint32_t i = 0; i < n; i++) {
		ids[i] = malloc(32);
		snprintf(ids[i], 32, "ingester-%u", i);
	}
	if (sm_ring_snap_build_ids((const char *const *)ids, n, tokens, rf,
	    healthy, &s) != 0)
		s = NULL;
	for (uint32_t i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
	return (s);
}

/* A random series key, computed the way the distributor does. */
static uint32_t
random_series_key(void)
{
	char svc[32], pod[32], ty[32];
	struct sm_label ls[4];

	snprintf(svc, sizeof(svc), "svc-%llu",
	    (unsigned long long)(next_rand() % 5000));
	snprintf(pod, sizeof(pod), "pod-%llx",
	    (unsigned long long)next_rand());
	snprintf(ty, sizeof(ty), "cpu-%llu",
	    (unsigned long long)(next_rand() % 3));
	ls[0] = (struct sm_label){ "__name__", "process_cpu" };
	ls[1] = (struct sm_label){ "__type__", ty };
	ls[2] = (struct sm_label){ "pod", pod };
	ls[3] = (struct sm_label){ "service_name", svc };
	return (sm_ring_key("tenant-1", ls, 4));
}

static double
max_over_mean(uint32_t rf, uint32_t nseries)
{
	struct sm_ring_snap *s = ring_of(100, 128, rf, NULL);
	uint64_t *load = calloc(100, sizeof(*load)), total = 0, max = 0;
	uint32_t rep[8];

	if (s == NULL || load == NULL)
		return (99);
	for (uint32_t k = 0; k < nseries; k++) {
		uint32_t n = sm_ring_replicas(s, random_series_key(), NULL, rep);

		for (uint32_t j = 0; j < n; j++)
			load[rep[j]]++;
		total += n;
	}
	for (uint32_t i = 0; i < 100; i++)
		max = load[i] > max ? load[i] : max;
	free(load);
	sm_ring_release(s);
	return ((double)max / ((double)total / 100));
}

/*
 * Acceptance: 100 members x 128 tokens, 1M random series: max/mean load
 * <= 1.15 at the default RF=3.  At RF=1 the same ring gives ~1.2: 128
 * random tokens leave each member's share with a CV of 1/sqrt(128), which
 * no placement derived from a member's own id alone can beat; replication
 * averages three arcs per token and brings it under the bound.
 */
static void
test_balance_100x128(void)
{
	double rf3 = max_over_mean(3, 1000000);
	double rf1 = max_over_mean(1, 1000000);

	printf("# max/mean load, 100 members x 128 tokens, 1M series: "
	    "RF=3 %.3f, RF=1 %.3f\n", rf3, rf1);
	SM_CHECK(rf3 <= 1.15);
	SM_CHECK(rf1 <= 1.35);
}

static void
test_replicas_distinct_and_skip_unhealthy(void)
{
	uint8_t healthy[5] = { 1, 1, 0, 1, 1 };
	struct sm_ring_snap *all = ring_of(5, 128, 3, NULL);
	struct sm_ring_snap *some = ring_of(5, 128, 3, healthy);
	uint32_t a[8], b[8];

	SM_REQUIRE(all != NULL && some != NULL);
	SM_CHECK_EQ(all->quorum, 2);
	SM_CHECK_EQ(some->nhealthy, 4);
	for (int k = 0; k < 10000; k++) {
		uint32_t key = (uint32_t)next_rand();
		uint32_t na = sm_ring_replicas(all, key, NULL, a);
		uint32_t nb = sm_ring_replicas(some, key, NULL, b);
		int had2 = 0;

		SM_CHECK_EQ(na, 3);
		SM_CHECK_EQ(nb, 3);
		SM_CHECK(a[0] != a[1] && a[1] != a[2] && a[0] != a[2]);
		for (uint32_t j = 0; j < 3; j++) {
			SM_CHECK(b[j] != 2);
			had2 |= a[j] == 2;
		}
		/* The healthy members of the full set stay, in order; the
		 * next owner fills the dead member's place. */
		if (!had2)
			SM_CHECK(memcmp(a, b, 3 * sizeof(*a)) == 0);
	}
	sm_ring_release(all);
	sm_ring_release(some);
}

static void
test_too_few_healthy(void)
{
	uint8_t healthy[3] = { 1, 0, 0 };
	struct sm_ring_snap *s = ring_of(3, 16, 3, healthy);
	uint32_t r[4];

	SM_REQUIRE(s != NULL);
	SM_CHECK(!sm_ring_writable(s));
	SM_CHECK_EQ(sm_ring_replicas(s, 12345, NULL, r), 1);
	SM_CHECK_EQ(r[0], 0);
	SM_CHECK_EQ(sm_ring_max_read_errors(s), 1);
	sm_ring_release(s);
}

/*
 * Zones: 3 zones x 2 members, RF 3.  Every series' replicas are in three
 * zones; with a whole zone down, in the two left (and the down zone's
 * members are its owners, for hints); losing a zone is one read unit,
 * losing members of two zones two.  With two zones (fewer than RF) the
 * ring is not zone-aware and places as before.
 */
static void
test_zones(void)
{
	static const char *const z3[6] = { "a", "a", "b", "b", "c", "c" };
	static const char *const z2[6] = { "a", "a", "a", "b", "b", "b" };
	uint8_t healthy[6] = { 1, 1, 1, 1, 0, 0 };
	struct sm_ring_snap *all = ring_of(6, 128, 3, NULL);
	struct sm_ring_snap *down = ring_of(6, 128, 3, healthy);
	struct sm_ring_snap *two = ring_of(6, 128, 3, NULL);
	struct sm_ring_snap *plain = ring_of(6, 128, 3, NULL);
	uint8_t lost[6] = { 0 };
	uint32_t r[8], o[8], p[8];

	SM_REQUIRE(all != NULL && down != NULL && two != NULL &&
	    plain != NULL);
	SM_CHECK(!all->zone_aware);
	SM_REQUIRE(sm_ring_snap_set_zones(all, z3) == 0);
	SM_REQUIRE(sm_ring_snap_set_zones(down, z3) == 0);
	SM_REQUIRE(sm_ring_snap_set_zones(two, z2) == 0);
	SM_CHECK(all->zone_aware && all->nzones == 3);
	SM_CHECK(!two->zone_aware && two->nzones == 2);
	for (int k = 0; k < 10000; k++) {
		uint32_t key = (uint32_t)next_rand();
		uint32_t n = sm_ring_replicas(all, key, NULL, r), zones = 0;

		SM_CHECK_EQ(n, 3);
		for (uint32_t j = 0; j < n; j++)
			zones |= 1u << all->zix[r[j]];
		SM_CHECK_EQ(zones, 7u);
		n = sm_ring_replicas(down, key, NULL, r);
		SM_CHECK_EQ(n, 2);
		SM_CHECK(down->zix[r[0]] != down->zix[r[1]] && r[0] < 4 &&
		    r[1] < 4);
		SM_CHECK_EQ(sm_ring_owners(down, key, NULL, o), 3);
		SM_CHECK(o[0] >= 4 || o[1] >= 4 || o[2] >= 4);
		/* fewer zones than RF: placement as without zones */
		SM_CHECK_EQ(sm_ring_replicas(two, key, NULL, r), 3);
		SM_CHECK_EQ(sm_ring_replicas(plain, key, NULL, p), 3);
		SM_CHECK(memcmp(r, p, 3 * sizeof(*r)) == 0);
	}
	lost[4] = lost[5] = 1;
	SM_CHECK_EQ(sm_ring_read_units(all, lost), 1);
	SM_CHECK_EQ(sm_ring_read_units(plain, lost), 2);
	lost[5] = 0;
	lost[0] = 1;
	SM_CHECK_EQ(sm_ring_read_units(all, lost), 2);
	sm_ring_release(all);
	sm_ring_release(down);
	sm_ring_release(two);
	sm_ring_release(plain);
}

/* A fourth member takes about a quarter of the primaries, nothing else
 * moves between the old three. */
static void
test_join_moves_little(void)
{
	struct sm_ring_snap *three = ring_of(3, 128, 1, NULL);
	struct sm_ring_snap *four = ring_of(4, 128, 1, NULL);
	uint32_t a, b, moved = 0, wrong = 0, n = 100000;

	SM_REQUIRE(three != NULL && four != NULL);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t key = (uint32_t)next_rand();

		sm_ring_replicas(three, key, NULL, &a);
		sm_ring_replicas(four, key, NULL, &b);
		if (a != b) {
			moved++;
			wrong += b != 3;   /* moved, but not to the new one */
		}
	}
	SM_CHECK_EQ(wrong, 0);
	SM_CHECK(moved > n / 6 && moved < n / 3);
	sm_ring_release(three);
	sm_ring_release(four);
}

/* The ring key ignores per-sample-type labels, nothing else. */
static void
test_key_ignores_sample_type_labels(void)
{
	struct sm_label a[4] = {
		{ "__name__", "memory" }, { "__type__", "alloc_space" },
		{ "__unit__", "bytes" }, { "service_name", "api" },
	};
	struct sm_label b[4] = {
		{ "__name__", "memory" }, { "__type__", "inuse_objects" },
		{ "__unit__", "count" }, { "service_name", "api" },
	};
	struct sm_label c[4] = {
		{ "__name__", "memory" }, { "__type__", "alloc_space" },
		{ "__unit__", "bytes" }, { "service_name", "web" },
	};

	SM_CHECK_EQ(sm_ring_key("t", a, 4), sm_ring_key("t", b, 4));
	SM_CHECK(sm_ring_key("t", a, 4) != sm_ring_key("t", c, 4));
	SM_CHECK(sm_ring_key("t", a, 4) != sm_ring_key("u", a, 4));
}

static void
test_members_parse(void)
{
	char **ids, **urls;
	uint32_t n;
	struct sm_err err;

	SM_CHECK_EQ(sm_ring_members_parse(" a=tcp://127.0.0.1:1 , b=tcp://h:2,",
	    &ids, &urls, &n, &err), 0);
	SM_CHECK_EQ(n, 2);
	SM_CHECK_STR(ids[0], "a");
	SM_CHECK_STR(urls[0], "tcp://127.0.0.1:1");
	SM_CHECK_STR(ids[1], "b");
	SM_CHECK_STR(urls[1], "tcp://h:2");
	sm_ring_members_free(ids, urls, n);
	SM_CHECK_EQ(sm_ring_members_parse("a", &ids, &urls, &n, &err),
	    SM_EINVAL);
	SM_CHECK_EQ(sm_ring_members_parse("=tcp://x:1", &ids, &urls, &n,
	    &err), SM_EINVAL);
	SM_CHECK_EQ(sm_ring_members_parse("a=http://x:1", &ids, &urls, &n,
	    &err), SM_EINVAL);
	SM_CHECK_EQ(sm_ring_members_parse("a=tcp://x:1,a=tcp://y:1", &ids,
	    &urls, &n, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "twice") != NULL);
}

/* --- live members ---------------------------------------------------------- */

struct fake {
	const char *id;
	atomic_int state;     /* Smolder__V1__MemberState */
	struct sm_rpc_server *srv;
};

static int
fake_serve(void *arg, const uint8_t *req, size_t len, struct sm_buf *resp)
{
	struct fake *f = arg;
	Smolder__V1__Response r = SMOLDER__V1__RESPONSE__INIT;
	Smolder__V1__HealthResponse h = SMOLDER__V1__HEALTH_RESPONSE__INIT;

	(void)req;
	(void)len;
	h.instance_id = (char *)f->id;
	h.state = (Smolder__V1__MemberState)atomic_load(&f->state);
	h.series = 7;
	r.result_case = SMOLDER__V1__RESPONSE__RESULT_HEALTH;
	r.health = &h;
	sm_rpc_pack_response(&r, resp);
	return (0);
}

static int
fake_start(struct fake *f, const char *url)
{
	struct sm_rpc_server_cfg cfg = { url, 1, 1 << 20, 1000, 0, false, 0, NULL };
	struct sm_err err;

	return (sm_rpc_server_start(&cfg, fake_serve, f, &f->srv, &err));
}

#define HB_MS 1000                      /* heartbeat period */
#define HB_TIMEOUT_MS 10000             /* heartbeat timeout */
#define MS 1000000LL

static void
ring_cfg(struct sm_ring_cfg *c, const char *members, const char *dns,
    struct sm_clock *clk)
{
	memset(c, 0, sizeof(*c));
	c->members = members;
	c->dns = dns;
	c->tokens = 32;
	c->heartbeat_ms = HB_MS;
	c->heartbeat_timeout_ms = HB_TIMEOUT_MS;
	c->dns_refresh_ms = 100;
	c->rf = 3;
	c->recv_max = 1 << 20;
	c->clock = clk;
	/* the wall reading near the real one: members' skew stays sane */
	if (clk != NULL)
		sm_clock_manual_init(clk, 1000 * MS, sm_now_ms());
}

static uint64_t
count_rounds(const void *r)
{
	return (sm_ring_rounds(r));
}

/*
 * Let n more probe rounds run, moving the clock by `step` ns at a time
 * (sm_test_clock_steps).  The last of the n >= 2 rounds started after
 * this call did.
 */
static bool
rounds(struct sm_ring *r, struct sm_clock *clk, uint64_t n, int64_t step)
{
	return (sm_test_clock_steps(clk, step, n, count_rounds, r));
}

/* Member `id`'s state in the current snapshot; -1 when it has none. */
static int
state_of(struct sm_ring *r, const char *id)
{
	struct sm_ring_snap *s = sm_ring_acquire(r);
	int st = -1;

	for (uint32_t i = 0; i < s->n; i++)
		if (s->id[i] != NULL && strcmp(s->id[i], id) == 0)
			st = (int)s->state[i];
	sm_ring_release(s);
	return (st);
}

/* Run rounds one heartbeat apart (at most 10 s) until member `id` has
 * state `want`: for what takes real time (a tcp connection). */
static int
wait_state(struct sm_ring *r, struct sm_clock *clk, const char *id,
    enum sm_member_state want)
{
	for (int t = 0; t < 1000; t++) {
		if (state_of(r, id) == (int)want)
			return (1);
		sm_clock_manual_advance(clk, HB_MS * MS);
		usleep(10000);
	}
	return (0);
}

static void
test_live_probes(void)
{
	struct fake f[3] = {
		{ "ing-a", 0, NULL }, { "ing-b", 0, NULL }, { "ing-c", 0, NULL },
	};
	struct sm_ring_cfg cfg;
	struct sm_ring *r = NULL;
	struct sm_ring_snap *s;
	struct sm_clock clk;
	struct sm_err err;

	SM_REQUIRE(fake_start(&f[0], "inproc://ring-a") == 0);
	SM_REQUIRE(fake_start(&f[1], "inproc://ring-b") == 0);
	SM_REQUIRE(fake_start(&f[2], "inproc://ring-c") == 0);
	/* ing-c is registered as "ing-x": it answers with another id. */
	ring_cfg(&cfg, "ing-b=inproc://ring-b,ing-a=inproc://ring-a,"
	    "ing-x=inproc://ring-c", "", &clk);
	SM_REQUIRE(sm_ring_create(&cfg, NULL, &r, &err) == 0);
	SM_REQUIRE(sm_ring_start(r, &err) == 0);
	SM_CHECK_EQ(sm_ring_rounds(r), 1u);     /* the start's own round */
	s = sm_ring_acquire(r);
	SM_CHECK_EQ(s->n, 3);
	SM_CHECK_STR(s->id[0], "ing-a");    /* sorted by id */
	SM_CHECK_STR(s->id[1], "ing-b");
	SM_CHECK_EQ(s->state[0], SM_MEMBER_ACTIVE);
	SM_CHECK_EQ(s->state[1], SM_MEMBER_ACTIVE);
	SM_CHECK_EQ(s->state[2], SM_MEMBER_CONFLICT);
	SM_CHECK_EQ(s->nhealthy, 2);
	SM_CHECK_EQ(s->ntok, 64);           /* the conflicting one owns none */
	SM_CHECK_EQ(atomic_load(&s->m[0]->series), 7);
	sm_ring_release(s);

	/* Replaying: not healthy at the next round; then back. */
	atomic_store(&f[0].state, SMOLDER__V1__MEMBER_STATE__MEMBER_JOINING);
	SM_REQUIRE(rounds(r, &clk, 2, HB_MS * MS));
	SM_CHECK_EQ(state_of(r, "ing-a"), SM_MEMBER_JOINING);
	atomic_store(&f[0].state, SMOLDER__V1__MEMBER_STATE__MEMBER_ACTIVE);
	SM_REQUIRE(rounds(r, &clk, 2, HB_MS * MS));
	SM_CHECK_EQ(state_of(r, "ing-a"), SM_MEMBER_ACTIVE);

	/* Gone: still healthy while its last answer is younger than the
	 * heartbeat timeout (a few missed heartbeats)... */
	sm_rpc_server_stop(f[1].srv);
	SM_REQUIRE(rounds(r, &clk, 2, HB_MS * MS));
	SM_CHECK_EQ(state_of(r, "ing-b"), SM_MEMBER_ACTIVE);
	/* ...unhealthy at the first round past it... */
	SM_REQUIRE(rounds(r, &clk, 1, HB_TIMEOUT_MS * MS));
	SM_CHECK_EQ(state_of(r, "ing-b"), SM_MEMBER_UNHEALTHY);
	s = sm_ring_acquire(r);
	SM_CHECK_EQ(s->nhealthy, 1);
	SM_CHECK(!sm_ring_writable(s));
	sm_ring_release(s);
	/* ...and back when it is. */
	SM_REQUIRE(fake_start(&f[1], "inproc://ring-b") == 0);
	SM_CHECK(wait_state(r, &clk, "ing-b", SM_MEMBER_ACTIVE));

	sm_ring_destroy(r);
	for (int i = 0; i < 3; i++)
		sm_rpc_server_stop(f[i].srv);
}

/* -ring.dns: members are the addresses; ids are learnt by probing. */
static void
test_dns_discovery(void)
{
	struct fake f = { "ing-dns", 0, NULL };
	struct sm_ring_cfg cfg;
	struct sm_ring *r = NULL;
	struct sm_clock clk;
	char url[64], dns[64];
	struct sm_err err;
	int port = sm_test_free_port();

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	snprintf(dns, sizeof(dns), "127.0.0.1:%d", port);
	SM_REQUIRE(fake_start(&f, url) == 0);
	ring_cfg(&cfg, "", dns, &clk);
	SM_REQUIRE(sm_ring_create(&cfg, NULL, &r, &err) == 0);
	SM_REQUIRE(sm_ring_start(r, &err) == 0);
	SM_CHECK(wait_state(r, &clk, "ing-dns", SM_MEMBER_ACTIVE));
	sm_ring_destroy(r);
	sm_rpc_server_stop(f.srv);

	ring_cfg(&cfg, "", "no-port-here", NULL);
	SM_CHECK_EQ(sm_ring_create(&cfg, NULL, &r, &err), SM_EINVAL);
	ring_cfg(&cfg, "a=tcp://x:1", "x:1", NULL);
	SM_CHECK_EQ(sm_ring_create(&cfg, NULL, &r, &err), SM_EINVAL);
}

static void
test_shuffle_shard(void)
{
	static const char *const z3[12] = { "a", "a", "a", "a", "b", "b",
		"b", "b", "c", "c", "c", "c" };
	uint8_t healthy[12] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	struct sm_ring_snap *a = ring_of(12, 128, 3, NULL);
	struct sm_ring_snap *b = ring_of(12, 128, 3, NULL);
	struct sm_ring_snap *c = ring_of(13, 128, 3, NULL);
	struct sm_ring_snap *z = ring_of(12, 128, 3, NULL);
	struct sm_ring_snap *d;
	uint8_t m1[13], m2[13], m3[13];
	uint32_t moved = 0, differ = 0, rep[8], own[8];
	char t[32];

	SM_REQUIRE(a != NULL && b != NULL && c != NULL && z != NULL);
	/* no shard: size 0, or as large as the ring */
	SM_CHECK_EQ(sm_ring_shard(a, "t", 0, m1), 0);
	SM_CHECK_EQ(sm_ring_shard(a, "t", 12, m1), 0);
	SM_CHECK_EQ(sm_ring_shard(a, "t", 40, m1), 0);
	/* at least RF */
	SM_CHECK_EQ(sm_ring_shard(a, "t", 1, m1), 3);
	for (uint32_t k = 0; k < 200; k++) {
		uint32_t n1 = 0, n3 = 0;

		snprintf(t, sizeof(t), "tenant-%u", k);
		SM_REQUIRE(sm_ring_shard(a, t, 4, m1) == 4);
		/* the same ring, another process: the same shard */
		SM_REQUIRE(sm_ring_shard(b, t, 4, m2) == 4);
		SM_CHECK(memcmp(m1, m2, 12) == 0);
		/* replicas and owners stay inside it */
		for (uint32_t x = 0; x < 20; x++) {
			uint32_t key = random_series_key();
			uint32_t nr = sm_ring_replicas(a, key, m1, rep);
			uint32_t no = sm_ring_owners(a, key, m1, own);

			SM_CHECK_EQ(nr, 3);
			SM_CHECK_EQ(no, 3);
			for (uint32_t j = 0; j < nr; j++)
				SM_CHECK(m1[rep[j]] && m1[own[j]]);
		}
		/* one member more moves few picks */
		SM_REQUIRE(sm_ring_shard(c, t, 4, m3) == 4);
		for (uint32_t i = 0; i < 12; i++) {
			n1 += m1[i] && !m3[i];
			n3 += m1[i];
		}
		SM_CHECK_EQ(n3, 4);
		moved += n1;
		if (k > 0) {
			snprintf(t, sizeof(t), "tenant-%u", k - 1);
			(void)sm_ring_shard(a, t, 4, m2);
			differ += memcmp(m1, m2, 12) != 0;
		}
	}
	/* a 13th member takes about 4/13 of the picks at most; tenants'
	 * shards differ */
	SM_CHECKF(moved <= 200 * 4 * 4 / 13 + 40, "%u picks moved", moved);
	SM_CHECKF(differ >= 190, "%u of 199 neighbours differ", differ);
	/* zone-aware: an equal share of each zone, replicas in 3 zones */
	SM_REQUIRE(sm_ring_snap_set_zones(z, z3) == 0);
	SM_REQUIRE(z->zone_aware);
	for (uint32_t k = 0; k < 50; k++) {
		uint32_t per[3] = { 0, 0, 0 };

		snprintf(t, sizeof(t), "zt-%u", k);
		SM_REQUIRE(sm_ring_shard(z, t, 6, m1) == 6);
		for (uint32_t i = 0; i < 12; i++)
			per[i / 4] += m1[i];
		SM_CHECK(per[0] == 2 && per[1] == 2 && per[2] == 2);
		SM_CHECK_EQ(sm_ring_replicas(z, random_series_key(), m1, rep),
		    3);
		SM_CHECK(z->zix[rep[0]] != z->zix[rep[1]] &&
		    z->zix[rep[1]] != z->zix[rep[2]] &&
		    z->zix[rep[0]] != z->zix[rep[2]]);
	}
	/* a zone smaller than its share gives what it has */
	{
		static const char *const uneven[12] = { "a", "b", "b", "b",
			"b", "b", "c", "c", "c", "c", "c", "c" };
		struct sm_ring_snap *u = ring_of(12, 128, 3, NULL);

		SM_REQUIRE(u != NULL);
		SM_REQUIRE(sm_ring_snap_set_zones(u, uneven) == 0);
		SM_CHECK_EQ(sm_ring_shard(u, "uneven", 6, m1), 5);
		SM_CHECK(m1[0]);
		sm_ring_release(u);
	}
	/* a member down stays in the shard; its series go to the next
	 * member of the shard */
	SM_REQUIRE(sm_ring_shard(a, "down", 4, m1) == 4);
	for (uint32_t i = 0; i < 12; i++) {
		if (m1[i]) {
			healthy[i] = 0;
			break;
		}
	}
	SM_REQUIRE((d = ring_of(12, 128, 3, healthy)) != NULL);
	SM_REQUIRE(sm_ring_shard(d, "down", 4, m2) == 4);
	SM_CHECK(memcmp(m1, m2, 12) == 0);
	for (uint32_t x = 0; x < 50; x++) {
		uint32_t nr = sm_ring_replicas(d, random_series_key(), m2, rep);

		SM_CHECK_EQ(nr, 3);
		for (uint32_t j = 0; j < nr; j++)
			SM_CHECK(m2[rep[j]] && healthy[rep[j]]);
	}
	sm_ring_release(a);
	sm_ring_release(b);
	sm_ring_release(c);
	sm_ring_release(d);
	sm_ring_release(z);
}

SM_TEST_MAIN(
	{ "balance: 100 members x 128 tokens, 1M series", test_balance_100x128 },
	{ "replicas are distinct; unhealthy members are skipped", test_replicas_distinct_and_skip_unhealthy },
	{ "too few healthy members: not writable", test_too_few_healthy },
	{ "zones: replicas in distinct zones, a zone is one read unit",
	    test_zones },
	{ "a joining member takes only its share", test_join_moves_little },
	{ "shuffle shards: stable, within, zone shares, a member down",
	    test_shuffle_shard },
	{ "the ring key ignores per-sample-type labels", test_key_ignores_sample_type_labels },
	{ "-ring.members parsing", test_members_parse },
	{ "live probes: active, joining, gone, conflict", test_live_probes },
	{ "-ring.dns discovers members and learns ids", test_dns_discovery },
)
