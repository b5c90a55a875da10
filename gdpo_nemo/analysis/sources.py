"""Loaders for logs on disk: run dirs of either engine, NeMo RL log dirs, W&B offline files.

`load_directory(root)` finds everything under `root`:

- run dirs (docs/interfaces.md): a folder with ``metrics.jsonl`` and/or ``config.yaml``;
  ``DONE`` marks a finished run. The run id comes from the config's ``gdpo`` block and
  ``grpo.seed``, else from the folder name (``RunId.parse``).
- NeMo RL log dirs (its ``logger.log_dir``): TensorBoard event files under
  ``tensorboard/`` (tags are the metric keys, e.g. ``train/reward``) and per-step
  ``train_data_step<N>.jsonl`` files (one row per rollout; the per-step mean of their
  ``rewards`` and ``reward/<name>`` columns become ``train/reward`` and
  ``train/reward/<name>`` where TensorBoard lacks them). The run id comes from the nearest
  ``config.yaml`` at or above the log dir, else from a folder name on the way up.
- W&B offline run files (``run-*.wandb``), read only where no metrics.jsonl of the same run
  dir exists (they hold the same numbers).
- eval files and BFCL score folders (`gdpo_nemo.analysis.evals`).

When one run has several of these, they merge: metrics.jsonl wins a (step, metric) it
shares with the others.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.analysis import evals
from gdpo_nemo.analysis.frame import RunLog, to_number
from gdpo_nemo.analysis.tfevents import read_scalars
from gdpo_nemo.analysis.wandb_offline import chain_requeued_jobs, find_offline_runs, read_offline_run
from gdpo_nemo.runs import provenance, rundir
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.runs import metric_names as mn

_TRAIN_DATA = re.compile(r"^train_data_step(\d+)\.jsonl$")
_SKIP_DIRS = {*rundir.NON_RUN_DIRS, ".git", "__pycache__"}


def _read_config(path: Path, problems: list) -> dict:
    try:
        return rundir.read_config_file(path)
    except ValueError as err:  # names the file already
        problems.append(("", "unreadable_config", str(err)))
    except OSError as err:
        problems.append(("", "unreadable_config", f"{path}: {err}"))
    return {}


def _identify(folder: Path, config: dict) -> RunId | None:
    """The run id of `folder`: from its config, else its own or a parent folder's name."""
    try:
        return RunId.from_config(config)
    except (KeyError, TypeError, ValueError):
        pass
    for candidate in (folder, *folder.parents):
        try:
            return RunId.parse(candidate.name)
        except ValueError:
            continue
    return None


def read_metrics_jsonl(path: Path, log: RunLog, problems: list) -> None:
    """Add every row of a ``metrics.jsonl`` to `log` (`rundir.read_metrics_file`, the one
    reader of the format); bad lines become problems."""
    bad_lines: list = []
    for row in rundir.read_metrics_file(path, bad_lines):
        step = int(row.pop("step"))
        for metric, value in row.items():
            log.add(step, metric, value)
    for number, reason in bad_lines:
        problems.append((log.run_id.name, "unreadable_line", f"{path}:{number}: {reason}"))


def read_run_dir(folder: Path, problems: list) -> list[RunLog]:
    """The logs of one run dir (metrics.jsonl, else its W&B offline file, plus NeMo RL logs)."""
    config_path = rundir.config_path(folder)
    config = _read_config(config_path, problems) if config_path.exists() else {}
    run_id = _identify(folder, config)
    if run_id is None:
        problems.append(("", "no_run_id", f"{folder}: run dir without a gdpo run id in config.yaml or its name; skipped"))
        return []
    status = rundir.status(folder)
    try:
        records = provenance.read(folder)
    except ValueError as err:
        records = None
        problems.append((run_id.name, "unreadable_provenance", str(err)))
    logs = []
    metrics_path = rundir.metrics_path(folder)
    if metrics_path.exists():
        log = RunLog(run_id=run_id, source="rundir", path=str(folder), status=status, config=config, priority=2)
        read_metrics_jsonl(metrics_path, log, problems)
        logs.append(log)
    else:
        for wandb_file in find_offline_runs(rundir.wandb_dir(folder)):
            logs += _read_offline(wandb_file, problems, config=config, status=status, folder=folder)
        logs = chain_requeued_jobs(logs)
        if not logs:
            logs.append(RunLog(run_id=run_id, source="rundir", path=str(folder), status=status, config=config, priority=2))
            if not config_path.exists():
                problems.append((run_id.name, "no_metrics", f"{folder}: no metrics.jsonl, config.yaml or W&B file"))
    for log in logs:
        log.provenance, log.expects_provenance = records, True
    return logs


def _read_offline(path: Path, problems: list, *, config=None, status=None, folder=None) -> list[RunLog]:
    """One W&B offline file; inside a run dir, the run dir's config, DONE and path win."""
    try:
        log = read_offline_run(path)
    except Exception as err:  # a torn or foreign file must not stop the whole report
        problems.append(("", "unreadable_wandb", f"{path}: {err}"))
        return []
    if config:
        log.config = config
    if status == "finished":
        log.status = status
    if folder is not None:
        log.path = str(folder)
    return [log]


def read_nemo_log_dir(folder: Path, run_id: RunId, problems: list) -> list[RunLog]:
    """A NeMo RL log dir: TensorBoard scalars (priority 1) and train-data means (priority 0)."""
    logs = []
    events = sorted(folder.rglob("events.out.tfevents.*"))
    if events:
        log = RunLog(run_id=run_id, source="tensorboard", path=str(folder), priority=1)
        for event_file in events:
            try:
                for step, tag, value in read_scalars(event_file):
                    log.add(step, tag, value)
            except (OSError, ValueError, IndexError, KeyError) as err:
                problems.append((run_id.name, "unreadable_tensorboard", f"{event_file}: {err}"))
        logs.append(log)
    train_files = [p for p in folder.glob("train_data_step*.jsonl") if _TRAIN_DATA.match(p.name)]
    if train_files:
        log = RunLog(run_id=run_id, source="nemo-jsonl", path=str(folder), priority=0)
        for path in train_files:
            step = int(_TRAIN_DATA.match(path.name).group(1))
            for metric, value in _train_data_means(path, run_id, problems).items():
                log.add(step, metric, value)
        logs.append(log)
    return logs


def _train_data_means(path: Path, run_id: RunId, problems: list) -> dict[str, float]:
    """Per-step means of the reward columns of one ``train_data_step<N>.jsonl``."""
    sums: dict[str, list[float]] = {}
    bad = 0
    with path.open() as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                bad += 1
                continue
            for key, value in row.items():
                if key in ("rewards", mn.REWARD):
                    metric = mn.train(mn.reward())
                elif mn.component(key, mn.REWARD) is not None:
                    metric = mn.train(key)
                else:
                    continue
                number = to_number(value)
                if number is None:
                    bad += 1
                else:
                    sums.setdefault(metric, []).append(number)
    if bad:
        problems.append((run_id.name, "non_numeric", f"{path}: {bad} unreadable row(s) or reward value(s) left out of the means"))
    return {metric: sum(values) / len(values) for metric, values in sums.items()}


def _is_nemo_log_dir(folder: Path) -> bool:
    return (folder / rundir.TENSORBOARD_DIR).is_dir() or any(_TRAIN_DATA.match(p.name) for p in folder.glob("train_data_step*.jsonl"))


def load_directory(root: str | Path, problems: list) -> list[RunLog]:
    """Every run log under `root` (see the module docstring); problems are appended."""
    root = Path(root)
    if not root.exists():
        raise UserError(f"source {str(root)!r} does not exist (expected a folder of run dirs, or wandb:ENTITY/PROJECT)")
    logs: list[RunLog] = []
    run_dirs: dict[Path, RunId | None] = {}
    covered_wandb: set[Path] = set()
    for folder in _walk(root):
        if rundir.is_run_dir(folder):
            found = read_run_dir(folder, problems)
            logs += found
            run_dirs[folder] = found[0].run_id if found else None
            covered_wandb.update(p.resolve() for p in find_offline_runs(rundir.wandb_dir(folder)))
    for folder in _walk(root):
        if _is_nemo_log_dir(folder):
            owner = next((p for p in (folder, *folder.parents) if p in run_dirs), None)
            run_id = run_dirs.get(owner) if owner else None
            if run_id is None:
                config_dir = next((p for p in (folder, *folder.parents) if rundir.config_path(p).exists()), None)
                config = _read_config(rundir.config_path(config_dir), problems) if config_dir else {}
                run_id = _identify(folder, config)
            if run_id is None:
                problems.append(("", "no_run_id", f"{folder}: NeMo RL log dir without a run id (no config.yaml above it, no run-id folder name); skipped"))
                continue
            logs += read_nemo_log_dir(folder, run_id, problems)
    loose = []
    for wandb_file in find_offline_runs(root):
        if wandb_file.resolve() not in covered_wandb:
            loose += _read_offline(wandb_file, problems)
    logs += chain_requeued_jobs(loose)
    for path in evals.find_eval_files(root):
        owner = path.parent.parent.parent
        log = evals.read_eval_file(path, run_dirs.get(owner) or _identify(owner, {}), problems)
        if log:
            logs.append(log)
    for score_dir in evals.find_bfcl_score_dirs(root):
        owner = score_dir.parent.parent.parent.parent
        run_id = run_dirs.get(owner) or _identify(owner, {}) or evals.bfcl_summary_run_id(score_dir)
        if run_id is None:
            problems.append(("", "no_run_id", f"{score_dir}: BFCL scores outside a run dir and no run_id in"
                             f" {score_dir.parent.name}.json next to them; skipped"))
            continue
        log = evals.read_bfcl_score_dir(score_dir, run_id, problems)
        if log:
            logs.append(log)
    return logs


def _walk(root: Path):
    """`root` and its folders, not descending into checkpoints/, wandb/ or eval/."""
    stack = [root]
    while stack:
        folder = stack.pop()
        yield folder
        try:
            children = sorted((p for p in folder.iterdir() if p.is_dir() and p.name not in _SKIP_DIRS), reverse=True)
        except OSError:
            continue
        stack += children
