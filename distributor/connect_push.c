/*
 * connect_push.c -- push.v1.PusherService/Push (docs/wire-formats.md §4), what Grafana
 * Alloy's pyroscope.write, Pyroscope remote-write and some SDKs send.
 *
 * Transport is common/connect.c: proto and JSON codecs, a gzip request
 * body (Content-Encoding: gzip), Connect errors.  The body cap is
 * -distributor.ingestion-body-limit-mb, as for /ingest (Pyroscope applies
 * ingestion_body_limit_mb to Push's read limit too).
 *
 * One PushRequest holds series, each a label set and raw pprof samples.
 * Every RawSample goes through the same path as a pprof /ingest upload:
 * gunzip when gzipped (capped at -validation.max-profile-size-bytes),
 * dist_pprof_ingest() into its own write batch (same naming, label
 * validation, limits), dist_push() to its replicas with write quorum.
 *
 * Labels of a series (Pyroscope's Push path, docs/wire-formats.md §6):
 *   - __name__ is the metric; "godeltaprof_X" becomes "X" (Pyroscope's
 *     default relabeling).  A series without __name__ gets the metric
 *     /ingest derives from the sample types (Pyroscope would refuse it as
 *     invalid labels; a hand-made client is better served by the same
 *     answer as /ingest);
 *   - other "__" labels are control labels (__delta__, __otel__, ...)
 *     and are dropped, except __session_id__ (which the write batch then
 *     drops, max_sessions_per_series = 0, distributor/batch.h);
 *   - service_name defaults to "unknown_service" (Pyroscope); the
 *     __service_name__ copy is added as /ingest does, so a profile pushed
 *     either way lands in the same series;
 *   - pyroscope_spy, when present, also selects the spy-specific name
 *     fixes of the pprof decoder.
 *
 * RawProfileSeries.annotations are accepted and ignored (Pyroscope
 * ignores them on this path too).  The route is registered by
 * dist_create() next to /ingest, with sm_connect_route() like the
 * querier's Connect methods, so any target running a distributor
 * (-target=all, distributor) serves it.
 *
 * Time: the pprof's time_nanos, or now when it is 0 (Pyroscope); the
 * ingestion window (-validation.reject-older-than/newer-than) applies only
 * to a non-zero time_nanos, as Pyroscope's.
 *
 * Idempotency: RawSample.ID, a UUID (Go's uuid.Parse forms: 36 chars with
 * dashes, 32 hex, {…}, urn:uuid:…), is the write's 16-byte profile id, so
 * the ingesters apply a retried Push once (ingester/ids.h).  An ID that is
 * not a UUID is invalid_argument, as Pyroscope.  An empty ID (hand-made
 * JSON clients) gets a random id: accepted, but not retry-safe.
 *
 * Remote-write: an accepted Push is queued for -remote-write.url as a
 * push.v1 Push (remote_write.h), every sample with its ID (the random one
 * for a sample that came without), so the forward is idempotent.
 *
 * Errors: every sample is decoded and validated before anything is sent,
 * so a request with one bad sample writes nothing; the message names the
 * series and sample.  Validation -> invalid_argument (400); the samples
 * limit, memory budgets and the tenant's ingestion rate (charged the sum
 * of the raw_profile bytes before any decoding, ratelimit.h) ->
 * resource_exhausted (429); ingesters below
 * quorum -> unavailable (503) or deadline_exceeded (504), after which the
 * client retries the whole request and the samples already written are
 * recognised by their IDs.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "common/connect.h"
#include "common/auth.h"
#include "common/gz.h"
#include "common/log.h"
#include "common/pbwire.h"
#include "common/tenant.h"
#include "push/v1/push.pb-c.h"

#include "dist_int.h"
#include "pprof.h"

/* Per-sample decode budget, as /ingest's (ingest.c DIST_ARENA_MIN). */
#define PUSH_ARENA_MIN (64u << 20)

struct push_item {
	struct sm_arena *a;
	struct dist_batch b;
	uint8_t id[16];
	bool has_id;
	bool inited;
};


/*
 * time_nanos (field 9) of a pprof, 0 when absent.  Undecodable wire data
 * also gives 0: the decoder that runs next reports it precisely.
 */
static int64_t
pprof_time_nanos(const uint8_t *p, size_t len)
{
	struct sm_pbw r = SM_PBW_RAW(p, len);
	uint32_t f, wt;
	int64_t t = 0;
	uint64_t v;

	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (0);
		if (f == 9 && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				return (0);
			t = (int64_t)v;
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (0);
		}
	}
	return (t);
}

/*
 * The base labels and metric of one RawProfileSeries (header comment).
 * 0 or SM_ENOMEM.
 */
static int
push_series_labels(const Push__V1__RawProfileSeries *s, struct sm_arena *a,
    struct sm_label **out, uint32_t *n, const char **metric,
    const char **spy)
{
	struct sm_label *v;
	const char *svc = NULL;
	uint32_t k = 0;

	*metric = NULL;
	*spy = NULL;
	if ((v = sm_arena_calloc(a, s->n_labels + 2, sizeof(*v))) == NULL)
		return (SM_ENOMEM);
	for (size_t i = 0; i < s->n_labels; i++) {
		const Types__V1__LabelPair *lp = s->labels[i];
		const char *name = lp->name != NULL ? lp->name : "";
		const char *value = lp->value != NULL ? lp->value : "";

		if (strcmp(name, SM_LABEL_NAME) == 0) {
			if (strncmp(value, "godeltaprof_", 12) == 0)
				value += 12;
			*metric = value[0] != '\0' ? value : NULL;
			continue;
		}
		if (strncmp(name, "__", 2) == 0 &&
		    strcmp(name, SM_LABEL_SESSION_ID) != 0)
			continue;
		if (strcmp(name, SM_LABEL_SERVICE_NAME) == 0)
			svc = value;
		if (strcmp(name, SM_LABEL_SPY) == 0)
			*spy = value;
		v[k++] = (struct sm_label){ name, value };
	}
	if (svc == NULL) {
		svc = "unknown_service";
		v[k++] = (struct sm_label){ SM_LABEL_SERVICE_NAME, svc };
	}
	v[k++] = (struct sm_label){ SM_LABEL_SERVICE_NAME_COPY, svc };
	*out = v;
	*n = k;
	return (0);
}

/* Decode one sample into it->b.  0 or SM_E* with the message in err. */
static int
push_decode(struct distributor *d, const struct dist_limits *lim,
    const Push__V1__RawSample *rs,
    const struct sm_label *base, uint32_t nbase, const char *metric,
    const char *spy, int64_t now, struct push_item *it, struct sm_err *err)
{
	const uint8_t *data = rs->raw_profile.data;
	uint8_t *raw = (uint8_t *)data;
	size_t len = rs->raw_profile.len, rawlen = len;
	struct dist_pprof_in in;
	int64_t tn, from;
	int rv;

	if (rs->id != NULL && rs->id[0] != '\0') {
		if (sm_uuid_parse(rs->id, it->id) != 0)
			return (sm_err_set(err, SM_EINVAL, "invalid sample ID "
			    "\"%.64s\": not a UUID", rs->id));
		it->has_id = true;
	}
	if ((it->a = sm_arena_create(SM_MAX(PUSH_ARENA_MIN,
	    16 * SM_MAX(len, lim->max_profile_bytes)))) == NULL ||
	    dist_batch_init(&it->b, it->a, lim) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	it->inited = true;
	if (len == 0)
		return (sm_err_set(err, SM_EMALFORMED, "empty profile"));
	if (sm_is_gzip(data, len)) {
		if ((rv = sm_gunzip(data, len, lim->max_profile_bytes,
		    it->a, &raw, &rawlen, err)) != 0)
			return (rv);
	} else if (len > lim->max_profile_bytes) {
		return (sm_err_set(err, SM_ETOOBIG, "uncompressed profile "
		    "payload size exceeds limit of %zu bytes",
		    lim->max_profile_bytes));
	}
	tn = pprof_time_nanos(raw, rawlen);
	from = tn > 0 ? tn / 1000000 : now;
	if (tn > 0 && ((d->cfg.reject_older_ms > 0 &&
	    from < now - d->cfg.reject_older_ms) ||
	    (d->cfg.reject_newer_ms > 0 && from > now + d->cfg.reject_newer_ms)))
		return (sm_err_set(err, SM_EINVAL, "profile is outside of "
		    "ingestion window (profile timestamp: %lld ms, the window "
		    "is %lld ms before to %lld ms after now)", (long long)from,
		    (long long)d->cfg.reject_older_ms,
		    (long long)d->cfg.reject_newer_ms));
	it->b.meta.spy_name = spy != NULL && spy[0] != '\0' ? spy : "unknown";
	it->b.meta.sample_rate = 100;
	it->b.meta.units = "samples";
	it->b.meta.aggregation = "sum";
	memset(&in, 0, sizeof(in));
	in.base = base;
	in.nbase = nbase;
	in.spy_name = spy;
	in.metric = metric;
	in.time_ms = from;
	if ((rv = dist_pprof_ingest(raw, rawlen, &in, &it->b, err)) != 0)
		return (rv);
	if (dist_batch_finish(&it->b) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	return (0);
}


/*
 * Queue the accepted request for remote-write (remote_write.h): packed
 * again as protobuf, every sample with its ID -- the one the client sent,
 * or the random one its local write used -- so a re-send is idempotent.
 * The copies are shallow, in the call's arena.  The request's unknown
 * fields are dropped first (sm_arena_pbc_drop_unknown): packed again,
 * one could make the forwarded request one the remote refuses.
 */
static void
push_forward(struct distributor *d, struct sm_connect_call *call,
    Push__V1__PushRequest *req, const struct push_item *items,
    const char *tenant)
{
	Push__V1__PushRequest fr;
	Push__V1__RawProfileSeries **ss = NULL;
	uint8_t *buf;
	size_t k = 0, len;

	sm_arena_pbc_drop_unknown(&req->base);
	push__v1__push_request__init(&fr);
	if (req->n_series > 0 && (ss = sm_arena_calloc(call->arena,
	    req->n_series, sizeof(*ss))) == NULL)
		goto nomem;
	for (size_t i = 0; i < req->n_series; i++) {
		const Push__V1__RawProfileSeries *s = req->series[i];
		Push__V1__RawProfileSeries *c;
		Push__V1__RawSample **sv = NULL;

		if ((c = sm_arena_alloc(call->arena, sizeof(*c))) == NULL ||
		    (s->n_samples > 0 && (sv = sm_arena_calloc(call->arena,
		    s->n_samples, sizeof(*sv))) == NULL))
			goto nomem;
		*c = *s;
		c->samples = sv;
		for (size_t j = 0; j < s->n_samples; j++, k++) {
			Push__V1__RawSample *rs;
			char *id;

			if ((rs = sm_arena_alloc(call->arena,
			    sizeof(*rs))) == NULL ||
			    (id = sm_arena_alloc(call->arena, 37)) == NULL)
				goto nomem;
			*rs = *s->samples[j];
			sm_uuid_format(items[k].id, id);
			rs->id = id;
			sv[j] = rs;
		}
		ss[i] = c;
	}
	fr.n_series = req->n_series;
	fr.series = ss;
	len = push__v1__push_request__get_packed_size(&fr);
	if ((buf = sm_arena_alloc(call->arena, len != 0 ? len : 1)) == NULL)
		goto nomem;
	push__v1__push_request__pack(&fr, buf);
	(void)rw_enqueue(d->rw, "/push.v1.PusherService/Push", "",
	    "application/proto", d->cfg.multitenancy ? tenant : NULL,
	    RW_IDEMPOTENT, buf, len);
	return;
nomem:
	sm_warn("remote-write", "out of memory, push not forwarded");
}

static int
m_push(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Push__V1__PushRequest *req = (const Push__V1__PushRequest *)msg;
	struct distributor *d = arg;
	Push__V1__PushResponse *out;
	struct push_item *items = NULL;
	struct dist_limits limv, *lim = &limv;   /* the batches borrow it */
	struct sm_limits sl;
	const char *tenant = NULL;
	size_t nitems = 0, k = 0, bytes = 0;
	uint32_t nseries = 0;
	bool pushed = false;              /* rv is dist_push's */
	int64_t now = sm_now_ms();
	int rv, status;

	if ((rv = sm_http_tenant(call->http, d->cfg.multitenancy, &tenant,
	    err)) != 0)
		goto out;
	for (size_t i = 0; i < req->n_series; i++) {
		nitems += req->series[i]->n_samples;
		for (size_t j = 0; j < req->series[i]->n_samples; j++)
			bytes += req->series[i]->samples[j]->raw_profile.len;
	}
	dist_tenant_limits(d, tenant, &sl, lim);
	if ((rv = dist_rate_check(d, tenant, &sl, bytes, err)) != 0)
		goto out;
	if (nitems > 0 && (items = sm_arena_calloc(call->arena, nitems,
	    sizeof(*items))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	/* 1. Decode and validate everything. */
	for (size_t i = 0; i < req->n_series; i++) {
		const Push__V1__RawProfileSeries *s = req->series[i];
		const char *metric, *spy;
		struct sm_label *base;
		uint32_t nbase;

		if (s->n_labels == 0) {
			rv = sm_err_set(err, SM_EINVAL, "series %zu: error at "
			    "least one label pair is required per profile", i);
			goto out;
		}
		if ((rv = push_series_labels(s, call->arena, &base, &nbase,
		    &metric, &spy)) != 0) {
			sm_err_set(err, rv, "out of memory");
			goto out;
		}
		for (size_t j = 0; j < s->n_samples; j++, k++) {
			if ((rv = push_decode(d, lim, s->samples[j], base,
			    nbase, metric, spy, now, &items[k], err)) != 0) {
				if (rv == SM_EMALFORMED || rv == SM_ETOOBIG)
					rv = SM_EINVAL;
				sm_err_prefix(err, "series %zu sample %zu", i, j);
				k++;
				goto out;
			}
		}
	}
	/*
	 * 2. Write each sample under its ID.  A sample without one gets a
	 * random UUID (v4) here rather than in dist_push, so a remote-write
	 * forward carries the same id.
	 */
	for (size_t i = 0; i < k; i++) {
		if (items[i].has_id)
			continue;
		if (getrandom(items[i].id, 16, 0) != 16) {
			rv = sm_err_set(err, SM_EINTERNAL, "getrandom failed");
			goto out;
		}
		items[i].id[6] = (uint8_t)((items[i].id[6] & 0x0f) | 0x40);
		items[i].id[8] = (uint8_t)((items[i].id[8] & 0x3f) | 0x80);
		items[i].has_id = true;
	}
	for (size_t i = 0; i < k; i++) {
		if (items[i].b.nseries == 0)
			continue;      /* only zero values: nothing to store */
		if ((rv = dist_push(d, tenant, &items[i].b, items[i].has_id ?
		    items[i].id : NULL, err)) != 0) {
			pushed = true;    /* an ingester's answer: its limit */
			if (rv != SM_ELIMIT)    /* counted, not logged */
				sm_warn("distributor", "push failed\ttenant=%s "
				    "err=\"%s\"", tenant, err->msg);
			goto out;
		}
		nseries += items[i].b.nseries;
	}
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	push__v1__push_response__init(out);
	*resp = &out->base;
	if (d->rw != NULL && k > 0)
		/* The request is the call's, in its arena (connect.h). */
		push_forward(d, call, (Push__V1__PushRequest *)req, items,
		    tenant);
out:
	if (rv == 0)
		status = 200;
	else
		sm_connect_code_for(rv, &status);
	dist_observe(tenant, status, bytes, nseries, rv == SM_ELIMIT &&
	    pushed ? "series_limit" : NULL, rv != 0 ? err->msg : NULL);
	for (size_t i = 0; i < k; i++) {
		if (items[i].inited)
			dist_batch_fini(&items[i].b);
		sm_arena_destroy(items[i].a);
	}
	return (rv);
}

int
dist_push_call(struct distributor *d, struct sm_connect_call *call,
    const Push__V1__PushRequest *req, struct sm_err *err)
{
	ProtobufCMessage *resp = NULL;

	return (m_push(d, call, &req->base, &resp, err));
}

int
dist_connect_register(struct distributor *d, struct sm_err *err)
{
	static const char *const paths[] = {
		"/push.v1.PusherService/Push",
	};
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(paths); i++) {
		if ((rv = sm_connect_route_as(d->http, SM_SCOPE_WRITE,
		    paths[i], &push__v1__push_request__descriptor, m_push, d,
		    (size_t)d->cfg.body_limit_mb << 20)) != 0)
			return (sm_err_set(err, rv, "distributor: route %s: %s",
			    paths[i], sm_strerror(rv)));
	}
	return (0);
}
