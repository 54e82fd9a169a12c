/*
 * overrides_test.c -- the rules of overrides.h: Pyroscope's runtime config
 * shape, defaults for what is not set, bad files refused (at create) or
 * ignored keeping the old table (at reload), and the reload thread
 * picking up a change.
 */
#include "common/overrides.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sm_test.h"

static char ov_path[] = "/tmp/smolder-overrides-test-XXXXXX";
static const struct sm_limits def = {
	.ingestion_rate_mb = 4,
	.ingestion_burst_size_mb = 2,
	.max_label_name_length = 1024,
	.max_label_value_length = 2048,
	.max_label_names_per_series = 30,
	.max_profile_size_bytes = 4 << 20,
	.max_profile_stacktrace_samples = 16000,
	.max_profile_stacktrace_sample_labels = 100,
	.max_profile_stacktrace_depth = 1000,
	.max_profile_symbol_value_length = 65535,
	.max_query_length_ms = 0,
	.max_flamegraph_nodes_default = 8192,
	.max_flamegraph_nodes_max = 1048576,
};

/* Write `body` to the file (a fresh inode: rename over it). */
static void
write_file(const char *body)
{
	SM_CHECK_EQ(sm_test_replace_file(ov_path, body), 0);
}

/* The overrides of a file holding `body`, reloaded every second; NULL
 * (the failure recorded) when they do not load. */
static struct sm_overrides *
ov_load(const char *body)
{
	struct sm_overrides *o = NULL;
	struct sm_err err;

	write_file(body);
	SM_CHECK_EQ(sm_overrides_create(ov_path, 1000, &o, &err), 0);
	if (o == NULL)
		SM_TEST_FAILF("%s", err.msg);
	return (o);
}

static void
test_setup(void)
{
	SM_CHECK(sm_test_temp_file(ov_path) == 0);
}

static void
test_no_file(void)
{
	struct sm_overrides *o;
	struct sm_limits l;
	struct sm_err err;

	SM_CHECK_EQ(sm_overrides_create("", 0, &o, &err), 0);
	sm_overrides_get(o, "anyone", &def, &l);
	SM_CHECK(l.ingestion_rate_mb == 4 && l.ingestion_burst_size_mb == 2);
	sm_overrides_destroy(o);
	sm_overrides_get(NULL, "anyone", &def, &l);
	SM_CHECK(memcmp(&l, &def, sizeof(l)) == 0);
}

static void
test_good_file(void)
{
	struct sm_overrides *o;
	struct sm_limits l;
	struct sm_err err;

	o = ov_load("# Pyroscope's runtime config\n"
	    "multi_kv_config:\n  primary: consul\n"
	    "overrides:\n"
	    "  tenant-a:\n"
	    "    ingestion_rate_mb: 0.5\n"
	    "    ingestion_burst_size_mb: 1\n"
	    "    max_query_lookback: 1d\n"
	    "    max_query_length: 24h\n"
	    "    max_flamegraph_nodes_max: 100\n"
	    "    max_global_series_per_tenant: 50\n"
	    "  b:\n"
	    "    max_local_series_per_tenant: 7\n"
	    "    ingestion_burst_size_mb: 8\n"
	    "    max_label_names_per_series: 3\n"
	    "    max_profile_size_bytes: 1000\n"
	    "    max_profile_stacktrace_samples: 0\n"
	    "  c:\n");
	if (o == NULL)
		return;
	SM_CHECK_EQ(sm_overrides_ntenants(o), 3);
	sm_overrides_get(o, "tenant-a", &def, &l);
	SM_CHECK(l.ingestion_rate_mb == 0.5 && l.ingestion_burst_size_mb == 1);
	SM_CHECK_EQ(l.max_query_length_ms, 24 * 3600 * 1000);
	SM_CHECK_EQ(l.max_query_lookback_ms, 24 * 3600 * 1000);
	SM_CHECK_EQ(l.max_flamegraph_nodes_max, 100);
	SM_CHECK_EQ(l.max_flamegraph_nodes_default, 8192);
	SM_CHECK_EQ(l.max_global_series_per_tenant, 50);
	SM_CHECK_EQ(l.max_local_series_per_tenant, 0);
	sm_overrides_get(o, "b", &def, &l);
	SM_CHECK_EQ(l.max_global_series_per_tenant, 0);
	SM_CHECK_EQ(l.max_local_series_per_tenant, 7);
	SM_CHECK(l.ingestion_rate_mb == 4 && l.ingestion_burst_size_mb == 8);
	SM_CHECK_EQ(l.max_label_names_per_series, 3);
	SM_CHECK_EQ(l.max_profile_size_bytes, 1000);
	SM_CHECK_EQ(l.max_profile_stacktrace_samples, 0);
	SM_CHECK_EQ(l.max_profile_stacktrace_depth, 1000);
	SM_CHECK_EQ(l.max_query_lookback_ms, 0);    /* not set: the default */
	sm_overrides_get(o, "c", &def, &l);
	SM_CHECK(l.ingestion_rate_mb == 4 && l.ingestion_burst_size_mb == 2);
	sm_overrides_get(o, "tenant", &def, &l);
	SM_CHECK(l.ingestion_rate_mb == 4);
	sm_overrides_destroy(o);

	write_file("");
	SM_CHECK_EQ(sm_overrides_create(ov_path, 1000, &o, &err), 0);
	SM_CHECK_EQ(sm_overrides_ntenants(o), 0);
	sm_overrides_destroy(o);
	write_file("overrides:\n");
	SM_CHECK_EQ(sm_overrides_create(ov_path, 1000, &o, &err), 0);
	SM_CHECK_EQ(sm_overrides_ntenants(o), 0);
	sm_overrides_destroy(o);
}

/*
 * compactor_blocks_retention_period: a Go duration, 0 = keep (kept apart
 * from "not set" by the caller's default); sm_overrides_tenants lists
 * every tenant of the file, sorted, as copies that outlive a reload.
 */
static void
test_retention_tenants(void)
{
	struct sm_overrides *o;
	struct sm_limits d = def, l;
	struct sm_err err;
	char **ids = NULL;
	size_t n = 9;

	SM_CHECK_EQ(sm_overrides_tenants(NULL, &ids, &n), 0);
	SM_CHECK(ids == NULL && n == 0);
	o = ov_load("overrides:\n"
	    "  zed:\n"
	    "    compactor_blocks_retention_period: 720h\n"
	    "  keep:\n"
	    "    compactor_blocks_retention_period: 0\n"
	    "  other:\n"
	    "    max_query_length: 1h\n");
	if (o == NULL)
		return;
	d.compactor_blocks_retention_period_ms = -1;
	sm_overrides_get(o, "zed", &d, &l);
	SM_CHECK_EQ(l.compactor_blocks_retention_period_ms,
	    720LL * 3600 * 1000);
	sm_overrides_get(o, "keep", &d, &l);
	SM_CHECK_EQ(l.compactor_blocks_retention_period_ms, 0);
	sm_overrides_get(o, "other", &d, &l);
	SM_CHECK_EQ(l.compactor_blocks_retention_period_ms, -1);
	SM_CHECK_EQ(sm_overrides_tenants(o, &ids, &n), 0);
	SM_CHECK_EQ(n, 3);
	if (n == 3) {
		SM_CHECK_STR(ids[0], "keep");
		SM_CHECK_STR(ids[1], "other");
		SM_CHECK_STR(ids[2], "zed");
	}
	/* A reload to an empty table leaves the copies valid. */
	write_file("");
	SM_CHECK_EQ(sm_overrides_reload(o, &err), 0);
	SM_CHECK_EQ(sm_overrides_ntenants(o), 0);
	if (n == 3)
		SM_CHECK_STR(ids[2], "zed");
	sm_overrides_tenants_free(ids, n);
	SM_CHECK_EQ(sm_overrides_tenants(o, &ids, &n), 0);
	SM_CHECK(ids == NULL && n == 0);
	sm_overrides_destroy(o);
}

static void
test_bad_files(void)
{
	static const struct {
		const char *body, *want;
	} cases[] = {
		{ "overrides:\n  a:\n    ingestion_rate_mb: [1\n",
		    ":4:1: did not find" },
		{ "overrides:\n  a:\n    ingestion_rate_mb: lots\n",
		    "must be a number" },
		{ "overrides:\n  a:\n    ingestion_rate_mb: -1\n",
		    "must be a number" },
		{ "overrides:\n  a: 3\n", "must be a mapping" },
		{ "overrides:\n  a:\n    max_query_length: soon\n",
		    "must be a duration" },
		{ "overrides:\n  a:\n    max_query_lookback: -1h\n",
		    "max_query_lookback must be a duration" },
		{ "overrides:\n  a:\n    max_profile_size_bytes: 0\n",
		    "must be an integer > 0" },
		{ "overrides:\n  a:\n    max_label_names_per_series: 2.5\n",
		    "must be an integer >= 0" },
		{ "overrides:\n  a:\n    max_profile_stacktrace_depth: -1\n",
		    "must be an integer >= 0" },
		{ "overrides:\n  a:\n    max_global_series_per_tenant: -5\n",
		    "must be an integer >= 0" },
		{ "overrides:\n  a:\n    compactor_blocks_retention_period: "
		    "-1h\n", ":3" },
		{ "overrides: [a]\n", "must be a mapping" },
		{ "- a\n", "must be a mapping" },
		{ "overrides:\n  a:\n    ingestion_rate_mb: 1\n"
		    "  a:\n    ingestion_rate_mb: 2\n", "listed twice" },
		{ "overrides:\n  \"a/b\":\n    ingestion_rate_mb: 1\n", ":2" },
	};
	struct sm_overrides *o;
	struct sm_err err;

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		write_file(cases[i].body);
		sm_err_clear(&err);
		SM_CHECKF(sm_overrides_create(ov_path, 1000, &o,
		    &err) != 0, "case %zu accepted", i);
		SM_CHECKF(strstr(err.msg, cases[i].want) != NULL,
		    "case %zu: %s", i, err.msg);
		SM_CHECK(o == NULL);
	}
	SM_CHECK(sm_overrides_create("/nonexistent/x.yaml", 1000, &o,
	    &err) != 0);
}

static void
test_reload(void)
{
	struct sm_overrides *o;
	struct sm_limits l;
	struct sm_err err;
	int i;

	write_file("overrides:\n  a:\n    ingestion_rate_mb: 1\n");
	SM_CHECK_EQ(sm_overrides_create(ov_path, 50, &o, &err), 0);
	if (o == NULL)
		return;
	/* A bad file keeps the old table. */
	write_file("overrides:\n  a:\n    ingestion_rate_mb: {\n");
	SM_CHECK(sm_overrides_reload(o, &err) != 0);
	sm_overrides_get(o, "a", &def, &l);
	SM_CHECK(l.ingestion_rate_mb == 1);
	/* The thread picks up a good change within two periods. */
	write_file("overrides:\n  a:\n    ingestion_rate_mb: 7\n");
	for (i = 0; i < 100; i++) {
		sm_overrides_get(o, "a", &def, &l);
		if (l.ingestion_rate_mb == 7)
			break;
		usleep(20000);
	}
	SM_CHECKF(l.ingestion_rate_mb == 7, "not reloaded after %d ms",
	    i * 20);
	/* Removing the tenant gives it the defaults back. */
	write_file("overrides:\n  b:\n    ingestion_rate_mb: 3\n");
	SM_CHECK_EQ(sm_overrides_reload(o, &err), 0);
	sm_overrides_get(o, "a", &def, &l);
	SM_CHECK(l.ingestion_rate_mb == 4);
	sm_overrides_destroy(o);
}

static void
test_cleanup(void)
{
	unlink(ov_path);
}

SM_TEST_MAIN(
	{ "setup: a temporary file", test_setup },
	{ "no file: the defaults for everyone", test_no_file },
	{ "Pyroscope's shape; unknown keys ignored; defaults fill in",
	    test_good_file },
	{ "retention period override; the list of tenants (copies)",
	    test_retention_tenants },
	{ "invalid files refused with the reason", test_bad_files },
	{ "reload: bad file keeps the old table; thread picks up changes",
	    test_reload },
	{ "cleanup", test_cleanup },
)
