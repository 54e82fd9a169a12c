/*
 * hash.h -- the hash functions Smolder uses, all from libxxhash.
 *
 * XXH3_64bits is the only hash for interning tables and fingerprints; the
 * seeded form lets a table mix in its own seed.  Fingerprints that persist
 * (series fingerprints in storage keys, ring tokens) must use exactly these
 * functions forever, so they are named here once.
 */
#ifndef SM_HASH_H
#define SM_HASH_H

#include <stdint.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

static inline uint64_t sm_hash(const void *p, size_t n)
{
	return (XXH3_64bits(p, n));
}

static inline uint64_t sm_hash_seed(const void *p, size_t n, uint64_t seed)
{
	return (XXH3_64bits_withSeed(p, n, seed));
}

/*
 * sm_hash() of bytes that arrive in pieces: the digest equals sm_hash()
 * of their concatenation, however they are split (segment log checks,
 * seglog.h).
 */
struct sm_hash_stream {
	XXH3_state_t st;
};

static inline void sm_hash_stream_init(struct sm_hash_stream *h)
{
	(void)XXH3_64bits_reset(&h->st);
}

static inline void sm_hash_stream_add(struct sm_hash_stream *h,
    const void *p, size_t n)
{
	(void)XXH3_64bits_update(&h->st, p, n);
}

static inline uint64_t sm_hash_stream_digest(const struct sm_hash_stream *h)
{
	return (XXH3_64bits_digest(&h->st));
}

/* Mix two 32-bit ids into a well-spread 64-bit hash (node interning). */
static inline uint64_t sm_hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (x);
}

#endif /* SM_HASH_H */
