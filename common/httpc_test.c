/*
 * httpc_test.c -- the HTTP client (httpc.h) against a live loopback
 * server (common/http.h): the short forms, every method, the callbacks
 * (headers, body, sending), stopping, cancelling, timeouts, bad input,
 * a dead port, and concurrent requests.
 */
#include "common/httpc.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/http.h"
#include "common/log.h"

#include "sm_test.h"
#include "sm_test_httpd.h"

static struct sm_http *srv;
static char base[64];

/* Any method: the method, the body's length and X-Test in the answer. */
static void
echo(struct sm_http_req *r, void *arg)
{
	const char *x = sm_http_header(r, "X-Test");
	size_t len = 0;

	(void)arg;
	(void)sm_http_body(r, &len);
	sm_http_set_header(r, "X-Echo", sm_http_method(r));
	sm_http_reply_text(r, 200, "%s %zu %s", sm_http_method(r), len,
	    x != NULL ? x : "-");
}

/* A slow endless body (bounded: 100 pieces 20 ms apart). */
struct drip {
	int n;
};

static int
drip_fn(void *arg, struct sm_buf *out)
{
	struct drip *d = arg;

	usleep(20000);
	sm_buf_puts(out, "drip\n");
	return (++d->n >= 100 ? 1 : 0);
}

static void
drip(struct sm_http_req *r, void *arg)
{
	struct drip *d = sm_calloc(1, sizeof(*d));

	(void)arg;
	if (d == NULL) {
		sm_http_reply_text(r, 500, "out of memory");
		return;
	}
	sm_http_reply_stream(r, 200, "text/plain", drip_fn, sm_free, d);
}

static bool
srv_start(void)
{
	static const struct sm_test_route routes[] = {
		{ NULL, "/echo", echo, NULL },
		{ "GET", "/drip", drip, NULL },
	};

	sm_log_set_level(SM_LOG_ERROR);
	srv = sm_test_httpd_start(4, routes, SM_ARRAY_LEN(routes));
	if (srv == NULL)
		return (false);
	snprintf(base, sizeof(base), "http://127.0.0.1:%u",
	    sm_http_port(srv));
	return (true);
}

static void
test_short(void)
{
	static const char *const hdr[] = { "X-Test: short", NULL };
	struct sm_buf ans = SM_BUF_INIT;
	struct sm_httpc_req rq = { 0 };
	struct sm_err err;
	char url[128];
	int status = -1;

	SM_REQUIRE(srv_start());
	snprintf(url, sizeof(url), "%s/echo", base);
	rq.url = url;
	rq.headers = hdr;
	rq.body = "hello";
	rq.len = 5;
	rq.timeout_ms = 5000;
	sm_err_clear(&err);
	SM_CHECK_EQ(sm_httpc_post(&rq, &status, &ans, &err), 0);
	SM_CHECK_EQ(status, 200);
	SM_CHECK(ans.len >= 13 && memcmp(ans.b, "POST 5 short\n", 13) == 0);
	sm_buf_reset(&ans);
	SM_CHECK_EQ(sm_httpc_get(&rq, &status, &ans, &err), 0);
	SM_CHECK_EQ(status, 200);
	SM_CHECK(ans.len >= 11 && memcmp(ans.b, "GET 0 short", 11) == 0);
	/* a GET answer over max_answer: SM_ETOOBIG */
	sm_buf_reset(&ans);
	rq.max_answer = 4;
	SM_CHECK_EQ(sm_httpc_get(&rq, &status, &ans, &err), SM_ETOOBIG);
	SM_CHECK_EQ(status, 0);
	/* a POST answer is cut there instead */
	sm_buf_reset(&ans);
	SM_CHECK_EQ(sm_httpc_post(&rq, &status, &ans, &err), 0);
	SM_CHECK_EQ(ans.len, 4u);
	sm_buf_fini(&ans);
}

struct seen {
	char echo[32];
	int nsend;
	int nstatus;
	size_t body;
	size_t stop_after;
};

static void
seen_header(void *arg, const char *name, const char *value)
{
	struct seen *s = arg;

	if (name == NULL)
		s->nstatus++;
	else if (strcasecmp(name, "x-echo") == 0)
		snprintf(s->echo, sizeof(s->echo), "%s", value);
}

static bool
seen_body(void *arg, int status, const void *p, size_t n)
{
	struct seen *s = arg;

	(void)p;
	if (status != 200)
		return (false);
	s->body += n;
	return (s->stop_after == 0 || s->body < s->stop_after);
}

static void
seen_send(void *arg)
{
	((struct seen *)arg)->nsend++;
}

static void
test_methods(void)
{
	static const char *const methods[] = { "GET", "PUT", "DELETE",
	    "HEAD", "POST", "PATCH" };
	char url[128];

	snprintf(url, sizeof(url), "%s/echo", base);
	for (size_t i = 0; i < SM_ARRAY_LEN(methods); i++) {
		struct seen s = { 0 };
		struct sm_httpc_req rq = { .url = url, .method = methods[i],
		    .body = "0123456789", .len = 10, .timeout_ms = 5000,
		    .connect_timeout_ms = 1000, .cb_arg = &s,
		    .on_header = seen_header, .on_body = seen_body,
		    .on_send = seen_send };
		struct sm_httpc_resp resp;
		struct sm_err err;

		sm_err_clear(&err);
		SM_CHECKF(sm_httpc_do(&rq, &resp, NULL, &err) == 0, "%s: %s",
		    methods[i], err.msg);
		SM_CHECK_EQ(resp.status, 200);
		SM_CHECK(!resp.stopped && resp.reason == NULL);
		SM_CHECK_STR(s.echo, methods[i]);
		SM_CHECK(s.nsend >= 1);
		SM_CHECK(s.nstatus >= 1);
		/* HEAD reads no body; PUT and POST carry theirs */
		if (strcmp(methods[i], "HEAD") == 0)
			SM_CHECK_EQ(s.body, 0u);
		else
			SM_CHECK(s.body > 0);
	}
	{
		/* the answer buffer without on_body */
		struct sm_buf ans = SM_BUF_INIT;
		struct sm_httpc_req rq = { .url = url, .method = "PUT",
		    .body = "abc", .len = 3, .timeout_ms = 5000 };
		struct sm_httpc_resp resp;
		struct sm_err err;

		SM_CHECK_EQ(sm_httpc_do(&rq, &resp, &ans, &err), 0);
		SM_CHECK(ans.len >= 7 && memcmp(ans.b, "PUT 3 -", 7) == 0);
		sm_buf_fini(&ans);
	}
}

/* A request from inside a callback of another on the same thread. */
struct nested {
	int status;
	int rv;
	bool done;
};

static bool
nested_body(void *arg, int status, const void *p, size_t n)
{
	struct nested *ns = arg;
	struct sm_httpc_req rq = { .timeout_ms = 5000 };
	struct sm_err err;
	char url[128];

	(void)status;
	(void)p;
	(void)n;
	if (!ns->done) {
		snprintf(url, sizeof(url), "%s/echo", base);
		rq.url = url;
		ns->rv = sm_httpc_get(&rq, &ns->status, NULL, &err);
		ns->done = true;
	}
	return (true);
}

static void
test_nested(void)
{
	struct nested ns = { 0 };
	char url[128];
	struct sm_httpc_req rq = { .url = url, .method = "GET",
	    .timeout_ms = 5000, .cb_arg = &ns, .on_body = nested_body };
	struct sm_httpc_resp resp;
	struct sm_err err;

	snprintf(url, sizeof(url), "%s/echo", base);
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), 0);
	SM_CHECK_EQ(resp.status, 200);
	SM_CHECK(ns.done);
	SM_CHECK_EQ(ns.rv, 0);
	SM_CHECK_EQ(ns.status, 200);
	/* and the thread's own handle works again afterwards */
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), 0);
}

static void
test_stop_timeout(void)
{
	char url[128];
	struct seen s = { .stop_after = 10 };
	struct sm_httpc_req rq = { .url = url, .method = "GET",
	    .timeout_ms = 5000, .cb_arg = &s, .on_body = seen_body };
	struct sm_httpc_resp resp;
	struct sm_err err;

	snprintf(url, sizeof(url), "%s/drip", base);
	/* on_body says stop: success, stopped */
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), 0);
	SM_CHECK(resp.stopped);
	SM_CHECK_EQ(resp.status, 200);
	SM_CHECK(s.body >= 10);
	/* the whole-request timeout, with the status already in (the drip
	 * takes 2 s: only the timeout ends it with SM_ETIMEDOUT) */
	memset(&s, 0, sizeof(s));
	rq.timeout_ms = 150;
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_ETIMEDOUT);
	SM_CHECK_EQ(resp.status, 200);
	SM_CHECK(resp.reason != NULL && !resp.unsent);
}

struct canceller {
	atomic_bool flag;
	atomic_size_t body;
};

static bool
cancel_body(void *arg, int status, const void *p, size_t n)
{
	struct canceller *c = arg;

	(void)status;
	(void)p;
	atomic_fetch_add(&c->body, n);
	return (true);
}

/* Cancel once the first piece of the body is in: the request is surely
 * in flight then (the drip goes on for 2 s). */
static void *
cancel_main(void *arg)
{
	struct canceller *c = arg;

	for (int i = 0; i < 10000 && atomic_load(&c->body) == 0; i++)
		usleep(1000);
	atomic_store(&c->flag, true);
	return (NULL);
}

static void
test_cancel(void)
{
	struct canceller c;
	char url[128];
	struct sm_httpc_req rq = { .url = url, .method = "GET",
	    .timeout_ms = 10000, .cancel = &c.flag, .cb_arg = &c,
	    .on_body = cancel_body };
	struct sm_httpc_resp resp;
	struct sm_err err;
	pthread_t t;

	atomic_init(&c.flag, false);
	atomic_init(&c.body, 0);
	snprintf(url, sizeof(url), "%s/drip", base);
	SM_REQUIRE(pthread_create(&t, NULL, cancel_main, &c) == 0);
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_ECLOSED);
	pthread_join(t, NULL);
	/* ended by the cancel, not by the drip's end */
	SM_CHECK(atomic_load(&c.body) > 0 && atomic_load(&c.body) < 100 * 5);
	/* already set: no request at all goes far */
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_ECLOSED);
}

static void
test_bad(void)
{
	char url[128];
	struct sm_httpc_req rq = { .timeout_ms = 1000 };
	struct sm_httpc_resp resp;
	struct sm_err err;
	int status = -1;

	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_EINVAL);
	rq.url = "ftp://127.0.0.1/";
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_httpc_get(&rq, &status, NULL, &err), SM_EINVAL);
	SM_CHECK_EQ(status, 0);
	snprintf(url, sizeof(url), "%s/echo", base);
	rq.url = url;
	rq.method = "get";
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_EINVAL);
	rq.method = "";
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_EINVAL);
	rq.method = "GET\r\nX: y";
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_EINVAL);
	/* nobody listening: unavailable, and nothing was sent */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/x",
	    sm_test_free_port());
	rq.method = "POST";
	SM_CHECK_EQ(sm_httpc_do(&rq, &resp, NULL, &err), SM_EUNAVAIL);
	SM_CHECK(resp.unsent && resp.reason != NULL && resp.status == 0);
	SM_CHECK(err.msg[0] != '\0');
}

static void
test_many(void)
{
	char url[3][128];
	struct seen s[3] = { { .stop_after = 0 } };
	struct sm_httpc_req rq[3];
	struct sm_httpc_resp resp[3];
	struct sm_err err[3];
	int rv[3];

	snprintf(url[0], sizeof(url[0]), "%s/echo", base);
	snprintf(url[1], sizeof(url[1]), "http://127.0.0.1:%d/",
	    sm_test_free_port());
	snprintf(url[2], sizeof(url[2]), "%s/echo", base);
	for (int i = 0; i < 3; i++)
		rq[i] = (struct sm_httpc_req){ .url = url[i], .method = "GET",
		    .timeout_ms = 5000, .cb_arg = &s[i],
		    .on_header = seen_header };
	SM_CHECK_EQ(sm_httpc_many(rq, resp, rv, err, 3), 0);
	SM_CHECK_EQ(rv[0], 0);
	SM_CHECK_EQ(resp[0].status, 200);
	SM_CHECK_STR(s[0].echo, "GET");
	SM_CHECK_EQ(rv[1], SM_EUNAVAIL);
	SM_CHECK(resp[1].unsent);
	SM_CHECK_EQ(rv[2], 0);
	SM_CHECK_STR(s[2].echo, "GET");
	SM_CHECK_EQ(sm_httpc_many(rq, resp, rv, err, 0), 0);
	sm_http_destroy(srv);
	srv = NULL;
}

SM_TEST_MAIN(
	{ "post and get: status, answer, bounds", test_short },
	{ "every method, headers, body and sending callbacks", test_methods },
	{ "a request from inside a callback", test_nested },
	{ "on_body stops a stream; a timeout mid-body keeps the status",
	    test_stop_timeout },
	{ "cancel from another thread ends a transfer", test_cancel },
	{ "bad URL, bad method, a dead port", test_bad },
	{ "concurrent requests, one failing", test_many },
)
