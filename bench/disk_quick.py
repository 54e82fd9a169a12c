#!/usr/bin/env python3
"""
disk_quick.py -- bytes on disk per ingested profile after a block cut,
next to the gzipped size of the same profiles as received (same run).

    bench/disk_quick.py [build-dir] [hours]

Ingests a realistic hour (or more) of one service at 10 s cadence: each
10 s bucket gets one real pprof (cycling through Go CPU and heap profiles
from tests/data and, when Go is installed, generated ones), placed at
consecutive `from` times.  Then POST /ingester/flush (block cut), stop the
server, `smolder-admin disk -compact` (flush + full compaction), and report
RocksDB's bytes per profile vs. the gzipped bytes received per profile.
"""
import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build")
hours = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0

files = sorted(glob.glob(os.path.join(root, "tests/data/parca__many__*.pb.gz")))
files += [os.path.join(root, "tests/data", f) for f in
          ("parca__fib.pb.gz", "parca__labels.pb.gz", "pprof__sample.cpu")]
gen = tempfile.mkdtemp(prefix="smolder-disk-")
try:
    subprocess.run(["go", "run", ".", "-out", gen], cwd=os.path.join(root, "tests/tools/genprof"),
                   env=dict(os.environ, GOFLAGS="-mod=mod", GOPROXY="off",
                            GOCACHE=os.path.join(gen, "gocache")),
                   capture_output=True, timeout=120, check=True)
    files += sorted(glob.glob(os.path.join(gen, "*.pb.gz")))
except Exception:
    pass
blobs = [open(f, "rb").read() for f in files]

s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
data = os.path.join(gen, "data")
proc = subprocess.Popen([os.path.join(build, "smolder"), "-http.listen-address=127.0.0.1:%d" % port,
                         "-data.dir=" + data, "-log.level=warn",
                         "-validation.reject-older-than=0", "-validation.reject-newer-than=0",
                         "-validation.max-profile-stacktrace-samples=0"])
base = "http://127.0.0.1:%d" % port
for _ in range(100):
    try:
        if urllib.request.urlopen(base + "/ready").status == 200:
            break
    except Exception:
        time.sleep(0.1)

n = int(hours * 360)
t0 = int(time.time()) - n * 10 - 60
received = 0
for i in range(n):
    body = blobs[i % len(blobs)]
    url = base + "/ingest?name=svc%%7Benv%%3Dprod%%7D&format=pprof&spyName=gospy&from=%d&until=%d" % (
        t0 + 10 * i, t0 + 10 * i + 10)
    r = urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"))
    assert r.status == 200
    received += len(body)
urllib.request.urlopen(urllib.request.Request(base + "/ingester/flush", data=b"", method="POST"))
proc.send_signal(signal.SIGTERM)
proc.wait(timeout=60)
out = subprocess.run([os.path.join(build, "smolder-admin"), "disk", "-data.dir=" + data, "-compact"],
                     capture_output=True, text=True, check=True).stdout
fields = dict(kv.split("=") for kv in out.split())
disk, sst = int(fields["disk_bytes"]), int(fields["sst_bytes"])
blocks = subprocess.run([os.path.join(build, "smolder-admin"), "blocks", "-data.dir=" + data],
                        capture_output=True, text=True, check=True).stdout
bb = sum(int(l.split("bytes=")[1]) for l in blocks.split("\n") if "bytes=" in l)
print("profiles=%d distinct_inputs=%d" % (n, len(blobs)))
print("gzip_as_received_bytes_per_profile=%.0f" % (received / n))
print("block_values_bytes_per_profile=%.0f" % (bb / n))
print("rocksdb_sst_bytes_per_profile=%.0f" % (sst / n))
print("rocksdb_all_files_bytes_per_profile=%.0f (SST, WAL, MANIFEST, OPTIONS, LOG)" % (disk / n))
print("ratio_sst_to_gzip=%.4f ratio_all_files_to_gzip=%.4f" % (sst / received, disk / received))
subprocess.run(["rm", "-rf", gen])
