/*
 * tls.c -- TLS material and client-certificate checks on GnuTLS; see
 * tls.h.
 *
 * A `tls_set` is one loaded generation of the files: the certificate
 * chain as GnuTLS pcerts, the private key, and the CA trust list.  The
 * current set is swapped under `mu`; retired sets stay on a list until
 * sm_tls_destroy(), as a handshake in progress may still point at their
 * pcerts and key (GnuTLS copies neither).
 */
#include "tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "log.h"

#define TLS_MAX_CHAIN 16
#define TLS_RECHECK_NS 1000000000LL     /* stat the files once a second */

struct tls_set {
	struct tls_set *retired;        /* older sets, kept until destroy */
	gnutls_pcert_st pcert[TLS_MAX_CHAIN];
	unsigned npcert;
	gnutls_privkey_t key;
	gnutls_x509_trust_list_t trust; /* NULL: no CA */
};

/* A file's identity, to notice a change. */
struct tls_stamp {
	int64_t mtime_ns;
	int64_t size;
};

struct sm_tls {
	char *cert_path, *key_path, *ca_path;
	gnutls_certificate_credentials_t cred;  /* own sessions' */
	gnutls_priority_t prio;
	enum sm_tls_client_auth auth;
	const char *priorities;
	pthread_mutex_t mu;
	struct tls_set *cur;            /* mu */
	struct tls_stamp st[3];         /* mu: cert, key, ca */
	int64_t next_check_ns;          /* mu */
};

static const struct {
	const char *name;
	enum sm_tls_client_auth auth;
} tls_auth_names[] = {
	{ "NoClientCert", SM_TLS_NO_CLIENT_CERT },
	{ "RequestClientCert", SM_TLS_REQUEST_CLIENT_CERT },
	{ "RequireAnyClientCert", SM_TLS_REQUIRE_ANY_CLIENT_CERT },
	{ "VerifyClientCertIfGiven", SM_TLS_VERIFY_CLIENT_CERT_IF_GIVEN },
	{ "RequireAndVerifyClientCert", SM_TLS_REQUIRE_AND_VERIFY_CLIENT_CERT },
};

/* The server GnuTLS's certificate callback serves (tls.h). */
static struct sm_tls *tls_current;

static void
tls_stamp_of(const char *path, struct tls_stamp *s)
{
	struct stat sb;

	memset(s, 0, sizeof(*s));
	if (path != NULL && path[0] != '\0' && stat(path, &sb) == 0) {
		s->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 +
		    sb.st_mtim.tv_nsec;
		s->size = (int64_t)sb.st_size;
	}
}

static void
tls_set_free(struct tls_set *s)
{
	while (s != NULL) {
		struct tls_set *next = s->retired;

		for (unsigned i = 0; i < s->npcert; i++)
			gnutls_pcert_deinit(&s->pcert[i]);
		if (s->key != NULL)
			gnutls_privkey_deinit(s->key);
		if (s->trust != NULL)
			gnutls_x509_trust_list_deinit(s->trust, 1);
		sm_free(s);
		s = next;
	}
}

static int
tls_read(const char *what, const char *path, gnutls_datum_t *d,
    struct sm_err *err)
{
	int g;

	if ((g = gnutls_load_file(path, d)) < 0)
		return (sm_err_set(err, SM_EINVAL, "tls: cannot read the %s "
		    "file %s: %s", what, path, gnutls_strerror(g)));
	return (0);
}

/*
 * The key is the certificate's (the same public key id): a handshake
 * would fail for every client otherwise.
 */
static bool
tls_key_matches(const struct tls_set *s)
{
	unsigned char a[64], b[64];
	size_t na = sizeof(a), nb = sizeof(b);
	gnutls_pubkey_t pub;
	bool same;

	if (gnutls_pubkey_init(&pub) < 0)
		return (false);
	same = gnutls_pubkey_import_privkey(pub, s->key, 0, 0) >= 0 &&
	    gnutls_pubkey_get_key_id(pub, 0, a, &na) >= 0 &&
	    gnutls_pubkey_get_key_id(s->pcert[0].pubkey, 0, b, &nb) >= 0 &&
	    na == nb && memcmp(a, b, na) == 0;
	gnutls_pubkey_deinit(pub);
	return (same);
}

/* Load one generation of the files into a new set. */
static int
tls_load(const struct sm_tls *t, struct tls_set **out, struct sm_err *err)
{
	gnutls_datum_t cert = { NULL, 0 }, key = { NULL, 0 }, ca = { NULL, 0 };
	struct tls_set *s;
	int g, rv = 0;

	*out = NULL;
	if ((s = sm_calloc(1, sizeof(*s))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "tls: out of memory"));
	if ((rv = tls_read("certificate", t->cert_path, &cert, err)) != 0 ||
	    (rv = tls_read("key", t->key_path, &key, err)) != 0 ||
	    (t->ca_path[0] != '\0' &&
	    (rv = tls_read("CA", t->ca_path, &ca, err)) != 0))
		goto out;
	s->npcert = TLS_MAX_CHAIN;
	if ((g = gnutls_pcert_list_import_x509_raw(s->pcert, &s->npcert, &cert,
	    GNUTLS_X509_FMT_PEM, 0)) < 0 || s->npcert == 0) {
		s->npcert = 0;
		rv = sm_err_set(err, SM_EINVAL, "tls: certificate %s: %s",
		    t->cert_path, g < 0 ? gnutls_strerror(g) : "no "
		    "certificate in it");
		goto out;
	}
	if ((g = gnutls_privkey_init(&s->key)) < 0 ||
	    (g = gnutls_privkey_import_x509_raw(s->key, &key,
	    GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
		rv = sm_err_set(err, SM_EINVAL, "tls: key %s: %s", t->key_path,
		    gnutls_strerror(g));
		goto out;
	}
	if (!tls_key_matches(s)) {
		rv = sm_err_set(err, SM_EINVAL, "tls: the key %s does not "
		    "match the certificate %s", t->key_path, t->cert_path);
		goto out;
	}
	if (ca.data != NULL) {
		if ((g = gnutls_x509_trust_list_init(&s->trust, 0)) < 0 ||
		    (g = gnutls_x509_trust_list_add_trust_mem(s->trust, &ca,
		    NULL, GNUTLS_X509_FMT_PEM, 0, 0)) <= 0) {
			rv = sm_err_set(err, SM_EINVAL, "tls: CA %s: %s",
			    t->ca_path, g < 0 ? gnutls_strerror(g) :
			    "no certificate in it");
			goto out;
		}
	}
out:
	gnutls_free(cert.data);
	gnutls_free(key.data);
	gnutls_free(ca.data);
	if (rv != 0)
		tls_set_free(s);
	else
		*out = s;
	return (rv);
}

/* Reload when a file changed (at most once a second).  mu held. */
static void
tls_maybe_reload(struct sm_tls *t)
{
	struct tls_stamp now[3];
	struct tls_set *s;
	struct sm_err err;
	int64_t mono = sm_mono_ns();

	if (mono < t->next_check_ns)
		return;
	t->next_check_ns = mono + TLS_RECHECK_NS;
	tls_stamp_of(t->cert_path, &now[0]);
	tls_stamp_of(t->key_path, &now[1]);
	tls_stamp_of(t->ca_path, &now[2]);
	if (memcmp(now, t->st, sizeof(now)) == 0)
		return;
	memcpy(t->st, now, sizeof(now));
	sm_err_clear(&err);
	if (tls_load(t, &s, &err) != 0) {
		sm_warn("tls", "reload failed; keeping the previous "
		    "certificate\terr=\"%s\"", err.msg);
		return;
	}
	s->retired = t->cur;
	t->cur = s;
	sm_info("tls", "reloaded\tcert=%s", t->cert_path);
}

/* gnutls_certificate_retrieve_function2 for libmicrohttpd. */
static int
tls_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn,
    int nreqs, const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
    gnutls_pcert_st **pcert, unsigned int *pcert_length,
    gnutls_privkey_t *privkey)
{
	struct sm_tls *t = tls_current;

	(void)session;
	(void)req_ca_rdn;
	(void)nreqs;
	(void)pk_algos;
	(void)pk_algos_length;
	if (t == NULL)
		return (-1);
	pthread_mutex_lock(&t->mu);
	tls_maybe_reload(t);
	*pcert = t->cur->pcert;
	*pcert_length = t->cur->npcert;
	*privkey = t->cur->key;
	pthread_mutex_unlock(&t->mu);
	return (0);
}

int
sm_tls_create(const struct sm_tls_cfg *cfg, struct sm_tls **out,
    struct sm_err *err)
{
	struct sm_tls *t;
	size_t i;
	int rv;

	*out = NULL;
	for (i = 0; i < SM_ARRAY_LEN(tls_auth_names); i++) {
		if (strcmp(cfg->client_auth, tls_auth_names[i].name) == 0)
			break;
	}
	if (cfg->client_auth[0] != '\0' && i == SM_ARRAY_LEN(tls_auth_names))
		return (sm_err_set(err, SM_EINVAL, "tls: client auth \"%s\": "
		    "want NoClientCert, RequestClientCert, "
		    "RequireAnyClientCert, VerifyClientCertIfGiven or "
		    "RequireAndVerifyClientCert", cfg->client_auth));
	if (strcmp(cfg->min_version, "") != 0 &&
	    strcmp(cfg->min_version, "VersionTLS12") != 0 &&
	    strcmp(cfg->min_version, "VersionTLS13") != 0)
		return (sm_err_set(err, SM_EINVAL, "tls: minimum version "
		    "\"%s\": want VersionTLS12 or VersionTLS13",
		    cfg->min_version));
	if (cfg->cert_path[0] == '\0' || cfg->key_path[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "tls: a certificate needs "
		    "its key and a key its certificate"));
	if ((t = sm_calloc(1, sizeof(*t))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "tls: out of memory"));
	t->auth = cfg->client_auth[0] == '\0' ? SM_TLS_NO_CLIENT_CERT :
	    tls_auth_names[i].auth;
	t->priorities = strcmp(cfg->min_version, "VersionTLS13") == 0 ?
	    "NORMAL:-VERS-ALL:+VERS-TLS1.3" :
	    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
	pthread_mutex_init(&t->mu, NULL);
	if ((t->cert_path = sm_strdup(cfg->cert_path)) == NULL ||
	    (t->key_path = sm_strdup(cfg->key_path)) == NULL ||
	    (t->ca_path = sm_strdup(cfg->ca_path)) == NULL) {
		sm_tls_destroy(t);
		return (sm_err_set(err, SM_ENOMEM, "tls: out of memory"));
	}
	if ((t->auth == SM_TLS_VERIFY_CLIENT_CERT_IF_GIVEN ||
	    t->auth == SM_TLS_REQUIRE_AND_VERIFY_CLIENT_CERT) &&
	    t->ca_path[0] == '\0') {
		sm_tls_destroy(t);
		return (sm_err_set(err, SM_EINVAL, "tls: client auth %s needs "
		    "a CA (-server.http-tls-ca-path)", cfg->client_auth));
	}
	tls_stamp_of(t->cert_path, &t->st[0]);
	tls_stamp_of(t->key_path, &t->st[1]);
	tls_stamp_of(t->ca_path, &t->st[2]);
	t->next_check_ns = sm_mono_ns() + TLS_RECHECK_NS;
	if ((rv = tls_load(t, &t->cur, err)) != 0) {
		sm_tls_destroy(t);
		return (rv);
	}
	if (gnutls_certificate_allocate_credentials(&t->cred) < 0 ||
	    gnutls_priority_init(&t->prio, t->priorities, NULL) < 0) {
		sm_tls_destroy(t);
		return (sm_err_set(err, SM_ENOMEM, "tls: cannot set up GnuTLS "
		    "credentials"));
	}
	gnutls_certificate_set_retrieve_function2(t->cred, tls_retrieve);
	tls_current = t;
	*out = t;
	return (0);
}

void
sm_tls_destroy(struct sm_tls *t)
{
	if (t == NULL)
		return;
	if (tls_current == t)
		tls_current = NULL;
	if (t->cred != NULL)
		gnutls_certificate_free_credentials(t->cred);
	if (t->prio != NULL)
		gnutls_priority_deinit(t->prio);
	tls_set_free(t->cur);
	pthread_mutex_destroy(&t->mu);
	sm_free(t->cert_path);
	sm_free(t->key_path);
	sm_free(t->ca_path);
	sm_free(t);
}

const char *
sm_tls_priorities(const struct sm_tls *t)
{
	return (t->priorities);
}

void *
sm_tls_cert_callback(struct sm_tls *t)
{
	tls_current = t;
	return ((void *)tls_retrieve);
}

void
sm_tls_session_start(struct sm_tls *t, void *session)
{
	gnutls_session_t s = session;

	if (s == NULL || t->auth == SM_TLS_NO_CLIENT_CERT)
		return;
	gnutls_certificate_server_set_request(s,
	    t->auth == SM_TLS_REQUIRE_ANY_CLIENT_CERT ||
	    t->auth == SM_TLS_REQUIRE_AND_VERIFY_CLIENT_CERT ?
	    GNUTLS_CERT_REQUIRE : GNUTLS_CERT_REQUEST);
}

/* The peer's chain against the current CA.  0 or SM_EFORBIDDEN. */
static int
tls_verify_chain(struct sm_tls *t, const gnutls_datum_t *der, unsigned n,
    struct sm_err *err)
{
	gnutls_x509_crt_t crt[TLS_MAX_CHAIN];
	unsigned k = 0, status = 0;
	int g, rv;

	if (n > TLS_MAX_CHAIN)
		n = TLS_MAX_CHAIN;
	for (; k < n; k++) {
		if (gnutls_x509_crt_init(&crt[k]) < 0)
			break;
		if (gnutls_x509_crt_import(crt[k], &der[k],
		    GNUTLS_X509_FMT_DER) < 0) {
			gnutls_x509_crt_deinit(crt[k]);
			break;
		}
	}
	pthread_mutex_lock(&t->mu);
	tls_maybe_reload(t);
	g = k == n && t->cur->trust != NULL ?
	    gnutls_x509_trust_list_verify_crt(t->cur->trust, crt, k, 0,
	    &status, NULL) : GNUTLS_E_CERTIFICATE_ERROR;
	pthread_mutex_unlock(&t->mu);
	if (g < 0 || status != 0) {
		gnutls_datum_t why = { NULL, 0 };

		if (g >= 0)
			(void)gnutls_certificate_verification_status_print(
			    status, GNUTLS_CRT_X509, &why, 0);
		rv = sm_err_set(err, SM_EFORBIDDEN, "client certificate "
		    "refused: %s", why.data != NULL ? (char *)why.data :
		    g < 0 ? gnutls_strerror(g) : "not trusted");
		gnutls_free(why.data);
	} else {
		rv = 0;
	}
	for (unsigned i = 0; i < k; i++)
		gnutls_x509_crt_deinit(crt[i]);
	return (rv);
}

int
sm_tls_check_peer(struct sm_tls *t, void *session, struct sm_err *err)
{
	const gnutls_datum_t *der;
	unsigned n = 0;

	if (t->auth == SM_TLS_NO_CLIENT_CERT ||
	    t->auth == SM_TLS_REQUEST_CLIENT_CERT)
		return (0);
	der = session != NULL ? gnutls_certificate_get_peers(
	    (gnutls_session_t)session, &n) : NULL;
	if (der == NULL || n == 0) {
		if (t->auth == SM_TLS_VERIFY_CLIENT_CERT_IF_GIVEN)
			return (0);
		return (sm_err_set(err, SM_EAUTH, "a client certificate is "
		    "required"));
	}
	if (t->auth == SM_TLS_REQUIRE_ANY_CLIENT_CERT)
		return (0);
	return (tls_verify_chain(t, der, n, err));
}

/* --- sessions of our own ------------------------------------------------------ */

int
sm_tls_session_new(struct sm_tls *t, int fd, const char *alpn, void **out,
    struct sm_err *err)
{
	gnutls_session_t s;
	gnutls_datum_t proto = { (unsigned char *)alpn, (unsigned)strlen(alpn) };

	*out = NULL;
	if (gnutls_init(&s, GNUTLS_SERVER | GNUTLS_NONBLOCK) < 0)
		return (sm_err_set(err, SM_ENOMEM, "tls: cannot start a "
		    "session"));
	if (gnutls_priority_set(s, t->prio) < 0 ||
	    gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, t->cred) < 0 ||
	    gnutls_alpn_set_protocols(s, &proto, 1, 0) < 0) {
		gnutls_deinit(s);
		return (sm_err_set(err, SM_EINVAL, "tls: cannot configure a "
		    "session"));
	}
	gnutls_transport_set_int(s, fd);
	gnutls_handshake_set_timeout(s, 0);     /* the caller's deadline */
	sm_tls_session_start(t, s);
	*out = s;
	return (0);
}

int
sm_tls_handshake(void *session, bool *want_write, struct sm_err *err)
{
	gnutls_session_t s = session;
	int g = gnutls_handshake(s);

	*want_write = false;
	if (g == GNUTLS_E_SUCCESS)
		return (0);
	if (g == GNUTLS_E_AGAIN || g == GNUTLS_E_INTERRUPTED) {
		*want_write = gnutls_record_get_direction(s) == 1;
		return (SM_EAGAIN);
	}
	return (sm_err_set(err, SM_EPROTO, "TLS handshake: %s",
	    gnutls_strerror(g)));
}

/* A record call's result as read(2)/write(2) give it: bytes, or -1 with
 * errno EAGAIN (retry when the socket is ready) or EIO. */
static long
tls_io_result(ssize_t g)
{
	if (g >= 0)
		return ((long)g);
	errno = g == GNUTLS_E_AGAIN || g == GNUTLS_E_INTERRUPTED ? EAGAIN :
	    EIO;
	return (-1);
}

long
sm_tls_recv(void *session, void *buf, size_t n)
{
	return (tls_io_result(gnutls_record_recv((gnutls_session_t)session,
	    buf, n)));
}

long
sm_tls_send(void *session, const void *buf, size_t n)
{
	return (tls_io_result(gnutls_record_send((gnutls_session_t)session,
	    buf, n)));
}

size_t
sm_tls_pending(void *session)
{
	return (gnutls_record_check_pending((gnutls_session_t)session));
}

bool
sm_tls_alpn_is(void *session, const char *proto)
{
	gnutls_datum_t p = { NULL, 0 };

	return (gnutls_alpn_get_selected_protocol((gnutls_session_t)session,
	    &p) == 0 && p.size == strlen(proto) &&
	    memcmp(p.data, proto, p.size) == 0);
}

void
sm_tls_session_free(void *session)
{
	if (session != NULL)
		gnutls_deinit((gnutls_session_t)session);
}

/* --- AEAD for data at rest ------------------------------------------------ */

struct sm_aead {
	gnutls_aead_cipher_hd_t h;
};

int
sm_aead_new(const uint8_t key[SM_AEAD_KEY], struct sm_aead **out,
    struct sm_err *err)
{
	gnutls_datum_t k = { (unsigned char *)key, SM_AEAD_KEY };
	struct sm_aead *a;
	int g;

	*out = NULL;
	if ((a = sm_calloc(1, sizeof(*a))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((g = gnutls_aead_cipher_init(&a->h, GNUTLS_CIPHER_AES_256_GCM,
	    &k)) < 0) {
		sm_free(a);
		return (sm_err_set(err, SM_EINTERNAL, "AES-256-GCM: %s",
		    gnutls_strerror(g)));
	}
	*out = a;
	return (0);
}

void
sm_aead_free(struct sm_aead *a)
{
	if (a == NULL)
		return;
	gnutls_aead_cipher_deinit(a->h);
	sm_free(a);
}

int
sm_aead_seal(struct sm_aead *a, const uint8_t nonce[SM_AEAD_NONCE],
    const void *aad, size_t naad, const void *in, size_t n, void *out)
{
	size_t olen = n + SM_AEAD_TAG;

	if (gnutls_aead_cipher_encrypt(a->h, nonce, SM_AEAD_NONCE, aad, naad,
	    SM_AEAD_TAG, in, n, out, &olen) < 0 || olen != n + SM_AEAD_TAG)
		return (SM_EINTERNAL);
	return (0);
}

int
sm_aead_open(struct sm_aead *a, const uint8_t nonce[SM_AEAD_NONCE],
    const void *aad, size_t naad, const void *in, size_t n, void *out)
{
	size_t olen;

	if (n < SM_AEAD_TAG)
		return (SM_ECORRUPT);
	olen = n - SM_AEAD_TAG;      /* the room in out: the plaintext */
	if (gnutls_aead_cipher_decrypt(a->h, nonce, SM_AEAD_NONCE, aad, naad,
	    SM_AEAD_TAG, in, n, out, &olen) < 0 || olen != n - SM_AEAD_TAG)
		return (SM_ECORRUPT);
	return (0);
}

int
sm_random_key(void *p, size_t n)
{
	return (gnutls_rnd(GNUTLS_RND_KEY, p, n) < 0 ? SM_EINTERNAL : 0);
}

int
sm_random_nonce(void *p, size_t n)
{
	return (gnutls_rnd(GNUTLS_RND_NONCE, p, n) < 0 ? SM_EINTERNAL : 0);
}

int
sm_sha256(const void *p, size_t n, uint8_t out[SM_SHA256_LEN])
{
	return (gnutls_hash_fast(GNUTLS_DIG_SHA256, p, n, out) < 0 ?
	    SM_EINTERNAL : 0);
}

bool
sm_memeq_ct(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t d = 0;

	for (size_t i = 0; i < n; i++)
		d |= x[i] ^ y[i];
	return (d == 0);
}

void
sm_wipe(void *p, size_t n)
{
	explicit_bzero(p, n);
}
