/*
 * sm.c -- error strings, the error carrier, allocation wrappers and clocks.
 * See sm.h for the conventions.
 */

#include "sm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/*
 * Every SM_E* code: its text, and how it leaves the process (sm.h,
 * sm_err_wire()): the status and error code of the plain HTTP API, and
 * the Connect code (whose HTTP status the Connect protocol fixes:
 * connect.c).  The two APIs differ on purpose in three places: ETOOBIG
 * is 413 over plain HTTP (Pyroscope's status for an oversized body) but
 * invalid_argument's 400 over Connect (a permanent refusal must not read
 * as a retryable 429); EUNSUPPORTED is 415 over plain HTTP and
 * unimplemented's 501 over Connect; ENOMEM is resource_exhausted over
 * Connect (gRPC's code for exhausted memory, how per-request arena
 * budgets surface) and a plain 500 over HTTP.
 */
static const struct {
	const char *name;
	struct sm_err_wire wire;
} sm_errs[] = {
#define E(c, name, http, hcode, ccode) \
	[(c) - SM_ENOMEM] = { name, { http, hcode, ccode } }
	E(SM_ENOMEM, "out of memory", 500, "internal", "resource_exhausted"),
	E(SM_EINVAL, "invalid argument", 400, "invalid_argument",
	    "invalid_argument"),
	E(SM_EMALFORMED, "malformed input", 400, "invalid_argument",
	    "invalid_argument"),
	E(SM_ECORRUPT, "corrupt data", 500, "data_loss", "data_loss"),
	E(SM_ETOOBIG, "too big", 413, "invalid_argument", "invalid_argument"),
	E(SM_ELIMIT, "limit exceeded", 429, "resource_exhausted",
	    "resource_exhausted"),
	E(SM_ENOTFOUND, "not found", 404, "not_found", "not_found"),
	E(SM_EEXIST, "already exists", 409, "already_exists",
	    "already_exists"),
	E(SM_EIO, "I/O error", 500, "internal", "internal"),
	E(SM_ECLOSED, "closed", 503, "unavailable", "unavailable"),
	E(SM_ETIMEDOUT, "timed out", 504, "deadline_exceeded",
	    "deadline_exceeded"),
	E(SM_EUNAVAIL, "unavailable", 503, "unavailable", "unavailable"),
	E(SM_EUNSUPPORTED, "unsupported", 415, "unimplemented",
	    "unimplemented"),
	E(SM_EAUTH, "unauthenticated", 401, "unauthenticated",
	    "unauthenticated"),
	E(SM_EPROTO, "protocol error", 500, "internal", "internal"),
	E(SM_EINTERNAL, "internal error", 500, "internal", "internal"),
	E(SM_EAGAIN, "try again", 503, "unavailable", "unavailable"),
	E(SM_EFORBIDDEN, "permission denied", 403, "permission_denied",
	    "permission_denied"),
#undef E
};

_Static_assert(sizeof(sm_errs) / sizeof(sm_errs[0]) ==
    (size_t)(SM_E_LAST_ - SM_ENOMEM), "an SM_E* code without its entry");

const char *
sm_strerror(int rv)
{
	if (rv == 0)
		return ("ok");
	if (rv >= SM_ENOMEM && rv < SM_E_LAST_)
		return (sm_errs[rv - SM_ENOMEM].name);
	if (rv < 0 && rv > -4096)
		return (strerror(-rv));
	return ("unknown error");
}

const struct sm_err_wire *
sm_err_wire(int rv)
{
	static const struct sm_err_wire other = { 500, "internal",
	    "internal" };

	if (rv >= SM_ENOMEM && rv < SM_E_LAST_)
		return (&sm_errs[rv - SM_ENOMEM].wire);
	return (&other);        /* -errno and anything unknown */
}

int
sm_err_set(struct sm_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)sm_err_setv(err, code, fmt, ap);
	va_end(ap);
	return (code);
}

int
sm_err_prefix(struct sm_err *err, const char *fmt, ...)
{
	char old[SM_ERR_MSG_MAX];
	va_list ap;
	int n;

	if (err == NULL)
		return (SM_EINTERNAL);
	memcpy(old, err->msg, sizeof(old));
	va_start(ap, fmt);
	n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(err->msg))
		snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %.*s",
		    (int)(sizeof(err->msg) - (size_t)n - 1), old);
	return (err->code);
}

int
sm_name_lookup(const struct sm_name_val *tab, size_t n, const char *name,
    int *val)
{
	SM_ASSERT(name != NULL && (tab != NULL || n == 0));
	for (size_t i = 0; i < n; i++)
		if (strcmp(tab[i].nv_name, name) == 0) {
			*val = tab[i].nv_val;
			return (0);
		}
	return (-1);
}

void
sm_assert_fail(const char *expr, const char *file, int line, const char *func)
{
	fprintf(stderr, "smolder: assertion failed: %s (%s:%d %s)\n", expr,
	    file, line, func);
	fflush(stderr);
	abort();
}

static atomic_long sm_fault_countdown;

/* Saturated sums (sm_add_sat), process-wide. */
static _Atomic uint64_t sm_sat_events;

void
sm_sat_note(void)
{
	atomic_fetch_add_explicit(&sm_sat_events, 1, memory_order_relaxed);
}

uint64_t
sm_sat_count(void)
{
	return (atomic_load_explicit(&sm_sat_events, memory_order_relaxed));
}

void
sm_fault_alloc_after(long n)
{
	atomic_store(&sm_fault_countdown, n);
}

static _Thread_local long sm_fault_thread_countdown;

void
sm_fault_thread_after(long n)
{
	sm_fault_thread_countdown = n;
}

/* True when the fault hook says this allocation must fail. */
static inline int
sm_fault_hit(void)
{
	long v = atomic_load_explicit(&sm_fault_countdown,
	    memory_order_relaxed);

	if (SM_UNLIKELY(sm_fault_thread_countdown != 0) &&
	    --sm_fault_thread_countdown == 0)
		return (1);
	if (SM_LIKELY(v == 0))
		return (0);
	return (atomic_fetch_sub(&sm_fault_countdown, 1) == 1);
}

void
sm_mem_init(void)
{
#ifdef __GLIBC__
	(void)mallopt(M_MMAP_THRESHOLD, (int)SM_MEM_MMAP_MIN);
	(void)mallopt(M_TRIM_THRESHOLD, (int)SM_MEM_TRIM_MIN);
	{
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		if (n < SM_MEM_ARENAS_MIN)
			n = SM_MEM_ARENAS_MIN;
		if (n > SM_MEM_ARENAS_MAX)
			n = SM_MEM_ARENAS_MAX;
		/* An operator's MALLOC_ARENA_MAX (glibc's own knob) wins. */
		if (getenv("MALLOC_ARENA_MAX") == NULL)
			(void)mallopt(M_ARENA_MAX, (int)n);
	}
#endif
}

void
sm_mem_release(size_t bytes)
{
	if (bytes < SM_MEM_TRIM_MIN)
		return;
#ifdef __GLIBC__
	(void)malloc_trim(0);
#endif
}

void
sm_mem_stats(struct sm_mem_stats *m)
{
	unsigned long size, resident;
	FILE *f;

	memset(m, 0, sizeof(*m));
	if ((f = fopen("/proc/self/statm", "re")) != NULL) {
		if (fscanf(f, "%lu %lu", &size, &resident) == 2)
			m->rss = (uint64_t)resident *
			    (uint64_t)sysconf(_SC_PAGESIZE);
		fclose(f);
	}
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
	{
		struct mallinfo2 mi = mallinfo2();

		m->heap_used = (uint64_t)mi.uordblks;
		m->heap_free = (uint64_t)mi.fordblks;
	}
#endif
}

bool
sm_mem_tidy(void)
{
	static _Atomic uint64_t rss_after, gained;
	struct sm_mem_stats m;
	uint64_t before, last;

	sm_mem_stats(&m);
	if (m.heap_free < SM_MEM_TIDY_MIN)
		return (false);
	last = atomic_load_explicit(&rss_after, memory_order_relaxed);
	if (atomic_load_explicit(&gained, memory_order_relaxed) <
	    SM_MEM_TIDY_IDLE && m.rss < last + SM_MEM_TIDY_IDLE &&
	    m.rss + SM_MEM_TIDY_IDLE > last)
		return (false);
	before = m.rss;
#ifdef __GLIBC__
	(void)malloc_trim(0);
#endif
	sm_mem_stats(&m);
	atomic_store_explicit(&rss_after, m.rss, memory_order_relaxed);
	atomic_store_explicit(&gained, before > m.rss ? before - m.rss : 0,
	    memory_order_relaxed);
	return (true);
}

void *
sm_malloc(size_t n)
{
	if (sm_fault_hit())
		return (NULL);
	return (malloc(n == 0 ? 1 : n));
}

void *
sm_calloc(size_t nmemb, size_t n)
{
	if (sm_fault_hit())
		return (NULL);
	if (nmemb == 0 || n == 0)
		return (calloc(1, 1));
	return (calloc(nmemb, n));
}

void *
sm_realloc(void *p, size_t n)
{
	if (sm_fault_hit())
		return (NULL);
	return (realloc(p, n == 0 ? 1 : n));
}

void *
sm_reallocarray(void *p, size_t nmemb, size_t n)
{
	if (n != 0 && nmemb > SIZE_MAX / n)
		return (NULL);
	return (sm_realloc(p, nmemb * n));
}

char *
sm_strndup(const char *s, size_t n)
{
	char *d = sm_malloc(n + 1);

	if (d == NULL)
		return (NULL);
	memcpy(d, s, n);
	d[n] = '\0';
	return (d);
}

char *
sm_strdup(const char *s)
{
	return (sm_strndup(s, strlen(s)));
}

void
sm_free(void *p)
{
	free(p);
}

/*
 * The growth policy of sm_grow/sm_grow32: the new capacity for `need`
 * elements, at most `max`, starting from cap (or mincap, or 1) and
 * doubling.  0 when need cannot be reached without passing `max`.
 */
static size_t
sm_grow_cap(size_t cap, size_t need, size_t mincap, size_t max)
{
	size_t ncap = cap != 0 ? cap : (mincap != 0 ? mincap : 1);

	if (need > max)
		return (0);
	while (ncap < need) {
		if (ncap > max / 2)
			return (0);
		ncap *= 2;
	}
	return (ncap);
}

/* Realloc *(void **)arrp to ncap elements; *arrp is untouched on failure. */
static int
sm_grow_to(void *arrp, size_t ncap, size_t elsize)
{
	void *p, *np;

	if (ncap == 0 || (elsize != 0 && ncap > SIZE_MAX / elsize))
		return (SM_ENOMEM);
	/* memcpy: arrp points to a T *, not to a void *. */
	memcpy(&p, arrp, sizeof(p));
	if ((np = sm_realloc(p, ncap * elsize)) == NULL)
		return (SM_ENOMEM);
	memcpy(arrp, &np, sizeof(np));
	return (0);
}

/* sm_grow with the capacity kept at most `max` (a uint32_t's for
 * sm_grow32). */
static int
sm_grow_max(void *arrp, size_t *cap, size_t need, size_t elsize,
    size_t mincap, size_t max)
{
	size_t ncap;
	int rv;

	if (need <= *cap)
		return (0);
	ncap = sm_grow_cap(*cap, need, mincap, max);
	if ((rv = sm_grow_to(arrp, ncap, elsize)) != 0)
		return (rv);
	*cap = ncap;
	return (0);
}

int
sm_grow(void *arrp, size_t *cap, size_t need, size_t elsize, size_t mincap)
{
	return (sm_grow_max(arrp, cap, need, elsize, mincap, SIZE_MAX));
}

int
sm_grow32(void *arrp, uint32_t *cap, size_t need, size_t elsize,
    uint32_t mincap)
{
	size_t c = *cap;
	int rv;

	if ((rv = sm_grow_max(arrp, &c, need, elsize, mincap,
	    UINT32_MAX)) == 0)
		*cap = (uint32_t)c;
	return (rv);
}

static int64_t
sm_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ((int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}

int64_t
sm_now_ns(void)
{
	return (sm_clock_ns(CLOCK_REALTIME));
}

/* SMOLDER_TEST_CLOCK_SKEW_MS (sm.h): this process's clock offset. */
static int64_t clock_skew_ms;
static pthread_once_t clock_skew_once = PTHREAD_ONCE_INIT;

static void
clock_skew_init(void)
{
	const char *v = getenv("SMOLDER_TEST_CLOCK_SKEW_MS");

	if (v != NULL)
		clock_skew_ms = strtoll(v, NULL, 10);
}

int64_t
sm_clock_skew_ms(void)
{
	pthread_once(&clock_skew_once, clock_skew_init);
	return (clock_skew_ms);
}

int64_t
sm_now_ms(void)
{
	return (sm_clock_ns(CLOCK_REALTIME) / 1000000LL + sm_clock_skew_ms());
}

char *
sm_time_utc(int64_t ms, char *out, size_t outlen)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(out, outlen, "%lld ms", (long long)ms);
	return (out);
}

void
sm_sleep_ms(int64_t ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int64_t
sm_mono_ns(void)
{
	return (sm_clock_ns(CLOCK_MONOTONIC));
}

void
sm_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

bool
sm_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
    int64_t deadline_ns)
{
	struct timespec ts;

	if (deadline_ns == INT64_MAX) {
		pthread_cond_wait(cv, mu);
		return (true);
	}
	if (sm_mono_ns() >= deadline_ns)
		return (false);
	ts.tv_sec = (time_t)(deadline_ns / 1000000000);
	ts.tv_nsec = (long)(deadline_ns % 1000000000);
	return (pthread_cond_timedwait(cv, mu, &ts) == 0);
}

bool
sm_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
	return (sm_cond_wait_until(cv, mu, sm_mono_ns() +
	    SM_MAX(ms, 0) * 1000000));
}

void
sm_cond_set_flag(pthread_mutex_t *mu, pthread_cond_t *cv, bool *flag)
{
	pthread_mutex_lock(mu);
	*flag = true;
	pthread_cond_broadcast(cv);
	pthread_mutex_unlock(mu);
}

static _Thread_local int64_t sm_deadline_ms;

void
sm_deadline_set(int64_t unix_ms)
{
	sm_deadline_ms = unix_ms;
}

bool
sm_deadline_passed(void)
{
	return (sm_deadline_ms != 0 && sm_now_ms() > sm_deadline_ms);
}

bool
sm_hex_decode(const char *s, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++) {
		int hi = sm_hex_val((unsigned char)s[2 * i]);
		int lo = hi < 0 ? -1 : sm_hex_val((unsigned char)s[2 * i + 1]);

		if (lo < 0)
			return (false);
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return (true);
}

bool
sm_hex_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (s == NULL || n != 16)
		return (false);
	for (size_t i = 0; i < 16; i++) {
		int d = sm_hex_val((unsigned char)s[i]);

		if (d < 0)
			return (false);
		v = v << 4 | (uint64_t)d;
	}
	*out = v;
	return (true);
}

int
sm_mkdir_p(const char *dir)
{
	char p[4096];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(p)) {
		errno = ENAMETOOLONG;
		return (-1);
	}
	memcpy(p, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		p[i] = '\0';
		if (mkdir(p, 0755) != 0 && errno != EEXIST)
			return (-1);
		p[i] = dir[i];
	}
	return (0);
}

int
sm_read_file(const char *path, uint8_t **buf, size_t *len,
    struct sm_err *err)
{
	struct stat st;
	size_t got = 0;
	uint8_t *b;
	int fd, e;

	*buf = NULL;
	*len = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return (sm_err_set(err, errno == ENOENT ? SM_ENOTFOUND : SM_EIO,
		    "open %s: %s", path, strerror(errno)));
	if (fstat(fd, &st) != 0) {
		e = errno;
		close(fd);
		return (sm_err_set(err, SM_EIO, "stat %s: %s", path,
		    strerror(e)));
	}
	if ((b = sm_malloc(st.st_size > 0 ? (size_t)st.st_size : 1)) == NULL) {
		close(fd);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			e = r < 0 ? errno : EIO;   /* shorter than fstat said */
			close(fd);
			sm_free(b);
			return (sm_err_set(err, SM_EIO, "read %s: %s", path,
			    strerror(e)));
		}
		got += (size_t)r;
	}
	close(fd);
	*buf = b;
	*len = got;
	return (0);
}

/* The typed qsort comparators are one body: `first` and `second` name
 * the arguments in the order compared (b, a sorts largest first). */
#define SM_TYPED_CMP(name, T, first, second)                                  \
	int                                                                   \
	name(const void *a, const void *b)                                    \
	{                                                                     \
		return (SM_CMP(*(const T *)(first), *(const T *)(second)));   \
	}

SM_TYPED_CMP(sm_u64_cmp, uint64_t, a, b)
SM_TYPED_CMP(sm_u32_cmp, uint32_t, a, b)
SM_TYPED_CMP(sm_i64_cmp, int64_t, a, b)
SM_TYPED_CMP(sm_i64_desc_cmp, int64_t, b, a)

int
sm_bytes_cmp(const void *a, size_t na, const void *b, size_t nb)
{
	int c = memcmp(a, b, SM_MIN(na, nb));

	return (c != 0 ? c : SM_CMP(na, nb));
}

uint32_t
sm_u64_lower_bound(const uint64_t *a, uint32_t n, uint64_t x)
{
	uint32_t lo;

	SM_LOWER_BOUND(lo, n, mid, a[mid] < x);
	return (lo);
}

bool
sm_u64_has(const uint64_t *a, size_t n, uint64_t x)
{
	size_t lo;

	SM_LOWER_BOUND(lo, n, mid, a[mid] < x);
	return (lo < n && a[lo] == x);
}

int
sm_uuid_parse(const char *s, uint8_t out[16])
{
	size_t n = strlen(s), k = 0;
	bool dashes;

	if (n == 45 && strncasecmp(s, "urn:uuid:", 9) == 0) {
		s += 9;
		n = 36;
	} else if (n == 38 && s[0] == '{' && s[37] == '}') {
		s++;
		n = 36;
	}
	if (n == 36)
		dashes = true;
	else if (n == 32)
		dashes = false;
	else
		return (SM_EINVAL);
	if (dashes && (s[8] != '-' || s[13] != '-' || s[18] != '-' ||
	    s[23] != '-'))
		return (SM_EINVAL);
	for (size_t i = 0; i < n && k < 16;) {
		int hi, lo;

		if (dashes && (i == 8 || i == 13 || i == 18 || i == 23)) {
			i++;
			continue;
		}
		if ((hi = sm_hex_val((unsigned char)s[i])) < 0 ||
		    (lo = sm_hex_val((unsigned char)s[i + 1])) < 0)
			return (SM_EINVAL);
		out[k++] = (uint8_t)(hi << 4 | lo);
		i += 2;
	}
	return (k == 16 ? 0 : SM_EINVAL);
}

void
sm_uuid_format(const uint8_t id[16], char out[37])
{
	static const char hex[] = "0123456789abcdef";
	size_t k = 0;

	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[k++] = '-';
		out[k++] = hex[id[i] >> 4];
		out[k++] = hex[id[i] & 15];
	}
	out[k] = '\0';
}

bool
sm_test_fault(const char *name)
{
	const char *v = getenv("SMOLDER_TEST_FAULTS");

	return (v != NULL && strcmp(v, name) == 0);
}

int
sm_err_setv(struct sm_err *err, int code, const char *fmt, va_list ap)
{
	if (err == NULL)
		return (code);
	err->code = code;
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	return (code);
}
