/*
 * remote.c -- a store-gateway's data parts read by range through a page
 * cache (remote.h tells the design).
 */
#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/tenant.h"

#include "cache.h"
#include "gateway.h"
#include "remote.h"
#include "ship.h"

#define STUB_VERSION 1
#define PAGE_KIND 'Q'           /* cache kind of an object page */

struct ing_remote {
	struct sm_bucket *bucket;
	struct ing_cache *pages;
	uint64_t page;
};

/* A cached page: len bytes of the object from index * page. */
struct page {
	size_t len;
	uint8_t b[];
};

static struct sm_metric *m_hits, *m_misses, *m_gets, *m_bytes, *m_fail;

static const struct sm_metric_def metric_defs[] = {
	{ &m_hits, SM_METRIC_COUNTER,
	    "smolder_store_gateway_data_cache_hits_total",
	    "Block object pages a query found in the data cache.", NULL,
	    NULL, 0 },
	{ &m_misses, SM_METRIC_COUNTER,
	    "smolder_store_gateway_data_cache_misses_total",
	    "Block object pages a query had to fetch from the bucket.", NULL,
	    NULL, 0 },
	{ &m_gets, SM_METRIC_COUNTER,
	    "smolder_store_gateway_data_fetches_total", "Ranged GETs of data "
	    "parts (one per run of missing pages).", NULL, NULL, 0 },
	{ &m_bytes, SM_METRIC_COUNTER,
	    "smolder_store_gateway_data_fetched_bytes_total",
	    "Bytes of data parts fetched by ranged GET.", NULL, NULL, 0 },
	{ &m_fail, SM_METRIC_COUNTER,
	    "smolder_store_gateway_data_fetch_failures_total",
	    "Ranged GETs of data parts that failed (the query that needed "
	    "them failed).", NULL, NULL, 0 },
};

static struct sm_metric_set metric_set = SM_METRIC_SET(metric_defs);

static double
gauge_bytes(void *arg)
{
	return ((double)ing_cache_bytes(((struct ing_remote *)arg)->pages));
}

int
ing_remote_create(struct sm_bucket *bucket, uint64_t budget, uint64_t page,
    struct ing_remote **out, struct sm_err *err)
{
	struct ing_remote *r;

	sm_metrics_register_once(&metric_set);
	*out = NULL;
	if (page < ING_REMOTE_PAGE_MIN || page > UINT32_MAX)
		return (sm_err_set(err, SM_EINVAL, "data page size %llu: not "
		    "in [%u, 4GiB)", (unsigned long long)page,
		    ING_REMOTE_PAGE_MIN));
	if ((r = sm_calloc(1, sizeof(*r))) == NULL ||
	    ing_cache_create((size_t)budget, &r->pages) != 0) {
		sm_free(r);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	r->bucket = bucket;
	r->page = page;
	sm_metric_gauge_fn("smolder_store_gateway_data_cache_bytes", "Bytes "
	    "of block object pages in the data cache.", gauge_bytes, r);
	*out = r;
	return (0);
}

void
ing_remote_destroy(struct ing_remote *r)
{
	if (r == NULL)
		return;
	sm_metric_gauge_fn_remove(r);
	ing_cache_destroy(r->pages);
	sm_free(r);
}

uint64_t
ing_remote_page(const struct ing_remote *r)
{
	return (r->page);
}

void
ing_remote_stub(const uint8_t ulid[16], uint64_t size, uint64_t off,
    uint32_t n, uint8_t out[ING_REMOTE_STUB])
{
	out[0] = 'S';
	out[1] = 'R';
	out[2] = STUB_VERSION;
	out[3] = 'D';
	memcpy(out + 4, ulid, 16);
	sm_put_be64(out + 20, size);
	sm_put_be64(out + 28, off);
	sm_put_be32(out + 36, n);
}

bool
ing_remote_is_stub(const uint8_t *v, size_t n)
{
	return (n >= 2 && v[0] == 'S' && v[1] == 'R');
}

/* The cache's key for the pages of object ulid: its text. */
static void
page_owner(const uint8_t ulid[16], char out[ING_ULID_LEN + 1])
{
	ing_ulid_text(ulid, out);
}

static void
page_free(void *p)
{
	sm_free(p);
}

/* Cache the pages [p0, p0 + n) of object bytes b (from p0 * page). */
static void
pages_put(struct ing_remote *r, const char *owner, uint64_t p0, uint64_t n,
    const uint8_t *b, uint64_t blen)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t off = i * r->page;
		size_t len = (size_t)SM_MIN(r->page, blen - off);
		struct page *pg = sm_malloc(sizeof(*pg) + len);
		struct ing_cache_ent *ent;

		if (pg == NULL)
			return;           /* a cache is allowed to forget */
		pg->len = len;
		memcpy(pg->b, b + off, len);
		if (ing_cache_put(r->pages, owner, p0 + i, PAGE_KIND, pg,
		    sizeof(*pg) + len, page_free, &ent) != NULL)
			ing_cache_release(r->pages, ent);
	}
}

void
ing_remote_warm(struct ing_remote *r, const uint8_t ulid[16],
    const uint8_t *obj, uint64_t size, uint64_t from, uint64_t to)
{
	char owner[ING_ULID_LEN + 1];
	uint64_t p0, p1;

	if (from >= to || to > size)
		return;
	page_owner(ulid, owner);
	p0 = from / r->page;
	p1 = (to - 1) / r->page;
	pages_put(r, owner, p0, p1 - p0 + 1, obj + p0 * r->page,
	    size - p0 * r->page);
}

/* Copy the bytes of [off, off + len) that lie in object bytes
 * [lo, lo + blen) at b into out (the part's bytes from off). */
static void
copy_in(uint8_t *out, uint64_t off, uint32_t len, uint64_t lo,
    const uint8_t *b, uint64_t blen)
{
	uint64_t a = SM_MAX(off, lo), z = SM_MIN(off + len, lo + blen);

	if (a < z)
		memcpy(out + (a - off), b + (a - lo), (size_t)(z - a));
}

int
ing_remote_read(void *arg, const char *tenant, const uint8_t *stub,
    size_t n, struct sm_buf *out, struct sm_err *err)
{
	struct ing_remote *r = arg;
	char owner[ING_ULID_LEN + 1], tk[3 * SM_TENANT_MAX_LEN + 1];
	char key[SM_BUCKET_KEY_MAX + 1], t[SM_TENANT_MAX_LEN + 1];
	struct sm_buf fetched = SM_BUF_INIT;
	uint64_t size, off, p0, p1;
	uint8_t *dst;
	uint32_t len;
	const char *sep;
	int rv = 0;

	if (n != ING_REMOTE_STUB || !ing_remote_is_stub(stub, n) ||
	    stub[2] != STUB_VERSION || stub[3] != 'D')
		return (sm_err_set(err, SM_ECORRUPT, "remote part stub: bad "
		    "magic, version or length (%zu bytes)", n));
	size = sm_get_be64(stub + 20);
	off = sm_get_be64(stub + 28);
	len = sm_get_be32(stub + 36);
	if (len == 0 || off > size || len > size - off)
		return (sm_err_set(err, SM_ECORRUPT, "remote part stub: "
		    "%llu+%u outside an object of %llu bytes",
		    (unsigned long long)off, len, (unsigned long long)size));
	if ((sep = strchr(tenant, ING_GW_SEP)) == NULL ||
	    (size_t)(sep - tenant) > SM_TENANT_MAX_LEN)
		return (sm_err_set(err, SM_ECORRUPT, "remote part of tenant "
		    "%s: not a store-gateway's tenant", tenant));
	memcpy(t, tenant, (size_t)(sep - tenant));
	t[sep - tenant] = '\0';
	page_owner(stub + 4, owner);
	sm_buf_reset(out);
	if (sm_buf_reserve(out, len) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	dst = (uint8_t *)out->b;
	p0 = off / r->page;
	p1 = (off + len - 1) / r->page;
	for (uint64_t p = p0; p <= p1;) {
		struct ing_cache_ent *ent;
		struct page *pg;
		uint64_t q, lo, hi;

		if ((pg = ing_cache_get(r->pages, owner, p, PAGE_KIND,
		    &ent)) != NULL) {
			sm_counter_inc(sm_metric_child0(m_hits));
			copy_in(dst, off, len, p * r->page, pg->b, pg->len);
			ing_cache_release(r->pages, ent);
			p++;
			continue;
		}
		/* the run of missing pages from p: one GET */
		for (q = p + 1; q <= p1; q++) {
			if ((pg = ing_cache_get(r->pages, owner, q, PAGE_KIND,
			    &ent)) != NULL) {
				ing_cache_release(r->pages, ent);
				break;
			}
		}
		sm_counter_add(sm_metric_child0(m_misses), q - p);
		lo = p * r->page;
		hi = SM_MIN(q * r->page, size);
		ing_ship_tenant_key(t, tk, sizeof(tk));
		snprintf(key, sizeof(key), "%s/blocks/%s/block", tk, owner);
		sm_buf_reset(&fetched);
		sm_counter_inc(sm_metric_child0(m_gets));
		if ((rv = sm_bucket_get(r->bucket, key, lo, hi - lo, &fetched,
		    err)) != 0 || fetched.len != hi - lo) {
			sm_counter_inc(sm_metric_child0(m_fail));
			if (rv == 0 || rv == SM_EINVAL)
				rv = sm_err_set(err, SM_ECORRUPT, "%s: shorter "
				    "than the %llu bytes its meta.json says",
				    key, (unsigned long long)size);
			goto out;
		}
		sm_counter_add(sm_metric_child0(m_bytes), fetched.len);
		copy_in(dst, off, len, lo, (const uint8_t *)fetched.b,
		    fetched.len);
		pages_put(r, owner, p, q - p, (const uint8_t *)fetched.b,
		    fetched.len);
		p = q;
	}
	out->len = len;
	out->b[len] = '\0';
out:
	sm_buf_fini(&fetched);
	return (rv);
}
