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
 * the status of sm_connect_status().  Errors are never compressed.  The
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
connect_codec(const char *ct)
{
	const char *end, *semi;
	enum connect_codec c;

	if (ct == NULL)
		return (CONNECT_CODEC_NONE);
	end = ct + strlen(ct);
	semi = memchr(ct, ';', (size_t)(end - ct));
	if (semi == NULL)
		semi = end;
	if (connect_token_eq(ct, semi, "application/proto"))
		c = CONNECT_CODEC_PROTO;
	else if (connect_token_eq(ct, semi, "application/json"))
		c = CONNECT_CODEC_JSON;
	else
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

static void
connect_fail(struct sm_http_req *r, int rv, const char *msg)
{
	int status;
	const char *code = sm_connect_code_for(rv, &status);

	if (status >= 500)
		sm_warn("connect", "call failed\tpath=%s code=%s err=\"%s\"",
		    sm_http_path(r), code, msg);
	else
		sm_debug("connect", "call refused\tpath=%s code=%s err=\"%s\"",
		    sm_http_path(r), code, msg);
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

/* Steps 1-4 of the header comment: 0, or the reply was given. */
static int
connect_check_headers(struct sm_http_req *r, enum connect_codec *codec,
    bool *gzipped, int64_t *deadline_ns)
{
	const char *ct = sm_http_header(r, "Content-Type");
	const char *ver = sm_http_header(r, "Connect-Protocol-Version");
	const char *tmo = sm_http_header(r, "Connect-Timeout-Ms");
	const char *ce = sm_http_header(r, "Content-Encoding");
	int64_t ms;

	if ((*codec = connect_codec(ct)) == CONNECT_CODEC_NONE) {
		sm_http_set_header(r, "Accept-Post",
		    "application/json, application/proto");
		sm_http_reply_error(r, 415, "unimplemented", "unsupported "
		    "content type \"%.128s\": use application/proto or "
		    "application/json", ct != NULL ? ct : "");
		return (SM_EUNSUPPORTED);
	}
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
	*gzipped = false;
	if (ce == NULL || ce[0] == '\0' || strcasecmp(ce, "identity") == 0)
		return (0);
	if (strcasecmp(ce, "gzip") == 0) {
		*gzipped = true;
		return (0);
	}
	sm_http_set_header(r, "Accept-Encoding", "gzip");
	sm_http_reply_error(r, 501, "unimplemented", "unknown compression "
	    "\"%.32s\": supported encodings are gzip", ce);
	return (SM_EUNSUPPORTED);
}

/* Step 7: encode, maybe compress, reply 200. */
static void
connect_reply(struct sm_http_req *r, const ProtobufCMessage *resp,
    enum connect_codec codec)
{
	const char *ctype = codec == CONNECT_CODEC_JSON ? "application/json" :
	    "application/proto";
	struct sm_buf b = SM_BUF_INIT;
	uint8_t *gz = NULL;
	size_t gzlen = 0;

	connect_encode(resp, codec, &b);
	if (sm_buf_error(&b) != 0) {
		sm_buf_fini(&b);
		connect_fail(r, SM_ENOMEM, "out of memory encoding the "
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
	enum connect_codec codec;
	const uint8_t *body;
	uint8_t *inflated;
	size_t len, cap = connect_body_cap(cr), used;
	bool gzipped;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	if (connect_check_headers(r, &codec, &gzipped, &call.deadline_ns) != 0)
		return;
	body = sm_http_body(r, &len);
	ra = sm_arena_create(cap > (SIZE_MAX - CONNECT_DECODE_SLACK) /
	    CONNECT_DECODE_FACTOR ? 0 :
	    cap * CONNECT_DECODE_FACTOR + CONNECT_DECODE_SLACK);
	call.arena = sm_arena_create(0);
	if (ra == NULL || call.arena == NULL) {
		connect_fail(r, SM_ENOMEM, "out of memory starting the call");
		goto out;
	}
	if (gzipped && len != 0) {
		if ((rv = sm_gunzip(body, len, cap, ra, &inflated, &len,
		    &err)) != 0) {
			connect_fail(r, rv, err.msg);
			goto out;
		}
		body = inflated;
	}
	if ((rv = connect_decode(cr, codec, body, len, ra, &req, &err)) != 0) {
		connect_fail(r, rv, err.msg);
		goto out;
	}

	rv = cr->fn(cr->arg, &call, req, &resp, &err);
	if (rv != 0) {
		connect_fail(r, rv, err.msg[0] != '\0' ? err.msg :
		    sm_strerror(rv));
		goto out;
	}
	if (resp == NULL) {
		sm_error("connect", "bug: handler returned no response\t"
		    "path=%s", sm_http_path(r));
		connect_fail(r, SM_EINTERNAL, "internal error: the handler "
		    "returned no response");
		goto out;
	}
	SM_ASSERT(resp->descriptor != NULL && resp->descriptor->magic ==
	    PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
	connect_reply(r, resp, codec);
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
