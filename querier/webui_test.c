/*
 * webui_test.c -- the embedded UI's table, content types and ETag matching
 * (serving over HTTP and the UI itself: tests/integration/test_webui.py).
 */
#include "sm_test.h"

#include <string.h>

#include "querier/webui.h"

static const struct qry_ui_asset *
find(const char *name)
{
	for (size_t i = 0; i < qry_ui_nassets; i++) {
		if (strcmp(qry_ui_assets[i].name, name) == 0)
			return (&qry_ui_assets[i]);
	}
	return (NULL);
}

static void
test_assets_embedded(void)
{
	const struct qry_ui_asset *html = find("index.html");
	const struct qry_ui_asset *js = find("app.js");

	SM_REQUIRE(html != NULL && js != NULL);
	SM_CHECK(html->len > 100 && memmem(html->data, html->len,
	    "/ui/app.js", 10) != NULL);
	SM_CHECK(js->len > 1000 && memmem(js->data, js->len,
	    "decodeFlamebearer", 17) != NULL);
	/* The generator adds one NUL past the end of every file. */
	SM_CHECK(js->data[js->len] == '\0');
	for (size_t i = 1; i < qry_ui_nassets; i++)
		SM_CHECK(strcmp(qry_ui_assets[i - 1].name,
		    qry_ui_assets[i].name) < 0);
}

static void
test_ctype(void)
{
	SM_CHECK(strcmp(qry_ui_ctype("index.html"),
	    "text/html; charset=utf-8") == 0);
	SM_CHECK(strcmp(qry_ui_ctype("app.js"),
	    "text/javascript; charset=utf-8") == 0);
	SM_CHECK(strcmp(qry_ui_ctype("app.css"), "text/css; charset=utf-8") == 0);
	SM_CHECK(strcmp(qry_ui_ctype("favicon.svg"), "image/svg+xml") == 0);
	SM_CHECK(strcmp(qry_ui_ctype("x.png"), "image/png") == 0);
	SM_CHECK(strcmp(qry_ui_ctype("README"), "application/octet-stream") == 0);
	SM_CHECK(strcmp(qry_ui_ctype("a.jsx"), "application/octet-stream") == 0);
}

static void
test_etag_matches(void)
{
	const char *e = "\"0123456789abcdef\"";

	SM_CHECK(!qry_ui_etag_matches(NULL, e));
	SM_CHECK(!qry_ui_etag_matches("", e));
	SM_CHECK(qry_ui_etag_matches("*", e));
	SM_CHECK(qry_ui_etag_matches("\"0123456789abcdef\"", e));
	SM_CHECK(qry_ui_etag_matches("W/\"0123456789abcdef\"", e));
	SM_CHECK(qry_ui_etag_matches("\"x\", \"0123456789abcdef\"", e));
	SM_CHECK(qry_ui_etag_matches("\"0123456789abcdef\",\"x\"", e));
	SM_CHECK(!qry_ui_etag_matches("\"0123456789abcde\"", e));
	SM_CHECK(!qry_ui_etag_matches("\"0123456789abcdef0\"", e));
	SM_CHECK(!qry_ui_etag_matches("0123456789abcdef", e));
}

SM_TEST_MAIN(
	{ "every ui/ file is embedded, sorted, NUL-terminated", test_assets_embedded },
	{ "content types by extension", test_ctype },
	{ "If-None-Match matching", test_etag_matches },
)
