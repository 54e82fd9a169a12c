/*
 * status.h -- what a process runs with, for operators: the routes
 * Pyroscope (and Mimir, Loki) serve for it.
 *
 *   GET /api/v1/status/buildinfo          public; JSON
 *       {"status":"success","data":{"version","revision","branch",
 *       "buildUser","buildDate","goVersion"}}: the version, the git
 *       commit built (empty outside a checkout), the rest empty
 *   GET /api/v1/status/config             admin; every flag and the
 *                                         value this process runs with
 *   GET /api/v1/status/config/diff        admin; only those that differ
 *                                         from their defaults
 *   GET /api/v1/status/config/default     admin; the defaults
 *   GET /runtime_config                   admin; the runtime config
 *                                         (overrides.h) as loaded: every
 *                                         tenant it lists with all its
 *                                         limits; ?mode=diff only those
 *                                         that differ from the defaults
 *   GET /api/v1/tenant_limits             read scope; the limits of the
 *                                         request's tenant (X-Scope-OrgID
 *                                         or its API key's), JSON
 *                                         (overrides.h sm_limits_write_json)
 *
 * The config is YAML, "text/plain; charset=utf-8" as Pyroscope serves it
 * (shown in a browser rather than downloaded).  Where Pyroscope nests
 * its YAML by component, Smolder's is flat, one line per flag under the
 * flag's own name (`distributor.replication-factor: 3`), the name an
 * operator passes on the command line; strings are double-quoted.
 * Credentials (flags declared SM_FLAG_SECRET: the S3 secret key and
 * session token, the remote-write key) read "********" when set, as
 * Mimir's secrets do, and so does the password of a URL in any flag.
 * Values are what the process runs with, after
 * start-up settled the flags that depend on others.
 *
 * Ownership: the flag set and the overrides are main's and must outlive
 * the HTTP server.  Locking: none here (the overrides lock themselves;
 * flags do not change after start-up).  Errors: registration returns
 * SM_EEXIST or SM_ENOMEM; handlers answer 500 when out of memory.
 */
#ifndef SM_STATUS_H
#define SM_STATUS_H

#include <stdbool.h>

#include "flags.h"
#include "http.h"
#include "overrides.h"

struct sm_status_cfg {
	const struct sm_flags *flags;
	struct sm_overrides *overrides;   /* may be NULL: flags only */
	bool multitenancy;                /* as the server's tenant rule */
};

/* Register the routes above on h; cfg (the handlers' argument) must
 * outlive the server. */
int sm_status_routes(struct sm_http *h, const struct sm_status_cfg *cfg,
    struct sm_err *err);

#endif /* SM_STATUS_H */
