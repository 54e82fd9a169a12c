/*
 * jfr_bench.c -- JFR reader throughput next to plain gunzip of the same
 * files, and the reader's peak memory.  A measuring stick, not product
 * code.
 *
 *   jfr_bench [-t seconds] [-x copies] file.jfr[.gz]...
 *   jfr_bench -m [-x copies] file.jfr[.gz]
 *
 * Throughput mode: the files are read into memory (not timed), then, one
 * thread, for at least -t seconds each (default 3):
 *   gunzip  zlib inflate of every file into a reused 256 KiB buffer
 *           (the floor: what merely decompressing the bytes costs);
 *   jfr     dist_jfr_ingest() of every file into a fresh write batch plus
 *           dist_batch_finish() (decompression included).
 * Both are reported as MB/s of decompressed JFR and files/s.
 *
 * Memory mode (-m, one file): peak RSS (getrusage ru_maxrss) after the
 * body is in memory, then after one parse; the difference is what the
 * parse needed on top of the request body.  -x N makes the body N copies
 * of the file laid end to end (concatenated gzip members, or chunks for a
 * raw recording: one N-times larger multi-chunk recording).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/arena.h"
#include "common/gz.h"
#include "distributor/jfr.h"

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
}

static long
maxrss_kb(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_maxrss);
}

static unsigned char *
slurp(const char *p, size_t *n, int copies)
{
	FILE *f = fopen(p, "rb");
	unsigned char *b;
	long l;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (l = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		perror(p);
		exit(1);
	}
	if ((b = malloc((size_t)l * (size_t)copies + 1)) == NULL ||
	    fread(b, 1, (size_t)l, f) != (size_t)l) {
		perror(p);
		exit(1);
	}
	fclose(f);
	for (int i = 1; i < copies; i++)
		memcpy(b + (size_t)l * (size_t)i, b, (size_t)l);
	*n = (size_t)l * (size_t)copies;
	return (b);
}

/* Inflate (all gzip members) into a reused buffer; decompressed bytes. */
static size_t
gunzip_floor(const unsigned char *p, size_t n)
{
	static unsigned char out[256 << 10];
	z_stream zs;
	size_t total = 0;
	int zr = Z_OK;

	if (!sm_is_gzip(p, n))
		return (n);
	memset(&zs, 0, sizeof(zs));
	if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
		exit(1);
	zs.next_in = (Bytef *)(uintptr_t)p;
	zs.avail_in = (uInt)n;
	for (;;) {
		zs.next_out = out;
		zs.avail_out = sizeof(out);
		zr = inflate(&zs, Z_NO_FLUSH);
		total += sizeof(out) - zs.avail_out;
		if (zr == Z_STREAM_END) {
			if (zs.avail_in == 0)
				break;
			inflateReset(&zs);
		} else if (zr != Z_OK) {
			fprintf(stderr, "inflate: %d\n", zr);
			exit(1);
		}
	}
	inflateEnd(&zs);
	return (total);
}

static int
parse_one(const unsigned char *p, size_t n, size_t *nseries)
{
	struct sm_arena *a = sm_arena_create(0);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	struct sm_label base = { "service_name", "bench" };
	struct dist_jfr_in in;
	int rv;

	dist_limits_default(&lim);
	lim.max_samples = 0;
	memset(&in, 0, sizeof(in));
	in.base = &base;
	in.nbase = 1;
	in.sample_rate = 100;
	in.time_ms = 1700000000000;
	if (a == NULL || dist_batch_init(&b, a, &lim) != 0)
		exit(1);
	rv = dist_jfr_ingest(p, n, &in, &b, &err);
	if (rv == 0)
		rv = dist_batch_finish(&b);
	else
		fprintf(stderr, "jfr: %s\n", err.msg);
	*nseries = b.nseries;
	dist_batch_fini(&b);
	sm_arena_destroy(a);
	return (rv);
}

int
main(int argc, char **argv)
{
	double secs = 3;
	int copies = 1, mem = 0, c, nf;
	unsigned char **body;
	size_t *len, raw = 0, gz = 0, ns;

	while ((c = getopt(argc, argv, "mt:x:")) != -1) {
		switch (c) {
		case 'm':
			mem = 1;
			break;
		case 't':
			secs = atof(optarg);
			break;
		case 'x':
			copies = atoi(optarg) > 0 ? atoi(optarg) : 1;
			break;
		default:
			fprintf(stderr, "usage: jfr_bench [-m] [-t s] [-x n] "
			    "file...\n");
			return (2);
		}
	}
	nf = argc - optind;
	if (nf <= 0 || (mem && nf != 1)) {
		fprintf(stderr, "usage: jfr_bench [-m] [-t s] [-x n] file...\n");
		return (2);
	}
	body = calloc((size_t)nf, sizeof(*body));
	len = calloc((size_t)nf, sizeof(*len));
	for (int i = 0; i < nf; i++) {
		body[i] = slurp(argv[optind + i], &len[i], copies);
		memset(body[i], body[i][0], 1);   /* touch */
		gz += len[i];
		raw += gunzip_floor(body[i], len[i]);
	}
	if (mem) {
		long before = maxrss_kb();
		double t0 = now_s();

		if (parse_one(body[0], len[0], &ns) != 0)
			return (1);
		printf("body %.1f MB (%.1f MB decompressed), %zu series, "
		    "parse %.2f s\n", gz / 1e6, raw / 1e6, ns, now_s() - t0);
		printf("peak RSS: %.1f MB with the body loaded, %.1f MB after "
		    "the parse (+%.1f MB)\n", before / 1024.0,
		    maxrss_kb() / 1024.0, (maxrss_kb() - before) / 1024.0);
		return (0);
	}
	for (int pass = 0; pass < 2; pass++) {
		double t0 = now_s(), dt;
		long it = 0;

		do {
			for (int i = 0; i < nf; i++) {
				if (pass == 0)
					(void)gunzip_floor(body[i], len[i]);
				else if (parse_one(body[i], len[i], &ns) != 0)
					return (1);
			}
			it++;
		} while ((dt = now_s() - t0) < secs);
		printf("%-7s %8.1f MB/s decompressed JFR  %8.1f files/s  "
		    "(%d files, %.1f MB gz, %.1f MB raw, %ld rounds)\n",
		    pass == 0 ? "gunzip" : "jfr", (double)raw * (double)it /
		    dt / 1e6, (double)nf * (double)it / dt, nf, gz / 1e6,
		    raw / 1e6, it);
	}
	return (0);
}
