/*
 * decode_merge.c -- baseline: decode every profile and merge its stacks,
 * one thread, in C: libdeflate gunzip, protobuf-c unpack, then
 * each sample's location-id sequence becomes a sequence of interned
 * function names (inlined frames expanded, innermost first, as `go tool
 * pprof` does; an address-only location becomes "0x<addr>"), which is
 * hashed (XXH3) into one table of stacks whose values are summed per
 * sample type ("type:unit", up to 8 distinct types).  This is what a
 * straightforward "merge the raw profiles at query time" server would do,
 * written tightly: no per-sample malloc, tables reused.  A measuring
 * stick, not product code.  Samples with no locations are dropped, as
 * Pyroscope drops them, so the totals are comparable with Smolder's.
 *
 *   decode_merge [-T type:unit] [-o collapsed.txt] [-l listfile]... [file...]
 *
 * Timing: `seconds` counts gunzip + unpack + merge + free only; reading
 * the files (from the page cache, normally) is excluded, so the baseline is
 * if anything faster than a real one.  `wall` includes the reads.
 * Prints profiles, seconds, wall, stacks, names and total.<type>=<sum> for
 * every type seen; -o writes the merged stacks of -T (default: the first
 * type seen) as collapsed text (root first) for cross-checking.
 */
#include <errno.h>
#include <inttypes.h>
#include <libdeflate.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bench_util.h"
#include "google/v1/profile.pb-c.h"

#define MAX_TYPES 8

/* Open addressing: a nonzero hash per slot (0 = empty) and its id. */
struct slots {
	uint64_t *hash;
	uint32_t *id;
	size_t cap;
};

/* Interned function names: open addressing over (hash, offset, length). */
struct names {
	struct slots t;		/* name hash -> name id */
	size_t n;
	char *chars;		/* all names, NUL-separated */
	size_t nchars, capchars;
	uint32_t *off;		/* name id -> offset in chars */
	size_t capoff;
};

/* Merged stacks: (hash, frames) -> stack id; values[id * MAX_TYPES + t]. */
struct stacks {
	struct slots t;		/* stack hash -> stack id */
	size_t n;
	uint32_t *frames;	/* all stacks' name ids, leaf first */
	size_t nframes, capframes;
	uint32_t *off, *len;	/* stack id -> frames */
	int64_t *values;
	size_t capids;
};

static struct names names;
static struct stacks stacks;
static char type_names[MAX_TYPES][512];
static int ntypes;

static uint64_t
nz(uint64_t h)
{
	return (h ? h : 1);
}

/* Double the slot table (4096 slots at first), re-placing every entry. */
static void
slots_grow(struct slots *t)
{
	size_t ocap = t->cap;
	uint64_t *oh = t->hash;
	uint32_t *oid = t->id;

	t->cap = ocap ? ocap * 2 : 4096;
	t->hash = calloc(t->cap, sizeof(*t->hash));
	t->id = bench_xmalloc(t->cap * sizeof(*t->id));
	if (t->hash == NULL)
		exit(3);
	for (size_t i = 0; i < ocap; i++) {
		size_t j;

		if (oh[i] == 0)
			continue;
		for (j = oh[i] & (t->cap - 1); t->hash[j] != 0;
		    j = (j + 1) & (t->cap - 1))
			;
		t->hash[j] = oh[i];
		t->id[j] = oid[i];
	}
	free(oh);
	free(oid);
}

static uint32_t
name_intern(const char *s, size_t len)
{
	uint64_t h = nz(XXH3_64bits(s, len));
	size_t j;

	if ((names.n + 1) * 2 > names.t.cap)
		slots_grow(&names.t);
	for (j = h & (names.t.cap - 1); names.t.hash[j] != 0;
	    j = (j + 1) & (names.t.cap - 1)) {
		const char *c;

		if (names.t.hash[j] != h)
			continue;
		c = names.chars + names.off[names.t.id[j]];
		if (strncmp(c, s, len) == 0 && c[len] == '\0')
			return (names.t.id[j]);
	}
	if (names.nchars + len + 1 > names.capchars) {
		names.capchars = (names.capchars + len + 1) * 2;
		names.chars = bench_xrealloc(names.chars, names.capchars);
	}
	if (names.n == names.capoff) {
		names.capoff = names.capoff ? names.capoff * 2 : 4096;
		names.off = bench_xrealloc(names.off,
		    names.capoff * sizeof(*names.off));
	}
	memcpy(names.chars + names.nchars, s, len);
	names.chars[names.nchars + len] = '\0';
	names.off[names.n] = (uint32_t)names.nchars;
	names.nchars += len + 1;
	names.t.hash[j] = h;
	names.t.id[j] = (uint32_t)names.n;
	return ((uint32_t)names.n++);
}

/* The stack id of frames[0..len) (name ids, leaf first), added if new. */
static uint32_t
stack_intern(const uint32_t *fr, size_t len)
{
	uint64_t h = nz(XXH3_64bits(fr, len * sizeof(*fr)));
	size_t j;
	uint32_t id;

	if ((stacks.n + 1) * 2 > stacks.t.cap)
		slots_grow(&stacks.t);
	for (j = h & (stacks.t.cap - 1); stacks.t.hash[j] != 0;
	    j = (j + 1) & (stacks.t.cap - 1)) {
		id = stacks.t.id[j];
		if (stacks.t.hash[j] == h && stacks.len[id] == len &&
		    memcmp(stacks.frames + stacks.off[id], fr,
		    len * sizeof(*fr)) == 0)
			return (id);
	}
	if (stacks.nframes + len > stacks.capframes) {
		stacks.capframes = (stacks.capframes + len) * 2;
		stacks.frames = bench_xrealloc(stacks.frames,
		    stacks.capframes * sizeof(*stacks.frames));
	}
	if (stacks.n == stacks.capids) {
		stacks.capids = stacks.capids ? stacks.capids * 2 : 4096;
		stacks.off = bench_xrealloc(stacks.off,
		    stacks.capids * sizeof(*stacks.off));
		stacks.len = bench_xrealloc(stacks.len,
		    stacks.capids * sizeof(*stacks.len));
		stacks.values = bench_xrealloc(stacks.values,
		    stacks.capids * MAX_TYPES * sizeof(*stacks.values));
	}
	id = (uint32_t)stacks.n++;
	memcpy(stacks.frames + stacks.nframes, fr, len * sizeof(*fr));
	stacks.off[id] = (uint32_t)stacks.nframes;
	stacks.len[id] = (uint32_t)len;
	memset(stacks.values + (size_t)id * MAX_TYPES, 0,
	    MAX_TYPES * sizeof(*stacks.values));
	stacks.nframes += len;
	stacks.t.hash[j] = h;
	stacks.t.id[j] = id;
	return (id);
}

static int
type_index(const char *t)
{
	for (int i = 0; i < ntypes; i++)
		if (strcmp(type_names[i], t) == 0)
			return (i);
	if (ntypes == MAX_TYPES)
		return (-1);
	snprintf(type_names[ntypes], sizeof(type_names[0]), "%s", t);
	return (ntypes++);
}

static const char *
str_at(const Google__V1__Profile *p, int64_t i)
{
	if (i < 0 || (uint64_t)i >= p->n_string_table)
		return ("");
	return (p->string_table[i]);
}

/* Per-profile scratch, reused. */
static struct bench_map fnmap, locmap;
static uint32_t *locframes, *scratch;
static size_t caplocframes, capscratch;
static uint32_t *loc_off, *loc_len;
static size_t caploc;

static int
merge_profile(const Google__V1__Profile *p)
{
	int tmap[64];
	size_t nlf = 0;

	if (p->n_sample_type > 64)
		return (-1);
	for (size_t i = 0; i < p->n_sample_type; i++) {
		char tu[512];

		snprintf(tu, sizeof(tu), "%s:%s",
		    str_at(p, p->sample_type[i]->type),
		    str_at(p, p->sample_type[i]->unit));
		tmap[i] = type_index(tu);
	}
	bench_map_clear(&fnmap);
	for (size_t i = 0; i < p->n_function; i++) {
		const char *n = str_at(p, p->function[i]->name);

		bench_map_put(&fnmap, p->function[i]->id,
		    name_intern(n, strlen(n)));
	}
	bench_map_clear(&locmap);
	if (p->n_location > caploc) {
		caploc = p->n_location * 2;
		loc_off = bench_xrealloc(loc_off, caploc * sizeof(*loc_off));
		loc_len = bench_xrealloc(loc_len, caploc * sizeof(*loc_len));
	}
	for (size_t i = 0; i < p->n_location; i++) {
		const Google__V1__Location *l = p->location[i];
		size_t need = l->n_line ? l->n_line : 1;

		if (nlf + need > caplocframes) {
			caplocframes = (nlf + need) * 2;
			locframes = bench_xrealloc(locframes,
			    caplocframes * sizeof(*locframes));
		}
		loc_off[i] = (uint32_t)nlf;
		if (l->n_line == 0) {
			char a[32];
			int n = snprintf(a, sizeof(a), "0x%" PRIx64,
			    l->address);

			locframes[nlf++] = name_intern(a, (size_t)n);
		}
		for (size_t k = 0; k < l->n_line; k++) {
			uint32_t nm;

			if (!bench_map_get(&fnmap, l->line[k]->function_id,
			    &nm))
				nm = name_intern("?", 1);
			locframes[nlf++] = nm;
		}
		loc_len[i] = (uint32_t)(nlf - loc_off[i]);
		bench_map_put(&locmap, l->id, (uint32_t)i);
	}
	for (size_t i = 0; i < p->n_sample; i++) {
		const Google__V1__Sample *s = p->sample[i];
		size_t len = 0;
		uint32_t id;

		/* As Pyroscope (and Smolder) do: a sample with no stack is
		 * dropped (Go CPU profiles carry a few). */
		if (s->n_location_id == 0)
			continue;
		for (size_t k = 0; k < s->n_location_id; k++) {
			uint32_t li;

			if (!bench_map_get(&locmap, s->location_id[k], &li))
				continue;
			if (len + loc_len[li] > capscratch) {
				capscratch = (len + loc_len[li]) * 2;
				scratch = bench_xrealloc(scratch,
				    capscratch * sizeof(*scratch));
			}
			memcpy(scratch + len, locframes + loc_off[li],
			    loc_len[li] * sizeof(*scratch));
			len += loc_len[li];
		}
		id = stack_intern(scratch, len);
		for (size_t v = 0; v < s->n_value && v < p->n_sample_type;
		    v++)
			if (tmap[v] >= 0)
				stacks.values[(size_t)id * MAX_TYPES +
				    (size_t)tmap[v]] += s->value[v];
	}
	return (0);
}

static int
write_collapsed(const char *path, int t)
{
	FILE *f = fopen(path, "w");

	if (f == NULL)
		return (-1);
	for (size_t id = 0; id < stacks.n; id++) {
		int64_t v = stacks.values[id * MAX_TYPES + (size_t)t];

		if (v == 0)
			continue;
		for (size_t k = stacks.len[id]; k-- > 0;)
			fprintf(f, "%s%s", names.chars +
			    names.off[stacks.frames[stacks.off[id] + k]],
			    k ? ";" : "");
		fprintf(f, " %" PRId64 "\n", v);
	}
	return (fclose(f));
}

int
main(int argc, char **argv)
{
	struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
	const char *want_type = NULL, *collapsed = NULL;
	char **paths = NULL;
	size_t npaths = 0, cap = 0, outcap = 0, profiles = 0, bytes = 0;
	unsigned char *buf = NULL, *out = NULL;
	double secs = 0, t0 = bench_now_s();
	int i;

	for (i = 1; i < argc && argv[i][0] == '-'; i += 2) {
		if (i + 1 >= argc)
			return (2);
		if (strcmp(argv[i], "-T") == 0) {
			want_type = argv[i + 1];
		} else if (strcmp(argv[i], "-o") == 0) {
			collapsed = argv[i + 1];
		} else if (strcmp(argv[i], "-l") == 0) {
			if (bench_read_list(argv[i + 1], &paths, &npaths) != 0)
				return (1);
		} else {
			fprintf(stderr, "usage: decode_merge [-T type:unit] "
			    "[-o collapsed] [-l list]... [file...]\n");
			return (2);
		}
	}
	for (; i < argc; i++) {
		paths = bench_xrealloc(paths, (npaths + 1) * sizeof(*paths));
		paths[npaths++] = argv[i];
	}
	if (npaths == 0 || d == NULL)
		return (2);
	for (size_t k = 0; k < npaths; k++) {
		long n = bench_read_file(paths[k], &buf, &cap);
		const unsigned char *raw = buf;
		size_t rawlen;
		Google__V1__Profile *p;
		double ts;

		if (n < 0) {
			fprintf(stderr, "cannot read %s: %s\n", paths[k],
			    strerror(errno));
			return (1);
		}
		rawlen = (size_t)n;
		ts = bench_now_s();
		if (bench_is_gzip(buf, (size_t)n)) {
			size_t need = bench_gzip_isize(buf, (size_t)n) + 1;

			if (need > outcap) {
				outcap = need * 2;
				out = bench_xrealloc(out, outcap);
			}
			if (libdeflate_gzip_decompress(d, buf, (size_t)n, out,
			    outcap, &rawlen) != LIBDEFLATE_SUCCESS) {
				fprintf(stderr, "gunzip failed: %s\n", paths[k]);
				return (1);
			}
			raw = out;
		}
		p = google__v1__profile__unpack(NULL, rawlen, raw);
		if (p == NULL || merge_profile(p) != 0) {
			fprintf(stderr, "bad profile: %s\n", paths[k]);
			return (1);
		}
		google__v1__profile__free_unpacked(p, NULL);
		secs += bench_now_s() - ts;
		bytes += (size_t)n;
		profiles++;
	}
	printf("decode_merge profiles=%zu bytes=%zu seconds=%.4f wall=%.4f "
	    "stacks=%zu names=%zu", profiles, bytes, secs, bench_now_s() - t0,
	    stacks.n, names.n);
	for (int t = 0; t < ntypes; t++) {
		int64_t sum = 0;

		for (size_t id = 0; id < stacks.n; id++)
			sum += stacks.values[id * MAX_TYPES + (size_t)t];
		printf(" total.%s=%" PRId64, type_names[t], sum);
	}
	printf("\n");
	if (collapsed != NULL) {
		int t = want_type ? -1 : 0;

		for (int k = 0; want_type && k < ntypes; k++)
			if (strcmp(type_names[k], want_type) == 0)
				t = k;
		if (t < 0 || ntypes == 0 || write_collapsed(collapsed, t)) {
			fprintf(stderr, "cannot write %s for type %s\n",
			    collapsed, want_type ? want_type : "(first)");
			return (1);
		}
	}
	libdeflate_free_decompressor(d);
	return (0);
}
