#!/usr/bin/env python3
"""
test_bucket_sealed.py -- encryption at rest: with
-storage.encryption.key-file the bucket holds only ciphertext, answers
from it are the same, keys rotate without rewriting anything, and a
process without the keys refuses the objects instead of answering short.
The single binary, a filesystem bucket outside its data dir.

  1. Real pprof profiles (Go CPU, Go heap, parca's alloc_objects) and a
     folded upload, at fixed times; POST /ingester/flush cuts and ships
     (smolder_bucket_sealed_bytes_total grows); the answers are captured
     (/render JSON and collapsed, SelectMergeStacktraces).
  2. Rotation: the key file gets a new key first (the old one stays); a
     second batch is shipped.  Every object in the bucket starts with the
     sealed header and names the key that sealed it -- the first batch's
     objects k1, the second's k2 -- and no object holds a frame name of
     the answers (at least 20 names looked for) or a series label.
     `smolder-admin bucket verify` and `bucket get` with the key file
     read it; `bucket get` without it refuses; `bucket keys`, without
     it, names the KEK of every object and counts them per KEK.
  3. The data dir wiped, the same -instance.id started again with the
     keys: it restores its blocks from the bucket
     (smolder_ingester_restored_blocks_total > 0, sealed objects opened)
     and every captured answer is byte-identical.
  4. Wiped again, started without the key file: it does not serve the
     history short -- the restore is refused, so the process exits 1
     before it turns ready -- and its log names
     -storage.encryption.key-file.  With the keys, the still-empty
     directory restores.
Every process started here is stopped by PID.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import (DataServer, Workspace, admin, connect,  # noqa: E402
                        flush, have_admin, metrics, wait_metric)
from smolder import ServerError, data_dir, metric_value, run_script  # noqa: E402

BUDGET_S = 150
T0 = 1700000000
K1 = "k1 " + "1f" * 32
K2 = "k2 " + "2e" * 32
PROFILES = [("parca__fib.pb.gz", "sealgo", T0 + 5),
            ("parca__alloc_objects.pb.gz", "sealheap", T0 + 20)]
SECOND = [("parca__fgprof.pb.gz", "sealbench", T0 + 40)]
FOLDED = ("sealfolded.cpu{env=secretenv}", T0 + 50,
          b"main;sealedFrameAlpha;sealedFrameBeta 7\nmain;sealedGamma 3\n")


def write_keys(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    st = os.stat(path)       # past the once-a-second check
    os.utime(path, (st.st_atime + 2, st.st_mtime + 2))


def ingest(r, srv, batch):
    for fname, app, t in batch:
        with open(os.path.join(data_dir(), fname), "rb") as f:
            body = f.read()
        resp = srv.ingest({"name": app, "format": "pprof", "spyName": "gospy",
                           "from": str(t), "until": str(t)}, body)
        r.check(resp.status == 200, "ingest %s" % fname, resp.describe())


QUERIES = []


def queries():
    """(what, method, path, query or body) of every captured answer."""
    if QUERIES:
        return QUERIES
    rng = {"from": str(T0 - 60), "until": str(T0 + 600)}
    for app, types in (("sealgo", ["process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                                   "process_cpu:samples:count:cpu:nanoseconds"]),
                       ("sealheap", ["memory:alloc_objects:count:space:bytes",
                                     "memory:alloc_space:bytes:space:bytes"]),
                       ("sealbench", ["process_cpu:time:nanoseconds:wallclock:nanoseconds"])):
        for t in types:
            q = dict(rng, query='%s{service_name="%s"}' % (t, app))
            QUERIES.append(("render " + app + " " + t, "render", q))
            QUERIES.append(("collapsed " + app + " " + t, "render",
                            dict(q, format="collapsed")))
            QUERIES.append(("SelectMergeStacktraces " + app + " " + t, "smst",
                            {"profile_typeID": t,
                             "label_selector": '{service_name="%s"}' % app,
                             "start": str((T0 - 60) * 1000),
                             "end": str((T0 + 600) * 1000)}))
    QUERIES.append(("render folded", "render",
                    dict(rng, query="sealfolded.cpu{env=\"secretenv\"}")))
    return QUERIES


def capture(srv):
    out = {}
    for what, kind, q in queries():
        if kind == "render":
            resp = srv.request("GET", "/pyroscope/render", query=q, timeout=60)
        else:
            resp = connect(srv, "SelectMergeStacktraces", q)
        out[what] = (resp.status, resp.body)
    return out


def frame_names(answers):
    names = set()
    for what, (status, body) in answers.items():
        if not what.startswith("collapsed") or status != 200:
            continue
        for line in body.decode(errors="replace").splitlines():
            stack = line.rsplit(" ", 1)[0]
            names.update(f for f in stack.split(";") if len(f) >= 10)
    return names


def objects(bucket):
    for d, _, fs in os.walk(bucket):
        for f in fs:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                yield os.path.relpath(p, bucket), fh.read()


def ship(r, srv, what):
    resp = flush(srv)
    r.check(resp.status == 200, "%s: POST /ingester/flush -> 200" % what,
            resp.describe())
    v = wait_metric(srv, "smolder_ingester_ship_blocks_pending",
                    lambda x: x == 0, timeout=30)
    r.check(v == 0, "%s: nothing left to ship" % what, repr(v))


def body(r):
    ws = Workspace("bucket_sealed")
    r.at_end(lambda: ws.cleanup(r))
    bucket, keys = ws.path("bucket"), ws.path("keys")
    write_keys(keys, K1 + "\n")
    base = ["-storage.backend=filesystem", "-storage.filesystem.dir=" + bucket,
            "-instance.id=sealed-solo", "-validation.reject-older-than=0",
            "-ingester.ship-interval=1s"]
    sealed = base + ["-storage.encryption.key-file=" + keys]

    # 1. ingest and ship under k1
    srv = DataServer(ws.data_dir("d1"), ws.log_dir("d1"), sealed).start()
    try:
        ingest(r, srv, PROFILES)
        resp = srv.ingest({"name": FOLDED[0], "from": str(FOLDED[1]),
                           "until": str(FOLDED[1])}, FOLDED[2])
        r.check(resp.status == 200, "ingest folded", resp.describe())
        ship(r, srv, "k1")
        first = {k for k, _ in objects(bucket)}
        r.check(any(k.endswith("/block") for k in first),
                "k1: block objects in the bucket", sorted(first))
        _, m = metrics(srv)
        sb = metric_value(m, "smolder_bucket_sealed_bytes_total") or 0
        r.check(sb > 10000, "smolder_bucket_sealed_bytes_total counts the "
                "blocks", repr(sb))

        # 2. rotate: k2 seals, k1 still opens
        write_keys(keys, K2 + "\n" + K1 + "\n")
        time.sleep(3.0)          # polled every second, read once settled
        ingest(r, srv, SECOND)
        ship(r, srv, "k2")
        want = capture(srv)
    finally:
        srv.stop()
    for what, (status, b) in want.items():
        r.check(status == 200 and len(b) > 40, "answer %s" % what,
                "%d %r" % (status, b[:200]))
    names = frame_names(want)
    names.update({"sealedFrameAlpha", "sealedFrameBeta", "secretenv"})
    r.check(len(names) >= 20, ">= 20 frame names to look for",
            "%d" % len(names))
    objs = dict(objects(bucket))
    r.check(len(objs) > len(first), "k2: more objects shipped",
            "%d then %d" % (len(first), len(objs)))
    bad_hdr = [k for k, v in objs.items() if not v.startswith(b"SMSEAL01")]
    r.check(not bad_hdr, "every object is sealed (%d objects)" % len(objs),
            bad_hdr[:5])
    kid = {k: v[8:24].rstrip(b"\0").decode() for k, v in objs.items()}
    wrong1 = [k for k in first if kid.get(k) != "k1"]
    wrong2 = [k for k in objs if k not in first and kid[k] != "k2"
              and not k.endswith("bucket-index.json")]
    r.check(not wrong1, "objects of the first batch name k1", wrong1[:5])
    r.check(not wrong2, "objects shipped after the rotation name k2",
            wrong2[:5])
    leaks = [(k, n) for k, v in objs.items() for n in names
             if n.encode() in v]
    r.check(not leaks, "no frame name or label value in any object's bytes",
            leaks[:5])
    # Frame names are not visible in plain block objects either (their
    # parts are zstd): what shows the bytes are ciphertext is that none of
    # a plain object's structure is left -- no zstd frame, no block
    # footer, no meta.json field, not the tenant -- while the same
    # objects opened with the keys (smolder-admin below) have all of it.
    marks = (b"\x28\xb5\x2f\xfd", b"SMBK", b'"ulid"', b"anonymous")
    shown = [(k, m) for k, v in objs.items() for m in marks if m in v]
    r.check(not shown, "no zstd frame, block footer, meta.json field or "
            "tenant name in any stored object", shown[:5])
    if have_admin():
        bflags = [f for f in sealed if f.startswith("-storage.")]
        ver = admin("bucket", "verify", *bflags)
        r.check(ver.rc == 0, "smolder-admin bucket verify with the keys: clean",
                ver.describe())
        meta = next(k for k in first if k.endswith("meta.json"))
        got = admin("bucket", "get", "-key=" + meta, *bflags)
        r.check(got.rc == 0 and '"ulid"' in got.out and "anonymous" in
                got.out, "smolder-admin bucket get opens a sealed meta.json",
                got.describe())
        blk = next(k for k in first if k.endswith("/block"))
        got = admin("bucket", "get", "-key=" + blk, *bflags)
        r.check(got.rc == 0 and got.out.endswith("SMBK") and
                "\x28\ufffd/\ufffd" in got.out,
                "the block object opened: zstd frames and its SMBK footer",
                got.describe()[:300])
        got = admin("bucket", "get", "-key=" + meta, *[f for f in base
                                                       if f.startswith("-storage.")])
        r.check(got.rc != 0 and "key-file" in got.err,
                "without the keys smolder-admin refuses it", got.describe())
        # which KEK sealed what, with no key file: when may k1 go?
        got = admin("bucket", "keys", *[f for f in base
                                        if f.startswith("-storage.")])
        listed = {}
        for ln in got.out.splitlines():
            f = ln.split()
            if len(f) == 3 and not ln.startswith("total "):
                listed[f[2]] = f[0]
        r.check(got.rc == 0 and listed == kid and
                "total k1 " in got.out and "total k2 " in got.out,
                "smolder-admin bucket keys names the KEK of every object "
                "(no key file needed)", got.describe()[:600])

    # 3. a wiped disk restores from the sealed bucket: same answers
    srv = DataServer(ws.data_dir("d2"), ws.log_dir("d2"), sealed).start()
    try:
        _, m = metrics(srv)
        n = metric_value(m, "smolder_ingester_restored_blocks_total") or 0
        r.check(n > 0, "restored blocks from the sealed bucket", repr(n))
        got = capture(srv)
        for what, (status, b) in want.items():
            r.check(got[what] == (status, b),
                    "restored: %s byte-identical" % what,
                    "%d %r" % (got[what][0], got[what][1][:200]))
        _, m = metrics(srv)
        ob = metric_value(m, "smolder_bucket_opened_bytes_total") or 0
        r.check(ob > 10000, "smolder_bucket_opened_bytes_total counts the "
                "restore", repr(ob))
    finally:
        srv.stop()

    # 4. no key file: refused, never served short
    srv = DataServer(ws.data_dir("d3"), ws.log_dir("d3"), base,
                     ready_timeout=30)
    try:
        try:
            srv.start()
            ready = True
        except ServerError:
            ready = False
        r.check(not ready, "without the keys: never ready (restore refused)")
        if ready:
            got = capture(srv)
            short = [w for w, (st, b) in got.items()
                     if st == 200 and (st, b) != want[w]]
            r.check(not short, "without the keys: no short 200", short[:5])
        else:
            rc = srv.proc.wait(timeout=30)
            r.check(rc == 1, "without the keys: exit status 1", repr(rc))
        r.check("storage.encryption.key-file" in srv.stderr_text(),
                "the log names -storage.encryption.key-file",
                srv.stderr_tail(8))
    finally:
        srv.stop(exited_ok=True)
    srv = DataServer(ws.data_dir("d3"), ws.log_dir("d3-keys"), sealed).start()
    try:
        got = capture(srv)
        same = [w for w in want if got[w] == want[w]]
        r.check(len(same) == len(want), "the same directory with the keys: "
                "restored, every answer byte-identical",
                "%d of %d" % (len(same), len(want)))
    finally:
        srv.stop()


if __name__ == "__main__":
    run_script("test_bucket_sealed", BUDGET_S, body)
