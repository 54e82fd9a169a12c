/*
 * bucket_s3.c -- the S3 backend of bucket.h: any S3-compatible store (AWS
 * S3, GCS with HMAC keys, MinIO, Ceph RGW, Swift's s3api) over httpc.h
 * (libcurl), listings parsed with libxml2.  The only file that includes
 * <libxml/...> (docs/style.md §11).
 *
 * Signing.  libcurl 7.88 signs SigV4 itself (httpc's aws_sigv4 =
 * "aws:amz:<region>:s3"); three rules found by trying it
 * on this machine:
 *   1. it does not add x-amz-content-sha256, and S3-compatible servers
 *      answer 400 without it: we send the hex SHA-256 of the payload (the
 *      empty string's for GET, HEAD and DELETE), computed by sm_sha256
 *      (tls.h).  A session token goes in x-amz-security-token (signed too).
 *   2. it signs the query string as given, so we build it canonical:
 *      parameters sorted by name, values fully percent-encoded (RFC 3986
 *      unreserved kept: A-Z a-z 0-9 - . _ ~), e.g. ?list-type=2&prefix=
 *      t1%2F.  Object keys in the path are encoded the same way except
 *      '/' (bucket.h's key set needs no escaping; we encode anyway).
 *   3. the keys go in separately (httpc's key_id and secret, libcurl's
 *      CURLOPT_USERNAME / CURLOPT_PASSWORD): an access key may contain
 *      ':' (Swift's "test:tester"), which "user:pass" splits.
 * And a fourth: never pass an empty header to drop one of curl's own
 * ("Expect:"): 7.88 signs it yet does not send it, and the store answers
 * 403 SignatureDoesNotMatch.  So a large PUT keeps curl's "Expect:
 * 100-continue" (S3 and Swift answer 100 at once).
 *
 * Addressing.  -storage.s3.bucket-lookup-type "path" is
 * <scheme>://<endpoint>/<bucket>/<key>; "virtual-hosted" is
 * <scheme>://<bucket>.<endpoint>/<key>; "auto" is virtual-hosted for an
 * endpoint ending in amazonaws.com (AWS is retiring path-style) and path
 * style otherwise (MinIO, Ceph and Swift behind one host name).  The
 * scheme is https unless -storage.s3.insecure; an endpoint written with a
 * scheme ("http://h:p", an operator's habit) has it stripped and the
 * scheme decides.  Redirects are not followed: a 301 (wrong region or
 * endpoint) is an error that says so.
 *
 * Retries.  A request is tried up to 1 + -storage.s3.max-retries times
 * when it fails in transport (no connection, reset, timeout) or answers
 * 5xx or 429 (SlowDown), sleeping between tries a jittered exponential
 * backoff: the n-th wait is d/2 + rand(d/2) with d = 100 ms * 2^n capped
 * at 5 s ("equal jitter": clients that failed together spread out, yet
 * none retries at once).  Other 4xx are final at once: retrying a wrong
 * key or a missing object cannot help.  Each try is bounded by
 * -storage.s3.timeout (connecting by min(timeout, 5 s)), so a call blocks
 * at most tries * timeout + the backoffs.  After the last try 5xx and
 * transport errors are SM_EUNAVAIL, a timeout SM_ETIMEDOUT, with the
 * store's code: "s3 GET t/1/block: 503 SlowDown after 4 tries".
 *
 * Bounds (docs/style.md §9, a limit on everything).  A GET accepts
 * exactly the bytes asked for (for len == SM_BUCKET_WHOLE, the
 * Content-Length the store announced) and aborts the transfer at the
 * first byte more; fewer is SM_EIO, unless the store says the range runs
 * past the object (SM_EINVAL).  An error body or a listing page is at
 * most S3_BODY_MAX (4 MiB), else SM_EIO.  The XML parser never fetches
 * (XML_PARSE_NONET), and XML with a DTD is refused (S3 sends none, and
 * xmlNodeGetContent would expand its entities): a listing page with one
 * is SM_EIO, an error body with one has no code.
 *
 * Errors: 401/403 SM_EAUTH with the store's code (SignatureDoesNotMatch,
 * InvalidAccessKeyId, RequestTimeTooSkewed); 404 SM_ENOTFOUND ("no such
 * bucket" for NoSuchBucket); 416 or a short 206 SM_EINVAL; other 3xx/4xx
 * and malformed XML SM_EIO.  The secret never enters a message or a log
 * line, and is zeroed before it is freed.
 *
 * Credentials are resolved at open (bucket.h "Credentials"): the flags,
 * else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
 * else the [AWS_PROFILE or default] section of the shared credentials
 * file.  The key pair and the token always come from the same source
 * (flag keys never meet an environment token).  A credentials file that
 * is missing or unreadable only adds its reason to the "no S3
 * credentials" message, which names the flags.
 * The region: the flag, AWS_REGION, AWS_DEFAULT_REGION, "us-east-1".
 *
 * Locking: calls may come from many threads; nothing is shared between
 * them.  Each runs on its thread's httpc handle, whose keep-alive
 * connections stay open between that thread's calls (httpc.h
 * "Connections").  xmlInitParser runs once (pthread_once).
 */
#include "bucket.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "httpc.h"
#include "tls.h"

#define S3_BODY_MAX ((size_t)4 << 20)   /* error body, listing page */
#define S3_CONNECT_MAX_MS 5000
#define S3_BACKOFF_MS 100
#define S3_BACKOFF_MAX_MS 5000
#define S3_CRED_FILE_MAX ((size_t)1 << 20)
/* hex SHA-256 of the empty string */
#define S3_EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct s3 {
	struct sm_bucket b;             /* first: sm_bucket * is an s3 * */
	char *base;                     /* "http://h:p/bucket" or
	                                 * "https://bucket.h", no '/' at end */
	char *sigv4;                    /* "aws:amz:<region>:s3" */
	char *akid, *secret, *token;    /* token NULL when none */
	char *ca_path;                  /* NULL: the system's */
	char *sse[3];                   /* a PUT's SSE header lines, or NULL */
	bool vhost;                     /* virtual-hosted (for desc) */
	bool skip_verify;
	long timeout_ms;
	uint32_t max_retries;
	uint32_t list_max_keys;         /* 0: the store's page size */
};

/* Credentials being resolved (each NULL or sm_malloc'ed). */
struct s3_creds {
	char *akid, *secret, *token;
};

/* One request: what to send, and what came back on the last try. */
struct s3_req {
	const char *method;             /* GET, PUT, HEAD, DELETE */
	const char *what;               /* the key, or "list prefix=..." */
	const char *url;
	const char *range;              /* "bytes=..." or NULL */
	const uint8_t *body;            /* PUT payload */
	size_t nbody;
	struct sm_buf *out;             /* a 2xx body goes here, or NULL */
	uint64_t want;                  /* bound on it; UINT64_MAX: the
	                                 * answer's Content-Length */
	const char *too_long;           /* the message past the bound */
	/* per try */
	uint64_t bound;                 /* want, or the Content-Length */
	size_t out_start;
	uint64_t got;
	long status;
	int64_t clen;                   /* Content-Length, or -1 */
	int64_t cr_total;               /* Content-Range's total, or -1 */
	int cb_rv;                      /* a callback's abort: SM_EIO, ... */
	const char *cb_why;
	struct sm_buf ebody;            /* a non-2xx (or unwanted) body */
};

static pthread_once_t s3_once = PTHREAD_ONCE_INIT;

static void
s3_init_once(void)
{
	xmlInitParser();
}

/* Free a string that may hold a secret. */
static void
s3_free_secret(char *p)
{
	if (p != NULL) {
		explicit_bzero(p, strlen(p));
		sm_free(p);
	}
}

/* Hex SHA-256 of p[0..n) into hex[65].  Returns 0 or SM_EINTERNAL. */
static int
s3_sha256_hex(const void *p, size_t n, char hex[65])
{
	uint8_t md[SM_SHA256_LEN];

	if (n == 0) {
		memcpy(hex, S3_EMPTY_SHA256, 65);
		return (0);
	}
	if (sm_sha256(p, n, md) != 0)
		return (SM_EINTERNAL);
	for (unsigned int i = 0; i < SM_SHA256_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return (0);
}

/* A uniformly random integer in [0, n), n > 0 (jitter only). */
static uint64_t
s3_rand(uint64_t n)
{
	static _Thread_local uint64_t x;

	if (x == 0)
		x = (uint64_t)sm_mono_ns() ^ (uint64_t)(uintptr_t)&x ^
		    0x9e3779b97f4a7c15ull;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return (x % n);
}

/* Sleep before try number `attempt` + 1 (attempt >= 1), in slices of at
 * most 100 ms so that sm_bucket_cancel cuts it short. */
static void
s3_backoff(struct s3 *s, uint32_t attempt)
{
	uint64_t d = S3_BACKOFF_MS;

	for (uint32_t i = 1; i < attempt && d < S3_BACKOFF_MAX_MS; i++)
		d *= 2;
	d = SM_MIN(d, (uint64_t)S3_BACKOFF_MAX_MS);
	d = d / 2 + s3_rand(d / 2 + 1);
	while (d > 0 && !atomic_load(&s->b.cancelled)) {
		uint64_t slice = SM_MIN(d, (uint64_t)100);
		struct timespec ts = { 0, (long)slice * 1000000L };

		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		d -= slice;
	}
}

/* ---- one transfer ---------------------------------------------------- */

/* The first 2xx bytes of a try: bound them, reserve room.  0 or abort. */
static int
s3_write_start(struct s3_req *r)
{
	int64_t cl = r->clen;

	if (r->bound == UINT64_MAX) {
		if (cl < 0) {
			r->cb_why = "no Content-Length";
			return (SM_EIO);
		}
		r->bound = (uint64_t)cl;
	}
	if (cl >= 0 && (uint64_t)cl <= r->bound && (uint64_t)cl <= SIZE_MAX &&
	    sm_buf_reserve(r->out, (size_t)cl) != 0)
		return (sm_buf_error(r->out));
	return (0);
}

/* The body as it arrives; false (with cb_rv set) stops the transfer. */
static bool
s3_write(void *arg, int status, const void *p, size_t n)
{
	struct s3_req *r = arg;

	r->status = status;
	if (r->out != NULL && r->status >= 200 && r->status <= 299) {
		if (r->got == 0 && (r->cb_rv = s3_write_start(r)) != 0)
			return (false);
		if (n > r->bound - r->got) {
			r->cb_rv = SM_EIO;
			r->cb_why = r->too_long != NULL ? r->too_long :
			    "answer longer than asked for";
			return (false);
		}
		sm_buf_append(r->out, p, n);
		if ((r->cb_rv = sm_buf_error(r->out)) != 0)
			return (false);
		r->got += n;
		return (true);
	}
	if (n > S3_BODY_MAX - r->ebody.len) {
		r->cb_rv = SM_EIO;
		r->cb_why = "answer body over 4 MiB";
		return (false);
	}
	sm_buf_append(&r->ebody, p, n);
	if ((r->cb_rv = sm_buf_error(&r->ebody)) != 0)
		return (false);
	return (true);
}

/* A header value's decimal number ("123", or the N of "bytes a-b/N"), or
 * -1. */
static int64_t
s3_hdr_num(const char *value)
{
	const char *v = strrchr(value, '/');
	char *end;
	unsigned long long x;

	v = v != NULL ? v + 1 : value;
	while (*v == ' ' || *v == '\t')
		v++;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno != 0 || end == v || x > INT64_MAX || *v == '-')
		return (-1);
	return (*end == '\0' ? (int64_t)x : -1);
}

/* Keep Content-Length and Content-Range's total ("bytes a-b/N", "* /N"). */
static void
s3_header(void *arg, const char *name, const char *value)
{
	struct s3_req *r = arg;

	if (name == NULL) {
		r->clen = -1;           /* a new answer (after a 100) */
		r->cr_total = -1;
	} else if (strcasecmp(name, "content-length") == 0) {
		r->clen = s3_hdr_num(value);
	} else if (strcasecmp(name, "content-range") == 0) {
		r->cr_total = s3_hdr_num(value);
	}
}

/* The request's own header lines (libcurl signs them with the rest). */
#define S3_HDRS_MAX 6
struct s3_hdrs {
	char *line[S3_HDRS_MAX + 1];    /* sm_malloc'ed, NULL-terminated */
	int n;
};

static void
s3_hdrs_fini(struct s3_hdrs *h)
{
	/* one of them may carry the session token */
	for (int i = 0; i < h->n; i++)
		s3_free_secret(h->line[i]);
	memset(h, 0, sizeof(*h));
}

/* Append one printf-formatted header line to h.  0 or SM_ENOMEM. */
static int
s3_hdr_add(struct s3_hdrs *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int
s3_hdr_add(struct s3_hdrs *h, const char *fmt, ...)
{
	va_list ap;
	char *line;
	int n;

	if (h->n >= S3_HDRS_MAX)
		return (SM_EINTERNAL);
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return (SM_EINTERNAL);
	if ((line = sm_malloc((size_t)n + 1)) == NULL)
		return (SM_ENOMEM);
	va_start(ap, fmt);
	(void)vsnprintf(line, (size_t)n + 1, fmt, ap);
	va_end(ap);
	h->line[h->n++] = line;
	return (0);
}

/* The request's own headers into h. */
static int
s3_headers(struct s3 *s, struct s3_req *r, struct s3_hdrs *h)
{
	char hex[65];
	int rv;

	memset(h, 0, sizeof(*h));
	if ((rv = s3_sha256_hex(r->body, r->nbody, hex)) != 0 ||
	    (rv = s3_hdr_add(h, "x-amz-content-sha256: %s", hex)) != 0)
		goto out;
	if (r->range != NULL && (rv = s3_hdr_add(h, "Range: %s",
	    r->range)) != 0)
		goto out;
	if (s->token != NULL && (rv = s3_hdr_add(h,
	    "x-amz-security-token: %s", s->token)) != 0)
		goto out;
	/* server-side encryption: asked for on every PUT (signed too) */
	for (int i = 0; i < 3 && strcmp(r->method, "PUT") == 0; i++)
		if (s->sse[i] != NULL && (rv = s3_hdr_add(h, "%s",
		    s->sse[i])) != 0)
			goto out;
out:
	if (rv != 0)
		s3_hdrs_fini(h);
	return (rv);
}

/* An answer's XML, or NULL: not XML, or with a DTD (header comment). */
static xmlDocPtr
s3_xml_read(const struct sm_buf *b, const char *name)
{
	xmlDocPtr doc;

	if (b->len == 0 || b->len > INT32_MAX)
		return (NULL);
	doc = xmlReadMemory(b->b, (int)b->len, name, NULL,
	    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (doc != NULL && (doc->intSubset != NULL ||
	    doc->extSubset != NULL)) {
		xmlFreeDoc(doc);
		doc = NULL;
	}
	return (doc);
}

/* The Code of an S3 XML error body, into code[n] ("" when none). */
static void
s3_err_code(const struct sm_buf *body, char *code, size_t n)
{
	xmlDocPtr doc;
	xmlNodePtr root, k;

	code[0] = '\0';
	if ((doc = s3_xml_read(body, "error.xml")) == NULL)
		return;
	root = xmlDocGetRootElement(doc);
	for (k = root != NULL ? root->children : NULL; k != NULL; k = k->next) {
		if (k->type == XML_ELEMENT_NODE &&
		    xmlStrcmp(k->name, BAD_CAST "Code") == 0) {
			xmlChar *v = xmlNodeGetContent(k);

			if (v != NULL)
				snprintf(code, n, "%.64s", (const char *)v);
			xmlFree(v);
			break;
		}
	}
	xmlFreeDoc(doc);
}

/* "s3 <METHOD> <what>: <msg>"; returns code. */
static int
s3_fail(struct s3_req *r, struct sm_err *err, int code, const char *fmt,
    ...) __attribute__((format(printf, 4, 5)));
static int
s3_fail(struct s3_req *r, struct sm_err *err, int code, const char *fmt,
    ...)
{
	char msg[SM_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return (sm_err_set(err, code, "s3 %s %s: %s", r->method, r->what,
	    msg));
}

/*
 * One try of rq: 0 and r->status set, or the try's error: a callback's
 * (in r->cb_rv) before httpc's (*hrv, *resp and herr describe that).
 */
static int
s3_try(struct s3_req *r, const struct sm_httpc_req *rq,
    struct sm_httpc_resp *resp, int *hrv, struct sm_err *herr)
{
	r->bound = r->want;
	r->got = 0;
	r->status = 0;
	r->clen = -1;
	r->cr_total = -1;
	r->cb_rv = 0;
	r->cb_why = NULL;
	sm_buf_reset(&r->ebody);
	if (r->out != NULL)
		sm_buf_truncate(r->out, r->out_start);
	*hrv = sm_httpc_do(rq, resp, NULL, herr);
	if (r->cb_rv != 0)
		return (r->cb_rv);
	if (*hrv == 0)
		r->status = resp->status;
	return (0);
}

/*
 * Run r with retries.  0: r->status is the final answer (any status but
 * 5xx and 429, which retry; those after the last try are errors here).
 * Else SM_EUNAVAIL, SM_ETIMEDOUT, SM_EIO, SM_ENOMEM with err set.
 */
static int
s3_do(struct s3 *s, struct s3_req *r, struct sm_err *err)
{
	struct s3_hdrs hdrs = { 0 };
	struct sm_httpc_req rq = { 0 };
	struct sm_httpc_resp resp = { 0 };
	struct sm_err herr = { 0 };
	uint32_t tries = 0;
	char code[80];
	int rv, hrv = 0;

	sm_buf_init(&r->ebody);
	if (r->out != NULL && (rv = sm_buf_error(r->out)) != 0)
		return (s3_fail(r, err, rv, "output buffer in error"));
	r->out_start = r->out != NULL ? r->out->len : 0;
	if ((rv = s3_headers(s, r, &hdrs)) != 0) {
		rv = s3_fail(r, err, rv, "cannot set up the request");
		goto out;
	}
	rq.method = r->method;
	rq.url = r->url;
	rq.headers = (const char *const *)hdrs.line;
	rq.body = r->body;
	rq.len = r->nbody;
	rq.aws_sigv4 = s->sigv4;
	rq.key_id = s->akid;
	rq.secret = s->secret;
	rq.connect_timeout_ms = SM_MIN(s->timeout_ms, (long)S3_CONNECT_MAX_MS);
	rq.timeout_ms = s->timeout_ms;
	rq.ca_file = s->ca_path;
	rq.insecure = s->skip_verify;
	rq.cancel = &s->b.cancelled;
	rq.cb_arg = r;
	rq.on_header = s3_header;
	rq.on_body = s3_write;
	for (;;) {
		if (tries > 0)
			s3_backoff(s, tries);
		if (atomic_load(&s->b.cancelled)) {
			rv = s3_fail(r, err, SM_ECLOSED, "shutting down");
			goto out;
		}
		tries++;
		if ((rv = s3_try(r, &rq, &resp, &hrv, &herr)) != 0) {
			rv = s3_fail(r, err, rv, "%s", r->cb_why != NULL ?
			    r->cb_why : sm_strerror(rv));
			goto out;
		}
		if (hrv == 0 && r->status != 429 && r->status < 500)
			goto out;       /* rv = 0: a final answer */
		if (hrv == SM_ECLOSED && atomic_load(&s->b.cancelled)) {
			rv = s3_fail(r, err, SM_ECLOSED, "shutting down");
			goto out;
		}
		if (hrv != 0 && resp.reason == NULL) {
			/* httpc could not start the request */
			rv = s3_fail(r, err, hrv, "cannot set up the request");
			goto out;
		}
		if (tries > s->max_retries || (hrv != 0 && resp.final))
			break;
	}
	if (hrv == 0) {
		s3_err_code(&r->ebody, code, sizeof(code));
		rv = s3_fail(r, err, SM_EUNAVAIL, "%ld %s after %u tr%s",
		    r->status, code[0] != '\0' ? code : "(no code)", tries,
		    tries == 1 ? "y" : "ies");
	} else {
		rv = s3_fail(r, err, hrv == SM_ETIMEDOUT ? SM_ETIMEDOUT :
		    SM_EUNAVAIL, "%s after %u tr%s", herr.msg, tries,
		    tries == 1 ? "y" : "ies");
	}
out:
	if (rv != 0 && r->out != NULL && r->out->len > r->out_start)
		sm_buf_truncate(r->out, r->out_start);
	s3_hdrs_fini(&hdrs);
	return (rv);
}

/* Map a final non-2xx status to an error (with the store's code). */
static int
s3_status_err(struct s3_req *r, struct sm_err *err)
{
	char code[80];
	long st = r->status;

	s3_err_code(&r->ebody, code, sizeof(code));
	if (st == 401 || st == 403 || (st == 400 && (strcmp(code,
	    "ExpiredToken") == 0 || strcmp(code, "InvalidToken") == 0 ||
	    strcmp(code, "AuthorizationHeaderMalformed") == 0)))
		return (s3_fail(r, err, SM_EAUTH, "%ld %s (check the keys, "
		    "the region and the clock)", st, code[0] != '\0' ? code :
		    "access denied"));
	if (st == 404 && strcmp(code, "NoSuchBucket") == 0)
		return (s3_fail(r, err, SM_ENOTFOUND, "404 NoSuchBucket: no "
		    "such bucket"));
	if (st == 404)
		return (s3_fail(r, err, SM_ENOTFOUND, "404 %s: no such key",
		    code[0] != '\0' ? code : "Not Found"));
	if (st == 416)
		return (s3_fail(r, err, SM_EINVAL, "416 %s: the range runs "
		    "past the end of the object", code[0] != '\0' ? code :
		    "InvalidRange"));
	return (s3_fail(r, err, SM_EIO, "unexpected answer %ld %s%s", st,
	    code[0] != '\0' ? code : "(no code)", st >= 300 && st < 400 ?
	    " (a redirect: wrong endpoint or region?)" : ""));
}

/* The URL of key (or of the bucket when key is NULL) into u. */
static int
s3_url(struct s3 *s, const char *key, struct sm_buf *u)
{
	sm_buf_puts(u, s->base);
	sm_buf_putc(u, '/');
	if (key != NULL)
		sm_buf_put_pct(u, key, true);
	return (sm_buf_error(u));
}

/* Send r to the URL of key, built in u (r->url points into it). */
static int
s3_key_do(struct s3 *s, const char *key, struct sm_buf *u, struct s3_req *r,
    struct sm_err *err)
{
	int rv;

	if ((rv = s3_url(s, key, u)) != 0)
		return (s3_fail(r, err, rv, "out of memory"));
	r->url = u->b;
	return (s3_do(s, r, err));
}

/* ---- the operations -------------------------------------------------- */

static int
s3_put(struct sm_bucket *b, const char *key, const void *p, size_t n,
    struct sm_err *err)
{
	struct s3 *s = (struct s3 *)b;
	struct sm_buf u = SM_BUF_INIT;
	struct s3_req r = { .method = "PUT", .what = key, .body = p,
	    .nbody = n };
	int rv;

	if ((rv = s3_key_do(s, key, &u, &r, err)) != 0)
		goto out;
	if (r.status != 200 && r.status != 201 && r.status != 204)
		rv = s3_status_err(&r, err);
out:
	sm_buf_fini(&r.ebody);
	sm_buf_fini(&u);
	return (rv);
}

static int
s3_stat(struct sm_bucket *b, const char *key, uint64_t *size,
    struct sm_err *err)
{
	struct s3 *s = (struct s3 *)b;
	struct sm_buf u = SM_BUF_INIT;
	struct s3_req r = { .method = "HEAD", .what = key };
	int rv;

	*size = 0;
	if ((rv = s3_key_do(s, key, &u, &r, err)) != 0)
		goto out;
	if (r.status != 200)
		rv = s3_status_err(&r, err);
	else if (r.clen < 0)
		rv = s3_fail(&r, err, SM_EIO, "200 without a Content-Length");
	else
		*size = (uint64_t)r.clen;
out:
	sm_buf_fini(&r.ebody);
	sm_buf_fini(&u);
	return (rv);
}

/* Did the GET r of [off, off + len) bring exactly that?  0 or the error. */
static int
s3_get_check(struct s3_req *r, uint64_t off, uint64_t len,
    struct sm_err *err)
{
	int64_t total = r->status == 206 ? r->cr_total : r->clen;
	uint64_t expect = len;

	if (r->status == 416 && len == SM_BUCKET_WHOLE && r->cr_total >= 0 &&
	    (uint64_t)r->cr_total == off)
		return (0);             /* from the very end: nothing */
	if (r->status != 200 && r->status != 206)
		return (s3_status_err(r, err));
	if (r->status == 200 && off != 0)
		return (s3_fail(r, err, SM_EIO, "200 to a ranged GET from "
		    "%" PRIu64 " (the store ignored Range)", off));
	if (len == SM_BUCKET_WHOLE)
		expect = r->clen >= 0 ? (uint64_t)r->clen : r->got;
	if (r->got == expect)
		return (0);
	if (len != SM_BUCKET_WHOLE && total >= 0 &&
	    off + len > (uint64_t)total)
		return (s3_fail(r, err, SM_EINVAL, "range [%" PRIu64 ", %"
		    PRIu64 ") runs past the end of the object (%" PRId64
		    " bytes)", off, off + len, total));
	return (s3_fail(r, err, SM_EIO, "got %" PRIu64 " of %" PRIu64
	    " bytes", r->got, expect));
}

static int
s3_get(struct sm_bucket *b, const char *key, uint64_t off, uint64_t len,
    struct sm_buf *out, struct sm_err *err)
{
	struct s3 *s = (struct s3 *)b;
	struct sm_buf u = SM_BUF_INIT;
	struct s3_req r = { .method = "GET", .what = key, .out = out,
	    .want = len };
	size_t start = out->len;
	char range[64];
	uint64_t size;
	int rv;

	if (len == 0) {                 /* nothing to read; off must fit */
		if ((rv = s3_stat(b, key, &size, err)) == 0 && off > size)
			rv = s3_fail(&r, err, SM_EINVAL, "offset %" PRIu64
			    " past the end of the object (%" PRIu64 " bytes)",
			    off, size);
		return (rv);
	}
	if (len != SM_BUCKET_WHOLE && len - 1 > UINT64_MAX - 1 - off)
		return (s3_fail(&r, err, SM_EINVAL, "range overflows"));
	if (len != SM_BUCKET_WHOLE) {
		snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64,
		    off, off + len - 1);
		r.range = range;
	} else if (off != 0) {
		snprintf(range, sizeof(range), "bytes=%" PRIu64 "-", off);
		r.range = range;
	}
	if ((rv = s3_key_do(s, key, &u, &r, err)) != 0)
		goto out;
	/* From the very end: S3 says 416 (Swift without Content-Range). */
	if (r.status == 416 && len == SM_BUCKET_WHOLE && r.cr_total < 0 &&
	    s3_stat(b, key, &size, NULL) == 0 && size == off)
		goto out;
	rv = s3_get_check(&r, off, len, err);
out:
	if (rv != 0 && out->len > start)
		sm_buf_truncate(out, start);
	sm_buf_fini(&r.ebody);
	sm_buf_fini(&u);
	return (rv);
}

static int
s3_del(struct sm_bucket *b, const char *key, struct sm_err *err)
{
	struct s3 *s = (struct s3 *)b;
	struct sm_buf u = SM_BUF_INIT;
	struct s3_req r = { .method = "DELETE", .what = key };
	char code[80] = "";
	int rv;

	if ((rv = s3_key_do(s, key, &u, &r, err)) != 0)
		goto out;
	/* A missing key is 0 (S3's semantics); a missing bucket is not. */
	if (r.status == 404)
		s3_err_code(&r.ebody, code, sizeof(code));
	if (r.status != 200 && r.status != 204 && (r.status != 404 ||
	    strcmp(code, "NoSuchBucket") == 0))
		rv = s3_status_err(&r, err);
out:
	sm_buf_fini(&r.ebody);
	sm_buf_fini(&u);
	return (rv);
}

/* The text of k's first child element named `name` (xmlFree it), or NULL. */
static xmlChar *
s3_xml_child(xmlNodePtr k, const char *name)
{
	for (k = k->children; k != NULL; k = k->next)
		if (k->type == XML_ELEMENT_NODE &&
		    xmlStrcmp(k->name, BAD_CAST name) == 0)
			return (xmlNodeGetContent(k));
	return (NULL);
}

/* One <Contents>: call fn.  fn's return, or SM_EIO with err. */
static int
s3_list_obj(struct s3_req *r, xmlNodePtr k,
    int (*fn)(void *arg, const struct sm_bucket_obj *o), void *arg,
    struct sm_err *err)
{
	xmlChar *key = s3_xml_child(k, "Key"), *size = s3_xml_child(k, "Size");
	struct sm_bucket_obj o;
	unsigned long long v = 0;
	char *end = NULL;
	int rv;

	if (size != NULL && size[0] >= '0' && size[0] <= '9') {
		errno = 0;
		v = strtoull((const char *)size, &end, 10);
	}
	if (key == NULL || key[0] == '\0' || end == NULL || *end != '\0' ||
	    errno != 0) {
		rv = s3_fail(r, err, SM_EIO, "malformed ListObjectsV2 answer: "
		    "a Contents without a Key or a Size");
		goto out;
	}
	o.key = (const char *)key;
	o.size = v;
	rv = fn(arg, &o);
out:
	xmlFree(key);
	xmlFree(size);
	return (rv);
}

/*
 * One ListObjectsV2 page: fn for every object in the server's order.
 * *more: IsTruncated; *next: NextContinuationToken (sm_free it) or NULL.
 * Returns 0, fn's non-zero return, SM_EIO (malformed) or SM_ENOMEM.
 */
static int
s3_list_page(struct s3_req *r, const struct sm_buf *page,
    int (*fn)(void *arg, const struct sm_bucket_obj *o), void *arg,
    bool *more, char **next, struct sm_err *err)
{
	xmlDocPtr doc = NULL;
	xmlNodePtr root = NULL, k;
	xmlChar *v;
	int rv = 0;

	*more = false;
	*next = NULL;
	if ((doc = s3_xml_read(page, "list.xml")) != NULL)
		root = xmlDocGetRootElement(doc);
	if (root == NULL ||
	    xmlStrcmp(root->name, BAD_CAST "ListBucketResult") != 0) {
		rv = s3_fail(r, err, SM_EIO, "malformed ListObjectsV2 answer "
		    "(%zu bytes)", page->len);
		goto out;
	}
	for (k = root->children; k != NULL && rv == 0; k = k->next) {
		if (k->type != XML_ELEMENT_NODE)
			continue;
		if (xmlStrcmp(k->name, BAD_CAST "Contents") == 0) {
			rv = s3_list_obj(r, k, fn, arg, err);
		} else if (xmlStrcmp(k->name, BAD_CAST "IsTruncated") == 0) {
			v = xmlNodeGetContent(k);
			*more = v != NULL && xmlStrcmp(v, BAD_CAST "true") == 0;
			xmlFree(v);
		} else if (xmlStrcmp(k->name,
		    BAD_CAST "NextContinuationToken") == 0 && *next == NULL) {
			v = xmlNodeGetContent(k);
			if (v != NULL && (*next = sm_strdup((char *)v)) == NULL)
				rv = s3_fail(r, err, SM_ENOMEM, "out of memory");
			xmlFree(v);
		}
	}
out:
	if (rv != 0) {
		sm_free(*next);
		*next = NULL;
	}
	xmlFreeDoc(doc);
	return (rv);
}

/* The ListObjectsV2 URL, its query canonical (sorted, encoded). */
static int
s3_list_url(struct s3 *s, const char *prefix, const char *token,
    struct sm_buf *u)
{
	sm_buf_reset(u);
	sm_buf_puts(u, s->base);
	sm_buf_putc(u, '/');
	if (token != NULL) {
		sm_buf_puts(u, "?continuation-token=");
		sm_buf_put_pct(u, token, false);
		sm_buf_puts(u, "&list-type=2");
	} else {
		sm_buf_puts(u, "?list-type=2");
	}
	if (s->list_max_keys > 0)
		sm_buf_printf(u, "&max-keys=%u", s->list_max_keys);
	if (prefix[0] != '\0') {
		sm_buf_puts(u, "&prefix=");
		sm_buf_put_pct(u, prefix, false);
	}
	return (sm_buf_error(u));
}

static int
s3_list(struct sm_bucket *b, const char *prefix,
    int (*fn)(void *arg, const struct sm_bucket_obj *o), void *arg,
    struct sm_err *err)
{
	struct s3 *s = (struct s3 *)b;
	struct sm_buf u = SM_BUF_INIT, page = SM_BUF_INIT, what = SM_BUF_INIT;
	struct s3_req r = { .method = "GET", .what = "list" };
	char *token = NULL, *next = NULL;
	bool more = true;
	int rv = 0;

	sm_buf_printf(&what, "list prefix=%s", prefix);
	if (sm_buf_error(&what) == 0)
		r.what = what.b;
	while (more && rv == 0) {
		r.out = &page;
		r.want = S3_BODY_MAX;
		r.too_long = "listing page over 4 MiB";
		sm_buf_reset(&page);
		if ((rv = s3_list_url(s, prefix, token, &u)) != 0 ||
		    sm_buf_error(&what) != 0) {
			rv = s3_fail(&r, err, SM_ENOMEM, "out of memory");
			break;
		}
		r.url = u.b;
		if ((rv = s3_do(s, &r, err)) == 0 && r.status != 200)
			rv = s3_status_err(&r, err);
		if (rv == 0)
			rv = s3_list_page(&r, &page, fn, arg, &more, &next,
			    err);
		sm_buf_fini(&r.ebody);
		if (rv == 0 && more && (next == NULL || next[0] == '\0' ||
		    (token != NULL && strcmp(token, next) == 0)))
			rv = s3_fail(&r, err, SM_EIO, "malformed ListObjectsV2 "
			    "answer: truncated without a new "
			    "NextContinuationToken");
		sm_free(token);
		token = next;
		next = NULL;
	}
	sm_free(token);
	sm_buf_fini(&u);
	sm_buf_fini(&page);
	sm_buf_fini(&what);
	return (rv);
}

static void
s3_free(struct s3 *s)
{
	sm_free(s->base);
	sm_free(s->sigv4);
	s3_free_secret(s->akid);
	s3_free_secret(s->secret);
	s3_free_secret(s->token);
	sm_free(s->ca_path);
	for (int i = 0; i < 3; i++)
		sm_free(s->sse[i]);
	sm_free(s);
}

/* bucket.c has freed b->prefix and b->desc. */
static void
s3_destroy(struct sm_bucket *b)
{
	s3_free((struct s3 *)b);
}

static const struct sm_bucket_ops s3_ops = {
	.name = "s3",
	.put = s3_put,
	.get = s3_get,
	.stat = s3_stat,
	.del = s3_del,
	.list = s3_list,
	.destroy = s3_destroy,
};

/* ---- opening: addressing, credentials, region ------------------------- */

static bool
s3_set(const char *v)
{
	return (v != NULL && v[0] != '\0');
}

/* The host of "host[:port]" or "[v6]:port" ends in `suffix`? */
static bool
s3_host_ends(const char *ep, const char *suffix)
{
	size_t n = strlen(ep), sl = strlen(suffix);
	const char *c;

	if (ep[0] == '[')
		return (false);
	if ((c = strchr(ep, ':')) != NULL)
		n = (size_t)(c - ep);
	return (n >= sl && strncasecmp(ep + n - sl, suffix, sl) == 0);
}

/* s->base and s->b.desc from the endpoint, bucket and lookup type. */
static int
s3_open_addr(struct s3 *s, const struct sm_bucket_cfg *c, struct sm_err *err)
{
	const char *ep = c->s3_endpoint, *lookup = c->s3_lookup;
	bool https = !c->s3_insecure, vhost;
	struct sm_buf u = SM_BUF_INIT;
	size_t n;

	if (!s3_set(ep))
		return (sm_err_set(err, SM_EINVAL, "-storage.s3.endpoint is "
		    "required (host[:port], e.g. s3.us-east-1.amazonaws.com)"));
	if (!s3_set(c->s3_bucket))
		return (sm_err_set(err, SM_EINVAL, "-storage.s3.bucket-name "
		    "is required"));
	if (strncasecmp(ep, "http://", 7) == 0) {
		https = false;
		ep += 7;
	} else if (strncasecmp(ep, "https://", 8) == 0) {
		https = true;
		ep += 8;
	}
	n = strlen(ep);
	while (n > 0 && ep[n - 1] == '/')
		n--;
	if (n == 0 || strcspn(ep, "/?#@ \t") < n)
		return (sm_err_set(err, SM_EINVAL, "-storage.s3.endpoint: want "
		    "host[:port], got \"%.100s\"", c->s3_endpoint));
	if (!s3_set(lookup) || strcmp(lookup, "auto") == 0)
		vhost = s3_host_ends(ep, "amazonaws.com");
	else if (strcmp(lookup, "path") == 0)
		vhost = false;
	else if (strcmp(lookup, "virtual-hosted") == 0)
		vhost = true;
	else
		return (sm_err_set(err, SM_EINVAL, "-storage.s3.bucket-lookup-"
		    "type: want auto, path or virtual-hosted, got \"%.40s\"",
		    lookup));
	sm_buf_puts(&u, https ? "https://" : "http://");
	if (vhost) {
		sm_buf_put_pct(&u, c->s3_bucket, false);
		sm_buf_putc(&u, '.');
	}
	sm_buf_append(&u, ep, n);
	if (!vhost) {
		sm_buf_putc(&u, '/');
		sm_buf_put_pct(&u, c->s3_bucket, false);
	}
	if (sm_buf_error(&u) == 0)
		s->base = sm_strdup(u.b);
	s->vhost = vhost;
	sm_buf_fini(&u);
	return (s->base == NULL ? sm_err_set(err, SM_ENOMEM, "out of memory") :
	    0);
}

/*
 * The value of `key` in section [section] of INI text, as a new string in
 * *out (NULL when absent).  0 or SM_ENOMEM.
 */
static int
s3_ini_get(const char *text, const char *section, const char *key,
    char **out)
{
	size_t sl = strlen(section), kl = strlen(key);
	const char *p, *e, *eq, *ne, *v;
	bool in = false;

	*out = NULL;
	for (p = text; *p != '\0'; p = *e != '\0' ? e + 1 : e) {
		if ((e = strchr(p, '\n')) == NULL)
			e = p + strlen(p);
		while (p < e && (*p == ' ' || *p == '\t'))
			p++;
		v = e;                  /* the line: p .. v, trimmed */
		while (v > p && (v[-1] == ' ' || v[-1] == '\t' || v[-1] == '\r'))
			v--;
		if (p == v || *p == '#' || *p == ';')
			continue;
		if (*p == '[') {
			in = v[-1] == ']' && (size_t)(v - p) == sl + 2 &&
			    memcmp(p + 1, section, sl) == 0;
			continue;
		}
		if (!in || (eq = memchr(p, '=', (size_t)(v - p))) == NULL)
			continue;
		for (ne = eq; ne > p && (ne[-1] == ' ' || ne[-1] == '\t'); ne--)
			;
		if ((size_t)(ne - p) != kl || strncasecmp(p, key, kl) != 0)
			continue;
		for (eq++; eq < v && (*eq == ' ' || *eq == '\t'); eq++)
			;
		*out = sm_strndup(eq, (size_t)(v - eq));
		return (*out != NULL ? 0 : SM_ENOMEM);
	}
	return (0);
}

/* Read a file of at most S3_CRED_FILE_MAX bytes into b.  0 or -errno. */
static int
s3_read_file(const char *path, struct sm_buf *b)
{
	char chunk[4096];
	FILE *f;
	size_t n;
	int rv = 0;

	if ((f = fopen(path, "re")) == NULL)
		return (-errno);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		if (b->len + n > S3_CRED_FILE_MAX) {
			rv = -EFBIG;
			break;
		}
		sm_buf_append(b, chunk, n);
	}
	if (rv == 0 && ferror(f))
		rv = -EIO;
	if (rv == 0 && sm_buf_error(b) != 0)
		rv = -ENOMEM;
	explicit_bzero(chunk, sizeof(chunk));
	fclose(f);
	return (rv);
}

/*
 * The profile's keys from the shared credentials file, if there is one.
 * A file that cannot be read or lacks the keys is no error here: why[n]
 * says what happened ("" when nothing did) for the caller's message.
 * Returns 0 or SM_ENOMEM.
 */
static int
s3_creds_file(const struct sm_bucket_cfg *c, struct s3_creds *k, char *why,
    size_t n)
{
	const char *path = c->s3_credentials_file, *from = "-storage.s3."
	    "credentials-file", *prof = getenv("AWS_PROFILE"), *home;
	struct sm_buf text = SM_BUF_INIT, def = SM_BUF_INIT;
	int rv = 0;

	why[0] = '\0';
	if (!s3_set(path)) {
		path = getenv("AWS_SHARED_CREDENTIALS_FILE");
		from = "AWS_SHARED_CREDENTIALS_FILE";
	}
	if (!s3_set(path) && s3_set(home = getenv("HOME"))) {
		sm_buf_printf(&def, "%s/.aws/credentials", home);
		path = def.b;
		from = NULL;            /* optional: may be missing */
	}
	if (!s3_set(path) || (rv = sm_buf_error(&def)) != 0)
		goto out;
	if (!s3_set(prof))
		prof = "default";
	if ((rv = s3_read_file(path, &text)) != 0) {
		if (from != NULL || rv != -ENOENT)
			snprintf(why, n, "; %s%s%.120s: %s", from != NULL ?
			    from : "", from != NULL ? " " : "", path,
			    strerror(-rv));
		rv = rv == -ENOMEM ? SM_ENOMEM : 0;
		goto out;
	}
	if ((rv = s3_ini_get(text.b, prof, "aws_access_key_id",
	    &k->akid)) != 0 || (rv = s3_ini_get(text.b, prof,
	    "aws_secret_access_key", &k->secret)) != 0 ||
	    (rv = s3_ini_get(text.b, prof, "aws_session_token",
	    &k->token)) != 0)
		goto out;
	if (k->akid == NULL || k->secret == NULL)
		snprintf(why, n, "; no aws_access_key_id and "
		    "aws_secret_access_key in [%.40s] of %.120s", prof, path);
out:
	if (text.b != NULL)
		explicit_bzero(text.b, text.cap);
	sm_buf_fini(&text);
	sm_buf_fini(&def);
	return (rv);
}

/* Copy the pair and token of one source (all three or nothing). */
static int
s3_creds_copy(struct s3_creds *k, const char *akid, const char *secret,
    const char *token)
{
	if ((s3_set(akid) && (k->akid = sm_strdup(akid)) == NULL) ||
	    (s3_set(secret) && (k->secret = sm_strdup(secret)) == NULL) ||
	    (s3_set(token) && (k->token = sm_strdup(token)) == NULL))
		return (SM_ENOMEM);
	return (0);
}

/* Resolve the keys (header comment) into s.  0 or SM_EINVAL/SM_ENOMEM. */
static int
s3_open_creds(struct s3 *s, const struct sm_bucket_cfg *c,
    struct sm_err *err)
{
	struct s3_creds k = { NULL, NULL, NULL };
	char why[256] = "";
	int rv;

	if (s3_set(c->s3_access_key_id) || s3_set(c->s3_secret_access_key))
		rv = s3_creds_copy(&k, c->s3_access_key_id,
		    c->s3_secret_access_key, c->s3_session_token);
	else if (s3_set(getenv("AWS_ACCESS_KEY_ID")) ||
	    s3_set(getenv("AWS_SECRET_ACCESS_KEY")))
		rv = s3_creds_copy(&k, getenv("AWS_ACCESS_KEY_ID"),
		    getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN"));
	else
		rv = s3_creds_file(c, &k, why, sizeof(why));
	if (rv != 0)
		rv = sm_err_set(err, rv, "out of memory");
	else if (k.akid == NULL || k.secret == NULL)
		rv = sm_err_set(err, SM_EINVAL, "no S3 %s: set "
		    "-storage.s3.access-key-id and -storage.s3.secret-access-"
		    "key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
		    "a shared credentials file)%s", k.akid == NULL &&
		    k.secret == NULL ? "credentials" : k.akid == NULL ?
		    "access key id" : "secret access key", why);
	if (rv != 0) {
		s3_free_secret(k.akid);
		s3_free_secret(k.secret);
		s3_free_secret(k.token);
		return (rv);
	}
	s->akid = k.akid;
	s->secret = k.secret;
	s->token = k.token;
	return (0);
}

/* The region (flag, AWS_REGION, AWS_DEFAULT_REGION, us-east-1). */
static const char *
s3_region(const struct sm_bucket_cfg *c)
{
	if (s3_set(c->s3_region))
		return (c->s3_region);
	if (s3_set(getenv("AWS_REGION")))
		return (getenv("AWS_REGION"));
	if (s3_set(getenv("AWS_DEFAULT_REGION")))
		return (getenv("AWS_DEFAULT_REGION"));
	return ("us-east-1");
}

/* sigv4, desc and the transfer settings. */
static int
s3_open_rest(struct s3 *s, const struct sm_bucket_cfg *c, struct sm_err *err)
{
	const char *region = s3_region(c);
	struct sm_buf b = SM_BUF_INIT;
	int rv = 0;

	if (strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") !=
	    strlen(region) || strlen(region) > 64)
		return (sm_err_set(err, SM_EINVAL, "-storage.s3.region: "
		    "\"%.64s\" is not a region name", region));
	if (c->s3_timeout_ms <= 0 || c->s3_timeout_ms > LONG_MAX ||
	    c->s3_max_retries < 0 || c->s3_list_max_keys < 0 ||
	    c->s3_list_max_keys > 1000)
		return (sm_err_set(err, SM_EINVAL, "-storage.s3.timeout must "
		    "be > 0, -storage.s3.max-retries >= 0 and the list page "
		    "size 0..1000"));
	s->timeout_ms = (long)c->s3_timeout_ms;
	s->max_retries = (uint32_t)SM_MIN(c->s3_max_retries, (int64_t)100);
	s->list_max_keys = (uint32_t)c->s3_list_max_keys;
	s->skip_verify = c->s3_skip_verify;
	sm_buf_printf(&b, "aws:amz:%s:s3", region);
	if (sm_buf_error(&b) == 0 && (s->sigv4 = sm_strdup(b.b)) != NULL) {
		sm_buf_reset(&b);
		sm_buf_printf(&b, "s3 %s (%s, %s)", s->base, s->vhost ?
		    "virtual-hosted" : "path-style", region);
	}
	if (s->sigv4 == NULL || sm_buf_error(&b) != 0 ||
	    (s->b.desc = sm_strdup(b.b)) == NULL ||
	    (s3_set(c->s3_ca_path) &&
	    (s->ca_path = sm_strdup(c->s3_ca_path)) == NULL))
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	sm_buf_fini(&b);
	return (rv);
}

/*
 * Server-side encryption, asked for on every PUT: SSE-S3 (the store's
 * keys: x-amz-server-side-encryption: AES256) or SSE-KMS (aws:kms, with
 * a KMS key id and an encryption context, base64 JSON, when given) --
 * Pyroscope's and Thanos's -storage.s3.sse.* names.  A store that cannot
 * do it refuses the PUT (Swift's s3api without its encryption
 * middleware answers 501), so nothing is stored unencrypted by mistake.
 */
static int
s3_open_sse(struct s3 *s, const struct sm_bucket_cfg *c, struct sm_err *err)
{
	const char *t = c->s3_sse_type != NULL ? c->s3_sse_type : "";
	struct sm_buf b = SM_BUF_INIT;
	int k = 0;

	if (t[0] == '\0')
		return (0);
	if (strcmp(t, "SSE-S3") == 0) {
		sm_buf_puts(&b, "x-amz-server-side-encryption: AES256");
		s->sse[k++] = b.b;
	} else if (strcmp(t, "SSE-KMS") == 0) {
		if (!s3_set(c->s3_sse_kms_key_id))
			return (sm_err_set(err, SM_EINVAL, "-storage.s3.sse.type="
			    "SSE-KMS needs -storage.s3.sse.kms-key-id"));
		sm_buf_puts(&b, "x-amz-server-side-encryption: aws:kms");
		s->sse[k++] = b.b;
		sm_buf_init(&b);
		sm_buf_printf(&b, "x-amz-server-side-encryption-aws-kms-key-id: "
		    "%s", c->s3_sse_kms_key_id);
		s->sse[k++] = b.b;
		if (s3_set(c->s3_sse_kms_context)) {
			sm_buf_init(&b);
			sm_buf_puts(&b, "x-amz-server-side-encryption-context: ");
			sm_buf_put_base64(&b, (const uint8_t *)
			    c->s3_sse_kms_context, strlen(c->s3_sse_kms_context));
			s->sse[k++] = b.b;
		}
	} else {
		return (sm_err_set(err, SM_EINVAL, "-storage.s3.sse.type \"%.32s\""
		    ": not SSE-S3, SSE-KMS or empty", t));
	}
	for (int i = 0; i < k; i++)
		if (s->sse[i] == NULL || strchr(s->sse[i], '\n') != NULL ||
		    strchr(s->sse[i], '\r') != NULL)
			return (sm_err_set(err, s->sse[i] == NULL ? SM_ENOMEM :
			    SM_EINVAL, "-storage.s3.sse.*: %s", s->sse[i] == NULL ?
			    "out of memory" : "a line break in a value"));
	return (0);
}

int
sm_bucket_s3_open(const struct sm_bucket_cfg *c, struct sm_bucket **out,
    struct sm_err *err)
{
	struct s3 *s;
	int rv;

	*out = NULL;
	pthread_once(&s3_once, s3_init_once);
	if (sm_httpc_init() != 0)
		return (sm_err_set(err, SM_EINTERNAL, "s3: libcurl failed to "
		    "initialise"));
	if ((s = sm_calloc(1, sizeof(*s))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	s->b.ops = &s3_ops;
	if ((rv = s3_open_addr(s, c, err)) != 0 ||
	    (rv = s3_open_creds(s, c, err)) != 0 ||
	    (rv = s3_open_rest(s, c, err)) != 0 ||
	    (rv = s3_open_sse(s, c, err)) != 0) {
		sm_free(s->b.desc);
		s3_free(s);
		return (rv);
	}
	*out = &s->b;
	return (0);
}
