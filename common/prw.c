/*
 * prw.c -- see prw.h.
 */
#include "prw.h"

#include <string.h>

#include <snappy-c.h>

#include "httpc.h"
#include "varint.h"



static void
put_uv(struct sm_buf *b, uint64_t v)
{
	uint8_t t[SM_UVARINT_MAX];

	sm_buf_append(b, t, sm_uvarint_put(t, v));
}

/* A length-delimited field's bytes: tag, length, then len bytes. */
static size_t
ld_len(size_t len)
{
	return (1 + sm_uvarint_len(len) + len);
}

static size_t
label_len(const struct sm_prw_label *l)
{
	return (ld_len(strlen(l->name)) + ld_len(strlen(l->value)));
}

static size_t
sample_len(int64_t ts)
{
	return (1 + 8 + 1 + sm_uvarint_len((uint64_t)ts));
}

static size_t
series_len(const struct sm_prw_series *s)
{
	size_t n = 0;

	for (uint32_t i = 0; i < s->nlabels; i++)
		n += ld_len(label_len(&s->labels[i]));
	for (uint32_t i = 0; i < s->n; i++)
		n += ld_len(sample_len(s->ts[i]));
	return (n);
}

static void
put_str(struct sm_buf *b, uint8_t tag, const char *s)
{
	size_t len = strlen(s);

	sm_buf_putc(b, (char)tag);
	put_uv(b, len);
	sm_buf_append(b, s, len);
}

static void
put_series(struct sm_buf *b, const struct sm_prw_series *s)
{
	sm_buf_putc(b, 0x0a);                         /* 1: TimeSeries */
	put_uv(b, series_len(s));
	for (uint32_t i = 0; i < s->nlabels; i++) {
		sm_buf_putc(b, 0x0a);                 /* 1: Label */
		put_uv(b, label_len(&s->labels[i]));
		put_str(b, 0x0a, s->labels[i].name);
		put_str(b, 0x12, s->labels[i].value);
	}
	for (uint32_t i = 0; i < s->n; i++) {
		uint64_t bits;
		uint8_t le[8];

		sm_buf_putc(b, 0x12);                 /* 2: Sample */
		put_uv(b, sample_len(s->ts[i]));
		sm_buf_putc(b, 0x09);                 /* 1: double */
		memcpy(&bits, &s->v[i], 8);
		for (int k = 0; k < 8; k++)
			le[k] = (uint8_t)(bits >> (8 * k));
		sm_buf_append(b, le, 8);
		sm_buf_putc(b, 0x10);                 /* 2: int64 */
		put_uv(b, (uint64_t)s->ts[i]);
	}
}

int
sm_prw_encode(const struct sm_prw_series *s, uint32_t n, struct sm_buf *out,
    struct sm_err *err)
{
	struct sm_buf raw = SM_BUF_INIT;
	size_t clen;
	int rv = 0;

	for (uint32_t i = 0; i < n; i++)
		put_series(&raw, &s[i]);
	if (sm_buf_error(&raw) != 0) {
		sm_buf_fini(&raw);
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	}
	if (raw.len > UINT32_MAX) {
		sm_buf_fini(&raw);
		return (sm_err_set(err, SM_ETOOBIG, "remote write: %zu bytes "
		    "before compression", raw.len));
	}
	sm_buf_reset(out);
	clen = snappy_max_compressed_length(raw.len);
	if (sm_buf_reserve(out, clen) != 0) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
	} else if (snappy_compress(raw.len > 0 ? raw.b : "", raw.len, out->b,
	    &clen) != SNAPPY_OK) {
		rv = sm_err_set(err, SM_ENOMEM, "snappy: compression failed");
	} else {
		out->len = clen;
	}
	sm_buf_fini(&raw);
	return (rv);
}

int
sm_prw_send(const char *url, const char *ca_file, int64_t timeout_ms,
    const struct sm_buf *body, struct sm_err *err)
{
	static const char *const headers[] = {
		"Content-Encoding: snappy",
		"Content-Type: application/x-protobuf",
		"X-Prometheus-Remote-Write-Version: 0.1.0",
		NULL,
	};
	struct sm_httpc_req req = { .url = url, .headers = headers,
		.body = body->b, .len = body->len, .timeout_ms = timeout_ms,
		.ca_file = ca_file };
	struct sm_buf ans = SM_BUF_INIT;
	int status = 0, rv;

	if ((rv = sm_httpc_post(&req, &status, &ans, err)) != 0) {
		sm_buf_fini(&ans);
		return (rv);
	}
	if (status >= 200 && status < 300)
		rv = 0;
	else
		rv = sm_err_set(err, status >= 400 && status < 500 &&
		    status != 429 ? SM_EINVAL : SM_EUNAVAIL, "remote write: "
		    "HTTP %d: %.*s", status, (int)SM_MIN(ans.len, 300),
		    ans.len > 0 ? ans.b : "");
	sm_buf_fini(&ans);
	return (rv);
}
