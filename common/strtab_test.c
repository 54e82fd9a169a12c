/*
 * strtab_test.c -- string interning: id 0, dedup, growth, long strings
 * (dedicated chunks), embedded NULs, pointer stability, failures.
 */
#include "common/strtab.h"

#include "sm_test.h"

static void
test_empty_is_zero(void)
{
	struct sm_strtab t;
	uint32_t id = 99, len = 99;
	const char *p;

	SM_REQUIRE(sm_strtab_init(&t) == 0);
	SM_CHECK_EQ(sm_strtab_count(&t), 1);
	p = sm_strtab_str(&t, 0, &len);
	SM_CHECK(p != NULL && p[0] == '\0');
	SM_CHECK_EQ(len, 0);
	SM_CHECK(sm_strtab_find(&t, "", 0, &id) == 0 && id == 0);
	SM_CHECK(sm_strtab_intern(&t, "", 0, &id) == 0 && id == 0);
	/* A non-NULL pointer with length 0 is the empty string too. */
	SM_CHECK(sm_strtab_intern(&t, "xyz", 0, &id) == 0 && id == 0);
	SM_CHECK_EQ(sm_strtab_count(&t), 1);
	SM_CHECK(sm_strtab_str(&t, 0, NULL)[0] == '\0');
	sm_strtab_fini(&t);
	SM_CHECK(t.strs == NULL && t.tab.slots == NULL && t.n == 0);
}

static void
test_intern(void)
{
	struct sm_strtab t;
	uint32_t a, b, a2, x, len;

	SM_REQUIRE(sm_strtab_init(&t) == 0);
	SM_REQUIRE(sm_strtab_intern(&t, "main.main", 9, &a) == 0);
	SM_REQUIRE(sm_strtab_intern(&t, "main.mainX", 9, &a2) == 0);
	SM_CHECK_EQ(a, 1);
	SM_CHECK_EQ(a2, a);         /* only the first n bytes count */
	SM_REQUIRE(sm_strtab_intern(&t, "main.main", 8, &b) == 0);
	SM_CHECK_EQ(b, 2);          /* a prefix is another string */
	SM_CHECK_STR(sm_strtab_str(&t, a, &len), "main.main");
	SM_CHECK_EQ(len, 9);
	SM_CHECK_STR(sm_strtab_str(&t, b, &len), "main.mai");
	SM_CHECK_EQ(len, 8);
	SM_CHECK(sm_strtab_find(&t, "main.main", 9, &x) == 0 && x == a);
	SM_CHECK_EQ(sm_strtab_find(&t, "main.ma", 7, &x), SM_ENOTFOUND);
	SM_CHECK_EQ(sm_strtab_count(&t), 3);
	SM_CHECK(sm_strtab_mem(&t) > 0);
	sm_strtab_fini(&t);
}

/* Embedded NULs are bytes like any other; copies stay NUL-terminated. */
static void
test_embedded_nul(void)
{
	struct sm_strtab t;
	uint32_t a, b, c, d, x, len;
	const char *p;

	SM_REQUIRE(sm_strtab_init(&t) == 0);
	SM_REQUIRE(sm_strtab_intern(&t, "a\0b", 3, &a) == 0);
	SM_REQUIRE(sm_strtab_intern(&t, "a", 1, &b) == 0);
	SM_REQUIRE(sm_strtab_intern(&t, "a\0c", 3, &c) == 0);
	SM_REQUIRE(sm_strtab_intern(&t, "\0", 1, &d) == 0);
	SM_CHECK(a != b && a != c && b != c && d != 0);
	p = sm_strtab_str(&t, a, &len);
	SM_CHECK_EQ(len, 3);
	SM_CHECK(memcmp(p, "a\0b", 4) == 0);
	p = sm_strtab_str(&t, d, &len);
	SM_CHECK_EQ(len, 1);
	SM_CHECK(p[0] == '\0' && p[1] == '\0');
	SM_CHECK(sm_strtab_find(&t, "a\0c", 3, &x) == 0 && x == c);
	SM_CHECK(sm_strtab_find(&t, "\0", 1, &x) == 0 && x == d);
	SM_CHECK_EQ(sm_strtab_count(&t), 5);
	sm_strtab_fini(&t);
}

/*
 * Strings longer than a quarter chunk (16 KiB) get a chunk of their own;
 * the chunk small strings are appended to must keep filling afterwards.
 */
static void
test_long_strings(void)
{
	static const size_t sizes[] = { 16383, 16384, 16385, 20000, 65535,
	    65536, 65537, 1u << 20 };
	struct sm_strtab t;
	uint32_t ids[SM_ARRAY_LEN(sizes)], small[SM_ARRAY_LEN(sizes)];
	char *big, name[32];
	const char *smallp[SM_ARRAY_LEN(sizes)];

	big = malloc((1u << 20) + 1);
	SM_REQUIRE(big != NULL);
	SM_REQUIRE(sm_strtab_init(&t) == 0);
	for (size_t i = 0; i < SM_ARRAY_LEN(sizes); i++) {
		for (size_t k = 0; k < sizes[i]; k++)
			big[k] = (char)('a' + (k * 7 + i) % 26);
		SM_REQUIRE(sm_strtab_intern(&t, big, sizes[i], &ids[i]) == 0);
		snprintf(name, sizeof(name), "small%zu", i);
		SM_REQUIRE(sm_strtab_intern(&t, name, strlen(name),
		    &small[i]) == 0);
		smallp[i] = sm_strtab_str(&t, small[i], NULL);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(sizes); i++) {
		uint32_t len, again;
		const char *p = sm_strtab_str(&t, ids[i], &len);
		int ok = len == sizes[i] && p[len] == '\0';

		for (size_t k = 0; ok && k < sizes[i]; k++)
			ok = p[k] == (char)('a' + (k * 7 + i) % 26);
		SM_CHECKF(ok, "long string %zu (%zu bytes) damaged", i,
		    sizes[i]);
		for (size_t k = 0; k < sizes[i]; k++)
			big[k] = (char)('a' + (k * 7 + i) % 26);
		SM_CHECK(sm_strtab_intern(&t, big, sizes[i], &again) == 0 &&
		    again == ids[i]);
		snprintf(name, sizeof(name), "small%zu", i);
		SM_CHECK_STR(sm_strtab_str(&t, small[i], NULL), name);
		SM_CHECK(sm_strtab_str(&t, small[i], NULL) == smallp[i]);
	}
	/* Small strings after the big ones share chunks (no chunk each). */
	SM_CHECK(t.nchunks < SM_ARRAY_LEN(sizes) + 4);
	SM_CHECK(sm_strtab_mem(&t) > (1u << 20));
	sm_strtab_fini(&t);
	free(big);
}

/* 200k strings: many rehashes and chunks; ids dense, pointers stable. */
static void
test_growth_and_stability(void)
{
	enum { N = 200000 };
	struct sm_strtab t;
	const char **ptr;
	char buf[48];
	uint32_t id, len;
	int bad = 0;

	ptr = malloc(N * sizeof(*ptr));
	SM_REQUIRE(ptr != NULL);
	SM_REQUIRE(sm_strtab_init(&t) == 0);
	ptr[0] = sm_strtab_str(&t, 0, NULL);
	for (uint32_t i = 1; i < N; i++) {
		int n = snprintf(buf, sizeof(buf), "pkg.func_%u_%s", i,
		    i % 3 == 0 ? "with/a/longer/suffix" : "");

		if (sm_strtab_intern(&t, buf, (size_t)n, &id) != 0 || id != i) {
			bad++;
			break;
		}
		ptr[i] = sm_strtab_str(&t, id, NULL);
		SM_CHECK((uint64_t)t.n * 2 <= t.tab.nslots);
	}
	SM_REQUIRE(bad == 0);
	SM_CHECK_EQ(sm_strtab_count(&t), N);
	SM_CHECK(t.nchunks > 1);
	for (uint32_t i = 1; i < N && !bad; i++) {
		int n = snprintf(buf, sizeof(buf), "pkg.func_%u_%s", i,
		    i % 3 == 0 ? "with/a/longer/suffix" : "");

		if (sm_strtab_find(&t, buf, (size_t)n, &id) != 0 || id != i ||
		    sm_strtab_str(&t, i, &len) != ptr[i] || len != (uint32_t)n ||
		    memcmp(ptr[i], buf, (size_t)n + 1) != 0)
			bad++;
	}
	SM_CHECK_EQ(bad, 0);
	SM_CHECK(sm_strtab_str(&t, 0, NULL) == ptr[0]);
	sm_strtab_fini(&t);
	free(ptr);
}

/* A failed allocation leaves the table usable and unchanged. */
static void
test_alloc_failures(void)
{
	struct sm_strtab t;
	char buf[32];
	uint32_t id, n;
	int failures = 0;

	SM_REQUIRE(sm_strtab_init(&t) == 0);
	for (uint32_t i = 1; i < 3000; i++) {
		int len = snprintf(buf, sizeof(buf), "s%u", i);

		n = t.n;
		SM_RETRY_FAULTS(sm_strtab_intern(&t, buf, (size_t)len, &id),
		    failures, SM_CHECK_EQ(t.n, n);
		    SM_CHECK_EQ(sm_strtab_find(&t, buf, (size_t)len, &id),
			SM_ENOTFOUND));
		SM_CHECK_EQ(id, i);
	}
	SM_CHECK(failures > 3);
	for (uint32_t i = 1; i < 3000; i++) {
		int len = snprintf(buf, sizeof(buf), "s%u", i);

		SM_CHECK(sm_strtab_find(&t, buf, (size_t)len, &id) == 0 &&
		    id == i);
	}
	sm_strtab_fini(&t);

	SM_CHECK_INIT_FAULTS(&t, sm_strtab_init, sm_strtab_fini, 6,
	    t.strs == NULL && t.tab.slots == NULL && t.chunks == NULL);
}

/* Reserved room: n strings intern without growing the index or the id
 * array; a failed reserve leaves the table as it was. */
static void
test_reserve(void)
{
	struct sm_strtab t;
	const void *slots, *strs;
	char buf[32];
	uint32_t id;
	int failures = 0;

	SM_REQUIRE(sm_strtab_init(&t) == 0);
	SM_REQUIRE(sm_strtab_intern(&t, "a", 1, &id) == 0 && id == 1);
	SM_REQUIRE(sm_strtab_reserve(&t, 1000) == 0);
	SM_CHECK(t.cap >= 1000 && (uint64_t)t.tab.nslots >= 2000);
	slots = t.tab.slots;
	strs = t.strs;
	for (uint32_t i = 2; i < 1000; i++) {
		int len = snprintf(buf, sizeof(buf), "r%u", i);

		SM_REQUIRE(sm_strtab_intern(&t, buf, (size_t)len, &id) == 0);
		SM_CHECK_EQ(id, i);
	}
	SM_CHECK(t.tab.slots == slots && t.strs == strs);
	/* Less than it holds: nothing to do. */
	SM_CHECK_EQ(sm_strtab_reserve(&t, 10), 0);
	SM_RETRY_FAULTS(sm_strtab_reserve(&t, 50000), failures,
	    SM_CHECK_EQ(t.n, 1000));
	SM_CHECK(t.cap >= 50000);
	SM_CHECK(sm_strtab_find(&t, "a", 1, &id) == 0 && id == 1);
	SM_CHECK(sm_strtab_find(&t, "r999", 4, &id) == 0 && id == 999);
	sm_strtab_fini(&t);
}

SM_TEST_MAIN(
	{ "id 0 is the empty string", test_empty_is_zero },
	{ "interning and lookup", test_intern },
	{ "embedded NULs", test_embedded_nul },
	{ "long strings (> 16 KiB) in dedicated chunks", test_long_strings },
	{ "growth to 200k, stable ids and pointers",
	    test_growth_and_stability },
	{ "allocation failures", test_alloc_failures },
	{ "reserved room", test_reserve },
)
