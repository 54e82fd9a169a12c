/*
 * ingest_load.c -- load generator: POSTs pprof files to /ingest over
 * keep-alive HTTP/1.1 connections as fast as the server answers.  A
 * measuring stick for benchmarks, not product code.
 *
 *   ingest_load [-c connections] [-t seconds] [-a host:port] [-q query]
 *               [-p pace_ms] [-o] [-l listfile]... [file...]
 *   ingest_load -m manifest [-c connections] [-a host:port] [-r retries]
 *
 * Round-robin mode (files): for -t seconds, each request sends one file
 * (round robin; the files are read into memory first) as a raw pprof body
 * to /ingest?name=bench.app{conn=N}&format=pprof&spyName=gospy&<query>.
 *
 * Manifest mode (-m): every line "path<TAB>query" is sent exactly once, in
 * order across the connections, to /ingest?<query> (the query carries the
 * name, from, until and format); files are read when sent.  Used to
 * replay a corpus at its own timestamps.
 *
 * -o (round-robin mode) sends each file as it is to POST
 * /v1development/profiles with Content-Type application/x-protobuf: the
 * files are OTLP ExportProfilesServiceRequests (B16).
 *
 * -p paces each connection to one request per pace_ms (a steady writer
 * whose latency is measured, B8), instead of as fast as the server answers.
 *
 * -r N (manifest mode): answer 429 and 503 as Pyroscope's agents do, by
 * sending the same upload again after 100 ms, up to N times (B9: an
 * ingester over its memory bound refuses with 503).  The retries are
 * counted in `retried`; only the final answer counts as ok or error.
 *
 * Prints profiles (2xx answers), errors, the status and body head of the
 * first error, seconds, profiles/s, bytes sent, and the latency of every
 * request (send to last byte of the answer): p50_ms, p99_ms, max_ms.
 * Exits 1 when nothing succeeded.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_util.h"

static unsigned char **files;
static size_t *lens, nfiles;
static char **mpaths, **mqueries;	/* manifest mode */
static size_t nmanifest;
static atomic_size_t next_line;
static const char *host = "127.0.0.1";
static int port = 4040;
static double secs = 5;
static const char *extra = "";
static double pace_s;
static long max_retries;
static int otlp;                        /* -o */
static atomic_long retried;

struct worker {
	int id;
	pthread_t thr;
	long ok, errors;
	size_t bytes;
	int first_status;
	char first_body[256];
	double *lat;                   /* seconds, one per request */
	size_t nlat, caplat;
};

static void
lat_add(struct worker *w, double s)
{
	if (w->nlat == w->caplat) {
		w->caplat = w->caplat ? w->caplat * 2 : 1024;
		w->lat = bench_xrealloc(w->lat, w->caplat * sizeof(double));
	}
	w->lat[w->nlat++] = s;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return ((x > y) - (x < y));
}

static int
dial(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return (-1);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return (fd);
}

static int
write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t w = write(fd, c, n);

		if (w <= 0)
			return (-1);
		c += w;
		n -= (size_t)w;
	}
	return (0);
}

/*
 * Read one response; returns the status or -1.  Handles Content-Length
 * bodies; the first bytes of the body are copied to `head` (NUL-ended).
 */
static int
read_response(int fd, char *head, size_t headsz)
{
	char buf[65536];
	size_t have = 0, hl = 0;
	char *hdr_end, *cl;
	long body = 0;
	int status;

	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);

		if (r <= 0)
			return (-1);
		have += (size_t)r;
		buf[have] = '\0';
		if ((hdr_end = strstr(buf, "\r\n\r\n")) != NULL)
			break;
		if (have == sizeof(buf) - 1)
			return (-1);
	}
	status = atoi(buf + 9);
	if ((cl = strcasestr(buf, "content-length:")) != NULL &&
	    cl < hdr_end)
		body = atol(cl + 15);
	hl = have - (size_t)(hdr_end + 4 - buf);
	if (headsz > 0) {
		size_t c = hl < headsz - 1 ? hl : headsz - 1;

		memcpy(head, hdr_end + 4, c);
		head[c] = '\0';
	}
	body -= (long)hl;
	while (body > 0) {
		ssize_t r = read(fd, buf, sizeof(buf));

		if (r <= 0)
			return (-1);
		body -= r;
	}
	return (status);
}

/* POST one body; returns the status, or -1 (and reconnects) on I/O error. */
static int
post(int *fd, const char *query, const void *body, size_t len, char *head,
    size_t headsz)
{
	char hdr[8192];
	int n, status;

	if (otlp)
		n = snprintf(hdr, sizeof(hdr), "POST /v1development/profiles "
		    "HTTP/1.1\r\nHost: %s\r\nContent-Type: application/"
		    "x-protobuf\r\nContent-Length: %zu\r\n\r\n", host, len);
	else
		n = snprintf(hdr, sizeof(hdr), "POST /ingest?%s HTTP/1.1\r\n"
		    "Host: %s\r\nContent-Type: application/octet-stream\r\n"
		    "Content-Length: %zu\r\n\r\n", query, host, len);
	if (n < 0 || (size_t)n >= sizeof(hdr))
		return (-1);
	if (*fd < 0 || write_all(*fd, hdr, (size_t)n) != 0 ||
	    write_all(*fd, body, len) != 0 ||
	    (status = read_response(*fd, head, headsz)) < 0) {
		if (*fd >= 0)
			close(*fd);
		*fd = dial();
		return (-1);
	}
	return (status);
}

static void
count(struct worker *w, int status, const char *head, size_t len)
{
	if (status >= 200 && status < 300) {
		w->ok++;
		w->bytes += len;
		return;
	}
	if (w->first_status == 0) {
		w->first_status = status;
		snprintf(w->first_body, sizeof(w->first_body), "%s", head);
	}
	w->errors++;
}

static void *
worker_rr(void *p)
{
	struct worker *w = p;
	double end = bench_now_s() + secs;
	int fd = dial();
	size_t k = (size_t)w->id;
	char q[4096], head[256];

	snprintf(q, sizeof(q), "name=bench.app%%7Bconn%%3D%d%%7D&format=pprof"
	    "&spyName=gospy%s%s", w->id, *extra ? "&" : "", extra);
	double next = bench_now_s();

	while (fd >= 0 && bench_now_s() < end) {
		double t0;

		if (pace_s > 0) {
			double now = bench_now_s();

			if (now < next)
				usleep((useconds_t)((next - now) * 1e6));
			next += pace_s;
		}
		k = (k + 1) % nfiles;
		head[0] = '\0';
		t0 = bench_now_s();
		count(w, post(&fd, q, files[k], lens[k], head, sizeof(head)),
		    head, lens[k]);
		lat_add(w, bench_now_s() - t0);
	}
	if (fd >= 0)
		close(fd);
	return (NULL);
}

static void *
worker_manifest(void *p)
{
	struct worker *w = p;
	int fd = dial();
	unsigned char *buf = NULL;
	size_t cap = 0, i;
	char head[256];

	while ((i = atomic_fetch_add(&next_line, 1)) < nmanifest) {
		long n = bench_read_file(mpaths[i], &buf, &cap);
		int status;

		if (n < 0) {
			fprintf(stderr, "cannot read %s\n", mpaths[i]);
			w->errors++;
			continue;
		}
		double t0 = bench_now_s();

		head[0] = '\0';
		status = post(&fd, mqueries[i], buf, (size_t)n, head,
		    sizeof(head));
		for (long r = 0; r < max_retries && (status == 429 ||
		    status == 503); r++) {
			atomic_fetch_add(&retried, 1);
			usleep(100 * 1000);
			head[0] = '\0';
			status = post(&fd, mqueries[i], buf, (size_t)n, head,
			    sizeof(head));
		}
		count(w, status, head, (size_t)n);
		lat_add(w, bench_now_s() - t0);
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return (NULL);
}

static int
read_manifest(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[8192];
	size_t cap = 0;

	if (f == NULL)
		return (-1);
	while (fgets(line, sizeof(line), f) != NULL) {
		char *tab = strchr(line, '\t');

		line[strcspn(line, "\r\n")] = '\0';
		if (tab == NULL)
			continue;
		*tab = '\0';
		if (nmanifest == cap) {
			cap = cap ? cap * 2 : 4096;
			mpaths = bench_xrealloc(mpaths, cap * sizeof(char *));
			mqueries = bench_xrealloc(mqueries, cap * sizeof(char *));
		}
		mpaths[nmanifest] = strdup(line);
		mqueries[nmanifest++] = strdup(tab + 1);
	}
	fclose(f);
	return (0);
}

int
main(int argc, char **argv)
{
	struct worker *ws;
	int conns = 1, i = 1;
	long ok = 0, errs = 0;
	size_t bytes = 0, npaths = 0;
	char **paths = NULL;
	const char *manifest = NULL;
	struct worker *first = NULL;
	double t0, t, *lat = NULL;
	size_t nlat = 0;

	for (; i < argc && argv[i][0] == '-'; i += 2) {
		if (strcmp(argv[i], "-o") == 0) {
			otlp = 1;
			i--;            /* no value */
			continue;
		}
		if (i + 1 >= argc)
			return (2);
		if (strcmp(argv[i], "-c") == 0) {
			conns = atoi(argv[i + 1]);
		} else if (strcmp(argv[i], "-t") == 0) {
			secs = atof(argv[i + 1]);
		} else if (strcmp(argv[i], "-q") == 0) {
			extra = argv[i + 1];
		} else if (strcmp(argv[i], "-p") == 0) {
			pace_s = atof(argv[i + 1]) / 1000;
		} else if (strcmp(argv[i], "-r") == 0) {
			max_retries = atol(argv[i + 1]);
		} else if (strcmp(argv[i], "-m") == 0) {
			manifest = argv[i + 1];
		} else if (strcmp(argv[i], "-l") == 0) {
			if (bench_read_list(argv[i + 1], &paths, &npaths) != 0)
				return (1);
		} else if (strcmp(argv[i], "-a") == 0) {
			static char h[256];
			char *c;

			snprintf(h, sizeof(h), "%s", argv[i + 1]);
			if ((c = strrchr(h, ':')) != NULL) {
				*c = '\0';
				port = atoi(c + 1);
				host = h;
			}
		} else {
			return (2);
		}
	}
	if (conns < 1)
		return (2);
	if (manifest != NULL) {
		if (read_manifest(manifest) != 0 || nmanifest == 0) {
			fprintf(stderr, "cannot read manifest %s\n", manifest);
			return (1);
		}
	} else {
		for (; i < argc; i++) {
			paths = bench_xrealloc(paths,
			    (npaths + 1) * sizeof(*paths));
			paths[npaths++] = argv[i];
		}
		files = calloc(npaths + 1, sizeof(*files));
		lens = calloc(npaths + 1, sizeof(*lens));
		for (size_t k = 0; k < npaths; k++) {
			size_t cap = 0;
			long n = bench_read_file(paths[k], &files[k], &cap);

			if (n < 0) {
				fprintf(stderr, "cannot read %s\n", paths[k]);
				return (1);
			}
			lens[k] = (size_t)n;
		}
		nfiles = npaths;
		if (nfiles == 0)
			return (2);
	}
	ws = calloc((size_t)conns, sizeof(*ws));
	t0 = bench_now_s();
	for (int c = 0; c < conns; c++) {
		ws[c].id = c;
		pthread_create(&ws[c].thr, NULL,
		    manifest ? worker_manifest : worker_rr, &ws[c]);
	}
	for (int c = 0; c < conns; c++) {
		pthread_join(ws[c].thr, NULL);
		ok += ws[c].ok;
		errs += ws[c].errors;
		bytes += ws[c].bytes;
		if (first == NULL && ws[c].first_status != 0)
			first = &ws[c];
		lat = bench_xrealloc(lat, (nlat + ws[c].nlat + 1) *
		    sizeof(double));
		memcpy(lat + nlat, ws[c].lat, ws[c].nlat * sizeof(double));
		nlat += ws[c].nlat;
		free(ws[c].lat);
	}
	t = bench_now_s() - t0;
	qsort(lat, nlat, sizeof(double), cmp_double);
	printf("ingest_load profiles=%ld errors=%ld first_error_status=%d "
	    "seconds=%.3f profiles_per_s=%.1f bytes=%zu p50_ms=%.3f "
	    "p99_ms=%.3f max_ms=%.3f retried=%ld\n", ok, errs,
	    first ? first->first_status : 0, t, ok / t, bytes,
	    nlat ? lat[nlat / 2] * 1e3 : 0.0,
	    nlat ? lat[(size_t)((double)(nlat - 1) * 0.99)] * 1e3 : 0.0,
	    nlat ? lat[nlat - 1] * 1e3 : 0.0, atomic_load(&retried));
	free(lat);
	if (first != NULL)
		printf("first_error_body: %s\n", first->first_body);
	return (errs != 0 && ok == 0 ? 1 : 0);
}
