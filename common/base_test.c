/*
 * base_test.c -- the small base modules: array growth (sm_grow), arena,
 * buf, labels, gz, flags, module, tenant.
 */
#include "sm_test.h"
#include "sm_test_errwire.h"

#include <errno.h>


#include "common/arena.h"
#include "common/buf.h"
#include "common/flags.h"
#include "common/gz.h"
#include "common/labels.h"
#include "common/module.h"
#include "common/log.h"
#include "common/tenant.h"

/* --- sm_grow -------------------------------------------------------------- */

static void
test_grow_policy(void)
{
	uint64_t *v = NULL;
	size_t cap = 0;
	uint32_t *w = NULL, wcap = 0;
	char *c = NULL;
	size_t ccap = 0;

	/* need <= cap: nothing happens, not even an allocation. */
	SM_CHECK_EQ(SM_GROW(v, cap, 0, 16), 0);
	SM_CHECK(v == NULL && cap == 0);
	/* Appending one at a time: mincap first, then doubling. */
	for (size_t n = 0; n < 1000; n++) {
		size_t old = cap;

		SM_REQUIRE(SM_GROW(v, cap, n + 1, 16) == 0);
		if (n == 0)
			SM_CHECK_EQ(cap, 16);
		else if (n == old)
			SM_CHECK_EQ(cap, 2 * old);
		else
			SM_CHECK_EQ(cap, old);
		v[n] = n;
	}
	SM_CHECK_EQ(cap, 1024);
	for (size_t n = 0; n < 1000; n++)
		SM_CHECK_EQ(v[n], n);
	/* A jump: doubling until need is reached. */
	SM_REQUIRE(SM_GROW(v, cap, 5000, 16) == 0);
	SM_CHECK_EQ(cap, 8192);
	SM_CHECK_EQ(v[999], 999);
	sm_free(v);

	/* uint32_t capacities pick sm_grow32; mincap 0 starts at 1. */
	SM_REQUIRE(SM_GROW(w, wcap, 3, 0) == 0);
	SM_CHECK_EQ(wcap, 4);
	SM_REQUIRE(SM_GROW(w, wcap, 4, 0) == 0);
	SM_CHECK_EQ(wcap, 4);
	SM_REQUIRE(SM_GROW(w, wcap, 5, 8) == 0);
	SM_CHECK_EQ(wcap, 8);
	w[7] = 7;
	sm_free(w);

	/* mincap above need is honoured. */
	SM_REQUIRE(SM_GROW(c, ccap, 1, 64) == 0);
	SM_CHECK_EQ(ccap, 64);
	sm_free(c);
}

static void
test_grow_failure(void)
{
	uint64_t *v = NULL, *keep;
	size_t cap = 0;
	uint32_t *w = NULL, wcap;

	SM_REQUIRE(SM_GROW(v, cap, 8, 8) == 0);
	for (int i = 0; i < 8; i++)
		v[i] = (uint64_t)i;
	keep = v;
	/* The realloc fails (fault injection): array and cap untouched. */
	sm_fault_alloc_after(1);
	SM_CHECK_EQ(SM_GROW(v, cap, 9, 8), SM_ENOMEM);
	sm_fault_alloc_after(0);
	SM_CHECK(v == keep);
	SM_CHECK_EQ(cap, 8);
	SM_CHECK_EQ(v[7], 7);
	/* The same call goes through once the fault is gone. */
	SM_REQUIRE(SM_GROW(v, cap, 9, 8) == 0);
	SM_CHECK_EQ(cap, 16);
	SM_CHECK_EQ(v[7], 7);
	/* Overflow of the size in bytes: refused without allocating. */
	keep = v;
	SM_CHECK_EQ(SM_GROW(v, cap, SIZE_MAX / 4, 8), SM_ENOMEM);
	SM_CHECK_EQ(SM_GROW(v, cap, SIZE_MAX, 8), SM_ENOMEM);
	SM_CHECK(v == keep && cap == 16);
	sm_free(v);

	/* uint32_t capacities: need beyond UINT32_MAX, or doubling past it. */
	wcap = 0;
	SM_CHECK_EQ(SM_GROW(w, wcap, (size_t)UINT32_MAX + 1, 8), SM_ENOMEM);
	SM_CHECK(w == NULL && wcap == 0);
	wcap = 1u << 31;   /* pretend; the array is never touched */
	SM_CHECK_EQ(SM_GROW(w, wcap, ((size_t)1 << 31) + 1, 8), SM_ENOMEM);
	SM_CHECK(w == NULL && wcap == 1u << 31);
	/* The failure of the first allocation leaves NULL and 0. */
	wcap = 0;
	sm_fault_alloc_after(1);
	SM_CHECK_EQ(SM_GROW(w, wcap, 1, 8), SM_ENOMEM);
	sm_fault_alloc_after(0);
	SM_CHECK(w == NULL && wcap == 0);
}

/* --- arena ---------------------------------------------------------------- */

static void
test_arena_alloc(void)
{
	struct sm_arena *a = sm_arena_create(0);
	void *p[1000];

	SM_REQUIRE(a != NULL);
	for (int i = 0; i < 1000; i++) {
		p[i] = sm_arena_alloc(a, (size_t)(i % 97) + 1);
		SM_REQUIRE(p[i] != NULL);
		SM_CHECK(((uintptr_t)p[i] & 15) == 0);
		memset(p[i], i & 0xff, (size_t)(i % 97) + 1);
	}
	for (int i = 0; i < 1000; i++)
		SM_CHECK(((unsigned char *)p[i])[0] == (i & 0xff));
	/* A big allocation gets its own block and small ones continue. */
	SM_CHECK(sm_arena_alloc(a, 10u << 20) != NULL);
	SM_CHECK(sm_arena_alloc(a, 8) != NULL);
	sm_arena_reset(a);
	SM_CHECK_EQ(sm_arena_used(a), 0);
	SM_CHECK(sm_arena_alloc(a, 100) != NULL);
	sm_arena_destroy(a);
}

static void
test_arena_budget(void)
{
	struct sm_arena *a = sm_arena_create(1000);

	SM_REQUIRE(a != NULL);
	SM_CHECK(sm_arena_alloc(a, 500) != NULL);
	SM_CHECK(sm_arena_alloc(a, 500) == NULL);   /* 512 + 512 > 1000 */
	SM_CHECK(sm_arena_alloc(a, 400) != NULL);
	SM_CHECK(sm_arena_alloc(a, SIZE_MAX) == NULL);
	SM_CHECK(sm_arena_calloc(a, SIZE_MAX / 2, 4) == NULL);
	SM_CHECK(sm_arena_used(a) <= 1000);
	sm_arena_destroy(a);
}

static void
test_arena_grow_strndup(void)
{
	struct sm_arena *a = sm_arena_create(0);
	int *v = NULL;
	char *s;

	SM_REQUIRE(a != NULL);
	for (size_t n = 0, cap = 0; n < 10000; n++) {
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 4;

			v = sm_arena_grow(a, v, cap, ncap, sizeof(*v));
			SM_REQUIRE(v != NULL);
			cap = ncap;
		}
		v[n] = (int)n;
	}
	for (int i = 0; i < 10000; i++)
		SM_CHECK_EQ(v[i], i);
	s = sm_arena_strndup(a, "hello world", 5);
	SM_CHECK_STR(s, "hello");
	sm_arena_destroy(a);
}

/* --- buf ------------------------------------------------------------------ */

static void
test_buf_basic(void)
{
	struct sm_buf b = SM_BUF_INIT;

	sm_buf_puts(&b, "a");
	sm_buf_printf(&b, "%d-%s", 42, "x");
	sm_buf_put_i64(&b, -9223372036854775807LL - 1);
	sm_buf_putc(&b, ' ');
	sm_buf_put_u64(&b, 18446744073709551615ULL);
	SM_CHECK_STR(b.b, "a42-x-9223372036854775808 18446744073709551615");
	SM_CHECK_EQ(sm_buf_error(&b), 0);
	sm_buf_truncate(&b, 1);
	SM_CHECK_STR(b.b, "a");
	sm_buf_fini(&b);

	b.limit = 8;
	sm_buf_puts(&b, "12345678");
	SM_CHECK_EQ(sm_buf_error(&b), 0);
	sm_buf_putc(&b, '9');
	SM_CHECK_EQ(sm_buf_error(&b), SM_ETOOBIG);
	sm_buf_puts(&b, "more");   /* sticky: no-op */
	SM_CHECK_EQ(b.len, 8);
	sm_buf_fini(&b);
}

static void
test_buf_json(void)
{
	struct sm_buf b = SM_BUF_INIT;
	/* Expected bytes are what Go's encoding/json writes. */
	static const struct {
		const char *in;
		size_t n;
		const char *out;
	} cases[] = {
		{ "plain", 5, "\"plain\"" },
		{ "q\"b\\", 4, "\"q\\\"b\\\\\"" },
		{ "\n\r\t", 3, "\"\\n\\r\\t\"" },
		{ "\x01\x1f", 2, "\"\\u0001\\u001f\"" },
		{ "<a>&", 4, "\"\\u003ca\\u003e\\u0026\"" },
		{ "caf\xc3\xa9", 5, "\"caf\xc3\xa9\"" },
		{ "x\xffy", 3, "\"x\\ufffdy\"" },
		{ "\xe2\x80\xa8\xe2\x80\xa9", 6, "\"\\u2028\\u2029\"" },
		{ "\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\"" },  /* surrogate */
		{ "nul\0x", 5, "\"nul\\u0000x\"" },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		sm_buf_reset(&b);
		sm_buf_json_str(&b, cases[i].in, cases[i].n);
		SM_CHECK_STR(b.b, cases[i].out);
	}
	sm_buf_fini(&b);
}

/* --- labels --------------------------------------------------------------- */

static void
test_labels_sort_fp(void)
{
	struct sm_label a[] = { { "service_name", "api" }, { "__name__",
		"process_cpu" }, { "env", "prod" } };
	struct sm_label b[] = { { "env", "prod" }, { "service_name", "api" },
		{ "__name__", "process_cpu" } };
	struct sm_label c[] = { { "env", "prodx" }, { "service_name", "api" },
		{ "__name__", "process_cpu" } };
	/* "a"="bc" vs "ab"="c": the separator keeps them apart. */
	struct sm_label d1[] = { { "a", "bc" } }, d2[] = { { "ab", "c" } };

	sm_labels_sort(a, 3);
	sm_labels_sort(b, 3);
	sm_labels_sort(c, 3);
	SM_CHECK_STR(a[0].name, "__name__");
	SM_CHECK_STR(a[1].name, "env");
	SM_CHECK_STR(a[2].name, "service_name");
	SM_CHECK(sm_labels_fingerprint(a, 3) == sm_labels_fingerprint(b, 3));
	SM_CHECK(sm_labels_fingerprint(a, 3) != sm_labels_fingerprint(c, 3));
	SM_CHECK(sm_labels_fingerprint(d1, 1) != sm_labels_fingerprint(d2, 1));
	/* Fingerprints are persisted: pin one value forever. */
	SM_CHECKF(sm_labels_fingerprint(a, 3) == 0xc2d8e6216b49908eULL,
	    "fingerprint %016llx changed: stored keys would break",
	    (unsigned long long)sm_labels_fingerprint(a, 3));
	SM_CHECK_STR(sm_labels_get(a, 3, "env"), "prod");
	SM_CHECK(sm_labels_get(a, 3, "nope") == NULL);
}

static void
test_labels_validate(void)
{
	struct sm_label_limits lim;
	struct sm_err err;
	const char *reason;
	struct sm_label ok[] = { { "__name__", "process_cpu" },
		{ "service_name", "api" } };
	struct sm_label dup[] = { { "__name__", "m" }, { "a", "1" },
		{ "a", "2" }, { "service_name", "s" } };
	struct sm_label nosvc[] = { { "__name__", "m" } };
	struct sm_label badm[] = { { "__name__", "1m" }, { "service_name",
		"s" } };
	struct sm_label badutf[] = { { "__name__", "m" }, { "service_name",
		"s\xff" } };
	struct sm_label many[40];
	char names[40][8];

	sm_label_limits_default(&lim);
	SM_CHECK_EQ(sm_labels_validate(ok, 2, &lim, &reason, &err), 0);
	SM_CHECK_EQ(sm_labels_validate(dup, 4, &lim, &reason, &err),
	    SM_EINVAL);
	SM_CHECK_STR(reason, "duplicate_label_names");
	SM_CHECK(strstr(err.msg, "duplicate label name") != NULL);
	SM_CHECK_EQ(sm_labels_validate(nosvc, 1, &lim, &reason, &err),
	    SM_EINVAL);
	SM_CHECK(strstr(err.msg, "service name is required") != NULL);
	SM_CHECK_EQ(sm_labels_validate(badm, 2, &lim, &reason, &err),
	    SM_EINVAL);
	SM_CHECK(strstr(err.msg, "invalid metric name") != NULL);
	SM_CHECK_EQ(sm_labels_validate(badutf, 2, &lim, &reason, &err),
	    SM_EINVAL);
	for (int i = 0; i < 40; i++) {
		snprintf(names[i], sizeof(names[i]), "l%02d", i);
		many[i].name = names[i];
		many[i].value = "v";
	}
	many[0].name = "__name__";
	many[39].name = "service_name";
	SM_CHECK_EQ(sm_labels_validate(many, 40, &lim, &reason, &err),
	    SM_EINVAL);
	SM_CHECK_STR(reason, "max_label_names_per_series");
	SM_CHECK(strstr(err.msg, "has 40 label names; limit 30") != NULL);
	SM_CHECK(sm_utf8_valid("caf\xc3\xa9", 5));
	SM_CHECK(!sm_utf8_valid("\xc0\xaf", 2));      /* overlong */
	SM_CHECK(!sm_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	/* The eight-bytes-at-a-time ASCII path: a bad byte, a valid
	 * sequence and a sequence cut by the end at every offset. */
	for (size_t len = 1; len <= 40; len++) {
		char buf[48];

		for (size_t at = 0; at < len; at++) {
			memset(buf, 'a', sizeof(buf));
			buf[at] = (char)0xff;
			SM_CHECK(!sm_utf8_valid(buf, len));
			SM_CHECK(sm_utf8_valid(buf, at));
			if (at + 2 <= len) {
				memcpy(buf + at, "\xc3\xa9", 2);
				SM_CHECK(sm_utf8_valid(buf, len));
				SM_CHECK(!sm_utf8_valid(buf, at + 1));
			}
		}
	}
	SM_CHECK(sm_metric_name_valid("process_cpu", 11));
	SM_CHECK(sm_metric_name_valid("a:b_c9", 6));
	SM_CHECK(!sm_metric_name_valid("9a", 2));
	SM_CHECK(!sm_metric_name_valid("a.b", 3));
}

/* --- gz ------------------------------------------------------------------- */

static void
test_gz_roundtrip_and_bounds(void)
{
	struct sm_arena *a = sm_arena_create(0);
	uint8_t *in = malloc(1 << 20), *gz, *out, *two;
	size_t gzlen, outlen;
	struct sm_err err;

	SM_REQUIRE(a != NULL && in != NULL);
	for (int i = 0; i < (1 << 20); i++)
		in[i] = (uint8_t)(i * 7 + (i >> 9));
	SM_REQUIRE(sm_gzip(in, 1 << 20, 6, &gz, &gzlen) == 0);
	SM_CHECK(sm_is_gzip(gz, gzlen));
	SM_CHECK_EQ(sm_gunzip(gz, gzlen, 1 << 20, a, &out, &outlen, &err), 0);
	SM_CHECK_EQ(outlen, 1 << 20);
	SM_CHECK(memcmp(in, out, outlen) == 0);
	/* One byte under the size: refused, not truncated. */
	SM_CHECK_EQ(sm_gunzip(gz, gzlen, (1 << 20) - 1, a, &out, &outlen,
	    &err), SM_ETOOBIG);
	SM_CHECK(strstr(err.msg, "exceeds limit of 1048575 bytes") != NULL);
	/* A lying ISIZE trailer (claims 10 bytes) still inflates fully. */
	gz[gzlen - 4] = 10;
	gz[gzlen - 3] = gz[gzlen - 2] = gz[gzlen - 1] = 0;
	SM_CHECK_EQ(sm_gunzip(gz, gzlen, 1 << 20, a, &out, &outlen, &err),
	    SM_EMALFORMED);   /* libdeflate verifies ISIZE: corrupt */
	/* Truncated stream. */
	SM_CHECK_EQ(sm_gunzip(gz, gzlen / 2, 1 << 20, a, &out, &outlen, &err),
	    SM_EMALFORMED);
	SM_CHECK_EQ(sm_gunzip(gz, 5, 1 << 20, a, &out, &outlen, &err),
	    SM_EMALFORMED);
	free(gz);
	/* Two members concatenated, as Go's reader accepts. */
	SM_REQUIRE(sm_gzip(in, 1000, 6, &gz, &gzlen) == 0);
	two = malloc(gzlen * 2);
	memcpy(two, gz, gzlen);
	memcpy(two + gzlen, gz, gzlen);
	SM_CHECK_EQ(sm_gunzip(two, gzlen * 2, 1 << 20, a, &out, &outlen, &err),
	    0);
	SM_CHECK_EQ(outlen, 2000);
	/* Trailing garbage after a member is an error. */
	two[gzlen] = 'x';
	SM_CHECK_EQ(sm_gunzip(two, gzlen * 2, 1 << 20, a, &out, &outlen, &err),
	    SM_EMALFORMED);
	free(two);
	free(gz);
	free(in);
	sm_arena_destroy(a);
}

static void
test_gz_bomb(void)
{
	size_t n = 64u << 20;   /* 64 MiB of zeros, ~64 KiB gzipped */
	uint8_t *zeros = calloc(1, n), *gz, *out;
	size_t gzlen, outlen;
	struct sm_arena *a = sm_arena_create(0);
	struct sm_err err;

	SM_REQUIRE(zeros != NULL && a != NULL);
	SM_REQUIRE(sm_gzip(zeros, n, 9, &gz, &gzlen) == 0);
	free(zeros);
	SM_CHECK(gzlen < n / 100);
	SM_CHECK_EQ(sm_gunzip(gz, gzlen, 4u << 20, a, &out, &outlen, &err),
	    SM_ETOOBIG);
	/* Memory used is bounded by the cap, not by the bomb. */
	SM_CHECKF(sm_arena_used(a) <= 2 * ((4u << 20) + 32), "used %zu",
	    sm_arena_used(a));
	free(gz);
	sm_arena_destroy(a);
}

/* --- flags ---------------------------------------------------------------- */

static void
test_hex(void)
{
	uint8_t b[4];
	uint64_t v = 0;

	SM_CHECK_EQ(sm_hex_val('0'), 0);
	SM_CHECK_EQ(sm_hex_val('f'), 15);
	SM_CHECK_EQ(sm_hex_val('F'), 15);
	SM_CHECK_EQ(sm_hex_val('g'), -1);
	SM_CHECK_EQ(sm_hex_val(0), -1);
	SM_CHECK(sm_hex_decode("00aBfF10", 4, b));
	SM_CHECK(b[0] == 0 && b[1] == 0xab && b[2] == 0xff && b[3] == 0x10);
	SM_CHECK(!sm_hex_decode("0x", 1, b));
	SM_CHECK(!sm_hex_decode("a", 1, b));     /* the NUL is not a digit */
	SM_CHECK(sm_hex_u64("0123456789abcDEF", 16, &v));
	SM_CHECK(v == 0x0123456789abcdefULL);
	SM_CHECK(!sm_hex_u64("0123456789abcde", 15, &v));
	SM_CHECK(!sm_hex_u64("0123456789abcdeg", 16, &v));
	SM_CHECK(!sm_hex_u64(NULL, 16, &v));
}

/* Values as text: Go's durations, secrets masked, defaults parsed. */
static void
test_flag_text(void)
{
	static const struct {
		int64_t ms;
		const char *want;
	} d[] = {
		{ 0, "0s" }, { 1, "1ms" }, { 999, "999ms" }, { 1000, "1s" },
		{ 1500, "1.5s" }, { 1250, "1.25s" }, { 1001, "1.001s" },
		{ 60000, "1m0s" }, { 90500, "1m30.5s" }, { 3600000, "1h0m0s" },
		{ 5400000, "1h30m0s" }, { 172800000, "48h0m0s" },
		{ -1500, "-1.5s" },
	};
	struct cfg {
		char *s, *k;
		int64_t i, dur;
		bool b;
	} c = { "x", "sekrit", 7, 1500, true };
	struct cfg empty = { "", "", 0, 0, false };
	char buf[64];

	for (size_t i = 0; i < SM_ARRAY_LEN(d); i++) {
		int64_t back;

		SM_CHECK_EQ(sm_format_duration_ms(d[i].ms, buf, sizeof(buf)),
		    strlen(d[i].want));
		SM_CHECK_STR(buf, d[i].want);
		/* what is written reads back */
		if (d[i].ms >= 0) {
			SM_CHECK(sm_parse_duration_ms(buf, &back) == 0);
			SM_CHECK_EQ(back, d[i].ms);
		}
	}
	{
#define SM_FLAG_STRUCT struct cfg
		static const struct sm_flag tab[] = {
			SM_FLAG_STR("s", s, "dflt", ""),
			SM_FLAG_SECRET("k", k, "", ""),
			SM_FLAG_I64("i", SM_FLAG_INT, i, "3", ""),
			SM_FLAG_I64("d", SM_FLAG_DURATION, dur, "1h", ""),
			SM_FLAG_I64("by", SM_FLAG_BYTES, i, "4MiB", ""),
			SM_FLAG_SWITCH("b", b, "false", ""),
		};
#undef SM_FLAG_STRUCT
		static const char *cur[] = { "x", "********", "7", "1.5s", "7",
		    "true" };
		static const char *def[] = { "dflt", "", "3", "1h0m0s",
		    "4194304", "false" };

		for (size_t i = 0; i < SM_ARRAY_LEN(tab); i++) {
			const void *p = (const char *)&c + tab[i].off;

			SM_CHECK(sm_flag_text(&tab[i], p, buf, sizeof(buf)) >= 0);
			SM_CHECK_STR(buf, cur[i]);
			SM_CHECK(sm_flag_text(&tab[i], NULL, buf, sizeof(buf)) >=
			    0);
			SM_CHECK_STR(buf, def[i]);
		}
		/* a URL's password is masked in any string */
		c.s = "https://user:pw@host:9/p?q=a:b@c";
		SM_CHECK(sm_flag_text(&tab[0], (const char *)&c + tab[0].off,
		    buf, sizeof(buf)) > 0);
		SM_CHECK_STR(buf, "https://user:********@host:9/p?q=a:b@c");
		c.s = "http://host:9/x@y";
		SM_CHECK(sm_flag_text(&tab[0], (const char *)&c + tab[0].off,
		    buf, sizeof(buf)) > 0);
		SM_CHECK_STR(buf, "http://host:9/x@y");
		c.s = "x";
		/* an empty secret is shown empty; text is cut to fit */
		SM_CHECK(sm_flag_text(&tab[1], (const char *)&empty + tab[1].off,
		    buf, sizeof(buf)) == 0);
		SM_CHECK_STR(buf, "");
		SM_CHECK_EQ(sm_flag_text(&tab[1], (const char *)&c + tab[1].off,
		    buf, 4), 3);
		SM_CHECK_STR(buf, "***");
	}
}

static void
test_flags(void)
{
	struct sm_flags fs;
	struct sm_err err;
	struct tflags {
		char *s;
		int64_t i, d, by;
		bool b;
	} t = { NULL, 0, 0, 0, false };
#define SM_FLAG_STRUCT struct tflags
	static const struct sm_flag tab[] = {
		SM_FLAG_STR("a.str", s, "def", "h"),
		SM_FLAG_I64("a.int", SM_FLAG_INT, i, "7", "h"),
		SM_FLAG_SWITCH("a.bool", b, "false", "h"),
		SM_FLAG_I64("a.dur", SM_FLAG_DURATION, d, "1h30m", "h"),
		SM_FLAG_I64("a.bytes", SM_FLAG_BYTES, by, "4MiB", "h"),
	};
#undef SM_FLAG_STRUCT
	bool help;
	int64_t d;
	char *argv1[] = { "x", "-a.str=v", "--a.int", "-12", "-a.bool",
		"-a.dur=500ms", "-a.bytes", "2KB" };
	char *argv2[] = { "x", "-nope=1" };
	char *argv3[] = { "x", "-a.int=zz" };
	char *argv4[] = { "x", "-help" };

	sm_flags_init(&fs);
	SM_REQUIRE(sm_flags_add(&fs, tab, SM_ARRAY_LEN(tab), &t, &err) == 0);
	SM_CHECK_STR(t.s, "def");
	SM_CHECK_EQ(t.i, 7);
	SM_CHECK_EQ(t.d, 5400000);
	SM_CHECK_EQ(t.by, 4 << 20);
	SM_CHECK_EQ(sm_flags_add(&fs, tab, 1, &t, &err), SM_EEXIST);
	SM_CHECK_EQ(sm_flags_parse(&fs, 8, argv1, &help, &err), 0);
	SM_CHECK_STR(t.s, "v");
	SM_CHECK_EQ(t.i, -12);
	SM_CHECK(t.b);
	SM_CHECK_EQ(t.d, 500);
	SM_CHECK_EQ(t.by, 2000);
	SM_CHECK(sm_flags_was_set(&fs, "a.str"));
	SM_CHECK_EQ(sm_flags_parse(&fs, 2, argv2, &help, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "not defined: -nope") != NULL);
	SM_CHECK_EQ(sm_flags_parse(&fs, 2, argv3, &help, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_flags_parse(&fs, 2, argv4, &help, &err), 0);
	SM_CHECK(help);
	SM_CHECK_EQ(sm_parse_duration_ms("10", &d), 0);
	SM_CHECK_EQ(d, 10000);
	SM_CHECK_EQ(sm_parse_duration_ms("1.5s", &d), 0);
	SM_CHECK_EQ(d, 1500);
	SM_CHECK_EQ(sm_parse_duration_ms("5x", &d), SM_EINVAL);
	SM_CHECK_EQ(sm_parse_duration_ms("-5s", &d), SM_EINVAL);
	sm_flags_fini(&fs);
}

/* --- module --------------------------------------------------------------- */

static void
test_modules(void)
{
	static const struct sm_module tab[] = {
		{ "server", { NULL }, false, NULL, NULL, NULL },
		{ "ingester", { "server", NULL }, true, NULL, NULL, NULL },
		{ "client", { NULL }, false, NULL, NULL, NULL },
		{ "distributor", { "server", "client", NULL }, true, NULL,
		    NULL, NULL },
		{ "querier", { "server", "client", NULL }, true, NULL, NULL,
		    NULL },
		{ "all", { "ingester", "distributor", "querier", NULL },
		    true, NULL, NULL, NULL },
	};
	const struct sm_module *order[8];
	struct sm_err err;
	size_t n;

	SM_REQUIRE(sm_modules_resolve(tab, SM_ARRAY_LEN(tab), "all", order,
	    &n, &err) == 0);
	SM_CHECK_EQ(n, 6);
	SM_CHECK_STR(order[0]->name, "server");
	SM_CHECK_STR(order[1]->name, "ingester");
	SM_CHECK_STR(order[n - 1]->name, "all");
	SM_REQUIRE(sm_modules_resolve(tab, SM_ARRAY_LEN(tab),
	    "querier,distributor", order, &n, &err) == 0);
	SM_CHECK_EQ(n, 4);
	SM_CHECK(sm_modules_has(order, n, "client"));
	SM_CHECK(!sm_modules_has(order, n, "ingester"));
	SM_CHECK_EQ(sm_modules_resolve(tab, SM_ARRAY_LEN(tab), "server",
	    order, &n, &err), SM_EINVAL);
	SM_CHECK_EQ(sm_modules_resolve(tab, SM_ARRAY_LEN(tab), "bogus",
	    order, &n, &err), SM_EINVAL);
	SM_CHECK(strstr(err.msg, "bogus") != NULL);
}

/* --- tenant --------------------------------------------------------------- */

static void
test_tenant(void)
{
	struct sm_err err;
	const char *t;
	char longid[200];

	SM_CHECK_EQ(sm_tenant_resolve(false, "ignored", &t, &err), 0);
	SM_CHECK_STR(t, "anonymous");
	SM_CHECK_EQ(sm_tenant_resolve(true, NULL, &t, &err), SM_EAUTH);
	SM_CHECK_EQ(sm_tenant_resolve(true, "team-a", &t, &err), 0);
	SM_CHECK_STR(t, "team-a");
	SM_CHECK_EQ(sm_tenant_validate("..", &err), SM_EINVAL);
	SM_CHECK_EQ(sm_tenant_validate("a|b", &err), SM_EINVAL);
	SM_CHECK_EQ(sm_tenant_validate("a/b", &err), SM_EINVAL);
	memset(longid, 'x', 151);
	longid[151] = '\0';
	SM_CHECK_EQ(sm_tenant_validate(longid, &err), SM_EINVAL);
	longid[150] = '\0';
	SM_CHECK_EQ(sm_tenant_validate(longid, &err), 0);
}

/* --- saturating sums, UTF-8 repair ---------------------------------------- */

static void
test_add_sat(void)
{
	uint64_t n0 = sm_sat_count();

	SM_CHECK_EQ(sm_add_sat(1, 2), 3);
	SM_CHECK_EQ(sm_add_sat(-5, 3), -2);
	SM_CHECK_EQ(sm_add_sat(INT64_MAX, -1), INT64_MAX - 1);
	SM_CHECK_EQ(sm_add_sat(INT64_MIN, INT64_MAX), -1);
	SM_CHECK_EQ(sm_sat_count(), n0);          /* no saturation yet */
	SM_CHECK_EQ(sm_add_sat(INT64_MAX, 1), INT64_MAX);
	SM_CHECK_EQ(sm_add_sat(INT64_MAX, INT64_MAX), INT64_MAX);
	SM_CHECK_EQ(sm_add_sat(INT64_MIN, -1), INT64_MIN);   /* not MAX */
	SM_CHECK_EQ(sm_add_sat(-2, INT64_MIN), INT64_MIN);
	SM_CHECK_EQ(sm_sat_count(), n0 + 4);
}

/* SM_CMP: -1/0/1 where a - b would overflow or wrap. */
static void
test_cmp(void)
{
	int64_t lo = INT64_MIN, hi = INT64_MAX;
	uint64_t ubig = UINT64_MAX, uzero = 0;    /* variables: a constant 0 */
	uint32_t u0 = 0, u1 = 1;                   /* trips -Wtype-limits */

	SM_CHECK_EQ(SM_CMP(1, 2), -1);
	SM_CHECK_EQ(SM_CMP(2, 1), 1);
	SM_CHECK_EQ(SM_CMP(-3, -3), 0);
	SM_CHECK_EQ(SM_CMP(-1, 1), -1);
	SM_CHECK_EQ(SM_CMP(u0, u1), -1);        /* u0 - u1 wraps to > 0 */
	SM_CHECK_EQ(SM_CMP(u1, u0), 1);
	SM_CHECK_EQ(SM_CMP(ubig, uzero), 1);
	SM_CHECK_EQ(SM_CMP(uzero, ubig), -1);
	SM_CHECK_EQ(SM_CMP(ubig, ubig), 0);
	SM_CHECK_EQ(SM_CMP(lo, hi), -1);        /* lo - hi overflows */
	SM_CHECK_EQ(SM_CMP(hi, lo), 1);
	SM_CHECK_EQ(SM_CMP(lo, lo), 0);
	SM_CHECK_EQ(SM_CMP(hi, hi), 0);
	SM_CHECK_EQ(SM_CMP(lo, (int64_t)0), -1);
	SM_CHECK_EQ(SM_CMP(1.5, 0.5), 1);
}

/* The shared qsort comparators built on it, and the bytewise order. */
static void
test_cmp_sorts(void)
{
	int64_t v[] = { 3, INT64_MIN, INT64_MAX, -1, 3 };
	uint32_t u[] = { UINT32_MAX, 0, 7 };

	qsort(v, SM_ARRAY_LEN(v), sizeof(v[0]), sm_i64_cmp);
	SM_CHECK(v[0] == INT64_MIN && v[1] == -1 && v[2] == 3 && v[3] == 3 &&
	    v[4] == INT64_MAX);
	qsort(v, SM_ARRAY_LEN(v), sizeof(v[0]), sm_i64_desc_cmp);
	SM_CHECK(v[0] == INT64_MAX && v[1] == 3 && v[2] == 3 && v[3] == -1 &&
	    v[4] == INT64_MIN);
	qsort(u, SM_ARRAY_LEN(u), sizeof(u[0]), sm_u32_cmp);
	SM_CHECK(u[0] == 0 && u[1] == 7 && u[2] == UINT32_MAX);
	SM_CHECK_EQ(sm_bytes_cmp("ab", 2, "ab", 2), 0);
	SM_CHECK_EQ(sm_bytes_cmp("ab", 2, "abc", 3), -1);   /* prefix first */
	SM_CHECK_EQ(sm_bytes_cmp("abc", 3, "ab", 2), 1);
	SM_CHECK(sm_bytes_cmp("abd", 3, "abc", 3) > 0);
	SM_CHECK(sm_bytes_cmp("b", 1, "abc", 3) > 0);       /* bytes first */
	SM_CHECK_EQ(sm_bytes_cmp("", 0, "", 0), 0);
}

static void
test_utf8_repair(void)
{
	char out[64];
	size_t n;

	n = sm_utf8_repair("caf\xc3\xa9", 5, out);
	SM_CHECK(n == 5 && memcmp(out, "caf\xc3\xa9", 5) == 0);
	n = sm_utf8_repair("x\xff\xfey", 4, out);
	SM_CHECK(n == 8 && memcmp(out, "x\xef\xbf\xbd\xef\xbf\xbdy", 8) == 0);
	/* A sequence cut at the end: each of its bytes is replaced. */
	n = sm_utf8_repair("a\xe2\x82", 3, out);
	SM_CHECK(n == 7 && memcmp(out, "a\xef\xbf\xbd\xef\xbf\xbd", 7) == 0);
	/* Overlong and surrogate encodings are invalid too. */
	n = sm_utf8_repair("\xc0\xaf", 2, out);
	SM_CHECK(n == 6 && sm_utf8_valid(out, n));
	n = sm_utf8_repair("\xed\xa0\x80", 3, out);
	SM_CHECK(n == 9 && sm_utf8_valid(out, n));
	SM_CHECK_EQ(sm_utf8_repair("", 0, out), 0);
}

/*
 * The one SM_E* mapping (sm_err_wire): every code has both APIs' answers,
 * a client error is a 4xx and a server error a 5xx, and the plain HTTP
 * and Connect APIs give the same code except where sm.c says why not.
 */
static void
test_err_wire(void)
{
	for (int rv = SM_ENOMEM; rv < SM_E_LAST_; rv++) {
		const struct sm_err_wire *w = sm_err_wire(rv);

		SM_REQUIRE(w != NULL && w->http_code != NULL &&
		    w->connect_code != NULL);
		SM_CHECKF(w->http_status >= 400 && w->http_status < 600,
		    "%s: %d", sm_strerror(rv), w->http_status);
		if (rv != SM_ENOMEM)
			SM_CHECKF(strcmp(w->http_code, w->connect_code) == 0,
			    "%s: %s vs %s", sm_strerror(rv), w->http_code,
			    w->connect_code);
		SM_CHECK(strcmp(sm_strerror(rv), "unknown error") != 0);
	}
	SM_CHECK_STR(sm_err_wire(SM_ENOMEM)->connect_code,
	    "resource_exhausted");
	for (size_t i = 0; i < SM_ARRAY_LEN(sm_test_err_wire); i++) {
		const struct sm_test_err_wire *e = &sm_test_err_wire[i];

		SM_CHECK_EQ(sm_err_wire(e->rv)->http_status, e->status);
		SM_CHECK_STR(sm_err_wire(e->rv)->http_code, e->code);
	}
}

/*
 * Monotonic timed waits: a deadline already passed returns at once with
 * false; a short wait nobody signals ends after its time with false; a
 * signal ends the wait early with true.
 */
struct cond_pair {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool go;
};

static void *
cond_signal_main(void *arg)
{
	struct cond_pair *p = arg;

	pthread_mutex_lock(&p->mu);
	p->go = true;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return (NULL);
}

/* A thread asleep until p->go, as a stopping background thread waits. */
static void *
cond_flag_main(void *arg)
{
	struct cond_pair *p = arg;

	pthread_mutex_lock(&p->mu);
	while (!p->go)
		(void)sm_cond_wait_until(&p->cv, &p->mu, INT64_MAX);
	pthread_mutex_unlock(&p->mu);
	return (NULL);
}

/* sm_cond_set_flag sets the flag and wakes the waiter (the join would
 * hang otherwise). */
static void
test_cond_set_flag(void)
{
	struct cond_pair p = { .go = false };
	pthread_t th;

	pthread_mutex_init(&p.mu, NULL);
	sm_cond_init(&p.cv);
	SM_REQUIRE(pthread_create(&th, NULL, cond_flag_main, &p) == 0);
	sm_sleep_ms(10);        /* likely asleep by now; either way works */
	sm_cond_set_flag(&p.mu, &p.cv, &p.go);
	SM_CHECK(p.go);
	pthread_join(th, NULL);
	pthread_cond_destroy(&p.cv);
	pthread_mutex_destroy(&p.mu);
}

static void
test_cond_wait(void)
{
	struct cond_pair p = { .go = false };
	pthread_t th;
	int64_t t0;
	bool woke = true;

	pthread_mutex_init(&p.mu, NULL);
	sm_cond_init(&p.cv);
	pthread_mutex_lock(&p.mu);
	SM_CHECK(!sm_cond_wait_until(&p.cv, &p.mu, sm_mono_ns() - 1));
	t0 = sm_mono_ns();
	while (sm_cond_wait_ms(&p.cv, &p.mu, 30))
		;   /* spurious wake-ups only */
	SM_CHECK(sm_mono_ns() - t0 >= 30 * 1000000LL);
	SM_REQUIRE(pthread_create(&th, NULL, cond_signal_main, &p) == 0);
	while (!p.go && (woke = sm_cond_wait_until(&p.cv, &p.mu, INT64_MAX)))
		;
	SM_CHECK(p.go && woke);
	pthread_mutex_unlock(&p.mu);
	pthread_join(th, NULL);
	pthread_cond_destroy(&p.cv);
	pthread_mutex_destroy(&p.mu);
}

/*
 * sm_mem_stats / sm_mem_tidy: free 64 MiB of touched blocks that small
 * live blocks pin below the heap's top (what an ingester's request
 * buffers look like among head nodes); the tidy gives their pages back,
 * and a second tidy with nothing moved does not trim.  Under ASan
 * malloc is ASan's: mallinfo2 reports nothing and only RSS is checked.
 */
static void
test_mem_tidy(void)
{
	enum { N = 1024, BIG = 64 << 10 };
	static void *big[N], *pin[N];
	struct sm_mem_stats m0, m1, m2;

	sm_mem_init();
	sm_mem_stats(&m0);
	SM_CHECK(m0.rss > 0);
	for (int i = 0; i < N; i++) {
		big[i] = malloc(BIG);
		pin[i] = malloc(64);
		SM_CHECK(big[i] != NULL && pin[i] != NULL);
		memset(big[i], 0x5a, BIG);
	}
	sm_mem_stats(&m1);
	SM_CHECK(m1.rss >= m0.rss + (uint64_t)N * BIG / 2);
	for (int i = 0; i < N; i++)
		free(big[i]);
	sm_mem_stats(&m1);
	if (m1.heap_used == 0 && m1.heap_free == 0) {
		for (int i = 0; i < N; i++)
			free(pin[i]);
		return;         /* not glibc's malloc */
	}
	SM_CHECK(m1.heap_free >= (uint64_t)N * BIG / 2);
	SM_CHECK(sm_mem_tidy());
	sm_mem_stats(&m2);
	SM_CHECK(m2.rss + (uint64_t)N * BIG / 2 <= m1.rss);
	/* Nothing moved since: the free chunks still count as free, but no
	 * trim (its last one gave back a lot, so one more look is allowed:
	 * the second finds nothing and the third is skipped). */
	(void)sm_mem_tidy();
	SM_CHECK(!sm_mem_tidy());
	for (int i = 0; i < N; i++)
		free(pin[i]);
}

/* sm_log_limit: per_sec lines a second, the rest counted and reported
 * with the next line written, on a manual clock (common/clock.h) that
 * stands still inside a second and moves to the next one at once. */
static void
test_log_limit(void)
{
	struct sm_log_limit l = { 0 };
	struct sm_clock clk;
	uint64_t sup, reported = 0;
	int ok = 0, dropped = 0;

	sm_clock_manual_init(&clk, 10 * 1000000000LL, 0);
	l.clock = &clk;
	for (int i = 0; i < 100; i++) {
		if (sm_log_limit_ok(&l, 3, &sup)) {
			ok++;
			reported += sup;
		} else {
			dropped++;
		}
	}
	SM_CHECK_EQ(ok, 3);
	SM_CHECK_EQ(reported, 0);
	SM_CHECK_EQ(dropped, 97);
	/* Later in the same second: still dropped, still counted. */
	sm_clock_manual_advance(&clk, 999999999);
	SM_CHECK(!sm_log_limit_ok(&l, 3, &sup));
	dropped++;
	/* The next second: its first line carries every drop not yet told,
	 * the next ones none, and the cap starts again. */
	sm_clock_manual_advance(&clk, 1);
	SM_CHECK(sm_log_limit_ok(&l, 3, &sup));
	SM_CHECK_EQ(sup, (uint64_t)dropped);
	SM_CHECK(sm_log_limit_ok(&l, 3, &sup));
	SM_CHECK_EQ(sup, 0);
	SM_CHECK(sm_log_limit_ok(&l, 3, &sup));
	SM_CHECK(!sm_log_limit_ok(&l, 3, &sup));
	/* A second with no line at all: the one drop is told after it. */
	sm_clock_manual_advance(&clk, 2 * 1000000000LL);
	SM_CHECK(sm_log_limit_ok(&l, 3, &sup));
	SM_CHECK_EQ(sup, 1);
}

/* RFC 4648's test vectors (section 10) both ways; padded chunks laid end to end (as
 * gRPC-web text bodies are); bad input. */
static void
test_base64(void)
{
	static const char *const plain[] = { "", "f", "fo", "foo", "foob",
	    "fooba", "foobar" };
	static const char *const enc[] = { "", "Zg==", "Zm8=", "Zm9v",
	    "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
	struct sm_buf b = SM_BUF_INIT;

	for (size_t i = 0; i < SM_ARRAY_LEN(plain); i++) {
		sm_buf_reset(&b);
		sm_buf_put_base64(&b, (const uint8_t *)plain[i],
		    strlen(plain[i]));
		SM_CHECK_STR(b.b != NULL ? b.b : "", enc[i]);
		sm_buf_reset(&b);
		SM_CHECK_EQ(sm_buf_put_unbase64(&b, enc[i], strlen(enc[i])), 0);
		SM_CHECK_EQ(b.len, strlen(plain[i]));
		SM_CHECK(b.len == 0 || memcmp(b.b, plain[i], b.len) == 0);
	}
	sm_buf_reset(&b);
	SM_CHECK_EQ(sm_buf_put_unbase64(&b, "Zm8=YmFyZg", 10), 0);
	SM_CHECK(b.len == 6 && memcmp(b.b, "fobarf", 6) == 0);
	sm_buf_reset(&b);
	SM_CHECK_EQ(sm_buf_put_unbase64(&b, "Zm9v!", 5), SM_EINVAL);
	sm_buf_reset(&b);
	SM_CHECK_EQ(sm_buf_put_unbase64(&b, "Zm9vY", 5), SM_EINVAL);
	sm_buf_reset(&b);
	SM_CHECK_EQ(sm_buf_put_unbase64(&b, "Z===", 4), SM_EINVAL);
	sm_buf_fini(&b);
}

SM_TEST_MAIN(
	{ "base64: both ways, chunks, bad input", test_base64 },
	{ "hex: digits, bytes, span ids", test_hex },
	{ "log limit: lines per second, the rest counted", test_log_limit },
	{ "memory: measured RSS and heap, tidy gives free pages back",
	  test_mem_tidy },
	{ "monotonic timed waits", test_cond_wait },
	{ "a flag set under the lock wakes its waiter", test_cond_set_flag },
	{ "error codes: one mapping to HTTP and Connect", test_err_wire },
	{ "grow: mincap, doubling, uint32_t and size_t capacities", test_grow_policy },
	{ "grow: failure and overflow leave the array untouched", test_grow_failure },
	{ "sums saturate toward their sign and are counted", test_add_sat },
	{ "three-way compare: signed, unsigned, int64 extremes, equal",
	  test_cmp },
	{ "comparators: int64 both ways, uint32, bytes", test_cmp_sorts },
	{ "UTF-8 repair: U+FFFD per invalid byte", test_utf8_repair },
	{ "arena: alignment, big blocks, reset", test_arena_alloc },
	{ "arena: budget refuses over-allocation", test_arena_budget },
	{ "arena: grow and strndup", test_arena_grow_strndup },
	{ "buf: append, numbers, sticky limit", test_buf_basic },
	{ "buf: JSON escaping matches Go", test_buf_json },
	{ "labels: sort and fingerprint", test_labels_sort_fp },
	{ "labels: Pyroscope validation rules", test_labels_validate },
	{ "gz: roundtrip, cap, corrupt, multi-member", test_gz_roundtrip_and_bounds },
	{ "gz: a 64 MiB bomb is refused within the cap", test_gz_bomb },
	{ "flags: forms, types, errors", test_flags },
	{ "flags: values as text, Go durations, secrets masked",
	  test_flag_text },
	{ "module: dependency order and targets", test_modules },
	{ "tenant: resolution and id rules", test_tenant },
)
