/*
 * pprof.h -- pprof (profile.proto) ingestion: decoded bytes -> write batch.
 *
 * The decoder walks the protobuf wire format directly (no protobuf-c
 * unpack, no allocation per sample): a first pass indexes the string table,
 * sample types, period, time, functions, locations and mappings into arena
 * arrays; a second pass streams the samples straight into the batch.
 * Unknown fields are skipped (Pyroscope's copy of the proto lacks doc_url
 * and column; newer producers may add more).
 *
 * Conversion (Pyroscope v1 /ingest, docs/wire-formats.md §1/§2/§6 and pkg/og/convert/pprof):
 *   - One series per (sample type, distinct set of string sample labels).
 *     Series labels = in->base (from the /ingest name and query) plus the
 *     sample's string labels (the base wins on a name conflict) plus, per
 *     sample type: __name__ = metric, __type__, __unit__, __period_type__,
 *     __period_unit__, __profile_type__ = metric:type:unit:ptype:punit.
 *     Numeric labels are ignored; labels span_id, trace_id and profile_id
 *     are per-sample (exemplars) and never split series.
 *   - The metric (__name__) is one per profile: "wall" if any sample type
 *     is wall; otherwise, applying sample_type_config display names (a
 *     non-NULL config replaces the defaults samples->cpu,
 *     goroutine->goroutines, contentions->mutex_count,
 *     delay->mutex_duration), the first type, in order, that matches
 *     decides (Pyroscope's substring tests): containing "cpu" ->
 *     process_cpu; containing alloc_ or inuse_, or space / objects ->
 *     memory; containing mutex_ -> mutex; block_ -> block; goroutines ->
 *     goroutines; when nothing matches, the last type's (display) name, as
 *     Pyroscope does.  (in->metric, when set, overrides all this.)
 *   - Stacks: location_id[0] is the leaf; frames are emitted root first.
 *     Within a location, Line entries are expanded last to first (the last
 *     is the caller, earlier ones are inlined callees), as go tool pprof.
 *     A location with no lines becomes one frame named
 *     "0x<hex address>" or, when its mapping has a file name,
 *     "0x<hex address> [<mapping file basename>]", so unsymbolized frames
 *     stay distinct per mapping+address.  Depth is capped at
 *     limits->max_depth frames, keeping the root side.
 *   - Spies pyspy, rbspy and scripting: each function name becomes
 *     "<filename>:-1 - <name>" (Pyroscope's FixFunctionNamesForScripting).
 *   - Spy dotnetspy: if every function id is 0 and functions and
 *     locations are equally many, function i gets location i's id
 *     (FixFunctionIDForBrokenDotnet); '-' in sample type names becomes '_'.
 *   - Sample values are signed: a zero value is dropped per type, a
 *     negative one is kept (delta heap profiles carry them, and
 *     per-stack sums must equal go tool pprof's); samples with no
 *     locations are dropped.
 *
 * Validation (docs/wire-formats.md §7 malformed_profile; each answered 422 by /ingest):
 * no sample types ("empty profile"); a location or function id of 0; a
 * sample whose value count differs from the sample type count; a
 * string_table[0] that is not ""; any string index out of range (sample
 * type, label key/str, function name/system_name/filename, mapping
 * filename/build_id, period type); a sample referencing an unknown
 * location, or a line an unknown function; a sample type containing '-'
 * (after the dotnet fix); strings that are not valid UTF-8; more than
 * limits->max_samples samples ("samples_limit"); more than
 * limits->max_sample_labels labels on one sample. Truncated or otherwise
 * undecodable wire data is malformed too.  Every such failure returns
 * SM_EMALFORMED with a precise message in err (what, and which
 * index/id); SM_ELIMIT for the samples limit.
 */
#ifndef DIST_PPROF_H
#define DIST_PPROF_H

#include "batch.h"

/* One sample_type_config entry (pyroscope-go's multipart field). */
struct dist_st_config {
	const char *sample_type;    /* key, e.g. "alloc_space" */
	const char *display_name;   /* may be NULL */
};

struct dist_pprof_in {
	const struct sm_label *base;   /* labels every series gets */
	uint32_t nbase;
	const char *spy_name;          /* for the name/ID fixes; may be NULL */
	const struct dist_st_config *st_config;   /* may be NULL */
	uint32_t nst_config;
	const char *metric;            /* override the computed metric; NULL */
	int64_t time_ms;               /* where the profile is placed */
};

/*
 * Decode `raw[0..len)` (already decompressed) and add its series to `b`.
 * Returns 0, SM_EMALFORMED, SM_ELIMIT, SM_EINVAL (invalid series labels,
 * from dist_batch_series) or SM_ENOMEM, with the message in err.  On
 * failure the batch may hold partial data and must be discarded.
 */
int dist_pprof_ingest(const uint8_t *raw, size_t len,
    const struct dist_pprof_in *in, struct dist_batch *b, struct sm_err *err);

/*
 * The metric name the rules above give for a profile's sample types
 * (exposed for tests and for the folded/JFR paths).  `types` holds the
 * sample type names.  Returns a static string, or one of the given names
 * (or display names) when no rule matches.
 */
const char *dist_pprof_metric(const char *const *types, uint32_t ntypes,
    const struct dist_st_config *cfg, uint32_t ncfg);

#endif /* DIST_PPROF_H */
