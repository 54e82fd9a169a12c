#!/usr/bin/env python3
"""hostile_s3.py -- a scripted S3 server that answers badly on purpose.

common/bucket_test.c checks the S3 client (common/bucket_s3.c) against a
real OpenStack Swift (tests/tools/swift_s3.py); that stays the proof that
the client speaks S3.  A real store cannot be made to misbehave, so this
server injects the faults: wrong lengths, endless listings, huge bodies,
hostile XML.  It is NOT an S3 implementation and checks no signature.

    python3 tests/tools/hostile_s3.py [DIR]

listens on 127.0.0.1 (a free port), prints one JSON line
{"port": N, "pid": P} on stdout and serves until SIGTERM, on which it
exits 0.  The caller starts it in a session of its own and stops it by
pid.  With DIR it writes DIR/secret.txt for the "entity/" listing below.

Requests are path-style, /<bucket>/<key>.  The key's first segment picks
the behaviour, whatever the method; counters are per full key, so a test
makes a key fresh by adding segments ("flaky/1", "flaky/2"):

  ok        200 with the fixed body BODY below
  slow503   always 503 <Error><Code>SlowDown</Code>...
  flaky     500, 500, then 200 BODY
  too429    429 SlowDown, then 200 BODY
  longer    GET with a Range: 206 with 100 bytes MORE than it asks for
  longer200 GET: 200 ignoring the Range, 100 bytes more than it asks for
  shorter   GET: 206 with half the bytes the Range asks for (at least one
            fewer), Content-Range "bytes a-b/1048576" (the object is long
            enough) and a Content-Length that matches what is sent;
            shorter/end/...: the same, but Content-Range says the object
            ends right there ("bytes a-b/b+1")
  cut       200, Content-Length 1000, then 10 bytes and a closed connection
  bigerr    400 with a 5 MiB XML error body
  skewed    403 RequestTimeTooSkewed
  entityerr 403 whose XML error body has a DTD and <Code>&e;</Code>: the
            entity's text ("entity-expanded") must not become the code
  redirect  301 PermanentRedirect, Location: /<bucket>/ok (not to follow)
  hits      GET hits/<key>: 200, the body the number of requests <key> got
            (this one not counted)
  anything  else: 404 NoSuchKey

A listing (GET /<bucket>/?list-type=2&prefix=P...) by P's first segment:

  hugepage/ a 5 MiB ListBucketResult page
  badsize/  one object with <Size>-5</Size>
  loop/     IsTruncated, one object and NextContinuationToken "same",
            on every page, forever
  badxml/   bytes that are not XML
  entity/   a DTD with external entities (http://127.0.0.1:PORT/<bucket>/
            xxe, counted as key "xxe"; file://DIR/secret.txt) and an
            internal one, used in the keys: none may be fetched, read or
            expanded
  laughs/   "billion laughs": nested internal entities, 10^9 "lol"s
  anything  else: an empty page
"""

import http.server
import json
import os
import signal
import sys
import threading
import urllib.parse

BODY = b"hostile-s3 fixed body\n"
MIB = 1 << 20
XML_DECL = b'<?xml version="1.0" encoding="UTF-8"?>\n'
LIST_OPEN = (b'<ListBucketResult '
             b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">')
LIST_HEAD = XML_DECL + LIST_OPEN

hits = {}
hits_mu = threading.Lock()
secret_path = ""


def s3_error(code, message="hostile"):
    return (b"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>" +
            code.encode() + b"</Code><Message>" + message.encode() +
            b"</Message></Error>")


def obj(key, size):
    return (b"<Contents><Key>" + key.encode() + b"</Key><Size>" +
            size.encode() + b"</Size></Contents>")


def parse_range(h):
    """(first, last) of "bytes=a-b", or None."""
    if h is None or not h.startswith("bytes="):
        return None
    a, _, b = h[6:].partition("-")
    try:
        return int(a), int(b)
    except ValueError:
        return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (BrokenPipeError, ConnectionResetError):
            # the client aborted (a bound hit): that is the point
            self.close_connection = True

    def dispatch(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > 0:
            self.rfile.read(n)          # a PUT's body
        url = urllib.parse.urlsplit(self.path)
        bucket, _, key = url.path.lstrip("/").partition("/")
        query = urllib.parse.parse_qs(url.query)
        if key == "" and "list-type" in query:
            return self.listing(bucket, query.get("prefix", [""])[0])
        what = key.split("/")[0]
        if what == "hits":
            with hits_mu:
                got = hits.get(key[5:], 0)
            return self.send(200, str(got).encode())
        with hits_mu:
            hits[key] = nth = hits.get(key, 0) + 1
        rng = parse_range(self.headers.get("Range"))
        if what == "ok":
            return self.send(200, BODY)
        if what == "slow503":
            return self.send(503, s3_error("SlowDown", "Reduce your rate"))
        if what == "flaky":
            if nth <= 2:
                return self.send(500, s3_error("InternalError"))
            return self.send(200, BODY)
        if what == "too429":
            if nth <= 1:
                return self.send(429, s3_error("SlowDown"))
            return self.send(200, BODY)
        if what in ("longer", "longer200"):
            first, last = rng if rng else (0, 99)
            n = last - first + 1 + 100
            cr = "bytes %d-%d/%d" % (first, first + n - 1, first + n)
            if rng and what == "longer":
                return self.send(206, b"L" * n, [("Content-Range", cr)])
            return self.send(200, b"L" * n)
        if what == "shorter" and rng:
            first, last = rng
            n = min((last - first + 1) // 2, last - first)
            total = first + n if key.startswith("shorter/end/") else MIB
            cr = "bytes %d-%d/%d" % (first, first + n - 1, total)
            return self.send(206, b"S" * n, [("Content-Range", cr)])
        if what == "cut":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(b"C" * 10)
                self.wfile.flush()
            self.close_connection = True
            return None
        if what == "bigerr":
            return self.send(400, b"<Error><Code>Huge</Code><Message>" +
                             b"x" * (5 * MIB) + b"</Message></Error>")
        if what == "skewed":
            return self.send(403, s3_error(
                "RequestTimeTooSkewed", "The difference between the "
                "request time and the current time is too large."))
        if what == "entityerr":
            return self.send(403, XML_DECL + b'<!DOCTYPE Error [\n'
                             b'<!ENTITY e "entity-expanded">\n]>\n'
                             b'<Error><Code>&e;</Code></Error>')
        if what == "redirect":
            return self.send(301, s3_error(
                "PermanentRedirect", "Use the specified endpoint."),
                [("Location", "/%s/ok" % bucket)])
        return self.send(404, s3_error("NoSuchKey"))

    def listing(self, bucket, prefix):
        what = prefix.split("/")[0]
        if what == "hugepage":
            one = obj("hugepage/" + "k" * 200, "1")
            body = LIST_HEAD + one * (5 * MIB // len(one) + 1)
            return self.send(200, body + b"</ListBucketResult>")
        if what == "badsize":
            return self.send(200, LIST_HEAD + obj("badsize/a", "-5") +
                             b"</ListBucketResult>")
        if what == "loop":
            return self.send(200, LIST_HEAD +
                             b"<IsTruncated>true</IsTruncated>"
                             b"<NextContinuationToken>same"
                             b"</NextContinuationToken>" +
                             obj("loop/a", "1") + b"</ListBucketResult>")
        if what == "badxml":
            return self.send(200, b"\x00\xff<<ListBucketResult \x01&;]]>")
        if what == "entity":
            port = self.server.server_address[1]
            dtd = ('<!DOCTYPE ListBucketResult [\n'
                   '<!ENTITY net SYSTEM "http://127.0.0.1:%d/%s/xxe">\n'
                   '<!ENTITY file SYSTEM "file://%s">\n'
                   '<!ENTITY int "internal-entity-expanded">\n'
                   ']>\n' % (port, bucket, secret_path)).encode()
            return self.send(200, XML_DECL + dtd + LIST_OPEN +
                             obj("entity/n&net;", "1") +
                             obj("entity/f&file;", "2") +
                             obj("entity/i&int;", "3") +
                             b"</ListBucketResult>")
        if what == "laughs":
            ents = '<!ENTITY lol0 "lol">\n'
            for i in range(1, 10):
                ents += ('<!ENTITY lol%d "%s">\n' %
                         (i, ("&lol%d;" % (i - 1)) * 10))
            return self.send(200, XML_DECL +
                             b'<!DOCTYPE ListBucketResult [\n' +
                             ents.encode() + b']>\n' + LIST_OPEN +
                             obj("laughs/&lol9;", "1") +
                             b"</ListBucketResult>")
        return self.send(200, LIST_HEAD + b"<IsTruncated>false"
                         b"</IsTruncated></ListBucketResult>")

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = dispatch


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request, client_address):
        pass                            # aborted transfers are expected


def main():
    global secret_path
    if len(sys.argv) > 1:
        secret_path = os.path.join(os.path.abspath(sys.argv[1]),
                                   "secret.txt")
        with open(secret_path, "w") as f:
            f.write("secret-file-was-read")
    srv = Server(("127.0.0.1", 0), Handler)

    def term(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, term)
    print(json.dumps({"port": srv.server_address[1], "pid": os.getpid()}),
          flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
