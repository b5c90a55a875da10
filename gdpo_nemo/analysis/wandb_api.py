"""Runs from a W&B server through its public API (``wandb.Api``).

The public calls used, and nothing else (tests replace them with a small fake, since no
W&B server is reachable from the test machines):

- ``wandb.Api(timeout=...)``
- ``api.runs(path="ENTITY/PROJECT", filters={...})`` -> iterable of runs
- ``run.name``, ``run.group``, ``run.config`` (dict), ``run.state``
  ("finished", "running", "crashed", "failed", "killed")
- ``run.scan_history(page_size=...)`` -> every logged row as a dict with ``_step``

Filters: ``group`` selects one W&B group (a run id without the seed), ``experiment`` the
runs whose config has ``gdpo.experiment`` equal to it (``{"config.gdpo.experiment": ...}``),
and `extra_filters` adds raw MongoDB-style W&B filters.
"""

from __future__ import annotations

from gdpo_nemo.errors import UserError
from gdpo_nemo.analysis.frame import RunLog
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.runs.tracking import wandb_server_problem

_STATES = {"finished": "finished", "running": "unfinished", "crashed": "crashed", "failed": "crashed", "killed": "crashed"}


def wandb_filters(group: str | None = None, experiment: str | None = None, extra_filters: dict | None = None) -> dict:
    """The W&B ``filters`` dict for the given selection (empty: every run of the project)."""
    filters: dict = dict(extra_filters or {})
    if group:
        filters["group"] = group
    if experiment:
        filters["config.gdpo.experiment"] = experiment
    return filters


API_TIMEOUT_S = 10  # seconds per request to the W&B server


def load_wandb(path: str, problems: list, *, filters: dict | None = None, progress: bool = True, api=None) -> list[RunLog]:
    """Download every matching run of ``ENTITY/PROJECT`` `path` as `RunLog`s, with a progress bar.

    Runs whose config and name give no gdpo run id become ``no_run_id`` problems.
    """
    from tqdm import tqdm

    if path.count("/") != 1 or not all(path.split("/")):
        raise UserError(f"W&B source {path!r}: expected ENTITY/PROJECT")
    try:
        if api is None:
            problem = wandb_server_problem(API_TIMEOUT_S)
            if problem:
                raise ConnectionError(problem)
            import wandb

            api = wandb.Api(timeout=API_TIMEOUT_S)
        runs = list(api.runs(path=path, filters=filters or {}))
    except Exception as err:  # no key (UsageError), no network (CommError, timeouts), no such project
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"W&B source wandb:{path}: cannot list its runs ({reason[:300]}). Set WANDB_API_KEY and check the "
            "network, or read the runs from their run dirs (--source DIR: metrics.jsonl and offline W&B files)"
        ) from None
    logs = []
    for run in tqdm(runs, desc=f"downloading W&B runs of {path}", unit="run", disable=not progress):
        config = dict(run.config or {})
        try:
            run_id = RunId.from_config(config)
        except (KeyError, TypeError, ValueError):
            try:
                run_id = RunId.parse(run.name)
            except ValueError:
                problems.append(("", "no_run_id", f"W&B run {run.name!r} (group {run.group!r}) in {path}: no gdpo run id in its config or name; skipped"))
                continue
        log = RunLog(run_id=run_id, source="wandb", path=f"wandb:{path}/{run.name}",
                     status=_STATES.get(run.state, "unknown"), config=config, priority=1)
        next_step = 0
        for row in run.scan_history(page_size=1000):
            step = row.get("_step", next_step)
            next_step = int(step) + 1
            for key, value in row.items():
                if not key.startswith("_") and value is not None:
                    log.add(int(step), key, value)
        logs.append(log)
    return logs
