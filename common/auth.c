/*
 * auth.c -- API keys and tenant resolution; see auth.h for the design.
 *
 * The only file that includes OpenSSL headers (docs/style.md §11).
 */
#include "auth.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "buf.h"
#include "log.h"
#include "tls.h"
#include "watch.h"

#define AUTH_HASH_LEN SM_SHA256_LEN
#define AUTH_LINE_MAX 4096
#define AUTH_FILE_MAX (64u << 20)

struct auth_key {
	unsigned char k_hash[AUTH_HASH_LEN];
	char k_tenant[SM_TENANT_MAX_LEN + 1];
	unsigned k_scopes;
};

/* One loaded file; immutable once built. */
struct auth_tab {
	struct auth_key *t_keys;
	size_t t_n;
};

struct sm_auth {
	bool a_multitenancy;
	char *a_path;                 /* NULL: no keys */

	pthread_rwlock_t a_lock;      /* protects a_tab */
	struct auth_tab *a_tab;

	struct sm_watch *a_watch;     /* reloads a_path (watch.h) */
};

static void
auth_tab_free(struct auth_tab *t)
{
	if (t == NULL)
		return;
	sm_free(t->t_keys);
	sm_free(t);
}

int
sm_auth_hash_key(const char *key, size_t len, char *out, struct sm_err *err)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char h[AUTH_HASH_LEN];
	char *p = out;

	if (len == 0 || len > SM_AUTH_KEY_MAX)
		return (sm_err_set(err, SM_EINVAL, "key must be 1..%d bytes",
		    SM_AUTH_KEY_MAX));
	if (sm_sha256(key, len, h) != 0)
		return (sm_err_set(err, SM_EINTERNAL, "SHA-256 failed"));
	memcpy(p, "sha256:", 7);
	p += 7;
	for (size_t i = 0; i < AUTH_HASH_LEN; i++) {
		*p++ = hex[h[i] >> 4];
		*p++ = hex[h[i] & 15];
	}
	*p = '\0';
	return (0);
}

int
sm_auth_parse_scopes(const char *s, unsigned *out, struct sm_err *err)
{
	unsigned set = 0;
	const char *p = s;

	*out = 0;
	while (*p != '\0') {
		const char *e = strchr(p, ',');
		size_t n = e != NULL ? (size_t)(e - p) : strlen(p);

		if (n == 4 && strncmp(p, "read", 4) == 0)
			set |= SM_SCOPE_READ;
		else if (n == 5 && strncmp(p, "write", 5) == 0)
			set |= SM_SCOPE_WRITE;
		else if (n == 5 && strncmp(p, "admin", 5) == 0)
			set |= SM_SCOPE_ADMIN;
		else
			return (sm_err_set(err, SM_EINVAL, "unknown scope "
			    "\"%.*s\" (want read, write or admin)",
			    (int)SM_MIN(n, 32), p));
		p += n;
		if (*p == ',' && *++p == '\0')
			return (sm_err_set(err, SM_EINVAL, "empty scope after "
			    "','"));
	}
	if (set == 0)
		return (sm_err_set(err, SM_EINVAL, "no scope"));
	*out = set;
	return (0);
}

/* One non-comment line: hash, tenant, scopes. */
static int
auth_parse_line(char *line, struct auth_key *k, struct sm_err *err)
{
	char *f[4], *save = NULL, *tok;
	int nf = 0, rv;

	for (tok = strtok_r(line, " \t", &save); tok != NULL;
	    tok = strtok_r(NULL, " \t", &save)) {
		if (nf == 3)
			return (sm_err_set(err, SM_EINVAL, "too many fields "
			    "(want: sha256:<hex> <tenant> <scopes>)"));
		f[nf++] = tok;
	}
	if (nf != 3)
		return (sm_err_set(err, SM_EINVAL, "want 3 fields: "
		    "sha256:<hex> <tenant> <scopes>"));
	if (strncmp(f[0], "sha256:", 7) != 0 ||
	    strlen(f[0] + 7) != 2 * AUTH_HASH_LEN)
		return (sm_err_set(err, SM_EINVAL, "hash must be sha256: and "
		    "64 hex digits (smolder-admin hash-key prints it)"));
	if (!sm_hex_decode(f[0] + 7, AUTH_HASH_LEN, k->k_hash))
		return (sm_err_set(err, SM_EINVAL, "hash has a non-hex digit"));
	if ((rv = sm_tenant_validate(f[1], err)) != 0)
		return (rv);
	snprintf(k->k_tenant, sizeof(k->k_tenant), "%s", f[1]);
	return (sm_auth_parse_scopes(f[2], &k->k_scopes, err));
}

/* Read and parse the whole file into a new table. */
static int
auth_load(const char *path, struct auth_tab **out, struct sm_err *err)
{
	struct auth_tab *t = NULL;
	char line[AUTH_LINE_MAX];
	size_t cap = 0, lineno = 0;
	FILE *fp;
	int rv = 0;

	*out = NULL;
	if ((fp = fopen(path, "re")) == NULL)
		return (sm_err_set(err, SM_EIO, "keys file %s: %s", path,
		    strerror(errno)));
	if ((t = sm_calloc(1, sizeof(*t))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "keys file: out of memory");
		goto out;
	}
	while (fgets(line, sizeof(line), fp) != NULL) {
		size_t n = strlen(line);
		char *p = line;
		struct auth_key k;

		lineno++;
		if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
			rv = sm_err_set(err, SM_EINVAL, "keys file %s:%zu: "
			    "line too long", path, lineno);
			goto out;
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' ||
		    line[n - 1] == ' ' || line[n - 1] == '\t'))
			line[--n] = '\0';
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0' || *p == '#')
			continue;
		memset(&k, 0, sizeof(k));
		if ((rv = auth_parse_line(p, &k, err)) != 0) {
			sm_err_prefix(err, "keys file %s:%zu", path, lineno);
			goto out;
		}
		for (size_t i = 0; i < t->t_n; i++) {
			if (memcmp(t->t_keys[i].k_hash, k.k_hash,
			    AUTH_HASH_LEN) == 0) {
				rv = sm_err_set(err, SM_EINVAL, "keys file "
				    "%s:%zu: the same key hash appears twice",
				    path, lineno);
				goto out;
			}
		}
		if (SM_GROW(t->t_keys, cap, t->t_n + 1, 16) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "keys file: "
			    "out of memory");
			goto out;
		}
		t->t_keys[t->t_n++] = k;
	}
	if (ferror(fp)) {
		rv = sm_err_set(err, SM_EIO, "keys file %s: read error", path);
		goto out;
	}
	*out = t;
	t = NULL;
out:
	fclose(fp);
	auth_tab_free(t);
	return (rv);
}

/* The watch's load function: read the file, swap the table in. */
static int
auth_load_cb(void *arg, const char *path, struct sm_err *err)
{
	struct sm_auth *a = arg;
	struct auth_tab *t, *old;
	int rv;

	if ((rv = auth_load(path, &t, err)) != 0)
		return (rv);
	pthread_rwlock_wrlock(&a->a_lock);
	old = a->a_tab;
	a->a_tab = t;
	pthread_rwlock_unlock(&a->a_lock);
	auth_tab_free(old);
	sm_info("auth", "keys file loaded\tpath=%s keys=%zu", path, t->t_n);
	return (0);
}

int
sm_auth_reload(struct sm_auth *a, struct sm_err *err)
{
	if (a->a_watch == NULL)
		return (0);
	return (sm_watch_check(a->a_watch, err));
}

int
sm_auth_create(bool multitenancy, const char *keys_file, int64_t reload_ms,
    struct sm_auth **out, struct sm_err *err)
{
	struct sm_auth *a;
	int rv;

	*out = NULL;
	if (keys_file != NULL && keys_file[0] == '\0')
		keys_file = NULL;
	if (keys_file != NULL && !multitenancy)
		return (sm_err_set(err, SM_EINVAL, "-auth.keys-file needs "
		    "-auth.multitenancy-enabled (keys name tenants)"));
	if (keys_file != NULL && reload_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "the keys reload period "
		    "must be > 0"));
	if ((a = sm_calloc(1, sizeof(*a))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "auth: out of memory"));
	a->a_multitenancy = multitenancy;
	pthread_rwlock_init(&a->a_lock, NULL);
	if (keys_file == NULL) {
		*out = a;
		return (0);
	}
	if ((a->a_path = sm_strdup(keys_file)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "auth: out of memory");
		goto fail;
	}
	{
		struct sm_watch_conf wc = {
			.path = keys_file,
			.period_ms = reload_ms,
			.component = "auth",
			.what = "keys file",
			.keeping = "keeping the previous keys",
			.load = auth_load_cb,
			.arg = a,
		};

		if ((rv = sm_watch_create(&wc, &a->a_watch, err)) != 0)
			goto fail;
	}
	*out = a;
	return (0);
fail:
	sm_auth_destroy(a);
	return (rv);
}

void
sm_auth_destroy(struct sm_auth *a)
{
	if (a == NULL)
		return;
	sm_watch_destroy(a->a_watch);
	auth_tab_free(a->a_tab);
	pthread_rwlock_destroy(&a->a_lock);
	sm_free(a->a_path);
	sm_free(a);
}

bool
sm_auth_keys_enabled(const struct sm_auth *a)
{
	return (a->a_path != NULL);
}

bool
sm_auth_header_trusted(const struct sm_auth *a)
{
	return (a->a_path == NULL && a->a_multitenancy);
}

size_t
sm_auth_nkeys(struct sm_auth *a)
{
	size_t n;

	pthread_rwlock_rdlock(&a->a_lock);
	n = a->a_tab != NULL ? a->a_tab->t_n : 0;
	pthread_rwlock_unlock(&a->a_lock);
	return (n);
}

/*
 * The key in an Authorization header: "Bearer <key>" or "Basic
 * base64(user:key)".  Writes the key into buf (NUL-terminated) and its
 * length into *len.
 */
static int
auth_key_from_header(const char *h, char *buf, size_t bufsz, size_t *len,
    struct sm_err *err)
{
	const char *v;
	size_t n;

	while (*h == ' ')
		h++;
	if (strncasecmp(h, "Bearer ", 7) == 0) {
		for (v = h + 7; *v == ' '; v++)
			;
		n = strlen(v);
		while (n > 0 && v[n - 1] == ' ')
			n--;
		if (n == 0 || n > SM_AUTH_KEY_MAX || n >= bufsz)
			return (sm_err_set(err, SM_EAUTH, "invalid bearer "
			    "token"));
		memcpy(buf, v, n);
		buf[n] = '\0';
		*len = n;
		return (0);
	}
	if (strncasecmp(h, "Basic ", 6) == 0) {
		struct sm_buf dec;
		const char *colon;
		int rv = SM_EAUTH;

		for (v = h + 6; *v == ' '; v++)
			;
		n = strlen(v);
		while (n > 0 && v[n - 1] == ' ')
			n--;
		if (n == 0 || n % 4 != 0 || n / 4 * 3 > SM_AUTH_KEY_MAX + 256)
			return (sm_err_set(err, SM_EAUTH, "invalid basic "
			    "auth credentials"));
		for (size_t i = 0; i < n; i++) {
			char c = v[i];

			if (c == '=' && i + 2 >= n)
				continue;
			if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			    (c >= '0' && c <= '9') || c == '+' || c == '/'))
				return (sm_err_set(err, SM_EAUTH, "invalid "
				    "basic auth credentials"));
		}
		/* Reserved whole first, so the decoded secret is never left
		 * behind in a buffer a growth freed; wiped before it is. */
		sm_buf_init(&dec);
		if (sm_buf_reserve(&dec, n / 4 * 3) != 0)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		if (sm_buf_put_unbase64(&dec, v, n) != 0)
			(void)sm_err_set(err, SM_EAUTH, "invalid basic auth "
			    "credentials");
		else if ((colon = memchr(dec.b, ':', dec.len)) == NULL)
			(void)sm_err_set(err, SM_EAUTH, "invalid basic auth "
			    "credentials: no ':'");
		else if ((n = dec.len - (size_t)(colon + 1 - dec.b)) == 0 ||
		    n > SM_AUTH_KEY_MAX || n >= bufsz)
			(void)sm_err_set(err, SM_EAUTH, "invalid basic auth "
			    "credentials: empty password");
		else {
			memcpy(buf, colon + 1, n);
			buf[n] = '\0';
			*len = n;
			rv = 0;
		}
		sm_wipe(dec.b, dec.cap);
		sm_buf_fini(&dec);
		return (rv);
	}
	return (sm_err_set(err, SM_EAUTH, "unsupported authorization "
	    "scheme (use Bearer or Basic)"));
}

static int
auth_check_key(struct sm_auth *a, unsigned scope, const char *authz,
    struct sm_auth_id *id, struct sm_err *err)
{
	char key[SM_AUTH_KEY_MAX + 1];
	unsigned char h[AUTH_HASH_LEN];
	const struct auth_key *hit = NULL;
	size_t klen = 0;
	int rv;

	if (authz == NULL || authz[0] == '\0')
		return (sm_err_set(err, SM_EAUTH, "missing API key "
		    "(Authorization: Bearer <key>, or basic auth with the "
		    "key as password)"));
	if ((rv = auth_key_from_header(authz, key, sizeof(key), &klen,
	    err)) != 0)
		return (rv);
	rv = sm_sha256(key, klen, h);
	sm_wipe(key, sizeof(key));
	if (rv != 0)
		return (sm_err_set(err, SM_EINTERNAL, "SHA-256 failed"));
	pthread_rwlock_rdlock(&a->a_lock);
	if (a->a_tab != NULL) {
		/* Every entry is compared; no early exit (auth.h). */
		for (size_t i = 0; i < a->a_tab->t_n; i++) {
			const struct auth_key *k = &a->a_tab->t_keys[i];

			if (sm_memeq_ct(k->k_hash, h, AUTH_HASH_LEN))
				hit = k;
		}
	}
	if (hit != NULL) {
		memcpy(id->tenant, hit->k_tenant, sizeof(id->tenant));
		id->scopes = hit->k_scopes;
		id->by_key = true;
	}
	pthread_rwlock_unlock(&a->a_lock);
	if (hit == NULL)
		return (sm_err_set(err, SM_EAUTH, "invalid API key"));
	if ((id->scopes & scope) == 0)
		return (sm_err_set(err, SM_EFORBIDDEN, "the API key lacks the "
		    "%s scope", scope == SM_SCOPE_READ ? "read" :
		    scope == SM_SCOPE_WRITE ? "write" : "admin"));
	return (0);
}

int
sm_auth_check(struct sm_auth *a, unsigned scope, const char *authz,
    const char *org, unsigned norg, struct sm_auth_id *id,
    struct sm_err *err)
{
	int rv;

	SM_ASSERT(scope == SM_SCOPE_READ || scope == SM_SCOPE_WRITE ||
	    scope == SM_SCOPE_ADMIN);
	memset(id, 0, sizeof(*id));
	if (norg > 1)
		return (sm_err_set(err, SM_EINVAL, "more than one "
		    "X-Scope-OrgID header"));
	if (a->a_path != NULL)
		return (auth_check_key(a, scope, authz, id, err));
	/* Open and header modes: everything is allowed. */
	id->scopes = SM_SCOPE_READ | SM_SCOPE_WRITE | SM_SCOPE_ADMIN;
	if (!a->a_multitenancy) {
		snprintf(id->tenant, sizeof(id->tenant), "%s",
		    SM_TENANT_ANONYMOUS);
		return (0);
	}
	if (scope == SM_SCOPE_ADMIN && (org == NULL || org[0] == '\0'))
		return (0);       /* admin routes need no tenant */
	if (org == NULL || org[0] == '\0')
		return (sm_err_set(err, SM_EAUTH, "no org id"));
	if ((rv = sm_tenant_validate(org, err)) != 0)
		return (rv);
	snprintf(id->tenant, sizeof(id->tenant), "%s", org);
	return (0);
}
