"""
pbwire.py -- the protobuf wire format by hand, for tests that build
requests and read answers without generated code (wire facts only):
varints, tagged fields, and a field-number view of a message.
tests/integration/test_protoc_wire.py checks the same methods through
protoc itself.
"""
import struct


def _uv(n):
    """A varint (negative ints as their 64-bit two's complement)."""
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_int(field, v):
    return _uv(field << 3) + _uv(v)


def pb_str(field, s):
    b = s.encode() if isinstance(s, str) else s
    return _uv((field << 3) | 2) + _uv(len(b)) + b


def pb_double(field, v):
    return _uv((field << 3) | 1) + struct.pack("<d", v)


def _read_uv(buf, i):
    v, s = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7f) << s
        s += 7
        if not b & 0x80:
            return v, i


def pb_fields(buf):
    """(field, wire type, value) of each field of a message, in order:
    varints as ints, length-delimited and fixed64/fixed32 as bytes."""
    i = 0
    while i < len(buf):
        key, i = _read_uv(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_uv(buf, i)
        elif wt == 2:
            n, i = _read_uv(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        yield f, wt, v


def pb_decode(buf, fixed_ints=False):
    """{field: [values]}: varints as ints, length-delimited as bytes,
    fixed64/fixed32 as bytes (as unsigned ints with fixed_ints)."""
    out = {}
    for f, wt, v in pb_fields(buf):
        if fixed_ints and wt == 1:
            v = struct.unpack("<Q", v)[0]
        elif fixed_ints and wt == 5:
            v = struct.unpack("<I", v)[0]
        out.setdefault(f, []).append(v)
    return out


def packed(vals):
    """A packed repeated varint field's values."""
    out, i = [], 0
    while i < len(vals):
        v, i = _read_uv(vals, i)
        out.append(v)
    return out


def _s64(v):
    """A varint read back as int64."""
    return v - (1 << 64) if v >= 1 << 63 else v
