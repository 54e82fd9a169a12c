/*
 * replay.c -- the regression driver for the fuzz targets, linked WITHOUT
 * libFuzzer: `fuzz_<t>_replay DIR_OR_FILE...` feeds every regular file
 * (directories are walked one level, in name order) to
 * LLVMFuzzerTestOneInput, exactly as libFuzzer would, and exits 0 when all
 * returned.  A failed property aborts the process (fuzz.h), and the ASan
 * build catches memory errors and leaks, so a ctest run of this driver over
 * tests/fuzz/seeds/<t> and tests/fuzz/regressions/<t> replays the whole
 * saved corpus in the plain and in the sanitized build.
 *
 * A missing directory counts as empty (regressions/<t> may not exist yet);
 * finding no input at all is an error, so a mistyped path cannot pass.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

__attribute__((weak)) int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return (0);
}

static int
run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p = NULL;
	size_t n = 0, cap = 0, got;

	if (f == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return (-1);
	}
	for (;;) {
		if (n == cap) {
			uint8_t *q;

			cap = cap ? cap * 2 : 4096;
			if ((q = realloc(p, cap)) == NULL) {
				fprintf(stderr, "replay: out of memory\n");
				exit(2);
			}
			p = q;
		}
		got = fread(p + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
	/* libFuzzer hands over a heap copy of exactly n bytes, so an
	 * over-read by one byte is caught by ASan here too. */
	{
		uint8_t *exact = malloc(n ? n : 1);

		if (exact == NULL)
			exit(2);
		memcpy(exact, p, n);
		free(p);
		LLVMFuzzerTestOneInput(exact, n);
		free(exact);
	}
	return (0);
}

static int
cmp_str(const void *a, const void *b)
{
	return (strcmp(*(char *const *)a, *(char *const *)b));
}

static int
run_dir(const char *dir, unsigned *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0, i;
	int rv = 0;

	if (d == NULL)
		return (errno == ENOENT ? 0 : -1);
	while ((e = readdir(d)) != NULL) {
		char *path;
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		if (asprintf(&path, "%s/%s", dir, e->d_name) < 0)
			exit(2);
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
			free(path);
			continue;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			if ((names = realloc(names, cap * sizeof(*names))) ==
			    NULL)
				exit(2);
		}
		names[n++] = path;
	}
	closedir(d);
	if (n > 0)
		qsort(names, n, sizeof(*names), cmp_str);
	for (i = 0; i < n; i++) {
		if (run_file(names[i]) != 0)
			rv = -1;
		else
			(*count)++;
		free(names[i]);
	}
	free(names);
	return (rv);
}

int
main(int argc, char **argv)
{
	unsigned count = 0;
	int i, failed = 0;
	struct stat st;

	LLVMFuzzerInitialize(&argc, &argv);
	for (i = 1; i < argc; i++) {
		if (stat(argv[i], &st) == 0 && S_ISREG(st.st_mode)) {
			if (run_file(argv[i]) != 0)
				failed = 1;
			else
				count++;
		} else if (run_dir(argv[i], &count) != 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i],
			    strerror(errno));
			failed = 1;
		}
	}
	if (count == 0) {
		fprintf(stderr, "replay: no input found\n");
		return (1);
	}
	printf("replay: %u inputs, no crash\n", count);
	return (failed);
}
