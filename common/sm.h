/*
 * sm.h -- the few things every Smolder file needs: error codes, the error
 * detail carrier, assertions and small helpers.
 *
 * Errors (docs/style.md §6, after LMDB): every fallible function returns int, 0 on
 * success, or one of the SM_E* codes below.  They live in a reserved negative
 * range so they never clash with -errno values, which a few wrappers pass
 * through unchanged (sm_strerror handles both).
 *
 * A function that can fail for reasons a user must read about (a malformed
 * profile, a bad selector) also takes a `struct sm_err *` and fills it with
 * sm_err_set(); the message is what ends up in an HTTP 4xx body or the log.
 * `err` may be NULL when the caller does not care about the text.
 *
 * Invariants use SM_ASSERT, which stays on in release builds: a broken
 * invariant inside the process is a bug and must stop it.  Bytes from the
 * network or the disk never reach an SM_ASSERT; they are checked and turned
 * into SM_EMALFORMED / SM_ECORRUPT with a located message instead.
 */
#ifndef SM_H
#define SM_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SM_OK 0

/* Smolder's own error codes, in the reserved range -31000..-30900. */
enum {
	SM_ENOMEM = -31000,   /* allocation failed or arena budget exceeded */
	SM_EINVAL,            /* invalid argument from a caller or a request */
	SM_EMALFORMED,        /* malformed input from the network (4xx) */
	SM_ECORRUPT,          /* corrupt bytes read back from disk */
	SM_ETOOBIG,           /* a size limit was exceeded (413) */
	SM_ELIMIT,            /* a per-tenant limit was exceeded (429 / 400) */
	SM_ENOTFOUND,         /* the thing looked up does not exist */
	SM_EEXIST,            /* already exists (duplicate) */
	SM_EIO,               /* an I/O or storage error */
	SM_ECLOSED,           /* the object is closing or closed */
	SM_ETIMEDOUT,         /* a deadline passed */
	SM_EUNAVAIL,          /* a peer or a dependency is unavailable (503) */
	SM_EUNSUPPORTED,      /* a valid request we do not implement (415/501) */
	SM_EAUTH,             /* missing or invalid credentials (401) */
	SM_EPROTO,            /* an internal RPC peer broke the protocol */
	SM_EINTERNAL,         /* a bug or an unexpected library failure */
	SM_EAGAIN,            /* transient: the caller should retry (503) */
	SM_EFORBIDDEN,        /* authenticated, but not allowed (403) */
	SM_E_LAST_
};

/* Human-readable name of an SM_E* code or a negative errno value. */
const char *sm_strerror(int rv);

/*
 * How an error code leaves the process: the one mapping for every API
 * (common/sm.c has the table and the reasons where the APIs differ).
 * http_status and http_code are the plain HTTP API's (/ingest, /render,
 * the JSON error body); connect_code is the Connect API's, whose HTTP
 * status follows from the code (connect.h).  Anything that is not an
 * SM_E* code (-errno, unknown) is 500 "internal".  Never NULL.
 */
struct sm_err_wire {
	int http_status;
	const char *http_code;
	const char *connect_code;
};

const struct sm_err_wire *sm_err_wire(int rv);

/*
 * Error detail carrier.  `code` repeats the returned code so a caller can
 * forward the struct as a whole; `msg` is always NUL-terminated.
 */
#define SM_ERR_MSG_MAX 512
struct sm_err {
	int code;
	char msg[SM_ERR_MSG_MAX];
};

/*
 * Fill `err` (if not NULL) with `code` and a printf-style message and return
 * `code`, so a failure path reads `return sm_err_set(err, SM_EINVAL, ...)`.
 * A second call overwrites the first: the innermost, most precise message is
 * set first and callers only add to it with sm_err_prefix().
 */
int sm_err_set(struct sm_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "prefix: " to the message already in `err`; returns err->code. */
int sm_err_prefix(struct sm_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reset to "no error". */
static inline void sm_err_clear(struct sm_err *err)
{
	if (err != NULL) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

/* Always-on invariant check: prints the location and aborts. */
void sm_assert_fail(const char *expr, const char *file, int line,
    const char *func) __attribute__((noreturn));
#define SM_ASSERT(e)                                                         \
	((e) ? (void)0 : sm_assert_fail(#e, __FILE__, __LINE__, __func__))

#define SM_LIKELY(x) __builtin_expect(!!(x), 1)
#define SM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define SM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SM_MAX(a, b) ((a) > (b) ? (a) : (b))

/*
 * Three-way comparison: -1, 0 or 1 as a < b, a == b or a > b, for any
 * arithmetic type, the one way comparators (qsort, bsearch) order a key.
 * Not `a - b`, which overflows (int64, uint64) or wraps (unsigned).  Both
 * operands should have the same type: mixed signedness converts as `<`
 * does.  Each argument is evaluated twice, so no side effects.  A
 * descending order swaps the arguments:
 *
 *     return (x->fp != y->fp ? SM_CMP(x->fp, y->fp) : SM_CMP(y->t, x->t));
 */
#define SM_CMP(a, b) (((a) > (b)) - ((a) < (b)))

/*
 * A row of a const table mapping a configuration word to an enum value,
 * so that parsing a setting is one lookup in the table rather than a
 * chain of strcmp()s.
 */
struct sm_name_val {
	const char *nv_name;
	int nv_val;
};

/*
 * The value named `name` (compared exactly) in tab[0..n) into *val.
 * Returns: 0, or -1 (*val untouched) when no row has that name.
 */
int sm_name_lookup(const struct sm_name_val *tab, size_t n, const char *name,
    int *val);

/*
 * Allocation wrappers.  They return NULL on failure like malloc; the only
 * thing they add is a fault-injection hook for tests (docs/style.md §18): when
 * sm_fault_countdown reaches zero the allocation fails.
 */
void *sm_malloc(size_t n);
void *sm_calloc(size_t nmemb, size_t n);
void *sm_realloc(void *p, size_t n);
void *sm_reallocarray(void *p, size_t nmemb, size_t n);
char *sm_strdup(const char *s);
char *sm_strndup(const char *s, size_t n);
void sm_free(void *p);

/*
 * Array growth, the one copy of "if (n == cap) { double cap; realloc; }".
 *
 * sm_grow(&arr, &cap, need, elsize, mincap): make the array `arr` (any
 * T *, passed by address) hold at least `need` elements of `elsize` bytes.
 *   - Nothing happens and 0 is returned when need <= *cap.
 *   - Otherwise the new capacity is *cap (or `mincap` when *cap is 0,
 *     1 when both are 0) doubled until it reaches `need`, so a caller that
 *     appends one at a time (need = n + 1) grows exactly as the
 *     hand-written "cap ? cap * 2 : mincap" did.
 *   - The new block comes from sm_realloc (fault injection reaches it) and
 *     is not zeroed beyond the old contents.
 * Returns: 0, or SM_ENOMEM when the capacity or its size in bytes would
 * overflow (size_t; uint32_t for sm_grow32) or sm_realloc fails.  On
 * failure the array and *cap are untouched (the old block stays valid and
 * owned by the caller).
 * sm_grow32 is the same for the many uint32_t capacities (element counts
 * kept 32-bit in structs and on the wire).
 *
 * SM_GROW(arr, cap, need, mincap) picks the variant from the type of `cap`
 * (size_t or uint32_t lvalue) and passes &arr, &cap and sizeof(*arr):
 *
 *     if ((rv = SM_GROW(x->v, x->cap, x->n + 1, 64)) != 0)
 *             return (rv);
 *     x->v[x->n++] = e;
 */
int sm_grow(void *arrp, size_t *cap, size_t need, size_t elsize,
    size_t mincap);
int sm_grow32(void *arrp, uint32_t *cap, size_t need, size_t elsize,
    uint32_t mincap);
#define SM_GROW(arr, cap, need, mincap)                                       \
	_Generic(&(cap), uint32_t *: sm_grow32, size_t *: sm_grow)(&(arr),   \
	    &(cap), (need), sizeof(*(arr)), (mincap))

/*
 * Memory returned to the OS (after four concurrent collapsed
 * renders of a large series 1.7 GB stayed resident).  Decisions, for
 * glibc malloc (elsewhere both are no-ops):
 *   - sm_mem_init(), once at startup, fixes M_MMAP_THRESHOLD at
 *     SM_MEM_MMAP_MIN (4 MiB) and M_TRIM_THRESHOLD at SM_MEM_TRIM_MIN
 *     (4 MiB).  glibc's default mmap threshold is dynamic: every freed
 *     mmapped block raises it (up to 32 MiB), after which a query's large
 *     arrays and response buffers come from the heaps and stay there when
 *     freed.  Fixed, every block >= 4 MiB is its own mapping and is
 *     unmapped by free().  Why not lower: at 256 KiB (the first choice)
 *     every upload's decompressed profile, decode arrays and RocksDB's
 *     memtable blocks were mapped, faulted in and unmapped (with a TLB
 *     shootdown) once per request: ingest ran at 0.62x the decode floor,
 *     and at 0.99x with 4 MiB (bench/README.md, B1), while B5's
 *     RSS per series did not grow (what the heaps keep is bounded by the
 *     trim threshold and the trims below).  Setting the mmap threshold
 *     also turns off glibc's dynamic trim threshold (128 KiB), so it is
 *     set too: a heap gives back its free top above 4 MiB at free().
 *   - M_ARENA_MAX is the number of online CPUs, clamped to
 *     [SM_MEM_ARENAS_MIN, SM_MEM_ARENAS_MAX] = [2, 8] (glibc's default is
 *     8 per CPU).  Every thread that allocates gets an arena of its own
 *     up to that limit, and long-lived blocks (head summaries, strings,
 *     RocksDB's memtable and table readers) end up scattered among the
 *     transient request buffers of every one of them, pinning pages no
 *     malloc_trim can return.  Measured on B5 (1,000 series,
 *     one process each, the same binary): default arenas 81.8 KB per
 *     series (malloc in use 50 MB, ~80 MB resident in 7 arenas); one
 *     arena 58.0 KB; on the next binary, one arena 52.1 KB and two
 *     47.9 KB.  More arenas than CPUs buy little: no more threads than
 *     CPUs allocate at once, and a thread that finds its arena locked
 *     moves to a free one.  A MALLOC_ARENA_MAX in the environment is
 *     left to rule.  (When heads held every bucket, 2 arenas
 *     took B5 from 2.06x to 2.01x, noise next to the heads.)
 *   - sm_mem_release(bytes) after a request that used `bytes` of heap (a
 *     merge tree, an arena, a response) calls malloc_trim(0) when bytes
 *     >= SM_MEM_TRIM_MIN (4 MiB): freed small blocks (tree nodes, strings)
 *     sit in every thread's arena below the top and malloc_trim is the
 *     only call that gives their pages back.  It walks every arena, a few
 *     ms at most for a heap of hundreds of MiB; below 4 MiB it is not
 *     worth it.
 */
#define SM_MEM_MMAP_MIN (4u * 1024u * 1024u)
#define SM_MEM_ARENAS_MIN 2
#define SM_MEM_ARENAS_MAX 8
#define SM_MEM_TRIM_MIN ((size_t)4 << 20)
void sm_mem_init(void);
void sm_mem_release(size_t bytes);

/*
 * What the process holds, measured (not estimated): `rss` is resident
 * pages (/proc/self/statm, 0 where there is none); `heap_used` and
 * `heap_free` are malloc's bytes handed out and held free in every arena
 * (glibc mallinfo2(): free chunks below each arena's top are resident
 * until malloc_trim; 0 elsewhere).  Cheap enough for every metrics
 * scrape and every ingester tick: statm is one read, mallinfo2 walks the
 * bins of each arena, not its chunks.
 */
struct sm_mem_stats {
	uint64_t rss;
	uint64_t heap_used;
	uint64_t heap_free;
};
void sm_mem_stats(struct sm_mem_stats *m);

/*
 * Give free heap pages back, from a periodic tick (the ingester's, once a
 * second).  Measured on B5: an ingesting process held 57 MB of
 * free heap against 24 MB in use, pages each HTTP thread's arena keeps
 * after its requests' transient buffers (bodies, decode arenas, batches)
 * were freed among long-lived blocks (head nodes, strings) that pin them
 * below the arena's top, where M_TRIM_THRESHOLD never reaches; one
 * malloc_trim(0) took RSS from 108 to 66 MB.  Policy: trim when at least
 * SM_MEM_TIDY_MIN is free, except when the last trim gave back less than
 * SM_MEM_TIDY_IDLE and RSS has not moved by that much since (an idle
 * process: free chunks stay counted as free after their pages go back,
 * so free bytes alone would trim every tick for nothing).  A trim walks
 * every arena, taking each one's lock in turn: 2-9 ms with ~100 MB free,
 * once a second at most while RSS moves.  Returns true when it trimmed.
 * Thread-safe (one caller expected; two would both trim).
 */
#define SM_MEM_TIDY_MIN ((uint64_t)8 << 20)
#define SM_MEM_TIDY_IDLE ((uint64_t)1 << 20)
bool sm_mem_tidy(void);

/* Test hook: fail the Nth allocation from now (0 = never).  Not for use
 * outside tests; not thread-aware beyond an atomic counter. */
void sm_fault_alloc_after(long n);

/*
 * The same for the calling thread only: its Nth allocation from now fails
 * (0 = never), other threads' allocations are not counted.  The ingester's
 * write fault injection (ingester.h, SMOLDER_TEST_FAULTS) arms it around
 * one write.
 */
void sm_fault_thread_after(long n);

/*
 * Sum of two sample values, saturating instead of wrapping: at INT64_MAX
 * when both are positive, at INT64_MIN when both are negative (values are
 * signed since block format v2).  Decision: a sum that leaves
 * int64 is kept at the bound -- visibly huge, never of the wrong sign --
 * and every such event is counted (sm_sat_count(), exposed as
 * smolder_value_saturations_total on /metrics), so it is never silent.
 * Stored values are never changed: saturation applies to sums only.
 */
void sm_sat_note(void);
uint64_t sm_sat_count(void);

static inline int64_t sm_add_sat(int64_t a, int64_t b)
{
	int64_t r;

	if (SM_LIKELY(!__builtin_add_overflow(a, b, &r)))
		return (r);
	sm_sat_note();
	return (b > 0 ? INT64_MAX : INT64_MIN);
}

/*
 * Binary search, the one loop: sets lo (an unsigned lvalue) to the first
 * index in [0, n) at which `before`, an expression in the index variable
 * named by i, is false; n when there is none.  `before` must hold on a
 * prefix of the range only (the elements sorted by what it tests):
 *
 *     SM_LOWER_BOUND(k, t->nblocks, mid, t->blocks[mid].gen < gen);
 *     found = k < t->nblocks && t->blocks[k].gen == gen;
 */
#define SM_LOWER_BOUND(lo, n, i, before) do {                                 \
	size_t sm_lb_hi_ = (n);                                               \
									      \
	(lo) = 0;                                                             \
	while ((lo) < sm_lb_hi_) {                                            \
		size_t i = (lo) + (sm_lb_hi_ - (lo)) / 2;                     \
									      \
		if (before)                                                   \
			(lo) = i + 1;                                         \
		else                                                          \
			sm_lb_hi_ = i;                                        \
	}                                                                     \
} while (0)

/* mkdir -p: every missing directory of `dir` (mode 0755).  0, or -1
 * with errno. */
int sm_mkdir_p(const char *dir);

/* The file at `path` read whole into *buf (sm_malloc()ed, *len bytes;
 * the caller frees).  0; SM_ENOTFOUND (no such file), SM_EIO naming the
 * path, SM_ENOMEM. */
int sm_read_file(const char *path, uint8_t **buf, size_t *len,
    struct sm_err *err);

/* Sorted uint64_t arrays: the one comparator (qsort, bsearch) and the
 * one search. */
int sm_u64_cmp(const void *a, const void *b);

/* The same comparator for uint32_t and int64_t arrays, and int64_t
 * largest first. */
int sm_u32_cmp(const void *a, const void *b);
int sm_i64_cmp(const void *a, const void *b);
int sm_i64_desc_cmp(const void *a, const void *b);

/*
 * Bytewise order of a[0..na) and b[0..nb), a prefix first (memcmp's
 * order, then the shorter): names and keys that are not NUL-terminated.
 * Returns memcmp's value where the bytes differ, else SM_CMP(na, nb).
 */
int sm_bytes_cmp(const void *a, size_t na, const void *b, size_t nb);

/* The first i in sorted a[0..n) with a[i] >= x; n when there is none. */
uint32_t sm_u64_lower_bound(const uint64_t *a, uint32_t n, uint64_t x);

/* Whether sorted a[0..n) holds x. */
bool sm_u64_has(const uint64_t *a, size_t n, uint64_t x);

/* Hex: the one decoder (ids, hashes, span ids, escapes). */

/* The value of hex digit c (either case), or -1. */
static inline int sm_hex_val(int c)
{
	if (c >= '0' && c <= '9')
		return (c - '0');
	if (c >= 'a' && c <= 'f')
		return (c - 'a' + 10);
	if (c >= 'A' && c <= 'F')
		return (c - 'A' + 10);
	return (-1);
}

/*
 * UUIDs: the one parser and formatter (upload ids, profile ids).  Parse
 * accepts 8-4-4-4-12 hex digits (either case), the 32 digits alone,
 * urn:uuid:<uuid> and {<uuid>}: 0 or SM_EINVAL.  Format writes the
 * dashed lowercase form and a NUL into out.
 */
int sm_uuid_parse(const char *s, uint8_t out[16]);
void sm_uuid_format(const uint8_t id[16], char out[37]);

/* The 2n hex digits at s as n bytes in out; false at a non-hex digit
 * (out then partly written). */
bool sm_hex_decode(const char *s, size_t n, uint8_t *out);

/* Exactly 16 hex digits (s[0..n)) as the 64-bit number they spell, as
 * span ids are written; false otherwise. */
bool sm_hex_u64(const char *s, size_t n, uint64_t *out);

/* Round t down to a multiple of step (> 0), correctly for negative t. */
static inline int64_t sm_floor_to(int64_t t, int64_t step)
{
	int64_t r = t % step;

	return (r < 0 ? t - r - step : t - r);
}

/* Greatest common divisor (Euclid); gcd(0, 0) = 0.  The one for a
 * bucket's value unit (set.c) and the corpus generator's (bench/). */
static inline uint64_t sm_gcd64(uint64_t a, uint64_t b)
{
	while (b != 0) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return (a);
}

/* |v| as uint64_t, INT64_MIN included. */
static inline uint64_t sm_abs64(int64_t v)
{
	return (v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
}

/* Monotonic and wall clocks. */
int64_t sm_now_ms(void);      /* unix time, milliseconds */
void sm_sleep_ms(int64_t ms); /* sleep, resumed after signals */
/* Unix ms as "2006-01-02T15:04:05Z" (UTC, seconds) into out (>= 21
 * bytes), for messages; returns out. */
char *sm_time_utc(int64_t ms, char *out, size_t outlen);
/*
 * Tests only: SMOLDER_TEST_CLOCK_SKEW_MS=N in the environment moves this
 * process's sm_now_ms() by N ms (signed), as a host whose clock is off
 * would (tests/integration/test_clock_skew.py); main logs a warning.
 * The monotonic clock is not moved.  0 without it.
 */
int64_t sm_clock_skew_ms(void);
int64_t sm_now_ns(void);      /* unix time, nanoseconds */
int64_t sm_mono_ns(void);     /* monotonic, nanoseconds */

/*
 * Condition variables timed on the monotonic clock, so a wall-clock step
 * neither stretches nor skips a wait.  sm_cond_init() makes cv use
 * CLOCK_MONOTONIC (every cv that is waited on with a timeout is made so);
 * sm_cond_wait_until() waits, mu held, until signalled or until
 * sm_mono_ns() reaches deadline_ns (INT64_MAX: no deadline) and returns
 * false once the deadline has passed; sm_cond_wait_ms() waits at most ms.
 * Spurious wake-ups return true: callers loop on their own predicate.
 */
void sm_cond_init(pthread_cond_t *cv);
bool sm_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
    int64_t deadline_ns);
bool sm_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

/*
 * Set *flag to true with mu held and wake every thread waiting on cv: the
 * one way a stop (or a kick) reaches a background thread that sleeps in
 * sm_cond_wait_* and tests the flag under mu.  Takes and releases mu, so
 * the caller must not hold it.
 */
void sm_cond_set_flag(pthread_mutex_t *mu, pthread_cond_t *cv, bool *flag);

/*
 * The deadline of the request the calling thread serves (unix ms, 0 =
 * none).  A server sets it around one request (the ingester, from the
 * deadline its caller sent: ingester.c) and clears it after; long loops
 * poll sm_deadline_passed() and give up with SM_ETIMEDOUT, so work nobody
 * waits for any more stops.  Thread-local: no locking, nothing to free.
 */
void sm_deadline_set(int64_t unix_ms);
bool sm_deadline_passed(void);

/*
 * Define `name`, a static qsort/bsearch comparator of `type` elements
 * ordered by field f, then by field g, each with SM_CMP: the two-key
 * comparator SM_CMP's comment shows, written once.  At file scope, with
 * no semicolon after it:
 *
 *     SM_CMP_FN2(ent_cmp, struct plan_ent, fp, target)
 */
#define SM_CMP_FN2(name, type, f, g)                                         \
	static int                                                           \
	name(const void *a_, const void *b_)                                 \
	{                                                                    \
		const type *x_ = a_, *y_ = b_;                               \
									     \
		return (x_->f != y_->f ? SM_CMP(x_->f, y_->f) :              \
		    SM_CMP(x_->g, y_->g));                                   \
	}

/*
 * True when the test-only fault injection SMOLDER_TEST_FAULTS names
 * exactly `name` (e.g. "ship-kill"): the one reading of the variable
 * that the components with a kill-after fault share.  Unset or another
 * name: false.
 */
bool sm_test_fault(const char *name);

/*
 * sm_err_set() with its arguments in `ap`: for a module's own failure
 * helper, which sets the message with this and then adds its context with
 * sm_err_prefix().
 */
int sm_err_setv(struct sm_err *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif /* SM_H */
