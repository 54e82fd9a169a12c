/*
 * admin.c -- `smolder-admin`: offline inspection of an ingester's data
 * directory.  Run it while the server is stopped (RocksDB's lock).
 *
 *   smolder-admin blocks  -data.dir=DIR
 *       one line per block: tenant, id, time range, series, nodes, bytes
 *   smolder-admin verify  -data.dir=DIR
 *       reads and checks every stored part and head-log record; prints
 *       every problem; exits 1 if anything is damaged, 0 if all is clean
 *   smolder-admin corrupt -data.dir=DIR -tenant=T -block=ID
 *                         -part=meta|index|symbols|tree|data [-series=N]
 *                         [-mode=flip|truncate]
 *       damages one stored block part on purpose (flips a byte in the
 *       middle of its payload, or truncates it to half) -- for testing
 *       that corruption is detected and contained
 *   smolder-admin disk    -data.dir=DIR [-compact]
 *       bytes on disk: every file, and the SST (data) files alone
 *       (optionally after flushing and compacting)
 *   smolder-admin hash-key [-generate]
 *       reads an API key from the first line of stdin (not argv, so it
 *       stays out of `ps` and shell history) and prints its keys-file
 *       hash (common/auth.h); -generate makes a new random key (192 bits
 *       from getrandom) and prints the key, then the hash.  Needs no
 *       data directory.
 *   smolder-admin bucket ls     [-prefix=P]   -storage.* flags
 *       every object under the prefix: size and key
 *   smolder-admin bucket get    -key=K [-offset=N -length=N]
 *       writes the object (or the range) to stdout
 *   smolder-admin bucket verify [-prefix=P]
 *       every block of the bucket (ingester/ship.h): its meta.json
 *       parsed, its object's size and XXH3 against the meta, its table
 *       of contents and every part's checksum; blocks without a
 *       meta.json are reported as partial uploads.  One line per block;
 *       exits 1 if anything is damaged or partial, 0 if all is clean.
 *   smolder-admin bucket keys   [-prefix=P]
 *       which key-encryption key sealed each object (bucket_seal.c;
 *       "plain" for one that is not sealed), then per KEK the objects
 *       and bytes it sealed: an old KEK may leave the key file once no
 *       object is left under it.  Reads headers only; needs no key file.
 *   The bucket commands use the server's own client (common/bucket.h)
 *   and need no data directory; they take the server's -storage.* flags.
 */
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>

#include "common/auth.h"
#include "common/bucket.h"

#include "common/flags.h"
#include "common/json.h"
#include "common/kv.h"
#include "common/log.h"
#include "ingester/ship.h"
#include "ingester/store.h"

struct admin {
	char *data_dir;
	char *tenant;
	char *part;
	char *mode;
	int64_t block;
	int64_t series;
	bool compact;
	bool generate;
	char *prefix;
	char *key;
	int64_t offset, length;
	struct sm_bucket_cfg bcfg;
	struct sm_bucket *bucket;
	struct ing_store *store;
	int problems;
};

static int
open_store(struct admin *ad)
{
	struct sm_kv_opts o;
	struct sm_err err;
	char path[4096];

	sm_kv_opts_default(&o);
	snprintf(path, sizeof(path), "%s", ad->data_dir);
	if (ing_store_open(path, &o, 64u << 20, &ad->store, &err) != 0) {
		fprintf(stderr, "smolder-admin: %s\n", err.msg);
		return (-1);
	}
	return (0);
}

static int
print_block(void *arg, const char *tenant, const struct ing_block_meta *m)
{
	(void)arg;
	printf("tenant=%s block=%llu min=%lld max=%lld series=%u nodes=%u "
	    "bytes=%llu", tenant, (unsigned long long)m->gen,
	    (long long)m->min_t, (long long)m->max_t, m->nseries, m->nnodes,
	    (unsigned long long)m->bytes);
	if (m->tier_ms > 0)      /* a downsampling tier (block.h) */
		printf(" tier_ms=%lld cover_start=%lld cover_end=%lld "
		    "cover_gen=%llu", (long long)m->tier_ms,
		    (long long)m->cover_start, (long long)m->cover_end,
		    (unsigned long long)m->cover_gen);
	printf("\n");
	return (0);
}

/* A failed check (rv != 0) printed and counted; returns rv. */
static int
bad(struct admin *ad, int rv, const struct sm_err *err)
{
	if (rv != 0) {
		printf("BAD %s\n", err->msg);
		ad->problems++;
	}
	return (rv);
}

static int
verify_block(void *arg, const char *tenant, const struct ing_block_meta *m)
{
	struct admin *ad = arg;
	const struct ing_set *idx = NULL;
	const struct ing_block_tree *tree = NULL;
	struct ing_cache_ent *ie = NULL, *te = NULL;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;

	sm_err_clear(&err);
	(void)bad(ad, ing_store_block_tree(ad->store, tenant, m, &tree, &te,
	    &err), &err);
	sm_err_clear(&err);
	if (bad(ad, ing_store_block_index(ad->store, tenant, m, &idx, &ie,
	    &err), &err) == 0) {
		for (uint32_t s = 0; s < idx->nseries; s++) {
			struct ing_bucket *b;

			sm_arena_reset(a);
			sm_err_clear(&err);
			if (ing_store_block_data(ad->store, tenant, m, s,
			    idx->series[s], a, &b, &err) != 0) {
				printf("BAD %s (series %u)\n", err.msg, s);
				ad->problems++;
			}
		}
	}
	/* The span and individual-profile parts, when the meta has them. */
	{
		struct ing_span_rec *sp = NULL;
		struct ing_prof_rec *pr = NULL;
		uint32_t n;

		sm_err_clear(&err);
		(void)bad(ad, ing_store_block_spans(ad->store, tenant, m, &sp,
		    &n, &err), &err);
		sm_free(sp);
		sm_err_clear(&err);
		(void)bad(ad, ing_store_block_profiles(ad->store, tenant, m,
		    &pr, &n, &err), &err);
		sm_free(pr);
	}
	if (te != NULL)
		ing_store_release(ad->store, te);
	if (ie != NULL)
		ing_store_release(ad->store, ie);
	sm_arena_destroy(a);
	printf("checked tenant=%s block=%llu\n", tenant,
	    (unsigned long long)m->gen);
	return (0);
}

static int
count_record(void *arg, const char *tenant, uint64_t gen, uint64_t seq,
    const uint8_t *rec, size_t n)
{
	(void)arg;
	(void)tenant;
	(void)gen;
	(void)seq;
	(void)rec;
	(void)n;
	return (0);
}

/* Metas the block scan skips are found by walking the index keys. */
static int
verify_metas(struct admin *ad)
{
	struct sm_kv_iter *it = sm_kv_iter_create(ing_store_kv(ad->store),
	    SM_KV_INDEX);
	struct sm_err err;
	int bad = 0;

	if (it == NULL)
		return (-1);
	for (sm_kv_iter_seek_first(it); sm_kv_iter_valid(it);
	    sm_kv_iter_next(it)) {
		const uint8_t *k, *v;
		size_t kn, vn;
		struct ing_block_meta m;

		k = sm_kv_iter_key(it, &kn);
		v = sm_kv_iter_value(it, &vn);
		/* System keys (an empty tenant, store.h) are not blocks: a
		 * tenant floor's key ends with the tenant, maybe in 'M'. */
		if (kn < 3 || (k[0] == 0 && k[1] == 0) || k[kn - 1] != 'M')
			continue;
		sm_err_clear(&err);
		if (ing_block_meta_decode(v, vn, &m, &err) != 0) {
			printf("BAD block meta (key of %zu bytes): %s\n", kn,
			    err.msg);
			bad++;
		}
	}
	if (sm_kv_iter_status(it, &err) != 0) {
		printf("BAD index scan: %s\n", err.msg);
		bad++;
	}
	sm_kv_iter_destroy(it);
	return (bad);
}

static int
cmd_verify(struct admin *ad)
{
	uint64_t mg, ms, corrupt = 0;
	struct sm_err err;

	sm_err_clear(&err);
	if (ing_store_blocks_scan(ad->store, verify_block, ad, &err) != 0) {
		printf("BAD block scan: %s\n", err.msg);
		ad->problems++;
	}
	ad->problems += verify_metas(ad);
	/* Read the log as it is: a torn tail stays for the server to cut. */
	ing_store_log_inspect(ad->store);
	if (ing_store_log_replay(ad->store, NULL, count_record, NULL, &mg, &ms,
	    &corrupt, &err) != 0) {
		printf("BAD head log: %s\n", err.msg);
		ad->problems++;
	}
	if (corrupt != 0) {
		printf("BAD head log: %llu corrupt records\n",
		    (unsigned long long)corrupt);
		ad->problems++;
	}
	printf("%s: %d problem(s)\n", ad->problems ? "DAMAGED" : "OK",
	    ad->problems);
	return (ad->problems ? 1 : 0);
}

static int
cmd_corrupt(struct admin *ad)
{
	static const struct {
		const char *name;
		char kind;
	} parts[] = {
		{ "meta", 'M' }, { "index", 'I' }, { "symbols", 'S' },
		{ "tree", 'T' }, { "data", 'D' }, { "spans", 'P' },
		{ "profiles", 'X' },
	};
	struct sm_kv *kv = ing_store_kv(ad->store);
	struct sm_buf v = SM_BUF_INIT;
	struct sm_key k;
	struct sm_err err;
	enum sm_kv_cf cf;
	char kind = 0;
	int rv;

	for (size_t i = 0; i < SM_ARRAY_LEN(parts); i++) {
		if (strcmp(ad->part, parts[i].name) == 0)
			kind = parts[i].kind;
	}
	if (kind == 0 || ad->tenant[0] == '\0' || ad->block <= 0) {
		fprintf(stderr, "smolder-admin corrupt: need -tenant, -block "
		    "and -part=meta|index|symbols|tree|data|spans|profiles\n");
		return (2);
	}
	cf = kind == 'M' || kind == 'I' ? SM_KV_INDEX : SM_KV_BLOCKS;
	ing_key_part(&k, ad->tenant, (uint64_t)ad->block, kind,
	    (uint32_t)ad->series);
	if ((rv = sm_kv_get(kv, cf, k.b, k.n, &v, &err)) != 0) {
		fprintf(stderr, "smolder-admin corrupt: %s\n",
		    rv == SM_ENOTFOUND ? "no such part" : err.msg);
		sm_buf_fini(&v);
		return (1);
	}
	if (strcmp(ad->mode, "truncate") == 0) {
		v.len /= 2;
	} else if (v.len > ING_BLOCK_HDR) {
		size_t at = ING_BLOCK_HDR + (v.len - ING_BLOCK_HDR) / 2;

		v.b[at] ^= 0x5a;
	} else {
		v.b[v.len / 2] ^= 0x5a;
	}
	if ((rv = sm_kv_put(kv, cf, k.b, k.n, v.b, v.len, &err)) != 0) {
		fprintf(stderr, "smolder-admin corrupt: %s\n", err.msg);
		sm_buf_fini(&v);
		return (1);
	}
	printf("damaged tenant=%s block=%lld part=%s mode=%s\n", ad->tenant,
	    (long long)ad->block, ad->part, ad->mode);
	sm_buf_fini(&v);
	return (0);
}

static int
cmd_hash_key(struct admin *ad)
{
	char key[SM_AUTH_KEY_MAX + 2], hash[SM_AUTH_HASH_TEXT];
	unsigned char rnd[24];
	struct sm_err err;
	size_t n;

	if (ad->generate) {
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
			fprintf(stderr, "smolder-admin hash-key: getrandom "
			    "failed\n");
			return (1);
		}
		n = (size_t)snprintf(key, sizeof(key), "smk_");
		for (size_t i = 0; i < sizeof(rnd); i++)
			n += (size_t)snprintf(key + n, sizeof(key) - n,
			    "%02x", rnd[i]);
	} else {
		if (fgets(key, sizeof(key), stdin) == NULL) {
			fprintf(stderr, "smolder-admin hash-key: no key on "
			    "stdin\n");
			return (2);
		}
		n = strlen(key);
		while (n > 0 && (key[n - 1] == '\n' || key[n - 1] == '\r'))
			key[--n] = '\0';
		if (n < SM_AUTH_KEY_MIN) {
			fprintf(stderr, "smolder-admin hash-key: keys must be "
			    "at least %d bytes (use -generate)\n",
			    SM_AUTH_KEY_MIN);
			return (2);
		}
	}
	if (sm_auth_hash_key(key, n, hash, &err) != 0) {
		fprintf(stderr, "smolder-admin hash-key: %s\n", err.msg);
		return (2);
	}
	if (ad->generate)
		printf("%s\n", key);
	printf("%s\n", hash);
	return (0);
}

/* --- bucket ---------------------------------------------------------------- */

static int
bucket_ls_one(void *arg, const struct sm_bucket_obj *o)
{
	(void)arg;
	printf("%12llu %s\n", (unsigned long long)o->size, o->key);
	return (0);
}

static int
bucket_get(struct admin *ad)
{
	struct sm_buf out = SM_BUF_INIT;
	struct sm_err err;
	uint64_t len = ad->length > 0 ? (uint64_t)ad->length : SM_BUCKET_WHOLE;
	int rv;

	if (ad->offset < 0 || ad->length < 0) {
		fprintf(stderr, "smolder-admin: -offset and -length must be "
		    ">= 0\n");
		return (2);
	}
	rv = sm_bucket_get(ad->bucket, ad->key, (uint64_t)ad->offset, len,
	    &out, &err);
	if (rv == 0 && fwrite(out.b, 1, out.len, stdout) != out.len)
		rv = SM_EIO;
	if (rv != 0)
		fprintf(stderr, "smolder-admin: %s\n", err.msg);
	sm_buf_fini(&out);
	return (rv == 0 ? 0 : 1);
}

/* Keys of one listing, for verify (objects and metas apart). */
struct bucket_keys {
	char **v;
	size_t n, cap;
};

static int
keys_add(void *arg, const struct sm_bucket_obj *o)
{
	struct bucket_keys *k = arg;
	size_t l = strlen(o->key);

	if (!(l > 6 && strcmp(o->key + l - 6, "/block") == 0) &&
	    !(l > 10 && strcmp(o->key + l - 10, "/meta.json") == 0))
		return (0);
	if (SM_GROW(k->v, k->cap, k->n + 1, 64) != 0 ||
	    (k->v[k->n] = sm_strdup(o->key)) == NULL)
		return (SM_ENOMEM);
	k->n++;
	return (0);
}

/* Verify one block given its meta.json key; prints one line. */
static void
bucket_verify_block(struct admin *ad, const char *meta_key)
{
	char obj_key[SM_BUCKET_KEY_MAX + 1];
	struct sm_buf mj = SM_BUF_INIT, obj = SM_BUF_INIT;
	struct sm_err err;
	struct sm_json *j = NULL;
	uint32_t nparts = 0;

	snprintf(obj_key, sizeof(obj_key), "%.*s/block",
	    (int)(strlen(meta_key) - 10), meta_key);
	if (sm_bucket_get(ad->bucket, meta_key, 0, SM_BUCKET_WHOLE, &mj,
	    &err) != 0)
		goto bad;
	if (sm_json_parse(mj.b, mj.len, 0, &j, &err) != 0) {
		err.code = SM_ECORRUPT;
		(void)sm_err_prefix(&err, "meta.json");
		goto bad;
	}
	if (sm_json_int(sm_json_get(j, "version")) != ING_SHIP_VERSION) {
		sm_err_set(&err, SM_ECORRUPT, "meta.json: unknown version");
		goto bad;
	}
	if (sm_bucket_get(ad->bucket, obj_key, 0, SM_BUCKET_WHOLE, &obj,
	    &err) != 0)
		goto bad;
	if (ing_ship_object_check((const uint8_t *)obj.b, obj.len,
	    sm_json_int(sm_json_get(j, "block_bytes")),
	    sm_json_str(sm_json_get(j, "block_xxh3")), &nparts,
	    &err) != 0)
		goto bad;
	printf("ok      %s tenant=%s gen=%lld min_t=%lld max_t=%lld "
	    "tier_ms=%lld series=%lld parts=%u bytes=%zu\n", obj_key,
	    sm_json_str(sm_json_get(j, "tenant")),
	    (long long)sm_json_int(sm_json_get(sm_json_get(j, "source"),
	    "gen")),
	    (long long)sm_json_int(sm_json_get(j, "min_t")),
	    (long long)sm_json_int(sm_json_get(j, "max_t")),
	    (long long)sm_json_int(sm_json_get(j, "tier_ms")),
	    (long long)sm_json_int(sm_json_get(j, "nseries")),
	    nparts, obj.len);
	goto out;
bad:
	printf("DAMAGED %s: %s\n", obj_key, err.msg);
	ad->problems++;
out:
	sm_json_free(j);
	sm_buf_fini(&mj);
	sm_buf_fini(&obj);
}

static int
bucket_verify(struct admin *ad)
{
	struct bucket_keys k = { 0 };
	struct sm_err err;
	uint32_t blocks = 0;
	int rv;

	if ((rv = sm_bucket_list(ad->bucket, ad->prefix, keys_add, &k,
	    &err)) != 0) {
		fprintf(stderr, "smolder-admin: %s\n", err.msg);
		goto out;
	}
	/* Sorted: ".../block" comes right before ".../meta.json". */
	for (size_t i = 0; i < k.n; i++) {
		size_t l = strlen(k.v[i]);

		if (strcmp(k.v[i] + l - 6, "/block") == 0) {
			if (i + 1 < k.n && strncmp(k.v[i], k.v[i + 1], l - 5) ==
			    0 && strcmp(k.v[i + 1] + l - 5, "meta.json") == 0)
				continue;
			printf("PARTIAL %s: no meta.json (an upload that did "
			    "not finish; never read)\n", k.v[i]);
			ad->problems++;
			continue;
		}
		bucket_verify_block(ad, k.v[i]);
		blocks++;
	}
	printf("%u blocks, %d problems\n", blocks, ad->problems);
out:
	for (size_t i = 0; i < k.n; i++)
		sm_free(k.v[i]);
	sm_free(k.v);
	return (rv != 0 || ad->problems > 0 ? 1 : 0);
}

/* Every object under the prefix, with its size. */
struct bucket_objs {
	char **key;
	uint64_t *size;
	size_t n, cap, scap;
};

static int
objs_add(void *arg, const struct sm_bucket_obj *o)
{
	struct bucket_objs *b = arg;

	if (SM_GROW(b->key, b->cap, b->n + 1, 64) != 0 ||
	    SM_GROW(b->size, b->scap, b->n + 1, 64) != 0 ||
	    (b->key[b->n] = sm_strdup(o->key)) == NULL)
		return (SM_ENOMEM);
	b->size[b->n++] = o->size;
	return (0);
}

/* Per KEK id ("" = plain): objects and stored bytes. */
struct kek_count {
	char id[SM_BUCKET_SEAL_ID_MAX + 1];
	uint64_t objects, bytes;
};

static int
bucket_keys(struct admin *ad)
{
	struct bucket_objs o = { 0 };
	struct kek_count *c = NULL;
	size_t nc = 0, ccap = 0;
	struct sm_err err;
	int rv, rc = 0;

	if ((rv = sm_bucket_list(ad->bucket, ad->prefix, objs_add, &o,
	    &err)) != 0) {
		fprintf(stderr, "smolder-admin: %s\n", err.msg);
		rc = 1;
		goto out;
	}
	for (size_t i = 0; i < o.n; i++) {
		char id[SM_BUCKET_SEAL_ID_MAX + 1];
		size_t k;

		if ((rv = sm_bucket_sealed_by(ad->bucket, o.key[i], id,
		    &err)) != 0) {
			if (rv == SM_ENOTFOUND)
				continue;       /* deleted since the listing */
			fprintf(stderr, "smolder-admin: %s\n", err.msg);
			rc = 1;
			continue;
		}
		printf("%-16s %12llu %s\n", id[0] != '\0' ? id : "plain",
		    (unsigned long long)o.size[i], o.key[i]);
		for (k = 0; k < nc && strcmp(c[k].id, id) != 0; k++)
			;
		if (k == nc) {
			if (SM_GROW(c, ccap, nc + 1, 8) != 0) {
				fprintf(stderr, "smolder-admin: out of memory\n");
				rc = 1;
				goto out;
			}
			memset(&c[nc], 0, sizeof(c[nc]));
			memcpy(c[nc].id, id, sizeof(id));
			nc++;
		}
		c[k].objects++;
		c[k].bytes += o.size[i];
	}
	for (size_t k = 0; k < nc; k++)
		printf("total %-16s %llu objects, %llu bytes\n",
		    c[k].id[0] != '\0' ? c[k].id : "plain",
		    (unsigned long long)c[k].objects,
		    (unsigned long long)c[k].bytes);
out:
	for (size_t i = 0; i < o.n; i++)
		sm_free(o.key[i]);
	sm_free(o.key);
	sm_free(o.size);
	sm_free(c);
	return (rc);
}

static int
cmd_bucket(struct admin *ad, const char *sub)
{
	struct sm_err err;
	int rc = 2;

	if (!sm_bucket_cfg_enabled(&ad->bcfg)) {
		fprintf(stderr, "smolder-admin: bucket: -storage.backend is "
		    "not set\n");
		return (2);
	}
	if (sm_bucket_open(&ad->bcfg, ad->data_dir, &ad->bucket, &err) != 0) {
		fprintf(stderr, "smolder-admin: %s\n", err.msg);
		return (1);
	}
	if (strcmp(sub, "ls") == 0) {
		rc = sm_bucket_list(ad->bucket, ad->prefix, bucket_ls_one, NULL,
		    &err) == 0 ? 0 : 1;
		if (rc != 0)
			fprintf(stderr, "smolder-admin: %s\n", err.msg);
	} else if (strcmp(sub, "get") == 0) {
		rc = bucket_get(ad);
	} else if (strcmp(sub, "verify") == 0) {
		rc = bucket_verify(ad);
	} else if (strcmp(sub, "keys") == 0) {
		rc = bucket_keys(ad);
	} else {
		fprintf(stderr, "smolder-admin: bucket: unknown command %s "
		    "(ls, get, verify, keys)\n", sub);
	}
	sm_bucket_destroy(ad->bucket);
	return (rc);
}

#define SM_FLAG_STRUCT struct admin
static const struct sm_flag admin_flag_tab[] = {
	SM_FLAG_STR("data.dir", data_dir, "./data",
	    "The server's -data.dir."),
	SM_FLAG_STR("tenant", tenant, "",
	    "corrupt: tenant"),
	SM_FLAG_I64("block", SM_FLAG_INT, block, "0",
	    "corrupt: block id"),
	SM_FLAG_STR("part", part, "",
	    "corrupt: meta|index|symbols|tree|data|spans|profiles"),
	SM_FLAG_I64("series", SM_FLAG_INT, series, "0",
	    "corrupt: series index of a data part"),
	SM_FLAG_STR("mode", mode, "flip",
	    "corrupt: flip|truncate"),
	SM_FLAG_SWITCH("compact", compact, "false",
	    "disk: flush and compact first"),
	SM_FLAG_SWITCH("generate", generate, "false",
	    "hash-key: generate a new random key"),
	SM_FLAG_STR("prefix", prefix, "",
	    "bucket ls, verify, keys: key prefix"),
	SM_FLAG_STR("key", key, "",
	    "bucket get: key"),
	SM_FLAG_I64("offset", SM_FLAG_INT, offset, "0",
	    "bucket get: first byte"),
	SM_FLAG_I64("length", SM_FLAG_INT, length, "0",
	    "bucket get: bytes (0: to the end)"),
};
#undef SM_FLAG_STRUCT

int
main(int argc, char **argv)
{
	struct admin ad;
	struct sm_flags fs;
	struct sm_err err;
	const char *cmd;
	bool help;
	int rc = 2;

	memset(&ad, 0, sizeof(ad));
	sm_flags_init(&fs);
	sm_log_set_level(SM_LOG_WARN);
	if (argc < 2 || argv[1][0] == '-' || (strcmp(argv[1], "bucket") == 0 &&
	    (argc < 3 || argv[2][0] == '-'))) {
		fprintf(stderr, "usage: smolder-admin blocks|verify|corrupt|disk|"
		    "hash-key [flags]\n"
		    "       smolder-admin bucket ls|get|verify|keys [flags]\n");
		(void)sm_flags_add(&fs, admin_flag_tab,
		    SM_ARRAY_LEN(admin_flag_tab), &ad, &err);
		(void)sm_bucket_flags_add(&fs, &ad.bcfg, &err);
		sm_flags_usage(&fs, stderr);
		sm_flags_fini(&fs);
		return (2);
	}
	cmd = argv[1];
	/* "bucket SUB": the flags start after SUB */
	if (sm_flags_add(&fs, admin_flag_tab, SM_ARRAY_LEN(admin_flag_tab),
	    &ad, &err) != 0 || sm_bucket_flags_add(&fs, &ad.bcfg, &err) != 0 ||
	    sm_flags_parse(&fs, argc - (strcmp(cmd, "bucket") == 0 ? 2 : 1),
	    argv + (strcmp(cmd, "bucket") == 0 ? 2 : 1), &help, &err) != 0) {
		fprintf(stderr, "smolder-admin: %s\n", err.msg);
		goto out;
	}
	if (strcmp(cmd, "hash-key") == 0) {
		rc = cmd_hash_key(&ad);
		goto out;
	}
	if (strcmp(cmd, "bucket") == 0) {
		rc = cmd_bucket(&ad, argv[2]);
		goto out;
	}
	if (open_store(&ad) != 0) {
		rc = 1;
		goto out;
	}
	if (strcmp(cmd, "blocks") == 0) {
		rc = ing_store_blocks_scan(ad.store, print_block, &ad, &err) ==
		    0 ? 0 : 1;
	} else if (strcmp(cmd, "verify") == 0) {
		rc = cmd_verify(&ad);
	} else if (strcmp(cmd, "corrupt") == 0) {
		rc = cmd_corrupt(&ad);
	} else if (strcmp(cmd, "disk") == 0) {
		if (ad.compact && ing_store_compact(ad.store, &err) != 0) {
			fprintf(stderr, "smolder-admin: %s\n", err.msg);
			rc = 1;
		} else {
			uint64_t sst = 0, v;

			for (int cf = 0; cf < SM_KV_NCF; cf++) {
				if (sm_kv_property(ing_store_kv(ad.store),
				    (enum sm_kv_cf)cf,
				    "rocksdb.total-sst-files-size", &v) == 0)
					sst += v;
			}
			printf("disk_bytes=%llu sst_bytes=%llu\n",
			    (unsigned long long)ing_store_disk_bytes(ad.store),
			    (unsigned long long)sst);
			rc = 0;
		}
	} else {
		fprintf(stderr, "smolder-admin: unknown command %s\n", cmd);
	}
	ing_store_close(ad.store);
out:
	sm_flags_fini(&fs);
	return (rc);
}
