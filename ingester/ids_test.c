/*
 * ids_test.c -- recently written profile ids (ids.h): an id is remembered
 * for at least the window and forgotten within 1.25 windows; states
 * change where the id lives, a pending id survives rotations; the count
 * cap bounds every generation.
 */
#include "sm_test.h"

#include <string.h>

#include "ingester/ids.h"

static void
id_of(uint8_t *id, uint32_t n)
{
	memset(id, 0, ING_ID_LEN);
	memcpy(id, &n, sizeof(n));
	id[15] = 0x5a;
}

static void
test_window(void)
{
	struct ing_ids x;
	uint8_t a[ING_ID_LEN], b[ING_ID_LEN];
	int64_t t;

	ing_ids_init(&x, 60000, 1000000);
	id_of(a, 1);
	id_of(b, 2);
	SM_CHECK_EQ(ing_ids_get(&x, a), ING_ID_ABSENT);
	SM_CHECK_EQ(ing_ids_set(&x, a, ING_ID_PENDING, 1000), 0);
	SM_CHECK_EQ(ing_ids_get(&x, a), ING_ID_PENDING);
	/* Other writes every second: `a` is remembered a whole window and
	 * changes state in whichever generation holds it. */
	for (t = 2000; t <= 61000; t += 1000) {
		uint8_t o[ING_ID_LEN];

		id_of(o, (uint32_t)(100 + t / 1000));
		SM_REQUIRE(ing_ids_set(&x, o, ING_ID_DONE, t) == 0);
		if (t == 30000)
			SM_CHECK_EQ(ing_ids_set(&x, a, ING_ID_DONE, t), 0);
		SM_CHECK(ing_ids_get(&x, a) != ING_ID_ABSENT);
	}
	SM_CHECK_EQ(ing_ids_get(&x, a), ING_ID_DONE);
	/* ... and gone by 1.25 windows (plus the rotation's granularity). */
	for (; t <= 1000 + 75000 + 15000; t += 1000) {
		uint8_t o[ING_ID_LEN];

		id_of(o, (uint32_t)(100 + t / 1000));
		SM_REQUIRE(ing_ids_set(&x, o, ING_ID_DONE, t) == 0);
	}
	SM_CHECK_EQ(ing_ids_get(&x, a), ING_ID_ABSENT);
	/* A failed write's id is reset, so its retry is applied. */
	SM_CHECK_EQ(ing_ids_set(&x, b, ING_ID_PENDING, t), 0);
	SM_CHECK_EQ(ing_ids_set(&x, b, ING_ID_ABSENT, t), 0);
	SM_CHECK_EQ(ing_ids_get(&x, b), ING_ID_ABSENT);
	ing_ids_fini(&x);
}

static void
test_cap(void)
{
	struct ing_ids x;
	uint8_t id[ING_ID_LEN];
	uint32_t n, kept = 0;
	size_t slots = 0;

	/* 400 ids in one millisecond under max = 100: at most 125 kept,
	 * the newest 100 at least. */
	ing_ids_init(&x, 60000, 100);
	for (n = 0; n < 400; n++) {
		id_of(id, n);
		SM_REQUIRE(ing_ids_set(&x, id, ING_ID_DONE, 5000) == 0);
	}
	for (n = 0; n < 400; n++) {
		id_of(id, n);
		kept += ing_ids_get(&x, id) != ING_ID_ABSENT;
	}
	for (n = 300; n < 400; n++) {
		id_of(id, n);
		SM_CHECK(ing_ids_get(&x, id) == ING_ID_DONE);
	}
	SM_CHECK(kept >= 100 && kept <= 125);
	for (int g = 0; g < ING_ID_GENS; g++)
		slots += x.gen[g].nslots;
	SM_CHECK(slots <= ING_ID_GENS * 64);
	ing_ids_fini(&x);
}

/* Closed generations are packed (ids.h): every id is still found with
 * its state, states still change in place, absent ids stay absent, and
 * a packed set holds exactly its ids. */
static void
test_packed(void)
{
	struct ing_ids x;
	uint8_t id[ING_ID_LEN];
	uint32_t n;
	int packed = 0;

	ing_ids_init(&x, 60000, 1000000);
	/* 1,000 ids a second for 40 s: generations close every 15 s. */
	for (n = 0; n < 40000; n++) {
		id_of(id, n * 2654435761u);
		SM_REQUIRE(ing_ids_set(&x, id, n % 7 == 0 ? ING_ID_PENDING :
		    ING_ID_DONE, 1000 + n) == 0);
	}
	for (int g = 1; g < ING_ID_GENS; g++) {
		if (x.gen[g].n == 0)
			continue;
		SM_CHECK(x.gen[g].rec != NULL && x.gen[g].nslots == 0 &&
		    x.gen[g].key == NULL);
		packed++;
	}
	SM_CHECK_EQ(packed, 2);
	SM_CHECK(x.gen[0].rec == NULL && x.gen[0].nslots > 0);
	for (n = 0; n < 40000; n++) {
		id_of(id, n * 2654435761u);
		SM_CHECK_EQ(ing_ids_get(&x, id), n % 7 == 0 ? ING_ID_PENDING :
		    ING_ID_DONE);
		id_of(id, n * 2654435761u + 1);
		SM_CHECK_EQ(ing_ids_get(&x, id), ING_ID_ABSENT);
	}
	/* The pending ones finish, in whichever set holds them. */
	for (n = 0; n < 40000; n += 7) {
		id_of(id, n * 2654435761u);
		SM_REQUIRE(ing_ids_set(&x, id, n % 2 ? ING_ID_DONE :
		    ING_ID_ABSENT, 41000) == 0);
	}
	for (n = 0; n < 40000; n++) {
		id_of(id, n * 2654435761u);
		SM_CHECK_EQ(ing_ids_get(&x, id), n % 7 != 0 || n % 2 ?
		    ING_ID_DONE : ING_ID_ABSENT);
	}
	SM_CHECK_EQ(x.gen[0].n, 10000);      /* nothing re-added */
	ing_ids_fini(&x);
}

SM_TEST_MAIN(
	{ "ids: remembered a window, forgotten by 1.25, states move", test_window },
	{ "ids: the count cap bounds every generation", test_cap },
	{ "ids: closed generations are packed and still updated",
	    test_packed },
)
