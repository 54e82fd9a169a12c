/*
 * pbjson_test.c -- proto3 JSON against Pyroscope's messages and a
 * hand-built descriptor that has every field type, proto2 labels and a
 * oneof (none of Pyroscope's messages has float, fixed or proto2 fields).
 *
 * Encodings are compared with exact strings: what connect-go's protojson
 * writes for the same message.  Round trips go proto -> JSON -> proto and
 * compare the packed bytes, so a field lost or mangled on either side
 * shows up.
 */
#include "sm_test.h"

#include <math.h>
#include <stdbool.h>

#include "common/arena.h"
#include "common/buf.h"
#include "common/pbjson.h"
#include "push/v1/push.pb-c.h"
#include "opentelemetry/proto/profiles/v1development/profiles.pb-c.h"
#include "querier/v1/querier.pb-c.h"
#include "smolder/v1/rpc.pb-c.h"
#include "types/v1/types.pb-c.h"

/* --- helpers -------------------------------------------------------------- */

/* Encode m; the string is malloc'd (sm_free). */
static char *
enc(const ProtobufCMessage *m)
{
	struct sm_buf b = SM_BUF_INIT;
	char *s;

	sm_pbjson_encode(m, &b);
	SM_REQUIRE(sm_buf_error(&b) == 0);
	s = sm_buf_take(&b, NULL);
	SM_REQUIRE(s != NULL);
	return (s);
}

#define CHECK_ENC(m, want)                                                  \
	do {                                                                \
		char *got_ = enc((const ProtobufCMessage *)(m));            \
		SM_CHECK_STR(got_, want);                                   \
		sm_free(got_);                                              \
	} while (0)

static ProtobufCMessage *
dec(const ProtobufCMessageDescriptor *d, const char *json,
    struct sm_arena *a)
{
	ProtobufCMessage *m = NULL;
	struct sm_err err;
	int rv;

	sm_err_clear(&err);
	rv = sm_pbjson_decode(d, json, strlen(json), a, &m, &err);
	SM_CHECKF(rv == 0, "decode %s: %s", json, err.msg);
	SM_REQUIRE(rv == 0 && m != NULL);
	SM_CHECK(m->descriptor == d);
	return (m);
}

/* Decoding must fail with SM_EINVAL and a message containing `want`. */
static void
dec_fails(const ProtobufCMessageDescriptor *d, const char *json,
    const char *want)
{
	struct sm_arena *a = sm_arena_create(0);
	ProtobufCMessage *m = (ProtobufCMessage *)&m;
	struct sm_err err;
	int rv;

	SM_REQUIRE(a != NULL);
	sm_err_clear(&err);
	rv = sm_pbjson_decode(d, json, strlen(json), a, &m, &err);
	SM_CHECKF(rv == SM_EINVAL, "%s: rv %d", json, rv);
	SM_CHECK(m == NULL);
	SM_CHECK_EQ(err.code, SM_EINVAL);
	SM_CHECKF(strstr(err.msg, want) != NULL, "%s:\n      got:  %s\n"
	    "      want: ...%s...", json, err.msg, want);
	sm_arena_destroy(a);
}

/* Packed bytes of a and b are the same. */
static void
check_same_proto(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
	size_t na = protobuf_c_message_get_packed_size(a);
	size_t nb = protobuf_c_message_get_packed_size(b);
	uint8_t *pa = malloc(na + 1), *pb = malloc(nb + 1);

	SM_REQUIRE(pa != NULL && pb != NULL);
	SM_CHECK_EQ(protobuf_c_message_pack(a, pa), na);
	SM_CHECK_EQ(protobuf_c_message_pack(b, pb), nb);
	SM_CHECK_EQ(na, nb);
	SM_CHECK(na == nb && memcmp(pa, pb, na) == 0);
	free(pa);
	free(pb);
}

/*
 * proto -> JSON (== want) -> proto (same bytes) -> JSON (== want); and
 * the JSON also survives a binary round trip through protobuf-c.
 */
static void
round_trip(const ProtobufCMessage *m, const char *want)
{
	struct sm_arena *a = sm_arena_create(0);
	ProtobufCMessage *back, *unpacked;
	ProtobufCAllocator al;
	uint8_t *wire;
	size_t n;
	char *json;

	SM_REQUIRE(a != NULL);
	al = sm_arena_pbc(a);
	json = enc(m);
	SM_CHECK_STR(json, want);
	back = dec(m->descriptor, json, a);
	check_same_proto(m, back);
	CHECK_ENC(back, want);
	n = protobuf_c_message_get_packed_size(back);
	SM_REQUIRE((wire = sm_arena_alloc(a, n + 1)) != NULL);
	protobuf_c_message_pack(back, wire);
	unpacked = protobuf_c_message_unpack(m->descriptor, &al, n, wire);
	SM_REQUIRE(unpacked != NULL);
	CHECK_ENC(unpacked, want);
	sm_free(json);
	sm_arena_destroy(a);
}

/* --- a descriptor with everything ----------------------------------------- */

struct all {
	ProtobufCMessage base;
	int32_t i32;
	int32_t s32;
	int32_t sf32;
	uint32_t u32;
	uint32_t f32;
	int64_t i64;
	int64_t s64;
	int64_t sf64;
	uint64_t u64;
	uint64_t f64;
	float fl;
	double db;
	protobuf_c_boolean b;
	int e;
	char *s;
	ProtobufCBinaryData by;
	struct all *child;
	protobuf_c_boolean has_opt_i32;
	int32_t opt_i32;
	char *opt_s;
	size_t n_r_f;
	float *r_f;
	size_t n_r_u64;
	uint64_t *r_u64;
	size_t n_r_b;
	protobuf_c_boolean *r_b;
	size_t n_r_e;
	int *r_e;
	size_t n_r_by;
	ProtobufCBinaryData *r_by;
	uint32_t pick_case;
	union {
		int64_t pick_i64;
		char *pick_s;
		struct all *pick_m;
	};
	protobuf_c_boolean has_opt_by;
	ProtobufCBinaryData opt_by;
};

static const ProtobufCMessageDescriptor all_desc;
static const char opt_s_default[] = "dflt";

#define F(id, name, label, type, q, desc, flags)                            \
	{ #name, id, PROTOBUF_C_LABEL_##label, PROTOBUF_C_TYPE_##type, q,  \
	  offsetof(struct all, name), desc, NULL, flags, 0, NULL, NULL }
#define F_NONE(id, name, type)  F(id, name, NONE, type, 0, NULL, 0)
#define F_REP(id, name, type, desc)                                         \
	F(id, name, REPEATED, type, offsetof(struct all, n_##name), desc, 0)
#define F_ONEOF(id, name, type, desc)                                       \
	F(id, name, NONE, type, offsetof(struct all, pick_case), desc,      \
	    PROTOBUF_C_FIELD_FLAG_ONEOF)

static const ProtobufCFieldDescriptor all_fields[] = {
	F_NONE(1, i32, INT32),
	F_NONE(2, s32, SINT32),
	F_NONE(3, sf32, SFIXED32),
	F_NONE(4, u32, UINT32),
	F_NONE(5, f32, FIXED32),
	F_NONE(6, i64, INT64),
	F_NONE(7, s64, SINT64),
	F_NONE(8, sf64, SFIXED64),
	F_NONE(9, u64, UINT64),
	F_NONE(10, f64, FIXED64),
	F_NONE(11, fl, FLOAT),
	F_NONE(12, db, DOUBLE),
	F_NONE(13, b, BOOL),
	F(14, e, NONE, ENUM, 0, &querier__v1__profile_format__descriptor, 0),
	F_NONE(15, s, STRING),
	F_NONE(16, by, BYTES),
	F(17, child, NONE, MESSAGE, 0, &all_desc, 0),
	F(18, opt_i32, OPTIONAL, INT32, offsetof(struct all, has_opt_i32),
	    NULL, 0),
	{ "opt_s", 19, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_STRING, 0,
	  offsetof(struct all, opt_s), NULL, opt_s_default, 0, 0, NULL,
	  NULL },
	F_REP(20, r_f, FLOAT, NULL),
	F_REP(21, r_u64, UINT64, NULL),
	F_REP(22, r_b, BOOL, NULL),
	F_REP(23, r_e, ENUM, &querier__v1__profile_format__descriptor),
	F_REP(24, r_by, BYTES, NULL),
	F_ONEOF(25, pick_i64, INT64, NULL),
	F_ONEOF(26, pick_s, STRING, NULL),
	F_ONEOF(27, pick_m, MESSAGE, &all_desc),
	F(28, opt_by, OPTIONAL, BYTES, offsetof(struct all, has_opt_by), NULL,
	    0),
};

/* Only protobuf_c_message_descriptor_get_field_by_name() reads this
 * table, and nothing here calls it. */
static const unsigned all_by_name[SM_ARRAY_LEN(all_fields)];
static const ProtobufCIntRange all_ranges[] = {
	{ 1, 0 },
	{ 0, SM_ARRAY_LEN(all_fields) },
};

static void
all_init(ProtobufCMessage *m)
{
	struct all *x = (struct all *)m;

	memset(x, 0, sizeof(*x));
	x->base.descriptor = &all_desc;
	x->s = (char *)protobuf_c_empty_string;
	x->opt_s = (char *)opt_s_default;
}

static const ProtobufCMessageDescriptor all_desc = {
	PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "test.All", "All", "All",
	"test", sizeof(struct all), SM_ARRAY_LEN(all_fields), all_fields,
	all_by_name, 1, all_ranges, all_init, NULL, NULL, NULL,
};

/* proto2: required int32 a = 1; required string s = 2. */
struct req {
	ProtobufCMessage base;
	int32_t a;
	char *s;
};

static const ProtobufCMessageDescriptor req_desc;
static const ProtobufCFieldDescriptor req_fields[] = {
	{ "a", 1, PROTOBUF_C_LABEL_REQUIRED, PROTOBUF_C_TYPE_INT32, 0,
	  offsetof(struct req, a), NULL, NULL, 0, 0, NULL, NULL },
	{ "s", 2, PROTOBUF_C_LABEL_REQUIRED, PROTOBUF_C_TYPE_STRING, 0,
	  offsetof(struct req, s), NULL, NULL, 0, 0, NULL, NULL },
};
static const unsigned req_by_name[] = { 0, 1 };
static const ProtobufCIntRange req_ranges[] = { { 1, 0 }, { 0, 2 } };

static void
req_init(ProtobufCMessage *m)
{
	memset(m, 0, sizeof(struct req));
	m->descriptor = &req_desc;
}

static const ProtobufCMessageDescriptor req_desc = {
	PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "test.Req", "Req", "Req",
	"test", sizeof(struct req), 2, req_fields, req_by_name, 1,
	req_ranges, req_init, NULL, NULL, NULL,
};

/* --- tests ---------------------------------------------------------------- */

static void
test_field_names(void)
{
	static const struct {
		const ProtobufCMessageDescriptor *d;
		const char *proto, *json;
	} cases[] = {
		{ &querier__v1__select_series_request__descriptor,
		  "profile_typeID", "profileTypeID" },
		{ &querier__v1__select_series_request__descriptor,
		  "label_selector", "labelSelector" },
		{ &querier__v1__select_series_request__descriptor,
		  "group_by", "groupBy" },
		{ &querier__v1__series_response__descriptor, "labels_set",
		  "labelsSet" },
		{ &querier__v1__flame_graph__descriptor, "max_self",
		  "maxSelf" },
		{ &querier__v1__flame_graph_diff__descriptor, "leftTicks",
		  "leftTicks" },
		{ &push__v1__raw_sample__descriptor, "raw_profile",
		  "rawProfile" },
		{ &push__v1__raw_sample__descriptor, "ID", "ID" },
		{ &types__v1__profile_type__descriptor, "sample_type",
		  "sampleType" },
		{ &all_desc, "r_u64", "rU64" },
	};
	const ProtobufCFieldDescriptor *f0;
	char buf[64];

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		const ProtobufCFieldDescriptor *f = cases[i].d == &all_desc ?
		    &all_fields[20] :
		    protobuf_c_message_descriptor_get_field_by_name(
		    cases[i].d, cases[i].proto);

		SM_REQUIRE(f != NULL);
		SM_CHECK_STR(f->name, cases[i].proto);
		SM_CHECK(sm_pbjson_field_name(f, buf, sizeof(buf)) == buf);
		SM_CHECK_STR(buf, cases[i].json);
	}
	/* Truncated to the buffer, always terminated. */
	f0 = &querier__v1__select_series_request__descriptor.fields[0];
	SM_CHECK_STR(sm_pbjson_field_name(f0, buf, 5), "prof");
	SM_CHECK_STR(sm_pbjson_field_name(f0, buf, 1), "");
}

static void
test_select_series_exact(void)
{
	Querier__V1__SelectSeriesRequest r =
	    QUERIER__V1__SELECT_SERIES_REQUEST__INIT;
	char *gb[] = { "service_name", "pod" };

	r.profile_typeid = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
	r.label_selector = "{service_name=\"a\"}";
	r.start = 1000;
	r.end = 2000;
	r.step = 15;
	round_trip(&r.base, "{\"profileTypeID\":\"process_cpu:cpu:"
	    "nanoseconds:cpu:nanoseconds\",\"labelSelector\":"
	    "\"{service_name=\\\"a\\\"}\",\"start\":\"1000\",\"end\":\"2000\","
	    "\"step\":15}");

	SM_PB_REPEATED(r, group_by, gb);
	r.step = 0.5;
	r.aggregation = 1;      /* TIME_SERIES_AGGREGATION_TYPE_AVERAGE */
	r.limit = 10;
	r.exemplar_type = TYPES__V1__EXEMPLAR_TYPE__EXEMPLAR_TYPE_INDIVIDUAL;
	round_trip(&r.base, "{\"profileTypeID\":\"process_cpu:cpu:"
	    "nanoseconds:cpu:nanoseconds\",\"labelSelector\":"
	    "\"{service_name=\\\"a\\\"}\",\"start\":\"1000\",\"end\":\"2000\","
	    "\"groupBy\":[\"service_name\",\"pod\"],\"step\":0.5,"
	    "\"aggregation\":\"TIME_SERIES_AGGREGATION_TYPE_AVERAGE\","
	    "\"limit\":\"10\",\"exemplarType\":\"EXEMPLAR_TYPE_INDIVIDUAL\"}");
}

static void
test_defaults_omitted(void)
{
	Querier__V1__SelectMergeStacktracesRequest r =
	    QUERIER__V1__SELECT_MERGE_STACKTRACES_REQUEST__INIT;
	Querier__V1__GetProfileStatsRequest e =
	    QUERIER__V1__GET_PROFILE_STATS_REQUEST__INIT;
	Types__V1__StackTraceSelector sts =
	    TYPES__V1__STACK_TRACE_SELECTOR__INIT;
	Querier__V1__GetProfileStatsResponse st =
	    QUERIER__V1__GET_PROFILE_STATS_RESPONSE__INIT;

	round_trip(&r.base, "{}");
	round_trip(&e.base, "{}");
	/* A set message field is written even when empty; a zero-length
	 * repeated field (with a non-NULL array) is not. */
	r.stack_trace_selector = &sts;
	r.n_profile_id_selector = 0;
	r.profile_id_selector = (char **)&sts;
	CHECK_ENC(&r, "{\"stackTraceSelector\":{}}");
	r.profile_id_selector = NULL;
	round_trip(&r.base, "{\"stackTraceSelector\":{}}");
	/* bool false is omitted, true written. */
	round_trip(&st.base, "{}");
	st.data_ingested = 1;
	st.newest_profile_time = -1;
	round_trip(&st.base, "{\"dataIngested\":true,"
	    "\"newestProfileTime\":\"-1\"}");
}

static void
test_merge_stacktraces_round_trip(void)
{
	Querier__V1__SelectMergeStacktracesRequest r =
	    QUERIER__V1__SELECT_MERGE_STACKTRACES_REQUEST__INIT;
	Types__V1__StackTraceSelector sts =
	    TYPES__V1__STACK_TRACE_SELECTOR__INIT;
	Types__V1__Location l1 = TYPES__V1__LOCATION__INIT;
	Types__V1__Location l2 = TYPES__V1__LOCATION__INIT;
	Types__V1__Location *locs[] = { &l1, &l2 };
	Types__V1__GoPGO pgo = TYPES__V1__GO_PGO__INIT;
	Querier__V1__AsyncQueryRequest aq = QUERIER__V1__ASYNC_QUERY_REQUEST__INIT;
	char *pids[] = { "p1", "p2" };
	char *tids[] = { "0123456789abcdef0123456789abcdef" };

	r.profile_typeid = "memory:inuse_space:bytes:space:bytes";
	r.label_selector = "{}";
	r.start = 1700000000000;
	r.end = 1700003600000;
	r.max_nodes = 16384;
	r.format = QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_TREE;
	l1.name = "main";
	l2.name = "runtime.gcBgMarkWorker";
	SM_PB_REPEATED(sts, call_site, locs);
	pgo.keep_locations = 5;
	pgo.aggregate_callees = 1;
	sts.go_pgo = &pgo;
	r.stack_trace_selector = &sts;
	SM_PB_REPEATED(r, profile_id_selector, pids);
	aq.request_id = "rq";
	aq.type = -2;
	r.async = &aq;
	SM_PB_REPEATED(r, trace_id_selector, tids);
	round_trip(&r.base, "{\"profileTypeID\":\"memory:inuse_space:bytes:"
	    "space:bytes\",\"labelSelector\":\"{}\",\"start\":\"1700000000000\","
	    "\"end\":\"1700003600000\",\"maxNodes\":\"16384\","
	    "\"format\":\"PROFILE_FORMAT_TREE\",\"stackTraceSelector\":"
	    "{\"callSite\":[{\"name\":\"main\"},{\"name\":"
	    "\"runtime.gcBgMarkWorker\"}],\"goPgo\":{\"keepLocations\":5,"
	    "\"aggregateCallees\":true}},\"profileIdSelector\":[\"p1\","
	    "\"p2\"],\"async\":{\"requestId\":\"rq\",\"type\":-2},"
	    "\"traceIdSelector\":[\"0123456789abcdef0123456789abcdef\"]}");
}

static void
test_flamegraph(void)
{
	Querier__V1__SelectMergeStacktracesResponse resp =
	    QUERIER__V1__SELECT_MERGE_STACKTRACES_RESPONSE__INIT;
	Querier__V1__FlameGraph fg = QUERIER__V1__FLAME_GRAPH__INIT;
	Querier__V1__Level l0 = QUERIER__V1__LEVEL__INIT;
	Querier__V1__Level l1 = QUERIER__V1__LEVEL__INIT;
	Querier__V1__Level *lv[] = { &l0, &l1 };
	int64_t v0[] = { 0, 100, 0, 0 }, v1[] = { 0, 60, 60, 1, 0, 40, 40, 2 };
	char *names[] = { "total", "main", "work" };
	struct sm_arena *a = sm_arena_create(0);
	Querier__V1__SelectMergeStacktracesResponse *back;

	SM_REQUIRE(a != NULL);
	SM_PB_REPEATED(l0, values, v0);
	SM_PB_REPEATED(l1, values, v1);
	SM_PB_REPEATED(fg, names, names);
	SM_PB_REPEATED(fg, levels, lv);
	fg.total = 100;
	fg.max_self = 60;
	resp.flamegraph = &fg;
	round_trip(&resp.base, "{\"flamegraph\":{\"names\":[\"total\","
	    "\"main\",\"work\"],\"levels\":[{\"values\":[\"0\",\"100\",\"0\","
	    "\"0\"]},{\"values\":[\"0\",\"60\",\"60\",\"1\",\"0\",\"40\","
	    "\"40\",\"2\"]}],\"total\":\"100\",\"maxSelf\":\"60\"}}");

	/* What a JSON client may send back: numbers, strings, mixed. */
	back = (Querier__V1__SelectMergeStacktracesResponse *)dec(
	    &querier__v1__select_merge_stacktraces_response__descriptor,
	    "{\"flamegraph\":{\"names\":[\"total\",\"main\",\"work\"],"
	    "\"levels\":[{\"values\":[0,100,\"0\",0]},{\"values\":[0,\"60\","
	    "60,1,0,40,\"40\",2]}],\"total\":100,\"max_self\":\"60\"}}", a);
	check_same_proto(&resp.base, &back->base);
	SM_REQUIRE(back->flamegraph != NULL && back->flamegraph->n_levels == 2);
	SM_CHECK_EQ(back->flamegraph->levels[1]->n_values, 8);
	SM_CHECK_EQ(back->flamegraph->levels[1]->values[6], 40);
	sm_arena_destroy(a);
}

static void
test_profile_types(void)
{
	Querier__V1__ProfileTypesResponse r =
	    QUERIER__V1__PROFILE_TYPES_RESPONSE__INIT;
	Types__V1__ProfileType t1 = TYPES__V1__PROFILE_TYPE__INIT;
	Types__V1__ProfileType t2 = TYPES__V1__PROFILE_TYPE__INIT;
	Types__V1__ProfileType *ts[] = { &t1, &t2 };

	t1.id = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
	t1.name = "process_cpu";
	t1.sample_type = "cpu";
	t1.sample_unit = "nanoseconds";
	t1.period_type = "cpu";
	t1.period_unit = "nanoseconds";
	t2.id = "memory:alloc_objects:count::";
	t2.name = "memory";
	t2.sample_type = "alloc_objects";
	t2.sample_unit = "count";
	SM_PB_REPEATED(r, profile_types, ts);
	round_trip(&r.base, "{\"profileTypes\":[{\"ID\":\"process_cpu:cpu:"
	    "nanoseconds:cpu:nanoseconds\",\"name\":\"process_cpu\","
	    "\"sampleType\":\"cpu\",\"sampleUnit\":\"nanoseconds\","
	    "\"periodType\":\"cpu\",\"periodUnit\":\"nanoseconds\"},"
	    "{\"ID\":\"memory:alloc_objects:count::\",\"name\":\"memory\","
	    "\"sampleType\":\"alloc_objects\",\"sampleUnit\":\"count\"}]}");
}

static void
test_series_points(void)
{
	Querier__V1__SelectSeriesResponse r =
	    QUERIER__V1__SELECT_SERIES_RESPONSE__INIT;
	Types__V1__Series s = TYPES__V1__SERIES__INIT;
	Types__V1__Series *ss[] = { &s };
	Types__V1__LabelPair lp = TYPES__V1__LABEL_PAIR__INIT;
	Types__V1__LabelPair *lps[] = { &lp };
	Types__V1__Point p[4] = { TYPES__V1__POINT__INIT,
	    TYPES__V1__POINT__INIT, TYPES__V1__POINT__INIT,
	    TYPES__V1__POINT__INIT };
	Types__V1__Point *ps[] = { &p[0], &p[1], &p[2], &p[3] };

	lp.name = "service_name";
	lp.value = "a\"b<c>";
	p[0].value = 1.5;
	p[0].timestamp = 1000;
	p[1].timestamp = 2000;          /* value 0 is omitted */
	p[2].value = 123456789012.25;
	p[2].timestamp = -3000;
	p[3].value = 1e-9;
	SM_PB_REPEATED(s, labels, lps);
	SM_PB_REPEATED(s, points, ps);
	SM_PB_REPEATED(r, series, ss);
	round_trip(&r.base, "{\"series\":[{\"labels\":[{\"name\":"
	    "\"service_name\",\"value\":\"a\\\"b\\u003cc\\u003e\"}],"
	    "\"points\":[{\"value\":1.5,\"timestamp\":\"1000\"},"
	    "{\"timestamp\":\"2000\"},{\"value\":123456789012.25,"
	    "\"timestamp\":\"-3000\"},{\"value\":1e-9}]}]}");
}

static void
test_push_request_bytes(void)
{
	Push__V1__PushRequest r = PUSH__V1__PUSH_REQUEST__INIT;
	Push__V1__RawProfileSeries s = PUSH__V1__RAW_PROFILE_SERIES__INIT;
	Push__V1__RawProfileSeries *ss[] = { &s };
	Push__V1__RawSample sm[3] = { PUSH__V1__RAW_SAMPLE__INIT,
	    PUSH__V1__RAW_SAMPLE__INIT, PUSH__V1__RAW_SAMPLE__INIT };
	Push__V1__RawSample *sms[] = { &sm[0], &sm[1], &sm[2] };
	Types__V1__LabelPair lp = TYPES__V1__LABEL_PAIR__INIT;
	Types__V1__LabelPair *lps[] = { &lp };
	static uint8_t gz[] = { 0x1f, 0x8b, 0x08, 0x00, 0xff, 0xfe, 0x3e };
	static uint8_t one[] = { 'A' }, two[] = { 'A', 'B' };
	struct sm_arena *a = sm_arena_create(0);
	Push__V1__PushRequest *back;

	SM_REQUIRE(a != NULL);
	lp.name = "__name__";
	lp.value = "process_cpu";
	sm[0].raw_profile.data = gz;
	sm[0].raw_profile.len = sizeof(gz);
	sm[0].id = "0b6c0f6e-52c3-4d4e-a1b6-6d1f1f3c7e11";
	sm[1].raw_profile.data = one;
	sm[1].raw_profile.len = 1;
	sm[2].raw_profile.data = two;
	sm[2].raw_profile.len = 2;
	SM_PB_REPEATED(s, labels, lps);
	SM_PB_REPEATED(s, samples, sms);
	SM_PB_REPEATED(r, series, ss);
	round_trip(&r.base, "{\"series\":[{\"labels\":[{\"name\":"
	    "\"__name__\",\"value\":\"process_cpu\"}],\"samples\":["
	    "{\"rawProfile\":\"H4sIAP/+Pg==\",\"ID\":"
	    "\"0b6c0f6e-52c3-4d4e-a1b6-6d1f1f3c7e11\"},"
	    "{\"rawProfile\":\"QQ==\"},{\"rawProfile\":\"QUI=\"}]}]}");

	/* Proto names, URL alphabet, no padding. */
	back = (Push__V1__PushRequest *)dec(&push__v1__push_request__descriptor,
	    "{\"series\":[{\"labels\":[{\"name\":\"__name__\",\"value\":"
	    "\"process_cpu\"}],\"samples\":[{\"raw_profile\":\"H4sIAP_-Pg\","
	    "\"ID\":\"0b6c0f6e-52c3-4d4e-a1b6-6d1f1f3c7e11\"},"
	    "{\"raw_profile\":\"QQ\"},{\"rawProfile\":\"QUI\"}]}]}", a);
	check_same_proto(&r.base, &back->base);
	sm_arena_destroy(a);
}

static void
test_decode_names_and_numbers(void)
{
	struct sm_arena *a = sm_arena_create(0);
	Querier__V1__SelectSeriesRequest *r;
	Querier__V1__SelectMergeStacktracesRequest *m;

	SM_REQUIRE(a != NULL);
	/* The Pyroscope UI: lowerCamelCase, ints as JSON numbers. */
	r = (Querier__V1__SelectSeriesRequest *)dec(
	    &querier__v1__select_series_request__descriptor,
	    "{\"profileTypeID\":\"process_cpu:cpu:nanoseconds:cpu:nanoseconds\","
	    "\"labelSelector\":\"{service_name=\\\"a\\\"}\",\"start\":"
	    "1700000000000,\"end\":1700003600000,\"groupBy\":[\"pod\"],"
	    "\"step\":15,\"limit\":\"5\"}", a);
	SM_CHECK_STR(r->profile_typeid,
	    "process_cpu:cpu:nanoseconds:cpu:nanoseconds");
	SM_CHECK_STR(r->label_selector, "{service_name=\"a\"}");
	SM_CHECK_EQ(r->start, 1700000000000LL);
	SM_CHECK_EQ(r->end, 1700003600000LL);
	SM_REQUIRE(r->n_group_by == 1);
	SM_CHECK_STR(r->group_by[0], "pod");
	SM_CHECK(r->step == 15.0);
	SM_CHECK_EQ(r->limit, 5);

	/* Proto names; numbers as strings, with exponents and fractions
	 * of zero; step as a string, NaN; unknown keys of every shape. */
	r = (Querier__V1__SelectSeriesRequest *)dec(
	    &querier__v1__select_series_request__descriptor,
	    "{\"profile_typeID\":\"x\",\"label_selector\":\"{}\",\"start\":"
	    "\"1e3\",\"end\":2.0e3,\"group_by\":[],\"step\":\"0.25\","
	    "\"unknownField\":{\"a\":[1,{\"b\":null}]},\"x\":[],\"y\":null,"
	    "\"limit\":\"-0\",\"exemplar_type\":2}", a);
	SM_CHECK_STR(r->profile_typeid, "x");
	SM_CHECK_EQ(r->start, 1000);
	SM_CHECK_EQ(r->end, 2000);
	SM_CHECK_EQ(r->n_group_by, 0);
	SM_CHECK(r->step == 0.25);
	SM_CHECK_EQ(r->limit, 0);
	SM_CHECK_EQ(r->exemplar_type,
	    TYPES__V1__EXEMPLAR_TYPE__EXEMPLAR_TYPE_INDIVIDUAL);

	/* Enums by name and by number (named or not); null = default. */
	m = (Querier__V1__SelectMergeStacktracesRequest *)dec(
	    &querier__v1__select_merge_stacktraces_request__descriptor,
	    "{\"format\":\"PROFILE_FORMAT_DOT\",\"maxNodes\":null}", a);
	SM_CHECK_EQ(m->format, QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_DOT);
	m = (Querier__V1__SelectMergeStacktracesRequest *)dec(
	    &querier__v1__select_merge_stacktraces_request__descriptor,
	    "{\"format\":4,\"labelSelector\":null,\"stackTraceSelector\":null}",
	    a);
	SM_CHECK_EQ(m->format, QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_PPROF);
	SM_CHECK_STR(m->label_selector, "");
	SM_CHECK(m->stack_trace_selector == NULL);
	m = (Querier__V1__SelectMergeStacktracesRequest *)dec(
	    &querier__v1__select_merge_stacktraces_request__descriptor,
	    "{\"format\":77}", a);
	SM_CHECK_EQ(m->format, 77);
	CHECK_ENC(m, "{\"format\":77}");

	/* The later of two keys for one field wins. */
	m = (Querier__V1__SelectMergeStacktracesRequest *)dec(
	    &querier__v1__select_merge_stacktraces_request__descriptor,
	    "{\"profileTypeID\":\"a\",\"profile_typeID\":\"b\"}", a);
	SM_CHECK_STR(m->profile_typeid, "b");

	/* Strings: escapes and non-ASCII are kept. */
	m = (Querier__V1__SelectMergeStacktracesRequest *)dec(
	    &querier__v1__select_merge_stacktraces_request__descriptor,
	    "{\"labelSelector\":\"{a=\\\"\\u00e9\\u2028\\\\\\n\\\"}\"}", a);
	SM_CHECK_STR(m->label_selector, "{a=\"\xc3\xa9\xe2\x80\xa8\\\n\"}");
	CHECK_ENC(m, "{\"labelSelector\":\"{a=\\\"\xc3\xa9\\u2028\\\\\\n"
	    "\\\"}\"}");
	sm_arena_destroy(a);
}

static void
test_all_types(void)
{
	struct all x, c;
	float rf[] = { 1.5f, -2.0f, 3.4028235e38f };
	uint64_t ru[] = { 0, UINT64_MAX };
	protobuf_c_boolean rb[] = { 1, 0 };
	int re[] = { 1, 0, 9 };
	ProtobufCBinaryData rby[] = { { 0, NULL }, { 3, (uint8_t *)"\xfb\xff\xfe" } };
	const char *want;

	all_init(&x.base);
	all_init(&c.base);
	round_trip(&x.base, "{}");
	x.i32 = INT32_MIN;
	x.s32 = -7;
	x.sf32 = INT32_MAX;
	x.u32 = UINT32_MAX;
	x.f32 = 7;
	x.i64 = INT64_MIN;
	x.s64 = -9;
	x.sf64 = INT64_MAX;
	x.u64 = UINT64_MAX;
	x.f64 = 42;
	x.fl = 0.1f;
	x.db = 0.1;
	x.b = 1;
	x.e = 2;
	x.s = "s";
	x.by.len = 1;
	x.by.data = (uint8_t *)"\x00";
	c.i32 = 1;
	x.child = &c;
	x.has_opt_i32 = 1;              /* proto2 presence: 0 is written */
	x.opt_i32 = 0;
	x.opt_s = "";                   /* not the default pointer: set */
	SM_PB_REPEATED(x, r_f, rf);
	SM_PB_REPEATED(x, r_u64, ru);
	SM_PB_REPEATED(x, r_b, rb);
	SM_PB_REPEATED(x, r_e, re);
	SM_PB_REPEATED(x, r_by, rby);
	x.pick_case = 25;               /* oneof: 0 is written when set */
	x.pick_i64 = 0;
	x.has_opt_by = 1;
	want = "{\"i32\":-2147483648,\"s32\":-7,\"sf32\":2147483647,"
	    "\"u32\":4294967295,\"f32\":7,\"i64\":\"-9223372036854775808\","
	    "\"s64\":\"-9\",\"sf64\":\"9223372036854775807\","
	    "\"u64\":\"18446744073709551615\",\"f64\":\"42\",\"fl\":0.1,"
	    "\"db\":0.1,\"b\":true,\"e\":\"PROFILE_FORMAT_TREE\",\"s\":\"s\","
	    "\"by\":\"AA==\",\"child\":{\"i32\":1},\"optI32\":0,\"optS\":\"\","
	    "\"rF\":[1.5,-2,3.4028235e+38],\"rU64\":[\"0\","
	    "\"18446744073709551615\"],\"rB\":[true,false],"
	    "\"rE\":[\"PROFILE_FORMAT_FLAMEGRAPH\",\"PROFILE_FORMAT_UNSPECIFIED\","
	    "9],\"rBy\":[\"\",\"+//+\"],\"pickI64\":\"0\",\"optBy\":\"\"}";
	round_trip(&x.base, want);

	/* Another member of the oneof replaces the first. */
	x.pick_case = 26;
	x.pick_s = "";
	{
		char *got = enc(&x.base);

		SM_CHECK(strstr(got, "\"pickI64\"") == NULL);
		SM_CHECK(strstr(got, ",\"pickS\":\"\",\"optBy\":\"\"}") != NULL);
		sm_free(got);
	}
	/* Negative zero is written -0.0 (a JSON -0 would come back +0). */
	all_init(&x.base);
	x.db = -0.0;
	CHECK_ENC(&x.base, "{\"db\":-0.0}");
}

static void
test_oneof_and_proto2(void)
{
	struct sm_arena *a = sm_arena_create(0);
	Smolder__V1__Response rs = SMOLDER__V1__RESPONSE__INIT;
	Smolder__V1__SeriesResponse sr = SMOLDER__V1__SERIES_RESPONSE__INIT;
	Smolder__V1__Response *rb;
	struct all *x;
	struct req *q;

	SM_REQUIRE(a != NULL);
	/* The generated oneof of smolder.v1.Response. */
	rs.code = -31001;
	rs.message = "bad";
	rs.result_case = SMOLDER__V1__RESPONSE__RESULT_SERIES;
	rs.series = &sr;
	round_trip(&rs.base, "{\"code\":-31001,\"message\":\"bad\","
	    "\"series\":{}}");
	rb = (Smolder__V1__Response *)dec(&smolder__v1__response__descriptor,
	    "{\"write\":{},\"merge\":{}}", a);
	SM_CHECK_EQ(rb->result_case, SMOLDER__V1__RESPONSE__RESULT_MERGE);
	rb = (Smolder__V1__Response *)dec(&smolder__v1__response__descriptor,
	    "{\"series\":null}", a);
	SM_CHECK_EQ(rb->result_case, SMOLDER__V1__RESPONSE__RESULT__NOT_SET);

	/* Hand-built: oneof members, has_ flags, proto2 defaults. */
	x = (struct all *)dec(&all_desc, "{\"pickS\":\"\",\"optI32\":0,"
	    "\"opt_by\":\"\"}", a);
	SM_CHECK_EQ(x->pick_case, 26);
	SM_CHECK_STR(x->pick_s, "");
	SM_CHECK_EQ(x->has_opt_i32, 1);
	SM_CHECK_EQ(x->has_opt_by, 1);
	SM_CHECK(x->opt_s == opt_s_default);
	CHECK_ENC(x, "{\"optI32\":0,\"pickS\":\"\",\"optBy\":\"\"}");
	x = (struct all *)dec(&all_desc, "{\"pickM\":{\"pickI64\":\"5\"},"
	    "\"optS\":\"dflt\"}", a);
	SM_CHECK_EQ(x->pick_case, 27);
	SM_REQUIRE(x->pick_m != NULL);
	SM_CHECK_EQ(x->pick_m->pick_case, 25);
	SM_CHECK_EQ(x->pick_m->pick_i64, 5);
	CHECK_ENC(x, "{\"optS\":\"dflt\",\"pickM\":{\"pickI64\":\"5\"}}");
	x = (struct all *)dec(&all_desc, "{\"optI32\":null}", a);
	SM_CHECK_EQ(x->has_opt_i32, 0);

	/* proto2 required fields. */
	q = (struct req *)dec(&req_desc, "{\"a\":0,\"s\":\"\"}", a);
	SM_CHECK_EQ(q->a, 0);
	SM_CHECK_STR(q->s, "");
	CHECK_ENC(q, "{\"a\":0,\"s\":\"\"}");
	dec_fails(&req_desc, "{\"a\":1}", "field \"s\": required field is "
	    "missing");
	dec_fails(&req_desc, "{\"a\":1,\"s\":null}", "required field");
	sm_arena_destroy(a);
}

static void
test_floats(void)
{
	static const struct {
		double v;
		const char *json;
	} dbl[] = {
		{ 1, "1" },
		{ -2.5, "-2.5" },
		{ 0.1, "0.1" },
		{ 1.0 / 3, "0.3333333333333333" },
		{ 123456789, "123456789" },
		{ 1e20, "100000000000000000000" },
		{ 1e21, "1e+21" },
		{ 1.5e300, "1.5e+300" },
		{ 1e-6, "0.000001" },
		{ 1.25e-7, "1.25e-7" },
		{ 1e-10, "1e-10" },
		{ 5e-324, "5e-324" },
		{ 1.7976931348623157e308, "1.7976931348623157e+308" },
		{ 9007199254740993.0, "9007199254740992" },
		{ 0.30000000000000004, "0.30000000000000004" },
	};
	static const struct {
		float v;
		const char *json;
	} flt[] = {
		{ 0.1f, "0.1" },
		{ 16777216.0f, "16777216" },
		{ 3.14159274f, "3.1415927" },
		{ 1e-7f, "1e-7" },
		{ 1e21f, "1e+21" },
		{ 1.17549435e-38f, "1.1754944e-38" },
	};
	struct sm_arena *a = sm_arena_create(0);
	char want[128], in[128];
	struct all x, *back;

	SM_REQUIRE(a != NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(dbl); i++) {
		all_init(&x.base);
		x.db = dbl[i].v;
		snprintf(want, sizeof(want), "{\"db\":%s}", dbl[i].json);
		round_trip(&x.base, want);
		back = (struct all *)dec(&all_desc, want, a);
		SM_CHECK(memcmp(&back->db, &dbl[i].v, sizeof(double)) == 0);
		/* The same number inside a string. */
		snprintf(in, sizeof(in), "{\"db\":\"%s\"}", dbl[i].json);
		back = (struct all *)dec(&all_desc, in, a);
		SM_CHECK(memcmp(&back->db, &dbl[i].v, sizeof(double)) == 0);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(flt); i++) {
		all_init(&x.base);
		x.fl = flt[i].v;
		snprintf(want, sizeof(want), "{\"fl\":%s}", flt[i].json);
		round_trip(&x.base, want);
	}
	all_init(&x.base);
	x.db = NAN;
	x.fl = INFINITY;
	round_trip(&x.base, "{\"fl\":\"Infinity\",\"db\":\"NaN\"}");
	x.db = -INFINITY;
	x.fl = -INFINITY;
	round_trip(&x.base, "{\"fl\":\"-Infinity\",\"db\":\"-Infinity\"}");
	sm_arena_destroy(a);
}

static void
test_integer_forms(void)
{
	static const struct {
		const char *json;
		int64_t i64;
		uint64_t u64;
		int32_t i32;
	} ok[] = {
		{ "{\"i64\":\"-9223372036854775808\"}", INT64_MIN, 0, 0 },
		{ "{\"i64\":\"9223372036854775807\"}", INT64_MAX, 0, 0 },
		{ "{\"i64\":-9223372036854775808}", INT64_MIN, 0, 0 },
		{ "{\"i64\":\"1e3\"}", 1000, 0, 0 },
		{ "{\"i64\":\"2.50e1\"}", 25, 0, 0 },
		{ "{\"i64\":\"-0.0\"}", 0, 0, 0 },
		{ "{\"i64\":\"0e99999999\"}", 0, 0, 0 },
		{ "{\"i64\":\"100000e-5\"}", 1, 0, 0 },
		{ "{\"i64\":1E2}", 100, 0, 0 },
		{ "{\"i64\":\"1.00000000000000000000000000000000000000000000000000"
		  "00000000000000000000000000\"}", 1, 0, 0 },
		{ "{\"u64\":\"18446744073709551615\"}", 0, UINT64_MAX, 0 },
		{ "{\"u64\":\"1.8446744073709551615e19\"}", 0, UINT64_MAX, 0 },
		{ "{\"u64\":9223372036854775807}", 0, INT64_MAX, 0 },
		{ "{\"i32\":-2147483648}", 0, 0, INT32_MIN },
		{ "{\"i32\":\"2147483647\"}", 0, 0, INT32_MAX },
		{ "{\"i32\":-0}", 0, 0, 0 },
	};
	static const struct {
		const char *json, *msg;
	} bad[] = {
		{ "{\"i64\":\"9223372036854775808\"}",
		  "field \"i64\": 9223372036854775808 is out of range for int64" },
		{ "{\"i64\":\"-9223372036854775809\"}", "out of range" },
		{ "{\"u64\":\"18446744073709551616\"}", "out of range" },
		{ "{\"u64\":\"100000000000000000000\"}", "out of range" },
		{ "{\"u64\":\"1e20\"}", "out of range" },
		{ "{\"u64\":\"-1\"}", "-1 is out of range for uint64" },
		{ "{\"u64\":-1}", "-1 is out of range for uint64" },
		{ "{\"u32\":4294967296}", "out of range for uint32" },
		{ "{\"f32\":-1}", "out of range for fixed32" },
		{ "{\"i32\":2147483648}", "2147483648 is out of range for int32" },
		{ "{\"s32\":\"-2147483649\"}", "out of range for sint32" },
		{ "{\"i64\":1.5}", "1.5 is not an integer" },
		{ "{\"i64\":\"1.5\"}", "\"1.5\" is not an integer" },
		{ "{\"i64\":\"1e-1\"}", "not an integer" },
		{ "{\"i64\":\"1.0000000000000000000000000000000000000000000000000"
		  "0000000000000000000000000001\"}", "not an integer" },
		{ "{\"i64\":1e300}", "out of range for int64" },
		{ "{\"i64\":\"01\"}", "invalid int64 \"01\"" },
		{ "{\"i64\":\" 1\"}", "invalid int64" },
		{ "{\"i64\":\"1 \"}", "invalid int64" },
		{ "{\"i64\":\"+1\"}", "invalid int64" },
		{ "{\"i64\":\"0x10\"}", "invalid int64" },
		{ "{\"i64\":\"\"}", "invalid int64" },
		{ "{\"i64\":\"1.\"}", "invalid int64" },
		{ "{\"i64\":\"1e\"}", "invalid int64" },
		{ "{\"i64\":\"NaN\"}", "invalid int64" },
		{ "{\"i64\":true}", "expected a number or a numeric string for "
		  "int64, got a boolean" },
		{ "{\"i64\":{}}", "got an object" },
		{ "{\"i64\":[1]}", "got an array" },
		{ "{\"i64\":99999999999999999999}", "field \"i64\": 1e+20 is out "
		  "of range for int64" },
		{ "{\"u64\":18446744073709551615}", "is out of range for uint64" },
		{ "{\"db\":100000000000000000000,\"i64\":9007199254740993}", "field \"i64\": "
		  "9007199254740992 is too large to be exact in a document with "
		  "integers beyond 64 bits; send it as a string" },
		{ "{\"i64\":1,\"db\":1e20,\"u64\":184467440737095516150}",
		  "field \"u64\": 1.8446744073709552e+20 is out of range for "
		  "uint64" },
	};
	struct sm_arena *a = sm_arena_create(0);

	SM_REQUIRE(a != NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(ok); i++) {
		struct all *x = (struct all *)dec(&all_desc, ok[i].json, a);

		SM_CHECKF(x->i64 == ok[i].i64 && x->u64 == ok[i].u64 &&
		    x->i32 == ok[i].i32, "%s", ok[i].json);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++)
		dec_fails(&all_desc, bad[i].json, bad[i].msg);
	sm_arena_destroy(a);
}

static void
test_errors(void)
{
	static const struct {
		const ProtobufCMessageDescriptor *d;
		const char *json, *msg;
	} bad[] = {
		{ &querier__v1__select_series_request__descriptor, "",
		  "invalid querier.v1.SelectSeriesRequest JSON: " },
		{ &querier__v1__select_series_request__descriptor, "{",
		  "line 1" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"start\":1,}", "invalid querier.v1.SelectSeriesRequest "
		  "JSON" },
		{ &querier__v1__select_series_request__descriptor, "{} x",
		  "end of file expected" },
		{ &querier__v1__select_series_request__descriptor, "[]",
		  "the top level is an array, not an object" },
		{ &querier__v1__select_series_request__descriptor, "5",
		  "the top level is a number, not an object" },
		{ &querier__v1__select_series_request__descriptor, "\"x\"",
		  "the top level is a string, not an object" },
		{ &querier__v1__select_series_request__descriptor, "null",
		  "the top level is null, not an object" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"labelSelector\":5}", "field \"labelSelector\": expected a "
		  "string, got a number" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"groupBy\":\"pod\"}", "field \"groupBy\": expected an "
		  "array, got a string" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"group_by\":[\"a\",null]}", "field \"group_by[1]\": null is "
		  "not allowed in a repeated field" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"group_by\":[\"a\",1]}", "field \"group_by[1]\": expected "
		  "a string" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"step\":\"abc\"}", "field \"step\": invalid double \"abc\"" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"step\":\"1e400\"}", "out of range for double" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"step\":1e400}", "real number overflow" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"step\":\"nan\"}", "invalid double" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"step\":true}", "expected a number for double, got a "
		  "boolean" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"aggregation\":1.5}", "1.5 is not an integer" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"aggregation\":2147483648}", "out of range for enum" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"aggregation\":true}", "expected a name or a number for "
		  "enum, got a boolean" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"stackTraceSelector\":[]}", "field \"stackTraceSelector\": "
		  "expected an object for types.v1.StackTraceSelector, got an "
		  "array" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"stackTraceSelector\":{\"goPgo\":{\"keepLocations\":-1}}}",
		  "field \"stackTraceSelector.goPgo.keepLocations\": -1 is out "
		  "of range for uint32" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"stackTraceSelector\":{\"goPgo\":{\"aggregateCallees\":"
		  "\"true\"}}}", "expected true or false, got a string" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"stackTraceSelector\":{\"callSite\":[{\"name\":\"a\"},"
		  "{\"name\":{}}]}}", "field \"stackTraceSelector.callSite[1]."
		  "name\": expected a string, got an object" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"labelSelector\":\"\\u0000\"}", "NUL" },
		{ &querier__v1__select_series_request__descriptor,
		  "{\"labelSelector\":\"\xff\"}", "unable to decode byte 0xff" },
		{ &push__v1__push_request__descriptor,
		  "{\"series\":[{\"samples\":[{},{\"rawProfile\":\"@@@@\"}]}]}",
		  "field \"series[0].samples[1].rawProfile\": invalid base64 "
		  "data" },
		{ &push__v1__push_request__descriptor,
		  "{\"series\":[{\"samples\":[{\"rawProfile\":\"QQ=\"}]}]}",
		  "invalid base64" },
		{ &push__v1__push_request__descriptor,
		  "{\"series\":[{\"samples\":[{\"rawProfile\":\"Q\"}]}]}",
		  "invalid base64" },
		{ &push__v1__push_request__descriptor,
		  "{\"series\":[{\"samples\":[{\"rawProfile\":\"QQ==QQ==\"}]}]}",
		  "invalid base64" },
		{ &push__v1__push_request__descriptor,
		  "{\"series\":[{\"samples\":[{\"rawProfile\":\"+_==\"}]}]}",
		  "invalid base64" },
		{ &push__v1__push_request__descriptor,
		  "{\"series\":[{\"samples\":[{\"rawProfile\":5}]}]}",
		  "expected a base64 string for bytes, got a number" },
		{ &push__v1__push_request__descriptor, "{\"series\":{}}",
		  "field \"series\": expected an array, got an object" },
		{ &push__v1__push_request__descriptor, "{\"series\":[5]}",
		  "field \"series[0]\": expected an object for "
		  "push.v1.RawProfileSeries, got a number" },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++)
		dec_fails(bad[i].d, bad[i].json, bad[i].msg);
}

static void
test_depth_limit(void)
{
	struct sm_buf b = SM_BUF_INIT;
	struct sm_arena *a = sm_arena_create(0);
	struct all *x;
	int depth;

	SM_REQUIRE(a != NULL);
	/* 64 nested messages (the top one included) are fine, 65 are not. */
	for (int n = 64; n <= 65; n++) {
		sm_buf_reset(&b);
		for (int i = 1; i < n; i++)
			sm_buf_puts(&b, "{\"child\":");
		sm_buf_puts(&b, "{\"i32\":1}");
		for (int i = 1; i < n; i++)
			sm_buf_putc(&b, '}');
		SM_REQUIRE(sm_buf_error(&b) == 0);
		if (n == 65) {
			dec_fails(&all_desc, b.b, "messages nested deeper "
			    "than 64");
			continue;
		}
		x = (struct all *)dec(&all_desc, b.b, a);
		for (depth = 1; x->child != NULL; depth++)
			x = x->child;
		SM_CHECK_EQ(depth, 64);
		SM_CHECK_EQ(x->i32, 1);
	}
	/* An enum name this build does not know is ignored, as protojson's
	 * DiscardUnknown ignores it: the field keeps its default. */
	{
		Querier__V1__SelectSeriesRequest *q = (void *)dec(
		    &querier__v1__select_series_request__descriptor,
		    "{\"aggregation\":\"TIME_SERIES_AGGREGATION_TYPE_FUTURE\","
		    "\"step\":2}", a);

		SM_CHECK_EQ(q->aggregation, 0);
		SM_CHECK(q->step == 2.0);
	}
	/* OTLP's JSON ids: hex with SM_PBJSON_HEX_IDS, base64 without. */
	{
		const char *js = "{\"traceId\":\"0102030405060708090A0B0C0D0E0F10"
		    "\",\"spanId\":\"a1b2c3d4e5f60718\"}";
		ProtobufCMessage *m = NULL;
		Opentelemetry__Proto__Profiles__V1development__Link *ln;
		struct sm_err e;

		SM_CHECK_EQ(sm_pbjson_decode_flags(
		    &opentelemetry__proto__profiles__v1development__link__descriptor,
		    js, strlen(js), SM_PBJSON_HEX_IDS, a, &m, &e), 0);
		ln = (void *)m;
		SM_CHECK(ln != NULL && ln->trace_id.len == 16 &&
		    ln->trace_id.data[9] == 0x0a && ln->span_id.len == 8 &&
		    ln->span_id.data[0] == 0xa1 && ln->span_id.data[7] == 0x18);
		SM_CHECK_EQ(sm_pbjson_decode_flags(
		    &opentelemetry__proto__profiles__v1development__link__descriptor,
		    "{\"spanId\":\"a1b\"}", 13, SM_PBJSON_HEX_IDS, a, &m, &e),
		    SM_EINVAL);
	}
	/* Deep unknown values are skipped, not walked. */
	sm_buf_reset(&b);
	sm_buf_puts(&b, "{\"unknown\":");
	for (int i = 0; i < 500; i++)
		sm_buf_puts(&b, "[{\"a\":");
	sm_buf_puts(&b, "1");
	for (int i = 0; i < 500; i++)
		sm_buf_puts(&b, "}]");
	sm_buf_puts(&b, ",\"i32\":3}");
	x = (struct all *)dec(&all_desc, b.b, a);
	SM_CHECK_EQ(x->i32, 3);
	sm_buf_fini(&b);
	sm_arena_destroy(a);
}

static void
test_arena_budget(void)
{
	struct sm_buf b = SM_BUF_INIT;
	struct sm_arena *a = sm_arena_create(4096);
	ProtobufCMessage *m = NULL;
	struct sm_err err;
	int rv;

	SM_REQUIRE(a != NULL);
	sm_buf_puts(&b, "{\"groupBy\":[");
	for (int i = 0; i < 1000; i++)
		sm_buf_printf(&b, "%s\"label_%d\"", i ? "," : "", i);
	sm_buf_puts(&b, "]}");
	SM_REQUIRE(sm_buf_error(&b) == 0);
	sm_err_clear(&err);
	rv = sm_pbjson_decode(&querier__v1__select_series_request__descriptor,
	    b.b, b.len, a, &m, &err);
	SM_CHECK_EQ(rv, SM_ENOMEM);
	SM_CHECK(m == NULL);
	SM_CHECKF(strstr(err.msg, "out of memory (arena budget 4096 bytes)")
	    != NULL, "%s", err.msg);
	sm_buf_fini(&b);
	sm_arena_destroy(a);
}

/* The encoder's sticky buffer error reaches the caller. */
static void
test_encode_buffer_limit(void)
{
	Querier__V1__SelectSeriesRequest r =
	    QUERIER__V1__SELECT_SERIES_REQUEST__INIT;
	struct sm_buf b = SM_BUF_INIT;

	r.profile_typeid = "a-long-enough-profile-type-id";
	b.limit = 16;
	sm_pbjson_encode(&r.base, &b);
	SM_CHECK_EQ(sm_buf_error(&b), SM_ETOOBIG);
	sm_buf_fini(&b);
}

/*
 * Fault injection (docs/style.md §18): fail the Nth allocation for every N until a
 * run needs no failure; each run ends in the right result or SM_ENOMEM.
 */
static void
test_alloc_faults(void)
{
	struct sm_buf big = SM_BUF_INIT;
	bool clean = false;

	/* Enough strings to outgrow the arena's first block. */
	sm_buf_puts(&big, "{\"series\":[");
	for (int i = 0; i < 300; i++)
		sm_buf_printf(&big, "%s{\"labels\":[{\"name\":\"n%d\","
		    "\"value\":\"%0200d\"}],\"points\":[{\"value\":%d,"
		    "\"timestamp\":\"%d\"}]}", i ? "," : "", i, i, i + 1, i + 1);
	sm_buf_puts(&big, "]}");
	SM_REQUIRE(sm_buf_error(&big) == 0);
	for (long n = 1; n < 1000 && !clean; n++) {
		struct sm_arena *a;
		struct sm_buf b = SM_BUF_INIT;
		ProtobufCMessage *m = NULL;
		struct sm_err err;
		int rv;

		sm_fault_alloc_after(n);
		if ((a = sm_arena_create(0)) == NULL) {
			sm_fault_alloc_after(0);
			continue;
		}
		rv = sm_pbjson_decode(
		    &querier__v1__select_series_response__descriptor, big.b,
		    big.len, a, &m, &err);
		SM_CHECKF(rv == 0 || rv == SM_ENOMEM, "n=%ld rv=%d", n, rv);
		SM_CHECK((rv == 0) == (m != NULL));
		if (rv == 0)
			sm_pbjson_encode(m, &b);
		sm_fault_alloc_after(0);
		if (rv == 0 && sm_buf_error(&b) == 0) {
			SM_CHECK(b.len == big.len &&
			    memcmp(b.b, big.b, b.len) == 0);
			clean = true;
		}
		sm_buf_fini(&b);
		sm_arena_destroy(a);
	}
	SM_CHECK(clean);
	sm_buf_fini(&big);
}

SM_TEST_MAIN(
	{ "field names: protoc's json_name", test_field_names },
	{ "SelectSeriesRequest: exact JSON, group_by and step", test_select_series_exact },
	{ "defaults omitted, set messages kept, {} for empty", test_defaults_omitted },
	{ "SelectMergeStacktracesRequest round trip", test_merge_stacktraces_round_trip },
	{ "FlameGraph: int64 values as strings, numbers accepted", test_flamegraph },
	{ "ProfileTypesResponse round trip (ID key)", test_profile_types },
	{ "Series points: double values, int64 timestamps", test_series_points },
	{ "PushRequest: bytes as base64, ID, URL alphabet", test_push_request_bytes },
	{ "decode: both names, numbers as strings, enums, unknown", test_decode_names_and_numbers },
	{ "every field type, proto2 presence, oneof", test_all_types },
	{ "oneof (generated and hand-built), proto2 required", test_oneof_and_proto2 },
	{ "floats: shortest round-trip, exponent form, NaN/Inf", test_floats },
	{ "integers: ranges, exponents, strings, bad forms", test_integer_forms },
	{ "errors name the field path", test_errors },
	{ "nesting deeper than 64 is refused", test_depth_limit },
	{ "arena budget exhaustion is SM_ENOMEM", test_arena_budget },
	{ "encode: buffer limit is reported", test_encode_buffer_limit },
	{ "allocation failures end in SM_ENOMEM, never a crash", test_alloc_faults },
)
