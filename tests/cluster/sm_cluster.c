/*
 * sm_cluster.c -- the in-process cluster tier; see sm_cluster.h.
 */
#include "sm_cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/flags.h"
#include "common/http.h"
#include "common/log.h"
#include "common/ring.h"
#include "compactor/compactor.h"
#include "distributor/distributor.h"
#include "ingester/ingester.h"
#include "querier/querier.h"
#include "sm_test_http.h"

/* Defaults of this tier before the test's own flags: old and future
 * timestamps are how tests place data in time; caches small because
 * several ingesters share one (possibly ASan) process; the compactor
 * runs only when a test asks (POST /compactor/run). */
static const char *const smc_base_flags[] = {
	"-validation.reject-older-than=0",
	"-validation.reject-newer-than=0",
	"-ingester.rocksdb-cache-bytes=8MiB",
	"-ingester.block-cache-bytes=16MiB",
	"-ingester.rpc-workers=2",
	"-compactor.compaction-interval=24h",
	NULL,
};

/*
 * A health answer the ring records at time T may have been sent up to one
 * probe timeout (the heartbeat period) before T; one heard at
 * after + SMC_FRESH_MS was surely asked after `after`.
 */
#define SMC_HEARTBEAT_MS 100
#define SMC_FRESH_MS (4 * SMC_HEARTBEAT_MS)

struct smc_ing {
	struct ing_config cfg;
	char id[32];
	char url[96];
	char dir[512];
	struct ingester *ing;
	int64_t started_ms;     /* wall clock of the last start */
};

struct smc {
	struct sm_flags fs;
	struct ing_config ing_tmpl;
	struct dist_config dist_cfg;
	struct qry_config qry_cfg;
	struct cpt_config cpt_cfg;
	char root[256];
	char *members;
	unsigned n;
	struct smc_ing ing[SMC_MAX_INGESTERS];
	struct sm_http *http;
	struct sm_ring *ring;
	struct distributor *dist;
	struct querier *qry;
	struct compactor *cpt;
	bool http_started, ring_started, cpt_started;
};

static atomic_uint smc_seq;

static int
smc_parse_flags(struct smc *c, const struct smc_cfg *cfg, struct sm_err *err)
{
	char *argv[64];
	int argc = 0;
	bool help;
	int rv;

	sm_flags_init(&c->fs);
	if ((rv = ing_flags_add(&c->fs, &c->ing_tmpl, err)) != 0 ||
	    (rv = dist_flags_add(&c->fs, &c->dist_cfg, err)) != 0 ||
	    (rv = qry_flags_add(&c->fs, &c->qry_cfg, err)) != 0 ||
	    (rv = cpt_flags_add(&c->fs, &c->cpt_cfg, err)) != 0)
		return (rv);
	argv[argc++] = (char *)"smc";
	for (size_t i = 0; smc_base_flags[i] != NULL; i++)
		argv[argc++] = (char *)smc_base_flags[i];
	for (size_t i = 0; cfg->flags != NULL && cfg->flags[i] != NULL; i++) {
		if (argc == (int)SM_ARRAY_LEN(argv))
			return (sm_err_set(err, SM_EINVAL, "too many flags"));
		argv[argc++] = (char *)cfg->flags[i];
	}
	if ((rv = sm_flags_parse(&c->fs, argc, argv, &help, err)) != 0)
		return (rv);
	return (0);
}

int
smc_ingester_start(struct smc *c, unsigned i, struct sm_err *err)
{
	struct smc_ing *g = &c->ing[i];
	int rv;

	SM_ASSERT(i < c->n);
	if (g->ing != NULL)
		return (0);
	if (mkdir(g->dir, 0755) != 0 && errno != EEXIST)
		return (sm_err_set(err, SM_EIO, "%s: %s", g->dir,
		    strerror(errno)));
	g->started_ms = sm_now_ms();
	g->cfg = c->ing_tmpl;
	g->cfg.rpc_url = g->url;
	g->cfg.data_dir = g->dir;
	g->cfg.instance_id = g->id;
	g->cfg.rpc_max_conns = 1024;
	/* No HTTP: /ingester/flush would collide between ingesters. */
	if ((rv = ing_create(&g->cfg, NULL, &g->ing, err)) != 0) {
		sm_err_prefix(err, "%s", g->id);
		return (rv);
	}
	if ((rv = ing_start(g->ing, err)) != 0) {
		ing_destroy(g->ing);
		g->ing = NULL;
		sm_err_prefix(err, "%s", g->id);
		return (rv);
	}
	return (0);
}

void
smc_ingester_stop(struct smc *c, unsigned i)
{
	struct smc_ing *g = &c->ing[i];

	SM_ASSERT(i < c->n);
	if (g->ing == NULL)
		return;
	ing_stop(g->ing);
	ing_destroy(g->ing);
	g->ing = NULL;
}

int
smc_start(const struct smc_cfg *cfg, struct smc **out, struct sm_err *err)
{
	struct smc *c;
	struct sm_http_cfg hc;
	struct sm_ring_cfg rc;
	struct sm_buf m = SM_BUF_INIT;
	unsigned seq = atomic_fetch_add(&smc_seq, 1);
	const char *tmp = getenv("TMPDIR");
	int rv;

	*out = NULL;
	/* Quiet unless asked: the tier's logs are for a failing run. */
	{
		const char *lv = getenv("SMC_LOG_LEVEL");
		enum sm_log_level l;

		if (sm_log_parse_level(lv != NULL ? lv : "warn", &l) == 0)
			sm_log_set_level(l);
	}
	if (cfg->ningesters < 1 || cfg->ningesters > SMC_MAX_INGESTERS ||
	    cfg->rf < 1)
		return (sm_err_set(err, SM_EINVAL, "bad cluster shape"));
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	c->n = cfg->ningesters;
	if ((rv = smc_parse_flags(c, cfg, err)) != 0)
		goto fail;
	c->ing_tmpl.rpc_direct = cfg->direct;
	snprintf(c->root, sizeof(c->root), "%s/smc-XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	if (mkdtemp(c->root) == NULL) {
		c->root[0] = '\0';
		rv = sm_err_set(err, SM_EIO, "mkdtemp: %s", strerror(errno));
		goto fail;
	}
	for (unsigned i = 0; i < c->n; i++) {
		struct smc_ing *g = &c->ing[i];
		char dir[sizeof(g->dir)];

		snprintf(g->id, sizeof(g->id), "ing-%u", i);
		snprintf(g->url, sizeof(g->url), "inproc://smc-%ld-%u-%u",
		    (long)getpid(), seq, i);
		snprintf(dir, sizeof(dir), "%s/ing-%u", c->root, i);
		memcpy(g->dir, dir, sizeof(dir));
		sm_buf_printf(&m, "%s%s=%s", i > 0 ? "," : "", g->id, g->url);
	}
	if (sm_buf_error(&m) != 0) {
		sm_buf_fini(&m);
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto fail;
	}
	c->members = sm_buf_take(&m, NULL);

	/* The order of cmd/main.c's modules: server, ingesters, ring,
	 * distributor, querier, compactor. */
	sm_http_cfg_default(&hc);
	hc.listen = "127.0.0.1:0";
	hc.threads = 4;
	if ((rv = sm_http_create(&hc, &c->http, err)) != 0)
		goto fail;
	for (unsigned i = 0; i < c->n; i++) {
		if ((rv = smc_ingester_start(c, i, err)) != 0)
			goto fail;
	}
	rc = (struct sm_ring_cfg){
		.members = c->members,
		.dns = "",
		.tokens = 128,
		.heartbeat_ms = SMC_HEARTBEAT_MS,
		.heartbeat_timeout_ms = 1500,
		.dns_refresh_ms = 15000,
		.rf = cfg->rf,
		.recv_max = (size_t)1 << 30,
	};
	if ((rv = sm_ring_create(&rc, c->http, &c->ring, err)) != 0)
		goto fail;
	if ((rv = sm_ring_start(c->ring, err)) != 0)
		goto fail;
	c->ring_started = true;
	if ((rv = dist_create(&c->dist_cfg, c->http, c->ring, &c->dist,
	    err)) != 0)
		goto fail;
	c->qry_cfg.after_plan = cfg->after_plan;
	c->qry_cfg.after_plan_arg = cfg->after_plan_arg;
	if ((rv = qry_create(&c->qry_cfg, c->http, c->ring, &c->qry,
	    err)) != 0)
		goto fail;
	if ((rv = cpt_create(&c->cpt_cfg, c->http, c->ring, &c->cpt,
	    err)) != 0)
		goto fail;
	if ((rv = cpt_start(c->cpt, err)) != 0)
		goto fail;
	c->cpt_started = true;
	if ((rv = sm_http_start(c->http, err)) != 0)
		goto fail;
	c->http_started = true;
	if (!smc_wait_ring(c, 30000)) {
		rv = sm_err_set(err, SM_ETIMEDOUT, "the ring did not see %u "
		    "healthy ingesters within 30 s", c->n);
		goto fail;
	}
	*out = c;
	return (0);
fail:
	smc_destroy(c);
	return (rv);
}

static int
smc_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return (0);
}

void
smc_destroy(struct smc *c)
{
	if (c == NULL)
		return;
	/* No request in flight when the components behind HTTP stop. */
	if (c->http != NULL)
		sm_http_stop(c->http);
	if (c->cpt_started)
		cpt_stop(c->cpt);
	if (c->ring_started)
		sm_ring_stop(c->ring);
	for (unsigned i = c->n; i > 0; i--)
		smc_ingester_stop(c, i - 1);
	cpt_destroy(c->cpt);
	qry_destroy(c->qry);
	dist_destroy(c->dist);
	sm_ring_destroy(c->ring);
	sm_http_destroy(c->http);
	if (c->root[0] != '\0')
		nftw(c->root, smc_rm, 16, FTW_DEPTH | FTW_PHYS);
	sm_free(c->members);
	sm_flags_fini(&c->fs);
	free(c);
}

/* The ring agrees with the harness: see sm_cluster.h. */
static bool
smc_ring_agrees(struct smc *c, const struct sm_ring_snap *s,
    bool heads_empty, int64_t since_ms)
{
	for (unsigned i = 0; i < c->n; i++) {
		const struct smc_ing *g = &c->ing[i];
		bool found = false;

		for (uint32_t k = 0; k < s->n; k++) {
			if (s->id[k] == NULL || strcmp(s->id[k], g->id) != 0)
				continue;
			found = true;
			if (g->ing == NULL && s->healthy[k])
				return (false);
			if (g->ing != NULL && (!s->healthy[k] ||
			    atomic_load(&s->m[k]->last_heartbeat_ms) <
			    SM_MAX(g->started_ms, since_ms) + SMC_FRESH_MS))
				return (false);
			if (g->ing != NULL && heads_empty &&
			    atomic_load(&s->m[k]->series) != 0)
				return (false);
		}
		if (!found && g->ing != NULL)
			return (false);
	}
	return (true);
}

static bool
smc_wait(struct smc *c, bool heads_empty, int64_t timeout_ms)
{
	int64_t deadline = sm_mono_ns() + timeout_ms * 1000000LL;
	int64_t since = heads_empty ? sm_now_ms() : 0;

	for (;;) {
		struct sm_ring_snap *s = sm_ring_acquire(c->ring);
		bool ok = smc_ring_agrees(c, s, heads_empty, since);

		sm_ring_release(s);
		if (ok)
			return (true);
		if (sm_mono_ns() > deadline)
			return (false);
		nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
	}
}

bool
smc_wait_ring(struct smc *c, int64_t timeout_ms)
{
	return (smc_wait(c, false, timeout_ms));
}

bool
smc_wait_heads_cut(struct smc *c, int64_t timeout_ms)
{
	return (smc_wait(c, true, timeout_ms));
}

unsigned
smc_port(const struct smc *c)
{
	return (sm_http_port(c->http));
}

/* --- HTTP client ---------------------------------------------------- */

int
smc_http(struct smc *c, const char *method, const char *target,
    const void *req, size_t len, struct sm_buf *body)
{
	struct sm_test_resp rs;
	char head[4096];
	int fd, n, status = -1;

	if ((fd = sm_test_connect(smc_port(c), 60000)) < 0)
		return (-1);
	n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: 127.0.0.1"
	    "\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", method,
	    target, len);
	if (n < 0 || (size_t)n >= sizeof(head) ||
	    sm_test_send(fd, head, (size_t)n) != 0 ||
	    (len > 0 && sm_test_send(fd, req, len) != 0) ||
	    sm_test_read_resp(fd, &rs) != 0)
		goto out;
	status = rs.status;
	if (body != NULL) {
		sm_buf_append(body, rs.body, rs.len);
		if (sm_buf_error(body) != 0)
			status = -1;
	}
	sm_test_resp_free(&rs);
out:
	close(fd);
	return (status);
}

void
smc_escape(struct sm_buf *out, const char *s)
{
	sm_buf_put_pct(out, s, false);
}

int
smc_ingest(struct smc *c, const char *name, int64_t from_s,
    const char *folded)
{
	struct sm_buf t = SM_BUF_INIT;
	int st;

	sm_buf_puts(&t, "/ingest?format=folded&name=");
	smc_escape(&t, name);
	sm_buf_printf(&t, "&from=%lld&until=%lld", (long long)from_s,
	    (long long)from_s);
	st = sm_buf_error(&t) != 0 ? -1 : smc_http(c, "POST", t.b, folded,
	    strlen(folded), NULL);
	sm_buf_fini(&t);
	return (st);
}

int
smc_render_total(struct smc *c, const char *query, int64_t from_s,
    int64_t until_s, int64_t *total)
{
	struct sm_buf t = SM_BUF_INIT, body = SM_BUF_INIT;
	int st;

	*total = 0;
	sm_buf_puts(&t, "/render?format=collapsed&query=");
	smc_escape(&t, query);
	sm_buf_printf(&t, "&from=%lld&until=%lld", (long long)from_s,
	    (long long)until_s);
	st = sm_buf_error(&t) != 0 ? -1 : smc_http(c, "GET", t.b, NULL, 0,
	    &body);
	if (st == 200 && body.len > 0) {
		/* "f1;f2;leaf<SP>value" per line: sum the values. */
		char *nl;

		for (char *line = body.b; line != NULL && *line != '\0';
		    line = nl) {
			char *sp;

			if ((nl = strchr(line, '\n')) != NULL)
				*nl++ = '\0';
			if ((sp = strrchr(line, ' ')) != NULL)
				*total += strtoll(sp + 1, NULL, 10);
		}
	}
	sm_buf_fini(&t);
	sm_buf_fini(&body);
	return (st);
}
