/*
 * push.c -- replication of one upload to its ingesters (docs/architecture.md §4).
 *
 *   1. Take a ring snapshot.  For each series of the batch, the replica
 *      set of sm_ring_key(tenant, labels minus per-sample-type labels):
 *      RF healthy members.  A series with fewer than quorum replicas fails
 *      the write at once (503): it could never be acknowledged.
 *   2. Group series by ingester; encode one WriteRequest per distinct
 *      series subset (usually one: every sample type of an upload shares
 *      its key) with the upload's profile id, so a replica that receives a
 *      resend or retry applies it once (ingester/ids.h), and the
 *      ingesters the subset goes to with their zones and incarnations
 *      (WriteRequest.replicas: each receiver's witness record of who
 *      else holds that data, ingester/witness.h).
 *   3. Start every call (sm_rpc_multi, fail-fast on a lost connection;
 *      SM_RPC_DIRECT: an ingester of this process, -target=all, is called
 *      in this thread, same bytes and answers -- common/rpc.h) and
 *      wait (sm_rpc_multi_wait_quorum: a group per series, its replicas'
 *      call slots the voters) until every series has quorum
 *      acknowledgements, or some series can no longer reach quorum, or the
 *      push timeout passes.
 *   4. Success only when every series reached quorum.  Calls still in
 *      flight complete in the background, so the slower replicas get the
 *      write too (their outcome is counted in the metrics).
 *   5. A shuffle-sharded tenant's write (and, for a while after a
 *      runtime-config reload, any tenant's) is acknowledged only once,
 *      for every series, one replica that took it has held the tenant in
 *      its tenant list for the ingesters' hold (push_hold_ms;
 *      common/ring.h, "Confined reads"): queriers that leave out the
 *      ingesters holding nothing of the tenant then ask that one.  Only a
 *      tenant's first writes to an ingester wait, at most the hold.
 *
 * Below quorum nothing is acknowledged: a 5xx tells the client to retry,
 * and the replicas that did apply the write recognise nothing -- a client
 * retry carries a new profile id (the /ingest protocol has none), which
 * is the trade-off Pyroscope makes too: an upload that failed may be
 * counted on the replicas that had applied it before the retry.
 * push.v1 Push (connect_push.c) does carry one: each RawSample's ID, so
 * its retries are recognised by every replica that applied the first try.
 *
 * Active-series limit (Pyroscope's max_global_series_per_tenant).  The
 * ingesters are ring members without a ring view of their own (ring.h)
 * and, in a cluster, without the distributor's flags and runtime config,
 * so the distributor converts the tenant's limits into the one number an
 * ingester enforces and sends it in every WriteRequest (max_series;
 * dist_series_limit() below).  The ingester refuses a write that would
 * take its head past it, whole, with SM_ELIMIT (ingester/db.h); that
 * answer becomes 429 resource_exhausted with the ingester's message (the
 * Pyroscope wording, no internal address), is counted as
 * discarded{reason="series_limit"} (ingest.c), and gets no hint (it
 * would be refused again; hints.c drops one that is).  The limit comes
 * from this snapshot, so it follows ring changes write by write.  A
 * refusal by some replicas only is a partial failure like any other
 * below quorum (above): the replicas that took the write keep it.
 */
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/rpc.h"

#include "dist_int.h"

#define PUSH_MAX_RF 16
/* A replica's hold is a few heartbeats (common/ring.h); a larger figure
 * from a peer is not waited for longer than this. */
#define PUSH_HOLD_MAX_MS 60000

static struct sm_metric *m_held;

static const struct sm_metric_def push_metric_defs[] = {
	{ &m_held, SM_METRIC_COUNTER, "smolder_distributor_held_writes_total",
	    "Acknowledged writes that waited for a replica new to their "
	    "tenant to be heard of by the queriers (a shuffle-sharded "
	    "tenant's first writes to an ingester).", NULL, NULL, 0 },
};

static struct sm_metric_set push_metric_set =
    SM_METRIC_SET(push_metric_defs);

/*
 * Cortex's "global limit converted to local": series spread evenly over
 * the n healthy members and each is stored on min(RF, n) of them, so one
 * member holds global * min(RF, n) / n (Pyroscope computes global / n * RF,
 * which exceeds the global limit itself when n < RF: then every member
 * holds every series, and global is the right figure).  Rounded down, but
 * at least 1: a positive limit never becomes "no limit".  With a local
 * limit too the lower one applies (Pyroscope's minNonZero).  n = 0 (no
 * healthy member; the write fails anyway) ignores the global limit, as
 * Pyroscope does.
 */
uint32_t
dist_series_limit(uint32_t global, uint32_t local, uint32_t nhealthy,
    uint32_t rf)
{
	uint64_t g;

	if (global == 0 || nhealthy == 0)
		return (local);
	g = (uint64_t)global * SM_MIN(SM_MAX(rf, 1), nhealthy) / nhealthy;
	if (g == 0)
		g = 1;
	if (local != 0 && local < g)
		return (local);
	return ((uint32_t)g);
}

/* The message of a failed push: counts, the ingester, its own words. */
static void
push_failure(const struct sm_rpc_multi *mc, int wslot, int worst,
    const struct sm_ring_snap *snap, const uint32_t *slot_member,
    uint32_t ok, uint32_t nrep, uint32_t q, int rv, struct sm_err *err)
{
	struct sm_arena *a = sm_arena_create(1 << 20);
	Smolder__V1__Response *resp;
	struct sm_err e;

	sm_err_clear(&e);
	if (worst == SM_RPC_PENDING)
		sm_err_set(&e, SM_ETIMEDOUT, "no answer within "
		    "-distributor.push.timeout");
	else if (a == NULL || wslot < 0 ||
	    sm_rpc_multi_response(mc, (uint32_t)wslot, a, &resp, &e) == 0)
		sm_err_set(&e, worst, "%s", sm_strerror(worst));
	if (rv == SM_ELIMIT && worst == SM_ELIMIT) {
		const char *url = snap->m[slot_member[wslot]]->url;
		const char *m = e.msg;
		size_t ul = strlen(url);

		/* The limit's own words, without the ingester's address
		 * (sm_rpc_multi_response puts it first). */
		if (strncmp(m, url, ul) == 0 && strncmp(m + ul, ": ", 2) == 0)
			m += ul + 2;
		sm_err_set(err, rv, "%s", m);
	} else
		sm_err_set(err, rv, "write acknowledged by %u of %u replicas, "
		    "quorum %u; ingester %s: %s", ok, nrep, q, wslot >= 0 ?
		    snap->m[slot_member[wslot]]->url : "?", e.msg);
	sm_arena_destroy(a);
}

/*
 * The write's replicas as WriteRequest.replicas: every member a call slot
 * of the series which[0..nwhich) goes to (all series when which is NULL;
 * series k's slots are slot[goff[k] .. goff[k + 1])).  rep and reps have
 * room for snap->n entries, seen is snap->n scratch bytes.  Returns the
 * count; the entries borrow the snapshot's strings.
 */
struct push_reps {
	const struct sm_ring_snap *snap;
	const uint32_t *goff, *slot, *slot_member;
	uint8_t *seen;
	Smolder__V1__Replica *rep;
	Smolder__V1__Replica **reps;
};

static uint32_t
push_replicas(struct push_reps *pr, const uint32_t *which, uint32_t nwhich)
{
	const struct sm_ring_snap *snap = pr->snap;
	const uint32_t *goff = pr->goff, *slot = pr->slot;
	const uint32_t *slot_member = pr->slot_member;
	char (*inc)[33] = snap->inc;
	uint8_t *seen = pr->seen;
	Smolder__V1__Replica *rep = pr->rep, **reps = pr->reps;
	uint32_t n = 0;

	memset(seen, 0, SM_MAX(snap->n, 1));
	for (uint32_t w = 0; w < nwhich; w++) {
		uint32_t k = which != NULL ? which[w] : w;

		for (uint32_t j = goff[k]; j < goff[k + 1]; j++) {
			uint32_t m = slot_member[slot[j]];

			if (seen[m] || snap->id[m] == NULL)
				continue;
			seen[m] = 1;
			smolder__v1__replica__init(&rep[n]);
			rep[n].id = snap->id[m];
			rep[n].zone = snap->zone[m] != NULL ? snap->zone[m] :
			    (char *)"";
			rep[n].incarnation = inc[m];
			reps[n] = &rep[n];
			n++;
		}
	}
	return (n);
}

/*
 * Hints (hints.h) after an acknowledged push: every call slot that did not
 * answer success (failed, or still in flight: the hint watches it), and
 * every unhealthy token owner the ring skipped, with the series it owns.
 */
static void
push_hints(struct distributor *d, const char *tenant, struct dist_batch *b,
    const uint8_t *id, const struct sm_ring_snap *snap,
    const uint8_t *shard, struct sm_rpc_multi *mc, uint32_t nslots,
    const uint32_t *slot_member, const struct sm_buf *enc,
    const uint32_t *enc_of, uint32_t max_series, struct push_reps *pr)
{
	uint32_t *sub = NULL, nsub;

	for (uint32_t sl = 0; sl < nslots; sl++) {
		const struct sm_buf *x = &enc[enc_of[sl]];
		int st = sm_rpc_multi_status(mc, sl);

		if (st == 0 || st == SM_EMALFORMED || st == SM_EINVAL ||
		    st == SM_ELIMIT)
			continue;
		dist_hints_add(d->hints, snap->id[slot_member[sl]], x->b,
		    x->len, st == SM_RPC_PENDING ? mc : NULL, sl,
		    st == SM_RPC_PENDING || st == SM_ETIMEDOUT ||
		    st == SM_ECLOSED || st == SM_EPROTO);
	}
	if (snap->nwritable == snap->n)
		return;
	if ((sub = sm_malloc((size_t)SM_MAX(b->nseries, 1) *
	    sizeof(*sub))) == NULL)
		return;
	for (uint32_t m = 0; m < snap->n; m++) {
		struct sm_buf e = SM_BUF_INIT;

		if (snap->writable[m] || snap->id[m] == NULL ||
		    (shard != NULL && !shard[m]))
			continue;
		nsub = 0;
		for (uint32_t k = 0; k < b->nseries; k++) {
			const struct dist_series *s = &b->series[k];
			uint32_t own[PUSH_MAX_RF], n;

			n = sm_ring_owners(snap, sm_ring_key(tenant, s->labels,
			    s->nlabels), shard, own);
			for (uint32_t j = 0; j < n && j < PUSH_MAX_RF; j++) {
				if (own[j] == m) {
					sub[nsub++] = k;
					break;
				}
			}
		}
		if (nsub == 0)
			continue;
		if (dist_batch_encode_rep(b, tenant, id, nsub == b->nseries ?
		    NULL : sub, nsub, max_series, pr->reps,
		    push_replicas(pr, sub, nsub), &e, NULL) == 0 &&
		    sm_buf_error(&e) == 0)
			dist_hints_add(d->hints, snap->id[m], e.b, e.len,
			    NULL, 0, false);
		sm_buf_fini(&e);
	}
	sm_free(sub);
}

/*
 * Each call slot's series, in order, in one array: slot sl's are
 * series_of[off[sl] .. off[sl] + nser[sl]) (nser[] holds the counts on
 * entry and again on return).
 */
static void
push_slot_series(uint32_t ns, const uint32_t *goff, const uint32_t *slot,
    uint32_t nslots, uint32_t *nser, uint32_t *off, uint32_t *series_of)
{
	for (uint32_t sl = 0; sl < nslots; sl++) {
		off[sl + 1] = off[sl] + nser[sl];
		nser[sl] = 0;
	}
	for (uint32_t k = 0; k < ns; k++) {
		for (uint32_t j = goff[k]; j < goff[k + 1]; j++) {
			uint32_t sl = slot[j];

			series_of[off[sl] + nser[sl]++] = k;
		}
	}
}

/*
 * dist_push step 2: one encoding per distinct series subset of the call
 * slots (slot sl's series: series_of[off[sl]..], nser[sl] of them) into
 * enc[0..*nenc), enc_of[sl] the one slot sl sends.  0 or SM_ENOMEM.
 */
static int
push_encode(struct dist_batch *b, const char *tenant, const uint8_t *id,
    uint32_t max_series, struct push_reps *pr, const uint32_t *series_of,
    const uint32_t *off, const uint32_t *nser, uint32_t nslots,
    struct sm_buf *enc, Smolder__V1__Request **msg, uint32_t *enc_of,
    uint32_t *nenc, struct sm_err *err)
{
	uint32_t ns = b->nseries;

	for (uint32_t sl = 0; sl < nslots; sl++) {
		const uint32_t *mine = &series_of[off[sl]];
		uint32_t e;

		for (e = 0; e < sl; e++) {
			if (nser[e] == nser[sl] && memcmp(&series_of[off[e]],
			    mine, nser[sl] * sizeof(*mine)) == 0)
				break;
		}
		if (e < sl) {
			enc_of[sl] = enc_of[e];
			continue;
		}
		enc_of[sl] = *nenc;
		if (dist_batch_encode_rep(b, tenant, id, nser[sl] == ns ? NULL :
		    mine, nser[sl], max_series, pr->reps, push_replicas(pr,
		    nser[sl] == ns ? NULL : mine, nser[sl]), &enc[*nenc],
		    &msg[*nenc]) != 0 ||
		    sm_buf_error(&enc[*nenc]) != 0) {
			sm_buf_fini(&enc[*nenc]);
			return (sm_err_set(err, SM_ENOMEM, "out of memory "
			    "encoding the write"));
		}
		(*nenc)++;
	}
	return (0);
}

/*
 * The verdict on a write (dist_push step 4): 0 when every series reached
 * quorum, else the first short series' failure -- the worst answer of its
 * replicas as an SM_E* code, with err naming the acks and the ingester.
 */
static int
push_verdict(struct sm_rpc_multi *mc, const struct sm_ring_snap *snap,
    const uint32_t *goff, const uint32_t *slot, const uint32_t *slot_member,
    uint32_t ns, uint32_t rf, uint32_t q, struct sm_err *err)
{
	int rv = 0;

	for (uint32_t k = 0; k < ns && rv == 0; k++) {
		uint32_t ok = 0;
		int worst = 0, wslot = -1;

		/* a series has at most RF replicas (its voters in slot[]),
		 * and quorum is a majority of RF (ring.h): ok >= q then
		 * means a majority acknowledged */
		SM_ASSERT(goff[k] <= goff[k + 1] && goff[k + 1] - goff[k] <=
		    SM_MAX(rf, 1));
		SM_ASSERT(q >= 1 && q <= rf && 2 * q > rf);

		for (uint32_t j = goff[k]; j < goff[k + 1]; j++) {
			uint32_t sl = slot[j];
			int st = sm_rpc_multi_status(mc, sl);

			if (st == 0) {
				ok++;
			} else if (worst == 0 || worst == SM_RPC_PENDING) {
				worst = st;
				wslot = (int)sl;
			}
		}
		if (ok >= q)
			continue;
		if (worst == SM_RPC_PENDING || worst == SM_ETIMEDOUT)
			rv = SM_ETIMEDOUT;
		else if (worst == SM_EMALFORMED || worst == SM_EINVAL ||
		    worst == SM_EPROTO)
			rv = SM_EINTERNAL;   /* a write we built badly */
		else if (worst == SM_ENOMEM || worst == SM_ELIMIT)
			rv = worst;
		else
			rv = SM_EUNAVAIL;
		push_failure(mc, wslot, worst, snap, slot_member, ok,
		    goff[k + 1] - goff[k], q, rv, err);
	}
	return (rv);
}

/*
 * The tenant's shard of `size` members (ring.h, sm_ring_shard) as a mask
 * in *shard (NULL: no shard, every member), its size and how many of it
 * are healthy.  0 or SM_ENOMEM.
 */
static int
push_shard(const struct sm_ring_snap *snap, const char *tenant, int64_t size,
    uint8_t **shard, uint32_t *nshard, uint32_t *healthy, struct sm_err *err)
{
	*shard = NULL;
	*nshard = *healthy = 0;
	if (size <= 0)
		return (0);
	if ((*shard = sm_malloc(SM_MAX(snap->n, 1))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((*nshard = sm_ring_shard(snap, tenant, (uint32_t)SM_MIN(size,
	    UINT32_MAX), *shard)) == 0) {
		sm_free(*shard);
		*shard = NULL;
	}
	for (uint32_t m = 0; *shard != NULL && m < snap->n; m++)
		*healthy += (*shard)[m] && snap->healthy[m];
	return (0);
}

/*
 * The plan of one write: series k's call slots slot[goff[k] ..
 * goff[k + 1]), each slot's member (slot_member) and series (series_of,
 * push_slot_series), the encodings enc[0..nenc) and the slot's one
 * (enc_of), and the scratch of push_replicas.  Arrays sized for the
 * snapshot; push_plan_free frees them.
 */
struct push_plan {
	uint32_t *slot, *goff, *member_slot, *slot_member, nslots;
	uint32_t *series_of, *nser, *off;
	struct sm_buf *enc;
	Smolder__V1__Request **msg;   /* per encoding: what it was packed from */
	uint32_t *enc_of, nenc;
	struct push_reps pr;
};

/* Allocate the plan's arrays for ns series of rf replicas in snap. */
static int
push_plan_alloc(struct push_plan *p, const struct sm_ring_snap *snap,
    uint32_t ns, uint32_t rf, struct sm_err *err)
{
	size_t nm = SM_MAX(snap->n, 1);

	p->pr.snap = snap;
	p->slot = sm_malloc((size_t)SM_MAX(ns, 1) * SM_MAX(rf, 1) *
	    sizeof(*p->slot));
	p->goff = sm_calloc((size_t)ns + 1, sizeof(*p->goff));
	p->member_slot = sm_malloc(nm * sizeof(*p->member_slot));
	p->slot_member = sm_malloc(nm * sizeof(*p->slot_member));
	p->nser = sm_calloc(nm, sizeof(*p->nser));
	p->off = sm_calloc(nm + 1, sizeof(*p->off));
	p->series_of = sm_malloc((size_t)SM_MAX(ns, 1) * rf *
	    sizeof(*p->series_of));
	p->enc = sm_calloc(nm, sizeof(*p->enc));
	p->msg = sm_calloc(nm, sizeof(*p->msg));
	p->enc_of = sm_malloc(nm * sizeof(*p->enc_of));
	p->pr.seen = sm_malloc(nm);
	p->pr.rep = sm_malloc(nm * sizeof(*p->pr.rep));
	p->pr.reps = sm_malloc(nm * sizeof(*p->pr.reps));
	if (p->slot == NULL || p->goff == NULL || p->member_slot == NULL ||
	    p->slot_member == NULL || p->nser == NULL || p->off == NULL ||
	    p->series_of == NULL || p->pr.seen == NULL ||
	    p->pr.rep == NULL || p->pr.reps == NULL ||
	    p->enc == NULL || p->msg == NULL || p->enc_of == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < snap->n; i++)
		p->member_slot[i] = UINT32_MAX;
	p->pr.goff = p->goff;
	p->pr.slot = p->slot;
	p->pr.slot_member = p->slot_member;
	return (0);
}

/* Free the plan's arrays and encodings. */
static void
push_plan_free(struct push_plan *p)
{
	for (uint32_t e = 0; p->enc != NULL && e < p->nenc; e++)
		sm_buf_fini(&p->enc[e]);
	sm_free(p->enc);
	sm_free(p->msg);
	sm_free(p->enc_of);
	sm_free(p->slot);
	sm_free(p->goff);
	sm_free(p->member_slot);
	sm_free(p->slot_member);
	sm_free(p->nser);
	sm_free(p->off);
	sm_free(p->series_of);
	sm_free(p->pr.seen);
	sm_free(p->pr.rep);
	sm_free(p->pr.reps);
}

/*
 * dist_push step 1: each series' replica set (at most rf members of the
 * shard, NULL: of the ring) into the plan, a call slot per ingester used;
 * SM_EUNAVAIL when a series has fewer than quorum q.
 */
static int
push_replica_sets(struct push_plan *p, const struct sm_ring_snap *snap,
    const char *tenant, const struct dist_batch *b, const uint8_t *shard,
    uint32_t nshard, uint32_t rf, uint32_t q, struct sm_err *err)
{
	for (uint32_t k = 0; k < b->nseries; k++) {
		const struct dist_series *s = &b->series[k];
		uint32_t rep[PUSH_MAX_RF], n;

		n = sm_ring_replicas(snap, sm_ring_key(tenant, s->labels,
		    s->nlabels), shard, rep);
		if (n > rf)
			n = rf;
		if (n < q && shard != NULL)
			return (sm_err_set(err, SM_EUNAVAIL, "too few "
			    "ingesters of the tenant's shard take writes: "
			    "%u replicas for a series, quorum %u (shard "
			    "of %u ingesters, -distributor.ingestion-"
			    "tenant-shard-size)", n, q, nshard));
		if (n < q)
			return (sm_err_set(err, SM_EUNAVAIL, "too few "
			    "healthy replicas for a series: %u, quorum "
			    "%u", n, q));
		p->goff[k + 1] = p->goff[k] + n;
		for (uint32_t j = 0; j < n; j++) {
			uint32_t m = rep[j];

			if (p->member_slot[m] == UINT32_MAX) {
				p->member_slot[m] = p->nslots;
				p->slot_member[p->nslots++] = m;
			}
			p->slot[p->goff[k] + j] = p->member_slot[m];
			p->nser[p->member_slot[m]]++;
		}
	}
	return (0);
}

/* The write's profile id: the client's, else random (else a mix of the
 * clocks and the batch's address when getrandom fails). */
static void
push_profile_id(uint8_t id[16], const uint8_t *profile_id,
    const struct dist_batch *b)
{
	if (profile_id != NULL) {
		memcpy(id, profile_id, 16);
	} else if (getrandom(id, 16, 0) != (ssize_t)16) {
		int64_t t = sm_mono_ns() ^ sm_now_ns();

		memcpy(id, &t, 8);
		t = (int64_t)(uintptr_t)b ^ sm_now_ns() * 31;
		memcpy(id + 8, &t, 8);
	}
}

/*
 * dist_push step 5: how long to wait before acknowledging -- over the
 * series, the largest of the smallest hold left among the replicas that
 * took it (WriteResponse.tenant_hold_ms) -- when the tenant's reads may
 * be confined: it has a shard, or the runtime config changed within the
 * settle time, so a querier may still see it sharded.  0 with one
 * member (nothing to leave out).
 */
static uint32_t
push_hold_ms(struct distributor *d, const struct sm_ring_snap *snap,
    const struct dist_batch *b, struct sm_rpc_multi *mc,
    const struct push_plan *p, uint32_t ns)
{
	uint32_t hold = 0, *slot_hold;
	int64_t changed = sm_overrides_changed_ns(d->cfg.overrides);

	if (snap->n <= 1 || (b->limits->shard_size <= 0 && (changed == 0 ||
	    sm_mono_ns() - changed >= d->cfg.hold_after_change_ms * 1000000)))
		return (0);
	if ((slot_hold = sm_calloc(SM_MAX(p->nslots, 1),
	    sizeof(*slot_hold))) == NULL)
		return (PUSH_HOLD_MAX_MS);      /* the longest a hold may be */
	for (uint32_t sl = 0; sl < p->nslots; sl++) {
		Smolder__V1__Response *r = NULL;
		const uint8_t *data;
		size_t len;

		slot_hold[sl] = UINT32_MAX;     /* did not take the write */
		if (sm_rpc_multi_status(mc, sl) != 0 ||
		    sm_rpc_multi_reply(mc, sl, &data, &len) != 0 ||
		    (r = smolder__v1__response__unpack(NULL, len,
		    data)) == NULL)
			continue;
		if (r->result_case == SMOLDER__V1__RESPONSE__RESULT_WRITE)
			slot_hold[sl] = SM_MIN(r->write->tenant_hold_ms,
			    PUSH_HOLD_MAX_MS);
		smolder__v1__response__free_unpacked(r, NULL);
	}
	for (uint32_t k = 0; k < ns; k++) {
		uint32_t least = UINT32_MAX;

		for (uint32_t j = p->goff[k]; j < p->goff[k + 1]; j++)
			least = SM_MIN(least, slot_hold[p->slot[j]]);
		/* the verdict saw quorum: some replica took the series */
		SM_ASSERT(least != UINT32_MAX);
		hold = SM_MAX(hold, least);
	}
	sm_free(slot_hold);
	return (hold);
}

/*
 * dist_push step 3: start every call slot's write on a new *mcp and wait
 * until each of the ns series has q acknowledgements, or can no longer
 * get them, or the push timeout passes.  0 or SM_ENOMEM.
 */
static int
push_send(struct distributor *d, const struct sm_ring_snap *snap,
    const struct push_plan *p, uint32_t ns, uint32_t q,
    struct sm_rpc_multi **mcp, struct sm_err *err)
{
	struct sm_quorum qw;

	if (sm_rpc_multi_create(p->nslots, "write", mcp) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t sl = 0; sl < p->nslots; sl++) {
		const struct sm_buf *x = &p->enc[p->enc_of[sl]];

		/* The message too: an ingester of this process then need
		 * not unpack the bytes (common/rpc.h, "Direct calls"). */
		sm_rpc_multi_start_msg(*mcp, sl,
		    snap->m[p->slot_member[sl]]->client, x->b, x->len,
		    p->msg[p->enc_of[sl]], (int)d->cfg.push_timeout_ms,
		    SM_RPC_FAILFAST | SM_RPC_DIRECT);
	}
	qw = (struct sm_quorum){ .nvoters = p->nslots, .ngroups = ns,
	    .group_off = p->goff, .group_voter = p->slot, .need = q,
	    .grace_ns = SM_QUORUM_NOW };
	(void)sm_rpc_multi_wait_quorum(*mcp, &qw);
	return (0);
}

int
dist_push(struct distributor *d, const char *tenant, struct dist_batch *b,
    const uint8_t *profile_id, struct sm_err *err)
{
	struct sm_ring_snap *snap = sm_ring_acquire(d->ring);
	uint32_t ns = b->nseries, rf = snap->rf, q = snap->quorum;
	struct push_plan p = { .nslots = 0 };
	uint8_t id[16];
	struct sm_rpc_multi *mc = NULL;
	uint8_t *shard = NULL;
	uint32_t max_series, nshard = 0, shard_healthy = 0, hold;
	int rv = 0;

	/* The tenant's shard (ring.h, sm_ring_shard); NULL: every member. */
	if ((rv = push_shard(snap, tenant, b->limits->shard_size, &shard,
	    &nshard, &shard_healthy, err)) != 0)
		goto out;
	/* series spread over the shard's healthy members, not the ring's */
	max_series = dist_series_limit(b->limits->max_global_series,
	    b->limits->max_local_series, shard != NULL ? shard_healthy :
	    snap->nhealthy, snap->rf);
	if (rf > PUSH_MAX_RF)
		rf = PUSH_MAX_RF;
	if (!sm_ring_writable(snap)) {
		rv = sm_err_set(err, SM_EUNAVAIL, "too few healthy ingesters "
		    "for a write: %u of %u take writes (%u serve reads), "
		    "quorum %u of replication factor %u", snap->nwritable,
		    snap->n, snap->nhealthy, q, snap->rf);
		goto out;
	}
	/* 1. Replica sets, a call slot per ingester used. */
	if ((rv = push_plan_alloc(&p, snap, ns, rf, err)) != 0 ||
	    (rv = push_replica_sets(&p, snap, tenant, b, shard, nshard, rf,
	    q, err)) != 0)
		goto out;
	push_slot_series(ns, p.goff, p.slot, p.nslots, p.nser, p.off,
	    p.series_of);
	/* 2. One encoding per distinct series subset. */
	push_profile_id(id, profile_id, b);
	if ((rv = push_encode(b, tenant, id, max_series, &p.pr, p.series_of,
	    p.off, p.nser, p.nslots, p.enc, p.msg, p.enc_of, &p.nenc, err)) != 0)
		goto out;
	/* 3. Send and wait for quorum. */
	if ((rv = push_send(d, snap, &p, ns, q, &mc, err)) != 0)
		goto out;
	/* 4. Verdict. */
	rv = push_verdict(mc, snap, p.goff, p.slot, p.slot_member, ns, rf, q,
	    err);
	/* 5. Acknowledged: hints for the replicas that did not take it. */
	if (rv == 0 && d->hints != NULL)
		push_hints(d, tenant, b, id, snap, shard, mc, p.nslots,
		    p.slot_member, p.enc, p.enc_of, max_series, &p.pr);
	/* 6. A tenant new to its replicas waits for the queriers. */
	if (rv == 0 && (hold = push_hold_ms(d, snap, b, mc, &p, ns)) > 0) {
		sm_metrics_register_once(&push_metric_set);
		sm_counter_inc(sm_metric_child0(m_held));
		sm_sleep_ms(hold);
	}
out:
	sm_free(shard);
	sm_rpc_multi_destroy(mc);
	push_plan_free(&p);
	sm_ring_release(snap);
	return (rv);
}
