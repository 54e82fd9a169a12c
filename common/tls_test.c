/*
 * tls_test.c -- the crypto primitives of tls.h that the rest of the tree
 * relies on without a handshake: SHA-256 against the FIPS 180-2 vectors,
 * the constant-time comparison, wiping, and the AEAD's round trip and its
 * refusal of altered bytes.  The TLS listener itself is tested end to end
 * (tests/integration/test_tls*.py).
 */
#include "common/tls.h"

#include <string.h>

#include "common/sm.h"
#include "sm_test.h"

static void
hex32(const uint8_t d[SM_SHA256_LEN], char out[65])
{
	static const char hx[] = "0123456789abcdef";

	for (int i = 0; i < SM_SHA256_LEN; i++) {
		out[2 * i] = hx[d[i] >> 4];
		out[2 * i + 1] = hx[d[i] & 15];
	}
	out[64] = '\0';
}

static void
test_sha256(void)
{
	static const struct {
		const char *in, *hex;
	} v[] = {
		{ "", "e3b0c44298fc1c149afbf4c8996fb924"
		    "27ae41e4649b934ca495991b7852b855" },
		{ "abc", "ba7816bf8f01cfea414140de5dae2223"
		    "b00361a396177a9cb410ff61f20015ad" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		    "248d6a61d20638b8e5c026930c3e6039"
		    "a33ce45964ff2167f6ecedd419db06c1" },
	};
	uint8_t d[SM_SHA256_LEN];
	char hex[65];

	for (size_t i = 0; i < SM_ARRAY_LEN(v); i++) {
		SM_CHECK_EQ(sm_sha256(v[i].in, strlen(v[i].in), d), 0);
		hex32(d, hex);
		SM_CHECK_STR(hex, v[i].hex);
	}
}

static void
test_memeq_wipe(void)
{
	uint8_t a[40], b[40];

	for (int i = 0; i < 40; i++)
		a[i] = b[i] = (uint8_t)(i * 7 + 1);
	SM_CHECK(sm_memeq_ct(a, b, sizeof(a)));
	SM_CHECK(sm_memeq_ct(a, b, 0));
	/* A difference anywhere, first byte, middle or last bit, counts. */
	for (int i = 0; i < 40; i += 13) {
		b[i] ^= 0x80;
		SM_CHECK(!sm_memeq_ct(a, b, sizeof(a)));
		b[i] ^= 0x80;
	}
	b[39] ^= 1;
	SM_CHECK(!sm_memeq_ct(a, b, sizeof(a)));
	SM_CHECK(sm_memeq_ct(a, b, 39));
	sm_wipe(a, sizeof(a));
	for (int i = 0; i < 40; i++)
		SM_CHECK_EQ(a[i], 0);
}

static void
test_aead(void)
{
	uint8_t key[SM_AEAD_KEY], nonce[SM_AEAD_NONCE], other[SM_AEAD_KEY];
	uint8_t ct[64 + SM_AEAD_TAG], pt[64];
	const char msg[] = "profiles at rest, sealed";
	const size_t n = sizeof(msg);
	struct sm_aead *h = NULL, *h2 = NULL;
	struct sm_err err;

	SM_CHECK_EQ(sm_random_key(key, sizeof(key)), 0);
	SM_CHECK_EQ(sm_random_nonce(nonce, sizeof(nonce)), 0);
	memcpy(other, key, sizeof(key));
	other[0] ^= 1;
	SM_CHECK_EQ(sm_aead_new(key, &h, &err), 0);
	SM_CHECK_EQ(sm_aead_new(other, &h2, &err), 0);
	SM_CHECK_EQ(sm_aead_seal(h, nonce, "k", 1, msg, n, ct), 0);
	SM_CHECK(memcmp(ct, msg, n) != 0);
	SM_CHECK_EQ(sm_aead_open(h, nonce, "k", 1, ct, n + SM_AEAD_TAG, pt),
	    0);
	SM_CHECK(memcmp(pt, msg, n) == 0);
	/* Another key, other additional data, an altered byte: refused. */
	SM_CHECK_EQ(sm_aead_open(h2, nonce, "k", 1, ct, n + SM_AEAD_TAG, pt),
	    SM_ECORRUPT);
	SM_CHECK_EQ(sm_aead_open(h, nonce, "K", 1, ct, n + SM_AEAD_TAG, pt),
	    SM_ECORRUPT);
	ct[3] ^= 1;
	SM_CHECK_EQ(sm_aead_open(h, nonce, "k", 1, ct, n + SM_AEAD_TAG, pt),
	    SM_ECORRUPT);
	sm_aead_free(h);
	sm_aead_free(h2);
}

SM_TEST_MAIN(
	{ "sha256: the FIPS 180-2 vectors, empty input included",
	    test_sha256 },
	{ "memeq_ct: equal, a difference anywhere, length 0; wipe zeroes",
	    test_memeq_wipe },
	{ "aead: round trip; another key, aad or an altered byte refused",
	    test_aead },
)
