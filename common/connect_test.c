/*
 * connect_test.c -- Connect unary calls against a real sm_http server on
 * 127.0.0.1 port 0, spoken to over raw sockets, so what is checked is what
 * a connect-go client or the Pyroscope UI sees on the wire: statuses,
 * Content-Type and Content-Encoding, bodies byte for byte.
 *
 * The test service echoes a querier.v1.SelectSeriesRequest into a
 * SelectSeriesResponse (the request's fields become labels, `limit`
 * points of value `step`), and fails on demand with the SM_E* code named
 * by profileTypeID.
 */
#include "sm_test.h"
#include "sm_test_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/arena.h"
#include "common/byteorder.h"
#include "common/buf.h"
#include "common/connect.h"
#include "common/gz.h"
#include "common/http.h"
#include "common/pbjson.h"
#include "querier/v1/querier.pb-c.h"

#define PATH_SERIES "/querier.v1.QuerierService/SelectSeries"
#define PATH_FAIL "/test.v1.TestService/Fail"
#define PATH_NOTHING "/test.v1.TestService/Nothing"
#define PATH_SMALL "/test.v1.TestService/Small"

#define CT_PROTO "Content-Type: application/proto\r\n"
#define CT_JSON "Content-Type: application/json\r\n"

/* --- the client ----------------------------------------------------------- */

/*
 * POST `body` to `path` with extra header lines `hdrs` (each ending in
 * \r\n) on a fresh connection.
 */
static int
cli_post(unsigned port, const char *path, const char *hdrs,
    const void *body, size_t len, struct sm_test_resp *rs)
{
	char head[2048];
	int fd, rv, n;

	n = snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\nHost: t\r\n"
	    "Connection: close\r\nContent-Length: %zu\r\n%s\r\n", path, len,
	    hdrs);
	if (n < 0 || (size_t)n >= sizeof(head) ||
	    (fd = sm_test_connect(port, 5000)) < 0)
		return (-1);
	rv = sm_test_send(fd, head, (size_t)n) == 0 &&
	    sm_test_send(fd, body, len) == 0 ? sm_test_read_resp(fd, rs) : -1;
	close(fd);
	return (rv);
}

static int
cli_post_str(unsigned port, const char *path, const char *hdrs,
    const char *body, struct sm_test_resp *rs)
{
	return (cli_post(port, path, hdrs, body, strlen(body), rs));
}

/* --- the service ---------------------------------------------------------- */

static int
add_label(struct sm_arena *a, Types__V1__Series *s, const char *name,
    const char *value)
{
	Types__V1__LabelPair *lp = sm_arena_alloc(a, sizeof(*lp));

	if (lp == NULL)
		return (SM_ENOMEM);
	types__v1__label_pair__init(lp);
	lp->name = (char *)name;
	lp->value = (char *)value;
	s->labels[s->n_labels++] = lp;
	return (0);
}

static int
h_echo(void *arg, struct sm_connect_call *call, const ProtobufCMessage *req,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Querier__V1__SelectSeriesRequest *r =
	    (const Querier__V1__SelectSeriesRequest *)req;
	struct sm_arena *a = call->arena;
	Querier__V1__SelectSeriesResponse *out;
	Types__V1__Series *s, **ss;
	const char *tenant = sm_http_header(call->http, "X-Scope-OrgID");
	char *dl;
	size_t np = r->limit > 0 && r->limit < 100000 ? (size_t)r->limit : 0;

	SM_CHECK(req->descriptor == &querier__v1__select_series_request__descriptor);
	SM_CHECK(arg == (void *)&h_echo);
	if ((out = sm_arena_alloc(a, sizeof(*out))) == NULL ||
	    (s = sm_arena_alloc(a, sizeof(*s))) == NULL ||
	    (ss = sm_arena_alloc(a, sizeof(*ss))) == NULL ||
	    (dl = sm_arena_alloc(a, 32)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "echo: out of memory"));
	querier__v1__select_series_response__init(out);
	types__v1__series__init(s);
	ss[0] = s;
	out->series = ss;
	out->n_series = 1;
	if ((s->labels = sm_arena_calloc(a, 4 + r->n_group_by,
	    sizeof(*s->labels))) == NULL ||
	    (s->points = sm_arena_calloc(a, np + 1, sizeof(*s->points))) ==
	    NULL)
		return (sm_err_set(err, SM_ENOMEM, "echo: out of memory"));
	if (call->deadline_ns == 0)
		snprintf(dl, 32, "none");
	else
		snprintf(dl, 32, "%lld", (long long)((call->deadline_ns -
		    sm_mono_ns()) / 1000000));
	add_label(a, s, "profile_type", r->profile_typeid);
	add_label(a, s, "selector", r->label_selector);
	add_label(a, s, "tenant", tenant != NULL ? tenant : "-");
	add_label(a, s, "deadline", dl);
	for (size_t i = 0; i < r->n_group_by; i++)
		add_label(a, s, "group_by", r->group_by[i]);
	for (size_t i = 0; i < np; i++) {
		Types__V1__Point *p = sm_arena_alloc(a, sizeof(*p));

		if (p == NULL)
			return (sm_err_set(err, SM_ENOMEM, "echo: oom"));
		types__v1__point__init(p);
		p->value = r->step;
		p->timestamp = r->start + (int64_t)i * 1000;
		s->points[s->n_points++] = p;
	}
	*resp = &out->base;
	return (0);
}

static const struct {
	const char *name;
	int rv, status;
	const char *code;
} fail_cases[] = {
	{ "EINVAL", SM_EINVAL, 400, "invalid_argument" },
	{ "EMALFORMED", SM_EMALFORMED, 400, "invalid_argument" },
	{ "ETOOBIG", SM_ETOOBIG, 400, "invalid_argument" },
	{ "ELIMIT", SM_ELIMIT, 429, "resource_exhausted" },
	{ "ENOMEM", SM_ENOMEM, 429, "resource_exhausted" },
	{ "EAUTH", SM_EAUTH, 401, "unauthenticated" },
	{ "ENOTFOUND", SM_ENOTFOUND, 404, "not_found" },
	{ "EEXIST", SM_EEXIST, 409, "already_exists" },
	{ "EUNAVAIL", SM_EUNAVAIL, 503, "unavailable" },
	{ "ECLOSED", SM_ECLOSED, 503, "unavailable" },
	{ "ETIMEDOUT", SM_ETIMEDOUT, 504, "deadline_exceeded" },
	{ "EUNSUPPORTED", SM_EUNSUPPORTED, 501, "unimplemented" },
	{ "ECORRUPT", SM_ECORRUPT, 500, "data_loss" },
	{ "EIO", SM_EIO, 500, "internal" },
	{ "EPROTO", SM_EPROTO, 500, "internal" },
	{ "EINTERNAL", SM_EINTERNAL, 500, "internal" },
	{ "ERRNO", -5, 500, "internal" },
};

static int
h_fail(void *arg, struct sm_connect_call *call, const ProtobufCMessage *req,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Querier__V1__SelectSeriesRequest *r =
	    (const Querier__V1__SelectSeriesRequest *)req;

	if (strcmp(r->label_selector, "nomsg") == 0)
		return (SM_EUNAVAIL);
	for (size_t i = 0; i < SM_ARRAY_LEN(fail_cases); i++) {
		if (strcmp(fail_cases[i].name, r->profile_typeid) == 0) {
			/* A response set on failure is ignored. */
			*resp = (ProtobufCMessage *)(uintptr_t)req;
			return (sm_err_set(err, fail_cases[i].rv, "failing "
			    "with %s: \"%s\"", r->profile_typeid,
			    r->label_selector));
		}
	}
	return (sm_err_set(err, SM_EINVAL, "no such case"));
}

static int
h_nothing(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sm_err *err)
{
	return (0);
}

static struct sm_http *
srv_start(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h = NULL;
	struct sm_err err;

	sm_http_cfg_default(&cfg);
	cfg.listen = "127.0.0.1:0";
	cfg.threads = 2;
	cfg.conn_timeout_s = 5;
	sm_err_clear(&err);
	if (sm_http_create(&cfg, &h, &err) != 0) {
		fprintf(stderr, "create: %s\n", err.msg);
		return (NULL);
	}
	SM_CHECK(sm_connect_route(h, PATH_SERIES,
	    &querier__v1__select_series_request__descriptor, h_echo,
	    (void *)&h_echo, 0) == 0);
	SM_CHECK(sm_connect_route(h, PATH_FAIL,
	    &querier__v1__select_series_request__descriptor, h_fail, NULL,
	    0) == 0);
	SM_CHECK(sm_connect_route(h, PATH_NOTHING,
	    &querier__v1__select_series_request__descriptor, h_nothing, NULL,
	    0) == 0);
	SM_CHECK(sm_connect_route(h, PATH_SMALL,
	    &querier__v1__select_series_request__descriptor, h_echo,
	    (void *)&h_echo, 1024) == 0);
	if (sm_http_start(h, &err) != 0) {
		fprintf(stderr, "start: %s\n", err.msg);
		sm_http_destroy(h);
		return (NULL);
	}
	return (h);
}

/* --- helpers -------------------------------------------------------------- */

/* Pack r into a malloc'd buffer. */
static uint8_t *
pack(const ProtobufCMessage *m, size_t *len)
{
	uint8_t *p;

	*len = protobuf_c_message_get_packed_size(m);
	SM_REQUIRE((p = malloc(*len + 1)) != NULL);
	SM_REQUIRE(protobuf_c_message_pack(m, p) == *len);
	return (p);
}

static Querier__V1__SelectSeriesResponse *
unpack_resp(const struct sm_test_resp *rs)
{
	Querier__V1__SelectSeriesResponse *r;

	r = querier__v1__select_series_response__unpack(NULL, rs->len,
	    rs->body);
	SM_REQUIRE(r != NULL);
	return (r);
}

static const char *
label(const Querier__V1__SelectSeriesResponse *r, const char *name)
{
	if (r->n_series != 1)
		return (NULL);
	for (size_t i = 0; i < r->series[0]->n_labels; i++) {
		if (strcmp(r->series[0]->labels[i]->name, name) == 0)
			return (r->series[0]->labels[i]->value);
	}
	return (NULL);
}

/* A Connect error: status, JSON content type, code, message substring. */
static void
check_error(const struct sm_test_resp *rs, int status, const char *code,
    const char *msg)
{
	char want[128];

	SM_CHECK_EQ(rs->status, status);
	SM_CHECK_STR(sm_test_resp_header(rs, "Content-Type"), "application/json");
	SM_CHECK(sm_test_resp_header(rs, "Content-Encoding") == NULL);
	snprintf(want, sizeof(want), "{\"code\":\"%s\",\"message\":\"", code);
	SM_CHECKF(strncmp((const char *)rs->body, want, strlen(want)) == 0,
	    "body %s, want %s...", rs->body, want);
	SM_CHECK(sm_test_resp_header(rs, "X-Request-Id") != NULL);
	if (strcmp(code, "internal") == 0) {
		/* Internal errors reach the client generic (http.c). */
		char gen[128];

		snprintf(gen, sizeof(gen), "internal error (request id %.64s)\"}",
		    sm_test_resp_header(rs, "X-Request-Id") != NULL ?
		    sm_test_resp_header(rs, "X-Request-Id") : "?");
		SM_CHECKF(strstr((const char *)rs->body, gen) != NULL,
		    "body %s, want ...%s", rs->body, gen);
		SM_CHECKF(msg[0] == '\0' ||
		    strstr((const char *)rs->body, msg) == NULL,
		    "body %s shows the internal message", rs->body);
		return;
	}
	SM_CHECKF(strstr((const char *)rs->body, msg) != NULL,
	    "body %s, want ...%s...", rs->body, msg);
}

/* --- tests ---------------------------------------------------------------- */

static void
test_codes(void)
{
	static const struct {
		const char *code;
		int status;
	} st[] = {
		{ "canceled", 499 }, { "unknown", 500 },
		{ "invalid_argument", 400 }, { "deadline_exceeded", 504 },
		{ "not_found", 404 }, { "already_exists", 409 },
		{ "permission_denied", 403 }, { "resource_exhausted", 429 },
		{ "failed_precondition", 400 }, { "aborted", 409 },
		{ "out_of_range", 400 }, { "unimplemented", 501 },
		{ "internal", 500 }, { "unavailable", 503 },
		{ "data_loss", 500 }, { "unauthenticated", 401 },
		{ "no_such_code", 500 }, { "", 500 }, { NULL, 500 },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(st); i++)
		SM_CHECK_EQ(sm_connect_status(st[i].code), st[i].status);
	for (size_t i = 0; i < SM_ARRAY_LEN(fail_cases); i++) {
		int status = 0;

		SM_CHECK_STR(sm_connect_code_for(fail_cases[i].rv, &status),
		    fail_cases[i].code);
		SM_CHECK_EQ(status, fail_cases[i].status);
	}
	SM_CHECK_STR(sm_connect_code_for(SM_ELIMIT, NULL),
	    "resource_exhausted");
}

static void
test_proto_call(void)
{
	Querier__V1__SelectSeriesRequest r =
	    QUERIER__V1__SELECT_SERIES_REQUEST__INIT;
	Querier__V1__SelectSeriesResponse *out;
	char *gb[] = { "pod", "node" };
	struct sm_http *h;
	struct sm_test_resp rs;
	uint8_t *body;
	size_t len;

	SM_REQUIRE((h = srv_start()) != NULL);
	r.profile_typeid = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
	r.label_selector = "{service_name=\"a\"}";
	r.start = 1000;
	r.end = 2000;
	SM_PB_REPEATED(r, group_by, gb);
	r.step = 15;
	r.limit = 3;
	body = pack(&r.base, &len);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_PROTO
	    "Connect-Protocol-Version: 1\r\nX-Scope-OrgID: t1\r\n", body, len,
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"), "application/proto");
	SM_CHECK(sm_test_resp_header(&rs, "Content-Encoding") == NULL);
	out = unpack_resp(&rs);
	SM_CHECK_STR(label(out, "profile_type"),
	    "process_cpu:cpu:nanoseconds:cpu:nanoseconds");
	SM_CHECK_STR(label(out, "selector"), "{service_name=\"a\"}");
	SM_CHECK_STR(label(out, "tenant"), "t1");
	SM_CHECK_STR(label(out, "deadline"), "none");
	SM_CHECK_EQ(out->series[0]->n_labels, 6);
	SM_CHECK_STR(out->series[0]->labels[5]->value, "node");
	SM_REQUIRE(out->series[0]->n_points == 3);
	SM_CHECK(out->series[0]->points[2]->value == 15);
	SM_CHECK_EQ(out->series[0]->points[2]->timestamp, 3000);
	querier__v1__select_series_response__free_unpacked(out, NULL);
	sm_test_resp_free(&rs);
	free(body);
	sm_http_destroy(h);
}

static void
test_json_call(void)
{
	static const char req[] = "{\"profileTypeID\":\"cpu\","
	    "\"labelSelector\":\"{}\",\"start\":1000,\"end\":\"2000\","
	    "\"groupBy\":[\"pod\"],\"step\":15,\"limit\":2,\"extra\":[1]}";
	static const char want[] = "{\"series\":[{\"labels\":["
	    "{\"name\":\"profile_type\",\"value\":\"cpu\"},"
	    "{\"name\":\"selector\",\"value\":\"{}\"},"
	    "{\"name\":\"tenant\",\"value\":\"-\"},"
	    "{\"name\":\"deadline\",\"value\":\"none\"},"
	    "{\"name\":\"group_by\",\"value\":\"pod\"}],"
	    "\"points\":[{\"value\":15,\"timestamp\":\"1000\"},"
	    "{\"value\":15,\"timestamp\":\"2000\"}]}]}";
	static const char *const cts[] = {
		CT_JSON,
		"Content-Type: application/json; charset=utf-8\r\n",
		"Content-Type: Application/JSON;charset=UTF-8\r\n",
		"Content-Type: application/json; charset=\"utf-8\"\r\n",
	};
	struct sm_http *h;
	struct sm_test_resp rs;

	SM_REQUIRE((h = srv_start()) != NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(cts); i++) {
		SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, cts[i],
		    req, &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"),
		    "application/json");
		SM_CHECK_STR((const char *)rs.body, want);
		sm_test_resp_free(&rs);
	}
	/* The proto codec also takes the charset parameter. */
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES,
	    "Content-Type: application/proto; charset=utf-8\r\n", "", 0,
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"), "application/proto");
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_content_types(void)
{
	static const char *const bad[] = {
		"",
		"Content-Type: text/plain\r\n",
		"Content-Type: application/grpc\r\n",
		"Content-Type: application/grpc+proto\r\n",
		"Content-Type: application/protobuf\r\n",
		"Content-Type: application/x-protobuf\r\n",
		"Content-Type: application/json; charset=latin1\r\n",
		"Content-Type: application/json;\r\n",
		"Content-Type: application/json; x=y\r\n",
		"Content-Type: application/jsonx\r\n",
	};
	struct sm_http *h;
	struct sm_test_resp rs;

	SM_REQUIRE((h = srv_start()) != NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++) {
		SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, bad[i],
		    "{}", &rs) == 0);
		check_error(&rs, 415, "unimplemented", "unsupported content "
		    "type");
		SM_CHECK_STR(sm_test_resp_header(&rs, "Accept-Post"),
		    "application/json, application/proto, application/grpc-web"
		    "+proto, application/grpc-web+json, application/grpc-web-"
		    "text");
		sm_test_resp_free(&rs);
	}
	SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES,
	    "Content-Type: text/plain\r\n", "{}", &rs) == 0);
	SM_CHECK_STR((const char *)rs.body, "{\"code\":\"unimplemented\","
	    "\"message\":\"unsupported content type \\\"text/plain\\\": use "
	    "application/proto or application/json (Connect), or application/"
	    "grpc-web[+proto|+json] or application/grpc-web-text (gRPC-web)\"}");
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

/* One gRPC-web frame: flags, big-endian length, bytes. */
static size_t
grpc_frame(uint8_t *out, uint8_t flags, const void *p, size_t n)
{
	out[0] = flags;
	sm_put_be32(out + 1, (uint32_t)n);
	memcpy(out + 5, p, n);
	return (n + 5);
}

/*
 * gRPC-web: a framed request answers a data frame and a trailer frame
 * with grpc-status 0 (binary, JSON, base64 text); a compressed frame
 * with grpc-encoding gzip; grpc-timeout as the deadline; errors as a
 * 200 with grpc-status and a percent-encoded grpc-message and no body;
 * a torn frame, two messages, a trailer frame, a compressed frame
 * without grpc-encoding and a bad grpc-timeout are refused.
 */
static void
test_grpc_web(void)
{
	Querier__V1__SelectSeriesRequest q =
	    QUERIER__V1__SELECT_SERIES_REQUEST__INIT;
	uint8_t msg[256], body[1024], *gz = NULL;
	size_t n, len, gzlen;
	struct sm_http *h;
	struct sm_test_resp rs;
	struct sm_buf txt = SM_BUF_INIT, dec = SM_BUF_INIT;
	const char *bin = "Content-Type: application/grpc-web+proto\r\n";

	SM_REQUIRE((h = srv_start()) != NULL);
	q.profile_typeid = (char *)"cpu";
	q.label_selector = (char *)"{a=\"b\"}";
	q.start = 1000;
	q.end = 3000;
	q.step = 1;
	q.limit = 2;            /* the echo handler's point count */
	n = querier__v1__select_series_request__pack(&q, msg);
	len = grpc_frame(body, 0, msg, n);

	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, bin, body, len,
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"),
	    "application/grpc-web+proto");
	SM_CHECK(rs.len > 5 && rs.body[0] == 0);
	if (rs.len > 5) {
		size_t m = (size_t)rs.body[1] << 24 | (size_t)rs.body[2] << 16 |
		    (size_t)rs.body[3] << 8 | rs.body[4];
		Querier__V1__SelectSeriesResponse *o;

		SM_REQUIRE(m + 5 < rs.len);
		o = querier__v1__select_series_response__unpack(NULL, m,
		    (const uint8_t *)rs.body + 5);
		SM_CHECK(o != NULL && o->n_series == 1 &&
		    o->series[0]->n_points == 2);
		if (o != NULL)
			querier__v1__select_series_response__free_unpacked(o,
			    NULL);
		SM_CHECK(rs.body[5 + m] == 0x80);
		SM_CHECK(memmem(rs.body + 5 + m, rs.len - 5 - m,
		    "grpc-status:0", 13) != NULL);
	}
	sm_test_resp_free(&rs);

	/* JSON codec */
	{
		const char *js = "{\"profileTypeID\":\"cpu\",\"start\":\"1000\","
		    "\"end\":\"3000\",\"step\":1}";

		len = grpc_frame(body, 0, js, strlen(js));
		SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES,
		    "Content-Type: application/grpc-web+json\r\n", body, len,
		    &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		SM_CHECK(rs.len > 5 && rs.body[0] == 0 && rs.body[5] == '{');
		sm_test_resp_free(&rs);
	}

	/* base64 text both ways */
	len = grpc_frame(body, 0, msg, n);
	sm_buf_put_base64(&txt, body, len);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES,
	    "Content-Type: application/grpc-web-text\r\n", txt.b, txt.len,
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"),
	    "application/grpc-web-text+proto");
	SM_CHECK_EQ(sm_buf_put_unbase64(&dec, (const char *)rs.body, rs.len),
	    0);
	SM_CHECK(dec.len > 5 && dec.b[0] == 0);
	sm_test_resp_free(&rs);

	/* a compressed frame */
	SM_REQUIRE(sm_gzip(msg, n, 6, &gz, &gzlen) == 0);
	len = grpc_frame(body, 1, gz, gzlen);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, "Content-Type: "
	    "application/grpc-web+proto\r\ngrpc-encoding: gzip\r\n", body,
	    len, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK(rs.len > 5 && rs.body[0] == 0);
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, bin, body, len,
	    &rs) == 0);
	SM_CHECK_STR(sm_test_resp_header(&rs, "grpc-status"), "3");
	sm_test_resp_free(&rs);

	/* grpc-timeout: 2 seconds reaches the handler as its deadline */
	len = grpc_frame(body, 0, msg, n);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, "Content-Type: "
	    "application/grpc-web+proto\r\ngrpc-timeout: 2S\r\n", body, len,
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK(memmem(rs.body, rs.len, "deadline", 8) != NULL &&
	    memmem(rs.body, rs.len, "none", 4) == NULL);
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, "Content-Type: "
	    "application/grpc-web+proto\r\ngrpc-timeout: 123456789S\r\n",
	    body, len, &rs) == 0);
	SM_CHECK_STR(sm_test_resp_header(&rs, "grpc-status"), "3");
	sm_test_resp_free(&rs);

	/* a handler's error: trailers-only, the message percent-encoded */
	{
		Querier__V1__SelectSeriesRequest f =
		    QUERIER__V1__SELECT_SERIES_REQUEST__INIT;
		uint8_t fm[128];
		size_t fn;

		f.profile_typeid = (char *)"EUNAVAIL";
		f.label_selector = (char *)"50% \xc3\xa9";
		fn = querier__v1__select_series_request__pack(&f, fm);
		len = grpc_frame(body, 0, fm, fn);
		SM_REQUIRE(cli_post(sm_http_port(h), PATH_FAIL, bin, body, len,
		    &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		SM_CHECK_EQ(rs.len, 0);
		SM_CHECK_STR(sm_test_resp_header(&rs, "grpc-status"), "14");
		SM_CHECK_STR(sm_test_resp_header(&rs, "grpc-message"),
		    "failing with EUNAVAIL: \"50%25 %C3%A9\"");
		sm_test_resp_free(&rs);
	}

	/* framing errors */
	{
		static const struct {
			const char *what;
			int cut;          /* bytes dropped from the end */
			int twice, trailer, empty;
			const char *status;
		} bad[] = {
			{ "torn frame", 3, 0, 0, 0, "3" },
			{ "two messages", 0, 1, 0, 0, "12" },
			{ "a trailer frame", 0, 0, 1, 0, "3" },
			{ "no message", 0, 0, 0, 1, "12" },
		};

		for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++) {
			len = grpc_frame(body, bad[i].trailer ? 0x80 : 0, msg,
			    n);
			if (bad[i].twice)
				len += grpc_frame(body + len, 0, msg, n);
			len -= (size_t)bad[i].cut;
			if (bad[i].empty)
				len = 0;
			SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, bin,
			    body, len, &rs) == 0);
			SM_CHECKF(rs.status == 200 && strcmp(
			    sm_test_resp_header(&rs, "grpc-status") != NULL ?
			    sm_test_resp_header(&rs, "grpc-status") : "",
			    bad[i].status) == 0, "%s: status %d grpc-status %s",
			    bad[i].what, rs.status,
			    sm_test_resp_header(&rs, "grpc-status"));
			sm_test_resp_free(&rs);
		}
	}
	sm_free(gz);
	sm_buf_fini(&txt);
	sm_buf_fini(&dec);
	sm_http_destroy(h);
}

static void
test_get_405(void)
{
	static const char req[] = "GET " PATH_SERIES " HTTP/1.1\r\nHost: t\r\n"
	    "Connection: close\r\n\r\n";
	struct sm_http *h;
	struct sm_test_resp rs;
	int fd;

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	SM_REQUIRE(sm_test_send(fd, req, strlen(req)) == 0);
	SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
	close(fd);
	SM_CHECK_EQ(rs.status, 405);
	SM_CHECK_STR(sm_test_resp_header(&rs, "Allow"), "POST");
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_empty_body(void)
{
	Querier__V1__SelectSeriesResponse *out;
	struct sm_http *h;
	struct sm_test_resp rs;

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_PROTO, "", 0,
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	out = unpack_resp(&rs);
	SM_CHECK_STR(label(out, "profile_type"), "");
	SM_CHECK_EQ(out->series[0]->n_points, 0);
	querier__v1__select_series_response__free_unpacked(out, NULL);
	sm_test_resp_free(&rs);

	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_JSON, "", 0,
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK_STR((const char *)rs.body, "{\"series\":[{\"labels\":["
	    "{\"name\":\"profile_type\"},{\"name\":\"selector\"},"
	    "{\"name\":\"tenant\",\"value\":\"-\"},"
	    "{\"name\":\"deadline\",\"value\":\"none\"}]}]}");
	sm_test_resp_free(&rs);

	/* An empty gzip-encoded body is not inflated. */
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_JSON
	    "Content-Encoding: gzip\r\n", "", 0, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);

	/* A handler that "succeeds" without a response is a bug: 500. */
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_NOTHING, CT_PROTO, "", 0,
	    &rs) == 0);
	check_error(&rs, 500, "internal", "the handler returned no response");
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_gzip_request(void)
{
	static const char json[] = "{\"profileTypeID\":\"gz\",\"limit\":1}";
	Querier__V1__SelectSeriesRequest r =
	    QUERIER__V1__SELECT_SERIES_REQUEST__INIT;
	Querier__V1__SelectSeriesResponse *out;
	uint8_t *gz, *body, *zeros;
	size_t gzlen, len;
	struct sm_http *h;
	struct sm_test_resp rs;

	SM_REQUIRE((h = srv_start()) != NULL);
	/* proto, gzipped */
	r.profile_typeid = "gz-proto";
	body = pack(&r.base, &len);
	SM_REQUIRE(sm_gzip(body, len, 6, &gz, &gzlen) == 0);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_PROTO
	    "Content-Encoding: gzip\r\n", gz, gzlen, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	out = unpack_resp(&rs);
	SM_CHECK_STR(label(out, "profile_type"), "gz-proto");
	querier__v1__select_series_response__free_unpacked(out, NULL);
	sm_test_resp_free(&rs);
	sm_free(gz);
	free(body);

	/* JSON, gzipped; GZIP in capitals */
	SM_REQUIRE(sm_gzip((const uint8_t *)json, strlen(json), 6, &gz,
	    &gzlen) == 0);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_JSON
	    "Content-Encoding: GZIP\r\n", gz, gzlen, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK(strstr((const char *)rs.body, "\"value\":\"gz\"") != NULL);
	sm_test_resp_free(&rs);

	/* identity is no encoding */
	SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, CT_JSON
	    "Content-Encoding: identity\r\n", json, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);

	/* not gzip at all, or truncated */
	SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, CT_JSON
	    "Content-Encoding: gzip\r\n", json, &rs) == 0);
	check_error(&rs, 400, "invalid_argument", "gzip");
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_JSON
	    "Content-Encoding: gzip\r\n", gz, gzlen - 5, &rs) == 0);
	check_error(&rs, 400, "invalid_argument", "gzip");
	sm_test_resp_free(&rs);
	sm_free(gz);

	/* A small body that inflates past the route's 1 KiB cap. */
	SM_REQUIRE((zeros = calloc(1, 4096)) != NULL);
	SM_REQUIRE(sm_gzip(zeros, 4096, 6, &gz, &gzlen) == 0);
	SM_CHECK(gzlen < 1024);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SMALL, CT_PROTO
	    "Content-Encoding: gzip\r\n", gz, gzlen, &rs) == 0);
	check_error(&rs, 400, "invalid_argument", "exceeds limit of 1024 "
	    "bytes");
	sm_test_resp_free(&rs);
	sm_free(gz);
	/* Exactly at the cap is fine: 1024 bytes of an unknown field. */
	zeros[0] = 0x7a;                        /* field 15, bytes */
	zeros[1] = 0xfd;                        /* length 1021 */
	zeros[2] = 0x07;
	SM_REQUIRE(sm_gzip(zeros, 1024, 6, &gz, &gzlen) == 0);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SMALL, CT_PROTO
	    "Content-Encoding: gzip\r\n", gz, gzlen, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	sm_test_resp_free(&rs);
	sm_free(gz);
	free(zeros);

	/* Other encodings are not implemented. */
	SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, CT_JSON
	    "Content-Encoding: br\r\n", json, &rs) == 0);
	check_error(&rs, 501, "unimplemented", "unknown compression \\\"br\\\": "
	    "supported encodings are gzip");
	SM_CHECK_STR(sm_test_resp_header(&rs, "Accept-Encoding"), "gzip");
	sm_test_resp_free(&rs);
	SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, CT_PROTO
	    "Content-Encoding: zstd\r\n", "", &rs) == 0);
	check_error(&rs, 501, "unimplemented", "zstd");
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_gzip_response(void)
{
	static const char big[] = "{\"profileTypeID\":\"x\",\"limit\":100,"
	    "\"step\":1.5}";
	static const char small[] = "{\"profileTypeID\":\"x\",\"limit\":1}";
	static const struct {
		const char *ae;
		int gz;
	} aes[] = {
		{ "", 0 },
		{ "Accept-Encoding: gzip\r\n", 1 },
		{ "Accept-Encoding: br, GZIP\r\n", 1 },
		{ "Accept-Encoding: deflate, gzip;q=0.5\r\n", 1 },
		{ "Accept-Encoding: gzip ; q=1.0, br\r\n", 1 },
		{ "Accept-Encoding: gzip;q=0\r\n", 0 },
		{ "Accept-Encoding: gzip;q=0.000, br\r\n", 0 },
		{ "Accept-Encoding: identity\r\n", 0 },
		{ "Accept-Encoding: *\r\n", 0 },
		{ "Accept-Encoding: gzipx, xgzip\r\n", 0 },
	};
	struct sm_arena *a = sm_arena_create(0);
	struct sm_http *h;
	struct sm_test_resp plain, rs;
	char hdrs[256];
	uint8_t *in;
	size_t inlen;
	struct sm_err err;

	SM_REQUIRE(a != NULL && (h = srv_start()) != NULL);
	SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, CT_JSON, big,
	    &plain) == 0);
	SM_CHECK_EQ(plain.status, 200);
	SM_CHECK(plain.len > 1024);
	for (size_t i = 0; i < SM_ARRAY_LEN(aes); i++) {
		snprintf(hdrs, sizeof(hdrs), "%s%s", CT_JSON, aes[i].ae);
		SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, hdrs,
		    big, &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"),
		    "application/json");
		if (!aes[i].gz) {
			SM_CHECKF(sm_test_resp_header(&rs, "Content-Encoding") == NULL,
			    "%s", aes[i].ae);
			SM_CHECK(rs.len == plain.len &&
			    memcmp(rs.body, plain.body, rs.len) == 0);
			sm_test_resp_free(&rs);
			continue;
		}
		SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Encoding"), "gzip");
		SM_CHECK(rs.len < plain.len);
		SM_REQUIRE(sm_gunzip(rs.body, rs.len, 1u << 20, a, &in, &inlen,
		    &err) == 0);
		SM_CHECK(inlen == plain.len &&
		    memcmp(in, plain.body, inlen) == 0);
		sm_test_resp_free(&rs);
	}
	sm_test_resp_free(&plain);

	/* Small responses stay plain even when gzip is accepted. */
	SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_SERIES, CT_JSON
	    "Accept-Encoding: gzip\r\n", small, &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	SM_CHECK(rs.len <= 1024);
	SM_CHECK(sm_test_resp_header(&rs, "Content-Encoding") == NULL);
	sm_test_resp_free(&rs);

	/* The proto codec is compressed the same way. */
	{
		Querier__V1__SelectSeriesRequest r =
		    QUERIER__V1__SELECT_SERIES_REQUEST__INIT;
		Querier__V1__SelectSeriesResponse *out;
		uint8_t *body;
		size_t len;

		r.limit = 200;
		r.step = 0.1;
		body = pack(&r.base, &len);
		SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_PROTO
		    "Accept-Encoding: gzip\r\n", body, len, &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Encoding"), "gzip");
		SM_REQUIRE(sm_gunzip(rs.body, rs.len, 1u << 20, a, &in, &inlen,
		    &err) == 0);
		out = querier__v1__select_series_response__unpack(NULL, inlen,
		    in);
		SM_REQUIRE(out != NULL);
		SM_CHECK_EQ(out->series[0]->n_points, 200);
		querier__v1__select_series_response__free_unpacked(out, NULL);
		sm_test_resp_free(&rs);
		free(body);
	}
	sm_http_destroy(h);
	sm_arena_destroy(a);
}

static void
test_errors(void)
{
	struct sm_http *h;
	struct sm_test_resp rs;
	char body[256];

	SM_REQUIRE((h = srv_start()) != NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(fail_cases); i++) {
		snprintf(body, sizeof(body), "{\"profileTypeID\":\"%s\","
		    "\"labelSelector\":\"<x>\"}", fail_cases[i].name);
		SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_FAIL, CT_JSON
		    "Accept-Encoding: gzip\r\n", body, &rs) == 0);
		check_error(&rs, fail_cases[i].status, fail_cases[i].code,
		    "failing with");
		sm_test_resp_free(&rs);
	}
	/* Exact body, escaped like Go; errors are JSON for proto calls. */
	{
		Querier__V1__SelectSeriesRequest r =
		    QUERIER__V1__SELECT_SERIES_REQUEST__INIT;
		uint8_t *pb;
		size_t len;

		r.profile_typeid = "ELIMIT";
		r.label_selector = "{a=\"<b>\"}";
		pb = pack(&r.base, &len);
		SM_REQUIRE(cli_post(sm_http_port(h), PATH_FAIL, CT_PROTO, pb,
		    len, &rs) == 0);
		SM_CHECK_EQ(rs.status, 429);
		SM_CHECK_STR(sm_test_resp_header(&rs, "Content-Type"),
		    "application/json");
		SM_CHECK_STR((const char *)rs.body, "{\"code\":"
		    "\"resource_exhausted\",\"message\":\"failing with ELIMIT: "
		    "\\\"{a=\\\"\\u003cb\\u003e\\\"}\\\"\"}");
		sm_test_resp_free(&rs);
		free(pb);
	}
	/* No message from the handler: the code's name is used. */
	SM_REQUIRE(cli_post_str(sm_http_port(h), PATH_FAIL, CT_JSON,
	    "{\"labelSelector\":\"nomsg\"}", &rs) == 0);
	check_error(&rs, 503, "unavailable", "");
	SM_CHECKF(strlen((const char *)rs.body) > 40, "%s", rs.body);
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
test_malformed(void)
{
	static const uint8_t junk[] = { 0x0a, 0x05, 'a', 'b' };   /* short */
	static const uint8_t badwire[] = { 0x0f, 0x01 };           /* type 7 */
	static const uint8_t cut[] = { 0x18, 0x01, 0x0a, 0x01 };   /* no data */
#define BYTES(b) b, sizeof(b)
#define TEXT(s) s, sizeof(s) - 1
	/* Each is a 400 invalid_argument with this in its message. */
	static const struct {
		const char *ct;
		const void *body;
		size_t len;
		const char *msg;
	} bad[] = {
		{ CT_PROTO, BYTES(junk), "unmarshal into "
		    "querier.v1.SelectSeriesRequest: malformed protobuf data" },
		{ CT_PROTO, BYTES(badwire), "malformed protobuf" },
		{ CT_PROTO, BYTES(cut), "malformed protobuf" },
		{ CT_JSON, TEXT("{"),
		    "invalid querier.v1.SelectSeriesRequest JSON: " },
		{ CT_JSON, TEXT("[]"), "not an object" },
		{ CT_JSON, TEXT("{\"start\":\"soon\"}"),
		    "field \\\"start\\\": invalid int64 \\\"soon\\\"" },
		/* Proto bytes under the JSON content type, and the reverse. */
		{ CT_JSON, BYTES(junk), "JSON" },
		{ CT_PROTO, TEXT("{\"start\":1}"), "malformed protobuf" },
	};
#undef BYTES
#undef TEXT
	struct sm_http *h;
	struct sm_test_resp rs;

	SM_REQUIRE((h = srv_start()) != NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++) {
		SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, bad[i].ct,
		    bad[i].body, bad[i].len, &rs) == 0);
		check_error(&rs, 400, "invalid_argument", bad[i].msg);
		sm_test_resp_free(&rs);
	}
	sm_http_destroy(h);
}

/* The "deadline" label (ms left) of a call with this Connect-Timeout-Ms. */
static long long
deadline_left(struct sm_http *h, const char *timeout_ms)
{
	Querier__V1__SelectSeriesResponse *out;
	struct sm_test_resp rs;
	char hdrs[128];
	long long left;

	snprintf(hdrs, sizeof(hdrs), CT_PROTO "Connect-Timeout-Ms: %s\r\n",
	    timeout_ms);
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, hdrs, "", 0,
	    &rs) == 0);
	SM_CHECK_EQ(rs.status, 200);
	out = unpack_resp(&rs);
	SM_REQUIRE(label(out, "deadline") != NULL);
	left = atoll(label(out, "deadline"));
	querier__v1__select_series_response__free_unpacked(out, NULL);
	sm_test_resp_free(&rs);
	return (left);
}

static void
test_headers(void)
{
	static const char *const bad_tmo[] = {
		"12345678901", "abc", "-1", "+5", "1.5", "5 0", "0x10",
		"99999999999999999999",
	};
	struct sm_http *h;
	struct sm_test_resp rs;
	char hdrs[128];
	long long left;

	SM_REQUIRE((h = srv_start()) != NULL);
	left = deadline_left(h, "5000");
	SM_CHECKF(left > 3000 && left <= 5000, "%lld ms left", left);
	/* 10 digits is the most Connect allows. */
	SM_CHECK(deadline_left(h, "9999999999") > 9999990000LL);
	SM_CHECK(deadline_left(h, "0") <= 0);

	for (size_t i = 0; i < SM_ARRAY_LEN(bad_tmo); i++) {
		snprintf(hdrs, sizeof(hdrs), CT_PROTO
		    "Connect-Timeout-Ms: %s\r\n", bad_tmo[i]);
		SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, hdrs, "", 0,
		    &rs) == 0);
		check_error(&rs, 400, "invalid_argument",
		    "invalid Connect-Timeout-Ms");
		sm_test_resp_free(&rs);
	}

	/* Connect-Protocol-Version: optional, but "1" when given. */
	SM_REQUIRE(cli_post(sm_http_port(h), PATH_SERIES, CT_PROTO
	    "Connect-Protocol-Version: 2\r\n", "", 0, &rs) == 0);
	check_error(&rs, 400, "invalid_argument",
	    "Connect-Protocol-Version must be \\\"1\\\": got \\\"2\\\"");
	sm_test_resp_free(&rs);
	sm_http_destroy(h);
}

static void
h_plain(struct sm_http_req *r, void *arg)
{
	sm_http_reply_text(r, 200, "plain");
}

static void
test_registration(void)
{
	struct sm_http_cfg cfg;
	struct sm_http *h = NULL;
	struct sm_err err;

	sm_http_cfg_default(&cfg);
	cfg.listen = "127.0.0.1:0";
	SM_REQUIRE(sm_http_create(&cfg, &h, &err) == 0);
	SM_CHECK(sm_connect_route(h, PATH_SERIES,
	    &querier__v1__select_series_request__descriptor, h_echo,
	    (void *)&h_echo, 0) == 0);
	SM_CHECK(sm_connect_route(h, PATH_SERIES,
	    &querier__v1__select_series_request__descriptor, h_echo,
	    (void *)&h_echo, 0) == SM_EEXIST);
	/* A plain GET route can share the path; another path can share the
	 * handler. */
	SM_CHECK(sm_http_route(h, "GET", PATH_SERIES, h_plain, NULL, 0) == 0);
	SM_CHECK(sm_connect_route(h, PATH_SMALL,
	    &querier__v1__select_series_request__descriptor, h_echo,
	    (void *)&h_echo, 0) == 0);
	sm_http_destroy(h);
}

/* Several calls on one kept-alive connection. */
static void
test_keepalive(void)
{
	static const char body[] = "{\"profileTypeID\":\"k\"}";
	struct sm_http *h;
	struct sm_test_resp rs;
	char req[512];
	int fd, n;

	SM_REQUIRE((h = srv_start()) != NULL);
	SM_REQUIRE((fd = sm_test_connect(sm_http_port(h), 5000)) >= 0);
	n = snprintf(req, sizeof(req), "POST %s HTTP/1.1\r\nHost: t\r\n%s"
	    "Content-Length: %zu\r\n\r\n%s", PATH_SERIES, CT_JSON,
	    strlen(body), body);
	for (int i = 0; i < 5; i++) {
		SM_REQUIRE(sm_test_send(fd, req, (size_t)n) == 0);
		SM_REQUIRE(sm_test_read_resp(fd, &rs) == 0);
		SM_CHECK_EQ(rs.status, 200);
		SM_CHECK(strstr((const char *)rs.body, "\"value\":\"k\"") !=
		    NULL);
		sm_test_resp_free(&rs);
	}
	close(fd);
	sm_http_destroy(h);
}

SM_TEST_MAIN(
	{ "Connect codes and HTTP statuses", test_codes },
	{ "proto request and response", test_proto_call },
	{ "JSON request and exact JSON response, charset", test_json_call },
	{ "other content types get 415 with Accept-Post", test_content_types },
	{ "gRPC-web: frames, text, gzip, timeout, errors", test_grpc_web },
	{ "GET is 405", test_get_405 },
	{ "empty body is the empty message; no response is 500", test_empty_body },
	{ "gzip requests: inflated, capped, malformed; br/zstd 501", test_gzip_request },
	{ "gzip responses when accepted and over 1 KiB", test_gzip_response },
	{ "handler errors map to Connect codes and statuses", test_errors },
	{ "malformed proto and JSON are invalid_argument", test_malformed },
	{ "Connect-Timeout-Ms and Connect-Protocol-Version", test_headers },
	{ "registration: duplicates, shared path", test_registration },
	{ "keep-alive: calls on one connection", test_keepalive },
)
