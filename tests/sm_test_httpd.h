/*
 * sm_test_httpd.h -- a loopback sm_http server for the tests of HTTP
 * clients (header-only, like sm_test.h): the server side they talk to,
 * with the routes each test declares as a table.
 */
#ifndef SM_TEST_HTTPD_H
#define SM_TEST_HTTPD_H

#include <stddef.h>

#include "common/auth.h"
#include "common/http.h"
#include "common/sm.h"

struct sm_test_route {
	const char *method;     /* NULL: any method */
	const char *path;
	sm_http_fn fn;
	void *arg;
};

/*
 * A started server on 127.0.0.1 (an ephemeral port: sm_http_port) with
 * `threads` workers, 64 connections and a 5 s inactivity timeout,
 * serving routes[0..n) as public routes; NULL when it cannot be made.
 * The caller sm_http_destroy()s it.
 */
static inline struct sm_http *
sm_test_httpd_start(unsigned threads, const struct sm_test_route *routes,
    size_t n)
{
	struct sm_http_cfg cfg;
	struct sm_http *h;
	struct sm_err err;

	sm_http_cfg_default(&cfg);
	cfg.listen = "127.0.0.1:0";
	cfg.threads = threads;
	cfg.conn_limit = 64;
	cfg.conn_timeout_s = 5;
	sm_err_clear(&err);
	if (sm_http_create(&cfg, &h, &err) != 0)
		return (NULL);
	for (size_t i = 0; i < n; i++) {
		if (sm_http_route_as(h, SM_SCOPE_PUBLIC, routes[i].method,
		    routes[i].path, routes[i].fn, routes[i].arg, 0) != 0)
			goto fail;
	}
	if (sm_http_start(h, &err) != 0)
		goto fail;
	return (h);
fail:
	sm_http_destroy(h);
	return (NULL);
}

#endif /* SM_TEST_HTTPD_H */
