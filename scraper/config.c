/*
 * config.c -- the scrape configuration file and relabeling (scr_int.h).
 */
#include "scr_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "common/yaml.h"

const char *const scr_kind_name[SCR_NKINDS] = { "process_cpu", "memory",
	"goroutines", "mutex", "block" };
const char *const scr_kind_metric[SCR_NKINDS] = { "process_cpu", "memory",
	"goroutines", "mutex", "block" };

static const char *const kind_path[SCR_NKINDS] = { "/debug/pprof/profile",
	"/debug/pprof/heap", "/debug/pprof/goroutine", "/debug/pprof/mutex",
	"/debug/pprof/block" };
static const char *const kind_delta[SCR_NKINDS] = { NULL,
	"/debug/pprof/delta_heap", NULL, "/debug/pprof/delta_mutex",
	"/debug/pprof/delta_block" };

struct cf {
	const struct sm_yaml *y;
	const char *path;
	struct sm_err *err;
};

static int
bad(struct cf *c, const struct sm_yaml_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
bad(struct cf *c, const struct sm_yaml_node *n, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return (sm_err_set(c->err, SM_EINVAL, "%s line %d: %s", c->path,
	    sm_yaml_line(n), msg));
}

static char *
dup(const char *s)
{
	return (s != NULL ? sm_strdup(s) : NULL);
}

/* A scalar value of key `k` (node v) into *out (heap). */
static int
get_str(struct cf *c, const char *k, const struct sm_yaml_node *v,
    char **out)
{
	const char *s = sm_yaml_scalar(v);

	if (s == NULL)
		return (bad(c, v, "%s: want a string", k));
	sm_free(*out);
	if ((*out = dup(s)) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	return (0);
}

static int
get_bool(struct cf *c, const char *k, const struct sm_yaml_node *v,
    bool *out)
{
	const char *s = sm_yaml_scalar(v);

	if (s != NULL && strcmp(s, "true") == 0)
		*out = true;
	else if (s != NULL && strcmp(s, "false") == 0)
		*out = false;
	else
		return (bad(c, v, "%s: want true or false", k));
	return (0);
}

static int
get_dur(struct cf *c, const char *k, const struct sm_yaml_node *v,
    int64_t *out)
{
	const char *s = sm_yaml_scalar(v);

	if (s == NULL || sm_parse_duration_ms(s, out) != 0 || *out <= 0)
		return (bad(c, v, "%s: want a positive duration such as 15s",
		    k));
	return (0);
}

/* A sequence of strings into a heap array. */
static int
get_strs(struct cf *c, const char *k, const struct sm_yaml_node *v,
    char ***out, uint32_t *n)
{
	size_t len = sm_yaml_len(v);

	if (!sm_yaml_is_seq(v))
		return (bad(c, v, "%s: want a list", k));
	if ((*out = sm_calloc(len + 1, sizeof(**out))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < len; i++) {
		const struct sm_yaml_node *it = sm_yaml_item(c->y, v, i);

		if (sm_yaml_scalar(it) == NULL)
			return (bad(c, it, "%s: want strings", k));
		if (((*out)[(*n)++] = dup(sm_yaml_scalar(it))) == NULL)
			return (sm_err_set(c->err, SM_ENOMEM,
			    "out of memory"));
	}
	return (0);
}

static int
get_labels(struct cf *c, const struct sm_yaml_node *v, struct sm_label **out,
    uint32_t *n)
{
	size_t len = sm_yaml_len(v);

	if (!sm_yaml_is_map(v))
		return (bad(c, v, "labels: want a mapping"));
	if ((*out = sm_calloc(len + 1, sizeof(**out))) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < len; i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(c->y, v, i));
		const char *s = sm_yaml_scalar(sm_yaml_value(c->y, v, i));

		if (k == NULL || s == NULL)
			return (bad(c, v, "labels: want name: value"));
		(*out)[*n].name = dup(k);
		(*out)[*n].value = dup(s);
		if ((*out)[(*n)++].value == NULL || (*out)[*n - 1].name == NULL)
			return (sm_err_set(c->err, SM_ENOMEM,
			    "out of memory"));
	}
	return (0);
}

static int
get_group(struct cf *c, const struct sm_yaml_node *g, struct scr_group *out)
{
	int rv;

	if (!sm_yaml_is_map(g))
		return (bad(c, g, "a target group must be a mapping"));
	for (size_t i = 0; i < sm_yaml_len(g); i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(c->y, g, i));
		const struct sm_yaml_node *v = sm_yaml_value(c->y, g, i);

		if (k != NULL && strcmp(k, "targets") == 0)
			rv = get_strs(c, k, v, &out->targets, &out->ntargets);
		else if (k != NULL && strcmp(k, "labels") == 0)
			rv = get_labels(c, v, &out->labels, &out->nlabels);
		else
			rv = bad(c, v, "unknown key \"%s\" in a target group",
			    k != NULL ? k : "?");
		if (rv != 0)
			return (rv);
	}
	return (0);
}

static int
get_pconf(struct cf *c, const struct sm_yaml_node *m, struct scr_job *j)
{
	const struct sm_yaml_node *pp = sm_yaml_get(c->y, m, "pprof_config");
	int rv;

	if (!sm_yaml_is_map(m) || sm_yaml_len(m) != 1 || pp == NULL ||
	    !sm_yaml_is_map(pp))
		return (bad(c, m, "profiling_config: want pprof_config: "
		    "{<profile>: {enabled, path, delta_path}}"));
	for (size_t i = 0; i < sm_yaml_len(pp); i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(c->y, pp, i));
		const struct sm_yaml_node *v = sm_yaml_value(c->y, pp, i);
		int kind = -1;

		for (int t = 0; t < SCR_NKINDS && k != NULL; t++)
			if (strcmp(k, scr_kind_name[t]) == 0)
				kind = t;
		if (kind < 0 || !sm_yaml_is_map(v))
			return (bad(c, v, "pprof_config: unknown profile "
			    "\"%s\" (process_cpu, memory, goroutines, mutex, "
			    "block)", k != NULL ? k : "?"));
		for (size_t q = 0; q < sm_yaml_len(v); q++) {
			const char *pk = sm_yaml_scalar(sm_yaml_key(c->y, v,
			    q));
			const struct sm_yaml_node *pv = sm_yaml_value(c->y, v,
			    q);
			struct scr_pconf *pc = &j->prof[kind];

			if (pk != NULL && strcmp(pk, "enabled") == 0)
				rv = get_bool(c, pk, pv, &pc->enabled);
			else if (pk != NULL && strcmp(pk, "path") == 0)
				rv = get_str(c, pk, pv, &pc->path);
			else if (pk != NULL && strcmp(pk, "delta_path") == 0)
				rv = get_str(c, pk, pv, &pc->delta_path);
			else
				rv = bad(c, pv, "%s: unknown key \"%s\"", k,
				    pk != NULL ? pk : "?");
			if (rv != 0)
				return (rv);
			if (pc->path != NULL && pc->path[0] != '/')
				return (bad(c, pv, "%s: path must start with "
				    "/", k));
		}
	}
	return (0);
}

static const struct sm_name_val rl_actions[] = {
	{ "replace", SCR_RL_REPLACE },
	{ "keep", SCR_RL_KEEP },
	{ "drop", SCR_RL_DROP },
	{ "labelmap", SCR_RL_LABELMAP },
};

static const struct sm_name_val dns_types[] = {
	{ "SRV", SCR_DNS_SRV },
	{ "A", SCR_DNS_A },
	{ "AAAA", SCR_DNS_AAAA },
};

static int
get_relabel(struct cf *c, const struct sm_yaml_node *m, struct scr_relabel *r)
{
	const char *regex = "(.*)";
	char *action = NULL;
	int rv = 0, val;

	if (!sm_yaml_is_map(m))
		return (bad(c, m, "relabel_configs: want mappings"));
	for (size_t i = 0; i < sm_yaml_len(m) && rv == 0; i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(c->y, m, i));
		const struct sm_yaml_node *v = sm_yaml_value(c->y, m, i);

		if (k == NULL)
			rv = bad(c, v, "relabel_configs: a key must be text");
		else if (strcmp(k, "source_labels") == 0)
			rv = get_strs(c, k, v, &r->source, &r->nsource);
		else if (strcmp(k, "separator") == 0)
			rv = get_str(c, k, v, &r->separator);
		else if (strcmp(k, "target_label") == 0)
			rv = get_str(c, k, v, &r->target);
		else if (strcmp(k, "replacement") == 0)
			rv = get_str(c, k, v, &r->replacement);
		else if (strcmp(k, "action") == 0)
			rv = get_str(c, k, v, &action);
		else if (strcmp(k, "regex") == 0) {
			if ((regex = sm_yaml_scalar(v)) == NULL)
				rv = bad(c, v, "regex: want a string");
		} else
			rv = bad(c, v, "relabel_configs: unknown key \"%s\" "
			    "(source_labels, separator, target_label, regex, "
			    "replacement, action)", k);
	}
	if (rv == 0 && sm_name_lookup(rl_actions, SM_ARRAY_LEN(rl_actions),
	    action != NULL ? action : "replace", &val) != 0)
		rv = bad(c, m, "relabel_configs: action \"%s\" is not "
		    "served (replace, keep, drop, labelmap)", action);
	if (rv == 0)
		r->action = (enum scr_rl_action)val;
	sm_free(action);
	if (rv != 0)
		return (rv);
	if (r->action == SCR_RL_REPLACE && r->target == NULL)
		return (bad(c, m, "relabel_configs: replace needs "
		    "target_label"));
	if ((r->separator == NULL && (r->separator = dup(";")) == NULL) ||
	    (r->replacement == NULL && (r->replacement = dup("$1")) == NULL))
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	if ((rv = sm_regex_compile(regex, SM_RE_WHOLE | SM_RE_LIMITED,
	    &r->re, c->err)) != 0)
		return (rv == SM_EINVAL ? bad(c, m, "regex \"%s\": %s", regex,
		    c->err->msg) : rv);
	return (0);
}

static int
get_dns(struct cf *c, const struct sm_yaml_node *m, struct scr_dnssd *d)
{
	char *type = NULL;
	int rv = 0, val;

	d->refresh_ms = 30000;
	if (!sm_yaml_is_map(m))
		return (bad(c, m, "dns_sd_configs: want mappings"));
	for (size_t i = 0; i < sm_yaml_len(m) && rv == 0; i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(c->y, m, i));
		const struct sm_yaml_node *v = sm_yaml_value(c->y, m, i);

		if (k != NULL && strcmp(k, "names") == 0) {
			rv = get_strs(c, k, v, &d->names, &d->nnames);
		} else if (k != NULL && strcmp(k, "type") == 0) {
			rv = get_str(c, k, v, &type);
		} else if (k != NULL && strcmp(k, "port") == 0) {
			const char *p = sm_yaml_scalar(v);
			char *end;

			d->port = p != NULL ? strtoll(p, &end, 10) : -1;
			if (p == NULL || *end != '\0' || d->port < 1 ||
			    d->port > 65535)
				rv = bad(c, v, "port: 1 to 65535");
		} else if (k != NULL && strcmp(k, "refresh_interval") == 0) {
			rv = get_dur(c, k, v, &d->refresh_ms);
		} else if (k != NULL && strcmp(k, "dns_server") == 0) {
			rv = get_str(c, k, v, &d->server);
		} else {
			rv = bad(c, v, "dns_sd_configs: unknown key \"%s\" "
			    "(names, type, port, refresh_interval, "
			    "dns_server)", k != NULL ? k : "?");
		}
	}
	if (rv == 0 && sm_name_lookup(dns_types, SM_ARRAY_LEN(dns_types),
	    type != NULL ? type : "SRV", &val) != 0)
		rv = bad(c, m, "dns_sd_configs: type \"%s\" (SRV, A, "
		    "AAAA)", type);
	if (rv == 0)
		d->type = (enum scr_dns_type)val;
	sm_free(type);
	if (rv != 0)
		return (rv);
	if (d->nnames == 0)
		return (bad(c, m, "dns_sd_configs: names is required"));
	if (d->type != SCR_DNS_SRV && d->port == 0)
		return (bad(c, m, "dns_sd_configs: type A and AAAA need "
		    "port"));
	return (0);
}

/* A tls_config mapping (of a scrape config or of kubernetes_sd_configs). */
static int
get_tls(struct cf *c, const struct sm_yaml_node *m, char **ca_file,
    bool *insecure)
{
	int rv = 0;

	for (size_t i = 0; i < sm_yaml_len(m) && rv == 0; i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(c->y, m, i));
		const struct sm_yaml_node *v = sm_yaml_value(c->y, m, i);

		if (k != NULL && strcmp(k, "ca_file") == 0)
			rv = get_str(c, k, v, ca_file);
		else if (k != NULL && strcmp(k, "insecure_skip_verify") == 0)
			rv = get_bool(c, k, v, insecure);
		else
			rv = bad(c, v, "tls_config: unknown key \"%s\" "
			    "(ca_file, insecure_skip_verify)",
			    k != NULL ? k : "?");
	}
	return (rv);
}

static int
get_k8s(struct cf *c, const struct sm_yaml_node *m, struct scr_k8ssd *k)
{
	int rv = 0;

	k->refresh_ms = 30000;
	if (!sm_yaml_is_map(m))
		return (bad(c, m, "kubernetes_sd_configs: want mappings"));
	for (size_t i = 0; i < sm_yaml_len(m) && rv == 0; i++) {
		const char *key = sm_yaml_scalar(sm_yaml_key(c->y, m, i));
		const struct sm_yaml_node *v = sm_yaml_value(c->y, m, i);

		if (key == NULL) {
			rv = bad(c, v, "a key must be text");
		} else if (strcmp(key, "role") == 0) {
			const char *r = sm_yaml_scalar(v);

			if (r == NULL || strcmp(r, "pod") != 0)
				rv = bad(c, v, "kubernetes_sd_configs: role "
				    "pod is the one served");
		} else if (strcmp(key, "api_server") == 0) {
			rv = get_str(c, key, v, &k->api_server);
		} else if (strcmp(key, "kubeconfig_file") == 0) {
			rv = get_str(c, key, v, &k->kubeconfig);
		} else if (strcmp(key, "bearer_token_file") == 0) {
			rv = get_str(c, key, v, &k->bearer_file);
		} else if (strcmp(key, "refresh_interval") == 0) {
			rv = get_dur(c, key, v, &k->refresh_ms);
		} else if (strcmp(key, "namespaces") == 0) {
			const struct sm_yaml_node *nm = sm_yaml_get(c->y, v,
			    "names");

			if (!sm_yaml_is_map(v) || sm_yaml_len(v) != 1 ||
			    nm == NULL)
				rv = bad(c, v, "namespaces: want {names: "
				    "[...]}");
			else
				rv = get_strs(c, "names", nm, &k->namespaces,
				    &k->nnamespaces);
		} else if (strcmp(key, "tls_config") == 0) {
			rv = get_tls(c, v, &k->ca_file, &k->insecure);
		} else {
			rv = bad(c, v, "kubernetes_sd_configs: unknown key "
			    "\"%s\" (role, api_server, kubeconfig_file, "
			    "bearer_token_file, tls_config, namespaces, "
			    "refresh_interval)", key);
		}
	}
	return (rv);
}

/* A list of `key` into a new array of n elements of elsize bytes, each
 * parsed by fn. */
static int
get_seq(struct cf *c, const char *k, const struct sm_yaml_node *v,
    size_t elsize, void **out, uint32_t *n,
    int (*fn)(struct cf *, const struct sm_yaml_node *, void *))
{
	size_t len = sm_yaml_len(v);
	int rv = 0;

	if (!sm_yaml_is_seq(v))
		return (bad(c, v, "%s: want a list", k));
	if ((*out = sm_calloc(len + 1, elsize)) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (size_t q = 0; q < len && rv == 0; q++)
		rv = fn(c, sm_yaml_item(c->y, v, q), (char *)*out +
		    (*n)++ * elsize);
	return (rv);
}

static int
seq_group(struct cf *c, const struct sm_yaml_node *m, void *e)
{
	return (get_group(c, m, e));
}

static int
seq_filesd(struct cf *c, const struct sm_yaml_node *f, void *e)
{
	struct scr_filesd *fs = e;
	int rv = 0;

	fs->refresh_ms = 30000;
	for (size_t i = 0; i < sm_yaml_len(f) && rv == 0; i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(c->y, f, i));
		const struct sm_yaml_node *v = sm_yaml_value(c->y, f, i);

		if (k != NULL && strcmp(k, "files") == 0)
			rv = get_strs(c, k, v, &fs->files, &fs->nfiles);
		else if (k != NULL && strcmp(k, "refresh_interval") == 0)
			rv = get_dur(c, k, v, &fs->refresh_ms);
		else
			rv = bad(c, v, "file_sd_configs: unknown key \"%s\"",
			    k != NULL ? k : "?");
	}
	return (rv);
}

static int
seq_dns(struct cf *c, const struct sm_yaml_node *m, void *e)
{
	return (get_dns(c, m, e));
}

static int
seq_k8s(struct cf *c, const struct sm_yaml_node *m, void *e)
{
	return (get_k8s(c, m, e));
}

static int
seq_relabel(struct cf *c, const struct sm_yaml_node *m, void *e)
{
	return (get_relabel(c, m, e));
}

static int
get_job(struct cf *c, const struct sm_yaml_node *m, struct scr_job *j)
{
	int rv = 0;

	j->interval_ms = 15000;
	j->timeout_ms = 10000;
	for (int t = 0; t < SCR_NKINDS; t++)
		j->prof[t].enabled = true;
	if (!sm_yaml_is_map(m))
		return (bad(c, m, "scrape_configs: want mappings"));
	for (size_t i = 0; i < sm_yaml_len(m) && rv == 0; i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(c->y, m, i));
		const struct sm_yaml_node *v = sm_yaml_value(c->y, m, i);

		if (k == NULL) {
			rv = bad(c, v, "a key must be text");
		} else if (strcmp(k, "job_name") == 0) {
			rv = get_str(c, k, v, &j->name);
		} else if (strcmp(k, "scrape_interval") == 0) {
			rv = get_dur(c, k, v, &j->interval_ms);
		} else if (strcmp(k, "scrape_timeout") == 0) {
			rv = get_dur(c, k, v, &j->timeout_ms);
		} else if (strcmp(k, "scheme") == 0) {
			rv = get_str(c, k, v, &j->scheme);
			if (rv == 0 && strcmp(j->scheme, "http") != 0 &&
			    strcmp(j->scheme, "https") != 0)
				rv = bad(c, v, "scheme: http or https");
		} else if (strcmp(k, "tenant_id") == 0) {
			rv = get_str(c, k, v, &j->tenant);
		} else if (strcmp(k, "bearer_token") == 0) {
			rv = get_str(c, k, v, &j->bearer);
		} else if (strcmp(k, "bearer_token_file") == 0) {
			char *path = NULL, tok[4096];

			if ((rv = get_str(c, k, v, &path)) != 0)
				break;
			if (scr_read_secret(path, tok, sizeof(tok), false) < 0) {
				rv = bad(c, v, "bearer_token_file %s: %s", path,
				    strerror(errno));
			} else {
				scr_free_secret(j->bearer);
				if ((j->bearer = dup(tok)) == NULL)
					rv = sm_err_set(c->err, SM_ENOMEM,
					    "out of memory");
			}
			explicit_bzero(tok, sizeof(tok));
			sm_free(path);
		} else if (strcmp(k, "tls_config") == 0) {
			rv = get_tls(c, v, &j->ca_file, &j->insecure);
		} else if (strcmp(k, "profiling_config") == 0) {
			rv = get_pconf(c, v, j);
		} else if (strcmp(k, "static_configs") == 0) {
			rv = get_seq(c, k, v, sizeof(*j->groups),
			    (void **)&j->groups, &j->ngroups, seq_group);
		} else if (strcmp(k, "file_sd_configs") == 0) {
			rv = get_seq(c, k, v, sizeof(*j->fsd), (void **)&j->fsd,
			    &j->nfsd, seq_filesd);
		} else if (strcmp(k, "dns_sd_configs") == 0) {
			rv = get_seq(c, k, v, sizeof(*j->dns), (void **)&j->dns,
			    &j->ndns, seq_dns);
		} else if (strcmp(k, "kubernetes_sd_configs") == 0) {
			rv = get_seq(c, k, v, sizeof(*j->k8s), (void **)&j->k8s,
			    &j->nk8s, seq_k8s);
		} else if (strcmp(k, "relabel_configs") == 0) {
			rv = get_seq(c, k, v, sizeof(*j->rl), (void **)&j->rl,
			    &j->nrl, seq_relabel);
		} else {
			rv = bad(c, v, "unknown key \"%s\" in a scrape config",
			    k);
		}
	}
	if (rv != 0)
		return (rv);
	if (j->name == NULL || j->name[0] == '\0')
		return (bad(c, m, "job_name is required"));
	if (j->interval_ms < 2000)
		return (bad(c, m, "job %s: scrape_interval below 2s", j->name));
	if (j->timeout_ms > j->interval_ms)
		return (bad(c, m, "job %s: scrape_timeout longer than "
		    "scrape_interval", j->name));
	if (j->scheme == NULL && (j->scheme = dup("http")) == NULL)
		return (sm_err_set(c->err, SM_ENOMEM, "out of memory"));
	for (int t = 0; t < SCR_NKINDS; t++) {
		if (j->prof[t].path == NULL && (j->prof[t].path =
		    dup(kind_path[t])) == NULL)
			return (sm_err_set(c->err, SM_ENOMEM, "oom"));
		if (j->prof[t].delta_path == NULL && kind_delta[t] != NULL &&
		    (j->prof[t].delta_path = dup(kind_delta[t])) == NULL)
			return (sm_err_set(c->err, SM_ENOMEM, "oom"));
	}
	return (0);
}

int
scr_config_load(const char *path, struct scr_config **out,
    struct sm_err *err)
{
	struct sm_yaml *y = NULL;
	struct scr_config *cfg;
	const struct sm_yaml_node *root, *sc;
	struct cf c = { NULL, path, err };
	int rv;

	*out = NULL;
	if ((rv = sm_yaml_load_file(path, &y, err)) != 0)
		return (rv);
	c.y = y;
	if ((cfg = sm_calloc(1, sizeof(*cfg))) == NULL) {
		sm_yaml_free(y);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	root = sm_yaml_root(y);
	if (root != NULL && !sm_yaml_is_map(root)) {
		rv = bad(&c, root, "want a mapping with scrape_configs");
		goto out;
	}
	for (size_t i = 0; i < sm_yaml_len(root); i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(y, root, i));

		if (k == NULL || strcmp(k, "scrape_configs") != 0) {
			rv = bad(&c, sm_yaml_value(y, root, i), "unknown key "
			    "\"%s\" (scrape_configs)", k != NULL ? k : "?");
			goto out;
		}
	}
	sc = sm_yaml_get(y, root, "scrape_configs");
	if (sc != NULL && !sm_yaml_is_seq(sc)) {
		rv = bad(&c, sc, "scrape_configs: want a list");
		goto out;
	}
	if ((cfg->jobs = sm_calloc(sm_yaml_len(sc) + 1,
	    sizeof(*cfg->jobs))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < sm_yaml_len(sc); i++) {
		const struct sm_yaml_node *m = sm_yaml_item(y, sc, i);

		if ((rv = get_job(&c, m, &cfg->jobs[cfg->njobs++])) != 0)
			goto out;
		for (uint32_t k = 0; k + 1 < cfg->njobs; k++)
			if (strcmp(cfg->jobs[k].name,
			    cfg->jobs[cfg->njobs - 1].name) == 0) {
				rv = bad(&c, m, "job_name \"%s\" used twice",
				    cfg->jobs[k].name);
				goto out;
			}
	}
out:
	sm_yaml_free(y);
	if (rv != 0) {
		scr_config_free(cfg);
		return (rv);
	}
	*out = cfg;
	return (0);
}

static void
strs_free(char **v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		sm_free(v[i]);
	sm_free(v);
}

void
scr_groups_free(struct scr_group *g, uint32_t n)
{
	for (uint32_t i = 0; g != NULL && i < n; i++) {
		strs_free(g[i].targets, g[i].ntargets);
		for (uint32_t k = 0; k < g[i].nlabels; k++) {
			sm_free((char *)g[i].labels[k].name);
			sm_free((char *)g[i].labels[k].value);
		}
		sm_free(g[i].labels);
	}
	sm_free(g);
}

struct scr_group *
scr_group_add(struct scr_group **gs, uint32_t *n)
{
	struct scr_group *nv = sm_reallocarray(*gs, (size_t)*n + 1,
	    sizeof(*nv));

	if (nv == NULL)
		return (NULL);
	*gs = nv;
	memset(&nv[*n], 0, sizeof(nv[*n]));
	return (&nv[(*n)++]);
}

int
scr_group_label(struct scr_group *g, const char *name, const char *value)
{
	struct sm_label *nv = sm_reallocarray(g->labels, g->nlabels + 1,
	    sizeof(*nv));

	if (nv == NULL)
		return (SM_ENOMEM);
	g->labels = nv;
	nv[g->nlabels].name = sm_strdup(name);
	nv[g->nlabels].value = sm_strdup(value);
	if (nv[g->nlabels].name == NULL || nv[g->nlabels].value == NULL) {
		sm_free((char *)nv[g->nlabels].name);
		sm_free((char *)nv[g->nlabels].value);
		return (SM_ENOMEM);
	}
	g->nlabels++;
	return (0);
}

long
scr_read_secret(const char *path, char *buf, size_t size, bool spaces)
{
	FILE *fp = fopen(path, "re");
	size_t n;

	if (fp == NULL)
		return (-1);
	setvbuf(fp, NULL, _IONBF, 0);
	n = fread(buf, 1, size - 1, fp);
	fclose(fp);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
	    (spaces && buf[n - 1] == ' ')))
		n--;
	buf[n] = '\0';
	return ((long)n);
}

void
scr_free_secret(char *s)
{
	if (s != NULL)
		explicit_bzero(s, strlen(s));
	sm_free(s);
}

void
scr_config_free(struct scr_config *c)
{
	if (c == NULL)
		return;
	for (uint32_t i = 0; i < c->njobs; i++) {
		struct scr_job *j = &c->jobs[i];

		sm_free(j->name);
		sm_free(j->scheme);
		sm_free(j->tenant);
		scr_free_secret(j->bearer);
		sm_free(j->ca_file);
		for (int t = 0; t < SCR_NKINDS; t++) {
			sm_free(j->prof[t].path);
			sm_free(j->prof[t].delta_path);
		}
		scr_groups_free(j->groups, j->ngroups);
		for (uint32_t k = 0; k < j->nfsd; k++)
			strs_free(j->fsd[k].files, j->fsd[k].nfiles);
		sm_free(j->fsd);
		for (uint32_t k = 0; k < j->ndns; k++) {
			strs_free(j->dns[k].names, j->dns[k].nnames);
			sm_free(j->dns[k].server);
		}
		sm_free(j->dns);
		for (uint32_t k = 0; k < j->nk8s; k++) {
			sm_free(j->k8s[k].api_server);
			sm_free(j->k8s[k].kubeconfig);
			sm_free(j->k8s[k].bearer_file);
			sm_free(j->k8s[k].ca_file);
			strs_free(j->k8s[k].namespaces, j->k8s[k].nnamespaces);
		}
		sm_free(j->k8s);
		for (uint32_t k = 0; k < j->nrl; k++) {
			strs_free(j->rl[k].source, j->rl[k].nsource);
			sm_free(j->rl[k].separator);
			sm_free(j->rl[k].target);
			sm_free(j->rl[k].replacement);
			sm_regex_free(j->rl[k].re);
		}
		sm_free(j->rl);
	}
	sm_free(c->jobs);
	sm_free(c);
}

int
scr_filesd_read(const char *path, struct scr_group **out, uint32_t *n,
    struct sm_err *err)
{
	struct sm_yaml *y = NULL;
	const struct sm_yaml_node *root;
	struct cf c = { NULL, path, err };
	int rv;

	*out = NULL;
	*n = 0;
	if ((rv = sm_yaml_load_file(path, &y, err)) != 0)
		return (rv);
	c.y = y;
	root = sm_yaml_root(y);
	if (root != NULL && !sm_yaml_is_seq(root)) {
		rv = bad(&c, root, "want a list of {targets, labels}");
		goto out;
	}
	if ((*out = sm_calloc(sm_yaml_len(root) + 1, sizeof(**out))) ==
	    NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < sm_yaml_len(root) && rv == 0; i++)
		rv = get_group(&c, sm_yaml_item(y, root, i), &(*out)[(*n)++]);
out:
	sm_yaml_free(y);
	if (rv != 0) {
		scr_groups_free(*out, *n);
		*out = NULL;
		*n = 0;
	}
	return (rv);
}

/* --- labels and relabeling ------------------------------------------------ */

const char *
scr_labels_get(const struct scr_labels *ls, const char *name)
{
	for (uint32_t i = 0; i < ls->n; i++)
		if (strcmp(ls->v[i].name, name) == 0)
			return (ls->v[i].value);
	return (NULL);
}

static void
labels_del(struct scr_labels *ls, uint32_t i)
{
	sm_free((char *)ls->v[i].name);
	sm_free((char *)ls->v[i].value);
	ls->v[i] = ls->v[--ls->n];
}

/* Set (or with value "" remove, as Prometheus does) a label. */
int
scr_labels_set(struct scr_labels *ls, const char *name, const char *value)
{
	char *v;

	for (uint32_t i = 0; i < ls->n; i++) {
		if (strcmp(ls->v[i].name, name) != 0)
			continue;
		if (value[0] == '\0') {
			labels_del(ls, i);
			return (0);
		}
		if ((v = sm_strdup(value)) == NULL)
			return (SM_ENOMEM);
		sm_free((char *)ls->v[i].value);
		ls->v[i].value = v;
		return (0);
	}
	if (value[0] == '\0')
		return (0);
	if (SM_GROW(ls->v, ls->cap, (size_t)ls->n + 1, 16) != 0)
		return (SM_ENOMEM);
	ls->v[ls->n].name = sm_strdup(name);
	ls->v[ls->n].value = sm_strdup(value);
	if (ls->v[ls->n].name == NULL || ls->v[ls->n].value == NULL) {
		sm_free((char *)ls->v[ls->n].name);
		sm_free((char *)ls->v[ls->n].value);
		return (SM_ENOMEM);
	}
	ls->n++;
	return (0);
}

void
scr_labels_free(struct scr_labels *ls)
{
	while (ls->n > 0)
		labels_del(ls, 0);
	sm_free(ls->v);
	memset(ls, 0, sizeof(*ls));
}

/* The replacement with $N / ${N} expanded from the match of s. */
static int
expand(const char *rep, const char *s, const struct sm_regex_md *md,
    struct sm_buf *out)
{
	for (const char *p = rep; *p != '\0'; p++) {
		size_t a, b;
		unsigned g = 0;
		const char *q = p + 1;
		bool brace = *q == '{';

		if (*p != '$' || (!brace && (*q < '0' || *q > '9'))) {
			sm_buf_putc(out, *p);
			continue;
		}
		if (brace)
			q++;
		while (*q >= '0' && *q <= '9')
			g = g * 10 + (unsigned)(*q++ - '0');
		if (brace) {
			if (*q != '}') {
				sm_buf_putc(out, *p);
				continue;
			}
			q++;
		}
		if (sm_regex_group(md, g, &a, &b))
			sm_buf_append(out, s + a, b - a);
		p = q - 1;
	}
	return (sm_buf_error(out));
}

int
scr_relabel(const struct scr_job *j, struct scr_labels *ls, bool *keep,
    struct sm_err *err)
{
	struct sm_regex_md *md = sm_regex_md_create(16);
	struct sm_buf val = SM_BUF_INIT, tmp = SM_BUF_INIT;
	int rv = 0;

	*keep = true;
	if (md == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t r = 0; r < j->nrl && *keep && rv == 0; r++) {
		const struct scr_relabel *rl = &j->rl[r];
		int m;

		sm_buf_reset(&val);
		for (uint32_t k = 0; k < rl->nsource; k++) {
			const char *v = scr_labels_get(ls, rl->source[k]);

			if (k > 0)
				sm_buf_puts(&val, rl->separator);
			sm_buf_puts(&val, v != NULL ? v : "");
		}
		if (sm_buf_error(&val) != 0) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			break;
		}
		if (rl->action == SCR_RL_LABELMAP) {
			/* every label whose name matches: copied to the
			 * replacement's name */
			uint32_t n = ls->n;

			for (uint32_t i = 0; i < n && rv == 0; i++) {
				const char *name = ls->v[i].name;

				if ((m = sm_regex_match(rl->re, md, name,
				    strlen(name), err)) < 0) {
					rv = m;
					break;
				}
				if (m == 0)
					continue;
				sm_buf_reset(&tmp);
				if (expand(rl->replacement, name, md,
				    &tmp) != 0 || (rv = scr_labels_set(ls,
				    tmp.b != NULL ? tmp.b : "",
				    ls->v[i].value)) != 0)
					rv = sm_err_set(err, SM_ENOMEM,
					    "out of memory");
			}
			continue;
		}
		if ((m = sm_regex_match(rl->re, md, val.b != NULL ? val.b : "",
		    val.len, err)) < 0) {
			rv = m;
			break;
		}
		switch (rl->action) {
		case SCR_RL_KEEP:
			*keep = m == 1;
			break;
		case SCR_RL_DROP:
			*keep = m == 0;
			break;
		default:        /* replace */
			if (m == 0)
				break;
			sm_buf_reset(&tmp);
			if (expand(rl->replacement, val.b != NULL ? val.b : "",
			    md, &tmp) != 0 || (rv = scr_labels_set(ls,
			    rl->target, tmp.b != NULL ? tmp.b : "")) != 0)
				rv = sm_err_set(err, SM_ENOMEM,
				    "out of memory");
			break;
		}
	}
	sm_buf_fini(&val);
	sm_buf_fini(&tmp);
	sm_regex_md_free(md);
	return (rv);
}
