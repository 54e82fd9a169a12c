/*
 * setting.h -- the order of a tenant setting's versions.
 *
 * Each ingester keeps a setting as a last-writer-wins register
 * (ingester/settings.c), and the querier picks the winner among the
 * replicas' answers and repairs the ones behind (querier/settings.c): both
 * must agree on which version wins, so the order lives here once.
 */
#ifndef SM_SETTING_H
#define SM_SETTING_H

#include "smolder/v1/rpc.pb-c.h"

/*
 * Which of two versions wins (> 0: a, < 0: b, 0: identical): the later
 * modified_at, then a deletion over a value, then the greater value.
 */
int sm_setting_cmp(const Smolder__V1__TenantSetting *a,
    const Smolder__V1__TenantSetting *b);

#endif /* SM_SETTING_H */
