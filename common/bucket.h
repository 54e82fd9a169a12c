/*
 * bucket.h -- object storage: where history lives once an ingester has
 * cut it (docs/architecture.md §10).  One interface, two backends behind
 * a const ops table (docs/style.md §10):
 *
 *   filesystem  objects are files under a directory (the single binary's
 *               bucket, and every test's).  A put writes a temporary file
 *               in the same directory, fsyncs it, renames it over the key
 *               and fsyncs the directory: a reader sees the old object,
 *               the new one, or none -- never a torn one, also after a
 *               crash or a power loss.  bucket_fs.c.
 *   s3          any S3-compatible store: AWS S3, GCS's S3 interoperability
 *               (HMAC keys), MinIO, Ceph RGW, OpenStack Swift's s3api.
 *               libcurl signs with SigV4 (httpc.h's aws_sigv4), libxml2
 *               parses ListObjectsV2.  Path-style or virtual-hosted
 *               addressing, https with a CA bundle or plain http, per
 *               request timeouts, retries with jittered exponential
 *               backoff on 5xx, 429 (SlowDown) and transport errors.
 *               bucket_s3.c is the only file that includes <libxml/...>;
 *               its HTTP goes through common/httpc.h.
 *
 * What the interface promises (and the acceptance suite common/
 * bucket_test.c checks on both backends, the S3 one against a real
 * Swift on loopback):
 *   - put is atomic and durable when it returns 0: a get after it sees the
 *     whole object.  There is no conditional put (Swift has none), so
 *     callers make keys unique (ingester block ids) instead of racing on
 *     one.
 *   - get of [off, off + len) returns exactly those bytes; a range that
 *     runs past the end is SM_EINVAL, a missing key SM_ENOTFOUND.
 *     len == SM_BUCKET_WHOLE reads from off to the end.
 *   - list is NOT a source of truth: S3-compatible stores (Swift, Ceph)
 *     may lag.  It serves the compactor and smolder-admin; the read path
 *     reads a bucket index the compactor writes.  Keys come in byte order
 *     (all backends), with continuation handled inside.
 *   - delete of a missing key is 0 (S3's semantics).
 *
 * Keys: 1..SM_BUCKET_KEY_MAX bytes of [A-Za-z0-9._-/], no empty segment,
 * no segment starting with '.', not starting or ending with '/'
 * (sm_bucket_key_ok).  That set needs no escaping on any backend, no
 * filesystem path can climb out of the directory ("..") and no key names
 * the filesystem backend's temporary files (".tmp-...").  -storage.prefix is
 * prepended to every key by this layer, so callers never see it.
 *
 * Sealed objects (encryption at rest, -storage.encryption.key-file):
 * with a key file every object is sealed on put (AES-256-GCM, a data key
 * per object wrapped by a key-encryption key from the file, per tenant
 * when the file says so) and opened on get, by a backend that wraps the
 * store's (bucket_seal.c has the format and the rules); the interface
 * above holds unchanged, on plaintext.  Objects put before the key file
 * was given are read as they are.  list reports stored sizes.  A
 * process without the key file refuses a sealed object it gets from
 * offset 0 (SM_EAUTH, naming the flag) rather than serve ciphertext.
 *
 * Credentials (s3), the key pair and its token always from ONE source:
 * the flags, else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and
 * AWS_SESSION_TOKEN) from the environment, else
 * the [profile] (AWS_PROFILE, default "default") of an AWS shared
 * credentials file (-storage.s3.credentials-file, else
 * AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials).  The secret is
 * never logged, printed by -help or put in an error message.
 *
 * Errors: 0, SM_ENOTFOUND (no such key), SM_EINVAL (a bad key or range),
 * SM_EAUTH (401/403: wrong keys, clock skew), SM_EUNAVAIL (the store
 * unreachable or answering 5xx after every retry), SM_ETIMEDOUT,
 * SM_ENOMEM, SM_ECLOSED (sm_bucket_cancel), SM_EIO (a local I/O error, or
 * an answer that is not what S3 sends).  err carries the operation, the key and the store's own code
 * ("s3 GET t/1/block: 503 SlowDown after 4 tries").
 *
 * Locking: an sm_bucket is thread-safe; each call is independent (the s3
 * backend's calls run on their thread's httpc handle, so each thread's
 * connections to the store are reused).
 * Blocking: every call blocks for its I/O, bounded by the timeout times
 * the retries plus the backoff.
 */
#ifndef SM_BUCKET_H
#define SM_BUCKET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "sm.h"

#define SM_BUCKET_KEY_MAX 512
#define SM_BUCKET_SEAL_MAGIC "SMSEAL01"   /* a sealed object's first bytes */
#define SM_BUCKET_SEAL_HDR 104            /* its header (bucket_seal.c) */
#define SM_BUCKET_SEAL_ID_AT 8            /* the KEK id in it, NUL-padded */
#define SM_BUCKET_SEAL_ID_MAX 16
#define SM_BUCKET_WHOLE UINT64_MAX

/*
 * Configuration, filled by the -storage.* flags (sm_bucket_flags).  Strings
 * are owned by the flag set; "" means unset.
 */
struct sm_bucket_cfg {
	char *backend;             /* "", "filesystem" or "s3" */
	char *prefix;              /* -storage.prefix: prepended to keys */
	char *fs_dir;              /* -storage.filesystem.dir */
	char *s3_endpoint;         /* host[:port], no scheme */
	char *s3_bucket;
	char *s3_region;
	char *s3_access_key_id;
	char *s3_secret_access_key;
	char *s3_session_token;
	char *s3_credentials_file;
	char *s3_lookup;           /* "auto", "path" or "virtual-hosted" */
	char *s3_ca_path;          /* CA bundle file ("" = the system's) */
	bool s3_insecure;          /* http:// instead of https:// */
	bool s3_skip_verify;       /* accept any certificate (tests only) */
	int64_t s3_timeout_ms;     /* per request */
	int64_t s3_max_retries;    /* tries after the first */
	int64_t s3_list_max_keys;  /* ListObjectsV2 page size; 0 = the
	                            * store's (1000).  No flag: the tests page
	                            * small to reach continuation cheaply */
	char *seal_key_file;       /* -storage.encryption.key-file; "" = none */
	char *s3_sse_type;         /* "", "SSE-S3" or "SSE-KMS" */
	char *s3_sse_kms_key_id;
	char *s3_sse_kms_context;  /* JSON, sent base64 */
};

struct sm_flags;

/*
 * The -storage.* flag table over `c` (docs/operations.md "Object
 * storage"); names follow Pyroscope's where the meaning is the same.
 */
int sm_bucket_flags_add(struct sm_flags *fs, struct sm_bucket_cfg *c,
    struct sm_err *err);

/* Is a bucket configured (backend not "")? */
bool sm_bucket_cfg_enabled(const struct sm_bucket_cfg *c);

/* One listed object. */
struct sm_bucket_obj {
	const char *key;           /* without -storage.prefix */
	uint64_t size;
};

struct sm_bucket;

/*
 * The backend's operations (bucket_fs.c, bucket_s3.c).  Keys here are
 * full keys (prefix included) and already checked.  get appends to out.
 * list calls fn for every key starting with `prefix` in byte order; fn's
 * non-zero return stops it and is returned.
 */
struct sm_bucket_ops {
	const char *name;
	int (*put)(struct sm_bucket *b, const char *key, const void *p,
	    size_t n, struct sm_err *err);
	int (*get)(struct sm_bucket *b, const char *key, uint64_t off,
	    uint64_t len, struct sm_buf *out, struct sm_err *err);
	int (*stat)(struct sm_bucket *b, const char *key, uint64_t *size,
	    struct sm_err *err);
	int (*del)(struct sm_bucket *b, const char *key, struct sm_err *err);
	int (*list)(struct sm_bucket *b, const char *prefix,
	    int (*fn)(void *arg, const struct sm_bucket_obj *o), void *arg,
	    struct sm_err *err);
	void (*destroy)(struct sm_bucket *b);
};

/* The common head of every backend's handle. */
struct sm_bucket {
	const struct sm_bucket_ops *ops;
	char *prefix;              /* "" or "x/" (with its slash) */
	char *desc;                /* "s3 http://host:port/bucket", no secret */
	atomic_bool cancelled;     /* sm_bucket_cancel: backends poll it */
	struct sm_bucket *inner;   /* the wrapped store (sealed); else NULL */
};

/*
 * Open the bucket `c` describes.  `data_dir` roots a relative
 * -storage.filesystem.dir (an empty one means <data_dir>/bucket).  The
 * filesystem backend creates its directory; the s3 one checks its
 * configuration only (sm_bucket_probe talks to it).  Returns 0,
 * SM_EINVAL (bad configuration, said in err), SM_EIO or SM_ENOMEM.
 * Ownership: *out is the caller's, freed by sm_bucket_destroy.
 */
int sm_bucket_open(const struct sm_bucket_cfg *c, const char *data_dir,
    struct sm_bucket **out, struct sm_err *err);
void sm_bucket_destroy(struct sm_bucket *b);

/*
 * Shutdown: every call in flight ends soon (the s3 backend aborts its
 * transfer and its backoff within about 100 ms) and every later call
 * fails at once, all with SM_ECLOSED, so a process whose store hangs
 * still stops promptly (a shipper's upload simply stays pending).
 * Irreversible; safe from any thread.
 */
void sm_bucket_cancel(struct sm_bucket *b);

/* A one-line description for logs and /status, never with a secret. */
const char *sm_bucket_desc(const struct sm_bucket *b);

/* Is `key` a valid key (above)? */
bool sm_bucket_key_ok(const char *key);

/*
 * The operations (contracts above, "What the interface promises").  A
 * key that fails sm_bucket_key_ok is SM_EINVAL before any I/O.
 */
int sm_bucket_put(struct sm_bucket *b, const char *key, const void *p,
    size_t n, struct sm_err *err);
int sm_bucket_get(struct sm_bucket *b, const char *key, uint64_t off,
    uint64_t len, struct sm_buf *out, struct sm_err *err);
int sm_bucket_stat(struct sm_bucket *b, const char *key, uint64_t *size,
    struct sm_err *err);
int sm_bucket_delete(struct sm_bucket *b, const char *key,
    struct sm_err *err);
int sm_bucket_list(struct sm_bucket *b, const char *prefix,
    int (*fn)(void *arg, const struct sm_bucket_obj *o), void *arg,
    struct sm_err *err);

/*
 * Which key-encryption key sealed `key` (bucket_seal.c): its id into `id`
 * (NUL-terminated), or "" for an object that is not sealed.  Reads the
 * header as stored, so it needs no key file (smolder-admin bucket keys:
 * when may an old KEK leave the file?).  0, SM_ENOTFOUND, or the store's
 * error.
 */
int sm_bucket_sealed_by(struct sm_bucket *b, const char *key,
    char id[SM_BUCKET_SEAL_ID_MAX + 1], struct sm_err *err);

/*
 * Is the store there and are the keys right?  A list of one page under
 * the prefix: 0, SM_EAUTH, SM_EUNAVAIL, SM_ETIMEDOUT, SM_ENOTFOUND (no
 * such bucket).
 */
int sm_bucket_probe(struct sm_bucket *b, struct sm_err *err);

/* Backend constructors (bucket.c calls them; the s3 one resolves the
 * credentials and the region as above). */
int sm_bucket_fs_open(const char *dir, struct sm_bucket **out,
    struct sm_err *err);
int sm_bucket_s3_open(const struct sm_bucket_cfg *c, struct sm_bucket **out,
    struct sm_err *err);

/*
 * Wrap `in` (which the result then owns) so every object is sealed
 * (bucket_seal.c): keys from `key_file`; full keys start with
 * `prefix_len` bytes of -storage.prefix.  0, or SM_EINVAL (the key file
 * unreadable or wrong, said in err; `in` is not taken) / SM_ENOMEM.
 */
int sm_bucket_seal_open(struct sm_bucket *in, const char *key_file,
    size_t prefix_len, struct sm_bucket **out, struct sm_err *err);

#endif /* SM_BUCKET_H */
