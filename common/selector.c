/*
 * selector.c -- label matchers, the selector parser and the /render query
 * forms; see selector.h for the syntax and the semantics.
 *
 * Matching.  A matcher owns its name, its value and, for =~ and !~, a
 * pattern (regex.h) compiled SM_RE_WHOLE (the whole value must match, as
 * Prometheus wraps RE2 patterns in ^(?:...)$), SM_RE_UTF and
 * SM_RE_DOTALL ('.' matches '\n': Prometheus parses with RE2's DotNL
 * since 2.x).  Each matcher has its own match area, which is why a
 * selector is single-threaded.  A subject PCRE2 refuses (invalid UTF-8)
 * counts as "no match".
 *
 * Regex cost.  PCRE2 backtracks, so a pattern such as (a+)+ is exponential
 * in the value's length; with PCRE2's default limits (10^7 steps) one
 * query over 2,000 series held an ingester for 29 s.  Each pattern has
 * SM_RE_MATCH_LIMIT / SM_RE_DEPTH_LIMIT / SM_RE_HEAP_LIMIT_KIB
 * (regex.h, SM_RE_LIMITED): about a millisecond of work per value
 * at most, far above what a sane pattern needs on a label value (a
 * pattern like .*foo.* takes a few steps per byte).  A value that hits a
 * limit makes sm_matcher_eval fail with SM_EINVAL (400, naming the limit)
 * rather than guess: the query is refused, as Pyroscope refuses a pattern
 * RE2 cannot compile, and the ingester (ingester/set.c) matches each
 * distinct label value once per query, so the bound is per value, not
 * per series.
 *
 * Parsing.  A hand-written scanner over the whole text, so every error can
 * name the byte offset (from 0) where it went wrong, relative to the text
 * the caller passed (sm_query_parse passes the whole query).  Strings:
 *   "..." and '...'  Go escapes: \a \b \f \n \r \t \v \\, the enclosing
 *                    quote, \NNN (octal, <= 255), \xNN, \uNNNN,
 *                    \UNNNNNNNN (no surrogates, <= U+10FFFF); a raw
 *                    newline is an error, as in Go and PromQL;
 *   `...`            raw, no escapes, may span lines.
 * A decoded NUL is rejected: values are C strings and a label value can
 * never hold one, so "a\x00" could otherwise silently become "a".
 *
 * Ownership.  The selector owns everything it points to (selector.h).  A
 * query owns its selector and its strings; on failure sm_query_parse
 * leaves the query empty, as after sm_query_init.
 */
#include "selector.h"

#include <stdbool.h>
#include <string.h>

#include "ptype.h"

/* ------------------------------------------------------------------ */
/* Matchers and selectors                                              */
/* ------------------------------------------------------------------ */

static const char *const match_ops[] = {
	[SM_MATCH_EQ] = "=",
	[SM_MATCH_NEQ] = "!=",
	[SM_MATCH_RE] = "=~",
	[SM_MATCH_NRE] = "!~",
};

void
sm_selector_init(struct sm_selector *s)
{
	s->m = NULL;
	s->n = s->cap = 0;
}

static void
matcher_fini(struct sm_matcher *m)
{
	sm_free(m->name);
	sm_free(m->value);
	sm_regex_md_free(m->md);
	sm_regex_free(m->re);
	memset(m, 0, sizeof(*m));
}

void
sm_selector_fini(struct sm_selector *s)
{
	for (uint32_t i = 0; i < s->n; i++)
		matcher_fini(&s->m[i]);
	sm_free(s->m);
	sm_selector_init(s);
}

/* Compile m->value into m->re / m->md. */
static int
matcher_compile(struct sm_matcher *m, struct sm_err *err)
{
	struct sm_err e;
	int rv;

	sm_err_clear(&e);
	if ((rv = sm_regex_compile(m->value, SM_RE_WHOLE | SM_RE_UTF |
	    SM_RE_DOTALL | SM_RE_LIMITED, &m->re, &e)) != 0) {
		if (rv != SM_EINVAL)
			return (sm_err_set(err, rv, "%s", e.msg));
		return (sm_err_set(err, SM_EINVAL, "invalid regular expression "
		    "for label %s: \"%.200s\": %s", m->name, m->value, e.msg));
	}
	/* No group: we only ask "did it match". */
	if ((m->md = sm_regex_md_create(0)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	return (0);
}

int
sm_selector_add(struct sm_selector *s, enum sm_match_type type,
    const char *name, const char *value, struct sm_err *err)
{
	struct sm_matcher m;
	int rv;

	if (type != SM_MATCH_EQ && type != SM_MATCH_NEQ &&
	    type != SM_MATCH_RE && type != SM_MATCH_NRE)
		return (sm_err_set(err, SM_EINVAL, "invalid match type %d",
		    (int)type));
	memset(&m, 0, sizeof(m));
	m.type = type;
	if (SM_GROW(s->m, s->cap, s->n + 1, 8) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if ((m.name = sm_strdup(name)) == NULL ||
	    (m.value = sm_strdup(value)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if (type == SM_MATCH_RE || type == SM_MATCH_NRE) {
		if ((rv = matcher_compile(&m, err)) != 0)
			goto out;
	}
	s->m[s->n++] = m;
	return (0);
out:
	matcher_fini(&m);
	return (rv);
}

int
sm_matcher_eval(const struct sm_matcher *m, const char *value, size_t len,
    struct sm_err *err)
{
	struct sm_err e;
	int rc;

	if (value == NULL) {
		value = "";
		len = 0;
	}
	switch (m->type) {
	case SM_MATCH_EQ:
	case SM_MATCH_NEQ:
		rc = strlen(m->value) == len &&
		    memcmp(m->value, value, len) == 0;
		return (m->type == SM_MATCH_EQ ? rc != 0 : rc == 0);
	case SM_MATCH_RE:
	case SM_MATCH_NRE:
		SM_ASSERT(m->re != NULL && m->md != NULL);
		sm_err_clear(&e);
		rc = sm_regex_match(m->re, m->md, value, len, &e);
		if (rc >= 0)
			return ((m->type == SM_MATCH_RE) == (rc == 1));
		if (rc != SM_ELIMIT)
			return (sm_err_set(err, rc, "%s", e.msg));
		return (sm_err_set(err, SM_EINVAL, "regular expression for "
		    "label %s exceeded the %s on a %zu-byte value: \"%.200s\" "
		    "backtracks too much, simplify it (avoid nested "
		    "quantifiers such as (a+)+)", m->name, e.msg, len,
		    m->value));
	}
	SM_ASSERT(!"invalid match type");
	return (0);
}

bool
sm_matcher_match(const struct sm_matcher *m, const char *value, size_t len)
{
	struct sm_err err;
	int rc = sm_matcher_eval(m, value, len, &err);

	if (rc < 0)
		return (m->type == SM_MATCH_NRE);
	return (rc != 0);
}

bool
sm_selector_match(const struct sm_selector *s, const struct sm_label *v,
    uint32_t n)
{
	for (uint32_t i = 0; i < s->n; i++) {
		const struct sm_matcher *m = &s->m[i];
		const char *val = sm_labels_get(v, n, m->name);

		if (!sm_matcher_match(m, val, val != NULL ? strlen(val) : 0))
			return (false);
	}
	return (true);
}

/* ------------------------------------------------------------------ */
/* Parser                                                              */
/* ------------------------------------------------------------------ */

struct sel_parser {
	const char *t;          /* the whole text; offsets are into it */
	size_t i;               /* current offset */
	struct sm_err *err;
	struct sm_buf name;     /* scratch: the label name */
	struct sm_buf val;      /* scratch: the decoded value */
};

/* Describe the byte t[i] for a message: 'x', byte 0xNN or end of input. */
static const char *
byte_what(const char *t, size_t i, char *buf, size_t n)
{
	unsigned char c = (unsigned char)t[i];

	if (c == '\0')
		snprintf(buf, n, "end of input");
	else if (c >= 0x20 && c < 0x7f)
		snprintf(buf, n, "'%c'", c);
	else
		snprintf(buf, n, "byte 0x%02x", c);
	return (buf);
}

/* "parse error at position N: <what>, got <byte at N>" */
static int
sel_expected(struct sel_parser *p, size_t at, const char *what)
{
	char b[32];

	return (sm_err_set(p->err, SM_EINVAL, "parse error at position %zu: "
	    "expected %s, got %s", at, what, byte_what(p->t, at, b, sizeof(b))));
}

static int
sel_error(struct sel_parser *p, size_t at, const char *what)
{
	return (sm_err_set(p->err, SM_EINVAL, "parse error at position %zu: "
	    "%s", at, what));
}

static void
sel_ws(struct sel_parser *p)
{
	while (p->t[p->i] == ' ' || p->t[p->i] == '\t' ||
	    p->t[p->i] == '\n' || p->t[p->i] == '\r')
		p->i++;
}

static bool
name_first(unsigned char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_');
}

static bool
name_rest(unsigned char c)
{
	return (name_first(c) || (c >= '0' && c <= '9') || c == '.');
}


/* Single-character escapes, shared by the parser and go_quote(). */
static const char esc_from[] = "abfnrtv\\";
static const char esc_to[] = "\a\b\f\n\r\t\v\\";

static void
put_utf8(struct sm_buf *b, uint32_t cp)
{
	char u[4];

	sm_buf_append(b, u, sm_utf8_put(u, cp));
}

/*
 * One escape sequence; p->i is at the backslash.  Appends the decoded
 * bytes to p->val and moves past the sequence.
 */
static int
sel_escape(struct sel_parser *p, char quote)
{
	size_t at = p->i;
	unsigned char c = (unsigned char)p->t[p->i + 1];
	const char *simple;
	uint32_t v = 0;
	int ndig = 0, h;

	p->i += 2;
	if (c != '\0' && (simple = strchr(esc_from, c)) != NULL) {
		sm_buf_putc(&p->val, esc_to[simple - esc_from]);
		return (0);
	}
	switch (c) {
	case 'x':
		ndig = 2;
		break;
	case 'u':
		ndig = 4;
		break;
	case 'U':
		ndig = 8;
		break;
	case '0':
	case '1':
	case '2':
	case '3':
	case '4':
	case '5':
	case '6':
	case '7':
		/* Three octal digits, the first already read. */
		v = c - '0';
		for (int k = 0; k < 2; k++) {
			c = (unsigned char)p->t[p->i];
			if (c < '0' || c > '7')
				return (sel_error(p, at, "invalid octal escape "
				    "sequence (want 3 digits)"));
			v = v * 8 + (c - '0');
			p->i++;
		}
		if (v > 255)
			return (sel_error(p, at, "octal escape value > 255"));
		goto byte;
	default:
		if (c == (unsigned char)quote) {
			sm_buf_putc(&p->val, quote);
			return (0);
		}
		p->i = at;
		return (sel_error(p, at, "unknown escape sequence"));
	}
	for (int k = 0; k < ndig; k++) {
		if ((h = sm_hex_val((unsigned char)p->t[p->i])) < 0)
			return (sel_error(p, at, "invalid hex digit in escape "
			    "sequence"));
		v = v * 16 + (uint32_t)h;
		p->i++;
	}
	if (ndig == 2)
		goto byte;
	if ((v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)
		return (sel_error(p, at, "escape sequence is an invalid Unicode "
		    "code point"));
	if (v == 0)
		return (sel_error(p, at, "NUL is not allowed in a label value"));
	put_utf8(&p->val, v);
	return (0);
byte:
	if (v == 0)
		return (sel_error(p, at, "NUL is not allowed in a label value"));
	sm_buf_putc(&p->val, (char)v);
	return (0);
}

/* A quoted string at p->i, decoded into p->val. */
static int
sel_string(struct sel_parser *p)
{
	size_t start = p->i;
	char q = p->t[p->i];
	int rv;

	if (q != '"' && q != '\'' && q != '`')
		return (sel_expected(p, p->i, "quoted string"));
	sm_buf_reset(&p->val);
	p->i++;
	for (;;) {
		char c = p->t[p->i];

		if (c == '\0')
			return (sel_error(p, start, "unterminated quoted "
			    "string"));
		if (c == q) {
			p->i++;
			break;
		}
		if (q != '`' && c == '\n')
			return (sel_error(p, start, "unterminated quoted "
			    "string (newline)"));
		if (q != '`' && c == '\\') {
			if ((rv = sel_escape(p, q)) != 0)
				return (rv);
			continue;
		}
		sm_buf_putc(&p->val, c);
		p->i++;
	}
	/* Make sure there is a C string even for "". */
	sm_buf_append(&p->val, "", 0);
	if (sm_buf_error(&p->val) != 0)
		return (sm_err_set(p->err, SM_ENOMEM, "out of memory"));
	return (0);
}

/*
 * "{ m, m, ... }" starting at p->i (which must be at '{'); appends the
 * matchers to `s` and leaves p->i after the '}'.
 */
static int
sel_body(struct sel_parser *p, struct sm_selector *s)
{
	enum sm_match_type op;
	size_t vat;
	int rv;

	if (p->t[p->i] != '{')
		return (sel_expected(p, p->i, "'{'"));
	p->i++;
	for (;;) {
		sel_ws(p);
		if (p->t[p->i] == '}')
			break;
		/* label name */
		if (!name_first((unsigned char)p->t[p->i]))
			return (sel_expected(p, p->i, "label name or '}'"));
		sm_buf_reset(&p->name);
		{
			size_t b = p->i;

			while (name_rest((unsigned char)p->t[p->i]))
				p->i++;
			sm_buf_append(&p->name, p->t + b, p->i - b);
		}
		sel_ws(p);
		/* operator */
		if (p->t[p->i] == '=' && p->t[p->i + 1] == '~') {
			op = SM_MATCH_RE;
			p->i += 2;
		} else if (p->t[p->i] == '=') {
			op = SM_MATCH_EQ;
			p->i += 1;
		} else if (p->t[p->i] == '!' && p->t[p->i + 1] == '=') {
			op = SM_MATCH_NEQ;
			p->i += 2;
		} else if (p->t[p->i] == '!' && p->t[p->i + 1] == '~') {
			op = SM_MATCH_NRE;
			p->i += 2;
		} else {
			return (sel_expected(p, p->i,
			    "one of '=', '!=', '=~', '!~'"));
		}
		sel_ws(p);
		vat = p->i;
		if ((rv = sel_string(p)) != 0)
			return (rv);
		if (sm_buf_error(&p->name) != 0)
			return (sm_err_set(p->err, SM_ENOMEM, "out of memory"));
		if ((rv = sm_selector_add(s, op, p->name.b, p->val.b,
		    p->err)) != 0) {
			if (rv == SM_EINVAL && p->err != NULL)
				sm_err_prefix(p->err, "parse error at position "
				    "%zu", vat);
			return (rv);
		}
		sel_ws(p);
		if (p->t[p->i] == ',') {
			p->i++;
			continue;
		}
		if (p->t[p->i] == '}')
			break;
		return (sel_expected(p, p->i, "',' or '}'"));
	}
	p->i++;
	return (0);
}

static void
sel_parser_init(struct sel_parser *p, const char *text, struct sm_err *err)
{
	p->t = text;
	p->i = 0;
	p->err = err;
	sm_buf_init(&p->name);
	sm_buf_init(&p->val);
}

static void
sel_parser_fini(struct sel_parser *p)
{
	sm_buf_fini(&p->name);
	sm_buf_fini(&p->val);
}

/* Only whitespace may follow. */
static int
sel_end(struct sel_parser *p)
{
	sel_ws(p);
	if (p->t[p->i] != '\0')
		return (sel_expected(p, p->i, "end of input"));
	return (0);
}

int
sm_selector_parse(struct sm_selector *s, const char *text,
    struct sm_err *err)
{
	struct sel_parser p;
	uint32_t n0 = s->n;
	int rv;

	sel_parser_init(&p, text, err);
	sel_ws(&p);
	if ((rv = sel_body(&p, s)) != 0)
		goto out;
	rv = sel_end(&p);
out:
	if (rv != 0) {
		/* Drop what this call appended: all or nothing. */
		while (s->n > n0)
			matcher_fini(&s->m[--s->n]);
	}
	sel_parser_fini(&p);
	return (rv);
}

/* ------------------------------------------------------------------ */
/* Formatting                                                          */
/* ------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at p (n bytes left), 0 if invalid;
 * the code point in *cp. */
static size_t
utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
	size_t len;

	if (p[0] < 0x80) {
		*cp = p[0];
		return (1);
	}
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		len = 2;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF)
		len = 3;
	else if (p[0] >= 0xF0 && p[0] <= 0xF4)
		len = 4;
	else
		return (0);
	if (len > n || !sm_utf8_valid((const char *)p, len))
		return (0);
	*cp = p[0] & (0x7F >> len);
	for (size_t k = 1; k < len; k++)
		*cp = (*cp << 6) | (p[k] & 0x3F);
	return (len);
}

/*
 * Go's unicode.IsPrint, approximately: the code points below are not
 * printable (controls, format characters, separators other than ' ',
 * private use, noncharacters).  Close enough for logs and debugging.
 */
static bool
go_isprint(uint32_t cp)
{
	if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) ||
	    cp == 0xAD || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
	    (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) ||
	    cp == 0x3000 || (cp >= 0xE000 && cp <= 0xF8FF) || cp == 0xFEFF ||
	    (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF ||
	    cp >= 0xF0000)
		return (false);
	return (true);
}

/* Go's strconv.Quote (what %q prints for a string). */
static void
go_quote(struct sm_buf *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);

	sm_buf_putc(out, '"');
	while (n > 0) {
		uint32_t cp;
		size_t len = utf8_decode(p, n, &cp);
		const char *e;

		if (len == 0) {
			sm_buf_printf(out, "\\x%02x", p[0]);
			p++;
			n--;
			continue;
		}
		if (cp == '"') {
			sm_buf_puts(out, "\\\"");
		} else if (cp != 0 && cp < 0x80 &&
		    (e = strchr(esc_to, (int)cp)) != NULL) {
			/* cp < 0x80: strchr converts its argument to char,
			 * so U+0E00 would match the terminator and U+010A
			 * '\n' (found by fuzz_selector). */
			sm_buf_putc(out, '\\');
			sm_buf_putc(out, esc_from[e - esc_to]);
		} else if (go_isprint(cp)) {
			sm_buf_append(out, p, len);
		} else if (cp < 0x20 || cp == 0x7F) {
			sm_buf_printf(out, "\\x%02x", (unsigned)cp);
		} else if (cp < 0x10000) {
			sm_buf_printf(out, "\\u%04x", (unsigned)cp);
		} else {
			sm_buf_printf(out, "\\U%08x", (unsigned)cp);
		}
		p += len;
		n -= len;
	}
	sm_buf_putc(out, '"');
}

void
sm_selector_format(const struct sm_selector *s, struct sm_buf *out)
{
	sm_buf_putc(out, '{');
	for (uint32_t i = 0; i < s->n; i++) {
		if (i > 0)
			sm_buf_putc(out, ',');
		sm_buf_puts(out, s->m[i].name);
		sm_buf_puts(out, match_ops[s->m[i].type]);
		go_quote(out, s->m[i].value);
	}
	sm_buf_putc(out, '}');
}

/* ------------------------------------------------------------------ */
/* Queries                                                             */
/* ------------------------------------------------------------------ */

void
sm_query_init(struct sm_query *q)
{
	sm_selector_init(&q->sel);
	q->type_id = NULL;
	q->metric = NULL;
	q->sample_type = NULL;
	q->sample_unit = NULL;
	q->app = NULL;
}

void
sm_query_fini(struct sm_query *q)
{
	sm_selector_fini(&q->sel);
	sm_free(q->type_id);
	sm_free(q->metric);
	sm_free(q->sample_type);
	sm_free(q->sample_unit);
	sm_free(q->app);
	sm_query_init(q);
}

/* Set type_id, metric, sample_type, sample_unit from a parsed id. */
static int
query_set_type(struct sm_query *q, const struct sm_ptype *pt, bool with_id,
    struct sm_err *err)
{
	char id[5 * SM_PTYPE_PART_MAX];
	int rv;

	if (with_id) {
		/* Cannot fail: five parts below the max each fit. */
		rv = sm_ptype_format(pt, id, sizeof(id));
		SM_ASSERT(rv == 0);
		if ((q->type_id = sm_strdup(id)) == NULL)
			goto nomem;
	}
	if ((q->metric = sm_strdup(pt->name)) == NULL ||
	    (q->sample_type = sm_strdup(pt->sample_type)) == NULL ||
	    (q->sample_unit = sm_strdup(pt->sample_unit)) == NULL)
		goto nomem;
	return (0);
nomem:
	return (sm_err_set(err, SM_ENOMEM, "out of memory"));
}

static bool
app_char(unsigned char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '/' ||
	    c == '-');
}

/* Profile-type id prefix t[b..e): process_cpu:cpu:nanoseconds:cpu:ns. */
static int
query_id_form(struct sm_query *q, const char *t, size_t b, size_t e,
    struct sm_err *err)
{
	struct sm_ptype pt;
	char *id;
	int rv, nparts = 1;

	for (size_t i = b; i < e; i++)
		nparts += t[i] == ':';
	if ((id = sm_strndup(t + b, e - b)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (sm_ptype_parse(id, &pt) != 0) {
		rv = sm_err_set(err, SM_EINVAL, "parse error at position %zu: "
		    "profile-type selection must be of the form <name>:"
		    "<sample-type>:<sample-unit>:<period-type>:<period-unit>"
		    "(:delta), got(%d): \"%.200s\"", b, nparts, id);
		goto out;
	}
	if ((rv = query_set_type(q, &pt, true, err)) != 0)
		goto out;
	rv = sm_selector_add(&q->sel, SM_MATCH_EQ, SM_LABEL_PROFILE_TYPE,
	    q->type_id, err);
out:
	sm_free(id);
	return (rv);
}

/* Legacy FlameQL prefix t[b..e): app.suffix. */
static int
query_legacy_form(struct sm_query *q, const char *t, size_t b, size_t e,
    struct sm_err *err)
{
	const struct sm_legacy_type *lt, *alias;
	const char *suffix = "cpu";
	size_t dot = e, slen = 3;
	struct sm_ptype pt;
	int64_t period;
	char what[32];
	int rv;

	for (size_t i = b; i < e; i++) {
		if (!app_char((unsigned char)t[i]))
			return (sm_err_set(err, SM_EINVAL, "parse error at "
			    "position %zu: invalid app name \"%.*s\": character "
			    "is not allowed: %s", i, (int)SM_MIN(e - b, 200),
			    t + b, byte_what(t, i, what, sizeof(what))));
		if (t[i] == '.')
			dot = i;
	}
	if (dot != e) {
		suffix = t + dot + 1;
		slen = e - dot - 1;
	}
	if (dot == b)
		return (sm_err_set(err, SM_EINVAL, "parse error at position "
		    "%zu: app name is required", b));
	if ((lt = sm_legacy_type_lookup(suffix, slen)) == NULL)
		return (sm_err_set(err, SM_EINVAL, "parse error at position "
		    "%zu: unknown profile type: %.*s", dot + 1,
		    (int)SM_MIN(slen, 200), suffix));
	/* Queries name the sampleRate form: what /ingest writes for the
	 * usual case of a non-zero rate (process_cpu:cpu:nanoseconds). */
	sm_legacy_type_resolve(lt, 100, &pt, &period);
	if ((q->app = sm_strndup(t + b, dot - b)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((alias = sm_legacy_alias_lookup(suffix, slen)) != NULL) {
		char re[5 * SM_PTYPE_PART_MAX];

		/* Either form: one anchored regex on the type id. */
		snprintf(re, sizeof(re), "%s:%s:%s:.*|%s:%s:%s:.*", pt.name,
		    pt.sample_type, pt.sample_unit, alias->metric,
		    alias->sample_type, alias->sample_unit);
		if ((rv = query_set_type(q, &pt, false, err)) != 0 ||
		    (rv = sm_selector_add(&q->sel, SM_MATCH_EQ,
		    SM_LABEL_SERVICE_NAME, q->app, err)) != 0 ||
		    (rv = sm_selector_add(&q->sel, SM_MATCH_RE,
		    SM_LABEL_PROFILE_TYPE, re, err)) != 0)
			return (rv);
		return (0);
	}
	if ((rv = query_set_type(q, &pt, false, err)) != 0 ||
	    (rv = sm_selector_add(&q->sel, SM_MATCH_EQ, SM_LABEL_SERVICE_NAME,
	    q->app, err)) != 0 ||
	    (rv = sm_selector_add(&q->sel, SM_MATCH_EQ, SM_LABEL_NAME,
	    pt.name, err)) != 0 ||
	    (rv = sm_selector_add(&q->sel, SM_MATCH_EQ, SM_LABEL_TYPE,
	    pt.sample_type, err)) != 0 ||
	    (rv = sm_selector_add(&q->sel, SM_MATCH_EQ, SM_LABEL_UNIT,
	    pt.sample_unit, err)) != 0)
		return (rv);
	return (0);
}

/* Bare selector: take the type from the first __profile_type__="id". */
static int
query_bare_type(struct sm_query *q, struct sm_err *err)
{
	struct sm_ptype pt;

	for (uint32_t i = 0; i < q->sel.n; i++) {
		const struct sm_matcher *m = &q->sel.m[i];

		if (m->type != SM_MATCH_EQ ||
		    strcmp(m->name, SM_LABEL_PROFILE_TYPE) != 0)
			continue;
		/* Not an id: the matcher simply selects nothing known. */
		if (sm_ptype_parse(m->value, &pt) != 0)
			return (0);
		return (query_set_type(q, &pt, true, err));
	}
	return (0);
}

int
sm_query_parse(struct sm_query *q, const char *text, struct sm_err *err)
{
	struct sel_parser p;
	size_t b, e;
	bool colon = false;
	int rv;

	sm_query_init(q);
	sel_parser_init(&p, text, err);
	sel_ws(&p);
	b = p.i;
	while (p.t[p.i] != '\0' && p.t[p.i] != '{' && p.t[p.i] != ' ' &&
	    p.t[p.i] != '\t' && p.t[p.i] != '\n' && p.t[p.i] != '\r') {
		colon = colon || p.t[p.i] == ':';
		p.i++;
	}
	e = p.i;
	sel_ws(&p);
	if (b == e && p.t[p.i] != '{') {
		rv = sel_error(&p, p.i, "empty query");
		goto out;
	}
	if (b != e && colon)
		rv = query_id_form(q, text, b, e, err);
	else if (b != e)
		rv = query_legacy_form(q, text, b, e, err);
	else
		rv = 0;
	if (rv != 0)
		goto out;
	if (p.t[p.i] != '{' && p.t[p.i] != '\0') {
		rv = sel_expected(&p, p.i, "'{' or end of input");
		goto out;
	}
	if (p.t[p.i] == '{' && (rv = sel_body(&p, &q->sel)) != 0)
		goto out;
	if ((rv = sel_end(&p)) != 0)
		goto out;
	if (b == e)
		rv = query_bare_type(q, err);
out:
	sel_parser_fini(&p);
	if (rv != 0)
		sm_query_fini(q);
	return (rv);
}
