/*
 * fuzz_grpc.c -- the gRPC listener (common/grpc.c): what a client's
 * HTTP/2 bytes do to the server session and the stream callbacks (pseudo
 * headers, forwarded headers, the body cap, dispatch), and what the
 * translation of an answer makes of any bytes (status line, headers,
 * chunked bodies, gRPC-web frames, trailers).
 *
 * Input: byte 0 picks the mode (bit 0: an answer, else client bytes) and
 * the chunk size the client bytes arrive in (1 to 64 bytes, or all at
 * once); the rest is the data.  Properties: no crash, leak or undefined
 * behaviour (ASan, UBSan, LSan), and a session always starts.
 */
#include "common/grpc.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t chunk;
	int n;

	if (size < 1)
		return (0);
	chunk = (data[0] >> 1) == 0 ? size : (size_t)(data[0] >> 1) % 64 + 1;
	n = sm_grpc_feed(data + 1, size - 1, chunk, (data[0] & 1) != 0);
	FUZZ_CHECK(n >= 0, "the nghttp2 session did not start");
	return (0);
}
