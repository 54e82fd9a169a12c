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
 *              the head log records it);
 *   apply   -- encode + ing_head_write of the message (the single
 *              binary's direct call) into one head kept for the whole
 *              run, as a server's head is between cuts: the ingester's
 *              share of an upload without HTTP, the head log or locks
 *              waited on.
 * -s runs only that stage (0 to 3), for a profiler.  Prints, per stage, profiles/s and microseconds per profile, and the
 * request trees' mean node count and the decoder's stack-tree probes.
 * Use it to see what a change to the decoder buys before B1 sees it
 * through HTTP and the head (bench/README.md).
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_util.h"
#include "common/arena.h"
#include "common/buf.h"
#include "common/gz.h"
#include "distributor/batch.h"
#include "distributor/pprof.h"
#include "ingester/head.h"

#define MAX_RAW (256u << 20)

/* The apply stage's head: one for the run, as a server's between cuts. */
static struct ing_head *head;

/* One file through `stage` (0 gunzip, 1 decode, 2 encode, 3 apply); the
 * request tree's node count in *nodes. */
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
			Smolder__V1__Request *msg = NULL;
			struct sm_buf out;
			uint32_t ns, np;

			sm_buf_init(&out);
			if (dist_batch_encode_rep(&b, "bench", pid, NULL, 0, 0,
			    NULL, 0, &out, stage >= 3 ? &msg : NULL) != 0) {
				fprintf(stderr, "encode failed\n");
				exit(1);
			}
			if (stage >= 3 && ing_head_write(head, msg->write, 0,
			    &ns, &np, &err) != 0) {
				fprintf(stderr, "apply: %s\n", err.msg);
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
	static const char *const names[] = { "gunzip", "decode", "encode",
	    "apply" };
	const char *list = NULL;
	double secs = 5;
	int only = -1;
	char **paths = NULL;
	uint8_t **files;
	size_t *lens, nfiles = 0;
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
	if (list == NULL || bench_read_list(list, &paths, &nfiles) != 0 ||
	    nfiles == 0)
		goto usage;
	files = bench_xmalloc(nfiles * sizeof(*files));
	lens = bench_xmalloc(nfiles * sizeof(*lens));
	for (size_t i = 0; i < nfiles; i++) {
		size_t cap = 0;
		long n;

		files[i] = NULL;
		if ((n = bench_read_file(paths[i], &files[i], &cap)) < 0) {
			perror(paths[i]);
			return (1);
		}
		lens[i] = (size_t)n;
		/* Down from the reader's 1 MiB start: the list may be long. */
		files[i] = bench_xrealloc(files[i], SM_MAX(lens[i], 1));
	}
	/* Keep freed memory: the server's request arenas come from a warm
	 * heap (its threads' malloc arenas), where this one thread would
	 * otherwise give every arena's blocks back to the kernel and fault
	 * them in again, about a tenth of the time measured. */
	mallopt(M_TRIM_THRESHOLD, 512 << 20);
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	/* Ten-second buckets, as the server's default. */
	if (ing_head_create(1, 10000, &head) != 0)
		return (1);
	for (int stage = 0; stage < 4; stage++) {
		uint64_t n = 0, nodes = 0;
		double t0 = bench_now_s(), t;

		if (only >= 0 && stage != only)
			continue;
		do {
			for (size_t i = 0; i < nfiles; i++)
				one(files[i], lens[i], stage, &nodes);
			n += nfiles;
		} while ((t = bench_now_s() - t0) < (only >= 0 ? secs : secs / 4));
		printf("%s profiles=%llu seconds=%.3f profiles_per_s=%.1f "
		    "us_per_profile=%.1f", names[stage], (unsigned long long)n,
		    t, n / t, t * 1e6 / n);
		if (stage >= 1)
			printf(" tree_nodes=%.1f", (double)nodes / n);
		printf("\n");
	}
	ing_head_unref(head);
	return (0);
usage:
	fprintf(stderr, "usage: pprof_stages [-t seconds] [-s stage] "
	    "-l listfile\n");
	return (2);
}
