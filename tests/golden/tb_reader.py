"""A TensorBoard event-file decoder in plain Python, for the tests.

It shares no code with ctrain's writer: the TFRecord framing, the masked CRC-32C
and the protobuf wire format are decoded here from their definitions.

  record  = uint64 length (LE), uint32 masked crc32c of those 8 bytes,
            data[length], uint32 masked crc32c of data
  crc32c  = CRC-32, Castagnoli polynomial (reflected 0x82F63B78), init and final
            xor 0xFFFFFFFF
  masked  = ((crc >> 15) | (crc << 17)) + 0xA282EAD8, mod 2**32
  Event   = {1: wall_time double, 2: step int64, 3: file_version string,
             5: summary Summary}
  Summary = {1: value repeated Value};  Value = {1: tag string, 2: simple_value float}

Fields other than these are skipped when well-formed (a reader must tolerate
them); malformed wire data raises TBFormatError.

usage as a tool: python3 tb_reader.py EVENTFILE   (prints one line per event)
"""

import struct
import sys

CASTAGNOLI_REFLECTED = 0x82F63B78


class TBFormatError(Exception):
    """The file is not a well-formed event file (bad CRC, bad protobuf)."""


def _make_table():
    table = []
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ CASTAGNOLI_REFLECTED if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def split_records(raw):
    """The data of every complete record of raw (bytes), and whether the file
    ends inside a record (a torn tail, which TensorBoard also tolerates).
    Raises TBFormatError, with the byte offset, when a CRC does not match."""
    out = []
    off = 0
    while off < len(raw):
        if len(raw) - off < 12:
            return out, True
        head = raw[off:off + 8]
        (length,) = struct.unpack("<Q", head)
        (len_crc,) = struct.unpack("<I", raw[off + 8:off + 12])
        if len_crc != masked_crc(head):
            raise TBFormatError("offset %d: length CRC mismatch (stored %08x, computed %08x)"
                                % (off, len_crc, masked_crc(head)))
        start = off + 12
        if len(raw) - start < length + 4:
            return out, True
        data = raw[start:start + length]
        (data_crc,) = struct.unpack("<I", raw[start + length:start + length + 4])
        if data_crc != masked_crc(data):
            raise TBFormatError("offset %d: data CRC mismatch (stored %08x, computed %08x)"
                                % (off, data_crc, masked_crc(data)))
        out.append(bytes(data))
        off = start + length + 4
    return out, False


def _varint(buf, pos):
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise TBFormatError("varint runs past the end of the message")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise TBFormatError("varint longer than 10 bytes")


def fields(buf):
    """(field number, wire type, value) of each field of one message; value is
    an int for varints, bytes for fixed32/fixed64/length-delimited fields."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise TBFormatError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            if pos + n > len(buf):
                raise TBFormatError("fixed field runs past the end of the message")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise TBFormatError("length-delimited field runs past the end of the message")
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise TBFormatError("unsupported wire type %d" % wire)
        yield field, wire, value


def _int64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_value(buf):
    tag, simple = None, None
    for field, wire, v in fields(buf):
        if field == 1 and wire == 2:
            tag = v.decode("utf-8")
        elif field == 2 and wire == 5:
            (simple,) = struct.unpack("<f", v)
    return tag, simple


def decode_event(buf):
    """dict with wall_time, step, file_version (or None) and values, a list of
    (tag, simple_value) pairs. Proto3 defaults apply to absent fields."""
    ev = {"wall_time": 0.0, "step": 0, "file_version": None, "values": []}
    for field, wire, v in fields(buf):
        if field == 1 and wire == 1:
            (ev["wall_time"],) = struct.unpack("<d", v)
        elif field == 2 and wire == 0:
            ev["step"] = _int64(v)
        elif field == 3 and wire == 2:
            ev["file_version"] = v.decode("utf-8")
        elif field == 5 and wire == 2:
            for f2, w2, v2 in fields(v):
                if f2 == 1 and w2 == 2:
                    ev["values"].append(decode_value(v2))
    return ev


def read_events(path):
    """(events, truncated) of an event file; raises TBFormatError."""
    with open(path, "rb") as f:
        raw = f.read()
    return decode_bytes(raw)


def decode_bytes(raw):
    records, truncated = split_records(raw)
    return [decode_event(r) for r in records], truncated


def main(argv):
    events, truncated = read_events(argv[1])
    for e in events:
        if e["file_version"] is not None:
            print("wall_time %.3f file_version %s" % (e["wall_time"], e["file_version"]))
        for tag, value in e["values"]:
            print("wall_time %.3f step %d %s = %r" % (e["wall_time"], e["step"], tag, value))
    if truncated:
        print("(the file ends inside a record)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
