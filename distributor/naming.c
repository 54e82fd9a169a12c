/*
 * naming.c -- the /ingest `name` parameter and the series labels it
 * produces; see naming.h for the rules.
 *
 * The parser follows Pyroscope's labelset state machine (api/model/
 * labelset) byte for byte where it matters to clients: the app name ends
 * at the first '{'; a key runs to '=' (so "a,b=1" is the key "a,b", an
 * error); a value runs to ',' or '}'; both are trimmed; text after the
 * closing '}' is ignored, and so is a trailing key with no '=' ("a{b}").
 * Where Pyroscope was accidental, Smolder decides, and says so here:
 *
 *   - `__name__` as a tag key is an error ("label name is reserved:
 *     __name__"); Pyroscope silently replaced the app name with it.
 *   - A repeated key: the last value wins, at the position of the first
 *     occurrence (Pyroscope stores tags in a map, so last wins there too).
 *   - An empty value removes the tag: in the label model an empty value
 *     and a missing label are the same thing, and storing "" would make
 *     two series that no selector can tell apart.
 *   - A name that ends inside a value ("app{env=prod") keeps that tag;
 *     Pyroscope lost it.
 *   - Tags whose key starts with "__" are dropped here, at parse time
 *     (except __session_id__), after the reserved-name check.
 *
 * Label sets are built unsorted (callers sort before validating) and
 * without duplicates: a tag named service_name, app_name or pyroscope_spy
 * wins over the value Smolder would derive, as "series labels win on
 * conflict" elsewhere in the spec.
 *
 * Ownership: every string and array is allocated in the caller's arena;
 * dist_key results point into the arena and into nothing else.
 */
#include "distributor/naming.h"

#include <string.h>

#define NAMING_MAX_EXTRA 10  /* labels dist_key_legacy adds beyond tags */

static bool
is_space(char c)
{
	return (c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
	    c == '\v' || c == '\f');
}

static void
trim(const char **b, const char **e)
{
	while (*b < *e && is_space(**b))
		(*b)++;
	while (*e > *b && is_space((*e)[-1]))
		(*e)--;
}

static bool
key_char(unsigned char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_' || c == '.');
}

static bool
app_char(unsigned char c)
{
	return (key_char(c) || c == '-' || c == '/');
}

/*
 * Describe the character at s (n bytes left) as Go's %q of a rune would,
 * roughly: 'c' for printable ASCII and whole UTF-8 sequences, '\xNN'
 * otherwise.
 */
static const char *
rune_desc(const char *s, size_t n, char *buf, size_t bufn)
{
	unsigned char c = (unsigned char)s[0];
	size_t len = 1;

	if (c >= 0x20 && c < 0x7f) {
		snprintf(buf, bufn, "'%c'", c);
		return (buf);
	}
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		len = 3;
	else if (c >= 0xF0 && c <= 0xF4)
		len = 4;
	if (len > 1 && len <= n && sm_utf8_valid(s, len))
		snprintf(buf, bufn, "'%.*s'", (int)len, s);
	else
		snprintf(buf, bufn, "'\\x%02x'", c);
	return (buf);
}

/* A service or label name (`what`), non-empty and of `ok` characters. */
static int
check_chars(const char *b, const char *e, const char *what,
    bool (*ok)(unsigned char), struct sm_err *err)
{
	char desc[16];

	if (b == e)
		return (sm_err_set(err, SM_EINVAL, "%s is required", what));
	for (const char *p = b; p < e; p++) {
		if (!ok((unsigned char)*p))
			return (sm_err_set(err, SM_EINVAL, "invalid %s: "
			    "%.*s: character is not allowed: %s", what,
			    (int)SM_MIN(e - b, 256), b,
			    rune_desc(p, (size_t)(e - p), desc, sizeof(desc))));
	}
	return (0);
}

static int
check_key(const char *b, const char *e, struct sm_err *err)
{
	int rv;

	if ((rv = check_chars(b, e, "label name", key_char, err)) != 0)
		return (rv);
	if ((size_t)(e - b) == strlen(SM_LABEL_NAME) &&
	    memcmp(b, SM_LABEL_NAME, (size_t)(e - b)) == 0)
		return (sm_err_set(err, SM_EINVAL, "label name is reserved: "
		    SM_LABEL_NAME));
	return (0);
}

/* Record one key=value (already trimmed and checked): last wins, empty
 * removes, "__" keys other than __session_id__ are dropped. */
static int
key_put(struct dist_key *k, const char *kb, const char *ke, const char *vb,
    const char *ve, struct sm_arena *a)
{
	size_t kn = (size_t)(ke - kb);
	uint32_t i;

	if (kn >= 2 && kb[0] == '_' && kb[1] == '_' &&
	    !(kn == strlen(SM_LABEL_SESSION_ID) &&
	    memcmp(kb, SM_LABEL_SESSION_ID, kn) == 0))
		return (0);
	for (i = 0; i < k->ntags; i++) {
		if (strlen(k->tags[i].name) == kn &&
		    memcmp(k->tags[i].name, kb, kn) == 0)
			break;
	}
	if (vb == ve) {
		if (i < k->ntags) {
			memmove(&k->tags[i], &k->tags[i + 1],
			    (k->ntags - i - 1) * sizeof(k->tags[0]));
			k->ntags--;
		}
		return (0);
	}
	if (i == k->ntags) {
		if ((k->tags[i].name = sm_arena_strndup(a, kb, kn)) == NULL)
			return (SM_ENOMEM);
		k->ntags++;
	}
	if ((k->tags[i].value = sm_arena_strndup(a, vb,
	    (size_t)(ve - vb))) == NULL)
		return (SM_ENOMEM);
	return (0);
}

int
dist_key_parse(const char *name, struct sm_arena *a, struct dist_key *out,
    struct sm_err *err)
{
	struct dist_key k = { NULL, NULL, 0 };
	const char *p, *ab, *ae, *kb, *ke, *vb, *ve;
	uint32_t cap = 0;
	int rv;

	ab = name;
	ae = strchr(name, '{');
	if (ae == NULL)
		ae = name + strlen(name);
	p = ae;
	trim(&ab, &ae);
	if ((rv = check_chars(ab, ae, "service name", app_char,
	    err)) != 0)
		goto out;
	if ((k.app = sm_arena_strndup(a, ab, (size_t)(ae - ab))) == NULL)
		goto nomem;
	if (*p != '{')
		goto done;
	p++;
	/* Every tag has an '=', so that bounds the number of tags. */
	for (const char *q = p; *q != '\0'; q++)
		cap += *q == '=';
	if (cap > 0 && (k.tags = sm_arena_calloc(a, cap,
	    sizeof(*k.tags))) == NULL)
		goto nomem;
	for (;;) {
		kb = p;
		while (*p != '\0' && *p != '=' && *p != '}')
			p++;
		if (*p != '=')
			break;    /* '}', end, or a trailing key without '=' */
		ke = p++;
		vb = p;
		while (*p != '\0' && *p != ',' && *p != '}')
			p++;
		ve = p;
		trim(&kb, &ke);
		trim(&vb, &ve);
		if ((rv = check_key(kb, ke, err)) != 0)
			goto out;
		if ((rv = key_put(&k, kb, ke, vb, ve, a)) != 0)
			goto nomem;
		if (*p != ',')
			break;
		p++;
	}
done:
	*out = k;
	return (0);
nomem:
	rv = sm_err_set(err, SM_ENOMEM, "out of memory");
out:
	memset(out, 0, sizeof(*out));
	return (rv);
}

static const char *
key_tag(const struct dist_key *k, const char *name)
{
	return (sm_labels_get(k->tags, k->ntags, name));
}

bool
dist_key_has_profile_id(const struct dist_key *k)
{
	const char *v = key_tag(k, "profile_id");

	return (v != NULL && v[0] != '\0');
}

static void
add(struct sm_label *v, uint32_t *n, const char *name, const char *value)
{
	v[*n].name = name;
	v[*n].value = value;
	(*n)++;
}

/*
 * service_name (unless a tag sets it), __service_name__, pyroscope_spy
 * (unless a tag sets it) and the tags, into v; returns the count.
 * `app` is what service_name defaults to.
 */
static uint32_t
base_labels(const struct dist_key *k, const char *app, const char *spy,
    struct sm_label *v)
{
	const char *svc = key_tag(k, SM_LABEL_SERVICE_NAME);
	uint32_t n = 0;

	if (svc == NULL) {
		svc = app;
		add(v, &n, SM_LABEL_SERVICE_NAME, svc);
	}
	add(v, &n, SM_LABEL_SERVICE_NAME_COPY, svc);
	if (spy != NULL && spy[0] != '\0' && key_tag(k, SM_LABEL_SPY) == NULL)
		add(v, &n, SM_LABEL_SPY, spy);
	for (uint32_t i = 0; i < k->ntags; i++)
		add(v, &n, k->tags[i].name, k->tags[i].value);
	return (n);
}

int
dist_key_pprof_labels(const struct dist_key *k, const char *spy_name,
    struct sm_arena *a, struct sm_label **out, uint32_t *n)
{
	struct sm_label *v;

	*out = NULL;
	*n = 0;
	if ((v = sm_arena_calloc(a, (size_t)k->ntags + 3, sizeof(*v))) == NULL)
		return (SM_ENOMEM);
	*n = base_labels(k, k->app, spy_name, v);
	*out = v;
	return (0);
}

int
dist_key_legacy(const struct dist_key *k, uint32_t sample_rate,
    const char *spy_name, struct sm_arena *a, struct dist_legacy *out,
    struct sm_err *err)
{
	const struct sm_legacy_type *lt;
	const char *dot, *suffix = "cpu", *app;
	char id[5 * SM_PTYPE_PART_MAX];
	struct sm_label *v;
	uint32_t n;
	int64_t period;
	size_t applen;
	int rv;

	memset(out, 0, sizeof(*out));
	dot = strrchr(k->app, '.');
	applen = strlen(k->app);
	if (dot != NULL) {
		suffix = dot + 1;
		applen = (size_t)(dot - k->app);
	}
	if ((lt = sm_legacy_type_lookup(suffix, strlen(suffix))) == NULL)
		return (sm_err_set(err, SM_EINVAL, "unknown profile type: %.200s",
		    suffix));
	if (applen == 0 && key_tag(k, SM_LABEL_SERVICE_NAME) == NULL)
		return (sm_err_set(err, SM_EINVAL, "service name is required"));
	sm_legacy_type_resolve(lt, sample_rate, &out->type, &period);
	rv = sm_ptype_format(&out->type, id, sizeof(id));
	SM_ASSERT(rv == 0);

	v = sm_arena_calloc(a, (size_t)k->ntags + NAMING_MAX_EXTRA,
	    sizeof(*v));
	if (v == NULL || (app = sm_arena_strndup(a, k->app, applen)) == NULL)
		goto nomem;
	n = 0;
	if ((v[n].value = sm_arena_strndup(a, out->type.name,
	    strlen(out->type.name))) == NULL)
		goto nomem;
	v[n++].name = SM_LABEL_NAME;
	n += base_labels(k, app, spy_name, v + n);
	/* With a service_name tag, the app name is kept as app_name. */
	if (key_tag(k, SM_LABEL_SERVICE_NAME) != NULL &&
	    key_tag(k, "app_name") == NULL && app[0] != '\0')
		add(v, &n, "app_name", app);
	{
		const struct {
			const char *name, *value;
		} tl[] = {
			{ SM_LABEL_TYPE, out->type.sample_type },
			{ SM_LABEL_UNIT, out->type.sample_unit },
			{ SM_LABEL_PERIOD_TYPE, out->type.period_type },
			{ SM_LABEL_PERIOD_UNIT, out->type.period_unit },
			{ SM_LABEL_PROFILE_TYPE, id },
		};

		for (size_t i = 0; i < SM_ARRAY_LEN(tl); i++) {
			char *s;

			/* Empty period parts mean "no such label". */
			if (tl[i].value[0] == '\0')
				continue;
			s = sm_arena_strndup(a, tl[i].value,
			    strlen(tl[i].value));
			if (s == NULL)
				goto nomem;
			add(v, &n, tl[i].name, s);
		}
	}
	SM_ASSERT(n <= k->ntags + NAMING_MAX_EXTRA);
	out->labels = v;
	out->nlabels = n;
	out->scale = period != 0 ? period : 1;
	return (0);
nomem:
	memset(out, 0, sizeof(*out));
	return (sm_err_set(err, SM_ENOMEM, "out of memory"));
}
