/*
 * setting.c -- the order of a tenant setting's versions; see setting.h.
 */
#include "setting.h"
#include "sm.h"

#include <string.h>

int
sm_setting_cmp(const Smolder__V1__TenantSetting *a,
    const Smolder__V1__TenantSetting *b)
{
	const char *av = a->value != NULL ? a->value : "";
	const char *bv = b->value != NULL ? b->value : "";

	if (a->modified_at != b->modified_at)
		return (SM_CMP(a->modified_at, b->modified_at));
	if (a->deleted != b->deleted)
		return (a->deleted ? 1 : -1);
	return (SM_CMP(strcmp(av, bv), 0));
}
