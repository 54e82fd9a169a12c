#!/usr/bin/env python3
"""
test_tls.py -- HTTPS on the HTTP listener (-server.http-tls-*), with
certificates made by the openssl command line and Python's ssl module as
the client:

  1. TLS only: an HTTPS client that trusts the CA ingests and queries a
     profile; a plaintext request on the port gets no HTTP answer; a
     client that does not trust the CA refuses the server;
  2. -server.tls-min-version=VersionTLS13: a client limited to TLS 1.2
     fails the handshake, a TLS 1.3 one works;
  3. mutual TLS (RequireAndVerifyClientCert with -server.http-tls-ca-path):
     no client certificate, or one from another CA, is refused (the
     handshake or 401/403), public routes included; a certificate from
     the CA gets 200; RequireAnyClientCert takes any certificate and
     refuses none; VerifyClientCertIfGiven takes none, refuses a foreign
     one;
  4. rotation under load: the certificate and key files are replaced
     while a client sends requests on new connections; new connections
     see the new certificate within ~2 s, and no request fails;
  5. gRPC over TLS (-grpc.listen-address with the same certificate and
     policy), called by grpcio (gRPC's C core, Debian's python3-grpcio):
     with the CA's client certificate Version answers; without one, or
     in plaintext, the call fails UNAVAILABLE;
  6. remote-write to an https receiver that wants mutual TLS
     (-remote-write.tls-*): with the CA and a client certificate every
     upload arrives; without the client certificate none does, and each
     is still queued or counted as dropped.

Without the openssl command (`make deps` installs it with libssl) the
test skips, which is a failure under CI=true.
"""

import http.client
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import DataServer, Workspace  # noqa: E402
from smolder import free_port, in_ci, metric, run_script  # noqa: E402


class TLSServer(DataServer):
    """A DataServer whose own requests (readiness, helpers) go over HTTPS
    with the given client context."""

    def __init__(self, *args, ctx=None, **kw):
        self.ctx = ctx
        super().__init__(*args, **kw)

    def connection(self, timeout):
        return http.client.HTTPSConnection("127.0.0.1", self.port,
                                           context=self.ctx, timeout=timeout)


class Certs:
    """A CA, and certificates it (or another CA) signs, by openssl."""

    def __init__(self, d):
        self.d = d
        os.makedirs(d, exist_ok=True)
        self.openssl = shutil.which("openssl")

    def path(self, name):
        return os.path.join(self.d, name)

    def run(self, *args):
        p = subprocess.run([self.openssl] + list(args), capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError("openssl %s: %s" % (args[0], p.stderr))

    def ca(self, name):
        self.run("req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                 "-subj", "/CN=" + name, "-keyout", self.path(name + ".key"),
                 "-out", self.path(name + ".crt"))

    def leaf(self, name, ca, usage, cn="localhost"):
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                    "extendedKeyUsage=%s\n" % usage)
        self.run("req", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                 "/CN=" + cn, "-keyout", self.path(name + ".key"),
                 "-out", self.path(name + ".csr"))
        self.run("x509", "-req", "-in", self.path(name + ".csr"), "-CA",
                 self.path(ca + ".crt"), "-CAkey", self.path(ca + ".key"),
                 "-CAcreateserial", "-days", "2", "-extfile", ext,
                 "-out", self.path(name + ".crt"))


def certs_workspace(r, name):
    """Workspace `name`, removed at the end, and a Certs in its certs/."""
    ws = Workspace(name)
    r.at_end(lambda: ws.cleanup(r))
    return ws, Certs(ws.path("certs"))


def ctx_for(certs, ca="ca", client=None, max_version=None, min_version=None):
    ctx = ssl.create_default_context(cafile=certs.path(ca + ".crt"))
    if client:
        ctx.load_cert_chain(certs.path(client + ".crt"),
                            certs.path(client + ".key"))
    if max_version:
        ctx.maximum_version = max_version
    if min_version:
        ctx.minimum_version = min_version
    return ctx


def https(port, ctx, method="GET", path="/ready", body=None):
    """(status, body) or (None, error text)."""
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx,
                                    timeout=10)
    try:
        c.request(method, path, body=body)
        resp = c.getresponse()
        return resp.status, resp.read()
    except (ssl.SSLError, OSError, http.client.HTTPException) as e:
        return None, str(e)
    finally:
        c.close()


def peer_serial(port, ctx):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            return t.getpeercert()["serialNumber"]


def tls_server(ws, name, certs, extra=()):
    return TLSServer(ws.data_dir(name), ws.log_dir(name), extra_flags=[
        "-server.http-tls-cert-path=" + certs.path("srv.crt"),
        "-server.http-tls-key-path=" + certs.path("srv.key"),
        "-validation.reject-older-than=0"] + list(extra), name=name,
        ctx=ctx_for(certs, client="cli")).start()


GRPC_CALL = r"""
import sys, grpc
target, ca, cert, key, secure = sys.argv[1:6]
if secure == "1":
    creds = grpc.ssl_channel_credentials(
        root_certificates=open(ca, "rb").read(),
        private_key=open(key, "rb").read() if key else None,
        certificate_chain=open(cert, "rb").read() if cert else None)
    ch = grpc.secure_channel(target, creds)
else:
    ch = grpc.insecure_channel(target)
try:
    out = ch.unary_unary("/version.v1.Version/Version")(b"", timeout=10)
    print("OK", out.hex())
except grpc.RpcError as e:
    print(e.code().name)
"""


def grpc_call(target, certs, client, secure=True):
    """Version over gRPC with grpcio: "OK <hex>" or the status name."""
    p = subprocess.run(["/usr/bin/python3", "-c", GRPC_CALL, target,
                        certs.path("ca.crt"),
                        certs.path(client + ".crt") if client else "",
                        certs.path(client + ".key") if client else "",
                        "1" if secure else "0"],
                       capture_output=True, text=True, timeout=60)
    return (p.stdout.strip() or p.stderr.strip()[-300:])


def body(r):
    ws, certs = certs_workspace(r, "tls")
    if certs.openssl is None:
        (r.fail if in_ci() else r.skip)("TLS", "openssl missing")
        return
    certs.ca("ca")
    certs.ca("other")
    certs.leaf("srv", "ca", "serverAuth")
    certs.leaf("cli", "ca", "clientAuth", cn="writer")
    certs.leaf("rogue", "other", "clientAuth", cn="rogue")

    # 1. TLS only
    srv = tls_server(ws, "plain-auth", certs)
    ok = ctx_for(certs)
    now = int(time.time())
    st, b = https(srv.port, ok, "POST", "/ingest?name=tlsapp.cpu&from=%d"
                  % now, b"main;secure 7\n")
    r.check(st == 200, "HTTPS ingest: 200", b)
    st, b = https(srv.port, ok, "GET", "/render?query=tlsapp.cpu%%7B%%7D"
                  "&from=%d&until=%d&format=collapsed" % (now - 60, now + 60))
    r.check(st == 200 and b.strip() == b"main;secure 70000000", "HTTPS render: "
            "the profile back", b)
    st, b = https(srv.port, ok, "GET", "/")
    st2, b2 = https(srv.port, ok, "GET", "/ui/app.js")
    r.check(st == 200 and b"<html" in b.lower() and st2 == 200 and
            len(b2) > 1000, "HTTPS: the web UI's page and script (what a "
            "browser loads)", "%s %r / %s %r" % (st, b[:80], st2, b2[:80]))
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            got = s.recv(100)
        except OSError:
            got = b""
    r.check(not got.startswith(b"HTTP/1.1 200"), "plaintext HTTP on the "
            "TLS port gets no HTTP answer", got[:60])
    st, b = https(srv.port, ctx_for(certs, ca="other"))
    r.check(st is None and "CERTIFICATE_VERIFY_FAILED" in str(b),
            "a client that does not trust the CA refuses the server", b)
    srv.check_stopped(r)

    # 2. minimum version
    srv = tls_server(ws, "tls13", certs, ["-server.tls-min-version="
                                          "VersionTLS13"])
    st, b = https(srv.port, ctx_for(certs, max_version=ssl.TLSVersion.TLSv1_2))
    r.check(st is None, "VersionTLS13: a TLS 1.2 client fails", b)
    st, b = https(srv.port, ctx_for(certs,
                                    min_version=ssl.TLSVersion.TLSv1_3))
    r.check(st == 200, "VersionTLS13: a TLS 1.3 client gets 200", b)
    srv.check_stopped(r)

    # 3. client certificates
    for mode, want in (("RequireAndVerifyClientCert",
                        {"none": False, "rogue": False, "cli": True}),
                       ("RequireAnyClientCert",
                        {"none": False, "rogue": True, "cli": True}),
                       ("VerifyClientCertIfGiven",
                        {"none": True, "rogue": False, "cli": True})):
        srv = tls_server(ws, "m" + mode[:12].lower(), certs, [
            "-server.http-tls-client-auth=" + mode,
            "-server.http-tls-ca-path=" + certs.path("ca.crt")])
        for who, accepted in want.items():
            ctx = ctx_for(certs, client=None if who == "none" else who)
            for path in ("/ready", "/api/apps"):
                st, b = https(srv.port, ctx, path=path)
                good = st == 200 if accepted else st in (None, 401, 403)
                r.check(good, "%s, %s certificate, %s: %s" % (
                    mode, {"none": "no", "rogue": "another CA's",
                           "cli": "the CA's"}[who], path,
                    "200" if accepted else "refused (%s)" % st), b[:200])
        srv.check_stopped(r)

    # 4. rotation under load
    srv = tls_server(ws, "rotate", certs)
    before = peer_serial(srv.port, ok)
    fails, sent, stop = [], [0], threading.Event()

    def load():
        while not stop.is_set():
            st, b = https(srv.port, ok)
            sent[0] += 1
            if st != 200:
                fails.append(b)
    th = threading.Thread(target=load)
    th.start()
    time.sleep(0.5)
    certs.leaf("srv2", "ca", "serverAuth")
    # replace both files by rename, as cert-manager and renewals do
    for ext in ("key", "crt"):
        shutil.copy(certs.path("srv2." + ext), certs.path("srv.new"))
        os.replace(certs.path("srv.new"), certs.path("srv." + ext))
    after, t0 = before, time.monotonic()
    while after == before and time.monotonic() - t0 < 10:
        time.sleep(0.2)
        after = peer_serial(srv.port, ok)
    time.sleep(0.5)
    stop.set()
    th.join()
    r.check(after != before and time.monotonic() - t0 < 5, "rotation: new "
            "connections get the new certificate (%.1fs)"
            % (time.monotonic() - t0))
    r.check(not fails and sent[0] > 10, "rotation under load: %d requests, "
            "%d failed" % (sent[0], len(fails)), str(fails[:3]))
    srv.check_stopped(r)

    # 5. gRPC over TLS
    p = subprocess.run(["/usr/bin/python3", "-c", "import grpc"],
                       capture_output=True, timeout=60) \
        if os.path.exists("/usr/bin/python3") else None
    if p is None or p.returncode != 0:
        (r.fail if in_ci() else r.skip)("gRPC over TLS", "/usr/bin/python3 "
                                        "lacks python3-grpcio")
        return
    gport = free_port()
    target = "127.0.0.1:%d" % gport
    srv = tls_server(ws, "grpc-tls", certs, [
        "-grpc.listen-address=" + target,
        "-server.http-tls-client-auth=RequireAndVerifyClientCert",
        "-server.http-tls-ca-path=" + certs.path("ca.crt")])
    got = grpc_call(target, certs, "cli")
    r.check(got == "OK 0801", "gRPC over TLS with the CA's client "
            "certificate: Version answers", got)
    got = grpc_call(target, certs, None)
    r.eq(got, "UNAVAILABLE", "gRPC over TLS without a client certificate: "
         "refused")
    got = grpc_call(target, certs, "rogue")
    r.eq(got, "UNAVAILABLE", "gRPC over TLS with another CA's certificate: "
         "refused")
    got = grpc_call(target, certs, None, secure=False)
    r.eq(got, "UNAVAILABLE", "plaintext gRPC on the TLS listener: refused")
    srv.check_stopped(r)

    # 6. remote-write over mutual TLS
    recv = tls_server(ws, "rw-receiver", certs, [
        "-server.http-tls-client-auth=RequireAndVerifyClientCert",
        "-server.http-tls-ca-path=" + certs.path("ca.crt")])
    url = "https://127.0.0.1:%d" % recv.port
    for name, client, want in (("rw-mtls", True, 5), ("rw-nocert", False, 0)):
        flags = ["-remote-write.url=" + url,
                 "-remote-write.tls-ca-path=" + certs.path("ca.crt"),
                 "-remote-write.max-backoff=500ms",
                 "-validation.reject-older-than=0"]
        if client:
            flags += ["-remote-write.tls-cert-path=" + certs.path("cli.crt"),
                      "-remote-write.tls-key-path=" + certs.path("cli.key")]
        src = DataServer(ws.data_dir(name), ws.log_dir(name), name=name,
                         extra_flags=flags).start()
        app = name.replace("-", "")
        for i in range(5):
            resp = src.request("POST", "/ingest?name=%s.cpu&from=%d" % (
                app, now - 30 + i), body=b"main;rw 1\n")
            r.eq(resp.status, 200, "%s: upload %d acknowledged" % (name, i))
        got, deadline = 0, time.monotonic() + 10
        while time.monotonic() < deadline:
            resp = recv.request("GET", "/render?query=%s.cpu%%7B%%7D&from=%d"
                                "&until=%d&format=collapsed" % (
                                    app, now - 600, now + 600))
            text = resp.body.decode() if resp.status == 200 else ""
            got = int(text.split()[-1]) // 10000000 if text.strip() else 0
            if got >= want and want > 0:
                break
            time.sleep(0.3)
        r.eq(got, want, "%s: %d of 5 uploads reached the mutual-TLS "
             "receiver" % (name, want))
        if not client:
            # The receiver drops the connection after the request went
            # out (TLS 1.3 asks for the certificate then): each upload is
            # still queued, or dropped as "ambiguous" and counted --
            # remote_write.h's at-most-once rule -- never lost unseen.
            queued = metric(src, "smolder_remote_write_queue_length")
            dropped = metric(src, "smolder_remote_write_dropped_total")
            r.eq(queued + dropped, 5, "%s: every refused upload is queued "
                 "or counted as dropped (%d + %d)" % (name, queued, dropped))
        problems = src.stop()
        r.check(not problems, "%s stops cleanly" % name, "\n".join(problems))
    recv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_tls", 180, body)
