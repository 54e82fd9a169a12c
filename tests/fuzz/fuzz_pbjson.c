/*
 * fuzz_pbjson.c -- the Connect JSON codec (common/pbjson.c): what
 * common/connect.c does with an application/json request body.
 *
 * Input: byte 0 picks the message type (the request types the Connect
 * routes register, push.v1.PushRequest, plus a few responses and
 * google.v1.Profile for the wider field-type coverage); the rest is the
 * JSON text.  Properties: a failure is SM_EINVAL or SM_ENOMEM with a
 * message and *out NULL; a decoded message encodes to JSON that decodes
 * again and re-encodes to the same bytes (encode . decode is a fixed
 * point), and packs as protobuf.
 */
#include "common/pbjson.h"

#include <string.h>

#include "fuzz.h"
#include "google/v1/profile.pb-c.h"
#include "push/v1/push.pb-c.h"
#include "querier/v1/querier.pb-c.h"
#include "types/v1/types.pb-c.h"

static const ProtobufCMessageDescriptor *const types[] = {
	&push__v1__push_request__descriptor,
	&querier__v1__profile_types_request__descriptor,
	&types__v1__label_names_request__descriptor,
	&types__v1__label_values_request__descriptor,
	&querier__v1__series_request__descriptor,
	&querier__v1__select_merge_stacktraces_request__descriptor,
	&querier__v1__select_series_request__descriptor,
	&querier__v1__select_merge_profile_request__descriptor,
	&querier__v1__diff_request__descriptor,
	&querier__v1__select_merge_stacktraces_response__descriptor,
	&querier__v1__series_response__descriptor,
	&querier__v1__select_series_response__descriptor,
	&querier__v1__diff_response__descriptor,
	&google__v1__profile__descriptor,
};

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const ProtobufCMessageDescriptor *d;
	ProtobufCMessage *m = (ProtobufCMessage *)1, *m2 = NULL;
	struct sm_arena *a;
	struct sm_buf j1, j2;
	struct sm_err err;
	uint8_t *packed;
	size_t plen;
	int rv;

	if (size < 1)
		return (0);
	d = types[data[0] % (sizeof(types) / sizeof(types[0]))];
	if ((a = sm_arena_create(size % 5 == 2 ? 32 * 1024 :
	    64u << 20)) == NULL)
		return (0);
	sm_err_clear(&err);
	rv = sm_pbjson_decode(d, (const char *)data + 1, size - 1, a, &m,
	    &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(rv == SM_EINVAL || rv == SM_ENOMEM, "code %d", rv);
		FUZZ_CHECK(m == NULL, "*out set on error");
		sm_arena_destroy(a);
		return (0);
	}
	FUZZ_CHECK(m != NULL && m->descriptor == d, "wrong message");
	sm_buf_init(&j1);
	sm_buf_init(&j2);
	sm_pbjson_encode(m, &j1);
	FUZZ_CHECK(j1.err == 0, "encode: %d", j1.err);
	rv = sm_pbjson_decode(d, j1.b, j1.len, a, &m2, &err);
	if (rv == SM_ENOMEM)
		goto out;	/* the small budget ran out: no round trip */
	FUZZ_CHECK(rv == 0, "own output does not decode: %s\n  %.*s",
	    err.msg, (int)j1.len, j1.b);
	sm_pbjson_encode(m2, &j2);
	FUZZ_CHECK(j1.len == j2.len && memcmp(j1.b, j2.b, j1.len) == 0,
	    "round trip differs:\n  %.*s\n  %.*s", (int)j1.len, j1.b,
	    (int)j2.len, j2.b);
	plen = protobuf_c_message_get_packed_size(m);
	if ((packed = malloc(plen ? plen : 1)) != NULL) {
		FUZZ_CHECK(protobuf_c_message_pack(m, packed) == plen,
		    "pack size");
		free(packed);
	}
out:
	sm_buf_fini(&j1);
	sm_buf_fini(&j2);
	sm_arena_destroy(a);
	return (0);
}
