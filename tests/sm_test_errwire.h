/*
 * sm_test_errwire.h -- the wire mapping of the SM_E* codes (sm_err_wire,
 * sm_http_status_for) as the tests expect it: one table, so base_test
 * and http_test check the same answers (header-only, like sm_test.h).
 */
#ifndef SM_TEST_ERRWIRE_H
#define SM_TEST_ERRWIRE_H

#include <errno.h>

#include "common/sm.h"

static const struct sm_test_err_wire {
	int rv, status;
	const char *code;       /* the plain HTTP API's */
} sm_test_err_wire[] = {
	{ SM_EINVAL, 400, "invalid_argument" },
	{ SM_EMALFORMED, 400, "invalid_argument" },
	{ SM_ETOOBIG, 413, "invalid_argument" },
	{ SM_ELIMIT, 429, "resource_exhausted" },
	{ SM_EAUTH, 401, "unauthenticated" },
	{ SM_EFORBIDDEN, 403, "permission_denied" },
	{ SM_ENOTFOUND, 404, "not_found" },
	{ SM_EEXIST, 409, "already_exists" },
	{ SM_EUNAVAIL, 503, "unavailable" },
	{ SM_ECLOSED, 503, "unavailable" },
	{ SM_ETIMEDOUT, 504, "deadline_exceeded" },
	{ SM_EUNSUPPORTED, 415, "unimplemented" },
	{ SM_ECORRUPT, 500, "data_loss" },
	{ SM_ENOMEM, 500, "internal" },
	{ SM_EIO, 500, "internal" },
	{ SM_EINTERNAL, 500, "internal" },
	{ -ENOENT, 500, "internal" },
	{ -5, 500, "internal" },
	{ 12345, 500, "internal" },
};

#endif /* SM_TEST_ERRWIRE_H */
