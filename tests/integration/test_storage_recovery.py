#!/usr/bin/env python3
"""
test_storage_recovery.py -- storage that recovers by itself.

Disk full (needs a tmpfs mount: root; skipped with a message otherwise),
twice: the server's data dir is on a tmpfs; a 40 MiB file is parked
there, the rest is filled by ingesting (one series label value per
request) until a write is refused.  Then:
  - the refusal is a 503 whose message names the cause (no space);
  - /ready is 503 and names the storage error;
  - the parked file is removed (no restart): /ready turns 200 and an
    ingest succeeds within the bound (measured time printed);
  - every acknowledged request is present: its label value is listed and
    the merged total equals the sum of the acknowledged values.
  1. "reserve": 160 MiB tmpfs, the default -ingester.min-free-disk=64MiB:
     writes are refused before RocksDB runs out; back within 5 s (the
     reserve is re-read every 200 ms).
  2. "rocksdb": 80 MiB tmpfs, -ingester.min-free-disk=0: the store itself
     hits ENOSPC (the head log's append, or RocksDB's flush); back within
     8 s (the head log probes free space every second, RocksDB's
     SstFileManager retries every 5 s).
Head-log reclaim (any data dir): 600 writes of the same 300 stacks make a
head log of some MB; after /ingester/flush (a block cut) the ingester's
disk bytes drop below a third of what they were and below 1 MiB.
"""

import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from smolder import Results, Server, install_timeout, metric  # noqa: E402

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
MiB = 1 << 20


class DirServer(Server):
    """A Server whose data dir is `path` (on the tmpfs)."""

    def __init__(self, path, **kw):
        Server.__init__(self, **kw)
        self.dir = path

    def argv(self):
        return [a if not a.startswith("-data.dir=") else
                "-data.dir=" + self.dir for a in Server.argv(self)]


def mount_tmpfs(path, size):
    if os.geteuid() != 0:
        return "not root"
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size,
                        "tmpfs", path], capture_output=True, text=True)
    return None if p.returncode == 0 else (p.stderr.strip() or "mount "
                                           "failed")


def total_of(srv, app):
    """The merged total, or the failed answer's description (so a check
    that compares it says why)."""
    resp = srv.render('%s{service_name="%s"}' % (CPU, app), max_nodes=1)
    if resp.status != 200:
        return "no total: " + resp.describe()
    return resp.json()["flamebearer"]["numTicks"]


def disk_full(r, tag, size, flags, bound):
    mnt = tempfile.mkdtemp(prefix="sm-full-")
    why = mount_tmpfs(mnt, size)
    if why is not None:
        os.rmdir(mnt)
        r.skip("disk full on a tmpfs (%s)" % tag, "cannot mount a tmpfs: "
               "%s" % why)
        return
    try:
        with DirServer(os.path.join(mnt, "d"), extra_flags=flags) as s:
            park = os.path.join(mnt, "park")
            with open(park, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, 40 * MiB)
            acked, total, refused = [], 0, None
            rnd = random.Random(16)
            for i in range(2000):
                lines = ["r%d;f%d;g%d %d" % (i, rnd.randrange(10 ** 9), j,
                                             j + 1) for j in range(1500)]
                resp = s.ingest({"name": 'full.cpu{req=%d}' % i},
                                "\n".join(lines).encode())
                if resp.status == 200:
                    acked.append(i)
                    total += sum(range(1, 1501)) * 10000000
                    continue
                refused = resp
                break
            r.check(refused is not None and refused.status == 503 and
                    "space" in refused.text(),
                    "%s: a write on a full disk is 503 naming the cause "
                    "(%d acknowledged before)" % (tag, len(acked)),
                    refused.describe() if refused else "never refused")
            resp = s.request("GET", "/ready")
            r.check(resp.status == 503 and "storage" in resp.text() and
                    "space" in resp.text(),
                    "%s: /ready is 503 naming the storage error" % tag,
                    resp.describe())
            resp = s.ingest({"name": "after.cpu"}, b"a;b 1\n")
            r.eq(resp.status, 503, "%s: writes keep refusing while full" %
                 tag)

            os.unlink(park)
            t0 = time.monotonic()
            ready_at = ok_at = None
            while time.monotonic() - t0 < 15 and ok_at is None:
                if ready_at is None and s.ready():
                    ready_at = time.monotonic() - t0
                resp = s.ingest({"name": "after.cpu"}, b"a;b 1\n")
                if resp.status == 200:
                    ok_at = time.monotonic() - t0
                    break
                time.sleep(0.2)
            print("%s: recovery after freeing space: ready %s s, first "
                  "write %s s" % (tag, ready_at, ok_at))
            r.check(ok_at is not None and ok_at <= bound,
                    "%s: writes succeed again without restart within %d s "
                    "(%s s)" % (tag, bound, ok_at))
            r.check(s.ready(), "%s: /ready is 200 again" % tag)
            resp = s.request("GET", "/label-values",
                             {"label": "req", "from": "now-1h",
                              "until": "now+1h"})
            got = set(resp.json()) if resp.status == 200 else set()
            missing = [i for i in acked if str(i) not in got]
            r.check(not missing, "%s: every acknowledged request's series "
                    "is listed (%d)" % (tag, len(acked)),
                    "missing %r" % missing[:20])
            r.eq(total_of(s, "full"), total, "%s: the merged total is the "
                 "sum of every acknowledged value" % tag)
            s.check_stopped(r)
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        try:
            os.rmdir(mnt)
        except OSError:
            pass


def head_reclaim(r):
    with Server() as s:
        body = "".join("main;fn%d;leaf%d %d\n" % (j % 50, j, j + 1)
                       for j in range(300)).encode()
        for i in range(600):
            resp = s.ingest({"name": 'rec.cpu{i=%d}' % (i % 20)}, body)
            if resp.status != 200:
                r.fail("ingest %d" % i, resp.describe())
                break
        before = metric(s, "smolder_ingester_disk_bytes", None)
        resp = s.request("POST", "/ingester/flush", body=b"")
        r.eq(resp.status, 200, "/ingester/flush cuts the head")
        after = None
        for _ in range(20):
            after = metric(s, "smolder_ingester_disk_bytes", None)
            if before and after is not None and after < before / 3:
                break
            time.sleep(0.25)
        print("disk bytes: %s before the cut, %s after" % (before, after))
        r.check(before is not None and after is not None and
                after < before / 3 and after < MiB,
                "head-log space is reclaimed after the cut",
                "%s -> %s" % (before, after))
        r.eq(total_of(s, "rec"), 600 * sum(range(1, 301)) * 10000000,
             "every write is still in the merged total")
        s.check_stopped(r)


def main():
    install_timeout(400)
    r = Results("test_storage_recovery")
    head_reclaim(r)
    disk_full(r, "reserve", 160 * MiB, [], 5)
    disk_full(r, "rocksdb", 80 * MiB, ["-ingester.min-free-disk=0"], 8)
    r.finish()


if __name__ == "__main__":
    main()
