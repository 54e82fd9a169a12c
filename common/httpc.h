/*
 * httpc.h -- the HTTP client: httpc.c is the only file that includes
 * libcurl's header (docs/style.md §11).  It serves every outbound HTTP
 * request of the process: the recording rules' Prometheus remote write
 * (querier/rules.c, common/prw.c), the scraper's fetches and uploads
 * (scraper/scraper.c, scraper/k8s.c), the distributor's remote write
 * (distributor/remote_write.c), the S3 bucket (common/bucket_s3.c), the
 * etcd ring KV with its watch streams (common/etcd.c) and the peer
 * probes (common/peers.c).
 *
 * Two ways in.  sm_httpc_post() and sm_httpc_get() are the short forms:
 * a body and headers out, a status and the start of the answer back.
 * sm_httpc_do() takes any method, and lets the caller see the response's
 * headers and its body as they arrive (a streaming watch, a bounded GET
 * into the caller's buffer), know when the request is about to go out,
 * and cancel a transfer from another thread.  sm_httpc_many() runs
 * several sm_httpc_do() requests at once in the calling thread.
 *
 * Connections.  Each thread keeps one libcurl handle between its calls
 * (freed when the thread exits), so connections to the same host stay
 * open: a scraper worker asks the same targets every interval, a bucket
 * reader the same store, the remote-write sender the same receiver, and a
 * new connection (TLS above all) per request cost more than the request.
 * libcurl's global state is set up once, thread-safely, on first use.
 * A request made from inside a callback (the thread's handle is busy)
 * and sm_httpc_many()'s requests run on handles of their own, freed
 * before the call returns.
 *
 * Ownership: a request and everything it points to are borrowed for the
 * call only; nothing is kept after it returns.  `answer` belongs to the
 * caller and is only appended to.
 *
 * Blocking: a call runs for at most its timeout_ms (and is cut short by
 * `cancel`); no signals (CURLOPT_NOSIGNAL).  Locking: none is needed;
 * calls from many threads run in parallel, each on its own handle.
 * TLS: https:// URLs verify the peer against the system store, or against
 * ca_file; a client certificate is sent when tls_cert is set.  Secrets
 * (a SigV4 secret, an Authorization header) are never logged here, nor
 * copied into an error message.
 *
 * Errors (the return value; err gets the message, libcurl's own when it
 * has one): SM_EINVAL (a URL that is not http:// or https://, a method
 * with characters outside A-Z), SM_ENOMEM, SM_ETIMEDOUT (timeout_ms or
 * connect_timeout_ms passed), SM_ECLOSED (`cancel` was set), SM_ETOOBIG
 * (sm_httpc_get: the answer passed max_answer), SM_EUNAVAIL (any other
 * transport failure: no connection, reset, TLS).  Any HTTP status is a
 * success of the call: the caller judges it.
 */
#ifndef SM_HTTPC_H
#define SM_HTTPC_H

#include <stdatomic.h>
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
	int64_t timeout_ms;          /* the whole request; below 1: 1 */
	const char *ca_file;         /* NULL or "": the system store */
	bool insecure;               /* https: do not verify the peer */
	size_t max_answer;           /* bytes of the answer kept; 0: 4 KiB */

	/* The rest is for sm_httpc_do(); zero is the default throughout. */
	const char *method;          /* "GET", "HEAD", "PUT", "DELETE", ...;
				      * NULL: POST.  A PUT uploads body
				      * (Content-Length len), a POST sends it
				      * as its fields; other methods send no
				      * body.  HEAD reads no body. */
	int64_t connect_timeout_ms;  /* up to a connection; 0: timeout_ms */
	const char *tls_cert;        /* client certificate (PEM), or NULL */
	const char *tls_key;         /* its key (PEM), with tls_cert */
	const char *user_agent;      /* NULL: "smolder/<version>" */
	bool no_proxy;               /* ignore http_proxy and the like */
	bool inflate;                /* ask for and inflate gzip/deflate */
	/*
	 * AWS Signature V4, signed by libcurl: aws_sigv4 is its provider
	 * string ("aws:amz:<region>:<service>"), key_id and secret the key
	 * pair (given apart: a key id may contain ':').  libcurl signs the
	 * query as given and the x-amz-* headers among `headers`; it does
	 * not add x-amz-content-sha256, which the caller sends.
	 */
	const char *aws_sigv4;
	const char *key_id;
	const char *secret;
	/* Set (by another thread) to abort the transfer: the call returns
	 * SM_ECLOSED within about a second, sooner while data flows. */
	const atomic_bool *cancel;
	/*
	 * Callbacks, each given cb_arg, all called in the calling thread
	 * during the call.
	 *
	 * on_send: the connection is up and the request is about to go
	 * out -- from here on the server may act on it.  Called again
	 * when libcurl re-sends on a fresh connection (a reused one turned
	 * out dead).
	 *
	 * on_header: each response header, name and value trimmed of
	 * blanks, NUL-terminated, valid for the call only.  A new response
	 * (after an interim "100 Continue") first calls it with name NULL
	 * and value the status line: forget the earlier headers.
	 *
	 * on_body: the response body as it arrives, with the response's
	 * HTTP status; false stops the transfer, and the call returns 0
	 * with resp->stopped set.  With on_body, `answer` is unused.
	 */
	void *cb_arg;
	void (*on_send)(void *arg);
	void (*on_header)(void *arg, const char *name, const char *value);
	bool (*on_body)(void *arg, int status, const void *p, size_t n);
};

/* What came back from sm_httpc_do(), on success and on failure. */
struct sm_httpc_resp {
	int status;           /* the last response's HTTP status; 0: none
			       * (set also when the transfer failed later,
			       * e.g. a watch that timed out mid-body) */
	bool stopped;         /* on_body returned false */
	bool unsent;          /* failed before the request could reach the
			       * server: name resolution, connecting, the TLS
			       * handshake, out of memory */
	bool final;           /* failed in a way no retry can mend: a bad
			       * URL, the peer's certificate, the CA file,
			       * the client certificate, out of memory */
	const char *reason;   /* a failed transfer: libcurl's short words
			       * for it ("Couldn't connect to server"), a
			       * static string; NULL on success */
};

/*
 * Set up libcurl's global state (once per process; later calls only
 * report).  Callers that want to refuse to start without it call this
 * from their constructor; the request functions call it themselves.
 * Returns 0, or SM_EINTERNAL when libcurl could not be initialised.
 * Blocking: no.  Thread-safe.
 */
int sm_httpc_init(void);

/*
 * POST req->body to req->url: *status the HTTP status, `answer` (may be
 * NULL) the first max_answer (4 KiB) bytes of the answer's body.  The
 * method and callback fields of req are not used.
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

/*
 * One request as req describes it (method, callbacks, timeouts, TLS,
 * signing).  *resp is filled in on success and failure alike.  Without
 * on_body, `answer` (may be NULL) gets the first max_answer (4 KiB)
 * bytes of the body and the rest is read and dropped.  Returns 0 when
 * the exchange completed (any status) or on_body stopped it, else the
 * errors in the header comment, with err set.
 */
int sm_httpc_do(const struct sm_httpc_req *req, struct sm_httpc_resp *resp,
    struct sm_buf *answer, struct sm_err *err);

/*
 * Run n requests concurrently, as sm_httpc_do(req[i], &resp[i], NULL,
 * &err[i]) would each (answer bodies are dropped unless on_body takes
 * them), and return when all have finished.  rv[i] gets each one's
 * return value.  Callbacks run in the calling thread, one at a time.
 * Returns 0, or SM_ENOMEM when the batch could not be set up (then
 * nothing was sent and each rv[i] is SM_ENOMEM too).  Blocks up to the
 * longest timeout among the requests.
 */
int sm_httpc_many(const struct sm_httpc_req *req, struct sm_httpc_resp *resp,
    int *rv, struct sm_err *err, size_t n);

#endif /* SM_HTTPC_H */
