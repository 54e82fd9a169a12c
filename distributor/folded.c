/*
 * folded.c -- the folded, lines and trie bodies of /ingest; see folded.h.
 *
 * All three end in the same place: a stack "f1;f2;...;leaf" (root first)
 * and a value, fed to the batch frame by frame from the root (node 0), the
 * value scaled and added at the last node kept (folded_stack).  The batch
 * sums repeated stacks and drops values <= 0, so nothing here deduplicates.
 *
 * Counts (folded).  Pyroscope parses them with strconv.Atoi: an optional
 * '+' or '-', then one or more ASCII digits, in int64 range; anything else
 * fails the request.  We accept exactly that syntax.  A negative (or zero)
 * count is not an error there, and the sample is dropped downstream; here
 * it is skipped before any frame is interned.  Go's bufio.Scanner also
 * refuses lines over 64 KiB; we do not copy that limit (the body size and
 * symbol length limits bound the work).
 *
 * Trie.  Pre-order: each node is uvarint nameLen, name, uvarint value,
 * uvarint nChildren.  The walk keeps one key buffer (the names on the
 * current path, concatenated) and a stack of open nodes, each with its
 * children still to come and the key length before its own name.  A node
 * with no children cuts its name off at once; the last child of a node
 * closes it too, and so on upwards.  A body may hold several top-level
 * tries one after the other (Pyroscope reads nodes until EOF); EOF with
 * children still expected is truncation.  A node announcing more children
 * than the bytes left could hold (3 bytes at least each) is refused up
 * front, which bounds the stack by the input size.
 */
#include "folded.h"

#include <string.h>

#include "common/varint.h"

/* Turn a batch failure into a message. */
static int
folded_batch_err(int rv, struct sm_err *err)
{
	if (rv == SM_ENOMEM)
		return (sm_err_set(err, rv, "out of memory"));
	if (rv == SM_EMALFORMED)
		return (sm_err_set(err, rv, "a frame name contains a NUL byte"));
	return (sm_err_set(err, rv, "profile too large: stack tree limit"));
}

/*
 * Feed stack s[0..n) with an already scaled value.  Frames past
 * limits->max_depth (0 = no limit) are dropped, keeping the root side.
 */
static int
folded_stack(struct dist_batch *b, uint32_t series, const char *s,
    size_t n, int64_t value, struct sm_err *err)
{
	uint32_t node = 0, name, depth = 0, max = b->limits->max_depth;
	size_t i = 0;
	int rv;

	for (;;) {
		const char *e;
		size_t fl;

		if (max != 0 && depth == max)
			break;
		e = memchr(s + i, ';', n - i);
		fl = e != NULL ? (size_t)(e - (s + i)) : n - i;
		if ((rv = dist_batch_frame(b, s + i, fl, &name)) != 0 ||
		    (rv = dist_batch_node(b, node, name, &node)) != 0)
			return (folded_batch_err(rv, err));
		depth++;
		if (e == NULL)
			break;
		i += fl + 1;
	}
	if ((rv = dist_batch_add(b, series, node, value)) != 0)
		return (folded_batch_err(rv, err));
	return (0);
}

/* strconv.Atoi syntax: [+-]digits, in int64 range.  0 or -1. */
static int
folded_atoi(const char *s, size_t n, int64_t *out)
{
	uint64_t v = 0, lim = (uint64_t)INT64_MAX;
	size_t i = 0;
	int neg = 0;

	if (n > 0 && (s[0] == '+' || s[0] == '-')) {
		neg = s[0] == '-';
		lim += (uint64_t)neg;   /* -2^63 is in range */
		i = 1;
	}
	if (i == n)
		return (-1);
	for (; i < n; i++) {
		unsigned d = (unsigned)(unsigned char)s[i] - '0';

		if (d > 9 || v > (lim - d) / 10)
			return (-1);
		v = v * 10 + d;
	}
	*out = neg ? (v == 0 ? 0 : -(int64_t)(v - 1) - 1) : (int64_t)v;
	return (0);
}

/* Multiply by scale; SM_EMALFORMED with `what` on overflow. */
static int
folded_scale(int64_t v, int64_t scale, int64_t *out, const char *what,
    uint64_t where, struct sm_err *err)
{
	if (__builtin_mul_overflow(v, scale, out))
		return (sm_err_set(err, SM_EMALFORMED,
		    "%s %llu: value %lld times %lld overflows int64", what,
		    (unsigned long long)where, (long long)v,
		    (long long)scale));
	return (0);
}

/* Next line of t[*pos..n): its bytes without "\n" or "\r\n". */
static int
folded_line(const char *t, size_t n, size_t *pos, const char **line,
    size_t *len)
{
	const char *p, *e;
	size_t l;

	if (*pos >= n)
		return (0);
	p = t + *pos;
	e = memchr(p, '\n', n - *pos);
	l = e != NULL ? (size_t)(e - p) : n - *pos;
	*pos += l + (e != NULL);
	if (l > 0 && p[l - 1] == '\r')
		l--;
	*line = p;
	*len = l;
	return (1);
}

int
dist_text_decode(const uint8_t *body, size_t len, struct sm_arena *a,
    const char **out, size_t *outlen, struct sm_err *err)
{
	uint8_t *dst;
	size_t o = 0;
	int be;

	*out = (const char *)body;
	*outlen = len;
	if (len >= 3 && body[0] == 0xEF && body[1] == 0xBB && body[2] == 0xBF) {
		*out = (const char *)body + 3;
		*outlen = len - 3;
		return (0);
	}
	if (len < 2 || !((body[0] == 0xFF && body[1] == 0xFE) ||
	    (body[0] == 0xFE && body[1] == 0xFF)))
		return (0);
	be = body[0] == 0xFE;
	body += 2;
	len -= 2;
	*out = NULL;
	*outlen = 0;
	if (len % 2 != 0)
		return (sm_err_set(err, SM_EMALFORMED,
		    "UTF-16 text has an odd number of bytes (%zu after the "
		    "byte order mark)", len));
	/* A unit becomes at most 3 bytes (a surrogate pair 4 for 2). */
	if (len / 2 > (SIZE_MAX - 1) / 3 ||
	    (dst = sm_arena_alloc(a, len / 2 * 3 + 1)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < len; i += 2) {
		uint32_t c = be ? (uint32_t)body[i] << 8 | body[i + 1] :
		    (uint32_t)body[i + 1] << 8 | body[i];

		if (c >= 0xD800 && c <= 0xDFFF) {
			uint32_t c2 = 0;

			if (c <= 0xDBFF && i + 3 < len)
				c2 = be ? (uint32_t)body[i + 2] << 8 |
				    body[i + 3] : (uint32_t)body[i + 3] << 8 |
				    body[i + 2];
			if (c2 >= 0xDC00 && c2 <= 0xDFFF) {
				c = 0x10000 + ((c - 0xD800) << 10) +
				    (c2 - 0xDC00);
				i += 2;
			} else {
				c = 0xFFFD;     /* unpaired surrogate */
			}
		}
		o += sm_utf8_put((char *)dst + o, c);
	}
	dst[o] = '\0';
	*out = (const char *)dst;
	*outlen = o;
	return (0);
}

/*
 * Folded stacks (`counted`: "a;b;c 12", a trailing sample count, '#'
 * lines skipped) or one stack a line, each counting 1 (`scale` once
 * scaled), into `b`.
 */
static int
stacks_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, bool counted, struct sm_err *err)
{
	const char *t, *line;
	size_t n, pos = 0, l;
	uint64_t lineno = 0;
	int rv;

	if ((rv = dist_text_decode(body, len, b->arena, &t, &n, err)) != 0)
		return (rv);
	while (folded_line(t, n, &pos, &line, &l)) {
		const char *sp;
		int64_t count, v;

		lineno++;
		if (l == 0)
			continue;
		if (!counted) {
			if ((rv = folded_stack(b, series, line, l, scale,
			    err)) != 0)
				return (rv);
			continue;
		}
		if (line[0] == '#')
			continue;
		if ((sp = memrchr(line, ' ', l)) == NULL)
			continue;
		if (folded_atoi(sp + 1, l - (size_t)(sp + 1 - line),
		    &count) != 0)
			return (sm_err_set(err, SM_EMALFORMED,
			    "folded line %llu: invalid sample count \"%.*s\"",
			    (unsigned long long)lineno,
			    (int)SM_MIN(l - (size_t)(sp + 1 - line), 64),
			    sp + 1));
		if (count <= 0)
			continue;       /* Pyroscope drops it too */
		if ((rv = folded_scale(count, scale, &v, "folded line", lineno,
		    err)) != 0 ||
		    (rv = folded_stack(b, series, line, (size_t)(sp - line), v,
		    err)) != 0)
			return (rv);
	}
	return (0);
}

int
dist_folded_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, struct sm_err *err)
{
	return (stacks_parse(body, len, b, series, scale, true, err));
}

int
dist_lines_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, struct sm_err *err)
{
	return (stacks_parse(body, len, b, series, scale, false, err));
}

/* Go's binary.Uvarint: at most 10 bytes, no overflow.  0, -1 short, -2 bad. */
static int
trie_uvarint(const uint8_t *p, size_t len, size_t *off, uint64_t *v)
{
	const uint8_t *q = p + *off;
	int st = sm_uvarint_get(&q, p + len, v);

	if (st != 0)
		return (st == SM_UVARINT_SHORT ? -1 : -2);
	*off = (size_t)(q - p);
	return (0);
}

/* An open node: children still to read, key length before it. */
struct trie_open {
	uint64_t left;
	size_t base;
};

/*
 * The trie and the tree share their node encoding (folded.h) and this
 * walk; `tree` picks the tree's reading: a name is one path component
 * joined with ';' below the first level, the root's name and value and a
 * nameless first-level node's value do not count, and the body is one
 * root's subtree (the trie's is any number of roots, to the end).
 */
static int
prefix_tree_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, bool tree, struct sm_err *err)
{
	static const char *field[] = { "name length", "value", "child count" };
	const char *what = tree ? "tree" : "trie";
	struct trie_open *stk = NULL;
	uint32_t top = 0, cap = 0;
	char *key = NULL;
	size_t off = 0, keylen = 0;
	uint64_t nodes = 0;
	int rv = 0;

	/* A path holds each name once, and for a tree a ';' per node (each
	 * node is at least 3 bytes). */
	if ((key = sm_malloc(len + len / 3 + 1)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	while (tree ? (nodes == 0 || top > 0) : (off < len || top > 0)) {
		uint64_t f[3];
		size_t at = off, base = keylen;
		int64_t v;

		if (off >= len) {
			rv = sm_err_set(err, SM_EMALFORMED, nodes == 0 ?
			    "%s: empty body" : "%s: truncated: %llu more "
			    "child node(s) expected at byte %zu", what,
			    (unsigned long long)(top > 0 ? stk[top - 1].left :
			    0), off);
			goto out;
		}
		nodes++;
		/* nameLen, then the name, then value and child count. */
		for (int k = 0; k < 3; k++) {
			int r = trie_uvarint(body, len, &off, &f[k]);

			if (r != 0) {
				rv = sm_err_set(err, SM_EMALFORMED,
				    "%s: node %llu at byte %zu: %s %s", what,
				    (unsigned long long)nodes, at, field[k],
				    r == -1 ? "truncated" : "overflows");
				goto out;
			}
			if (k != 0)
				continue;
			if (f[0] > len - off) {
				rv = sm_err_set(err, SM_EMALFORMED,
				    "%s: node %llu at byte %zu: name of %llu "
				    "bytes truncated", what,
				    (unsigned long long)nodes, at,
				    (unsigned long long)f[0]);
				goto out;
			}
			if (!tree || nodes > 1) {
				if (tree && top >= 2)
					key[keylen++] = ';';
				/* The path's names were all read once. */
				memcpy(key + keylen, body + off, (size_t)f[0]);
				keylen += (size_t)f[0];
			}
			off += (size_t)f[0];
		}
		if (f[1] > 0 && (!tree || (nodes > 1 && keylen > 0))) {
			if (f[1] > (uint64_t)INT64_MAX) {
				rv = sm_err_set(err, SM_EMALFORMED,
				    "%s: node %llu at byte %zu: value %llu "
				    "overflows int64", what,
				    (unsigned long long)nodes, at,
				    (unsigned long long)f[1]);
				goto out;
			}
			if ((rv = folded_scale((int64_t)f[1], scale, &v,
			    tree ? "tree node" : "trie node", nodes, err)) !=
			    0 || (rv = folded_stack(b, series, key, keylen, v,
			    err)) != 0)
				goto out;
		}
		if (f[2] > 0) {
			if (f[2] > (len - off) / 3) {
				rv = sm_err_set(err, SM_EMALFORMED,
				    "%s: node %llu at byte %zu: %llu children "
				    "cannot fit in the %zu bytes left", what,
				    (unsigned long long)nodes, at,
				    (unsigned long long)f[2], len - off);
				goto out;
			}
			if (SM_GROW(stk, cap, top + 1, 64) != 0) {
				rv = sm_err_set(err, SM_ENOMEM,
				    "out of memory");
				goto out;
			}
			stk[top].left = f[2];
			stk[top++].base = base;
			continue;
		}
		/* A leaf: cut its name, then close every finished parent. */
		keylen = base;
		while (top > 0 && --stk[top - 1].left == 0)
			keylen = stk[--top].base;
	}
	/* A tree's bytes after the root's subtree are ignored, as
	 * Pyroscope's reader stops there. */
out:
	sm_free(key);
	sm_free(stk);
	return (rv);
}

int
dist_trie_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, struct sm_err *err)
{
	return (prefix_tree_parse(body, len, b, series, scale, false, err));
}

int
dist_tree_parse(const uint8_t *body, size_t len, struct dist_batch *b,
    uint32_t series, int64_t scale, struct sm_err *err)
{
	return (prefix_tree_parse(body, len, b, series, scale, true, err));
}
