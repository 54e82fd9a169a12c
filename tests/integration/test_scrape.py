#!/usr/bin/env python3
"""
test_scrape.py -- pull mode (scraper/scraper.h): the single binary
scrapes a real Go service's net/http/pprof endpoints
(tests/tools/pprofapp, built here with Debian's Go), with no SDK in it.

The service counts every allocation (MemProfileRate 1), burns CPU in
main.burnA / main.burnB, allocates in main.allocSmall only when asked,
and keeps a copy of every CPU profile it serves.  Scraped every 2 s:
  - /api/v1/targets lists the target with its labels (static labels,
    job, instance, service_name) and every profile up; /targets is HTML;
  - heap: after the first scrape (which only primes), two rounds of
    allocations; the stored alloc_objects and alloc_space of the stacks
    through main.allocSmall equal, stack for stack, the difference
    between the service's last and first heap profiles fetched directly;
    no stored value is negative;
  - CPU: with process_cpu turned off by a configuration reload (and
    the last CPU scrape finished), the stored CPU total equals the sum of
    the CPU profiles the service served, and main.burnA is in it;
  - restart: the service killed and started again (its counters begin
    at zero) re-bases: the next allocations are stored as they happened,
    without a spike from the counters' fall;
  - file discovery: a target listed in a JSON file is scraped with the
    file's labels through relabel_configs, and goes when the file goes;
  - DNS discovery against a DNS server started here
    (tests/tools/dns_server.py): an SRV record's target and port and an
    A record's address, with their __meta_dns_* labels relabeled; a
    record removed takes its target away;
  - Kubernetes discovery against an API server of its own serving
    PodLists in the real API's JSON shape: the pods annotated with
    pyroscope.io/scrape (and port, application-name,
    profile-goroutines-enabled)
    or coroot.com/profile-scrape (and profile-port) are scraped, with
    service_name from the annotation or namespace/container; an
    unannotated or pending pod is not;
  - a target that does not answer is down with its error, and the
    others still scrape; a configuration that does not load keeps the
    previous one;
  - with API keys (-auth.keys-file), the uploads carry
    -scraper.push-api-key-file's key and land in its tenant.
"""

import hashlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import oracle  # noqa: E402
from durability import DataServer, Workspace  # noqa: E402
from smolder import free_port, run_script  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "tools"))
from dns_server import DnsServer  # noqa: E402

INTERVAL = 2
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
ALLOC_OBJ = "memory:alloc_objects:count:space:bytes"
ALLOC_SPACE = "memory:alloc_space:bytes:space:bytes"


# The pprof_config that turns off the default profiles: the target is
# asked only for what the job adds.
DEFAULTS_OFF = """    profiling_config:
      pprof_config:
        process_cpu: { enabled: false }
        memory: { enabled: false }
        mutex: { enabled: false }
        block: { enabled: false }
"""


def pprofapp(r, name):
    """Workspace `name` and the pprofapp service built in it: (ws, exe),
    exe None when it does not build.  Without Go the script is skipped."""
    if not oracle.have_go():
        r.skip_all("go is not installed (make deps installs it): no real "
                   "Go service to scrape")
    ws = Workspace(name)
    r.at_end(lambda: ws.cleanup(r))
    tmp = ws.path("build")
    os.makedirs(tmp, exist_ok=True)
    exe, why = oracle.build_go_tool("pprofapp", tmp)
    if exe is None:
        r.fail("pprofapp builds", why)
    return ws, exe


class App:
    def __init__(self, exe, port, tee, logdir):
        self.exe, self.port, self.tee, self.logdir = exe, port, tee, logdir
        self.proc = None

    def start(self):
        self.log = open(os.path.join(self.logdir, "pprofapp.log"), "ab")
        self.proc = subprocess.Popen(
            [self.exe, "-addr", "127.0.0.1:%d" % self.port, "-tee",
             self.tee, "-burn"], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.get("/debug/pprof/")
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()
            self.log = None

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (
                self.port, path), timeout=30) as f:
            return f.read()


def pod(ns, name, ip, annotations, container, ports=(), phase="Running",
        labels=None):
    """One item of a PodList, in the API server's shape."""
    return {
        "metadata": {
            "name": name, "namespace": ns, "uid": "uid-" + name,
            "resourceVersion": "1234", "creationTimestamp":
            "2026-11-29T10:00:00Z", "labels": labels or {},
            "annotations": annotations},
        "spec": {
            "nodeName": "node-1", "restartPolicy": "Always",
            "containers": [{"name": container, "image": "shop:1.2",
                            "ports": [{"name": "http", "containerPort": p,
                                       "protocol": "TCP"} for p in ports]}]},
        "status": {
            "phase": phase, "hostIP": "10.0.0.1",
            "podIP": ip if phase == "Running" else "",
            "conditions": [{"type": "Ready", "status":
                            "True" if phase == "Running" else "False"}]}}


class FakeApiServer:
    """GET /api/v1/pods (and /api/v1/namespaces/<ns>/pods) with a bearer
    token, answering a PodList in the real API's JSON shape."""

    def __init__(self, pods, token):
        outer = self
        self.pods, self.token, self.calls = pods, token, 0

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.calls += 1
                if self.headers.get("Authorization") != \
                        "Bearer " + outer.token:
                    self.send_response(401)
                    self.end_headers()
                    return
                items = outer.pods
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:3] == ["api", "v1", "namespaces"] and \
                        len(parts) == 5:
                    items = [p for p in items
                             if p["metadata"]["namespace"] == parts[3]]
                elif parts != ["api", "v1", "pods"]:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.dumps({
                    "kind": "PodList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": "98765"},
                    "items": items}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.t = threading.Thread(target=self.httpd.serve_forever,
                                  daemon=True)

    def start(self):
        self.t.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def targets(srv):
    r = srv.request("GET", "/api/v1/targets")
    if r.status != 200:
        return []
    return json.loads(r.text())["data"]["activeTargets"]


def prof_state(srv, job, name):
    for t in targets(srv):
        if t["scrapePool"] != job:
            continue
        for p in t["profiles"]:
            if p["name"] == name:
                return p
    return None


def wait_scrapes(srv, job, name, more, timeout=60):
    """Wait until profile `name` of the job's target has `more` scrapes
    beyond now; its count, or None."""
    deadline = time.monotonic() + timeout
    p = prof_state(srv, job, name)
    while p is None and time.monotonic() < deadline:
        # /ready may answer before the scraper has loaded its targets
        time.sleep(0.1)
        p = prof_state(srv, job, name)
    if p is None:
        return None
    want = p["scrapes"] + more
    while time.monotonic() < deadline:
        p = prof_state(srv, job, name)
        if p is not None and p["scrapes"] >= want:
            return p["scrapes"]
        time.sleep(0.2)
    return None


def alloc_stacks(data):
    """{stack: (alloc_objects, alloc_space)} of the main.allocSmall stacks
    of a heap profile."""
    p = oracle.load_pb(data)
    names = [t for t, _ in p.sample_types]
    per = oracle.collapse_pb(p)
    obj = per[names.index("alloc_objects")]
    spc = per[names.index("alloc_space")]
    out = {}
    for k in set(obj) | set(spc):
        if "main.allocSmall" in k:
            out[k] = (obj.get(k, 0), spc.get(k, 0))
    return out


def stored(srv, type_id, t0):
    resp = srv.render(type_id + '{service_name="app"}', frm=t0,
                      until=int(time.time()) + 60, fmt="collapsed")
    if resp.status != 200:
        return None
    out = {}
    for ln in resp.text().splitlines():
        if ln:
            k, v = ln.rsplit(" ", 1)
            out[k] = out.get(k, 0) + int(v)
    return out


def allocs_stored(srv, t0):
    obj, spc = stored(srv, ALLOC_OBJ, t0), stored(srv, ALLOC_SPACE, t0)
    if obj is None or spc is None:
        return None, None
    mine = {}
    for k in set(obj) | set(spc):
        if "main.allocSmall" in k:
            mine[k] = (obj.get(k, 0), spc.get(k, 0))
    neg = [k for d in (obj, spc) for k, v in d.items() if v < 0]
    return mine, neg


def minus(a, b):
    out = {}
    for k in set(a) | set(b):
        x, y = a.get(k, (0, 0)), b.get(k, (0, 0))
        d = (x[0] - y[0], x[1] - y[1])
        if d != (0, 0):
            out[k] = d
    return out


def plus(a, b):
    return minus(a, {k: (-v[0], -v[1]) for k, v in b.items()})


def write_config(path, port, cpu=True, extra=""):
    with open(path + ".tmp", "w") as f:
        f.write("""scrape_configs:
  - job_name: app
    scrape_interval: %ds
    scrape_timeout: 2s
    profiling_config:
      pprof_config:
        process_cpu: { enabled: %s }
    static_configs:
      - targets: ["127.0.0.1:%d"]
        labels: { env: test }
%s""" % (INTERVAL, "true" if cpu else "false", port, extra))
    os.replace(path + ".tmp", path)


def body(r):
    ws, exe = pprofapp(r, "scrape")
    if exe is None:
        return
    tee = ws.path("tee")
    os.makedirs(tee, exist_ok=True)
    port, dead = free_port(), free_port()
    app = App(exe, port, tee, ws.log_dir("app"))
    r.at_end(app.kill)
    r.check(app.start(), "the Go service answers /debug/pprof/")
    cfg = ws.path("scrape.yaml")
    dead_job = """  - job_name: gone
    scrape_interval: %ds
    scrape_timeout: 1s
    static_configs:
      - targets: ["127.0.0.1:%d"]
""" % (INTERVAL, dead)
    sd = ws.path("sd")
    os.makedirs(sd, exist_ok=True)
    with open(os.path.join(sd, "t1.json"), "w") as f:
        json.dump([{"targets": ["127.0.0.1:%d" % port],
                    "labels": {"app": "filesvc"}}], f)
    files_job = """  - job_name: files
    scrape_interval: %ds
    scrape_timeout: 2s
    profiling_config:
      pprof_config:
        process_cpu: { enabled: false }
    file_sd_configs:
      - files: ["%s/*.json"]
        refresh_interval: 1s
    relabel_configs:
      - source_labels: [app]
        target_label: service_name
""" % (INTERVAL, sd)
    dns = DnsServer({
        "_pprof._tcp.smolder.test": [("SRV", 0, 0, port, "localhost")],
        "app.smolder.test": [("A", "127.0.0.1")]}).start()
    r.at_end(dns.stop)
    only_goroutines = """    profiling_config:
      pprof_config:
        process_cpu: { enabled: false }
        memory: { enabled: false }
        mutex: { enabled: false }
        block: { enabled: false }
"""
    dns_jobs = """  - job_name: dnssrv
    scrape_interval: %ds
    scrape_timeout: 2s
%s    dns_sd_configs:
      - names: [_pprof._tcp.smolder.test]
        dns_server: 127.0.0.1:%d
        refresh_interval: 1s
    relabel_configs:
      - source_labels: [__meta_dns_srv_record_target]
        target_label: srv_target
  - job_name: dnsa
    scrape_interval: %ds
    scrape_timeout: 2s
%s    dns_sd_configs:
      - names: [app.smolder.test]
        type: A
        port: %d
        dns_server: 127.0.0.1:%d
        refresh_interval: 1s
    relabel_configs:
      - source_labels: [__meta_dns_name]
        target_label: dns_name
""" % (INTERVAL, only_goroutines, dns.port, INTERVAL, only_goroutines,
       port, dns.port)
    api = FakeApiServer([
        pod("shop", "cart-7d9f", "127.0.0.1", {
            "pyroscope.io/scrape": "true",
            "pyroscope.io/port": str(port),
            "pyroscope.io/application-name": "cart",
            "pyroscope.io/profile-goroutines-enabled": "false"},
            "cart", labels={"app.kubernetes.io/name": "cart"}),
        pod("ns2", "worker-5c4b", "127.0.0.1", {
            "coroot.com/profile-scrape": "true",
            "coroot.com/profile-port": str(port)}, "worker"),
        pod("shop", "quiet-1", "127.0.0.1", {}, "quiet", ports=[port]),
        pod("shop", "pending-1", "127.0.0.1", {
            "pyroscope.io/scrape": "true",
            "pyroscope.io/port": str(port)}, "late", phase="Pending"),
    ], "t0ken").start()
    r.at_end(api.stop)
    tokf = ws.path("token")
    with open(tokf, "w") as f:
        f.write("t0ken\n")
    k8s_job = """  - job_name: k8s
    scrape_interval: %ds
    scrape_timeout: 2s
    profiling_config:
      pprof_config:
        process_cpu: { enabled: false }
        mutex: { enabled: false }
        block: { enabled: false }
    kubernetes_sd_configs:
      - role: pod
        api_server: http://127.0.0.1:%d
        bearer_token_file: %s
        refresh_interval: 1s
    relabel_configs:
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
""" % (INTERVAL, api.port, tokf)
    write_config(cfg, port, extra=files_job + dns_jobs + k8s_job + dead_job)
    t0 = int(time.time()) - 60
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s"), extra_flags=[
        "-scrape.config-file=%s" % cfg,
        "-scrape.config-reload-period=500ms"]).start()
    try:
        r.check(wait_scrapes(srv, "app", "memory", 1) is not None,
                "the heap profile is scraped (a first, priming scrape)")
        ts = [t for t in targets(srv) if t["scrapePool"] == "app"]
        r.eq(ts[0]["labels"] if ts else None,
             {"env": "test", "instance": "127.0.0.1:%d" % port,
              "job": "app", "service_name": "app"},
             "/api/v1/targets: the target's labels")
        p0 = alloc_stacks(app.get("/debug/pprof/heap"))
        app.get("/alloc?n=1000&size=64")
        r.check(wait_scrapes(srv, "app", "memory", 2) is not None,
                "two more heap scrapes")
        app.get("/alloc?n=300&size=256")
        r.check(wait_scrapes(srv, "app", "memory", 2) is not None,
                "two more heap scrapes after the second allocations")
        p1 = alloc_stacks(app.get("/debug/pprof/heap"))
        want = minus(p1, p0)
        got, neg = allocs_stored(srv, t0)
        r.check(want and sum(v[0] for v in want.values()) >= 1300,
                "the service allocated 1,300 objects in main.allocSmall",
                str(want)[:300])
        r.eq(got, want, "stored alloc_objects and alloc_space through "
             "main.allocSmall = the last heap profile - the first, stack "
             "for stack")
        r.eq(neg, [], "no stored allocation value is negative")
        ts = {t["scrapePool"]: t for t in targets(srv)}
        r.check("app" in ts and ts["app"]["health"] == "up" and all(
            p["health"] == "up" and p["enabled"]
            for p in ts["app"]["profiles"]),
            "every profile of the service is up", str(ts.get("app"))[:400])
        r.check("gone" in ts and ts["gone"]["health"] == "down" and
                ts["gone"]["lastError"] != "",
                "a target that does not answer is down, with its error",
                str(ts.get("gone"))[:300])
        r.check("files" in ts and ts["files"]["labels"].get(
            "service_name") == "filesvc" and ts["files"]["labels"].get(
            "app") == "filesvc" and ts["files"]["health"] == "up",
            "file discovery: the file's target, relabeled (service_name "
            "from its app label), up", str(ts.get("files"))[:400])
        r.eq([(ts.get(j) or {}).get("labels") for j in ("dnssrv", "dnsa")],
             [{"instance": "localhost:%d" % port, "job": "dnssrv",
               "service_name": "dnssrv", "srv_target": "localhost"},
              {"instance": "127.0.0.1:%d" % port, "job": "dnsa",
               "service_name": "dnsa", "dns_name": "app.smolder.test"}],
             "DNS discovery: an SRV record's target and port, an A "
             "record's address with the port, their meta labels "
             "relabeled")
        r.check(all((ts.get(j) or {}).get("health") == "up"
                    for j in ("dnssrv", "dnsa")),
                "DNS discovery: both targets up",
                str([ts.get(j) for j in ("dnssrv", "dnsa")])[:400])
        k8s = sorted((t for t in targets(srv) if t["scrapePool"] == "k8s"),
                     key=lambda t: t["labels"].get("pod", ""))
        r.eq([t["labels"] for t in k8s], [
            {"instance": "127.0.0.1:%d" % port, "job": "k8s",
             "namespace": "shop", "pod": "cart-7d9f",
             "service_name": "cart"},
            {"instance": "127.0.0.1:%d" % port, "job": "k8s",
             "namespace": "ns2", "pod": "worker-5c4b",
             "service_name": "ns2/worker"}],
             "Kubernetes discovery: the two pods annotated for profiling "
             "(pyroscope.io/*, coroot.com/*), not the unannotated or the "
             "pending one; service_name from the annotation, else "
             "namespace/container")
        cart = [p for t in k8s if t["labels"].get("pod") == "cart-7d9f"
                for p in t["profiles"]]
        r.check(cart and [p["name"] for p in cart if not p["enabled"]] ==
                ["process_cpu", "goroutines", "mutex", "block"] and all(
                    p["health"] == "up" for p in cart if p["enabled"]),
                "Kubernetes discovery: pyroscope.io/profile-goroutines-"
                "enabled false turns the pod's goroutines off; its heap "
                "profile is up", str(cart)[:500])
        dns.records["_pprof._tcp.smolder.test"] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(
                t["scrapePool"] == "dnssrv" for t in targets(srv)):
            time.sleep(0.2)
        r.check(not any(t["scrapePool"] == "dnssrv"
                        for t in targets(srv)),
                "DNS discovery: the SRV record gone, its target goes")
        os.unlink(os.path.join(sd, "t1.json"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(
                t["scrapePool"] == "files" for t in targets(srv)):
            time.sleep(0.2)
        r.check(not any(t["scrapePool"] == "files" for t in targets(srv)),
                "file discovery: the file removed, its target goes")
        page = srv.request("GET", "/targets")
        r.check(page.status == 200 and "main.allocSmall" not in page.text()
                and "127.0.0.1:%d" % port in page.text(),
                "/targets is an HTML table of the targets")

        # CPU: stop its scrapes by a reload, let the last one land
        write_config(cfg, port, cpu=False, extra=files_job)
        deadline = time.monotonic() + 40
        settled = False
        last = None
        while time.monotonic() < deadline:
            p = prof_state(srv, "app", "process_cpu")
            if p is None:
                break
            state = (p["enabled"], p["scrapes"], p["failures"])
            if not state[0] and state == last and \
                    time.monotonic() > stable_since + 2 * INTERVAL + 1:
                settled = True
                break
            if state != last:
                last, stable_since = state, time.monotonic()
            time.sleep(0.3)
        r.check(settled, "the reload turned process_cpu off (no more CPU "
                "scrapes)")
        served = 0
        burn = False
        for name in os.listdir(tee):
            if name.endswith(".pb.gz"):
                with open(os.path.join(tee, name), "rb") as f:
                    p = oracle.load_pb(f.read())
                names = [t for t, _ in p.sample_types]
                per = oracle.collapse_pb(p)[names.index("cpu")]
                served += sum(per.values())
                burn |= any("main.burnA" in k for k in per)
        cpu = stored(srv, CPU, t0) or {}
        r.check(served > 0 and burn, "the service served CPU profiles with "
                "main.burnA in them", str(served))
        r.eq(sum(cpu.values()), served, "stored CPU total = the sum of the "
             "CPU profiles the service served")

        # restart: counters fall, the scraper re-bases
        app.kill()
        r.check(app.start(), "the service restarts")
        r.check(wait_scrapes(srv, "app", "memory", 2) is not None,
                "two heap scrapes after the restart (re-base, then one)")
        q0 = alloc_stacks(app.get("/debug/pprof/heap"))
        app.get("/alloc?n=200&size=64")
        r.check(wait_scrapes(srv, "app", "memory", 2) is not None,
                "two heap scrapes after the allocations")
        q1 = alloc_stacks(app.get("/debug/pprof/heap"))
        got, neg = allocs_stored(srv, t0)
        r.eq(got, plus(want, minus(q1, q0)), "after the restart: only the "
             "new allocations were added (no spike)")
        r.eq(neg, [], "no stored allocation value is negative after the "
             "restart")

        # a configuration that does not load keeps the previous one
        with open(cfg, "w") as f:
            f.write("scrape_configs:\n  - job_name: app\n    bogus: 1\n")
        deadline = time.monotonic() + 20
        seen = False
        while time.monotonic() < deadline and not seen:
            seen = "keeping the previous scrape configuration" in \
                srv.stderr_text()
            time.sleep(0.2)
        r.check(seen, "a bad configuration is logged, naming what is kept")
        r.check(wait_scrapes(srv, "app", "memory", 1) is not None,
                "a bad configuration keeps the previous one: still "
                "scraping")
        m = srv.request("GET", "/metrics").text()
        r.check('smolder_scraper_scrapes_total{job="app",profile="memory",'
                'result="ok"}' in m and "smolder_scraper_targets" in m,
                "/metrics counts scrapes per job, profile and result")
    finally:
        srv.check_stopped(r)

    # with API keys: the uploads carry -scraper.push-api-key-file's key,
    # and land in its tenant
    key = "scrape-test-key-0123456789abcdef0123456789"
    keyf, keys = ws.path("push.key"), ws.path("keys.txt")
    with open(keyf, "w") as f:
        f.write(key + "\n")
    with open(keys, "w") as f:
        f.write("sha256:%s team-a write,read\n" % hashlib.sha256(
            key.encode()).hexdigest())
    kcfg = ws.path("keyed.yaml")
    with open(kcfg, "w") as f:
        f.write("""scrape_configs:
  - job_name: keyed
    scrape_interval: %ds
    scrape_timeout: 2s
%s    static_configs:
      - targets: ["127.0.0.1:%d"]
""" % (INTERVAL, DEFAULTS_OFF, port))
    k = DataServer(ws.data_dir("k"), ws.log_dir("k"), name="keyed",
                   extra_flags=["-scrape.config-file=%s" % kcfg,
                                "-auth.multitenancy-enabled",
                                "-auth.keys-file=%s" % keys,
                                "-scraper.push-api-key-file=%s" % keyf])
    k.start()
    try:
        deadline = time.monotonic() + 30
        ok = False
        while time.monotonic() < deadline and not ok:
            m = k.request("GET", "/metrics").text()
            ok = 'smolder_scraper_uploads_total{result="ok"}' in m
            time.sleep(0.2)
        r.check(ok, "with API keys: the scraper's uploads carry its key")
        resp = k.request("GET", "/api/apps",
                         headers={"Authorization": "Bearer " + key})
        r.check(resp.status == 200 and "keyed" in resp.text(),
                "with API keys: the scraped profiles are the key's "
                "tenant's", resp.describe())
    finally:
        k.check_stopped(r)
        app.kill()


if __name__ == "__main__":
    run_script("test_scrape", 240, body)
