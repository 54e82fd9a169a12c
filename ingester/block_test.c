/*
 * block_test.c -- data parts of both block format versions: version 2
 * (signed values, zigzag) as written today, version 1 (unsigned, > 0)
 * as written before values were signed, still read.
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

/* Wrap raw as a 'D' part of format `version`. */
static void
wrap(uint8_t version, const struct sm_buf *raw, struct sm_buf *out)
{
	uint8_t h[ING_BLOCK_HDR] = { 'S', 'M', version, 'D' };
	size_t at;

	sm_put_be32(h + 4, (uint32_t)raw->len);
	sm_buf_append(out, h, sizeof(h));
	at = out->len;
	SM_REQUIRE(sm_zst_compress(raw->b, raw->len, 3, out) == 0);
	sm_put_be32((uint8_t *)out->b + 8, (uint32_t)sm_hash(out->b + at,
	    out->len - at));
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
	/* an unknown version */
	SM_CHECK_EQ(decode(3, (int64_t[]){ 5, 12 }, 17, got, &err),
	    SM_ECORRUPT);
	SM_CHECK(strstr(err.msg, "version") != NULL);
}

SM_TEST_MAIN(
	{ "data parts: v2 signed values, v1 still read", test_data_versions },
)
