#!/usr/bin/env python3
"""
test_webui.py -- the web UI in headless Chromium against the real binary.

Starts smolder, ingests a known regression (service "shop": the first half
of the last hour has main;handler;parse 100 + main;handler;render 100 per
profile, the second half render 300), a flamegraph of more than 8,192
nodes (service "big") and a real pprof (tests/data), then runs
tests/webui/webui_test.js (playwright-core driving Debian's chromium),
which prints one JSON line per check or measurement (the comparison view's
top changes put render first, and a click draws its timeline; the
page /render?format=html exports opens from a file with no server).
Screenshots of every
view go to <build dir>/webui-artifacts/.  A second server with
multitenancy on checks that the tenant is asked once.

Set-up: `npm ci` in tests/webui when node_modules is missing or older than
package-lock.json.  When node, npm or chromium is missing (`make deps`
installs them) the test skips with the reason, except under CI=true, where
that is a failure.  The ASan build runs it too: the browser is not
instrumented and the server only answers a few dozen requests.
"""

import json
import atexit
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smolder import Results, Server, data_dir, install_timeout, smolder_bin, source_dir  # noqa: E402

r = Results("test_webui")
install_timeout(300)

WEBUI = os.path.join(source_dir(), "tests", "webui")
CI = os.environ.get("CI") == "true"


def unavailable(why):
    if CI:
        r.fail("browser tooling", why)
        r.finish()
    r.skip_all(why)


def tooling():
    node = shutil.which("node")
    npm = shutil.which("npm")
    chrome = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not node or not npm:
        unavailable("node/npm not installed (make deps installs nodejs and npm)")
    if not chrome:
        unavailable("chromium not installed (make deps installs it)")
    mod = os.path.join(WEBUI, "node_modules", "playwright-core")
    lock = os.path.join(WEBUI, "package-lock.json")
    stamp = os.path.join(WEBUI, "node_modules", ".package-lock.json")
    if not os.path.isdir(mod) or (os.path.exists(stamp) and
                                  os.path.getmtime(stamp) < os.path.getmtime(lock)):
        p = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=WEBUI,
                           capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            unavailable("npm ci failed (no registry?): " + p.stderr[-500:])
    return node, chrome


def folded(lines):
    return "".join("%s %d\n" % kv for kv in lines).encode()


def big_profile():
    """Folded stacks giving well over 8,192 distinct frames."""
    rnd = random.Random(15)
    pk = ["net/http", "runtime", "encoding/json", "github.com/acme/shop/db",
          "github.com/acme/shop/api", "compress/gzip", "crypto/tls", "sync"]
    out = []
    for i in range(3000):
        depth = rnd.randint(3, 9)
        st = ["main"] + ["%s.f%d" % (rnd.choice(pk), rnd.randint(0, 40))
                         for _ in range(depth)]
        out.append((";".join(st), rnd.randint(1, 50)))
    return folded(out)


def ingest_all(s, results, tenant=None, key=None):
    now = int(time.time())
    hdr = ({"Authorization": "Bearer " + key} if key else
           {"X-Scope-OrgID": tenant} if tenant else None)
    base = [("main;handler;parse", 100), ("main;handler;render", 100)]
    regr = [("main;handler;parse", 100), ("main;handler;render", 300)]
    ok = True
    for k in range(10):
        for body, at in ((base, now - 3300 + 120 * k), (regr, now - 1500 + 120 * k)):
            q = {"name": "shop.cpu{env=prod}", "sampleRate": "100",
                 "from": str(at), "until": str(at)}
            if hdr:
                resp = s.request("POST", "/ingest", q, folded(body), hdr)
            else:
                resp = s.ingest(q, folded(body))
            ok = ok and resp.status == 200
    if tenant:
        results.check(ok, "ingest shop profiles for tenant " + tenant)
        return
    results.check(ok, "ingest the shop regression (20 profiles)")
    resp = s.ingest({"name": "big.cpu", "sampleRate": "100",
                     "from": str(now - 600)}, big_profile())
    results.check(resp.status == 200, "ingest the big profile", resp.describe())
    with open(os.path.join(data_dir(), "parca__alloc_objects.pb.gz"), "rb") as f:
        resp = s.ingest({"name": "goapp{env=prod}", "format": "pprof",
                         "spyName": "gospy", "from": str(now - 900)}, f.read())
    results.check(resp.status == 200, "ingest a real Go heap pprof", resp.describe())
    with open(os.path.join(data_dir(), "parca__fib.pb.gz"), "rb") as f:
        resp = s.ingest({"name": "fib", "format": "pprof",
                         "from": str(now - 900)}, f.read())
    results.check(resp.status == 200, "ingest the adhoc test's pprof as service fib",
                  resp.describe())


def main():
    node, chrome = tooling()
    art = os.path.join(os.path.dirname(smolder_bin()), "webui-artifacts")
    os.makedirs(art, exist_ok=True)
    # A server that checks API keys (-auth.keys-file): the UI asks for one.
    key = "webui-test-key-" + hashlib.sha256(os.urandom(16)).hexdigest()[:24]
    keys = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
    keys.write("sha256:%s team-k read,write\n" %
               hashlib.sha256(key.encode()).hexdigest())
    keys.close()
    atexit.register(os.unlink, keys.name)
    with Server() as s, Server(["-auth.multitenancy-enabled=true"], name="smolder-mt") as mt, \
            Server(["-auth.multitenancy-enabled=true", "-auth.keys-file=" + keys.name],
                   name="smolder-keys") as ks:
        # The UI's files: embedded, typed, cached by ETag.
        resp = s.request("GET", "/")
        r.check(resp.status == 200 and b"/ui/app.js" in resp.body and
                resp.headers.get("content-type", "").startswith("text/html"),
                "GET / serves index.html", resp.describe())
        etag = resp.headers.get("etag", "")
        r.check(etag.startswith('"') and resp.headers.get("cache-control") == "no-cache",
                "index.html has an ETag and Cache-Control: no-cache", resp.headers)
        resp = s.request("GET", "/", headers={"If-None-Match": etag})
        r.eq((resp.status, resp.body), (304, b""), "If-None-Match answers 304")
        for path, ctype in (("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css"),
                            ("/ui/favicon.svg", "image/svg+xml")):
            resp = s.request("GET", path)
            r.check(resp.status == 200 and resp.headers.get("content-type", "").startswith(ctype)
                    and len(resp.body) > 100, "%s served as %s" % (path, ctype), resp.describe())
        r.eq(s.request("POST", "/").status, 405, "POST / is 405")
        r.eq(s.request("GET", "/ui/nope.js").status, 404, "an unknown asset is 404")
        r.eq(mt.request("GET", "/").status, 200, "the UI needs no tenant")

        ingest_all(s, r)
        ingest_all(mt, r, tenant="team-a")
        ingest_all(ks, r, tenant="team-k", key=key)
        resp = ks.request("GET", "/api/apps")
        r.check(resp.status == 401 and resp.headers.get("www-authenticate", "").startswith("Bearer"),
                "keys mode: a request without a key is 401 with WWW-Authenticate", resp.describe())

        env = dict(os.environ, SM_URL="http://127.0.0.1:%d" % s.port,
                   SM_MT_URL="http://127.0.0.1:%d" % mt.port, SM_MT_TENANT="team-a",
                   SM_KEY_URL="http://127.0.0.1:%d" % ks.port, SM_KEY=key,
                   SM_ARTIFACTS=art, CHROMIUM=chrome,
                   SM_ADHOC=os.path.join(data_dir(), "parca__fib.pb.gz"))
        t0 = time.monotonic()
        p = subprocess.run([node, os.path.join(WEBUI, "webui_test.js")], cwd=WEBUI,
                           env=env, capture_output=True, text=True, timeout=240)
        seen = 0
        for ln in p.stdout.splitlines():
            try:
                o = json.loads(ln)
            except ValueError:
                print("      " + ln)
                continue
            if "measure" in o:
                print("measure  %s: %.1f ms" % (o["measure"], o["ms"]), flush=True)
            else:
                seen += 1
                r.check(o["ok"], "browser: " + o["check"], o.get("detail", ""))
        r.check(p.returncode == 0 and seen >= 25,
                "browser script ran to the end (%d checks, %.1fs)" % (seen, time.monotonic() - t0),
                p.stderr[-3000:])
        print("screenshots in " + art, flush=True)
        s.check_stopped(r)
        mt.check_stopped(r)
    r.finish()


main()
