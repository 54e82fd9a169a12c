/*
 * sm_test_disk.h -- an ingester db over a RocksDB store in a temp dir,
 * for the ingester's unit tests (db_test, spans_test, compact_test).
 * Each test opens it with its own ing_db_cfg (kept, so a reopen uses the
 * same one); disk_fini closes it and removes the directory.  Failures to
 * create or open abort the test: nothing can be checked without it.
 * disk_write_raw writes an encoded request; disk_damage flips a byte of
 * a stored block value; disk_collapsed turns a merge's answer into
 * collapsed text the tests compare.
 */
#ifndef SM_TEST_DISK_H
#define SM_TEST_DISK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "common/buf.h"
#include "common/flamegraph.h"
#include "common/kv.h"
#include "common/mtree.h"
#include "ingester/db.h"
#include "ingester/store.h"
#include "sm_test.h"

struct disk {
	char dir[64];
	struct ing_store *store;
	struct ing_db *db;
	struct ing_db_cfg cfg;      /* what disk_reopen opens with */
};

/* Open d->dir with d->cfg. */
static inline void
disk_reopen(struct disk *d)
{
	struct sm_kv_opts o;
	struct sm_err err;

	sm_kv_opts_default(&o);
	if (ing_store_open(d->dir, &o, 1 << 20, &d->store, &err) != 0 ||
	    ing_db_open(&d->cfg, d->store, &d->db, &err) != 0) {
		fprintf(stderr, "open: %s\n", err.msg);
		abort();
	}
}

static inline void
disk_close(struct disk *d)
{
	ing_db_close(d->db);
	ing_store_close(d->store);
	d->db = NULL;
	d->store = NULL;
}

/* A fresh temp dir (named after `what`) opened with cfg. */
static inline void
disk_create(struct disk *d, const char *what, const struct ing_db_cfg *cfg)
{
	snprintf(d->dir, sizeof(d->dir), "/tmp/smolder-%s-XXXXXX", what);
	if (mkdtemp(d->dir) == NULL)
		abort();
	d->cfg = *cfg;
	disk_reopen(d);
}

static inline void
disk_fini(struct disk *d)
{
	char cmd[128];

	if (d->db != NULL)
		disk_close(d);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup of %s failed\n", d->dir);
}

/*
 * Write the packed smolder.v1.Request (a write) in raw to db, and free
 * raw.  A non-zero fault fails the fault-th allocation of the write alone
 * (sm_fault_alloc_after).  ing_db_write's result, *res and *err.
 */
static inline int
disk_write_raw(struct ing_db *db, struct sm_buf *raw, long fault,
    struct ing_write_result *res, struct sm_err *err)
{
	Smolder__V1__Request *req;
	int rv;

	req = smolder__v1__request__unpack(NULL, raw->len, (uint8_t *)raw->b);
	SM_REQUIRE(req != NULL);
	if (fault != 0)
		sm_fault_alloc_after(fault);
	rv = ing_db_write(db, (uint8_t *)raw->b, raw->len, req->write, res,
	    err);
	if (fault != 0)
		sm_fault_alloc_after(0);
	smolder__v1__request__free_unpacked(req, NULL);
	sm_buf_fini(raw);
	return (rv);
}

/* Damage one stored value of tenant "t"'s block gen (part `kind`, series)
 * through the kv layer. */
static inline void
disk_damage(struct disk *d, uint64_t gen, char kind, uint32_t series)
{
	struct sm_kv *kv = ing_store_kv(d->store);
	struct sm_buf v = SM_BUF_INIT;
	struct sm_key k;
	struct sm_err err;
	enum sm_kv_cf cf = kind == 'I' || kind == 'M' ? SM_KV_INDEX :
	    SM_KV_BLOCKS;

	ing_key_part(&k, "t", gen, kind, series);
	SM_REQUIRE(sm_kv_get(kv, cf, k.b, k.n, &v, &err) == 0);
	v.b[v.len / 2 + 6] ^= 0x40;
	SM_REQUIRE(sm_kv_put(kv, cf, k.b, k.n, v.b, v.len, &err) == 0);
	sm_buf_fini(&v);
}

/*
 * A merge's answer (rv and mr of ing_db_merge or ing_db_span_merge, mr
 * in arena a) as collapsed text, or "ERR <rv>"; *profiles (when not NULL)
 * gets its profile count.  Destroys a; the caller frees the text.
 */
static inline char *
disk_collapsed(int rv, const Smolder__V1__MergeResponse *mr,
    struct sm_arena *a, uint64_t *profiles)
{
	struct sm_mtree qm;
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	char *text;

	if (rv != 0) {
		char e[32];

		snprintf(e, sizeof(e), "ERR %d", rv);
		sm_arena_destroy(a);
		return (strdup(e));
	}
	if (sm_mtree_init(&qm) != 0 || sm_mtree_add_pb(&qm, mr, &err) != 0)
		abort();
	if (profiles != NULL)
		*profiles = mr->profiles;
	sm_fg_write_collapsed(&qm.tree, &qm.names, qm.self, &out);
	text = strdup(out.b != NULL ? out.b : "");
	sm_mtree_fini(&qm);
	sm_buf_fini(&out);
	sm_arena_destroy(a);
	return (text);
}

#endif /* SM_TEST_DISK_H */
