#!/usr/bin/env python3
"""
test_status.py -- what a process runs with (common/status.h):
/api/v1/status/buildinfo, /api/v1/status/config (and /diff, /default),
/runtime_config and /api/v1/tenant_limits.

  - buildinfo: status success, the project's version and, in a git checkout, the commit `git rev-parse --short=12 HEAD`
    names (the build's configure step records it);
  - config: every flag `-help` lists, once, sorted, with the value given
    on the command line (48h as 48h0m0s, a bool, a string quoted), the
    S3 secret key masked "********" and its value nowhere in any answer;
    diff: exactly the flags that differ from their defaults, which are
    those given plus the ones start-up settles (replication factor 1
    for the single binary); default: the defaults (-help's);
  - runtime_config: the file's tenants with every limit, the file's
    values and the flags' defaults for the rest ("weird!*" quoted);
    mode=diff only what differs; a reload (the file renamed over) shows
    up; an unknown mode is 400;
  - tenant_limits: the caller's tenant (X-Scope-OrgID) with its
    overrides, another with the defaults, none 401; Pyroscope's three
    fields present;
  - with API keys: a read key gets its own tenant's limits and 403 on
    the config and runtime config, an admin key gets them, buildinfo
    needs no key.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from smolder import Server, ServerError, run_script, smolder_bin  # noqa: E402

BUDGET_S = 90
SECRET = "s3cr3t-never-shown-0123456789"

RUNTIME = """overrides:
  tenant-a:
    ingestion_rate_mb: 4
    max_query_length: 24h
  "weird!*":
    max_flamegraph_nodes_max: 100
"""


def flag_names():
    """Flag names as -help lists them."""
    p = subprocess.run([smolder_bin(), "-help"], capture_output=True,
                       text=True, timeout=30)
    return re.findall(r"^  -([a-z0-9.-]+) ", p.stdout, re.M)


def yaml_map(text):
    """The flat `name: value` lines of a config answer."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(": ")
        if sep:
            out[k] = json.loads(v) if v.startswith('"') else v
    return out


def main(r):
    work = os.environ.get("SMOLDER_TEST_TMP") or "/tmp"
    import tempfile
    d = tempfile.mkdtemp(prefix="sm-status-", dir=work)
    rt = os.path.join(d, "runtime.yaml")
    with open(rt, "w") as f:
        f.write(RUNTIME)
    try:
        srv = Server(extra_flags=[
            "-runtime-config.file=" + rt,
            "-runtime-config.reload-period=100ms",
            "-storage.s3.secret-access-key=" + SECRET,
            "-querier.max-query-length=48h",
            "-auth.multitenancy-enabled"], name="smolder").start()
    except ServerError as e:
        r.fail("server starts", str(e))
        return
    try:
        answers = []

        def get(path, query=None, headers=None):
            resp = srv.request("GET", path, query, None, headers or {})
            answers.append(resp.body)
            return resp

        # -- buildinfo ---------------------------------------------------
        resp = get("/api/v1/status/buildinfo")
        if r.check(resp.status == 200, "buildinfo 200", resp.describe()):
            j = resp.json()
            r.eq(j.get("status"), "success", "buildinfo status")
            data = j.get("data") or {}
            r.eq(sorted(data), ["branch", "buildDate", "buildUser",
                                "goVersion", "revision", "version"],
                 "buildinfo fields (Pyroscope's)")
            top = os.path.dirname(os.path.dirname(HERE))
            with open(os.path.join(top, "CMakeLists.txt")) as f:
                pv = re.search(r"project\(\s*\w+\s+VERSION\s+([0-9.]+)",
                               f.read())
            r.eq(data.get("version"), pv.group(1) if pv else None,
                 "buildinfo version is CMakeLists.txt's project version")
            g = subprocess.run(["git", "-C", top, "rev-parse", "--short=12",
                                "HEAD"], capture_output=True, text=True)
            if g.returncode == 0:
                head = g.stdout.strip()
                # the binary may predate the last commit of a dirty tree;
                # a fresh clone's build names its HEAD
                r.check(data.get("revision") in (head,) or
                        re.fullmatch(r"[0-9a-f]{12}", data.get("revision")
                                     or "") is not None,
                        "buildinfo revision is a 12-digit commit (HEAD %s)"
                        % head, repr(data))
            else:
                r.skip("buildinfo revision", "not a git checkout")

        # -- config ------------------------------------------------------
        names = flag_names()
        resp = get("/api/v1/status/config")
        if r.check(resp.status == 200 and resp.headers.get(
                "content-type", "").startswith("text/plain"),
                "config 200 text/plain", resp.describe()):
            keys = [ln.split(":", 1)[0] for ln in resp.text().splitlines()]
            r.eq(keys, sorted(names), "config: every -help flag once, "
                 "sorted")
            cfg = yaml_map(resp.text())
            r.eq(cfg.get("querier.max-query-length"), "48h0m0s",
                 "config: a duration as Go writes it")
            r.eq(cfg.get("auth.multitenancy-enabled"), "true",
                 "config: a bool")
            r.eq(cfg.get("runtime-config.file"), rt, "config: a string, "
                 "quoted")
            r.eq(cfg.get("storage.s3.secret-access-key"), "********",
                 "config: the S3 secret key masked")
            r.eq(cfg.get("storage.s3.session-token"), "",
                 "config: an empty secret reads empty")
        resp = get("/api/v1/status/config/diff")
        if r.check(resp.status == 200, "config/diff 200", resp.describe()):
            diff = yaml_map(resp.text())
            for k in ("runtime-config.file", "querier.max-query-length",
                      "auth.multitenancy-enabled",
                      "storage.s3.secret-access-key",
                      "runtime-config.reload-period"):
                r.check(k in diff, "config/diff has %s (given)" % k,
                        repr(sorted(diff)))
            r.eq(diff.get("distributor.replication-factor"), "1",
                 "config/diff: the replication factor start-up settles "
                 "for the single binary")
            r.check("ingester.block-duration" not in diff,
                    "config/diff leaves out a flag at its default",
                    repr(sorted(diff)))
        resp = get("/api/v1/status/config/default")
        if r.check(resp.status == 200, "config/default 200",
                   resp.describe()):
            dflt = yaml_map(resp.text())
            r.eq(dflt.get("querier.max-query-length"), "0s",
                 "config/default: max-query-length 0s")
            r.eq(dflt.get("distributor.replication-factor"), "3",
                 "config/default: replication factor 3")
            r.eq(len(dflt), len(names), "config/default: every flag")

        # -- runtime_config ----------------------------------------------
        resp = get("/runtime_config")
        if r.check(resp.status == 200, "runtime_config 200",
                   resp.describe()):
            t = resp.text()
            r.check(t.startswith("overrides:\n  \"tenant-a\":\n") and
                    "\n    ingestion_rate_mb: 4\n" in t and
                    "\n    max_query_length: 24h0m0s\n" in t and
                    "\n  \"weird!*\":\n" in t and
                    "\n    max_flamegraph_nodes_max: 100\n" in t,
                    "runtime_config: the file's tenants and values",
                    t[:600])
            # every limit, the defaults from the flags
            block = t.split('"weird!*":')[1]
            r.check("max_query_length: 48h0m0s" in block and
                    "max_profile_size_bytes: 4194304" in block,
                    "runtime_config: the flags' values for what the file "
                    "does not set", block[:600])
        resp = get("/runtime_config", {"mode": "diff"})
        r.eq(resp.text() if resp.status == 200 else resp.describe(),
             "overrides:\n  \"tenant-a\":\n    ingestion_rate_mb: 4\n"
             "    max_query_length: 24h0m0s\n  \"weird!*\":\n"
             "    max_flamegraph_nodes_max: 100\n",
             "runtime_config?mode=diff: only what differs")
        resp = get("/runtime_config", {"mode": "bogus"})
        r.eq(resp.status, 400, "runtime_config?mode=bogus: 400")
        tmp = rt + ".new"
        with open(tmp, "w") as f:
            f.write("overrides:\n  tenant-b:\n    max_concurrent_queries: 7\n")
        os.rename(tmp, rt)
        deadline = time.monotonic() + 10
        t = ""
        while time.monotonic() < deadline:
            t = get("/runtime_config", {"mode": "diff"}).text()
            if "tenant-b" in t:
                break
            time.sleep(0.1)
        r.eq(t, "overrides:\n  \"tenant-b\":\n    max_concurrent_queries: 7\n",
             "runtime_config shows a reloaded file")

        # -- tenant_limits -----------------------------------------------
        resp = get("/api/v1/tenant_limits", headers={"X-Scope-OrgID":
                                                     "tenant-b"})
        if r.check(resp.status == 200, "tenant_limits 200", resp.describe()):
            j = resp.json()
            r.eq(j.get("max_concurrent_queries"), 7,
                 "tenant_limits: the tenant's override")
            r.eq(j.get("max_query_length"), "48h0m0s",
                 "tenant_limits: the flag's default for the rest")
            for k in ("ingestion_rate", "ingestion_burst_size",
                      "max_global_series_per_user"):
                r.check(k in j, "tenant_limits has Pyroscope's %s" % k,
                        repr(j))
        resp = get("/api/v1/tenant_limits", headers={"X-Scope-OrgID": "c"})
        r.eq(resp.json().get("max_concurrent_queries")
             if resp.status == 200 else resp.describe(), 0,
             "tenant_limits of a tenant the file does not list: defaults")
        r.eq(get("/api/v1/tenant_limits").status, 401,
             "tenant_limits without an org id: 401")
        r.check(all(SECRET.encode() not in b for b in answers),
                "the S3 secret key is in no answer")
    finally:
        srv.check_stopped(r)

    # -- scopes with API keys ------------------------------------------------
    keys = {"ro": ("smk_status_reader_0123456789abcdef", "t1", "read"),
            "ops": ("smk_status_admin_0123456789abcdefg", "ops", "admin")}
    kf = os.path.join(d, "keys")
    with open(kf, "w") as f:
        for k, t, s in keys.values():
            f.write("sha256:%s %s %s\n" % (hashlib.sha256(k.encode())
                                           .hexdigest(), t, s))
    try:
        srv = Server(extra_flags=["-auth.keys-file=" + kf,
                                  "-auth.multitenancy-enabled"],
                     name="smolder-keys").start()
    except ServerError as e:
        r.fail("server with API keys starts", str(e))
        return
    try:
        def auth(n):
            return {"Authorization": "Bearer " + keys[n][0]}

        r.eq(srv.request("GET", "/api/v1/status/buildinfo").status, 200,
             "keys: buildinfo needs no key")
        for path in ("/api/v1/status/config", "/api/v1/status/config/diff",
                     "/runtime_config"):
            r.eq(srv.request("GET", path, None, None, auth("ro")).status,
                 403, "keys: a read key gets 403 on %s" % path)
            r.eq(srv.request("GET", path, None, None, auth("ops")).status,
                 200, "keys: an admin key reads %s" % path)
            r.eq(srv.request("GET", path).status, 401,
                 "keys: no key, 401 on %s" % path)
        resp = srv.request("GET", "/api/v1/tenant_limits", None, None,
                           auth("ro"))
        r.check(resp.status == 200 and "max_query_length" in resp.json(),
                "keys: a read key reads its tenant's limits",
                resp.describe())
    finally:
        srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_status", BUDGET_S, main)
