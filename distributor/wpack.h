/*
 * wpack.h -- a write's Request packed by hand, byte for byte what
 * protobuf-c packs.
 *
 * What it serves: dist_batch_encode_rep packs every write once, for the
 * head log's record and the RPC to every replica.  protobuf-c's packer is
 * generic: it sizes the whole message by walking its field descriptors,
 * then walks them again to write, and takes the strlen of every string in
 * both walks.  On B1's files that was about 8 % of decode-and-encode
 * (bench/pprof_stages -s 2), as much as the head's whole apply.  This
 * packer knows the few messages a write holds (Request.write,
 * WriteRequest, StackTree, SeriesWrite, LabelPair, SeriesMeta, Replica):
 * one sizing pass that keeps each string's length and each message's
 * size, then one writing pass.
 *
 * Same bytes, not merely the same message: the head log's records and
 * the idempotency of hinted resends do not depend on it, but a reader
 * comparing records, and the tests, can.  wpack_test checks equality with
 * protobuf-c on messages with every field set, and fails when one of
 * these messages gains a field (its descriptor's field count), so a new
 * field cannot be dropped here unnoticed.
 *
 * Ownership: appends to the caller's buffer; reads the message only.
 * Errors: SM_ENOMEM, with out->len unchanged.  A Request that is not a
 * write is packed by protobuf-c.
 * Locking: none.
 */
#ifndef DIST_WPACK_H
#define DIST_WPACK_H

#include "common/buf.h"
#include "smolder/v1/rpc.pb-c.h"

int dist_wpack_request(const Smolder__V1__Request *env, struct sm_buf *out);

#endif
