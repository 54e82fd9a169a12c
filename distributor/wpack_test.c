/*
 * wpack_test.c -- the hand packer of a write's Request gives protobuf-c's
 * bytes: random writes with every field set, edge values (zero, negative,
 * large, empty strings, NULL strings, empty messages), a Request that is
 * not a write, messages carrying unknown fields, allocation failures; and
 * a guard that fails when one of the packed messages gains a field.
 */
#include "sm_test.h"

#include <stdlib.h>

#include "common/arena.h"
#include "distributor/wpack.h"
#include "smolder/v1/rpc.pb-c.h"

/* Fields the packer writes, per message: a new field in the proto makes
 * this fail until distributor/wpack.c writes it too. */
static void
test_schema_guard(void)
{
	SM_CHECK_EQ(smolder__v1__write_request__descriptor.n_fields, 6);
	SM_CHECK_EQ(smolder__v1__stack_tree__descriptor.n_fields, 3);
	SM_CHECK_EQ(smolder__v1__series_write__descriptor.n_fields, 8);
	SM_CHECK_EQ(smolder__v1__series_meta__descriptor.n_fields, 4);
	SM_CHECK_EQ(smolder__v1__replica__descriptor.n_fields, 3);
	SM_CHECK_EQ(types__v1__label_pair__descriptor.n_fields, 2);
	/* Request: the oneof's methods and deadline_unix_ms; only the write
	 * and the deadline are packed by hand. */
	SM_CHECK(protobuf_c_message_descriptor_get_field(
	    &smolder__v1__request__descriptor, 30) != NULL);
}

/* splitmix64: deterministic, seeded per case. */
static uint64_t rs;

static uint64_t
rnd(void)
{
	uint64_t z = (rs += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/* A value of a random width: 0, small, up to 64 bits, sometimes negative
 * as int64. */
static uint64_t
rval(void)
{
	switch (rnd() % 5) {
	case 0: return (0);
	case 1: return (rnd() % 128);
	case 2: return (rnd() % 20000);
	case 3: return (rnd() >> (rnd() % 64));
	default: return ((uint64_t)-(int64_t)(rnd() % 100000));
	}
}

static char *
rstr(struct sm_arena *a)
{
	static const char *const pool[] = { "", "a", "main.main",
	    "runtime.goexit", "pkg/path.(*T).Method-fm", "\xe2\x9c\x93 ok" };
	uint32_t k = (uint32_t)(rnd() % 8);
	char *s;

	if (k == 7)
		return (NULL);
	if (k == 6) {   /* longer than 127 bytes: a two-byte length */
		size_t n = 128 + rnd() % 300;

		s = sm_arena_alloc(a, n + 1);
		for (size_t i = 0; i < n; i++)
			s[i] = (char)('a' + i % 26);
		s[n] = '\0';
		return (s);
	}
	return ((char *)pool[k]);
}

static uint32_t *
ru32s(struct sm_arena *a, size_t n)
{
	uint32_t *v = sm_arena_alloc(a, SM_MAX(n, 1) * sizeof(*v));

	for (size_t i = 0; i < n; i++)
		v[i] = (uint32_t)rval();
	return (v);
}

static int64_t *
ri64s(struct sm_arena *a, size_t n)
{
	int64_t *v = sm_arena_alloc(a, SM_MAX(n, 1) * sizeof(*v));

	for (size_t i = 0; i < n; i++)
		v[i] = (int64_t)rval();
	return (v);
}

static size_t
rcount(void)
{
	return (rnd() % 4 == 0 ? 0 : rnd() % 40);
}

static Smolder__V1__Request *
rwrite(struct sm_arena *a)
{
	Smolder__V1__Request *env = sm_arena_alloc(a, sizeof(*env));
	Smolder__V1__WriteRequest *rq = sm_arena_alloc(a, sizeof(*rq));
	Smolder__V1__SeriesMeta *meta = NULL;

	smolder__v1__request__init(env);
	smolder__v1__write_request__init(rq);
	env->method_case = SMOLDER__V1__REQUEST__METHOD_WRITE;
	env->write = rq;
	env->deadline_unix_ms = (int64_t)rval();
	rq->tenant = rstr(a);
	if (rnd() % 4 != 0) {
		rq->profile_id.len = rnd() % 2 ? 16 : rnd() % 3;
		rq->profile_id.data = sm_arena_alloc(a, 16);
		for (int i = 0; i < 16; i++)
			rq->profile_id.data[i] = (uint8_t)rnd();
	}
	if (rnd() % 5 != 0) {
		Smolder__V1__StackTree *t = sm_arena_alloc(a, sizeof(*t));

		smolder__v1__stack_tree__init(t);
		t->n_strings = rcount();
		t->strings = sm_arena_alloc(a, SM_MAX(t->n_strings, 1) *
		    sizeof(char *));
		/* protobuf-c takes strlen of a repeated string's
		 * elements: never NULL there. */
		for (size_t i = 0; i < t->n_strings; i++)
			if ((t->strings[i] = rstr(a)) == NULL)
				t->strings[i] = (char *)"";
		t->n_parent = rcount();
		t->parent = ru32s(a, t->n_parent);
		t->n_name = rcount();
		t->name = ru32s(a, t->n_name);
		rq->tree = t;
	}
	if (rnd() % 3 != 0) {
		meta = sm_arena_alloc(a, sizeof(*meta));
		smolder__v1__series_meta__init(meta);
		meta->spy_name = rstr(a);
		meta->sample_rate = (uint32_t)rval();
		meta->units = rstr(a);
		meta->aggregation = rstr(a);
	}
	rq->n_series = rnd() % 6;
	rq->series = sm_arena_alloc(a, SM_MAX(rq->n_series, 1) *
	    sizeof(*rq->series));
	for (size_t k = 0; k < rq->n_series; k++) {
		Smolder__V1__SeriesWrite *w = sm_arena_alloc(a, sizeof(*w));

		smolder__v1__series_write__init(w);
		w->n_labels = rnd() % 5;
		w->labels = sm_arena_alloc(a, SM_MAX(w->n_labels, 1) *
		    sizeof(*w->labels));
		for (size_t i = 0; i < w->n_labels; i++) {
			Types__V1__LabelPair *l = sm_arena_alloc(a,
			    sizeof(*l));

			types__v1__label_pair__init(l);
			l->name = rstr(a);
			l->value = rstr(a);
			w->labels[i] = l;
		}
		w->time_ms = (int64_t)rval();
		w->n_node = rcount();
		w->node = ru32s(a, w->n_node);
		w->n_value = rcount();
		w->value = ri64s(a, w->n_value);
		w->meta = rnd() % 4 == 0 ? NULL : meta;
		w->n_span_id = rcount() % 5;
		w->span_id = (uint64_t *)ri64s(a, w->n_span_id);
		w->n_span_node = rcount() % 5;
		w->span_node = ru32s(a, w->n_span_node);
		w->n_span_value = rcount() % 5;
		w->span_value = ri64s(a, w->n_span_value);
		rq->series[k] = w;
	}
	rq->max_series = (uint32_t)rval();
	rq->n_replicas = rnd() % 4;
	rq->replicas = sm_arena_alloc(a, SM_MAX(rq->n_replicas, 1) *
	    sizeof(*rq->replicas));
	for (size_t k = 0; k < rq->n_replicas; k++) {
		Smolder__V1__Replica *r = sm_arena_alloc(a, sizeof(*r));

		smolder__v1__replica__init(r);
		r->id = rstr(a);
		r->zone = rstr(a);
		r->incarnation = rstr(a);
		rq->replicas[k] = r;
	}
	return (env);
}

/* Pack with both, after a prefix already in the buffer (the packer
 * appends), and compare. */
static int
same_bytes(const Smolder__V1__Request *env)
{
	size_t sz = protobuf_c_message_get_packed_size(&env->base);
	uint8_t *want = malloc(SM_MAX(sz, 1));
	struct sm_buf out = SM_BUF_INIT;
	int ok;

	SM_REQUIRE(want != NULL);
	SM_REQUIRE(protobuf_c_message_pack(&env->base, want) == sz);
	sm_buf_append(&out, "pre", 3);
	SM_REQUIRE(out.err == 0);
	SM_REQUIRE(dist_wpack_request(env, &out) == 0);
	ok = out.len == 3 + sz && memcmp(out.b, "pre", 3) == 0 &&
	    memcmp(out.b + 3, want, sz) == 0 && out.b[out.len] == '\0';
	sm_buf_fini(&out);
	free(want);
	return (ok);
}

static void
test_random_writes(void)
{
	int bad = 0, unpacked = 0;

	for (uint64_t seed = 1; seed <= 3000; seed++) {
		struct sm_arena *a = sm_arena_create(0);
		Smolder__V1__Request *env, *back;
		struct sm_buf out = SM_BUF_INIT;

		rs = seed;
		SM_REQUIRE(a != NULL);
		env = rwrite(a);
		if (!same_bytes(env)) {
			if (bad++ == 0)
				fprintf(stderr, "  first mismatch: seed %llu\n",
				    (unsigned long long)seed);
		}
		/* And it reads back as the message it was. */
		SM_REQUIRE(dist_wpack_request(env, &out) == 0);
		back = smolder__v1__request__unpack(NULL, out.len,
		    (const uint8_t *)out.b);
		if (back != NULL && back->write != NULL &&
		    back->write->n_series == env->write->n_series &&
		    back->deadline_unix_ms == env->deadline_unix_ms)
			unpacked++;
		smolder__v1__request__free_unpacked(back, NULL);
		sm_buf_fini(&out);
		sm_arena_destroy(a);
	}
	SM_CHECK_EQ(bad, 0);
	SM_CHECK_EQ(unpacked, 3000);
}

/* Messages the packer hands to protobuf-c: not a write, and a write that
 * was unpacked with fields this build does not know. */
static void
test_fallbacks(void)
{
	Smolder__V1__Request env = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__HealthRequest hr = SMOLDER__V1__HEALTH_REQUEST__INIT;
	Smolder__V1__WriteRequest rq = SMOLDER__V1__WRITE_REQUEST__INIT;
	/* WriteRequest field 99 (varint 7): unknown to this build. */
	static const uint8_t wire[] = { 0x0a, 0x06, 0x0a, 0x01, 't',
	    0x98, 0x06, 0x07 };
	Smolder__V1__Request *u;

	env.method_case = SMOLDER__V1__REQUEST__METHOD_HEALTH;
	env.health = &hr;
	env.deadline_unix_ms = 5;
	SM_CHECK(same_bytes(&env));

	env.method_case = SMOLDER__V1__REQUEST__METHOD_WRITE;
	env.write = &rq;
	SM_CHECK(same_bytes(&env));      /* an empty write */

	u = smolder__v1__request__unpack(NULL, sizeof(wire), wire);
	SM_REQUIRE(u != NULL && u->write != NULL);
	SM_CHECK_EQ(u->write->base.n_unknown_fields, 1);
	SM_CHECK(same_bytes(u));         /* the unknown field kept */
	smolder__v1__request__free_unpacked(u, NULL);
}

/* One pack into a fresh buffer holding "x" (a buffer's error is sticky);
 * on failure the buffer still holds just "x". */
static int
pack_fresh(const Smolder__V1__Request *env)
{
	struct sm_buf out = SM_BUF_INIT;
	int rv;

	sm_buf_append(&out, "x", 1);
	if (out.err != 0) {     /* the fault hit the buffer's own room */
		sm_buf_fini(&out);
		return (SM_ENOMEM);
	}
	rv = dist_wpack_request(env, &out);
	if (rv != 0)
		SM_CHECK(out.len == 1 && out.b[0] == 'x');
	sm_buf_fini(&out);
	return (rv);
}

static void
test_alloc_failures(void)
{
	struct sm_arena *a = sm_arena_create(0);
	Smolder__V1__Request *env;
	int failures = 0;

	rs = 7;
	SM_REQUIRE(a != NULL);
	do
		env = rwrite(a);
	while (env->write->n_series == 0 || env->write->tree == NULL);
	SM_RETRY_FAULTS(pack_fresh(env), failures, (void)0);
	SM_CHECK(failures >= 2);
	SM_CHECK(same_bytes(env));
	sm_arena_destroy(a);
}

SM_TEST_MAIN(
	{ "the packed messages' fields are all known", test_schema_guard },
	{ "random writes: protobuf-c's bytes", test_random_writes },
	{ "not a write, or unknown fields: protobuf-c", test_fallbacks },
	{ "allocation failures", test_alloc_failures },
)
