#!/usr/bin/env python3
"""
oracle.py -- the expected collapsed stacks of a pprof file, as go tool pprof
sees them.

The integration tests compare what Smolder renders (/render?format=collapsed)
with an oracle that does not share a line of code with the server: the
profile is decoded by `go tool pprof -symbolize=none -raw` (Debian's Go), and
this module only turns pprof's text dump into collapsed stacks with the frame
rules Smolder documents (distributor/pprof.h, docs/wire-formats.md §1/§2):

  - root first, frames joined with ';'; a sample's location ids are leaf
    first; a location's lines are printed innermost (inlined callee) first
    and expand last-to-first, so the caller comes before its inlined callees;
  - a frame is the function name; a location without lines is
    "0x<lowercase hex address>", or "0x<hex> [<basename of mapping file>]"
    when its mapping has a file name;
  - per sample type, zero values are dropped (negative ones are kept:
    values are signed), and samples without locations
    are dropped; identical stacks are summed;
  - spies pyspy / rbspy / scripting rename every function to
    "<function filename>:-1 - <name>";
  - spy dotnetspy: when every function id is 0 and there are as many
    functions as locations, function i gets location i's id, and '-' in
    sample type names becomes '_'.  pprof refuses function id 0, so this
    module rewrites the protobuf wire bytes into a fixed, gzipped copy
    before running pprof.

pprof's raw report runs pprof's Merge on the input (deduplicating
locations, functions and identical samples) and applies the profile's
drop_frames/keep_frames; neither changes collapsed stacks except
drop_frames, so a profile that has drop_frames is rewritten without it first
(Pyroscope ignores drop_frames).

The text dump is ambiguous when a function name contains spaces
("file.py:12 - func file.py:0 s=0"): the split between name and file name is
resolved with the profile's string table, read by the small protobuf walker
below.  That walker also gives an independent second collapse of the same
file (`collapse_pb`), which the self-check compares with pprof's, type by
type, together with the totals in ../shared/testdata/profiles/SOURCES.md.

Usage:
  oracle.py FILE [--spy NAME] [--type N]   print collapsed stacks per type
  oracle.py --self-check [DIR|FILE ...]    check the oracle (default: the
                                           shared corpus and tests/data)

Stdlib only (python3 >= 3.9).
"""

import gzip
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

from pbwire import _uv as encode_varint

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SM_SOURCE_DIR") or os.path.normpath(
    os.path.join(HERE, "..", ".."))

SCRIPTING_SPIES = ("pyspy", "rbspy", "scripting")

# Defaults Pyroscope applies when no sample_type_config is sent.
DEFAULT_DISPLAY_NAMES = {
    "samples": "cpu",
    "goroutine": "goroutines",
    "contentions": "mutex_count",
    "delay": "mutex_duration",
}


class OracleError(Exception):
    pass


# --------------------------------------------------------------------------
# Protobuf wire format: a tiny walker (varint / fixed / length-delimited).
# --------------------------------------------------------------------------

def read_varint(buf, pos):
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def iter_fields(buf):
    """Yield (field, wire_type, value, start, end) for each field of a
    message; value is an int (varint/fixed) or bytes (length-delimited)."""
    pos = 0
    n = len(buf)
    while pos < n:
        start = pos
        key, pos = read_varint(buf, pos)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise ValueError("field number 0")
        if wt == 0:
            val, pos = read_varint(buf, pos)
        elif wt == 1:
            if pos + 8 > n:
                raise ValueError("truncated fixed64")
            val = int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wt == 2:
            ln, pos = read_varint(buf, pos)
            if pos + ln > n:
                raise ValueError("truncated length-delimited field")
            val = bytes(buf[pos:pos + ln])
            pos += ln
        elif wt == 5:
            if pos + 4 > n:
                raise ValueError("truncated fixed32")
            val = int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        yield field, wt, val, start, pos


def to_int64(v):
    return v - (1 << 64) if v >= (1 << 63) else v


def varints(wt, val):
    """A repeated scalar field: packed (bytes) or one unpacked value."""
    if wt == 2:
        out = []
        pos = 0
        while pos < len(val):
            v, pos = read_varint(val, pos)
            out.append(v)
        return out
    return [val]


def field_bytes(field, wt, val):
    key = encode_varint((field << 3) | wt)
    if wt == 0:
        return key + encode_varint(val)
    if wt == 2:
        return key + encode_varint(len(val)) + val
    if wt == 1:
        return key + val.to_bytes(8, "little")
    if wt == 5:
        return key + val.to_bytes(4, "little")
    raise ValueError("wire type %d" % wt)


def _packed(field, values):
    return field_bytes(field, 2, b"".join(encode_varint(v) for v in values))


def build_profile(strings, sample_types, samples, locations, functions,
                  mappings=(), period_type=None, period=0, extra=b""):
    """Encode a profile.proto for the malformed-input tests.
      strings       [str | bytes]      (index 0 should be "")
      sample_types  [(type_idx, unit_idx)]
      samples       [(location_ids, values) | (location_ids, values,
                     [(key_idx, str_idx)])]
      locations     [(id, mapping_id, address, [(function_id, line)])]
      functions     [(id, name_idx, system_name_idx, filename_idx)]
      mappings      [(id, filename_idx)]
    Values are written as given, so invalid ones can be produced."""
    out = bytearray()
    for t, u in sample_types:
        out += field_bytes(1, 2, field_bytes(1, 0, t) + field_bytes(2, 0, u))
    for s in samples:
        body = _packed(1, s[0]) + _packed(2, s[1])
        for k, v in (s[2] if len(s) > 2 else ()):
            body += field_bytes(3, 2, field_bytes(1, 0, k) +
                                field_bytes(2, 0, v))
        out += field_bytes(2, 2, body)
    for mid, fname in mappings:
        out += field_bytes(3, 2, field_bytes(1, 0, mid) +
                           field_bytes(5, 0, fname))
    for lid, mid, addr, lines in locations:
        body = field_bytes(1, 0, lid)
        if mid:
            body += field_bytes(2, 0, mid)
        if addr:
            body += field_bytes(3, 0, addr)
        for fid, line in lines:
            body += field_bytes(4, 2, field_bytes(1, 0, fid) +
                                field_bytes(2, 0, line))
        out += field_bytes(4, 2, body)
    for fid, name, sysn, fname in functions:
        out += field_bytes(5, 2, field_bytes(1, 0, fid) + field_bytes(2, 0, name)
                           + field_bytes(3, 0, sysn) + field_bytes(4, 0, fname))
    for s in strings:
        b = s if isinstance(s, bytes) else s.encode("utf-8")
        out += field_bytes(6, 2, b)
    if period_type is not None:
        out += field_bytes(11, 2, field_bytes(1, 0, period_type[0]) +
                           field_bytes(2, 0, period_type[1]))
    if period:
        out += field_bytes(12, 0, period)
    return bytes(out) + extra


def cpu_pprof(stacks, time_nanos=0):
    """A CPU pprof (10 ms period; time_nanos when not 0): stacks is
    [(["main", "work"] root first, value)]."""
    strings = ["", "cpu", "nanoseconds"]
    funcs = {}
    samples = []
    for frames, v in stacks:
        locs = []
        for f in frames:
            if f not in funcs:
                strings.append(f)
                funcs[f] = (len(funcs) + 1, len(strings) - 1)
            locs.append(funcs[f][0])
        samples.append((list(reversed(locs)), [v]))
    locations = [(fid, 0, 0, [(fid, 1)]) for fid, _ in funcs.values()]
    functions = [(fid, si, si, 0) for fid, si in funcs.values()]
    extra = field_bytes(9, 0, time_nanos) if time_nanos else b""
    return build_profile(strings, [(1, 2)], samples, locations, functions,
                         period_type=(1, 2), period=10000000, extra=extra)


def decompress(data):
    """Gunzip when the bytes start with the gzip magic (never by name)."""
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    return data


def _s(b):
    return b.decode("utf-8", "surrogateescape")


class PbProfile:
    """The parts of profile.proto the oracle needs, decoded directly."""

    def __init__(self, raw):
        self.strings = []
        st_idx = []          # [(type_idx, unit_idx)]
        pt_idx = None
        self.default_sample_type = 0
        self.drop_frames = 0
        self.keep_frames = 0
        self.samples = []    # [(values, location_ids, n_labels)]
        self.functions = []  # [(id, name_idx, sys_idx, file_idx, start)]
        self.locations = []  # [(id, mapping_id, address, [(fid, line)])]
        self.mappings = []   # [(id, file_idx)]
        for f, wt, v, _, _ in iter_fields(raw):
            if f == 6 and wt == 2:
                self.strings.append(_s(v))
            elif f == 1 and wt == 2:
                st_idx.append(self._value_type(v))
            elif f == 11 and wt == 2:
                pt_idx = self._value_type(v)
            elif f == 14 and wt == 0:
                self.default_sample_type = v
            elif f == 7 and wt == 0:
                self.drop_frames = v
            elif f == 8 and wt == 0:
                self.keep_frames = v
            elif f == 2 and wt == 2:
                self.samples.append(self._sample(v))
            elif f == 5 and wt == 2:
                self.functions.append(self._function(v))
            elif f == 4 and wt == 2:
                self.locations.append(self._location(v))
            elif f == 3 and wt == 2:
                self.mappings.append(self._mapping(v))
        if not self.strings or self.strings[0] != "":
            raise ValueError("string_table[0] is not empty")
        self.sample_types = [(self.str(t), self.str(u)) for t, u in st_idx]
        self.period_type = (None if pt_idx is None else
                            (self.str(pt_idx[0]), self.str(pt_idx[1])))

    def str(self, i):
        if i < 0 or i >= len(self.strings):
            raise ValueError("string index %d out of range" % i)
        return self.strings[i]

    @staticmethod
    def _varints(buf, *fields):
        """The varint fields `fields` of a message, in that order (0 when
        absent, the last when repeated)."""
        got = dict.fromkeys(fields, 0)
        for f, wt, v, _, _ in iter_fields(buf):
            if f in got and wt == 0:
                got[f] = v
        return tuple(got[f] for f in fields)

    @staticmethod
    def _value_type(buf):
        """(type, unit) of a ValueType."""
        return PbProfile._varints(buf, 1, 2)

    @staticmethod
    def _sample(buf):
        locs, vals, nlab = [], [], 0
        for f, wt, v, _, _ in iter_fields(buf):
            if f == 1:
                locs.extend(varints(wt, v))
            elif f == 2:
                vals.extend(to_int64(x) for x in varints(wt, v))
            elif f == 3:
                nlab += 1
        return (vals, locs, nlab)

    @staticmethod
    def _function(buf):
        fid = name = sysn = fname = start = 0
        for f, wt, v, _, _ in iter_fields(buf):
            if wt != 0:
                continue
            if f == 1:
                fid = v
            elif f == 2:
                name = v
            elif f == 3:
                sysn = v
            elif f == 4:
                fname = v
            elif f == 5:
                start = to_int64(v)
        return (fid, name, sysn, fname, start)

    @staticmethod
    def _location(buf):
        lid = mid = addr = 0
        lines = []
        for f, wt, v, _, _ in iter_fields(buf):
            if f == 1 and wt == 0:
                lid = v
            elif f == 2 and wt == 0:
                mid = v
            elif f == 3 and wt == 0:
                addr = v
            elif f == 4 and wt == 2:
                fid = line = 0
                for f2, wt2, v2, _, _ in iter_fields(v):
                    if f2 == 1 and wt2 == 0:
                        fid = v2
                    elif f2 == 2 and wt2 == 0:
                        line = to_int64(v2)
                lines.append((fid, line))
        return (lid, mid, addr, lines)

    @staticmethod
    def _mapping(buf):
        """(id, file name) of a Mapping."""
        return PbProfile._varints(buf, 1, 5)

    def totals(self):
        """Plain per-type sums of Sample.value (SOURCES.md's 'totals')."""
        t = [0] * len(self.sample_types)
        for vals, _, _ in self.samples:
            for i, v in enumerate(vals[:len(t)]):
                t[i] += v
        return t


def load_pb(path_or_bytes):
    data = path_or_bytes
    if isinstance(path_or_bytes, str):
        with open(path_or_bytes, "rb") as f:
            data = f.read()
    return PbProfile(decompress(data))


def valid_utf8(p):
    """True when every string of the table is valid UTF-8."""
    for s in p.strings:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


def looks_like_pprof(path):
    """True when the file decodes as a profile.proto with sample types
    (gzip detected by magic).  Legacy pprof formats, JFR and text fail."""
    try:
        p = load_pb(path)
    except Exception:
        return False
    return len(p.sample_types) > 0 and len(p.samples) > 0


# --------------------------------------------------------------------------
# Pre-transformations on the wire bytes.
# --------------------------------------------------------------------------

def _rewrite_top(raw, fn):
    """Rebuild a top-level message; fn(field, wt, val, chunk) returns the
    bytes to emit for each field (chunk = the original encoding)."""
    out = bytearray()
    for f, wt, v, s, e in iter_fields(raw):
        out += fn(f, wt, v, raw[s:e])
    return bytes(out)


def dotnet_fix(raw):
    """Pyroscope's FixFunctionIDForBrokenDotnet on wire bytes: when all
    function ids are 0 and there are as many functions as locations,
    function i gets location i's id.  Returns (new_raw, changed)."""
    p = PbProfile(raw)
    if not p.functions or any(fn[0] != 0 for fn in p.functions):
        return raw, False
    if len(p.functions) != len(p.locations):
        return raw, False
    loc_ids = [loc[0] for loc in p.locations]
    counter = [0]

    def fix(f, wt, v, chunk):
        if f == 5 and wt == 2:
            i = counter[0]
            counter[0] += 1
            body = bytearray(field_bytes(1, 0, loc_ids[i]))
            for f2, wt2, v2, s2, e2 in iter_fields(v):
                if f2 != 1:
                    body += v[s2:e2]
            return field_bytes(5, 2, bytes(body))
        return chunk

    return _rewrite_top(raw, fix), True


def strip_frame_filters(raw):
    """Drop drop_frames/keep_frames (fields 7, 8) so pprof does not prune
    (Pyroscope ignores them).  Returns (new_raw, changed)."""
    changed = [False]

    def strip(f, wt, v, chunk):
        if f in (7, 8) and wt == 0:
            changed[0] = True
            return b""
        return chunk

    new = _rewrite_top(raw, strip)
    return new, changed[0]


# --------------------------------------------------------------------------
# go tool pprof -raw, parsed.
# --------------------------------------------------------------------------

def go_env():
    env = dict(os.environ)
    env["PPROF_BINARY_PATH"] = "/nonexistent"
    env["PPROF_TMPDIR"] = tempfile.gettempdir()
    home = env.get("HOME", "")
    if not home or not os.access(home, os.W_OK):
        env["HOME"] = tempfile.gettempdir()
        env.setdefault("GOCACHE", os.path.join(tempfile.gettempdir(),
                                               "smolder-gocache"))
    return env


def have_go():
    try:
        r = subprocess.run(["go", "version"], capture_output=True,
                           env=go_env(), timeout=60)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def build_go_tool(name, tmp):
    """Build tests/tools/<name> (a Go program) into tmp, offline; (path,
    None) or (None, why it failed)."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "tools", name)
    exe = os.path.join(tmp, name)
    env = go_env()
    env.setdefault("GOCACHE", os.path.join(tempfile.gettempdir(),
                                           "smolder-gocache"))
    env["GOFLAGS"] = ""
    env["GOPROXY"] = "off"
    env["GOWORK"] = "off"
    env["CGO_ENABLED"] = "0"
    try:
        b = subprocess.run(["go", "build", "-o", exe, "."], cwd=src, env=env,
                           capture_output=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if b.returncode != 0:
        return None, b.stderr.decode("utf-8", "replace")
    return exe, None


def build_genprof(tmp):
    """Build tests/tools/genprof (real Go runtime profiles) into tmp,
    offline; (path, None) or (None, why it failed)."""
    return build_go_tool("genprof", tmp)


def run_pprof_raw(path, timeout=120):
    try:
        r = subprocess.run(
            ["go", "tool", "pprof", "-symbolize=none", "-raw", path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=go_env(), timeout=timeout)
    except FileNotFoundError:
        raise OracleError("go is not installed (go tool pprof is the oracle)")
    if r.returncode != 0:
        raise OracleError("go tool pprof -raw %s failed: %s" % (
            path, r.stderr.decode("utf-8", "replace").strip()[-500:]))
    return r.stdout.decode("utf-8", "surrogateescape")


_LOC_RE = re.compile(r"^ *(\d+): (0x[0-9a-f]+) (?:M=(\d+) )?(?:\[F\] )?(.*)$")
_SAMPLE_RE = re.compile(r"^((?: +-?\d+)+): ((?:\d+ )*)$")
_MAP_RE = re.compile(
    r"^(\d+): (0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+) (.*)$")
_LINE_TAIL_RE = re.compile(r"(.*):(-?\d+) s=(-?\d+)(?:\((.*)\))?$", re.S)


def split_line(text, strings=None):
    """Split pprof's 'name file:line s=start[(sysname)]' into (name, file).
    A name or file with spaces makes this ambiguous; candidates whose name
    and file are both in the string table win."""
    if text == "??":
        return None
    cands = []
    for i, ch in enumerate(text):
        if ch != " ":
            continue
        m = _LINE_TAIL_RE.match(text, i + 1)
        if m:
            cands.append((text[:i], m.group(1)))
    if not cands:
        raise OracleError("cannot parse pprof line %r" % text)
    if strings is not None and len(cands) > 1:
        good = [c for c in cands if c[0] in strings and c[1] in strings]
        if len(good) >= 1:
            return good[-1]
    return cands[-1]


class RawProfile:
    """What `pprof -raw` printed."""

    def __init__(self):
        self.period_type = None
        self.period = 0
        self.sample_types = []     # [(type, unit)]
        self.default_type = None
        self.samples = []          # [(values, [loc ids])]
        self.locations = {}        # id -> (address, mapping id, [(name, file) | None])
        self.mappings = {}         # id -> file
        self.warnings = []


def parse_raw(text, strings=None):
    rp = RawProfile()
    lines = text.split("\n")
    i = 0
    n = len(lines)
    strset = set(strings) if strings is not None else None
    while i < n and lines[i] != "Samples:":
        ln = lines[i]
        if ln.startswith("PeriodType: "):
            t, _, u = ln[len("PeriodType: "):].rpartition(" ")
            rp.period_type = (t, u)
        elif ln.startswith("Period: "):
            rp.period = int(ln[len("Period: "):])
        i += 1
    if i >= n:
        raise OracleError("no 'Samples:' section in pprof output")
    i += 1
    header = lines[i].strip()
    i += 1
    for tok in header.split(" ") if header else []:
        dflt = tok.endswith("[dflt]")
        if dflt:
            tok = tok[:-len("[dflt]")]
        t, _, u = tok.rpartition("/")
        rp.sample_types.append((t, u))
        if dflt:
            rp.default_type = len(rp.sample_types) - 1
    while i < n and lines[i] != "Locations":
        m = _SAMPLE_RE.match(lines[i])
        if m:
            vals = [int(x) for x in m.group(1).split()]
            locs = [int(x) for x in m.group(2).split()]
            rp.samples.append((vals, locs))
        # else: a label line ("{...}") or a numeric-label line
        i += 1
    i += 1
    cur = None
    while i < n and lines[i] != "Mappings":
        ln = lines[i]
        m = _LOC_RE.match(ln)
        if m:
            lid = int(m.group(1))
            cur = (int(m.group(2), 16), int(m.group(3) or 0), [])
            rp.locations[lid] = cur
            rest = m.group(4)
            if rest:
                cur[2].append(split_line(rest, strset))
        elif ln.startswith("             ") and cur is not None:
            cur[2].append(split_line(ln[13:], strset))
        elif ln.strip():
            raise OracleError("unexpected line in Locations: %r" % ln)
        i += 1
    i += 1
    while i < n:
        m = _MAP_RE.match(lines[i])
        if m:
            parts = m.group(5).rsplit(" ", 2)
            rp.mappings[int(m.group(1))] = parts[0] if len(parts) == 3 else ""
        i += 1
    for lid, (_, _, lns) in rp.locations.items():
        if any(x is None for x in lns):
            rp.warnings.append("location %d has a line without a function" % lid)
    return rp


def _basename(path):
    return path.rsplit("/", 1)[-1]


def addr_frame(address, mapping_file):
    s = "0x%x" % address
    if mapping_file:
        s += " [%s]" % _basename(mapping_file)
    return s


def _line_frames(funcs, rename):
    """A location's frames, root first, from its lines' functions (leaf
    first; (name, file name), or None when the line has no function)."""
    fr = []
    for fn in reversed(funcs):
        if fn is None:
            fr.append("??")
        elif rename:
            fr.append("%s:-1 - %s" % (fn[1], fn[0]))
        else:
            fr.append(fn[0])
    return fr


def _collapse_samples(ntypes, samples, frames_of):
    """[ {stack: value} ] per sample type index of samples (values,
    location ids leaf first), frames_of giving a location's frames."""
    out = [defaultdict(int) for _ in range(ntypes)]
    for vals, locs in samples:
        if not locs:
            continue
        frames = []
        for lid in reversed(locs):
            frames.extend(frames_of[lid])
        key = ";".join(frames)
        for ti, v in enumerate(vals[:len(out)]):
            if v != 0:
                out[ti][key] += v
    return [{k: v for k, v in d.items() if v != 0} for d in out]


def collapse_raw(rp, spy=None):
    """Collapsed stacks per sample type index: [ {stack: value} ]."""
    rename = spy in SCRIPTING_SPIES
    frames_of = {}
    for lid, (addr, mid, lns) in rp.locations.items():
        if not lns:
            frames_of[lid] = [addr_frame(addr, rp.mappings.get(mid, ""))]
        else:
            frames_of[lid] = _line_frames(lns, rename)
    return _collapse_samples(len(rp.sample_types), rp.samples, frames_of)


def collapse_pb(p, spy=None):
    """The same collapse straight from the protobuf (self-check only)."""
    rename = spy in SCRIPTING_SPIES
    funcs = {fid: (p.str(name), p.str(fname))
             for fid, name, _, fname, _ in p.functions}
    maps = {mid: p.str(fname) for mid, fname in p.mappings}
    frames_of = {}
    for lid, mid, addr, lines in p.locations:
        if not lines:
            frames_of[lid] = [addr_frame(addr, maps.get(mid, ""))]
        else:
            frames_of[lid] = _line_frames(
                [funcs.get(fid) for fid, _ in lines], rename)
    return _collapse_samples(len(p.sample_types),
                             [(vals, locs) for vals, locs, _ in p.samples],
                             frames_of)


# --------------------------------------------------------------------------
# Naming: metric and __profile_type__ for an /ingest pprof upload.
# --------------------------------------------------------------------------

def metric_name(type_names, st_config=None):
    """Pyroscope's metric rule (one per profile).  st_config is the parsed
    sample_type_config JSON; when given it replaces the defaults."""
    if "wall" in type_names:
        return "wall"
    if st_config is None:
        cfg = {k: {"display-name": v} for k, v in DEFAULT_DISPLAY_NAMES.items()}
    else:
        cfg = st_config
    st = ""
    for t in type_names:
        st = t
        c = cfg.get(t) or {}
        if c.get("display-name"):
            st = c["display-name"]
        if "cpu" in st:
            return "process_cpu"
        if "alloc_" in st or "inuse_" in st or st in ("space", "objects"):
            return "memory"
        if "mutex_" in st:
            return "mutex"
        if "block_" in st:
            return "block"
        if "goroutines" in st:
            return "goroutines"
    return st


def profile_type_ids(sample_types, period_type, st_config=None):
    """The __profile_type__ of each sample type index."""
    metric = metric_name([t for t, _ in sample_types], st_config)
    pt, pu = period_type if period_type else ("", "")
    return ["%s:%s:%s:%s:%s" % (metric, t, u, pt, pu) for t, u in sample_types]


# --------------------------------------------------------------------------
# The oracle.
# --------------------------------------------------------------------------

class Expected:
    """Expected result of ingesting one pprof file."""

    def __init__(self, sample_types, period_type, stacks, type_ids, notes):
        self.sample_types = sample_types   # [(type, unit)] as stored
        self.period_type = period_type
        self.stacks = stacks               # [ {stack: value} ] per type
        self.type_ids = type_ids           # [__profile_type__] per type
        self.notes = notes                 # transformations applied


def expected_for(path, spy=None, st_config=None, workdir=None):
    """Run the oracle on `path` as /ingest would see it with spyName=spy.
    Raises OracleError when pprof cannot read it."""
    with open(path, "rb") as f:
        data = f.read()
    raw = decompress(data)
    pb = PbProfile(raw)
    notes = []
    changed = False
    dotnet = spy == "dotnetspy"
    if dotnet:
        raw, ch = dotnet_fix(raw)
        if ch:
            notes.append("dotnet function-id fix")
            changed = True
    raw2, ch = strip_frame_filters(raw)
    if ch:
        notes.append("drop_frames/keep_frames removed")
        raw, changed = raw2, True
    tmp = None
    target = path
    if changed:
        fd, tmp = tempfile.mkstemp(prefix="oracle-", suffix=".pb.gz",
                                   dir=workdir)
        with os.fdopen(fd, "wb") as f:
            f.write(gzip.compress(raw))
        target = tmp
    try:
        rp = parse_raw(run_pprof_raw(target), strings=pb.strings)
    finally:
        if tmp:
            os.unlink(tmp)
    types = list(rp.sample_types)
    if dotnet:
        types = [(t.replace("-", "_"), u) for t, u in types]
        if types != rp.sample_types:
            notes.append("'-' in sample types -> '_'")
    if spy in SCRIPTING_SPIES:
        notes.append("scripting-spy rename")
    if rp.warnings:
        notes.extend(rp.warnings)
    stacks = collapse_raw(rp, spy)
    return Expected(types, rp.period_type, stacks,
                    profile_type_ids(types, rp.period_type, st_config), notes)


# --------------------------------------------------------------------------
# Collapsed text helpers shared by the tests.
# --------------------------------------------------------------------------

def parse_collapsed(text):
    """'a;b;c 12\\n...' -> {stack: value} (duplicates summed)."""
    out = defaultdict(int)
    for ln in text.split("\n"):
        if ln.endswith("\r"):
            ln = ln[:-1]
        if not ln:
            continue
        stack, sep, val = ln.rpartition(" ")
        if not sep:
            raise ValueError("collapsed line without a value: %r" % ln)
        out[stack] += int(val)
    return dict(out)


def expected_or_skip(r, path, workdir=None):
    """expected_for(path), or None once r has skipped the file because
    pprof cannot read it (there is nothing to hold the product to)."""
    try:
        return expected_for(path, workdir=workdir)
    except OracleError as e:
        r.skip(os.path.basename(path), "pprof cannot read it: %s" % e)
        return None


def diff_stacks(want, got, limit=8):
    """A compact human-readable diff of two {stack: value} dicts."""
    lines = []
    keys = sorted(set(want) | set(got))
    bad = [k for k in keys if want.get(k) != got.get(k)]
    tw, tg = sum(want.values()), sum(got.values())
    lines.append("  %d stacks differ (want %d stacks total %d; got %d "
                 "stacks total %d)" % (len(bad), len(want), tw, len(got), tg))
    for k in bad[:limit]:
        short = k if len(k) <= 160 else "..." + k[-157:]
        lines.append("    %-8s want=%s got=%s" % (
            "missing" if k not in got else
            ("extra" if k not in want else "value"),
            want.get(k), got.get(k)))
        lines.append("      " + short)
    if len(bad) > limit:
        lines.append("    ... %d more" % (len(bad) - limit))
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Self-check.
# --------------------------------------------------------------------------

def shared_profiles_dir():
    d = os.environ.get("SM_SHARED_DIR") or os.path.join(SOURCE_DIR, "..",
                                                        "shared")
    return os.path.normpath(os.path.join(d, "testdata", "profiles"))


_ROW_RE = re.compile(r"^\| `([^`]+)` \|")
_TOTALS_RE = re.compile(r"totals: ((?:[^;|]*?=-?\d+; )+)")


def sources_totals(sources_md):
    """{file: [(type, unit, total)]} from a SOURCES.md pprof table."""
    out = {}
    if not os.path.exists(sources_md):
        return out
    with open(sources_md, encoding="utf-8") as f:
        for ln in f:
            m = _ROW_RE.match(ln)
            if not m:
                continue
            t = _TOTALS_RE.search(ln)
            if not t:
                continue
            items = []
            for part in t.group(1).split("; "):
                if not part:
                    continue
                k, _, v = part.rpartition("=")
                ty, _, un = k.rpartition("/")
                items.append((ty, un, int(v)))
            out[m.group(1)] = items
    return out


def self_check(paths):
    """Check the oracle on every pprof among `paths`:
    (1) pprof's sample types and period type equal the protobuf's;
    (2) the pprof-based collapse equals an independent collapse of the
        protobuf, stack by stack, for every type;
    (3) per-type totals equal SOURCES.md's, when the table lists the file
        (an exact match is expected unless samples have negative values or
        no locations, which the collapse drops: reported, not failed).
    Returns the number of failures."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files.extend(os.path.join(p, f) for f in sorted(os.listdir(p)))
        elif os.path.isfile(p):
            files.append(p)
    totals = {}
    seen_md = set()
    for f in files:
        md = os.path.join(os.path.dirname(f), "SOURCES.md")
        if md not in seen_md:
            seen_md.add(md)
            for k, v in sources_totals(md).items():
                totals.setdefault(k, v)
    fails = 0
    checked = 0
    for f in files:
        name = os.path.basename(f)
        if name.endswith((".md", ".txt", ".json", ".string", ".jfr")):
            continue
        if not looks_like_pprof(f):
            continue
        pb = load_pb(f)
        spies = [None]
        if any(fn[0] == 0 for fn in pb.functions):
            spies = ["dotnetspy"]
        if name.startswith("pyroscope__pyspy"):
            spies.append("scripting")
        for spy in spies:
            label = name + (" [spy=%s]" % spy if spy else "")
            if not valid_utf8(pb):
                # Names with control bytes break pprof's text dump; the
                # server must reject such a profile (422), no oracle needed.
                print("skip %s: strings are not valid UTF-8 (an ingest "
                      "reject case)" % label)
                continue
            try:
                exp = expected_for(f, spy=spy)
            except OracleError as e:
                print("FAIL %s: %s" % (label, e))
                fails += 1
                continue
            checked += 1
            problems = []
            # (1) header
            pb_types = pb.sample_types
            if spy == "dotnetspy":
                pb_types = [(t.replace("-", "_"), u) for t, u in pb_types]
            if exp.sample_types != pb_types:
                problems.append("sample types %r != protobuf %r" % (
                    exp.sample_types, pb_types))
            # pprof prints an absent period type as an empty one; both give
            # "::" in the type id.
            pt = pb.period_type or ("", "")
            if (exp.period_type or ("", "")) != pt:
                problems.append("period type %r != protobuf %r" % (
                    exp.period_type, pt))
            # (2) independent collapse
            pbf = pb
            if spy == "dotnetspy":
                pbf = PbProfile(dotnet_fix(decompress(open(f, "rb").read()))[0])
            alt = collapse_pb(pbf, spy)
            for ti, (a, b) in enumerate(zip(exp.stacks, alt)):
                if a != b:
                    problems.append("type %d: pprof collapse != protobuf "
                                    "collapse\n%s" % (ti, diff_stacks(b, a)))
            # (3) totals
            mine = [sum(d.values()) for d in exp.stacks]
            plain = pb.totals()
            dropped = [p - m for p, m in zip(plain, mine)]
            src = totals.get(name)
            verdict = ""
            if src is not None:
                want = [t for _, _, t in src]
                if want != plain:
                    problems.append("plain totals %r != SOURCES.md %r" % (
                        plain, want))
                elif want == mine:
                    verdict = "= SOURCES.md"
                else:
                    verdict = ("SOURCES.md %r; dropped (<=0 values or empty "
                               "stacks) %r" % (want, dropped))
            else:
                verdict = "(not in a SOURCES.md table)"
            desc = ", ".join("%s/%s=%d" % (t, u, v) for (t, u), v in
                             zip(exp.sample_types, mine))
            if problems:
                fails += 1
                print("FAIL %s: %s" % (label, desc))
                for pr in problems:
                    print("  " + pr)
            else:
                note = (" {%s}" % "; ".join(exp.notes)) if exp.notes else ""
                print("ok   %s: %s %s%s" % (label, desc, verdict, note))
    print("self-check: %d profiles checked, %d failed" % (checked, fails))
    return fails


def main(argv):
    if len(argv) >= 1 and argv[0] == "--self-check":
        paths = argv[1:] or [shared_profiles_dir(),
                             os.path.join(SOURCE_DIR, "tests", "data")]
        paths = [p for p in paths if os.path.exists(p)]
        if not have_go():
            print("skipped: go is not installed")
            return 0
        return 1 if self_check(paths) else 0
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    path = argv[0]
    spy = None
    only = None
    args = argv[1:]
    while args:
        if args[0] == "--spy" and len(args) > 1:
            spy = args[1]
            args = args[2:]
        elif args[0] == "--type" and len(args) > 1:
            only = int(args[1])
            args = args[2:]
        else:
            print("unknown argument %r" % args[0])
            return 2
    exp = expected_for(path, spy=spy)
    for ti, d in enumerate(exp.stacks):
        if only is not None and ti != only:
            continue
        print("# %d %s total=%d stacks=%d" % (ti, exp.type_ids[ti],
                                             sum(d.values()), len(d)))
        for k in sorted(d):
            print("%s %d" % (k, d[k]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
