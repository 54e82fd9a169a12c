/*
 * watch.c -- a configuration file reloaded when it changes (watch.h).
 */
#include <sys/stat.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "watch.h"

/* What identifies one version of the file. */
struct watch_stamp {
	dev_t s_dev;
	ino_t s_ino;
	off_t s_size;
	struct timespec s_mtime;
};

struct sm_watch {
	struct sm_watch_conf w_conf;  /* path points at w_path */
	char *w_path;

	pthread_mutex_t w_load_mu;    /* serializes loads */
	pthread_mutex_t w_mu;         /* protects the fields below */
	pthread_cond_t w_cv;
	struct watch_stamp w_stamp;   /* of the last version tried */
	struct watch_stamp w_pending; /* changed, not yet settled */
	bool w_stop;
	bool w_thread_started;
	pthread_t w_thread;
	_Atomic uint64_t w_polls;     /* sm_watch_polls */
};

static int
watch_stat(const struct sm_watch_conf *c, struct watch_stamp *s,
    struct sm_err *err)
{
	struct stat st;

	if (stat(c->path, &st) != 0)
		return (sm_err_set(err, SM_EIO, "%s %s: %s", c->what, c->path,
		    strerror(errno)));
	memset(s, 0, sizeof(*s));
	s->s_dev = st.st_dev;
	s->s_ino = st.st_ino;
	s->s_size = st.st_size;
	s->s_mtime = st.st_mtim;
	return (0);
}

static bool
watch_stamp_eq(const struct watch_stamp *a, const struct watch_stamp *b)
{
	return (a->s_dev == b->s_dev && a->s_ino == b->s_ino &&
	    a->s_size == b->s_size && a->s_mtime.tv_sec == b->s_mtime.tv_sec &&
	    a->s_mtime.tv_nsec == b->s_mtime.tv_nsec);
}

/*
 * Load if the file changed.  `settle`: load only a change that was seen
 * unchanged at the previous poll too (the thread); otherwise at once.
 */
static int
watch_run(struct sm_watch *w, bool settle, struct sm_err *err)
{
	const struct sm_watch_conf *c = &w->w_conf;
	struct watch_stamp st;
	int rv;

	pthread_mutex_lock(&w->w_load_mu);
	if ((rv = watch_stat(c, &st, err)) != 0)
		goto done;
	pthread_mutex_lock(&w->w_mu);
	if (watch_stamp_eq(&st, &w->w_stamp) ||
	    (settle && !watch_stamp_eq(&st, &w->w_pending))) {
		w->w_pending = st;
		pthread_mutex_unlock(&w->w_mu);
		pthread_mutex_unlock(&w->w_load_mu);
		return (0);
	}
	/* Tried once per change, whatever the outcome. */
	w->w_stamp = st;
	pthread_mutex_unlock(&w->w_mu);
	rv = c->load(c->arg, c->path, err);
done:
	if (c->result != NULL)
		c->result(c->arg, rv);
	pthread_mutex_unlock(&w->w_load_mu);
	return (rv);
}

int
sm_watch_check(struct sm_watch *w, struct sm_err *err)
{
	return (watch_run(w, false, err));
}

uint64_t
sm_watch_polls(const struct sm_watch *w)
{
	return (atomic_load((_Atomic uint64_t *)&w->w_polls));
}

static void *
watch_main(void *arg)
{
	struct sm_watch *w = arg;
	struct sm_err err;
	char last[SM_ERR_MSG_MAX] = "";
	int64_t ms = w->w_conf.period_ms;

	pthread_mutex_lock(&w->w_mu);
	while (!w->w_stop) {
		sm_clock_wait_ms(w->w_conf.clock, &w->w_cv, &w->w_mu, ms);
		if (w->w_stop)
			break;
		pthread_mutex_unlock(&w->w_mu);
		sm_err_clear(&err);
		if (watch_run(w, true, &err) != 0) {
			/* Log each distinct problem once, not every poll. */
			if (strcmp(last, err.msg) != 0)
				sm_error(w->w_conf.component, "%s: %s",
				    w->w_conf.keeping, err.msg);
			snprintf(last, sizeof(last), "%s", err.msg);
		} else {
			last[0] = '\0';
		}
		atomic_fetch_add(&w->w_polls, 1);
		pthread_mutex_lock(&w->w_mu);
	}
	pthread_mutex_unlock(&w->w_mu);
	return (NULL);
}

int
sm_watch_create(const struct sm_watch_conf *conf, struct sm_watch **out,
    struct sm_err *err)
{
	struct sm_watch *w;
	int rv;

	*out = NULL;
	if (conf->path == NULL || conf->path[0] == '\0' ||
	    conf->load == NULL || conf->period_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "watch: a path, a load "
		    "function and a period > 0 are needed"));
	if ((w = sm_calloc(1, sizeof(*w))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "watch: out of memory"));
	pthread_mutex_init(&w->w_load_mu, NULL);
	pthread_mutex_init(&w->w_mu, NULL);
	sm_cond_init(&w->w_cv);
	w->w_conf = *conf;
	if (w->w_conf.component == NULL)
		w->w_conf.component = "watch";
	if (w->w_conf.what == NULL)
		w->w_conf.what = "file";
	if (w->w_conf.keeping == NULL)
		w->w_conf.keeping = "keeping the previous version";
	if ((w->w_path = sm_strdup(conf->path)) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "watch: out of memory");
		goto fail;
	}
	w->w_conf.path = w->w_path;
	if ((rv = sm_watch_check(w, err)) != 0)
		goto fail;
	if (pthread_create(&w->w_thread, NULL, watch_main, w) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "%s: cannot start the reload "
		    "thread", w->w_conf.component);
		goto fail;
	}
	w->w_thread_started = true;
	*out = w;
	return (0);
fail:
	sm_watch_destroy(w);
	return (rv);
}

void
sm_watch_destroy(struct sm_watch *w)
{
	if (w == NULL)
		return;
	if (w->w_thread_started) {
		sm_cond_set_flag(&w->w_mu, &w->w_cv, &w->w_stop);
		pthread_join(w->w_thread, NULL);
	}
	pthread_cond_destroy(&w->w_cv);
	pthread_mutex_destroy(&w->w_mu);
	pthread_mutex_destroy(&w->w_load_mu);
	sm_free(w->w_path);
	sm_free(w);
}
