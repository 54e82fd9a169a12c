/*
 * ring.c -- ring membership, health probes, snapshots and placement; see
 * ring.h for the model.
 *
 * The prober owns `struct probe` entries (one per member: identity as the
 * prober knows it, last answer) and is the only thread that changes them.
 * Snapshots copy what readers need (ids, states, health, tokens), so a
 * reader never touches prober state.
 */
#include "ring.h"

#include <netdb.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <urcu-bp.h>

#include "etcd.h"
#include "hash.h"
#include "json.h"
#include "log.h"
#include "metrics.h"

struct probe {
	struct sm_ring_member *m;
	char *id;                    /* declared (static) or learnt (DNS) */
	bool declared;
	enum sm_member_state reported;   /* last answer's state */
	int64_t last_ok_ms;          /* wall clock, 0 = never */
	char *conflict_id;           /* static member answering as another */
	bool replace;                /* DNS address now answers as another id */
	int64_t skew_logged_ms;      /* last skew warning (prober) */
	char *zone;                  /* learnt from its answers; NULL */
	char inc[33];                /* learnt from its answers; "" */
	bool redialing;              /* redialed since its last answer */
	int64_t redial_ms;           /* last sm_rpc_client_redial, 0 = never */
	int64_t added_ms;            /* wall clock when the prober took it on */
};

struct sm_ring {
	struct sm_ring_cfg cfg;
	char *members_spec, *dns_spec, *self_id, *self_url;
	char *dns_host, *dns_port;
	struct probe *p;
	uint32_t np, pcap;
	struct sm_ring_snap *cur;    /* RCU-protected */
	pthread_t thr;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stopping;
	int64_t next_dns_ms;
	bool dns_warned;
	/* -ring.etcd.*: the ring's own client (a watch blocks on it), the
	 * revision of the last listing, and the watcher thread that sets
	 * etcd_dirty when a member key changes. */
	struct sm_etcd *etcd;
	char *etcd_prefix;
	_Atomic int64_t etcd_rev;
	atomic_bool etcd_dirty;
	bool etcd_warned;
	int64_t next_etcd_ms;
	pthread_t watch_thr;
	bool watching;
	_Atomic uint64_t rounds;     /* probe rounds done (sm_ring_rounds) */
};

/* The ring's wall clock (cfg.clock; the real one in production). */
static int64_t
ring_now_ms(const struct sm_ring *r)
{
	return (sm_clock_unix_ms(r->cfg.clock));
}

static struct sm_metric *m_members, *m_probe_fail, *m_skew;

/* A member clock further off than this is logged (every 10 min). */
#define SKEW_WARN_MS 10000

static const struct sm_metric_def ring_metric_defs[] = {
	{ &m_members, SM_METRIC_GAUGE, "smolder_ring_members",
	    "Ring members by ring (ingesters, store-gateways) and state, as "
	    "this process sees them.", SM_METRIC_LABELS("ring", "state"),
	    NULL, 0 },
	{ &m_probe_fail, SM_METRIC_COUNTER,
	    "smolder_ring_probe_failures_total", "Health probes that got no "
	    "good answer, by member address.", SM_METRIC_LABELS("member"),
	    NULL, 0 },
	{ &m_skew, SM_METRIC_GAUGE, "smolder_ring_member_clock_skew_seconds",
	    "The member's clock minus this process's, from its last health "
	    "answer, by member address.", SM_METRIC_LABELS("member"),
	    NULL, 0 },
};

static struct sm_metric_set ring_metric_set = SM_METRIC_SET(ring_metric_defs);

const char *
sm_member_state_name(enum sm_member_state s)
{
	switch (s) {
	case SM_MEMBER_PENDING:
		return ("PENDING");
	case SM_MEMBER_ACTIVE:
		return ("ACTIVE");
	case SM_MEMBER_JOINING:
		return ("JOINING");
	case SM_MEMBER_LEAVING:
		return ("LEAVING");
	case SM_MEMBER_UNHEALTHY:
		return ("UNHEALTHY");
	case SM_MEMBER_CONFLICT:
		return ("CONFLICT");
	case SM_MEMBER_READONLY:
		return ("READONLY");
	}
	return ("?");
}

/* --- members -------------------------------------------------------------- */

static int
member_create(const char *url, size_t recv_max, struct sm_ring_member **out,
    struct sm_err *err)
{
	struct sm_rpc_client_cfg cc = {
		.url = url,
		.recv_max = recv_max,
		.dial_retry_ms = 100,
	};
	struct sm_ring_member *m;
	int rv;

	*out = NULL;
	if ((m = sm_calloc(1, sizeof(*m))) == NULL ||
	    (m->url = sm_strdup(url)) == NULL) {
		sm_free(m);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if ((rv = sm_rpc_client_create(&cc, &m->client, err)) != 0) {
		sm_free(m->url);
		sm_free(m);
		return (rv);
	}
	atomic_init(&m->refs, 1);
	pthread_mutex_init(&m->wmu, NULL);
	*out = m;
	return (0);
}

int
sm_ring_member_witness(struct sm_ring_member *m, uint8_t **out, size_t *len)
{
	int rv = 0;

	*out = NULL;
	*len = 0;
	pthread_mutex_lock(&m->wmu);
	if (m->witlen > 0) {
		if ((*out = sm_malloc(m->witlen)) == NULL) {
			rv = SM_ENOMEM;
		} else {
			memcpy(*out, m->wit, m->witlen);
			*len = m->witlen;
		}
	}
	pthread_mutex_unlock(&m->wmu);
	return (rv);
}

/* The prober: keep what member m's Health answer says of its data. */
static void
member_witness_set(struct sm_ring_member *m,
    const Smolder__V1__HealthResponse *h)
{
	uint8_t *w = NULL;
	size_t n = 0;

	if (h->witness != NULL) {
		n = smolder__v1__witness__get_packed_size(h->witness);
		if ((w = sm_malloc(SM_MAX(n, 1))) == NULL)
			return;
		smolder__v1__witness__pack(h->witness, w);
	}
	pthread_mutex_lock(&m->wmu);
	sm_free(m->wit);
	m->wit = w;
	m->witlen = n;
	pthread_mutex_unlock(&m->wmu);
}

uint64_t
sm_ring_tenant_hash(const char *tenant)
{
	return (sm_hash(tenant, strlen(tenant)));
}

int
sm_ring_member_tenant(struct sm_ring_member *m, uint64_t h)
{
	int rv = -1;

	pthread_mutex_lock(&m->wmu);
	if (m->tenants_known) {
		uint32_t i = sm_u64_lower_bound(m->tenants, m->ntenants, h);

		rv = i < m->ntenants && m->tenants[i] == h;
	}
	pthread_mutex_unlock(&m->wmu);
	return (rv);
}

int
sm_ring_member_lacks(struct sm_ring_member *m, uint64_t h, int64_t now_ns)
{
	int rv = 0;

	pthread_mutex_lock(&m->wmu);
	if (m->tenants_known && m->tenant_hold_ms > 100 && now_ns -
	    m->tenants_at_ns <= ((int64_t)m->tenant_hold_ms - 100) * 1000000) {
		uint32_t i = sm_u64_lower_bound(m->tenants, m->ntenants, h);

		rv = !(i < m->ntenants && m->tenants[i] == h);
	}
	pthread_mutex_unlock(&m->wmu);
	return (rv);
}

/* The tenants version the prober holds for m (0: none). */
static uint64_t
member_tenants_ver(struct sm_ring_member *m)
{
	uint64_t v;

	pthread_mutex_lock(&m->wmu);
	v = m->tenants_known ? m->tenants_ver : 0;
	pthread_mutex_unlock(&m->wmu);
	return (v);
}

/*
 * The prober: keep m's tenant list.  An answer with has_tenants carries
 * a new list; one without it keeps ours if the versions match, and
 * otherwise (a member that does not send lists) leaves it unknown.
 */
static void
member_tenants_set(struct sm_ring_member *m,
    const Smolder__V1__HealthResponse *h, int64_t sent_ns)
{
	uint64_t *t = NULL;
	uint32_t n = 0;
	bool sorted = true;

	if (h->has_tenants) {
		n = (uint32_t)SM_MIN(h->n_tenants, UINT32_MAX);
		if ((t = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*t))) == NULL)
			n = 0;
		for (uint32_t i = 0; t != NULL && i < n; i++) {
			t[i] = h->tenants[i];
			sorted = sorted && (i == 0 || t[i - 1] <= t[i]);
		}
	}
	pthread_mutex_lock(&m->wmu);
	if (h->has_tenants && t != NULL && sorted) {
		sm_free(m->tenants);
		m->tenants = t;
		m->ntenants = n;
		m->tenants_ver = h->tenants_version;
		m->tenants_known = h->tenants_version != 0;
		t = NULL;
	} else if (h->has_tenants || h->tenants_version == 0 ||
	    h->tenants_version != m->tenants_ver) {
		/* unusable (out of memory, unsorted) or not sent */
		m->tenants_known = false;
	}
	/* the list we keep is the member's as of this probe's sending */
	m->tenants_at_ns = sent_ns;
	m->tenant_hold_ms = m->tenants_known ? h->tenant_hold_ms : 0;
	pthread_mutex_unlock(&m->wmu);
	sm_free(t);
}

static void
member_ref(struct sm_ring_member *m)
{
	atomic_fetch_add(&m->refs, 1);
}

static void
member_unref(struct sm_ring_member *m)
{
	if (m == NULL || atomic_fetch_sub(&m->refs, 1) != 1)
		return;
	sm_rpc_client_destroy(m->client);
	pthread_mutex_destroy(&m->wmu);
	sm_free(m->wit);
	sm_free(m->tenants);
	sm_free(m->url);
	sm_free(m);
}

/* --- tokens and snapshots ------------------------------------------------- */

static uint32_t
token_of(const char *id, uint32_t i)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "%s#%u", id, i);

	if (n < 0 || (size_t)n >= sizeof(buf))
		n = (int)sizeof(buf) - 1;
	return ((uint32_t)(sm_hash(buf, (size_t)n) >> 32));
}

static void
snap_free(struct sm_ring_snap *s)
{
	if (s == NULL)
		return;
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->m != NULL && s->m[i] != NULL)
			member_unref(s->m[i]);
		if (s->id != NULL)
			sm_free(s->id[i]);
	}
	for (uint32_t i = 0; s->zone != NULL && i < s->n; i++)
		sm_free(s->zone[i]);
	sm_free(s->zone);
	sm_free(s->inc);
	sm_free(s->zix);
	sm_free(s->m);
	sm_free(s->id);
	sm_free(s->state);
	sm_free(s->healthy);
	sm_free(s->writable);
	sm_free(s->tok);
	sm_free(s->owner);
	sm_free(s);
}

void
sm_ring_release(struct sm_ring_snap *s)
{
	if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1)
		snap_free(s);
}

struct tok_ent {
	uint32_t tok, member;
};

static int
tok_cmp(const void *a, const void *b)
{
	const struct tok_ent *x = a, *y = b;

	return (x->tok != y->tok ? SM_CMP(x->tok, y->tok) :
	    SM_CMP(x->member, y->member));
}

/*
 * Fill the token table of `s` from ids[] (members with a NULL id own no
 * tokens).  Members must already be in their final order.
 */
static int
snap_tokens(struct sm_ring_snap *s, char *const *ids)
{
	struct tok_ent *e;
	uint32_t n = 0, t = s->tokens_per_member;

	for (uint32_t i = 0; i < s->n; i++)
		n += ids[i] != NULL && s->state[i] != SM_MEMBER_CONFLICT ? t : 0;
	s->tok = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*s->tok));
	s->owner = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*s->owner));
	e = sm_malloc((size_t)SM_MAX(n, 1) * sizeof(*e));
	if (s->tok == NULL || s->owner == NULL || e == NULL) {
		sm_free(e);
		return (SM_ENOMEM);
	}
	n = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		if (ids[i] == NULL || s->state[i] == SM_MEMBER_CONFLICT)
			continue;
		for (uint32_t k = 0; k < t; k++)
			e[n++] = (struct tok_ent){ token_of(ids[i], k), i };
	}
	qsort(e, n, sizeof(*e), tok_cmp);
	for (uint32_t i = 0; i < n; i++) {
		s->tok[i] = e[i].tok;
		s->owner[i] = e[i].member;
	}
	s->ntok = n;
	sm_free(e);
	return (0);
}

static struct sm_ring_snap *
snap_alloc(uint32_t n, uint32_t tokens, uint32_t rf)
{
	struct sm_ring_snap *s = sm_calloc(1, sizeof(*s));

	if (s == NULL)
		return (NULL);
	atomic_init(&s->refs, 1);
	s->n = n;
	s->tokens_per_member = tokens;
	s->rf = rf;
	s->quorum = rf / 2 + 1;
	SM_ASSERT(rf == 0 || (s->quorum <= rf && 2 * s->quorum > rf));
	s->m = sm_calloc(SM_MAX(n, 1), sizeof(*s->m));
	s->id = sm_calloc(SM_MAX(n, 1), sizeof(*s->id));
	s->state = sm_calloc(SM_MAX(n, 1), sizeof(*s->state));
	s->healthy = sm_calloc(SM_MAX(n, 1), 1);
	s->writable = sm_calloc(SM_MAX(n, 1), 1);
	s->zone = sm_calloc(SM_MAX(n, 1), sizeof(*s->zone));
	s->zix = sm_calloc(SM_MAX(n, 1), sizeof(*s->zix));
	s->inc = sm_calloc(SM_MAX(n, 1), sizeof(*s->inc));
	if (s->m == NULL || s->id == NULL || s->state == NULL ||
	    s->healthy == NULL || s->zone == NULL || s->zix == NULL ||
	    s->writable == NULL || s->inc == NULL) {
		snap_free(s);
		return (NULL);
	}
	return (s);
}

/*
 * Zone indexes (ring.h, "Zones"): members of one known zone share one,
 * each member of no known zone gets its own; zone-aware when at least RF
 * zones are known (and RF > 1).
 */
static void
snap_zones(struct sm_ring_snap *s)
{
	uint32_t next = 0;

	s->nzones = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t j;

		if (s->zone[i] == NULL) {
			s->zix[i] = UINT32_MAX;
			continue;
		}
		for (j = 0; j < i && (s->zone[j] == NULL ||
		    strcmp(s->zone[j], s->zone[i]) != 0); j++)
			;
		s->zix[i] = j < i ? s->zix[j] : next++;
	}
	s->nzones = next;
	for (uint32_t i = 0; i < s->n; i++)
		if (s->zix[i] == UINT32_MAX)
			s->zix[i] = next++;
	s->zone_aware = s->rf > 1 && s->nzones >= s->rf;
	s->zones_all = s->zones_up = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		bool all = s->id[i] != NULL &&
		    s->state[i] != SM_MEMBER_CONFLICT, up = s->writable[i];

		for (uint32_t j = 0; j < i && (all || up); j++) {
			if (s->zix[j] != s->zix[i])
				continue;
			if (s->id[j] != NULL &&
			    s->state[j] != SM_MEMBER_CONFLICT)
				all = false;
			if (s->writable[j])
				up = false;
		}
		s->zones_all += all;
		s->zones_up += up;
	}
	s->zone_members_max = 1;
	for (uint32_t i = 0; s->zone_aware && i < s->n; i++) {
		uint32_t k = 0;

		for (uint32_t j = 0; j < s->n; j++)
			k += s->zix[j] == s->zix[i];
		s->zone_members_max = SM_MAX(s->zone_members_max, k);
	}
}

int
sm_ring_snap_set_zones(struct sm_ring_snap *s, const char *const *zones)
{
	for (uint32_t i = 0; i < s->n; i++) {
		sm_free(s->zone[i]);
		s->zone[i] = NULL;
		if (zones[i] != NULL && zones[i][0] != '\0' &&
		    (s->zone[i] = sm_strdup(zones[i])) == NULL)
			return (SM_ENOMEM);
	}
	snap_zones(s);
	return (0);
}

uint32_t
sm_ring_read_units(const struct sm_ring_snap *s, const uint8_t *lost)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n; i++) {
		bool first = lost[i];

		for (uint32_t j = 0; first && s->zone_aware && j < i; j++)
			first = !(lost[j] && s->zix[j] == s->zix[i]);
		n += first;
	}
	return (n);
}

int
sm_ring_snap_build_ids(const char *const *ids, uint32_t n, uint32_t tokens,
    uint32_t rf, const uint8_t *healthy, struct sm_ring_snap **out)
{
	struct sm_ring_snap *s = snap_alloc(n, tokens, rf);

	*out = NULL;
	if (s == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < n; i++) {
		if ((s->id[i] = sm_strdup(ids[i])) == NULL) {
			snap_free(s);
			return (SM_ENOMEM);
		}
		s->healthy[i] = healthy == NULL || healthy[i];
		s->writable[i] = s->healthy[i];
		s->state[i] = s->healthy[i] ? SM_MEMBER_ACTIVE :
		    SM_MEMBER_UNHEALTHY;
		s->nhealthy += s->healthy[i];
		s->nwritable += s->writable[i];
	}
	if (snap_tokens(s, s->id) != 0) {
		snap_free(s);
		return (SM_ENOMEM);
	}
	snap_zones(s);
	*out = s;
	return (0);
}

/* The first token at or after h (wrapping); s has tokens. */
static uint32_t
tok_at(const struct sm_ring_snap *s, uint32_t h)
{
	size_t lo;

	SM_LOWER_BOUND(lo, s->ntok, mid, s->tok[mid] < h);
	return ((uint32_t)(lo % s->ntok));
}

/* The token owners of key from its successor on, healthy only or all. */
static uint32_t
ring_walk(const struct sm_ring_snap *s, uint32_t key, bool healthy_only,
    const uint8_t *shard, uint32_t *out)
{
	uint32_t lo, k = 0;

	if (s->ntok == 0)
		return (0);
	lo = tok_at(s, key);
	/* Zone-aware: one replica per zone, so the set ends when every
	 * zone that can take one has one. */
	uint32_t most = s->zone_aware ? SM_MIN(s->rf, healthy_only ?
	    s->zones_up : s->zones_all) : s->rf;

	SM_ASSERT(most <= s->rf);      /* out[] has room for rf */
	for (uint32_t walked = 0; walked < s->ntok && k < most; walked++) {
		uint32_t m = s->owner[(lo + walked) % s->ntok], j;

		if ((healthy_only && !s->writable[m]) ||
		    (shard != NULL && !shard[m]))
			continue;
		for (j = 0; j < k && out[j] != m && !(s->zone_aware &&
		    s->zix[out[j]] == s->zix[m]); j++)
			;
		if (j == k)
			out[k++] = m;
	}
	return (k);
}

uint32_t
sm_ring_replicas(const struct sm_ring_snap *s, uint32_t key,
    const uint8_t *shard, uint32_t *out)
{
	return (ring_walk(s, key, true, shard, out));
}

uint32_t
sm_ring_owners(const struct sm_ring_snap *s, uint32_t key,
    const uint8_t *shard, uint32_t *out)
{
	return (ring_walk(s, key, false, shard, out));
}

static bool
settling(const struct sm_ring_snap *s, uint32_t m)
{
	return (s->state[m] == SM_MEMBER_PENDING ||
	    s->state[m] == SM_MEMBER_JOINING);
}

uint32_t
sm_ring_owners_settling(const struct sm_ring_snap *s, uint32_t key,
    uint32_t *out)
{
	uint32_t n = ring_walk(s, key, false, NULL, out), more, extra[64];
	bool waiting = false;
	uint8_t *settled;

	for (uint32_t i = 0; i < n; i++)
		waiting |= settling(s, out[i]);
	if (!waiting)
		return (n);
	/* Out of memory: the strict owners alone (an answer may be a 503
	 * it need not be; never one that is short). */
	if ((settled = sm_calloc(SM_MAX(s->n, 1), 1)) == NULL)
		return (n);
	for (uint32_t m = 0; m < s->n; m++)
		settled[m] = !settling(s, m);
	more = ring_walk(s, key, false, settled, extra);
	sm_free(settled);
	for (uint32_t i = 0; i < more; i++) {
		uint32_t j;

		for (j = 0; j < n && out[j] != extra[i]; j++)
			;
		if (j == n)
			out[n++] = extra[i];
	}
	return (n);
}

uint32_t
sm_ring_shard(const struct sm_ring_snap *s, const char *tenant,
    uint32_t size, uint8_t *mask)
{
	uint32_t owners = 0, zones, quota, got = 0;
	uint32_t *inzone = NULL;

	if (size == 0 || s->ntok == 0)
		return (0);
	for (uint32_t m = 0; m < s->n; m++)
		owners += s->id[m] != NULL;
	size = SM_MAX(size, s->rf);
	if (size >= owners)
		return (0);
	memset(mask, 0, s->n);
	/* Zone-aware: an equal share of every zone, so the shard's replica
	 * sets still span RF zones. */
	zones = s->zone_aware ? s->nzones : 1;
	quota = (size + zones - 1) / zones;
	if ((inzone = sm_calloc(2 * (size_t)SM_MAX(zones, 1),
	    sizeof(*inzone))) == NULL)
		return (0);
	/* members of each zone that own tokens: a zone smaller than its
	 * quota gives all it has */
	for (uint32_t m = 0; m < s->n; m++) {
		if (s->id[m] != NULL && (!s->zone_aware || s->zix[m] < zones))
			inzone[zones + (s->zone_aware ? s->zix[m] : 0)]++;
	}
	for (uint32_t z = 0; z < zones; z++) {
		uint32_t want = SM_MIN(quota, inzone[zones + z]);

		for (uint32_t j = 0; inzone[z] < want && j < 4 * s->n + 64;
		    j++) {
			char buf[600];
			uint32_t t, h;
			int len;

			len = snprintf(buf, sizeof(buf), "%s%c%u%c%u", tenant,
			    0, z, 0, j);
			h = (uint32_t)(XXH3_64bits(buf, (size_t)SM_MIN(len,
			    (int)sizeof(buf) - 1)) >> 32);
			t = tok_at(s, h);
			/* from that token on, the first member of zone z
			 * not yet in the shard */
			for (uint32_t w = 0; w < s->ntok; w++) {
				uint32_t m = s->owner[(t + w) % s->ntok];

				if (mask[m] || (s->zone_aware &&
				    s->zix[m] != z))
					continue;
				mask[m] = 1;
				inzone[z]++;
				got++;
				break;
			}
		}
	}
	sm_free(inzone);
	return (got);
}

static bool
per_type_label(const char *name)
{
	static const char *const skip[] = {
		SM_LABEL_PROFILE_TYPE, SM_LABEL_TYPE, SM_LABEL_UNIT,
		SM_LABEL_PERIOD_TYPE, SM_LABEL_PERIOD_UNIT,
	};

	if (name[0] != '_' || name[1] != '_')
		return (false);
	for (size_t i = 0; i < SM_ARRAY_LEN(skip); i++) {
		if (strcmp(name, skip[i]) == 0)
			return (true);
	}
	return (false);
}

uint32_t
sm_ring_key(const char *tenant, const struct sm_label *ls, uint32_t n)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, tenant, strlen(tenant) + 1);
	for (uint32_t i = 0; i < n; i++) {
		if (per_type_label(ls[i].name))
			continue;
		XXH3_64bits_update(&st, ls[i].name, strlen(ls[i].name) + 1);
		XXH3_64bits_update(&st, ls[i].value, strlen(ls[i].value) + 1);
	}
	return ((uint32_t)(XXH3_64bits_digest(&st) >> 32));
}

/* --- member lists ---------------------------------------------------------- */

void
sm_ring_members_free(char **ids, char **urls, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		sm_free(ids != NULL ? ids[i] : NULL);
		sm_free(urls != NULL ? urls[i] : NULL);
	}
	sm_free(ids);
	sm_free(urls);
}

int
sm_ring_members_parse(const char *spec, char ***ids_out, char ***urls_out,
    uint32_t *n_out, struct sm_err *err)
{
	char **ids = NULL, **urls = NULL;
	uint32_t n = 0, cap = 0;
	const char *p = spec;
	int rv = 0;

	*ids_out = *urls_out = NULL;
	*n_out = 0;
	while (*p != '\0') {
		const char *end = strchr(p, ','), *eq;
		size_t len = end != NULL ? (size_t)(end - p) : strlen(p);

		while (len > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == 0)
			goto next;
		eq = memchr(p, '=', len);
		if (eq == NULL || eq == p || eq == p + len - 1) {
			rv = sm_err_set(err, SM_EINVAL, "ring member \"%.*s\" "
			    "is not id=url", (int)len, p);
			goto fail;
		}
		if (strncmp(eq + 1, "tcp://", 6) != 0 &&
		    strncmp(eq + 1, "inproc://", 9) != 0 &&
		    strncmp(eq + 1, "ipc://", 6) != 0) {
			rv = sm_err_set(err, SM_EINVAL, "ring member \"%.*s\": "
			    "the address must be tcp://host:port (or "
			    "inproc://, ipc://)", (int)len, p);
			goto fail;
		}
		if (n == cap) {
			uint32_t ncap = cap ? cap * 2 : 8;
			char **ni = sm_realloc(ids, ncap * sizeof(*ni));

			if (ni == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "out of memory");
				goto fail;
			}
			ids = ni;
			ni = sm_realloc(urls, ncap * sizeof(*ni));
			if (ni == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "out of memory");
				goto fail;
			}
			urls = ni;
			cap = ncap;
		}
		ids[n] = sm_strndup(p, (size_t)(eq - p));
		urls[n] = sm_strndup(eq + 1, len - (size_t)(eq - p) - 1);
		n++;
		if (ids[n - 1] == NULL || urls[n - 1] == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto fail;
		}
		for (uint32_t i = 0; i + 1 < n; i++) {
			if (strcmp(ids[i], ids[n - 1]) == 0) {
				rv = sm_err_set(err, SM_EINVAL, "ring member id "
				    "\"%s\" appears twice", ids[i]);
				goto fail;
			}
		}
next:
		if (end == NULL)
			break;
		p = end + 1;
	}
	*ids_out = ids;
	*urls_out = urls;
	*n_out = n;
	return (0);
fail:
	sm_ring_members_free(ids, urls, n);
	return (rv);
}

/* --- the ring -------------------------------------------------------------- */

static int
probe_add(struct sm_ring *r, const char *id, const char *url,
    struct sm_err *err)
{
	struct probe *p;
	int rv;

	if (SM_GROW(r->p, r->pcap, r->np + 1, 8) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	p = &r->p[r->np];
	memset(p, 0, sizeof(*p));
	if ((rv = member_create(url, r->cfg.recv_max, &p->m, err)) != 0)
		return (rv);
	p->added_ms = ring_now_ms(r);
	if (id != NULL) {
		if ((p->id = sm_strdup(id)) == NULL) {
			member_unref(p->m);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		p->declared = true;
	}
	r->np++;
	return (0);
}

static void
probe_remove(struct sm_ring *r, uint32_t i)
{
	member_unref(r->p[i].m);
	sm_free(r->p[i].id);
	sm_free(r->p[i].conflict_id);
	sm_free(r->p[i].zone);
	r->p[i] = r->p[--r->np];
}

int
sm_dns_split(const char *spec, char **host, char **port)
{
	const char *colon;

	*host = *port = NULL;
	if (strncmp(spec, "dns+", 4) == 0)
		spec += 4;
	colon = strrchr(spec, ':');
	if (colon == NULL || colon == spec || colon[1] == '\0')
		return (SM_EINVAL);
	if (spec[0] == '[' && colon[-1] == ']')
		*host = sm_strndup(spec + 1, (size_t)(colon - spec - 2));
	else
		*host = sm_strndup(spec, (size_t)(colon - spec));
	*port = sm_strdup(colon + 1);
	if (*host == NULL || *port == NULL) {
		sm_free(*host);
		sm_free(*port);
		*host = *port = NULL;
		return (SM_ENOMEM);
	}
	return (0);
}

int
sm_dns_resolve(const char *host, const char *port, const char *scheme,
    char (**urls_out)[SM_DNS_URL_MAX], uint32_t *n_out, struct sm_err *err)
{
	struct addrinfo hints, *res = NULL, *ai;
	char (*urls)[SM_DNS_URL_MAX] = NULL;
	uint32_t nurls = 0, cap = 0;
	int grv;

	*urls_out = NULL;
	*n_out = 0;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if ((grv = getaddrinfo(host, port, &hints, &res)) != 0)
		return (sm_err_set(err, SM_EUNAVAIL, "%s", gai_strerror(grv)));
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		char h[NI_MAXHOST], url[SM_DNS_URL_MAX];
		uint32_t j;

		if (getnameinfo(ai->ai_addr, ai->ai_addrlen, h, sizeof(h),
		    NULL, 0, NI_NUMERICHOST) != 0)
			continue;
		snprintf(url, sizeof(url), ai->ai_family == AF_INET6 ?
		    "%s://[%s]:%s" : "%s://%s:%s", scheme, h, port);
		for (j = 0; j < nurls && strcmp(urls[j], url) != 0; j++)
			;
		if (j < nurls)
			continue;
		if (SM_GROW(urls, cap, nurls + 1, 16) != 0)
			break;
		memcpy(urls[nurls++], url, sizeof(url));
	}
	freeaddrinfo(res);
	*urls_out = urls;
	*n_out = nurls;
	return (0);
}

static int
dns_split(struct sm_ring *r, struct sm_err *err)
{
	int rv;

	if ((rv = sm_dns_split(r->dns_spec, &r->dns_host, &r->dns_port)) ==
	    SM_EINVAL)
		return (sm_err_set(err, SM_EINVAL, "-ring.dns \"%s\" must be "
		    "host:port (the ingesters' RPC port)", r->dns_spec));
	if (rv != 0)
		return (sm_err_set(err, rv, "out of memory"));
	return (0);
}

/*
 * Make the probed members exactly urls[0..n) (with ids[], each one's id;
 * NULL: ids are learnt from Health answers, as for DNS): a member no
 * longer listed (or listed under another id) is removed, a new one added.
 * `source` names the list in the log.  Prober only.
 */
static void
probes_sync(struct sm_ring *r, const char *const *ids,
    const char *const *urls, uint32_t n, const char *source)
{
	struct sm_err err;

	for (uint32_t i = 0; i < r->np;) {
		const struct probe *p = &r->p[i];
		uint32_t j;

		for (j = 0; j < n && (strcmp(urls[j], p->m->url) != 0 ||
		    (ids != NULL && (p->id == NULL ||
		    strcmp(ids[j], p->id) != 0))); j++)
			;
		if (j < n) {
			i++;
			continue;
		}
		sm_info("ring", "member left %s\tring=%s id=%s url=%s", source,
		    r->cfg.name, p->id != NULL ? p->id : "?", p->m->url);
		probe_remove(r, i);   /* moves the last entry into slot i */
	}
	for (uint32_t j = 0; j < n; j++) {
		uint32_t i;

		for (i = 0; i < r->np && strcmp(urls[j], r->p[i].m->url) != 0;
		    i++)
			;
		if (i < r->np)
			continue;
		sm_err_clear(&err);
		if (probe_add(r, ids != NULL ? ids[j] : NULL, urls[j], &err) !=
		    0)
			sm_warn("ring", "cannot add member\turl=%s err=\"%s\"",
			    urls[j], err.msg);
		else
			sm_info("ring", "member found in %s\tring=%s id=%s "
			    "url=%s", source, r->cfg.name, ids != NULL ? ids[j] :
			    "?", urls[j]);
	}
}

/* Resolve -ring.dns and add/remove members to match.  Prober only. */
static void
dns_refresh(struct sm_ring *r)
{
	char (*urls)[SM_DNS_URL_MAX] = NULL;
	const char **up;
	uint32_t nurls = 0;
	struct sm_err err;

	sm_err_clear(&err);
	if (sm_dns_resolve(r->dns_host, r->dns_port, "tcp", &urls, &nurls,
	    &err) != 0) {
		if (!r->dns_warned)
			sm_warn("ring", "cannot resolve -ring.dns\tname=%s "
			    "err=\"%s\"", r->dns_host, err.msg);
		r->dns_warned = true;
		return;
	}
	r->dns_warned = false;
	if ((up = sm_malloc((size_t)SM_MAX(nurls, 1) * sizeof(*up))) != NULL) {
		for (uint32_t j = 0; j < nurls; j++)
			up[j] = urls[j];
		probes_sync(r, NULL, up, nurls, "DNS");
		sm_free(up);
	}
	sm_free(urls);
}

/* --- shared membership in etcd ------------------------------------------- */

/*
 * A member key's value: {"id": ..., "addr": "tcp://host:port", "zone":
 * ...}.  Its id and address must be what the member answers with and
 * where it listens; the zone is informative (placement uses the zone the
 * member's Health answers give, as for every other source).
 */
int
sm_ring_member_value(const char *id, const char *addr, const char *zone,
    char **out)
{
	struct sm_json *o = sm_json_object();
	int rv;

	*out = NULL;
	if ((rv = sm_json_set_str(o, "id", id)) != 0 ||
	    (rv = sm_json_set_str(o, "addr", addr)) != 0 ||
	    (rv = sm_json_set_str(o, "zone", zone != NULL ? zone : "")) != 0)
		goto out;
	if ((*out = sm_json_dumps(o, SM_JSON_SORT_KEYS)) == NULL)
		rv = SM_ENOMEM;
out:
	sm_json_free(o);
	return (rv);
}

static int
member_value_parse(const char *val, size_t len, char **id, char **addr)
{
	struct sm_json *o = NULL;
	const char *i, *a;
	int rv = SM_EMALFORMED;

	*id = *addr = NULL;
	(void)sm_json_parse(val, len, 0, &o, NULL);
	i = sm_json_str(sm_json_get(o, "id"));
	a = sm_json_str(sm_json_get(o, "addr"));
	if (i != NULL && a != NULL && *i != '\0' && strlen(i) <= 253 &&
	    strncmp(a, "tcp://", 6) == 0 && strlen(a) < SM_DNS_URL_MAX) {
		*id = sm_strdup(i);
		*addr = sm_strdup(a);
		rv = *id != NULL && *addr != NULL ? 0 : SM_ENOMEM;
		if (rv != 0) {
			sm_free(*id);
			sm_free(*addr);
			*id = *addr = NULL;
		}
	}
	sm_json_free(o);
	return (rv);
}

/*
 * List the member keys and add/remove members to match.  Prober only.
 * A listing that fails changes nothing (members stay as they were: an
 * etcd outage must not empty the ring).  A value that does not parse is
 * skipped and logged once per revision.
 */
static void
etcd_refresh(struct sm_ring *r)
{
	struct sm_etcd_kv *kvs = NULL;
	size_t n = 0;
	char **ids, **urls;
	uint32_t nu = 0;
	int64_t rev;
	struct sm_err err;

	sm_err_clear(&err);
	if (sm_etcd_range(r->etcd, r->etcd_prefix, &kvs, &n, &rev, &err) != 0) {
		if (!r->etcd_warned)
			sm_warn("ring", "cannot list the members in etcd\t"
			    "prefix=%s err=\"%s\"", r->etcd_prefix, err.msg);
		r->etcd_warned = true;
		return;
	}
	if (r->etcd_warned)
		sm_info("ring", "etcd answers again\tprefix=%s",
		    r->etcd_prefix);
	r->etcd_warned = false;
	ids = sm_calloc(SM_MAX(n, 1), sizeof(*ids));
	urls = sm_calloc(SM_MAX(n, 1), sizeof(*urls));
	if (ids == NULL || urls == NULL) {
		sm_free(ids);
		sm_free(urls);
		sm_etcd_kvs_free(kvs, n);
		return;
	}
	for (size_t k = 0; k < n; k++) {
		if (member_value_parse(kvs[k].val, kvs[k].vlen, &ids[nu],
		    &urls[nu]) != 0) {
			if (rev != atomic_load(&r->etcd_rev))
				sm_warn("ring", "skipping a member key that is "
				    "not {\"id\", \"addr\": \"tcp://...\"}"
				    "\tkey=%s", kvs[k].key);
			continue;
		}
		nu++;
	}
	sm_etcd_kvs_free(kvs, n);
	atomic_store(&r->etcd_rev, rev);
	probes_sync(r, (const char *const *)ids, (const char *const *)urls, nu,
	    "etcd");
	sm_ring_members_free(ids, urls, nu);
}

/* The watcher: long-polls etcd for a change under the prefix after the
 * last listing and wakes the prober when one comes. */
static void *
etcd_watch_main(void *arg)
{
	struct sm_ring *r = arg;

	for (;;) {
		bool changed = false, stop;
		struct sm_err err;
		int rv;

		pthread_mutex_lock(&r->mu);
		stop = r->stopping;
		pthread_mutex_unlock(&r->mu);
		if (stop)
			break;
		sm_err_clear(&err);
		rv = sm_etcd_watch(r->etcd, r->etcd_prefix,
		    atomic_load(&r->etcd_rev) + 1, 30000, &changed, &err);
		if (rv == SM_ECLOSED)
			break;
		pthread_mutex_lock(&r->mu);
		if (changed) {
			atomic_store(&r->etcd_dirty, true);
			pthread_cond_broadcast(&r->cv);
		}
		/* after a failure, or a change the prober has not listed
		 * yet, wait a moment rather than spin */
		if (!r->stopping && (rv != 0 || changed))
			sm_cond_wait_ms(&r->cv, &r->mu, rv != 0 ? 1000 : 50);
		pthread_mutex_unlock(&r->mu);
	}
	return (NULL);
}

static void ring_handler(struct sm_http_req *req, void *arg);
static struct sm_ring_snap *snap_from_probes(struct sm_ring *r, int64_t now);
static void publish(struct sm_ring *r, struct sm_ring_snap *s);

int
sm_ring_create(const struct sm_ring_cfg *cfg, struct sm_http *http,
    struct sm_ring **out, struct sm_err *err)
{
	struct sm_ring *r;
	struct sm_ring_snap *s0;
	char **ids = NULL, **urls = NULL;
	uint32_t n = 0;
	int rv = 0;

	*out = NULL;
	if (cfg->tokens < 1 || cfg->tokens > 4096)
		return (sm_err_set(err, SM_EINVAL, "-ring.tokens must be in "
		    "1..4096"));
	if (cfg->rf < 1 || cfg->rf > 16)
		return (sm_err_set(err, SM_EINVAL, "-distributor.replication-"
		    "factor must be in 1..16"));
	if (cfg->heartbeat_ms < 10 || cfg->heartbeat_timeout_ms <
	    cfg->heartbeat_ms)
		return (sm_err_set(err, SM_EINVAL, "-ring.heartbeat-period must "
		    "be >= 10ms and -ring.heartbeat-timeout >= the period"));
	if ((*cfg->members != '\0') + (*cfg->dns != '\0') +
	    (cfg->etcd_endpoints != NULL && *cfg->etcd_endpoints != '\0') > 1)
		return (sm_err_set(err, SM_EINVAL, "set one of -ring.members, "
		    "-ring.dns and -ring.etcd.endpoints"));
	if ((r = sm_calloc(1, sizeof(*r))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	sm_metrics_register_once(&ring_metric_set);
	r->cfg = *cfg;
	if (r->cfg.name == NULL || r->cfg.name[0] == '\0')
		r->cfg.name = "ingesters";
	pthread_mutex_init(&r->mu, NULL);
	sm_cond_init(&r->cv);
	r->members_spec = sm_strdup(cfg->members);
	r->dns_spec = sm_strdup(cfg->dns);
	r->self_id = sm_strdup(cfg->self_id != NULL ? cfg->self_id : "");
	r->self_url = sm_strdup(cfg->self_url != NULL ? cfg->self_url : "");
	if (r->members_spec == NULL || r->dns_spec == NULL ||
	    r->self_id == NULL || r->self_url == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto fail;
	}
	r->cfg.members = r->members_spec;
	r->cfg.dns = r->dns_spec;
	r->cfg.self_id = r->self_id;
	r->cfg.self_url = r->self_url;
	if (cfg->etcd_endpoints != NULL && *cfg->etcd_endpoints != '\0') {
		if ((rv = sm_etcd_open(cfg->etcd_endpoints,
		    cfg->etcd_timeout_ms, &r->etcd, err)) != 0)
			goto fail;
		if ((r->etcd_prefix = sm_strdup(cfg->etcd_prefix != NULL ?
		    cfg->etcd_prefix : "")) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto fail;
		}
		if (*r->etcd_prefix == '\0') {
			rv = sm_err_set(err, SM_EINVAL, "-ring.etcd.prefix "
			    "must not be empty");
			goto fail;
		}
		r->cfg.etcd_endpoints = NULL;
		r->cfg.etcd_prefix = r->etcd_prefix;
	} else if (*r->dns_spec != '\0') {
		if ((rv = dns_split(r, err)) != 0)
			goto fail;
	} else if (*r->members_spec != '\0') {
		if ((rv = sm_ring_members_parse(r->members_spec, &ids, &urls,
		    &n, err)) != 0)
			goto fail;
		if (n == 0) {
			rv = sm_err_set(err, SM_EINVAL, "-ring.members is empty");
			goto fail;
		}
		for (uint32_t i = 0; i < n; i++) {
			if ((rv = probe_add(r, ids[i], urls[i], err)) != 0)
				goto fail;
		}
	} else {
		if (*r->self_id == '\0' || *r->self_url == '\0') {
			rv = sm_err_set(err, SM_EINVAL, "no ingesters: set "
			    "-ring.members or -ring.dns, or run an ingester "
			    "in this process");
			goto fail;
		}
		if ((rv = probe_add(r, r->self_id, r->self_url, err)) != 0)
			goto fail;
	}
	sm_ring_members_free(ids, urls, n);
	ids = urls = NULL;
	n = 0;
	/* A snapshot from the start (every member PENDING), so readers
	 * never see none. */
	if ((s0 = snap_from_probes(r, ring_now_ms(r))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto fail;
	}
	publish(r, s0);
	if (http != NULL && (rv = sm_http_route(http, "GET",
	    strcmp(r->cfg.name, "ingesters") == 0 ? "/ring" :
	    "/store-gateway/ring", ring_handler, r, 0)) != 0) {
		sm_err_set(err, rv, "ring: route for %s: %s", r->cfg.name,
		    sm_strerror(rv));
		sm_ring_destroy(r);
		return (rv);
	}
	*out = r;
	return (0);
fail:
	sm_ring_members_free(ids, urls, n);
	sm_ring_destroy(r);
	return (rv);
}

/* --- probing -------------------------------------------------------------- */

static int
snap_member_cmp(const void *a, const void *b, void *arg)
{
	const struct probe *p = arg;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	const char *x = p[i].id, *y = p[j].id;

	if ((x == NULL) != (y == NULL))
		return (x == NULL ? 1 : -1);
	if (x != NULL && strcmp(x, y) != 0)
		return (strcmp(x, y));
	/* One id at several addresses (a dual-stack name, a pod that
	 * moved): the one heard from last comes first and keeps the id. */
	if (p[i].last_ok_ms != p[j].last_ok_ms)
		return (SM_CMP(p[j].last_ok_ms, p[i].last_ok_ms));
	return (strcmp(p[i].m->url, p[j].m->url));
}

static enum sm_member_state
probe_state(const struct sm_ring *r, const struct probe *p, int64_t now)
{
	if (p->conflict_id != NULL)
		return (SM_MEMBER_CONFLICT);
	if (p->last_ok_ms == 0)
		return (SM_MEMBER_PENDING);
	if (now - p->last_ok_ms > r->cfg.heartbeat_timeout_ms)
		return (SM_MEMBER_UNHEALTHY);
	return (p->reported);
}

/* Build the snapshot the prober's state describes now. */
static struct sm_ring_snap *
snap_from_probes(struct sm_ring *r, int64_t now)
{
	struct sm_ring_snap *s = snap_alloc(r->np, (uint32_t)r->cfg.tokens,
	    (uint32_t)r->cfg.rf);
	uint32_t *order = sm_malloc((size_t)SM_MAX(r->np, 1) *
	    sizeof(*order));

	if (s == NULL || order == NULL)
		goto fail;
	for (uint32_t i = 0; i < r->np; i++)
		order[i] = i;
	qsort_r(order, r->np, sizeof(*order), snap_member_cmp, r->p);
	for (uint32_t k = 0; k < r->np; k++) {
		struct probe *p = &r->p[order[k]];

		if (p->id != NULL && (s->id[k] = sm_strdup(p->id)) == NULL)
			goto fail;
		/* Two addresses claiming one id: all but the freshest
		 * conflict (and own no tokens). */
		if (p->id != NULL && k > 0 && s->id[k - 1] != NULL &&
		    strcmp(s->id[k - 1], p->id) == 0)
			s->state[k] = SM_MEMBER_CONFLICT;
		else
			s->state[k] = probe_state(r, p, now);
		s->m[k] = p->m;
		member_ref(p->m);
		s->healthy[k] = s->state[k] == SM_MEMBER_ACTIVE ||
		    s->state[k] == SM_MEMBER_READONLY;
		s->writable[k] = s->state[k] == SM_MEMBER_ACTIVE;
		s->nhealthy += s->healthy[k];
		s->nwritable += s->writable[k];
		if (p->zone != NULL && (s->zone[k] = sm_strdup(p->zone)) ==
		    NULL)
			goto fail;
		memcpy(s->inc[k], p->inc, sizeof(s->inc[k]));
	}
	/* Readers rely on the order (ring.h: sorted by id, unknown ids
	 * last; duplicates only in CONFLICT). */
	for (uint32_t k = 1; k < r->np; k++)
		SM_ASSERT(s->id[k] == NULL || (s->id[k - 1] != NULL &&
		    strcmp(s->id[k - 1], s->id[k]) <= 0));
	if (snap_tokens(s, s->id) != 0)
		goto fail;
	for (uint32_t t = 1; t < s->ntok; t++)
		SM_ASSERT(s->tok[t - 1] <= s->tok[t]);   /* the walk's search */
	snap_zones(s);
	sm_free(order);
	return (s);
fail:
	sm_free(order);
	snap_free(s);
	return (NULL);
}

static bool
snap_same(const struct sm_ring_snap *a, const struct sm_ring_snap *b)
{
	if (a == NULL || b == NULL || a->n != b->n || a->ntok != b->ntok)
		return (false);
	for (uint32_t i = 0; i < a->n; i++) {
		if (a->m[i] != b->m[i] || a->state[i] != b->state[i] ||
		    (a->id[i] == NULL) != (b->id[i] == NULL) ||
		    (a->id[i] != NULL && strcmp(a->id[i], b->id[i]) != 0) ||
		    (a->zone[i] == NULL) != (b->zone[i] == NULL) ||
		    (a->zone[i] != NULL && strcmp(a->zone[i],
		    b->zone[i]) != 0) || strcmp(a->inc[i], b->inc[i]) != 0)
			return (false);
	}
	return (memcmp(a->tok, b->tok, a->ntok * sizeof(*a->tok)) == 0 &&
	    memcmp(a->owner, b->owner, a->ntok * sizeof(*a->owner)) == 0);
}

static void
publish(struct sm_ring *r, struct sm_ring_snap *s)
{
	struct sm_ring_snap *old = r->cur;
	uint32_t counts[SM_MEMBER_READONLY + 1] = { 0 };

	for (uint32_t i = 0; i < s->n; i++) {
		if (old == NULL || i >= old->n || old->m[i] != s->m[i] ||
		    old->state[i] != s->state[i])
			sm_info("ring", "member state\tring=%s id=%s url=%s "
			    "state=%s", r->cfg.name, s->id[i] != NULL ? s->id[i] :
			    "?", s->m[i]->url, sm_member_state_name(s->state[i]));
		counts[s->state[i]]++;
	}
	for (int k = 0; k <= SM_MEMBER_READONLY; k++)
		sm_gauge_set(sm_metric_child(m_members, r->cfg.name,
		    sm_member_state_name((enum sm_member_state)k)),
		    (double)counts[k]);
	rcu_assign_pointer(r->cur, s);
	if (old != NULL) {
		synchronize_rcu();
		sm_ring_release(old);
	}
}

uint32_t
sm_ring_start_healthy(const struct sm_ring_snap *s, struct sm_rpc_multi *m,
    const void *req, size_t len, int timeout_ms)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n; i++) {
		if (!s->healthy[i])
			continue;
		sm_rpc_multi_start(m, i, s->m[i]->client, req, len, timeout_ms,
		    SM_RPC_FAILFAST);
		n++;
	}
	return (n);
}

/*
 * Member p did not answer this round (transport status st).  A peer cut
 * off by a partition leaves its connection open and silent, and TCP backs
 * its retransmissions off to two minutes apart (its SYNs to one), so once
 * the network heals the member would stay unreachable for that long.
 * Once the member has not answered for REDIAL_AFTER_MS, or for
 * -ring.heartbeat-timeout if that is longer (it is unhealthy: nothing is
 * routed to it any more), its connection is dialed afresh, and again
 * every REDIAL_MS while it stays silent, so it is reachable within a dial
 * of the network coming back.  Calls still waiting on the old connection
 * fail then; a member that is only slow, or paused for less than that
 * (a GC pause, a store-gateway waiting on a hung bucket), keeps its
 * connection and its calls.  Redialing a member that is down costs one
 * refused connect.  A member never heard from counts its silence from
 * when the prober took it on: its first connect is still under way (and
 * nng 1.5.2 leaks the transport endpoint of a dialer closed in the middle
 * of a connect, so a needless redial is not free either).
 */
#define REDIAL_AFTER_MS 10000
#define REDIAL_MS 5000

static void
probe_silent(const struct sm_ring *r, struct probe *p, int st, int64_t now)
{
	int rv;

	if (st == SM_RPC_PENDING || st == 0)
		return;
	if (now - SM_MAX(p->last_ok_ms, p->added_ms) <
	    SM_MAX(r->cfg.heartbeat_timeout_ms, REDIAL_AFTER_MS))
		return;
	if (p->redial_ms == 0 || now - p->redial_ms >= REDIAL_MS) {
		if (!p->redialing)
			sm_info("ring", "member unhealthy: dialing it afresh "
			    "while it stays silent\turl=%s", p->m->url);
		p->redialing = true;
		p->redial_ms = now;
		if ((rv = sm_rpc_client_redial(p->m->client)) != 0)
			sm_warn("ring", "redial failed\turl=%s err=%s",
			    p->m->url, sm_strerror(rv));
	}
}

/* Ask every member for its health (a multi call waited for), or NULL when
 * there is no member or no multi call. */
static struct sm_rpc_multi *
probe_ask(struct sm_ring *r)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__HealthRequest hr = SMOLDER__V1__HEALTH_REQUEST__INIT;
	struct sm_rpc_multi *mc = NULL;
	uint8_t buf[32];
	size_t len;
	int timeout = (int)SM_MIN(r->cfg.heartbeat_ms, 5000);

	req.method_case = SMOLDER__V1__REQUEST__METHOD_HEALTH;
	req.health = &hr;
	if (r->np > 0 && sm_rpc_multi_create(r->np, "health", &mc) == 0) {
		/* Fail fast on a member without a connection: a dead member
		 * must not hold up the round for the others.  Each request
		 * names the tenant list version we hold for its member, so
		 * the list travels only when it changed. */
		for (uint32_t i = 0; i < r->np; i++) {
			hr.tenants_version = member_tenants_ver(r->p[i].m);
			len = smolder__v1__request__pack(&req, buf);
			sm_rpc_multi_start(mc, i, r->p[i].m->client, buf, len,
			    timeout, SM_RPC_FAILFAST);
		}
		sm_rpc_multi_wait(mc);
	}
	return (mc);
}

/* Check the id member p answers with; false when its address now belongs
 * to another member (p->replace set: it starts over with a fresh member
 * and connection), so the answer is not recorded. */
static bool
probe_identity(struct probe *p, const char *id)
{
	if (p->declared) {
		if (strcmp(p->id, id) != 0) {
			if (p->conflict_id == NULL)
				sm_error("ring", "member answers with another "
				    "id\turl=%s expected=%s got=%s", p->m->url,
				    p->id, id);
			sm_free(p->conflict_id);
			p->conflict_id = sm_strdup(id);
		} else {
			sm_free(p->conflict_id);
			p->conflict_id = NULL;
		}
	} else if (p->id == NULL) {
		p->id = sm_strdup(id);
	} else if (strcmp(p->id, id) != 0) {
		p->replace = true;
		return (false);
	}
	return (true);
}

/* The ring state of a member state on the wire. */
static enum sm_member_state
probe_wire_state(Smolder__V1__MemberState st)
{
	switch (st) {
	case SMOLDER__V1__MEMBER_STATE__MEMBER_ACTIVE:
		return (SM_MEMBER_ACTIVE);
	case SMOLDER__V1__MEMBER_STATE__MEMBER_JOINING:
		return (SM_MEMBER_JOINING);
	case SMOLDER__V1__MEMBER_STATE__MEMBER_READONLY:
		return (SM_MEMBER_READONLY);
	default:
		return (SM_MEMBER_LEAVING);
	}
}

/* Record the clock skew of a member that reports its clock, against the
 * middle of the round [sent, now], warning (every ten minutes at most)
 * past SKEW_WARN_MS. */
static void
probe_skew(struct probe *p, const Smolder__V1__HealthResponse *h,
    int64_t sent, int64_t now)
{
	int64_t skew;

	if (h->now_ms <= 0)
		return;
	skew = h->now_ms - (sent + now) / 2;
	atomic_store(&p->m->skew_ms, skew);
	atomic_store(&p->m->skew_known, true);
	sm_gauge_set(sm_metric_child(m_skew, p->m->url), (double)skew / 1000.0);
	if ((skew > SKEW_WARN_MS || skew < -SKEW_WARN_MS) &&
	    now - p->skew_logged_ms >= 600000) {
		sm_warn("ring", "member clock skew: its deadlines are "
		    "translated, but fix the clocks (NTP)\turl=%s skew_ms=%lld",
		    p->m->url, (long long)skew);
		p->skew_logged_ms = now;
	}
}

/* Learn the zone a member reports.  A member's zone is kept while it is
 * down: placement must not move because a member stopped answering. */
static void
probe_zone(struct probe *p, const char *zone)
{
	char *z;

	if (zone == NULL || zone[0] == '\0' || (p->zone != NULL &&
	    strcmp(p->zone, zone) == 0))
		return;
	if ((z = sm_strdup(zone)) == NULL)
		return;
	if (p->zone != NULL)
		sm_warn("ring", "member changed its zone\turl=%s from=%s to=%s",
		    p->m->url, p->zone, z);
	sm_free(p->zone);
	p->zone = z;
}

/* Record member p's health answer h, received at `now`. */
static void
probe_record(struct probe *p, const Smolder__V1__HealthResponse *h,
    int64_t sent, int64_t sent_ns, int64_t now)
{
	p->reported = probe_wire_state(h->state);
	probe_skew(p, h, sent, now);
	probe_zone(p, h->zone);
	/* A wiped disk comes back as a new incarnation. */
	if (h->incarnation != NULL && strlen(h->incarnation) == 32)
		memcpy(p->inc, h->incarnation, 33);
	member_witness_set(p->m, h);
	member_tenants_set(p->m, h, sent_ns);
	atomic_store(&p->m->data_min_ms, h->data_min_ms);
	atomic_store(&p->m->data_min_known, h->has_data_min);
	p->last_ok_ms = now;
	atomic_store(&p->m->last_heartbeat_ms, now);
	atomic_store(&p->m->series, h->series);
	atomic_store(&p->m->head_bytes, h->head_bytes);
}

/* Take member i's reply to the round sent at `sent` and done at `now`:
 * a silent member may be redialed, a failed answer counted, a good one
 * recorded. */
static void
probe_reply(struct sm_ring *r, struct sm_rpc_multi *mc, uint32_t i,
    int64_t sent, int64_t sent_ns, int64_t now)
{
	struct probe *p = &r->p[i];
	Smolder__V1__Response *resp = NULL;
	const uint8_t *d;
	size_t dl;

	if (sm_rpc_multi_reply(mc, i, &d, &dl) == 0)
		resp = smolder__v1__response__unpack(NULL, dl, d);
	if (resp == NULL)
		probe_silent(r, p, sm_rpc_multi_status(mc, i), now);
	else
		p->redialing = false;
	if (resp == NULL || resp->code != 0 || resp->result_case !=
	    SMOLDER__V1__RESPONSE__RESULT_HEALTH ||
	    resp->health->instance_id == NULL ||
	    resp->health->instance_id[0] == '\0') {
		sm_counter_inc(sm_metric_child(m_probe_fail, p->m->url));
		if (resp != NULL)
			smolder__v1__response__free_unpacked(resp, NULL);
		return;
	}
	if (probe_identity(p, resp->health->instance_id))
		probe_record(p, resp->health, sent, sent_ns, now);
	smolder__v1__response__free_unpacked(resp, NULL);
}

/* Re-add every member whose address now answers as another, as a fresh
 * member with a fresh connection. */
static void
probe_replace(struct sm_ring *r)
{
	for (uint32_t i = 0; i < r->np;) {
		char *url;
		struct sm_err e;

		if (!r->p[i].replace) {
			i++;
			continue;
		}
		url = sm_strdup(r->p[i].m->url);
		probe_remove(r, i);   /* moves the last entry into slot i */
		sm_err_clear(&e);
		if (url != NULL && probe_add(r, NULL, url, &e) != 0)
			sm_warn("ring", "cannot re-add member\turl=%s err=\"%s\"",
			    url, e.msg);
		sm_free(url);
	}
}

/* One probe round: ask every member for its health, wait, record. */
static void
probe_round(struct sm_ring *r)
{
	struct sm_rpc_multi *mc;
	struct sm_ring_snap *s;
	int64_t now, sent = ring_now_ms(r);
	int64_t sent_ns = sm_clock_mono_ns(r->cfg.clock);

	mc = probe_ask(r);
	now = ring_now_ms(r);
	for (uint32_t i = 0; mc != NULL && i < r->np; i++)
		probe_reply(r, mc, i, sent, sent_ns, now);
	sm_rpc_multi_destroy(mc);
	probe_replace(r);
	if ((s = snap_from_probes(r, now)) != NULL) {
		if (snap_same(s, r->cur))
			snap_free(s);
		else
			publish(r, s);
	}
	atomic_fetch_add(&r->rounds, 1);
}

static void
ring_tick(struct sm_ring *r)
{
	/* etcd: at once on a change the watcher saw, and every refresh
	 * period in any case (a watch can miss nothing, but a listing that
	 * failed must be retried) */
	if (r->etcd != NULL && (atomic_exchange(&r->etcd_dirty, false) ||
	    ring_now_ms(r) >= r->next_etcd_ms)) {
		r->next_etcd_ms = ring_now_ms(r) + r->cfg.dns_refresh_ms;
		etcd_refresh(r);
	}
	if (r->dns_host != NULL && ring_now_ms(r) >= r->next_dns_ms) {
		dns_refresh(r);
		r->next_dns_ms = ring_now_ms(r) + r->cfg.dns_refresh_ms;
	}
	probe_round(r);
}

/*
 * While a member is starting (never answered, or replaying), probe every
 * 100 ms so it takes traffic as soon as it is ready; otherwise once per
 * heartbeat period.
 */
static int64_t
ring_interval(const struct sm_ring *r)
{
	for (uint32_t i = 0; i < r->np; i++) {
		if (r->p[i].conflict_id == NULL && (r->p[i].last_ok_ms == 0 ||
		    r->p[i].reported == SM_MEMBER_JOINING))
			return (SM_MIN(r->cfg.heartbeat_ms, 100));
	}
	return (r->cfg.heartbeat_ms);
}

static void *
ring_main(void *arg)
{
	struct sm_ring *r = arg;

	/* sm_ring_start ran the first round: the next is one interval
	 * later (or sooner when woken: an etcd change, a stop), not at
	 * once, which would probe every member twice in a row. */
	pthread_mutex_lock(&r->mu);
	while (!r->stopping) {
		sm_clock_wait_ms(r->cfg.clock, &r->cv, &r->mu,
		    ring_interval(r));
		if (r->stopping)
			break;
		pthread_mutex_unlock(&r->mu);
		ring_tick(r);
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return (NULL);
}

/* --- /ring ------------------------------------------------------------------ */

static void
html_escape(struct sm_buf *b, const char *s)
{
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '<':
			sm_buf_puts(b, "&lt;");
			break;
		case '>':
			sm_buf_puts(b, "&gt;");
			break;
		case '&':
			sm_buf_puts(b, "&amp;");
			break;
		case '"':
			sm_buf_puts(b, "&quot;");
			break;
		default:
			sm_buf_putc(b, *s);
			break;
		}
	}
}

/* Fraction of the key space for which member i is the first owner. */
static void
ownership(const struct sm_ring_snap *s, double *own, uint32_t *ntok)
{
	for (uint32_t i = 0; i < s->n; i++) {
		own[i] = 0;
		ntok[i] = 0;
	}
	for (uint32_t k = 0; k < s->ntok; k++) {
		uint32_t prev = k == 0 ? s->tok[s->ntok - 1] : s->tok[k - 1];
		uint32_t span = s->tok[k] - prev;   /* wraps for k == 0 */

		if (s->ntok == 1)
			span = UINT32_MAX;
		own[s->owner[k]] += (double)span / 4294967296.0;
		ntok[s->owner[k]]++;
	}
}

static void
ring_handler(struct sm_http_req *req, void *arg)
{
	struct sm_ring *r = arg;
	struct sm_ring_snap *s = sm_ring_acquire(r);
	const char *fmt = sm_http_query(req, "format");
	const char *accept = sm_http_header(req, "Accept");
	bool html = fmt != NULL ? strcmp(fmt, "html") == 0 :
	    accept != NULL && strstr(accept, "text/html") != NULL;
	struct sm_buf out = SM_BUF_INIT;
	double *own = sm_calloc(SM_MAX(s->n, 1), sizeof(*own));
	uint32_t *ntok = sm_calloc(SM_MAX(s->n, 1), sizeof(*ntok));
	int64_t now = ring_now_ms(r);

	if (own == NULL || ntok == NULL) {
		sm_http_reply_error(req, 500, "internal", "out of memory");
		goto out;
	}
	ownership(s, own, ntok);
	if (html) {
		sm_buf_printf(&out, "<!DOCTYPE html>\n<html><head><meta "
		    "charset=\"utf-8\"><title>Smolder ring</title></head><body>"
		    "<h1>Ring: %s</h1><p>replication factor %u, write "
		    "quorum %u, %u of %u members healthy, %u tokens per "
		    "member, %u zones (%s)</p>\n<table border=\"1\" "
		    "cellpadding=\"4\"><tr><th>ID</th><th>Zone</th>"
		    "<th>Address</th><th>State</th><th>Healthy</th>"
		    "<th>Tokens</th><th>Ownership</th><th>Last heartbeat"
		    "</th><th>Head series</th><th>Head bytes</th></tr>\n",
		    r->cfg.name, s->rf, s->quorum, s->nhealthy, s->n, s->tokens_per_member,
		    s->nzones, s->zone_aware ? "replicas in distinct zones" :
		    "not zone-aware");
	} else {
		sm_buf_printf(&out, "{\"replication_factor\":%u,\"quorum\":%u,"
		    "\"tokens_per_member\":%u,\"healthy\":%u,\"zones\":%u,"
		    "\"zone_aware\":%s,\"members\":[", s->rf, s->quorum,
		    s->tokens_per_member, s->nhealthy, s->nzones,
		    s->zone_aware ? "true" : "false");
	}
	for (uint32_t i = 0; i < s->n; i++) {
		const struct sm_ring_member *m = s->m[i];
		int64_t hb = atomic_load(&((struct sm_ring_member *)m)->
		    last_heartbeat_ms);
		const char *id = s->id[i] != NULL ? s->id[i] : "";
		char ago[48];

		if (hb != 0)
			snprintf(ago, sizeof(ago), "%lld ms ago",
			    (long long)(now - hb));
		else
			snprintf(ago, sizeof(ago), "never");
		if (html) {
			sm_buf_puts(&out, "<tr><td>");
			html_escape(&out, id);
			sm_buf_puts(&out, "</td><td>");
			html_escape(&out, s->zone[i] != NULL ? s->zone[i] : "");
			sm_buf_puts(&out, "</td><td>");
			html_escape(&out, m->url);
			sm_buf_printf(&out, "</td><td>%s</td><td>%s</td><td>%u"
			    "</td><td>%.1f%%</td><td>%s</td><td>%llu</td><td>"
			    "%llu</td></tr>\n", sm_member_state_name(
			    s->state[i]), s->healthy[i] ? "yes" : "no",
			    ntok[i], own[i] * 100, ago, (unsigned long long)
			    atomic_load(&((struct sm_ring_member *)m)->series),
			    (unsigned long long)atomic_load(
			    &((struct sm_ring_member *)m)->head_bytes));
			continue;
		}
		sm_buf_puts(&out, i > 0 ? ",{\"id\":" : "{\"id\":");
		sm_buf_json_str(&out, id, strlen(id));
		sm_buf_puts(&out, ",\"zone\":");
		if (s->zone[i] != NULL)
			sm_buf_json_str(&out, s->zone[i], strlen(s->zone[i]));
		else
			sm_buf_puts(&out, "null");
		sm_buf_puts(&out, ",\"address\":");
		sm_buf_json_str(&out, m->url, strlen(m->url));
		if (s->inc[i][0] != '\0')
			sm_buf_printf(&out, ",\"incarnation\":\"%s\"",
			    s->inc[i]);
		else
			sm_buf_puts(&out, ",\"incarnation\":null");
		sm_buf_printf(&out, ",\"state\":\"%s\",\"healthy\":%s,"
		    "\"tokens\":%u,\"ownership\":%.6f,\"last_heartbeat_ms\":%lld,"
		    "\"last_heartbeat_ago_ms\":%lld,\"head_series\":%llu,"
		    "\"head_bytes\":%llu", sm_member_state_name(s->state[i]),
		    s->healthy[i] ? "true" : "false", ntok[i], own[i],
		    (long long)hb, hb != 0 ? (long long)(now - hb) : -1LL,
		    (unsigned long long)atomic_load(
		    &((struct sm_ring_member *)m)->series), (unsigned long long)
		    atomic_load(&((struct sm_ring_member *)m)->head_bytes));
		if (atomic_load(&((struct sm_ring_member *)m)->skew_known))
			sm_buf_printf(&out, ",\"clock_skew_ms\":%lld}",
			    (long long)atomic_load(
			    &((struct sm_ring_member *)m)->skew_ms));
		else
			sm_buf_puts(&out, ",\"clock_skew_ms\":null}");
	}
	sm_buf_puts(&out, html ? "</table></body></html>\n" : "]}\n");
	if (sm_buf_error(&out) != 0)
		sm_http_reply_error(req, 500, "internal", "out of memory");
	else
		sm_http_reply_buf(req, 200, html ? "text/html; charset=utf-8" :
		    "application/json", &out);
out:
	sm_buf_fini(&out);
	sm_free(own);
	sm_free(ntok);
	sm_ring_release(s);
}

/* --- lifecycle -------------------------------------------------------------- */

int
sm_ring_start(struct sm_ring *r, struct sm_err *err)
{
	/* A first snapshot before anyone asks: probe once, synchronously.
	 * Give fresh connections a moment to come up (inproc is instant,
	 * tcp to a live peer takes a round trip). */
	if (r->dns_host != NULL) {
		dns_refresh(r);
		r->next_dns_ms = ring_now_ms(r) + r->cfg.dns_refresh_ms;
	}
	if (r->etcd != NULL) {
		etcd_refresh(r);
		r->next_etcd_ms = ring_now_ms(r) + r->cfg.dns_refresh_ms;
	}
	for (int i = 0; i < 20; i++) {
		uint32_t up = 0;

		for (uint32_t k = 0; k < r->np; k++)
			up += sm_rpc_client_connected(r->p[k].m->client);
		if (up == r->np)
			break;
		usleep(10000);
	}
	probe_round(r);
	if (pthread_create(&r->thr, NULL, ring_main, r) != 0)
		return (sm_err_set(err, SM_ENOMEM, "ring: thread"));
	r->started = 1;
	if (r->etcd != NULL) {
		if (pthread_create(&r->watch_thr, NULL, etcd_watch_main, r) !=
		    0) {
			sm_ring_stop(r);
			return (sm_err_set(err, SM_ENOMEM, "ring: thread"));
		}
		r->watching = true;
	}
	return (0);
}

void
sm_ring_stop(struct sm_ring *r)
{
	if (r == NULL || !r->started)
		return;
	sm_cond_set_flag(&r->mu, &r->cv, &r->stopping);
	if (r->watching) {
		sm_etcd_cancel(r->etcd);   /* ends the watch in flight */
		pthread_join(r->watch_thr, NULL);
		r->watching = false;
	}
	pthread_join(r->thr, NULL);
	r->started = 0;
}

void
sm_ring_destroy(struct sm_ring *r)
{
	if (r == NULL)
		return;
	sm_ring_stop(r);
	if (r->cur != NULL) {
		synchronize_rcu();
		sm_ring_release(r->cur);
	}
	while (r->np > 0)
		probe_remove(r, r->np - 1);
	sm_free(r->p);
	sm_free(r->members_spec);
	sm_free(r->dns_spec);
	sm_free(r->self_id);
	sm_free(r->self_url);
	sm_free(r->dns_host);
	sm_free(r->dns_port);
	sm_etcd_destroy(r->etcd);
	sm_free(r->etcd_prefix);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	sm_free(r);
}

uint64_t
sm_ring_rounds(const struct sm_ring *r)
{
	return (atomic_load((_Atomic uint64_t *)&r->rounds));
}

struct sm_ring_snap *
sm_ring_acquire(struct sm_ring *r)
{
	struct sm_ring_snap *s;

	rcu_read_lock();
	s = rcu_dereference(r->cur);
	atomic_fetch_add(&s->refs, 1);
	rcu_read_unlock();
	return (s);
}

/* --- registration in etcd ------------------------------------------------- */

struct sm_ring_reg {
	struct sm_etcd *etcd;
	char *key, *val;
	int64_t period_ms;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stopping, left, warned;
	/* held around every etcd call, so a leave's delete is never
	 * followed by a put the thread had started before */
	pthread_mutex_t io;
};

/* Put the key unless etcd already holds exactly our value.  Caller holds
 * nothing; the key and value never change. */
static int
reg_sync(struct sm_ring_reg *g, struct sm_err *err)
{
	struct sm_etcd_kv *kvs = NULL;
	size_t n = 0;
	int64_t rev;
	bool same = false;
	int rv;

	if ((rv = sm_etcd_range(g->etcd, g->key, &kvs, &n, &rev, err)) != 0)
		return (rv);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(kvs[i].key, g->key) == 0)
			same = strcmp(kvs[i].val, g->val) == 0;
	}
	sm_etcd_kvs_free(kvs, n);
	if (same)
		return (0);
	if ((rv = sm_etcd_put(g->etcd, g->key, g->val, strlen(g->val), 0,
	    err)) == 0)
		sm_info("ring", "registered in etcd\tkey=%s value=%s", g->key,
		    g->val);
	return (rv);
}

static void *
reg_main(void *arg)
{
	struct sm_ring_reg *g = arg;

	pthread_mutex_lock(&g->mu);
	while (!g->stopping) {
		struct sm_err err;
		int rv = 0;

		if (!g->left) {
			pthread_mutex_unlock(&g->mu);
			sm_err_clear(&err);
			pthread_mutex_lock(&g->io);
			rv = g->left ? 0 : reg_sync(g, &err);
			pthread_mutex_unlock(&g->io);
			pthread_mutex_lock(&g->mu);
			if (rv != 0 && rv != SM_ECLOSED && !g->warned)
				sm_warn("ring", "cannot register in etcd "
				    "(retrying every second)\tkey=%s err=\"%s\"",
				    g->key, err.msg);
			g->warned = rv != 0;
		}
		if (!g->stopping)
			sm_cond_wait_ms(&g->cv, &g->mu, rv != 0 ? 1000 :
			    g->period_ms);
	}
	pthread_mutex_unlock(&g->mu);
	return (NULL);
}

/* Frees what sm_ring_reg_start built; its thread is not running. */
static void
reg_free(struct sm_ring_reg *g)
{
	sm_etcd_destroy(g->etcd);
	sm_free(g->key);
	free(g->val);
	pthread_mutex_destroy(&g->mu);
	pthread_mutex_destroy(&g->io);
	pthread_cond_destroy(&g->cv);
	sm_free(g);
}

int
sm_ring_reg_start(const char *endpoints, int64_t timeout_ms,
    const char *prefix, const char *id, const char *addr, const char *zone,
    int64_t period_ms, struct sm_ring_reg **out, struct sm_err *err)
{
	struct sm_ring_reg *g;
	size_t kl;
	int rv;

	*out = NULL;
	if ((g = sm_calloc(1, sizeof(*g))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	pthread_mutex_init(&g->mu, NULL);
	pthread_mutex_init(&g->io, NULL);
	sm_cond_init(&g->cv);
	g->period_ms = period_ms > 0 ? period_ms : 10000;
	kl = strlen(prefix) + strlen(id) + 1;
	if ((g->key = sm_malloc(kl)) == NULL ||
	    sm_ring_member_value(id, addr, zone, &g->val) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto fail;
	}
	(void)snprintf(g->key, kl, "%s%s", prefix, id);
	if ((rv = sm_etcd_open(endpoints, timeout_ms, &g->etcd, err)) != 0)
		goto fail;
	if (pthread_create(&g->thr, NULL, reg_main, g) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "ring: thread");
		goto fail;
	}
	*out = g;
	return (0);
fail:
	reg_free(g);
	return (rv);
}

int
sm_ring_reg_leave(struct sm_ring_reg *g, struct sm_err *err)
{
	int rv;

	if (g == NULL)
		return (0);
	pthread_mutex_lock(&g->io);
	pthread_mutex_lock(&g->mu);
	g->left = true;
	pthread_mutex_unlock(&g->mu);
	if ((rv = sm_etcd_delete(g->etcd, g->key, err)) == 0)
		sm_info("ring", "left etcd\tkey=%s", g->key);
	pthread_mutex_unlock(&g->io);
	return (rv);
}

void
sm_ring_reg_stop(struct sm_ring_reg *g)
{
	if (g == NULL)
		return;
	sm_cond_set_flag(&g->mu, &g->cv, &g->stopping);
	sm_etcd_cancel(g->etcd);
	pthread_join(g->thr, NULL);
	reg_free(g);
}
