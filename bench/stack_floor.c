/*
 * stack_floor.c -- the least work any ingest that keys stacks by their
 * content (one probe per distinct stack, docs/benchmarks.md "What twice
 * the decode floor needs") must still do per upload, one thread: a
 * measuring stick for how high such a design could take B1, not product
 * code.
 *
 *   stack_floor [-t seconds] -l listfile
 *
 * The files (gzipped pprof, as B1 sends them) are read into memory, then
 * for -t seconds (default 5), round robin, each is:
 *   1. inflated (libdeflate, into one buffer, as decode_floor -g);
 *   2. read once, field by field: the string table's offsets, functions'
 *      (id, name), locations' (id, line function ids), and where each
 *      sample is -- growable arrays kept across files, so nothing is
 *      allocated once they are warm;
 *   3. hashed: each function's name (XXH3), each location as the fold of
 *      its lines' function hashes, through direct id maps;
 *   4. per sample: its location ids and values read, each string label's
 *      (key, value) folded into a label hash, the stack's 128-bit hash
 *      folded from its location hashes, and one probe of a table that
 *      persists across files (the per-tenant stack table such a design
 *      keeps), adding the sample's values to the stack's sums.
 * Not done, and so not counted: UTF-8 checks, naming rules, the id
 * checks a decoder of network input owes, series and their labels, the
 * head's buckets, the head log, HTTP.  So this is below what such a
 * design costs; B1's files repeat their stacks (corpus_gen keeps 70 % of
 * a seed's samples per step, and the list is posted round robin), so
 * after the first round every probe hits.
 *
 * Prints profiles/s, microseconds per profile, the stack table's size and
 * the share of probes that found a stack.
 */
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "common/hash.h"
#include "common/varint.h"

#define OUT_CAP (64u << 20)

struct strref {
	uint32_t off, len;
};

struct fn {
	uint64_t id, name;     /* name: string index */
};

struct loc {
	uint64_t id;
	uint32_t line_off, nlines;
};

/* A growable array of fixed-size items, kept across files. */
struct vec {
	void *p;
	size_t n, cap, size;
};

static void *
vec_push(struct vec *v)
{
	if (v->n == v->cap) {
		v->cap = v->cap ? 2 * v->cap : 1024;
		v->p = bench_xrealloc(v->p, v->cap * v->size);
	}
	return ((char *)v->p + v->n++ * v->size);
}

/* The persistent stack table: 128-bit keys, sums of up to 4 values. */
struct stack_tab {
	uint64_t *k1, *k2;
	int64_t *sum;          /* 4 per slot */
	size_t cap, n;
	uint64_t probes, hits;
};

static void stack_put(struct stack_tab *t, uint64_t a, uint64_t b,
    const int64_t *v, uint32_t nv);

static void
stack_grow(struct stack_tab *t)
{
	struct stack_tab old = *t;

	t->cap = old.cap ? 2 * old.cap : 1u << 16;
	t->k1 = calloc(t->cap, sizeof(*t->k1));
	t->k2 = calloc(t->cap, sizeof(*t->k2));
	t->sum = calloc(t->cap * 4, sizeof(*t->sum));
	if (t->k1 == NULL || t->k2 == NULL || t->sum == NULL) {
		fprintf(stderr, "out of memory\n");
		exit(3);
	}
	t->n = 0;
	for (size_t i = 0; i < old.cap; i++)
		if (old.k1[i] != 0 || old.k2[i] != 0)
			stack_put(t, old.k1[i], old.k2[i], old.sum + 4 * i, 4);
	free(old.k1);
	free(old.k2);
	free(old.sum);
}

static void
stack_put(struct stack_tab *t, uint64_t a, uint64_t b, const int64_t *v,
    uint32_t nv)
{
	size_t i;

	if ((t->n + 1) * 2 > t->cap)
		stack_grow(t);
	t->probes++;
	for (i = a & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
		if (t->k1[i] == a && t->k2[i] == b) {
			t->hits++;
			break;
		}
		if (t->k1[i] == 0 && t->k2[i] == 0) {
			t->k1[i] = a;
			t->k2[i] = b;
			t->n++;
			break;
		}
	}
	for (uint32_t k = 0; k < nv && k < 4; k++)
		t->sum[4 * i + k] += v[k];
}

struct floor_state {
	struct vec str, fns, locs, lines, samples;
	uint64_t *fhash, *lhash;          /* by index */
	uint32_t *fmap, *lmap;            /* id -> index + 1 */
	size_t fhash_cap, lhash_cap, fmap_cap, lmap_cap;
	uint64_t *sloc;                   /* one sample's location ids */
	size_t sloc_cap;
	struct stack_tab tab;
};

static void
grow_u64(uint64_t **p, size_t *cap, size_t need)
{
	if (need > *cap) {
		*cap = need * 2;
		*p = bench_xrealloc(*p, *cap * sizeof(**p));
	}
}

static void
grow_u32z(uint32_t **p, size_t *cap, size_t need)
{
	if (need > *cap) {
		*cap = need * 2;
		*p = bench_xrealloc(*p, *cap * sizeof(**p));
	}
	memset(*p, 0, need * sizeof(**p));
}

/* Skip a field of wire type wt at *p; -1 on bad input. */
static int
skip_field(const uint8_t **p, const uint8_t *end, unsigned wt)
{
	uint64_t v;

	switch (wt) {
	case 0:
		return (sm_uvarint_get(p, end, &v) == 0 ? 0 : -1);
	case 1:
		if (end - *p < 8)
			return (-1);
		*p += 8;
		return (0);
	case 2:
		if (sm_uvarint_get(p, end, &v) != 0 || v > (uint64_t)(end -
		    *p))
			return (-1);
		*p += v;
		return (0);
	case 5:
		if (end - *p < 4)
			return (-1);
		*p += 4;
		return (0);
	}
	return (-1);
}

static int
one_profile(struct floor_state *s, const uint8_t *b, size_t len)
{
	const uint8_t *p = b, *end = b + len;
	uint64_t maxf = 0, maxl = 0;

	s->str.n = s->fns.n = s->locs.n = s->lines.n = s->samples.n = 0;
	/* 2. one read of the top level */
	while (p < end) {
		uint64_t key, n;
		const uint8_t *m, *me;

		if (sm_uvarint_get(&p, end, &key) != 0)
			return (-1);
		if ((key & 7) != 2 || (key >> 3) < 2 || (key >> 3) > 6) {
			if (skip_field(&p, end, (unsigned)(key & 7)) != 0)
				return (-1);
			continue;
		}
		if (sm_uvarint_get(&p, end, &n) != 0 || n > (uint64_t)(end - p))
			return (-1);
		m = p;
		me = p + n;
		p = me;
		switch (key >> 3) {
		case 2: {       /* Sample: where it is */
			struct strref *r = vec_push(&s->samples);

			r->off = (uint32_t)(m - b);
			r->len = (uint32_t)n;
			break;
		}
		case 4: {       /* Location */
			struct loc *l = vec_push(&s->locs);

			l->id = 0;
			l->line_off = (uint32_t)s->lines.n;
			l->nlines = 0;
			while (m < me) {
				uint64_t k, v;

				if (sm_uvarint_get(&m, me, &k) != 0)
					return (-1);
				if ((k >> 3) == 1 && (k & 7) == 0) {
					if (sm_uvarint_get(&m, me, &l->id) != 0)
						return (-1);
				} else if ((k >> 3) == 4 && (k & 7) == 2) {
					const uint8_t *q, *qe;

					if (sm_uvarint_get(&m, me, &v) != 0 ||
					    v > (uint64_t)(me - m))
						return (-1);
					q = m;
					qe = m + v;
					m = qe;
					while (q < qe) {
						uint64_t lk, fid;

						if (sm_uvarint_get(&q, qe, &lk) !=
						    0)
							return (-1);
						if (lk == (1 << 3)) {
							if (sm_uvarint_get(&q, qe,
							    &fid) != 0)
								return (-1);
							*(uint64_t *)vec_push(
							    &s->lines) = fid;
							l->nlines++;
						} else if (skip_field(&q, qe,
						    (unsigned)(lk & 7)) != 0) {
							return (-1);
						}
					}
				} else if (skip_field(&m, me, (unsigned)(k & 7)) !=
				    0) {
					return (-1);
				}
			}
			if (l->id > maxl)
				maxl = l->id;
			break;
		}
		case 5: {       /* Function */
			struct fn *f = vec_push(&s->fns);

			f->id = f->name = 0;
			while (m < me) {
				uint64_t k;

				if (sm_uvarint_get(&m, me, &k) != 0)
					return (-1);
				if (k == (1 << 3)) {
					if (sm_uvarint_get(&m, me, &f->id) != 0)
						return (-1);
				} else if (k == (2 << 3)) {
					if (sm_uvarint_get(&m, me, &f->name) !=
					    0)
						return (-1);
				} else if (skip_field(&m, me, (unsigned)(k & 7)) !=
				    0) {
					return (-1);
				}
			}
			if (f->id > maxf)
				maxf = f->id;
			break;
		}
		case 6: {       /* string */
			struct strref *r = vec_push(&s->str);

			r->off = (uint32_t)(m - b);
			r->len = (uint32_t)n;
			break;
		}
		default:
			break;
		}
	}
	/* 3. hashes, through direct id maps (B1's ids are dense) */
	if (maxf > 4 * s->fns.n + 16 || maxl > 4 * s->locs.n + 16)
		return (-1);
	grow_u64(&s->fhash, &s->fhash_cap, s->fns.n + 1);
	grow_u64(&s->lhash, &s->lhash_cap, s->locs.n + 1);
	grow_u32z(&s->fmap, &s->fmap_cap, maxf + 1);
	grow_u32z(&s->lmap, &s->lmap_cap, maxl + 1);
	for (size_t i = 0; i < s->fns.n; i++) {
		const struct fn *f = (const struct fn *)s->fns.p + i;
		const struct strref *r = (const struct strref *)s->str.p +
		    (f->name < s->str.n ? f->name : 0);

		s->fhash[i] = s->str.n > 0 ? sm_hash(b + r->off, r->len) : 0;
		s->fmap[f->id] = (uint32_t)i + 1;
	}
	for (size_t i = 0; i < s->locs.n; i++) {
		const struct loc *l = (const struct loc *)s->locs.p + i;
		const uint64_t *ln = (const uint64_t *)s->lines.p + l->line_off;
		uint64_t h = 0x9E3779B97F4A7C15ull;

		for (uint32_t k = 0; k < l->nlines; k++) {
			uint32_t fi = ln[k] <= maxf ? s->fmap[ln[k]] : 0;

			h = (h ^ (fi ? s->fhash[fi - 1] : 0)) *
			    0xff51afd7ed558ccdull;
		}
		s->lhash[i] = h;
		s->lmap[l->id] = (uint32_t)i + 1;
	}
	/* 4. samples */
	for (size_t i = 0; i < s->samples.n; i++) {
		const struct strref *r = (const struct strref *)s->samples.p +
		    i;
		const uint8_t *m = b + r->off, *me = m + r->len;
		uint64_t h1 = 0x243F6A8885A308D3ull, h2 = 0x13198A2E03707344ull;
		uint64_t lab = 0;
		int64_t vals[4] = { 0, 0, 0, 0 };
		uint32_t nv = 0;

		while (m < me) {
			uint64_t k, v;

			if (sm_uvarint_get(&m, me, &k) != 0)
				return (-1);
			if (k == ((1 << 3) | 2) || k == ((2 << 3) | 2)) {
				const uint8_t *q, *qe;
				int ids = (k >> 3) == 1;

				if (sm_uvarint_get(&m, me, &v) != 0 ||
				    v > (uint64_t)(me - m))
					return (-1);
				q = m;
				qe = m + v;
				m = qe;
				while (q < qe) {
					uint64_t x;

					if (sm_uvarint_get(&q, qe, &x) != 0)
						return (-1);
					if (ids) {
						uint64_t lh = x <= maxl &&
						    s->lmap[x] ? s->lhash[
						    s->lmap[x] - 1] : 0;

						h1 = (h1 ^ lh) *
						    0x9E3779B97F4A7C15ull;
						h2 = ((h2 << 23 | h2 >> 41) ^
						    lh) * 0xC2B2AE3D27D4EB4Full;
					} else if (nv < 4) {
						vals[nv++] = (int64_t)x;
					}
				}
			} else if (k == ((3 << 3) | 2)) {
				/* Label: key and str string indices */
				const uint8_t *q, *qe;
				uint64_t lk = 0, ls = 0;

				if (sm_uvarint_get(&m, me, &v) != 0 ||
				    v > (uint64_t)(me - m))
					return (-1);
				q = m;
				qe = m + v;
				m = qe;
				while (q < qe) {
					uint64_t f, x;

					if (sm_uvarint_get(&q, qe, &f) != 0)
						return (-1);
					if ((f & 7) != 0) {
						if (skip_field(&q, qe,
						    (unsigned)(f & 7)) != 0)
							return (-1);
						continue;
					}
					if (sm_uvarint_get(&q, qe, &x) != 0)
						return (-1);
					if ((f >> 3) == 1)
						lk = x;
					else if ((f >> 3) == 2)
						ls = x;
				}
				if (ls != 0)
					lab += sm_hash_u64(lk << 32 ^ ls);
			} else if (skip_field(&m, me, (unsigned)(k & 7)) != 0) {
				return (-1);
			}
		}
		stack_put(&s->tab, h1 ^ lab, h2 | 1, vals, nv);
	}
	return (0);
}

int
main(int argc, char **argv)
{
	struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
	struct floor_state s;
	unsigned char **files, *out = malloc(OUT_CAP);
	char **paths = NULL;
	size_t *lens, npaths = 0, profiles = 0;
	double secs = 5, t0, t;

	memset(&s, 0, sizeof(s));
	s.str.size = sizeof(struct strref);
	s.samples.size = sizeof(struct strref);
	s.fns.size = sizeof(struct fn);
	s.locs.size = sizeof(struct loc);
	s.lines.size = sizeof(uint64_t);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "-t") == 0)
			secs = atof(argv[i + 1]);
		else if (strcmp(argv[i], "-l") == 0 &&
		    bench_read_list(argv[i + 1], &paths, &npaths) != 0)
			return (1);
	}
	if (npaths == 0 || d == NULL || out == NULL) {
		fprintf(stderr, "usage: stack_floor [-t seconds] -l list\n");
		return (2);
	}
	files = calloc(npaths, sizeof(*files));
	lens = calloc(npaths, sizeof(*lens));
	for (size_t k = 0; k < npaths; k++) {
		size_t cap = 0;

		if (bench_read_file(paths[k], &files[k], &cap) < 0) {
			fprintf(stderr, "cannot read %s\n", paths[k]);
			return (1);
		}
		lens[k] = cap;
	}
	t0 = bench_now_s();
	do {
		for (size_t k = 0; k < npaths; k++) {
			size_t rawlen;

			if (libdeflate_gzip_decompress(d, files[k], lens[k], out,
			    OUT_CAP, &rawlen) != LIBDEFLATE_SUCCESS ||
			    one_profile(&s, out, rawlen) != 0) {
				fprintf(stderr, "%s: cannot read\n", paths[k]);
				return (1);
			}
			profiles++;
		}
		t = bench_now_s() - t0;
	} while (t < secs);
	printf("stack_floor profiles=%zu seconds=%.3f profiles_per_s=%.1f "
	    "us_per_profile=%.1f stacks=%zu hit_ratio=%.4f\n", profiles, t,
	    profiles / t, t / (double)profiles * 1e6, s.tab.n,
	    s.tab.probes ? (double)s.tab.hits / (double)s.tab.probes : 0);
	libdeflate_free_decompressor(d);
	return (0);
}
