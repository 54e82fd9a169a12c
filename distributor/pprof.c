/*
 * pprof.c -- pprof (profile.proto) ingestion; see pprof.h for the contract.
 *
 * Why a hand-written decoder: protobuf-c's unpack allocates one struct per
 * Sample, Label, Location and Line and copies every string.  A 4 MiB
 * profile would cost tens of thousands of allocations before the first
 * frame reaches the batch.  Here the input bytes are walked three times,
 * and nothing is allocated per sample:
 *
 *   A. count   -- walk the top-level fields of Profile and count each
 *                 repeated message; read period_type.  Every array below
 *                 is sized from these counts (the Line entries, which
 *                 would need a walk into every Location, grow by doubling
 *                 in pass B instead), and every counted element occupies
 *                 at least two input bytes, so memory is linear in the
 *                 input and never follows an attacker-chosen number (an
 *                 id, a declared length).
 *   B. index   -- the string table (offset + length into the input, UTF-8
 *                 checked), sample types, mappings, functions, locations
 *                 and their lines into arena arrays.  Then the dotnet fix,
 *                 the id checks and the id -> index maps: a direct array
 *                 when ids are dense (max id <= 4 * count + 16), a sorted
 *                 (id, index) array with binary search otherwise.
 *   C. samples -- each Sample is decoded into small reusable scratch
 *                 arrays and streamed into the batch.
 *
 * Hot loop (C), per sample: resolve location ids (direct array), find the
 * label group (empty set: no work; otherwise one hash probe), then walk the
 * frames root first.  What keeps that cheap:
 *   - per location, the frame name ids in root-to-leaf order (inline
 *     expansion, address naming and the scripting rename happen once per
 *     location, on first use), plus a 4-byte view (pp.lf) holding the
 *     frame itself for the usual one-frame location;
 *   - per function, its interned frame name;
 *   - the path table (pp_walk): a node is found by the hash of its frame
 *     path from the root, so a stack's probes do not wait on each other,
 *     and a node it does not hold is new and appended to the batch tree
 *     without a probe of the tree's own index;
 *   - the previous sample's root-side path: samples often share their
 *     root frames, so the walk starts where the two stacks diverge.
 *
 * Wire format facts used (docs/wire-formats.md §1): a key is a varint (field << 3 | wire
 * type); wire types 0 varint, 1 fixed64, 2 length-delimited, 3/4 group
 * start/end, 5 fixed32.  Repeated scalars may arrive packed (one wire type
 * 2 field) or unpacked (one field per value), mixed freely.  A known field
 * with a wire type other than its declared one is malformed, as in
 * Pyroscope's decoder (vtprotobuf: "proto: wrong wireType"); unknown
 * field numbers are skipped whatever their wire type.  A non-repeated
 * message field given twice is merged (period_type).
 *
 * Ownership: everything is allocated from b->arena; nothing is freed here.
 * Strings handed to the batch are copied by it.
 * Locking: none (one request, one thread).
 */
#include "pprof.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "common/hash.h"
#include "common/oatab.h"
#include "common/pbwire.h"
#include "common/varint.h"

#define PP_NONE UINT32_MAX
#define PP_MULTI (UINT32_MAX - 1)   /* pp.lf: location has several frames */
#define PP_NTYPE_LABELS 6

/* --- wire schemas -------------------------------------------------------- */

/*
 * Declared wire types of the fields of each message (bit 1 << wt), so a
 * known field arriving with another wire type is refused as Pyroscope's
 * vtprotobuf decoder refuses it ("proto: wrong wireType").  0 = unknown
 * field number, skipped whatever its wire type.
 */
#define WV SM_PBW_V
#define WL SM_PBW_L
static const uint8_t pb_s_profile[16] = { 0, WL, WL, WL, WL, WL, WL, WV, WV,
	WV, WV, WL, WV, WV | WL, WV, WV };
static const uint8_t pb_s_valuetype[3] = { 0, WV, WV };
static const uint8_t pb_s_sample[4] = { 0, WV | WL, WV | WL, WL };
static const uint8_t pb_s_label[5] = { 0, WV, WV, WV, WV };
static const uint8_t pb_s_mapping[11] = { 0, WV, WV, WV, WV, WV, WV, WV, WV,
	WV, WV };
static const uint8_t pb_s_location[6] = { 0, WV, WV, WV, WL, WV };
static const uint8_t pb_s_line[4] = { 0, WV, WV, WV };
static const uint8_t pb_s_function[6] = { 0, WV, WV, WV, WV, WV };
#define PB_SCHEMA(s) (s), (uint32_t)sizeof(s)

/* --- decoder state -------------------------------------------------------- */

struct pp_str {
	uint32_t off, len;   /* into the input */
};

struct pp_func {
	uint32_t name, sysname, filename;   /* string indices */
	uint32_t frame;                     /* batch string id, or PP_NONE */
};

struct pp_loc {
	uint64_t address;
	uint64_t mapping_id;
	uint32_t mapping;     /* index, or PP_NONE */
	uint32_t line_off;    /* lines[line_off .. + nlines) */
	uint32_t nlines;
	uint32_t frame_off;   /* frames[frame_off .. + nframes), root first */
	uint32_t nframes;     /* max(nlines, 1) */
};

struct pp_ident {
	uint64_t id;
	uint32_t idx;
};

/* id -> index: direct array for dense ids, sorted array otherwise. */
struct pp_idmap {
	uint32_t *direct;     /* index + 1, 0 = none; ndirect entries */
	uint64_t ndirect;
	struct pp_ident *sorted;
	uint32_t nsorted;
};

/* A distinct set of string sample labels and its series, one per type. */
struct pp_group {
	uint64_t h;
	uint32_t off, n;      /* (key, str) index pairs in gpairs[2*off ..] */
	uint32_t *series;     /* per type: batch series index or PP_NONE */
};

struct pp_lab {
	uint32_t key, str, pos;
};

struct pp {
	const uint8_t *raw;
	size_t len;
	const struct dist_pprof_in *in;
	struct dist_batch *b;
	struct sm_arena *a;
	struct sm_err *err;
	const struct dist_limits *lim;
	bool scripting, dotnet;

	/* Pass A counts. */
	uint32_t nstr, ntypes, nsamples, nmaps, nlocs, nfuncs;
	uint32_t nlines, lines_cap;   /* pass B: lines[] grows */
	uint64_t ptype, punit;   /* period_type string indices */

	/* Pass B tables. */
	struct pp_str *str;
	uint32_t *st_type, *st_unit;
	uint64_t *map_id;
	uint32_t *map_file;
	uint64_t *func_id;
	struct pp_func *func;
	uint64_t *loc_id;
	struct pp_loc *loc;
	uint64_t *lines;      /* function ids, then function indices */
	uint32_t *frames;
	uint32_t nframes;
	/* Per location, the hot-loop view: its frame name id when it has
	 * exactly one, PP_MULTI when more, PP_NONE until resolved.  Four
	 * bytes per location keep the walk in cache. */
	uint32_t *lf;
	struct pp_idmap mmap, fmap, lmap;
	struct sm_label *tlab;   /* ntypes * PP_NTYPE_LABELS */

	/* Label groups. */
	struct pp_group *groups;
	uint32_t ngroups, groups_cap;
	struct sm_oatab gtab;     /* groups by hash (slots in the arena) */
	uint32_t *gpairs;
	uint32_t ngpairs, gpairs_cap;

	/* The walk's path table (pp_walk) and the batch's node count
	 * before this decode. */
	struct sm_oatab path;
	uint32_t tree_base;

	/* Per-sample scratch. */
	uint32_t *sloc;       /* location indices, leaf first */
	uint32_t nsloc, sloc_cap;
	int64_t *sval;
	uint32_t nsval;
	struct pp_lab *slab;  /* string labels kept for the series */
	uint32_t *spair;      /* the same as (key, str) pairs */
	uint32_t nslab, slab_cap, nlabels;
	/* The sample's span id (span_id label, else profile_id): 0 none,
	 * 1 from profile_id, 2 from span_id. */
	uint64_t span;
	int span_from;
	/* The previous sample's stack, root first, complete locations only. */
	uint32_t *ploc, *pnode, *pdepth;
	uint64_t *phash;      /* pp_walk's path hash after each location */
	uint32_t npath, path_cap;

	char **cstr;          /* NUL-terminated copies by string index */
	char *tmp;            /* scratch for built frame names */
	size_t tmp_cap;
};

static int
pp_nomem(struct pp *st)
{
	return (sm_err_set(st->err, SM_ENOMEM, "out of memory decoding pprof "
	    "(%zu arena bytes in use, budget %zu)", sm_arena_used(st->a),
	    sm_arena_budget(st->a)));
}

/* Arena array of n elements of sz bytes (n may be 0). */
static void *
pp_alloc(struct pp *st, size_t n, size_t sz)
{
	if (n != 0 && n > SIZE_MAX / sz)
		return (NULL);
	return (sm_arena_alloc(st->a, SM_MAX(n, 1) * sz));
}

static int
pp_malformed(struct pp *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
pp_malformed(struct pp *st, const char *fmt, ...)
{
	char msg[SM_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return (sm_err_set(st->err, SM_EMALFORMED, "malformed profile: %s",
	    msg));
}

/* A wire error inside `what` (e.g. "location", index 3). */
static int
pp_wire(struct pp *st, const struct sm_pbw *r, const char *what, uint32_t idx)
{
	size_t off = (size_t)(r->p - st->raw);

	if (idx == PP_NONE)
		return (pp_malformed(st, "%s: %s (byte %zu)", what, r->why,
		    off));
	return (pp_malformed(st, "%s[%" PRIu32 "]: %s (byte %zu)", what, idx,
	    r->why, off));
}

static inline const char *
pp_s(const struct pp *st, uint32_t i, uint32_t *len)
{
	*len = st->str[i].len;
	return ((const char *)st->raw + st->str[i].off);
}

/* Check a string index read from field `field` of `what`[idx]. */
static int
pp_stridx(struct pp *st, uint64_t v, const char *what, uint32_t idx,
    const char *field, uint32_t *out)
{
	*out = 0;               /* out-parameters are nulled on failure */
	if (v >= st->nstr) {
		return (pp_malformed(st, "%s[%" PRIu32 "].%s: string index "
		    "%" PRId64 " out of range (string_table has %" PRIu32
		    " entries)", what, idx, field, (int64_t)v, st->nstr));
	}
	*out = (uint32_t)v;
	return (0);
}

/* --- pass A: count -------------------------------------------------------- */

/* Read a ValueType into *type / *unit (fields present overwrite). */
static int
pp_value_type(struct sm_pbw *r, uint64_t *type, uint64_t *unit)
{
	uint32_t f, wt;
	uint64_t v;

	while (r->p < r->end) {
		if (sm_pbw_key(r, &f, &wt) != 0)
			return (-1);
		if ((f == 1 || f == 2) && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(r, &v) != 0)
				return (-1);
			if (f == 1)
				*type = v;
			else
				*unit = v;
		} else if (sm_pbw_skip(r, f, wt) != 0) {
			return (-1);
		}
	}
	return (0);
}

static int
pp_count(struct pp *st)
{
	struct sm_pbw r = { st->raw, st->raw + st->len, NULL, PB_SCHEMA(pb_s_profile) };
	const uint8_t *p;
	size_t n;
	uint32_t f;
	int got;

	while ((got = sm_pbw_next_len(&r, &f, &p, &n)) > 0) {
		switch (f) {
		case 1: st->ntypes++; break;
		case 2: st->nsamples++; break;
		case 3: st->nmaps++; break;
		case 5: st->nfuncs++; break;
		case 6: st->nstr++; break;
		case 4: st->nlocs++; break;
		case 11: {
			struct sm_pbw s = { p, p + n, NULL, PB_SCHEMA(pb_s_valuetype) };

			if (pp_value_type(&s, &st->ptype, &st->punit) != 0)
				return (pp_wire(st, &s, "period_type",
				    PP_NONE));
			break;
		}
		}
	}
	return (got < 0 ? pp_wire(st, &r, "Profile", PP_NONE) : 0);
}

/* --- pass B: index -------------------------------------------------------- */

static int
pp_string(struct pp *st, const uint8_t *p, size_t n, uint32_t i)
{
	char hex[2 * 24 + 4];
	size_t k;

	st->str[i].off = (uint32_t)(p - st->raw);
	st->str[i].len = (uint32_t)n;
	if (i == 0 && n != 0)
		return (pp_malformed(st, "string_table[0] must be \"\" "
		    "(it has %zu bytes)", n));
	if (sm_utf8_valid((const char *)p, n))
		return (0);
	for (k = 0; k < n && k < 24; k++)
		snprintf(hex + 2 * k, 3, "%02x", p[k]);
	if (k < n)
		memcpy(hex + 2 * k, "...", 4);
	return (pp_malformed(st, "string_table[%" PRIu32 "] is not valid "
	    "UTF-8 (hex: %s)", i, hex));
}

static int
pp_sample_type(struct pp *st, const uint8_t *p, size_t n, uint32_t i)
{
	struct sm_pbw r = { p, p + n, NULL, PB_SCHEMA(pb_s_valuetype) };
	uint64_t type = 0, unit = 0;
	int rv;

	if (pp_value_type(&r, &type, &unit) != 0)
		return (pp_wire(st, &r, "sample_type", i));
	if ((rv = pp_stridx(st, type, "sample_type", i, "type",
	    &st->st_type[i])) != 0)
		return (rv);
	return (pp_stridx(st, unit, "sample_type", i, "unit",
	    &st->st_unit[i]));
}

static int
pp_mapping(struct pp *st, const uint8_t *p, size_t n, uint32_t i)
{
	struct sm_pbw r = { p, p + n, NULL, PB_SCHEMA(pb_s_mapping) };
	uint64_t fv[7] = { 0 };  /* by field: id 1, filename 5, build_id 6 */
	uint32_t f, wt, tmp;
	int rv;

	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (pp_wire(st, &r, "mapping", i));
		if ((f == 1 || f == 5 || f == 6) && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &fv[f]) != 0)
				return (pp_wire(st, &r, "mapping", i));
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (pp_wire(st, &r, "mapping", i));
		}
	}
	st->map_id[i] = fv[1];
	if ((rv = pp_stridx(st, fv[5], "mapping", i, "filename",
	    &st->map_file[i])) != 0)
		return (rv);
	return (pp_stridx(st, fv[6], "mapping", i, "build_id", &tmp));
}

static int
pp_function(struct pp *st, const uint8_t *p, size_t n, uint32_t i)
{
	struct sm_pbw r = { p, p + n, NULL, PB_SCHEMA(pb_s_function) };
	/* by field: id 1, then the string indices name 2, system_name 3,
	 * filename 4 */
	uint64_t fv[5] = { 0 };
	static const char *const names[3] = { "name", "system_name",
	    "filename" };
	uint32_t f, wt, idx[3];
	int rv;

	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (pp_wire(st, &r, "function", i));
		if (f >= 1 && f <= 4 && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &fv[f]) != 0)
				return (pp_wire(st, &r, "function", i));
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (pp_wire(st, &r, "function", i));
		}
	}
	for (int k = 0; k < 3; k++) {
		if ((rv = pp_stridx(st, fv[k + 2], "function", i, names[k],
		    &idx[k])) != 0)
			return (rv);
	}
	st->func_id[i] = fv[1];
	st->func[i].name = idx[0];
	st->func[i].sysname = idx[1];
	st->func[i].filename = idx[2];
	st->func[i].frame = PP_NONE;
	return (0);
}

static int
pp_line(struct pp *st, const uint8_t *p, size_t n, uint32_t li,
    uint32_t k, uint64_t *fid)
{
	struct sm_pbw r = { p, p + n, NULL, PB_SCHEMA(pb_s_line) };
	uint32_t f, wt;

	*fid = 0;
	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			goto bad;
		if (f == 1 && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, fid) != 0)
				goto bad;
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			goto bad;
		}
	}
	return (0);
bad:
	return (pp_malformed(st, "location[%" PRIu32 "].line[%" PRIu32 "]: "
	    "%s (byte %zu)", li, k, r.why, (size_t)(r.p - st->raw)));
}

/* Room for more Line entries: each takes at least two input bytes, so
 * doubling keeps the array linear in the input. */
static int __attribute__((noinline))
pp_lines_grow(struct pp *st)
{
	uint32_t cap = st->lines_cap * 2;

	if (cap < st->lines_cap || (st->lines = sm_arena_grow(st->a,
	    st->lines, st->lines_cap, cap, sizeof(uint64_t))) == NULL)
		return (pp_nomem(st));
	st->lines_cap = cap;
	return (0);
}

static int
pp_location(struct pp *st, const uint8_t *p, size_t n, uint32_t i,
    uint32_t *line_next)
{
	struct sm_pbw r = { p, p + n, NULL, PB_SCHEMA(pb_s_location) };
	struct pp_loc *L = &st->loc[i];
	uint64_t fv[4] = { 0 };  /* by field: id 1, mapping_id 2, address 3 */
	uint32_t f, wt;
	int rv;

	memset(L, 0, sizeof(*L));
	L->mapping = PP_NONE;
	L->line_off = *line_next;
	while (r.p < r.end) {
		const uint8_t *lp;
		size_t ln;

		if (sm_pbw_key(&r, &f, &wt) != 0)
			return (pp_wire(st, &r, "location", i));
		if (f >= 1 && f <= 3 && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &fv[f]) != 0)
				return (pp_wire(st, &r, "location", i));
		} else if (f == 4 && wt == SM_PBW_LEN) {
			if (sm_pbw_bytes(&r, &lp, &ln) != 0)
				return (pp_wire(st, &r, "location", i));
			if (SM_UNLIKELY(*line_next == st->lines_cap) &&
			    (rv = pp_lines_grow(st)) != 0)
				return (rv);
			if ((rv = pp_line(st, lp, ln, i, L->nlines,
			    &st->lines[*line_next])) != 0)
				return (rv);
			(*line_next)++;
			L->nlines++;
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			return (pp_wire(st, &r, "location", i));
		}
	}
	st->loc_id[i] = fv[1];
	L->mapping_id = fv[2];     /* resolved by pp_link */
	L->address = fv[3];
	return (0);
}

static int
pp_index_alloc(struct pp *st)
{
	st->str = pp_alloc(st, st->nstr, sizeof(*st->str));
	st->st_type = pp_alloc(st, st->ntypes, sizeof(uint32_t));
	st->st_unit = pp_alloc(st, st->ntypes, sizeof(uint32_t));
	st->map_id = pp_alloc(st, st->nmaps, sizeof(uint64_t));
	st->map_file = pp_alloc(st, st->nmaps, sizeof(uint32_t));
	st->func_id = pp_alloc(st, st->nfuncs, sizeof(uint64_t));
	st->func = pp_alloc(st, st->nfuncs, sizeof(*st->func));
	st->loc_id = pp_alloc(st, st->nlocs, sizeof(uint64_t));
	st->loc = pp_alloc(st, st->nlocs, sizeof(*st->loc));
	/* Most locations have one line (Go's inlined calls add more). */
	st->lines_cap = st->nlocs + st->nlocs / 4 + 16;
	st->lines = pp_alloc(st, st->lines_cap, sizeof(uint64_t));
	if (st->str == NULL || st->st_type == NULL || st->st_unit == NULL ||
	    st->map_id == NULL || st->map_file == NULL ||
	    st->func_id == NULL || st->func == NULL || st->loc_id == NULL ||
	    st->loc == NULL || st->lines == NULL)
		return (pp_nomem(st));
	return (0);
}

static int
pp_index(struct pp *st)
{
	struct sm_pbw r = { st->raw, st->raw + st->len, NULL, PB_SCHEMA(pb_s_profile) };
	uint32_t f, ni[7] = { 0 }, line_next = 0;
	const uint8_t *p;
	size_t n;
	int rv, got;

	if ((rv = pp_index_alloc(st)) != 0)
		return (rv);
	/* Pass A validated the top-level framing; the checks stay anyway. */
	while ((got = sm_pbw_next_len(&r, &f, &p, &n)) > 0) {
		if (f < 1 || f > 6 || f == 2)
			continue;
		rv = 0;
		switch (f) {
		case 1: rv = pp_sample_type(st, p, n, ni[f]); break;
		case 3: rv = pp_mapping(st, p, n, ni[f]); break;
		case 4: rv = pp_location(st, p, n, ni[f], &line_next); break;
		case 5: rv = pp_function(st, p, n, ni[f]); break;
		case 6: rv = pp_string(st, p, n, ni[f]); break;
		}
		if (rv != 0)
			return (rv);
		ni[f]++;
	}
	if (got < 0)
		return (pp_wire(st, &r, "Profile", PP_NONE));
	SM_ASSERT(ni[1] == st->ntypes && ni[3] == st->nmaps &&
	    ni[4] == st->nlocs && ni[5] == st->nfuncs && ni[6] == st->nstr);
	st->nlines = line_next;
	return (0);
}

/* --- id maps -------------------------------------------------------------- */

static int
pp_ident_cmp(const void *x, const void *y)
{
	const struct pp_ident *a = x, *b = y;

	return (a->id != b->id ? SM_CMP(a->id, b->id) : SM_CMP(a->idx, b->idx));
}

/*
 * Build an id -> index map over ids[0..n).  Duplicate ids resolve to the
 * first occurrence.  Memory is O(n) whatever the ids are.
 */
static int
pp_idmap_build(struct pp *st, struct pp_idmap *m, const uint64_t *ids,
    uint32_t n)
{
	uint64_t max = 0;

	memset(m, 0, sizeof(*m));
	for (uint32_t i = 0; i < n; i++)
		max = SM_MAX(max, ids[i]);
	if (max <= 4 * (uint64_t)n + 16) {
		m->ndirect = max + 1;
		m->direct = sm_arena_calloc(st->a, (size_t)m->ndirect,
		    sizeof(uint32_t));
		if (m->direct == NULL)
			return (pp_nomem(st));
		for (uint32_t i = n; i-- > 0;)
			m->direct[ids[i]] = i + 1;
		return (0);
	}
	m->sorted = pp_alloc(st, n, sizeof(*m->sorted));
	if (m->sorted == NULL)
		return (pp_nomem(st));
	for (uint32_t i = 0; i < n; i++) {
		m->sorted[i].id = ids[i];
		m->sorted[i].idx = i;
	}
	qsort(m->sorted, n, sizeof(*m->sorted), pp_ident_cmp);
	m->nsorted = n;
	return (0);
}

/* Index of `id`, or PP_NONE.  Id 0 is never found. */
static inline uint32_t
pp_idmap_get(const struct pp_idmap *m, uint64_t id)
{
	uint32_t lo;

	if (id == 0)
		return (PP_NONE);
	if (m->direct != NULL)
		return (id < m->ndirect ? m->direct[id] - 1 : PP_NONE);
	SM_LOWER_BOUND(lo, m->nsorted, mid, m->sorted[mid].id < id);
	if (lo < m->nsorted && m->sorted[lo].id == id)
		return (m->sorted[lo].idx);
	return (PP_NONE);
}

/*
 * Spy fixes, id checks, id maps, line -> function and location -> mapping
 * resolution, frame slots.
 */
static int
pp_link(struct pp *st)
{
	uint32_t frame_next = 0;
	int rv;

	if (st->dotnet && st->nfuncs == st->nlocs) {
		/* FixFunctionIDForBrokenDotnet: all function ids 0. */
		uint32_t i;

		for (i = 0; i < st->nfuncs && st->func_id[i] == 0; i++)
			;
		if (i == st->nfuncs) {
			for (i = 0; i < st->nfuncs; i++)
				st->func_id[i] = st->loc_id[i];
		}
	}
	for (uint32_t i = 0; i < st->nlocs; i++) {
		if (st->loc_id[i] == 0)
			return (pp_malformed(st, "location[%" PRIu32 "] has "
			    "id 0", i));
	}
	for (uint32_t i = 0; i < st->nfuncs; i++) {
		if (st->func_id[i] == 0)
			return (pp_malformed(st, "function[%" PRIu32 "] has "
			    "id 0 (function id is 0)", i));
	}
	if ((rv = pp_idmap_build(st, &st->mmap, st->map_id, st->nmaps)) != 0 ||
	    (rv = pp_idmap_build(st, &st->fmap, st->func_id, st->nfuncs)) != 0 ||
	    (rv = pp_idmap_build(st, &st->lmap, st->loc_id, st->nlocs)) != 0)
		return (rv);
	for (uint32_t i = 0; i < st->nlocs; i++) {
		struct pp_loc *L = &st->loc[i];

		L->mapping = pp_idmap_get(&st->mmap, L->mapping_id);
		for (uint32_t k = 0; k < L->nlines; k++) {
			uint64_t *fl = &st->lines[L->line_off + k];
			uint32_t fi = pp_idmap_get(&st->fmap, *fl);

			if (fi == PP_NONE)
				return (pp_malformed(st, "location[%" PRIu32
				    "] (id %" PRIu64 ") line[%" PRIu32 "] "
				    "references unknown function id %" PRIu64,
				    i, st->loc_id[i], k, *fl));
			*fl = fi;
		}
		L->nframes = SM_MAX(L->nlines, 1);
		L->frame_off = frame_next;
		frame_next += L->nframes;
	}
	st->nframes = frame_next;
	st->frames = pp_alloc(st, frame_next, sizeof(uint32_t));
	st->lf = pp_alloc(st, st->nlocs, sizeof(uint32_t));
	if (st->frames == NULL || st->lf == NULL)
		return (pp_nomem(st));
	memset(st->lf, 0xff, (size_t)st->nlocs * sizeof(uint32_t));
	return (0);
}

/* --- metric and type labels ----------------------------------------------- */

static const struct dist_st_config pp_default_st[] = {
	{ "samples", "cpu" },
	{ "goroutine", "goroutines" },
	{ "contentions", "mutex_count" },
	{ "delay", "mutex_duration" },
};

const char *
dist_pprof_metric(const char *const *types, uint32_t ntypes,
    const struct dist_st_config *cfg, uint32_t ncfg)
{
	const char *st = "";

	if (cfg == NULL) {
		cfg = pp_default_st;
		ncfg = SM_ARRAY_LEN(pp_default_st);
	}
	for (uint32_t i = 0; i < ntypes; i++) {
		if (strcmp(types[i], "wall") == 0)
			return ("wall");
	}
	/* Pyroscope's metricName: per type, display name, then substring
	 * tests in this order; the last (display) name when none match. */
	for (uint32_t i = 0; i < ntypes; i++) {
		st = types[i];
		for (uint32_t k = ncfg; k-- > 0;) {
			if (cfg[k].sample_type != NULL &&
			    strcmp(cfg[k].sample_type, types[i]) == 0) {
				if (cfg[k].display_name != NULL &&
				    cfg[k].display_name[0] != '\0')
					st = cfg[k].display_name;
				break;
			}
		}
		if (strstr(st, "cpu") != NULL)
			return ("process_cpu");
		if (strstr(st, "alloc_") != NULL ||
		    strstr(st, "inuse_") != NULL || strcmp(st, "space") == 0 ||
		    strcmp(st, "objects") == 0)
			return ("memory");
		if (strstr(st, "mutex_") != NULL)
			return ("mutex");
		if (strstr(st, "block_") != NULL)
			return ("block");
		if (strstr(st, "goroutines") != NULL)
			return ("goroutines");
	}
	return (st);
}

/*
 * NUL-terminated copy of string i, made once per index: many sample types
 * or labels may name one long string, and copying per use would let a
 * small profile claim memory quadratic in its size.
 */
static char *
pp_cstr(struct pp *st, uint32_t i)
{
	uint32_t n;
	const char *s;

	if (st->cstr == NULL &&
	    (st->cstr = sm_arena_calloc(st->a, st->nstr, sizeof(char *))) ==
	    NULL)
		return (NULL);
	if (st->cstr[i] == NULL) {
		s = pp_s(st, i, &n);
		st->cstr[i] = sm_arena_strndup(st->a, s, n);
	}
	return (st->cstr[i]);
}

/*
 * Sample type names (dotnet fix, '-' check), the metric, and the six type
 * labels of every sample type.
 */
static int
pp_types(struct pp *st)
{
	const struct dist_pprof_in *in = st->in;
	uint32_t vmax = st->lim->labels.max_value_length;
	char **names, *ptype, *punit;
	const char *metric;

	names = pp_alloc(st, st->ntypes, sizeof(*names));
	st->tlab = pp_alloc(st, (size_t)st->ntypes * PP_NTYPE_LABELS,
	    sizeof(*st->tlab));
	ptype = pp_cstr(st, (uint32_t)st->ptype);
	punit = pp_cstr(st, (uint32_t)st->punit);
	if (names == NULL || st->tlab == NULL || ptype == NULL ||
	    punit == NULL)
		return (pp_nomem(st));
	for (uint32_t t = 0; t < st->ntypes; t++) {
		if ((names[t] = pp_cstr(st, st->st_type[t])) == NULL)
			return (pp_nomem(st));
		for (char *c = names[t]; st->dotnet && *c != '\0'; c++) {
			if (*c == '-')
				*c = '_';
		}
		if (strchr(names[t], '-') != NULL)
			return (pp_malformed(st, "sample_type[%" PRIu32 "] "
			    "\"%.64s\" contains '-' (sample type contains -)", t,
			    names[t]));
	}
	metric = in->metric != NULL ? in->metric :
	    dist_pprof_metric((const char *const *)names, st->ntypes,
	    in->st_config, in->nst_config);
	for (uint32_t t = 0; t < st->ntypes; t++) {
		struct sm_label *l = &st->tlab[t * PP_NTYPE_LABELS];
		char *unit = pp_cstr(st, st->st_unit[t]), *pt;
		size_t n;

		if (unit == NULL)
			return (pp_nomem(st));
		n = strlen(metric) + strlen(names[t]) + strlen(unit) +
		    strlen(ptype) + strlen(punit) + 5;
		/* A value longer than the label limit only has to be long
		 * enough to fail validation (with the same message). */
		if (vmax != 0 && n > (size_t)vmax + 2)
			n = (size_t)vmax + 2;
		if ((pt = sm_arena_alloc(st->a, n)) == NULL)
			return (pp_nomem(st));
		snprintf(pt, n, "%s:%s:%s:%s:%s", metric, names[t], unit,
		    ptype, punit);
		l[0] = (struct sm_label){ SM_LABEL_NAME, metric };
		l[1] = (struct sm_label){ SM_LABEL_TYPE, names[t] };
		l[2] = (struct sm_label){ SM_LABEL_UNIT, unit };
		l[3] = (struct sm_label){ SM_LABEL_PERIOD_TYPE, ptype };
		l[4] = (struct sm_label){ SM_LABEL_PERIOD_UNIT, punit };
		l[5] = (struct sm_label){ SM_LABEL_PROFILE_TYPE, pt };
	}
	return (0);
}

/* --- frames --------------------------------------------------------------- */

static char *
pp_tmp(struct pp *st, size_t n)
{
	if (n > st->tmp_cap) {
		size_t cap = SM_MAX(n, 2 * st->tmp_cap);

		if ((st->tmp = sm_arena_alloc(st->a, cap)) == NULL)
			return (NULL);
		st->tmp_cap = cap;
	}
	return (st->tmp);
}

static int
pp_intern(struct pp *st, const char *s, size_t n, uint32_t *id)
{
	/* Every frame name here is made of string_table entries (checked
	 * in pass B) and ASCII. */
	int rv = dist_batch_frame_utf8(st->b, s, n, id);

	if (rv == SM_ENOMEM)
		return (pp_nomem(st));
	if (rv == SM_EMALFORMED)
		return (sm_err_set(st->err, rv, "a frame name contains a NUL "
		    "byte"));
	if (rv != 0)
		return (sm_err_set(st->err, rv, "cannot intern a frame name "
		    "of %zu bytes", n));
	return (0);
}

/* The frame name of function `fi`: name, else system_name; renamed for
 * scripting spies. */
static int
pp_func_frame(struct pp *st, uint32_t fi, uint32_t *id)
{
	struct pp_func *F = &st->func[fi];
	const char *name, *file;
	uint32_t nn, fn;
	int rv;

	if (F->frame != PP_NONE) {
		*id = F->frame;
		return (0);
	}
	name = pp_s(st, F->name, &nn);
	if (nn == 0)
		name = pp_s(st, F->sysname, &nn);
	if (st->scripting) {
		static const char mid[] = ":-1 - ";
		size_t n;
		char *t;

		file = pp_s(st, F->filename, &fn);
		n = (size_t)fn + sizeof(mid) - 1 + nn;
		if ((t = pp_tmp(st, n)) == NULL)
			return (pp_nomem(st));
		memcpy(t, file, fn);
		memcpy(t + fn, mid, sizeof(mid) - 1);
		memcpy(t + fn + sizeof(mid) - 1, name, nn);
		name = t;
		nn = (uint32_t)n;
	}
	if ((rv = pp_intern(st, name, nn, &F->frame)) != 0)
		return (rv);
	*id = F->frame;
	return (0);
}

/* "0x<addr>" or "0x<addr> [<mapping file basename>]". */
static int
pp_addr_frame(struct pp *st, const struct pp_loc *L, uint32_t *id)
{
	const char *file = "", *base;
	uint32_t fn = 0;
	size_t bn, n;
	char *t;

	if (L->mapping != PP_NONE)
		file = pp_s(st, st->map_file[L->mapping], &fn);
	base = file;
	for (uint32_t k = 0; k < fn; k++) {
		if (file[k] == '/')
			base = file + k + 1;
	}
	bn = (size_t)(file + fn - base);
	if ((t = pp_tmp(st, bn + 24)) == NULL)
		return (pp_nomem(st));
	n = (size_t)snprintf(t, 24, "0x%" PRIx64, L->address);
	if (bn != 0) {
		t[n++] = ' ';
		t[n++] = '[';
		memcpy(t + n, base, bn);
		n += bn;
		t[n++] = ']';
	}
	return (pp_intern(st, t, n, id));
}

/* Fill location li's frames, root first (last Line first). */
static int
pp_loc_frames(struct pp *st, uint32_t li)
{
	struct pp_loc *L = &st->loc[li];
	uint32_t *fr = &st->frames[L->frame_off];
	int rv;

	if (L->nlines == 0) {
		if ((rv = pp_addr_frame(st, L, &fr[0])) != 0)
			return (rv);
	} else {
		for (uint32_t k = 0; k < L->nlines; k++) {
			uint32_t fi = (uint32_t)st->lines[L->line_off +
			    L->nlines - 1 - k];

			if ((rv = pp_func_frame(st, fi, &fr[k])) != 0)
				return (rv);
		}
	}
	st->lf[li] = L->nframes == 1 ? fr[0] : PP_MULTI;
	return (0);
}

/* --- stacks --------------------------------------------------------------- */

/*
 * The walk's path table: the frame path from the root to a node, hashed
 * frame by frame (pp_path_step, an ALU chain that reads no memory), maps
 * to that node.  A probe's address so depends on the frames alone, not on
 * the node found one frame up, and the probes of a stack overlap their
 * cache misses, where sm_tree_child's (parent, name) key makes each probe
 * wait for the one before.  It is an sm_oatab keyed by the hash's high
 * half (the multiply leaves the low bits weak), and a tag match is
 * confirmed against the tree itself (the node's frame and parent), so a
 * collision costs a probe, never a wrong node.
 *
 * Every node this decode walks to is in the table, so a miss proves the
 * node new unless it may predate the decode: only a child of a node that
 * predates it (id < tree_base, the batch's size at the start) and only
 * when the batch held more than the root.  Such a child goes through
 * sm_tree_child; every other is appended without touching the tree's
 * index (sm_tree_append), which is built only if a lookup ever follows.
 */
#define PP_PATH_SEED 0x9e3779b97f4a7c15ULL
#define PP_PATH_MUL 0xff51afd7ed558ccdULL

static inline uint64_t
pp_path_step(uint64_t h, uint32_t name)
{
	return ((h ^ name) * PP_PATH_MUL);
}

/* The miss path: create (or, when it may predate the decode, find) the
 * child of `parent` and record it under h.  Returns the node, or 0 with
 * the error code in *rv. */
static uint32_t __attribute__((noinline))
pp_path_add(struct pp *st, uint64_t h, uint32_t name, uint32_t parent,
    int *rv)
{
	struct sm_oatab_it it;
	uint32_t nd;

	/* Room first, so that no node is made that the table then lacks
	 * (a later walk would append its twin). */
	if (sm_oatab_reserve(&st->path, st->path.n + 1) != 0) {
		*rv = pp_nomem(st);
		return (0);
	}
	/* Probe again to the empty slot (cached now): passing the hot
	 * loop's iterator out would keep it in memory there. */
	sm_oatab_probe(&st->path, h >> 32, &it);
	while (sm_oatab_next(&st->path, &it) != SM_OATAB_NONE)
		;
	if (parent >= st->tree_base || st->tree_base == 1)
		*rv = dist_batch_append(st->b, parent, name, &nd);
	else
		*rv = dist_batch_node(st->b, parent, name, &nd);
	if (*rv != 0) {
		*rv = *rv == SM_ENOMEM ? pp_nomem(st) :
		    sm_err_set(st->err, *rv, "stack tree too large");
		return (0);
	}
	(void)sm_oatab_insert(&st->path, &it, nd);   /* reserved above */
	return (nd);
}

/* The child of `parent` for frame `name`, whose path hashes to h; 0 with
 * the error code in *rv. */
static inline uint32_t
pp_walk(struct pp *st, uint64_t h, uint32_t name, uint32_t parent, int *rv)
{
	const uint32_t *tp = st->b->tree.parent, *tn = st->b->tree.name;
	struct sm_oatab_it it;
	uint32_t nd;

	for (sm_oatab_probe(&st->path, h >> 32, &it);
	    (nd = sm_oatab_next(&st->path, &it)) != SM_OATAB_NONE;)
		if (tn[nd] == name && tp[nd] == parent)
			return (nd);
	return (pp_path_add(st, h, name, parent, rv));
}

static int
pp_path_reserve(struct pp *st, uint32_t n)
{
	uint32_t cap;

	if (n <= st->path_cap)
		return (0);
	cap = SM_MAX(n, 2 * st->path_cap);
	st->ploc = sm_arena_grow(st->a, st->ploc, st->npath, cap,
	    sizeof(uint32_t));
	st->pnode = sm_arena_grow(st->a, st->pnode, st->npath, cap,
	    sizeof(uint32_t));
	st->pdepth = sm_arena_grow(st->a, st->pdepth, st->npath, cap,
	    sizeof(uint32_t));
	st->phash = sm_arena_grow(st->a, st->phash, st->npath, cap,
	    sizeof(uint64_t));
	if (st->ploc == NULL || st->pnode == NULL || st->pdepth == NULL ||
	    st->phash == NULL)
		return (pp_nomem(st));
	st->path_cap = cap;
	return (0);
}

/*
 * Leaf node of the current sample (st->sloc, leaf first), walking root
 * first and capping the depth at max_depth frames (root side kept).
 */
static int
pp_stack(struct pp *st, uint32_t *leaf)
{
	uint32_t n = st->nsloc, max = st->lim->max_depth;
	uint32_t k = 0, node = 0, depth = 0;
	uint64_t h = PP_PATH_SEED;
	int rv;

	if ((rv = pp_path_reserve(st, n)) != 0)
		return (rv);
	/* Reuse the previous sample's common root-side path. */
	while (k < n && k < st->npath && st->ploc[k] == st->sloc[n - 1 - k])
		k++;
	if (k > 0) {
		node = st->pnode[k - 1];
		depth = st->pdepth[k - 1];
		h = st->phash[k - 1];
	}
	for (; k < n; k++) {
		uint32_t li = st->sloc[n - 1 - k], f = st->lf[li];

		if (SM_UNLIKELY(f == PP_NONE)) {
			if ((rv = pp_loc_frames(st, li)) != 0)
				return (rv);
			f = st->lf[li];
		}
		if (SM_LIKELY(f != PP_MULTI)) {
			/* One frame: the common case. */
			if (max != 0 && depth >= max)
				break;
			h = pp_path_step(h, f);
			if ((node = pp_walk(st, h, f, node, &rv)) == 0)
				return (rv);
			depth++;
		} else {
			const struct pp_loc *L = &st->loc[li];
			const uint32_t *fr = &st->frames[L->frame_off];
			uint32_t m = L->nframes;
			bool partial = max != 0 && depth + m > max;

			if (partial)
				m = max - depth;
			for (uint32_t j = 0; j < m; j++) {
				h = pp_path_step(h, fr[j]);
				if ((node = pp_walk(st, h, fr[j], node,
				    &rv)) == 0)
					return (rv);
			}
			depth += m;
			/* A partial location is not recorded in the path. */
			if (partial)
				break;
		}
		st->ploc[k] = li;
		st->pnode[k] = node;
		st->pdepth[k] = depth;
		st->phash[k] = h;
	}
	st->npath = k;
	*leaf = node;
	return (0);
}

/* --- label groups --------------------------------------------------------- */

static int
pp_str_cmp(const struct pp *st, uint32_t a, uint32_t b)
{
	uint32_t na, nb;
	const char *sa = pp_s(st, a, &na), *sb = pp_s(st, b, &nb);

	return (sm_bytes_cmp(sa, na, sb, nb));
}

static int
pp_lab_cmp(const void *x, const void *y, void *arg)
{
	const struct pp_lab *a = x, *b = y;
	int c = a->key == b->key ? 0 : pp_str_cmp(arg, a->key, b->key);

	return (c != 0 ? c : SM_CMP(a->pos, b->pos));
}

/*
 * Canonicalise the sample's string labels in place: sorted by key bytes,
 * one label per key (the first one given wins).
 */
static void
pp_labels_canon(struct pp *st)
{
	struct pp_lab *v = st->slab;
	uint32_t n = st->nslab, out = 0;

	if (n <= 1)
		return;
	if (n <= 8) {
		for (uint32_t i = 1; i < n; i++) {
			struct pp_lab x = v[i];
			uint32_t j = i;

			while (j > 0 && pp_lab_cmp(&v[j - 1], &x, st) > 0) {
				v[j] = v[j - 1];
				j--;
			}
			v[j] = x;
		}
	} else {
		qsort_r(v, n, sizeof(*v), pp_lab_cmp, st);
	}
	for (uint32_t i = 0; i < n; i++) {
		if (out > 0 && (v[out - 1].key == v[i].key ||
		    pp_str_cmp(st, v[out - 1].key, v[i].key) == 0))
			continue;
		v[out++] = v[i];
	}
	st->nslab = out;
}

static int
pp_group_add(struct pp *st, const uint32_t *pairs, uint32_t n, uint64_t h,
    struct sm_oatab_it *it, uint32_t *gi)
{
	struct pp_group *g;

	if (st->ngroups == st->groups_cap) {
		uint32_t cap = st->groups_cap ? st->groups_cap * 2 : 16;

		st->groups = sm_arena_grow(st->a, st->groups, st->ngroups,
		    cap, sizeof(*st->groups));
		if (st->groups == NULL)
			return (pp_nomem(st));
		st->groups_cap = cap;
	}
	if (st->ngpairs + n > st->gpairs_cap) {
		uint32_t cap = SM_MAX(st->ngpairs + n, 2 * st->gpairs_cap);

		st->gpairs = sm_arena_grow(st->a, st->gpairs,
		    2 * (size_t)st->ngpairs, 2 * (size_t)cap, sizeof(uint32_t));
		if (st->gpairs == NULL)
			return (pp_nomem(st));
		st->gpairs_cap = cap;
	}
	if (sm_oatab_insert(&st->gtab, it, st->ngroups) != 0)
		return (pp_nomem(st));
	g = &st->groups[st->ngroups];
	g->h = h;
	g->off = st->ngpairs;
	g->n = n;
	g->series = pp_alloc(st, st->ntypes, sizeof(uint32_t));
	if (g->series == NULL)
		return (pp_nomem(st));
	memset(g->series, 0xff, (size_t)st->ntypes * sizeof(uint32_t));
	if (n != 0)
		memcpy(&st->gpairs[2 * (size_t)st->ngpairs], pairs,
		    2 * (size_t)n * sizeof(uint32_t));
	st->ngpairs += n;
	*gi = st->ngroups++;
	return (0);
}

/* Group of the current sample's (canonical) string labels. */
static int
pp_group(struct pp *st, uint32_t *gi)
{
	uint32_t n = st->nslab, i, v;
	struct sm_oatab_it it;
	uint32_t *pairs;
	uint64_t h;

	if (n == 0) {
		*gi = 0;
		return (0);
	}
	pairs = st->spair;
	for (i = 0; i < n; i++) {
		pairs[2 * i] = st->slab[i].key;
		pairs[2 * i + 1] = st->slab[i].str;
	}
	h = sm_hash(pairs, 2 * (size_t)n * sizeof(uint32_t));
	for (sm_oatab_probe(&st->gtab, h, &it);
	    (v = sm_oatab_next(&st->gtab, &it)) != SM_OATAB_NONE;) {
		const struct pp_group *g = &st->groups[v];

		if (g->h == h && g->n == n && memcmp(&st->gpairs[2 *
		    (size_t)g->off], pairs, 2 * (size_t)n *
		    sizeof(uint32_t)) == 0) {
			*gi = v;
			return (0);
		}
	}
	return (pp_group_add(st, pairs, n, h, &it, gi));
}

/*
 * Create the series of group gi for type t.  Label priority on a name
 * conflict: the type labels (they define the series' profile type), then
 * the base labels, then the sample's labels.
 */
static int
pp_series(struct pp *st, uint32_t gi, uint32_t t, uint32_t *idx)
{
	const struct pp_group *g = &st->groups[gi];
	const struct dist_pprof_in *in = st->in;
	size_t cap = PP_NTYPE_LABELS + (size_t)in->nbase + g->n;
	struct sm_label *ls = pp_alloc(st, cap, sizeof(*ls));
	uint32_t n = PP_NTYPE_LABELS;
	int rv;

	if (ls == NULL)
		return (pp_nomem(st));
	memcpy(ls, &st->tlab[t * PP_NTYPE_LABELS],
	    PP_NTYPE_LABELS * sizeof(*ls));
	for (uint32_t i = 0; i < in->nbase; i++) {
		if (sm_labels_get(ls, n, in->base[i].name) == NULL)
			ls[n++] = in->base[i];
	}
	for (uint32_t i = 0; i < g->n; i++) {
		const uint32_t *pr = &st->gpairs[2 * ((size_t)g->off + i)];
		char *k = pp_cstr(st, pr[0]), *v = pp_cstr(st, pr[1]);

		if (k == NULL || v == NULL)
			return (pp_nomem(st));
		if (sm_labels_get(ls, n, k) == NULL)
			ls[n++] = (struct sm_label){ k, v };
	}
	rv = dist_batch_series(st->b, ls, n, in->time_ms, idx, st->err);
	if (rv == SM_ENOMEM)
		return (pp_nomem(st));
	return (rv);
}

/* --- pass C: samples ------------------------------------------------------ */

static bool
pp_label_is_exemplar(const struct pp *st, uint32_t key)
{
	uint32_t n;
	const char *s = pp_s(st, key, &n);

	switch (n) {
	case 7:
		return (memcmp(s, "span_id", 7) == 0);
	case 8:
		return (memcmp(s, "trace_id", 8) == 0);
	case 10:
		return (memcmp(s, "profile_id", 10) == 0);
	default:
		return (false);
	}
}

/*
 * Note the span id of the sample from an exemplar label `key` = `str`.  A
 * span id value is exactly 16 hex digits, the 8 bytes of an OpenTelemetry
 * span id (pyroscope-go's otelpyroscope writes them so), read big-endian
 * (sm_hex_u64).  Anything else is not a span id and is not stored as one.
 */
static void
pp_sample_span(struct pp *st, uint32_t key, uint32_t str)
{
	uint32_t kn, vn;
	const char *k = pp_s(st, key, &kn), *v = pp_s(st, str, &vn);
	int from = kn == 7 && memcmp(k, "span_id", 7) == 0 ? 2 :
	    kn == 10 && memcmp(k, "profile_id", 10) == 0 ? 1 : 0;
	uint64_t id;

	if (from > st->span_from && sm_hex_u64(v, vn, &id)) {
		st->span = id;
		st->span_from = from;
	}
}

static int
pp_sample_label(struct pp *st, const uint8_t *p, size_t n, uint32_t si)
{
	struct sm_pbw r = { p, p + n, NULL, PB_SCHEMA(pb_s_label) };
	uint64_t key = 0, str = 0, v;
	uint32_t f, wt, lim = st->lim->max_sample_labels;
	uint32_t li = st->nlabels++;

	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			goto bad;
		if ((f == 1 || f == 2) && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				goto bad;
			if (f == 1)
				key = v;
			else
				str = v;
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			goto bad;
		}
	}
	if (key >= st->nstr || str >= st->nstr)
		return (pp_malformed(st, "sample[%" PRIu32 "].label[%" PRIu32
		    "].%s: string index %" PRId64 " out of range "
		    "(string_table has %" PRIu32 " entries)", si, li,
		    key >= st->nstr ? "key" : "str",
		    (int64_t)(key >= st->nstr ? key : str), st->nstr));
	if (str != 0 && pp_label_is_exemplar(st, (uint32_t)key)) {
		pp_sample_span(st, (uint32_t)key, (uint32_t)str);
		return (0);
	}
	if (str == 0 || (lim != 0 && st->nlabels > lim) ||
	    pp_label_is_exemplar(st, (uint32_t)key))
		return (0);   /* numeric, over the limit, or exemplar */
	if (st->nslab == st->slab_cap) {
		uint32_t cap = st->slab_cap ? st->slab_cap * 2 : 16;

		st->slab = sm_arena_grow(st->a, st->slab, st->nslab, cap,
		    sizeof(*st->slab));
		st->spair = pp_alloc(st, 2 * (size_t)cap, sizeof(uint32_t));
		if (st->slab == NULL || st->spair == NULL)
			return (pp_nomem(st));
		st->slab_cap = cap;
	}
	st->slab[st->nslab++] = (struct pp_lab){ (uint32_t)key,
	    (uint32_t)str, li };
	return (0);
bad:
	return (pp_malformed(st, "sample[%" PRIu32 "].label[%" PRIu32 "]: "
	    "%s (byte %zu)", si, li, r.why, (size_t)(r.p - st->raw)));
}

static int
pp_unknown_loc(struct pp *st, uint32_t si, uint64_t id)
{
	return (pp_malformed(st, "sample[%" PRIu32 "] references unknown "
	    "location id %" PRIu64, si, id));
}

static inline int
pp_push_loc(struct pp *st, uint64_t id, uint32_t si)
{
	uint32_t li = pp_idmap_get(&st->lmap, id);

	if (SM_UNLIKELY(li == PP_NONE))
		return (pp_unknown_loc(st, si, id));
	if (SM_UNLIKELY(st->nsloc == st->sloc_cap)) {
		uint32_t cap = st->sloc_cap ? st->sloc_cap * 2 : 64;

		st->sloc = sm_arena_grow(st->a, st->sloc, st->nsloc, cap,
		    sizeof(*st->sloc));
		if (st->sloc == NULL)
			return (pp_nomem(st));
		st->sloc_cap = cap;
	}
	st->sloc[st->nsloc++] = li;
	return (0);
}

/*
 * A packed run of location ids (Sample field 1): room for all of them
 * first (each takes at least a byte), then one tight loop.  0; 1 for a
 * bad varint, with r->p and r->why where it failed; or the error code
 * set in st->err (an unknown id, out of memory).
 */
static int
pp_push_locs(struct pp *st, struct sm_pbw *r, uint32_t si)
{
	uint32_t *out, li;
	size_t room = (size_t)(r->end - r->p);
	uint64_t id;

	if (room == 0)
		return (0);     /* sloc may still be NULL: no pointer to form */
	if (SM_UNLIKELY(st->nsloc + room > st->sloc_cap)) {
		size_t cap = SM_MAX(st->nsloc + room, 2 * (size_t)st->sloc_cap);

		if (cap > UINT32_MAX)
			return (pp_nomem(st));
		st->sloc = sm_arena_grow(st->a, st->sloc, st->nsloc, cap,
		    sizeof(*st->sloc));
		if (st->sloc == NULL)
			return (pp_nomem(st));
		st->sloc_cap = (uint32_t)cap;
	}
	out = st->sloc + st->nsloc;
	while (r->p < r->end) {
		if (sm_pbw_varint(r, &id) != 0) {
			st->nsloc = (uint32_t)(out - st->sloc);
			return (1);
		}
		if (SM_UNLIKELY((li = pp_idmap_get(&st->lmap, id)) ==
		    PP_NONE))
			return (pp_unknown_loc(st, si, id));
		*out++ = li;
	}
	st->nsloc = (uint32_t)(out - st->sloc);
	return (0);
}

static inline void
pp_push_val(struct pp *st, uint64_t v)
{
	if (st->nsval < st->ntypes)
		st->sval[st->nsval] = (int64_t)v;
	if (st->nsval != UINT32_MAX)
		st->nsval++;
}

/* Decode Sample si into the scratch arrays. */
static int
pp_sample_decode(struct pp *st, const uint8_t *p, size_t n, uint32_t si)
{
	struct sm_pbw r = { p, p + n, NULL, PB_SCHEMA(pb_s_sample) };
	uint32_t f, wt;
	uint64_t v;
	int rv;

	st->nsloc = st->nsval = st->nslab = st->nlabels = 0;
	st->span_from = 0;
	while (r.p < r.end) {
		if (sm_pbw_key(&r, &f, &wt) != 0)
			goto bad;
		if ((f == 1 || f == 2) && wt == SM_PBW_LEN) {
			const uint8_t *q;
			size_t qn;
			struct sm_pbw s;

			if (sm_pbw_bytes(&r, &q, &qn) != 0)
				goto bad;
			s = (struct sm_pbw){ q, q + qn, NULL, NULL, 0 };
			if (f == 1) {
				if ((rv = pp_push_locs(st, &s, si)) == 1) {
					r = s;
					goto bad;
				}
				if (rv != 0)
					return (rv);
				continue;
			}
			while (s.p < s.end) {
				if (sm_pbw_varint(&s, &v) != 0) {
					r = s;
					goto bad;
				}
				if (f == 2)
					pp_push_val(st, v);
				else if ((rv = pp_push_loc(st, v, si)) != 0)
					return (rv);
			}
		} else if ((f == 1 || f == 2) && wt == SM_PBW_VARINT) {
			if (sm_pbw_varint(&r, &v) != 0)
				goto bad;
			if (f == 2)
				pp_push_val(st, v);
			else if ((rv = pp_push_loc(st, v, si)) != 0)
				return (rv);
		} else if (f == 3 && wt == SM_PBW_LEN) {
			const uint8_t *q;
			size_t qn;

			if (sm_pbw_bytes(&r, &q, &qn) != 0)
				goto bad;
			if ((rv = pp_sample_label(st, q, qn, si)) != 0)
				return (rv);
		} else if (sm_pbw_skip(&r, f, wt) != 0) {
			goto bad;
		}
	}
	return (0);
bad:
	return (pp_wire(st, &r, "sample", si));
}

static int
pp_sample(struct pp *st, const uint8_t *p, size_t n, uint32_t si)
{
	uint32_t lim = st->lim->max_sample_labels, gi, leaf, t;
	bool any = false;
	int rv;

	if ((rv = pp_sample_decode(st, p, n, si)) != 0)
		return (rv);
	if (st->nsval != st->ntypes)
		return (pp_malformed(st, "sample[%" PRIu32 "] has %" PRIu32
		    " values but the profile has %" PRIu32 " sample types",
		    si, st->nsval, st->ntypes));
	if (lim != 0 && st->nlabels > lim)
		return (pp_malformed(st, "sample[%" PRIu32 "] has %" PRIu32
		    " labels, more than the limit of %" PRIu32
		    " (max_profile_stacktrace_sample_labels)", si,
		    st->nlabels, lim));
	for (t = 0; t < st->ntypes && !any; t++)
		any = st->sval[t] != 0;
	if (st->nsloc == 0 || !any)
		return (0);
	pp_labels_canon(st);
	if ((rv = pp_group(st, &gi)) != 0)
		return (rv);
	if ((rv = pp_stack(st, &leaf)) != 0)
		return (rv);
	for (t = 0; t < st->ntypes; t++) {
		uint32_t *sidx = &st->groups[gi].series[t];

		if (st->sval[t] == 0)
			continue;
		if (*sidx == PP_NONE && (rv = pp_series(st, gi, t, sidx)) != 0)
			return (rv);
		if (dist_batch_add(st->b, *sidx, leaf, st->sval[t]) != 0 ||
		    (st->span_from != 0 && dist_batch_span(st->b, *sidx, leaf,
		    st->sval[t], st->span) != 0))
			return (pp_nomem(st));
	}
	return (0);
}

static int
pp_samples(struct pp *st)
{
	struct sm_pbw r = { st->raw, st->raw + st->len, NULL, PB_SCHEMA(pb_s_profile) };
	struct sm_oatab_it it;
	const uint8_t *p;
	size_t n;
	uint32_t f, si = 0, g0;
	int rv, got;

	st->sval = pp_alloc(st, st->ntypes, sizeof(*st->sval));
	sm_oatab_init_arena(&st->gtab, 16, st->a);
	if (st->sval == NULL || sm_oatab_reserve(&st->gtab, 1) != 0)
		return (pp_nomem(st));
	/* Group 0: no string labels. */
	sm_oatab_probe(&st->gtab, 0, &it);
	(void)sm_oatab_next(&st->gtab, &it);
	if ((rv = pp_group_add(st, NULL, 0, 0, &it, &g0)) != 0)
		return (rv);
	while ((got = sm_pbw_next_len(&r, &f, &p, &n)) > 0) {
		if (f == 2 && (rv = pp_sample(st, p, n, si++)) != 0)
			return (rv);
	}
	return (got < 0 ? pp_wire(st, &r, "Profile", PP_NONE) : 0);
}

/* --- entry point ---------------------------------------------------------- */

static int
pp_samples_limit(struct pp *st)
{
	const struct dist_pprof_in *in = st->in;
	struct sm_label *ls = pp_alloc(st, in->nbase, sizeof(*ls));
	struct sm_buf buf = SM_BUF_INIT;
	int rv;

	if (ls == NULL)
		return (pp_nomem(st));
	if (in->nbase != 0)
		memcpy(ls, in->base, in->nbase * sizeof(*ls));
	sm_labels_sort(ls, in->nbase);
	buf.limit = 256;
	sm_labels_format(ls, in->nbase, &buf);
	rv = sm_err_set(st->err, SM_ELIMIT, "the profile with labels '%s' "
	    "exceeds the samples count limit (max_profile_stacktrace_samples, "
	    "actual: %" PRIu32 ", limit: %" PRIu32 ")",
	    sm_buf_error(&buf) == 0 && buf.b != NULL ? buf.b : "{...}",
	    st->nsamples, st->lim->max_samples);
	sm_buf_fini(&buf);
	return (rv);
}

static bool
pp_spy_is(const char *spy, const char *name)
{
	return (spy != NULL && strcmp(spy, name) == 0);
}

int
dist_pprof_ingest(const uint8_t *raw, size_t len,
    const struct dist_pprof_in *in, struct dist_batch *b, struct sm_err *err)
{
	struct pp st;
	int rv;

	SM_ASSERT(in != NULL && b != NULL && (raw != NULL || len == 0));
	SM_ASSERT(!b->finished);
	memset(&st, 0, sizeof(st));
	st.raw = raw;
	st.len = len;
	st.in = in;
	st.b = b;
	st.a = b->arena;
	st.err = err;
	st.lim = b->limits;
	st.scripting = pp_spy_is(in->spy_name, "pyspy") ||
	    pp_spy_is(in->spy_name, "rbspy") ||
	    pp_spy_is(in->spy_name, "scripting");
	st.dotnet = pp_spy_is(in->spy_name, "dotnetspy");
	/* String offsets are 32-bit; 4 GiB is far past any profile limit. */
	if (len > UINT32_MAX)
		return (pp_malformed(&st, "profile of %zu bytes is larger "
		    "than 4 GiB", len));
	if ((rv = pp_count(&st)) != 0)
		return (rv);
	if (st.ntypes == 0)
		return (pp_malformed(&st, "empty profile (no sample types)"));
	if (st.lim->max_samples != 0 && st.nsamples > st.lim->max_samples)
		return (pp_samples_limit(&st));
	if (st.nstr == 0)
		return (pp_malformed(&st, "string_table is empty "
		    "(string_table[0] must be \"\")"));
	if (st.ptype >= st.nstr || st.punit >= st.nstr)
		return (pp_malformed(&st, "period_type.%s: string index "
		    "%" PRId64 " out of range (string_table has %" PRIu32
		    " entries)", st.ptype >= st.nstr ? "type" : "unit",
		    (int64_t)(st.ptype >= st.nstr ? st.ptype : st.punit),
		    st.nstr));
	if ((rv = pp_index(&st)) != 0 || (rv = pp_link(&st)) != 0 ||
	    (rv = pp_types(&st)) != 0)
		return (rv);
	/* The stack tree's node arrays, sized once instead of doubling
	 * from 64 (the walk appends, so the tree's index is not built;
	 * the path table below is sized the same way).  Twice the
	 * location count plus twice the sample count: the B1 corpus's
	 * profiles have 0.3x to 4.8x as many nodes as locations, most
	 * between 1x and 1.5x; the 4.8x one (a heap profile of 1,700
	 * locations, 3,300 samples, 8,100 nodes) is the one whose
	 * samples branch most. */
	dist_batch_reserve_nodes(b, (uint32_t)SM_MIN((uint64_t)st.nlocs * 2 +
	    (uint64_t)st.nsamples * 2, DIST_BATCH_RESERVE_MAX));
	/* The path table: about one node per location and per sample
	 * (half the reserve above, which allows for more), at half load;
	 * it grows if the stacks branch more.  Larger costs cache misses. */
	sm_oatab_init_arena(&st.path, (uint32_t)SM_MIN((uint64_t)st.nlocs *
	    2 + (uint64_t)st.nsamples * 2, DIST_BATCH_RESERVE_MAX), st.a);
	st.tree_base = sm_tree_size(&b->tree);
	/* Frame names: about one per function, or per location when the
	 * locations have no lines (address-only profiles). */
	dist_batch_reserve_frames(b, (uint32_t)SM_MIN((uint64_t)st.nfuncs +
	    (st.nfuncs == 0 ? st.nlocs : 0), DIST_BATCH_RESERVE_MAX));
	return (pp_samples(&st));
}
