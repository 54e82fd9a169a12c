/*
 * remote.h -- a store-gateway's data parts stay in the bucket: they are
 * read by ranged GET when a query needs them, through a cache of object
 * pages in a byte budget (docs/architecture.md §10).
 *
 * Why.  A block's data parts ('D', block.h: the (node, value) pairs of
 * every series) are most of its bytes; the index, symbols, tree, span and
 * profile parts are what every query of the block reads first and are
 * small.  A gateway that kept whole blocks on its disk would need the
 * bucket's size in local disk; this one keeps the small parts in its
 * database (imported by the sync, gateway.h) and leaves the data in the
 * bucket, as Mimir's and Thanos' store-gateways keep index headers
 * locally and fetch chunks by range.
 *
 * Stubs.  In place of each data part the gateway stores a stub under the
 * part's own key (store.h), so the store finds a remote part where it
 * looks for a local one and hands the stub to ing_remote_read:
 *
 *   offset  size  field
 *   0       2     magic "SR" (a stored part starts "SM", block.h)
 *   2       1     version (1)
 *   3       1     kind ('D')
 *   4       16    the block object's ULID (ship.h)
 *   20      8     be64 the object's size
 *   28      8     be64 the part's offset in the object
 *   36      4     be32 the part's length
 *
 * The object's key follows from the ULID and the local tenant
 * ("<tenant>|<source>", gateway.h): <tenant key>/blocks/<ULID>/block.
 *
 * Pages.  The cache holds object bytes in pages of -store-gateway.
 * data-page-bytes, aligned in the object and keyed by (ULID, page
 * index), least recently used evicted past -store-gateway.data-cache-
 * bytes (ingester/cache.h: an entry in use is never freed under a
 * reader).  A read takes the pages its range covers; each run of missing
 * pages is one ranged GET.  A part's checksum (block.h) is checked when
 * the store decodes it, so a damaged range fails the queries that need
 * it and is counted as a damaged part.  Two readers missing the same
 * page may both fetch it; the cache keeps one.  The cache is memory
 * only: a restarted gateway reads pages again as queries need them.
 * Objects no larger than one page are fetched whole by the sync, checked
 * whole, and their pages put in the cache at once (ing_remote_warm).
 *
 * Errors: a bucket that cannot be read fails the read with its error
 * (SM_EUNAVAIL, SM_ETIMEDOUT, ...: the query answers 503 naming it);
 * SM_ECORRUPT for a stub that is not one, or an object shorter than its
 * stub says.  Locking: the cache's own mutex; the bucket is thread-safe.
 */
#ifndef ING_REMOTE_H
#define ING_REMOTE_H

#include <stdint.h>

#include "common/bucket.h"
#include "common/buf.h"

#define ING_REMOTE_STUB 40
#define ING_REMOTE_PAGE_MIN 4096

struct ing_remote;

/* Pages of `page` bytes (>= ING_REMOTE_PAGE_MIN) from bucket (borrowed)
 * in `budget` bytes.  0 or SM_ENOMEM. */
int ing_remote_create(struct sm_bucket *bucket, uint64_t budget,
    uint64_t page, struct ing_remote **out, struct sm_err *err);
void ing_remote_destroy(struct ing_remote *r);

/* The page size, which is also the largest object the sync fetches
 * whole. */
uint64_t ing_remote_page(const struct ing_remote *r);

/* The stub (above) of the part at [off, off + n) of object ulid. */
void ing_remote_stub(const uint8_t ulid[16], uint64_t size, uint64_t off,
    uint32_t n, uint8_t out[ING_REMOTE_STUB]);

/* Is v a stub? */
bool ing_remote_is_stub(const uint8_t *v, size_t n);

/*
 * The part a stub stands for, into out (replacing its contents), for the
 * local tenant `tenant`: the store's hook (store.h, ing_store_set_remote;
 * arg is the ing_remote).
 */
int ing_remote_read(void *arg, const char *tenant, const uint8_t *stub,
    size_t n, struct sm_buf *out, struct sm_err *err);

/* Put the pages of a whole object (size bytes at obj) that cover
 * [from, to) in the cache. */
void ing_remote_warm(struct ing_remote *r, const uint8_t ulid[16],
    const uint8_t *obj, uint64_t size, uint64_t from, uint64_t to);

#endif /* ING_REMOTE_H */
