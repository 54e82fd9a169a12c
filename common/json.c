/*
 * json.c -- the jansson wrapper; see json.h.
 *
 * A `struct sm_json *` is a `json_t *` in disguise: the struct is never
 * defined, and the handle is cast back here.  That keeps jansson's own
 * reference counting (so sm_json_ref and the _take builders cost nothing)
 * and lets a borrowed member be handed out without a copy.
 *
 * jansson's setters and constructors return -1 / NULL for a wrong kind,
 * for text that is not UTF-8 and for a failed allocation alike; the kind
 * and the UTF-8 are checked here first, so what remains is SM_ENOMEM.
 */
#include "json.h"

#include <math.h>
#include <string.h>

#include <jansson.h>

#include "labels.h"

#define J(v) ((json_t *)(uintptr_t)(v))
#define S(v) ((struct sm_json *)(v))

static int
json_parse_any(const char *s, size_t n, unsigned flags, size_t jflags,
    struct sm_json **out, json_error_t *je, struct sm_err *err)
{
	json_t *j;

	*out = NULL;
	if (flags & SM_JSON_ANY)
		jflags |= JSON_DECODE_ANY;
	if ((j = json_loadb(s, n, jflags, je)) == NULL) {
		if (json_error_code(je) == json_error_out_of_memory)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		return (sm_err_set(err, SM_EINVAL, "%s at line %d column %d",
		    je->text, je->line, je->column));
	}
	*out = S(j);
	return (0);
}

int
sm_json_parse(const char *s, size_t n, unsigned flags, struct sm_json **out,
    struct sm_err *err)
{
	json_error_t je;

	return (json_parse_any(s, n, flags, 0, out, &je, err));
}

int
sm_json_parse_wide(const char *s, size_t n, unsigned flags,
    struct sm_json **out, bool *reals, struct sm_err *err)
{
	json_error_t je;
	int rv;

	*reals = false;
	rv = json_parse_any(s, n, flags, 0, out, &je, err);
	if (rv == SM_EINVAL && json_error_code(&je) ==
	    json_error_numeric_overflow) {
		/* A real overflowing a double fails again, with its own
		 * message. */
		if ((rv = json_parse_any(s, n, flags, JSON_DECODE_INT_AS_REAL,
		    out, &je, err)) == 0)
			*reals = true;
	}
	return (rv);
}

void
sm_json_free(struct sm_json *v)
{
	json_decref(J(v));
}

struct sm_json *
sm_json_ref(struct sm_json *v)
{
	return (S(json_incref(J(v))));
}

struct sm_json *
sm_json_copy(const struct sm_json *v)
{
	return (S(json_deep_copy(J(v))));
}

/* --- reading ------------------------------------------------------------- */

enum sm_json_kind
sm_json_kind(const struct sm_json *v)
{
	static const enum sm_json_kind kinds[] = {
		[JSON_OBJECT] = SM_JSON_OBJECT,
		[JSON_ARRAY] = SM_JSON_ARRAY,
		[JSON_STRING] = SM_JSON_STRING,
		[JSON_INTEGER] = SM_JSON_INTEGER,
		[JSON_REAL] = SM_JSON_REAL,
		[JSON_TRUE] = SM_JSON_TRUE,
		[JSON_FALSE] = SM_JSON_FALSE,
		[JSON_NULL] = SM_JSON_NULL,
	};
	json_type t;

	if (v == NULL)
		return (SM_JSON_NONE);
	t = json_typeof(J(v));
	return ((size_t)t < SM_ARRAY_LEN(kinds) ? kinds[t] : SM_JSON_NONE);
}

bool
sm_json_is_object(const struct sm_json *v)
{
	return (json_is_object(J(v)));
}

bool
sm_json_is_array(const struct sm_json *v)
{
	return (json_is_array(J(v)));
}

bool
sm_json_is_string(const struct sm_json *v)
{
	return (json_is_string(J(v)));
}

bool
sm_json_is_integer(const struct sm_json *v)
{
	return (json_is_integer(J(v)));
}

bool
sm_json_is_bool(const struct sm_json *v)
{
	return (json_is_boolean(J(v)));
}

bool
sm_json_is_null(const struct sm_json *v)
{
	return (json_is_null(J(v)));
}

bool
sm_json_is_true(const struct sm_json *v)
{
	return (json_is_true(J(v)));
}

struct sm_json *
sm_json_get(const struct sm_json *v, const char *key)
{
	return (S(json_object_get(J(v), key)));
}

size_t
sm_json_len(const struct sm_json *v)
{
	return (json_array_size(J(v)));
}

struct sm_json *
sm_json_at(const struct sm_json *v, size_t i)
{
	return (S(json_array_get(J(v), i)));
}

size_t
sm_json_nmembers(const struct sm_json *v)
{
	return (json_object_size(J(v)));
}

bool
sm_json_next(const struct sm_json *obj, struct sm_json_it *it,
    const char **key, struct sm_json **val)
{
	*key = NULL;
	*val = NULL;
	if (!json_is_object(J(obj)))
		return (false);
	if (!it->started) {
		it->started = true;
		it->pos = json_object_iter(J(obj));
	} else if (it->pos != NULL) {
		it->pos = json_object_iter_next(J(obj), it->pos);
	}
	if (it->pos == NULL)
		return (false);
	*key = json_object_iter_key(it->pos);
	*val = S(json_object_iter_value(it->pos));
	return (true);
}

const char *
sm_json_str(const struct sm_json *v)
{
	return (json_string_value(J(v)));
}

size_t
sm_json_strlen(const struct sm_json *v)
{
	return (json_string_length(J(v)));
}

int64_t
sm_json_int(const struct sm_json *v)
{
	return ((int64_t)json_integer_value(J(v)));
}

bool
sm_json_int_in(const struct sm_json *v, int64_t min, int64_t max,
    int64_t *out)
{
	int64_t i;

	if (!json_is_integer(J(v)))
		return (false);
	i = (int64_t)json_integer_value(J(v));
	if (i < min || i > max)
		return (false);
	*out = i;
	return (true);
}

double
sm_json_real(const struct sm_json *v)
{
	return (json_real_value(J(v)));
}

/* --- building ------------------------------------------------------------ */

struct sm_json *
sm_json_object(void)
{
	return (S(json_object()));
}

struct sm_json *
sm_json_array(void)
{
	return (S(json_array()));
}

int
sm_json_set_take(struct sm_json *obj, const char *key, struct sm_json *v)
{
	if (v == NULL || obj == NULL) {
		json_decref(J(v));
		return (SM_ENOMEM);
	}
	if (!json_is_object(J(obj)) || key == NULL ||
	    !sm_utf8_valid(key, strlen(key))) {
		json_decref(J(v));
		return (SM_EINVAL);
	}
	/* json_object_set_new releases v when it fails. */
	return (json_object_set_new_nocheck(J(obj), key, J(v)) == 0 ? 0 :
	    SM_ENOMEM);
}

int
sm_json_set_strn(struct sm_json *obj, const char *key, const char *s,
    size_t n)
{
	if (s == NULL || !sm_utf8_valid(s, n) || memchr(s, '\0', n) != NULL)
		return (SM_EINVAL);
	return (sm_json_set_take(obj, key, S(json_stringn_nocheck(s, n))));
}

int
sm_json_set_str(struct sm_json *obj, const char *key, const char *s)
{
	if (s == NULL)
		return (SM_EINVAL);
	return (sm_json_set_strn(obj, key, s, strlen(s)));
}

int
sm_json_set_int(struct sm_json *obj, const char *key, int64_t i)
{
	return (sm_json_set_take(obj, key, S(json_integer((json_int_t)i))));
}

int
sm_json_set_real(struct sm_json *obj, const char *key, double d)
{
	json_t *v = json_real(d);

	/* jansson has no form for NaN and the infinities. */
	if (v == NULL && !isfinite(d))
		return (SM_EINVAL);
	return (sm_json_set_take(obj, key, S(v)));
}

int
sm_json_set_bool(struct sm_json *obj, const char *key, bool b)
{
	return (sm_json_set_take(obj, key, S(json_boolean(b))));
}

int
sm_json_set_null(struct sm_json *obj, const char *key)
{
	return (sm_json_set_take(obj, key, S(json_null())));
}

int
sm_json_del(struct sm_json *obj, const char *key)
{
	if (!json_is_object(J(obj)))
		return (SM_EINVAL);
	return (json_object_del(J(obj), key) == 0 ? 0 : SM_ENOTFOUND);
}

int
sm_json_append_take(struct sm_json *arr, struct sm_json *v)
{
	if (v == NULL || arr == NULL) {
		json_decref(J(v));
		return (SM_ENOMEM);
	}
	if (!json_is_array(J(arr))) {
		json_decref(J(v));
		return (SM_EINVAL);
	}
	/* json_array_append_new releases v when it fails. */
	return (json_array_append_new(J(arr), J(v)) == 0 ? 0 : SM_ENOMEM);
}

int
sm_json_append_int(struct sm_json *arr, int64_t i)
{
	return (sm_json_append_take(arr, S(json_integer((json_int_t)i))));
}

/* --- writing ------------------------------------------------------------- */

static size_t
json_dump_flags(unsigned flags)
{
	return (JSON_COMPACT | JSON_ENCODE_ANY |
	    ((flags & SM_JSON_SORT_KEYS) ? JSON_SORT_KEYS : 0));
}

static int
json_dump_buf(const char *p, size_t n, void *arg)
{
	struct sm_buf *b = arg;

	sm_buf_append(b, p, n);
	return (sm_buf_error(b) != 0 ? -1 : 0);
}

int
sm_json_dump(const struct sm_json *v, unsigned flags, struct sm_buf *out)
{
	if (v == NULL)
		return (SM_EINVAL);
	if (json_dump_callback(J(v), json_dump_buf, out,
	    json_dump_flags(flags)) != 0)
		return (sm_buf_error(out) != 0 ? sm_buf_error(out) : SM_ENOMEM);
	return (sm_buf_error(out));
}

char *
sm_json_dumps(const struct sm_json *v, unsigned flags)
{
	struct sm_buf b = SM_BUF_INIT;

	if (sm_json_dump(v, flags, &b) != 0) {
		sm_buf_fini(&b);
		return (NULL);
	}
	return (sm_buf_take(&b, NULL));
}
