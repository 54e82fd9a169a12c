/*
 * pbwire.h -- the protobuf wire format read and written directly, for the
 * hot decoders that must not unpack into protobuf-c structs (the pprof
 * decoder, the OTLP transcoder) and for small hand-built messages.
 *
 * Reader: a cursor over one message's bytes.  Each read checks bounds and
 * never reads at or past `end`; on failure it returns -1 and leaves a
 * static description in `why` ("truncated varint", "length-delimited field
 * runs past its message", ...), so callers build their precise error from
 * it and the cursor's offset.  An optional schema lists, per field number,
 * the wire types the message declares (bit 1 << wire type, SM_PBW_V /
 * SM_PBW_L / SM_PBW_F64 / SM_PBW_F32); a known field arriving with another
 * wire type is refused, as protobuf-c and Go's decoders refuse it.
 * Unknown fields are skipped whatever their type, groups included (to a
 * bounded depth).
 *
 * Writer: appends keys, varints and length-delimited fields to an sm_buf
 * (buf.h: errors are sticky there, checked once at the end).
 *
 * Header-only but for sm_pbw_skip (pbwire.c): the decoders call the
 * readers per field, so they must inline.  Locking: none.
 */
#ifndef SM_PBWIRE_H
#define SM_PBWIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "buf.h"
#include "sm.h"
#include "varint.h"

enum {
	SM_PBW_VARINT = 0,
	SM_PBW_I64 = 1,
	SM_PBW_LEN = 2,
	SM_PBW_SGROUP = 3,
	SM_PBW_EGROUP = 4,
	SM_PBW_I32 = 5,
};

/* Schema bits: the wire types a field may arrive with. */
#define SM_PBW_V   (1u << SM_PBW_VARINT)
#define SM_PBW_F64 (1u << SM_PBW_I64)
#define SM_PBW_L   (1u << SM_PBW_LEN)
#define SM_PBW_F32 (1u << SM_PBW_I32)

/* Nesting of skipped groups refused past this depth. */
#define SM_PBW_GROUP_DEPTH 32

struct sm_pbw {
	const uint8_t *p, *end;
	const char *why;        /* set on failure */
	const uint8_t *schema;  /* schema[f]: allowed wire types of field f */
	uint32_t nschema;
};

/* A reader over p[0..n) with the schema array s (or NULL, 0). */
#define SM_PBW(p, n, s) { (p), (p) + (n), NULL, (s), \
	(uint32_t)((s) != NULL ? sizeof(s) : 0) }
#define SM_PBW_RAW(p, n) { (p), (p) + (n), NULL, NULL, 0 }

static inline int
sm_pbw_varint(struct sm_pbw *r, uint64_t *v)
{
	int st = sm_uvarint_get(&r->p, r->end, v);

	if (SM_UNLIKELY(st != 0)) {
		r->why = sm_uvarint_why(st);
		return (-1);
	}
	return (0);
}

static inline int
sm_pbw_key(struct sm_pbw *r, uint32_t *field, uint32_t *wt)
{
	uint64_t k;

	if (sm_pbw_varint(r, &k) != 0)
		return (-1);
	if ((k >> 3) == 0 || (k >> 3) > 0x1fffffff || (k & 7) > 5) {
		r->why = (k >> 3) == 0 || (k >> 3) > 0x1fffffff ?
		    "invalid field number" : "invalid wire type";
		return (-1);
	}
	*field = (uint32_t)(k >> 3);
	*wt = (uint32_t)(k & 7);
	if (r->schema != NULL && *field < r->nschema &&
	    r->schema[*field] != 0 && (r->schema[*field] & (1u << *wt)) == 0) {
		r->why = "wrong wire type for a known field";
		return (-1);
	}
	return (0);
}

static inline int
sm_pbw_bytes(struct sm_pbw *r, const uint8_t **p, size_t *n)
{
	uint64_t len;

	if (sm_pbw_varint(r, &len) != 0)
		return (-1);
	if (len > (uint64_t)(r->end - r->p)) {
		r->why = "length-delimited field runs past its message";
		return (-1);
	}
	*p = r->p;
	*n = (size_t)len;
	r->p += len;
	return (0);
}

/* A fixed64 (little-endian) value. */
static inline int
sm_pbw_fixed64(struct sm_pbw *r, uint64_t *v)
{
	if ((size_t)(r->end - r->p) < 8) {
		r->why = "truncated fixed-width field";
		return (-1);
	}
	*v = 0;
	for (int i = 7; i >= 0; i--)
		*v = *v << 8 | r->p[i];
	r->p += 8;
	return (0);
}

/* Skip the value of a field whose key was just read. */
int sm_pbw_skip(struct sm_pbw *r, uint32_t field, uint32_t wt);

/*
 * The next length-delimited field of `r`, its number in *field and its
 * bytes in (*p)[0..*n), every other field skipped on the way: 1, 0 at
 * the end of the message, -1 on a wire error (`why` set, the cursor where
 * it failed).  For the readers that want only a message's LEN fields.
 */
static inline int
sm_pbw_next_len(struct sm_pbw *r, uint32_t *field, const uint8_t **p,
    size_t *n)
{
	uint32_t wt;

	while (r->p < r->end) {
		if (sm_pbw_key(r, field, &wt) != 0)
			return (-1);
		if (wt == SM_PBW_LEN)
			return (sm_pbw_bytes(r, p, n) != 0 ? -1 : 1);
		if (sm_pbw_skip(r, *field, wt) != 0)
			return (-1);
	}
	return (0);
}

/* --- writer --------------------------------------------------------------- */

static inline void
sm_pbw_put_uvarint(struct sm_buf *b, uint64_t v)
{
	uint8_t t[SM_UVARINT_MAX];

	/* straight into the buffer when it has room: a call to memcpy per
	 * varint was a tenth of the OTLP transcoder's time */
	if (SM_LIKELY(b->err == 0 && b->limit == 0 &&
	    SM_UVARINT_MAX < b->cap - b->len)) {
		b->len += sm_uvarint_put((uint8_t *)b->b + b->len, v);
		b->b[b->len] = '\0';
		return;
	}
	sm_buf_append(b, t, sm_uvarint_put(t, v));
}

static inline void
sm_pbw_put_key(struct sm_buf *b, uint32_t field, uint32_t wt)
{
	sm_pbw_put_uvarint(b, (uint64_t)field << 3 | wt);
}

/* A varint field (int32/int64 as two's complement, as protobuf does). */
static inline void
sm_pbw_put_varint(struct sm_buf *b, uint32_t field, uint64_t v)
{
	sm_pbw_put_key(b, field, SM_PBW_VARINT);
	sm_pbw_put_uvarint(b, v);
}

/* A length-delimited field's key and length; the caller appends n bytes. */
static inline void
sm_pbw_put_len(struct sm_buf *b, uint32_t field, size_t n)
{
	sm_pbw_put_key(b, field, SM_PBW_LEN);
	sm_pbw_put_uvarint(b, n);
}

static inline void
sm_pbw_put_bytes(struct sm_buf *b, uint32_t field, const void *p, size_t n)
{
	sm_pbw_put_len(b, field, n);
	sm_buf_append(b, p, n);
}

#endif /* SM_PBWIRE_H */
