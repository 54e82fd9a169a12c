/*
 * httpc.c -- see httpc.h.
 *
 * One transfer is a struct httpc_xfer: httpc_setup() turns the request
 * into options on a libcurl easy handle, libcurl calls the callbacks
 * below while it runs, and httpc_finish() turns libcurl's result into
 * ours.  sm_httpc_do() runs one on this thread's handle with
 * curl_easy_perform(); sm_httpc_many() runs several on fresh handles
 * under one multi handle.
 */
#include "httpc.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#define HTTPC_ANSWER_MAX 4096
#define HTTPC_LINE_MAX 1024     /* header lines longer go to the heap */

static pthread_once_t httpc_once = PTHREAD_ONCE_INIT;
static bool httpc_ok;
/* One easy handle per thread, kept between calls: its connection cache
 * keeps connections alive (httpc.h "Connections").  Freed when the
 * thread exits. */
static pthread_key_t httpc_key;
/* This thread is inside a transfer on its handle (a callback is running
 * and asked for another request). */
static _Thread_local bool httpc_busy;

struct httpc_xfer {
	const struct sm_httpc_req *req;
	struct sm_httpc_resp *resp;
	CURL *c;
	struct curl_slist *hl;
	struct sm_buf *answer;      /* no on_body: the body goes here */
	size_t max;
	bool full;                  /* GET: stop past max, SM_ETOOBIG */
	bool over;
	size_t sent;                /* a PUT's bytes handed to libcurl */
	char ebuf[CURL_ERROR_SIZE];
};

static void
httpc_free_handle(void *h)
{
	curl_easy_cleanup(h);
}

static void
httpc_init_once(void)
{
	httpc_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK &&
	    pthread_key_create(&httpc_key, httpc_free_handle) == 0;
}

int
sm_httpc_init(void)
{
	pthread_once(&httpc_once, httpc_init_once);
	return (httpc_ok ? 0 : SM_EINTERNAL);
}

/* This thread's handle, with no options set; NULL when out of memory. */
static CURL *
httpc_handle(void)
{
	CURL *c = pthread_getspecific(httpc_key);

	if (c != NULL) {
		curl_easy_reset(c);
		return (c);
	}
	if ((c = curl_easy_init()) != NULL &&
	    pthread_setspecific(httpc_key, c) != 0) {
		curl_easy_cleanup(c);
		c = NULL;
	}
	return (c);
}

/* ---- libcurl's callbacks --------------------------------------------- */

static size_t
httpc_write(char *p, size_t sz, size_t n, void *arg)
{
	struct httpc_xfer *x = arg;
	size_t len = sz * n;

	if (x->req->on_body != NULL) {
		long code = 0;

		curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code);
		if (!x->req->on_body(x->req->cb_arg, (int)code, p, len)) {
			x->resp->stopped = true;
			return (0);     /* aborts the transfer */
		}
		return (len);
	}
	if (x->answer == NULL)
		return (len);
	if (x->full && x->answer->len + len > x->max) {
		x->over = true;
		return (0);
	}
	if (x->answer->len < x->max)
		sm_buf_append(x->answer, p, SM_MIN(len, x->max -
		    x->answer->len));
	return (len);
}

static size_t
httpc_read(char *p, size_t sz, size_t n, void *arg)
{
	struct httpc_xfer *x = arg;
	size_t len = SM_MIN(sz * n, x->req->len - x->sent);

	if (len > 0)
		memcpy(p, (const char *)x->req->body + x->sent, len);
	x->sent += len;
	return (len);
}

static bool
httpc_blank(char c)
{
	return (c == ' ' || c == '\t' || c == '\r' || c == '\n');
}

/* Split one header line into trimmed name and value for on_header. */
static size_t
httpc_header(char *p, size_t sz, size_t n, void *arg)
{
	struct httpc_xfer *x = arg;
	size_t len = sz * n;
	char small[HTTPC_LINE_MAX], *line, *v, *e;

	if (x->req->on_header == NULL)
		return (len);
	line = len < sizeof(small) ? small : sm_malloc(len + 1);
	if (line == NULL)
		return (len);           /* a header lost, not the transfer */
	memcpy(line, p, len);
	line[len] = '\0';
	for (e = line + len; e > line && httpc_blank(e[-1]); e--)
		;
	*e = '\0';
	if (strncmp(line, "HTTP/", 5) == 0) {
		x->req->on_header(x->req->cb_arg, NULL, line);
	} else if ((v = strchr(line, ':')) != NULL && v != line) {
		for (e = v; e > line && httpc_blank(e[-1]); e--)
			;
		*e = '\0';
		for (v++; httpc_blank(*v); v++)
			;
		x->req->on_header(x->req->cb_arg, line, v);
	}
	if (line != small)
		sm_free(line);
	return (len);
}

static int
httpc_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
    curl_off_t ultotal, curl_off_t ulnow)
{
	const struct httpc_xfer *x = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return (atomic_load(x->req->cancel) ? 1 : 0);
}

static int
httpc_prereq(void *arg, char *conn_primary_ip, char *conn_local_ip,
    int conn_primary_port, int conn_local_port)
{
	const struct httpc_xfer *x = arg;

	(void)conn_primary_ip;
	(void)conn_local_ip;
	(void)conn_primary_port;
	(void)conn_local_port;
	x->req->on_send(x->req->cb_arg);
	return (CURL_PREREQFUNC_OK);
}

/* ---- one transfer ------------------------------------------------------ */

/*
 * Check req and set x->c (a handle with no options) up for it.  0, or
 * SM_EINVAL / SM_ENOMEM with err set; x->hl is freed by httpc_finish()
 * either way.
 */
static int
httpc_setup(struct httpc_xfer *x, struct sm_err *err)
{
	const struct sm_httpc_req *req = x->req;
	const char *m = req->method != NULL ? req->method : "POST";
	struct curl_slist *nh;
	CURL *c = x->c;

	if (req->url == NULL || (strncasecmp(req->url, "http://", 7) != 0 &&
	    strncasecmp(req->url, "https://", 8) != 0))
		return (sm_err_set(err, SM_EINVAL, "not an http:// or https:// "
		    "URL"));
	if (m[0] == '\0' || strspn(m, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") !=
	    strlen(m))
		return (sm_err_set(err, SM_EINVAL, "not an HTTP method"));
	for (size_t i = 0; req->headers != NULL && req->headers[i] != NULL;
	    i++) {
		if ((nh = curl_slist_append(x->hl, req->headers[i])) == NULL)
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		x->hl = nh;
	}
	x->ebuf[0] = '\0';
	curl_easy_setopt(c, CURLOPT_URL, req->url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (strcmp(m, "POST") == 0) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
		    (curl_off_t)req->len);
	} else if (strcmp(m, "GET") == 0) {
		curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	} else if (strcmp(m, "HEAD") == 0) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (strcmp(m, "PUT") == 0) {
		/* an upload, not fields: Content-Length and, for a large
		 * body, libcurl's "Expect: 100-continue" */
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, httpc_read);
		curl_easy_setopt(c, CURLOPT_READDATA, x);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE,
		    (curl_off_t)req->len);
	} else {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
	}
	if (req->inflate)
		curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, x->hl);
	curl_easy_setopt(c, CURLOPT_USERAGENT, req->user_agent != NULL ?
	    req->user_agent : "smolder/" SM_VERSION);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)SM_MAX(req->timeout_ms,
	    1));
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)SM_MAX(req->connect_timeout_ms > 0 ?
	    req->connect_timeout_ms : req->timeout_ms, 1));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, httpc_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, httpc_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, x->ebuf);
	curl_easy_setopt(c, CURLOPT_PRIVATE, x);
	if (req->no_proxy)
		curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	if (req->ca_file != NULL && req->ca_file[0] != '\0')
		curl_easy_setopt(c, CURLOPT_CAINFO, req->ca_file);
	if (req->insecure) {
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (req->tls_cert != NULL && req->tls_cert[0] != '\0') {
		curl_easy_setopt(c, CURLOPT_SSLCERT, req->tls_cert);
		curl_easy_setopt(c, CURLOPT_SSLKEY, req->tls_key);
	}
	if (req->aws_sigv4 != NULL) {
		curl_easy_setopt(c, CURLOPT_AWS_SIGV4, req->aws_sigv4);
		curl_easy_setopt(c, CURLOPT_USERNAME, req->key_id);
		curl_easy_setopt(c, CURLOPT_PASSWORD, req->secret);
	}
	if (req->cancel != NULL) {
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, httpc_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
	}
	if (req->on_send != NULL) {
		curl_easy_setopt(c, CURLOPT_PREREQFUNCTION, httpc_prereq);
		curl_easy_setopt(c, CURLOPT_PREREQDATA, x);
	}
	return (0);
}

/* Failed before the request could reach the server. */
static bool
httpc_unsent(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_OUT_OF_MEMORY:
		return (true);
	default:
		return (false);
	}
}

/* A setup problem that no retry can mend. */
static bool
httpc_final(CURLcode cc)
{
	switch (cc) {
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_OUT_OF_MEMORY:
		return (true);
	default:
		return (false);
	}
}

/* libcurl's result cc of x into resp and our return value. */
static int
httpc_finish(struct httpc_xfer *x, CURLcode cc, struct sm_err *err)
{
	struct sm_httpc_resp *resp = x->resp;
	long code = 0;

	curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code);
	resp->status = (int)code;
	if (cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && resp->stopped))
		return (0);
	resp->reason = curl_easy_strerror(cc);
	resp->unsent = httpc_unsent(cc);
	resp->final = httpc_final(cc);
	if (x->over)
		return (sm_err_set(err, SM_ETOOBIG, "answer larger than %zu "
		    "bytes", x->max));
	if (cc == CURLE_ABORTED_BY_CALLBACK && x->req->cancel != NULL &&
	    atomic_load(x->req->cancel))
		return (sm_err_set(err, SM_ECLOSED, "cancelled"));
	return (sm_err_set(err, cc == CURLE_OPERATION_TIMEDOUT ?
	    SM_ETIMEDOUT : SM_EUNAVAIL, "%s", x->ebuf[0] != '\0' ? x->ebuf :
	    resp->reason));
}

static void
httpc_xfer_init(struct httpc_xfer *x, const struct sm_httpc_req *req,
    struct sm_httpc_resp *resp, struct sm_buf *answer, bool full)
{
	memset(x, 0, sizeof(*x));
	memset(resp, 0, sizeof(*resp));
	x->req = req;
	x->resp = resp;
	x->answer = answer;
	x->max = req->max_answer != 0 ? req->max_answer : HTTPC_ANSWER_MAX;
	x->full = full;
}

static int
httpc_run(const struct sm_httpc_req *req, struct sm_httpc_resp *resp,
    struct sm_buf *answer, bool full, struct sm_err *err)
{
	struct httpc_xfer x;
	int rv;

	bool own = httpc_busy;

	httpc_xfer_init(&x, req, resp, answer, full);
	if (sm_httpc_init() != 0 || (x.c = own ? curl_easy_init() :
	    httpc_handle()) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "libcurl: cannot start"));
	httpc_busy = true;
	if ((rv = httpc_setup(&x, err)) == 0)
		rv = httpc_finish(&x, curl_easy_perform(x.c), err);
	if (own) {
		curl_easy_cleanup(x.c);
	} else {
		httpc_busy = false;
		/* Options point into this frame: drop them, keep the
		 * connections. */
		curl_easy_reset(x.c);
	}
	curl_slist_free_all(x.hl);
	return (rv);
}

int
sm_httpc_do(const struct sm_httpc_req *req, struct sm_httpc_resp *resp,
    struct sm_buf *answer, struct sm_err *err)
{
	return (httpc_run(req, resp, answer, false, err));
}

int
sm_httpc_post(const struct sm_httpc_req *req, int *status,
    struct sm_buf *answer, struct sm_err *err)
{
	struct sm_httpc_req r = { .url = req->url, .headers = req->headers,
	    .body = req->body, .len = req->len, .timeout_ms = req->timeout_ms,
	    .ca_file = req->ca_file, .insecure = req->insecure,
	    .max_answer = req->max_answer };
	struct sm_httpc_resp resp;
	int rv;

	rv = httpc_run(&r, &resp, answer, false, err);
	*status = rv == 0 ? resp.status : 0;
	return (rv);
}

int
sm_httpc_get(const struct sm_httpc_req *req, int *status,
    struct sm_buf *answer, struct sm_err *err)
{
	struct sm_httpc_req r = { .url = req->url, .headers = req->headers,
	    .timeout_ms = req->timeout_ms, .ca_file = req->ca_file,
	    .insecure = req->insecure, .max_answer = req->max_answer,
	    .method = "GET", .inflate = true };
	struct sm_httpc_resp resp;
	int rv;

	rv = httpc_run(&r, &resp, answer, true, err);
	*status = rv == 0 ? resp.status : 0;
	return (rv);
}

/* ---- several at once ----------------------------------------------------- */

int
sm_httpc_many(const struct sm_httpc_req *req, struct sm_httpc_resp *resp,
    int *rv, struct sm_err *err, size_t n)
{
	struct httpc_xfer *x = NULL;
	CURLM *mh = NULL;
	int running = 0, ret = 0;

	for (size_t i = 0; i < n; i++)
		rv[i] = SM_ENOMEM;
	if (n == 0)
		return (0);
	if (sm_httpc_init() != 0 || (mh = curl_multi_init()) == NULL ||
	    (x = sm_calloc(n, sizeof(*x))) == NULL) {
		for (size_t i = 0; i < n; i++) {
			memset(&resp[i], 0, sizeof(resp[i]));
			sm_err_set(&err[i], SM_ENOMEM, "libcurl: cannot start");
		}
		ret = SM_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		httpc_xfer_init(&x[i], &req[i], &resp[i], NULL, false);
		if ((x[i].c = curl_easy_init()) == NULL) {
			rv[i] = sm_err_set(&err[i], SM_ENOMEM, "libcurl: cannot "
			    "start");
			continue;
		}
		if ((rv[i] = httpc_setup(&x[i], &err[i])) != 0)
			continue;
		if (curl_multi_add_handle(mh, x[i].c) != CURLM_OK) {
			rv[i] = sm_err_set(&err[i], SM_ENOMEM, "libcurl: cannot "
			    "start");
			continue;
		}
		rv[i] = 1;              /* running */
	}
	do {
		CURLMsg *msg;
		int left;

		if (curl_multi_perform(mh, &running) != CURLM_OK)
			break;
		while ((msg = curl_multi_info_read(mh, &left)) != NULL) {
			struct httpc_xfer *t = NULL;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE,
			    (char **)&t);
			rv[t - x] = httpc_finish(t, msg->data.result,
			    &err[t - x]);
		}
		if (running > 0)
			curl_multi_poll(mh, NULL, 0, 100, NULL);
	} while (running > 0);
out:
	for (size_t i = 0; x != NULL && i < n; i++) {
		if (rv[i] == 1)         /* the multi handle failed under it */
			rv[i] = sm_err_set(&err[i], SM_EUNAVAIL, "libcurl: "
			    "transfer lost");
		if (x[i].c != NULL) {
			curl_multi_remove_handle(mh, x[i].c);
			curl_easy_cleanup(x[i].c);
		}
		curl_slist_free_all(x[i].hl);
	}
	sm_free(x);
	if (mh != NULL)
		curl_multi_cleanup(mh);
	return (ret);
}
