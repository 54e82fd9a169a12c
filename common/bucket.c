/*
 * bucket.c -- what every backend shares (bucket.h): the -storage.* flags,
 * key checks, the -storage.prefix, and dispatch through the ops table.
 * The backends see full keys that already passed sm_bucket_key_ok, so a
 * hostile key (from an admin command line or a damaged index) never
 * reaches a file path or a URL unchecked.
 */
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "bucket.h"
#include "flags.h"
#include "metrics.h"

/* Requests by operation: what a SaaS pays its store for (a list counts
 * once however many pages it took). */
static struct sm_metric *m_req, *m_req_fail;

static const struct sm_metric_def metric_defs[] = {
	{ &m_req, SM_METRIC_COUNTER, "smolder_bucket_requests_total",
	    "Object storage calls by operation (put, get, stat, delete, "
	    "list).", SM_METRIC_LABELS("op"), NULL, 0 },
	{ &m_req_fail, SM_METRIC_COUNTER,
	    "smolder_bucket_request_failures_total", "Object storage calls "
	    "that failed (after the backend's retries), by operation; a "
	    "missing key is not a failure.", SM_METRIC_LABELS("op"), NULL, 0 },
};

static struct sm_metric_set metric_set = SM_METRIC_SET(metric_defs);

static int
counted(const char *op, int rv)
{
	sm_counter_inc(sm_metric_child(m_req, op));
	if (rv != 0 && rv != SM_ENOTFOUND)
		sm_counter_inc(sm_metric_child(m_req_fail, op));
	return (rv);
}

#define SM_FLAG_STRUCT struct sm_bucket_cfg
static const struct sm_flag bucket_flag_tab[] = {
	SM_FLAG_STR("storage.backend", backend,
	    "",
	    "Object storage for history: filesystem, s3, or empty for "
	    "none."),
	SM_FLAG_STR("storage.prefix", prefix,
	    "",
	    "Prefix of every object key (letters, digits, '-', '_', '.' "
	    "and '/'), so several clusters can share one bucket."),
	SM_FLAG_STR("storage.filesystem.dir", fs_dir,
	    "",
	    "Directory of the filesystem backend (empty: <data.dir>/bucket; "
	    "relative: under -data.dir)."),
	SM_FLAG_STR("storage.s3.endpoint", s3_endpoint,
	    "",
	    "S3 endpoint host[:port], e.g. s3.eu-west-2.amazonaws.com, "
	    "storage.googleapis.com or minio:9000."),
	SM_FLAG_STR("storage.s3.bucket-name", s3_bucket,
	    "", "S3 bucket name."),
	SM_FLAG_STR("storage.s3.region", s3_region,
	    "",
	    "S3 region signed into every request (empty: AWS_REGION, "
	    "AWS_DEFAULT_REGION, else us-east-1)."),
	SM_FLAG_STR("storage.s3.access-key-id", s3_access_key_id,
	    "",
	    "S3 access key (empty: AWS_ACCESS_KEY_ID, else the credentials "
	    "file)."),
	SM_FLAG_SECRET("storage.s3.secret-access-key", s3_secret_access_key,
	    "",
	    "S3 secret key (empty: AWS_SECRET_ACCESS_KEY, else the "
	    "credentials file).  Never logged."),
	SM_FLAG_SECRET("storage.s3.session-token", s3_session_token,
	    "",
	    "S3 session token of temporary credentials given by the "
	    "flags (keys from the environment or the credentials file "
	    "bring their own)."),
	SM_FLAG_STR("storage.s3.credentials-file", s3_credentials_file,
	    "",
	    "AWS shared credentials file read when no key is given "
	    "(empty: AWS_SHARED_CREDENTIALS_FILE, else "
	    "~/.aws/credentials); profile AWS_PROFILE or default."),
	SM_FLAG_STR("storage.s3.bucket-lookup-type", s3_lookup,
	    "auto",
	    "S3 addressing: path, virtual-hosted, or auto (virtual-hosted "
	    "for *.amazonaws.com, path otherwise)."),
	SM_FLAG_STR("storage.s3.http.tls-ca-path", s3_ca_path,
	    "",
	    "CA bundle (PEM) that S3's certificate must chain to (empty: "
	    "the system's)."),
	SM_FLAG_SWITCH("storage.s3.insecure", s3_insecure,
	    "false",
	    "Talk to S3 over plain http instead of https."),
	SM_FLAG_SWITCH("storage.s3.http.insecure-skip-verify", s3_skip_verify,
	    "false",
	    "Accept any S3 certificate (testing only)."),
	SM_FLAG_I64("storage.s3.timeout", SM_FLAG_DURATION, s3_timeout_ms,
	    "30s",
	    "Longest one S3 request may take (connecting takes at most "
	    "5s of it)."),
	SM_FLAG_I64("storage.s3.max-retries", SM_FLAG_INT, s3_max_retries,
	    "4",
	    "Tries after the first on a transport error, a timeout, 429 "
	    "or 5xx, with jittered exponential backoff."),
	SM_FLAG_STR("storage.s3.sse.type", s3_sse_type,
	    "",
	    "Server-side encryption asked of S3 on every upload: SSE-S3 "
	    "(the store's keys), SSE-KMS (a KMS key), or empty (the "
	    "bucket's default).  A store that cannot do it refuses the "
	    "upload."),
	SM_FLAG_STR("storage.s3.sse.kms-key-id", s3_sse_kms_key_id,
	    "", "The KMS key of -storage.s3.sse.type=SSE-KMS."),
	SM_FLAG_STR("storage.s3.sse.kms-encryption-context",
	    s3_sse_kms_context,
	    "", "JSON encryption context of SSE-KMS (optional)."),
	SM_FLAG_STR("storage.encryption.key-file", seal_key_file,
	    "",
	    "Encrypt every object put in the bucket (AES-256-GCM, a data "
	    "key per object) with key-encryption keys from this file: "
	    "lines '<id> <64 hex digits> [<tenant>]', the first line "
	    "without a tenant sealing new objects; re-read when it "
	    "changes (docs/operations.md, Security)."),
};
#undef SM_FLAG_STRUCT

int
sm_bucket_flags_add(struct sm_flags *fs, struct sm_bucket_cfg *c,
    struct sm_err *err)
{
	return (sm_flags_add(fs, bucket_flag_tab,
	    SM_ARRAY_LEN(bucket_flag_tab), c, err));
}

bool
sm_bucket_cfg_enabled(const struct sm_bucket_cfg *c)
{
	return (c->backend != NULL && c->backend[0] != '\0');
}

static bool
key_char_ok(char ch)
{
	return ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-' ||
	    ch == '/');
}

bool
sm_bucket_key_ok(const char *key)
{
	size_t n, seg;

	if (key == NULL || (n = strlen(key)) == 0 || n > SM_BUCKET_KEY_MAX)
		return (false);
	if (key[0] == '/' || key[n - 1] == '/')
		return (false);
	seg = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && key[i] != '/') {
			if (!key_char_ok(key[i]))
				return (false);
			continue;
		}
		/* A segment is key[seg, i). */
		if (i == seg)
			return (false);
		/* No hidden segment: ".", "..", and the filesystem
		 * backend's temporary files are all out of reach. */
		if (key[seg] == '.')
			return (false);
		seg = i + 1;
	}
	return (true);
}

/* A prefix is "" or a key; stored with a trailing slash. */
static int
prefix_make(const char *p, char **out, struct sm_err *err)
{
	size_t n;

	if (p == NULL || p[0] == '\0') {
		*out = sm_strdup("");
		return (*out == NULL ? SM_ENOMEM : 0);
	}
	n = strlen(p);
	while (n > 0 && p[n - 1] == '/')
		n--;
	if ((*out = sm_malloc(n + 2)) == NULL)
		return (SM_ENOMEM);
	memcpy(*out, p, n);
	(*out)[n] = '\0';
	if (!sm_bucket_key_ok(*out) || n + 1 >= SM_BUCKET_KEY_MAX / 2) {
		sm_free(*out);
		*out = NULL;
		return (sm_err_set(err, SM_EINVAL, "-storage.prefix %s: not "
		    "a valid key prefix (letters, digits, '-', '_', '.', '/'; "
		    "no empty segment, none starting with '.')", p));
	}
	(*out)[n] = '/';
	(*out)[n + 1] = '\0';
	return (0);
}

static int
fs_dir_resolve(const struct sm_bucket_cfg *c, const char *data_dir,
    char *path, size_t len, struct sm_err *err)
{
	const char *d = c->fs_dir != NULL ? c->fs_dir : "";
	int n;

	if (d[0] == '/')
		n = snprintf(path, len, "%s", d);
	else if (data_dir == NULL || data_dir[0] == '\0')
		n = snprintf(path, len, "%s", d[0] != '\0' ? d : "bucket");
	else
		n = snprintf(path, len, "%s/%s", data_dir,
		    d[0] != '\0' ? d : "bucket");
	if (n < 0 || (size_t)n >= len)
		return (sm_err_set(err, SM_EINVAL, "-storage.filesystem.dir: "
		    "path too long"));
	return (0);
}

int
sm_bucket_open(const struct sm_bucket_cfg *c, const char *data_dir,
    struct sm_bucket **out, struct sm_err *err)
{
	struct sm_bucket *b = NULL;
	char path[PATH_MAX];
	char *prefix = NULL;
	int rv;

	*out = NULL;
	sm_metrics_register_once(&metric_set);
	if (!sm_bucket_cfg_enabled(c))
		return (sm_err_set(err, SM_EINVAL, "-storage.backend: none "
		    "configured"));
	if ((rv = prefix_make(c->prefix, &prefix, err)) != 0)
		return (rv);
	if (strcmp(c->backend, "filesystem") == 0) {
		if ((rv = fs_dir_resolve(c, data_dir, path, sizeof(path),
		    err)) != 0)
			goto out;
		rv = sm_bucket_fs_open(path, &b, err);
	} else if (strcmp(c->backend, "s3") == 0) {
		rv = sm_bucket_s3_open(c, &b, err);
	} else {
		rv = sm_err_set(err, SM_EINVAL, "-storage.backend %s: not "
		    "one of filesystem, s3", c->backend);
	}
	if (rv != 0)
		goto out;
	if (c->seal_key_file != NULL && c->seal_key_file[0] != '\0') {
		struct sm_bucket *sb;

		if ((rv = sm_bucket_seal_open(b, c->seal_key_file,
		    strlen(prefix), &sb, err)) != 0) {
			sm_bucket_destroy(b);
			goto out;
		}
		b = sb;
	}
	b->prefix = prefix;
	prefix = NULL;
	*out = b;
out:
	sm_free(prefix);
	return (rv);
}

void
sm_bucket_cancel(struct sm_bucket *b)
{
	for (; b != NULL; b = b->inner)
		atomic_store(&b->cancelled, true);
}

static int
cancelled(const struct sm_bucket *b, const char *op, struct sm_err *err)
{
	if (!atomic_load(&b->cancelled))
		return (0);
	return (sm_err_set(err, SM_ECLOSED, "bucket %s: shutting down", op));
}

void
sm_bucket_destroy(struct sm_bucket *b)
{
	if (b == NULL)
		return;
	sm_free(b->prefix);
	sm_free(b->desc);
	b->prefix = NULL;
	b->desc = NULL;
	b->ops->destroy(b);
}

const char *
sm_bucket_desc(const struct sm_bucket *b)
{
	return (b->desc != NULL ? b->desc : b->ops->name);
}

/* prefix + key into full (SM_BUCKET_KEY_MAX + 1 bytes at least). */
static int
full_key(const struct sm_bucket *b, const char *key, char *full,
    size_t len, const char *op, struct sm_err *err)
{
	int n;

	if (!sm_bucket_key_ok(key))
		return (sm_err_set(err, SM_EINVAL, "bucket %s: invalid key "
		    "'%.64s'", op, key != NULL ? key : "(null)"));
	n = snprintf(full, len, "%s%s", b->prefix != NULL ? b->prefix : "",
	    key);
	if (n < 0 || (size_t)n >= len)
		return (sm_err_set(err, SM_EINVAL, "bucket %s: key '%.64s' "
		    "too long with the prefix", op, key));
	return (0);
}

#define FULL_KEY_LEN (2 * SM_BUCKET_KEY_MAX + 2)

int
sm_bucket_put(struct sm_bucket *b, const char *key, const void *p, size_t n,
    struct sm_err *err)
{
	char full[FULL_KEY_LEN];
	int rv;

	if ((rv = full_key(b, key, full, sizeof(full), "put", err)) != 0 ||
	    (rv = cancelled(b, "put", err)) != 0)
		return (rv);
	return (counted("put", b->ops->put(b, full, p, n, err)));
}

int
sm_bucket_get(struct sm_bucket *b, const char *key, uint64_t off,
    uint64_t len, struct sm_buf *out, struct sm_err *err)
{
	char full[FULL_KEY_LEN];
	size_t mark;
	int rv;

	if ((rv = full_key(b, key, full, sizeof(full), "get", err)) != 0 ||
	    (rv = cancelled(b, "get", err)) != 0)
		return (rv);
	if (len == 0)
		return (0);
	if (len != SM_BUCKET_WHOLE && off > UINT64_MAX - len)
		return (sm_err_set(err, SM_EINVAL, "bucket get %s: range "
		    "overflows", key));
	mark = out->len;
	rv = counted("get", b->ops->get(b, full, off, len, out, err));
	/* A process without the key file must not read ciphertext as data
	 * (a block's meta.json, read whole first, is where it shows). */
	if (rv == 0 && b->inner == NULL && off == 0 && out->len - mark >= 8 &&
	    memcmp(out->b + mark, SM_BUCKET_SEAL_MAGIC, 8) == 0) {
		sm_buf_truncate(out, mark);
		rv = sm_err_set(err, SM_EAUTH, "bucket get %s: the object is "
		    "sealed (encrypted at rest) and this process has no "
		    "-storage.encryption.key-file", key);
	}
	return (rv);
}

int
sm_bucket_sealed_by(struct sm_bucket *b, const char *key,
    char id[SM_BUCKET_SEAL_ID_MAX + 1], struct sm_err *err)
{
	char full[FULL_KEY_LEN];
	struct sm_bucket *raw = b;
	struct sm_buf v = SM_BUF_INIT;
	int rv;

	id[0] = '\0';
	if ((rv = full_key(b, key, full, sizeof(full), "get", err)) != 0 ||
	    (rv = cancelled(b, "get", err)) != 0)
		return (rv);
	while (raw->inner != NULL)      /* the store, past the sealing */
		raw = raw->inner;
	rv = counted("get", raw->ops->get(raw, full, 0, SM_BUCKET_SEAL_HDR, &v,
	    err));
	if (rv == SM_EINVAL) {          /* shorter than a header: plain */
		sm_err_clear(err);
		rv = 0;
	} else if (rv == 0 && v.len == SM_BUCKET_SEAL_HDR &&
	    memcmp(v.b, SM_BUCKET_SEAL_MAGIC, 8) == 0) {
		memcpy(id, v.b + SM_BUCKET_SEAL_ID_AT, SM_BUCKET_SEAL_ID_MAX);
		id[SM_BUCKET_SEAL_ID_MAX] = '\0';
	}
	sm_buf_fini(&v);
	return (rv);
}

int
sm_bucket_stat(struct sm_bucket *b, const char *key, uint64_t *size,
    struct sm_err *err)
{
	char full[FULL_KEY_LEN];
	int rv;

	if ((rv = full_key(b, key, full, sizeof(full), "stat", err)) != 0 ||
	    (rv = cancelled(b, "stat", err)) != 0)
		return (rv);
	return (counted("stat", b->ops->stat(b, full, size, err)));
}

int
sm_bucket_delete(struct sm_bucket *b, const char *key, struct sm_err *err)
{
	char full[FULL_KEY_LEN];
	int rv;

	if ((rv = full_key(b, key, full, sizeof(full), "delete", err)) != 0 ||
	    (rv = cancelled(b, "delete", err)) != 0)
		return (rv);
	return (counted("delete", b->ops->del(b, full, err)));
}

/* Strips the prefix off every listed key before the caller sees it. */
struct list_ctx {
	size_t plen;
	int (*fn)(void *arg, const struct sm_bucket_obj *o);
	void *arg;
};

static int
list_strip(void *arg, const struct sm_bucket_obj *o)
{
	struct list_ctx *lc = arg;
	struct sm_bucket_obj so = *o;

	if (strlen(o->key) < lc->plen)
		return (0);
	so.key = o->key + lc->plen;
	return (lc->fn(lc->arg, &so));
}

int
sm_bucket_list(struct sm_bucket *b, const char *prefix,
    int (*fn)(void *arg, const struct sm_bucket_obj *o), void *arg,
    struct sm_err *err)
{
	char full[FULL_KEY_LEN];
	struct list_ctx lc;
	const char *bp = b->prefix != NULL ? b->prefix : "";
	int n, rv;

	/* A listing prefix may end in '/' or be empty; check the rest. */
	if (prefix == NULL)
		prefix = "";
	for (const char *q = prefix; *q != '\0'; q++)
		if (!key_char_ok(*q))
			return (sm_err_set(err, SM_EINVAL, "bucket list: "
			    "invalid prefix '%.64s'", prefix));
	n = snprintf(full, sizeof(full), "%s%s", bp, prefix);
	if (n < 0 || (size_t)n >= sizeof(full))
		return (sm_err_set(err, SM_EINVAL, "bucket list: prefix too "
		    "long"));
	if ((rv = cancelled(b, "list", err)) != 0)
		return (rv);
	lc.plen = strlen(bp);
	lc.fn = fn;
	lc.arg = arg;
	rv = b->ops->list(b, full, list_strip, &lc, err);
	/* A callback's own stop (a positive code) is not a failure. */
	(void)counted("list", rv >= SM_ENOMEM && rv < SM_E_LAST_ ? rv : 0);
	return (rv);
}

static int
probe_one(void *arg, const struct sm_bucket_obj *o)
{
	(void)arg;
	(void)o;
	return (1);    /* one object is enough */
}

int
sm_bucket_probe(struct sm_bucket *b, struct sm_err *err)
{
	int rv = sm_bucket_list(b, "", probe_one, NULL, err);

	return (rv == 1 ? 0 : rv);
}
