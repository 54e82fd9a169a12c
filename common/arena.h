/*
 * arena.h -- per-request bump allocator with a byte budget (docs/style.md §9,
 * after RocksDB's memtable Arena).
 *
 * Everything a request decodes or builds (a parsed profile, a write request,
 * a merge tree) comes from one arena and is released in one call.  There is
 * no per-object free.  The arena counts the bytes it hands out and refuses
 * (returns NULL) once `budget` would be exceeded, which is how per-tenant
 * and per-request memory limits are enforced without checks at every call
 * site: a parser that gets NULL returns SM_ENOMEM and the request fails with
 * a 4xx/5xx instead of the process growing without bound.
 *
 * Ownership: the arena owns every block it returned; pointers stay valid
 * until sm_arena_reset() or sm_arena_destroy().
 * Locking: none; an arena belongs to one thread at a time.
 */
#ifndef SM_ARENA_H
#define SM_ARENA_H

#include <protobuf-c/protobuf-c.h>

#include "sm.h"

struct sm_arena;

/*
 * Create an arena that will hand out at most `budget` bytes in total
 * (0 = unlimited).  Returns NULL when out of memory.
 */
struct sm_arena *sm_arena_create(size_t budget);

/* Free every block and the arena itself.  NULL is a no-op. */
void sm_arena_destroy(struct sm_arena *a);

/* Forget every allocation but keep the first block for reuse. */
void sm_arena_reset(struct sm_arena *a);

/*
 * Allocate `n` bytes aligned to 16.  Returns NULL when the budget would be
 * exceeded or malloc fails.  The memory is not zeroed.
 */
void *sm_arena_alloc(struct sm_arena *a, size_t n);

/* As sm_arena_alloc, zeroed; overflow-checked nmemb * n. */
void *sm_arena_calloc(struct sm_arena *a, size_t nmemb, size_t n);

/* Copy `n` bytes of `s` and NUL-terminate.  NULL on failure. */
char *sm_arena_strndup(struct sm_arena *a, const char *s, size_t n);

/*
 * Grow an array allocated from this arena: returns a new block of
 * new_n * elem bytes holding the first old_n * elem bytes of `p`.  The old
 * block is abandoned (arenas never free), so callers double capacity.
 */
void *sm_arena_grow(struct sm_arena *a, void *p, size_t old_n, size_t new_n,
    size_t elem);

/* Bytes handed out so far (what the budget is checked against). */
size_t sm_arena_used(const struct sm_arena *a);

/* The budget given at creation (0 = unlimited). */
size_t sm_arena_budget(const struct sm_arena *a);

/*
 * A ProtobufCAllocator that allocates from `a`; its free() is a no-op.
 * Pass it to protobuf_c_message_unpack(); never call
 * protobuf_c_message_free_unpacked() on the result (drop the arena instead).
 */
ProtobufCAllocator sm_arena_pbc(struct sm_arena *a);

/*
 * Drop the unknown fields of m and of every message under it, before a
 * message unpacked with sm_arena_pbc() is packed again (the memory is the
 * arena's: nothing is freed).  protobuf-c keeps unknown fields to
 * re-encode them canonically, and that can turn an input it accepted into
 * one no decoder accepts: a field numbered 0 behind a non-minimal key
 * (0x81 0x00) unpacks as an unknown field but packs as the key 0x01.
 */
void sm_arena_pbc_drop_unknown(ProtobufCMessage *m);

#endif /* SM_ARENA_H */
