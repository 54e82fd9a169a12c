/*
 * buf.h -- growable byte buffer for building responses, keys and text.
 *
 * The buffer has a sticky error flag: once an append fails (out of memory,
 * or the optional `limit` would be exceeded) every later append is a no-op
 * and sm_buf_error() reports the first failure.  Builders therefore append
 * freely and check once at the end.
 *
 * Ownership: the buffer owns `b`; sm_buf_fini() frees it, sm_buf_take()
 * hands it to the caller (who frees it with sm_free).  The content is always
 * NUL-terminated (not counted in len) so text can be used as a C string.
 * Locking: none.
 */
#ifndef SM_BUF_H
#define SM_BUF_H

#include <stdbool.h>
#include <string.h>

#include "sm.h"

struct sm_buf {
	char *b;
	size_t len;
	size_t cap;
	size_t limit;   /* 0 = unlimited; appends past it fail with ETOOBIG */
	int err;        /* first error (SM_ENOMEM or SM_ETOOBIG), sticky */
};

#define SM_BUF_INIT { NULL, 0, 0, 0, 0 }

static inline void sm_buf_init(struct sm_buf *b)
{
	b->b = NULL;
	b->len = b->cap = b->limit = 0;
	b->err = 0;
}

void sm_buf_fini(struct sm_buf *b);

/* Ensure room for `n` more bytes (plus the NUL).  Returns 0 or the error. */
int sm_buf_reserve(struct sm_buf *b, size_t n);

/*
 * Give back unused room (a buffer that reserved a worst case, such as a
 * compressor's bound, and is kept): when more than an eighth of it (and
 * at least 64 bytes) is unused, realloc to the content.  A failed realloc
 * leaves the buffer as it was.
 */
void sm_buf_shrink(struct sm_buf *b);

void sm_buf_append_slow(struct sm_buf *b, const void *p, size_t n);

/* Append n bytes.  Inline for the case with room (encoders append a
 * byte or a varint at a time); growing, limits and errors out of line. */
static inline void
sm_buf_append(struct sm_buf *b, const void *p, size_t n)
{
	if (SM_LIKELY(b->err == 0 && b->limit == 0 && n < b->cap - b->len)) {
		if (n != 0)
			memcpy(b->b + b->len, p, n);
		b->len += n;
		b->b[b->len] = '\0';
		return;
	}
	sm_buf_append_slow(b, p, n);
}
void sm_buf_putc(struct sm_buf *b, char c);
void sm_buf_puts(struct sm_buf *b, const char *s);
void sm_buf_printf(struct sm_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sm_buf_vprintf(struct sm_buf *b, const char *fmt, va_list ap);
void sm_buf_put_i64(struct sm_buf *b, int64_t v);   /* decimal */
void sm_buf_put_u64(struct sm_buf *b, uint64_t v);  /* decimal */

/*
 * The string s percent-encoded (RFC 3986): the unreserved characters
 * (letters, digits, "-._~") as they are, and '/' too when keep_slash
 * (an object key's path); every other byte as %XX in upper case.
 */
void sm_buf_put_pct(struct sm_buf *b, const char *s, bool keep_slash);

/* Standard base64 (RFC 4648, section 4, with padding) of p[0..n). */
void sm_buf_put_base64(struct sm_buf *b, const uint8_t *p, size_t n);

/*
 * Append the bytes standard base64 text s[0..n) stands for.  Padding is
 * optional at the end and may also close a group in the middle (gRPC-web
 * text bodies are padded chunks laid end to end).  SM_EINVAL for another
 * character or a lone trailing character (the buffer may then hold part
 * of the bytes), else 0 or the buffer's error.
 */
int sm_buf_put_unbase64(struct sm_buf *b, const char *s, size_t n);

/* The value of base64 digit c, or -1: the standard alphabet, or with url
 * the URL one ('-' and '_' for 62 and 63, RFC 4648 section 5). */
int sm_base64_digit(unsigned char c, bool url);

/*
 * Length of the valid UTF-8 sequence at s[0..n) (n > 0), or 0 if it is
 * not valid (overlong forms, surrogates and values past U+10FFFF are
 * invalid).
 */
size_t sm_utf8_seq_len(const unsigned char *s, size_t n);

/* Code point cp (<= 0x10FFFF) as UTF-8 at dst (room for 4 bytes);
 * returns the bytes written. */
static inline size_t
sm_utf8_put(char *dst, uint32_t cp)
{
	if (cp < 0x80) {
		dst[0] = (char)cp;
		return (1);
	}
	if (cp < 0x800) {
		dst[0] = (char)(0xC0 | cp >> 6);
		dst[1] = (char)(0x80 | (cp & 0x3F));
		return (2);
	}
	if (cp < 0x10000) {
		dst[0] = (char)(0xE0 | cp >> 12);
		dst[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		dst[2] = (char)(0x80 | (cp & 0x3F));
		return (3);
	}
	dst[0] = (char)(0xF0 | cp >> 18);
	dst[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	dst[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	dst[3] = (char)(0x80 | (cp & 0x3F));
	return (4);
}

/*
 * The five escapes JSON and Go's strconv.Quote write alike (\" \\ \n \r
 * \t): append the escape of `c` and return true, or return false (nothing
 * appended) when `c` is none of them, for the caller's own rule.
 */
bool sm_buf_put_escape(struct sm_buf *b, unsigned char c);

/*
 * Append `s` as a JSON string literal, quotes included.  Escaping matches
 * Go's encoding/json byte for byte (Pyroscope's responses): invalid UTF-8
 * becomes \ufffd, and U+2028, U+2029, <, > and & are escaped, so the output
 * is always valid JSON.
 */
void sm_buf_json_str(struct sm_buf *b, const char *s, size_t n);

/* Truncate to `len` bytes (len <= b->len). */
void sm_buf_truncate(struct sm_buf *b, size_t len);

/* Reset to empty, keeping the allocation and clearing the error. */
void sm_buf_reset(struct sm_buf *b);

/* First error of the buffer, or 0. */
static inline int sm_buf_error(const struct sm_buf *b)
{
	return (b->err);
}

/*
 * Take ownership of the bytes (may be NULL when empty).  The buffer is
 * left empty and reusable.
 */
char *sm_buf_take(struct sm_buf *b, size_t *lenp);

#endif /* SM_BUF_H */
