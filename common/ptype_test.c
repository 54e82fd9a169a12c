/*
 * ptype_test.c -- profile type ids, the legacy table, render units.
 */
#include "common/ptype.h"

#include "sm_test.h"

/* Parse id (it must parse) and check its five parts. */
static void
check_parts(const char *id, const char *name, const char *sample_type,
    const char *sample_unit, const char *period_type,
    const char *period_unit)
{
	struct sm_ptype p;

	SM_REQUIRE(sm_ptype_parse(id, &p) == 0);
	SM_CHECK_STR(p.name, name);
	SM_CHECK_STR(p.sample_type, sample_type);
	SM_CHECK_STR(p.sample_unit, sample_unit);
	SM_CHECK_STR(p.period_type, period_type);
	SM_CHECK_STR(p.period_unit, period_unit);
}

static void
test_parse_five_parts(void)
{
	check_parts("process_cpu:cpu:nanoseconds:cpu:nanoseconds",
	    "process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds");
}

static void
test_parse_empty_parts(void)
{
	struct sm_ptype p;

	check_parts("memory:alloc_space:bytes::", "memory", "alloc_space",
	    "bytes", "", "");
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

/*
 * What a user sees for each legacy /ingest name: the profile type id that
 * Pyroscope's ProfileTypes/`/api/apps` answers for `<app>.<suffix>` sent
 * with sampleRate=100 (convertMetadata in ingest_adapter.go), not a copy
 * of ptype.c's table.  And the way back: the legacy name the querier
 * builds for that type (sm_legacy_suffix_for) must resolve to the same
 * type, or `/render?query=<app>.<suffix>` would not find the data.
 */
static const struct {
	const char *suffix, *id;
} legacy_ids[] = {
	{ "cpu", "process_cpu:cpu:nanoseconds:cpu:nanoseconds" },
	{ "itimer", "process_cpu:cpu:nanoseconds:cpu:nanoseconds" },
	{ "wall", "wall:wall:nanoseconds:cpu:nanoseconds" },
	{ "seconds", "wall:wall:nanoseconds:cpu:nanoseconds" },
	{ "milliseconds", "wall:wall:nanoseconds:cpu:nanoseconds" },
	{ "inuse_space", "memory:inuse_space:bytes::" },
	{ "alloc_objects", "memory:alloc_objects:count::" },
	{ "goroutines", "goroutine:goroutines:count::" },
	{ "mutex_duration", "mutex:delay:nanoseconds::" },
	{ "lock_count", "block:contentions:count::" },
	{ "alloc_in_new_tlab_bytes", "memory:alloc_in_new_tlab_bytes:bytes::" },
	{ "live", "memory:live:count::" },
	{ "exceptions", "exceptions:samples:count::" },
};

static void
test_legacy_ids(void)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(legacy_ids); i++) {
		const char *s = legacy_ids[i].suffix, *back;
		const struct sm_legacy_type *lt, *lt2;
		struct sm_ptype p, p2;
		int64_t period, period2;
		char id[256], id2[256];

		lt = sm_legacy_type_lookup(s, strlen(s));
		SM_CHECKF(lt != NULL, "suffix %s", s);
		if (lt == NULL)
			continue;
		sm_legacy_type_resolve(lt, 100, &p, &period);
		SM_REQUIRE(sm_ptype_format(&p, id, sizeof(id)) == 0);
		SM_CHECK_STR(id, legacy_ids[i].id);
		SM_CHECKF(period == (lt->period ? 10000000 : 0), "suffix %s", s);
		/* the name the querier gives this type finds it again */
		back = sm_legacy_suffix_for(p.name, p.sample_type,
		    p.sample_unit);
		SM_CHECKF(back != NULL, "no legacy name for %s", id);
		if (back == NULL)
			continue;
		lt2 = sm_legacy_type_lookup(back, strlen(back));
		if (lt2 == NULL)
			lt2 = sm_legacy_alias_lookup(back, strlen(back));
		SM_CHECKF(lt2 != NULL, "%s -> %s resolves", id, back);
		if (lt2 == NULL)
			continue;
		sm_legacy_type_resolve(lt2, 100, &p2, &period2);
		SM_REQUIRE(sm_ptype_format(&p2, id2, sizeof(id2)) == 0);
		SM_CHECK_STR(id2, id);
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

/* sm_ptype_render_units(sample type, unit): the units and, where
 * rate >= 0, the rate. */
static const struct {
	const char *type, *unit, *units;
	int64_t rate;
} render_units[] = {
	{ "cpu", "nanoseconds", "samples", 1000000000 },
	{ "samples", "count", "objects", 100 },
	{ "inuse_objects", "count", "objects", -1 },
	{ "alloc_objects", "count", "objects", -1 },
	{ "goroutine", "count", "objects", 100 },
	{ "alloc_space", "bytes", "bytes", 100 },
	{ "wall", "nanoseconds", "nanoseconds", 100 },
	{ "contentions", "count", "count", -1 },
};

static void
test_render_units(void)
{
	for (size_t i = 0; i < SM_ARRAY_LEN(render_units); i++) {
		const char *units;
		uint32_t rate;

		sm_ptype_render_units(render_units[i].type,
		    render_units[i].unit, &units, &rate);
		SM_CHECK_STR(units, render_units[i].units);
		if (render_units[i].rate >= 0)
			SM_CHECKF(rate == render_units[i].rate,
			    "%s %s: rate %u, want %lld", render_units[i].type,
			    render_units[i].unit, rate,
			    (long long)render_units[i].rate);
	}
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
	{ "legacy: the type ids users see, and back to the name", test_legacy_ids },
	{ "legacy: unknown suffixes", test_legacy_lookup_unknown },
	{ "resolve: cpu with and without sampleRate", test_resolve_cpu },
	{ "resolve: wall, itimer and non-period types",
	    test_resolve_wall_and_others },
	{ "render units", test_render_units },
)
