/*
 * sm_test_rmtree.h -- remove a test's temporary directory tree
 * (header-only, like sm_test.h; the fuzz targets include it too).
 */
#ifndef SM_TEST_RMTREE_H
#define SM_TEST_RMTREE_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static inline int
sm_test_rm_one(const char *p, const struct stat *st, int flag,
    struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return (remove(p));
}

/* Remove `dir` and everything below it, depth first, following no link:
 * nftw's answer (0, or -1 at the first entry that could not go). */
static inline int
sm_test_rm_tree(const char *dir)
{
	return (nftw(dir, sm_test_rm_one, 16, FTW_DEPTH | FTW_PHYS));
}

#endif /* SM_TEST_RMTREE_H */
