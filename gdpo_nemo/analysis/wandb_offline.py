"""Runs from W&B offline run files (``wandb/offline-run-*/run-<id>.wandb``).

A ``.wandb`` file is W&B's transaction log: a 7-byte header (``":W&B"``, magic 0xBEE1,
version 0) and then LevelDB-log-style blocks of 32 KiB holding records with a 7-byte
header (crc32, uint16 length, type: 1 full, 2 first, 3 middle, 4 last). Each reassembled
record is a ``wandb.proto.wandb_internal_pb2.Record`` (the protobuf module wandb ships).
Read here: the ``run`` record (name, group, config), ``config`` updates, ``history``
records (one per logged step, ``_step`` among its items) and the ``exit`` record.

wandb >= 0.19 no longer ships a Python reader for these files, so the framing is decoded
here and only the message type comes from wandb.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from gdpo_nemo.analysis.frame import RunLog
from gdpo_nemo.run_id import RunId

_HEADER = struct.Struct("<4sHB")
_RECORD = struct.Struct("<IHB")
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def iter_records(path: str | Path) -> Iterator[bytes]:
    """The raw protobuf bytes of every complete record of a ``.wandb`` file.

    Raises ValueError naming the file when its header is not W&B's. A record with a bad
    checksum or a torn tail (a run killed mid-write) ends the iteration.
    """
    data = Path(path).read_bytes()
    if len(data) < _HEADER.size:
        raise ValueError(f"{path}: not a W&B run file (shorter than its header)")
    ident, magic, version = _HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path}: not a W&B run file (header {ident!r}, magic {magic:#x})")
    pos, pending = _HEADER.size, b""
    while pos < len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _RECORD.size:
            pos += left  # block trailer padding
            continue
        if pos + _RECORD.size > len(data):
            return
        checksum, length, kind = _RECORD.unpack_from(data, pos)
        chunk = data[pos + _RECORD.size: pos + _RECORD.size + length]
        pos += _RECORD.size + length
        if kind == 0 and length == 0:
            pos += _BLOCK - pos % _BLOCK if pos % _BLOCK else 0  # zero padding: skip to next block
            continue
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            return
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""


def _item_key(item) -> str:
    return "/".join(item.nested_key) if len(item.nested_key) else item.key


def _decode(value_json: str):
    try:
        return json.loads(value_json)
    except ValueError:
        return value_json


def read_offline_run(path: str | Path) -> RunLog:
    """One offline run file as a `RunLog` (status from its exit record).

    The run id comes from the config's ``gdpo`` block and ``grpo.seed`` when present, else
    from the W&B run name (``RunId.parse``); ValueError when neither names a run.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    name, group = "", ""
    config: dict = {}
    rows: dict[int, dict] = {}
    status = "unfinished"
    next_step = 0
    for raw in iter_records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            name = record.run.display_name or name
            group = record.run.run_group or group
            for item in record.run.config.update:
                config[_item_key(item)] = _decode(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                config[_item_key(item)] = _decode(item.value_json)
        elif kind == "history":
            values = {_item_key(item): item.value_json for item in record.history.item}
            step = int(_decode(values["_step"])) if "_step" in values else (
                record.history.step.num if record.history.HasField("step") else next_step)
            next_step = step + 1
            row = rows.setdefault(step, {})
            for key, value_json in values.items():
                if not key.startswith("_"):
                    row[key] = _decode(value_json)
        elif kind == "exit":
            status = "finished" if record.exit.exit_code == 0 else "crashed"
    config.pop("_wandb", None)
    try:
        run_id = RunId.from_config(config)
    except (KeyError, TypeError, ValueError):
        try:
            run_id = RunId.parse(name)
        except ValueError:
            raise ValueError(f"{path}: W&B run {name!r} (group {group!r}) has no gdpo run id in its config or name") from None
    return RunLog(run_id=run_id, source="wandb-offline", path=str(Path(path).parent), status=status,
                  config=config, rows=rows, priority=1)


def find_offline_runs(root: str | Path) -> list[Path]:
    """Every ``run-*.wandb`` file under `root` (sorted)."""
    return sorted(Path(root).rglob("run-*.wandb"))
