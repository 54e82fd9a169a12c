/*
 * sm_test.h -- Smolder's unit-test harness (docs/style.md §17: a table of readable
 * test names, in the spirit of NNG's NUTS/acutest; written here because
 * vendoring acutest is not allowed).
 *
 * Usage, in foo_test.c beside foo.c:
 *
 *   #include "sm_test.h"
 *   static void test_parse_ok(void) { SM_CHECK(parse("x") == 0); }
 *   SM_TEST_MAIN(
 *       { "parse accepts x", test_parse_ok },
 *   )
 *
 * SM_CHECK records a failure and continues; SM_REQUIRE stops the current
 * test; SM_SKIP ends it as skipped (with the reason printed), and
 * SM_SKIP_CORPUS does the same for a missing test corpus except under
 * CI=true, where it fails (a CI run must not pass silently).  Each test
 * runs in the same process, in order; `./foo_test name-substring` runs a
 * subset.  The last line is "N passed, N failed, N skipped"; the exit
 * status is 1 when anything failed, 77 (ctest's SKIP_RETURN_CODE, so the
 * run lists the binary as skipped) when every test that ran was skipped,
 * and 0 otherwise.  tests/tools/run_tiers.py lists the skipped tests of a
 * binary that passed.
 */
#ifndef SM_TEST_H
#define SM_TEST_H

/* The exit status ctest's SKIP_RETURN_CODE property names (CMakeLists.txt). */
#define SM_TEST_SKIPPED 77

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct sm_test_case {
	const char *name;
	void (*fn)(void);
};

struct sm_test_state {
	jmp_buf jb;
	int failed;     /* checks failed in the current test */
	int skipped;
	char skip_reason[256];
};

static struct sm_test_state sm_test_st;

#define SM_TEST_FAILF(...)                                                  \
	do {                                                                \
		fprintf(stderr, "    %s:%d: ", __FILE__, __LINE__);          \
		fprintf(stderr, __VA_ARGS__);                               \
		fputc('\n', stderr);                                        \
		sm_test_st.failed++;                                        \
	} while (0)

#define SM_CHECK(cond)                                                      \
	do {                                                                \
		if (!(cond))                                                \
			SM_TEST_FAILF("check failed: %s", #cond);           \
	} while (0)

#define SM_CHECKF(cond, ...)                                                \
	do {                                                                \
		if (!(cond)) {                                              \
			SM_TEST_FAILF("check failed: %s", #cond);           \
			fprintf(stderr, "      ");                          \
			fprintf(stderr, __VA_ARGS__);                       \
			fputc('\n', stderr);                                \
		}                                                           \
	} while (0)

#define SM_REQUIRE(cond)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			SM_TEST_FAILF("required: %s", #cond);               \
			longjmp(sm_test_st.jb, 1);                          \
		}                                                           \
	} while (0)

/* Integer equality with both values printed. */
#define SM_CHECK_EQ(a, b)                                                   \
	do {                                                                \
		long long sm_a_ = (long long)(a), sm_b_ = (long long)(b);   \
		if (sm_a_ != sm_b_)                                         \
			SM_TEST_FAILF("%s == %s: %lld != %lld", #a, #b,     \
			    sm_a_, sm_b_);                                  \
	} while (0)

/* String equality (NULL-safe) with both values printed. */
#define SM_CHECK_STR(a, b)                                                  \
	do {                                                                \
		const char *sm_a_ = (a), *sm_b_ = (b);                      \
		if (sm_a_ == NULL || sm_b_ == NULL ||                       \
		    strcmp(sm_a_, sm_b_) != 0)                              \
			SM_TEST_FAILF("%s == %s:\n      got:  %s\n      want: %s", \
			    #a, #b, sm_a_ ? sm_a_ : "(null)",               \
			    sm_b_ ? sm_b_ : "(null)");                      \
	} while (0)

#define SM_SKIP(...)                                                        \
	do {                                                                \
		snprintf(sm_test_st.skip_reason,                            \
		    sizeof(sm_test_st.skip_reason), __VA_ARGS__);           \
		sm_test_st.skipped = 1;                                     \
		longjmp(sm_test_st.jb, 1);                                  \
	} while (0)

/*
 * A test corpus is missing (the shared tree ../shared, or SM_SHARED_DIR):
 * under CI=true the test FAILS with the message, so a CI run cannot pass
 * without the corpus it was meant to check; elsewhere (a fresh clone) it
 * is skipped with the message, as SM_SKIP.
 */
static inline int
sm_test_ci(void)
{
	const char *ci = getenv("CI");

	return (ci != NULL && (strcmp(ci, "true") == 0 ||
	    strcmp(ci, "1") == 0));
}

#define SM_SKIP_CORPUS(...)                                                 \
	do {                                                                \
		if (sm_test_ci()) {                                         \
			snprintf(sm_test_st.skip_reason,                    \
			    sizeof(sm_test_st.skip_reason), __VA_ARGS__);   \
			SM_TEST_FAILF("test corpus missing under CI=true: %s", \
			    sm_test_st.skip_reason);                        \
			longjmp(sm_test_st.jb, 1);                          \
		}                                                           \
		SM_SKIP(__VA_ARGS__);                                       \
	} while (0)

/*
 * Path of a file under the source tree: tests run with the source root as
 * working directory (CMake sets it), or SM_SOURCE_DIR points there.
 */
static inline const char *
sm_test_path(char *buf, size_t n, const char *rel)
{
	const char *root = getenv("SM_SOURCE_DIR");

	snprintf(buf, n, "%s/%s", root != NULL ? root : ".", rel);
	return (buf);
}

/* Read a whole file into a malloc'd buffer; NULL if it does not exist. */
static inline unsigned char *
sm_test_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b = NULL;
	long n;

	if (f == NULL)
		return (NULL);
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		b = malloc((size_t)n + 1);
		if (b != NULL && fread(b, 1, (size_t)n, f) != (size_t)n) {
			free(b);
			b = NULL;
		}
		if (b != NULL) {
			b[n] = 0;
			*len = (size_t)n;
		}
	}
	fclose(f);
	return (b);
}

/*
 * Create the empty file the mkstemp template `tmpl` names (its XXXXXX
 * filled in place).  Returns 0 or -1 (errno set).
 */
static inline int
sm_test_temp_file(char *tmpl)
{
	int fd = mkstemp(tmpl);

	if (fd < 0)
		return (-1);
	close(fd);
	return (0);
}

/*
 * Replace the file at `path` with `body` as an operator should: write
 * path.new and rename it over (a fresh inode, never a half-written file).
 * Returns 0 or -1 (errno set).
 */
static inline int
sm_test_replace_file(const char *path, const char *body)
{
	char tmp[4096];
	FILE *fp;
	int ok;

	snprintf(tmp, sizeof(tmp), "%s.new", path);
	if ((fp = fopen(tmp, "w")) == NULL)
		return (-1);
	ok = fputs(body, fp) >= 0;
	ok = fclose(fp) == 0 && ok;
	if (!ok || rename(tmp, path) != 0) {
		unlink(tmp);
		return (-1);
	}
	return (0);
}

/*
 * Deterministic filler bytes (xorshift) from seed, different per seed and
 * offset: not trivially compressible, and corrupting them changes
 * checksums.
 */
static inline void
sm_test_fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

/* A free loopback TCP port (racy in theory, fine for tests). */
static inline int
sm_test_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return (port);
}

/*
 * Run `init(obj)` with its f-th allocation failing (common/sm.h's
 * sm_fault_alloc_after), for f = 1 .. nfaults - 1 until it succeeds (then
 * fini(obj)); after every failure `held_nothing` must hold: a failed init
 * leaves nothing behind (LeakSanitizer checks the rest).
 */
#define SM_CHECK_INIT_FAULTS(obj, init, fini, nfaults, held_nothing)        \
	do {                                                                \
		for (long sm_f_ = 1; sm_f_ < (nfaults); sm_f_++) {          \
			sm_fault_alloc_after(sm_f_);                        \
			if (init(obj) == 0) {                               \
				sm_fault_alloc_after(0);                    \
				fini(obj);                                  \
				break;                                      \
			}                                                   \
			sm_fault_alloc_after(0);                            \
			SM_CHECK(held_nothing);                             \
		}                                                           \
	} while (0)

/*
 * Evaluate `op` (an int expression) with its f-th allocation failing, for
 * f = 1, 2, ... until it returns 0.  Each failure must be SM_ENOMEM; it
 * adds one to `failures` and runs `checks` (statements: what a failed
 * call must have left as it was).
 */
#define SM_RETRY_FAULTS(op, failures, checks)                               \
	do {                                                                \
		for (long sm_f_ = 1;; sm_f_++) {                            \
			int sm_rv_;                                         \
									    \
			sm_fault_alloc_after(sm_f_);                        \
			sm_rv_ = (op);                                      \
			sm_fault_alloc_after(0);                            \
			if (sm_rv_ == 0)                                    \
				break;                                      \
			(failures)++;                                       \
			SM_REQUIRE(sm_rv_ == SM_ENOMEM);                    \
			checks;                                             \
		}                                                           \
	} while (0)

/*
 * Point the protobuf-c repeated field `f` of message m at all of the
 * array arr (an array, not a pointer): m.n_f = its length, m.f = arr, so
 * the count cannot drift from the array.
 */
#define SM_PB_REPEATED(m, f, arr)                                           \
	((m).n_##f = sizeof(arr) / sizeof((arr)[0]), (m).f = (arr))

/* setjmp lives in its own frame so the caller's counters are never
 * clobbered by longjmp. */
static inline void
sm_test_run_one(void (*fn)(void))
{
	memset(&sm_test_st, 0, sizeof(sm_test_st));
	if (setjmp(sm_test_st.jb) == 0)
		fn();
}

static inline int
sm_test_run(const struct sm_test_case *tc, size_t n, int argc, char **argv)
{
	int passed = 0, failed = 0, skipped = 0;

	for (size_t i = 0; i < n; i++) {
		if (argc > 1 && strstr(tc[i].name, argv[1]) == NULL)
			continue;
		sm_test_run_one(tc[i].fn);
		if (sm_test_st.skipped) {
			skipped++;
			printf("SKIP %s: %s\n", tc[i].name,
			    sm_test_st.skip_reason);
		} else if (sm_test_st.failed != 0) {
			failed++;
			printf("FAIL %s\n", tc[i].name);
		} else {
			passed++;
			printf("ok   %s\n", tc[i].name);
		}
		fflush(stdout);
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	if (failed != 0)
		return (1);
	return (passed == 0 && skipped > 0 ? SM_TEST_SKIPPED : 0);
}

#define SM_TEST_MAIN(...)                                                   \
	int main(int argc, char **argv)                                     \
	{                                                                   \
		static const struct sm_test_case sm_cases_[] = {            \
			__VA_ARGS__                                         \
		};                                                          \
		return (sm_test_run(sm_cases_,                              \
		    sizeof(sm_cases_) / sizeof(sm_cases_[0]), argc, argv)); \
	}

#endif /* SM_TEST_H */
