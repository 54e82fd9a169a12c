/*
 * rules.c -- recording rules: metrics from profiles, exported to
 * Prometheus, backfilled over stored history when a rule is created.
 *
 * API (Pyroscope's settings.v1.RecordingRulesService, Connect):
 *   List / Get / Upsert / DeleteRecordingRule.  A rule names a metric, a
 *   selection (matchers, one of them __profile_type__="<type id>"), the
 *   labels to group by, external labels, and optionally a function
 *   (stacktrace_filter.function_name: only the samples with it anywhere in
 *   the stack, each once).  Upsert without an id creates a rule with a
 *   random one; with an id it replaces the rule if `generation` is the
 *   stored one (else already_exists, so concurrent editors do not
 *   overwrite each other) or creates it.  Every change bumps the
 *   generation.  Rules live in the tenant's settings registers
 *   (settings.c: durable on every ingester, majority quorums, so every
 *   querier sees the same rules) under names starting with
 *   "smolder.recording-rule.", which settings.v1 Get does not list.
 *
 * Evaluation (one thread, when -recording-rules.remote-write-url is set;
 * give it to one querier): every -recording-rules.evaluation-interval
 * (the step), for every tenant with rules (qry_settings_tenants), for
 * every rule: its series is the SelectSeries of its selection, grouped by
 * its group_by labels, through its function when it has one, at the step
 * (a point: the sum of the step's values, at the step's start) -- read
 * from the downsampling tiers where the step allows, exactly as queries
 * are.  Each point becomes a sample of the metric named by the rule with
 * the group's labels and the external labels, sent by Prometheus remote
 * write (common/prw.h).  A rule's progress is a register of its own,
 * "smolder.recording-mark.<id>.<generation>": the end (ms, exclusive) of
 * what was sent.  A new rule (or generation) has none and starts
 * -recording-rules.backfill-period back; a step is evaluated once it
 * ended -recording-rules.evaluation-delay ago; each pass sends up to
 * RULES_CHUNKS_PER_PASS chunks of a day (at most the tenant's
 * max_query_length) per rule and moves the mark after each accepted
 * request.  So the queue of what is owed is the stored profiles
 * themselves and the mark: a restart, a failed request (retried next
 * pass from the mark) or a Prometheus outage loses nothing, and a
 * request sent twice (a crash between the send and the mark) sends
 * identical samples, which Prometheus takes as duplicates.  Uploads that
 * arrive after their step was sent are not sent again.
 *
 * Prometheus must accept old samples for the backfill:
 * storage.tsdb.out_of_order_time_window in its configuration
 * (docs/operations.md).  A sample it refuses (4xx) is logged and counted
 * and the mark moves on, since sending it again would be refused again.
 *
 * Locking: the API handlers hold nothing across calls; the evaluator is
 * one thread that owns its arena, stopped by qry_rules_stop.
 */
#include "qry_int.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/auth.h"
#include "common/connect.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/pbjson.h"
#include "common/prw.h"
#include "common/ptype.h"
#include "common/selector.h"

#include "settings/v1/recording_rules.pb-c.h"

#define RULE_PREFIX "smolder.recording-rule."
#define MARK_PREFIX "smolder.recording-mark."
#define RULE_ID_MAX 64
#define RULES_CHUNK_STEPS 1440
#define RULES_CHUNKS_PER_PASS 64

typedef Settings__V1__RecordingRule rule_t;

static void rules_kick(struct querier *q);

static struct sm_metric *m_evals, *m_samples;

static const struct sm_metric_def rules_metric_defs[] = {
	{ &m_evals, SM_METRIC_COUNTER,
	    "smolder_recording_rules_requests_total", "Remote-write requests "
	    "of recording rules' samples, by result (ok, refused: a 4xx, the "
	    "samples skipped; failed: retried at the next evaluation).",
	    SM_METRIC_LABELS("result"), NULL, 0 },
	{ &m_samples, SM_METRIC_COUNTER,
	    "smolder_recording_rules_samples_total", "Samples of recording "
	    "rules accepted by the remote-write endpoint.", NULL, NULL, 0 },
};

static struct sm_metric_set rules_metric_set = SM_METRIC_SET(rules_metric_defs);

/* --- rules as registers ---------------------------------------------------- */

static bool
valid_id(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > RULE_ID_MAX)
		return (false);
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)id[i]) && id[i] != '-' &&
		    id[i] != '_')
			return (false);
	return (true);
}

/* A Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), or without `:` a
 * label name. */
static bool
valid_name(const char *s, bool colon)
{
	if (s == NULL || s[0] == '\0' || isdigit((unsigned char)s[0]))
		return (false);
	for (const char *p = s; *p != '\0'; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' &&
		    !(colon && *p == ':'))
			return (false);
	return (true);
}

/*
 * The rule's selection as one selector (its matchers ANDed) and its
 * profile type (the __profile_type__ matcher's value).  0 or SM_EINVAL
 * naming what is wrong.
 */
static int
rule_selector(char *const *matchers, size_t n, struct sm_selector *s,
    const char **ptype, struct sm_err *err)
{
	struct sm_ptype pt;
	int rv;

	sm_selector_init(s);
	*ptype = NULL;
	if (n == 0)
		return (sm_err_set(err, SM_EINVAL, "a recording rule needs "
		    "matchers, one of them __profile_type__=\"<type id>\""));
	for (size_t i = 0; i < n; i++) {
		if ((rv = sm_selector_parse(s, matchers[i], err)) != 0) {
			(void)sm_err_prefix(err, "matcher %zu", i);
			return (rv);
		}
	}
	for (uint32_t i = 0; i < s->n; i++)
		if (s->m[i].type == SM_MATCH_EQ && strcmp(s->m[i].name,
		    SM_LABEL_PROFILE_TYPE) == 0)
			*ptype = s->m[i].value;
	if (*ptype == NULL || sm_ptype_parse(*ptype, &pt) != 0)
		return (sm_err_set(err, SM_EINVAL, "a recording rule needs a "
		    "__profile_type__=\"<name>:<sample type>:<unit>:<period "
		    "type>:<unit>\" matcher"));
	return (0);
}

/* Check an upsert's fields; *ptype: the profile type (in s's strings). */
static int
rule_check(const Settings__V1__UpsertRecordingRuleRequest *in,
    struct sm_selector *s, const char **ptype, struct sm_err *err)
{
	int rv;

	if (in->id != NULL && in->id[0] != '\0' && !valid_id(in->id))
		return (sm_err_set(err, SM_EINVAL, "rule id: 1 to %d letters, "
		    "digits, '-' or '_'", RULE_ID_MAX));
	if (!valid_name(in->metric_name, true))
		return (sm_err_set(err, SM_EINVAL, "metric_name \"%s\" is not "
		    "a Prometheus metric name", in->metric_name != NULL ?
		    in->metric_name : ""));
	if ((rv = rule_selector(in->matchers, in->n_matchers, s, ptype,
	    err)) != 0)
		return (rv);
	for (size_t i = 0; i < in->n_group_by; i++)
		if (!valid_name(in->group_by[i], false))
			return (sm_err_set(err, SM_EINVAL, "group_by \"%s\" is "
			    "not a label name", in->group_by[i]));
	for (size_t i = 0; i < in->n_external_labels; i++) {
		const Types__V1__LabelPair *l = in->external_labels[i];

		if (l == NULL || !valid_name(l->name, false) ||
		    strcmp(l->name, "__name__") == 0)
			return (sm_err_set(err, SM_EINVAL, "external label %zu: "
			    "not a label name", i));
		for (size_t j = 0; j < in->n_group_by; j++)
			if (strcmp(l->name, in->group_by[j]) == 0)
				return (sm_err_set(err, SM_EINVAL, "external "
				    "label %s is also a group_by label",
				    l->name));
	}
	if (in->stacktrace_filter != NULL &&
	    in->stacktrace_filter->function_name != NULL &&
	    (in->stacktrace_filter->function_name->function_name == NULL ||
	    in->stacktrace_filter->function_name->function_name[0] == '\0'))
		return (sm_err_set(err, SM_EINVAL, "stacktrace_filter."
		    "function_name needs a function name"));
	return (0);
}

static const char *
rule_function(const rule_t *r)
{
	if (r->stacktrace_filter == NULL ||
	    r->stacktrace_filter->function_name == NULL)
		return (NULL);
	return (r->stacktrace_filter->function_name->function_name);
}

/*
 * The tenant's live rules (sorted by id) and all its registers (for the
 * marks), from the settings registers.
 */
static int
rules_load(struct querier *q, const char *tenant, struct sm_arena *a,
    rule_t ***rules, size_t *nrules, Smolder__V1__TenantSetting ***regs,
    size_t *nregs, struct sm_err *err)
{
	size_t pl = strlen(RULE_PREFIX), n = 0;
	rule_t **v;
	int rv;

	*rules = NULL;
	*nrules = 0;
	if ((rv = qry_settings_list(q, tenant, a, regs, nregs, err)) != 0)
		return (rv);
	if ((v = sm_arena_alloc(a, SM_MAX(*nregs, 1) * sizeof(*v))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < *nregs; i++) {
		const Smolder__V1__TenantSetting *s = (*regs)[i];
		ProtobufCMessage *m;
		struct sm_err e;

		if (s->deleted || strncmp(s->name, RULE_PREFIX, pl) != 0)
			continue;
		sm_err_clear(&e);
		if (sm_pbjson_decode(&settings__v1__recording_rule__descriptor,
		    s->value, strlen(s->value), a, &m, &e) != 0) {
			sm_warn("rules", "a stored recording rule does not "
			    "decode: skipped\ttenant=%s name=%s err=\"%s\"",
			    tenant, s->name, e.msg);
			continue;
		}
		v[n++] = (rule_t *)m;
	}
	*rules = v;
	*nrules = n;        /* registers come sorted by name: by id */
	return (0);
}

static rule_t *
rules_find(rule_t **v, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i]->id, id) == 0)
			return (v[i]);
	return (NULL);
}

/* Store rule r (its id and generation set) as a register. */
static int
rule_store(struct querier *q, const char *tenant, const rule_t *r,
    bool deleted, struct sm_arena *a, struct sm_err *err)
{
	Smolder__V1__TenantSetting s = SMOLDER__V1__TENANT_SETTING__INIT;
	const Smolder__V1__TenantSetting *win;
	struct sm_buf b = SM_BUF_INIT;
	char name[sizeof(RULE_PREFIX) + RULE_ID_MAX];
	int rv;

	(void)snprintf(name, sizeof(name), "%s%s", RULE_PREFIX, r->id);
	if (!deleted)
		sm_pbjson_encode(&r->base, &b);
	sm_buf_putc(&b, '\0');
	if (sm_buf_error(&b) != 0) {
		sm_buf_fini(&b);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	s.name = name;
	s.value = b.b;
	s.deleted = deleted;
	s.modified_at = sm_now_ms();
	rv = qry_settings_put(q, tenant, &s, a, &win, err);
	if (rv == 0 && win != &s && !(deleted && win->deleted))
		rv = sm_err_set(err, SM_EEXIST, "recording rule %s: a newer "
		    "change is stored", r->id);
	sm_buf_fini(&b);
	return (rv);
}

/* --- the API ---------------------------------------------------------------- */

/* The calling tenant and its rules. */
static int
call_rules(struct querier *q, struct sm_connect_call *call,
    const char **tenant, rule_t ***v, size_t *n, struct sm_err *err)
{
	Smolder__V1__TenantSetting **regs;
	size_t nregs;
	int rv;

	if ((rv = qry_call_tenant(q, call, tenant, err)) != 0)
		return (rv);
	return (rules_load(q, *tenant, call->arena, v, n, &regs, &nregs,
	    err));
}

/* The calling tenant and its rule `id` (SM_ENOTFOUND naming it). */
static int
call_rule(struct querier *q, struct sm_connect_call *call, const char *id,
    const char **tenant, rule_t **r, struct sm_err *err)
{
	rule_t **v;
	size_t n;
	int rv;

	if ((rv = call_rules(q, call, tenant, &v, &n, err)) != 0)
		return (rv);
	if (id == NULL || (*r = rules_find(v, n, id)) == NULL)
		return (sm_err_set(err, SM_ENOTFOUND, "no recording rule \"%s\"",
		    id != NULL ? id : ""));
	return (0);
}

static int
m_list(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	struct querier *q = arg;
	Settings__V1__ListRecordingRulesResponse *out;
	const char *tenant;
	size_t n;
	rule_t **v;
	int rv;

	(void)msg;
	if ((rv = call_rules(q, call, &tenant, &v, &n, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	settings__v1__list_recording_rules_response__init(out);
	out->rules = v;
	out->n_rules = n;
	*resp = &out->base;
	return (0);
}

static int
m_get(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Settings__V1__GetRecordingRuleRequest *in = (const void *)msg;
	struct querier *q = arg;
	Settings__V1__GetRecordingRuleResponse *out;
	const char *tenant;
	rule_t *r;
	int rv;

	if ((rv = call_rule(q, call, in->id, &tenant, &r, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	settings__v1__get_recording_rule_response__init(out);
	out->rule = r;
	*resp = &out->base;
	return (0);
}

static int
new_id(char *out, size_t n)
{
	uint8_t b[8];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return (SM_EIO);
	for (size_t i = 0; i < sizeof(b) && 2 * i + 2 < n; i++)
		(void)snprintf(out + 2 * i, 3, "%02x", b[i]);
	return (0);
}

static int
m_upsert(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Settings__V1__UpsertRecordingRuleRequest *in = (const void *)msg;
	struct querier *q = arg;
	Settings__V1__UpsertRecordingRuleResponse *out;
	Smolder__V1__TenantSetting **regs;
	struct sm_selector s;
	const char *tenant, *ptype;
	char idbuf[RULE_ID_MAX + 1];
	size_t nregs, n;
	rule_t **v, *old, *r;
	int rv;

	sm_selector_init(&s);
	if ((rv = qry_call_tenant(q, call, &tenant, err)) != 0)
		return (rv);
	if ((rv = rule_check(in, &s, &ptype, err)) != 0)
		goto out;
	if ((rv = rules_load(q, tenant, call->arena, &v, &n, &regs, &nregs,
	    err)) != 0)
		goto out;
	if ((r = sm_arena_alloc(call->arena, sizeof(*r))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	settings__v1__recording_rule__init(r);
	old = in->id != NULL && in->id[0] != '\0' ? rules_find(v, n, in->id) :
	    NULL;
	if (old != NULL && old->generation != in->generation) {
		rv = sm_err_set(err, SM_EEXIST, "recording rule %s is at "
		    "generation %" PRId64 ", not %" PRId64 ": read it again",
		    old->id, old->generation, in->generation);
		goto out;
	}
	if (in->id != NULL && in->id[0] != '\0') {
		r->id = in->id;
	} else {
		if (new_id(idbuf, sizeof(idbuf)) != 0) {
			rv = sm_err_set(err, SM_EIO, "no random id");
			goto out;
		}
		r->id = sm_arena_strndup(call->arena, idbuf, strlen(idbuf));
	}
	r->metric_name = in->metric_name;
	r->profile_type = sm_arena_strndup(call->arena, ptype, strlen(ptype));
	r->matchers = in->matchers;
	r->n_matchers = in->n_matchers;
	r->group_by = in->group_by;
	r->n_group_by = in->n_group_by;
	r->external_labels = in->external_labels;
	r->n_external_labels = in->n_external_labels;
	r->stacktrace_filter = in->stacktrace_filter;
	r->generation = old != NULL ? old->generation + 1 : 1;
	if (r->id == NULL || r->profile_type == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if ((rv = rule_store(q, tenant, r, false, call->arena, err)) != 0)
		goto out;
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	settings__v1__upsert_recording_rule_response__init(out);
	out->rule = r;
	*resp = &out->base;
	sm_info("rules", "recording rule stored\ttenant=%s id=%s metric=%s "
	    "generation=%" PRId64, tenant, r->id, r->metric_name,
	    r->generation);
	rules_kick(q);
out:
	sm_selector_fini(&s);
	return (rv);
}

static int
m_delete(void *arg, struct sm_connect_call *call, const ProtobufCMessage *msg,
    ProtobufCMessage **resp, struct sm_err *err)
{
	const Settings__V1__DeleteRecordingRuleRequest *in = (const void *)msg;
	struct querier *q = arg;
	Settings__V1__DeleteRecordingRuleResponse *out;
	const char *tenant;
	rule_t *r;
	int rv;

	if ((rv = call_rule(q, call, in->id, &tenant, &r, err)) != 0)
		return (rv);
	if ((rv = rule_store(q, tenant, r, true, call->arena, err)) != 0)
		return (rv);
	if ((out = sm_arena_alloc(call->arena, sizeof(*out))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	settings__v1__delete_recording_rule_response__init(out);
	*resp = &out->base;
	return (0);
}

/* --- evaluation ------------------------------------------------------------- */

struct qry_rules {
	struct querier *q;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	bool kicked;            /* a rule changed: evaluate now */
};

/* A rule was stored: its backfill starts now, not at the next pass. */
static void
rules_kick(struct querier *q)
{
	struct qry_rules *rr = q->rules;

	if (rr == NULL)
		return;
	sm_cond_set_flag(&rr->mu, &rr->cv, &rr->kicked);
}

static bool
rules_stopping(struct qry_rules *rr)
{
	bool s;

	pthread_mutex_lock(&rr->mu);
	s = rr->stop;
	pthread_mutex_unlock(&rr->mu);
	return (s);
}

static int
label_cmp(const void *a, const void *b)
{
	return (strcmp(((const struct sm_prw_label *)a)->name,
	    ((const struct sm_prw_label *)b)->name));
}

/*
 * Rule r's series over [start, end) as remote-write series into *out
 * (arena a).  0 or the query's error.
 */
static int
rule_series(struct querier *q, const char *tenant, const rule_t *r,
    int64_t start, int64_t end, struct sm_arena *a,
    struct sm_prw_series **out, uint32_t *nout, struct sm_err *err)
{
	Smolder__V1__SeriesRequest sr = SMOLDER__V1__SERIES_REQUEST__INIT;
	Smolder__V1__Select sel;
	struct sm_selector s;
	struct qry_series *gs;
	struct qry_query x;
	struct sm_prw_series *ps;
	const char *ptype;
	uint32_t ng = 0, np = 0;
	int rv;

	*out = NULL;
	*nout = 0;
	qry_query_init(&x, q);
	if ((rv = rule_selector(r->matchers, r->n_matchers, &s, &ptype,
	    err)) != 0)
		goto out;
	if (qry_select_pb(&s, tenant, start, end - 1, a, &sel) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	sr.select = &sel;
	sr.step_ms = q->cfg.rr_interval_ms;
	sr.group_by = r->group_by;
	sr.n_group_by = r->n_group_by;
	sr.function = (char *)rule_function(r);
	if ((rv = qry_series_select(&x, &sr, a, &gs, &ng, err)) != 0)
		goto out;
	if ((ps = sm_arena_calloc(a, SM_MAX(ng, 1), sizeof(*ps))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t g = 0; g < ng; g++) {
		size_t nl = 1 + gs[g].nlabels + r->n_external_labels;
		struct sm_prw_label *l;
		uint32_t k = 0;

		if (gs[g].n == 0)
			continue;
		if ((l = sm_arena_alloc(a, nl * sizeof(*l))) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		l[k++] = (struct sm_prw_label){ "__name__", r->metric_name };
		/* the group's labels live in the query's answers, freed
		 * with it (engine.h): copies */
		for (uint32_t j = 0; j < gs[g].nlabels; j++) {
			const char *nm = gs[g].labels[j]->name;
			const char *vl = gs[g].labels[j]->value;

			l[k].name = sm_arena_strndup(a, nm, strlen(nm));
			l[k].value = sm_arena_strndup(a, vl, strlen(vl));
			if (l[k].name == NULL || l[k].value == NULL) {
				rv = sm_err_set(err, SM_ENOMEM, "out of "
				    "memory");
				goto out;
			}
			k++;
		}
		for (size_t j = 0; j < r->n_external_labels; j++)
			l[k++] = (struct sm_prw_label){
			    r->external_labels[j]->name,
			    r->external_labels[j]->value };
		qsort(l, k, sizeof(*l), label_cmp);
		ps[np++] = (struct sm_prw_series){ .labels = l, .nlabels = k,
			.ts = gs[g].ts, .v = gs[g].v, .n = gs[g].n };
	}
	*out = ps;
	*nout = np;
out:
	sm_selector_fini(&s);
	qry_query_fini(&x);
	return (rv);
}

static int64_t
mark_of(Smolder__V1__TenantSetting **regs, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		char *e;
		long long v;

		if (regs[i]->deleted || strcmp(regs[i]->name, name) != 0)
			continue;
		v = strtoll(regs[i]->value, &e, 10);
		return (*e == '\0' && v > 0 ? (int64_t)v : 0);
	}
	return (0);
}

static int
mark_store(struct querier *q, const char *tenant, const char *name,
    int64_t end, struct sm_arena *a, struct sm_err *err)
{
	Smolder__V1__TenantSetting s = SMOLDER__V1__TENANT_SETTING__INIT;
	const Smolder__V1__TenantSetting *win;
	char val[24];

	(void)snprintf(val, sizeof(val), "%" PRId64, end);
	s.name = (char *)name;
	s.value = val;
	/* marks only move forward: the later end is the newer register */
	s.modified_at = end;
	return (qry_settings_put(q, tenant, &s, a, &win, err));
}

/*
 * Evaluate rule r of `tenant` from its mark up to the last step that
 * ended the evaluation delay ago, a day (or the tenant's longest query)
 * per request.  Errors are logged and counted; the mark stays.
 */
static void
rule_eval(struct qry_rules *rr, const char *tenant, const rule_t *r,
    Smolder__V1__TenantSetting **regs, size_t nregs)
{
	struct querier *q = rr->q;
	int64_t step = q->cfg.rr_interval_ms, now = sm_now_ms(), start, end,
	    chunk = step * RULES_CHUNK_STEPS;
	char mname[sizeof(MARK_PREFIX) + RULE_ID_MAX + 24];
	struct sm_limits lim;

	(void)snprintf(mname, sizeof(mname), "%s%s.%" PRId64, MARK_PREFIX,
	    r->id, r->generation);
	qry_tenant_limits(q, tenant, &lim);
	if (lim.max_query_length_ms > 0)
		chunk = SM_MAX(step, sm_floor_to(lim.max_query_length_ms,
		    step));
	end = sm_floor_to(now - q->cfg.rr_delay_ms, step);
	start = mark_of(regs, nregs, mname);
	if (start == 0)
		start = sm_floor_to(now - q->cfg.rr_backfill_ms, step);
	for (int c = 0; c < RULES_CHUNKS_PER_PASS && start < end &&
	    !rules_stopping(rr); c++) {
		int64_t cend = SM_MIN(end, start + chunk);
		struct sm_arena *a = sm_arena_create(0);
		struct sm_prw_series *ps = NULL;
		struct sm_buf body = SM_BUF_INIT;
		uint64_t nsamples = 0;
		uint32_t nps = 0;
		const char *res = "ok";
		struct sm_err e;
		int rv;

		sm_err_clear(&e);
		if (a == NULL)
			break;
		rv = rule_series(q, tenant, r, start, cend, a, &ps, &nps, &e);
		for (uint32_t i = 0; rv == 0 && i < nps; i++)
			nsamples += ps[i].n;
		if (rv == 0 && nps > 0 && (rv = sm_prw_encode(ps, nps, &body,
		    &e)) == 0)
			rv = sm_prw_send(q->cfg.rr_url, NULL,
			    q->cfg.rr_timeout_ms, &body, &e);
		if (rv == SM_EINVAL && nps > 0) {
			res = "refused";
			sm_warn("rules", "the remote-write endpoint refused "
			    "samples: skipped\ttenant=%s rule=%s err=\"%s\"",
			    tenant, r->id, e.msg);
			rv = 0;
			nsamples = 0;
		} else if (rv != 0) {
			res = "failed";
			sm_warn("rules", "recording rule evaluation failed: "
			    "retried at the next evaluation\ttenant=%s rule=%s "
			    "err=\"%s\"", tenant, r->id, e.msg);
		}
		if (nps > 0 || rv != 0)
			sm_counter_inc(sm_metric_child(m_evals, res));
		sm_counter_add(sm_metric_child0(m_samples), nsamples);
		if (rv == 0 && (rv = mark_store(q, tenant, mname, cend, a,
		    &e)) != 0)
			sm_warn("rules", "recording rule mark not stored: the "
			    "step is sent again\ttenant=%s rule=%s err=\"%s\"",
			    tenant, r->id, e.msg);
		sm_buf_fini(&body);
		sm_arena_destroy(a);
		if (rv != 0)
			break;
		start = cend;
	}
}

static void
rules_pass(struct qry_rules *rr)
{
	struct sm_arena *a = sm_arena_create(0);
	char **tenants;
	size_t nt;
	struct sm_err e;

	sm_err_clear(&e);
	if (a == NULL)
		return;
	if (qry_settings_tenants(rr->q, RULE_PREFIX, a, &tenants, &nt,
	    &e) != 0) {
		sm_warn("rules", "cannot list the tenants with recording rules"
		    "\terr=\"%s\"", e.msg);
		nt = 0;
	}
	for (size_t t = 0; t < nt && !rules_stopping(rr); t++) {
		Smolder__V1__TenantSetting **regs;
		size_t nregs, n;
		rule_t **v;

		if (rules_load(rr->q, tenants[t], a, &v, &n, &regs, &nregs,
		    &e) != 0) {
			sm_warn("rules", "cannot read recording rules\t"
			    "tenant=%s err=\"%s\"", tenants[t], e.msg);
			continue;
		}
		for (size_t i = 0; i < n && !rules_stopping(rr); i++)
			rule_eval(rr, tenants[t], v[i], regs, nregs);
	}
	sm_arena_destroy(a);
}

static void *
rules_main(void *arg)
{
	struct qry_rules *rr = arg;

	for (;;) {
		int64_t until;

		rules_pass(rr);
		until = sm_mono_ns() + rr->q->cfg.rr_interval_ms * 1000000;
		pthread_mutex_lock(&rr->mu);
		while (!rr->stop && !rr->kicked && sm_mono_ns() < until)
			(void)sm_cond_wait_until(&rr->cv, &rr->mu, until);
		rr->kicked = false;
		if (rr->stop) {
			pthread_mutex_unlock(&rr->mu);
			break;
		}
		pthread_mutex_unlock(&rr->mu);
	}
	return (NULL);
}

int
qry_rules_start(struct querier *q, struct qry_rules **out, struct sm_err *err)
{
	struct qry_rules *rr;

	*out = NULL;
	sm_metrics_register_once(&rules_metric_set);
	if (q->cfg.rr_url == NULL || q->cfg.rr_url[0] == '\0')
		return (0);
	if (q->cfg.rr_interval_ms < 1000 || q->cfg.rr_delay_ms < 0 ||
	    q->cfg.rr_backfill_ms < 0 || q->cfg.rr_timeout_ms <= 0)
		return (sm_err_set(err, SM_EINVAL, "-recording-rules: the "
		    "evaluation interval must be at least 1s, the delay, "
		    "backfill period and timeout not negative"));
	if ((rr = sm_calloc(1, sizeof(*rr))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	rr->q = q;
	pthread_mutex_init(&rr->mu, NULL);
	sm_cond_init(&rr->cv);
	if (pthread_create(&rr->thr, NULL, rules_main, rr) != 0) {
		pthread_cond_destroy(&rr->cv);
		pthread_mutex_destroy(&rr->mu);
		sm_free(rr);
		return (sm_err_set(err, SM_ENOMEM, "recording rules: no "
		    "thread"));
	}
	sm_info("rules", "recording rules evaluated\turl=%s interval_ms=%"
	    PRId64 " delay_ms=%" PRId64 " backfill_ms=%" PRId64,
	    q->cfg.rr_url, q->cfg.rr_interval_ms, q->cfg.rr_delay_ms,
	    q->cfg.rr_backfill_ms);
	*out = rr;
	return (0);
}

void
qry_rules_stop(struct qry_rules *rr)
{
	if (rr == NULL)
		return;
	sm_cond_set_flag(&rr->mu, &rr->cv, &rr->stop);
	(void)pthread_join(rr->thr, NULL);
	pthread_cond_destroy(&rr->cv);
	pthread_mutex_destroy(&rr->mu);
	sm_free(rr);
}

int
qry_rules_register(struct querier *q)
{
	static const struct qry_method m[] = {
		{ "ListRecordingRules",
		    &settings__v1__list_recording_rules_request__descriptor,
		    m_list },
		{ "GetRecordingRule",
		    &settings__v1__get_recording_rule_request__descriptor,
		    m_get },
	};
	static const struct {
		const char *path;
		const ProtobufCMessageDescriptor *in;
		sm_connect_fn fn;
	} w[] = {
		{ "/settings.v1.RecordingRulesService/UpsertRecordingRule",
		    &settings__v1__upsert_recording_rule_request__descriptor,
		    m_upsert },
		{ "/settings.v1.RecordingRulesService/DeleteRecordingRule",
		    &settings__v1__delete_recording_rule_request__descriptor,
		    m_delete },
	};
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(m); i++) {
		char path[96];

		(void)snprintf(path, sizeof(path),
		    "/settings.v1.RecordingRulesService/%s", m[i].method);
		if ((rv = sm_connect_route_as(q->http, SM_SCOPE_READ, path,
		    m[i].in, m[i].fn, q, 1u << 20)) != 0)
			return (rv);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(w); i++)
		if ((rv = sm_connect_route_as(q->http, SM_SCOPE_ADMIN, w[i].path,
		    w[i].in, w[i].fn, q, 1u << 20)) != 0)
			return (rv);
	return (0);
}
