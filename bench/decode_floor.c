/*
 * decode_floor.c -- baseline: the cost of merely decoding pprof files,
 * libdeflate gunzip + protobuf-c unpack + free, one thread (see
 * docs/benchmarks.md §3 "decode floor").  With -g, gunzip alone: the
 * physical limit of merely inflating what arrives, which no ingest path
 * can beat.  A measuring stick, not product code.
 *
 *   decode_floor [-g] [-n iterations] [-t seconds] [-l listfile]... [file...]
 *
 * Prints: profiles/s and MB/s (gz in) for the set, decoding every file once
 * per iteration, until -t seconds passed (default 3) or -n iterations.
 * The files are read into memory first (not timed).  -l adds the paths
 * listed one per line in listfile.
 */
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "google/v1/profile.pb-c.h"

static unsigned char *
slurp(const char *p, size_t *n)
{
	FILE *f = fopen(p, "rb");
	unsigned char *b;
	long l;

	if (f == NULL)
		return (NULL);
	fseek(f, 0, SEEK_END);
	l = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)l + 1);
	if (b == NULL || fread(b, 1, (size_t)l, f) != (size_t)l) {
		fclose(f);
		free(b);
		return (NULL);
	}
	fclose(f);
	*n = (size_t)l;
	return (b);
}

int
main(int argc, char **argv)
{
	struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
	unsigned char **files, *out = malloc(64u << 20);
	char **paths = NULL;
	size_t *lens, nfiles = 0, npaths = 0, bytes = 0, profiles = 0;
	long iters = 0, max_iters = -1;
	double secs = 3, t0, t;
	int i = 1, gunzip_only = 0;

	for (; i < argc && argv[i][0] == '-'; i += 2) {
		if (strcmp(argv[i], "-g") == 0) {
			gunzip_only = 1;
			i--;
			continue;
		}
		if (i + 1 >= argc)
			return (2);
		if (strcmp(argv[i], "-n") == 0)
			max_iters = atol(argv[i + 1]);
		else if (strcmp(argv[i], "-t") == 0)
			secs = atof(argv[i + 1]);
		else if (strcmp(argv[i], "-l") == 0 &&
		    bench_read_list(argv[i + 1], &paths, &npaths) != 0)
			return (1);
	}
	for (; i < argc; i++) {
		paths = bench_xrealloc(paths, (npaths + 1) * sizeof(*paths));
		paths[npaths++] = argv[i];
	}
	files = calloc(npaths + 1, sizeof(*files));
	lens = calloc(npaths + 1, sizeof(*lens));
	for (size_t k = 0; k < npaths; k++) {
		if ((files[nfiles] = slurp(paths[k], &lens[nfiles])) == NULL) {
			fprintf(stderr, "cannot read %s\n", paths[k]);
			return (1);
		}
		nfiles++;
	}
	if (nfiles == 0 || d == NULL || out == NULL)
		return (2);
	t0 = bench_now_s();
	do {
		for (size_t k = 0; k < nfiles; k++) {
			const unsigned char *raw = files[k];
			size_t rawlen = lens[k];
			Google__V1__Profile *p;

			if (rawlen > 2 && raw[0] == 0x1f && raw[1] == 0x8b) {
				if (libdeflate_gzip_decompress(d, raw, rawlen,
				    out, 64u << 20, &rawlen) !=
				    LIBDEFLATE_SUCCESS) {
					fprintf(stderr, "gunzip failed\n");
					return (1);
				}
				raw = out;
			}
			if (gunzip_only) {
				bytes += lens[k];
				profiles++;
				continue;
			}
			p = google__v1__profile__unpack(NULL, rawlen, raw);
			if (p == NULL) {
				fprintf(stderr, "unpack failed\n");
				return (1);
			}
			google__v1__profile__free_unpacked(p, NULL);
			bytes += lens[k];
			profiles++;
		}
		iters++;
		t = bench_now_s() - t0;
	} while ((max_iters < 0 && t < secs) ||
	    (max_iters >= 0 && iters < max_iters));
	printf("decode_floor mode=%s profiles=%zu seconds=%.3f "
	    "profiles_per_s=%.1f mb_per_s=%.2f\n", gunzip_only ? "gunzip" :
	    "decode", profiles, t, profiles / t,
	    bytes / t / 1e6);
	libdeflate_free_decompressor(d);
	return (0);
}
