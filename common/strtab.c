/*
 * strtab.c -- see strtab.h.
 */
#include "strtab.h"

#include <stdbool.h>
#include <string.h>

#include "hash.h"

/*
 * Chunks grow from STRTAB_CHUNK_MIN, doubling, to STRTAB_CHUNK: a table
 * of a few strings (a head of one tiny profile: 10,000 tenants' heads
 * hold two tables each) costs a few hundred bytes, not 64 KiB, and a
 * large one still appends into 64 KiB chunks.  A string over a quarter of
 * the largest chunk gets a chunk of its own.
 */
#define STRTAB_CHUNK (64u * 1024u)
#define STRTAB_CHUNK_MIN 256u

/* Copy bytes into chunk storage; returns the NUL-terminated copy. */
static char *
strtab_store(struct sm_strtab *t, const char *s, size_t n)
{
	char *p;

	if (t->chunk_size - t->chunk_used < n + 1) {
		bool own = n + 1 > STRTAB_CHUNK / 4;
		size_t sz = t->fill == NULL ? STRTAB_CHUNK_MIN :
		    SM_MIN(2 * t->chunk_size, STRTAB_CHUNK);
		char *c;

		while (!own && sz < n + 1)
			sz *= 2;
		if (own)
			sz = n + 1;

		if (t->nchunks == t->chunks_cap) {
			uint32_t ncap = t->chunks_cap ? t->chunks_cap * 2 : 16;
			char **nc = sm_reallocarray(t->chunks, ncap,
			    sizeof(*nc));

			if (nc == NULL)
				return (NULL);
			t->chunks = nc;
			t->chunks_cap = ncap;
		}
		c = sm_malloc(sz);
		if (c == NULL)
			return (NULL);
		t->chunks[t->nchunks++] = c;
		if (own) {
			/* Dedicated chunk: keep filling the current one. */
			memcpy(c, s, n);
			c[n] = '\0';
			t->bytes += sz;
			return (c);
		}
		t->fill = c;
		t->chunk_used = 0;
		t->chunk_size = sz;
		t->bytes += sz;
	}
	p = t->fill + t->chunk_used;
	memcpy(p, s, n);
	p[n] = '\0';
	t->chunk_used += n + 1;
	return (p);
}

int
sm_strtab_init(struct sm_strtab *t)
{
	uint32_t id;
	int rv;

	memset(t, 0, sizeof(*t));
	sm_oatab_init(&t->tab, 64);
	/* A failed init must not leave the slots or chunks behind. */
	if ((rv = sm_strtab_intern(t, "", 0, &id)) != 0)
		sm_strtab_fini(t);
	return (rv);
}

void
sm_strtab_fini(struct sm_strtab *t)
{
	for (uint32_t i = 0; i < t->nchunks; i++)
		sm_free(t->chunks[i]);
	sm_free(t->chunks);
	sm_oatab_fini(&t->tab);
	sm_free(t->strs);
	memset(t, 0, sizeof(*t));
}

/* The id of s[0..n) under hash h, or SM_OATAB_NONE with `it` at its slot. */
static inline uint32_t
strtab_lookup(const struct sm_strtab *t, const char *s, size_t n, uint64_t h,
    struct sm_oatab_it *it)
{
	uint32_t v;

	for (sm_oatab_probe(&t->tab, h, it);
	    (v = sm_oatab_next(&t->tab, it)) != SM_OATAB_NONE;) {
		const struct sm_str *e = &t->strs[v];

		if (e->len == n && memcmp(e->p, s, n) == 0)
			return (v);
	}
	return (SM_OATAB_NONE);
}

int
sm_strtab_find(const struct sm_strtab *t, const char *s, size_t n,
    uint32_t *id)
{
	struct sm_oatab_it it;
	uint32_t v;

	if (t->tab.n == 0 || n > UINT32_MAX)
		return (SM_ENOTFOUND);
	if ((v = strtab_lookup(t, s, n, sm_hash(s, n), &it)) == SM_OATAB_NONE)
		return (SM_ENOTFOUND);
	*id = v;
	return (0);
}

int
sm_strtab_reserve(struct sm_strtab *t, uint32_t n)
{
	struct sm_str *ns;

	if (sm_oatab_reserve(&t->tab, n) != 0)
		return (SM_ENOMEM);
	if (n <= t->cap)
		return (0);
	if ((ns = sm_reallocarray(t->strs, n, sizeof(*ns))) == NULL)
		return (SM_ENOMEM);
	t->strs = ns;
	t->cap = n;
	return (0);
}

int
sm_strtab_intern(struct sm_strtab *t, const char *s, size_t n, uint32_t *id)
{
	return (sm_strtab_intern_hashed(t, s, n, sm_hash(s, n), id));
}

int
sm_strtab_intern_hashed(struct sm_strtab *t, const char *s, size_t n,
    uint64_t h, uint32_t *id)
{
	struct sm_oatab_it it;
	uint32_t v;
	char *p;

	if (n > (1u << 31))
		return (SM_ETOOBIG);
	/* Room first: once the string is stored, inserting cannot fail. */
	if (sm_oatab_reserve(&t->tab, t->n + 1) != 0)
		return (SM_ENOMEM);
	if ((v = strtab_lookup(t, s, n, h, &it)) != SM_OATAB_NONE) {
		*id = v;
		return (0);
	}
	if (t->n == t->cap) {
		uint32_t ncap = t->cap ? t->cap * 2 : 64;
		struct sm_str *ns = sm_reallocarray(t->strs, ncap,
		    sizeof(*ns));

		if (ncap < t->cap || ns == NULL)
			return (SM_ENOMEM);
		t->strs = ns;
		t->cap = ncap;
	}
	if ((p = strtab_store(t, s, n)) == NULL ||
	    sm_oatab_insert(&t->tab, &it, t->n) != 0)
		return (SM_ENOMEM);
	t->strs[t->n].p = p;
	t->strs[t->n].len = (uint32_t)n;
	*id = t->n++;
	return (0);
}

size_t
sm_strtab_mem(const struct sm_strtab *t)
{
	return (t->bytes + (size_t)t->cap * sizeof(struct sm_str) +
	    sm_oatab_mem(&t->tab));
}
