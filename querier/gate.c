/*
 * gate.c -- concurrent queries per tenant (gate.h).
 *
 * Every query is counted, whatever the limit, so a limit changed by a
 * runtime-config reload while queries run still pairs each leave with
 * its enter.  The table is scanned linearly: it holds only tenants with
 * queries in flight, a few dozen at most, and one scan is nothing next
 * to a query.
 */
#include "gate.h"

#include <stdio.h>
#include <string.h>

void
qry_gate_init(struct qry_gate *g)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->mu, NULL);
}

void
qry_gate_fini(struct qry_gate *g)
{
	sm_free(g->v);
	pthread_mutex_destroy(&g->mu);
	memset(g, 0, sizeof(*g));
}

/* The tenant's slot, or NULL; *free_slot gets a free one if any. */
static struct qry_gate_slot *
gate_find(struct qry_gate *g, const char *tenant,
    struct qry_gate_slot **free_slot)
{
	*free_slot = NULL;
	for (size_t i = 0; i < g->n; i++) {
		struct qry_gate_slot *s = &g->v[i];

		if (s->n == 0) {
			if (*free_slot == NULL)
				*free_slot = s;
		} else if (strcmp(s->tenant, tenant) == 0) {
			return (s);
		}
	}
	return (NULL);
}

int
qry_gate_enter(struct qry_gate *g, const char *tenant, int64_t limit,
    struct sm_err *err)
{
	struct qry_gate_slot *s, *fs;

	pthread_mutex_lock(&g->mu);
	if ((s = gate_find(g, tenant, &fs)) != NULL) {
		if (limit > 0 && s->n >= (uint64_t)limit) {
			pthread_mutex_unlock(&g->mu);
			return (sm_err_set(err, SM_ELIMIT, "too many concurrent "
			    "queries for tenant %s (max_concurrent_queries "
			    "%lld); retry when one has finished", tenant,
			    (long long)limit));
		}
		s->n++;
		pthread_mutex_unlock(&g->mu);
		return (0);
	}
	if (fs == NULL) {
		if (SM_GROW(g->v, g->cap, g->n + 1, 16) != 0) {
			pthread_mutex_unlock(&g->mu);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		fs = &g->v[g->n++];
	}
	snprintf(fs->tenant, sizeof(fs->tenant), "%s", tenant);
	fs->n = 1;
	pthread_mutex_unlock(&g->mu);
	return (0);
}

void
qry_gate_leave(struct qry_gate *g, const char *tenant)
{
	struct qry_gate_slot *s, *fs;

	pthread_mutex_lock(&g->mu);
	s = gate_find(g, tenant, &fs);
	SM_ASSERT(s != NULL && s->n > 0);
	s->n--;
	/* Trailing free slots are dropped so a scan stays short. */
	while (g->n > 0 && g->v[g->n - 1].n == 0)
		g->n--;
	pthread_mutex_unlock(&g->mu);
}

uint32_t
qry_gate_inflight(struct qry_gate *g, const char *tenant)
{
	struct qry_gate_slot *s, *fs;
	uint32_t n;

	pthread_mutex_lock(&g->mu);
	s = gate_find(g, tenant, &fs);
	n = s != NULL ? s->n : 0;
	pthread_mutex_unlock(&g->mu);
	return (n);
}

uint32_t
qry_gate_total(struct qry_gate *g)
{
	uint32_t n = 0;

	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < g->n; i++)
		n += g->v[i].n;
	pthread_mutex_unlock(&g->mu);
	return (n);
}
