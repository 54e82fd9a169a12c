#!/usr/bin/env python3
"""
test_rpc_tls_rotation.py -- the internal RPC's certificates rotate under
load without a failed client request: test_rolling_restart's cluster (3
ingesters RF 3, 2 distributors, 2 queriers) with mutual TLS on every RPC
(-rpc.tls-*, one certificate from the cluster's CA), the same writer (~50
uploads/s) and reader.

nng's TLS configuration cannot change once a listener or dialer uses it,
and a listener cannot be replaced without closing its connections, so
the RPC's files are read at start and rotated by a rolling restart
(docs/operations.md §7).  The procedure, as run here: a new key and
certificate from the same CA are written over the old files (by rename);
then every component restarts one right after another, the rollout of
test_rolling_restart.  Members on the old certificate and members on the
new one trust each other (the same CA) throughout.

Checks: every write acknowledged and every query 200 across the
rotation, every acknowledged upload in the answer exactly once
(test_rolling_restart's checks), and afterwards every ingester's RPC port
presents the new certificate (openssl s_client with a client
certificate).
"""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import Workspace  # noqa: E402
from smolder import in_ci, run_script  # noqa: E402
from test_rolling_restart import rollout  # noqa: E402
from test_tls import Certs  # noqa: E402
from test_rpc_tls import tls_flags  # noqa: E402


def fingerprint(certs, path):
    p = subprocess.run([certs.openssl, "x509", "-noout", "-fingerprint",
                        "-sha256", "-in", path], capture_output=True,
                       text=True, timeout=30)
    return p.stdout.strip().split("=", 1)[-1]


def presented(certs, port):
    """The SHA-256 fingerprint of the certificate the TLS server on `port`
    presents to a client holding the cluster's certificate."""
    p = subprocess.run([certs.openssl, "s_client", "-connect",
                        "127.0.0.1:%d" % port, "-servername", "localhost",
                        "-cert", certs.path("node.crt"), "-key",
                        certs.path("node.key"), "-CAfile",
                        certs.path("ca.crt")], input="", capture_output=True,
                       text=True, timeout=30)
    pem = p.stdout[p.stdout.find("-----BEGIN CERTIFICATE-----"):
                   p.stdout.find("-----END CERTIFICATE-----") + 25]
    if not pem.startswith("-----BEGIN"):
        return "none: " + p.stderr[-200:]
    q = subprocess.run([certs.openssl, "x509", "-noout", "-fingerprint",
                        "-sha256"], input=pem, capture_output=True,
                       text=True, timeout=30)
    return q.stdout.strip().split("=", 1)[-1]


def body(r):
    ws = Workspace("rpc-tls-rotation")
    certs = Certs(ws.path("certs"))
    if certs.openssl is None:
        (r.fail if in_ci() else r.skip)("RPC TLS rotation", "openssl missing")
        return
    certs.ca("ca")
    certs.leaf("node", "ca", "serverAuth,clientAuth", cn="node")
    old = fingerprint(certs, certs.path("node.crt"))
    new = {}

    def rotate(rnd):
        certs.leaf("next", "ca", "serverAuth,clientAuth", cn="node")
        os.replace(certs.path("next.key"), certs.path("node.key"))
        os.replace(certs.path("next.crt"), certs.path("node.crt"))
        new["fp"] = fingerprint(certs, certs.path("node.crt"))
        r.check(new["fp"] != old, "a new certificate and key written over "
                "the old files, the cluster under load")

    def after(c):
        got = [presented(certs, p) for p in c.rpc_ports]
        r.check(all(g == new.get("fp") for g in got), "after the rollout "
                "every ingester's RPC port presents the new certificate",
                "want %s, got %s" % (new.get("fp"), got))

    rollout(r, ws, tls_flags(certs, "node"), 1, before_round=rotate,
            after=after)
    shutil.rmtree(certs.d, ignore_errors=True)


if __name__ == "__main__":
    run_script("test_rpc_tls_rotation", 240, body)
