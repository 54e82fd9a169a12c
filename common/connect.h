/*
 * connect.h -- Connect unary RPC over HTTP/1.1 (docs/wire-formats.md §5), the protocol of
 * Pyroscope's push.v1 and querier.v1 services, served on the same HTTP
 * server as the legacy API.
 *
 * Request: POST /<package>.<Service>/<Method>; Content-Type
 * application/proto (binary protobuf) or application/json (canonical proto3
 * JSON, common/pbjson.h), optionally with "; charset=utf-8"; any other
 * codec -> 415.  The body is the bare message; an empty body is the empty
 * message.  Content-Encoding: identity or gzip (inflated with the same
 * size cap as the body limit, sm_gunzip); any other encoding -> error code
 * unimplemented.  Connect-Protocol-Version is accepted but not required
 * (connect-go's default; Pyroscope's UI omits it).  Connect-Timeout-Ms,
 * when present, is parsed and handed to the handler as a deadline (at most
 * 10 digits, else invalid_argument).  GET -> 405.
 *
 * Response: 200 with the request's codec and the bare message, or a Connect
 * error: application/json {"code":"...","message":"..."} with the HTTP
 * status of docs/wire-formats.md §5's table (invalid_argument 400, unauthenticated 401,
 * permission_denied 403, not_found 404, resource_exhausted 429, internal /
 * unknown / data_loss 500, unimplemented 501, unavailable 503,
 * deadline_exceeded 504, ...).  SM_E* codes from a handler map to Connect
 * codes with sm_connect_code_for().  Response compression: gzip when the
 * client sent Accept-Encoding with gzip and the body is larger than 1 KiB.
 *
 * gRPC-web: the same routes serve gRPC-web (docs/wire-formats.md §5):
 * application/grpc-web[+proto|+json] and application/grpc-web-text[+proto]
 * (base64 bodies); the request is one length-prefixed frame (compressed
 * with grpc-encoding gzip, or not), grpc-timeout gives the deadline; the
 * answer is a data frame and a trailer frame with grpc-status 0, or, on
 * an error, a 200 with grpc-status and grpc-message headers and no body
 * (gRPC's codes are Connect's, numbered 1-16).
 *
 * Ownership: the request message and the response message live in the
 * per-call arena the framework creates and destroys.
 */
#ifndef SM_CONNECT_H
#define SM_CONNECT_H

#include <protobuf-c/protobuf-c.h>

#include "arena.h"
#include "http.h"
#include "sm.h"

struct sm_connect_call {
	struct sm_http_req *http;      /* headers (tenant, auth) */
	struct sm_arena *arena;        /* allocate the response here */
	int64_t deadline_ns;           /* sm_mono_ns() deadline, 0 = none */
	size_t heap_used;              /* heap the handler used and freed
					  (a merge tree), for
					  sm_mem_release(); 0 if unknown */
};

/*
 * A method handler: read `req` (a message of the registered input type),
 * set *resp to a message of the output type allocated in call->arena, and
 * return 0; or return an SM_E* code with the message in err.
 */
typedef int (*sm_connect_fn)(void *arg, struct sm_connect_call *call,
    const ProtobufCMessage *req, ProtobufCMessage **resp,
    struct sm_err *err);

/*
 * Register `fn` for POST `path` (e.g. "/querier.v1.QuerierService/
 * SelectSeries").  `in` is the request descriptor; `body_max` caps the
 * request body and its decompressed size (0 = server default).
 */
int sm_connect_route(struct sm_http *h, const char *path,
    const ProtobufCMessageDescriptor *in, sm_connect_fn fn, void *arg,
    size_t body_max);

/*
 * sm_connect_route() needing `scope` (auth.h); sm_connect_route() itself
 * declares SM_SCOPE_ADMIN, so a service that forgets to say is locked.
 */
int sm_connect_route_as(struct sm_http *h, unsigned scope, const char *path,
    const ProtobufCMessageDescriptor *in, sm_connect_fn fn, void *arg,
    size_t body_max);

/* The Connect code and HTTP status for an SM_E* code (sm_err_wire()). */
const char *sm_connect_code_for(int rv, int *status);

/*
 * gRPC's number for a Connect code name: Connect's codes are gRPC's, in
 * the same order, 1 (canceled) to 16 (unauthenticated); an unknown name
 * is 2 (unknown).
 */
int sm_connect_grpc_code(const char *code);

/*
 * Append `msg` percent-encoded as grpc-message wants it (bytes outside
 * printable ASCII, and '%'), NUL-terminated (not counted in b->len).
 */
void sm_connect_grpc_message(struct sm_buf *b, const char *msg);

/* Map a Connect code name to its HTTP status (docs/wire-formats.md §5). */
int sm_connect_status(const char *code);

#endif /* SM_CONNECT_H */
