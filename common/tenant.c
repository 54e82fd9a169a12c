/*
 * tenant.c -- see tenant.h.
 */
#include "tenant.h"

#include <string.h>

static bool
tenant_char_ok(unsigned char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || strchr("!-_.*'()", c) != NULL);
}

int
sm_tenant_validate(const char *id, struct sm_err *err)
{
	size_t n = strlen(id);

	if (n == 0)
		return (sm_err_set(err, SM_EINVAL, "tenant ID is empty"));
	if (n > SM_TENANT_MAX_LEN)
		return (sm_err_set(err, SM_EINVAL, "tenant ID is too long: "
		    "max %d characters", SM_TENANT_MAX_LEN));
	if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
		return (sm_err_set(err, SM_EINVAL, "tenant ID is '.' or '..'"));
	for (size_t i = 0; i < n; i++) {
		if (id[i] == '|')
			return (sm_err_set(err, SM_EINVAL, "tenant federation "
			    "('|') is not supported"));
		if (!tenant_char_ok((unsigned char)id[i]))
			return (sm_err_set(err, SM_EINVAL, "tenant ID contains "
			    "unsupported character '%c'", id[i]));
	}
	return (0);
}

int
sm_tenant_resolve(bool multitenancy, const char *hdr, const char **out,
    struct sm_err *err)
{
	int rv;

	*out = NULL;
	if (!multitenancy) {
		*out = SM_TENANT_ANONYMOUS;
		return (0);
	}
	if (hdr == NULL || hdr[0] == '\0')
		return (sm_err_set(err, SM_EAUTH, "no org id"));
	if ((rv = sm_tenant_validate(hdr, err)) != 0)
		return (rv);
	*out = hdr;
	return (0);
}
