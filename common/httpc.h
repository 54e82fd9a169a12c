/*
 * httpc.h -- a small HTTP client for one request at a time: a POST with a
 * body and headers, or a GET, and a status and the answer back.  It wraps
 * libcurl, so new callers need no curl of their own (the recording rules'
 * Prometheus remote write, querier/rules.c; the scraper's fetches and
 * uploads, scraper/scraper.c).
 *
 * Ownership: every call is self-contained; each thread keeps one libcurl
 * handle between its calls (freed when the thread exits), so connections
 * to the same host stay open (libcurl's global state is set up once,
 * thread-safely).  Blocking: the call runs
 * for at most timeout_ms; no signals (CURLOPT_NOSIGNAL).  TLS: https://
 * URLs verify the peer against the system store, or against ca_file when
 * given.  Errors: SM_EUNAVAIL (no connection, a transport error, the
 * message in err), SM_ETIMEDOUT, SM_ENOMEM, SM_EINVAL (a URL that is not
 * http:// or https://).  Any HTTP status is a success of the call: the
 * caller judges it.
 */
#ifndef SM_HTTPC_H
#define SM_HTTPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "sm.h"

struct sm_httpc_req {
	const char *url;
	const char *const *headers;  /* "Name: value", NULL-terminated */
	const void *body;
	size_t len;
	int64_t timeout_ms;
	const char *ca_file;         /* NULL or "": the system store */
	bool insecure;               /* https: do not verify the peer */
	size_t max_answer;           /* bytes of the answer kept; 0: 4 KiB */
};

/*
 * POST req->body to req->url: *status the HTTP status, `answer` (may be
 * NULL) the first 4 KiB of the answer's body.
 */
int sm_httpc_post(const struct sm_httpc_req *req, int *status,
    struct sm_buf *answer, struct sm_err *err);

/*
 * GET req->url (body and len unused).  An answer longer than
 * req->max_answer is SM_ETOOBIG (the transfer stops there).  gzip or
 * deflate content encodings are inflated by libcurl.
 */
int sm_httpc_get(const struct sm_httpc_req *req, int *status,
    struct sm_buf *answer, struct sm_err *err);

#endif /* SM_HTTPC_H */
