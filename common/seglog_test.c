/*
 * seglog_test.c -- the segment log (seglog.h): records framed and checked
 * as the offset table says, rotation past seg_bytes (a large record alone),
 * numbers above every segment there and above number_from, read whole and
 * one at a time, a torn tail and a flipped byte found, remove and
 * truncate, group commit from several threads, missing parents created.
 */
#include "sm_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/kv.h"
#include "common/seglog.h"

static char root[64], dir[128];

static void
tmp_make(void)
{
	snprintf(root, sizeof(root), "/tmp/seglog_test.XXXXXX");
	SM_REQUIRE(mkdtemp(root) != NULL);
	/* Two levels that do not exist yet. */
	snprintf(dir, sizeof(dir), "%s/a/b", root);
}

static void
tmp_remove(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	SM_CHECK(system(cmd) == 0);
}

static struct sm_seglog *
lopen(uint64_t seg_bytes)
{
	struct sm_seglog_cfg c = { .dir = dir, .name = "test log",
	    .seg_bytes = seg_bytes };
	struct sm_seglog *l = NULL;
	struct sm_err err;

	if (sm_seglog_open(&c, &l, &err) != 0)
		fprintf(stderr, "    open: %s\n", err.msg);
	return (l);
}

/* Append s as two pieces; the segment it went to. */
static uint64_t
put(struct sm_seglog *l, const char *s, struct sm_seglog_pos *end)
{
	struct iovec v[2] = {
		{ (void *)(uintptr_t)s, 1 },
		{ (void *)(uintptr_t)(s + 1), strlen(s) - 1 },
	};
	struct sm_err err;
	uint64_t no;

	SM_REQUIRE(sm_seglog_reserve(l, strlen(s), &no, &err) == 0);
	SM_REQUIRE(sm_seglog_append(l, v, 2, end, &err) == 0);
	return (no);
}

static void
test_framing_and_rotation(void)
{
	struct sm_seglog_pos end;
	struct sm_seglog *l;
	const uint8_t *body;
	uint8_t *buf;
	uint64_t *nos;
	size_t len, n, nn;
	struct sm_err err;
	char big[200];

	tmp_make();
	SM_REQUIRE((l = lopen(64)) != NULL);
	SM_CHECK_EQ(put(l, "hello", &end), 1);
	SM_CHECK_EQ(end.no, 1);
	SM_CHECK_EQ(end.off, 8 + 5);
	SM_CHECK_EQ(put(l, "world", NULL), 1);
	/* 26 + 8 + 40 > 64: a new segment; 200 alone gets one too. */
	memset(big, 'x', sizeof(big) - 1);
	big[40] = '\0';
	SM_CHECK_EQ(put(l, big, NULL), 2);
	big[40] = 'x';
	big[sizeof(big) - 1] = '\0';
	SM_CHECK_EQ(put(l, big, NULL), 3);
	SM_CHECK_EQ(put(l, "after", NULL), 4);

	/* The offset table: be32 len, be32 low bits of XXH3(len . body). */
	SM_REQUIRE(sm_seglog_read(l, 1, &buf, &len, &err) == 0);
	SM_CHECK_EQ(len, 26);
	SM_CHECK_EQ(sm_get_be32(buf), 5);
	{
		uint8_t tmp[9];

		memcpy(tmp, buf, 4);
		memcpy(tmp + 4, "hello", 5);
		SM_CHECK_EQ(sm_get_be32(buf + 4), (uint32_t)sm_hash(tmp, 9));
	}
	SM_CHECK_EQ(sm_seglog_parse(buf, len, &body, &n), 13);
	SM_CHECK(n == 5 && memcmp(body, "hello", 5) == 0);
	SM_CHECK_EQ(sm_seglog_parse(buf + 13, len - 13, &body, &n), 13);
	SM_CHECK(n == 5 && memcmp(body, "world", 5) == 0);
	/* Cut short, or a flipped byte: not a record. */
	SM_CHECK_EQ(sm_seglog_parse(buf, 12, &body, &n), 0);
	buf[10] ^= 1;
	SM_CHECK_EQ(sm_seglog_parse(buf, len, &body, &n), 0);
	sm_free(buf);

	/* The big one, one record at a time. */
	{
		struct sm_seglog_reader rd;
		uint64_t next;
		void *b;

		sm_seglog_reader_init(&rd);
		SM_CHECK_EQ(sm_seglog_read_at(l, &rd, 3, 0, UINT64_MAX, &b,
		    &n, &next), 0);
		SM_CHECK_EQ(n, sizeof(big) - 1);
		SM_CHECK_EQ(next, 8 + sizeof(big) - 1);
		sm_free(b);
		SM_CHECK_EQ(sm_seglog_read_at(l, &rd, 3, next, UINT64_MAX, &b,
		    &n, &next), SM_ENOTFOUND);
		/* A limit inside the record: not a whole one. */
		SM_CHECK_EQ(sm_seglog_read_at(l, &rd, 3, 0, 20, &b, &n,
		    &next), SM_ECORRUPT);
		SM_CHECK_EQ(sm_seglog_read_at(l, &rd, 9, 0, UINT64_MAX, &b,
		    &n, &next), SM_ENOTFOUND);
		sm_seglog_reader_fini(&rd);
	}
	SM_CHECK_EQ(sm_seglog_tail(l).no, 4);
	sm_seglog_close(l);

	/* Reopened: numbers go on above every segment, and number_from. */
	SM_REQUIRE((l = lopen(64)) != NULL);
	SM_CHECK_EQ(sm_seglog_tail(l).no, 0);
	SM_REQUIRE(sm_seglog_list(l, &nos, &nn, &err) == 0);
	SM_CHECK_EQ(nn, 4);
	SM_CHECK(nn == 4 && nos[0] == 1 && nos[3] == 4);
	sm_free(nos);
	sm_seglog_number_from(l, 0x20);
	SM_CHECK_EQ(put(l, "x1", NULL), 0x20);
	sm_seglog_seal(l);
	SM_CHECK_EQ(put(l, "x2", NULL), 0x21);

	/* Remove (the current one too) and truncate. */
	SM_CHECK_EQ(sm_seglog_remove(l, 0x21, &err), 0);
	SM_CHECK_EQ(sm_seglog_tail(l).no, 0);
	SM_CHECK_EQ(sm_seglog_remove(l, 0x77, &err), 0);   /* ENOENT */
	SM_CHECK_EQ(sm_seglog_truncate(l, 1, 13, &err), 0);
	SM_REQUIRE(sm_seglog_read(l, 1, &buf, &len, &err) == 0);
	SM_CHECK_EQ(len, 13);
	sm_free(buf);
	/* Too large a record is refused before anything is written. */
	{
		uint64_t no;

		SM_CHECK_EQ(sm_seglog_reserve(l, (size_t)SM_SEGLOG_MAX_BODY + 1,
		    &no, &err), SM_EINVAL);
	}
	sm_seglog_close(l);
	tmp_remove();
}

struct thr {
	struct sm_seglog *l;
	pthread_mutex_t *mu;
	int id;
};

#define THREADS 4
#define PER_THREAD 200

static void *
thr_main(void *arg)
{
	struct thr *t = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		struct sm_seglog_pos end;
		struct sm_err err;
		char s[32];

		snprintf(s, sizeof(s), "t%d-%04d", t->id, i);
		pthread_mutex_lock(t->mu);
		(void)put(t->l, s, &end);
		pthread_mutex_unlock(t->mu);
		SM_CHECK_EQ(sm_seglog_sync(t->l, &end, &err), 0);
	}
	return (NULL);
}

static void
test_group_commit(void)
{
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct thr t[THREADS];
	pthread_t th[THREADS];
	struct sm_seglog *l;
	struct sm_err err;
	uint64_t *nos;
	size_t nn, total = 0;

	tmp_make();
	SM_REQUIRE((l = lopen(4096)) != NULL);
	for (int i = 0; i < THREADS; i++) {
		t[i] = (struct thr){ l, &mu, i };
		SM_REQUIRE(pthread_create(&th[i], NULL, thr_main, &t[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	sm_seglog_close(l);
	SM_REQUIRE((l = lopen(4096)) != NULL);
	SM_REQUIRE(sm_seglog_list(l, &nos, &nn, &err) == 0);
	SM_CHECK(nn > 1);
	for (size_t i = 0; i < nn; i++) {
		uint8_t *buf;
		size_t len, off = 0, k, n;
		const uint8_t *body;

		SM_REQUIRE(sm_seglog_read(l, nos[i], &buf, &len, &err) == 0);
		while (off < len && (k = sm_seglog_parse(buf + off, len - off,
		    &body, &n)) > 0) {
			off += k;
			total++;
		}
		SM_CHECK_EQ(off, len);
		sm_free(buf);
	}
	SM_CHECK_EQ(total, THREADS * PER_THREAD);
	sm_free(nos);
	sm_seglog_close(l);
	tmp_remove();
}

SM_TEST_MAIN(
	{ "records framed as documented; rotation; numbers; read; remove",
	    test_framing_and_rotation },
	{ "appends and group commits from several threads all read back",
	    test_group_commit },
)
