/*
 * byteorder.h -- fixed-width integers in a byte order of their own,
 * whatever the host's: the one set of helpers for every on-disk and wire
 * format that stores integers raw.  Big-endian where bytes must sort as
 * the numbers do (KV keys, block headers, the head log); little-endian
 * where a format chose it (the remote-write queue's records and commit
 * slots).  p may be unaligned.  No state, no errors.
 */
#ifndef SM_BYTEORDER_H
#define SM_BYTEORDER_H

#include <stdint.h>

static inline void sm_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline uint32_t sm_get_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3]);
}

static inline void sm_put_be64(uint8_t *p, uint64_t v)
{
	sm_put_be32(p, (uint32_t)(v >> 32));
	sm_put_be32(p + 4, (uint32_t)v);
}

static inline uint64_t sm_get_be64(const uint8_t *p)
{
	return ((uint64_t)sm_get_be32(p) << 32 | sm_get_be32(p + 4));
}

static inline void sm_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t sm_get_le32(const uint8_t *p)
{
	return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24);
}

static inline void sm_put_le64(uint8_t *p, uint64_t v)
{
	sm_put_le32(p, (uint32_t)v);
	sm_put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint64_t sm_get_le64(const uint8_t *p)
{
	return ((uint64_t)sm_get_le32(p) | (uint64_t)sm_get_le32(p + 4) << 32);
}

#endif /* SM_BYTEORDER_H */
