/*
 * etcd.c -- etcd.h over httpc and jansson.  Every call is one POST of a
 * JSON body to /v3/... on the first endpoint that answers; the answer is
 * parsed with jansson.  etcd's gateway spells 64-bit integers as JSON
 * strings ("revision": "12") and leaves out fields at their zero value,
 * so readers accept a string or a number and treat a missing one as 0.
 */
#include "etcd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "httpc.h"
#include "json.h"
#include "log.h"

#define ETCD_BODY_MAX ((size_t)4 << 20)

struct sm_etcd {
	char *desc;
	char **ep;                  /* "http://host:port", no slash */
	uint32_t nep;
	atomic_uint last;           /* the endpoint that answered last */
	int64_t timeout_ms;
	atomic_bool cancelled;
};

/* The process's TLS to etcd (sm_etcd_tls_set); set before any handle. */
static struct {
	bool on;
	char *cert, *key, *ca;
} etcd_tls;

/* --- base64 (common/buf.h) -------------------------------------------------- */

static char *
b64_enc(const void *p, size_t n)
{
	struct sm_buf b = SM_BUF_INIT;

	sm_buf_put_base64(&b, p, n);
	sm_buf_putc(&b, '\0');        /* a "" body for n = 0 */
	if (sm_buf_error(&b) != 0) {
		sm_buf_fini(&b);
		return (NULL);
	}
	return (sm_buf_take(&b, NULL));
}

/* Decode s into a NUL-terminated heap copy (*len bytes before the NUL). */
static int
b64_dec(const char *s, char **out, size_t *len)
{
	struct sm_buf b = SM_BUF_INIT;
	size_t n = strlen(s);
	int rv;

	*out = NULL;
	if (n % 4 != 0 || n > ETCD_BODY_MAX)
		return (SM_EIO);
	if ((rv = sm_buf_put_unbase64(&b, s, n)) != 0 ||
	    sm_buf_reserve(&b, 1) != 0) {
		sm_buf_fini(&b);
		return (rv == SM_EINVAL || rv == 0 ? SM_EIO : rv);
	}
	*len = b.len;
	b.b[b.len] = '\0';
	if (b.len == 0) {                /* an empty value: no buffer yet */
		sm_buf_fini(&b);
		if ((*out = sm_malloc(1)) == NULL)
			return (SM_ENOMEM);
		**out = '\0';
		return (0);
	}
	*out = sm_buf_take(&b, NULL);
	return (0);
}

/* The end of a prefix range: the prefix with its last byte incremented
 * (etcd's convention; a prefix of 0xff bytes only is not used here). */
static char *
prefix_end(const char *prefix)
{
	size_t n = strlen(prefix);
	unsigned char *e;

	if ((e = (unsigned char *)sm_strdup(prefix)) == NULL)
		return (NULL);
	while (n > 0 && e[n - 1] == 0xff)
		n--;
	if (n > 0)
		e[n - 1]++;
	e[n] = '\0';
	return ((char *)e);
}

/* A JSON integer or etcd's decimal string (0 when missing). */
static int64_t
jint(const struct sm_json *o, const char *name)
{
	struct sm_json *v = sm_json_get(o, name);

	if (sm_json_is_integer(v))
		return (sm_json_int(v));
	if (sm_json_is_string(v))
		return (strtoll(sm_json_str(v), NULL, 10));
	return (0);
}

/* --- transport --------------------------------------------------------------- */

struct body {
	struct sm_buf b;
	bool over;
	bool nomem;
	/* watch: messages are newline-separated JSON; on_line returns
	 * false to end the transfer */
	bool (*on_line)(void *arg, const char *line, size_t len);
	void *arg;
	bool stopped;
};

static bool
body_cb(void *arg, int status, const void *p, size_t n)
{
	struct body *b = arg;

	(void)status;
	if (b->b.len + n > ETCD_BODY_MAX) {
		b->over = true;
		return (false);
	}
	sm_buf_append(&b->b, p, n);
	if (sm_buf_error(&b->b) != 0) {
		b->nomem = true;
		return (false);
	}
	if (b->on_line != NULL) {
		char *nl;

		while ((nl = memchr(b->b.b, '\n', b->b.len)) != NULL) {
			size_t ll = (size_t)(nl - b->b.b);

			*nl = '\0';
			if (!b->on_line(b->arg, b->b.b, ll)) {
				b->stopped = true;
				return (false);
			}
			memmove(b->b.b, nl + 1, b->b.len - ll - 1);
			b->b.len -= ll + 1;
		}
	}
	return (true);
}

/*
 * POST body to path on one endpoint after another; on 200, *out is the
 * parsed answer.  A watch (on_line set) reads until on_line stops it or
 * wait_ms passes: both are success with *out NULL.
 */
static int
etcd_call(struct sm_etcd *e, const char *path, const struct sm_json *req,
    int64_t wait_ms, bool (*on_line)(void *, const char *, size_t), void *arg,
    struct sm_json **out, struct sm_err *err)
{
	static const char *const hdr[] = { "Content-Type: application/json",
	    NULL };
	char *payload = NULL, url[600];
	uint32_t first = atomic_load(&e->last);
	int rv = SM_EUNAVAIL;

	*out = NULL;
	if (atomic_load(&e->cancelled))
		return (sm_err_set(err, SM_ECLOSED, "etcd: closing"));
	if (sm_httpc_init() != 0)
		return (sm_err_set(err, SM_EINTERNAL, "etcd: curl did not "
		    "initialise"));
	if ((payload = sm_json_dumps(req, 0)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t k = 0; k < e->nep; k++) {
		uint32_t i = (first + k) % e->nep;
		struct body b = { .b = SM_BUF_INIT, .on_line = on_line,
		    .arg = arg };
		struct sm_httpc_req rq = { 0 };
		struct sm_httpc_resp resp;
		struct sm_err herr = { 0 };
		long code;
		int hrv;

		(void)snprintf(url, sizeof(url), "%s%s", e->ep[i], path);
		rq.url = url;
		rq.headers = hdr;
		rq.body = payload;
		rq.len = strlen(payload);
		rq.tls_cert = etcd_tls.cert;
		rq.tls_key = etcd_tls.key;
		rq.ca_file = etcd_tls.ca;
		rq.connect_timeout_ms = SM_MIN(e->timeout_ms, 5000);
		rq.timeout_ms = on_line != NULL ? wait_ms : e->timeout_ms;
		rq.cancel = &e->cancelled;
		rq.cb_arg = &b;
		rq.on_body = body_cb;
		hrv = sm_httpc_do(&rq, &resp, NULL, &herr);
		code = resp.status;
		if (atomic_load(&e->cancelled)) {
			sm_buf_fini(&b.b);
			rv = sm_err_set(err, SM_ECLOSED, "etcd: closing");
			break;
		}
		if (hrv == SM_ENOMEM) {
			sm_buf_fini(&b.b);
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			break;
		}
		if (on_line != NULL && code == 200 && (b.stopped ||
		    hrv == SM_ETIMEDOUT)) {
			sm_buf_fini(&b.b);
			atomic_store(&e->last, i);
			rv = 0;
			break;
		}
		if (hrv == SM_ETIMEDOUT) {
			sm_buf_fini(&b.b);
			rv = sm_err_set(err, SM_ETIMEDOUT, "etcd %s%s: timed "
			    "out", e->ep[i], path);
			continue;
		}
		if (b.over) {
			sm_buf_fini(&b.b);
			rv = sm_err_set(err, SM_EIO, "etcd %s%s: answer over "
			    "%zu bytes", e->ep[i], path, ETCD_BODY_MAX);
			break;
		}
		if (hrv != 0 || b.nomem) {
			sm_buf_fini(&b.b);
			rv = sm_err_set(err, SM_EUNAVAIL, "etcd %s%s: %s",
			    e->ep[i], path, hrv != 0 ? herr.msg :
			    "out of memory");
			continue;
		}
		if (code != 200) {
			struct sm_json *j = NULL;
			const char *m;

			/* A body that is no JSON reads as no message. */
			(void)sm_json_parse(b.b.b, b.b.len, 0, &j, NULL);
			if ((m = sm_json_str(sm_json_get(j, "message"))) ==
			    NULL)
				m = sm_json_str(sm_json_get(j, "error"));
			rv = sm_err_set(err, code >= 500 ? SM_EUNAVAIL :
			    (m != NULL && strstr(m, "not found") != NULL ?
			    SM_ENOTFOUND : SM_EIO), "etcd %s%s: HTTP %ld: %s",
			    e->ep[i], path, code, m != NULL ? m : "(no message)");
			sm_json_free(j);
			sm_buf_fini(&b.b);
			if (code >= 500)
				continue;
			break;
		}
		atomic_store(&e->last, i);
		if (on_line != NULL) {
			/* the stream ended without a change */
			sm_buf_fini(&b.b);
			rv = 0;
			break;
		}
		if (sm_json_parse(b.b.b, b.b.len, 0, out, NULL) != 0 ||
		    !sm_json_is_object(*out)) {
			sm_json_free(*out);
			*out = NULL;
			rv = sm_err_set(err, SM_EIO, "etcd %s%s: the answer is "
			    "not a JSON object", e->ep[i], path);
		} else {
			rv = 0;
		}
		sm_buf_fini(&b.b);
		break;
	}
	sm_free(payload);
	return (rv);
}

/* etcd_call of request `req`, which it frees (NULL: out of memory); the
 * answer in *ans on 0, or dropped when `ans` is NULL. */
static int
etcd_post(struct sm_etcd *e, const char *path, struct sm_json *req,
    struct sm_json **ans, struct sm_err *err)
{
	struct sm_json *a = NULL;
	int rv;

	if (req == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	rv = etcd_call(e, path, req, 0, NULL, NULL, &a, err);
	sm_json_free(req);
	if (ans != NULL && rv == 0)
		*ans = a;
	else
		sm_json_free(a);
	return (rv);
}

/* --- the handle -------------------------------------------------------------- */

int
sm_etcd_open(const char *endpoints, int64_t timeout_ms, struct sm_etcd **out,
    struct sm_err *err)
{
	struct sm_etcd *e;
	const char *p = endpoints;

	*out = NULL;
	if (timeout_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "-ring.etcd.dial-timeout "
		    "must be positive"));
	if ((e = sm_calloc(1, sizeof(*e))) == NULL ||
	    (e->desc = sm_strdup(endpoints)) == NULL) {
		sm_free(e);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	e->timeout_ms = timeout_ms;
	atomic_init(&e->cancelled, false);
	atomic_init(&e->last, 0);
	while (*p != '\0') {
		const char *end = strchr(p, ',');
		size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
		char **grown;

		while (n > 0 && p[n - 1] == '/')
			n--;
		if (n == 0 || n > 500 || memchr(p, ' ', n) != NULL) {
			sm_etcd_destroy(e);
			return (sm_err_set(err, SM_EINVAL, "-ring.etcd.endpoints "
			    "\"%s\": each endpoint is host:port or "
			    "http://host:port, comma-separated", endpoints));
		}
		if ((grown = sm_realloc(e->ep, (e->nep + 1) *
		    sizeof(*e->ep))) == NULL ||
		    (grown[e->nep] = sm_malloc(n + 9)) == NULL) {
			if (grown != NULL)
				e->ep = grown;
			sm_etcd_destroy(e);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		e->ep = grown;
		if (strncmp(p, "http://", 7) == 0 || strncmp(p, "https://",
		    8) == 0)
			(void)snprintf(grown[e->nep], n + 9, "%.*s", (int)n, p);
		else            /* "https://" and the NUL: n + 9 */
			(void)snprintf(grown[e->nep], n + 9, "%s://%.*s",
			    etcd_tls.on ? "https" : "http", (int)n, p);
		e->nep++;
		p += n;
		while (*p == '/')
			p++;
		if (*p == ',')
			p++;
	}
	if (e->nep == 0) {
		sm_etcd_destroy(e);
		return (sm_err_set(err, SM_EINVAL, "-ring.etcd.endpoints is "
		    "empty"));
	}
	*out = e;
	return (0);
}

void
sm_etcd_destroy(struct sm_etcd *e)
{
	if (e == NULL)
		return;
	for (uint32_t i = 0; i < e->nep; i++)
		sm_free(e->ep[i]);
	sm_free(e->ep);
	sm_free(e->desc);
	sm_free(e);
}

void
sm_etcd_cancel(struct sm_etcd *e)
{
	if (e != NULL)
		atomic_store(&e->cancelled, true);
}

const char *
sm_etcd_desc(const struct sm_etcd *e)
{
	return (e->desc);
}

/* {"key": b64(key)} plus, when end, "range_end": b64(prefix end). */
static struct sm_json *
key_req(const char *key, bool range)
{
	struct sm_json *o = sm_json_object();
	char *k = b64_enc(key, strlen(key)), *end = NULL, *ke = NULL;

	if (o == NULL || k == NULL)
		goto fail;
	if (sm_json_set_str(o, "key", k) != 0)
		goto fail;
	if (range) {
		if ((end = prefix_end(key)) == NULL ||
		    (ke = b64_enc(end, strlen(end))) == NULL ||
		    sm_json_set_str(o, "range_end", ke) != 0)
			goto fail;
	}
	sm_free(k);
	sm_free(end);
	sm_free(ke);
	return (o);
fail:
	sm_json_free(o);
	sm_free(k);
	sm_free(end);
	sm_free(ke);
	return (NULL);
}

static int
key_check(const char *key, struct sm_err *err)
{
	size_t n = strlen(key);

	if (n == 0 || n > SM_ETCD_KEY_MAX)
		return (sm_err_set(err, SM_EINVAL, "etcd: a key must be 1..%d "
		    "bytes", SM_ETCD_KEY_MAX));
	return (0);
}

/* {"key", "value", "lease"?} for put and for a txn's success op. */
static struct sm_json *
put_req(const char *key, const char *val, size_t vlen, int64_t lease)
{
	struct sm_json *o = key_req(key, false);
	char *v = b64_enc(val, vlen), num[24];

	if (o == NULL || v == NULL ||
	    sm_json_set_str(o, "value", v) != 0)
		goto fail;
	if (lease != 0) {
		(void)snprintf(num, sizeof(num), "%lld", (long long)lease);
		if (sm_json_set_str(o, "lease", num) != 0)
			goto fail;
	}
	sm_free(v);
	return (o);
fail:
	sm_json_free(o);
	sm_free(v);
	return (NULL);
}

int
sm_etcd_put(struct sm_etcd *e, const char *key, const char *val, size_t vlen,
    int64_t lease, struct sm_err *err)
{
	int rv;

	if ((rv = key_check(key, err)) != 0)
		return (rv);
	return (etcd_post(e, "/v3/kv/put", put_req(key, val, vlen, lease),
	    NULL, err));
}

int
sm_etcd_delete(struct sm_etcd *e, const char *key, struct sm_err *err)
{
	int rv;

	if ((rv = key_check(key, err)) != 0)
		return (rv);
	return (etcd_post(e, "/v3/kv/deleterange", key_req(key, false), NULL,
	    err));
}

void
sm_etcd_kvs_free(struct sm_etcd_kv *kvs, size_t n)
{
	for (size_t i = 0; kvs != NULL && i < n; i++) {
		sm_free(kvs[i].key);
		sm_free(kvs[i].val);
	}
	sm_free(kvs);
}

int
sm_etcd_range(struct sm_etcd *e, const char *prefix, struct sm_etcd_kv **out,
    size_t *nout, int64_t *rev, struct sm_err *err)
{
	struct sm_json *ans = NULL, *arr;
	struct sm_etcd_kv *kvs = NULL;
	size_t n = 0, i;
	int rv;

	*out = NULL;
	*nout = 0;
	*rev = 0;
	if ((rv = key_check(prefix, err)) != 0)
		return (rv);
	if ((rv = etcd_post(e, "/v3/kv/range", key_req(prefix, true), &ans,
	    err)) != 0)
		return (rv);
	*rev = jint(sm_json_get(ans, "header"), "revision");
	arr = sm_json_get(ans, "kvs");
	if (arr != NULL && !sm_json_is_array(arr)) {
		sm_json_free(ans);
		return (sm_err_set(err, SM_EIO, "etcd range %s: kvs is not an "
		    "array", prefix));
	}
	n = sm_json_len(arr);
	if (n > 0 && (kvs = sm_calloc(n, sizeof(*kvs))) == NULL) {
		sm_json_free(ans);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	for (i = 0; i < n; i++) {
		struct sm_json *kv = sm_json_at(arr, i);
		const char *k = sm_json_str(sm_json_get(kv, "key"));
		const char *v = sm_json_str(sm_json_get(kv, "value"));
		size_t kl;

		if (k == NULL) {
			rv = sm_err_set(err, SM_EIO, "etcd range %s: a kv "
			    "without a key", prefix);
			break;
		}
		if ((rv = b64_dec(k, &kvs[i].key, &kl)) != 0 ||
		    (rv = b64_dec(v != NULL ? v : "", &kvs[i].val,
		    &kvs[i].vlen)) != 0) {
			rv = sm_err_set(err, rv, "etcd range %s: bad base64",
			    prefix);
			break;
		}
		kvs[i].mod_rev = jint(kv, "mod_revision");
	}
	sm_json_free(ans);
	if (rv != 0) {
		sm_etcd_kvs_free(kvs, n);
		return (rv);
	}
	*out = kvs;
	*nout = n;
	return (0);
}

/* obj[key] = [v] (v shared, not taken), for a txn's compare and
 * success lists. */
static int
list_of(struct sm_json *obj, const char *key, struct sm_json *v)
{
	struct sm_json *a = sm_json_array();
	int rv;

	if ((rv = sm_json_append_take(a, sm_json_ref(v))) != 0) {
		sm_json_free(a);
		return (rv);
	}
	return (sm_json_set_take(obj, key, a));
}

int
sm_etcd_create(struct sm_etcd *e, const char *key, const char *val,
    size_t vlen, int64_t lease, bool *created, struct sm_err *err)
{
	struct sm_json *req = NULL, *cmp = NULL, *put = NULL, *ans = NULL;
	struct sm_json *op = NULL;
	int rv;

	*created = false;
	if ((rv = key_check(key, err)) != 0)
		return (rv);
	/* {"compare":[{"key","target":"CREATE","create_revision":"0"}],
	 *  "success":[{"request_put":{...}}]} */
	if ((req = sm_json_object()) == NULL || (cmp = key_req(key, false)) ==
	    NULL || (put = put_req(key, val, vlen, lease)) == NULL ||
	    (op = sm_json_object()) == NULL ||
	    sm_json_set_str(cmp, "target", "CREATE") != 0 ||
	    sm_json_set_str(cmp, "result", "EQUAL") != 0 ||
	    sm_json_set_str(cmp, "create_revision", "0") != 0 ||
	    sm_json_set_take(op, "request_put", sm_json_ref(put)) != 0 ||
	    list_of(req, "compare", cmp) != 0 ||
	    list_of(req, "success", op) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if ((rv = etcd_call(e, "/v3/kv/txn", req, 0, NULL, NULL, &ans,
	    err)) == 0)
		*created = sm_json_is_true(sm_json_get(ans, "succeeded"));
out:
	sm_json_free(req);
	sm_json_free(cmp);
	sm_json_free(put);
	sm_json_free(op);
	sm_json_free(ans);
	return (rv);
}

struct watch_state {
	bool changed;
	bool bad;
};

static bool
watch_line(void *arg, const char *line, size_t len)
{
	struct watch_state *w = arg;
	struct sm_json *j = NULL, *res;

	if (len == 0)
		return (true);
	if (sm_json_parse(line, len, 0, &j, NULL) != 0) {
		w->bad = true;
		return (false);
	}
	res = sm_json_get(j, "result");
	if (sm_json_len(sm_json_get(res, "events")) > 0 ||
	    jint(res, "compact_revision") != 0 ||
	    sm_json_is_true(sm_json_get(res, "canceled")))
		w->changed = true;
	if (sm_json_get(j, "error") != NULL)
		w->bad = true;
	sm_json_free(j);
	return (!w->changed && !w->bad);
}

int
sm_etcd_watch(struct sm_etcd *e, const char *prefix, int64_t from_rev,
    int64_t wait_ms, bool *changed, struct sm_err *err)
{
	struct watch_state w = { false, false };
	struct sm_json *cr, *req = NULL, *ans = NULL;
	char num[24];
	int rv;

	*changed = false;
	if ((rv = key_check(prefix, err)) != 0)
		return (rv);
	(void)snprintf(num, sizeof(num), "%lld", (long long)from_rev);
	if ((cr = key_req(prefix, true)) == NULL ||
	    sm_json_set_str(cr, "start_revision", num) != 0 ||
	    (req = sm_json_object()) == NULL ||
	    sm_json_set_take(req, "create_request", sm_json_ref(cr)) != 0) {
		sm_json_free(cr);
		sm_json_free(req);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	rv = etcd_call(e, "/v3/watch", req, wait_ms > 0 ? wait_ms : 1,
	    watch_line, &w, &ans, err);
	sm_json_free(cr);
	sm_json_free(req);
	sm_json_free(ans);
	if (rv == 0 && w.bad)
		rv = sm_err_set(err, SM_EIO, "etcd watch %s: a message that is "
		    "not what etcd sends", prefix);
	*changed = w.changed;
	return (rv);
}

/* POST {field: "v"} (etcd spells 64-bit integers as strings) to a lease
 * path; on 0, *out (when not NULL) is the integer `key` of the answer's
 * object `obj` (NULL: of the answer itself), 0 when it has none. */
static int
lease_call(struct sm_etcd *e, const char *path, const char *field, int64_t v,
    const char *obj, const char *key, int64_t *out, struct sm_err *err)
{
	struct sm_json *req = sm_json_object(), *ans = NULL;
	char num[24];
	int rv;

	(void)snprintf(num, sizeof(num), "%lld", (long long)v);
	if (sm_json_set_str(req, field, num) != 0)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	else
		rv = etcd_call(e, path, req, 0, NULL, NULL, &ans, err);
	if (rv == 0 && out != NULL)
		*out = jint(obj != NULL ? sm_json_get(ans, obj) : ans, key);
	sm_json_free(req);
	sm_json_free(ans);
	return (rv);
}

int
sm_etcd_lease_grant(struct sm_etcd *e, int64_t ttl_s, int64_t *id,
    struct sm_err *err)
{
	int rv;

	*id = 0;
	rv = lease_call(e, "/v3/lease/grant", "TTL", ttl_s, NULL, "ID", id,
	    err);
	if (rv == 0 && *id == 0)
		rv = sm_err_set(err, SM_EIO, "etcd lease grant: no ID in the "
		    "answer");
	return (rv);
}

int
sm_etcd_lease_keepalive(struct sm_etcd *e, int64_t id, int64_t *ttl_s,
    struct sm_err *err)
{
	int rv;

	*ttl_s = 0;
	/* the gateway streams keepalive answers; one is all we read */
	rv = lease_call(e, "/v3/lease/keepalive", "ID", id, "result", "TTL",
	    ttl_s, err);
	if (rv == 0 && *ttl_s <= 0)
		rv = sm_err_set(err, SM_ENOTFOUND, "etcd lease %lld expired",
		    (long long)id);
	return (rv);
}

int
sm_etcd_lease_revoke(struct sm_etcd *e, int64_t id, struct sm_err *err)
{
	int rv;

	rv = lease_call(e, "/v3/lease/revoke", "ID", id, NULL, NULL, NULL,
	    err);
	return (rv == SM_ENOTFOUND ? 0 : rv);
}

/* --- a single-holder lock ------------------------------------------------------ */

struct sm_etcd_lock {
	struct sm_etcd *e;
	char *key, *holder;
	int64_t ttl_s;
	const struct sm_clock *clock;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stopping;
	/* under mu */
	int64_t lease;
	bool held;
	bool lapsed;                /* held given up past the margin by
				       sm_etcd_lock_held, lease kept */
	int64_t kept_ms;            /* last successful grant or keepalive */
	char who[256];
	bool warned;
};

/* The lock's monotonic clock, in ms. */
static int64_t
lock_now_ms(const struct sm_etcd_lock *l)
{
	return (sm_clock_mono_ns(l->clock) / 1000000);
}

static void
lock_round(struct sm_etcd_lock *l)
{
	struct sm_err err;
	struct sm_etcd_kv *kvs = NULL;
	size_t n = 0;
	int64_t lease, ttl, rev;
	bool held, created = false;
	int rv = 0;

	sm_err_clear(&err);
	pthread_mutex_lock(&l->mu);
	lease = l->lease;
	held = l->held;
	pthread_mutex_unlock(&l->mu);
	if (lease != 0) {
		int64_t drop = 0;

		rv = sm_etcd_lease_keepalive(l->e, lease, &ttl, &err);
		pthread_mutex_lock(&l->mu);
		if (rv == 0 && l->lapsed) {
			/* The lock was given up past the margin, yet etcd kept
			 * the lease: the key is still ours under it, and
			 * creating it would fail for as long as we keep the
			 * lease alive.  Start over: revoking frees the key. */
			sm_warn("etcd", "lock lapsed (keepalive too late), "
			    "taking it anew\tkey=%s", l->key);
			drop = lease;
			l->lease = lease = 0;
			l->lapsed = false;
		} else if (rv == 0) {
			l->kept_ms = lock_now_ms(l);
		} else if (rv == SM_ENOTFOUND || lock_now_ms(l) -
		    l->kept_ms >= (l->ttl_s - 1) * 1000) {
			if (l->held)
				sm_warn("etcd", "lock lost\tkey=%s err=\"%s\"",
				    l->key, err.msg);
			l->held = false;
			l->lapsed = false;
			l->lease = lease = 0;
		}
		held = l->held;
		pthread_mutex_unlock(&l->mu);
		if (drop != 0)
			(void)sm_etcd_lease_revoke(l->e, drop, &err);
		if (held || rv != 0)
			return;
	}
	if (lease == 0) {
		if ((rv = sm_etcd_lease_grant(l->e, l->ttl_s, &lease,
		    &err)) != 0)
			goto fail;
		pthread_mutex_lock(&l->mu);
		l->lease = lease;
		l->kept_ms = lock_now_ms(l);
		pthread_mutex_unlock(&l->mu);
	}
	if ((rv = sm_etcd_create(l->e, l->key, l->holder, strlen(l->holder),
	    lease, &created, &err)) != 0)
		goto fail;
	if (created) {
		pthread_mutex_lock(&l->mu);
		l->held = true;
		l->who[0] = '\0';
		l->warned = false;
		pthread_mutex_unlock(&l->mu);
		sm_info("etcd", "lock taken\tkey=%s holder=%s", l->key,
		    l->holder);
		return;
	}
	if (sm_etcd_range(l->e, l->key, &kvs, &n, &rev, &err) == 0) {
		pthread_mutex_lock(&l->mu);
		l->who[0] = '\0';
		for (size_t i = 0; i < n; i++) {
			if (strcmp(kvs[i].key, l->key) == 0)
				(void)snprintf(l->who, sizeof(l->who), "%s",
				    kvs[i].val);
		}
		pthread_mutex_unlock(&l->mu);
		sm_etcd_kvs_free(kvs, n);
	}
	return;
fail:
	pthread_mutex_lock(&l->mu);
	if (rv != SM_ECLOSED && !l->warned)
		sm_warn("etcd", "cannot take the lock (retrying)\tkey=%s "
		    "err=\"%s\"", l->key, err.msg);
	l->warned = true;
	pthread_mutex_unlock(&l->mu);
}

static void *
lock_main(void *arg)
{
	struct sm_etcd_lock *l = arg;

	pthread_mutex_lock(&l->mu);
	while (!l->stopping) {
		pthread_mutex_unlock(&l->mu);
		lock_round(l);
		pthread_mutex_lock(&l->mu);
		if (!l->stopping)
			sm_clock_wait_ms(l->clock, &l->cv, &l->mu,
			    SM_MAX(l->ttl_s * 1000 / 3, 100));
	}
	pthread_mutex_unlock(&l->mu);
	return (NULL);
}

/* Free a lock whose thread has not started or has been joined. */
static void
lock_free(struct sm_etcd_lock *l)
{
	sm_etcd_destroy(l->e);
	sm_free(l->key);
	sm_free(l->holder);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	sm_free(l);
}

int
sm_etcd_lock_start(const char *endpoints, int64_t timeout_ms,
    const char *key, const char *holder, int64_t ttl_s,
    const struct sm_clock *clock, struct sm_etcd_lock **out,
    struct sm_err *err)
{
	struct sm_etcd_lock *l;
	int rv;

	*out = NULL;
	if (ttl_s < 2)
		return (sm_err_set(err, SM_EINVAL, "etcd lock: a TTL of at "
		    "least 2 s"));
	if ((l = sm_calloc(1, sizeof(*l))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	pthread_mutex_init(&l->mu, NULL);
	sm_cond_init(&l->cv);
	l->ttl_s = ttl_s;
	l->clock = clock;
	if ((l->key = sm_strdup(key)) == NULL ||
	    (l->holder = sm_strdup(holder)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rv = sm_etcd_open(endpoints, timeout_ms, &l->e, err)) != 0)
		goto fail;
	if (pthread_create(&l->thr, NULL, lock_main, l) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "etcd lock: thread");
		goto fail;
	}
	*out = l;
	return (0);
fail:
	lock_free(l);
	return (rv);
}

bool
sm_etcd_lock_held(struct sm_etcd_lock *l, char *who, size_t wholen)
{
	bool held;

	pthread_mutex_lock(&l->mu);
	/* past the margin without a keepalive: not ours any more, even if
	 * the thread has not noticed yet */
	if (l->held && lock_now_ms(l) - l->kept_ms >= (l->ttl_s - 1) *
	    1000) {
		l->held = false;
		l->lapsed = true;
	}
	held = l->held;
	if (!held && who != NULL && wholen > 0)
		(void)snprintf(who, wholen, "%s", l->who);
	pthread_mutex_unlock(&l->mu);
	return (held);
}

void
sm_etcd_lock_stop(struct sm_etcd_lock *l)
{
	struct sm_err err;

	if (l == NULL)
		return;
	sm_cond_set_flag(&l->mu, &l->cv, &l->stopping);
	pthread_join(l->thr, NULL);
	/* free the key for the next holder at once, not after the TTL */
	sm_err_clear(&err);
	if (l->lease != 0)
		(void)sm_etcd_lease_revoke(l->e, l->lease, &err);
	lock_free(l);
}

/* --- TLS ---------------------------------------------------------------------- */

static char *
etcd_path_dup(const char *path, bool *bad)
{
	char *p;

	if (path == NULL || path[0] == '\0')
		return (NULL);
	if (access(path, R_OK) != 0)
		*bad = true;
	if ((p = sm_strdup(path)) == NULL)
		*bad = true;
	return (p);
}

int
sm_etcd_tls_set(const struct sm_etcd_tls_cfg *cfg, struct sm_err *err)
{
	bool bad = false;

	sm_etcd_tls_clear();
	etcd_tls.on = cfg->enabled || (cfg->cert_path != NULL &&
	    cfg->cert_path[0] != '\0') || (cfg->ca_path != NULL &&
	    cfg->ca_path[0] != '\0');
	etcd_tls.cert = etcd_path_dup(cfg->cert_path, &bad);
	etcd_tls.key = etcd_path_dup(cfg->key_path, &bad);
	etcd_tls.ca = etcd_path_dup(cfg->ca_path, &bad);
	if (bad || (etcd_tls.cert == NULL) != (etcd_tls.key == NULL)) {
		sm_etcd_tls_clear();
		return (sm_err_set(err, SM_EINVAL, "etcd tls: the certificate, "
		    "key and CA files must be readable, and a certificate "
		    "needs its key"));
	}
	return (0);
}

void
sm_etcd_tls_clear(void)
{
	sm_free(etcd_tls.cert);
	sm_free(etcd_tls.key);
	sm_free(etcd_tls.ca);
	memset(&etcd_tls, 0, sizeof(etcd_tls));
}
