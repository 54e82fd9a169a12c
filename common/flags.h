/*
 * flags.h -- command-line flags in Go/Pyroscope style (docs/style.md §15).
 *
 *   -name=value   -name value   --name=value   -bool-flag   -bool-flag=false
 *
 * Names are namespaced with dots and hyphens, units last
 * (-ingester.block-duration=1h, -distributor.ingestion-body-limit-mb=256).
 * Each component declares a table of struct sm_flag pointing at its config
 * struct fields; main registers every table, parses argv once, and prints
 * the tables for -help (sorted by name, with defaults), the golden text a
 * test compares against.
 *
 * Types: string (char *, strdup'd, freed by sm_flags_fini), int (int64_t),
 * bool, duration (int64_t milliseconds; Go syntax "1h30m", "10s", "500ms";
 * a bare integer is seconds), and bytes (int64_t; "4MiB", "512KB", "1G",
 * or a bare number of bytes).
 *
 * Ownership: the set owns copies of string values it parsed; defaults are
 * applied at registration.  Locking: none (startup only).
 */
#ifndef SM_FLAGS_H
#define SM_FLAGS_H

#include <stdbool.h>

#include "sm.h"

enum sm_flag_type {
	SM_FLAG_STRING,
	SM_FLAG_INT,
	SM_FLAG_BOOL,
	SM_FLAG_DURATION,
	SM_FLAG_BYTES,
};

struct sm_flag {
	const char *name;
	enum sm_flag_type type;
	void *ptr;          /* char **, int64_t *, bool * */
	const char *def;    /* default, as text ("" for an empty string) */
	const char *help;
};

struct sm_flags {
	const struct sm_flag **v;
	uint32_t n, cap;
	char **owned;       /* strings to free */
	uint32_t nowned, owned_cap;
	bool *set;          /* set[i]: given on the command line */
};

void sm_flags_init(struct sm_flags *fs);
void sm_flags_fini(struct sm_flags *fs);

/*
 * Register `n` flags and apply their defaults.  The table must outlive the
 * set.  Returns 0, SM_EEXIST (duplicate name) or SM_EINVAL (bad default).
 */
int sm_flags_add(struct sm_flags *fs, const struct sm_flag *tab, size_t n,
    struct sm_err *err);

/*
 * Parse argv[1..argc).  Positional arguments are refused.  "-help" and
 * "-h" set *help.  Returns 0 or SM_EINVAL ("flag provided but not
 * defined: -x", "invalid value ... for flag -x: ...").
 */
int sm_flags_parse(struct sm_flags *fs, int argc, char **argv, bool *help,
    struct sm_err *err);

/* Was the flag given on the command line? */
bool sm_flags_was_set(const struct sm_flags *fs, const char *name);

/* Print usage: every flag sorted by name with type, default and help. */
void sm_flags_usage(const struct sm_flags *fs, FILE *out);

/* Parsers shared with config and query code. */
int sm_parse_duration_ms(const char *s, int64_t *out);
int sm_parse_bytes(const char *s, int64_t *out);
int sm_parse_int(const char *s, int64_t *out);
int sm_parse_bool(const char *s, bool *out);

#endif /* SM_FLAGS_H */
