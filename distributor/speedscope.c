/*
 * speedscope.c -- speedscope's JSON file format into a write batch; see
 * speedscope.h for the contract.
 *
 * The scanner (js_*) reads the body in place: a cursor over the bytes,
 * one JSON value at a time, strings pointing into the body unless they
 * hold escapes.  Member order in speedscope files is free (speedscope's
 * own samples list "profiles" before "shared", and a profile's "events"
 * before its "type"), so the document is walked more than once: first
 * the top level, noting where "shared" and "profiles" start; then the
 * frames; then each profile's members, noting where its arrays start,
 * before its stacks are read.  Every value is checked on the first walk,
 * so later walks meet only valid JSON.
 *
 * Ownership: everything allocated comes from the request's arena.
 * Locking: none (one request, one thread).
 */
#include "speedscope.h"

#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SS_SCHEMA "https://www.speedscope.app/file-format-schema.json"
#define SS_MAX_NEST 32        /* speedscope's deepest value is at 5 */
#define SS_MAX_NUMBER 64      /* bytes of one number literal */

/* --- the scanner ---------------------------------------------------------- */

struct js {
	const char *start, *p, *end;
	struct sm_arena *a;
	struct sm_err *err;
};

static void
js_ws(struct js *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' ||
	    *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* The next non-blank byte, or 0 at the end. */
static int
js_peek(struct js *j)
{
	js_ws(j);
	return (j->p < j->end ? (unsigned char)*j->p : 0);
}

static int
js_fail(struct js *j, const char *what)
{
	return (sm_err_set(j->err, SM_EINVAL, "speedscope: %s at byte %zu",
	    what, (size_t)(j->p - j->start)));
}

/* Consume byte c (after blanks), or fail naming it. */
static int
js_expect(struct js *j, char c)
{
	if (js_peek(j) == 0)
		return (js_fail(j, "unexpected end"));
	if (js_peek(j) != (unsigned char)c) {
		char what[32];

		(void)snprintf(what, sizeof(what), "expected '%c'", c);
		return (js_fail(j, what));
	}
	j->p++;
	return (0);
}

static int
js_hex4(const char *s, uint32_t *out)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++) {
		int c = (unsigned char)s[i], d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return (-1);
		v = v << 4 | (uint32_t)d;
	}
	*out = v;
	return (0);
}

/*
 * A string: *s and *n its bytes, pointing into the body when it has no
 * escapes, else decoded into the arena (a lone surrogate becomes U+FFFD,
 * as Go's encoding/json).  s may be NULL to only check and skip it.
 * Bytes that are not UTF-8 are left to dist_batch_frame, which replaces
 * them.
 */
static int
js_string(struct js *j, const char **s, size_t *n)
{
	const char *q, *start;
	bool esc = false;
	char *out;
	size_t k = 0;

	if (js_expect(j, '"') != 0)
		return (SM_EINVAL);
	start = q = j->p;
	for (;;) {
		if (q >= j->end)
			return (js_fail(j, "unterminated string"));
		if (*q == '"')
			break;
		if ((unsigned char)*q < 0x20)
			return (js_fail(j, "control character in a string"));
		if (*q == '\\') {
			esc = true;
			if (q + 1 >= j->end)
				return (js_fail(j, "unterminated string"));
			q += 2;
			continue;
		}
		q++;
	}
	j->p = q + 1;
	if (!esc) {
		if (s != NULL) {
			*s = start;
			*n = (size_t)(q - start);
		}
		return (0);
	}
	/* Decoded text is never longer than its escaped form. */
	out = s != NULL ? sm_arena_alloc(j->a, (size_t)(q - start) + 1) :
	    NULL;
	if (s != NULL && out == NULL)
		return (sm_err_set(j->err, SM_ENOMEM, "out of memory"));
	for (const char *c = start; c < q;) {
		uint32_t cp, lo;
		char tmp[4];
		size_t m;

		if (*c != '\\') {
			if (out != NULL)
				out[k] = *c;
			k++;
			c++;
			continue;
		}
		switch (c[1]) {
		case '"': case '\\': case '/':
			tmp[0] = c[1];
			m = 1;
			c += 2;
			break;
		case 'b': tmp[0] = '\b'; m = 1; c += 2; break;
		case 'f': tmp[0] = '\f'; m = 1; c += 2; break;
		case 'n': tmp[0] = '\n'; m = 1; c += 2; break;
		case 'r': tmp[0] = '\r'; m = 1; c += 2; break;
		case 't': tmp[0] = '\t'; m = 1; c += 2; break;
		case 'u':
			if (q - c < 6 || js_hex4(c + 2, &cp) != 0)
				return (js_fail(j, "bad \\u escape"));
			c += 6;
			if (cp >= 0xD800 && cp <= 0xDBFF && q - c >= 6 &&
			    c[0] == '\\' && c[1] == 'u' &&
			    js_hex4(c + 2, &lo) == 0 && lo >= 0xDC00 &&
			    lo <= 0xDFFF) {
				cp = 0x10000 + ((cp - 0xD800) << 10) +
				    (lo - 0xDC00);
				c += 6;
			} else if (cp >= 0xD800 && cp <= 0xDFFF) {
				cp = 0xFFFD;
			}
			m = sm_utf8_put(tmp, cp);
			break;
		default:
			return (js_fail(j, "bad escape in a string"));
		}
		if (out != NULL)
			memcpy(out + k, tmp, m);
		k += m;
	}
	if (s != NULL) {
		out[k] = '\0';
		*s = out;
		*n = k;
	}
	return (0);
}

/* A number, in JSON's grammar. */
static int
js_number(struct js *j, double *v)
{
	const char *q;
	char buf[SS_MAX_NUMBER + 1];
	size_t n;

	js_ws(j);
	q = j->p;
	if (q < j->end && *q == '-')
		q++;
	if (q < j->end && *q == '0') {
		q++;
	} else if (q < j->end && *q >= '1' && *q <= '9') {
		while (q < j->end && *q >= '0' && *q <= '9')
			q++;
	} else {
		return (js_fail(j, "expected a number"));
	}
	if (q < j->end && *q == '.') {
		q++;
		if (q >= j->end || *q < '0' || *q > '9')
			return (js_fail(j, "bad number"));
		while (q < j->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < j->end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < j->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= j->end || *q < '0' || *q > '9')
			return (js_fail(j, "bad number"));
		while (q < j->end && *q >= '0' && *q <= '9')
			q++;
	}
	n = (size_t)(q - j->p);
	if (n > SS_MAX_NUMBER)
		return (js_fail(j, "number too long"));
	memcpy(buf, j->p, n);
	buf[n] = '\0';
	j->p = q;
	if (v != NULL) {
		*v = strtod(buf, NULL);
		if (!isfinite(*v))
			return (js_fail(j, "number out of range"));
	}
	return (0);
}

static int
js_word(struct js *j, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
		return (js_fail(j, "unexpected character"));
	j->p += n;
	return (0);
}

/*
 * The next member of an open object (*first true before the first):
 * 1 with the key in (*k, *kn) and the cursor at its value, 0 at the
 * closing brace (consumed), or -1 with err set.
 */
static int
js_member(struct js *j, bool *first, const char **k, size_t *kn)
{
	int c = js_peek(j);

	if (c == '}') {
		j->p++;
		return (0);
	}
	if (!*first && js_expect(j, ',') != 0)
		return (-1);
	*first = false;
	if (js_string(j, k, kn) != 0 || js_expect(j, ':') != 0)
		return (-1);
	return (1);
}

/* The next item of an open array: 1 at an item, 0 at the closing
 * bracket (consumed), -1 with err set. */
static int
js_item(struct js *j, bool *first)
{
	int c = js_peek(j);

	if (c == ']') {
		j->p++;
		return (0);
	}
	if (!*first && js_expect(j, ',') != 0)
		return (-1);
	*first = false;
	return (1);
}

/* Check and skip one value of any kind, at most `nest` levels deep. */
static int
js_skip(struct js *j, int nest)
{
	bool first = true;
	const char *k;
	size_t kn;
	int c = js_peek(j), r;

	if (nest <= 0)
		return (js_fail(j, "nesting too deep"));
	switch (c) {
	case '{':
		j->p++;
		while ((r = js_member(j, &first, &k, &kn)) == 1)
			if (js_skip(j, nest - 1) != 0)
				return (SM_EINVAL);
		return (r == 0 ? 0 : SM_EINVAL);
	case '[':
		j->p++;
		while ((r = js_item(j, &first)) == 1)
			if (js_skip(j, nest - 1) != 0)
				return (SM_EINVAL);
		return (r == 0 ? 0 : SM_EINVAL);
	case '"':
		return (js_string(j, NULL, NULL));
	case 't':
		return (js_word(j, "true"));
	case 'f':
		return (js_word(j, "false"));
	case 'n':
		return (js_word(j, "null"));
	case 0:
		return (js_fail(j, "unexpected end"));
	default:
		return (js_number(j, NULL));
	}
}

static bool
key_is(const char *k, size_t kn, const char *want)
{
	return (kn == strlen(want) && memcmp(k, want, kn) == 0);
}

/* --- speedscope ------------------------------------------------------------ */

enum ss_unit { U_NONE, U_NS, U_US, U_MS, U_S, U_BYTES };

static const struct {
	const char *name;
	enum ss_unit u;
	double ns;           /* nanoseconds per unit, 0 for counts */
} ss_units[] = {
	{ "none", U_NONE, 0 },
	{ "nanoseconds", U_NS, 1 },
	{ "microseconds", U_US, 1e3 },
	{ "milliseconds", U_MS, 1e6 },
	{ "seconds", U_S, 1e9 },
	{ "bytes", U_BYTES, 0 },
};

/* One profile's members, as found. */
struct ss_prof {
	const char *type, *name, *unit;
	size_t typen, namen, unitn;
	double start;
	const char *events, *samples, *weights;   /* value starts, or NULL */
	int u;                                    /* index in ss_units */
};

struct ss {
	struct js j;
	const struct dist_key *key;
	uint32_t sample_rate;
	const char *spy;
	int64_t time_ms;
	struct sm_arena *a;
	struct dist_batch *b;
	struct sm_err *err;

	const char **fname;   /* frame names */
	size_t *fnamen;
	uint32_t *fid;        /* batch string id + 1, 0 until interned */
	size_t nframes;
	/* The series being filled and how its weights become values. */
	uint32_t series;
	double mult;          /* value = llround(weight * mult) */
	/* Node stack of an evented profile. */
	uint32_t *nodes;
	size_t nnodes, nodes_cap;
	uint32_t *fstack;     /* the frame index opened at each level */
};

static int
ss_batch_err(struct ss *s, int rv)
{
	if (rv == SM_ENOMEM)
		return (sm_err_set(s->err, rv, "out of memory"));
	if (rv == SM_EMALFORMED)
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: a frame "
		    "name contains a NUL byte"));
	return (sm_err_set(s->err, rv, "profile too large: stack tree "
	    "limit"));
}

/* A frame index from a JSON number: an integer in range. */
static int
ss_frame_index(struct ss *s, double v, uint32_t *out)
{
	if (!(v >= 0) || v != floor(v) || v >= (double)s->nframes)
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: invalid "
		    "frame %g (the file has %zu)", v, s->nframes));
	*out = (uint32_t)v;
	return (0);
}

/* The child of `parent` for frame f (interned on first use). */
static int
ss_child(struct ss *s, uint32_t parent, uint32_t f, uint32_t *node)
{
	int rv;

	if (s->fid[f] == 0) {
		uint32_t id;

		if ((rv = dist_batch_frame(s->b, s->fname[f], s->fnamen[f],
		    &id)) != 0)
			return (ss_batch_err(s, rv));
		s->fid[f] = id + 1;
	}
	if ((rv = dist_batch_node(s->b, parent, s->fid[f] - 1, node)) != 0)
		return (ss_batch_err(s, rv));
	return (0);
}

static int
ss_add(struct ss *s, uint32_t node, double w)
{
	double v = w * s->mult;
	int rv;

	if (!(v < 9.2e18))
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: value "
		    "overflows"));
	if ((rv = dist_batch_add(s->b, s->series, node, llround(v))) != 0)
		return (ss_batch_err(s, rv));
	return (0);
}

/* Pass: shared.frames into s->fname (the cursor at "shared"'s value). */
static int
ss_frames(struct ss *s, const char *shared)
{
	struct js j = s->j, c;
	bool first = true, f1;
	const char *k, *frames = NULL;
	size_t kn, n = 0;
	int r;

	j.p = shared;
	if (js_peek(&j) != '{')
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: \"shared\" "
		    "is not an object"));
	j.p++;
	while ((r = js_member(&j, &first, &k, &kn)) == 1) {
		js_ws(&j);
		if (key_is(k, kn, "frames"))
			frames = j.p;
		if (js_skip(&j, SS_MAX_NEST) != 0)
			return (SM_EINVAL);
	}
	if (r != 0)
		return (SM_EINVAL);
	if (frames == NULL)
		return (0);
	c = j;
	c.p = frames;
	if (js_peek(&c) != '[')
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: "
		    "\"frames\" is not an array"));
	c.p++;
	f1 = true;
	while ((r = js_item(&c, &f1)) == 1) {
		n++;
		(void)js_skip(&c, SS_MAX_NEST);
	}
	s->fname = sm_arena_calloc(s->a, n + 1, sizeof(*s->fname));
	s->fnamen = sm_arena_calloc(s->a, n + 1, sizeof(*s->fnamen));
	s->fid = sm_arena_calloc(s->a, n + 1, sizeof(*s->fid));
	if (s->fname == NULL || s->fnamen == NULL || s->fid == NULL)
		return (sm_err_set(s->err, SM_ENOMEM, "out of memory"));
	c.p = frames + 1;
	f1 = true;
	for (size_t i = 0; (r = js_item(&c, &f1)) == 1; i++) {
		bool m1 = true;

		s->fname[i] = "";
		if (js_peek(&c) != '{') {
			(void)js_skip(&c, SS_MAX_NEST);
			continue;
		}
		c.p++;
		while ((r = js_member(&c, &m1, &k, &kn)) == 1) {
			if (key_is(k, kn, "name") && js_peek(&c) == '"') {
				if (js_string(&c, &s->fname[i],
				    &s->fnamen[i]) != 0)
					return (SM_EINVAL);
			} else {
				(void)js_skip(&c, SS_MAX_NEST);
			}
		}
	}
	s->nframes = n;
	return (0);
}

/* A profile's members into p (the cursor at its value). */
static int
ss_prof_scan(struct ss *s, struct js *j, struct ss_prof *p)
{
	bool first = true;
	const char *k;
	size_t kn;
	int r;

	memset(p, 0, sizeof(*p));
	p->type = p->name = p->unit = "";
	p->u = -1;
	if (js_peek(j) != '{')
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: a profile "
		    "is not an object"));
	j->p++;
	while ((r = js_member(j, &first, &k, &kn)) == 1) {
		int c = js_peek(j);

		if (c == '"' && key_is(k, kn, "type")) {
			if (js_string(j, &p->type, &p->typen) != 0)
				return (SM_EINVAL);
		} else if (c == '"' && key_is(k, kn, "name")) {
			if (js_string(j, &p->name, &p->namen) != 0)
				return (SM_EINVAL);
		} else if (c == '"' && key_is(k, kn, "unit")) {
			if (js_string(j, &p->unit, &p->unitn) != 0)
				return (SM_EINVAL);
		} else if (c != '"' && c != '{' && c != '[' && c != 't' &&
		    c != 'f' && c != 'n' && key_is(k, kn, "startValue")) {
			if (js_number(j, &p->start) != 0)
				return (SM_EINVAL);
		} else {
			if (c == '[' && key_is(k, kn, "events"))
				p->events = j->p;
			else if (c == '[' && key_is(k, kn, "samples"))
				p->samples = j->p;
			else if (c == '[' && key_is(k, kn, "weights"))
				p->weights = j->p;
			if (js_skip(j, SS_MAX_NEST) != 0)
				return (SM_EINVAL);
		}
	}
	if (r != 0)
		return (SM_EINVAL);
	for (size_t i = 0; i < SM_ARRAY_LEN(ss_units); i++)
		if (key_is(p->unit, p->unitn, ss_units[i].name))
			p->u = (int)i;
	if (p->u < 0)
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: invalid "
		    "profile unit: %.*s", (int)SM_MIN(p->unitn, 64), p->unit));
	if (!key_is(p->type, p->typen, "evented") &&
	    !key_is(p->type, p->typen, "sampled"))
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: profile "
		    "type %.*s not supported", (int)SM_MIN(p->typen, 64),
		    p->type));
	return (0);
}

/* Profiles that v1 merges compare equal (0). */
static int
ss_prof_cmp(const void *x, const void *y)
{
	const struct ss_prof *a = x, *b = y;
	int c;

	if ((c = (a->namen > b->namen) - (a->namen < b->namen)) != 0 ||
	    (c = memcmp(a->name, b->name, a->namen)) != 0)
		return (c);
	if ((c = (a->typen > b->typen) - (a->typen < b->typen)) != 0 ||
	    (c = memcmp(a->type, b->type, a->typen)) != 0)
		return (c);
	if ((c = a->u - b->u) != 0)
		return (c);
	return ((a->start > b->start) - (a->start < b->start));
}

/*
 * The series of profile p (its labels from the upload's key, or from
 * "<app>.<unit>" when the file holds several profiles) into s->series,
 * and how its weights become values into s->mult.
 */
static int
ss_series(struct ss *s, const struct ss_prof *p, bool multi)
{
	struct dist_key k = *s->key;
	struct dist_legacy lg;
	struct sm_label *ls;
	uint32_t rate = s->sample_rate, n;
	double ns = ss_units[p->u].ns;
	int rv;

	if (multi) {
		size_t an = strlen(s->key->app), un = strlen(ss_units[p->u].name);
		char *app = sm_arena_alloc(s->a, an + un + 2);

		if (app == NULL)
			return (sm_err_set(s->err, SM_ENOMEM, "out of memory"));
		memcpy(app, s->key->app, an);
		app[an] = '.';
		memcpy(app + an + 1, ss_units[p->u].name, un + 1);
		k.app = app;
	}
	/* v1: the default rate becomes the unit's, 0 for bytes. */
	if (rate == 100 && ss_units[p->u].u == U_BYTES)
		rate = 0;
	if ((rv = dist_key_legacy(&k, rate, s->spy, s->a, &lg, s->err)) != 0)
		return (rv);
	if ((ls = sm_arena_calloc(s->a, (size_t)lg.nlabels + 1,
	    sizeof(*ls))) == NULL)
		return (sm_err_set(s->err, SM_ENOMEM, "out of memory"));
	n = 0;
	for (uint32_t i = 0; i < lg.nlabels; i++)
		if (strcmp(lg.labels[i].name, "profile_name") != 0)
			ls[n++] = lg.labels[i];
	if (p->namen > 0) {
		ls[n].name = "profile_name";
		if ((ls[n].value = sm_arena_strndup(s->a, p->name,
		    p->namen)) == NULL)
			return (sm_err_set(s->err, SM_ENOMEM, "out of memory"));
		n++;
	}
	if ((rv = dist_batch_series(s->b, ls, n, s->time_ms, &s->series,
	    s->err)) != 0)
		return (rv);
	/* A period (cpu, wall with a rate): nanoseconds. */
	if (lg.type.period_type[0] != '\0')
		s->mult = ns > 0 ? ns : 1e9 / (double)rate;
	else
		s->mult = 1;
	return (0);
}

static int
ss_push(struct ss *s, uint32_t node, uint32_t f)
{
	if (s->nnodes == s->nodes_cap) {
		size_t cap = s->nodes_cap ? 2 * s->nodes_cap : 64;
		uint32_t *nn = sm_arena_alloc(s->a, cap * sizeof(*nn));
		uint32_t *nf = sm_arena_alloc(s->a, cap * sizeof(*nf));

		if (nn == NULL || nf == NULL)
			return (sm_err_set(s->err, SM_ENOMEM, "out of memory"));
		if (s->nnodes > 0) {
			memcpy(nn, s->nodes, s->nnodes * sizeof(*nn));
			memcpy(nf, s->fstack, s->nnodes * sizeof(*nf));
		}
		s->nodes = nn;
		s->fstack = nf;
		s->nodes_cap = cap;
	}
	s->nodes[s->nnodes] = node;
	s->fstack[s->nnodes++] = f;
	return (0);
}

/* The events of an evented profile. */
static int
ss_evented(struct ss *s, const struct ss_prof *p)
{
	struct js j = s->j;
	uint32_t max = s->b->limits->max_depth;
	double last = p->start;
	bool first = true;
	int r;

	if (p->events == NULL)
		return (0);
	s->nnodes = 0;
	j.p = p->events + 1;
	while ((r = js_item(&j, &first)) == 1) {
		bool m1 = true, open = false, have_t = false;
		const char *k, *t = "";
		size_t kn, tn = 0;
		double at = 0, fr = 0;
		uint32_t f, node;
		int rv;

		if (js_peek(&j) != '{')
			return (sm_err_set(s->err, SM_EINVAL, "speedscope: an "
			    "event is not an object"));
		j.p++;
		while ((r = js_member(&j, &m1, &k, &kn)) == 1) {
			int c = js_peek(&j);

			if (key_is(k, kn, "type") && c == '"') {
				if (js_string(&j, &t, &tn) != 0)
					return (SM_EINVAL);
			} else if (key_is(k, kn, "at") && (c == '-' ||
			    (c >= '0' && c <= '9'))) {
				if (js_number(&j, &at) != 0)
					return (SM_EINVAL);
				have_t = true;
			} else if (key_is(k, kn, "frame") && (c == '-' ||
			    (c >= '0' && c <= '9'))) {
				if (js_number(&j, &fr) != 0)
					return (SM_EINVAL);
			} else if (js_skip(&j, SS_MAX_NEST) != 0) {
				return (SM_EINVAL);
			}
		}
		if (r != 0)
			return (SM_EINVAL);
		if (!have_t)
			at = 0;
		if (at < last)
			return (sm_err_set(s->err, SM_EINVAL, "speedscope: "
			    "events out of order, %g < %g", at, last));
		if ((rv = ss_frame_index(s, fr, &f)) != 0)
			return (rv);
		if (key_is(t, tn, "O"))
			open = true;
		else if (!key_is(t, tn, "C"))
			return (sm_err_set(s->err, SM_EINVAL, "speedscope: "
			    "unknown event type %.*s", (int)SM_MIN(tn, 16), t));
		/* The time since the last event is the open stack's. */
		if (s->nnodes > 0 && at > last &&
		    (rv = ss_add(s, s->nodes[s->nnodes - 1], at - last)) != 0)
			return (rv);
		last = at;
		if (open) {
			node = s->nnodes > 0 ? s->nodes[s->nnodes - 1] : 0;
			if ((max == 0 || s->nnodes < max) &&
			    (rv = ss_child(s, node, f, &node)) != 0)
				return (rv);
			if ((rv = ss_push(s, node, f)) != 0)
				return (rv);
		} else {
			if (s->nnodes == 0)
				return (sm_err_set(s->err, SM_EINVAL,
				    "speedscope: no stack to close at %g", at));
			if (s->fstack[s->nnodes - 1] != f)
				return (sm_err_set(s->err, SM_EINVAL,
				    "speedscope: closing non-open frame %u",
				    f));
			s->nnodes--;
		}
	}
	return (r == 0 ? 0 : SM_EINVAL);
}

/* The samples and weights of a sampled profile, walked side by side. */
static int
ss_sampled(struct ss *s, const struct ss_prof *p)
{
	struct js js = s->j, jw = s->j;
	uint32_t max = s->b->limits->max_depth;
	bool f1 = true, f2 = true;
	size_t ns = 0, nw = 0;
	int rs = 0, rw = 0, rv;

	if (p->samples != NULL)
		js.p = p->samples + 1;
	if (p->weights != NULL)
		jw.p = p->weights + 1;
	for (;;) {
		bool e1 = true;
		uint32_t node = 0, depth = 0;
		double w;

		rs = p->samples != NULL ? js_item(&js, &f1) : 0;
		rw = p->weights != NULL ? js_item(&jw, &f2) : 0;
		if (rs < 0 || rw < 0)
			return (SM_EINVAL);
		ns += rs == 1;
		nw += rw == 1;
		if (rs != 1 || rw != 1)
			break;
		if (js_number(&jw, &w) != 0)
			return (sm_err_set(s->err, SM_EINVAL, "speedscope: a "
			    "weight is not a number"));
		if (w < 0)
			return (sm_err_set(s->err, SM_EINVAL, "speedscope: "
			    "negative weight %g", w));
		if (js_peek(&js) != '[')
			return (sm_err_set(s->err, SM_EINVAL, "speedscope: a "
			    "sample is not an array"));
		js.p++;
		while ((rv = js_item(&js, &e1)) == 1) {
			double v;
			uint32_t f;

			if (js_number(&js, &v) != 0 ||
			    (rv = ss_frame_index(s, v, &f)) != 0)
				return (SM_EINVAL);
			if (max != 0 && depth == max)
				continue;
			if ((rv = ss_child(s, node, f, &node)) != 0)
				return (rv);
			depth++;
		}
		if (rv < 0)
			return (SM_EINVAL);
		if (node != 0 && w > 0 && (rv = ss_add(s, node, w)) != 0)
			return (rv);
	}
	/* Count what is left of the longer array. */
	while (rs == 1 && (rs = js_item(&js, &f1)) == 1) {
		ns++;
		(void)js_skip(&js, SS_MAX_NEST);
	}
	while (rw == 1 && (rw = js_item(&jw, &f2)) == 1) {
		nw++;
		(void)js_skip(&jw, SS_MAX_NEST);
	}
	if (ns != nw)
		return (sm_err_set(s->err, SM_EINVAL, "speedscope: unequal "
		    "lengths of samples and weights: %zu != %zu", ns, nw));
	return (0);
}

int
dist_speedscope_ingest(const uint8_t *body, size_t len,
    const struct dist_key *key, uint32_t sample_rate, const char *spy_name,
    int64_t time_ms, struct sm_arena *a, struct dist_batch *b,
    struct sm_err *err)
{
	struct ss s;
	const char *k, *schema = NULL, *shared = NULL, *profiles = NULL;
	size_t kn, schemalen = 0;
	bool first = true, multi = false;
	int r, rv;

	memset(&s, 0, sizeof(s));
	s.j.start = s.j.p = (const char *)body;
	s.j.end = (const char *)body + len;
	s.j.a = a;
	s.j.err = err;
	s.key = key;
	s.sample_rate = sample_rate;
	s.spy = spy_name;
	s.time_ms = time_ms;
	s.a = a;
	s.b = b;
	s.err = err;

	/* Walk 1: the whole document, checked; where its parts start. */
	if (js_peek(&s.j) != '{')
		return (sm_err_set(err, SM_EINVAL, "speedscope: the document "
		    "is not a JSON object"));
	s.j.p++;
	while ((r = js_member(&s.j, &first, &k, &kn)) == 1) {
		int c = js_peek(&s.j);

		if (key_is(k, kn, "$schema") && c == '"') {
			if (js_string(&s.j, &schema, &schemalen) != 0)
				return (SM_EINVAL);
			continue;
		}
		if (key_is(k, kn, "shared"))
			shared = s.j.p;
		else if (key_is(k, kn, "profiles"))
			profiles = s.j.p;
		if (js_skip(&s.j, SS_MAX_NEST) != 0)
			return (SM_EINVAL);
	}
	if (r != 0)
		return (SM_EINVAL);
	if (js_peek(&s.j) != 0)
		return (js_fail(&s.j, "data after the document"));
	if (!key_is(schema != NULL ? schema : "", schemalen, SS_SCHEMA))
		return (sm_err_set(err, SM_EINVAL, "speedscope: unknown "
		    "schema: %.*s", (int)SM_MIN(schemalen, 100),
		    schema != NULL ? schema : ""));
	if (shared != NULL && (rv = ss_frames(&s, shared)) != 0)
		return (rv);
	if (profiles == NULL)
		return (0);
	if (*profiles != '[')
		return (sm_err_set(err, SM_EINVAL, "speedscope: \"profiles\" "
		    "is not an array"));

	/* Walk 2: each profile's members, checked.  v1 names series by
	 * unit when more than one profile is left after merging equal
	 * ones: when they are not all equal to the first. */
	{
		struct js c = s.j;
		struct ss_prof p0, p;
		bool f1 = true;

		c.p = profiles + 1;
		for (size_t i = 0; (r = js_item(&c, &f1)) == 1; i++) {
			if ((rv = ss_prof_scan(&s, &c, i == 0 ? &p0 : &p)) != 0)
				return (rv);
			if (i > 0 && ss_prof_cmp(&p0, &p) != 0)
				multi = true;
		}
	}

	/* Walk 3: the stacks, profile by profile. */
	{
		struct js c = s.j;
		struct ss_prof p;
		bool f1 = true;

		c.p = profiles + 1;
		while ((r = js_item(&c, &f1)) == 1) {
			if ((rv = ss_prof_scan(&s, &c, &p)) != 0 ||
			    (rv = ss_series(&s, &p, multi)) != 0)
				return (rv);
			if (key_is(p.type, p.typen, "evented"))
				rv = ss_evented(&s, &p);
			else
				rv = ss_sampled(&s, &p);
			if (rv != 0)
				return (rv);
		}
	}
	return (0);
}
