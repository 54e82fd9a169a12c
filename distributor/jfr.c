/*
 * jfr.c -- JFR recording -> write batch.  The contract is in jfr.h.
 *
 * Structure: a chunk source (raw slices or zlib inflation one chunk at a
 * time), a per-chunk reader (header, metadata, checkpoint chain, a sorted
 * (type, key) -> offset index of every constant, lazy decoding with
 * caches for methods, stacks and thread states), the event loop, and the
 * accumulation of (profile type, context) groups x stack nodes, turned
 * into batch series once the whole recording is read (the jfr_event label
 * is only known then).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "common/gz.h"
#include "common/hash.h"
#include "common/oatab.h"
#include "common/regex.h"

#include "jfr.h"
#include "multipart.h"

#define J_HDR 68
#define J_MAX_DEPTH 32          /* nested struct values */
#define J_MAX_ELEM_DEPTH 64     /* metadata element tree */
#define J_NONE UINT32_MAX

/* --- profile types ------------------------------------------------------- */

enum jt {
	JT_CPU, JT_WALL, JT_TLAB_IN, JT_TLAB_OUT, JT_LOCK, JT_PARK, JT_LIVE,
	JT_ALLOC_SAMPLE, JT_MALLOC, JT_N
};

static const struct jtype {
	const char *metric;
	const char *st[2];
	const char *su[2];
	uint32_t nv;
	const char *pt, *pu;
} jtypes[JT_N] = {
	[JT_CPU] = { "process_cpu", { "cpu" }, { "nanoseconds" }, 1,
	    "cpu", "nanoseconds" },
	[JT_WALL] = { "wall", { "wall" }, { "nanoseconds" }, 1,
	    "wall", "nanoseconds" },
	[JT_TLAB_IN] = { "memory", { "alloc_in_new_tlab_objects",
	    "alloc_in_new_tlab_bytes" }, { "count", "bytes" }, 2,
	    "space", "bytes" },
	[JT_TLAB_OUT] = { "memory", { "alloc_outside_tlab_objects",
	    "alloc_outside_tlab_bytes" }, { "count", "bytes" }, 2,
	    "space", "bytes" },
	[JT_LOCK] = { "mutex", { "contentions", "delay" },
	    { "count", "nanoseconds" }, 2, "mutex", "count" },
	[JT_PARK] = { "block", { "contentions", "delay" },
	    { "count", "nanoseconds" }, 2, "block", "count" },
	[JT_LIVE] = { "memory", { "live" }, { "count" }, 1,
	    "objects", "count" },
	[JT_ALLOC_SAMPLE] = { "memory", { "alloc_sample_objects",
	    "alloc_sample_bytes" }, { "count", "bytes" }, 2,
	    "space", "bytes" },
	[JT_MALLOC] = { "memory", { "malloc_objects", "malloc_bytes" },
	    { "count", "bytes" }, 2, "", "" },
};

/* Event classes we read. */
enum jev {
	EV_NONE, EV_EXEC, EV_WALL, EV_TLAB_IN, EV_TLAB_OUT, EV_ALLOC_SAMPLE,
	EV_LOCK, EV_PARK, EV_LIVE, EV_MALLOC, EV_SETTING
};

static const struct {
	const char *name;
	enum jev ev;
	const char *value;      /* the field carrying the second value */
} jevents[] = {
	{ "jdk.ExecutionSample", EV_EXEC, NULL },
	{ "profiler.WallClockSample", EV_WALL, "samples" },
	{ "jdk.ObjectAllocationInNewTLAB", EV_TLAB_IN, "tlabSize" },
	{ "jdk.ObjectAllocationOutsideTLAB", EV_TLAB_OUT, "allocationSize" },
	{ "jdk.ObjectAllocationSample", EV_ALLOC_SAMPLE, "weight" },
	{ "jdk.JavaMonitorEnter", EV_LOCK, "duration" },
	{ "jdk.ThreadPark", EV_PARK, "duration" },
	{ "profiler.LiveObject", EV_LIVE, NULL },
	{ "profiler.Malloc", EV_MALLOC, "size" },
	{ "jdk.ActiveSetting", EV_SETTING, NULL },
};

/* --- a u64 -> u32 map: dense pairs indexed by the one table (oatab.h) --- */

struct jmap {
	struct sm_oatab t;
	uint64_t *keys;
	uint32_t *vals;
	uint32_t n, kcap, vcap;
};

static void
jmap_fini(struct jmap *m)
{
	sm_oatab_fini(&m->t);
	sm_free(m->keys);
	sm_free(m->vals);
	memset(m, 0, sizeof(*m));
}

/* The pair index of `key`, or SM_OATAB_NONE with `it` where it would go. */
static uint32_t
jmap_find(const struct jmap *m, uint64_t key, struct sm_oatab_it *it)
{
	uint32_t idx;

	for (sm_oatab_probe(&m->t, sm_hash_u64(key), it);
	    (idx = sm_oatab_next(&m->t, it)) != SM_OATAB_NONE;)
		if (m->keys[idx] == key)
			return (idx);
	return (SM_OATAB_NONE);
}

static bool
jmap_get(const struct jmap *m, uint64_t key, uint32_t *val)
{
	struct sm_oatab_it it;
	uint32_t idx = jmap_find(m, key, &it);

	if (idx == SM_OATAB_NONE)
		return (false);
	*val = m->vals[idx];
	return (true);
}

static int
jmap_put(struct jmap *m, uint64_t key, uint32_t val)
{
	struct sm_oatab_it it;
	uint32_t idx = jmap_find(m, key, &it);

	if (idx != SM_OATAB_NONE) {
		m->vals[idx] = val;
		return (0);
	}
	if (SM_GROW(m->keys, m->kcap, m->n + 1, 64) != 0 ||
	    SM_GROW(m->vals, m->vcap, m->n + 1, 64) != 0)
		return (SM_ENOMEM);
	/* last, so a failure leaves the table as it was */
	if (sm_oatab_insert(&m->t, &it, m->n) != 0)
		return (SM_ENOMEM);
	m->keys[m->n] = key;
	m->vals[m->n] = val;
	m->n++;
	return (0);
}

/* --- reader state --------------------------------------------------------- */

enum jkind {
	K_STRUCT, K_INT, K_LONG, K_SHORT, K_CHAR, K_BYTE, K_BOOL, K_FLOAT,
	K_DOUBLE, K_STRING
};

struct jstr {
	const char *p;   /* NULL for a null string */
	size_t n;
};

struct jfield {
	const char *name;
	uint64_t type;
	uint32_t cls;    /* class index, J_NONE if unknown */
	bool cp, array;
};

struct jclass {
	uint64_t id;
	const char *name;
	enum jkind kind;
	enum jev ev;
	struct jfield *f;
	uint32_t nf;
	/* event field indexes (J_NONE when absent) */
	uint32_t f_stack, f_state, f_ctx, f_span_name, f_value, f_name,
	    f_svalue;
	/* constant field indexes, found once instead of per constant */
	uint32_t f_type, f_method, f_line, f_frames;
};

struct jpe {                 /* one constant */
	uint32_t cls;
	uint32_t off;
	uint64_t key;
};

struct jcur {
	const uint8_t *p;
	size_t pos, end;
};

struct jframe {
	uint64_t method;
	int64_t line;
};

struct jctx {                /* a LabelsSnapshot context */
	int64_t id;
	uint32_t off, n;         /* into lpairs */
};

struct jsstr {               /* a LabelsSnapshot string */
	int64_t id;
	const char *s;
	size_t n;
};

struct jgroup {
	uint8_t type;
	uint32_t ctx, span;      /* index + 1 into contexts / strings, 0 none */
	uint32_t series[2];
};

struct jmethod {             /* cached frame name (in the chunk arena) */
	const char *name;        /* NULL: skip the frame */
	size_t n;
	uint32_t fid;            /* batch frame id + 1, 0 until interned */
};

struct jr {
	const struct dist_jfr_in *in;
	struct dist_batch *b;
	struct sm_err *err;
	const struct dist_limits *lim;
	struct sm_regex_md *md;

	/* chunk */
	uint32_t chunk_no;
	uint64_t chunk_off;
	const uint8_t *buf;
	size_t len;
	bool comp;
	const char *what;
	struct sm_arena *ca;
	struct jclass *cls;
	uint32_t ncls, cls_cap;
	uint32_t c_string, c_stack, c_method, c_class, c_symbol, c_tstate;
	struct jpe *pe;
	uint32_t npe, pe_cap;
	struct jmap mcache, scache, tcache;
	struct jmethod *meths;
	uint32_t nmeths, meths_cap;
	struct jframe *fr;
	uint32_t fr_cap;
	uint32_t *ids;
	uint32_t ids_cap;

	/* recording */
	char *event;             /* last jdk.ActiveSetting "event" value */
	int64_t period;
	struct jctx *ctxs;
	uint32_t nctxs;
	int64_t *lpairs;
	uint32_t nlpairs;
	struct jsstr *lstrs;
	uint32_t nlstrs;
	bool have_labels;
	struct jgroup *groups;
	uint32_t ngroups, groups_cap;
	struct jmap gmap;        /* group key -> index */
	struct jmap smap;        /* (group, node) -> sample index */
	int64_t *vals;           /* 2 per sample */
	uint32_t *sgroup, *snode;
	uint32_t nsamp, samp_cap;
	char *tmp;
	size_t tmp_cap;
};

static int
jnomem(struct jr *R)
{
	(void)sm_err_set(R->err, SM_ENOMEM, "out of memory");
	return (SM_ENOMEM);
}

static int jbad(struct jr *R, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
jbad(struct jr *R, size_t pos, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)sm_err_set(R->err, SM_EMALFORMED, "invalid JFR: chunk %"
	    PRIu32 " at offset %" PRIu64 ": %s: %s", R->chunk_no,
	    R->chunk_off + (uint64_t)pos, R->what, msg);
	return (SM_EMALFORMED);
}

/* --- primitive reads ------------------------------------------------------ */

static int
rd_u8(struct jr *R, struct jcur *c, uint8_t *v)
{
	*v = 0;                 /* set on every path (GCC -O3 checks) */
	if (c->pos >= c->end)
		return (jbad(R, c->pos, "truncated (byte)"));
	*v = c->p[c->pos++];
	return (0);
}

static int
rd_fixed(struct jr *R, struct jcur *c, unsigned w, uint64_t *v)
{
	uint64_t x = 0;

	*v = 0;                 /* set on every path (GCC -O3 checks) */
	if (c->end - c->pos < w)
		return (jbad(R, c->pos, "truncated (%u-byte value)", w));
	for (unsigned i = 0; i < w; i++)
		x = x << 8 | c->p[c->pos + i];
	c->pos += w;
	*v = x;
	return (0);
}

/* LEB128 as JFR writes it: at most 9 bytes, the 9th holding 8 bits. */
static int
rd_var(struct jr *R, struct jcur *c, uint64_t *v)
{
	uint64_t x = 0;

	*v = 0;                 /* set on every path (GCC -O3 checks) */
	if (c->pos < c->end && c->p[c->pos] < 0x80) {    /* most values */
		*v = c->p[c->pos++];
		return (0);
	}

	for (unsigned i = 0; i < 9; i++) {
		uint8_t b;

		if (c->pos >= c->end)
			return (jbad(R, c->pos, "truncated varint"));
		b = c->p[c->pos++];
		if (i == 8) {
			x |= (uint64_t)b << 56;
			break;
		}
		x |= (uint64_t)(b & 0x7f) << (7 * i);
		if (b < 0x80)
			break;
	}
	*v = x;
	return (0);
}

/* A long (or int/short/char: width w) in the chunk's encoding. */
static inline int
rd_num(struct jr *R, struct jcur *c, unsigned w, uint64_t *v)
{
	return (R->comp ? rd_var(R, c, v) : rd_fixed(R, c, w, v));
}

static int
rd_long(struct jr *R, struct jcur *c, uint64_t *v)
{
	return (rd_num(R, c, 8, v));
}

/* An int used as a count or size: at most the bytes left (a count of
 * elements that each take >= 1 byte) unless `any`. */
static int
rd_count(struct jr *R, struct jcur *c, const char *what, uint64_t *v)
{
	size_t at = c->pos;
	int rv;

	if ((rv = rd_num(R, c, 4, v)) != 0)
		return (rv);
	if (*v > c->end - c->pos)
		return (jbad(R, at, "%s %" PRIu64 " exceeds the %zu bytes left",
		    what, *v, c->end - c->pos));
	return (0);
}

static int pool_find(struct jr *R, uint32_t cls, uint64_t key,
    uint32_t *off);

/* Scratch space, reused. */
static char *
jtmp(struct jr *R, size_t n)
{
	if (n > R->tmp_cap) {
		char *p = sm_realloc(R->tmp, n);

		if (p == NULL)
			return (NULL);
		R->tmp = p;
		R->tmp_cap = n;
	}
	return (R->tmp);
}

static int
rd_string_depth(struct jr *R, struct jcur *c, struct jstr *s, int depth)
{
	uint64_t n, v;
	uint8_t enc = 0;
	size_t at = c->pos;
	char *o;
	int rv;

	if ((rv = rd_u8(R, c, &enc)) != 0)
		return (rv);
	if (s != NULL) {
		s->p = NULL;
		s->n = 0;
	}
	switch (enc) {
	case 0:
		return (0);
	case 1:
		if (s != NULL)
			s->p = "";
		return (0);
	case 2: {
		struct jcur pc;
		uint32_t off;

		if ((rv = rd_long(R, c, &v)) != 0)
			return (rv);
		if (s == NULL)
			return (0);
		if (depth > 0 || R->c_string == J_NONE ||
		    pool_find(R, R->c_string, v, &off) != 0)
			return (jbad(R, at, "string constant %" PRIu64
			    " not found", v));
		pc = (struct jcur){ R->buf, off, R->len };
		return (rd_string_depth(R, &pc, s, depth + 1));
	}
	case 3:
	case 5:
		if ((rv = rd_count(R, c, "string length", &n)) != 0)
			return (rv);
		if (s != NULL && enc == 3) {
			s->p = (const char *)c->p + c->pos;
			s->n = (size_t)n;
		} else if (s != NULL) {
			/* Latin-1 -> UTF-8 */
			size_t k = 0;

			if ((o = sm_arena_alloc(R->ca, 2 * (size_t)n + 1)) ==
			    NULL)
				return (jnomem(R));
			for (size_t i = 0; i < n; i++) {
				uint8_t ch = c->p[c->pos + i];

				if (ch < 0x80) {
					o[k++] = (char)ch;
				} else {
					o[k++] = (char)(0xc0 | ch >> 6);
					o[k++] = (char)(0x80 | (ch & 0x3f));
				}
			}
			s->p = o;
			s->n = k;
		}
		c->pos += (size_t)n;
		return (0);
	case 4: {
		size_t k = 0;

		if ((rv = rd_count(R, c, "string length", &n)) != 0)
			return (rv);
		o = NULL;
		if (s != NULL && (o = sm_arena_alloc(R->ca, 3 * (size_t)n +
		    1)) == NULL)
			return (jnomem(R));
		for (uint64_t i = 0; i < n; i++) {
			if ((rv = rd_num(R, c, 2, &v)) != 0)
				return (rv);
			if (o == NULL)
				continue;
			v &= 0xffff;
			if (v < 0x80) {
				o[k++] = (char)v;
			} else if (v < 0x800) {
				o[k++] = (char)(0xc0 | v >> 6);
				o[k++] = (char)(0x80 | (v & 0x3f));
			} else {
				o[k++] = (char)(0xe0 | v >> 12);
				o[k++] = (char)(0x80 | ((v >> 6) & 0x3f));
				o[k++] = (char)(0x80 | (v & 0x3f));
			}
		}
		if (s != NULL) {
			s->p = o;
			s->n = k;
		}
		return (0);
	}
	default:
		return (jbad(R, at, "unknown string encoding %u", enc));
	}
}

static int
rd_string(struct jr *R, struct jcur *c, struct jstr *s)
{
	return (rd_string_depth(R, c, s, 0));
}

/* --- values --------------------------------------------------------------- */

static int skip_value(struct jr *R, struct jcur *c, uint32_t ci, int depth);

static int
skip_one(struct jr *R, struct jcur *c, const struct jfield *f, int depth)
{
	uint64_t v;

	if (f->cp)
		return (rd_long(R, c, &v));
	if (f->cls == J_NONE)
		return (jbad(R, c->pos, "field %s has unknown type %" PRIu64,
		    f->name, f->type));
	return (skip_value(R, c, f->cls, depth));
}

static int
skip_field(struct jr *R, struct jcur *c, const struct jfield *f, int depth)
{
	uint64_t n = 1;
	int rv;

	if (f->array && (rv = rd_count(R, c, "array length", &n)) != 0) {
		/* zero-size elements are possible: bound by bytes anyway */
		return (rv);
	}
	for (uint64_t i = 0; i < n; i++) {
		if ((rv = skip_one(R, c, f, depth)) != 0)
			return (rv);
	}
	return (0);
}

static int
skip_value(struct jr *R, struct jcur *c, uint32_t ci, int depth)
{
	const struct jclass *k = &R->cls[ci];
	uint64_t v;
	uint8_t b;
	int rv;

	switch (k->kind) {
	case K_INT:
	case K_FLOAT:
		return (k->kind == K_FLOAT ? rd_fixed(R, c, 4, &v) :
		    rd_num(R, c, 4, &v));
	case K_LONG:
		return (rd_num(R, c, 8, &v));
	case K_SHORT:
	case K_CHAR:
		return (rd_num(R, c, 2, &v));
	case K_BYTE:
	case K_BOOL:
		return (rd_u8(R, c, &b));
	case K_DOUBLE:
		return (rd_fixed(R, c, 8, &v));
	case K_STRING:
		return (rd_string(R, c, NULL));
	case K_STRUCT:
		break;
	}
	if (depth >= J_MAX_DEPTH)
		return (jbad(R, c->pos, "values nested deeper than %d (type "
		    "%s)", J_MAX_DEPTH, k->name));
	for (uint32_t i = 0; i < k->nf; i++) {
		if ((rv = skip_field(R, c, &k->f[i], depth + 1)) != 0)
			return (rv);
	}
	return (0);
}

/* An integral field's value (0 for other kinds, which are skipped). */
static int
rd_intfield(struct jr *R, struct jcur *c, const struct jfield *f,
    uint64_t *v)
{
	uint8_t b = 0;

	*v = 0;
	if (f->cp || f->array || f->cls == J_NONE)
		return (skip_field(R, c, f, 1));
	switch (R->cls[f->cls].kind) {
	case K_INT:
		return (rd_num(R, c, 4, v));
	case K_LONG:
		return (rd_num(R, c, 8, v));
	case K_SHORT:
	case K_CHAR:
		return (rd_num(R, c, 2, v));
	case K_BYTE:
	case K_BOOL: {
		int rv = rd_u8(R, c, &b);

		*v = b;
		return (rv);
	}
	default:
		return (skip_field(R, c, f, 1));
	}
}

static int rd_strfield(struct jr *R, struct jcur *c, const struct jfield *f,
    struct jstr *s);

/*
 * The string held by constant `key` of class `cls`: a String constant, or
 * a struct with a "string" field (jdk.types.Symbol).  NULL when absent.
 */
static int
pool_string(struct jr *R, uint32_t cls, uint64_t key, struct jstr *s)
{
	const struct jclass *k = &R->cls[cls];
	struct jcur pc;
	uint32_t off;
	int rv;

	s->p = NULL;
	s->n = 0;
	if (pool_find(R, cls, key, &off) != 0)
		return (0);
	pc = (struct jcur){ R->buf, off, R->len };
	if (k->kind == K_STRING)
		return (rd_string(R, &pc, s));
	if (k->kind != K_STRUCT)
		return (0);
	for (uint32_t i = 0; i < k->nf; i++) {
		const struct jfield *f = &k->f[i];

		/* a reference back into the same pool would loop */
		if (strcmp(f->name, "string") == 0 &&
		    !(f->cp && f->cls == cls))
			rv = rd_strfield(R, &pc, f, s);
		else
			rv = skip_field(R, &pc, f, 1);
		if (rv != 0)
			return (rv);
	}
	return (0);
}

/* A string field: inline, or a reference to a String or Symbol constant. */
static int
rd_strfield(struct jr *R, struct jcur *c, const struct jfield *f,
    struct jstr *s)
{
	uint64_t key;
	int rv;

	s->p = NULL;
	s->n = 0;
	if (f->array || f->cls == J_NONE)
		return (skip_field(R, c, f, 1));
	if (f->cp) {
		if ((rv = rd_long(R, c, &key)) != 0)
			return (rv);
		return (pool_string(R, f->cls, key, s));
	}
	if (R->cls[f->cls].kind == K_STRING)
		return (rd_string(R, c, s));
	return (skip_field(R, c, f, 1));
}

/* --- metadata ------------------------------------------------------------- */

static int
cls_cmp(const void *x, const void *y)
{
	const struct jclass *a = x, *b = y;

	return (SM_CMP(a->id, b->id));
}

static uint32_t
cls_find(const struct jr *R, uint64_t id)
{
	size_t lo;

	SM_LOWER_BOUND(lo, R->ncls, mid, R->cls[mid].id < id);
	return (lo < R->ncls && R->cls[lo].id == id ? (uint32_t)lo : J_NONE);
}

struct jmeta {
	struct jstr *str;
	uint64_t nstr;
};

static int
meta_str(struct jr *R, struct jcur *c, const struct jmeta *m,
    const char **out)
{
	uint64_t i;
	size_t at = c->pos;
	int rv;

	if ((rv = rd_num(R, c, 4, &i)) != 0)
		return (rv);
	if (i >= m->nstr)
		return (jbad(R, at, "string index %" PRIu64 " out of range "
		    "(%" PRIu64 " strings)", i, m->nstr));
	*out = m->str[i].p != NULL ? sm_arena_strndup(R->ca, m->str[i].p,
	    m->str[i].n) : "";
	if (*out == NULL)
		return (jnomem(R));
	return (0);
}

static int
parse_u64(const char *s, uint64_t *v)
{
	uint64_t x = 0;

	if (*s == '\0')
		return (-1);
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || x > (UINT64_MAX - 9) / 10)
			return (-1);
		x = x * 10 + (uint64_t)(*s - '0');
	}
	*v = x;
	return (0);
}

/*
 * One element and its children.  `cls` is the class being defined when
 * this element is one of its direct children (a "field"), else NULL.
 */
static int
meta_elem(struct jr *R, struct jcur *c, const struct jmeta *m, int depth,
    struct jclass *parent)
{
	const char *name, *k, *v;
	const char *a_id = NULL, *a_name = NULL, *a_class = NULL;
	bool a_cp = false, a_array = false;
	uint64_t nattr, nchild;
	struct jclass *me = NULL;
	size_t at = c->pos;
	int rv;

	if (depth > J_MAX_ELEM_DEPTH)
		return (jbad(R, at, "metadata nested deeper than %d",
		    J_MAX_ELEM_DEPTH));
	if ((rv = meta_str(R, c, m, &name)) != 0 ||
	    (rv = rd_count(R, c, "attribute count", &nattr)) != 0)
		return (rv);
	for (uint64_t i = 0; i < nattr; i++) {
		if ((rv = meta_str(R, c, m, &k)) != 0 ||
		    (rv = meta_str(R, c, m, &v)) != 0)
			return (rv);
		if (strcmp(k, "id") == 0)
			a_id = v;
		else if (strcmp(k, "name") == 0)
			a_name = v;
		else if (strcmp(k, "class") == 0)
			a_class = v;
		else if (strcmp(k, "constantPool") == 0)
			a_cp = strcmp(v, "true") == 0;
		else if (strcmp(k, "dimension") == 0)
			a_array = strcmp(v, "0") != 0;
	}
	if ((rv = rd_count(R, c, "child count", &nchild)) != 0)
		return (rv);
	if (strcmp(name, "class") == 0) {
		uint64_t id;

		if (a_id == NULL || a_name == NULL || parse_u64(a_id, &id) != 0)
			return (jbad(R, at, "class element without a valid id "
			    "and name"));
		if (SM_GROW(R->cls, R->cls_cap, R->ncls + 1, 16) != 0)
			return (jnomem(R));
		me = &R->cls[R->ncls++];
		memset(me, 0, sizeof(*me));
		me->id = id;
		me->name = a_name;
		if (nchild > 0 && (me->f = sm_arena_calloc(R->ca, nchild,
		    sizeof(*me->f))) == NULL)
			return (jnomem(R));
	} else if (strcmp(name, "field") == 0 && parent != NULL) {
		struct jfield *f = &parent->f[parent->nf++];

		if (a_name == NULL || a_class == NULL ||
		    parse_u64(a_class, &f->type) != 0)
			return (jbad(R, at, "field element of class %s without "
			    "a valid name and class", parent->name));
		f->name = a_name;
		f->cp = a_cp;
		f->array = a_array;
	}
	for (uint64_t i = 0; i < nchild; i++) {
		if (me != NULL) {
			/* R->cls may move: address the class by index; a
			 * class nested in a class is refused. */
			uint32_t mine = R->ncls - 1;

			if ((rv = meta_elem(R, c, m, depth + 1,
			    &R->cls[mine])) != 0)
				return (rv);
			if (R->ncls - 1 != mine)
				return (jbad(R, at, "class element nested in "
				    "class %s", R->cls[mine].name));
		} else if ((rv = meta_elem(R, c, m, depth + 1, NULL)) != 0) {
			return (rv);
		}
	}
	return (0);
}

static enum jkind
kind_of(const char *n)
{
	static const struct {
		const char *n;
		enum jkind k;
	} t[] = {
		{ "int", K_INT }, { "long", K_LONG }, { "short", K_SHORT },
		{ "char", K_CHAR }, { "byte", K_BYTE }, { "boolean", K_BOOL },
		{ "float", K_FLOAT }, { "double", K_DOUBLE },
		{ "java.lang.String", K_STRING },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(t); i++) {
		if (strcmp(n, t[i].n) == 0)
			return (t[i].k);
	}
	return (K_STRUCT);
}

static uint32_t
field_idx(const struct jclass *k, const char *name)
{
	for (uint32_t i = 0; i < k->nf; i++) {
		if (strcmp(k->f[i].name, name) == 0)
			return (i);
	}
	return (J_NONE);
}

static uint32_t
cls_by_name(const struct jr *R, const char *name)
{
	for (uint32_t i = 0; i < R->ncls; i++) {
		if (strcmp(R->cls[i].name, name) == 0)
			return (i);
	}
	return (J_NONE);
}

static int
meta_read(struct jr *R, uint64_t off)
{
	struct jcur c = { R->buf, 0, R->len };
	struct jmeta m;
	uint64_t size, v, n;
	int rv;

	R->what = "metadata";
	if (off < J_HDR || off >= R->len)
		return (jbad(R, 0, "metadata offset %" PRIu64 " outside the "
		    "chunk (%zu bytes)", off, R->len));
	c.pos = (size_t)off;
	if ((rv = rd_num(R, &c, 4, &size)) != 0)
		return (rv);
	if (size > R->len - off || size < 2)
		return (jbad(R, (size_t)off, "record size %" PRIu64 " invalid",
		    size));
	c.end = (size_t)(off + size);
	if ((rv = rd_long(R, &c, &v)) != 0)
		return (rv);
	if (v != 0)
		return (jbad(R, (size_t)off, "record type %" PRIu64 " where "
		    "metadata (0) was expected", v));
	for (int i = 0; i < 3; i++) {   /* start, duration, metadata id */
		if ((rv = rd_long(R, &c, &v)) != 0)
			return (rv);
	}
	if ((rv = rd_count(R, &c, "string count", &n)) != 0)
		return (rv);
	m.nstr = n;
	if ((m.str = sm_arena_calloc(R->ca, n + 1, sizeof(*m.str))) == NULL)
		return (jnomem(R));
	for (uint64_t i = 0; i < n; i++) {
		if ((rv = rd_string(R, &c, &m.str[i])) != 0)
			return (rv);
	}
	if ((rv = meta_elem(R, &c, &m, 0, NULL)) != 0)
		return (rv);
	if (R->ncls == 0)
		return (jbad(R, (size_t)off, "no classes"));
	qsort(R->cls, R->ncls, sizeof(*R->cls), cls_cmp);
	for (uint32_t i = 0; i + 1 < R->ncls; i++) {
		if (R->cls[i].id == R->cls[i + 1].id)
			return (jbad(R, (size_t)off, "class id %" PRIu64
			    " defined twice", R->cls[i].id));
	}
	for (uint32_t i = 0; i < R->ncls; i++) {
		struct jclass *k = &R->cls[i];

		k->kind = kind_of(k->name);
		for (uint32_t j = 0; j < k->nf; j++)
			k->f[j].cls = cls_find(R, k->f[j].type);
		k->ev = EV_NONE;
		k->f_stack = field_idx(k, "stackTrace");
		k->f_state = field_idx(k, "state");
		k->f_ctx = field_idx(k, "contextId");
		k->f_span_name = field_idx(k, "spanName");
		k->f_value = J_NONE;
		k->f_name = field_idx(k, "name");
		k->f_svalue = field_idx(k, "value");
		k->f_type = field_idx(k, "type");
		k->f_method = field_idx(k, "method");
		k->f_line = field_idx(k, "lineNumber");
		k->f_frames = field_idx(k, "frames");
		for (size_t e = 0; e < SM_ARRAY_LEN(jevents); e++) {
			if (strcmp(k->name, jevents[e].name) != 0)
				continue;
			k->ev = jevents[e].ev;
			if (jevents[e].value != NULL)
				k->f_value = field_idx(k, jevents[e].value);
		}
	}
	R->c_string = cls_by_name(R, "java.lang.String");
	R->c_stack = cls_by_name(R, "jdk.types.StackTrace");
	R->c_method = cls_by_name(R, "jdk.types.Method");
	R->c_class = cls_by_name(R, "java.lang.Class");
	R->c_symbol = cls_by_name(R, "jdk.types.Symbol");
	R->c_tstate = cls_by_name(R, "jdk.types.ThreadState");
	return (0);
}

/* --- constant pools ------------------------------------------------------- */

static int
pe_cmp(const void *x, const void *y)
{
	const struct jpe *a = x, *b = y;
	int c;

	if ((c = SM_CMP(a->cls, b->cls)) != 0 ||
	    (c = SM_CMP(a->key, b->key)) != 0)
		return (c);
	return (SM_CMP(a->off, b->off));
}

static int
pool_find(struct jr *R, uint32_t cls, uint64_t key, uint32_t *off)
{
	uint32_t lo;

	SM_LOWER_BOUND(lo, R->npe, mid, R->pe[mid].cls < cls ||
	    (R->pe[mid].cls == cls && R->pe[mid].key < key));
	if (lo < R->npe && R->pe[lo].cls == cls && R->pe[lo].key == key) {
		*off = R->pe[lo].off;
		return (0);
	}
	return (SM_ENOTFOUND);
}

static int
pools_read(struct jr *R, uint64_t off)
{
	uint64_t pos = off, limit = R->len;   /* a region must end by limit */
	int rv;

	R->what = "constant pool";
	for (;;) {
		struct jcur c = { R->buf, 0, R->len };
		uint64_t size, v, delta, npools;
		uint8_t mask;

		if (pos < J_HDR || pos >= limit)
			return (jbad(R, 0, "checkpoint offset %" PRIu64
			    " outside the chunk or overlapping", pos));
		c.pos = (size_t)pos;
		if ((rv = rd_num(R, &c, 4, &size)) != 0)
			return (rv);
		if (size < 2 || size > limit - pos)
			return (jbad(R, (size_t)pos, "checkpoint size %" PRIu64
			    " invalid", size));
		c.end = (size_t)(pos + size);
		if ((rv = rd_long(R, &c, &v)) != 0)
			return (rv);
		if (v != 1)
			return (jbad(R, (size_t)pos, "record type %" PRIu64
			    " where a checkpoint (1) was expected", v));
		if ((rv = rd_long(R, &c, &v)) != 0 ||
		    (rv = rd_long(R, &c, &v)) != 0 ||
		    (rv = rd_long(R, &c, &delta)) != 0 ||
		    (rv = rd_u8(R, &c, &mask)) != 0 ||
		    (rv = rd_count(R, &c, "pool count", &npools)) != 0)
			return (rv);
		for (uint64_t i = 0; i < npools; i++) {
			uint64_t type, count;
			size_t at = c.pos;
			uint32_t ci;

			if ((rv = rd_long(R, &c, &type)) != 0 ||
			    (rv = rd_count(R, &c, "constant count", &count)) !=
			    0)
				return (rv);
			if ((ci = cls_find(R, type)) == J_NONE)
				return (jbad(R, at, "constant pool of unknown "
				    "type %" PRIu64, type));
			for (uint64_t j = 0; j < count; j++) {
				uint64_t key;

				if ((rv = rd_long(R, &c, &key)) != 0)
					return (rv);
				if (SM_GROW(R->pe, R->pe_cap, R->npe + 1,
				    16) != 0)
					return (jnomem(R));
				R->pe[R->npe++] = (struct jpe){ ci,
				    (uint32_t)c.pos, key };
				if ((rv = skip_value(R, &c, ci, 0)) != 0)
					return (rv);
			}
		}
		if (delta == 0)
			break;
		/* The chain goes back to earlier checkpoints, never
		 * overlapping: linear work whatever the input. */
		if ((int64_t)delta >= 0 || (uint64_t)(-(int64_t)delta) > pos)
			return (jbad(R, (size_t)pos, "checkpoint delta %" PRId64
			    " does not point back into the chunk",
			    (int64_t)delta));
		limit = pos;
		pos -= (uint64_t)(-(int64_t)delta);
	}
	if (R->npe > 1)
		qsort(R->pe, R->npe, sizeof(*R->pe), pe_cmp);
	/* Keep the last definition of a duplicated key. */
	if (R->npe > 1) {
		uint32_t w = 0;

		for (uint32_t i = 0; i < R->npe; i++) {
			if (w > 0 && R->pe[w - 1].cls == R->pe[i].cls &&
			    R->pe[w - 1].key == R->pe[i].key)
				R->pe[w - 1] = R->pe[i];
			else
				R->pe[w++] = R->pe[i];
		}
		R->npe = w;
	}
	return (0);
}

/* --- symbols, methods, stacks -------------------------------------------- */

static pthread_once_t jre_once = PTHREAD_ONCE_INIT;
static struct sm_regex *jre[5];
static const char *const jre_src[5] = {
	"^(jdk/internal/reflect/GeneratedMethodAccessor)(\\d+)$",
	"^(.+\\$\\$Lambda)(\\$?\\d*[./](0x)?[\\da-f]+|\\d+)$",
	"^(\\.?/tmp/)?(libzstd-jni-\\d+\\.\\d+\\.\\d+-)(\\d+)(\\.so)"
	    "( \\(deleted\\))?$",
	"^(\\.?/tmp/)?(lib)?(amazonCorrettoCryptoProvider)"
	    "(NativeLibraries\\.)?([0-9a-f]{16})"
	    "(/libcrypto|/libamazonCorrettoCryptoProvider)?(\\.so)"
	    "( \\(deleted\\))?$",
	"^(\\.?/tmp/)?(libasyncProfiler)-(linux-arm64|linux-musl-x64|"
	    "linux-x64|macos)-(17b9a1d8156277a98ccc871afa9a8f69215f92)(\\.so)"
	    "( \\(deleted\\))?$",
};
static const char *const jre_hint[5] = { "GeneratedMethodAccessor",
	"$$Lambda", "libzstd-jni-", "amazonCorrettoCryptoProvider",
	"libasyncProfiler" };
static const char *const jre_fixed[5] = { NULL, NULL, "libzstd-jni-_.so",
	"libamazonCorrettoCryptoProvider_.so", "libasyncProfiler-_.so" };

static void
jre_init(void)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(jre); i++) {
		struct sm_err e;

		/* Constant patterns: only out of memory at start fails. */
		SM_ASSERT(sm_regex_compile(jre_src[i], SM_RE_DOLLAR_ENDONLY,
		    &jre[i], &e) == 0);
	}
}

/*
 * Merge JVM-generated names in symbol s (Pyroscope's jfr-parser rules,
 * applied in order).  The result is in the chunk arena or is `s`.
 */
static int
merge_generated(struct jr *R, struct jstr *s)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(jre); i++) {
		struct sm_err e;
		size_t g0, g1, n;
		char *o;

		if (s->n < strlen(jre_hint[i]) ||
		    memmem(s->p, s->n, jre_hint[i], strlen(jre_hint[i])) ==
		    NULL)
			continue;
		if (sm_regex_match(jre[i], R->md, s->p, s->n, &e) != 1)
			continue;
		if (jre_fixed[i] != NULL) {
			s->p = jre_fixed[i];
			s->n = strlen(jre_fixed[i]);
			continue;
		}
		if (!sm_regex_group(R->md, 1, &g0, &g1))
			continue;
		n = g1 - g0;            /* group 1, then "_" */
		if ((o = sm_arena_alloc(R->ca, n + 2)) == NULL)
			return (jnomem(R));
		memcpy(o, s->p + g0, n);
		o[n] = '_';
		o[n + 1] = '\0';
		s->p = o;
		s->n = n + 1;
	}
	return (0);
}

/* The (merged) symbol string of constant `key` ("" if none). */
static int
symbol_str(struct jr *R, uint32_t cls, uint64_t key, struct jstr *s)
{
	int rv;

	if ((rv = pool_string(R, cls, key, s)) != 0)
		return (rv);
	if (s->p == NULL) {
		s->p = "";
		s->n = 0;
	}
	return (merge_generated(R, s));
}

/*
 * The frame name of method constant `key`: *m->name NULL when the method
 * or its class is unknown (the frame is dropped).
 */
static int
method_name(struct jr *R, uint64_t key, struct jmethod **out)
{
	const struct jclass *k;
	struct jmethod mm = { NULL, 0, 0 };
	uint64_t ckey = 0, nkey = 0, ckname = 0;
	uint32_t off, idx, nclass = J_NONE, nsym = J_NONE, csym = J_NONE;
	bool have_c = false, have_n = false, have_cn = false;
	struct jstr cs, ms;
	struct jcur c;
	int rv;

	if (jmap_get(&R->mcache, key, &idx)) {
		*out = &R->meths[idx];
		return (0);
	}
	if (R->c_method != J_NONE && pool_find(R, R->c_method, key, &off) ==
	    0) {
		k = &R->cls[R->c_method];
		c = (struct jcur){ R->buf, off, R->len };
		for (uint32_t i = 0; i < k->nf; i++) {
			const struct jfield *f = &k->f[i];

			if (f->cp && !f->array && i == k->f_type) {
				rv = rd_long(R, &c, &ckey);
				have_c = true;
				nclass = f->cls;
			} else if (f->cp && !f->array && i == k->f_name) {
				rv = rd_long(R, &c, &nkey);
				have_n = true;
				nsym = f->cls;
			} else {
				rv = skip_field(R, &c, f, 1);
			}
			if (rv != 0)
				return (rv);
		}
	}
	if (have_c && nclass != J_NONE &&
	    pool_find(R, nclass, ckey, &off) == 0) {
		k = &R->cls[nclass];
		c = (struct jcur){ R->buf, off, R->len };
		for (uint32_t i = 0; i < k->nf; i++) {
			const struct jfield *f = &k->f[i];

			if (f->cp && !f->array && i == k->f_name) {
				rv = rd_long(R, &c, &ckname);
				have_cn = true;
				csym = f->cls;
			} else {
				rv = skip_field(R, &c, f, 1);
			}
			if (rv != 0)
				return (rv);
		}
		/* the class exists: the frame is kept */
		cs = (struct jstr){ "", 0 };
		ms = (struct jstr){ "", 0 };
		if ((have_cn && csym != J_NONE &&
		    (rv = symbol_str(R, csym, ckname, &cs)) != 0) ||
		    (have_n && nsym != J_NONE &&
		    (rv = symbol_str(R, nsym, nkey, &ms)) != 0))
			return (rv);
		char *o = sm_arena_alloc(R->ca, cs.n + ms.n + 2);

		if (o == NULL)
			return (jnomem(R));
		memcpy(o, cs.p, cs.n);
		o[cs.n] = '.';
		memcpy(o + cs.n + 1, ms.p, ms.n);
		o[cs.n + ms.n + 1] = '\0';
		mm.name = o;
		mm.n = cs.n + ms.n + 1;
	}
	if (SM_GROW(R->meths, R->meths_cap, R->nmeths + 1, 16) != 0 ||
	    jmap_put(&R->mcache, key, R->nmeths) != 0)
		return (jnomem(R));
	R->meths[R->nmeths] = mm;
	*out = &R->meths[R->nmeths++];
	return (0);
}

/* Frames of the StackTrace constant at `off` into R->fr (leaf first). */
static int
stack_frames(struct jr *R, uint32_t off, uint32_t *nfr)
{
	const struct jclass *k = &R->cls[R->c_stack];
	struct jcur c = { R->buf, off, R->len };
	int rv;

	*nfr = 0;
	for (uint32_t i = 0; i < k->nf; i++) {
		const struct jfield *f = &k->f[i];
		const struct jclass *fk;
		uint64_t n;

		if (i != k->f_frames || !f->array || f->cp ||
		    f->cls == J_NONE || R->cls[f->cls].kind != K_STRUCT) {
			if ((rv = skip_field(R, &c, f, 1)) != 0)
				return (rv);
			continue;
		}
		fk = &R->cls[f->cls];
		if ((rv = rd_count(R, &c, "frame count", &n)) != 0)
			return (rv);
		if (SM_GROW(R->fr, R->fr_cap, *nfr + (uint32_t)n, 16) != 0)
			return (jnomem(R));
		for (uint64_t j = 0; j < n; j++) {
			struct jframe fr = { 0, 0 };
			bool have_m = false;

			for (uint32_t q = 0; q < fk->nf; q++) {
				const struct jfield *ff = &fk->f[q];
				uint64_t v;

				if (q == fk->f_method && ff->cp && !ff->array) {
					rv = rd_long(R, &c, &fr.method);
					have_m = true;
				} else if (q == fk->f_line) {
					rv = rd_intfield(R, &c, ff, &v);
					fr.line = (int32_t)(uint32_t)v;
				} else {
					rv = skip_field(R, &c, ff, 2);
				}
				if (rv != 0)
					return (rv);
			}
			if (have_m)
				R->fr[(*nfr)++] = fr;
		}
	}
	return (0);
}

/*
 * Leaf node of stack constant `key` in the batch tree; *found false when
 * the stack is not in the pools (the sample is dropped, as jfr-parser).
 */
static int
stack_node(struct jr *R, uint64_t key, uint32_t *node, bool *found)
{
	uint32_t off, v, nfr, nids = 0, lo;
	int rv;

	*found = false;
	if (jmap_get(&R->scache, key, &v)) {
		*found = v != J_NONE;
		*node = v;
		return (0);
	}
	v = J_NONE;
	if (R->c_stack != J_NONE && pool_find(R, R->c_stack, key, &off) == 0) {
		if ((rv = stack_frames(R, off, &nfr)) != 0)
			return (rv);
		if (SM_GROW(R->ids, R->ids_cap, nfr + 1, 16) != 0)
			return (jnomem(R));
		for (uint32_t i = 0; i < nfr; i++) {
			struct jmethod *m = NULL;
			const char *s;
			size_t n;

			if ((rv = method_name(R, R->fr[i].method, &m)) != 0)
				return (rv);
			if (m->name == NULL)
				continue;
			/* without line numbers a method is one frame name:
			 * intern it once per chunk */
			if (m->fid != 0 && !R->in->line_numbers) {
				R->ids[nids++] = m->fid - 1;
				continue;
			}
			s = m->name;
			n = m->n;
			if (R->in->line_numbers) {
				char *t = jtmp(R, n + 24);

				if (t == NULL)
					return (jnomem(R));
				/* jfr-parser prints the line as a uint32
				 * (-1 reads 4294967295) */
				n = (size_t)snprintf(t, n + 24, "%s:%" PRIu32,
				    m->name, (uint32_t)R->fr[i].line);
				s = t;
			}
			if ((rv = dist_batch_frame(R->b, s, n,
			    &R->ids[nids])) != 0)
				return (rv == SM_ENOMEM ? jnomem(R) :
				    sm_err_set(R->err, rv, "frame name: %s",
				    sm_strerror(rv)));
			m->fid = R->ids[nids] + 1;
			nids++;
		}
		/* root first; keep the root side of deep stacks */
		lo = R->lim->max_depth != 0 && nids > R->lim->max_depth ?
		    nids - R->lim->max_depth : 0;
		v = 0;
		for (uint32_t i = nids; i > lo; i--) {
			if ((rv = dist_batch_node(R->b, v, R->ids[i - 1],
			    &v)) != 0)
				return (jnomem(R));
		}
	}
	if (jmap_put(&R->scache, key, v) != 0)
		return (jnomem(R));
	*found = v != J_NONE;
	*node = v;
	return (0);
}

/* Thread state constant `key`: 1 running, 0 sleeping, -1 unknown. */
static int
thread_state(struct jr *R, uint64_t key, int *st)
{
	uint32_t off, v;
	int rv;

	if (jmap_get(&R->tcache, key, &v)) {
		*st = (int)v - 1;
		return (0);
	}
	*st = -1;
	if (R->c_tstate != J_NONE && pool_find(R, R->c_tstate, key, &off) ==
	    0) {
		const struct jclass *k = &R->cls[R->c_tstate];
		struct jcur c = { R->buf, off, R->len };
		struct jstr name = { NULL, 0 };

		for (uint32_t i = 0; i < k->nf; i++) {
			if (i == k->f_name)
				rv = rd_strfield(R, &c, &k->f[i], &name);
			else
				rv = skip_field(R, &c, &k->f[i], 1);
			if (rv != 0)
				return (rv);
		}
		*st = name.p != NULL && name.n == 14 &&
		    memcmp(name.p, "STATE_SLEEPING", 14) == 0 ? 0 : 1;
	}
	if (jmap_put(&R->tcache, key, (uint32_t)(*st + 1)) != 0)
		return (jnomem(R));
	return (0);
}

/* --- labels snapshot ------------------------------------------------------ */

struct pbr {
	const uint8_t *p;
	size_t pos, end;
};

static int
pb_var(struct pbr *r, uint64_t *v)
{
	uint64_t x = 0;

	for (unsigned s = 0; s < 64; s += 7) {
		uint8_t b;

		if (r->pos >= r->end)
			return (-1);
		b = r->p[r->pos++];
		x |= (uint64_t)(b & 0x7f) << s;
		if (b < 0x80) {
			*v = x;
			return (0);
		}
	}
	return (-1);
}

/* Next field: *f, *wt; for wire type 2, the payload in *sub. */
static int
pb_next(struct pbr *r, uint32_t *f, uint32_t *wt, uint64_t *v,
    struct pbr *sub)
{
	uint64_t k, n;

	if (pb_var(r, &k) != 0 || (k >> 3) == 0 || (k >> 3) > UINT32_MAX)
		return (-1);
	*f = (uint32_t)(k >> 3);
	*wt = (uint32_t)(k & 7);
	switch (*wt) {
	case 0:
		return (pb_var(r, v));
	case 1:
	case 5:
		n = *wt == 1 ? 8 : 4;
		if (r->end - r->pos < n)
			return (-1);
		r->pos += n;
		return (0);
	case 2:
		if (pb_var(r, &n) != 0 || n > r->end - r->pos)
			return (-1);
		*sub = (struct pbr){ r->p, r->pos, r->pos + (size_t)n };
		r->pos += (size_t)n;
		return (0);
	default:
		return (-1);
	}
}

static int
ctx_cmp(const void *x, const void *y)
{
	const struct jctx *a = x, *b = y;

	return (a->id != b->id ? SM_CMP(a->id, b->id) : SM_CMP(a->off, b->off));
}

static int
sstr_cmp(const void *x, const void *y)
{
	const struct jsstr *a = x, *b = y;

	return (a->id != b->id ? SM_CMP(a->id, b->id) :
	    SM_CMP((uintptr_t)a->s, (uintptr_t)b->s));
}

static int
labels_bad(struct jr *R, const char *what)
{
	return (sm_err_set(R->err, SM_EMALFORMED, "invalid JFR labels "
	    "(LabelsSnapshot protobuf): %s", what));
}

static int
labels_read(struct jr *R)
{
	struct pbr r = { R->in->labels, 0, R->in->labels_len }, e, ctx, le;
	uint32_t f, wt, ctx_cap = 0, pairs_cap = 0, strs_cap = 0;
	uint64_t v;

	R->have_labels = true;
	while (r.pos < r.end) {
		if (pb_next(&r, &f, &wt, &v, &e) != 0)
			return (labels_bad(R, "truncated or invalid field"));
		if (wt != 2 || (f != 1 && f != 2))
			continue;
		if (f == 1) {
			struct jctx cx = { 0, R->nlpairs, 0 };

			while (e.pos < e.end) {
				if (pb_next(&e, &f, &wt, &v, &ctx) != 0)
					return (labels_bad(R, "truncated "
					    "context entry"));
				if (f == 1 && wt == 0)
					cx.id = (int64_t)v;
				if (f != 2 || wt != 2)
					continue;
				cx.off = R->nlpairs;   /* last value wins */
				cx.n = 0;
				while (ctx.pos < ctx.end) {
					int64_t kv[2] = { 0, 0 };

					if (pb_next(&ctx, &f, &wt, &v, &le) !=
					    0)
						return (labels_bad(R,
						    "truncated context"));
					if (f != 1 || wt != 2)
						continue;
					while (le.pos < le.end) {
						struct pbr dummy;

						if (pb_next(&le, &f, &wt, &v,
						    &dummy) != 0)
							return (labels_bad(R,
							    "truncated label"));
						if ((f == 1 || f == 2) &&
						    wt == 0)
							kv[f - 1] = (int64_t)v;
					}
					if (SM_GROW(R->lpairs, pairs_cap,
					    R->nlpairs + 2, 16) != 0)
						return (jnomem(R));
					R->lpairs[R->nlpairs++] = kv[0];
					R->lpairs[R->nlpairs++] = kv[1];
					cx.n++;
				}
			}
			if (SM_GROW(R->ctxs, ctx_cap, R->nctxs + 1, 16) != 0)
				return (jnomem(R));
			R->ctxs[R->nctxs++] = cx;
		} else {
			struct jsstr s = { 0, "", 0 };

			while (e.pos < e.end) {
				if (pb_next(&e, &f, &wt, &v, &le) != 0)
					return (labels_bad(R, "truncated "
					    "string entry"));
				if (f == 1 && wt == 0)
					s.id = (int64_t)v;
				else if (f == 2 && wt == 2) {
					s.s = (const char *)le.p + le.pos;
					s.n = le.end - le.pos;
				}
			}
			if (SM_GROW(R->lstrs, strs_cap, R->nlstrs + 1, 16) != 0)
				return (jnomem(R));
			R->lstrs[R->nlstrs++] = s;
		}
		if (R->nctxs >= (1u << 30) || R->nlstrs >= (1u << 30))
			return (labels_bad(R, "too many entries"));
	}
	/* Sort by id (then input order); keep the last of equal ids, as a
	 * protobuf map does. */
	if (R->nctxs > 0) {
		uint32_t w = 0;

		qsort(R->ctxs, R->nctxs, sizeof(*R->ctxs), ctx_cmp);
		for (uint32_t i = 0; i < R->nctxs; i++) {
			if (w > 0 && R->ctxs[w - 1].id == R->ctxs[i].id)
				R->ctxs[w - 1] = R->ctxs[i];
			else
				R->ctxs[w++] = R->ctxs[i];
		}
		R->nctxs = w;
	}
	if (R->nlstrs > 0) {
		uint32_t w = 0;

		qsort(R->lstrs, R->nlstrs, sizeof(*R->lstrs), sstr_cmp);
		for (uint32_t i = 0; i < R->nlstrs; i++) {
			if (w > 0 && R->lstrs[w - 1].id == R->lstrs[i].id)
				R->lstrs[w - 1] = R->lstrs[i];
			else
				R->lstrs[w++] = R->lstrs[i];
		}
		R->nlstrs = w;
	}
	return (0);
}

static uint32_t
ctx_find(const struct jr *R, int64_t id)
{
	size_t lo;

	SM_LOWER_BOUND(lo, R->nctxs, mid, R->ctxs[mid].id < id);
	return (lo < R->nctxs && R->ctxs[lo].id == id ? (uint32_t)lo + 1 : 0);
}

static uint32_t
lstr_find(const struct jr *R, int64_t id)
{
	size_t lo;

	SM_LOWER_BOUND(lo, R->nlstrs, mid, R->lstrs[mid].id < id);
	return (lo < R->nlstrs && R->lstrs[lo].id == id ? (uint32_t)lo + 1 : 0);
}

/* --- accumulation --------------------------------------------------------- */

static int
group_for(struct jr *R, enum jt t, uint32_t ctx, uint32_t span,
    uint32_t *gi)
{
	uint64_t key = (uint64_t)t << 60 | (uint64_t)ctx << 30 | span;
	int rv;

	if (jmap_get(&R->gmap, key, gi))
		return (0);
	if (SM_GROW(R->groups, R->groups_cap, R->ngroups + 1, 16) != 0 ||
	    (rv = jmap_put(&R->gmap, key, R->ngroups)) != 0)
		return (jnomem(R));
	R->groups[R->ngroups] = (struct jgroup){ (uint8_t)t, ctx, span,
	    { J_NONE, J_NONE } };
	*gi = R->ngroups++;
	return (0);
}

static int
add_sample(struct jr *R, enum jt t, uint64_t stack, uint64_t ctxid,
    uint64_t span_name, int64_t v0, int64_t v1)
{
	uint32_t node = 0, gi = 0, si, ctx = 0, span = 0;
	bool found;
	int rv;

	if ((rv = stack_node(R, stack, &node, &found)) != 0)
		return (rv);
	if (!found)
		return (0);
	if (R->have_labels) {
		if (ctxid != 0)
			ctx = ctx_find(R, (int64_t)ctxid);
		if (span_name != 0 && (span = lstr_find(R,
		    (int64_t)span_name)) != 0 && R->lstrs[span - 1].n == 0)
			span = 0;
	}
	if ((rv = group_for(R, t, ctx, span, &gi)) != 0)
		return (rv);
	if (!jmap_get(&R->smap, (uint64_t)gi << 32 | node, &si)) {
		uint32_t cap = R->samp_cap;

		/* vals has 2 per sample; sgroup/snode follow samp_cap */
		if (sm_grow32(&R->vals, &R->samp_cap, R->nsamp + 1,
		    2 * sizeof(*R->vals), 16) != 0)
			return (jnomem(R));
		if (R->samp_cap != cap) {
			uint32_t *ng = sm_reallocarray(R->sgroup, R->samp_cap,
			    sizeof(*ng));

			if (ng == NULL)
				return (jnomem(R));
			R->sgroup = ng;
			if ((ng = sm_reallocarray(R->snode, R->samp_cap,
			    sizeof(*ng))) == NULL)
				return (jnomem(R));
			R->snode = ng;
		}
		si = R->nsamp++;
		R->vals[2 * si] = R->vals[2 * si + 1] = 0;
		R->sgroup[si] = gi;
		R->snode[si] = node;
		if (jmap_put(&R->smap, (uint64_t)gi << 32 | node, si) != 0)
			return (jnomem(R));
	}
	/* wrap instead of overflowing; negative sums are dropped later */
	R->vals[2 * si] = (int64_t)((uint64_t)R->vals[2 * si] + (uint64_t)v0);
	R->vals[2 * si + 1] = (int64_t)((uint64_t)R->vals[2 * si + 1] +
	    (uint64_t)v1);
	return (0);
}

/* --- events ------------------------------------------------------------- */

static int
event(struct jr *R, struct jcur *c, const struct jclass *k)
{
	uint64_t stack = 0, state = 0, ctx = 0, span_name = 0, value = 0;
	bool have_stack = false;
	struct jstr sname = { NULL, 0 }, svalue = { NULL, 0 };
	int64_t p = R->period;
	int rv, st;

	for (uint32_t i = 0; i < k->nf; i++) {
		const struct jfield *f = &k->f[i];

		if (i == k->f_stack && f->cp && !f->array) {
			rv = rd_long(R, c, &stack);
			have_stack = true;
		} else if (i == k->f_state && f->cp && !f->array) {
			rv = rd_long(R, c, &state);
		} else if (i == k->f_ctx) {
			rv = rd_intfield(R, c, f, &ctx);
		} else if (i == k->f_span_name) {
			rv = rd_intfield(R, c, f, &span_name);
		} else if (i == k->f_value) {
			rv = rd_intfield(R, c, f, &value);
		} else if (k->ev == EV_SETTING && i == k->f_name) {
			rv = rd_strfield(R, c, f, &sname);
		} else if (k->ev == EV_SETTING && i == k->f_svalue) {
			rv = rd_strfield(R, c, f, &svalue);
		} else {
			rv = skip_field(R, c, f, 1);
		}
		if (rv != 0)
			return (rv);
	}
	if (k->ev == EV_SETTING) {
		if (sname.p != NULL && sname.n == 5 &&
		    memcmp(sname.p, "event", 5) == 0) {
			char *e = sm_malloc(svalue.n + 1);

			if (e == NULL)
				return (jnomem(R));
			if (svalue.n != 0)
				memcpy(e, svalue.p, svalue.n);
			e[svalue.n] = '\0';
			sm_free(R->event);
			R->event = e;
		}
		return (0);
	}
	if (!have_stack)
		return (0);
	switch (k->ev) {
	case EV_EXEC:
		if ((rv = thread_state(R, state, &st)) != 0)
			return (rv);
		if (st == 1 && (rv = add_sample(R, JT_CPU, stack, ctx,
		    span_name, p, 0)) != 0)
			return (rv);
		if (R->event != NULL && strcmp(R->event, "wall") == 0)
			return (add_sample(R, JT_WALL, stack, ctx, span_name,
			    p, 0));
		return (0);
	case EV_WALL:
		/* async-profiler >= 3 records the thread state here too;
		 * a running thread's tick is also one cpu sample (as
		 * jfr-parser), whatever its `samples` count */
		if (k->f_state != J_NONE) {
			if ((rv = thread_state(R, state, &st)) != 0)
				return (rv);
			if (st == 1 && (rv = add_sample(R, JT_CPU, stack, 0,
			    0, p, 0)) != 0)
				return (rv);
		}
		return (add_sample(R, JT_WALL, stack, 0, 0,
		    (int64_t)((uint64_t)value * (uint64_t)p), 0));
	case EV_TLAB_IN:
		return (add_sample(R, JT_TLAB_IN, stack, ctx, span_name, 1,
		    (int64_t)value));
	case EV_TLAB_OUT:
		return (add_sample(R, JT_TLAB_OUT, stack, ctx, span_name, 1,
		    (int64_t)value));
	case EV_ALLOC_SAMPLE:
		return (add_sample(R, JT_ALLOC_SAMPLE, stack, 0, 0, 1,
		    (int64_t)value));
	case EV_LOCK:
		return (add_sample(R, JT_LOCK, stack, ctx, span_name, 1,
		    (int64_t)value));
	case EV_PARK:
		return (add_sample(R, JT_PARK, stack, 0, 0, 1,
		    (int64_t)value));
	case EV_LIVE:
		return (add_sample(R, JT_LIVE, stack, 0, 0, 1, 0));
	case EV_MALLOC:
		return (add_sample(R, JT_MALLOC, stack, 0, 0, 1,
		    (int64_t)value));
	default:
		return (0);
	}
}

/* --- chunks ----------------------------------------------------------------- */

static uint64_t
be64(const uint8_t *p)
{
	uint64_t x = 0;

	for (int i = 0; i < 8; i++)
		x = x << 8 | p[i];
	return (x);
}

static void
chunk_fini(struct jr *R)
{
	sm_arena_destroy(R->ca);
	R->ca = NULL;
	sm_free(R->cls);
	R->cls = NULL;
	R->ncls = R->cls_cap = 0;
	sm_free(R->pe);
	R->pe = NULL;
	R->npe = R->pe_cap = 0;
	sm_free(R->meths);
	R->meths = NULL;
	R->nmeths = R->meths_cap = 0;
	jmap_fini(&R->mcache);
	jmap_fini(&R->scache);
	jmap_fini(&R->tcache);
}

static int
chunk(struct jr *R, const uint8_t *p, size_t len)
{
	uint64_t cp_off, meta_off, v;
	uint16_t major, minor;
	struct jcur c;
	int rv;

	R->buf = p;
	R->len = len;
	R->what = "chunk header";
	major = (uint16_t)(p[4] << 8 | p[5]);
	minor = (uint16_t)(p[6] << 8 | p[7]);
	if (major != 2)
		return (sm_err_set(R->err, SM_EUNSUPPORTED, "unsupported JFR "
		    "version %u.%u in chunk %" PRIu32 " (2.0 and 2.1 are "
		    "supported)", major, minor, R->chunk_no));
	cp_off = be64(p + 16);
	meta_off = be64(p + 24);
	R->comp = (p[67] & 1) != 0;
	if ((R->ca = sm_arena_create(SM_MAX((size_t)64 << 20, 4 * len))) ==
	    NULL)
		return (jnomem(R));
	if ((rv = meta_read(R, meta_off)) != 0 ||
	    (rv = pools_read(R, cp_off)) != 0)
		return (rv);
	R->what = "events";
	c = (struct jcur){ p, J_HDR, len };
	while (c.pos < len) {
		size_t at = c.pos;
		uint64_t size;
		uint32_t ci;

		if ((rv = rd_num(R, &c, 4, &size)) != 0)
			return (rv);
		if (size == 0 || size > len - at)
			return (jbad(R, at, "record size %" PRIu64 " invalid "
			    "(%zu bytes left in the chunk)", size, len - at));
		c.end = at + (size_t)size;
		if ((rv = rd_long(R, &c, &v)) != 0)
			return (rv);
		if (v > 1 && (ci = cls_find(R, v)) != J_NONE &&
		    R->cls[ci].ev != EV_NONE) {
			R->what = R->cls[ci].name;
			if ((rv = event(R, &c, &R->cls[ci])) != 0)
				return (rv);
			R->what = "events";
		}
		c.pos = at + (size_t)size;
		c.end = len;
	}
	return (0);
}

/* Chunk source: raw slices or one inflated chunk at a time. */
struct jsrc {
	const uint8_t *data;
	size_t len, pos;
	bool gz;
	struct sm_gunzip_stream *z;
	uint8_t *buf;
	size_t cap;
	uint64_t total, max;
};

/* Inflate up to `want` more bytes to buf[have..]; *got how many.  The
 * buffer grows with what actually inflates, never to a size a chunk
 * header merely claims. */
static int
src_inflate(struct jr *R, struct jsrc *s, size_t have, size_t want,
    size_t *got)
{
	*got = 0;
	while (*got < want) {
		size_t n;
		int rv;

		if (have + *got + 1 > s->cap) {
			size_t nc = SM_MAX((size_t)1 << 16, s->cap * 2);
			uint8_t *nb;

			nc = SM_MIN(nc, have + want);
			if ((nb = sm_realloc(s->buf, nc)) == NULL)
				return (jnomem(R));
			s->buf = nb;
			s->cap = nc;
		}
		if ((rv = sm_gunzip_stream_read(s->z, s->buf + have + *got,
		    SM_MIN(s->cap - have - *got, want - *got), &n,
		    R->err)) != 0)
			return (rv);
		if (n == 0)
			break;          /* the end of the data */
		*got += n;
	}
	return (0);
}

/* Next chunk in *p / *n; *n = 0 at the end. */
static int
src_next(struct jr *R, struct jsrc *s, const uint8_t **p, size_t *n)
{
	uint64_t size;
	size_t got;
	int rv;

	*n = 0;
	R->what = "chunk header";
	if (!s->gz) {
		if (s->pos == s->len)
			return (0);
		if (s->len - s->pos < J_HDR)
			return (jbad(R, 0, "truncated: %zu bytes, a chunk header "
			    "is 68", s->len - s->pos));
		*p = s->data + s->pos;
	} else {
		if ((rv = src_inflate(R, s, 0, J_HDR, &got)) != 0)
			return (rv);
		if (got == 0)
			return (0);
		if (got < J_HDR)
			return (jbad(R, 0, "truncated: %zu bytes, a chunk header "
			    "is 68", got));
		*p = s->buf;
	}
	if (memcmp(*p, "FLR\0", 4) != 0)
		return (jbad(R, 0, "bad magic (not a JFR chunk)"));
	size = be64(*p + 8);
	if (size < J_HDR)
		return (jbad(R, 0, "chunk size %" PRIu64 " is smaller than its "
		    "header (an unfinished recording?)", size));
	if (size > s->max - s->total)
		return (sm_err_set(R->err, SM_ETOOBIG, "decompressed JFR "
		    "recording exceeds limit of %" PRIu64 " bytes", s->max));
	if (!s->gz) {
		if (size > s->len - s->pos)
			return (jbad(R, 0, "truncated: chunk size %" PRIu64
			    ", %zu bytes left", size, s->len - s->pos));
		s->pos += (size_t)size;
	} else {
		if ((rv = src_inflate(R, s, J_HDR, (size_t)size - J_HDR,
		    &got)) != 0)
			return (rv);
		if (got < size - J_HDR)
			return (jbad(R, 0, "truncated: chunk size %" PRIu64
			    ", %zu bytes left", size, got + J_HDR));
		*p = s->buf;
	}
	s->total += size;
	*n = (size_t)size;
	return (0);
}

/* --- series ------------------------------------------------------------- */

static int
group_series(struct jr *R, struct jgroup *g)
{
	const struct jtype *T = &jtypes[g->type];
	const struct dist_jfr_in *in = R->in;
	struct sm_arena *a = R->b->arena;
	uint32_t nctx = g->ctx != 0 ? R->ctxs[g->ctx - 1].n : 0;
	size_t cap = 8 + (size_t)in->nbase + nctx + 2;
	struct sm_label *ls;
	int rv;

	if (R->lim->max_sample_labels != 0 && nctx + (g->span != 0) >
	    R->lim->max_sample_labels)
		return (sm_err_set(R->err, SM_EMALFORMED, "JFR context %" PRId64
		    " has %" PRIu32 " labels, more than the limit of %" PRIu32,
		    R->ctxs[g->ctx - 1].id, nctx, R->lim->max_sample_labels));
	for (uint32_t vi = 0; vi < T->nv; vi++) {
		uint32_t n = 0;
		char *pt;
		size_t ptn;

		if ((ls = sm_arena_calloc(a, cap, sizeof(*ls))) == NULL)
			return (jnomem(R));
		ptn = strlen(T->metric) + strlen(T->st[vi]) +
		    strlen(T->su[vi]) + strlen(T->pt) + strlen(T->pu) + 5;
		if ((pt = sm_arena_alloc(a, ptn)) == NULL)
			return (jnomem(R));
		snprintf(pt, ptn, "%s:%s:%s:%s:%s", T->metric, T->st[vi],
		    T->su[vi], T->pt, T->pu);
		ls[n++] = (struct sm_label){ SM_LABEL_NAME, T->metric };
		ls[n++] = (struct sm_label){ SM_LABEL_TYPE, T->st[vi] };
		ls[n++] = (struct sm_label){ SM_LABEL_UNIT, T->su[vi] };
		if (*T->pt != '\0')
			ls[n++] = (struct sm_label){ SM_LABEL_PERIOD_TYPE,
			    T->pt };
		if (*T->pu != '\0')
			ls[n++] = (struct sm_label){ SM_LABEL_PERIOD_UNIT,
			    T->pu };
		ls[n++] = (struct sm_label){ SM_LABEL_PROFILE_TYPE, pt };
		for (uint32_t i = 0; i < in->nbase; i++) {
			if (sm_labels_get(ls, n, in->base[i].name) == NULL)
				ls[n++] = in->base[i];
		}
		if (R->event != NULL && *R->event != '\0' &&
		    sm_labels_get(ls, n, "jfr_event") == NULL)
			ls[n++] = (struct sm_label){ "jfr_event", R->event };
		for (uint32_t i = 0; i < nctx; i++) {
			const int64_t *kv = &R->lpairs[(size_t)
			    R->ctxs[g->ctx - 1].off + 2 * (size_t)i];
			uint32_t ki = lstr_find(R, kv[0]), vj = lstr_find(R,
			    kv[1]);
			const struct jsstr *ks, *vs;
			char *k, *v;

			if (ki == 0 || vj == 0)
				continue;
			ks = &R->lstrs[ki - 1];
			vs = &R->lstrs[vj - 1];
			if (ks->n == 0 || vs->n == 0)
				continue;
			if ((k = sm_arena_strndup(a, ks->s, ks->n)) == NULL ||
			    (v = sm_arena_strndup(a, vs->s, vs->n)) == NULL)
				return (jnomem(R));
			if (sm_labels_get(ls, n, k) == NULL)
				ls[n++] = (struct sm_label){ k, v };
		}
		if (g->span != 0 && sm_labels_get(ls, n, "span_name") == NULL) {
			const struct jsstr *s = &R->lstrs[g->span - 1];
			char *v = sm_arena_strndup(a, s->s, s->n);

			if (v == NULL)
				return (jnomem(R));
			ls[n++] = (struct sm_label){ "span_name", v };
		}
		rv = dist_batch_series(R->b, ls, n, in->time_ms,
		    &g->series[vi], R->err);
		if (rv != 0)
			return (rv == SM_ENOMEM ? jnomem(R) : rv);
	}
	return (0);
}

static int
finish(struct jr *R)
{
	uint32_t count[JT_N] = { 0 };
	int rv;

	for (uint32_t i = 0; i < R->nsamp; i++)
		count[R->groups[R->sgroup[i]].type]++;
	for (int t = 0; t < JT_N; t++) {
		if (R->lim->max_samples != 0 && count[t] >
		    R->lim->max_samples)
			return (sm_err_set(R->err, SM_ELIMIT, "the %s profile "
			    "(%s) exceeds the samples count limit "
			    "(max_profile_stacktrace_samples, actual: %" PRIu32
			    ", limit: %" PRIu32 ")", jtypes[t].metric,
			    jtypes[t].st[0], count[t], R->lim->max_samples));
	}
	for (uint32_t g = 0; g < R->ngroups; g++) {
		if ((rv = group_series(R, &R->groups[g])) != 0)
			return (rv);
	}
	for (uint32_t i = 0; i < R->nsamp; i++) {
		const struct jgroup *g = &R->groups[R->sgroup[i]];

		for (uint32_t vi = 0; vi < jtypes[g->type].nv; vi++) {
			if ((rv = dist_batch_add(R->b, g->series[vi],
			    R->snode[i], R->vals[2 * i + vi])) != 0)
				return (jnomem(R));
		}
	}
	return (0);
}

int
dist_jfr_ingest(const uint8_t *data, size_t len,
    const struct dist_jfr_in *in, struct dist_batch *b, struct sm_err *err)
{
	struct jr R;
	struct jsrc s;
	int rv = 0;

	SM_ASSERT(in != NULL && b != NULL && !b->finished);
	pthread_once(&jre_once, jre_init);
	memset(&R, 0, sizeof(R));
	memset(&s, 0, sizeof(s));
	R.in = in;
	R.b = b;
	R.err = err;
	R.lim = b->limits;
	R.what = "recording";
	R.period = in->sample_rate == 0 ? 0 : 1000000000LL /
	    (int64_t)in->sample_rate;
	s.data = data;
	s.len = len;
	s.max = in->max_bytes != 0 ? in->max_bytes : UINT64_MAX;
	s.gz = sm_is_gzip(data, len);
	if (len == 0)
		return (sm_err_set(err, SM_EMALFORMED, "invalid JFR: empty "
		    "recording"));
	if (!s.gz && len > s.max)
		return (sm_err_set(err, SM_ETOOBIG, "decompressed JFR recording "
		    "exceeds limit of %" PRIu64 " bytes", s.max));
	if ((R.md = sm_regex_md_create(15)) == NULL)
		return (jnomem(&R));
	if (s.gz && sm_gunzip_stream_open(data, len, &s.z) != 0) {
		rv = jnomem(&R);
		goto out;
	}
	if (in->labels != NULL && in->labels_len > 0 &&
	    (rv = labels_read(&R)) != 0)
		goto out;
	for (;;) {
		const uint8_t *p = NULL;
		size_t n;

		R.chunk_off = s.total;
		if ((rv = src_next(&R, &s, &p, &n)) != 0)
			goto out;
		if (n == 0)
			break;
		rv = chunk(&R, p, n);
		chunk_fini(&R);
		if (rv != 0)
			goto out;
		R.chunk_no++;
	}
	if (R.chunk_no == 0) {
		rv = sm_err_set(err, SM_EMALFORMED, "invalid JFR: no chunk");
		goto out;
	}
	rv = finish(&R);
out:
	chunk_fini(&R);
	sm_gunzip_stream_close(s.z);
	sm_free(s.buf);
	sm_regex_md_free(R.md);
	sm_free(R.fr);
	sm_free(R.ids);
	sm_free(R.event);
	sm_free(R.ctxs);
	sm_free(R.lpairs);
	sm_free(R.lstrs);
	sm_free(R.groups);
	jmap_fini(&R.gmap);
	jmap_fini(&R.smap);
	sm_free(R.vals);
	sm_free(R.sgroup);
	sm_free(R.snode);
	sm_free(R.tmp);
	return (rv);
}

/* --- the /ingest request ---------------------------------------------------- */

int
dist_jfr_upload(const char *content_type, const uint8_t *body, size_t len,
    const struct dist_jfr_in *tmpl, size_t labels_cap, struct dist_batch *b,
    struct sm_err *err)
{
	struct dist_jfr_in in = *tmpl;
	const uint8_t *jfr = body;
	size_t jlen = len;
	int rv;

	if (content_type != NULL && strstr(content_type,
	    "multipart/form-data") != NULL) {
		struct dist_part *parts;
		const struct dist_part *p;
		uint32_t np;

		if ((rv = dist_multipart_parse(content_type, body, len,
		    b->arena, &parts, &np, err)) != 0) {
			sm_err_prefix(err, "failed to parse JFR /ingest "
			    "multipart form");
			return (rv);
		}
		if ((p = dist_multipart_get(parts, np, "jfr")) == NULL)
			return (sm_err_set(err, SM_EMALFORMED, "failed to parse "
			    "JFR /ingest multipart form: no \"jfr\" field"));
		jfr = p->data;
		jlen = p->len;
		if ((p = dist_multipart_get(parts, np, "labels")) != NULL &&
		    p->len > 0) {
			uint8_t *raw = (uint8_t *)p->data;
			size_t rawlen = p->len;

			if (sm_is_gzip(p->data, p->len)) {
				if ((rv = sm_gunzip(p->data, p->len,
				    labels_cap, b->arena, &raw, &rawlen,
				    err)) != 0) {
					sm_err_prefix(err, "JFR labels");
					return (rv);
				}
			} else if (p->len > labels_cap) {
				return (sm_err_set(err, SM_ETOOBIG, "JFR labels "
				    "exceed limit of %zu bytes", labels_cap));
			}
			in.labels = raw;
			in.labels_len = rawlen;
		}
	}
	return (dist_jfr_ingest(jfr, jlen, &in, b, err));
}
