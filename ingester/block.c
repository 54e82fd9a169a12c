/*
 * block.c -- the block format; see block.h for the layout.
 */
#include "block.h"

#include <string.h>

#include "common/hash.h"
#include "common/kv.h"
#include "common/labels.h"
#include "common/zst.h"
#include "common/varint.h"

/* --- varints -------------------------------------------------------------- */

static void
put_uv(struct sm_buf *b, uint64_t v)
{
	uint8_t tmp[SM_UVARINT_MAX];

	sm_buf_append(b, tmp, sm_uvarint_put(tmp, v));
}

static void
put_zz(struct sm_buf *b, int64_t v)
{
	put_uv(b, sm_zigzag_enc(v));
}

/* A bounded reader over decompressed bytes; `what` names the part. */
struct rd {
	const uint8_t *p, *end, *start;
	const char *what;
	struct sm_err *err;
	int bad;
};

static int
rd_fail(struct rd *r, const char *why)
{
	if (!r->bad)
		sm_err_set(r->err, SM_ECORRUPT, "block %s: %s at byte %zu",
		    r->what, why, (size_t)(r->p - r->start));
	r->bad = 1;
	return (SM_ECORRUPT);
}

/* The end of a part: 0 when r read all of it, else rd_fail's error. */
static int
rd_end(struct rd *r)
{
	return (r->p != r->end ? rd_fail(r, "trailing bytes") : 0);
}

static uint64_t
get_uv(struct rd *r)
{
	uint64_t v;
	int st = sm_uvarint_get(&r->p, r->end, &v);

	if (st != 0) {
		rd_fail(r, sm_uvarint_why(st));
		return (0);
	}
	return (v);
}

static int64_t
get_zz(struct rd *r)
{
	return (sm_zigzag_dec(get_uv(r)));
}

/* A big-endian 8-byte fingerprint; 0 with r failed when fewer bytes are
 * left. */
static uint64_t
get_fp(struct rd *r)
{
	uint64_t v;

	if (r->end - r->p < 8) {
		rd_fail(r, "truncated fingerprint");
		return (0);
	}
	v = sm_get_be64(r->p);
	r->p += 8;
	return (v);
}

/* A count that must fit the remaining bytes at `min` bytes per item. */
static uint32_t
get_count(struct rd *r, size_t min)
{
	uint64_t v = get_uv(r);

	if (v > UINT32_MAX || (min != 0 &&
	    v > (uint64_t)(r->end - r->p) / min)) {
		rd_fail(r, "count larger than the data");
		return (0);
	}
	return ((uint32_t)v);
}

/* --- envelope ------------------------------------------------------------- */

static uint32_t
block_sum(const uint8_t *p, size_t n)
{
	return ((uint32_t)sm_hash(p, n));
}

/* Append header + zstd(raw) (or raw for 'M') to out. */
static int
block_wrap(char kind, const struct sm_buf *raw, int level, struct sm_buf *out)
{
	size_t hdr = out->len;
	uint8_t h[ING_BLOCK_HDR] = { 'S', 'M', ING_BLOCK_VERSION,
		(uint8_t)kind };
	int rv;

	sm_put_be32(h + 4, (uint32_t)raw->len);
	sm_buf_append(out, h, sizeof(h));
	if (kind == 'M')
		sm_buf_append(out, raw->b, raw->len);
	else if ((rv = sm_zst_compress(raw->b != NULL ? raw->b : "", raw->len,
	    level, out)) != 0)
		return (rv);
	if (sm_buf_error(out) != 0)
		return (sm_buf_error(out));
	sm_put_be32((uint8_t *)out->b + hdr + 8, block_sum((uint8_t *)out->b +
	    hdr + ING_BLOCK_HDR, out->len - hdr - ING_BLOCK_HDR));
	/* Parts are kept until the commit, one per series for the data:
	 * the compressor reserved its bound (about the raw size); give it
	 * back, or a cut holds every series uncompressed (B9: a
	 * 5,000-series cut peaked 300 MB over a 31 MB block). */
	sm_buf_shrink(out);
	return (0);
}

int
ing_block_open(const uint8_t *v, size_t n, char kind,
    const uint8_t **payload, size_t *plen, uint32_t *raw_len,
    struct sm_err *err)
{
	/* Out-parameters are nulled on every failure path. */
	*payload = NULL;
	*plen = 0;
	*raw_len = 0;
	if (n < ING_BLOCK_HDR || v[0] != 'S' || v[1] != 'M')
		return (sm_err_set(err, SM_ECORRUPT, "block part '%c': bad "
		    "header (%zu bytes)", kind, n));
	if (v[2] < ING_BLOCK_VERSION_MIN || v[2] > ING_BLOCK_VERSION)
		return (sm_err_set(err, SM_ECORRUPT, "block part '%c': "
		    "unsupported format version %u", kind, v[2]));
	if (v[3] != (uint8_t)kind)
		return (sm_err_set(err, SM_ECORRUPT, "block part: expected "
		    "kind '%c', found 0x%02x", kind, v[3]));
	if (sm_get_be32(v + 8) != block_sum(v + ING_BLOCK_HDR,
	    n - ING_BLOCK_HDR))
		return (sm_err_set(err, SM_ECORRUPT, "block part '%c': "
		    "checksum mismatch", kind));
	*payload = v + ING_BLOCK_HDR;
	*plen = n - ING_BLOCK_HDR;
	*raw_len = sm_get_be32(v + 4);
	return (0);
}

/* Open and decompress a part into a malloc'd buffer. */
static int
block_unwrap(const uint8_t *v, size_t n, char kind, uint8_t **out,
    size_t *outlen, struct sm_err *err)
{
	const uint8_t *p;
	size_t pl;
	uint32_t raw;
	uint8_t *buf;
	int rv;

	*out = NULL;
	*outlen = 0;
	if ((rv = ing_block_open(v, n, kind, &p, &pl, &raw, err)) != 0)
		return (rv);
	/* The raw length is ours, and checksummed; still bound it. */
	if (raw > (1u << 31))
		return (sm_err_set(err, SM_ECORRUPT, "block part '%c': raw "
		    "length %u too large", kind, raw));
	if ((buf = sm_malloc((size_t)raw + 1)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (sm_zst_decompress(p, pl, buf, raw) != 0) {
		sm_free(buf);
		return (sm_err_set(err, SM_ECORRUPT, "block part '%c': zstd "
		    "payload does not decompress to %u bytes", kind, raw));
	}
	*out = buf;
	*outlen = raw;
	return (0);
}

/* --- meta fields ---------------------------------------------------------- */

static void
meta_put(const struct ing_block_meta *m, uint8_t *mb)
{
	sm_put_be64(mb, m->gen);
	sm_put_be64(mb + 8, (uint64_t)m->min_t);
	sm_put_be64(mb + 16, (uint64_t)m->max_t);
	sm_put_be64(mb + 24, (uint64_t)m->bucket_ms);
	sm_put_be32(mb + 32, m->nseries);
	sm_put_be32(mb + 36, m->nnodes);
	sm_put_be32(mb + 40, m->nframes);
	sm_put_be64(mb + 44, m->bytes);
	sm_put_be32(mb + 52, m->nspans);
	sm_put_be32(mb + 56, m->nprofiles);
	sm_put_be64(mb + 60, (uint64_t)m->tier_ms);
	sm_put_be64(mb + 68, (uint64_t)m->cover_start);
	sm_put_be64(mb + 76, (uint64_t)m->cover_end);
	sm_put_be64(mb + 84, m->cover_gen);
}

/* The meta's length in format `version`. */
static size_t
meta_len(uint8_t version)
{
	return (version >= 3 ? ING_BLOCK_META_LEN : ING_BLOCK_META_LEN_V2);
}

/* The tier rules of block.h; 0 or SM_ECORRUPT. */
static int
meta_tier_check(const struct ing_block_meta *m, struct sm_err *err)
{
	if (m->tier_ms == 0) {
		/* cover_gen > 0: a merged raw block (block.h). */
		if (m->cover_start != 0 || m->cover_end != 0 ||
		    m->cover_gen >= m->gen)
			return (sm_err_set(err, SM_ECORRUPT, "block meta: a raw "
			    "block with cover fields"));
		return (0);
	}
	if (m->tier_ms < 0 || m->bucket_ms != m->tier_ms ||
	    m->cover_start >= m->cover_end ||
	    m->cover_start % m->tier_ms != 0 || m->min_t < m->cover_start ||
	    m->max_t > m->cover_end || m->nspans != 0 || m->nprofiles != 0)
		return (sm_err_set(err, SM_ECORRUPT, "block meta: inconsistent "
		    "tier fields (tier_ms %lld, window [%lld, %lld))",
		    (long long)m->tier_ms, (long long)m->cover_start,
		    (long long)m->cover_end));
	return (0);
}

/* Decode a meta payload of format `version` (its length checked by the
 * caller). */
static int
meta_get(const uint8_t *p, uint8_t version, struct ing_block_meta *m,
    struct sm_err *err)
{
	memset(m, 0, sizeof(*m));
	m->gen = sm_get_be64(p);
	m->min_t = (int64_t)sm_get_be64(p + 8);
	m->max_t = (int64_t)sm_get_be64(p + 16);
	m->bucket_ms = (int64_t)sm_get_be64(p + 24);
	m->nseries = sm_get_be32(p + 32);
	m->nnodes = sm_get_be32(p + 36);
	m->nframes = sm_get_be32(p + 40);
	m->bytes = sm_get_be64(p + 44);
	m->nspans = sm_get_be32(p + 52);
	m->nprofiles = sm_get_be32(p + 56);
	if (version >= 3) {
		m->tier_ms = (int64_t)sm_get_be64(p + 60);
		m->cover_start = (int64_t)sm_get_be64(p + 68);
		m->cover_end = (int64_t)sm_get_be64(p + 76);
		m->cover_gen = sm_get_be64(p + 84);
	}
	if (m->bucket_ms <= 0 || m->min_t >= m->max_t || m->nnodes == 0 ||
	    m->nframes == 0 || m->nseries == 0)
		return (sm_err_set(err, SM_ECORRUPT, "block meta: "
		    "inconsistent fields"));
	return (meta_tier_check(m, err));
}

/* --- encode --------------------------------------------------------------- */

static void
put_strings(struct sm_buf *b, const struct sm_strtab *t)
{
	put_uv(b, t->n);
	for (uint32_t i = 0; i < t->n; i++) {
		put_uv(b, t->strs[i].len);
		sm_buf_append(b, t->strs[i].p, t->strs[i].len);
	}
}

void
ing_block_enc_fini(struct ing_block_enc *e)
{
	sm_buf_fini(&e->m);
	sm_buf_fini(&e->index);
	sm_buf_fini(&e->symbols);
	sm_buf_fini(&e->tree);
	sm_buf_fini(&e->spans);
	sm_buf_fini(&e->profiles);
	for (uint32_t i = 0; i < e->ndata; i++)
		sm_buf_fini(&e->data[i]);
	sm_free(e->data);
	memset(e, 0, sizeof(*e));
}

/* The error block_encode returns for an encoding failure rv (0: a buffer
 * ran out of memory); a tier-rule SM_EINVAL already says which rule. */
static int
enc_fail(int rv, struct sm_err *err)
{
	if (rv == SM_EINVAL)
		return (rv);
	if (rv == 0)
		rv = SM_ENOMEM;
	return (sm_err_set(err, rv, "encoding block: %s", sm_strerror(rv)));
}

/* Wrap raw as a part of `kind` onto out; 0 or enc_fail's error. */
static int
enc_part(char kind, const struct sm_buf *raw, int level, struct sm_buf *out,
    struct sm_err *err)
{
	int rv = 0;

	if (sm_buf_error(raw) != 0 ||
	    (rv = block_wrap(kind, raw, level, out)) != 0)
		return (enc_fail(rv, err));
	return (0);
}

/* enc_part, adding the part's size to the meta (the data and record
 * parts, which the meta counts one by one). */
static int
enc_part_counted(char kind, const struct sm_buf *raw, int level,
    struct sm_buf *out, struct ing_block_enc *e, struct sm_err *err)
{
	int rv;

	if ((rv = enc_part(kind, raw, level, out, err)) != 0)
		return (rv);
	e->meta.bytes += out->len;
	return (0);
}

/* Fill e->meta from src and the tier fields (`tier` NULL for a raw
 * block), all but `bytes`; 0 or SM_EINVAL with the tier rule broken. */
static int
enc_meta_init(const struct ing_block_src *src,
    const struct ing_block_meta *tier, struct ing_block_enc *e,
    struct sm_err *err)
{
	e->meta.nspans = src->nspans;
	e->meta.nprofiles = src->nprofs;
	e->meta.gen = src->gen;
	e->meta.min_t = src->min_t;
	e->meta.max_t = src->max_t + src->bucket_ms;
	e->meta.bucket_ms = src->bucket_ms;
	e->meta.nseries = src->nseries;
	e->meta.nnodes = src->tree->n;
	e->meta.nframes = src->frames->n;
	if (tier == NULL)
		return (0);
	e->meta.tier_ms = tier->tier_ms;
	e->meta.cover_start = tier->cover_start;
	e->meta.cover_end = tier->cover_end;
	e->meta.cover_gen = tier->cover_gen;
	if (meta_tier_check(&e->meta, err) != 0) {
		/* Our caller's mistake, not damage: SM_EINVAL. */
		if (err != NULL)
			err->code = SM_EINVAL;
		(void)sm_err_prefix(err, "encoding tier block");
		return (SM_EINVAL);
	}
	return (0);
}

/* Encode the call tree's parent deltas and frame ids as the 'T' part. */
static int
enc_tree(const struct ing_block_src *src, int level, struct sm_buf *raw,
    struct ing_block_enc *e, struct sm_err *err)
{
	sm_buf_reset(raw);
	put_uv(raw, src->tree->n);
	for (uint32_t i = 1; i < src->tree->n; i++) {
		put_uv(raw, i - src->tree->parent[i]);
		put_uv(raw, src->tree->name[i]);
	}
	return (enc_part('T', raw, level, &e->tree, err));
}

/* Append one series' index entry: labels, metadata, bucket summaries. */
static void
enc_series_summary(struct sm_buf *raw, const struct ing_series *sr)
{
	int64_t pt = 0;

	put_uv(raw, sr->nlabels);
	for (uint32_t i = 0; i < 2 * sr->nlabels; i++)
		put_uv(raw, sr->lid[i]);
	put_uv(raw, sr->meta.spy);
	put_uv(raw, sr->meta.units);
	put_uv(raw, sr->meta.aggregation);
	put_uv(raw, sr->meta.sample_rate);
	put_uv(raw, sr->nb);
	for (uint32_t b = 0; b < sr->nb; b++) {
		put_zz(raw, sr->b[b].t - pt);
		pt = sr->b[b].t;
		put_uv(raw, sr->b[b].profiles);
		put_zz(raw, sr->b[b].total);
		put_uv(raw, sr->b[b].n);
	}
}

/* Encode the 'I' part: a copy of the meta first (its `bytes` left 0: not
 * known yet), so a damaged meta value can be rebuilt from the index, then
 * the label strings and every series' summary.  A source failure is
 * returned as the source set it in err. */
static int
enc_index(const struct ing_block_src *src, int level, struct sm_buf *raw,
    struct ing_block_enc *e, struct sm_err *err)
{
	uint8_t mb[ING_BLOCK_META_LEN];
	int rv;

	sm_buf_reset(raw);
	meta_put(&e->meta, mb);
	sm_buf_append(raw, mb, sizeof(mb));
	put_strings(raw, src->lstr);
	put_uv(raw, src->nseries);
	for (uint32_t k = 0; k < src->nseries; k++) {
		const struct ing_series *sr;

		if ((rv = src->series(src->arg, k, &sr, err)) != 0)
			return (rv);
		enc_series_summary(raw, sr);
	}
	return (enc_part('I', raw, level, &e->index, err));
}

/* Append one bucket's (node, value) pairs: every node delta, then every
 * value. */
static void
enc_bucket_pairs(struct sm_buf *raw, const struct ing_bucket *bk)
{
	struct ing_pair_cur c;
	uint32_t node, prev = 0;
	int64_t v;

	ing_pairs_begin(bk, &c);
	while (ing_pairs_next(&c, &node, &v)) {
		put_uv(raw, node - prev);
		prev = node;
	}
	ing_pairs_begin(bk, &c);
	while (ing_pairs_next(&c, &node, &v))
		put_zz(raw, v);
}

/* Encode the 'D' parts, one per series, adding their sizes to the meta.
 * A source failure is returned as the source set it in err. */
static int
enc_data(const struct ing_block_src *src, int level, struct sm_buf *raw,
    struct ing_block_enc *e, struct sm_err *err)
{
	int rv;

	if ((e->data = sm_calloc(src->nseries, sizeof(*e->data))) == NULL)
		return (enc_fail(SM_ENOMEM, err));
	e->ndata = src->nseries;
	for (uint32_t k = 0; k < src->nseries; k++) {
		const struct ing_series *sr;

		if ((rv = src->series(src->arg, k, &sr, err)) != 0)
			return (rv);
		sm_buf_reset(raw);
		for (uint32_t b = 0; b < sr->nb; b++)
			enc_bucket_pairs(raw, &sr->b[b]);
		if ((rv = enc_part_counted('D', raw, level, &e->data[k], e,
		    err)) != 0)
			return (rv);
	}
	return (0);
}

/* Encode the 'P' part of span samples, if any, adding its size to the
 * meta. */
static int
enc_spans(const struct ing_block_src *src, int level, struct sm_buf *raw,
    struct ing_block_enc *e, struct sm_err *err)
{
	const struct ing_span_rec *sp = src->spans;
	uint64_t pspan = 0;
	int64_t pt = 0;
	uint8_t fb[8];

	if (src->nspans == 0)
		return (0);
	sm_buf_reset(raw);
	for (uint32_t i = 0; i < src->nspans; i++) {
		put_uv(raw, sp[i].span - pspan);
		pspan = sp[i].span;
		sm_put_be64(fb, sp[i].fp);
		sm_buf_append(raw, fb, sizeof(fb));
		put_zz(raw, (int64_t)((uint64_t)sp[i].t - (uint64_t)pt));
		pt = sp[i].t;
		put_uv(raw, sp[i].node);
		put_zz(raw, sp[i].value);
	}
	return (enc_part_counted('P', raw, level, &e->spans, e, err));
}

/* Encode the 'X' part of profile records, if any, adding its size to the
 * meta. */
static int
enc_profiles(const struct ing_block_src *src, int level, struct sm_buf *raw,
    struct ing_block_enc *e, struct sm_err *err)
{
	const struct ing_prof_rec *pr = src->profs;
	int64_t pt = 0;
	uint8_t fb[8];

	if (src->nprofs == 0)
		return (0);
	sm_buf_reset(raw);
	for (uint32_t i = 0; i < src->nprofs; i++) {
		sm_put_be64(fb, pr[i].fp);
		sm_buf_append(raw, fb, sizeof(fb));
		put_zz(raw, (int64_t)((uint64_t)pr[i].t - (uint64_t)pt));
		pt = pr[i].t;
		sm_buf_append(raw, pr[i].id, 16);
		put_uv(raw, (uint64_t)pr[i].total);
	}
	return (enc_part_counted('X', raw, level, &e->profiles, e, err));
}

/* Encode src; `tier` (NULL for a raw block) carries the tier fields. */
static int
block_encode(const struct ing_block_src *src, int level,
    const struct ing_block_meta *tier, struct ing_block_enc *e,
    struct sm_err *err)
{
	struct sm_buf raw = SM_BUF_INIT;
	uint8_t mb[ING_BLOCK_META_LEN];
	int rv;

	memset(e, 0, sizeof(*e));
	if (src->nseries == 0)
		return (sm_err_set(err, SM_EINVAL, "empty head"));
	/* Each step's error is final: err says which tier rule, what the
	 * source failed at, or what encoding ran out of. */
	if ((rv = enc_meta_init(src, tier, e, err)) != 0)
		goto fail;
	put_strings(&raw, src->frames);
	if ((rv = enc_part('S', &raw, level, &e->symbols, err)) != 0 ||
	    (rv = enc_tree(src, level, &raw, e, err)) != 0 ||
	    (rv = enc_index(src, level, &raw, e, err)) != 0 ||
	    (rv = enc_data(src, level, &raw, e, err)) != 0 ||
	    (rv = enc_spans(src, level, &raw, e, err)) != 0 ||
	    (rv = enc_profiles(src, level, &raw, e, err)) != 0)
		goto fail;
	e->meta.bytes += e->symbols.len + e->tree.len + e->index.len +
	    ING_BLOCK_HDR + ING_BLOCK_META_LEN;
	/* meta, last: it carries the total size */
	meta_put(&e->meta, mb);
	sm_buf_reset(&raw);
	sm_buf_append(&raw, mb, sizeof(mb));
	if ((rv = enc_part('M', &raw, level, &e->m, err)) != 0)
		goto fail;
	sm_buf_fini(&raw);
	return (0);
fail:
	sm_buf_fini(&raw);
	ing_block_enc_fini(e);
	return (rv);
}

int
ing_block_encode(const struct ing_block_src *src, int level,
    struct ing_block_enc *e, struct sm_err *err)
{
	return (block_encode(src, level, NULL, e, err));
}

int
ing_block_encode_tier(const struct ing_block_src *src, int level,
    int64_t cover_start, int64_t cover_end, uint64_t cover_gen,
    struct ing_block_enc *e, struct sm_err *err)
{
	struct ing_block_meta tier = { .tier_ms = src->bucket_ms,
		.cover_start = cover_start, .cover_end = cover_end,
		.cover_gen = cover_gen };

	memset(e, 0, sizeof(*e));
	if (src->nspans != 0 || src->nprofs != 0)
		return (sm_err_set(err, SM_EINVAL, "a tier block holds no "
		    "spans or profiles"));
	return (block_encode(src, level, &tier, e, err));
}

/* --- decode --------------------------------------------------------------- */

int
ing_block_meta_decode(const uint8_t *v, size_t n, struct ing_block_meta *m,
    struct sm_err *err)
{
	const uint8_t *p;
	size_t pl;
	uint32_t raw;
	int rv;

	memset(m, 0, sizeof(*m));
	if ((rv = ing_block_open(v, n, 'M', &p, &pl, &raw, err)) != 0)
		return (rv);
	if (pl != meta_len(v[2]) || raw != pl)
		return (sm_err_set(err, SM_ECORRUPT, "block meta: %zu bytes, "
		    "expected %zu", pl, meta_len(v[2])));
	return (meta_get(p, v[2], m, err));
}

int
ing_block_meta_from_index(const uint8_t *v, size_t n,
    struct ing_block_meta *m, struct sm_err *err)
{
	uint8_t *raw = NULL;
	size_t rawlen;
	int rv;

	if ((rv = block_unwrap(v, n, 'I', &raw, &rawlen, err)) != 0)
		return (rv);
	if (rawlen < meta_len(v[2]))
		rv = sm_err_set(err, SM_ECORRUPT, "block index: too short "
		    "for its meta copy");
	else
		rv = meta_get(raw, v[2], m, err);
	sm_free(raw);
	return (rv);
}

/* Decode a string table into entries pointing into `buf` (NUL-terminated
 * copies are made in place by shifting: we copy into a fresh area). */
static int
get_strings(struct rd *r, uint32_t expect, struct sm_str **out,
    uint32_t *nout, char **strbuf)
{
	uint32_t n = get_count(r, 1);
	size_t total = 0;
	const uint8_t *save = r->p;
	struct sm_str *v;
	char *sb, *w;

	if (r->bad)
		return (SM_ECORRUPT);
	if (n == 0 || (expect != 0 && n != expect))
		return (rd_fail(r, "string count does not match the meta"));
	/* First pass: lengths, to size one buffer. */
	for (uint32_t i = 0; i < n; i++) {
		uint64_t l = get_uv(r);

		if (r->bad || l > (uint64_t)(r->end - r->p))
			return (rd_fail(r, "string runs past the data"));
		r->p += l;
		total += l + 1;
	}
	r->p = save;
	v = sm_calloc(n, sizeof(*v));
	sb = sm_malloc(total + 1);
	if (v == NULL || sb == NULL) {
		sm_free(v);
		sm_free(sb);
		sm_err_set(r->err, SM_ENOMEM, "out of memory");
		return (SM_ENOMEM);
	}
	w = sb;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t l = get_uv(r);

		memcpy(w, r->p, l);
		w[l] = '\0';
		v[i].p = w;
		v[i].len = (uint32_t)l;
		w += l + 1;
		r->p += l;
	}
	if (v[0].len != 0) {
		sm_free(v);
		sm_free(sb);
		return (rd_fail(r, "string 0 is not empty"));
	}
	*out = v;
	*nout = n;
	*strbuf = sb;
	return (0);
}

void
ing_block_tree_free(struct ing_block_tree *t)
{
	if (t == NULL)
		return;
	sm_free(t->parent);
	sm_free(t->name);
	sm_free(t->frames);
	sm_free(t->strbuf);
	sm_free(t);
}

int
ing_block_tree_decode(const uint8_t *sym, size_t nsym, const uint8_t *tree,
    size_t ntree, const struct ing_block_meta *m, struct ing_block_tree **out,
    struct sm_err *err)
{
	struct ing_block_tree *t;
	uint8_t *raw = NULL;
	size_t rawlen;
	struct rd r;
	uint32_t n;
	int rv;

	*out = NULL;
	if ((t = sm_calloc(1, sizeof(*t))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = block_unwrap(sym, nsym, 'S', &raw, &rawlen, err)) != 0)
		goto fail;
	r = (struct rd){ raw, raw + rawlen, raw, "symbols", err, 0 };
	if ((rv = get_strings(&r, m->nframes, &t->frames, &t->nframes,
	    &t->strbuf)) != 0)
		goto fail;
	if ((rv = rd_end(&r)) != 0)
		goto fail;
	sm_free(raw);
	raw = NULL;

	if ((rv = block_unwrap(tree, ntree, 'T', &raw, &rawlen, err)) != 0)
		goto fail;
	r = (struct rd){ raw, raw + rawlen, raw, "tree", err, 0 };
	n = get_count(&r, 0);
	if (r.bad || n != m->nnodes || n > rawlen / 2 + 1) {
		rv = rd_fail(&r, "node count does not match the meta");
		goto fail;
	}
	t->parent = sm_malloc((size_t)n * sizeof(*t->parent));
	t->name = sm_malloc((size_t)n * sizeof(*t->name));
	if (t->parent == NULL || t->name == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto fail;
	}
	t->n = n;
	t->parent[0] = t->name[0] = 0;
	for (uint32_t i = 1; i < n; i++) {
		uint64_t d = get_uv(&r), nm = get_uv(&r);

		if (r.bad || d == 0 || d > i || nm >= t->nframes) {
			rv = rd_fail(&r, "node parent or name out of range");
			goto fail;
		}
		t->parent[i] = i - (uint32_t)d;
		t->name[i] = (uint32_t)nm;
	}
	if ((rv = rd_end(&r)) != 0)
		goto fail;
	sm_free(raw);
	t->bytes = sizeof(*t) + (size_t)n * 8 + (size_t)t->nframes *
	    sizeof(struct sm_str) + rawlen;
	*out = t;
	return (0);
fail:
	sm_free(raw);
	ing_block_tree_free(t);
	return (rv);
}

/* Check the copy of the meta the index opens with (format `version`)
 * against m, and step r past it; 0 or SM_ECORRUPT. */
static int
index_meta_check(struct rd *r, uint8_t version,
    const struct ing_block_meta *m)
{
	struct ing_block_meta copy;

	if ((size_t)(r->end - r->p) < meta_len(version) ||
	    meta_get(r->p, version, &copy, r->err) != 0 ||
	    copy.gen != m->gen || copy.min_t != m->min_t ||
	    copy.max_t != m->max_t || copy.nseries != m->nseries ||
	    copy.tier_ms != m->tier_ms ||
	    copy.cover_start != m->cover_start ||
	    copy.cover_end != m->cover_end ||
	    copy.cover_gen != m->cover_gen)
		return (rd_fail(r, "meta copy does not match the meta"));
	r->p += meta_len(version);
	return (0);
}

/* Intern the label strings into s in order, so string ids stay the
 * stored ids; 0, SM_ENOMEM or SM_ECORRUPT. */
static int
index_intern(struct rd *r, struct ing_set *s, const struct sm_str *strs,
    uint32_t nstrs)
{
	for (uint32_t i = 0; i < nstrs; i++) {
		uint32_t id;

		if (sm_strtab_intern(&s->lstr, strs[i].p, strs[i].len,
		    &id) != 0)
			return (sm_err_set(r->err, SM_ENOMEM, "out of memory"));
		if (id != i)
			return (rd_fail(r, "duplicate label string"));
	}
	return (0);
}

/* Free a series decoded from the index that never reached the set. */
static void
index_series_free(struct ing_series *sr)
{
	sm_free(sr->b);
	sm_free(sr->labels);
	sm_free(sr->lid);
	sm_free(sr);
}

/* Read a series' label string ids and point its labels at s's strings;
 * a failure is left in r. */
static void
index_labels_get(struct rd *r, const struct ing_set *s, uint32_t nstrs,
    struct ing_series *sr)
{
	for (uint32_t i = 0; i < 2 * sr->nlabels && !r->bad; i++) {
		uint64_t id = get_uv(r);

		if (id >= nstrs)
			rd_fail(r, "label string id out of range");
		sr->lid[i] = (uint32_t)id;
	}
	for (uint32_t i = 0; i < sr->nlabels && !r->bad; i++) {
		sr->labels[i].name = sm_strtab_str(&s->lstr,
		    sr->lid[2 * i], NULL);
		sr->labels[i].value = sm_strtab_str(&s->lstr,
		    sr->lid[2 * i + 1], NULL);
		if (i > 0 && strcmp(sr->labels[i - 1].name,
		    sr->labels[i].name) >= 0)
			rd_fail(r, "series labels not sorted");
	}
}

/* Read a series' bucket summaries into sr->b (sr->nb of them), checked
 * against m; a failure is left in r. */
static void
index_buckets_get(struct rd *r, bool signed_v, const struct ing_block_meta *m,
    struct ing_series *sr)
{
	int64_t t = 0;

	for (uint32_t b = 0; b < sr->nb && !r->bad; b++) {
		int64_t d = get_zz(r);

		if (b > 0 && d <= 0)
			rd_fail(r, "bucket times not increasing");
		t += d;
		sr->b[b].t = t;
		sr->b[b].profiles = (uint32_t)get_uv(r);
		sr->b[b].total = signed_v ? get_zz(r) : (int64_t)get_uv(r);
		sr->b[b].n = get_count(r, 0);
		if (!r->bad && (sr->b[b].n == 0 ||
		    (!signed_v && sr->b[b].total <= 0) ||
		    t < m->min_t || t >= m->max_t || sr->b[b].n > m->nnodes))
			rd_fail(r, "bucket summary out of range");
	}
}

/* Decode the next series of the index and append it to s; 0, SM_ENOMEM
 * or SM_ECORRUPT. */
static int
index_series_get(struct rd *r, struct ing_set *s, uint32_t nstrs,
    bool signed_v, const struct ing_block_meta *m)
{
	struct ing_series *sr = sm_calloc(1, sizeof(*sr));
	uint32_t nl = get_count(r, 2);
	int rv;

	if (sr == NULL)
		return (sm_err_set(r->err, SM_ENOMEM, "out of memory"));
	sr->nlabels = nl;
	sr->labels = sm_calloc(SM_MAX(nl, 1), sizeof(*sr->labels));
	sr->lid = sm_calloc(SM_MAX(2 * (size_t)nl, 1), sizeof(*sr->lid));
	if (sr->labels == NULL || sr->lid == NULL) {
		index_series_free(sr);
		return (sm_err_set(r->err, SM_ENOMEM, "out of memory"));
	}
	index_labels_get(r, s, nstrs, sr);
	sr->meta.spy = (uint32_t)get_uv(r);
	sr->meta.units = (uint32_t)get_uv(r);
	sr->meta.aggregation = (uint32_t)get_uv(r);
	sr->meta.sample_rate = (uint32_t)get_uv(r);
	if (!r->bad && (sr->meta.spy >= nstrs || sr->meta.units >= nstrs ||
	    sr->meta.aggregation >= nstrs))
		rd_fail(r, "metadata string id out of range");
	sr->nb = sr->cap = get_count(r, 4);
	if (!r->bad && sr->nb == 0)
		rd_fail(r, "series without buckets");
	if (!r->bad && (sr->b = sm_calloc(sr->nb, sizeof(*sr->b))) == NULL) {
		index_series_free(sr);
		return (sm_err_set(r->err, SM_ENOMEM, "out of memory"));
	}
	index_buckets_get(r, signed_v, m, sr);
	if (r->bad) {
		index_series_free(sr);
		return (SM_ECORRUPT);
	}
	sr->fp = sm_labels_fingerprint(sr->labels, nl);
	if ((rv = ing_set_append(s, sr)) != 0) {
		index_series_free(sr);
		sm_err_set(r->err, rv, "out of memory");
		return (rv);
	}
	return (0);
}

int
ing_block_index_decode(const uint8_t *v, size_t n,
    const struct ing_block_meta *m, struct ing_set **out, size_t *bytes,
    struct sm_err *err)
{
	struct ing_set *s = NULL;
	struct sm_str *strs = NULL;
	char *strbuf = NULL;
	uint32_t nstrs = 0, nseries;
	bool signed_v;
	uint8_t *raw = NULL;
	size_t rawlen;
	struct rd r;
	int rv;

	*out = NULL;
	if ((rv = block_unwrap(v, n, 'I', &raw, &rawlen, err)) != 0)
		return (rv);
	signed_v = v[2] >= 2;
	r = (struct rd){ raw, raw + rawlen, raw, "index", err, 0 };
	if ((rv = index_meta_check(&r, v[2], m)) != 0 ||
	    (rv = get_strings(&r, 0, &strs, &nstrs, &strbuf)) != 0)
		goto out;
	if ((s = sm_malloc(sizeof(*s))) == NULL || ing_set_init(s) != 0) {
		sm_free(s);
		s = NULL;
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if ((rv = index_intern(&r, s, strs, nstrs)) != 0)
		goto out;
	nseries = get_count(&r, 2);
	if (r.bad || nseries != m->nseries) {
		rv = rd_fail(&r, "series count does not match the meta");
		goto out;
	}
	for (uint32_t k = 0; k < nseries; k++) {
		if ((rv = index_series_get(&r, s, nstrs, signed_v, m)) != 0)
			goto out;
	}
	if ((rv = rd_end(&r)) != 0)
		goto out;
	*bytes = rawlen * 3 + sm_strtab_mem(&s->lstr) +
	    (size_t)nseries * 128;
	*out = s;
	s = NULL;
out:
	if (s != NULL) {
		ing_set_fini(s);
		sm_free(s);
	}
	sm_free(strs);
	sm_free(strbuf);
	sm_free(raw);
	return (rv);
}

int
ing_block_data_decode(const uint8_t *v, size_t n,
    const struct ing_series *sr, uint32_t nnodes, struct sm_arena *a,
    struct ing_bucket **out, struct sm_err *err)
{
	struct ing_bucket *bk;
	uint8_t *raw = NULL;
	size_t rawlen;
	bool signed_v;
	struct rd r;
	int rv;

	*out = NULL;
	if ((rv = block_unwrap(v, n, 'D', &raw, &rawlen, err)) != 0)
		return (rv);
	r = (struct rd){ raw, raw + rawlen, raw, "data", err, 0 };
	signed_v = v[2] >= 2;
	if ((bk = sm_arena_alloc(a, (size_t)sr->nb * sizeof(*bk))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t b = 0; b < sr->nb; b++) {
		uint32_t cnt = sr->b[b].n;
		int64_t sum = 0;

		bk[b] = sr->b[b];
		if (cnt > rawlen) {
			rv = rd_fail(&r, "pair count larger than the data");
			goto out;
		}
		bk[b].node = sm_arena_alloc(a, (size_t)cnt * sizeof(uint32_t));
		bk[b].value = sm_arena_alloc(a, (size_t)cnt * sizeof(int64_t));
		if (bk[b].node == NULL || bk[b].value == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		for (uint32_t j = 0; j < cnt; j++) {
			uint64_t d = get_uv(&r);
			uint64_t node = j == 0 ? d : bk[b].node[j - 1] + d;

			if (r.bad || (j > 0 && d == 0) || node >= nnodes ||
			    node == 0) {
				rv = rd_fail(&r, "node out of order or range");
				goto out;
			}
			bk[b].node[j] = (uint32_t)node;
		}
		for (uint32_t j = 0; j < cnt; j++) {
			int64_t x;

			if (signed_v) {
				x = get_zz(&r);
			} else {
				uint64_t u = get_uv(&r);

				if (!r.bad && (u == 0 || u > INT64_MAX)) {
					rv = rd_fail(&r, "value out of range");
					goto out;
				}
				x = (int64_t)u;
			}
			if (r.bad) {
				rv = rd_fail(&r, "value out of range");
				goto out;
			}
			bk[b].value[j] = x;
			sum = sm_add_sat(sum, x);
		}
		if (sum != sr->b[b].total) {
			rv = rd_fail(&r, "values do not add up to the bucket "
			    "total");
			goto out;
		}
	}
	if ((rv = rd_end(&r)) != 0)
		goto out;
	*out = bk;
out:
	sm_free(raw);
	return (rv);
}

/*
 * The frame of a record part ('P' spans, 'X' profiles): unwrap it into
 * *raw, start r on it (named `what`), check that nrec records of at
 * least minlen bytes each fit, and allocate them (elsize each).  The
 * array, or NULL with *rv set (SM_ECORRUPT, SM_ENOMEM) and *raw freed.
 */
static void *
recs_begin(const uint8_t *v, size_t n, char kind, const char *what,
    uint32_t nrec, size_t minlen, size_t elsize, uint8_t **raw,
    struct rd *r, int *rv, struct sm_err *err)
{
	size_t rawlen;
	void *recs;

	if ((*rv = block_unwrap(v, n, kind, raw, &rawlen, err)) != 0)
		return (NULL);
	*r = (struct rd){ *raw, *raw + rawlen, *raw, what, err, 0 };
	if (nrec == 0 || nrec > rawlen / minlen)
		*rv = rd_fail(r, "record count does not fit the data");
	else if ((recs = sm_malloc((size_t)nrec * elsize)) == NULL)
		*rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	else
		return (recs);
	sm_free(*raw);
	*raw = NULL;
	return (NULL);
}

int
ing_block_spans_decode(const uint8_t *v, size_t n,
    const struct ing_block_meta *m, struct ing_span_rec **out,
    struct sm_err *err)
{
	struct ing_span_rec *sp;
	uint8_t *raw = NULL;
	uint64_t span = 0;
	int64_t t = 0;
	struct rd r;
	int rv;

	*out = NULL;
	/* Every record takes at least 12 bytes. */
	if ((sp = recs_begin(v, n, 'P', "spans", m->nspans, 12, sizeof(*sp),
	    &raw, &r, &rv, err)) == NULL)
		return (rv);
	for (uint32_t i = 0; i < m->nspans; i++) {
		uint64_t d = get_uv(&r), node;
		int64_t x;
		struct ing_span_rec *c = &sp[i];

		if (r.bad || (i > 0 && span + d < span)) {
			rv = rd_fail(&r, "span id out of range");
			goto out;
		}
		span += d;
		c->span = span;
		c->fp = get_fp(&r);
		t = (int64_t)((uint64_t)t + (uint64_t)get_zz(&r));
		node = get_uv(&r);
		x = get_zz(&r);
		if (r.bad || node == 0 || node >= m->nnodes || x == 0) {
			rv = rd_fail(&r, "node or value out of range");
			goto out;
		}
		c->t = t;
		c->node = (uint32_t)node;
		c->value = x;
		if (i > 0 && (c->span < sp[i - 1].span ||
		    (c->span == sp[i - 1].span && (c->fp < sp[i - 1].fp ||
		    (c->fp == sp[i - 1].fp && (c->t < sp[i - 1].t ||
		    (c->t == sp[i - 1].t && c->node <= sp[i - 1].node))))))) {
			rv = rd_fail(&r, "records out of order");
			goto out;
		}
	}
	if ((rv = rd_end(&r)) != 0)
		goto out;
	*out = sp;
	sp = NULL;
out:
	sm_free(sp);
	sm_free(raw);
	return (rv);
}

int
ing_block_profiles_decode(const uint8_t *v, size_t n,
    const struct ing_block_meta *m, struct ing_prof_rec **out,
    struct sm_err *err)
{
	struct ing_prof_rec *pr;
	uint8_t *raw = NULL;
	int64_t t = 0;
	struct rd r;
	int rv;

	*out = NULL;
	/* Every record takes at least 26 bytes. */
	if ((pr = recs_begin(v, n, 'X', "profiles", m->nprofiles, 26,
	    sizeof(*pr), &raw, &r, &rv, err)) == NULL)
		return (rv);
	for (uint32_t i = 0; i < m->nprofiles; i++) {
		struct ing_prof_rec *c = &pr[i];
		uint64_t x;

		c->fp = get_fp(&r);
		t = (int64_t)((uint64_t)t + (uint64_t)get_zz(&r));
		if (r.bad || r.end - r.p < 16) {
			rv = rd_fail(&r, "truncated record");
			goto out;
		}
		c->t = t;
		memcpy(c->id, r.p, 16);
		r.p += 16;
		/* The two's-complement bits of the signed total: a delta
		 * profile's upload may sum to 0 or below (profiles.h). */
		x = get_uv(&r);
		if (r.bad) {
			rv = rd_fail(&r, "truncated total");
			goto out;
		}
		c->total = (int64_t)x;
		if (i > 0 && ing_prof_cmp(&pr[i - 1], c) >= 0) {
			rv = rd_fail(&r, "records out of order");
			goto out;
		}
	}
	if ((rv = rd_end(&r)) != 0)
		goto out;
	*out = pr;
	pr = NULL;
out:
	sm_free(pr);
	sm_free(raw);
	return (rv);
}

int
ing_block_encode_merged(const struct ing_block_src *src, int level,
    uint64_t cover_gen, struct ing_block_enc *e, struct sm_err *err)
{
	struct ing_block_meta tier = { .cover_gen = cover_gen };

	memset(e, 0, sizeof(*e));
	if (cover_gen == 0)
		return (sm_err_set(err, SM_EINVAL, "a merged block needs a "
		    "cover_gen"));
	return (block_encode(src, level, &tier, e, err));
}
