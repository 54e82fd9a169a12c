/*
 * buf.c -- growable byte buffer; see buf.h.
 */
#include "buf.h"

#include <stdarg.h>

void
sm_buf_fini(struct sm_buf *b)
{
	sm_free(b->b);
	sm_buf_init(b);
}

void
sm_buf_shrink(struct sm_buf *b)
{
	size_t want = b->len + 1 < 64 ? 64 : b->len + 1;
	char *p;

	if (b->b == NULL || b->cap - want < 64 || b->cap - want <= b->cap / 8)
		return;
	if ((p = sm_realloc(b->b, want)) == NULL)
		return;
	b->b = p;
	b->cap = want;
}

int
sm_buf_reserve(struct sm_buf *b, size_t n)
{
	size_t need;
	int rv;

	if (b->err != 0)
		return (b->err);
	if (n > SIZE_MAX - b->len - 1) {
		b->err = SM_ETOOBIG;
		return (b->err);
	}
	need = b->len + n + 1;
	if (b->limit != 0 && need - 1 > b->limit) {
		b->err = SM_ETOOBIG;
		return (b->err);
	}
	/* cap is 0 or >= 64: only this function and sm_buf_shrink set
	 * it. */
	if ((rv = SM_GROW(b->b, b->cap, need, 64)) != 0) {
		b->err = rv;
		return (b->err);
	}
	return (0);
}

void
sm_buf_append_slow(struct sm_buf *b, const void *p, size_t n)
{
	if (sm_buf_reserve(b, n) != 0)
		return;
	if (n != 0)
		memcpy(b->b + b->len, p, n);
	b->len += n;
	b->b[b->len] = '\0';
}

void
sm_buf_putc(struct sm_buf *b, char c)
{
	if (sm_buf_reserve(b, 1) != 0)
		return;
	b->b[b->len++] = c;
	b->b[b->len] = '\0';
}

void
sm_buf_puts(struct sm_buf *b, const char *s)
{
	sm_buf_append(b, s, strlen(s));
}

void
sm_buf_vprintf(struct sm_buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	int n;

	if (b->err != 0)
		return;
	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0) {
		b->err = SM_EINTERNAL;
		return;
	}
	if (sm_buf_reserve(b, (size_t)n) != 0)
		return;
	vsnprintf(b->b + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
}

void
sm_buf_printf(struct sm_buf *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sm_buf_vprintf(b, fmt, ap);
	va_end(ap);
}

void
sm_buf_put_u64(struct sm_buf *b, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	sm_buf_append(b, tmp + i, sizeof(tmp) - i);
}

void
sm_buf_put_i64(struct sm_buf *b, int64_t v)
{
	if (v < 0) {
		sm_buf_putc(b, '-');
		sm_buf_put_u64(b, (uint64_t)0 - (uint64_t)v);
	} else {
		sm_buf_put_u64(b, (uint64_t)v);
	}
}

size_t
sm_utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0], lo, hi;
	size_t len;

	if (c < 0x80)
		return (1);
	/* A continuation byte, a lead of an overlong 2-byte form, or one
	 * past U+10FFFF. */
	if (c < 0xC2 || c > 0xF4)
		return (0);
	len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	/* The second byte's range (the Unicode standard's table 3-7) also
	 * refuses the overlong 3- and 4-byte forms (E0, F0), the
	 * surrogates (ED) and what lies past U+10FFFF (F4). */
	lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
	hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
	if (n < len || s[1] < lo || s[1] > hi)
		return (0);
	for (size_t i = 2; i < len; i++)
		if ((s[i] & 0xC0) != 0x80)
			return (0);
	return (len);
}

bool
sm_buf_put_escape(struct sm_buf *b, unsigned char c)
{
	static const char *const esc[] = {
		['"'] = "\\\"", ['\\'] = "\\\\", ['\n'] = "\\n", ['\r'] = "\\r",
		['\t'] = "\\t",
	};

	if (c >= SM_ARRAY_LEN(esc) || esc[c] == NULL)
		return (false);
	sm_buf_puts(b, esc[c]);
	return (true);
}

void
sm_buf_json_str(struct sm_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run = 0;

	sm_buf_putc(b, '"');
	while (i < n) {
		unsigned c = p[i];
		size_t l;

		if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80 &&
		    c != '<' && c != '>' && c != '&') {
			i++;
			run++;
			continue;
		}
		if (run != 0) {
			sm_buf_append(b, p + i - run, run);
			run = 0;
		}
		if (c >= 0x80) {
			l = sm_utf8_seq_len(p + i, n - i);
			if (l == 0) {
				/* As Go: the escape, not the raw U+FFFD. */
				sm_buf_puts(b, "\\ufffd");
				i++;
			} else if (l == 3 && c == 0xE2 && p[i + 1] == 0x80 &&
			    (p[i + 2] == 0xA8 || p[i + 2] == 0xA9)) {
				/* U+2028, U+2029: escaped by Go for JSONP. */
				sm_buf_puts(b, p[i + 2] == 0xA8 ? "\\u2028" :
				    "\\u2029");
				i += 3;
			} else {
				sm_buf_append(b, p + i, l);
				i += l;
			}
			continue;
		}
		if (!sm_buf_put_escape(b, (unsigned char)c)) {
			/* Control bytes, and <, >, & escaped as Go does. */
			char e[6] = { '\\', 'u', '0', '0', hex[c >> 4],
				hex[c & 15] };
			sm_buf_append(b, e, sizeof(e));
		}
		i++;
	}
	if (run != 0)
		sm_buf_append(b, p + i - run, run);
	sm_buf_putc(b, '"');
}

void
sm_buf_truncate(struct sm_buf *b, size_t len)
{
	SM_ASSERT(len <= b->len);
	b->len = len;
	if (b->b != NULL)
		b->b[len] = '\0';
}

void
sm_buf_reset(struct sm_buf *b)
{
	b->len = 0;
	b->err = 0;
	if (b->b != NULL)
		b->b[0] = '\0';
}

char *
sm_buf_take(struct sm_buf *b, size_t *lenp)
{
	char *p = b->b;

	if (lenp != NULL)
		*lenp = b->len;
	b->b = NULL;
	b->len = b->cap = 0;
	b->err = 0;
	return (p);
}

static const char buf_b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void
sm_buf_put_pct(struct sm_buf *b, const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '~' || (keep_slash && c == '/')) {
			sm_buf_putc(b, (char)c);
		} else {
			sm_buf_putc(b, '%');
			sm_buf_putc(b, hex[c >> 4]);
			sm_buf_putc(b, hex[c & 15]);
		}
	}
}

void
sm_buf_put_base64(struct sm_buf *b, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 3) {
		size_t k = n - i < 3 ? n - i : 3;
		uint32_t v = (uint32_t)p[i] << 16 | (k > 1 ? (uint32_t)p[i + 1] <<
		    8 : 0) | (k > 2 ? p[i + 2] : 0);
		char q[4] = { buf_b64[v >> 18 & 63], buf_b64[v >> 12 & 63],
		    k > 1 ? buf_b64[v >> 6 & 63] : '=',
		    k > 2 ? buf_b64[v & 63] : '=' };

		sm_buf_append(b, q, 4);
	}
}

int
sm_base64_digit(unsigned char c, bool url)
{
	if (c >= 'A' && c <= 'Z')
		return (c - 'A');
	if (c >= 'a' && c <= 'z')
		return (c - 'a' + 26);
	if (c >= '0' && c <= '9')
		return (c - '0' + 52);
	if (c == (url ? '-' : '+'))
		return (62);
	if (c == (url ? '_' : '/'))
		return (63);
	return (-1);
}

int
sm_buf_put_unbase64(struct sm_buf *b, const char *s, size_t n)
{
	uint32_t v = 0;
	int k = 0;

	for (size_t i = 0; i < n; i++) {
		int d;

		if (s[i] == '=') {
			/* closes the group: 2 or 3 digits, then '='s */
			if (k < 2)
				return (SM_EINVAL);
			while (i + 1 < n && s[i + 1] == '=' && k < 3) {
				i++;
				k++;
			}
			k = 0;
			v = 0;
			continue;
		}
		if ((d = sm_base64_digit((unsigned char)s[i], false)) < 0)
			return (SM_EINVAL);
		v = v << 6 | (uint32_t)d;
		k++;
		if (k == 2)
			sm_buf_putc(b, (char)(v >> 4 & 0xff));
		else if (k == 3)
			sm_buf_putc(b, (char)(v >> 2 & 0xff));
		else if (k == 4) {
			sm_buf_putc(b, (char)(v & 0xff));
			k = 0;
			v = 0;
		}
	}
	if (k == 1)
		return (SM_EINVAL);
	return (sm_buf_error(b));
}
