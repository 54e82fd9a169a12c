/*
 * webui.h -- the embedded web UI, served by every process that
 * serves queries (the single binary and -target=querier).
 *
 * The files of ui/ are compiled into the binary by cmake/embed_ui.cmake
 * (a generated ui_assets.c holding qry_ui_assets[]), so the UI needs no
 * files on disk, no CDN and no network: it works offline.
 *
 * Routes (GET and HEAD; anything else is 405):
 *   /                  ui/index.html
 *   /ui/<file>         every other file of ui/ (app.js, app.css, ...)
 *
 * Caching: every answer carries a strong ETag (XXH3-64 of the bytes,
 * computed once at start) and `Cache-Control: no-cache`, so a browser keeps
 * the files but revalidates each load; If-None-Match with the current tag
 * answers 304 with no body.  File names are not content-hashed, hence
 * no-cache rather than a long max-age: a new binary must never be shadowed
 * by a stale app.js.  Content-Type comes from the extension (html, js, css,
 * svg, png, json; anything else application/octet-stream) and
 * X-Content-Type-Options: nosniff stops browsers guessing otherwise.
 *
 * The UI itself (ui/app.js) only calls the public query API (Connect
 * querier.v1 JSON, /render, /labels, /label-values, /api/apps), with
 * X-Scope-OrgID when the user gave a tenant, so it needs nothing the API
 * does not already offer; see the header comment of ui/app.js for the
 * client-side decisions (adhoc parsing, diff, URL state).
 */
#ifndef QRY_WEBUI_H
#define QRY_WEBUI_H

#include <stdbool.h>
#include <stddef.h>

struct qry_ui_asset {
	const char *name;              /* path under ui/, e.g. "app.js" */
	const unsigned char *data;     /* the file's bytes */
	size_t len;
};

/* Generated (ui_assets.c): the files of ui/, sorted by name. */
extern const struct qry_ui_asset qry_ui_assets[];
extern const size_t qry_ui_nassets;

/* The Content-Type served for a file name (by its extension). */
const char *qry_ui_ctype(const char *name);

/*
 * True when the If-None-Match header value `inm` (NULL when absent) names
 * `etag` (the quoted tag): "*", the tag alone, or the tag in a
 * comma-separated list, weak (W/) or not (RFC 9110 13.1.2: GET compares
 * weakly).
 */
bool qry_ui_etag_matches(const char *inm, const char *etag);

#endif /* QRY_WEBUI_H */
