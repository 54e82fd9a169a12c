/*
 * bucket_test.c -- the acceptance suite of bucket.h: every case runs on
 * the filesystem backend and on the S3 backend against a real OpenStack
 * Swift (s3api) on loopback (tests/sm_test_swift.h).  Cases that only one
 * backend can have (wrong keys, a hung server, virtual-hosted
 * addressing, stale temporary files) come after the shared ones.  Last,
 * the S3 client against tests/tools/hostile_s3.py, a scripted server that
 * answers what no real store would (fault injection, not a second proof
 * of S3: that stays Swift's job).  The shared cases run a second time on
 * both backends sealed (-storage.encryption.key-file, bucket_seal.c),
 * which promises the same on plaintext; cases of the sealing itself
 * (ciphertext only at rest, tampering, rotation, per-tenant keys, objects
 * from before sealing) follow them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/bucket.h"
#include "common/json.h"
#include "common/sm.h"

#include "sm_test.h"
#include "sm_test_swift.h"

static struct swift sw;
static char fsdir[64];

static char keyfile[96];

enum { BK_FS, BK_S3, BK_FS_SEALED, BK_S3_SEALED, BK_N };
static struct sm_bucket *bk[BK_N];
enum { BK_PAGE = 10 };          /* the S3 backends' listing page */
static const char *bk_name[BK_N] = { "filesystem", "s3", "filesystem sealed",
	"s3 sealed" };

#define KEY_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define KEY_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define KEY_T "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* Write the key file; bump its time past the once-a-second check. */
static void
keys_write(const char *text)
{
	static int gen;
	struct timespec ts[2];
	FILE *f;

	SM_REQUIRE((f = fopen(keyfile, "w")) != NULL);
	fputs(text, f);
	fclose(f);
	chmod(keyfile, 0600);
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec += ++gen;
	ts[1] = ts[0];
	SM_REQUIRE(utimensat(AT_FDCWD, keyfile, ts, 0) == 0);
}

static void
fs_cfg(struct sm_bucket_cfg *c, const char *prefix)
{
	memset(c, 0, sizeof(*c));
	c->backend = (char *)"filesystem";
	c->prefix = (char *)prefix;
	c->fs_dir = fsdir;
}

/* The configuration of backend i (prefix ""). */
static void
bk_cfg(int i, struct sm_bucket_cfg *c)
{
	if (i == BK_FS || i == BK_FS_SEALED) {
		fs_cfg(c, "");
	} else {
		swift_cfg(&sw, c);
		/* Listings page by BK_PAGE keys: test_list reaches Swift's
		 * continuation with a few dozen puts, not a thousand. */
		c->s3_list_max_keys = BK_PAGE;
	}
	if (i == BK_FS_SEALED || i == BK_S3_SEALED)
		c->seal_key_file = keyfile;
}

/* What list reports for an object of n bytes put through backend i:
 * the stored size (a sealed object's header and tags included). */
static uint64_t
stored(int i, uint64_t n)
{
	if (i == BK_FS_SEALED || i == BK_S3_SEALED)
		return (104 + n + 16 * ((n + 65535) / 65536));
	return (n);
}

static void
test_setup(void)
{
	struct sm_bucket_cfg c;
	struct sm_err err;

	snprintf(fsdir, sizeof(fsdir), "/tmp/smolder-bucket-XXXXXX");
	SM_REQUIRE(mkdtemp(fsdir) != NULL);
	snprintf(keyfile, sizeof(keyfile), "%s.keys", fsdir);
	keys_write("# id key [tenant]\nka " KEY_A "\n");
	SM_REQUIRE(swift_start(&sw) == 0);
	for (int i = 0; i < BK_N; i++) {
		bk_cfg(i, &c);
		SM_CHECKF(sm_bucket_open(&c, NULL, &bk[i], &err) == 0,
		    "%s: %s", bk_name[i], err.msg);
		SM_REQUIRE(bk[i] != NULL);
	}
	SM_CHECKF(sm_bucket_probe(bk[BK_S3], &err) == 0, "%s", err.msg);
	SM_CHECK(strstr(sm_bucket_desc(bk[BK_S3]), sw.secret) == NULL);
	SM_CHECK(strstr(sm_bucket_desc(bk[BK_S3_SEALED]), sw.secret) == NULL);
	SM_CHECK(strstr(sm_bucket_desc(bk[BK_S3_SEALED]), KEY_A) == NULL);
}

static void
test_put_get(void)
{
	static uint8_t big[3 << 20];
	struct sm_buf out;
	struct sm_err err;
	uint64_t size;

	sm_test_fill(big, sizeof(big), 7);
	for (int i = 0; i < BK_N; i++) {
		struct sm_bucket *b = bk[i];

		SM_REQUIRE(b != NULL);
		sm_buf_init(&out);
		SM_CHECKF(sm_bucket_put(b, "t1/a", "hello", 5, &err) == 0,
		    "%s: %s", bk_name[i], err.msg);
		SM_CHECK(sm_bucket_get(b, "t1/a", 0, SM_BUCKET_WHOLE, &out,
		    &err) == 0);
		SM_CHECK(out.len == 5 && memcmp(out.b, "hello", 5) == 0);
		/* overwrite: the whole new object, nothing of the old */
		SM_CHECK(sm_bucket_put(b, "t1/a", "hi", 2, &err) == 0);
		sm_buf_reset(&out);
		SM_CHECK(sm_bucket_get(b, "t1/a", 0, SM_BUCKET_WHOLE, &out,
		    &err) == 0);
		SM_CHECK(out.len == 2 && memcmp(out.b, "hi", 2) == 0);
		/* a large object, whole and by ranges */
		SM_CHECKF(sm_bucket_put(b, "t1/big", big, sizeof(big), &err) ==
		    0, "%s: %s", bk_name[i], err.msg);
		SM_CHECK(sm_bucket_stat(b, "t1/big", &size, &err) == 0);
		SM_CHECK_EQ(size, sizeof(big));
		sm_buf_reset(&out);
		SM_CHECK(sm_bucket_get(b, "t1/big", 0, SM_BUCKET_WHOLE, &out,
		    &err) == 0);
		SM_CHECK(out.len == sizeof(big) &&
		    memcmp(out.b, big, sizeof(big)) == 0);
		sm_buf_reset(&out);
		SM_CHECK(sm_bucket_get(b, "t1/big", 0, 1, &out, &err) == 0);
		SM_CHECK(out.len == 1 && (uint8_t)out.b[0] == big[0]);
		sm_buf_reset(&out);
		SM_CHECK(sm_bucket_get(b, "t1/big", sizeof(big) - 1, 1, &out,
		    &err) == 0);
		SM_CHECK(out.len == 1 && (uint8_t)out.b[0] == big[sizeof(big) - 1]);
		sm_buf_reset(&out);
		SM_CHECK(sm_bucket_get(b, "t1/big", 1000003, 777777, &out,
		    &err) == 0);
		SM_CHECK(out.len == 777777 &&
		    memcmp(out.b, big + 1000003, 777777) == 0);
		/* from an offset to the end; appends to what out holds */
		SM_CHECK(sm_bucket_get(b, "t1/big", sizeof(big) - 10,
		    SM_BUCKET_WHOLE, &out, &err) == 0);
		SM_CHECK(out.len == 777787 &&
		    memcmp(out.b + 777777, big + sizeof(big) - 10, 10) == 0);
		/* an empty object */
		SM_CHECK(sm_bucket_put(b, "t1/empty", "", 0, &err) == 0);
		SM_CHECK(sm_bucket_stat(b, "t1/empty", &size, &err) == 0);
		SM_CHECK_EQ(size, 0);
		sm_buf_reset(&out);
		SM_CHECK(sm_bucket_get(b, "t1/empty", 0, SM_BUCKET_WHOLE, &out,
		    &err) == 0);
		SM_CHECK_EQ(out.len, 0);
		sm_buf_fini(&out);
	}
}

static void
test_errors(void)
{
	static const char *bad[] = { "", "/a", "a/", "a//b", "../x", "a/..",
		"a/./b", "a/.tmp-1", "a b", "a\nb", "a?b", "a%2Fb", "\xc3\xa9" };
	char longkey[SM_BUCKET_KEY_MAX + 2];
	struct sm_buf out;
	struct sm_err err;
	uint64_t size;

	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	sm_buf_init(&out);
	for (int i = 0; i < BK_N; i++) {
		struct sm_bucket *b = bk[i];

		SM_REQUIRE(b != NULL);
		SM_CHECK(sm_bucket_put(b, "e/x", "abc", 3, &err) == 0);
		SM_CHECK_EQ(sm_bucket_get(b, "e/missing", 0, SM_BUCKET_WHOLE,
		    &out, &err), SM_ENOTFOUND);
		SM_CHECK_EQ(sm_bucket_stat(b, "e/missing", &size, &err),
		    SM_ENOTFOUND);
		/* a directory of the filesystem backend is no object */
		SM_CHECK_EQ(sm_bucket_get(b, "e", 0, SM_BUCKET_WHOLE, &out,
		    &err), SM_ENOTFOUND);
		SM_CHECK_EQ(sm_bucket_get(b, "e/x", 2, 2, &out, &err),
		    SM_EINVAL);
		SM_CHECK_EQ(sm_bucket_get(b, "e/x", 4, SM_BUCKET_WHOLE, &out,
		    &err), SM_EINVAL);
		SM_CHECK_EQ(sm_bucket_get(b, "e/x", UINT64_MAX - 1, 5, &out,
		    &err), SM_EINVAL);
		SM_CHECK_EQ(out.len, 0);
		for (size_t k = 0; k < SM_ARRAY_LEN(bad); k++) {
			SM_CHECK_EQ(sm_bucket_put(b, bad[k], "x", 1, &err),
			    SM_EINVAL);
			SM_CHECK_EQ(sm_bucket_get(b, bad[k], 0, 1, &out, &err),
			    SM_EINVAL);
			SM_CHECK_EQ(sm_bucket_delete(b, bad[k], &err),
			    SM_EINVAL);
		}
		SM_CHECK_EQ(sm_bucket_put(b, longkey, "x", 1, &err),
		    SM_EINVAL);
		/* deleting a missing key is not an error */
		SM_CHECK(sm_bucket_delete(b, "e/missing", &err) == 0);
		SM_CHECK(sm_bucket_delete(b, "e/x", &err) == 0);
		SM_CHECK_EQ(sm_bucket_get(b, "e/x", 0, 1, &out, &err),
		    SM_ENOTFOUND);
	}
	sm_buf_fini(&out);
}

struct listed {
	char keys[64][64];
	uint64_t sizes[64];
	int n;
};

static int
collect(void *arg, const struct sm_bucket_obj *o)
{
	struct listed *l = arg;

	if (l->n < (int)SM_ARRAY_LEN(l->keys)) {
		snprintf(l->keys[l->n], sizeof(l->keys[0]), "%s", o->key);
		l->sizes[l->n] = o->size;
	}
	l->n++;
	return (0);
}

static int
stop_at_3(void *arg, const struct sm_bucket_obj *o)
{
	int *n = arg;

	(void)o;
	return (++*n == 3 ? 42 : 0);
}

static void
test_list(void)
{
	static const char *keys[] = { "l/a-c", "l/a/b", "l/a/a", "l/b",
		"l/a0", "l2/x", "l/A" };
	static const char *sorted[] = { "l/A", "l/a-c", "l/a/a", "l/a/b",
		"l/a0", "l/b" };
	static struct listed l;
	struct sm_err err;
	char key[64];
	int n;

	for (int i = 0; i < BK_N; i++) {
		struct sm_bucket *b = bk[i];

		SM_REQUIRE(b != NULL);
		for (size_t k = 0; k < SM_ARRAY_LEN(keys); k++)
			SM_CHECK(sm_bucket_put(b, keys[k], keys[k],
			    strlen(keys[k]), &err) == 0);
		memset(&l, 0, sizeof(l));
		SM_CHECKF(sm_bucket_list(b, "l/", collect, &l, &err) == 0,
		    "%s", err.msg);
		SM_CHECK_EQ(l.n, SM_ARRAY_LEN(sorted));
		for (int k = 0; k < l.n && k < (int)SM_ARRAY_LEN(sorted); k++) {
			SM_CHECK_STR(l.keys[k], sorted[k]);
			SM_CHECK_EQ(l.sizes[k], stored(i, strlen(sorted[k])));
		}
		/* a prefix that is not a whole segment */
		memset(&l, 0, sizeof(l));
		SM_CHECK(sm_bucket_list(b, "l/a", collect, &l, &err) == 0);
		SM_CHECK_EQ(l.n, 4);
		/* the callback's non-zero return stops and is returned */
		n = 0;
		SM_CHECK_EQ(sm_bucket_list(b, "l/", stop_at_3, &n, &err), 42);
		SM_CHECK_EQ(n, 3);
		memset(&l, 0, sizeof(l));
		SM_CHECK(sm_bucket_list(b, "nothing/", collect, &l, &err) ==
		    0);
		SM_CHECK_EQ(l.n, 0);
		SM_CHECK_EQ(sm_bucket_list(b, "bad prefix", collect, &l,
		    &err), SM_EINVAL);
		/* more keys than two S3 listing pages: continuation */
		for (int k = 0; k < 2 * BK_PAGE + 5; k++) {
			snprintf(key, sizeof(key), "many/k%05d", k);
			SM_REQUIRE(sm_bucket_put(b, key, "", 0, &err) == 0);
		}
		memset(&l, 0, sizeof(l));
		SM_CHECKF(sm_bucket_list(b, "many/", collect, &l, &err) == 0,
		    "%s", err.msg);
		SM_CHECK_EQ(l.n, 2 * BK_PAGE + 5);
		SM_CHECK_STR(l.keys[0], "many/k00000");
		snprintf(key, sizeof(key), "many/k%05d", 2 * BK_PAGE + 4);
		SM_CHECK_STR(l.keys[2 * BK_PAGE + 4], key);
		/* deleted keys leave the listing */
		for (size_t k = 0; k < SM_ARRAY_LEN(keys); k++)
			SM_CHECK(sm_bucket_delete(b, keys[k], &err) == 0);
		memset(&l, 0, sizeof(l));
		SM_CHECK(sm_bucket_list(b, "l/", collect, &l, &err) == 0);
		SM_CHECK_EQ(l.n, 0);
	}
}

/* -storage.prefix: two clusters sharing one store see only their own. */
static void
test_prefix(void)
{
	struct sm_bucket_cfg c;
	struct sm_bucket *p1, *p2;
	static struct listed l;
	struct sm_buf out;
	struct sm_err err;

	sm_buf_init(&out);
	for (int i = 0; i < BK_N; i++) {
		bk_cfg(i, &c);
		c.prefix = (char *)"c1/";
		SM_REQUIRE(sm_bucket_open(&c, NULL, &p1, &err) == 0);
		c.prefix = (char *)"c2";
		SM_REQUIRE(sm_bucket_open(&c, NULL, &p2, &err) == 0);
		SM_CHECK(sm_bucket_put(p1, "t/x", "one", 3, &err) == 0);
		SM_CHECK(sm_bucket_put(p2, "t/x", "two", 3, &err) == 0);
		SM_CHECK(sm_bucket_get(p1, "t/x", 0, SM_BUCKET_WHOLE, &out,
		    &err) == 0);
		SM_CHECK(out.len == 3 && memcmp(out.b, "one", 3) == 0);
		memset(&l, 0, sizeof(l));
		SM_CHECK(sm_bucket_list(p2, "", collect, &l, &err) == 0);
		SM_CHECK_EQ(l.n, 1);
		SM_CHECK_STR(l.keys[0], "t/x");
		/* the unprefixed view sees both, under their prefixes */
		sm_buf_reset(&out);
		SM_CHECK(sm_bucket_get(bk[i], "c2/t/x", 0, SM_BUCKET_WHOLE,
		    &out, &err) == 0);
		SM_CHECK(out.len == 3 && memcmp(out.b, "two", 3) == 0);
		SM_CHECK(sm_bucket_delete(p1, "t/x", &err) == 0);
		SM_CHECK(sm_bucket_delete(p2, "t/x", &err) == 0);
		sm_bucket_destroy(p1);
		sm_bucket_destroy(p2);
		sm_buf_reset(&out);
		c.prefix = (char *)"../up";
		SM_CHECK_EQ(sm_bucket_open(&c, NULL, &p1, &err), SM_EINVAL);
	}
	sm_buf_fini(&out);
}

/* Several threads at once on one handle (the shipper's and the store
 * gateway's pattern): every object comes back whole. */
struct worker {
	struct sm_bucket *b;
	int id, fails;
};

static void *
work(void *arg)
{
	struct worker *w = arg;
	uint8_t data[70000], want[70000];
	struct sm_buf out;
	struct sm_err err;
	char key[64];

	sm_buf_init(&out);
	for (int k = 0; k < 20; k++) {
		snprintf(key, sizeof(key), "conc/w%d/k%d", w->id, k);
		sm_test_fill(data, sizeof(data), (uint32_t)(w->id * 100 + k));
		if (sm_bucket_put(w->b, key, data, sizeof(data), &err) != 0)
			w->fails++;
	}
	for (int k = 0; k < 20; k++) {
		snprintf(key, sizeof(key), "conc/w%d/k%d", w->id, k);
		sm_test_fill(want, sizeof(want), (uint32_t)(w->id * 100 + k));
		sm_buf_reset(&out);
		if (sm_bucket_get(w->b, key, 0, SM_BUCKET_WHOLE, &out,
		    &err) != 0 || out.len != sizeof(want) ||
		    memcmp(out.b, want, sizeof(want)) != 0)
			w->fails++;
		if (sm_bucket_delete(w->b, key, &err) != 0)
			w->fails++;
	}
	sm_buf_fini(&out);
	return (NULL);
}

static void
test_concurrent(void)
{
	for (int i = 0; i < BK_N; i++) {
		struct worker w[4];
		pthread_t th[4];

		SM_REQUIRE(bk[i] != NULL);
		for (int t = 0; t < 4; t++) {
			w[t] = (struct worker){ bk[i], t, 0 };
			SM_REQUIRE(pthread_create(&th[t], NULL, work, &w[t]) ==
			    0);
		}
		for (int t = 0; t < 4; t++) {
			pthread_join(th[t], NULL);
			SM_CHECK_EQ(w[t].fails, 0);
		}
	}
}

/* --- filesystem only ------------------------------------------------------ */

static void
test_fs_tmp_invisible(void)
{
	static struct listed l;
	struct sm_err err;
	char path[256];
	FILE *f;

	/* a put's temporary file, as a crash leaves it */
	snprintf(path, sizeof(path), "%s/tmpd", fsdir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/tmpd/.tmp-1-1-obj", fsdir);
	SM_REQUIRE((f = fopen(path, "w")) != NULL);
	fputs("partial", f);
	fclose(f);
	memset(&l, 0, sizeof(l));
	SM_CHECK(sm_bucket_list(bk[BK_FS], "tmpd/", collect, &l, &err) == 0);
	SM_CHECK_EQ(l.n, 0);
	SM_CHECK(sm_bucket_put(bk[BK_FS], "tmpd/obj", "whole", 5, &err) == 0);
	memset(&l, 0, sizeof(l));
	SM_CHECK(sm_bucket_list(bk[BK_FS], "tmpd/", collect, &l, &err) == 0);
	SM_CHECK_EQ(l.n, 1);
	/* a delete removes the directories it empties, not fsdir */
	unlink(path);
	SM_CHECK(sm_bucket_delete(bk[BK_FS], "tmpd/obj", &err) == 0);
	snprintf(path, sizeof(path), "%s/tmpd", fsdir);
	SM_CHECK(access(path, F_OK) != 0);
	SM_CHECK(access(fsdir, F_OK) == 0);
}

static void
test_fs_data_dir(void)
{
	struct sm_bucket_cfg c;
	struct sm_bucket *b;
	struct sm_err err;
	char path[256];

	fs_cfg(&c, "");
	c.fs_dir = (char *)"";
	SM_REQUIRE(sm_bucket_open(&c, fsdir, &b, &err) == 0);
	SM_CHECK(sm_bucket_put(b, "d/x", "1", 1, &err) == 0);
	snprintf(path, sizeof(path), "%s/bucket/d/x", fsdir);
	SM_CHECK(access(path, F_OK) == 0);
	SM_CHECK(sm_bucket_delete(b, "d/x", &err) == 0);
	sm_bucket_destroy(b);
	c.backend = (char *)"gcs";
	SM_CHECK_EQ(sm_bucket_open(&c, fsdir, &b, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "gcs") != NULL);
}

/* --- s3 only --------------------------------------------------------------- */

static void
test_s3_wrong_secret(void)
{
	struct sm_bucket_cfg c;
	struct sm_bucket *b;
	struct sm_buf out;
	struct sm_err err;

	SM_REQUIRE(sw.up);
	swift_cfg(&sw, &c);
	c.s3_secret_access_key = (char *)"not-the-secret-4711";
	SM_REQUIRE(sm_bucket_open(&c, NULL, &b, &err) == 0);
	sm_buf_init(&out);
	SM_CHECK_EQ(sm_bucket_put(b, "x/y", "1", 1, &err), SM_EAUTH);
	SM_CHECK(strstr(err.msg, "not-the-secret-4711") == NULL);
	SM_CHECK(strstr(err.msg, "403") != NULL);
	SM_CHECK_EQ(sm_bucket_get(b, "x/y", 0, 1, &out, &err), SM_EAUTH);
	SM_CHECK_EQ(sm_bucket_probe(b, &err), SM_EAUTH);
	sm_bucket_destroy(b);
	/* no such bucket */
	swift_cfg(&sw, &c);
	c.s3_bucket = (char *)"no-such-bucket-here";
	SM_REQUIRE(sm_bucket_open(&c, NULL, &b, &err) == 0);
	SM_CHECK_EQ(sm_bucket_probe(b, &err), SM_ENOTFOUND);
	SM_CHECK(strstr(err.msg, "no such bucket") != NULL);
	sm_bucket_destroy(b);
	sm_buf_fini(&out);
}

static void
test_s3_credentials(void)
{
	struct sm_bucket_cfg c;
	struct sm_bucket *b;
	struct sm_err err;
	char path[128];
	FILE *f;

	SM_REQUIRE(sw.up);
	/* from the environment */
	swift_cfg(&sw, &c);
	c.s3_access_key_id = (char *)"";
	c.s3_secret_access_key = (char *)"";
	setenv("AWS_ACCESS_KEY_ID", sw.access, 1);
	setenv("AWS_SECRET_ACCESS_KEY", sw.secret, 1);
	SM_REQUIRE(sm_bucket_open(&c, NULL, &b, &err) == 0);
	SM_CHECKF(sm_bucket_put(b, "cred/env", "1", 1, &err) == 0, "%s",
	    err.msg);
	sm_bucket_destroy(b);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	/* from a shared credentials file, a named profile */
	snprintf(path, sizeof(path), "%s/credentials", fsdir);
	SM_REQUIRE((f = fopen(path, "w")) != NULL);
	fprintf(f, "[default]\naws_access_key_id = wrong\n"
	    "aws_secret_access_key = wrong\n\n[smolder]\n"
	    "aws_access_key_id = %s\naws_secret_access_key=%s\n", sw.access,
	    sw.secret);
	fclose(f);
	c.s3_credentials_file = path;
	setenv("AWS_PROFILE", "smolder", 1);
	SM_REQUIRE(sm_bucket_open(&c, NULL, &b, &err) == 0);
	SM_CHECKF(sm_bucket_put(b, "cred/file", "1", 1, &err) == 0, "%s",
	    err.msg);
	sm_bucket_destroy(b);
	unsetenv("AWS_PROFILE");
	/* none anywhere: the flag is named */
	c.s3_credentials_file = (char *)"/nonexistent/credentials";
	SM_CHECK_EQ(sm_bucket_open(&c, NULL, &b, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "-storage.s3.access-key-id") != NULL);
	swift_cfg(&sw, &c);
	c.s3_endpoint = (char *)"";
	SM_CHECK_EQ(sm_bucket_open(&c, NULL, &b, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "-storage.s3.endpoint") != NULL);
}

static void
test_s3_virtual_hosted(void)
{
	struct sm_bucket_cfg c;
	struct sm_bucket *b;
	struct sm_buf out;
	struct sm_err err;
	char ep[64];

	SM_REQUIRE(sw.up);
	swift_cfg(&sw, &c);
	/* <bucket>.localhost resolves to loopback (curl), and the harness
	 * sets s3api's storage_domain to localhost */
	snprintf(ep, sizeof(ep), "localhost:%s", sw.port);
	c.s3_endpoint = ep;
	c.s3_lookup = (char *)"virtual-hosted";
	SM_REQUIRE(sm_bucket_open(&c, NULL, &b, &err) == 0);
	SM_CHECKF(sm_bucket_put(b, "vh/x", "virtual", 7, &err) == 0, "%s",
	    err.msg);
	sm_buf_init(&out);
	SM_CHECK(sm_bucket_get(bk[BK_S3], "vh/x", 0, SM_BUCKET_WHOLE, &out,
	    &err) == 0);
	SM_CHECK(out.len == 7 && memcmp(out.b, "virtual", 7) == 0);
	sm_buf_fini(&out);
	SM_CHECK(sm_bucket_delete(b, "vh/x", &err) == 0);
	sm_bucket_destroy(b);
}

/* The store hangs (its front SIGSTOPped): calls fail within the bounded
 * time with SM_EUNAVAIL or SM_ETIMEDOUT, and work again afterwards. */
static void
test_s3_hung(void)
{
	struct sm_bucket_cfg c;
	struct sm_bucket *b;
	struct sm_buf out;
	struct sm_err err;
	int rv;

	SM_REQUIRE(sw.up && sw.proxy_pid > 0);
	swift_cfg(&sw, &c);
	c.s3_timeout_ms = 500;
	c.s3_max_retries = 1;
	SM_REQUIRE(sm_bucket_open(&c, NULL, &b, &err) == 0);
	sm_buf_init(&out);
	SM_REQUIRE(sm_bucket_put(b, "t1/a", "hi", 2, &err) == 0);
	SM_REQUIRE(kill(sw.proxy_pid, SIGSTOP) == 0);
	rv = sm_bucket_get(b, "t1/a", 0, SM_BUCKET_WHOLE, &out, &err);
	kill(sw.proxy_pid, SIGCONT);
	SM_CHECKF(rv == SM_ETIMEDOUT || rv == SM_EUNAVAIL, "rv %d: %s", rv,
	    err.msg);
	SM_CHECK_EQ(out.len, 0);
	sm_buf_reset(&out);
	SM_CHECKF(sm_bucket_get(b, "t1/a", 0, SM_BUCKET_WHOLE, &out, &err) ==
	    0, "%s", err.msg);
	sm_bucket_destroy(b);
	sm_buf_fini(&out);
}

/* sm_bucket_cancel ends a call hanging on the store within ~100 ms and
 * fails every later one with SM_ECLOSED (shutdown). */
struct hung_get {
	struct sm_bucket *b;
	int rv;
};

static void *
hung_get(void *arg)
{
	struct hung_get *h = arg;
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;

	h->rv = sm_bucket_get(h->b, "t1/a", 0, SM_BUCKET_WHOLE, &out, &err);
	sm_buf_fini(&out);
	return (NULL);
}

static void
test_cancel(void)
{
	struct sm_bucket_cfg c;
	struct hung_get h = { NULL, 0 };
	struct sm_err err;
	pthread_t th;

	for (int i = 0; i < BK_N; i++) {
		bk_cfg(i, &c);
		c.s3_timeout_ms = 30000;
		c.s3_max_retries = 4;
		SM_REQUIRE(sm_bucket_open(&c, NULL, &h.b, &err) == 0);
		if (i == BK_S3 || i == BK_S3_SEALED) {
			SM_REQUIRE(kill(sw.proxy_pid, SIGSTOP) == 0);
			SM_REQUIRE(pthread_create(&th, NULL, hung_get, &h) == 0);
			/* let the GET reach the stopped proxy; nothing is
			 * timed from here: with a 30 s timeout and retries,
			 * SM_ECLOSED is what only the cancel gives */
			usleep(300000);
			sm_bucket_cancel(h.b);
			pthread_join(th, NULL);
			kill(sw.proxy_pid, SIGCONT);
			SM_CHECK_EQ(h.rv, SM_ECLOSED);
		} else {
			sm_bucket_cancel(h.b);
		}
		SM_CHECK_EQ(sm_bucket_put(h.b, "x/y", "1", 1, &err),
		    SM_ECLOSED);
		SM_CHECK_EQ(sm_bucket_probe(h.b, &err), SM_ECLOSED);
		sm_bucket_destroy(h.b);
	}
}

/* --- sealed objects (bucket_seal.c) ---------------------------------------- */

/* The raw bytes of `key` as the filesystem backend stores them. */
static bool
raw_read(const char *key, struct sm_buf *out)
{
	char path[256], chunk[4096];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", fsdir, key);
	if ((f = fopen(path, "r")) == NULL)
		return (false);
	sm_buf_reset(out);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		sm_buf_append(out, chunk, n);
	fclose(f);
	return (true);
}

static void
raw_write(const char *key, const void *p, size_t n)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", fsdir, key);
	SM_REQUIRE((f = fopen(path, "w")) != NULL);
	SM_REQUIRE(fwrite(p, 1, n, f) == n);
	fclose(f);
}

/* A profile-like text: frame names a reader of the bucket must not see. */
static size_t
frames_text(uint8_t *p, size_t n)
{
	static const char frame[] = "runtime.mallocgc;main.handleRequest;";
	size_t k = 0;

	while (k + sizeof(frame) - 1 <= n) {
		memcpy(p + k, frame, sizeof(frame) - 1);
		k += sizeof(frame) - 1;
	}
	return (k);
}

/* At rest: only ciphertext; the stored size is the format's. */
static void
test_sealed_at_rest(void)
{
	static uint8_t text[200000];
	size_t n = frames_text(text, sizeof(text));
	struct sm_buf raw = SM_BUF_INIT, out = SM_BUF_INIT;
	struct sm_err err;
	uint64_t size;

	SM_CHECKF(sm_bucket_put(bk[BK_FS_SEALED], "acme/blocks/b1", text, n,
	    &err) == 0, "%s", err.msg);
	SM_REQUIRE(raw_read("acme/blocks/b1", &raw));
	SM_CHECK_EQ(raw.len, stored(BK_FS_SEALED, n));
	SM_CHECK(memmem(raw.b, raw.len, "mallocgc", 8) == NULL);
	SM_CHECK(memmem(raw.b, raw.len, "handleRequest", 13) == NULL);
	SM_CHECK(memcmp(raw.b, "SMSEAL01ka\0", 11) == 0);
	/* the plain view refuses ciphertext rather than serve it */
	SM_CHECK_EQ(sm_bucket_get(bk[BK_FS], "acme/blocks/b1", 0,
	    SM_BUCKET_WHOLE, &out, &err), SM_EAUTH);
	SM_CHECK(strstr(err.msg, "-storage.encryption.key-file") != NULL);
	SM_CHECK_EQ(out.len, 0);
	SM_CHECK(sm_bucket_stat(bk[BK_FS_SEALED], "acme/blocks/b1", &size,
	    &err) == 0);
	SM_CHECK_EQ(size, n);
	SM_CHECK(sm_bucket_get(bk[BK_FS_SEALED], "acme/blocks/b1", 0,
	    SM_BUCKET_WHOLE, &out, &err) == 0);
	SM_CHECK(out.len == n && memcmp(out.b, text, n) == 0);
	/* two puts of the same bytes differ (a data key per object) */
	SM_CHECK(sm_bucket_put(bk[BK_FS_SEALED], "acme/blocks/b2", text, n,
	    &err) == 0);
	SM_REQUIRE(raw_read("acme/blocks/b2", &out));
	SM_CHECK(out.len == raw.len && memcmp(out.b + 104, raw.b + 104,
	    64) != 0);
	sm_buf_fini(&raw);
	sm_buf_fini(&out);
}

/* Ranges across chunk boundaries, against the plaintext, on both stores;
 * the header is fetched once per object. */
static void
test_sealed_ranges(void)
{
	static uint8_t big[300001];
	static const uint64_t edges[][2] = { { 0, 1 }, { 65535, 1 },
		{ 65535, 2 }, { 65536, 65536 }, { 65535, 65538 },
		{ 131072, 168929 }, { 300000, 1 }, { 0, 300001 } };
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	uint32_t x = 12345;

	sm_test_fill(big, sizeof(big), 99);
	for (int i = BK_FS_SEALED; i <= BK_S3_SEALED; i++) {
		struct sm_bucket *b = bk[i];

		SM_REQUIRE(sm_bucket_put(b, "r/obj", big, sizeof(big), &err) ==
		    0);
		for (size_t k = 0; k < SM_ARRAY_LEN(edges); k++) {
			sm_buf_reset(&out);
			SM_CHECKF(sm_bucket_get(b, "r/obj", edges[k][0],
			    edges[k][1], &out, &err) == 0, "%s %zu: %s",
			    bk_name[i], k, err.msg);
			SM_CHECK(out.len == edges[k][1] && memcmp(out.b,
			    big + edges[k][0], edges[k][1]) == 0);
		}
		for (int k = 0; k < (i == BK_FS_SEALED ? 300 : 40); k++) {
			uint64_t off, len;

			x = x * 1103515245u + 12345u;
			off = x % sizeof(big);
			x = x * 1103515245u + 12345u;
			len = 1 + x % (sizeof(big) - off);
			sm_buf_reset(&out);
			SM_CHECK(sm_bucket_get(b, "r/obj", off, len, &out,
			    &err) == 0);
			SM_CHECK(out.len == len && memcmp(out.b, big + off,
			    len) == 0);
		}
		sm_buf_reset(&out);
		SM_CHECK_EQ(sm_bucket_get(b, "r/obj", 299990, 12, &out, &err),
		    SM_EINVAL);
		SM_CHECK(sm_bucket_delete(b, "r/obj", &err) == 0);
		SM_CHECK_EQ(sm_bucket_get(b, "r/obj", 5, 5, &out, &err),
		    SM_ENOTFOUND);
	}
	sm_buf_fini(&out);
}

/* Altered bytes, a header moved to another key, an object overwritten
 * behind a cached header. */
static void
test_sealed_tamper(void)
{
	static uint8_t big[200000];
	struct sm_buf raw = SM_BUF_INIT, out = SM_BUF_INIT;
	struct sm_bucket_cfg c;
	struct sm_bucket *other;
	struct sm_err err;

	sm_test_fill(big, sizeof(big), 5);
	SM_REQUIRE(sm_bucket_put(bk[BK_FS_SEALED], "x/t", big, sizeof(big),
	    &err) == 0);
	SM_REQUIRE(raw_read("x/t", &raw));
	raw.b[104 + 2 * (65536 + 16) + 10] ^= 1;      /* chunk 2 */
	raw_write("x/t", raw.b, raw.len);
	SM_CHECK_EQ(sm_bucket_get(bk[BK_FS_SEALED], "x/t", 0, SM_BUCKET_WHOLE,
	    &out, &err), SM_ECORRUPT);
	SM_CHECK(strstr(err.msg, "chunk 2") != NULL);
	sm_buf_reset(&out);
	SM_CHECK(sm_bucket_get(bk[BK_FS_SEALED], "x/t", 100, 1000, &out,
	    &err) == 0);
	SM_CHECK(out.len == 1000 && memcmp(out.b, big + 100, 1000) == 0);
	SM_CHECK_EQ(sm_bucket_get(bk[BK_FS_SEALED], "x/t", 140000, 10, &out,
	    &err), SM_ECORRUPT);
	/* the header is bound to its key */
	raw.b[104 + 2 * (65536 + 16) + 10] ^= 1;
	raw_write("x/moved", raw.b, raw.len);
	sm_buf_reset(&out);
	SM_CHECK_EQ(sm_bucket_get(bk[BK_FS_SEALED], "x/moved", 0,
	    SM_BUCKET_WHOLE, &out, &err), SM_ECORRUPT);
	SM_CHECK(strstr(err.msg, "another key") != NULL);
	/* an altered plaintext length fails the header's tag */
	raw.b[95] ^= 1;
	raw_write("x/t", raw.b, raw.len);
	SM_CHECK_EQ(sm_bucket_stat(bk[BK_FS_SEALED], "x/t", &(uint64_t){ 0 },
	    &err), SM_ECORRUPT);
	/* overwritten by another process after this one cached the header
	 * (the compactor rewriting the bucket index) */
	SM_REQUIRE(sm_bucket_put(bk[BK_FS_SEALED], "x/idx", big, 70000,
	    &err) == 0);
	sm_buf_reset(&out);
	SM_CHECK(sm_bucket_get(bk[BK_FS_SEALED], "x/idx", 10, 10, &out,
	    &err) == 0);
	bk_cfg(BK_FS_SEALED, &c);
	SM_REQUIRE(sm_bucket_open(&c, NULL, &other, &err) == 0);
	SM_REQUIRE(sm_bucket_put(other, "x/idx", big + 1000, 90000, &err) ==
	    0);
	sm_bucket_destroy(other);
	sm_buf_reset(&out);
	SM_CHECKF(sm_bucket_get(bk[BK_FS_SEALED], "x/idx", 80000, 100, &out,
	    &err) == 0, "%s", err.msg);
	SM_CHECK(out.len == 100 && memcmp(out.b, big + 81000, 100) == 0);
	sm_buf_reset(&out);
	SM_CHECK(sm_bucket_get(bk[BK_FS_SEALED], "x/idx", 10, 10, &out,
	    &err) == 0);
	SM_CHECK(out.len == 10 && memcmp(out.b, big + 1010, 10) == 0);
	for (const char *k = "x/t"; k != NULL; k = strcmp(k, "x/t") == 0 ?
	    "x/moved" : strcmp(k, "x/moved") == 0 ? "x/idx" : NULL)
		SM_CHECK(sm_bucket_delete(bk[BK_FS_SEALED], k, &err) == 0);
	sm_buf_fini(&raw);
	sm_buf_fini(&out);
}

/* Rotation without rewriting, per-tenant keys, a key that is gone, and
 * objects from before sealing. */
static void
test_sealed_keys(void)
{
	static uint8_t big[150000];
	struct sm_buf raw = SM_BUF_INIT, out = SM_BUF_INIT;
	struct sm_bucket *b = bk[BK_FS_SEALED];
	struct sm_bucket_cfg c;
	struct sm_bucket *x;
	struct sm_err err;
	uint64_t size;

	sm_test_fill(big, sizeof(big), 11);
	SM_REQUIRE(sm_bucket_put(b, "k/old", "sealed by ka", 12, &err) == 0);
	/* rotation: kb first; new objects get kb, old ones still open */
	keys_write("kb " KEY_B "\nka " KEY_A "\n"
	    "kt " KEY_T " acme  # acme's own\n");
	sleep(3);            /* the watch reads it once it settled */
	SM_REQUIRE(sm_bucket_put(b, "k/new", "sealed by kb", 12, &err) == 0);
	SM_REQUIRE(raw_read("k/new", &raw));
	SM_CHECK(memcmp(raw.b + 8, "kb\0", 3) == 0);
	SM_CHECK(sm_bucket_get(b, "k/old", 0, SM_BUCKET_WHOLE, &out, &err) ==
	    0);
	SM_CHECK(out.len == 12 && memcmp(out.b, "sealed by ka", 12) == 0);
	/* a tenant's own key, for its objects only */
	SM_REQUIRE(sm_bucket_put(b, "acme/blocks/x", "acme's", 6, &err) == 0);
	SM_REQUIRE(raw_read("acme/blocks/x", &raw));
	SM_CHECK(memcmp(raw.b + 8, "kt\0", 3) == 0);
	SM_REQUIRE(sm_bucket_put(b, "acmeco/blocks/x", "not acme", 8, &err) ==
	    0);
	SM_REQUIRE(raw_read("acmeco/blocks/x", &raw));
	SM_CHECK(memcmp(raw.b + 8, "kb\0", 3) == 0);
	/* ka retired: what it sealed no longer opens, and says why */
	keys_write("kb " KEY_B "\nkt " KEY_T " acme\n");
	sleep(3);
	sm_buf_reset(&out);
	SM_CHECK_EQ(sm_bucket_get(b, "k/old", 0, SM_BUCKET_WHOLE, &out, &err),
	    SM_EAUTH);
	SM_CHECK(strstr(err.msg, "'ka'") != NULL);
	SM_CHECK(sm_bucket_get(b, "k/new", 0, SM_BUCKET_WHOLE, &out, &err) ==
	    0);
	/* a broken file keeps the previous keys */
	keys_write("kb nothex\n");
	sleep(3);
	sm_buf_reset(&out);
	SM_CHECK(sm_bucket_get(b, "acme/blocks/x", 0, SM_BUCKET_WHOLE, &out,
	    &err) == 0);
	SM_CHECK(out.len == 6 && memcmp(out.b, "acme's", 6) == 0);
	/* objects put before sealing was switched on read as they are */
	SM_REQUIRE(sm_bucket_put(bk[BK_FS], "k/plain", big, sizeof(big),
	    &err) == 0);
	SM_REQUIRE(sm_bucket_put(bk[BK_FS], "k/tiny", "abc", 3, &err) == 0);
	sm_buf_reset(&out);
	SM_CHECK(sm_bucket_get(b, "k/plain", 0, SM_BUCKET_WHOLE, &out,
	    &err) == 0);
	SM_CHECK(out.len == sizeof(big) && memcmp(out.b, big,
	    sizeof(big)) == 0);
	sm_buf_reset(&out);
	SM_CHECK(sm_bucket_get(b, "k/plain", 70000, 5000, &out, &err) == 0);
	SM_CHECK(out.len == 5000 && memcmp(out.b, big + 70000, 5000) == 0);
	sm_buf_reset(&out);
	SM_CHECK(sm_bucket_get(b, "k/tiny", 1, 2, &out, &err) == 0);
	SM_CHECK(out.len == 2 && memcmp(out.b, "bc", 2) == 0);
	SM_CHECK(sm_bucket_stat(b, "k/plain", &size, &err) == 0);
	SM_CHECK_EQ(size, sizeof(big));
	/* key files that do not open */
	keys_write("kt " KEY_T " acme\n");
	bk_cfg(BK_FS_SEALED, &c);
	SM_CHECK_EQ(sm_bucket_open(&c, NULL, &x, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "no key without a tenant") != NULL);
	keys_write("ka " KEY_A "\nka " KEY_B "\n");
	SM_CHECK_EQ(sm_bucket_open(&c, NULL, &x, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "twice") != NULL);
	keys_write("ka 0123\n");
	SM_CHECK_EQ(sm_bucket_open(&c, NULL, &x, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "64 hex") != NULL);
	SM_CHECK(strstr(err.msg, "0123") == NULL);     /* never echoed */
	c.seal_key_file = (char *)"/nonexistent/keys";
	SM_CHECK_EQ(sm_bucket_open(&c, NULL, &x, &err), SM_EINVAL);
	keys_write("ka " KEY_A "\n");
	sleep(3);
	for (const char *k = "k/old"; k != NULL; k = strcmp(k, "k/old") == 0 ?
	    "k/new" : strcmp(k, "k/new") == 0 ? "k/plain" :
	    strcmp(k, "k/plain") == 0 ? "k/tiny" : NULL)
		SM_CHECK(sm_bucket_delete(b, k, &err) == 0);
	SM_CHECK(sm_bucket_delete(b, "acme/blocks/x", &err) == 0);
	SM_CHECK(sm_bucket_delete(b, "acmeco/blocks/x", &err) == 0);
	sm_buf_fini(&raw);
	sm_buf_fini(&out);
}

/* --- s3 against a hostile server ------------------------------------------ */

/*
 * tests/tools/hostile_s3.py in a session of its own, stdout a pipe for its
 * one JSON line, stderr DIR/server.log; stopped by pid.  Every case runs
 * its checks in a body without SM_REQUIRE (hostile_run), so the server is
 * stopped whatever fails.
 */
struct hostile {
	char dir[64];
	char endpoint[64];      /* 127.0.0.1:port */
	pid_t pid;
};

#define HOSTILE_OLD "old"       /* what `out` holds before every get */

/* SIGTERM, wait up to 5 s, then SIGKILL; remove DIR.  0 when the server
 * exited 0 on SIGTERM (printing its log otherwise). */
static int
hostile_stop(struct hostile *h)
{
	char path[128];
	unsigned char *log;
	size_t n = 0;
	pid_t w = 0;
	int st = 0, rv = 0;

	if (h->pid > 0) {
		kill(h->pid, SIGTERM);
		for (int i = 0; i < 500; i++) {
			w = waitpid(h->pid, &st, WNOHANG);
			if (w != 0 && !(w < 0 && errno == EINTR))
				break;
			usleep(10000);
		}
		if (w == 0) {
			kill(h->pid, SIGKILL);
			while ((w = waitpid(h->pid, &st, 0)) < 0 &&
			    errno == EINTR)
				;
			fprintf(stderr, "    hostile_s3.py ignored SIGTERM\n");
		}
		rv = w == h->pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ?
		    0 : -1;
		h->pid = -1;
	}
	if (h->dir[0] != '\0') {
		snprintf(path, sizeof(path), "%s/server.log", h->dir);
		if (rv != 0 && (log = sm_test_read_file(path, &n)) != NULL) {
			fprintf(stderr, "    hostile_s3.py's stderr:\n"
			    "%.4000s\n", (const char *)log);
			free(log);
		}
		unlink(path);
		snprintf(path, sizeof(path), "%s/secret.txt", h->dir);
		unlink(path);
		rmdir(h->dir);
		h->dir[0] = '\0';
	}
	return (rv);
}

/* Start the server, wait (at most 30 s) for its {"port", "pid"} line. */
static int
hostile_start(struct hostile *h)
{
	char script[256], path[128], line[256];
	char *argv[4];
	int fds[2] = { -1, -1 }, logfd;
	int64_t deadline = sm_now_ms() + 30000;
	struct sm_json *j = NULL;
	size_t n = 0;
	long long port = 0, pid = 0;

	memset(h, 0, sizeof(*h));
	h->pid = -1;
	snprintf(h->dir, sizeof(h->dir), "/tmp/smolder-hostile-XXXXXX");
	if (mkdtemp(h->dir) == NULL) {
		h->dir[0] = '\0';
		return (-1);
	}
	sm_test_path(script, sizeof(script), "tests/tools/hostile_s3.py");
	snprintf(path, sizeof(path), "%s/server.log", h->dir);
	argv[0] = (char *)"python3";
	argv[1] = script;
	argv[2] = h->dir;
	argv[3] = NULL;
	if ((logfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
	    0644)) < 0 || pipe2(fds, O_CLOEXEC) != 0) {
		if (logfd >= 0)
			close(logfd);
		hostile_stop(h);
		return (-1);
	}
	if ((h->pid = fork()) == 0) {
		setsid();
		if (dup2(fds[1], STDOUT_FILENO) < 0 ||
		    dup2(logfd, STDERR_FILENO) < 0)
			_exit(126);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	close(logfd);
	while (h->pid > 0 && n < sizeof(line) - 1 &&
	    memchr(line, '\n', n) == NULL) {
		struct pollfd pf = { .fd = fds[0], .events = POLLIN };
		int64_t left = deadline - sm_now_ms();
		ssize_t r;

		if (left <= 0)
			break;
		if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
			break;
		if (pf.revents == 0)
			continue;
		if ((r = read(fds[0], line + n, sizeof(line) - 1 - n)) <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			break;
		}
		n += (size_t)r;
	}
	close(fds[0]);
	line[n] = '\0';
	if (sm_json_parse(line, n, 0, &j, NULL) == 0) {
		port = sm_json_int(sm_json_get(j, "port"));
		pid = sm_json_int(sm_json_get(j, "pid"));
		sm_json_free(j);
	}
	if (h->pid <= 0 || port <= 0 || port > 65535 || pid != h->pid) {
		fprintf(stderr, "    hostile_s3.py did not start: \"%s\"\n",
		    line);
		hostile_stop(h);
		return (-1);
	}
	snprintf(h->endpoint, sizeof(h->endpoint), "127.0.0.1:%lld", port);
	return (0);
}

static void
hostile_cfg(const struct hostile *h, struct sm_bucket_cfg *c)
{
	s3_test_cfg(c, h->endpoint, "hostile", "us-east-1", "any-key",
	    "any-secret");
	c->s3_timeout_ms = 2000;
	c->s3_max_retries = 3;
}

/* Start the server, open a bucket on it, run body (SM_CHECKs only, no
 * SM_REQUIRE), stop the server: it never outlives the case. */
static void
hostile_run(void (*body)(struct sm_bucket *b))
{
	struct sm_bucket_cfg c;
	struct sm_bucket *b = NULL;
	struct hostile h;
	struct sm_err err;
	int rv;

	SM_REQUIRE(hostile_start(&h) == 0);
	hostile_cfg(&h, &c);
	rv = sm_bucket_open(&c, NULL, &b, &err);
	SM_CHECKF(rv == 0, "%s", err.msg);
	if (rv == 0) {
		body(b);
		sm_bucket_destroy(b);
	}
	SM_CHECK(hostile_stop(&h) == 0);
}

/* The server's count of requests for key (its "hits/<key>"), or -1. */
static long
hostile_hits(struct sm_bucket *b, const char *key)
{
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	char k[128], num[32];
	long n = -1;

	snprintf(k, sizeof(k), "hits/%s", key);
	if (sm_bucket_get(b, k, 0, SM_BUCKET_WHOLE, &out, &err) == 0 &&
	    out.len < sizeof(num)) {
		memcpy(num, out.b, out.len);
		num[out.len] = '\0';
		n = strtol(num, NULL, 10);
	}
	sm_buf_fini(&out);
	return (n);
}

/*
 * GET key [off, off + len) into a buffer holding HOSTILE_OLD: the return
 * is want, within 30 s; on success the buffer is HOSTILE_OLD + body (if
 * body is not NULL), on failure cut back to HOSTILE_OLD, with m1 and m2
 * (if not NULL) in err.msg and never the secret.
 */
static void
hostile_get(struct sm_bucket *b, const char *key, uint64_t off,
    uint64_t len, int want, const char *body, const char *m1,
    const char *m2)
{
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	int64_t t0 = sm_now_ms(), ms;
	size_t ol = strlen(HOSTILE_OLD);
	int rv;

	sm_buf_puts(&out, HOSTILE_OLD);
	sm_err_clear(&err);
	rv = sm_bucket_get(b, key, off, len, &out, &err);
	ms = sm_now_ms() - t0;
	SM_CHECKF(rv == want, "GET %s: %s, want %s: %s", key, sm_strerror(rv),
	    sm_strerror(want), err.msg);
	SM_CHECKF(ms < 30000, "GET %s took %lld ms", key, (long long)ms);
	SM_CHECKF(out.len >= ol && memcmp(out.b, HOSTILE_OLD, ol) == 0,
	    "GET %s: out lost its old bytes", key);
	if (rv != 0) {
		SM_CHECKF(out.len == ol, "GET %s: out not cut back: %zu bytes",
		    key, out.len);
		SM_CHECKF(m1 == NULL || strstr(err.msg, m1) != NULL,
		    "GET %s: \"%s\" not in: %s", key, m1, err.msg);
		SM_CHECKF(m2 == NULL || strstr(err.msg, m2) != NULL,
		    "GET %s: \"%s\" not in: %s", key, m2, err.msg);
		SM_CHECK(strstr(err.msg, "any-secret") == NULL);
	} else if (body != NULL) {
		SM_CHECKF(out.len == ol + strlen(body) &&
		    memcmp(out.b + ol, body, strlen(body)) == 0,
		    "GET %s: wrong body (%zu bytes)", key, out.len);
	}
	sm_buf_fini(&out);
}

#define HOSTILE_BODY "hostile-s3 fixed body\n"

static void
hostile_retries(struct sm_bucket *b)
{
	struct sm_err err;
	uint64_t size = 0;
	int rv;

	/* 5xx every time: 1 + max-retries tries, the store's code said */
	hostile_get(b, "slow503/get", 0, SM_BUCKET_WHOLE, SM_EUNAVAIL, NULL,
	    "503 SlowDown", "after 4 tries");
	SM_CHECK_EQ(hostile_hits(b, "slow503/get"), 4);
	rv = sm_bucket_put(b, "slow503/put", "payload", 7, &err);
	SM_CHECKF(rv == SM_EUNAVAIL && strstr(err.msg, "SlowDown") != NULL &&
	    strstr(err.msg, "after 4 tries") != NULL, "%s: %s",
	    sm_strerror(rv), err.msg);
	SM_CHECK_EQ(hostile_hits(b, "slow503/put"), 4);
	/* 500, 500, 200 and 429, 200: retried to success */
	hostile_get(b, "flaky/get", 0, SM_BUCKET_WHOLE, 0, HOSTILE_BODY, NULL,
	    NULL);
	SM_CHECK_EQ(hostile_hits(b, "flaky/get"), 3);
	hostile_get(b, "too429/get", 0, SM_BUCKET_WHOLE, 0, HOSTILE_BODY,
	    NULL, NULL);
	SM_CHECK_EQ(hostile_hits(b, "too429/get"), 2);
	rv = sm_bucket_stat(b, "flaky/stat", &size, &err);
	SM_CHECKF(rv == 0, "%s", err.msg);
	SM_CHECK_EQ(size, strlen(HOSTILE_BODY));
	SM_CHECK(sm_bucket_put(b, "too429/put", "x", 1, &err) == 0);
	/* and a plain miss is final at once */
	hostile_get(b, "nothing/here", 0, SM_BUCKET_WHOLE, SM_ENOTFOUND, NULL,
	    "NoSuchKey", NULL);
	SM_CHECK_EQ(hostile_hits(b, "nothing/here"), 1);
}

static void
hostile_lengths(struct sm_bucket *b)
{
	/* more than the range: aborted at the first byte too many */
	hostile_get(b, "longer", 0, 10, SM_EIO, NULL, "longer than asked",
	    NULL);
	hostile_get(b, "longer", 1000, 10, SM_EIO, NULL, "longer than asked",
	    NULL);
	hostile_get(b, "longer200", 0, 10, SM_EIO, NULL, "longer than asked",
	    NULL);
	hostile_get(b, "longer200", 7, 10, SM_EIO, NULL, NULL, NULL);
	/* fewer though the object is long enough (Content-Range): SM_EIO */
	hostile_get(b, "shorter", 5, 10, SM_EIO, NULL, "got 5 of 10", NULL);
	hostile_get(b, "shorter", 0, 3000, SM_EIO, NULL, "got 1500 of 3000",
	    NULL);
	/* fewer, the object ending there: the range runs past it, SM_EINVAL */
	hostile_get(b, "shorter/end/x", 5, 10, SM_EINVAL, NULL,
	    "past the end of the object (10 bytes)", NULL);
	/* the connection dies mid-body: a transport error, retried */
	hostile_get(b, "cut/whole", 0, SM_BUCKET_WHOLE, SM_EUNAVAIL, NULL,
	    "after 4 tries", NULL);
	SM_CHECK_EQ(hostile_hits(b, "cut/whole"), 4);
	hostile_get(b, "cut/range", 0, 100, SM_EUNAVAIL, NULL,
	    "after 4 tries", NULL);
}

static void
hostile_errors(struct sm_bucket *b)
{
	struct sm_err err;
	int rv;

	/* a 5 MiB error body: cut at 4 MiB, final (no retry) */
	hostile_get(b, "bigerr", 0, 10, SM_EIO, NULL, "over 4 MiB", NULL);
	SM_CHECK_EQ(hostile_hits(b, "bigerr"), 1);
	hostile_get(b, "skewed", 0, SM_BUCKET_WHOLE, SM_EAUTH, NULL, "403",
	    "RequestTimeTooSkewed");
	SM_CHECK_EQ(hostile_hits(b, "skewed"), 1);
	rv = sm_bucket_put(b, "skewed/put", "x", 1, &err);
	SM_CHECKF(rv == SM_EAUTH && strstr(err.msg, "RequestTimeTooSkewed") !=
	    NULL, "%s: %s", sm_strerror(rv), err.msg);
	/* an error body with a DTD has no code (its entity unexpanded) */
	hostile_get(b, "entityerr", 0, SM_BUCKET_WHOLE, SM_EAUTH, NULL,
	    "403 access denied", NULL);
	/* a redirect is not followed and says why it may come */
	hostile_get(b, "redirect", 0, SM_BUCKET_WHOLE, SM_EIO, NULL,
	    "301 PermanentRedirect", "endpoint or region");
	SM_CHECK_EQ(hostile_hits(b, "ok"), 0);
	/* the server still answers sanely (the above were its doing) */
	hostile_get(b, "ok", 0, SM_BUCKET_WHOLE, 0, HOSTILE_BODY, NULL, NULL);
}

/* Collects up to 16 keys; stops (77) after 10000 calls, so an endless
 * listing that the client failed to stop cannot hang the test. */
struct hlisted {
	char keys[16][128];
	int n;
};

static int
hostile_collect(void *arg, const struct sm_bucket_obj *o)
{
	struct hlisted *l = arg;

	if (l->n < 16)
		snprintf(l->keys[l->n], sizeof(l->keys[0]), "%s", o->key);
	return (++l->n >= 10000 ? 77 : 0);
}

/* List prefix: want, within 30 s, m in err.msg on failure. */
static void
hostile_list(struct sm_bucket *b, const char *prefix, int want,
    const char *m, struct hlisted *l)
{
	struct sm_err err;
	int64_t t0 = sm_now_ms(), ms;
	int rv;

	memset(l, 0, sizeof(*l));
	sm_err_clear(&err);
	rv = sm_bucket_list(b, prefix, hostile_collect, l, &err);
	ms = sm_now_ms() - t0;
	SM_CHECKF(rv == want, "list %s: %s (%d), want %s: %s", prefix,
	    sm_strerror(rv), rv, sm_strerror(want), err.msg);
	SM_CHECKF(ms < 30000, "list %s took %lld ms", prefix, (long long)ms);
	SM_CHECKF(rv == 0 || m == NULL || strstr(err.msg, m) != NULL,
	    "list %s: \"%s\" not in: %s", prefix, m, err.msg);
}

static void
hostile_listings(struct sm_bucket *b)
{
	struct hlisted l;

	hostile_list(b, "none/", 0, NULL, &l);
	SM_CHECK_EQ(l.n, 0);
	hostile_list(b, "hugepage/", SM_EIO, "over 4 MiB", &l);
	SM_CHECK_EQ(l.n, 0);
	hostile_list(b, "badsize/", SM_EIO, "Size", &l);
	SM_CHECK_EQ(l.n, 0);
	hostile_list(b, "badxml/", SM_EIO, "malformed", &l);
	SM_CHECK_EQ(l.n, 0);
	/* the same continuation token again: stopped on the second page */
	hostile_list(b, "loop/", SM_EIO, "NextContinuationToken", &l);
	SM_CHECKF(l.n <= 2, "loop/: %d objects", l.n);
}

static void
hostile_entities(struct sm_bucket *b)
{
	struct hlisted l;

	/* A DTD makes a page malformed (S3 sends none): its external
	 * entities are never fetched (the server counts) nor read
	 * (DIR/secret.txt), its internal ones never expanded into a key, and
	 * "billion laughs" ends at once. */
	hostile_list(b, "entity/", SM_EIO, "malformed", &l);
	SM_CHECK_EQ(l.n, 0);
	SM_CHECK_EQ(hostile_hits(b, "xxe"), 0);
	hostile_list(b, "laughs/", SM_EIO, "malformed", &l);
	SM_CHECK_EQ(l.n, 0);
}

static void
test_hostile_retries(void)
{
	hostile_run(hostile_retries);
}

static void
test_hostile_lengths(void)
{
	hostile_run(hostile_lengths);
}

static void
test_hostile_errors(void)
{
	hostile_run(hostile_errors);
}

static void
test_hostile_listings(void)
{
	hostile_run(hostile_listings);
}

static void
test_hostile_entities(void)
{
	hostile_run(hostile_entities);
}

static void
test_teardown(void)
{
	char cmd[128];

	for (int i = 0; i < BK_N; i++) {
		sm_bucket_destroy(bk[i]);
		bk[i] = NULL;
	}
	swift_stop(&sw);
	unlink(keyfile);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", fsdir);
	SM_CHECK(system(cmd) == 0);
}

SM_TEST_MAIN(
	{ "setup: a filesystem bucket and a real Swift s3api", test_setup },
	{ "put, overwrite, get whole and by ranges, empty objects",
	    test_put_get },
	{ "missing keys, bad ranges, invalid keys, idempotent delete",
	    test_errors },
	{ "list: byte order, prefixes, continuation, early stop",
	    test_list },
	{ "-storage.prefix isolates clusters sharing a store", test_prefix },
	{ "four threads on one handle", test_concurrent },
	{ "fs: temporary files are never objects; deletes prune dirs",
	    test_fs_tmp_invisible },
	{ "fs: under <data.dir>/bucket by default; unknown backend",
	    test_fs_data_dir },
	{ "s3: wrong secret is 403 (never echoed); no such bucket",
	    test_s3_wrong_secret },
	{ "s3: credentials from the environment and a shared file",
	    test_s3_credentials },
	{ "s3: virtual-hosted addressing", test_s3_virtual_hosted },
	{ "s3: a hung store fails in bounded time, then recovers",
	    test_s3_hung },
	{ "cancel ends a hung call and every later one (shutdown)",
	    test_cancel },
	{ "sealed: only ciphertext at rest, a data key per object",
	    test_sealed_at_rest },
	{ "sealed: ranges across chunks on both stores", test_sealed_ranges },
	{ "sealed: altered bytes, a moved header, an overwrite behind the "
	    "cache", test_sealed_tamper },
	{ "sealed: rotation, per-tenant keys, a retired key, objects from "
	    "before sealing, bad key files", test_sealed_keys },
	{ "hostile s3: 503 SlowDown after 4 tries; 500s and 429 retried "
	    "to success", test_hostile_retries },
	{ "hostile s3: longer, shorter, cut-off GET answers are errors",
	    test_hostile_lengths },
	{ "hostile s3: 5 MiB error body, clock skew, a redirect",
	    test_hostile_errors },
	{ "hostile s3: a 5 MiB page, a bad Size, an endless listing, not XML",
	    test_hostile_listings },
	{ "hostile s3: listing XML entities neither fetched nor expanded",
	    test_hostile_entities },
	{ "teardown", test_teardown },
)
