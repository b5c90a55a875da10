"""Runs from W&B offline run files (``wandb/offline-run-*/run-<id>.wandb``).

The file format is decoded by `gdpo_nemo.tracking.iter_wandb_records` (the module that
writes these runs); read here: the ``run`` record (name, group, config), ``config``
updates, ``history`` records (one per logged step, ``_step`` among its items) and the
``exit`` record.
"""

from __future__ import annotations

import json
from pathlib import Path

from gdpo_nemo.analysis.frame import RunLog
from gdpo_nemo.run_id import RunId
from gdpo_nemo.tracking import iter_wandb_records

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
    for raw in iter_wandb_records(path):
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
