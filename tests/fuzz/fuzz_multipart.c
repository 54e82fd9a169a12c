/*
 * fuzz_multipart.c -- the multipart/form-data parser
 * (distributor/multipart.c) used by /ingest for pprof and JFR forms.
 *
 * Input: the Content-Type header value up to the first '\n' (at most 200
 * bytes; no '\n' at all means the fixed "multipart/form-data;
 * boundary=X"), then the body.  Properties: on failure the code and
 * message are set and *parts is NULL; on success every part lies inside
 * the body, names are strings, and at most 64 parts come back.
 */
#include "distributor/multipart.h"

#include <string.h>

#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char ct[256];
	const uint8_t *nl, *body = data;
	size_t blen = size, ctlen;
	struct sm_arena *a;
	struct dist_part *parts = (struct dist_part *)1;
	uint32_t n = 7, i;
	struct sm_err err;
	int rv;

	nl = memchr(data, '\n', size < 200 ? size : 200);
	if (nl != NULL) {
		ctlen = (size_t)(nl - data);
		memcpy(ct, data, ctlen);
		ct[ctlen] = '\0';
		body = nl + 1;
		blen = size - ctlen - 1;
	} else {
		strcpy(ct, "multipart/form-data; boundary=X");
	}
	if ((a = sm_arena_create(16u << 20)) == NULL)
		return (0);
	sm_err_clear(&err);
	rv = dist_multipart_parse(ct, body, blen, a, &parts, &n, &err);
	if (rv != 0) {
		FUZZ_CHECK_ERR(rv, &err);
		FUZZ_CHECK(parts == NULL && n == 0, "outputs set on error");
	} else {
		FUZZ_CHECK(n <= 64, "%u parts", n);
		for (i = 0; i < n; i++) {
			FUZZ_CHECK(parts[i].name != NULL, "part %u: no name",
			    i);
			FUZZ_CHECK(parts[i].len == 0 ||
			    (parts[i].data >= body &&
			    parts[i].data + parts[i].len <= body + blen),
			    "part %u outside the body", i);
			(void)strlen(parts[i].name);
			if (parts[i].filename != NULL)
				(void)strlen(parts[i].filename);
			if (parts[i].content_type != NULL)
				(void)strlen(parts[i].content_type);
		}
		if (n > 0)
			FUZZ_CHECK(dist_multipart_get(parts, n,
			    parts[0].name) == &parts[0], "get(first name)");
	}
	sm_arena_destroy(a);
	return (0);
}
