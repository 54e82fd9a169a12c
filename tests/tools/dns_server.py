#!/usr/bin/env python3
"""
dns_server.py -- a small authoritative DNS server over UDP for tests: it
answers A, AAAA and SRV questions from a table the test gives it, and
NXDOMAIN for any other name (the scraper's DNS discovery,
test_scrape.py).

    srv = DnsServer({"app.smolder.test": [("A", "127.0.0.1")],
                     "_pprof._tcp.smolder.test": [("SRV", 0, 0, 6060,
                                                   "localhost")]})
    srv.start()          # 127.0.0.1:srv.port, a thread
    srv.records[...] = ...   # changes are answered at once
    srv.stop()

Wire format: RFC 1035 (header, question, answers with a pointer to the
question's name); SRV rdata as RFC 2782 (priority, weight, port, target
uncompressed).  Loopback only, one thread, stopped by stop().
"""

import socket
import struct
import threading


def _name(n):
    out = b""
    for part in n.rstrip(".").split("."):
        b = part.encode()
        out += bytes([len(b)]) + b
    return out + b"\0"


def _read_name(buf, pos):
    parts = []
    while True:
        ln = buf[pos]
        if ln == 0:
            return ".".join(parts), pos + 1
        if ln & 0xC0:
            raise ValueError("compressed question name")
        parts.append(buf[pos + 1:pos + 1 + ln].decode("ascii", "replace"))
        pos += 1 + ln


TYPES = {"A": 1, "AAAA": 28, "SRV": 33}


class DnsServer:
    def __init__(self, records):
        self.records = records
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.queries = 0
        self._stop = False
        self._t = None

    def start(self):
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def stop(self):
        self._stop = True
        if self._t is not None:
            self._t.join(5)
        self.sock.close()

    def _answer(self, q):
        qid, flags, qd = struct.unpack(">HHH", q[:6])
        name, pos = _read_name(q, 12)
        qtype, qclass = struct.unpack(">HH", q[pos:pos + 4])
        question = q[12:pos + 4]
        recs = self.records.get(name.lower().rstrip("."))
        answers = []
        for rec in recs or []:
            if TYPES.get(rec[0]) != qtype:
                continue
            if rec[0] == "A":
                rdata = socket.inet_pton(socket.AF_INET, rec[1])
            elif rec[0] == "AAAA":
                rdata = socket.inet_pton(socket.AF_INET6, rec[1])
            else:
                rdata = struct.pack(">HHH", rec[1], rec[2], rec[3]) + \
                    _name(rec[4])
            answers.append(b"\xc0\x0c" + struct.pack(
                ">HHIH", qtype, 1, 30, len(rdata)) + rdata)
        rcode = 3 if recs is None else 0      # NXDOMAIN for unknown names
        hdr = struct.pack(">HHHHHH", qid, 0x8400 | (flags & 0x0100) | rcode,
                          1, len(answers), 0, 0)
        return hdr + question + b"".join(answers)

    def _run(self):
        while not self._stop:
            try:
                q, addr = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            self.queries += 1
            try:
                self.sock.sendto(self._answer(q), addr)
            except (ValueError, IndexError, struct.error, OSError):
                continue
