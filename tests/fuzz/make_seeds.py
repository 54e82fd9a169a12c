#!/usr/bin/env python3
"""make_seeds.py -- (re)write tests/fuzz/seeds/ from tests/data and hand-made
inputs.  The output is committed (small: real profiles up to 16 KiB); run
this again after changing the input layout of a target.

Layouts (see each fuzz_<t>.c): folded's byte 0 picks folded/lines/trie/
tree;
multipart's first line is the Content-Type; pbjson's byte 0 picks the
message type (index into fuzz_pbjson.c's table); rpc seeds are packed
smolder.v1.Request messages, encoded here by hand (field numbers from
proto/smolder/v1/rpc.proto); grpc seeds are HTTP/2 frames a client sends
and HTTP answers the gRPC listener translates (fuzz_grpc.c).
"""
import gzip
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "tests", "data")
SEEDS = os.path.join(HERE, "seeds")
MAX_PROFILE = 16 * 1024

sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from pbwire import _uv as varint  # noqa: E402
from pbwire import pb_int as f_varint  # noqa: E402
from pbwire import pb_str as f_bytes  # noqa: E402


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- protobuf wire helpers ----------------------------------------------
# Varints and tagged fields come from the integration tests' encoder.
def f_zigzag(n, v):
    return f_varint(n, (v << 1) ^ (v >> 63))


def f_fixed64(n, v):
    return varint((n << 3) | 1) + struct.pack("<Q", v)


def packed(vals):
    return b"".join(varint(v) for v in vals)


def label(k, v):
    return f_bytes(1, k) + f_bytes(2, v)


def select(tenant, matchers, start, end):
    s = f_bytes(1, tenant)
    for t, k, v in matchers:
        s += f_bytes(2, f_varint(1, t) + f_bytes(2, k) + f_bytes(3, v))
    return s + f_varint(3, start) + f_varint(4, end)


def rpc_seeds():
    tree = (f_bytes(1, "") + f_bytes(1, "main") + f_bytes(1, "work") +
            f_bytes(2, packed([0, 0, 1])) + f_bytes(3, packed([0, 1, 2])))
    series = (f_bytes(1, label("__name__", "process_cpu")) +
              f_bytes(1, label("service_name", "fuzz")) +
              f_varint(2, 1700000000000) + f_bytes(3, packed([1, 2])) +
              f_bytes(4, packed([5, 7])) +
              f_bytes(5, f_bytes(1, "gospy") + f_varint(2, 100) +
                      f_bytes(3, "samples") + f_bytes(4, "sum")))
    write = (f_bytes(1, "t1") + f_bytes(2, bytes(range(16))) +
             f_bytes(3, tree) + f_bytes(4, series))
    put("rpc", "write", f_bytes(1, write))
    sel = select("t1", [(0, "service_name", "fuzz"), (2, "__name__", "p.*")],
                 1699990000000, 1700010000000)
    put("rpc", "merge", f_bytes(2, f_bytes(1, sel)))
    put("rpc", "merge-no-select", f_bytes(2, b""))
    put("rpc", "series", f_bytes(3, f_bytes(1, sel) + f_varint(2, 10000) +
                                 f_bytes(3, "service_name")))
    put("rpc", "labels-names", f_bytes(4, f_bytes(1, sel)))
    put("rpc", "labels-values", f_bytes(4, f_bytes(1, sel) + f_varint(2, 1) +
                                        f_bytes(3, "service_name")))
    put("rpc", "labels-series", f_bytes(4, f_bytes(1, sel) + f_varint(2, 2) +
                                        f_bytes(4, "service_name") +
                                        f_varint(5, 1)))
    put("rpc", "stats", f_bytes(5, f_bytes(1, sel) +
                                f_fixed64(2, 0x1234567890abcdef)))
    put("rpc", "health", f_bytes(6, b""))
    put("rpc", "retention", f_bytes(7, f_varint(1, 1000)))
    # Per-tenant floors (TenantRetention = field 2): keep (0), a floor, a
    # negative one (keep), a repeated name; then names an ingester refuses.
    put("rpc", "retention-tenants", f_bytes(7, f_varint(1, 1000) + b"".join(
        f_bytes(2, f_bytes(1, t) + f_varint(2, v)) for t, v in
        (("keep", 0), ("long", 500), ("neg", -5), ("long", 700)))))
    put("rpc", "retention-bad-tenant", f_bytes(7, f_bytes(
        2, f_bytes(1, "a/b") + f_varint(2, 5))))
    put("rpc", "retention-empty-tenant", f_bytes(7, f_bytes(2, b"")))
    put("rpc", "empty", b"")
    _ = f_zigzag


def pprof_seeds():
    for name in sorted(os.listdir(DATA)):
        path = os.path.join(DATA, name)
        if name.endswith(".pb.gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read()
        elif name.startswith("pprof__") and not name.endswith(".string"):
            with open(path, "rb") as f:
                raw = f.read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
        else:
            continue
        if len(raw) <= MAX_PROFILE:
            put("pprof", name.replace(".gz", ""), raw)


def folded_seeds():
    for name in sorted(os.listdir(DATA)):
        if not name.startswith("speedscope__") or name.endswith(".jfr") \
                or name.endswith(".json"):
            continue
        with open(os.path.join(DATA, name), "rb") as f:
            raw = f.read()
        put("folded", "folded-" + name, b"\x00" + raw)
        put("folded", "folded-scaled-" + name, b"\x81" + raw)
    put("folded", "lines-1", b"\x01a;b;c\na;b\r\n\xef\xbb\xbfa;b;d\n")
    put("folded", "folded-bad-count", b"\x00a;b 12x\n")
    put("folded", "folded-big", b"\x80a;b 9223372036854775807\n")

    def node(name, value, children):
        return (varint(len(name)) + name + varint(value) +
                varint(len(children)) + b"".join(children))
    trie = node(b"", 0, [node(b"a;b", 3, [node(b";c", 2, [])]),
                         node(b"x", 1, [])])
    put("folded", "trie-1", b"\x02" + trie)
    put("folded", "trie-truncated", b"\x02" + trie[:-3])
    tree = node(b"", 0, [node(b"a", 1, [node(b"b", 3, []),
                                         node(b"c;d", 2, [])]),
                         node(b"x", 5, [])])
    put("folded", "tree-1", b"\x03" + tree)
    put("folded", "tree-scaled", b"\x83" + tree)
    put("folded", "tree-truncated", b"\x03" + tree[:-2])


def speedscope_seeds():
    schema = b'"$schema":"https://www.speedscope.app/file-format-schema.json"'
    for name in sorted(os.listdir(DATA)):
        if not name.endswith(".speedscope.json"):
            continue
        with open(os.path.join(DATA, name), "rb") as f:
            raw = f.read()
        put("speedscope", name, b"\x00" + raw)
        put("speedscope", "alloc-" + name, b"\x01" + raw)
    put("speedscope", "evented-ms",
        b"\x02{" + schema + b',"shared":{"frames":[{"name":"m"},'
        b'{"name":"w\\u00e9"}]},"profiles":[{"type":"evented","name":"t",'
        b'"unit":"milliseconds","startValue":1,"events":[{"type":"O",'
        b'"at":1,"frame":0},{"type":"O","at":1.5,"frame":1},{"type":"C",'
        b'"at":2,"frame":1},{"type":"C","at":3.25,"frame":0}]}]}')
    put("speedscope", "bytes-two",
        b"\x04{" + schema + b',"shared":{"frames":[{"name":"f"}]},'
        b'"profiles":[{"type":"sampled","name":"p","unit":"bytes",'
        b'"samples":[[0],[0,0]],"weights":[1,2e3]},{"type":"sampled",'
        b'"name":"q","unit":"bytes","samples":[[0]],"weights":[0.5]}]}')


def multipart_seeds():
    with open(os.path.join(DATA, "pprof__sample.cpu"), "rb") as f:
        prof = f.read()
    ct = b"multipart/form-data; boundary=XbOuNd\n"
    body = (b"preamble\r\n--XbOuNd\r\n"
            b"Content-Disposition: form-data; name=\"profile\"; "
            b"filename=\"profile.pprof\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n" + prof +
            b"\r\n--XbOuNd\r\n"
            b"Content-Disposition: form-data; name=\"sample_type_config\"; "
            b"filename=\"sample_type_config.json\"\r\n\r\n"
            b"{\"alloc_space\":{\"display-name\":\"x\"}}"
            b"\r\n--XbOuNd--\r\nepilogue")
    put("multipart", "pprof-form", ct + body)
    put("multipart", "quoted-boundary",
        b"multipart/form-data; boundary=\"a b\"\n--a b\nContent-Disposition:"
        b" form-data; name=x\n\nhello\n--a b--\n")
    put("multipart", "no-close", ct + b"--XbOuNd\r\n\r\nabc")
    put("multipart", "default-ct", b"--X\r\nContent-Disposition: form-data;"
        b" name=\"jfr\"\r\n\r\nJFR\r\n--X--\r\n")


def text_seeds():
    for i, q in enumerate([
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name=\"api\"}",
            "memory:alloc_space:bytes:space:bytes:delta{}",
            "myapp.cpu{env=\"prod\",region!=\"eu\"}",
            "myapp.alloc_objects",
            "{__profile_type__=\"a:b:c:d:e\", x=~\"(a+)+\", y!~'q', z=`r`,}",
            "{a=\"\\u00e9\\x41\\101\\n\"}",
            "{a=~\"[\"}",
            "app",
            "{}",
            "{env=~\"(a+)+\"}",
    ]):
        put("selector", "q%d" % i, q)
    for i, t in enumerate([
            "now", "now-1h", "-30m", "now-2d", "-1mon", "now-1y", "-1w",
            "20230115", "1700000000", "1700000000123",
            "1700000000123456", "1700000000123456789", " 1_700,000 000 ",
            "now+5min", "19000101", "now-", "garbage", "",
    ]):
        put("attime", "t%02d" % i, t)


def pbjson_seeds():
    seeds = [
        (0, '{"series":[{"labels":[{"name":"service_name","value":"a"}],'
            '"samples":[{"rawProfile":"AAEC","ID":"x"}]}]}'),
        (1, '{"start":"1700000000000","end":1700000001000}'),
        (2, '{"matchers":["{a=\\"b\\"}"],"start":"1","end":"2"}'),
        (3, '{"name":"service_name","matchers":[],"start":"-5"}'),
        (4, '{"matchers":["{}"],"labelNames":["a","b"],"start":"0"}'),
        (5, '{"profileTypeID":"process_cpu:cpu:nanoseconds:cpu:nanoseconds",'
            '"labelSelector":"{}","start":"1","end":"2","maxNodes":"1024",'
            '"format":"PROFILE_FORMAT_TREE"}'),
        (6, '{"profile_typeID":"a:b:c:d:e","label_selector":"{}",'
            '"groupBy":["x"],"step":1.5,"aggregation":1,"limit":"3"}'),
        (7, '{"profileTypeID":"x","stackTraceSelector":null}'),
        (8, '{"left":{"start":"1"},"right":{"end":"2"}}'),
        (9, '{"flamegraph":{"names":["total"],"levels":[{"values":["0","1",'
            '"1","0"]}],"total":"1","maxSelf":"1"}}'),
        (10, '{"labelsSet":[{"labels":[{"name":"a","value":"b"}]}]}'),
        (11, '{"series":[{"points":[{"value":"NaN","timestamp":"1"},'
             '{"value":-Infinity},{"value":1e308}]}]}'),
        (12, '{"flamegraph":{"names":["a"],"total":"-1"}}'),
        (13, '{"sampleType":[{"type":"1","unit":"2"}],"stringTable":["",'
             '"cpu","ns"],"timeNanos":"1","period":"10"}'),
    ]
    for i, (t, j) in enumerate(seeds):
        put("pbjson", "j%02d" % i, bytes([t]) + j.encode())


# --- gRPC: HTTP/2 frames from a client, answers from the HTTP server -------
def h2_frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


def hpack_literal(headers):
    """Literal header fields without indexing, new names, no Huffman
    (every length below 127)."""
    b = b""
    for n, v in headers:
        b += b"\x00" + bytes([len(n)]) + n.encode() + bytes([len(v)]) + \
            v.encode()
    return b


def grpc_seeds():
    """fuzz_grpc: byte 0 = mode (bit 0: an answer) | chunk size << 1."""
    pre = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0)
    call = [(":method", "POST"), (":scheme", "http"),
            (":path", "/version.v1.Version/Version"),
            (":authority", "localhost"), ("content-type", "application/grpc"),
            ("te", "trailers"), ("grpc-timeout", "5S"),
            ("x-scope-orgid", "tenant-1")]
    msg = b"\x00\x00\x00\x00\x00"
    ok = pre + h2_frame(1, 4, 1, hpack_literal(call)) + h2_frame(0, 1, 1, msg)
    two = ok + h2_frame(1, 4, 3, hpack_literal(call)) + \
        h2_frame(0, 0, 3, msg[:3]) + h2_frame(0, 1, 3, msg[3:])
    get = pre + h2_frame(1, 5, 1, hpack_literal(
        [(":method", "GET")] + call[1:]))
    json = pre + h2_frame(1, 4, 1, hpack_literal(
        call[:4] + [("content-type", "application/grpc+json")])) + \
        h2_frame(0, 1, 1, b"\x00\x00\x00\x00\x02{}")
    rst = ok + h2_frame(3, 0, 1, struct.pack(">I", 8))
    for name, chunk, data in (("call", 0, ok), ("call-bytewise", 1, ok),
                              ("two-streams", 7, two), ("get", 0, get),
                              ("json", 3, json), ("rst", 0, rst)):
        put("grpc", name, bytes([chunk << 1]) + data)
    web = b"\x00\x00\x00\x00\x02\x08\x01" + b"\x80" + \
        struct.pack(">I", 30) + b"grpc-status:0\r\ngrpc-message:\r\n"
    answers = {
        "ok": b"HTTP/1.1 200 OK\r\nContent-Type: application/grpc-web+proto"
              b"\r\nContent-Length: %d\r\n\r\n" % len(web) + web,
        "trailers-only": b"HTTP/1.1 200 OK\r\nContent-Type: application/"
                         b"grpc-web+proto\r\ngrpc-status: 3\r\n"
                         b"grpc-message: bad%20selector\r\n\r\n",
        "refused": b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/"
                   b"json\r\n\r\n{\"code\":\"unauthenticated\",\"message\":"
                   b"\"no \\\"key\\\"\"}",
        "chunked": b"HTTP/1.1 200 OK\r\nContent-Type: application/grpc-web"
                   b"\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" %
                   len(web) + web + b"\r\n0\r\n\r\n",
    }
    for name, data in answers.items():
        put("grpc", "answer-" + name, b"\x01" + data)


def main():
    if os.path.isdir(SEEDS):
        shutil.rmtree(SEEDS)
    pprof_seeds()
    folded_seeds()
    speedscope_seeds()
    multipart_seeds()
    text_seeds()
    pbjson_seeds()
    rpc_seeds()
    grpc_seeds()


if __name__ == "__main__":
    main()
