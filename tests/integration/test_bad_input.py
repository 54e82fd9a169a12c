#!/usr/bin/env python3
"""
test_bad_input.py -- hostile and broken uploads get a precise 4xx and never
hurt the process.

Server A (default limits):
  - malformed pprof, built field by field (docs/wire-formats.md §7 malformed_profile: no
    sample types, location/function id 0, value count mismatch, string
    index out of range, string_table[0] != "", unknown location/function,
    '-' in a sample type, invalid UTF-8, wrong wire type, truncated
    protobuf, absurd length prefix, too many sample labels) -> 422 with a
    JSON {"code","message"};
  - truncated gzip -> 422; random garbage as pprof (raw and multipart) ->
    422; legacy text as pprof -> 422;
  - a raw (not gzipped) pprof sent as "profile.pb.gz" and as format=pprof
    -> 200 (gzip is detected by magic bytes) and its stacks are queryable;
  - decompression bombs: 50 MiB of zeros gzipped, and a valid profile
    padded to 4 MiB + 64 KiB -> 413 or 422 naming the size limit; the same
    profile padded to 4 MiB - 64 KiB -> 200;
  - over-deep stacks (1500 frames) are truncated to the root-most 1000
    frames and a 70000-byte symbol keeps its last 65535 bytes (Pyroscope's
    max_profile_stacktrace_depth / max_profile_symbol_value_length);
  - /ingest name errors -> 400: missing, empty, bad characters (also a
    NUL byte), reserved __name__; an unclosed tag list only must not 5xx
    (Pyroscope accepts it);
  - folded: unknown type suffix -> 400 (invalid_argument on the folded
    push path, docs/wire-formats.md §2); bad count -> 400 or 422; binary garbage -> no 5xx;
  - multipart without a profile part, without a boundary, with a broken
    closing delimiter, with invalid sample_type_config JSON -> 4xx;
  - /render with a broken selector, negative maxNodes, from > until,
    unknown type -> 4xx; a non-numeric maxNodes -> no 5xx.
Server B (-distributor.ingestion-body-limit-mb=1): a 2 MiB body with a
Content-Length, and chunked bodies of 1.125 and 2 MiB -> 413, read off a
raw socket.

After each: the process is alive; at the end /ready is 200, and SIGTERM
gives exit status 0 with no sanitizer report in stderr.
"""

import gzip
import json
import os
import random
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from oracle import build_profile  # noqa: E402
from smolder import (Results, Server, ServerError, check_error,  # noqa: E402
                     data_dir, encode_multipart, install_timeout)

BUDGET_S = 170
MiB = 1 << 20

# A valid minimal profile: main -> foo, 100 ns of cpu.
S = ["", "cpu", "nanoseconds", "main", "main.go", "foo"]
T = [(1, 2)]
F = [(1, 3, 3, 4), (2, 5, 5, 4)]
L = [(1, 0, 0x10, [(2, 10)]), (2, 0, 0x20, [(1, 5)])]
SMP = [([1, 2], [100])]
TYPE_ID = "process_cpu:cpu:nanoseconds::"


def base(**kw):
    args = dict(strings=S, sample_types=T, samples=SMP, locations=L,
                functions=F)
    args.update(kw)
    return build_profile(**args)


def malformed_cases():
    valid = base()
    out = [
        ("no sample types (empty profile)",
         base(sample_types=[], samples=[([1, 2], [])])),
        ("location id 0",
         base(locations=[(0, 0, 0x10, [(2, 10)]), (2, 0, 0x20, [(1, 5)])],
              samples=[([0, 2], [100])])),
        ("one function id 0",
         base(functions=[(0, 3, 3, 4), (2, 5, 5, 4)],
              locations=[(1, 0, 0x10, [(2, 10)]), (2, 0, 0x20, [(0, 5)])])),
        ("sample with 2 values for 1 sample type",
         base(samples=[([1, 2], [100, 7])])),
        ("function name string index out of range",
         base(functions=[(1, 3, 3, 4), (2, 99, 5, 4)])),
        ("sample type string index out of range", base(sample_types=[(1, 77)])),
        ("string_table[0] is not empty",
         base(strings=["x"] + S[1:])),
        ("sample references unknown location 7",
         base(samples=[([1, 7], [100])])),
        ("line references unknown function 9",
         base(locations=[(1, 0, 0x10, [(9, 10)]), (2, 0, 0x20, [(1, 5)])])),
        ("sample type name with '-'",
         base(strings=["", "cpu-time", "nanoseconds", "main", "main.go",
                       "foo"])),
        ("function name is not valid UTF-8",
         base(strings=S[:5] + [b"fo\xff\xfeo"])),
        ("too many labels on one sample (101 > 100)",
         base(strings=S + ["k%d" % i for i in range(101)] + ["v"],
              samples=[([1, 2], [100],
                        [(len(S) + i, len(S) + 101) for i in range(101)])])),
        ("truncated protobuf (cut mid-field)", valid[:len(valid) // 2 + 1]),
        ("length prefix of 2^40 bytes",
         bytes([0x32]) + oracle.encode_varint(1 << 40) + b"abc"),
        # Pyroscope's vtproto decoder: "proto: wrong wireType = 0 for
        # field Sample".
        ("sample field with a varint wire type",
         bytes([0x10, 0x05]) + valid),
        ("field number 0", b"\x00\x01" + valid),
    ]
    return out


def check_err(r, resp, what, statuses, msg_any=None):
    """4xx in `statuses`, JSON {"code","message"} body with a message
    (naming one of msg_any, when given)."""
    return check_error(r, resp, what, statuses, msg_any and (
        lambda m: any(s in m.lower() for s in msg_any)),
        "names none of %r" % (msg_any,))


def alive(r, srv, what):
    if not srv.alive():
        r.fail("%s: server alive" % what, srv.stderr_tail())
        return False
    return True


def pprof_raw(srv, app, body):
    return srv.ingest({"name": app, "format": "pprof"}, body,
                      "application/octet-stream")


def raw_http(port, method, path, headers, body_chunks, timeout=30):
    """Send a request on a raw socket, tolerating the server closing early;
    returns (status or None, response bytes, note)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    note = ""
    try:
        head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (method, path)
        for k, v in headers.items():
            head += "%s: %s\r\n" % (k, v)
        s.sendall((head + "\r\n").encode())
        try:
            for c in body_chunks:
                s.sendall(c)
        except (BrokenPipeError, ConnectionResetError) as e:
            note = "server closed while we sent (%s)" % type(e).__name__
        data = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
                if b"\r\n\r\n" in data:
                    hdr, _, rest = data.partition(b"\r\n\r\n")
                    cl = None
                    for ln in hdr.split(b"\r\n")[1:]:
                        k, _, v = ln.partition(b":")
                        if k.strip().lower() == b"content-length":
                            cl = int(v.strip())
                    if cl is not None and len(rest) >= cl:
                        break
        except ConnectionResetError:
            note += "; connection reset while reading the response"
        except socket.timeout:
            note += "; timed out reading the response"
    finally:
        s.close()
    status = None
    if data.startswith(b"HTTP/1."):
        try:
            status = int(data.split(b" ", 2)[1])
        except ValueError:
            pass
    return status, data, note


def body_limit_tests(r):
    try:
        srv = Server(extra_flags=["-distributor.ingestion-body-limit-mb=1"],
                     name="smolder(body-limit 1 MiB)").start()
    except ServerError as e:
        r.fail("server starts with -distributor.ingestion-body-limit-mb=1",
               str(e))
        return
    try:
        big = random.Random(7).randbytes(2 * MiB)
        now = int(time.time())
        path = "/ingest?name=bodylimit&format=pprof&from=%d" % now
        st, data, note = raw_http(srv.port, "POST", path, {
            "Content-Type": "application/octet-stream",
            "Content-Length": str(len(big))},
            [big[i:i + 65536] for i in range(0, len(big), 65536)])
        r.check(st == 413, "2 MiB body with Content-Length over a 1 MiB "
                "limit -> 413", "status %r %s\n%r" % (st, note, data[:300]))
        alive(r, srv, "after the 2 MiB body")

        def chunked(body):
            for i in range(0, len(body), 65536):
                c = body[i:i + 65536]
                yield b"%x\r\n" % len(c) + c + b"\r\n"
            yield b"0\r\n\r\n"
        # Just over the limit (within any drain window), then far over it.
        for size in (MiB + 128 * 1024, 2 * MiB):
            st, data, note = raw_http(srv.port, "POST", path, {
                "Content-Type": "application/octet-stream",
                "Transfer-Encoding": "chunked"}, chunked(big[:size]))
            r.check(st == 413, "%d KiB chunked body over a 1 MiB limit -> "
                    "413" % (size // 1024), "status %r %s\n%r" % (
                        st, note, data[:300]))
            alive(r, srv, "after the chunked body")

        small = gzip.compress(base())
        resp = pprof_raw(srv, "bodylimit-small", small)
        r.check(resp.status == 200, "a small profile under the 1 MiB limit "
                "-> 200", resp.describe())
        r.check(srv.ready(), "body-limit server /ready after oversized "
                "bodies")
    finally:
        srv.check_stopped(r)


def main():
    r = Results("test_bad_input")
    install_timeout(BUDGET_S)
    try:
        srv = Server(name="smolder").start()
    except ServerError as e:
        r.fail("server starts", str(e))
        r.finish()
    try:
        n = 0
        # -- malformed pprof ---------------------------------------------------
        for what, body in malformed_cases():
            n += 1
            resp = pprof_raw(srv, "bad-%d" % n, gzip.compress(body))
            check_err(r, resp, "malformed pprof: " + what, (422,))
            alive(r, srv, what)

        # the valid base is accepted (so the cases above fail for their flaw)
        resp = pprof_raw(srv, "good-base", gzip.compress(base()))
        r.check(resp.status == 200, "the valid minimal profile -> 200",
                resp.describe())
        _, got = srv.render_collapsed(TYPE_ID, "good-base")
        r.eq(got, {"main;foo": 100}, "the valid minimal profile renders")

        # -- gzip ----------------------------------------------------------------
        with open(os.path.join(data_dir(), "pprof__sample.cpu"), "rb") as f:
            sample_gz = f.read()
        raw = gzip.decompress(sample_gz)
        for cut in (10, len(sample_gz) // 2, len(sample_gz) - 9):
            resp = pprof_raw(srv, "trunc-gz", sample_gz[:cut])
            check_err(r, resp, "gzip truncated to %d of %d bytes" % (
                cut, len(sample_gz)), (422,))
            alive(r, srv, "truncated gzip")
        corrupt = bytearray(sample_gz)
        corrupt[len(corrupt) // 2] ^= 0xFF
        resp = pprof_raw(srv, "corrupt-gz", bytes(corrupt))
        check_err(r, resp, "gzip with a flipped byte (bad CRC/data)", (422,))

        exp = oracle.expected_for(os.path.join(data_dir(), "pprof__sample.cpu")) \
            if oracle.have_go() else None
        resp = srv.ingest_multipart({"name": "notgz-multipart"}, raw)
        r.check(resp.status == 200, "raw (not gzipped) pprof as the "
                "multipart profile part -> 200 (magic-byte detection)",
                resp.describe())
        body, ctype = encode_multipart([("profile", "cpu.pb.gz", raw,
                                         "application/gzip")])
        resp = srv.ingest({"name": "notgz-named"}, body, ctype)
        r.check(resp.status == 200, "raw pprof as a part named cpu.pb.gz "
                "with Content-Type application/gzip -> 200", resp.describe())
        resp = pprof_raw(srv, "notgz-raw", raw)
        r.check(resp.status == 200, "raw (not gzipped) pprof body, "
                "format=pprof -> 200", resp.describe())
        if exp is not None:
            for app in ("notgz-named", "notgz-raw"):
                _, got = srv.render_collapsed(exp.type_ids[1], app)
                r.check(got == exp.stacks[1], "%s renders the oracle's "
                        "stacks" % app,
                        oracle.diff_stacks(exp.stacks[1], got or {}))

        # -- garbage -------------------------------------------------------------
        rnd = random.Random(1234)
        for size in (1, 17, 4096, 300000):
            g = rnd.randbytes(size)
            resp = pprof_raw(srv, "garbage", g)
            check_err(r, resp, "%d random bytes as format=pprof" % size,
                      (422,))
            alive(r, srv, "garbage")
        resp = srv.ingest_multipart({"name": "garbage-mp"},
                                    rnd.randbytes(5000))
        check_err(r, resp, "random bytes as the multipart profile", (422,))
        for legacy in ("pprof__gobench.cpu", "pprof__java.cpu.string"):
            with open(os.path.join(data_dir(), legacy), "rb") as f:
                resp = pprof_raw(srv, "legacy", f.read())
            check_err(r, resp, "%s as format=pprof" % legacy, (422,))
        resp = pprof_raw(srv, "gzipped-garbage", gzip.compress(
            rnd.randbytes(10000)))
        check_err(r, resp, "gzipped random bytes as format=pprof", (422,))

        # -- bombs ---------------------------------------------------------------
        bomb = gzip.compress(b"\0" * (50 * MiB), 9)
        resp = pprof_raw(srv, "bomb", bomb)
        check_err(r, resp, "gzip bomb (%d KiB -> 50 MiB of zeros)" % (
            len(bomb) // 1024), (413, 422),
            msg_any=("limit", "size", "too large", "exceed"))
        alive(r, srv, "gzip bomb")
        bomb_mp = srv.ingest_multipart({"name": "bomb-mp"}, bomb)
        check_err(r, bomb_mp, "gzip bomb as the multipart profile",
                  (413, 422), msg_any=("limit", "size", "too large",
                                       "exceed"))

        def padded(total):
            p = base()
            pad = total - len(p) - 8
            return p + oracle.field_bytes(6, 2, b"x" * pad)

        over = padded(4 * MiB + 64 * 1024)
        resp = pprof_raw(srv, "over4mib", gzip.compress(over))
        check_err(r, resp, "valid profile of %d bytes uncompressed (> 4 MiB)"
                  % len(over), (413, 422),
                  msg_any=("limit", "size", "too large", "exceed"))
        under = padded(4 * MiB - 64 * 1024)
        resp = pprof_raw(srv, "under4mib", gzip.compress(under))
        r.check(resp.status == 200, "valid profile of %d bytes uncompressed "
                "(< 4 MiB) -> 200" % len(under), resp.describe())

        # -- depth and symbol length limits --------------------------------------
        nfr = 1500
        strings = ["", "cpu", "nanoseconds"] + ["f%d" % i for i in range(nfr)]
        funcs = [(i + 1, 3 + i, 3 + i, 0) for i in range(nfr)]
        locs = [(i + 1, 0, 0, [(i + 1, 1)]) for i in range(nfr)]
        # leaf first: location nfr is the leaf, location 1 the root
        deep = build_profile(strings, [(1, 2)],
                             [(list(range(nfr, 0, -1)), [5])], locs, funcs)
        resp = pprof_raw(srv, "deep", gzip.compress(deep))
        if r.check(resp.status == 200, "a 1500-frame stack -> 200",
                   resp.describe()):
            _, got = srv.render_collapsed(TYPE_ID, "deep")
            want = {";".join("f%d" % i for i in range(1000)): 5}
            r.check(got == want, "a 1500-frame stack keeps its 1000 root "
                    "frames", oracle.diff_stacks(want, got or {}))
        longname = "n" * 4465 + "".join(chr(97 + i % 26) for i in range(65535))
        longp = build_profile(["", "cpu", "nanoseconds", longname],
                              [(1, 2)], [([1], [3])],
                              [(1, 0, 0, [(1, 1)])], [(1, 3, 3, 0)])
        resp = pprof_raw(srv, "longsym", gzip.compress(longp))
        if r.check(resp.status == 200, "a 70000-byte symbol -> 200",
                   resp.describe()):
            _, got = srv.render_collapsed(TYPE_ID, "longsym")
            want = {longname[-65535:]: 3}
            r.check(got == want, "a 70000-byte symbol keeps its last 65535 "
                    "bytes", "got %r" % (
                        {k[:40] + "...(%d)" % len(k): v for k, v in
                         (got or {}).items()}))

        # -- names ---------------------------------------------------------------
        folded = b"a;b 1\n"
        for what, q in [
                ("missing name", {}),
                ("empty name", {"name": ""}),
                ("name with a space", {"name": "my app.cpu"}),
                ("name with ';'", {"name": "app;x.cpu"}),
                ("name with a quote", {"name": 'app".cpu'}),
                ("tag key with '-'", {"name": "app.cpu{bad-key=v}"}),
                ("reserved __name__ tag", {"name": "app.cpu{__name__=x}"}),
                ("only tags, no app", {"name": "{env=prod}"}),
                ("name with a NUL byte", {"name": "app\x00x.cpu"}),
                ("name with a non-ASCII letter", {"name": "\u00e4pp.cpu"})]:
            resp = srv.ingest(q, folded)
            check_err(r, resp, "folded, " + what, (400,))
            alive(r, srv, what)
        resp = pprof_raw(srv, "bad name!", gzip.compress(base()))
        check_err(r, resp, "pprof with a bad name", (400,))
        # Pyroscope's key parser accepts an unclosed tag list (the open
        # tag is dropped), so only "no 5xx" is asked here.
        resp = srv.ingest({"name": "app.cpu{env=prod"}, folded)
        r.check(resp.status < 500, "folded, unclosed tag list: no 5xx",
                resp.describe())

        # -- folded --------------------------------------------------------------
        resp = srv.ingest({"name": "app.bogus"}, folded)
        check_err(r, resp, "folded with unknown type suffix .bogus", (400,),
                  msg_any=("unknown profile type", "bogus"))
        for what, body in [("non-numeric count", b"a;b notanumber\n"),
                           ("count overflowing int64",
                            b"a;b 99999999999999999999999\n"),
                           ("negative count", b"a;b -5\n")]:
            resp = srv.ingest({"name": "badcount.cpu"}, body)
            if what == "negative count":
                r.check(resp.status in (200, 400, 422), "folded %s -> 200 "
                        "(dropped) or 400/422" % what, resp.describe())
            else:
                check_err(r, resp, "folded " + what, (400, 422))
            alive(r, srv, what)
        resp = srv.ingest({"name": "garbage.cpu"}, rnd.randbytes(20000))
        r.check(resp.status < 500, "folded random bytes: no 5xx",
                resp.describe())
        alive(r, srv, "folded garbage")

        # -- multipart -----------------------------------------------------------
        gz = gzip.compress(base())
        body, ctype = encode_multipart([("other", "x", gz, None)])
        resp = srv.ingest({"name": "mp-noprofile"}, body, ctype)
        r.check(400 <= resp.status < 500, "multipart without a profile part "
                "-> 4xx", resp.describe())
        body, ctype = encode_multipart([("profile", "p", gz, None)])
        resp = srv.ingest({"name": "mp-noboundary"}, body,
                          "multipart/form-data")
        r.check(400 <= resp.status < 500, "multipart Content-Type without a "
                "boundary -> 4xx", resp.describe())
        resp = srv.ingest({"name": "mp-unclosed"}, body[:-8], ctype)
        r.check(400 <= resp.status < 500, "multipart without its closing "
                "delimiter -> 4xx", resp.describe())
        resp = srv.ingest({"name": "mp-wrongboundary"}, body,
                          "multipart/form-data; boundary=nothere")
        r.check(400 <= resp.status < 500, "multipart with a boundary that "
                "never occurs -> 4xx", resp.describe())
        resp = srv.ingest_multipart({"name": "mp-badjson"}, gz,
                                    sample_type_config=b"{not json")
        r.check(400 <= resp.status < 500, "sample_type_config that is not "
                "JSON -> 4xx", resp.describe())
        resp = srv.ingest_multipart({"name": "mp-jsonarray"}, gz,
                                    sample_type_config=b"[1,2,3]")
        r.check(resp.status < 500, "sample_type_config that is a JSON "
                "array: no 5xx", resp.describe())
        alive(r, srv, "multipart")
        resp = pprof_raw(srv, "empty-body", b"")
        r.check(resp.status < 500, "empty format=pprof body: no 5xx",
                resp.describe())

        # -- render --------------------------------------------------------------
        now = int(time.time())
        for what, q in [
                ("broken selector", {"query": '{service_name="x"'}),
                ("unknown operator", {"query": 'process_cpu:cpu:nanoseconds:'
                                      'cpu:nanoseconds{service_name~"x"}'}),
                ("malformed type id", {"query": 'a:b{service_name="x"}'}),
                ("negative maxNodes", {"query": TYPE_ID + '{}',
                                       "maxNodes": "-1"}),
                ("from after until", {"query": TYPE_ID + '{}',
                                      "from": str(now),
                                      "until": str(now - 3600)}),
                ("unparseable from", {"query": TYPE_ID + '{}',
                                      "from": "yesterday-ish"}),
                ("missing query", {})]:
            q.setdefault("from", str(now - 3600))
            q.setdefault("until", str(now + 60))
            resp = srv.request("GET", "/render", q)
            r.check(400 <= resp.status < 500, "render with %s -> 4xx" % what,
                    resp.describe())
            alive(r, srv, "render " + what)
        # Pyroscope ignores a maxNodes that is not a number (default cut).
        resp = srv.request("GET", "/render", {
            "query": TYPE_ID + '{}', "maxNodes": "lots",
            "from": str(now - 3600), "until": str(now + 60)})
        r.check(resp.status < 500, "render with maxNodes=lots: no 5xx",
                resp.describe())

        r.check(srv.ready(), "/ready is 200 after all bad input")
    except Exception as e:  # includes TestTimeout
        import traceback
        r.fail("test ran to completion", "%s: %s\n%s" % (
            type(e).__name__, e, traceback.format_exc()))
    finally:
        srv.check_stopped(r)

    try:
        body_limit_tests(r)
    except Exception as e:
        import traceback
        r.fail("body-limit tests ran to completion", "%s: %s\n%s" % (
            type(e).__name__, e, traceback.format_exc()))
    r.finish()


if __name__ == "__main__":
    main()
