/*
 * fuzz_blockobj.c -- the block object of the bucket (ingester/ship.h):
 * ing_ship_object_verify, which smolder-admin bucket verify and the
 * restore run on every object they fetch before trusting its table of
 * contents.
 *
 * Input: byte 0 is the mode, the rest the object.  Mode bit 0 set: the
 * checksums are recomputed first (every part the table of contents
 * points at inside the object, then the table's own), so inputs reach
 * the checks behind them instead of stopping at a checksum.
 * Properties: 0, or SM_ECORRUPT with a message; on 0 every entry of the
 * table of contents lies inside the object before the table, and every
 * part starts with a block header (block.h).
 */
#include <string.h>

#include "common/hash.h"
#include "common/kv.h"
#include "ingester/ship.h"

#include "fuzz.h"

static void
fixup(uint8_t *p, size_t n)
{
	uint8_t *f, *toc;
	uint64_t toc_off;
	uint32_t np;

	if (n < ING_SHIP_FOOTER)
		return;
	f = p + n - ING_SHIP_FOOTER;
	np = sm_get_be32(f);
	toc_off = sm_get_be64(f + 4);
	if (toc_off > n - ING_SHIP_FOOTER || (uint64_t)np *
	    ING_SHIP_TOC_ENTRY > n - ING_SHIP_FOOTER - toc_off)
		return;
	toc = p + toc_off;
	for (uint32_t i = 0; i < np; i++) {
		const uint8_t *e = toc + (size_t)i * ING_SHIP_TOC_ENTRY;
		uint64_t off = sm_get_be64(e + 5);
		uint32_t len = sm_get_be32(e + 13);

		if (off <= toc_off && len <= toc_off - off &&
		    len >= ING_BLOCK_HDR)
			sm_put_be32(p + off + 8, (uint32_t)sm_hash(p + off +
			    ING_BLOCK_HDR, len - ING_BLOCK_HDR));
	}
	sm_put_be32(f + 12, (uint32_t)sm_hash(toc, (size_t)np *
	    ING_SHIP_TOC_ENTRY));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sm_err err;
	uint32_t np = 0;
	uint8_t *p;
	size_t n;
	int rv;

	if (size < 1)
		return (0);
	n = size - 1;
	if ((p = malloc(n + 1)) == NULL)
		return (0);
	memcpy(p, data + 1, n);
	if (data[0] & 1)
		fixup(p, n);
	sm_err_clear(&err);
	rv = ing_ship_object_verify(p, n, &np, &err);
	if (rv != 0) {
		FUZZ_CHECK(rv == SM_ECORRUPT, "rv %d", rv);
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(np == 0, "nparts %u on failure", np);
	} else {
		uint64_t toc_off = sm_get_be64(p + n - ING_SHIP_FOOTER + 4);

		for (uint32_t i = 0; i < np; i++) {
			const uint8_t *e = p + toc_off + (size_t)i *
			    ING_SHIP_TOC_ENTRY;
			uint64_t off = sm_get_be64(e + 5);
			uint32_t len = sm_get_be32(e + 13);

			FUZZ_CHECK(off <= toc_off && len <= toc_off - off &&
			    len >= ING_BLOCK_HDR && p[off] == 'S' &&
			    p[off + 1] == 'M', "entry %u: %llu+%u", i,
			    (unsigned long long)off, len);
		}
	}
	free(p);
	return (0);
}
