/*
 * config_test.c -- the scrape configuration (scr_int.h): defaults, keys,
 * precise errors, file discovery files, and the relabel actions.
 */
#include "scraper/scr_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sm_test.h"

static char *
write_tmp(const char *text)
{
	char *path = strdup("/tmp/sm-scrape-cfg-XXXXXX");
	int fd = mkstemp(path);

	SM_REQUIRE(fd >= 0);
	SM_REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	return (path);
}

static int
load(const char *text, struct scr_config **c, struct sm_err *err)
{
	char *path = write_tmp(text);
	int rv = scr_config_load(path, c, err);

	unlink(path);
	free(path);
	return (rv);
}

static void
test_defaults_and_keys(void)
{
	struct scr_config *c;
	struct sm_err err;

	SM_REQUIRE(load("scrape_configs:\n"
	    "  - job_name: a\n"
	    "    static_configs:\n"
	    "      - targets: [\"h:1\", \"h:2\"]\n"
	    "        labels: { env: prod }\n"
	    "  - job_name: b\n"
	    "    scrape_interval: 30s\n"
	    "    scrape_timeout: 5s\n"
	    "    scheme: https\n"
	    "    tenant_id: t1\n"
	    "    tls_config: { insecure_skip_verify: true }\n"
	    "    profiling_config:\n"
	    "      pprof_config:\n"
	    "        block: { enabled: false }\n"
	    "        memory: { path: /mem, delta_path: /dmem }\n"
	    "    file_sd_configs:\n"
	    "      - files: [/x/*.json]\n"
	    "        refresh_interval: 1m\n", &c, &err) == 0);
	SM_CHECK_EQ(c->njobs, 2);
	SM_CHECK_EQ(c->jobs[0].interval_ms, 15000);
	SM_CHECK_EQ(c->jobs[0].timeout_ms, 10000);
	SM_CHECK_STR(c->jobs[0].scheme, "http");
	SM_CHECK(c->jobs[0].prof[SCR_BLOCK].enabled);
	SM_CHECK_STR(c->jobs[0].prof[SCR_CPU].path, "/debug/pprof/profile");
	SM_CHECK_STR(c->jobs[0].prof[SCR_MEMORY].delta_path,
	    "/debug/pprof/delta_heap");
	SM_CHECK_EQ(c->jobs[0].groups[0].ntargets, 2);
	SM_CHECK_STR(c->jobs[0].groups[0].labels[0].value, "prod");
	SM_CHECK_EQ(c->jobs[1].interval_ms, 30000);
	SM_CHECK_STR(c->jobs[1].tenant, "t1");
	SM_CHECK(c->jobs[1].insecure);
	SM_CHECK(!c->jobs[1].prof[SCR_BLOCK].enabled);
	SM_CHECK_STR(c->jobs[1].prof[SCR_MEMORY].path, "/mem");
	SM_CHECK_STR(c->jobs[1].prof[SCR_MEMORY].delta_path, "/dmem");
	SM_CHECK_EQ(c->jobs[1].fsd[0].refresh_ms, 60000);
	scr_config_free(c);
}

static void
test_errors(void)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "scrape_configs:\n  - job_name: a\n    scrape_intervl: 1s\n",
		    "line 3: unknown key \"scrape_intervl\"" },
		{ "scrape_configs:\n  - scrape_interval: 5s\n",
		    "job_name is required" },
		{ "scrape_configs:\n  - job_name: a\n  - job_name: a\n",
		    "used twice" },
		{ "scrape_configs:\n  - job_name: a\n    scrape_interval: 5s\n"
		    "    scrape_timeout: 6s\n", "longer than scrape_interval" },
		{ "scrape_configs:\n  - job_name: a\n    profiling_config:\n"
		    "      pprof_config:\n        cpu: { enabled: true }\n",
		    "unknown profile \"cpu\"" },
		{ "scrape_configs:\n  - job_name: a\n    relabel_configs:\n"
		    "      - action: hashmod\n", "not served" },
		{ "scrape_configs:\n  - job_name: a\n    relabel_configs:\n"
		    "      - source_labels: [x]\n        regex: \"(\"\n"
		    "        target_label: y\n", "regex" },
		{ "jobs: []\n", "unknown key \"jobs\"" },
		{ "scrape_configs: [\n", ":2:1: did not find" },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		struct scr_config *c = NULL;
		struct sm_err err;

		sm_err_clear(&err);
		SM_CHECK(load(cases[i].text, &c, &err) != 0);
		SM_CHECK(c == NULL);
		SM_CHECKF(strstr(err.msg, cases[i].want) != NULL,
		    "case %zu: \"%s\" lacks \"%s\"", i, err.msg,
		    cases[i].want);
	}
}

static void
test_relabel(void)
{
	struct scr_config *c;
	struct scr_labels ls = { NULL, 0, 0 };
	struct sm_err err;
	bool keep;

	SM_REQUIRE(load("scrape_configs:\n"
	    "  - job_name: a\n"
	    "    relabel_configs:\n"
	    "      - source_labels: [__address__]\n"
	    "        regex: \"(.*):(\\\\d+)\"\n"
	    "        target_label: host\n"
	    "        replacement: \"$1/${2}\"\n"
	    "      - regex: \"__meta_(.*)\"\n"
	    "        action: labelmap\n"
	    "        replacement: m_$1\n"
	    "      - source_labels: [env, tier]\n"
	    "        separator: \"-\"\n"
	    "        regex: prod-.*\n"
	    "        action: keep\n"
	    "      - source_labels: [tier]\n"
	    "        regex: db\n"
	    "        action: drop\n", &c, &err) == 0);
	SM_REQUIRE(scr_labels_set(&ls, "__address__", "10.0.0.1:6060") == 0);
	SM_REQUIRE(scr_labels_set(&ls, "__meta_zone", "z1") == 0);
	SM_REQUIRE(scr_labels_set(&ls, "env", "prod") == 0);
	SM_REQUIRE(scr_labels_set(&ls, "tier", "web") == 0);
	SM_REQUIRE(scr_relabel(&c->jobs[0], &ls, &keep, &err) == 0);
	SM_CHECK(keep);
	SM_CHECK_STR(scr_labels_get(&ls, "host"), "10.0.0.1/6060");
	SM_CHECK_STR(scr_labels_get(&ls, "m_zone"), "z1");
	SM_REQUIRE(scr_labels_set(&ls, "tier", "db") == 0);
	SM_REQUIRE(scr_relabel(&c->jobs[0], &ls, &keep, &err) == 0);
	SM_CHECK(!keep);                    /* dropped */
	SM_REQUIRE(scr_labels_set(&ls, "env", "dev") == 0);
	SM_REQUIRE(scr_labels_set(&ls, "tier", "web") == 0);
	SM_REQUIRE(scr_relabel(&c->jobs[0], &ls, &keep, &err) == 0);
	SM_CHECK(!keep);                    /* not kept */
	/* an empty value removes the label */
	SM_REQUIRE(scr_labels_set(&ls, "env", "") == 0);
	SM_CHECK(scr_labels_get(&ls, "env") == NULL);
	scr_labels_free(&ls);
	scr_config_free(c);
}

static void
test_filesd(void)
{
	struct scr_group *g;
	uint32_t n;
	struct sm_err err;
	char *path = write_tmp("[{\"targets\": [\"a:1\", \"b:2\"], "
	    "\"labels\": {\"app\": \"shop\"}}, {\"targets\": [\"c:3\"]}]");

	SM_REQUIRE(scr_filesd_read(path, &g, &n, &err) == 0);
	SM_CHECK_EQ(n, 2);
	SM_CHECK_EQ(g[0].ntargets, 2);
	SM_CHECK_STR(g[0].labels[0].name, "app");
	SM_CHECK_STR(g[1].targets[0], "c:3");
	scr_groups_free(g, n);
	unlink(path);
	free(path);
	path = write_tmp("{\"targets\": 1}");
	SM_CHECK(scr_filesd_read(path, &g, &n, &err) == SM_EINVAL);
	unlink(path);
	free(path);
}

/* bearer_token_file: the file's token without its line end (a trailing
 * space is the token's own); a file that does not open names itself. */
static void
test_bearer_file(void)
{
	char *tok = write_tmp("s3cret \r\n"), text[256];
	struct scr_config *c;
	struct sm_err err;

	(void)snprintf(text, sizeof(text), "scrape_configs:\n"
	    "  - job_name: a\n"
	    "    bearer_token_file: %s\n", tok);
	SM_REQUIRE(load(text, &c, &err) == 0);
	SM_CHECK_STR(c->jobs[0].bearer, "s3cret ");
	scr_config_free(c);
	unlink(tok);
	SM_CHECK(load(text, &c, &err) == SM_EINVAL);
	SM_CHECKF(strstr(err.msg, "bearer_token_file") != NULL &&
	    strstr(err.msg, tok) != NULL &&
	    strstr(err.msg, "No such file") != NULL, "%s", err.msg);
	free(tok);
}

SM_TEST_MAIN(
	{ "defaults, every key, profiles and discovery", test_defaults_and_keys },
	{ "bearer_token_file: read, line end cut", test_bearer_file },
	{ "errors name the key, the line or the rule", test_errors },
	{ "relabel: replace with groups, labelmap, keep, drop", test_relabel },
	{ "file discovery: JSON groups, a bad file refused", test_filesd },
)
