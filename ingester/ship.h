/*
 * ship.h -- the shipper: every committed block of this ingester (raw,
 * merged, tier) goes to the bucket (common/bucket.h), where history lives
 * (docs/architecture.md §10).  This file owns the bucket's block layout.
 *
 * Layout (tenant ids escaped by ing_ship_tenant_key: [A-Za-z0-9-] kept,
 * every other byte as _XX in hex, so any tenant id is a valid key segment
 * and never starts with '.'):
 *
 *   <tenant>/blocks/<ULID>/block       the block's parts and its table of
 *                                      contents
 *   <tenant>/blocks/<ULID>/meta.json   written LAST: a block whose
 *                                      meta.json is missing is a partial
 *                                      upload and is never read
 *
 * The block object: every stored value of the block exactly as the
 * ingester stores it (block.h: a 12-byte header with its own checksum,
 * then the payload), back to back, then the table of contents, then a
 * fixed footer, so a reader fetches the footer, the table and then only
 * the parts it needs by ranged GET:
 *
 *   TOC entry (17 bytes)   u8 kind ('M','I','S','T','D','P','X'),
 *                          be32 series ('D' only, else 0), be64 offset,
 *                          be32 length
 *   footer (24 bytes)      be32 nparts, be64 toc offset, be32 checksum
 *                          (low 32 bits of XXH3-64 over the TOC), be32
 *                          version (1), "SMBK"
 *
 * meta.json: {"version":1, "ulid", "tenant", "source": {"instance",
 * "incarnation" (32 hex digits), "gen", "replaces": [gens]}, "min_t",
 * "max_t", "bucket_ms", "tier_ms", "cover_start", "cover_end",
 * "cover_gen", "nseries", "nspans", "nprofiles", "block_bytes" (the
 * object's size), "block_xxh3" (16 hex digits over the whole object),
 * "shipped_at_ms"}.  Times are unix milliseconds.  `source` is what makes
 * the bucket's copies exact: (incarnation, gen) names one local block for
 * good, `replaces` lists the gens of the same source that a merged block
 * stands for (they may be in the bucket already), and a tier block's
 * cover_gen counts the same source's gens (block.h, "Tier blocks").
 *
 * The compactor's folds (compactor/fold.h) are blocks of one more
 * source, ING_FOLD_INC of instance "compactor", whose meta.json adds
 * "fold": {"start", "end" (the clock hour it folds), "inputs":
 * [{"incarnation", "gen", "first_hour", "hour_mask"}] (the blocks of
 * other sources it stands for, and the clock hours each has data in)}.
 * Of the fold source's blocks of one hour only the largest gen is read
 * (a scan flags the others replaced and adds their gens to its
 * `replaces`): a fold that a lagging listing hid from the next one is
 * then never summed with it.  The fold source's tier blocks say which
 * folds they sum: "fold": {"start", "end" (the tier's day window),
 * "covers": [gens]}, cover_gen the largest of them.  Such a tier is read
 * only while every fold it covers is read and no other fold of its
 * window has a gen at or below its cover_gen (a scan flags it replaced
 * otherwise, and adds its gen to the `replaces` of the fold that took a
 * covered one's place, so a reader drops the tier when it takes that
 * fold): a tier summarises its source's gens up to cover_gen, and a
 * re-fold replaces a fold with one that holds its uploads again.
 *
 * Block ids are ULIDs (48 bits of milliseconds, 80 random bits, Crockford
 * base32): unique without coordination, since S3-compatible stores such as
 * Swift have no conditional PUT.  The ULID is made once and stored in the
 * block's ship record (store.h) BEFORE the first byte is uploaded, so a
 * retry after a crash overwrites the same objects instead of leaving a
 * second copy.  The record says shipped only after meta.json is stored.
 * An attempt older than ING_SHIP_ULID_MAX_AGE_MS (the bucket down for
 * hours) starts over under a fresh ULID, since the compactor deletes an
 * object whose meta.json has not come for twice its deletion delay; the
 * old object, if any, is such an unfinished upload.
 *
 * The pass: for every listed block, oldest first, without a shipped ship
 * record: assign the ULID, read the parts (ing_store_block_parts), upload
 * the block object, upload meta.json, mark it shipped -- up to
 * -ingester.ship-concurrency blocks at once (a flush of many tenants cuts
 * as many blocks; one at a time, their round trips add up).  A failure
 * stops the pass (the bucket is down: the next blocks would fail too) and
 * is counted and logged; the next pass retries.  A block whose local copy is
 * damaged (a part fails its checksum) is not uploaded -- the bucket would
 * serve the damage; the other replicas hold the data -- and stays
 * pending, counted as a failure and logged; the pass goes on.  Nothing about writes or
 * acknowledgements depends on the bucket: blocks wait on the local disk.
 * A block retired or merged away between the listing and its upload is
 * skipped (its parts are gone or tombstoned).
 *
 * Fault injection (tests only): SMOLDER_TEST_FAULTS=ship-kill makes the
 * process SIGKILL itself once its first block object is stored, before
 * its meta.json -- the crash the ship record's ULID is there for
 * (tests/integration/test_bucket_ship.py).
 *
 * Locking: one pass at a time (sh->mu); a pass holds no database lock
 * while it uploads.
 */
#ifndef ING_SHIP_H
#define ING_SHIP_H

#include <stdbool.h>
#include <stdint.h>

#include "common/bucket.h"

#include "db.h"
#include "store.h"

#define ING_SHIP_FOOTER 24
#define ING_SHIP_TOC_ENTRY 17
#define ING_SHIP_VERSION 1
#define ING_SHIP_MAGIC "SMBK"
#define ING_ULID_LEN 26
#define ING_SHIP_WORKERS_MAX 32
/* An upload attempt older than this starts again under a fresh ULID
 * (ship.c): far below the compactor's unfinished-upload age, twice
 * -compactor.deletion-delay (12 h by default). */
#define ING_SHIP_ULID_MAX_AGE_MS (6LL * 3600 * 1000)

/* The compactor's fold source (compactor/fold.h): no ingester makes an
 * incarnation of all ones but with odds of 2^-128. */
#define ING_FOLD_INC "ffffffffffffffffffffffffffffffff"
#define ING_FOLD_INSTANCE "compactor"

struct ing_ship;

/* A block of another source that a fold stands for, and the clock hours
 * it has data in: bit i of hour_mask is the hour first_hour + i h (0, 0:
 * not known). */
struct ing_fold_ref {
	char inc[33];
	uint64_t gen;
	int64_t first_hour;
	uint64_t hour_mask;
};

/* What a block's meta.json says of its source (above). */
struct ing_ship_src {
	const char *instance;
	const char *inc;               /* 32 hex digits */
	const uint64_t *replaces;
	uint32_t nreplaces;
	int64_t fold_start, fold_end;  /* a fold's hour; 0, 0 otherwise */
	const struct ing_fold_ref *inputs;
	uint32_t ninputs;
	const uint64_t *covers;        /* a fold tier's folds */
	uint32_t ncovers;
	bool kill_after_object;        /* tests: SIGKILL before meta.json */
};

/*
 * Upload block m->gen of `local_tenant` in store as a block of `tenant`
 * from source src, under a fresh ULID (returned): the object, then
 * meta.json.  For the compactor's folds, which have no ship record: a
 * failure leaves at most an unfinished upload, which the compactor
 * deletes later.  *bytes gets the object's size.  0, the bucket's or the
 * store's error.
 */
int ing_ship_put(struct sm_bucket *bucket, struct ing_store *store,
    const char *local_tenant, const char *tenant,
    const struct ing_block_meta *m, const struct ing_ship_src *src,
    char ulid[ING_ULID_LEN + 1], uint64_t *bytes, struct sm_err *err);

/*
 * A shipper over db and store, uploading to bucket (borrowed: outlives
 * the shipper) as `instance`, `workers` blocks at once (1..
 * ING_SHIP_WORKERS_MAX; -ingester.ship-concurrency).  0, SM_ENOMEM, or the store's error reading
 * the incarnation.
 */
int ing_ship_create(struct ing_db *db, struct ing_store *store,
    struct sm_bucket *bucket, const char *instance, uint32_t workers,
    struct ing_ship **out, struct sm_err *err);
void ing_ship_destroy(struct ing_ship *sh);

/*
 * One pass (above).  *shipped counts the blocks uploaded by it (may be
 * NULL).  0, or the first failure (SM_EUNAVAIL, SM_EAUTH, ... from the
 * bucket; the store's errors), with the block named in err.
 */
int ing_ship_pass(struct ing_ship *sh, uint32_t *shipped, struct sm_err *err);

/* Blocks listed and not shipped yet, as of the last pass. */
uint32_t ing_ship_pending(struct ing_ship *sh);

/* The escaped tenant key segment (above) into out (3 * len + 1 bytes). */
void ing_ship_tenant_key(const char *tenant, char *out, size_t outlen);

/* A new ULID for time ms, NUL-terminated (ING_ULID_LEN + 1 bytes). */
void ing_ulid_make(int64_t ms, char out[ING_ULID_LEN + 1]);

/* The milliseconds a ULID was made at. */
int64_t ing_ulid_ms(const uint8_t bin[16]);

/* The 26-character text of a stored 16-byte ULID, and back (0 or
 * SM_EINVAL). */
void ing_ulid_text(const uint8_t bin[16], char out[ING_ULID_LEN + 1]);
int ing_ulid_parse(const char *text, uint8_t bin[16]);

/*
 * The bucket's complete blocks (those with a meta.json), for the restore
 * and the store-gateway (gateway.h): one LIST under `prefix` (NULL: the
 * whole bucket), the metas from the compactor's per-tenant
 * bucket-index.json, and a GET of each meta.json newer than its index.
 * Only the blocks shipped by `instance` when it is not NULL.  Sorted by
 * (tenant, incarnation, gen, newest ULID first), each flagged with what a
 * reader passes over:
 *   marked    a deletion mark is on it (past retention; compactor);
 *   replaced  a merged block of the same source stands for its gen;
 *   dup       a second complete copy of the same (tenant, source, gen),
 *             which a block re-shipped under a fresh ULID leaves.
 * A meta.json that does not parse, or lacks its fields, is logged and
 * passed over; one deleted since the listing is passed over.  0, or the
 * bucket's error (nothing is returned then).
 */
struct ing_bucket_block {
	char *meta_key;                /* ".../<ULID>/meta.json" */
	char *tenant;
	char *instance;
	char inc[33];                  /* the source: 32 hex digits */
	uint64_t gen;
	uint8_t ulid[16];
	int64_t bytes;                 /* the object's size (meta.json) */
	char xxh[17];                  /* its XXH3 in hex (meta.json) */
	int64_t min_t, max_t;
	int64_t bucket_ms, tier_ms;
	uint64_t *replaces;            /* gens a merged block stands for */
	uint32_t nreplaces, capreplaces;
	int64_t cover_start, cover_end;   /* a tier's window */
	uint64_t cover_gen;
	int64_t fold_start, fold_end;  /* a fold's hour, a fold tier's window
					  (above); 0, 0 */
	struct ing_fold_ref *inputs;   /* a fold's inputs */
	uint32_t ninputs;
	uint64_t *covers;              /* a fold tier's folds, sorted */
	uint32_t ncovers;
	bool marked, replaced, dup;
};

struct ing_bucket_scan {
	struct ing_bucket_block *v;
	uint32_t n;
};

int ing_ship_scan(struct sm_bucket *bucket, const char *prefix,
    const char *instance, struct ing_bucket_scan *out, struct sm_err *err);
void ing_ship_scan_free(struct ing_bucket_scan *s);

/*
 * Fetch block bk's object into *obj and check it against its meta
 * (ing_ship_object_check); *parts (heap, the caller frees it) point into
 * obj, in the object's order, ready for ing_store_block_import.  0,
 * SM_ECORRUPT, SM_ENOMEM or the bucket's error.
 */
int ing_ship_fetch(struct sm_bucket *bucket, const struct ing_bucket_block *bk,
    struct sm_buf *obj, struct ing_store_part **parts, uint32_t *nparts,
    struct sm_err *err);

/*
 * Block bk's parts for a store-gateway, which leaves data parts in the
 * bucket and reads them by range when a query needs them (remote.h):
 * every part's place, from the table of contents, and the bytes of every
 * part but the 'D' ones.
 *   - An object of at most `whole_max` bytes is fetched whole (one GET);
 *     out->whole is set and out->obj holds the object, so its data can
 *     go to the cache at once.  It is also checked whole (size and XXH3
 *     against meta.json, every part): damage only a data part explains
 *     sets out->damaged and is logged, and the load goes on -- that
 *     part's checksum fails the queries that read it.
 *   - A larger one is read by range: its last whole_max bytes (footer,
 *     table of contents, and often the span and profile parts), the
 *     rest of the table if it is longer, then one GET per run of
 *     adjacent parts that are not 'D' and not in hand yet (in a block
 *     object: meta, index, symbols, tree).
 * Either way the footer must match meta.json's size, the table its
 * checksum, and every part but the 'D' ones its own checksum (SM_ECORRUPT
 * otherwise); a 'D' part is checked when it is read.
 * out->v lists every part in object order: kind, series, offset, length,
 * and v pointing into out->obj, or NULL for a 'D' part not fetched.
 * 0, SM_ECORRUPT, SM_ENOMEM or the bucket's error (the key named).
 */
struct ing_ship_part {
	char kind;
	uint32_t series;               /* 'D' only */
	uint64_t off;                  /* in the object */
	uint32_t n;
	const uint8_t *v;              /* into obj; NULL: not fetched */
};

struct ing_ship_parts {
	struct ing_ship_part *v;
	uint32_t n;
	uint64_t size;                 /* the object's */
	bool whole;                    /* obj is the whole object */
	bool damaged;                  /* whole, and a data part is not */
	struct sm_buf obj;             /* the whole object, or the ranges
					  fetched, back to back */
	uint32_t gets;                 /* GETs it took */
};

int ing_ship_fetch_parts(struct sm_bucket *bucket,
    const struct ing_bucket_block *bk, uint64_t whole_max,
    struct ing_ship_parts *out, struct sm_err *err);
void ing_ship_parts_fini(struct ing_ship_parts *p);

/* Block bk's object key into key (SM_BUCKET_KEY_MAX + 1 bytes). */
void ing_ship_object_key(const struct ing_bucket_block *bk, char *key,
    size_t keylen);

/*
 * Restore (an ingester that starts with an empty data directory and a
 * bucket): every complete, unmarked block the bucket holds from sources
 * of this `instance` (any incarnation) is imported into the store under
 * its own generation (ing_store_block_import), with a ship record saying
 * it is in the bucket, before the database opens.  So a disk that was
 * lost or wiped comes back with every block it had shipped, and the
 * replica is whole again but for its unshipped tail, which its peers
 * hold.  Generations keep their meaning: a merged block's `replaces` are
 * not imported, a tier block's cover_gen counts the same gens, and the
 * new heads start above the largest.  Two incarnations that used the
 * same generation (a disk wiped before restores existed) cannot both be
 * imported: the newer ULID wins and the other is logged.  Each block is
 * checked (meta.json's size and XXH3, the table of contents, every
 * part's checksum) before it is written.  It costs one LIST pass, one GET
 * per tenant's bucket-index.json (the compactor's: it holds the metas),
 * one per meta.json newer than its index, and one per restored object.
 * A meta.json that does not parse, and a block object that is missing or
 * fails its checks, are logged and passed over (the block's replicas hold
 * its data).  0 or the bucket's error (what was imported stays: each block is
 * one synced batch); *blocks and *bytes count what was imported.
 */
int ing_ship_restore(struct ing_store *store, struct sm_bucket *bucket,
    const char *instance, uint32_t *blocks, uint64_t *bytes,
    void (*restored)(void *arg, const char *inc, int64_t min_t,
    int64_t max_t), void *arg, struct sm_err *err);

/*
 * Check a block object: footer, TOC checksum, every entry inside the
 * object, every part's header and checksum (block.h).  For smolder-admin
 * and the store-gateway.  0 or SM_ECORRUPT with what and where in err;
 * *nparts gets the part count (may be NULL).
 */
int ing_ship_object_verify(const uint8_t *p, size_t n, uint32_t *nparts,
    struct sm_err *err);

/*
 * A fetched block object against its meta.json's block_bytes and
 * block_xxh3 (NULL: missing), then ing_ship_object_verify.  0 or
 * SM_ECORRUPT saying which.
 */
int ing_ship_object_check(const uint8_t *p, size_t n, int64_t meta_bytes,
    const char *meta_xxh3, uint32_t *nparts, struct sm_err *err);

#endif /* ING_SHIP_H */
