/*
 * rwqueue_test.c -- the remote-write queue files (rwqueue.h): append and
 * read back in order, the commit across a reopen, the in-flight mark,
 * a torn and a corrupt tail cut at open, the bounds, segment rotation and
 * deletion; a queue an older version left (.seg files) copied at open
 * from its commit point, once, even after an interrupted copy.
 */
#include "distributor/rwqueue.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byteorder.h"
#include "common/gz.h"
#include "sm_test.h"

static char tdir[64];

static void
tmp_make(void)
{
	snprintf(tdir, sizeof(tdir), "/tmp/rwqueue_test.XXXXXX");
	if (mkdtemp(tdir) == NULL)
		abort();
}

static void
tmp_remove(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup of %s failed\n", tdir);
}

static struct rwq *
qopen(uint64_t max_bytes, uint64_t max_entries, uint64_t seg,
    struct rwq_open_info *info)
{
	struct rwq_config c = { tdir, max_bytes, max_entries, seg };
	struct rwq_open_info dummy;
	struct sm_err err;
	struct rwq *q = NULL;

	if (rwq_open(&c, &q, info != NULL ? info : &dummy, &err) != 0)
		fprintf(stderr, "    rwq_open: %s\n", err.msg);
	return (q);
}

static int
put(struct rwq *q, const char *s)
{
	struct iovec iov[2] = {
		{ (void *)(uintptr_t)s, 1 },
		{ (void *)(uintptr_t)(s + 1), strlen(s) - 1 },
	};

	return (rwq_append(q, iov, 2));
}

/* A queue opened with the defaults, the records `recs` (NULL-terminated)
 * appended to it in order. */
static struct rwq *
qopen_with(const char *const *recs)
{
	struct rwq *q;

	SM_REQUIRE((q = qopen(1 << 20, 100, 0, NULL)) != NULL);
	for (; *recs != NULL; recs++)
		SM_CHECK(put(q, *recs) == 0);
	return (q);
}

/* Peek the head and compare; commit when `commit`. */
static bool
head_is(struct rwq *q, const char *want, bool commit)
{
	void *p;
	size_t n;
	bool ok;

	if (rwq_peek(q, &p, &n, NULL) != 0)
		return (want == NULL);
	ok = want != NULL && n == strlen(want) && memcmp(p, want, n) == 0;
	if (!ok)
		fprintf(stderr, "    head: got %.*s want %s\n", (int)n,
		    (char *)p, want != NULL ? want : "(none)");
	sm_free(p);
	if (commit)
		SM_CHECK(rwq_commit(q) == 0);
	return (ok);
}

static int
count_segments(void)
{
	DIR *d = opendir(tdir);
	struct dirent *de;
	int n = 0;

	while (d != NULL && (de = readdir(d)) != NULL)
		if (strstr(de->d_name, ".wal") != NULL)
			n++;
	if (d != NULL)
		closedir(d);
	return (n);
}

/* The path of the newest segment. */
static void
last_segment(char *buf, size_t sz)
{
	DIR *d = opendir(tdir);
	struct dirent *de;
	char best[300] = "";

	while (d != NULL && (de = readdir(d)) != NULL)
		if (strstr(de->d_name, ".wal") != NULL &&
		    strcmp(de->d_name, best) > 0) {
			struct stat st;
			char p[400];

			snprintf(p, sizeof(p), "%s/%s", tdir, de->d_name);
			if (stat(p, &st) == 0 && st.st_size > 0)
				snprintf(best, sizeof(best), "%s", de->d_name);
		}
	if (d != NULL)
		closedir(d);
	snprintf(buf, sz, "%s/%s", tdir, best);
}

static void
test_order_and_commit(void)
{
	struct rwq_open_info info;
	struct rwq *q;
	uint64_t n, b;

	tmp_make();
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, NULL)) != NULL);
	SM_CHECK(head_is(q, NULL, false));
	SM_CHECK(put(q, "alpha") == 0);
	SM_CHECK(put(q, "beta") == 0);
	SM_CHECK(put(q, "gamma") == 0);
	rwq_stats(q, &n, &b);
	SM_CHECK(n == 3 && b == 3 * 8 + 5 + 4 + 5);
	/* A peek without a commit returns the same head again. */
	SM_CHECK(head_is(q, "alpha", false));
	SM_CHECK(head_is(q, "alpha", true));
	rwq_stats(q, &n, &b);
	SM_CHECK(n == 2 && b == 2 * 8 + 4 + 5);
	rwq_close(q);

	/* Reopen: resumes after the commit. */
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, &info)) != NULL);
	SM_CHECK(!info.head_in_flight && info.corrupt_bytes == 0);
	rwq_stats(q, &n, &b);
	SM_CHECK(n == 2);
	SM_CHECK(put(q, "delta") == 0);
	SM_CHECK(head_is(q, "beta", true));
	SM_CHECK(head_is(q, "gamma", true));
	SM_CHECK(head_is(q, "delta", true));
	SM_CHECK(head_is(q, NULL, false));
	rwq_stats(q, &n, &b);
	SM_CHECK(n == 0 && b == 0);
	rwq_close(q);
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, NULL)) != NULL);
	SM_CHECK(head_is(q, NULL, false));
	/* Only the live segment is left. */
	SM_CHECK(count_segments() == 1);
	rwq_close(q);
	tmp_remove();
}

static void
test_in_flight_mark(void)
{
	struct rwq_open_info info;
	struct rwq *q;

	tmp_make();
	q = qopen_with((const char *[]){ "one", "two", NULL });
	SM_CHECK(head_is(q, "one", false));
	SM_CHECK(rwq_mark(q, true) == 0);
	rwq_close(q);               /* "crash" while "one" was in flight */
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, &info)) != NULL);
	SM_CHECK(info.head_in_flight);
	SM_CHECK(head_is(q, "one", false));
	SM_CHECK(rwq_mark(q, false) == 0);   /* that attempt did not send */
	rwq_close(q);
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, &info)) != NULL);
	SM_CHECK(!info.head_in_flight);
	SM_CHECK(head_is(q, "one", true));
	SM_CHECK(head_is(q, "two", false));
	rwq_close(q);
	tmp_remove();
}

static void
test_torn_tail(void)
{
	struct rwq_open_info info;
	struct rwq *q;
	char seg[400];
	struct stat st;
	int fd;

	tmp_make();
	q = qopen_with((const char *[]){ "kept-1", "kept-2",
	    "torn-record-payload", NULL });
	rwq_close(q);
	/* Cut the last record in the middle: a crash mid-append. */
	last_segment(seg, sizeof(seg));
	SM_REQUIRE(stat(seg, &st) == 0);
	SM_REQUIRE(truncate(seg, st.st_size - 7) == 0);
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, &info)) != NULL);
	SM_CHECK(info.corrupt_bytes == 8 + 19 - 7);
	SM_CHECK(info.corrupt_segments == 1);
	SM_CHECK(stat(seg, &st) == 0 && st.st_size == 2 * (8 + 6));
	SM_CHECK(put(q, "after") == 0);
	SM_CHECK(head_is(q, "kept-1", true));
	SM_CHECK(head_is(q, "kept-2", true));
	SM_CHECK(head_is(q, "after", true));
	SM_CHECK(head_is(q, NULL, false));
	rwq_close(q);

	/* A flipped byte in the last record: CRC, cut. */
	q = qopen_with((const char *[]){ "good", "flipped", NULL });
	rwq_close(q);
	last_segment(seg, sizeof(seg));
	SM_REQUIRE((fd = open(seg, O_RDWR)) >= 0);
	SM_REQUIRE(pwrite(fd, "X", 1, 8 + 4 + 8 + 2) == 1);
	close(fd);
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, &info)) != NULL);
	SM_CHECK(info.corrupt_bytes == 8 + 7);
	SM_CHECK(head_is(q, "good", true));
	SM_CHECK(head_is(q, NULL, false));
	rwq_close(q);

	/* Garbage length (bigger than the file) and a lone half header. */
	q = qopen_with((const char *[]){ "x1", NULL });
	rwq_close(q);
	last_segment(seg, sizeof(seg));
	SM_REQUIRE((fd = open(seg, O_WRONLY | O_APPEND)) >= 0);
	SM_REQUIRE(write(fd, "\xff\xff\xff\x7f\0\0\0\0zz", 10) == 10);
	close(fd);
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, &info)) != NULL);
	SM_CHECK(info.corrupt_bytes == 10);
	SM_CHECK(head_is(q, "x1", true));
	SM_CHECK(head_is(q, NULL, false));
	rwq_close(q);
	tmp_remove();
}

static void
test_corrupt_commit(void)
{
	struct rwq *q;
	char path[256];
	int fd;

	tmp_make();
	q = qopen_with((const char *[]){ "a", "b", "c", NULL });
	SM_CHECK(head_is(q, "a", true));
	SM_CHECK(head_is(q, "b", true));
	rwq_close(q);
	/*
	 * Tear the newest commit slot: the older one wins (at-least-once:
	 * "b" again, never a skipped entry).
	 */
	snprintf(path, sizeof(path), "%s/commit", tdir);
	SM_REQUIRE((fd = open(path, O_RDWR)) >= 0);
	{
		uint8_t s[128];
		uint64_t g0 = 0, g1 = 0;

		SM_REQUIRE(pread(fd, s, sizeof(s), 0) == 128);
		memcpy(&g0, s + 4, 8);
		memcpy(&g1, s + 64 + 4, 8);
		SM_REQUIRE(pwrite(fd, "\0\0\0\0", 4, g0 > g1 ? 20 : 84) == 4);
	}
	close(fd);
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, NULL)) != NULL);
	SM_CHECK(head_is(q, "b", true));
	SM_CHECK(head_is(q, "c", true));
	rwq_close(q);
	/*
	 * No commit file at all: everything still on disk is sent again
	 * (the segment holding a, b, c was not left yet).
	 */
	SM_REQUIRE(unlink(path) == 0);
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, NULL)) != NULL);
	SM_CHECK(head_is(q, "a", false));
	rwq_close(q);
	tmp_remove();
}

static void
test_bounds_and_segments(void)
{
	struct rwq_open_info info;
	struct rwq *q;
	char big[200];
	uint64_t n, b;

	tmp_make();
	/* Entries bound. */
	SM_REQUIRE((q = qopen(1 << 20, 2, 0, NULL)) != NULL);
	SM_CHECK(put(q, "1") == 0 && put(q, "2") == 0);
	SM_CHECK(put(q, "3") == SM_ELIMIT);
	SM_CHECK(head_is(q, "1", true));
	SM_CHECK(put(q, "3") == 0);
	rwq_close(q);
	tmp_remove();

	/* Bytes bound and rotation: 100-byte segments, 48-byte records. */
	tmp_make();
	memset(big, 'x', sizeof(big));
	big[40] = '\0';
	SM_REQUIRE((q = qopen(48 * 5, 1000, 100, NULL)) != NULL);
	for (int i = 0; i < 5; i++) {
		big[0] = (char)('a' + i);
		SM_CHECK(put(q, big) == 0);
	}
	big[0] = 'z';
	SM_CHECK(put(q, big) == SM_ELIMIT);
	rwq_stats(q, &n, &b);
	SM_CHECK(n == 5 && b == 48 * 5);
	SM_CHECK(count_segments() == 3);
	/* Sending frees room and deletes the segments left behind. */
	for (int i = 0; i < 3; i++) {
		big[0] = (char)('a' + i);
		SM_CHECK(head_is(q, big, true));
	}
	SM_CHECK(count_segments() == 2);
	big[0] = 'f';
	SM_CHECK(put(q, big) == 0);
	rwq_close(q);
	/* A record larger than a segment gets one of its own. */
	SM_REQUIRE((q = qopen(1 << 20, 1000, 100, &info)) != NULL);
	SM_CHECK(info.corrupt_bytes == 0);
	memset(big, 'y', sizeof(big));
	big[sizeof(big) - 1] = '\0';
	SM_CHECK(put(q, big) == 0);
	memset(big, 'x', sizeof(big));
	big[0] = 'd';
	big[40] = '\0';
	SM_CHECK(head_is(q, big, true));
	big[0] = 'e';
	SM_CHECK(head_is(q, big, true));
	big[0] = 'f';
	SM_CHECK(head_is(q, big, true));
	memset(big, 'y', sizeof(big));
	big[sizeof(big) - 1] = '\0';
	SM_CHECK(head_is(q, big, true));
	SM_CHECK(head_is(q, NULL, false));
	rwq_stats(q, &n, &b);
	SM_CHECK(n == 0 && b == 0);
	rwq_close(q);
	tmp_remove();
}

static void
test_lock(void)
{
	struct rwq *q, *q2;

	tmp_make();
	SM_REQUIRE((q = qopen(1 << 20, 100, 0, NULL)) != NULL);
	q2 = qopen(1 << 20, 100, 0, NULL);
	SM_CHECK(q2 == NULL);
	rwq_close(q2);
	rwq_close(q);
	tmp_remove();
}

/* A segment in the older framing (rwqueue.c); the offset after each
 * record in ends[]. */
static void
legacy_segment(uint64_t seq, const char *const *recs, int n, uint64_t *ends)
{
	char path[128];
	uint64_t off = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%016llx.seg", tdir,
	    (unsigned long long)seq);
	SM_REQUIRE((f = fopen(path, "wb")) != NULL);
	for (int i = 0; i < n; i++) {
		uint8_t h[8];
		size_t len = strlen(recs[i]);

		sm_put_le32(h, (uint32_t)len);
		sm_put_le32(h + 4, sm_crc32(sm_crc32(0, h, 4), recs[i], len));
		SM_REQUIRE(fwrite(h, 1, 8, f) == 8);
		SM_REQUIRE(fwrite(recs[i], 1, len, f) == len);
		off += 8 + len;
		if (ends != NULL)
			ends[i] = off;
	}
	fclose(f);
}

/* The older commit file: slot 1 (gen 1) at (seq, off, flags). */
static void
legacy_commit(uint64_t seq, uint64_t off, uint32_t flags)
{
	uint8_t s[128];
	char path[128];
	FILE *f;

	memset(s, 0, sizeof(s));
	sm_put_le32(s + 64, 0x43515752u);
	sm_put_le64(s + 68, 1);
	sm_put_le64(s + 76, seq);
	sm_put_le64(s + 84, off);
	sm_put_le32(s + 92, flags);
	sm_put_le32(s + 96, sm_crc32(0, s + 64, 32));
	snprintf(path, sizeof(path), "%s/commit", tdir);
	SM_REQUIRE((f = fopen(path, "wb")) != NULL);
	SM_REQUIRE(fwrite(s, 1, sizeof(s), f) == sizeof(s));
	fclose(f);
}

static int
count_suffix(const char *suffix)
{
	DIR *d = opendir(tdir);
	struct dirent *de;
	int n = 0;

	while (d != NULL && (de = readdir(d)) != NULL)
		if (strstr(de->d_name, suffix) != NULL)
			n++;
	if (d != NULL)
		closedir(d);
	return (n);
}

static void
test_legacy_queue(void)
{
	static const char *const s1[] = { "alpha", "bravo", "charlie" };
	static const char *const s2[] = { "delta" };
	struct rwq_open_info info;
	uint64_t ends[3], n, b;
	struct rwq *q;

	for (int interrupted = 0; interrupted <= 1; interrupted++) {
		tmp_make();
		legacy_segment(1, s1, 3, ends);
		legacy_segment(2, s2, 1, NULL);
		/* alpha was sent; bravo may be in flight. */
		legacy_commit(1, ends[0], 1);
		if (interrupted) {
			/* A copy cut short by a crash: dropped, done again. */
			char path[128];
			FILE *f;

			snprintf(path, sizeof(path), "%s/0000000000000003.wal",
			    tdir);
			SM_REQUIRE((f = fopen(path, "wb")) != NULL);
			SM_REQUIRE(fwrite("partial", 1, 7, f) == 7);
			fclose(f);
		}
		SM_REQUIRE((q = qopen(1 << 20, 100, 0, &info)) != NULL);
		SM_CHECK(info.head_in_flight);
		SM_CHECK_EQ(info.corrupt_bytes, 0);
		SM_CHECK_EQ(count_suffix(".seg"), 0);
		rwq_stats(q, &n, &b);
		SM_CHECK_EQ(n, 3);
		SM_CHECK(head_is(q, "bravo", true));
		SM_CHECK(put(q, "echo") == 0);
		rwq_close(q);
		/* The copy is the queue now: a reopen resumes in it. */
		SM_REQUIRE((q = qopen(1 << 20, 100, 0, &info)) != NULL);
		SM_CHECK(!info.head_in_flight);
		SM_CHECK(head_is(q, "charlie", true));
		SM_CHECK(head_is(q, "delta", true));
		SM_CHECK(head_is(q, "echo", true));
		SM_CHECK(head_is(q, NULL, false));
		rwq_close(q);
		tmp_remove();
	}
}

SM_TEST_MAIN(
	{ "append, peek, commit in order; resume after a reopen",
	    test_order_and_commit },
	{ "the in-flight mark survives a reopen and can be cleared",
	    test_in_flight_mark },
	{ "torn, flipped and garbage tails are cut at open, the rest kept",
	    test_torn_tail },
	{ "a torn commit slot falls back to the older one",
	    test_corrupt_commit },
	{ "entry and byte bounds, segment rotation and deletion",
	    test_bounds_and_segments },
	{ "one process per queue directory (flock)", test_lock },
	{ "an older version's queue is copied once, from its commit point",
	    test_legacy_queue },
)
