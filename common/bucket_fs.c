/*
 * bucket_fs.c -- the filesystem backend of bucket.h: an object is the file
 * <dir>/<key>, '/' in a key making subdirectories.
 *
 * Put: write <parent>/.tmp-<pid>-<n>-<name>, fsync it, rename it over the
 * key, fsync the parent directory (and every directory the put created,
 * through its own parent), so a returned put survives a power loss and a
 * reader never sees a torn object.  Keys never have a segment starting
 * with '.' (sm_bucket_key_ok), so temporary files are never listed or
 * read as objects; one a crash left behind is unlinked by the first list
 * that meets it more than an hour later (a live put takes milliseconds).
 *
 * Delete unlinks the file and then removes the directories it leaves
 * empty, up to the root; a put racing with that removal finds its parent
 * gone (ENOENT) and creates it again (bounded retries).
 *
 * List walks the tree, skipping every directory whose path cannot start
 * with the prefix, collects the keys that do and sorts them, because a
 * directory walk is not byte order ("a-c" < "a/b" but a walk may visit
 * "a/" first).  It is for the compactor and smolder-admin, not the read
 * path (bucket.h).
 *
 * Locking: none of its own; the filesystem orders concurrent calls.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bucket.h"

#define FS_TMP_STALE_S 3600
#define FS_PUT_TRIES 4

struct fs_bucket {
	struct sm_bucket b;        /* first: bucket.h's common head */
	char *dir;                 /* no trailing slash */
	atomic_uint_fast64_t seq;  /* temporary file names */
};

static int
fs_errno(int e, const char *op, const char *key, struct sm_err *err)
{
	int code = e == ENOENT ? SM_ENOTFOUND : e == ENOMEM ? SM_ENOMEM :
	    SM_EIO;

	return (sm_err_set(err, code, "filesystem bucket %s %s: %s", op, key,
	    strerror(e)));
}

static int
fs_path(const struct fs_bucket *fb, const char *key, char *path, size_t len)
{
	int n = snprintf(path, len, "%s/%s", fb->dir, key);

	return (n < 0 || (size_t)n >= len ? SM_EINVAL : 0);
}

static int
fsync_dir(const char *dir)
{
	int fd, rv = 0;

	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return (-errno);
	if (fsync(fd) != 0)
		rv = -errno;
	close(fd);
	return (rv);
}

/*
 * mkdir -p of path's parent directories below fb->dir, fsyncing the
 * parent of each one created so the new entry is durable too.
 */
static int
fs_mkdirs(const struct fs_bucket *fb, char *path)
{
	size_t root = strlen(fb->dir);
	int e;

	for (char *s = path + root + 1; (s = strchr(s, '/')) != NULL; s++) {
		*s = '\0';
		if (mkdir(path, 0755) == 0) {
			char *up = strrchr(path, '/');

			*up = '\0';
			e = fsync_dir(path);
			*up = '/';
			if (e != 0) {
				*s = '/';
				return (e);
			}
		} else if (errno != EEXIST) {
			e = -errno;
			*s = '/';
			return (e);
		}
		*s = '/';
	}
	return (0);
}

static int
write_all(int fd, const void *p, size_t n)
{
	const uint8_t *q = p;

	while (n > 0) {
		ssize_t w = write(fd, q, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return (-errno);
		}
		q += w;
		n -= (size_t)w;
	}
	return (0);
}

/* One try of a put: -errno (ENOENT when a delete removed the parent). */
static int
fs_put_once(struct fs_bucket *fb, const char *path, const char *tmp,
    const void *p, size_t n)
{
	char dir[PATH_MAX];
	int fd, e;

	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return (-errno);
	if ((e = write_all(fd, p, n)) == 0 && fsync(fd) != 0)
		e = -errno;
	if (close(fd) != 0 && e == 0)
		e = -errno;
	if (e == 0 && rename(tmp, path) != 0)
		e = -errno;
	if (e != 0) {
		unlink(tmp);
		return (e);
	}
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	return (fsync_dir(dir));
}

static int
fs_put(struct sm_bucket *b, const char *key, const void *p, size_t n,
    struct sm_err *err)
{
	struct fs_bucket *fb = (struct fs_bucket *)b;
	char path[PATH_MAX], tmp[PATH_MAX];
	const char *base;
	int e = 0, k;

	if (fs_path(fb, key, path, sizeof(path)) != 0)
		return (sm_err_set(err, SM_EINVAL, "filesystem bucket put "
		    "%s: path too long", key));
	base = strrchr(path, '/') + 1;
	k = snprintf(tmp, sizeof(tmp), "%.*s.tmp-%ld-%llu-%s",
	    (int)(base - path), path, (long)getpid(),
	    (unsigned long long)atomic_fetch_add(&fb->seq, 1), base);
	if (k < 0 || (size_t)k >= sizeof(tmp))
		return (sm_err_set(err, SM_EINVAL, "filesystem bucket put "
		    "%s: path too long", key));
	for (int i = 0; i < FS_PUT_TRIES; i++) {
		if ((e = fs_mkdirs(fb, path)) != 0 && e != -ENOENT)
			break;
		if ((e = fs_put_once(fb, path, tmp, p, n)) != -ENOENT)
			break;
	}
	return (e == 0 ? 0 : fs_errno(-e, "put", key, err));
}

static int
fs_get(struct sm_bucket *b, const char *key, uint64_t off, uint64_t len,
    struct sm_buf *out, struct sm_err *err)
{
	struct fs_bucket *fb = (struct fs_bucket *)b;
	char path[PATH_MAX];
	struct stat st;
	size_t base, want;
	int fd, rv = 0;

	if (fs_path(fb, key, path, sizeof(path)) != 0)
		return (sm_err_set(err, SM_EINVAL, "filesystem bucket get "
		    "%s: path too long", key));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return (fs_errno(errno, "get", key, err));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rv = fs_errno(S_ISREG(st.st_mode) ? errno : ENOENT, "get",
		    key, err);
		goto out;
	}
	if (len == SM_BUCKET_WHOLE)
		len = off <= (uint64_t)st.st_size ? (uint64_t)st.st_size - off :
		    UINT64_MAX;
	if (off > (uint64_t)st.st_size || len > (uint64_t)st.st_size - off) {
		rv = sm_err_set(err, SM_EINVAL, "filesystem bucket get %s: "
		    "range past the end of %lld bytes", key,
		    (long long)st.st_size);
		goto out;
	}
	if (len > SIZE_MAX / 2 || sm_buf_reserve(out, (size_t)len) != 0) {
		rv = SM_ENOMEM;
		goto out;
	}
	base = out->len;
	want = (size_t)len;
	while (want > 0) {
		ssize_t r = pread(fd, out->b + out->len, want,
		    (off_t)(off + (out->len - base)));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rv = r < 0 ? fs_errno(errno, "get", key, err) :
			    sm_err_set(err, SM_EIO, "filesystem bucket get "
			    "%s: shorter than its size", key);
			out->len = base;
			goto out;
		}
		out->len += (size_t)r;
		want -= (size_t)r;
	}
out:
	close(fd);
	return (rv);
}

static int
fs_stat(struct sm_bucket *b, const char *key, uint64_t *size,
    struct sm_err *err)
{
	struct fs_bucket *fb = (struct fs_bucket *)b;
	char path[PATH_MAX];
	struct stat st;

	if (fs_path(fb, key, path, sizeof(path)) != 0)
		return (sm_err_set(err, SM_EINVAL, "filesystem bucket stat "
		    "%s: path too long", key));
	if (stat(path, &st) != 0)
		return (fs_errno(errno, "stat", key, err));
	if (!S_ISREG(st.st_mode))
		return (fs_errno(ENOENT, "stat", key, err));
	*size = (uint64_t)st.st_size;
	return (0);
}

static int
fs_del(struct sm_bucket *b, const char *key, struct sm_err *err)
{
	struct fs_bucket *fb = (struct fs_bucket *)b;
	char path[PATH_MAX];
	size_t root = strlen(fb->dir);
	char *s;
	int e;

	if (fs_path(fb, key, path, sizeof(path)) != 0)
		return (sm_err_set(err, SM_EINVAL, "filesystem bucket delete "
		    "%s: path too long", key));
	if (unlink(path) != 0) {
		if (errno == ENOENT || errno == EISDIR)
			return (0);
		return (fs_errno(errno, "delete", key, err));
	}
	s = strrchr(path, '/');
	*s = '\0';
	if ((e = fsync_dir(path)) != 0)
		return (fs_errno(-e, "delete", key, err));
	/* Empty directories go too; a non-empty one stops the climb. */
	while (strlen(path) > root && rmdir(path) == 0) {
		s = strrchr(path, '/');
		*s = '\0';
	}
	return (0);
}

/* --- list ------------------------------------------------------------------ */

struct fs_ent {
	char *key;
	uint64_t size;
};

struct fs_list {
	const char *prefix;
	size_t plen;
	struct fs_ent *v;
	size_t n, cap;
};

static int
fs_list_add(struct fs_list *l, const char *key, uint64_t size)
{
	char *k;

	if (SM_GROW(l->v, l->cap, l->n + 1, 64) != 0 ||
	    (k = sm_strdup(key)) == NULL)
		return (SM_ENOMEM);
	l->v[l->n].key = k;
	l->v[l->n].size = size;
	l->n++;
	return (0);
}

/* Walk directory `path` (plen bytes) whose keys start with `rel` (rlen
 * bytes: "" or "a/b/"); 0, SM_ENOMEM or -errno. */
static int
fs_walk(struct fs_list *l, char *path, size_t plen, char *rel, size_t rlen)
{
	struct dirent *de;
	struct stat st;
	DIR *d;
	int rv = 0;

	if ((d = opendir(path)) == NULL)
		return (errno == ENOENT || errno == ENOTDIR ? 0 : -errno);
	while (rv == 0 && (de = readdir(d)) != NULL) {
		size_t nl = strlen(de->d_name);

		if (plen + 1 + nl + 1 >= PATH_MAX ||
		    rlen + nl + 2 > 2 * SM_BUCKET_KEY_MAX + 2)
			continue;
		snprintf(path + plen, PATH_MAX - plen, "/%s", de->d_name);
		if (de->d_name[0] == '.') {
			/* ".", "..", or a temporary file (above). */
			if (strncmp(de->d_name, ".tmp-", 5) == 0 &&
			    lstat(path, &st) == 0 &&
			    time(NULL) - st.st_mtime > FS_TMP_STALE_S)
				unlink(path);
			continue;
		}
		memcpy(rel + rlen, de->d_name, nl + 1);
		/* Skip what cannot start with the prefix. */
		if (strncmp(rel, l->prefix, SM_MIN(rlen + nl, l->plen)) != 0)
			continue;
		if (lstat(path, &st) != 0)
			continue;    /* deleted meanwhile */
		if (S_ISDIR(st.st_mode)) {
			rel[rlen + nl] = '/';
			rel[rlen + nl + 1] = '\0';
			rv = fs_walk(l, path, plen + 1 + nl, rel,
			    rlen + nl + 1);
		} else if (S_ISREG(st.st_mode) && rlen + nl >= l->plen) {
			rv = fs_list_add(l, rel, (uint64_t)st.st_size);
		}
	}
	closedir(d);
	path[plen] = '\0';
	rel[rlen] = '\0';
	return (rv);
}

static int
fs_ent_cmp(const void *a, const void *b)
{
	return (strcmp(((const struct fs_ent *)a)->key,
	    ((const struct fs_ent *)b)->key));
}

static int
fs_list(struct sm_bucket *b, const char *prefix,
    int (*fn)(void *arg, const struct sm_bucket_obj *o), void *arg,
    struct sm_err *err)
{
	struct fs_bucket *fb = (struct fs_bucket *)b;
	struct fs_list l = { .prefix = prefix, .plen = strlen(prefix) };
	char path[PATH_MAX], rel[2 * SM_BUCKET_KEY_MAX + 2];
	int rv;

	snprintf(path, sizeof(path), "%s", fb->dir);
	rel[0] = '\0';
	rv = fs_walk(&l, path, strlen(path), rel, 0);
	if (rv == 0) {
		if (l.n > 1)
			qsort(l.v, l.n, sizeof(*l.v), fs_ent_cmp);
		for (size_t i = 0; i < l.n && rv == 0; i++) {
			struct sm_bucket_obj o = { l.v[i].key, l.v[i].size };

			rv = fn(arg, &o);
		}
	} else if (rv != SM_ENOMEM) {
		rv = fs_errno(-rv, "list", prefix, err);
	}
	for (size_t i = 0; i < l.n; i++)
		sm_free(l.v[i].key);
	sm_free(l.v);
	return (rv);
}

static void
fs_destroy(struct sm_bucket *b)
{
	struct fs_bucket *fb = (struct fs_bucket *)b;

	sm_free(fb->dir);
	sm_free(fb);
}

static const struct sm_bucket_ops fs_ops = {
	.name = "filesystem",
	.put = fs_put,
	.get = fs_get,
	.stat = fs_stat,
	.del = fs_del,
	.list = fs_list,
	.destroy = fs_destroy,
};

int
sm_bucket_fs_open(const char *dir, struct sm_bucket **out, struct sm_err *err)
{
	struct fs_bucket *fb;
	char tmp[PATH_MAX];
	size_t n = strlen(dir);
	int e;

	*out = NULL;
	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n == 0 || n + 2 >= PATH_MAX - 2 * SM_BUCKET_KEY_MAX - 64)
		return (sm_err_set(err, SM_EINVAL, "-storage.filesystem.dir "
		    "'%s': empty or too long", dir));
	snprintf(tmp, sizeof(tmp), "%.*s/", (int)n, dir);
	if ((fb = sm_calloc(1, sizeof(*fb))) == NULL)
		return (SM_ENOMEM);
	fb->b.ops = &fs_ops;
	fb->dir = sm_strndup(dir, n);
	if (fb->dir == NULL) {
		sm_free(fb);
		return (SM_ENOMEM);
	}
	/* mkdir -p of the directory itself (tmp ends in '/'). */
	for (char *s = tmp + 1; (s = strchr(s, '/')) != NULL; s++) {
		*s = '\0';
		if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
			e = errno;
			fs_destroy(&fb->b);
			return (sm_err_set(err, SM_EIO, "filesystem bucket "
			    "%s: %s", tmp, strerror(e)));
		}
		*s = '/';
	}
	if ((fb->b.desc = sm_malloc(n + 16)) != NULL)
		snprintf(fb->b.desc, n + 16, "filesystem %s", fb->dir);
	*out = &fb->b;
	return (0);
}
