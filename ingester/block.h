/*
 * block.h -- the on-disk format of a block: an immutable copy of one
 * tenant's head, cut when the head spans -ingester.block-duration or grows
 * past -ingester.head-max-bytes (docs/architecture.md §3).  This file owns the format;
 * ingester/store.c owns where the parts live (keys, column families).
 *
 * A block has these kinds of parts, each stored as one value:
 *
 *   kind  part      content (after decompression)
 *   'M'   meta      fixed fields, NOT compressed (readable cheaply at start)
 *   'I'   index     label strings; per series: labels, metadata, and the
 *                   summary of every bucket (time, profiles, total, pairs)
 *   'S'   symbols   frame names
 *   'T'   tree      the stack tree: per node, parent and frame name
 *   'D'   data      one per series: the (node, value) pairs of its buckets
 *   'P'   spans     span samples (spans.h), only when meta nspans > 0
 *   'X'   profiles  individual-profile records (profiles.h), only when
 *                   meta nprofiles > 0
 *
 * Every value starts with a 12-byte header:
 *
 *   offset  size  field
 *   0       2     magic "SM"
 *   2       1     format version (3; versions 1 and 2 are still read)
 *   3       1     kind ('M', 'I', 'S', 'T', 'D')
 *   4       4     raw length: the payload's length after decompression
 *                 (for 'M', the payload's length)
 *   8       4     checksum: low 32 bits of XXH3-64 over the stored payload
 *   12      ...   payload: zstd frame ('I', 'S', 'T', 'D') or raw ('M')
 *
 * Payload encodings (uv = unsigned LEB128 varint, zz = zigzag varint):
 *   meta     be64 gen, be64 min_t, be64 max_t (exclusive: last bucket start
 *            + bucket width), be64 bucket_ms, be32 nseries, be32 nnodes,
 *            be32 nframes, be64 stored bytes (sum of all part values),
 *            be32 nspans (span records in the 'P' part), be32 nprofiles
 *            (records in the 'X' part); 0 = no such part, as in blocks
 *            written before they existed; then (version 3) be64 tier_ms,
 *            be64 cover_start, be64 cover_end, be64 cover_gen (below):
 *            92 bytes (60 in versions 1 and 2, read with the four tier
 *            fields 0)
 *
 * The meta is stored twice -- alone, for a cheap scan at startup, and at
 * the head of the index -- so a damaged meta value costs nothing: the
 * block's time range is read back from the index (see store.c).
 *   symbols  uv count, then count x (uv len, bytes); entry 0 is ""
 *   tree     uv nnodes (root included), then for node i = 1..nnodes-1:
 *            uv (i - parent[i]) (>= 1), uv name[i] (< nframes)
 *   index    a copy of the meta payload (92 bytes, 60 before version 3;
 *            its `bytes` is 0),
 *            then uv nstrings, strings as in symbols (entry 0 is "");
 *            uv nseries; per series: uv nlabels, nlabels x (uv name id,
 *            uv value id), uv spy, uv units, uv aggregation (string ids),
 *            uv sample_rate, uv nbuckets, per bucket: zz (t - previous t,
 *            the first from 0), uv profiles, zz total, uv npairs
 *   spans    nspans records sorted by (span, fp, t, node), unique, each
 *            uv (span - previous span), be64 fp, zz (t - previous t),
 *            uv node (< nnodes), zz value (!= 0, signed like the pairs);
 *            see spans.h
 *   data     per bucket of the series (counts from the index): uv first
 *            node, then uv (node - previous node) (>= 1) for the rest,
 *            then npairs x zz value (signed: delta profiles carry
 *            negatives; a pair whose writes cancelled out may be 0)
 *
 * Tier blocks (ingester/compact.c builds them).  Raw data stays
 * until retention (like Thanos); a tier block is an ADDITIONAL block that
 * summarises one window of a tenant at a coarser bucket width.  It is an
 * ordinary block (index, symbols, tree, data; never a 'P' or 'X' part:
 * span and profile queries read raw blocks) whose meta says:
 *   tier_ms      0 = a raw block, cut from a head; > 0 = a tier block,
 *                equal to its bucket_ms
 *   cover_start, cover_end   the window [start, end) it summarises
 *   cover_gen    it holds, summed exactly, every bucket inside the window
 *                of EVERY raw block of its tenant whose gen <= cover_gen,
 *                each bucket time floored to tier_ms (sm_floor_to), pairs
 *                summed per stack (one merged tree and symbol table),
 *                profile counts and totals summed -- and nothing else.
 * A raw block has cover_start and cover_end 0, and cover_gen 0 unless it
 * is a MERGED raw block (below).  Decoding checks, for a tier
 * block, bucket_ms == tier_ms, cover_start < cover_end, cover_start a
 * multiple of tier_ms and [min_t, max_t) inside the window (SM_ECORRUPT
 * otherwise); the index's meta copy must carry the same tier fields.
 * Version 3 changed only the meta (its tier fields); index, data and the
 * other parts are encoded as in version 2.
 *
 * Merged raw blocks (compact.c "Merges").  Small raw blocks of
 * one tenant lying in one clock hour are merged into one raw block
 * (tier_ms 0, bucket_ms the raw width, buckets at their own times, one
 * symbol table and tree, spans and profile records carried over) with a
 * FRESH gen.  For coverage it must count as its largest input, so its
 * cover_gen is the largest coverage gen of its inputs: a raw block's
 * COVERAGE GEN (ing_block_cov_gen) is cover_gen when > 0, else its gen,
 * and every comparison of a raw block with a tier block's cover_gen uses
 * it (compact.c, tiers.c).  Decoding accepts cover_gen > 0 on a raw block
 * only below its gen (inputs are always older than the merge).  The
 * inputs stay on disk until their deletion, each with a tombstone (store.h
 * 'Z') written in the same batch as the merged block, so an open never
 * serves both.
 *
 * Version 1 (blocks written before values were signed) differs only in
 * `uv total` (> 0) and `uv value` (> 0); it is read as such, and a block
 * is all of one version (every part carries the version it was written
 * with).
 *
 * Decoding checks everything a damaged or hostile value could break:
 * header, checksum, exact decompressed size (common/zst.h), every count
 * against the bytes left, every id against its table, parents before
 * children, sorted unique labels and nodes, values whose sum equals the
 * bucket's total (and positive ones in version 1).  Any failure is SM_ECORRUPT with a message
 * saying what and where; nothing is ever asserted on disk bytes.
 */
#ifndef ING_BLOCK_H
#define ING_BLOCK_H

#include "common/arena.h"
#include "common/buf.h"
#include "common/strtab.h"
#include "common/tree.h"

#include "profiles.h"
#include "set.h"
#include "spans.h"

#define ING_BLOCK_HDR 12
#define ING_BLOCK_VERSION 3
#define ING_BLOCK_VERSION_MIN 1     /* oldest version still read */
#define ING_BLOCK_META_LEN 92       /* version 3 */
#define ING_BLOCK_META_LEN_V2 60    /* versions 1 and 2 */

struct ing_block_meta {
	uint64_t gen;
	int64_t min_t, max_t;          /* [min_t, max_t) */
	int broken;                    /* meta and index both damaged: the
					  range is unknown (store.c) */
	int merged;                    /* tombstoned: merged into another
					  block, never served (store.c, in
					  memory only) */
	bool shipped;                  /* in the bucket (ship.h; in memory
					  only, learnt from the ship record) */
	int64_t bucket_ms;
	uint32_t nseries, nnodes, nframes;
	uint64_t bytes;
	uint32_t nspans;               /* records in the 'P' part */
	uint32_t nprofiles;            /* records in the 'X' part */
	/* Tiers (above): 0 = a raw block; else == bucket_ms. */
	int64_t tier_ms;
	int64_t cover_start, cover_end;   /* the window it summarises */
	uint64_t cover_gen;               /* tier: raw blocks with coverage
					     gen <= it; raw: 0, or a merged
					     block's largest input's */
};

/*
 * The coverage gen of a raw block: the gen to compare with a tier block's
 * cover_gen.  A merged raw block counts as its newest input (cover_gen),
 * any other raw block as itself (above, "Merged raw blocks").
 */
static inline uint64_t
ing_block_cov_gen(const struct ing_block_meta *m)
{
	return (m->cover_gen > 0 ? m->cover_gen : m->gen);
}

/* Every part of one block, encoded and ready to store. */
struct ing_block_enc {
	struct ing_block_meta meta;
	struct sm_buf m, index, symbols, tree;
	struct sm_buf spans;           /* empty when meta.nspans == 0 */
	struct sm_buf profiles;        /* empty when meta.nprofiles == 0 */
	struct sm_buf *data;           /* nseries values, in series order */
	uint32_t ndata;
};

/*
 * The encoder input: everything a block is made of, and nothing of where
 * it comes from.  ing_head_block_src (head.h) fills it from a head (the
 * cut, and compact.c's builders, which are heads too); the encoder reads
 * only this.  A source that keeps sealed buckets elsewhere than in its
 * series (on disk) hands them over through `series`, which may build the
 * series it returns.
 *
 *   gen, bucket_ms      the block's id and bucket width
 *   min_t, max_t        first and last bucket start of any series
 *   frames, tree        frame names (id 0 = "") and the (parent, frame)
 *                       stack tree the pairs' node ids index
 *   lstr                label and metadata strings (the series' lid and
 *                       meta ids index it)
 *   nseries, series     series k < nseries: its labels, metadata and
 *                       buckets sorted by t, each t once, pairs readable
 *                       through the pair cursor (set.h); called once or
 *                       twice per series, in order; what it returns stays
 *                       valid until its next call.  0, SM_ENOMEM, SM_EIO
 *                       or SM_ECORRUPT (err says what).
 *   spans, profs        span samples and individual-profile records,
 *                       sorted (spans.h, profiles.h)
 */
struct ing_block_src {
	uint64_t gen;
	int64_t bucket_ms;
	int64_t min_t, max_t;
	const struct sm_strtab *frames;
	const struct sm_tree *tree;
	const struct sm_strtab *lstr;
	uint32_t nseries;
	int (*series)(void *arg, uint32_t k, const struct ing_series **out,
	    struct sm_err *err);
	void *arg;
	const struct ing_span_rec *spans;
	uint32_t nspans;
	const struct ing_prof_rec *profs;
	uint32_t nprofs;
};

/*
 * Encode a raw block from `src`.  zstd `level`.  0, SM_ENOMEM, SM_EINVAL
 * for an empty source, or the error of src->series.
 */
int ing_block_encode(const struct ing_block_src *src, int level,
    struct ing_block_enc *e, struct sm_err *err);

/*
 * Encode a tier block (compact.c): like ing_block_encode, with tier_ms =
 * src->bucket_ms and the window [cover_start, cover_end) and cover_gen in
 * the meta; no span or profile part is written.  SM_EINVAL when the
 * fields break the rules above (buckets outside the window, a window not
 * aligned to the width, spans or profile records in the source).
 */
int ing_block_encode_tier(const struct ing_block_src *src, int level,
    int64_t cover_start, int64_t cover_end, uint64_t cover_gen,
    struct ing_block_enc *e, struct sm_err *err);

/*
 * Encode a merged raw block (compact.c): like ing_block_encode (spans and
 * profiles included) with cover_gen (> 0, below src->gen) in the meta.
 * SM_EINVAL otherwise.
 */
int ing_block_encode_merged(const struct ing_block_src *src, int level,
    uint64_t cover_gen, struct ing_block_enc *e, struct sm_err *err);
void ing_block_enc_fini(struct ing_block_enc *e);

/* Check a value's header and checksum; returns the payload. */
int ing_block_open(const uint8_t *v, size_t n, char kind,
    const uint8_t **payload, size_t *plen, uint32_t *raw_len,
    struct sm_err *err);

int ing_block_meta_decode(const uint8_t *v, size_t n,
    struct ing_block_meta *m, struct sm_err *err);

/* The meta copy at the head of an index value ('I'); its bytes is 0. */
int ing_block_meta_from_index(const uint8_t *v, size_t n,
    struct ing_block_meta *m, struct sm_err *err);

/* A decoded tree with its frame names (read-only, shared via the cache). */
struct ing_block_tree {
	uint32_t n;
	uint32_t *parent;
	uint32_t *name;
	struct sm_str *frames;         /* nframes entries into `strbuf` */
	uint32_t nframes;
	char *strbuf;
	size_t bytes;                  /* memory held, for the cache budget */
};

int ing_block_tree_decode(const uint8_t *sym, size_t nsym,
    const uint8_t *tree, size_t ntree, const struct ing_block_meta *m,
    struct ing_block_tree **out, struct sm_err *err);
void ing_block_tree_free(struct ing_block_tree *t);

/*
 * Decode an index into a fresh set: series with labels, metadata and
 * bucket summaries (node/value left NULL), plus postings.  *bytes gets the
 * memory held.  The set is heap-allocated; free with ing_set_fini + free.
 */
int ing_block_index_decode(const uint8_t *v, size_t n,
    const struct ing_block_meta *m, struct ing_set **out, size_t *bytes,
    struct sm_err *err);

/*
 * Decode one series' data against its summary `sr` (from the index): fills
 * a copy of its buckets with node/value arrays allocated from `a`.
 */
int ing_block_data_decode(const uint8_t *v, size_t n,
    const struct ing_series *sr, uint32_t nnodes, struct sm_arena *a,
    struct ing_bucket **out, struct sm_err *err);

/*
 * Decode a spans part ('P', m->nspans records) into a heap array sorted by
 * span (free with sm_free).  0, SM_ECORRUPT, SM_ENOMEM.
 */
int ing_block_spans_decode(const uint8_t *v, size_t n,
    const struct ing_block_meta *m, struct ing_span_rec **out,
    struct sm_err *err);

/* Decode a profiles part ('X', m->nprofiles records, sorted). */
int ing_block_profiles_decode(const uint8_t *v, size_t n,
    const struct ing_block_meta *m, struct ing_prof_rec **out,
    struct sm_err *err);

#endif /* ING_BLOCK_H */
