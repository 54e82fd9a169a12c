/*
 * tenant.h -- which tenant a request belongs to (docs/architecture.md §6).
 *
 * With multi-tenancy off (the default, as in Pyroscope) every request is
 * tenant "anonymous".  With it on, X-Scope-OrgID is required (set by an
 * authenticating proxy); a missing header is 401 and an invalid id 400.
 * Valid ids (Pyroscope/dskit rules): 1..150 bytes of [A-Za-z0-9!-_.*'()],
 * not "." or "..".  The "a|b" federation form is refused: Smolder does not
 * federate reads across tenants.
 */
#ifndef SM_TENANT_H
#define SM_TENANT_H

#include <stdbool.h>

#include "sm.h"

#define SM_TENANT_ANONYMOUS "anonymous"
#define SM_TENANT_MAX_LEN 150

/* 0, or SM_EINVAL with the reason in err. */
int sm_tenant_validate(const char *id, struct sm_err *err);

/*
 * Resolve the tenant from the X-Scope-OrgID header value `hdr` (NULL when
 * absent).  Returns 0 and *out (either `hdr` or SM_TENANT_ANONYMOUS),
 * SM_EAUTH ("no org id") or SM_EINVAL.
 */
int sm_tenant_resolve(bool multitenancy, const char *hdr, const char **out,
    struct sm_err *err);

#endif /* SM_TENANT_H */
