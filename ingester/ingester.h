/*
 * ingester.h -- the ingester component (DESIGN §1): owns a head of
 * per-tenant stack trees and series, serves smolder.v1 RPCs (write, merge,
 * series) on its RPC URL.
 *
 * Lifecycle: ing_create (allocate) -> ing_start (serve RPC; ready) ->
 * ing_stop (stop serving; joins workers) -> ing_destroy.
 *
 * Durability: none yet -- this version keeps the head in memory only.
 * (Write-ahead durability in RocksDB is the next step; until then a
 * restart loses data and /ready is true as soon as the RPC server runs.)
 *
 * Locking: RPC workers call into the head concurrently; see head.h.
 */
#ifndef ING_INGESTER_H
#define ING_INGESTER_H

#include <stdbool.h>

#include "common/buf.h"
#include "common/flags.h"
#include "common/sm.h"

struct ing_config {
	char *rpc_url;            /* -rpc.listen-address (set by main) */
	int64_t rpc_workers;      /* -ingester.rpc-workers */
	int64_t rpc_recv_max;     /* -ingester.rpc-max-message-bytes */
	int64_t bucket_ms;        /* -ingester.bucket-duration */
};

/* The flag table for this config (bound to `cfg`). */
extern const struct sm_flag *ing_flags(struct ing_config *cfg, size_t *n);

struct ingester;

int ing_create(const struct ing_config *cfg, struct ingester **out,
    struct sm_err *err);
int ing_start(struct ingester *ing, struct sm_err *err);
bool ing_ready(const struct ingester *ing);
void ing_stop(struct ingester *ing);
void ing_destroy(struct ingester *ing);

/*
 * Serve one packed smolder.v1.Request and append the packed Response to
 * `resp` (the RPC handler; exposed for tests).  Always writes a response;
 * returns the error code it carries.
 */
int ing_serve(void *ing, const uint8_t *req, size_t len, struct sm_buf *resp);

#endif /* ING_INGESTER_H */
