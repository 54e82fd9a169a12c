/*
 * setting.c -- the order of a tenant setting's versions; see setting.h.
 */
#include "setting.h"

#include <string.h>

int
sm_setting_cmp(const Smolder__V1__TenantSetting *a,
    const Smolder__V1__TenantSetting *b)
{
	const char *av = a->value != NULL ? a->value : "";
	const char *bv = b->value != NULL ? b->value : "";
	int c;

	if (a->modified_at != b->modified_at)
		return (a->modified_at > b->modified_at ? 1 : -1);
	if (a->deleted != b->deleted)
		return (a->deleted ? 1 : -1);
	c = strcmp(av, bv);
	return (c > 0 ? 1 : c < 0 ? -1 : 0);
}
