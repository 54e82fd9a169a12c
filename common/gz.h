/*
 * gz.h -- bounded gzip inflation with libdeflate: the only file that
 * includes <libdeflate.h>.
 *
 * Detection is by the magic bytes 1f 8b, never by a file name (SOURCES.md:
 * several ".gz" test files are raw).  Output is capped: the decompressed
 * size may not exceed `cap`; a bomb is refused with SM_ETOOBIG after at
 * most cap + 1 bytes of output buffer, whatever its header claims.
 * Concatenated gzip members are inflated one after another, as Go's
 * gzip.Reader does.
 */
#ifndef SM_GZ_H
#define SM_GZ_H

#include <stdbool.h>

#include "arena.h"
#include "sm.h"

static inline bool sm_is_gzip(const uint8_t *p, size_t n)
{
	return (n >= 2 && p[0] == 0x1f && p[1] == 0x8b);
}

/*
 * Inflate the gzip stream `in[0..len)` into arena memory.  Returns 0 with
 * out and outlen set, SM_ETOOBIG ("decompressed size exceeds limit of <cap>
 * bytes"), SM_EMALFORMED ("invalid gzip data: ...") or SM_ENOMEM.
 */
int sm_gunzip(const uint8_t *in, size_t len, size_t cap, struct sm_arena *a,
    uint8_t **out, size_t *outlen, struct sm_err *err);

/* gzip-compress (level 1..12) into `out`, for tests and benchmarks.
 * Returns 0 or SM_ENOMEM. */
int sm_gzip(const uint8_t *in, size_t len, int level, uint8_t **out,
    size_t *outlen);

#endif /* SM_GZ_H */
