/*
 * head.h -- one tenant's head: the mutable, in-memory data that new writes
 * go to until it is cut into a block (docs/architecture.md §2, §3).
 *
 *   ing_head
 *     set        ing_set: label strings, series, buckets with pairs, index
 *     frames     sm_strtab: frame names
 *     tree       sm_tree: (parent, frame) call-tree nodes
 *     spans      ing_spans: span samples (spans.h), counted in the bytes
 *     profs      ing_profs: one record per (upload, series) (profiles.h)
 *     gen        generation: the head log keys of its writes carry it, and
 *                the block it becomes is named by it
 *
 * A write maps the request's stack tree onto the head's tree in one pass
 * (parents before children; the tree is indexed by frame path, tree.h, so
 * every node's probe starts ahead), then adds each series' (node, value)
 * pairs to the bucket holding its timestamp with a sorted merge.  Every
 * bucket is kept packed, a series' newest too (set.h, "Packed buckets"):
 * a write into a bucket merges through the cursor and packs the result
 * again.  Except a hot bucket, a series' newest written again: it stays
 * unpacked until a later bucket opens, and a write whose nodes it all
 * holds adds its values in place (head.c, seal and stage_inplace).
 *
 * Lifetime and locking: `lock` (rwlock) guards the contents: writes hold it
 * exclusively, queries and the block encoder shared.  `writers` counts
 * writes that were logged with this head's generation but not yet applied;
 * a cut waits for it to reach 0 before encoding (see write.c).  `refs` keeps
 * the head alive while a query or a cut uses it after the tenant lock was
 * released.  Both are atomics.  A query that reads many series gives its
 * read lock up between them while a write waits for it (`lock_waiting`,
 * ing_head_yield; set.h, "Yielding"), so a write waits for a slice of a
 * query, not for the whole of it.
 *
 * Active-series limit: a write carries the tenant's limit for this
 * ingester (WriteRequest.max_series, from the distributor; db.h).  Its
 * series are the head's series, so they stop counting when the head is
 * cut.  Before applying anything, under the write lock, ing_head_write
 * counts the write's distinct series the head lacks; if the head would
 * then hold more than the limit, the whole write is refused (SM_ELIMIT,
 * Pyroscope's message) and nothing of it -- not a frame, a tree node or a
 * label string -- is added: a refused series costs no lasting memory.
 * Writes to series the head holds are never refused, even when the head
 * is over the limit (a lowered limit, or a replayed log).
 *
 * All or nothing: a write changes the head whole or not at all.  Under the
 * write lock it first reserves -- makes every allocation it can need --
 * then publishes with steps that cannot fail:
 *   reserve   frames interned and tree nodes created; each series' pairs
 *             mapped to head nodes (the one pass over the samples) and
 *             its series found, or staged (ing_series_create: strings
 *             interned, not in the set); each (series, bucket) the write
 *             touches merged with the bucket's pairs into new arrays (a
 *             packed bucket is read through the cursor, not unpacked in
 *             place; one series twice in a bucket is merged twice);
 *             room for new buckets in each series' array, for the span
 *             and profile records, and ing_set_reserve for the new
 *             series (series array, fingerprint table, every posting
 *             list the index pushes onto);
 *   publish   append the staged series, swap each bucket's arrays in (or
 *             insert the new bucket), append the records.  Re-packing a
 *             sealed bucket may fail; it then stays unpacked (same pairs,
 *             more memory), as before.
 * A failure while reserving (SM_ENOMEM, or SM_EMALFORMED found on the
 * way) frees what was staged: series, buckets, pairs, totals, profile
 * counts, postings, span and profile records are exactly as before the
 * write.  What may stay is capacity (grown arrays, spare posting lists),
 * and frame strings, label strings and tree nodes it interned: none of
 * them is ever counted -- a tree node without pairs adds 0 to every
 * merge and is not listed, a string no series refers to is in no
 * posting, so no label name or value query lists it.  They cost memory
 * (ing_head_bytes counts them) until the head is cut.  The reservation
 * adds no pass over the samples and copies nothing but the buckets the
 * write merges into, which the sorted merge copied before too.
 *
 * Spilled buckets.  A series' sealed buckets are most of a
 * head's memory, and they are durable already (the head log).  A head
 * attached to a store (ing_head_attach; the db attaches every tenant
 * head) writes them out with ing_head_spill: the packed pairs of every
 * sealed bucket (packed, not a series' newest) go to the store (store.h,
 * "Spilled bucket"), and the bucket leaves b[]: its summary -- t, pairs,
 * profiles, total, packed length -- is kept encoded in the series' sp,
 * about 10 bytes (set.h, "Spilled summaries").  What stays resident per
 * series is its labels, those summaries and its open bucket; the tree
 * and the strings are shared.  Three steps, so writes wait for none of
 * the I/O:
 *   1. under the read lock, copy each sealed bucket's bytes into a batch
 *      and note each series' write count (wseq), a batch of at most
 *      ING_SPILL_BATCH bytes at a time; b[] holds only resident buckets,
 *      so a pass costs what is new, not the whole head;
 *   2. with no lock, write the batch (not synced: the log is the
 *      durable copy; a crash replays the log and spills again);
 *   3. under the write lock, for each series whose wseq has not moved,
 *      move the summaries into sp (an append, unless a late write's
 *      bucket interleaves) and drop the buckets from b[] with their
 *      pairs.  A series a write touched in between is left for the next
 *      pass (its keys are rewritten then; a bucket is re-read before it
 *      is written into); one whose sp cannot grow keeps its buckets
 *      resident (its keys are then stale: readers skip a key whose bucket
 *      is resident).
 * The individual-profile records (profiles.h; 40 bytes per upload and
 * series, as much as the buckets' summaries) go too: a pass writes every
 * record in memory as one chunk (store.h, "Spilled profile records") and,
 * under the write lock, removes them from the front of h->profs (writes
 * only ever append to it; the array shrinks to what is left).  Readers
 * take every record through ing_head_profs, chunks read back first.
 * When: the tick (write.c) spills a head once ING_SPILL_MIN bytes of
 * sealed buckets are in memory (sealed_bytes), and at least every
 * -ingester.head-spill-interval, so what stays resident is about a second
 * of a busy head's writes, however fast they come -- but the interval
 * spills only a head holding ING_SPILL_SMALL bytes of sealed buckets or
 * profile records: a spill of a few bytes costs a write, and the head's
 * drop a range deletion in the spill family (10,000 tenants of one
 * profile each made 10,000 of them per cut, and RocksDB's range
 * tombstones made every cut quadratic).  A tick over half the memory
 * bound spills every head whatever it holds (ing_db_spill, `force`).
 * Readers of pairs read a spilled bucket back: a merge and the block
 * encoder through ing_head_buckets (resident and spilled in time order,
 * one iterator over the series' keys in the range), a write into a
 * spilled bucket (late data) in its reserve step, before anything is
 * published -- a failed read fails the write whole (SM_EIO), as any
 * reserve failure does; the write also reserves the series' sp without
 * that summary, and its publish puts the bucket back into b[] (it is
 * spilled again by a later pass).  Summaries never leave memory, so
 * series, stats, analyze and the select read no disk (ing_bucket_it
 * walks b[] and sp).  Only the tick spills (write.c), under the db's
 * cut_mu, so a spill and a cut of one head never overlap; the cut
 * encodes through ing_head_buckets.  The spilled keys outlive the cut:
 * queries that took the head before it may still read them, so they go
 * with the head's last reference (ing_head_unref; store.h).
 *
 * Errors: SM_EMALFORMED for a write that breaks the RPC contract (a parent
 * after its child, a string index out of range, a value <= 0, unsorted
 * nodes or labels, span triples that are not sorted by (span, node) and
 * unique, or whose node has no pair), SM_ENOMEM.
 */
#ifndef ING_HEAD_H
#define ING_HEAD_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/strtab.h"
#include "common/tree.h"

#include "set.h"
#include "profiles.h"
#include "spans.h"
#include "smolder/v1/rpc.pb-c.h"

struct ing_head {
	pthread_rwlock_t lock;
	uint64_t gen;
	int64_t bucket_ms;
	int64_t created_ms;            /* wall clock, for -ingester.block-duration */
	int64_t span_ms;               /* that duration (0: unknown): sizes
					* the summaries' room (set.h, "Room") */
	atomic_int writers;
	atomic_int refs;
	atomic_int lock_waiting;       /* writes blocked on `lock` (set.h,
					* Yielding) */
	struct ing_set set;
	struct sm_strtab frames;
	struct sm_tree tree;
	struct ing_spans spans;        /* span samples (spans.h) */
	struct ing_profs profs;        /* individual profiles (profiles.h) */
	uint64_t pair_bytes;           /* bytes of bucket pair arrays */
	uint64_t bucket_slots;         /* room in the series' bucket arrays
					* (write's reserve grows it) */
	struct ing_store *store;       /* spilled buckets go here (or NULL) */
	char *tenant;                  /* their key prefix */
	uint64_t spilled_bytes;        /* packed bytes spilled, in all */
	uint64_t spill_passes;         /* times summaries replaced buckets
					* (under the write lock) */
	uint64_t sum_bytes;            /* bytes allocated for the series'
					* spilled summaries (set.h) */
	atomic_uint_fast64_t sealed_bytes;   /* packed bytes of buckets in
					* memory, the newest included: about
					* what a spill would drop (read
					* without the lock) */
	uint32_t prof_chunks;          /* chunks of profile records spilled */
	uint64_t profs_spilled;        /* records in them */
	bool spill_keys;               /* spilled keys may be on disk: the
					* last unref drops them (store.h) */
	uint64_t writes;               /* uploads applied */
	_Atomic uint32_t nseries;      /* set.nseries after the last write,
					* readable without the lock */
};

/* A new, empty head with one reference.  0 or SM_ENOMEM. */
int ing_head_create(uint64_t gen, int64_t bucket_ms, struct ing_head **out);

/* Attach h to a store, for spilled buckets (above).  0 or SM_ENOMEM. */
struct ing_store;
int ing_head_attach(struct ing_head *h, struct ing_store *store,
    const char *tenant);

/*
 * Spill h's sealed buckets (above).  Takes and releases h's locks itself;
 * call it from one thread at a time per head.  *bytes gets the packed
 * bytes dropped from memory.  0, SM_EIO (nothing of the failed batch
 * dropped), SM_ENOMEM.  A head with no store spills nothing.
 */
#define ING_SPILL_BATCH ((size_t)8 << 20)
#define ING_SPILL_MIN ((uint64_t)1 << 20)
#define ING_SPILL_SMALL ((uint64_t)4 << 10)
int ing_head_spill(struct ing_head *h, bool force, uint64_t *bytes,
    struct sm_err *err);

struct ing_spill_cur;

/*
 * Series sr's buckets that overlap [start, end), resident and spilled, in
 * time order, with every pair readable (the caller holds h's lock, shared
 * is enough): *out = sr->b + k itself when sr has no spilled summary,
 * else a copy in `a` whose spilled buckets point to their bytes read back
 * into `a` (through `cur`, below, or an iterator of their own when cur is
 * NULL); *n gets the count.  0, SM_EIO, SM_ECORRUPT (a spilled value
 * that is not what was written), SM_ENOMEM.
 */
int ing_head_buckets(struct ing_head *h, const struct ing_series *sr,
    int64_t start, int64_t end, struct sm_arena *a, struct ing_spill_cur *cur,
    const struct ing_bucket **out, uint32_t *n, struct sm_err *err);

/*
 * A reader of spilled buckets shared by the ing_head_buckets calls of one
 * query or cut (NULL there: an iterator per call).  It keeps one store
 * iterator (store.h, ing_store_iter) for the head it was last used on.
 * An iterator reads the store as of its creation, and a reader under h's
 * lock sees as spilled only what a pass wrote before it published the
 * summaries (under the write lock, counting h->spill_passes); so the
 * iterator is made again whenever the head or its spill_passes changed
 * (a query that yielded the lock, a cursor moved to another head).  A
 * zeroed cursor is empty; ing_spill_cur_fini frees the iterator.  One
 * thread at a time.
 */
struct ing_spill_cur {
	const struct ing_head *h;
	uint64_t passes;
	struct ing_store_iter *it;
};

void ing_spill_cur_fini(struct ing_spill_cur *cur);

/*
 * Every profile record of h (profiles.h), spilled chunks read back first,
 * then those in memory: a heap array in *out (NULL when there are none),
 * sorted by (fp, t, id) with exact duplicates dropped when `sorted`, in
 * the order written otherwise.  The caller holds h's lock (shared is
 * enough).  0, SM_EIO, SM_ECORRUPT, SM_ENOMEM.
 */
int ing_head_profs(struct ing_head *h, bool sorted,
    struct ing_prof_rec **out, uint32_t *n, struct sm_err *err);

/* Take / drop a reference; the last drop frees the head. */
void ing_head_ref(struct ing_head *h);
void ing_head_unref(struct ing_head *h);

/*
 * Apply one write (takes the write lock).  The numbers of series and pairs
 * written are returned.  `max_series` > 0: refuse the write whole with
 * SM_ELIMIT, nothing applied, when it would take the head past that many
 * series (above); 0 = no limit (replay).  All or nothing (above): on any
 * error nothing of the write is applied -- no series, pair, total,
 * profile count, span or profile record -- so the caller can fail the
 * request and a retry counts once.  0, SM_ELIMIT, SM_EMALFORMED,
 * SM_ENOMEM.
 */
int ing_head_write(struct ing_head *h, const Smolder__V1__WriteRequest *req,
    uint32_t max_series, uint32_t *nseries, uint32_t *npairs,
    struct sm_err *err);

/*
 * The same limit check alone, under the read lock (write.c runs it before
 * logging a write, so a refused write costs no log I/O; ing_head_write
 * checks again, since other writes may add series in between).
 * 0, SM_ELIMIT, SM_EMALFORMED, SM_ENOMEM.
 */
int ing_head_series_check(struct ing_head *h,
    const Smolder__V1__WriteRequest *req, uint32_t max_series,
    struct sm_err *err);

/*
 * Check series k's span triples (write validation; ing_head_write checks
 * them too): equal array lengths, sorted by (span, node) and unique, each
 * node a node of the write's tree (1..nnodes), each value non-zero (signed
 * like the pairs).  0 or SM_EMALFORMED.
 */
int ing_head_spans_check(const Smolder__V1__SeriesWrite *w, size_t k,
    uint32_t nnodes, struct sm_err *err);

/* The yield of a query holding h's read lock (set.h, Yielding). */
static inline struct ing_yield ing_head_yield(struct ing_head *h)
{
	return ((struct ing_yield){ &h->lock, &h->lock_waiting });
}

/*
 * The encoder input of h (block.h): the cut, and compact.c's builders,
 * encode a head through it.  The caller holds h's lock (shared is enough)
 * with no write in flight, from here to ing_head_block_src_fini.  Its
 * spans and profile records are sorted copies (spilled records read
 * back).  0, SM_EIO, SM_ECORRUPT, SM_ENOMEM (err set).
 */
struct ing_block_src;
int ing_head_block_src(struct ing_head *h, struct ing_block_src *src,
    struct sm_err *err);
void ing_head_block_src_fini(struct ing_block_src *src);

/* Approximate heap bytes (call with the lock held, or racy is fine). */
uint64_t ing_head_bytes(const struct ing_head *h);

#endif /* ING_HEAD_H */
