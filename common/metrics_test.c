/*
 * metrics_test.c -- the Prometheus registry: exact exposition of each kind,
 * escaping, ordering, number formatting, histogram bounds, cardinality
 * overflow, gauge functions, idempotent registration, NULL no-ops,
 * allocation failures, programmer errors, and exact totals under
 * concurrent updates while another thread scrapes.
 *
 * The registry is process-global and never forgets a family, so every test
 * uses its own metric names and looks only at its own families' text.
 */
#include "common/metrics.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sm_test.h"

/*
 * The exposition of one family, from its HELP line up to the next
 * family's; "" when it is absent.  The caller frees it with sm_free.
 */
static char *
scrape_family(const char *name)
{
	struct sm_buf b = SM_BUF_INIT, key = SM_BUF_INIT;
	const char *start = NULL, *end;
	char *r;

	sm_metrics_write(&b);
	sm_buf_printf(&key, "\n# HELP %s ", name);
	SM_REQUIRE(sm_buf_error(&b) == 0 && sm_buf_error(&key) == 0);
	if (b.len != 0 && strncmp(b.b, key.b + 1, key.len - 1) == 0)
		start = b.b;
	else if ((start = strstr(b.b != NULL ? b.b : "", key.b)) != NULL)
		start++;
	if (start == NULL) {
		r = sm_strdup("");
	} else {
		end = strstr(start, "\n# HELP ");
		r = sm_strndup(start, end != NULL ?
		    (size_t)(end + 1 - start) : strlen(start));
	}
	sm_buf_fini(&key);
	sm_buf_fini(&b);
	SM_REQUIRE(r != NULL);
	return (r);
}

/* Compare one family's exposition with `want`. */
#define CHECK_FAMILY(name, want)                                            \
	do {                                                                \
		char *got_ = scrape_family(name);                           \
		SM_CHECK_STR(got_, want);                                   \
		sm_free(got_);                                              \
	} while (0)

/* The exposition of a family without labels: HELP, TYPE, its one sample. */
#define CHECK_UNLABELLED(name, help, type, value)                           \
	CHECK_FAMILY(name, "# HELP " name " " help "\n# TYPE " name " "    \
	    type "\n" name " " value "\n")

/* Register a family without labels; its one child (required). */
static struct sm_metric_child *
unlabelled(enum sm_metric_kind kind, const char *name, const char *help,
    const double *bounds, size_t nbounds)
{
	struct sm_metric_child *c = sm_metric_child0(sm_metric_register(kind,
	    name, help, NULL, bounds, nbounds));

	SM_REQUIRE(c != NULL);
	return (c);
}

static void
test_counter(void)
{
	struct sm_metric *m = sm_metric_register(SM_METRIC_COUNTER,
	    "t_counter_total", "Things done.", NULL, NULL, 0);
	struct sm_metric_child *c = sm_metric_child0(m);

	SM_REQUIRE(m != NULL && c != NULL);
	CHECK_UNLABELLED("t_counter_total", "Things done.", "counter", "0");
	sm_counter_inc(c);
	sm_counter_add(c, 41);
	SM_CHECK(sm_metric_value(c) == 42);
	CHECK_UNLABELLED("t_counter_total", "Things done.", "counter", "42");
	/* Integers stay integers past 2^53, where a double would round. */
	sm_counter_add(c, (UINT64_C(1) << 53) - 41);
	CHECK_UNLABELLED("t_counter_total", "Things done.", "counter",
	    "9007199254740993");
	/* sm_metric_child on an unlabelled family is its only child. */
	SM_CHECK(sm_metric_child(m) == c);
}

static void
test_counter_labels(void)
{
	static const char *const labels[] = { "method", "code", NULL };
	struct sm_metric *m = sm_metric_register(SM_METRIC_COUNTER,
	    "t_requests_total", "Requests.", labels, NULL, 0);
	struct sm_metric_child *a, *b, *c;

	SM_REQUIRE(m != NULL);
	/* No children yet: only HELP and TYPE. */
	CHECK_FAMILY("t_requests_total",
	    "# HELP t_requests_total Requests.\n"
	    "# TYPE t_requests_total counter\n");
	c = sm_metric_child(m, "POST", "500");
	a = sm_metric_child(m, "GET", "404");
	b = sm_metric_child(m, "GET", "200");
	SM_REQUIRE(a != NULL && b != NULL && c != NULL);
	SM_CHECK(a != b && b != c && a != c);
	SM_CHECK(sm_metric_child(m, "GET", "404") == a);
	sm_counter_add(a, 3);
	sm_counter_inc(b);
	sm_counter_add(c, 7);
	CHECK_FAMILY("t_requests_total",
	    "# HELP t_requests_total Requests.\n"
	    "# TYPE t_requests_total counter\n"
	    "t_requests_total{method=\"GET\",code=\"200\"} 1\n"
	    "t_requests_total{method=\"GET\",code=\"404\"} 3\n"
	    "t_requests_total{method=\"POST\",code=\"500\"} 7\n");
}

static void
test_gauge(void)
{
	struct sm_metric_child *c = unlabelled(SM_METRIC_GAUGE,
	    "t_gauge_celsius", "Temperature.", NULL, 0);

	CHECK_UNLABELLED("t_gauge_celsius", "Temperature.", "gauge", "0");
	sm_gauge_set(c, 3.5);
	sm_gauge_add(c, -5);
	SM_CHECK(sm_metric_value(c) == -1.5);
	CHECK_UNLABELLED("t_gauge_celsius", "Temperature.", "gauge", "-1.5");
	sm_gauge_set(c, -0.25);
	sm_gauge_add(c, -0.5);
	SM_CHECK(sm_metric_value(c) == -0.75);
	sm_gauge_add(c, 0.75);
	SM_CHECK(sm_metric_value(c) == 0);
	sm_gauge_set(c, INFINITY);
	CHECK_UNLABELLED("t_gauge_celsius", "Temperature.", "gauge", "+Inf");
	sm_gauge_set(c, -INFINITY);
	CHECK_UNLABELLED("t_gauge_celsius", "Temperature.", "gauge", "-Inf");
	sm_gauge_set(c, NAN);
	SM_CHECK(isnan(sm_metric_value(c)));
	CHECK_UNLABELLED("t_gauge_celsius", "Temperature.", "gauge", "NaN");
}

/* Gauge values print as Go's strconv.FormatFloat(v, 'g', -1, 64). */
static void
test_number_format(void)
{
	static const char *const labels[] = { "case", NULL };
	static const struct {
		const char *name;
		double v;
	} cases[] = {
		{ "a", 0 }, { "b", 1 }, { "c", -1 }, { "d", 0.1 },
		{ "e", 100000 }, { "f", 1e6 }, { "g", 1234567 },
		{ "h", 0.0001 }, { "i", 0.00001 }, { "j", 1.5e300 },
		{ "k", 1.0 / 3 }, { "l", 123.456 }, { "m", 9007199254740992.0 },
		{ "n", -2.5e-7 }, { "o", 0.1 + 0.2 }, { "p", 5e-324 },
		{ "q", 1.7976931348623157e308 }, { "r", 999999 },
	};
	struct sm_metric *m = sm_metric_register(SM_METRIC_GAUGE, "t_format",
	    "Formatting.", labels, NULL, 0);

	SM_REQUIRE(m != NULL);
	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++)
		sm_gauge_set(sm_metric_child(m, cases[i].name), cases[i].v);
	CHECK_FAMILY("t_format",
	    "# HELP t_format Formatting.\n"
	    "# TYPE t_format gauge\n"
	    "t_format{case=\"a\"} 0\n"
	    "t_format{case=\"b\"} 1\n"
	    "t_format{case=\"c\"} -1\n"
	    "t_format{case=\"d\"} 0.1\n"
	    "t_format{case=\"e\"} 100000\n"
	    "t_format{case=\"f\"} 1e+06\n"
	    "t_format{case=\"g\"} 1.234567e+06\n"
	    "t_format{case=\"h\"} 0.0001\n"
	    "t_format{case=\"i\"} 1e-05\n"
	    "t_format{case=\"j\"} 1.5e+300\n"
	    "t_format{case=\"k\"} 0.3333333333333333\n"
	    "t_format{case=\"l\"} 123.456\n"
	    "t_format{case=\"m\"} 9.007199254740992e+15\n"
	    "t_format{case=\"n\"} -2.5e-07\n"
	    "t_format{case=\"o\"} 0.30000000000000004\n"
	    "t_format{case=\"p\"} 5e-324\n"
	    "t_format{case=\"q\"} 1.7976931348623157e+308\n"
	    "t_format{case=\"r\"} 999999\n");
}

static void
test_histogram(void)
{
	static const double bounds[] = { 0.25, 0.5, 1 };
	struct sm_metric_child *c = unlabelled(SM_METRIC_HISTOGRAM,
	    "t_latency_seconds", "Latency.", bounds, 3);

	CHECK_FAMILY("t_latency_seconds",
	    "# HELP t_latency_seconds Latency.\n"
	    "# TYPE t_latency_seconds histogram\n"
	    "t_latency_seconds_bucket{le=\"0.25\"} 0\n"
	    "t_latency_seconds_bucket{le=\"0.5\"} 0\n"
	    "t_latency_seconds_bucket{le=\"1\"} 0\n"
	    "t_latency_seconds_bucket{le=\"+Inf\"} 0\n"
	    "t_latency_seconds_sum 0\n"
	    "t_latency_seconds_count 0\n");
	sm_histogram_observe(c, 0.125);
	sm_histogram_observe(c, 0.375);
	sm_histogram_observe(c, 0.75);
	sm_histogram_observe(c, 0.75);
	sm_histogram_observe(c, 2);
	sm_histogram_observe(c, 4);
	SM_CHECK(sm_metric_value(c) == 6);
	CHECK_FAMILY("t_latency_seconds",
	    "# HELP t_latency_seconds Latency.\n"
	    "# TYPE t_latency_seconds histogram\n"
	    "t_latency_seconds_bucket{le=\"0.25\"} 1\n"
	    "t_latency_seconds_bucket{le=\"0.5\"} 2\n"
	    "t_latency_seconds_bucket{le=\"1\"} 4\n"
	    "t_latency_seconds_bucket{le=\"+Inf\"} 6\n"
	    "t_latency_seconds_sum 8\n"
	    "t_latency_seconds_count 6\n");
}

static void
test_histogram_labels(void)
{
	static const char *const labels[] = { "route", NULL };
	static const double bounds[] = { 1, INFINITY };   /* +Inf dropped */
	struct sm_metric *m = sm_metric_register(SM_METRIC_HISTOGRAM,
	    "t_hist_route_seconds", "By route.", labels, bounds, 2);
	struct sm_metric_child *c;

	SM_REQUIRE(m != NULL);
	CHECK_FAMILY("t_hist_route_seconds",
	    "# HELP t_hist_route_seconds By route.\n"
	    "# TYPE t_hist_route_seconds histogram\n");
	c = sm_metric_child(m, "/b");
	sm_histogram_observe(c, 0.5);
	sm_histogram_observe(sm_metric_child(m, "/a"), -3);
	CHECK_FAMILY("t_hist_route_seconds",
	    "# HELP t_hist_route_seconds By route.\n"
	    "# TYPE t_hist_route_seconds histogram\n"
	    "t_hist_route_seconds_bucket{route=\"/a\",le=\"1\"} 1\n"
	    "t_hist_route_seconds_bucket{route=\"/a\",le=\"+Inf\"} 1\n"
	    "t_hist_route_seconds_sum{route=\"/a\"} -3\n"
	    "t_hist_route_seconds_count{route=\"/a\"} 1\n"
	    "t_hist_route_seconds_bucket{route=\"/b\",le=\"1\"} 1\n"
	    "t_hist_route_seconds_bucket{route=\"/b\",le=\"+Inf\"} 1\n"
	    "t_hist_route_seconds_sum{route=\"/b\"} 0.5\n"
	    "t_hist_route_seconds_count{route=\"/b\"} 1\n");
}

/* le is inclusive: a value equal to a bound counts in that bucket. */
static void
test_histogram_bounds(void)
{
	static const double bounds[] = { 0.005, 0.01 };
	struct sm_metric_child *c = unlabelled(SM_METRIC_HISTOGRAM,
	    "t_bounds_seconds", "Bounds.", bounds, 2);
	char *got;

	sm_histogram_observe(c, 0.005);
	sm_histogram_observe(c, nextafter(0.005, 0));
	sm_histogram_observe(c, nextafter(0.005, 1));
	sm_histogram_observe(c, 0.01);
	sm_histogram_observe(c, nextafter(0.01, 1));
	sm_histogram_observe(c, -INFINITY);
	got = scrape_family("t_bounds_seconds");
	SM_CHECK(strstr(got, "t_bounds_seconds_bucket{le=\"0.005\"} 3\n") !=
	    NULL);
	SM_CHECK(strstr(got, "t_bounds_seconds_bucket{le=\"0.01\"} 5\n") !=
	    NULL);
	SM_CHECK(strstr(got, "t_bounds_seconds_bucket{le=\"+Inf\"} 6\n") !=
	    NULL);
	SM_CHECK(strstr(got, "t_bounds_seconds_count 6\n") != NULL);
	SM_CHECK(strstr(got, "t_bounds_seconds_sum -Inf\n") != NULL);
	sm_free(got);
	/* NaN lands in +Inf only, and the sum becomes NaN. */
	sm_histogram_observe(c, NAN);
	got = scrape_family("t_bounds_seconds");
	SM_CHECK(strstr(got, "{le=\"0.01\"} 5\n") != NULL);
	SM_CHECK(strstr(got, "{le=\"+Inf\"} 7\n") != NULL);
	SM_CHECK(strstr(got, "t_bounds_seconds_sum NaN\n") != NULL);
	sm_free(got);
}

static void
test_histogram_default_buckets(void)
{
	struct sm_metric *m = sm_metric_register(SM_METRIC_HISTOGRAM,
	    "t_default_seconds", "Defaults.", NULL, NULL, 0);
	char *got, *p;
	int n = 0;

	SM_REQUIRE(m != NULL);
	sm_histogram_observe(sm_metric_child0(m), 30);
	sm_histogram_observe(sm_metric_child0(m), 31);
	got = scrape_family("t_default_seconds");
	for (p = got; (p = strstr(p, "_bucket{")) != NULL; p++)
		n++;
	SM_CHECK_EQ(n, 15);
	SM_CHECK(strstr(got, "\nt_default_seconds_bucket{le=\"0.001\"} 0\n")
	    != NULL);
	SM_CHECK(strstr(got, "{le=\"10\"} 0\nt_default_seconds_bucket"
	    "{le=\"30\"} 1\nt_default_seconds_bucket{le=\"+Inf\"} 2\n") != NULL);
	sm_free(got);
}

static void
test_escaping(void)
{
	static const char *const labels[] = { "path", "q", NULL };
	struct sm_metric *m = sm_metric_register(SM_METRIC_COUNTER,
	    "t_escape_total", "Help with \\ backslash and\nnewline, "
	    "\"quotes\" kept.", labels, NULL, 0);

	SM_REQUIRE(m != NULL);
	sm_counter_inc(sm_metric_child(m, "a\\b\"c\nd", ""));
	sm_counter_inc(sm_metric_child(m, "caf\xc3\xa9", NULL));
	CHECK_FAMILY("t_escape_total",
	    "# HELP t_escape_total Help with \\\\ backslash and\\nnewline, "
	    "\"quotes\" kept.\n"
	    "# TYPE t_escape_total counter\n"
	    "t_escape_total{path=\"a\\\\b\\\"c\\nd\",q=\"\"} 1\n"
	    "t_escape_total{path=\"caf\xc3\xa9\",q=\"\"} 1\n");
}

/* Families come out sorted by name whatever the registration order. */
static void
test_family_order(void)
{
	struct sm_buf b = SM_BUF_INIT;
	const char *p, *prev = NULL, *a, *bb, *c;
	size_t prev_len = 0;

	SM_REQUIRE(sm_metric_register(SM_METRIC_GAUGE, "t_sort_b", "b",
	    NULL, NULL, 0) != NULL);
	SM_REQUIRE(sm_metric_register(SM_METRIC_COUNTER, "t_sort_c", "c",
	    NULL, NULL, 0) != NULL);
	SM_REQUIRE(sm_metric_register(SM_METRIC_HISTOGRAM, "t_sort_a", "a",
	    NULL, NULL, 0) != NULL);
	sm_metrics_write(&b);
	SM_REQUIRE(sm_buf_error(&b) == 0 && b.b != NULL);
	a = strstr(b.b, "# HELP t_sort_a ");
	bb = strstr(b.b, "# HELP t_sort_b ");
	c = strstr(b.b, "# HELP t_sort_c ");
	SM_CHECK(a != NULL && bb != NULL && c != NULL && a < bb && bb < c);
	/* Every family of the process, strictly ascending. */
	for (p = b.b; (p = strstr(p, "# HELP ")) != NULL; p++) {
		const char *name = p + 7;
		size_t len = strcspn(name, " ");

		if (prev != NULL) {
			int r = strncmp(prev, name, SM_MIN(prev_len, len));

			SM_CHECKF(r < 0 || (r == 0 && prev_len < len),
			    "%.*s before %.*s", (int)prev_len, prev, (int)len,
			    name);
		}
		prev = name;
		prev_len = len;
	}
	sm_buf_fini(&b);
}

static void
test_idempotent_registration(void)
{
	static const char *const labels[] = { "tenant", NULL };
	static const char *const labels2[] = { "tenant", NULL };
	struct sm_metric *a, *b;

	a = sm_metric_register(SM_METRIC_COUNTER, "t_idem_total", "First.",
	    labels, NULL, 0);
	b = sm_metric_register(SM_METRIC_COUNTER, "t_idem_total", "Second.",
	    labels2, NULL, 0);
	SM_REQUIRE(a != NULL);
	SM_CHECK(a == b);
	SM_CHECK(sm_metric_child(a, "x") == sm_metric_child(b, "x"));
	sm_counter_add(sm_metric_child(b, "x"), 2);
	CHECK_FAMILY("t_idem_total",
	    "# HELP t_idem_total First.\n"
	    "# TYPE t_idem_total counter\n"
	    "t_idem_total{tenant=\"x\"} 2\n");
	/* A NULL help is the empty help. */
	SM_REQUIRE(sm_metric_register(SM_METRIC_GAUGE, "t_idem_nohelp", NULL,
	    NULL, NULL, 0) != NULL);
	CHECK_UNLABELLED("t_idem_nohelp", "", "gauge", "0");
}

static void
test_overflow(void)
{
	static const char *const labels[] = { "tenant", NULL };
	struct sm_metric *m = sm_metric_register(SM_METRIC_COUNTER,
	    "t_overflow_total", "Overflow.", labels, NULL, 0);
	struct sm_metric_child *first, *ov;
	char name[32], *got;
	const char *tail;

	SM_REQUIRE(m != NULL);
	for (int i = 0; i < SM_METRIC_MAX_CHILDREN; i++) {
		struct sm_metric_child *c;

		snprintf(name, sizeof(name), "t%04d", i);
		SM_REQUIRE((c = sm_metric_child(m, name)) != NULL);
		sm_counter_inc(c);
	}
	first = sm_metric_child(m, "t0000");
	ov = sm_metric_child(m, "one-too-many");
	SM_REQUIRE(ov != NULL);
	SM_CHECK(ov != first);
	SM_CHECK(sm_metric_child(m, "another") == ov);
	SM_CHECK(sm_metric_child(m, "__overflow__") == ov);
	/* Existing children are still found. */
	SM_CHECK(sm_metric_child(m, "t0999") != ov);
	SM_CHECK(sm_metric_child(m, "t0000") == first);
	sm_counter_add(ov, 5);
	got = scrape_family("t_overflow_total");
	SM_CHECK(strstr(got, "t_overflow_total{tenant=\"t0999\"} 1\n") !=
	    NULL);
	SM_CHECK(strstr(got, "one-too-many") == NULL);
	tail = strstr(got, "t_overflow_total{tenant=\"t0999\"} 1\n");
	SM_CHECK_STR(tail, "t_overflow_total{tenant=\"t0999\"} 1\n"
	    "t_overflow_total{tenant=\"__overflow__\"} 5\n");
	sm_free(got);
}

/* Values that would break a scrape or grow memory go to the overflow. */
static void
test_overflow_unsafe_values(void)
{
	static const char *const labels[] = { "a", "b", "c", NULL };
	struct sm_metric *m = sm_metric_register(SM_METRIC_GAUGE,
	    "t_overflow_unsafe", "Unsafe.", labels, NULL, 0);
	struct sm_metric_child *ok, *ov;
	char longv[300];

	SM_REQUIRE(m != NULL);
	memset(longv, 'x', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	ok = sm_metric_child(m, "x", "y", "z");
	ov = sm_metric_child(m, "x", "\xff", "z");
	SM_REQUIRE(ok != NULL && ov != NULL && ok != ov);
	SM_CHECK(sm_metric_child(m, "x", "\xc0\xaf", "z") == ov); /* overlong */
	SM_CHECK(sm_metric_child(m, longv, "y", "z") == ov);
	SM_CHECK(sm_metric_child(m, "__overflow__", "__overflow__",
	    "__overflow__") == ov);
	/* Only the full overflow label set is the overflow child. */
	SM_CHECK(sm_metric_child(m, "__overflow__", "y", "z") != ov);
	longv[256] = '\0';   /* 256 bytes is still fine */
	SM_CHECK(sm_metric_child(m, longv, "y", "z") != ov);
	sm_gauge_set(ov, -2);
	sm_gauge_set(ok, 1);
	{
		struct sm_buf want = SM_BUF_INIT;

		sm_buf_puts(&want, "# HELP t_overflow_unsafe Unsafe.\n"
		    "# TYPE t_overflow_unsafe gauge\n"
		    "t_overflow_unsafe{a=\"__overflow__\",b=\"y\",c=\"z\"} 0\n"
		    "t_overflow_unsafe{a=\"x\",b=\"y\",c=\"z\"} 1\n");
		sm_buf_printf(&want, "t_overflow_unsafe{a=\"%s\",b=\"y\","
		    "c=\"z\"} 0\n", longv);
		sm_buf_puts(&want, "t_overflow_unsafe{a=\"__overflow__\","
		    "b=\"__overflow__\",c=\"__overflow__\"} -2\n");
		SM_REQUIRE(sm_buf_error(&want) == 0);
		CHECK_FAMILY("t_overflow_unsafe", want.b);
		sm_buf_fini(&want);
	}
}

static double
fn_read(void *arg)
{
	return (*(double *)arg);
}

static double
fn_twice(void *arg)
{
	return (2 * *(double *)arg);
}

static void
test_gauge_fn(void)
{
	double a = 2.5, b = 4;

	sm_metric_gauge_fn("t_fn_bytes", "Bytes.", fn_read, &a);
	CHECK_UNLABELLED("t_fn_bytes", "Bytes.", "gauge", "2.5");
	a = -3;         /* evaluated at scrape, not at registration */
	CHECK_UNLABELLED("t_fn_bytes", "Bytes.", "gauge", "-3");
	/* Two bindings of one name add up; the same binding twice does not. */
	sm_metric_gauge_fn("t_fn_bytes", "Ignored.", fn_read, &b);
	sm_metric_gauge_fn("t_fn_bytes", "Ignored.", fn_read, &b);
	sm_metric_gauge_fn("t_fn_other", "Other.", fn_twice, &b);
	CHECK_UNLABELLED("t_fn_bytes", "Bytes.", "gauge", "1");
	CHECK_UNLABELLED("t_fn_other", "Other.", "gauge", "8");
	/* Removal by arg, under every name. */
	sm_metric_gauge_fn_remove(&b);
	CHECK_UNLABELLED("t_fn_bytes", "Bytes.", "gauge", "-3");
	CHECK_FAMILY("t_fn_other", "");
	sm_metric_gauge_fn_remove(&a);
	CHECK_FAMILY("t_fn_bytes", "");
	sm_metric_gauge_fn_remove(&a);          /* nothing left: a no-op */
	sm_metric_gauge_fn("t_fn_bytes", "Bytes.", fn_read, &b);
	CHECK_UNLABELLED("t_fn_bytes", "Bytes.", "gauge", "4");
	sm_metric_gauge_fn_remove(&b);
	CHECK_FAMILY("t_fn_bytes", "");
}

/* A gauge function may look up children and update metrics. */
static double
fn_counts_calls(void *arg)
{
	struct sm_metric *m = arg;

	sm_counter_inc(sm_metric_child(m, "scrape"));
	return (sm_metric_value(sm_metric_child(m, "scrape")));
}

static void
test_gauge_fn_may_update(void)
{
	static const char *const labels[] = { "what", NULL };
	struct sm_metric *m = sm_metric_register(SM_METRIC_COUNTER,
	    "t_fn_calls_total", "Calls.", labels, NULL, 0);

	SM_REQUIRE(m != NULL);
	sm_metric_gauge_fn("t_fn_calls", "Calls.", fn_counts_calls, m);
	CHECK_UNLABELLED("t_fn_calls", "Calls.", "gauge", "1");
	/* Second scrape: functions run before the walk, so it shows 2. */
	CHECK_FAMILY("t_fn_calls_total",
	    "# HELP t_fn_calls_total Calls.\n"
	    "# TYPE t_fn_calls_total counter\n"
	    "t_fn_calls_total{what=\"scrape\"} 2\n");
	sm_metric_gauge_fn_remove(m);
}

static void
test_null_noops(void)
{
	sm_counter_add(NULL, 1);
	sm_counter_inc(NULL);
	sm_gauge_set(NULL, 1);
	sm_gauge_add(NULL, 1);
	sm_histogram_observe(NULL, 1);
	SM_CHECK(sm_metric_value(NULL) == 0);
	SM_CHECK(sm_metric_child(NULL, "x", "y") == NULL);
	SM_CHECK(sm_metric_child0(NULL) == NULL);
}

/*
 * Fail each allocation in turn (docs/style.md §18): registration and lookup end in
 * a working metric or NULL, never in half a family, and a later attempt
 * with memory available works.  ASan checks nothing leaks.
 */
static void
test_out_of_memory(void)
{
	static const char *const labels[] = { "k", NULL };
	static double val = 1.5;

	for (long n = 1; n <= 16; n++) {
		struct sm_metric *m, *h;
		struct sm_metric_child *c, *hc;
		char name[64], fname[64];

		snprintf(name, sizeof(name), "t_oom_%ld_total", n);
		snprintf(fname, sizeof(fname), "t_oom_fn_%ld", n);
		sm_fault_alloc_after(n);
		m = sm_metric_register(SM_METRIC_COUNTER, name, "OOM.", labels,
		    NULL, 0);
		c = sm_metric_child(m, "v");
		h = sm_metric_register(SM_METRIC_HISTOGRAM, fname, "OOM.",
		    NULL, NULL, 0);
		hc = sm_metric_child0(h);
		sm_fault_alloc_after(0);
		sm_counter_inc(c);
		sm_histogram_observe(hc, 1);
		SM_CHECK(c == NULL || sm_metric_value(c) == 1);
		SM_CHECK(hc == NULL || sm_metric_value(hc) == 1);
		/* With memory back, the same names work completely. */
		m = sm_metric_register(SM_METRIC_COUNTER, name, "OOM.", labels,
		    NULL, 0);
		SM_REQUIRE(m != NULL);
		c = sm_metric_child(m, "v");
		SM_REQUIRE(c != NULL);
		sm_counter_inc(c);
		SM_CHECK(sm_metric_value(c) >= 1 && sm_metric_value(c) <= 2);
		h = sm_metric_register(SM_METRIC_HISTOGRAM, fname, "OOM.",
		    NULL, NULL, 0);
		SM_REQUIRE(h != NULL && sm_metric_child0(h) != NULL);
		/* Gauge functions: bound completely or not at all. */
		snprintf(fname, sizeof(fname), "t_oom_gfn_%ld", n);
		sm_fault_alloc_after(n);
		sm_metric_gauge_fn(fname, "OOM.", fn_read, &val);
		sm_fault_alloc_after(0);
		{
			char *got = scrape_family(fname);

			SM_CHECK(got[0] == '\0' || strstr(got,
			    " 1.5\n") != NULL);
			sm_free(got);
		}
		sm_metric_gauge_fn_remove(&val);
	}
}

/*
 * Programmer errors are assertions.  Each runs in a child process, which
 * must die of SIGABRT.
 */
static void
die_kind_mismatch(void)
{
	sm_metric_register(SM_METRIC_COUNTER, "t_die_kind", "x", NULL, NULL, 0);
	sm_metric_register(SM_METRIC_GAUGE, "t_die_kind", "x", NULL, NULL, 0);
}

static void
die_label_mismatch(void)
{
	static const char *const a[] = { "x", NULL }, *const b[] = { "y", NULL };

	sm_metric_register(SM_METRIC_COUNTER, "t_die_lbl", "x", a, NULL, 0);
	sm_metric_register(SM_METRIC_COUNTER, "t_die_lbl", "x", b, NULL, 0);
}

static void
die_le_label(void)
{
	static const char *const l[] = { "le", NULL };

	sm_metric_register(SM_METRIC_HISTOGRAM, "t_die_le", "x", l, NULL, 0);
}

static void
die_too_many_labels(void)
{
	static const char *const l[] = { "a", "b", "c", "d", NULL };

	sm_metric_register(SM_METRIC_COUNTER, "t_die_many", "x", l, NULL, 0);
}

static void
die_unsorted_buckets(void)
{
	static const double b[] = { 1, 1 };

	sm_metric_register(SM_METRIC_HISTOGRAM, "t_die_bkt", "x", NULL, b, 2);
}

static void
die_bad_name(void)
{
	sm_metric_register(SM_METRIC_GAUGE, "t-die", "x", NULL, NULL, 0);
}

static void
die_wrong_kind_update(void)
{
	sm_counter_inc(sm_metric_child0(sm_metric_register(SM_METRIC_GAUGE,
	    "t_die_upd", "x", NULL, NULL, 0)));
}

static void
die_child0_labelled(void)
{
	static const char *const l[] = { "a", NULL };

	sm_metric_child0(sm_metric_register(SM_METRIC_GAUGE, "t_die_c0", "x",
	    l, NULL, 0));
}

static void
die_fn_over_gauge(void)
{
	static double v;

	sm_metric_register(SM_METRIC_GAUGE, "t_die_fn", "x", NULL, NULL, 0);
	sm_metric_gauge_fn("t_die_fn", "x", fn_read, &v);
}

static void
test_programmer_errors_abort(void)
{
	static const struct {
		const char *what;
		void (*fn)(void);
	} cases[] = {
		{ "kind mismatch", die_kind_mismatch },
		{ "label mismatch", die_label_mismatch },
		{ "le label on a histogram", die_le_label },
		{ "four labels", die_too_many_labels },
		{ "unsorted buckets", die_unsorted_buckets },
		{ "bad name", die_bad_name },
		{ "counter update on a gauge", die_wrong_kind_update },
		{ "child0 of a labelled family", die_child0_labelled },
		{ "gauge fn over a plain gauge", die_fn_over_gauge },
	};

	for (size_t i = 0; i < SM_ARRAY_LEN(cases); i++) {
		int st = 0;
		pid_t pid;

		fflush(NULL);
		SM_REQUIRE((pid = fork()) >= 0);
		if (pid == 0) {
			/* The assertion message is expected; keep it quiet. */
			if (freopen("/dev/null", "w", stderr) == NULL)
				_exit(3);
			cases[i].fn();
			_exit(0);
		}
		SM_REQUIRE(waitpid(pid, &st, 0) == pid);
		SM_CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
		    "%s: status %#x", cases[i].what, st);
	}
}

/*
 * 8 threads x 100k updates of a counter, a gauge and a histogram, with
 * child lookups on the way, while a 9th thread scrapes without pause.
 */
#define CONC_THREADS 8
#define CONC_ITERS 100000

struct conc {
	struct sm_metric *cnt;
	struct sm_metric *g;
	struct sm_metric *h;
	struct sm_metric *per;          /* a child per thread, made late */
	atomic_int running;
	int id;
	long scrapes;
	int scrape_err;
};

static struct conc conc_st;

static void *
conc_worker(void *p)
{
	int id = (int)(intptr_t)p;
	const char *parity = id % 2 ? "odd" : "even";
	struct sm_metric_child *c = sm_metric_child(conc_st.cnt, parity);
	struct sm_metric_child *g = sm_metric_child0(conc_st.g);
	struct sm_metric_child *h = sm_metric_child0(conc_st.h);
	char name[16];

	for (int k = 0; k < CONC_ITERS; k++) {
		if (k % 1000 == 0)
			c = sm_metric_child(conc_st.cnt, parity);
		if (k % 10000 == 0) {
			snprintf(name, sizeof(name), "w%d-%d", id, k);
			sm_counter_inc(sm_metric_child(conc_st.per, name));
		}
		sm_counter_inc(c);
		sm_gauge_add(g, 1);
		sm_histogram_observe(h, (k % 3) * 0.5);
	}
	return (NULL);
}

/* The value of the sample line starting with `series` (then a space). */
static uint64_t
conc_sample(const char *text, const char *series)
{
	const char *p = strstr(text, series);

	if (p == NULL)
		return (0);
	return (strtoull(p + strlen(series) + 1, NULL, 10));
}

static void *
conc_scraper(void *p)
{
	struct sm_buf b = SM_BUF_INIT;
	uint64_t last_even = 0, last_odd = 0;

	(void)p;
	while (atomic_load(&conc_st.running)) {
		uint64_t even, odd, inf, count;

		sm_buf_reset(&b);
		sm_metrics_write(&b);
		if (sm_buf_error(&b) != 0 || b.b == NULL) {
			conc_st.scrape_err++;
			continue;
		}
		even = conc_sample(b.b, "t_conc_total{parity=\"even\"}");
		odd = conc_sample(b.b, "t_conc_total{parity=\"odd\"}");
		inf = conc_sample(b.b, "t_conc_seconds_bucket{le=\"+Inf\"}");
		count = conc_sample(b.b, "t_conc_seconds_count");
		/* Counters never go back; +Inf and _count always agree. */
		if (even < last_even || odd < last_odd || inf != count)
			conc_st.scrape_err++;
		last_even = even;
		last_odd = odd;
		conc_st.scrapes++;
	}
	sm_buf_fini(&b);
	return (NULL);
}

static void
test_concurrent_updates(void)
{
	static const char *const parity[] = { "parity", NULL };
	static const char *const who[] = { "who", NULL };
	static const double bounds[] = { 0.5, 1 };
	pthread_t thr[CONC_THREADS], scraper;
	char *got;

	conc_st.cnt = sm_metric_register(SM_METRIC_COUNTER, "t_conc_total",
	    "Concurrent.", parity, NULL, 0);
	conc_st.g = sm_metric_register(SM_METRIC_GAUGE, "t_conc_gauge",
	    "Concurrent.", NULL, NULL, 0);
	conc_st.h = sm_metric_register(SM_METRIC_HISTOGRAM, "t_conc_seconds",
	    "Concurrent.", NULL, bounds, 2);
	conc_st.per = sm_metric_register(SM_METRIC_COUNTER,
	    "t_conc_per_total", "Concurrent.", who, NULL, 0);
	SM_REQUIRE(conc_st.cnt && conc_st.g && conc_st.h && conc_st.per);
	atomic_store(&conc_st.running, 1);
	SM_REQUIRE(pthread_create(&scraper, NULL, conc_scraper, NULL) == 0);
	for (intptr_t i = 0; i < CONC_THREADS; i++)
		SM_REQUIRE(pthread_create(&thr[i], NULL, conc_worker,
		    (void *)i) == 0);
	for (int i = 0; i < CONC_THREADS; i++)
		pthread_join(thr[i], NULL);
	atomic_store(&conc_st.running, 0);
	pthread_join(scraper, NULL);

	SM_CHECK_EQ(conc_st.scrape_err, 0);
	SM_CHECK(conc_st.scrapes > 0);
	SM_CHECK(sm_metric_value(sm_metric_child(conc_st.cnt, "even")) ==
	    CONC_THREADS / 2 * CONC_ITERS);
	SM_CHECK(sm_metric_value(sm_metric_child(conc_st.cnt, "odd")) ==
	    CONC_THREADS / 2 * CONC_ITERS);
	SM_CHECK(sm_metric_value(sm_metric_child0(conc_st.g)) ==
	    CONC_THREADS * CONC_ITERS);
	/* Per thread k % 3 is 0 for 33334 k, 1 and 2 for 33333 each. */
	CHECK_FAMILY("t_conc_seconds",
	    "# HELP t_conc_seconds Concurrent.\n"
	    "# TYPE t_conc_seconds histogram\n"
	    "t_conc_seconds_bucket{le=\"0.5\"} 533336\n"
	    "t_conc_seconds_bucket{le=\"1\"} 800000\n"
	    "t_conc_seconds_bucket{le=\"+Inf\"} 800000\n"
	    "t_conc_seconds_sum 399996\n"
	    "t_conc_seconds_count 800000\n");
	got = scrape_family("t_conc_per_total");
	SM_CHECK(strstr(got, "{who=\"w0-0\"} 1\n") != NULL);
	SM_CHECK(strstr(got, "{who=\"w7-90000\"} 1\n") != NULL);
	sm_free(got);
}

SM_TEST_MAIN(
	{ "counter: zero sample from the start, exact integer totals",
	    test_counter },
	{ "counter: labelled family, children sorted by label values",
	    test_counter_labels },
	{ "gauge: set and add with negative values, +Inf -Inf NaN",
	    test_gauge },
	{ "gauge: numbers formatted like the Go client", test_number_format },
	{ "histogram: cumulative buckets, sum and count", test_histogram },
	{ "histogram: labels come before le; +Inf bound implied",
	    test_histogram_labels },
	{ "histogram: le is inclusive at each bound", test_histogram_bounds },
	{ "histogram: default latency buckets", test_histogram_default_buckets },
	{ "exposition: label values and HELP escaped", test_escaping },
	{ "exposition: families sorted by name", test_family_order },
	{ "registration: the same name returns the same family",
	    test_idempotent_registration },
	{ "overflow: child beyond SM_METRIC_MAX_CHILDREN is __overflow__",
	    test_overflow },
	{ "overflow: invalid UTF-8 and too-long values",
	    test_overflow_unsafe_values },
	{ "gauge fn: evaluated at scrape, summed, removed by arg",
	    test_gauge_fn },
	{ "gauge fn: may look up children and update metrics",
	    test_gauge_fn_may_update },
	{ "NULL family and child are no-ops", test_null_noops },
	{ "out of memory: each allocation failing in turn",
	    test_out_of_memory },
	{ "programmer errors abort", test_programmer_errors_abort },
	{ "concurrency: 8 threads x 100k exact while a 9th scrapes",
	    test_concurrent_updates },
)
