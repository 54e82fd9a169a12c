/*
 * multipart.c -- multipart/form-data parser; see multipart.h.
 *
 * The whole body is in memory (the HTTP layer capped it), so parsing is a
 * scan over one buffer, and the results point into it.  Behaviour follows
 * Go's mime/multipart reader, which is what Pyroscope runs, except that
 * anything Go would only half-accept is an error here:
 *
 *   body      = preamble first-delim part *(delim part) close-delim epilogue
 *   first-delim = "--" boundary LWSP* NL          (at the start of a line)
 *   delim     = NL "--" boundary LWSP* NL
 *   close-delim = NL "--" boundary "--" LWSP* (NL | end of body)
 *   part      = *(header-line) NL data
 *
 * NL is "\r\n", or "\n" when the first delimiter line ends in a bare LF
 * (Go decides the same way, once per body).  Header lines may end in
 * either.  LWSP is space or tab.  A part's data ends at the first NL
 * "--" boundary that is followed by LWSP, CR, LF or "--"; anything else
 * ("--boundaryX") is data.  As in Go, a part whose data starts right with
 * "--" boundary (no NL before it) is empty.
 *
 * Headers: at most MP_HDR_MAX bytes per part, counting line ends and the
 * blank line; "Name: value" lines, folded continuation lines are joined
 * with one space (textproto does the same).  Only Content-Disposition and
 * Content-Type are kept (the first of each).  Content-Disposition is
 * parsed like mime.ParseMediaType: a type, then ";" attribute "=" value
 * with value a token or a quoted string, in which a backslash escapes only
 * a tspecial (so "C:\dir\f" keeps its backslashes, as in Go).  name= counts
 * only for the form-data type; a duplicate parameter, a NUL byte or
 * trailing garbage is an error where Go would silently drop the name.
 */
#include "multipart.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

#define MP_BOUNDARY_MAX 70
#define MP_HDR_MAX 8192
#define MP_PARTS_MAX 64

struct mp_scan {
	const uint8_t *b;
	size_t len;
	char dash[MP_BOUNDARY_MAX + 2];   /* "--" boundary */
	size_t dlen;
	char nldash[MP_BOUNDARY_MAX + 4]; /* NL "--" boundary */
	size_t nldlen;
	bool lf;                          /* NL is a bare LF */
};

static bool
mp_tspecial(int c)
{
	return (c != 0 && strchr("()<>@,;:\\\"/[]?=", c) != NULL);
}

static bool
mp_tokenc(int c)
{
	return (c > 0x20 && c < 0x7f && !mp_tspecial(c));
}

static bool
mp_lwsp(int c)
{
	return (c == ' ' || c == '\t');
}

static const char *
mp_skip_ws(const char *p, const char *end)
{
	while (p < end && (mp_lwsp(*p) || *p == '\r' || *p == '\n'))
		p++;
	return (p);
}

/*
 * Parse a token or quoted-string value at *pp (< end) into out (at most
 * outsz - 1 bytes).  Returns the value length, or -1 if malformed.
 */
static long
mp_value(const char **pp, const char *end, char *out, size_t outsz)
{
	const char *p = *pp;
	size_t n = 0;

	if (p < end && *p == '"') {
		for (p++; p < end; p++) {
			char c = *p;

			if (c == '"') {
				*pp = p + 1;
				out[n] = '\0';
				return ((long)n);
			}
			if (c == '\\' && p + 1 < end && mp_tspecial(p[1]))
				c = *++p;
			else if (c == '\r' || c == '\n' || c == '\0')
				return (-1);
			if (n + 1 >= outsz)
				return (-1);
			out[n++] = c;
		}
		return (-1);    /* no closing quote */
	}
	while (p < end && mp_tokenc(*p)) {
		if (n + 1 >= outsz)
			return (-1);
		out[n++] = *p++;
	}
	if (n == 0)
		return (-1);
	*pp = p;
	out[n] = '\0';
	return ((long)n);
}

/* A parameter mp_media() should capture. */
struct mp_param {
	const char *name;      /* lowercase attribute */
	char *val;
	size_t valsz;
	bool seen;
};

#define MP_PARAMS_MAX 16

/* Lowercase copy of the token at *pp into out (outsz > 0); 0 if none. */
static size_t
mp_token(const char **pp, const char *end, char *out, size_t outsz)
{
	const char *p = *pp;
	size_t n = 0;

	while (p < end && mp_tokenc(*p)) {
		if (n + 1 >= outsz)
			return (0);
		out[n++] = (char)((*p >= 'A' && *p <= 'Z') ? *p + 32 : *p);
		p++;
	}
	out[n] = '\0';
	*pp = p;
	return (n);
}

/*
 * Parse a media type with parameters, as mime.ParseMediaType does:
 * "type[/sub] *(; attribute = value)" with optional white space around
 * the separators.  The lowercased type goes to type[]; the values of the
 * parameters listed in `want` are unquoted into their buffers.  Returns 0,
 * or -1 when malformed, when a parameter repeats or when there are more
 * than MP_PARAMS_MAX of them.
 */
static int
mp_media(const char *s, size_t n, char *type, size_t typesz,
    struct mp_param *want, size_t nwant)
{
	const char *p = s, *end = s + n;
	char seen[MP_PARAMS_MAX][64], scratch[MP_HDR_MAX];
	size_t nseen = 0, tl;

	p = mp_skip_ws(p, end);
	if ((tl = mp_token(&p, end, type, typesz)) == 0)
		return (-1);
	if (p < end && *p == '/') {
		p++;
		if (tl + 1 >= typesz ||
		    mp_token(&p, end, type + tl + 1, typesz - tl - 1) == 0)
			return (-1);
		type[tl] = '/';
	}
	for (;;) {
		struct mp_param *w = NULL;
		char *attr;

		p = mp_skip_ws(p, end);
		if (p == end)
			return (0);
		if (*p++ != ';')
			return (-1);
		p = mp_skip_ws(p, end);
		if (p == end)
			return (0);     /* a trailing ";" is fine, as in Go */
		if (nseen == MP_PARAMS_MAX)
			return (-1);
		attr = seen[nseen];
		if (mp_token(&p, end, attr, sizeof(seen[0])) == 0)
			return (-1);
		for (size_t i = 0; i < nseen; i++) {
			if (strcmp(seen[i], attr) == 0)
				return (-1);
		}
		nseen++;
		p = mp_skip_ws(p, end);
		if (p == end || *p++ != '=')
			return (-1);
		p = mp_skip_ws(p, end);
		for (size_t i = 0; i < nwant; i++) {
			if (strcmp(want[i].name, attr) == 0)
				w = &want[i];
		}
		if (w != NULL) {
			w->seen = true;
			if (mp_value(&p, end, w->val, w->valsz) < 0)
				return (-1);
		} else if (mp_value(&p, end, scratch, sizeof(scratch)) < 0) {
			return (-1);
		}
	}
}

/*
 * The boundary from the request's Content-Type.  Returns 0 or
 * SM_EMALFORMED with a message.
 */
static int
mp_boundary(const char *ct, struct mp_scan *s, struct sm_err *err)
{
	char type[128], bnd[MP_HDR_MAX];
	struct mp_param want[1] = {
		{ "boundary", bnd, sizeof(bnd), false },
	};
	size_t bl;

	if (ct == NULL)
		return (sm_err_set(err, SM_EMALFORMED,
		    "multipart: no Content-Type"));
	if (mp_media(ct, strlen(ct), type, sizeof(type), want, 1) != 0)
		return (sm_err_set(err, SM_EMALFORMED,
		    "multipart: malformed Content-Type \"%.200s\"", ct));
	if (strcmp(type, "multipart/form-data") != 0)
		return (sm_err_set(err, SM_EMALFORMED,
		    "multipart: Content-Type \"%.200s\" is not "
		    "multipart/form-data", ct));
	if (!want[0].seen)
		return (sm_err_set(err, SM_EMALFORMED, "multipart: Content-Type "
		    "\"%.200s\" has no boundary parameter", ct));
	bl = strlen(bnd);
	if (bl == 0 || bl > MP_BOUNDARY_MAX)
		return (sm_err_set(err, SM_EMALFORMED, "multipart: boundary is "
		    "%zu bytes, must be 1 to %d", bl, MP_BOUNDARY_MAX));
	for (size_t i = 0; i < bl; i++) {
		if (bnd[i] < 0x20 || bnd[i] > 0x7e)
			return (sm_err_set(err, SM_EMALFORMED, "multipart: "
			    "boundary has a control byte 0x%02x",
			    (unsigned)(uint8_t)bnd[i]));
	}
	s->dash[0] = s->dash[1] = '-';
	memcpy(s->dash + 2, bnd, bl);
	s->dlen = bl + 2;
	return (0);
}

/* Position after LWSP* NL at i, or 0 if that is not what is there. */
static size_t
mp_eol(const struct mp_scan *s, size_t i)
{
	while (i < s->len && mp_lwsp(s->b[i]))
		i++;
	if (!s->lf && i + 1 < s->len && s->b[i] == '\r' && s->b[i + 1] == '\n')
		return (i + 2);
	if (s->lf && i < s->len && s->b[i] == '\n')
		return (i + 1);
	return (0);
}

/* After "--" boundary "--" at i: LWSP* then NL or the end of the body. */
static bool
mp_close_ok(const struct mp_scan *s, size_t i)
{
	size_t j = i;

	while (j < s->len && mp_lwsp(s->b[j]))
		j++;
	return (j == s->len || mp_eol(s, i) != 0);
}

/*
 * Find the first delimiter line.  Returns 0 with *pos after it and *done
 * set when it is the close delimiter, or SM_EMALFORMED.
 */
static int
mp_first(struct mp_scan *s, size_t *pos, bool *done, struct sm_err *err)
{
	size_t i = 0, j, k;

	*done = false;          /* out-parameters are set on every path */
	*pos = 0;
	while (i < s->len) {
		const uint8_t *nl = memchr(s->b + i, '\n', s->len - i);
		size_t eol = nl != NULL ? (size_t)(nl - s->b) : s->len;

		if (eol - i < s->dlen || memcmp(s->b + i, s->dash,
		    s->dlen) != 0) {
			i = eol + 1;      /* preamble */
			continue;
		}
		j = i + s->dlen;
		if (eol - j >= 2 && s->b[j] == '-' && s->b[j + 1] == '-') {
			/* Close delimiter first: an empty form. */
			for (k = j + 2; k < eol && mp_lwsp(s->b[k]); k++)
				;
			if (k == eol || (k + 1 == eol && s->b[k] == '\r')) {
				*done = true;
				*pos = s->len;
				return (0);
			}
		}
		for (k = j; k < eol && mp_lwsp(s->b[k]); k++)
			;
		if (nl != NULL && (k == eol || (k + 1 == eol &&
		    s->b[k] == '\r'))) {
			s->lf = k == eol;
			*done = false;
			*pos = eol + 1;
			return (0);
		}
		i = eol + 1;
	}
	return (sm_err_set(err, SM_EMALFORMED, "multipart: no boundary line "
	    "\"%.*s\" in the body", (int)s->dlen, s->dash));
}

/* Case-insensitive compare of a header name. */
static bool
mp_name_is(const char *n, size_t nl, const char *want)
{
	return (strlen(want) == nl && strncasecmp(n, want, nl) == 0);
}

/* Store one complete header (name: value) into the part if we keep it. */
static int
mp_header(struct sm_arena *a, struct dist_part *p, unsigned idx,
    char *line, size_t n, bool *have_cd, struct sm_err *err)
{
	char *colon = memchr(line, ':', n), *v, *ve;
	size_t nl;

	if (colon == NULL || colon == line)
		return (sm_err_set(err, SM_EMALFORMED, "multipart: part %u: "
		    "malformed header line \"%.60s\"", idx, line));
	nl = (size_t)(colon - line);
	for (size_t i = 0; i < nl; i++) {
		if (!mp_tokenc(line[i]))
			return (sm_err_set(err, SM_EMALFORMED, "multipart: "
			    "part %u: malformed header name \"%.*s\"", idx,
			    (int)SM_MIN(nl, 60), line));
	}
	v = colon + 1;
	ve = line + n;
	while (v < ve && mp_lwsp(*v))
		v++;
	while (ve > v && mp_lwsp(ve[-1]))
		ve--;
	*ve = '\0';
	if (mp_name_is(line, nl, "Content-Type") && p->content_type == NULL) {
		if ((p->content_type = sm_arena_strndup(a, v,
		    (size_t)(ve - v))) == NULL)
			return (sm_err_set(err, SM_ENOMEM,
			    "multipart: out of memory"));
	} else if (mp_name_is(line, nl, "Content-Disposition") && !*have_cd) {
		char type[64], name[MP_HDR_MAX], fname[MP_HDR_MAX];
		struct mp_param want[2] = {
			{ "name", name, sizeof(name), false },
			{ "filename", fname, sizeof(fname), false },
		};

		*have_cd = true;
		if (mp_media(v, (size_t)(ve - v), type, sizeof(type), want,
		    2) != 0)
			return (sm_err_set(err, SM_EMALFORMED, "multipart: "
			    "part %u: malformed Content-Disposition \"%.100s\"",
			    idx, v));
		if (want[0].seen && strcmp(type, "form-data") == 0 &&
		    (p->name = sm_arena_strndup(a, name, strlen(name))) == NULL)
			return (sm_err_set(err, SM_ENOMEM,
			    "multipart: out of memory"));
		if (want[1].seen && (p->filename = sm_arena_strndup(a, fname,
		    strlen(fname))) == NULL)
			return (sm_err_set(err, SM_ENOMEM,
			    "multipart: out of memory"));
	}
	return (0);
}

/*
 * Parse the header block at *pos; on success *pos is the first data byte.
 * Logical lines (after unfolding) are built in `line`, which is as large
 * as the whole header block may be.
 */
static int
mp_headers(const struct mp_scan *s, struct sm_arena *a, struct dist_part *p,
    unsigned idx, size_t *pos, struct sm_err *err)
{
	char line[MP_HDR_MAX + 1];
	size_t i = *pos, n = 0;
	bool pending = false, have_cd = false;
	int rv;

	for (;;) {
		const uint8_t *nl;
		size_t eol, ll;

		if (i - *pos >= MP_HDR_MAX ||
		    (nl = memchr(s->b + i, '\n', SM_MIN(s->len - i,
		    MP_HDR_MAX - (i - *pos)))) == NULL) {
			if (s->len - *pos >= MP_HDR_MAX)
				return (sm_err_set(err, SM_EMALFORMED,
				    "multipart: part %u: headers longer than "
				    "%d bytes", idx, MP_HDR_MAX));
			return (sm_err_set(err, SM_EMALFORMED, "multipart: "
			    "part %u: body ends inside the headers", idx));
		}
		eol = (size_t)(nl - s->b);
		ll = eol - i;
		if (ll > 0 && s->b[eol - 1] == '\r')
			ll--;
		if (memchr(s->b + i, '\0', ll) != NULL)
			return (sm_err_set(err, SM_EMALFORMED, "multipart: "
			    "part %u: NUL byte in a header", idx));
		if (ll > 0 && mp_lwsp(s->b[i])) {
			/* Folded: continue the pending header. */
			size_t k = i;

			if (!pending)
				return (sm_err_set(err, SM_EMALFORMED,
				    "multipart: part %u: header block starts "
				    "with a continuation line", idx));
			while (k < i + ll && mp_lwsp(s->b[k]))
				k++;
			line[n++] = ' ';
			memcpy(line + n, s->b + k, i + ll - k);
			n += i + ll - k;
			i = eol + 1;
			continue;
		}
		if (pending) {
			line[n] = '\0';
			if ((rv = mp_header(a, p, idx, line, n, &have_cd,
			    err)) != 0)
				return (rv);
			pending = false;
		}
		if (ll == 0) {
			i = eol + 1;
			break;
		}
		memcpy(line, s->b + i, ll);
		n = ll;
		pending = true;
		i = eol + 1;
	}
	*pos = i;
	return (0);
}

/*
 * Find where the part data starting at `from` ends.  Returns 0 with *end
 * (data end) and *next (first byte after the delimiter line), *close set
 * for the close delimiter; or SM_EMALFORMED.
 */
static int
mp_data_end(const struct mp_scan *s, size_t from, unsigned idx, size_t *end,
    size_t *next, bool *close, struct sm_err *err)
{
	size_t i = from, j;

	for (;;) {
		const uint8_t *m;

		if (i == from && s->len - i >= s->dlen &&
		    memcmp(s->b + i, s->dash, s->dlen) == 0) {
			/* Delimiter right at the start: empty data (Go). */
			j = i + s->dlen;
		} else {
			m = memmem(s->b + i, s->len - i, s->nldash, s->nldlen);
			if (m == NULL)
				return (sm_err_set(err, SM_EMALFORMED,
				    "multipart: part %u: body ends before the "
				    "closing delimiter", idx));
			i = (size_t)(m - s->b);
			j = i + s->nldlen;
		}
		if (j == s->len || (j + 1 == s->len && s->b[j] == '-'))
			return (sm_err_set(err, SM_EMALFORMED, "multipart: "
			    "part %u: body ends inside a delimiter", idx));
		if (s->b[j] == '-' && s->b[j + 1] == '-') {
			if (!mp_close_ok(s, j + 2))
				return (sm_err_set(err, SM_EMALFORMED,
				    "multipart: part %u: garbage after the "
				    "closing delimiter", idx));
			*end = i;
			*next = s->len;
			*close = true;
			return (0);
		}
		if (mp_lwsp(s->b[j]) || s->b[j] == '\r' || s->b[j] == '\n') {
			if ((*next = mp_eol(s, j)) == 0)
				return (sm_err_set(err, SM_EMALFORMED,
				    "multipart: part %u: malformed delimiter "
				    "line", idx));
			*end = i;
			*close = false;
			return (0);
		}
		/* "--boundaryX": data that only looks like a delimiter. */
		i++;
	}
}

int
dist_multipart_parse(const char *content_type, const uint8_t *body,
    size_t len, struct sm_arena *a, struct dist_part **parts,
    uint32_t *nparts, struct sm_err *err)
{
	struct dist_part *v = NULL, *p;
	struct mp_scan s;
	uint32_t n = 0, cap = 0;
	size_t pos = 0, end = 0, next = 0;
	bool done;
	int rv;

	*parts = NULL;
	*nparts = 0;
	memset(&s, 0, sizeof(s));
	s.b = body;
	s.len = len;
	if ((rv = mp_boundary(content_type, &s, err)) != 0)
		return (rv);
	if ((rv = mp_first(&s, &pos, &done, err)) != 0)
		return (rv);
	if (s.lf) {
		s.nldash[0] = '\n';
		s.nldlen = 1;
	} else {
		s.nldash[0] = '\r';
		s.nldash[1] = '\n';
		s.nldlen = 2;
	}
	memcpy(s.nldash + s.nldlen, s.dash, s.dlen);
	s.nldlen += s.dlen;

	while (!done) {
		if (n == MP_PARTS_MAX)
			return (sm_err_set(err, SM_EMALFORMED, "multipart: more "
			    "than %d parts", MP_PARTS_MAX));
		if (n == cap) {
			uint32_t ncap = cap != 0 ? cap * 2 : 4;

			if ((v = sm_arena_grow(a, v, cap, ncap,
			    sizeof(*v))) == NULL)
				return (sm_err_set(err, SM_ENOMEM,
				    "multipart: out of memory"));
			cap = ncap;
		}
		p = &v[n];
		memset(p, 0, sizeof(*p));
		if ((rv = mp_headers(&s, a, p, n, &pos, err)) != 0)
			return (rv);
		if ((rv = mp_data_end(&s, pos, n, &end, &next, &done,
		    err)) != 0)
			return (rv);
		if (p->name == NULL)
			p->name = "";
		p->data = body + pos;
		p->len = end - pos;
		pos = next;
		n++;
	}
	*parts = v;
	*nparts = n;
	return (0);
}

const struct dist_part *
dist_multipart_get(const struct dist_part *parts, uint32_t n,
    const char *name)
{
	for (uint32_t i = 0; i < n; i++) {
		if (strcmp(parts[i].name, name) == 0)
			return (&parts[i]);
	}
	return (NULL);
}
