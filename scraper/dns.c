/*
 * dns.c -- DNS discovery for the scraper (scr_dns_resolve, scr_int.h):
 * SRV, A and AAAA records asked with the C library's resolver (libresolv's
 * res_nquery, so the answer's records themselves are read, as Prometheus'
 * dns_sd does, and one lookup path serves every type).
 *
 * The resolver is the system's (/etc/resolv.conf), or the dns_server of
 * the entry (an IPv4 host:port: Consul's DNS interface listens on 8600),
 * with 2 s per try and 2 tries, so one dead server delays discovery --
 * which runs with no lock held -- by seconds, not minutes.  NXDOMAIN and
 * "no records of that type" are an empty answer; anything else fails the
 * lookup.
 */
#include "scr_int.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netinet/in.h>
#include <netdb.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DNS_ANSWER_MAX 65536

static int
add_target(struct scr_group *g, const char *host, long port)
{
	char buf[NS_MAXDNAME + 16];
	char **nv;

	if (strchr(host, ':') != NULL)
		(void)snprintf(buf, sizeof(buf), "[%s]:%ld", host, port);
	else
		(void)snprintf(buf, sizeof(buf), "%s:%ld", host, port);
	if ((nv = sm_reallocarray(g->targets, g->ntargets + 2,
	    sizeof(*nv))) == NULL)
		return (SM_ENOMEM);
	g->targets = nv;
	if ((g->targets[g->ntargets] = sm_strdup(buf)) == NULL)
		return (SM_ENOMEM);
	g->ntargets++;
	return (0);
}

/* The resolver state: the system's, or one server. */
static int
res_setup(struct __res_state *st, const char *server, struct sm_err *err)
{
	memset(st, 0, sizeof(*st));
	if (res_ninit(st) != 0)
		return (sm_err_set(err, SM_EUNAVAIL, "resolver: cannot read "
		    "the system configuration"));
	st->retrans = 2;
	st->retry = 2;
	if (server != NULL) {
		char host[64];
		const char *colon = strrchr(server, ':');
		long port = colon != NULL ? strtol(colon + 1, NULL, 10) : 53;
		size_t hl = colon != NULL ? (size_t)(colon - server) :
		    strlen(server);
		struct sockaddr_in sa;

		memset(&sa, 0, sizeof(sa));
		sa.sin_family = AF_INET;
		if (hl >= sizeof(host) || port < 1 || port > 65535) {
			res_nclose(st);
			return (sm_err_set(err, SM_EINVAL, "dns_server \"%s\": "
			    "want an IPv4 host:port", server));
		}
		memcpy(host, server, hl);
		host[hl] = '\0';
		if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
			res_nclose(st);
			return (sm_err_set(err, SM_EINVAL, "dns_server \"%s\": "
			    "want an IPv4 host:port", server));
		}
		sa.sin_port = htons((uint16_t)port);
		st->nsaddr_list[0] = sa;
		st->nscount = 1;
	}
	return (0);
}

/*
 * Ask for the records of `type` (ns_t_a, ns_t_aaaa or ns_t_srv) of name
 * into ans (DNS_ANSWER_MAX bytes) and parse the answer into *msg; *none
 * when there are none (NXDOMAIN or no records of that type: an empty
 * answer, not a failure).  0 or SM_EUNAVAIL.
 */
static int
query(struct __res_state *st, const char *name, int type,
    unsigned char *ans, ns_msg *msg, bool *none, struct sm_err *err)
{
	int n = res_nquery(st, name, ns_c_in, type, ans, DNS_ANSWER_MAX);

	*none = false;
	if (n < 0) {
		if (st->res_h_errno == HOST_NOT_FOUND ||
		    st->res_h_errno == NO_DATA) {
			*none = true;
			return (0);
		}
		return (sm_err_set(err, SM_EUNAVAIL, "DNS %s %s: %s",
		    type == ns_t_srv ? "SRV" : type == ns_t_a ? "A" : "AAAA",
		    name, hstrerror(st->res_h_errno)));
	}
	/* The A and AAAA message has never named the type; kept as is. */
	if (ns_initparse(ans, n, msg) != 0)
		return (sm_err_set(err, SM_EUNAVAIL, "DNS %s%s: an answer that "
		    "does not parse", type == ns_t_srv ? "SRV " : "", name));
	return (0);
}

/* The A or AAAA records of one name into group g. */
static int
lookup(struct __res_state *st, const struct scr_dnssd *d, const char *name,
    struct scr_group *g, struct sm_err *err)
{
	int type = d->type == SCR_DNS_A ? ns_t_a : ns_t_aaaa;
	unsigned char *ans = sm_malloc(DNS_ANSWER_MAX);
	ns_msg msg;
	bool none;
	int rv = 0;

	if (ans == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (scr_group_label(g, "__meta_dns_name", name) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	if ((rv = query(st, name, type, ans, &msg, &none, err)) != 0 || none)
		goto out;       /* none: an empty group */
	for (int i = 0; i < ns_msg_count(msg, ns_s_an) && rv == 0; i++) {
		ns_rr rr;
		char host[NS_MAXDNAME];

		if (ns_parserr(&msg, ns_s_an, i, &rr) != 0)
			break;
		if ((int)ns_rr_type(rr) != type)
			continue;       /* a CNAME on the way */
		if (inet_ntop(type == ns_t_a ? AF_INET : AF_INET6,
		    ns_rr_rdata(rr), host, sizeof(host)) == NULL ||
		    ns_rr_rdlen(rr) != (type == ns_t_a ? 4 : 16))
			continue;
		if (add_target(g, host, (long)d->port) != 0)
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	}
out:
	sm_free(ans);
	return (rv);
}

/* SRV: each record its own group (its own target and port labels). */
static int
lookup_srv(struct __res_state *st, const struct scr_dnssd *d,
    const char *name, struct scr_group **gs, uint32_t *ng,
    struct sm_err *err)
{
	unsigned char *ans = sm_malloc(DNS_ANSWER_MAX);
	ns_msg msg;
	bool none;
	int rv = 0;

	(void)d;
	if (ans == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = query(st, name, ns_t_srv, ans, &msg, &none, err)) != 0 ||
	    none)
		goto out;
	for (int i = 0; i < ns_msg_count(msg, ns_s_an) && rv == 0; i++) {
		struct scr_group *g;
		const unsigned char *rd;
		char host[NS_MAXDNAME], pbuf[16];
		long port;
		ns_rr rr;

		if (ns_parserr(&msg, ns_s_an, i, &rr) != 0)
			break;
		if ((int)ns_rr_type(rr) != (int)ns_t_srv || ns_rr_rdlen(rr) < 7)
			continue;
		rd = ns_rr_rdata(rr);
		if (dn_expand(ns_msg_base(msg), ns_msg_end(msg), rd + 6, host,
		    sizeof(host)) < 0)
			continue;
		port = (long)rd[4] << 8 | rd[5];
		(void)snprintf(pbuf, sizeof(pbuf), "%ld", port);
		if ((g = scr_group_add(gs, ng)) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			break;
		}
		if (add_target(g, host, port) != 0 ||
		    scr_group_label(g, "__meta_dns_name", name) != 0 ||
		    scr_group_label(g, "__meta_dns_srv_record_target",
		    host) != 0 ||
		    scr_group_label(g, "__meta_dns_srv_record_port", pbuf) != 0)
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	}
out:
	sm_free(ans);
	return (rv);
}

int
scr_dns_resolve(const struct scr_dnssd *d, struct scr_group **out,
    uint32_t *n, struct sm_err *err)
{
	struct __res_state st;
	struct scr_group *gs = NULL, *g;
	uint32_t ng = 0;
	int rv;

	*out = NULL;
	*n = 0;
	if ((rv = res_setup(&st, d->server, err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < d->nnames && rv == 0; i++) {
		if (d->type == SCR_DNS_SRV) {
			rv = lookup_srv(&st, d, d->names[i], &gs, &ng, err);
			continue;
		}
		if ((g = scr_group_add(&gs, &ng)) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			break;
		}
		rv = lookup(&st, d, d->names[i], g, err);
	}
	res_nclose(&st);
	if (rv != 0) {
		scr_groups_free(gs, ng);
		return (rv);
	}
	*out = gs;
	*n = ng;
	return (0);
}
