/*
 * grpc.c -- gRPC over HTTP/2 cleartext on nghttp2; see grpc.h.
 *
 * A stream's life:
 *
 *   RECV     headers and DATA arrive (grpc_on_header, grpc_on_data):
 *            pseudo-headers are checked, the other headers are kept as
 *            HTTP/1.1 lines for the gRPC-web request, the body is kept
 *            up to max_recv_msg (past it, dropped and remembered);
 *   BACKEND  END_STREAM came (grpc_dispatch): a 405, 415 or
 *            resource_exhausted is answered at once; otherwise the
 *            gRPC-web request is written to one end of a socketpair whose
 *            other end the HTTP server adopted, and its answer read back
 *            until the HTTP server closes (the request says
 *            Connection: close);
 *   REPLIED  the answer was translated and submitted (grpc_answer):
 *            nghttp2 pulls the DATA from st->rsp and, at its end, the
 *            trailers are submitted (grpc_read_data).
 *
 * nghttp2 calls grpc_on_close when the stream ends for any reason (the
 * answer sent, RST_STREAM from the client, the connection torn down);
 * that frees the stream and closes its socketpair, so the handler's reply
 * to a client that gave up is written into a closed socket and dropped.
 *
 * Output.  nghttp2_session_mem_send() is called only when the bytes it
 * gave last time were all written, so at most one chunk of output waits
 * per connection however slowly the client reads.
 */
#include "grpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "byteorder.h"
#include "connect.h"
#include "log.h"
#include "tls.h"

#define GRPC_PREFACE_MS 10000
#define GRPC_STOP_GRACE_MS 2000
#define GRPC_HDR_MAX (16u * 1024u)      /* request header bytes per stream */
#define GRPC_WINDOW (1u << 20)          /* initial stream window */
#define GRPC_READ_CHUNK (16u * 1024u)
#define GRPC_RSP_HDR_MAX (64u * 1024u)  /* the HTTP server's header block */
#define GRPC_POLL_MAX_MS 1000
#define GRPC_PATH_MAX 512
#define GRPC_FRAME_HDR 5
#define GRPC_FLAG_TRAILER 0x80
#define GRPC_TRAILERS_MAX 16

/* gRPC status numbers used here (gRPC's, and Connect's by index). */
#define GRPC_UNKNOWN 2
#define GRPC_RESOURCE_EXHAUSTED 8
#define GRPC_UNIMPLEMENTED 12
#define GRPC_INTERNAL 13
#define GRPC_UNAVAILABLE 14

enum grpc_st_state {
	ST_RECV,
	ST_BACKEND,
	ST_REPLIED,
};

struct grpc_conn;

struct grpc_stream {
	struct grpc_stream *next;      /* on the connection's list */
	struct grpc_conn *c;
	int32_t id;
	enum grpc_st_state state;
	int64_t open_ns;
	char method[8];
	char path[GRPC_PATH_MAX];
	char authority[256];
	char ctype[64];                /* the client's content-type, echoed */
	bool json;                     /* application/grpc+json */
	bool ctype_bad;                /* not application/grpc[+proto|+json] */
	bool too_big;                  /* the message went past max_recv_msg */
	bool hdr_bad;                  /* a header we cannot forward */
	size_t hdr_bytes;
	struct sm_buf fwd;             /* forwarded headers, HTTP/1.1 lines */
	struct sm_buf body;
	int fd;                        /* our end of the socketpair, or -1 */
	struct sm_buf req;             /* the gRPC-web request, being written */
	size_t req_off;
	struct sm_buf in;              /* the HTTP server's answer, read */
	struct sm_buf rsp;             /* DATA for the client */
	size_t rsp_off;
	nghttp2_nv trl[GRPC_TRAILERS_MAX];
	size_t ntrl;
	struct sm_buf trl_text;        /* the strings trl[] points into */
};

struct sm_grpc;

struct grpc_conn {
	struct grpc_conn *next;        /* on g_conns, under g_mu */
	struct sm_grpc *g;
	int fd;
	pthread_t th;
	bool done;                     /* the thread returned; join it */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	char ip[INET6_ADDRSTRLEN];
	nghttp2_session *s;
	struct grpc_stream *streams;
	unsigned nstreams;
	bool seen_frame;               /* the preface arrived */
	bool broken;                   /* close without more ado */
	int64_t last_rx_ns;
	const uint8_t *wpend;          /* nghttp2's bytes not written yet */
	size_t wpend_len;
	unsigned dispatched;           /* streams that reached grpc_dispatch */
	void *tls;                     /* TLS session (tls.h), or NULL */
};

struct sm_grpc {
	struct sm_grpc_cfg cfg;
	struct sm_http *http;
	int lfd;
	int wake;                      /* eventfd: readable once stopping */
	unsigned port;
	pthread_t acceptor;
	atomic_bool stopping;
	int64_t stop_deadline_ns;      /* set before `stopping` */
	pthread_mutex_t mu;
	struct grpc_conn *conns;
	unsigned nconns;
};

static int64_t
grpc_ms_left(int64_t deadline_ns, int64_t now)
{
	int64_t ms = (deadline_ns - now + 999999) / 1000000;

	return (ms < 0 ? 0 : ms);
}

/* --- streams ---------------------------------------------------------------- */

static void
grpc_stream_free(struct grpc_stream *st)
{
	struct grpc_stream **pp;

	for (pp = &st->c->streams; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == st) {
			*pp = st->next;
			st->c->nstreams--;
			break;
		}
	}
	if (st->fd >= 0)
		(void)close(st->fd);
	sm_buf_fini(&st->fwd);
	sm_buf_fini(&st->body);
	sm_buf_fini(&st->req);
	sm_buf_fini(&st->in);
	sm_buf_fini(&st->rsp);
	sm_buf_fini(&st->trl_text);
	sm_free(st);
}

static int
grpc_on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	struct grpc_conn *c = ud;
	struct grpc_stream *st;

	if (f->hd.type != NGHTTP2_HEADERS ||
	    f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return (0);
	if ((st = sm_calloc(1, sizeof(*st))) == NULL)
		return (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE);
	st->c = c;
	st->id = f->hd.stream_id;
	st->fd = -1;
	st->open_ns = sm_mono_ns();
	st->body.limit = c->g->cfg.max_recv_msg + GRPC_FRAME_HDR;
	st->in.limit = c->g->cfg.max_send_msg + GRPC_RSP_HDR_MAX;
	st->next = c->streams;
	c->streams = st;
	c->nstreams++;
	nghttp2_session_set_stream_user_data(s, st->id, st);
	return (0);
}

/* A header value fit for an HTTP/1.1 line: no CR, LF or NUL. */
static bool
grpc_value_ok(const uint8_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (v[i] == '\r' || v[i] == '\n' || v[i] == '\0')
			return (false);
	}
	return (true);
}

static void
grpc_copy(char *dst, size_t cap, const uint8_t *v, size_t n, bool *bad)
{
	if (n >= cap) {
		*bad = true;
		n = cap - 1;
	}
	memcpy(dst, v, n);
	dst[n] = '\0';
}

/*
 * application/grpc, application/grpc+proto, application/grpc+json, each
 * optionally with parameters after ';' (grpc-go accepts any suffix and
 * then fails on an unknown codec; we refuse with 415 at once).
 */
static void
grpc_content_type(struct grpc_stream *st, const uint8_t *v, size_t n)
{
	size_t k = 0;

	grpc_copy(st->ctype, sizeof(st->ctype), v, n, &st->ctype_bad);
	while (k < n && v[k] != ';' && v[k] != ' ')
		k++;
	if (k == 16 && strncasecmp((const char *)v, "application/grpc", 16) ==
	    0)
		return;
	if (k == 22 && strncasecmp((const char *)v, "application/grpc+proto",
	    22) == 0)
		return;
	if (k == 21 && strncasecmp((const char *)v, "application/grpc+json",
	    21) == 0) {
		st->json = true;
		return;
	}
	st->ctype_bad = true;
}

/* Headers the gRPC-web request sets itself or that mean nothing on it. */
static bool
grpc_header_dropped(const char *name, size_t n)
{
	static const char *const drop[] = { "content-type", "content-length",
	    "te", "host", "connection", "expect", "accept-encoding",
	    "transfer-encoding", "upgrade", "keep-alive", "proxy-connection" };

	for (size_t i = 0; i < SM_ARRAY_LEN(drop); i++) {
		if (strlen(drop[i]) == n && memcmp(drop[i], name, n) == 0)
			return (true);
	}
	return (false);
}

static int
grpc_on_header(nghttp2_session *s, const nghttp2_frame *f,
    const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen,
    uint8_t flags, void *ud)
{
	struct grpc_stream *st;

	(void)flags;
	(void)ud;
	if (f->hd.type != NGHTTP2_HEADERS ||
	    (st = nghttp2_session_get_stream_user_data(s,
	    f->hd.stream_id)) == NULL || st->state != ST_RECV)
		return (0);
	st->hdr_bytes += nlen + vlen + 32;
	if (st->hdr_bytes > GRPC_HDR_MAX)
		return (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE);
	if (nlen > 0 && name[0] == ':') {
		if (nlen == 7 && memcmp(name, ":method", 7) == 0)
			grpc_copy(st->method, sizeof(st->method), value, vlen,
			    &st->hdr_bad);
		else if (nlen == 5 && memcmp(name, ":path", 5) == 0)
			grpc_copy(st->path, sizeof(st->path), value, vlen,
			    &st->hdr_bad);
		else if (nlen == 10 && memcmp(name, ":authority", 10) == 0)
			grpc_copy(st->authority, sizeof(st->authority), value,
			    vlen, &st->hdr_bad);
		return (0);
	}
	if (!grpc_value_ok(value, vlen) || !grpc_value_ok(name, nlen)) {
		st->hdr_bad = true;
		return (0);
	}
	if (nlen == 12 && memcmp(name, "content-type", 12) == 0)
		grpc_content_type(st, value, vlen);
	if (grpc_header_dropped((const char *)name, nlen))
		return (0);
	sm_buf_append(&st->fwd, name, nlen);
	sm_buf_append(&st->fwd, ": ", 2);
	sm_buf_append(&st->fwd, value, vlen);
	sm_buf_append(&st->fwd, "\r\n", 2);
	return (0);
}

static int
grpc_on_data(nghttp2_session *s, uint8_t flags, int32_t id,
    const uint8_t *data, size_t len, void *ud)
{
	struct grpc_stream *st = nghttp2_session_get_stream_user_data(s, id);

	(void)flags;
	(void)ud;
	if (st == NULL || st->state != ST_RECV || st->too_big)
		return (0);
	sm_buf_append(&st->body, data, len);
	if (sm_buf_error(&st->body) == SM_ETOOBIG) {
		st->too_big = true;
		sm_buf_fini(&st->body);
	} else if (sm_buf_error(&st->body) != 0) {
		return (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE);
	}
	return (0);
}

/* --- answers ------------------------------------------------------------------ */

#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), \
	NGHTTP2_NV_FLAG_NONE }

/* An HTTP-level refusal (405, 415): a status and no gRPC status. */
static void
grpc_answer_http(struct grpc_stream *st, const char *status)
{
	nghttp2_nv nv[] = { NV(":status", status) };

	st->state = ST_REPLIED;
	(void)nghttp2_submit_response(st->c->s, st->id, nv, SM_ARRAY_LEN(nv),
	    NULL);
}

/* A trailers-only answer: the status in the one HEADERS frame. */
static void
grpc_answer_status(struct grpc_stream *st, int code, const char *msg)
{
	struct sm_buf m = SM_BUF_INIT;
	char num[8];

	(void)snprintf(num, sizeof(num), "%d", code);
	sm_connect_grpc_message(&m, msg);
	{
		nghttp2_nv nv[] = { NV(":status", "200"),
		    NV("content-type", st->ctype[0] != '\0' ? st->ctype :
		    "application/grpc"), NV("grpc-status", num),
		    NV("grpc-message", m.b != NULL ? m.b : "") };

		st->state = ST_REPLIED;
		(void)nghttp2_submit_response(st->c->s, st->id, nv,
		    SM_ARRAY_LEN(nv), NULL);
	}
	sm_buf_fini(&m);
	if (st->fd >= 0) {
		(void)close(st->fd);
		st->fd = -1;
	}
}

static ssize_t
grpc_read_data(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
    uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	struct grpc_stream *st = src->ptr;
	size_t n = st->rsp.len - st->rsp_off;

	(void)ud;
	if (n > len)
		n = len;
	if (n > 0)
		memcpy(buf, st->rsp.b + st->rsp_off, n);
	st->rsp_off += n;
	if (st->rsp_off == st->rsp.len) {
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (nghttp2_submit_trailer(s, id, st->trl, st->ntrl) != 0)
			return (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE);
	}
	return ((ssize_t)n);
}

/*
 * The value of JSON string field `key` in an HTTP error body of ours
 * ({"code":"...","message":"..."}, http.c and connect.c write it), with
 * \" and \\ unescaped and other escapes kept; "" when absent.
 */
static void
grpc_json_field(const char *body, size_t len, const char *key, char *out,
    size_t cap)
{
	char pat[32];
	const char *p, *end = body + len;
	size_t k = 0;

	out[0] = '\0';
	(void)snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	if ((p = memmem(body, len, pat, strlen(pat))) == NULL)
		return;
	for (p += strlen(pat); p < end && *p != '"' && k + 1 < cap; p++) {
		if (*p == '\\' && p + 1 < end && (p[1] == '"' || p[1] == '\\'))
			p++;
		out[k++] = *p;
	}
	out[k] = '\0';
}

/*
 * The gRPC status of an HTTP refusal: its Connect code when the body has
 * one, but 404 and 405 (no such method) are unimplemented and 413
 * resource_exhausted, as gRPC's spec maps them.
 */
static void
grpc_answer_refusal(struct grpc_stream *st, int status, const char *body,
    size_t len)
{
	char code[32], msg[512];
	int gc;

	grpc_json_field(body, len, "code", code, sizeof(code));
	grpc_json_field(body, len, "message", msg, sizeof(msg));
	if (status == 404 || status == 405)
		gc = GRPC_UNIMPLEMENTED;
	else if (status == 413)
		gc = GRPC_RESOURCE_EXHAUSTED;
	else if (code[0] != '\0')
		gc = sm_connect_grpc_code(code);
	else
		gc = status == 503 ? GRPC_UNAVAILABLE : GRPC_UNKNOWN;
	if (msg[0] == '\0')
		(void)snprintf(msg, sizeof(msg), "HTTP status %d", status);
	grpc_answer_status(st, gc, msg);
}

/* Decode a chunked body in place; false when it is torn. */
static bool
grpc_dechunk(char *p, size_t len, size_t *out)
{
	size_t r = 0, w = 0;

	for (;;) {
		char *end;
		unsigned long n;

		if (r >= len)
			return (false);
		errno = 0;
		n = strtoul(p + r, &end, 16);
		if (end == p + r || errno != 0)
			return (false);
		r = (size_t)(end - p);
		while (r < len && p[r] != '\n')
			r++;
		if (++r > len)
			return (false);
		if (n == 0)
			break;
		if (n > len - r || len - r - n < 2)
			return (false);
		memmove(p + w, p + r, n);
		w += n;
		r += n + 2;
	}
	*out = w;
	return (true);
}

/*
 * The gRPC-web body -> DATA (every message frame, as is) and trailers
 * (the trailer frame's "name:value\r\n" lines).  False when torn.
 */
static bool
grpc_unweb(struct grpc_stream *st, const uint8_t *b, size_t len)
{
	size_t off = 0;

	while (off < len) {
		uint32_t n;

		if (len - off < GRPC_FRAME_HDR)
			return (false);
		n = sm_get_be32(b + off + 1);
		if (n > len - off - GRPC_FRAME_HDR)
			return (false);
		if ((b[off] & GRPC_FLAG_TRAILER) == 0)
			sm_buf_append(&st->rsp, b + off, GRPC_FRAME_HDR + n);
		else
			sm_buf_append(&st->trl_text, b + off + GRPC_FRAME_HDR,
			    n);
		off += GRPC_FRAME_HDR + n;
	}
	return (sm_buf_error(&st->rsp) == 0 && sm_buf_error(&st->trl_text) ==
	    0);
}

/* Split trl_text's lines into trl[] (names lower-cased); false if none. */
static bool
grpc_trailers(struct grpc_stream *st)
{
	char *base = st->trl_text.b;
	size_t len = st->trl_text.len, off = 0;

	if (base == NULL)
		return (false);         /* no trailer frame */
	/* Offsets, not pointers: GCC 12 at -O1 (the ASan build) cannot see
	 * that end - p stays positive and warns about memchr's bound. */
	while (off < len && st->ntrl < GRPC_TRAILERS_MAX) {
		char *p = base + off;
		char *eol = memchr(p, '\n', len - off);
		size_t n = eol != NULL ? (size_t)(eol - p) : len - off;
		char *colon, *v;

		off += n + 1;
		if (n > 0 && p[n - 1] == '\r')
			n--;
		colon = memchr(p, ':', n);
		if (colon == NULL || colon == p)
			continue;
		for (char *q = p; q < colon; q++)
			*q = (char)(*q >= 'A' && *q <= 'Z' ? *q + 32 : *q);
		for (v = colon + 1; v < p + n && *v == ' '; v++)
			;
		st->trl[st->ntrl++] = (nghttp2_nv){ (uint8_t *)p, (uint8_t *)v,
		    (size_t)(colon - p), (size_t)(p + n - v),
		    NGHTTP2_NV_FLAG_NONE };
	}
	for (size_t i = 0; i < st->ntrl; i++) {
		if (st->trl[i].namelen == 11 &&
		    memcmp(st->trl[i].name, "grpc-status", 11) == 0)
			return (true);
	}
	return (false);
}

/* A response header's value (case-insensitive name), or NULL. */
static const char *
grpc_rsp_header(const char *hdrs, size_t len, const char *name, size_t *vlen)
{
	const char *p = hdrs, *end = hdrs + len;
	size_t n = strlen(name);

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *le = eol != NULL ? eol : end;

		if ((size_t)(le - p) > n && p[n] == ':' &&
		    strncasecmp(p, name, n) == 0) {
			const char *v = p + n + 1;

			while (v < le && *v == ' ')
				v++;
			*vlen = (size_t)(le - v);
			if (*vlen > 0 && v[*vlen - 1] == '\r')
				(*vlen)--;
			return (v);
		}
		if (eol == NULL)
			break;
		p = eol + 1;
	}
	return (NULL);
}

/*
 * The HTTP server closed the socketpair: its whole answer is in st->in.
 * Translate it (see the header) and submit it.
 */
static void
grpc_answer(struct grpc_stream *st)
{
	char *a = st->in.b, *hend, *body;
	size_t alen = st->in.len, blen, vl, gl, ml;
	const char *te, *gs, *gm, *ct;
	int status;
	nghttp2_data_provider dp;

	if (sm_buf_error(&st->in) == SM_ETOOBIG) {
		grpc_answer_status(st, GRPC_RESOURCE_EXHAUSTED, "grpc: the "
		    "answer is larger than -server.grpc-max-send-msg-size-"
		    "bytes");
		return;
	}
	if (a == NULL || sm_buf_error(&st->in) != 0 || alen < 12 ||
	    strncmp(a, "HTTP/1.", 7) != 0 ||
	    (hend = memmem(a, alen, "\r\n\r\n", 4)) == NULL) {
		grpc_answer_status(st, GRPC_UNAVAILABLE, "the server closed "
		    "the call without an answer");
		return;
	}
	status = atoi(a + 9);
	body = hend + 4;
	blen = alen - (size_t)(body - a);
	if ((te = grpc_rsp_header(a, (size_t)(hend - a), "transfer-encoding",
	    &vl)) != NULL && vl == 7 && strncasecmp(te, "chunked", 7) == 0 &&
	    !grpc_dechunk(body, blen, &blen)) {
		grpc_answer_status(st, GRPC_INTERNAL, "torn chunked answer");
		return;
	}
	if (status != 200) {
		grpc_answer_refusal(st, status, body, blen);
		return;
	}
	gs = grpc_rsp_header(a, (size_t)(hend - a), "grpc-status", &gl);
	ct = grpc_rsp_header(a, (size_t)(hend - a), "content-type", &vl);
	if (gs != NULL) {
		char code[8] = "", msg[1024] = "";

		gm = grpc_rsp_header(a, (size_t)(hend - a), "grpc-message",
		    &ml);
		(void)snprintf(code, sizeof(code), "%.*s", (int)gl, gs);
		if (gm != NULL)
			(void)snprintf(msg, sizeof(msg), "%.*s", (int)ml, gm);
		{
			nghttp2_nv nv[] = { NV(":status", "200"),
			    NV("content-type", st->ctype), NV("grpc-status",
			    code), NV("grpc-message", msg) };

			st->state = ST_REPLIED;
			(void)nghttp2_submit_response(st->c->s, st->id, nv,
			    SM_ARRAY_LEN(nv), NULL);
		}
		return;
	}
	if (ct == NULL || vl < 21 || strncasecmp(ct, "application/grpc-web",
	    20) != 0 || !grpc_unweb(st, (const uint8_t *)body, blen) ||
	    !grpc_trailers(st)) {
		grpc_answer_status(st, GRPC_INTERNAL, "the server's answer "
		    "is not a gRPC-web answer");
		return;
	}
	{
		nghttp2_nv nv[] = { NV(":status", "200"),
		    NV("content-type", st->ctype) };

		dp.source.ptr = st;
		dp.read_callback = grpc_read_data;
		st->state = ST_REPLIED;
		if (nghttp2_submit_response(st->c->s, st->id, nv,
		    SM_ARRAY_LEN(nv), &dp) != 0)
			(void)nghttp2_submit_rst_stream(st->c->s,
			    NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
	}
}

/* --- dispatch ----------------------------------------------------------------- */

/* Printable ASCII without blanks, not empty: fit for a request line. */
static bool
grpc_token_ok(const char *p)
{
	if (*p == '\0')
		return (false);
	for (; *p != '\0'; p++) {
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
			return (false);
	}
	return (true);
}

/* A :path we can put on an HTTP/1.1 request line. */
static bool
grpc_path_ok(const char *p)
{
	return (p[0] == '/' && grpc_token_ok(p));
}

/* The request is whole: refuse it, or hand it to the HTTP server. */
static void
grpc_dispatch(struct grpc_stream *st)
{
	struct grpc_conn *c = st->c;
	struct sm_err err;
	int sv[2];

	st->state = ST_BACKEND;
	c->dispatched++;
	if (strcmp(st->method, "POST") != 0) {
		grpc_answer_http(st, "405");
		return;
	}
	if (st->ctype_bad || st->ctype[0] == '\0') {
		grpc_answer_http(st, "415");
		return;
	}
	if (st->too_big) {
		char msg[160];

		(void)snprintf(msg, sizeof(msg), "grpc: received message "
		    "larger than max (%zu bytes)", c->g->cfg.max_recv_msg);
		grpc_answer_status(st, GRPC_RESOURCE_EXHAUSTED, msg);
		return;
	}
	if (st->hdr_bad || !grpc_path_ok(st->path)) {
		grpc_answer_status(st, GRPC_INTERNAL, "malformed request "
		    "headers");
		return;
	}
	sm_buf_printf(&st->req, "POST %s HTTP/1.1\r\nHost: %s\r\n"
	    "Content-Type: application/grpc-web+%s\r\nContent-Length: %zu\r\n"
	    "Connection: close\r\n", st->path, grpc_token_ok(st->authority) ?
	    st->authority : "grpc", st->json ? "json" : "proto", st->body.len);
	sm_buf_append(&st->req, st->fwd.b, st->fwd.len);
	sm_buf_append(&st->req, "\r\n", 2);
	sm_buf_append(&st->req, st->body.b, st->body.len);
	sm_buf_fini(&st->body);
	sm_buf_fini(&st->fwd);
	if (sm_buf_error(&st->req) != 0) {
		grpc_answer_status(st, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (c->g->http == NULL) {       /* sm_grpc_feed: no HTTP server */
		grpc_answer_status(st, GRPC_UNAVAILABLE, "no HTTP server");
		return;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
	    sv) != 0) {
		grpc_answer_status(st, GRPC_UNAVAILABLE, "out of sockets");
		return;
	}
	sm_err_clear(&err);
	if (sm_http_adopt(c->g->http, sv[0], (struct sockaddr *)&c->peer,
	    c->peer_len, &err) != 0) {
		(void)close(sv[1]);
		grpc_answer_status(st, GRPC_UNAVAILABLE, err.msg);
		return;
	}
	st->fd = sv[1];
}

static int
grpc_on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	struct grpc_conn *c = ud;
	struct grpc_stream *st;

	c->seen_frame = true;
	if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
	    (f->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
		return (0);
	st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
	if (st != NULL && st->state == ST_RECV)
		grpc_dispatch(st);
	return (0);
}

static int
grpc_on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
	struct grpc_stream *st = nghttp2_session_get_stream_user_data(s, id);

	(void)code;
	(void)ud;
	if (st != NULL) {
		nghttp2_session_set_stream_user_data(s, id, NULL);
		grpc_stream_free(st);
	}
	return (0);
}

/* --- a connection -------------------------------------------------------------- */

/* recv()/send() on the client's socket, through TLS when it has it. */
static long
grpc_io_recv(struct grpc_conn *c, void *buf, size_t n)
{
	if (c->tls != NULL)
		return (sm_tls_recv(c->tls, buf, n));
	return ((long)recv(c->fd, buf, n, MSG_DONTWAIT));
}

static long
grpc_io_send(struct grpc_conn *c, const void *buf, size_t n)
{
	if (c->tls != NULL)
		return (sm_tls_send(c->tls, buf, n));
	return ((long)send(c->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT));
}

/* Write what nghttp2 has to send; false when the client is gone. */
static bool
grpc_flush(struct grpc_conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->wpend_len == 0) {
			n = nghttp2_session_mem_send(c->s, &c->wpend);
			if (n < 0)
				return (false);
			if (n == 0)
				return (true);
			c->wpend_len = (size_t)n;
		}
		n = grpc_io_send(c, c->wpend, c->wpend_len);
		if (n < 0)
			return (errno == EAGAIN || errno == EWOULDBLOCK ||
			    errno == EINTR);
		c->wpend += n;
		c->wpend_len -= (size_t)n;
		if (c->wpend_len > 0)
			return (true);
	}
}

/*
 * Read what the client sent.  Through TLS, decrypted bytes the session
 * buffers are invisible to poll(), so those are read too (a bounded
 * number of records per round).
 */
static bool
grpc_client_read(struct grpc_conn *c)
{
	uint8_t buf[GRPC_READ_CHUNK];

	for (int i = 0; i < 16; i++) {
		long n = grpc_io_recv(c, buf, sizeof(buf));

		if (n == 0)
			return (false);
		if (n < 0)
			return (errno == EAGAIN || errno == EWOULDBLOCK ||
			    errno == EINTR);
		c->last_rx_ns = sm_mono_ns();
		if (nghttp2_session_mem_recv(c->s, buf, (size_t)n) < 0)
			return (false);
		if (c->tls == NULL || sm_tls_pending(c->tls) == 0)
			break;
	}
	return (true);
}

/*
 * The TLS handshake, before any HTTP/2, within the preface deadline:
 * the client must negotiate "h2" by ALPN (gRPC clients do) and meet the
 * client-certificate policy.  False when the connection is to close.
 */
static bool
grpc_tls_accept(struct grpc_conn *c)
{
	struct sm_err err;
	int64_t deadline = c->last_rx_ns + (int64_t)GRPC_PREFACE_MS * 1000000;

	sm_err_clear(&err);
	if (sm_tls_session_new(c->g->cfg.tls, c->fd, "h2", &c->tls,
	    &err) != 0)
		return (false);
	for (;;) {
		bool want_write;
		int rv = sm_tls_handshake(c->tls, &want_write, &err);
		struct pollfd pf;
		int64_t now = sm_mono_ns();

		if (rv == 0)
			break;
		if (rv != SM_EAGAIN || now >= deadline ||
		    atomic_load(&c->g->stopping)) {
			sm_debug("grpc", "TLS handshake failed\tpeer=%s "
			    "err=\"%s\"", c->ip, rv != SM_EAGAIN ? err.msg :
			    "timed out");
			return (false);
		}
		pf = (struct pollfd){ c->fd, want_write ? POLLOUT : POLLIN, 0 };
		(void)poll(&pf, 1, (int)SM_MIN(grpc_ms_left(deadline, now),
		    GRPC_POLL_MAX_MS));
	}
	if (!sm_tls_alpn_is(c->tls, "h2") ||
	    sm_tls_check_peer(c->g->cfg.tls, c->tls, &err) != 0) {
		sm_debug("grpc", "TLS client refused\tpeer=%s err=\"%s\"",
		    c->ip, err.msg[0] != '\0' ? err.msg : "no ALPN h2");
		return (false);
	}
	return (true);
}

/* The socketpair of a stream in BACKEND is ready: write, read, finish. */
static void
grpc_backend_io(struct grpc_stream *st, short revents)
{
	if ((revents & POLLOUT) != 0 && st->req_off < st->req.len) {
		ssize_t n = send(st->fd, st->req.b + st->req_off,
		    st->req.len - st->req_off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0)
			st->req_off += (size_t)n;
		else if (n < 0 && errno != EAGAIN && errno != EINTR)
			revents |= POLLHUP;
		if (st->req_off == st->req.len)
			sm_buf_fini(&st->req);
	}
	if ((revents & (POLLIN | POLLHUP | POLLERR)) == 0)
		return;
	for (;;) {
		ssize_t n;

		if (sm_buf_reserve(&st->in, GRPC_READ_CHUNK) != 0)
			break;
		n = recv(st->fd, st->in.b + st->in.len, GRPC_READ_CHUNK,
		    MSG_DONTWAIT);
		if (n > 0) {
			st->in.len += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		break;                  /* EOF, or an error: the answer is in */
	}
	(void)close(st->fd);
	st->fd = -1;
	grpc_answer(st);
}

/* Reset streams whose request has not arrived within the idle timeout. */
static void
grpc_expire(struct grpc_conn *c, int64_t now)
{
	int64_t limit = (int64_t)c->g->cfg.idle_timeout_s * 1000000000;

	for (struct grpc_stream *st = c->streams; st != NULL; st = st->next) {
		if (st->state == ST_RECV && now - st->open_ns > limit) {
			st->state = ST_REPLIED;
			(void)nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE,
			    st->id, NGHTTP2_CANCEL);
		}
	}
}

static int
grpc_session_new(struct grpc_conn *c)
{
	nghttp2_session_callbacks *cb;
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, c->g->cfg.max_streams },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GRPC_WINDOW },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_HDR_MAX },
	};
	int rv;

	if (nghttp2_session_callbacks_new(&cb) != 0)
		return (-1);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
	    grpc_on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, grpc_on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb,
	    grpc_on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, grpc_on_frame);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb,
	    grpc_on_close);
	rv = nghttp2_session_server_new(&c->s, cb, c);
	nghttp2_session_callbacks_del(cb);
	if (rv != 0)
		return (-1);
	return (nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv,
	    SM_ARRAY_LEN(iv)) == 0 ? 0 : -1);
}

/* The deadline the connection's poll waits for at most. */
static int64_t
grpc_next_deadline(struct grpc_conn *c, bool stopping)
{
	struct sm_grpc *g = c->g;
	int64_t d = c->last_rx_ns + (int64_t)g->cfg.idle_timeout_s *
	    1000000000;

	if (!c->seen_frame && c->last_rx_ns + (int64_t)GRPC_PREFACE_MS *
	    1000000 < d)
		d = c->last_rx_ns + (int64_t)GRPC_PREFACE_MS * 1000000;
	for (struct grpc_stream *st = c->streams; st != NULL; st = st->next) {
		if (st->state == ST_RECV && st->open_ns +
		    (int64_t)g->cfg.idle_timeout_s * 1000000000 < d)
			d = st->open_ns + (int64_t)g->cfg.idle_timeout_s *
			    1000000000;
	}
	if (stopping && g->stop_deadline_ns < d)
		d = g->stop_deadline_ns;
	return (d);
}

/* One poll round; false when the connection is over. */
static bool
grpc_round(struct grpc_conn *c, bool *goaway)
{
	struct sm_grpc *g = c->g;
	struct pollfd pf[1 + 1 + 128];
	struct grpc_stream *who[SM_ARRAY_LEN(pf)];
	bool stopping = atomic_load(&g->stopping), pending;
	int64_t now;
	nfds_t n = 0;
	int rv;

	pf[n++] = (struct pollfd){ c->fd, (short)((c->wpend_len > 0 ||
	    nghttp2_session_want_write(c->s) ? POLLOUT : 0) | POLLIN), 0 };
	if (!stopping)
		pf[n++] = (struct pollfd){ g->wake, POLLIN, 0 };
	for (struct grpc_stream *st = c->streams; st != NULL &&
	    n < SM_ARRAY_LEN(pf); st = st->next) {
		if (st->fd < 0)
			continue;
		who[n] = st;
		pf[n++] = (struct pollfd){ st->fd, (short)(POLLIN |
		    (st->req_off < st->req.len ? POLLOUT : 0)), 0 };
	}
	now = sm_mono_ns();
	pending = c->tls != NULL && sm_tls_pending(c->tls) > 0;
	rv = poll(pf, n, pending ? 0 : (int)SM_MIN(grpc_ms_left(
	    grpc_next_deadline(c, stopping), now), GRPC_POLL_MAX_MS));
	if (rv < 0 && errno != EINTR)
		return (false);
	if (pending)
		pf[0].revents |= POLLIN;        /* TLS has bytes buffered */
	/* Backends first: reading from the client may end (and free) the
	 * streams who[] points at. */
	for (nfds_t i = stopping ? 1 : 2; i < n; i++) {
		if (pf[i].revents != 0)
			grpc_backend_io(who[i], pf[i].revents);
	}
	if ((pf[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0 &&
	    !grpc_client_read(c))
		return (false);
	now = sm_mono_ns();
	grpc_expire(c, now);
	if (!c->seen_frame && now - c->last_rx_ns > (int64_t)GRPC_PREFACE_MS *
	    1000000)
		return (false);
	if ((stopping || (c->nstreams == 0 && now - c->last_rx_ns >
	    (int64_t)g->cfg.idle_timeout_s * 1000000000)) && !*goaway) {
		*goaway = true;
		(void)nghttp2_submit_goaway(c->s, NGHTTP2_FLAG_NONE,
		    nghttp2_session_get_last_proc_stream_id(c->s),
		    NGHTTP2_NO_ERROR, NULL, 0);
	}
	if (stopping && now >= g->stop_deadline_ns)
		return (false);
	if (!grpc_flush(c))
		return (false);
	/* After a GOAWAY, the connection ends once its streams are
	 * answered and everything is written. */
	if (*goaway && c->nstreams == 0 && c->wpend_len == 0 &&
	    !nghttp2_session_want_write(c->s))
		return (false);
	return (nghttp2_session_want_read(c->s) ||
	    nghttp2_session_want_write(c->s) || c->wpend_len > 0);
}

static void *
grpc_conn_main(void *arg)
{
	struct grpc_conn *c = arg;
	bool goaway = false;

	c->last_rx_ns = sm_mono_ns();
	if ((c->g->cfg.tls == NULL || grpc_tls_accept(c)) &&
	    grpc_session_new(c) == 0 && grpc_flush(c)) {
		while (grpc_round(c, &goaway))
			;
	}
	if (c->s != NULL)
		nghttp2_session_del(c->s);
	c->s = NULL;
	while (c->streams != NULL)
		grpc_stream_free(c->streams);
	sm_tls_session_free(c->tls);
	c->tls = NULL;
	(void)close(c->fd);
	c->fd = -1;
	pthread_mutex_lock(&c->g->mu);
	c->done = true;
	pthread_mutex_unlock(&c->g->mu);
	return (NULL);
}

/* --- the acceptor -------------------------------------------------------------- */

/* Join and free finished connections; with `all`, every connection. */
static void
grpc_reap(struct sm_grpc *g, bool all)
{
	for (;;) {
		struct grpc_conn **pp, *c = NULL;

		pthread_mutex_lock(&g->mu);
		for (pp = &g->conns; *pp != NULL; pp = &(*pp)->next) {
			if ((*pp)->done || all) {
				c = *pp;
				*pp = c->next;
				g->nconns--;
				break;
			}
		}
		pthread_mutex_unlock(&g->mu);
		if (c == NULL)
			return;
		pthread_join(c->th, NULL);
		sm_free(c);
	}
}

static unsigned
grpc_count_ip(struct sm_grpc *g, const char *ip)
{
	unsigned n = 0;

	for (struct grpc_conn *c = g->conns; c != NULL; c = c->next)
		n += !c->done && strcmp(c->ip, ip) == 0;
	return (n);
}

static void
grpc_accept_one(struct sm_grpc *g)
{
	struct grpc_conn *c;
	int fd;

	if ((c = sm_calloc(1, sizeof(*c))) == NULL)
		return;
	c->peer_len = sizeof(c->peer);
	fd = accept4(g->lfd, (struct sockaddr *)&c->peer, &c->peer_len,
	    SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		sm_free(c);
		return;
	}
	grpc_reap(g, false);            /* ended ones count no more */
	c->g = g;
	c->fd = fd;
	if (c->peer.ss_family == AF_INET)
		(void)inet_ntop(AF_INET, &((struct sockaddr_in *)&c->peer)->
		    sin_addr, c->ip, sizeof(c->ip));
	pthread_mutex_lock(&g->mu);
	if (g->cfg.per_ip_limit > 0 && grpc_count_ip(g, c->ip) >=
	    g->cfg.per_ip_limit) {
		pthread_mutex_unlock(&g->mu);
		sm_debug("grpc", "per-IP connection limit: closed\tpeer=%s",
		    c->ip);
		(void)close(fd);
		sm_free(c);
		return;
	}
	if (pthread_create(&c->th, NULL, grpc_conn_main, c) != 0) {
		pthread_mutex_unlock(&g->mu);
		(void)close(fd);
		sm_free(c);
		return;
	}
	c->next = g->conns;
	g->conns = c;
	g->nconns++;
	pthread_mutex_unlock(&g->mu);
}

static void *
grpc_accept_main(void *arg)
{
	struct sm_grpc *g = arg;

	while (!atomic_load(&g->stopping)) {
		struct pollfd pf[2] = { { g->wake, POLLIN, 0 },
		    { g->lfd, POLLIN, 0 } };
		bool full;

		grpc_reap(g, false);
		pthread_mutex_lock(&g->mu);
		full = g->nconns >= g->cfg.conn_limit;
		pthread_mutex_unlock(&g->mu);
		/* At the limit, new connections wait in the backlog; the
		 * timeout rechecks once a connection may have ended. */
		if (poll(pf, full ? 1 : 2, full ? 50 : GRPC_POLL_MAX_MS) > 0 &&
		    !full && (pf[1].revents & POLLIN) != 0)
			grpc_accept_one(g);
	}
	return (NULL);
}

/* --- start and stop -------------------------------------------------------------- */

void
sm_grpc_cfg_default(struct sm_grpc_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->listen = "";
	cfg->conn_limit = 1024;
	cfg->per_ip_limit = 256;
	cfg->idle_timeout_s = 120;
	cfg->max_streams = 100;
	cfg->max_recv_msg = 16u << 20;
	cfg->max_send_msg = 128u << 20;
}

static int
grpc_listen(struct sm_grpc *g, struct sm_err *err)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int one = 1, rv;

	if ((rv = sm_http_parse_listen(g->cfg.listen, &sa, err)) != 0)
		return (rv);
	if ((g->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0)) < 0)
		return (sm_err_set(err, SM_EIO, "grpc: socket: %s",
		    strerror(errno)));
	(void)setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(g->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(g->lfd, 1024) != 0 ||
	    getsockname(g->lfd, (struct sockaddr *)&sa, &len) != 0)
		return (sm_err_set(err, SM_EIO, "grpc: cannot listen on %s: "
		    "%s", g->cfg.listen, strerror(errno)));
	g->port = ntohs(sa.sin_port);
	return (0);
}

int
sm_grpc_start(const struct sm_grpc_cfg *cfg, struct sm_http *http,
    struct sm_grpc **out, struct sm_err *err)
{
	struct sm_grpc *g;
	int rv;

	*out = NULL;
	if (cfg->conn_limit < 1 || cfg->idle_timeout_s < 1 ||
	    cfg->max_streams < 1 || cfg->max_streams > 128 ||
	    cfg->max_recv_msg < 1 || cfg->max_send_msg < 1 ||
	    cfg->max_recv_msg > UINT32_MAX || cfg->max_send_msg > UINT32_MAX)
		return (sm_err_set(err, SM_EINVAL, "grpc: the connection "
		    "limit, idle timeout and message sizes must be >= 1 "
		    "(messages below 4 GiB), streams 1 to 128"));
	if ((g = sm_calloc(1, sizeof(*g))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "grpc: out of memory"));
	g->cfg = *cfg;
	g->http = http;
	g->lfd = g->wake = -1;
	pthread_mutex_init(&g->mu, NULL);
	if ((rv = grpc_listen(g, err)) != 0)
		goto fail;
	if ((g->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    pthread_create(&g->acceptor, NULL, grpc_accept_main, g) != 0) {
		rv = sm_err_set(err, SM_EIO, "grpc: cannot start the "
		    "acceptor");
		goto fail;
	}
	sm_info("grpc", "listening\taddress=%s port=%u", cfg->listen, g->port);
	*out = g;
	return (0);
fail:
	if (g->wake >= 0)
		(void)close(g->wake);
	if (g->lfd >= 0)
		(void)close(g->lfd);
	pthread_mutex_destroy(&g->mu);
	sm_free(g);
	return (rv);
}

unsigned
sm_grpc_port(const struct sm_grpc *g)
{
	return (g->port);
}

void
sm_grpc_stop(struct sm_grpc *g)
{
	uint64_t one = 1;

	if (g == NULL)
		return;
	g->stop_deadline_ns = sm_mono_ns() + (int64_t)GRPC_STOP_GRACE_MS *
	    1000000;
	atomic_store(&g->stopping, true);
	(void)!write(g->wake, &one, sizeof(one));
	pthread_join(g->acceptor, NULL);
	(void)close(g->lfd);
	grpc_reap(g, true);
	(void)close(g->wake);
	pthread_mutex_destroy(&g->mu);
	sm_info("grpc", "stopped\tport=%u", g->port);
	sm_free(g);
}

/* --- tests -------------------------------------------------------------------- */

int
sm_grpc_feed(const uint8_t *data, size_t len, size_t chunk, bool answer)
{
	struct sm_grpc g;
	struct grpc_conn c;
	int n;

	memset(&g, 0, sizeof(g));
	sm_grpc_cfg_default(&g.cfg);
	g.cfg.max_recv_msg = 64u << 10;
	g.cfg.max_send_msg = 64u << 10;
	g.lfd = g.wake = -1;
	memset(&c, 0, sizeof(c));
	c.g = &g;
	c.fd = -1;
	c.last_rx_ns = sm_mono_ns();
	if (grpc_session_new(&c) != 0) {
		if (c.s != NULL)
			nghttp2_session_del(c.s);
		return (-1);
	}
	if (answer) {
		/* The bytes as the HTTP server's answer to a stream. */
		struct grpc_stream *st = sm_calloc(1, sizeof(*st));

		if (st != NULL) {
			st->c = &c;
			st->id = 1;
			st->fd = -1;
			st->state = ST_BACKEND;
			(void)snprintf(st->ctype, sizeof(st->ctype),
			    "application/grpc");
			st->in.limit = g.cfg.max_send_msg + GRPC_RSP_HDR_MAX;
			st->next = c.streams;
			c.streams = st;
			c.nstreams++;
			sm_buf_append(&st->in, data, len);
			grpc_answer(st);
		}
	} else {
		for (size_t off = 0; off < len; off += chunk) {
			const uint8_t *out;

			if (nghttp2_session_mem_recv(c.s, data + off,
			    SM_MIN(chunk, len - off)) < 0)
				break;
			while (nghttp2_session_mem_send(c.s, &out) > 0)
				;
		}
	}
	n = (int)c.dispatched;
	nghttp2_session_del(c.s);
	while (c.streams != NULL)
		grpc_stream_free(c.streams);
	return (n);
}
