/*
 * sm_test_http.h -- the raw HTTP/1.1 client of the C tests (header-only,
 * like sm_test.h): a loopback connection with timeouts, a full send, and
 * one response read with its status, headers and body.
 *
 * Raw on purpose: the tests that use it (common/http_test.c,
 * common/connect_test.c, the in-process cluster tier) check what the
 * server puts on the wire, including malformed and partial requests, so
 * the client must not fix anything up.
 *
 * A response body is read by Content-Length, chunk by chunk when the
 * response is chunked, or up to the close the server announced with
 * "Connection: close" when it has neither; an interim "100 Continue" is
 * skipped.  Everything
 * returns 0 or -1; after a read that failed because the peer closed the
 * connection, errno is 0 (a timeout leaves EAGAIN).
 */
#ifndef SM_TEST_HTTP_H
#define SM_TEST_HTTP_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

struct sm_test_resp {
	int status;
	char head[16384];        /* status line + headers, NUL-terminated */
	unsigned char *body;     /* malloc'd, NUL-terminated */
	size_t len;
};

static inline void
sm_test_resp_free(struct sm_test_resp *rs)
{
	free(rs->body);
	rs->body = NULL;
}

/* Receive and send timeouts of socket `fd`. */
static inline void
sm_test_sock_timeout(int fd, int ms)
{
	struct timeval tv = { ms / 1000, (long)(ms % 1000) * 1000L };

	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A connection to 127.0.0.1:port with `timeout_ms` timeouts, or -1. */
static inline int
sm_test_connect(unsigned port, int timeout_ms)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return (-1);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sm_test_sock_timeout(fd, timeout_ms);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return (-1);
	}
	return (fd);
}

static inline int
sm_test_send(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return (-1);
		c += k;
		n -= (size_t)k;
	}
	return (0);
}

/* Value of header `name` in rs->head (a per-thread copy), or NULL. */
static inline const char *
sm_test_resp_header(const struct sm_test_resp *rs, const char *name)
{
	static _Thread_local char val[1024];
	size_t nl = strlen(name);
	const char *p = strstr(rs->head, "\r\n");

	while (p != NULL && p[2] != '\0') {
		const char *line = p + 2, *eol = strstr(line, "\r\n");

		if (eol == NULL)
			break;
		if ((size_t)(eol - line) > nl && line[nl] == ':' &&
		    strncasecmp(line, name, nl) == 0) {
			const char *v = line + nl + 1;

			while (*v == ' ')
				v++;
			snprintf(val, sizeof(val), "%.*s", (int)(eol - v), v);
			return (val);
		}
		p = eol;
	}
	return (NULL);
}

/* Exactly n bytes (errno 0 when the peer closed first). */
static inline int
sm_test_recv_all(int fd, void *p, size_t n)
{
	char *c = p;

	while (n > 0) {
		ssize_t k = recv(fd, c, n, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0)
			errno = 0;
		if (k <= 0)
			return (-1);
		c += k;
		n -= (size_t)k;
	}
	return (0);
}

/* One line ending in CRLF, into buf (NUL-terminated, CRLF kept). */
static inline int
sm_test_recv_line(int fd, char *buf, size_t size)
{
	size_t have = 0;

	while (have < 2 || memcmp(buf + have - 2, "\r\n", 2) != 0) {
		if (have == size - 1 || sm_test_recv_all(fd, buf + have,
		    1) != 0)
			return (-1);
		have++;
	}
	buf[have] = '\0';
	return (0);
}

/* Append n bytes of the body; keeps it NUL-terminated. */
static inline int
sm_test_body_add(struct sm_test_resp *rs, int fd, size_t n)
{
	unsigned char *b = realloc(rs->body, rs->len + n + 1);

	if (b == NULL)
		return (-1);
	rs->body = b;
	if (sm_test_recv_all(fd, b + rs->len, n) != 0)
		return (-1);
	rs->len += n;
	b[rs->len] = '\0';
	return (0);
}

/* Read one response from fd into rs (free it with sm_test_resp_free). */
static inline int
sm_test_read_resp(int fd, struct sm_test_resp *rs)
{
	size_t have = 0;
	const char *cl, *te;

	for (;;) {
		memset(rs, 0, sizeof(*rs));
		have = 0;
		while (have < 4 || memcmp(rs->head + have - 4, "\r\n\r\n",
		    4) != 0) {
			if (have == sizeof(rs->head) - 1 ||
			    sm_test_recv_all(fd, rs->head + have, 1) != 0)
				return (-1);
			have++;
		}
		rs->head[have] = '\0';
		if (sscanf(rs->head, "HTTP/1.%*d %d", &rs->status) != 1)
			return (-1);
		if (rs->status != 100)
			break;
	}
	if ((rs->body = malloc(1)) == NULL)
		return (-1);
	rs->body[0] = '\0';
	te = sm_test_resp_header(rs, "Transfer-Encoding");
	if (te != NULL && strcasecmp(te, "chunked") == 0) {
		char line[256];

		for (;;) {
			char *end;
			unsigned long sz;

			if (sm_test_recv_line(fd, line, sizeof(line)) != 0)
				goto fail;
			sz = strtoul(line, &end, 16);
			if (end == line)
				goto fail;
			if (sz == 0)
				break;
			if (sm_test_body_add(rs, fd, sz) != 0 ||
			    sm_test_recv_line(fd, line, sizeof(line)) != 0)
				goto fail;
		}
		/* Trailers, then the empty line. */
		do {
			if (sm_test_recv_line(fd, line, sizeof(line)) != 0)
				goto fail;
		} while (strcmp(line, "\r\n") != 0);
		return (0);
	}
	cl = sm_test_resp_header(rs, "Content-Length");
	if (cl != NULL) {
		if (sm_test_body_add(rs, fd, (size_t)strtoull(cl, NULL,
		    10)) != 0)
			goto fail;
		return (0);
	}
	/* Neither: the body runs to the close the server announced. */
	te = sm_test_resp_header(rs, "Connection");
	if (te != NULL && strcasecmp(te, "close") == 0 &&
	    rs->status != 204 && rs->status != 304) {
		unsigned char buf[65536];
		ssize_t k;

		while ((k = recv(fd, buf, sizeof(buf), 0)) != 0) {
			unsigned char *b;

			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0 || (b = realloc(rs->body, rs->len +
			    (size_t)k + 1)) == NULL)
				goto fail;
			rs->body = b;
			memcpy(b + rs->len, buf, (size_t)k);
			rs->len += (size_t)k;
			b[rs->len] = '\0';
		}
	}
	return (0);
fail:
	sm_test_resp_free(rs);
	return (-1);
}

#endif /* SM_TEST_HTTP_H */
