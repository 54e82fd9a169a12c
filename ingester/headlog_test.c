/*
 * headlog_test.c -- the head log's segment files (headlog.h): records
 * come back in order, cancelled and dead ones skipped, one gen_fn per
 * (tenant, gen); commits delete the segments that hold nothing live; a
 * torn tail is cut off and a corrupt record in an older segment skips
 * the rest of that segment only; concurrent appends (synced or not) all
 * come back; segments an older version wrote (.log, the older check) are
 * replayed before the new ones and deleted once dead.
 */
#include "sm_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/kv.h"
#include "ingester/headlog.h"

struct got {
	char tenant[64][8];
	uint64_t gen[64], seq[64];
	char rec[64][32];
	uint32_t n;
	char gens[16][24];
	uint32_t ngens;
	uint64_t total;              /* records (many-thread test) */
};

static int
got_gen(void *arg, const char *tenant, uint64_t gen)
{
	struct got *g = arg;

	if (g->ngens < 16)
		snprintf(g->gens[g->ngens++], sizeof(g->gens[0]), "%s/%llu",
		    tenant, (unsigned long long)gen);
	return (0);
}

static int
got_rec(void *arg, const char *tenant, uint64_t gen, uint64_t seq,
    const uint8_t *rec, size_t n)
{
	struct got *g = arg;

	g->total++;
	if (g->n < 64) {
		snprintf(g->tenant[g->n], sizeof(g->tenant[0]), "%s", tenant);
		g->gen[g->n] = gen;
		g->seq[g->n] = seq;
		snprintf(g->rec[g->n], sizeof(g->rec[0]), "%.*s", (int)n,
		    (const char *)rec);
		g->n++;
	}
	return (0);
}

static struct ing_headlog *
log_open(const char *dir, bool sync, struct got *g, uint64_t *corrupt)
{
	struct ing_headlog *l;
	struct sm_err err;
	uint64_t mg = 0, ms = 0;

	memset(g, 0, sizeof(*g));
	*corrupt = 0;
	SM_REQUIRE(ing_headlog_open(dir, sync, &l, &err) == 0);
	SM_REQUIRE(ing_headlog_replay(l, got_gen, got_rec, g, &mg, &ms,
	    corrupt, &err) == 0);
	return (l);
}

static void
put(struct ing_headlog *l, const char *tenant, uint64_t gen, uint64_t seq)
{
	char rec[32];
	struct sm_err err;

	snprintf(rec, sizeof(rec), "%s-%llu-%llu", tenant,
	    (unsigned long long)gen, (unsigned long long)seq);
	SM_REQUIRE(ing_headlog_append(l, tenant, gen, seq, rec, strlen(rec),
	    &err) == 0);
}

static uint32_t
segments(const char *dir, char last[256])
{
	struct dirent *de;
	uint32_t n = 0;
	DIR *d = opendir(dir);

	SM_REQUIRE(d != NULL);
	if (last != NULL)
		last[0] = '\0';
	while ((de = readdir(d)) != NULL) {
		if (strstr(de->d_name, ".wal") == NULL)
			continue;
		n++;
		if (last != NULL && strcmp(de->d_name, last) > 0)
			snprintf(last, 256, "%s", de->d_name);
	}
	closedir(d);
	return (n);
}

static void
tmpdir(char *dir, size_t n, const char *what)
{
	snprintf(dir, n, "/tmp/smolder-headlog-%s-XXXXXX", what);
	SM_REQUIRE(mkdtemp(dir) != NULL);
	strcat(dir, "/log");     /* created by the open */
}

static void
rmdir_all(const char *dir)
{
	char cmd[256];
	size_t n = strlen(dir) - strlen("/log");

	snprintf(cmd, sizeof(cmd), "rm -rf '%.*s'", (int)n, dir);
	SM_CHECK(system(cmd) == 0);
}

static void
test_replay_order_cancel_gens(void)
{
	char dir[128];
	struct got g;
	struct sm_err err;
	uint64_t corrupt;
	struct ing_headlog *l;

	tmpdir(dir, sizeof(dir), "order");
	l = log_open(dir, false, &g, &corrupt);
	SM_CHECK_EQ(g.n, 0);
	put(l, "a", 1, 10);
	put(l, "b", 1, 11);
	put(l, "a", 1, 12);
	put(l, "a", 2, 13);
	SM_CHECK_EQ(ing_headlog_cancel(l, "a", 1, 12, &err), 0);
	put(l, "b", 1, 14);
	ing_headlog_close(l);

	l = log_open(dir, false, &g, &corrupt);
	SM_CHECK_EQ(corrupt, 0);
	SM_REQUIRE(g.n == 4);
	SM_CHECK_STR(g.rec[0], "a-1-10");
	SM_CHECK_STR(g.rec[1], "b-1-11");
	SM_CHECK_STR(g.rec[2], "a-2-13");      /* a-1-12 was cancelled */
	SM_CHECK_STR(g.rec[3], "b-1-14");
	SM_CHECK_STR(g.tenant[3], "b");
	SM_CHECK_EQ(g.gen[2], 2);
	SM_CHECK_EQ(g.seq[3], 14);
	/* One gen_fn per live (tenant, gen), all before the records. */
	SM_CHECK_EQ(g.ngens, 3);
	ing_headlog_close(l);
	rmdir_all(dir);
}

static void
test_commit_deletes(void)
{
	char dir[128];
	struct got g;
	uint64_t corrupt;
	struct ing_headlog *l;
	struct sm_err err;

	tmpdir(dir, sizeof(dir), "commit");
	l = log_open(dir, false, &g, &corrupt);
	put(l, "a", 1, 1);
	put(l, "b", 1, 2);
	put(l, "a", 1, 3);
	ing_headlog_close(l);
	SM_CHECK_EQ(segments(dir, NULL), 1);

	/* A second open: a segment of its own. */
	l = log_open(dir, false, &g, &corrupt);
	SM_CHECK_EQ(g.n, 3);
	put(l, "a", 2, 4);
	SM_CHECK_EQ(segments(dir, NULL), 2);
	SM_CHECK(ing_headlog_bytes(l) > 0);
	ing_headlog_committed(l, "a", 1);      /* b's record keeps seg 1 */
	SM_CHECK_EQ(segments(dir, NULL), 2);
	ing_headlog_committed(l, "b", 1);
	SM_CHECK_EQ(segments(dir, NULL), 1);
	ing_headlog_committed(l, "a", 2);      /* the current one too */
	SM_CHECK_EQ(segments(dir, NULL), 0);
	SM_CHECK_EQ(ing_headlog_bytes(l), 0);
	put(l, "a", 3, 5);                     /* a new segment */
	SM_CHECK_EQ(segments(dir, NULL), 1);
	ing_headlog_close(l);

	/* Floors read at open make older records dead at replay. */
	SM_REQUIRE(ing_headlog_open(dir, false, &l, &err) == 0);
	SM_CHECK_EQ(ing_headlog_floor(l, "a", 3), 0);
	{
		uint64_t mg = 0, ms = 0;

		memset(&g, 0, sizeof(g));
		SM_CHECK_EQ(ing_headlog_replay(l, got_gen, got_rec, &g, &mg,
		    &ms, &corrupt, &err), 0);
		SM_CHECK_EQ(g.n, 0);
		SM_CHECK_EQ(g.ngens, 0);
		SM_CHECK_EQ(mg, 3);            /* dead ones count for gens */
		SM_CHECK_EQ(ms, 5);
	}
	SM_CHECK_EQ(segments(dir, NULL), 0);   /* deleted at replay */
	ing_headlog_close(l);
	rmdir_all(dir);
}

static void
append_bytes(const char *path, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY | O_APPEND);

	SM_REQUIRE(fd >= 0);
	SM_REQUIRE(write(fd, b, n) == (ssize_t)n);
	close(fd);
}

static off_t
file_size(const char *path)
{
	struct stat st;

	SM_REQUIRE(stat(path, &st) == 0);
	return (st.st_size);
}

static void
test_torn_and_corrupt(void)
{
	char dir[128], last[256], path[512];
	struct got g;
	uint64_t corrupt;
	struct ing_headlog *l;
	off_t sz;

	tmpdir(dir, sizeof(dir), "torn");
	l = log_open(dir, false, &g, &corrupt);
	put(l, "a", 1, 1);
	put(l, "a", 1, 2);
	ing_headlog_close(l);
	SM_CHECK_EQ(segments(dir, last), 1);
	snprintf(path, sizeof(path), "%s/%s", dir, last);
	sz = file_size(path);
	/* A record cut short: a length promising more than is there. */
	append_bytes(path, "\0\0\0\x40\1\2\3\4W\0", 10);
	{
		/* Inspecting (smolder-admin verify) leaves the file be and
		 * refuses appends; a floor above every record deletes
		 * nothing either. */
		struct sm_err err;
		uint64_t mg = 0, ms = 0;

		memset(&g, 0, sizeof(g));
		corrupt = 0;
		SM_REQUIRE(ing_headlog_open(dir, false, &l, &err) == 0);
		ing_headlog_inspect(l);
		SM_CHECK_EQ(ing_headlog_floor(l, "a", 1), 0);
		SM_REQUIRE(ing_headlog_replay(l, got_gen, got_rec, &g, &mg,
		    &ms, &corrupt, &err) == 0);
		SM_CHECK_EQ(g.n, 0);
		SM_CHECK_EQ(corrupt, 0);
		SM_CHECK_EQ(file_size(path), sz + 10);
		SM_CHECK_EQ(segments(dir, last), 1);
		SM_CHECK(!ing_headlog_writable(l, NULL, 0));
		SM_CHECK(ing_headlog_append(l, "a", 2, 9, "x", 1, &err) != 0);
		ing_headlog_close(l);
		SM_CHECK_EQ(file_size(path), sz + 10);
	}
	l = log_open(dir, false, &g, &corrupt);
	SM_CHECK_EQ(corrupt, 0);
	SM_CHECK_EQ(g.n, 2);
	SM_CHECK_EQ(file_size(path), sz);      /* cut off */
	put(l, "a", 1, 3);
	ing_headlog_close(l);

	/* A damaged byte in the first record of the older segment: the
	 * rest of that segment is lost and counted, the next one is read. */
	{
		int fd = open(path, O_RDWR);
		uint8_t c;

		SM_REQUIRE(fd >= 0);
		SM_REQUIRE(pread(fd, &c, 1, 12) == 1);
		c ^= 0x55;
		SM_REQUIRE(pwrite(fd, &c, 1, 12) == 1);
		close(fd);
	}
	l = log_open(dir, false, &g, &corrupt);
	SM_CHECK_EQ(corrupt, 1);
	SM_REQUIRE(g.n == 1);
	SM_CHECK_STR(g.rec[0], "a-1-3");
	ing_headlog_committed(l, "a", 1);
	SM_CHECK_EQ(segments(dir, NULL), 1);   /* the damaged one stays */
	ing_headlog_close(l);
	rmdir_all(dir);
}

/* One record framed as an older version wrote it (headlog.c). */
static size_t
legacy_record(uint8_t *p, char kind, const char *tenant, uint64_t gen,
    uint64_t seq, const char *rec)
{
	size_t tl = strlen(tenant), rn = strlen(rec), hn = 19 + tl;

	sm_put_be32(p, (uint32_t)(hn + rn));
	p[8] = (uint8_t)kind;
	p[9] = 0;
	p[10] = (uint8_t)tl;
	memcpy(p + 11, tenant, tl);
	sm_put_be64(p + 11 + tl, gen);
	sm_put_be64(p + 19 + tl, seq);
	memcpy(p + 8 + hn, rec, rn);
	sm_put_be32(p + 4, (uint32_t)sm_hash_u64(sm_hash(p, 4) ^
	    sm_hash_u64(sm_hash(p + 8, hn)) ^ sm_hash(p + 8 + hn, rn)));
	return (8 + hn + rn);
}

static void
test_legacy_segments(void)
{
	char dir[128], path[512], last[256];
	uint8_t b[512];
	size_t n = 0;
	struct got g;
	uint64_t corrupt;
	struct ing_headlog *l;
	int fd;

	tmpdir(dir, sizeof(dir), "legacy");
	SM_REQUIRE(mkdir(dir, 0755) == 0);
	n += legacy_record(b + n, 'W', "a", 1, 1, "a-1-1");
	n += legacy_record(b + n, 'W', "a", 1, 2, "a-1-2");
	n += legacy_record(b + n, 'C', "a", 1, 2, "");
	n += legacy_record(b + n, 'W', "b", 4, 3, "b-4-3");
	snprintf(path, sizeof(path), "%s/00000000000000a0.log", dir);
	SM_REQUIRE((fd = open(path, O_WRONLY | O_CREAT, 0644)) >= 0);
	SM_REQUIRE(write(fd, b, n) == (ssize_t)n);
	close(fd);

	l = log_open(dir, false, &g, &corrupt);
	SM_CHECK_EQ(corrupt, 0);
	SM_REQUIRE(g.n == 2);
	SM_CHECK_STR(g.rec[0], "a-1-1");
	SM_CHECK_STR(g.rec[1], "b-4-3");
	SM_CHECK_EQ(g.ngens, 2);
	/* New records go to a new-format segment numbered after it. */
	put(l, "a", 2, 5);
	SM_CHECK_EQ(segments(dir, last), 1);
	SM_CHECK_STR(last, "00000000000000a1.wal");
	ing_headlog_close(l);
	l = log_open(dir, false, &g, &corrupt);
	SM_REQUIRE(g.n == 3);
	SM_CHECK_STR(g.rec[2], "a-2-5");
	/* Dead once both tenants committed past it. */
	ing_headlog_committed(l, "a", 1);
	SM_CHECK_EQ(access(path, F_OK), 0);
	ing_headlog_committed(l, "b", 4);
	SM_CHECK(access(path, F_OK) != 0);
	ing_headlog_close(l);
	rmdir_all(dir);
}

struct thr {
	struct ing_headlog *l;
	int id;
};

#define THREADS 4
#define PER_THREAD 300

static void *
thr_main(void *arg)
{
	struct thr *t = arg;
	char tenant[8];

	snprintf(tenant, sizeof(tenant), "t%d", t->id);
	for (int i = 0; i < PER_THREAD; i++)
		put(t->l, tenant, 1, (uint64_t)(t->id * PER_THREAD + i));
	return (NULL);
}

static void
test_threads(void)
{
	for (int sync = 0; sync <= 1; sync++) {
		char dir[128];
		struct got g;
		uint64_t corrupt;
		struct ing_headlog *l;
		pthread_t th[THREADS];
		struct thr t[THREADS];

		tmpdir(dir, sizeof(dir), "threads");
		l = log_open(dir, sync, &g, &corrupt);
		for (int i = 0; i < THREADS; i++) {
			t[i] = (struct thr){ l, i };
			SM_REQUIRE(pthread_create(&th[i], NULL, thr_main,
			    &t[i]) == 0);
		}
		for (int i = 0; i < THREADS; i++)
			pthread_join(th[i], NULL);
		SM_CHECK(ing_headlog_writable(l, NULL, 0));
		ing_headlog_close(l);
		l = log_open(dir, sync, &g, &corrupt);
		SM_CHECK_EQ(corrupt, 0);
		SM_CHECK_EQ(g.total, THREADS * PER_THREAD);
		SM_CHECK_EQ(g.ngens, THREADS);
		ing_headlog_close(l);
		rmdir_all(dir);
	}
}

SM_TEST_MAIN(
	{ "replay: order, cancels, one gen_fn per head",
	    test_replay_order_cancel_gens },
	{ "commits delete dead segments; floors at open", test_commit_deletes },
	{ "a torn tail is cut off; a corrupt record skips its segment",
	    test_torn_and_corrupt },
	{ "concurrent appends, synced and not, all replay", test_threads },
	{ "an older version's segments replay first, then go when dead",
	    test_legacy_segments },
)
