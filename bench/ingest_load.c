/*
 * ingest_load.c -- load generator: POSTs pprof files to /ingest over
 * keep-alive HTTP/1.1 connections as fast as the server answers.
 *
 *   ingest_load [-c connections] [-t seconds] [-a host:port] [-q query]
 *               file...
 *
 * Each request sends one file (round robin) as a raw pprof body
 * (format=pprof) to /ingest?name=bench.app{conn=N}&<query>.  Prints
 * profiles/s, errors, and the status of the first error seen.  A
 * measuring stick for benchmarks, not product code.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static unsigned char **files;
static size_t *lens, nfiles;
static const char *host = "127.0.0.1";
static int port = 4040;
static double secs = 5;
static const char *extra = "";

struct worker {
	int id;
	pthread_t thr;
	long ok, errors;
	int first_status;
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((double)ts.tv_sec + ts.tv_nsec / 1e9);
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

/* Read one response; returns the status or -1.  Handles Content-Length. */
static int
read_response(int fd)
{
	char buf[65536];
	size_t have = 0;
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
	body -= (long)(have - (size_t)(hdr_end + 4 - buf));
	while (body > 0) {
		ssize_t r = read(fd, buf, sizeof(buf));

		if (r <= 0)
			return (-1);
		body -= r;
	}
	return (status);
}

static void *
worker_main(void *p)
{
	struct worker *w = p;
	double end = now_s() + secs;
	int fd = dial();
	size_t k = (size_t)w->id;
	char hdr[1024];

	while (fd >= 0 && now_s() < end) {
		int n, status;

		k = (k + 1) % nfiles;
		n = snprintf(hdr, sizeof(hdr), "POST /ingest?name=bench.app"
		    "%%7Bconn%%3D%d%%7D&format=pprof&spyName=gospy%s%s HTTP/1.1\r\n"
		    "Host: %s\r\nContent-Type: application/octet-stream\r\n"
		    "Content-Length: %zu\r\n\r\n", w->id, *extra ? "&" : "",
		    extra, host, lens[k]);
		if (write_all(fd, hdr, (size_t)n) != 0 ||
		    write_all(fd, files[k], lens[k]) != 0 ||
		    (status = read_response(fd)) < 0) {
			close(fd);
			fd = dial();
			w->errors++;
			continue;
		}
		if (status == 200) {
			w->ok++;
		} else {
			if (w->first_status == 0)
				w->first_status = status;
			w->errors++;
		}
	}
	if (fd >= 0)
		close(fd);
	return (NULL);
}

int
main(int argc, char **argv)
{
	struct worker *ws;
	int conns = 1, i = 1;
	long ok = 0, errs = 0;
	int first = 0;
	double t0, t;

	for (; i < argc && argv[i][0] == '-'; i += 2) {
		if (i + 1 >= argc)
			return (2);
		if (strcmp(argv[i], "-c") == 0) {
			conns = atoi(argv[i + 1]);
		} else if (strcmp(argv[i], "-t") == 0) {
			secs = atof(argv[i + 1]);
		} else if (strcmp(argv[i], "-q") == 0) {
			extra = argv[i + 1];
		} else if (strcmp(argv[i], "-a") == 0) {
			static char h[256];
			char *c;

			snprintf(h, sizeof(h), "%s", argv[i + 1]);
			if ((c = strrchr(h, ':')) != NULL) {
				*c = '\0';
				port = atoi(c + 1);
				host = h;
			}
		}
	}
	files = calloc((size_t)argc, sizeof(*files));
	lens = calloc((size_t)argc, sizeof(*lens));
	for (; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		long l;

		if (f == NULL) {
			fprintf(stderr, "cannot read %s\n", argv[i]);
			return (1);
		}
		fseek(f, 0, SEEK_END);
		l = ftell(f);
		fseek(f, 0, SEEK_SET);
		files[nfiles] = malloc((size_t)l);
		if (fread(files[nfiles], 1, (size_t)l, f) != (size_t)l)
			return (1);
		lens[nfiles++] = (size_t)l;
		fclose(f);
	}
	if (nfiles == 0 || conns < 1)
		return (2);
	ws = calloc((size_t)conns, sizeof(*ws));
	t0 = now_s();
	for (int c = 0; c < conns; c++) {
		ws[c].id = c;
		pthread_create(&ws[c].thr, NULL, worker_main, &ws[c]);
	}
	for (int c = 0; c < conns; c++) {
		pthread_join(ws[c].thr, NULL);
		ok += ws[c].ok;
		errs += ws[c].errors;
		if (first == 0)
			first = ws[c].first_status;
	}
	t = now_s() - t0;
	printf("ingest_load profiles=%ld errors=%ld first_error_status=%d "
	    "seconds=%.3f profiles_per_s=%.1f\n", ok, errs, first, t, ok / t);
	return (errs != 0 && ok == 0 ? 1 : 0);
}
