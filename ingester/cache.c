/*
 * cache.c -- see cache.h.  Entries live in a chained hash table and on a
 * doubly linked LRU list (head = most recent).
 */
#include "cache.h"

#include <pthread.h>
#include <string.h>

#include "common/hash.h"

struct ing_cache_ent {
	struct ing_cache_ent *hnext;          /* hash chain */
	struct ing_cache_ent *prev, *next;    /* LRU */
	char *tenant;
	uint64_t id;
	char kind;
	uint64_t h;
	void *obj;
	size_t bytes;
	void (*freefn)(void *);
	int refs;
	int cached;                           /* in the table and LRU */
};

struct ing_cache {
	pthread_mutex_t mu;
	struct ing_cache_ent **tab;
	uint32_t nbuckets;
	struct ing_cache_ent *lru_head, *lru_tail;
	size_t bytes, budget;
};

static uint64_t
cache_hash(const char *tenant, uint64_t id, char kind)
{
	return (sm_hash_seed(tenant, strlen(tenant), id * 31 + (uint8_t)kind));
}

int
ing_cache_create(size_t budget, struct ing_cache **out)
{
	struct ing_cache *c = sm_calloc(1, sizeof(*c));

	if (c == NULL)
		return (SM_ENOMEM);
	/* about one chain per 16 KiB of budget: short chains for a cache of
	 * small pages too (remote.h) */
	c->nbuckets = (uint32_t)SM_MIN(SM_MAX(budget / 16384, (size_t)1024),
	    (size_t)1 << 20);
	if ((c->tab = sm_calloc(c->nbuckets, sizeof(*c->tab))) == NULL) {
		sm_free(c);
		return (SM_ENOMEM);
	}
	pthread_mutex_init(&c->mu, NULL);
	c->budget = budget;
	*out = c;
	return (0);
}

static void
ent_free(struct ing_cache_ent *e)
{
	if (e->freefn != NULL)
		e->freefn(e->obj);
	sm_free(e->tenant);
	sm_free(e);
}

static void
lru_unlink(struct ing_cache *c, struct ing_cache_ent *e)
{
	if (e->prev != NULL)
		e->prev->next = e->next;
	else
		c->lru_head = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		c->lru_tail = e->prev;
	e->prev = e->next = NULL;
}

static void
lru_push(struct ing_cache *c, struct ing_cache_ent *e)
{
	e->prev = NULL;
	e->next = c->lru_head;
	if (c->lru_head != NULL)
		c->lru_head->prev = e;
	c->lru_head = e;
	if (c->lru_tail == NULL)
		c->lru_tail = e;
}

/* Remove from table and LRU (caller holds mu). */
static void
ent_uncache(struct ing_cache *c, struct ing_cache_ent *e)
{
	struct ing_cache_ent **pp = &c->tab[e->h % c->nbuckets];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(c, e);
	c->bytes -= e->bytes;
	e->cached = 0;
}

/* Evict unreferenced LRU entries until within budget (caller holds mu). */
static void
cache_evict(struct ing_cache *c)
{
	struct ing_cache_ent *e = c->lru_tail;

	while (c->bytes > c->budget && e != NULL) {
		struct ing_cache_ent *prev = e->prev;

		if (e->refs == 0) {
			ent_uncache(c, e);
			ent_free(e);
		}
		e = prev;
	}
}

void
ing_cache_destroy(struct ing_cache *c)
{
	if (c == NULL)
		return;
	while (c->lru_head != NULL) {
		struct ing_cache_ent *e = c->lru_head;

		SM_ASSERT(e->refs == 0);
		ent_uncache(c, e);
		ent_free(e);
	}
	sm_free(c->tab);
	pthread_mutex_destroy(&c->mu);
	sm_free(c);
}

static struct ing_cache_ent *
cache_find(struct ing_cache *c, const char *tenant, uint64_t id, char kind,
    uint64_t h)
{
	for (struct ing_cache_ent *e = c->tab[h % c->nbuckets]; e != NULL;
	    e = e->hnext) {
		if (e->h == h && e->id == id && e->kind == kind &&
		    strcmp(e->tenant, tenant) == 0)
			return (e);
	}
	return (NULL);
}

void *
ing_cache_get(struct ing_cache *c, const char *tenant, uint64_t id, char kind,
    struct ing_cache_ent **ent)
{
	uint64_t h = cache_hash(tenant, id, kind);
	struct ing_cache_ent *e;

	*ent = NULL;
	pthread_mutex_lock(&c->mu);
	if ((e = cache_find(c, tenant, id, kind, h)) != NULL) {
		e->refs++;
		lru_unlink(c, e);
		lru_push(c, e);
		*ent = e;
	}
	pthread_mutex_unlock(&c->mu);
	return (e != NULL ? e->obj : NULL);
}

void *
ing_cache_put(struct ing_cache *c, const char *tenant, uint64_t id, char kind,
    void *obj, size_t bytes, void (*freefn)(void *),
    struct ing_cache_ent **ent)
{
	uint64_t h = cache_hash(tenant, id, kind);
	struct ing_cache_ent *e, *old;

	*ent = NULL;
	if ((e = sm_calloc(1, sizeof(*e))) == NULL ||
	    (e->tenant = sm_strdup(tenant)) == NULL) {
		sm_free(e);
		freefn(obj);
		return (NULL);
	}
	e->id = id;
	e->kind = kind;
	e->h = h;
	e->obj = obj;
	e->bytes = bytes;
	e->freefn = freefn;
	e->refs = 1;
	pthread_mutex_lock(&c->mu);
	if ((old = cache_find(c, tenant, id, kind, h)) != NULL) {
		/* Someone decoded the same part concurrently: keep theirs. */
		old->refs++;
		pthread_mutex_unlock(&c->mu);
		ent_free(e);
		*ent = old;
		return (old->obj);
	}
	if (bytes <= c->budget) {
		e->hnext = c->tab[h % c->nbuckets];
		c->tab[h % c->nbuckets] = e;
		lru_push(c, e);
		c->bytes += bytes;
		e->cached = 1;
		cache_evict(c);
	}
	pthread_mutex_unlock(&c->mu);
	*ent = e;
	return (obj);
}

void
ing_cache_release(struct ing_cache *c, struct ing_cache_ent *e)
{
	int dead;

	if (e == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	SM_ASSERT(e->refs > 0);
	e->refs--;
	dead = e->refs == 0 && !e->cached;
	if (e->cached && c->bytes > c->budget)
		cache_evict(c);
	pthread_mutex_unlock(&c->mu);
	if (dead)
		ent_free(e);
}

size_t
ing_cache_bytes(struct ing_cache *c)
{
	size_t b;

	pthread_mutex_lock(&c->mu);
	b = c->bytes;
	pthread_mutex_unlock(&c->mu);
	return (b);
}
