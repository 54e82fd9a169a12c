/*
 * settings_test.c -- the ingester's settings registers: last writer wins
 * whatever the arrival order, tombstones, per-tenant lists, durability
 * across a reopen, refusals.
 */
#include <stdlib.h>

#include "sm_test.h"

#include "ingester/settings.h"

static struct sm_kv *
open_kv(const char *dir)
{
	struct sm_kv_opts o;
	struct sm_kv *kv;
	struct sm_err err;

	sm_kv_opts_default(&o);
	SM_REQUIRE(sm_kv_open(dir, &o, &kv, &err) == 0);
	return (kv);
}

/* Write (name, value, t, deleted); returns the stored winner's value. */
static const char *
put(struct sm_kv *kv, struct sm_arena *a, const char *tenant,
    const char *name, const char *value, int64_t t, bool del)
{
	Smolder__V1__SettingsRequest req = SMOLDER__V1__SETTINGS_REQUEST__INIT;
	Smolder__V1__TenantSetting s = SMOLDER__V1__TENANT_SETTING__INIT;
	Smolder__V1__SettingsResponse out;
	struct sm_err err;

	s.name = (char *)name;
	s.value = (char *)value;
	s.modified_at = t;
	s.deleted = del;
	req.tenant = (char *)tenant;
	req.write = true;
	req.setting = &s;
	SM_REQUIRE(ing_settings_serve(kv, &req, a, &out, &err) == 0);
	SM_REQUIRE(out.n_settings == 1);
	return (out.settings[0]->deleted ? "<deleted>" :
	    out.settings[0]->value);
}

/* "name=value@t" lines of a tenant's list (tombstones as name=-). */
static const char *
list(struct sm_kv *kv, struct sm_arena *a, const char *tenant)
{
	Smolder__V1__SettingsRequest req = SMOLDER__V1__SETTINGS_REQUEST__INIT;
	Smolder__V1__SettingsResponse out;
	struct sm_buf b = SM_BUF_INIT;
	struct sm_err err;
	char *s;

	req.tenant = (char *)tenant;
	SM_REQUIRE(ing_settings_serve(kv, &req, a, &out, &err) == 0);
	for (size_t i = 0; i < out.n_settings; i++)
		sm_buf_printf(&b, "%s=%s@%lld\n", out.settings[i]->name,
		    out.settings[i]->deleted ? "-" : out.settings[i]->value,
		    (long long)out.settings[i]->modified_at);
	s = sm_arena_strndup(a, b.b != NULL ? b.b : "", b.len);
	sm_buf_fini(&b);
	return (s);
}

static void
test_registers(void)
{
	char dir[] = "/tmp/smolder-settings-XXXXXX", cmd[64];
	struct sm_arena *a = sm_arena_create(0);
	Smolder__V1__SettingsRequest req = SMOLDER__V1__SETTINGS_REQUEST__INIT;
	Smolder__V1__TenantSetting s = SMOLDER__V1__TENANT_SETTING__INIT;
	Smolder__V1__SettingsResponse out;
	struct sm_err err;
	struct sm_kv *kv;

	SM_REQUIRE(mkdtemp(dir) != NULL);
	kv = open_kv(dir);
	SM_CHECK_STR(list(kv, a, "t"), "");
	SM_CHECK_STR(put(kv, a, "t", "b", "v1", 100, false), "v1");
	SM_CHECK_STR(put(kv, a, "t", "b", "old", 50, false), "v1");
	SM_CHECK_STR(put(kv, a, "t", "b", "v2", 200, false), "v2");
	/* same time: the tombstone wins, then the larger value */
	SM_CHECK_STR(put(kv, a, "t", "a", "x", 10, false), "x");
	SM_CHECK_STR(put(kv, a, "t", "a", "y", 10, false), "y");
	SM_CHECK_STR(put(kv, a, "t", "a", "w", 10, false), "y");
	SM_CHECK_STR(put(kv, a, "t", "a", "", 10, true), "<deleted>");
	SM_CHECK_STR(put(kv, a, "t", "a", "late", 9, false), "<deleted>");
	SM_CHECK_STR(put(kv, a, "u", "b", "other", 1, false), "other");
	/* a tenant that is a prefix of another's name sees only its own */
	SM_CHECK_STR(put(kv, a, "tt", "b", "tt's", 1, false), "tt's");
	SM_CHECK_STR(list(kv, a, "t"), "a=-@10\nb=v2@200\n");
	SM_CHECK_STR(list(kv, a, "u"), "b=other@1\n");
	sm_kv_close(kv);
	kv = open_kv(dir);
	SM_CHECK_STR(list(kv, a, "t"), "a=-@10\nb=v2@200\n");
	SM_CHECK_STR(list(kv, a, "tt"), "b=tt's@1\n");
	/* refusals */
	s.name = "";
	req.tenant = "t";
	req.write = true;
	req.setting = &s;
	SM_CHECK_EQ(ing_settings_serve(kv, &req, a, &out, &err), SM_EMALFORMED);
	req.setting = NULL;
	SM_CHECK_EQ(ing_settings_serve(kv, &req, a, &out, &err), SM_EMALFORMED);
	req.tenant = "";
	req.write = false;
	SM_CHECK_EQ(ing_settings_serve(kv, &req, a, &out, &err), SM_EMALFORMED);
	sm_kv_close(kv);
	sm_arena_destroy(a);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup of %s failed\n", dir);
}

SM_TEST_MAIN(
	{ "registers: last writer wins, tombstones, tenants, reopen", test_registers },
)
