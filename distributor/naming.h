/*
 * naming.h -- the /ingest `name` parameter and the labels it produces
 * (docs/wire-formats.md §2, §6; Pyroscope's segment key / labelset parser).
 *
 * `name` is "app.name{k=v,k2=v2}": the part before '{' is the app name;
 * tags are comma-separated key=value pairs whose values end at ',' or '}'
 * and are trimmed of spaces.  Allowed characters: app name
 * [A-Za-z0-9_./-], tag keys [A-Za-z0-9_.]; anything else is an error.  An
 * empty app name is "service name is required".  The key `__name__` is
 * reserved (error).  Tags starting with "__" are dropped, except
 * __session_id__ (which the write batch then drops, batch.h).  A repeated
 * key: the last value wins (at the first
 * key's position); an empty value removes the tag.
 *
 * pprof/JFR uploads: series labels are service_name=<app> (unless a tag
 * sets service_name), __service_name__ (a copy), pyroscope_spy=<spyName>
 * (unless a tag sets it, or spyName is NULL or empty), and the tags.
 * The metric and type labels come from the profile itself.
 *
 * folded/lines/trie uploads: the app name is split at its last '.': the
 * suffix is the type (common/ptype.h legacy table; no '.' means cpu), the
 * rest becomes service_name -- or app_name when a service_name tag exists.
 * Labels: __name__, service_name (+copy), pyroscope_spy, the tags, and the
 * type labels __type__, __unit__, __period_type__, __period_unit__,
 * __profile_type__ (empty period parts give no label; app_name is not
 * added when a tag sets it).  cpu/wall types with sampleRate != 0 become
 * <x>:nanoseconds with period cpu/nanoseconds and `scale` = 1e9/sampleRate
 * (values are multiplied by it).  An unknown suffix is
 * "unknown profile type: <suffix>".
 *
 * All results are allocated in the arena.
 */
#ifndef DIST_NAMING_H
#define DIST_NAMING_H

#include <stdbool.h>

#include "common/arena.h"
#include "common/labels.h"
#include "common/ptype.h"

struct dist_key {
	const char *app;          /* the part before '{' */
	struct sm_label *tags;    /* in input order, unique keys */
	uint32_t ntags;
};

/* Parse `name`.  0, SM_EINVAL (message in err) or SM_ENOMEM. */
int dist_key_parse(const char *name, struct sm_arena *a, struct dist_key *out,
    struct sm_err *err);

/* True if the key has a profile_id tag (such uploads are dropped). */
bool dist_key_has_profile_id(const struct dist_key *k);

/*
 * Base labels of a pprof/JFR upload (see above), unsorted.
 * 0 or SM_ENOMEM.
 */
int dist_key_pprof_labels(const struct dist_key *k, const char *spy_name,
    struct sm_arena *a, struct sm_label **out, uint32_t *n);

/* Complete labels of a folded/lines/trie upload. */
struct dist_legacy {
	struct sm_label *labels;  /* unsorted, complete series label set */
	uint32_t nlabels;
	int64_t scale;            /* multiply every value by this (>= 1) */
	struct sm_ptype type;
};

int dist_key_legacy(const struct dist_key *k, uint32_t sample_rate,
    const char *spy_name, struct sm_arena *a, struct dist_legacy *out,
    struct sm_err *err);

#endif /* DIST_NAMING_H */
