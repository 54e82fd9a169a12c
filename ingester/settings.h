/*
 * settings.h -- the ingester's copy of per-tenant settings (settings.v1,
 * served by querier/settings.c, which replicates them over the ring).
 *
 * Each setting is a last-writer-wins register, stored durably in the
 * index column family under the system key
 *     str("") 'P' str(tenant) str(name)
 * (an empty tenant string: no block key, no tenant range delete and no
 * block scan ever matches it), value
 *     be64 modified_at_ms | u8 deleted | value bytes.
 * A write replaces the stored register only when it is newer by
 * sm_setting_cmp (common/setting.h: modified_at, then a tombstone over a
 * value, then the larger value bytewise, so every replica settles on the
 * same winner whatever order writes arrive in).
 * Deletes are tombstones and are kept: a replica that missed a delete
 * cannot bring the value back through read repair.
 *
 * Locking: one process-wide mutex serialises read-modify-write; settings
 * writes are rare (a person saving a form).  Errors: SM_EMALFORMED (no
 * tenant, no name, sizes over the limits), kv errors.
 */
#ifndef ING_SETTINGS_H
#define ING_SETTINGS_H

#include "common/arena.h"
#include "common/kv.h"
#include "smolder/v1/rpc.pb-c.h"

#define ING_SETTING_NAME_MAX 256
#define ING_SETTING_VALUE_MAX (256u << 10)

/*
 * A settings request: list the tenant's registers, write one, or (tenant
 * empty, tenants_with set) list the tenants holding a live register of
 * that name prefix.
 */
int ing_settings_serve(struct sm_kv *kv, const Smolder__V1__SettingsRequest *req,
    struct sm_arena *a, Smolder__V1__SettingsResponse *out,
    struct sm_err *err);

#endif /* ING_SETTINGS_H */
