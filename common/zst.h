/*
 * zst.h -- zstd compression for block parts: the only file that includes
 * <zstd.h> (docs/style.md §11).
 *
 * Decompression is bounded: the caller passes the exact decompressed size
 * recorded next to the payload, and anything else (a different frame
 * content size, a longer output, trailing bytes) is SM_ECORRUPT, so a
 * damaged or hostile value can never make us allocate more than the size
 * we stored ourselves.
 */
#ifndef SM_ZST_H
#define SM_ZST_H

#include "buf.h"
#include "sm.h"

/* Append zstd(level) of in[0..n) to out.  0 or SM_ENOMEM/SM_EINTERNAL. */
int sm_zst_compress(const void *in, size_t n, int level, struct sm_buf *out);

/*
 * Decompress src[0..n) into dst, which has room for exactly `raw_len`
 * bytes.  0, or SM_ECORRUPT when the frame is invalid or does not
 * decompress to exactly raw_len bytes.
 */
int sm_zst_decompress(const void *src, size_t n, void *dst, size_t raw_len);

#endif /* SM_ZST_H */
