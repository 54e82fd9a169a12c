/*
 * speedscope.h -- /ingest?format=speedscope: speedscope's JSON file format
 * (its schema: https://www.speedscope.app/file-format-schema.json), what
 * speedscope exports and py-spy and rbspy can write, read as Pyroscope v1
 * reads it (docs/wire-formats.md §2).
 *
 * The document: an object whose "$schema" is that URL (anything else is
 * "unknown schema"), "shared": {"frames": [{"name": ..}, ..]} (file, line
 * and col are not kept) and "profiles": [..], in any member order.
 * Each profile has "type" ("evented" or "sampled"), "name", "unit"
 * (none, nanoseconds, microseconds, milliseconds, seconds or bytes) and
 * "startValue":
 *   evented  "events": [{"type": "O" | "C", "at": t, "frame": i}], `at`
 *            non-decreasing from startValue; a "C" closes the frame on
 *            top.  The time between two events belongs to the stack open
 *            between them; frames still open after the last event count
 *            nothing after it (as v1);
 *   sampled  "samples": [[i, ..]] (frame indices, root first) and
 *            "weights": [w, ..], one weight >= 0 per sample.
 *
 * Series: one per profile, labelled profile_name=<name> (no label for an
 * empty name), as v1 does.  Profiles with the same name, type, unit and
 * startValue are one (v1 merges them before anything else).  When more
 * than one is left, each series is named "<app>.<unit>" -- the unit is
 * then the legacy type suffix, so seconds and the other time units are
 * wall, bytes is memory:samples:bytes and none is "unknown profile type:
 * none", all as v1 -- and otherwise the upload's `name` names it as for
 * folded text (naming.h; no suffix is cpu).
 *
 * Values, where Smolder keeps v1's intent rather than its arithmetic
 * (v1 truncates each weight to an integer before scaling, adds an open
 * event's elapsed time unscaled, and its nanosecond rate overflows to
 * values of 0):
 *   - a cpu or wall series with a sample rate (the <x>:nanoseconds
 *     types): time units become nanoseconds; none and bytes count
 *     samples at the upload's sampleRate (100 Hz: 10 ms each);
 *   - any other series: the weight itself, rounded to an integer.
 * The sample rate that picks the type is v1's: the upload's sampleRate,
 * except that the default 100 with unit bytes is 0 (counts).
 *
 * Stacks deeper than limits->max_depth keep their root frames.  Memory:
 * the document is read in place by a small JSON scanner (no tree of
 * values: a JSON tree of numbers costs tens of times the body), walked
 * once to check it, once for the frames and twice over the profiles
 * (first to see whether they are all alike, then for their stacks); what
 * is kept is the frame table (20 bytes a frame, each at least 3 bytes
 * of JSON: under 7 times the body), escaped names decoded, and an
 * evented profile's open frames -- nothing per profile or sample.
 *
 * Errors: SM_EINVAL naming what is wrong (400), SM_ETOOBIG (the batch's
 * stack tree limit), SM_ENOMEM.  The batch may hold part of the upload
 * after a failure; the caller drops it.
 */
#ifndef DIST_SPEEDSCOPE_H
#define DIST_SPEEDSCOPE_H

#include "batch.h"
#include "naming.h"

int dist_speedscope_ingest(const uint8_t *body, size_t len,
    const struct dist_key *key, uint32_t sample_rate, const char *spy_name,
    int64_t time_ms, struct sm_arena *a, struct dist_batch *b,
    struct sm_err *err);

#endif /* DIST_SPEEDSCOPE_H */
