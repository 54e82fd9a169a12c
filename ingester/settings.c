/*
 * settings.c -- per-tenant settings registers; see settings.h.
 */
#include "settings.h"

#include <pthread.h>
#include <string.h>

#include "common/setting.h"

static pthread_mutex_t settings_mu = PTHREAD_MUTEX_INITIALIZER;

static void
setting_key(struct sm_key *k, const char *tenant, const char *name)
{
	sm_key_reset(k);
	sm_key_str(k, "", 0);
	sm_key_u8(k, 'P');
	sm_key_str(k, tenant, strlen(tenant));
	if (name != NULL)
		sm_key_str(k, name, strlen(name));
}

/* Decode a stored register into `a`.  0 or SM_ECORRUPT. */
static int
setting_decode(const uint8_t *v, size_t n, const char *name, size_t namelen,
    struct sm_arena *a, Smolder__V1__TenantSetting **out, struct sm_err *err)
{
	Smolder__V1__TenantSetting *s;

	if (n < 9)
		return (sm_err_set(err, SM_ECORRUPT, "setting %.*s: %zu bytes, "
		    "want at least 9", (int)namelen, name, n));
	if ((s = sm_arena_alloc(a, sizeof(*s))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	smolder__v1__tenant_setting__init(s);
	s->modified_at = (int64_t)sm_get_be64(v);
	s->deleted = v[8] != 0;
	s->name = sm_arena_strndup(a, name, namelen);
	s->value = sm_arena_strndup(a, (const char *)v + 9, n - 9);
	if (s->name == NULL || s->value == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	*out = s;
	return (0);
}

/*
 * The array v of n elements (capacity *cap) with room for one more: v
 * itself, or a copy twice as large from `a` (*cap updated).  NULL when
 * the arena refuses.
 */
static void *
settings_room(struct sm_arena *a, void *v, size_t n, size_t *cap,
    size_t elem)
{
	size_t ncap = *cap == 0 ? 16 : *cap * 2;
	void *nv;

	if (n < *cap)
		return (v);
	if ((nv = sm_arena_grow(a, v, n, ncap, elem)) != NULL)
		*cap = ncap;
	return (nv);
}

static int
settings_list(struct sm_kv *kv, const char *tenant, struct sm_arena *a,
    Smolder__V1__SettingsResponse *out, struct sm_err *err)
{
	struct sm_kv_iter *it = sm_kv_iter_create(kv, SM_KV_INDEX);
	Smolder__V1__TenantSetting **v = NULL, **nv;
	size_t n = 0, cap = 0;
	struct sm_key pre;
	int rv = 0;

	if (it == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	setting_key(&pre, tenant, NULL);
	for (sm_kv_iter_seek(it, pre.b, pre.n); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *k, *val;
		size_t kn, vn, off = pre.n;
		const char *name;
		size_t namelen;

		k = sm_kv_iter_key(it, &kn);
		if (kn < pre.n || memcmp(k, pre.b, pre.n) != 0)
			break;
		if (sm_key_get_str(k, kn, &off, &name, &namelen) != 0 ||
		    off != kn)
			continue;
		if ((nv = settings_room(a, v, n, &cap, sizeof(*v))) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			break;
		}
		v = nv;
		val = sm_kv_iter_value(it, &vn);
		if ((rv = setting_decode(val, vn, name, namelen, a, &v[n],
		    err)) != 0)
			break;
		n++;
	}
	if (rv == 0 && (rv = sm_kv_iter_status(it, err)) != 0)
		sm_err_prefix(err, "settings of %s", tenant);
	sm_kv_iter_destroy(it);
	out->settings = v;
	out->n_settings = rv == 0 ? n : 0;
	return (rv);
}

static int
settings_write(struct sm_kv *kv, const char *tenant,
    const Smolder__V1__TenantSetting *s, struct sm_arena *a,
    Smolder__V1__SettingsResponse *out, struct sm_err *err)
{
	const char *value = s->value != NULL ? s->value : "";
	Smolder__V1__TenantSetting **one, *cur = NULL;
	struct sm_buf v = SM_BUF_INIT;
	size_t vlen = strlen(value);
	struct sm_key k;
	uint8_t hdr[9];
	int rv;

	if (s->name == NULL || s->name[0] == '\0' ||
	    strlen(s->name) > ING_SETTING_NAME_MAX)
		return (sm_err_set(err, SM_EMALFORMED, "setting name must be "
		    "1 to %d bytes", ING_SETTING_NAME_MAX));
	if (vlen > ING_SETTING_VALUE_MAX)
		return (sm_err_set(err, SM_EMALFORMED, "setting value is %zu "
		    "bytes, limit %u", vlen, ING_SETTING_VALUE_MAX));
	if ((one = sm_arena_alloc(a, sizeof(*one))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	setting_key(&k, tenant, s->name);
	pthread_mutex_lock(&settings_mu);
	rv = sm_kv_get(kv, SM_KV_INDEX, k.b, k.n, &v, err);
	if (rv == 0) {
		rv = setting_decode((const uint8_t *)v.b, v.len, s->name,
		    strlen(s->name), a, &cur, err);
	} else if (rv == SM_ENOTFOUND) {
		sm_err_clear(err);
		rv = 0;
	}
	if (rv == 0 && (cur == NULL || sm_setting_cmp(s, cur) > 0)) {
		v.len = 0;
		sm_put_be64(hdr, (uint64_t)s->modified_at);
		hdr[8] = s->deleted ? 1 : 0;
		sm_buf_append(&v, hdr, sizeof(hdr));
		sm_buf_append(&v, value, vlen);
		if (sm_buf_error(&v) != 0)
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		else
			rv = sm_kv_put(kv, SM_KV_INDEX, k.b, k.n, v.b, v.len,
			    err);
		cur = (Smolder__V1__TenantSetting *)s;
	}
	pthread_mutex_unlock(&settings_mu);
	sm_buf_fini(&v);
	if (rv != 0)
		return (rv);
	one[0] = cur;
	out->settings = one;
	out->n_settings = 1;
	return (0);
}

/*
 * The tenants holding a live register whose name starts with `prefix`
 * (SettingsRequest.tenants_with), in key order: sorted and unique.
 */
static int
settings_tenants(struct sm_kv *kv, const char *prefix, struct sm_arena *a,
    Smolder__V1__SettingsResponse *out, struct sm_err *err)
{
	struct sm_kv_iter *it = sm_kv_iter_create(kv, SM_KV_INDEX);
	size_t plen = strlen(prefix), n = 0, cap = 0;
	char **v = NULL, **nv;
	struct sm_key pre;
	int rv = 0;

	if (it == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	sm_key_reset(&pre);
	sm_key_str(&pre, "", 0);
	sm_key_u8(&pre, 'P');
	for (sm_kv_iter_seek(it, pre.b, pre.n); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *k, *val;
		size_t kn, vn, off = pre.n, tl, nl;
		const char *t, *name;

		k = sm_kv_iter_key(it, &kn);
		if (kn < pre.n || memcmp(k, pre.b, pre.n) != 0)
			break;
		if (sm_key_get_str(k, kn, &off, &t, &tl) != 0 ||
		    sm_key_get_str(k, kn, &off, &name, &nl) != 0 || off != kn)
			continue;
		val = sm_kv_iter_value(it, &vn);
		if (nl < plen || memcmp(name, prefix, plen) != 0 || vn < 9 ||
		    val[8] != 0)
			continue;       /* another name, or a tombstone */
		if (n > 0 && strlen(v[n - 1]) == tl &&
		    memcmp(v[n - 1], t, tl) == 0)
			continue;
		if ((nv = settings_room(a, v, n, &cap, sizeof(*v))) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			break;
		}
		v = nv;
		if ((v[n] = sm_arena_strndup(a, t, tl)) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			break;
		}
		n++;
	}
	if (rv == 0)
		rv = sm_kv_iter_status(it, err);
	sm_kv_iter_destroy(it);
	out->tenants = v;
	out->n_tenants = rv == 0 ? n : 0;
	return (rv);
}

int
ing_settings_serve(struct sm_kv *kv, const Smolder__V1__SettingsRequest *req,
    struct sm_arena *a, Smolder__V1__SettingsResponse *out,
    struct sm_err *err)
{
	smolder__v1__settings_response__init(out);
	if ((req->tenant == NULL || req->tenant[0] == '\0') &&
	    req->tenants_with != NULL && req->tenants_with[0] != '\0' &&
	    !req->write)
		return (settings_tenants(kv, req->tenants_with, a, out, err));
	if (req->tenant == NULL || req->tenant[0] == '\0' ||
	    strlen(req->tenant) > SM_KEY_MAX / 4)
		return (sm_err_set(err, SM_EMALFORMED, "settings: bad tenant"));
	if (!req->write)
		return (settings_list(kv, req->tenant, a, out, err));
	if (req->setting == NULL)
		return (sm_err_set(err, SM_EMALFORMED, "settings: write "
		    "without a setting"));
	return (settings_write(kv, req->tenant, req->setting, a, out, err));
}
