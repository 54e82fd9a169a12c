/*
 * ptype_test.c -- profile type ids, the legacy table, render units.
 */
#include "common/ptype.h"

#include "sm_test.h"

static void
test_parse_five_parts(void)
{
	struct sm_ptype p;

	SM_REQUIRE(sm_ptype_parse("process_cpu:cpu:nanoseconds:cpu:nanoseconds",
	    &p) == 0);
	SM_CHECK_STR(p.name, "process_cpu");
	SM_CHECK_STR(p.sample_type, "cpu");
	SM_CHECK_STR(p.sample_unit, "nanoseconds");
	SM_CHECK_STR(p.period_type, "cpu");
	SM_CHECK_STR(p.period_unit, "nanoseconds");
}

static void
test_parse_empty_parts(void)
{
	struct sm_ptype p;

	SM_REQUIRE(sm_ptype_parse("memory:alloc_space:bytes::", &p) == 0);
	SM_CHECK_STR(p.name, "memory");
	SM_CHECK_STR(p.sample_type, "alloc_space");
	SM_CHECK_STR(p.sample_unit, "bytes");
	SM_CHECK_STR(p.period_type, "");
	SM_CHECK_STR(p.period_unit, "");
	SM_REQUIRE(sm_ptype_parse("::::", &p) == 0);
	SM_CHECK_STR(p.name, "");
}

static void
test_parse_delta(void)
{
	struct sm_ptype p;

	SM_REQUIRE(sm_ptype_parse("memory:alloc_space:bytes:space:bytes:delta",
	    &p) == 0);
	SM_CHECK_STR(p.period_unit, "bytes");
	SM_CHECK_EQ(sm_ptype_parse("a:b:c:d:e:cumulative", &p), SM_EINVAL);
	SM_CHECK_EQ(sm_ptype_parse("a:b:c:d:e:", &p), SM_EINVAL);
	SM_CHECK_EQ(sm_ptype_parse("a:b:c:d:e:delta:x", &p), SM_EINVAL);
}

static void
test_parse_bad(void)
{
	struct sm_ptype p;
	char longid[400];

	SM_CHECK_EQ(sm_ptype_parse("", &p), SM_EINVAL);
	SM_CHECK_EQ(sm_ptype_parse("process_cpu", &p), SM_EINVAL);
	SM_CHECK_EQ(sm_ptype_parse("a:b:c:d", &p), SM_EINVAL);
	memset(longid, 'x', sizeof(longid));
	memcpy(longid, "a:b:c:d:", 8);
	longid[8 + SM_PTYPE_PART_MAX] = '\0';   /* last part one too long */
	SM_CHECK_EQ(sm_ptype_parse(longid, &p), SM_EINVAL);
	longid[8 + SM_PTYPE_PART_MAX - 1] = '\0';
	SM_CHECK_EQ(sm_ptype_parse(longid, &p), 0);
}

static void
test_format(void)
{
	struct sm_ptype p;
	char buf[128], tiny[8];

	SM_REQUIRE(sm_ptype_parse("wall:wall:nanoseconds:cpu:nanoseconds:delta",
	    &p) == 0);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "wall:wall:nanoseconds:cpu:nanoseconds");
	SM_CHECK_EQ(sm_ptype_format(&p, tiny, sizeof(tiny)), SM_ETOOBIG);
	SM_CHECK_STR(tiny, "");
	SM_REQUIRE(sm_ptype_parse("memory:alloc_space:bytes::", &p) == 0);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "memory:alloc_space:bytes::");
}

/* Every suffix ptype.h lists, with its (metric, type, unit, period). */
static const struct {
	const char *suffix, *metric, *type, *unit;
	bool period;
} legacy_want[] = {
	{ "cpu", "process_cpu", "samples", "count", true },
	{ "itimer", "process_cpu", "samples", "count", true },
	{ "wall", "wall", "samples", "count", true },
	{ "seconds", "wall", "samples", "count", true },
	{ "nanoseconds", "wall", "samples", "count", true },
	{ "microseconds", "wall", "samples", "count", true },
	{ "milliseconds", "wall", "samples", "count", true },
	{ "inuse_objects", "memory", "inuse_objects", "count", false },
	{ "alloc_objects", "memory", "alloc_objects", "count", false },
	{ "inuse_space", "memory", "inuse_space", "bytes", false },
	{ "alloc_space", "memory", "alloc_space", "bytes", false },
	{ "goroutines", "goroutine", "goroutines", "count", false },
	{ "mutex_count", "mutex", "contentions", "count", false },
	{ "mutex_duration", "mutex", "delay", "nanoseconds", false },
	{ "block_count", "block", "contentions", "count", false },
	{ "lock_count", "block", "contentions", "count", false },
	{ "block_duration", "block", "delay", "nanoseconds", false },
	{ "lock_duration", "block", "delay", "nanoseconds", false },
	{ "alloc_in_new_tlab_objects", "memory", "alloc_in_new_tlab_objects",
	    "count", false },
	{ "alloc_outside_tlab_objects", "memory", "alloc_outside_tlab_objects",
	    "count", false },
	{ "alloc_in_new_tlab_bytes", "memory", "alloc_in_new_tlab_bytes",
	    "bytes", false },
	{ "alloc_outside_tlab_bytes", "memory", "alloc_outside_tlab_bytes",
	    "bytes", false },
	{ "live", "memory", "live", "count", false },
	{ "exceptions", "exceptions", "samples", "count", false },
	{ "bytes", "memory", "samples", "bytes", false },
};

static void
test_legacy_table(void)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(legacy_want); i++) {
		const char *s = legacy_want[i].suffix;
		const struct sm_legacy_type *lt;

		lt = sm_legacy_type_lookup(s, strlen(s));
		SM_CHECKF(lt != NULL, "suffix %s", s);
		if (lt == NULL)
			continue;
		SM_CHECK_STR(lt->suffix, s);
		SM_CHECK_STR(lt->metric, legacy_want[i].metric);
		SM_CHECK_STR(lt->sample_type, legacy_want[i].type);
		SM_CHECK_STR(lt->sample_unit, legacy_want[i].unit);
		SM_CHECKF(lt->period == legacy_want[i].period, "suffix %s", s);
	}
}

static void
test_legacy_lookup_unknown(void)
{
	SM_CHECK(sm_legacy_type_lookup("foo", 3) == NULL);
	SM_CHECK(sm_legacy_type_lookup("", 0) == NULL);
	SM_CHECK(sm_legacy_type_lookup("CPU", 3) == NULL);
	/* Length-bounded: "cpuX" with n = 3 is "cpu". */
	SM_CHECK(sm_legacy_type_lookup("cpuX", 3) != NULL);
	SM_CHECK(sm_legacy_type_lookup("cp", 2) == NULL);
}

static void
test_resolve_cpu(void)
{
	const struct sm_legacy_type *lt = sm_legacy_type_lookup("cpu", 3);
	struct sm_ptype p;
	int64_t period;
	char buf[128];

	SM_REQUIRE(lt != NULL);
	sm_legacy_type_resolve(lt, 100, &p, &period);
	SM_CHECK_EQ(period, 10000000);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "process_cpu:cpu:nanoseconds:cpu:nanoseconds");

	sm_legacy_type_resolve(lt, 0, &p, &period);
	SM_CHECK_EQ(period, 0);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "process_cpu:samples:count::");

	/* Integer division. */
	sm_legacy_type_resolve(lt, 99, &p, &period);
	SM_CHECK_EQ(period, 10101010);
	sm_legacy_type_resolve(lt, 1, &p, &period);
	SM_CHECK_EQ(period, 1000000000);
	/* Above 1 GHz the period would be 0; it is clamped to 1. */
	sm_legacy_type_resolve(lt, 2000000000u, &p, &period);
	SM_CHECK_EQ(period, 1);
}

static void
test_resolve_wall_and_others(void)
{
	struct sm_ptype p;
	int64_t period;
	char buf[128];

	sm_legacy_type_resolve(sm_legacy_type_lookup("wall", 4), 100, &p,
	    &period);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "wall:wall:nanoseconds:cpu:nanoseconds");
	SM_CHECK_EQ(period, 10000000);

	sm_legacy_type_resolve(sm_legacy_type_lookup("milliseconds", 12), 50,
	    &p, &period);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "wall:wall:nanoseconds:cpu:nanoseconds");
	SM_CHECK_EQ(period, 20000000);

	sm_legacy_type_resolve(sm_legacy_type_lookup("itimer", 6), 100, &p,
	    &period);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "process_cpu:cpu:nanoseconds:cpu:nanoseconds");

	/* Non-period types ignore the sample rate. */
	sm_legacy_type_resolve(sm_legacy_type_lookup("alloc_space", 11), 100,
	    &p, &period);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "memory:alloc_space:bytes::");
	SM_CHECK_EQ(period, 0);

	sm_legacy_type_resolve(sm_legacy_type_lookup("mutex_duration", 14),
	    100, &p, &period);
	SM_REQUIRE(sm_ptype_format(&p, buf, sizeof(buf)) == 0);
	SM_CHECK_STR(buf, "mutex:delay:nanoseconds::");
}

static void
test_render_units(void)
{
	const char *units;
	uint32_t rate;

	sm_ptype_render_units("cpu", "nanoseconds", &units, &rate);
	SM_CHECK_STR(units, "samples");
	SM_CHECK_EQ(rate, 1000000000);
	sm_ptype_render_units("samples", "count", &units, &rate);
	SM_CHECK_STR(units, "objects");
	SM_CHECK_EQ(rate, 100);
	sm_ptype_render_units("inuse_objects", "count", &units, &rate);
	SM_CHECK_STR(units, "objects");
	sm_ptype_render_units("alloc_objects", "count", &units, &rate);
	SM_CHECK_STR(units, "objects");
	sm_ptype_render_units("goroutine", "count", &units, &rate);
	SM_CHECK_STR(units, "objects");
	SM_CHECK_EQ(rate, 100);
	sm_ptype_render_units("alloc_space", "bytes", &units, &rate);
	SM_CHECK_STR(units, "bytes");
	SM_CHECK_EQ(rate, 100);
	sm_ptype_render_units("wall", "nanoseconds", &units, &rate);
	SM_CHECK_STR(units, "nanoseconds");
	SM_CHECK_EQ(rate, 100);
	sm_ptype_render_units("contentions", "count", &units, &rate);
	SM_CHECK_STR(units, "count");
}

static void
test_goroutines_alias(void)
{
	SM_CHECK_STR(sm_legacy_suffix_for("goroutine", "goroutines", "count"),
	    "goroutines");
	SM_CHECK_STR(sm_legacy_suffix_for("goroutines", "goroutine", "count"),
	    "goroutines");
	SM_CHECK(sm_legacy_alias_lookup("goroutines", 10) != NULL);
	SM_CHECK(sm_legacy_alias_lookup("cpu", 3) == NULL);
	SM_CHECK(sm_legacy_suffix_for("goroutines", "goroutine", "bytes") ==
	    NULL);
}

SM_TEST_MAIN(
	{ "legacy: goroutines names Go's goroutine profile too", test_goroutines_alias },
	{ "parse: five parts", test_parse_five_parts },
	{ "parse: empty parts", test_parse_empty_parts },
	{ "parse: sixth part must be delta", test_parse_delta },
	{ "parse: wrong part count and long parts", test_parse_bad },
	{ "format: round trip and ETOOBIG", test_format },
	{ "legacy: every suffix of ptype.h", test_legacy_table },
	{ "legacy: unknown suffixes", test_legacy_lookup_unknown },
	{ "resolve: cpu with and without sampleRate", test_resolve_cpu },
	{ "resolve: wall, itimer and non-period types",
	    test_resolve_wall_and_others },
	{ "render units", test_render_units },
)
