/*
 * ingest.c -- POST /ingest and /pyroscope/ingest (docs/wire-formats.md §2).
 *
 * Request -> tenant -> parameters -> format dispatch -> write batch ->
 * smolder.v1.WriteRequest -> ingester ack -> 200.
 *
 * Status codes (Pyroscope v1, docs/wire-formats.md §2 "Responses"): a bad `name` is 400; a
 * body over the limit is 413 (HTTP layer); pprof and multipart errors
 * (parse, validation, size, an empty metric) are 422, or 429 for a
 * resource_exhausted limit; errors on the folded/lines/trie path carry the
 * status of their Connect code (400 invalid_argument).  An ingester that
 * cannot be reached is 503 (504 on a deadline): the client must retry, and
 * nothing was acknowledged.  Every error body is Pyroscope's JSON
 * {"code","message"}.
 *
 * Decisions where Pyroscope is silent:
 *   - a profile is placed at `from` (default now) like og Pyroscope, not at
 *     the pprof's time_nanos: the agent states the collection window, and
 *     time_nanos is unreliable in the wild (pyspy writes milliseconds);
 *   - the ingestion window (-validation.reject-older-than/newer-than)
 *     applies to that time;
 *   - format=speedscope (speedscope.h) may be gzipped (v1 reads it raw
 *     only); inflated, it may be as large as the request body limit, as
 *     a JFR recording, and its errors are 400 as the other text
 *     formats';
 *   - format=jfr (jfr.h): the decompressed recording may be as large as
 *     the request body limit (Pyroscope applies max_profile_size_bytes to
 *     each converted profile, not to the recording); its labels part is
 *     held to max_profile_size_bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/attime.h"
#include "common/gz.h"
#include "common/json.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/auth.h"
#include "common/tenant.h"

#include "batch.h"
#include "dist_int.h"
#include "folded.h"
#include "jfr.h"
#include "multipart.h"
#include "naming.h"
#include "pprof.h"
#include "speedscope.h"


/* Per-request memory: the body is already bounded; decoding may take a
 * multiple of the decompressed size (indexes, label sets, pairs). */
#define DIST_ARENA_MIN (64u << 20)

enum ingest_format {
	FMT_FOLDED,
	FMT_LINES,
	FMT_TRIE,
	FMT_TREE,           /* og's dictionary-free tree (folded.h) */
	FMT_PPROF,          /* raw body */
	FMT_PPROF_FORM,     /* multipart/form-data */
	FMT_JFR,            /* raw or multipart (jfr.h) */
	FMT_SPEEDSCOPE,     /* speedscope JSON (speedscope.h) */
};

#define SM_FLAG_STRUCT struct dist_config
static const struct sm_flag dist_flag_tab[] = {
	SM_FLAG_I64("distributor.ingestion-body-limit-mb",
	    SM_FLAG_INT, body_limit_mb,
	    "256",
	    "Largest /ingest request body in MiB before decompression; "
	    "larger bodies get 413."),
	SM_FLAG_I64("distributor.push.timeout",
	    SM_FLAG_DURATION, push_timeout_ms,
	    "5s",
	    "Deadline for ingesters to acknowledge a write."),
	SM_FLAG_I64("validation.max-profile-size-bytes",
	    SM_FLAG_BYTES, max_profile_bytes,
	    "4MiB",
	    "Largest decompressed profile."),
	SM_FLAG_I64("validation.max-profile-stacktrace-samples",
	    SM_FLAG_INT, max_samples,
	    "16000",
	    "Most samples in one profile (0 = no limit)."),
	SM_FLAG_I64("validation.max-profile-stacktrace-sample-labels",
	    SM_FLAG_INT, max_sample_labels,
	    "100",
	    "Most labels on one sample (0 = no limit)."),
	SM_FLAG_I64("validation.max-profile-stacktrace-depth",
	    SM_FLAG_INT, max_depth,
	    "1000",
	    "Deepest stack kept; deeper stacks keep their root frames."),
	SM_FLAG_I64("validation.max-profile-symbol-value-length",
	    SM_FLAG_INT, max_symbol_len,
	    "65535",
	    "Longest frame name kept; longer names keep their tail."),
	SM_FLAG_I64("validation.max-label-names-per-series",
	    SM_FLAG_INT, max_label_names,
	    "30",
	    "Most labels in a series."),
	SM_FLAG_I64("validation.max-length-label-name",
	    SM_FLAG_INT, max_label_name_len,
	    "1024",
	    "Longest label name."),
	SM_FLAG_I64("validation.max-length-label-value",
	    SM_FLAG_INT, max_label_value_len,
	    "2048",
	    "Longest label value."),
	SM_FLAG_I64("validation.reject-older-than",
	    SM_FLAG_DURATION, reject_older_ms,
	    "1h",
	    "Refuse profiles placed further in the past (0 = accept any)."),
	SM_FLAG_I64("validation.reject-newer-than",
	    SM_FLAG_DURATION, reject_newer_ms,
	    "10m",
	    "Refuse profiles placed further in the future (0 = accept any)."),
	SM_FLAG_STR("remote-write.url", rw.url,
	    "",
	    "Forward every accepted write to this Pyroscope-compatible "
	    "base URL (POST <url>/ingest, <url>/push.v1.PusherService/Push)"
	    " through a queue on disk in <data.dir>/remote-write; empty = "
	    "off."),
	SM_FLAG_SECRET("remote-write.key", rw.key,
	    "",
	    "API key sent to -remote-write.url as Authorization: Bearer."),
	SM_FLAG_I64("remote-write.queue-size", SM_FLAG_INT, rw.queue_size,
	    "10000",
	    "Most writes waiting in the remote-write queue; more are "
	    "dropped (counted)."),
	SM_FLAG_I64("remote-write.queue-max-bytes",
	    SM_FLAG_BYTES, rw.queue_max_bytes,
	    "256MiB",
	    "Most bytes the remote-write queue holds on disk (records not "
	    "yet sent); more are dropped (counted)."),
	SM_FLAG_STR("remote-write.tls-ca-path", rw.tls_ca,
	    "",
	    "CA (PEM) an https -remote-write.url's certificate must chain "
	    "to; empty: the system's."),
	SM_FLAG_STR("remote-write.tls-cert-path", rw.tls_cert,
	    "",
	    "Client certificate (PEM) presented to an https "
	    "-remote-write.url that wants mutual TLS."),
	SM_FLAG_STR("remote-write.tls-key-path", rw.tls_key,
	    "",
	    "The key of -remote-write.tls-cert-path (PEM)."),
	SM_FLAG_I64("remote-write.timeout", SM_FLAG_DURATION, rw.timeout_ms,
	    "10s",
	    "Deadline of one forwarded request."),
	SM_FLAG_I64("remote-write.max-backoff",
	    SM_FLAG_DURATION, rw.max_backoff_ms,
	    "30s",
	    "Longest wait between retries while the receiver is down "
	    "(from 100ms, doubling)."),
	SM_FLAG_I64("distributor.hints-max-bytes",
	    SM_FLAG_BYTES, hints_max_bytes,
	    "64MiB",
	    "Memory and disk (<data.dir>/hints) for hinted handoff: "
	    "acknowledged writes a replica missed (down, restarting, "
	    "slow), delivered to it once it is healthy again, also after "
	    "a restart of this distributor (0 = off)."),
	SM_FLAG_I64("distributor.hints-max-age",
	    SM_FLAG_DURATION, hints_max_age_ms,
	    "30m",
	    "Give up a hint this long after its write (one whose "
	    "original may have been applied is delivered after 45s only "
	    "if the replica says it does not hold that upload)."),
	SM_FLAG_STR("distributor.ingestion-rate-limit-mb", ingestion_rate_mb,
	    "0",
	    "Per-tenant ingestion rate in MiB/s of request bodies, shared "
	    "by the healthy distributors of -distributor.peers (each "
	    "takes rate / N; without peers each enforces all of it); over "
	    "it is 429 (0 = no limit; Pyroscope's default is 4). Per "
	    "tenant: ingestion_rate_mb in -runtime-config.file."),
	SM_FLAG_STR("distributor.ingestion-burst-size-mb", ingestion_burst_mb,
	    "2",
	    "Per-tenant ingestion burst in MiB: the most a tenant may send "
	    "at once (larger uploads are always 429). Per tenant: "
	    "ingestion_burst_size_mb."),
	SM_FLAG_I64("distributor.ingestion-tenant-shard-size", SM_FLAG_INT,
	    shard_size, "0",
	    "Shuffle sharding: the ingesters each tenant's writes go to, "
	    "chosen from the tenant's name and the ring (at least the "
	    "replication factor; an equal share of every zone), so a "
	    "tenant that floods fills only its shard. 0: every ingester. "
	    "Queriers read it too: ingesters outside a tenant's shard that "
	    "hold nothing of it do not count against its queries' error "
	    "budget. Per tenant: ingestion_tenant_shard_size."),
	SM_FLAG_I64("ingester.max-global-series-per-tenant",
	    SM_FLAG_INT, max_global_series,
	    "0",
	    "Most active series (series in ingester heads) per tenant "
	    "across the cluster, enforced by each ingester as its share: "
	    "global * min(RF, healthy ingesters) / healthy ingesters, "
	    "computed and sent by the distributor, so set it on "
	    "distributors. A write adding series past it is 429 (0 = no "
	    "limit; Pyroscope's default is 5000). Per tenant: "
	    "max_global_series_per_tenant."),
	SM_FLAG_I64("ingester.max-local-series-per-tenant",
	    SM_FLAG_INT, max_local_series,
	    "0",
	    "Most active series per tenant on each ingester (0 = no "
	    "limit); with a global limit too, the lower one applies. Per "
	    "tenant: max_local_series_per_tenant."),
	SM_FLAG_STR("distributor.peers", peers,
	    "",
	    "Every distributor, this one included, as comma-separated "
	    "http://host:port base URLs and/or dns+host:port names "
	    "(resolved each probe, e.g. a headless service). Each tenant's "
	    "ingestion rate is divided by the healthy ones (their /ready "
	    "answers). Empty: this distributor alone (N = 1)."),
	SM_FLAG_I64("distributor.peers-probe-period",
	    SM_FLAG_DURATION, peers_period_ms,
	    "5s",
	    "How often every -distributor.peers entry is probed "
	    "(GET /ready); a change of the healthy count applies to the "
	    "rate at once."),
	SM_FLAG_I64("distributor.peers-probe-timeout",
	    SM_FLAG_DURATION, peers_timeout_ms,
	    "1s",
	    "Deadline of one peer probe; a peer whose last probe failed "
	    "is not counted (at most the period)."),
};
#undef SM_FLAG_STRUCT

SM_FLAGS_ADD_FN(dist_flags_add, struct dist_config, dist_flag_tab)

/* --- metrics ----------------------------------------------------------------- */

static struct sm_metric *m_bytes, *m_profiles, *m_series, *m_discarded;

static const struct sm_metric_def dist_metric_defs[] = {
	{ &m_bytes, SM_METRIC_COUNTER,
	    "smolder_distributor_received_bytes_total", "Request body bytes "
	    "of accepted uploads, as received (compressed), by tenant.",
	    SM_METRIC_LABELS("tenant"), NULL, 0 },
	{ &m_profiles, SM_METRIC_COUNTER, "smolder_distributor_profiles_total",
	    "Uploads acknowledged (written to a quorum of replicas), by "
	    "tenant.", SM_METRIC_LABELS("tenant"), NULL, 0 },
	{ &m_series, SM_METRIC_COUNTER,
	    "smolder_distributor_series_written_total", "Series written by "
	    "acknowledged uploads (one per sample type and label set), by "
	    "tenant.", SM_METRIC_LABELS("tenant"), NULL, 0 },
	{ &m_discarded, SM_METRIC_COUNTER,
	    "smolder_distributor_discarded_profiles_total",
	    "Uploads refused or failed, by reason and tenant.",
	    SM_METRIC_LABELS("reason", "tenant"), NULL, 0 },
};

static struct sm_metric_set dist_metric_set = SM_METRIC_SET(dist_metric_defs);

/*
 * The reason label of a refused upload: Pyroscope's discard reason
 * (pkg/validation) when the message is one of its limits' own words --
 * the messages follow Pyroscope's, so the words identify the limit --
 * else a reason by status.
 */
static const struct {
	int status;                 /* 0: any */
	const char *words;          /* NULL: any message */
	const char *reason;
} discard_words[] = {
	{ 429, "max_profile_stacktrace_samples", "samples_limit" },
	{ 429, "Maximum active series limit", "series_limit" },
	{ 429, "rate limit", "rate_limited" },
	{ 0, "max_profile_stacktrace_sample_labels", "sample_labels_limit" },
	{ 0, "uncompressed profile payload size", "profile_size_limit" },
	{ 0, "max_profile_size", "profile_size_limit" },
	{ 0, "request body too large", "body_size_limit_exceeded" },
	{ 0, "outside of ingestion window", "not_in_ingestion_window" },
	{ 0, "at least one label pair", "missing_labels" },
	{ 0, "label names; limit", "max_label_names_per_series" },
	{ 0, "label name too long", "label_name_too_long" },
	{ 0, "label value too long", "label_value_too_long" },
	{ 0, "duplicate label name", "duplicate_label_names" },
	{ 0, "invalid labels", "invalid_labels" },
	/* no words matched: by status alone */
	{ 400, NULL, "invalid_request" },
	{ 401, NULL, "unauthenticated" },
	{ 413, NULL, "too_large" },
	{ 415, NULL, "unsupported_format" },
	{ 422, NULL, "malformed_profile" },
	{ 429, NULL, "rate_limited" },
	{ 503, NULL, "ingesters_unavailable" },
	{ 504, NULL, "ingesters_timeout" },
};

static const char *
discard_reason(int status, const char *msg)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(discard_words); i++) {
		const char *w = discard_words[i].words;

		if ((discard_words[i].status == 0 ||
		    discard_words[i].status == status) && (w == NULL ||
		    (msg != NULL && strstr(msg, w) != NULL)))
			return (discard_words[i].reason);
	}
	return (status >= 500 ? "internal" : "other");
}

void
dist_observe(const char *tenant, int st, size_t len, uint32_t nseries,
    const char *reason, const char *msg)
{
	sm_metrics_register_once(&dist_metric_set);
	if (tenant == NULL)
		tenant = "";
	if (st == 200) {
		sm_counter_add(sm_metric_child(m_bytes, tenant), len);
		sm_counter_inc(sm_metric_child(m_profiles, tenant));
		sm_counter_add(sm_metric_child(m_series, tenant), nseries);
	} else {
		sm_counter_inc(sm_metric_child(m_discarded,
		    reason != NULL ? reason : discard_reason(st, msg),
		    tenant));
	}
}

static void
ingest_observe(struct sm_http_req *r, const char *tenant, size_t len,
    uint32_t nseries, const char *reason, const struct sm_err *err)
{
	dist_observe(tenant, sm_http_status(r), len, nseries, reason,
	    err != NULL ? err->msg : NULL);
}

/* pprof-path errors: 422, or 429 when a limit says resource_exhausted. */
static void
reply_pprof_err(struct sm_http_req *r, int rv, const struct sm_err *err)
{
	if (rv == SM_EUNAVAIL || rv == SM_ETIMEDOUT || rv == SM_ENOMEM ||
	    rv == SM_EINTERNAL || rv == SM_EPROTO) {
		sm_http_reply_rv(r, rv, err);
		return;
	}
	if (rv == SM_ELIMIT) {
		sm_http_reply_error(r, 429, "resource_exhausted", "%s",
		    err->msg);
		return;
	}
	sm_http_reply_error(r, 422, rv == SM_EUNSUPPORTED ? "unimplemented" :
	    "invalid_argument", "%s", err->msg[0] ? err->msg :
	    sm_strerror(rv));
}

static enum ingest_format
ingest_format(const char *fmt, const char *ctype)
{
	if ((fmt != NULL && strcmp(fmt, "trie") == 0) ||
	    (ctype != NULL && strcmp(ctype, "binary/octet-stream+trie") == 0))
		return (FMT_TRIE);
	if ((fmt != NULL && strcmp(fmt, "tree") == 0) ||
	    (ctype != NULL && strcmp(ctype, "binary/octet-stream+tree") == 0))
		return (FMT_TREE);
	if (fmt != NULL && strcmp(fmt, "lines") == 0)
		return (FMT_LINES);
	if (fmt != NULL && strcmp(fmt, "jfr") == 0)
		return (FMT_JFR);
	if (fmt != NULL && strcmp(fmt, "speedscope") == 0)
		return (FMT_SPEEDSCOPE);
	if (fmt != NULL && strcmp(fmt, "pprof") == 0)
		return (FMT_PPROF);
	if (ctype != NULL && strstr(ctype, "multipart/form-data") != NULL)
		return (FMT_PPROF_FORM);
	return (FMT_FOLDED);
}

/* sample_type_config JSON -> display names (docs/wire-formats.md §2). */
static int
parse_st_config(const struct dist_part *p, struct sm_arena *a,
    struct dist_st_config **out, uint32_t *n, struct sm_err *err)
{
	struct sm_json_it it = SM_JSON_IT_INIT;
	struct sm_json *root = NULL, *v;
	struct sm_err je;
	const char *key;
	uint32_t k = 0;
	int rv = 0;

	*out = NULL;
	*n = 0;
	if (sm_json_parse((const char *)p->data, p->len, 0, &root, &je) != 0 ||
	    !sm_json_is_object(root)) {
		rv = sm_err_set(err, SM_EMALFORMED, "failed to parse pprof "
		    "/ingest multipart form: sample_type_config is not a JSON "
		    "object: %s", root == NULL ? je.msg : "wrong type");
		goto out;
	}
	*out = sm_arena_calloc(a, sm_json_nmembers(root) + 1, sizeof(**out));
	if (*out == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	while (sm_json_next(root, &it, &key, &v)) {
		const char *dn = sm_json_str(sm_json_get(v, "display-name"));

		(*out)[k].sample_type = sm_arena_strndup(a, key, strlen(key));
		(*out)[k].display_name = dn != NULL ?
		    sm_arena_strndup(a, dn, strlen(dn)) : NULL;
		if ((*out)[k].sample_type == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		k++;
	}
	*n = k;
out:
	if (rv != 0)
		*out = NULL;
	sm_json_free(root);
	return (rv);
}

/* Decompress (when gzip) and ingest one pprof. */
static int
ingest_pprof(struct distributor *d, const uint8_t *data, size_t len,
    struct dist_pprof_in *in, struct dist_batch *b, struct sm_err *err)
{
	uint8_t *raw = (uint8_t *)data;
	size_t rawlen = len;
	int rv;

	if (len == 0)
		return (sm_err_set(err, SM_EMALFORMED, "empty profile"));
	if (sm_is_gzip(data, len)) {
		if ((rv = sm_gunzip(data, len, b->limits->max_profile_bytes,
		    b->arena, &raw, &rawlen, err)) != 0)
			return (rv);
	} else if (len > b->limits->max_profile_bytes) {
		return (sm_err_set(err, SM_ETOOBIG, "uncompressed profile "
		    "payload size exceeds limit of %zu bytes",
		    b->limits->max_profile_bytes));
	}
	return (dist_pprof_ingest(raw, rawlen, in, b, err));
}

static int
qs_add(void *arg, const char *key, const char *value)
{
	struct sm_buf *b = arg;

	/* Replaced by the resolved times (ingest_forward). */
	if (strcmp(key, "from") == 0 || strcmp(key, "until") == 0)
		return (0);
	if (b->len != 0)
		sm_buf_putc(b, '&');
	sm_buf_put_pct(b, key, false);
	sm_buf_putc(b, '=');
	sm_buf_put_pct(b, value != NULL ? value : "", false);
	return (0);
}

/*
 * Queue an acknowledged upload for remote-write (remote_write.h).  The
 * query string is the client's, except from/until: they are sent resolved
 * (unix ms, 13 digits), so "now-10s" or an absent time still means the
 * moment this distributor accepted it when the forward happens later.
 */
static void
ingest_forward(struct distributor *d, struct sm_http_req *r,
    const char *tenant, int64_t from_ms, int64_t until_ms,
    const unsigned char *body, size_t len)
{
	struct sm_buf q = SM_BUF_INIT;

	sm_http_query_each(r, qs_add, &q);
	sm_buf_printf(&q, "%sfrom=%" PRId64 "&until=%" PRId64,
	    q.len != 0 ? "&" : "", from_ms, until_ms);
	sm_buf_putc(&q, '\0');
	if (sm_buf_error(&q) == 0)
		(void)rw_enqueue(d->rw, sm_http_path(r), (const char *)q.b,
		    sm_http_header(r, "Content-Type"),
		    d->cfg.multitenancy ? tenant : NULL, 0, body, len);
	else
		sm_warn("remote-write", "out of memory, upload not forwarded");
	sm_buf_fini(&q);
}

/*
 * A pprof body (raw, or pyroscope-go's multipart form) or a JFR upload
 * into b.  0, or an SM_E* with err set, for reply_pprof_err.
 */
static int
ingest_decode_pprof(struct distributor *d, struct sm_http_req *r,
    enum ingest_format fmt, const unsigned char *body, size_t len,
    const struct dist_key *key, const struct dist_limits *lim, int64_t from,
    struct sm_arena *a, struct dist_batch *b, struct sm_err *err)
{
	struct dist_pprof_in in;
	const uint8_t *pdata = body;
	size_t plen = len;
	int rv;

	if (fmt == FMT_JFR) {
		struct dist_jfr_in jin;

		memset(&jin, 0, sizeof(jin));
		jin.sample_rate = b->meta.sample_rate;
		jin.time_ms = from;
		jin.max_bytes = (size_t)d->cfg.body_limit_mb << 20;
		if ((rv = dist_key_pprof_labels(key, b->meta.spy_name, a,
		    (struct sm_label **)&jin.base, &jin.nbase)) != 0) {
			return (sm_err_set(err, rv, "out of memory"));
		}
		return (dist_jfr_upload(sm_http_header(r, "Content-Type"),
		    body, len, &jin, lim->max_profile_bytes, b, err));
	}
	memset(&in, 0, sizeof(in));
	in.spy_name = b->meta.spy_name;
	in.time_ms = from;
	if ((rv = dist_key_pprof_labels(key, b->meta.spy_name, a,
	    (struct sm_label **)&in.base, &in.nbase)) != 0) {
		return (sm_err_set(err, rv, "out of memory"));
	}
	if (fmt == FMT_PPROF_FORM) {
		struct dist_part *parts;
		const struct dist_part *p;
		uint32_t np;

		if ((rv = dist_multipart_parse(sm_http_header(r,
		    "Content-Type"), body, len, a, &parts, &np,
		    err)) != 0) {
			sm_err_prefix(err, "failed to parse pprof "
			    "/ingest multipart form");
			return (rv);
		}
		if (dist_multipart_get(parts, np, "prev_profile") !=
		    NULL) {
			return (sm_err_set(err, SM_EMALFORMED,
			    "unsupported client version. Please update "
			    "github.com/grafana/pyroscope-go to the "
			    "latest version"));
		}
		if ((p = dist_multipart_get(parts, np,
		    "sample_type_config")) != NULL &&
		    (rv = parse_st_config(p, a,
		    (struct dist_st_config **)&in.st_config,
		    &in.nst_config, err)) != 0)
			return (rv);
		if ((p = dist_multipart_get(parts, np, "profile")) ==
		    NULL) {
			return (sm_err_set(err, SM_EMALFORMED, "failed to "
			    "parse pprof /ingest multipart form: no "
			    "\"profile\" field"));
		}
		pdata = p->data;
		plen = p->len;
	}
	return (ingest_pprof(d, pdata, plen, &in, b, err));
}

/* A speedscope body (gzipped or not) into b: one series per profile. */
static int
ingest_speedscope(struct distributor *d, const unsigned char *body,
    size_t len, const struct dist_key *key, int64_t from, struct sm_arena *a,
    struct dist_batch *b, struct sm_err *err)
{
	uint8_t *raw = (uint8_t *)body;
	size_t rawlen = len;
	int rv;

	if (sm_is_gzip(body, len) && (rv = sm_gunzip(body, len,
	    (size_t)d->cfg.body_limit_mb << 20, a, &raw, &rawlen, err)) != 0)
		return (rv == SM_EMALFORMED ? SM_EINVAL : rv);
	return (dist_speedscope_ingest(raw, rawlen, key, b->meta.sample_rate,
	    b->meta.spy_name, from, a, b, err));
}

/*
 * A folded, lines or trie body into b, as one series named by the key.
 * 0, or an SM_E* with err set, for sm_http_reply_rv.
 */
static int
ingest_decode_text(enum ingest_format fmt, const unsigned char *body,
    size_t len, const struct dist_key *key, int64_t from, struct sm_arena *a,
    struct dist_batch *b, struct sm_err *err)
{
	struct dist_legacy lg;
	uint32_t series;
	int rv;

	if ((rv = dist_key_legacy(key, b->meta.sample_rate,
	    b->meta.spy_name, a, &lg, err)) != 0 ||
	    (rv = dist_batch_series(b, lg.labels, lg.nlabels, from,
	    &series, err)) != 0)
		return (rv);
	switch (fmt) {
	case FMT_LINES:
		rv = dist_lines_parse(body, len, b, series, lg.scale, err);
		break;
	case FMT_TRIE:
		rv = dist_trie_parse(body, len, b, series, lg.scale, err);
		break;
	case FMT_TREE:
		rv = dist_tree_parse(body, len, b, series, lg.scale, err);
		break;
	default:
		rv = dist_folded_parse(body, len, b, series, lg.scale, err);
		break;
	}
	/* a parser's malformed is invalid_argument: 400 */
	return (rv == SM_EMALFORMED ? SM_EINVAL : rv);
}

static void
ingest_handler(struct sm_http_req *r, void *arg)
{
	struct distributor *d = arg;
	struct sm_arena *a = NULL;
	struct dist_batch b;
	struct dist_key key;
	struct dist_limits lim;
	struct sm_limits sl;
	struct sm_err err;
	const char *tenant = NULL, *name, *v;
	const unsigned char *body;
	enum ingest_format fmt;
	int64_t now = sm_now_ms(), from, until, sr;
	size_t len;
	const char *why = NULL;         /* discard reason, when not by status */
	int rv, have_batch = 0, pprof_path;

	sm_err_clear(&err);
	body = sm_http_body(r, &len);
	if ((rv = sm_http_tenant(r, d->cfg.multitenancy, &tenant,
	    &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		ingest_observe(r, "", len, 0, NULL, &err);
		return;
	}
	dist_tenant_limits(d, tenant, &sl, &lim);
	if ((rv = dist_rate_check(d, tenant, &sl, len, &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		ingest_observe(r, tenant, len, 0, NULL, &err);
		return;
	}
	fmt = ingest_format(sm_http_query(r, "format"),
	    sm_http_header(r, "Content-Type"));
	pprof_path = fmt == FMT_PPROF || fmt == FMT_PPROF_FORM ||
	    fmt == FMT_JFR;
	/* Arena budget: a generous multiple of what this request may
	 * decompress to, never less than DIST_ARENA_MIN. */
	if ((a = sm_arena_create(SM_MAX(DIST_ARENA_MIN,
	    16 * SM_MAX(len, lim.max_profile_bytes)))) == NULL) {
		sm_http_reply_error(r, 503, "unavailable", "out of memory");
		goto done;
	}
	name = sm_http_query(r, "name");
	if ((rv = dist_key_parse(name != NULL ? name : "", a, &key,
	    &err)) != 0) {
		sm_http_reply_error(r, 400, "invalid_argument", "%s", err.msg);
		goto done;
	}
	v = sm_http_query(r, "from");
	if ((rv = sm_attime_parse(v != NULL ? v : "", now, &from, &err)) != 0 ||
	    (rv = sm_attime_parse((v = sm_http_query(r, "until")) != NULL ?
	    v : "", now, &until, &err)) != 0) {
		sm_http_reply_error(r, 400, "invalid_argument", "%s", err.msg);
		goto done;
	}
	if (dist_key_has_profile_id(&key)) {
		/* Pyroscope drops these silently. */
		sm_http_reply(r, 200, NULL, NULL, 0);
		goto done;
	}
	if ((d->cfg.reject_older_ms > 0 && from < now - d->cfg.reject_older_ms) ||
	    (d->cfg.reject_newer_ms > 0 && from > now + d->cfg.reject_newer_ms)) {
		sm_err_set(&err, SM_EINVAL, "profile with labels '%s' is outside "
		    "of ingestion window (profile timestamp: %lld ms, the window "
		    "is %lld ms before to %lld ms after now)", key.app,
		    (long long)from, (long long)d->cfg.reject_older_ms,
		    (long long)d->cfg.reject_newer_ms);
		if (pprof_path)
			reply_pprof_err(r, SM_EINVAL, &err);
		else
			sm_http_reply_error(r, 400, "invalid_argument", "%s",
			    err.msg);
		goto done;
	}
	if ((rv = dist_batch_init(&b, a, &lim)) != 0) {
		sm_http_reply_error(r, 503, "unavailable", "out of memory");
		goto done;
	}
	have_batch = 1;
	b.meta.spy_name = (v = sm_http_query(r, "spyName")) != NULL && *v ?
	    v : "unknown";
	sr = 100;
	if ((v = sm_http_query(r, "sampleRate")) != NULL && *v &&
	    (sm_parse_int(v, &sr) != 0 || sr < 0 || sr > UINT32_MAX))
		sr = 100;   /* as Pyroscope: bad or negative -> default */
	b.meta.sample_rate = (uint32_t)sr;
	b.meta.units = (v = sm_http_query(r, "units")) != NULL && *v ? v :
	    "samples";
	b.meta.aggregation = (v = sm_http_query(r, "aggregationType")) !=
	    NULL && *v ? v : "sum";

	if (pprof_path) {
		if ((rv = ingest_decode_pprof(d, r, fmt, body, len, &key, &lim,
		    from, a, &b, &err)) != 0)
			goto fail_pprof;
	} else if ((rv = fmt == FMT_SPEEDSCOPE ? ingest_speedscope(d, body,
	    len, &key, from, a, &b, &err) : ingest_decode_text(fmt, body, len,
	    &key, from, a, &b, &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		goto done;
	}
	if ((rv = dist_batch_finish(&b)) != 0) {
		sm_http_reply_error(r, 503, "unavailable", "out of memory");
		goto done;
	}
	if (b.nseries == 0) {
		/* Nothing but zero values: accepted, nothing to store. */
		sm_http_reply(r, 200, NULL, NULL, 0);
		goto done;
	}
	if ((rv = dist_push(d, tenant, &b, NULL, &err)) != 0) {
		/* A tenant over its series limit is counted, not logged
		 * (one line per upload of a flood); like the rate limit. */
		if (rv == SM_ELIMIT)
			why = "series_limit";
		else {
			static struct sm_log_limit fail_log;
			uint64_t dropped;

			if (sm_log_limit_ok(&fail_log, 10, &dropped))
				sm_warn("distributor", "write failed\t"
				    "tenant=%s err=\"%s\" suppressed=%llu",
				    tenant, err.msg,
				    (unsigned long long)dropped);
		}
		sm_http_reply_rv(r, rv, &err);
		goto done;
	}
	if (d->rw != NULL)
		ingest_forward(d, r, tenant, from, until, body, len);
	sm_http_reply(r, 200, NULL, NULL, 0);
	goto done;
fail_pprof:
	reply_pprof_err(r, rv, &err);
done:
	ingest_observe(r, tenant, len, have_batch ? b.nseries : 0, why, &err);
	if (have_batch)
		dist_batch_fini(&b);
	sm_arena_destroy(a);
}

/* A -distributor.ingestion-*-mb flag: a decimal number >= 0. */
static int
dist_mb_flag(const char *name, const char *v, double *out, struct sm_err *err)
{
	char *end;

	errno = 0;
	*out = v != NULL ? strtod(v, &end) : 0;
	if (v == NULL || *v == '\0' || *end != '\0' || errno != 0 ||
	    !isfinite(*out) || *out < 0)
		return (sm_err_set(err, SM_EINVAL, "-%s: want a number of MiB "
		    ">= 0, got \"%s\"", name, v != NULL ? v : ""));
	return (0);
}

/* The flag defaults of the per-tenant limits (overrides.h). */
static int
dist_limits_flags(const struct dist_config *cfg, struct sm_limits *def,
    struct sm_err *err)
{
	int rv;

	memset(def, 0, sizeof(*def));
	def->max_label_name_length = cfg->max_label_name_len;
	def->max_label_value_length = cfg->max_label_value_len;
	def->max_label_names_per_series = cfg->max_label_names;
	def->max_profile_size_bytes = cfg->max_profile_bytes;
	def->max_profile_stacktrace_samples = cfg->max_samples;
	def->max_profile_stacktrace_sample_labels = cfg->max_sample_labels;
	def->max_profile_stacktrace_depth = cfg->max_depth;
	def->max_profile_symbol_value_length = cfg->max_symbol_len;
	def->max_global_series_per_tenant = cfg->max_global_series;
	def->ingestion_tenant_shard_size = cfg->shard_size;
	def->max_local_series_per_tenant = cfg->max_local_series;
	if (cfg->shard_size < 0)
		return (sm_err_set(err, SM_EINVAL, "-distributor.ingestion-"
		    "tenant-shard-size must be >= 0"));
	if (cfg->max_global_series < 0 || cfg->max_local_series < 0)
		return (sm_err_set(err, SM_EINVAL, "-ingester.max-global-series"
		    "-per-tenant and -ingester.max-local-series-per-tenant "
		    "must be >= 0"));
	if ((rv = dist_mb_flag("distributor.ingestion-rate-limit-mb",
	    cfg->ingestion_rate_mb, &def->ingestion_rate_mb, err)) != 0)
		return (rv);
	return (dist_mb_flag("distributor.ingestion-burst-size-mb",
	    cfg->ingestion_burst_mb, &def->ingestion_burst_size_mb, err));
}

static uint32_t
lim_u32(int64_t v)
{
	return ((uint32_t)SM_MIN(SM_MAX(v, 0), (int64_t)UINT32_MAX));
}

void
dist_tenant_limits(struct distributor *d, const char *tenant,
    struct sm_limits *sl, struct dist_limits *dl)
{
	sm_overrides_get(d->cfg.overrides, tenant, &d->deflim, sl);
	*dl = d->limits;
	dl->max_profile_bytes = (size_t)SM_MAX(sl->max_profile_size_bytes, 1);
	dl->max_samples = lim_u32(sl->max_profile_stacktrace_samples);
	dl->max_sample_labels = lim_u32(
	    sl->max_profile_stacktrace_sample_labels);
	dl->max_depth = lim_u32(sl->max_profile_stacktrace_depth);
	dl->max_symbol_len = lim_u32(sl->max_profile_symbol_value_length);
	dl->labels.max_names = lim_u32(sl->max_label_names_per_series);
	dl->labels.max_name_length = lim_u32(sl->max_label_name_length);
	dl->labels.max_value_length = lim_u32(sl->max_label_value_length);
	dl->max_global_series = lim_u32(sl->max_global_series_per_tenant);
	dl->shard_size = lim_u32(sl->ingestion_tenant_shard_size);
	dl->max_local_series = lim_u32(sl->max_local_series_per_tenant);
}

int
dist_rate_check(struct distributor *d, const char *tenant,
    const struct sm_limits *sl, size_t n, struct sm_err *err)
{
	return (dist_ratelim_take(d->ratelim, tenant, sl->ingestion_rate_mb,
	    sl->ingestion_burst_size_mb, sm_peers_healthy(d->peers), n,
	    err));
}

int
dist_create(const struct dist_config *cfg, struct sm_http *http,
    struct sm_ring *ring, struct distributor **out, struct sm_err *err)
{
	static const char *const paths[] = { "/ingest", "/pyroscope/ingest" };
	struct distributor *d;
	int rv;

	*out = NULL;
	if (cfg->body_limit_mb <= 0 || cfg->max_profile_bytes <= 0 ||
	    cfg->push_timeout_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "distributor: body limit, "
		    "profile size limit and push timeout must be > 0"));
	if ((d = sm_calloc(1, sizeof(*d))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	sm_metrics_register_once(&dist_metric_set);
	d->cfg = *cfg;
	d->http = http;
	d->ring = ring;
	dist_limits_default(&d->limits);
	d->limits.max_profile_bytes = (size_t)cfg->max_profile_bytes;
	d->limits.max_samples = (uint32_t)SM_MAX(cfg->max_samples, 0);
	d->limits.max_sample_labels = (uint32_t)SM_MAX(cfg->max_sample_labels,
	    0);
	d->limits.max_depth = (uint32_t)SM_MAX(cfg->max_depth, 0);
	d->limits.max_symbol_len = (uint32_t)SM_MAX(cfg->max_symbol_len, 0);
	d->limits.labels.max_names = (uint32_t)SM_MAX(cfg->max_label_names, 0);
	d->limits.labels.max_name_length =
	    (uint32_t)SM_MAX(cfg->max_label_name_len, 0);
	d->limits.labels.max_value_length =
	    (uint32_t)SM_MAX(cfg->max_label_value_len, 0);
	if ((rv = dist_limits_flags(cfg, &d->deflim, err)) != 0)
		goto fail;
	if ((rv = dist_ratelim_create(cfg->clock, &d->ratelim)) != 0) {
		sm_err_set(err, rv, "out of memory");
		goto fail;
	}
	if ((rv = rw_create(&cfg->rw, &d->rw, err)) != 0)
		goto fail;
	{
		uint8_t rnd[SM_PEER_ID_LEN / 2];
		struct sm_peers_cfg pc = {
			.spec = cfg->peers != NULL ? cfg->peers : "",
			.flag = "-distributor.peers",
			.component = "distributor",
			.header = DIST_PEER_HEADER,
			.self_id = d->peer_id,
			.period_ms = cfg->peers_period_ms,
			.timeout_ms = cfg->peers_timeout_ms,
			.clock = cfg->clock,
			.m_healthy = "smolder_distributor_healthy_peers",
			.m_healthy_help = "Healthy distributors sharing each "
			    "tenant's ingestion rate, this one included (the "
			    "rate is divided by it; 1 without "
			    "-distributor.peers).",
			.m_failures =
			    "smolder_distributor_peer_probe_failures_total",
			.m_failures_help = "Probes of -distributor.peers that "
			    "failed (no answer, not ready, not a "
			    "distributor).",
		};

		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
			/* Unique enough: the time and our address. */
			uint64_t t = (uint64_t)sm_mono_ns() ^
			    (uint64_t)(uintptr_t)d;

			memset(rnd, 0, sizeof(rnd));
			memcpy(rnd, &t, sizeof(t));
		}
		for (size_t i = 0; i < sizeof(rnd); i++)
			snprintf(d->peer_id + 2 * i, 3, "%02x", rnd[i]);
		if ((rv = sm_peers_create(&pc, &d->peers, err)) != 0)
			goto fail;
	}
	{
		char dir[4096];
		struct dist_hints_cfg hc = { NULL, cfg->hints_max_bytes,
		    cfg->hints_max_age_ms, cfg->push_timeout_ms };

		/* made at the first hint: a process that never hints (one
		 * replica) leaves no directory */
		if (cfg->rw.data_dir != NULL && cfg->rw.data_dir[0] != '\0') {
			snprintf(dir, sizeof(dir), "%s/hints",
			    cfg->rw.data_dir);
			hc.dir = dir;
		}
		if ((rv = dist_hints_create(&hc, ring, &d->hints, err)) != 0)
			goto fail;
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(paths); i++) {
		if ((rv = sm_http_route_as(http, SM_SCOPE_WRITE, "POST",
		    paths[i], ingest_handler,
		    d, (size_t)cfg->body_limit_mb << 20)) != 0) {
			sm_err_set(err, rv, "distributor: route %s: %s",
			    paths[i], sm_strerror(rv));
			goto fail;
		}
	}
	if ((rv = dist_connect_register(d, err)) != 0 ||
	    (rv = dist_otlp_register(d, err)) != 0)
		goto fail;
	*out = d;
	return (0);
fail:
	dist_destroy(d);
	return (rv);
}

int
dist_start(struct distributor *d, struct sm_err *err)
{
	return (sm_peers_start(d->peers, err));
}

void
dist_stop(struct distributor *d)
{
	if (d != NULL)
		sm_peers_stop(d->peers);
}

const char *
dist_peer_id(const struct distributor *d)
{
	return (d->peer_id);
}

void
dist_destroy(struct distributor *d)
{
	if (d == NULL)
		return;
	sm_peers_destroy(d->peers);
	dist_hints_destroy(d->hints);
	rw_destroy(d->rw);
	dist_ratelim_destroy(d->ratelim);
	sm_free(d);
}
