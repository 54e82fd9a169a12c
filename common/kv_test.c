/*
 * kv_test.c -- the RocksDB-backed sm_kv: point ops per column family,
 * isolation, batches, range deletes across tenant prefixes, iteration order,
 * seek and snapshots, persistence across close and across a killed writer
 * (WAL), the LOCK, corruption detection, compaction, properties, disk
 * usage, and the key helpers.
 *
 * Every test gets a fresh mkdtemp directory under /tmp and removes it.
 *
 * Child processes: the crash and lock tests need a second process.  Forking
 * a process that has run RocksDB is unsafe (its global thread pools do not
 * survive fork), so the child re-executes this binary with KV_TEST_CHILD in
 * the environment; a constructor runs the child's role before main() and
 * _exit()s, never returning into the test harness.
 */
#include "common/kv.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sm_test.h"
#include "sm_test_rmtree.h"

#define KV_TEST_CHILD "KV_TEST_CHILD"
#define CHILD_KEYS 2000

/* --- helpers -------------------------------------------------------------- */

struct tdir {
	char path[64];
};

static void
tdir_make(struct tdir *d)
{
	snprintf(d->path, sizeof(d->path), "/tmp/sm_kv_test.XXXXXX");
	SM_REQUIRE(mkdtemp(d->path) != NULL);
}

static void
tdir_remove(struct tdir *d)
{
	SM_CHECK(sm_test_rm_tree(d->path) == 0);
}

/* Small memtables and cache: tests are about behaviour, not speed. */
static void
test_opts(struct sm_kv_opts *o)
{
	sm_kv_opts_default(o);
	o->block_cache_bytes = 4u << 20;
	o->write_buffer_bytes = 4u << 20;
}

static struct sm_kv *
kv_open_ok(const char *path)
{
	struct sm_kv_opts o;
	struct sm_kv *kv = NULL;
	struct sm_err err;
	int rv;

	test_opts(&o);
	rv = sm_kv_open(path, &o, &kv, &err);
	SM_CHECKF(rv == 0, "open %s: %s", path, err.msg);
	SM_REQUIRE(rv == 0 && kv != NULL);
	return (kv);
}

/* Key: str(tenant) | u64(v). */
static void
tkey(struct sm_key *k, const char *tenant, uint64_t v)
{
	sm_key_reset(k);
	sm_key_str(k, tenant, strlen(tenant));
	sm_key_u64(k, v);
}

static int
get_str(struct sm_kv *kv, enum sm_kv_cf cf, const char *key, char *out,
    size_t outsz)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_err err;
	int rv;

	out[0] = '\0';
	rv = sm_kv_get(kv, cf, key, strlen(key), &v, &err);
	if (rv == 0)
		snprintf(out, outsz, "%.*s", (int)v.len,
		    v.b != NULL ? v.b : "");
	sm_buf_fini(&v);
	return (rv);
}

/* cf's value of key must be want; want NULL: key must be absent. */
static void
check_get(struct sm_kv *kv, enum sm_kv_cf cf, const char *key,
    const char *want)
{
	char got[64];
	int rv = get_str(kv, cf, key, got, sizeof(got));

	if (want == NULL) {
		SM_CHECKF(rv == SM_ENOTFOUND, "get %s: %d, want SM_ENOTFOUND",
		    key, rv);
		return;
	}
	SM_CHECKF(rv == 0, "get %s: %d (%s)", key, rv, sm_strerror(rv));
	SM_CHECK_STR(got, want);
}

static void
put_str(struct sm_kv *kv, enum sm_kv_cf cf, const char *key, const char *val)
{
	struct sm_err err;
	int rv = sm_kv_put(kv, cf, key, strlen(key), val, strlen(val), &err);

	SM_CHECKF(rv == 0, "put %s: %s", key, err.msg);
}

/* Number of keys in `cf`, checking that iteration ends cleanly. */
static int
count_keys(struct sm_kv *kv, enum sm_kv_cf cf)
{
	struct sm_kv_iter *it = sm_kv_iter_create(kv, cf);
	struct sm_err err;
	int n = 0;

	SM_REQUIRE(it != NULL);
	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it))
		n++;
	SM_CHECK_EQ(sm_kv_iter_status(it, &err), 0);
	sm_kv_iter_destroy(it);
	return (n);
}

/* --- child roles (run before main in a re-executed copy) ------------------ */

/* Open with sync=false, write, then die without closing. */
static void
child_write(const char *dir)
{
	struct sm_kv_opts o;
	struct sm_kv_batch *b;
	struct sm_kv *kv;
	struct sm_key k;
	uint8_t val[100];

	sm_kv_opts_default(&o);
	o.sync = false;
	if (sm_kv_open(dir, &o, &kv, NULL) != 0)
		_exit(2);
	for (uint64_t i = 0; i < CHILD_KEYS; i++) {
		tkey(&k, "crash", i);
		sm_test_fill(val, sizeof(val), i);
		if (sm_kv_put(kv, SM_KV_HEAD, k.b, k.n, val, sizeof(val),
		    NULL) != 0)
			_exit(3);
	}
	if ((b = sm_kv_batch_create()) == NULL)
		_exit(4);
	sm_kv_batch_put(b, SM_KV_INDEX, "batch-idx", 9, "1", 1);
	sm_kv_batch_put(b, SM_KV_BLOCKS, "batch-blk", 9, "2", 1);
	if (sm_kv_write(kv, b, false, NULL) != 0)
		_exit(5);
	/* No close, no flush, no atexit: a crash right after the acks. */
	_exit(0);
}

/* Expect the LOCK held by the parent to refuse us with SM_EIO. */
static void
child_lock(const char *dir)
{
	struct sm_kv_opts o;
	struct sm_kv *kv = NULL;
	struct sm_err err;
	int rv;

	sm_kv_opts_default(&o);
	rv = sm_kv_open(dir, &o, &kv, &err);
	if (rv == 0 || kv != NULL)
		_exit(10);
	if (rv != SM_EIO || err.code != SM_EIO || strstr(err.msg, "lock") ==
	    NULL)
		_exit(11);
	_exit(0);
}

/* Overflow a key: must abort (stderr muted: the message is expected). */
static void
child_keyover(void)
{
	static const char s[SM_KEY_MAX - 1];
	struct sm_key k;

	if (freopen("/dev/null", "w", stderr) == NULL)
		_exit(20);
	sm_key_reset(&k);
	sm_key_str(&k, s, sizeof(s));
	_exit(0);
}

__attribute__((constructor)) static void
kv_test_child(void)
{
	const char *role = getenv(KV_TEST_CHILD);

	if (role == NULL)
		return;
	if (strncmp(role, "write:", 6) == 0)
		child_write(role + 6);
	if (strncmp(role, "lock:", 5) == 0)
		child_lock(role + 5);
	if (strcmp(role, "keyover:") == 0)
		child_keyover();
	_exit(99);
}

/* Run this binary as a child in `role` on `dir`; returns its wait status. */
static int
run_child(const char *role, const char *dir)
{
	char env[128];
	int st = 0;
	pid_t pid;

	snprintf(env, sizeof(env), "%s%s", role, dir);
	SM_REQUIRE(setenv(KV_TEST_CHILD, env, 1) == 0);
	pid = fork();
	if (pid == 0) {
		char *const argv[] = { (char *)"kv_test", NULL };

		execv("/proc/self/exe", argv);
		_exit(98);
	}
	SM_CHECK(unsetenv(KV_TEST_CHILD) == 0);
	SM_REQUIRE(pid > 0);
	SM_REQUIRE(waitpid(pid, &st, 0) == pid);
	return (st);
}

/* A fresh temporary directory d with a store open in it. */
static struct sm_kv *
tdir_kv_open(struct tdir *d)
{
	tdir_make(d);
	return (kv_open_ok(d->path));
}

/* Close kv and remove its directory d. */
static void
tdir_kv_close(struct sm_kv *kv, struct tdir *d)
{
	sm_kv_close(kv);
	tdir_remove(d);
}

/* --- tests ---------------------------------------------------------------- */

static void
test_put_get(void)
{
	static const enum sm_kv_cf cfs[] = { SM_KV_HEAD, SM_KV_BLOCKS,
		SM_KV_INDEX, SM_KV_SPILL };
	struct sm_buf v = SM_BUF_INIT;
	struct sm_err err;
	struct tdir d;
	struct sm_kv *kv;
	char got[64];

	kv = tdir_kv_open(&d);
	for (size_t i = 0; i < SM_ARRAY_LEN(cfs); i++) {
		SM_CHECK_EQ(get_str(kv, cfs[i], "k", got, sizeof(got)),
		    SM_ENOTFOUND);
		put_str(kv, cfs[i], "k", "v1");
		SM_CHECK_EQ(get_str(kv, cfs[i], "k", got, sizeof(got)), 0);
		SM_CHECK_STR(got, "v1");
		put_str(kv, cfs[i], "k", "v2");   /* overwrite */
		SM_CHECK_EQ(get_str(kv, cfs[i], "k", got, sizeof(got)), 0);
		SM_CHECK_STR(got, "v2");
	}
	/* Empty value is a value, not "not found"; the buffer is appended. */
	SM_CHECK_EQ(sm_kv_put(kv, SM_KV_INDEX, "empty", 5, "", 0, &err), 0);
	sm_buf_puts(&v, "pre:");
	SM_CHECK_EQ(sm_kv_get(kv, SM_KV_INDEX, "empty", 5, &v, &err), 0);
	SM_CHECK_EQ(v.len, 4);
	SM_CHECK_EQ(sm_kv_get(kv, SM_KV_INDEX, "k", 1, &v, &err), 0);
	SM_CHECK_STR(v.b, "pre:v2");
	/* Binary keys with NULs. */
	SM_CHECK_EQ(sm_kv_put(kv, SM_KV_BLOCKS, "a\0b", 3, "x\0y", 3, &err),
	    0);
	sm_buf_reset(&v);
	SM_CHECK_EQ(sm_kv_get(kv, SM_KV_BLOCKS, "a\0b", 3, &v, &err), 0);
	SM_CHECK(v.len == 3 && memcmp(v.b, "x\0y", 3) == 0);
	SM_CHECK_EQ(sm_kv_get(kv, SM_KV_BLOCKS, "a", 1, &v, &err),
	    SM_ENOTFOUND);
	/* A limited buffer reports ETOOBIG with a message. */
	sm_buf_reset(&v);
	v.limit = 1;
	SM_CHECK_EQ(sm_kv_get(kv, SM_KV_INDEX, "k", 1, &v, &err), SM_ETOOBIG);
	SM_CHECK(err.code == SM_ETOOBIG && strstr(err.msg, "index") != NULL);
	sm_buf_fini(&v);
	sm_kv_close(kv);
	sm_kv_close(NULL);
	tdir_remove(&d);
}

static void
test_cf_isolation(void)
{
	struct tdir d;
	struct sm_kv *kv = tdir_kv_open(&d);

	put_str(kv, SM_KV_HEAD, "same", "head");
	put_str(kv, SM_KV_BLOCKS, "same", "blocks");
	put_str(kv, SM_KV_HEAD, "only-head", "h");
	check_get(kv, SM_KV_HEAD, "same", "head");
	check_get(kv, SM_KV_BLOCKS, "same", "blocks");
	check_get(kv, SM_KV_INDEX, "same", NULL);
	check_get(kv, SM_KV_BLOCKS, "only-head", NULL);
	SM_CHECK_EQ(count_keys(kv, SM_KV_HEAD), 2);
	SM_CHECK_EQ(count_keys(kv, SM_KV_BLOCKS), 1);
	SM_CHECK_EQ(count_keys(kv, SM_KV_INDEX), 0);
	/* Still isolated once in SST files. */
	SM_CHECK_EQ(sm_kv_flush(kv, NULL), 0);
	check_get(kv, SM_KV_INDEX, "same", NULL);
	check_get(kv, SM_KV_BLOCKS, "same", "blocks");
	tdir_kv_close(kv, &d);
}

static void
test_batch_atomic(void)
{
	struct sm_kv_batch *b = sm_kv_batch_create();
	struct sm_err err;
	struct tdir d;
	struct sm_kv *kv;
	char got[64];
	size_t bytes;

	SM_REQUIRE(b != NULL);
	kv = tdir_kv_open(&d);
	put_str(kv, SM_KV_HEAD, "h1", "old");
	put_str(kv, SM_KV_HEAD, "h2", "old");
	put_str(kv, SM_KV_HEAD, "r1", "x");
	put_str(kv, SM_KV_HEAD, "r2", "x");
	put_str(kv, SM_KV_HEAD, "r3", "x");
	put_str(kv, SM_KV_HEAD, "s", "x");

	SM_CHECK_EQ(sm_kv_batch_count(b), 0);
	SM_CHECK_EQ(sm_kv_batch_bytes(b), 0);
	sm_kv_batch_put(b, SM_KV_BLOCKS, "blk", 3, "data", 4);
	sm_kv_batch_put(b, SM_KV_INDEX, "idx", 3, "meta", 4);
	sm_kv_batch_delete(b, SM_KV_HEAD, "h1", 2);
	sm_kv_batch_delete_range(b, SM_KV_HEAD, "r", 1, "s", 1);
	/* Empty and inverted ranges delete nothing and are not recorded. */
	sm_kv_batch_delete_range(b, SM_KV_HEAD, "s", 1, "s", 1);
	sm_kv_batch_delete_range(b, SM_KV_HEAD, "z", 1, "a", 1);
	SM_CHECK_EQ(sm_kv_batch_count(b), 4);
	bytes = sm_kv_batch_bytes(b);
	SM_CHECK(bytes >= 3 + 4 + 3 + 4 + 2 + 1 + 1);

	/* Nothing is visible before the write. */
	check_get(kv, SM_KV_BLOCKS, "blk", NULL);
	SM_CHECK_EQ(get_str(kv, SM_KV_HEAD, "h1", got, sizeof(got)), 0);
	SM_CHECK_EQ(sm_kv_write(kv, b, true, &err), 0);
	check_get(kv, SM_KV_BLOCKS, "blk", "data");
	check_get(kv, SM_KV_INDEX, "idx", "meta");
	check_get(kv, SM_KV_HEAD, "h1", NULL);
	SM_CHECK_EQ(get_str(kv, SM_KV_HEAD, "h2", got, sizeof(got)), 0);
	check_get(kv, SM_KV_HEAD, "r2", NULL);
	SM_CHECK_EQ(get_str(kv, SM_KV_HEAD, "s", got, sizeof(got)), 0);
	SM_CHECK_EQ(count_keys(kv, SM_KV_HEAD), 2);   /* h2, s */

	/* A snapshot taken before a batch sees none of it; after, all. */
	sm_kv_batch_clear(b);
	SM_CHECK_EQ(sm_kv_batch_count(b), 0);
	SM_CHECK_EQ(sm_kv_batch_bytes(b), 0);
	for (int i = 0; i < 100; i++) {
		char k[16];

		snprintf(k, sizeof(k), "b%03d", i);
		sm_kv_batch_put(b, SM_KV_INDEX, k, 4, "v", 1);
	}
	sm_kv_batch_delete(b, SM_KV_INDEX, "idx", 3);
	{
		struct sm_kv_iter *it = sm_kv_iter_create(kv, SM_KV_INDEX);
		int n = 0;

		SM_REQUIRE(it != NULL);
		SM_CHECK_EQ(sm_kv_write(kv, b, false, &err), 0);
		for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
		    sm_kv_iter_next(it))
			n++;
		SM_CHECK_EQ(n, 1);          /* only "idx" */
		sm_kv_iter_destroy(it);
	}
	SM_CHECK_EQ(count_keys(kv, SM_KV_INDEX), 100);
	/* An empty batch is a valid write. */
	sm_kv_batch_clear(b);
	SM_CHECK_EQ(sm_kv_write(kv, b, false, &err), 0);
	sm_kv_batch_destroy(b);
	sm_kv_batch_destroy(NULL);
	tdir_kv_close(kv, &d);
}

/* A batch that ran out of memory while being built writes nothing. */
static void
test_batch_enomem(void)
{
	struct sm_kv_batch *b = sm_kv_batch_create();
	struct sm_err err;
	struct tdir d;
	struct sm_kv *kv;
	char got[64];

	SM_REQUIRE(b != NULL);
	kv = tdir_kv_open(&d);
	sm_kv_batch_put(b, SM_KV_INDEX, "first", 5, "1", 1);
	sm_fault_alloc_after(1);
	{
		static uint8_t big[4096];

		sm_kv_batch_put(b, SM_KV_INDEX, "second", 6, big,
		    sizeof(big));
	}
	sm_fault_alloc_after(0);
	SM_CHECK_EQ(sm_kv_batch_count(b), 1);
	SM_CHECK_EQ(sm_kv_write(kv, b, false, &err), SM_ENOMEM);
	SM_CHECK(strstr(err.msg, "nothing was written") != NULL);
	check_get(kv, SM_KV_INDEX, "first", NULL);
	/* Clearing resets the error; the batch is usable again. */
	sm_kv_batch_clear(b);
	sm_kv_batch_put(b, SM_KV_INDEX, "first", 5, "1", 1);
	SM_CHECK_EQ(sm_kv_write(kv, b, false, &err), 0);
	SM_CHECK_EQ(get_str(kv, SM_KV_INDEX, "first", got, sizeof(got)), 0);
	sm_kv_batch_destroy(b);
	tdir_kv_close(kv, &d);
}

/* The successor of a key prefix: the smallest key greater than every key
 * that starts with it (here the last byte never is 0xff). */
static void
prefix_end(const struct sm_key *p, struct sm_key *end)
{
	*end = *p;
	SM_REQUIRE(end->n > 0 && end->b[end->n - 1] != 0xff);
	end->b[end->n - 1]++;
}

static void
test_delete_range_prefix(void)
{
	static const char *const tenants[] = { "a", "ab", "b", "" };
	struct sm_key k, p, end;
	struct sm_kv_batch *b;
	struct sm_err err;
	struct tdir d;
	struct sm_kv *kv;

	/* Why the length prefix matters: raw "ab..." sorts inside
	 * ["a", "b"), so a raw prefix range for "a" would eat tenant "ab". */
	SM_CHECK(memcmp("ab", "a", 1) == 0 && memcmp("ab", "b", 1) < 0);

	kv = tdir_kv_open(&d);
	for (size_t t = 0; t < SM_ARRAY_LEN(tenants); t++)
		for (uint64_t i = 0; i < 50; i++) {
			tkey(&k, tenants[t], i * 1000003u);
			SM_REQUIRE(sm_kv_put(kv, SM_KV_HEAD, k.b, k.n, "v", 1,
			    &err) == 0);
		}
	/* Half in SST files, half in the memtable: tombstones must cover
	 * both. */
	SM_CHECK_EQ(sm_kv_flush(kv, &err), 0);
	for (uint64_t i = 50; i < 60; i++) {
		tkey(&k, "a", i);
		SM_REQUIRE(sm_kv_put(kv, SM_KV_HEAD, k.b, k.n, "v", 1, &err) ==
		    0);
	}
	SM_CHECK_EQ(count_keys(kv, SM_KV_HEAD), 4 * 50 + 10);

	sm_key_reset(&p);
	sm_key_str(&p, "a", 1);
	prefix_end(&p, &end);
	SM_REQUIRE((b = sm_kv_batch_create()) != NULL);
	sm_kv_batch_delete_range(b, SM_KV_HEAD, p.b, p.n, end.b, end.n);
	SM_CHECK_EQ(sm_kv_write(kv, b, false, &err), 0);
	sm_kv_batch_destroy(b);

	SM_CHECK_EQ(count_keys(kv, SM_KV_HEAD), 3 * 50);
	for (size_t t = 0; t < SM_ARRAY_LEN(tenants); t++) {
		struct sm_buf v = SM_BUF_INIT;
		int want = strcmp(tenants[t], "a") == 0 ? SM_ENOTFOUND : 0;

		for (uint64_t i = 0; i < 50; i++) {
			tkey(&k, tenants[t], i * 1000003u);
			SM_CHECK_EQ(sm_kv_get(kv, SM_KV_HEAD, k.b, k.n, &v,
			    &err), want);
		}
		sm_buf_fini(&v);
	}
	/* Still true after compaction drops the covered keys for good. */
	SM_CHECK_EQ(sm_kv_compact(kv, SM_KV_HEAD, NULL, 0, NULL, 0, &err), 0);
	SM_CHECK_EQ(count_keys(kv, SM_KV_HEAD), 3 * 50);
	tdir_kv_close(kv, &d);
}

static void
test_iter_order(void)
{
	static const uint64_t vals[] = { 0, 1, 255, 256, 65535, 65536,
		UINT32_MAX, (uint64_t)UINT32_MAX + 1, 1ull << 56,
		(1ull << 56) - 1, INT64_MAX, (uint64_t)INT64_MAX + 1,
		UINT64_MAX - 1, UINT64_MAX, 123456789, 0x0100000000000001ull };
	size_t n = SM_ARRAY_LEN(vals), seen = 0;
	struct sm_kv_iter *it;
	struct sm_err err;
	struct sm_key k;
	struct tdir d;
	struct sm_kv *kv;
	uint64_t prev = 0;

	kv = tdir_kv_open(&d);
	/* Insert in a scrambled order, some flushed and some not. */
	for (size_t i = 0; i < n; i++) {
		size_t j = (i * 7) % n;

		tkey(&k, "t", vals[j]);
		SM_REQUIRE(sm_kv_put(kv, SM_KV_INDEX, k.b, k.n, &vals[j],
		    sizeof(vals[j]), &err) == 0);
		if (i == n / 2)
			SM_CHECK_EQ(sm_kv_flush(kv, &err), 0);
	}
	SM_REQUIRE((it = sm_kv_iter_create(kv, SM_KV_INDEX)) != NULL);
	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *kp;
		const char *tn;
		size_t kl, vl, off = 0, tl;
		uint64_t v, stored;
		const void *vp;

		kp = sm_kv_iter_key(it, &kl);
		vp = sm_kv_iter_value(it, &vl);
		SM_REQUIRE(sm_key_get_str(kp, kl, &off, &tn, &tl) == 0);
		SM_CHECK(tl == 1 && tn[0] == 't');
		SM_REQUIRE(sm_key_get_u64(kp, kl, &off, &v) == 0);
		SM_CHECK_EQ(off, kl);
		SM_REQUIRE(vl == sizeof(stored));
		memcpy(&stored, vp, sizeof(stored));
		SM_CHECK(stored == v);
		if (seen > 0)
			SM_CHECKF(v > prev, "%" PRIu64 " after %" PRIu64, v,
			    prev);
		prev = v;
		seen++;
	}
	SM_CHECK_EQ(seen, n);
	SM_CHECK_EQ(prev, UINT64_MAX);
	SM_CHECK_EQ(sm_kv_iter_status(it, &err), 0);
	sm_kv_iter_destroy(it);
	tdir_kv_close(kv, &d);
}

static void
test_iter_seek(void)
{
	struct sm_kv_iter *it;
	struct sm_err err;
	struct sm_key k;
	struct tdir d;
	struct sm_kv *kv;
	uint64_t v;
	size_t kl, off;
	const uint8_t *kp;
	const char *s;
	size_t sl;

	kv = tdir_kv_open(&d);
	for (uint64_t i = 10; i <= 100; i += 10) {
		tkey(&k, "t", i);
		SM_REQUIRE(sm_kv_put(kv, SM_KV_BLOCKS, k.b, k.n, "", 0,
		    &err) == 0);
	}
	SM_REQUIRE((it = sm_kv_iter_create(kv, SM_KV_BLOCKS)) != NULL);
	/* Exact hit. */
	tkey(&k, "t", 40);
	sm_kv_iter_seek(it, k.b, k.n);
	SM_REQUIRE(sm_kv_iter_valid(it));
	kp = sm_kv_iter_key(it, &kl);
	off = 0;
	SM_CHECK(sm_key_get_str(kp, kl, &off, &s, &sl) == 0 &&
	    sm_key_get_u64(kp, kl, &off, &v) == 0 && v == 40);
	/* Between keys: lands on the next one. */
	tkey(&k, "t", 41);
	sm_kv_iter_seek(it, k.b, k.n);
	SM_REQUIRE(sm_kv_iter_valid(it));
	kp = sm_kv_iter_key(it, &kl);
	off = 2 + 1;
	SM_CHECK(sm_key_get_u64(kp, kl, &off, &v) == 0 && v == 50);
	sm_kv_iter_next(it);
	SM_REQUIRE(sm_kv_iter_valid(it));
	kp = sm_kv_iter_key(it, &kl);
	off = 2 + 1;
	SM_CHECK(sm_key_get_u64(kp, kl, &off, &v) == 0 && v == 60);
	/* Past the end: invalid, and that is not an error. */
	tkey(&k, "t", 101);
	sm_kv_iter_seek(it, k.b, k.n);
	SM_CHECK(!sm_kv_iter_valid(it));
	SM_CHECK_EQ(sm_kv_iter_status(it, &err), 0);
	/* A prefix seeks to the tenant's first key. */
	sm_key_reset(&k);
	sm_key_str(&k, "t", 1);
	sm_kv_iter_seek(it, k.b, k.n);
	SM_REQUIRE(sm_kv_iter_valid(it));
	kp = sm_kv_iter_key(it, &kl);
	off = 3;
	SM_CHECK(sm_key_get_u64(kp, kl, &off, &v) == 0 && v == 10);
	/* An iterator can be re-seeked after it ran off the end. */
	tkey(&k, "t", 101);
	sm_kv_iter_seek(it, k.b, k.n);
	sm_kv_iter_seek_first(it);
	SM_CHECK(sm_kv_iter_valid(it));
	sm_kv_iter_destroy(it);
	tdir_kv_close(kv, &d);
}

/* From the first key on, it yields exactly the "key=value" of want. */
static void
check_iter(struct sm_kv_iter *it, const char *const *want, size_t nwant)
{
	size_t n = 0;

	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it), n++) {
		const char *k, *v;
		size_t kl, vl;
		char kv_s[32];

		k = sm_kv_iter_key(it, &kl);
		v = sm_kv_iter_value(it, &vl);
		snprintf(kv_s, sizeof(kv_s), "%.*s=%.*s", (int)kl, k, (int)vl,
		    v);
		SM_REQUIRE(n < nwant);
		SM_CHECK_STR(kv_s, want[n]);
	}
	SM_CHECK_EQ(n, nwant);
}

static void
test_iter_snapshot(void)
{
	static const char *const want_old[] = { "k1=old", "k2=old",
		"k3=old" };
	static const char *const want_new[] = { "k0=new", "k1=old",
		"k2=new", "k4=new" };
	struct sm_kv_batch *b;
	struct sm_kv_iter *it, *it2;
	struct sm_err err;
	struct tdir d;
	struct sm_kv *kv = tdir_kv_open(&d);

	put_str(kv, SM_KV_HEAD, "k1", "old");
	put_str(kv, SM_KV_HEAD, "k2", "old");
	put_str(kv, SM_KV_HEAD, "k3", "old");
	SM_REQUIRE((it = sm_kv_iter_create(kv, SM_KV_HEAD)) != NULL);
	/* After the iterator's creation, before its first seek; the flush
	 * must keep the versions the snapshot still needs. */
	put_str(kv, SM_KV_HEAD, "k0", "new");
	put_str(kv, SM_KV_HEAD, "k2", "new");
	put_str(kv, SM_KV_HEAD, "k4", "new");
	SM_REQUIRE((b = sm_kv_batch_create()) != NULL);
	sm_kv_batch_delete(b, SM_KV_HEAD, "k3", 2);
	SM_CHECK_EQ(sm_kv_write(kv, b, false, &err), 0);
	sm_kv_batch_destroy(b);
	SM_CHECK_EQ(sm_kv_flush(kv, &err), 0);

	SM_REQUIRE((it2 = sm_kv_iter_create(kv, SM_KV_HEAD)) != NULL);
	check_iter(it, want_old, SM_ARRAY_LEN(want_old));
	SM_CHECK_EQ(sm_kv_iter_status(it, NULL), 0);
	check_iter(it2, want_new, SM_ARRAY_LEN(want_new));
	sm_kv_iter_destroy(it);
	sm_kv_iter_destroy(it2);
	sm_kv_iter_destroy(NULL);
	tdir_kv_close(kv, &d);
}

static void
test_reopen(void)
{
	struct sm_kv_batch *b;
	struct sm_kv_opts o;
	struct sm_err err;
	struct tdir d;
	struct sm_kv *kv = tdir_kv_open(&d);

	put_str(kv, SM_KV_HEAD, "unsynced", "1");
	put_str(kv, SM_KV_INDEX, "flushed", "2");
	SM_CHECK_EQ(sm_kv_flush(kv, &err), 0);
	SM_REQUIRE((b = sm_kv_batch_create()) != NULL);
	sm_kv_batch_put(b, SM_KV_BLOCKS, "forced", 6, "3", 1);
	SM_CHECK_EQ(sm_kv_write(kv, b, true, &err), 0);
	sm_kv_close(kv);

	/* Reopen with sync on, write more, close again. */
	test_opts(&o);
	o.sync = true;
	SM_REQUIRE(sm_kv_open(d.path, &o, &kv, &err) == 0);
	check_get(kv, SM_KV_HEAD, "unsynced", "1");
	check_get(kv, SM_KV_INDEX, "flushed", "2");
	check_get(kv, SM_KV_BLOCKS, "forced", "3");
	put_str(kv, SM_KV_HEAD, "synced", "4");
	sm_kv_batch_clear(b);
	sm_kv_batch_delete(b, SM_KV_HEAD, "unsynced", 8);
	SM_CHECK_EQ(sm_kv_write(kv, b, false, &err), 0);
	sm_kv_batch_destroy(b);
	sm_kv_close(kv);

	kv = kv_open_ok(d.path);
	check_get(kv, SM_KV_HEAD, "synced", "4");
	check_get(kv, SM_KV_HEAD, "unsynced", NULL);
	SM_CHECK_EQ(count_keys(kv, SM_KV_BLOCKS), 1);
	tdir_kv_close(kv, &d);
}

/* The spill family: unlogged batches are read back like any write, also
 * once flushed to SST files, and every open starts it empty (kv.h). */
static void
test_spill_family(void)
{
	struct sm_kv_batch *b;
	struct sm_err err;
	struct tdir d;
	struct sm_kv *kv;
	char got[64];

	kv = tdir_kv_open(&d);
	SM_REQUIRE((b = sm_kv_batch_create()) != NULL);
	sm_kv_batch_put(b, SM_KV_SPILL, "s1", 2, "one", 3);
	sm_kv_batch_put(b, SM_KV_SPILL, "s2", 2, "two", 3);
	sm_kv_batch_put(b, SM_KV_SPILL, "s3", 2, "three", 5);
	SM_CHECK_EQ(sm_kv_write_unlogged(kv, b, &err), 0);
	put_str(kv, SM_KV_BLOCKS, "kept", "k");
	check_get(kv, SM_KV_SPILL, "s2", "two");
	check_get(kv, SM_KV_BLOCKS, "s2", NULL);
	SM_CHECK_EQ(count_keys(kv, SM_KV_SPILL), 3);
	/* Part of it in an SST, the rest in the memtable. */
	SM_CHECK_EQ(sm_kv_flush(kv, &err), 0);
	sm_kv_batch_clear(b);
	sm_kv_batch_delete_range(b, SM_KV_SPILL, "s1", 2, "s3", 2);
	sm_kv_batch_put(b, SM_KV_SPILL, "s4", 2, "four", 4);
	SM_CHECK_EQ(sm_kv_write_unlogged(kv, b, &err), 0);
	SM_CHECK_EQ(count_keys(kv, SM_KV_SPILL), 2);     /* s3, s4 */
	check_get(kv, SM_KV_SPILL, "s3", "three");
	sm_kv_close(kv);

	/* Reopened: the spill family is empty, the rest as it was. */
	kv = kv_open_ok(d.path);
	SM_CHECK_EQ(count_keys(kv, SM_KV_SPILL), 0);
	SM_CHECK_EQ(get_str(kv, SM_KV_BLOCKS, "kept", got, sizeof(got)), 0);
	sm_kv_batch_clear(b);
	sm_kv_batch_put(b, SM_KV_SPILL, "s5", 2, "five", 4);
	SM_CHECK_EQ(sm_kv_write_unlogged(kv, b, &err), 0);
	SM_CHECK_EQ(count_keys(kv, SM_KV_SPILL), 1);
	SM_CHECK_EQ(sm_kv_flush(kv, &err), 0);
	sm_kv_close(kv);
	kv = kv_open_ok(d.path);
	SM_CHECK_EQ(count_keys(kv, SM_KV_SPILL), 0);
	sm_kv_close(kv);
	sm_kv_batch_destroy(b);
	tdir_remove(&d);
}

/* A writer killed right after its sync=false acks loses nothing: the WAL
 * is in the page cache, and the next open replays it. */
static void
test_crash_wal(void)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_err err;
	struct sm_key k;
	struct tdir d;
	struct sm_kv *kv;
	uint8_t want[100];
	char got[8];
	int st, bad = 0;

	tdir_make(&d);
	st = run_child("write:", d.path);
	SM_REQUIRE(WIFEXITED(st));
	SM_REQUIRE(WEXITSTATUS(st) == 0);
	kv = kv_open_ok(d.path);
	for (uint64_t i = 0; i < CHILD_KEYS; i++) {
		tkey(&k, "crash", i);
		sm_test_fill(want, sizeof(want), i);
		sm_buf_reset(&v);
		if (sm_kv_get(kv, SM_KV_HEAD, k.b, k.n, &v, &err) != 0 ||
		    v.len != sizeof(want) || memcmp(v.b, want, v.len) != 0)
			bad++;
	}
	SM_CHECK_EQ(bad, 0);
	SM_CHECK_EQ(count_keys(kv, SM_KV_HEAD), CHILD_KEYS);
	SM_CHECK_EQ(get_str(kv, SM_KV_INDEX, "batch-idx", got, sizeof(got)),
	    0);
	SM_CHECK_EQ(get_str(kv, SM_KV_BLOCKS, "batch-blk", got, sizeof(got)),
	    0);
	sm_buf_fini(&v);
	tdir_kv_close(kv, &d);
}

static void
test_second_open(void)
{
	struct sm_kv_opts o;
	struct sm_kv *kv, *kv2 = (struct sm_kv *)&o;
	struct sm_err err;
	struct tdir d;
	int st;

	kv = tdir_kv_open(&d);
	put_str(kv, SM_KV_HEAD, "k", "v");
	/* Same process. */
	test_opts(&o);
	SM_CHECK_EQ(sm_kv_open(d.path, &o, &kv2, &err), SM_EIO);
	SM_CHECK(kv2 == NULL);
	SM_CHECK_EQ(err.code, SM_EIO);
	SM_CHECKF(strstr(err.msg, "lock") != NULL && strstr(err.msg,
	    d.path) != NULL, "%s", err.msg);
	/* Another process (fcntl lock). */
	st = run_child("lock:", d.path);
	SM_CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	sm_kv_close(kv);
	/* Released on close. */
	kv = kv_open_ok(d.path);
	tdir_kv_close(kv, &d);
}

/* Open failures return a code and a message, set *out to NULL and leak
 * nothing (the ASan build checks the last part). */
static void
test_open_fails_cleanly(void)
{
	struct sm_kv_opts o;
	struct sm_kv *kv = (struct sm_kv *)&o;
	struct sm_err err;
	struct tdir d;
	char path[128];
	FILE *f;

	tdir_make(&d);
	test_opts(&o);
	/* The path is a regular file. */
	snprintf(path, sizeof(path), "%s/file", d.path);
	SM_REQUIRE((f = fopen(path, "w")) != NULL);
	fclose(f);
	SM_CHECK_EQ(sm_kv_open(path, &o, &kv, &err), SM_EIO);
	SM_CHECK(kv == NULL);
	SM_CHECKF(strstr(err.msg, "kv: open") != NULL && strstr(err.msg,
	    "IO error") != NULL, "%s", err.msg);
	/* Below a missing directory (only the last level is created). */
	snprintf(path, sizeof(path), "%s/missing/db", d.path);
	kv = (struct sm_kv *)&o;
	SM_CHECK_EQ(sm_kv_open(path, &o, &kv, &err), SM_EIO);
	SM_CHECK(kv == NULL);
	/* Out of memory before RocksDB is involved. */
	snprintf(path, sizeof(path), "%s/db", d.path);
	sm_fault_alloc_after(1);
	SM_CHECK_EQ(sm_kv_open(path, &o, &kv, &err), SM_ENOMEM);
	sm_fault_alloc_after(2);
	SM_CHECK_EQ(sm_kv_open(path, &o, &kv, &err), SM_ENOMEM);
	sm_fault_alloc_after(0);
	SM_CHECK(kv == NULL);
	tdir_remove(&d);
}

/* Largest *.sst file in `dir`, into path. */
static off_t
largest_sst(const char *dir, char *path, size_t n)
{
	struct dirent *de;
	off_t best = -1;
	DIR *dp;

	SM_REQUIRE((dp = opendir(dir)) != NULL);
	while ((de = readdir(dp)) != NULL) {
		size_t l = strlen(de->d_name);
		struct stat st;

		if (l < 4 || strcmp(de->d_name + l - 4, ".sst") != 0)
			continue;
		if (fstatat(dirfd(dp), de->d_name, &st, 0) == 0 &&
		    st.st_size > best) {
			best = st.st_size;
			SM_REQUIRE((size_t)snprintf(path, n, "%s/%s", dir,
			    de->d_name) < n);
		}
	}
	closedir(dp);
	return (best);
}

static void
flip_bytes(const char *path, off_t at, size_t n)
{
	uint8_t buf[64];
	FILE *f;

	SM_REQUIRE(n <= sizeof(buf));
	SM_REQUIRE((f = fopen(path, "r+b")) != NULL);
	SM_REQUIRE(fseeko(f, at, SEEK_SET) == 0);
	SM_REQUIRE(fread(buf, 1, n, f) == n);
	for (size_t i = 0; i < n; i++)
		buf[i] ^= 0xa5;
	SM_REQUIRE(fseeko(f, at, SEEK_SET) == 0);
	SM_REQUIRE(fwrite(buf, 1, n, f) == n);
	SM_REQUIRE(fclose(f) == 0);
}

#define CORRUPT_KEYS 3000
#define CORRUPT_VAL 1024

/* Read every key back: each read is either the right value or
 * SM_ECORRUPT with RocksDB's "Corruption" text; never wrong bytes. */
static int
read_all_corrupt(struct sm_kv *kv)
{
	static uint8_t want[CORRUPT_VAL];
	struct sm_buf v = SM_BUF_INIT;
	struct sm_err err;
	struct sm_key k;
	int ncorrupt = 0, rv;

	for (uint64_t i = 0; i < CORRUPT_KEYS; i++) {
		tkey(&k, "c", i);
		sm_test_fill(want, sizeof(want), i);
		sm_buf_reset(&v);
		rv = sm_kv_get(kv, SM_KV_BLOCKS, k.b, k.n, &v, &err);
		if (rv == SM_ECORRUPT) {
			SM_CHECKF(strstr(err.msg, "Corruption") != NULL, "%s",
			    err.msg);
			ncorrupt++;
			continue;
		}
		SM_CHECKF(rv == 0, "key %" PRIu64 ": %s", i, err.msg);
		SM_CHECK(rv != 0 || (v.len == sizeof(want) &&
		    memcmp(v.b, want, v.len) == 0));
	}
	sm_buf_fini(&v);
	return (ncorrupt);
}

static void
test_corruption(void)
{
	static uint8_t val[CORRUPT_VAL];
	struct sm_kv_batch *b;
	struct sm_kv_iter *it;
	struct sm_kv_opts o;
	struct sm_err err;
	struct sm_key k;
	struct tdir d;
	struct sm_kv *kv;
	char sst[256];
	off_t size;
	int rv, n = 0;

	kv = tdir_kv_open(&d);
	SM_REQUIRE((b = sm_kv_batch_create()) != NULL);
	for (uint64_t i = 0; i < CORRUPT_KEYS; i++) {
		tkey(&k, "c", i);
		sm_test_fill(val, sizeof(val), i);
		sm_kv_batch_put(b, SM_KV_BLOCKS, k.b, k.n, val, sizeof(val));
		if (sm_kv_batch_count(b) == 500) {
			SM_REQUIRE(sm_kv_write(kv, b, false, &err) == 0);
			sm_kv_batch_clear(b);
		}
	}
	SM_REQUIRE(sm_kv_write(kv, b, false, &err) == 0);
	sm_kv_batch_destroy(b);
	SM_REQUIRE(sm_kv_flush(kv, &err) == 0);
	sm_kv_close(kv);

	/* The middle of a ~3 MB uncompressed SST is data blocks (index,
	 * filter and footer sit at the end). */
	size = largest_sst(d.path, sst, sizeof(sst));
	SM_REQUIRE(size > 1 << 20);
	flip_bytes(sst, size / 2, 32);

	test_opts(&o);
	rv = sm_kv_open(d.path, &o, &kv, &err);
	SM_REQUIRE(rv == 0);
	SM_CHECK(read_all_corrupt(kv) >= 1);
	/* A full scan stops with the error instead of skipping the block. */
	SM_REQUIRE((it = sm_kv_iter_create(kv, SM_KV_BLOCKS)) != NULL);
	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it))
		n++;
	SM_CHECK(n < CORRUPT_KEYS);
	rv = sm_kv_iter_status(it, &err);
	SM_CHECK_EQ(rv, SM_ECORRUPT);
	SM_CHECKF(rv != SM_ECORRUPT || (err.code == SM_ECORRUPT &&
	    strstr(err.msg, "Corruption") != NULL), "%s", err.msg);
	sm_kv_iter_destroy(it);
	/* Reads of the corrupt family leave the database writable. */
	put_str(kv, SM_KV_INDEX, "still", "works");
	/* A compaction that reads the bad block fails with the real error,
	 * and paranoid_checks then stops writes instead of going on. */
	rv = sm_kv_compact(kv, SM_KV_BLOCKS, NULL, 0, NULL, 0, &err);
	SM_CHECK_EQ(rv, SM_ECORRUPT);
	SM_CHECKF(strstr(err.msg, "kv: compact blocks: Corruption") != NULL,
	    "%s", err.msg);
	SM_CHECK(sm_kv_put(kv, SM_KV_INDEX, "k", 1, "v", 1, &err) != 0);
	tdir_kv_close(kv, &d);
}

static void
test_compact(void)
{
	static uint8_t val[512];
	struct sm_kv_batch *b;
	struct sm_err err;
	struct sm_key k, p, end;
	struct tdir d;
	struct sm_kv *kv;
	uint64_t before, after, keys;

	kv = tdir_kv_open(&d);
	/* Compacting an empty family, with and without bounds, is fine. */
	SM_CHECK_EQ(sm_kv_compact(kv, SM_KV_INDEX, NULL, 0, NULL, 0, &err), 0);
	SM_CHECK_EQ(sm_kv_compact(kv, SM_KV_INDEX, "a", 1, "b", 1, &err), 0);
	SM_REQUIRE((b = sm_kv_batch_create()) != NULL);
	for (uint64_t i = 0; i < 2000; i++) {
		sm_test_fill(val, sizeof(val), i);
		tkey(&k, i % 2 ? "old" : "new", i);
		sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, val, sizeof(val));
	}
	SM_REQUIRE(sm_kv_write(kv, b, false, &err) == 0);
	SM_REQUIRE(sm_kv_flush(kv, &err) == 0);
	SM_REQUIRE(sm_kv_property(kv, SM_KV_INDEX,
	    "rocksdb.total-sst-files-size", &before) == 0);
	SM_CHECK(before > 2000 * 512);

	/* Retention: range-delete a tenant, then compact the range. */
	sm_key_reset(&p);
	sm_key_str(&p, "old", 3);
	prefix_end(&p, &end);
	sm_kv_batch_clear(b);
	sm_kv_batch_delete_range(b, SM_KV_INDEX, p.b, p.n, end.b, end.n);
	SM_REQUIRE(sm_kv_write(kv, b, false, &err) == 0);
	sm_kv_batch_destroy(b);
	SM_CHECK_EQ(sm_kv_compact(kv, SM_KV_INDEX, p.b, p.n, end.b, end.n,
	    &err), 0);
	SM_CHECK_EQ(sm_kv_compact(kv, SM_KV_INDEX, NULL, 0, NULL, 0, &err), 0);
	SM_REQUIRE(sm_kv_property(kv, SM_KV_INDEX,
	    "rocksdb.total-sst-files-size", &after) == 0);
	SM_CHECKF(after < before * 3 / 4, "before %" PRIu64 " after %" PRIu64,
	    before, after);
	SM_CHECK_EQ(count_keys(kv, SM_KV_INDEX), 1000);
	SM_REQUIRE(sm_kv_property(kv, SM_KV_INDEX, "rocksdb.estimate-num-keys",
	    &keys) == 0);
	SM_CHECK_EQ(keys, 1000);
	tdir_kv_close(kv, &d);
}

static void
test_property_disk_bytes(void)
{
	static uint8_t val[1024];
	struct sm_err err;
	struct sm_key k;
	struct tdir d;
	struct sm_kv *kv;
	uint64_t n = 99, empty_bytes, full_bytes;

	kv = tdir_kv_open(&d);
	empty_bytes = sm_kv_disk_bytes(kv);
	SM_CHECK(empty_bytes > 0);     /* MANIFEST, OPTIONS, LOG, WAL */
	SM_CHECK_EQ(sm_kv_property(kv, SM_KV_HEAD, "rocksdb.estimate-num-keys",
	    &n), 0);
	SM_CHECK_EQ(n, 0);
	for (uint64_t i = 0; i < 1000; i++) {
		tkey(&k, "p", i);
		sm_test_fill(val, sizeof(val), i);
		SM_REQUIRE(sm_kv_put(kv, SM_KV_HEAD, k.b, k.n, val, sizeof(val),
		    &err) == 0);
	}
	/* Memtable only: exact for distinct keys. */
	SM_CHECK_EQ(sm_kv_property(kv, SM_KV_HEAD, "rocksdb.estimate-num-keys",
	    &n), 0);
	SM_CHECK_EQ(n, 1000);
	SM_CHECK_EQ(sm_kv_property(kv, SM_KV_BLOCKS,
	    "rocksdb.estimate-num-keys", &n), 0);
	SM_CHECK_EQ(n, 0);
	SM_CHECK_EQ(sm_kv_flush(kv, &err), 0);
	SM_CHECK_EQ(sm_kv_property(kv, SM_KV_HEAD, "rocksdb.estimate-num-keys",
	    &n), 0);
	SM_CHECK_EQ(n, 1000);
	SM_CHECK_EQ(sm_kv_property(kv, SM_KV_HEAD,
	    "rocksdb.total-sst-files-size", &n), 0);
	SM_CHECK(n > 0);
	full_bytes = sm_kv_disk_bytes(kv);
	/* WAL (1 MB) plus SST; LZ4 barely shrinks random bytes. */
	SM_CHECKF(full_bytes >= empty_bytes + 1000 * 1024, "%" PRIu64
	    " -> %" PRIu64, empty_bytes, full_bytes);
	n = 99;
	SM_CHECK_EQ(sm_kv_property(kv, SM_KV_HEAD, "rocksdb.no-such-property",
	    &n), SM_ENOTFOUND);
	SM_CHECK_EQ(n, 0);
	tdir_kv_close(kv, &d);
}

static void
test_key_round_trip(void)
{
	static char longs[SM_KEY_MAX - 2];
	struct sm_key k;
	const char *s;
	size_t off = 0, len;
	uint64_t v64;
	uint32_t v32;
	uint8_t v8;

	sm_key_reset(&k);
	sm_key_str(&k, "tenant-1", 8);
	sm_key_u8(&k, 0xfe);
	sm_key_u32(&k, 0x01020304u);
	sm_key_u64(&k, 0x1122334455667788ull);
	sm_key_str(&k, "", 0);
	SM_CHECK_EQ(k.n, 2 + 8 + 1 + 4 + 8 + 2);
	/* Big-endian, length-prefixed bytes. */
	SM_CHECK(k.b[0] == 0 && k.b[1] == 8 && memcmp(k.b + 2, "tenant-1",
	    8) == 0);
	SM_CHECK(k.b[11] == 1 && k.b[14] == 4 && k.b[15] == 0x11 &&
	    k.b[22] == 0x88);

	SM_CHECK_EQ(sm_key_get_str(k.b, k.n, &off, &s, &len), 0);
	SM_CHECK(len == 8 && memcmp(s, "tenant-1", 8) == 0);
	SM_CHECK_EQ(sm_key_get_u8(k.b, k.n, &off, &v8), 0);
	SM_CHECK_EQ(v8, 0xfe);
	SM_CHECK_EQ(sm_key_get_u32(k.b, k.n, &off, &v32), 0);
	SM_CHECK_EQ(v32, 0x01020304u);
	SM_CHECK_EQ(sm_key_get_u64(k.b, k.n, &off, &v64), 0);
	SM_CHECK(v64 == 0x1122334455667788ull);
	SM_CHECK_EQ(sm_key_get_str(k.b, k.n, &off, &s, &len), 0);
	SM_CHECK_EQ(len, 0);
	SM_CHECK_EQ(off, k.n);

	/* The longest string that fits fills the key exactly. */
	memset(longs, 'x', sizeof(longs));
	sm_key_reset(&k);
	sm_key_str(&k, longs, sizeof(longs));
	SM_CHECK_EQ(k.n, SM_KEY_MAX);
	off = 0;
	SM_CHECK_EQ(sm_key_get_str(k.b, k.n, &off, &s, &len), 0);
	SM_CHECK_EQ(len, sizeof(longs));
	SM_CHECK_EQ(off, SM_KEY_MAX);
	/* Extremes of the fixed-width fields. */
	sm_key_reset(&k);
	sm_key_u32(&k, UINT32_MAX);
	sm_key_u64(&k, 0);
	sm_key_u64(&k, UINT64_MAX);
	off = 0;
	SM_CHECK(sm_key_get_u32(k.b, k.n, &off, &v32) == 0 &&
	    v32 == UINT32_MAX);
	SM_CHECK(sm_key_get_u64(k.b, k.n, &off, &v64) == 0 && v64 == 0);
	SM_CHECK(sm_key_get_u64(k.b, k.n, &off, &v64) == 0 &&
	    v64 == UINT64_MAX);
}

static void
test_key_short(void)
{
	struct sm_key k;
	const char *s = NULL;
	size_t off, len = 77;
	uint64_t v64 = 77;
	uint32_t v32 = 77;
	uint8_t v8 = 77;

	sm_key_reset(&k);
	sm_key_str(&k, "abc", 3);
	/* Every truncation of a string field fails without moving off. */
	for (size_t n = 0; n < k.n; n++) {
		off = 0;
		SM_CHECK_EQ(sm_key_get_str(k.b, n, &off, &s, &len),
		    SM_ECORRUPT);
		SM_CHECK_EQ(off, 0);
	}
	SM_CHECK(s == NULL && len == 77);
	/* Fixed-width readers one byte short, and at the very end. */
	for (size_t n = 0; n < 8; n++) {
		off = 0;
		SM_CHECK_EQ(sm_key_get_u64(k.b, n, &off, &v64), SM_ECORRUPT);
		SM_CHECK_EQ(off, 0);
	}
	off = 0;
	SM_CHECK_EQ(sm_key_get_u32(k.b, 3, &off, &v32), SM_ECORRUPT);
	off = 5;
	SM_CHECK_EQ(sm_key_get_u8(k.b, 5, &off, &v8), SM_ECORRUPT);
	SM_CHECK_EQ(off, 5);
	/* An offset past the end is corrupt too, not an underflow. */
	off = 9;
	SM_CHECK_EQ(sm_key_get_u8(k.b, 5, &off, &v8), SM_ECORRUPT);
	SM_CHECK_EQ(sm_key_get_str(k.b, 5, &off, &s, &len), SM_ECORRUPT);
	SM_CHECK(v64 == 77 && v32 == 77 && v8 == 77);
	/* A length prefix that claims more than the key holds. */
	k.b[1] = 200;
	off = 0;
	SM_CHECK_EQ(sm_key_get_str(k.b, k.n, &off, &s, &len), SM_ECORRUPT);
	/* Exactly enough is fine. */
	off = 1;
	SM_CHECK_EQ(sm_key_get_u32(k.b, 5, &off, &v32), 0);
	SM_CHECK_EQ(off, 5);
}

/* Building a key past SM_KEY_MAX is a bug upstream and asserts. */
static void
test_key_overflow_asserts(void)
{
	int st = run_child("keyover:", "");

	SM_CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %d",
	    st);
}

/* The free-space reserve: a reserve above any disk refuses with "no
 * space" in why; back to 0 and the store is writable again. */
static void
test_free_space_reserve(void)
{
	struct tdir d;
	struct sm_kv *kv;
	char why[512];

	kv = tdir_kv_open(&d);
	why[0] = '\0';
	SM_CHECK(sm_kv_writable(kv, why, sizeof(why)));
	sm_kv_set_reserve(kv, UINT64_MAX / 2);
	SM_CHECK(!sm_kv_writable(kv, why, sizeof(why)));
	SM_CHECKF(strstr(why, "no space left on device") != NULL &&
	    strstr(why, "reserve") != NULL, "why: %s", why);
	sm_kv_set_reserve(kv, 1);
	SM_CHECK(sm_kv_writable(kv, why, sizeof(why)));
	sm_kv_set_reserve(kv, 0);
	SM_CHECK(sm_kv_writable(kv, NULL, 0));
	tdir_kv_close(kv, &d);
}

SM_TEST_MAIN(
	{ "put, get, not-found in each family", test_put_get },
	{ "a free-space reserve refuses writes", test_free_space_reserve },
	{ "column families are isolated", test_cf_isolation },
	{ "batch: put+delete+delete_range atomic", test_batch_atomic },
	{ "a batch that ran out of memory writes nothing", test_batch_enomem },
	{ "delete_range of tenant a keeps ab", test_delete_range_prefix },
	{ "iteration order is sm_key logical order", test_iter_order },
	{ "iterator seek", test_iter_seek },
	{ "iterators read a snapshot", test_iter_snapshot },
	{ "data persists across close and reopen", test_reopen },
	{ "the spill family: unlogged, empty at every open",
	    test_spill_family },
	{ "sync=false writes survive a killed writer (WAL)", test_crash_wal },
	{ "second open fails with SM_EIO (LOCK)", test_second_open },
	{ "open failures clean up and report", test_open_fails_cleanly },
	{ "corrupt SST reads give SM_ECORRUPT", test_corruption },
	{ "compaction after a range delete reclaims space", test_compact },
	{ "properties and disk bytes", test_property_disk_bytes },
	{ "key helpers round trip", test_key_round_trip },
	{ "key readers reject short keys", test_key_short },
	{ "key builders assert on overflow", test_key_overflow_asserts },
)
