/*
 * pbjson.h -- canonical proto3 JSON for protobuf-c messages, driven by the
 * generated descriptors (so every message, present and future, gets JSON
 * for free).  Used by the Connect API (common/connect.h), which must accept
 * and produce application/json as well as application/proto (docs/wire-formats.md §5).
 *
 * Encoding (what Go's protojson writes, which connect-go uses):
 *   - field names in lowerCamelCase computed as protoc computes json_name
 *     (drop each '_' and upper-case the next letter: profile_typeID ->
 *     profileTypeID, labels_set -> labelsSet, ID -> ID);
 *   - int64, uint64, sint64, fixed64, sfixed64 as JSON strings; 32-bit
 *     integers as numbers; double/float as numbers (NaN, Infinity,
 *     -Infinity as strings); bool as true/false;
 *   - enums by value name ("PROFILE_FORMAT_FLAMEGRAPH"), or the number when
 *     the value has no name;
 *   - bytes as standard base64 with padding;
 *   - proto3 default values and empty repeated fields are omitted, so an
 *     empty message is {}; a set message field is always written, even if
 *     empty; oneof members are written when set;
 *   - strings escaped with sm_buf_json_str; no whitespace.
 * Decoding accepts:
 *   - lowerCamelCase or the original proto field name;
 *   - numbers or strings for every integer type (with range checks), numbers
 *     or strings (numeric, "NaN", "Infinity", "-Infinity") for floating
 *     point;
 *   - enum names or numbers; base64 in standard or URL alphabet, padded or
 *     not;
 *   - null for any field (= default); unknown fields and unknown enum
 *     names are ignored (as connect-go's protojson options,
 *     DiscardUnknown, do: the field keeps its default, a repeated field
 *     drops the element).
 *   Errors (SM_EINVAL with a message naming the field path): wrong JSON
 *   type for a field, out-of-range integer, bad base64,
 *   nesting deeper than 64, not an object at top level.  SM_ENOMEM when
 *   the arena runs out.
 *
 * Memory: decoded messages are allocated from the arena and must not be
 * freed with protobuf_c_message_free_unpacked.
 */
#ifndef SM_PBJSON_H
#define SM_PBJSON_H

#include <protobuf-c/protobuf-c.h>

#include "arena.h"
#include "buf.h"
#include "sm.h"

int sm_pbjson_decode(const ProtobufCMessageDescriptor *d, const char *json,
    size_t len, struct sm_arena *a, ProtobufCMessage **out,
    struct sm_err *err);

/*
 * sm_pbjson_decode with flags.  SM_PBJSON_HEX_IDS: bytes fields named
 * trace_id, span_id and profile_id are hex strings, not base64 -- OTLP's
 * JSON encoding (distributor/otlp.c).
 */
#define SM_PBJSON_HEX_IDS 1u
int sm_pbjson_decode_flags(const ProtobufCMessageDescriptor *d,
    const char *json, size_t len, unsigned flags, struct sm_arena *a,
    ProtobufCMessage **out, struct sm_err *err);

void sm_pbjson_encode(const ProtobufCMessage *m, struct sm_buf *out);

/* The proto3 JSON name of a field (writes into dst, returns dst). */
const char *sm_pbjson_field_name(const ProtobufCFieldDescriptor *f,
    char *dst, size_t n);

#endif /* SM_PBJSON_H */
