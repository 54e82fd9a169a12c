#!/usr/bin/env python3
"""
test_http_framing.py -- the HTTP listener parses requests by RFC 9112
where libmicrohttpd alone would not, with raw bytes on a socket (no
client library sends these):

  1. Content-Length and Transfer-Encoding together (section 6.1, the
     request-smuggling case): 400, the connection closed, and the request
     hidden behind the body never runs;
  2. a transfer coding other than a lone "chunked" (gzip; gzip, chunked;
     two Transfer-Encoding fields): 501 at once, the connection closed --
     never a connection that hangs waiting for a body it cannot frame;
  3. whitespace between a field name and its colon (section 5.1): 400,
     closed;
  4. two Authorization fields: 400 (which one counts is ambiguous);
  5. an HTTP/1.1 request without Host (section 3.2): 400;
  6. and what is right still works: a chunked upload is stored, and a
     kept-alive connection serves a second request.
"""

import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import DataServer, Workspace  # noqa: E402
from smolder import run_script  # noqa: E402


def exchange(port, raw, wait=3.0):
    """Send raw bytes; return (bytes read, closed by the server?, seconds)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    s.sendall(raw)
    t, out, closed = time.monotonic(), b"", False
    try:
        while True:
            c = s.recv(65536)
            if not c:
                closed = True
                break
            out += c
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return out, closed, time.monotonic() - t


def status(out):
    try:
        return int(out.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def body(r):
    ws = Workspace("http-framing")
    r.at_end(lambda: ws.cleanup(r))
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s"), extra_flags=[
        "-validation.reject-older-than=0"]).start()
    port = srv.port
    now = int(time.time())

    # 1. smuggling: the "body" is a chunked terminator and a second request
    smuggled = (b"POST /ingest?name=smuggled.cpu&from=%d HTTP/1.1\r\n"
                b"Host: x\r\n\r\n" % now)
    out, closed, dt = exchange(port, (
        b"POST /ingest?name=front.cpu HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n") + smuggled)
    r.check(status(out) == 400 and b"Content-Length and Transfer-Encoding"
            in out and closed and dt < 2, "Content-Length with "
            "Transfer-Encoding: 400, closed (%.2fs)" % dt, out[:300])
    r.check(out.count(b"HTTP/1.1 ") == 1, "the request behind the body "
            "was not read as a second request", out[:600])

    # 2. transfer codings we cannot frame
    for name, hdrs in (("gzip", b"Transfer-Encoding: gzip\r\n"),
                       ("gzip, chunked",
                        b"Transfer-Encoding: gzip, chunked\r\n"),
                       ("two fields", b"Transfer-Encoding: chunked\r\n"
                        b"Transfer-Encoding: chunked\r\n")):
        out, closed, dt = exchange(port, b"POST /ingest?name=te.cpu "
                                   b"HTTP/1.1\r\nHost: x\r\n" + hdrs +
                                   b"\r\n5\r\nab")
        r.check(status(out) == 501 and closed and dt < 2,
                "Transfer-Encoding %s: 501 at once, closed (%.2fs)"
                % (name, dt), out[:300])

    # 3. whitespace before the colon
    out, closed, _ = exchange(port, b"GET /ready HTTP/1.1\r\nHost: x\r\n"
                              b"X-Scope-OrgID : t1\r\n\r\n")
    r.check(status(out) == 400 and closed, "whitespace before a field's "
            "colon: 400, closed", out[:300])

    # 4. two Authorization fields
    out, _, _ = exchange(port, b"GET /ready HTTP/1.1\r\nHost: x\r\n"
                         b"Authorization: Bearer a\r\n"
                         b"Authorization: Bearer b\r\n"
                         b"Connection: close\r\n\r\n")
    r.check(status(out) == 400 and b"Authorization" in out,
            "two Authorization fields: 400", out[:300])

    # 5. HTTP/1.1 without Host
    out, _, _ = exchange(port, b"GET /ready HTTP/1.1\r\n\r\n")
    r.check(status(out) == 400, "HTTP/1.1 without Host: 400", out[:300])

    # 6. right framing works, and keeps the connection
    out, closed, _ = exchange(port, (
        b"POST /ingest?name=chunky.cpu&from=%d HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
        b"b\r\nmain;work 5\r\n0\r\n\r\n"
        b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        % now)
    r.check(out.count(b"HTTP/1.1 200") == 2, "a chunked upload, then a "
            "second request on the same connection: 200 twice", out[:600])
    got = srv.render("chunky.cpu{}", frm=now - 60, until=now + 60,
                     fmt="collapsed")
    r.check(got.status == 200 and "main;work" in got.text(),
            "the chunked upload is stored", got.describe())
    for app in ("smuggled.cpu", "front.cpu", "te.cpu"):
        got = srv.render(app + "{}", frm=now - 3600, until=now + 3600,
                         fmt="collapsed")
        r.check(got.status == 200 and got.text().strip() == "",
                "nothing stored for %s" % app, got.describe())
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_http_framing", 120, body)
