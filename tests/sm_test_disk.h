/*
 * sm_test_disk.h -- an ingester db over a RocksDB store in a temp dir,
 * for the ingester's unit tests (db_test, spans_test, compact_test).
 * Each test opens it with its own ing_db_cfg (kept, so a reopen uses the
 * same one); disk_fini closes it and removes the directory.  Failures to
 * create or open abort the test: nothing can be checked without it.
 */
#ifndef SM_TEST_DISK_H
#define SM_TEST_DISK_H

#include <stdio.h>
#include <stdlib.h>

#include "ingester/db.h"
#include "ingester/store.h"

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

#endif /* SM_TEST_DISK_H */
