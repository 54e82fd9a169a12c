/*
 * pbwire.c -- skipping unknown fields and groups (pbwire.h).
 */
#include "pbwire.h"

static int pbw_skip(struct sm_pbw *r, uint32_t field, uint32_t wt,
    int depth);

/* Skip to the end-group key matching `field`.  The group's own fields are
 * not the enclosing message's, so the schema is off inside it. */
static int
pbw_skip_group(struct sm_pbw *r, uint32_t field, int depth)
{
	const uint8_t *schema = r->schema;
	uint32_t f, wt;
	int rv = -1;

	if (depth >= SM_PBW_GROUP_DEPTH) {
		r->why = "groups nested too deeply";
		return (-1);
	}
	r->schema = NULL;
	for (;;) {
		if (r->p == r->end) {
			r->why = "unterminated group";
			break;
		}
		if (sm_pbw_key(r, &f, &wt) != 0)
			break;
		if (wt == SM_PBW_EGROUP) {
			if (f != field)
				r->why = "mismatched end group";
			else
				rv = 0;
			break;
		}
		if (pbw_skip(r, f, wt, depth + 1) != 0)
			break;
	}
	r->schema = schema;
	return (rv);
}

static int
pbw_skip(struct sm_pbw *r, uint32_t field, uint32_t wt, int depth)
{
	const uint8_t *p;
	uint64_t v;
	size_t n;

	switch (wt) {
	case SM_PBW_VARINT:
		return (sm_pbw_varint(r, &v));
	case SM_PBW_I64:
	case SM_PBW_I32:
		n = wt == SM_PBW_I64 ? 8 : 4;
		if ((size_t)(r->end - r->p) < n) {
			r->why = "truncated fixed-width field";
			return (-1);
		}
		r->p += n;
		return (0);
	case SM_PBW_LEN:
		return (sm_pbw_bytes(r, &p, &n));
	case SM_PBW_SGROUP:
		return (pbw_skip_group(r, field, depth));
	default:
		r->why = "unexpected end group";
		return (-1);
	}
}

int
sm_pbw_skip(struct sm_pbw *r, uint32_t field, uint32_t wt)
{
	return (pbw_skip(r, field, wt, 0));
}
