/*
 * block_test.c -- data parts of the block format versions: version 2
 * and 3 (signed values, zigzag), version 1 (unsigned, > 0) as written
 * before values were signed, still read; metas and index meta copies of
 * version 3 (tier fields, checked) and version 2 (60 bytes, still read
 * as a raw block).
 */
#include "sm_test.h"

#include "common/hash.h"
#include "common/kv.h"
#include "common/zst.h"
#include "ingester/block.h"

static void
put_uv(struct sm_buf *b, uint64_t v)
{
	while (v >= 0x80) {
		sm_buf_putc(b, (char)(v | 0x80));
		v >>= 7;
	}
	sm_buf_putc(b, (char)v);
}

static void
put_zz(struct sm_buf *b, int64_t v)
{
	put_uv(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

/* Wrap raw as a part of `kind` and format `version` ('M' stays raw). */
static void
wrap_kind(uint8_t version, char kind, const struct sm_buf *raw,
    struct sm_buf *out)
{
	uint8_t h[ING_BLOCK_HDR] = { 'S', 'M', version, (uint8_t)kind };
	size_t at;

	sm_put_be32(h + 4, (uint32_t)raw->len);
	sm_buf_append(out, h, sizeof(h));
	at = out->len;
	if (kind == 'M')
		sm_buf_append(out, raw->b, raw->len);
	else
		SM_REQUIRE(sm_zst_compress(raw->b, raw->len, 3, out) == 0);
	sm_put_be32((uint8_t *)out->b + 8, (uint32_t)sm_hash(out->b + at,
	    out->len - at));
}

static void
wrap(uint8_t version, const struct sm_buf *raw, struct sm_buf *out)
{
	wrap_kind(version, 'D', raw, out);
}

/* One series, one bucket, nodes 1 and 3, the given values. */
static int
decode(uint8_t version, const int64_t v[2], int64_t total, int64_t got[2],
    struct sm_err *err)
{
	struct ing_bucket b0 = { .t = 0, .n = 2, .profiles = 1,
		.total = total };
	struct ing_series sr = { .b = &b0, .nb = 1 };
	struct sm_buf raw = SM_BUF_INIT, part = SM_BUF_INIT;
	struct sm_arena *a = sm_arena_create(0);
	struct ing_bucket *out;
	int rv;

	put_uv(&raw, 1);
	put_uv(&raw, 2);
	for (int i = 0; i < 2; i++) {
		if (version == 1)
			put_uv(&raw, (uint64_t)v[i]);
		else
			put_zz(&raw, v[i]);
	}
	wrap(version, &raw, &part);
	rv = ing_block_data_decode((const uint8_t *)part.b, part.len, &sr, 4,
	    a, &out, err);
	if (rv == 0) {
		SM_CHECK_EQ(out[0].node[0], 1);
		SM_CHECK_EQ(out[0].node[1], 3);
		got[0] = out[0].value[0];
		got[1] = out[0].value[1];
	}
	sm_buf_fini(&raw);
	sm_buf_fini(&part);
	sm_arena_destroy(a);
	return (rv);
}

static void
test_data_versions(void)
{
	struct sm_err err;
	int64_t got[2];

	/* v2: signed values, a zero from cancelled writes, extremes. */
	SM_CHECK_EQ(decode(2, (int64_t[]){ -5, 12 }, 7, got, &err), 0);
	SM_CHECK(got[0] == -5 && got[1] == 12);
	SM_CHECK_EQ(decode(2, (int64_t[]){ 0, -3 }, -3, got, &err), 0);
	SM_CHECK(got[0] == 0 && got[1] == -3);
	SM_CHECK_EQ(decode(2, (int64_t[]){ INT64_MIN, 0 }, INT64_MIN, got,
	    &err), 0);
	SM_CHECK(got[0] == INT64_MIN);
	SM_CHECK_EQ(decode(2, (int64_t[]){ -5, 12 }, 8, got, &err),
	    SM_ECORRUPT);   /* the total is still checked */
	/* v1: positive values read back as before. */
	SM_CHECK_EQ(decode(1, (int64_t[]){ 5, 12 }, 17, got, &err), 0);
	SM_CHECK(got[0] == 5 && got[1] == 12);
	SM_CHECK_EQ(decode(1, (int64_t[]){ 0, 12 }, 12, got, &err),
	    SM_ECORRUPT);   /* v1 never held a zero */
	/* v3: data encoded as in v2 */
	SM_CHECK_EQ(decode(3, (int64_t[]){ -5, 12 }, 7, got, &err), 0);
	SM_CHECK(got[0] == -5 && got[1] == 12);
	/* an unknown version */
	SM_CHECK_EQ(decode(4, (int64_t[]){ 5, 12 }, 17, got, &err),
	    SM_ECORRUPT);
	SM_CHECK(strstr(err.msg, "version") != NULL);
}

/* A meta payload: `len` 60 (v1/v2) or 92 (v3, with the tier fields). */
static void
put_meta(struct sm_buf *b, size_t len, int64_t min_t, int64_t max_t,
    int64_t bucket_ms, int64_t tier_ms, int64_t cs, int64_t ce, uint64_t cg)
{
	uint8_t mb[ING_BLOCK_META_LEN] = { 0 };

	sm_put_be64(mb, 7);                    /* gen */
	sm_put_be64(mb + 8, (uint64_t)min_t);
	sm_put_be64(mb + 16, (uint64_t)max_t);
	sm_put_be64(mb + 24, (uint64_t)bucket_ms);
	sm_put_be32(mb + 32, 1);               /* nseries */
	sm_put_be32(mb + 36, 2);               /* nnodes */
	sm_put_be32(mb + 40, 2);               /* nframes */
	sm_put_be64(mb + 44, 1000);            /* bytes */
	sm_put_be64(mb + 60, (uint64_t)tier_ms);
	sm_put_be64(mb + 68, (uint64_t)cs);
	sm_put_be64(mb + 76, (uint64_t)ce);
	sm_put_be64(mb + 84, cg);
	sm_buf_append(b, mb, len);
}

static int
meta_decode(uint8_t version, size_t len, int64_t min_t, int64_t max_t,
    int64_t bucket_ms, int64_t tier_ms, int64_t cs, int64_t ce,
    struct ing_block_meta *m, struct sm_err *err)
{
	struct sm_buf raw = SM_BUF_INIT, part = SM_BUF_INIT;
	int rv;

	put_meta(&raw, len, min_t, max_t, bucket_ms, tier_ms, cs, ce,
	    tier_ms != 0 ? 42 : 0);
	wrap_kind(version, 'M', &raw, &part);
	rv = ing_block_meta_decode((const uint8_t *)part.b, part.len, m, err);
	sm_buf_fini(&raw);
	sm_buf_fini(&part);
	return (rv);
}

static void
test_meta_versions(void)
{
	struct ing_block_meta m;
	struct sm_err err;
	const int64_t H = 3600000, D = 24 * H;

	/* v2: 60 bytes, a raw block (tier fields 0). */
	SM_CHECK_EQ(meta_decode(2, 60, 0, 20000, 10000, 0, 0, 0, &m, &err),
	    0);
	SM_CHECK(m.gen == 7 && m.max_t == 20000 && m.bytes == 1000);
	SM_CHECK(m.tier_ms == 0 && m.cover_start == 0 && m.cover_end == 0 &&
	    m.cover_gen == 0);
	SM_CHECK_EQ(meta_decode(1, 60, 0, 20000, 10000, 0, 0, 0, &m, &err),
	    0);
	/* v2 with 92 bytes, v3 with 60: wrong length. */
	SM_CHECK_EQ(meta_decode(2, 92, 0, 20000, 10000, 0, 0, 0, &m, &err),
	    SM_ECORRUPT);
	SM_CHECK_EQ(meta_decode(3, 60, 0, 20000, 10000, 0, 0, 0, &m, &err),
	    SM_ECORRUPT);
	/* v3 raw and tier blocks. */
	SM_CHECK_EQ(meta_decode(3, 92, 0, 20000, 10000, 0, 0, 0, &m, &err),
	    0);
	SM_CHECK_EQ(m.tier_ms, 0);
	SM_CHECK_EQ(meta_decode(3, 92, D, D + 5 * H, H, H, D, 2 * D, &m,
	    &err), 0);
	SM_CHECK(m.tier_ms == H && m.cover_start == D && m.cover_end == 2 * D &&
	    m.cover_gen == 42);
	/* Broken tier rules: each is SM_ECORRUPT, never an assert. */
	SM_CHECK_EQ(meta_decode(3, 92, D, D + H, 10000, H, D, 2 * D, &m,
	    &err), SM_ECORRUPT);                   /* bucket_ms != tier_ms */
	SM_CHECK(strstr(err.msg, "tier") != NULL);
	SM_CHECK_EQ(meta_decode(3, 92, D, D + H, H, H, 2 * D, D, &m, &err),
	    SM_ECORRUPT);                          /* empty window */
	SM_CHECK_EQ(meta_decode(3, 92, D + H, D + 2 * H, H, H, D + 1, 2 * D,
	    &m, &err), SM_ECORRUPT);               /* unaligned window */
	SM_CHECK_EQ(meta_decode(3, 92, 0, D + H, H, H, D, 2 * D, &m, &err),
	    SM_ECORRUPT);                          /* min_t before it */
	SM_CHECK_EQ(meta_decode(3, 92, D, 2 * D + H, H, H, D, 2 * D, &m,
	    &err), SM_ECORRUPT);                   /* max_t after it */
	SM_CHECK_EQ(meta_decode(3, 92, D, D + H, -H, -H, D, 2 * D, &m,
	    &err), SM_ECORRUPT);                   /* negative width */
	SM_CHECK_EQ(meta_decode(3, 92, 0, 20000, 10000, 0, D, 2 * D, &m,
	    &err), SM_ECORRUPT);                   /* raw with a window */
}

/* A minimal index of format `version`: the meta copy, strings "",
 * "__name__", "cpu", one series {__name__="cpu"} with one bucket at 0. */
static void
put_index(uint8_t version, struct sm_buf *out)
{
	struct sm_buf raw = SM_BUF_INIT;

	put_meta(&raw, version >= 3 ? 92 : 60, 0, 10000, 10000, 0, 0, 0, 0);
	put_uv(&raw, 3);
	put_uv(&raw, 0);
	put_uv(&raw, 8);
	sm_buf_append(&raw, "__name__", 8);
	put_uv(&raw, 3);
	sm_buf_append(&raw, "cpu", 3);
	put_uv(&raw, 1);                   /* nseries */
	put_uv(&raw, 1);                   /* nlabels */
	put_uv(&raw, 1);
	put_uv(&raw, 2);
	put_uv(&raw, 0);                   /* spy, units, aggregation */
	put_uv(&raw, 0);
	put_uv(&raw, 0);
	put_uv(&raw, 100);                 /* sample rate */
	put_uv(&raw, 1);                   /* nbuckets */
	put_zz(&raw, 0);                   /* t */
	put_uv(&raw, 1);                   /* profiles */
	put_zz(&raw, 5);                   /* total */
	put_uv(&raw, 1);                   /* npairs */
	wrap_kind(version, 'I', &raw, out);
	sm_buf_fini(&raw);
}

static void
test_index_versions(void)
{
	for (uint8_t v = 2; v <= 3; v++) {
		struct sm_buf idx = SM_BUF_INIT;
		struct ing_block_meta m, mm;
		struct ing_set *s = NULL;
		struct sm_err err;
		size_t bytes;

		put_index(v, &idx);
		SM_CHECK_EQ(ing_block_meta_from_index((const uint8_t *)idx.b,
		    idx.len, &m, &err), 0);
		SM_CHECK(m.gen == 7 && m.min_t == 0 && m.max_t == 10000 &&
		    m.tier_ms == 0);
		SM_CHECK_EQ(ing_block_index_decode((const uint8_t *)idx.b,
		    idx.len, &m, &s, &bytes, &err), 0);
		SM_REQUIRE(s != NULL);
		SM_CHECK_EQ(s->nseries, 1);
		SM_CHECK_STR(s->series[0]->labels[0].value, "cpu");
		SM_CHECK_EQ(s->series[0]->b[0].total, 5);
		ing_set_fini(s);
		sm_free(s);
		/* A meta whose tier fields differ from the copy. */
		mm = m;
		mm.cover_gen = 1;
		SM_CHECK_EQ(ing_block_index_decode((const uint8_t *)idx.b,
		    idx.len, &mm, &s, &bytes, &err), SM_ECORRUPT);
		SM_CHECK(s == NULL);
		sm_buf_fini(&idx);
	}
}

SM_TEST_MAIN(
	{ "data parts: v2 signed values, v1 still read", test_data_versions },
	{ "metas: v3 tier fields checked, v1 and v2 still read",
	    test_meta_versions },
	{ "index meta copies of v2 and v3", test_index_versions },
)
