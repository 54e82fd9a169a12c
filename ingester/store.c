/*
 * store.c -- the ingester's durable storage; see store.h.
 */
#include "store.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/hash.h"
#include "common/log.h"
#include "common/metrics.h"

#include "headlog.h"
#include "remote.h"

struct ing_store {
	struct sm_kv *kv;
	struct ing_cache *cache;
	struct ing_headlog *log;
	bool legacy_log;        /* the head family held records at replay */
	ing_store_remote_fn remote;   /* a store-gateway's data (remote.h) */
	void *remote_arg;
};

static int log_floors_load(struct ing_store *s, struct sm_err *err);

static struct sm_metric *corruptions, *bytes_read;

static const struct sm_metric_def store_metric_defs[] = {
	{ &corruptions, SM_METRIC_COUNTER, "smolder_ingester_corruptions_total",
	    "Stored values found damaged (checksum, decode or RocksDB "
	    "corruption), by part.", SM_METRIC_LABELS("part"), NULL, 0 },
	{ &bytes_read, SM_METRIC_COUNTER,
	    "smolder_ingester_block_bytes_read_total",
	    "Bytes of block parts read from RocksDB (cache misses: what a "
	    "query costs in I/O), by part.", SM_METRIC_LABELS("part"), NULL,
	    0 },
};

static struct sm_metric_set store_metric_set =
    SM_METRIC_SET(store_metric_defs);

static const char *
part_name(char kind)
{
	switch (kind) {
	case 'M': return ("meta");
	case 'I': return ("index");
	case 'S': return ("symbols");
	case 'T': return ("tree");
	case 'D': return ("data");
	case 'P': return ("spans");
	case 'X': return ("profiles");
	case 'H': return ("head_log");
	default: return ("unknown");
	}
}

/* Report a damaged value and turn the error into a located one. */
static int
store_corrupt(const char *tenant, uint64_t id, char kind, uint32_t series,
    struct sm_err *err)
{
	char msg[SM_ERR_MSG_MAX];

	snprintf(msg, sizeof(msg), "%s", err != NULL ? err->msg : "");
	sm_counter_inc(sm_metric_child(corruptions, part_name(kind)));
	if (kind == 'D')
		sm_error("store", "corrupt block part\ttenant=%s block=%llu "
		    "part=%s series=%u err=\"%s\"", tenant,
		    (unsigned long long)id, part_name(kind), series, msg);
	else
		sm_error("store", "corrupt block part\ttenant=%s block=%llu "
		    "part=%s err=\"%s\"", tenant, (unsigned long long)id,
		    part_name(kind), msg);
	return (sm_err_set(err, SM_ECORRUPT, "corrupt block %s/%llu, part "
	    "%s: %s", tenant, (unsigned long long)id, part_name(kind), msg));
}

void
ing_key_head(struct sm_key *k, const char *tenant, uint64_t gen,
    uint64_t seq)
{
	sm_key_reset(k);
	sm_key_str(k, tenant, strlen(tenant));
	sm_key_u64(k, gen);
	sm_key_u64(k, seq);
}

/* str(tenant) u64 id: the prefix of every key of block (or head) id. */
static void
key_id(struct sm_key *k, const char *tenant, uint64_t id)
{
	sm_key_reset(k);
	sm_key_str(k, tenant, strlen(tenant));
	sm_key_u64(k, id);
}

void
ing_key_spill(struct sm_key *k, const char *tenant, uint64_t gen,
    uint32_t series, int64_t t)
{
	key_id(k, tenant, gen);
	sm_key_u8(k, 'B');
	sm_key_u32(k, series);
	sm_key_u64(k, (uint64_t)t ^ ((uint64_t)1 << 63));   /* signed order */
}

void
ing_store_spill_put(struct sm_kv_batch *b, const char *tenant, uint64_t gen,
    uint32_t series, int64_t t, const void *v, size_t n)
{
	struct sm_key k;

	ing_key_spill(&k, tenant, gen, series, t);
	sm_kv_batch_put(b, SM_KV_SPILL, k.b, k.n, v, n);
}

/* Delete kinds [lo_kind, hi_kind) of (tenant, gen) in family cf, without
 * a sync (the spill family's without the WAL). */
static int
kinds_drop(struct ing_store *s, enum sm_kv_cf cf, const char *tenant,
    uint64_t gen, char lo_kind, char hi_kind, struct sm_err *err)
{
	struct sm_kv_batch *b = sm_kv_batch_create();
	struct sm_key lo, hi;
	int rv;

	if (b == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	key_id(&lo, tenant, gen);
	hi = lo;
	sm_key_u8(&lo, (uint8_t)lo_kind);
	sm_key_u8(&hi, (uint8_t)hi_kind);
	sm_kv_batch_delete_range(b, cf, lo.b, lo.n, hi.b, hi.n);
	rv = cf == SM_KV_SPILL ? sm_kv_write_unlogged(s->kv, b, err) :
	    sm_kv_write(s->kv, b, false, err);
	sm_kv_batch_destroy(b);
	return (rv);
}

int
ing_store_spill_drop(struct ing_store *s, const char *tenant, uint64_t gen,
    struct sm_err *err)
{
	/* buckets 'B' and records 'C' (store.h) */
	return (kinds_drop(s, SM_KV_SPILL, tenant, gen, 'B', 'D', err));
}

int
ing_store_uncommitted_drop(struct ing_store *s, const char *tenant,
    uint64_t gen, struct sm_err *err)
{
	/* The data parts 'D' a cut wrote ahead, and the 'B' and 'C' an
	 * older version spilled into the blocks family (store.h); the spill
	 * family was emptied at the open. */
	return (kinds_drop(s, SM_KV_BLOCKS, tenant, gen, 'B', 'E', err));
}

/* What spill_scan calls for each value: a spilled bucket's (with its
 * t, the key's last 8 bytes) or a chunk of profile records'. */
struct scan_fn {
	int (*bucket)(void *arg, int64_t t, const uint8_t *v, size_t n);
	int (*recs)(void *arg, const uint8_t *v, size_t n);
	void *arg;
};

/*
 * Every key of the spill family from lo to hi (inclusive; keys of hi's
 * length, in order) through f.  f's non-zero return stops the scan and
 * is returned; else the iterator's status.  0, SM_EIO, SM_ENOMEM or f's.
 */
static int
spill_scan_it(struct sm_kv_iter *it, const struct sm_key *lo,
    const struct sm_key *hi, const struct scan_fn *f, struct sm_err *err)
{
	int rv = 0;

	for (sm_kv_iter_seek(it, lo->b, lo->n); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *k, *v;
		size_t kn, vn;

		k = sm_kv_iter_key(it, &kn);
		if (kn != hi->n || memcmp(k, hi->b, kn) > 0)
			break;
		v = sm_kv_iter_value(it, &vn);
		rv = f->bucket != NULL ? f->bucket(f->arg, (int64_t)(
		    sm_get_be64(k + kn - 8) ^ ((uint64_t)1 << 63)), v, vn) :
		    f->recs(f->arg, v, vn);
		if (rv != 0)
			break;
	}
	if (rv == 0)
		rv = sm_kv_iter_status(it, err);
	return (rv);
}

/* spill_scan_it with an iterator of its own. */
static int
spill_scan(struct ing_store *s, const struct sm_key *lo,
    const struct sm_key *hi, const struct scan_fn *f, struct sm_err *err)
{
	struct sm_kv_iter *it;
	int rv;

	if ((it = sm_kv_iter_create(s->kv, SM_KV_SPILL)) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	rv = spill_scan_it(it, lo, hi, f, err);
	sm_kv_iter_destroy(it);
	return (rv);
}

struct ing_store_iter {
	struct sm_kv_iter *it;
};

int
ing_store_iter_new(struct ing_store *s, struct ing_store_iter **out,
    struct sm_err *err)
{
	struct ing_store_iter *x;

	if ((x = sm_malloc(sizeof(*x))) == NULL ||
	    (x->it = sm_kv_iter_create(s->kv, SM_KV_SPILL)) == NULL) {
		sm_free(x);
		*out = NULL;
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	*out = x;
	return (0);
}

void
ing_store_iter_free(struct ing_store_iter *it)
{
	if (it == NULL)
		return;
	sm_kv_iter_destroy(it->it);
	sm_free(it);
}

static void
key_recs(struct sm_key *k, const char *tenant, uint64_t gen, uint32_t chunk)
{
	key_id(k, tenant, gen);
	sm_key_u8(k, 'C');
	sm_key_u32(k, chunk);
}

void
ing_store_recs_put(struct sm_kv_batch *b, const char *tenant, uint64_t gen,
    uint32_t chunk, const void *v, size_t n)
{
	struct sm_key k;

	key_recs(&k, tenant, gen, chunk);
	sm_kv_batch_put(b, SM_KV_SPILL, k.b, k.n, v, n);
}

int
ing_store_recs_read(struct ing_store *s, const char *tenant, uint64_t gen,
    int (*fn)(void *arg, const uint8_t *v, size_t n), void *arg,
    struct sm_err *err)
{
	struct scan_fn f = { .recs = fn, .arg = arg };
	struct sm_key lo, hi;
	int rv;

	key_recs(&lo, tenant, gen, 0);
	key_recs(&hi, tenant, gen, UINT32_MAX);
	if ((rv = spill_scan(s, &lo, &hi, &f, err)) == SM_ECORRUPT)
		(void)sm_err_set(err, rv, "spilled profile records of tenant "
		    "%s in head %llu are damaged", tenant,
		    (unsigned long long)gen);
	return (rv);
}

int
ing_store_spill_write(struct ing_store *s, struct sm_kv_batch *b,
    struct sm_err *err)
{
	/* Not logged: the head log, not this, is what a crash replays. */
	return (sm_kv_write_unlogged(s->kv, b, err));
}

int
ing_store_spill_read(struct ing_store *s, struct ing_store_iter *it,
    const char *tenant, uint64_t gen, uint32_t series, int64_t t0,
    int64_t t1, int (*fn)(void *arg, int64_t t, const uint8_t *v, size_t n),
    void *arg, struct sm_err *err)
{
	struct scan_fn f = { .bucket = fn, .arg = arg };
	struct sm_key lo, hi;
	int rv;

	ing_key_spill(&lo, tenant, gen, series, t0);
	ing_key_spill(&hi, tenant, gen, series, t1);
	rv = it != NULL ? spill_scan_it(it->it, &lo, &hi, &f, err) :
	    spill_scan(s, &lo, &hi, &f, err);
	if (rv == SM_ECORRUPT)
		(void)sm_err_set(err, rv, "spilled bucket of tenant %s series "
		    "%u in head %llu is damaged", tenant, series,
		    (unsigned long long)gen);
	return (rv);
}

void
ing_key_part(struct sm_key *k, const char *tenant, uint64_t id, char kind,
    uint32_t series)
{
	key_id(k, tenant, id);
	sm_key_u8(k, (uint8_t)kind);
	if (kind == 'D')
		sm_key_u32(k, series);
}

static enum sm_kv_cf
part_cf(char kind)
{
	return (kind == 'M' || kind == 'I' ? SM_KV_INDEX : SM_KV_BLOCKS);
}

int
ing_store_open(const char *dir, const struct sm_kv_opts *kvo,
    size_t cache_bytes, struct ing_store **out, struct sm_err *err)
{
	struct ing_store *s;
	char path[4096];
	int rv;

	sm_metrics_register_once(&store_metric_set);
	*out = NULL;
	if ((s = sm_calloc(1, sizeof(*s))) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if ((rv = ing_cache_create(cache_bytes, &s->cache)) != 0) {
		sm_free(s);
		return (sm_err_set(err, rv, "out of memory"));
	}
	snprintf(path, sizeof(path), "%s/rocksdb", dir);
	if ((rv = sm_kv_open(path, kvo, &s->kv, err)) != 0) {
		ing_cache_destroy(s->cache);
		sm_free(s);
		return (rv);
	}
	snprintf(path, sizeof(path), "%s/headlog", dir);
	if ((rv = ing_headlog_open(path, kvo->sync, &s->log, err)) != 0 ||
	    (rv = log_floors_load(s, err)) != 0) {
		ing_store_close(s);
		return (rv);
	}
	*out = s;
	return (0);
}

void
ing_store_close(struct ing_store *s)
{
	if (s == NULL)
		return;
	ing_headlog_close(s->log);
	sm_kv_close(s->kv);
	ing_cache_destroy(s->cache);
	sm_free(s);
}

struct sm_kv *
ing_store_kv(struct ing_store *s)
{
	return (s->kv);
}

/* The system key `str("") kind str(tenant)`; tenant NULL: the prefix
 * of every one of that kind. */
static void
tenant_sys_key(struct sm_key *k, uint8_t kind, const char *tenant)
{
	sm_key_reset(k);
	sm_key_str(k, "", 0);
	sm_key_u8(k, kind);
	if (tenant != NULL)
		sm_key_str(k, tenant, strlen(tenant));
}

/*
 * The 8-byte big-endian value of index key k into *v: 0, SM_ENOTFOUND, a
 * read error, or SM_ECORRUPT for another length (`what` names the record
 * in the error).
 */
static int
index_u64_get(struct ing_store *s, const struct sm_key *k, const char *what,
    uint64_t *v, struct sm_err *err)
{
	struct sm_buf b = SM_BUF_INIT;
	int rv;

	if ((rv = sm_kv_get(s->kv, SM_KV_INDEX, k->b, k->n, &b, err)) == 0) {
		if (b.len != 8)
			rv = sm_err_set(err, SM_ECORRUPT, "%s: %zu bytes, "
			    "want 8", what, b.len);
		else
			*v = sm_get_be64((uint8_t *)b.b);
	}
	sm_buf_fini(&b);
	return (rv);
}

/*
 * Every system key `str("") kind str(tenant)` with its 8-byte value:
 * fn(arg, tenant, value) for each, in key order.  `what` names the keys in
 * errors.  A bad key or value is SM_ECORRUPT; fn's non-zero return stops
 * the scan and is returned.
 */
static int
tenant_u64_scan(struct ing_store *s, uint8_t kind, const char *what,
    int (*fn)(void *arg, const char *tenant, uint64_t v), void *arg,
    struct sm_err *err)
{
	struct sm_kv_iter *it = sm_kv_iter_create(s->kv, SM_KV_INDEX);
	char tenant[SM_KEY_MAX];
	struct sm_key pre;
	int rv = 0;

	if (it == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	tenant_sys_key(&pre, kind, NULL);
	for (sm_kv_iter_seek(it, pre.b, pre.n); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *k, *v;
		const char *t;
		size_t kn, vn, off = pre.n, tl;

		k = sm_kv_iter_key(it, &kn);
		if (kn < pre.n || memcmp(k, pre.b, pre.n) != 0)
			break;
		v = sm_kv_iter_value(it, &vn);
		if (sm_key_get_str(k, kn, &off, &t, &tl) != 0 || off != kn ||
		    tl == 0 || vn != 8) {
			rv = sm_err_set(err, SM_ECORRUPT, "%s: bad key or "
			    "value (%zu bytes, want 8)", what, vn);
			break;
		}
		memcpy(tenant, t, tl);
		tenant[tl] = '\0';
		if ((rv = fn(arg, tenant, sm_get_be64(v))) != 0) {
			sm_err_set(err, rv, "%s: %s", what, sm_strerror(rv));
			break;
		}
	}
	if (rv == 0)
		rv = sm_kv_iter_status(it, err);
	sm_kv_iter_destroy(it);
	return (rv);
}

/* --- head log ------------------------------------------------------------- */

#define LOG_HDR 6

/* Every tenant's committed generation, into the log (at open). */
static int
log_floor_set(void *arg, const char *tenant, uint64_t gen)
{
	return (ing_headlog_floor(arg, tenant, gen));
}

static int
log_floors_load(struct ing_store *s, struct sm_err *err)
{
	return (tenant_u64_scan(s, 'L', "head log floor", log_floor_set,
	    s->log, err));
}

int
ing_store_log_append(struct ing_store *s, const char *tenant, uint64_t gen,
    uint64_t seq, const void *rec, size_t n, struct sm_err *err)
{
	return (ing_headlog_append(s->log, tenant, gen, seq, rec, n, err));
}

int
ing_store_log_delete(struct ing_store *s, const char *tenant, uint64_t gen,
    uint64_t seq, struct sm_err *err)
{
	return (ing_headlog_cancel(s->log, tenant, gen, seq, err));
}

bool
ing_store_writable(struct ing_store *s, char *why, size_t whylen)
{
	return (sm_kv_writable(s->kv, why, whylen) &&
	    ing_headlog_writable(s->log, why, whylen));
}

uint64_t
ing_store_log_bytes(struct ing_store *s)
{
	return (ing_headlog_bytes(s->log));
}

/* What an older version left in the head column family, in key order;
 * gen_fn on each change of (tenant, gen). */
static int
log_replay_legacy(struct ing_store *s,
    int (*gen_fn)(void *arg, const char *tenant, uint64_t gen),
    int (*fn)(void *arg, const char *tenant, uint64_t gen, uint64_t seq,
    const uint8_t *rec, size_t n), void *arg, uint64_t *max_gen,
    uint64_t *max_seq, uint64_t *corrupt, struct sm_err *err)
{
	struct sm_kv_iter *it = sm_kv_iter_create(s->kv, SM_KV_HEAD);
	char tenant[SM_KEY_MAX], last[SM_KEY_MAX] = "";
	uint64_t last_gen = 0;
	int rv = 0;

	if (it == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *k, *v;
		const char *t;
		size_t kn, vn, off = 0, tl;
		uint64_t gen, seq;

		k = sm_kv_iter_key(it, &kn);
		v = sm_kv_iter_value(it, &vn);
		if (sm_key_get_str(k, kn, &off, &t, &tl) != 0 ||
		    sm_key_get_u64(k, kn, &off, &gen) != 0 ||
		    sm_key_get_u64(k, kn, &off, &seq) != 0 || off != kn ||
		    tl == 0) {
			sm_counter_inc(sm_metric_child(corruptions,
			    "head_log"));
			sm_error("store", "head log: malformed key of %zu "
			    "bytes skipped", kn);
			(*corrupt)++;
			continue;
		}
		memcpy(tenant, t, tl);
		tenant[tl] = '\0';
		*max_gen = SM_MAX(*max_gen, gen);
		*max_seq = SM_MAX(*max_seq, seq);
		if (vn < LOG_HDR || v[0] != 'H' || v[1] != 1 ||
		    sm_get_be32(v + 2) != (uint32_t)sm_hash(v + LOG_HDR,
		    vn - LOG_HDR)) {
			sm_counter_inc(sm_metric_child(corruptions,
			    "head_log"));
			sm_error("store", "head log: corrupt record skipped\t"
			    "tenant=%s gen=%llu seq=%llu bytes=%zu", tenant,
			    (unsigned long long)gen, (unsigned long long)seq,
			    vn);
			(*corrupt)++;
			continue;
		}
		s->legacy_log = true;
		if (gen_fn != NULL && (gen != last_gen ||
		    strcmp(tenant, last) != 0)) {
			if ((rv = gen_fn(arg, tenant, gen)) != 0)
				break;
			last_gen = gen;
			memcpy(last, tenant, tl + 1);
		}
		if ((rv = fn(arg, tenant, gen, seq, v + LOG_HDR,
		    vn - LOG_HDR)) != 0)
			break;
	}
	if (rv == 0)
		rv = sm_kv_iter_status(it, err);
	sm_kv_iter_destroy(it);
	return (rv);
}

static int
no_gen(void *arg, const char *tenant, uint64_t gen)
{
	(void)arg;
	(void)tenant;
	(void)gen;
	return (0);
}

void
ing_store_log_inspect(struct ing_store *s)
{
	ing_headlog_inspect(s->log);
}

int
ing_store_log_replay(struct ing_store *s,
    int (*gen_fn)(void *arg, const char *tenant, uint64_t gen),
    int (*fn)(void *arg, const char *tenant, uint64_t gen, uint64_t seq,
    const uint8_t *rec, size_t n), void *arg, uint64_t *max_gen,
    uint64_t *max_seq, uint64_t *corrupt, struct sm_err *err)
{
	uint64_t c = 0;
	int rv;

	*max_gen = *max_seq = *corrupt = 0;
	if ((rv = log_replay_legacy(s, gen_fn, fn, arg, max_gen, max_seq,
	    corrupt, err)) != 0)
		return (rv);
	rv = ing_headlog_replay(s->log, gen_fn != NULL ? gen_fn : no_gen, fn,
	    arg, max_gen, max_seq, &c, err);
	if (c > 0) {
		*corrupt += c;
		sm_counter_add(sm_metric_child(corruptions, "head_log"), c);
	}
	return (rv);
}

/* --- blocks --------------------------------------------------------------- */

/*
 * The meta of block (tenant, id) when its own value is damaged or missing:
 * the copy at the head of the index, else a "broken" meta whose range is
 * unknown (every query of the tenant then fails with SM_ECORRUPT naming the
 * block: no answer can be known to be complete).  Both are reported.
 */
static void
meta_recover(struct ing_store *s, const char *tenant, uint64_t id,
    struct ing_block_meta *m)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_key k;
	struct sm_err e;

	sm_err_clear(&e);
	ing_key_part(&k, tenant, id, 'I', 0);
	if (sm_kv_get(s->kv, SM_KV_INDEX, k.b, k.n, &v, &e) == 0 &&
	    ing_block_meta_from_index((uint8_t *)v.b, v.len, m, &e) == 0 &&
	    m->gen == id) {
		sm_warn("store", "block meta rebuilt from its index	tenant=%s "
		    "block=%llu", tenant, (unsigned long long)id);
		sm_buf_fini(&v);
		return;
	}
	sm_buf_fini(&v);
	if (e.msg[0] == '\0')
		sm_err_set(&e, SM_ECORRUPT, "index missing or for another block");
	store_corrupt(tenant, id, 'I', 0, &e);
	sm_error("store", "block time range unknown: every query of the tenant "
	    "will fail until it is repaired or removed\ttenant=%s block=%llu",
	    tenant, (unsigned long long)id);
	memset(m, 0, sizeof(*m));
	m->gen = id;
	m->min_t = INT64_MIN;
	m->max_t = INT64_MAX;
	m->bucket_ms = 1;
	m->broken = 1;
}

int
ing_store_blocks_scan(struct ing_store *s,
    int (*fn)(void *arg, const char *tenant, const struct ing_block_meta *m),
    void *arg, struct sm_err *err)
{
	struct sm_kv_iter *it = sm_kv_iter_create(s->kv, SM_KV_INDEX);
	char tenant[SM_KEY_MAX];
	int rv = 0;

	if (it == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	/* Keys sort (tenant, id, kind): a block's 'I' comes before its 'M'. */
	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *k, *v;
		const char *t;
		size_t kn, vn, off = 0, tl;
		uint64_t id;
		uint8_t kind;
		struct ing_block_meta m;
		struct sm_err e2;

		k = sm_kv_iter_key(it, &kn);
		if (sm_key_get_str(k, kn, &off, &t, &tl) != 0 || tl == 0 ||
		    sm_key_get_u64(k, kn, &off, &id) != 0 ||
		    sm_key_get_u8(k, kn, &off, &kind) != 0 || off != kn)
			continue;   /* not a block key */
		memcpy(tenant, t, tl);
		tenant[tl] = '\0';
		sm_err_clear(&e2);
		if (kind == 'I') {
			struct sm_buf mv = SM_BUF_INIT;
			struct sm_key mk;
			int g;

			/* Only an index without a meta needs work here. */
			ing_key_part(&mk, tenant, id, 'M', 0);
			g = sm_kv_get(s->kv, SM_KV_INDEX, mk.b, mk.n, &mv, &e2);
			sm_buf_fini(&mv);
			if (g != SM_ENOTFOUND)
				continue;
			sm_err_set(&e2, SM_ECORRUPT, "meta missing");
			store_corrupt(tenant, id, 'M', 0, &e2);
			meta_recover(s, tenant, id, &m);
		} else if (kind == 'M') {
			v = sm_kv_iter_value(it, &vn);
			if (ing_block_meta_decode(v, vn, &m, &e2) != 0 ||
			    m.gen != id) {
				if (e2.msg[0] == '\0')
					sm_err_set(&e2, SM_ECORRUPT, "meta names "
					    "block %llu", (unsigned long long)
					    m.gen);
				store_corrupt(tenant, id, 'M', 0, &e2);
				meta_recover(s, tenant, id, &m);
			}
		} else {
			continue;
		}
		{
			struct sm_buf zv = SM_BUF_INIT;
			struct sm_key zk;

			/* Merged away (store.h): a point lookup per block. */
			ing_key_part(&zk, tenant, id, 'Z', 0);
			m.merged = sm_kv_get(s->kv, SM_KV_INDEX, zk.b, zk.n, &zv,
			    &e2) == 0;
			sm_buf_fini(&zv);
		}
		if ((rv = fn(arg, tenant, &m)) != 0)
			break;
	}
	if (rv == 0)
		rv = sm_kv_iter_status(it, err);
	sm_kv_iter_destroy(it);
	return (rv);
}

/* --- ship records and raw parts (store.h) ---------------------------- */

#define SHIP_REC_FIXED 21     /* ulid 16, state 1, be32 ninputs */

static void
ship_key(struct sm_key *k, const char *tenant, uint64_t id)
{
	tenant_sys_key(k, 'U', tenant);
	sm_key_u64(k, id);
}

static int
ship_rec_put(struct sm_kv_batch *b, const char *tenant, uint64_t id,
    const struct ing_ship_rec *r)
{
	size_t n = SHIP_REC_FIXED + 8 * (size_t)r->ninputs;
	struct sm_key k;
	uint8_t *v;

	if ((v = sm_malloc(n)) == NULL)
		return (SM_ENOMEM);
	memcpy(v, r->ulid, 16);
	v[16] = r->shipped ? 1 : 0;
	sm_put_be32(v + 17, r->ninputs);
	for (uint32_t i = 0; i < r->ninputs; i++)
		sm_put_be64(v + SHIP_REC_FIXED + 8 * i, r->inputs[i]);
	ship_key(&k, tenant, id);
	sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, v, n);
	sm_free(v);
	return (0);
}

int
ing_store_ship_get(struct ing_store *s, const char *tenant, uint64_t id,
    struct ing_ship_rec *r, struct sm_err *err)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_key k;
	uint32_t n;
	int rv;

	memset(r, 0, sizeof(*r));
	ship_key(&k, tenant, id);
	if ((rv = sm_kv_get(s->kv, SM_KV_INDEX, k.b, k.n, &v, err)) != 0)
		goto out;
	n = v.len >= SHIP_REC_FIXED ? sm_get_be32((uint8_t *)v.b + 17) : 0;
	if (v.len < SHIP_REC_FIXED || (uint8_t)v.b[16] > 1 ||
	    v.len != SHIP_REC_FIXED + 8 * (size_t)n) {
		rv = sm_err_set(err, SM_ECORRUPT, "ship record of tenant %s "
		    "block %llu: %zu bytes", tenant, (unsigned long long)id,
		    v.len);
		goto out;
	}
	if (n > 0 && (r->inputs = sm_calloc(n, sizeof(uint64_t))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	memcpy(r->ulid, v.b, 16);
	r->shipped = v.b[16] == 1;
	r->ninputs = n;
	for (uint32_t i = 0; i < n; i++)
		r->inputs[i] = sm_get_be64((uint8_t *)v.b + SHIP_REC_FIXED +
		    8 * i);
out:
	sm_buf_fini(&v);
	return (rv);
}

void
ing_ship_rec_fini(struct ing_ship_rec *r)
{
	sm_free(r->inputs);
	r->inputs = NULL;
	r->ninputs = 0;
}

int
ing_store_ship_put(struct ing_store *s, const char *tenant, uint64_t id,
    const struct ing_ship_rec *r, struct sm_err *err)
{
	struct sm_kv_batch *b = sm_kv_batch_create();
	int rv;

	if (b == NULL || ship_rec_put(b, tenant, id, r) != 0) {
		sm_kv_batch_destroy(b);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	rv = sm_kv_write(s->kv, b, true, err);
	sm_kv_batch_destroy(b);
	return (rv);
}

int
ing_store_incarnation(struct ing_store *s, uint8_t out[16],
    struct sm_err *err)
{
	struct sm_buf v = SM_BUF_INIT;
	struct sm_key k;
	int rv;

	sm_key_reset(&k);
	sm_key_str(&k, "", 0);
	sm_key_u8(&k, 'N');
	rv = sm_kv_get(s->kv, SM_KV_INDEX, k.b, k.n, &v, err);
	if (rv == 0 && v.len != 16)
		rv = sm_err_set(err, SM_ECORRUPT, "incarnation: %zu bytes, "
		    "want 16", v.len);
	if (rv == 0)
		memcpy(out, v.b, 16);
	sm_buf_fini(&v);
	if (rv != SM_ENOTFOUND)
		return (rv);
	if (getrandom(out, 16, 0) != 16)
		return (sm_err_set(err, SM_EIO, "getrandom failed"));
	return (sm_kv_put(s->kv, SM_KV_INDEX, k.b, k.n, out, 16, err));
}

static void
witness_key(struct sm_key *k)
{
	sm_key_reset(k);
	sm_key_str(k, "", 0);
	sm_key_u8(k, 'W');
}

int
ing_store_witness_get(struct ing_store *s, struct sm_buf *v,
    struct sm_err *err)
{
	struct sm_key k;

	witness_key(&k);
	return (sm_kv_get(s->kv, SM_KV_INDEX, k.b, k.n, v, err));
}

int
ing_store_witness_put(struct ing_store *s, const uint8_t *v, size_t n,
    struct sm_err *err)
{
	struct sm_key k;

	witness_key(&k);
	return (sm_kv_put(s->kv, SM_KV_INDEX, k.b, k.n, v, n, err));
}

static void
left_key(struct sm_key *k)
{
	sm_key_reset(k);
	sm_key_str(k, "", 0);
	sm_key_u8(k, 'E');
}

int
ing_store_left_get(struct ing_store *s, int64_t *ms, struct sm_err *err)
{
	struct sm_key k;
	uint64_t v;
	int rv;

	left_key(&k);
	if ((rv = index_u64_get(s, &k, "left record", &v, err)) == 0)
		*ms = (int64_t)v;
	return (rv);
}

int
ing_store_left_put(struct ing_store *s, int64_t ms, struct sm_err *err)
{
	struct sm_kv_batch *b = sm_kv_batch_create();
	struct sm_key k;
	uint8_t v[8];
	int rv;

	if (b == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	left_key(&k);
	sm_put_be64(v, (uint64_t)ms);
	sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, v, sizeof(v));
	rv = sm_kv_write(s->kv, b, true, err);
	sm_kv_batch_destroy(b);
	return (rv);
}

/* Every value in [lo, hi) of one family: fn(arg, key suffix, value). */
static int
parts_scan(struct ing_store *s, enum sm_kv_cf cf, const struct sm_key *lo,
    int (*fn)(void *arg, char kind, uint32_t series, const uint8_t *v,
    size_t n), void *arg, struct sm_err *err)
{
	struct sm_kv_iter *it = sm_kv_iter_create(s->kv, cf);
	int rv = 0;

	if (it == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (sm_kv_iter_seek(it, lo->b, lo->n); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *k, *v;
		size_t kn, vn;
		uint32_t series = 0;
		char kind;

		k = sm_kv_iter_key(it, &kn);
		if (kn < lo->n || memcmp(k, lo->b, lo->n) != 0)
			break;
		if (kn == lo->n + 5 && k[lo->n] == 'D')
			series = sm_get_be32(k + lo->n + 1);
		else if (kn != lo->n + 1)
			continue;
		kind = (char)k[lo->n];
		if (kind == 'Z' || kind == 'B' || kind == 'C')
			continue;   /* tombstone; an older version's spill */
		v = sm_kv_iter_value(it, &vn);
		if ((rv = fn(arg, kind, series, v, vn)) != 0)
			break;
	}
	if (rv == 0)
		rv = sm_kv_iter_status(it, err);
	sm_kv_iter_destroy(it);
	return (rv);
}

int
ing_store_block_parts(struct ing_store *s, const char *tenant, uint64_t id,
    int (*fn)(void *arg, char kind, uint32_t series, const uint8_t *v,
    size_t n), void *arg, struct sm_err *err)
{
	struct sm_key lo;
	int rv;

	key_id(&lo, tenant, id);
	if ((rv = parts_scan(s, SM_KV_INDEX, &lo, fn, arg, err)) != 0)
		return (rv);
	return (parts_scan(s, SM_KV_BLOCKS, &lo, fn, arg, err));
}

int
ing_store_block_import(struct ing_store *s, const char *tenant, uint64_t gen,
    const struct ing_store_part *parts, uint32_t nparts,
    const struct ing_ship_rec *r, struct sm_err *err)
{
	struct sm_kv_batch *b = sm_kv_batch_create();
	struct sm_key k;
	int rv;

	if (b == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < nparts; i++) {
		ing_key_part(&k, tenant, gen, parts[i].kind, parts[i].series);
		sm_kv_batch_put(b, part_cf(parts[i].kind), k.b, k.n, parts[i].v,
		    parts[i].n);
	}
	if ((rv = ship_rec_put(b, tenant, gen, r)) != 0)
		rv = sm_err_set(err, rv, "out of memory");
	else
		rv = sm_kv_write(s->kv, b, true, err);
	sm_kv_batch_destroy(b);
	return (rv);
}

bool
ing_store_empty(struct ing_store *s)
{
	struct sm_kv_iter *it;
	bool empty = true;

	if (ing_store_log_bytes(s) > 0)
		return (false);
	if ((it = sm_kv_iter_create(s->kv, SM_KV_INDEX)) == NULL)
		return (false);
	/* System keys have the empty tenant and sort first; any other key
	 * belongs to a block. */
	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *key;
		size_t kn, off = 0, tl;
		const char *t;

		key = sm_kv_iter_key(it, &kn);
		if (sm_key_get_str(key, kn, &off, &t, &tl) == 0 && tl == 0)
			continue;
		empty = false;
		break;
	}
	sm_kv_iter_destroy(it);
	return (empty);
}

/* Write every part of `e` in one synced batch; drop_log: also delete the
 * tenant's head log up to and including the block's generation. */
static int
block_write(struct ing_store *s, const char *tenant,
    const struct ing_block_enc *e, bool drop_log, const uint64_t *tomb,
    uint32_t ntomb, struct sm_err *err)
{
	struct sm_kv_batch *b = sm_kv_batch_create(), *ahead = NULL;
	struct sm_key k, k2;
	int rv;

	if (b == NULL || (drop_log && (ahead = sm_kv_batch_create()) ==
	    NULL)) {
		sm_kv_batch_destroy(b);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	ing_key_part(&k, tenant, e->meta.gen, 'M', 0);
	sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, e->m.b, e->m.len);
	ing_key_part(&k, tenant, e->meta.gen, 'I', 0);
	sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, e->index.b, e->index.len);
	ing_key_part(&k, tenant, e->meta.gen, 'S', 0);
	sm_kv_batch_put(b, SM_KV_BLOCKS, k.b, k.n, e->symbols.b,
	    e->symbols.len);
	ing_key_part(&k, tenant, e->meta.gen, 'T', 0);
	sm_kv_batch_put(b, SM_KV_BLOCKS, k.b, k.n, e->tree.b, e->tree.len);
	if (e->meta.nspans > 0) {
		ing_key_part(&k, tenant, e->meta.gen, 'P', 0);
		sm_kv_batch_put(b, SM_KV_BLOCKS, k.b, k.n, e->spans.b,
		    e->spans.len);
	}
	if (e->meta.nprofiles > 0) {
		ing_key_part(&k, tenant, e->meta.gen, 'X', 0);
		sm_kv_batch_put(b, SM_KV_BLOCKS, k.b, k.n, e->profiles.b,
		    e->profiles.len);
	}
	/* A cut's data parts go ahead in unsynced batches of about
	 * ING_STORE_AHEAD_BYTES (store.h, "Written ahead"): one batch of
	 * the whole block was copied three times over (ours, RocksDB's,
	 * the memtable).  The last batch, synced, makes them part of a
	 * block; the WAL is one sequence, so its sync covers them. */
	for (uint32_t i = 0; i < e->ndata; i++) {
		struct sm_kv_batch *to = drop_log ? ahead : b;

		ing_key_part(&k, tenant, e->meta.gen, 'D', i);
		sm_kv_batch_put(to, SM_KV_BLOCKS, k.b, k.n, e->data[i].b,
		    e->data[i].len);
		if (drop_log && (sm_kv_batch_bytes(ahead) >=
		    ING_STORE_AHEAD_BYTES || i + 1 == e->ndata)) {
			if ((rv = sm_kv_write(s->kv, ahead, false, err)) != 0)
				goto out;
			sm_kv_batch_clear(ahead);
		}
	}
	for (uint32_t i = 0; i < ntomb; i++) {
		ing_key_part(&k, tenant, tomb[i], 'Z', 0);
		sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, "", 0);
	}
	if (ntomb > 0) {
		/* The merged block's ship record names what it replaces, in
		 * the same batch (store.h, "Ship records"). */
		struct ing_ship_rec r = { .inputs = (uint64_t *)tomb,
			.ninputs = ntomb };

		if ((rv = ship_rec_put(b, tenant, e->meta.gen, &r)) != 0) {
			rv = sm_err_set(err, rv, "out of memory");
			goto out;
		}
	}
	if (!drop_log) {
		rv = sm_kv_write(s->kv, b, true, err);
		goto out;
	}
	/* The head log of this tenant up to and including this generation
	 * is dead (store.h): its floor, and what an older version logged
	 * in the head family. */
	{
		uint8_t gv[8];

		tenant_sys_key(&k, 'L', tenant);   /* committed gen (store.h) */
		sm_put_be64(gv, e->meta.gen);
		sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, gv, sizeof(gv));
	}
	if (s->legacy_log) {
		ing_key_head(&k, tenant, 0, 0);
		ing_key_head(&k2, tenant, e->meta.gen + 1, 0);
		sm_kv_batch_delete_range(b, SM_KV_HEAD, k.b, k.n, k2.b, k2.n);
	}
	rv = sm_kv_write(s->kv, b, true, err);
	if (rv == 0) {
		struct sm_err e2;

		ing_headlog_committed(s->log, tenant, e->meta.gen);
		/* An older version's head family is compacted over the dead
		 * range now, since a range tombstone alone leaves the data
		 * in SSTs until RocksDB happens to compact them (flushed
		 * first).  The memtables of a new store are flushed once per
		 * cut round instead (ing_store_reclaim): a flush per block
		 * made an SST per block, and 10,000 tenants' blocks took
		 * minutes and hundreds of MiB of table readers.  A failure
		 * only delays it. */
		if (s->legacy_log && sm_kv_flush(s->kv, &e2) == 0)
			(void)sm_kv_compact(s->kv, SM_KV_HEAD, k.b, k.n, k2.b,
			    k2.n, &e2);
	}
out:
	sm_kv_batch_destroy(b);
	sm_kv_batch_destroy(ahead);
	return (rv);
}

int
ing_store_reclaim(struct ing_store *s, struct sm_err *err)
{
	return (sm_kv_flush(s->kv, err));
}

int
ing_store_block_commit(struct ing_store *s, const char *tenant,
    const struct ing_block_enc *e, struct sm_err *err)
{
	SM_ASSERT(e->meta.tier_ms == 0);
	return (block_write(s, tenant, e, true, NULL, 0, err));
}

int
ing_store_block_put(struct ing_store *s, const char *tenant,
    const struct ing_block_enc *e, struct sm_err *err)
{
	SM_ASSERT(e->meta.tier_ms > 0);
	return (block_write(s, tenant, e, false, NULL, 0, err));
}

int
ing_store_block_merge(struct ing_store *s, const char *tenant,
    const struct ing_block_enc *e, const uint64_t *inputs, uint32_t ninputs,
    struct sm_err *err)
{
	SM_ASSERT(e->meta.tier_ms == 0 && e->meta.cover_gen > 0);
	return (block_write(s, tenant, e, false, inputs, ninputs, err));
}

/* Read one part's value; a RocksDB corruption is reported as the part's. */
static int
part_get(struct ing_store *s, const char *tenant, uint64_t id, char kind,
    uint32_t series, struct sm_buf *v, struct sm_err *err)
{
	struct sm_key k;
	int rv;

	ing_key_part(&k, tenant, id, kind, series);
	rv = sm_kv_get(s->kv, part_cf(kind), k.b, k.n, v, err);
	if (rv == SM_ENOTFOUND) {
		sm_err_set(err, SM_ECORRUPT, "part missing");
		return (store_corrupt(tenant, id, kind, series, err));
	}
	if (rv == SM_ECORRUPT)
		return (store_corrupt(tenant, id, kind, series, err));
	if (rv == 0 && kind == 'D' && ing_remote_is_stub((uint8_t *)v->b,
	    v->len)) {
		uint8_t stub[ING_REMOTE_STUB];
		size_t n = SM_MIN(v->len, sizeof(stub));

		memcpy(stub, v->b, n);
		if (s->remote == NULL)
			rv = sm_err_set(err, SM_ECORRUPT, "a store-gateway's "
			    "remote part, read without the bucket");
		else
			rv = s->remote(s->remote_arg, tenant, stub, v->len,
			    v, err);
		if (rv == SM_ECORRUPT)
			return (store_corrupt(tenant, id, kind, series, err));
	}
	if (rv == 0)
		sm_counter_add(sm_metric_child(bytes_read, part_name(kind)),
		    v->len);
	return (rv);
}

void
ing_store_set_remote(struct ing_store *s, ing_store_remote_fn fn, void *arg)
{
	s->remote = fn;
	s->remote_arg = arg;
}

static void
set_free(void *p)
{
	ing_set_fini(p);
	sm_free(p);
}

static void
tree_free(void *p)
{
	ing_block_tree_free(p);
}

int
ing_store_block_index(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, const struct ing_set **out,
    struct ing_cache_ent **ent, struct sm_err *err)
{
	struct sm_buf v = SM_BUF_INIT;
	struct ing_set *set;
	size_t bytes;
	int rv;

	if ((*out = ing_cache_get(s->cache, tenant, m->gen, 'I', ent)) !=
	    NULL)
		return (0);
	if ((rv = part_get(s, tenant, m->gen, 'I', 0, &v, err)) != 0)
		goto out;
	if ((rv = ing_block_index_decode((uint8_t *)v.b, v.len, m, &set,
	    &bytes, err)) != 0) {
		if (rv == SM_ECORRUPT)
			store_corrupt(tenant, m->gen, 'I', 0, err);
		goto out;
	}
	if ((*out = ing_cache_put(s->cache, tenant, m->gen, 'I', set, bytes,
	    set_free, ent)) == NULL)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	sm_buf_fini(&v);
	return (rv);
}

int
ing_store_block_tree(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, const struct ing_block_tree **out,
    struct ing_cache_ent **ent, struct sm_err *err)
{
	struct sm_buf vs = SM_BUF_INIT, vt = SM_BUF_INIT;
	struct ing_block_tree *t;
	int rv;

	if ((*out = ing_cache_get(s->cache, tenant, m->gen, 'T', ent)) !=
	    NULL)
		return (0);
	if ((rv = part_get(s, tenant, m->gen, 'S', 0, &vs, err)) != 0 ||
	    (rv = part_get(s, tenant, m->gen, 'T', 0, &vt, err)) != 0)
		goto out;
	if ((rv = ing_block_tree_decode((uint8_t *)vs.b, vs.len,
	    (uint8_t *)vt.b, vt.len, m, &t, err)) != 0) {
		if (rv == SM_ECORRUPT)
			store_corrupt(tenant, m->gen, strstr(err->msg,
			    "symbols") != NULL || strstr(err->msg, "'S'") !=
			    NULL ? 'S' : 'T', 0, err);
		goto out;
	}
	if ((*out = ing_cache_put(s->cache, tenant, m->gen, 'T', t, t->bytes,
	    tree_free, ent)) == NULL)
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	sm_buf_fini(&vs);
	sm_buf_fini(&vt);
	return (rv);
}

void
ing_store_release(struct ing_store *s, struct ing_cache_ent *ent)
{
	ing_cache_release(s->cache, ent);
}

/*
 * Part `kind` of block m read and decoded into *out (a pointer of the
 * decoder's type): 'D' series `series`' buckets (sr, into arena a), 'P'
 * its spans, 'X' its profile records.  A part that does not decode is
 * reported corrupt as part_get's are.
 */
static int
part_decode(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, char kind, uint32_t series,
    const struct ing_series *sr, struct sm_arena *a, void *out,
    struct sm_err *err)
{
	struct sm_buf v = SM_BUF_INIT;
	const uint8_t *b;
	int rv;

	if ((rv = part_get(s, tenant, m->gen, kind, series, &v, err)) != 0)
		goto out;
	b = (const uint8_t *)v.b;
	if (kind == 'D')
		rv = ing_block_data_decode(b, v.len, sr, m->nnodes, a, out,
		    err);
	else if (kind == 'P')
		rv = ing_block_spans_decode(b, v.len, m, out, err);
	else
		rv = ing_block_profiles_decode(b, v.len, m, out, err);
	if (rv == SM_ECORRUPT)
		store_corrupt(tenant, m->gen, kind, series, err);
out:
	sm_buf_fini(&v);
	return (rv);
}

int
ing_store_block_data(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, uint32_t series,
    const struct ing_series *sr, struct sm_arena *a,
    struct ing_bucket **out, struct sm_err *err)
{
	return (part_decode(s, tenant, m, 'D', series, sr, a, out, err));
}

/* The nrec records of part 'P' (spans) or 'X' (profiles) into *out (set
 * to NULL by the caller) and *n; none without reading when nrec is 0. */
static int
recs_get(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, char kind, uint32_t nrec, void *out,
    uint32_t *n, struct sm_err *err)
{
	int rv;

	*n = 0;
	if (nrec == 0)
		return (0);
	if ((rv = part_decode(s, tenant, m, kind, 0, NULL, NULL, out,
	    err)) == 0)
		*n = nrec;
	return (rv);
}

int
ing_store_block_spans(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, struct ing_span_rec **out, uint32_t *n,
    struct sm_err *err)
{
	*out = NULL;
	return (recs_get(s, tenant, m, 'P', m->nspans, out, n, err));
}

int
ing_store_block_profiles(struct ing_store *s, const char *tenant,
    const struct ing_block_meta *m, struct ing_prof_rec **out, uint32_t *n,
    struct sm_err *err)
{
	*out = NULL;
	return (recs_get(s, tenant, m, 'X', m->nprofiles, out, n, err));
}

uint64_t
ing_store_disk_bytes(struct ing_store *s)
{
	return (sm_kv_disk_bytes(s->kv) + ing_headlog_bytes(s->log));
}

int
ing_store_flush_memtables(struct ing_store *s, struct sm_err *err)
{
	struct sm_kv_mem m;

	sm_kv_memory(s->kv, &m);
	if (m.memtables < ((uint64_t)1 << 20))
		return (0);
	return (sm_kv_flush(s->kv, err));
}

int
ing_store_compact(struct ing_store *s, struct sm_err *err)
{
	int rv;

	if ((rv = sm_kv_flush(s->kv, err)) != 0)
		return (rv);
	for (int cf = 0; cf < SM_KV_NCF; cf++) {
		if ((rv = sm_kv_compact(s->kv, (enum sm_kv_cf)cf, NULL, 0,
		    NULL, 0, err)) != 0)
			return (rv);
	}
	return (0);
}

/* --- retention ---------------------------------------------------------------- */

int
ing_store_floor_get(struct ing_store *s, int64_t *floor_ms,
    struct sm_err *err)
{
	struct sm_key k;
	uint64_t v;
	int rv;

	*floor_ms = INT64_MIN;
	tenant_sys_key(&k, 'R', NULL);   /* the default floor */
	rv = index_u64_get(s, &k, "retention floor", &v, err);
	if (rv == SM_ENOTFOUND)
		rv = 0;
	else if (rv == 0)
		*floor_ms = (int64_t)v;
	return (rv);
}

int
ing_store_floors_put(struct ing_store *s, const struct ing_store_floor *v,
    uint32_t n, bool set_default, int64_t default_ms, struct sm_err *err)
{
	struct sm_kv_batch *b;
	struct sm_key k;
	uint8_t val[8];
	int rv;

	if (n == 0 && !set_default)
		return (0);
	if ((b = sm_kv_batch_create()) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (uint32_t i = 0; i < n; i++) {
		tenant_sys_key(&k, 'F', v[i].tenant);   /* its own floor */
		sm_put_be64(val, (uint64_t)v[i].floor_ms);
		sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, val, sizeof(val));
	}
	if (set_default) {
		tenant_sys_key(&k, 'R', NULL);
		sm_put_be64(val, (uint64_t)default_ms);
		sm_kv_batch_put(b, SM_KV_INDEX, k.b, k.n, val, sizeof(val));
	}
	rv = sm_kv_write(s->kv, b, true, err);
	sm_kv_batch_destroy(b);
	return (rv);
}

struct floors_scan {
	int (*fn)(void *arg, const char *tenant, int64_t floor_ms);
	void *arg;
};

static int
floors_scan_one(void *arg, const char *tenant, uint64_t v)
{
	struct floors_scan *fs = arg;

	return (fs->fn(fs->arg, tenant, (int64_t)v));
}

/* The floors of system keys `kind` (named `what` in errors) to fn. */
static int
floors_scan(struct ing_store *s, uint8_t kind, const char *what,
    int (*fn)(void *arg, const char *tenant, int64_t floor_ms), void *arg,
    struct sm_err *err)
{
	struct floors_scan fs = { fn, arg };

	return (tenant_u64_scan(s, kind, what, floors_scan_one, &fs, err));
}

int
ing_store_floors_scan(struct ing_store *s,
    int (*fn)(void *arg, const char *tenant, int64_t floor_ms), void *arg,
    struct sm_err *err)
{
	return (floors_scan(s, 'F', "tenant retention floor", fn, arg, err));
}

int
ing_store_local_floor_put(struct ing_store *s, const char *tenant,
    int64_t floor_ms, struct sm_err *err)
{
	struct sm_key k;
	uint8_t val[8];

	tenant_sys_key(&k, 'G', tenant);
	sm_put_be64(val, (uint64_t)floor_ms);
	return (sm_kv_put(s->kv, SM_KV_INDEX, k.b, k.n, val, sizeof(val),
	    err));
}

int
ing_store_local_floors_scan(struct ing_store *s,
    int (*fn)(void *arg, const char *tenant, int64_t floor_ms), void *arg,
    struct sm_err *err)
{
	return (floors_scan(s, 'G', "tenant local floor", fn, arg, err));
}

int
ing_store_block_delete(struct ing_store *s, const char *tenant, uint64_t id,
    struct sm_err *err)
{
	struct sm_kv_batch *b = sm_kv_batch_create();
	struct sm_key lo, hi;
	int rv;

	if (b == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	key_id(&lo, tenant, id);
	key_id(&hi, tenant, id + 1);
	sm_kv_batch_delete_range(b, SM_KV_INDEX, lo.b, lo.n, hi.b, hi.n);
	sm_kv_batch_delete_range(b, SM_KV_BLOCKS, lo.b, lo.n, hi.b, hi.n);
	ship_key(&lo, tenant, id);
	sm_kv_batch_delete(b, SM_KV_INDEX, lo.b, lo.n);
	key_id(&lo, tenant, id);
	if ((rv = sm_kv_write(s->kv, b, true, err)) == 0) {
		/* Reclaim the space now rather than at some later compaction;
		 * a failure here only delays it. */
		struct sm_err e2;

		(void)sm_kv_compact(s->kv, SM_KV_BLOCKS, lo.b, lo.n, hi.b, hi.n,
		    &e2);
		(void)sm_kv_compact(s->kv, SM_KV_INDEX, lo.b, lo.n, hi.b, hi.n,
		    &e2);
	}
	sm_kv_batch_destroy(b);
	return (rv);
}
