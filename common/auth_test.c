/*
 * auth_test.c -- the rules of auth.h: keys file parsing, Bearer and Basic
 * credentials, scopes, header mode, and reload keeping the old keys.
 */
#include "common/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sm_test.h"

#define KEY_A "smk_aaaaaaaaaaaaaaaaaaaaaaaa"
#define KEY_AB "smk_abababababababababababab"
#define KEY_OPS "smk_opsopsopsopsopsopsopsops"

static char keys_path[] = "/tmp/smolder-auth-test-XXXXXX";

static void
hash_of(const char *key, char *out)
{
	struct sm_err err;

	SM_CHECK_EQ(sm_auth_hash_key(key, strlen(key), out, &err), 0);
}

/* Write `body` to the file (a fresh inode: rename over it). */
static void
write_keys(const char *body)
{
	SM_CHECK_EQ(sm_test_replace_file(keys_path, body), 0);
}

static void
write_standard_keys(void)
{
	char a[SM_AUTH_HASH_TEXT], ab[SM_AUTH_HASH_TEXT], ops[SM_AUTH_HASH_TEXT];
	char body[1024];

	hash_of(KEY_A, a);
	hash_of(KEY_AB, ab);
	hash_of(KEY_OPS, ops);
	snprintf(body, sizeof(body),
	    "# comment\n\n"
	    "%s a read,write\n"
	    "  %s\tab   read  \n"
	    "%s ops admin\r\n", a, ab, ops);
	write_keys(body);
}

static struct sm_auth *
open_keys(void)
{
	struct sm_auth *a = NULL;
	struct sm_err err;
	int rv;

	write_standard_keys();
	rv = sm_auth_create(true, keys_path, 1000000, &a, &err);
	SM_CHECKF(rv == 0, "sm_auth_create: %s", err.msg);
	SM_REQUIRE(rv == 0);
	return (a);
}

static char *
b64(const char *s)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "abcdefghijklmnopqrstuvwxyz0123456789+/";
	static char out[512];
	size_t n = strlen(s), o = 0;

	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned char)s[i] << 16;

		if (i + 1 < n)
			v |= (unsigned char)s[i + 1] << 8;
		if (i + 2 < n)
			v |= (unsigned char)s[i + 2];
		out[o++] = tab[(v >> 18) & 63];
		out[o++] = tab[(v >> 12) & 63];
		out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < n ? tab[v & 63] : '=';
	}
	out[o] = '\0';
	return (out);
}

static int
check(struct sm_auth *a, unsigned scope, const char *authz, const char *org,
    unsigned norg, struct sm_auth_id *id)
{
	struct sm_err err;

	sm_err_clear(&err);
	return (sm_auth_check(a, scope, authz, org, norg, id, &err));
}

static void
test_hash_vector(void)
{
	char h[SM_AUTH_HASH_TEXT];
	struct sm_err err;

	SM_CHECK_EQ(sm_auth_hash_key("abc", 3, h, &err), 0);
	SM_CHECK_STR(h, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a3961"
	    "77a9cb410ff61f20015ad");
	SM_CHECK_EQ(sm_auth_hash_key("", 0, h, &err), SM_EINVAL);
}

static void
test_bearer_and_basic(void)
{
	struct sm_auth *a = open_keys();
	struct sm_auth_id id;
	char hdr[600];

	SM_CHECK_EQ(sm_auth_nkeys(a), 3);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Bearer " KEY_A, NULL, 0, &id), 0);
	SM_CHECK_STR(id.tenant, "a");
	SM_CHECK(id.by_key);
	SM_CHECK_EQ(check(a, SM_SCOPE_WRITE, "bearer  " KEY_A " ", NULL, 0,
	    &id), 0);
	/* Basic: any user name, the key is the password. */
	snprintf(hdr, sizeof(hdr), "Basic %s", b64("123456:" KEY_AB));
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, hdr, NULL, 0, &id), 0);
	SM_CHECK_STR(id.tenant, "ab");
	snprintf(hdr, sizeof(hdr), "Basic %s", b64(":" KEY_A));
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, hdr, NULL, 0, &id), 0);
	SM_CHECK_STR(id.tenant, "a");
	/* A password with a ':' in it is kept whole after the first ':'. */
	snprintf(hdr, sizeof(hdr), "Basic %s", b64("u:" KEY_A ":x"));
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, hdr, NULL, 0, &id), SM_EAUTH);
	/* The key's tenant wins over the header. */
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Bearer " KEY_A, "ab", 1, &id), 0);
	SM_CHECK_STR(id.tenant, "a");
	sm_auth_destroy(a);
}

static void
test_refusals(void)
{
	struct sm_auth *a = open_keys();
	struct sm_auth_id id;
	char hdr[600];

	SM_CHECK_EQ(check(a, SM_SCOPE_READ, NULL, "a", 1, &id), SM_EAUTH);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "", NULL, 0, &id), SM_EAUTH);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Bearer nope-nope-nope-nope", NULL,
	    0, &id), SM_EAUTH);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Bearer ", NULL, 0, &id),
	    SM_EAUTH);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Token " KEY_A, NULL, 0, &id),
	    SM_EAUTH);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Basic !!!!", NULL, 0, &id),
	    SM_EAUTH);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Basic abc", NULL, 0, &id),
	    SM_EAUTH);
	snprintf(hdr, sizeof(hdr), "Basic %s", b64("no-colon"));
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, hdr, NULL, 0, &id), SM_EAUTH);
	snprintf(hdr, sizeof(hdr), "Basic %s", b64("user:"));
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, hdr, NULL, 0, &id), SM_EAUTH);
	/* Scopes do not imply each other. */
	SM_CHECK_EQ(check(a, SM_SCOPE_WRITE, "Bearer " KEY_AB, NULL, 0, &id),
	    SM_EFORBIDDEN);
	SM_CHECK_EQ(check(a, SM_SCOPE_ADMIN, "Bearer " KEY_A, NULL, 0, &id),
	    SM_EFORBIDDEN);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Bearer " KEY_OPS, NULL, 0, &id),
	    SM_EFORBIDDEN);
	SM_CHECK_EQ(check(a, SM_SCOPE_ADMIN, "Bearer " KEY_OPS, NULL, 0, &id),
	    0);
	/* Two org ids are refused even with a key. */
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Bearer " KEY_A, "a", 2, &id),
	    SM_EINVAL);
	sm_auth_destroy(a);
}

static void
test_header_mode(void)
{
	struct sm_auth *a = NULL;
	struct sm_auth_id id;
	struct sm_err err;

	SM_CHECK_EQ(sm_auth_create(true, NULL, 0, &a, &err), 0);
	if (a == NULL)
		return;
	SM_CHECK(!sm_auth_keys_enabled(a));
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, NULL, "ab", 1, &id), 0);
	SM_CHECK_STR(id.tenant, "ab");
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, NULL, NULL, 0, &id), SM_EAUTH);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, NULL, "a", 2, &id), SM_EINVAL);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, NULL, "a/b", 1, &id), SM_EINVAL);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, NULL, "..", 1, &id), SM_EINVAL);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, NULL, "a|b", 1, &id), SM_EINVAL);
	SM_CHECK_EQ(check(a, SM_SCOPE_ADMIN, NULL, NULL, 0, &id), 0);
	sm_auth_destroy(a);

	SM_CHECK_EQ(sm_auth_create(false, NULL, 0, &a, &err), 0);
	if (a == NULL)
		return;
	SM_CHECK_EQ(check(a, SM_SCOPE_WRITE, NULL, "x", 1, &id), 0);
	SM_CHECK_STR(id.tenant, SM_TENANT_ANONYMOUS);
	sm_auth_destroy(a);
	/* A keys file needs multi-tenancy. */
	write_standard_keys();
	SM_CHECK_EQ(sm_auth_create(false, keys_path, 1000, &a, &err),
	    SM_EINVAL);
}

static void
test_bad_files(void)
{
	static const char *const bad[] = {
		"sha256:00 a read\n",
		"sha256:zz00000000000000000000000000000000000000000000000000"
		    "00000000000000 a read\n",
		"md5:0000000000000000000000000000000000000000000000000000000"
		    "000000000 a read\n",
		"sha256:00000000000000000000000000000000000000000000000000000"
		    "00000000000 a read,fly\n",
		"sha256:00000000000000000000000000000000000000000000000000000"
		    "00000000000 a/b read\n",
		"sha256:00000000000000000000000000000000000000000000000000000"
		    "00000000000 a\n",
		"sha256:00000000000000000000000000000000000000000000000000000"
		    "00000000000 a read extra\n",
		"sha256:00000000000000000000000000000000000000000000000000000"
		    "00000000000 a read\n"
		    "sha256:00000000000000000000000000000000000000000000000000000"
		    "00000000000 b read\n",
	};
	struct sm_auth *a;
	struct sm_err err;

	for (size_t i = 0; i < SM_ARRAY_LEN(bad); i++) {
		write_keys(bad[i]);
		a = NULL;
		sm_err_clear(&err);
		SM_CHECKF(sm_auth_create(true, keys_path, 1000, &a, &err) ==
		    SM_EINVAL, "bad file %zu accepted", i);
		SM_CHECKF(strstr(err.msg, ":1") != NULL ||
		    strstr(err.msg, ":2") != NULL, "no line in '%s'", err.msg);
		sm_auth_destroy(a);
	}
}

static void
test_reload_keeps_old_keys(void)
{
	struct sm_auth *a = open_keys();
	struct sm_auth_id id;
	struct sm_err err;
	char h[SM_AUTH_HASH_TEXT], body[256];

	/* Unchanged file: nothing to do. */
	SM_CHECK_EQ(sm_auth_reload(a, &err), 0);
	/* A broken file: the old keys stay. */
	write_keys("garbage\n");
	SM_CHECK_EQ(sm_auth_reload(a, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_auth_nkeys(a), 3);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Bearer " KEY_A, NULL, 0, &id), 0);
	/* Tried once per change: the same broken file is not re-read. */
	SM_CHECK_EQ(sm_auth_reload(a, &err), 0);
	/* A good file replaces the keys. */
	hash_of(KEY_AB, h);
	snprintf(body, sizeof(body), "%s ab read,write\n", h);
	write_keys(body);
	SM_CHECK_EQ(sm_auth_reload(a, &err), 0);
	SM_CHECK_EQ(sm_auth_nkeys(a), 1);
	SM_CHECK_EQ(check(a, SM_SCOPE_READ, "Bearer " KEY_A, NULL, 0, &id),
	    SM_EAUTH);
	SM_CHECK_EQ(check(a, SM_SCOPE_WRITE, "Bearer " KEY_AB, NULL, 0, &id),
	    0);
	/* A vanished file keeps the keys too. */
	SM_CHECK_EQ(unlink(keys_path), 0);
	SM_CHECK_EQ(sm_auth_reload(a, &err), SM_EIO);
	SM_CHECK_EQ(sm_auth_nkeys(a), 1);
	sm_auth_destroy(a);
}

static void
test_parse_scopes(void)
{
	unsigned s = 0;
	struct sm_err err;

	SM_CHECK_EQ(sm_auth_parse_scopes("read,write,admin", &s, &err), 0);
	SM_CHECK_EQ(s, SM_SCOPE_READ | SM_SCOPE_WRITE | SM_SCOPE_ADMIN);
	SM_CHECK_EQ(sm_auth_parse_scopes("write", &s, &err), 0);
	SM_CHECK_EQ(s, SM_SCOPE_WRITE);
	SM_CHECK_EQ(sm_auth_parse_scopes("", &s, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_auth_parse_scopes("read,", &s, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_auth_parse_scopes("Read", &s, &err), SM_EINVAL);
}

/* The temporary keys file; 0, or -1 when mkstemp failed. */
static int
setup(void)
{
	int fd = mkstemp(keys_path);

	if (fd < 0)
		return (-1);
	close(fd);
	return (0);
}

static void
test_setup(void)
{
	/* (Not a check on the name: mkstemp's random suffix may end in
	 * 'X' itself, one run in 62.) */
	SM_CHECK_EQ(setup(), 0);
}

static void
test_cleanup(void)
{
	char tmp[sizeof(keys_path) + 8];

	snprintf(tmp, sizeof(tmp), "%s.new", keys_path);
	unlink(tmp);
	unlink(keys_path);
}

SM_TEST_MAIN(
	{ "setup: a temporary keys file", test_setup },
	{ "SHA-256 test vector, empty key refused", test_hash_vector },
	{ "Bearer and Basic (any user, key as password)",
	    test_bearer_and_basic },
	{ "401 and 403 cases, two org ids", test_refusals },
	{ "header and open modes; tenant id validation", test_header_mode },
	{ "invalid keys files fail with file:line", test_bad_files },
	{ "reload: bad or missing file keeps the old keys",
	    test_reload_keeps_old_keys },
	{ "scope lists", test_parse_scopes },
	{ "cleanup", test_cleanup },
)
