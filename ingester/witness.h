/*
 * witness.h -- an ingester's record of who else holds its data, so that
 * queriers can tell a complete answer from a short one
 * (docs/architecture.md §4.3, "Complete answers"; querier/complete.c
 * judges).
 *
 * Every write names its replicas (WriteRequest.replicas: instance id,
 * zone and data-directory incarnation, as the distributor's ring saw
 * them).  For every other replica incarnation the ingester keeps the
 * data-time range [first, last] of the writes it received together with
 * it: the data that peer was sent.  A peer that later leaves the ring,
 * loses its disk (it comes back as a new incarnation) or is down is
 * then known to every ingester it shared writes with, for exactly that
 * range, even after every querier restarted: the record is what lets an
 * answer say "incomplete" rather than a short 200.  The record also keeps,
 * for each earlier incarnation of this ingester whose blocks it restored
 * from the bucket (a wiped disk, ship.h), the data-time range of the
 * restored blocks.
 *
 * Ownership: one per ingester (not for store-gateways), created after the
 * store opens, before its restore.  Persistence: packed as a
 * smolder.v1.Witness under a system key of the store
 * (ing_store_witness_put), saved by ing_witness_save when it changed --
 * the ingester calls it every second and at stop -- so a crash loses at
 * most the last second's extension of a range; the other replicas of
 * those writes keep the same record.  Bounded: entries whose data every
 * tenant's retention has deleted are dropped (ing_witness_expire), and
 * past ING_WITNESS_MAX peers the one whose last write is oldest is
 * forgotten first.
 *
 * Locking: an internal mutex; every function is thread-safe.  Writes
 * take it once each (a few string compares per replica).  Errors: 0,
 * SM_ENOMEM, the store's SM_EIO; a damaged stored record is logged and
 * started afresh (it is advisory for reads, never for data).
 */
#ifndef ING_WITNESS_H
#define ING_WITNESS_H

#include <stdint.h>

#include "common/arena.h"
#include "common/sm.h"
#include "smolder/v1/rpc.pb-c.h"
#include "store.h"

#define ING_WITNESS_MAX 4096

struct ing_witness;

/* Load the record of `self_id` (this ingester's -instance.id, whose own
 * entries are skipped) from `store`. */
int ing_witness_open(struct ing_store *store, const char *self_id,
    struct ing_witness **out, struct sm_err *err);
void ing_witness_close(struct ing_witness *w);

/* Note a received write's replicas over its series' data times. */
void ing_witness_record(struct ing_witness *w,
    const Smolder__V1__WriteRequest *req);

/* Blocks of this instance's incarnation `inc` (32 hex digits) covering
 * [min_ms, max_ms] were restored from the bucket. */
void ing_witness_restored(struct ing_witness *w, const char *inc,
    int64_t min_ms, int64_t max_ms);

/* Forget what ends before `floor_ms`: data every tenant's retention has
 * deleted (the compactor's Retention call) needs no witness. */
void ing_witness_expire(struct ing_witness *w, int64_t floor_ms);

/* Store the record if it changed since the last save. */
int ing_witness_save(struct ing_witness *w, struct sm_err *err);

/* The record for a Health answer, built in `a`; NULL without memory. */
Smolder__V1__Witness *ing_witness_get(struct ing_witness *w,
    struct sm_arena *a);

#endif /* ING_WITNESS_H */
