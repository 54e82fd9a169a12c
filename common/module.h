/*
 * module.h -- the module manager behind -target (docs/style.md §1, after
 * Pyroscope's pkg/pyroscope/modules.go).
 *
 * A module is {name, deps, init, start, stop}.  -target names one or more
 * modules (comma-separated); the manager adds their dependencies
 * transitively and orders everything so each module comes after its
 * dependencies (ties keep table order).  The binary then runs init for all
 * in order (allocate, register HTTP routes), start for all in order, waits
 * for SIGINT/SIGTERM, and stops in reverse order.
 *
 * Only modules marked `target` may be named on the command line; the rest
 * (e.g. "server") are internal dependencies.  "all" is a module whose
 * dependencies are every component, so -target=all is single-binary mode.
 */
#ifndef SM_MODULE_H
#define SM_MODULE_H

#include <stdbool.h>

#include "sm.h"

#define SM_MODULE_MAX_DEPS 8

struct sm_module {
	const char *name;
	const char *deps[SM_MODULE_MAX_DEPS];   /* NULL-terminated */
	bool target;                             /* may be named in -target */
	int (*init)(void *app, struct sm_err *err);
	int (*start)(void *app, struct sm_err *err);
	void (*stop)(void *app);
};

/*
 * Resolve the comma-separated `targets` against the table: fills
 * order[0..*n) with the modules to run, dependencies first.  `order` must
 * have room for ntab entries.  Returns 0 or SM_EINVAL ("unknown target",
 * "dependency cycle").
 */
int sm_modules_resolve(const struct sm_module *tab, size_t ntab,
    const char *targets, const struct sm_module **order, size_t *n,
    struct sm_err *err);

/* True if module `name` is in the resolved list. */
bool sm_modules_has(const struct sm_module *const *order, size_t n,
    const char *name);

#endif /* SM_MODULE_H */
