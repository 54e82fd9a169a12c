/*
 * ship.c -- the shipper (ship.h tells the design and owns the layout).
 *
 * A block object is built in memory from the stored values: a block is
 * at most what one cut held in memory anyway (-ingester.head-max-bytes
 * bounds it), and one PUT of the whole object is what every S3-compatible
 * store handles alike (Swift's s3api, GCS and Ceph differ in multipart).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/hash.h"
#include "common/json.h"
#include "common/kv.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/tenant.h"

#include "ship.h"

struct ing_ship {
	struct ing_db *db;
	struct ing_store *store;
	struct sm_bucket *bucket;
	char *instance;
	char incarnation[33];
	pthread_mutex_t mu;            /* one pass at a time */
	_Atomic uint32_t pending;
	_Atomic int64_t oldest_ms;     /* max_t of the oldest pending block */
	bool kill_after_object;        /* SMOLDER_TEST_FAULTS=ship-kill */
	uint32_t damaged_logged;       /* damaged blocks already logged (mu) */
	uint32_t workers;              /* uploads at once */
};

static struct sm_metric *m_shipped, *m_bytes, *m_fail;

static const struct sm_metric_def ship_metric_defs[] = {
	{ &m_shipped, SM_METRIC_COUNTER, "smolder_ingester_ship_blocks_total",
	    "Blocks uploaded to the bucket (meta.json stored).", NULL,
	    NULL, 0 },
	{ &m_bytes, SM_METRIC_COUNTER, "smolder_ingester_ship_bytes_total",
	    "Bytes of block objects uploaded to the bucket.", NULL, NULL, 0 },
	{ &m_fail, SM_METRIC_COUNTER, "smolder_ingester_ship_failures_total",
	    "Block uploads that failed (retried at the next pass).", NULL,
	    NULL, 0 },
};

static struct sm_metric_set ship_metric_set =
    SM_METRIC_SET(ship_metric_defs);

static double
gauge_pending(void *arg)
{
	return ((double)atomic_load(&((struct ing_ship *)arg)->pending));
}

static double
gauge_oldest(void *arg)
{
	struct ing_ship *sh = arg;
	int64_t t = atomic_load(&sh->oldest_ms), now = sm_now_ms();

	return (t == 0 || t > now ? 0.0 : (double)(now - t) / 1000.0);
}

/* --- ULIDs and keys -------------------------------------------------------- */

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

void
ing_ulid_text(const uint8_t bin[16], char out[ING_ULID_LEN + 1])
{
	/* 128 bits as 26 base32 digits, the first carrying 3 bits. */
	for (int i = 0; i < ING_ULID_LEN; i++) {
		int bit = 128 - 5 * (ING_ULID_LEN - i);    /* may be < 0 */
		unsigned v = 0;

		for (int b = 0; b < 5; b++) {
			int pos = bit + b;

			v <<= 1;
			if (pos >= 0 && (bin[pos / 8] >> (7 - pos % 8)) & 1)
				v |= 1;
		}
		out[i] = crockford[v];
	}
	out[ING_ULID_LEN] = '\0';
}

int
ing_ulid_parse(const char *text, uint8_t bin[16])
{
	memset(bin, 0, 16);
	if (strlen(text) != ING_ULID_LEN)
		return (SM_EINVAL);
	for (int i = 0; i < ING_ULID_LEN; i++) {
		const char *q = strchr(crockford, text[i]);
		int bit = 128 - 5 * (ING_ULID_LEN - i);
		unsigned v;

		if (text[i] == '\0' || q == NULL)
			return (SM_EINVAL);
		v = (unsigned)(q - crockford);
		if (i == 0 && v > 7)
			return (SM_EINVAL);
		for (int b = 0; b < 5; b++) {
			int pos = bit + b;

			if (pos >= 0 && ((v >> (4 - b)) & 1))
				bin[pos / 8] |= (uint8_t)(1u << (7 - pos % 8));
		}
	}
	return (0);
}

static void
ulid_bin(int64_t ms, uint8_t bin[16])
{
	uint64_t t = (uint64_t)ms;

	for (int i = 0; i < 6; i++)
		bin[i] = (uint8_t)(t >> (8 * (5 - i)));
	if (getrandom(bin + 6, 10, 0) != 10) {
		/* getrandom(2) does not fail for 10 bytes once the pool is
		 * initialised; fall back on a hash of time and address. */
		uint64_t h = sm_hash(&t, sizeof(t)) ^ (uint64_t)(uintptr_t)bin;

		memcpy(bin + 6, &h, 8);
		bin[14] = (uint8_t)(h >> 3);
		bin[15] = (uint8_t)(h >> 11);
	}
}

int64_t
ing_ulid_ms(const uint8_t bin[16])
{
	int64_t ms = 0;

	for (int i = 0; i < 6; i++)
		ms = ms << 8 | bin[i];
	return (ms);
}

void
ing_ulid_make(int64_t ms, char out[ING_ULID_LEN + 1])
{
	uint8_t bin[16];

	ulid_bin(ms, bin);
	ing_ulid_text(bin, out);
}

void
ing_ship_tenant_key(const char *tenant, char *out, size_t outlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (const char *p = tenant; *p != '\0' && o + 4 <= outlen; p++) {
		unsigned char c = (unsigned char)*p;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '-') {
			out[o++] = (char)c;
		} else {
			out[o++] = '_';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
}

/* --- the block object -------------------------------------------------------- */

struct obj_build {
	struct sm_buf obj;             /* parts */
	struct sm_buf toc;
	uint32_t nparts;
	struct sm_err *err;            /* a damaged part says which */
};

static int
obj_part(void *arg, char kind, uint32_t series, const uint8_t *v, size_t n)
{
	struct obj_build *ob = arg;
	uint8_t e[ING_SHIP_TOC_ENTRY];
	const uint8_t *pl;
	size_t pn;
	uint32_t raw;

	if (n > UINT32_MAX)
		return (SM_ETOOBIG);
	/* A damaged local copy is not spread to the bucket: the other
	 * replicas' copies of the same data are whole. */
	if (ing_block_open(v, n, kind, &pl, &pn, &raw, ob->err) != 0)
		return (sm_err_prefix(ob->err, "local part '%c' series %u",
		    kind, series));
	e[0] = (uint8_t)kind;
	sm_put_be32(e + 1, series);
	sm_put_be64(e + 5, ob->obj.len);
	sm_put_be32(e + 13, (uint32_t)n);
	sm_buf_append(&ob->obj, v, n);
	sm_buf_append(&ob->toc, e, sizeof(e));
	ob->nparts++;
	return (sm_buf_error(&ob->obj) != 0 ? SM_ENOMEM :
	    sm_buf_error(&ob->toc));
}

static void
obj_finish(struct obj_build *ob)
{
	uint8_t f[ING_SHIP_FOOTER];
	uint64_t toc_off = ob->obj.len;

	sm_buf_append(&ob->obj, ob->toc.b, ob->toc.len);
	sm_put_be32(f, ob->nparts);
	sm_put_be64(f + 4, toc_off);
	sm_put_be32(f + 12, (uint32_t)sm_hash(ob->toc.b, ob->toc.len));
	sm_put_be32(f + 16, ING_SHIP_VERSION);
	memcpy(f + 20, ING_SHIP_MAGIC, 4);
	sm_buf_append(&ob->obj, f, sizeof(f));
}

/*
 * The footer f (the object's last ING_SHIP_FOOTER bytes) of an object of
 * `size` bytes: its part count and where its table of contents starts.
 */
static int
footer_read(const uint8_t *f, uint64_t size, uint32_t *np, uint64_t *toc_off,
    struct sm_err *err)
{
	if (memcmp(f + 20, ING_SHIP_MAGIC, 4) != 0 ||
	    sm_get_be32(f + 16) != ING_SHIP_VERSION)
		return (sm_err_set(err, SM_ECORRUPT, "block object: bad "
		    "footer magic or version"));
	*np = sm_get_be32(f);
	*toc_off = sm_get_be64(f + 4);
	if (*toc_off > size - ING_SHIP_FOOTER ||
	    (size - ING_SHIP_FOOTER - *toc_off) != (uint64_t)*np *
	    ING_SHIP_TOC_ENTRY)
		return (sm_err_set(err, SM_ECORRUPT, "block object: table of "
		    "contents at %llu does not fit %u entries",
		    (unsigned long long)*toc_off, *np));
	return (0);
}

/* The table of contents (np entries, checked against the footer's
 * checksum): every part inside [0, toc_off). */
static int
toc_check(const uint8_t *toc, uint32_t np, uint64_t toc_off,
    const uint8_t *f, struct sm_err *err)
{
	if ((uint32_t)sm_hash(toc, (size_t)np * ING_SHIP_TOC_ENTRY) !=
	    sm_get_be32(f + 12))
		return (sm_err_set(err, SM_ECORRUPT, "block object: table of "
		    "contents checksum mismatch"));
	for (uint32_t i = 0; i < np; i++) {
		const uint8_t *e = toc + (size_t)i * ING_SHIP_TOC_ENTRY;
		uint64_t off = sm_get_be64(e + 5);
		uint32_t len = sm_get_be32(e + 13);

		if (off > toc_off || len > toc_off - off ||
		    len < ING_BLOCK_HDR)
			return (sm_err_set(err, SM_ECORRUPT, "block object: "
			    "part %u at %llu+%u outside the parts", i,
			    (unsigned long long)off, len));
	}
	return (0);
}

int
ing_ship_object_verify(const uint8_t *p, size_t n, uint32_t *nparts,
    struct sm_err *err)
{
	const uint8_t *f, *toc;
	uint64_t toc_off;
	uint32_t np;
	int rv;

	if (nparts != NULL)
		*nparts = 0;
	if (n < ING_SHIP_FOOTER)
		return (sm_err_set(err, SM_ECORRUPT, "block object: %zu "
		    "bytes, shorter than its footer", n));
	f = p + n - ING_SHIP_FOOTER;
	if ((rv = footer_read(f, n, &np, &toc_off, err)) != 0)
		return (rv);
	toc = p + toc_off;
	if ((rv = toc_check(toc, np, toc_off, f, err)) != 0)
		return (rv);
	for (uint32_t i = 0; i < np; i++) {
		const uint8_t *e = toc + (size_t)i * ING_SHIP_TOC_ENTRY;
		uint64_t off = sm_get_be64(e + 5);
		uint32_t len = sm_get_be32(e + 13), raw;
		const uint8_t *pl;
		size_t pn;

		if ((rv = ing_block_open(p + off, len, (char)e[0], &pl, &pn,
		    &raw, err)) != 0)
			return (sm_err_prefix(err, "block object part %u "
			    "('%c' series %u)", i, e[0], sm_get_be32(e + 1)));
	}
	if (nparts != NULL)
		*nparts = np;
	return (0);
}

int
ing_ship_object_check(const uint8_t *p, size_t n, int64_t meta_bytes,
    const char *meta_xxh3, uint32_t *nparts, struct sm_err *err)
{
	char hx[17];

	if (nparts != NULL)
		*nparts = 0;
	snprintf(hx, sizeof(hx), "%016llx", (unsigned long long)sm_hash(p, n));
	if ((int64_t)n != meta_bytes || meta_xxh3 == NULL ||
	    strcmp(meta_xxh3, hx) != 0)
		return (sm_err_set(err, SM_ECORRUPT, "block object: %zu bytes, "
		    "xxh3 %s; meta.json says %lld bytes, %s", n, hx,
		    (long long)meta_bytes, meta_xxh3 != NULL ? meta_xxh3 :
		    "(none)"));
	return (ing_ship_object_verify(p, n, nparts, err));
}

/* --- meta.json ------------------------------------------------------------- */

/* The "fold" member of a fold's meta.json (ship.h), set into j. */
static int
meta_fold(const struct ing_ship_src *sc, struct sm_json *j)
{
	struct sm_json *f = sm_json_object(), *in = sm_json_array();
	struct sm_json *cv = NULL, *x = NULL;
	int rv = 0;

	for (uint32_t i = 0; i < sc->ninputs && rv == 0; i++) {
		const struct ing_fold_ref *r = &sc->inputs[i];

		x = sm_json_object();
		if ((rv = sm_json_set_str(x, "incarnation", r->inc)) != 0 ||
		    (rv = sm_json_set_int(x, "gen", (int64_t)r->gen)) != 0 ||
		    (rv = sm_json_set_int(x, "first_hour",
		    (int64_t)r->first_hour)) != 0 ||
		    (rv = sm_json_set_int(x, "hour_mask",
		    (int64_t)r->hour_mask)) != 0)
			goto out;
		rv = sm_json_append_take(in, x);
		x = NULL;
	}
	if (rv != 0 ||
	    (rv = sm_json_set_int(f, "start", sc->fold_start)) != 0 ||
	    (rv = sm_json_set_int(f, "end", sc->fold_end)) != 0 ||
	    (rv = sm_json_set_take(f, "inputs", sm_json_ref(in))) != 0)
		goto out;
	if (sc->ncovers > 0) {
		cv = sm_json_array();
		for (uint32_t i = 0; i < sc->ncovers && rv == 0; i++)
			rv = sm_json_append_int(cv, (int64_t)sc->covers[i]);
		if (rv != 0 || (rv = sm_json_set_take(f, "covers",
		    sm_json_ref(cv))) != 0)
			goto out;
	}
	rv = sm_json_set_take(j, "fold", sm_json_ref(f));
out:
	sm_json_free(x);
	sm_json_free(cv);
	sm_json_free(in);
	sm_json_free(f);
	return (rv);
}

/* meta.json's text (ship.h), keys sorted, or NULL without memory: the
 * compactor copies these objects into its bucket index as they are. */
static char *
meta_json(const struct ing_ship_src *sc, const char *tenant, const char *ulid,
    const struct ing_block_meta *m, const struct sm_buf *obj)
{
	struct sm_json *j = sm_json_object(), *src = sm_json_object();
	struct sm_json *rep = sm_json_array();
	const struct {
		const char *name;
		int64_t v;
	} ints[] = {
		{ "version", ING_SHIP_VERSION },
		{ "min_t", m->min_t },
		{ "max_t", m->max_t },
		{ "bucket_ms", m->bucket_ms },
		{ "tier_ms", m->tier_ms },
		{ "cover_start", m->cover_start },
		{ "cover_end", m->cover_end },
		{ "cover_gen", (int64_t)m->cover_gen },
		{ "nseries", m->nseries },
		{ "nspans", m->nspans },
		{ "nprofiles", m->nprofiles },
		{ "block_bytes", (int64_t)obj->len },
		{ "shipped_at_ms", sm_now_ms() },
	};
	char hx[17];
	char *s = NULL;
	int rv = 0;

	snprintf(hx, sizeof(hx), "%016llx",
	    (unsigned long long)sm_hash(obj->b, obj->len));
	for (uint32_t i = 0; i < sc->nreplaces && rv == 0; i++)
		rv = sm_json_append_int(rep, (int64_t)sc->replaces[i]);
	if (rv != 0 ||
	    (rv = sm_json_set_str(src, "instance", sc->instance)) != 0 ||
	    (rv = sm_json_set_str(src, "incarnation", sc->inc)) != 0 ||
	    (rv = sm_json_set_int(src, "gen", (int64_t)m->gen)) != 0 ||
	    (rv = sm_json_set_take(src, "replaces", sm_json_ref(rep))) != 0 ||
	    (rv = sm_json_set_str(j, "ulid", ulid)) != 0 ||
	    (rv = sm_json_set_str(j, "tenant", tenant)) != 0 ||
	    (rv = sm_json_set_str(j, "block_xxh3", hx)) != 0 ||
	    (rv = sm_json_set_take(j, "source", sm_json_ref(src))) != 0)
		goto out;
	for (size_t i = 0; i < SM_ARRAY_LEN(ints) && rv == 0; i++)
		rv = sm_json_set_int(j, ints[i].name, ints[i].v);
	if (rv == 0 && sc->fold_end > sc->fold_start)
		rv = meta_fold(sc, j);
	if (rv == 0)
		s = sm_json_dumps(j, SM_JSON_SORT_KEYS);
out:
	sm_json_free(rep);
	sm_json_free(src);
	sm_json_free(j);
	return (s);
}

/* Upload block object ob (finished) and then its meta.json under ulid. */
static int
put_block(struct sm_bucket *bucket, const struct ing_ship_src *sc,
    const char *tenant, const char *ulid, const struct ing_block_meta *m,
    const struct sm_buf *obj, bool kill_after_object, struct sm_err *err)
{
	char tk[3 * SM_TENANT_MAX_LEN + 1];
	char key[2 * SM_BUCKET_KEY_MAX];
	char *mj;
	int rv;

	ing_ship_tenant_key(tenant, tk, sizeof(tk));
	snprintf(key, sizeof(key), "%s/blocks/%s/block", tk, ulid);
	if ((rv = sm_bucket_put(bucket, key, obj->b, obj->len, err)) != 0)
		return (rv);
	sm_counter_add(sm_metric_child0(m_bytes), obj->len);
	if (kill_after_object)
		raise(SIGKILL);     /* tests: a crash before meta.json */
	if ((mj = meta_json(sc, tenant, ulid, m, obj)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	snprintf(key, sizeof(key), "%s/blocks/%s/meta.json", tk, ulid);
	rv = sm_bucket_put(bucket, key, mj, strlen(mj), err);
	free(mj);
	return (rv);
}

int
ing_ship_put(struct sm_bucket *bucket, struct ing_store *store,
    const char *local_tenant, const char *tenant,
    const struct ing_block_meta *m, const struct ing_ship_src *src,
    char ulid[ING_ULID_LEN + 1], uint64_t *bytes, struct sm_err *err)
{
	struct obj_build ob = { SM_BUF_INIT, SM_BUF_INIT, 0, err };
	int rv;

	sm_metrics_register_once(&ship_metric_set);
	if ((rv = ing_store_block_parts(store, local_tenant, m->gen,
	    obj_part, &ob, err)) != 0)
		goto out;
	if (ob.nparts == 0) {
		rv = sm_err_set(err, SM_ENOTFOUND, "block %s/%llu has no parts",
		    local_tenant, (unsigned long long)m->gen);
		goto out;
	}
	obj_finish(&ob);
	if (sm_buf_error(&ob.obj) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	ing_ulid_make(sm_now_ms(), ulid);
	rv = put_block(bucket, src, tenant, ulid, m, &ob.obj,
	    src->kill_after_object, err);
	if (bytes != NULL)
		*bytes = ob.obj.len;
out:
	sm_buf_fini(&ob.obj);
	sm_buf_fini(&ob.toc);
	return (rv);
}

/* --- the pass -------------------------------------------------------------- */

enum ship_outcome {
	SHIP_ALREADY,      /* its record says shipped */
	SHIP_UPLOADED,
	SHIP_GONE,         /* retired between the listing and the upload */
};

/* Upload one block unless its record says it is in the bucket. */
static int
ship_one(struct ing_ship *sh, const char *tenant,
    const struct ing_block_meta *m, enum ship_outcome *o, struct sm_err *err)
{
	struct obj_build ob = { SM_BUF_INIT, SM_BUF_INIT, 0, err };
	struct ing_ship_src sc = { 0 };
	struct ing_ship_rec r;
	char ulid[ING_ULID_LEN + 1];
	uint8_t zero[16] = { 0 };
	int rv;

	*o = SHIP_ALREADY;
	rv = ing_store_ship_get(sh->store, tenant, m->gen, &r, err);
	if (rv == SM_ENOTFOUND)
		rv = 0;
	if (rv != 0)
		return (rv);
	if (r.shipped)
		goto out;
	if ((rv = ing_store_block_parts(sh->store, tenant, m->gen, obj_part,
	    &ob, err)) != 0)
		goto out;
	if (ob.nparts == 0) {
		*o = SHIP_GONE;
		goto out;
	}
	/* The ULID is durable before the first byte goes out (ship.h).  An
	 * attempt that started more than ING_SHIP_ULID_MAX_AGE_MS ago gets a
	 * fresh one: the compactor may by now have deleted its object as an
	 * unfinished upload, and a meta.json must never go out without it. */
	if (memcmp(r.ulid, zero, 16) == 0 ||
	    ing_ulid_ms(r.ulid) < sm_now_ms() - ING_SHIP_ULID_MAX_AGE_MS) {
		ulid_bin(sm_now_ms(), r.ulid);
		if ((rv = ing_store_ship_put(sh->store, tenant, m->gen, &r,
		    err)) != 0)
			goto out;
	}
	ing_ulid_text(r.ulid, ulid);
	obj_finish(&ob);
	if (sm_buf_error(&ob.obj) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	sc.instance = sh->instance;
	sc.inc = sh->incarnation;
	sc.replaces = r.inputs;
	sc.nreplaces = r.ninputs;
	if ((rv = put_block(sh->bucket, &sc, tenant, ulid, m, &ob.obj,
	    sh->kill_after_object, err)) != 0)
		goto out;
	r.shipped = true;
	if ((rv = ing_store_ship_put(sh->store, tenant, m->gen, &r, err)) != 0)
		goto out;
	sm_counter_inc(sm_metric_child0(m_shipped));
	*o = SHIP_UPLOADED;
	sm_debug("ship", "block shipped\ttenant=%s gen=%llu ulid=%s bytes=%zu",
	    tenant, (unsigned long long)m->gen, ulid, ob.obj.len);
out:
	ing_ship_rec_fini(&r);
	sm_buf_fini(&ob.obj);
	sm_buf_fini(&ob.toc);
	return (rv);
}

/*
 * One pass's shared state: workers take blocks in order (next) until the
 * list ends or a bucket failure stops them all; ok[i] says block i is in
 * the bucket (or gone) after the pass.
 */
struct ship_run {
	struct ing_ship *sh;
	struct ing_db_block *v;
	uint32_t n;
	uint8_t *ok;
	atomic_uint next, done, damaged;
	atomic_bool stop;
	pthread_mutex_t mu;            /* the first failure: rv, err */
	int rv;
	struct sm_err err;
};

static void *
ship_worker(void *arg)
{
	struct ship_run *x = arg;
	uint32_t i;

	while (!atomic_load(&x->stop) &&
	    (i = atomic_fetch_add(&x->next, 1)) < x->n) {
		struct ing_db_block *b = &x->v[i];
		enum ship_outcome o;
		struct sm_err e1;
		int rv;

		if (b->meta.broken)
			continue;   /* unreadable here: nothing to ship */
		sm_err_clear(&e1);
		if ((rv = ship_one(x->sh, b->tenant, &b->meta, &o, &e1)) == 0) {
			x->ok[i] = 1;
			if (o == SHIP_UPLOADED)
				atomic_fetch_add(&x->done, 1);
			if (o != SHIP_GONE)
				ing_db_block_shipped(x->sh->db, b->tenant,
				    b->meta.gen);
			continue;
		}
		sm_counter_inc(sm_metric_child0(m_fail));
		if (rv == SM_ECORRUPT) {
			/* that block only: the others go on */
			if (atomic_fetch_add(&x->damaged, 1) >=
			    x->sh->damaged_logged)
				sm_error("ship", "damaged block not shipped\t"
				    "tenant=%s block=%llu err=\"%s\"",
				    b->tenant, (unsigned long long)b->meta.gen,
				    e1.msg);
			continue;
		}
		/* the bucket failed: the next blocks would too */
		pthread_mutex_lock(&x->mu);
		if (x->rv == 0) {
			x->rv = rv;
			x->err = e1;
			sm_err_prefix(&x->err, "shipping block %llu of tenant "
			    "%s", (unsigned long long)b->meta.gen, b->tenant);
		}
		pthread_mutex_unlock(&x->mu);
		atomic_store(&x->stop, true);
	}
	return (NULL);
}

int
ing_ship_pass(struct ing_ship *sh, uint32_t *shipped, struct sm_err *err)
{
	struct ship_run x = { .sh = sh };
	pthread_t th[ING_SHIP_WORKERS_MAX];
	uint32_t nth = 0, left = 0;
	int64_t oldest = 0;
	int rv;

	pthread_mutex_lock(&sh->mu);
	pthread_mutex_init(&x.mu, NULL);
	if ((rv = ing_db_blocks(sh->db, false, &x.v, &x.n)) != 0 ||
	    (x.n > 0 && (x.ok = sm_calloc(x.n, 1)) == NULL)) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	/* this thread is worker 0; more only when there is work for them */
	for (; nth + 1 < sh->workers && nth + 1 < x.n; nth++)
		if (pthread_create(&th[nth], NULL, ship_worker, &x) != 0)
			break;
	ship_worker(&x);
	for (uint32_t t = 0; t < nth; t++)
		pthread_join(th[t], NULL);
	if ((rv = x.rv) != 0)
		*err = x.err;
	for (uint32_t i = 0; i < x.n; i++) {
		if (x.ok[i] || x.v[i].meta.broken)
			continue;
		left++;
		if (oldest == 0 || x.v[i].meta.max_t < oldest)
			oldest = x.v[i].meta.max_t;
	}
	sh->damaged_logged = atomic_load(&x.damaged);
out:
	atomic_store(&sh->pending, left);
	atomic_store(&sh->oldest_ms, oldest);
	pthread_mutex_unlock(&sh->mu);
	pthread_mutex_destroy(&x.mu);
	sm_free(x.ok);
	ing_db_blocks_free(x.v, x.n);
	if (shipped != NULL)
		*shipped = atomic_load(&x.done);
	return (rv);
}

uint32_t
ing_ship_pending(struct ing_ship *sh)
{
	return (atomic_load(&sh->pending));
}

int
ing_ship_create(struct ing_db *db, struct ing_store *store,
    struct sm_bucket *bucket, const char *instance, uint32_t workers,
    struct ing_ship **out, struct sm_err *err)
{
	struct ing_ship *sh;
	uint8_t inc[16];
	int rv;

	*out = NULL;
	if ((rv = ing_store_incarnation(store, inc, err)) != 0)
		return (rv);
	if ((sh = sm_calloc(1, sizeof(*sh))) == NULL ||
	    (sh->instance = sm_strdup(instance != NULL ? instance : "")) ==
	    NULL) {
		sm_free(sh);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	for (int i = 0; i < 16; i++)
		snprintf(sh->incarnation + 2 * i, 3, "%02x", inc[i]);
	sh->db = db;
	sh->store = store;
	sh->bucket = bucket;
	sh->workers = SM_MAX(1, SM_MIN(workers, ING_SHIP_WORKERS_MAX));
	pthread_mutex_init(&sh->mu, NULL);
	if (sm_test_fault("ship-kill")) {
		sh->kill_after_object = true;
		sm_warn("ship", "TEST FAULT INJECTION: the process kills itself "
		    "(SIGKILL) after its first block object, before its "
		    "meta.json (SMOLDER_TEST_FAULTS)");
	}
	sm_metrics_register_once(&ship_metric_set);
	sm_metric_gauge_fn("smolder_ingester_ship_blocks_pending",
	    "Blocks committed here and not yet in the bucket (last pass).",
	    gauge_pending, sh);
	sm_metric_gauge_fn("smolder_ingester_ship_oldest_pending_age_seconds",
	    "Seconds since the end of the data of the oldest block not yet "
	    "in the bucket (0: none).", gauge_oldest, sh);
	*out = sh;
	return (0);
}

void
ing_ship_destroy(struct ing_ship *sh)
{
	if (sh == NULL)
		return;
	sm_metric_gauge_fn_remove(sh);
	pthread_mutex_destroy(&sh->mu);
	sm_free(sh->instance);
	sm_free(sh);
}

/* --- the bucket's blocks: scan and fetch ------------------------------------ */

struct scan_ent {
	char *key;                     /* .../<ULID>/meta.json */
	bool marked;
};

struct scan_list {
	struct scan_ent *v;
	uint32_t n, cap;
	char marked_dir[SM_BUCKET_KEY_MAX + 1];   /* ".../<ULID>/" */
	char **idx;                    /* "<tk>/bucket-index.json" keys */
	uint32_t nidx, idxcap;
};

static int
scan_add(void *arg, const struct sm_bucket_obj *o)
{
	struct scan_list *l = arg;
	size_t n = strlen(o->key);

	if (n > 19 && strcmp(o->key + n - 19, "/deletion-mark.json") == 0) {
		/* sorts right before its meta.json ('d' < 'm') */
		snprintf(l->marked_dir, sizeof(l->marked_dir), "%.*s",
		    (int)(n - 18), o->key);
		return (0);
	}
	if (n > 18 && strcmp(o->key + n - 18, "/bucket-index.json") == 0) {
		if (SM_GROW(l->idx, l->idxcap, l->nidx + 1, 16) != 0 ||
		    (l->idx[l->nidx] = sm_strdup(o->key)) == NULL)
			return (SM_ENOMEM);
		l->nidx++;
		return (0);
	}
	if (n <= 10 || strcmp(o->key + n - 10, "/meta.json") != 0)
		return (0);
	if (SM_GROW(l->v, l->cap, l->n + 1, 64) != 0 ||
	    (l->v[l->n].key = sm_strdup(o->key)) == NULL)
		return (SM_ENOMEM);
	l->v[l->n].marked = strlen(l->marked_dir) == n - 9 &&
	    strncmp(l->marked_dir, o->key, n - 9) == 0;
	l->n++;
	return (0);
}

static void
scan_list_free(struct scan_list *l)
{
	for (uint32_t i = 0; i < l->n; i++)
		sm_free(l->v[i].key);
	sm_free(l->v);
	for (uint32_t i = 0; i < l->nidx; i++)
		sm_free(l->idx[i]);
	sm_free(l->idx);
}

static int
blk_cmp(const void *a, const void *b)
{
	const struct ing_bucket_block *x = a, *y = b;
	int c = strcmp(x->tenant, y->tenant);

	if (c != 0 || (c = strcmp(x->inc, y->inc)) != 0 ||
	    (c = SM_CMP(x->gen, y->gen)) != 0)
		return (c);
	return (memcmp(y->ulid, x->ulid, 16));   /* newest ULID first */
}

/* The replaced gens of merged blocks, as (tenant, incarnation, gen). */
struct scan_rep {
	char *tenant;
	char inc[33];
	uint64_t gen;
};

static int
rep_cmp(const void *a, const void *b)
{
	const struct scan_rep *x = a, *y = b;
	int c = strcmp(x->tenant, y->tenant);

	if (c != 0 || (c = strcmp(x->inc, y->inc)) != 0)
		return (c);
	return (SM_CMP(x->gen, y->gen));
}

struct scan {
	struct sm_bucket *b;
	const char *instance;
	struct ing_bucket_scan *out;
	uint32_t cap;
	struct scan_rep *rep;
	uint32_t nrep, repcap;
};

/*
 * The metas the compactor's bucket indexes hold (compactor/
 * bucket_index.h), as {".../<ULID>/meta.json": meta}: a scan then
 * fetches only the meta.json of blocks newer than their index.  A marked
 * block's entry carries its deletion time.  An index that cannot be read
 * is passed over (its blocks' metas are fetched one by one).
 */
static struct sm_json *
scan_index_metas(struct scan *r, const struct scan_list *l)
{
	struct sm_json *metas = sm_json_object();

	for (uint32_t i = 0; metas != NULL && i < l->nidx; i++) {
		struct sm_buf v = SM_BUF_INIT;
		struct sm_err e2;
		size_t tl = strlen(l->idx[i]) - 18;
		struct sm_json *idx = NULL, *bl;
		char key[SM_BUCKET_KEY_MAX + 64];

		if (sm_bucket_get(r->b, l->idx[i], 0, SM_BUCKET_WHOLE, &v,
		    &e2) != 0 || sm_json_parse(v.b, v.len, 0, &idx,
		    NULL) != 0) {
			sm_buf_fini(&v);
			continue;
		}
		sm_buf_fini(&v);
		bl = sm_json_get(idx, "blocks");
		for (size_t k = 0; k < sm_json_len(bl); k++) {
			struct sm_json *e = sm_json_at(bl, k);
			const char *u = sm_json_str(sm_json_get(e, "ulid"));

			if (u == NULL || strlen(u) != ING_ULID_LEN)
				continue;
			snprintf(key, sizeof(key), "%.*s/blocks/%s/meta.json",
			    (int)tl, l->idx[i], u);
			/* One that cannot be kept is fetched by itself. */
			(void)sm_json_set_take(metas, key, sm_json_ref(e));
		}
		sm_json_free(idx);
	}
	return (metas);
}

/*
 * Blocks the indexes hold that the listing missed: a listing may lag on
 * Swift and Ceph, and the index is written by the compactor from an
 * earlier one, so a block it names is read even when the listing does
 * not show it yet (the fold a deletion mark relies on, in particular).
 * A block deleted since is marked in the index (the compactor deletes
 * only marked blocks) or passed over when its meta.json is gone.
 */
static int
scan_index_only(struct scan_list *l, const struct sm_json *cached)
{
	struct sm_json *listed = sm_json_object(), *v;
	struct sm_json_it it = SM_JSON_IT_INIT;
	const char *k;

	if (listed == NULL)
		return (SM_ENOMEM);
	for (uint32_t i = 0; i < l->n; i++)
		if (sm_json_set_bool(listed, l->v[i].key, true) != 0)
			goto nomem;
	while (sm_json_next(cached, &it, &k, &v)) {
		if (sm_json_get(listed, k) != NULL)
			continue;
		if (SM_GROW(l->v, l->cap, l->n + 1, 64) != 0 ||
		    (l->v[l->n].key = sm_strdup(k)) == NULL)
			goto nomem;
		l->v[l->n++].marked = false;
	}
	sm_json_free(listed);
	return (0);
nomem:
	sm_json_free(listed);
	return (SM_ENOMEM);
}

/* A fold's "fold" object (ship.h) into bk; a malformed one makes the
 * block no fold (logged).  0 or SM_ENOMEM. */
static int
scan_fold(struct ing_bucket_block *bk, const struct sm_json *f,
    const char *key)
{
	struct sm_json *in = sm_json_get(f, "inputs");

	if (f == NULL)
		return (0);
	if (!sm_json_is_integer(sm_json_get(f, "start")) ||
	    !sm_json_is_integer(sm_json_get(f, "end")) ||
	    !sm_json_is_array(in)) {
		sm_warn("ship", "a meta.json with a malformed fold is read as "
		    "no fold\tkey=%s", key);
		return (0);
	}
	if (sm_json_len(in) > 0 && (bk->inputs = sm_calloc(
	    sm_json_len(in), sizeof(*bk->inputs))) == NULL)
		return (SM_ENOMEM);
	for (size_t i = 0; i < sm_json_len(in); i++) {
		struct sm_json *x = sm_json_at(in, i);
		const char *inc = sm_json_str(sm_json_get(x, "incarnation"));

		if (inc == NULL || strlen(inc) != 32 ||
		    !sm_json_is_integer(sm_json_get(x, "gen")))
			continue;
		snprintf(bk->inputs[bk->ninputs].inc, 33, "%s", inc);
		bk->inputs[bk->ninputs].first_hour = sm_json_int(
		    sm_json_get(x, "first_hour"));
		bk->inputs[bk->ninputs].hour_mask = (uint64_t)sm_json_int(
		    sm_json_get(x, "hour_mask"));
		bk->inputs[bk->ninputs++].gen = (uint64_t)sm_json_int(
		    sm_json_get(x, "gen"));
	}
	in = sm_json_get(f, "covers");
	if (sm_json_len(in) > 0 && (bk->covers = sm_calloc(
	    sm_json_len(in), sizeof(*bk->covers))) == NULL)
		return (SM_ENOMEM);
	for (size_t i = 0; i < sm_json_len(in); i++)
		if (sm_json_is_integer(sm_json_at(in, i)))
			bk->covers[bk->ncovers++] = (uint64_t)sm_json_int(
			    sm_json_at(in, i));
	if (bk->ncovers > 1)
		qsort(bk->covers, bk->ncovers, sizeof(*bk->covers), sm_u64_cmp);
	bk->fold_start = sm_json_int(sm_json_get(f, "start"));
	bk->fold_end = sm_json_int(sm_json_get(f, "end"));
	return (0);
}

/* One meta.json (from the indexes' metas, else fetched); kept when its
 * source is the scan's instance (any without one).  A malformed one is
 * passed over, logged. */
static int
scan_meta(struct scan *r, const struct scan_ent *e,
    const struct sm_json *cached, struct sm_err *err)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_json *j, *src, *rep;
	const char *inst, *tenant, *inc, *ulid, *xx;
	struct ing_bucket_block *bk;
	struct ing_bucket_scan *o = r->out;
	bool marked = e->marked;
	int rv = 0;

	if ((j = sm_json_ref(sm_json_get(cached, e->key))) != NULL) {
		marked |= sm_json_get(j, "deletion_time_ms") != NULL;
	} else {
		if ((rv = sm_bucket_get(r->b, e->key, 0, SM_BUCKET_WHOLE, &v,
		    err)) != 0) {
			if (rv == SM_ENOTFOUND) {
				/* deleted since the listing */
				sm_err_clear(err);
				rv = 0;
			}
			goto out;
		}
		if (sm_json_parse(v.b, v.len, 0, &j, NULL) != 0) {
			sm_warn("ship", "a meta.json that is not JSON is "
			    "passed over\tkey=%s", e->key);
			goto out;
		}
	}
	src = sm_json_get(j, "source");
	inst = sm_json_str(sm_json_get(src, "instance"));
	tenant = sm_json_str(sm_json_get(j, "tenant"));
	inc = sm_json_str(sm_json_get(src, "incarnation"));
	ulid = sm_json_str(sm_json_get(j, "ulid"));
	xx = sm_json_str(sm_json_get(j, "block_xxh3"));
	if (r->instance != NULL && (inst == NULL || strcmp(inst,
	    r->instance) != 0))
		goto out;     /* another ingester's */
	if (inst == NULL || tenant == NULL || inc == NULL ||
	    strlen(inc) != 32 || ulid == NULL || xx == NULL ||
	    strlen(xx) != 16 || !sm_json_is_integer(sm_json_get(src,
	    "gen"))) {
		sm_warn("ship", "a meta.json without its fields is passed "
		    "over\tkey=%s", e->key);
		goto out;
	}
	rep = sm_json_get(src, "replaces");
	for (size_t i = 0; i < sm_json_len(rep); i++) {
		if (SM_GROW(r->rep, r->repcap, r->nrep + 1, 16) != 0 ||
		    (r->rep[r->nrep].tenant = sm_strdup(tenant)) == NULL) {
			rv = SM_ENOMEM;
			goto out;
		}
		snprintf(r->rep[r->nrep].inc, 33, "%s", inc);
		r->rep[r->nrep].gen = (uint64_t)sm_json_int(sm_json_at(rep,
		    i));
		r->nrep++;
	}
	if (SM_GROW(o->v, r->cap, o->n + 1, 64) != 0) {
		rv = SM_ENOMEM;
		goto out;
	}
	bk = &o->v[o->n];
	memset(bk, 0, sizeof(*bk));
	if ((bk->meta_key = sm_strdup(e->key)) == NULL ||
	    (bk->tenant = sm_strdup(tenant)) == NULL ||
	    (bk->instance = sm_strdup(inst)) == NULL ||
	    ing_ulid_parse(ulid, bk->ulid) != 0) {
		sm_free(bk->meta_key);
		sm_free(bk->tenant);
		sm_free(bk->instance);
		rv = bk->meta_key == NULL || bk->tenant == NULL ||
		    bk->instance == NULL ? SM_ENOMEM :
		    sm_err_set(err, SM_ECORRUPT, "%s: bad ulid", e->key);
		goto out;
	}
	bk->gen = (uint64_t)sm_json_int(sm_json_get(src, "gen"));
	snprintf(bk->inc, sizeof(bk->inc), "%s", inc);
	snprintf(bk->xxh, sizeof(bk->xxh), "%s", xx);
	bk->bytes = sm_json_int(sm_json_get(j, "block_bytes"));
	bk->min_t = sm_json_int(sm_json_get(j, "min_t"));
	bk->max_t = sm_json_int(sm_json_get(j, "max_t"));
	bk->bucket_ms = sm_json_int(sm_json_get(j, "bucket_ms"));
	bk->tier_ms = sm_json_int(sm_json_get(j, "tier_ms"));
	bk->cover_start = sm_json_int(sm_json_get(j, "cover_start"));
	bk->cover_end = sm_json_int(sm_json_get(j, "cover_end"));
	bk->cover_gen = (uint64_t)sm_json_int(sm_json_get(j, "cover_gen"));
	bk->marked = marked;
	if ((rv = scan_fold(bk, sm_json_get(j, "fold"), e->key)) != 0) {
		sm_free(bk->meta_key);
		sm_free(bk->tenant);
		sm_free(bk->instance);
		sm_free(bk->inputs);
		sm_free(bk->covers);
		goto out;
	}
	if (sm_json_len(rep) > 0 && (bk->replaces = sm_calloc(
	    sm_json_len(rep), sizeof(*bk->replaces))) == NULL) {
		sm_free(bk->meta_key);
		sm_free(bk->tenant);
		sm_free(bk->instance);
		sm_free(bk->inputs);
		sm_free(bk->covers);
		rv = SM_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < sm_json_len(rep); i++)
		bk->replaces[bk->nreplaces++] = (uint64_t)sm_json_int(
		    sm_json_at(rep, i));
	bk->capreplaces = bk->nreplaces;
	o->n++;
out:
	sm_json_free(j);
	sm_buf_fini(&v);
	return (rv);
}

static bool
scan_is_fold(const struct ing_bucket_block *b, bool tier)
{
	return (strcmp(b->inc, ING_FOLD_INC) == 0 &&
	    b->fold_end > b->fold_start && (b->tier_ms > 0) == tier &&
	    !b->marked && !b->dup);
}

static int
add_replace(struct ing_bucket_block *to, uint64_t gen)
{
	if (SM_GROW(to->replaces, to->capreplaces, to->nreplaces + 1, 4) != 0)
		return (SM_ENOMEM);
	to->replaces[to->nreplaces++] = gen;
	return (0);
}

/*
 * The fold source's blocks (ship.h).  Of its raw folds of one tenant and
 * hour only the largest gen is read: the others are flagged replaced and
 * their gens added to its `replaces`, so a reader that holds one drops
 * it when it takes the newest.  A fold tier is flagged replaced when a
 * fold it covers is not read or another fold of its window is at or
 * below its cover_gen; its gen goes to the `replaces` of the fold that
 * took a covered one's place.  Blocks of one tenant and source are
 * adjacent and sorted by gen.  0 or SM_ENOMEM.
 */
static int
scan_fold_flag(struct ing_bucket_scan *o)
{
	for (uint32_t i = 0; i < o->n; i++) {
		struct ing_bucket_block *bk = &o->v[i], *best = NULL;

		if (!scan_is_fold(bk, false))
			continue;
		/* the newest fold of the same tenant and hour: further on */
		for (uint32_t k = i + 1; k < o->n &&
		    strcmp(o->v[k].tenant, bk->tenant) == 0 &&
		    strcmp(o->v[k].inc, bk->inc) == 0; k++)
			if (scan_is_fold(&o->v[k], false) &&
			    o->v[k].fold_start == bk->fold_start)
				best = &o->v[k];
		if (best == NULL)
			continue;
		bk->replaced = true;
		if (add_replace(best, bk->gen) != 0)
			return (SM_ENOMEM);
	}
	for (uint32_t i = 0; i < o->n; i++) {
		struct ing_bucket_block *t = &o->v[i];
		uint32_t lo = i, hi = i;
		bool stale = false;

		if (!scan_is_fold(t, true) || t->replaced)
			continue;
		while (lo > 0 && strcmp(o->v[lo - 1].tenant, t->tenant) == 0 &&
		    strcmp(o->v[lo - 1].inc, t->inc) == 0)
			lo--;
		while (hi + 1 < o->n && strcmp(o->v[hi + 1].tenant,
		    t->tenant) == 0 && strcmp(o->v[hi + 1].inc, t->inc) == 0)
			hi++;
		/* every covered fold still read */
		for (uint32_t c = 0; c < t->ncovers; c++) {
			struct ing_bucket_block *f = NULL, *by = NULL;

			for (uint32_t k = lo; k <= hi && f == NULL; k++)
				if (o->v[k].gen == t->covers[c] &&
				    scan_is_fold(&o->v[k], false))
					f = &o->v[k];
			if (f != NULL && !f->replaced)
				continue;
			stale = true;
			/* the fold read in its place takes the tier away */
			for (uint32_t k = lo; f != NULL && k <= hi; k++)
				if (scan_is_fold(&o->v[k], false) &&
				    !o->v[k].replaced &&
				    o->v[k].fold_start == f->fold_start)
					by = &o->v[k];
			if (by != NULL && add_replace(by, t->gen) != 0)
				return (SM_ENOMEM);
		}
		/* no fold of its window at or below cover_gen left out */
		for (uint32_t k = lo; !stale && k <= hi; k++) {
			const struct ing_bucket_block *f = &o->v[k];

			stale = scan_is_fold(f, false) && !f->replaced &&
			    f->fold_start >= t->fold_start &&
			    f->fold_start < t->fold_end &&
			    f->gen <= t->cover_gen &&
			    bsearch(&f->gen, t->covers, t->ncovers,
			    sizeof(*t->covers), sm_u64_cmp) == NULL;
		}
		t->replaced = stale;
	}
	return (0);
}

/* Flag what a reader passes over: replaced gens, repeated (source, gen). */
static int
scan_flag(struct scan *r)
{
	struct ing_bucket_scan *o = r->out;
	uint32_t k = 0;

	if (o->n > 1)
		qsort(o->v, o->n, sizeof(*o->v), blk_cmp);
	if (r->nrep > 1)
		qsort(r->rep, r->nrep, sizeof(*r->rep), rep_cmp);
	for (uint32_t i = 0; i < o->n; i++) {
		struct ing_bucket_block *bk = &o->v[i];
		struct scan_rep key = { .tenant = bk->tenant, .gen = bk->gen };

		memcpy(key.inc, bk->inc, sizeof(key.inc));
		/* both sorted the same way: one merge walk */
		while (k < r->nrep && rep_cmp(&r->rep[k], &key) < 0)
			k++;
		bk->replaced = k < r->nrep && rep_cmp(&r->rep[k], &key) == 0;
		bk->dup = i > 0 && o->v[i - 1].gen == bk->gen &&
		    strcmp(o->v[i - 1].inc, bk->inc) == 0 &&
		    strcmp(o->v[i - 1].tenant, bk->tenant) == 0;
	}
	return (scan_fold_flag(o));
}

void
ing_ship_scan_free(struct ing_bucket_scan *s)
{
	for (uint32_t i = 0; i < s->n; i++) {
		sm_free(s->v[i].meta_key);
		sm_free(s->v[i].tenant);
		sm_free(s->v[i].instance);
		sm_free(s->v[i].replaces);
		sm_free(s->v[i].inputs);
		sm_free(s->v[i].covers);
	}
	sm_free(s->v);
	memset(s, 0, sizeof(*s));
}

int
ing_ship_scan(struct sm_bucket *bucket, const char *prefix,
    const char *instance, struct ing_bucket_scan *out, struct sm_err *err)
{
	struct scan_list l = { 0 };
	struct scan r = { .b = bucket, .instance = instance, .out = out };
	struct sm_json *cached = NULL;
	int rv;

	memset(out, 0, sizeof(*out));
	if ((rv = sm_bucket_list(bucket, prefix != NULL ? prefix : "",
	    scan_add, &l, err)) != 0)
		goto out;
	if ((cached = scan_index_metas(&r, &l)) == NULL ||
	    (rv = scan_index_only(&l, cached)) != 0) {
		rv = SM_ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < l.n && rv == 0; i++)
		rv = scan_meta(&r, &l.v[i], cached, err);
	if (rv == 0)
		rv = scan_flag(&r);
out:
	if (rv == SM_ENOMEM)
		sm_err_set(err, rv, "out of memory");
	if (rv != 0)
		ing_ship_scan_free(out);
	sm_json_free(cached);
	for (uint32_t i = 0; i < r.nrep; i++)
		sm_free(r.rep[i].tenant);
	sm_free(r.rep);
	scan_list_free(&l);
	return (rv);
}

int
ing_ship_fetch(struct sm_bucket *bucket, const struct ing_bucket_block *bk,
    struct sm_buf *obj, struct ing_store_part **parts, uint32_t *nparts,
    struct sm_err *err)
{
	char key[SM_BUCKET_KEY_MAX + 1];
	const uint8_t *p, *toc;
	uint32_t np;
	int rv;

	*parts = NULL;
	*nparts = 0;
	snprintf(key, sizeof(key), "%.*s/block",
	    (int)(strlen(bk->meta_key) - 10), bk->meta_key);
	if ((rv = sm_bucket_get(bucket, key, 0, SM_BUCKET_WHOLE, obj,
	    err)) != 0)
		return (rv);
	p = (const uint8_t *)obj->b;
	if ((rv = ing_ship_object_check(p, obj->len, bk->bytes, bk->xxh, &np,
	    err)) != 0) {
		sm_err_prefix(err, "%s", key);
		return (rv);
	}
	if ((*parts = sm_calloc(SM_MAX(np, 1), sizeof(**parts))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	toc = p + sm_get_be64(p + obj->len - ING_SHIP_FOOTER + 4);
	for (uint32_t i = 0; i < np; i++) {
		const uint8_t *e = toc + (size_t)i * ING_SHIP_TOC_ENTRY;

		(*parts)[i].kind = (char)e[0];
		(*parts)[i].series = sm_get_be32(e + 1);
		(*parts)[i].v = p + sm_get_be64(e + 5);
		(*parts)[i].n = sm_get_be32(e + 13);
	}
	*nparts = np;
	return (0);
}

void
ing_ship_object_key(const struct ing_bucket_block *bk, char *key,
    size_t keylen)
{
	snprintf(key, keylen, "%.*s/block", (int)(strlen(bk->meta_key) - 10),
	    bk->meta_key);
}

void
ing_ship_parts_fini(struct ing_ship_parts *p)
{
	sm_free(p->v);
	sm_buf_fini(&p->obj);
	memset(p, 0, sizeof(*p));
}

/* A range fetched into p->obj: object bytes [off, off + n) at obj
 * offset at. */
struct got {
	uint64_t off, n;
	size_t at;
};

static int
get_range(struct sm_bucket *bucket, const char *key, uint64_t off,
    uint64_t n, struct ing_ship_parts *p, struct got *g, struct sm_err *err)
{
	struct sm_buf b = SM_BUF_INIT;
	int rv;

	p->gets++;
	if ((rv = sm_bucket_get(bucket, key, off, n, &b, err)) != 0) {
		/* a range past the end: the object is not what meta.json
		 * says */
		if (rv == SM_EINVAL)
			rv = err->code = SM_ECORRUPT;
		goto out;
	}
	if (b.len != n) {
		rv = sm_err_set(err, SM_ECORRUPT, "%s: %zu bytes at %llu, "
		    "asked %llu", key, b.len, (unsigned long long)off,
		    (unsigned long long)n);
		goto out;
	}
	*g = (struct got){ off, n, p->obj.len };
	sm_buf_append(&p->obj, b.b, b.len);
	if (sm_buf_error(&p->obj) != 0)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	sm_buf_fini(&b);
	return (rv);
}

/* Where object bytes [off, off + n) are in p->obj, or SIZE_MAX. */
static size_t
got_at(const struct got *g, uint32_t ng, uint64_t off, uint64_t n)
{
	for (uint32_t i = 0; i < ng; i++) {
		if (off >= g[i].off && off + n <= g[i].off + g[i].n)
			return (g[i].at + (size_t)(off - g[i].off));
	}
	return (SIZE_MAX);
}

int
ing_ship_fetch_parts(struct sm_bucket *bucket,
    const struct ing_bucket_block *bk, uint64_t whole_max,
    struct ing_ship_parts *out, struct sm_err *err)
{
	char key[SM_BUCKET_KEY_MAX + 1];
	struct got *g = NULL;
	uint32_t ng = 0, np;
	uint64_t size = (uint64_t)bk->bytes, toc_off, tail;
	const uint8_t *f, *toc;
	size_t toc_at, f_at;
	int rv;

	memset(out, 0, sizeof(*out));
	ing_ship_object_key(bk, key, sizeof(key));
	if (bk->bytes < ING_SHIP_FOOTER)
		return (sm_err_set(err, SM_ECORRUPT, "%s: meta.json says %lld "
		    "bytes, shorter than a footer", key, (long long)bk->bytes));
	out->size = size;
	out->whole = size <= whole_max;
	/* Ranges: the end (the whole object when it is no larger than
	 * whole_max), the table when it is longer, then the runs of parts
	 * that are not data: at most 2 + np. */
	tail = out->whole ? size : SM_MAX(whole_max,
	    (uint64_t)ING_SHIP_FOOTER);
	if ((g = sm_calloc(2, sizeof(*g))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = get_range(bucket, key, size - tail, tail, out, &g[ng++],
	    err)) != 0)
		goto out;
	f_at = got_at(g, ng, size - ING_SHIP_FOOTER, ING_SHIP_FOOTER);
	f = (const uint8_t *)out->obj.b + f_at;
	if ((rv = footer_read(f, size, &np, &toc_off, err)) != 0)
		goto bad;
	/* a table longer than the tail: once more, from its start */
	if (toc_off < size - tail && (rv = get_range(bucket, key, toc_off,
	    size - toc_off, out, &g[ng++], err)) != 0)
		goto out;
	toc_at = got_at(g, ng, toc_off, size - ING_SHIP_FOOTER - toc_off);
	SM_ASSERT(toc_at != SIZE_MAX);
	f = (const uint8_t *)out->obj.b + got_at(g, ng,
	    size - ING_SHIP_FOOTER, ING_SHIP_FOOTER);
	toc = (const uint8_t *)out->obj.b + toc_at;
	if ((rv = toc_check(toc, np, toc_off, f, err)) != 0)
		goto bad;
	if ((out->v = sm_calloc(SM_MAX(np, 1), sizeof(*out->v))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < np; i++) {
		const uint8_t *e = (const uint8_t *)out->obj.b + toc_at +
		    (size_t)i * ING_SHIP_TOC_ENTRY;

		out->v[i] = (struct ing_ship_part){ (char)e[0],
		    sm_get_be32(e + 1), sm_get_be64(e + 5), sm_get_be32(e + 13),
		    NULL };
	}
	out->n = np;
	{
		struct got *ng2 = sm_realloc(g, (size_t)(ng + np) *
		    sizeof(*g));

		if (ng2 == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		g = ng2;
	}
	for (uint32_t i = 0; i < np;) {
		uint64_t lo, hi;
		uint32_t j;

		if (out->v[i].kind == 'D' || got_at(g, ng, out->v[i].off,
		    out->v[i].n) != SIZE_MAX) {
			i++;
			continue;
		}
		lo = out->v[i].off;
		hi = lo + out->v[i].n;
		for (j = i + 1; j < np && out->v[j].kind != 'D' &&
		    out->v[j].off == hi; j++)
			hi += out->v[j].n;
		if ((rv = get_range(bucket, key, lo, hi - lo, out, &g[ng++],
		    err)) != 0)
			goto out;
		i = j;
	}
	/* A whole object is checked whole too.  Damage it finds beyond the
	 * parts checked below is in a data part: the load goes on, and the
	 * part's own checksum fails the queries that read it (not every
	 * query of the source, as a block skipped would, silently). */
	if (out->whole) {
		struct sm_err e2;

		sm_err_clear(&e2);
		if (ing_ship_object_check((const uint8_t *)out->obj.b,
		    out->obj.len, bk->bytes, bk->xxh, NULL, &e2) != 0) {
			out->damaged = true;
			sm_warn("store-gateway", "block object damaged; its "
			    "data parts are checked as queries read them\t"
			    "key=%s err=\"%s\"", key, e2.msg);
		}
	}
	/* every fetched part checked by its own checksum */
	for (uint32_t i = 0; i < np; i++) {
		struct ing_ship_part *x = &out->v[i];
		size_t at = got_at(g, ng, x->off, x->n), pn;
		const uint8_t *pl;
		uint32_t raw;

		if (at != SIZE_MAX)
			x->v = (const uint8_t *)out->obj.b + at;
		if (x->kind == 'D')       /* checked when a query reads it */
			continue;
		SM_ASSERT(at != SIZE_MAX);
		if ((rv = ing_block_open(x->v, x->n, x->kind, &pl, &pn, &raw,
		    err)) != 0) {
			sm_err_prefix(err, "block object part %u ('%c' series "
			    "%u)", i, x->kind, x->series);
			goto bad;
		}
	}
	goto out;
bad:
	sm_err_prefix(err, "%s", key);
out:
	sm_free(g);
	if (rv != 0)
		ing_ship_parts_fini(out);
	return (rv);
}

/* --- restore ----------------------------------------------------------------- */

/* One generation per tenant across incarnations: newest ULID first. */
static int
rst_cmp(const void *a, const void *b)
{
	const struct ing_bucket_block *x = *(const struct ing_bucket_block *
	    const *)a;
	const struct ing_bucket_block *y = *(const struct ing_bucket_block *
	    const *)b;
	int c = strcmp(x->tenant, y->tenant);

	if (c != 0 || (c = SM_CMP(x->gen, y->gen)) != 0)
		return (c);
	return (memcmp(y->ulid, x->ulid, 16));
}

/* Fetch, check and import one block. */
static int
rst_import(struct ing_store *store, struct sm_bucket *bucket,
    const struct ing_bucket_block *bk, uint64_t *bytes, struct sm_err *err)
{
	struct sm_buf obj = SM_BUF_INIT;
	struct ing_store_part *parts = NULL;
	struct ing_ship_rec rec = { .shipped = true };
	uint32_t np;
	int rv;

	if ((rv = ing_ship_fetch(bucket, bk, &obj, &parts, &np, err)) != 0)
		goto out;
	memcpy(rec.ulid, bk->ulid, 16);
	if ((rv = ing_store_block_import(store, bk->tenant, bk->gen, parts, np,
	    &rec, err)) == 0)
		*bytes += obj.len;
out:
	sm_free(parts);
	sm_buf_fini(&obj);
	return (rv);
}

int
ing_ship_restore(struct ing_store *store, struct sm_bucket *bucket,
    const char *instance, uint32_t *blocks, uint64_t *bytes,
    void (*restored)(void *arg, const char *inc, int64_t min_t,
    int64_t max_t), void *arg, struct sm_err *err)
{
	struct ing_bucket_scan sc;
	const struct ing_bucket_block **v = NULL;
	uint32_t n = 0;
	int rv;

	*blocks = 0;
	*bytes = 0;
	if ((rv = ing_ship_scan(bucket, NULL, instance, &sc, err)) != 0)
		return (rv);
	if ((v = sm_calloc(SM_MAX(sc.n, 1), sizeof(*v))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	/* Past retention (marked), merged into another block, or a second
	 * copy of one (source, gen): not restored. */
	for (uint32_t i = 0; i < sc.n; i++) {
		if (!sc.v[i].marked && !sc.v[i].replaced && !sc.v[i].dup)
			v[n++] = &sc.v[i];
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), rst_cmp);
	for (uint32_t i = 0; i < n && rv == 0; i++) {
		if (i > 0 && v[i - 1]->gen == v[i]->gen &&
		    strcmp(v[i - 1]->tenant, v[i]->tenant) == 0) {
			sm_warn("ship", "restore: two incarnations shipped one "
			    "generation; the newer is restored\ttenant=%s "
			    "gen=%llu skipped=%s", v[i]->tenant,
			    (unsigned long long)v[i]->gen, v[i]->meta_key);
			continue;
		}
		if ((rv = rst_import(store, bucket, v[i], bytes, err)) == 0) {
			(*blocks)++;
			if (restored != NULL)
				restored(arg, v[i]->inc, v[i]->min_t,
				    v[i]->max_t);
		} else if (rv == SM_ENOTFOUND || rv == SM_ECORRUPT) {
			/* that block only: its replicas hold its data */
			sm_error("ship", "restore: block not restored\t"
			    "key=%s err=\"%s\"", v[i]->meta_key, err->msg);
			sm_err_clear(err);
			rv = 0;
		}
	}
out:
	sm_free(v);
	ing_ship_scan_free(&sc);
	return (rv);
}
