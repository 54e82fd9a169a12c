/*
 * varint.h -- the one unsigned LEB128 varint codec: protobuf's wire
 * varints, Go's encoding/binary Uvarint (the trie format) and Smolder's
 * block and set encodings all use it.
 *
 * Contract: a varint is at most SM_UVARINT_MAX (10) bytes; the tenth may
 * only carry the top bit of a 64-bit value (0 or 1), so nothing wraps.
 * Decoding never reads at or past `end`.  Non-minimal encodings (0x80 0x00)
 * are accepted, as protobuf and Go accept them.  Signed values use zigzag
 * (sm_zigzag_*), as protobuf's sint32/sint64.
 *
 * Header-only: the pprof decoder calls sm_uvarint_get per field, so it
 * must inline (the one-byte case is tested first).
 */
#ifndef SM_VARINT_H
#define SM_VARINT_H

#include <stddef.h>
#include <stdint.h>

#include "sm.h"

#define SM_UVARINT_MAX 10

/* sm_uvarint_get results besides 0. */
#define SM_UVARINT_SHORT    (-1)   /* `end` came first */
#define SM_UVARINT_OVERFLOW (-2)   /* more than 64 bits */

/*
 * Decode one varint at *pp into *v and advance *pp past it.  Returns 0,
 * or SM_UVARINT_SHORT / SM_UVARINT_OVERFLOW with *pp and *v untouched.
 */
static inline int
sm_uvarint_get(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
	const uint8_t *p = *pp;
	uint64_t x = 0;

	if (SM_LIKELY(p < end && *p < 0x80)) {
		*v = *p;
		*pp = p + 1;
		return (0);
	}
	if (SM_LIKELY(end - p >= 2 && p[1] < 0x80)) {
		/* Two bytes: ids and counts below 16384, most of a pprof's
		 * multi-byte varints. */
		*v = (uint64_t)(p[0] & 0x7f) | (uint64_t)p[1] << 7;
		*pp = p + 2;
		return (0);
	}
	for (unsigned s = 0; s < 64; s += 7) {
		uint8_t c;

		if (p >= end)
			return (SM_UVARINT_SHORT);
		c = *p++;
		if (s == 63 && c > 1)
			return (SM_UVARINT_OVERFLOW);
		x |= (uint64_t)(c & 0x7f) << s;
		if (c < 0x80) {
			*v = x;
			*pp = p;
			return (0);
		}
	}
	return (SM_UVARINT_OVERFLOW);   /* not reached: s == 63 decides */
}

/* What went wrong, for error messages: "truncated varint", ... */
static inline const char *
sm_uvarint_why(int st)
{
	return (st == SM_UVARINT_SHORT ? "truncated varint" :
	    "varint overflows 64 bits");
}

/* Encode v at dst (room for SM_UVARINT_MAX bytes); returns bytes written. */
static inline size_t
sm_uvarint_put(uint8_t *dst, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		dst[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	dst[n++] = (uint8_t)v;
	return (n);
}

/* How many bytes sm_uvarint_put writes for v. */
static inline size_t
sm_uvarint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return (n);
}

static inline uint64_t
sm_zigzag_enc(int64_t v)
{
	return (((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static inline int64_t
sm_zigzag_dec(uint64_t v)
{
	return ((int64_t)(v >> 1) ^ -(int64_t)(v & 1));
}

#endif /* SM_VARINT_H */
