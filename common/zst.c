/*
 * zst.c -- see zst.h.  Contexts are per thread so block writers and query
 * threads never share or lock one; a pthread key frees them when the
 * thread exits (thread_local alone would leak them).
 */
#include "zst.h"

#include <pthread.h>
#include <zstd.h>

struct zst_ctx {
	ZSTD_CCtx *c;
	ZSTD_DCtx *d;
};

static pthread_key_t zst_key;
static pthread_once_t zst_once = PTHREAD_ONCE_INIT;

static void
zst_ctx_free(void *p)
{
	struct zst_ctx *z = p;

	ZSTD_freeCCtx(z->c);
	ZSTD_freeDCtx(z->d);
	sm_free(z);
}

static void
zst_key_init(void)
{
	SM_ASSERT(pthread_key_create(&zst_key, zst_ctx_free) == 0);
}

static struct zst_ctx *
zst_ctx(void)
{
	struct zst_ctx *z;

	pthread_once(&zst_once, zst_key_init);
	if ((z = pthread_getspecific(zst_key)) != NULL)
		return (z);
	if ((z = sm_calloc(1, sizeof(*z))) == NULL)
		return (NULL);
	if (pthread_setspecific(zst_key, z) != 0) {
		sm_free(z);
		return (NULL);
	}
	return (z);
}

int
sm_zst_compress(const void *in, size_t n, int level, struct sm_buf *out)
{
	struct zst_ctx *z = zst_ctx();
	size_t bound = ZSTD_compressBound(n), r;

	if (z == NULL || (z->c == NULL && (z->c = ZSTD_createCCtx()) == NULL))
		return (SM_ENOMEM);
	if (sm_buf_reserve(out, bound) != 0)
		return (sm_buf_error(out));
	r = ZSTD_compressCCtx(z->c, out->b + out->len, bound, in, n, level);
	if (ZSTD_isError(r))
		return (SM_EINTERNAL);
	out->len += r;
	out->b[out->len] = '\0';
	return (0);
}

int
sm_zst_decompress(const void *src, size_t n, void *dst, size_t raw_len)
{
	struct zst_ctx *z = zst_ctx();
	unsigned long long fsz;
	size_t r;

	if (z == NULL || (z->d == NULL && (z->d = ZSTD_createDCtx()) == NULL))
		return (SM_ENOMEM);
	fsz = ZSTD_getFrameContentSize(src, n);
	if (fsz == ZSTD_CONTENTSIZE_ERROR || (fsz != ZSTD_CONTENTSIZE_UNKNOWN &&
	    fsz != raw_len))
		return (SM_ECORRUPT);
	r = ZSTD_decompressDCtx(z->d, dst, raw_len, src, n);
	if (ZSTD_isError(r) || r != raw_len)
		return (SM_ECORRUPT);
	return (0);
}
