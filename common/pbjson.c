/*
 * pbjson.c -- canonical proto3 JSON for protobuf-c messages; see pbjson.h.
 *
 * Everything is driven by the generated descriptors: a field's storage is
 * found at `offset` in the C struct, and its presence or count at
 * `quantifier_offset`, whose meaning depends on the label and flags:
 *
 *   label / flags          quantifier            value at offset
 *   REPEATED               size_t n_<field>      T *array (messages: T **)
 *   ONEOF flag (any label) uint32_t <oneof>_case T (set iff case == f->id)
 *   OPTIONAL (proto2),     protobuf_c_boolean    T
 *     not string/message     has_<field>
 *   OPTIONAL string or     none: pointer != NULL (strings: and not the
 *     message                default_value pointer, as protobuf-c packs)
 *   REQUIRED (proto2)      none                  T
 *   NONE (proto3)          none: "set" = not the zero value (bit pattern,
 *                          so -0.0 is set, as Go's protojson has it)
 *
 * Encoding writes the fields in descriptor order (tag order, which is the
 * declaration order of every Pyroscope message).  Decoding parses with
 * json.h (jansson) and walks the object; the message is allocated from
 * the arena and initialized with the descriptor's message_init (which
 * installs the defaults), then each present JSON key overwrites its
 * field.
 *
 * Decisions where pbjson.h is silent (following Go's protojson, which
 * connect-go uses, unless said otherwise):
 *   - A key given twice, or a field given under both its names, or two
 *     members of one oneof: the later key wins (Go rejects these; jansson
 *     keeps the last value of a duplicate key, and objects iterate in
 *     insertion order, so "last wins" is the one consistent rule we get).
 *   - Integers may be written with a fraction or exponent when the value
 *     is integral ("1e3", "2.0"), as numbers or strings; strings must be
 *     exactly a JSON number (no spaces).
 *   - jansson refuses a JSON integer literal beyond the int64 range ("too
 *     big integer"), yet such literals are valid and we write them
 *     ourselves for large doubles (1e20 is "100000000000000000000").  The
 *     document is then parsed again with every number as a double; in
 *     that pass an integer field refuses a number from 2^53 up (it may
 *     not be exact: send it as a string, as protojson does), so uint64
 *     values above INT64_MAX must come as strings.
 *   - Floating point fields also accept numbers in strings ("1.5"), as Go
 *     does.  The JSON number -0 reads as +0 (jansson parses it as the
 *     integer 0); -0.0 and the string "-0" keep the sign, and the encoder
 *     writes negative zero as -0.0 so its own output round-trips.
 *   - Enum values: a number (any int32, named or not) or a value name; a
 *     number inside a string is not a name and is refused.
 *   - null inside a repeated field is an error (Go: "invalid value null").
 *   - A missing proto2 required field is an error (protobuf-c would crash
 *     packing a NULL required string or message); proto3 has none.
 *   - Strings must be valid UTF-8 without NUL (jansson refuses both; a NUL
 *     would silently cut the C string).
 *   - Map fields and well-known types get no special form: protobuf-c has
 *     no map flag (a map is a repeated *Entry message) and none of the
 *     Pyroscope messages we serve uses either.  A json_name option in the
 *     .proto is not seen either: protobuf-c does not keep it, so names are
 *     always the ones protoc would compute by default.
 *
 * Floating point output: the shortest decimal that reads back to the same
 * float32/float64 (the correctly rounded one at each length; Go may find a
 * shorter one just past a power of two, where the rounding interval is
 * lopsided -- still a round trip, one digit longer), in fixed notation,
 * or in exponent notation below 1e-6 and from 1e21 up with at least one
 * exponent digit ("1e-7", "1e+21"), which is what Go's encoding/json and
 * protojson print.
 */
#include "pbjson.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "json.h"

#define PBJSON_DEPTH_MAX 64
#define PBJSON_PATH_MAX 256

/* --- names ---------------------------------------------------------------- */

/* protoc's default json_name: drop each '_' and upper-case the next char. */
static void
pbjson_put_name(struct sm_buf *b, const char *name)
{
	bool up = false;

	for (const char *p = name; *p != '\0'; p++) {
		if (*p == '_') {
			up = true;
			continue;
		}
		sm_buf_putc(b, up && *p >= 'a' && *p <= 'z' ?
		    (char)(*p - 'a' + 'A') : *p);
		up = false;
	}
}

const char *
sm_pbjson_field_name(const ProtobufCFieldDescriptor *f, char *dst, size_t n)
{
	size_t k = 0;
	bool up = false;

	SM_ASSERT(n > 0);
	for (const char *p = f->name; *p != '\0' && k + 1 < n; p++) {
		if (*p == '_') {
			up = true;
			continue;
		}
		dst[k++] = up && *p >= 'a' && *p <= 'z' ?
		    (char)(*p - 'a' + 'A') : *p;
		up = false;
	}
	dst[k] = '\0';
	return (dst);
}

/* True when `key` is the json_name of the proto field `name`. */
static bool
pbjson_json_name_eq(const char *name, const char *key)
{
	bool up = false;

	for (; *name != '\0'; name++) {
		char c;

		if (*name == '_') {
			up = true;
			continue;
		}
		c = up && *name >= 'a' && *name <= 'z' ?
		    (char)(*name - 'a' + 'A') : *name;
		up = false;
		if (*key++ != c)
			return (false);
	}
	return (*key == '\0');
}

static const ProtobufCFieldDescriptor *
pbjson_find_field(const ProtobufCMessageDescriptor *d, const char *key)
{
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];

		if (pbjson_json_name_eq(f->name, key) ||
		    strcmp(f->name, key) == 0)
			return (f);
	}
	return (NULL);
}

/* --- field storage -------------------------------------------------------- */

/* Each field type's name (for messages) and its size in a message. */
static const struct {
	const char *name;
	size_t size;
} pbjson_types[] = {
	[PROTOBUF_C_TYPE_INT32] = { "int32", sizeof(int32_t) },
	[PROTOBUF_C_TYPE_SINT32] = { "sint32", sizeof(int32_t) },
	[PROTOBUF_C_TYPE_SFIXED32] = { "sfixed32", sizeof(int32_t) },
	[PROTOBUF_C_TYPE_INT64] = { "int64", sizeof(int64_t) },
	[PROTOBUF_C_TYPE_SINT64] = { "sint64", sizeof(int64_t) },
	[PROTOBUF_C_TYPE_SFIXED64] = { "sfixed64", sizeof(int64_t) },
	[PROTOBUF_C_TYPE_UINT32] = { "uint32", sizeof(uint32_t) },
	[PROTOBUF_C_TYPE_FIXED32] = { "fixed32", sizeof(uint32_t) },
	[PROTOBUF_C_TYPE_UINT64] = { "uint64", sizeof(uint64_t) },
	[PROTOBUF_C_TYPE_FIXED64] = { "fixed64", sizeof(uint64_t) },
	[PROTOBUF_C_TYPE_FLOAT] = { "float", sizeof(float) },
	[PROTOBUF_C_TYPE_DOUBLE] = { "double", sizeof(double) },
	[PROTOBUF_C_TYPE_BOOL] = { "bool", sizeof(protobuf_c_boolean) },
	[PROTOBUF_C_TYPE_ENUM] = { "enum", sizeof(int) },
	[PROTOBUF_C_TYPE_STRING] = { "string", sizeof(char *) },
	[PROTOBUF_C_TYPE_BYTES] = { "bytes", sizeof(ProtobufCBinaryData) },
	[PROTOBUF_C_TYPE_MESSAGE] = { "message", sizeof(ProtobufCMessage *) },
};

static size_t
pbjson_type_size(ProtobufCType t)
{
	SM_ASSERT((size_t)t < SM_ARRAY_LEN(pbjson_types) &&
	    pbjson_types[t].name != NULL);
	return (pbjson_types[t].size);
}

static const char *
pbjson_type_name(ProtobufCType t)
{
	if ((size_t)t < SM_ARRAY_LEN(pbjson_types) &&
	    pbjson_types[t].name != NULL)
		return (pbjson_types[t].name);
	return ("?");
}

static void *
pbjson_at(const ProtobufCMessage *m, unsigned off)
{
	return ((char *)(uintptr_t)m + off);
}

/* Does a proto3 (label NONE) value hold its zero value? */
static bool
pbjson_is_zero(ProtobufCType t, const void *p)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_FLOAT:      /* bits: -0.0 is not zero */
		return (*(const uint32_t *)p == 0);
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return (*(const uint64_t *)p == 0);
	case PROTOBUF_C_TYPE_BOOL:
		return (*(const protobuf_c_boolean *)p == 0);
	case PROTOBUF_C_TYPE_ENUM:
		return (*(const int *)p == 0);
	case PROTOBUF_C_TYPE_STRING: {
		const char *s = *(char *const *)p;

		return (s == NULL || s[0] == '\0');
	}
	case PROTOBUF_C_TYPE_BYTES:
		return (((const ProtobufCBinaryData *)p)->len == 0);
	case PROTOBUF_C_TYPE_MESSAGE:
		return (*(ProtobufCMessage *const *)p == NULL);
	}
	return (true);
}

/* Is the singular field f present in m (see the table at the top)? */
static bool
pbjson_present(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
	const void *v = pbjson_at(m, f->offset);
	bool ptr = f->type == PROTOBUF_C_TYPE_STRING ||
	    f->type == PROTOBUF_C_TYPE_MESSAGE;

	if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0)
		return (*(const uint32_t *)pbjson_at(m, f->quantifier_offset) ==
		    f->id);
	switch (f->label) {
	case PROTOBUF_C_LABEL_REQUIRED:
		return (!ptr || *(void *const *)v != NULL);
	case PROTOBUF_C_LABEL_OPTIONAL:
		if (f->type == PROTOBUF_C_TYPE_MESSAGE)
			return (*(void *const *)v != NULL);
		if (f->type == PROTOBUF_C_TYPE_STRING)
			return (*(void *const *)v != NULL &&
			    *(void *const *)v != f->default_value);
		return (*(const protobuf_c_boolean *)pbjson_at(m,
		    f->quantifier_offset) != 0);
	case PROTOBUF_C_LABEL_NONE:
		return (!pbjson_is_zero(f->type, v));
	case PROTOBUF_C_LABEL_REPEATED:
		break;
	}
	SM_ASSERT(!"pbjson_present on a repeated field");
	return (false);
}

/* --- encoding ------------------------------------------------------------- */

static void
pbjson_put_base64(struct sm_buf *b, const uint8_t *p, size_t n)
{
	sm_buf_putc(b, '"');
	sm_buf_put_base64(b, p, n);
	sm_buf_putc(b, '"');
}

/*
 * The shortest "%.*e" rendering of v that reads back to the same value
 * (float32 when bits == 32); returns the number of significant digits
 * written to dig (trailing zeros stripped) and the decimal exponent of the
 * first digit in *exp.
 */
static size_t
pbjson_shortest(double v, int bits, char *dig, int *exp)
{
	char tmp[48], *e;
	size_t nd = 0;
	int prec;

	for (prec = 1; prec < 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, v);
		if (bits == 32 ? strtof(tmp, NULL) == (float)v :
		    strtod(tmp, NULL) == v)
			break;
	}
	if (prec == 17)
		snprintf(tmp, sizeof(tmp), "%.16e", v);
	e = strchr(tmp, 'e');
	SM_ASSERT(e != NULL);
	*exp = (int)strtol(e + 1, NULL, 10);
	for (const char *p = tmp; p < e; p++) {
		if (*p >= '0' && *p <= '9')
			dig[nd++] = *p;
	}
	while (nd > 1 && dig[nd - 1] == '0')
		nd--;
	dig[nd] = '\0';
	return (nd);
}

static void
pbjson_put_float(struct sm_buf *b, double v, int bits)
{
	char dig[24];
	double a = fabs(v);
	size_t nd;
	int exp;
	bool sci = false;

	if (isnan(v)) {
		sm_buf_puts(b, "\"NaN\"");
		return;
	}
	if (isinf(v)) {
		sm_buf_puts(b, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
		return;
	}
	if (v == 0 && signbit(v)) {
		/* Not Go's "-0": jansson reads the number -0 as the integer
		 * 0 and loses the sign; -0.0 is a real and keeps it, so our
		 * output decodes to what was encoded (found by fuzz_pbjson). */
		sm_buf_puts(b, "-0.0");
		return;
	}
	if (a != 0)
		sci = bits == 32 ? ((float)a < 1e-6f || (float)a >= 1e21f) :
		    (a < 1e-6 || a >= 1e21);
	nd = pbjson_shortest(v, bits, dig, &exp);
	if (signbit(v))
		sm_buf_putc(b, '-');
	if (sci) {
		sm_buf_putc(b, dig[0]);
		if (nd > 1) {
			sm_buf_putc(b, '.');
			sm_buf_append(b, dig + 1, nd - 1);
		}
		/* Go writes e+21 and e-07, then trims the latter to e-7. */
		if (exp < 0)
			sm_buf_printf(b, "e-%d", -exp);
		else
			sm_buf_printf(b, "e+%02d", exp);
		return;
	}
	if (exp < 0) {
		sm_buf_puts(b, "0.");
		for (int i = -1; i > exp; i--)
			sm_buf_putc(b, '0');
		sm_buf_append(b, dig, nd);
	} else if ((size_t)exp + 1 >= nd) {
		sm_buf_append(b, dig, nd);
		for (size_t i = nd; i < (size_t)exp + 1; i++)
			sm_buf_putc(b, '0');
	} else {
		sm_buf_append(b, dig, (size_t)exp + 1);
		sm_buf_putc(b, '.');
		sm_buf_append(b, dig + exp + 1, nd - (size_t)exp - 1);
	}
}

static void pbjson_enc_msg(struct sm_buf *b, const ProtobufCMessage *m);

/* One value of field f stored at p. */
static void
pbjson_enc_value(struct sm_buf *b, const ProtobufCFieldDescriptor *f,
    const void *p)
{
	const ProtobufCEnumValue *ev;

	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		sm_buf_printf(b, "%" PRId32, *(const int32_t *)p);
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		sm_buf_printf(b, "%" PRIu32, *(const uint32_t *)p);
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		/* 64-bit integers are JSON strings (proto3's JSON mapping). */
		sm_buf_putc(b, '"');
		if (f->type == PROTOBUF_C_TYPE_UINT64 ||
		    f->type == PROTOBUF_C_TYPE_FIXED64)
			sm_buf_put_u64(b, *(const uint64_t *)p);
		else
			sm_buf_put_i64(b, *(const int64_t *)p);
		sm_buf_putc(b, '"');
		break;
	case PROTOBUF_C_TYPE_FLOAT:
		pbjson_put_float(b, *(const float *)p, 32);
		break;
	case PROTOBUF_C_TYPE_DOUBLE:
		pbjson_put_float(b, *(const double *)p, 64);
		break;
	case PROTOBUF_C_TYPE_BOOL:
		sm_buf_puts(b, *(const protobuf_c_boolean *)p ? "true" :
		    "false");
		break;
	case PROTOBUF_C_TYPE_ENUM:
		ev = protobuf_c_enum_descriptor_get_value(f->descriptor,
		    *(const int *)p);
		if (ev != NULL)
			sm_buf_json_str(b, ev->name, strlen(ev->name));
		else
			sm_buf_printf(b, "%d", *(const int *)p);
		break;
	case PROTOBUF_C_TYPE_STRING: {
		const char *s = *(char *const *)p;

		if (s == NULL)
			s = "";
		sm_buf_json_str(b, s, strlen(s));
		break;
	}
	case PROTOBUF_C_TYPE_BYTES: {
		const ProtobufCBinaryData *bd = p;

		pbjson_put_base64(b, bd->data, bd->len);
		break;
	}
	case PROTOBUF_C_TYPE_MESSAGE: {
		const ProtobufCMessage *sub = *(ProtobufCMessage *const *)p;

		/* A set oneof member or a repeated element may be NULL only
		 * by a caller's mistake; it reads as the empty message. */
		if (sub == NULL)
			sm_buf_puts(b, "{}");
		else
			pbjson_enc_msg(b, sub);
		break;
	}
	}
}

static void
pbjson_enc_msg(struct sm_buf *b, const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	bool first = true;

	SM_ASSERT(d != NULL && d->magic == PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
	sm_buf_putc(b, '{');
	for (unsigned i = 0; i < d->n_fields && sm_buf_error(b) == 0; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const void *v = pbjson_at(m, f->offset);
		size_t n = 0, sz;

		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			n = *(const size_t *)pbjson_at(m, f->quantifier_offset);
			if (n == 0)
				continue;
		} else if (!pbjson_present(m, f)) {
			continue;
		}
		if (!first)
			sm_buf_putc(b, ',');
		first = false;
		sm_buf_putc(b, '"');
		pbjson_put_name(b, f->name);
		sm_buf_puts(b, "\":");
		if (f->label != PROTOBUF_C_LABEL_REPEATED) {
			pbjson_enc_value(b, f, v);
			continue;
		}
		sz = pbjson_type_size(f->type);
		sm_buf_putc(b, '[');
		for (size_t k = 0; k < n; k++) {
			if (k != 0)
				sm_buf_putc(b, ',');
			pbjson_enc_value(b, f,
			    *(const char *const *)v + k * sz);
		}
		sm_buf_putc(b, ']');
	}
	sm_buf_putc(b, '}');
}

void
sm_pbjson_encode(const ProtobufCMessage *m, struct sm_buf *out)
{
	pbjson_enc_msg(out, m);
}

/* --- decoding ------------------------------------------------------------- */

struct pbjson_dec {
	const ProtobufCMessageDescriptor *top;
	struct sm_arena *a;
	struct sm_err *err;
	bool reals;                     /* every number parsed as a double */
	unsigned flags;                 /* SM_PBJSON_* (pbjson.h) */
	size_t plen;                    /* bytes used in path */
	char path[PBJSON_PATH_MAX];     /* "series[0].points[1].value" */
};

static int
pbjson_fail(struct pbjson_dec *dc, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fail with "invalid <type> JSON: field "<path>": <what>". */
static int
pbjson_fail(struct pbjson_dec *dc, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)sm_err_setv(dc->err, code, fmt, ap);
	va_end(ap);
	(void)sm_err_prefix(dc->err, "invalid %s JSON: field \"%s\"",
	    dc->top->name, dc->path);
	return (code);
}

static int
pbjson_oom(struct pbjson_dec *dc)
{
	if (sm_arena_budget(dc->a) == 0)
		return (pbjson_fail(dc, SM_ENOMEM, "out of memory"));
	return (pbjson_fail(dc, SM_ENOMEM, "out of memory (arena budget %zu "
	    "bytes)", sm_arena_budget(dc->a)));
}

/* Append ".key" (or "key" at the top) or "[i]" to the path; returns the
 * old length for pbjson_pop.  A path that does not fit is cut with "...". */
static size_t
pbjson_push(struct pbjson_dec *dc, const char *key, size_t idx)
{
	size_t old = dc->plen, room = sizeof(dc->path) - dc->plen;
	int n;

	if (key != NULL)
		n = snprintf(dc->path + dc->plen, room, "%s%s",
		    dc->plen != 0 ? "." : "", key);
	else
		n = snprintf(dc->path + dc->plen, room, "[%zu]", idx);
	if (n < 0 || (size_t)n >= room) {
		memcpy(dc->path + sizeof(dc->path) - 4, "...", 4);
		dc->plen = sizeof(dc->path) - 1;
	} else {
		dc->plen += (size_t)n;
	}
	return (old);
}

static void
pbjson_pop(struct pbjson_dec *dc, size_t old)
{
	dc->plen = old;
	dc->path[old] = '\0';
}

static const char *
pbjson_kind(const struct sm_json *v)
{
	switch (sm_json_kind(v)) {
	case SM_JSON_OBJECT:
		return ("an object");
	case SM_JSON_ARRAY:
		return ("an array");
	case SM_JSON_STRING:
		return ("a string");
	case SM_JSON_INTEGER:
	case SM_JSON_REAL:
		return ("a number");
	case SM_JSON_TRUE:
	case SM_JSON_FALSE:
		return ("a boolean");
	case SM_JSON_NULL:
		return ("null");
	case SM_JSON_NONE:
		break;
	}
	return ("?");
}

/*
 * Scan a JSON number (RFC 8259 grammar, nothing around it) in s[0..n).
 * Returns false on a syntax error.
 */
static bool
pbjson_scan_number(const char *s, size_t n)
{
	size_t i = 0;

	if (i < n && s[i] == '-')
		i++;
	if (i < n && s[i] == '0') {
		i++;
	} else if (i < n && s[i] >= '1' && s[i] <= '9') {
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	} else {
		return (false);
	}
	if (i < n && s[i] == '.') {
		if (++i >= n || s[i] < '0' || s[i] > '9')
			return (false);
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		if (++i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || s[i] < '0' || s[i] > '9')
			return (false);
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	return (i == n);
}

enum pbjson_int_rv {
	PBJSON_INT_OK,
	PBJSON_INT_SYNTAX,      /* not a JSON number */
	PBJSON_INT_FRACTION,    /* a number, but not an integer */
	PBJSON_INT_RANGE,       /* an integer beyond 64 bits */
};

/*
 * Exact integer value of the JSON number s[0..n) as a sign and a 64-bit
 * magnitude; "1e3", "2.50e1" and "-0.0" are integers, "1.5" is not.
 */
static enum pbjson_int_rv
pbjson_parse_int(const char *s, size_t n, bool *neg, uint64_t *mag)
{
	char dig[64];
	size_t nd = 0, i = 0;
	long point = 0, e = 0;
	bool seen_point = false, nz_dropped = false, eneg = false;
	uint64_t v = 0;

	if (!pbjson_scan_number(s, n))
		return (PBJSON_INT_SYNTAX);
	*neg = s[0] == '-';
	if (*neg)
		i++;
	/*
	 * Collect the significant digits (leading zeros dropped) and count
	 * in `point` how many of them stand before the decimal point (it
	 * goes negative for 0.00ddd).  Digits beyond dig[] can only be
	 * fractional here (see below), so only whether one is non-zero
	 * matters.
	 */
	for (; i < n && s[i] != 'e' && s[i] != 'E'; i++) {
		if (s[i] == '.') {
			seen_point = true;
			continue;
		}
		if (nd == 0 && s[i] == '0') {
			if (seen_point)
				point--;
			continue;
		}
		if (!seen_point)
			point++;
		if (nd < sizeof(dig))
			dig[nd++] = s[i];
		else
			nz_dropped |= s[i] != '0';
	}
	if (i < n) {
		if (s[++i] == '+' || s[i] == '-')
			eneg = s[i++] == '-';
		for (; i < n; i++) {
			if (e < 100000)
				e = e * 10 + (s[i] - '0');
		}
	}
	*mag = 0;
	if (nd == 0)
		return (PBJSON_INT_OK);
	point += eneg ? -e : e;
	/* 20 integer digits: at least 1e20 > UINT64_MAX. */
	if (point > 20)
		return (PBJSON_INT_RANGE);
	if (nz_dropped)
		return (PBJSON_INT_FRACTION);
	for (size_t k = point < 0 ? 0 : (size_t)point; k < nd; k++) {
		if (dig[k] != '0')
			return (PBJSON_INT_FRACTION);
	}
	for (long k = 0; k < point; k++) {
		unsigned d = (size_t)k < nd ? (unsigned)(dig[k] - '0') : 0;

		if (v > (UINT64_MAX - d) / 10)
			return (PBJSON_INT_RANGE);
		v = v * 10 + d;
	}
	*mag = v;
	return (PBJSON_INT_OK);
}

/* Check sign/magnitude against the range of t and store it at dst. */
static int
pbjson_store_int(struct pbjson_dec *dc, ProtobufCType t, bool neg,
    uint64_t mag, void *dst)
{
	uint64_t max;
	bool is_signed;

	switch (t) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_ENUM:
		is_signed = true;
		max = INT32_MAX;
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		is_signed = true;
		max = INT64_MAX;
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		is_signed = false;
		max = UINT32_MAX;
		break;
	default:
		is_signed = false;
		max = UINT64_MAX;
		break;
	}
	if (neg && mag != 0 && (!is_signed || mag > max + 1))
		goto range;
	if (!neg && mag > max)
		goto range;
	switch (t) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		*(int32_t *)dst = neg ? (int32_t)(0 - (int64_t)mag) :
		    (int32_t)mag;
		break;
	case PROTOBUF_C_TYPE_ENUM:
		*(int *)dst = neg ? (int)(0 - (int64_t)mag) : (int)mag;
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		*(int64_t *)dst = neg ? (int64_t)(0 - mag) : (int64_t)mag;
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		*(uint32_t *)dst = (uint32_t)mag;
		break;
	default:
		*(uint64_t *)dst = mag;
		break;
	}
	return (0);
range:
	return (pbjson_fail(dc, SM_EINVAL, "%s%" PRIu64 " is out of range "
	    "for %s", neg ? "-" : "", mag, pbjson_type_name(t)));
}

/* pbjson_dec_value: the value is one to ignore (an unknown enum name);
 * never returned by the decoder's entry points. */
#define PBJSON_SKIP 1

/* An integer-typed value (also enum numbers when `t` is ENUM). */
static int
pbjson_dec_int(struct pbjson_dec *dc, ProtobufCType t,
    const struct sm_json *v, bool strings, void *dst)
{
	const char *s;
	uint64_t mag;
	bool neg;
	double d;
	int64_t i;

	switch (sm_json_kind(v)) {
	case SM_JSON_INTEGER:
		i = sm_json_int(v);
		neg = i < 0;
		mag = neg ? 0 - (uint64_t)i : (uint64_t)i;
		return (pbjson_store_int(dc, t, neg, mag, dst));
	case SM_JSON_REAL:
		d = sm_json_real(v);
		if (d != trunc(d))
			return (pbjson_fail(dc, SM_EINVAL, "%.17g is not an "
			    "integer", d));
		if (fabs(d) >= 0x1p64)
			return (pbjson_fail(dc, SM_EINVAL, "%.17g is out of "
			    "range for %s", d, pbjson_type_name(t)));
		if (dc->reals && fabs(d) >= 0x1p53)
			return (pbjson_fail(dc, SM_EINVAL, "%.17g is too large "
			    "to be exact in a document with integers beyond "
			    "64 bits; send it as a string", d));
		return (pbjson_store_int(dc, t, signbit(d) != 0,
		    (uint64_t)fabs(d), dst));
	case SM_JSON_STRING:
		if (!strings)
			break;
		s = sm_json_str(v);
		switch (pbjson_parse_int(s, sm_json_strlen(v), &neg,
		    &mag)) {
		case PBJSON_INT_OK:
			return (pbjson_store_int(dc, t, neg, mag, dst));
		case PBJSON_INT_SYNTAX:
			return (pbjson_fail(dc, SM_EINVAL, "invalid %s "
			    "\"%.64s\"", pbjson_type_name(t), s));
		case PBJSON_INT_FRACTION:
			return (pbjson_fail(dc, SM_EINVAL, "\"%.64s\" is not "
			    "an integer", s));
		case PBJSON_INT_RANGE:
			return (pbjson_fail(dc, SM_EINVAL, "\"%.64s\" is out "
			    "of range for %s", s, pbjson_type_name(t)));
		}
		break;
	default:
		break;
	}
	return (pbjson_fail(dc, SM_EINVAL, "expected %s for %s, got %s",
	    strings ? "a number or a numeric string" : "a name or a number",
	    pbjson_type_name(t), pbjson_kind(v)));
}

static int
pbjson_dec_float(struct pbjson_dec *dc, ProtobufCType t,
    const struct sm_json *v, void *dst)
{
	const char *s;
	double d;

	switch (sm_json_kind(v)) {
	case SM_JSON_INTEGER:
		d = (double)sm_json_int(v);
		break;
	case SM_JSON_REAL:
		d = sm_json_real(v);
		break;
	case SM_JSON_STRING:
		s = sm_json_str(v);
		if (strcmp(s, "NaN") == 0) {
			d = NAN;
		} else if (strcmp(s, "Infinity") == 0) {
			d = INFINITY;
		} else if (strcmp(s, "-Infinity") == 0) {
			d = -INFINITY;
		} else if (pbjson_scan_number(s, sm_json_strlen(v))) {
			errno = 0;
			d = strtod(s, NULL);
			if (errno == ERANGE && isinf(d))
				return (pbjson_fail(dc, SM_EINVAL, "\"%.64s\" "
				    "is out of range for %s", s,
				    pbjson_type_name(t)));
		} else {
			return (pbjson_fail(dc, SM_EINVAL, "invalid %s "
			    "\"%.64s\"", pbjson_type_name(t), s));
		}
		break;
	default:
		return (pbjson_fail(dc, SM_EINVAL, "expected a number for %s, "
		    "got %s", pbjson_type_name(t), pbjson_kind(v)));
	}
	if (t == PROTOBUF_C_TYPE_DOUBLE) {
		*(double *)dst = d;
		return (0);
	}
	if (isfinite(d) && isinf((float)d))
		return (pbjson_fail(dc, SM_EINVAL, "%g is out of range for "
		    "float", d));
	*(float *)dst = (float)d;
	return (0);
}

/* OTLP's ids: a hex string (either case), "" for none. */
static int
pbjson_dec_hex(struct pbjson_dec *dc, const struct sm_json *v,
    ProtobufCBinaryData *dst)
{
	const char *s;
	size_t n;
	uint8_t *p;

	if (!sm_json_is_string(v))
		return (pbjson_fail(dc, SM_EINVAL, "expected a hex string for "
		    "an id, got %s", pbjson_kind(v)));
	s = sm_json_str(v);
	n = sm_json_strlen(v);
	dst->len = 0;
	dst->data = NULL;
	if (n == 0)
		return (0);
	if (n % 2 != 0 || (p = sm_arena_alloc(dc->a, n / 2)) == NULL ||
	    !sm_hex_decode(s, n / 2, p)) {
		if (n % 2 == 0 && p == NULL)
			return (pbjson_oom(dc));
		return (pbjson_fail(dc, SM_EINVAL, "invalid hex id \"%.64s\"",
		    s));
	}
	dst->data = p;
	dst->len = n / 2;
	return (0);
}

/*
 * Base64 as Go's protojson reads bytes: the URL alphabet when the text
 * has '-' or '_', else the standard one; padding is required to be
 * complete when the length is a multiple of 4 and absent otherwise.
 */
static int
pbjson_dec_bytes(struct pbjson_dec *dc, const struct sm_json *v,
    ProtobufCBinaryData *dst)
{
	const unsigned char *s;
	size_t n, out = 0;
	uint32_t acc = 0;
	unsigned bits = 0;
	bool url;
	uint8_t *p;

	if (!sm_json_is_string(v))
		return (pbjson_fail(dc, SM_EINVAL, "expected a base64 string "
		    "for bytes, got %s", pbjson_kind(v)));
	s = (const unsigned char *)sm_json_str(v);
	n = sm_json_strlen(v);
	url = memchr(s, '-', n) != NULL || memchr(s, '_', n) != NULL;
	if (n % 4 == 0 && n > 0 && s[n - 1] == '=') {
		n--;
		if (s[n - 1] == '=')
			n--;
	}
	if (n % 4 == 1)
		goto bad;
	dst->len = 0;
	dst->data = NULL;
	if (n == 0)
		return (0);
	if ((p = sm_arena_alloc(dc->a, n / 4 * 3 + 3)) == NULL)
		return (pbjson_oom(dc));
	for (size_t i = 0; i < n; i++) {
		int c = sm_base64_digit(s[i], url);

		if (c < 0)
			goto bad;
		acc = acc << 6 | (uint32_t)c;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			p[out++] = (uint8_t)(acc >> bits);
		}
	}
	dst->len = out;
	dst->data = p;
	return (0);
bad:
	return (pbjson_fail(dc, SM_EINVAL, "invalid base64 data"));
}

static int pbjson_dec_msg(struct pbjson_dec *dc,
    const ProtobufCMessageDescriptor *d, const struct sm_json *obj, int depth,
    ProtobufCMessage **out);

/* One (non-null) value of field f into dst. */
static int
pbjson_dec_value(struct pbjson_dec *dc, const ProtobufCFieldDescriptor *f,
    const struct sm_json *v, int depth, void *dst)
{
	const ProtobufCEnumValue *ev;
	char *s;

	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return (pbjson_dec_int(dc, f->type, v, true, dst));
	case PROTOBUF_C_TYPE_FLOAT:
	case PROTOBUF_C_TYPE_DOUBLE:
		return (pbjson_dec_float(dc, f->type, v, dst));
	case PROTOBUF_C_TYPE_BOOL:
		if (!sm_json_is_bool(v))
			return (pbjson_fail(dc, SM_EINVAL, "expected true or "
			    "false, got %s", pbjson_kind(v)));
		*(protobuf_c_boolean *)dst = sm_json_is_true(v);
		return (0);
	case PROTOBUF_C_TYPE_ENUM:
		if (!sm_json_is_string(v))
			return (pbjson_dec_int(dc, f->type, v, false, dst));
		ev = protobuf_c_enum_descriptor_get_value_by_name(
		    f->descriptor, sm_json_str(v));
		/* A name this build does not know (a newer client's value):
		 * ignored, as protojson's DiscardUnknown, which connect-go
		 * uses, ignores it -- the field keeps its default, a
		 * repeated field drops the element. */
		if (ev == NULL)
			return (PBJSON_SKIP);
		*(int *)dst = ev->value;
		return (0);
	case PROTOBUF_C_TYPE_STRING:
		if (!sm_json_is_string(v))
			return (pbjson_fail(dc, SM_EINVAL, "expected a string, "
			    "got %s", pbjson_kind(v)));
		s = sm_arena_strndup(dc->a, sm_json_str(v),
		    sm_json_strlen(v));
		if (s == NULL)
			return (pbjson_oom(dc));
		*(char **)dst = s;
		return (0);
	case PROTOBUF_C_TYPE_BYTES:
		if ((dc->flags & SM_PBJSON_HEX_IDS) && (strcmp(f->name,
		    "trace_id") == 0 || strcmp(f->name, "span_id") == 0 ||
		    strcmp(f->name, "profile_id") == 0))
			return (pbjson_dec_hex(dc, v, dst));
		return (pbjson_dec_bytes(dc, v, dst));
	case PROTOBUF_C_TYPE_MESSAGE:
		return (pbjson_dec_msg(dc, f->descriptor, v, depth + 1, dst));
	}
	return (pbjson_fail(dc, SM_EINVAL, "unsupported field type %d",
	    (int)f->type));
}

static int
pbjson_dec_repeated(struct pbjson_dec *dc, ProtobufCMessage *m,
    const ProtobufCFieldDescriptor *f, const struct sm_json *v, int depth)
{
	size_t n, k = 0, sz = pbjson_type_size(f->type), old;
	char *arr = NULL;
	int rv;

	if (!sm_json_is_array(v))
		return (pbjson_fail(dc, SM_EINVAL, "expected an array, got %s",
		    pbjson_kind(v)));
	n = sm_json_len(v);
	if (n != 0 && (arr = sm_arena_calloc(dc->a, n, sz)) == NULL)
		return (pbjson_oom(dc));
	for (size_t i = 0; i < n; i++) {
		const struct sm_json *e = sm_json_at(v, i);

		old = pbjson_push(dc, NULL, i);
		if (sm_json_is_null(e))
			rv = pbjson_fail(dc, SM_EINVAL, "null is not allowed "
			    "in a repeated field");
		else
			rv = pbjson_dec_value(dc, f, e, depth, arr + k * sz);
		if (rv != 0 && rv != PBJSON_SKIP)
			return (rv);
		k += rv == 0;
		pbjson_pop(dc, old);
	}
	*(size_t *)pbjson_at(m, f->quantifier_offset) = k;
	*(void **)pbjson_at(m, f->offset) = arr;
	return (0);
}

/* Decode v (not null) into field f of m, marking it present. */
static int
pbjson_dec_field(struct pbjson_dec *dc, ProtobufCMessage *m,
    const ProtobufCFieldDescriptor *f, const struct sm_json *v, int depth)
{
	int rv;

	if (f->label == PROTOBUF_C_LABEL_REPEATED)
		return (pbjson_dec_repeated(dc, m, f, v, depth));
	if ((rv = pbjson_dec_value(dc, f, v, depth,
	    pbjson_at(m, f->offset))) != 0)
		return (rv == PBJSON_SKIP ? 0 : rv);
	if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0)
		*(uint32_t *)pbjson_at(m, f->quantifier_offset) = f->id;
	else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
	    f->type != PROTOBUF_C_TYPE_STRING &&
	    f->type != PROTOBUF_C_TYPE_MESSAGE)
		*(protobuf_c_boolean *)pbjson_at(m, f->quantifier_offset) = 1;
	return (0);
}

/* proto2 only: every required field must be given (and not null). */
static int
pbjson_check_required(struct pbjson_dec *dc,
    const ProtobufCMessageDescriptor *d, const struct sm_json *obj)
{
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		struct sm_json_it it = SM_JSON_IT_INIT;
		const char *key;
		struct sm_json *v;
		bool found = false;

		if (f->label != PROTOBUF_C_LABEL_REQUIRED)
			continue;
		while (sm_json_next(obj, &it, &key, &v)) {
			if (!sm_json_is_null(v) &&
			    pbjson_find_field(d, key) == f)
				found = true;
		}
		if (!found) {
			size_t old = pbjson_push(dc, f->name, 0);
			int rv = pbjson_fail(dc, SM_EINVAL,
			    "required field is missing");

			pbjson_pop(dc, old);
			return (rv);
		}
	}
	return (0);
}

static int
pbjson_dec_msg(struct pbjson_dec *dc, const ProtobufCMessageDescriptor *d,
    const struct sm_json *obj, int depth, ProtobufCMessage **out)
{
	struct sm_json_it it = SM_JSON_IT_INIT;
	ProtobufCMessage *m;
	const char *key;
	struct sm_json *v;
	int rv;

	SM_ASSERT(d->magic == PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
	if (depth > PBJSON_DEPTH_MAX)
		return (pbjson_fail(dc, SM_EINVAL, "messages nested deeper "
		    "than %d", PBJSON_DEPTH_MAX));
	if (!sm_json_is_object(obj))
		return (pbjson_fail(dc, SM_EINVAL, "expected an object for "
		    "%s, got %s", d->name, pbjson_kind(obj)));
	if ((m = sm_arena_alloc(dc->a, d->sizeof_message)) == NULL)
		return (pbjson_oom(dc));
	d->message_init(m);
	while (sm_json_next(obj, &it, &key, &v)) {
		const ProtobufCFieldDescriptor *f = pbjson_find_field(d, key);
		size_t old;

		if (f == NULL || sm_json_is_null(v))
			continue;       /* unknown, or the default */
		old = pbjson_push(dc, key, 0);
		if ((rv = pbjson_dec_field(dc, m, f, v, depth)) != 0)
			return (rv);
		pbjson_pop(dc, old);
	}
	if ((rv = pbjson_check_required(dc, d, obj)) != 0)
		return (rv);
	*out = m;
	return (0);
}

int
sm_pbjson_decode(const ProtobufCMessageDescriptor *d, const char *json,
    size_t len, struct sm_arena *a, ProtobufCMessage **out,
    struct sm_err *err)
{
	return (sm_pbjson_decode_flags(d, json, len, 0, a, out, err));
}

int
sm_pbjson_decode_flags(const ProtobufCMessageDescriptor *d, const char *json,
    size_t len, unsigned flags, struct sm_arena *a, ProtobufCMessage **out,
    struct sm_err *err)
{
	struct pbjson_dec dc;
	struct sm_json *root;
	int rv;

	SM_ASSERT(d != NULL && d->magic == PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
	*out = NULL;
	memset(&dc, 0, sizeof(dc));
	/* An integer literal beyond int64 reads every number as a real (see
	 * the top). */
	if ((rv = sm_json_parse_wide(json, len, SM_JSON_ANY, &root, &dc.reals,
	    err)) != 0) {
		(void)sm_err_prefix(err, "invalid %s JSON", d->name);
		return (rv);
	}
	if (!sm_json_is_object(root)) {
		rv = sm_err_set(err, SM_EINVAL, "invalid %s JSON: the top "
		    "level is %s, not an object", d->name, pbjson_kind(root));
		sm_json_free(root);
		return (rv);
	}
	dc.top = d;
	dc.a = a;
	dc.err = err;
	dc.flags = flags;
	rv = pbjson_dec_msg(&dc, d, root, 1, out);
	sm_json_free(root);
	if (rv != 0)
		*out = NULL;
	return (rv);
}
