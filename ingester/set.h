/*
 * set.h -- a queryable set of series: the data model shared by the head
 * (mutable, in memory) and by decoded blocks (immutable, from disk).
 *
 *   ing_set
 *     lstr       sm_strtab    label names and values (and metadata strings)
 *     series[]   ing_series   one per distinct sorted label set
 *       labels                 (name, value) pointers into lstr, sorted
 *       lid[]                  the same as lstr ids: name0,value0,name1,...
 *       meta                   spy, units, aggregation (lstr ids), rate
 *       b[]                    buckets sorted by start time t
 *         t, profiles, total   always present
 *         node[], value[]      the (stack node, value) pairs, sorted by
 *                              node -- the head's open bucket; for a block
 *                              they stay on disk until a merge reads them
 *         packed               or the same pairs packed (the head's sealed
 *                              buckets, see "Packed buckets" below)
 *       sp                     a head's: summaries of the buckets whose
 *                              pairs were spilled, encoded ("Spilled
 *                              summaries" below); b[] does not hold them
 *     index      postings per (name id, value id) -> sorted series ids
 *
 * Selecting series (docs/architecture.md §5): every matcher that requires a value
 * (k="v" with v non-empty, k=~re where re does not match "") narrows the
 * candidates to the union of the postings of the matching values; the
 * candidate lists of all such matchers are intersected; the survivors are
 * then checked against the whole selector (which covers !=, !~ and the
 * empty-value rules of Prometheus), and against the time range using the
 * bucket times.  Every matcher's verdict is cached per distinct value (by
 * lstr id) for the call, so a regex runs once per distinct value, not once
 * per series (hostile patterns: common/selector.c "Regex cost").
 *
 * Locking: none here.  The head's owner holds its rwlock around every call;
 * a decoded block is immutable and shared read-only.
 *
 * Yielding: a query over a head holds its read lock, and a write waits for
 * every query holding it.  So a long query gives the lock up between
 * series whenever a write is waiting (ing_yield below; ing_set_select does
 * it between candidates, query.c's series visitor between series) and
 * takes it back after the write.  What a yield may change, and what stays valid:
 *   - series ids and ing_series pointers stay (series are only appended;
 *     an id list selected before a yield names the same series after it);
 *   - strings stay (sm_strtab keeps them in chunks that never move);
 *   - arrays may move: s->series, a series' b[] and its pairs, the
 *     index's postings, the head's tree -- read them again after a yield,
 *     never keep a pointer into them across one;
 *   - new series, strings and tree nodes may appear.
 * A query therefore sees each series as it was at some moment while the
 * query ran (never half a bucket: a write holds the lock for all of its
 * series), and may see part of a write that landed while it ran -- as if
 * that write's series had been written one by one.  The series set is the
 * one selected at the start.
 */
#ifndef ING_SET_H
#define ING_SET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "common/labels.h"
#include "common/oatab.h"
#include "common/selector.h"
#include "common/strtab.h"

struct ing_bucket {
	int64_t t;               /* start (ms), a multiple of the bucket width */
	uint32_t n;              /* pairs */
	uint32_t profiles;       /* uploads merged into this bucket */
	int64_t total;           /* sum of values */
	uint32_t *node;          /* n node ids, strictly increasing (or NULL) */
	int64_t *value;          /* n values, signed (or NULL) */
	uint8_t *packed;         /* or the pairs packed (node, value NULL) */
	uint32_t packed_len;     /* bytes at packed */
	uint32_t spilled;        /* pairs on disk, not here (node, value and
				  * packed NULL): a spilled summary as
				  * ing_bucket_it gives it (below), never
				  * in a series' b[] */
};

/*
 * Spilled summaries (head.h, "Spilled buckets").  When a head spills a
 * sealed bucket's pairs to the store, the bucket leaves b[] too: what
 * stays is its summary, encoded in the series' `sp`, in time order, per
 * bucket a uvarint of zigzag((t - previous t) / bucket_ms) << 1 | (profiles
 * != 1) (the first t against 0), uvarint profiles only when that bit is
 * set (most buckets hold one profile: a byte saved), then zigzag uvarint
 * total and uvarint n -- about 6 bytes instead of a 56-byte struct
 * ing_bucket, which was most of an hour-old head (bench B5).  A summary's packed_len is not kept
 * (decoded as 0): reading the bucket back gives it, and what else wants
 * it (AnalyzeQuery's profile bytes, an estimate) shares out sp.bytes,
 * the sum over the series' spilled buckets.  Measured on B5 (1.3 M
 * summaries): dt 1.0, profiles 1.0, total 3.6, n 1.2 and
 * packed_len 1.4 bytes each, so dropping packed_len saved 1.8 MB.
 *
 * Room: sp grows by a quarter, except that once a series has two
 * summaries its cadence is known and sp is sized at once for the rest of
 * the head (ing_sums_add's `until_t`, the data time the head's block
 * should end at; the bytes per summary from all but the first, whose t
 * is against 0): one realloc per series and head instead of ~20.  Each
 * realloc left the old buffer as a hole among long-lived blocks in the
 * heap, which transient request buffers then half fill: on B5, sizing sp
 * once left 3.7 MB less free-but-resident heap.  The sizing is capped at
 * one summary per bucket to until_t, so a backfill (data older than the
 * head) or an unknown until_t (0) falls back to growing.  b[] keeps
 * the buckets whose pairs are in memory (the newest, a late write's), and
 * no t is in both.  Readers walk the two in time order with ing_bucket_it
 * (below); ing_series_first_bucket and sr->b alone see only the resident
 * ones.  The encoding lives in memory only (the store keeps the pairs,
 * the head log the writes), so it can change freely.  A decoded block's
 * series have none (n == 0).
 */
struct ing_sums {
	uint8_t *p;
	uint32_t len, cap;       /* bytes used / allocated at p */
	uint32_t n;              /* buckets */
	int64_t last_t;          /* the newest one's t (when n > 0) */
	uint64_t bytes;          /* their packed_len, summed */
};

/* The most bytes one bucket's summary can take. */
#define ING_SUM_MAX 30

struct ing_meta {
	uint32_t spy, units, aggregation;   /* lstr ids */
	uint32_t sample_rate;
};

struct ing_series {
	uint64_t fp;
	struct sm_label *labels;
	uint32_t *lid;                      /* 2 * nlabels lstr ids */
	uint32_t nlabels;
	struct ing_meta meta;
	struct ing_bucket *b;
	uint32_t nb, cap;
	uint32_t id;                        /* index in its set */
	uint32_t wseq;                      /* a head's writes into it */
	struct ing_sums sp;                 /* a head's spilled buckets'
					       summaries (above) */
};

struct ing_posting {
	uint32_t *ids;
	uint32_t n, cap;
};

struct ing_index {
	uint64_t *keys;                     /* (name << 32 | value) + 1; 0 empty */
	uint32_t *vals;                     /* posting list index */
	uint32_t nslots;
	struct ing_posting *lists;
	uint32_t nlists, lists_cap;
	/* name id -> its value ids, for regexes and label-values */
	uint32_t *names;                    /* distinct name ids, in order seen */
	struct ing_posting *values;         /* values[i]: value ids of names[i] */
	uint32_t nnames, names_cap;
};

struct ing_set {
	struct sm_strtab lstr;
	struct ing_series **series;
	uint32_t nseries, series_cap;
	struct sm_oatab tab;                /* series idx by fingerprint */
	struct ing_index index;
	int64_t min_t, max_t;               /* bucket starts seen; max < min if empty */
};

/* --- index ---------------------------------------------------------------- */

int ing_index_init(struct ing_index *x);
void ing_index_fini(struct ing_index *x);

/* Record series `id` (ids must be added in increasing order) with its
 * label ids (2 * n: name, value, ...).  0 or SM_ENOMEM. */
int ing_index_add(struct ing_index *x, uint32_t id, const uint32_t *lid,
    uint32_t n);

/* The postings of (name, value), or NULL. */
const struct ing_posting *ing_index_get(const struct ing_index *x,
    uint32_t name, uint32_t value);

/* The value ids of `name`, or NULL when no series has it. */
const struct ing_posting *ing_index_values(const struct ing_index *x,
    uint32_t name);

/* --- sets ----------------------------------------------------------------- */

int ing_set_init(struct ing_set *s);

/* Frees the series, their label arrays and their buckets' pair arrays. */
void ing_set_fini(struct ing_set *s);

/*
 * Find the series with these sorted labels, or create it (interning the
 * strings into s->lstr and indexing it).  meta strings may be NULL.
 * 0 or SM_ENOMEM.
 */
int ing_set_series(struct ing_set *s, const struct sm_label *ls, uint32_t n,
    const char *spy, const char *units, const char *aggregation,
    uint32_t sample_rate, struct ing_series **out);

/*
 * A new series with these sorted labels (fingerprint `fp`) and metadata,
 * its strings interned into s->lstr, but not in the set: ing_set_append
 * publishes it, ing_series_free drops it.  0 or SM_ENOMEM.
 */
int ing_series_create(struct ing_set *s, const struct sm_label *ls,
    uint32_t n, uint64_t fp, const char *spy, const char *units,
    const char *aggregation, uint32_t sample_rate, struct ing_series **out);

/* Free a series that is not (or no longer) in a set, with its buckets. */
void ing_series_free(struct ing_series *sr);

/*
 * Make room for appending the m series sr[0..m) (ing_series_create'd, not
 * yet in s): the series array, the fingerprint table and every index
 * array ing_index_add will push onto.  Afterwards ing_set_append of each
 * of them, in this order, cannot fail.  Only capacities change: nothing
 * is published (empty spare posting lists past the index's nlists /
 * nnames hold the room for keys and names the index lacks).  A head write
 * reserves before it publishes anything (head.h).  0 or SM_ENOMEM.
 */
int ing_set_reserve(struct ing_set *s, struct ing_series *const *sr,
    uint32_t m);

/* The series with these sorted labels and their fingerprint `fp`
 * (sm_labels_fingerprint), or NULL.  Allocates nothing. */
struct ing_series *ing_set_series_find(const struct ing_set *s,
    const struct sm_label *ls, uint32_t n, uint64_t fp);

/* Whether series sr has exactly the sorted labels ls[0..n). */
bool ing_series_labels_equal(const struct ing_series *sr,
    const struct sm_label *ls, uint32_t n);

/* Append a fully built series (blocks decode through this); it takes
 * ownership of `sr` and indexes it.  0 or SM_ENOMEM. */
int ing_set_append(struct ing_set *s, struct ing_series *sr);

/*
 * A read lock that is given up while a write waits (Yielding, above):
 * `waiting` counts the writers blocked on `lock`.  NULL where nothing is
 * locked (a block).  Call it only where no pointer into a moving array is
 * held.
 */
struct ing_yield {
	pthread_rwlock_t *lock;
	atomic_int *waiting;
};

static inline void ing_yield(const struct ing_yield *y)
{
	if (y != NULL && atomic_load_explicit(y->waiting,
	    memory_order_relaxed) > 0) {
		pthread_rwlock_unlock(y->lock);
		/* The lock prefers writers (head.c): this waits for them. */
		pthread_rwlock_rdlock(y->lock);
	}
}

/*
 * The sorted ids of the series matching `sel` that have a bucket
 * overlapping [start, end) (start > end: no time filter), in a malloc'd
 * array (*out may be NULL when *n == 0).  `bucket_ms` is the bucket width.
 * Each distinct label value is matched once per call.  0, SM_ENOMEM, or
 * SM_EINVAL when a regex hit its cost limits (sm_matcher_eval); err says
 * why.  `y` (may be NULL) is yielded between candidates.
 */
int ing_set_select(const struct ing_set *s, const struct sm_selector *sel,
    int64_t start, int64_t end, int64_t bucket_ms, const struct ing_yield *y,
    uint32_t **out, uint32_t *n, struct sm_err *err);

/* Index of the first of b[0..nb) (sorted by t) that may overlap
 * [start, ...). */
uint32_t ing_buckets_first(const struct ing_bucket *b, uint32_t nb,
    int64_t bucket_ms, int64_t start);

/* Index of the first bucket of `sr` that may overlap [start, ...). */
static inline uint32_t ing_series_first_bucket(const struct ing_series *sr,
    int64_t bucket_ms, int64_t start)
{
	return (ing_buckets_first(sr->b, sr->nb, bucket_ms, start));
}

static inline bool ing_bucket_overlaps(const struct ing_bucket *b,
    int64_t bucket_ms, int64_t start, int64_t end)
{
	return (b->t < end && b->t + bucket_ms > start);
}

/*
 * Every bucket of a series that overlaps [start, end), resident (b[]) and
 * spilled (sp) alike, in time order:
 *
 *   struct ing_bucket_it it;
 *   const struct ing_bucket *b;
 *
 *   ing_bucket_it_init(&it, sr, bucket_ms, start, end);
 *   while ((b = ing_bucket_it_next(&it)) != NULL)
 *           ... b->t, b->profiles, b->total, b->n ...
 *
 * A resident bucket is the series' own; a spilled one is a summary in
 * `it` with `spilled` set and no pairs (ing_head_buckets reads them
 * back), valid until the next call.  The series must not change while
 * the iterator is in use (the caller holds the head's lock, and does not
 * yield).
 */
struct ing_bucket_it {
	const struct ing_bucket *b;       /* resident buckets left */
	uint32_t nb;
	const uint8_t *p, *pe;            /* spilled summaries not decoded */
	int64_t bucket_ms, end;
	int64_t prev;                     /* the last decoded one's t */
	bool has;                         /* `sp` holds the next spilled one */
	struct ing_bucket sp, out;
};

void ing_bucket_it_init(struct ing_bucket_it *it, const struct ing_series *sr,
    int64_t bucket_ms, int64_t start, int64_t end);
const struct ing_bucket *ing_bucket_it_next(struct ing_bucket_it *it);

/*
 * Move the summaries of every bucket of b[0..n) whose pairs are packed
 * (a head's spill: those are the ones it wrote to the store) into sr's
 * sp, in time order: an append when they are all newer than its last (a
 * live head), else sp is encoded again.  until_t sizes the append's room
 * ("Room" above; 0 when unknown).  *grown gets the change in bytes
 * allocated.  b[] is not changed.  0 or SM_ENOMEM (sp unchanged).
 */
int ing_sums_add(struct ing_series *sr, int64_t bucket_ms,
    const struct ing_bucket *b, uint32_t n, int64_t until_t, int64_t *grown);

/*
 * sr's sp without the summaries at the nt times t[0..nt) (sorted, each
 * in sp), whose buckets hold `bytes` packed bytes together (read back):
 * a new encoding in *out (exactly sized; a late write reserves it, then
 * swaps it in).  0 or SM_ENOMEM.
 */
int ing_sums_without(const struct ing_series *sr, int64_t bucket_ms,
    const int64_t *t, uint32_t nt, uint64_t bytes, struct ing_sums *out);

/* sr's spilled summary at bucket time t into *out (when not NULL; its
 * summary fields, no pairs): true, or false when sp has none at t. */
bool ing_sums_get(const struct ing_series *sr, int64_t bucket_ms, int64_t t,
    struct ing_bucket *out);

/*
 * Packed buckets.  A head series gets a profile every 10 s or so, and each
 * lands in a new bucket, which is then seldom written again; the head
 * keeps every bucket packed after each write (head.c, seal): uvarint g (the gcd of
 * its values' magnitudes), then per pair uvarint(node - previous node)
 * and the zigzag uvarint of value / g (values are signed: delta profiles
 * carry negatives).  CPU values are count x period, so value / g is the
 * sample count: a pair takes 2-3 bytes instead of 12 (node[] + value[]),
 * which is most of the head's memory (bench B5).  A write into a packed
 * bucket merges through the cursor and packs the result again.  A series
 * written several times a bucket (many agents under one label set) keeps
 * its newest bucket unpacked instead, until the next one opens (head.c,
 * seal).
 *
 * pack/unpack: 0 or SM_ENOMEM (the bucket is then unchanged); a spilled
 * bucket is left as it is.  Readers go through the cursor, which reads
 * either form (never a spilled bucket: head.h reads it back first).
 */
int ing_bucket_pack(struct ing_bucket *b);
int ing_bucket_unpack(struct ing_bucket *b);

/* Free b's pairs, in either form, leaving it none: node, value and packed
 * NULL, packed_len 0 (the other fields are the caller's). */
void ing_bucket_pairs_free(struct ing_bucket *b);

/* Memory a bucket's pairs hold (bytes), in either form; 0 spilled. */
static inline uint64_t ing_bucket_pair_bytes(const struct ing_bucket *b)
{
	if (b->spilled)
		return (0);
	return (b->packed != NULL ? b->packed_len : (uint64_t)b->n * 12);
}

/* The bytes of a resident bucket's data: packed, or 12 a pair.  What
 * AnalyzeQuery reports for a head; a spilled summary has no packed_len,
 * and the caller shares out its series' sp.bytes instead ("Spilled
 * summaries"), so an answer over a whole series does not change when a
 * spill moves the bytes to disk. */
static inline uint64_t ing_bucket_data_bytes(const struct ing_bucket *b)
{
	SM_ASSERT(!b->spilled);
	return (b->packed != NULL ? b->packed_len : (uint64_t)b->n * 12);
}

struct ing_pair_cur {
	const struct ing_bucket *b;
	const uint8_t *p;
	uint64_t g;
	uint32_t i, node;
};

static inline uint64_t ing_packed_uv(const uint8_t **pp)
{
	const uint8_t *p = *pp;
	uint64_t v = 0;
	unsigned s = 0;

	while (*p & 0x80) {
		v |= (uint64_t)(*p++ & 0x7f) << s;
		s += 7;
	}
	v |= (uint64_t)*p++ << s;
	*pp = p;
	return (v);
}

static inline void ing_pairs_begin(const struct ing_bucket *b,
    struct ing_pair_cur *c)
{
	SM_ASSERT(!b->spilled);       /* read it back first (head.h) */
	c->b = b;
	c->i = 0;
	c->node = 0;
	c->p = b->packed;
	c->g = 1;
	if (b->packed != NULL)
		c->g = ing_packed_uv(&c->p);
}

/* The next pair; false after the last. */
static inline bool ing_pairs_next(struct ing_pair_cur *c, uint32_t *node,
    int64_t *value)
{
	if (c->i == c->b->n)
		return (false);
	if (c->p != NULL) {
		uint64_t z;

		c->node += (uint32_t)ing_packed_uv(&c->p);
		*node = c->node;
		z = ing_packed_uv(&c->p);
		*value = (int64_t)((z >> 1) ^ (0 - (z & 1))) * (int64_t)c->g;
	} else {
		*node = c->b->node[c->i];
		*value = c->b->value[c->i];
	}
	c->i++;
	return (true);
}

/* The metadata string of a series (lstr id -> string). */
static inline const char *ing_set_str(const struct ing_set *s, uint32_t id)
{
	return (sm_strtab_str(&s->lstr, id, NULL));
}

#endif /* ING_SET_H */
