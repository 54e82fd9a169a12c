/*
 * multipart.h -- a strict, allocation-bounded multipart/form-data parser
 * (RFC 7578 / RFC 2046) for the pprof and JFR forms of /ingest.  Written
 * here because libmicrohttpd's PostProcessor has had CVEs and is not used
 * (docs/reliability.md §3).
 *
 * The boundary comes from the Content-Type parameter (quoted or not, at
 * most 70 bytes).  Parts reference the body bytes; nothing is copied except
 * header values, which go to the arena.  Part headers are limited to 8 KiB
 * per part and 64 parts per body.  A preamble before the first boundary and
 * an epilogue after the closing boundary are ignored.  Lines end in CRLF;
 * a bare LF is accepted, as Go's mime/multipart does.
 *
 * Errors (SM_EMALFORMED, with a message): a Content-Type that is not
 * multipart/form-data, no boundary parameter or one outside 1..70 bytes,
 * no first boundary, a part without the closing delimiter, a part header
 * that is malformed or too long, too many parts.  SM_ENOMEM when the
 * arena refuses.  On error *parts is NULL and *nparts 0.
 */
#ifndef DIST_MULTIPART_H
#define DIST_MULTIPART_H

#include "common/arena.h"
#include "common/sm.h"

struct dist_part {
	const char *name;          /* Content-Disposition name=, "" if none */
	const char *filename;      /* filename=, or NULL */
	const char *content_type;  /* or NULL */
	const uint8_t *data;       /* into the body */
	size_t len;
};

int dist_multipart_parse(const char *content_type, const uint8_t *body,
    size_t len, struct sm_arena *a, struct dist_part **parts,
    uint32_t *nparts, struct sm_err *err);

/* The first part named `name`, or NULL. */
const struct dist_part *dist_multipart_get(const struct dist_part *parts,
    uint32_t n, const char *name);

#endif /* DIST_MULTIPART_H */
