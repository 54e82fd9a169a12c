/*
 * watch_test.c -- the rules of watch.h: a first load at create (its error
 * returned), a check that loads only a change, each change tried once
 * whatever the outcome, a thread that waits for a change to settle, and
 * the result function seeing every attempt.  The thread polls on a manual
 * clock (common/clock.h): the test counts its polls, not milliseconds.
 */
#include "common/watch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sm_test.h"
#include "sm_test_clock.h"

static char w_path[] = "/tmp/smolder-watch-test-XXXXXX";

/* What the load function saw. */
struct seen {
	atomic_int loads;      /* calls of the load function */
	atomic_int ok, failed; /* calls of the result function */
	char body[64];         /* the last body loaded */
	pthread_mutex_t mu;
};

/* Loads the file's first line; a file starting "bad" is an error. */
static int
load(void *arg, const char *path, struct sm_err *err)
{
	struct seen *s = arg;
	char line[64] = "";
	FILE *fp;

	atomic_fetch_add(&s->loads, 1);
	if ((fp = fopen(path, "r")) == NULL)
		return (sm_err_set(err, SM_EIO, "cannot open"));
	if (fgets(line, sizeof(line), fp) == NULL)
		line[0] = '\0';
	fclose(fp);
	if (strncmp(line, "bad", 3) == 0)
		return (sm_err_set(err, SM_EINVAL, "bad content"));
	pthread_mutex_lock(&s->mu);
	snprintf(s->body, sizeof(s->body), "%s", line);
	pthread_mutex_unlock(&s->mu);
	return (0);
}

static void
result(void *arg, int rv)
{
	struct seen *s = arg;

	atomic_fetch_add(rv == 0 ? &s->ok : &s->failed, 1);
}

static bool
body_is(struct seen *s, const char *want)
{
	bool eq;

	pthread_mutex_lock(&s->mu);
	eq = strcmp(s->body, want) == 0;
	pthread_mutex_unlock(&s->mu);
	return (eq);
}

/* Write `body` to the file (a fresh inode: rename over it). */
static void
write_file(const char *body)
{
	SM_CHECK_EQ(sm_test_replace_file(w_path, body), 0);
}

static void
seen_init(struct seen *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
}

static void
test_setup(void)
{
	SM_CHECK(sm_test_temp_file(w_path) == 0);
}

static void
test_create(void)
{
	struct seen s;
	struct sm_watch *w = NULL;
	struct sm_err err = { 0 };
	struct sm_watch_conf c = {
		.path = w_path, .period_ms = 1000, .component = "test",
		.what = "test file", .load = load, .result = result, .arg = &s,
	};

	seen_init(&s);
	/* A bad configuration. */
	c.period_ms = 0;
	SM_CHECK_EQ(sm_watch_create(&c, &w, &err), SM_EINVAL);
	SM_CHECK(w == NULL);
	c.period_ms = 1000;
	/* A missing file: the stat error names what and where. */
	c.path = "/nonexistent/smolder-watch";
	SM_CHECK_EQ(sm_watch_create(&c, &w, &err), SM_EIO);
	SM_CHECKF(strstr(err.msg, "test file /nonexistent/smolder-watch") !=
	    NULL, "%s", err.msg);
	SM_CHECK_EQ(atomic_load(&s.failed), 1);
	c.path = w_path;
	/* A file that does not load: its error, nothing started. */
	write_file("bad 1\n");
	SM_CHECK_EQ(sm_watch_create(&c, &w, &err), SM_EINVAL);
	SM_CHECK_STR(err.msg, "bad content");
	SM_CHECK(w == NULL);
	/* A good one is loaded before create returns. */
	write_file("one\n");
	SM_CHECK_EQ(sm_watch_create(&c, &w, &err), 0);
	SM_CHECK(body_is(&s, "one\n"));
	SM_CHECK_EQ(atomic_load(&s.ok), 1);
	sm_watch_destroy(w);
	pthread_mutex_destroy(&s.mu);
}

static void
test_check(void)
{
	struct seen s;
	struct sm_watch *w = NULL;
	struct sm_err err = { 0 };
	struct sm_watch_conf c = {
		.path = w_path, .period_ms = 3600 * 1000, .load = load,
		.result = result, .arg = &s,
	};

	seen_init(&s);
	write_file("one\n");
	SM_REQUIRE(sm_watch_create(&c, &w, &err) == 0);
	/* Unchanged: no load. */
	SM_CHECK_EQ(sm_watch_check(w, &err), 0);
	SM_CHECK_EQ(atomic_load(&s.loads), 1);
	/* Changed: loaded at once (no settling for a check). */
	write_file("two\n");
	SM_CHECK_EQ(sm_watch_check(w, &err), 0);
	SM_CHECK(body_is(&s, "two\n"));
	SM_CHECK_EQ(atomic_load(&s.loads), 2);
	/* A bad change: its error, tried once, the owner keeps "two". */
	write_file("bad 2\n");
	SM_CHECK_EQ(sm_watch_check(w, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_watch_check(w, &err), 0);
	SM_CHECK_EQ(atomic_load(&s.loads), 3);
	SM_CHECK(body_is(&s, "two\n"));
	SM_CHECK_EQ(atomic_load(&s.failed), 1);
	/* The next change is tried again. */
	write_file("three\n");
	SM_CHECK_EQ(sm_watch_check(w, &err), 0);
	SM_CHECK(body_is(&s, "three\n"));
	SM_CHECK_EQ(atomic_load(&s.ok), 3);
	/* The file gone: a stat error, the owner keeps what it had. */
	SM_CHECK_EQ(unlink(w_path), 0);
	SM_CHECK_EQ(sm_watch_check(w, &err), SM_EIO);
	SM_CHECK(body_is(&s, "three\n"));
	write_file("four\n");
	SM_CHECK_EQ(sm_watch_check(w, &err), 0);
	SM_CHECK(body_is(&s, "four\n"));
	sm_watch_destroy(w);
	sm_watch_destroy(NULL);
	pthread_mutex_destroy(&s.mu);
}

static uint64_t
count_polls(const void *w)
{
	return (sm_watch_polls(w));
}

/*
 * Let n more polls run, moving the clock one period at a time
 * (sm_test_clock_steps): exactly n polls, unless a poll takes over 200 ms.
 */
static bool
polls(struct sm_watch *w, struct sm_clock *clk, int64_t period_ms,
    uint64_t n)
{
	return (sm_test_clock_steps(clk, period_ms * 1000000, n, count_polls,
	    w));
}

static void
test_thread(void)
{
	struct seen s;
	struct sm_watch *w = NULL;
	struct sm_clock clk;
	struct sm_err err = { 0 };
	struct sm_watch_conf c = {
		.path = w_path, .period_ms = 1000, .load = load, .arg = &s,
		.clock = &clk,
	};

	seen_init(&s);
	sm_clock_manual_init(&clk, 1000000000LL, 0);
	write_file("one\n");
	SM_REQUIRE(sm_watch_create(&c, &w, &err) == 0);
	write_file("two\n");
	/* The first poll sees the change, the next one loads it once it
	 * stayed the same (settled). */
	SM_REQUIRE(polls(w, &clk, c.period_ms, 1));
	SM_CHECK(body_is(&s, "one\n"));
	SM_REQUIRE(polls(w, &clk, c.period_ms, 1));
	SM_CHECK(body_is(&s, "two\n"));
	SM_CHECK_EQ(atomic_load(&s.loads), 2);
	/* A bad file is tried once, not at every poll. */
	write_file("bad 3\n");
	SM_REQUIRE(polls(w, &clk, c.period_ms, 2));
	SM_CHECK_EQ(atomic_load(&s.loads), 3);
	SM_REQUIRE(polls(w, &clk, c.period_ms, 3));
	SM_CHECK_EQ(atomic_load(&s.loads), 3);
	SM_CHECK(body_is(&s, "two\n"));
	sm_watch_destroy(w);
	pthread_mutex_destroy(&s.mu);
}

static void
test_cleanup(void)
{
	unlink(w_path);
}

SM_TEST_MAIN(
	{ "setup: a temporary file", test_setup },
	{ "create: bad configuration, missing or bad file, first load",
	    test_create },
	{ "check: only a change is loaded, each change once", test_check },
	{ "thread: a settled change is loaded, a bad one once", test_thread },
	{ "cleanup", test_cleanup },
)
