/*
 * gate.h -- how many queries each tenant may run at once in one querier.
 *
 * A SaaS querier serves many tenants from one HTTP pool; without a bound
 * one tenant firing slow queries (a catastrophic regex over many series,
 * year-long ranges) holds every pool thread and the others wait.  Every
 * query route of the querier goes through the gate (querier.c,
 * qry_route_connect / qry_route_http): a tenant already running `limit`
 * queries gets 429 resource_exhausted at once ("too many concurrent
 * queries"), the way Pyroscope's query scheduler refuses a tenant over
 * max_outstanding_requests_per_tenant, and other tenants are unaffected.
 * The limit is -querier.max-concurrent-queries-per-tenant, per tenant
 * max_concurrent_queries in the runtime overrides; 0 = no limit.
 *
 * Ownership: the gate owns its table (one entry per tenant with queries
 * in flight, so bounded by the HTTP connection limit).
 * Locking: enter/leave are thread-safe (one mutex, held for a scan).
 * Errors: SM_ELIMIT over the limit, SM_ENOMEM.
 */
#ifndef QRY_GATE_H
#define QRY_GATE_H

#include <pthread.h>
#include <stdint.h>

#include "common/sm.h"
#include "common/tenant.h"

struct qry_gate_slot {
	char tenant[SM_TENANT_MAX_LEN + 1];
	uint32_t n;             /* queries in flight; 0 = free slot */
};

struct qry_gate {
	pthread_mutex_t mu;
	struct qry_gate_slot *v;
	size_t n, cap;          /* slots used (some may be free), capacity */
};

void qry_gate_init(struct qry_gate *g);
void qry_gate_fini(struct qry_gate *g);

/*
 * Admit one query of `tenant` if it has fewer than `limit` in flight
 * (limit <= 0: always).  0, or SM_ELIMIT / SM_ENOMEM with err set; on 0
 * the caller must call qry_gate_leave() with the same tenant.
 */
int qry_gate_enter(struct qry_gate *g, const char *tenant, int64_t limit,
    struct sm_err *err);
void qry_gate_leave(struct qry_gate *g, const char *tenant);

/* Queries of `tenant` in flight (tests, metrics). */
uint32_t qry_gate_inflight(struct qry_gate *g, const char *tenant);

/* Queries in flight, all tenants (smolder_querier_queries_inflight). */
uint32_t qry_gate_total(struct qry_gate *g);

#endif /* QRY_GATE_H */
