/*
 * jfr_test.c -- tests for the JFR reader (jfr.h).
 *
 * Goldens: every jfrparser__<name>.jfr.gz found in tests/data/ or
 * ../shared/testdata/profiles/ (relative to the source root) is parsed
 * with sample rate 100 Hz and line numbers on (the form of jfr-parser's
 * goldens, "class.method:line"), with and without its labels sidecar
 * (<name>.labels.pb.gz or <name>.labels.gz), and each of its
 * <name>_<i>_<metric>_<type>__<unit>[ <type>__<unit>]_expected_collapsed
 * .txt.gz goldens ("stack [v0 v1]" lines, summed over label sets) must
 * equal the batch's series of that __name__/__type__, summed the same way.
 * The goldens were written by grafana/jfr-parser's own test, not by this
 * reader.
 *
 * Mutation: a deterministic loop (fixed xorshift seed) flips bits, stores
 * boundary bytes and varints, cuts and splices the real recordings
 * (decompressed and re-parsed as raw JFR) and requires a clean answer
 * every time; run under ASan/UBSan in the build-asan tree, this is the
 * reader's fuzz test.  The execution count is printed.
 */
#include "distributor/jfr.h"

#include <dirent.h>

#include "common/gz.h"
#include "sm_test.h"
#define BATCH_RUN_IN struct dist_jfr_in
#define BATCH_RUN_INGEST dist_jfr_ingest
#include "sm_test_batch.h"

static const char *const data_dirs[] = { "tests/data",
    "../shared/testdata/profiles" };

/* --- running the reader ----------------------------------------------------- */

/* A run (sm_test_batch.h) with no per-type sample cap, at 100 Hz, with
 * line numbers. */
static void
run_init(struct run *r)
{
	run_open(r);
	r->lim.max_samples = 0;
	r->in.sample_rate = 100;
	r->in.line_numbers = true;
}

/* Read a data file (any of the data dirs); malloc'd, NULL if absent. */
static uint8_t *
read_data(const char *dir, const char *name, size_t *n)
{
	char rel[1024], path[1200];

	snprintf(rel, sizeof(rel), "%s/%s", dir, name);
	return (sm_test_read_file(sm_test_path(path, sizeof(path), rel), n));
}

/* Gunzip a whole file into malloc'd memory (gz.h's stream, which reads
 * concatenated members too; no size cap: the goldens are ours). */
static uint8_t *
gunzip_all(const uint8_t *p, size_t n, size_t *outn)
{
	struct sm_gunzip_stream *z = NULL;
	struct sm_err err;
	size_t cap = n * 8 + 4096, len = 0, got;
	uint8_t *o = malloc(cap);

	SM_REQUIRE(o != NULL);
	SM_REQUIRE(sm_gunzip_stream_open(p, n, &z) == 0);
	for (;;) {
		if (len == cap) {
			cap *= 2;
			o = realloc(o, cap);
			SM_REQUIRE(o != NULL);
		}
		SM_REQUIRE(sm_gunzip_stream_read(z, o + len, cap - len, &got,
		    &err) == 0);
		if (got == 0)
			break;
		len += got;
	}
	sm_gunzip_stream_close(z);
	*outn = len;
	return (o);
}

/* --- collapsed text --------------------------------------------------------- */

/* Whether series s is of __name__ `metric` and __type__ `type`. */
static bool
series_is(const struct dist_series *s, const char *metric, const char *type)
{
	const char *nm = sm_labels_get(s->labels, s->nlabels, SM_LABEL_NAME);
	const char *ty = sm_labels_get(s->labels, s->nlabels, SM_LABEL_TYPE);

	return (nm != NULL && ty != NULL && strcmp(nm, metric) == 0 &&
	    strcmp(ty, type) == 0);
}

struct series_sel {
	const char *metric, *type;
};

static bool
series_selected(const struct dist_series *s, uint32_t k, const void *arg)
{
	const struct series_sel *sel = arg;

	(void)k;
	return (series_is(s, sel->metric, sel->type));
}

/* The collapsed text of the series metric/type, as a golden has it. */
static char *
collapse(const struct dist_batch *b, const char *metric, const char *type,
    size_t *nlines)
{
	struct series_sel sel = { metric, type };

	return (batch_collapse(b, series_selected, &sel, false, nlines));
}

/*
 * Column `col` of a golden's "stack [v0 v1]" lines, as collapse() renders
 * it.  *nlines is the golden's line count.
 */
static char *
golden_column(const uint8_t *g, size_t gn, int col, size_t *nlines,
    size_t *glines)
{
	struct cline *v = NULL;
	size_t n = 0, cap = 0, pos = 0;
	char *txt;

	*glines = 0;
	while (pos < gn) {
		const uint8_t *nl = memchr(g + pos, '\n', gn - pos);
		size_t end = nl != NULL ? (size_t)(nl - g) : gn;
		char *line = strndup((const char *)g + pos, end - pos);
		char *br = strrchr(line, '[');
		long long vals[4] = { 0 };
		int nv = 0;
		char *q;

		SM_REQUIRE(line != NULL);
		pos = end + 1;
		if (*line == '\0') {
			free(line);
			continue;
		}
		SM_REQUIRE(br != NULL && br > line && br[-1] == ' ');
		br[-1] = '\0';
		for (q = br + 1; *q != ']' && *q != '\0' && nv < 4;) {
			vals[nv++] = strtoll(q, &q, 10);
			while (*q == ' ')
				q++;
		}
		SM_REQUIRE(col < nv);
		(*glines)++;
		cl_push(&v, &n, &cap, strdup(line), vals[col]);
		free(line);
	}
	txt = cl_render(v, n, false, nlines);
	free(v);
	return (txt);
}

/* --- goldens ---------------------------------------------------------------- */

static const char *const metrics[] = { "process_cpu", "memory", "mutex",
    "block", "wall" };

struct golden_stats {
	int recordings, goldens, types, with_labels;
};

/*
 * Check every golden of recording `base` (in `dir`) against one parse.
 * `labels` NULL parses without the sidecar.
 */
static void
check_recording(const char *dir, const char *base, const uint8_t *jfr,
    size_t jn, const uint8_t *labels, size_t ln, struct golden_stats *st)
{
	struct run r;
	DIR *d;
	struct dirent *e;
	size_t bl = strlen(base);
	int found = 0;

	run_init(&r);
	r.in.labels = labels;
	r.in.labels_len = ln;
	if (run_go(&r, jfr, jn) != 0) {
		SM_TEST_FAILF("%s (labels %s): rv %d: %s", base,
		    labels ? "yes" : "no", r.rv, r.err.msg);
		run_fini(&r);
		return;
	}
	{
		char path[1200];

		d = opendir(sm_test_path(path, sizeof(path), dir));
		SM_REQUIRE(d != NULL);
	}
	while ((e = readdir(d)) != NULL) {
		const char *nm = e->d_name, *rest, *suf = "_expected_collapsed"
		    ".txt.gz";
		size_t nl = strlen(nm), sl = strlen(suf);
		char spec[512], *tok, *save = NULL;
		const char *metric = NULL;
		uint8_t *gz, *g;
		size_t gzn, gn;
		int col = 0;

		if (nl <= bl + sl || strncmp(nm, base, bl) != 0 ||
		    nm[bl] != '_' || strcmp(nm + nl - sl, suf) != 0)
			continue;
		rest = nm + bl + 1;
		if (*rest < '0' || *rest > '9')
			continue;
		while (*rest >= '0' && *rest <= '9')
			rest++;
		if (*rest++ != '_')
			continue;
		snprintf(spec, sizeof(spec), "%.*s",
		    (int)(nm + nl - sl - rest), rest);
		for (size_t i = 0; i < SM_ARRAY_LEN(metrics); i++) {
			size_t ml = strlen(metrics[i]);

			if (strncmp(spec, metrics[i], ml) == 0 &&
			    spec[ml] == '_') {
				metric = metrics[i];
				memmove(spec, spec + ml + 1, strlen(spec + ml));
				break;
			}
		}
		SM_CHECKF(metric != NULL, "golden %s: unknown metric", nm);
		if (metric == NULL)
			continue;
		gz = read_data(dir, nm, &gzn);
		SM_REQUIRE(gz != NULL);
		g = gunzip_all(gz, gzn, &gn);
		free(gz);
		found++;
		st->goldens++;
		for (tok = strtok_r(spec, " ", &save); tok != NULL;
		    tok = strtok_r(NULL, " ", &save), col++) {
			char *sep = strstr(tok, "__"), *got, *want;
			size_t gotl, wantl, glines;

			SM_REQUIRE(sep != NULL);
			*sep = '\0';
			got = collapse(&r.b, metric, tok, &gotl);
			want = golden_column(g, gn, col, &wantl, &glines);
			SM_CHECKF(strcmp(got, want) == 0,
			    "%s labels=%s %s/%s: %zu lines, golden %zu",
			    nm, labels ? "yes" : "no", metric, tok, gotl,
			    wantl);
			if (strcmp(got, want) != 0 && getenv("JFR_DIFF")) {
				fprintf(stderr, "--- got\n%s--- want\n%s", got,
				    want);
				for (uint32_t k = 0; k < r.b.nseries; k++) {
					struct sm_buf lb = SM_BUF_INIT;

					sm_labels_format(r.b.series[k].labels,
					    r.b.series[k].nlabels, &lb);
					fprintf(stderr, "series %.*s n=%u\n",
					    (int)lb.len, lb.b,
					    r.b.series[k].n);
					sm_buf_fini(&lb);
				}
			}
			SM_CHECK(wantl > 0);
			st->types++;
			free(got);
			free(want);
		}
		free(g);
	}
	closedir(d);
	SM_CHECKF(found > 0, "%s: no golden", base);
	run_fini(&r);
}

static void
test_goldens(void)
{
	struct golden_stats st = { 0 };
	int dirs = 0;

	for (size_t di = 0; di < SM_ARRAY_LEN(data_dirs); di++) {
		const char *dir = data_dirs[di];
		char path[1200];
		DIR *d = opendir(sm_test_path(path, sizeof(path), dir));
		struct dirent *e;

		if (d == NULL) {
			printf("     (%s absent: skipped)\n", dir);
			continue;
		}
		dirs++;
		while ((e = readdir(d)) != NULL) {
			const char *nm = e->d_name;
			size_t nl = strlen(nm);
			char base[512], lname[600];
			uint8_t *jfr, *lab = NULL;
			size_t jn, ln = 0;

			if (strncmp(nm, "jfrparser__", 11) != 0 || nl < 8 ||
			    strcmp(nm + nl - 7, ".jfr.gz") != 0)
				continue;
			snprintf(base, sizeof(base), "%.*s", (int)(nl - 7),
			    nm);
			jfr = read_data(dir, nm, &jn);
			SM_REQUIRE(jfr != NULL);
			snprintf(lname, sizeof(lname), "%s.labels.pb.gz", base);
			if ((lab = read_data(dir, lname, &ln)) == NULL) {
				snprintf(lname, sizeof(lname), "%s.labels.gz",
				    base);
				lab = read_data(dir, lname, &ln);
			}
			st.recordings++;
			check_recording(dir, base, jfr, jn, NULL, 0, &st);
			if (lab != NULL) {
				size_t rn;
				uint8_t *raw = gunzip_all(lab, ln, &rn);

				st.with_labels++;
				check_recording(dir, base, jfr, jn, raw, rn,
				    &st);
				free(raw);
			}
			free(jfr);
			free(lab);
		}
		closedir(d);
	}
	printf("     %d recordings (%d with labels), %d goldens, %d "
	    "type columns checked\n", st.recordings, st.with_labels,
	    st.goldens, st.types);
	SM_CHECK(dirs > 0 && st.recordings >= 6);
}

/* --- helpers over one tests/data recording ----------------------------------- */

/* The decompressed tests/data recording `name`; skips when absent. */
static uint8_t *
load_raw(const char *name, size_t *n)
{
	size_t gn;
	uint8_t *gz = read_data("tests/data", name, &gn), *raw;

	if (gz == NULL)
		SM_SKIP("tests/data/%s not found", name);
	raw = gunzip_all(gz, gn, n);
	free(gz);
	return (raw);
}

/* The example recording: decompressed (n bytes, returned) and as stored
 * (*gz, *gn bytes); skips when absent.  Both malloc'd. */
static uint8_t *
load_example(size_t *n, uint8_t **gz, size_t *gn)
{
	uint8_t *raw = load_raw("jfrparser__example.jfr.gz", n);

	*gz = read_data("tests/data", "jfrparser__example.jfr.gz", gn);
	SM_REQUIRE(*gz != NULL);
	return (raw);
}

static int64_t
type_total(const struct dist_batch *b, const char *metric, const char *type,
    uint32_t *nseries)
{
	int64_t t = 0;

	*nseries = 0;
	for (uint32_t k = 0; k < b->nseries; k++) {
		if (series_is(&b->series[k], metric, type)) {
			t += dist_batch_series_total(b, k);
			(*nseries)++;
		}
	}
	return (t);
}

/* Raw and gzip input give the same batch; frames without lines. */
static void
test_raw_equals_gzip(void)
{
	struct run a, b;
	size_t n, gn;
	uint8_t *gz, *raw = load_example(&n, &gz, &gn);
	uint32_t ns;
	char *x, *y;
	size_t xl, yl;

	run_init(&a);
	run_init(&b);
	a.in.line_numbers = b.in.line_numbers = false;
	SM_REQUIRE(run_go(&a, raw, n) == 0);
	SM_REQUIRE(run_go(&b, gz, gn) == 0);
	SM_CHECK_EQ(a.b.nseries, b.b.nseries);
	x = collapse(&a.b, "process_cpu", "cpu", &xl);
	y = collapse(&b.b, "process_cpu", "cpu", &yl);
	SM_CHECK_STR(x, y);
	SM_CHECK(xl > 0);
	/* production frames carry no line numbers */
	SM_CHECK(strstr(x, "java/lang/Thread.run;") != NULL);
	SM_CHECK(strstr(x, "java/lang/Thread.run:") == NULL);
	free(x);
	free(y);
	/* 100 Hz: every cpu value is a multiple of 10 ms */
	SM_CHECK(type_total(&a.b, "process_cpu", "cpu", &ns) % 10000000 == 0);
	SM_CHECK_EQ(ns, 1);
	run_fini(&a);
	run_fini(&b);
	free(raw);
	free(gz);
}

/* Series labels: the profile type labels, the base, jfr_event. */
static void
test_series_labels(void)
{
	size_t n;
	uint8_t *raw = load_raw("jfrparser__example.jfr.gz", &n);
	struct run r;
	int found = 0;

	run_init(&r);
	SM_REQUIRE(run_go(&r, raw, n) == 0);
	for (uint32_t k = 0; k < r.b.nseries; k++) {
		const struct dist_series *s = &r.b.series[k];
		struct sm_buf lb = SM_BUF_INIT;

		sm_labels_format(s->labels, s->nlabels, &lb);
		SM_REQUIRE(sm_buf_error(&lb) == 0);
		if (strstr(lb.b, "__name__=\"mutex\"") != NULL &&
		    strstr(lb.b, "__type__=\"delay\"") != NULL) {
			found++;
			SM_CHECK(strstr(lb.b, "__profile_type__=\"mutex:delay:"
			    "nanoseconds:mutex:count\"") != NULL);
			SM_CHECK(strstr(lb.b, "service_name=\"app\"") != NULL);
			SM_CHECK(strstr(lb.b, "jfr_event=\"") != NULL);
		}
		sm_buf_fini(&lb);
	}
	SM_CHECK_EQ(found, 1);
	run_fini(&r);
	free(raw);
}

/* The LabelsSnapshot splits series by context id; totals are kept. */
static void
test_context_labels(void)
{
	size_t n, ln, rn;
	uint8_t *raw = load_raw("jfrparser__dump1.jfr.gz", &n);
	uint8_t *lgz = read_data("tests/data", "jfrparser__dump1.labels.pb.gz",
	    &ln), *lab;
	struct run a, b;
	uint32_t na, nb, threads = 0;
	int64_t ta, tb;

	SM_REQUIRE(lgz != NULL);
	lab = gunzip_all(lgz, ln, &rn);
	run_init(&a);
	run_init(&b);
	b.in.labels = lab;
	b.in.labels_len = rn;
	SM_REQUIRE(run_go(&a, raw, n) == 0);
	SM_REQUIRE(run_go(&b, raw, n) == 0);
	ta = type_total(&a.b, "process_cpu", "cpu", &na);
	tb = type_total(&b.b, "process_cpu", "cpu", &nb);
	SM_CHECK_EQ(ta, tb);
	SM_CHECK(ta > 0);
	SM_CHECK_EQ(na, 1);
	SM_CHECK(nb > 1);
	for (uint32_t k = 0; k < b.b.nseries; k++) {
		const char *v = sm_labels_get(b.b.series[k].labels,
		    b.b.series[k].nlabels, "thread_name");

		threads += v != NULL && strncmp(v, "pool-2-thread-", 14) == 0;
	}
	SM_CHECKF(threads >= 2, "%u series with thread_name", threads);
	/* a bad snapshot is refused, not ignored */
	{
		struct run c;
		static const uint8_t bad[] = { 0x0a, 0x7f, 0x01 };

		run_init(&c);
		c.in.labels = bad;
		c.in.labels_len = sizeof(bad);
		run_go(&c, raw, n);
		CHECK_FAIL(&c, SM_EMALFORMED, "label");
		run_fini(&c);
	}
	run_fini(&a);
	run_fini(&b);
	free(raw);
	free(lgz);
	free(lab);
}

/* span_name comes from the snapshot's strings (new_spancontext). */
static void
test_span_name(void)
{
	size_t n, ln, rn;
	uint8_t *raw = load_raw("jfrparser__new_spancontext.jfr.gz", &n);
	uint8_t *lgz = read_data("tests/data",
	    "jfrparser__new_spancontext.labels.gz", &ln), *lab;
	struct run r;
	int spans = 0;

	SM_REQUIRE(lgz != NULL);
	lab = gunzip_all(lgz, ln, &rn);
	run_init(&r);
	r.in.labels = lab;
	r.in.labels_len = rn;
	SM_REQUIRE(run_go(&r, raw, n) == 0);
	for (uint32_t k = 0; k < r.b.nseries; k++)
		spans += sm_labels_get(r.b.series[k].labels,
		    r.b.series[k].nlabels, "span_name") != NULL;
	SM_CHECK(spans > 0);
	run_fini(&r);
	free(raw);
	free(lgz);
	free(lab);
}

/* Limits: recording size, samples per type, depth. */
static void
test_limits(void)
{
	struct run r;
	size_t n, gn;
	uint8_t *gz, *raw = load_example(&n, &gz, &gn);

	run_init(&r);
	r.in.max_bytes = n - 1;
	run_go(&r, raw, n);
	CHECK_FAIL(&r, SM_ETOOBIG, "exceeds limit");
	run_fini(&r);

	run_init(&r);
	r.in.max_bytes = n / 2;        /* gzip: found while inflating */
	run_go(&r, gz, gn);
	CHECK_FAIL(&r, SM_ETOOBIG, "exceeds limit");
	run_fini(&r);

	run_init(&r);
	r.lim.max_samples = 10;
	run_go(&r, raw, n);
	CHECK_FAIL(&r, SM_ELIMIT, "samples count limit");
	run_fini(&r);

	run_init(&r);
	r.lim.max_depth = 3;
	r.in.line_numbers = false;
	SM_REQUIRE(run_go(&r, raw, n) == 0);
	for (uint32_t k = 0; k < r.b.nseries; k++) {
		for (uint32_t j = 0; j < r.b.series[k].n; j++) {
			uint32_t d = 0;

			for (uint32_t nd = r.b.series[k].node[j]; nd != 0;
			    nd = r.b.tree.parent[nd])
				d++;
			SM_CHECK(d <= 3);
		}
	}
	run_fini(&r);
	free(raw);
	free(gz);
}

/* Malformed and unsupported inputs get precise errors. */
static void
test_malformed(void)
{
	size_t n;
	uint8_t *raw = load_raw("jfrparser__nativemem.jfr.gz", &n);
	uint8_t *cp = malloc(n);
	struct run r;
	static const uint8_t junk[] = "not a flight recording at all....";

	SM_REQUIRE(cp != NULL);
	CHECK_RUN_FAILS(junk, 0, SM_EMALFORMED, "empty");

	CHECK_RUN_FAILS(junk, sizeof(junk), SM_EMALFORMED, "invalid JFR");

	/* truncated header, truncated body */
	CHECK_RUN_FAILS(raw, 40, SM_EMALFORMED, "invalid JFR");
	CHECK_RUN_FAILS(raw, n - 100, SM_EMALFORMED, "invalid JFR");

	/* major version 3 */
	memcpy(cp, raw, n);
	cp[4] = 0;
	cp[5] = 3;
	CHECK_RUN_FAILS(cp, n, SM_EUNSUPPORTED, "version");

	/* a truncated gzip stream */
	{
		uint8_t *gz;
		size_t gn;

		gz = read_data("tests/data", "jfrparser__nativemem.jfr.gz",
		    &gn);
		SM_REQUIRE(gz != NULL);
		run_init(&r);
		run_go(&r, gz, gn / 2);
		SM_CHECKF(r.rv == SM_EMALFORMED, "rv %d: %s", r.rv,
		    r.err.msg);
		run_fini(&r);
		free(gz);
	}
	free(cp);
	free(raw);
}

/* Two recordings laid end to end are one multi-chunk recording. */
static void
test_multichunk(void)
{
	size_t n1, n2;
	uint8_t *a = load_raw("jfrparser__example.jfr.gz", &n1);
	uint8_t *b = load_raw("jfrparser__nativemem.jfr.gz", &n2);
	uint8_t *cat = malloc(n1 + n2);
	struct run r1, r2, rc;
	uint32_t ns;

	SM_REQUIRE(cat != NULL);
	memcpy(cat, a, n1);
	memcpy(cat + n1, b, n2);
	run_init(&r1);
	run_init(&r2);
	run_init(&rc);
	SM_REQUIRE(run_go(&r1, a, n1) == 0);
	SM_REQUIRE(run_go(&r2, b, n2) == 0);
	SM_REQUIRE(run_go(&rc, cat, n1 + n2) == 0);
	SM_CHECK_EQ(type_total(&rc.b, "process_cpu", "cpu", &ns),
	    type_total(&r1.b, "process_cpu", "cpu", &ns));
	SM_CHECK_EQ(type_total(&rc.b, "memory", "malloc_bytes", &ns),
	    type_total(&r2.b, "memory", "malloc_bytes", &ns));
	SM_CHECK(type_total(&rc.b, "memory", "malloc_bytes", &ns) > 0);
	run_fini(&r1);
	run_fini(&r2);
	run_fini(&rc);
	free(a);
	free(b);
	free(cat);
}

/* The multipart form: jfr part, gzipped labels part. */
static void
test_upload_multipart(void)
{
	size_t jn, ln;
	uint8_t *jfr = read_data("tests/data", "jfrparser__dump1.jfr.gz", &jn);
	uint8_t *lab = read_data("tests/data", "jfrparser__dump1.labels.pb.gz",
	    &ln);
	const char *ct = "multipart/form-data; boundary=XyZ";
	struct sm_buf body = SM_BUF_INIT;
	struct run r;
	uint32_t ns;

	if (jfr == NULL || lab == NULL)
		SM_SKIP("dump1 not in tests/data");
	sm_buf_printf(&body, "--XyZ\r\nContent-Disposition: form-data; "
	    "name=\"jfr\"; filename=\"jfr\"\r\nContent-Type: application/"
	    "octet-stream\r\n\r\n");
	sm_buf_append(&body, jfr, jn);
	sm_buf_printf(&body, "\r\n--XyZ\r\nContent-Disposition: form-data; "
	    "name=\"labels\"; filename=\"labels\"\r\n\r\n");
	sm_buf_append(&body, lab, ln);
	sm_buf_printf(&body, "\r\n--XyZ--\r\n");
	SM_REQUIRE(sm_buf_error(&body) == 0);

	run_init(&r);
	r.rv = dist_jfr_upload(ct, (const uint8_t *)body.b, body.len, &r.in,
	    4u << 20, &r.b, &r.err);
	SM_REQUIRE(r.rv == 0);
	SM_REQUIRE(dist_batch_finish(&r.b) == 0);
	SM_CHECK(type_total(&r.b, "process_cpu", "cpu", &ns) > 0);
	SM_CHECK(ns > 1);
	run_fini(&r);

	/* labels above the cap */
	run_init(&r);
	r.rv = dist_jfr_upload(ct, (const uint8_t *)body.b, body.len, &r.in,
	    16, &r.b, &r.err);
	SM_CHECKF(r.rv == SM_ETOOBIG, "rv %d: %s", r.rv, r.err.msg);
	run_fini(&r);

	/* no jfr part */
	sm_buf_fini(&body);
	body = (struct sm_buf)SM_BUF_INIT;
	sm_buf_printf(&body, "--XyZ\r\nContent-Disposition: form-data; "
	    "name=\"other\"\r\n\r\nx\r\n--XyZ--\r\n");
	run_init(&r);
	r.rv = dist_jfr_upload(ct, (const uint8_t *)body.b, body.len, &r.in,
	    4u << 20, &r.b, &r.err);
	SM_CHECKF(r.rv == SM_EMALFORMED && strstr(r.err.msg, "\"jfr\"") !=
	    NULL, "rv %d: %s", r.rv, r.err.msg);
	run_fini(&r);
	sm_buf_fini(&body);
	free(jfr);
	free(lab);
}

/*
 * speedscope__heavy.jfr: a raw (uncompressed) JDK recording, JFR 2.1.
 * `jfr print` (the JDK's own reader) shows 346 jdk.ExecutionSample
 * events, all STATE_RUNNABLE; speedscope's golden: root Heavy:main, 52
 * unique stacks.
 */
static void
test_jdk_raw_21(void)
{
	size_t n, nl;
	uint8_t *raw = read_data("tests/data", "speedscope__heavy.jfr", &n);
	struct run r;
	uint32_t ns;
	char *txt, *line;
	int bad_root = 0;

	if (raw == NULL)
		SM_SKIP("tests/data/speedscope__heavy.jfr not found");
	SM_REQUIRE(n > 8 && memcmp(raw, "FLR\0\0\2\0\1", 8) == 0);
	run_init(&r);
	r.in.line_numbers = false;
	SM_REQUIRE(run_go(&r, raw, n) == 0);
	SM_CHECK_EQ(type_total(&r.b, "process_cpu", "cpu", &ns),
	    346LL * 10000000);
	txt = collapse(&r.b, "process_cpu", "cpu", &nl);
	SM_CHECK_EQ(nl, 52);
	for (line = txt; *line != '\0';) {
		char *e = strchr(line, '\n');

		bad_root += strncmp(line, "Heavy.main;", 11) != 0 &&
		    strncmp(line, "Heavy.main ", 11) != 0;
		line = e != NULL ? e + 1 : line + strlen(line);
	}
	SM_CHECKF(bad_root == 0, "%d stacks not rooted at Heavy.main:\n%.600s",
	    bad_root, txt);
	free(txt);
	run_fini(&r);
	free(raw);
}

/* --- mutation ---------------------------------------------------------------- */

static uint64_t
xs(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (*s);
}

/*
 * Deterministic mutations of real recordings: every run must end in 0 or
 * a clean error with a message (and, under ASan/UBSan, touch no byte it
 * should not).  JFR_FUZZ_ITERS overrides the per-recording count.
 */
static void
test_mutations(void)
{
	static const char *const files[] = { "jfrparser__nativemem.jfr.gz",
	    "jfrparser__wall_tick_sample.jfr.gz",
	    "jfrparser__new_spancontext.jfr.gz", "jfrparser__dump1.jfr.gz" };
	const char *e = getenv("JFR_FUZZ_ITERS");
	long iters = e != NULL ? atol(e) : 500;
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	long execs = 0, ok = 0;

	for (size_t fi = 0; fi < SM_ARRAY_LEN(files); fi++) {
		size_t n;
		uint8_t *raw = load_raw(files[fi], &n);
		uint8_t *m = malloc(n + 64);

		SM_REQUIRE(m != NULL);
		for (long it = 0; it < iters; it++) {
			size_t mn = n;
			int nm = 1 + (int)(xs(&seed) % 4);
			struct run r;

			memcpy(m, raw, n);
			for (int k = 0; k < nm; k++) {
				uint64_t x = xs(&seed);
				/* half of the edits land in the chunk's
				 * first 4 KiB and last 16 KiB (header,
				 * metadata, pools) */
				size_t pos = x & 1 ? (size_t)(xs(&seed) %
				    SM_MIN(mn, (size_t)4096)) : x & 2 ?
				    mn - 1 - (size_t)(xs(&seed) % SM_MIN(mn,
				    (size_t)16384)) : (size_t)(xs(&seed) % mn);

				switch ((x >> 8) % 6) {
				case 0:
					m[pos] ^= (uint8_t)(1u << (x >> 16 & 7));
					break;
				case 1: {
					static const uint8_t v[] = { 0, 1, 0x7f,
					    0x80, 0xff, 0xfe };

					m[pos] = v[(x >> 16) % sizeof(v)];
					break;
				}
				case 2:    /* a huge varint */
					for (size_t j = pos; j < mn &&
					    j < pos + 9; j++)
						m[j] = 0xff;
					break;
				case 3:    /* cut */
					mn = pos + 1;
					break;
				case 4:    /* delete a few bytes */ {
					size_t d = SM_MIN((size_t)(x >> 16 & 15)
					    + 1, mn - pos - 1);

					memmove(m + pos, m + pos + d,
					    mn - pos - d);
					mn -= d;
					break;
				}
				default:   /* insert a few bytes */ {
					size_t d = (size_t)(x >> 16 & 7) + 1;

					if (mn + d > n + 64)
						break;
					memmove(m + pos + d, m + pos, mn - pos);
					memset(m + pos, (int)(x >> 24 & 0xff), d);
					mn += d;
					break;
				}
				}
				if (mn == 0)
					mn = 1;
			}
			run_init(&r);
			r.lim.max_samples = 16000;
			run_go(&r, m, mn);
			execs++;
			ok += r.rv == 0;
			SM_CHECKF(r.rv == 0 || r.rv == SM_EMALFORMED ||
			    r.rv == SM_EUNSUPPORTED || r.rv == SM_ELIMIT ||
			    r.rv == SM_ETOOBIG || r.rv == SM_EINVAL,
			    "%s iteration %ld: rv %d: %s", files[fi], it,
			    r.rv, r.err.msg);
			run_fini(&r);
		}
		free(m);
		free(raw);
	}
	printf("     %ld mutated recordings parsed (%ld accepted, %ld "
	    "refused)\n", execs, ok, execs - ok);
	SM_CHECK(execs > 0 && ok < execs);
}

SM_TEST_MAIN(
	{ "goldens: every jfrparser recording, with and without labels",
	    test_goldens },
	{ "raw and gzip recordings give the same batch", test_raw_equals_gzip },
	{ "series labels: type, period, base, jfr_event", test_series_labels },
	{ "LabelsSnapshot context ids split series", test_context_labels },
	{ "span_name from the snapshot strings", test_span_name },
	{ "limits: size, samples, depth", test_limits },
	{ "malformed and unsupported recordings", test_malformed },
	{ "JDK recording, JFR 2.1, raw", test_jdk_raw_21 },
	{ "concatenated recordings are one multi-chunk recording",
	    test_multichunk },
	{ "multipart upload with gzipped labels", test_upload_multipart },
	{ "mutation: deterministic corruptions of real recordings",
	    test_mutations },
)
