/*
 * corpus_gen.c -- the benchmark corpus generator: realistic
 * variants of real seed profiles, written as valid gzipped pprof, one file
 * per 10 s step of a series.  A measuring stick, not product code.
 *
 *   corpus_gen variants -o DIR -n STEPS -k KEY [-first I] [-t0 UNIX]
 *                       [-step SECONDS] [-p KEEP] [-level GZIP] SEED...
 *   corpus_gen from-collapsed -o OUT.pb.gz -type TYPE:UNIT
 *                       [-period-type TYPE:UNIT] [-period N] FILE
 *
 * variants: step i (i = first .. first+STEPS-1) is written to
 * DIR/<i, 5 digits>.pb.gz from SEED[i % number of seeds] (several seeds
 * let one series cycle through consecutive real profiles).  Each variant:
 *   - keeps every sample with probability KEEP (default 0.7; at least one);
 *   - multiplies each kept sample's values by one factor drawn from
 *     U(0.5, 1.5), in units of the greatest common divisor of that sample
 *     type's values in the seed, so counts stay integers and CPU time
 *     stays a whole number of sampling periods (count x period) as a
 *     profiler writes it; a non-zero value stays >= one unit;
 *   - drops the locations, functions and mappings no kept sample uses and
 *     compacts the string table, as a profiler would have written a
 *     profile with only those samples;
 *   - sets time_nanos = (t0 + i * step) s and duration_nanos = step s;
 *   - is packed with protobuf-c and gzipped with libdeflate at level 6
 *     (gzip's default; Go's runtime/pprof writes BestSpeed, which is
 *     larger, so "gzip as received" is, if anything, understated).
 * Everything is drawn from splitmix64 seeded with (KEY, i): the output is
 * deterministic given the seeds, KEY and the options, whatever the order
 * or parallelism of the calls.  Prints files, gz bytes and raw bytes.
 *
 * from-collapsed: turns a collapsed-stack text file (optionally gzipped;
 * "root;...;leaf VALUE" or jfr-parser's "frame:line;... [V1 V2]") into a
 * pprof with one function per frame name, one location per (name, line),
 * one sample per line, sample type TYPE:UNIT.  Used to make a Java seed
 * from jfr-parser's collapsed goldens, which are the stacks its JFR ->
 * pprof conversion produced.
 */
#include <errno.h>
#include <libdeflate.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "common/sm.h"
#include "google/v1/profile.pb-c.h"

typedef Google__V1__Profile Profile;

static void
usage(void)
{
	fprintf(stderr,
	    "usage: corpus_gen variants -o DIR -n STEPS -k KEY [-first I] "
	    "[-t0 UNIX] [-step S] [-p KEEP] [-level L] SEED...\n"
	    "       corpus_gen from-collapsed -o OUT.pb.gz -type T:U "
	    "[-period-type T:U] [-period N] FILE\n");
	exit(2);
}

/* Read a file and gunzip it when it is gzipped.  Exits on failure. */
static unsigned char *
load_maybe_gz(const char *path, size_t *lenp)
{
	unsigned char *buf = NULL, *out;
	size_t cap = 0, outcap, got;
	long n = bench_read_file(path, &buf, &cap);
	struct libdeflate_decompressor *d;

	if (n < 0) {
		fprintf(stderr, "corpus_gen: cannot read %s: %s\n", path,
		    strerror(errno));
		exit(1);
	}
	if (!bench_is_gzip(buf, (size_t)n)) {
		*lenp = (size_t)n;
		return (buf);
	}
	d = libdeflate_alloc_decompressor();
	outcap = bench_gzip_isize(buf, (size_t)n) + 1;
	out = bench_xmalloc(outcap);
	if (d == NULL || libdeflate_gzip_decompress(d, buf, (size_t)n, out,
	    outcap, &got) != LIBDEFLATE_SUCCESS) {
		fprintf(stderr, "corpus_gen: cannot gunzip %s\n", path);
		exit(1);
	}
	libdeflate_free_decompressor(d);
	free(buf);
	*lenp = got;
	return (out);
}

/* ---- variants ----------------------------------------------------------- */

#define FREE_MSG(m) protobuf_c_message_free_unpacked((ProtobufCMessage *)(m), \
	NULL)

/* Mark string index x used (when it is a valid index). */
static inline void
mark_str(unsigned char *used, size_t n, int64_t x)
{
	if (x >= 0 && (uint64_t)x < n)
		used[x] = 1;
}

static inline void
remap_str(const int64_t *newidx, size_t n, int64_t *x)
{
	if (*x >= 0 && (uint64_t)*x < n)
		*x = newidx[*x];
}

/*
 * Drop the strings nothing refers to any more and renumber every string
 * reference of p.  String 0 ("") always stays first.
 */
static void
compact_strings(Profile *p)
{
	size_t n = p->n_string_table, j = 0;
	unsigned char *used = calloc(n ? n : 1, 1);
	int64_t *newidx = bench_xmalloc((n ? n : 1) * sizeof(*newidx));

	if (used == NULL)
		exit(3);
	if (n > 0)
		used[0] = 1;
	for (size_t i = 0; i < p->n_sample_type; i++) {
		mark_str(used, n, p->sample_type[i]->type);
		mark_str(used, n, p->sample_type[i]->unit);
	}
	if (p->period_type != NULL) {
		mark_str(used, n, p->period_type->type);
		mark_str(used, n, p->period_type->unit);
	}
	for (size_t i = 0; i < p->n_sample; i++)
		for (size_t k = 0; k < p->sample[i]->n_label; k++) {
			Google__V1__Label *l = p->sample[i]->label[k];

			mark_str(used, n, l->key);
			mark_str(used, n, l->str);
			mark_str(used, n, l->num_unit);
		}
	for (size_t i = 0; i < p->n_mapping; i++) {
		mark_str(used, n, p->mapping[i]->filename);
		mark_str(used, n, p->mapping[i]->build_id);
	}
	for (size_t i = 0; i < p->n_function; i++) {
		mark_str(used, n, p->function[i]->name);
		mark_str(used, n, p->function[i]->system_name);
		mark_str(used, n, p->function[i]->filename);
	}
	mark_str(used, n, p->drop_frames);
	mark_str(used, n, p->keep_frames);
	for (size_t i = 0; i < p->n_comment; i++)
		mark_str(used, n, p->comment[i]);
	mark_str(used, n, p->default_sample_type);
	mark_str(used, n, p->doc_url);

	for (size_t i = 0; i < n; i++) {
		if (used[i]) {
			newidx[i] = (int64_t)j;
			p->string_table[j++] = p->string_table[i];
		} else {
			newidx[i] = -1;
			free(p->string_table[i]);
		}
	}
	p->n_string_table = j;

	for (size_t i = 0; i < p->n_sample_type; i++) {
		remap_str(newidx, n, &p->sample_type[i]->type);
		remap_str(newidx, n, &p->sample_type[i]->unit);
	}
	if (p->period_type != NULL) {
		remap_str(newidx, n, &p->period_type->type);
		remap_str(newidx, n, &p->period_type->unit);
	}
	for (size_t i = 0; i < p->n_sample; i++)
		for (size_t k = 0; k < p->sample[i]->n_label; k++) {
			Google__V1__Label *l = p->sample[i]->label[k];

			remap_str(newidx, n, &l->key);
			remap_str(newidx, n, &l->str);
			remap_str(newidx, n, &l->num_unit);
		}
	for (size_t i = 0; i < p->n_mapping; i++) {
		remap_str(newidx, n, &p->mapping[i]->filename);
		remap_str(newidx, n, &p->mapping[i]->build_id);
	}
	for (size_t i = 0; i < p->n_function; i++) {
		remap_str(newidx, n, &p->function[i]->name);
		remap_str(newidx, n, &p->function[i]->system_name);
		remap_str(newidx, n, &p->function[i]->filename);
	}
	remap_str(newidx, n, &p->drop_frames);
	remap_str(newidx, n, &p->keep_frames);
	for (size_t i = 0; i < p->n_comment; i++)
		remap_str(newidx, n, &p->comment[i]);
	remap_str(newidx, n, &p->default_sample_type);
	remap_str(newidx, n, &p->doc_url);
	free(used);
	free(newidx);
}

/*
 * Keep only the elements of a repeated message field whose flag is set,
 * freeing the others.  Order is preserved.
 */
#define COMPACT(arr, count, keepflags) do {				\
	size_t j_ = 0;							\
	for (size_t i_ = 0; i_ < (count); i_++) {			\
		if ((keepflags)[i_])					\
			(arr)[j_++] = (arr)[i_];			\
		else							\
			FREE_MSG((arr)[i_]);				\
	}								\
	(count) = j_;							\
} while (0)

#define MAX_VALUES 16

struct variant_ctx {
	struct bench_map loc, fn, map;
	int64_t unit[MAX_VALUES];	/* per value index: gcd in the seed */
	unsigned char *flags;
	size_t flags_cap;
	struct libdeflate_compressor *gz;
	unsigned char *raw, *out;
	size_t raw_cap, out_cap;
	double keep;
};

static unsigned char *
flags_for(struct variant_ctx *c, size_t n)
{
	if (n > c->flags_cap) {
		c->flags_cap = n * 2;
		c->flags = bench_xrealloc(c->flags, c->flags_cap);
	}
	memset(c->flags, 0, n ? n : 1);
	return (c->flags);
}

/* c->unit[k] = gcd of value k over the seed's samples (0: all zero). */
static void
seed_units(struct variant_ctx *c, const Profile *p)
{
	memset(c->unit, 0, sizeof(c->unit));
	for (size_t i = 0; i < p->n_sample; i++)
		for (size_t k = 0; k < p->sample[i]->n_value &&
		    k < MAX_VALUES; k++)
			c->unit[k] = (int64_t)sm_gcd64((uint64_t)c->unit[k],
			    sm_abs64(p->sample[i]->value[k]));
}

/*
 * One variant of the seed (see the file comment).  On success returns the
 * gzipped length (the bytes are in c->out) and sets *rawlen.
 */
static long
make_variant(struct variant_ctx *c, const unsigned char *seed,
    size_t seedlen, uint64_t key, uint64_t idx, int64_t t_ns, int64_t dur_ns,
    size_t *rawlen)
{
	Profile *p = google__v1__profile__unpack(NULL, seedlen, seed);
	uint64_t rng = key * 0x9e3779b97f4a7c15ull ^
	    (idx + 1) * 0xd1b54a32d192ed03ull;
	unsigned char *keep;
	size_t nkept = 0, raw_n, gz_n;
	uint32_t v;

	if (p == NULL)
		return (-1);
	(void)bench_splitmix64(&rng);

	/* Samples: a pseudo-random subset, values scaled. */
	keep = flags_for(c, p->n_sample);
	for (size_t i = 0; i < p->n_sample; i++) {
		double f = 0.5 + bench_uniform(&rng);

		if (bench_uniform(&rng) >= c->keep)
			continue;
		keep[i] = 1;
		nkept++;
		for (size_t k = 0; k < p->sample[i]->n_value; k++) {
			int64_t g = k < MAX_VALUES && c->unit[k] > 0 ?
			    c->unit[k] : 1;
			int64_t v0 = p->sample[i]->value[k];
			int64_t u1 = (int64_t)llround((double)(v0 / g) * f);

			if (v0 > 0 && u1 < 1)
				u1 = 1;
			p->sample[i]->value[k] = u1 * g;
		}
	}
	if (nkept == 0 && p->n_sample > 0)
		keep[0] = 1;
	COMPACT(p->sample, p->n_sample, keep);

	/* Locations used by the kept samples. */
	bench_map_clear(&c->loc);
	for (size_t i = 0; i < p->n_location; i++)
		bench_map_put(&c->loc, p->location[i]->id, (uint32_t)i);
	keep = flags_for(c, p->n_location);
	for (size_t i = 0; i < p->n_sample; i++)
		for (size_t k = 0; k < p->sample[i]->n_location_id; k++)
			if (bench_map_get(&c->loc, p->sample[i]->location_id[k],
			    &v))
				keep[v] = 1;
	COMPACT(p->location, p->n_location, keep);

	/* Functions and mappings used by the kept locations. */
	bench_map_clear(&c->fn);
	for (size_t i = 0; i < p->n_function; i++)
		bench_map_put(&c->fn, p->function[i]->id, (uint32_t)i);
	keep = flags_for(c, p->n_function);
	for (size_t i = 0; i < p->n_location; i++)
		for (size_t k = 0; k < p->location[i]->n_line; k++)
			if (bench_map_get(&c->fn,
			    p->location[i]->line[k]->function_id, &v))
				keep[v] = 1;
	COMPACT(p->function, p->n_function, keep);

	bench_map_clear(&c->map);
	for (size_t i = 0; i < p->n_mapping; i++)
		bench_map_put(&c->map, p->mapping[i]->id, (uint32_t)i);
	keep = flags_for(c, p->n_mapping);
	for (size_t i = 0; i < p->n_location; i++)
		if (bench_map_get(&c->map, p->location[i]->mapping_id, &v))
			keep[v] = 1;
	COMPACT(p->mapping, p->n_mapping, keep);

	compact_strings(p);
	p->time_nanos = t_ns;
	p->duration_nanos = dur_ns;

	raw_n = google__v1__profile__get_packed_size(p);
	if (raw_n > c->raw_cap) {
		c->raw_cap = raw_n * 2;
		c->raw = bench_xrealloc(c->raw, c->raw_cap);
	}
	google__v1__profile__pack(p, c->raw);
	FREE_MSG(p);
	gz_n = libdeflate_gzip_compress_bound(c->gz, raw_n);
	if (gz_n > c->out_cap) {
		c->out_cap = gz_n * 2;
		c->out = bench_xrealloc(c->out, c->out_cap);
	}
	gz_n = libdeflate_gzip_compress(c->gz, c->raw, raw_n, c->out,
	    c->out_cap);
	if (gz_n == 0)
		return (-1);
	*rawlen = raw_n;
	return ((long)gz_n);
}

static int
cmd_variants(int argc, char **argv)
{
	const char *dir = NULL;
	long steps = -1, first = 0, level = 6;
	uint64_t key = 0;
	int64_t t0 = 1700000000, step = 10;
	struct variant_ctx c;
	unsigned char **seeds;
	int64_t (*units)[MAX_VALUES];
	size_t *seedlens, nseeds = 0, total_gz = 0, total_raw = 0;
	char path[4096];
	int i;

	memset(&c, 0, sizeof(c));
	c.keep = 0.7;
	for (i = 0; i < argc && argv[i][0] == '-'; i += 2) {
		const char *o = argv[i], *a = i + 1 < argc ? argv[i + 1] : NULL;

		if (a == NULL)
			usage();
		if (strcmp(o, "-o") == 0)
			dir = a;
		else if (strcmp(o, "-n") == 0)
			steps = atol(a);
		else if (strcmp(o, "-k") == 0)
			key = strtoull(a, NULL, 0);
		else if (strcmp(o, "-first") == 0)
			first = atol(a);
		else if (strcmp(o, "-t0") == 0)
			t0 = atoll(a);
		else if (strcmp(o, "-step") == 0)
			step = atoll(a);
		else if (strcmp(o, "-p") == 0)
			c.keep = atof(a);
		else if (strcmp(o, "-level") == 0)
			level = atol(a);
		else
			usage();
	}
	if (dir == NULL || steps < 0 || i >= argc || c.keep <= 0 ||
	    c.keep > 1)
		usage();
	seeds = bench_xmalloc((size_t)(argc - i) * sizeof(*seeds));
	seedlens = bench_xmalloc((size_t)(argc - i) * sizeof(*seedlens));
	units = bench_xmalloc((size_t)(argc - i) * sizeof(*units));
	for (; i < argc; i++) {
		Profile *p;

		seeds[nseeds] = load_maybe_gz(argv[i], &seedlens[nseeds]);
		p = google__v1__profile__unpack(NULL, seedlens[nseeds],
		    seeds[nseeds]);
		if (p == NULL) {
			fprintf(stderr, "corpus_gen: %s is not a pprof\n",
			    argv[i]);
			return (1);
		}
		seed_units(&c, p);
		memcpy(units[nseeds], c.unit, sizeof(c.unit));
		FREE_MSG(p);
		nseeds++;
	}
	if ((c.gz = libdeflate_alloc_compressor((int)level)) == NULL)
		return (1);
	for (long s = first; s < first + steps; s++) {
		size_t k = (size_t)s % nseeds, rawlen = 0;
		long n;

		memcpy(c.unit, units[k], sizeof(c.unit));
		n = make_variant(&c, seeds[k], seedlens[k], key,
		    (uint64_t)s, (t0 + s * step) * 1000000000ll,
		    step * 1000000000ll, &rawlen);
		FILE *f;

		if (n < 0) {
			fprintf(stderr, "corpus_gen: variant %ld failed\n", s);
			return (1);
		}
		snprintf(path, sizeof(path), "%s/%05ld.pb.gz", dir, s);
		if ((f = fopen(path, "wb")) == NULL ||
		    fwrite(c.out, 1, (size_t)n, f) != (size_t)n ||
		    fclose(f) != 0) {
			fprintf(stderr, "corpus_gen: cannot write %s: %s\n",
			    path, strerror(errno));
			return (1);
		}
		total_gz += (size_t)n;
		total_raw += rawlen;
	}
	printf("corpus_gen files=%ld gz_bytes=%zu raw_bytes=%zu\n", steps,
	    total_gz, total_raw);
	libdeflate_free_compressor(c.gz);
	bench_map_free(&c.loc);
	bench_map_free(&c.fn);
	bench_map_free(&c.map);
	free(c.flags);
	free(c.raw);
	free(c.out);
	for (size_t k = 0; k < nseeds; k++)
		free(seeds[k]);
	free(seeds);
	free(seedlens);
	free(units);
	return (0);
}

/* ---- from-collapsed ----------------------------------------------------- */

/* A string interner: FNV-1a hash -> index, verified with strcmp. */
struct strtab {
	char **s;
	size_t n, cap;
	struct bench_map idx;	/* hash (+ probe) -> index */
};

static uint64_t
fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return (h);
}

/* Index of s in t, adding it when absent (returns 1 in *added then). */
static uint32_t
strtab_intern(struct strtab *t, const char *s, int *added)
{
	uint64_t h = fnv1a(s);
	uint32_t v;

	*added = 0;
	for (;; h++) {
		if (!bench_map_get(&t->idx, h, &v))
			break;
		if (strcmp(t->s[v], s) == 0)
			return (v);
	}
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 256;
		t->s = bench_xrealloc(t->s, t->cap * sizeof(char *));
	}
	t->s[t->n] = strdup(s);
	bench_map_put(&t->idx, h, (uint32_t)t->n);
	*added = 1;
	return ((uint32_t)t->n++);
}

static Google__V1__ValueType *
value_type(struct strtab *st, const char *tu)
{
	Google__V1__ValueType *vt = bench_xmalloc(sizeof(*vt));
	char buf[256];
	char *colon;
	int added;

	google__v1__value_type__init(vt);
	snprintf(buf, sizeof(buf), "%s", tu);
	if ((colon = strchr(buf, ':')) == NULL)
		usage();
	*colon = '\0';
	vt->type = strtab_intern(st, buf, &added);
	vt->unit = strtab_intern(st, colon + 1, &added);
	return (vt);
}

static int
cmd_from_collapsed(int argc, char **argv)
{
	const char *outp = NULL, *type = NULL, *ptype = NULL;
	int64_t period = 0;
	struct strtab st, frames;	/* frames: "name:line" -> location */
	Profile prof;
	Google__V1__Sample **samples = NULL;
	Google__V1__Location **locs = NULL;
	Google__V1__Function **fns = NULL;
	size_t nsamples = 0, nlocs = 0, nfns = 0, capfns = 0, raw_len, gz_len;
	size_t caps = 0, capl = 0;
	struct bench_map fn_of_name;	/* string index -> function index */
	unsigned char *text, *raw, *gz;
	char *line, *save = NULL;
	struct libdeflate_compressor *c;
	FILE *f;
	int i, added;

	memset(&st, 0, sizeof(st));
	memset(&frames, 0, sizeof(frames));
	memset(&fn_of_name, 0, sizeof(fn_of_name));
	for (i = 0; i < argc && argv[i][0] == '-'; i += 2) {
		const char *o = argv[i], *a = i + 1 < argc ? argv[i + 1] : NULL;

		if (a == NULL)
			usage();
		if (strcmp(o, "-o") == 0)
			outp = a;
		else if (strcmp(o, "-type") == 0)
			type = a;
		else if (strcmp(o, "-period-type") == 0)
			ptype = a;
		else if (strcmp(o, "-period") == 0)
			period = atoll(a);
		else
			usage();
	}
	if (outp == NULL || type == NULL || i != argc - 1)
		usage();
	text = load_maybe_gz(argv[i], &raw_len);
	text = bench_xrealloc(text, raw_len + 1);
	text[raw_len] = '\0';

	google__v1__profile__init(&prof);
	(void)strtab_intern(&st, "", &added);
	prof.n_sample_type = 1;
	prof.sample_type = bench_xmalloc(sizeof(*prof.sample_type));
	prof.sample_type[0] = value_type(&st, type);
	prof.period_type = value_type(&st, ptype ? ptype : type);
	prof.period = period;

	for (line = strtok_r((char *)text, "\r\n", &save); line != NULL;
	    line = strtok_r(NULL, "\r\n", &save)) {
		char *vals, *frame, *fsave = NULL;
		uint64_t ids[4096];
		size_t depth = 0;
		int64_t value;
		Google__V1__Sample *s;

		if ((vals = strrchr(line, '[')) != NULL) {
			*vals++ = '\0';
		} else if ((vals = strrchr(line, ' ')) != NULL) {
			*vals++ = '\0';
		} else {
			continue;
		}
		value = strtoll(vals, NULL, 10);
		for (frame = strtok_r(line, ";", &fsave);
		    frame != NULL && depth < 4096;
		    frame = strtok_r(NULL, ";", &fsave)) {
			char name[8192], *colon;
			int64_t lineno = 0;
			uint32_t loc, nm, fi;
			size_t l = strlen(frame);

			while (l > 0 && frame[l - 1] == ' ')
				frame[--l] = '\0';
			loc = strtab_intern(&frames, frame, &added);
			if (added) {
				Google__V1__Location *lo;
				Google__V1__Line *ln;

				snprintf(name, sizeof(name), "%s", frame);
				colon = strrchr(name, ':');
				if (colon != NULL && colon[1] != '\0' &&
				    strspn(colon + 1, "0123456789") ==
				    strlen(colon + 1)) {
					lineno = atoll(colon + 1);
					*colon = '\0';
				}
				nm = strtab_intern(&st, name, &added);
				if (!bench_map_get(&fn_of_name, nm, &fi)) {
					Google__V1__Function *fn =
					    bench_xmalloc(sizeof(*fn));

					google__v1__function__init(fn);
					fn->id = nfns + 1;
					fn->name = nm;
					fn->system_name = nm;
					if (nfns == capfns) {
						capfns = capfns ? capfns * 2 : 64;
						fns = bench_xrealloc(fns,
						    capfns * sizeof(*fns));
					}
					fi = (uint32_t)nfns;
					fns[nfns++] = fn;
					bench_map_put(&fn_of_name, nm, fi);
				}
				lo = bench_xmalloc(sizeof(*lo));
				ln = bench_xmalloc(sizeof(*ln));
				google__v1__location__init(lo);
				google__v1__line__init(ln);
				ln->function_id = fns[fi]->id;
				ln->line = lineno;
				lo->id = nlocs + 1;
				lo->n_line = 1;
				lo->line = bench_xmalloc(sizeof(*lo->line));
				lo->line[0] = ln;
				if (nlocs == capl) {
					capl = capl ? capl * 2 : 64;
					locs = bench_xrealloc(locs,
					    capl * sizeof(*locs));
				}
				locs[nlocs++] = lo;
			}
			ids[depth++] = (uint64_t)loc + 1;
		}
		if (depth == 0)
			continue;
		s = bench_xmalloc(sizeof(*s));
		google__v1__sample__init(s);
		s->n_location_id = depth;
		s->location_id = bench_xmalloc(depth * sizeof(uint64_t));
		for (size_t k = 0; k < depth; k++)	/* leaf first */
			s->location_id[k] = ids[depth - 1 - k];
		s->n_value = 1;
		s->value = bench_xmalloc(sizeof(int64_t));
		s->value[0] = value;
		if (nsamples == caps) {
			caps = caps ? caps * 2 : 64;
			samples = bench_xrealloc(samples, caps * sizeof(*samples));
		}
		samples[nsamples++] = s;
	}
	prof.n_sample = nsamples;
	prof.sample = samples;
	prof.n_location = nlocs;
	prof.location = locs;
	prof.n_function = nfns;
	prof.function = fns;
	prof.n_string_table = st.n;
	prof.string_table = st.s;
	prof.duration_nanos = 10000000000ll;

	raw_len = google__v1__profile__get_packed_size(&prof);
	raw = bench_xmalloc(raw_len);
	google__v1__profile__pack(&prof, raw);
	c = libdeflate_alloc_compressor(6);
	gz = bench_xmalloc(libdeflate_gzip_compress_bound(c, raw_len));
	gz_len = libdeflate_gzip_compress(c, raw, raw_len, gz,
	    libdeflate_gzip_compress_bound(c, raw_len));
	if (gz_len == 0 || (f = fopen(outp, "wb")) == NULL ||
	    fwrite(gz, 1, gz_len, f) != gz_len || fclose(f) != 0) {
		fprintf(stderr, "corpus_gen: cannot write %s\n", outp);
		return (1);
	}
	printf("corpus_gen from-collapsed samples=%zu locations=%zu "
	    "functions=%zu raw_bytes=%zu gz_bytes=%zu\n", nsamples, nlocs,
	    nfns, raw_len, gz_len);
	/* The process exits next: the message tree is left to the OS. */
	libdeflate_free_compressor(c);
	free(raw);
	free(gz);
	free(text);
	return (0);
}

int
main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	if (strcmp(argv[1], "variants") == 0)
		return (cmd_variants(argc - 2, argv + 2));
	if (strcmp(argv[1], "from-collapsed") == 0)
		return (cmd_from_collapsed(argc - 2, argv + 2));
	usage();
	return (2);
}
