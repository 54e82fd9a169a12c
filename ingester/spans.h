/*
 * spans.h -- span samples: the part of a profile's samples that carried a
 * `span_id` pprof label (traces to profiles, querier.v1
 * SelectMergeSpanProfile), kept so that "the merge of the samples of
 * these span ids" can be answered without making span_id a series label.
 *
 * What is stored.  The distributor (distributor/pprof.c) reads the span
 * id of every sample -- the `span_id` label, else `profile_id` (which
 * Pyroscope renames to span_id); exactly 16 hex digits, read big-endian
 * into a u64; other values are not span ids -- and sends, per series of
 * the write, the (span, leaf node, value) triples next to the series'
 * ordinary pairs (smolder.v1.SeriesWrite span_*).  The values are ALSO in
 * the ordinary pairs: totals, merges and series are unchanged, the span
 * samples are an extra, narrower view of the same values.  span_id never
 * becomes a series label, so it adds no series, postings or buckets.
 *
 * One record per (span, series, bucket, node):
 *   span   u64 span id
 *   fp     the series fingerprint (labels; selection and replica picks)
 *   t      the bucket start of the profile's time (ms): picks and the
 *          query's time range apply at bucket granularity, as for merges
 *   node   the leaf node in the head's / block's stack tree
 *   value  non-zero and signed like the pairs (delta profiles carry
 *          negatives), summed over profiles that hit the same key; a
 *          key whose sum is 0 is dropped
 *
 * Head: an append-only array per head (ing_head.spans), written under the
 * head's write lock by ing_head_write, so head log replay rebuilds it with
 * no extra log format.  Its memory counts in ing_head_bytes(), so
 * -ingester.head-max-bytes bounds it like the rest of the head, and it is
 * cut with the head.  A head query scans it (O(records), bounded by the
 * head size).
 *
 * Block: one extra part, kind 'P', in the blocks column family (key
 * tenant|id|'P'), written in the block's commit batch and deleted with the
 * block's range delete; the record count is in the block meta (be32
 * nspans at byte 52, formerly reserved; 0 = no 'P' part, which is also
 * what blocks written before spans existed hold).  Payload (zstd,
 * block.h header, kind 'P'): records sorted by (span, fp, t, node),
 * unique, each encoded as
 *     uv (span - previous span)  fixed be64 fp  zz (t - previous t)
 *     uv node (< the block's nnodes)  zz value (!= 0)
 * The count must match the meta, every field the bytes left; anything
 * else is SM_ECORRUPT.  A query decodes the part (not cached: span queries
 * name few spans and are rare next to merges) and binary-searches each
 * requested span id.
 *
 * Retention and disk: span records live exactly as long as the block they
 * belong to; their size is at most the block's pairs (one record per
 * span-labelled leaf per bucket).
 */
#ifndef ING_SPANS_H
#define ING_SPANS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/sm.h"

struct ing_span_rec {
	uint64_t span;
	uint64_t fp;
	int64_t t;
	int64_t value;
	uint32_t node;
};

struct ing_spans {
	struct ing_span_rec *v;
	uint32_t n, cap;
};

/* Append one record.  0 or SM_ENOMEM. */
int ing_spans_add(struct ing_spans *s, uint64_t span, uint64_t fp, int64_t t,
    uint32_t node, int64_t value);
void ing_spans_fini(struct ing_spans *s);
uint64_t ing_spans_bytes(const struct ing_spans *s);

/*
 * A heap copy of the records sorted by (span, fp, t, node) with equal
 * keys merged (the block order); *out is NULL when there are none.  The
 * 'P' part codec itself is in block.c (ing_block_encode,
 * ing_block_spans_decode).  0 or SM_ENOMEM.
 */
int ing_spans_sorted(const struct ing_spans *s, struct ing_span_rec **out,
    uint32_t *n);

/* Which records count, and how: a series / bucket filter returning 1
 * (added), -1 (subtracted: a replica's negative pick, db.h) or 0. */
typedef int (*ing_span_want_fn)(void *arg, uint64_t fp, int64_t t);

/*
 * Add the values of the records whose span is in ids[0..nids) (sorted,
 * unique), times what want() says, to acc[node].  `sorted`: v is sorted by
 * span (a block's records), so each id is binary-searched; otherwise every
 * record is visited.  Returns the records added less those subtracted
 * (modulo 2^64).
 */
uint64_t ing_spans_sum(const struct ing_span_rec *v, uint32_t n, bool sorted,
    const uint64_t *ids, size_t nids, ing_span_want_fn want, void *arg,
    int64_t *acc);

#endif /* ING_SPANS_H */
