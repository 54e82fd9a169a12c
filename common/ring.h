/*
 * ring.h -- the ingester ring: membership, tokens, health and replica
 * placement (docs/architecture.md §4).  Distributors, queriers and the compactor each
 * keep one; ingesters are its members and need none.
 *
 * Members come from -ring.members ("id=tcp://host:port,..."), from
 * -ring.dns ("host:port": every address the name resolves to, as a
 * Kubernetes headless service gives; re-resolved periodically), or from
 * etcd (-ring.etcd.endpoints: the keys under <prefix>ingesters/, each
 * {"id", "addr", "zone"}, listed at start, again whenever the ring's
 * watcher thread sees a change under the prefix, and every
 * -ring.dns-refresh-period; a listing that fails changes nothing, so an
 * etcd outage never empties the ring; docs/operations.md §1).  With
 * neither, the ring is the process's own ingester (-instance.id at
 * -rpc.listen-address), which is how -target=all works: the same code
 * path over inproc://.
 *
 * Tokens: member `id` owns T tokens, token i = upper 32 bits of
 * XXH3("<id>#<i>") (common/hash.h; never change it).  Every process
 * computes the same ring from the same member ids without coordination.
 * A DNS-discovered member's id is learnt from its health answer, so a pod
 * that comes back with a new IP keeps its tokens.
 *
 * Health: a prober thread sends every member a Health RPC each
 * -ring.heartbeat-period (concurrently, nng aio).  A member is healthy
 * when its last good answer is at most -ring.heartbeat-timeout old and
 * said ACTIVE (not replaying, not shutting down) or READONLY: a READONLY
 * member (over its memory bound, or its disk full) serves reads but takes
 * no writes -- they go to the next token owner, and it gets hints once it
 * takes writes again -- so a refusing ingester is never a write replica.  A static member that
 * answers with another id is in CONFLICT and never healthy; so is every
 * address but the most recently heard one when several answer with one id
 * (a dual-stack DNS name, a pod whose old address is still resolved).
 *
 * Placement: key = sm_ring_key(tenant, series labels without the
 * per-sample-type labels), so every sample type of one upload lands on the
 * same replicas.  The replicas are the first RF distinct *healthy* members
 * met walking the tokens clockwise from the key: an unhealthy member is
 * skipped and the next token owner fills the set.  Writes need quorum =
 * floor(RF/2)+1 acknowledgements.
 *
 * Zones: an ingester's -instance.zone comes with its Health answers and
 * is kept while it is down.  With at least RF known zones (and RF > 1)
 * the ring is zone-aware: the walk takes one member per zone, so a
 * series' replicas are in RF distinct zones, and a whole zone down costs
 * each series one replica -- writes keep their quorum (the down zone's
 * replicas get hints) and reads stay exact.  The read budget then counts
 * zones, not members (sm_ring_read_units): a query tolerates any number
 * of lost members within RF - quorum zones.  With fewer zones than RF,
 * zones are ignored (placement as without them; /ring says
 * "zone_aware": false).
 *
 * Snapshots: everything a reader needs -- members, their health, the
 * sorted token table -- is one immutable sm_ring_snap.  The prober builds a
 * new one when membership or health changes and swaps the pointer with
 * rcu_assign_pointer (liburcu-bp: readers need no registration); readers
 * take a reference inside rcu_read_lock, so they never block the prober
 * and a snapshot lives until its last reader releases it.  The old
 * snapshot's ring reference is dropped after synchronize_rcu().
 *
 * Clock skew: each Health answer carries the member's clock; the prober
 * keeps member - own (sm_ring_member.skew_ms, /ring's clock_skew_ms,
 * smolder_ring_member_clock_skew_seconds{member}) and logs a warning
 * when a member is more than 10 s off.  Deadlines sent to a member are
 * translated to its clock (sm_ring_member_deadline), so skew never
 * fails a call.
 *
 * Witness: each Health answer also carries the member's incarnation (in
 * the snapshot, like its zone) and its witness record (ingester/witness.h,
 * on the member: it changes with every write), both kept as the last
 * answer gave them, also while it is down: the distributor names
 * each write's replicas with their incarnations, and the querier judges
 * from the records whether an answer can be complete
 * (querier/complete.c).
 *
 * Time: the prober reads cfg.clock (common/clock.h; NULL = the real
 * clock) for everything it decides from elapsed time -- a member's last
 * good answer against -ring.heartbeat-timeout, the redial of a silent
 * member, the DNS and etcd refresh periods -- and waits its probe period
 * on it, so a test with a manual clock runs a round when it moves the
 * clock and makes a member miss its heartbeats without waiting for them.
 * The readings the ring hands out (last_heartbeat_ms, the tenants'
 * sm_mono_ns time for sm_ring_member_lacks) are on that clock too.  The
 * Health calls' own timeouts are nng's, and the etcd watcher's back-off
 * and the registration thread pace calls to etcd: those stay on the
 * real clock.
 *
 * The same code keeps the store-gateways' ring (cfg.name, ingester/
 * gateway.h): its members answer the same Health RPC.
 *
 * HTTP: GET /ring (the store-gateways': GET /store-gateway/ring) shows
 * members, zone, incarnation, state, tokens,
 * ownership and last heartbeat as JSON, or as an HTML table when the client accepts text/html
 * (or ?format=html).
 *
 * Ownership: the ring owns the members and their RPC clients.  Locking:
 * readers are lock-free; the prober is the only writer.  Errors: SM_EINVAL
 * for a bad member list or DNS name, SM_ENOMEM.
 */
#ifndef SM_RING_H
#define SM_RING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "clock.h"
#include "http.h"
#include "labels.h"
#include "rpc.h"
#include "sm.h"

struct sm_ring_cfg {
	/* "ingesters" (NULL or ""; its page is GET /ring) or
	 * "store-gateways" (GET /store-gateway/ring): the `ring` label of
	 * smolder_ring_members and of the ring's log lines.  Must outlive
	 * the ring. */
	const char *name;
	const char *members;          /* -ring.members, "" = none */
	const char *dns;              /* -ring.dns, "" = none */
	const char *self_id;          /* the local ingester, when no list */
	const char *self_url;
	int64_t tokens;               /* -ring.tokens */
	int64_t heartbeat_ms;         /* -ring.heartbeat-period */
	int64_t heartbeat_timeout_ms; /* -ring.heartbeat-timeout */
	int64_t dns_refresh_ms;       /* -ring.dns-refresh-period */
	int64_t rf;                   /* -distributor.replication-factor */
	size_t recv_max;              /* largest reply accepted from a member */
	/* -ring.etcd.endpoints ("" or NULL = none), the key prefix the
	 * members are under ("<-ring.etcd.prefix>ingesters/") and
	 * -ring.etcd.dial-timeout. */
	const char *etcd_endpoints;
	const char *etcd_prefix;
	int64_t etcd_timeout_ms;
	/* The clock of health and of the probe period (above, "Time");
	 * NULL = the real clock.  A manual one must outlive the ring. */
	const struct sm_clock *clock;
};

enum sm_member_state {
	SM_MEMBER_PENDING,            /* never answered */
	SM_MEMBER_ACTIVE,
	SM_MEMBER_JOINING,            /* replaying its head log */
	SM_MEMBER_LEAVING,            /* shutting down */
	SM_MEMBER_UNHEALTHY,          /* missed its heartbeat deadline */
	SM_MEMBER_CONFLICT,           /* answered with another member's id */
	SM_MEMBER_READONLY,           /* serves reads, refuses writes */
};

const char *sm_member_state_name(enum sm_member_state s);

struct sm_ring_member {
	char *url;
	struct sm_rpc_client *client;
	atomic_int refs;
	/* Written by the prober, read by /ring. */
	_Atomic int64_t last_heartbeat_ms;   /* wall clock; 0 = never */
	_Atomic uint64_t series, head_bytes;
	/* The member's clock minus ours (ms), from its last Health answer
	 * (its now_ms against the midpoint of our send and receive);
	 * skew_known false until a member that reports its clock answered.
	 * Callers that send a deadline add it (sm_ring_member_deadline). */
	_Atomic int64_t skew_ms;
	atomic_bool skew_known;
	/* From its last Health answer, under wmu: its witness record,
	 * packed (smolder.v1.Witness; querier/complete.c).  It changes with
	 * every write, so it lives here rather than in the snapshot. */
	pthread_mutex_t wmu;
	uint8_t *wit;
	size_t witlen;
	/* From its last Health answer: the oldest data time it holds
	 * (INT64_MAX: none), when it reports one (sm_ring_member_holds). */
	_Atomic int64_t data_min_ms;
	atomic_bool data_min_known;
	/* From its Health answers, under wmu: the tenants it holds anything
	 * of (sm_ring_tenant_hash values, sorted), the version they are of,
	 * and whether they are known (sm_ring_member_tenant). */
	uint64_t *tenants;
	uint32_t ntenants;
	uint64_t tenants_ver;
	bool tenants_known;
	/* sm_mono_ns() when the probe whose answer last confirmed the list
	 * was sent, and the member's HealthResponse.tenant_hold_ms (0: it
	 * does not hold; sm_ring_member_lacks). */
	int64_t tenants_at_ns;
	uint32_t tenant_hold_ms;
};

/* A tenant's hash in a member's tenant list (HealthResponse.tenants). */
uint64_t sm_ring_tenant_hash(const char *tenant);

/*
 * Does member m hold anything of the tenant whose sm_ring_tenant_hash is
 * h?  1 yes (or a hash collision), 0 no -- as of its last Health answer
 * -- and -1 while its list is not known (it never answered, or runs a
 * version that does not send one).
 */
int sm_ring_member_tenant(struct sm_ring_member *m, uint64_t h);

/*
 * Confined reads.  A member may be left out of a tenant's query when it
 * surely holds nothing of the tenant.  Its tenant list says so as of the
 * Health answer that carried or confirmed it; a write it took since is
 * covered by a hold: an ingester answers a write of a tenant that joined
 * its list less than tenant_hold_ms ago with what is left of that time
 * (WriteResponse.tenant_hold_ms), and the distributor acknowledges a
 * shuffle-sharded tenant's write only once, for every series, one
 * replica that took it has no hold left (distributor/push.c).  So once a
 * write is acknowledged, some replica of each series has listed the
 * tenant for tenant_hold_ms; a querier that asked that replica for its
 * list less than tenant_hold_ms ago has the tenant in it and asks it.
 * The hold is 2 heartbeat periods and a second: a probe round is sent
 * every period and waits at most one, so a member that answers its
 * probes has always been asked within the hold.
 */
static inline int64_t
sm_ring_tenant_hold_ms(int64_t heartbeat_ms)
{
	return (2 * heartbeat_ms + 1000);
}

/*
 * How long after a change of shard sizes (a runtime-config reload, or
 * the process's start) a querier keeps asking every ingester: every
 * process applies a reload within two reload periods of the file's
 * change, so distributors and queriers may disagree on whether a tenant
 * is sharded -- and whether its writes are held -- for that long; the
 * hold after it lets the writes sent meanwhile be listed.
 */
static inline int64_t
sm_ring_confine_settle_ms(int64_t heartbeat_ms, int64_t reload_ms)
{
	return (2 * reload_ms + sm_ring_tenant_hold_ms(heartbeat_ms));
}

/*
 * 1 when member m surely holds nothing of the tenant whose hash is h
 * (above): its list lacks h, it holds (tenant_hold_ms > 0), and the
 * probe that confirmed its list was sent at most its hold minus 100 ms
 * before now_ns (sm_mono_ns()).  0 otherwise (it may hold some, its
 * list is unknown or too old).
 */
int sm_ring_member_lacks(struct sm_ring_member *m, uint64_t h,
    int64_t now_ns);

/* May member m hold data before time t (unix ms)?  False only when its
 * last Health answer said its oldest data is at or after t. */
static inline bool sm_ring_member_holds(struct sm_ring_member *m, int64_t t)
{
	return (!atomic_load(&m->data_min_known) ||
	    atomic_load(&m->data_min_ms) < t);
}

/* A copy of member m's packed witness record (heap, *len bytes; NULL and
 * 0 while none is known).  SM_ENOMEM. */
int sm_ring_member_witness(struct sm_ring_member *m, uint8_t **out,
    size_t *len);

/*
 * A deadline of this process's clock (unix ms), in member m's clock: a
 * member whose clock is minutes off then judges it as meant
 * (querier/fanout.c; the member allows 1 s more).  Unchanged while its
 * skew is unknown.
 */
static inline int64_t
sm_ring_member_deadline(const struct sm_ring_member *m, int64_t deadline_ms)
{
	return (atomic_load(&m->skew_known) ? deadline_ms +
	    atomic_load(&m->skew_ms) : deadline_ms);
}

struct sm_ring_snap {
	atomic_int refs;
	uint32_t n;                        /* members */
	struct sm_ring_member **m;         /* sorted by id; unknown ids last */
	char **id;                         /* per member; NULL = not known */
	enum sm_member_state *state;       /* per member */
	uint8_t *healthy;                  /* per member: takes reads (ACTIVE
					      or READONLY) */
	uint32_t nhealthy;
	uint8_t *writable;                 /* per member: takes writes
					      (ACTIVE) */
	uint32_t nwritable;
	uint32_t ntok;
	uint32_t *tok;                     /* sorted */
	uint32_t *owner;                   /* member index of tok[i] */
	uint32_t rf, quorum;
	uint32_t tokens_per_member;
	/* Zones (above): per member its zone (NULL: none known) and zone
	 * index (members of no known zone each get their own). */
	char **zone;
	uint32_t *zix;
	uint32_t nzones;                   /* distinct known zones */
	bool zone_aware;                   /* rf > 1 and nzones >= rf */
	uint32_t zones_all, zones_up;      /* zone indexes of members that
					      own tokens / are healthy */
	uint32_t zone_members_max;         /* members of the largest zone
					      (zone-aware; else 1) */
	/* Per member its data directory's incarnation from its Health
	 * answers (32 hex digits; "" = not known), kept while it is down. */
	char (*inc)[33];
};

struct sm_ring;

/* Create the ring and register GET /ring on `http` (may be NULL). */
int sm_ring_create(const struct sm_ring_cfg *cfg, struct sm_http *http,
    struct sm_ring **out, struct sm_err *err);

/*
 * Probe every member once, publish the first snapshot and start the
 * prober thread.
 */
int sm_ring_start(struct sm_ring *r, struct sm_err *err);

/* Stop the prober (close -> stop).  Blocks for at most one probe. */
void sm_ring_stop(struct sm_ring *r);

/*
 * Probe rounds done since sm_ring_start() (its own first round included),
 * counted after each round published its snapshot: a test that moved a
 * manual clock waits for it to grow.  Lock-free.
 */
uint64_t sm_ring_rounds(const struct sm_ring *r);
void sm_ring_destroy(struct sm_ring *r);

/*
 * The current snapshot with a reference taken; never NULL after
 * sm_ring_start().  Lock-free.  Release it with sm_ring_release().
 */
struct sm_ring_snap *sm_ring_acquire(struct sm_ring *r);
void sm_ring_release(struct sm_ring_snap *s);

/* The ring key of a series (tenant + labels minus per-sample-type ones). */
uint32_t sm_ring_key(const char *tenant, const struct sm_label *ls,
    uint32_t n);

/*
 * The replica set of `key`: up to s->rf writable, distinct member indexes
 * in ring order, written to out[] (room for s->rf); with `shard` (a
 * tenant's, sm_ring_shard), members of the shard only.  Returns how
 * many.
 */
uint32_t sm_ring_replicas(const struct sm_ring_snap *s, uint32_t key,
    const uint8_t *shard, uint32_t *out);

/*
 * The RF distinct token owners of `key` whatever their health: who would
 * hold it with every member up (the distributor's hints, hints.h, go to
 * the unhealthy ones); with `shard`, within it.  Fills out[] (>= rf
 * entries); returns the count.
 */
uint32_t sm_ring_owners(const struct sm_ring_snap *s, uint32_t key,
    const uint8_t *shard, uint32_t *out);

/*
 * The owners of `key` while members join (the store-gateways' ring,
 * ingester/gateway.h): the RF token owners, and when one of them is
 * PENDING or JOINING (it has not finished loading what it owns) also the
 * owners the ring would have without such members -- those keep the key
 * until the newcomers are ready (Mimir's store-gateways extend the
 * replica set alike).  Fills out[] (>= 2 * rf entries); returns the
 * count.
 */
uint32_t sm_ring_owners_settling(const struct sm_ring_snap *s, uint32_t key,
    uint32_t *out);

/*
 * Shuffle sharding (Cortex, Mimir): the members a tenant's writes go to
 * when its shard size is `size`: mask[i] set for each of them (mask has
 * room for s->n).  At least RF members; on a zone-aware ring an equal
 * share of every zone (rounded up).  The choice depends only on the
 * tenant and the token table -- the member ids, never their health --
 * so every distributor picks the same members, a member that is down
 * stays in the shard (its writes go to the next shard member and it is
 * owed hints), and adding or removing one member moves only the picks
 * its tokens touch.  Each pick j hashes (tenant, zone, j) onto the
 * tokens and takes the first member of the zone not picked yet.
 * Returns how many were picked, or 0 (mask untouched) when `size` is 0
 * or covers every member: no shard, the whole ring.
 */
uint32_t sm_ring_shard(const struct sm_ring_snap *s, const char *tenant,
    uint32_t size, uint8_t *mask);

/*
 * Read failures the ring tolerates: a query fails when more read units
 * (sm_ring_read_units) than this are unhealthy or failed (RF - quorum; 0
 * for RF = 1).
 */
static inline uint32_t sm_ring_max_read_errors(const struct sm_ring_snap *s)
{
	return (s->rf - s->quorum);
}

/*
 * The read units lost when the members with lost[i] set are: their
 * number, or with a zone-aware ring the number of distinct zones they are
 * in (above).
 */
uint32_t sm_ring_read_units(const struct sm_ring_snap *s, const uint8_t *lost);

/* Give the members of a snapshot built from ids these zones (NULL or "":
 * none), for tests and simulations.  0 or SM_ENOMEM. */
int sm_ring_snap_set_zones(struct sm_ring_snap *s, const char *const *zones);

/* True when the snapshot can take writes (>= quorum writable members). */
static inline bool sm_ring_writable(const struct sm_ring_snap *s)
{
	return (s->nwritable >= s->quorum);
}

/*
 * Start `req` on every healthy member of the snapshot as call i = member
 * index i of `m` (created with >= s->n calls; the others stay unstarted,
 * absent to sm_rpc_multi_wait_quorum), fail-fast, `timeout_ms` each.
 * Returns how many calls started.
 */
uint32_t sm_ring_start_healthy(const struct sm_ring_snap *s,
    struct sm_rpc_multi *m, const void *req, size_t len, int timeout_ms);

/*
 * Build a snapshot from ids alone (no clients, all healthy unless
 * healthy[] says otherwise): the ring balance simulation and unit tests.
 */
int sm_ring_snap_build_ids(const char *const *ids, uint32_t n,
    uint32_t tokens, uint32_t rf, const uint8_t *healthy,
    struct sm_ring_snap **out);

/* Parse "-ring.members": fills ids/urls (heap strings, caller frees with
 * sm_ring_members_free).  SM_EINVAL with a message for a bad list. */
int sm_ring_members_parse(const char *spec, char ***ids, char ***urls,
    uint32_t *n, struct sm_err *err);
void sm_ring_members_free(char **ids, char **urls, uint32_t n);

/*
 * DNS discovery, shared by -ring.dns and -distributor.peers (dns+...).
 * sm_dns_split: "[dns+]host:port" (an IPv6 host as [addr]:port) -> heap
 * host and port; SM_EINVAL for another form, SM_ENOMEM.
 * sm_dns_resolve: every distinct address `host` resolves to, as
 * "<scheme>://addr:port" ([addr] for IPv6) in a heap array the caller
 * frees with sm_free; SM_EUNAVAIL with the resolver's message.
 */
#define SM_DNS_URL_MAX 128
int sm_dns_split(const char *spec, char **host, char **port);
int sm_dns_resolve(const char *host, const char *port, const char *scheme,
    char (**urls)[SM_DNS_URL_MAX], uint32_t *n, struct sm_err *err);

/*
 * Registration in etcd (a member's side of -ring.etcd.*): the member's
 * key <prefix><id> holds sm_ring_member_value's JSON.  sm_ring_reg_start
 * puts it (a failure is logged, not fatal: etcd may come later) and a
 * thread checks it every period and puts it again when it is missing or
 * different (etcd restored from an old snapshot, an operator's mistaken
 * forget).  sm_ring_reg_leave deletes it for good: call it once the
 * member has left (ingester.h, Leaving); a plain stop keeps it, so a
 * restarting member stays in every ring (unhealthy while down) and
 * keeps its tokens.  Errors: those of etcd.h.
 */
struct sm_ring_reg;

int sm_ring_member_value(const char *id, const char *addr, const char *zone,
    char **out);
int sm_ring_reg_start(const char *endpoints, int64_t timeout_ms,
    const char *prefix, const char *id, const char *addr, const char *zone,
    int64_t period_ms, struct sm_ring_reg **out, struct sm_err *err);
int sm_ring_reg_leave(struct sm_ring_reg *g, struct sm_err *err);
void sm_ring_reg_stop(struct sm_ring_reg *g);

#endif /* SM_RING_H */
