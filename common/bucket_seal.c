/*
 * bucket_seal.c -- encryption at rest for the bucket (bucket.h, "Sealed
 * objects"): a backend that wraps another, seals every object it puts and
 * opens every sealed object it gets, so callers see plaintext and the
 * store sees only ciphertext.
 *
 * Envelope encryption.  Each object gets a data key (DEK) of its own,
 * random; the DEK is sealed with a key-encryption key (KEK) from the key
 * file and stored in the object's header.  Rotating a KEK (a new line at
 * the top of the file) changes which KEK seals new objects; old objects
 * keep the KEK that sealed them and open as long as the file still lists
 * it, so a rotation rewrites no data.  Objects leave the bucket by the
 * compactor's folds (raw blocks, within hours) and by retention (folds
 * and tiers); an old KEK's line can go once no object is left under it
 * (smolder-admin bucket keys counts them; sm_bucket_sealed_by).
 *
 * Object format, version 1 (all integers big-endian):
 *
 *   0    8  magic "SMSEAL01"
 *   8   16  KEK id, NUL-padded
 *   24  12  nonce of the DEK's seal
 *   36  48  the DEK (32 bytes) sealed with the KEK (AES-256-GCM, its tag
 *           appended); additional data: bytes [0, 36) and [84, 104) of
 *           this header and the object's full key, so a header moved to
 *           another key, or altered, does not open
 *   84   4  chunk size C (65,536)
 *   88   8  plaintext length P
 *   96   8  chunk nonce prefix (random)
 *   104     the chunks: chunk i is min(C, P - i*C) bytes of plaintext
 *           sealed with the DEK under the nonce prefix || be32 i, each
 *           followed by its 16-byte tag
 *
 * so the stored size is 104 + P + 16 * ceil(P / C), and plaintext bytes
 * [off, off + len) are in the chunks off / C .. (off + len - 1) / C: a
 * ranged get reads those chunks only (plus the header, once per object:
 * below).  The chunk index in the nonce keeps chunks from being
 * reordered; P in the authenticated header keeps the object from being
 * cut short at a chunk boundary.
 *
 * Headers are cached (SEAL_CACHE slots by key hash, each holding a copy
 * of the key, P, the nonce prefix and the DEK): a block object is read by
 * ranged gets of its footer, its table and its parts, and the header is
 * fetched for the first of them only.  A whole-object get reads header
 * and chunks in one request.  An object overwritten under the same key
 * (the bucket index) fails to open with a cached header; the header is
 * then fetched again, once.
 *
 * Objects that are not sealed (written before the key file was given)
 * are served as they are, so sealing can be switched on for a bucket that
 * has history; they stay plaintext until the compactor or retention
 * replaces them.  A sealed object whose KEK id the file does not list is
 * SM_EAUTH naming the id; one whose header or chunk fails its tag is
 * SM_ECORRUPT.  list reports stored sizes; stat the plaintext size (it
 * reads the header).
 *
 * The key file: one KEK per line, "<id> <64 hex digits> [<tenant>]", '#'
 * comments and blank lines ignored; ids are 1..16 bytes of
 * [A-Za-z0-9._-] and unique.  A line naming a tenant (its key segment,
 * as the bucket shows it) seals that tenant's objects only: per-tenant
 * KEKs, so a tenant's history can be made unreadable by deleting its
 * lines (crypto-shredding).  The first line without a tenant seals every
 * other object and must exist.  The file is read again when it changes
 * (common/watch.h: polled every second, read once it has settled); a
 * file that fails to parse keeps the previous keys and is logged.  Key
 * bytes are wiped when retired.
 *
 * Locking: the keys are swapped under `mu` and used under it (seal and
 * open of a DEK copy the KEK out first); the header cache has its own
 * mutex.  Chunks are sealed and opened outside every lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "bucket.h"
#include "hash.h"
#include "kv.h"
#include "log.h"
#include "metrics.h"
#include "tls.h"
#include "watch.h"

#define SEAL_MAGIC SM_BUCKET_SEAL_MAGIC
#define SEAL_HDR SM_BUCKET_SEAL_HDR
#define SEAL_ID SM_BUCKET_SEAL_ID_MAX
#define SEAL_CHUNK 65536u
#define SEAL_CACHE 1024
#define SEAL_RELOAD_MS 1000

struct seal_kek {
	char id[SEAL_ID + 1];
	char tenant[SM_BUCKET_KEY_MAX + 1];   /* "" = every other object */
	uint8_t key[SM_AEAD_KEY];
};

struct seal_keys {
	struct seal_kek *v;
	size_t n;
};

/* What a header says, once opened. */
struct seal_hdr {
	uint64_t plen;
	uint8_t prefix[8];
	uint8_t dek[SM_AEAD_KEY];
	bool plain;                /* not a sealed object */
};

struct seal_slot {
	char *key;                 /* full key; NULL = empty */
	struct seal_hdr h;
};

struct seal_bucket {
	struct sm_bucket b;        /* first: bucket.h's common head */
	struct sm_bucket *in;      /* the store */
	size_t prefix_len;         /* of -storage.prefix in full keys */
	char *path;

	pthread_mutex_t mu;        /* keys, the file's identity */
	struct seal_keys keys;
	struct sm_watch *watch;    /* re-reads the key file (watch.h) */

	pthread_mutex_t cmu;       /* the header cache */
	struct seal_slot cache[SEAL_CACHE];
};

static struct sm_metric *m_hdr_gets, *m_sealed, *m_opened;

static const struct sm_metric_def metric_defs[] = {
	{ &m_hdr_gets, SM_METRIC_COUNTER,
	    "smolder_bucket_seal_header_fetches_total", "Ranged GETs of a "
	    "sealed object's header (once per object, then cached): the "
	    "requests encryption at rest adds.", NULL, NULL, 0 },
	{ &m_sealed, SM_METRIC_COUNTER, "smolder_bucket_sealed_bytes_total",
	    "Plaintext bytes sealed (encrypted) into the bucket.", NULL,
	    NULL, 0 },
	{ &m_opened, SM_METRIC_COUNTER, "smolder_bucket_opened_bytes_total",
	    "Plaintext bytes opened (decrypted) from the bucket.", NULL,
	    NULL, 0 },
};

static struct sm_metric_set metric_set = SM_METRIC_SET(metric_defs);

static void
keys_wipe(struct seal_keys *k)
{
	if (k->v != NULL)
		explicit_bzero(k->v, k->n * sizeof(*k->v));
	sm_free(k->v);
	k->v = NULL;
	k->n = 0;
}

static bool
id_char_ok(char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-');
}

/* One line's fields into k; 0 or SM_EINVAL naming what is wrong. */
static int
parse_line(char *line, struct seal_kek *k, struct sm_err *err)
{
	char *f[4], *save = NULL;
	size_t nf = 0, n;

	for (char *t = strtok_r(line, " \t", &save); t != NULL && nf < 4;
	    t = strtok_r(NULL, " \t", &save))
		f[nf++] = t;
	if (nf < 2 || nf > 3)
		return (sm_err_set(err, SM_EINVAL, "want '<id> <64 hex "
		    "digits> [<tenant>]', found %zu fields", nf));
	n = strlen(f[0]);
	for (size_t i = 0; i < n; i++)
		if (!id_char_ok(f[0][i]))
			n = 0;
	if (n == 0 || n > SEAL_ID)
		return (sm_err_set(err, SM_EINVAL, "key id '%.20s': want 1 to "
		    "16 of [A-Za-z0-9._-]", f[0]));
	if (strlen(f[1]) != 2 * SM_AEAD_KEY ||
	    !sm_hex_decode(f[1], SM_AEAD_KEY, k->key))
		return (sm_err_set(err, SM_EINVAL, "key '%s': want 64 hex "
		    "digits (32 bytes, e.g. from `openssl rand -hex 32`)",
		    f[0]));
	if (nf == 3 && (strchr(f[2], '/') != NULL ||
	    !sm_bucket_key_ok(f[2])))
		return (sm_err_set(err, SM_EINVAL, "key '%s': tenant '%.64s' "
		    "is not a key segment", f[0], f[2]));
	memcpy(k->id, f[0], n + 1);
	snprintf(k->tenant, sizeof(k->tenant), "%s", nf == 3 ? f[2] : "");
	return (0);
}

/* Parse the key file's text (NUL-terminated, modified in place). */
static int
parse_keys(char *text, struct seal_keys *out, struct sm_err *err)
{
	struct seal_keys k = { NULL, 0 };
	size_t cap = 0, lineno = 0;
	bool dflt = false;
	char *save = NULL;
	int rv = 0;

	for (char *l = strtok_r(text, "\n", &save); l != NULL;
	    l = strtok_r(NULL, "\n", &save)) {
		char *c = strchr(l, '#'), *p = l;

		lineno++;
		if (c != NULL)
			*c = '\0';
		p += strspn(p, " \t\r");
		p[strcspn(p, "\r")] = '\0';
		if (*p == '\0')
			continue;
		if (k.n == cap) {
			struct seal_kek *v = sm_calloc(cap ? 2 * cap : 8,
			    sizeof(*v));

			if (v == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "out of memory");
				goto out;
			}
			if (k.n > 0)
				memcpy(v, k.v, k.n * sizeof(*v));
			keys_wipe(&(struct seal_keys){ k.v, k.n });
			k.v = v;
			cap = cap ? 2 * cap : 8;
		}
		if ((rv = parse_line(p, &k.v[k.n], err)) != 0) {
			sm_err_prefix(err, "line %zu", lineno);
			goto out;
		}
		for (size_t i = 0; i < k.n; i++)
			if (strcmp(k.v[i].id, k.v[k.n].id) == 0) {
				rv = sm_err_set(err, SM_EINVAL, "line %zu: key "
				    "id '%s' listed twice", lineno,
				    k.v[k.n].id);
				goto out;
			}
		dflt |= k.v[k.n].tenant[0] == '\0';
		k.n++;
	}
	if (!dflt)
		rv = sm_err_set(err, SM_EINVAL, "no key without a tenant "
		    "(the one that seals every other object)");
out:
	if (rv != 0) {
		keys_wipe(&k);
		return (rv);
	}
	*out = k;
	return (0);
}

static int
load_keys(const char *path, struct seal_keys *out, struct stat *st,
    struct sm_err *err)
{
	char *text = NULL;
	FILE *f;
	size_t n;
	int rv;

	if ((f = fopen(path, "re")) == NULL)
		return (sm_err_set(err, SM_EINVAL, "%s: %s", path,
		    strerror(errno)));
	if (fstat(fileno(f), st) != 0 || st->st_size > (1 << 20)) {
		fclose(f);
		return (sm_err_set(err, SM_EINVAL, "%s: not a key file of "
		    "at most 1 MiB", path));
	}
	if ((st->st_mode & 077) != 0)
		sm_warn("bucket", "key file %s is readable by group or "
		    "others (chmod 600 it)", path);
	if ((text = sm_calloc(1, (size_t)st->st_size + 1)) == NULL) {
		fclose(f);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	n = fread(text, 1, (size_t)st->st_size, f);
	fclose(f);
	text[n] = '\0';
	rv = parse_keys(text, out, err);
	explicit_bzero(text, (size_t)st->st_size + 1);
	sm_free(text);
	if (rv != 0)
		sm_err_prefix(err, "%s", path);
	return (rv);
}

/* The watch's load function (watch.h): read the file, swap the keys. */
static int
keys_load(void *arg, const char *path, struct sm_err *err)
{
	struct seal_bucket *s = arg;
	struct seal_keys k, old;
	struct stat st;
	int rv;

	if ((rv = load_keys(path, &k, &st, err)) != 0)
		return (rv);
	pthread_mutex_lock(&s->mu);
	old = s->keys;
	s->keys = k;
	pthread_mutex_unlock(&s->mu);
	keys_wipe(&old);
	sm_info("bucket", "key file %s read: %zu keys", path, k.n);
	return (0);
}

/* The tenant segment of a full key: after the prefix, before '/'. */
static void
key_tenant(const struct seal_bucket *s, const char *key, const char **t,
    size_t *n)
{
	const char *p = key + s->prefix_len, *slash = strchr(p, '/');

	*t = p;
	*n = slash != NULL ? (size_t)(slash - p) : 0;
}

/* The KEK that seals `key` (copied out, under mu). */
static void
kek_for_seal(struct seal_bucket *s, const char *key, struct seal_kek *out)
{
	const struct seal_kek *dflt = NULL, *hit = NULL;
	const char *t;
	size_t tn;

	key_tenant(s, key, &t, &tn);
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->keys.n && hit == NULL; i++) {
		const struct seal_kek *k = &s->keys.v[i];

		if (k->tenant[0] == '\0') {
			if (dflt == NULL)
				dflt = k;
		} else if (tn > 0 && strlen(k->tenant) == tn &&
		    memcmp(k->tenant, t, tn) == 0) {
			hit = k;
		}
	}
	*out = hit != NULL ? *hit : *dflt;   /* parse_keys: one default */
	pthread_mutex_unlock(&s->mu);
}

static bool
kek_by_id(struct seal_bucket *s, const char *id, struct seal_kek *out)
{
	bool found = false;

	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->keys.n && !found; i++)
		if (strcmp(s->keys.v[i].id, id) == 0) {
			*out = s->keys.v[i];
			found = true;
		}
	pthread_mutex_unlock(&s->mu);
	return (found);
}

/* The additional data of a header's DEK seal. */
static void
hdr_aad(const uint8_t *hdr, const char *key, struct sm_buf *b)
{
	sm_buf_append(b, hdr, 36);
	sm_buf_append(b, hdr + 84, SEAL_HDR - 84);
	sm_buf_puts(b, key);
}

static void
chunk_nonce(const uint8_t prefix[8], uint64_t i, uint8_t nonce[12])
{
	memcpy(nonce, prefix, 8);
	sm_put_be32(nonce + 8, (uint32_t)i);
}

static uint64_t
chunks_of(uint64_t plen)
{
	return ((plen + SEAL_CHUNK - 1) / SEAL_CHUNK);
}

/* --- header cache --------------------------------------------------------- */

static struct seal_slot *
slot_of(struct seal_bucket *s, const char *key)
{
	return (&s->cache[sm_hash(key, strlen(key)) % SEAL_CACHE]);
}

static bool
cache_get(struct seal_bucket *s, const char *key, struct seal_hdr *h)
{
	struct seal_slot *sl = slot_of(s, key);
	bool hit;

	pthread_mutex_lock(&s->cmu);
	if ((hit = sl->key != NULL && strcmp(sl->key, key) == 0))
		*h = sl->h;
	pthread_mutex_unlock(&s->cmu);
	return (hit);
}

static void
cache_put(struct seal_bucket *s, const char *key, const struct seal_hdr *h)
{
	struct seal_slot *sl = slot_of(s, key);
	char *k = sm_strdup(key), *old;

	if (k == NULL)
		return;                 /* only the cache is lost */
	pthread_mutex_lock(&s->cmu);
	old = sl->key;
	sl->key = k;
	sl->h = *h;
	pthread_mutex_unlock(&s->cmu);
	sm_free(old);
}

static void
cache_drop(struct seal_bucket *s, const char *key)
{
	struct seal_slot *sl = slot_of(s, key);
	char *old = NULL;

	pthread_mutex_lock(&s->cmu);
	if (sl->key != NULL && strcmp(sl->key, key) == 0) {
		old = sl->key;
		sl->key = NULL;
		explicit_bzero(&sl->h, sizeof(sl->h));
	}
	pthread_mutex_unlock(&s->cmu);
	sm_free(old);
}

/* --- put ------------------------------------------------------------------ */

static int
seal_put(struct sm_bucket *b, const char *key, const void *p, size_t n,
    struct sm_err *err)
{
	struct seal_bucket *s = (struct seal_bucket *)b;
	uint64_t nch = chunks_of(n), total = SEAL_HDR + n + nch * SM_AEAD_TAG;
	uint8_t dek[SM_AEAD_KEY], nonce[SM_AEAD_NONCE], *o;
	struct sm_buf aad = SM_BUF_INIT;
	struct sm_aead *kh = NULL, *dh = NULL;
	struct seal_kek kek;
	int rv;

	if ((o = sm_malloc(total)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "bucket put %s: out of "
		    "memory for %llu sealed bytes", key,
		    (unsigned long long)total));
	kek_for_seal(s, key, &kek);
	memset(o, 0, SEAL_HDR);
	memcpy(o, SEAL_MAGIC, 8);
	memcpy(o + 8, kek.id, strlen(kek.id));
	sm_put_be32(o + 84, SEAL_CHUNK);
	sm_put_be64(o + 88, n);
	if (sm_random_key(dek, sizeof(dek)) != 0 ||
	    sm_random_nonce(o + 24, SM_AEAD_NONCE) != 0 ||
	    sm_random_nonce(o + 96, 8) != 0) {
		rv = sm_err_set(err, SM_EINTERNAL, "bucket put %s: the "
		    "random source failed", key);
		goto out;
	}
	hdr_aad(o, key, &aad);
	if ((rv = sm_aead_new(kek.key, &kh, err)) != 0 ||
	    (rv = sm_aead_new(dek, &dh, err)) != 0)
		goto out;
	if (sm_buf_error(&aad) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if (sm_aead_seal(kh, o + 24, aad.b, aad.len, dek, sizeof(dek),
	    o + 36) != 0) {
		rv = sm_err_set(err, SM_EINTERNAL, "bucket put %s: sealing "
		    "the data key failed", key);
		goto out;
	}
	for (uint64_t i = 0; i < nch; i++) {
		uint64_t off = i * SEAL_CHUNK, len = SM_MIN(SEAL_CHUNK, n - off);

		chunk_nonce(o + 96, i, nonce);
		if (sm_aead_seal(dh, nonce, NULL, 0, (const uint8_t *)p + off,
		    len, o + SEAL_HDR + off + i * SM_AEAD_TAG) != 0) {
			rv = sm_err_set(err, SM_EINTERNAL, "bucket put %s: "
			    "sealing chunk %llu failed", key,
			    (unsigned long long)i);
			goto out;
		}
	}
	cache_drop(s, key);
	rv = s->in->ops->put(s->in, key, o, total, err);
	if (rv == 0)
		sm_counter_add(sm_metric_child0(m_sealed), n);
out:
	explicit_bzero(dek, sizeof(dek));
	explicit_bzero(&kek, sizeof(kek));
	sm_aead_free(kh);
	sm_aead_free(dh);
	sm_buf_fini(&aad);
	sm_free(o);
	return (rv);
}

/* --- get ------------------------------------------------------------------ */

/*
 * Open a header (SEAL_HDR bytes at p) of `key` into h.  0; SM_EAUTH (its
 * KEK is not in the file); SM_ECORRUPT (it fails its tag or its fields).
 */
static int
hdr_open(struct seal_bucket *s, const char *key, const uint8_t *p,
    struct seal_hdr *h, struct sm_err *err)
{
	struct sm_buf aad = SM_BUF_INIT;
	struct sm_aead *kh = NULL;
	struct seal_kek kek;
	char id[SEAL_ID + 1];
	int rv;

	memcpy(id, p + 8, SEAL_ID);
	id[SEAL_ID] = '\0';
	if (sm_get_be32(p + 84) != SEAL_CHUNK)
		return (sm_err_set(err, SM_ECORRUPT, "bucket get %s: sealed "
		    "with chunks of %u bytes, not %u", key,
		    sm_get_be32(p + 84), SEAL_CHUNK));
	if (!kek_by_id(s, id, &kek))
		return (sm_err_set(err, SM_EAUTH, "bucket get %s: sealed by "
		    "key '%.16s', which the key file does not list", key, id));
	hdr_aad(p, key, &aad);
	if (sm_buf_error(&aad) != 0)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	else if ((rv = sm_aead_new(kek.key, &kh, err)) == 0 &&
	    sm_aead_open(kh, p + 24, aad.b, aad.len, p + 36,
	    SM_AEAD_KEY + SM_AEAD_TAG, h->dek) != 0)
		rv = sm_err_set(err, SM_ECORRUPT, "bucket get %s: the header "
		    "does not open with key '%s' (altered, or moved from "
		    "another key)", key, id);
	h->plen = sm_get_be64(p + 88);
	memcpy(h->prefix, p + 96, 8);
	h->plain = false;
	explicit_bzero(&kek, sizeof(kek));
	sm_aead_free(kh);
	sm_buf_fini(&aad);
	return (rv);
}

static bool
is_sealed(const uint8_t *p, size_t n)
{
	return (n >= SEAL_HDR && memcmp(p, SEAL_MAGIC, 8) == 0);
}

/*
 * Open chunks [c0, c1] (their stored bytes at p, n of them) of an object
 * with header h and append plaintext [off, off + len) to out.
 */
static int
chunks_open(const struct seal_hdr *h, const char *key, uint64_t c0,
    uint64_t c1, const uint8_t *p, size_t n, uint64_t off, uint64_t len,
    struct sm_buf *out, struct sm_err *err)
{
	uint8_t nonce[SM_AEAD_NONCE], *plain = NULL;
	struct sm_aead *dh = NULL;
	size_t at = 0;
	int rv;

	if ((rv = sm_aead_new(h->dek, &dh, err)) != 0)
		return (rv);
	if ((plain = sm_malloc(SEAL_CHUNK)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint64_t i = c0; i <= c1; i++) {
		uint64_t po = i * SEAL_CHUNK, pl = SM_MIN(SEAL_CHUNK,
		    h->plen - po), lo, hi;

		if (at + pl + SM_AEAD_TAG > n) {
			rv = sm_err_set(err, SM_ECORRUPT, "bucket get %s: "
			    "sealed object shorter than its header says", key);
			goto out;
		}
		chunk_nonce(h->prefix, i, nonce);
		if (sm_aead_open(dh, nonce, NULL, 0, p + at,
		    pl + SM_AEAD_TAG, plain) != 0) {
			rv = sm_err_set(err, SM_ECORRUPT, "bucket get %s: "
			    "chunk %llu fails its tag (altered bytes)", key,
			    (unsigned long long)i);
			goto out;
		}
		at += pl + SM_AEAD_TAG;
		lo = SM_MAX(off, po) - po;
		hi = SM_MIN(off + len, po + pl) - po;
		sm_buf_append(out, plain + lo, hi - lo);
	}
	if (sm_buf_error(out) != 0)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	else
		sm_counter_add(sm_metric_child0(m_opened), len);
out:
	sm_aead_free(dh);
	sm_free(plain);
	return (rv);
}

/* A whole object in one request: sealed or not. */
static int
get_whole(struct seal_bucket *s, const char *key, struct sm_buf *out,
    struct sm_err *err)
{
	struct sm_buf raw = SM_BUF_INIT;
	struct seal_hdr h;
	int rv;

	if ((rv = s->in->ops->get(s->in, key, 0, SM_BUCKET_WHOLE, &raw,
	    err)) != 0)
		goto out;
	if (!is_sealed((const uint8_t *)raw.b, raw.len)) {
		sm_buf_append(out, raw.b, raw.len);
		if (sm_buf_error(out) != 0)
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if ((rv = hdr_open(s, key, (const uint8_t *)raw.b, &h, err)) != 0)
		goto out;
	if (h.plen > 0)
		rv = chunks_open(&h, key, 0, (h.plen - 1) / SEAL_CHUNK,
		    (const uint8_t *)raw.b + SEAL_HDR, raw.len - SEAL_HDR, 0,
		    h.plen, out, err);
	if (rv == 0 && raw.len != SEAL_HDR + h.plen + chunks_of(h.plen) *
	    SM_AEAD_TAG)
		rv = sm_err_set(err, SM_ECORRUPT, "bucket get %s: %zu stored "
		    "bytes, the header says %llu", key, raw.len,
		    (unsigned long long)(SEAL_HDR + h.plen +
		    chunks_of(h.plen) * SM_AEAD_TAG));
	explicit_bzero(&h, sizeof(h));
out:
	sm_buf_fini(&raw);
	return (rv);
}

/* The header of `key`: cached, or fetched (a plain object says so). */
static int
hdr_fetch(struct seal_bucket *s, const char *key, struct seal_hdr *h,
    struct sm_err *err)
{
	struct sm_buf raw = SM_BUF_INIT;
	int rv;

	if (cache_get(s, key, h))
		return (0);
	sm_counter_inc(sm_metric_child0(m_hdr_gets));
	rv = s->in->ops->get(s->in, key, 0, SEAL_HDR, &raw, err);
	if (rv == SM_EINVAL || (rv == 0 && !is_sealed((const uint8_t *)raw.b,
	    raw.len))) {
		/* shorter than a header, or not sealed: plaintext */
		memset(h, 0, sizeof(*h));
		h->plain = true;
		sm_err_clear(err);
		rv = 0;
	} else if (rv == 0) {
		rv = hdr_open(s, key, (const uint8_t *)raw.b, h, err);
	}
	if (rv == 0)
		cache_put(s, key, h);
	sm_buf_fini(&raw);
	return (rv);
}

static int
get_range(struct seal_bucket *s, const char *key, uint64_t off,
    uint64_t len, struct sm_buf *out, struct sm_err *err)
{
	struct sm_buf raw = SM_BUF_INIT;
	uint64_t c0, c1, lo, hi;
	struct seal_hdr h;
	int rv;

	if ((rv = hdr_fetch(s, key, &h, err)) != 0)
		return (rv);
	if (h.plain)
		return (s->in->ops->get(s->in, key, off, len, out, err));
	if (len == SM_BUCKET_WHOLE)
		len = off <= h.plen ? h.plen - off : 0;
	if (off > h.plen || len > h.plen - off) {
		rv = sm_err_set(err, SM_EINVAL, "bucket get %s: range [%llu, "
		    "+%llu) past the end (%llu bytes)", key,
		    (unsigned long long)off, (unsigned long long)len,
		    (unsigned long long)h.plen);
		goto out;
	}
	if (len == 0)
		goto out;
	c0 = off / SEAL_CHUNK;
	c1 = (off + len - 1) / SEAL_CHUNK;
	lo = SEAL_HDR + c0 * (SEAL_CHUNK + SM_AEAD_TAG);
	hi = SEAL_HDR + c1 * (SEAL_CHUNK + SM_AEAD_TAG) +
	    SM_MIN(SEAL_CHUNK, h.plen - c1 * SEAL_CHUNK) + SM_AEAD_TAG;
	if ((rv = s->in->ops->get(s->in, key, lo, hi - lo, &raw, err)) == 0)
		rv = chunks_open(&h, key, c0, c1, (const uint8_t *)raw.b,
		    raw.len, off, len, out, err);
out:
	explicit_bzero(&h, sizeof(h));
	sm_buf_fini(&raw);
	return (rv);
}

static int
seal_get(struct sm_bucket *b, const char *key, uint64_t off, uint64_t len,
    struct sm_buf *out, struct sm_err *err)
{
	struct seal_bucket *s = (struct seal_bucket *)b;
	size_t mark = out->len;
	int rv;

	if (off == 0 && len == SM_BUCKET_WHOLE)
		return (get_whole(s, key, out, err));
	rv = get_range(s, key, off, len, out, err);
	if (rv == SM_ECORRUPT || rv == SM_EINVAL) {
		/* perhaps overwritten since its header was cached */
		cache_drop(s, key);
		sm_buf_truncate(out, mark);
		sm_err_clear(err);
		rv = get_range(s, key, off, len, out, err);
	}
	return (rv);
}

static int
seal_stat(struct sm_bucket *b, const char *key, uint64_t *size,
    struct sm_err *err)
{
	struct seal_bucket *s = (struct seal_bucket *)b;
	struct seal_hdr h;
	int rv;

	cache_drop(s, key);
	if ((rv = hdr_fetch(s, key, &h, err)) != 0)
		return (rv);
	if (h.plain)
		return (s->in->ops->stat(s->in, key, size, err));
	*size = h.plen;
	explicit_bzero(&h, sizeof(h));
	return (0);
}

static int
seal_del(struct sm_bucket *b, const char *key, struct sm_err *err)
{
	struct seal_bucket *s = (struct seal_bucket *)b;

	cache_drop(s, key);
	return (s->in->ops->del(s->in, key, err));
}

static int
seal_list(struct sm_bucket *b, const char *prefix,
    int (*fn)(void *arg, const struct sm_bucket_obj *o), void *arg,
    struct sm_err *err)
{
	struct seal_bucket *s = (struct seal_bucket *)b;

	return (s->in->ops->list(s->in, prefix, fn, arg, err));
}

static void
seal_destroy(struct sm_bucket *b)
{
	struct seal_bucket *s = (struct seal_bucket *)b;

	for (size_t i = 0; i < SEAL_CACHE; i++)
		sm_free(s->cache[i].key);
	explicit_bzero(s->cache, sizeof(s->cache));
	sm_watch_destroy(s->watch);
	keys_wipe(&s->keys);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->cmu);
	sm_bucket_destroy(s->in);
	sm_free(s->path);
	sm_free(s);
}

static const struct sm_bucket_ops seal_ops = {
	.name = "sealed",
	.put = seal_put,
	.get = seal_get,
	.stat = seal_stat,
	.del = seal_del,
	.list = seal_list,
	.destroy = seal_destroy,
};

int
sm_bucket_seal_open(struct sm_bucket *in, const char *key_file,
    size_t prefix_len, struct sm_bucket **out, struct sm_err *err)
{
	struct seal_bucket *s;
	struct sm_buf d = SM_BUF_INIT;
	int rv;

	*out = NULL;
	sm_metrics_register_once(&metric_set);
	if ((s = sm_calloc(1, sizeof(*s))) == NULL ||
	    (s->path = sm_strdup(key_file)) == NULL) {
		sm_free(s);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->cmu, NULL);
	if ((rv = sm_watch_create(&(struct sm_watch_conf){ .path = key_file,
	    .period_ms = SEAL_RELOAD_MS, .component = "bucket",
	    .what = "key file", .keeping = "keeping the previous keys",
	    .load = keys_load, .arg = s }, &s->watch, err)) != 0) {
		sm_err_prefix(err, "-storage.encryption.key-file");
		if (rv != SM_ENOMEM)    /* missing or unreadable: bucket.h */
			rv = err->code = SM_EINVAL;
		pthread_mutex_destroy(&s->mu);
		pthread_mutex_destroy(&s->cmu);
		sm_free(s->path);
		sm_free(s);
		return (rv);
	}
	s->b.ops = &seal_ops;
	s->b.inner = in;
	s->in = in;
	s->prefix_len = prefix_len;
	sm_buf_printf(&d, "%s, sealed (AES-256-GCM)", sm_bucket_desc(in));
	s->b.desc = sm_buf_error(&d) == 0 ? d.b : NULL;
	if (s->b.desc == NULL)
		sm_buf_fini(&d);
	*out = &s->b;
	return (0);
}
