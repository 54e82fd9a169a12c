/*
 * scraper.c -- see scraper.h.
 */
#include "scraper.h"

#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/random.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"
#include "common/buf.h"
#include "common/gz.h"
#include "common/hash.h"
#include "common/httpc.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/peers.h"
#include "common/watch.h"
#include "push/v1/push.pb-c.h"

#include "delta.h"
#include "scr_int.h"

#define SCR_CPU_MAX_SECONDS 60
#define SCR_ERR_LEN 256

struct scr_pstate {
	int64_t next_ms;         /* monotonic */
	bool running;
	int delta_ep;            /* 0 unknown, 1 delta_path served, -1 not */
	struct scr_delta delta;
	int64_t last_ms;         /* unix ms of the last scrape's start */
	int64_t last_dur_ms;
	int health;              /* 0 unknown, 1 up, -1 down */
	char err[SCR_ERR_LEN];
	uint64_t scrapes, failures, skipped;
};

struct scr_target {
	char *id;                /* job, address and labels: identity */
	char *job;
	char *address;
	char *url;               /* scheme://address */
	struct sm_label *labels; /* final, sorted by name; heap */
	uint32_t nlabels;
	const struct scr_job *jc;   /* in s->conf; under mu */
	/* per-target profile settings (__profile_path_<name> and
	 * __profile_enabled_<name> labels: Kubernetes annotations) */
	char *path[SCR_NKINDS];     /* NULL: the job's */
	bool off[SCR_NKINDS];
	struct scr_pstate p[SCR_NKINDS];
	uint32_t running;
	bool seen, dead;
	bool owned;              /* by this scraper, at the last look */
};

/* What one scrape needs, copied at dispatch (the config may change). */
struct scr_task {
	struct scr_target *t;
	int kind;
	char *url, *delta_url;
	char *bearer, *ca_file, *tenant, *job;
	bool insecure;
	int64_t timeout_ms, interval_ms;
	struct sm_label *labels;
	uint32_t nlabels;
	int delta_ep;
	struct scr_task *next;
};

struct scraper {
	struct scraper_cfg cfg;
	char *config_file, *push_url;
	char *push_key;              /* the API key; NULL none */
	struct sm_http *http;
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_sched;
	struct scr_config *conf;
	bool rediscover;
	int64_t next_discovery_ms;
	struct scr_target **t;
	uint32_t nt, capt;
	struct scr_task *qhead, *qtail;
	uint64_t state_bytes;
	bool stopping, started;
	pthread_t sched;
	pthread_t *workers;
	uint32_t nworkers;
	struct sm_watch *watch;
	struct sm_peers *peers;      /* NULL: no -scraper.peers */
	char id[SM_PEER_ID_LEN + 1];
	char (*ids)[SM_PEER_ID_LEN + 1];   /* healthy scrapers, sched's */
	uint32_t nids;
};

#define SCR_MAX_PEERS 256

static struct sm_metric *m_targets, *m_scrapes, *m_uploads, *m_state;

static const struct sm_metric_def metric_defs[] = {
	{ &m_targets, SM_METRIC_GAUGE, "smolder_scraper_targets",
	    "Targets the scraper scrapes, per job.", SM_METRIC_LABELS("job"),
	    NULL, 0 },
	{ &m_scrapes, SM_METRIC_COUNTER, "smolder_scraper_scrapes_total",
	    "Scrapes by job, profile and result (ok, primed: a first or "
	    "re-based cumulative profile, nothing stored; failed; skipped: "
	    "the previous still ran).",
	    SM_METRIC_LABELS("job", "profile", "result"), NULL, 0 },
	{ &m_uploads, SM_METRIC_COUNTER, "smolder_scraper_uploads_total",
	    "Uploads of scraped profiles to the distributor, by result.",
	    SM_METRIC_LABELS("result"), NULL, 0 },
	{ &m_state, SM_METRIC_GAUGE, "smolder_scraper_delta_state_bytes",
	    "Bytes of delta state the scraper keeps for its targets' "
	    "cumulative profiles.", NULL, NULL, 0 },
};

static struct sm_metric_set metric_set = SM_METRIC_SET(metric_defs);

static int64_t
mono_ms(void)
{
	return (sm_mono_ns() / 1000000);
}

/* --- targets -------------------------------------------------------------- */

static void
target_free(struct scr_target *t)
{
	if (t == NULL)
		return;
	for (int k = 0; k < SCR_NKINDS; k++) {
		scr_delta_fini(&t->p[k].delta);
		sm_free(t->path[k]);
	}
	for (uint32_t i = 0; i < t->nlabels; i++) {
		sm_free((char *)t->labels[i].name);
		sm_free((char *)t->labels[i].value);
	}
	sm_free(t->labels);
	sm_free(t->id);
	sm_free(t->job);
	sm_free(t->address);
	sm_free(t->url);
	sm_free(t);
}

/* A target gone from discovery: its state leaves the count.  Under mu,
 * no scrape of it running. */
static void
target_release(struct scraper *s, struct scr_target *t)
{
	for (int k = 0; k < SCR_NKINDS; k++)
		s->state_bytes -= SM_MIN(s->state_bytes,
		    (uint64_t)scr_delta_bytes(&t->p[k].delta));
	target_free(t);
}

/* A discovered target's final labels and identity, or *out NULL when
 * relabeling dropped it. */
static int
target_make(const struct scr_job *j, const char *addr,
    const struct sm_label *gl, uint32_t ngl, const char *source,
    struct scr_target **out, struct sm_err *err)
{
	struct scr_labels ls = { NULL, 0, 0 };
	struct scr_target *t = NULL;
	struct sm_buf id = SM_BUF_INIT, url = SM_BUF_INIT;
	bool keep;
	uint32_t w = 0;
	int rv;

	*out = NULL;
	for (uint32_t i = 0; i < ngl; i++)
		if ((rv = scr_labels_set(&ls, gl[i].name, gl[i].value)) != 0)
			goto nomem;
	if (scr_labels_set(&ls, "job", j->name) != 0 ||
	    scr_labels_set(&ls, "__address__", addr) != 0 ||
	    scr_labels_set(&ls, "__scheme__", j->scheme) != 0 ||
	    (source != NULL && scr_labels_set(&ls, "__meta_filepath",
	    source) != 0))
		goto nomem;
	if ((rv = scr_relabel(j, &ls, &keep, err)) != 0) {
		scr_labels_free(&ls);
		return (rv);
	}
	if (!keep) {
		scr_labels_free(&ls);
		return (0);
	}
	if ((t = sm_calloc(1, sizeof(*t))) == NULL)
		goto nomem;
	addr = scr_labels_get(&ls, "__address__");
	if (addr == NULL || addr[0] == '\0') {
		scr_labels_free(&ls);
		sm_free(t);
		return (0);         /* relabeled away: nothing to scrape */
	}
	sm_buf_printf(&url, "%s://%s", scr_labels_get(&ls, "__scheme__") !=
	    NULL ? scr_labels_get(&ls, "__scheme__") : j->scheme, addr);
	if ((t->address = sm_strdup(addr)) == NULL)
		goto nomem;
	if (scr_labels_get(&ls, "instance") == NULL &&
	    scr_labels_set(&ls, "instance", addr) != 0)
		goto nomem;
	if (scr_labels_get(&ls, "service_name") == NULL &&
	    scr_labels_set(&ls, "service_name", j->name) != 0)
		goto nomem;
	/* per-target profile settings, then the "__" labels go: they were
	 * for relabeling only */
	for (int k = 0; k < SCR_NKINDS; k++) {
		char nm[64];
		const char *v;

		(void)snprintf(nm, sizeof(nm), "__profile_path_%s",
		    scr_kind_name[k]);
		if ((v = scr_labels_get(&ls, nm)) != NULL && v[0] == '/') {
			if ((t->path[k] = sm_strdup(v)) == NULL)
				goto nomem;
		}
		(void)snprintf(nm, sizeof(nm), "__profile_enabled_%s",
		    scr_kind_name[k]);
		if ((v = scr_labels_get(&ls, nm)) != NULL &&
		    strcmp(v, "false") == 0)
			t->off[k] = true;
	}
	for (uint32_t i = 0; i < ls.n; i++) {
		if (strncmp(ls.v[i].name, "__", 2) == 0) {
			sm_free((char *)ls.v[i].name);
			sm_free((char *)ls.v[i].value);
			continue;
		}
		ls.v[w++] = ls.v[i];
	}
	ls.n = w;
	sm_labels_sort(ls.v, ls.n);
	sm_buf_printf(&id, "%s\x1f%s", j->name, t->address);
	for (uint32_t i = 0; i < ls.n; i++)
		sm_buf_printf(&id, "\x1f%s=%s", ls.v[i].name, ls.v[i].value);
	for (int k = 0; k < SCR_NKINDS; k++)
		sm_buf_printf(&id, "\x1f%s%s%s", t->path[k] != NULL ?
		    t->path[k] : "", t->off[k] ? " off" : "",
		    scr_kind_name[k]);
	if (sm_buf_error(&id) != 0 || sm_buf_error(&url) != 0)
		goto nomem;
	t->id = sm_buf_take(&id, NULL);
	t->url = sm_buf_take(&url, NULL);
	t->labels = ls.v;
	t->nlabels = ls.n;
	if ((t->job = sm_strdup(j->name)) == NULL)
		goto nomem2;
	t->jc = j;
	*out = t;
	return (0);
nomem:
	scr_labels_free(&ls);
nomem2:
	sm_buf_fini(&id);
	sm_buf_fini(&url);
	target_free(t);
	return (sm_err_set(err, SM_ENOMEM, "out of memory"));
}

static int
target_id_cmp(const void *a, const void *b)
{
	return (strcmp((*(struct scr_target *const *)a)->id,
	    (*(struct scr_target *const *)b)->id));
}

/* The target with `id` in the sorted table, or NULL. */
static struct scr_target *
target_find(struct scraper *s, const char *id)
{
	struct scr_target k = { .id = (char *)id }, *kp = &k, **hit;

	if (s->nt == 0)
		return (NULL);
	hit = bsearch(&kp, s->t, s->nt, sizeof(*s->t), target_id_cmp);
	return (hit != NULL ? *hit : NULL);
}

/*
 * A target's next scrapes, strictly after `now` (monotonic ms): at its
 * slots, which are aligned to the wall clock at the target's phase
 * within the interval, so every scraper computes the same ones.
 */
static void
target_schedule(struct scr_target *t, int64_t now)
{
	uint64_t h = sm_hash(t->id, strlen(t->id));
	int64_t iv = t->jc->interval_ms, unow = sm_now_ms();

	for (int k = 0; k < SCR_NKINDS; k++) {
		int64_t phase = (int64_t)((h + (uint64_t)k * 7919) %
		    (uint64_t)iv);
		int64_t slot = sm_floor_to(unow - phase, iv) + phase + iv;

		t->p[k].next_ms = now + (slot - unow);
	}
}

/* The owner of target t among the healthy scrapers: the highest hash of
 * (scraper id, target id). */
static bool
owns(const struct scraper *s, const struct scr_target *t)
{
	uint64_t th, best = 0;
	uint32_t bi = 0;

	if (s->peers == NULL || s->nids <= 1)
		return (true);
	th = sm_hash(t->id, strlen(t->id));
	for (uint32_t i = 0; i < s->nids; i++) {
		uint64_t h = sm_hash_seed(s->ids[i], strlen(s->ids[i]), th);

		if (i == 0 || h > best) {
			best = h;
			bi = i;
		}
	}
	return (strcmp(s->ids[bi], s->id) == 0);
}

/* Discovered targets, before they meet the table. */
struct scr_cands {
	struct scr_target **v;
	uint32_t n, cap;
	int64_t refresh_ms;      /* the shortest refresh of any discovery */
};

static void
cands_free(struct scr_cands *c)
{
	for (uint32_t i = 0; i < c->n; i++)
		target_free(c->v[i]);
	sm_free(c->v);
	memset(c, 0, sizeof(*c));
}

static int
cands_add(struct scr_cands *c, struct scr_target *nt)
{
	for (uint32_t i = 0; i < c->n; i++) {
		if (strcmp(c->v[i]->id, nt->id) == 0) {
			target_free(nt);     /* listed twice */
			return (0);
		}
	}
	if (SM_GROW(c->v, c->cap, (size_t)c->n + 1, 16) != 0) {
		target_free(nt);
		return (SM_ENOMEM);
	}
	c->v[c->n++] = nt;
	return (0);
}

static int
cands_groups(struct scr_cands *c, const struct scr_job *j,
    const struct scr_group *g, uint32_t ng, const char *source)
{
	struct sm_err err;
	int rv;

	for (uint32_t i = 0; i < ng; i++) {
		for (uint32_t k = 0; k < g[i].ntargets; k++) {
			struct scr_target *nt;

			if ((rv = target_make(j, g[i].targets[k], g[i].labels,
			    g[i].nlabels, source, &nt, &err)) != 0) {
				sm_warn("scraper", "target dropped\tjob=%s "
				    "target=%s err=\"%s\"", j->name,
				    g[i].targets[k], err.msg);
				continue;
			}
			if (nt != NULL && (rv = cands_add(c, nt)) != 0)
				return (rv);
		}
	}
	return (0);
}

/*
 * One discovery's answer into c: when its resolver succeeded (`found`
 * is 0) the targets of its groups g[0..ng), which are freed here; when
 * it failed a warning and nothing, so one failed discovery keeps the
 * rest of the job's targets.
 */
static int
cands_found(struct scr_cands *c, const struct scr_job *j, const char *what,
    int found, struct scr_group *g, uint32_t ng, const char *source,
    const struct sm_err *err)
{
	int rv;

	if (found != 0) {
		sm_warn("scraper", "%s discovery\tjob=%s err=\"%s\"", what,
		    j->name, err->msg);
		return (0);
	}
	rv = cands_groups(c, j, g, ng, source);
	scr_groups_free(g, ng);
	return (rv);
}

/*
 * Every target of `conf` (static, file and DNS discovery), read with no
 * lock held: files and DNS answers take their time, and scrapes and the
 * API must not wait for them.  `conf` stays alive by its reference.
 */
static int
gather(const struct scr_config *conf, struct scr_cands *c)
{
	struct scr_group *g;
	struct sm_err err;
	uint32_t ng;
	int rv, found;

	c->refresh_ms = INT64_MAX;
	for (uint32_t j = 0; j < conf->njobs; j++) {
		const struct scr_job *jc = &conf->jobs[j];

		if ((rv = cands_groups(c, jc, jc->groups, jc->ngroups,
		    NULL)) != 0)
			return (rv);
		for (uint32_t f = 0; f < jc->nfsd; f++) {
			c->refresh_ms = SM_MIN(c->refresh_ms,
			    jc->fsd[f].refresh_ms);
			for (uint32_t p = 0; p < jc->fsd[f].nfiles; p++) {
				glob_t gl;

				if (glob(jc->fsd[f].files[p], 0, NULL,
				    &gl) != 0)
					continue;
				for (size_t q = 0; q < gl.gl_pathc; q++) {
					found = scr_filesd_read(gl.gl_pathv[q],
					    &g, &ng, &err);
					if ((rv = cands_found(c, jc, "file",
					    found, g, ng, gl.gl_pathv[q],
					    &err)) != 0) {
						globfree(&gl);
						return (rv);
					}
				}
				globfree(&gl);
			}
		}
		for (uint32_t d = 0; d < jc->nk8s; d++) {
			c->refresh_ms = SM_MIN(c->refresh_ms,
			    jc->k8s[d].refresh_ms);
			found = scr_k8s_resolve(&jc->k8s[d], &g, &ng, &err);
			if ((rv = cands_found(c, jc, "Kubernetes", found, g, ng,
			    NULL, &err)) != 0)
				return (rv);
		}
		for (uint32_t d = 0; d < jc->ndns; d++) {
			c->refresh_ms = SM_MIN(c->refresh_ms,
			    jc->dns[d].refresh_ms);
			found = scr_dns_resolve(&jc->dns[d], &g, &ng, &err);
			if ((rv = cands_found(c, jc, "DNS", found, g, ng, NULL,
			    &err)) != 0)
				return (rv);
		}
	}
	return (0);
}

static void
conf_unref(struct scr_config *c)
{
	if (c != NULL && --c->refs == 0)
		scr_config_free(c);
}

/*
 * The gathered targets against the table, under mu, when `conf` is still
 * the configuration (a reload in between brings its own): kept targets
 * keep their state and point into conf, new ones are scheduled, gone ones
 * are dropped (or, while a scrape of theirs runs, marked dead and freed
 * when it ends).  Takes the candidates.
 */
static void
apply(struct scraper *s, const struct scr_config *conf,
    struct scr_cands *c, int64_t now)
{
	uint32_t w = 0, nadd = 0;

	if (conf != s->conf) {
		cands_free(c);
		return;
	}
	for (uint32_t i = 0; i < s->nt; i++)
		s->t[i]->seen = false;
	for (uint32_t i = 0; i < c->n; i++) {
		struct scr_target *old = target_find(s, c->v[i]->id);

		if (old != NULL) {
			old->seen = true;
			old->jc = c->v[i]->jc;
			target_free(c->v[i]);
			continue;
		}
		c->v[nadd++] = c->v[i];
	}
	c->n = nadd;
	for (uint32_t i = 0; i < s->nt; i++) {
		struct scr_target *t = s->t[i];

		if (t->seen) {
			s->t[w++] = t;
			continue;
		}
		if (t->running > 0) {
			t->dead = true;  /* the last scrape frees it */
			continue;
		}
		target_release(s, t);
	}
	s->nt = w;
	if (SM_GROW(s->t, s->capt, (size_t)s->nt + nadd, 16) != 0) {
		cands_free(c);
		sm_warn("scraper", "discovery: out of memory");
		s->next_discovery_ms = now + 1000;
		return;
	}
	for (uint32_t i = 0; i < nadd; i++) {
		c->v[i]->seen = true;
		c->v[i]->owned = false;  /* the scheduler schedules what it
					  * owns */
		s->t[s->nt++] = c->v[i];
	}
	c->n = 0;
	if (s->nt > 1)
		qsort(s->t, s->nt, sizeof(*s->t), target_id_cmp);
	sm_metrics_register_once(&metric_set);
	for (uint32_t j = 0; j < conf->njobs; j++) {
		uint32_t n = 0;

		for (uint32_t i = 0; i < s->nt; i++)
			n += strcmp(s->t[i]->job, conf->jobs[j].name) == 0;
		sm_gauge_set(sm_metric_child(m_targets, conf->jobs[j].name),
		    n);
	}
	sm_gauge_set(sm_metric_child0(m_state), (double)s->state_bytes);
	s->next_discovery_ms = c->refresh_ms == INT64_MAX ? INT64_MAX :
	    now + c->refresh_ms;
	cands_free(c);
}

/* Discovery for the current configuration: gather with no lock, then
 * apply.  Called and returns with mu held. */
static void
discover(struct scraper *s)
{
	struct scr_config *conf = s->conf;
	struct scr_cands c = { NULL, 0, 0, INT64_MAX };
	int rv;

	if (conf == NULL)
		return;
	conf->refs++;
	pthread_mutex_unlock(&s->mu);
	rv = gather(conf, &c);
	pthread_mutex_lock(&s->mu);
	if (rv != 0) {
		cands_free(&c);
		sm_warn("scraper", "discovery: out of memory");
		s->next_discovery_ms = mono_ms() + 1000;
	} else {
		apply(s, conf, &c, mono_ms());
	}
	conf_unref(conf);
}

/* --- configuration -------------------------------------------------------- */

static int
config_load(void *arg, const char *path, struct sm_err *err)
{
	struct scraper *s = arg;
	struct scr_config *c, *old;
	int rv;

	if ((rv = scr_config_load(path, &c, err)) != 0)
		return (rv);
	pthread_mutex_lock(&s->mu);
	old = s->conf;
	c->refs = 1;
	s->conf = c;
	/* every target now points into the new config (or goes) before the
	 * old one can go */
	discover(s);
	conf_unref(old);
	pthread_cond_signal(&s->cv_sched);
	pthread_mutex_unlock(&s->mu);
	sm_info("scraper", "configuration loaded\tfile=%s jobs=%" PRIu32,
	    path, c->njobs);
	return (0);
}

/* --- one scrape ----------------------------------------------------------- */

static void
task_free(struct scr_task *k)
{
	if (k == NULL)
		return;
	sm_free(k->url);
	sm_free(k->delta_url);
	scr_free_secret(k->bearer);
	sm_free(k->ca_file);
	sm_free(k->tenant);
	sm_free(k->job);
	for (uint32_t i = 0; i < k->nlabels; i++) {
		sm_free((char *)k->labels[i].name);
		sm_free((char *)k->labels[i].value);
	}
	sm_free(k->labels);
	sm_free(k);
}

static char *
opt_dup(const char *s)
{
	return (s != NULL ? sm_strdup(s) : NULL);
}

/* The task of (t, kind), copied from the config; NULL when out of
 * memory. */
static struct scr_task *
task_make(struct scr_target *t, int kind)
{
	const struct scr_job *j = t->jc;
	const struct scr_pconf *pc = &j->prof[kind];
	struct scr_task *k = sm_calloc(1, sizeof(*k));
	struct sm_buf u = SM_BUF_INIT;
	bool fail = k == NULL;

	if (fail)
		return (NULL);
	k->t = t;
	k->kind = kind;
	k->interval_ms = j->interval_ms;
	k->timeout_ms = j->timeout_ms;
	sm_buf_printf(&u, "%s%s", t->url, t->path[kind] != NULL ?
	    t->path[kind] : pc->path);
	if (kind == SCR_CPU) {
		int64_t secs = SM_MIN(SM_MAX(j->interval_ms / 1000 - 1, 1),
		    SCR_CPU_MAX_SECONDS);

		sm_buf_printf(&u, "%sseconds=%" PRId64, strchr(t->path[kind] !=
		    NULL ? t->path[kind] : pc->path, '?') != NULL ? "&" : "?",
		    secs);
		k->timeout_ms = secs * 1000 + j->timeout_ms;
	}
	k->url = sm_buf_take(&u, NULL);
	if (pc->delta_path != NULL && t->path[kind] == NULL &&
	    t->p[kind].delta_ep >= 0) {
		sm_buf_printf(&u, "%s%s", t->url, pc->delta_path);
		k->delta_url = sm_buf_take(&u, NULL);
		fail |= k->delta_url == NULL;
	}
	k->delta_ep = t->p[kind].delta_ep;
	k->bearer = opt_dup(j->bearer);
	k->ca_file = opt_dup(j->ca_file);
	k->tenant = opt_dup(j->tenant);
	k->insecure = j->insecure;
	k->job = sm_strdup(j->name);
	fail |= k->url == NULL || k->job == NULL ||
	    (j->bearer != NULL && k->bearer == NULL) ||
	    (j->ca_file != NULL && k->ca_file == NULL) ||
	    (j->tenant != NULL && k->tenant == NULL);
	if (!fail && (k->labels = sm_calloc(t->nlabels + 1,
	    sizeof(*k->labels))) == NULL)
		fail = true;
	for (uint32_t i = 0; !fail && i < t->nlabels; i++) {
		k->labels[i].name = sm_strdup(t->labels[i].name);
		k->labels[i].value = sm_strdup(t->labels[i].value);
		k->nlabels++;
		fail |= k->labels[i].name == NULL || k->labels[i].value == NULL;
	}
	if (fail) {
		task_free(k);
		return (NULL);
	}
	return (k);
}

/* GET url into body (inflated when gzip). */
static int
fetch(const struct scr_task *k, const struct scraper *s, const char *url,
    int *status, struct sm_buf *body, struct sm_arena *a, uint8_t **raw,
    size_t *rawlen, struct sm_err *err)
{
	char auth[4200];
	const char *hdr[2] = { NULL, NULL };
	struct sm_httpc_req rq = { 0 };
	int rv;

	if (k->bearer != NULL) {
		(void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
		    k->bearer);
		hdr[0] = auth;
	}
	rq.url = url;
	rq.headers = hdr;
	rq.timeout_ms = k->timeout_ms;
	rq.ca_file = k->ca_file;
	rq.insecure = k->insecure;
	rq.max_answer = (size_t)s->cfg.max_profile_bytes;
	sm_buf_reset(body);
	rv = sm_httpc_get(&rq, status, body, err);
	if (hdr[0] != NULL)
		explicit_bzero(auth, sizeof(auth));   /* the target's token */
	if (rv != 0)
		return (rv);
	if (*status != 200)
		return (0);
	*raw = (uint8_t *)body->b;
	*rawlen = body->len;
	if (*rawlen > 0 && sm_is_gzip(*raw, *rawlen) &&
	    (rv = sm_gunzip(*raw, *rawlen, (size_t)s->cfg.max_profile_bytes,
	    a, raw, rawlen, err)) != 0)
		return (rv);
	return (0);
}

static void
uuid_of(uint64_t a, uint64_t b, char out[37])
{
	uint8_t id[16];

	memcpy(id, &a, 8);
	memcpy(id + 8, &b, 8);
	id[6] = (uint8_t)((id[6] & 0x0f) | 0x40);    /* version 4 shape */
	id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
	sm_uuid_format(id, out);
}

/* A Push of the profile; one retry on a transport error or 5xx. */
static int
upload(const struct scraper *s, const struct scr_task *k, const uint8_t *prof,
    size_t len, int64_t start_ms, struct sm_err *err)
{
	Push__V1__PushRequest rq = PUSH__V1__PUSH_REQUEST__INIT;
	Push__V1__RawProfileSeries rs = PUSH__V1__RAW_PROFILE_SERIES__INIT,
	    *rsp = &rs;
	Push__V1__RawSample smp = PUSH__V1__RAW_SAMPLE__INIT, *smpp = &smp;
	Types__V1__LabelPair *lp = NULL, **lpp = NULL;
	struct sm_httpc_req hr = { 0 };
	struct sm_buf url = SM_BUF_INIT, ans = SM_BUF_INIT;
	char id[37], org[300], auth[4200];
	const char *hdr[4] = { "Content-Type: application/proto", NULL, NULL,
	    NULL };
	size_t nh = 1;
	uint8_t *body = NULL;
	uint64_t h;
	size_t n;
	int status = 0, rv = 0;

	if ((lp = sm_calloc(k->nlabels + 1, sizeof(*lp))) == NULL ||
	    (lpp = sm_calloc(k->nlabels + 1, sizeof(*lpp))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < k->nlabels; i++) {
		types__v1__label_pair__init(&lp[i]);
		lp[i].name = (char *)k->labels[i].name;
		lp[i].value = (char *)k->labels[i].value;
		lpp[i] = &lp[i];
	}
	types__v1__label_pair__init(&lp[k->nlabels]);
	lp[k->nlabels].name = (char *)"__name__";
	lp[k->nlabels].value = (char *)scr_kind_metric[k->kind];
	lpp[k->nlabels] = &lp[k->nlabels];
	h = sm_hash(k->t->id, strlen(k->t->id));
	uuid_of(h ^ (uint64_t)k->kind, sm_hash_u64((uint64_t)start_ms ^ h),
	    id);
	smp.raw_profile.data = (uint8_t *)prof;
	smp.raw_profile.len = len;
	smp.id = id;
	rs.labels = lpp;
	rs.n_labels = k->nlabels + 1;
	rs.samples = &smpp;
	rs.n_samples = 1;
	rq.series = &rsp;
	rq.n_series = 1;
	n = push__v1__push_request__get_packed_size(&rq);
	if ((body = sm_malloc(SM_MAX(n, 1))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	(void)push__v1__push_request__pack(&rq, body);
	if (k->tenant != NULL) {
		(void)snprintf(org, sizeof(org), "X-Scope-OrgID: %s",
		    k->tenant);
		hdr[nh++] = org;
	}
	if (s->push_key != NULL) {
		(void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
		    s->push_key);
		hdr[nh++] = auth;
	}
	sm_buf_printf(&url, "%s/push.v1.PusherService/Push", s->push_url);
	hr.url = url.b;
	hr.headers = hdr;
	hr.body = body;
	hr.len = n;
	hr.timeout_ms = 30000;
	for (int attempt = 0; attempt < 2; attempt++) {
		sm_buf_reset(&ans);
		rv = sm_httpc_post(&hr, &status, &ans, err);
		if (rv == 0 && status == 200)
			break;
		if (rv == 0 && status < 500) {
			rv = sm_err_set(err, SM_EINVAL, "upload refused: HTTP "
			    "%d %.200s", status, ans.b != NULL ? ans.b : "");
			break;
		}
		if (rv == 0)
			rv = sm_err_set(err, SM_EUNAVAIL, "upload: HTTP %d "
			    "%.200s", status, ans.b != NULL ? ans.b : "");
	}
out:
	explicit_bzero(auth, sizeof(auth));   /* the push key */
	sm_free(lp);
	sm_free(lpp);
	sm_free(body);
	sm_buf_fini(&url);
	sm_buf_fini(&ans);
	sm_metrics_register_once(&metric_set);
	sm_counter_inc(sm_metric_child(m_uploads, rv == 0 ? "ok" : "failed"));
	return (rv);
}

/*
 * Run one scrape (no lock held: the (target, kind) state is this task's
 * while t->p[kind].running).  The result in *res ("ok", "primed",
 * "failed") and err.
 */
static int
scrape(struct scraper *s, struct scr_task *k, int64_t start_ms,
    int64_t *state_diff, const char **res, struct sm_err *err)
{
	struct scr_pstate *ps = &k->t->p[k->kind];
	struct sm_arena *a = sm_arena_create(0);
	struct sm_buf body = SM_BUF_INIT, out = SM_BUF_INIT;
	enum scr_delta_out what = SCR_DELTA_PASS;
	struct scr_delta saved;
	uint8_t *raw = NULL;
	size_t rawlen = 0, before = 0;
	bool rebased = false, from_delta = false;
	int status = 0, rv = 0;

	*res = "failed";
	*state_diff = 0;
	scr_delta_init(&saved);
	if (a == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (k->delta_url != NULL) {
		rv = fetch(k, s, k->delta_url, &status, &body, a, &raw,
		    &rawlen, err);
		if (rv == 0 && status == 200) {
			from_delta = true;
			k->delta_ep = 1;
		} else if (rv == 0 && status == 404) {
			k->delta_ep = -1;  /* no godeltaprof: the cumulative */
		} else if (rv == 0) {
			rv = sm_err_set(err, SM_EUNAVAIL, "%s: HTTP %d",
			    k->delta_url, status);
			goto out;
		} else {
			goto out;
		}
	}
	if (!from_delta) {
		if ((rv = fetch(k, s, k->url, &status, &body, a, &raw, &rawlen,
		    err)) != 0)
			goto out;
		if (status != 200) {
			rv = sm_err_set(err, SM_EUNAVAIL, "%s: HTTP %d", k->url,
			    status);
			goto out;
		}
	}
	if (from_delta) {
		sm_buf_append(&out, raw, rawlen);
	} else {
		before = scr_delta_bytes(&ps->delta);
		/* kept until the upload is in: a failed upload puts the state
		 * back, so the next delta covers both intervals */
		if (scr_delta_copy(&saved, &ps->delta) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		rv = scr_delta_apply(&ps->delta, raw, rawlen,
		    start_ms * 1000000, &what, &rebased, &out, err);
		*state_diff = (int64_t)scr_delta_bytes(&ps->delta) -
		    (int64_t)before;
		if (rv != 0)
			goto out;
		if (rebased)
			sm_info("scraper", "counters fell: re-based\tjob=%s "
			    "target=%s profile=%s", k->job, k->t->address,
			    scr_kind_name[k->kind]);
		if (what == SCR_DELTA_PRIMED) {
			*res = "primed";
			goto out;
		}
	}
	if (sm_buf_error(&out) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if ((rv = upload(s, k, (const uint8_t *)out.b, out.len, start_ms,
	    err)) != 0) {
		if (what == SCR_DELTA_EMIT && scr_delta_copy(&ps->delta,
		    &saved) == 0)
			*state_diff = (int64_t)scr_delta_bytes(&ps->delta) -
			    (int64_t)before;
		else if (what == SCR_DELTA_EMIT)
			*state_diff = -(int64_t)before;   /* reset: primes */
		goto out;
	}
	*res = "ok";
out:
	scr_delta_fini(&saved);
	sm_buf_fini(&body);
	sm_buf_fini(&out);
	sm_arena_destroy(a);
	return (rv);
}

/* --- threads -------------------------------------------------------------- */

static void *
worker_main(void *arg)
{
	struct scraper *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct scr_task *k;
		struct scr_target *t;
		struct scr_pstate *ps;
		const char *res = "failed";
		struct sm_err err;
		int64_t start_ms, t0, diff = 0;
		int rv;

		while (!s->stopping && s->qhead == NULL)
			pthread_cond_wait(&s->cv_work, &s->mu);
		if (s->qhead == NULL)
			break;          /* stopping, nothing left */
		k = s->qhead;
		s->qhead = k->next;
		if (s->qhead == NULL)
			s->qtail = NULL;
		pthread_mutex_unlock(&s->mu);

		sm_err_clear(&err);
		start_ms = sm_now_ms();
		t0 = mono_ms();
		rv = s->stopping ? sm_err_set(&err, SM_EUNAVAIL, "stopping") :
		    scrape(s, k, start_ms, &diff, &res, &err);
		if (s->stopping)
			res = "failed", diff = 0;

		pthread_mutex_lock(&s->mu);
		t = k->t;
		ps = &t->p[k->kind];
		ps->delta_ep = k->delta_ep;
		ps->last_ms = start_ms;
		ps->last_dur_ms = mono_ms() - t0;
		ps->scrapes++;
		s->state_bytes = (uint64_t)((int64_t)s->state_bytes + diff);
		if (!t->dead && rv == 0 && s->cfg.max_state_bytes > 0 &&
		    s->state_bytes > (uint64_t)s->cfg.max_state_bytes) {
			s->state_bytes -= scr_delta_bytes(&ps->delta);
			scr_delta_reset(&ps->delta);
			rv = sm_err_set(&err, SM_ELIMIT, "delta state over "
			    "-scraper.max-delta-state-bytes (%" PRId64 "): "
			    "this profile's state was dropped",
			    s->cfg.max_state_bytes);
			res = "failed";
		}
		ps->health = rv == 0 ? 1 : -1;
		if (rv != 0) {
			ps->failures++;
			(void)snprintf(ps->err, sizeof(ps->err), "%.*s",
			    (int)sizeof(ps->err) - 1, err.msg);
		} else {
			ps->err[0] = '\0';
		}
		sm_metrics_register_once(&metric_set);
		sm_counter_inc(sm_metric_child(m_scrapes, k->job,
		    scr_kind_name[k->kind], res));
		sm_gauge_set(sm_metric_child0(m_state), (double)s->state_bytes);
		ps->running = false;
		if (--t->running == 0 && t->dead)
			target_release(s, t);
		task_free(k);
	}
	pthread_mutex_unlock(&s->mu);
	return (NULL);
}

static void *
sched_main(void *arg)
{
	struct scraper *s = arg;

	pthread_mutex_lock(&s->mu);
	while (!s->stopping) {
		int64_t now = mono_ms(), next = now + 1000;

		if (s->rediscover || now >= s->next_discovery_ms) {
			s->rediscover = false;
			s->next_discovery_ms = INT64_MAX;
			discover(s);
			if (s->stopping)
				break;
			now = mono_ms();
			next = now + 1000;
		}
		next = SM_MIN(next, s->next_discovery_ms);
		if (s->peers != NULL)
			s->nids = sm_peers_ids(s->peers, s->id, s->ids,
			    SCR_MAX_PEERS);
		for (uint32_t i = 0; i < s->nt; i++) {
			struct scr_target *t = s->t[i];
			bool own = owns(s, t);

			/* gained: from the next slot on (the one under way
			 * may be its previous owner's) */
			if (own && !t->owned)
				target_schedule(t, now);
			t->owned = own;
			if (!own)
				continue;

			for (int kd = 0; kd < SCR_NKINDS; kd++) {
				struct scr_pstate *ps = &t->p[kd];
				struct scr_task *k;
				int64_t iv = t->jc->interval_ms;

				if (!t->jc->prof[kd].enabled || t->off[kd])
					continue;
				if (ps->next_ms > now) {
					next = SM_MIN(next, ps->next_ms);
					continue;
				}
				ps->next_ms += iv;
				if (ps->next_ms <= now)   /* far behind */
					ps->next_ms = now + iv;
				next = SM_MIN(next, ps->next_ms);
				if (ps->running) {
					ps->skipped++;
					sm_metrics_register_once(&metric_set);
					sm_counter_inc(sm_metric_child(
					    m_scrapes, t->job,
					    scr_kind_name[kd], "skipped"));
					continue;
				}
				if ((k = task_make(t, kd)) == NULL)
					continue;   /* next interval */
				ps->running = true;
				t->running++;
				if (s->qtail != NULL)
					s->qtail->next = k;
				else
					s->qhead = k;
				s->qtail = k;
				pthread_cond_signal(&s->cv_work);
			}
		}
		(void)sm_cond_wait_ms(&s->cv_sched, &s->mu,
		    SM_MAX(next - mono_ms(), 1));
	}
	pthread_mutex_unlock(&s->mu);
	return (NULL);
}

/* --- the targets API ------------------------------------------------------ */

static void
ms_rfc3339(struct sm_buf *b, int64_t ms)
{
	char t[32];

	if (ms <= 0) {
		sm_buf_puts(b, "\"0001-01-01T00:00:00Z\"");
		return;
	}
	sm_buf_printf(b, "\"%s\"", sm_time_utc(ms, t, sizeof(t)));
}

static const char *
health_of(const struct scr_target *t)
{
	int h = 0;

	for (int k = 0; k < SCR_NKINDS; k++) {
		if (!t->jc->prof[k].enabled || t->off[k])
			continue;
		if (t->p[k].health < 0)
			return ("down");
		if (t->p[k].health > 0)
			h = 1;
	}
	return (h > 0 ? "up" : "unknown");
}

static void
targets_json(struct scraper *s, struct sm_buf *b)
{
	int64_t now = mono_ms(), unow = sm_now_ms();

	sm_buf_puts(b, "{\"status\":\"success\",\"data\":{\"activeTargets\":[");
	for (uint32_t i = 0; i < s->nt; i++) {
		const struct scr_target *t = s->t[i];
		const char *err = "";
		int64_t last = 0, dur = 0;

		for (int k = 0; k < SCR_NKINDS; k++) {
			if (t->p[k].last_ms > last) {
				last = t->p[k].last_ms;
				dur = t->p[k].last_dur_ms;
			}
			if (t->p[k].err[0] != '\0')
				err = t->p[k].err;
		}
		sm_buf_puts(b, i > 0 ? ",{" : "{");
		sm_buf_puts(b, "\"labels\":{");
		for (uint32_t l = 0; l < t->nlabels; l++) {
			if (l > 0)
				sm_buf_putc(b, ',');
			sm_buf_json_str(b, t->labels[l].name,
			    strlen(t->labels[l].name));
			sm_buf_putc(b, ':');
			sm_buf_json_str(b, t->labels[l].value,
			    strlen(t->labels[l].value));
		}
		sm_buf_puts(b, "},\"scrapePool\":");
		sm_buf_json_str(b, t->job, strlen(t->job));
		sm_buf_puts(b, ",\"scrapeUrl\":");
		sm_buf_json_str(b, t->url, strlen(t->url));
		sm_buf_printf(b, ",\"health\":\"%s\",\"owned\":%s,"
		    "\"lastError\":", health_of(t), t->owned ? "true" :
		    "false");
		sm_buf_json_str(b, err, strlen(err));
		sm_buf_puts(b, ",\"lastScrape\":");
		ms_rfc3339(b, last);
		sm_buf_printf(b, ",\"lastScrapeDuration\":%.3f,\"profiles\":[",
		    (double)dur / 1000.0);
		for (int k = 0, n = 0; k < SCR_NKINDS; k++) {
			const struct scr_pstate *ps = &t->p[k];

			sm_buf_printf(b, "%s{\"name\":\"%s\",\"enabled\":%s,"
			    "\"health\":\"%s\",\"lastScrape\":",
			    n++ > 0 ? "," : "", scr_kind_name[k],
			    t->jc->prof[k].enabled && !t->off[k] ? "true" :
			    "false",
			    ps->health > 0 ? "up" : ps->health < 0 ? "down" :
			    "unknown");
			ms_rfc3339(b, ps->last_ms);
			sm_buf_printf(b, ",\"lastScrapeDuration\":%.3f,"
			    "\"nextScrape\":", (double)ps->last_dur_ms / 1000.0);
			ms_rfc3339(b, unow + (ps->next_ms - now));
			sm_buf_puts(b, ",\"lastError\":");
			sm_buf_json_str(b, ps->err, strlen(ps->err));
			sm_buf_printf(b, ",\"scrapes\":%" PRIu64 ",\"failures\":"
			    "%" PRIu64 ",\"skipped\":%" PRIu64 ",\"deltaEndpoint\":"
			    "%s,\"deltaStateBytes\":%zu}", ps->scrapes,
			    ps->failures, ps->skipped, ps->delta_ep > 0 ?
			    "true" : "false", scr_delta_bytes(&ps->delta));
		}
		sm_buf_puts(b, "]}");
	}
	sm_buf_puts(b, "]}}");
}

static void
targets_api(struct sm_http_req *r, void *arg)
{
	struct scraper *s = arg;
	struct sm_buf b = SM_BUF_INIT;

	pthread_mutex_lock(&s->mu);
	targets_json(s, &b);
	pthread_mutex_unlock(&s->mu);
	if (sm_buf_error(&b) != 0)
		sm_http_reply_error(r, 500, "internal", "out of memory");
	else
		sm_http_reply_buf(r, 200, "application/json", &b);
	sm_buf_fini(&b);
}

static void
html_esc(struct sm_buf *b, const char *s)
{
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '<': sm_buf_puts(b, "&lt;"); break;
		case '>': sm_buf_puts(b, "&gt;"); break;
		case '&': sm_buf_puts(b, "&amp;"); break;
		case '"': sm_buf_puts(b, "&quot;"); break;
		default: sm_buf_putc(b, *s);
		}
	}
}

static void
targets_page(struct sm_http_req *r, void *arg)
{
	struct scraper *s = arg;
	struct sm_buf b = SM_BUF_INIT;
	int64_t now = mono_ms();

	sm_buf_puts(&b, "<!doctype html><html><head><meta charset=\"utf-8\">"
	    "<title>Smolder targets</title></head><body><h1>Targets</h1>"
	    "<table border=\"1\"><tr><th>job</th><th>target</th><th>labels"
	    "</th><th>profile</th><th>health</th><th>last scrape</th>"
	    "<th>duration</th><th>next in</th><th>error</th></tr>");
	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < s->nt; i++) {
		const struct scr_target *t = s->t[i];

		for (int k = 0; k < SCR_NKINDS; k++) {
			const struct scr_pstate *ps = &t->p[k];
			char ts[32];

			if (!t->jc->prof[k].enabled || t->off[k])
				continue;
			sm_buf_puts(&b, "<tr><td>");
			html_esc(&b, t->job);
			sm_buf_puts(&b, "</td><td>");
			html_esc(&b, t->url);
			sm_buf_puts(&b, "</td><td>");
			for (uint32_t l = 0; l < t->nlabels; l++) {
				html_esc(&b, t->labels[l].name);
				sm_buf_putc(&b, '=');
				html_esc(&b, t->labels[l].value);
				sm_buf_puts(&b, " ");
			}
			sm_buf_printf(&b, "</td><td>%s</td><td>%s</td><td>%s"
			    "</td><td>%.3f s</td><td>%.1f s</td><td>",
			    scr_kind_name[k], ps->health > 0 ? "up" :
			    ps->health < 0 ? "down" : "unknown",
			    ps->last_ms > 0 ? sm_time_utc(ps->last_ms, ts,
			    sizeof(ts)) : "never",
			    (double)ps->last_dur_ms / 1000.0,
			    (double)(ps->next_ms - now) / 1000.0);
			html_esc(&b, ps->err);
			sm_buf_puts(&b, "</td></tr>");
		}
	}
	pthread_mutex_unlock(&s->mu);
	sm_buf_puts(&b, "</table></body></html>");
	if (sm_buf_error(&b) != 0)
		sm_http_reply_error(r, 500, "internal", "out of memory");
	else
		sm_http_reply_buf(r, 200, "text/html; charset=utf-8", &b);
	sm_buf_fini(&b);
}

/* --- lifecycle ------------------------------------------------------------ */

int
scraper_create(const struct scraper_cfg *cfg, struct sm_http *http,
    struct scraper **out, struct sm_err *err)
{
	struct scraper *s;
	int rv;

	*out = NULL;
	if ((s = sm_calloc(1, sizeof(*s))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	s->cfg = *cfg;
	s->http = http;
	s->config_file = sm_strdup(cfg->config_file != NULL ?
	    cfg->config_file : "");
	s->push_url = sm_strdup(cfg->push_url != NULL ? cfg->push_url : "");
	if (s->config_file == NULL || s->push_url == NULL) {
		scraper_free(s);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	{
		size_t n = strlen(s->push_url);

		while (n > 0 && s->push_url[n - 1] == '/')
			s->push_url[--n] = '\0';
	}
	{
		uint8_t rnd[SM_PEER_ID_LEN / 2];

		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
			uint64_t t = (uint64_t)sm_mono_ns() ^
			    (uint64_t)(uintptr_t)s;

			memset(rnd, 0, sizeof(rnd));
			memcpy(rnd, &t, sizeof(t));
		}
		for (size_t i = 0; i < sizeof(rnd); i++)
			snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);
	}
	if (s->cfg.concurrency == 0)
		s->cfg.concurrency = 1;
	pthread_mutex_init(&s->mu, NULL);
	sm_cond_init(&s->cv_sched);
	pthread_cond_init(&s->cv_work, NULL);
	s->next_discovery_ms = INT64_MAX;
	sm_metrics_register_once(&metric_set);
	if (cfg->push_key_file != NULL && cfg->push_key_file[0] != '\0') {
		char key[4096];
		long n = scr_read_secret(cfg->push_key_file, key, sizeof(key),
		    true);
		int e = errno;

		if (n <= 0) {
			rv = sm_err_set(err, SM_EINVAL, "scraper: "
			    "-scraper.push-api-key-file %s: %s",
			    cfg->push_key_file, n < 0 ? strerror(e) : "empty");
			scraper_free(s);
			return (rv);
		}
		s->push_key = sm_strdup(key);
		explicit_bzero(key, sizeof(key));
		if (s->push_key == NULL) {
			scraper_free(s);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
	}

	if ((s->ids = sm_calloc(SCR_MAX_PEERS, sizeof(*s->ids))) == NULL) {
		scraper_free(s);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	{
		struct sm_peers_cfg pc = {
			.spec = cfg->peers != NULL ? cfg->peers : "",
			.flag = "-scraper.peers",
			.component = "scraper",
			.header = SCRAPER_PEER_HEADER,
			.self_id = s->id,
			.period_ms = cfg->peers_period_ms > 0 ?
			    cfg->peers_period_ms : 1000,
			.timeout_ms = cfg->peers_timeout_ms > 0 ?
			    cfg->peers_timeout_ms : 500,
			.m_healthy = "smolder_scraper_healthy_peers",
			.m_healthy_help = "Healthy scrapers sharing the "
			    "targets, this one included (1 without "
			    "-scraper.peers).",
			.m_failures = "smolder_scraper_peer_probe_failures_total",
			.m_failures_help = "Probes of -scraper.peers that "
			    "failed (no answer, not ready, not a scraper).",
		};

		if ((rv = sm_peers_create(&pc, &s->peers, err)) != 0) {
			scraper_free(s);
			return (rv);
		}
	}
	if ((rv = sm_http_route_as(http, SM_SCOPE_READ, "GET",
	    "/api/v1/targets", targets_api, s, 0)) != 0 ||
	    (rv = sm_http_route_as(http, SM_SCOPE_READ, "GET", "/targets",
	    targets_page, s, 0)) != 0) {
		scraper_free(s);
		return (sm_err_set(err, rv, "scraper: routes: %s",
		    sm_strerror(rv)));
	}
	*out = s;
	return (0);
}

int
scraper_start(struct scraper *s, struct sm_err *err)
{
	int rv;

	if (s->config_file[0] == '\0')
		return (0);                 /* idle */
	if (s->push_url[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "scraper: no "
		    "-scraper.push-url, and no distributor in this process"));
	if ((s->workers = sm_calloc(s->cfg.concurrency,
	    sizeof(*s->workers))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = sm_peers_start(s->peers, err)) != 0)
		return (rv);
	{
		struct sm_watch_conf wc = {
			.path = s->config_file,
			.period_ms = s->cfg.reload_ms > 0 ? s->cfg.reload_ms :
			    5000,
			.component = "scraper",
			.what = "scrape config file",
			.keeping = "keeping the previous scrape configuration",
			.load = config_load,
			.arg = s,
		};

		if ((rv = sm_watch_create(&wc, &s->watch, err)) != 0)
			return (rv);
	}
	if (pthread_create(&s->sched, NULL, sched_main, s) != 0)
		return (sm_err_set(err, SM_ENOMEM, "scraper: thread"));
	s->started = true;
	for (uint32_t i = 0; i < s->cfg.concurrency; i++) {
		if (pthread_create(&s->workers[i], NULL, worker_main, s) != 0)
			break;
		s->nworkers++;
	}
	if (s->nworkers == 0) {
		scraper_stop(s);
		return (sm_err_set(err, SM_ENOMEM, "scraper: no worker "
		    "thread"));
	}
	return (0);
}

const char *
scraper_id(const struct scraper *s)
{
	return (s->id);
}

void
scraper_stop(struct scraper *s)
{
	if (s == NULL)
		return;
	sm_peers_stop(s->peers);
	sm_watch_destroy(s->watch);
	s->watch = NULL;
	if (!s->started)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->cv_work);
	pthread_cond_broadcast(&s->cv_sched);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->sched, NULL);
	for (uint32_t i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	s->nworkers = 0;
	s->started = false;
}

void
scraper_free(struct scraper *s)
{
	if (s == NULL)
		return;
	scraper_stop(s);
	while (s->qhead != NULL) {
		struct scr_task *k = s->qhead;

		s->qhead = k->next;
		task_free(k);
	}
	for (uint32_t i = 0; i < s->nt; i++)
		target_free(s->t[i]);
	sm_free(s->t);
	conf_unref(s->conf);
	sm_peers_destroy(s->peers);
	sm_free(s->ids);
	sm_free(s->workers);
	sm_free(s->config_file);
	sm_free(s->push_url);
	scr_free_secret(s->push_key);
	if (s->http != NULL) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv_work);
		pthread_cond_destroy(&s->cv_sched);
	}
	sm_free(s);
}
