/*
 * module.c -- dependency resolution for -target; see module.h.
 */
#include "module.h"

#include <string.h>

static int
mod_index(const struct sm_module *tab, size_t ntab, const char *name,
    size_t n)
{
	for (size_t i = 0; i < ntab; i++) {
		if (strlen(tab[i].name) == n && strncmp(tab[i].name, name,
		    n) == 0)
			return ((int)i);
	}
	return (-1);
}

/* Depth-first visit; state 0 new, 1 on stack, 2 done. */
static int
mod_visit(const struct sm_module *tab, size_t ntab, int i, char *state,
    const struct sm_module **order, size_t *n, struct sm_err *err)
{
	int rv;

	if (state[i] == 2)
		return (0);
	if (state[i] == 1)
		return (sm_err_set(err, SM_EINVAL, "module dependency cycle "
		    "at %s", tab[i].name));
	state[i] = 1;
	for (size_t d = 0; d < SM_MODULE_MAX_DEPS && tab[i].deps[d]; d++) {
		int j = mod_index(tab, ntab, tab[i].deps[d],
		    strlen(tab[i].deps[d]));

		if (j < 0)
			return (sm_err_set(err, SM_EINVAL, "module %s depends "
			    "on unknown module %s", tab[i].name,
			    tab[i].deps[d]));
		if ((rv = mod_visit(tab, ntab, j, state, order, n, err)) != 0)
			return (rv);
	}
	state[i] = 2;
	order[(*n)++] = &tab[i];
	return (0);
}

int
sm_modules_resolve(const struct sm_module *tab, size_t ntab,
    const char *targets, const struct sm_module **order, size_t *n,
    struct sm_err *err)
{
	char state[64] = { 0 };
	const char *p = targets;
	int rv;

	*n = 0;
	if (ntab > sizeof(state))
		return (sm_err_set(err, SM_EINVAL, "too many modules"));
	if (targets == NULL || *targets == '\0')
		return (sm_err_set(err, SM_EINVAL, "no target given"));
	while (*p != '\0') {
		const char *e = strchr(p, ',');
		size_t l = e != NULL ? (size_t)(e - p) : strlen(p);
		int i = mod_index(tab, ntab, p, l);

		if (l == 0 || i < 0 || !tab[i].target)
			return (sm_err_set(err, SM_EINVAL, "unrecognised "
			    "target \"%.*s\"", (int)l, p));
		if ((rv = mod_visit(tab, ntab, i, state, order, n, err)) != 0)
			return (rv);
		p += l;
		if (*p == ',')
			p++;
	}
	return (0);
}

bool
sm_modules_has(const struct sm_module *const *order, size_t n,
    const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(order[i]->name, name) == 0)
			return (true);
	}
	return (false);
}
