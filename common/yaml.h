/*
 * yaml.h -- YAML documents read whole: the one wrapper of libyaml (Debian
 * libyaml-0-2), for configuration files (the scraper's scrape_configs and
 * its file discovery's target files, which may also be JSON: YAML 1.1
 * reads the JSON those files hold).
 *
 * A document is loaded at once (libyaml's document API) and then read
 * through opaque node handles; every accessor takes the document and
 * tolerates a NULL node (a missing key reads as absent, not a crash).
 * Sizes: a document is a configuration file, refused past
 * SM_YAML_MAX_BYTES.
 *
 * Errors: SM_EINVAL "<file>:<line>:<column>: <libyaml's problem>" (the
 * file is "YAML" for a string); SM_EIO naming the file; SM_ETOOBIG.  Ownership: nodes and scalars belong to
 * the document; sm_yaml_free() frees them all.  Locking: none.
 */
#ifndef SM_YAML_H
#define SM_YAML_H

#include <stdbool.h>
#include <stddef.h>

#include "sm.h"

#define SM_YAML_MAX_BYTES ((size_t)16 << 20)

struct sm_yaml;
struct sm_yaml_node;

int sm_yaml_load_file(const char *path, struct sm_yaml **out,
    struct sm_err *err);
int sm_yaml_load(const char *s, size_t n, struct sm_yaml **out,
    struct sm_err *err);
void sm_yaml_free(struct sm_yaml *y);

/* The root node; NULL for an empty document. */
const struct sm_yaml_node *sm_yaml_root(const struct sm_yaml *y);

bool sm_yaml_is_map(const struct sm_yaml_node *n);
bool sm_yaml_is_seq(const struct sm_yaml_node *n);
/* A scalar's text, or NULL when n is not a scalar. */
const char *sm_yaml_scalar(const struct sm_yaml_node *n);
/* The line (1-based) where n starts, for messages; 0 for NULL. */
int sm_yaml_line(const struct sm_yaml_node *n);

/* Items of a sequence, pairs of a mapping (0 for anything else). */
size_t sm_yaml_len(const struct sm_yaml_node *n);
const struct sm_yaml_node *sm_yaml_item(const struct sm_yaml *y,
    const struct sm_yaml_node *seq, size_t i);
const struct sm_yaml_node *sm_yaml_key(const struct sm_yaml *y,
    const struct sm_yaml_node *map, size_t i);
const struct sm_yaml_node *sm_yaml_value(const struct sm_yaml *y,
    const struct sm_yaml_node *map, size_t i);
/* The value of `key` in a mapping, or NULL. */
const struct sm_yaml_node *sm_yaml_get(const struct sm_yaml *y,
    const struct sm_yaml_node *map, const char *key);

#endif /* SM_YAML_H */
