/*
 * k8s.c -- Kubernetes pod discovery for the scraper (scr_k8s_resolve,
 * scr_int.h): the API server's PodList (GET /api/v1/pods, or
 * /api/v1/namespaces/<ns>/pods per namespace), read as JSON through the
 * YAML wrapper (common/yaml.h: YAML 1.1 reads the JSON the API server
 * writes), polled every refresh_interval.
 *
 * Credentials, the first that applies: the entry's api_server (with its
 * bearer_token_file and tls_config); a kubeconfig_file's current context
 * (the cluster's server, certificate-authority and
 * insecure-skip-tls-verify, the user's token or tokenFile); in-cluster
 * (https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT with the
 * service account's token and ca.crt).  Client certificates are not
 * served: use a token.
 */
#include "scr_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/httpc.h"
#include "common/yaml.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* The API server to ask, and how. */
struct k8s_api {
	char *server;
	char *token;
	char *ca_file;
	bool insecure;
};

static void
api_fini(struct k8s_api *a)
{
	sm_free(a->server);
	scr_free_secret(a->token);
	sm_free(a->ca_file);
	memset(a, 0, sizeof(*a));
}

static int
read_token(const char *path, char **out, struct sm_err *err)
{
	char buf[8192];

	if (scr_read_secret(path, buf, sizeof(buf), true) < 0)
		return (sm_err_set(err, SM_EIO, "token %s: %s", path,
		    strerror(errno)));
	*out = sm_strdup(buf);
	explicit_bzero(buf, sizeof(buf));
	if (*out == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	return (0);
}

static const struct sm_yaml_node *
named(const struct sm_yaml *y, const struct sm_yaml_node *list,
    const char *name)
{
	for (size_t i = 0; i < sm_yaml_len(list); i++) {
		const struct sm_yaml_node *it = sm_yaml_item(y, list, i);
		const char *n = sm_yaml_scalar(sm_yaml_get(y, it, "name"));

		if (n != NULL && strcmp(n, name) == 0)
			return (it);
	}
	return (NULL);
}

static int
from_kubeconfig(const char *path, struct k8s_api *a, struct sm_err *err)
{
	struct sm_yaml *y;
	const struct sm_yaml_node *root, *ctx, *cl, *us;
	const char *cc, *s;
	int rv;

	if ((rv = sm_yaml_load_file(path, &y, err)) != 0)
		return (rv);
	root = sm_yaml_root(y);
	cc = sm_yaml_scalar(sm_yaml_get(y, root, "current-context"));
	ctx = cc != NULL ? sm_yaml_get(y, named(y, sm_yaml_get(y, root,
	    "contexts"), cc), "context") : NULL;
	s = sm_yaml_scalar(sm_yaml_get(y, ctx, "cluster"));
	cl = s != NULL ? sm_yaml_get(y, named(y, sm_yaml_get(y, root,
	    "clusters"), s), "cluster") : NULL;
	s = sm_yaml_scalar(sm_yaml_get(y, ctx, "user"));
	us = s != NULL ? sm_yaml_get(y, named(y, sm_yaml_get(y, root,
	    "users"), s), "user") : NULL;
	if (cl == NULL || sm_yaml_scalar(sm_yaml_get(y, cl, "server")) ==
	    NULL) {
		sm_yaml_free(y);
		return (sm_err_set(err, SM_EINVAL, "kubeconfig %s: no cluster "
		    "server for its current-context", path));
	}
	a->server = sm_strdup(sm_yaml_scalar(sm_yaml_get(y, cl, "server")));
	if ((s = sm_yaml_scalar(sm_yaml_get(y, cl,
	    "certificate-authority"))) != NULL)
		a->ca_file = sm_strdup(s);
	s = sm_yaml_scalar(sm_yaml_get(y, cl, "insecure-skip-tls-verify"));
	a->insecure = s != NULL && strcmp(s, "true") == 0;
	rv = 0;
	if ((s = sm_yaml_scalar(sm_yaml_get(y, us, "token"))) != NULL)
		a->token = sm_strdup(s);
	else if ((s = sm_yaml_scalar(sm_yaml_get(y, us, "tokenFile"))) != NULL)
		rv = read_token(s, &a->token, err);
	sm_yaml_free(y);
	if (rv == 0 && a->server == NULL)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	return (rv);
}

static int
api_of(const struct scr_k8ssd *k, struct k8s_api *a, struct sm_err *err)
{
	int rv = 0;

	memset(a, 0, sizeof(*a));
	if (k->api_server != NULL) {
		a->server = sm_strdup(k->api_server);
		if (k->bearer_file != NULL)
			rv = read_token(k->bearer_file, &a->token, err);
	} else if (k->kubeconfig != NULL) {
		rv = from_kubeconfig(k->kubeconfig, a, err);
	} else {
		const char *h = getenv("KUBERNETES_SERVICE_HOST");
		const char *p = getenv("KUBERNETES_SERVICE_PORT");
		char buf[300];

		if (h == NULL || p == NULL)
			return (sm_err_set(err, SM_EINVAL, "kubernetes_sd: not "
			    "in a cluster (no KUBERNETES_SERVICE_HOST): give "
			    "api_server or kubeconfig_file"));
		(void)snprintf(buf, sizeof(buf), strchr(h, ':') != NULL ?
		    "https://[%s]:%s" : "https://%s:%s", h, p);
		a->server = sm_strdup(buf);
		rv = read_token(k->bearer_file != NULL ? k->bearer_file :
		    SA_DIR "/token", &a->token, err);
		if (k->ca_file == NULL)
			a->ca_file = sm_strdup(SA_DIR "/ca.crt");
	}
	if (rv == 0 && k->ca_file != NULL) {
		sm_free(a->ca_file);
		a->ca_file = sm_strdup(k->ca_file);
	}
	a->insecure |= k->insecure;
	if (rv == 0 && a->server == NULL)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	if (rv != 0)
		api_fini(a);
	else {
		size_t n = strlen(a->server);

		while (n > 0 && a->server[n - 1] == '/')
			a->server[--n] = '\0';
	}
	return (rv);
}

/* --- pods to groups ------------------------------------------------------- */

/* prefix + name with bytes other than letters, digits and '_' as '_'. */
static int
glabel_meta(struct scr_group *g, const char *prefix, const char *name,
    const char *value)
{
	char buf[512];
	size_t o = strlen(prefix);

	if (o >= sizeof(buf))
		return (0);
	memcpy(buf, prefix, o);
	for (const char *p = name; *p != '\0' && o + 1 < sizeof(buf); p++) {
		char c = *p;

		buf[o++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_' ? c : '_';
	}
	buf[o] = '\0';
	return (scr_group_label(g, buf, value));
}

static const char *
annot(const struct sm_yaml *y, const struct sm_yaml_node *ann,
    const char *key)
{
	return (sm_yaml_scalar(sm_yaml_get(y, ann, key)));
}

/* Pyroscope's annotation names of the profiles, and the scraper's. */
static const struct {
	const char *annot;
	const char *name;
} pprofiles[] = {
	{ "cpu", "process_cpu" }, { "mem", "memory" },
	{ "memory", "memory" }, { "goroutines", "goroutines" },
	{ "goroutine", "goroutines" }, { "mutex", "mutex" },
	{ "block", "block" },
};

/* One pod: a group when it asks to be scraped (appended to *gs). */
static int
pod(const struct sm_yaml *y, const struct sm_yaml_node *it,
    struct scr_group **gs, uint32_t *ng)
{
	const struct sm_yaml_node *md = sm_yaml_get(y, it, "metadata");
	const struct sm_yaml_node *spec = sm_yaml_get(y, it, "spec");
	const struct sm_yaml_node *st = sm_yaml_get(y, it, "status");
	const struct sm_yaml_node *ann = sm_yaml_get(y, md, "annotations");
	const struct sm_yaml_node *lab = sm_yaml_get(y, md, "labels");
	const struct sm_yaml_node *c0 = sm_yaml_item(y, sm_yaml_get(y, spec,
	    "containers"), 0);
	const char *ns = sm_yaml_scalar(sm_yaml_get(y, md, "namespace"));
	const char *name = sm_yaml_scalar(sm_yaml_get(y, md, "name"));
	const char *phase = sm_yaml_scalar(sm_yaml_get(y, st, "phase"));
	const char *ip = sm_yaml_scalar(sm_yaml_get(y, st, "podIP"));
	const char *node = sm_yaml_scalar(sm_yaml_get(y, spec, "nodeName"));
	const char *cname = sm_yaml_scalar(sm_yaml_get(y, c0, "name"));
	const char *py = annot(y, ann, "pyroscope.io/scrape");
	const char *co = annot(y, ann, "coroot.com/profile-scrape");
	const char *port = NULL, *svc;
	struct scr_group *g;
	char target[300], sbuf[512];
	int rv = 0;

	if (ns == NULL || name == NULL || phase == NULL ||
	    strcmp(phase, "Running") != 0 || ip == NULL || ip[0] == '\0')
		return (0);
	if (py != NULL && strcmp(py, "true") == 0)
		port = annot(y, ann, "pyroscope.io/port");
	else if (co != NULL && strcmp(co, "true") == 0)
		port = annot(y, ann, "coroot.com/profile-port");
	else
		return (0);             /* not asked to be scraped */
	if (port == NULL)
		port = sm_yaml_scalar(sm_yaml_get(y, sm_yaml_item(y,
		    sm_yaml_get(y, c0, "ports"), 0), "containerPort"));
	if (port == NULL)
		return (0);             /* nowhere to scrape */
	if ((g = scr_group_add(gs, ng)) == NULL)
		return (SM_ENOMEM);
	(void)snprintf(target, sizeof(target), strchr(ip, ':') != NULL ?
	    "[%s]:%s" : "%s:%s", ip, port);
	if ((g->targets = sm_calloc(2, sizeof(*g->targets))) == NULL ||
	    (g->targets[0] = sm_strdup(target)) == NULL)
		return (SM_ENOMEM);
	g->ntargets = 1;
	svc = annot(y, ann, "pyroscope.io/application-name");
	if (svc == NULL) {
		(void)snprintf(sbuf, sizeof(sbuf), "%s/%s", ns,
		    cname != NULL ? cname : name);
		svc = sbuf;
	}
	rv |= scr_group_label(g, "service_name", svc);
	rv |= scr_group_label(g, "__meta_kubernetes_namespace", ns);
	rv |= scr_group_label(g, "__meta_kubernetes_pod_name", name);
	rv |= scr_group_label(g, "__meta_kubernetes_pod_ip", ip);
	if (node != NULL)
		rv |= scr_group_label(g, "__meta_kubernetes_pod_node_name",
		    node);
	if (cname != NULL)
		rv |= scr_group_label(g,
		    "__meta_kubernetes_pod_container_name", cname);
	for (size_t i = 0; i < sm_yaml_len(lab); i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(y, lab, i));
		const char *v = sm_yaml_scalar(sm_yaml_value(y, lab, i));

		if (k != NULL && v != NULL)
			rv |= glabel_meta(g, "__meta_kubernetes_pod_label_", k,
			    v);
	}
	for (size_t i = 0; i < sm_yaml_len(ann); i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(y, ann, i));
		const char *v = sm_yaml_scalar(sm_yaml_value(y, ann, i));

		if (k == NULL || v == NULL)
			continue;
		rv |= glabel_meta(g, "__meta_kubernetes_pod_annotation_", k,
		    v);
		for (size_t p = 0; p < SM_ARRAY_LEN(pprofiles); p++) {
			char want[128], lname[128];

			(void)snprintf(want, sizeof(want),
			    "pyroscope.io/profile-%s-path", pprofiles[p].annot);
			if (strcmp(k, want) == 0) {
				(void)snprintf(lname, sizeof(lname),
				    "__profile_path_%s", pprofiles[p].name);
				rv |= scr_group_label(g, lname, v);
			}
			(void)snprintf(want, sizeof(want),
			    "pyroscope.io/profile-%s-enabled",
			    pprofiles[p].annot);
			if (strcmp(k, want) == 0) {
				(void)snprintf(lname, sizeof(lname),
				    "__profile_enabled_%s", pprofiles[p].name);
				rv |= scr_group_label(g, lname, v);
			}
		}
	}
	return (rv != 0 ? SM_ENOMEM : 0);
}

/* GET one PodList and add its scrapable pods. */
static int
list_pods(const struct k8s_api *a, const char *ns, struct scr_group **gs,
    uint32_t *ng, struct sm_err *err)
{
	struct sm_buf url = SM_BUF_INIT, body = SM_BUF_INIT;
	struct sm_httpc_req rq = { 0 };
	char auth[8300];
	const char *hdr[3] = { "Accept: application/json", NULL, NULL };
	struct sm_yaml *y = NULL;
	const struct sm_yaml_node *items;
	int status = 0, rv;

	if (ns != NULL)
		sm_buf_printf(&url, "%s/api/v1/namespaces/%s/pods", a->server,
		    ns);
	else
		sm_buf_printf(&url, "%s/api/v1/pods", a->server);
	if (a->token != NULL && a->token[0] != '\0') {
		(void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
		    a->token);
		hdr[1] = auth;
	}
	rq.url = url.b;
	rq.headers = hdr;
	rq.timeout_ms = 10000;
	rq.ca_file = a->ca_file;
	rq.insecure = a->insecure;
	rq.max_answer = SM_YAML_MAX_BYTES;
	if ((rv = sm_httpc_get(&rq, &status, &body, err)) != 0) {
		sm_err_prefix(err, "kubernetes_sd: GET %s", url.b);
		goto out;
	}
	if (status != 200) {
		rv = sm_err_set(err, SM_EUNAVAIL, "kubernetes_sd: GET %s: "
		    "HTTP %d %.200s", url.b, status, body.b != NULL ? body.b :
		    "");
		goto out;
	}
	if ((rv = sm_yaml_load(body.b != NULL ? body.b : "", body.len, &y,
	    err)) != 0) {
		sm_err_prefix(err, "kubernetes_sd: %s: not a PodList", url.b);
		goto out;
	}
	items = sm_yaml_get(y, sm_yaml_root(y), "items");
	for (size_t i = 0; i < sm_yaml_len(items) && rv == 0; i++)
		if (pod(y, sm_yaml_item(y, items, i), gs, ng) != 0)
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	sm_yaml_free(y);
	sm_buf_fini(&url);
	sm_buf_fini(&body);
	return (rv);
}

int
scr_k8s_resolve(const struct scr_k8ssd *k, struct scr_group **out,
    uint32_t *n, struct sm_err *err)
{
	struct k8s_api a;
	struct scr_group *gs = NULL;
	uint32_t ng = 0;
	int rv;

	*out = NULL;
	*n = 0;
	if ((rv = api_of(k, &a, err)) != 0)
		return (rv);
	if (k->nnamespaces == 0)
		rv = list_pods(&a, NULL, &gs, &ng, err);
	for (uint32_t i = 0; i < k->nnamespaces && rv == 0; i++)
		rv = list_pods(&a, k->namespaces[i], &gs, &ng, err);
	api_fini(&a);
	if (rv != 0) {
		scr_groups_free(gs, ng);
		return (rv);
	}
	*out = gs;
	*n = ng;
	return (0);
}
