#!/usr/bin/env python3
"""
test_contracts.py -- every component header says what its component
serves: the headers are the doors a newcomer opens first
(docs/style.md §19), so what they list is checked against what runs.

(a) RPCs: every method of smolder.v1.Request (proto/smolder/v1/rpc.proto,
    its `oneof method`) is named, in CamelCase as the ingester's dispatch
    spells it (span_merge -> SpanMerge), in the "RPC methods:" paragraph
    of ingester/ingester.h.
(b) HTTP routes: each target is started alone (-log.level=debug: the HTTP
    server logs every route it serves once it listens, common/http.c) and
    each of its routes must be named in its component's header, or, for
    the routes every process or every ring serves, in cmd/main.c's,
    common/ring.h's or common/status.h's:
      distributor -> distributor/distributor.h
      querier     -> querier/querier.h
      ingester    -> ingester/ingester.h
      compactor   -> compactor/compactor.h
      scraper     -> scraper/scraper.h
      store-gateway -> ingester/gateway.h or ingester/ingester.h
    A plain path must stand in the header as written (/render, not as a
    prefix of /render-diff); a Connect path must have its service and its
    method there (querier.v1.QuerierService and SelectSeries).
The checker checks itself first on in-memory examples.
"""

import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from durability import DataServer  # noqa: E402
from smolder import run_script, source_dir  # noqa: E402

SRC = source_dir()
HEADERS = {
    "distributor": ["distributor/distributor.h"],
    "querier": ["querier/querier.h"],
    "ingester": ["ingester/ingester.h"],
    "compactor": ["compactor/compactor.h"],
    "scraper": ["scraper/scraper.h"],
    "store-gateway": ["ingester/gateway.h", "ingester/ingester.h"],
}
SHARED = ["cmd/main.c", "common/ring.h", "common/status.h"]
ROUTE = re.compile(r'msg="route" method=(\S+) path=(\S+)')


def header_comment(rel):
    """The leading comment of a source file (its contract)."""
    with open(os.path.join(SRC, rel), encoding="utf-8") as fh:
        text = fh.read()
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    return m.group(1) if m else ""


def named(path, text):
    """Is route `path` named in `text`?"""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and "." in parts[0]:        # Connect: svc/Method
        return (parts[0] in text and
                re.search(r"\b%s\b" % re.escape(parts[1]), text) is not None)
    return re.search(re.escape(path) + r"(?![\w/-])", text) is not None


def rpc_methods():
    with open(os.path.join(SRC, "proto/smolder/v1/rpc.proto"),
              encoding="utf-8") as fh:
        proto = fh.read()
    m = re.search(r"message Request \{\s*oneof method \{(.*?)\}", proto, re.S)
    fields = re.findall(r"^\s*\w+\s+(\w+)\s*=\s*\d+;", m.group(1), re.M)
    return ["".join(w.capitalize() for w in f.split("_")) for f in fields]


def self_check(r):
    text = "serves /render and /pyroscope/render; querier.v1.QuerierService:" \
           " SelectSeries, Diff"
    r.check(named("/render", text) and named("/pyroscope/render", text),
            "self-check: a plain path written out is named")
    r.check(not named("/render-diff", text) and not named("/rend", text),
            "self-check: a path is not named by a longer one")
    r.check(named("/querier.v1.QuerierService/SelectSeries", text) and
            not named("/querier.v1.QuerierService/Select", text) and
            not named("/other.v1.Svc/SelectSeries", text),
            "self-check: a Connect path needs its service and method")


def body(r):
    self_check(r)
    ing_h = header_comment("ingester/ingester.h")
    m = re.search(r"RPC methods:(.*?)\n\s*\*\s*\n", ing_h, re.S)
    listed = m.group(1) if m else ""
    missing = [m for m in rpc_methods()
               if re.search(r"\b%s\b" % m, listed) is None]
    r.eq(missing, [], "every RPC of rpc.proto's Request is named in "
         "ingester/ingester.h (%d methods)" % len(rpc_methods()))

    shared = "".join(header_comment(h) for h in SHARED)
    tmp = tempfile.mkdtemp(prefix="smolder-contracts-")
    r.at_end(lambda: shutil.rmtree(tmp, ignore_errors=True))
    for target, headers in HEADERS.items():
        extra = ["-rpc.listen-address=tcp://127.0.0.1:0",
                 "-ring.members=i0=tcp://127.0.0.1:1"]
        if target == "store-gateway":
            extra += ["-storage.backend=filesystem",
                      "-storage.filesystem.dir=%s/bucket" % tmp]
        srv = DataServer(os.path.join(tmp, target), os.path.join(tmp,
                         target + "-log"), name=target, target=target,
                         log_level="debug", extra_flags=extra)
        os.makedirs(srv.tmp, exist_ok=True)
        srv.start(wait=False)
        routes, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline and not routes:
            time.sleep(0.2)
            routes = ROUTE.findall(srv.stderr_text())
        time.sleep(0.3)                  # the rest of the lines
        routes = ROUTE.findall(srv.stderr_text())
        srv.check_stopped(r, "%s stops cleanly" % target)
        own = "".join(header_comment(h) for h in headers)
        r.check(len(routes) > 2, "%s logged its routes (%d)" % (
            target, len(routes)))
        bad = ["%s %s" % (m, p) for m, p in routes
               if not named(p, own) and not named(p, shared)]
        r.eq(bad, [], "every route the %s serves is named in %s" % (
            target, " or ".join(headers + SHARED)))


if __name__ == "__main__":
    run_script("test_contracts", 120, body)
