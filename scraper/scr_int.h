/*
 * scr_int.h -- the scraper's internals shared by its files: the parsed
 * scrape configuration (config.c) and relabeling.  Not for other
 * components: they see scraper.h.
 *
 * Configuration file (-scrape.config-file), Prometheus' shape where it
 * has one:
 *
 *   scrape_configs:
 *     - job_name: shop                    # required, unique
 *       scrape_interval: 15s              # default 15s (>= 2s)
 *       scrape_timeout: 10s               # default 10s, <= the interval
 *       scheme: http                      # or https
 *       tenant_id: team-a                 # X-Scope-OrgID of the uploads
 *       bearer_token: ...                 # or bearer_token_file: path
 *       tls_config: { ca_file: path, insecure_skip_verify: false }
 *       profiling_config:                 # Pyroscope's keys
 *         pprof_config:
 *           process_cpu: { enabled: true, path: /debug/pprof/profile }
 *           memory:      { enabled: true, path: /debug/pprof/heap,
 *                          delta_path: /debug/pprof/delta_heap }
 *           goroutines:  { enabled: true, path: /debug/pprof/goroutine }
 *           mutex:       { enabled: true, path: /debug/pprof/mutex,
 *                          delta_path: /debug/pprof/delta_mutex }
 *           block:       { enabled: true, path: /debug/pprof/block,
 *                          delta_path: /debug/pprof/delta_block }
 *       static_configs:
 *         - targets: ["10.0.0.1:6060"]
 *           labels: { env: prod }
 *       dns_sd_configs:
 *         - names: [_pprof._tcp.shop.svc]     # SRV by default
 *           type: SRV                         # or A, AAAA (with port)
 *           port: 6060
 *           refresh_interval: 30s
 *           dns_server: 127.0.0.1:8600        # optional (Consul's DNS)
 *       kubernetes_sd_configs:                # pods annotated for
 *         - role: pod                         # profiling (scr_k8s_resolve)
 *           namespaces: { names: [shop] }
 *           refresh_interval: 30s
 *       file_sd_configs:
 *         - files: [/etc/smolder/targets.json]  # glob(3) patterns;
 *           refresh_interval: 30s                 # JSON or YAML
 *       relabel_configs:                  # replace, keep, drop, labelmap
 *         - source_labels: [__address__]
 *           regex: "(.*):.*"
 *           target_label: host
 *
 * Every profile is on by default (the paths above); process_cpu is
 * fetched with ?seconds=N, N = the interval less one second (at most 60),
 * its timeout N plus scrape_timeout.  A target's labels before
 * relabeling are its static or file labels, job, __address__ and
 * __scheme__; after it, labels starting with "__" are dropped, instance
 * defaults to __address__ and service_name to the job name.  Unknown
 * keys are an error naming the key and line (a typo must not silently
 * turn a profile off).
 */
#ifndef SCR_INT_H
#define SCR_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/labels.h"
#include "common/regex.h"
#include "common/sm.h"

enum scr_kind {
	SCR_CPU,
	SCR_MEMORY,
	SCR_GOROUTINES,
	SCR_MUTEX,
	SCR_BLOCK,
	SCR_NKINDS
};

/* The profile names of the configuration, and each one's __name__. */
extern const char *const scr_kind_name[SCR_NKINDS];
extern const char *const scr_kind_metric[SCR_NKINDS];

struct scr_pconf {
	bool enabled;
	char *path;
	char *delta_path;        /* godeltaprof's, tried first; NULL none */
};

enum scr_rl_action { SCR_RL_REPLACE, SCR_RL_KEEP, SCR_RL_DROP,
	SCR_RL_LABELMAP };

struct scr_relabel {
	enum scr_rl_action action;
	char **source;
	uint32_t nsource;
	char *separator;
	char *target;
	char *replacement;
	struct sm_regex *re;     /* whole-string; default (.*) */
};

struct scr_group {               /* static_configs entry */
	char **targets;
	uint32_t ntargets;
	struct sm_label *labels;
	uint32_t nlabels;
};

struct scr_filesd {
	char **files;            /* globs */
	uint32_t nfiles;
	int64_t refresh_ms;
};

/* dns_sd_configs entry. */
enum scr_dns_type { SCR_DNS_SRV, SCR_DNS_A, SCR_DNS_AAAA };

struct scr_dnssd {
	char **names;
	uint32_t nnames;
	enum scr_dns_type type;
	int64_t port;            /* A and AAAA: the targets' port */
	int64_t refresh_ms;
	char *server;            /* host:port of a DNS server; NULL: the
				  * system's resolv.conf */
};

/*
 * Resolve a dns_sd_configs entry into target groups (heap;
 * scr_groups_free): one group per name, its targets host:port (SRV: each
 * record's target and port; A/AAAA: each address and `port`), labels
 * __meta_dns_name and, for SRV, __meta_dns_srv_record_target and
 * __meta_dns_srv_record_port.  A name with no records is an empty group;
 * a failed lookup fails the whole entry (SM_EUNAVAIL with the name):
 * the caller keeps nothing of it this round.
 */
int scr_dns_resolve(const struct scr_dnssd *d, struct scr_group **out,
    uint32_t *n, struct sm_err *err);

/*
 * kubernetes_sd_configs entry (role pod).  Pods are listed from the API
 * server every refresh_interval: in-cluster (KUBERNETES_SERVICE_HOST and
 * _PORT, the service account's token and CA) unless api_server, or a
 * kubeconfig_file's current context (its server, CA file and token), is
 * given.
 */
struct scr_k8ssd {
	char *api_server;        /* base URL; NULL: in-cluster */
	char *kubeconfig;        /* NULL: none */
	char *bearer_file;       /* NULL: the service account's */
	char *ca_file;           /* NULL: the service account's */
	bool insecure;
	char **namespaces;       /* none: every namespace */
	uint32_t nnamespaces;
	int64_t refresh_ms;
};

/*
 * The pods of a kubernetes_sd_configs entry that ask to be scraped, as
 * target groups (heap; scr_groups_free), one per pod: a Running pod with
 * an IP and the annotation pyroscope.io/scrape: "true" (port
 * pyroscope.io/port) or coroot.com/profile-scrape: "true" (port
 * coroot.com/profile-port), else its first container port; labels
 * __meta_kubernetes_namespace, _pod_name, _pod_ip, _pod_node_name,
 * _pod_container_name (the first container), _pod_label_<name> and
 * _pod_annotation_<name> (names with other bytes than letters, digits
 * and '_' made '_'), and service_name from
 * pyroscope.io/application-name, else namespace/container.  Per-profile
 * annotations pyroscope.io/profile-<p>-path and
 * pyroscope.io/profile-<p>-enabled (p: cpu, mem, goroutines, mutex,
 * block) become __profile_path_<name> and __profile_enabled_<name>
 * labels, which the scraper honours for that target.  0 or an error
 * (SM_EUNAVAIL naming the API call).
 */
int scr_k8s_resolve(const struct scr_k8ssd *k, struct scr_group **out,
    uint32_t *n, struct sm_err *err);

struct scr_job {
	char *name;
	int64_t interval_ms, timeout_ms;
	char *scheme;
	char *tenant;            /* NULL: none sent */
	char *bearer;            /* the token itself; NULL none */
	char *ca_file;
	bool insecure;
	struct scr_pconf prof[SCR_NKINDS];
	struct scr_group *groups;
	uint32_t ngroups;
	struct scr_filesd *fsd;
	uint32_t nfsd;
	struct scr_dnssd *dns;
	uint32_t ndns;
	struct scr_k8ssd *k8s;
	uint32_t nk8s;
	struct scr_relabel *rl;
	uint32_t nrl;
};

struct scr_config {
	struct scr_job *jobs;
	uint32_t njobs;
	uint32_t refs;           /* the scraper's, under its mutex */
};

/* Parse the file.  0, SM_EINVAL (naming key and line), SM_EIO,
 * SM_ENOMEM. */
int scr_config_load(const char *path, struct scr_config **out,
    struct sm_err *err);
void scr_config_free(struct scr_config *c);

/*
 * Read a file discovery file (a list of {targets: [...], labels: {...}},
 * JSON or YAML) into groups (heap; scr_groups_free).  0 or an error.
 */
int scr_filesd_read(const char *path, struct scr_group **out, uint32_t *n,
    struct sm_err *err);
void scr_groups_free(struct scr_group *g, uint32_t n);

/* A new empty group at the end of gs[0..*n), as discovery builds its
 * answer: NULL when out of memory, with *gs and *n as they were. */
struct scr_group *scr_group_add(struct scr_group **gs, uint32_t *n);

/* Append the label name=value (both copied) to g: 0 or SM_ENOMEM, with
 * g as it was. */
int scr_group_label(struct scr_group *g, const char *name,
    const char *value);

/*
 * Read a small file (a token, a key) into buf[0..size), NUL-terminated
 * and cut to fit, without its trailing line ends, and trailing spaces
 * too when `spaces`: its length, or -1 with errno set when it does not
 * open.  Unbuffered: no copy of the secret is left in a stdio buffer.
 * The caller wipes buf (explicit_bzero) once it has copied it, and frees
 * its heap copy with scr_free_secret.
 */
long scr_read_secret(const char *path, char *buf, size_t size, bool spaces);

/* Zero a NUL-terminated heap secret where the compiler may not drop it,
 * then free it (NULL: nothing). */
void scr_free_secret(char *s);

/*
 * A target's labels through the job's relabel_configs.  `ls` (heap
 * strings, *n of them, room for cap) is rewritten in place; *keep false
 * when a keep or drop rule dropped the target.  0, SM_ENOMEM, SM_ELIMIT
 * (a regex limit).
 */
struct scr_labels {
	struct sm_label *v;      /* heap names and values */
	uint32_t n, cap;
};
int scr_labels_set(struct scr_labels *ls, const char *name,
    const char *value);
const char *scr_labels_get(const struct scr_labels *ls, const char *name);
void scr_labels_free(struct scr_labels *ls);
int scr_relabel(const struct scr_job *j, struct scr_labels *ls, bool *keep,
    struct sm_err *err);

#endif /* SCR_INT_H */
