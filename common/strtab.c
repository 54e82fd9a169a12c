/*
 * strtab.c -- see strtab.h.
 */
#include "strtab.h"

#include <string.h>

#include "hash.h"

#define STRTAB_CHUNK (64u * 1024u)

static int
strtab_rehash(struct sm_strtab *t, uint32_t nslots)
{
	uint32_t *slots = sm_calloc(nslots, sizeof(*slots));
	uint32_t mask = nslots - 1;

	if (slots == NULL)
		return (SM_ENOMEM);
	for (uint32_t id = 0; id < t->n; id++) {
		uint32_t i = t->strs[id].h & mask;

		while (slots[i] != 0)
			i = (i + 1) & mask;
		slots[i] = id + 1;
	}
	sm_free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	return (0);
}

/* Copy bytes into chunk storage; returns the NUL-terminated copy. */
static char *
strtab_store(struct sm_strtab *t, const char *s, size_t n)
{
	char *p;

	if (t->chunk_size - t->chunk_used < n + 1) {
		size_t sz = n + 1 > STRTAB_CHUNK / 4 ? n + 1 : STRTAB_CHUNK;
		char *c;

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
		if (sz != STRTAB_CHUNK) {
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
	sm_free(t->slots);
	sm_free(t->strs);
	memset(t, 0, sizeof(*t));
}

int
sm_strtab_find(const struct sm_strtab *t, const char *s, size_t n,
    uint32_t *id)
{
	uint32_t h, mask, i, v;

	if (t->nslots == 0 || n > UINT32_MAX)
		return (SM_ENOTFOUND);
	h = (uint32_t)sm_hash(s, n);
	mask = t->nslots - 1;
	for (i = h & mask; (v = t->slots[i]) != 0; i = (i + 1) & mask) {
		const struct sm_str *e = &t->strs[v - 1];

		if (e->h == h && e->len == n && memcmp(e->p, s, n) == 0) {
			*id = v - 1;
			return (0);
		}
	}
	return (SM_ENOTFOUND);
}

int
sm_strtab_intern(struct sm_strtab *t, const char *s, size_t n, uint32_t *id)
{
	uint32_t h, mask, i, v;
	char *p;
	int rv;

	if (n > (1u << 31))
		return (SM_ETOOBIG);
	if ((uint64_t)(t->n + 1) * 2 > t->nslots) {
		if ((rv = strtab_rehash(t, t->nslots ? t->nslots * 2 : 64)) != 0)
			return (rv);
	}
	h = (uint32_t)sm_hash(s, n);
	mask = t->nslots - 1;
	for (i = h & mask; (v = t->slots[i]) != 0; i = (i + 1) & mask) {
		const struct sm_str *e = &t->strs[v - 1];

		if (e->h == h && e->len == n && memcmp(e->p, s, n) == 0) {
			*id = v - 1;
			return (0);
		}
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
	if ((p = strtab_store(t, s, n)) == NULL)
		return (SM_ENOMEM);
	t->strs[t->n].p = p;
	t->strs[t->n].len = (uint32_t)n;
	t->strs[t->n].h = h;
	t->slots[i] = t->n + 1;
	*id = t->n++;
	return (0);
}

size_t
sm_strtab_mem(const struct sm_strtab *t)
{
	return (t->bytes + (size_t)t->cap * sizeof(struct sm_str) +
	    (size_t)t->nslots * sizeof(uint32_t));
}
