/*
 * bucket_test.c -- the acceptance suite of bucket.h: every case runs on
 * the filesystem backend and on the S3 backend against a real OpenStack
 * Swift (s3api) on loopback (tests/sm_test_swift.h).  Cases that only one
 * backend can have (wrong keys, a hung server, virtual-hosted
 * addressing, stale temporary files) come after the shared ones.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bucket.h"
#include "common/sm.h"

#include "sm_test.h"
#include "sm_test_swift.h"

static struct swift sw;
static char fsdir[64];

enum { BK_FS, BK_S3, BK_N };
static struct sm_bucket *bk[BK_N];
static const char *bk_name[BK_N] = { "filesystem", "s3" };

static void
fs_cfg(struct sm_bucket_cfg *c, const char *prefix)
{
	memset(c, 0, sizeof(*c));
	c->backend = (char *)"filesystem";
	c->prefix = (char *)prefix;
	c->fs_dir = fsdir;
}

static void
test_setup(void)
{
	struct sm_bucket_cfg c;
	struct sm_err err;

	snprintf(fsdir, sizeof(fsdir), "/tmp/smolder-bucket-XXXXXX");
	SM_REQUIRE(mkdtemp(fsdir) != NULL);
	fs_cfg(&c, "");
	SM_REQUIRE(sm_bucket_open(&c, NULL, &bk[BK_FS], &err) == 0);
	SM_REQUIRE(swift_start(&sw) == 0);
	swift_cfg(&sw, &c);
	SM_REQUIRE(sm_bucket_open(&c, NULL, &bk[BK_S3], &err) == 0);
	SM_CHECKF(sm_bucket_probe(bk[BK_S3], &err) == 0, "%s", err.msg);
	SM_CHECK(strstr(sm_bucket_desc(bk[BK_S3]), sw.secret) == NULL);
}

/* Fill p[0..n) with a pattern that differs per key and offset. */
static void
pattern(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

static void
test_put_get(void)
{
	static uint8_t big[3 << 20];
	struct sm_buf out;
	struct sm_err err;
	uint64_t size;

	pattern(big, sizeof(big), 7);
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
	char keys[1100][64];
	uint64_t sizes[1100];
	int n;
};

static int
collect(void *arg, const struct sm_bucket_obj *o)
{
	struct listed *l = arg;

	if (l->n < 1100) {
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
			SM_CHECK_EQ(l.sizes[k], strlen(sorted[k]));
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
		/* more keys than one S3 listing page (1000): continuation */
		for (int k = 0; k < 1005; k++) {
			snprintf(key, sizeof(key), "many/k%05d", k);
			SM_REQUIRE(sm_bucket_put(b, key, "", 0, &err) == 0);
		}
		memset(&l, 0, sizeof(l));
		SM_CHECKF(sm_bucket_list(b, "many/", collect, &l, &err) == 0,
		    "%s", err.msg);
		SM_CHECK_EQ(l.n, 1005);
		SM_CHECK_STR(l.keys[0], "many/k00000");
		SM_CHECK_STR(l.keys[1004], "many/k01004");
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
		if (i == BK_FS)
			fs_cfg(&c, "");
		else
			swift_cfg(&sw, &c);
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
		pattern(data, sizeof(data), (uint32_t)(w->id * 100 + k));
		if (sm_bucket_put(w->b, key, data, sizeof(data), &err) != 0)
			w->fails++;
	}
	for (int k = 0; k < 20; k++) {
		snprintf(key, sizeof(key), "conc/w%d/k%d", w->id, k);
		pattern(want, sizeof(want), (uint32_t)(w->id * 100 + k));
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
	int64_t t0;

	for (int i = 0; i < BK_N; i++) {
		if (i == BK_FS)
			fs_cfg(&c, "");
		else
			swift_cfg(&sw, &c);
		c.s3_timeout_ms = 30000;
		c.s3_max_retries = 4;
		SM_REQUIRE(sm_bucket_open(&c, NULL, &h.b, &err) == 0);
		if (i == BK_S3) {
			SM_REQUIRE(kill(sw.proxy_pid, SIGSTOP) == 0);
			SM_REQUIRE(pthread_create(&th, NULL, hung_get, &h) == 0);
			usleep(300000);
			t0 = sm_now_ms();
			sm_bucket_cancel(h.b);
			pthread_join(th, NULL);
			kill(sw.proxy_pid, SIGCONT);
			SM_CHECK_EQ(h.rv, SM_ECLOSED);
			SM_CHECKF(sm_now_ms() - t0 < 2000, "took %lld ms",
			    (long long)(sm_now_ms() - t0));
		} else {
			sm_bucket_cancel(h.b);
		}
		SM_CHECK_EQ(sm_bucket_put(h.b, "x/y", "1", 1, &err),
		    SM_ECLOSED);
		SM_CHECK_EQ(sm_bucket_probe(h.b, &err), SM_ECLOSED);
		sm_bucket_destroy(h.b);
	}
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
	{ "teardown", test_teardown },
)
