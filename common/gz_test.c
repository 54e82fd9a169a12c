/*
 * gz_test.c -- the compression wrapper: whole inflation with its cap,
 * streamed inflation in small reads (concatenated members, a truncated
 * stream, garbage), and CRC-32's check value, which the remote-write
 * queue's records on disk depend on.
 */
#include "common/gz.h"

#include <string.h>

#include "sm_test.h"

static void
test_crc32(void)
{
	SM_CHECK_EQ(sm_crc32(0, "123456789", 9), 0xCBF43926u);
	/* continued = whole */
	SM_CHECK_EQ(sm_crc32(sm_crc32(0, "1234", 4), "56789", 5),
	    0xCBF43926u);
	SM_CHECK_EQ(sm_crc32(0, "", 0), 0u);
}

/* Two gzip members of `text` back to back. */
static uint8_t *
two_members(const char *text, size_t *n)
{
	uint8_t *a, *b, *out;
	size_t na, nb;

	SM_REQUIRE(sm_gzip((const uint8_t *)text, strlen(text), 6, &a,
	    &na) == 0);
	SM_REQUIRE(sm_gzip((const uint8_t *)text, strlen(text), 6, &b,
	    &nb) == 0);
	SM_REQUIRE((out = sm_malloc(na + nb)) != NULL);
	memcpy(out, a, na);
	memcpy(out + na, b, nb);
	sm_free(a);
	sm_free(b);
	*n = na + nb;
	return (out);
}

static void
test_stream(void)
{
	const char *text = "the quick brown fox jumps over the lazy dog\n";
	struct sm_gunzip_stream *z;
	struct sm_err err;
	uint8_t *in, out[256];
	size_t n, got, total = 0;

	in = two_members(text, &n);
	SM_REQUIRE(sm_gunzip_stream_open(in, n, &z) == 0);
	/* 7 bytes at a time, across the members' boundary */
	do {
		SM_REQUIRE(sm_gunzip_stream_read(z, out + total, 7, &got,
		    &err) == 0);
		total += got;
	} while (got > 0 && total + 7 <= sizeof(out));
	SM_CHECK_EQ(total, 2 * strlen(text));
	SM_CHECK(memcmp(out, text, strlen(text)) == 0);
	SM_CHECK(memcmp(out + strlen(text), text, strlen(text)) == 0);
	sm_gunzip_stream_close(z);

	/* cut in the middle of the second member */
	SM_REQUIRE(sm_gunzip_stream_open(in, n - 6, &z) == 0);
	SM_CHECK_EQ(sm_gunzip_stream_read(z, out, sizeof(out), &got, &err),
	    SM_EMALFORMED);
	SM_CHECK(strstr(err.msg, "invalid gzip data") != NULL);
	sm_gunzip_stream_close(z);
	sm_free(in);

	SM_REQUIRE(sm_gunzip_stream_open((const uint8_t *)"\x1f\x8bgarbage",
	    9, &z) == 0);
	SM_CHECK_EQ(sm_gunzip_stream_read(z, out, sizeof(out), &got, &err),
	    SM_EMALFORMED);
	sm_gunzip_stream_close(z);
}

static void
test_whole(void)
{
	const char *text = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;
	uint8_t *in, *out;
	size_t n, outlen;

	SM_REQUIRE(a != NULL);
	in = two_members(text, &n);
	SM_CHECK_EQ(sm_gunzip(in, n, 1000, a, &out, &outlen, &err), 0);
	SM_CHECK_EQ(outlen, 2 * strlen(text));
	SM_CHECK_EQ(sm_gunzip(in, n, 60, a, &out, &outlen, &err), SM_ETOOBIG);
	sm_free(in);
	sm_arena_destroy(a);
}

SM_TEST_MAIN(
	{ "crc32 check value", test_crc32 },
	{ "streamed inflation", test_stream },
	{ "whole inflation and its cap", test_whole },
)
