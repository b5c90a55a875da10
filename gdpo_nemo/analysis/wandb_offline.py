"""Runs from W&B offline run files (``wandb/offline-run-*/run-<id>.wandb``).

The file format and its items are decoded by `gdpo_nemo.runs.tracking.iter_wandb_messages` and
`wandb_items` (the module that writes these runs, and the one decoder); read here: the ``run`` record (name, group, config), ``config``
updates, ``history`` records (one per logged step, ``_step`` among its items) and the
``exit`` record.

A run requeued or resubmitted by Slurm starts a new W&B run in the same ``wandb/`` folder at
every job (NeMo RL's logger has no W&B resume id): `chain_requeued_jobs` joins them into the
one run they are, as the run dir's metrics.jsonl does: each job continues from its
checkpoint, so a later job's steps replace the earlier jobs' records of those steps.
"""

from __future__ import annotations

from pathlib import Path

from gdpo_nemo.errors import UserError
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
            raise UserError(f"{path}: W&B run {name!r} (group {group!r}) has no gdpo run id in its config or name") from None
    return RunLog(run_id=run_id, source="wandb-offline", path=str(Path(path).parent), status=status,
                  config=config, rows=rows, priority=1)


def chain_requeued_jobs(logs: list[RunLog]) -> list[RunLog]:
    """`logs` with the W&B offline runs of one run id in one ``wandb/`` folder joined, in the
    order the jobs started (the ``offline-run-<YYYYmmdd_HHMMSS>-<id>`` folder names): the
    rows of a job before the first step the next job logged, then that job's rows; status
    and path of the last job. Other logs are returned as they are, in their order."""
    chains: dict[object, list[RunLog]] = {}  # insertion order: the order of each chain's first log
    for log in logs:
        joins = log.source == "wandb-offline" and bool(log.path)
        chains.setdefault((log.run_id, str(Path(log.path).parent)) if joins else id(log), []).append(log)
    return [_join_jobs(sorted(jobs, key=lambda log: Path(log.path).name)) if len(jobs) > 1 else jobs[0]
            for jobs in chains.values()]


def _join_jobs(jobs: list[RunLog]) -> RunLog:
    """One run's W&B offline runs, oldest job first, as one log (see `chain_requeued_jobs`)."""
    merged = jobs[0]
    for later in jobs[1:]:
        first = min(later.rows) if later.rows else None
        rows = {step: row for step, row in merged.rows.items() if first is None or step < first}
        rows.update(later.rows)
        merged = RunLog(run_id=later.run_id, source=later.source, path=later.path, status=later.status,
                        config=later.config or merged.config, rows=rows, priority=later.priority)
    return merged


def find_offline_runs(root: str | Path) -> list[Path]:
    """Every ``run-*.wandb`` file under `root` (sorted)."""
    return sorted(Path(root).rglob("run-*.wandb"))
