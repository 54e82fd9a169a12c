#!/usr/bin/env python3
"""
test_bucket_tls.py -- the bucket over HTTPS with a private CA, and
server-side encryption: a real S3 server (OpenStack Swift's s3api, its
proxy speaking TLS with a certificate from a CA made here by openssl,
with Swift's encryption middleware) and the single binary (its ingester
ships, its compactor owns the bucket) with -storage.s3.http.tls-ca-path
and -storage.s3.sse.type=SSE-S3.

  1. Ingest, POST /ingester/flush: the block is shipped over HTTPS
     (pending 0) with SSE-S3 asked for; POST /compactor/run answers 200
     (the compactor lists, reads and writes the bucket over TLS);
     `smolder-admin bucket verify` with the CA exits 0; no object file on
     Swift's disk shows a plain object's structure (encrypted at rest by
     the store).
  1b. SSE-KMS, which this store cannot do: the upload is refused (501),
     the block stays pending and the failure is counted -- nothing is
     stored without the encryption asked for.
  2. Refused: the system's CAs only (the private CA unknown), another
     CA, and plain http against the TLS port -- `smolder-admin bucket ls`
     fails each time, naming the certificate or the connection, and lists
     nothing; -storage.s3.http.insecure-skip-verify=true lists (testing
     only).
Without openssl the test skips (a failure under CI=true).
"""

import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import swift_s3  # noqa: E402
from durability import (DataServer, admin, flush,  # noqa: E402
                        have_admin, wait_metric)
from smolder import in_ci, run_script  # noqa: E402
from test_tls import certs_workspace  # noqa: E402


def body(r):
    ws, certs = certs_workspace(r, "bucket-tls")
    if certs.openssl is None or not have_admin():
        (r.fail if in_ci() else r.skip)("bucket over TLS",
                                        "openssl or smolder-admin missing")
        return
    certs.ca("ca")
    certs.ca("other")
    certs.leaf("s3", "ca", "serverAuth")
    sw = swift_s3.start_for(r, ws.path("swift"), tls=(
        certs.path("s3.crt"), certs.path("s3.key"), certs.path("ca.crt")),
        encryption=True)
    base = swift_s3.smolder_flags(sw, timeout="5s", retries=1)
    flags = base + ["-storage.s3.http.tls-ca-path=" + certs.path("ca.crt")]

    srv = DataServer(ws.data_dir("d"), ws.log_dir("d"), flags + [
        "-ingester.ship-interval=1s", "-storage.s3.sse.type=SSE-S3"]).start()
    try:
        now = int(time.time())
        resp = srv.ingest({"name": "tls.cpu", "from": str(now - 30)},
                          b"main;shipped;over;tls 5\n")
        r.check(resp.status == 200, "ingest", resp.describe())
        resp = flush(srv)
        r.check(resp.status == 200, "POST /ingester/flush -> 200",
                resp.describe())
        pend = wait_metric(srv, "smolder_ingester_ship_blocks_pending",
                           lambda x: x == 0, timeout=30)
        shipped = wait_metric(srv, "smolder_ingester_ship_blocks_total",
                              lambda x: x >= 1, timeout=30)
        r.check(pend == 0 and (shipped or 0) >= 1, "the block shipped over "
                "HTTPS (%s shipped, %s pending)" % (shipped, pend))
        resp = srv.request("POST", "/compactor/run", body=b"", timeout=120)
        r.check(resp.status == 200, "the compactor's pass over HTTPS: 200",
                resp.describe())
    finally:
        srv.stop()
    ver = admin("bucket", "verify", *flags)
    r.check(ver.rc == 0 and "block" in ver.out, "smolder-admin bucket "
            "verify with the CA: clean", ver.describe())
    datas = []
    for d, _, fs in os.walk(ws.path("swift", "node")):
        for f in fs:
            if f.endswith(".data"):
                with open(os.path.join(d, f), "rb") as fh:
                    datas.append(fh.read())
    # a plain object's structure (zstd frames, the block footer,
    # meta.json's fields), which a Swift without its encryption stores
    # as is, is in none of them
    marks = (b"\x28\xb5\x2f\xfd", b"SMBK", b'"ulid"')
    r.check(datas and not any(m in x for m in marks for x in datas),
            "SSE-S3: none of the %d object files on Swift's disk shows a "
            "zstd frame, a block footer or a meta.json field" % len(datas))

    srv = DataServer(ws.data_dir("k"), ws.log_dir("k"), flags + [
        "-ingester.ship-interval=1s", "-storage.s3.sse.type=SSE-KMS",
        "-storage.s3.sse.kms-key-id=alias/profiles",
        "-storage.s3.sse.kms-encryption-context={\"team\":\"a\"}"]).start()
    try:
        now = int(time.time())
        resp = srv.ingest({"name": "kms.cpu", "from": str(now - 30)},
                          b"main;kms 5\n")
        r.check(resp.status == 200, "SSE-KMS: writes are still taken",
                resp.describe())
        resp = flush(srv)
        r.check(resp.status == 503, "SSE-KMS on a store without KMS: the "
                "flush says the blocks wait for the bucket (503)",
                resp.describe())
        fails = wait_metric(srv, "smolder_ingester_ship_failures_total",
                            lambda x: x >= 1, timeout=30)
        pend = wait_metric(srv, "smolder_ingester_ship_blocks_pending",
                           lambda x: x >= 1, timeout=5)
        r.check((fails or 0) >= 1 and (pend or 0) >= 1, "the upload is "
                "refused and counted, the block stays pending (%s failures, "
                "%s pending)" % (fails, pend))
        r.check("501" in srv.stderr_text() or "NotImplemented" in
                srv.stderr_text(), "the log says what the store answered",
                srv.stderr_tail(6))
    finally:
        srv.stop()

    for what, extra in (
            ("the system's CAs only", base),
            ("another CA", base + ["-storage.s3.http.tls-ca-path=" +
                                   certs.path("other.crt")]),
            ("plain http against the TLS port",
             [f for f in base if not f.startswith("-storage.s3.insecure")] +
             ["-storage.s3.insecure=true"])):
        ls = admin("bucket", "ls", *extra)
        r.check(ls.rc != 0 and "blocks/" not in ls.out, "refused: %s" % what,
                ls.describe())
    ls = admin("bucket", "ls", *base + [
        "-storage.s3.http.insecure-skip-verify=true"])
    r.check(ls.rc == 0 and "blocks/" in ls.out, "insecure-skip-verify lists "
            "(testing only)", ls.describe())
    shutil.rmtree(certs.d, ignore_errors=True)


if __name__ == "__main__":
    run_script("test_bucket_tls", 180, body)
