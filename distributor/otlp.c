/*
 * otlp.c -- OpenTelemetry profiles in: OTLP/HTTP, POST /v1development/profiles
 * (what the Collector's otlphttp exporter, the OpenTelemetry eBPF
 * profiler and async-profiler send), in the alpha format of
 * opentelemetry-proto v1.10.0 and later (proto/opentelemetry/README.md).
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
 *     "none" in both), and goes down the push.v1 Push path: the same
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
#include "google/v1/profile.pb-c.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb-c.h"
#include "push/v1/push.pb-c.h"

#include "dist_int.h"

#define OTLP_PATH "/v1development/profiles"
#define OTLP_GRPC_PATH "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
#define OTLP_FORMAT "OTLP profiles v1development of opentelemetry-proto " \
	"v1.10.0 or later"

typedef Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceRequest
    otlp_req;
typedef Opentelemetry__Proto__Profiles__V1development__ProfilesDictionary
    otlp_dict;
typedef Opentelemetry__Proto__Profiles__V1development__Profile otlp_profile;
typedef Opentelemetry__Proto__Profiles__V1development__Sample otlp_sample;
typedef Opentelemetry__Proto__Common__V1__KeyValue otlp_kv;
typedef Opentelemetry__Proto__Common__V1__AnyValue otlp_any;
typedef Opentelemetry__Proto__Profiles__V1development__KeyValueAndUnit
    otlp_kvu;

/* The conversion of one request: its dictionary and the arena. */
struct otlp_conv {
	const otlp_dict *d;
	struct sm_arena *a;
	struct sm_err *err;
	/* the pprof string table under construction: the dictionary's
	 * strings, then the ones conversion adds */
	char **strs;
	size_t nstr, strcap;
};

static const otlp_dict otlp_empty_dict =
    OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__PROFILES_DICTIONARY__INIT;

static int
bad_index(struct otlp_conv *c, const char *what, int64_t i, size_t n)
{
	return (sm_err_set(c->err, SM_EINVAL, "%s %lld is not in its table "
	    "(%zu entries): this server accepts %s (a request in an older "
	    "format numbers Sample's fields differently)", what, (long long)i,
	    n, OTLP_FORMAT));
}

/* A string-table index of the dictionary, checked. */
static int
str_at(struct otlp_conv *c, const char *what, int32_t i, const char **out)
{
	if (i < 0 || (size_t)i >= c->d->n_string_table)
		return (bad_index(c, what, i, c->d->n_string_table));
	*out = c->d->string_table[i] != NULL ? c->d->string_table[i] : "";
	return (0);
}

/* A label name from an attribute key: service.name -> service_name,
 * bytes other than letters, digits and '_' -> '_'. */
static char *
label_name(struct sm_arena *a, const char *key)
{
	size_t n = strlen(key);
	char *s = sm_arena_alloc(a, n + 2), *p = s;

	if (s == NULL)
		return (NULL);
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

/*
 * An attribute value as label text (string, int, bool, double; the
 * dictionary's string index for string_value_strindex), or *out NULL
 * for a value that has none (array, map, bytes, unset).
 */
static int
any_text(struct otlp_conv *c, const otlp_any *v, const char **out)
{
	char buf[64];

	*out = NULL;
	if (v == NULL)
		return (0);
	switch (v->value_case) {
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE:
		*out = v->string_value != NULL ? v->string_value : "";
		return (0);
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX:
		return (str_at(c, "string_value_strindex",
		    v->string_value_strindex, out));
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE:
		(void)snprintf(buf, sizeof(buf), "%lld",
		    (long long)v->int_value);
		break;
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE:
		(void)snprintf(buf, sizeof(buf), "%s", v->bool_value ? "true" :
		    "false");
		break;
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_DOUBLE_VALUE:
		(void)snprintf(buf, sizeof(buf), "%.17g", v->double_value);
		break;
	default:
		return (0);
	}
	if ((*out = sm_arena_strndup(c->a, buf, strlen(buf))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	return (0);
}

/* Append a label to a growing series label list. */
static int
add_label(struct otlp_conv *c, Types__V1__LabelPair ***v, size_t *n,
    size_t *cap, const char *name, const char *value)
{
	Types__V1__LabelPair *lp;

	for (size_t i = 0; i < *n; i++) {
		if (strcmp((*v)[i]->name, name) == 0) {
			(*v)[i]->value = (char *)value;   /* the later wins */
			return (0);
		}
	}
	if (*n == *cap) {
		size_t nc = *cap != 0 ? *cap * 2 : 8;
		Types__V1__LabelPair **nv = sm_arena_grow(c->a, *v, *n, nc,
		    sizeof(*nv));

		if (nv == NULL)
			return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
		*v = nv;
		*cap = nc;
	}
	if ((lp = sm_arena_alloc(c->a, sizeof(*lp))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	types__v1__label_pair__init(lp);
	lp->name = (char *)name;
	lp->value = (char *)value;
	(*v)[(*n)++] = lp;
	return (0);
}

/* Series labels from KeyValues (resource attributes). */
static int
labels_from_kvs(struct otlp_conv *c, otlp_kv *const *kv, size_t nkv,
    Types__V1__LabelPair ***v, size_t *n, size_t *cap)
{
	for (size_t i = 0; i < nkv; i++) {
		const char *key = kv[i]->key, *val;
		char *name;
		int rv;

		if ((key == NULL || key[0] == '\0') && kv[i]->key_strindex != 0 &&
		    (rv = str_at(c, "key_strindex", kv[i]->key_strindex,
		    &key)) != 0)
			return (rv);
		if (key == NULL || key[0] == '\0')
			continue;
		if ((rv = any_text(c, kv[i]->value, &val)) != 0)
			return (rv);
		if (val == NULL)
			continue;
		if ((name = strcmp(key, "service.name") == 0 ?
		    (char *)SM_LABEL_SERVICE_NAME : label_name(c->a, key)) ==
		    NULL)
			return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
		if ((rv = add_label(c, v, n, cap, name, val)) != 0)
			return (rv);
	}
	return (0);
}

/* Series labels from attribute-table indices (a profile's). */
static int
labels_from_attrs(struct otlp_conv *c, const int32_t *idx, size_t nidx,
    Types__V1__LabelPair ***v, size_t *n, size_t *cap)
{
	for (size_t i = 0; i < nidx; i++) {
		const otlp_kvu *kv;
		const char *key, *val;
		char *name;
		int rv;

		if (idx[i] < 0 || (size_t)idx[i] >= c->d->n_attribute_table)
			return (bad_index(c, "Profile.attribute_indices",
			    idx[i], c->d->n_attribute_table));
		if (idx[i] == 0)
			continue;
		kv = c->d->attribute_table[idx[i]];
		if ((rv = str_at(c, "attribute key_strindex", kv->key_strindex,
		    &key)) != 0 || (rv = any_text(c, kv->value, &val)) != 0)
			return (rv);
		if (key[0] == '\0' || val == NULL)
			continue;
		if ((name = strcmp(key, "service.name") == 0 ?
		    (char *)SM_LABEL_SERVICE_NAME : label_name(c->a, key)) ==
		    NULL)
			return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
		if ((rv = add_label(c, v, n, cap, name, val)) != 0)
			return (rv);
	}
	return (0);
}

/* A string appended to the pprof string table; its index, or -1. */
static int64_t
pp_str(struct otlp_conv *c, const char *s)
{
	if (c->nstr == c->strcap) {
		size_t nc = c->strcap * 2 + 16;
		char **nv = sm_arena_grow(c->a, c->strs, c->nstr, nc,
		    sizeof(*nv));

		if (nv == NULL)
			return (-1);
		c->strs = nv;
		c->strcap = nc;
	}
	c->strs[c->nstr] = (char *)s;
	return ((int64_t)c->nstr++);
}

/* The dictionary's mappings, functions and locations as pprof's (ids =
 * OTLP indexes, the zero entries left out).  Shared by every profile of
 * the request: built once. */
struct otlp_tables {
	Google__V1__Mapping **map;
	size_t nmap;
	Google__V1__Function **fn;
	size_t nfn;
	Google__V1__Location **loc;
	size_t nloc;
};

static int
build_tables(struct otlp_conv *c, struct otlp_tables *t)
{
	const otlp_dict *d = c->d;
	const char *s;
	int rv;

	memset(t, 0, sizeof(*t));
	if ((t->map = sm_arena_calloc(c->a, d->n_mapping_table + 1,
	    sizeof(*t->map))) == NULL || (t->fn = sm_arena_calloc(c->a,
	    d->n_function_table + 1, sizeof(*t->fn))) == NULL ||
	    (t->loc = sm_arena_calloc(c->a, d->n_location_table + 1,
	    sizeof(*t->loc))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (size_t i = 1; i < d->n_mapping_table; i++) {
		const Opentelemetry__Proto__Profiles__V1development__Mapping
		    *om = d->mapping_table[i];
		Google__V1__Mapping *m = sm_arena_alloc(c->a, sizeof(*m));

		if (m == NULL)
			return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
		if ((rv = str_at(c, "Mapping.filename_strindex",
		    om->filename_strindex, &s)) != 0)
			return (rv);
		google__v1__mapping__init(m);
		m->id = i;
		m->memory_start = om->memory_start;
		m->memory_limit = om->memory_limit;
		m->file_offset = om->file_offset;
		m->filename = om->filename_strindex;
		t->map[t->nmap++] = m;
	}
	for (size_t i = 1; i < d->n_function_table; i++) {
		const Opentelemetry__Proto__Profiles__V1development__Function
		    *of = d->function_table[i];
		Google__V1__Function *f = sm_arena_alloc(c->a, sizeof(*f));

		if (f == NULL)
			return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
		if ((rv = str_at(c, "Function.name_strindex",
		    of->name_strindex, &s)) != 0 ||
		    (rv = str_at(c, "Function.system_name_strindex",
		    of->system_name_strindex, &s)) != 0 ||
		    (rv = str_at(c, "Function.filename_strindex",
		    of->filename_strindex, &s)) != 0)
			return (rv);
		google__v1__function__init(f);
		f->id = i;
		f->name = of->name_strindex;
		f->system_name = of->system_name_strindex;
		f->filename = of->filename_strindex;
		f->start_line = of->start_line;
		t->fn[t->nfn++] = f;
	}
	for (size_t i = 1; i < d->n_location_table; i++) {
		const Opentelemetry__Proto__Profiles__V1development__Location
		    *ol = d->location_table[i];
		Google__V1__Location *l = sm_arena_alloc(c->a, sizeof(*l));
		Google__V1__Line **lines = NULL;
		size_t nl = 0;

		if (l == NULL || (ol->n_lines > 0 && (lines = sm_arena_calloc(
		    c->a, ol->n_lines, sizeof(*lines))) == NULL))
			return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
		if (ol->mapping_index < 0 || (size_t)ol->mapping_index >=
		    SM_MAX(d->n_mapping_table, 1))
			return (bad_index(c, "Location.mapping_index",
			    ol->mapping_index, d->n_mapping_table));
		google__v1__location__init(l);
		l->id = i;
		l->mapping_id = (uint64_t)ol->mapping_index;
		l->address = ol->address;
		for (size_t k = 0; k < ol->n_lines; k++) {
			const Opentelemetry__Proto__Profiles__V1development__Line
			    *oln = ol->lines[k];
			Google__V1__Line *ln;

			if (oln->function_index < 0 || (size_t)oln->
			    function_index >= SM_MAX(d->n_function_table, 1))
				return (bad_index(c, "Line.function_index",
				    oln->function_index, d->n_function_table));
			if (oln->function_index == 0)
				continue;
			if ((ln = sm_arena_alloc(c->a, sizeof(*ln))) == NULL)
				return (sm_err_set(c->err, SM_ENOMEM,
				    "out of memory"));
			google__v1__line__init(ln);
			ln->function_id = (uint64_t)oln->function_index;
			ln->line = oln->line;
			lines[nl++] = ln;
		}
		l->line = lines;
		l->n_line = nl;
		t->loc[t->nloc++] = l;
	}
	return (0);
}

/* 8 bytes as 16 lowercase hex digits, in the arena. */
static char *
hex16(struct sm_arena *a, const uint8_t *p)
{
	static const char hx[] = "0123456789abcdef";
	char *s = sm_arena_alloc(a, 17);

	if (s == NULL)
		return (NULL);
	for (int i = 0; i < 8; i++) {
		s[2 * i] = hx[p[i] >> 4];
		s[2 * i + 1] = hx[p[i] & 15];
	}
	s[16] = '\0';
	return (s);
}

/*
 * The pprof labels of an OTLP sample into lab[] (room for its attributes
 * and a link): string attributes as str labels, int ones as num labels,
 * its Link's span id as the span_id label (*span_key: the string index of
 * "span_id", 0 until first used).
 */
static int
sample_labels(struct otlp_conv *c, const otlp_sample *os, int64_t *span_key,
    Google__V1__Label **lab, size_t *nlabp)
{
	const otlp_dict *d = c->d;
	size_t nlab = 0;
	const char *s;
	int rv;

	for (size_t k = 0; k < os->n_attribute_indices; k++) {
		int32_t ai = os->attribute_indices[k];
		const otlp_kvu *kv;
		Google__V1__Label *gl;

		if (ai < 0 || (size_t)ai >= d->n_attribute_table)
			return (bad_index(c, "Sample.attribute_indices",
			    ai, d->n_attribute_table));
		if (ai == 0)
			continue;
		kv = d->attribute_table[ai];
		if ((rv = str_at(c, "attribute key_strindex",
		    kv->key_strindex, &s)) != 0)
			return (rv);
		if ((gl = sm_arena_alloc(c->a, sizeof(*gl))) == NULL)
			return (sm_err_set(c->err, SM_ENOMEM,
			    "out of memory"));
		google__v1__label__init(gl);
		gl->key = kv->key_strindex;
		if (kv->value != NULL && kv->value->value_case ==
		    OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE) {
			gl->num = kv->value->int_value;
		} else {
			const char *txt;
			int64_t si;

			if ((rv = any_text(c, kv->value, &txt)) != 0)
				return (rv);
			if (txt == NULL)
				continue;
			if ((si = pp_str(c, txt)) < 0)
				return (sm_err_set(c->err, SM_ENOMEM,
				    "out of memory"));
			gl->str = si;
		}
		lab[nlab++] = gl;
	}
	if (os->link_index > 0) {
		const Opentelemetry__Proto__Profiles__V1development__Link
		    *ln = d->link_table[os->link_index];
		Google__V1__Label *gl;
		char *hx;
		int64_t si;

		if (ln->span_id.len != 8)
			return (sm_err_set(c->err, SM_EINVAL, "Link %d: "
			    "span_id is %zu bytes, not 8",
			    os->link_index, ln->span_id.len));
		if (*span_key == 0 && (*span_key = pp_str(c, "span_id")) < 0)
			return (sm_err_set(c->err, SM_ENOMEM,
			    "out of memory"));
		if ((hx = hex16(c->a, ln->span_id.data)) == NULL ||
		    (si = pp_str(c, hx)) < 0 ||
		    (gl = sm_arena_alloc(c->a, sizeof(*gl))) == NULL)
			return (sm_err_set(c->err, SM_ENOMEM,
			    "out of memory"));
		google__v1__label__init(gl);
		gl->key = *span_key;
		gl->str = si;
		lab[nlab++] = gl;
	}
	*nlabp = nlab;
	return (0);
}

/* An earlier sample of the group with os's stack, link and attributes
 * (its index in first[]), or SM_OATAB_NONE with `it` where it goes. */
static uint32_t
merged_find(const struct sm_oatab *seen, const otlp_sample *const *first,
    const otlp_sample *os, struct sm_oatab_it *it)
{
	uint64_t h = sm_hash_u64((uint64_t)(uint32_t)os->stack_index << 32 |
	    (uint32_t)os->link_index);
	uint32_t idx;

	if (os->n_attribute_indices > 0)
		h ^= sm_hash(os->attribute_indices, os->n_attribute_indices *
		    sizeof(*os->attribute_indices));
	for (sm_oatab_probe(seen, h, it); (idx = sm_oatab_next(seen, it)) !=
	    SM_OATAB_NONE;) {
		const otlp_sample *f = first[idx];

		if (f->stack_index == os->stack_index && f->link_index ==
		    os->link_index && f->n_attribute_indices ==
		    os->n_attribute_indices && (f->n_attribute_indices == 0 ||
		    memcmp(f->attribute_indices, os->attribute_indices,
		    f->n_attribute_indices * sizeof(*f->attribute_indices)) ==
		    0))
			return (idx);
	}
	return (SM_OATAB_NONE);
}

/*
 * Profiles of one scope that belong in one pprof: the same time,
 * duration, period type and period and the same attributes -- what the
 * Collector's translator makes of one pprof's sample types.  Kept
 * together, /ingest's naming sees every sample type at once and names
 * them as for the pprof they came from.
 */
static bool
same_pprof(const otlp_profile *x, const otlp_profile *y)
{
	const Opentelemetry__Proto__Profiles__V1development__ValueType
	    *px = x->period_type, *py = y->period_type;

	return (x->time_unix_nano == y->time_unix_nano && x->duration_nano ==
	    y->duration_nano && x->period == y->period && (px == NULL) ==
	    (py == NULL) && (px == NULL || (px->type_strindex ==
	    py->type_strindex && px->unit_strindex == py->unit_strindex)) &&
	    x->n_attribute_indices == y->n_attribute_indices &&
	    (x->n_attribute_indices == 0 || memcmp(x->attribute_indices,
	    y->attribute_indices, x->n_attribute_indices *
	    sizeof(*x->attribute_indices)) == 0));
}

/* Profiles grp[0..ng) (same_pprof) as one pprof, a sample type each, in
 * the arena. */
static int
profile_pprof(struct otlp_conv *c, const struct otlp_tables *t,
    otlp_profile *const *grp, size_t ng, uint8_t **out, size_t *outlen)
{
	const otlp_dict *d = c->d;
	const otlp_profile *op = grp[0];
	Google__V1__Profile p = GOOGLE__V1__PROFILE__INIT;
	Google__V1__ValueType pt = GOOGLE__V1__VALUE_TYPE__INIT;
	Google__V1__ValueType **stp;
	Google__V1__Sample **samples = NULL;
	const otlp_sample **first = NULL;  /* per merged sample: its key */
	struct sm_oatab seen;
	int64_t span_key = 0;
	const char *s;
	size_t ns = 0, nsamples = 0, saved = c->nstr;
	int rv;

	sm_oatab_init_arena(&seen, 0, c->a);

	if ((stp = sm_arena_calloc(c->a, ng, sizeof(*stp))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (size_t g = 0; g < ng; g++) {
		if ((stp[g] = sm_arena_alloc(c->a, sizeof(**stp))) == NULL)
			return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
		google__v1__value_type__init(stp[g]);
		if (grp[g]->sample_type != NULL) {
			if ((rv = str_at(c, "sample_type.type_strindex",
			    grp[g]->sample_type->type_strindex, &s)) != 0 ||
			    (rv = str_at(c, "sample_type.unit_strindex",
			    grp[g]->sample_type->unit_strindex, &s)) != 0)
				return (rv);
			stp[g]->type = grp[g]->sample_type->type_strindex;
			stp[g]->unit = grp[g]->sample_type->unit_strindex;
		}
		nsamples += grp[g]->n_samples;
	}
	if (op->period_type != NULL) {
		if ((rv = str_at(c, "period_type.type_strindex",
		    op->period_type->type_strindex, &s)) != 0 ||
		    (rv = str_at(c, "period_type.unit_strindex",
		    op->period_type->unit_strindex, &s)) != 0)
			return (rv);
		pt.type = op->period_type->type_strindex;
		pt.unit = op->period_type->unit_strindex;
		p.period_type = &pt;
	}
	if (nsamples > 0 && (samples = sm_arena_calloc(c->a, nsamples,
	    sizeof(*samples))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	/* One pprof sample per (stack, link, attributes) across the group,
	 * a value per Profile's sample type: the pprof the profiles came
	 * from, not one sample per type (which would multiply the decoder's
	 * work by the number of types). */
	if (ng > 1 && (first = sm_arena_calloc(c->a, SM_MAX(nsamples, 1),
	    sizeof(*first))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (size_t g = 0; g < ng; g++)
	for (size_t i = 0; i < grp[g]->n_samples; i++) {
		const otlp_sample *os = grp[g]->samples[i];
		const Opentelemetry__Proto__Profiles__V1development__Stack *stk;
		Google__V1__Sample *gs;
		Google__V1__Label **lab = NULL;
		struct sm_oatab_it it;
		uint32_t idx;
		int64_t v = 0;
		size_t nlab = 0;

		if (os->stack_index < 0 || (size_t)os->stack_index >=
		    d->n_stack_table)
			return (bad_index(c, "Sample.stack_index",
			    os->stack_index, d->n_stack_table));
		if (os->link_index < 0 || (size_t)os->link_index >=
		    SM_MAX(d->n_link_table, 1))
			return (bad_index(c, "Sample.link_index",
			    os->link_index, d->n_link_table));
		stk = d->stack_table[os->stack_index];
		for (size_t k = 0; k < os->n_values; k++)
			v = sm_add_sat(v, os->values[k]);
		if (os->n_values == 0)
			v = (int64_t)os->n_timestamps_unix_nano;
		if (first != NULL && (idx = merged_find(&seen, first, os,
		    &it)) != SM_OATAB_NONE) {
			samples[idx]->value[g] = sm_add_sat(samples[idx]->value[g],
			    v);
			continue;
		}
		if ((gs = sm_arena_alloc(c->a, sizeof(*gs))) == NULL ||
		    (gs->location_id = sm_arena_alloc(c->a,
		    (stk->n_location_indices + 1) * sizeof(uint64_t))) ==
		    NULL || (gs->value = sm_arena_calloc(c->a, ng,
		    sizeof(int64_t))) == NULL || (lab = sm_arena_calloc(c->a,
		    os->n_attribute_indices + 1, sizeof(*lab))) == NULL) {
			return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
		}
		{
			uint64_t *locs = gs->location_id;
			int64_t *val = gs->value;

			google__v1__sample__init(gs);
			gs->location_id = locs;
			gs->value = val;
		}
		for (size_t k = 0; k < stk->n_location_indices; k++) {
			int32_t li = stk->location_indices[k];

			if (li <= 0 || (size_t)li >= d->n_location_table)
				return (bad_index(c, "Stack.location_indices",
				    li, d->n_location_table));
			gs->location_id[gs->n_location_id++] = (uint64_t)li;
		}
		gs->value[g] = v;       /* the others' types: 0 */
		gs->n_value = ng;
		if ((rv = sample_labels(c, os, &span_key, lab, &nlab)) != 0)
			return (rv);
		gs->label = lab;
		gs->n_label = nlab;
		if (first != NULL) {
			if (sm_oatab_insert(&seen, &it, (uint32_t)ns) != 0)
				return (sm_err_set(c->err, SM_ENOMEM,
				    "out of memory"));
			first[ns] = os;
		}
		samples[ns++] = gs;
	}
	p.n_sample_type = ng;
	p.sample_type = stp;
	p.sample = samples;
	p.n_sample = ns;
	p.mapping = t->map;
	p.n_mapping = t->nmap;
	p.function = t->fn;
	p.n_function = t->nfn;
	p.location = t->loc;
	p.n_location = t->nloc;
	p.string_table = c->strs;
	p.n_string_table = c->nstr;
	p.time_nanos = (int64_t)op->time_unix_nano;
	p.duration_nanos = (int64_t)op->duration_nano;
	p.period = op->period;
	*outlen = google__v1__profile__get_packed_size(&p);
	if ((*out = sm_arena_alloc(c->a, SM_MAX(*outlen, 1))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	google__v1__profile__pack(&p, *out);
	c->nstr = saved;        /* the next profile adds its own */
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
uuid_of(struct otlp_conv *c, const otlp_profile *op)
{
	static const char hx[] = "0123456789abcdef";
	const ProtobufCBinaryData *id = &op->profile_id;
	uint8_t buf[16 + 8], h[16];
	uint64_t a, b;
	bool zero = true;
	char *s;
	size_t k = 0;

	if (id->len != 16)
		return ((char *)"");
	for (size_t i = 0; i < 16; i++)
		zero &= id->data[i] == 0;
	if (zero || (s = sm_arena_alloc(c->a, 37)) == NULL)
		return ((char *)"");
	memcpy(buf, id->data, 16);
	memset(buf + 16, 0, 8);
	if (op->sample_type != NULL) {
		uint32_t t = (uint32_t)op->sample_type->type_strindex;
		uint32_t u = (uint32_t)op->sample_type->unit_strindex;

		memcpy(buf + 16, &t, 4);
		memcpy(buf + 20, &u, 4);
	}
	a = sm_hash_seed(buf, sizeof(buf), 0x6f746c70);
	b = sm_hash_seed(buf, sizeof(buf), 0x70726f66);
	memcpy(h, &a, 8);
	memcpy(h + 8, &b, 8);
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			s[k++] = '-';
		s[k++] = hx[h[i] >> 4];
		s[k++] = hx[h[i] & 15];
	}
	s[k] = '\0';
	return (s);
}

/* The request as a push.v1 PushRequest: a series per profile. */
static int
otlp_to_push(struct otlp_conv *c, const otlp_req *req,
    Push__V1__PushRequest *out)
{
	struct otlp_tables t;
	size_t nprof = 0, k = 0;
	int rv;

	for (size_t i = 0; i < req->n_resource_profiles; i++)
		for (size_t j = 0; j < req->resource_profiles[i]->
		    n_scope_profiles; j++)
			nprof += req->resource_profiles[i]->
			    scope_profiles[j]->n_profiles;
	push__v1__push_request__init(out);
	if (nprof == 0)
		return (0);
	c->strcap = c->d->n_string_table + 16;
	if ((c->strs = sm_arena_calloc(c->a, c->strcap, sizeof(*c->strs))) ==
	    NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < c->d->n_string_table; i++)
		c->strs[i] = c->d->string_table[i] != NULL ?
		    c->d->string_table[i] : (char *)"";
	c->nstr = c->d->n_string_table;
	if (c->nstr == 0 && pp_str(c, "") < 0)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	if ((rv = build_tables(c, &t)) != 0)
		return (rv);
	if ((out->series = sm_arena_calloc(c->a, nprof,
	    sizeof(*out->series))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < req->n_resource_profiles; i++) {
		const Opentelemetry__Proto__Profiles__V1development__ResourceProfiles
		    *rp = req->resource_profiles[i];

		for (size_t j = 0; j < rp->n_scope_profiles; j++) {
			const Opentelemetry__Proto__Profiles__V1development__ScopeProfiles
			    *sp = rp->scope_profiles[j];

			for (size_t m = 0, ng; m < sp->n_profiles; m += ng,
			    k++) {
				const otlp_profile *op = sp->profiles[m];
				Push__V1__RawProfileSeries *rs;
				Push__V1__RawSample *smp, **smpv;
				Types__V1__LabelPair **lv = NULL;
				size_t nl = 0, lcap = 0;
				bool svc = false;
				uint8_t *pb = NULL;
				size_t pblen = 0;

				if (rp->resource != NULL && (rv =
				    labels_from_kvs(c, rp->resource->attributes,
				    rp->resource->n_attributes, &lv, &nl,
				    &lcap)) != 0)
					return (rv);
				if ((rv = labels_from_attrs(c,
				    op->attribute_indices,
				    op->n_attribute_indices, &lv, &nl,
				    &lcap)) != 0)
					return (rv);
				for (size_t q = 0; q < nl; q++)
					svc |= strcmp(lv[q]->name,
					    SM_LABEL_SERVICE_NAME) == 0;
				if (!svc && (rv = add_label(c, &lv, &nl, &lcap,
				    SM_LABEL_SERVICE_NAME,
				    "unknown_service")) != 0)
					return (rv);
				for (ng = 1; m + ng < sp->n_profiles &&
				    same_pprof(op, sp->profiles[m + ng]); ng++)
					;
				if ((rv = profile_pprof(c, &t, sp->profiles + m,
				    ng, &pb, &pblen)) != 0) {
					sm_err_prefix(c->err, "resource %zu "
					    "scope %zu profile %zu", i, j, m);
					return (rv);
				}
				if ((rs = sm_arena_alloc(c->a,
				    sizeof(*rs))) == NULL ||
				    (smp = sm_arena_alloc(c->a,
				    sizeof(*smp))) == NULL ||
				    (smpv = sm_arena_alloc(c->a,
				    sizeof(*smpv))) == NULL)
					return (sm_err_set(c->err, SM_ENOMEM,
					    "out of memory"));
				push__v1__raw_profile_series__init(rs);
				push__v1__raw_sample__init(smp);
				smp->raw_profile.data = pb;
				smp->raw_profile.len = pblen;
				smp->id = uuid_of(c, op);
				smpv[0] = smp;
				rs->labels = lv;
				rs->n_labels = nl;
				rs->samples = smpv;
				rs->n_samples = 1;
				out->series[out->n_series++] = rs;
			}
		}
	}
	return (0);
}

static int otlp_req_to_push(const otlp_req *req, struct sm_arena *a,
    Push__V1__PushRequest *out, struct sm_err *err);

int
dist_otlp_convert(const uint8_t *body, size_t len, bool json,
    struct sm_arena *a, Push__V1__PushRequest *out, struct sm_err *err)
{
	ProtobufCAllocator al = sm_arena_pbc(a);
	otlp_req *req;
	int rv;

	push__v1__push_request__init(out);
	if (json) {
		ProtobufCMessage *m = NULL;

		if ((rv = sm_pbjson_decode_flags(
		    &opentelemetry__proto__collector__profiles__v1development__export_profiles_service_request__descriptor,
		    (const char *)body, len, SM_PBJSON_HEX_IDS, a, &m,
		    err)) != 0) {
			sm_err_prefix(err, "OTLP JSON (" OTLP_FORMAT ")");
			return (rv);
		}
		req = (otlp_req *)m;
	} else {
		req = opentelemetry__proto__collector__profiles__v1development__export_profiles_service_request__unpack(
		    &al, len, body);
	}
	if (req == NULL)
		return (sm_err_set(err, SM_EINVAL, "malformed protobuf: not an "
		    "ExportProfilesServiceRequest of " OTLP_FORMAT));
	return (otlp_req_to_push(req, a, out, err));
}

/* A decoded request -> the PushRequest it becomes, in `a`. */
static int
otlp_req_to_push(const otlp_req *req, struct sm_arena *a,
    Push__V1__PushRequest *out, struct sm_err *err)
{
	struct otlp_conv c = { req->dictionary != NULL ? req->dictionary :
	    &otlp_empty_dict, a, err, NULL, 0, 0 };

	return (otlp_to_push(&c, req, out));
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

	if ((rv = otlp_req_to_push((const otlp_req *)msg, call->arena, &push,
	    err)) != 0)
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
