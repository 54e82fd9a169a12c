/*
 * pprof_stages.c -- the ingest path's decode stages without HTTP or the
 * head, one thread: how much of an upload's CPU is the pprof decoder's.
 * A measuring stick, not product code.
 *
 *   pprof_stages [-t seconds] [-s stage] -l listfile
 *
 * The files (gzipped pprof, as B1 sends them) are read into memory, then
 * for -t seconds (default 5), round robin, each is taken through three
 * stages, and each stage is timed over whole rounds of the list:
 *   gunzip  -- sm_gunzip into a reset arena (libdeflate);
 *   decode  -- gunzip + dist_pprof_ingest into a fresh batch +
 *              dist_batch_finish (the distributor's work up to the push);
 *   encode  -- decode + dist_batch_encode_rep (the internal request as
 *              the head log records it).
 * -s runs only that stage (0, 1 or 2), for a profiler.  Prints, per stage, profiles/s and microseconds per profile, and the
 * request trees' mean node count and the decoder's stack-tree probes.
 * Use it to see what a change to the decoder buys before B1 sees it
 * through HTTP and the head (bench/README.md).
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/arena.h"
#include "common/buf.h"
#include "common/gz.h"
#include "distributor/batch.h"
#include "distributor/pprof.h"

#define MAX_RAW (256u << 20)

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((double)ts.tv_sec + ts.tv_nsec / 1e9);
}

static uint8_t *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p = NULL;
	size_t cap = 0, n = 0, r;

	if (f == NULL) {
		perror(path);
		exit(1);
	}
	do {
		if (n == cap) {
			cap = cap ? cap * 2 : 65536;
			if ((p = realloc(p, cap)) == NULL)
				exit(1);
		}
		r = fread(p + n, 1, cap - n, f);
		n += r;
	} while (r > 0);
	fclose(f);
	*len = n;
	return (p);
}

/* One file through `stage` (0 gunzip, 1 decode, 2 encode); the request
 * tree's node count in *nodes. */
static void
one(const uint8_t *gz, size_t len, int stage, uint64_t *nodes)
{
	static const struct sm_label base[] = { { "service_name", "bench" } };
	struct dist_pprof_in in = { base, 1, "gospy", NULL, 0, NULL,
	    1700000000000 };
	struct sm_arena *a = sm_arena_create(1u << 30);
	struct dist_limits lim;
	struct dist_batch b;
	struct sm_err err;
	uint8_t *raw;
	size_t rawlen;
	uint8_t pid[16] = { 1 };

	if (a == NULL)
		exit(1);
	sm_err_clear(&err);
	if (sm_gunzip(gz, len, MAX_RAW, a, &raw, &rawlen, &err) != 0) {
		fprintf(stderr, "gunzip: %s\n", err.msg);
		exit(1);
	}
	if (stage >= 1) {
		dist_limits_default(&lim);
		if (dist_batch_init(&b, a, &lim) != 0 ||
		    dist_pprof_ingest(raw, rawlen, &in, &b, &err) != 0 ||
		    dist_batch_finish(&b) != 0) {
			fprintf(stderr, "decode: %s\n", err.msg);
			exit(1);
		}
		*nodes += b.tree.n;
		if (stage >= 2) {
			struct sm_buf out;

			sm_buf_init(&out);
			if (dist_batch_encode_rep(&b, "bench", pid, NULL, 0, 0,
			    NULL, 0, &out, NULL) != 0) {
				fprintf(stderr, "encode failed\n");
				exit(1);
			}
			sm_buf_fini(&out);
		}
		dist_batch_fini(&b);
	}
	sm_arena_destroy(a);
}

int
main(int argc, char **argv)
{
	static const char *const names[] = { "gunzip", "decode", "encode" };
	const char *list = NULL;
	double secs = 5;
	int only = -1;
	uint8_t **files = NULL;
	size_t *lens = NULL, nfiles = 0, cap = 0;
	char line[4096];
	FILE *f;
	int c;

	while ((c = getopt(argc, argv, "t:s:l:")) != -1) {
		if (c == 't')
			secs = atof(optarg);
		else if (c == 's')
			only = atoi(optarg);
		else if (c == 'l')
			list = optarg;
		else
			goto usage;
	}
	if (list == NULL)
		goto usage;
	if ((f = fopen(list, "r")) == NULL) {
		perror(list);
		return (1);
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '\0')
			continue;
		if (nfiles == cap) {
			cap = cap ? cap * 2 : 64;
			files = realloc(files, cap * sizeof(*files));
			lens = realloc(lens, cap * sizeof(*lens));
			if (files == NULL || lens == NULL)
				return (1);
		}
		files[nfiles] = slurp(line, &lens[nfiles]);
		nfiles++;
	}
	fclose(f);
	if (nfiles == 0)
		goto usage;
	/* Keep freed memory: the server's request arenas come from a warm
	 * heap (its threads' malloc arenas), where this one thread would
	 * otherwise give every arena's blocks back to the kernel and fault
	 * them in again, about a tenth of the time measured. */
	mallopt(M_TRIM_THRESHOLD, 512 << 20);
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	for (int stage = 0; stage < 3; stage++) {
		uint64_t n = 0, nodes = 0;
		double t0 = now_s(), t;

		if (only >= 0 && stage != only)
			continue;
		do {
			for (size_t i = 0; i < nfiles; i++)
				one(files[i], lens[i], stage, &nodes);
			n += nfiles;
		} while ((t = now_s() - t0) < (only >= 0 ? secs : secs / 3));
		printf("%s profiles=%llu seconds=%.3f profiles_per_s=%.1f "
		    "us_per_profile=%.1f", names[stage], (unsigned long long)n,
		    t, n / t, t * 1e6 / n);
		if (stage >= 1)
			printf(" tree_nodes=%.1f", (double)nodes / n);
		printf("\n");
	}
	return (0);
usage:
	fprintf(stderr, "usage: pprof_stages [-t seconds] [-s stage] "
	    "-l listfile\n");
	return (2);
}
