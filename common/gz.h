/*
 * gz.h -- bounded gzip inflation, whole (libdeflate) or streamed (zlib),
 * and CRC-32: gz.c is the only file that includes <libdeflate.h> or
 * <zlib.h>.
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

/*
 * Streamed inflation (zlib), for a reader that takes its input a piece at
 * a time and must not hold it all inflated (a JFR recording: one chunk at
 * a time).  The stream reads in[0..len), which must outlive it;
 * concatenated members are inflated one after another.  The caller
 * bounds the total it reads.
 * sm_gunzip_stream_read inflates up to `want` bytes into out: *got is how
 * many, fewer only at the end of the data (0 once it is all read).
 * Errors: SM_EMALFORMED ("invalid gzip data: ..."; also a stream that
 * ends in the middle), SM_ENOMEM.
 */
struct sm_gunzip_stream;

int sm_gunzip_stream_open(const uint8_t *in, size_t len,
    struct sm_gunzip_stream **out);
int sm_gunzip_stream_read(struct sm_gunzip_stream *z, uint8_t *out,
    size_t want, size_t *got, struct sm_err *err);
void sm_gunzip_stream_close(struct sm_gunzip_stream *z);

/* The CRC-32 of p[0..n) (IEEE, as zlib's and gzip's), continuing from
 * crc (0 to start). */
uint32_t sm_crc32(uint32_t crc, const void *p, size_t n);

#endif /* SM_GZ_H */
