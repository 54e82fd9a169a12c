/*
 * delta.c -- see delta.h.
 *
 * The scraped profile is unpacked with protobuf-c (a scrape is one
 * profile per target and interval, not the ingest hot path), its samples
 * keyed, summed per key, compared with the state and packed again with
 * the emitted samples only.
 */
#include "delta.h"

#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "common/hash.h"
#include "google/v1/profile.pb-c.h"

void
scr_delta_init(struct scr_delta *d)
{
	memset(d, 0, sizeof(*d));
}

void
scr_delta_reset(struct scr_delta *d)
{
	sm_free(d->keys);
	sm_free(d->vals);
	memset(d, 0, sizeof(*d));
}

void
scr_delta_fini(struct scr_delta *d)
{
	scr_delta_reset(d);
}

size_t
scr_delta_bytes(const struct scr_delta *d)
{
	return ((size_t)d->nkeys * (8 + 8 * (size_t)d->ncum));
}

int
scr_delta_copy(struct scr_delta *dst, const struct scr_delta *src)
{
	scr_delta_reset(dst);
	if (src->nkeys > 0) {
		dst->keys = sm_malloc((size_t)src->nkeys * sizeof(*dst->keys));
		dst->vals = sm_malloc((size_t)src->nkeys * src->ncum *
		    sizeof(*dst->vals) + 1);
		if (dst->keys == NULL || dst->vals == NULL) {
			scr_delta_reset(dst);
			return (SM_ENOMEM);
		}
		memcpy(dst->keys, src->keys, (size_t)src->nkeys *
		    sizeof(*dst->keys));
		memcpy(dst->vals, src->vals, (size_t)src->nkeys * src->ncum *
		    sizeof(*dst->vals));
	}
	dst->nkeys = src->nkeys;
	dst->ncum = src->ncum;
	dst->last_ns = src->last_ns;
	return (0);
}

/* Go runtime/pprof's counters since the process started. */
static bool
is_cumulative(const char *name)
{
	return (strcmp(name, "alloc_objects") == 0 ||
	    strcmp(name, "alloc_space") == 0 ||
	    strcmp(name, "contentions") == 0 || strcmp(name, "delay") == 0);
}

/* id -> message, for locations, functions and mappings. */
struct dl_ent {
	uint64_t id;
	const void *m;
};

static int
ent_cmp(const void *a, const void *b)
{
	const struct dl_ent *x = a, *y = b;

	return (SM_CMP(x->id, y->id));
}

static const void *
ent_find(const struct dl_ent *v, size_t n, uint64_t id)
{
	struct dl_ent k = { id, NULL };
	const struct dl_ent *e = bsearch(&k, v, n, sizeof(*v), ent_cmp);

	return (e != NULL ? e->m : NULL);
}

struct dl_ctx {
	const Google__V1__Profile *p;
	struct dl_ent *loc, *fn, *map;
	size_t nloc, nfn, nmap;
	/* each location's identity hashed once: by id when the ids are
	 * dense (Go's are 1..n), else in the order of loc[] */
	uint64_t *lh;
	uint64_t nlh;            /* entries of lh when dense; 0 otherwise */
	struct sm_buf kb;        /* the key's bytes */
};

static const char *
dl_str(const struct dl_ctx *c, int64_t i)
{
	if (i < 0 || (size_t)i >= c->p->n_string_table ||
	    c->p->string_table[i] == NULL)
		return ("");
	return (c->p->string_table[i]);
}

static void
kb_str(struct sm_buf *b, const char *s)
{
	sm_buf_append(b, s, strlen(s) + 1);
}

static void
kb_u64(struct sm_buf *b, uint64_t v)
{
	sm_buf_append(b, &v, sizeof(v));
}

static int
lab_cmp(const void *a, const void *b)
{
	const char *const *x = a, *const *y = b;
	int c = strcmp(x[0], y[0]);

	return (c != 0 ? c : strcmp(x[1], y[1]));
}

/* A location's identity: each line's function name, file and line, or
 * its mapping's file and its address. */
static uint64_t
loc_hash(struct dl_ctx *c, const Google__V1__Location *L)
{
	sm_buf_reset(&c->kb);
	for (size_t k = 0; k < L->n_line; k++) {
		const Google__V1__Function *f = ent_find(c->fn, c->nfn,
		    L->line[k]->function_id);

		kb_str(&c->kb, f != NULL ? dl_str(c, f->name) : "?");
		kb_str(&c->kb, f != NULL ? dl_str(c, f->filename) : "");
		kb_u64(&c->kb, (uint64_t)L->line[k]->line);
	}
	if (L->n_line == 0) {
		const Google__V1__Mapping *m = ent_find(c->map, c->nmap,
		    L->mapping_id);

		kb_str(&c->kb, m != NULL ? dl_str(c, m->filename) : "");
		kb_u64(&c->kb, L->address);
	}
	return (sm_hash(c->kb.b != NULL ? c->kb.b : "", c->kb.len));
}

/* The identity hash of location `id` (an unknown id hashes the id). */
static uint64_t
loc_key(const struct dl_ctx *c, uint64_t id)
{
	const struct dl_ent *e;
	struct dl_ent k = { id, NULL };

	if (c->nlh > 0)
		return (id < c->nlh && c->lh[id] != 0 ? c->lh[id] :
		    sm_hash_u64(id));
	e = bsearch(&k, c->loc, c->nloc, sizeof(*c->loc), ent_cmp);
	return (e != NULL ? c->lh[e - c->loc] : sm_hash_u64(id));
}

/* A sample's identity: its locations' identities, leaf first, and its
 * string labels in name order. */
static uint64_t
sample_key(struct dl_ctx *c, const Google__V1__Sample *s, const char **lab)
{
	size_t nl = 0;

	sm_buf_reset(&c->kb);
	for (size_t i = 0; i < s->n_location_id; i++)
		kb_u64(&c->kb, loc_key(c, s->location_id[i]));
	for (size_t i = 0; i < s->n_label; i++) {
		if (s->label[i]->str == 0)
			continue;
		lab[2 * nl] = dl_str(c, s->label[i]->key);
		lab[2 * nl + 1] = dl_str(c, s->label[i]->str);
		nl++;
	}
	if (nl > 1)
		qsort(lab, nl, 2 * sizeof(*lab), lab_cmp);
	for (size_t i = 0; i < nl; i++) {
		kb_str(&c->kb, lab[2 * i]);
		kb_str(&c->kb, lab[2 * i + 1]);
	}
	return (sm_hash(c->kb.b != NULL ? c->kb.b : "", c->kb.len));
}

/* A sample and its key, for sorting. */
struct dl_smp {
	uint64_t key;
	uint32_t idx;
};

SM_CMP_FN2(smp_cmp, struct dl_smp, key, idx)

/* The id tables of p, in the arena. */
static int
dl_index(struct dl_ctx *c, struct sm_arena *a)
{
	const Google__V1__Profile *p = c->p;

	c->loc = sm_arena_alloc(a, (p->n_location + 1) * sizeof(*c->loc));
	c->fn = sm_arena_alloc(a, (p->n_function + 1) * sizeof(*c->fn));
	c->map = sm_arena_alloc(a, (p->n_mapping + 1) * sizeof(*c->map));
	if (c->loc == NULL || c->fn == NULL || c->map == NULL)
		return (SM_ENOMEM);
	for (size_t i = 0; i < p->n_location; i++)
		c->loc[c->nloc++] = (struct dl_ent){ p->location[i]->id,
		    p->location[i] };
	for (size_t i = 0; i < p->n_function; i++)
		c->fn[c->nfn++] = (struct dl_ent){ p->function[i]->id,
		    p->function[i] };
	for (size_t i = 0; i < p->n_mapping; i++)
		c->map[c->nmap++] = (struct dl_ent){ p->mapping[i]->id,
		    p->mapping[i] };
	qsort(c->loc, c->nloc, sizeof(*c->loc), ent_cmp);
	qsort(c->fn, c->nfn, sizeof(*c->fn), ent_cmp);
	qsort(c->map, c->nmap, sizeof(*c->map), ent_cmp);
	{
		uint64_t max = c->nloc > 0 ? c->loc[c->nloc - 1].id : 0;

		/* dense ids: a direct table (0 = no such location) */
		c->nlh = max <= 4 * (uint64_t)c->nloc + 16 ? max + 1 : 0;
		if ((c->lh = sm_arena_calloc(a, c->nlh > 0 ? c->nlh :
		    c->nloc + 1, sizeof(*c->lh))) == NULL)
			return (SM_ENOMEM);
		for (size_t i = 0; i < c->nloc; i++) {
			uint64_t h = loc_hash(c, c->loc[i].m);

			h += h == 0;    /* 0 marks an empty slot */
			if (c->nlh > 0) {
				if (c->lh[c->loc[i].id] == 0)
					c->lh[c->loc[i].id] = h;
			} else {
				c->lh[i] = h;
			}
		}
	}
	return (0);
}

/*
 * One scrape's working set: the profile's samples summed per identity
 * (keys sorted, vals[i * ncum + k] the k-th cumulative value of key i,
 * rep[i] the sample that carries key i's sums).  keys and vals are heap
 * arrays the state takes over; the rest lives in the arena.
 */
struct dl_sums {
	uint32_t *cum, ncum;     /* the cumulative sample types */
	uint64_t *keys;
	int64_t *vals;
	uint32_t *rep, nuniq;
};

/* The cumulative types of p into s->cum; 0 or SM_ENOMEM. */
static int
dl_cumulative(const struct dl_ctx *c, struct sm_arena *a,
    struct dl_sums *s)
{
	const Google__V1__Profile *p = c->p;

	if ((s->cum = sm_arena_alloc(a, (p->n_sample_type + 1) *
	    sizeof(*s->cum))) == NULL)
		return (SM_ENOMEM);
	for (size_t t = 0; t < p->n_sample_type; t++)
		if (is_cumulative(dl_str(c, p->sample_type[t]->type)))
			s->cum[s->ncum++] = (uint32_t)t;
	return (0);
}

/* Every sample's identity, sorted (ties in sample order); *out in the
 * arena.  0, SM_ENOMEM, or SM_EMALFORMED (a sample's value count). */
static int
dl_sample_keys(struct dl_ctx *c, struct sm_arena *a, struct dl_smp **out,
    struct sm_err *err)
{
	const Google__V1__Profile *p = c->p;
	struct dl_smp *sm;
	const char **lab;
	size_t maxlab = 0;

	for (size_t i = 0; i < p->n_sample; i++)
		maxlab = SM_MAX(maxlab, p->sample[i]->n_label);
	if ((sm = sm_arena_alloc(a, (p->n_sample + 1) * sizeof(*sm))) ==
	    NULL || (lab = sm_arena_alloc(a, (2 * maxlab + 2) *
	    sizeof(*lab))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < p->n_sample; i++) {
		if (p->sample[i]->n_value != p->n_sample_type)
			return (sm_err_set(err, SM_EMALFORMED, "sample %zu "
			    "has %zu values, the profile %zu types", i,
			    p->sample[i]->n_value, p->n_sample_type));
		sm[i] = (struct dl_smp){ sample_key(c, p->sample[i], lab),
		    (uint32_t)i };
	}
	if (sm_buf_error(&c->kb) != 0)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	qsort(sm, p->n_sample, sizeof(*sm), smp_cmp);
	*out = sm;
	return (0);
}

/* Sum the samples of each identity (sorted sm[]) onto its first sample,
 * into s; 0 or SM_ENOMEM. */
static int
dl_sum(const Google__V1__Profile *p, const struct dl_smp *sm,
    struct sm_arena *a, struct dl_sums *s)
{
	const uint32_t ncum = s->ncum;

	s->keys = sm_malloc((p->n_sample + 1) * sizeof(*s->keys));
	s->vals = sm_malloc(((size_t)p->n_sample + 1) * ncum *
	    sizeof(*s->vals));
	s->rep = sm_arena_alloc(a, (p->n_sample + 1) * sizeof(*s->rep));
	if (s->keys == NULL || s->vals == NULL || s->rep == NULL)
		return (SM_ENOMEM);
	for (size_t i = 0; i < p->n_sample; i++) {
		Google__V1__Sample *x = p->sample[sm[i].idx];
		int64_t *v;

		if (s->nuniq > 0 && s->keys[s->nuniq - 1] == sm[i].key) {
			Google__V1__Sample *r = p->sample[s->rep[s->nuniq -
			    1]];

			for (size_t t = 0; t < p->n_sample_type; t++)
				r->value[t] = sm_add_sat(r->value[t],
				    x->value[t]);
			x = r;
			v = &s->vals[(size_t)(s->nuniq - 1) * ncum];
		} else {
			s->keys[s->nuniq] = sm[i].key;
			s->rep[s->nuniq] = sm[i].idx;
			v = &s->vals[(size_t)s->nuniq++ * ncum];
		}
		for (uint32_t k = 0; k < ncum; k++)
			v[k] = x->value[s->cum[k]];
	}
	return (0);
}

/* A counter lower than the state's: the process restarted. */
static bool
dl_fell(const struct scr_delta *d, const struct dl_sums *s)
{
	const uint32_t ncum = s->ncum;

	for (uint32_t i = 0, j = 0; i < s->nuniq && j < d->nkeys;) {
		if (s->keys[i] < d->keys[j]) {
			i++;
		} else if (s->keys[i] > d->keys[j]) {
			j++;
		} else {
			for (uint32_t k = 0; k < ncum; k++)
				if (s->vals[(size_t)i * ncum + k] <
				    d->vals[(size_t)j * ncum + k])
					return (true);
			i++;
			j++;
		}
	}
	return (false);
}

/* The delta profile into out: cumulative values minus the state's,
 * snapshots as they are, samples left all zero dropped, placed from the
 * previous scrape to now.  0 or SM_ENOMEM. */
static int
dl_emit(Google__V1__Profile *p, const struct scr_delta *d,
    const struct dl_sums *s, int64_t now_ns, struct sm_arena *a,
    struct sm_buf *out)
{
	const uint32_t ncum = s->ncum;
	Google__V1__Sample **kept;
	uint32_t nkept = 0;
	size_t n;

	if ((kept = sm_arena_alloc(a, (s->nuniq + 1) * sizeof(*kept))) ==
	    NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0, j = 0; i < s->nuniq; i++) {
		Google__V1__Sample *x = p->sample[s->rep[i]];
		bool any = false;

		while (j < d->nkeys && d->keys[j] < s->keys[i])
			j++;
		for (uint32_t k = 0; k < ncum; k++) {
			int64_t prev = j < d->nkeys && d->keys[j] ==
			    s->keys[i] ? d->vals[(size_t)j * ncum + k] : 0;

			x->value[s->cum[k]] = s->vals[(size_t)i * ncum + k] -
			    prev;
		}
		for (size_t t = 0; t < p->n_sample_type; t++)
			any |= x->value[t] != 0;
		if (any)
			kept[nkept++] = x;
	}
	p->sample = kept;
	p->n_sample = nkept;
	p->duration_nanos = now_ns - d->last_ns;
	p->time_nanos = d->last_ns;
	/* Packed again: an unknown field can make it unreadable (arena.h;
	 * found by fuzz_scrape).  Nothing reads them. */
	sm_arena_pbc_drop_unknown(&p->base);
	n = google__v1__profile__get_packed_size(p);
	if (sm_buf_reserve(out, n) != 0)
		return (SM_ENOMEM);
	out->len += google__v1__profile__pack(p, (uint8_t *)out->b + out->len);
	out->b[out->len] = '\0';
	return (0);
}

int
scr_delta_apply(struct scr_delta *d, const uint8_t *raw, size_t len,
    int64_t now_ns, enum scr_delta_out *what, bool *rebased,
    struct sm_buf *out, struct sm_err *err)
{
	struct sm_arena *a = sm_arena_create(0);
	ProtobufCAllocator al;
	Google__V1__Profile *p;
	struct dl_ctx c;
	struct dl_sums s = { .ncum = 0 };
	struct dl_smp *sm = NULL;
	bool fall = false;
	int rv = 0;

	*rebased = false;
	memset(&c, 0, sizeof(c));
	sm_buf_init(&c.kb);
	if (a == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	al = sm_arena_pbc(a);
	if ((p = google__v1__profile__unpack(&al, len, raw)) == NULL) {
		rv = sm_err_set(err, SM_EMALFORMED, "not a pprof profile "
		    "(google.v1.Profile)");
		goto out;
	}
	c.p = p;
	if (dl_cumulative(&c, a, &s) != 0)
		goto oom;
	if (s.ncum == 0) {
		*what = SCR_DELTA_PASS;
		sm_buf_append(out, raw, len);
		goto out;
	}
	if (dl_index(&c, a) != 0)
		goto oom;
	if ((rv = dl_sample_keys(&c, a, &sm, err)) != 0) {
		if (rv == SM_ENOMEM)
			scr_delta_reset(d);
		goto out;
	}
	if (dl_sum(p, sm, a, &s) != 0)
		goto oom;
	if (d->last_ns != 0 && d->ncum == s.ncum)
		fall = dl_fell(d, &s);
	if (d->last_ns == 0 || d->ncum != s.ncum || fall) {
		*rebased = fall;
		*what = SCR_DELTA_PRIMED;
	} else {
		if (dl_emit(p, d, &s, now_ns, a, out) != 0)
			goto oom;
		*what = SCR_DELTA_EMIT;
	}
	/* the state takes this scrape's sums */
	sm_free(d->keys);
	sm_free(d->vals);
	d->keys = s.keys;
	d->vals = s.vals;
	d->nkeys = s.nuniq;
	d->ncum = s.ncum;
	d->last_ns = now_ns;
	s.keys = NULL;
	s.vals = NULL;
	goto out;
oom:
	scr_delta_reset(d);
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	sm_free(s.keys);
	sm_free(s.vals);
	sm_buf_fini(&c.kb);
	sm_arena_destroy(a);
	return (rv);
}
