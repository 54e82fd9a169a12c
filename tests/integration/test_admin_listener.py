#!/usr/bin/env python3
"""
test_admin_listener.py -- the admin surface closed in every auth mode
(-server.admin-listen-address), against the single binary:

  1. multitenancy by header and no API keys (anyone can claim any
     tenant): the state-changing admin calls -- POST /ingester/flush,
     POST /compactor/run -- answer 403 on the API port, naming the flag,
     while tenants write and read as before; with an admin listener they
     work there and only there, and /metrics (it names every tenant)
     moves there too;
  2. single tenant (no multitenancy): with an admin listener, the same
     split; without one, admin calls stay on the API port (the laptop
     mode, where the one tenant's data is open anyway);
  3. API keys: the admin listener still wants a key with the admin scope
     (a write key gets 403 there).
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import http.client  # noqa: E402

from durability import DataServer, Workspace  # noqa: E402
from smolder import free_port, http_exchange, run_script  # noqa: E402

ORG = {"X-Scope-OrgID": "team-a"}


class At:
    """Requests to another port of a running server (its admin one)."""

    def __init__(self, port):
        self.port = port

    def request(self, method, path, body=None, headers=None):
        return http_exchange(http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=60), method, path, body, headers)


def server(ws, name, flags):
    return DataServer(ws.data_dir(name), ws.log_dir(name), name=name,
                      extra_flags=["-validation.reject-older-than=0"] +
                      flags).start()


def admin_server(ws, name, flags):
    """server() with an admin listener too; it and a client of that
    listener."""
    aport = free_port()
    srv = server(ws, name, flags + ["-server.admin-listen-address="
                                    "127.0.0.1:%d" % aport])
    return srv, At(aport)


def body(r):
    ws = Workspace("admin-listener")
    r.at_end(lambda: ws.cleanup(r))
    now = int(time.time())

    # 1. header mode, no admin listener
    srv = server(ws, "header", ["-auth.multitenancy-enabled"])
    for path in ("/ingester/flush", "/compactor/run"):
        resp = srv.request("POST", path, body=b"", headers=ORG)
        r.check(resp.status == 403 and b"admin-listen-address" in resp.body,
                "header mode, no admin listener: POST %s is 403 naming "
                "the flag" % path, resp.describe())
    resp = srv.request("POST", "/ingest?name=adm.cpu&from=%d" % now,
                       body=b"main;a 3\n", headers=ORG)
    r.eq(resp.status, 200, "header mode: a tenant still writes")
    resp = srv.request("GET", "/render?query=adm.cpu%%7B%%7D&from=%d&until=%d"
                       "&format=collapsed" % (now - 60, now + 60),
                       headers=ORG)
    r.check(resp.status == 200 and b"main;a" in resp.body, "header mode: "
            "and reads", resp.describe())
    r.eq(srv.request("GET", "/metrics").status, 200, "header mode, no admin "
         "listener: /metrics stays where Prometheus scrapes it")
    srv.check_stopped(r)

    # 1b. header mode with an admin listener
    srv, adm = admin_server(ws, "header-admin", [
        "-auth.multitenancy-enabled", "-server.metrics-on-admin-listener"])
    resp = srv.request("POST", "/ingester/flush", body=b"", headers=ORG)
    r.eq(resp.status, 403, "with an admin listener: flush on the API port "
         "is 403")
    resp = adm.request("POST", "/ingester/flush", body=b"")
    r.eq(resp.status, 200, "and 200 on the admin listener")
    resp = adm.request("POST", "/compactor/run", body=b"")
    r.eq(resp.status, 200, "compactor run on the admin listener: 200")
    r.eq(srv.request("GET", "/metrics").status, 403, "with "
         "-server.metrics-on-admin-listener /metrics is 403 on the API port")
    resp = adm.request("GET", "/metrics")
    r.check(resp.status == 200 and b"smolder_" in resp.body, "and served on "
            "the admin listener", resp.describe())
    r.eq(srv.request("GET", "/ready").status, 200, "/ready stays on the API "
         "port")
    srv.check_stopped(r)

    # 2. single tenant
    srv, adm = admin_server(ws, "open-admin", [])
    r.eq(srv.request("POST", "/ingester/flush", body=b"").status, 403,
         "single tenant with an admin listener: flush on the API port 403")
    r.eq(adm.request("POST", "/ingester/flush", body=b"").status, 200,
         "and 200 on the admin listener")
    r.eq(srv.request("GET", "/metrics").status, 200, "without "
         "-server.metrics-on-admin-listener /metrics stays on the API port")
    srv.check_stopped(r)
    srv = server(ws, "open", [])
    r.eq(srv.request("POST", "/ingester/flush", body=b"").status, 200,
         "single tenant, no admin listener: flush on the API port (laptop "
         "mode)")
    srv.check_stopped(r)

    # 3. keys on the admin listener
    keys = ws.path("keys")
    import hashlib
    with open(keys, "w") as f:
        for key, tenant, scopes in (("opskey", "ops", "admin"),
                                    ("writekey", "team-a", "write")):
            f.write("sha256:%s %s %s\n" % (
                hashlib.sha256(key.encode()).hexdigest(), tenant, scopes))
    srv, adm = admin_server(ws, "keys-admin", ["-auth.multitenancy-enabled",
                                               "-auth.keys-file=" + keys])
    resp = adm.request("POST", "/ingester/flush", body=b"",
                       headers={"Authorization": "Bearer writekey"})
    r.eq(resp.status, 403, "keys: a write key on the admin listener: 403")
    resp = adm.request("POST", "/ingester/flush", body=b"")
    r.eq(resp.status, 401, "keys: no key on the admin listener: 401")
    resp = adm.request("POST", "/ingester/flush", body=b"",
                       headers={"Authorization": "Bearer opskey"})
    r.eq(resp.status, 200, "keys: the admin key on the admin listener: 200")
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_admin_listener", 120, body)
