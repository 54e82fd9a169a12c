/*
 * main.c -- the `smolder` binary: flags, the module table behind -target,
 * signals.  Thin on purpose (STYLE §1, after Pyroscope's modules.go): each
 * module's init/start/stop below only calls its component's API.
 *
 * Modules (dependencies first):
 *   server        HTTP listener, /ready                     (internal)
 *   ingester      head + RPC server                         (target)
 *   ingester-client  RPC clients of the ingesters           (internal)
 *   distributor   /ingest                                   (target)
 *   querier       /render                                   (target)
 *   all           every component in one process            (target)
 *
 * In -target=all the distributor and querier reach the ingester over nng
 * inproc:// -- the same RPC path a cluster uses over tcp://.  Running a
 * component alone needs ingester addresses, which the ring (a later
 * change) provides; until then -target=distributor or querier without a
 * local ingester fails at start with a message saying so.
 *
 * Shutdown: SIGINT or SIGTERM stops modules in reverse start order and
 * exits 0.  Signals are blocked in every thread and taken by sigwait() in
 * the main thread, so no handler runs in a random thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/flags.h"
#include "common/http.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/module.h"
#include "common/rpc.h"
#include "distributor/distributor.h"
#include "ingester/ingester.h"
#include "querier/querier.h"

struct app {
	/* flags */
	char *target;
	char *http_listen;
	char *data_dir;
	char *log_level;
	char *rpc_listen;
	int64_t http_threads;
	int64_t http_conn_limit;
	int64_t http_per_ip_limit;
	int64_t http_idle_timeout_ms;
	bool multitenancy;
	struct ing_config ing_cfg;
	struct dist_config dist_cfg;
	struct qry_config qry_cfg;

	/* state */
	const struct sm_module *order[16];
	size_t norder;
	int data_lock_fd;
	struct sm_http *http;
	struct ingester *ing;
	struct sm_rpc_client *ing_clients[1];
	uint32_t ning_clients;
	struct distributor *dist;
	struct querier *qry;
};

/* --- server --------------------------------------------------------------- */

static void
ready_handler(struct sm_http_req *r, void *arg)
{
	struct app *app = arg;

	if (app->ing != NULL && !ing_ready(app->ing)) {
		sm_http_reply_text(r, 503, "Ingester not ready: replaying its "
		    "head log");
		return;
	}
	sm_http_reply_text(r, 200, "ready");
}

static void
metrics_handler(struct sm_http_req *r, void *arg)
{
	struct sm_buf out = SM_BUF_INIT;

	(void)arg;
	sm_metrics_write(&out);
	if (sm_buf_error(&out) != 0) {
		sm_buf_fini(&out);
		sm_http_reply_error(r, 500, "internal", "out of memory");
		return;
	}
	sm_http_reply_buf(r, 200, "text/plain; version=0.0.4; charset=utf-8",
	    &out);
}

static int
mod_server_init(void *p, struct sm_err *err)
{
	struct app *app = p;
	struct sm_http_cfg cfg;
	int rv;

	sm_http_cfg_default(&cfg);
	cfg.listen = app->http_listen;
	cfg.threads = (unsigned)app->http_threads;
	cfg.conn_limit = (unsigned)app->http_conn_limit;
	cfg.per_ip_limit = (unsigned)app->http_per_ip_limit;
	cfg.conn_timeout_s = (unsigned)((app->http_idle_timeout_ms + 999) /
	    1000);
	if (app->http_threads < 1 || app->http_conn_limit < 1 ||
	    app->http_idle_timeout_ms < 1000)
		return (sm_err_set(err, SM_EINVAL, "server: http threads and "
		    "connection limit must be >= 1, idle timeout >= 1s"));
	if ((rv = sm_http_create(&cfg, &app->http, err)) != 0)
		return (rv);
	if ((rv = sm_http_route(app->http, "GET", "/metrics", metrics_handler,
	    app, 0)) != 0)
		return (rv);
	return (sm_http_route(app->http, "GET", "/ready", ready_handler, app,
	    0));
}

static int
mod_server_start(void *p, struct sm_err *err)
{
	struct app *app = p;

	return (sm_http_start(app->http, err));
}

static void
mod_server_stop(void *p)
{
	struct app *app = p;

	sm_http_stop(app->http);
}

/* --- ingester ------------------------------------------------------------- */

static int
mod_ingester_init(void *p, struct sm_err *err)
{
	struct app *app = p;

	app->ing_cfg.rpc_url = app->rpc_listen;
	app->ing_cfg.data_dir = app->data_dir;
	return (ing_create(&app->ing_cfg, app->http, &app->ing, err));
}

static int
mod_ingester_start(void *p, struct sm_err *err)
{
	struct app *app = p;

	return (ing_start(app->ing, err));
}

static void
mod_ingester_stop(void *p)
{
	struct app *app = p;

	ing_stop(app->ing);
}

/* --- ingester clients ----------------------------------------------------- */

static int
mod_ingclient_init(void *p, struct sm_err *err)
{
	struct app *app = p;
	struct sm_rpc_client_cfg cfg = {
		.url = app->rpc_listen,
		.recv_max = (size_t)1 << 30,
		.dial_retry_ms = 100,
	};
	int rv;

	if (!sm_modules_has(app->order, app->norder, "ingester"))
		return (sm_err_set(err, SM_EINVAL, "no ingester to talk to: "
		    "run -target=all, or include ingester in -target (cluster "
		    "membership arrives with the ring)"));
	if ((rv = sm_rpc_client_create(&cfg, &app->ing_clients[0], err)) != 0)
		return (rv);
	app->ning_clients = 1;
	return (0);
}

static int
mod_noop_start(void *p, struct sm_err *err)
{
	(void)p;
	(void)err;
	return (0);
}

static void
mod_noop_stop(void *p)
{
	(void)p;
}

/* --- distributor and querier ---------------------------------------------- */

static int
mod_distributor_init(void *p, struct sm_err *err)
{
	struct app *app = p;

	app->dist_cfg.multitenancy = app->multitenancy;
	return (dist_create(&app->dist_cfg, app->http, app->ing_clients,
	    app->ning_clients, &app->dist, err));
}

static int
mod_querier_init(void *p, struct sm_err *err)
{
	struct app *app = p;

	app->qry_cfg.multitenancy = app->multitenancy;
	return (qry_create(&app->qry_cfg, app->http, app->ing_clients,
	    app->ning_clients, &app->qry, err));
}

static int
mod_all_init(void *p, struct sm_err *err)
{
	(void)p;
	(void)err;
	return (0);
}

static const struct sm_module modules[] = {
	{ "server", { NULL }, false, mod_server_init, mod_server_start,
	    mod_server_stop },
	{ "ingester", { "server", NULL }, true, mod_ingester_init,
	    mod_ingester_start, mod_ingester_stop },
	{ "ingester-client", { NULL }, false, mod_ingclient_init,
	    mod_noop_start, mod_noop_stop },
	{ "distributor", { "server", "ingester-client", NULL }, true,
	    mod_distributor_init, mod_noop_start, mod_noop_stop },
	{ "querier", { "server", "ingester-client", NULL }, true,
	    mod_querier_init, mod_noop_start, mod_noop_stop },
	{ "all", { "ingester", "distributor", "querier", NULL }, true,
	    mod_all_init, mod_noop_start, mod_noop_stop },
};

/* --- flags ---------------------------------------------------------------- */

static int
register_flags(struct app *app, struct sm_flags *fs, struct sm_err *err)
{
	static struct sm_flag f[10];
	const struct sm_flag *t;
	size_t n;
	int rv;

	f[0] = (struct sm_flag){ "target", SM_FLAG_STRING, &app->target,
		"all", "Comma-separated components to run: all, ingester, "
		"distributor, querier. \"all\" is single-binary mode." };
	f[1] = (struct sm_flag){ "http.listen-address", SM_FLAG_STRING,
		&app->http_listen, ":4040",
		"HTTP API address, host:port or :port." };
	f[2] = (struct sm_flag){ "data.dir", SM_FLAG_STRING, &app->data_dir,
		"./data", "Directory for this instance's data; it is created "
		"if missing and locked against a second process." };
	f[3] = (struct sm_flag){ "log.level", SM_FLAG_STRING, &app->log_level,
		"info", "Log level: debug, info, warn or error." };
	f[4] = (struct sm_flag){ "rpc.listen-address", SM_FLAG_STRING,
		&app->rpc_listen, "inproc://smolder-ingester",
		"nng URL the ingester serves internal RPC on "
		"(inproc:// in single-binary mode, tcp://host:port in a "
		"cluster)." };
	f[5] = (struct sm_flag){ "server.http-threads", SM_FLAG_INT,
		&app->http_threads, "4", "HTTP handler threads." };
	f[6] = (struct sm_flag){ "server.http-conn-limit", SM_FLAG_INT,
		&app->http_conn_limit, "1024",
		"Most concurrent HTTP connections." };
	f[7] = (struct sm_flag){ "server.http-per-ip-conn-limit", SM_FLAG_INT,
		&app->http_per_ip_limit, "0",
		"Most concurrent HTTP connections from one IP (0 = no limit)." };
	f[8] = (struct sm_flag){ "server.http-idle-timeout", SM_FLAG_DURATION,
		&app->http_idle_timeout_ms, "2m",
		"Close HTTP connections idle this long." };
	f[9] = (struct sm_flag){ "auth.multitenancy-enabled", SM_FLAG_BOOL,
		&app->multitenancy, "false",
		"Require X-Scope-OrgID on every request (else the tenant is "
		"\"anonymous\")." };
	if ((rv = sm_flags_add(fs, f, SM_ARRAY_LEN(f), err)) != 0)
		return (rv);
	t = ing_flags(&app->ing_cfg, &n);
	if ((rv = sm_flags_add(fs, t, n, err)) != 0)
		return (rv);
	t = dist_flags(&app->dist_cfg, &n);
	if ((rv = sm_flags_add(fs, t, n, err)) != 0)
		return (rv);
	t = qry_flags(&app->qry_cfg, &n);
	return (sm_flags_add(fs, t, n, err));
}

static int
data_dir_lock(struct app *app, struct sm_err *err)
{
	char path[4096];

	if (mkdir(app->data_dir, 0755) != 0 && errno != EEXIST)
		return (sm_err_set(err, SM_EIO, "data dir %s: %s",
		    app->data_dir, strerror(errno)));
	snprintf(path, sizeof(path), "%s/LOCK", app->data_dir);
	app->data_lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (app->data_lock_fd < 0)
		return (sm_err_set(err, SM_EIO, "data dir lock %s: %s", path,
		    strerror(errno)));
	if (flock(app->data_lock_fd, LOCK_EX | LOCK_NB) != 0)
		return (sm_err_set(err, SM_EIO, "data dir %s is in use by "
		    "another process", app->data_dir));
	return (0);
}

static void
usage(const struct sm_flags *fs)
{
	printf("Usage of smolder %s:\n", SM_VERSION);
	sm_flags_usage(fs, stdout);
}

int
main(int argc, char **argv)
{
	struct app app;
	struct sm_flags fs;
	struct sm_err err;
	enum sm_log_level lvl;
	sigset_t set;
	size_t started = 0;
	bool help;
	int sig = 0, rc = 1;

	memset(&app, 0, sizeof(app));
	app.data_lock_fd = -1;
	sm_err_clear(&err);
	sm_flags_init(&fs);
	if (register_flags(&app, &fs, &err) != 0 ||
	    sm_flags_parse(&fs, argc, argv, &help, &err) != 0) {
		fprintf(stderr, "smolder: %s\n", err.msg);
		usage(&fs);
		goto out_flags;
	}
	if (help) {
		usage(&fs);
		rc = 0;
		goto out_flags;
	}
	if (sm_log_parse_level(app.log_level, &lvl) != 0) {
		fprintf(stderr, "smolder: invalid -log.level %s\n",
		    app.log_level);
		goto out_flags;
	}
	sm_log_set_level(lvl);
	if (sm_modules_resolve(modules, SM_ARRAY_LEN(modules), app.target,
	    app.order, &app.norder, &err) != 0) {
		fprintf(stderr, "smolder: -target: %s\n", err.msg);
		goto out_flags;
	}

	/* Block signals before any thread exists; sigwait below. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	if (data_dir_lock(&app, &err) != 0) {
		sm_error("main", "%s", err.msg);
		goto out;
	}
	for (size_t i = 0; i < app.norder; i++) {
		if (app.order[i]->init(&app, &err) != 0) {
			sm_error("main", "init %s: %s", app.order[i]->name,
			    err.msg);
			goto out;
		}
	}
	for (; started < app.norder; started++) {
		if (app.order[started]->start(&app, &err) != 0) {
			sm_error("main", "start %s: %s",
			    app.order[started]->name, err.msg);
			goto stop;
		}
	}
	sm_info("main", "smolder started\tversion=%s target=%s", SM_VERSION,
	    app.target);
	sigwait(&set, &sig);
	sm_info("main", "shutting down\tsignal=%s", sig == SIGINT ? "SIGINT" :
	    "SIGTERM");
	rc = app.ing != NULL && ing_failed(app.ing) ? 1 : 0;
	/* Drain first: no HTTP request may be in flight when the components
	 * behind it stop.  sm_http_stop() is idempotent. */
	if (app.http != NULL)
		sm_http_stop(app.http);
stop:
	while (started > 0) {
		started--;
		app.order[started]->stop(&app);
	}
out:
	/* Free in reverse dependency order. */
	qry_destroy(app.qry);
	dist_destroy(app.dist);
	for (uint32_t i = 0; i < app.ning_clients; i++)
		sm_rpc_client_destroy(app.ing_clients[i]);
	ing_destroy(app.ing);
	sm_http_destroy(app.http);
	if (app.data_lock_fd >= 0)
		close(app.data_lock_fd);
	if (rc == 0)
		sm_info("main", "stopped");
out_flags:
	sm_flags_fini(&fs);
	return (rc);
}
