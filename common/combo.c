/*
 * combo.c -- exact integer combinations of replicas (combo.h).
 */
#include "combo.h"

bool
sm_combo_solve(const uint32_t *masks, uint32_t m, int prefer, uint32_t *pos,
    uint32_t *neg)
{
	uint32_t all = ~0u, any = 0, src[SM_COMBO_MAX];
	uint32_t ns = 0, combos = 1;

	for (uint32_t i = 0; i < m; i++) {
		all &= masks[i];
		any |= masks[i];
	}
	*pos = *neg = 0;
	if (m == 0)
		return (false);
	if (prefer >= 0 && prefer < 32 && (all >> prefer) & 1) {
		*pos = 1u << prefer;
		return (true);
	}
	if (all != 0) {
		*pos = all & -all;    /* the lowest replica holding all */
		return (true);
	}
	for (uint32_t b = 0; b < 32; b++) {
		if (!((any >> b) & 1))
			continue;
		if (ns == SM_COMBO_MAX)
			return (false);
		src[ns++] = b;
		combos *= 3;
	}
	for (uint32_t v = 1; v < combos; v++) {
		uint32_t p = 0, q = 0, x = v;
		bool ok = true;

		for (uint32_t k = 0; k < ns; k++, x /= 3) {
			if (x % 3 == 1)
				p |= 1u << src[k];
			else if (x % 3 == 2)
				q |= 1u << src[k];
		}
		for (uint32_t i = 0; ok && i < m; i++)
			ok = __builtin_popcount(masks[i] & p) -
			    __builtin_popcount(masks[i] & q) == 1;
		if (ok) {
			*pos = p;
			*neg = q;
			return (true);
		}
	}
	return (false);
}
