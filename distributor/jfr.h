/*
 * jfr.h -- Java Flight Recorder ingestion: a JFR recording (as
 * pyroscope-java / async-profiler or the JDK write it) -> write batch.
 *
 * Format (JFR 2.0 and 2.1, the JDK's own documentation of the chunk
 * layout, and grafana/jfr-parser for what Pyroscope does with it):
 *   - A recording is one or more chunks laid end to end.  Each chunk has a
 *     68-byte big-endian header (magic "FLR\0", major 2, minor 0 or 1,
 *     chunk size, constant pool offset, metadata offset, start nanos,
 *     duration, start ticks, ticks per second, features) and is
 *     self-contained: its own metadata and constant pools.  Feature bit 0
 *     says integers are LEB128 varints (a long's 9th byte carries 8 bits);
 *     without it they are fixed-width big-endian.  Both are read.
 *   - Records: size, type id, payload.  Type 0 is the metadata record (a
 *     string table, then an element tree root > metadata > class > field
 *     giving every type's fields in order, with constantPool and
 *     dimension attributes), type 1 a checkpoint (constant pools; each
 *     points back to the previous one by a relative delta, 0 ends the
 *     chain; one type's pool may be split over several checkpoints).
 *     Every other type is an event, decoded field by field from the
 *     metadata, so producer-specific extra fields are skipped correctly.
 *   - Constant-pool keys are read as full 64-bit values everywhere
 *     (recordings with keys above 2^32 exist).  Pools are indexed as
 *     (type, key) -> offset of the encoded value, decoded lazily when a
 *     stack, method, class or symbol is first needed, then cached.
 *
 * Events (Pyroscope's JFR conversion, grafana/jfr-parser pprof/):
 *   jdk.ExecutionSample           process_cpu  cpu:nanoseconds (period cpu)
 *                                 (only when its thread state resolves and
 *                                 is not STATE_SLEEPING); also wall when
 *                                 the recording's last seen jdk.ActiveSetting
 *                                 "event" is "wall"
 *   profiler.WallClockSample      wall         wall:nanoseconds (period wall)
 *                                 value = samples field * period; when
 *                                 the event has a state field (async-
 *                                 profiler 3) resolving to a state other
 *                                 than STATE_SLEEPING, also one
 *                                 process_cpu sample (period), as
 *                                 jfr-parser does
 *   jdk.ObjectAllocationInNewTLAB memory alloc_in_new_tlab_objects:count,
 *                                 alloc_in_new_tlab_bytes:bytes (tlabSize)
 *   jdk.ObjectAllocationOutsideTLAB memory alloc_outside_tlab_objects:count,
 *                                 alloc_outside_tlab_bytes:bytes
 *                                 (allocationSize)       period space/bytes
 *   jdk.ObjectAllocationSample    memory alloc_sample_objects:count,
 *                                 alloc_sample_bytes:bytes (weight)
 *   jdk.JavaMonitorEnter          mutex contentions:count, delay:nanoseconds
 *                                 (duration)             period mutex/count
 *   jdk.ThreadPark                block contentions:count, delay:nanoseconds
 *                                 (duration)             period block/count
 *   profiler.LiveObject           memory live:count      period objects/count
 *   profiler.Malloc               memory malloc_objects:count,
 *                                 malloc_bytes:bytes (size), no period
 *   cpu and wall values are period = 1e9 / sampleRate ns per sample
 *   (0 when sampleRate is 0, so nothing is stored, as Pyroscope).
 *   Durations are taken as recorded, like jfr-parser (async-profiler and
 *   the JDK on Linux record nanosecond ticks).  Other events are skipped.
 *
 * Stacks: a frame is "<class>.<method>" with the class name as recorded
 * ("java/lang/Thread.run"); JVM-generated names are merged the way
 * jfr-parser does (GeneratedMethodAccessor<N> -> GeneratedMethodAccessor_,
 * <X>$$Lambda<suffix> -> <X>$$Lambda_, libzstd-jni, Corretto crypto and
 * pyroscope's async-profiler library names).  Frames whose method or class
 * is missing from the pools are dropped (as jfr-parser); an unknown symbol
 * reads as "".  Frames are emitted root first; deeper stacks than
 * limits->max_depth keep their root frames (as the pprof path).  With
 * in->line_numbers each frame is "<name>:<line>" (the jfr-parser golden
 * form; tests only).
 *
 * Labels (series): the type labels (__name__, __type__, __unit__,
 * __period_type__, __period_unit__, __profile_type__; empty period parts
 * give no label), then in->base, then jfr_event=<the recording's "event"
 * setting> (when set), then the sample's context labels: with a
 * LabelsSnapshot (in->labels, protobuf LabelsSnapshot{map<int64,Context>
 * contexts=1; map<int64,string> strings=2}, Context{map<int64,int64>
 * labels=1}), an event's contextId selects the labels, and a non-zero
 * spanName field adds span_name=<strings[spanName]>.  Earlier labels win
 * a name conflict; labels with an empty name or value are dropped.  The
 * span id (profile_id) is an exemplar in Pyroscope and never splits a
 * series, so it is not stored.
 *
 * Limits: the decompressed recording may not exceed in->max_bytes
 * (SM_ETOOBIG; Pyroscope applies max_profile_size_bytes to each converted
 * profile, not to the recording, so the recording gets the request body
 * limit); per profile type, the distinct (stack, label set) samples may not
 * exceed limits->max_samples (SM_ELIMIT); a sample's context labels beyond
 * limits->max_sample_labels are refused (SM_EMALFORMED); frame names and
 * label sets are limited by the batch.
 *
 * Memory (streaming): a gzip recording is inflated with zlib one chunk at
 * a time into a buffer the size of the largest chunk, parsed, and the
 * buffer reused; a raw recording is parsed in place.  Per-chunk indexes
 * (metadata, pool offsets, caches) are freed after each chunk.  What stays
 * is the batch: the distinct frames, stack nodes and (series, stack) sums.
 *
 * Errors: every malformed or truncated input is SM_EMALFORMED with what
 * and where ("jfr: chunk 2 at offset 81234: ..."), an unsupported version
 * SM_EUNSUPPORTED; /ingest answers both with 422.  Nothing in the input
 * can crash the reader: every read is bounds-checked, recursion is
 * depth-limited, counts are checked against the bytes left.
 */
#ifndef DIST_JFR_H
#define DIST_JFR_H

#include <stdbool.h>

#include "batch.h"

struct dist_jfr_in {
	const struct sm_label *base;   /* labels every series gets */
	uint32_t nbase;
	const uint8_t *labels;         /* decompressed LabelsSnapshot or NULL */
	size_t labels_len;
	uint32_t sample_rate;          /* Hz, for the cpu/wall period */
	int64_t time_ms;               /* where the profiles are placed */
	size_t max_bytes;              /* decompressed recording limit */
	bool line_numbers;             /* frames "name:line" (tests) */
};

/*
 * Parse the recording `data[0..len)` (raw or gzip, detected by magic) and
 * add its series to `b`.  Returns 0, SM_EMALFORMED, SM_EUNSUPPORTED,
 * SM_ETOOBIG, SM_ELIMIT, SM_EINVAL (invalid series labels) or SM_ENOMEM
 * with the message in err.  On failure the batch must be discarded.
 */
int dist_jfr_ingest(const uint8_t *data, size_t len,
    const struct dist_jfr_in *in, struct dist_batch *b, struct sm_err *err);

/*
 * One /ingest?format=jfr request body: a multipart form (Content-Type
 * multipart/form-data) with a required "jfr" part and an optional
 * "labels" part, or else the recording itself.  Either part may be
 * gzipped; the labels are inflated (at most labels_cap bytes) into
 * b->arena.  `tmpl` gives everything but the labels.  Errors as
 * dist_jfr_ingest, plus the multipart parser's.
 */
int dist_jfr_upload(const char *content_type, const uint8_t *body,
    size_t len, const struct dist_jfr_in *tmpl, size_t labels_cap,
    struct dist_batch *b, struct sm_err *err);

#endif /* DIST_JFR_H */
