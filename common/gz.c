/*
 * gz.c -- see gz.h.
 *
 * libdeflate needs the whole output buffer up front.  The gzip trailer's
 * ISIZE (uncompressed size mod 2^32) is a hint only -- it is attacker
 * controlled -- so the first attempt uses min(ISIZE, cap) + 1 bytes and, if
 * the data does not fit, one retry uses cap + 1 bytes.  Anything that needs
 * more than `cap` bytes is refused.
 */
#include "gz.h"

#include <libdeflate.h>
#include <string.h>
#include <zlib.h>

static int
gz_member(struct libdeflate_decompressor *d, const uint8_t *in, size_t len,
    uint8_t *out, size_t avail, size_t *in_used, size_t *out_used)
{
	enum libdeflate_result r;

	r = libdeflate_gzip_decompress_ex(d, in, len, out, avail, in_used,
	    out_used);
	switch (r) {
	case LIBDEFLATE_SUCCESS:
		return (0);
	case LIBDEFLATE_INSUFFICIENT_SPACE:
		return (SM_ETOOBIG);
	default:
		return (SM_EMALFORMED);
	}
}

/* Inflate all members into out[0..avail); SM_ETOOBIG when it does not fit. */
static int
gz_all(struct libdeflate_decompressor *d, const uint8_t *in, size_t len,
    uint8_t *out, size_t avail, size_t *total)
{
	size_t off = 0, pos = 0;
	int rv;

	while (off < len) {
		size_t used_in = 0, used_out = 0;

		if (!sm_is_gzip(in + off, len - off)) {
			/* Trailing garbage after a member: Go errors too. */
			return (SM_EMALFORMED);
		}
		rv = gz_member(d, in + off, len - off, out + pos, avail - pos,
		    &used_in, &used_out);
		if (rv != 0)
			return (rv);
		off += used_in;
		pos += used_out;
	}
	*total = pos;
	return (0);
}

int
sm_gunzip(const uint8_t *in, size_t len, size_t cap, struct sm_arena *a,
    uint8_t **out, size_t *outlen, struct sm_err *err)
{
	struct libdeflate_decompressor *d;
	size_t hint, avail, total = 0;
	uint8_t *buf;
	int rv;

	*out = NULL;
	*outlen = 0;
	if (!sm_is_gzip(in, len) || len < 18)
		return (sm_err_set(err, SM_EMALFORMED,
		    "invalid gzip data: truncated header"));
	hint = (size_t)in[len - 4] | (size_t)in[len - 3] << 8 |
	    (size_t)in[len - 2] << 16 | (size_t)in[len - 1] << 24;
	avail = SM_MIN(hint, cap) + 1;
	if ((d = libdeflate_alloc_decompressor()) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (int attempt = 0; attempt < 2; attempt++) {
		buf = sm_arena_alloc(a, avail);
		if (buf == NULL) {
			rv = sm_err_set(err, SM_ENOMEM,
			    "out of memory inflating %zu bytes", avail);
			goto out;
		}
		rv = gz_all(d, in, len, buf, avail, &total);
		if (rv != SM_ETOOBIG || avail == cap + 1)
			break;
		avail = cap + 1;
	}
	if (rv == 0 && total > cap)
		rv = SM_ETOOBIG;
	if (rv == SM_ETOOBIG) {
		sm_err_set(err, rv,
		    "uncompressed profile payload size exceeds limit of %zu bytes",
		    cap);
	} else if (rv == SM_EMALFORMED) {
		sm_err_set(err, rv, "invalid gzip data: corrupt or truncated "
		    "deflate stream");
	} else if (rv == 0) {
		*out = buf;
		*outlen = total;
	}
out:
	libdeflate_free_decompressor(d);
	return (rv);
}

int
sm_gzip(const uint8_t *in, size_t len, int level, uint8_t **out,
    size_t *outlen)
{
	struct libdeflate_compressor *c = libdeflate_alloc_compressor(level);
	size_t bound, n;
	uint8_t *buf;

	if (c == NULL)
		return (SM_ENOMEM);
	bound = libdeflate_gzip_compress_bound(c, len);
	buf = sm_malloc(bound);
	if (buf == NULL) {
		libdeflate_free_compressor(c);
		return (SM_ENOMEM);
	}
	n = libdeflate_gzip_compress(c, in, len, buf, bound);
	libdeflate_free_compressor(c);
	if (n == 0) {
		sm_free(buf);
		return (SM_ENOMEM);
	}
	*out = buf;
	*outlen = n;
	return (0);
}

/* --- streamed ------------------------------------------------------------- */

struct sm_gunzip_stream {
	z_stream zs;
	const uint8_t *in;
	size_t len, pos;
	bool end;
};

int
sm_gunzip_stream_open(const uint8_t *in, size_t len,
    struct sm_gunzip_stream **out)
{
	struct sm_gunzip_stream *z;

	*out = NULL;
	if ((z = sm_calloc(1, sizeof(*z))) == NULL)
		return (SM_ENOMEM);
	z->in = in;
	z->len = len;
	if (inflateInit2(&z->zs, 16 + MAX_WBITS) != Z_OK) {
		sm_free(z);
		return (SM_ENOMEM);
	}
	*out = z;
	return (0);
}

int
sm_gunzip_stream_read(struct sm_gunzip_stream *z, uint8_t *out, size_t want,
    size_t *got, struct sm_err *err)
{
	*got = 0;
	while (*got < want && !z->end) {
		uInt before;
		int zr;

		z->zs.next_out = out + *got;
		z->zs.avail_out = (uInt)SM_MIN(want - *got, (size_t)UINT32_MAX);
		if (z->zs.avail_in == 0 && z->pos < z->len) {
			z->zs.next_in = (Bytef *)(uintptr_t)(z->in + z->pos);
			z->zs.avail_in = (uInt)SM_MIN(z->len - z->pos,
			    (size_t)1 << 30);
			z->pos += z->zs.avail_in;
		}
		before = z->zs.avail_out;
		zr = inflate(&z->zs, Z_NO_FLUSH);
		*got += before - z->zs.avail_out;
		if (zr == Z_STREAM_END) {
			/* concatenated members, as Go's gzip reader */
			if (z->zs.avail_in == 0 && z->pos >= z->len)
				z->end = true;
			else if (inflateReset(&z->zs) != Z_OK)
				return (sm_err_set(err, SM_EMALFORMED,
				    "invalid gzip data"));
		} else if (zr == Z_BUF_ERROR && z->zs.avail_in == 0 &&
		    z->pos >= z->len) {
			return (sm_err_set(err, SM_EMALFORMED, "invalid gzip "
			    "data: unexpected end of stream"));
		} else if (zr == Z_MEM_ERROR) {
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		} else if (zr != Z_OK && zr != Z_BUF_ERROR) {
			return (sm_err_set(err, SM_EMALFORMED, "invalid gzip "
			    "data: %s", z->zs.msg != NULL ? z->zs.msg :
			    "inflate failed"));
		}
	}
	return (0);
}

void
sm_gunzip_stream_close(struct sm_gunzip_stream *z)
{
	if (z == NULL)
		return;
	inflateEnd(&z->zs);
	sm_free(z);
}

uint32_t
sm_crc32(uint32_t crc, const void *p, size_t n)
{
	return (libdeflate_crc32(crc, p, n));
}
