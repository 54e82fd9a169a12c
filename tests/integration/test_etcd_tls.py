#!/usr/bin/env python3
"""
test_etcd_tls.py -- membership in etcd over TLS (-ring.etcd.tls-*): a
real etcd (Debian's etcd-server) serving its client port over TLS with
--client-cert-auth, certificates made by openssl.

  1. a cluster of 2 ingesters (RF 2), a distributor and a querier, each
     with the CA and a client certificate, registers in etcd, sees every
     ingester ACTIVE, and answers exactly;
  2. a querier without TLS flags, and one with the CA but no client
     certificate, pointed at the same etcd, learn no member (etcd refuses
     them), so their rings stay empty and they answer nothing.

Without openssl or etcd the test skips (a failure under CI=true).
"""

import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import etcd_server  # noqa: E402
from cluster import Cluster  # noqa: E402
from durability import DataServer  # noqa: E402
from oracle import parse_collapsed  # noqa: E402
from smolder import in_ci, run_script  # noqa: E402
from test_tls import certs_workspace  # noqa: E402

UPLOADS = 20


def body(r):
    ws, certs = certs_workspace(r, "etcd-tls")
    if certs.openssl is None or shutil.which("etcd") is None:
        (r.fail if in_ci() else r.skip)("etcd over TLS", "openssl or etcd "
                                        "missing (make deps installs them)")
        return
    certs.ca("ca")
    # etcd's JSON gateway dials etcd's own gRPC with the server
    # certificate as its client one: it needs clientAuth too
    certs.leaf("etcd", "ca", "serverAuth,clientAuth")
    certs.leaf("node", "ca", "clientAuth", cn="node")
    et = etcd_server.start_for(r, ws.path("etcd"), tls={
        "cert": certs.path("etcd.crt"), "key": certs.path("etcd.key"),
        "ca": certs.path("ca.crt"), "client_cert": certs.path("node.crt"),
        "client_key": certs.path("node.key")})
    tls = ["-ring.etcd.tls-ca-path=" + certs.path("ca.crt"),
           "-ring.etcd.tls-cert-path=" + certs.path("node.crt"),
           "-ring.etcd.tls-key-path=" + certs.path("node.key")]

    c = Cluster(ws, ingesters=2, distributors=1, queriers=1, rf=2,
                etcd=et["endpoint"],
                extra=tls + ["-validation.reject-older-than=0"])
    c.start_for(r)
    r.check(True, "members registered in etcd over TLS: both rings see 2 "
            "ingesters ACTIVE")
    now = int(time.time())
    ok = sum(c.distributors[0].ingest({"name": "et.cpu",
                                       "from": str(now - 30 + i)},
                                      b"main;etcd 1\n").status == 200
             for i in range(UPLOADS))
    r.eq(ok, UPLOADS, "every upload acknowledged")
    r.check(c.wait_writes(UPLOADS), "both ingesters applied every write")
    resp = c.queriers[0].render("et.cpu{}", frm=now - 3600, until=now + 3600,
                                fmt="collapsed")
    got = parse_collapsed(resp.text()) if resp.status == 200 else {}
    r.eq(got, {"main;etcd": UPLOADS * 10000000}, "the answer is exact")

    for name, flags in (("no-tls", []),
                        ("no-client-cert",
                         ["-ring.etcd.tls-ca-path=" + certs.path("ca.crt")])):
        q = DataServer(ws.data_dir(name), ws.log_dir(name), name=name,
                       target="querier", extra_flags=c.ring_flags() + flags)
        q.start(wait=False)
        time.sleep(3)
        states = c.states(q) if q.alive() else {}
        resp = q.render("et.cpu{}", frm=now - 3600, until=now + 3600,
                        fmt="collapsed")
        r.check(not states and not (resp.status == 200 and "main;etcd" in
                                    resp.text()),
                "%s: etcd refuses it, its ring learns no member (%s) and it "
                "answers nothing (%d)" % (name, states, resp.status))
        problems = q.stop()
        r.check(not problems, "%s stops cleanly" % name, "\n".join(problems))
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_etcd_tls", 180, body)
