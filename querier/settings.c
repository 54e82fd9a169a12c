/*
 * settings.c -- the tenant metadata services Grafana's Profiles Drilldown
 * and Pyroscope clients ask for at start-up (docs/wire-formats.md §4 neighbours):
 *
 *   POST /settings.v1.SettingsService/Get     {} -> {settings: [...]}
 *   POST /settings.v1.SettingsService/Set     {setting} -> {setting}
 *   POST /settings.v1.SettingsService/Delete  {name} -> {}
 *   POST /capabilities.v1.FeatureFlagsService/GetFeatureFlags
 *   POST /version.v1.Version/Version          {} -> {QuerierAPI: 1}
 *   POST /vcs.v1.VCSService/<any of GithubApp, GithubLogin, GithubRefresh,
 *        GetFile, GetCommit, GetCommits>      -> 501 unimplemented
 *
 * vcs.v1 (source links from GitHub) is not served: Smolder keeps no
 * source locations to link yet.  It answers unimplemented, as Pyroscope
 * does when no GitHub app is configured, so Grafana hides the source
 * view instead of reporting a broken data source (a 404 would be that).
 *
 * Settings are per tenant, durable and visible to every querier.  Design:
 * each ingester keeps a copy (ingester/settings.h: last-writer-wins
 * registers with tombstones in RocksDB, so they survive restarts and are
 * in the write-ahead log before a write is acknowledged), and a querier
 * reads and writes them with majority quorums over *all* ring members
 * (not the RF replicas of a key): a write must be acknowledged by
 * floor(N/2)+1 of the N members and a read must hear from as many, so
 * every read overlaps every acknowledged write, whatever the token
 * layout and whichever members are down (at most a minority).  Reads
 * merge the answers by the register order (newest modified_at, then a
 * tombstone, then the larger value) and repair the members that answered
 * with an older or missing register.  Settings are a handful of small
 * strings per tenant, so writing everywhere costs nothing that matters;
 * Pyroscope keeps them in object storage instead, which Smolder does not
 * have.  In -target=all the ring has one member: the same code, N = 1.
 *
 * Names starting with "smolder." (QRY_SETTING_RESERVED) are Smolder's own
 * registers -- the recording rules and their evaluation marks (rules.c)
 * -- stored the same way: Get leaves them out, Set and Delete refuse
 * them (invalid_argument).
 *
 * Shapes (Pyroscope api/settings/v1/setting.proto): Setting{name, value,
 * modifiedAt (ms)}.  Set stores modifiedAt as sent, or now when 0; a
 * setting already stored with a newer modifiedAt wins and Set answers
 * already_exists (409) with it in the message.  Get lists the live
 * settings sorted by name.  Delete of a name nobody set is a no-op 200.
 * Names are 1..256 bytes, values at most 256 KiB (invalid_argument).
 * Fewer than a majority of ingesters answering is unavailable (503).
 *
 * Feature flags: the ones Smolder can state truthfully about itself
 * (each with a description); Version: QuerierAPI 1, the querier.v1 API
 * Smolder serves.
 */
#include <stdlib.h>
#include <string.h>

#include "common/connect.h"
#include "common/auth.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/setting.h"
#include "common/tenant.h"

#include "capabilities/v1/feature_flags.pb-c.h"
#include "settings/v1/setting.pb-c.h"
#include "smolder/v1/rpc.pb-c.h"
#include "version/v1/version.pb-c.h"

#include "qry_int.h"

#define SETTING_NAME_MAX 256
#define SETTING_VALUE_MAX (256u << 10)

/* One round: the same request to every healthy member. */
struct set_round {
	struct sm_ring_snap *snap;
	uint32_t n;                               /* members */
	Smolder__V1__SettingsResponse **resp;     /* per member, NULL = none */
	uint32_t ok;
};

static void
round_fini(struct set_round *r)
{
	if (r->snap != NULL)
		sm_ring_release(r->snap);
	r->snap = NULL;
}

static int
round_run(struct querier *q, const Smolder__V1__SettingsRequest *sreq,
    struct sm_arena *a, struct set_round *r, struct sm_err *err)
{
	Smolder__V1__Request req = SMOLDER__V1__REQUEST__INIT;
	struct sm_rpc_multi *mc = NULL;
	uint8_t *buf;
	size_t sz;
	uint32_t need;
	int rv = 0, last = SM_EUNAVAIL;
	struct sm_err last_err;

	sm_err_clear(&last_err);
	memset(r, 0, sizeof(*r));
	r->snap = sm_ring_acquire(q->ring);
	r->n = r->snap->n;
	need = r->n / 2 + 1;
	req.method_case = SMOLDER__V1__REQUEST__METHOD_SETTINGS;
	req.settings = (Smolder__V1__SettingsRequest *)sreq;
	sz = protobuf_c_message_get_packed_size(&req.base);
	if ((buf = sm_arena_alloc(a, SM_MAX(sz, 1))) == NULL ||
	    (r->resp = sm_arena_calloc(a, SM_MAX(r->n, 1),
	    sizeof(*r->resp))) == NULL ||
	    sm_rpc_multi_create(SM_MAX(r->n, 1), "settings", &mc) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	protobuf_c_message_pack(&req.base, buf);
	sm_ring_start_healthy(r->snap, mc, buf, sz, (int)q->cfg.timeout_ms);
	{
		/* Once a majority answered, the rest get
		 * -querier.straggler-wait (or as long as the round took): a
		 * frozen ingester does not stall settings (fanout.c). */
		struct sm_quorum qw = { .nvoters = r->n, .need = need,
		    .grace_ns = q->cfg.straggler_ms > 0 ?
		    q->cfg.straggler_ms * 1000000 : SM_QUORUM_ALL };

		(void)sm_rpc_multi_wait_quorum(mc, &qw);
	}
	for (uint32_t i = 0; i < r->n; i++) {
		Smolder__V1__Response *resp;
		struct sm_err e;
		int st;

		if (!r->snap->healthy[i])
			continue;
		sm_err_clear(&e);
		st = sm_rpc_multi_response(mc, i, a, &resp, &e);
		if (st == 0 && resp->result_case !=
		    SMOLDER__V1__RESPONSE__RESULT_SETTINGS)
			st = sm_err_set(&e, SM_EPROTO, "no settings result");
		if (st != 0) {
			last = st;
			last_err = e;
			continue;
		}
		r->resp[i] = resp->settings;
		r->ok++;
	}
	if (r->ok < need) {
		if (last == SM_EMALFORMED)
			rv = sm_err_set(err, SM_EINVAL, "%s", last_err.msg);
		else
			rv = sm_err_set(err, SM_EUNAVAIL, "settings: %u of %u "
			    "ingesters answered, %u needed%s%s", r->ok, r->n,
			    need, last_err.msg[0] ? ": " : "", last_err.msg);
	}
out:
	sm_rpc_multi_destroy(mc);
	return (rv);
}

/* Write one register everywhere; *winner = the stored winner. */
int
qry_settings_put(struct querier *q, const char *tenant,
    Smolder__V1__TenantSetting *s, struct sm_arena *a,
    const Smolder__V1__TenantSetting **winner, struct sm_err *err)
{
	Smolder__V1__SettingsRequest sr = SMOLDER__V1__SETTINGS_REQUEST__INIT;
	struct set_round r;
	int rv;

	sr.tenant = (char *)tenant;
	sr.write = true;
	sr.setting = s;
	*winner = s;
	rv = round_run(q, &sr, a, &r, err);
	for (uint32_t i = 0; rv == 0 && i < r.n; i++) {
		if (r.resp[i] != NULL && r.resp[i]->n_settings == 1 &&
		    sm_setting_cmp(r.resp[i]->settings[0], *winner) > 0)
			*winner = r.resp[i]->settings[0];
	}
	round_fini(&r);
	return (rv);
}

static int
str_ptr_cmp(const void *a, const void *b)
{
	return (strcmp(*(char *const *)a, *(char *const *)b));
}

static int
name_cmp(const void *a, const void *b)
{
	const Smolder__V1__TenantSetting *x =
	    *(const Smolder__V1__TenantSetting *const *)a;
	const Smolder__V1__TenantSetting *y =
	    *(const Smolder__V1__TenantSetting *const *)b;

	return (strcmp(x->name, y->name));
}

/*
 * Every register of the tenant, merged over a majority, tombstones
 * included, sorted by name; members that answered with an older register
 * are repaired.
 */
int
qry_settings_list(struct querier *q, const char *tenant, struct sm_arena *a,
    Smolder__V1__TenantSetting ***out, size_t *nout, struct sm_err *err)
{
	Smolder__V1__SettingsRequest sr = SMOLDER__V1__SETTINGS_REQUEST__INIT;
	Smolder__V1__TenantSetting **all = NULL, **w = NULL;
	size_t nall = 0, nw = 0;
	struct set_round r;
	int rv;

	*out = NULL;
	*nout = 0;
	sr.tenant = (char *)tenant;
	if ((rv = round_run(q, &sr, a, &r, err)) != 0)
		goto out;
	for (uint32_t i = 0; i < r.n; i++)
		nall += r.resp[i] != NULL ? r.resp[i]->n_settings : 0;
	if (nall == 0)
		goto out;
	if ((all = sm_arena_alloc(a, nall * sizeof(*all))) == NULL ||
	    (w = sm_arena_alloc(a, nall * sizeof(*w))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	nall = 0;
	for (uint32_t i = 0; i < r.n; i++) {
		for (size_t j = 0; r.resp[i] != NULL &&
		    j < r.resp[i]->n_settings; j++)
			all[nall++] = r.resp[i]->settings[j];
	}
	qsort(all, nall, sizeof(*all), name_cmp);
	for (size_t i = 0; i < nall; i++) {
		if (nw > 0 && strcmp(w[nw - 1]->name, all[i]->name) == 0) {
			if (sm_setting_cmp(all[i], w[nw - 1]) > 0)
				w[nw - 1] = all[i];
		} else {
			w[nw++] = all[i];
		}
	}
	/* Read repair: a member that answered without the winner. */
	for (uint32_t i = 0; i < r.n && r.n > 1; i++) {
		if (r.resp[i] == NULL)
			continue;
		for (size_t k = 0; k < nw; k++) {
			bool has = false;

			for (size_t j = 0; j < r.resp[i]->n_settings; j++) {
				const Smolder__V1__TenantSetting *s =
				    r.resp[i]->settings[j];

				if (strcmp(s->name, w[k]->name) == 0 &&
				    sm_setting_cmp(s, w[k]) == 0)
					has = true;
			}
			if (!has) {
				Smolder__V1__SettingsRequest rr =
				    SMOLDER__V1__SETTINGS_REQUEST__INIT;
				Smolder__V1__Request req =
				    SMOLDER__V1__REQUEST__INIT;
				Smolder__V1__Response *resp;
				struct sm_err e;

				rr.tenant = (char *)tenant;
				rr.write = true;
				rr.setting = w[k];
				req.method_case =
				    SMOLDER__V1__REQUEST__METHOD_SETTINGS;
				req.settings = &rr;
				sm_err_clear(&e);
				if (sm_rpc_call_pb(r.snap->m[i]->client, &req,
				    (int)q->cfg.timeout_ms, a, &resp, &e) != 0)
					sm_warn("querier", "settings repair "
					    "failed\tmember=%s err=\"%s\"",
					    r.snap->m[i]->url, e.msg);
			}
		}
	}
	*out = w;
	*nout = nw;
out:
	round_fini(&r);
	return (rv);
}

int
qry_settings_tenants(struct querier *q, const char *prefix, struct sm_arena *a,
    char ***out, size_t *nout, struct sm_err *err)
{
	Smolder__V1__SettingsRequest sr = SMOLDER__V1__SETTINGS_REQUEST__INIT;
	struct set_round r;
	char **all = NULL;
	size_t nall = 0, n = 0;
	int rv;

	*out = NULL;
	*nout = 0;
	sr.tenant = "";
	sr.tenants_with = (char *)prefix;
	if ((rv = round_run(q, &sr, a, &r, err)) != 0)
		goto out;
	for (uint32_t i = 0; i < r.n; i++)
		nall += r.resp[i] != NULL ? r.resp[i]->n_tenants : 0;
	if (nall == 0)
		goto out;
	if ((all = sm_arena_alloc(a, nall * sizeof(*all))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < r.n; i++)
		for (size_t j = 0; r.resp[i] != NULL &&
		    j < r.resp[i]->n_tenants; j++)
			all[n++] = r.resp[i]->tenants[j];
	qsort(all, n, sizeof(*all), str_ptr_cmp);
	nall = 0;
	for (size_t i = 0; i < n; i++)
		if (nall == 0 || strcmp(all[nall - 1], all[i]) != 0)
			all[nall++] = all[i];
	*out = all;
	*nout = nall;
out:
	round_fini(&r);
	return (rv);
}

static Settings__V1__Setting *
setting_out(struct sm_arena *a, const Smolder__V1__TenantSetting *s)
{
	Settings__V1__Setting *o = sm_arena_alloc(a, sizeof(*o));

	if (o == NULL)
		return (NULL);
	settings__v1__setting__init(o);
	o->name = s->name;
	o->value = s->value;
	o->modifiedat = s->modified_at;
	return (o);
}

static int
m_get(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	Settings__V1__GetSettingsResponse *out;
	Smolder__V1__TenantSetting **w;
	const char *tenant;
	size_t nw;
	int rv;

	(void)msg;
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0 ||
	    (rv = qry_settings_list(q, tenant, call->arena, &w, &nw, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	settings__v1__get_settings_response__init(out);
	if (nw > 0 && (out->settings = sm_arena_alloc(call->arena,
	    nw * sizeof(*out->settings))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < nw; i++) {
		if (w[i]->deleted || strncmp(w[i]->name, QRY_SETTING_RESERVED,
		    strlen(QRY_SETTING_RESERVED)) == 0)
			continue;
		if ((out->settings[out->n_settings] = setting_out(call->arena,
		    w[i])) == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		out->n_settings++;
	}
	*resp = &out->base;
	return (0);
}

static int
check_name(const char *name, struct sm_err *err)
{
	if (name == NULL || name[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "setting name is required"));
	if (strlen(name) > SETTING_NAME_MAX)
		return (sm_err_set(err, SM_EINVAL, "setting name is %zu bytes, "
		    "limit %d", strlen(name), SETTING_NAME_MAX));
	if (strncmp(name, QRY_SETTING_RESERVED,
	    strlen(QRY_SETTING_RESERVED)) == 0)
		return (sm_err_set(err, SM_EINVAL, "setting names starting "
		    "with \"%s\" are Smolder's own (recording rules)",
		    QRY_SETTING_RESERVED));
	return (0);
}

/*
 * Store s (an update or a tombstone) for the tenant: SM_EEXIST when a
 * newer update is already stored; a delete that meets a newer tombstone
 * has nothing left to do, so that is not a conflict.
 */
static int
setting_store(struct querier *q, const char *tenant,
    Smolder__V1__TenantSetting *s, struct sm_arena *a,
    struct sm_err *err)
{
	const Smolder__V1__TenantSetting *win;
	int rv;

	if ((rv = qry_settings_put(q, tenant, s, a, &win, err)) != 0)
		return (rv);
	if (sm_setting_cmp(win, s) != 0 && !(s->deleted && win->deleted))
		return (sm_err_set(err, SM_EEXIST, "setting %s: a newer update "
		    "is already stored (modifiedAt %lld)", s->name,
		    (long long)win->modified_at));
	return (0);
}

static int
m_set(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Settings__V1__SetSettingsRequest *req =
	    (const Settings__V1__SetSettingsRequest *)msg;
	struct querier *q = arg;
	Settings__V1__SetSettingsResponse *out;
	Smolder__V1__TenantSetting s = SMOLDER__V1__TENANT_SETTING__INIT;
	const char *tenant;
	int rv;

	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0)
		return (rv);
	if (req->setting == NULL)
		return (sm_err_set(err, SM_EINVAL, "setting is required"));
	if ((rv = check_name(req->setting->name, err)) != 0)
		return (rv);
	s.name = req->setting->name;
	s.value = req->setting->value != NULL ? req->setting->value : "";
	if (strlen(s.value) > SETTING_VALUE_MAX)
		return (sm_err_set(err, SM_EINVAL, "setting value is %zu bytes, "
		    "limit %u", strlen(s.value), SETTING_VALUE_MAX));
	s.modified_at = req->setting->modifiedat > 0 ?
	    req->setting->modifiedat : sm_now_ms();
	if ((rv = setting_store(q, tenant, &s, call->arena, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	settings__v1__set_settings_response__init(out);
	if ((out->setting = setting_out(call->arena, &s)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	*resp = &out->base;
	return (0);
}

static int
m_delete(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Settings__V1__DeleteSettingsRequest *req =
	    (const Settings__V1__DeleteSettingsRequest *)msg;
	struct querier *q = arg;
	Settings__V1__DeleteSettingsResponse *out;
	Smolder__V1__TenantSetting s = SMOLDER__V1__TENANT_SETTING__INIT;
	const char *tenant;
	int rv;

	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0 ||
	    (rv = check_name(req->name, err)) != 0)
		return (rv);
	s.name = req->name;
	s.value = "";
	s.deleted = true;
	s.modified_at = sm_now_ms();
	if ((rv = setting_store(q, tenant, &s, call->arena, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	settings__v1__delete_settings_response__init(out);
	*resp = &out->base;
	return (0);
}

static int
m_feature_flags(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *msg, ProtobufCMessage **resp, struct sm_err *err)
{
	static const struct {
		const char *name;
		bool enabled;
		const char *desc;
	} flags[] = {
		{ "allowUtf8LabelNames", true, "Label names may be any valid "
		    "UTF-8 (label sanitization is off, as Pyroscope's "
		    "default)." },
		{ "pushApi", true, "push.v1.PusherService/Push is served; "
		    "retried samples are applied once by their ID." },
		{ "tenantSettings", true, "settings.v1.SettingsService keeps "
		    "per-tenant settings durably on the ingesters." },
	};
	Capabilities__V1__GetFeatureFlagsResponse *out;
	struct querier *q = arg;
	const char *tenant;
	int rv;

	(void)msg;
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	capabilities__v1__get_feature_flags_response__init(out);
	if ((out->feature_flags = sm_arena_alloc(call->arena,
	    SM_ARRAY_LEN(flags) * sizeof(*out->feature_flags))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < SM_ARRAY_LEN(flags); i++) {
		Capabilities__V1__FeatureFlag *f = sm_arena_alloc(call->arena,
		    sizeof(*f));

		if (f == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		capabilities__v1__feature_flag__init(f);
		f->name = (char *)flags[i].name;
		f->enabled = flags[i].enabled;
		f->description = (char *)flags[i].desc;
		out->feature_flags[out->n_feature_flags++] = f;
	}
	*resp = &out->base;
	return (0);
}

static int
m_version(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	Version__V1__VersionResponse *out;

	(void)arg;
	(void)msg;
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	version__v1__version_response__init(out);
	out->querierapi = 1;
	*resp = &out->base;
	return (0);
}

static void
vcs_unimplemented(struct sm_http_req *r, void *arg)
{
	(void)arg;
	sm_http_reply_error(r, 501, "unimplemented", "vcs.v1 (source code "
	    "links) is not supported by this server");
}

int
qry_settings_register(struct querier *q)
{
	static const char *const vcs[] = { "GithubApp", "GithubLogin",
		"GithubRefresh", "GetFile", "GetCommit", "GetCommits" };
	static const struct {
		const char *path;
		const ProtobufCMessageDescriptor *in;
		sm_connect_fn fn;
		unsigned scope;          /* auth.h: who may call it */
	} routes[] = {
		{ "/settings.v1.SettingsService/Get",
		    &settings__v1__get_settings_request__descriptor, m_get,
		    SM_SCOPE_READ },
		{ "/settings.v1.SettingsService/Set",
		    &settings__v1__set_settings_request__descriptor, m_set,
		    SM_SCOPE_ADMIN },
		{ "/settings.v1.SettingsService/Delete",
		    &settings__v1__delete_settings_request__descriptor,
		    m_delete, SM_SCOPE_ADMIN },
		{ "/capabilities.v1.FeatureFlagsService/GetFeatureFlags",
		    &capabilities__v1__get_feature_flags_request__descriptor,
		    m_feature_flags, SM_SCOPE_READ },
		{ "/version.v1.Version/Version",
		    &version__v1__version_request__descriptor, m_version,
		    SM_SCOPE_READ },
	};
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(routes); i++) {
		if ((rv = sm_connect_route_as(q->http, routes[i].scope,
		    routes[i].path, routes[i].in, routes[i].fn, q,
		    1u << 20)) != 0)
			return (rv);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(vcs); i++) {
		char path[64];

		(void)snprintf(path, sizeof(path), "/vcs.v1.VCSService/%s",
		    vcs[i]);
		if ((rv = sm_http_route_as(q->http, SM_SCOPE_READ, "POST", path,
		    vcs_unimplemented, q, 1u << 20)) != 0)
			return (rv);
	}
	return (0);
}
