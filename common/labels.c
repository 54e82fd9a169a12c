/*
 * labels.c -- label sets; see labels.h.
 */
#include "labels.h"

#include <string.h>

#include "hash.h"

void
sm_label_limits_default(struct sm_label_limits *l)
{
	l->max_name_length = 1024;
	l->max_value_length = 2048;
	l->max_names = 30;
}

static int
label_cmp(const void *a, const void *b)
{
	const struct sm_label *x = a, *y = b;

	return (strcmp(x->name, y->name));
}

void
sm_labels_sort(struct sm_label *v, uint32_t n)
{
	/* Insertion sort: sets are small (<= ~40) and this is stable. */
	if (n > 64) {
		qsort(v, n, sizeof(*v), label_cmp);
		return;
	}
	for (uint32_t i = 1; i < n; i++) {
		struct sm_label x = v[i];
		uint32_t j = i;

		while (j > 0 && strcmp(v[j - 1].name, x.name) > 0) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

const char *
sm_labels_get(const struct sm_label *v, uint32_t n, const char *name)
{
	for (uint32_t i = 0; i < n; i++) {
		if (strcmp(v[i].name, name) == 0)
			return (v[i].value);
	}
	return (NULL);
}

uint64_t
sm_labels_fingerprint(const struct sm_label *v, uint32_t n)
{
	XXH3_state_t st;
	static const unsigned char sep = 0xff;

	XXH3_64bits_reset(&st);
	for (uint32_t i = 0; i < n; i++) {
		XXH3_64bits_update(&st, v[i].name, strlen(v[i].name));
		XXH3_64bits_update(&st, &sep, 1);
		XXH3_64bits_update(&st, v[i].value, strlen(v[i].value));
		XXH3_64bits_update(&st, &sep, 1);
	}
	return (XXH3_64bits_digest(&st));
}

/*
 * Eight bytes at a time while they are ASCII (frame names and label
 * values nearly always are): the pprof decoder checks every string of
 * every profile, and byte by byte this was 3-4% of ingest CPU (B1).
 */
bool
sm_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k;
	uint64_t w;

	while (i < n) {
		while (i + 8 <= n) {
			memcpy(&w, p + i, 8);
			if ((w & UINT64_C(0x8080808080808080)) != 0)
				break;
			i += 8;
		}
		if (i >= n)
			break;
		if ((k = sm_utf8_seq_len(p + i, n - i)) == 0)
			return (false);
		i += k;
	}
	return (true);
}

size_t
sm_utf8_repair(const char *s, size_t n, char *out)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, o = 0, k;

	while (i < n) {
		if ((k = sm_utf8_seq_len(p + i, n - i)) != 0) {
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
			continue;
		}
		out[o++] = (char)0xEF;   /* U+FFFD */
		out[o++] = (char)0xBF;
		out[o++] = (char)0xBD;
		i++;
	}
	return (o);
}

bool
sm_metric_name_valid(const char *s, size_t n)
{
	if (n == 0)
		return (false);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');

		if (!ok)
			return (false);
	}
	return (true);
}

/* Go's strconv.Quote for the value, close enough for messages and logs:
 * escapes " \ and control bytes; keeps valid UTF-8 as is. */
static void
label_quote(struct sm_buf *out, const char *s)
{
	sm_buf_putc(out, '"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (sm_buf_put_escape(out, *p))
			continue;
		if (*p < 0x20 || *p == 0x7f)
			sm_buf_printf(out, "\\x%02x", *p);
		else
			sm_buf_putc(out, (char)*p);
	}
	sm_buf_putc(out, '"');
}

void
sm_labels_format(const struct sm_label *v, uint32_t n, struct sm_buf *out)
{
	sm_buf_putc(out, '{');
	for (uint32_t i = 0; i < n; i++) {
		if (i > 0)
			sm_buf_puts(out, ", ");
		sm_buf_puts(out, v[i].name);
		sm_buf_putc(out, '=');
		label_quote(out, v[i].value);
	}
	sm_buf_putc(out, '}');
}

/* Format the set into a bounded stack buffer for an error message. */
static const char *
labels_str(const struct sm_label *v, uint32_t n, char *dst, size_t dstn)
{
	struct sm_buf b = SM_BUF_INIT;

	b.limit = dstn - 1;
	sm_labels_format(v, n, &b);
	if (b.err != 0 || b.b == NULL) {
		snprintf(dst, dstn, "{...}");
	} else {
		memcpy(dst, b.b, b.len + 1);
	}
	sm_buf_fini(&b);
	return (dst);
}

int
sm_labels_validate(const struct sm_label *v, uint32_t n,
    const struct sm_label_limits *lim, const char **reason,
    struct sm_err *err)
{
	char ls[256];
	const char *metric = NULL, *service = NULL;

	if (reason != NULL)
		*reason = "invalid_labels";
	if (n == 0) {
		if (reason != NULL)
			*reason = "missing_labels";
		return (sm_err_set(err, SM_EINVAL, "error at least one label "
		    "pair is required per profile"));
	}
	if (lim->max_names != 0 && n > lim->max_names) {
		if (reason != NULL)
			*reason = "max_label_names_per_series";
		return (sm_err_set(err, SM_EINVAL, "profile series '%s' has %u "
		    "label names; limit %u", labels_str(v, n, ls, sizeof(ls)),
		    n, lim->max_names));
	}
	for (uint32_t i = 0; i < n; i++) {
		size_t nl = strlen(v[i].name), vl = strlen(v[i].value);

		if (lim->max_name_length != 0 && nl > lim->max_name_length) {
			if (reason != NULL)
				*reason = "label_name_too_long";
			return (sm_err_set(err, SM_EINVAL, "profile with labels "
			    "'%s' has label name too long: '%.64s...'",
			    labels_str(v, n, ls, sizeof(ls)), v[i].name));
		}
		if (lim->max_value_length != 0 && vl > lim->max_value_length) {
			if (reason != NULL)
				*reason = "label_value_too_long";
			return (sm_err_set(err, SM_EINVAL, "profile with labels "
			    "'%s' has label value too long: '%.64s...'",
			    labels_str(v, n, ls, sizeof(ls)), v[i].value));
		}
		if (nl == 0 || !sm_utf8_valid(v[i].name, nl))
			return (sm_err_set(err, SM_EINVAL, "invalid labels '%s' "
			    "with error: invalid label name '%s'",
			    labels_str(v, n, ls, sizeof(ls)), v[i].name));
		if (!sm_utf8_valid(v[i].value, vl))
			return (sm_err_set(err, SM_EINVAL, "invalid labels '%s' "
			    "with error: invalid label value for '%s'",
			    labels_str(v, n, ls, sizeof(ls)), v[i].name));
		if (i > 0 && strcmp(v[i - 1].name, v[i].name) == 0) {
			if (reason != NULL)
				*reason = "duplicate_label_names";
			return (sm_err_set(err, SM_EINVAL, "profile with labels "
			    "'%s' has duplicate label name: '%s'",
			    labels_str(v, n, ls, sizeof(ls)), v[i].name));
		}
		if (strcmp(v[i].name, SM_LABEL_NAME) == 0)
			metric = v[i].value;
		else if (strcmp(v[i].name, SM_LABEL_SERVICE_NAME) == 0)
			service = v[i].value;
	}
	if (metric == NULL || !sm_metric_name_valid(metric, strlen(metric)))
		return (sm_err_set(err, SM_EINVAL, "invalid labels '%s' with "
		    "error: invalid metric name '%s'",
		    labels_str(v, n, ls, sizeof(ls)),
		    metric != NULL ? metric : ""));
	if (service == NULL || service[0] == '\0')
		return (sm_err_set(err, SM_EINVAL, "invalid labels '%s' with "
		    "error: service name is required",
		    labels_str(v, n, ls, sizeof(ls))));
	return (0);
}
