#!/usr/bin/env python3
"""
test_remote_write.py -- -remote-write.url forwarding (distributor/
remote_write.h) between two Smolder processes.

Receiver B runs with API keys (-auth.keys-file): key `fwd` writes tenant
`central`, key `rd` reads it.  Sender A (multi-tenant by header) forwards
to B with -remote-write.key=<fwd>.
  1. tenants t1 and t2 write folded profiles to A (several apps, random
     stacks, a query string with from/until/spyName/sampleRate and a label
     value that needs escaping); B's tenant `central` ends up with exactly
     the sum of both (the key's tenant wins over the forwarded
     X-Scope-OrgID), checked per app with /render collapsed;
     smolder_remote_write_sent_total on A = uploads, nothing dropped;
  2. B is stopped; A keeps accepting (every upload 200, these without
     from/until); A's queue length grows and retries are counted; B
     restarts on the same port and data dir 3 s later; the queue drains
     and B has every upload exactly once (no duplicate from the retries),
     placed at the time A accepted it (SelectSeries step 1 s on B: no
     point after the last write), not at the later forward time;
  P. push.v1: Pushes to A (one sample with an ID, one without, and the
     first request sent twice, a client retry) arrive at B as push.v1
     Pushes with exact totals: the retry is recognised by its IDs on B;
  K. persistence: B is stopped, A accepts N uploads and a Push, A is
     killed (SIGKILL) and restarted on the same data dir, then B comes
     back: all N uploads and the Push arrive exactly once, the queue
     metrics go back to 0, nothing dropped;
  C. a torn tail on the queue: B down, A queues M uploads and stops; a
     half-written record is appended to A's newest queue segment; A
     restarts (log line, corrupt-bytes counter), B comes back: the M good
     uploads arrive exactly once;
  F. in flight at a SIGKILL (a receiver that reads the request and never
     answers): after the restart the /ingest upload is dropped as
     "ambiguous" (logged) and never reaches the real receiver; a Push in
     the same place is sent again and arrives once;
  3. a receiver that refuses the key (403: a read-only key) -> uploads
     are dropped as "rejected", not retried forever, and A stays healthy;
  4. a bad -remote-write.url is refused at startup.
"""

import hashlib
import json
import os
import random
import re
import socket
import struct
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import DataServer, Workspace, limit_flags  # noqa: E402
from oracle import parse_collapsed  # noqa: E402
from smolder import (Results, ServerError, install_timeout, metric,  # noqa: E402
                     run_seed)
from test_push import PATH as PUSH_PATH, pprof, push_proto  # noqa: E402

BUDGET_S = 420
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
TYPE = "memory:alloc_objects:count::"
FWD = "smk_forwarder_key_0123456789abcdef"
RD = "smk_reader_key_0123456789abcdefgh"


def sha(k):
    return "sha256:" + hashlib.sha256(k.encode()).hexdigest()


def wait_for(fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.1)
    return fn()


def start_on_port(data, logdir, port, flags, name):
    """A DataServer on a fixed port (the sender's URL names it)."""
    return DataServer(data, logdir, name=name, extra_flags=flags,
                      port=port).start()


def render_hour(srv, query):
    """The collapsed stacks of query over the last and the next hour, read
    with the reader's key."""
    now = int(time.time())
    return srv.request("GET", "/render", {
        "query": query, "from": str(now - 3600), "until": str(now + 3600),
        "format": "collapsed"},
        headers={"Authorization": "Bearer " + RD})


class Writer:
    def __init__(self, rng, apps=("fa", "fb", "fc")):
        self.rng = rng
        self.apps = list(apps)
        self.want = {}         # app -> {stack: total}
        self.n = 0

    def write(self, r, srv, what, omit_time=False):
        app = self.rng.choice(self.apps)
        tenant = self.rng.choice(["t1", "t2"])
        stacks = {}
        for _ in range(self.rng.randrange(1, 5)):
            st = "main;f%d;g%d" % (self.rng.randrange(5),
                                   self.rng.randrange(3))
            stacks[st] = stacks.get(st, 0) + self.rng.randrange(1, 20)
        body = "".join("%s %d\n" % kv for kv in stacks.items()).encode()
        now = int(time.time())
        q = {"name": "%s.alloc_objects{env=a b&c}" % app,
             "spyName": "gospy", "sampleRate": "100"}
        if not omit_time:
            q.update({"from": str(now), "until": str(now)})
        resp = srv.request("POST", "/ingest", q, body,
                           {"X-Scope-OrgID": tenant})
        if resp.status != 200:
            r.fail("%s: upload accepted by the sender" % what,
                   resp.describe())
            return False
        cur = self.want.setdefault(app, {})
        for st, v in stacks.items():
            cur[st] = cur.get(st, 0) + v
        self.n += 1
        return True

    def matches(self, srv):
        for app, want in self.want.items():
            resp = render_hour(srv, '%s{service_name="%s",env="a b&c"}'
                               % (TYPE, app))
            if resp.status != 200 or parse_collapsed(resp.text()) != want:
                return False
        return True

    def nothing(self, srv):
        """The receiver has none of this writer's apps."""
        for app in self.want:
            resp = render_hour(srv, '%s{service_name="%s"}' % (TYPE, app))
            if resp.status != 200 or parse_collapsed(resp.text()):
                return False
        return True

    def diff(self, srv):
        out = []
        for app, want in self.want.items():
            resp = render_hour(srv, '%s{service_name="%s"}' % (TYPE, app))
            out.append("%s: want %r got %s %r" % (
                app, want, resp.status, resp.text()[:300]))
        return "\n".join(out)


class Pusher:
    """push.v1 Pushes of app "pa" (time_nanos set: the forward keeps the
    profile's time) and the totals B must end with."""

    def __init__(self, rng):
        self.rng = rng
        self.want = {}
        self.n = 0

    def uuid(self):
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def request(self, both_ids=False):
        """A PushRequest of two samples: one with an ID, the other one
        without (or with one too: a request a client may retry)."""
        tn = int(time.time() * 1e9)
        samples = []
        add = {}
        for sid in (self.uuid(), self.uuid() if both_ids else ""):
            stacks = [(["main", "p%d" % self.rng.randrange(4)],
                       self.rng.randrange(1, 50) * 1000)
                      for _ in range(self.rng.randrange(1, 4))]
            for fr, v in stacks:
                k = ";".join(fr)
                add[k] = add.get(k, 0) + v
            samples.append((pprof(stacks, time_nanos=tn), sid))
        body = push_proto([([("__name__", "process_cpu"),
                             ("service_name", "pa")], samples)])
        return body, add

    def push(self, r, srv, what, body_add=None, count=True):
        body, add = body_add if body_add is not None else self.request()
        return self.send(r, srv, what, body, add, count)

    def send(self, r, srv, what, body, add, count=True):
        resp = srv.request("POST", PUSH_PATH, None, body, {
            "Content-Type": "application/proto", "X-Scope-OrgID": "t1"})
        if resp.status != 200:
            r.fail("%s: Push accepted by the sender" % what,
                   resp.describe())
            return None
        if count:
            for k, v in add.items():
                self.want[k] = self.want.get(k, 0) + v
            self.n += 1
        return body, add

    def got(self, srv):
        resp = render_hour(srv, '%s{service_name="pa"}' % CPU)
        return parse_collapsed(resp.text()) if resp.status == 200 else None

    def matches(self, srv):
        return self.got(srv) == self.want


class Blackhole:
    """A receiver that takes the connection and the request, and never
    answers: the sender's request stays in flight."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._read, args=(c,),
                             daemon=True).start()

    def _read(self, c):
        while True:
            try:
                d = c.recv(65536)
            except OSError:
                return
            if not d:
                return
            self.received += len(d)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


def queue_segments(data):
    d = os.path.join(data, "remote-write")
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if f.endswith(".wal"))


def drained(srv):
    return (metric(srv, "smolder_remote_write_queue_length") == 0 and
            metric(srv, "smolder_remote_write_queue_bytes") == 0)


def main():
    r = Results("test_remote_write")
    install_timeout(BUDGET_S)
    ws = Workspace("rw")
    seed = run_seed()
    rng = random.Random(seed)
    keys = ws.path("keys.txt")
    with open(keys, "w") as f:
        f.write("%s central write\n%s central read\n" % (sha(FWD), sha(RD)))
    bflags = ["-auth.multitenancy-enabled", "-auth.keys-file=%s" % keys,
              ] + limit_flags()
    b = a = a2 = None
    bdata = ws.data_dir("b")
    try:
        b = DataServer(bdata, ws.log_dir("b"), name="receiver",
                       extra_flags=bflags).start()
        bport = b.port
        aflags = ["-auth.multitenancy-enabled",
                  "-remote-write.url=http://127.0.0.1:%d/" % bport,
                  "-remote-write.key=%s" % FWD,
                  "-remote-write.max-backoff=400ms"] + limit_flags()
        a = DataServer(ws.data_dir("a"), ws.log_dir("a"), name="sender",
                       extra_flags=aflags).start()
        w = Writer(rng)

        # 1. forwarding while both are up.
        ok = all(w.write(r, a, "up") for _ in range(20))
        r.check(ok, "up: 20 uploads accepted by the sender")
        r.check(wait_for(lambda: w.matches(b), 20),
                "up: the receiver's tenant has exactly what the sender "
                "accepted (every app, collapsed)", w.diff(b))
        r.eq(metric(a, "smolder_remote_write_sent_total"), float(w.n),
             "up: sent_total = uploads")

        # P. push.v1 forwarding, a client retry included.
        pu = Pusher(rng)
        first = pu.push(r, a, "push", pu.request(both_ids=True))
        ok = first is not None and pu.push(r, a, "push") is not None
        # The client retries the first request (same IDs): A applies it
        # once and forwards it again; B recognises the IDs.
        ok = ok and pu.push(r, a, "push retry", first, count=False)
        r.check(ok, "push: 3 Push requests accepted by the sender")
        r.check(wait_for(lambda: pu.matches(b), 20),
                "push: the receiver has exactly the pushed samples (the "
                "retried request counted once)",
                "want %r got %r" % (pu.want, pu.got(b)))
        r.check(wait_for(lambda: metric(
            a, "smolder_remote_write_sent_total") == float(w.n + 3), 10),
            "push: sent_total counts the 3 forwarded Pushes",
            str(metric(a, "smolder_remote_write_sent_total")))

        # 2. receiver down, then back on the same port.
        r.check(not b.stop(), "down: the receiver stops cleanly")
        b = None
        sent_before = metric(a, "smolder_remote_write_sent_total")
        ok = all(w.write(r, a, "down", omit_time=True) for _ in range(15))
        t_last = time.time()
        r.check(ok, "down: the sender accepts every upload while the "
                "receiver is down (these without from/until)")
        time.sleep(3.0)
        qlen = metric(a, "smolder_remote_write_queue_length")
        retries = metric(a, "smolder_remote_write_retries_total")
        r.check(qlen >= 1 and retries >= 1, "down: uploads wait in the "
                "queue and retries are counted",
                "queue_length=%s retries=%s" % (qlen, retries))
        r.eq(metric(a, "smolder_remote_write_sent_total"), sent_before,
             "down: nothing counted as sent")
        b = start_on_port(bdata, ws.log_dir("b2"), bport, bflags,
                          "receiver2")
        r.check(wait_for(lambda: metric(
            a, "smolder_remote_write_queue_length") == 0, 20),
            "back: the queue drains")
        r.check(wait_for(lambda: w.matches(b), 20),
                "back: the receiver has every upload exactly once "
                "(no duplicate from retries)", w.diff(b))
        r.eq(metric(a, "smolder_remote_write_sent_total"),
             float(w.n + 3), "back: sent_total = uploads + pushes")
        # The late forwards keep the time the sender accepted them at.
        latest = 0
        for app in w.want:
            resp = b.request("POST", "/querier.v1.QuerierService/"
                             "SelectSeries", body=json.dumps({
                                 "profileTypeID": TYPE,
                                 "labelSelector": '{service_name="%s"}' %
                                 app,
                                 "start": int(t_last - 600) * 1000,
                                 "end": int(time.time() + 60) * 1000,
                                 "step": 1}).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + RD})
            if resp.status == 200:
                for se in resp.json().get("series") or []:
                    for p in se.get("points") or []:
                        latest = max(latest, int(p.get("timestamp", 0)))
        r.check(0 < latest <= (t_last + 1.5) * 1000, "back: uploads sent "
                "without from/until keep the time the sender accepted "
                "them (not the later forward time)",
                "latest point %d ms, last write %d ms" % (
                    latest, t_last * 1000))
        dropped = sum(metric(a, "smolder_remote_write_dropped_total",
                             reason=x)
                      for x in ("queue_full", "rejected", "ambiguous",
                                "shutdown"))
        r.eq(dropped, 0.0, "nothing dropped")

        # K. persistence across a SIGKILL of the sender.
        adata = ws.data_dir("a")
        r.check(not b.stop(), "kill: the receiver stops cleanly")
        b = None
        ok = all(w.write(r, a, "kill") for _ in range(12))
        ok = ok and pu.push(r, a, "kill push") is not None
        r.check(ok, "kill: 12 uploads and a Push accepted while the "
                "receiver is down")
        r.check(wait_for(lambda: metric(
            a, "smolder_remote_write_queue_length") == 13, 5),
            "kill: 13 entries queued",
            str(metric(a, "smolder_remote_write_queue_length")))
        r.check(not a.kill9(), "kill: SIGKILL the sender")
        a = start_on_port(adata, ws.log_dir("a-k"), 0, aflags, "sender-k")
        r.eq(metric(a, "smolder_remote_write_queue_length"), 13.0,
             "kill: the restarted sender finds the 13 entries on disk")
        b = start_on_port(bdata, ws.log_dir("b3"), bport, bflags,
                          "receiver3")
        r.check(wait_for(lambda: drained(a), 30),
                "kill: the queue drains to 0 (length and bytes)")
        r.check(wait_for(lambda: w.matches(b) and pu.matches(b), 20),
                "kill: every upload and the Push arrive exactly once",
                w.diff(b) + "\npush: want %r got %r" % (pu.want, pu.got(b)))
        r.eq(metric(a, "smolder_remote_write_sent_total"), 13.0,
             "kill: the restarted sender sent the 13")
        r.check(len(queue_segments(adata)) <= 2, "kill: sent segments "
                "are deleted", repr(queue_segments(adata)))

        # C. a torn record at the tail of the queue.
        r.check(not b.stop(), "torn: the receiver stops cleanly")
        b = None
        ok = all(w.write(r, a, "torn") for _ in range(6))
        r.check(ok and wait_for(lambda: metric(
            a, "smolder_remote_write_queue_length") == 6, 5),
            "torn: 6 uploads queued while the receiver is down")
        a.check_stopped(r, "torn: the sender exits 0 on SIGTERM with "
                        "entries queued")
        a = None
        segs = [f for f in queue_segments(adata) if os.path.getsize(f) > 0]
        r.check(len(segs) >= 1, "torn: a non-empty queue segment")
        if segs:
            with open(segs[-1], "ab") as f:
                # A header promising 4000 bytes, then only 100: the
                # append a crash cut short.
                f.write(struct.pack("<II", 4000, 0x12345678) + b"x" * 100)
        a = start_on_port(adata, ws.log_dir("a-t"), 0, aflags, "sender-t")
        r.check(re.search(r"torn or corrupt record, truncated.*"
                          r"cut_bytes=108", a.stderr_text()) is not None,
                "torn: the sender logs the cut tail", a.stderr_tail(10))
        r.eq(metric(a, "smolder_remote_write_queue_corrupt_bytes_total"),
             108.0, "torn: 108 corrupt bytes counted")
        r.eq(metric(a, "smolder_remote_write_queue_length"), 6.0,
             "torn: the 6 good entries are still queued")
        b = start_on_port(bdata, ws.log_dir("b4"), bport, bflags,
                          "receiver4")
        r.check(wait_for(lambda: drained(a), 30), "torn: the queue drains")
        r.check(wait_for(lambda: w.matches(b) and pu.matches(b), 20),
                "torn: the 6 good uploads arrive exactly once", w.diff(b))
        dropped = sum(metric(a, "smolder_remote_write_dropped_total",
                             reason=x)
                      for x in ("queue_full", "rejected", "ambiguous",
                                "corrupt"))
        r.eq(dropped, 0.0, "torn: nothing dropped")
        a.check_stopped(r, "sender exits 0 on SIGTERM")
        a = None

        # F. in flight at a SIGKILL: an /ingest upload is dropped as
        # ambiguous, a Push (idempotent) is sent again.
        hole = Blackhole()
        f_data = ws.data_dir("a3")
        hflags = ["-auth.multitenancy-enabled",
                  "-remote-write.url=http://127.0.0.1:%d" % hole.port,
                  "-remote-write.key=%s" % FWD, "-remote-write.timeout=60s",
                  "-remote-write.max-backoff=400ms"] + limit_flags()
        rflags = ["-auth.multitenancy-enabled",
                  "-remote-write.url=http://127.0.0.1:%d" % b.port,
                  "-remote-write.key=%s" % FWD,
                  "-remote-write.max-backoff=400ms"] + limit_flags()
        a = start_on_port(f_data, ws.log_dir("a3"), 0, hflags, "sender3")
        w3 = Writer(random.Random(seed + 3), apps=["fz"])
        r.check(w3.write(r, a, "in flight") and wait_for(
            lambda: hole.received > 200, 10),
            "in flight: an upload reaches a receiver that never answers")
        r.check(not a.kill9(), "in flight: SIGKILL the sender")
        a = start_on_port(f_data, ws.log_dir("a3b"), 0, rflags, "sender3b")
        r.check(wait_for(lambda: metric(
            a, "smolder_remote_write_dropped_total",
            reason="ambiguous") == 1 and drained(a), 10),
            "in flight: after the restart the /ingest upload that was in "
            "flight is dropped as ambiguous, not sent again",
            a.stderr_tail(10))
        r.check(re.search(r"in flight when the process stopped",
                          a.stderr_text()) is not None,
                "in flight: the drop is logged with its reason")
        r.check(w3.nothing(b), "in flight: the receiver never got it "
                "from the restarted sender", w3.diff(b))
        r.check(not a.kill9(), "in flight: SIGKILL the sender again")
        hole.received = 0
        a = start_on_port(f_data, ws.log_dir("a3c"), 0, hflags, "sender3c")
        r.check(pu.push(r, a, "in flight push") is not None and wait_for(
            lambda: hole.received > 200, 10),
            "in flight: a Push reaches the receiver that never answers")
        r.check(not a.kill9(), "in flight: SIGKILL the sender (Push)")
        a = start_on_port(f_data, ws.log_dir("a3d"), 0, rflags, "sender3d")
        r.check(wait_for(lambda: drained(a) and pu.matches(b), 20),
                "in flight: the Push is sent again after the restart and "
                "arrives once", "want %r got %r" % (pu.want, pu.got(b)))
        r.eq(metric(a, "smolder_remote_write_dropped_total",
                    reason="ambiguous"), 0.0,
             "in flight: the Push is not dropped")
        a.check_stopped(r, "sender3 exits 0 on SIGTERM")
        a = None
        hole.close()

        # 3. a key the receiver refuses: dropped, not retried forever.
        a2 = DataServer(ws.data_dir("a2"), ws.log_dir("a2"), name="sender2",
                        extra_flags=[
                            "-auth.multitenancy-enabled",
                            "-remote-write.url=http://127.0.0.1:%d" % b.port,
                            "-remote-write.key=%s" % RD] +
                        limit_flags()).start()
        w2 = Writer(rng)
        ok = all(w2.write(r, a2, "rejected") for _ in range(3))
        r.check(ok and wait_for(lambda: metric(
            a2, "smolder_remote_write_dropped_total",
            reason="rejected") == 3, 10),
            "rejected: a 403 from the receiver drops the upload (counted)",
            a2.stderr_tail(5))
        r.eq(metric(a2, "smolder_remote_write_queue_length"), 0.0,
             "rejected: the queue is empty")
        a2.check_stopped(r, "sender2 exits 0 on SIGTERM")
        a2 = None

        # 4. bad URL.
        try:
            bad = DataServer(ws.data_dir("bad"), ws.log_dir("bad"),
                             name="bad", ready_timeout=10,
                             extra_flags=["-remote-write.url=ftp://x"])
            bad.start()
            r.fail("bad url: refused at startup", "it started")
            bad.stop()
        except ServerError as e:
            r.check("http://" in str(e), "bad url: refused at startup "
                    "with a reason", str(e)[-300:])
        if b is not None:
            b.check_stopped(r, "receiver exits 0 on SIGTERM")
            b = None
    finally:
        for s in (a, a2, b):
            if s is not None:
                s.stop()
    ws.cleanup(r)
    r.finish()


if __name__ == "__main__":
    main()
