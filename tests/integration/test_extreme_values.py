#!/usr/bin/env python3
"""
test_extreme_values.py -- extreme inputs get their documented answer,
and under the ASan/UBSan build no sanitizer report (smolder.py fails
the test on one in stderr).

  - times outside the window of common/attime.h (int64 ns, 1677..2262):
    SelectSeries / SelectMergeStacktraces / LabelNames / Diff /
    SelectMergeSpanProfile / SelectHeatmap / AnalyzeQuery with start = -2^63
    or end = 2^63-1, /render and /label-values with from=now-100000000y,
    /ingest with from=now-100000000y or until=now+100000000y -> 400 naming
    the time; a long but valid range (now-200y) is still 200;
  - sums past INT64_MAX saturate (common/sm.h): two stacks of 2^63-1 give a
    total of exactly 2^63-1 (never negative / wrapped), each stored stack
    keeps its exact value, and smolder_value_saturations_total counts it;
  - a NUL byte in a folded frame -> 400 naming the NUL, and nothing of
    that body is stored (no frame cut at the NUL, no merged frame);
  - invalid UTF-8 in folded frame names is replaced by U+FFFD, one per
    byte, identically in the collapsed and the JSON output, both valid
    UTF-8;
  - two different Content-Length headers -> 400; the same one twice is
    served.
"""

import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import connect  # noqa: E402
from smolder import Results, Server, install_timeout, metric  # noqa: E402

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
OBJ = "memory:alloc_objects:count::"


def raw_http(port, head, body):
    """Send raw bytes, return the status code (0 if none)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(head + body)
        data = b""
        while b"\r\n" not in data:
            x = s.recv(4096)
            if not x:
                break
            data += x
    except OSError:
        return 0
    finally:
        s.close()
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def main():
    install_timeout(120)
    r = Results("test_extreme_values")
    now_ms = int(time.time() * 1000)
    with Server() as s:
        # --- times ---------------------------------------------------
        resp = s.ingest({"name": "app.cpu"}, b"a;b 1\n")
        r.eq(resp.status, 200, "ingest a baseline profile")
        sel = '{service_name="app"}'
        cases = [
            ("SelectSeries start=-2^63", "SelectSeries",
             {"profileTypeID": CPU, "labelSelector": sel,
              "start": str(INT64_MIN), "end": str(now_ms), "step": 15},
             "start time"),
            ("SelectSeries end=2^63-1", "SelectSeries",
             {"profileTypeID": CPU, "labelSelector": sel,
              "start": str(now_ms - 3600000), "end": str(INT64_MAX),
              "step": 15}, "end time"),
            ("SelectSeries start=-2^63 step=1e-3", "SelectSeries",
             {"profileTypeID": CPU, "labelSelector": sel,
              "start": str(INT64_MIN), "end": str(INT64_MAX),
              "step": 0.001}, "time"),
            ("SelectMergeStacktraces start=-2^63", "SelectMergeStacktraces",
             {"profileTypeID": CPU, "labelSelector": sel,
              "start": str(INT64_MIN), "end": str(now_ms)}, "start time"),
            ("LabelNames start=-2^63", "LabelNames",
             {"start": str(INT64_MIN), "end": str(now_ms)}, "start time"),
            ("Series end=2^63-1", "Series",
             {"start": str(now_ms), "end": str(INT64_MAX)}, "end time"),
            ("Diff left start=-2^63", "Diff",
             {"left": {"profileTypeID": CPU, "labelSelector": sel,
                       "start": str(INT64_MIN), "end": str(now_ms)},
              "right": {"profileTypeID": CPU, "labelSelector": sel,
                        "start": str(now_ms - 3600000),
                        "end": str(now_ms)}}, "start time"),
            ("SelectMergeSpanProfile start=-2^63", "SelectMergeSpanProfile",
             {"profileTypeID": CPU, "labelSelector": sel,
              "spanSelector": ["0123456789abcdef"],
              "start": str(INT64_MIN), "end": str(now_ms)}, "start time"),
            ("SelectHeatmap end=2^63-1", "SelectHeatmap",
             {"profileTypeID": CPU, "labelSelector": sel, "step": 60,
              "queryType": "HEATMAP_QUERY_TYPE_INDIVIDUAL",
              "start": str(now_ms), "end": str(INT64_MAX)}, "end time"),
            ("AnalyzeQuery start=-2^63", "AnalyzeQuery",
             {"query": CPU + sel, "start": str(INT64_MIN),
              "end": str(now_ms)}, "start time"),
        ]
        for what, method, msg, word in cases:
            resp = connect(s, method, msg)
            r.check(resp.status == 400 and word in resp.text(),
                    what + " -> 400 naming the time", resp.describe())
        for path, q in (
                ("/render", {"query": CPU + sel,
                             "from": "now-100000000y"}),
                ("/render", {"query": CPU + sel, "from": "now-1h",
                             "until": "now+100000000y"}),
                ("/render", {"query": CPU + sel,
                             "from": "-9223372036854775808"}),
                ("/label-values", {"label": "service_name",
                                   "from": "now-100000000y"})):
            resp = s.request("GET", path, q)
            r.check(resp.status == 400 and "invalid time" in resp.text(),
                    "%s %s -> 400 invalid time" % (path, q), resp.describe())
        for q in ({"name": "app.cpu", "from": "now-100000000y"},
                  {"name": "app.cpu", "until": "now+100000000y"}):
            resp = s.request("POST", "/ingest", q, b"a;b 1\n")
            r.check(resp.status == 400 and "invalid time" in resp.text(),
                    "/ingest %s -> 400" % q, resp.describe())
        resp = s.request("GET", "/render", {"query": CPU + sel,
                                            "from": "now-200y"})
        r.check(resp.status == 200, "/render from=now-200y (inside the "
                "window) -> 200", resp.describe())
        resp = connect(s, "SelectSeries", {
            "profileTypeID": CPU, "labelSelector": sel,
            "start": str(now_ms - 200 * 365 * 86400000),
            "end": str(now_ms + 60000), "step": 86400 * 365})
        r.check(resp.status == 200 and
                resp.json()["series"][0]["points"][-1]["value"] == 1e7,
                "SelectSeries over 200 years -> 200 with the point",
                resp.describe())

        # --- saturating sums -----------------------------------------
        before = metric(s, "smolder_value_saturations_total", None) or 0
        body = ("a;b %d\na;c %d\nz 5\n" % (INT64_MAX, INT64_MAX)).encode()
        resp = s.ingest({"name": "big.alloc_objects"}, body)
        r.eq(resp.status, 200, "ingest two stacks of 2^63-1")
        resp, st = s.render_collapsed(OBJ, "big")
        r.check(st == {"a;b": INT64_MAX, "a;c": INT64_MAX, "z": 5},
                "collapsed keeps each stored value exact", repr(st))
        resp = s.render(OBJ + '{service_name="big"}')
        fb = resp.json()["flamebearer"] if resp.status == 200 else {}
        r.check(fb.get("numTicks") == INT64_MAX,
                "flamebearer total saturates at 2^63-1 (not wrapped)",
                repr(fb.get("numTicks")))
        r.check(all(v >= 0 for lv in fb.get("levels", []) for v in lv),
                "no negative (wrapped) value in the flamebearer levels",
                repr(fb.get("levels")))
        after = metric(s, "smolder_value_saturations_total", None)
        r.check(after is not None and after > before,
                "smolder_value_saturations_total counts the saturation",
                "%r -> %r" % (before, after))

        # --- NUL in a folded frame -----------------------------------
        resp = s.ingest({"name": "nul.alloc_objects"},
                        b"a;b\x00c 7\na;b 3\n")
        r.check(resp.status == 400 and "NUL" in resp.text(),
                "NUL in a folded frame -> 400 naming the NUL",
                resp.describe())
        resp, st = s.render_collapsed(OBJ, "nul")
        r.check(not st, "nothing of the refused body is stored", repr(st))

        # --- invalid UTF-8 --------------------------------------------
        resp = s.ingest({"name": "utf.alloc_objects"},
                        b"x\xff\xfey;ok 3\nx\xc3\xa9;ok 2\ncut\xe2\x82 1\n")
        r.eq(resp.status, 200, "ingest frames with invalid UTF-8")
        resp = s.render(OBJ + '{service_name="utf"}', fmt="collapsed")
        try:
            text = resp.body.decode("utf-8")
            ok = True
        except UnicodeDecodeError as e:
            text, ok = repr(resp.body), False
        r.check(ok, "collapsed output is valid UTF-8", text)
        want = {"x\ufffd\ufffdy;ok 3", "x\u00e9;ok 2", "cut\ufffd\ufffd 1"}
        r.check(set(text.splitlines()) == want,
                "invalid bytes replaced by U+FFFD one per byte, valid "
                "ones kept", text)
        resp = s.render(OBJ + '{service_name="utf"}')
        try:
            names = set(json.loads(resp.body.decode("utf-8"))
                        ["flamebearer"]["names"])
        except (UnicodeDecodeError, ValueError, KeyError) as e:
            names = {repr(e)}
        r.check({"x\ufffd\ufffdy", "x\u00e9", "cut\ufffd\ufffd"} <= names,
                "JSON output has the same replaced names", repr(names))

        # --- Content-Length --------------------------------------------
        body = b"q;w 1\n"
        head = (b"POST /ingest?name=cl.alloc_objects HTTP/1.1\r\n"
                b"Host: x\r\nConnection: close\r\n")
        st1 = raw_http(s.port, head + b"Content-Length: 6\r\n"
                       b"Content-Length: 3\r\n\r\n", body)
        r.eq(st1, 400, "two different Content-Length headers -> 400")
        st2 = raw_http(s.port, head + b"Content-Length: 6\r\n"
                       b"Content-Length: 6\r\n\r\n", body)
        r.eq(st2, 200, "the same Content-Length twice is served")
        resp, st = s.render_collapsed(OBJ, "cl")
        r.check(st == {"q;w": 1}, "only the unambiguous request is stored",
                repr(st))

        r.check(s.ready(), "/ready is 200 at the end")
        s.check_stopped(r)
    r.finish()


if __name__ == "__main__":
    main()
