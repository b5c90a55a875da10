"""Runs from W&B offline run files (``wandb/offline-run-*/run-<id>.wandb``).

The file format and its items are decoded by `gdpo_nemo.runs.tracking.iter_wandb_messages` and
`wandb_items` (the module that writes these runs, and the one decoder); read here: the ``run`` record (name, group, config), ``config``
updates, ``history`` records (one per logged step, ``_step`` among its items) and the
``exit`` record.
"""

from __future__ import annotations

from pathlib import Path

from gdpo_nemo.analysis.frame import RunLog
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.runs.tracking import iter_wandb_messages, wandb_items


def read_offline_run(path: str | Path) -> RunLog:
    """One offline run file as a `RunLog` (status from its exit record).

    The run id comes from the config's ``gdpo`` block and ``grpo.seed`` when present, else
    from the W&B run name (``RunId.parse``); ValueError when neither names a run.
    """
    name, group = "", ""
    config: dict = {}
    rows: dict[int, dict] = {}
    status = "unfinished"
    next_step = 0
    for record in iter_wandb_messages(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            name = record.run.display_name or name
            group = record.run.run_group or group
            config.update(wandb_items(record.run.config.update))
        elif kind == "config":
            config.update(wandb_items(record.config.update))
        elif kind == "history":
            values = wandb_items(record.history.item)
            step = int(values["_step"]) if "_step" in values else (
                record.history.step.num if record.history.HasField("step") else next_step)
            next_step = step + 1
            row = rows.setdefault(step, {})
            row.update({key: value for key, value in values.items() if not key.startswith("_")})
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
