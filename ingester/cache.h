/*
 * cache.h -- a bounded cache of decoded block parts (index sets, trees):
 * an LRU with a byte budget (-ingester.block-cache-bytes).
 *
 * Entries are keyed by (tenant, block id, kind).  A lookup or an insert
 * returns the object with a reference; the caller releases it when done.
 * Eviction frees least-recently-used entries nobody references until the
 * total is within budget; a referenced entry is never freed (it leaves the
 * cache accounting when evicted and is freed at its last release), so a
 * query never sees an object vanish.  An object larger than the budget is
 * handed back uncached (freed at release).
 *
 * Locking: one mutex; lookups are O(1) hash + list moves.
 */
#ifndef ING_CACHE_H
#define ING_CACHE_H

#include "common/sm.h"

struct ing_cache;
struct ing_cache_ent;

int ing_cache_create(size_t budget, struct ing_cache **out);
void ing_cache_destroy(struct ing_cache *c);

/* The cached object (with a reference in *ent), or NULL. */
void *ing_cache_get(struct ing_cache *c, const char *tenant, uint64_t id,
    char kind, struct ing_cache_ent **ent);

/*
 * Insert `obj` (ownership passes to the cache; `freefn` frees it).  If an
 * entry for the key appeared meanwhile, `obj` is freed and the existing one
 * returned.  Returns the object with a reference in *ent, or NULL on
 * out-of-memory (then obj was freed).
 */
void *ing_cache_put(struct ing_cache *c, const char *tenant, uint64_t id,
    char kind, void *obj, size_t bytes, void (*freefn)(void *),
    struct ing_cache_ent **ent);

void ing_cache_release(struct ing_cache *c, struct ing_cache_ent *ent);

/* Bytes currently accounted, and entries (for metrics). */
size_t ing_cache_bytes(struct ing_cache *c);

#endif /* ING_CACHE_H */
