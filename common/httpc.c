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

static void
httpc_init(void)
{
	httpc_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

static size_t
httpc_write(char *p, size_t sz, size_t n, void *arg)
{
	struct sm_buf *b = arg;
	size_t len = sz * n;

	if (b != NULL && b->len < HTTPC_ANSWER_MAX)
		sm_buf_append(b, p, SM_MIN(len, HTTPC_ANSWER_MAX - b->len));
	return (len);
}

int
sm_httpc_post(const struct sm_httpc_req *req, int *status,
    struct sm_buf *answer, struct sm_err *err)
{
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
	if (!httpc_ok || (c = curl_easy_init()) == NULL)
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
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->len);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "smolder/" SM_VERSION);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)SM_MAX(req->timeout_ms,
	    1));
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)SM_MAX(req->timeout_ms, 1));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, httpc_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, answer);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
	if (req->ca_file != NULL && req->ca_file[0] != '\0')
		curl_easy_setopt(c, CURLOPT_CAINFO, req->ca_file);
	if ((cc = curl_easy_perform(c)) != CURLE_OK) {
		rv = sm_err_set(err, cc == CURLE_OPERATION_TIMEDOUT ?
		    SM_ETIMEDOUT : SM_EUNAVAIL, "%s", ebuf[0] ? ebuf :
		    curl_easy_strerror(cc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	*status = (int)code;
out:
	curl_slist_free_all(hl);
	curl_easy_cleanup(c);
	return (rv);
}
