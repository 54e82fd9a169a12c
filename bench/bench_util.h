/*
 * bench_util.h -- small helpers shared by the benchmark tools in bench/
 * (measuring sticks, not product code): a monotonic clock, whole-file
 * reads, file lists, gzip detection and a u64 -> u32 open-addressing map.
 *
 * Header-only (static functions) so each tool stays one .c file; the
 * tools are built with the project's warnings (SM_WARN).
 */
#ifndef SM_BENCH_UTIL_H
#define SM_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/hash.h"

static inline double
bench_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
}

static inline void *
bench_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(3);
	}
	return (p);
}

static inline void *
bench_xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(3);
	}
	return (p);
}

/*
 * Read a whole file into *bufp (grown with realloc as needed, capacity in
 * *capp).  Returns the length, or -1 with errno set.  Ownership: the
 * buffer stays the caller's.
 */
static inline long
bench_read_file(const char *path, unsigned char **bufp, size_t *capp)
{
	FILE *f = fopen(path, "rb");
	size_t have = 0;

	if (f == NULL)
		return (-1);
	for (;;) {
		size_t r;

		if (*capp - have < 65536) {
			*capp = *capp ? *capp * 2 : 1u << 20;
			*bufp = bench_xrealloc(*bufp, *capp);
		}
		r = fread(*bufp + have, 1, *capp - have, f);
		have += r;
		if (r == 0)
			break;
	}
	if (ferror(f)) {
		fclose(f);
		return (-1);
	}
	fclose(f);
	return ((long)have);
}

/*
 * Append the paths listed one per line in `listfile` to the growable
 * array *pathsp (count in *np).  Returns 0, or -1 when the list cannot be
 * read (said on stderr: the callers only exit).
 */
static inline int
bench_read_list(const char *listfile, char ***pathsp, size_t *np)
{
	FILE *f = fopen(listfile, "r");
	char line[4096];
	size_t cap = *np;

	if (f == NULL) {
		fprintf(stderr, "cannot read %s\n", listfile);
		return (-1);
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t l = strcspn(line, "\r\n");

		if (l == 0)
			continue;
		line[l] = '\0';
		if (*np == cap) {
			cap = cap ? cap * 2 : 1024;
			*pathsp = bench_xrealloc(*pathsp, cap * sizeof(char *));
		}
		(*pathsp)[(*np)++] = strdup(line);
	}
	fclose(f);
	return (0);
}

static inline int
bench_is_gzip(const unsigned char *b, size_t n)
{
	return (n > 2 && b[0] == 0x1f && b[1] == 0x8b);
}

/* The ISIZE trailer of a gzip member: the uncompressed size mod 2^32. */
static inline size_t
bench_gzip_isize(const unsigned char *b, size_t n)
{
	if (n < 18)
		return (0);
	return ((size_t)b[n - 4] | (size_t)b[n - 3] << 8 |
	    (size_t)b[n - 2] << 16 | (size_t)b[n - 1] << 24);
}

/* splitmix64: the deterministic generator every variant is drawn from. */
static inline uint64_t
bench_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (z ^ (z >> 31));
}

/* Uniform in [0, 1). */
static inline double
bench_uniform(uint64_t *s)
{
	return ((double)(bench_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0));
}

/*
 * u64 -> u32 map, open addressing with linear probing.  Key 0 is allowed
 * (tracked separately: pprof ids are >= 1 but be safe).  Not shrinkable;
 * bench_map_clear() keeps the memory for the next profile.
 */
struct bench_map {
	uint64_t *keys;
	uint32_t *vals;
	size_t cap, n;		/* cap is a power of two */
	int has_zero;
	uint32_t zero_val;
};

static inline void
bench_map_clear(struct bench_map *m)
{
	if (m->keys != NULL)
		memset(m->keys, 0, m->cap * sizeof(*m->keys));
	m->n = 0;
	m->has_zero = 0;
}

static inline void
bench_map_free(struct bench_map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

static inline void bench_map_put(struct bench_map *, uint64_t, uint32_t);

static inline void
bench_map_grow(struct bench_map *m)
{
	struct bench_map old = *m;

	m->cap = old.cap ? old.cap * 2 : 1024;
	m->keys = calloc(m->cap, sizeof(*m->keys));
	m->vals = bench_xmalloc(m->cap * sizeof(*m->vals));
	if (m->keys == NULL) {
		fprintf(stderr, "out of memory\n");
		exit(3);
	}
	m->n = 0;
	for (size_t i = 0; i < old.cap; i++)
		if (old.keys[i] != 0)
			bench_map_put(m, old.keys[i], old.vals[i]);
	free(old.keys);
	free(old.vals);
}

static inline void
bench_map_put(struct bench_map *m, uint64_t k, uint32_t v)
{
	size_t i;

	if (k == 0) {
		m->has_zero = 1;
		m->zero_val = v;
		return;
	}
	if ((m->n + 1) * 2 > m->cap)
		bench_map_grow(m);
	for (i = sm_hash_u64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == k) {
			m->vals[i] = v;
			return;
		}
		if (m->keys[i] == 0) {
			m->keys[i] = k;
			m->vals[i] = v;
			m->n++;
			return;
		}
	}
}

/* Returns 1 and sets *v when k is present. */
static inline int
bench_map_get(const struct bench_map *m, uint64_t k, uint32_t *v)
{
	if (k == 0) {
		if (m->has_zero)
			*v = m->zero_val;
		return (m->has_zero);
	}
	if (m->cap == 0)
		return (0);
	for (size_t i = sm_hash_u64(k) & (m->cap - 1);;
	    i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == k) {
			*v = m->vals[i];
			return (1);
		}
		if (m->keys[i] == 0)
			return (0);
	}
}

#endif /* SM_BENCH_UTIL_H */
