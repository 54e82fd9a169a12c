/*
 * json.h -- JSON documents as values: the one wrapper of jansson (Debian
 * libjansson4), for what Smolder reads and writes as JSON outside the
 * proto3 mapping: the bucket's meta.json, bucket-index.json and
 * deletion-mark.json, etcd's v3 gateway requests and answers, ring member
 * values, pprof's sample_type_config, and the decoding side of pbjson.c.
 * Hot paths that only write JSON build it in an sm_buf directly
 * (sm_buf_json_str); this is for documents that are read or edited.
 *
 * Values: a `struct sm_json *` is an opaque handle on one JSON value,
 * counted by references.  A function that returns a "new reference"
 * hands the caller one reference, released with sm_json_free(); a
 * "borrowed" value belongs to its container and is valid only while the
 * container is (the caller takes its own reference with sm_json_ref()
 * to keep it longer).  Every getter tolerates NULL and a value of the
 * wrong kind, reading it as absent (NULL, 0, false), so a chain such as
 * sm_json_int(sm_json_get(sm_json_get(doc, "source"), "gen")) never
 * crashes on a document that lacks a level.
 *
 * Numbers: an integer literal is an int64 (SM_JSON_INTEGER); one with a
 * fraction or an exponent is a double (SM_JSON_REAL).  The number -0
 * reads as the integer 0.
 *
 * Output: always compact (no whitespace), object members in insertion
 * order or, with SM_JSON_SORT_KEYS, sorted by key bytes; reals with 17
 * significant digits ("%.17g", plus ".0" when that reads as an integer),
 * so a double read back is the same double.  meta.json and the bucket
 * index are written sorted: those bytes are what other readers of the
 * bucket and the tests compare.
 *
 * Strings and keys are UTF-8 without NUL: parsing refuses anything else,
 * and the builders refuse it with SM_EINVAL.
 *
 * Errors: SM_EINVAL "<problem> at line <l> column <c>" for a document
 * that is not JSON (callers prefix what the document was); SM_EINVAL for
 * a builder given a container of the wrong kind or text that is not
 * UTF-8; SM_ENOMEM.  Locking: none; a value shared between threads may
 * be read by all of them, and edited by none while they do.
 */
#ifndef SM_JSON_H
#define SM_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "sm.h"

struct sm_json;

enum sm_json_kind {
	SM_JSON_NONE,      /* NULL: a missing value */
	SM_JSON_OBJECT,
	SM_JSON_ARRAY,
	SM_JSON_STRING,
	SM_JSON_INTEGER,
	SM_JSON_REAL,
	SM_JSON_TRUE,
	SM_JSON_FALSE,
	SM_JSON_NULL
};

/* sm_json_parse flags. */
#define SM_JSON_ANY 0x1u   /* any value at the top, not only {} or [] */

/*
 * Parse s[0..n) (no NUL needed; a NUL inside is an error) into a new
 * reference in *out.  The top level must be an object or an array unless
 * flags has SM_JSON_ANY.  An integer literal beyond int64 is an error
 * ("too big integer"), as is nesting deeper than jansson's 2048.
 * Returns 0, or SM_EINVAL / SM_ENOMEM with *out NULL.
 */
int sm_json_parse(const char *s, size_t n, unsigned flags,
    struct sm_json **out, struct sm_err *err);

/*
 * As sm_json_parse, but an integer literal beyond int64 is no error: the
 * document is then parsed again with every number read as a real, and
 * *reals says so (a caller that needs exact integers can refuse those
 * from 2^53 up).  *reals is false after any other outcome.
 */
int sm_json_parse_wide(const char *s, size_t n, unsigned flags,
    struct sm_json **out, bool *reals, struct sm_err *err);

/* Drop one reference (NULL is fine); the last one frees the value and
 * releases what it contains. */
void sm_json_free(struct sm_json *v);

/* Another reference to v (returned for chaining; NULL stays NULL).  The
 * value is shared, not copied: an edit shows through every reference. */
struct sm_json *sm_json_ref(struct sm_json *v);

/* A deep copy of v, a new reference, or NULL (v NULL, or no memory). */
struct sm_json *sm_json_copy(const struct sm_json *v);

/* --- reading ------------------------------------------------------------- */

enum sm_json_kind sm_json_kind(const struct sm_json *v);
bool sm_json_is_object(const struct sm_json *v);
bool sm_json_is_array(const struct sm_json *v);
bool sm_json_is_string(const struct sm_json *v);
bool sm_json_is_integer(const struct sm_json *v);
bool sm_json_is_bool(const struct sm_json *v);
bool sm_json_is_null(const struct sm_json *v);   /* JSON null, not NULL */
bool sm_json_is_true(const struct sm_json *v);   /* false unless true */

/* The member `key` of an object, borrowed; NULL when v is not an object
 * or has no such member. */
struct sm_json *sm_json_get(const struct sm_json *v, const char *key);

/* Items of an array (0 for anything else), and item i, borrowed (NULL
 * past the end). */
size_t sm_json_len(const struct sm_json *v);
struct sm_json *sm_json_at(const struct sm_json *v, size_t i);

/* Members of an object (0 for anything else). */
size_t sm_json_nmembers(const struct sm_json *v);

/*
 * Iteration over an object's members in document order (the last of
 * duplicate keys holds the value, at its first position):
 *
 *	struct sm_json_it it = SM_JSON_IT_INIT;
 *	const char *key;
 *	struct sm_json *val;
 *	while (sm_json_next(obj, &it, &key, &val)) ...
 *
 * key and val are borrowed from obj.  obj must not be edited during the
 * walk.  A value that is not an object yields no members.
 */
struct sm_json_it {
	void *pos;
	bool started;
};
#define SM_JSON_IT_INIT { NULL, false }
bool sm_json_next(const struct sm_json *obj, struct sm_json_it *it,
    const char **key, struct sm_json **val);

/* A string's bytes (NUL-terminated, borrowed) and length; NULL and 0 for
 * anything but a string. */
const char *sm_json_str(const struct sm_json *v);
size_t sm_json_strlen(const struct sm_json *v);

/* An integer's value; 0 for anything but an integer (a real is not
 * one: callers that take 1.0 use sm_json_real). */
int64_t sm_json_int(const struct sm_json *v);

/* True with *out set when v is an integer in [min, max]; false (and *out
 * untouched) for a missing value, another kind, or one out of range. */
bool sm_json_int_in(const struct sm_json *v, int64_t min, int64_t max,
    int64_t *out);

/* A real's value; 0 for anything but a real. */
double sm_json_real(const struct sm_json *v);

/* --- building ------------------------------------------------------------ */

/* New, empty containers: new references, NULL without memory. */
struct sm_json *sm_json_object(void);
struct sm_json *sm_json_array(void);

/*
 * Set obj[key] (replacing a member of that key, which keeps its
 * position).  Strings are copied; sm_json_set_strn takes n bytes of s.
 * Returns 0, SM_EINVAL (obj not an object; key or text not UTF-8) or
 * SM_ENOMEM.
 */
int sm_json_set_str(struct sm_json *obj, const char *key, const char *s);
int sm_json_set_strn(struct sm_json *obj, const char *key, const char *s,
    size_t n);
int sm_json_set_int(struct sm_json *obj, const char *key, int64_t i);
int sm_json_set_real(struct sm_json *obj, const char *key, double d);
int sm_json_set_bool(struct sm_json *obj, const char *key, bool b);
int sm_json_set_null(struct sm_json *obj, const char *key);

/*
 * Set obj[key] to v, taking the caller's reference to v whether it
 * succeeds or not (so a constructor may be passed straight in: v or obj
 * NULL is SM_ENOMEM, the constructor's failure; this holds for every
 * builder below).  To keep a reference of
 * your own, pass sm_json_ref(v).  Same errors as sm_json_set_str.
 */
int sm_json_set_take(struct sm_json *obj, const char *key,
    struct sm_json *v);

/* Remove obj[key]; SM_ENOTFOUND when there is none, SM_EINVAL when obj
 * is not an object (or NULL). */
int sm_json_del(struct sm_json *obj, const char *key);

/* Append to an array: sm_json_append_take takes v as sm_json_set_take
 * does.  Returns 0, SM_EINVAL (arr not an array) or SM_ENOMEM. */
int sm_json_append_take(struct sm_json *arr, struct sm_json *v);
int sm_json_append_int(struct sm_json *arr, int64_t i);

/* --- writing ------------------------------------------------------------- */

/* sm_json_dump flags. */
#define SM_JSON_SORT_KEYS 0x1u  /* object members sorted by key bytes */

/* Append v's compact text to out (see the top for the format).  Returns
 * 0, SM_EINVAL (v NULL) or the buffer's error (SM_ENOMEM, SM_ETOOBIG). */
int sm_json_dump(const struct sm_json *v, unsigned flags, struct sm_buf *out);

/* v's compact text as a malloc'd C string (sm_free), or NULL (v NULL, or
 * no memory). */
char *sm_json_dumps(const struct sm_json *v, unsigned flags);

#endif /* SM_JSON_H */
