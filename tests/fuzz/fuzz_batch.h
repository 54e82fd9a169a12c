/*
 * fuzz_batch.h -- a distributor batch for the parser targets (fuzz_pprof,
 * fuzz_folded): default limits, in an arena of its own so a small budget
 * reaches the SM_ENOMEM paths.
 */
#ifndef SM_FUZZ_BATCH_H
#define SM_FUZZ_BATCH_H

#include "common/arena.h"
#include "distributor/batch.h"
#include "fuzz.h"

struct fuzz_batch {
	struct sm_arena *a;
	struct dist_limits lim;    /* the batch keeps a pointer to it */
	struct dist_batch b;
};

/*
 * Open f with an arena of `cap` bytes.  Returns -1 when either
 * allocation fails (the input is then skipped), holding nothing.
 */
static inline int
fuzz_batch_open(struct fuzz_batch *f, size_t cap)
{
	if ((f->a = sm_arena_create(cap)) == NULL)
		return (-1);
	dist_limits_default(&f->lim);
	if (dist_batch_init(&f->b, f->a, &f->lim) != 0) {
		sm_arena_destroy(f->a);
		return (-1);
	}
	return (0);
}

static inline void
fuzz_batch_close(struct fuzz_batch *f)
{
	dist_batch_fini(&f->b);
	sm_arena_destroy(f->a);
}

/* A finished batch holds only positive values. */
static inline void
fuzz_batch_check_positive(const struct dist_batch *b)
{
	for (uint32_t i = 0; i < b->nseries; i++)
		for (uint32_t j = 0; j < b->series[i].n; j++)
			FUZZ_CHECK(b->series[i].value[j] > 0,
			    "series %u value %u is %lld", i, j,
			    (long long)b->series[i].value[j]);
}

#endif /* SM_FUZZ_BATCH_H */
