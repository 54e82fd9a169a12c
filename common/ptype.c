/*
 * ptype.c -- profile type ids, the legacy type table and render units;
 * see ptype.h.
 *
 * The legacy table is the one place that knows how an og app-name suffix
 * (myapp.cpu, myapp.alloc_space) maps to a v1 profile type.  /ingest uses
 * it to label folded/lines/trie uploads and the querier uses it to turn a
 * FlameQL query into matchers, so both sides agree by construction.
 */
#include "ptype.h"

#include <string.h>

/* Copy s[0..n) into a part buffer; SM_EINVAL when it does not fit. */
static int
ptype_part(char *dst, const char *s, size_t n)
{
	if (n >= SM_PTYPE_PART_MAX)
		return (SM_EINVAL);
	memcpy(dst, s, n);
	dst[n] = '\0';
	return (0);
}

int
sm_ptype_parse(const char *id, struct sm_ptype *out)
{
	char *parts[5] = { out->name, out->sample_type, out->sample_unit,
		out->period_type, out->period_unit };
	const char *p = id, *c;
	int i;

	for (i = 0; i < 5; i++) {
		c = strchr(p, ':');
		if (c == NULL) {
			if (i != 4)
				goto bad;
			c = p + strlen(p);
		}
		if (ptype_part(parts[i], p, (size_t)(c - p)) != 0)
			goto bad;
		p = *c == ':' ? c + 1 : c;
		if (*c == '\0')
			break;
	}
	if (i == 5) {
		/* There was a ':' after the 5th part: only "delta" may follow. */
		if (strcmp(p, "delta") != 0)
			goto bad;
	}
	return (0);
bad:
	memset(out, 0, sizeof(*out));
	return (SM_EINVAL);
}

int
sm_ptype_format(const struct sm_ptype *p, char *dst, size_t n)
{
	int len;

	len = snprintf(dst, n, "%s:%s:%s:%s:%s", p->name, p->sample_type,
	    p->sample_unit, p->period_type, p->period_unit);
	if (len < 0 || (size_t)len >= n) {
		if (n > 0)
			dst[0] = '\0';
		return (SM_ETOOBIG);
	}
	return (0);
}

/*
 * Pyroscope's convertMetadata (ingest_adapter.go), as a table.  `period`
 * marks the types whose metric is process_cpu or wall: those get the
 * sampleRate treatment in sm_legacy_type_resolve.
 */
static const struct sm_legacy_type legacy_types[] = {
	{ "cpu", "process_cpu", "samples", "count", true },
	{ "itimer", "process_cpu", "samples", "count", true },
	{ "wall", "wall", "samples", "count", true },
	{ "seconds", "wall", "samples", "count", true },
	{ "nanoseconds", "wall", "samples", "count", true },
	{ "microseconds", "wall", "samples", "count", true },
	{ "milliseconds", "wall", "samples", "count", true },
	{ "inuse_objects", "memory", "inuse_objects", "count", false },
	{ "alloc_objects", "memory", "alloc_objects", "count", false },
	{ "inuse_space", "memory", "inuse_space", "bytes", false },
	{ "alloc_space", "memory", "alloc_space", "bytes", false },
	{ "goroutines", "goroutine", "goroutines", "count", false },
	{ "mutex_count", "mutex", "contentions", "count", false },
	{ "mutex_duration", "mutex", "delay", "nanoseconds", false },
	{ "block_count", "block", "contentions", "count", false },
	{ "lock_count", "block", "contentions", "count", false },
	{ "block_duration", "block", "delay", "nanoseconds", false },
	{ "lock_duration", "block", "delay", "nanoseconds", false },
	{ "alloc_in_new_tlab_objects", "memory", "alloc_in_new_tlab_objects",
	    "count", false },
	{ "alloc_outside_tlab_objects", "memory", "alloc_outside_tlab_objects",
	    "count", false },
	{ "alloc_in_new_tlab_bytes", "memory", "alloc_in_new_tlab_bytes",
	    "bytes", false },
	{ "alloc_outside_tlab_bytes", "memory", "alloc_outside_tlab_bytes",
	    "bytes", false },
	{ "live", "memory", "live", "count", false },
	{ "exceptions", "exceptions", "samples", "count", false },
	{ "bytes", "memory", "samples", "bytes", false },
};

/*
 * Types that profilers name differently from the legacy table but that a
 * legacy app name must also find: Go's goroutine profile arrives as
 * goroutines:goroutine:count (pprof.h's metric rule), while an og
 * `<app>.goroutines` upload is goroutine:goroutines:count.  Pyroscope
 * shows both as `<app>.goroutines`.
 */
static const struct sm_legacy_type legacy_aliases[] = {
	{ "goroutines", "goroutines", "goroutine", "count", false },
};

/* The entry of tab[0..ntab) whose suffix is suffix[0..n), or NULL. */
static const struct sm_legacy_type *
legacy_find(const struct sm_legacy_type *tab, size_t ntab,
    const char *suffix, size_t n)
{
	for (size_t i = 0; i < ntab; i++) {
		const struct sm_legacy_type *lt = &tab[i];

		if (strlen(lt->suffix) == n && memcmp(lt->suffix, suffix, n) == 0)
			return (lt);
	}
	return (NULL);
}

const struct sm_legacy_type *
sm_legacy_alias_lookup(const char *suffix, size_t n)
{
	return (legacy_find(legacy_aliases, SM_ARRAY_LEN(legacy_aliases),
	    suffix, n));
}

const struct sm_legacy_type *
sm_legacy_type_lookup(const char *suffix, size_t n)
{
	return (legacy_find(legacy_types, SM_ARRAY_LEN(legacy_types), suffix,
	    n));
}

/* strcpy into a part buffer; every table string is far below the max. */
static void
ptype_set(char *dst, const char *s)
{
	size_t n = strlen(s);

	SM_ASSERT(n < SM_PTYPE_PART_MAX);
	memcpy(dst, s, n + 1);
}

void
sm_legacy_type_resolve(const struct sm_legacy_type *lt, uint32_t sample_rate,
    struct sm_ptype *out, int64_t *period_ns)
{
	SM_ASSERT(lt != NULL);
	memset(out, 0, sizeof(*out));
	*period_ns = 0;
	ptype_set(out->name, lt->metric);
	if (!lt->period || sample_rate == 0) {
		ptype_set(out->sample_type, lt->sample_type);
		ptype_set(out->sample_unit, lt->sample_unit);
		return;
	}
	/* The sample type is named after the metric: wall stays "wall",
	 * process_cpu becomes "cpu".  The period type is cpu for both, as
	 * Pyroscope writes it. */
	ptype_set(out->sample_type,
	    strcmp(lt->metric, "wall") == 0 ? "wall" : "cpu");
	ptype_set(out->sample_unit, "nanoseconds");
	ptype_set(out->period_type, "cpu");
	ptype_set(out->period_unit, "nanoseconds");
	/* Integer division as in Pyroscope; a rate above 1 GHz would give 0
	 * and zero every value, so the period is at least 1 ns. */
	*period_ns = 1000000000LL / (int64_t)sample_rate;
	if (*period_ns < 1)
		*period_ns = 1;
}

const char *
sm_legacy_suffix_for(const char *metric, const char *sample_type,
    const char *sample_unit)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(legacy_types); i++) {
		const struct sm_legacy_type *lt = &legacy_types[i];
		const char *t = lt->sample_type, *u = lt->sample_unit;

		if (lt->period) {
			t = strcmp(lt->metric, "wall") == 0 ? "wall" : "cpu";
			u = "nanoseconds";
		}
		if (strcmp(lt->metric, metric) == 0 &&
		    strcmp(t, sample_type) == 0 && strcmp(u, sample_unit) == 0)
			return (lt->suffix);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(legacy_aliases); i++) {
		const struct sm_legacy_type *lt = &legacy_aliases[i];

		if (strcmp(lt->metric, metric) == 0 &&
		    strcmp(lt->sample_type, sample_type) == 0 &&
		    strcmp(lt->sample_unit, sample_unit) == 0)
			return (lt->suffix);
	}
	return (NULL);
}

void
sm_ptype_render_units(const char *sample_type, const char *sample_unit,
    const char **units, uint32_t *sample_rate)
{
	static const char *const objects[] = { "inuse_objects",
		"alloc_objects", "goroutine", "samples" };

	*units = sample_unit;
	*sample_rate = 100;
	for (size_t i = 0; i < SM_ARRAY_LEN(objects); i++) {
		if (strcmp(sample_type, objects[i]) == 0) {
			*units = "objects";
			return;
		}
	}
	if (strcmp(sample_type, "cpu") == 0) {
		*units = "samples";
		*sample_rate = 1000000000u;
	}
}
