/*
 * labels.h -- label sets: the identity of a series (docs/architecture.md §2).
 *
 * A label set is an array of (name, value) pairs of NUL-terminated strings
 * that someone else owns (an arena, a string table, a protobuf message).
 * The canonical form is sorted by name (bytewise) with unique names; the
 * fingerprint and every storage key use the canonical form.
 *
 * Reserved labels (docs/wire-formats.md §6): __name__ (metric), __profile_type__,
 * __type__, __unit__, __period_type__, __period_unit__, __service_name__,
 * __delta__ (control, stripped before storage), __session_id__.
 */
#ifndef SM_LABELS_H
#define SM_LABELS_H

#include <stdbool.h>

#include "buf.h"
#include "sm.h"

struct sm_label {
	const char *name;
	const char *value;
};

#define SM_LABEL_NAME "__name__"
#define SM_LABEL_PROFILE_TYPE "__profile_type__"
#define SM_LABEL_TYPE "__type__"
#define SM_LABEL_UNIT "__unit__"
#define SM_LABEL_PERIOD_TYPE "__period_type__"
#define SM_LABEL_PERIOD_UNIT "__period_unit__"
#define SM_LABEL_SERVICE_NAME "service_name"
#define SM_LABEL_SERVICE_NAME_COPY "__service_name__"
#define SM_LABEL_DELTA "__delta__"
#define SM_LABEL_SESSION_ID "__session_id__"
#define SM_LABEL_SPY "pyroscope_spy"

/* Limits applied by sm_labels_validate (Pyroscope names, docs/wire-formats.md §7). */
struct sm_label_limits {
	uint32_t max_name_length;     /* max_label_name_length = 1024 */
	uint32_t max_value_length;    /* max_label_value_length = 2048 */
	uint32_t max_names;           /* max_label_names_per_series = 30 */
};

void sm_label_limits_default(struct sm_label_limits *l);

/* Sort by name, bytewise (stable for equal names). */
void sm_labels_sort(struct sm_label *v, uint32_t n);

/* Value of `name` or NULL (linear scan; sets are small). */
const char *sm_labels_get(const struct sm_label *v, uint32_t n,
    const char *name);

/*
 * 64-bit fingerprint of a sorted label set: XXH3 over
 * name 0xff value 0xff ... .  Stable forever (it appears in storage keys).
 */
uint64_t sm_labels_fingerprint(const struct sm_label *v, uint32_t n);

/*
 * Validate a sorted label set as Pyroscope's distributor does (docs/wire-formats.md §6/§7),
 * in this order, returning SM_EINVAL with Pyroscope's message in err:
 *   - more than max_names labels:
 *       "profile series '<ls>' has <n> label names; limit <max>"
 *   - an empty or too long name, or a name that is not valid UTF-8:
 *       "invalid labels '<ls>' with error: ..."
 *   - a value too long or not valid UTF-8 (same prefix)
 *   - duplicate names: "... duplicate label name: <name>"
 *   - __name__ missing, empty or not a valid metric name
 *     ([a-zA-Z_:][a-zA-Z0-9_:]*), service_name missing or empty.
 * `reason` (if not NULL) receives the discarded_* reason string
 * ("invalid_labels", "max_label_names_per_series", "label_name_too_long",
 * "label_value_too_long", "duplicate_label_names").
 */
int sm_labels_validate(const struct sm_label *v, uint32_t n,
    const struct sm_label_limits *lim, const char **reason,
    struct sm_err *err);

/* Append {a="b", c="d"} with Go-style %q escaping of the values. */
void sm_labels_format(const struct sm_label *v, uint32_t n,
    struct sm_buf *out);

/* True if s[0..n) is valid UTF-8 (no overlongs, surrogates, > U+10FFFF). */
bool sm_utf8_valid(const char *s, size_t n);

/*
 * Copy s[0..n) to `out` (room for 3 * n bytes) with every byte that does
 * not start a valid sequence replaced by U+FFFD, one replacement per byte
 * as Go's encoding/json does.  Returns the bytes written.
 */
size_t sm_utf8_repair(const char *s, size_t n, char *out);

/* True if s is a valid Prometheus metric name [a-zA-Z_:][a-zA-Z0-9_:]*. */
bool sm_metric_name_valid(const char *s, size_t n);

#endif /* SM_LABELS_H */
