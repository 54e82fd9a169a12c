/*
 * status.c -- the /api/v1/status routes, /runtime_config and
 * /api/v1/tenant_limits; see status.h for the contract.
 */
#include "status.h"

#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "buf.h"

#ifndef SM_REVISION
#define SM_REVISION ""
#endif

#define YAML_TYPE "text/plain; charset=utf-8"

enum cfg_view { CV_CURRENT, CV_DIFF, CV_DEFAULT };

static void
reply_buf(struct sm_http_req *r, const char *ctype, struct sm_buf *b)
{
	if (sm_buf_error(b) != 0)
		sm_http_reply_error(r, 500, "internal", "out of memory");
	else
		sm_http_reply_buf(r, 200, ctype, b);
}

static void
buildinfo_handler(struct sm_http_req *r, void *arg)
{
	struct sm_buf b = SM_BUF_INIT;

	(void)arg;
	sm_buf_puts(&b, "{\"status\":\"success\",\"data\":{\"version\":");
	sm_buf_json_str(&b, SM_VERSION, strlen(SM_VERSION));
	sm_buf_puts(&b, ",\"revision\":");
	sm_buf_json_str(&b, SM_REVISION, strlen(SM_REVISION));
	sm_buf_puts(&b, ",\"branch\":\"\",\"buildUser\":\"\",\"buildDate\":\"\","
	    "\"goVersion\":\"\"}}\n");
	reply_buf(r, "application/json", &b);
	sm_buf_fini(&b);
}

static int
ent_cmp(const void *a, const void *b)
{
	const struct sm_flag_ent *x = *(const struct sm_flag_ent *const *)a;
	const struct sm_flag_ent *y = *(const struct sm_flag_ent *const *)b;

	return (strcmp(x->f->name, y->f->name));
}

/* Flags by name, one `name: value` line each. */
static void
config_reply(struct sm_http_req *r, const struct sm_status_cfg *c,
    enum cfg_view view)
{
	const struct sm_flags *fs = c->flags;
	const struct sm_flag_ent **v;
	struct sm_buf b = SM_BUF_INIT;

	if ((v = malloc((size_t)(fs->n + 1) * sizeof(*v))) == NULL) {
		sm_http_reply_error(r, 500, "internal", "out of memory");
		return;
	}
	for (uint32_t i = 0; i < fs->n; i++)
		v[i] = &fs->v[i];
	qsort(v, fs->n, sizeof(*v), ent_cmp);
	for (uint32_t i = 0; i < fs->n; i++) {
		const struct sm_flag *f = v[i]->f;
		char cur[4096], def[4096];
		int n;

		n = sm_flag_text(f, view == CV_DEFAULT ? NULL : v[i]->ptr, cur,
		    sizeof(cur));
		if (n < 0)
			continue;
		if (view == CV_DIFF && sm_flag_text(f, NULL, def,
		    sizeof(def)) >= 0 && strcmp(cur, def) == 0)
			continue;
		sm_buf_puts(&b, f->name);
		sm_buf_puts(&b, ": ");
		/* A JSON string is a YAML double-quoted scalar. */
		if (f->type == SM_FLAG_STRING)
			sm_buf_json_str(&b, cur, (size_t)n);
		else
			sm_buf_puts(&b, cur);
		sm_buf_putc(&b, '\n');
	}
	free(v);
	reply_buf(r, YAML_TYPE, &b);
	sm_buf_fini(&b);
}

static void
config_handler(struct sm_http_req *r, void *arg)
{
	config_reply(r, arg, CV_CURRENT);
}

static void
config_diff_handler(struct sm_http_req *r, void *arg)
{
	config_reply(r, arg, CV_DIFF);
}

static void
config_default_handler(struct sm_http_req *r, void *arg)
{
	config_reply(r, arg, CV_DEFAULT);
}

static void
runtime_config_handler(struct sm_http_req *r, void *arg)
{
	const struct sm_status_cfg *c = arg;
	const char *mode = sm_http_query(r, "mode");
	struct sm_limits def;
	struct sm_buf b = SM_BUF_INIT;

	if (mode != NULL && mode[0] != '\0' && strcmp(mode, "diff") != 0) {
		sm_http_reply_error(r, 400, "invalid_argument", "unknown mode "
		    "%.64s (diff, or none for every limit)", mode);
		return;
	}
	sm_limits_from_flags(c->flags, &def);
	if (sm_overrides_write_yaml(c->overrides, &def, mode != NULL &&
	    mode[0] != '\0', &b) != 0) {
		sm_buf_fini(&b);
		sm_http_reply_error(r, 500, "internal", "out of memory");
		return;
	}
	reply_buf(r, YAML_TYPE, &b);
	sm_buf_fini(&b);
}

static void
tenant_limits_handler(struct sm_http_req *r, void *arg)
{
	const struct sm_status_cfg *c = arg;
	const char *tenant;
	struct sm_limits def, lim;
	struct sm_buf b = SM_BUF_INIT;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	if ((rv = sm_http_tenant(r, c->multitenancy, &tenant, &err)) != 0) {
		sm_http_reply_rv(r, rv, &err);
		return;
	}
	sm_limits_from_flags(c->flags, &def);
	sm_overrides_get(c->overrides, tenant, &def, &lim);
	sm_limits_write_json(&lim, &b);
	reply_buf(r, "application/json", &b);
	sm_buf_fini(&b);
}

int
sm_status_routes(struct sm_http *h, const struct sm_status_cfg *cfg,
    struct sm_err *err)
{
	static const struct {
		unsigned scope;
		const char *path;
		sm_http_fn fn;
	} routes[] = {
		{ SM_SCOPE_PUBLIC, "/api/v1/status/buildinfo",
		    buildinfo_handler },
		{ SM_SCOPE_ADMIN, "/api/v1/status/config", config_handler },
		{ SM_SCOPE_ADMIN, "/api/v1/status/config/diff",
		    config_diff_handler },
		{ SM_SCOPE_ADMIN, "/api/v1/status/config/default",
		    config_default_handler },
		{ SM_SCOPE_ADMIN, "/runtime_config", runtime_config_handler },
		{ SM_SCOPE_READ, "/api/v1/tenant_limits",
		    tenant_limits_handler },
	};
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(routes); i++)
		if ((rv = sm_http_route_as(h, routes[i].scope, "GET",
		    routes[i].path, routes[i].fn, (void *)cfg, 0)) != 0)
			return (sm_err_set(err, rv, "status: route %s",
			    routes[i].path));
	return (0);
}
