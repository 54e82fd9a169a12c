/*
 * profiles.h -- individual-profile records: per series, one record per
 * upload (profile id, exact time, total), what SelectHeatmap and exemplars
 * need (querier/heatmap_api.c) beyond the bucketed pairs.
 *
 * What is kept, and for how long (the decision): ONLY (series fp, time in
 * ms, 16-byte profile id, total of the series' values in that upload) --
 * 40 bytes in memory, ~26 on disk before zstd -- never the individual
 * profile's stacks: the stacks stay merged per bucket, so an exemplar
 * points at a profile id, its time and value, not at a separately stored
 * profile.  Records live exactly as long as the data they describe: in
 * the head (counted in ing_head_bytes(), so -ingester.head-max-bytes
 * bounds them; rebuilt by head log replay from the logged writes, which
 * carry the id, time and values), then in the block cut from it (part
 * 'X'), deleted with the block by retention.  Writes without a 16-byte
 * profile id (none today: the distributor always sends one) keep no
 * record.
 *
 * Block part 'X' (block.h header, zstd), present when the meta's
 * nprofiles > 0: records sorted by (fp, t, id), each
 *     be64 fp  zz (t - previous t)  16 bytes id  uv total
 * where total is the uvarint of the signed total's two's-complement bits
 * (a delta profile's upload may sum to 0 or below; such a record is ten
 * bytes of varint, as every block written before this rule already stored
 * it -- those blocks were refused as corrupt before and read now).
 * Decoding checks the count against the bytes, order and trailing bytes
 * (SM_ECORRUPT otherwise).
 */
#ifndef ING_PROFILES_H
#define ING_PROFILES_H

#include <stdint.h>

#include "common/sm.h"

struct ing_prof_rec {
	uint64_t fp;
	int64_t t;
	int64_t total;
	uint8_t id[16];
};

struct ing_profs {
	struct ing_prof_rec *v;
	uint32_t n, cap;
};

int ing_profs_add(struct ing_profs *p, uint64_t fp, int64_t t,
    const uint8_t id[16], int64_t total);
void ing_profs_fini(struct ing_profs *p);
uint64_t ing_profs_bytes(const struct ing_profs *p);

/* Sort v[0..n) by (fp, t, id) in place and drop exact duplicates; the
 * number left. */
uint32_t ing_profs_sort(struct ing_prof_rec *v, uint32_t n);

/* Order of records: (fp, t, id). */
int ing_prof_cmp(const void *a, const void *b);

#endif /* ING_PROFILES_H */
