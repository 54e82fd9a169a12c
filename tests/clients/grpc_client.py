#!/usr/bin/python3
"""
grpc_client.py -- calls Smolder's services with gRPC's own Python library
(python3-grpcio: gRPC's C core) and, for the same request bytes, with a
plain Connect binary POST over HTTP/1.1.  Run by Debian's /usr/bin/python3
(python3-grpcio and python3-protobuf are Debian packages for it), from
tests/integration/test_grpc_web.py:

  grpc_client.py <HTTP URL> <gRPC host:port> <FileDescriptorSet> <calls.json>

calls.json is client.mjs's.  Requests are built from their proto3 JSON
with the descriptors protoc wrote (no generated code).  Prints one JSON
array: per call, {"connect": A, "grpc": B}, each A/B {"response": <base64
of the answer's bytes>} or {"error": {"code": <gRPC code name, lower
case>, "message": ...}}.
"""

import base64
import json
import sys
import urllib.error
import urllib.request

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format
from google.protobuf import message_factory

# Connect code names by gRPC number (the same order).
CODES = ["ok", "canceled", "unknown", "invalid_argument",
         "deadline_exceeded", "not_found", "already_exists",
         "permission_denied", "resource_exhausted", "failed_precondition",
         "aborted", "out_of_range", "unimplemented", "internal",
         "unavailable", "data_loss", "unauthenticated"]


def connect_call(base, path, req, headers):
    h = {"Content-Type": "application/proto"}
    h.update(headers)
    rq = urllib.request.Request(base + path, data=req, headers=h,
                                method="POST")
    try:
        with urllib.request.urlopen(rq, timeout=60) as resp:
            return {"response": base64.b64encode(resp.read()).decode()}
    except urllib.error.HTTPError as e:
        err = json.loads(e.read() or b"{}")
        return {"error": {"code": err.get("code"),
                          "message": err.get("message")}}


def grpc_call(channel, path, req, headers):
    call = channel.unary_unary(path)
    md = [(k.lower(), v) for k, v in headers.items()]
    try:
        resp = call(req, metadata=md, timeout=60)
        return {"response": base64.b64encode(resp).decode()}
    except grpc.RpcError as e:
        return {"error": {"code": CODES[e.code().value[0]],
                          "message": e.details()}}


def main():
    base, target, set_file, calls_file = sys.argv[1:5]
    fds = descriptor_pb2.FileDescriptorSet()
    with open(set_file, "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    with open(calls_file) as f:
        calls = json.load(f)
    out = []
    with grpc.insecure_channel(target) as channel:
        for c in calls:
            svc = pool.FindServiceByName(c["service"])
            m = svc.methods_by_name[c["method"]]
            cls = message_factory.GetMessageClass(m.input_type) \
                if hasattr(message_factory, "GetMessageClass") else \
                message_factory.MessageFactory(pool).GetPrototype(
                    m.input_type)
            req = json_format.ParseDict(c.get("request", {}), cls(),
                                        descriptor_pool=pool)
            raw = req.SerializeToString()
            path = "/%s/%s" % (c["service"], c["method"])
            hdrs = c.get("headers", {})
            out.append({"connect": connect_call(base, path, raw, hdrs),
                        "grpc": grpc_call(channel, path, raw, hdrs)})
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
