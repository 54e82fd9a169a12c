/*
 * etcd_test.c -- etcd.h against a real etcd (Debian's etcd-server) on
 * loopback, started and stopped by tests/tools/etcd_server.py (by its
 * PID).  etcd is a package `make deps` installs, so one that does not
 * start is a failure, not a skip.
 */
#include "common/etcd.h"
#include "common/json.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sm_test.h"

static char e_dir[64];
static char e_endpoint[64];
static pid_t e_pid;             /* the etcd server's */

static void
test_setup(void)
{
	char cmd[512], line[512], path[256];
	struct sm_json *j;
	FILE *p;
	int ok;

	snprintf(e_dir, sizeof(e_dir), "/tmp/smolder-etcd-XXXXXX");
	SM_REQUIRE(mkdtemp(e_dir) != NULL);
	snprintf(cmd, sizeof(cmd), "python3 %s start %s",
	    sm_test_path(path, sizeof(path), "tests/tools/etcd_server.py"),
	    e_dir);
	SM_REQUIRE((p = popen(cmd, "r")) != NULL);
	ok = fgets(line, sizeof(line), p) != NULL;
	ok = pclose(p) == 0 && ok;
	SM_REQUIRE(ok);
	SM_REQUIRE(sm_json_parse(line, strlen(line), 0, &j, NULL) == 0);
	SM_REQUIRE(sm_json_str(sm_json_get(j, "endpoint")) != NULL);
	snprintf(e_endpoint, sizeof(e_endpoint), "%s",
	    sm_json_str(sm_json_get(j, "endpoint")));
	e_pid = (pid_t)sm_json_int(sm_json_get(j, "pid"));
	sm_json_free(j);
	SM_REQUIRE(e_endpoint[0] != '\0');
}

static struct sm_etcd *
open_e(const char *eps)
{
	struct sm_etcd *e = NULL;
	struct sm_err err;

	sm_err_clear(&err);
	SM_CHECKF(sm_etcd_open(eps, 2000, &e, &err) == 0, "%s", err.msg);
	return (e);
}

static void
test_open(void)
{
	struct sm_etcd *e = NULL;
	struct sm_err err;

	SM_CHECK_EQ(sm_etcd_open("", 1000, &e, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_etcd_open(",", 1000, &e, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_etcd_open("a b:1", 1000, &e, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_etcd_open("h:1", 0, &e, &err), SM_EINVAL);
	SM_CHECK(e == NULL);
	e = open_e("h:1,http://g:2/");
	SM_CHECK_STR(sm_etcd_desc(e), "h:1,http://g:2/");
	sm_etcd_destroy(e);
}

static void
test_kv(void)
{
	struct sm_etcd *e = open_e(e_endpoint);
	struct sm_etcd_kv *kvs = NULL;
	struct sm_err err;
	size_t n = 0;
	int64_t rev = 0, rev2 = 0;
	char big[SM_ETCD_KEY_MAX + 2];

	sm_err_clear(&err);
	SM_CHECK_EQ(sm_etcd_put(e, "t/kv/b", "two", 3, 0, &err), 0);
	SM_CHECK_EQ(sm_etcd_put(e, "t/kv/a", "{\"x\":1}", 7, 0, &err), 0);
	SM_CHECK_EQ(sm_etcd_put(e, "t/kvz", "outside", 7, 0, &err), 0);
	SM_CHECK_EQ(sm_etcd_range(e, "t/kv/", &kvs, &n, &rev, &err), 0);
	SM_REQUIRE(n == 2);
	SM_CHECK_STR(kvs[0].key, "t/kv/a");
	SM_CHECK_STR(kvs[0].val, "{\"x\":1}");
	SM_CHECK_EQ(kvs[0].vlen, 7);
	SM_CHECK_STR(kvs[1].key, "t/kv/b");
	SM_CHECK_STR(kvs[1].val, "two");
	SM_CHECK(rev > 0 && kvs[1].mod_rev <= rev);
	sm_etcd_kvs_free(kvs, n);
	SM_CHECK_EQ(sm_etcd_delete(e, "t/kv/a", &err), 0);
	SM_CHECK_EQ(sm_etcd_delete(e, "t/kv/none", &err), 0);
	SM_CHECK_EQ(sm_etcd_range(e, "t/kv/", &kvs, &n, &rev2, &err), 0);
	SM_CHECK_EQ(n, 1);
	SM_CHECK(rev2 > rev);
	sm_etcd_kvs_free(kvs, n);
	SM_CHECK_EQ(sm_etcd_range(e, "t/empty/", &kvs, &n, &rev, &err), 0);
	SM_CHECK_EQ(n, 0);
	SM_CHECK(kvs == NULL);
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	SM_CHECK_EQ(sm_etcd_put(e, big, "v", 1, 0, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_etcd_put(e, "", "v", 1, 0, &err), SM_EINVAL);
	sm_etcd_destroy(e);
}

static void
test_create_lease(void)
{
	struct sm_etcd *e = open_e(e_endpoint);
	struct sm_etcd_kv *kvs = NULL;
	struct sm_err err;
	bool created = false;
	int64_t lease = 0, ttl = 0, rev;
	size_t n;

	sm_err_clear(&err);
	SM_CHECK_EQ(sm_etcd_lease_grant(e, 30, &lease, &err), 0);
	SM_CHECK(lease != 0);
	SM_CHECK_EQ(sm_etcd_create(e, "t/lock", "me", 2, lease, &created,
	    &err), 0);
	SM_CHECK(created);
	SM_CHECK_EQ(sm_etcd_create(e, "t/lock", "you", 3, 0, &created, &err),
	    0);
	SM_CHECK(!created);
	SM_CHECK_EQ(sm_etcd_lease_keepalive(e, lease, &ttl, &err), 0);
	SM_CHECK(ttl > 0 && ttl <= 30);
	/* revoking the lease removes its key; the lease is then gone */
	SM_CHECK_EQ(sm_etcd_lease_revoke(e, lease, &err), 0);
	SM_CHECK_EQ(sm_etcd_range(e, "t/lock", &kvs, &n, &rev, &err), 0);
	SM_CHECK_EQ(n, 0);
	sm_etcd_kvs_free(kvs, n);
	SM_CHECK_EQ(sm_etcd_lease_keepalive(e, lease, &ttl, &err),
	    SM_ENOTFOUND);
	SM_CHECK_EQ(sm_etcd_lease_revoke(e, lease, &err), 0);
	SM_CHECK_EQ(sm_etcd_create(e, "t/lock", "you", 3, 0, &created, &err),
	    0);
	SM_CHECK(created);
	sm_etcd_destroy(e);
}

struct putter {
	struct sm_etcd *e;
	int delay_ms;
};

static void *
put_later(void *arg)
{
	struct putter *p = arg;
	struct sm_err err;

	usleep((useconds_t)p->delay_ms * 1000);
	(void)sm_etcd_put(p->e, "t/w/x", "1", 1, 0, &err);
	return (NULL);
}

static void
test_watch(void)
{
	struct sm_etcd *e = open_e(e_endpoint);
	struct sm_etcd_kv *kvs = NULL;
	struct putter pu = { e, 200 };
	struct sm_err err;
	pthread_t t;
	bool changed = true;
	int64_t rev, t0;
	size_t n;

	sm_err_clear(&err);
	SM_CHECK_EQ(sm_etcd_range(e, "t/w/", &kvs, &n, &rev, &err), 0);
	sm_etcd_kvs_free(kvs, n);
	/* nothing changes: the wait ends without a change, and not before
	 * most of it passed (a lower bound: load only adds) */
	t0 = sm_mono_ns();
	SM_CHECK_EQ(sm_etcd_watch(e, "t/w/", rev + 1, 300, &changed, &err),
	    0);
	SM_CHECK(!changed);
	SM_CHECK((sm_mono_ns() - t0) / 1000000 >= 250);
	/* a change under another prefix is not one */
	SM_CHECK_EQ(sm_etcd_put(e, "t/wx", "1", 1, 0, &err), 0);
	SM_CHECK_EQ(sm_etcd_watch(e, "t/w/", rev + 1, 300, &changed, &err),
	    0);
	SM_CHECK(!changed);
	/* a put while watching ends the watch (changed: not its 10 s) */
	SM_REQUIRE(pthread_create(&t, NULL, put_later, &pu) == 0);
	SM_CHECK_EQ(sm_etcd_watch(e, "t/w/", rev + 1, 10000, &changed, &err),
	    0);
	pthread_join(t, NULL);
	SM_CHECK(changed);
	/* a change before the watch, at or after from_rev, is seen too */
	SM_CHECK_EQ(sm_etcd_watch(e, "t/w/", rev + 1, 5000, &changed, &err),
	    0);
	SM_CHECK(changed);
	sm_etcd_destroy(e);
}

static void
test_endpoints(void)
{
	struct sm_etcd *e;
	struct sm_etcd_kv *kvs = NULL;
	struct sm_err err;
	char eps[160];
	size_t n = 0;
	int64_t rev;

	/* the first endpoint is dead: the second answers */
	snprintf(eps, sizeof(eps), "127.0.0.1:1,http://%s", e_endpoint);
	e = open_e(eps);
	sm_err_clear(&err);
	SM_CHECKF(sm_etcd_range(e, "t/kv/", &kvs, &n, &rev, &err) == 0, "%s",
	    err.msg);
	SM_CHECK_EQ(n, 1);
	sm_etcd_kvs_free(kvs, n);
	sm_etcd_destroy(e);
	/* none answers */
	e = open_e("127.0.0.1:1,127.0.0.1:2");
	SM_CHECK_EQ(sm_etcd_range(e, "t/kv/", &kvs, &n, &rev, &err),
	    SM_EUNAVAIL);
	SM_CHECK(strstr(err.msg, "127.0.0.1:") != NULL);
	sm_etcd_destroy(e);
}

struct watcher {
	struct sm_etcd *e;
	atomic_int rv;
	atomic_bool done;
};

static void *
watch_long(void *arg)
{
	struct watcher *w = arg;
	struct sm_err err;
	bool changed;

	atomic_store(&w->rv, sm_etcd_watch(w->e, "t/quiet/", 1000000000,
	    20000, &changed, &err));
	atomic_store(&w->done, true);
	return (NULL);
}

static void
test_cancel(void)
{
	struct watcher w = { open_e(e_endpoint), 0, false };
	struct sm_err err;
	pthread_t t;

	SM_REQUIRE(pthread_create(&t, NULL, watch_long, &w) == 0);
	/* let the watch get in flight, so the cancel ends one that waits
	 * (20 s) rather than one yet to start; nothing is timed from here:
	 * SM_ECLOSED is what only the cancel gives */
	usleep(300000);
	SM_CHECK(!atomic_load(&w.done));
	sm_etcd_cancel(w.e);
	pthread_join(t, NULL);
	SM_CHECK_EQ(atomic_load(&w.rv), SM_ECLOSED);
	SM_CHECK_EQ(sm_etcd_put(w.e, "t/x", "1", 1, 0, &err), SM_ECLOSED);
	sm_etcd_destroy(w.e);
}

/*
 * The lock: a takes it (on the real clock, so its keepalives run as in
 * production); b, on a manual clock, sees a holding it; once a stops, b
 * takes the key at its next try, which a step of its clock by its retry
 * period (ttl/3) starts at once.
 */
static void
test_lock(void)
{
	struct sm_etcd_lock *a = NULL, *b = NULL;
	struct sm_clock clk;
	struct sm_err err;
	char who[64] = "";
	int i;

	sm_err_clear(&err);
	sm_clock_manual_init(&clk, 1000000000LL, sm_now_ms());
	SM_REQUIRE(sm_etcd_lock_start(e_endpoint, 2000, "t/L", "a", 3, NULL,
	    &a, &err) == 0);
	for (i = 0; i < 500 && !sm_etcd_lock_held(a, NULL, 0); i++)
		usleep(10000);
	SM_CHECK(sm_etcd_lock_held(a, NULL, 0));
	SM_REQUIRE(sm_etcd_lock_start(e_endpoint, 2000, "t/L", "b", 3, &clk,
	    &b, &err) == 0);
	for (i = 0; i < 500 && who[0] == '\0'; i++) {
		(void)sm_etcd_lock_held(b, who, sizeof(who));
		usleep(10000);
	}
	SM_CHECK(!sm_etcd_lock_held(b, who, sizeof(who)));
	SM_CHECK_STR(who, "a");
	/* the holder stops: its lease is revoked and the key is free; b's
	 * clock moves by its retry period (again after 0.5 s without the
	 * lock, should the step have come while b was between tries) */
	sm_etcd_lock_stop(a);
	for (i = 0; i < 500 && !sm_etcd_lock_held(b, NULL, 0); i++) {
		if (i % 50 == 0)
			sm_clock_manual_advance(&clk, 1000000000LL);
		usleep(10000);
	}
	SM_CHECKF(sm_etcd_lock_held(b, NULL, 0), "b waited %d ms", i * 10);
	SM_CHECK_EQ(sm_etcd_lock_start(e_endpoint, 2000, "t/L", "c", 1, NULL,
	    &a, &err), SM_EINVAL);
	sm_etcd_lock_stop(b);
}

/*
 * A holder told "not held" because its keepalive came too late (past the
 * margin, etcd not answering) must not stay locked out when that
 * keepalive then succeeds: the key is still its own under the lease it
 * keeps alive, so creating it fails for ever unless the holder starts
 * over with a fresh lease.  etcd is stopped (SIGSTOP) across the clock
 * step, so the margin surely passes before the keepalive gets through.
 */
static void
test_lock_lapse(void)
{
	struct sm_etcd_lock *l = NULL;
	struct sm_clock clk;
	struct sm_err err;
	char who[64] = "";
	int i;

	SM_REQUIRE(e_pid > 0);
	sm_err_clear(&err);
	sm_clock_manual_init(&clk, 1000000000LL, sm_now_ms());
	SM_REQUIRE(sm_etcd_lock_start(e_endpoint, 2000, "t/lapse", "z", 3,
	    &clk, &l, &err) == 0);
	for (i = 0; i < 500 && !sm_etcd_lock_held(l, NULL, 0); i++)
		usleep(10000);
	SM_REQUIRE(sm_etcd_lock_held(l, NULL, 0));
	SM_REQUIRE(kill(e_pid, SIGSTOP) == 0);
	sm_clock_manual_advance(&clk, 2000000000LL);     /* ttl - 1 s */
	SM_CHECK(!sm_etcd_lock_held(l, who, sizeof(who)));
	SM_REQUIRE(kill(e_pid, SIGCONT) == 0);
	/* held again within a few tries (each a clock step of ttl/3) */
	for (i = 0; i < 300 && !sm_etcd_lock_held(l, NULL, 0); i++) {
		if (i % 10 == 0)
			sm_clock_manual_advance(&clk, 1000000000LL);
		usleep(10000);
	}
	(void)sm_etcd_lock_held(l, who, sizeof(who));
	SM_CHECKF(sm_etcd_lock_held(l, NULL, 0), "holder now \"%s\"", who);
	sm_etcd_lock_stop(l);
}

static void
test_cleanup(void)
{
	char cmd[512], path[256];

	if (e_dir[0] == '\0')
		return;
	snprintf(cmd, sizeof(cmd), "python3 %s stop %s; rm -rf %s",
	    sm_test_path(path, sizeof(path), "tests/tools/etcd_server.py"),
	    e_dir, e_dir);
	SM_CHECK(system(cmd) == 0);
}

SM_TEST_MAIN(
	{ "setup: a real etcd on loopback", test_setup },
	{ "open: endpoint lists", test_open },
	{ "kv: put, range by prefix, delete, key bounds", test_kv },
	{ "create and leases: only if missing; a revoked lease's key goes",
	    test_create_lease },
	{ "watch: waits, ignores other prefixes, ends on a change",
	    test_watch },
	{ "endpoints: a dead one is skipped; none is SM_EUNAVAIL",
	    test_endpoints },
	{ "cancel: a watch in flight ends with SM_ECLOSED", test_cancel },
	{ "lock: one holder; the next takes over when it stops", test_lock },
	{ "lock: a holder past its margin takes the lock again once etcd "
	    "answers", test_lock_lapse },
	{ "cleanup", test_cleanup },
)
