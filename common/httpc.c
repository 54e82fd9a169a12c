/*
 * httpc.c -- see httpc.h.
 */
#include "httpc.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#define HTTPC_ANSWER_MAX 4096

static pthread_once_t httpc_once = PTHREAD_ONCE_INIT;
static bool httpc_ok;
/* One easy handle per thread, kept between calls: its connection cache
 * keeps connections alive (a scraper worker asks the same targets and the
 * same distributor every interval; a new connection per request cost
 * more than the request).  Freed when the thread exits. */
static pthread_key_t httpc_key;

static void
httpc_free_handle(void *h)
{
	curl_easy_cleanup(h);
}

static void
httpc_init(void)
{
	httpc_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK &&
	    pthread_key_create(&httpc_key, httpc_free_handle) == 0;
}

/* This thread's handle, reset to no options; NULL when out of memory. */
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

struct httpc_sink {
	struct sm_buf *b;
	size_t max;
	bool full;          /* GET: stop past max */
	bool over;
};

static size_t
httpc_write(char *p, size_t sz, size_t n, void *arg)
{
	struct httpc_sink *k = arg;
	size_t len = sz * n;

	if (k->b == NULL)
		return (len);
	if (k->full && k->b->len + len > k->max) {
		k->over = true;
		return (0);         /* aborts the transfer */
	}
	if (k->b->len < k->max)
		sm_buf_append(k->b, p, SM_MIN(len, k->max - k->b->len));
	return (len);
}

static int
httpc_do(const struct sm_httpc_req *req, bool post, int *status,
    struct sm_buf *answer, struct sm_err *err)
{
	struct httpc_sink sink = { answer, req->max_answer != 0 ?
	    req->max_answer : HTTPC_ANSWER_MAX, !post, false };
	struct curl_slist *hl = NULL, *nh;
	char ebuf[CURL_ERROR_SIZE];
	CURLcode cc;
	CURL *c;
	long code = 0;
	int rv = 0;

	*status = 0;
	if (req->url == NULL || (strncasecmp(req->url, "http://", 7) != 0 &&
	    strncasecmp(req->url, "https://", 8) != 0))
		return (sm_err_set(err, SM_EINVAL, "not an http:// or https:// "
		    "URL"));
	pthread_once(&httpc_once, httpc_init);
	if (!httpc_ok || (c = httpc_handle()) == NULL)
		return (sm_err_set(err, SM_ENOMEM, "libcurl: cannot start"));
	for (size_t i = 0; req->headers != NULL && req->headers[i] != NULL;
	    i++) {
		if ((nh = curl_slist_append(hl, req->headers[i])) == NULL) {
			rv = sm_err_set(err, SM_ENOMEM, "out of memory");
			goto out;
		}
		hl = nh;
	}
	ebuf[0] = '\0';
	curl_easy_setopt(c, CURLOPT_URL, req->url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (post) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
		    (curl_off_t)req->len);
	} else {
		curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
		curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "smolder/" SM_VERSION);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)SM_MAX(req->timeout_ms,
	    1));
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)SM_MAX(req->timeout_ms, 1));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, httpc_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
	if (req->ca_file != NULL && req->ca_file[0] != '\0')
		curl_easy_setopt(c, CURLOPT_CAINFO, req->ca_file);
	if (req->insecure) {
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if ((cc = curl_easy_perform(c)) != CURLE_OK) {
		if (sink.over) {
			rv = sm_err_set(err, SM_ETOOBIG, "answer larger than "
			    "%zu bytes", sink.max);
			goto out;
		}
		rv = sm_err_set(err, cc == CURLE_OPERATION_TIMEDOUT ?
		    SM_ETIMEDOUT : SM_EUNAVAIL, "%s", ebuf[0] ? ebuf :
		    curl_easy_strerror(cc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	*status = (int)code;
out:
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hl);
	return (rv);
}

int
sm_httpc_post(const struct sm_httpc_req *req, int *status,
    struct sm_buf *answer, struct sm_err *err)
{
	return (httpc_do(req, true, status, answer, err));
}

int
sm_httpc_get(const struct sm_httpc_req *req, int *status,
    struct sm_buf *answer, struct sm_err *err)
{
	return (httpc_do(req, false, status, answer, err));
}
