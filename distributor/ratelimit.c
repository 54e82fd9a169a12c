/*
 * ratelimit.c -- per-tenant token buckets (ratelimit.h).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/hash.h"
#include "common/tenant.h"

#include "ratelimit.h"

#define RL_BUCKETS 256          /* hash chains; tenants are few */
#define RL_MB 1048576.0         /* Pyroscope's bytesInMB */

struct rl_entry {
	struct rl_entry *e_next;
	struct dist_bucket e_b;
	char e_tenant[SM_TENANT_MAX_LEN + 1];
};

struct dist_ratelim {
	const struct sm_clock *rl_clock;
	pthread_mutex_t rl_mu;        /* protects rl_tab and every bucket */
	struct rl_entry *rl_tab[RL_BUCKETS];
};

bool
dist_bucket_take(struct dist_bucket *b, double rate, double burst,
    int64_t now_ns, double n)
{
	if (b->b_last_ns == 0) {
		b->b_tokens = burst;            /* starts full */
		b->b_last_ns = now_ns;
	}
	if (now_ns > b->b_last_ns) {
		b->b_tokens += b->b_rate * (double)(now_ns - b->b_last_ns) /
		    1e9;
		b->b_last_ns = now_ns;
	}
	b->b_rate = rate;
	b->b_burst = burst;
	if (b->b_tokens > burst)
		b->b_tokens = burst;
	if (rate <= 0)
		return (true);                  /* no limit */
	if (n > b->b_tokens)
		return (false);
	b->b_tokens -= n;
	return (true);
}

int
dist_ratelim_create(const struct sm_clock *clock, struct dist_ratelim **out)
{
	struct dist_ratelim *rl;

	*out = NULL;
	if ((rl = sm_calloc(1, sizeof(*rl))) == NULL)
		return (SM_ENOMEM);
	rl->rl_clock = clock;
	pthread_mutex_init(&rl->rl_mu, NULL);
	*out = rl;
	return (0);
}

void
dist_ratelim_destroy(struct dist_ratelim *rl)
{
	if (rl == NULL)
		return;
	for (size_t i = 0; i < RL_BUCKETS; i++) {
		struct rl_entry *e, *next;

		for (e = rl->rl_tab[i]; e != NULL; e = next) {
			next = e->e_next;
			sm_free(e);
		}
	}
	pthread_mutex_destroy(&rl->rl_mu);
	sm_free(rl);
}

void
dist_ibytes(uint64_t n, char *out, size_t outlen)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB",
	    "TiB", "PiB", "EiB" };
	double v;
	int e;

	if (n < 10) {
		snprintf(out, outlen, "%llu B", (unsigned long long)n);
		return;
	}
	e = (int)floor(log((double)n) / log(1024.0));
	if (e > 6)
		e = 6;
	v = floor((double)n / pow(1024.0, e) * 10 + 0.5) / 10;
	snprintf(out, outlen, v < 10 ? "%.1f %s" : "%.0f %s", v, units[e]);
}

int
dist_ratelim_take(struct dist_ratelim *rl, const char *tenant,
    double rate_mb, double burst_mb, uint32_t ndist, size_t n,
    struct sm_err *err)
{
	struct rl_entry *e;
	int64_t now_ns;
	uint64_t h;
	bool ok;

	if (rate_mb <= 0)
		return (0);
	now_ns = sm_clock_mono_ns(rl->rl_clock);
	h = sm_hash(tenant, strlen(tenant)) % RL_BUCKETS;
	pthread_mutex_lock(&rl->rl_mu);
	for (e = rl->rl_tab[h]; e != NULL; e = e->e_next)
		if (strcmp(e->e_tenant, tenant) == 0)
			break;
	if (e == NULL) {
		if ((e = sm_calloc(1, sizeof(*e))) == NULL) {
			pthread_mutex_unlock(&rl->rl_mu);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		snprintf(e->e_tenant, sizeof(e->e_tenant), "%s", tenant);
		e->e_next = rl->rl_tab[h];
		rl->rl_tab[h] = e;
	}
	/* The share: rate / healthy distributors; the burst stays whole. */
	ok = dist_bucket_take(&e->e_b, rate_mb * RL_MB / SM_MAX(ndist, 1u),
	    burst_mb * RL_MB, now_ns, (double)n);
	pthread_mutex_unlock(&rl->rl_mu);
	if (!ok) {
		char lim[32], add[32];

		dist_ibytes((uint64_t)(rate_mb * RL_MB), lim, sizeof(lim));
		dist_ibytes(n, add, sizeof(add));
		return (sm_err_set(err, SM_ELIMIT, "push rate limit (%s) "
		    "exceeded while adding %s", lim, add));
	}
	return (0);
}
