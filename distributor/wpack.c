/*
 * wpack.c -- a write's Request packed by hand; see wpack.h for the
 * contract.
 *
 * The rules followed are protobuf-c's for proto3 fields (so the bytes are
 * its bytes): fields in field-number order; a singular scalar, string or
 * bytes field is left out when zero or empty, a singular message when its
 * pointer is NULL (an empty message present is written, with length 0);
 * a packed repeated field is left out when it has no elements; a repeated
 * string's NULL element is written as "".  Every field number here is
 * below 16, so a tag is one byte, except Request.deadline_unix_ms (30).
 * A message carrying unknown fields (one that was unpacked, not built) is
 * left to protobuf-c, which writes them back.
 */
#include "wpack.h"

#include <string.h>

#include "common/sm.h"

/* The two passes share the sizes the first one finds. */
struct wp {
	uint32_t *slen;     /* the tree's strings' lengths */
	size_t *ssz;        /* per series: the message, then the bodies of
			     * node, value, span_id, span_node, span_value */
};

#define WP_SER 6

static inline size_t
wp_vlen(uint64_t v)
{
	return (((size_t)(64 - __builtin_clzll(v | 1)) + 6) / 7);
}

static inline uint8_t *
wp_vput(uint8_t *p, uint64_t v)
{
	/* Node ids and names: one or two bytes nearly always. */
	if (SM_LIKELY(v < 0x80)) {
		*p = (uint8_t)v;
		return (p + 1);
	}
	if (v < 0x4000) {
		p[0] = (uint8_t)(v | 0x80);
		p[1] = (uint8_t)(v >> 7);
		return (p + 2);
	}
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return (p);
}

/* A length-delimited field (tag < 16) holding n bytes. */
static inline size_t
wp_ld(size_t n)
{
	return (1 + wp_vlen(n) + n);
}

static inline uint8_t *
wp_ld_put(uint8_t *p, uint32_t field, size_t n)
{
	*p++ = (uint8_t)(field << 3 | 2);
	return (wp_vput(p, n));
}

static inline size_t
wp_str_size(const char *s)
{
	size_t n = s != NULL ? strlen(s) : 0;

	return (n != 0 ? wp_ld(n) : 0);
}

static inline uint8_t *
wp_str_put(uint8_t *p, uint32_t field, const char *s)
{
	size_t n = s != NULL ? strlen(s) : 0;

	if (n == 0)
		return (p);
	p = wp_ld_put(p, field, n);
	memcpy(p, s, n);
	return (p + n);
}

/* A singular varint field (zero left out). */
static inline size_t
wp_var_size(uint64_t v)
{
	return (v != 0 ? 1 + wp_vlen(v) : 0);
}

static inline uint8_t *
wp_var_put(uint8_t *p, uint32_t field, uint64_t v)
{
	if (v == 0)
		return (p);
	*p++ = (uint8_t)(field << 3);
	return (wp_vput(p, v));
}

static size_t
wp_u32s_body(const uint32_t *v, size_t n)
{
	size_t b = 0;

	for (size_t i = 0; i < n; i++)
		b += wp_vlen(v[i]);
	return (b);
}

static size_t
wp_i64s_body(const int64_t *v, size_t n)
{
	size_t b = 0;

	for (size_t i = 0; i < n; i++)
		b += wp_vlen((uint64_t)v[i]);
	return (b);
}

/* A packed repeated field's size, given its body (left out when empty). */
static inline size_t
wp_packed_size(size_t n, size_t body)
{
	return (n != 0 ? wp_ld(body) : 0);
}

static uint8_t *
wp_u32s_put(uint8_t *p, uint32_t field, const uint32_t *v, size_t n,
    size_t body)
{
	if (n == 0)
		return (p);
	p = wp_ld_put(p, field, body);
	for (size_t i = 0; i < n; i++)
		p = wp_vput(p, v[i]);
	return (p);
}

static uint8_t *
wp_i64s_put(uint8_t *p, uint32_t field, const int64_t *v, size_t n,
    size_t body)
{
	if (n == 0)
		return (p);
	p = wp_ld_put(p, field, body);
	for (size_t i = 0; i < n; i++)
		p = wp_vput(p, (uint64_t)v[i]);
	return (p);
}

/* --- messages ------------------------------------------------------------- */

static size_t
wp_label_size(const Types__V1__LabelPair *l)
{
	return (wp_str_size(l->name) + wp_str_size(l->value));
}

static size_t
wp_meta_size(const Smolder__V1__SeriesMeta *m)
{
	return (wp_str_size(m->spy_name) + wp_var_size(m->sample_rate) +
	    wp_str_size(m->units) + wp_str_size(m->aggregation));
}

static uint8_t *
wp_meta_put(uint8_t *p, const Smolder__V1__SeriesMeta *m)
{
	p = wp_str_put(p, 1, m->spy_name);
	p = wp_var_put(p, 2, m->sample_rate);
	p = wp_str_put(p, 3, m->units);
	return (wp_str_put(p, 4, m->aggregation));
}

static size_t
wp_series_size(const Smolder__V1__SeriesWrite *w, size_t *sz)
{
	size_t n = 0;

	for (size_t i = 0; i < w->n_labels; i++)
		n += wp_ld(wp_label_size(w->labels[i]));
	n += wp_var_size((uint64_t)w->time_ms);
	sz[1] = wp_u32s_body(w->node, w->n_node);
	sz[2] = wp_i64s_body(w->value, w->n_value);
	sz[3] = 8 * w->n_span_id;
	sz[4] = wp_u32s_body(w->span_node, w->n_span_node);
	sz[5] = wp_i64s_body(w->span_value, w->n_span_value);
	n += wp_packed_size(w->n_node, sz[1]) +
	    wp_packed_size(w->n_value, sz[2]);
	if (w->meta != NULL)
		n += wp_ld(wp_meta_size(w->meta));
	n += wp_packed_size(w->n_span_id, sz[3]) +
	    wp_packed_size(w->n_span_node, sz[4]) +
	    wp_packed_size(w->n_span_value, sz[5]);
	sz[0] = n;
	return (n);
}

static uint8_t *
wp_series_put(uint8_t *p, const Smolder__V1__SeriesWrite *w,
    const size_t *sz)
{
	for (size_t i = 0; i < w->n_labels; i++) {
		const Types__V1__LabelPair *l = w->labels[i];

		p = wp_ld_put(p, 1, wp_label_size(l));
		p = wp_str_put(p, 1, l->name);
		p = wp_str_put(p, 2, l->value);
	}
	p = wp_var_put(p, 2, (uint64_t)w->time_ms);
	p = wp_u32s_put(p, 3, w->node, w->n_node, sz[1]);
	p = wp_i64s_put(p, 4, w->value, w->n_value, sz[2]);
	if (w->meta != NULL) {
		p = wp_ld_put(p, 5, wp_meta_size(w->meta));
		p = wp_meta_put(p, w->meta);
	}
	if (w->n_span_id != 0) {
		p = wp_ld_put(p, 6, sz[3]);
		for (size_t i = 0; i < w->n_span_id; i++) {
			uint64_t v = w->span_id[i];

			for (int k = 0; k < 8; k++)   /* little-endian */
				*p++ = (uint8_t)(v >> (8 * k));
		}
	}
	p = wp_u32s_put(p, 7, w->span_node, w->n_span_node, sz[4]);
	return (wp_i64s_put(p, 8, w->span_value, w->n_span_value, sz[5]));
}

static size_t
wp_tree_size(const Smolder__V1__StackTree *t, uint32_t *slen, size_t *pb,
    size_t *nb)
{
	size_t n = 0;

	for (size_t i = 0; i < t->n_strings; i++) {
		size_t l = t->strings[i] != NULL ? strlen(t->strings[i]) : 0;

		slen[i] = (uint32_t)l;
		n += wp_ld(l);
	}
	*pb = wp_u32s_body(t->parent, t->n_parent);
	*nb = wp_u32s_body(t->name, t->n_name);
	return (n + wp_packed_size(t->n_parent, *pb) +
	    wp_packed_size(t->n_name, *nb));
}

static uint8_t *
wp_tree_put(uint8_t *p, const Smolder__V1__StackTree *t,
    const uint32_t *slen, size_t pb, size_t nb)
{
	for (size_t i = 0; i < t->n_strings; i++) {
		p = wp_ld_put(p, 1, slen[i]);
		if (slen[i] != 0)
			memcpy(p, t->strings[i], slen[i]);
		p += slen[i];
	}
	p = wp_u32s_put(p, 2, t->parent, t->n_parent, pb);
	return (wp_u32s_put(p, 3, t->name, t->n_name, nb));
}

static size_t
wp_replica_size(const Smolder__V1__Replica *r)
{
	return (wp_str_size(r->id) + wp_str_size(r->zone) +
	    wp_str_size(r->incarnation));
}

/* Whether every message of the write was built, not unpacked with fields
 * this packer would not write back. */
static bool
wp_known(const Smolder__V1__Request *env)
{
	const Smolder__V1__WriteRequest *rq = env->write;

	if (env->base.n_unknown_fields != 0 || rq == NULL ||
	    rq->base.n_unknown_fields != 0 ||
	    (rq->tree != NULL && rq->tree->base.n_unknown_fields != 0))
		return (false);
	for (size_t k = 0; k < rq->n_series; k++) {
		const Smolder__V1__SeriesWrite *w = rq->series[k];

		if (w->base.n_unknown_fields != 0 ||
		    (w->meta != NULL && w->meta->base.n_unknown_fields != 0))
			return (false);
		for (size_t i = 0; i < w->n_labels; i++) {
			if (w->labels[i]->base.n_unknown_fields != 0)
				return (false);
		}
	}
	for (size_t k = 0; k < rq->n_replicas; k++) {
		if (rq->replicas[k]->base.n_unknown_fields != 0)
			return (false);
	}
	return (true);
}

static int
wp_generic(const Smolder__V1__Request *env, struct sm_buf *out)
{
	size_t sz = protobuf_c_message_get_packed_size(&env->base);

	if (sm_buf_reserve(out, sz) != 0)
		return (SM_ENOMEM);
	protobuf_c_message_pack(&env->base, (uint8_t *)out->b + out->len);
	out->len += sz;
	out->b[out->len] = '\0';
	return (0);
}

int
dist_wpack_request(const Smolder__V1__Request *env, struct sm_buf *out)
{
	const Smolder__V1__WriteRequest *rq = env->write;
	const Smolder__V1__StackTree *t;
	struct wp wp = { NULL, NULL };
	size_t wsz = 0, tsz = 0, pb = 0, nb = 0, total;
	uint8_t *p, *start;
	int rv = SM_ENOMEM;

	if (env->method_case != SMOLDER__V1__REQUEST__METHOD_WRITE ||
	    !wp_known(env))
		return (wp_generic(env, out));
	t = rq->tree;
	wp.ssz = sm_malloc(SM_MAX(rq->n_series, 1) * WP_SER * sizeof(size_t));
	wp.slen = sm_malloc(SM_MAX(t != NULL ? t->n_strings : 0, 1) *
	    sizeof(uint32_t));
	if (wp.ssz == NULL || wp.slen == NULL)
		goto out;

	/* Sizes, innermost first. */
	wsz = wp_str_size(rq->tenant) +
	    (rq->profile_id.len != 0 ? wp_ld(rq->profile_id.len) : 0);
	if (t != NULL) {
		tsz = wp_tree_size(t, wp.slen, &pb, &nb);
		wsz += wp_ld(tsz);
	}
	for (size_t k = 0; k < rq->n_series; k++)
		wsz += wp_ld(wp_series_size(rq->series[k],
		    &wp.ssz[k * WP_SER]));
	wsz += wp_var_size(rq->max_series);
	for (size_t k = 0; k < rq->n_replicas; k++)
		wsz += wp_ld(wp_replica_size(rq->replicas[k]));
	total = wp_ld(wsz) + (env->deadline_unix_ms != 0 ?
	    2 + wp_vlen((uint64_t)env->deadline_unix_ms) : 0);
	if (sm_buf_reserve(out, total) != 0)
		goto out;

	/* Bytes, in field order. */
	start = p = (uint8_t *)out->b + out->len;
	p = wp_ld_put(p, 1, wsz);
	p = wp_str_put(p, 1, rq->tenant);
	if (rq->profile_id.len != 0) {
		p = wp_ld_put(p, 2, rq->profile_id.len);
		memcpy(p, rq->profile_id.data, rq->profile_id.len);
		p += rq->profile_id.len;
	}
	if (t != NULL) {
		p = wp_ld_put(p, 3, tsz);
		p = wp_tree_put(p, t, wp.slen, pb, nb);
	}
	for (size_t k = 0; k < rq->n_series; k++) {
		const size_t *sz = &wp.ssz[k * WP_SER];

		p = wp_ld_put(p, 4, sz[0]);
		p = wp_series_put(p, rq->series[k], sz);
	}
	p = wp_var_put(p, 5, rq->max_series);
	for (size_t k = 0; k < rq->n_replicas; k++) {
		const Smolder__V1__Replica *r = rq->replicas[k];

		p = wp_ld_put(p, 6, wp_replica_size(r));
		p = wp_str_put(p, 1, r->id);
		p = wp_str_put(p, 2, r->zone);
		p = wp_str_put(p, 3, r->incarnation);
	}
	if (env->deadline_unix_ms != 0) {
		p = wp_vput(p, 30 << 3);   /* the tag: two bytes */
		p = wp_vput(p, (uint64_t)env->deadline_unix_ms);
	}
	SM_ASSERT((size_t)(p - start) == total);
	out->len += total;
	out->b[out->len] = '\0';
	rv = 0;
out:
	sm_free(wp.ssz);
	sm_free(wp.slen);
	return (rv);
}
