"""One entry point from a source string to a `Dataset`, cached as parquet.

Sources: ``wandb:ENTITY/PROJECT`` (the W&B public API) or a folder (run dirs, NeMo RL log
dirs, W&B offline files, eval results: `gdpo_nemo.analysis.sources`). Several sources may
be given; their runs are validated together (a run id found in two places is a duplicate).

The cache holds ``metrics.parquet``, ``runs.parquet`` and ``problems.parquet`` per
(source, selection). A folder's cache is keyed by the size and modification time of every
file under it, so it is rebuilt whenever a log changes; a W&B download is reused until
``refresh=True`` (the server cannot be fingerprinted without downloading).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pandas as pd

from gdpo_nemo.errors import UserError
from gdpo_nemo.analysis.frame import PROBLEM_COLUMNS, Dataset, _compact, assemble
from gdpo_nemo.runs import rundir

CACHE_VERSION = 1
DEFAULT_CACHE = Path(".cache") / "analysis"


def _fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != rundir.CHECKPOINTS_DIR)  # weights: large, never read
        for name in sorted(files):
            path = Path(folder, name)
            try:
                stat = path.stat()
            except OSError:
                continue
            digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cache_key(sources: list[str], selection: dict) -> str:
    """The cache folder name of `sources` with `selection` (folders fingerprinted by content)."""
    parts = [CACHE_VERSION, selection]
    for source in sources:
        if source.startswith("wandb:"):
            parts.append(source)
        else:
            parts.append([str(Path(source).resolve()), _fingerprint(Path(source))])
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def save_cache(dataset: Dataset, folder: Path) -> None:
    """Write `dataset` as three parquet files into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    dataset.metrics.to_parquet(folder / "metrics.parquet", index=False)
    dataset.runs.to_parquet(folder / "runs.parquet", index=False)
    dataset.problems.astype(str).to_parquet(folder / "problems.parquet", index=False)


def read_cache(folder: Path) -> Dataset:
    """The dataset `save_cache` wrote into `folder`."""
    metrics = pd.read_parquet(folder / "metrics.parquet")
    runs = pd.read_parquet(folder / "runs.parquet")
    problems = pd.read_parquet(folder / "problems.parquet")
    return Dataset(_compact(metrics), runs, problems.reindex(columns=PROBLEM_COLUMNS))


def load_source(
    source: str | list[str],
    *,
    experiment: str | None = None,
    group: str | None = None,
    cache_dir: str | Path | None = DEFAULT_CACHE,
    refresh: bool = False,
    progress: bool = True,
    wandb_api=None,
) -> Dataset:
    """Load one or several sources into a validated `Dataset` (see the module docstring).

    `experiment` keeps runs of that experiment only (for W&B it filters the download);
    `group` keeps one W&B group / run id without its seed. `cache_dir=None` disables the
    cache. Raises ValueError naming a source that does not exist or is malformed.
    """
    from gdpo_nemo.analysis.sources import load_directory
    from gdpo_nemo.analysis.wandb_api import load_wandb, wandb_filters

    sources = [source] if isinstance(source, (str, Path)) else list(source)
    sources = [str(s) for s in sources]
    if not sources:
        raise UserError("no source given: expected wandb:ENTITY/PROJECT or a folder")
    for s in sources:
        if not s.startswith("wandb:") and not Path(s).exists():
            raise UserError(f"source {s!r} does not exist (expected a folder of run dirs, or wandb:ENTITY/PROJECT)")
    selection = {"experiment": experiment, "group": group}
    folder = None
    if cache_dir is not None:
        folder = Path(cache_dir) / cache_key(sources, selection)
        if not refresh and (folder / "runs.parquet").exists():
            return read_cache(folder)
    problems: list = []
    logs = []
    for s in sources:
        if s.startswith("wandb:"):
            filters = wandb_filters(group=group, experiment=experiment)
            logs += load_wandb(s[len("wandb:"):], problems, filters=filters, progress=progress, api=wandb_api)
        else:
            logs += load_directory(s, problems)
    if experiment:
        logs = [log for log in logs if log.run_id.experiment == experiment]
    if group:
        logs = [log for log in logs if log.run_id.group == group]
    if not logs:
        problems.append(("", "empty_source", f"no runs found in {', '.join(sources)}"
                         + (f" for experiment {experiment!r}" if experiment else "")
                         + (f" in group {group!r}" if group else "")))
    dataset = assemble(logs, problems)
    if folder is not None and not dataset.runs.empty:  # nothing found: nothing written, no cache either
        save_cache(dataset, folder)
    return dataset
