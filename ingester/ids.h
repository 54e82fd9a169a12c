/*
 * ids.h -- the profile ids a tenant wrote recently: idempotency of writes
 * (docs/architecture.md §4).  A write carries a 16-byte profile id shared by all its
 * replicas; an nng resend after a lost reply, a distributor retry, or the
 * same request replayed from the head log must not be counted twice.
 *
 * ING_ID_GENS generations of open-addressing sets, each spanning a
 * quarter of the window: new ids go to gen[0]; when it is a quarter
 * window old (or holds max / 4 ids) every generation moves down one and
 * the oldest is dropped.  An id is remembered for between one and 1.25
 * windows (-ingester.idempotency-window), which only has to outlast a
 * push timeout; memory is bounded by 1.25 x max ids per tenant.  Two
 * generations of a whole window each kept up to two windows' ids: at a
 * fast ingest (bench B5 sends an hour's uploads in five minutes, 1,300
 * ids/s) that was 4.5 MB, now about 2.8.  A lookup probes up to five
 * small sets instead of two large ones.  Only gen[0] takes new ids, so
 * the older generations are packed when they close: sorted arrays of
 * (id, state) records, 17 bytes an id instead of the open-addressing
 * table's 23 to 45 (16 + 1 bytes a slot at a load of 3/8 to 3/4), found
 * by binary search; a state still changes in place (a closed set never
 * gains or loses an id).  Packing a closed set allocates its array;
 * without the memory it stays a table.  Ids in the head log are re-added
 * on replay, so a resend that arrives after a crash and restart is still
 * recognised.
 *
 * States: PENDING while the write is in flight (a concurrent duplicate
 * waits for the outcome), DONE once acknowledged; a failed write's id is
 * reset to ABSENT so a retry is applied.
 *
 * Locking: none; the tenant mutex guards it.  Errors: SM_ENOMEM.
 */
#ifndef ING_IDS_H
#define ING_IDS_H

#include <stdint.h>

#include "common/sm.h"

#define ING_ID_LEN 16

enum ing_id_state {
	ING_ID_ABSENT = 0,
	ING_ID_PENDING = 1,
	ING_ID_DONE = 2,
};

struct ing_idset {
	uint8_t (*key)[ING_ID_LEN]; /* a table: nslots slots */
	uint8_t *state;             /* 0xff = empty slot */
	uint8_t *rec;               /* packed: n records of ING_ID_LEN + 1
				     * bytes (id, state), by id */
	uint32_t nslots, n;
};

#define ING_ID_GENS 5

struct ing_ids {
	struct ing_idset gen[ING_ID_GENS];   /* [0] current, then older */
	int64_t since_ms;           /* when gen[0] started */
	int64_t window_ms;
	uint32_t max;
};

void ing_ids_init(struct ing_ids *x, int64_t window_ms, uint32_t max);
void ing_ids_fini(struct ing_ids *x);

/* The state of `id` (ABSENT when not remembered). */
enum ing_id_state ing_ids_get(const struct ing_ids *x, const uint8_t *id);

/* Set the state of `id` (rotating generations first when due). */
int ing_ids_set(struct ing_ids *x, const uint8_t *id, enum ing_id_state st,
    int64_t now_ms);

#endif /* ING_IDS_H */
