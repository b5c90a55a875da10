"""The one metrics sink of both engines: `metrics.jsonl` always, W&B when enabled.

`metrics.jsonl` holds one JSON object per logged step, ``{"step": N, "<key>": value, ...}``,
appended and flushed line by line, so a killed run loses at most the step in flight. It is
the source of truth the analysis reads; W&B mirrors it.

W&B mode (`wandb_mode`):
- ``online`` when ``WANDB_API_KEY`` is set (or ``WANDB_MODE=online``),
- ``offline`` without a key: the run is written under ``<run_dir>/wandb/`` and can be
  uploaded later with ``wandb sync <run_dir>/wandb/offline-run-*``,
- ``disabled`` when ``logger.wandb_enabled`` is false (or ``WANDB_MODE=disabled``).
The W&B run id is kept in ``<run_dir>/wandb_id`` so a resumed run continues the same W&B run.

Resuming: `Tracker(..., resume_step=N)` first drops every line of `metrics.jsonl` whose step
is after N (the checkpoint the run resumes from), so steps are never logged twice.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path

METRICS_FILE = "metrics.jsonl"
WANDB_ID_FILE = "wandb_id"
MODES = ("online", "offline", "disabled")


def wandb_mode(enabled: bool) -> str:
    """The W&B mode for `logger.wandb_enabled` and the environment (module docstring)."""
    if not enabled:
        return "disabled"
    forced = os.environ.get("WANDB_MODE", "").strip().lower()
    if forced in ("disabled", "offline", "online"):
        return forced
    if forced == "dryrun":
        return "offline"
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def _plain(value):
    """A JSON-safe float/int/str; NaN and inf become null (JSON has no NaN)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    value = float(value)
    return value if math.isfinite(value) else None


def read_metrics(run_dir) -> list[dict]:
    """The records of `<run_dir>/metrics.jsonl`, in file order (a torn last line is skipped)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    records = []
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a kill: nothing after it was written whole
    return records


def truncate_metrics(run_dir, last_step: int) -> int:
    """Keep only the records of `metrics.jsonl` with step <= `last_step`; returns how many
    were kept. The file is rewritten through a temporary file and an atomic rename."""
    path = Path(run_dir) / METRICS_FILE
    kept = [r for r in read_metrics(run_dir) if int(r.get("step", -1)) <= last_step]
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w") as handle:
        for record in kept:
            handle.write(json.dumps(record) + "\n")
    os.replace(tmp, path)
    return len(kept)


class Tracker:
    """Log metrics of one run to `<run_dir>/metrics.jsonl` and (optionally) W&B.

    Args:
        run_dir: the run directory (created if missing).
        config: the resolved run config, stored as the W&B run config.
        name, group: W&B run name and group (the run id's `.name` and `.group`).
        project, entity: W&B project and entity (`logger.wandb.*`).
        wandb_enabled: `logger.wandb_enabled`.
        resume_step: when resuming from the checkpoint of step N: keep metrics up to N.
            None starts a fresh `metrics.jsonl`.
    """

    def __init__(self, run_dir, *, config: dict | None = None, name: str = "run", group: str | None = None,
                 project: str = "gdpo-nemo", entity: str | None = None, wandb_enabled: bool = False,
                 resume_step: int | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        if resume_step is None:
            self.path.write_text("")
        else:
            truncate_metrics(self.run_dir, resume_step)
        self._file = open(self.path, "a")
        self.mode = wandb_mode(wandb_enabled)
        self._wandb_run = None
        if self.mode != "disabled":
            self._wandb_run = self._start_wandb(config, name, group, project, entity, resume_step is not None)

    def _start_wandb(self, config, name, group, project, entity, resuming: bool):
        import wandb

        id_file = self.run_dir / WANDB_ID_FILE
        if resuming and id_file.exists():
            run_id = id_file.read_text().strip()
        else:
            run_id = secrets.token_hex(4)  # W&B run ids: lowercase letters and digits
            id_file.write_text(run_id)
        return wandb.init(
            project=project,
            entity=entity,
            name=name,
            group=group,
            config=config or {},
            dir=str(self.run_dir),
            mode=self.mode,
            id=run_id,
            resume="allow",
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )

    @property
    def wandb_dir(self) -> Path:
        return self.run_dir / "wandb"

    def log(self, metrics: dict, step: int) -> dict:
        """Append one record `{"step": step, **metrics}` and mirror it to W&B.
        Returns the record as written (plain JSON values)."""
        record = {"step": int(step)}
        record.update({key: _plain(value) for key, value in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._wandb_run is not None:
            self._wandb_run.log({k: v for k, v in record.items() if k != "step" and v is not None}, step=int(step))
        return record

    def close(self, *, exit_code: int = 0) -> None:
        if not self._file.closed:
            self._file.close()
        if self._wandb_run is not None:
            self._wandb_run.finish(exit_code=exit_code)
            self._wandb_run = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(exit_code=0 if exc_type is None else 1)
        return False


# ---------------------------------------------------------------------------------------
# Reading an offline W&B run back (for checks and for analysis without the W&B server).
# ---------------------------------------------------------------------------------------

_WANDB_HEADER_SIZE = 7  # b":W&B", 2-byte magic, 1-byte version
_BLOCK_SIZE = 32 * 1024  # the LevelDB log format W&B's transaction log uses
_RECORD_HEADER_SIZE = 7  # crc32 (4), length (2, little endian), type (1)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _wandb_log_payloads(path) -> list[bytes]:
    """The payloads of a `.wandb` transaction log (LevelDB log records, fragments joined)."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B transaction log (no ':W&B' header)")
    payloads, pending, offset = [], b"", _WANDB_HEADER_SIZE
    while offset + _RECORD_HEADER_SIZE <= len(data):
        left_in_block = _BLOCK_SIZE - offset % _BLOCK_SIZE
        if left_in_block < _RECORD_HEADER_SIZE:  # block trailer padding
            offset += left_in_block
            continue
        length = int.from_bytes(data[offset + 4:offset + 6], "little")
        kind = data[offset + 6]
        body = data[offset + _RECORD_HEADER_SIZE:offset + _RECORD_HEADER_SIZE + length]
        offset += _RECORD_HEADER_SIZE + length
        if kind == _FULL:
            payloads.append(body)
        elif kind == _FIRST:
            pending = body
        elif kind == _MIDDLE:
            pending += body
        elif kind == _LAST:
            payloads.append(pending + body)
            pending = b""
        elif kind == 0 and length == 0:
            offset += left_in_block - _RECORD_HEADER_SIZE  # zero padding to the block end
    return payloads


def read_wandb_history(wandb_file) -> list[dict]:
    """The history rows (`wandb.log` calls) of an offline W&B run file `run-<id>.wandb`,
    decoded with W&B's own protobuf schema: `[{"_step": N, "<key>": value, ...}, ...]`."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for payload in _wandb_log_payloads(wandb_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            row[key] = json.loads(item.value_json)
        rows.append(row)
    return rows
