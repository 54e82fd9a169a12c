/*
 * yaml.c -- see yaml.h.
 */
#include "yaml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

struct sm_yaml {
	yaml_document_t doc;
};

/* Errors read "<what>:<line>:<column>: <problem> <context>". */
static int
yaml_from(yaml_parser_t *ps, const char *what, struct sm_yaml **out,
    struct sm_err *err)
{
	struct sm_yaml *y = sm_calloc(1, sizeof(*y));

	if (y == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	if (!yaml_parser_load(ps, &y->doc)) {
		int rv = sm_err_set(err, SM_EINVAL, "%s:%zu:%zu: %s%s%s",
		    what, ps->problem_mark.line + 1,
		    ps->problem_mark.column + 1, ps->problem != NULL ?
		    ps->problem : "invalid YAML", ps->context != NULL ? " " : "",
		    ps->context != NULL ? ps->context : "");

		sm_free(y);
		return (rv);
	}
	*out = y;
	return (0);
}

static int
yaml_load_named(const char *s, size_t n, const char *what,
    struct sm_yaml **out, struct sm_err *err)
{
	yaml_parser_t ps;
	int rv;

	*out = NULL;
	if (n > SM_YAML_MAX_BYTES)
		return (sm_err_set(err, SM_ETOOBIG, "YAML document of %zu "
		    "bytes: the limit is %zu", n, SM_YAML_MAX_BYTES));
	if (!yaml_parser_initialize(&ps))
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	yaml_parser_set_input_string(&ps, (const unsigned char *)s, n);
	rv = yaml_from(&ps, what, out, err);
	yaml_parser_delete(&ps);
	return (rv);
}

int
sm_yaml_load(const char *s, size_t n, struct sm_yaml **out,
    struct sm_err *err)
{
	return (yaml_load_named(s, n, "YAML", out, err));
}

int
sm_yaml_load_file(const char *path, struct sm_yaml **out,
    struct sm_err *err)
{
	FILE *fp;
	char *buf;
	size_t n;
	int rv;

	*out = NULL;
	if ((fp = fopen(path, "rbe")) == NULL)
		return (sm_err_set(err, SM_EIO, "%s: %s", path,
		    strerror(errno)));
	if ((buf = sm_malloc(SM_YAML_MAX_BYTES + 1)) == NULL) {
		fclose(fp);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	n = fread(buf, 1, SM_YAML_MAX_BYTES + 1, fp);
	if (ferror(fp)) {
		rv = sm_err_set(err, SM_EIO, "%s: read error", path);
	} else if (n > SM_YAML_MAX_BYTES) {
		rv = sm_err_set(err, SM_ETOOBIG, "%s: larger than %zu bytes",
		    path, SM_YAML_MAX_BYTES);
	} else {
		rv = yaml_load_named(buf, n, path, out, err);
	}
	fclose(fp);
	sm_free(buf);
	return (rv);
}

void
sm_yaml_free(struct sm_yaml *y)
{
	if (y == NULL)
		return;
	yaml_document_delete(&y->doc);
	sm_free(y);
}

#define N(n) ((const yaml_node_t *)(const void *)(n))

const struct sm_yaml_node *
sm_yaml_root(const struct sm_yaml *y)
{
	return ((const struct sm_yaml_node *)(const void *)
	    yaml_document_get_root_node((yaml_document_t *)&y->doc));
}

bool
sm_yaml_is_map(const struct sm_yaml_node *n)
{
	return (n != NULL && N(n)->type == YAML_MAPPING_NODE);
}

bool
sm_yaml_is_seq(const struct sm_yaml_node *n)
{
	return (n != NULL && N(n)->type == YAML_SEQUENCE_NODE);
}

const char *
sm_yaml_scalar(const struct sm_yaml_node *n)
{
	return (n != NULL && N(n)->type == YAML_SCALAR_NODE ?
	    (const char *)N(n)->data.scalar.value : NULL);
}

int
sm_yaml_line(const struct sm_yaml_node *n)
{
	return (n != NULL ? (int)N(n)->start_mark.line + 1 : 0);
}

size_t
sm_yaml_len(const struct sm_yaml_node *n)
{
	if (sm_yaml_is_seq(n))
		return ((size_t)(N(n)->data.sequence.items.top -
		    N(n)->data.sequence.items.start));
	if (sm_yaml_is_map(n))
		return ((size_t)(N(n)->data.mapping.pairs.top -
		    N(n)->data.mapping.pairs.start));
	return (0);
}

static const struct sm_yaml_node *
node_at(const struct sm_yaml *y, int id)
{
	return ((const struct sm_yaml_node *)(const void *)
	    yaml_document_get_node((yaml_document_t *)&y->doc, id));
}

const struct sm_yaml_node *
sm_yaml_item(const struct sm_yaml *y, const struct sm_yaml_node *seq,
    size_t i)
{
	if (i >= sm_yaml_len(seq) || !sm_yaml_is_seq(seq))
		return (NULL);
	return (node_at(y, N(seq)->data.sequence.items.start[i]));
}

/* The key or the value of map's i-th pair (NULL past the end or for a
 * node that is not a mapping). */
static const struct sm_yaml_node *
pair_node(const struct sm_yaml *y, const struct sm_yaml_node *map,
    size_t i, bool value)
{
	const yaml_node_pair_t *p;

	if (!sm_yaml_is_map(map) || i >= sm_yaml_len(map))
		return (NULL);
	p = &N(map)->data.mapping.pairs.start[i];
	return (node_at(y, value ? p->value : p->key));
}

const struct sm_yaml_node *
sm_yaml_key(const struct sm_yaml *y, const struct sm_yaml_node *map,
    size_t i)
{
	return (pair_node(y, map, i, false));
}

const struct sm_yaml_node *
sm_yaml_value(const struct sm_yaml *y, const struct sm_yaml_node *map,
    size_t i)
{
	return (pair_node(y, map, i, true));
}

const struct sm_yaml_node *
sm_yaml_get(const struct sm_yaml *y, const struct sm_yaml_node *map,
    const char *key)
{
	for (size_t i = 0; i < sm_yaml_len(map); i++) {
		const char *k = sm_yaml_scalar(sm_yaml_key(y, map, i));

		if (k != NULL && strcmp(k, key) == 0)
			return (sm_yaml_value(y, map, i));
	}
	return (NULL);
}
