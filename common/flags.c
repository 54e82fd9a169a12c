/*
 * flags.c -- see flags.h.
 */
#include "flags.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

void
sm_flags_init(struct sm_flags *fs)
{
	memset(fs, 0, sizeof(*fs));
}

void
sm_flags_fini(struct sm_flags *fs)
{
	for (uint32_t i = 0; i < fs->nowned; i++)
		sm_free(fs->owned[i]);
	sm_free(fs->owned);
	sm_free(fs->v);
	sm_free(fs->set);
	memset(fs, 0, sizeof(*fs));
}

/* The decimal number s starts with into *v, *end past it: SM_EINVAL
 * when s is NULL or empty, has no digits or overflows. */
static int
parse_ll(const char *s, long long *v, char **end)
{
	if (s == NULL || *s == '\0')
		return (SM_EINVAL);
	errno = 0;
	*v = strtoll(s, end, 10);
	return (errno != 0 || *end == s ? SM_EINVAL : 0);
}

int
sm_parse_int(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (parse_ll(s, &v, &end) != 0 || *end != '\0')
		return (SM_EINVAL);
	*out = v;
	return (0);
}

int
sm_parse_bool(const char *s, bool *out)
{
	static const char *const t[] = { "1", "t", "T", "true", "TRUE",
		"True" };
	static const char *const f[] = { "0", "f", "F", "false", "FALSE",
		"False" };

	for (size_t i = 0; i < SM_ARRAY_LEN(t); i++) {
		if (strcmp(s, t[i]) == 0) {
			*out = true;
			return (0);
		}
		if (strcmp(s, f[i]) == 0) {
			*out = false;
			return (0);
		}
	}
	return (SM_EINVAL);
}

int
sm_parse_duration_ms(const char *s, int64_t *out)
{
	static const struct {
		const char *u;
		double ms;
	} units[] = {
		{ "ns", 1e-6 }, { "us", 1e-3 }, { "µs", 1e-3 },
		{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
		{ "d", 86400000 }, { "w", 604800000 }, { "y", 31536000000.0 },
	};
	double total = 0;
	const char *p = s;
	int64_t iv;

	if (s == NULL || *s == '\0')
		return (SM_EINVAL);
	if (sm_parse_int(s, &iv) == 0) {
		/* A bare number is seconds; "0" is zero. */
		if (iv < 0 || iv > INT64_MAX / 1000)
			return (SM_EINVAL);
		*out = iv * 1000;
		return (0);
	}
	while (*p != '\0') {
		char *end;
		double v;
		size_t best = 0, bi = 0;

		if (!isdigit((unsigned char)*p) && *p != '.')
			return (SM_EINVAL);
		errno = 0;
		v = strtod(p, &end);
		if (errno != 0 || end == p || v < 0)
			return (SM_EINVAL);
		p = end;
		for (size_t i = 0; i < SM_ARRAY_LEN(units); i++) {
			size_t l = strlen(units[i].u);

			if (strncmp(p, units[i].u, l) == 0 && l > best) {
				best = l;
				bi = i;
			}
		}
		if (best == 0)
			return (SM_EINVAL);
		total += v * units[bi].ms;
		p += best;
	}
	if (total > 9.2e18)
		return (SM_EINVAL);
	/* Whole milliseconds, what is below one dropped; the nudge keeps a
	 * decimal such as 1.001s (1000.9999... in binary) at 1001. */
	*out = (int64_t)(total + 1e-6);
	return (0);
}

int
sm_parse_bytes(const char *s, int64_t *out)
{
	static const struct {
		const char *u;
		int64_t mul;
	} units[] = {
		{ "B", 1 }, { "KB", 1000 }, { "MB", 1000000 },
		{ "GB", 1000000000 }, { "KiB", 1024 }, { "MiB", 1 << 20 },
		{ "GiB", 1 << 30 }, { "K", 1024 }, { "M", 1 << 20 },
		{ "G", 1 << 30 },
	};
	char *end;
	long long v;

	if (parse_ll(s, &v, &end) != 0 || v < 0)
		return (SM_EINVAL);
	if (*end == '\0') {
		*out = v;
		return (0);
	}
	for (size_t i = 0; i < SM_ARRAY_LEN(units); i++) {
		if (strcmp(end, units[i].u) == 0) {
			if (v > INT64_MAX / units[i].mul)
				return (SM_EINVAL);
			*out = v * units[i].mul;
			return (0);
		}
	}
	return (SM_EINVAL);
}

static int
flag_owned(struct sm_flags *fs, char *p)
{
	if (SM_GROW(fs->owned, fs->owned_cap, fs->nowned + 1, 16) != 0)
		return (SM_ENOMEM);
	fs->owned[fs->nowned++] = p;
	return (0);
}

/* The parsers of the flag types stored as an int64_t. */
static int (*const parse_i64[])(const char *, int64_t *) = {
	[SM_FLAG_INT] = sm_parse_int,
	[SM_FLAG_DURATION] = sm_parse_duration_ms,
	[SM_FLAG_BYTES] = sm_parse_bytes,
};

static int
flag_set(struct sm_flags *fs, const struct sm_flag_ent *e, const char *val)
{
	const struct sm_flag *f = e->f;
	int64_t iv;
	bool bv;
	char *sv;
	int rv;

	switch (f->type) {
	case SM_FLAG_STRING:
		if ((sv = sm_strdup(val)) == NULL)
			return (SM_ENOMEM);
		if ((rv = flag_owned(fs, sv)) != 0) {
			sm_free(sv);
			return (rv);
		}
		*(char **)e->ptr = sv;
		return (0);
	case SM_FLAG_BOOL:
		if ((rv = sm_parse_bool(val, &bv)) != 0)
			return (rv);
		*(bool *)e->ptr = bv;
		return (0);
	case SM_FLAG_INT:
	case SM_FLAG_DURATION:
	case SM_FLAG_BYTES:
		if ((rv = parse_i64[f->type](val, &iv)) != 0)
			return (rv);
		*(int64_t *)e->ptr = iv;
		return (0);
	}
	return (SM_EINVAL);
}

static int
flag_find(const struct sm_flags *fs, const char *name, size_t n)
{
	for (uint32_t i = 0; i < fs->n; i++) {
		if (strlen(fs->v[i].f->name) == n &&
		    strncmp(fs->v[i].f->name, name, n) == 0)
			return ((int)i);
	}
	return (-1);
}

int
sm_flags_add(struct sm_flags *fs, const struct sm_flag *tab, size_t n,
    void *base, struct sm_err *err)
{
	for (size_t i = 0; i < n; i++) {
		const struct sm_flag *f = &tab[i];

		if (flag_find(fs, f->name, strlen(f->name)) >= 0)
			return (sm_err_set(err, SM_EEXIST,
			    "flag redefined: %s", f->name));
		if (fs->n == fs->cap) {
			uint32_t ncap = fs->cap ? fs->cap * 2 : 64;
			struct sm_flag_ent *nv = sm_reallocarray(fs->v, ncap,
			    sizeof(*nv));
			bool *ns;

			if (nv == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			fs->v = nv;
			ns = sm_reallocarray(fs->set, ncap, sizeof(*ns));
			if (ns == NULL)
				return (sm_err_set(err, SM_ENOMEM, "oom"));
			fs->set = ns;
			fs->cap = ncap;
		}
		fs->set[fs->n] = false;
		fs->v[fs->n].f = f;
		fs->v[fs->n].ptr = (char *)base + f->off;
		if (flag_set(fs, &fs->v[fs->n++], f->def) != 0)
			return (sm_err_set(err, SM_EINVAL,
			    "bad default %s for flag -%s", f->def, f->name));
	}
	return (0);
}

int
sm_flags_parse(struct sm_flags *fs, int argc, char **argv, bool *help,
    struct sm_err *err)
{
	*help = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq, *val;
		size_t nl;
		int k;

		if (a[0] != '-' || a[1] == '\0')
			return (sm_err_set(err, SM_EINVAL,
			    "unexpected argument: %s", a));
		a++;
		if (a[0] == '-')
			a++;
		if (strcmp(a, "help") == 0 || strcmp(a, "h") == 0) {
			*help = true;
			continue;
		}
		eq = strchr(a, '=');
		nl = eq != NULL ? (size_t)(eq - a) : strlen(a);
		if ((k = flag_find(fs, a, nl)) < 0)
			return (sm_err_set(err, SM_EINVAL,
			    "flag provided but not defined: -%.*s", (int)nl, a));
		if (eq != NULL) {
			val = eq + 1;
		} else if (fs->v[k].f->type == SM_FLAG_BOOL) {
			val = "true";
		} else if (i + 1 < argc) {
			val = argv[++i];
		} else {
			return (sm_err_set(err, SM_EINVAL,
			    "flag needs an argument: -%s", fs->v[k].f->name));
		}
		if (flag_set(fs, &fs->v[k], val) != 0)
			return (sm_err_set(err, SM_EINVAL,
			    "invalid value \"%s\" for flag -%s", val,
			    fs->v[k].f->name));
		fs->set[k] = true;
	}
	return (0);
}

bool
sm_flags_was_set(const struct sm_flags *fs, const char *name)
{
	int k = flag_find(fs, name, strlen(name));

	return (k >= 0 && fs->set[k]);
}

static int
flag_cmp(const void *a, const void *b)
{
	const struct sm_flag *x = *(const struct sm_flag *const *)a;
	const struct sm_flag *y = *(const struct sm_flag *const *)b;

	return (strcmp(x->name, y->name));
}

void
sm_flags_usage(const struct sm_flags *fs, FILE *out)
{
	static const char *const tn[] = { "string", "int", "", "duration",
		"bytes" };
	const struct sm_flag **v = sm_malloc((size_t)SM_MAX(fs->n, 1) *
	    sizeof(*v));

	if (v == NULL)
		return;
	for (uint32_t i = 0; i < fs->n; i++)
		v[i] = fs->v[i].f;
	qsort(v, fs->n, sizeof(*v), flag_cmp);
	for (uint32_t i = 0; i < fs->n; i++) {
		const struct sm_flag *f = v[i];

		fprintf(out, "  -%s %s\n    \t%s", f->name, tn[f->type],
		    f->help);
		if (f->type == SM_FLAG_STRING)
			fprintf(out, " (default \"%s\")\n", f->def);
		else
			fprintf(out, " (default %s)\n", f->def);
	}
	sm_free(v);
}

const struct sm_flag_ent *
sm_flags_find(const struct sm_flags *fs, const char *name)
{
	for (uint32_t i = 0; i < fs->n; i++)
		if (strcmp(fs->v[i].f->name, name) == 0)
			return (&fs->v[i]);
	return (NULL);
}

int
sm_format_duration_ms(int64_t ms, char *buf, size_t n)
{
	uint64_t u = ms < 0 ? (uint64_t)0 - (uint64_t)ms : (uint64_t)ms;
	const char *sign = ms < 0 ? "-" : "";
	uint64_t h = u / 3600000, m = u / 60000 % 60, s = u / 1000 % 60,
	    frac = u % 1000;
	char sec[32];
	int k;

	if (u == 0)
		return (snprintf(buf, n, "0s"));
	if (u < 1000)
		return (snprintf(buf, n, "%s%llums", sign,
		    (unsigned long long)u));
	/* Seconds with the fraction's trailing zeros dropped, as Go. */
	if (frac == 0)
		(void)snprintf(sec, sizeof(sec), "%llu", (unsigned long long)s);
	else if (frac % 100 == 0)
		(void)snprintf(sec, sizeof(sec), "%llu.%llu",
		    (unsigned long long)s, (unsigned long long)(frac / 100));
	else if (frac % 10 == 0)
		(void)snprintf(sec, sizeof(sec), "%llu.%02llu",
		    (unsigned long long)s, (unsigned long long)(frac / 10));
	else
		(void)snprintf(sec, sizeof(sec), "%llu.%03llu",
		    (unsigned long long)s, (unsigned long long)frac);
	if (h > 0)
		k = snprintf(buf, n, "%s%lluh%llum%ss", sign,
		    (unsigned long long)h, (unsigned long long)m, sec);
	else if (m > 0)
		k = snprintf(buf, n, "%s%llum%ss", sign, (unsigned long long)m,
		    sec);
	else
		k = snprintf(buf, n, "%s%ss", sign, sec);
	return (k);
}

int
sm_flag_text(const struct sm_flag *f, const void *ptr, char *buf, size_t n)
{
	int64_t iv = 0;
	bool bv = false;
	const char *sv = "";
	int k;

	if (ptr == NULL) {
		/* The default, parsed as a value given on the line is. */
		switch (f->type) {
		case SM_FLAG_STRING:
			sv = f->def;
			break;
		case SM_FLAG_INT:
			if (sm_parse_int(f->def, &iv) != 0)
				return (-1);
			break;
		case SM_FLAG_BOOL:
			if (sm_parse_bool(f->def, &bv) != 0)
				return (-1);
			break;
		case SM_FLAG_DURATION:
			if (sm_parse_duration_ms(f->def, &iv) != 0)
				return (-1);
			break;
		case SM_FLAG_BYTES:
			if (sm_parse_bytes(f->def, &iv) != 0)
				return (-1);
			break;
		}
	} else if (f->type == SM_FLAG_STRING) {
		sv = *(char *const *)ptr != NULL ? *(char *const *)ptr : "";
	} else if (f->type == SM_FLAG_BOOL) {
		bv = *(const bool *)ptr;
	} else {
		iv = *(const int64_t *)ptr;
	}
	switch (f->type) {
	case SM_FLAG_STRING: {
		const char *sch = strstr(sv, "://"), *at = NULL, *colon = NULL;

		if (f->secret && sv[0] != '\0') {
			k = snprintf(buf, n, "********");
			break;
		}
		/* A URL's password (scheme://user:password@host) too. */
		if (sch != NULL) {
			size_t hl = strcspn(sch + 3, "/?#");

			at = memchr(sch + 3, '@', hl);
			colon = at != NULL ? memchr(sch + 3, ':',
			    (size_t)(at - (sch + 3))) : NULL;
		}
		if (colon != NULL)
			k = snprintf(buf, n, "%.*s********%s",
			    (int)(colon + 1 - sv), sv, at);
		else
			k = snprintf(buf, n, "%s", sv);
		break;
	}
	case SM_FLAG_BOOL:
		k = snprintf(buf, n, "%s", bv ? "true" : "false");
		break;
	case SM_FLAG_DURATION:
		k = sm_format_duration_ms(iv, buf, n);
		break;
	default:
		k = snprintf(buf, n, "%lld", (long long)iv);
		break;
	}
	if (k < 0)
		return (-1);
	return ((size_t)k >= n ? (int)n - 1 : k);
}
