/*
 * bucket_index.c -- the compactor's pass over the bucket (bucket_index.h
 * tells what it does and why).
 */
#include <string.h>

#include "common/json.h"
#include "common/log.h"
#include "ingester/ship.h"

#include "bucket_index.h"

/* One block directory <tk>/blocks/<ULID>/ as the listing shows it. */
struct bi_block {
	char ulid[ING_ULID_LEN + 1];
	bool has_block, has_meta, has_mark;
};

/* One tenant's keys. */
struct bi_tenant {
	char *tk;                  /* escaped tenant key segment */
	struct bi_block *v;
	uint32_t n, cap;
	bool has_index;
};

struct bi_list {
	struct bi_tenant *t;
	uint32_t n, cap;
};

/* Split "<tk>/blocks/<ULID>/<name>" or "<tk>/bucket-index.json". */
static int
bi_add(void *arg, const struct sm_bucket_obj *o)
{
	struct bi_list *l = arg;
	const char *slash = strchr(o->key, '/'), *rest;
	struct bi_tenant *t;
	struct bi_block *b;
	size_t tl;
	uint8_t bin[16];

	if (slash == NULL)
		return (0);
	tl = (size_t)(slash - o->key);
	rest = slash + 1;
	if (l->n == 0 || strlen(l->t[l->n - 1].tk) != tl ||
	    memcmp(l->t[l->n - 1].tk, o->key, tl) != 0) {
		if (SM_GROW(l->t, l->cap, l->n + 1, 16) != 0)
			return (SM_ENOMEM);
		t = &l->t[l->n];
		memset(t, 0, sizeof(*t));
		if ((t->tk = sm_strndup(o->key, tl)) == NULL)
			return (SM_ENOMEM);
		l->n++;
	}
	t = &l->t[l->n - 1];
	if (strcmp(rest, "bucket-index.json") == 0) {
		t->has_index = true;
		return (0);
	}
	if (strncmp(rest, "blocks/", 7) != 0 || strlen(rest) < 7 +
	    ING_ULID_LEN + 2 || rest[7 + ING_ULID_LEN] != '/')
		return (0);
	rest += 7;
	if (t->n == 0 || strncmp(t->v[t->n - 1].ulid, rest,
	    ING_ULID_LEN) != 0) {
		if (SM_GROW(t->v, t->cap, t->n + 1, 64) != 0)
			return (SM_ENOMEM);
		b = &t->v[t->n];
		memset(b, 0, sizeof(*b));
		memcpy(b->ulid, rest, ING_ULID_LEN);
		if (ing_ulid_parse(b->ulid, bin) != 0)
			return (0);     /* not ours: left alone */
		t->n++;
	}
	b = &t->v[t->n - 1];
	rest += ING_ULID_LEN + 1;
	if (strcmp(rest, "block") == 0)
		b->has_block = true;
	else if (strcmp(rest, "meta.json") == 0)
		b->has_meta = true;
	else if (strcmp(rest, "deletion-mark.json") == 0)
		b->has_mark = true;
	return (0);
}

static void
bi_list_free(struct bi_list *l)
{
	for (uint32_t i = 0; i < l->n; i++) {
		sm_free(l->t[i].tk);
		sm_free(l->t[i].v);
	}
	sm_free(l->t);
}

/* A JSON object from the bucket; NULL with err set (SM_ENOTFOUND...). */
static struct sm_json *
bi_get_json(struct sm_bucket *b, const char *key, struct sm_err *err)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_json *j = NULL;
	struct sm_err je;

	if (sm_bucket_get(b, key, 0, SM_BUCKET_WHOLE, &v, err) == 0) {
		if (sm_json_parse(v.b, v.len, 0, &j, &je) != 0)
			sm_err_set(err, SM_ECORRUPT, "%s: not a JSON object "
			    "(%s)", key, je.msg);
		else if (!sm_json_is_object(j))
			sm_err_set(err, SM_ECORRUPT, "%s: not a JSON object "
			    "(an array)", key);
		if (!sm_json_is_object(j)) {
			sm_json_free(j);
			j = NULL;
		}
	}
	sm_buf_fini(&v);
	return (j);
}

/* Keys sorted: the index and the marks are compared byte for byte by
 * the tests and diffed by operators. */
static int
bi_put_json(struct sm_bucket *b, const char *key, const struct sm_json *j,
    struct sm_err *err)
{
	struct sm_buf s = SM_BUF_INIT;
	int rv;

	if ((rv = sm_json_dump(j, SM_JSON_SORT_KEYS, &s)) != 0)
		rv = sm_err_set(err, rv, "out of memory");
	else
		rv = sm_bucket_put(b, key, s.b, s.len, err);
	sm_buf_fini(&s);
	return (rv);
}

/* A deletion-mark.json: {"deletion_time_ms", "reason", "ulid", "version"}. */
static int
bi_put_mark(struct sm_bucket *b, const char *key, const char *ulid,
    size_t ulid_len, int64_t at_ms, const char *reason, struct sm_err *err)
{
	struct sm_json *mk = sm_json_object();
	int rv;

	if ((rv = sm_json_set_int(mk, "version", 1)) != 0 ||
	    (rv = sm_json_set_strn(mk, "ulid", ulid, ulid_len)) != 0 ||
	    (rv = sm_json_set_int(mk, "deletion_time_ms", at_ms)) != 0 ||
	    (rv = sm_json_set_str(mk, "reason", reason)) != 0) {
		rv = sm_err_set(err, rv, rv == SM_ENOMEM ? "out of memory" :
		    "%s: the reason is not UTF-8", key);
		goto out;
	}
	rv = bi_put_json(b, key, mk, err);
out:
	sm_json_free(mk);
	return (rv);
}

/* The ULID's milliseconds (0 for text that is not one). */
static int64_t
bi_ulid_ms(const char *ulid)
{
	uint8_t bin[16];

	return (ing_ulid_parse(ulid, bin) == 0 ? ing_ulid_ms(bin) : 0);
}

struct bi_ctx {
	struct sm_bucket *b;
	int64_t now, delay;
	int64_t (*floor)(void *arg, const char *tenant);
	void *arg;
	struct cpt_bucket_stats *st;
};

#define BI_KEY 1024

/* Delete a block's objects, meta.json first (bucket_index.h step 3). */
static int
bi_delete_block(struct bi_ctx *c, const char *tk, const struct bi_block *bb,
    struct sm_err *err)
{
	static const char *const names[] = { "meta.json", "block",
		"deletion-mark.json" };
	char key[BI_KEY];
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(names); i++) {
		snprintf(key, sizeof(key), "%s/blocks/%s/%s", tk, bb->ulid,
		    names[i]);
		if ((rv = sm_bucket_delete(c->b, key, err)) != 0)
			return (rv);
	}
	return (0);
}

/*
 * The meta of block bb: from the previous index when it is there (metas
 * are immutable), else from its meta.json.  New reference or NULL.
 */
static struct sm_json *
bi_meta(struct bi_ctx *c, const char *tk, const struct bi_block *bb,
    struct sm_json *prev, struct sm_err *err)
{
	char key[BI_KEY];
	struct sm_json *m = sm_json_get(prev, bb->ulid);

	if (m != NULL)
		return (sm_json_ref(m));
	snprintf(key, sizeof(key), "%s/blocks/%s/meta.json", tk, bb->ulid);
	return (bi_get_json(c->b, key, err));
}

/* The deletion time of bb's mark (from prev or its object); 0: none. */
static int
bi_mark_time(struct bi_ctx *c, const char *tk, const struct bi_block *bb,
    const struct sm_json *prev_marks, int64_t *at, struct sm_err *err)
{
	char key[BI_KEY];
	struct sm_json *j;

	*at = 0;
	if (!bb->has_mark)
		return (0);
	if ((j = sm_json_get(prev_marks, bb->ulid)) != NULL) {
		*at = sm_json_int(j);
		return (0);
	}
	snprintf(key, sizeof(key), "%s/blocks/%s/deletion-mark.json", tk,
	    bb->ulid);
	if ((j = bi_get_json(c->b, key, err)) == NULL)
		return (err->code == SM_ENOTFOUND ? 0 : err->code);
	*at = sm_json_int(sm_json_get(j, "deletion_time_ms"));
	sm_json_free(j);
	return (0);
}

/* The previous index as {ulid: meta} and {ulid: deletion time}. */
static void
bi_prev_index(struct bi_ctx *c, const struct bi_tenant *t,
    struct sm_json **metas, struct sm_json **marks)
{
	char key[BI_KEY];
	struct sm_err err;
	struct sm_json *idx, *bl;

	*metas = sm_json_object();
	*marks = sm_json_object();
	if (!t->has_index)
		return;
	snprintf(key, sizeof(key), "%s/bucket-index.json", t->tk);
	if ((idx = bi_get_json(c->b, key, &err)) == NULL)
		return;     /* rebuilt from the metas */
	bl = sm_json_get(idx, "blocks");
	for (size_t i = 0; i < sm_json_len(bl); i++) {
		struct sm_json *e = sm_json_at(bl, i);
		const char *u = sm_json_str(sm_json_get(e, "ulid"));
		struct sm_json *dt = sm_json_get(e, "deletion_time_ms");
		struct sm_json *m;

		/* An entry that cannot be kept is read again from its
		 * meta.json. */
		if (u == NULL || (m = sm_json_copy(e)) == NULL)
			continue;
		(void)sm_json_del(m, "deletion_time_ms");
		(void)sm_json_set_take(*metas, u, m);
		if (dt != NULL)
			(void)sm_json_set_take(*marks, u, sm_json_ref(dt));
	}
	sm_json_free(idx);
}

/* Steps 2-5 of bucket_index.h for one tenant. */
static int
bi_tenant(struct bi_ctx *c, const struct bi_tenant *t, struct sm_err *err)
{
	struct sm_json *prev, *prev_marks, *blocks = sm_json_array();
	struct sm_json *idx = NULL;
	char key[BI_KEY];
	int rv = 0;

	bi_prev_index(c, t, &prev, &prev_marks);
	if (blocks == NULL || prev == NULL || prev_marks == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < t->n && rv == 0; i++) {
		const struct bi_block *bb = &t->v[i];
		const char *tenant;
		struct sm_json *m;
		int64_t mark_at, max_t, fl;

		if (!bb->has_meta) {
			/* unfinished upload, or what a deletion left */
			if (bb->has_mark || bi_ulid_ms(bb->ulid) <
			    c->now - 2 * c->delay) {
				if ((rv = bi_delete_block(c, t->tk, bb,
				    err)) == 0)
					c->st->partial_deleted++;
			}
			continue;
		}
		if (!bb->has_block) {
			/* A meta.json without its object is no block: never
			 * indexed (readers would fail on it); logged. */
			sm_warn("compactor", "meta.json without its block "
			    "object is not indexed\ttenant_key=%s ulid=%s",
			    t->tk, bb->ulid);
			continue;
		}
		if ((m = bi_meta(c, t->tk, bb, prev, err)) == NULL) {
			rv = err->code;
			break;
		}
		if ((rv = bi_mark_time(c, t->tk, bb, prev_marks, &mark_at,
		    err)) != 0) {
			sm_json_free(m);
			break;
		}
		tenant = sm_json_str(sm_json_get(m, "tenant"));
		max_t = sm_json_int(sm_json_get(m, "max_t"));
		fl = tenant != NULL ? c->floor(c->arg, tenant) : 0;
		if (mark_at == 0 && fl > 0 && max_t <= fl) {
			snprintf(key, sizeof(key),
			    "%s/blocks/%s/deletion-mark.json", t->tk, bb->ulid);
			if ((rv = bi_put_mark(c->b, key, bb->ulid,
			    strlen(bb->ulid), c->now, "retention", err)) != 0) {
				sm_json_free(m);
				break;
			}
			mark_at = c->now;
			c->st->marked++;
		}
		if (mark_at > 0 && c->now - mark_at >= c->delay) {
			sm_json_free(m);
			if ((rv = bi_delete_block(c, t->tk, bb, err)) == 0)
				c->st->deleted++;
			continue;
		}
		if (mark_at > 0 && (rv = sm_json_set_int(m,
		    "deletion_time_ms", mark_at)) != 0)
			sm_json_free(m);
		else
			rv = sm_json_append_take(blocks, m);
		if (rv != 0) {
			rv = sm_err_set(err, rv, "out of memory");
			break;
		}
		c->st->blocks++;
	}
	if (rv != 0)
		goto out;
	idx = sm_json_object();
	if ((rv = sm_json_set_int(idx, "version", 1)) != 0 ||
	    (rv = sm_json_set_int(idx, "updated_at_ms", c->now)) != 0 ||
	    (rv = sm_json_set_take(idx, "blocks", sm_json_ref(blocks))) != 0) {
		rv = sm_err_set(err, rv, "out of memory");
		goto out;
	}
	snprintf(key, sizeof(key), "%s/bucket-index.json", t->tk);
	rv = bi_put_json(c->b, key, idx, err);
out:
	sm_json_free(idx);
	sm_json_free(blocks);
	sm_json_free(prev);
	sm_json_free(prev_marks);
	return (rv);
}

int
cpt_bucket_pass(struct sm_bucket *b, int64_t now_ms,
    int64_t deletion_delay_ms,
    int64_t (*floor)(void *arg, const char *tenant), void *arg,
    struct cpt_bucket_stats *st, struct sm_err *err)
{
	struct bi_list l = { 0 };
	struct bi_ctx c = { b, now_ms, deletion_delay_ms, floor, arg, st };
	int rv;

	memset(st, 0, sizeof(*st));
	if ((rv = sm_bucket_list(b, "", bi_add, &l, err)) != 0) {
		if (rv == SM_ENOMEM)
			sm_err_set(err, rv, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < l.n; i++) {
		struct sm_err e2;

		if (l.t[i].n == 0 && !l.t[i].has_index)
			continue;
		st->tenants++;
		sm_err_clear(&e2);
		if (bi_tenant(&c, &l.t[i], &e2) != 0) {
			st->failed++;
			sm_warn("compactor", "bucket pass failed for a tenant; "
			    "the next pass retries\ttenant_key=%s err=\"%s\"",
			    l.t[i].tk, e2.msg);
		}
	}
out:
	bi_list_free(&l);
	return (rv);
}

int
cpt_bucket_mark(struct sm_bucket *b, const char *meta_key, int64_t now_ms,
    const char *reason, struct sm_err *err)
{
	size_t n = strlen(meta_key);
	const char *ulid;
	char key[BI_KEY];

	if (n < 10 + ING_ULID_LEN + 1 || strcmp(meta_key + n - 10,
	    "/meta.json") != 0)
		return (sm_err_set(err, SM_EINVAL, "%s: not a meta.json key",
		    meta_key));
	ulid = meta_key + n - 10 - ING_ULID_LEN;
	snprintf(key, sizeof(key), "%.*sdeletion-mark.json", (int)(n - 9),
	    meta_key);
	return (bi_put_mark(b, key, ulid, ING_ULID_LEN, now_ms, reason, err));
}
