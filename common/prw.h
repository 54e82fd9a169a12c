/*
 * prw.h -- Prometheus remote write 1.0 out: a WriteRequest (prometheus.
 * WriteRequest: time series of labels and samples) encoded as protobuf,
 * compressed with snappy's block format, and POSTed as the spec says
 * (Content-Encoding: snappy, Content-Type: application/x-protobuf,
 * X-Prometheus-Remote-Write-Version: 0.1.0).  Used by the recording
 * rules (querier/rules.c); the one wrapper of libsnappy.
 *
 * Wire facts (prompb/remote.proto, types.proto): WriteRequest{1: repeated
 * TimeSeries}; TimeSeries{1: repeated Label, 2: repeated Sample};
 * Label{1: name, 2: value}; Sample{1: double value, 2: int64 timestamp
 * in ms}.  Labels must be sorted by name and include __name__; samples
 * in time order.
 *
 * Errors: sm_prw_send answers 0 for a 2xx; SM_EINVAL for a 4xx (the
 * receiver refused the data: retrying it changes nothing; the answer's
 * start is in err); SM_EUNAVAIL for a 5xx, 429 or a transport error;
 * SM_ETIMEDOUT.  No locking: every call is self-contained.
 */
#ifndef SM_PRW_H
#define SM_PRW_H

#include <stdint.h>

#include "buf.h"
#include "sm.h"

struct sm_prw_label {
	const char *name, *value;
};

struct sm_prw_series {
	const struct sm_prw_label *labels;   /* sorted by name */
	uint32_t nlabels;
	const int64_t *ts;                   /* ms, ascending */
	const double *v;
	uint32_t n;
};

/* The compressed WriteRequest of s[0..n) into out (reset first).  0,
 * SM_ENOMEM or SM_ETOOBIG (over snappy's 4 GiB). */
int sm_prw_encode(const struct sm_prw_series *s, uint32_t n,
    struct sm_buf *out, struct sm_err *err);

/* POST an encoded request to url (ca_file: NULL = the system store). */
int sm_prw_send(const char *url, const char *ca_file, int64_t timeout_ms,
    const struct sm_buf *body, struct sm_err *err);

#endif /* SM_PRW_H */
