/*
 * head.c -- one tenant's head; see head.h.
 */
#include "head.h"
#include "block.h"
#include "store.h"

#include <string.h>

#include "common/arena.h"
#include "common/log.h"

/* Nodes ahead whose index slot a write's mapping prefetches (below). */
#define ING_MAP_AHEAD 8

int
ing_head_create(uint64_t gen, int64_t bucket_ms, struct ing_head **out)
{
	struct ing_head *h;

	SM_ASSERT(bucket_ms > 0);
	if ((h = sm_calloc(1, sizeof(*h))) == NULL)
		return (SM_ENOMEM);
	if (ing_set_init(&h->set) != 0)
		goto fail_set;
	if (sm_strtab_init(&h->frames) != 0)
		goto fail_frames;
	if (sm_tree_init_paths(&h->tree) != 0)
		goto fail_tree;
	{
		pthread_rwlockattr_t la;

		/* Writers first: a write waits for the queries that hold
		 * the head now, never for a stream of later ones (glibc's
		 * default prefers readers, and overlapping queries kept
		 * writes out for hundreds of ms: bench B8). */
		pthread_rwlockattr_init(&la);
		pthread_rwlockattr_setkind_np(&la,
		    PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&h->lock, &la);
		pthread_rwlockattr_destroy(&la);
	}
	h->gen = gen;
	h->bucket_ms = bucket_ms;
	h->created_ms = sm_now_ms();
	atomic_init(&h->writers, 0);
	atomic_init(&h->refs, 1);
	atomic_init(&h->lock_waiting, 0);
	atomic_init(&h->nseries, 0);
	atomic_init(&h->sealed_bytes, 0);
	*out = h;
	return (0);
fail_tree:
	sm_strtab_fini(&h->frames);
fail_frames:
	ing_set_fini(&h->set);
fail_set:
	sm_free(h);
	return (SM_ENOMEM);
}

void
ing_head_ref(struct ing_head *h)
{
	atomic_fetch_add(&h->refs, 1);
}

void
ing_head_unref(struct ing_head *h)
{
	if (h == NULL || atomic_fetch_sub(&h->refs, 1) != 1)
		return;
	SM_ASSERT(atomic_load(&h->writers) == 0);
	if (h->spill_keys) {
		struct sm_err err;

		/* Its spilled buckets go with its last reader (store.h). */
		sm_err_clear(&err);
		if (ing_store_spill_drop(h->store, h->tenant, h->gen,
		    &err) != 0)
			sm_warn("ingester", "dropping a head's spilled buckets "
			    "failed; they go with its block\ttenant=%s head=%llu "
			    "err=\"%s\"", h->tenant, (unsigned long long)h->gen,
			    err.msg);
	}
	ing_set_fini(&h->set);
	sm_strtab_fini(&h->frames);
	sm_tree_fini(&h->tree);
	ing_spans_fini(&h->spans);
	ing_profs_fini(&h->profs);
	pthread_rwlock_destroy(&h->lock);
	sm_free(h->tenant);
	sm_free(h);
}

int
ing_head_attach(struct ing_head *h, struct ing_store *store,
    const char *tenant)
{
	char *t = sm_strdup(tenant);

	if (t == NULL)
		return (SM_ENOMEM);
	sm_free(h->tenant);
	h->tenant = t;
	h->store = store;
	return (0);
}

/* --- spilled buckets (head.h) --------------------------------------------- */

/* Do the n bytes at v hold exactly npairs packed pairs (set.h)?  A spilled
 * value is read back from disk: it is checked, never trusted. */
static bool
packed_ok(const uint8_t *v, size_t n, uint32_t npairs)
{
	const uint8_t *p = v, *end = v + n;
	uint32_t vals = 1 + 2 * npairs;   /* g, then (node delta, value) */

	for (uint32_t i = 0; i < vals; i++) {
		unsigned sh = 0;

		for (;;) {
			if (p == end || sh > 63)
				return (false);
			if ((*p++ & 0x80) == 0)
				break;
			sh += 7;
		}
	}
	return (p == end);
}

struct spill_fill {
	struct ing_bucket *b;        /* the copy */
	uint32_t n, i;
	struct sm_arena *a;
};

static int
spill_fill_cb(void *arg, int64_t t, const uint8_t *v, size_t n)
{
	struct spill_fill *f = arg;
	struct ing_bucket *b;
	uint8_t *c;

	while (f->i < f->n && f->b[f->i].t < t)
		f->i++;
	if (f->i == f->n)
		return (1);                  /* past the last one: done */
	b = &f->b[f->i];
	if (b->t != t || !b->spilled)
		return (0);          /* a stale key: the bucket is resident */
	if (!packed_ok(v, n, b->n))
		return (SM_ECORRUPT);
	if ((c = sm_arena_alloc(f->a, SM_MAX(n, 1))) == NULL)
		return (SM_ENOMEM);
	memcpy(c, v, n);
	b->packed = c;
	b->packed_len = (uint32_t)n;
	b->spilled = 0;
	return (0);
}

void
ing_spill_cur_fini(struct ing_spill_cur *cur)
{
	ing_store_iter_free(cur->it);
	memset(cur, 0, sizeof(*cur));
}

/* cur's iterator, made anew when h or its spill passes changed (head.h;
 * the caller holds h's lock). */
static int
spill_cur_iter(struct ing_head *h, struct ing_spill_cur *cur,
    struct sm_err *err)
{
	int rv;

	if (cur->it != NULL && cur->h == h && cur->passes == h->spill_passes)
		return (0);
	ing_spill_cur_fini(cur);
	if ((rv = ing_store_iter_new(h->store, &cur->it, err)) != 0)
		return (rv);
	cur->h = h;
	cur->passes = h->spill_passes;
	return (0);
}

int
ing_head_buckets(struct ing_head *h, const struct ing_series *sr,
    int64_t start, int64_t end, struct sm_arena *a, struct ing_spill_cur *cur,
    const struct ing_bucket **out, uint32_t *nout, struct sm_err *err)
{
	struct ing_bucket_it it;
	const struct ing_bucket *b;
	struct spill_fill f;
	int64_t first = 0, last = 0;
	uint32_t nsp = 0;
	int rv;

	if (sr->sp.n == 0) {
		uint32_t lo = ing_series_first_bucket(sr, h->bucket_ms, start);
		uint32_t hi = lo;

		while (hi < sr->nb && ing_bucket_overlaps(&sr->b[hi],
		    h->bucket_ms, start, end))
			hi++;
		*out = sr->b + lo;
		*nout = hi - lo;
		return (0);
	}
	/* Resident and spilled summaries in time order, into a copy (room
	 * for all of them: one pass, no count first). */
	f.n = 0;
	f.i = 0;
	f.a = a;
	if ((f.b = sm_arena_alloc(a, ((size_t)sr->nb + sr->sp.n) *
	    sizeof(*f.b))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	ing_bucket_it_init(&it, sr, h->bucket_ms, start, end);
	while ((b = ing_bucket_it_next(&it)) != NULL) {
		if (b->spilled) {
			if (nsp++ == 0)
				first = b->t;
			last = b->t;
		}
		f.b[f.n++] = *b;
	}
	*out = f.b;
	*nout = f.n;
	if (nsp == 0)
		return (0);
	SM_ASSERT(h->store != NULL);
	if (cur != NULL && (rv = spill_cur_iter(h, cur, err)) != 0)
		return (rv);
	rv = ing_store_spill_read(h->store, cur != NULL ? cur->it : NULL,
	    h->tenant, h->gen, sr->id, first, last, spill_fill_cb, &f, err);
	if (rv == 1)
		rv = 0;
	if (rv == SM_ENOMEM)
		return (sm_err_set(err, rv, "out of memory"));
	if (rv != 0)
		return (rv);
	for (uint32_t i = 0; i < f.n; i++) {
		if (f.b[i].spilled)
			return (sm_err_set(err, SM_ECORRUPT, "spilled bucket "
			    "%lld of series %u (tenant %s, head %llu) is "
			    "missing from the store", (long long)f.b[i].t,
			    sr->id, h->tenant, (unsigned long long)h->gen));
	}
	return (0);
}

struct recs_fill {
	struct ing_prof_rec *v;
	uint32_t n, cap;
};

static int
recs_fill_cb(void *arg, const uint8_t *v, size_t n)
{
	struct recs_fill *f = arg;
	size_t k = n / sizeof(*f->v);

	if (n % sizeof(*f->v) != 0 || k > UINT32_MAX - f->n)
		return (SM_ECORRUPT);
	if (SM_GROW(f->v, f->cap, (size_t)f->n + k, 64) != 0)
		return (SM_ENOMEM);
	memcpy(f->v + f->n, v, n);
	f->n += (uint32_t)k;
	return (0);
}

int
ing_head_profs(struct ing_head *h, bool sorted, struct ing_prof_rec **out,
    uint32_t *n, struct sm_err *err)
{
	struct recs_fill f = { NULL, 0, 0 };
	int rv = 0;

	*out = NULL;
	*n = 0;
	if (h->prof_chunks > 0) {
		SM_ASSERT(h->store != NULL);
		rv = ing_store_recs_read(h->store, h->tenant, h->gen,
		    recs_fill_cb, &f, err);
		if (rv == 0 && f.n != h->profs_spilled)
			rv = sm_err_set(err, SM_ECORRUPT, "spilled profile "
			    "records of tenant %s in head %llu: %u on disk, "
			    "%llu written", h->tenant,
			    (unsigned long long)h->gen, f.n,
			    (unsigned long long)h->profs_spilled);
	}
	if (rv == 0 && h->profs.n > 0) {
		if (SM_GROW(f.v, f.cap, (size_t)f.n + h->profs.n, 64) != 0)
			rv = SM_ENOMEM;
		else {
			memcpy(f.v + f.n, h->profs.v,
			    (size_t)h->profs.n * sizeof(*f.v));
			f.n += h->profs.n;
		}
	}
	if (rv == SM_ENOMEM)
		(void)sm_err_set(err, rv, "out of memory");
	if (rv != 0) {
		sm_free(f.v);
		return (rv);
	}
	*out = f.v;
	*n = sorted ? ing_profs_sort(f.v, f.n) : f.n;
	return (0);
}

/*
 * Spill h's profile records (head.h): the same three steps as the
 * buckets.  Only the tick spills, one pass per head at a time, and writes
 * only append to h->profs, so the first n records are still the ones
 * written when the write lock is taken again.
 */
static int
spill_profs(struct ing_head *h, struct sm_kv_batch *batch, uint64_t *bytes,
    struct sm_err *err)
{
	uint32_t n;
	int rv;

	sm_kv_batch_clear(batch);
	pthread_rwlock_rdlock(&h->lock);
	n = h->profs.n;
	if (n > 0)
		ing_store_recs_put(batch, h->tenant, h->gen, h->prof_chunks,
		    h->profs.v, (size_t)n * sizeof(*h->profs.v));
	pthread_rwlock_unlock(&h->lock);
	if (n == 0)
		return (0);
	h->spill_keys = true;
	if ((rv = ing_store_spill_write(h->store, batch, err)) != 0)
		return (rv);
	atomic_fetch_add(&h->lock_waiting, 1);
	pthread_rwlock_wrlock(&h->lock);
	atomic_fetch_sub(&h->lock_waiting, 1);
	SM_ASSERT(h->profs.n >= n);
	memmove(h->profs.v, h->profs.v + n,
	    (size_t)(h->profs.n - n) * sizeof(*h->profs.v));
	h->profs.n -= n;
	h->prof_chunks++;
	h->profs_spilled += n;
	*bytes += (uint64_t)n * sizeof(*h->profs.v);
	if (h->profs.n == 0) {
		ing_profs_fini(&h->profs);
	} else if (h->profs.n < h->profs.cap / 4) {
		uint32_t cap = h->profs.cap / 2;
		void *v = sm_realloc(h->profs.v, (size_t)cap *
		    sizeof(*h->profs.v));

		if (v != NULL) {      /* else it keeps the room */
			h->profs.v = v;
			h->profs.cap = cap;
		}
	}
	pthread_rwlock_unlock(&h->lock);
	return (0);
}

/*
 * Step 3 for one series: the summaries of its packed sealed buckets (the
 * ones step 1 wrote) move to sr->sp (set.h, "Spilled summaries") and the
 * buckets leave b[], their pairs freed.  If sp cannot grow, they stay
 * resident (their keys in the store are then stale, and skipped).
 */
static void
spill_drop(struct ing_head *h, struct ing_series *sr, uint64_t *bytes)
{
	uint32_t w = 0;
	int64_t grown;

	if (sr->nb < 2 || ing_sums_add(sr, h->bucket_ms, sr->b, sr->nb - 1,
	    h->span_ms > 0 ? h->set.min_t + h->span_ms : 0, &grown) != 0)
		return;
	h->sum_bytes = (uint64_t)((int64_t)h->sum_bytes + grown);
	for (uint32_t k = 0; k < sr->nb; k++) {
		struct ing_bucket *b = &sr->b[k];

		if (k + 1 < sr->nb && b->packed != NULL) {
			sm_free(b->packed);
			h->pair_bytes -= b->packed_len;
			atomic_fetch_sub_explicit(&h->sealed_bytes,
			    b->packed_len, memory_order_relaxed);
			h->spilled_bytes += b->packed_len;
			*bytes += b->packed_len;
			continue;
		}
		sr->b[w++] = *b;
	}
	sr->nb = w;
	/* A replayed hour was all resident before its first spill: give
	 * the room back. */
	if (sr->cap > 16 && sr->nb < sr->cap / 4) {
		uint32_t cap = SM_MAX(sr->cap / 4, 8);
		struct ing_bucket *nb = sm_reallocarray(sr->b, cap,
		    sizeof(*nb));

		if (nb != NULL) {     /* else it keeps the room */
			h->bucket_slots -= sr->cap - cap;
			sr->b = nb;
			sr->cap = cap;
		}
	}
}

struct spill_note {
	uint32_t id, wseq;
};

int
ing_head_spill(struct ing_head *h, bool force, uint64_t *bytes,
    struct sm_err *err)
{
	struct sm_kv_batch *batch;
	struct spill_note *notes = NULL;
	uint32_t next = 0, nnotes, cap = 0;
	int rv = 0;

	*bytes = 0;
	if (h->store == NULL)
		return (0);
	if (!force) {
		bool small;

		pthread_rwlock_rdlock(&h->lock);
		small = atomic_load(&h->sealed_bytes) < ING_SPILL_SMALL &&
		    (uint64_t)h->profs.n * sizeof(*h->profs.v) <
		    ING_SPILL_SMALL;
		pthread_rwlock_unlock(&h->lock);
		if (small)
			return (0);
	}
	if ((batch = sm_kv_batch_create()) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (;;) {
		uint32_t ns;

		nnotes = 0;
		sm_kv_batch_clear(batch);
		/* 1. Copy sealed buckets out, under the read lock. */
		pthread_rwlock_rdlock(&h->lock);
		ns = h->set.nseries;
		for (; next < ns && sm_kv_batch_bytes(batch) < ING_SPILL_BATCH;
		    next++) {
			const struct ing_series *sr = h->set.series[next];
			bool any = false;

			for (uint32_t k = 0; k + 1 < sr->nb; k++) {
				const struct ing_bucket *b = &sr->b[k];

				if (b->packed == NULL)
					continue;
				ing_store_spill_put(batch, h->tenant, h->gen,
				    sr->id, b->t, b->packed, b->packed_len);
				any = true;
			}
			if (!any)
				continue;
			if (SM_GROW(notes, cap, (size_t)nnotes + 1, 64) != 0) {
				rv = SM_ENOMEM;
				break;
			}
			notes[nnotes++] = (struct spill_note){ sr->id,
			    sr->wseq };
		}
		pthread_rwlock_unlock(&h->lock);
		if (rv != 0) {
			(void)sm_err_set(err, rv, "out of memory");
			break;
		}
		if (nnotes == 0)
			break;                    /* next == ns */
		/* 2. Write them, no lock held. */
		h->spill_keys = true;    /* dropped with the last reference */
		if ((rv = ing_store_spill_write(h->store, batch, err)) != 0)
			break;

		/* 3. Drop what no write touched since. */
		atomic_fetch_add(&h->lock_waiting, 1);
		pthread_rwlock_wrlock(&h->lock);
		atomic_fetch_sub(&h->lock_waiting, 1);
		for (uint32_t i = 0; i < nnotes; i++) {
			struct ing_series *sr = h->set.series[notes[i].id];

			if (sr->wseq != notes[i].wseq)
				continue;
			spill_drop(h, sr, bytes);
		}
		h->spill_passes++;      /* readers' iterators are stale */
		pthread_rwlock_unlock(&h->lock);
		if (next >= ns)
			break;
	}
	if (rv == 0)
		rv = spill_profs(h, batch, bytes, err);
	sm_kv_batch_destroy(batch);
	sm_free(notes);
	return (rv);
}

uint64_t
ing_head_bytes(const struct ing_head *h)
{
	return (h->pair_bytes + ing_spans_bytes(&h->spans) +
	    ing_profs_bytes(&h->profs) +
	    h->bucket_slots * sizeof(struct ing_bucket) + h->sum_bytes +
	    sm_tree_mem(&h->tree) +
	    sm_strtab_mem(&h->frames) + sm_strtab_mem(&h->set.lstr) +
	    (uint64_t)h->set.nseries * 160);
}

struct pair {
	uint32_t node;
	int64_t value;
};

/*
 * Sort a write's pairs of one series by head node (equal nodes stay
 * together; their order does not matter, they are summed next).  qsort
 * with its comparator calls was 2.6% of ingest CPU (B1), so:
 * nothing when already sorted (a warm head maps a profile's nodes in
 * order more often than not), insertion below PAIRS_SORT_SMALL, else an
 * LSD radix sort on the node id through `tmp` (room for n pairs),
 * PAIRS_RADIX_BITS at a time over the bits the largest id uses (the same
 * scheme as common/flamegraph.c's fg_sort_by_name, on other elements).
 */
#define PAIRS_SORT_SMALL 32
#define PAIRS_RADIX_BITS 11
static void
pairs_sort(struct pair *p, uint32_t n, struct pair *tmp)
{
	uint32_t cnt[1u << PAIRS_RADIX_BITS], max = 0, i;
	struct pair *src = p, *dst = tmp, *sw;
	unsigned shift;

	for (i = 1; i < n && p[i - 1].node <= p[i].node; i++)
		;
	if (i >= n)
		return;
	if (n < PAIRS_SORT_SMALL) {
		for (i = 1; i < n; i++) {
			struct pair x = p[i];
			uint32_t j = i;

			for (; j > 0 && p[j - 1].node > x.node; j--)
				p[j] = p[j - 1];
			p[j] = x;
		}
		return;
	}
	for (i = 0; i < n; i++)
		max |= p[i].node;
	for (shift = 0; shift < 32 && (max >> shift) != 0;
	    shift += PAIRS_RADIX_BITS) {
		uint32_t mask = (1u << PAIRS_RADIX_BITS) - 1, sum = 0;

		memset(cnt, 0, sizeof(cnt));
		for (i = 0; i < n; i++)
			cnt[(src[i].node >> shift) & mask]++;
		for (i = 0; i <= mask; i++) {
			uint32_t c = cnt[i];

			cnt[i] = sum;
			sum += c;
		}
		for (i = 0; i < n; i++)
			dst[cnt[(src[i].node >> shift) & mask]++] = src[i];
		sw = src;
		src = dst;
		dst = sw;
	}
	if (src != p)
		memcpy(p, src, (size_t)n * sizeof(*p));
}

/* Pack bucket i of s (set.h, "Packed buckets"); a failure to pack only
 * costs memory. */
static void
pack(struct ing_head *h, struct ing_bucket *b)
{
	uint64_t was;

	if (b->packed != NULL)
		return;
	was = ing_bucket_pair_bytes(b);
	if (ing_bucket_pack(b) == 0 && b->packed != NULL) {
		h->pair_bytes = h->pair_bytes - was + ing_bucket_pair_bytes(b);
		atomic_fetch_add_explicit(&h->sealed_bytes, b->packed_len,
		    memory_order_relaxed);
	}
}

/*
 * After a write into bucket i, it is packed, the newest too: a series
 * usually gets one upload per bucket, so its open bucket is seldom written
 * again, and left unpacked it held 12 bytes a pair for every series (a
 * fifth of B5's head once the sealed buckets were spilled).  A second
 * write into it merges through the cursor, as into any packed bucket.
 * The one before the newest is packed too (it is already, unless packing
 * it failed, or it was hot).  The newest is never spilled
 * (ing_head_spill): the next write into it would read it back.
 *
 * Except a hot bucket: the newest, written again (`again`: this write
 * did not create it).  A series that gets many uploads a bucket (many
 * agents sending one label set; B1 sends hundreds) would otherwise read
 * its whole bucket back from varints, merge and pack it again for every
 * upload.  It stays unpacked until a later bucket opens and packs it as
 * the one before the newest, so only series written more than once a
 * bucket hold one unpacked bucket each.
 */
static void
seal(struct ing_head *h, struct ing_series *s, uint32_t i, bool again)
{
	if (!(again && i + 1 == s->nb))
		pack(h, &s->b[i]);
	if (i + 1 == s->nb && i > 0)
		pack(h, &s->b[i - 1]);
}

/*
 * Room for `need` buckets in sr->b.  By a quarter at a time, not double:
 * a series' array lives as long as its head (an hour: 360 buckets at
 * 10 s) and holds a 56-byte summary per bucket whether or not its pairs
 * were spilled, so doubling's slack (512 slots for 360) was a fifth of a
 * spilled head's memory; the copies cost ~4 reallocs more per series
 * and hour.  The slots are counted in ing_head_bytes.  0 or SM_ENOMEM.
 */
static int
buckets_grow(struct ing_head *h, struct ing_series *sr, uint64_t need)
{
	uint64_t ncap = (uint64_t)sr->cap + sr->cap / 4;
	struct ing_bucket *b;

	if (need <= sr->cap)
		return (0);
	ncap = SM_MAX(SM_MAX(ncap, need), 8);
	if (ncap > UINT32_MAX || (b = sm_reallocarray(sr->b, (size_t)ncap,
	    sizeof(*b))) == NULL)
		return (SM_ENOMEM);
	h->bucket_slots += ncap - sr->cap;
	sr->b = b;
	sr->cap = (uint32_t)ncap;
	return (0);
}

/*
 * Merge the sorted, unique pairs p[0..n) into the pairs of `b` (either
 * form, read through the cursor; b is not changed) into new arrays
 * (*nn, *nv, *outn pairs); *sum gets the added values.  0 or SM_ENOMEM
 * (nothing allocated).
 */
static int
pairs_merge(const struct ing_bucket *b, const struct pair *p, uint32_t n,
    uint32_t **nnp, int64_t **nvp, uint32_t *outn, int64_t *sum)
{
	struct ing_pair_cur c;
	uint32_t *nn, j = 0, k = 0, on = 0;
	int64_t *nv, ov = 0;
	bool more;

	nn = sm_malloc((size_t)SM_MAX(b->n + n, 1) * sizeof(*nn));
	nv = sm_malloc((size_t)SM_MAX(b->n + n, 1) * sizeof(*nv));
	if (nn == NULL || nv == NULL) {
		sm_free(nn);
		sm_free(nv);
		return (SM_ENOMEM);
	}
	if (b->n == 0) {                /* a new bucket: a copy */
		for (; k < n; k++) {
			nn[k] = p[k].node;
			nv[k] = p[k].value;
			*sum = sm_add_sat(*sum, p[k].value);
		}
		goto done;
	}
	ing_pairs_begin(b, &c);
	more = ing_pairs_next(&c, &on, &ov);
	while (more || j < n) {
		if (j == n || (more && on < p[j].node)) {
			nn[k] = on;
			nv[k++] = ov;
			more = ing_pairs_next(&c, &on, &ov);
		} else if (!more || p[j].node < on) {
			nn[k] = p[j].node;
			nv[k++] = p[j].value;
			*sum = sm_add_sat(*sum, p[j++].value);
		} else {
			nn[k] = on;
			nv[k++] = sm_add_sat(ov, p[j].value);
			*sum = sm_add_sat(*sum, p[j++].value);
			more = ing_pairs_next(&c, &on, &ov);
		}
	}
done:
	*nnp = nn;
	*nvp = nv;
	*outn = k;
	return (0);
}

/*
 * Check series w's span triples (spans.h): equal counts, sorted by (span,
 * node) and unique, every node one of the write's tree nodes (1..nnodes)
 * and every value non-zero.  Values are signed like the pairs, so a span's
 * part of a pair may exceed it or have the other sign, and a pair whose
 * samples cancelled out is gone while its span samples stay.
 */
int
ing_head_spans_check(const Smolder__V1__SeriesWrite *w, size_t k,
    uint32_t nnodes, struct sm_err *err)
{
	if (w->n_span_id != w->n_span_node || w->n_span_id != w->n_span_value)
		return (sm_err_set(err, SM_EMALFORMED, "write: series %zu "
		    "span arrays differ in length", k));
	for (size_t i = 0; i < w->n_span_id; i++) {
		uint32_t nd = w->span_node[i];

		if (i > 0 && (w->span_id[i] < w->span_id[i - 1] ||
		    (w->span_id[i] == w->span_id[i - 1] &&
		    nd <= w->span_node[i - 1])))
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "%zu span %zu out of order", k, i));
		if (nd == 0 || nd > nnodes || w->span_value[i] == 0)
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "%zu span %zu has a bad node or a zero value", k,
			    i));
	}
	return (0);
}

/* Labels of a write, checked sorted and unique, as sm_label pointers. */
static int
write_labels(const Smolder__V1__SeriesWrite *w, struct sm_label *ls,
    struct sm_err *err)
{
	for (size_t k = 0; k < w->n_labels; k++) {
		const Types__V1__LabelPair *lp = w->labels[k];

		if (lp->name == NULL || lp->value == NULL || (k > 0 &&
		    strcmp(w->labels[k - 1]->name, lp->name) >= 0))
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "labels not sorted and unique"));
		ls[k].name = lp->name;
		ls[k].value = lp->value;
	}
	return (0);
}


/*
 * The active-series limit (head.h): would `req` take h past `max` series?
 * Counts the distinct series of the write that h does not hold yet and
 * that it would create (those with pairs: a series without any is
 * skipped by the write), by fingerprint -- two new label sets with one
 * 64-bit fingerprint would count once, a 2^-64 leniency.  Caller holds
 * h->lock (either mode).  Allocates only a scratch array, freed here.
 * 0, SM_ELIMIT (nothing may be applied), SM_EMALFORMED, SM_ENOMEM.
 */
static int
series_limit_check(const struct ing_head *h,
    const Smolder__V1__WriteRequest *req, uint32_t max, struct sm_err *err)
{
	struct sm_label *ls = NULL;
	uint64_t *fps = NULL;
	size_t nls = 0;
	uint32_t nnew = 0, distinct = 0;
	int rv = 0;

	if (max == 0 || (uint64_t)h->set.nseries + req->n_series <= max)
		return (0);     /* cannot be over: no lookups */
	for (size_t k = 0; k < req->n_series; k++)
		nls = SM_MAX(nls, req->series[k]->n_labels);
	ls = sm_malloc(SM_MAX(nls, 1) * sizeof(*ls));
	fps = sm_malloc(SM_MAX(req->n_series, 1) * sizeof(*fps));
	if (ls == NULL || fps == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < req->n_series; k++) {
		const Smolder__V1__SeriesWrite *w = req->series[k];
		uint32_t n = (uint32_t)w->n_labels;
		uint64_t fp;

		if (w->n_node == 0)
			continue;
		if ((rv = write_labels(w, ls, err)) != 0)
			goto out;
		fp = sm_labels_fingerprint(ls, n);
		if (ing_set_series_find(&h->set, ls, n, fp) == NULL)
			fps[nnew++] = fp;
	}
	if (nnew > 1)
		qsort(fps, nnew, sizeof(*fps), sm_u64_cmp);
	for (uint32_t i = 0; i < nnew; i++)
		distinct += i == 0 || fps[i] != fps[i - 1];
	if ((uint64_t)h->set.nseries + distinct > max)
		rv = sm_err_set(err, SM_ELIMIT, "Maximum active series limit "
		    "exceeded (%llu/%u), reduce the number of active streams "
		    "(reduce labels or reduce label values), or contact your "
		    "administrator to see if the limit can be increased",
		    (unsigned long long)h->set.nseries + distinct, max);
out:
	sm_free(ls);
	sm_free(fps);
	return (rv);
}

int
ing_head_series_check(struct ing_head *h,
    const Smolder__V1__WriteRequest *req, uint32_t max_series,
    struct sm_err *err)
{
	int rv;

	if (max_series == 0)
		return (0);
	pthread_rwlock_rdlock(&h->lock);
	rv = series_limit_check(h, req, max_series, err);
	pthread_rwlock_unlock(&h->lock);
	return (rv);
}

/* Where bucket time bt is or would go in s->b (most writes: the newest). */
static uint32_t
bucket_pos(const struct ing_series *s, int64_t bt)
{
	uint32_t lo = 0, hi = s->nb;

	if (s->nb != 0 && s->b[s->nb - 1].t <= bt)
		return (s->b[s->nb - 1].t == bt ? s->nb - 1 : s->nb);
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (s->b[mid].t < bt)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo);
}

/* One series of a write, reserved (head.h, "All or nothing"). */
struct went {
	const Smolder__V1__SeriesWrite *w;
	struct ing_series *s;   /* the head's series, or a staged new one */
	uint64_t fp;
	int64_t bt;             /* bucket start */
	uint32_t k;             /* index in req->series */
	uint32_t off, n;        /* its pairs: pairs[off .. off + n), head
				 * nodes, sorted, repeated nodes summed */
};

/* One (series, bucket) a write changes: its merged pairs, new arrays. */
struct wbkt {
	struct ing_series *s;
	int64_t bt;
	uint32_t *node;
	int64_t *value;
	uint32_t n;
	uint32_t profiles;      /* uploads of the write merged into it */
	int64_t sum;            /* the write's values */
	bool fresh;             /* b[] has no bucket at bt yet */
	bool unspill;           /* it was spilled: back into b[], with the
				 * profiles and total it had */
	uint32_t base_profiles;
	int64_t base_total;
	uint32_t base_bytes;    /* its packed_len, read back (unspill) */
	bool has_sums;          /* the series' first: its new sp in `sums` */
	struct ing_sums sums;
	/* In place (stage_inplace): node and value stay NULL; the write's
	 * pairs wp[0..nwp) are added at pos[] in the bucket's own arrays. */
	bool inplace;
	uint32_t *pos;
	const struct pair *wp;
	uint32_t nwp;
};

/* Everything a write reserved and has not published. */
struct wstage {
	struct went *e;         /* series with pairs, in write order */
	uint32_t ne;
	struct went **ord;      /* e by (series, bt, k): buckets group */
	struct ing_series **nsr; /* new series, in order of first use */
	uint32_t nnew, nsr_cap;
	struct sm_oatab ntab;   /* nsr indices by fingerprint */
	struct wbkt *bk;
	uint32_t nbk;
	struct pair *pairs;
	struct pair *ptmp;      /* pairs_sort's buffer */
	struct sm_label *ls;
	struct sm_arena *scratch;   /* spilled buckets read back */
	uint32_t *smap;         /* the write's strings -> head frames */
	uint32_t *nmap;         /* the write's nodes -> head nodes (0: root) */
	uint64_t *fhash;        /* the write's strings' sm_hash */
	uint64_t *phash;        /* the write's nodes' path hashes (0: root) */
};

static int
went_cmp(const void *a, const void *b)
{
	const struct went *x = *(struct went *const *)a;
	const struct went *y = *(struct went *const *)b;
	int c;

	if ((c = SM_CMP((uintptr_t)x->s, (uintptr_t)y->s)) != 0 ||
	    (c = SM_CMP(x->bt, y->bt)) != 0)
		return (c);
	return (SM_CMP(x->k, y->k));
}

static void
wstage_fini(struct wstage *st)
{
	for (uint32_t i = 0; i < st->nbk; i++) {
		sm_free(st->bk[i].node);
		sm_free(st->bk[i].value);
		sm_free(st->bk[i].pos);
		sm_free(st->bk[i].sums.p);
	}
	for (uint32_t i = 0; i < st->nnew; i++)
		ing_series_free(st->nsr[i]);
	sm_free(st->nsr);
	sm_oatab_fini(&st->ntab);
	sm_free(st->e);
	sm_free(st->ord);
	sm_free(st->bk);
	sm_free(st->pairs);
	sm_free(st->ptmp);
	sm_free(st->ls);
	sm_arena_destroy(st->scratch);
	sm_free(st->smap);
	sm_free(st->nmap);
	sm_free(st->fhash);
	sm_free(st->phash);
}

/*
 * The series of labels ls[0..n) (fingerprint fp): the head's, one this
 * write staged already, or a new staged one (strings interned, nothing
 * published).  0 or SM_ENOMEM.
 */
static int
stage_series(struct ing_head *h, struct wstage *st,
    const Smolder__V1__SeriesMeta *m, uint32_t n, uint64_t fp,
    struct ing_series **out)
{
	struct sm_oatab_it it;
	struct ing_series *sr;
	uint32_t v;
	int rv;

	if ((*out = ing_set_series_find(&h->set, st->ls, n, fp)) != NULL)
		return (0);
	for (sm_oatab_probe(&st->ntab, fp, &it);
	    (v = sm_oatab_next(&st->ntab, &it)) != SM_OATAB_NONE;) {
		if (st->nsr[v]->fp == fp &&
		    ing_series_labels_equal(st->nsr[v], st->ls, n)) {
			*out = st->nsr[v];
			return (0);
		}
	}
	if ((rv = SM_GROW(st->nsr, st->nsr_cap, st->nnew + 1, 8)) != 0)
		return (rv);
	if ((rv = ing_series_create(&h->set, st->ls, n, fp,
	    m ? m->spy_name : NULL, m ? m->units : NULL,
	    m ? m->aggregation : NULL, m ? m->sample_rate : 0, &sr)) != 0)
		return (rv);
	st->nsr[st->nnew++] = sr;       /* wstage_fini frees it from here */
	if ((rv = sm_oatab_insert(&st->ntab, &it, st->nnew - 1)) != 0)
		return (rv);
	*out = sr;
	return (0);
}

/*
 * A write's pairs p[0..n) added where they are, when its one entry for
 * bucket b finds every node already there and the bucket unpacked (a hot
 * bucket, seal()): then merging would copy the whole bucket into new
 * arrays to add n values.  Sets bk->inplace and the positions, or leaves
 * the bucket to pairs_merge.  Nothing changes until bucket_publish.
 * 0 or SM_ENOMEM.
 */
static int
stage_inplace(const struct ing_bucket *b, const struct pair *p, uint32_t n,
    struct wbkt *bk)
{
	uint32_t lo = 0, *pos;
	int64_t sum = 0;

	if (b->packed != NULL || b->spilled || b->n < n || n == 0)
		return (0);
	if ((pos = sm_malloc((size_t)n * sizeof(*pos))) == NULL)
		return (SM_ENOMEM);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t hi = lo, step = 1;

		/* p[] ascends, so each search gallops on from the last
		 * (a write's nodes are a good part of its hot bucket's: the
		 * gaps are short, and a search over the whole bucket missed
		 * the cache at every step). */
		while (hi < b->n && b->node[hi] < p[k].node) {
			lo = hi + 1;
			hi += step;
			step *= 2;
		}
		if (hi > b->n)
			hi = b->n;
		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;

			if (b->node[mid] < p[k].node)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == b->n || b->node[lo] != p[k].node) {
			sm_free(pos);
			return (0);
		}
		pos[k] = lo++;
		sum = sm_add_sat(sum, p[k].value);
	}
	bk->inplace = true;
	bk->pos = pos;
	bk->wp = p;
	bk->nwp = n;
	bk->n = b->n;
	bk->sum = sum;
	bk->profiles = 1;
	return (0);
}

/*
 * Merge the write's pairs of each (series, bucket) with the bucket's
 * pairs into new arrays (st->bk), or stage them in place (stage_inplace),
 * and make room in every series' bucket array for its new buckets.  0 or SM_ENOMEM (capacities may have grown;
 * nothing else changed).
 */
static int
stage_buckets(struct ing_head *h, struct wstage *st, struct sm_err *err)
{
	uint32_t i, j;
	int rv;

	for (i = 0; i < st->ne; i++)
		st->ord[i] = &st->e[i];
	if (st->ne > 1)
		qsort(st->ord, st->ne, sizeof(*st->ord), went_cmp);
	for (i = 0; i < st->ne; i = j) {
		struct went *e0 = st->ord[i];
		struct ing_series *sr = e0->s;
		struct wbkt *bk = &st->bk[st->nbk++];
		uint32_t pos = bucket_pos(sr, e0->bt);
		struct ing_bucket cur;

		memset(bk, 0, sizeof(*bk));
		bk->s = sr;
		bk->bt = e0->bt;
		bk->fresh = pos == sr->nb || sr->b[pos].t != e0->bt;
		if (!bk->fresh)
			cur = sr->b[pos];       /* read only */
		else if (!ing_sums_get(sr, h->bucket_ms, e0->bt, NULL))
			memset(&cur, 0, sizeof(cur));
		else {
			/* Late data into a spilled bucket: its pairs back
			 * first; it goes back into b[] (head.h, "Spilled
			 * buckets"). */
			const struct ing_bucket *lb;
			uint32_t nlb;

			if (st->scratch == NULL &&
			    (st->scratch = sm_arena_create(0)) == NULL)
				return (sm_err_set(err, SM_ENOMEM, "out of "
				    "memory"));
			if ((rv = ing_head_buckets(h, sr, e0->bt, e0->bt + 1,
			    st->scratch, NULL, &lb, &nlb, err)) != 0)
				return (rv);
			SM_ASSERT(nlb == 1 && lb->t == e0->bt);
			cur = *lb;
			bk->unspill = true;
			bk->base_bytes = lb->packed_len;
			bk->base_profiles = lb->profiles;
			bk->base_total = lb->total;
		}
		j = i + 1;
		if ((j == st->ne || st->ord[j]->s != sr ||
		    st->ord[j]->bt != e0->bt) && !bk->fresh &&
		    (rv = stage_inplace(&cur, st->pairs + e0->off, e0->n,
		    bk)) != 0)
			return (sm_err_set(err, rv, "out of memory"));
		if (bk->inplace)
			continue;
		for (j = i; j < st->ne && st->ord[j]->s == sr &&
		    st->ord[j]->bt == e0->bt; j++) {
			const struct went *e = st->ord[j];
			uint32_t *nn, nout;
			int64_t *nv;

			if ((rv = pairs_merge(&cur, st->pairs + e->off, e->n,
			    &nn, &nv, &nout, &bk->sum)) != 0)
				return (sm_err_set(err, rv, "out of memory"));
			sm_free(bk->node);      /* an earlier group member's */
			sm_free(bk->value);
			bk->node = nn;
			bk->value = nv;
			bk->n = nout;
			bk->profiles++;
			memset(&cur, 0, sizeof(cur));
			cur.n = nout;
			cur.node = nn;
			cur.value = nv;
		}
	}
	/* A series' buckets are adjacent in bk[], by time. */
	for (i = 0; i < st->nbk; i = j) {
		struct ing_series *sr = st->bk[i].s;
		uint32_t nfresh = 0, nun = 0;

		for (j = i; j < st->nbk && st->bk[j].s == sr; j++) {
			nfresh += st->bk[j].fresh;
			nun += st->bk[j].unspill;
		}
		if (nfresh > 0 && (rv = buckets_grow(h, sr,
		    (uint64_t)sr->nb + nfresh)) != 0)
			return (sm_err_set(err, rv, "out of memory"));
		if (nun > 0) {
			/* Its summaries without the ones taken back. */
			int64_t *ts = sm_arena_alloc(st->scratch,
			    (size_t)nun * sizeof(*ts));
			struct wbkt *b0 = &st->bk[i];
			uint64_t bytes = 0;

			if (ts == NULL)
				return (sm_err_set(err, SM_ENOMEM, "out of "
				    "memory"));
			nun = 0;
			for (uint32_t x = i; x < j; x++) {
				if (st->bk[x].unspill) {
					ts[nun++] = st->bk[x].bt;
					bytes += st->bk[x].base_bytes;
				}
			}
			if ((rv = ing_sums_without(sr, h->bucket_ms, ts, nun,
			    bytes, &b0->sums)) != 0)
				return (sm_err_set(err, rv, "out of memory"));
			b0->has_sums = true;
		}
	}
	return (0);
}

/* Publish one staged bucket; cannot fail (its room is reserved). */
static void
bucket_publish(struct ing_head *h, struct wbkt *bk)
{
	struct ing_series *s = bk->s;
	uint32_t lo = bucket_pos(s, bk->bt);
	struct ing_bucket *b;

	if (bk->fresh) {
		SM_ASSERT(s->nb < s->cap);
		memmove(&s->b[lo + 1], &s->b[lo],
		    (size_t)(s->nb - lo) * sizeof(*s->b));
		b = &s->b[lo];
		memset(b, 0, sizeof(*b));
		b->t = bk->bt;
		b->profiles = bk->base_profiles;
		b->total = bk->base_total;
		s->nb++;
		h->set.min_t = SM_MIN(h->set.min_t, bk->bt);
		h->set.max_t = SM_MAX(h->set.max_t, bk->bt);
	} else if (bk->inplace) {
		b = &s->b[lo];
		SM_ASSERT(b->t == bk->bt && b->packed == NULL &&
		    b->n == bk->n);
		for (uint32_t k = 0; k < bk->nwp; k++)
			b->value[bk->pos[k]] = sm_add_sat(b->value[bk->pos[k]],
			    bk->wp[k].value);
	} else {
		b = &s->b[lo];
		SM_ASSERT(b->t == bk->bt);
		h->pair_bytes -= ing_bucket_pair_bytes(b);
		if (b->packed != NULL)
			atomic_fetch_sub_explicit(&h->sealed_bytes,
			    b->packed_len, memory_order_relaxed);
		ing_bucket_pairs_free(b);
	}
	if (bk->has_sums) {
		/* Taken back into b[] (above, or by a later bucket of this
		 * series in bk[]): out of sp. */
		h->sum_bytes = h->sum_bytes - s->sp.cap + bk->sums.cap;
		sm_free(s->sp.p);
		s->sp = bk->sums;
		memset(&bk->sums, 0, sizeof(bk->sums));
	}
	s->wseq++;
	if (!bk->inplace) {
		b->node = bk->node;
		b->value = bk->value;
		b->n = bk->n;
		h->pair_bytes += (uint64_t)bk->n * 12;
		bk->node = NULL;
		bk->value = NULL;
	}
	b->profiles += bk->profiles;
	b->total = sm_add_sat(b->total, bk->sum);
	seal(h, s, lo, !bk->fresh);
}

/* Size the write's scratch in st, before the lock is taken. */
static int
wstage_alloc(struct wstage *st, const Smolder__V1__WriteRequest *req,
    uint32_t nnodes, uint32_t nstr)
{
	size_t npairs_all = 0, nls = 0, ns = SM_MAX(req->n_series, 1);

	for (size_t k = 0; k < req->n_series; k++) {
		npairs_all += req->series[k]->n_node;
		nls = SM_MAX(nls, req->series[k]->n_labels);
	}
	st->smap = sm_malloc((size_t)nstr * sizeof(*st->smap));
	st->nmap = sm_malloc(((size_t)nnodes + 1) * sizeof(*st->nmap));
	st->fhash = sm_malloc(SM_MAX(nstr, 1) * sizeof(*st->fhash));
	st->phash = sm_malloc(((size_t)nnodes + 1) * sizeof(*st->phash));
	st->e = sm_malloc(ns * sizeof(*st->e));
	st->ord = sm_malloc(ns * sizeof(*st->ord));
	st->bk = sm_malloc(ns * sizeof(*st->bk));
	st->pairs = sm_malloc(SM_MAX(npairs_all, 1) * sizeof(*st->pairs));
	st->ptmp = sm_malloc(SM_MAX(npairs_all, 1) * sizeof(*st->ptmp));
	st->ls = sm_malloc(SM_MAX(nls, 1) * sizeof(*st->ls));
	if (st->smap == NULL || st->nmap == NULL || st->fhash == NULL ||
	    st->phash == NULL || st->e == NULL ||
	    st->ord == NULL || st->bk == NULL || st->pairs == NULL ||
	    st->ptmp == NULL || st->ls == NULL)
		return (SM_ENOMEM);
	return (0);
}

/*
 * Reserve the write's frames and tree nodes (head.h, "All or nothing")
 * into st->smap and st->nmap, checking each node; call with h->lock
 * held for writing.
 *
 * The head's tree is indexed by frame path (common/tree.h), so every
 * node's slot is known from the write alone, before any node is mapped:
 * the frames are hashed first, then every node's path, and each probe's
 * slot is loaded ING_MAP_AHEAD nodes before it is needed.  With
 * (parent, name) keys a node's slot waited for its parent's probe, and
 * the write's new stacks arrive as chains of new frames, each probe a
 * cache miss after the one before (sm_tree_child was 9 % of the CPU of
 * B1's decode-and-apply).  The frames are interned the same way, their
 * hashes first.
 */
static int
map_tree(struct ing_head *h, const Smolder__V1__StackTree *rt,
    struct wstage *st, struct sm_err *err)
{
	const uint32_t nnodes = (uint32_t)rt->n_parent;
	const uint32_t nstr = (uint32_t)rt->n_strings;
	uint32_t *smap = st->smap, *nmap = st->nmap;
	uint64_t *fh = st->fhash, *ph = st->phash;
	int rv;

	/* smap[i] holds string i's length until it is interned (a write's
	 * strings are bounded by the message, far below 4 GiB). */
	for (uint32_t i = 0; i < nstr; i++) {
		const char *s = rt->strings[i] != NULL ? rt->strings[i] : "";
		size_t n = strlen(s);

		fh[i] = sm_hash(s, n);
		smap[i] = (uint32_t)n;
	}
	for (uint32_t i = 0; i < nstr; i++) {
		const char *s = rt->strings[i] != NULL ? rt->strings[i] : "";

		if (i + ING_MAP_AHEAD < nstr)
			sm_strtab_prefetch(&h->frames, fh[i + ING_MAP_AHEAD]);
		if ((rv = sm_strtab_intern_hashed(&h->frames, s, smap[i],
		    fh[i], &smap[i])) != 0)
			return (sm_err_set(err, rv, "out of memory"));
	}
	ph[0] = sm_tree_path_root();
	for (uint32_t i = 0; i < nnodes; i++) {
		uint32_t p = rt->parent[i], nm = rt->name[i];

		if (p > i || nm >= nstr)
			return (sm_err_set(err, SM_EMALFORMED, "write: stack "
			    "tree node %u has parent %u / name %u out of "
			    "range", i + 1, p, nm));
		ph[i + 1] = sm_tree_path(ph[p], fh[nm]);
	}
	nmap[0] = 0;
	for (uint32_t i = 0; i < nnodes; i++) {
		if (i + ING_MAP_AHEAD < nnodes)
			sm_tree_prefetch_path(&h->tree,
			    ph[i + 1 + ING_MAP_AHEAD]);
		if ((rv = sm_tree_child_path(&h->tree, nmap[rt->parent[i]],
		    smap[rt->name[i]], ph[i + 1], &nmap[i + 1])) != 0)
			return (sm_err_set(err, rv, "out of memory"));
	}
	return (0);
}

/* Check series k's pairs and put them on head nodes (nmap) in pairs[],
 * in the write's order; *np is their count. */
static int
series_pairs(const Smolder__V1__SeriesWrite *w, size_t k, uint32_t nnodes,
    const uint32_t *nmap, struct pair *pairs, uint32_t *np,
    struct sm_err *err)
{
	uint32_t n;

	if (w->n_node != w->n_value)
		return (sm_err_set(err, SM_EMALFORMED, "write: series %zu "
		    "has %zu nodes and %zu values", k, w->n_node, w->n_value));
	n = (uint32_t)w->n_node;
	for (uint32_t j = 0; j < n; j++) {
		if (w->node[j] == 0 || w->node[j] > nnodes ||
		    w->value[j] == 0 ||
		    (j > 0 && w->node[j] <= w->node[j - 1]))
			return (sm_err_set(err, SM_EMALFORMED, "write: series "
			    "%zu pair %u is invalid", k, j));
		pairs[j].node = nmap[w->node[j]];
		pairs[j].value = w->value[j];
	}
	*np = n;
	return (0);
}

/*
 * Sum the sorted pairs p[0..n) that share a node; returns how many are
 * left.  Two nodes of the write's tree can be the same head node (a tree
 * that repeats a child: same parent, same name), and a bucket's nodes are
 * strictly increasing.  Kept apart, they were cut into a block its reader
 * rejects as corrupt ("node out of order", found by fuzz_rpc).
 */
static uint32_t
pairs_sum_repeats(struct pair *p, uint32_t n)
{
	uint32_t w2 = 0;

	for (uint32_t j = 0; j < n; j++) {
		if (w2 > 0 && p[w2 - 1].node == p[j].node)
			p[w2 - 1].value = sm_add_sat(p[w2 - 1].value,
			    p[j].value);
		else
			p[w2++] = p[j];
	}
	return (w2);
}

/* Stage each series of the write that has pairs (st->e): its pairs on
 * head nodes and its series, the head's or a new one; *nspans counts
 * their spans.  Call with h->lock held for writing. */
static int
stage_writes(struct ing_head *h, const Smolder__V1__WriteRequest *req,
    struct wstage *st, size_t *nspans, struct sm_err *err)
{
	const uint32_t nnodes = (uint32_t)req->tree->n_parent;
	uint32_t off = 0;
	int rv;

	for (size_t k = 0; k < req->n_series; k++) {
		const Smolder__V1__SeriesWrite *w = req->series[k];
		struct pair *pairs = st->pairs + off;
		struct went *e;
		uint32_t n = 0;

		if ((rv = series_pairs(w, k, nnodes, st->nmap, pairs, &n,
		    err)) != 0 ||
		    (rv = ing_head_spans_check(w, k, nnodes, err)) != 0)
			return (rv);
		if (n == 0)
			continue;
		pairs_sort(pairs, n, st->ptmp);
		n = pairs_sum_repeats(pairs, n);
		if ((rv = write_labels(w, st->ls, err)) != 0)
			return (rv);
		e = &st->e[st->ne++];
		e->w = w;
		e->fp = sm_labels_fingerprint(st->ls, (uint32_t)w->n_labels);
		e->bt = sm_floor_to(w->time_ms, h->bucket_ms);
		e->k = (uint32_t)k;
		e->off = off;
		e->n = n;
		off += (uint32_t)w->n_node;
		*nspans += w->n_span_id;
		if ((rv = stage_series(h, st, w->meta, (uint32_t)w->n_labels,
		    e->fp, &e->s)) != 0)
			return (sm_err_set(err, rv, "out of memory"));
	}
	return (0);
}

/* Merge the staged buckets' pairs and make room for every record the
 * write will publish; call with h->lock held for writing. */
static int
write_reserve(struct ing_head *h, struct wstage *st, size_t nspans,
    bool with_id, struct sm_err *err)
{
	int rv;

	if ((rv = stage_buckets(h, st, err)) != 0)
		return (rv);
	if ((nspans > 0 && (rv = SM_GROW(h->spans.v, h->spans.cap,
	    (size_t)h->spans.n + nspans, 64)) != 0) ||
	    (with_id && st->ne > 0 && (rv = SM_GROW(h->profs.v, h->profs.cap,
	    (size_t)h->profs.n + st->ne, 64)) != 0) ||
	    (rv = ing_set_reserve(&h->set, st->nsr, st->nnew)) != 0)
		return (sm_err_set(err, rv, "out of memory"));
	return (0);
}

/* Publish what write_reserve made room for: cannot fail.  Call with
 * h->lock held for writing. */
static void
write_publish(struct ing_head *h, const Smolder__V1__WriteRequest *req,
    struct wstage *st, bool with_id, uint32_t *nseries, uint32_t *npairs)
{
	int rv;

	for (uint32_t i = 0; i < st->nnew; i++) {
		rv = ing_set_append(&h->set, st->nsr[i]);
		SM_ASSERT(rv == 0);
	}
	st->nnew = 0;                   /* the set owns them */
	for (uint32_t i = 0; i < st->nbk; i++)
		bucket_publish(h, &st->bk[i]);
	for (uint32_t i = 0; i < st->ne; i++) {
		const struct went *e = &st->e[i];
		const Smolder__V1__SeriesWrite *w = e->w;

		for (size_t x = 0; x < w->n_span_id; x++) {
			rv = ing_spans_add(&h->spans, w->span_id[x], e->fp,
			    e->bt, st->nmap[w->span_node[x]],
			    w->span_value[x]);
			SM_ASSERT(rv == 0);
		}
		if (with_id) {
			int64_t total = 0;

			for (uint32_t j = 0; j < e->n; j++)
				total = sm_add_sat(total,
				    st->pairs[e->off + j].value);
			rv = ing_profs_add(&h->profs, e->fp, w->time_ms,
			    req->profile_id.data, total);
			SM_ASSERT(rv == 0);
		}
		(*nseries)++;
		*npairs += e->n;
	}
}

int
ing_head_write(struct ing_head *h, const Smolder__V1__WriteRequest *req,
    uint32_t max_series, uint32_t *nseries, uint32_t *npairs,
    struct sm_err *err)
{
	const Smolder__V1__StackTree *rt = req->tree;
	const bool with_id = req->profile_id.len == 16;
	size_t nspans = 0;
	struct wstage st;
	int rv;

	*nseries = *npairs = 0;
	memset(&st, 0, sizeof(st));
	sm_oatab_init(&st.ntab, 16);
	if (rt == NULL || rt->n_parent != rt->n_name || rt->n_strings == 0)
		return (sm_err_set(err, SM_EMALFORMED, "write: bad stack tree"));
	if (wstage_alloc(&st, req, (uint32_t)rt->n_parent,
	    (uint32_t)rt->n_strings) != 0) {
		wstage_fini(&st);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}

	/* Queries reading many series give the lock up while we wait
	 * (set.h, Yielding). */
	atomic_fetch_add(&h->lock_waiting, 1);
	pthread_rwlock_wrlock(&h->lock);
	atomic_fetch_sub(&h->lock_waiting, 1);
	/* The limit before anything is applied: a refused write leaves no
	 * trace. */
	if ((rv = series_limit_check(h, req, max_series, err)) != 0 ||
	    (rv = map_tree(h, rt, &st, err)) != 0 ||
	    (rv = stage_writes(h, req, &st, &nspans, err)) != 0 ||
	    (rv = write_reserve(h, &st, nspans, with_id, err)) != 0)
		goto out;
	write_publish(h, req, &st, with_id, nseries, npairs);
	h->writes++;
out:
	/* Staged series of a failed write are freed with their room. */
	for (uint32_t i = 0; i < st.nnew; i++)
		h->bucket_slots -= st.nsr[i]->cap;
	atomic_store(&h->nseries, h->set.nseries);
	pthread_rwlock_unlock(&h->lock);
	wstage_fini(&st);
	return (rv);
}

/* --- encoder input ---------------------------------------------------------- */

/* The encoder input's state: spilled buckets are read back into `a`,
 * through one iterator for the whole cut. */
struct head_src {
	struct ing_head *h;
	struct sm_arena *a;
	struct ing_spill_cur cur;
	struct ing_series copy;
};

static int
head_src_series(void *arg, uint32_t k, const struct ing_series **out,
    struct sm_err *err)
{
	struct head_src *x = arg;
	const struct ing_series *sr;
	const struct ing_bucket *b;
	uint32_t n;
	int rv;

	SM_ASSERT(k < x->h->set.nseries);
	sr = x->h->set.series[k];
	sm_arena_reset(x->a);
	if ((rv = ing_head_buckets(x->h, sr, INT64_MIN, INT64_MAX, x->a,
	    &x->cur, &b, &n, err)) != 0)
		return (rv);
	if (b == sr->b && n == sr->nb) {
		*out = sr;
		return (0);
	}
	x->copy = *sr;
	x->copy.b = (struct ing_bucket *)b;
	x->copy.nb = x->copy.cap = n;
	memset(&x->copy.sp, 0, sizeof(x->copy.sp));
	*out = &x->copy;
	return (0);
}

int
ing_head_block_src(struct ing_head *h, struct ing_block_src *src,
    struct sm_err *err)
{
	struct ing_span_rec *sp = NULL;
	struct ing_prof_rec *pr = NULL;
	uint32_t nsp = 0, npr = 0;
	struct head_src *x;
	int rv;

	memset(src, 0, sizeof(*src));
	if ((x = sm_calloc(1, sizeof(*x))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	x->h = h;
	if ((x->a = sm_arena_create(0)) == NULL ||
	    ing_spans_sorted(&h->spans, &sp, &nsp) != 0)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	else
		rv = ing_head_profs(h, true, &pr, &npr, err);
	if (rv != 0) {
		sm_arena_destroy(x->a);
		sm_free(x);
		sm_free(sp);
		return (rv);
	}
	src->gen = h->gen;
	src->bucket_ms = h->bucket_ms;
	src->min_t = h->set.min_t;
	src->max_t = h->set.max_t;
	src->frames = &h->frames;
	src->tree = &h->tree;
	src->lstr = &h->set.lstr;
	src->nseries = h->set.nseries;
	src->series = head_src_series;
	src->arg = x;
	src->spans = sp;
	src->nspans = nsp;
	src->profs = pr;
	src->nprofs = npr;
	return (0);
}

void
ing_head_block_src_fini(struct ing_block_src *src)
{
	struct head_src *x = src->arg;

	if (x != NULL) {
		ing_spill_cur_fini(&x->cur);
		sm_arena_destroy(x->a);
		sm_free(x);
	}
	sm_free((void *)src->spans);
	sm_free((void *)src->profs);
	memset(src, 0, sizeof(*src));
}
