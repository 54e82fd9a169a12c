/*
 * tls.h -- the server side of TLS for the HTTP listener (http.h): the
 * certificate and key it presents, the CA it checks client certificates
 * against, the client-auth policy and the lowest protocol version.  The
 * only file that includes <gnutls/gnutls.h> (docs/style.md §11);
 * libmicrohttpd runs the handshakes with GnuTLS, and hands this module
 * its sessions as `void *`.
 *
 * Files, reloaded without a restart.  The certificate (a PEM chain, the
 * server's first), the key and the CA are read at create and again when
 * any of their modification times or sizes changes, checked at most once
 * a second on a handshake or a request: a rotation (cert-manager, a
 * renewal cron) takes effect for new connections while open ones keep
 * theirs.  A reload that fails (a half-written file, a key that does not
 * match) keeps the previous material and is logged; it is tried again
 * when the files change again.  Material a handshake may still hold is
 * never freed before sm_tls_destroy(): a retired set is kept (a few
 * kilobytes per rotation).
 *
 * Client certificates, by -server.http-tls-client-auth (dskit's names,
 * Go's tls.ClientAuthType):
 *   NoClientCert                 none asked for (the default);
 *   RequestClientCert            asked for, not required, not checked;
 *   RequireAnyClientCert         required (the handshake fails without
 *                                one), not checked against the CA;
 *   VerifyClientCertIfGiven      asked for; one given must chain to the CA;
 *   RequireAndVerifyClientCert   required and must chain to the CA.
 * Verification (the chain against the CA, validity dates) is done per
 * request (sm_tls_check_peer): a failure is 401 (none given) or 403 (not
 * from the CA, expired), the same answers as a bad API key.
 *
 * Locking: the current material is swapped under a mutex; callers get a
 * consistent set.  Errors: SM_EINVAL (bad flag values, unreadable or
 * unparsable files, a key that does not match), SM_ENOMEM.
 *
 * The same library serves every other cryptographic need (at the end of
 * this file): AES-256-GCM and random keys and nonces for encryption at
 * rest (common/bucket_seal.c), SHA-256 for API keys (common/auth.c) and
 * S3 request signing (common/bucket_s3.c), so the binary carries one
 * crypto library (GnuTLS, AES-NI where the CPU has it) rather than GnuTLS
 * for TLS and OpenSSL beside it.
 */
#ifndef SM_TLS_H
#define SM_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sm.h"

enum sm_tls_client_auth {
	SM_TLS_NO_CLIENT_CERT,
	SM_TLS_REQUEST_CLIENT_CERT,
	SM_TLS_REQUIRE_ANY_CLIENT_CERT,
	SM_TLS_VERIFY_CLIENT_CERT_IF_GIVEN,
	SM_TLS_REQUIRE_AND_VERIFY_CLIENT_CERT,
};

struct sm_tls_cfg {
	const char *cert_path;       /* PEM chain, the server's first */
	const char *key_path;        /* PEM private key */
	const char *ca_path;         /* PEM CAs for client certs; "" = none */
	const char *client_auth;     /* a name above; "" = NoClientCert */
	const char *min_version;     /* "VersionTLS12" (default), "VersionTLS13" */
};

struct sm_tls;

/*
 * Load the files and check the settings (a verifying client-auth policy
 * needs a CA).  Returns 0 and *out, or SM_EINVAL / SM_ENOMEM with the
 * reason in err.
 */
int sm_tls_create(const struct sm_tls_cfg *cfg, struct sm_tls **out,
    struct sm_err *err);

/* Free everything; no handshake may be running.  NULL is a no-op. */
void sm_tls_destroy(struct sm_tls *t);

/* GnuTLS priority string for the minimum version. */
const char *sm_tls_priorities(const struct sm_tls *t);

/*
 * The certificate callback to give libmicrohttpd
 * (MHD_OPTION_HTTPS_CERT_CALLBACK, a gnutls_certificate_retrieve_function2)
 * for server `t`: GnuTLS's callback has no argument of ours, so the
 * process has one TLS server identity, the last one this returned for.
 */
void *sm_tls_cert_callback(struct sm_tls *t);

/*
 * A new connection's session (a gnutls_session_t as void *), before its
 * handshake: ask for (or require) a client certificate as the policy
 * says.
 */
void sm_tls_session_start(struct sm_tls *t, void *session);

/*
 * After the handshake, per request: 0 when the policy is met; SM_EAUTH
 * (a certificate was required and none given) or SM_EFORBIDDEN (it does
 * not chain to the CA, or is outside its validity) with the reason in err.
 */
int sm_tls_check_peer(struct sm_tls *t, void *session, struct sm_err *err);

/*
 * Sessions of this module's own, for a listener libmicrohttpd does not
 * run (the gRPC one, grpc.h): the same certificate (reloaded the same
 * way), client-certificate request, minimum version and checks, on the
 * non-blocking socket `fd`, offering the ALPN protocol `alpn` ("h2").
 * Sessions are `void *` so the caller includes no GnuTLS.
 *
 * sm_tls_session_new: 0 and *out, or SM_ENOMEM / SM_EINVAL with err.
 * sm_tls_handshake: 0 once done; SM_EAGAIN to be called again when the
 *   socket is readable (or writable when *want_write); SM_EPROTO (the
 *   client failed the handshake: a plaintext client, no common version,
 *   a refused certificate) with err.
 * sm_tls_recv / sm_tls_send: bytes moved (> 0), 0 at the peer's close
 *   (recv), -1 with errno EAGAIN when the socket would block, -1 with
 *   errno EIO on an error.  A send that returned EAGAIN must be repeated
 *   with the same bytes.  sm_tls_pending: decrypted bytes buffered in the
 *   session, which poll() does not see.
 * sm_tls_alpn_is: the handshake settled on protocol `proto`.
 * sm_tls_session_free: closes nothing (the caller owns fd).
 */
int sm_tls_session_new(struct sm_tls *t, int fd, const char *alpn,
    void **out, struct sm_err *err);
int sm_tls_handshake(void *session, bool *want_write, struct sm_err *err);
long sm_tls_recv(void *session, void *buf, size_t n);
long sm_tls_send(void *session, const void *buf, size_t n);
size_t sm_tls_pending(void *session);
bool sm_tls_alpn_is(void *session, const char *proto);
void sm_tls_session_free(void *session);

/*
 * AEAD: AES-256-GCM, a 12-byte nonce, a 16-byte tag appended to the
 * ciphertext.  A handle holds one key and serves one thread at a time
 * (make one per call; the key schedule is a few hundred nanoseconds).
 * The caller never reuses a (key, nonce) pair.
 *
 * sm_aead_new: 0 and *out, or SM_ENOMEM / SM_EINTERNAL with err.
 * sm_aead_seal: out gets n + SM_AEAD_TAG bytes; 0 or SM_EINTERNAL.
 * sm_aead_open: n counts the tag; out gets n - SM_AEAD_TAG bytes; 0, or
 *   SM_ECORRUPT when the tag does not verify (wrong key, nonce, aad, or
 *   altered bytes) -- nothing of out is to be used then.
 * sm_random_key / sm_random_nonce: 0, or SM_EINTERNAL when the system's
 *   random source fails (nothing may be sealed then).
 */
#define SM_AEAD_KEY 32
#define SM_AEAD_NONCE 12
#define SM_AEAD_TAG 16

struct sm_aead;

int sm_aead_new(const uint8_t key[SM_AEAD_KEY], struct sm_aead **out,
    struct sm_err *err);
void sm_aead_free(struct sm_aead *h);
int sm_aead_seal(struct sm_aead *h, const uint8_t nonce[SM_AEAD_NONCE],
    const void *aad, size_t naad, const void *in, size_t n, void *out);
int sm_aead_open(struct sm_aead *h, const uint8_t nonce[SM_AEAD_NONCE],
    const void *aad, size_t naad, const void *in, size_t n, void *out);
int sm_random_key(void *p, size_t n);
int sm_random_nonce(void *p, size_t n);

/*
 * sm_sha256: out gets the SHA-256 digest of p[0..n); 0, or SM_EINTERNAL
 *   when the library fails (callers answer 500 or retry; never a match).
 * sm_memeq_ct: whether a[0..n) and b[0..n) are equal, in a time that
 *   depends on n only (no early exit), for comparing secrets' hashes.
 * sm_wipe: zero p[0..n) in a way the compiler may not drop, for secrets
 *   on the stack or about to be freed.
 */
#define SM_SHA256_LEN 32

int sm_sha256(const void *p, size_t n, uint8_t out[SM_SHA256_LEN]);
bool sm_memeq_ct(const void *a, const void *b, size_t n);
void sm_wipe(void *p, size_t n);

#endif /* SM_TLS_H */
