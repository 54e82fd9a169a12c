#!/usr/bin/env python3
"""
etcd_server.py -- a real etcd (Debian's etcd-server) on loopback for tests
and for deploy/local: one member, random client and peer ports, its data
in DIR/data, its log in DIR/etcd.log, its pid in DIR/pid.

    etcd_server.py start DIR   prints {"endpoint": "127.0.0.1:PORT",
                               "pid": N} once etcd answers /health
                               (at most 60 s), leaving it running
    etcd_server.py stop DIR    SIGTERM, 5 s, then SIGKILL

Importable: start(dir) -> dict (raises EtcdError), stop(dir),
start_for(results, dir) (start, with the stop left to the test's end),
restart(dir, info) -> the same endpoint on the same data (a restart of
the store, not a new one).

Decisions:
  - The process runs in its own session, so a test's Ctrl-C or its
    process group's signals do not reach it; stop() ends it by pid.
  - --listen-client-urls is loopback only; the v3 JSON gateway is on the
    client port (etcd 3.4 serves it by default).
  - A restart reuses the ports written in DIR/ports: the endpoint the
    cluster was given stays valid.
"""

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request

import loopback

STOP_TIMEOUT = 5.0
READY_TIMEOUT = 60.0


class EtcdError(Exception):
    pass


_alive = loopback.alive


def _read(d, name):
    return loopback.read(d, name)


def _spawn(d, client, peer):
    tls = None
    if os.path.exists(os.path.join(d, "tls.json")):
        with open(os.path.join(d, "tls.json")) as f:
            tls = json.load(f)
    scheme = "https" if tls else "http"
    curls = "%s://127.0.0.1:%d" % (scheme, client)
    log = open(os.path.join(d, "etcd.log"), "ab")
    try:
        p = subprocess.Popen(
            ["etcd", "--name", "t", "--data-dir", os.path.join(d, "data"),
             "--listen-client-urls", curls,
             "--advertise-client-urls", curls,
             "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-cluster", "t=http://127.0.0.1:%d" % peer,
             "--log-level", "warn"] +
            (["--cert-file", tls["cert"], "--key-file", tls["key"],
              "--trusted-ca-file", tls["ca"], "--client-cert-auth"]
             if tls else []),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, close_fds=True)
    finally:
        log.close()
    ctx = None
    if tls:
        ctx = ssl.create_default_context(cafile=tls["ca"])
        ctx.load_cert_chain(tls["client_cert"], tls["client_key"])
    with open(os.path.join(d, "pid"), "w") as f:
        f.write("%d\n" % p.pid)
    endpoint = "127.0.0.1:%d" % client
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if p.poll() is not None:
            break
        try:
            with urllib.request.urlopen("%s://%s/health" % (scheme,
                                                            endpoint),
                                        timeout=1, context=ctx) as r:
                if json.load(r).get("health") == "true":
                    return {"endpoint": endpoint, "pid": p.pid, "proc": p}
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    _kill(p.pid)
    with open(os.path.join(d, "etcd.log"), "rb") as f:
        tail = f.read()[-2000:].decode("utf-8", "replace")
    raise EtcdError("etcd did not become healthy within %.0f s:\n%s" %
                    (READY_TIMEOUT, tail))


def start(d, tls=None):
    """Start etcd in directory d; return {"endpoint", "pid", "proc"}.
    tls: {"cert", "key", "ca", "client_cert", "client_key"} serves the
    client port over TLS, requiring client certificates from "ca"
    (--client-cert-auth); the client pair is what the health check
    presents."""
    d = os.path.abspath(d)
    pid = _read(d, "pid")
    if pid and _alive(int(pid)):
        raise EtcdError("%s/pid names a running etcd: stop it first" % d)
    os.makedirs(d, exist_ok=True)
    if tls:
        with open(os.path.join(d, "tls.json"), "w") as f:
            json.dump(tls, f)
    client, peer = loopback.free_ports(2)
    with open(os.path.join(d, "ports"), "w") as f:
        f.write("%d %d\n" % (client, peer))
    return _spawn(d, client, peer)


def start_for(r, d, tls=None):
    """start(d, tls) for a test: stop(d) is queued on its Results r
    (at_end), so etcd goes whichever way the test ends."""
    info = start(d, tls)
    r.at_end(lambda: stop(d))
    return info


def restart(d):
    """Start etcd again on its data and ports (after stop)."""
    d = os.path.abspath(d)
    client, peer = (int(x) for x in _read(d, "ports").split())
    return _spawn(d, client, peer)


def _kill(pid):
    loopback.kill(pid, STOP_TIMEOUT)


def stop(d):
    """Stop the etcd started in directory d (a no-op if none)."""
    d = os.path.abspath(d)
    pid = _read(d, "pid")
    if pid:
        _kill(int(pid))
        os.unlink(os.path.join(d, "pid"))


def main(argv):
    return loopback.main(argv, "etcd_server", start, stop, EtcdError,
                         ("endpoint", "pid"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
