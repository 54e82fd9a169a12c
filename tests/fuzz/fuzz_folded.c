/*
 * fuzz_folded.c -- the text ingest formats (distributor/folded.c): folded,
 * lines, trie and tree, plus the BOM / UTF-16 text decoding they share.
 *
 * Input: byte 0 picks the parser (mod 4: folded, lines, trie, tree) and the
 * scale (byte 0 >= 0x80: 10000000, the cpu period, so overflow checks are
 * reached); the rest is the body.  Properties: a failure carries its code
 * and a message; a success yields a batch that finishes with positive
 * values, and a text decode's output is valid UTF-8 when it transcoded.
 */
#include "distributor/folded.h"

#include <string.h>

#include "fuzz.h"
#include "fuzz_batch.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct sm_label ls[] = {
		{ "service_name", "fuzz" },
		{ "__name__", "process_cpu" },
	};
	struct fuzz_batch f;
	struct sm_err err;
	const char *txt;
	size_t txtlen;
	uint32_t series;
	int64_t scale;
	int rv, which;

	if (size < 1)
		return (0);
	which = data[0] % 4;
	scale = data[0] >= 0x80 ? 10000000 : 1;
	data++;
	size--;
	if (fuzz_batch_open(&f, 256u << 20) != 0)
		return (0);
	sm_err_clear(&err);
	FUZZ_CHECK(dist_batch_series(&f.b, ls, 2, 1000, &series, &err) == 0,
	    "series: %s", err.msg);

	rv = dist_text_decode(data, size, f.a, &txt, &txtlen, &err);
	if (rv != 0)
		FUZZ_CHECK_ERR(rv, &err);
	else
		FUZZ_CHECK(txt != NULL || txtlen == 0, "NULL text of %zu",
		    txtlen);
	sm_err_clear(&err);

	switch (which) {
	case 0:
		rv = dist_folded_parse(data, size, &f.b, series, scale, &err);
		break;
	case 1:
		rv = dist_lines_parse(data, size, &f.b, series, scale, &err);
		break;
	case 2:
		rv = dist_trie_parse(data, size, &f.b, series, scale, &err);
		break;
	default:
		rv = dist_tree_parse(data, size, &f.b, series, scale, &err);
		break;
	}
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
	} else if (dist_batch_finish(&f.b) == 0) {
		fuzz_batch_check_positive(&f.b);
	}
	fuzz_batch_close(&f);
	return (0);
}
