/*
 * auth.h -- who may call which HTTP route, and as which tenant.
 *
 * Three modes, chosen by flags (cmd/main.c):
 *
 *   open      -auth.multitenancy-enabled=false, no keys file: every request
 *             is tenant "anonymous" and every route is allowed (Pyroscope's
 *             default).
 *   header    -auth.multitenancy-enabled, no keys file: the tenant is the
 *             X-Scope-OrgID header, which a trusted gateway sets.  There is
 *             no identity to check scopes against, so admin routes are as
 *             open as the gateway leaves them (the gateway must block
 *             /ingester/flush, /compactor/run and /ring if it exposes us).
 *   keys      -auth.multitenancy-enabled and -auth.keys-file: every route
 *             but the public ones (/ready, /metrics) needs an API key,
 *             either `Authorization: Bearer <key>` or HTTP Basic auth with
 *             the key as the password.  The Basic user name is ignored:
 *             Grafana Alloy's pyroscope.write basic_auth and Grafana Cloud
 *             style configs put a tenant or instance id there, and the key
 *             alone decides the tenant ("a key's tenant wins over any
 *             header": X-Scope-OrgID is ignored in this mode).  A keys
 *             file without multi-tenancy is refused at startup: with
 *             multi-tenancy off every request would be "anonymous" and the
 *             key's tenant would be meaningless.
 *
 * Scopes.  A key carries a set of scopes; a route declares the one it
 * needs (http.h, sm_http_route_as):
 *
 *   scope   routes
 *   -----   ------------------------------------------------------------
 *   public  GET /ready, GET /metrics (probes and scrapers; no tenant data)
 *   read    GET /render, /pyroscope/render, /labels, /label-values,
 *           /pyroscope/label-values, /api/apps, every
 *           querier.v1.QuerierService Connect method (and, when merged,
 *           /pyroscope/render-diff and settings.v1 Get)
 *   write   POST /ingest, /pyroscope/ingest (and push.v1.PusherService/
 *           Push when merged)
 *   admin   POST /ingester/flush, POST /compactor/run, GET /ring
 *           (settings.v1 Set/Delete when merged), and any route that does
 *           not declare a scope (deny by default)
 *
 * Scopes do not imply each other ("admin" is not "read"): a key lists all
 * it needs.  Admin routes act on the whole process, not on the key's
 * tenant: an admin key is an operator's key.
 *
 * Keys file.  Text, one key per line, `#` comments and blank lines
 * ignored:
 *
 *   sha256:<64 hex digits>  <tenant>  <scope>[,<scope>...]
 *
 * The hash is SHA-256 of the key's bytes, printed by `smolder-admin
 * hash-key`.  A plain (unsalted, fast) hash is enough because keys are
 * generated, high-entropy tokens (>= 128 bits, like GitHub's or Grafana
 * Cloud's tokens), not passwords: nothing can be learnt from the file by
 * guessing.  Keys shorter than SM_AUTH_KEY_MIN bytes are refused by
 * hash-key for that reason.  Tenant ids are validated as Pyroscope does
 * (tenant.h); an unknown scope, a bad hash or a duplicate hash makes the
 * whole file invalid.
 *
 * Primitives.  SHA-256, the constant-time comparison and wiping come
 * from tls.h, the one wrapper of the one crypto library (GnuTLS); Basic
 * auth's base64 from buf.h.
 *
 * Lookup.  The presented key is hashed once, then compared with every
 * entry with sm_memeq_ct, without stopping at a match, so the time taken
 * does not depend on which entry matched or how many bytes agree.
 *
 * Reload (common/watch.h).  A thread stats the file every reload period
 * (-auth.keys-reload-period) and reloads it when its inode, size or mtime
 * changed and then stayed the same for one more period (so an editor rewriting the file in
 * place is not caught half-way; renaming a new file over the old one is
 * the atomic way, and takes effect within two periods).  The new
 * table is built aside and swapped in under a write lock, so a request
 * sees either the whole old table or the whole new one and a valid key
 * never fails during a reload.  A file that does not parse (or cannot be
 * read) keeps the old keys, is logged with the reason (file:line), and is
 * tried again only when it changes once more.  The file must be valid at
 * startup.
 */
#ifndef SM_AUTH_H
#define SM_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "sm.h"
#include "tenant.h"

/* Scopes: a key holds a set, a route needs one. */
#define SM_SCOPE_PUBLIC 0u        /* route: no authentication, no tenant */
#define SM_SCOPE_READ 1u
#define SM_SCOPE_WRITE 2u
#define SM_SCOPE_ADMIN 4u

#define SM_AUTH_KEY_MIN 16        /* hash-key refuses shorter keys */
#define SM_AUTH_KEY_MAX 1024      /* longer credentials are refused */
#define SM_AUTH_HASH_TEXT 72      /* "sha256:" + 64 hex + NUL, rounded */

struct sm_auth;

/* What a request was authenticated as. */
struct sm_auth_id {
	char tenant[SM_TENANT_MAX_LEN + 1];
	unsigned scopes;
	bool by_key;              /* tenant came from a key, not a header */
};

/*
 * Create the authenticator.  `keys_file` NULL or "" means no keys (open or
 * header mode).  With a keys file, it is loaded now (an invalid file fails
 * here) and a reload thread polls it every `reload_ms` (> 0).
 * Returns 0 and *out, SM_EINVAL (bad file or flags, reason in err) or
 * SM_ENOMEM.
 */
int sm_auth_create(bool multitenancy, const char *keys_file,
    int64_t reload_ms, struct sm_auth **out, struct sm_err *err);

/* Stop the reload thread and free.  NULL is a no-op. */
void sm_auth_destroy(struct sm_auth *a);

/*
 * Authenticate one request for a route that needs `scope` (not PUBLIC).
 * `authz` is the Authorization header (NULL if absent), `org` the first
 * X-Scope-OrgID (NULL if absent) and `norg` how many were sent.
 * Returns 0 and *id; SM_EINVAL (400: two org ids, invalid tenant id),
 * SM_EAUTH (401: no or unknown credentials, no org id) or SM_EFORBIDDEN
 * (403: the key lacks the scope), with a client-safe reason in err.
 * Locking: takes the table's read lock.  Thread-safe.
 */
int sm_auth_check(struct sm_auth *a, unsigned scope, const char *authz,
    const char *org, unsigned norg, struct sm_auth_id *id,
    struct sm_err *err);

/* True when keys are required (keys mode). */
bool sm_auth_keys_enabled(const struct sm_auth *a);

/*
 * True in header mode: multitenancy without keys, where the tenant is
 * whatever X-Scope-OrgID claims, so no request proves it may administer
 * anything (http.h keeps admin routes to the admin listener then).
 */
bool sm_auth_header_trusted(const struct sm_auth *a);

/*
 * Re-read the keys file now if it changed, without waiting for it to
 * settle (the reload thread waits one period; see above).
 * Returns 0 (reloaded or unchanged) or the load error (old keys kept).
 */
int sm_auth_reload(struct sm_auth *a, struct sm_err *err);

/* Number of keys loaded (for tests and the log). */
size_t sm_auth_nkeys(struct sm_auth *a);

/*
 * Write "sha256:<hex>" of `key` into out (SM_AUTH_HASH_TEXT bytes).
 * Returns 0, SM_EINVAL (key empty or too long) or SM_EINTERNAL.
 */
int sm_auth_hash_key(const char *key, size_t len, char *out,
    struct sm_err *err);

/* Parse "read,write,admin" into a scope set; SM_EINVAL on a bad name. */
int sm_auth_parse_scopes(const char *s, unsigned *out, struct sm_err *err);

#endif /* SM_AUTH_H */
