/*
 * webui.c -- serve the embedded UI (contract in webui.h).
 *
 * One route per asset, registered at start: the router matches exact
 * paths, so there is no path parsing here and no way to reach anything
 * but the embedded files (no traversal).  ETags are computed once per
 * process into a table owned by the querier; handlers only read it.
 *
 * Browser hardening.  Every asset goes out with a Content-Security-Policy
 * that lets the page load scripts, styles and fetches from this origin
 * only (no inline script, no inline style: app.js sets styles through
 * the CSSOM, and a frame name that reached the DOM as markup could not
 * run), images also from data: URLs (the canvas export), and no framing
 * (frame-ancestors, and X-Frame-Options for older browsers); no Referer
 * leaves the UI, so a link out does not carry the query in its URL.
 */
#include "qry_int.h"
#include "webui.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/hash.h"
#include "common/auth.h"
#include "common/http.h"

#define UI_MAX_ASSETS 64
#define UI_CSP "default-src 'self'; script-src 'self'; style-src 'self'; " \
	"img-src 'self' data:; connect-src 'self'; object-src 'none'; " \
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

struct ui_route {
	const struct qry_ui_asset *asset;
	const char *ctype;
	char etag[24];                 /* "\"<16 hex>\"" */
	char path[96];
};

static struct ui_route ui_routes[UI_MAX_ASSETS];
static size_t ui_nroutes;

const char *
qry_ui_ctype(const char *name)
{
	static const struct {
		const char *ext;
		const char *ctype;
	} types[] = {
		{ ".html", "text/html; charset=utf-8" },
		{ ".js", "text/javascript; charset=utf-8" },
		{ ".css", "text/css; charset=utf-8" },
		{ ".svg", "image/svg+xml" },
		{ ".png", "image/png" },
		{ ".json", "application/json" },
	};
	const char *dot = strrchr(name, '.');

	if (dot != NULL) {
		for (size_t i = 0; i < SM_ARRAY_LEN(types); i++) {
			if (strcmp(dot, types[i].ext) == 0)
				return (types[i].ctype);
		}
	}
	return ("application/octet-stream");
}

bool
qry_ui_etag_matches(const char *inm, const char *etag)
{
	size_t n = strlen(etag);
	const char *p;

	if (inm == NULL)
		return (false);
	if (strcmp(inm, "*") == 0)
		return (true);
	for (p = inm; (p = strstr(p, etag)) != NULL; p += n) {
		/* W/"x" matches too: GET compares weakly (RFC 9110 13.1.2). */
		char after = p[n];

		if (after == '\0' || after == ',' || after == ' ')
			return (true);
	}
	return (false);
}

static void
ui_handler(struct sm_http_req *r, void *arg)
{
	const struct ui_route *u = arg;
	const char *m = sm_http_method(r);

	if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
		sm_http_set_header(r, "Allow", "GET, HEAD");
		sm_http_reply_text(r, 405, "method not allowed");
		return;
	}
	sm_http_set_header(r, "ETag", u->etag);
	sm_http_set_header(r, "Cache-Control", "no-cache");
	sm_http_set_header(r, "X-Content-Type-Options", "nosniff");
	sm_http_set_header(r, "Content-Security-Policy", UI_CSP);
	sm_http_set_header(r, "X-Frame-Options", "DENY");
	sm_http_set_header(r, "Referrer-Policy", "no-referrer");
	if (qry_ui_etag_matches(sm_http_header(r, "If-None-Match"), u->etag)) {
		sm_http_reply(r, 304, NULL, "", 0);
		return;
	}
	sm_http_reply(r, 200, u->ctype, u->asset->data, u->asset->len);
}

int
qry_webui_register(struct querier *q)
{
	int rv;

	/*
	 * The table is process-wide (the assets are); a second querier in
	 * one process (unit tests) reuses it, as the contents are identical.
	 */
	if (ui_nroutes == 0) {
		if (qry_ui_nassets > UI_MAX_ASSETS)
			return (SM_EINVAL);
		for (size_t i = 0; i < qry_ui_nassets; i++) {
			struct ui_route *u = &ui_routes[i];
			const struct qry_ui_asset *a = &qry_ui_assets[i];

			u->asset = a;
			u->ctype = qry_ui_ctype(a->name);
			snprintf(u->etag, sizeof(u->etag), "\"%016" PRIx64 "\"",
			    sm_hash(a->data, a->len));
			if (strcmp(a->name, "index.html") == 0)
				snprintf(u->path, sizeof(u->path), "/");
			else if ((size_t)snprintf(u->path, sizeof(u->path),
			    "/ui/%s", a->name) >= sizeof(u->path))
				return (SM_EINVAL);
		}
		ui_nroutes = qry_ui_nassets;
	}
	for (size_t i = 0; i < ui_nroutes; i++) {
		/* Public: the assets hold no tenant data; the page asks
		 * for a key or tenant and sends it with every API call. */
		if ((rv = sm_http_route_as(q->http, SM_SCOPE_PUBLIC, NULL,
		    ui_routes[i].path, ui_handler, &ui_routes[i], 0)) != 0)
			return (rv);
	}
	return (0);
}
