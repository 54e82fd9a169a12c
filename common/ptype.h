/*
 * ptype.h -- profile types: the 5-part ids, the legacy name table, and the
 * display units of /render (docs/wire-formats.md §2, §3, §6).
 *
 * A profile type id is name:sample_type:sample_unit:period_type:period_unit
 * e.g. process_cpu:cpu:nanoseconds:cpu:nanoseconds; parts may be empty
 * (memory:alloc_space:bytes::).  A 6th part ":delta" is accepted and
 * dropped.
 *
 * The legacy table maps the suffix of an og app name (myapp.cpu) to
 * (metric, sample_type, sample_unit) for both /ingest and FlameQL queries:
 *   cpu, itimer            -> process_cpu samples:count  (cpu:nanoseconds
 *                             with period cpu/nanoseconds when the
 *                             sampleRate is not 0; `period` flag below)
 *   wall, seconds, nanoseconds, microseconds, milliseconds
 *                          -> wall samples:count (wall:nanoseconds, period
 *                             cpu/nanoseconds, when sampleRate != 0)
 *   inuse_objects, alloc_objects -> memory X:count
 *   inuse_space, alloc_space     -> memory X:bytes
 *   goroutines             -> goroutine goroutines:count
 *   mutex_count / mutex_duration -> mutex contentions:count / delay:nanoseconds
 *   block_count, lock_count       -> block contentions:count
 *   block_duration, lock_duration -> block delay:nanoseconds
 *   alloc_in_new_tlab_objects, alloc_outside_tlab_objects -> memory X:count
 *   alloc_in_new_tlab_bytes, alloc_outside_tlab_bytes     -> memory X:bytes
 *   live                   -> memory live:count
 *   exceptions             -> exceptions samples:count
 *   bytes                  -> memory samples:bytes
 */
#ifndef SM_PTYPE_H
#define SM_PTYPE_H

#include <stdbool.h>

#include "sm.h"

#define SM_PTYPE_PART_MAX 128

struct sm_ptype {
	char name[SM_PTYPE_PART_MAX];
	char sample_type[SM_PTYPE_PART_MAX];
	char sample_unit[SM_PTYPE_PART_MAX];
	char period_type[SM_PTYPE_PART_MAX];
	char period_unit[SM_PTYPE_PART_MAX];
};

/* Parse an id.  0, or SM_EINVAL when it does not have 5 (or 5 + delta)
 * parts or a part is too long; `out` is zeroed on failure. */
int sm_ptype_parse(const char *id, struct sm_ptype *out);

/* Append-free formatting into `dst` (size n); returns 0 or SM_ETOOBIG. */
int sm_ptype_format(const struct sm_ptype *p, char *dst, size_t n);

struct sm_legacy_type {
	const char *suffix;
	const char *metric;
	const char *sample_type;
	const char *sample_unit;
	bool period;   /* cpu/wall: becomes <x>:nanoseconds with a period */
};

/* Look up a legacy suffix; NULL when unknown. */
const struct sm_legacy_type *sm_legacy_type_lookup(const char *suffix,
    size_t n);

/*
 * The second type a legacy suffix names, or NULL: "goroutines" also
 * names Go's pprof goroutine profile, goroutines:goroutine:count, so
 * `<app>.goroutines` lists (sm_legacy_suffix_for) and selects
 * (sm_query_parse) both forms.
 */
const struct sm_legacy_type *sm_legacy_alias_lookup(const char *suffix,
    size_t n);

/*
 * The legacy type with the sampleRate rule applied: for `period` types and
 * sample_rate != 0, sample_type becomes "cpu" (or "wall"), unit
 * "nanoseconds", period cpu/nanoseconds with period 1e9 / sample_rate
 * (integer division; at least 1, so rates above 1 GHz do not zero values).
 * Fills `out` and *period_ns (0 when there is no period).
 */
void sm_legacy_type_resolve(const struct sm_legacy_type *lt,
    uint32_t sample_rate, struct sm_ptype *out, int64_t *period_ns);

/*
 * The og app-name suffix for a series of (metric, sample_type, unit): the
 * first legacy entry whose query form (the matchers sm_query_parse makes
 * for "app.<suffix>": for cpu/wall entries the sampleRate form
 * <x>:nanoseconds) is exactly this triple, or else the alias entry
 * (sm_legacy_alias_lookup) that is, so "<service>.<suffix>" queries back
 * the same series.  NULL when no suffix names it.
 */
const char *sm_legacy_suffix_for(const char *metric, const char *sample_type,
    const char *sample_unit);

/*
 * Render metadata of the v1 shim (docs/wire-formats.md §3): units "objects" for
 * inuse_objects, alloc_objects, goroutine, samples; "samples" with
 * sampleRate 1e9 for cpu; otherwise the sample unit with sampleRate 100.
 */
void sm_ptype_render_units(const char *sample_type, const char *sample_unit,
    const char **units, uint32_t *sample_rate);

#endif /* SM_PTYPE_H */
