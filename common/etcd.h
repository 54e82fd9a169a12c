/*
 * etcd.h -- a client of etcd's v3 API through its JSON gateway: what
 * shared ring membership (docs/operations.md §1) and the compactor's
 * lock need, nothing more.  etcd 3.4 (Debian 12's etcd-server) serves the gateway on
 * its client port: POST /v3/kv/put, /v3/kv/range, /v3/kv/deleterange,
 * /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke and
 * the streaming /v3/watch, with keys and values in base64.  httpc.h does
 * the HTTP, jansson the JSON; this file and etcd.c are the only ones that
 * speak to etcd.
 *
 * Endpoints: -ring.etcd.endpoints is a comma-separated list of
 * "host:port" (or "http://host:port"); a call tries them in turn,
 * starting with the last one that answered, and fails only when none
 * does.  Every call is bounded by the handle's timeout (a watch by the
 * wait it is given).  TLS: https:// endpoints, and bare host:port ones
 * once sm_etcd_tls_set() turned TLS on, are verified against its CA (the
 * system's without one) and present its client certificate when given
 * (etcd's --client-cert-auth).
 *
 * Bounds: an answer is at most ETCD_BODY_MAX (4 MiB), a watch message at
 * most as much; more is SM_EIO.  Keys are at most SM_ETCD_KEY_MAX bytes.
 *
 * Errors: SM_EUNAVAIL (no endpoint answered, or etcd answered 5xx),
 * SM_ETIMEDOUT, SM_EIO (an answer that is not what etcd sends, or
 * a 4xx: etcd's own message is in err), SM_ENOTFOUND (a lease that is
 * gone), SM_ECLOSED (sm_etcd_cancel), SM_ENOMEM.
 *
 * Locking: an sm_etcd is thread-safe; a call runs on its thread's own
 * httpc connection (kept open between that thread's calls).
 * sm_etcd_cancel ends every call in flight (a watch at once) and makes
 * later ones fail with SM_ECLOSED.
 */
#ifndef SM_ETCD_H
#define SM_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "sm.h"

#define SM_ETCD_KEY_MAX 1024

struct sm_etcd;

/* One key and its value (values are bytes; registration stores JSON). */
struct sm_etcd_kv {
	char *key;
	char *val;              /* NUL-terminated copy of the value */
	size_t vlen;
	int64_t mod_rev;
};

/*
 * TLS to etcd for the process, before any handle is opened: `enabled`
 * (or any path) makes bare host:port endpoints https://; the CA verifies
 * etcd's certificate (empty: the system's), the certificate and key are
 * presented to it.  0, or SM_EINVAL when a file is unreadable or a
 * certificate lacks its key.  sm_etcd_tls_clear() forgets it (at exit).
 */
struct sm_etcd_tls_cfg {
	bool enabled;
	const char *cert_path;
	const char *key_path;
	const char *ca_path;
};
int sm_etcd_tls_set(const struct sm_etcd_tls_cfg *cfg, struct sm_err *err);
void sm_etcd_tls_clear(void);

int sm_etcd_open(const char *endpoints, int64_t timeout_ms,
    struct sm_etcd **out, struct sm_err *err);
void sm_etcd_destroy(struct sm_etcd *e);
void sm_etcd_cancel(struct sm_etcd *e);
/* The endpoint list as given (for logs and /ring). */
const char *sm_etcd_desc(const struct sm_etcd *e);

/* Put key = val (lease 0: none). */
int sm_etcd_put(struct sm_etcd *e, const char *key, const char *val,
    size_t vlen, int64_t lease, struct sm_err *err);
/* Delete key (a missing key is 0). */
int sm_etcd_delete(struct sm_etcd *e, const char *key, struct sm_err *err);
/* Every key starting with prefix, in key order, and the store's revision
 * the answer is from (*rev).  Free with sm_etcd_kvs_free. */
int sm_etcd_range(struct sm_etcd *e, const char *prefix,
    struct sm_etcd_kv **kvs, size_t *n, int64_t *rev, struct sm_err *err);
void sm_etcd_kvs_free(struct sm_etcd_kv *kvs, size_t n);
/*
 * Create key = val only if it does not exist (a transaction on its
 * create_revision == 0): *created says whether this call made it.  With
 * a lease, the key goes when the lease does: a single-writer lock.
 */
int sm_etcd_create(struct sm_etcd *e, const char *key, const char *val,
    size_t vlen, int64_t lease, bool *created, struct sm_err *err);
/*
 * Block until a key under prefix changes at or after revision from_rev,
 * or wait_ms passes: *changed says which.  A revision etcd has compacted
 * away counts as a change (the caller reads the prefix again).
 */
int sm_etcd_watch(struct sm_etcd *e, const char *prefix, int64_t from_rev,
    int64_t wait_ms, bool *changed, struct sm_err *err);

/* Leases: grant one of ttl_s seconds; keep it alive (*ttl_s: what is
 * left; a lease that expired is SM_ENOTFOUND); revoke it (its keys go). */
int sm_etcd_lease_grant(struct sm_etcd *e, int64_t ttl_s, int64_t *id,
    struct sm_err *err);
int sm_etcd_lease_keepalive(struct sm_etcd *e, int64_t id, int64_t *ttl_s,
    struct sm_err *err);
int sm_etcd_lease_revoke(struct sm_etcd *e, int64_t id, struct sm_err *err);

/*
 * A single-holder lock: key holds the holder's name under a lease of
 * ttl_s seconds, created only if missing (sm_etcd_create).  A thread
 * keeps the lease alive every ttl_s/3 and, while another holds the key,
 * tries again at the same pace.  The lock counts as lost as soon as a
 * keepalive finds the lease gone, or none has succeeded for ttl_s - 1 s
 * (etcd may have expired it meanwhile), so sm_etcd_lock_held never says
 * true after etcd could have given the key to someone else, barring a
 * pause longer than that margin between the check and the work.  A
 * keepalive that succeeds after the margin passed finds the key still
 * ours under a lease we gave up on: the holder revokes that lease and
 * takes the key anew (else creating it would fail for as long as it
 * kept the lease alive, and nobody would hold the lock).  Stop
 * revokes the lease, which frees the key at once.
 *
 * Time: the pace and the margin are on `clock` (common/clock.h; NULL =
 * the real clock, a manual one must outlive the lock), so a test moves a
 * manual clock to make a waiting holder try again at once.  The lease's
 * own expiry is etcd's, on its real clock.
 */
struct sm_etcd_lock;

int sm_etcd_lock_start(const char *endpoints, int64_t timeout_ms,
    const char *key, const char *holder, int64_t ttl_s,
    const struct sm_clock *clock, struct sm_etcd_lock **out,
    struct sm_err *err);
/* Held by us now?  If not, the current holder's name (or "") in who. */
bool sm_etcd_lock_held(struct sm_etcd_lock *l, char *who, size_t wholen);
void sm_etcd_lock_stop(struct sm_etcd_lock *l);

#endif /* SM_ETCD_H */
