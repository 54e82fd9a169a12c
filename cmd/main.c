/*
 * main.c -- the `smolder` binary: flags, the module table behind -target,
 * signals.  Thin on purpose (docs/style.md §1, after Pyroscope's modules.go): each
 * module's init/start/stop below only calls its component's API.
 *
 * Modules (dependencies first):
 *   server        HTTP listener, /ready, /metrics, the      (internal)
 *                 status routes (common/status.h)
 *   ingester      head + RPC server                         (target)
 *   ring          the ingester ring, /ring                  (internal)
 *   distributor   /ingest, replication                      (target)
 *   querier       /render, labels, Connect queries          (target)
 *   compactor     retention passes over the ring            (target)
 *   scraper       pull mode: scrapes pprof endpoints        (target)
 *   store-gateway history from the bucket (ingester/gateway.h) (target)
 *   all           every component in one process            (target)
 *
 * -target=all runs no store-gateway: a single binary's ingester keeps
 * every block it shipped (local retention drops a block only once
 * store-gateways serve it), so a gateway there would only hold a second
 * copy of the same blocks, and its bucket is a copy to restore from
 * after a lost disk (-ingester.restore-from-bucket).  A store-gateway
 * never shares a process with an ingester: both are the ingester
 * component in different roles, each with one RPC address and one data
 * directory.  A single binary that should keep its history in the
 * bucket only runs a store-gateway beside it (docs/operations.md,
 * "Object storage").
 *
 * The ring's members come from -ring.members or -ring.dns; with neither,
 * the ring is this process's own ingester (-instance.id at
 * -rpc.listen-address), which is single-binary mode: the distributor and
 * querier reach it over nng inproc:// -- the same RPC path a cluster uses
 * over tcp:// -- except that a distributor's writes to an ingester of its
 * own process call the ingester's handler directly, on the same request
 * bytes (common/rpc.h, Direct calls: the inproc:// hand-off cost two
 * thread switches per write on one core).  -distributor.replication-factor
 * defaults to 3, and to 1 with -target=all unless given.
 *
 * /ready is 200 when every component of this process can serve: the
 * ingester has replayed its head log and its storage accepts writes (503
 * with RocksDB's error while a full disk or an I/O error refuses them,
 * 200 again by itself once writes succeed), the distributor's ring has a
 * write quorum of healthy ingesters, the querier's ring has a healthy one
 * (and, with store-gateways, so has its gateway ring), a store-gateway
 * has finished its first sync.  In a process with a distributor every
 * answer carries the distributor's
 * random id in X-Smolder-Distributor, by which the distributors of
 * -distributor.peers count each other (common/peers.h).
 *
 * Shutdown: SIGINT or SIGTERM stops modules in reverse start order and
 * exits 0.  Signals are blocked in every thread and taken by sigwait() in
 * the main thread, so no handler runs in a random thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/flags.h"
#include "common/auth.h"
#include "common/overrides.h"
#include "common/status.h"
#include "common/etcd.h"
#include "common/grpc.h"
#include "common/http.h"
#include "common/tls.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/module.h"
#include "common/bucket.h"
#include "common/ring.h"
#include "common/tiers.h"
#include "compactor/compactor.h"
#include "scraper/scraper.h"
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
	char *instance_id;
	char *instance_zone;            /* -instance.zone */
	int64_t shutdown_delay_ms;      /* -shutdown-delay */
	int64_t rpc_max_conns;
	char *ring_members;
	char *ring_dns;
	int64_t ring_tokens;
	int64_t ring_heartbeat_ms;
	int64_t ring_heartbeat_timeout_ms;
	int64_t ring_dns_refresh_ms;
	char *ring_etcd_endpoints;      /* -ring.etcd.* */
	char *ring_etcd_prefix;
	int64_t ring_etcd_timeout_ms;
	char *ring_instance_addr;       /* -ring.instance-addr */
	char *ring_etcd_members;        /* <prefix>ingesters/ (owned) */
	struct sm_ring_reg *ring_reg;   /* the ingester's (or store-gateway's)
					 * key in etcd */
	struct sm_etcd_lock *cpt_lock;  /* the compactor's, in etcd */
	int64_t replication_factor;
	int64_t http_threads;
	int64_t http_write_workers, http_query_workers;
	int64_t http_conn_limit;
	int64_t http_per_ip_limit;
	int64_t http_idle_timeout_ms;
	int64_t http_header_timeout_ms;
	int64_t http_body_min_rate;
	char *grpc_listen;
	char *admin_listen;
	bool metrics_on_admin;
	char *tls_cert, *tls_key, *tls_ca, *tls_client_auth, *tls_min;
	char *rpc_tls_cert, *rpc_tls_key, *rpc_tls_ca, *rpc_tls_name;
	char *etcd_tls_cert, *etcd_tls_key, *etcd_tls_ca;
	bool etcd_tls_on;
	int64_t grpc_streams;
	int64_t grpc_recv_max;
	int64_t grpc_send_max;
	bool multitenancy;
	char *keys_file;
	int64_t keys_reload_ms;
	char *runtime_config_file;
	int64_t runtime_config_reload_ms;
	char *tiers_spec;               /* -compactor.downsample-tiers */
	char *gw_members;               /* -store-gateway.sharding-ring.* */
	char *gw_store;
	bool gw_unregister;
	int64_t gw_rf;
	int64_t gw_sync_ms;             /* -store-gateway.sync-interval */
	int64_t gw_cache_bytes;         /* -store-gateway.data-cache-bytes */
	int64_t gw_page_bytes;          /* -store-gateway.data-page-bytes */
	int64_t gw_workers;             /* -store-gateway.sync-concurrency */
	struct ing_config ing_cfg;
	struct sm_bucket_cfg bucket_cfg;  /* -storage.* */
	struct dist_config dist_cfg;
	struct qry_config qry_cfg;
	struct cpt_config cpt_cfg;
	char *scrape_config_file;       /* -scrape.config-file */
	int64_t scrape_reload_ms;
	char *scraper_push_url;
	char *scraper_push_key_file;
	char *scraper_peers;
	int64_t scraper_peers_period_ms, scraper_peers_timeout_ms;
	int64_t scraper_concurrency;
	int64_t scraper_max_state;
	int64_t scraper_max_profile;

	/* state */
	atomic_bool shutting_down;      /* SIGTERM seen: /ready is 503 */
	const struct sm_module *order[16];
	size_t norder;
	int data_lock_fd;
	struct sm_auth *auth;
	struct sm_overrides *overrides; /* -runtime-config.file; NULL = none */
	struct sm_status_cfg status;     /* common/status.h routes */
	struct sm_http *http;
	struct sm_grpc *grpc;          /* NULL: no -grpc.listen-address */
	struct sm_tls *tls;            /* NULL: plain HTTP */
	struct ingester *ing;
	struct sm_bucket *bucket;       /* NULL: no -storage.backend */
	struct sm_ring *ring;
	struct sm_ring *gw_ring;        /* the store-gateways (querier,
					 * ingester, store-gateway), or NULL */
	char *gw_etcd_members;          /* <prefix>store-gateways/ (owned) */
	struct distributor *dist;
	struct querier *qry;
	struct compactor *cpt;
	struct scraper *scr;
	char *scr_push_url;             /* the default's text (owned) */
};

/* --- server --------------------------------------------------------------- */

static void
ready_handler(struct sm_http_req *r, void *arg)
{
	struct app *app = arg;

	/* Who answers: peer distributors count the healthy ones by it,
	 * scrapers share their targets among the healthy ones
	 * (common/peers.h). */
	if (app->dist != NULL)
		sm_http_set_header(r, "X-Smolder-Distributor",
		    dist_peer_id(app->dist));
	if (app->scr != NULL)
		sm_http_set_header(r, SCRAPER_PEER_HEADER,
		    scraper_id(app->scr));
	if (atomic_load(&app->shutting_down)) {
		sm_http_reply_text(r, 503, "Shutting down");
		return;
	}
	if (app->ing != NULL && !ing_ready(app->ing)) {
		sm_http_reply_text(r, 503, app->ing_cfg.gateway ?
		    "Store-gateway not ready: its first sync from the bucket is "
		    "not done" : "Ingester not ready: replaying its head log");
		return;
	}
	if (app->ing != NULL) {
		char why[512];
		int64_t wait_ms;

		if (!ing_writable(app->ing, why, sizeof(why))) {
			sm_http_reply_text(r, 503, "Ingester not ready: it "
			    "refuses writes: %s", why);
			return;
		}
		if (!ing_settled(app->ing, &wait_ms)) {
			sm_http_reply_text(r, 503, "%s not ready: ACTIVE, "
			    "waiting %lld ms more so that every ring has seen "
			    "it (-ingester.min-ready-duration)",
			    app->ing_cfg.gateway ? "Store-gateway" : "Ingester",
			    (long long)wait_ms);
			return;
		}
	}
	if (app->ring != NULL) {
		struct sm_ring_snap *s = sm_ring_acquire(app->ring);
		bool ok = (app->dist == NULL || sm_ring_writable(s)) &&
		    s->nhealthy > 0;

		if (!ok) {
			sm_http_reply_text(r, 503, "Ring not ready: %u of %u "
			    "ingesters take writes (%u healthy), %u needed",
			    s->nwritable, s->n, s->nhealthy,
			    app->dist != NULL ? s->quorum : 1);
			sm_ring_release(s);
			return;
		}
		sm_ring_release(s);
	}
	/* A querier with store-gateways answers nothing without one (an
	 * ingester or a store-gateway with the ring does not wait). */
	if (app->qry != NULL && app->gw_ring != NULL) {
		struct sm_ring_snap *s = sm_ring_acquire(app->gw_ring);
		uint32_t nh = s->nhealthy, n = s->n;

		sm_ring_release(s);
		if (nh == 0) {
			sm_http_reply_text(r, 503, "Store-gateways not ready: 0 "
			    "of %u healthy", n);
			return;
		}
	}
	sm_http_reply_text(r, 200, "ready");
}

/* Carry sm_sat_count() (sums that saturated, common/sm.h) into a counter. */
static void
metrics_sync_saturations(void)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static struct sm_metric *m;
	static uint64_t seen;
	uint64_t now = sm_sat_count();

	pthread_mutex_lock(&mu);
	if (m == NULL)
		m = sm_metric_register(SM_METRIC_COUNTER,
		    "smolder_value_saturations_total", "Sums of sample values "
		    "that left int64 and were kept at INT64_MAX or INT64_MIN "
		    "instead of wrapping.", NULL, NULL, 0);
	if (now > seen) {
		sm_counter_add(sm_metric_child0(m), now - seen);
		seen = now;
	}
	pthread_mutex_unlock(&mu);
}

/* Process memory, measured (sm_mem_stats), for every target. */
static double
g_mem(int which)
{
	struct sm_mem_stats m;

	sm_mem_stats(&m);
	return ((double)(which == 0 ? m.rss : which == 1 ? m.heap_used :
	    m.heap_free));
}

static double
g_rss(void *arg)
{
	(void)arg;
	return (g_mem(0));
}

static double
g_heap_used(void *arg)
{
	(void)arg;
	return (g_mem(1));
}

static double
g_heap_free(void *arg)
{
	(void)arg;
	return (g_mem(2));
}

static void
metrics_mem_init(struct app *app)
{
	sm_metric_gauge_fn("process_resident_memory_bytes",
	    "Resident memory size in bytes.", g_rss, app);
	sm_metric_gauge_fn("smolder_malloc_used_bytes",
	    "Heap bytes handed out by malloc, every arena (mallinfo2).",
	    g_heap_used, app);
	sm_metric_gauge_fn("smolder_malloc_free_bytes",
	    "Free heap bytes malloc holds below its arenas' tops, resident "
	    "until trimmed (mallinfo2).", g_heap_free, app);
}

static void
metrics_handler(struct sm_http_req *r, void *arg)
{
	struct sm_buf out = SM_BUF_INIT;

	(void)arg;
	metrics_sync_saturations();
	sm_metrics_write(&out);
	if (sm_buf_error(&out) != 0) {
		sm_buf_fini(&out);
		sm_http_reply_error(r, 500, "internal", "out of memory");
		return;
	}
	sm_http_reply_buf(r, 200, "text/plain; version=0.0.4; charset=utf-8",
	    &out);
}

/*
 * Descriptors: the soft limit is raised to the hard one (Go's runtime
 * does the same), since every HTTP and gRPC connection holds one and the
 * default soft limit (often 1024) would turn a flood of idle or
 * trickling connections into EMFILE for RocksDB's files and the RPC.
 * -server.http-conn-limit above what the limit leaves after a reserve
 * (SERVER_FD_RESERVE: RocksDB, the RPC, the bucket, the logs) is lowered
 * to fit, with a warning.  Returns the HTTP connection limit to use.
 */
#define SERVER_FD_RESERVE 1024

static unsigned
server_conn_limit(int64_t want)
{
	struct rlimit rl;
	rlim_t room;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return ((unsigned)want);
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t cur = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			rl.rlim_cur = cur;
	}
	if (rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur >= (rlim_t)want + 2 * SERVER_FD_RESERVE)
		return ((unsigned)want);
	room = rl.rlim_cur > 2 * SERVER_FD_RESERVE + 64 ?
	    (rl.rlim_cur - 2 * SERVER_FD_RESERVE) / 2 : 64;
	sm_warn("server", "-server.http-conn-limit=%lld does not fit the "
	    "descriptor limit (%llu, HTTP and gRPC each up to the limit, plus "
	    "%d in reserve); using %llu (raise the hard limit: ulimit -Hn, "
	    "LimitNOFILE=)", (long long)want, (unsigned long long)rl.rlim_cur,
	    2 * SERVER_FD_RESERVE, (unsigned long long)room);
	return ((unsigned)SM_MIN((rlim_t)want, room));
}

/*
 * -server.http-write-workers -1 (the default): the write handlers run on
 * the event thread that read the request in single-binary mode (a
 * distributor whose ring is this process's own ingester: no -ring.members,
 * -ring.dns or -ring.etcd.endpoints) when the head log is not synced per
 * write.  Such a write is then the caller's own CPU time to the end (the
 * distributor calls the ingester directly, common/rpc.h): nothing in it
 * waits on the network or the disk, so it cannot hold an event thread for
 * longer than its own decode.  Handing it to a pool worker and back cost
 * about 15 % of a fresh single binary's ingest CPU (bench B1's files: 545
 * against 465 us per profile on one core, the same with 1 or 8 workers;
 * about 6 % once the server has run a minute).  The price: at most
 * -server.http-threads writes run at once.  A distributor with a ring of
 * other processes waits on them (a -target=all member of a cluster too),
 * and -ingester.wal-sync waits on fdatasync; both keep a pool of 8, so
 * probes never wait behind them and a group commit gathers more than the
 * event threads' writes.
 */
static unsigned
server_write_workers(const struct app *app)
{
	if (app->http_write_workers >= 0)
		return ((unsigned)app->http_write_workers);
	if (sm_modules_has(app->order, app->norder, "distributor") &&
	    sm_modules_has(app->order, app->norder, "ingester") &&
	    *app->ring_members == '\0' && *app->ring_dns == '\0' &&
	    *app->ring_etcd_endpoints == '\0' && !app->ing_cfg.wal_sync)
		return (0);
	return (8);
}

static int
mod_server_init(void *p, struct sm_err *err)
{
	struct app *app = p;
	struct sm_http_cfg cfg;
	int rv;

	sm_http_cfg_default(&cfg);
	cfg.listen = app->http_listen;
	cfg.admin_listen = app->admin_listen;
	cfg.metrics_on_admin = app->metrics_on_admin;
	if (app->metrics_on_admin && app->admin_listen[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "server: "
		    "-server.metrics-on-admin-listener needs "
		    "-server.admin-listen-address"));
	cfg.threads = (unsigned)app->http_threads;
	cfg.write_workers = server_write_workers(app);
	cfg.query_workers = (unsigned)app->http_query_workers;
	app->http_conn_limit = app->http_conn_limit < 1 ? app->http_conn_limit :
	    server_conn_limit(app->http_conn_limit);
	cfg.conn_limit = (unsigned)app->http_conn_limit;
	cfg.per_ip_limit = (unsigned)app->http_per_ip_limit;
	cfg.conn_timeout_s = (unsigned)((app->http_idle_timeout_ms + 999) /
	    1000);
	cfg.header_timeout_ms = app->http_header_timeout_ms;
	cfg.body_min_rate = app->http_body_min_rate;
	if (app->http_threads < 1 || app->http_conn_limit < 1 ||
	    app->http_idle_timeout_ms < 1000 || app->http_write_workers < -1 ||
	    app->http_write_workers > 1024 || app->http_query_workers < 0 ||
	    app->http_query_workers > 1024)
		return (sm_err_set(err, SM_EINVAL, "server: http threads and "
		    "connection limit must be >= 1, idle timeout >= 1s, "
		    "worker pools 0 to 1024 (write workers -1: automatic)"));
	if ((rv = sm_auth_create(app->multitenancy, app->keys_file,
	    app->keys_reload_ms, &app->auth, err)) != 0)
		return (rv);
	if ((rv = sm_overrides_create(app->runtime_config_file,
	    app->runtime_config_reload_ms, &app->overrides, err)) != 0)
		return (rv);
	if (app->tls_cert[0] != '\0' || app->tls_key[0] != '\0') {
		struct sm_tls_cfg tc = { app->tls_cert, app->tls_key,
		    app->tls_ca, app->tls_client_auth, app->tls_min };

		if ((rv = sm_tls_create(&tc, &app->tls, err)) != 0)
			return (rv);
		cfg.tls = app->tls;
	} else if (app->tls_ca[0] != '\0' || app->tls_client_auth[0] != '\0') {
		return (sm_err_set(err, SM_EINVAL, "server: "
		    "-server.http-tls-ca-path and -server.http-tls-client-auth "
		    "need -server.http-tls-cert-path and -key-path"));
	}
	if ((rv = sm_http_create(&cfg, &app->http, err)) != 0)
		return (rv);
	sm_http_set_auth(app->http, app->auth);
	metrics_mem_init(app);
	if ((rv = sm_http_route_as(app->http, SM_SCOPE_PUBLIC, "GET",
	    "/metrics", metrics_handler, app, 0)) != 0)
		return (rv);
	app->status.overrides = app->overrides;
	app->status.multitenancy = app->multitenancy;
	if ((rv = sm_status_routes(app->http, &app->status, err)) != 0)
		return (rv);
	return (sm_http_route_as(app->http, SM_SCOPE_PUBLIC, "GET", "/ready",
	    ready_handler, app, 0));
}

static int
mod_server_start(void *p, struct sm_err *err)
{
	struct app *app = p;
	struct sm_grpc_cfg gc;
	int rv;

	if ((rv = sm_http_start(app->http, err)) != 0 ||
	    app->grpc_listen[0] == '\0')
		return (rv);
	sm_grpc_cfg_default(&gc);
	gc.listen = app->grpc_listen;
	gc.conn_limit = (unsigned)app->http_conn_limit;
	gc.per_ip_limit = (unsigned)app->http_per_ip_limit;
	gc.idle_timeout_s = (unsigned)((app->http_idle_timeout_ms + 999) /
	    1000);
	gc.max_streams = app->grpc_streams < 1 || app->grpc_streams > 128 ?
	    0 : (unsigned)app->grpc_streams;
	gc.max_recv_msg = app->grpc_recv_max < 1 ? 0 :
	    (size_t)app->grpc_recv_max;
	gc.max_send_msg = app->grpc_send_max < 1 ? 0 :
	    (size_t)app->grpc_send_max;
	gc.tls = app->tls;              /* one server identity */
	return (sm_grpc_start(&gc, app->http, &app->grpc, err));
}

static void
mod_server_stop(void *p)
{
	struct app *app = p;

	/* gRPC calls are HTTP requests underneath: stop them first. */
	sm_grpc_stop(app->grpc);
	app->grpc = NULL;
	sm_http_stop(app->http);
	sm_metric_gauge_fn_remove(app);
}

/* --- the bucket ------------------------------------------------------------ */

/*
 * Open the -storage.* bucket once for the components that use it (the
 * ingester ships to it, the compactor owns it); app->bucket stays NULL
 * without -storage.backend.  A wrong key or bucket name stops the start;
 * a store that is not reachable yet does not (blocks wait on disk).
 */
static int
bucket_open(struct app *app, struct sm_err *err)
{
	int rv;

	if (app->bucket != NULL || !sm_bucket_cfg_enabled(&app->bucket_cfg))
		return (0);
	if ((rv = sm_bucket_open(&app->bucket_cfg, app->data_dir,
	    &app->bucket, err)) != 0)
		return (rv);
	if ((rv = sm_bucket_probe(app->bucket, err)) == SM_EAUTH ||
	    rv == SM_ENOTFOUND)
		return (rv);
	if (rv != 0)
		sm_warn("main", "bucket not reachable yet: %s", err->msg);
	sm_err_clear(err);
	sm_info("main", "bucket\tbucket=%s", sm_bucket_desc(app->bucket));
	return (0);
}

/* --- ingester ------------------------------------------------------------- */

/*
 * Creates app->ing, for an ingester or a store-gateway (an ingester that
 * serves the bucket's blocks): the settings both take from this process,
 * then the bucket.  The caller has set the ones of its own role.
 */
static int
ing_open(struct app *app, struct sm_err *err)
{
	int rv;

	app->ing_cfg.rpc_url = app->rpc_listen;
	app->ing_cfg.data_dir = app->data_dir;
	app->ing_cfg.instance_id = app->instance_id;
	app->ing_cfg.instance_zone = app->instance_zone;
	app->ing_cfg.rpc_max_conns = app->rpc_max_conns;
	app->ing_cfg.gw_ring = app->gw_ring;  /* an ingester's leave waits */
	app->ing_cfg.ring_tokens = app->ring_tokens;
	if ((rv = bucket_open(app, err)) != 0)
		return (rv);
	app->ing_cfg.bucket = app->bucket;
	return (ing_create(&app->ing_cfg, app->http, &app->ing, err));
}

static int
mod_ingester_init(void *p, struct sm_err *err)
{
	struct app *app = p;

	app->ing_cfg.rpc_direct = sm_modules_has(app->order, app->norder,
	    "distributor");
	app->ing_cfg.tenant_hold_ms = sm_ring_tenant_hold_ms(
	    app->ring_heartbeat_ms);
	return (ing_open(app, err));
}

/*
 * The address an ingester registers in etcd: -ring.instance-addr, else
 * -rpc.listen-address with a wildcard host replaced by this host's name
 * (a pod's hostname resolves to its address).  Only tcp:// can be
 * reached from other processes.
 */
static int
instance_addr(struct app *app, char *out, size_t len, struct sm_err *err)
{
	const char *l = app->rpc_listen, *host, *colon;
	char name[256];

	if (*app->ring_instance_addr != '\0')
		l = app->ring_instance_addr;
	if (strncmp(l, "tcp://", 6) != 0 || (colon = strrchr(l + 6, ':')) ==
	    NULL)
		return (sm_err_set(err, SM_EINVAL, "-ring.etcd.endpoints: an "
		    "ingester registers a tcp://host:port address; set "
		    "-ring.instance-addr or a tcp:// -rpc.listen-address (not "
		    "\"%s\")", l));
	host = l + 6;
	if (l == app->rpc_listen && (colon == host ||
	    strncmp(host, "0.0.0.0:", 8) == 0 || strncmp(host, "[::]:", 5) ==
	    0 || strncmp(host, "*:", 2) == 0)) {
		if (gethostname(name, sizeof(name)) != 0)
			return (sm_err_set(err, SM_EINVAL, "-ring.instance-addr: "
			    "this host has no name; set the flag"));
		name[sizeof(name) - 1] = '\0';
		(void)snprintf(out, len, "tcp://%s%s", name, colon);
		return (0);
	}
	(void)snprintf(out, len, "%s", l);
	return (0);
}

static int
mod_ingester_start(void *p, struct sm_err *err)
{
	struct app *app = p;
	char addr[512];
	int rv;

	const char *prefix = app->ing_cfg.gateway ? app->gw_etcd_members :
	    app->ring_etcd_members;

	if ((rv = ing_start(app->ing, err)) != 0)
		return (rv);
	if (*app->ring_etcd_endpoints == '\0' || (app->ing_cfg.gateway &&
	    strcmp(app->gw_store, "etcd") != 0))
		return (0);
	if (prefix == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = instance_addr(app, addr, sizeof(addr), err)) != 0)
		return (rv);
	if ((rv = sm_ring_reg_start(app->ring_etcd_endpoints,
	    app->ring_etcd_timeout_ms, prefix,
	    app->instance_id, addr, app->instance_zone,
	    app->ring_dns_refresh_ms, &app->ring_reg, err)) != 0)
		return (rv);
	/* A data directory that left stays out of the rings. */
	if (!app->ing_cfg.gateway && ing_retired(app->ing))
		(void)sm_ring_reg_leave(app->ring_reg, err);
	return (0);
}

static void
mod_ingester_stop(void *p)
{
	struct app *app = p;
	struct sm_err err;

	/* A store-gateway leaving for good: its tenants go to the others
	 * (they load them first: gateway.h). */
	sm_err_clear(&err);
	if (app->ring_reg != NULL && app->ing_cfg.gateway &&
	    app->gw_unregister && sm_ring_reg_leave(app->ring_reg, &err) != 0)
		sm_error("main", "etcd still lists this store-gateway: delete "
		    "its key\terr=\"%s\"", err.msg);
	sm_ring_reg_stop(app->ring_reg);
	app->ring_reg = NULL;
	ing_stop(app->ing);
}

/* --- store-gateway --------------------------------------------------------- */

static int
mod_gateway_init(void *p, struct sm_err *err)
{
	struct app *app = p;

	if (sm_modules_has(app->order, app->norder, "ingester"))
		return (sm_err_set(err, SM_EINVAL, "store-gateway and "
		    "ingester cannot share a process (one RPC address, one "
		    "data directory): run them as separate targets"));
	if (!sm_bucket_cfg_enabled(&app->bucket_cfg))
		return (sm_err_set(err, SM_EINVAL, "store-gateway: set "
		    "-storage.backend (it serves the bucket's blocks)"));
	app->ing_cfg.gateway = true;
	app->ing_cfg.gw_sync_ms = app->gw_sync_ms;
	app->ing_cfg.gw_cache_bytes = app->gw_cache_bytes;
	app->ing_cfg.gw_page_bytes = app->gw_page_bytes;
	app->ing_cfg.gw_workers = app->gw_workers;
	return (ing_open(app, err));
}

/* --- ring ------------------------------------------------------------------ */

static int
mod_ring_init(void *p, struct sm_err *err)
{
	struct app *app = p;
	bool local = sm_modules_has(app->order, app->norder, "ingester");
	struct sm_ring_cfg cfg = {
		.members = app->ring_members,
		.dns = app->ring_dns,
		.self_id = local ? app->instance_id : NULL,
		.self_url = local ? app->rpc_listen : NULL,
		.tokens = app->ring_tokens,
		.heartbeat_ms = app->ring_heartbeat_ms,
		.heartbeat_timeout_ms = app->ring_heartbeat_timeout_ms,
		.dns_refresh_ms = app->ring_dns_refresh_ms,
		.rf = app->replication_factor,
		.recv_max = (size_t)1 << 30,
		.etcd_endpoints = app->ring_etcd_endpoints,
		.etcd_prefix = app->ring_etcd_members,
		.etcd_timeout_ms = app->ring_etcd_timeout_ms,
	};

	return (sm_ring_create(&cfg, app->http, &app->ring, err));
}

/*
 * mod_<mod>_start and mod_<mod>_stop for a module whose start and stop
 * are its component's own, called on app-><field> and nothing more.
 */
#define MOD_START_STOP(mod, field, start_fn, stop_fn)                       \
	static int                                                          \
	mod_##mod##_start(void *p, struct sm_err *err)                      \
	{                                                                   \
		struct app *app = p;                                        \
									    \
		return (start_fn(app->field, err));                         \
	}                                                                   \
									    \
	static void                                                         \
	mod_##mod##_stop(void *p)                                           \
	{                                                                   \
		struct app *app = p;                                        \
									    \
		stop_fn(app->field);                                        \
	}

MOD_START_STOP(ring, ring, sm_ring_start, sm_ring_stop)

/* Also the init of "all", which only names its dependencies. */
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
	app->dist_cfg.overrides = app->overrides;
	app->dist_cfg.hold_after_change_ms = sm_ring_confine_settle_ms(
	    app->ring_heartbeat_ms, app->runtime_config_reload_ms);
	app->dist_cfg.rw.data_dir = app->data_dir;
	return (dist_create(&app->dist_cfg, app->http, app->ring, &app->dist,
	    err));
}

MOD_START_STOP(distributor, dist, dist_start, dist_stop)

static int
mod_querier_init(void *p, struct sm_err *err)
{
	struct app *app = p;
	int rv;

	app->qry_cfg.multitenancy = app->multitenancy;
	app->qry_cfg.overrides = app->overrides;
	app->qry_cfg.reject_older_ms = app->dist_cfg.reject_older_ms;
	app->qry_cfg.heartbeat_timeout_ms = app->ring_heartbeat_timeout_ms;
	app->qry_cfg.shard_size = app->dist_cfg.shard_size;
	app->qry_cfg.confine_settle_ms = sm_ring_confine_settle_ms(
	    app->ring_heartbeat_ms, app->runtime_config_reload_ms);
	if ((rv = sm_tiers_parse(app->tiers_spec, app->ing_cfg.bucket_ms,
	    &app->qry_cfg.tiers, err)) != 0)
		return (rv);
	app->qry_cfg.gw_ring = app->gw_ring;
	return (qry_create(&app->qry_cfg, app->http, app->ring, &app->qry,
	    err));
}

/* --- the store-gateway ring ----------------------------------------------- */

/*
 * One ring of the store-gateways for the components of this process that
 * need it: a querier asks them for history, an ingester's leave and
 * local retention ask which blocks they serve, a store-gateway shares
 * tenants by it (ingester/gateway.h).  Its members are
 * -store-gateway.sharding-ring.members, or with
 * -store-gateway.sharding-ring.store=etcd the keys under
 * <-ring.etcd.prefix>store-gateways/ (each gateway registers itself, as
 * an ingester does under ingesters/).  Neither: no ring (no gateways; a
 * lone store-gateway serves every tenant).
 */
static int
mod_gateways_init(void *p, struct sm_err *err)
{
	struct app *app = p;
	bool etcd = strcmp(app->gw_store, "etcd") == 0;
	struct sm_ring_cfg gc = {
		.name = "store-gateways",
		.members = etcd ? "" : app->gw_members,
		.dns = "",
		.tokens = app->ring_tokens,
		.heartbeat_ms = app->ring_heartbeat_ms,
		.heartbeat_timeout_ms = app->ring_heartbeat_timeout_ms,
		.dns_refresh_ms = app->ring_dns_refresh_ms,
		.rf = app->gw_rf,
		.recv_max = (size_t)1 << 30,
		.etcd_endpoints = etcd ? app->ring_etcd_endpoints : "",
		.etcd_prefix = app->gw_etcd_members,
		.etcd_timeout_ms = app->ring_etcd_timeout_ms,
	};

	if (!etcd && app->gw_store[0] != '\0')
		return (sm_err_set(err, SM_EINVAL, "-store-gateway.sharding-"
		    "ring.store: \"%s\" is neither \"\" (the members flag) "
		    "nor etcd", app->gw_store));
	if (etcd && (*app->ring_etcd_endpoints == '\0' ||
	    app->gw_members[0] != '\0'))
		return (sm_err_set(err, SM_EINVAL, "-store-gateway.sharding-"
		    "ring.store=etcd takes the members from -ring.etcd."
		    "endpoints: set that, and not -store-gateway.sharding-"
		    "ring.members"));
	if (etcd && app->gw_etcd_members == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (!etcd && app->gw_members[0] == '\0')
		return (0);
	if (app->gw_rf < 1 || app->gw_rf > 64)
		return (sm_err_set(err, SM_EINVAL, "-store-gateway."
		    "sharding-ring.replication-factor must be 1..64"));
	if (!etcd && sm_modules_has(app->order, app->norder,
	    "store-gateway")) {
		char **ids = NULL, **urls = NULL;
		uint32_t n = 0, i;
		int rv;

		if ((rv = sm_ring_members_parse(app->gw_members, &ids, &urls,
		    &n, err)) != 0)
			return (rv);
		for (i = 0; i < n && strcmp(ids[i], app->instance_id) != 0; i++)
			;
		sm_ring_members_free(ids, urls, n);
		if (i == n)
			return (sm_err_set(err, SM_EINVAL, "-instance.id %s is "
			    "not in -store-gateway.sharding-ring.members",
			    app->instance_id));
	}
	return (sm_ring_create(&gc, app->http, &app->gw_ring, err));
}

static int
mod_gateways_start(void *p, struct sm_err *err)
{
	struct app *app = p;

	return (app->gw_ring != NULL ? sm_ring_start(app->gw_ring, err) : 0);
}

static void
mod_gateways_stop(void *p)
{
	struct app *app = p;

	if (app->gw_ring != NULL)
		sm_ring_stop(app->gw_ring);
}

static int
mod_compactor_init(void *p, struct sm_err *err)
{
	struct app *app = p;
	int rv;

	if ((rv = sm_tiers_parse(app->tiers_spec, app->ing_cfg.bucket_ms,
	    &app->cpt_cfg.tiers, err)) != 0)
		return (rv);
	app->cpt_cfg.overrides = app->overrides;
	if ((rv = bucket_open(app, err)) != 0)
		return (rv);
	app->cpt_cfg.bucket = app->bucket;
	app->cpt_cfg.gateways = app->gw_members[0] != '\0' ||
	    strcmp(app->gw_store, "etcd") == 0;
	app->cpt_cfg.data_dir = app->data_dir;
	return (cpt_create(&app->cpt_cfg, app->http, app->ring, &app->cpt,
	    err));
}

static int
mod_compactor_start(void *p, struct sm_err *err)
{
	struct app *app = p;
	int rv;

	/* With etcd, one compactor of the cluster runs passes: the holder
	 * of <prefix>compactor/lock (compactor.h). */
	if (*app->ring_etcd_endpoints != '\0') {
		char key[1024], who[512], host[256];

		if (gethostname(host, sizeof(host)) != 0)
			(void)snprintf(host, sizeof(host), "?");
		host[sizeof(host) - 1] = '\0';
		(void)snprintf(key, sizeof(key), "%scompactor/lock",
		    app->ring_etcd_prefix);
		(void)snprintf(who, sizeof(who), "%s pid %d on %s",
		    app->instance_id, (int)getpid(), host);
		if ((rv = sm_etcd_lock_start(app->ring_etcd_endpoints,
		    app->ring_etcd_timeout_ms, key, who, 15, NULL,
		    &app->cpt_lock, err)) != 0)
			return (rv);
		cpt_set_lock(app->cpt, app->cpt_lock);
	}
	return (cpt_start(app->cpt, err));
}

static void
mod_compactor_stop(void *p)
{
	struct app *app = p;

	cpt_stop(app->cpt);
	cpt_set_lock(app->cpt, NULL);
	sm_etcd_lock_stop(app->cpt_lock);   /* after the last pass */
	app->cpt_lock = NULL;
}

/* The scraper uploads to -scraper.push-url, by default to this process's
 * own HTTP listener when it runs a distributor (its loopback address:
 * a wildcard listen address is reached at 127.0.0.1). */
static int
mod_scraper_init(void *p, struct sm_err *err)
{
	struct app *app = p;
	struct scraper_cfg sc = {
		.config_file = app->scrape_config_file,
		.reload_ms = app->scrape_reload_ms,
		.push_url = app->scraper_push_url,
		.push_key_file = app->scraper_push_key_file,
		.peers = app->scraper_peers,
		.peers_period_ms = app->scraper_peers_period_ms,
		.peers_timeout_ms = app->scraper_peers_timeout_ms,
		.concurrency = (uint32_t)app->scraper_concurrency,
		.max_state_bytes = app->scraper_max_state,
		.max_profile_bytes = app->scraper_max_profile,
	};

	if (app->scraper_concurrency < 1 || app->scraper_concurrency > 4096)
		return (sm_err_set(err, SM_EINVAL, "-scraper.concurrency: 1 to "
		    "4096"));
	if (app->scraper_push_url[0] == '\0' &&
	    sm_modules_has(app->order, app->norder, "distributor")) {
		const char *colon = strrchr(app->http_listen, ':');
		char host[256] = "127.0.0.1", buf[512];

		if (colon != NULL && colon > app->http_listen &&
		    (size_t)(colon - app->http_listen) < sizeof(host)) {
			memcpy(host, app->http_listen, (size_t)(colon -
			    app->http_listen));
			host[colon - app->http_listen] = '\0';
			if (strcmp(host, "0.0.0.0") == 0 ||
			    strcmp(host, "[::]") == 0)
				(void)snprintf(host, sizeof(host), "127.0.0.1");
		}
		(void)snprintf(buf, sizeof(buf), "%s://%s:%s",
		    app->tls_cert[0] != '\0' ? "https" : "http", host,
		    colon != NULL ? colon + 1 : "4040");
		if ((app->scr_push_url = sm_strdup(buf)) == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		sc.push_url = app->scr_push_url;
	}
	return (scraper_create(&sc, app->http, &app->scr, err));
}

MOD_START_STOP(scraper, scr, scraper_start, scraper_stop)

static const struct sm_module modules[] = {
	{ "server", { NULL }, false, mod_server_init, mod_server_start,
	    mod_server_stop },
	{ "gateways", { "server", NULL }, false, mod_gateways_init,
	    mod_gateways_start, mod_gateways_stop },
	{ "ingester", { "server", "gateways", NULL }, true,
	    mod_ingester_init, mod_ingester_start, mod_ingester_stop },
	{ "ring", { "server", NULL }, false, mod_ring_init, mod_ring_start,
	    mod_ring_stop },
	{ "distributor", { "server", "ring", NULL }, true,
	    mod_distributor_init, mod_distributor_start,
	    mod_distributor_stop },
	{ "querier", { "server", "ring", "gateways", NULL }, true,
	    mod_querier_init, mod_noop_start, mod_noop_stop },
	{ "store-gateway", { "server", "gateways", NULL }, true,
	    mod_gateway_init,
	    mod_ingester_start, mod_ingester_stop },
	{ "compactor", { "server", "ring", NULL }, true,
	    mod_compactor_init, mod_compactor_start, mod_compactor_stop },
	{ "scraper", { "server", NULL }, true,
	    mod_scraper_init, mod_scraper_start, mod_scraper_stop },
	{ "all", { "ingester", "distributor", "querier", "compactor",
	    "scraper", NULL },
	    true, mod_noop_start, mod_noop_start, mod_noop_stop },
};

/* --- flags ---------------------------------------------------------------- */

#define SM_FLAG_STRUCT struct app
static const struct sm_flag app_flag_tab[] = {
	SM_FLAG_STR("target", target,
	    "all", "Comma-separated components to run: all, ingester, "
	    "distributor, querier, compactor, scraper, store-gateway. "
	    "\"all\" is single-binary mode (every component but "
	    "store-gateway)."),
	SM_FLAG_STR("scrape.config-file", scrape_config_file,
	    "",
	    "Pull mode: the scraper's YAML file of scrape_configs (Prometheus' "
	    "job_name, scrape_interval, scrape_timeout, static_configs, "
	    "file_sd_configs, relabel_configs; Pyroscope's profiling_config), "
	    "reloaded when it changes. Empty: the scraper is idle."),
	SM_FLAG_I64("scrape.config-reload-period", SM_FLAG_DURATION,
	    scrape_reload_ms, "5s",
	    "How often -scrape.config-file is checked for changes; a file "
	    "that does not load keeps the previous configuration."),
	SM_FLAG_STR("scraper.push-url", scraper_push_url,
	    "",
	    "Base URL of the distributor the scraper uploads to "
	    "(push.v1 Push). Empty: this process's own HTTP listener when it "
	    "runs a distributor."),
	SM_FLAG_STR("scraper.push-api-key-file", scraper_push_key_file,
	    "",
	    "File holding the API key (-auth.keys-file, write scope) the "
	    "scraper's uploads carry as Authorization: Bearer; its tenant "
	    "is the uploads' tenant. Empty: none (X-Scope-OrgID from each "
	    "job's tenant_id)."),
	SM_FLAG_STR("scraper.peers", scraper_peers,
	    "",
	    "Every scraper sharing the targets, this one included: "
	    "comma-separated http://host:port (their HTTP listeners) or "
	    "dns+host:port entries, probed on /ready. Each target is "
	    "scraped by one healthy scraper (rendezvous hashing); a dead "
	    "one's targets move to the others. Empty: this scraper scrapes "
	    "every target."),
	SM_FLAG_I64("scraper.peers-probe-period", SM_FLAG_DURATION,
	    scraper_peers_period_ms, "1s",
	    "How often each -scraper.peers entry is probed."),
	SM_FLAG_I64("scraper.peers-probe-timeout", SM_FLAG_DURATION,
	    scraper_peers_timeout_ms, "500ms",
	    "Deadline of one probe of a -scraper.peers entry."),
	SM_FLAG_I64("scraper.concurrency", SM_FLAG_INT, scraper_concurrency,
	    "32",
	    "Scrapes run at once (a CPU profile holds one for its seconds)."),
	SM_FLAG_I64("scraper.max-delta-state-bytes", SM_FLAG_BYTES,
	    scraper_max_state, "256MiB",
	    "Bound on the state the scraper keeps to turn cumulative "
	    "profiles into deltas, all targets together; a scrape that "
	    "would pass it fails and its target is reported. 0: none."),
	SM_FLAG_I64("scraper.max-profile-bytes", SM_FLAG_BYTES,
	    scraper_max_profile, "64MiB",
	    "Largest scraped profile, inflated; a larger answer fails the "
	    "scrape."),
	SM_FLAG_STR("http.listen-address", http_listen,
	    ":4040",
	    "HTTP API address, host:port or :port."),
	SM_FLAG_STR("server.admin-listen-address", admin_listen,
	    "",
	    "A second HTTP listener, for a private network, host:port or "
	    ":port: when set, admin calls (flush, compactor runs, leave and "
	    "shutdown, store-gateway syncs) answer there only (403 on "
	    "-http.listen-address). With multitenancy by header and no API "
	    "keys, those calls answer nowhere else."),
	SM_FLAG_SWITCH("server.metrics-on-admin-listener", metrics_on_admin,
	    "false",
	    "Serve /metrics (it names every tenant) on "
	    "-server.admin-listen-address only. Off by default so "
	    "Prometheus keeps scraping the API port."),
	SM_FLAG_STR("grpc.listen-address", grpc_listen,
	    "",
	    "gRPC (HTTP/2) address for every Connect service, host:port or "
	    ":port; empty: no gRPC listener. It shares the -server.http-* "
	    "connection limits and idle timeout, and with "
	    "-server.http-tls-* speaks TLS with the same certificate and "
	    "client-auth policy (cleartext otherwise)."),
	SM_FLAG_SWITCH("ring.etcd.tls-enabled", etcd_tls_on,
	    "false",
	    "Talk to etcd over TLS: host:port endpoints become https:// "
	    "(on too when a -ring.etcd.tls-* path is given)."),
	SM_FLAG_STR("ring.etcd.tls-ca-path", etcd_tls_ca,
	    "",
	    "CA (PEM) etcd's certificate must chain to; empty: the "
	    "system's."),
	SM_FLAG_STR("ring.etcd.tls-cert-path", etcd_tls_cert,
	    "",
	    "Client certificate (PEM) presented to etcd (its "
	    "--client-cert-auth)."),
	SM_FLAG_STR("ring.etcd.tls-key-path", etcd_tls_key,
	    "",
	    "The key of -ring.etcd.tls-cert-path (PEM)."),
	SM_FLAG_STR("rpc.tls-cert-path", rpc_tls_cert,
	    "",
	    "Mutual TLS on the internal RPC: this member's certificate "
	    "(PEM). With -rpc.tls-key-path and -rpc.tls-ca-path every "
	    "tcp:// RPC address is served and dialed as TLS, and only "
	    "holders of a certificate from that CA can call or answer; "
	    "every member must set them. Read at start."),
	SM_FLAG_STR("rpc.tls-key-path", rpc_tls_key,
	    "",
	    "Mutual TLS on the internal RPC: the key of -rpc.tls-cert-path "
	    "(PEM)."),
	SM_FLAG_STR("rpc.tls-ca-path", rpc_tls_ca,
	    "",
	    "Mutual TLS on the internal RPC: the cluster's CA (PEM) every "
	    "peer's certificate must chain to."),
	SM_FLAG_STR("rpc.tls-server-name", rpc_tls_name,
	    "",
	    "Mutual TLS on the internal RPC: the DNS name every member's "
	    "certificate carries, checked when dialing (needed when members "
	    "are dialed by IP address: mbedTLS checks names only); empty: "
	    "the host of the dialed address."),
	SM_FLAG_STR("server.http-tls-cert-path", tls_cert,
	    "",
	    "HTTPS: the server's certificate (PEM, its chain after it). "
	    "With -server.http-tls-key-path the HTTP listener speaks TLS "
	    "only; both files are read again when they change (rotation "
	    "without a restart)."),
	SM_FLAG_STR("server.http-tls-key-path", tls_key,
	    "",
	    "HTTPS: the private key of -server.http-tls-cert-path (PEM)."),
	SM_FLAG_STR("server.http-tls-ca-path", tls_ca,
	    "",
	    "HTTPS: the CAs (PEM) client certificates must chain to, for "
	    "-server.http-tls-client-auth; reloaded when it changes."),
	SM_FLAG_STR("server.http-tls-client-auth", tls_client_auth,
	    "",
	    "HTTPS client certificates: NoClientCert (empty), "
	    "RequestClientCert, RequireAnyClientCert, "
	    "VerifyClientCertIfGiven or RequireAndVerifyClientCert (mutual "
	    "TLS: a request without a certificate from "
	    "-server.http-tls-ca-path gets 401 or 403)."),
	SM_FLAG_STR("server.tls-min-version", tls_min,
	    "VersionTLS12",
	    "Lowest TLS version the HTTPS listener accepts: VersionTLS12 "
	    "or VersionTLS13."),
	SM_FLAG_I64("server.grpc-max-concurrent-streams", SM_FLAG_INT,
	    grpc_streams, "100",
	    "Most concurrent gRPC calls on one connection (1 to 128)."),
	SM_FLAG_I64("server.grpc-max-recv-msg-size-bytes", SM_FLAG_INT,
	    grpc_recv_max, "16777216",
	    "Largest gRPC request message; larger ones get "
	    "RESOURCE_EXHAUSTED. Each route's body limit applies too."),
	SM_FLAG_I64("server.grpc-max-send-msg-size-bytes", SM_FLAG_INT,
	    grpc_send_max, "134217728",
	    "Largest gRPC answer; a larger one is replaced by "
	    "RESOURCE_EXHAUSTED."),
	SM_FLAG_STR("data.dir", data_dir,
	    "./data", "Directory for this instance's data; it is created "
	    "if missing and locked against a second process."),
	SM_FLAG_STR("log.level", log_level,
	    "info", "Log level: debug, info, warn or error."),
	SM_FLAG_STR("rpc.listen-address", rpc_listen,
	    "inproc://smolder-ingester",
	    "nng URL the ingester serves internal RPC on "
	    "(inproc:// in single-binary mode, tcp://host:port in a "
	    "cluster)."),
	SM_FLAG_I64("server.http-threads", SM_FLAG_INT, http_threads,
	    "4", "HTTP event threads: they read "
	    "requests, send replies and answer /ready, /metrics and the "
	    "web UI's files; other handlers run on the worker pools."),
	SM_FLAG_I64("server.http-conn-limit", SM_FLAG_INT, http_conn_limit,
	    "16384",
	    "Most concurrent HTTP connections (and gRPC ones, counted "
	    "apart): enough to hold a flood of idle or trickling ones while "
	    "the header deadline and body rate cut them (a few KiB each); "
	    "lowered to fit the descriptor limit, with a warning."),
	SM_FLAG_I64("server.http-per-ip-conn-limit",
	    SM_FLAG_INT, http_per_ip_limit,
	    "256",
	    "Most concurrent HTTP connections from one IP, so one client "
	    "cannot take the whole -server.http-conn-limit (0 = no limit; "
	    "raise it behind a proxy that funnels every client through "
	    "one address)."),
	SM_FLAG_I64("server.http-idle-timeout",
	    SM_FLAG_DURATION, http_idle_timeout_ms,
	    "2m",
	    "Close HTTP connections with no traffic this long: idle "
	    "keep-alives, and requests whose headers or body stall."),
	SM_FLAG_I64("server.http-header-timeout",
	    SM_FLAG_DURATION, http_header_timeout_ms,
	    "30s",
	    "Close a connection whose request headers are not all in this "
	    "long after it opened, however slowly they trickle (slowloris; "
	    "later requests on a kept-alive connection get "
	    "-server.http-idle-timeout). 0: no bound."),
	SM_FLAG_I64("server.http-body-min-rate",
	    SM_FLAG_INT, http_body_min_rate,
	    "1024",
	    "Close a connection whose request body falls behind this many "
	    "bytes a second: after its headers a body has "
	    "-server.http-header-timeout, plus a second per this many bytes "
	    "delivered, however often its bytes come. 0: no bound."),
	SM_FLAG_SWITCH("auth.multitenancy-enabled", multitenancy,
	    "false",
	    "Require X-Scope-OrgID on every request (else the tenant is "
	    "\"anonymous\"), or with -auth.keys-file an API key."),
	SM_FLAG_STR("instance.id", instance_id,
	    "",
	    "This instance's stable id: an ingester's ring identity (its "
	    "tokens derive from it), e.g. the StatefulSet pod name. "
	    "Empty: the host name."),
	SM_FLAG_I64("rpc.max-connections", SM_FLAG_INT, rpc_max_conns,
	    "1024",
	    "Most concurrent internal RPC connections the ingester "
	    "accepts; more are closed."),
	SM_FLAG_STR("ring.members", ring_members,
	    "",
	    "The ingesters, as id=tcp://host:port,... (ids as their "
	    "-instance.id). Empty: -ring.dns, or this process's own "
	    "ingester."),
	SM_FLAG_STR("ring.dns", ring_dns,
	    "", "host:port of a DNS name resolving to every ingester (a "
	    "Kubernetes headless service); ids are learnt by probing."),
	SM_FLAG_I64("ring.tokens", SM_FLAG_INT, ring_tokens,
	    "128",
	    "Tokens per ingester on the hash ring; every process of a "
	    "cluster must agree."),
	SM_FLAG_I64("ring.heartbeat-period",
	    SM_FLAG_DURATION, ring_heartbeat_ms,
	    "2s",
	    "How often every ingester is probed for health."),
	SM_FLAG_I64("ring.heartbeat-timeout",
	    SM_FLAG_DURATION, ring_heartbeat_timeout_ms,
	    "10s",
	    "An ingester not heard from for this long is unhealthy and "
	    "skipped: the next token owner takes its place."),
	SM_FLAG_I64("ring.dns-refresh-period",
	    SM_FLAG_DURATION, ring_dns_refresh_ms,
	    "15s",
	    "How often -ring.dns is resolved again."),
	SM_FLAG_I64("distributor.replication-factor",
	    SM_FLAG_INT, replication_factor,
	    "3",
	    "Ingesters each series is written to; a write needs "
	    "floor(RF/2)+1 of them. 1 with -target=all unless set."),
	SM_FLAG_STR("auth.keys-file", keys_file,
	    "",
	    "File of hashed API keys (sha256:<hex> tenant scopes per "
	    "line; smolder-admin hash-key). Set: every API route needs "
	    "a key with its scope, and the key names the tenant."),
	SM_FLAG_I64("auth.keys-reload-period",
	    SM_FLAG_DURATION, keys_reload_ms,
	    "5s",
	    "How often -auth.keys-file is checked for changes; a changed "
	    "file is reloaded without a restart."),
	SM_FLAG_STR("runtime-config.file", runtime_config_file,
	    "",
	    "YAML file of per-tenant limit overrides (Pyroscope's "
	    "`overrides:` runtime config), reloaded without a restart; "
	    "empty = the flags apply to every tenant."),
	SM_FLAG_I64("runtime-config.reload-period",
	    SM_FLAG_DURATION, runtime_config_reload_ms,
	    "10s",
	    "How often -runtime-config.file is checked for changes; a "
	    "file that does not parse keeps the previous overrides."),
	SM_FLAG_I64("server.http-write-workers",
	    SM_FLAG_INT, http_write_workers,
	    "-1",
	    "Threads that run write handlers (/ingest, push.v1): writes "
	    "never wait behind a query (0 = on the event threads).  -1: "
	    "0 in single-binary mode (-target=all with no -ring.members, "
	    "-ring.dns or -ring.etcd.endpoints) with -ingester.wal-sync "
	    "off, where a write never waits on another process or the "
	    "disk; else 8."),
	SM_FLAG_I64("server.http-query-workers",
	    SM_FLAG_INT, http_query_workers,
	    "4",
	    "Threads that run query and admin handlers: at most this "
	    "many run at once, the rest wait in order, and health "
	    "probes and writes never wait behind them (0 = on the event "
	    "threads)."),
	SM_FLAG_STR("compactor.downsample-tiers", tiers_spec,
	    SM_TIERS_DEFAULT,
	    "Downsampling tier widths, e.g. 1h,1d (none: no tiers). The "
	    "compactor builds them for every past day; queriers ask at "
	    "them, so give every querier and compactor the same list "
	    "(a different one changes speed, never an answer)."),
	SM_FLAG_STR("store-gateway.sharding-ring.members", gw_members,
	    "",
	    "The store-gateways, as \"id=tcp://host:port,...\" (each "
	    "one's -instance.id and -rpc.listen-address): they share "
	    "tenants by this ring, and queriers ask them for what the "
	    "bucket holds. Empty: no store-gateway (a querier reads "
	    "ingesters only; one store-gateway serves every tenant)."),
	SM_FLAG_STR("store-gateway.sharding-ring.store", gw_store,
	    "",
	    "Where the store-gateways are listed: \"\" (-store-gateway."
	    "sharding-ring.members) or etcd (-ring.etcd.endpoints: each "
	    "store-gateway registers itself under <-ring.etcd.prefix>"
	    "store-gateways/ and every component follows the keys, so "
	    "adding or removing one needs no restart)."),
	SM_FLAG_SWITCH("store-gateway.sharding-ring.unregister-on-shutdown",
	    gw_unregister, "false",
	    "With -store-gateway.sharding-ring.store=etcd: a store-gateway "
	    "deletes its key when it stops, so its tenants move to the "
	    "others (scale-in). Off: a restart keeps its key and tenants."),
	SM_FLAG_I64("store-gateway.sharding-ring.replication-factor",
	    SM_FLAG_INT, gw_rf,
	    "3",
	    "Store-gateways each tenant's blocks are loaded on: a query "
	    "needs one of them."),
	SM_FLAG_I64("store-gateway.sync-interval",
	    SM_FLAG_DURATION, gw_sync_ms,
	    "1m",
	    "How often a store-gateway reads the bucket for new, merged "
	    "and deleted blocks (keep it well below "
	    "-compactor.deletion-delay)."),
	SM_FLAG_STR("instance.zone", instance_zone,
	    "",
	    "An ingester's availability zone (e.g. the cloud zone or "
	    "rack): with at least as many zones as the replication "
	    "factor, every series' replicas are in distinct zones, so "
	    "losing a whole zone loses no write and no read. Empty: no "
	    "zone."),
	SM_FLAG_I64("shutdown-delay", SM_FLAG_DURATION, shutdown_delay_ms,
	    "0s",
	    "How long to wait between SIGTERM and shutdown: /ready answers "
	    "503 at once while requests are still served, so load "
	    "balancers and Kubernetes take the process out of rotation "
	    "before it closes its ports (a second signal ends the wait)."),
	SM_FLAG_I64("store-gateway.data-cache-bytes",
	    SM_FLAG_BYTES, gw_cache_bytes,
	    "256MiB",
	    "Memory a store-gateway keeps block data in: the data parts of "
	    "its blocks stay in the bucket and are read by ranged GET as "
	    "queries need them, the least recently used pages dropped past "
	    "this (the index, symbols and tree are on its disk)."),
	SM_FLAG_I64("store-gateway.data-page-bytes",
	    SM_FLAG_BYTES, gw_page_bytes,
	    "256KiB",
	    "The unit a store-gateway reads block data in (one GET per run "
	    "of missing pages) and caches; objects no larger are fetched "
	    "whole when loaded. At least 4KiB."),
	SM_FLAG_I64("store-gateway.sync-concurrency", SM_FLAG_INT, gw_workers,
	    "8",
	    "Blocks a store-gateway fetches from the bucket at once while "
	    "it loads them (1-64): a first sync of many blocks waits for "
	    "the slowest round trips, not their sum."),
	SM_FLAG_STR("ring.etcd.endpoints", ring_etcd_endpoints,
	    "",
	    "etcd endpoints (host:port,...) holding the ring's membership: "
	    "each ingester registers itself there, and distributors, "
	    "queriers and the compactor follow it (a watch), so adding or "
	    "removing an ingester needs no restart. Instead of "
	    "-ring.members and -ring.dns."),
	SM_FLAG_STR("ring.etcd.prefix", ring_etcd_prefix,
	    "smolder/",
	    "Key prefix of this cluster in etcd (members are under "
	    "<prefix>ingesters/<id>); clusters sharing an etcd use "
	    "distinct prefixes."),
	SM_FLAG_I64("ring.etcd.dial-timeout",
	    SM_FLAG_DURATION, ring_etcd_timeout_ms,
	    "5s",
	    "Bound on each etcd request (a watch waits longer)."),
	SM_FLAG_STR("ring.instance-addr", ring_instance_addr,
	    "",
	    "The RPC address (tcp://host:port) an ingester registers in "
	    "etcd for the others to reach it at. Empty: "
	    "-rpc.listen-address, with a wildcard host (0.0.0.0, ::) "
	    "replaced by this host's name."),
};
#undef SM_FLAG_STRUCT

static int
register_flags(struct app *app, struct sm_flags *fs, struct sm_err *err)
{
	int rv;

	if ((rv = sm_flags_add(fs, app_flag_tab, SM_ARRAY_LEN(app_flag_tab),
	    app, err)) != 0 ||
	    (rv = ing_flags_add(fs, &app->ing_cfg, err)) != 0 ||
	    (rv = sm_bucket_flags_add(fs, &app->bucket_cfg, err)) != 0 ||
	    (rv = dist_flags_add(fs, &app->dist_cfg, err)) != 0 ||
	    (rv = qry_flags_add(fs, &app->qry_cfg, err)) != 0)
		return (rv);
	return (cpt_flags_add(fs, &app->cpt_cfg, err));
}

static int
data_dir_lock(struct app *app, struct sm_err *err)
{
	char path[4096];

	if (sm_mkdir_p(app->data_dir) != 0)
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

/* Defaults that depend on other flags, after parsing. */
static void
app_settle(struct app *app, struct sm_flags *fs)
{
	if (*app->ring_etcd_endpoints != '\0' && (app->ring_etcd_members =
	    sm_malloc(strlen(app->ring_etcd_prefix) + 16)) != NULL)
		(void)sprintf(app->ring_etcd_members, "%singesters/",
		    app->ring_etcd_prefix);
	if (*app->ring_etcd_endpoints != '\0' && (app->gw_etcd_members =
	    sm_malloc(strlen(app->ring_etcd_prefix) + 16)) != NULL)
		(void)sprintf(app->gw_etcd_members, "%sstore-gateways/",
		    app->ring_etcd_prefix);
	if (app->instance_id[0] == '\0') {
		/* The flag set owns the parsed string; point elsewhere. */
		static char host[256];

		if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
			snprintf(host, sizeof(host), "smolder");
		app->instance_id = host;
	}
	if (!sm_flags_was_set(fs, "distributor.replication-factor") &&
	    strcmp(app->target, "all") == 0)
		app->replication_factor = 1;
}

/* Mutual TLS of the internal RPC and TLS to etcd, process-wide: before
 * any module dials or listens.  0, or SM_EINVAL with err. */
static int
clients_tls(struct app *app, struct sm_err *err)
{
	struct sm_etcd_tls_cfg et = { app->etcd_tls_on, app->etcd_tls_cert,
	    app->etcd_tls_key, app->etcd_tls_ca };

	if (app->rpc_tls_cert[0] != '\0' || app->rpc_tls_key[0] != '\0' ||
	    app->rpc_tls_ca[0] != '\0') {
		struct sm_rpc_tls_cfg rt = { app->rpc_tls_cert,
		    app->rpc_tls_key, app->rpc_tls_ca, app->rpc_tls_name };

		if (app->rpc_tls_cert[0] == '\0' ||
		    app->rpc_tls_key[0] == '\0' || app->rpc_tls_ca[0] == '\0')
			return (sm_err_set(err, SM_EINVAL, "-rpc.tls-cert-path, "
			    "-rpc.tls-key-path and -rpc.tls-ca-path go "
			    "together (mutual TLS)"));
		if (sm_rpc_tls_set(&rt, err) != 0)
			return (SM_EINVAL);
		sm_info("main", "internal RPC: mutual TLS on tcp:// "
		    "addresses\tserver_name=%s", app->rpc_tls_name);
	}
	return (sm_etcd_tls_set(&et, err));
}

/*
 * From the signal to the listeners' close: not ready from now on, the
 * shutdown delay, an ingester's leave, the bucket's cancel, and the HTTP
 * and gRPC drain.  The exit status: 1 when the ingester failed.
 */
static int
shutdown_begin(struct app *app, sigset_t *set, size_t started)
{
	int rc;

	/* Not ready from now on; requests are still served for the delay,
	 * so whatever routes by /ready stops sending before the ports
	 * close.  A second signal ends the wait. */
	atomic_store(&app->shutting_down, true);
	if (app->shutdown_delay_ms > 0) {
		ing_drain(app->ing);
		struct timespec ts = { app->shutdown_delay_ms / 1000,
		    (app->shutdown_delay_ms % 1000) * 1000000 };

		sm_info("main", "not ready; shutting down after the delay\t"
		    "shutdown_delay_ms=%lld", (long long)app->shutdown_delay_ms);
		(void)sigtimedwait(set, NULL, &ts);
	}
	rc = app->ing != NULL && ing_failed(app->ing) ? 1 : 0;
	/* An ingester with a bucket leaves before anything stops: its
	 * blocks go to the bucket and the store-gateways (ingester.h). */
	if (rc == 0 && app->ing != NULL && started == app->norder)
		ing_leave_on_shutdown(app->ing);
	/* One that left for good (POST /ingester/shutdown) leaves etcd
	 * too, so every ring drops it without a restart.  A leave at
	 * SIGTERM keeps the key: a restart rejoins as the same member, its
	 * missed writes owed to it as hints, as with -ring.members. */
	if (app->ring_reg != NULL && ing_retired(app->ing)) {
		struct sm_err lerr;

		sm_err_clear(&lerr);
		if (sm_ring_reg_leave(app->ring_reg, &lerr) != 0)
			sm_error("main", "left, but etcd still lists this "
			    "ingester: delete its key\terr=\"%s\"", lerr.msg);
	}
	/* A hung store must not hold the shutdown: uploads in flight end
	 * now and stay pending (bucket.h, sm_bucket_cancel). */
	sm_bucket_cancel(app->bucket);
	/* Drain first: no HTTP request may be in flight when the components
	 * behind it stop.  sm_http_stop() is idempotent; gRPC calls are
	 * HTTP requests underneath, so they stop before. */
	sm_grpc_stop(app->grpc);
	app->grpc = NULL;
	if (app->http != NULL)
		sm_http_stop(app->http);
	return (rc);
}

/* Free everything the modules made, in reverse dependency order. */
static void
app_free(struct app *app, int rc)
{
	scraper_free(app->scr);
	sm_free(app->scr_push_url);
	cpt_destroy(app->cpt);
	qry_destroy(app->qry);
	dist_destroy(app->dist);
	sm_ring_destroy(app->ring);
	ing_destroy(app->ing);
	sm_ring_destroy(app->gw_ring);
	sm_bucket_destroy(app->bucket);
	sm_http_destroy(app->http);
	sm_tls_destroy(app->tls);
	sm_overrides_destroy(app->overrides);
	sm_auth_destroy(app->auth);
	sm_rpc_tls_clear();
	sm_etcd_tls_clear();
	if (app->data_lock_fd >= 0)
		close(app->data_lock_fd);
	if (rc == 0)
		sm_info("main", "stopped");
	sm_free(app->ring_etcd_members);
	sm_free(app->gw_etcd_members);
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

	sm_mem_init();	/* before any thread: malloc policy (common/sm.h) */
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
	app.status.flags = &fs;
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
	if (sm_clock_skew_ms() != 0)
		sm_warn("main", "test clock: this process's wall clock is moved "
		    "by SMOLDER_TEST_CLOCK_SKEW_MS\tskew_ms=%lld",
		    (long long)sm_clock_skew_ms());
	app_settle(&app, &fs);
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

	/* A compactor that folds the bucket keeps a scratch store there. */
	if ((sm_modules_has(app.order, app.norder, "ingester") ||
	    sm_modules_has(app.order, app.norder, "store-gateway") ||
	    (sm_modules_has(app.order, app.norder, "compactor") &&
	    (app.gw_members[0] != '\0' || strcmp(app.gw_store,
	    "etcd") == 0))) &&
	    data_dir_lock(&app, &err) != 0) {
		sm_error("main", "%s", err.msg);
		goto out;
	}
	if (clients_tls(&app, &err) != 0) {
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
	rc = shutdown_begin(&app, &set, started);
stop:
	while (started > 0) {
		started--;
		sm_info("main", "stopping\tmodule=%s",
		    app.order[started]->name);
		app.order[started]->stop(&app);
	}
out:
	app_free(&app, rc);
out_flags:
	sm_flags_fini(&fs);
	return (rc);
}
