/*
 * otlp.c -- OpenTelemetry profiles in: OTLP/HTTP, POST /v1development/profiles
 * (what the Collector's otlphttp exporter, the OpenTelemetry eBPF
 * profiler and async-profiler send), in the alpha format of
 * opentelemetry-proto v1.10.0 and later (third_party/opentelemetry-proto/README.md).
 *
 * Request: Content-Type application/x-protobuf or application/protobuf
 * (an ExportProfilesServiceRequest), or application/json (OTLP's JSON
 * encoding: proto3 JSON with trace_id, span_id and profile_id in hex,
 * common/pbjson.h SM_PBJSON_HEX_IDS), Content-Encoding identity or gzip
 * (inflated within the body limit, -distributor.ingestion-body-limit-mb);
 * any other type is 415.  Response: 200 with an ExportProfilesService
 * Response in the same encoding (no partial success: a request is taken
 * whole or refused whole), or an error status with a google.rpc.Status
 * body {code, message} (OTLP/HTTP's), the status and code as Connect's for
 * the same failure (400 invalid_argument, 429 resource_exhausted, 503
 * unavailable, ...), JSON for a JSON request.
 *
 * Mapping, decided to match Pyroscope's OTLP ingest where it has one and
 * pprof's semantics (the Collector's pprof translator) elsewhere:
 *   - each Profile becomes one pprof profile (google.v1.Profile) of its one
 *     sample type and its period type, built over the request's
 *     dictionary (functions, locations with their lines and mapping,
 *     mappings, strings: OTLP's table indexes are pprof's ids, index 0 is
 *     "none" in both), written as wire bytes straight from the request's
 *     (no protobuf-c unpack or pack; see "The conversion walks" below),
 *     and goes down the push.v1 Push path: the same
 *     naming, validation, limits, tenancy, replication, idempotency and
 *     remote-write as /ingest and Push (connect_push.c);
 *   - series labels: the resource's attributes, then the profile's;
 *     service.name is service_name (default "unknown_service", as
 *     Pyroscope); other keys keep their letters, digits and '_', and any
 *     other byte becomes '_' (host.name -> host_name); string, int, bool
 *     and double values are written as text; arrays, maps and bytes are
 *     left out.  The metric (__name__) comes from the sample types as
 *     /ingest derives it for pprof;
 *   - a sample's value is the sum of its values, or the number of its
 *     timestamps when it has no value (one event each: what the eBPF
 *     profiler sends); its attributes become pprof sample labels (string
 *     or number), so they split series as pprof labels do; its Link
 *     becomes the span_id label (16 hex digits) that span profiles read
 *     (SelectMergeSpanProfile);
 *   - the profile time is time_unix_nano (now when 0); the profile id
 *     (16 bytes, not all zero), hashed with the sample type, is the
 *     write's idempotency id, so a re-sent request is stored once.
 * Validation: every table index must be in its table (index 0 being the
 * zero value); a request breaking that -- as one from before v1.10.0,
 * whose Sample fields were numbered differently, does -- is refused with
 * 400 naming the field and the format accepted, and nothing is stored.
 *
 * The same conversion serves OTLP over gRPC: ProfilesService/Export is a
 * Connect route (otlp_export), which the gRPC listener (common/grpc.h)
 * and gRPC-web reach like every Connect method.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/auth.h"
#include "common/connect.h"
#include "common/gz.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/oatab.h"
#include "common/pbjson.h"
#include "common/pbwire.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb-c.h"
#include "push/v1/push.pb-c.h"

#include "dist_int.h"

#define OTLP_PATH "/v1development/profiles"
#define OTLP_GRPC_PATH "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
#define OTLP_FORMAT "OTLP profiles v1development of opentelemetry-proto " \
	"v1.10.0 or later"

/*
 * The conversion walks the request's protobuf wire format once (no
 * protobuf-c unpack: common/pbwire.h) and writes each pprof straight as
 * wire bytes, which the pprof decoder then reads as it reads any upload.
 * The dictionary's tables become pprof's once per request (OTLP's table
 * index is pprof's id; index 0, OTLP's "none", is left out), and every
 * pprof of the request carries them.
 */

/* One message's bytes within the request. */
struct otlp_msg {
	const uint8_t *p;
	size_t n;
};

/* The dictionary's tables, by ProfilesDictionary field number. */
enum {
	OD_MAPPING = 1,
	OD_LOCATION = 2,
	OD_FUNCTION = 3,
	OD_LINK = 4,
	OD_STRING = 5,
	OD_ATTRIBUTE = 6,
	OD_STACK = 7,
	OD_NTABLES = 8
};

static const char *const otlp_table_name[OD_NTABLES] = { "", "mapping_table",
	"location_table", "function_table", "link_table", "string_table",
	"attribute_table", "stack_table" };

/* A profile attribute or link resolved once per request, as the pprof
 * label it becomes. */
struct otlp_label {
	int32_t key;            /* pprof string index of the key */
	int64_t str;            /* pprof string index of the text; 0 = none */
	int64_t num;            /* an int attribute's value */
	uint8_t state;          /* 0 unresolved, 1 text, 2 num, 3 no label */
};

/* A Profile's header fields (its samples are walked when emitted). */
struct otlp_prof {
	struct otlp_msg m;
	bool has_st, has_pt;
	int32_t st_type, st_unit, pt_type, pt_unit;
	uint64_t time, duration;
	int64_t period;
	struct otlp_msg id;
	int32_t *attrs;
	uint32_t nattrs;
	uint32_t nsamples;
};

/* One sample of a group of profiles, merged by (stack, link, attributes)
 * when the group has several sample types. */
struct otlp_rec {
	int32_t stack, link;
	int32_t *attrs;
	uint32_t nattrs;
	uint64_t h;
	int64_t *val;          /* one per profile of the group */
};

struct otlp_conv {
	struct sm_arena *a;
	struct sm_err *err;
	const uint8_t *base;   /* the request, for byte offsets in errors */
	struct otlp_msg *tab[OD_NTABLES];
	uint32_t ntab[OD_NTABLES], captab[OD_NTABLES];
	/* the pprof tables every profile of the request carries */
	struct sm_buf dict;
	/* strings the conversion adds after the dictionary's: field 6
	 * entries, pprof indexes nstr0 .. nstr - 1 */
	struct sm_buf extra;
	uint32_t nstr0, nstr;
	int64_t span_key;      /* pprof index of "span_id"; 0 = not yet */
	struct otlp_label *attr;   /* per attribute_table entry */
	int64_t *link;         /* per link: its span id's pprof string */
	uint8_t *stk;          /* per stack: stack_packed's verdict */
	/* scratch: a table entry or a sample's labels past 16; the pprof
	 * being written */
	struct sm_buf tmp, out;
	int32_t *ibuf;
	uint32_t nibuf, ibuf_cap;
};

#define OTLP_V SM_PBW_V
#define OTLP_L SM_PBW_L
#define OTLP_F64 SM_PBW_F64
static const uint8_t os_request[3] = { 0, OTLP_L, OTLP_L };
static const uint8_t os_dict[8] = { 0, OTLP_L, OTLP_L, OTLP_L, OTLP_L, OTLP_L,
	OTLP_L, OTLP_L };
static const uint8_t os_resprof[4] = { 0, OTLP_L, OTLP_L, OTLP_L };
static const uint8_t os_resource[4] = { 0, OTLP_L, OTLP_V, OTLP_L };
static const uint8_t os_scopeprof[4] = { 0, OTLP_L, OTLP_L, OTLP_L };
static const uint8_t os_profile[12] = { 0, OTLP_L, OTLP_L, OTLP_F64, OTLP_V,
	OTLP_L, OTLP_V, OTLP_L, OTLP_V, OTLP_L, OTLP_L, OTLP_V | OTLP_L };
static const uint8_t os_valuetype[3] = { 0, OTLP_V, OTLP_V };
static const uint8_t os_sample[6] = { 0, OTLP_V, OTLP_V | OTLP_L, OTLP_V,
	OTLP_V | OTLP_L, OTLP_F64 | OTLP_L };
static const uint8_t os_mapping[6] = { 0, OTLP_V, OTLP_V, OTLP_V, OTLP_V,
	OTLP_V | OTLP_L };
static const uint8_t os_location[5] = { 0, OTLP_V, OTLP_V, OTLP_L,
	OTLP_V | OTLP_L };
static const uint8_t os_line[4] = { 0, OTLP_V, OTLP_V, OTLP_V };
static const uint8_t os_function[5] = { 0, OTLP_V, OTLP_V, OTLP_V, OTLP_V };
static const uint8_t os_link[3] = { 0, OTLP_L, OTLP_L };
static const uint8_t os_kvu[4] = { 0, OTLP_V, OTLP_L, OTLP_V };
static const uint8_t os_kv[4] = { 0, OTLP_L, OTLP_L, OTLP_V };
static const uint8_t os_any[9] = { 0, OTLP_L, OTLP_V, OTLP_V, OTLP_F64, OTLP_L,
	OTLP_L, OTLP_L, OTLP_V };
static const uint8_t os_stack[2] = { 0, OTLP_V | OTLP_L };

static int
nomem(struct otlp_conv *c)
{
	return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
}

/* Undecodable wire data in `what`. */
static int
wire_bad(struct otlp_conv *c, const struct sm_pbw *r, const char *what)
{
	return (sm_err_set(c->err, SM_EINVAL, "malformed protobuf: not an "
	    "ExportProfilesServiceRequest of " OTLP_FORMAT " (%s: %s at byte "
	    "%zu)", what, r->why != NULL ? r->why : "bad value",
	    (size_t)(r->p - c->base)));
}

/*
 * Step `r` to its next field `want` (a message or bytes), skipping the
 * others: *q and *qn are its body, or *q is NULL at the end of `r`.
 * Returns: 0, or wire_bad()'s error naming `what`.
 */
static int
next_field(struct otlp_conv *c, struct sm_pbw *r, uint32_t want,
    const char *what, const uint8_t **q, size_t *qn)
{
	uint32_t f, wt;

	*q = NULL;
	while (r->p < r->end) {
		if (sm_pbw_key(r, &f, &wt) != 0 || (f != want &&
		    sm_pbw_skip(r, f, wt) != 0) || (f == want &&
		    sm_pbw_bytes(r, q, qn) != 0))
			return (wire_bad(c, r, what));
		if (f == want)
			return (0);
	}
	return (0);
}

static int
bad_index(struct otlp_conv *c, const char *what, int64_t i, size_t n)
{
	return (sm_err_set(c->err, SM_EINVAL, "%s %lld is not in its table "
	    "(%zu entries): this server accepts %s (a request in an older "
	    "format numbers Sample's fields differently)", what, (long long)i,
	    n, OTLP_FORMAT));
}

/* An int32 field as protobuf-c reads it: the varint's low 32 bits. */
static inline int32_t
as_i32(uint64_t v)
{
	return ((int32_t)(uint32_t)v);
}

/* A string-table index, checked. */
static int
str_check(struct otlp_conv *c, const char *what, int32_t i)
{
	if (i < 0 || (uint32_t)i >= c->ntab[OD_STRING])
		return (bad_index(c, what, i, c->ntab[OD_STRING]));
	return (0);
}

/*
 * Read a repeated int32 field's value at r (packed when wt is LEN) into
 * c->ibuf (appended).
 */
/* Append v to c->ibuf.  -2 when out of memory. */
static int
ibuf_push(struct otlp_conv *c, uint64_t v)
{
	if (c->nibuf == c->ibuf_cap) {
		uint32_t cap = c->ibuf_cap != 0 ? c->ibuf_cap * 2 : 64;
		int32_t *nb = sm_arena_grow(c->a, c->ibuf, c->nibuf, cap,
		    sizeof(*nb));

		if (nb == NULL)
			return (-2);
		c->ibuf = nb;
		c->ibuf_cap = cap;
	}
	c->ibuf[c->nibuf++] = as_i32(v);
	return (0);
}

static int
read_i32s(struct otlp_conv *c, struct sm_pbw *r, uint32_t wt)
{
	struct sm_pbw s;
	const uint8_t *p;
	uint64_t v;
	size_t n;

	if (wt == SM_PBW_VARINT)
		return (sm_pbw_varint(r, &v) != 0 ? -1 : ibuf_push(c, v));
	if (sm_pbw_bytes(r, &p, &n) != 0)
		return (-1);
	s = (struct sm_pbw)SM_PBW_RAW(p, n);
	while (s.p < s.end) {
		if (sm_pbw_varint(&s, &v) != 0) {
			r->why = s.why;
			r->p = s.p;
			return (-1);
		}
		if (ibuf_push(c, v) != 0)
			return (-2);
	}
	return (0);
}

/* c->ibuf[from ..] copied into the arena. */
static int32_t *
i32s_copy(struct otlp_conv *c, uint32_t from, uint32_t *n)
{
	int32_t *v;

	*n = c->nibuf - from;
	if (*n == 0)
		return (NULL);
	if ((v = sm_arena_alloc(c->a, *n * sizeof(*v))) != NULL)
		memcpy(v, c->ibuf + from, *n * sizeof(*v));
	return (v);
}

/* A ValueType's two indices (fields present overwrite). */
static int
read_value_type(struct otlp_conv *c, const uint8_t *p, size_t n,
    int32_t *type, int32_t *unit, const char *what)
{
	struct sm_pbw r = SM_PBW(p, n, os_valuetype);
	uint32_t f, wt;
	uint64_t v;

	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, what));
		if ((f == 1 || f == 2) && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				return (wire_bad(c, &r, what));
			*(f == 1 ? type : unit) = as_i32(v);
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (wire_bad(c, &r, what));
		}
	}
	return (0);
}

/* Append an entry to table t of the dictionary. */
static int
table_add(struct otlp_conv *c, uint32_t t, const uint8_t *p, size_t n)
{
	if (c->ntab[t] == c->captab[t]) {
		uint32_t cap = c->captab[t] != 0 ? c->captab[t] * 2 : 64;
		struct otlp_msg *nv = sm_arena_grow(c->a, c->tab[t],
		    c->ntab[t], cap, sizeof(*nv));

		if (nv == NULL)
			return (nomem(c));
		c->tab[t] = nv;
		c->captab[t] = cap;
	}
	c->tab[t][c->ntab[t]++] = (struct otlp_msg){ p, n };
	return (0);
}

/* Index one ProfilesDictionary (several are merged, as protobuf does). */
static int
dict_index(struct otlp_conv *c, const uint8_t *p, size_t n)
{
	struct sm_pbw r = SM_PBW(p, n, os_dict);
	uint32_t f, wt;
	int rv;

	while (r.p < r.end) {
		const uint8_t *q;
		size_t qn;

		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, "ProfilesDictionary"));
		if (f >= 1 && f < OD_NTABLES && wt == SM_PBW_LEN) {
			if (sm_pbw_bytes(&r, &q, &qn) != 0)
				return (wire_bad(c, &r, otlp_table_name[f]));
			if ((rv = table_add(c, f, q, qn)) != 0)
				return (rv);
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (wire_bad(c, &r, "ProfilesDictionary"));
		}
	}
	return (0);
}

/* --- the pprof tables ------------------------------------------------------ */

/* The varint fields 1..4 of message m into f4 (absent ones 0). */
static int
read_f1to4(struct otlp_conv *c, const struct otlp_msg *m,
    const uint8_t *schema, size_t nschema, const char *what, uint64_t f4[4])
{
	struct sm_pbw r = { m->p, m->p + m->n, NULL, schema,
	    (uint32_t)nschema };
	uint32_t f, wt;
	uint64_t v;

	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, what));
		if (f >= 1 && f <= 4 && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				return (wire_bad(c, &r, what));
			f4[f - 1] = v;
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (wire_bad(c, &r, what));
		}
	}
	return (0);
}

static int
emit_mapping(struct otlp_conv *c, uint32_t i)
{
	const struct otlp_msg *m = &c->tab[OD_MAPPING][i];
	uint64_t f4[4] = { 0, 0, 0, 0 };
	int rv;

	if ((rv = read_f1to4(c, m, os_mapping, sizeof(os_mapping), "Mapping",
	    f4)) != 0)
		return (rv);
	if ((rv = str_check(c, "Mapping.filename_strindex",
	    as_i32(f4[3]))) != 0)
		return (rv);
	/* pprof Mapping: id 1, memory_start 2, memory_limit 3,
	 * file_offset 4, filename 5 */
	sm_buf_reset(&c->tmp);
	sm_pbw_put_varint(&c->tmp, 1, i);
	for (uint32_t k = 0; k < 4; k++)
		if (f4[k] != 0)
			sm_pbw_put_varint(&c->tmp, k + 2, k == 3 ?
			    (uint64_t)as_i32(f4[3]) : f4[k]);
	sm_pbw_put_bytes(&c->dict, 3, c->tmp.b, c->tmp.len);
	return (0);
}

static int
emit_function(struct otlp_conv *c, uint32_t i)
{
	static const char *const what[3] = { "Function.name_strindex",
	    "Function.system_name_strindex", "Function.filename_strindex" };
	const struct otlp_msg *m = &c->tab[OD_FUNCTION][i];
	uint64_t f4[4] = { 0, 0, 0, 0 };
	int rv;

	if ((rv = read_f1to4(c, m, os_function, sizeof(os_function),
	    "Function", f4)) != 0)
		return (rv);
	for (int k = 0; k < 3; k++)
		if ((rv = str_check(c, what[k], as_i32(f4[k]))) != 0)
			return (rv);
	/* pprof Function: id 1, name 2, system_name 3, filename 4,
	 * start_line 5 */
	sm_buf_reset(&c->tmp);
	sm_pbw_put_varint(&c->tmp, 1, i);
	for (uint32_t k = 0; k < 4; k++)
		if (f4[k] != 0)
			sm_pbw_put_varint(&c->tmp, k + 2, k < 3 ?
			    (uint64_t)as_i32(f4[k]) : f4[k]);
	sm_pbw_put_bytes(&c->dict, 5, c->tmp.b, c->tmp.len);
	return (0);
}

/*
 * The Line (field 3) at loc's cursor, its function index checked, as a
 * pprof Line {function_id 1, line 2} in c->tmp; none for function 0.
 */
static int
emit_line(struct otlp_conv *c, struct sm_pbw *loc)
{
	struct sm_pbw r;
	const uint8_t *q;
	size_t qn, k = 0;
	uint32_t f, wt, nfn = SM_MAX(c->ntab[OD_FUNCTION], 1);
	int32_t fn = 0;
	uint64_t line = 0, v;
	uint8_t ln[2 * (1 + SM_UVARINT_MAX)];

	if (sm_pbw_bytes(loc, &q, &qn) != 0)
		return (wire_bad(c, loc, "Location"));
	r = (struct sm_pbw)SM_PBW(q, qn, os_line);
	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, "Line"));
		if ((f == 1 || f == 2) && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				return (wire_bad(c, &r, "Line"));
			if (f == 1)
				fn = as_i32(v);
			else
				line = v;
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (wire_bad(c, &r, "Line"));
		}
	}
	if (fn < 0 || (uint32_t)fn >= nfn)
		return (bad_index(c, "Line.function_index", fn,
		    c->ntab[OD_FUNCTION]));
	if (fn == 0)
		return (0);
	ln[k++] = 0x08;
	k += sm_uvarint_put(ln + k, (uint64_t)fn);
	if (line != 0) {
		ln[k++] = 0x10;
		k += sm_uvarint_put(ln + k, line);
	}
	sm_pbw_put_bytes(&c->tmp, 4, ln, k);
	return (0);
}

static int
emit_location(struct otlp_conv *c, uint32_t i)
{
	const struct otlp_msg *m = &c->tab[OD_LOCATION][i];
	struct sm_pbw r = SM_PBW(m->p, m->n, os_location);
	uint32_t f, wt, nmap = SM_MAX(c->ntab[OD_MAPPING], 1);
	uint64_t fv[3] = { 0 };  /* by field: mapping_index 1, address 2 */
	int32_t mapping;
	size_t lines_at;
	int rv;

	/* pprof Location: id 1, mapping_id 2, address 3, line 4 {function_id
	 * 1, line 2}; the lines are written as they come, the header
	 * fields after them (field order is free in protobuf) */
	sm_buf_reset(&c->tmp);
	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, "Location"));
		if ((f == 1 || f == 2) && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &fv[f]) != 0)
				return (wire_bad(c, &r, "Location"));
		} else if (f == 3 && wt == SM_PBW_LEN) {
			if ((rv = emit_line(c, &r)) != 0)
				return (rv);
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (wire_bad(c, &r, "Location"));
		}
	}
	mapping = as_i32(fv[1]);
	if (mapping < 0 || (uint32_t)mapping >= nmap)
		return (bad_index(c, "Location.mapping_index", mapping,
		    c->ntab[OD_MAPPING]));
	lines_at = c->tmp.len;
	sm_pbw_put_varint(&c->tmp, 1, i);
	if (mapping != 0)
		sm_pbw_put_varint(&c->tmp, 2, (uint64_t)mapping);
	if (fv[2] != 0)
		sm_pbw_put_varint(&c->tmp, 3, fv[2]);
	sm_pbw_put_len(&c->dict, 4, c->tmp.len);
	sm_buf_append(&c->dict, c->tmp.b + lines_at, c->tmp.len - lines_at);
	sm_buf_append(&c->dict, c->tmp.b, lines_at);
	return (0);
}

/* The pprof tables every profile of the request carries, in c->dict. */
static int
emit_tables(struct otlp_conv *c)
{
	int rv;

	for (uint32_t i = 0; i < c->ntab[OD_STRING]; i++)
		sm_pbw_put_bytes(&c->dict, 6, c->tab[OD_STRING][i].p,
		    c->tab[OD_STRING][i].n);
	c->nstr0 = c->nstr = SM_MAX(c->ntab[OD_STRING], 1);
	if (c->ntab[OD_STRING] == 0)
		sm_pbw_put_bytes(&c->dict, 6, "", 0);
	for (uint32_t i = 1; i < c->ntab[OD_MAPPING]; i++)
		if ((rv = emit_mapping(c, i)) != 0)
			return (rv);
	for (uint32_t i = 1; i < c->ntab[OD_FUNCTION]; i++)
		if ((rv = emit_function(c, i)) != 0)
			return (rv);
	for (uint32_t i = 1; i < c->ntab[OD_LOCATION]; i++)
		if ((rv = emit_location(c, i)) != 0)
			return (rv);
	if (sm_buf_error(&c->dict) != 0 || sm_buf_error(&c->tmp) != 0)
		return (nomem(c));
	return (0);
}

/* A string the conversion adds to the pprof string table: its index. */
static int64_t
extra_str(struct otlp_conv *c, const char *s, size_t n)
{
	sm_pbw_put_bytes(&c->extra, 6, s, n);
	return ((int64_t)c->nstr++);
}

/* --- attributes ------------------------------------------------------------ */

/*
 * An AnyValue as label text (string, int, bool, double; the dictionary's
 * string for string_value_strindex), *is_int and *num for an int, or
 * *out NULL for a value that has none (array, map, bytes, unset).  The
 * last member of the oneof on the wire wins, as protobuf reads it.
 */
static int
any_text(struct otlp_conv *c, const uint8_t *p, size_t n, const char **out,
    size_t *outlen, bool *is_int, int64_t *num)
{
	struct sm_pbw r = SM_PBW(p, n, os_any);
	uint32_t f, wt, kind = 0;
	const uint8_t *sp = NULL;
	size_t sn = 0;
	uint64_t v = 0;
	char buf[64];
	int rv;

	*out = NULL;
	*outlen = 0;
	*is_int = false;
	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, "AnyValue"));
		if (f >= 1 && f <= 8 && wt == SM_PBW_LEN) {
			if (sm_pbw_bytes(&r, &sp, &sn) != 0)
				return (wire_bad(c, &r, "AnyValue"));
			kind = f;
		} else if (f >= 1 && f <= 8 && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				return (wire_bad(c, &r, "AnyValue"));
			kind = f;
		} else if (f == 4 && wt == SM_PBW_I64) {
			if (sm_pbw_fixed64(&r, &v) != 0)
				return (wire_bad(c, &r, "AnyValue"));
			kind = f;
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (wire_bad(c, &r, "AnyValue"));
		}
	}
	switch (kind) {
	case 1:         /* string_value */
		*out = (const char *)sp;
		*outlen = sn;
		/* a C string downstream: cut at a NUL, as before */
		if (sn > 0 && memchr(sp, 0, sn) != NULL)
			*outlen = strlen((const char *)sp);
		return (0);
	case 8:         /* string_value_strindex */
		if ((rv = str_check(c, "string_value_strindex",
		    as_i32(v))) != 0)
			return (rv);
		*out = (const char *)c->tab[OD_STRING][as_i32(v)].p;
		*outlen = c->tab[OD_STRING][as_i32(v)].n;
		return (0);
	case 3:         /* int_value */
		*is_int = true;
		*num = (int64_t)v;
		(void)snprintf(buf, sizeof(buf), "%lld", (long long)*num);
		break;
	case 2:         /* bool_value */
		(void)snprintf(buf, sizeof(buf), "%s", v != 0 ? "true" :
		    "false");
		break;
	case 4: {       /* double_value */
		double d;

		memcpy(&d, &v, sizeof(d));
		(void)snprintf(buf, sizeof(buf), "%.17g", d);
		break;
	}
	default:
		return (0);
	}
	if ((*out = sm_arena_strndup(c->a, buf, strlen(buf))) == NULL)
		return (nomem(c));
	*outlen = strlen(buf);
	return (0);
}

/*
 * Attribute-table entry ai (checked by the caller): its key's string
 * index (checked) and its AnyValue's bytes (*vp NULL when it has none).
 */
static int
read_kvu(struct otlp_conv *c, int32_t ai, int32_t *key, const uint8_t **vp,
    size_t *vn)
{
	const struct otlp_msg *m = &c->tab[OD_ATTRIBUTE][ai];
	struct sm_pbw r = SM_PBW(m->p, m->n, os_kvu);
	uint32_t f, wt;
	uint64_t v;

	*key = 0;
	*vp = NULL;
	*vn = 0;
	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, "KeyValueAndUnit"));
		if (f == 1 && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				return (wire_bad(c, &r, "KeyValueAndUnit"));
			*key = as_i32(v);
		} else if (f == 2 && wt == SM_PBW_LEN) {
			if (sm_pbw_bytes(&r, vp, vn) != 0)
				return (wire_bad(c, &r, "KeyValueAndUnit"));
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (wire_bad(c, &r, "KeyValueAndUnit"));
		}
	}
	return (str_check(c, "attribute key_strindex", *key));
}

/* Attribute-table entry ai (checked by the caller) as a pprof label. */
static int
attr_label(struct otlp_conv *c, int32_t ai, const struct otlp_label **out)
{
	struct otlp_label *L = &c->attr[ai];
	const uint8_t *vp;
	size_t vn, tn;
	const char *txt;
	int32_t key;
	bool is_int;
	int rv;

	*out = L;
	if (L->state != 0)
		return (0);
	if ((rv = read_kvu(c, ai, &key, &vp, &vn)) != 0)
		return (rv);
	L->key = key;
	L->state = 3;
	if (vp == NULL)
		return (0);
	if ((rv = any_text(c, vp, vn, &txt, &tn, &is_int, &L->num)) != 0)
		return (rv);
	if (is_int)
		L->state = 2;
	else if (txt != NULL) {
		L->str = extra_str(c, txt, tn);
		L->state = 1;
	}
	return (0);
}

/* A label name from an attribute key: service.name -> service_name,
 * bytes other than letters, digits and '_' -> '_'. */
static char *
label_name(struct sm_arena *a, const char *key, size_t n)
{
	char *s, *p;

	if (n == 12 && memcmp(key, "service.name", 12) == 0)
		return ((char *)SM_LABEL_SERVICE_NAME);
	if ((s = sm_arena_alloc(a, n + 2)) == NULL)
		return (NULL);
	p = s;
	if (n > 0 && key[0] >= '0' && key[0] <= '9')
		*p++ = '_';
	for (size_t i = 0; i < n; i++) {
		char ch = key[i];

		*p++ = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '_' ? ch : '_';
	}
	*p = '\0';
	return (s);
}

/* Series labels under construction (a later one of a name wins). */
struct otlp_labels {
	Types__V1__LabelPair **v;
	size_t n, cap;
};

static int
add_label(struct otlp_conv *c, struct otlp_labels *ls, const char *name,
    const char *value, size_t vn)
{
	Types__V1__LabelPair *lp;
	char *val = sm_arena_strndup(c->a, value, vn);

	if (val == NULL)
		return (nomem(c));
	for (size_t i = 0; i < ls->n; i++) {
		if (strcmp(ls->v[i]->name, name) == 0) {
			ls->v[i]->value = val;
			return (0);
		}
	}
	if (ls->n == ls->cap) {
		size_t nc = ls->cap != 0 ? ls->cap * 2 : 8;
		Types__V1__LabelPair **nv = sm_arena_grow(c->a, ls->v, ls->n,
		    nc, sizeof(*nv));

		if (nv == NULL)
			return (nomem(c));
		ls->v = nv;
		ls->cap = nc;
	}
	if ((lp = sm_arena_alloc(c->a, sizeof(*lp))) == NULL)
		return (nomem(c));
	types__v1__label_pair__init(lp);
	lp->name = (char *)name;
	lp->value = val;
	ls->v[ls->n++] = lp;
	return (0);
}

/* A series label from a key and an AnyValue's bytes. */
static int
label_from(struct otlp_conv *c, struct otlp_labels *ls, const char *key,
    size_t kn, const uint8_t *vp, size_t vn)
{
	const char *txt;
	size_t tn;
	bool is_int;
	int64_t num;
	char *name;
	int rv;

	if (kn == 0 || vp == NULL)
		return (0);
	if ((rv = any_text(c, vp, vn, &txt, &tn, &is_int, &num)) != 0)
		return (rv);
	if (txt == NULL)
		return (0);
	if ((name = label_name(c->a, key, kn)) == NULL)
		return (nomem(c));
	return (add_label(c, ls, name, txt, tn));
}

/* Series labels from a Resource's KeyValues. */
static int
labels_from_resource(struct otlp_conv *c, const struct otlp_msg *res,
    uint32_t nres, struct otlp_labels *ls)
{
	for (uint32_t k = 0; k < nres; k++) {
		struct sm_pbw r = SM_PBW(res[k].p, res[k].n, os_resource);
		const uint8_t *q;
		size_t qn;
		uint32_t f, wt;
		int rv;

		while ((rv = next_field(c, &r, 1, "Resource", &q, &qn)) == 0 &&
		    q != NULL) {
			struct sm_pbw kv;
			const uint8_t *kp = NULL, *vp = NULL;
			size_t kn = 0, vn = 0;
			int32_t ks = 0;
			uint64_t v;

			kv = (struct sm_pbw)SM_PBW(q, qn, os_kv);
			while (kv.p < kv.end) {
				if (sm_pbw_key(&kv, &f, &wt) != 0)
					return (wire_bad(c, &kv, "KeyValue"));
				if (f == 1 && wt == SM_PBW_LEN) {
					if (sm_pbw_bytes(&kv, &kp, &kn) != 0)
						return (wire_bad(c, &kv,
						    "KeyValue"));
				} else if (f == 2 && wt == SM_PBW_LEN) {
					if (sm_pbw_bytes(&kv, &vp, &vn) != 0)
						return (wire_bad(c, &kv,
						    "KeyValue"));
				} else if (f == 3 && wt == SM_PBW_VARINT) {
					if (sm_pbw_varint(&kv, &v) != 0)
						return (wire_bad(c, &kv,
						    "KeyValue"));
					ks = as_i32(v);
				} else if (sm_pbw_skip(&kv, f, wt) != 0) {
					return (wire_bad(c, &kv, "KeyValue"));
				}
			}
			if (kp != NULL && memchr(kp, 0, kn) != NULL)
				kn = strlen((const char *)kp);
			if (kn == 0 && ks != 0) {
				if ((rv = str_check(c, "key_strindex",
				    ks)) != 0)
					return (rv);
				kp = c->tab[OD_STRING][ks].p;
				kn = c->tab[OD_STRING][ks].n;
			}
			if ((rv = label_from(c, ls, (const char *)kp, kn, vp,
			    vn)) != 0)
				return (rv);
		}
		if (rv != 0)
			return (rv);
	}
	return (0);
}

/* Series labels from a profile's attribute indices. */
static int
labels_from_attrs(struct otlp_conv *c, const int32_t *idx, uint32_t n,
    struct otlp_labels *ls)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct otlp_msg *ks;
		const uint8_t *vp;
		size_t vn;
		int32_t key;
		int rv;

		if (idx[i] < 0 || (uint32_t)idx[i] >= c->ntab[OD_ATTRIBUTE])
			return (bad_index(c, "Profile.attribute_indices",
			    idx[i], c->ntab[OD_ATTRIBUTE]));
		if (idx[i] == 0)
			continue;
		if ((rv = read_kvu(c, idx[i], &key, &vp, &vn)) != 0)
			return (rv);
		ks = &c->tab[OD_STRING][key];
		if ((rv = label_from(c, ls, (const char *)ks->p, ks->n, vp,
		    vn)) != 0)
			return (rv);
	}
	return (0);
}

/* --- profiles ---------------------------------------------------------------- */

/* A Profile's header fields. */
static int
read_profile(struct otlp_conv *c, const uint8_t *p, size_t n,
    struct otlp_prof *op)
{
	struct sm_pbw r = SM_PBW(p, n, os_profile);
	uint32_t f, wt, from = c->nibuf;
	int rv;

	memset(op, 0, sizeof(*op));
	op->m = (struct otlp_msg){ p, n };
	while (r.p < r.end) {
		const uint8_t *q;
		size_t qn;
		uint64_t v;

		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, "Profile"));
		switch (f) {
		case 1:
		case 5:
			if (sm_pbw_bytes(&r, &q, &qn) != 0)
				return (wire_bad(c, &r, "Profile"));
			if (f == 1) {
				op->has_st = true;
				rv = read_value_type(c, q, qn, &op->st_type,
				    &op->st_unit, "Profile.sample_type");
			} else {
				op->has_pt = true;
				rv = read_value_type(c, q, qn, &op->pt_type,
				    &op->pt_unit, "Profile.period_type");
			}
			if (rv != 0)
				return (rv);
			continue;
		case 2:
			if (sm_pbw_bytes(&r, &q, &qn) != 0)
				return (wire_bad(c, &r, "Profile"));
			op->nsamples++;
			continue;
		case 3:
			if (sm_pbw_fixed64(&r, &op->time) != 0)
				return (wire_bad(c, &r, "Profile"));
			continue;
		case 4:
		case 6:
			if (sm_pbw_varint(&r, &v) != 0)
				return (wire_bad(c, &r, "Profile"));
			if (f == 4)
				op->duration = v;
			else
				op->period = (int64_t)v;
			continue;
		case 7:
			if (sm_pbw_bytes(&r, &op->id.p, &op->id.n) != 0)
				return (wire_bad(c, &r, "Profile"));
			continue;
		case 11:
			if ((rv = read_i32s(c, &r, wt)) != 0)
				return (rv == -2 ? nomem(c) :
				    wire_bad(c, &r, "Profile"));
			continue;
		default:
			if (sm_pbw_skip(&r, f, wt) != 0)
				return (wire_bad(c, &r, "Profile"));
		}
	}
	op->attrs = i32s_copy(c, from, &op->nattrs);
	c->nibuf = from;
	if (op->nattrs > 0 && op->attrs == NULL)
		return (nomem(c));
	return (0);
}

/*
 * Profiles of one scope that belong in one pprof: the same time,
 * duration, period type and period and the same attributes -- what the
 * Collector's translator makes of one pprof's sample types.  Kept
 * together, /ingest's naming sees every sample type at once and names
 * them as for the pprof they came from.
 */
static bool
same_pprof(const struct otlp_prof *x, const struct otlp_prof *y)
{
	return (x->time == y->time && x->duration == y->duration &&
	    x->period == y->period && x->has_pt == y->has_pt &&
	    (!x->has_pt || (x->pt_type == y->pt_type &&
	    x->pt_unit == y->pt_unit)) && x->nattrs == y->nattrs &&
	    (x->nattrs == 0 || memcmp(x->attrs, y->attrs, x->nattrs *
	    sizeof(*x->attrs)) == 0));
}

/* A Sample's fields: stack, link, attributes (in c->ibuf from `from`)
 * and value (the sum of its values, or its timestamps' count). */
static int
read_sample(struct otlp_conv *c, const uint8_t *p, size_t n,
    struct otlp_rec *s, int64_t *value)
{
	struct sm_pbw r = SM_PBW(p, n, os_sample);
	uint32_t f, wt, from = c->nibuf;
	uint64_t nvals = 0, nts = 0, v;
	int64_t sum = 0;
	int rv;

	memset(s, 0, sizeof(*s));
	while (r.p < r.end) {
		const uint8_t *q;
		size_t qn;

		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, "Sample"));
		if ((f == 1 || f == 3) && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				return (wire_bad(c, &r, "Sample"));
			*(f == 1 ? &s->stack : &s->link) = as_i32(v);
		} else if (f == 2) {
			if ((rv = read_i32s(c, &r, wt)) != 0)
				return (rv == -2 ? nomem(c) :
				    wire_bad(c, &r, "Sample"));
		} else if (f == 4 && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				return (wire_bad(c, &r, "Sample"));
			sum = sm_add_sat(sum, (int64_t)v);
			nvals++;
		} else if (f == 4) {
			struct sm_pbw s2;

			if (sm_pbw_bytes(&r, &q, &qn) != 0)
				return (wire_bad(c, &r, "Sample"));
			s2 = (struct sm_pbw)SM_PBW_RAW(q, qn);
			while (s2.p < s2.end) {
				if (sm_pbw_varint(&s2, &v) != 0)
					return (wire_bad(c, &s2,
					    "Sample.values"));
				sum = sm_add_sat(sum, (int64_t)v);
				nvals++;
			}
		} else if (f == 5 && wt == SM_PBW_I64) {
			if (sm_pbw_fixed64(&r, &v) != 0)
				return (wire_bad(c, &r, "Sample"));
			nts++;
		} else if (f == 5) {
			if (sm_pbw_bytes(&r, &q, &qn) != 0)
				return (wire_bad(c, &r, "Sample"));
			if (qn % 8 != 0) {
				r.why = "packed fixed64 not a multiple of 8 "
				    "bytes";
				return (wire_bad(c, &r, "Sample"));
			}
			nts += qn / 8;
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (wire_bad(c, &r, "Sample"));
		}
	}
	s->nattrs = c->nibuf - from;
	s->attrs = s->nattrs > 0 ? c->ibuf + from : NULL;
	*value = nvals > 0 ? sum : (int64_t)nts;
	return (0);
}

/* 8 bytes as 16 lowercase hex digits. */
static void
hex16(char *s, const uint8_t *p)
{
	static const char hx[] = "0123456789abcdef";

	for (int i = 0; i < 8; i++) {
		s[2 * i] = hx[p[i] >> 4];
		s[2 * i + 1] = hx[p[i] & 15];
	}
}

/* Link li's span id as a pprof string (resolved once per request). */
static int
link_str(struct otlp_conv *c, int32_t li, int64_t *out)
{
	const struct otlp_msg *m = &c->tab[OD_LINK][li];
	struct sm_pbw r;
	const uint8_t *span = NULL, *q;
	size_t sn = 0, qn;
	char hx[16];
	int rv;

	if ((*out = c->link[li]) != 0)
		return (0);
	r = (struct sm_pbw)SM_PBW(m->p, m->n, os_link);
	while ((rv = next_field(c, &r, 2, "Link", &q, &qn)) == 0 && q != NULL) {
		span = q;       /* the last one, as protobuf reads it */
		sn = qn;
	}
	if (rv != 0)
		return (rv);
	if (sn != 8)
		return (sm_err_set(c->err, SM_EINVAL, "Link %d: span_id is "
		    "%zu bytes, not 8", li, sn));
	if (c->span_key == 0)
		c->span_key = extra_str(c, "span_id", 7);
	hex16(hx, span);
	*out = c->link[li] = extra_str(c, hx, 16);
	return (0);
}

/* A pprof Label {key 1, str 2, num 3}: its encoded size, and its bytes
 * at dst when dst is not NULL. */
static size_t
label_put(uint8_t *dst, int64_t key, int64_t str, int64_t num)
{
	size_t ln = 1 + sm_uvarint_len((uint64_t)key);

	if (str != 0)
		ln += 1 + sm_uvarint_len((uint64_t)str);
	if (num != 0)
		ln += 1 + sm_uvarint_len((uint64_t)num);
	if (dst != NULL) {
		*dst++ = 0x1a;
		dst += sm_uvarint_put(dst, ln);
		*dst++ = 0x08;
		dst += sm_uvarint_put(dst, (uint64_t)key);
		if (str != 0) {
			*dst++ = 0x10;
			dst += sm_uvarint_put(dst, (uint64_t)str);
		}
		if (num != 0) {
			*dst++ = 0x18;
			(void)sm_uvarint_put(dst, (uint64_t)num);
		}
	}
	return (1 + sm_uvarint_len(ln) + ln);
}

/* The pprof labels of a sample, resolved: (key, str, num) each. */
struct otlp_slab {
	int64_t key, str, num;
};

/*
 * A stack written as OTLP writers write it -- one packed
 * location_indices field, every index in 1 .. locations - 1 -- is
 * already pprof's packed location_id (the same varints): *p and *n, its
 * bytes, to copy as they are.  Checked once per stack (c->stk: 1 yes,
 * 2 no).  False for any other shape, which the general path reads.
 */
static bool
stack_packed(struct otlp_conv *c, int32_t si, const uint8_t **p, size_t *n)
{
	const struct otlp_msg *m = &c->tab[OD_STACK][si];
	const uint8_t *q = m->p, *end = m->p + m->n, *body;
	uint64_t len, v;

	if (c->stk[si] == 2)
		return (false);
	*n = 0;
	*p = NULL;
	if (m->n == 0) {
		c->stk[si] = 1;
		return (true);
	}
	if (*q++ != 0x0a || sm_uvarint_get(&q, end, &len) != 0 ||
	    len != (uint64_t)(end - q))
		goto no;
	body = q;
	if (c->stk[si] == 0) {
		while (q < end)
			if (sm_uvarint_get(&q, end, &v) != 0 || v == 0 ||
			    v >= c->ntab[OD_LOCATION])
				goto no;
		c->stk[si] = 1;
	}
	*p = body;
	*n = (size_t)len;
	return (true);
no:
	c->stk[si] = 2;
	return (false);
}

/*
 * The pprof Sample of record s, with values v[0..ng) (one per sample
 * type of the group), appended to c->out: location_id 1 (packed), value
 * 2 (packed), label 3 (attributes; the link as span_id).  Sizes are
 * counted first, so the bytes are written once, in place.
 */
static int
emit_sample(struct otlp_conv *c, const struct otlp_rec *s, const int64_t *v,
    size_t ng)
{
	const struct otlp_msg *stk;
	struct otlp_slab lab[16];
	const uint8_t *packed = NULL;
	struct sm_pbw r;
	uint32_t f, wt, from = c->nibuf, nlab = 0, nlocs;
	size_t vlen = 0, llen = 0, body, labl = 0, need;
	uint8_t *dst;
	int rv;

	if (s->stack < 0 || (uint32_t)s->stack >= c->ntab[OD_STACK])
		return (bad_index(c, "Sample.stack_index", s->stack,
		    c->ntab[OD_STACK]));
	if (s->link < 0 || (uint32_t)s->link >= SM_MAX(c->ntab[OD_LINK], 1))
		return (bad_index(c, "Sample.link_index", s->link,
		    c->ntab[OD_LINK]));
	for (size_t g = 0; g < ng; g++)
		vlen += sm_uvarint_len((uint64_t)v[g]);
	/* labels: the attributes, then the link; past 16 (rare) they go
	 * through c->tmp */
	sm_buf_reset(&c->tmp);
	for (uint32_t k = 0; k < s->nattrs + (s->link > 0); k++) {
		struct otlp_slab L;

		if (k < s->nattrs) {
			int32_t ai = s->attrs[k];
			const struct otlp_label *al;

			if (ai < 0 || (uint32_t)ai >= c->ntab[OD_ATTRIBUTE])
				return (bad_index(c,
				    "Sample.attribute_indices", ai,
				    c->ntab[OD_ATTRIBUTE]));
			if (ai == 0)
				continue;
			if ((rv = attr_label(c, ai, &al)) != 0)
				return (rv);
			if (al->state == 3)
				continue;
			L = (struct otlp_slab){ al->key, al->state == 1 ?
			    al->str : 0, al->state == 2 ? al->num : 0 };
		} else {
			int64_t hs;

			if ((rv = link_str(c, s->link, &hs)) != 0)
				return (rv);
			L = (struct otlp_slab){ c->span_key, hs, 0 };
		}
		labl += label_put(NULL, L.key, L.str, L.num);
		if (nlab < SM_ARRAY_LEN(lab)) {
			lab[nlab++] = L;
		} else {
			uint8_t lb[2 + 4 * SM_UVARINT_MAX];

			sm_buf_append(&c->tmp, lb, label_put(lb, L.key,
			    L.str, L.num));
		}
	}
	/* the stack last: its indices go to c->ibuf, after s->attrs */
	stk = &c->tab[OD_STACK][s->stack];
	if (stack_packed(c, s->stack, &packed, &llen)) {
		nlocs = llen > 0;
		goto sized;
	}
	r = (struct sm_pbw)SM_PBW(stk->p, stk->n, os_stack);
	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (wire_bad(c, &r, "Stack"));
		if (f != 1) {
			if (sm_pbw_skip(&r, f, wt) != 0)
				return (wire_bad(c, &r, "Stack"));
			continue;
		}
		if ((rv = read_i32s(c, &r, wt)) != 0)
			return (rv == -2 ? nomem(c) : wire_bad(c, &r, "Stack"));
	}
	nlocs = c->nibuf - from;
	for (uint32_t k = from; k < c->nibuf; k++) {
		int32_t li = c->ibuf[k];

		if (li <= 0 || (uint32_t)li >= c->ntab[OD_LOCATION])
			return (bad_index(c, "Stack.location_indices", li,
			    c->ntab[OD_LOCATION]));
		llen += sm_uvarint_len((uint64_t)li);
	}
sized:
	body = (nlocs > 0 ? 1 + sm_uvarint_len(llen) + llen : 0) + 1 +
	    sm_uvarint_len(vlen) + vlen + labl;
	need = 1 + SM_UVARINT_MAX + body;
	if (sm_buf_reserve(&c->out, need) != 0 || sm_buf_error(&c->tmp) != 0)
		return (nomem(c));
	dst = (uint8_t *)c->out.b + c->out.len;
	*dst++ = 0x12;
	dst += sm_uvarint_put(dst, body);
	if (nlocs > 0) {
		*dst++ = 0x0a;
		dst += sm_uvarint_put(dst, llen);
		if (packed != NULL) {
			memcpy(dst, packed, llen);
			dst += llen;
		} else {
			for (uint32_t k = from; k < c->nibuf; k++)
				dst += sm_uvarint_put(dst,
				    (uint64_t)c->ibuf[k]);
		}
	}
	*dst++ = 0x12;
	dst += sm_uvarint_put(dst, vlen);
	for (size_t g = 0; g < ng; g++)
		dst += sm_uvarint_put(dst, (uint64_t)v[g]);
	for (uint32_t k = 0; k < nlab; k++)
		dst += label_put(dst, lab[k].key, lab[k].str, lab[k].num);
	if (c->tmp.len > 0) {
		memcpy(dst, c->tmp.b, c->tmp.len);
		dst += c->tmp.len;
	}
	c->out.len = (size_t)(dst - (uint8_t *)c->out.b);
	c->out.b[c->out.len] = '\0';
	c->nibuf = from;
	return (0);
}

/* Hash of a record's merge key: stack, link, attributes. */
static uint64_t
rec_hash(const struct otlp_rec *s)
{
	uint64_t h = sm_hash_u64((uint64_t)(uint32_t)s->stack << 32 |
	    (uint32_t)s->link);

	if (s->nattrs > 0)
		h ^= sm_hash(s->attrs, s->nattrs * sizeof(*s->attrs));
	return (h);
}

static bool
rec_key_same(const struct otlp_rec *x, const struct otlp_rec *y)
{
	return (x->stack == y->stack && x->link == y->link &&
	    x->nattrs == y->nattrs && (x->nattrs == 0 ||
	    memcmp(x->attrs, y->attrs, x->nattrs * sizeof(*x->attrs)) == 0));
}

/*
 * The samples of profiles grp[0..ng) into c->out.  One profile: each
 * sample as it comes.  Several (one pprof's sample types): one pprof
 * sample per (stack, link, attributes) across them, a value per type --
 * the pprof the profiles came from, not one sample per type, which would
 * multiply the decoder's work by the number of types.
 */
static int
emit_samples(struct otlp_conv *c, const struct otlp_prof *grp, size_t ng)
{
	struct otlp_rec *recs = NULL;
	int64_t *vals = NULL;
	struct sm_oatab seen;
	uint32_t nrec = 0, total = 0;
	int rv;

	sm_oatab_init_arena(&seen, 0, c->a);
	for (size_t g = 0; g < ng; g++)
		total += grp[g].nsamples;
	if (ng > 1 && total > 0 && ((recs = sm_arena_calloc(c->a, total,
	    sizeof(*recs))) == NULL || (vals = sm_arena_calloc(c->a,
	    (size_t)total * ng, sizeof(*vals))) == NULL))
		return (nomem(c));
	for (size_t g = 0; g < ng; g++) {
		struct sm_pbw r = SM_PBW(grp[g].m.p, grp[g].m.n, os_profile);
		const uint8_t *q;
		size_t qn;
		uint32_t pos = 0;

		/* framing was checked by read_profile */
		while ((rv = next_field(c, &r, 2, "Profile", &q, &qn)) == 0 &&
		    q != NULL) {
			struct otlp_rec s;
			struct sm_oatab_it it;
			uint32_t idx, from = c->nibuf;
			int64_t v;

			if ((rv = read_sample(c, q, qn, &s, &v)) != 0)
				return (rv);
			if (ng == 1) {
				rv = emit_sample(c, &s, &v, 1);
				c->nibuf = from;
				if (rv != 0)
					return (rv);
				continue;
			}
			/* The Collector writes each type's samples in the
			 * pprof's order: the record at the same position is
			 * tried before the hash table. */
			idx = SM_OATAB_NONE;
			if (g > 0 && pos < nrec && rec_key_same(&recs[pos],
			    &s)) {
				idx = pos;
			} else {
				s.h = rec_hash(&s);
				for (sm_oatab_probe(&seen, s.h, &it); (idx =
				    sm_oatab_next(&seen, &it)) !=
				    SM_OATAB_NONE;)
					if (recs[idx].h == s.h &&
					    rec_key_same(&recs[idx], &s))
						break;
			}
			pos = idx != SM_OATAB_NONE ? idx + 1 : pos;
			if (idx != SM_OATAB_NONE) {
				recs[idx].val[g] = sm_add_sat(recs[idx].val[g],
				    v);
				c->nibuf = from;
				continue;
			}
			s.attrs = i32s_copy(c, from, &s.nattrs);
			c->nibuf = from;
			if ((s.nattrs > 0 && s.attrs == NULL) ||
			    sm_oatab_insert(&seen, &it, nrec) != 0)
				return (nomem(c));
			s.val = vals + (size_t)nrec * ng;
			s.val[g] = v;
			recs[nrec++] = s;
		}
		if (rv != 0)
			return (rv);
	}
	for (uint32_t i = 0; i < nrec; i++)
		if ((rv = emit_sample(c, &recs[i], recs[i].val, ng)) != 0)
			return (rv);
	return (0);
}

/* Profiles grp[0..ng) (same_pprof) as one pprof, a sample type each,
 * in the arena. */
static int
profile_pprof(struct otlp_conv *c, const struct otlp_prof *grp, size_t ng,
    uint8_t **outp, size_t *outlen)
{
	const struct otlp_prof *op = &grp[0];
	int rv;

	sm_buf_reset(&c->out);
	for (size_t g = 0; g < ng; g++) {
		uint8_t vt[2 * (1 + SM_UVARINT_MAX)];
		size_t k = 0;

		if ((rv = str_check(c, "sample_type.type_strindex",
		    grp[g].st_type)) != 0 || (rv = str_check(c,
		    "sample_type.unit_strindex", grp[g].st_unit)) != 0)
			return (rv);
		/* pprof ValueType: type 1, unit 2 */
		if (grp[g].st_type != 0) {
			vt[k++] = 0x08;
			k += sm_uvarint_put(vt + k, (uint64_t)grp[g].st_type);
		}
		if (grp[g].st_unit != 0) {
			vt[k++] = 0x10;
			k += sm_uvarint_put(vt + k, (uint64_t)grp[g].st_unit);
		}
		sm_pbw_put_bytes(&c->out, 1, vt, k);
	}
	if (op->has_pt) {
		uint8_t vt[2 * (1 + SM_UVARINT_MAX)];
		size_t k = 0;

		if ((rv = str_check(c, "period_type.type_strindex",
		    op->pt_type)) != 0 || (rv = str_check(c,
		    "period_type.unit_strindex", op->pt_unit)) != 0)
			return (rv);
		if (op->pt_type != 0) {
			vt[k++] = 0x08;
			k += sm_uvarint_put(vt + k, (uint64_t)op->pt_type);
		}
		if (op->pt_unit != 0) {
			vt[k++] = 0x10;
			k += sm_uvarint_put(vt + k, (uint64_t)op->pt_unit);
		}
		sm_pbw_put_bytes(&c->out, 11, vt, k);
	}
	if ((rv = emit_samples(c, grp, ng)) != 0)
		return (rv);
	/* time_nanos 9, duration_nanos 10, period 12 */
	if (op->time != 0)
		sm_pbw_put_varint(&c->out, 9, op->time);
	if (op->duration != 0)
		sm_pbw_put_varint(&c->out, 10, op->duration);
	if (op->period != 0)
		sm_pbw_put_varint(&c->out, 12, (uint64_t)op->period);
	/* the tables, then the strings added so far (after the
	 * dictionary's, so every index holds) */
	sm_buf_append(&c->out, c->dict.b, c->dict.len);
	sm_buf_append(&c->out, c->extra.b, c->extra.len);
	if (sm_buf_error(&c->out) != 0 || sm_buf_error(&c->tmp) != 0 ||
	    sm_buf_error(&c->extra) != 0)
		return (nomem(c));
	*outlen = c->out.len;
	if ((*outp = sm_arena_alloc(c->a, SM_MAX(c->out.len, 1))) == NULL)
		return (nomem(c));
	memcpy(*outp, c->out.b, c->out.len);
	return (0);
}

/*
 * The write's idempotency id (a UUID string) of an OTLP profile: its
 * profile_id (16 bytes, not all zero) hashed with its sample type, since
 * every Profile of a request is one sample type and so one write -- two
 * Profiles that share an id by mistake still both land -- or "" (a
 * random id, connect_push.c).
 */
static char *
uuid_of(struct otlp_conv *c, const struct otlp_prof *op)
{
	uint8_t buf[16 + 8], h[16];
	uint64_t a, b;
	bool zero = true;
	char *s;

	if (op->id.n != 16)
		return ((char *)"");
	for (size_t i = 0; i < 16; i++)
		zero &= op->id.p[i] == 0;
	if (zero || (s = sm_arena_alloc(c->a, 37)) == NULL)
		return ((char *)"");
	memcpy(buf, op->id.p, 16);
	memset(buf + 16, 0, 8);
	if (op->has_st) {
		uint32_t t = (uint32_t)op->st_type, u = (uint32_t)op->st_unit;

		memcpy(buf + 16, &t, 4);
		memcpy(buf + 20, &u, 4);
	}
	a = sm_hash_seed(buf, sizeof(buf), 0x6f746c70);
	b = sm_hash_seed(buf, sizeof(buf), 0x70726f66);
	memcpy(h, &a, 8);
	memcpy(h + 8, &b, 8);
	sm_uuid_format(h, s);
	return (s);
}

/* A series of the PushRequest: labels and one sample, the pprof. */
static int
add_series(struct otlp_conv *c, Push__V1__PushRequest *out, size_t cap,
    struct otlp_labels *ls, uint8_t *pb, size_t pblen, char *id)
{
	Push__V1__RawProfileSeries *rs;
	Push__V1__RawSample *smp, **smpv;

	SM_ASSERT(out->n_series < cap);
	if ((rs = sm_arena_alloc(c->a, sizeof(*rs))) == NULL ||
	    (smp = sm_arena_alloc(c->a, sizeof(*smp))) == NULL ||
	    (smpv = sm_arena_alloc(c->a, sizeof(*smpv))) == NULL)
		return (nomem(c));
	push__v1__raw_profile_series__init(rs);
	push__v1__raw_sample__init(smp);
	smp->raw_profile.data = pb;
	smp->raw_profile.len = pblen;
	smp->id = id;
	smpv[0] = smp;
	rs->labels = ls->v;
	rs->n_labels = ls->n;
	rs->samples = smpv;
	rs->n_samples = 1;
	out->series[out->n_series++] = rs;
	return (0);
}

/* The profiles of one ScopeProfiles, grouped into pprofs. */
static int
convert_scope(struct otlp_conv *c, const uint8_t *p, size_t n,
    const struct otlp_msg *res, uint32_t nres, size_t ri, size_t si,
    Push__V1__PushRequest *out, size_t cap)
{
	struct sm_pbw r = SM_PBW(p, n, os_scopeprof);
	struct otlp_prof *profs = NULL;
	const uint8_t *q;
	size_t qn;
	uint32_t np = 0, pcap = 0;
	int rv;

	while ((rv = next_field(c, &r, 2, "ScopeProfiles", &q, &qn)) == 0 &&
	    q != NULL) {
		if (np == pcap) {
			uint32_t nc = pcap != 0 ? pcap * 2 : 8;
			struct otlp_prof *nv = sm_arena_grow(c->a, profs, np,
			    nc, sizeof(*nv));

			if (nv == NULL)
				return (nomem(c));
			profs = nv;
			pcap = nc;
		}
		if ((rv = read_profile(c, q, qn, &profs[np])) != 0)
			return (rv);
		np++;
	}
	if (rv != 0)
		return (rv);
	for (uint32_t m = 0, ng; m < np; m += ng) {
		struct otlp_labels ls = { NULL, 0, 0 };
		bool svc = false;
		uint8_t *pb = NULL;
		size_t pblen = 0;

		if ((rv = labels_from_resource(c, res, nres, &ls)) != 0 ||
		    (rv = labels_from_attrs(c, profs[m].attrs,
		    profs[m].nattrs, &ls)) != 0)
			return (rv);
		for (size_t k = 0; k < ls.n; k++)
			svc |= strcmp(ls.v[k]->name, SM_LABEL_SERVICE_NAME) == 0;
		if (!svc && (rv = add_label(c, &ls, SM_LABEL_SERVICE_NAME,
		    "unknown_service", 15)) != 0)
			return (rv);
		for (ng = 1; m + ng < np && same_pprof(&profs[m],
		    &profs[m + ng]); ng++)
			;
		if ((rv = profile_pprof(c, profs + m, ng, &pb, &pblen)) != 0) {
			sm_err_prefix(c->err, "resource %zu scope %zu profile "
			    "%" PRIu32, ri, si, m);
			return (rv);
		}
		if ((rv = add_series(c, out, cap, &ls, pb, pblen,
		    uuid_of(c, &profs[m]))) != 0)
			return (rv);
	}
	return (0);
}

/* One ResourceProfiles. */
static int
convert_resource(struct otlp_conv *c, const uint8_t *p, size_t n, size_t ri,
    Push__V1__PushRequest *out, size_t cap)
{
	struct sm_pbw r = SM_PBW(p, n, os_resprof);
	struct otlp_msg res[8];
	const uint8_t *q;
	size_t qn, si = 0;
	uint32_t nres = 0;
	int rv;

	/* the Resource first (it may follow its scopes on the wire; a
	 * repeated one merges, its attributes appended) */
	while ((rv = next_field(c, &r, 1, "ResourceProfiles", &q, &qn)) == 0 &&
	    q != NULL) {
		if (nres == SM_ARRAY_LEN(res))
			return (sm_err_set(c->err, SM_EINVAL, "resource %zu: "
			    "Resource repeated more than %zu times", ri,
			    SM_ARRAY_LEN(res)));
		res[nres++] = (struct otlp_msg){ q, qn };
	}
	if (rv != 0)
		return (rv);
	r = (struct sm_pbw)SM_PBW(p, n, os_resprof);
	while ((rv = next_field(c, &r, 2, "ResourceProfiles", &q, &qn)) == 0 &&
	    q != NULL)
		if ((rv = convert_scope(c, q, qn, res, nres, ri, si++, out,
		    cap)) != 0)
			return (rv);
	return (rv);
}

/* Count the Profiles of a request (an upper bound of its series) and
 * index its dictionary. */
static int
request_index(struct otlp_conv *c, const uint8_t *body, size_t len,
    size_t *nprof)
{
	struct sm_pbw r = SM_PBW(body, len, os_request);
	const uint8_t *q, *sp, *pp;
	size_t qn, sn, pn;
	uint32_t f;
	int rv = 0, got;

	*nprof = 0;
	while ((got = sm_pbw_next_len(&r, &f, &q, &qn)) > 0) {
		struct sm_pbw rp = SM_PBW(q, qn, os_resprof);

		if (f == 2 && (rv = dict_index(c, q, qn)) != 0)
			return (rv);
		if (f != 1)
			continue;
		while ((rv = next_field(c, &rp, 2, "ResourceProfiles", &sp,
		    &sn)) == 0 && sp != NULL) {
			struct sm_pbw s = SM_PBW(sp, sn, os_scopeprof);

			while ((rv = next_field(c, &s, 2, "ScopeProfiles", &pp,
			    &pn)) == 0 && pp != NULL)
				(*nprof)++;
			if (rv != 0)
				return (rv);
		}
		if (rv != 0)
			return (rv);
	}
	return (got < 0 ? wire_bad(c, &r, "ExportProfilesServiceRequest") :
	    0);
}

static int
convert(struct otlp_conv *c, const uint8_t *body, size_t len,
    Push__V1__PushRequest *out)
{
	struct sm_pbw r = SM_PBW(body, len, os_request);
	const uint8_t *q;
	size_t qn, nprof, ri = 0;
	int rv;

	if ((rv = request_index(c, body, len, &nprof)) != 0)
		return (rv);
	if (nprof == 0)
		return (0);
	if ((out->series = sm_arena_calloc(c->a, nprof,
	    sizeof(*out->series))) == NULL ||
	    (c->attr = sm_arena_calloc(c->a, SM_MAX(c->ntab[OD_ATTRIBUTE], 1),
	    sizeof(*c->attr))) == NULL ||
	    (c->link = sm_arena_calloc(c->a, SM_MAX(c->ntab[OD_LINK], 1),
	    sizeof(*c->link))) == NULL || (c->stk = sm_arena_calloc(c->a,
	    SM_MAX(c->ntab[OD_STACK], 1), 1)) == NULL)
		return (nomem(c));
	if ((rv = emit_tables(c)) != 0)
		return (rv);
	while ((rv = next_field(c, &r, 1, "ExportProfilesServiceRequest", &q,
	    &qn)) == 0 && q != NULL)
		if ((rv = convert_resource(c, q, qn, ri++, out, nprof)) != 0)
			return (rv);
	return (rv);
}

/* The protobuf bytes of a request as the PushRequest they become. */
static int
otlp_wire_to_push(const uint8_t *body, size_t len, struct sm_arena *a,
    Push__V1__PushRequest *out, struct sm_err *err)
{
	struct otlp_conv c;
	int rv;

	memset(&c, 0, sizeof(c));
	c.a = a;
	c.err = err;
	c.base = body;
	sm_buf_init(&c.dict);
	sm_buf_init(&c.extra);
	sm_buf_init(&c.tmp);
	sm_buf_init(&c.out);
	push__v1__push_request__init(out);
	/* Sized once: each pprof is about the request's size (the tables
	 * grow by their ids), and doubling from 64 bytes copied it twice. */
	(void)sm_buf_reserve(&c.dict, len + len / 4 + 64);
	(void)sm_buf_reserve(&c.out, len + len / 2 + 64);
	(void)sm_buf_reserve(&c.tmp, 4096);
	rv = convert(&c, body, len, out);
	sm_buf_fini(&c.dict);
	sm_buf_fini(&c.extra);
	sm_buf_fini(&c.tmp);
	sm_buf_fini(&c.out);
	if (rv != 0)
		push__v1__push_request__init(out);
	return (rv);
}

/* A request decoded by protobuf-c (OTLP JSON, Connect, gRPC) goes the
 * same way: packed again, then converted from its wire bytes, so one
 * conversion serves every encoding. */
static int
otlp_msg_to_push(const ProtobufCMessage *msg, struct sm_arena *a,
    Push__V1__PushRequest *out, struct sm_err *err)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf = sm_arena_alloc(a, SM_MAX(len, 1));

	push__v1__push_request__init(out);
	if (buf == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	(void)protobuf_c_message_pack(msg, buf);
	return (otlp_wire_to_push(buf, len, a, out, err));
}

int
dist_otlp_convert(const uint8_t *body, size_t len, bool json,
    struct sm_arena *a, Push__V1__PushRequest *out, struct sm_err *err)
{
	ProtobufCMessage *m = NULL;
	int rv;

	if (!json)
		return (otlp_wire_to_push(body, len, a, out, err));
	push__v1__push_request__init(out);
	if ((rv = sm_pbjson_decode_flags(
	    &opentelemetry__proto__collector__profiles__v1development__export_profiles_service_request__descriptor,
	    (const char *)body, len, SM_PBJSON_HEX_IDS, a, &m, err)) != 0) {
		sm_err_prefix(err, "OTLP JSON (" OTLP_FORMAT ")");
		return (rv);
	}
	return (otlp_msg_to_push(m, a, out, err));
}

/*
 * ProfilesService/Export as a Connect method, so gRPC (grpc.h), gRPC-web
 * and Connect clients reach it: the request is decoded by connect.c
 * (proto3 JSON for the JSON codecs: ids in base64, not OTLP/HTTP's hex),
 * then goes the way of the OTLP/HTTP handler.  Errors are the Connect
 * (and gRPC) code of the same failure.
 */
static int
otlp_export(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *msg, ProtobufCMessage **resp, struct sm_err *err)
{
	struct distributor *d = arg;
	Push__V1__PushRequest push;
	Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceResponse
	    *out;
	int rv;

	if ((rv = otlp_msg_to_push(msg, call->arena, &push, err)) != 0)
		return (rv);
	if (push.n_series > 0 && (rv = dist_push_call(d, call, &push,
	    err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__init(
	    out);
	*resp = &out->base;
	return (0);
}

/* A google.rpc.Status {code = 1, message = 2}, OTLP/HTTP's error body,
 * in protobuf (hand-encoded: two fields). */
static void
otlp_fail(struct sm_http_req *r, bool json, int rv, const char *msg)
{
	int status, grpc = 2;
	const char *code = sm_connect_code_for(rv, &status);
	static const char *const names[] = { "canceled", "unknown",
		"invalid_argument", "deadline_exceeded", "not_found",
		"already_exists", "permission_denied", "resource_exhausted",
		"failed_precondition", "aborted", "out_of_range",
		"unimplemented", "internal", "unavailable", "data_loss",
		"unauthenticated" };
	struct sm_buf b = SM_BUF_INIT;
	size_t ml = strlen(msg);

	for (size_t i = 0; i < SM_ARRAY_LEN(names); i++)
		if (strcmp(names[i], code) == 0)
			grpc = (int)i + 1;
	if (status >= 500)
		sm_warn("otlp", "export failed\tcode=%s err=\"%s\"", code, msg);
	if (json) {
		sm_buf_printf(&b, "{\"code\":%d,\"message\":", grpc);
		sm_buf_json_str(&b, msg, ml);
		sm_buf_puts(&b, "}");
		sm_http_reply_buf(r, status, "application/json", &b);
	} else {
		sm_buf_putc(&b, 0x08);
		sm_buf_putc(&b, (char)grpc);
		sm_buf_putc(&b, 0x12);
		for (size_t v = ml; ; v >>= 7) {      /* uvarint length */
			sm_buf_putc(&b, (char)((v & 0x7f) | (v > 0x7f ? 0x80 :
			    0)));
			if (v <= 0x7f)
				break;
		}
		sm_buf_append(&b, msg, ml);
		sm_http_reply_buf(r, status, "application/x-protobuf", &b);
	}
	sm_buf_fini(&b);
}

static void
otlp_handler(struct sm_http_req *r, void *arg)
{
	struct distributor *d = arg;
	const char *ct = sm_http_header(r, "Content-Type");
	const char *ce = sm_http_header(r, "Content-Encoding");
	size_t cap = (size_t)d->cfg.body_limit_mb << 20, len;
	struct sm_connect_call call = { r, NULL, 0, 0 };
	struct sm_arena *a = NULL;
	Push__V1__PushRequest push;
	const uint8_t *body;
	uint8_t *inflated;
	bool json = false;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	if (ct != NULL && strncasecmp(ct, "application/json", 16) == 0)
		json = true;
	else if (ct == NULL || (strncasecmp(ct, "application/x-protobuf",
	    22) != 0 && strncasecmp(ct, "application/protobuf", 20) != 0)) {
		sm_http_reply_error(r, 415, "unimplemented", "unsupported "
		    "content type \"%.128s\": send application/x-protobuf or "
		    "application/json", ct != NULL ? ct : "");
		return;
	}
	body = sm_http_body(r, &len);
	if ((a = sm_arena_create(SM_MAX((size_t)64 << 20, 16 * cap))) ==
	    NULL) {
		otlp_fail(r, json, SM_ENOMEM, "out of memory");
		return;
	}
	if (ce != NULL && strcasecmp(ce, "gzip") == 0 && len > 0) {
		if ((rv = sm_gunzip(body, len, cap, a, &inflated, &len,
		    &err)) != 0) {
			otlp_fail(r, json, rv == SM_ETOOBIG ? SM_ETOOBIG :
			    SM_EINVAL, err.msg);
			goto out;
		}
		body = inflated;
	} else if (ce != NULL && ce[0] != '\0' && strcasecmp(ce,
	    "identity") != 0) {
		otlp_fail(r, json, SM_EINVAL, "unsupported Content-Encoding: "
		    "use gzip or none");
		goto out;
	}
	if ((rv = dist_otlp_convert(body, len, json, a, &push, &err)) != 0) {
		otlp_fail(r, json, rv, err.msg);
		goto out;
	}
	call.arena = a;
	if (push.n_series > 0 && (rv = dist_push_call(d, &call, &push,
	    &err)) != 0) {
		otlp_fail(r, json, rv, err.msg);
		goto out;
	}
	/* ExportProfilesServiceResponse with no partial_success: empty */
	if (json)
		sm_http_reply(r, 200, "application/json", "{}", 2);
	else
		sm_http_reply(r, 200, "application/x-protobuf", "", 0);
out:
	sm_arena_destroy(a);
}

int
dist_otlp_register(struct distributor *d, struct sm_err *err)
{
	int rv;

	if ((rv = sm_http_route_as(d->http, SM_SCOPE_WRITE, "POST", OTLP_PATH,
	    otlp_handler, d, (size_t)d->cfg.body_limit_mb << 20)) != 0)
		return (sm_err_set(err, rv, "distributor: route %s: %s",
		    OTLP_PATH, sm_strerror(rv)));
	if ((rv = sm_connect_route_as(d->http, SM_SCOPE_WRITE, OTLP_GRPC_PATH,
	    &opentelemetry__proto__collector__profiles__v1development__export_profiles_service_request__descriptor,
	    otlp_export, d, (size_t)d->cfg.body_limit_mb << 20)) != 0)
		return (sm_err_set(err, rv, "distributor: route %s: %s",
		    OTLP_GRPC_PATH, sm_strerror(rv)));
	return (0);
}
