/*
 * fuzz.h -- shared by the fuzz targets in tests/fuzz/ (README.md there).
 *
 * Each fuzz_<target>.c defines LLVMFuzzerTestOneInput (and may define
 * LLVMFuzzerInitialize).  The same file is linked twice: with libFuzzer in
 * the clang -DSM_FUZZ=ON build, and with replay.c (a plain main() that
 * feeds saved inputs) in the normal gcc and ASan builds, where ctest runs
 * every seed and every saved regression input through it.
 *
 * FUZZ_CHECK states a property the product promises for any input (an
 * error comes with a code and a message, a parsed value survives a
 * round trip, ...); a violation aborts, so libFuzzer saves the input and
 * the replay test fails.
 */
#ifndef SM_FUZZ_H
#define SM_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond, ...) do {                                       \
	if (!(cond)) {                                                   \
		fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ",        \
		    __FILE__, __LINE__, #cond);                          \
		fprintf(stderr, __VA_ARGS__);                            \
		fputc('\n', stderr);                                     \
		abort();                                                 \
	}                                                                \
} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A failed call must say why: a non-zero code and a non-empty message. */
#define FUZZ_CHECK_ERR(rv, err) FUZZ_CHECK((err)->code == (rv) &&         \
	(err)->msg[0] != '\0', "rv %d but err {%d, \"%s\"}", (rv),       \
	(err)->code, (err)->msg)

/* Longest input a string target parses (the size of its stack buffer). */
#define FUZZ_STR_MAX 4096

/*
 * The first FUZZ_STR_MAX bytes of the input as a C string in s (of
 * FUZZ_STR_MAX + 1 bytes), for targets whose parser takes one.
 */
static inline void
fuzz_cstring(char *s, const uint8_t *data, size_t size)
{
	if (size > FUZZ_STR_MAX)
		size = FUZZ_STR_MAX;
	memcpy(s, data, size);
	s[size] = '\0';
}

#endif /* SM_FUZZ_H */
