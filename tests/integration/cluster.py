"""
cluster.py -- a Smolder cluster on loopback for integration tests: N
ingesters (each its own process serving RPC on tcp://127.0.0.1:<port>), D
distributors and Q queriers, every one a real `smolder -target=...`
process (durability.DataServer) with its own data and log dirs in one
Workspace.  Not a test.

    from cluster import Cluster
    c = Cluster(ws, ingesters=3, distributors=2, queriers=1, rf=3)
    c.start()
    c.distributors[0].ingest({"name": "app.cpu"}, b"a;b 1\\n")
    c.queriers[0].render("app.cpu")
    c.kill9_ingester(1); c.restart_ingester(1); c.wait_ring(active=3)
    c.check_stopped(results)

Ingesters keep their id (-instance.id=ingester-<i>), RPC port and data dir
across restarts; HTTP ports are picked afresh, except the distributors'
with distributor_peers=True: their ports are picked up front and every
distributor gets -distributor.peers listing all of them (itself
included), so they share each tenant's ingestion rate.  Heartbeats are fast
(100 ms period, 1 s timeout) so membership settles within a test's
patience.  Stopping judges every process (smolder.Server.stop: unclean
exits and sanitizer reports are problems).

The tests that compare a cluster with a single binary fed the same
uploads run both through single_then_cluster or reference_and_rf3.
"""

import time

from durability import (DataServer, Workspace, admin_listener, limit_flags,
                        wait_metric, workspace_for)
from smolder import Results, free_port, install_timeout

HEARTBEAT = "100ms"
# An ingester's /ready waits this long once ACTIVE (a few heartbeats), so
# the rings have seen it when a test goes on.
MIN_READY = "300ms"
HEARTBEAT_TIMEOUT = "1s"
# Uploads of any age are taken, and blocks keep raw buckets only (no
# downsampling tiers): what the tests that read shipped data back compare
# with their uploads.
RAW_ANY_AGE = ["-validation.reject-older-than=0",
               "-compactor.downsample-tiers=none"]


class Cluster:
    def __init__(self, ws, ingesters=3, distributors=2, queriers=1, rf=3,
                 extra=(), ingester_extra=(), log_level="info", name="c",
                 compactors=0, compactor_extra=(),
                 heartbeat_timeout=None, distributor_peers=False,
                 distributor_extra=(), gateways=0, gateway_rf=2,
                 gateway_extra=(), ingester_zones=None, etcd=None,
                 gateway_store=None, admin_listeners=False):
        self.ws = ws
        # each process gets an admin listener of its own, where its
        # cluster operations go (durability.operate): what multitenancy
        # by header without keys needs for flushes and compactor runs
        self.admin_listeners = admin_listeners
        # "host:port" of an etcd (tests/tools/etcd_server.py): membership
        # comes from it (-ring.etcd.*) instead of -ring.members
        self.etcd = etcd
        self.name = name        # prefixes data dirs: one Workspace, many
        self.rf = rf
        self.extra = list(extra)
        self.ingester_extra = list(ingester_extra)
        # ingester i's -instance.zone, or None
        self.ingester_zones = ingester_zones
        self.log_level = log_level
        # None: the module's HEARTBEAT_TIMEOUT when the ring flags are
        # built (bench/run sets the module's values).
        self.heartbeat_timeout = heartbeat_timeout
        self.counts = (ingesters, distributors, queriers, compactors)
        self.compactor_extra = list(compactor_extra)
        self.distributor_extra = list(distributor_extra)
        # Fixed HTTP ports for the distributors when they know each other.
        self.distributor_ports = ([free_port() for _ in range(distributors)]
                                  if distributor_peers else None)
        self.ingesters = []
        self.distributors = []
        self.queriers = []
        self.compactors = []
        self.gateways = []
        self.ngateways = gateways
        self.gateway_rf = gateway_rf
        self.gateway_extra = list(gateway_extra)
        # "etcd": the store-gateways register in self.etcd and every
        # component follows them there (-store-gateway.sharding-ring.store)
        self.gateway_store = gateway_store
        self.gw_ports = [free_port() for _ in range(gateways)]
        self.gw_members = ",".join("gateway-%d=tcp://127.0.0.1:%d" % (i, p)
                                   for i, p in enumerate(self.gw_ports))
        self.rpc_ports = [free_port() for _ in range(ingesters)]
        self.members = ",".join("ingester-%d=tcp://127.0.0.1:%d" % (i, p)
                                for i, p in enumerate(self.rpc_ports))
        self.problems = {}

    def etcd_flags(self):
        return ["-ring.etcd.endpoints=%s" % self.etcd,
                "-ring.etcd.prefix=%s/" % self.name,
                "-ring.dns-refresh-period=2s"]

    def ring_flags(self):
        return (self.etcd_flags() if self.etcd else
                ["-ring.members=%s" % self.members]) + [
                "-ring.heartbeat-period=%s" % HEARTBEAT,
                "-ring.heartbeat-timeout=%s" % (self.heartbeat_timeout or
                                                HEARTBEAT_TIMEOUT),
                "-distributor.replication-factor=%d" % self.rf]

    def gateway_flags(self):
        """What a querier (and a store-gateway) needs to find the
        store-gateways; [] without them."""
        if not self.ngateways:
            return []
        if self.gateway_store == "etcd":
            return ["-store-gateway.sharding-ring.store=etcd",
                    "-store-gateway.sharding-ring.replication-factor=%d"
                    % self.gateway_rf]
        return ["-store-gateway.sharding-ring.members=%s" % self.gw_members,
                "-store-gateway.sharding-ring.replication-factor=%d"
                % self.gateway_rf]

    def admin_flags(self):
        return admin_listener() if self.admin_listeners else []

    def all(self):
        return (self.ingesters + self.distributors + self.queriers +
                self.compactors + self.gateways)

    # -- processes ---------------------------------------------------------------

    def _server(self, kind, i, target, flags, port=None):
        """Process i of `kind`, with the data and log dirs of that name."""
        return DataServer(
            self.ws.data_dir("%s-%s-%d" % (self.name, kind, i)),
            self.ws.log_dir("%s-%s-%d" % (self.name, kind, i)),
            name="%s-%d" % (kind, i), target=target,
            log_level=self.log_level, extra_flags=flags, port=port)

    def _ring_member(self, kind, i, ports, target, flags):
        """_server for a member of a ring, whose id and RPC port (ports[i],
        picked when it joins later) stay the same across restarts."""
        if i >= len(ports):
            ports.append(free_port())
        return self._server(kind, i, target, [
            "-instance.id=%s-%d" % (kind, i),
            "-rpc.listen-address=tcp://127.0.0.1:%d" % ports[i],
            "-ingester.min-ready-duration=%s" % MIN_READY] + flags)

    def _ingester(self, i):
        return self._ring_member(
            "ingester", i, self.rpc_ports, "ingester",
            (["-instance.zone=%s" % self.ingester_zones[i]]
             if self.ingester_zones else [])
            + (self.etcd_flags() if self.etcd else [])
            + self.extra + self.ingester_extra + self.admin_flags())

    def _gateway(self, i):
        return self._ring_member(
            "gateway", i, self.gw_ports, "store-gateway",
            ["-ring.heartbeat-period=%s" % HEARTBEAT]
            + (self.etcd_flags() if self.gateway_store == "etcd" else [])
            + self.gateway_flags() + self.extra + self.gateway_extra)

    def restart_gateway(self, i, wait=True):
        self.gateways[i] = self._gateway(i).start(wait=wait)
        return self.gateways[i]

    def kill9_gateway(self, i):
        probs = self.gateways[i].kill9()
        if probs:
            self.problems[self.gateways[i].name + " (killed)"] = probs

    def peers_flag(self):
        """-distributor.peers listing every distributor, or None."""
        if self.distributor_ports is None:
            return None
        return "-distributor.peers=" + ",".join(
            "http://127.0.0.1:%d" % p for p in self.distributor_ports)

    def _stateless(self, kind, i):
        port, extra = None, []
        if kind == "compactor":
            extra = self.compactor_extra
        elif kind == "querier":
            extra = self.gateway_flags()
        elif kind == "distributor":
            extra = list(self.distributor_extra)
            if self.distributor_ports is not None:
                port = self.distributor_ports[i]
                extra.append(self.peers_flag())
        return self._server(kind, i, kind, self.ring_flags() + self.extra +
                            extra + self.admin_flags(), port=port)

    def start_for(self, r):
        """start(), with stop() queued on Results r (at_end), so the
        cluster goes whichever way the test ends."""
        r.at_end(lambda: self.stop())
        self.start()

    def start(self):
        ni, nd, nq, nc = self.counts
        for i in range(ni):
            self.ingesters.append(self._ingester(i).start())
        for i in range(nd):
            self.distributors.append(self._stateless("distributor", i).start())
        # before the queriers: a querier with gateways is ready once it
        # sees one healthy
        for i in range(self.ngateways):
            self.gateways.append(self._gateway(i).start())
        for i in range(nq):
            self.queriers.append(self._stateless("querier", i).start())
        for i in range(nc):
            self.compactors.append(self._stateless("compactor", i).start())
        if not self.wait_ring(active=ni):
            raise RuntimeError("the ring did not see %d active ingesters" %
                               ni)
        return self

    def kill9_ingester(self, i):
        probs = self.ingesters[i].kill9()
        if probs:
            self.problems[self.ingesters[i].name + " (killed)"] = probs

    def stop_ingester(self, i):
        probs = self.ingesters[i].stop()
        if probs:
            self.problems[self.ingesters[i].name + " (stopped)"] = probs

    def stop_distributor(self, i):
        probs = self.distributors[i].stop()
        if probs:
            self.problems[self.distributors[i].name + " (stopped)"] = probs

    def restart_ingester(self, i, wait=True):
        self.ingesters[i] = self._ingester(i).start(wait=wait)
        return self.ingesters[i]

    def stop(self):
        """Stop everything; {name: problems} of those that ended badly
        (including any earlier kill or stop)."""
        bad = dict(self.problems)
        for s in reversed(self.all()):
            if s.stopped:
                continue
            probs = s.stop()
            if probs:
                bad[s.name] = probs
        return bad

    def run_checked(self, results, fn):
        """start(), then fn(results, self); stopped and judged
        (check_stopped) however fn ends."""
        try:
            self.start()
            fn(results, self)
        finally:
            self.check_stopped(results)

    def check_stopped(self, results):
        bad = self.stop()
        results.check(not bad, "every cluster process exits 0 on SIGTERM "
                      "with no sanitizer report",
                      "\n".join("%s: %s" % (k, "\n".join(v))
                                for k, v in bad.items()))

    def check_stopped_after_kills(self, results):
        """check_stopped for a test that SIGKILLs members (kill9_*): what
        the killed ones left is the test's doing, not a failure."""
        bad = {k: v for k, v in self.stop().items() if "killed" not in k}
        results.check(not bad, "every cluster process exits cleanly",
                      str(bad)[:2000])

    # -- the ring ------------------------------------------------------------------

    def ring(self, server=None, path="/ring"):
        """The /ring JSON of a distributor (or `server`), or None; with
        path="/store-gateway/ring", its store-gateway ring."""
        s = server or (self.distributors + self.queriers)[0]
        r = s.request("GET", path, timeout=10)
        try:
            return r.json() if r.status == 200 else None
        except ValueError:
            return None

    def states(self, server=None, path="/ring"):
        j = self.ring(server, path)
        return {m["id"]: m["state"] for m in j["members"]} if j else {}

    def poll_until_active(self, q, path, want, timeout, interval, probe):
        """Call probe() every `interval` s until the ring at `path`, as the
        server q sees it, is `want`, all ACTIVE, and for 2 s more (the
        store-gateways' 1.5 s grace for tenants they no longer own); at
        most `timeout` s.  Returns (settled, the seconds that took)."""
        t0, settled = time.monotonic(), None
        while time.monotonic() < t0 + timeout:
            probe()
            st = self.states(q, path)
            if settled is None and sorted(st) == want and \
                    all(v == "ACTIVE" for v in st.values()):
                settled = time.monotonic()
            if settled is not None and time.monotonic() > settled + 2:
                break
            time.sleep(interval)
        return settled is not None, (settled or time.monotonic()) - t0

    def wait_writes(self, n, timeout=60):
        """Wait until every running ingester has applied `n` writes
        (smolder_ingester_writes_total; with RF = the number of ingesters
        each push is one write on each).  A push is acknowledged at
        quorum, so the last replica's write may still be on its way: a
        test that flushes or compacts next would cut without it.  True on
        success."""
        deadline = time.monotonic() + timeout
        return all((wait_metric(i, "smolder_ingester_writes_total",
                                lambda v: v >= n,
                                max(0.0, deadline - time.monotonic()),
                                interval=0.05) or 0) >= n
                   for i in self.ingesters if not i.stopped)

    def wait_ring(self, active, timeout=30):
        """Wait until every distributor and querier sees exactly `active`
        ACTIVE ingesters.  True on success."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(list(self.states(s).values()).count("ACTIVE") == active
                   for s in self.distributors + self.queriers):
                return True
            time.sleep(0.05)
        return False


def shipping_cluster(ws, storage, ingester_extra, gateway_extra=(),
                     extra=(), **kw):
    """A Cluster (the counts and the rest in kw) whose ingesters ship to the
    bucket that `storage` (its -storage.* flags) names and find its
    store-gateways, which sync every 500 ms; RAW_ANY_AGE and `extra` for
    every process, ingester_extra and gateway_extra for the ingesters and
    the gateways.  Not started."""
    c = Cluster(ws, extra=RAW_ANY_AGE + list(extra),
                gateway_extra=storage + ["-store-gateway.sync-interval=500ms"]
                + list(gateway_extra), **kw)
    c.ingester_extra = storage + c.gateway_flags() + list(ingester_extra)
    return c



def swift_shipping_cluster(r, name, ingester_extra, **kw):
    """workspace_for(r, name), a Swift S3 server in it (swift_s3.start_in,
    tests/tools on the caller's path) and a shipping_cluster (kw) whose
    ingesters ship to its bucket: (ws, c), c not started."""
    import swift_s3
    ws = workspace_for(r, name)
    _, flags = swift_s3.start_in(r, ws)
    return ws, shipping_cluster(ws, flags, ingester_extra, **kw)

def reference_and_rf3(r, ws, extra, run):
    """run(ref, c) with a single binary (the reference) and a cluster of 3
    ingesters (RF 3), a distributor and a querier, on the same flags;
    both are stopped (not judged) however run ends, then the workspace
    is removed."""
    ref = DataServer(ws.data_dir("single"), ws.log_dir("single"),
                     name="single", extra_flags=extra).start()
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                extra=extra, name="rf3")
    try:
        c.start()
        run(ref, c)
    finally:
        c.stop()
        ref.stop()
    ws.cleanup(r)


# --------------------------------------------------------------------------
# A single binary and a cluster, compared.
# --------------------------------------------------------------------------

# What the tests that check a cluster against a single binary fed the same
# uploads share: an hour-aligned past for their upload times, and the type
# id the legacy ".cpu" apps are stored under.
PAST_HOUR = (int(time.time()) // 3600) * 3600 - 3600
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def open_flags():
    """Flags that take uploads of any time, with limit_flags()."""
    return ["-validation.reject-older-than=0",
            "-validation.reject-newer-than=0"] + limit_flags()


class Single:
    """The single binary of such a test (srv), on the workspace's
    "single" data dir."""

    def __init__(self, ws, extra):
        self.ws, self.extra = ws, extra
        self.srv = None
        self.start()

    def start(self):
        self.srv = DataServer(self.ws.data_dir("single"),
                              self.ws.log_dir("single"), name="single",
                              extra_flags=self.extra).start()
        return self.srv

    def restart(self, r):
        """Stopped (one check: a clean exit) and started again on the same
        data; the new server."""
        self.srv.check_stopped(r)
        return self.start()


def single_then_cluster(name, budget, ws_name, extra, single_phase,
                        cluster_phase):
    """Run such a test: single_phase(r, single) checks a Single and returns
    what cluster_phase(r, c, it) compares a cluster with -- 3 ingesters
    (RF 3), 2 distributors and a querier, on the same flags.  Every server
    is stopped and judged and the workspace removed however a phase
    ends; then the summary line."""
    r = Results(name)
    install_timeout(budget)
    ws = Workspace(ws_name)
    one = Single(ws, extra)
    try:
        ref = single_phase(r, one)
        c = Cluster(ws, ingesters=3, distributors=2, queriers=1, rf=3,
                    extra=extra, name="cluster")
        try:
            c.start()
            cluster_phase(r, c, ref)
        finally:
            c.check_stopped(r)
    finally:
        one.srv.check_stopped(r)
        ws.cleanup(r)
    r.finish()


def ingest_spread(r, srvs, uploads, what):
    """Each upload, (query, body) or (query, body, content type), through
    srvs in turn; one check, `what`, that every one answered 200."""
    bad = []
    for i, up in enumerate(uploads):
        resp = srvs[i % len(srvs)].ingest(*up)
        if resp.status != 200:
            bad.append(resp.describe())
    r.check(not bad, what, "\n".join(bad[:3]))


def one_ingester_down(r, c):
    """ingester-2 of three stopped; every ring sees it gone (one check)."""
    c.stop_ingester(2)
    r.check(c.wait_ring(active=2), "cluster: the ring sees ingester-2 gone",
            str(c.states()))
