"""Scalars from TensorBoard event files, without TensorFlow or the tensorboard package.

An event file is a TFRecord stream: each record is ``uint64 length, uint32 crc(length),
bytes[length] data, uint32 crc(data)`` (little endian), and each data blob is an ``Event``
protocol buffer. The fields read here (numbers from tensorflow's event.proto and
summary.proto) are:

    Event:        1 wall_time (double), 2 step (int64), 5 summary (Summary)
    Summary:      1 value (repeated Value)
    Value:        1 tag (string), 2 simple_value (float), 8 tensor (TensorProto)
    TensorProto:  4 tensor_content (bytes), 5 float_val, 6 double_val, 7 int_val, 10 int64_val

`SummaryWriter.add_scalar` (torch, what NeMo RL's TensorboardLogger calls) writes
``simple_value``; newer writers may write a one-element ``tensor`` instead; both are read.
Non-scalar summaries (images, histograms, hparams) are skipped. CRCs are not checked (no
crc32c in the standard library); a truncated last record (a run killed mid-write) ends the
file quietly.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of one protobuf message; LEN values are bytes."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _I64:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == _LEN:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == _I32:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} (field {number})")
        yield number, wire, value


def _tensor_scalar(buf: bytes) -> float | None:
    """The single number held by a TensorProto, or None if it holds another shape or type."""
    values: list[float] = []
    content = b""
    dtype = 0
    for number, wire, value in _fields(buf):
        if number == 1 and wire == _VARINT:
            dtype = value
        elif number == 4:
            content = value
        elif number == 5:  # float_val (packed or not)
            values += [v for (v,) in struct.iter_unpack("<f", value)] if wire == _LEN else [struct.unpack("<f", value)[0]]
        elif number == 6:
            values += [v for (v,) in struct.iter_unpack("<d", value)] if wire == _LEN else [struct.unpack("<d", value)[0]]
        elif number in (7, 10):  # int_val / int64_val: varints, packed or not
            if wire == _LEN:
                pos = 0
                while pos < len(value):
                    v, pos = _varint(value, pos)
                    values.append(float(v - (1 << 64) if v >= 1 << 63 else v))
            else:
                values.append(float(value - (1 << 64) if value >= 1 << 63 else value))
    if not values and content:
        # DT_FLOAT = 1, DT_DOUBLE = 2, DT_INT32 = 3, DT_INT64 = 9 (tensorflow types.proto)
        fmt = {1: "<f", 2: "<d", 3: "<i", 9: "<q"}.get(dtype)
        if fmt and len(content) == struct.calcsize(fmt):
            values = [float(struct.unpack(fmt, content)[0])]
    return values[0] if len(values) == 1 else None


def read_scalars(path: str | Path) -> Iterator[tuple[int, str, float]]:
    """Every scalar of one event file as (step, tag, value), in file order."""
    data = Path(path).read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        start = pos + 12
        if start + length + 4 > len(data):
            return  # truncated last record
        event = data[start:start + length]
        pos = start + length + 4
        step = 0
        summary = None
        for number, wire, value in _fields(event):
            if number == 2 and wire == _VARINT:
                step = value - (1 << 64) if value >= 1 << 63 else value
            elif number == 5 and wire == _LEN:
                summary = value
        if summary is None:
            continue
        for number, wire, value in _fields(summary):
            if number != 1 or wire != _LEN:
                continue
            tag, scalar = None, None
            for vnum, vwire, vval in _fields(value):
                if vnum == 1 and vwire == _LEN:
                    tag = vval.decode("utf-8", "replace")
                elif vnum == 2 and vwire == _I32:
                    scalar = struct.unpack("<f", vval)[0]
                elif vnum == 8 and vwire == _LEN:
                    scalar = _tensor_scalar(vval)
            if tag is not None and scalar is not None:
                yield step, tag, scalar
