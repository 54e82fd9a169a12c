#!/usr/bin/env python3
"""
test_grpc_limits.py -- the gRPC listener (-grpc.listen-address) holds
against clients that misbehave at the HTTP/2 level, with frames written
by hand on raw sockets (no client library would send them):

  1. an HTTP/1.1 request on the gRPC port: the connection is closed at
     once, and the listener still serves;
  2. a connection that never sends the HTTP/2 preface is closed after
     the idle timeout (or 10 s, whichever comes first);
  3. -server.http-per-ip-conn-limit bounds gRPC connections from one
     address: the one over it is closed at once;
  4. a stream whose request never ends (HEADERS without END_STREAM) is
     reset (RST_STREAM) once -server.http-idle-timeout passes, and the
     connection, idle then, gets a GOAWAY;
  5. a header list over 16 KiB is refused without a crash;
  6. a client that sends a call and goes away before the answer (its
     RST_STREAM, or its socket closed) leaves nothing behind: the server
     still answers, and exits 0 on SIGTERM with no sanitizer report with
     an idle gRPC connection still open.
"""

import os
import socket
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import DataServer, Workspace  # noqa: E402
from smolder import free_port, run_script  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY = 0, 1, 3, 4, 7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
PER_IP = 4


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


def hpack_int(v, prefix_bits, first=0):
    lim = (1 << prefix_bits) - 1
    if v < lim:
        return bytes([first | v])
    out = [first | lim]
    v -= lim
    while v >= 128:
        out.append(v % 128 + 128)
        v //= 128
    out.append(v)
    return bytes(out)


def hpack(headers):
    """Literal header fields without indexing, new names, no Huffman."""
    b = b""
    for n, v in headers:
        n, v = n.encode(), v.encode()
        b += b"\x00" + hpack_int(len(n), 7) + n + hpack_int(len(v), 7) + v
    return b


def call_headers(path="/version.v1.Version/Version", extra=()):
    return hpack([(":method", "POST"), (":scheme", "http"),
                  (":path", path), (":authority", "localhost"),
                  ("content-type", "application/grpc"),
                  ("te", "trailers")] + list(extra))


def h2_connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(PREFACE + frame(SETTINGS, 0, 0))
    return s


def read_frames(s, until, want=None, ack=True):
    """Frames (type, flags, sid, payload) until the socket closes, the
    deadline passes, or a frame of type `want` arrives; the server's
    SETTINGS are acknowledged when `ack`."""
    buf, out = b"", []
    while time.monotonic() < until:
        s.settimeout(max(0.05, until - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except OSError:
            out.append(("closed",))
            break
        if not chunk:
            out.append(("closed",))
            break
        buf += chunk
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff,
                 buf[9:9 + n])
            buf = buf[9 + n:]
            out.append(f)
            if f[0] == SETTINGS and not (f[1] & ACK) and ack:
                try:
                    s.sendall(frame(SETTINGS, ACK, 0))
                except OSError:
                    pass
            if want is not None and f[0] == want:
                return out
    return out


def closed_within(s, seconds):
    t = time.monotonic()
    fr = read_frames(s, t + seconds, ack=False)
    return fr and fr[-1] == ("closed",), time.monotonic() - t


def grpc_ok(port):
    """A Version call by hand: grpc-status 0 in the trailers."""
    s = h2_connect(port)
    s.sendall(frame(HEADERS, END_HEADERS, 1, call_headers()) +
              frame(DATA, END_STREAM, 1, b"\x00\x00\x00\x00\x00"))
    fr = read_frames(s, time.monotonic() + 10, want=GOAWAY)
    s.close()
    blocks = [f for f in fr if f[0] == HEADERS and f[2] == 1]
    datas = [f[3] for f in fr if f[0] == DATA and f[2] == 1]
    # headers, the message, then trailers ending the stream (their
    # values are Huffman-coded by nghttp2's HPACK; the real clients of
    # test_grpc_web read them)
    return len(blocks) == 2 and (blocks[1][1] & END_STREAM) and \
        len(datas) >= 1 and datas[0] == b"\x00\x00\x00\x00\x02\x08\x01"


def body(r):
    ws = Workspace("grpc-limits")
    r.at_end(lambda: ws.cleanup(r))
    gport = free_port()
    # the per-address limit is part 3's, on a listener of its own: here
    # clients that go away mid-call (part 6) could still be counted
    # against it when the next one connects
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s"), extra_flags=[
        "-grpc.listen-address=127.0.0.1:%d" % gport,
        "-server.http-idle-timeout=2s"]).start()
    r.check(grpc_ok(gport), "a Version call by hand: DATA and trailers")

    # 1. HTTP/1.1 on the gRPC port
    s = socket.create_connection(("127.0.0.1", gport), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    ok, dt = closed_within(s, 3)
    s.close()
    r.check(ok, "an HTTP/1.1 request on the gRPC port: closed (%.2fs)" % dt)
    r.check(grpc_ok(gport), "the listener still serves")

    # 2. no preface
    s = socket.create_connection(("127.0.0.1", gport), timeout=5)
    ok, dt = closed_within(s, 14)
    s.close()
    r.check(ok and 1.5 < dt < 6, "a connection with no preface: closed after "
            "the 2 s idle timeout (%.1fs)" % dt)

    # 3. per-IP limit, on a listener of its own whose idle timeout is
    # long: the 2 s one above could close a held connection on a loaded
    # machine and let the extra one in, which then closes only at its
    # own idle timeout
    lport = free_port()
    lim = DataServer(ws.data_dir("lim"), ws.log_dir("lim"), name="lim",
                     extra_flags=[
                         "-grpc.listen-address=127.0.0.1:%d" % lport,
                         "-server.http-per-ip-conn-limit=%d" % PER_IP,
                         "-server.http-idle-timeout=60s"]).start()
    held = [h2_connect(lport) for _ in range(PER_IP)]
    extra = socket.create_connection(("127.0.0.1", lport), timeout=5)
    ok, dt = closed_within(extra, 10)
    extra.close()
    r.check(ok, "connection %d from one address: closed at once (%.2fs)"
            % (PER_IP + 1, dt))
    for h in held:
        h.close()
    time.sleep(0.5)
    r.check(grpc_ok(lport), "once they closed, a new connection is served")
    lim.check_stopped(r)

    # 4. a stream whose request never ends
    s = h2_connect(gport)
    s.sendall(frame(HEADERS, END_HEADERS, 1, call_headers()) +
              frame(DATA, 0, 1, b"\x00\x00\x00\x00"))
    t = time.monotonic()
    fr = read_frames(s, t + 8, want=GOAWAY)
    rst = [f for f in fr if f[0] == RST_STREAM and f[2] == 1]
    r.check(rst and 1.5 < time.monotonic() - t, "a request that never ends: "
            "RST_STREAM after the idle timeout", str(fr)[:300])
    r.check(any(f[0] == GOAWAY for f in fr), "then the idle connection gets "
            "a GOAWAY", str(fr)[:300])
    s.close()

    # 5. a header list over 16 KiB
    s = h2_connect(gport)
    s.sendall(frame(HEADERS, END_HEADERS, 1, call_headers(extra=[
        ("x-big-%d" % i, "v" * 4000) for i in range(6)])) +
        frame(DATA, END_STREAM, 1, b"\x00\x00\x00\x00\x00"))
    fr = read_frames(s, time.monotonic() + 3)
    s.close()
    r.check(any(f[0] in (RST_STREAM, GOAWAY) or f == ("closed",) or
                (f[0] == HEADERS and b"431" in f[3]) for f in fr),
            "24 KiB of headers: the stream is refused",
            str([f[:3] for f in fr])[:300])
    r.check(grpc_ok(gport), "the listener still serves")

    # 6. clients that go away mid-call
    for how in ("rst", "close"):
        for _ in range(5):
            s = h2_connect(gport)
            s.sendall(frame(HEADERS, END_HEADERS, 1, call_headers(
                path="/querier.v1.QuerierService/ProfileTypes")) +
                frame(DATA, END_STREAM, 1, b"\x00\x00\x00\x00\x00"))
            if how == "rst":
                s.sendall(frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))
                read_frames(s, time.monotonic() + 0.2)
            s.close()
    time.sleep(0.5)
    r.check(grpc_ok(gport), "after 10 clients gave up mid-call, the "
            "listener still serves")
    idle = h2_connect(gport)
    read_frames(idle, time.monotonic() + 0.3, want=SETTINGS)
    srv.check_stopped(r)
    idle.close()


if __name__ == "__main__":
    run_script("test_grpc_limits", 120, body)
