/*
 * sm_test_swift.h -- a real S3 server for C tests: a one-node OpenStack
 * Swift with its s3api middleware on loopback ports, started and stopped
 * by tests/tools/swift_s3.py (every process by its PID).  A mock S3 would
 * prove nothing about signing, ranges, listings or errors; Swift's
 * semantics are weaker than AWS's (no conditional PUT, lagging listings),
 * so what passes here holds on S3, GCS and Ceph.
 *
 * swift_start fills the fields an S3 sm_bucket_cfg needs (strings owned
 * by the struct).  Swift is a Debian package `make deps` installs, so a
 * failure to start is a test failure, not a skip.
 */
#ifndef SM_TEST_SWIFT_H
#define SM_TEST_SWIFT_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bucket.h"
#include "common/json.h"

struct swift {
	char dir[64];
	char endpoint[64];     /* 127.0.0.1:port */
	char port[16];
	char region[32], access[64], secret[64], bucket[64];
	int proxy_pid;         /* the S3 front (SIGSTOP it to make it hang) */
	int up;
};

/* A string member of the server's description ("" when missing). */
static inline const char *
swift_field(const struct sm_json *j, const char *name)
{
	const char *s = sm_json_str(sm_json_get(j, name));

	return (s != NULL ? s : "");
}

static inline int
swift_start(struct swift *s)
{
	char cmd[512], line[4096], path[256];
	struct sm_json *j = NULL, *pids;
	int64_t pid;
	FILE *p;
	int ok;

	memset(s, 0, sizeof(*s));
	snprintf(s->dir, sizeof(s->dir), "/tmp/smolder-swift-XXXXXX");
	if (mkdtemp(s->dir) == NULL)
		return (-1);
	snprintf(cmd, sizeof(cmd), "python3 %s start %s",
	    sm_test_path(path, sizeof(path), "tests/tools/swift_s3.py"),
	    s->dir);
	if ((p = popen(cmd, "r")) == NULL)
		return (-1);
	ok = fgets(line, sizeof(line), p) != NULL;
	ok = pclose(p) == 0 && ok;
	if (!ok || sm_json_parse(line, strlen(line), 0, &j, NULL) != 0)
		return (-1);
	snprintf(s->endpoint, sizeof(s->endpoint), "%s",
	    swift_field(j, "endpoint"));
	snprintf(s->region, sizeof(s->region), "%s", swift_field(j, "region"));
	snprintf(s->access, sizeof(s->access), "%s",
	    swift_field(j, "access_key"));
	snprintf(s->secret, sizeof(s->secret), "%s",
	    swift_field(j, "secret_key"));
	snprintf(s->bucket, sizeof(s->bucket), "%s", swift_field(j, "bucket"));
	pids = sm_json_get(j, "pids");
	/* the proxy is started last */
	if (sm_json_len(pids) > 0 && sm_json_int_in(sm_json_at(pids,
	    sm_json_len(pids) - 1), 1, INT_MAX, &pid))
		s->proxy_pid = (int)pid;
	sm_json_free(j);
	snprintf(s->port, sizeof(s->port), "%s",
	    strchr(s->endpoint, ':') != NULL ? strchr(s->endpoint, ':') + 1 :
	    "");
	s->up = 1;
	return (0);
}

static inline void
swift_stop(struct swift *s)
{
	char cmd[512], path[256];

	if (s->dir[0] == '\0')
		return;
	snprintf(cmd, sizeof(cmd), "python3 %s stop %s; rm -rf %s",
	    sm_test_path(path, sizeof(path), "tests/tools/swift_s3.py"),
	    s->dir, s->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "swift stop %s failed\n", s->dir);
	s->dir[0] = '\0';
	s->up = 0;
}

/*
 * An S3 bucket config for a loopback server at `endpoint`: path-style
 * over http with the given bucket and keys, no session token or
 * credentials file, 5 s timeouts and 2 retries.  The strings are
 * borrowed.
 */
static inline void
s3_test_cfg(struct sm_bucket_cfg *c, const char *endpoint,
    const char *bucket, const char *region, const char *access,
    const char *secret)
{
	memset(c, 0, sizeof(*c));
	c->backend = (char *)"s3";
	c->prefix = (char *)"";
	c->fs_dir = (char *)"";
	c->s3_endpoint = (char *)endpoint;
	c->s3_bucket = (char *)bucket;
	c->s3_region = (char *)region;
	c->s3_access_key_id = (char *)access;
	c->s3_secret_access_key = (char *)secret;
	c->s3_session_token = (char *)"";
	c->s3_credentials_file = (char *)"";
	c->s3_lookup = (char *)"path";
	c->s3_ca_path = (char *)"";
	c->s3_insecure = true;
	c->s3_timeout_ms = 5000;
	c->s3_max_retries = 2;
}

/* An S3 bucket config for s (s3_test_cfg). */
static inline void
swift_cfg(const struct swift *s, struct sm_bucket_cfg *c)
{
	s3_test_cfg(c, s->endpoint, s->bucket, s->region, s->access,
	    s->secret);
}

#endif /* SM_TEST_SWIFT_H */
