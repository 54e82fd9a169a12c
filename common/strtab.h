/*
 * strtab.h -- string interning: each distinct byte string gets a dense id.
 *
 * Used for frame names and label strings in the ingester head (one table per
 * tenant), for the names of a merged query tree, and for the string table of
 * a write request.  Id 0 is always the empty string, as in pprof.
 *
 * Layout: `strs[id]` points into append-only chunks of bytes, so a pointer
 * returned by sm_strtab_str() stays valid until sm_strtab_fini().  Lookup is
 * an sm_oatab (oatab.h) of ids keyed by XXH3 of the bytes (linear probing,
 * load factor <= 1/2).
 *
 * Ownership: the table owns copies of every interned string.
 * Locking: none; the owner serialises writers against readers (the ingester
 * holds the tenant's write lock while interning).
 */
#ifndef SM_STRTAB_H
#define SM_STRTAB_H

#include "oatab.h"
#include "sm.h"

struct sm_str {
	const char *p;   /* NUL-terminated copy */
	uint32_t len;
};

struct sm_strtab {
	struct sm_str *strs;
	uint32_t n, cap;
	struct sm_oatab tab;   /* ids by hash */
	char **chunks;
	uint32_t nchunks, chunks_cap;
	char *fill;            /* chunk small strings are appended to */
	size_t chunk_used, chunk_size;
	size_t bytes;          /* string bytes stored (memory accounting) */
};

/* Initialise with the empty string as id 0.  Returns 0 or SM_ENOMEM. */
int sm_strtab_init(struct sm_strtab *t);
void sm_strtab_fini(struct sm_strtab *t);

/*
 * Intern `s[0..n)` and store its id in *id.  Strings longer than 2^31 bytes
 * are refused with SM_ETOOBIG.  Returns 0, SM_ENOMEM or SM_ETOOBIG.
 */
int sm_strtab_intern(struct sm_strtab *t, const char *s, size_t n,
    uint32_t *id);

/* The same, given h = sm_hash(s, n) (a caller that needs the hash
 * itself, or hashes a batch ahead to prefetch: sm_strtab_prefetch). */
int sm_strtab_intern_hashed(struct sm_strtab *t, const char *s, size_t n,
    uint64_t h, uint32_t *id);

/* Room for n strings in all (the index and the id array), so a caller
 * that knows about how many it will intern (a decoder, from its input's
 * function count) does not rehash on the way.  A hint: returns 0 or
 * SM_ENOMEM, and the table is usable either way. */
int sm_strtab_reserve(struct sm_strtab *t, uint32_t n);

/* A hint: start loading the index slot of hash h. */
static inline void
sm_strtab_prefetch(const struct sm_strtab *t, uint64_t h)
{
	if (t->tab.slots != NULL)
		__builtin_prefetch(&t->tab.slots[(uint32_t)h & t->tab.mask]);
}

/* Look up without inserting: 0 and *id, or SM_ENOTFOUND. */
int sm_strtab_find(const struct sm_strtab *t, const char *s, size_t n,
    uint32_t *id);

static inline const char *sm_strtab_str(const struct sm_strtab *t,
    uint32_t id, uint32_t *len)
{
	if (len != NULL)
		*len = t->strs[id].len;
	return (t->strs[id].p);
}

static inline uint32_t sm_strtab_count(const struct sm_strtab *t)
{
	return (t->n);
}

/* Approximate heap bytes held by the table. */
size_t sm_strtab_mem(const struct sm_strtab *t);

#endif /* SM_STRTAB_H */
