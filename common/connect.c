/*
 * connect.c -- Connect unary RPC on the HTTP server; see connect.h.
 *
 * One call, in the order connect-go checks things:
 *
 *   1. Content-Type -> codec (proto or json), else 415;
 *   2. Connect-Protocol-Version: absent or "1", else invalid_argument;
 *   3. Connect-Timeout-Ms -> call.deadline_ns (1..10 digits, else
 *      invalid_argument);
 *   4. Content-Encoding: identity or gzip, else unimplemented;
 *   5. inflate (gzip, non-empty body only), decode into the request arena;
 *   6. run the handler, which builds its response in the call arena;
 *   7. encode with the request's codec, gzip it when the client accepts
 *      gzip and it is over 1 KiB (and actually shrinks), reply 200.
 *
 * Any failure is a Connect error: application/json {"code","message"} with
 * the status of sm_connect_status() -- or, for a gRPC-web call (its
 * Content-Type, step 1), the status in grpc-status / grpc-message headers
 * of a 200 with no body, as gRPC-web's trailers-only answer.  gRPC-web
 * calls read grpc-timeout and grpc-encoding instead of steps 2-4, unframe
 * their one message (base64-decoding the -text variant first) and frame
 * the answer with a trailer (grpcweb_unframe, grpcweb_reply).  Errors are never compressed.  The
 * 415 of step 1 has no Connect code (connect-go sends it bare, with
 * Accept-Post); ours adds Accept-Post and, for curl users, a JSON body
 * with code "unimplemented", as sm_http_status_for() has it.  The
 * deadline is only handed to the handler: the framework does not refuse
 * a call whose deadline has already passed (Connect-Timeout-Ms: 0).
 *
 * Memory.  Two arenas per call, both dropped after the reply:
 *   - the request arena holds the inflated body and the decoded request.
 *     Its budget is CONNECT_DECODE_FACTOR times the body cap plus
 *     CONNECT_DECODE_SLACK, because decoding expands: a 2-byte empty
 *     sub-message on the wire becomes a whole C struct plus a pointer.
 *     Running out is answered resource_exhausted, like connect-go's read
 *     limit;
 *   - the call arena (call->arena) is unlimited: the handler owns the
 *     bounds of what it builds (max nodes, series limits, tenant limits).
 *
 * Registrations.  sm_http_route() keeps only a function and an argument,
 * and the server has no hook to free the argument, so each distinct
 * registration (descriptor, function, argument, cap) is kept for the life
 * of the process on a global list and reused when registered again (tests
 * start many servers).  A server registers a fixed handful at startup.
 *
 * Binary requests are decoded by protobuf-c, which (unlike Go) does not
 * check that strings are UTF-8 and keeps a string only up to an embedded
 * NUL; malformed input and an exhausted arena both come back as NULL, so
 * the allocator is wrapped to tell the two apart.
 *
 * Body cap.  The route's body_max caps the inflated size as well.  When it
 * is 0 the HTTP server applies its configured default to the raw body, but
 * http.h has no way to read that value back, so the inflate cap is then
 * sm_http_cfg_default()'s default_body_max (what `smolder` configures).
 */
#include "connect.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "buf.h"
#include "byteorder.h"
#include "gz.h"
#include "log.h"
#include "pbjson.h"

#define CONNECT_DECODE_FACTOR 64
#define CONNECT_DECODE_SLACK (1u << 20)
#define CONNECT_GZIP_MIN 1024u          /* compress responses above this */
#define CONNECT_GZIP_LEVEL 6
#define CONNECT_TIMEOUT_DIGITS_MAX 10

enum connect_codec {
	CONNECT_CODEC_NONE,
	CONNECT_CODEC_PROTO,
	CONNECT_CODEC_JSON,
};

/* The protocol a call speaks (header comment, "gRPC-web"). */
enum connect_wire {
	WIRE_CONNECT,
	WIRE_GRPC_WEB,          /* application/grpc-web[+proto|+json] */
	WIRE_GRPC_WEB_TEXT,     /* application/grpc-web-text[+proto]: base64 */
};

#define GRPC_FRAME_HDR 5
#define GRPC_FLAG_COMPRESSED 0x01
#define GRPC_FLAG_TRAILER 0x80
#define GRPC_TIMEOUT_DIGITS_MAX 8

struct connect_route {
	struct connect_route *next;     /* on connect_routes; never freed */
	const ProtobufCMessageDescriptor *in;
	sm_connect_fn fn;
	void *arg;
	size_t body_max;                /* as registered (0 = default) */
};

static pthread_mutex_t connect_mu = PTHREAD_MUTEX_INITIALIZER;
static struct connect_route *connect_routes;

/* --- codes ---------------------------------------------------------------- */

/*
 * Indexes into connect_codes: sm_connect_code_for() picks an entry by index,
 * not by name, so no string comparison of two constants is left for the
 * optimiser to fold (GCC 12 -O3 -Wstring-compare reported one as always
 * unequal after inlining sm_connect_status()).
 */
enum connect_code {
	CC_CANCELED,
	CC_UNKNOWN,
	CC_INVALID_ARGUMENT,
	CC_DEADLINE_EXCEEDED,
	CC_NOT_FOUND,
	CC_ALREADY_EXISTS,
	CC_PERMISSION_DENIED,
	CC_RESOURCE_EXHAUSTED,
	CC_FAILED_PRECONDITION,
	CC_ABORTED,
	CC_OUT_OF_RANGE,
	CC_UNIMPLEMENTED,
	CC_INTERNAL,
	CC_UNAVAILABLE,
	CC_DATA_LOSS,
	CC_UNAUTHENTICATED,
};

static const struct {
	const char *code;
	int status;
} connect_codes[] = {
	[CC_CANCELED] = { "canceled", 499 },
	[CC_UNKNOWN] = { "unknown", 500 },
	[CC_INVALID_ARGUMENT] = { "invalid_argument", 400 },
	[CC_DEADLINE_EXCEEDED] = { "deadline_exceeded", 504 },
	[CC_NOT_FOUND] = { "not_found", 404 },
	[CC_ALREADY_EXISTS] = { "already_exists", 409 },
	[CC_PERMISSION_DENIED] = { "permission_denied", 403 },
	[CC_RESOURCE_EXHAUSTED] = { "resource_exhausted", 429 },
	[CC_FAILED_PRECONDITION] = { "failed_precondition", 400 },
	[CC_ABORTED] = { "aborted", 409 },
	[CC_OUT_OF_RANGE] = { "out_of_range", 400 },
	[CC_UNIMPLEMENTED] = { "unimplemented", 501 },
	[CC_INTERNAL] = { "internal", 500 },
	[CC_UNAVAILABLE] = { "unavailable", 503 },
	[CC_DATA_LOSS] = { "data_loss", 500 },
	[CC_UNAUTHENTICATED] = { "unauthenticated", 401 },
};

int
sm_connect_status(const char *code)
{
	for (size_t i = 0; code != NULL && i < SM_ARRAY_LEN(connect_codes);
	    i++) {
		if (strcmp(connect_codes[i].code, code) == 0)
			return (connect_codes[i].status);
	}
	return (500);           /* an unknown code reads as "unknown" */
}

int
sm_connect_grpc_code(const char *code)
{
	for (size_t i = 0; code != NULL && i < SM_ARRAY_LEN(connect_codes);
	    i++) {
		if (strcmp(connect_codes[i].code, code) == 0)
			return ((int)i + 1);
	}
	return (CC_UNKNOWN + 1);
}

void
sm_connect_grpc_message(struct sm_buf *b, const char *msg)
{
	for (const unsigned char *p = (const unsigned char *)msg; *p != '\0';
	    p++) {
		if (*p < 0x20 || *p > 0x7e || *p == '%')
			sm_buf_printf(b, "%%%02X", *p);
		else
			sm_buf_putc(b, (char)*p);
	}
	sm_buf_append(b, "", 0);        /* NUL-terminated even when empty */
}

/* SM_E* -> Connect code: sm_err_wire() (common/sm.c has the table). */
const char *
sm_connect_code_for(int rv, int *status)
{
	const char *code = sm_err_wire(rv)->connect_code;

	if (status != NULL)
		*status = sm_connect_status(code);
	return (code);
}

/* --- header parsing ------------------------------------------------------- */

static const char *
connect_skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return (p);
}

/* [p, end) without surrounding blanks equals s (ASCII case-insensitive)? */
static bool
connect_token_eq(const char *p, const char *end, const char *s)
{
	size_t n = strlen(s);

	p = connect_skip_ws(p, end);
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	return ((size_t)(end - p) == n && strncasecmp(p, s, n) == 0);
}

/*
 * "application/proto" or "application/json", optionally followed by
 * "; charset=utf-8" (any case, optionally quoted); anything else is no
 * codec we serve.
 */
static enum connect_codec
connect_codec(const char *ct, enum connect_wire *wire)
{
	static const struct {
		const char *type;
		enum connect_wire wire;
		enum connect_codec codec;
	} types[] = {
		{ "application/proto", WIRE_CONNECT, CONNECT_CODEC_PROTO },
		{ "application/json", WIRE_CONNECT, CONNECT_CODEC_JSON },
		{ "application/grpc-web", WIRE_GRPC_WEB, CONNECT_CODEC_PROTO },
		{ "application/grpc-web+proto", WIRE_GRPC_WEB,
		    CONNECT_CODEC_PROTO },
		{ "application/grpc-web+json", WIRE_GRPC_WEB,
		    CONNECT_CODEC_JSON },
		{ "application/grpc-web-text", WIRE_GRPC_WEB_TEXT,
		    CONNECT_CODEC_PROTO },
		{ "application/grpc-web-text+proto", WIRE_GRPC_WEB_TEXT,
		    CONNECT_CODEC_PROTO },
	};
	const char *end, *semi;
	enum connect_codec c = CONNECT_CODEC_NONE;

	*wire = WIRE_CONNECT;
	if (ct == NULL)
		return (CONNECT_CODEC_NONE);
	end = ct + strlen(ct);
	semi = memchr(ct, ';', (size_t)(end - ct));
	if (semi == NULL)
		semi = end;
	for (size_t i = 0; i < SM_ARRAY_LEN(types); i++) {
		if (connect_token_eq(ct, semi, types[i].type)) {
			c = types[i].codec;
			*wire = types[i].wire;
			break;
		}
	}
	if (c == CONNECT_CODEC_NONE)
		return (CONNECT_CODEC_NONE);
	while (semi < end) {
		const char *p = semi + 1;

		semi = memchr(p, ';', (size_t)(end - p));
		if (semi == NULL)
			semi = end;
		if (!connect_token_eq(p, semi, "charset=utf-8") &&
		    !connect_token_eq(p, semi, "charset=\"utf-8\""))
			return (CONNECT_CODEC_NONE);
	}
	return (c);
}

/*
 * Does Accept-Encoding list gzip with a non-zero quality?  Tokens are
 * compared without case; "*" is not taken as gzip (connect-go matches
 * names only).
 */
static bool
connect_accepts_gzip(const char *ae)
{
	const char *p = ae, *end, *comma, *semi, *q;

	if (ae == NULL)
		return (false);
	end = ae + strlen(ae);
	for (; p < end; p = comma + 1) {
		comma = memchr(p, ',', (size_t)(end - p));
		if (comma == NULL)
			comma = end;
		semi = memchr(p, ';', (size_t)(comma - p));
		if (!connect_token_eq(p, semi != NULL ? semi : comma, "gzip"))
			continue;
		if (semi == NULL)
			return (true);
		/* ";q=0", ";q=0.0", ... refuse it; any other q accepts. */
		q = connect_skip_ws(semi + 1, comma);
		if (comma - q < 3 || strncasecmp(q, "q=", 2) != 0)
			return (true);
		for (q += 2; q < comma && (*q == '0' || *q == '.'); q++)
			;
		q = connect_skip_ws(q, comma);
		return (q < comma);
	}
	return (false);
}

/* Connect-Timeout-Ms: 1 to 10 ASCII digits. */
static int
connect_parse_timeout(const char *s, int64_t *ms)
{
	int64_t v = 0;
	size_t n = 0;

	for (; s[n] != '\0'; n++) {
		if (s[n] < '0' || s[n] > '9' || n >= CONNECT_TIMEOUT_DIGITS_MAX)
			return (SM_EINVAL);
		v = v * 10 + (s[n] - '0');
	}
	if (n == 0)
		return (SM_EINVAL);
	*ms = v;
	return (0);
}

/* grpc-timeout: 1 to 8 ASCII digits and a unit, H M S m u or n. */
static int
grpc_parse_timeout(const char *s, int64_t *ns)
{
	static const struct { char unit; int64_t ns; } units[] = {
		{ 'H', 3600000000000LL }, { 'M', 60000000000LL },
		{ 'S', 1000000000LL }, { 'm', 1000000LL }, { 'u', 1000LL },
		{ 'n', 1LL },
	};
	size_t n = strlen(s);
	int64_t v = 0;

	if (n < 2 || n > GRPC_TIMEOUT_DIGITS_MAX + 1)
		return (SM_EINVAL);
	for (size_t i = 0; i + 1 < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return (SM_EINVAL);
		v = v * 10 + (s[i] - '0');
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(units); i++) {
		if (units[i].unit == s[n - 1]) {
			/* 10^8 hours do not fit: cap at a century */
			*ns = v > INT64_MAX / units[i].ns ? INT64_MAX / 2 :
			    v * units[i].ns;
			return (0);
		}
	}
	return (SM_EINVAL);
}

/* --- decoding ------------------------------------------------------------- */

/* The arena allocator, remembering whether it ran out (protobuf-c reports
 * malformed input and allocation failure alike, as NULL). */
struct connect_alloc {
	ProtobufCAllocator arena;
	bool failed;
};

static void *
connect_pb_alloc(void *data, size_t size)
{
	struct connect_alloc *ca = data;
	void *p = ca->arena.alloc(ca->arena.allocator_data, size);

	if (p == NULL)
		ca->failed = true;
	return (p);
}

static void
connect_pb_free(void *data, void *p)
{
	struct connect_alloc *ca = data;

	ca->arena.free(ca->arena.allocator_data, p);
}

static int
connect_decode(const struct connect_route *cr, enum connect_codec codec,
    const uint8_t *body, size_t len, struct sm_arena *a,
    ProtobufCMessage **out, struct sm_err *err)
{
	struct connect_alloc ca = { sm_arena_pbc(a), false };
	ProtobufCAllocator al = {
		.alloc = connect_pb_alloc,
		.free = connect_pb_free,
		.allocator_data = &ca,
	};
	ProtobufCMessage *m;

	*out = NULL;
	if (codec == CONNECT_CODEC_JSON && len != 0)
		return (sm_pbjson_decode(cr->in, (const char *)body, len, a,
		    out, err));
	if (codec == CONNECT_CODEC_JSON) {
		/* The empty body is the empty message in every codec. */
		if ((m = sm_arena_alloc(a, cr->in->sizeof_message)) == NULL)
			goto oom;
		cr->in->message_init(m);
		*out = m;
		return (0);
	}
	m = protobuf_c_message_unpack(cr->in, &al, len, body);
	if (m == NULL && ca.failed)
		goto oom;
	if (m == NULL)
		return (sm_err_set(err, SM_EINVAL, "unmarshal into %s: "
		    "malformed protobuf data", cr->in->name));
	*out = m;
	return (0);
oom:
	return (sm_err_set(err, SM_ENOMEM, "unmarshal into %s: the request "
	    "needs more than %zu bytes of memory", cr->in->name,
	    sm_arena_budget(a)));
}

/* --- encoding ------------------------------------------------------------- */

struct connect_pbbuf {
	ProtobufCBuffer base;
	struct sm_buf *b;
};

static void
connect_pb_append(ProtobufCBuffer *pb, size_t len, const uint8_t *data)
{
	struct connect_pbbuf *cb = (struct connect_pbbuf *)pb;

	sm_buf_append(cb->b, data, len);
}

static void
connect_encode(const ProtobufCMessage *m, enum connect_codec codec,
    struct sm_buf *b)
{
	struct connect_pbbuf cb = { { connect_pb_append }, b };

	if (codec == CONNECT_CODEC_JSON) {
		sm_pbjson_encode(m, b);
		return;
	}
	if (sm_buf_reserve(b, protobuf_c_message_get_packed_size(m)) != 0)
		return;
	protobuf_c_message_pack_to_buffer(m, &cb.base);
}

/* --- the handler ---------------------------------------------------------- */

/* What a call's answers are written as: its protocol and codec. */
struct connect_how {
	enum connect_wire wire;
	enum connect_codec codec;
};

static const char *
grpcweb_ctype(struct connect_how how)
{
	if (how.wire == WIRE_GRPC_WEB_TEXT)
		return ("application/grpc-web-text+proto");
	return (how.codec == CONNECT_CODEC_JSON ?
	    "application/grpc-web+json" : "application/grpc-web+proto");
}

/*
 * A gRPC-web error: 200 with the status in the headers and no body (a
 * "trailers-only" answer).  gRPC's numeric codes are Connect's in the
 * same order, from 1 (canceled) to 16 (unauthenticated); grpc-message is
 * percent-encoded (bytes outside printable ASCII, and '%').
 */
static void
grpcweb_fail(struct sm_http_req *r, struct connect_how how, const char *code,
    const char *msg)
{
	struct sm_buf m = SM_BUF_INIT;
	char num[8];

	(void)snprintf(num, sizeof(num), "%d", sm_connect_grpc_code(code));
	sm_connect_grpc_message(&m, msg);
	sm_http_set_header(r, "grpc-status", num);
	sm_http_set_header(r, "grpc-message", m.b != NULL &&
	    sm_buf_error(&m) == 0 ? m.b : "");
	sm_http_reply(r, 200, grpcweb_ctype(how), "", 0);
	sm_buf_fini(&m);
}

static void
connect_fail(struct sm_http_req *r, struct connect_how how, int rv,
    const char *msg)
{
	int status;
	const char *code = sm_connect_code_for(rv, &status);

	if (status >= 500)
		sm_warn("connect", "call failed\tpath=%s code=%s err=\"%s\"",
		    sm_http_path(r), code, msg);
	else
		sm_debug("connect", "call refused\tpath=%s code=%s err=\"%s\"",
		    sm_http_path(r), code, msg);
	if (how.wire != WIRE_CONNECT)
		grpcweb_fail(r, how, code, msg);
	else
		sm_http_reply_error(r, status, code, "%s", msg);
}

static size_t
connect_body_cap(const struct connect_route *cr)
{
	struct sm_http_cfg cfg;

	if (cr->body_max != 0)
		return (cr->body_max);
	sm_http_cfg_default(&cfg);
	return (cfg.default_body_max);
}

/* Whether a content encoding (the header's value, or NULL when absent)
 * is one we read: none or identity, or gzip (*gzipped). */
static bool
connect_encoding_ok(const char *enc, bool *gzipped)
{
	*gzipped = enc != NULL && strcasecmp(enc, "gzip") == 0;
	return (*gzipped || enc == NULL || enc[0] == '\0' ||
	    strcasecmp(enc, "identity") == 0);
}

/* gRPC-web's headers: grpc-timeout, grpc-encoding (of compressed
 * frames).  0, or the reply was given. */
static int
grpcweb_check_headers(struct sm_http_req *r, struct connect_how how,
    bool *gzipped, int64_t *deadline_ns)
{
	const char *tmo = sm_http_header(r, "grpc-timeout");
	const char *ge = sm_http_header(r, "grpc-encoding");
	int64_t ns;

	*deadline_ns = 0;
	if (tmo != NULL) {
		if (grpc_parse_timeout(tmo, &ns) != 0) {
			grpcweb_fail(r, how, "invalid_argument", "invalid "
			    "grpc-timeout: want 1 to 8 digits and a unit "
			    "(H, M, S, m, u, n)");
			return (SM_EINVAL);
		}
		*deadline_ns = sm_mono_ns() + ns;
	}
	if (connect_encoding_ok(ge, gzipped))
		return (0);
	sm_http_set_header(r, "grpc-accept-encoding", "gzip");
	grpcweb_fail(r, how, "unimplemented", "unknown grpc-encoding: "
	    "supported encodings are gzip");
	return (SM_EUNSUPPORTED);
}

/* Steps 1-4 of the header comment: 0, or the reply was given. */
static int
connect_check_headers(struct sm_http_req *r, struct connect_how *how,
    bool *gzipped, int64_t *deadline_ns)
{
	const char *ct = sm_http_header(r, "Content-Type");
	const char *ver = sm_http_header(r, "Connect-Protocol-Version");
	const char *tmo = sm_http_header(r, "Connect-Timeout-Ms");
	const char *ce = sm_http_header(r, "Content-Encoding");
	int64_t ms;

	if ((how->codec = connect_codec(ct, &how->wire)) ==
	    CONNECT_CODEC_NONE) {
		sm_http_set_header(r, "Accept-Post",
		    "application/json, application/proto, application/grpc-web"
		    "+proto, application/grpc-web+json, application/grpc-web-"
		    "text");
		sm_http_reply_error(r, 415, "unimplemented", "unsupported "
		    "content type \"%.128s\": use application/proto or "
		    "application/json (Connect), or application/grpc-web"
		    "[+proto|+json] or application/grpc-web-text (gRPC-web)",
		    ct != NULL ? ct : "");
		return (SM_EUNSUPPORTED);
	}
	if (how->wire != WIRE_CONNECT)
		return (grpcweb_check_headers(r, *how, gzipped, deadline_ns));
	if (ver != NULL && strcmp(ver, "1") != 0) {
		sm_http_reply_error(r, 400, "invalid_argument",
		    "Connect-Protocol-Version must be \"1\": got \"%.32s\"",
		    ver);
		return (SM_EINVAL);
	}
	*deadline_ns = 0;
	if (tmo != NULL) {
		if (connect_parse_timeout(tmo, &ms) != 0) {
			sm_http_reply_error(r, 400, "invalid_argument",
			    "invalid Connect-Timeout-Ms \"%.32s\": want 1 to "
			    "%d digits", tmo, CONNECT_TIMEOUT_DIGITS_MAX);
			return (SM_EINVAL);
		}
		*deadline_ns = sm_mono_ns() + ms * 1000000;
	}
	if (connect_encoding_ok(ce, gzipped))
		return (0);
	sm_http_set_header(r, "Accept-Encoding", "gzip");
	sm_http_reply_error(r, 501, "unimplemented", "unknown compression "
	    "\"%.32s\": supported encodings are gzip", ce);
	return (SM_EUNSUPPORTED);
}

static void
put_be32(struct sm_buf *b, uint32_t v)
{
	char q[4] = { (char)(v >> 24), (char)(v >> 16), (char)(v >> 8),
	    (char)v };

	sm_buf_append(b, q, 4);
}

/*
 * A gRPC-web answer: the message in one data frame, then a trailer frame
 * with grpc-status 0; the text variant base64-encodes the whole body.
 * Messages are not compressed (grpc-encoding is a client's choice to
 * ask, never to require).
 */
static void
grpcweb_reply(struct sm_http_req *r, const ProtobufCMessage *resp,
    struct connect_how how)
{
	static const char trailer[] = "grpc-status:0\r\ngrpc-message:\r\n";
	struct sm_buf msg = SM_BUF_INIT, body = SM_BUF_INIT, text = SM_BUF_INIT;

	connect_encode(resp, how.codec, &msg);
	sm_buf_putc(&body, 0);
	put_be32(&body, (uint32_t)msg.len);
	sm_buf_append(&body, msg.b, msg.len);
	sm_buf_putc(&body, (char)GRPC_FLAG_TRAILER);
	put_be32(&body, sizeof(trailer) - 1);
	sm_buf_append(&body, trailer, sizeof(trailer) - 1);
	if (how.wire == WIRE_GRPC_WEB_TEXT)
		sm_buf_put_base64(&text, (const uint8_t *)body.b, body.len);
	if (sm_buf_error(&msg) != 0 || msg.len > UINT32_MAX ||
	    sm_buf_error(&body) != 0 || sm_buf_error(&text) != 0)
		connect_fail(r, how, SM_ENOMEM, "out of memory encoding the "
		    "response");
	else
		sm_http_reply_buf(r, 200, grpcweb_ctype(how),
		    how.wire == WIRE_GRPC_WEB_TEXT ? &text : &body);
	sm_buf_fini(&msg);
	sm_buf_fini(&body);
	sm_buf_fini(&text);
}

/*
 * A gRPC-web request body -> the one message it frames (in *msg, maybe
 * in the request arena).  SM_EINVAL for bad base64, a torn frame or a
 * trailer frame; SM_EUNSUPPORTED for no message or several (a unary
 * call has one; connect-go says unimplemented too); a compressed frame
 * needs grpc-encoding gzip, and inflates within `cap`.
 */
static int
grpcweb_unframe(struct connect_how how, bool gzipped, const uint8_t *body,
    size_t len, size_t cap, struct sm_arena *a, const uint8_t **msg,
    size_t *mlen, struct sm_err *err)
{
	struct sm_buf dec = SM_BUF_INIT;
	uint8_t *p, flags;
	uint32_t n;
	int rv = 0;

	if (how.wire == WIRE_GRPC_WEB_TEXT) {
		if ((rv = sm_buf_put_unbase64(&dec, (const char *)body,
		    len)) != 0) {
			sm_buf_fini(&dec);
			return (sm_err_set(err, rv == SM_EINVAL ? SM_EINVAL : rv,
			    "grpc-web-text body is not base64"));
		}
		if ((p = sm_arena_alloc(a, SM_MAX(dec.len, 1))) == NULL) {
			sm_buf_fini(&dec);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		memcpy(p, dec.b, dec.len);
		body = p;
		len = dec.len;
		sm_buf_fini(&dec);
	}
	if (len == 0)
		return (sm_err_set(err, SM_EUNSUPPORTED, "unary request has "
		    "no message"));
	if (len < GRPC_FRAME_HDR)
		return (sm_err_set(err, SM_EINVAL, "gRPC-web frame header cut "
		    "short: %zu bytes", len));
	flags = body[0];
	n = sm_get_be32(body + 1);
	if (flags & GRPC_FLAG_TRAILER)
		return (sm_err_set(err, SM_EINVAL, "a request cannot carry a "
		    "trailer frame"));
	if (n > len - GRPC_FRAME_HDR)
		return (sm_err_set(err, SM_EINVAL, "gRPC-web frame of %u bytes "
		    "cut short at %zu", n, len - GRPC_FRAME_HDR));
	if (len - GRPC_FRAME_HDR != n)
		return (sm_err_set(err, SM_EUNSUPPORTED, "unary request has "
		    "more than one message"));
	*msg = body + GRPC_FRAME_HDR;
	*mlen = n;
	if (!(flags & GRPC_FLAG_COMPRESSED))
		return (0);
	if (!gzipped)
		return (sm_err_set(err, SM_EINVAL, "compressed frame without "
		    "grpc-encoding"));
	if (n == 0)
		return (0);
	return (sm_gunzip(*msg, n, cap, a, &p, mlen, err) != 0 ? err->code :
	    (*msg = p, 0));
}

/* Step 7: encode, maybe compress, reply 200. */
static void
connect_reply(struct sm_http_req *r, const ProtobufCMessage *resp,
    struct connect_how how)
{
	const char *ctype = how.codec == CONNECT_CODEC_JSON ?
	    "application/json" : "application/proto";
	struct sm_buf b = SM_BUF_INIT;
	uint8_t *gz = NULL;
	size_t gzlen = 0;

	if (how.wire != WIRE_CONNECT) {
		grpcweb_reply(r, resp, how);
		return;
	}
	connect_encode(resp, how.codec, &b);
	if (sm_buf_error(&b) != 0) {
		sm_buf_fini(&b);
		connect_fail(r, how, SM_ENOMEM, "out of memory encoding the "
		    "response");
		return;
	}
	if (b.len > CONNECT_GZIP_MIN &&
	    connect_accepts_gzip(sm_http_header(r, "Accept-Encoding")) &&
	    sm_gzip((const uint8_t *)b.b, b.len, CONNECT_GZIP_LEVEL, &gz,
	    &gzlen) == 0 && gzlen < b.len) {
		sm_http_set_header(r, "Content-Encoding", "gzip");
		sm_http_reply(r, 200, ctype, gz, gzlen);
	} else {
		sm_http_reply_buf(r, 200, ctype, &b);
	}
	sm_free(gz);
	sm_buf_fini(&b);
}

static void
connect_serve(struct sm_http_req *r, void *arg)
{
	const struct connect_route *cr = arg;
	struct sm_connect_call call = { r, NULL, 0, 0 };
	struct sm_arena *ra = NULL;
	ProtobufCMessage *req, *resp = NULL;
	struct connect_how how;
	const uint8_t *body;
	uint8_t *inflated;
	size_t len, cap = connect_body_cap(cr), used;
	bool gzipped;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	if (connect_check_headers(r, &how, &gzipped, &call.deadline_ns) != 0)
		return;
	body = sm_http_body(r, &len);
	ra = sm_arena_create(cap > (SIZE_MAX - CONNECT_DECODE_SLACK) /
	    CONNECT_DECODE_FACTOR ? 0 :
	    cap * CONNECT_DECODE_FACTOR + CONNECT_DECODE_SLACK);
	call.arena = sm_arena_create(0);
	if (ra == NULL || call.arena == NULL) {
		connect_fail(r, how, SM_ENOMEM, "out of memory starting the "
		    "call");
		goto out;
	}
	if (how.wire != WIRE_CONNECT) {
		if ((rv = grpcweb_unframe(how, gzipped, body, len, cap, ra,
		    &body, &len, &err)) != 0) {
			connect_fail(r, how, rv, err.msg);
			goto out;
		}
	} else if (gzipped && len != 0) {
		if ((rv = sm_gunzip(body, len, cap, ra, &inflated, &len,
		    &err)) != 0) {
			connect_fail(r, how, rv, err.msg);
			goto out;
		}
		body = inflated;
	}
	if ((rv = connect_decode(cr, how.codec, body, len, ra, &req,
	    &err)) != 0) {
		connect_fail(r, how, rv, err.msg);
		goto out;
	}

	rv = cr->fn(cr->arg, &call, req, &resp, &err);
	if (rv != 0) {
		connect_fail(r, how, rv, err.msg[0] != '\0' ? err.msg :
		    sm_strerror(rv));
		goto out;
	}
	if (resp == NULL) {
		sm_error("connect", "bug: handler returned no response\t"
		    "path=%s", sm_http_path(r));
		connect_fail(r, how, SM_EINTERNAL, "internal error: the "
		    "handler returned no response");
		goto out;
	}
	SM_ASSERT(resp->descriptor != NULL && resp->descriptor->magic ==
	    PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
	connect_reply(r, resp, how);
out:
	/* After a large call, give the freed heap back (sm.h). */
	used = call.heap_used + (call.arena != NULL ?
	    sm_arena_used(call.arena) : 0) + (ra != NULL ? sm_arena_used(ra) :
	    0);
	sm_arena_destroy(call.arena);
	sm_arena_destroy(ra);
	sm_mem_release(used);
}

/* --- registration --------------------------------------------------------- */

static struct connect_route *
connect_route_get(const ProtobufCMessageDescriptor *in, sm_connect_fn fn,
    void *arg, size_t body_max)
{
	struct connect_route *cr;

	pthread_mutex_lock(&connect_mu);
	for (cr = connect_routes; cr != NULL; cr = cr->next) {
		if (cr->in == in && cr->fn == fn && cr->arg == arg &&
		    cr->body_max == body_max)
			break;
	}
	if (cr == NULL && (cr = sm_calloc(1, sizeof(*cr))) != NULL) {
		cr->in = in;
		cr->fn = fn;
		cr->arg = arg;
		cr->body_max = body_max;
		cr->next = connect_routes;
		connect_routes = cr;
	}
	pthread_mutex_unlock(&connect_mu);
	return (cr);
}

int
sm_connect_route(struct sm_http *h, const char *path,
    const ProtobufCMessageDescriptor *in, sm_connect_fn fn, void *arg,
    size_t body_max)
{
	return (sm_connect_route_as(h, SM_SCOPE_ADMIN, path, in, fn, arg,
	    body_max));
}

int
sm_connect_route_as(struct sm_http *h, unsigned scope, const char *path,
    const ProtobufCMessageDescriptor *in, sm_connect_fn fn, void *arg,
    size_t body_max)
{
	struct connect_route *cr;

	SM_ASSERT(in != NULL && in->magic == PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
	SM_ASSERT(fn != NULL && path != NULL && path[0] == '/');
	if ((cr = connect_route_get(in, fn, arg, body_max)) == NULL)
		return (SM_ENOMEM);
	return (sm_http_route_as(h, scope, "POST", path, connect_serve, cr,
	    body_max));
}
