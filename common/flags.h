/*
 * flags.h -- command-line flags in Go/Pyroscope style (docs/style.md §15).
 *
 *   -name=value   -name value   --name=value   -bool-flag   -bool-flag=false
 *
 * Names are namespaced with dots and hyphens, units last
 * (-ingester.block-duration=1h, -distributor.ingestion-body-limit-mb=256).
 * Each component declares one const table of struct sm_flag, each entry a
 * field of its config struct by offset, written with the typed macros
 * below (a field of the wrong C type does not compile); main registers
 * every table against the config it fills (sm_flags_add's base), parses
 * argv once, and prints the tables for -help (sorted by name, with
 * defaults), the golden text a test compares against.
 *
 *   #define SM_FLAG_STRUCT struct ing_config
 *   static const struct sm_flag ing_flag_tab[] = {
 *           SM_FLAG_I64("ingester.rpc-workers", SM_FLAG_INT, rpc_workers,
 *               "4", "Concurrent RPC handlers of the ingester."),
 *           SM_FLAG_SWITCH("ingester.wal-sync", wal_sync, "false", "..."),
 *   };
 *   #undef SM_FLAG_STRUCT
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
#include <stddef.h>
#include <stdint.h>

#include "sm.h"

enum sm_flag_type {
	SM_FLAG_STRING,
	SM_FLAG_INT,
	SM_FLAG_BOOL,
	SM_FLAG_DURATION,
	SM_FLAG_BYTES,
};

/* One flag: a field of the table's config struct, `off` bytes in. */
struct sm_flag {
	const char *name;
	enum sm_flag_type type;
	size_t off;         /* char *, int64_t or bool, by type */
	const char *def;    /* default, as text ("" for an empty string) */
	const char *help;
	bool secret;        /* a credential: never shown (sm_flag_text) */
};

/* The offset of SM_FLAG_STRUCT's `field`, which must be of C type T. */
#define SM_FLAG_OFF(field, T)						\
	(offsetof(SM_FLAG_STRUCT, field) +				\
	    0 * sizeof(&((SM_FLAG_STRUCT *)0)->field == (T *)0))
/* A string flag (char *). */
#define SM_FLAG_STR(name, field, def, help)				\
	{ name, SM_FLAG_STRING, SM_FLAG_OFF(field, char *), def, help, false }
/* An int, duration (ms) or bytes flag (int64_t). */
#define SM_FLAG_I64(name, type, field, def, help)			\
	{ name, type, SM_FLAG_OFF(field, int64_t), def, help, false }
/* A string flag holding a credential (a key, a token), masked
 * wherever flag values are shown (/api/v1/status/config). */
#define SM_FLAG_SECRET(name, field, def, help)				\
	{ name, SM_FLAG_STRING, SM_FLAG_OFF(field, char *), def, help, true }
/* A bool flag. */
#define SM_FLAG_SWITCH(name, field, def, help)				\
	{ name, SM_FLAG_BOOL, SM_FLAG_OFF(field, bool), def, help, false }

struct sm_flag_ent {
	const struct sm_flag *f;
	void *ptr;          /* base + f->off */
};

struct sm_flags {
	struct sm_flag_ent *v;
	uint32_t n, cap;
	char **owned;       /* strings to free */
	uint32_t nowned, owned_cap;
	bool *set;          /* set[i]: given on the command line */
};

void sm_flags_init(struct sm_flags *fs);
void sm_flags_fini(struct sm_flags *fs);

/*
 * Register `n` flags of a table whose offsets are into the struct at
 * `base`, and apply their defaults.  The table and base must outlive the
 * set.  Returns 0, SM_EEXIST (duplicate name) or SM_EINVAL (bad
 * default).
 */
int sm_flags_add(struct sm_flags *fs, const struct sm_flag *tab, size_t n,
    void *base, struct sm_err *err);

/*
 * Define `int name(struct sm_flags *fs, cfgtype *cfg, struct sm_err *err)`,
 * a component's registration of its static table `tab` against its config
 * (ing_flags_add, dist_flags_add, ...): one definition instead of the same
 * three-line wrapper in every component.
 */
#define SM_FLAGS_ADD_FN(name, cfgtype, tab)				\
int									\
name(struct sm_flags *fs, cfgtype *cfg, struct sm_err *err)		\
{									\
	return (sm_flags_add(fs, (tab), SM_ARRAY_LEN(tab), cfg, err));	\
}

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

/* The registered flag `name`, or NULL. */
const struct sm_flag_ent *sm_flags_find(const struct sm_flags *fs,
    const char *name);

/*
 * A flag's value as text, as a flag would take it: strings as they are,
 * ints and bytes in decimal, bools true/false, durations as Go prints a
 * time.Duration ("1h30m0s", "1.5s", "500ms", "0s").  ptr NULL: the
 * flag's default.  A secret that is not empty reads "********", and so
 * does the password of a URL in any string (scheme://user:pw@host).
 * Returns the text's length, truncated to fit buf (n > 0), or -1 for
 * a default that does not parse (not possible for a registered flag).
 */
int sm_flag_text(const struct sm_flag *f, const void *ptr, char *buf,
    size_t n);

/* Milliseconds as Go's time.Duration.String() writes them; returns the
 * length (truncated to fit buf, n > 0). */
int sm_format_duration_ms(int64_t ms, char *buf, size_t n);

/* Parsers shared with config and query code. */
int sm_parse_duration_ms(const char *s, int64_t *out);
int sm_parse_bytes(const char *s, int64_t *out);
int sm_parse_int(const char *s, int64_t *out);
int sm_parse_bool(const char *s, bool *out);

#endif /* SM_FLAGS_H */
