#!/usr/bin/env python3
"""
test_deploy.py -- deploy/ must work with the binary it deploys.

(a) Every flag in the deployment material is a flag of the binary: the
    Kubernetes manifests (deploy/kubernetes/*.yaml: container args with
    $(VAR) expanded from their env and ConfigMaps, as the kubelet does), the
    compose file (deploy/docker-compose/docker-compose.yml), the Dockerfile's
    CMD, and the local launcher (deploy/local/smolder-cluster: its text and
    the command lines `plan` prints), plus deploy/README.md's text.  Each
    flag name must be in `smolder -help`, each -target value a target, and
    each whole command line must parse (`smolder ARGS -help` parses every
    flag and its value before it looks at -help, so it exits 0 only when all
    are good).  The pieces must also fit together: -ring.dns names the
    headless Service of the ingester StatefulSet on its RPC port, Service
    selectors match pods, probes ask /ready, compose's -ring.members name
    its ingester services by -instance.id and RPC port, its
    -store-gateway.sharding-ring.members its store-gateways, and its
    filesystem bucket is a volume of every service that uses it.  The Dockerfile's
    build stage installs the Makefile's DEBIAN_PACKAGES (minus the test-only
    ones, TEST_ONLY_PACKAGES) and configures as `make build`; its runtime packages exist here
    and own every library the binary loads.  A bogus flag, target or
    variable in an in-memory manifest must be reported (the checker checks
    itself).

(b) The launcher works: `up` a cluster of 1 distributor, 3 ingesters, 1
    querier and 1 compactor on free loopback ports in a temp dir; a folded
    profile POSTed to the distributor comes back from the querier; `status`
    shows every process alive and ready and 3 ACTIVE ingesters (with curl
    and with the bash /dev/tcp fallback); after a kill -9 of an ingester,
    `up` restarts just that one and the ring has 3 ACTIVE again; `down`
    stops every pid `up` started, each cleanly.  Processes are killed by
    pid whatever happens.

YAML is read with Debian's python3-yaml (PyYAML's safe loader), which the
Makefile's DEBIAN_PACKAGES install; without it the test fails saying so.
Otherwise stdlib only.
"""

import glob
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:          # reported as a failure by main()
    yaml = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smolder import (SANITIZER_MARKERS, Results, free_port,  # noqa: E402
                     install_timeout, smolder_bin, source_dir)

BUDGET_S = 58

# Makefile packages only the tests use (Go's pprof oracle, the YAML and HTTP
# tools, the browser test, libFuzzer, gdb for a hung server's stacks,
# Graphviz for the DOT answers, gRPC's Python library as a gRPC client,
# Prometheus to receive recording rules' samples): the
# image does not install them.
TEST_ONLY_PACKAGES = {"golang-go", "python3", "python3-yaml", "curl",
                      "chromium", "nodejs", "npm", "clang",
                      "libclang-rt-14-dev", "llvm", "protobuf-compiler", "gdb",
                      "swift-proxy", "swift-object", "swift-container",
                      "swift-account", "etcd-server", "etcd-client",
                      "iptables", "graphviz", "python3-grpcio",
                      "python3-protobuf", "prometheus"}
DEPLOY = os.path.join(source_dir(), "deploy")
LAUNCHER = os.path.join(DEPLOY, "local", "smolder-cluster")
K8S_DIR = os.path.join(DEPLOY, "kubernetes")
COMPOSE = os.path.join(DEPLOY, "docker-compose", "docker-compose.yml")
DOCKERFILE = os.path.join(source_dir(), "Dockerfile")
MAKEFILE = os.path.join(source_dir(), "Makefile")


# --------------------------------------------------------------------------
# YAML: Debian's python3-yaml (PyYAML; `make deps` installs it).
# --------------------------------------------------------------------------

def yaml_load_all(text):
    """Every non-empty document of a YAML stream (safe loader)."""
    return [d for d in yaml.safe_load_all(text) if d is not None]


# --------------------------------------------------------------------------
# The binary's flags, and command lines checked against them.
# --------------------------------------------------------------------------

class Flags:
    """Names, types and targets from `smolder -help`."""

    def __init__(self, help_text):
        self.types = {m.group(1): m.group(2) or "" for m in re.finditer(
            r"^  -(\S+)(?: (\S+))?[ \t]*$", help_text, re.M)}
        m = re.search(r"components to run: ([a-z, -]+)\.", help_text)
        self.targets = set(re.findall(r"[a-z-]+", m.group(1))) if m else set()


def argv_problems(argv, flags):
    """What is wrong with a smolder argv (without argv[0])."""
    probs = []
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if not a.startswith("-") or a in ("-", "--"):
            probs.append("positional argument %r" % a)
            continue
        name, eq, val = a.lstrip("-").partition("=")
        if name in ("help", "h"):
            probs.append("%s in a command line" % a)
            continue
        if name not in flags.types:
            probs.append("-%s is not a flag of the binary" % name)
            continue
        if not eq:
            if flags.types[name] == "":
                val = "true"
            elif i < len(argv):
                val = argv[i]
                i += 1
            else:
                probs.append("-%s needs a value" % name)
        if re.search(r"\$\(|\$\{|\$[A-Za-z_]", val):
            probs.append("-%s=%s: unresolved variable" % (name, val))
        if name == "target":
            for t in val.split(","):
                if t not in flags.targets:
                    probs.append("-target=%s: %r is not a target (%s)" % (
                        val, t, ", ".join(sorted(flags.targets))))
    return probs


def binary_parses(argv):
    """None when `smolder ARGV -help` exits 0 (every flag and value parses),
    else the binary's complaint."""
    try:
        p = subprocess.run([smolder_bin()] + list(argv) + ["-help"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "cannot run: %s" % e
    if p.returncode == 0:
        return None
    return (p.stderr.strip().split("\n") or ["exit %d" % p.returncode])[0]


def check_commands(r, flags, label, commands):
    """commands: [(where, argv, problems found while extracting)]."""
    for where, argv, extra in commands:
        probs = list(extra) + argv_problems(argv, flags)
        if not probs:
            why = binary_parses(argv)
            if why:
                probs.append("smolder %s -help: %s" % (" ".join(argv), why))
        r.check(not probs, "%s: %s: flags are the binary's" % (label, where),
                "\n".join(probs))


# --------------------------------------------------------------------------
# Kubernetes: container argv with $(VAR) expanded as the kubelet does.
# --------------------------------------------------------------------------

_K8S_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
FIELD_REFS = {"metadata.namespace": "smolder", "status.podIP": "10.0.0.7",
              "spec.nodeName": "node-1"}


def k8s_expand(s, env):
    return _K8S_VAR.sub(lambda m: "$" if m.group(0) == "$$" else
                        env.get(m.group(1), m.group(0)), str(s))


def pod_spec(doc):
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet",
                "Job", "CronJob"):
        return (spec.get("template") or {}).get("spec") or {}
    return None


def pod_name(doc):
    name = (doc.get("metadata") or {}).get("name", "pod")
    return name + ("-0" if doc.get("kind") == "StatefulSet" else "-7d9f8")


def k8s_commands(docs):
    """[(where, argv, problems, container, doc, env)] of every container."""
    configmaps = {(d.get("metadata") or {}).get("name"): d.get("data") or {}
                  for d in docs if d.get("kind") == "ConfigMap"}
    # a Secret's values are not in the manifests' text that matters: any
    # value stands in for them
    secrets = {(d.get("metadata") or {}).get("name"):
               {k: "x" for k in list((d.get("stringData") or {}).keys()) +
                list((d.get("data") or {}).keys())}
               for d in docs if d.get("kind") == "Secret"}
    out = []
    for doc in docs:
        ps = pod_spec(doc)
        if ps is None:
            continue
        for c in (ps.get("initContainers") or []) + (ps.get("containers")
                                                      or []):
            where = "%s/%s container %s" % (doc.get("kind"),
                                            doc["metadata"]["name"],
                                            c.get("name"))
            probs = []
            env = {}
            for ef in c.get("envFrom") or []:
                ref = (ef.get("configMapRef") or {}).get("name")
                sref = (ef.get("secretRef") or {}).get("name")
                if ref in configmaps:
                    pre = ef.get("prefix") or ""
                    env.update({pre + k: str(v) for k, v in
                                configmaps[ref].items()})
                elif sref in secrets:
                    env.update({(ef.get("prefix") or "") + k: v
                                for k, v in secrets[sref].items()})
                else:
                    probs.append("envFrom %r: no such ConfigMap or Secret "
                                 "in the manifests" % ef)
            for e in c.get("env") or []:
                if "value" in e:
                    env[e["name"]] = k8s_expand(e["value"] or "", env)
                    continue
                vf = e.get("valueFrom") or {}
                if "fieldRef" in vf:
                    fp = vf["fieldRef"].get("fieldPath")
                    env[e["name"]] = (pod_name(doc) if fp == "metadata.name"
                                      else FIELD_REFS.get(fp, "x"))
                elif "configMapKeyRef" in vf:
                    ref = vf["configMapKeyRef"]
                    cm = configmaps.get(ref.get("name"))
                    if cm is None or ref.get("key") not in cm:
                        probs.append("env %s: no ConfigMap key %r" % (
                            e["name"], ref))
                    else:
                        env[e["name"]] = str(cm[ref["key"]])
                else:
                    env[e["name"]] = "x"
            cmd = [k8s_expand(a, env) for a in c.get("command") or []]
            if cmd and not cmd[0].endswith("smolder"):
                probs.append("command %r does not run smolder" % cmd)
            argv = cmd[1:] + [k8s_expand(a, env) for a in c.get("args") or []]
            out.append((where, argv, probs, c, doc, env))
    return out


def flag_value(argv, name):
    for a in argv:
        n, eq, v = a.lstrip("-").partition("=")
        if n == name and eq:
            return v
    return None


def k8s_fit(docs, cmds):
    """Problems with how the manifests fit together."""
    probs = []
    services = [d for d in docs if d.get("kind") == "Service"]
    pods = [(d, ((d.get("spec") or {}).get("template") or {}).get(
        "metadata", {}).get("labels") or {}) for d in docs
        if pod_spec(d) is not None]
    for s in services:
        sel = s["spec"].get("selector") or {}
        if not sel or not any(all(lb.get(k) == v for k, v in sel.items())
                              for _, lb in pods):
            probs.append("Service %s selects no pods" % s["metadata"]["name"])
    ingesters = [c for c in cmds if flag_value(c[1], "target") == "ingester"]
    if len(ingesters) != 1 or ingesters[0][4].get("kind") != "StatefulSet":
        probs.append("want one StatefulSet running -target=ingester")
        return probs
    _, iargv, _, icont, sts, _ = ingesters[0]
    rpc = flag_value(iargv, "rpc.listen-address") or ""
    rpc_port = rpc.rsplit(":", 1)[-1]
    if not rpc.startswith("tcp://"):
        probs.append("ingester -rpc.listen-address %r is not tcp://" % rpc)
    if flag_value(iargv, "instance.id") != pod_name(sts):
        probs.append("ingester -instance.id is not the pod name "
                     "(metadata.name through the downward API)")
    headless = [s for s in services if s["metadata"]["name"] ==
                sts["spec"].get("serviceName")]
    if not headless or headless[0]["spec"].get("clusterIP") != "None":
        probs.append("StatefulSet serviceName %r is not a headless Service"
                     % sts["spec"].get("serviceName"))
    else:
        ports = [str(p.get("port")) for p in headless[0]["spec"]["ports"]]
        if rpc_port not in ports:
            probs.append("headless Service lacks the RPC port %s" % rpc_port)
    claims = [(v.get("metadata") or {}).get("name") for v in
              sts["spec"].get("volumeClaimTemplates") or []]
    mounts = {m["mountPath"]: m["name"] for m in icont.get("volumeMounts")
              or []}
    if mounts.get(flag_value(iargv, "data.dir")) not in claims:
        probs.append("ingester -data.dir is not a volumeClaimTemplate mount")
    for where, argv, _, c, doc, env in cmds:
        dns = flag_value(argv, "ring.dns")
        target = flag_value(argv, "target")
        if target in ("distributor", "querier", "compactor"):
            host, _, port = (dns or "").rpartition(":")
            labels = host.split(".")
            if labels[:3] != [sts["spec"].get("serviceName"),
                              FIELD_REFS["metadata.namespace"], "svc"] or \
                    port != rpc_port:
                probs.append("%s: -ring.dns=%s is not <headless service>."
                             "<pod namespace>.svc.<domain>:%s" % (
                                 where, dns, rpc_port))
        rp = (c.get("readinessProbe") or {}).get("httpGet") or {}
        if rp.get("path") != "/ready":
            probs.append("%s: readiness probe is not GET /ready" % where)
        if not (c.get("livenessProbe") or {}).get("httpGet"):
            probs.append("%s: no HTTP liveness probe" % where)
        res = c.get("resources") or {}
        if not (res.get("requests") and res.get("limits")):
            probs.append("%s: no resource requests and limits" % where)
        names = {p.get("name") for p in c.get("ports") or []}
        for pr in ("readinessProbe", "livenessProbe"):
            port = ((c.get(pr) or {}).get("httpGet") or {}).get("port")
            if port is not None and not str(port).isdigit() and \
                    port not in names:
                probs.append("%s: %s port %r is not a container port" % (
                    where, pr, port))
    return probs


def k8s_history_fit(docs, cmds):
    """Problems with the bucket and the store-gateways in the manifests."""
    probs = []
    by_target = {}
    for c in cmds:
        by_target.setdefault(flag_value(c[1], "target"), []).append(c)
    gws = by_target.get("store-gateway") or []
    if len(gws) != 1 or gws[0][4].get("kind") != "StatefulSet":
        return ["want one StatefulSet running -target=store-gateway"]
    _, gargv, _, gcont, gsts, genv = gws[0]
    svc = gsts["spec"].get("serviceName")
    heads = [d for d in docs if d.get("kind") == "Service" and
             d["metadata"]["name"] == svc]
    if not heads or heads[0]["spec"].get("clusterIP") != "None":
        probs.append("store-gateway StatefulSet serviceName %r is not a "
                     "headless Service" % svc)
    rpc_port = (flag_value(gargv, "rpc.listen-address") or "").rsplit(
        ":", 1)[-1]
    if flag_value(gargv, "instance.id") != pod_name(gsts):
        probs.append("store-gateway -instance.id is not the pod name")
    claims = [(v.get("metadata") or {}).get("name") for v in
              gsts["spec"].get("volumeClaimTemplates") or []]
    mounts = {m["mountPath"]: m["name"] for m in gcont.get("volumeMounts")
              or []}
    if mounts.get(flag_value(gargv, "data.dir")) not in claims:
        probs.append("store-gateway -data.dir is not a volumeClaimTemplate "
                     "mount")
    sts_name = gsts["metadata"]["name"]
    want = ",".join("%s-%d=tcp://%s-%d.%s.%s.svc.%s:%s" % (
        sts_name, i, sts_name, i, svc, FIELD_REFS["metadata.namespace"],
        genv.get("SMOLDER_CLUSTER_DOMAIN", "cluster.local"), rpc_port)
        for i in range(int(gsts["spec"].get("replicas") or 1)))
    storage = None
    for target in ("ingester", "querier", "compactor", "store-gateway"):
        for where, argv, _, c, doc, env in by_target.get(target) or []:
            m = flag_value(argv, "store-gateway.sharding-ring.members")
            if m != want:
                probs.append("%s: -store-gateway.sharding-ring.members=%s, "
                             "want %s" % (where, m, want))
            rf = flag_value(argv,
                            "store-gateway.sharding-ring.replication-factor")
            if not (rf or "").isdigit() or not \
                    1 <= int(rf) <= int(gsts["spec"].get("replicas") or 1):
                probs.append("%s: store-gateway replication factor %r is "
                             "not 1..replicas" % (where, rf))
            if target == "querier":
                continue
            st = tuple(a for a in argv if a.startswith("-storage."))
            if not any(a.startswith("-storage.backend=") for a in st):
                probs.append("%s: no -storage.backend" % where)
            if storage is None:
                storage = st
            elif st != storage:
                probs.append("%s: -storage.* flags differ from the other "
                             "components' (%s vs %s)" % (where, st, storage))
    for where, argv, _, c, doc, env in by_target.get("compactor") or []:
        d = flag_value(argv, "data.dir")
        mounts = {m["mountPath"] for m in c.get("volumeMounts") or []}
        if d not in mounts:
            probs.append("%s: -data.dir %r is not a mounted volume (the "
                         "root file system is read-only)" % (where, d))
    return probs


# --------------------------------------------------------------------------
# Compose, Dockerfile, launcher.
# --------------------------------------------------------------------------

def compose_commands(doc):
    out = []
    for name, svc in (doc.get("services") or {}).items():
        probs = []
        cmd = svc.get("command")
        if cmd is None:
            continue
        if isinstance(cmd, str):
            cmd = shlex.split(cmd)
        argv = [str(a) for a in cmd]
        if svc.get("entrypoint") is not None:
            probs.append("entrypoint overridden: the image's is smolder")
        for a in argv:
            if re.search(r"\$(?!\$)", a.replace("$$", "")):
                probs.append("%r: compose interpolation is not checked "
                             "here; write the value" % a)
        out.append(("service %s" % name, argv, probs, svc))
    return out


def compose_fit(cmds):
    probs = []
    by_target = {}
    ingesters, gateways = {}, {}
    for where, argv, _, svc in cmds:
        t = flag_value(argv, "target")
        by_target[t] = by_target.get(t, 0) + 1
        if t in ("ingester", "store-gateway"):
            name = where.split(" ", 1)[1]
            rpc = flag_value(argv, "rpc.listen-address") or ""
            (ingesters if t == "ingester" else gateways)[name] = (
                flag_value(argv, "instance.id"), rpc.rsplit(":", 1)[-1])
            vols = [str(v).split(":")[1] for v in svc.get("volumes") or []
                    if ":" in str(v)]
            if flag_value(argv, "data.dir") not in vols:
                probs.append("%s: -data.dir is not a volume" % where)
        if flag_value(argv, "storage.backend") == "filesystem":
            vols = [str(v).split(":")[1] for v in svc.get("volumes") or []
                    if ":" in str(v)]
            if flag_value(argv, "storage.filesystem.dir") not in vols:
                probs.append("%s: the filesystem bucket is not a volume"
                             % where)
    want = {"ingester": 3, "distributor": 2, "querier": 1, "compactor": 1,
            "store-gateway": 2}
    if by_target != want:
        probs.append("services by target %r, want %r" % (by_target, want))
    want_members = sorted("%s=tcp://%s:%s" % (iid, host, port)
                          for host, (iid, port) in ingesters.items())
    want_gw = sorted("%s=tcp://%s:%s" % (iid, host, port)
                     for host, (iid, port) in gateways.items())
    for where, argv, _, _ in cmds:
        t = flag_value(argv, "target")
        gw = flag_value(argv, "store-gateway.sharding-ring.members")
        if t != "distributor" and sorted((gw or "").split(",")) != want_gw:
            probs.append("%s: -store-gateway.sharding-ring.members %s, want "
                         "%s" % (where, gw, ",".join(want_gw)))
        if t in ("ingester", "store-gateway"):
            continue
        members = sorted((flag_value(argv, "ring.members") or "").split(","))
        if members != want_members:
            probs.append("%s: -ring.members %s, want %s" % (
                where, ",".join(members), ",".join(want_members)))
    return probs


def dockerfile_stages(text):
    """[(from-line, [instruction, ...])] with continuations joined."""
    text = re.sub(r"\\\n", " ", text)
    stages = []
    for ln in text.split("\n"):
        ln = ln.strip()
        if not ln or ln.startswith("#"):
            continue
        if re.match(r"FROM\s", ln, re.I):
            stages.append((ln, []))
        elif stages:
            stages[-1][1].append(ln)
    return stages


def apt_packages(instructions):
    pkgs = []
    for ins in instructions:
        for m in re.finditer(r"apt-get\s+install\s+(.*?)(?:&&|;|\|\||$)",
                             ins):
            pkgs += [t for t in m.group(1).split() if not t.startswith("-")]
    return pkgs


def makefile_packages(text):
    m = re.search(r"^DEBIAN_PACKAGES\s*:?=\s*((?:.*\\\n)*.*)$", text, re.M)
    return m.group(1).replace("\\\n", " ").split() if m else []


def makefile_configure(text):
    """The `build` target's configure line, $(BUILD) as `build`."""
    m = re.search(r"^build:.*\n((?:\t.*\n)+)", text, re.M)
    for ln in (m.group(1).split("\n") if m else []):
        ln = ln.strip()
        if ln.startswith("cmake -S"):
            return ln.replace("$(BUILD)", "build")
    return None


def needed_packages(binary):
    """Debian packages owning the libraries `binary` links directly, or
    None when readelf/ldd/dpkg are missing."""
    if not all(shutil.which(t) for t in ("readelf", "ldd", "dpkg")):
        return None
    dyn = subprocess.run(["readelf", "-d", binary], capture_output=True,
                         text=True).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn))
    paths = {}
    for ln in subprocess.run(["ldd", binary], capture_output=True,
                             text=True).stdout.split("\n"):
        m = re.match(r"\s*(\S+) => (\S+)", ln)
        if m and m.group(1) in needed:
            paths[m.group(1)] = os.path.realpath(m.group(2))
    pkgs = {}
    for lib, path in paths.items():
        for p in (path, re.sub(r"^/usr/", "/", path),
                  re.sub(r"^/lib", "/usr/lib", path)):
            q = subprocess.run(["dpkg", "-S", p], capture_output=True,
                               text=True)
            if q.returncode == 0:
                pkgs[lib] = q.stdout.split(":")[0].strip()
                break
        else:
            pkgs[lib] = None
    return pkgs


# Libraries every debian:12-slim has, and the sanitizer runtimes of the
# ASan build (not shipped).
BASE_PACKAGES = {"libc6", "libgcc-s1"}
SANITIZER_LIBS = re.compile(r"^lib(asan|ubsan|tsan|lsan)")

FLAG_TOKEN = re.compile(
    r"(?<![\w./-])--?([a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+)(?=[=\s\"'`)\],]|$)",
    re.M)


def text_flags(text):
    """Dotted single-dash flag names mentioned in a script or document, and
    literal -target= values."""
    names = set(FLAG_TOKEN.findall(text))
    targets = set(re.findall(r"-target=([a-z,-]+)(?![\w$])", text))
    return names, targets


def text_problems(text, flags):
    names, targets = text_flags(text)
    probs = ["-%s is not a flag of the binary" % n for n in sorted(names)
             if n not in flags.types]
    for v in targets:
        for t in v.split(","):
            if t and t not in flags.targets:
                probs.append("-target=%s: %r is not a target" % (v, t))
    return probs


def run_launcher(args, timeout=40, env=None):
    """(exit status, stdout, stderr) of deploy/local/smolder-cluster, with
    the binary under test and none of the caller's SMOLDER_* settings."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("SMOLDER_")}
    e["SMOLDER_BIN"] = smolder_bin()
    e.update(env or {})
    try:
        p = subprocess.run([LAUNCHER] + args, capture_output=True, text=True,
                           timeout=timeout, env=e, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return -1, "", "%s timed out after %ds" % (" ".join(args), timeout)
    return p.returncode, p.stdout, p.stderr


def plan_commands(out):
    """(layout rows, [(where, argv, [])]) from `smolder-cluster plan`."""
    rows, cmds = [], []
    for ln in out.split("\n"):
        if ln.startswith("\t"):
            argv = shlex.split(ln.strip())
            cmds.append(("plan %s" % rows[-1][0], argv[1:], []))
        elif ln and not ln.startswith("#"):
            rows.append(ln.split("\t"))
    return rows, cmds


# --------------------------------------------------------------------------
# (a) The flags of deploy/.
# --------------------------------------------------------------------------

BOGUS_MANIFEST = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
data:
  PERIOD: "soon"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: bogus
spec:
  template:
    metadata:
      labels: {app: bogus}
    spec:
      containers:
        - name: querier
          envFrom:
            - configMapRef:
                name: cfg
          args:
            - -target=querier,bogus
            - -querier.no-such-flag=1
            - -ring.dns=$(NO_SUCH_VAR):9095
            - -ring.heartbeat-period=$(PERIOD)
"""

BOGUS_COMPOSE = """
services:
  q:
    command: ["-target=querier", "-ring.member=a=tcp://b:1"]
"""


def self_check(r, flags):
    """The checker must catch what it exists to catch."""
    cmds = k8s_commands(yaml_load_all(BOGUS_MANIFEST))
    probs = "\n".join(argv_problems(cmds[0][1], flags) + cmds[0][2])
    r.check("-querier.no-such-flag is not a flag" in probs,
            "self-check: a bogus flag in a manifest is reported", probs)
    r.check("'bogus' is not a target" in probs,
            "self-check: a bogus -target value is reported", probs)
    r.check("$(NO_SUCH_VAR):9095: unresolved" in probs,
            "self-check: an unresolved $(VAR) is reported", probs)
    why = binary_parses(["-ring.heartbeat-period=%s" % flag_value(
        cmds[0][1], "ring.heartbeat-period")])
    r.check(why is not None and "invalid value" in why,
            "self-check: a bad value from a ConfigMap is refused by "
            "`smolder ARGS -help`", str(why))
    c = compose_commands(yaml_load_all(BOGUS_COMPOSE)[0])
    probs = "\n".join(argv_problems(c[0][1], flags))
    r.check("-ring.member is not a flag" in probs,
            "self-check: a bogus flag in a compose file is reported", probs)
    probs = "\n".join(text_problems(
        'args=(-target=ingster "-ring.member=$m")\n', flags))
    r.check("-ring.member is not a flag" in probs and "'ingster'" in probs,
            "self-check: a bogus flag and target in script text are "
            "reported", probs)


def load_yaml_file(r, path):
    try:
        with open(path) as f:
            return yaml_load_all(f.read())
    except (OSError, yaml.YAMLError) as e:
        r.fail("%s: readable YAML" % os.path.relpath(path, source_dir()),
               str(e))
        return []


def check_kubernetes(r, flags):
    files = sorted(glob.glob(os.path.join(K8S_DIR, "*.yaml")) +
                   glob.glob(os.path.join(K8S_DIR, "*.yml")))
    if not r.check(files, "deploy/kubernetes has manifests"):
        return
    docs = []
    for f in files:
        docs += load_yaml_file(r, f)
    cmds = k8s_commands(docs)
    check_commands(r, flags, "kubernetes",
                   [(w, a, p) for w, a, p, _, _, _ in cmds])
    targets = sorted(flag_value(c[1], "target") or "" for c in cmds)
    r.eq(targets, ["compactor", "distributor", "ingester", "querier",
                   "store-gateway"],
         "kubernetes: one workload per component")
    probs = k8s_fit(docs, cmds)
    gprobs = k8s_history_fit(docs, cmds)
    r.check(not gprobs, "kubernetes: history in a bucket -- ingesters, "
            "store-gateways and the compactor share one bucket, every "
            "process that needs them lists the same store-gateways, each "
            "by its StatefulSet pod's DNS name on the headless Service "
            "and RPC port, one per replica; the compactor has a data dir",
            "\n".join(gprobs))
    r.check(not probs, "kubernetes: the ring DNS name is the ingesters' "
            "headless Service on their RPC port, ids are pod names, data "
            "is on a claim, Services select pods, probes and resources are "
            "set", "\n".join(probs))
    used = set()
    for c in docs:
        ps = pod_spec(c)
        for cont in (ps or {}).get("containers") or []:
            used |= set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                   " ".join(cont.get("args") or [])))
    unused = sorted(k for d in docs if d.get("kind") == "ConfigMap"
                    for k in d.get("data") or {} if k not in used)
    r.check(not unused, "kubernetes: every ConfigMap value is passed to a "
            "flag", "unused: %s" % unused)
    return files


def check_compose(r, flags):
    if not r.check(os.path.exists(COMPOSE), "the compose file exists"):
        return
    docs = load_yaml_file(r, COMPOSE)
    if not docs:
        return
    cmds = compose_commands(docs[0])
    check_commands(r, flags, "compose", [(w, a, p) for w, a, p, _ in cmds])
    probs = compose_fit(cmds)
    r.check(not probs, "compose: 3 ingesters, 2 distributors, 1 querier, 1 "
            "compactor, 2 store-gateways; -ring.members names each "
            "ingester and -store-gateway.sharding-ring.members each gateway "
            "by -instance.id and RPC port; data and the bucket on volumes",
            "\n".join(probs))


def check_dockerfile(r, flags):
    if not r.check(os.path.exists(DOCKERFILE), "the Dockerfile exists"):
        return
    with open(DOCKERFILE) as f:
        stages = dockerfile_stages(f.read())
    with open(MAKEFILE) as f:
        make = f.read()
    if not r.check(len(stages) >= 2, "the Dockerfile has a build and a "
                   "runtime stage"):
        return
    (bfrom, build), (rfrom, run) = stages[0], stages[-1]
    r.check(re.match(r"FROM\s+debian:12\s", bfrom) and
            re.match(r"FROM\s+debian:12-slim\s*$", rfrom),
            "build on debian:12, run on debian:12-slim", bfrom + "\n" + rfrom)
    mk = makefile_packages(make)
    want = sorted(set(mk) - TEST_ONLY_PACKAGES)
    r.eq(sorted(apt_packages(build)), want, "the build stage installs the "
         "Makefile's DEBIAN_PACKAGES minus the test-only ones (%s)" %
         ", ".join(sorted(TEST_ONLY_PACKAGES)))
    conf = makefile_configure(make)
    r.check(conf and any(conf in ins for ins in build),
            "the build stage configures as `make build` does (%s)" % conf,
            "\n".join(build))
    entry = [ins for ins in run if ins.upper().startswith("ENTRYPOINT")]
    cmd = [ins for ins in run if ins.upper().startswith("CMD")]
    try:
        entry = json.loads(entry[-1].split(None, 1)[1]) if entry else []
        cmd = json.loads(cmd[-1].split(None, 1)[1]) if cmd else []
    except ValueError as e:
        entry, cmd = [], []
        r.fail("ENTRYPOINT and CMD are JSON arrays", str(e))
    r.check(entry and entry[0].endswith("/smolder"),
            "the image's entrypoint is smolder", str(entry))
    check_commands(r, flags, "Dockerfile", [("CMD", cmd, [])])
    runtime = apt_packages(run)
    if not shutil.which("dpkg-query"):
        r.skip("runtime packages", "no dpkg-query here")
        return
    missing = []
    for p in runtime:
        q = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                           capture_output=True, text=True)
        if "install ok installed" not in q.stdout:
            missing.append(p)
    r.check(not missing, "the runtime packages are Debian 12 package names "
            "(installed here: %s)" % " ".join(runtime),
            "not installed here: %s" % missing)
    admin = os.environ.get("SMOLDER_ADMIN") or os.path.join(
        os.path.dirname(smolder_bin()), "smolder-admin")
    for b in (smolder_bin(), admin):
        if not os.path.exists(b):
            r.skip("libraries of %s" % b, "not built")
            continue
        pk = needed_packages(b)
        if pk is None:
            r.skip("libraries of %s" % b, "no readelf, ldd or dpkg")
            continue
        lacking = sorted("%s (%s)" % (lib, p) for lib, p in pk.items()
                         if not SANITIZER_LIBS.match(lib) and
                         p not in BASE_PACKAGES and p not in runtime)
        r.check(not lacking, "the runtime stage has every library %s links "
                "(%d)" % (os.path.basename(b), len(pk)),
                "missing: %s" % ", ".join(lacking))


def check_launcher_flags(r, flags):
    if not r.check(os.access(LAUNCHER, os.X_OK),
                   "deploy/local/smolder-cluster is executable"):
        return
    for path in (LAUNCHER, os.path.join(DEPLOY, "README.md")):
        with open(path) as f:
            text = f.read()
        probs = text_problems(text, flags)
        names, _ = text_flags(text)
        r.check(not probs and names, "%s: the %d flags it names are the "
                "binary's" % (os.path.relpath(path, source_dir()), len(names)),
                "\n".join(probs))
    tmp = tempfile.mkdtemp(prefix="smolder-plan-")
    try:
        for extra in ([], ["--addresses", "single"],
                      ["--etcd", "127.0.0.1:2379"]):
            what = " ".join(extra) or "default"
            rc, out, err = run_launcher(["--dir", os.path.join(tmp, "c"),
                                         "plan"] + extra, timeout=30)
            rows, cmds = plan_commands(out)
            if not r.check(rc == 0 and len(cmds) == 9,
                           "launcher plan (%s): 9 processes" % what,
                           out + err):
                continue
            check_commands(r, flags, "launcher (%s)" % what, cmds)
            if "--etcd" in extra:
                # every process but the gateways follows etcd; none is
                # given a static ingester list
                bad = [w for w, argv, _ in cmds
                       if "store-gateway" not in w and (
                           flag_value(argv, "ring.etcd.endpoints") !=
                           "127.0.0.1:2379" or
                           flag_value(argv, "ring.members") is not None)]
                r.check(not bad, "launcher plan --etcd: membership from "
                        "etcd, no -ring.members", ", ".join(bad))
        r.check(not os.path.exists(os.path.join(tmp, "c")),
                "plan creates nothing")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------
# (b) The launcher runs a cluster.
# --------------------------------------------------------------------------

def bindable(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, int(port)))
        return True
    except OSError:
        return False
    finally:
        s.close()


def http_call(hostport, method, path, body=None, timeout=10):
    host, port = hostport.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        hdrs = {"Content-Length": str(len(body))} if body is not None else {}
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        return 0, "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()


def proc_state(pid):
    """'alive', 'zombie' or 'gone'."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        if os.path.isdir("/proc/self"):
            return "gone"
        try:
            os.kill(pid, 0)
            return "alive"
        except OSError:
            return "gone"
    return "zombie" if st.rsplit(")", 1)[1].split()[0] in "ZX" else "alive"


def proc_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def read_layout(d):
    rows = {}
    try:
        with open(os.path.join(d, "cluster.tsv")) as f:
            for ln in f:
                if ln.strip() and not ln.startswith("#"):
                    name, role, http_addr, rpc = ln.rstrip("\n").split("\t")
                    rows[name] = (role, http_addr, rpc)
    except OSError:
        pass
    return rows


def read_pids(d, layout):
    pids = {}
    for name in layout:
        try:
            with open(os.path.join(d, name, "smolder.pid")) as f:
                pids[name] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    return pids


def parse_status(out):
    """({name: (alive, ready)}, ACTIVE and healthy ring members)."""
    procs, active = {}, 0
    roles = ("ingester", "distributor", "querier", "compactor",
             "store-gateway")
    for ln in out.split("\n"):
        p = ln.split()
        if len(p) >= 7 and p[1] in roles:
            procs[p[0]] = (p[3], p[4])
        elif len(p) >= 5 and p[1] == "ACTIVE" and p[2] == "true":
            active += 1
    return procs, active


def kill_leftovers(layout, pids):
    """SIGKILL every pid of ours still running (its command line still has
    our -http.listen-address).  Returns the names killed."""
    killed = []
    for name, pid in pids.items():
        want = "-http.listen-address=%s" % layout[name][1]
        if proc_state(pid) == "alive" and want in proc_cmdline(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(name)
            except OSError:
                pass
    return killed


def check_launcher_runs(r):
    tmp = tempfile.mkdtemp(prefix="smolder-deploy-")
    d = os.path.join(tmp, "cluster")
    counts = ["--distributors", "1", "--ingesters", "3", "--queriers", "1",
              "--compactors", "1", "--store-gateways", "1", "--dir", d]
    layout, pids = {}, {}
    failed_before = r.failed
    try:
        base = None
        for _ in range(10):
            ports = ["--http-port", str(free_port()),
                     "--rpc-port", str(free_port())]
            rc, out, err = run_launcher(counts + ports + ["plan"])
            rows, _ = plan_commands(out)
            addrs = [row[2] for row in rows] + [
                row[3][len("tcp://"):] for row in rows
                if row[3].startswith("tcp://")]
            if rc == 0 and rows and all(bindable(*a.rsplit(":", 1))
                                        for a in addrs):
                base = counts + ports
                break
        if not r.check(base, "free loopback ports for the cluster"):
            return
        t0 = time.monotonic()
        rc, out, err = run_launcher(
            base + ["--wait", "30", "up", "--",
                    "-ring.heartbeat-period=100ms",
                    "-ring.heartbeat-timeout=1s"], timeout=40)
        layout = read_layout(d)
        pids = read_pids(d, layout)
        if not r.check(rc == 0, "launcher up: 1 distributor, 3 ingesters, 1 "
                       "querier, 1 compactor, 1 store-gateway ready in %.1fs" % (
                           time.monotonic() - t0), out + err):
            return
        print("# %s" % " ".join("%s=%s" % (n, layout[n][1])
                                for n in sorted(layout)), flush=True)
        ours = {n: p for n, p in pids.items()
                if proc_state(p) == "alive" and "-http.listen-address=%s" %
                layout[n][1] in proc_cmdline(p)}
        r.check(len(layout) == 7 and len(ours) == 7,
                "a pid file per process, each a live smolder with its "
                "address", "layout %s pids %s live %s" % (layout, pids, ours))
        dist = [v[1] for v in layout.values() if v[0] == "distributor"][0]
        qry = [v[1] for v in layout.values() if v[0] == "querier"][0]
        now = int(time.time())
        st, body = http_call(dist, "POST", "/ingest?name=app.cpu&from=%d&"
                             "until=%d" % (now, now), b"foo;bar 1\n")
        r.check(st == 200, "POST /ingest to the distributor is "
                "acknowledged", "HTTP %d %s" % (st, body))
        st, body = http_call(qry, "GET", "/render?query=app.cpu&"
                             "from=now-1h&until=now&format=collapsed")
        r.check(st == 200 and "foo;bar" in body, "the querier renders it "
                "back", "HTTP %d %s" % (st, body))
        for mode in ("curl", "bash"):
            if mode == "curl" and not shutil.which("curl"):
                r.skip("status with curl", "no curl here")
                continue
            env = {"SMOLDER_CLUSTER_HTTP": "bash"} if mode == "bash" else {}
            rc, out, err = run_launcher(["--dir", d, "status"], env=env,
                                        timeout=30)
            procs, active = parse_status(out)
            r.check(rc == 0 and len(procs) == 7 and
                    all(v == ("yes", "200") for v in procs.values()) and
                    active == 3, "status (%s): 7 processes alive with /ready "
                    "200, the ring has 3 ACTIVE healthy ingesters" % mode,
                    out + err)
        # An ingester killed -9: `up` starts just that one again.
        victim = "ingester-1"
        os.kill(pids[victim], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while proc_state(pids[victim]) == "alive" and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        rc, out, err = run_launcher(["--dir", d, "status"], timeout=30)
        procs, _ = parse_status(out)
        r.check(rc == 1 and procs.get(victim, ("", ""))[0] == "dead",
                "status after kill -9 of %s: exit 1, it is dead" % victim,
                "exit %d\n%s%s" % (rc, out, err))
        rc, out, err = run_launcher(
            base + ["--wait", "30", "up", "--",
                    "-ring.heartbeat-period=100ms",
                    "-ring.heartbeat-timeout=1s"], timeout=40)
        now_pids = read_pids(d, layout)
        changed = sorted(n for n in layout if now_pids.get(n) != pids.get(n))
        r.check(rc == 0 and changed == [victim],
                "up again restarts only %s, and waits for the ring to see "
                "it" % victim, "exit %d, restarted %s\n%s%s" % (
                    rc, changed, out, err))
        pids.update(now_pids)
        # A restart faster than the heartbeat timeout may not have been
        # seen as a failure at all; the probes catch up within a second
        # or two (nng redials with backoff).
        deadline = time.monotonic() + 15
        while True:
            rc, out, err = run_launcher(["--dir", d, "status"], timeout=30)
            procs, active = parse_status(out)
            if (rc == 0 and active == 3) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        r.check(rc == 0 and active == 3, "status: 3 ACTIVE ingesters again",
                out + err)
        st, body = http_call(qry, "GET", "/render?query=app.cpu&"
                             "from=now-1h&until=now&format=collapsed")
        r.check(st == 200 and "foo;bar" in body, "the profile is still "
                "served", "HTTP %d %s" % (st, body))
        rc, out, err = run_launcher(base[:] + ["--ingesters", "4", "up"],
                                    timeout=20)
        r.check(rc != 0 and "another layout is running" in err,
                "up with another layout over a running cluster is refused",
                "exit %d\n%s%s" % (rc, out, err))
        rc, out, err = run_launcher(["--dir", d, "logs", "-n", "1"])
        r.check(rc == 0 and all("%s/smolder.log" % n in out for n in layout),
                "logs prints every process's log", out + err)
        t0 = time.monotonic()
        rc, out, err = run_launcher(["--dir", d, "down"], timeout=45)
        left = {n: proc_state(p) for n, p in pids.items()
                if proc_state(p) == "alive"}
        r.check(rc == 0 and not left and
                len(re.findall(r" stopped$", out, re.M)) == 7,
                "down stops all 7 processes up started, by pid, within the "
                "SIGTERM grace (%.1fs)" % (time.monotonic() - t0),
                "exit %d, still alive %s\n%s%s" % (rc, left, out, err))
        bad = []
        for n in layout:
            path = os.path.join(d, n, "smolder.log")
            try:
                with open(path, errors="replace") as f:
                    log = f.read()
            except OSError:
                log = ""
            if 'msg="stopped"' not in log[-4000:]:
                bad.append("%s: log does not end with a clean stop" % n)
            bad += ["%s: sanitizer report (%s)" % (n, m)
                    for m in SANITIZER_MARKERS if m in log]
        r.check(not bad, "every process exited cleanly on SIGTERM, with no "
                "sanitizer report", "\n".join(bad))
        rc, out, err = run_launcher(["--dir", d, "status"])
        r.check(rc == 3 and not os.path.exists(os.path.join(
            d, "ingester-0", "smolder.pid")), "status after down: nothing "
            "running (exit 3), no pid files", "exit %d\n%s%s" % (rc, out, err))
    finally:
        layout = layout or read_layout(d)
        pids.update(read_pids(d, layout))
        killed = kill_leftovers(layout, pids)
        if killed:
            r.fail("cleanup had to SIGKILL %s" % ", ".join(killed))
        if r.failed > failed_before or os.environ.get("SM_KEEP_DATA") == "1":
            print("# launcher cluster dir kept: %s" % d, flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    install_timeout(BUDGET_S)
    r = Results("test_deploy")
    if not r.check(yaml is not None, "python3-yaml is installed",
                   "import yaml failed: install Debian's python3-yaml "
                   "(make deps does)"):
        r.finish()
    b = smolder_bin()
    if not os.access(b, os.X_OK):
        r.skip_all("no smolder binary at %s (set SMOLDER_BIN)" % b)
    p = subprocess.run([b, "-help"], capture_output=True, text=True,
                       timeout=30)
    flags = Flags(p.stdout)
    if not r.check(p.returncode == 0 and len(flags.types) > 20 and
                   {"ingester", "distributor", "querier", "compactor"} <=
                   flags.targets, "smolder -help lists %d flags and the "
                   "targets %s" % (len(flags.types), sorted(flags.targets)),
                   p.stdout + p.stderr):
        r.finish()
    self_check(r, flags)
    check_kubernetes(r, flags)
    check_compose(r, flags)
    check_dockerfile(r, flags)
    check_launcher_flags(r, flags)
    check_launcher_runs(r)
    r.finish()


if __name__ == "__main__":
    main()
