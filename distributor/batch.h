/*
 * batch.h -- the write batch: what every ingest parser (pprof, folded,
 * lines, trie) produces and what the distributor sends to ingesters as one
 * smolder.v1.WriteRequest.
 *
 * A batch holds:
 *   - a string table of frame names (id 0 = "");
 *   - a request-local stack tree (common/tree.h) whose nodes are
 *     (parent, frame) pairs, shared by every series of the upload;
 *   - the series: a sorted, validated label set each, a timestamp, and
 *     (leaf node, value) pairs.
 * Parsers walk each sample root-first, calling dist_batch_frame() and
 * dist_batch_node() per frame, then dist_batch_add() once per (series, leaf)
 * value.  dist_batch_finish() sorts each series' pairs by node and sums
 * duplicates, so parsers never deduplicate stacks themselves.  The ingester
 * maps the request tree onto its tenant tree in one pass (parents first).
 *
 * Limits (per tenant overrides later; Pyroscope names, docs/wire-formats.md §7) live in
 * struct dist_limits; the batch enforces the ones that are about its own
 * content: symbol length (truncated, keeping the tail), series label
 * validation.  Parsers enforce the per-sample ones they see (samples,
 * depth, sample labels).
 *
 * Ownership: label strings and pair arrays come from the caller's arena;
 * the string table, tree and series index are heap-allocated and freed by
 * dist_batch_fini().  Locking: none, one request per batch.
 */
#ifndef DIST_BATCH_H
#define DIST_BATCH_H

#include "common/arena.h"
#include "common/buf.h"
#include "common/labels.h"
#include "common/oatab.h"
#include "common/strtab.h"
#include "common/tree.h"
#include "smolder/v1/rpc.pb-c.h"

struct dist_limits {
	size_t max_profile_bytes;     /* max_profile_size_bytes, 4 MiB (uncompressed) */
	uint32_t max_samples;         /* max_profile_stacktrace_samples, 16000; 0 = off */
	uint32_t max_sample_labels;   /* max_profile_stacktrace_sample_labels, 100 */
	uint32_t max_depth;           /* max_profile_stacktrace_depth, 1000 */
	uint32_t max_symbol_len;      /* max_profile_symbol_value_length, 65535 */
	struct sm_label_limits labels;
	/* Active series, enforced by the ingesters (push.c); 0 = none. */
	uint32_t max_global_series;   /* max_global_series_per_tenant */
	uint32_t max_local_series;    /* max_local_series_per_tenant */
	/* Shuffle sharding (push.c); 0 = every ingester. */
	uint32_t shard_size;          /* ingestion_tenant_shard_size */
};

void dist_limits_default(struct dist_limits *l);

/* Presentation metadata shared by every series of one upload. */
struct dist_meta {
	const char *spy_name;      /* "unknown" when the client sent none */
	uint32_t sample_rate;      /* Hz, 100 by default */
	const char *units;         /* og units, "samples" by default */
	const char *aggregation;   /* "sum" or "average" */
};

struct dist_series {
	struct sm_label *labels;   /* sorted, unique, validated */
	uint32_t nlabels;
	uint64_t fp;               /* sm_labels_fingerprint(labels) */
	int64_t time_ms;
	uint32_t *node;            /* after finish: strictly increasing */
	int64_t *value;            /* after finish: != 0, signed */
	uint32_t n, cap;
	/* Span samples (values also in node/value): after finish sorted by
	 * (span, node), unique, values > 0. */
	uint64_t *span;
	uint32_t *snode;
	int64_t *svalue;
	uint32_t ns, scap;
};

struct dist_batch {
	struct sm_arena *arena;
	const struct dist_limits *limits;
	struct dist_meta meta;
	struct sm_strtab strings;
	struct sm_tree tree;
	struct dist_series *series;
	uint32_t nseries, series_cap;
	struct sm_oatab tab;       /* series index by (fp, time) */
	uint64_t pairs;            /* dist_batch_add calls that stored a value */
	int finished;
};

/* Returns 0 or SM_ENOMEM.  `a` and `lim` must outlive the batch. */
int dist_batch_init(struct dist_batch *b, struct sm_arena *a,
    const struct dist_limits *lim);
void dist_batch_fini(struct dist_batch *b);

/*
 * Intern a frame name; names longer than limits->max_symbol_len keep their
 * last max_symbol_len bytes (Pyroscope keeps the tail).  Frame names are
 * made consistent for every ingest format and every output here, at the
 * one place all of them pass:
 *   - a NUL byte anywhere in the name is SM_EMALFORMED (400): C strings
 *     downstream would cut the name there and merge it with another
 *     frame, and no profiler emits NUL in a symbol, so it is refused
 *     rather than escaped;
 *   - bytes that are not valid UTF-8 (also a sequence cut by the tail
 *     truncation) are replaced by U+FFFD, one per byte (as Go's
 *     encoding/json), so collapsed, JSON and protobuf outputs are all
 *     valid UTF-8 and agree with each other.
 * Returns 0, SM_ENOMEM, SM_EMALFORMED or SM_ETOOBIG.
 */
int dist_batch_frame(struct dist_batch *b, const char *s, size_t n,
    uint32_t *name);

/*
 * dist_batch_frame for a name the caller has already checked to be valid
 * UTF-8 (the pprof decoder checks its whole string table once, and builds
 * names only from those strings and ASCII): the same rules, without the
 * second UTF-8 pass.  A name cut to max_symbol_len is checked again.
 */
int dist_batch_frame_utf8(struct dist_batch *b, const char *s, size_t n,
    uint32_t *name);

/*
 * Room for about `more` new nodes (sm_tree_reserve_nodes: the node
 * arrays; the index is built only if a lookup follows appends), from a
 * decoder that knows its input's size (the pprof decoder: twice its
 * location and sample counts, at most DIST_BATCH_RESERVE_MAX, so a
 * hostile count costs little).  A hint: failure is not an error, the
 * tree grows as it goes.
 */
#define DIST_BATCH_RESERVE_MAX 65536u
void dist_batch_reserve_nodes(struct dist_batch *b, uint32_t more);

/* Likewise for about `more` new frame names (at most
 * DIST_BATCH_RESERVE_MAX). */
void dist_batch_reserve_frames(struct dist_batch *b, uint32_t more);

/* Child of `parent` (0 = root) for frame `name`; see sm_tree_child. */
int dist_batch_node(struct dist_batch *b, uint32_t parent, uint32_t name,
    uint32_t *node);

/* A new child the caller knows the tree lacks; see sm_tree_append. */
int dist_batch_append(struct dist_batch *b, uint32_t parent, uint32_t name,
    uint32_t *node);

/*
 * Find or create the series with label set `ls` (any order; copied into the
 * arena and sorted) at `time_ms`.  A __session_id__ label is dropped, as
 * Pyroscope does with its default max_sessions_per_series = 0: an SDK
 * (pyroscope-go sends one per process start) restarting must not start
 * new series.  (Pyroscope's non-zero setting, which keeps a bounded
 * number of sessions per series, is not offered.)  The set is validated with
 * sm_labels_validate(); on failure returns SM_EINVAL with Pyroscope's
 * message in err.  Returns 0 and *idx, SM_EINVAL or SM_ENOMEM.
 */
int dist_batch_series(struct dist_batch *b, const struct sm_label *ls,
    uint32_t n, int64_t time_ms, uint32_t *idx, struct sm_err *err);

/*
 * Add `value` (signed) to leaf `node` of series `idx`.  Zero values are
 * ignored, negative ones kept (delta profiles); node 0 (an empty stack)
 * is ignored too.
 * Returns 0 or SM_ENOMEM.
 */
int dist_batch_add(struct dist_batch *b, uint32_t idx, uint32_t node,
    int64_t value);

/*
 * Record that `value` of leaf `node` of series `idx` (also given to
 * dist_batch_add) came from a sample carrying span id `span` (the
 * span_id pprof label, ingester/spans.h).  Values <= 0 and node 0 are
 * ignored as in dist_batch_add.  Returns 0 or SM_ENOMEM.
 */
int dist_batch_span(struct dist_batch *b, uint32_t idx, uint32_t node,
    int64_t value, uint64_t span);

/*
 * Sort and sum each series' pairs and drop series left empty.  Call once,
 * after the parser is done.  Returns 0 or SM_ENOMEM.
 */
int dist_batch_finish(struct dist_batch *b);

/* Total of all values of series `idx` (after finish). */
int64_t dist_batch_series_total(const struct dist_batch *b, uint32_t idx);

/*
 * Append the finished batch to `out` as a packed smolder.v1.Request whose
 * method is a WriteRequest for `tenant` with idempotency key `profile_id`
 * (16 bytes), ready to send.  `which` (nwhich sorted series indexes)
 * restricts it to those series, NULL means all: the replicas of one
 * upload may differ per series.  Only frames and nodes reachable from a
 * sent leaf are sent.  `max_series` is the receiving ingester's
 * active-series limit for the tenant (WriteRequest.max_series, push.c;
 * 0 = none).  Returns 0 or SM_ENOMEM.
 */
int dist_batch_encode(const struct dist_batch *b, const char *tenant,
    const uint8_t profile_id[16], const uint32_t *which, uint32_t nwhich,
    uint32_t max_series, struct sm_buf *out);

/* The same, naming the write's replicas (WriteRequest.replicas: every
 * ingester the distributor sends these series to, push.c).  With `msg`,
 * *msg is the Request the bytes were packed from, in b's arena, for a
 * direct call to hand along (common/rpc.h, "Direct calls"): as unpacking
 * them would give it, no string NULL. */
int dist_batch_encode_rep(const struct dist_batch *b, const char *tenant,
    const uint8_t profile_id[16], const uint32_t *which, uint32_t nwhich,
    uint32_t max_series, Smolder__V1__Replica *const *replicas,
    uint32_t nreplicas, struct sm_buf *out, Smolder__V1__Request **msg);

#endif /* DIST_BATCH_H */
