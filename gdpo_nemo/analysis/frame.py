"""The tidy frame every loader produces, and the per-run table beside it.

One row per logged number::

    run_id  experiment  task  model  algo  seed  step  metric  value

plus one row per run in a second frame (`RUN_COLUMNS`): where it came from, whether it
finished, how far it got, and the config facts the tables select on (estimator, reward
components, conditioned length, length weight). Loaders never drop a bad input silently:
every value they cannot use and every run they cannot place becomes a row of the
problems frame (`PROBLEM_COLUMNS`), which the report prints.

Loaders build a `RunLog` per run and hand the list to `assemble`, which validates
(non-numeric values, duplicate run ids, repeated steps) and returns a `Dataset`.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gdpo_nemo.errors import UserError
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.runs import metric_names as mn

METRIC_COLUMNS = ["run_id", "experiment", "task", "model", "algo", "seed", "step", "metric", "value"]
RUN_COLUMNS = [
    "run_id", "experiment", "task", "model", "algo", "seed",
    "source", "path", "status", "last_step", "max_steps",
    "estimator", "reward_components", "num_rewards", "conditioned_length", "length_weight",
]
PROBLEM_COLUMNS = ["run_id", "kind", "detail"]

# Run status: "finished" (DONE file, W&B state finished, or a clean exit record), "crashed"
# (W&B state crashed/failed or a non-zero exit code), "unfinished" (no sign of an end: still
# running or killed), "unknown" (the source cannot tell, e.g. an eval-only directory).
STATUSES = ("finished", "crashed", "unfinished", "unknown")

_WLEN = re.compile(r"_wlen([0-9]*\.?[0-9]+)$")


@dataclass
class RunLog:
    """What a loader read for one run, before validation.

    `rows` maps step -> {metric: raw value}; raw values may be anything a log file holds
    (numbers, numeric strings, None, lists, text): `assemble` sorts them out.
    `config` is the resolved run config (or the part of it the source has), used for run
    metadata. `priority` breaks ties when two sources of the same run log the same
    (step, metric): the higher one wins (metrics.jsonl over TensorBoard over derived).
    """

    run_id: RunId
    source: str
    path: str = ""
    status: str = "unknown"
    config: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)
    priority: int = 0
    # The run dir's provenance.json invocations (runs/provenance.py); None when it has none.
    provenance: list | None = None
    # True for logs read from one of our run dirs, which always write provenance.json.
    expects_provenance: bool = False

    def add(self, step: int, metric: str, value) -> None:
        """Record one raw value of `metric` at `step` (a later add overwrites an earlier one)."""
        self.rows.setdefault(int(step), {})[metric] = value


@dataclass
class Dataset:
    """The loaded runs: tidy `metrics`, one row per run in `runs`, and every `problems` row."""

    metrics: pd.DataFrame
    runs: pd.DataFrame
    problems: pd.DataFrame

    def __len__(self) -> int:
        return len(self.runs)

    def select(self, **where) -> "Dataset":
        """The runs whose run columns equal the given values (e.g. ``task="gsm8k"``)."""
        mask = pd.Series(True, index=self.runs.index)
        for column, value in where.items():
            if column not in self.runs.columns:
                raise UserError(f"select: unknown run column {column!r}; expected one of {RUN_COLUMNS}")
            mask &= self.runs[column] == value
        keep = set(self.runs.loc[mask, "run_id"])
        return Dataset(
            self.metrics[self.metrics["run_id"].isin(keep)].reset_index(drop=True),
            self.runs[mask].reset_index(drop=True),
            self.problems[self.problems["run_id"].isin(keep) | (self.problems["run_id"] == "")].reset_index(drop=True),
        )


def _empty_metrics() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype="object") for c in METRIC_COLUMNS})
    return frame.astype({"seed": "int64", "step": "int64", "value": "float64"})


def to_number(value) -> float | None:
    """`value` as a float, or None when it is not a number.

    Accepts ints, floats, numpy scalars, bools (as 0/1), one-element lists and numeric
    strings ("0.5", "nan"); NaN and +-inf pass through as floats (a NaN logged by a run is a
    number the run produced; the tables skip it and say so). Everything else (text, dicts,
    lists of several values, None) is not a number.
    """
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, np.ndarray) and value.size == 1:
        return to_number(value.reshape(-1)[0].item())
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return to_number(value[0])
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip("%")) / (100.0 if value.strip().endswith("%") else 1.0)
        except ValueError:
            return None
    return None


def run_metadata(run_id: RunId, config: dict) -> dict:
    """Run-table columns derived from the run id and its resolved config.

    `estimator` falls back to the algo label without a ``_wlen<w>`` suffix; `length_weight`
    is ``gdpo.reward_weights.length`` (1.0 when the run has a length reward and no weight,
    NaN when it has none), else the number after ``_wlen`` in the algo label.
    """
    gdpo = config.get("gdpo", {}) if isinstance(config, dict) else {}
    components = gdpo.get("reward_components") or []
    if isinstance(components, str):
        components = [components]
    estimator = gdpo.get("estimator") or _WLEN.sub("", run_id.algo)
    weights = gdpo.get("reward_weights") or {}
    wlen_match = _WLEN.search(run_id.algo)
    if isinstance(weights, dict) and "length" in weights:
        length_weight = to_number(weights["length"])
    elif wlen_match:
        length_weight = float(wlen_match.group(1))
    elif "length" in components:
        length_weight = 1.0
    else:
        length_weight = math.nan
    grpo = config.get("grpo") if isinstance(config, dict) else None
    max_steps = to_number(grpo.get("max_num_steps")) if isinstance(grpo, dict) else None
    return {
        "estimator": str(estimator),
        "reward_components": ",".join(str(c) for c in components),
        "num_rewards": len(components),
        "conditioned_length": bool(gdpo.get("conditioned_length", False)),
        "length_weight": math.nan if length_weight is None else float(length_weight),
        "max_steps": math.nan if max_steps is None else max_steps,
    }


def assemble(logs: list[RunLog], problems: list[tuple[str, str, str]] | None = None) -> Dataset:
    """Validate the loaders' `RunLog`s into one `Dataset`.

    - Non-numeric values are left out of `metrics` and each (run, metric) with any becomes a
      ``non_numeric`` problem naming the count, the first step and the offending value.
    - Several logs of one run id from the same source kind are merged (resumed runs); from
      different sources they are merged too, the higher `priority` winning a (step, metric)
      both logged. Two logs of one run id from *different run dirs/files* are duplicates:
      the one with more logged steps is kept (ties: the first) and the others become
      ``duplicate_run_id`` problems, never averaged in as extra seeds.
    """
    problem_rows = list(problems or [])
    by_id: dict[str, list[RunLog]] = {}
    for log in logs:
        by_id.setdefault(log.run_id.name, []).append(log)

    metric_parts: list[pd.DataFrame] = []
    run_rows: list[dict] = []
    for name, group in by_id.items():
        group = _drop_duplicate_paths(name, group, problem_rows)
        run_id = group[0].run_id
        merged: dict[tuple[int, str], tuple[int, float]] = {}
        bad: dict[str, list] = {}
        for log in group:
            for step, values in log.rows.items():
                for metric, raw in values.items():
                    number = to_number(raw)
                    if number is None:
                        bad.setdefault(metric, []).append((step, raw))
                        continue
                    key = (step, metric)
                    if key not in merged or merged[key][0] <= log.priority:
                        merged[key] = (log.priority, number)
        for metric, items in sorted(bad.items()):
            step, raw = items[0]
            problem_rows.append((name, "non_numeric", f"{metric}: {len(items)} non-numeric value(s) left out, first at step {step}: {raw!r:.60}"))
        config: dict = {}
        for log in sorted(group, key=lambda g: g.priority):
            config = _deep_merge(config, log.config)
        status = _merge_status(group)
        meta = run_metadata(run_id, config)
        if not meta["reward_components"]:
            # Config left the task's default set implicit: name the components the run logged.
            logged = mn.components((m for (_, m) in merged), mn.train(mn.REWARD))
            meta["reward_components"], meta["num_rewards"] = ",".join(logged), len(logged)
        steps = [step for (step, metric) in merged if not metric.startswith("eval/")]
        run_rows.append({
            "run_id": name, "experiment": run_id.experiment, "task": run_id.task, "model": run_id.model,
            "algo": run_id.algo, "seed": run_id.seed,
            "source": "+".join(sorted({g.source for g in group})), "path": group[0].path,
            "status": status, "last_step": max(steps) if steps else -1, **meta,
        })
        if merged:
            keys = list(merged)
            metric_parts.append(pd.DataFrame({
                "run_id": name, "experiment": run_id.experiment, "task": run_id.task, "model": run_id.model,
                "algo": run_id.algo, "seed": run_id.seed,
                "step": np.fromiter((k[0] for k in keys), dtype=np.int64, count=len(keys)),
                "metric": [k[1] for k in keys],
                "value": np.fromiter((merged[k][1] for k in keys), dtype=np.float64, count=len(keys)),
            }))
    problem_rows += provenance_problems([group[0].run_id for group in by_id.values()],
                                        [next((g.provenance for g in group if g.provenance), None) for group in by_id.values()],
                                        [any(g.expects_provenance for g in group) for group in by_id.values()])
    metrics = pd.concat(metric_parts, ignore_index=True) if metric_parts else _empty_metrics()
    metrics = metrics.sort_values(["run_id", "metric", "step"], kind="stable").reset_index(drop=True)
    runs = pd.DataFrame(run_rows, columns=RUN_COLUMNS)
    if not runs.empty:
        runs = runs.sort_values("run_id", kind="stable").reset_index(drop=True)
    problems_frame = pd.DataFrame(problem_rows, columns=PROBLEM_COLUMNS)
    return Dataset(_compact(metrics), runs, problems_frame)


def provenance_problems(run_ids: list[RunId], records: list, expected: list[bool]) -> list[tuple[str, str, str]]:
    """Problem rows for runs whose numbers may not be comparable (runs/provenance.py):

    - ``no_provenance``: a run dir without provenance.json (made by an older release, or
      the file was lost) in a table whose other runs have one: what its numbers depend on
      is unknown (a table of such runs only is not flagged run by run);
    - ``provenance_changed``: a run resumed under other code, libraries or numerics than it
      started with, or from other starting weights;
    - ``provenance_mismatch``: the runs of one table (experiment, task, model) differ in
      code, libraries or numerics, or did not start from the same base model; or the runs
      of one seed (the pairs the paired comparison subtracts) from different weights.
    """
    from gdpo_nemo.runs import provenance

    rows: list[tuple[str, str, str]] = []
    firsts: dict[tuple, list[tuple[RunId, dict]]] = {}
    known = {(r.experiment, r.task, r.model) for r, invocations in zip(run_ids, records) if invocations}
    for run_id, invocations, expects in zip(run_ids, records, expected):
        if not invocations:
            if expects and (run_id.experiment, run_id.task, run_id.model) in known:
                rows.append((run_id.name, "no_provenance", "its run dir has no provenance.json, unlike the runs it is"
                             " compared with: the code, libraries, numerics and starting weights of its numbers are"
                             " not known"))
            continue
        fields = (*provenance.NUMBER_FIELDS, "start_weights")
        changed = provenance.differences(invocations, [f"invocation {i + 1}" for i in range(len(invocations))], fields)
        if changed:
            rows.append((run_id.name, "provenance_changed", "resumed under other numbers than it started with: "
                         + "; ".join(changed)))
        firsts.setdefault((run_id.experiment, run_id.task, run_id.model), []).append((run_id, invocations[0]))
    for (experiment, task, model), runs in sorted(firsts.items()):
        names = [run_id.name for run_id, _ in runs]
        table = f"{experiment}/{task}/{model}"
        lines = provenance.differences([record for _, record in runs], names, provenance.NUMBER_FIELDS)
        # One base model for the table, unless its weights are drawn from the seed (builtin:tiny).
        by_base: dict = {}
        for run_id, record in runs:
            by_base.setdefault((record.get("start_weights") or {}).get("base_seed"), []).append((run_id, record))
        for group in by_base.values():
            lines += provenance.differences([record for _, record in group], [r.name for r, _ in group],
                                            ("start_weights.base_digest",))
        if lines:
            rows.append(("", "provenance_mismatch", f"runs of {table} differ in what changes numbers: " + "; ".join(lines)))
        by_seed: dict[int, list] = {}
        for run_id, record in runs:
            by_seed.setdefault(run_id.seed, []).append((run_id, record))
        for seed, pair in sorted(by_seed.items()):
            lines = provenance.differences([record for _, record in pair], [r.name for r, _ in pair],
                                           ("start_weights.digest",))
            if lines:
                rows.append(("", "provenance_mismatch", f"runs of {table} seed {seed} did not start from the same"
                             " weights: " + "; ".join(lines)))
    return rows


def _drop_duplicate_paths(name: str, group: list[RunLog], problem_rows: list) -> list[RunLog]:
    """Keep the logs of one run id that share the best log's path; report the rest."""
    paths: dict[str, list[RunLog]] = {}
    for log in group:
        paths.setdefault(log.path, []).append(log)
    if len(paths) == 1:
        return group

    def size(logs: list[RunLog]) -> int:
        return max(len(log.rows) for log in logs)

    ordered = sorted(paths.items(), key=lambda item: -size(item[1]))  # stable: ties keep the first
    kept_path, kept = ordered[0]
    for path, logs in ordered[1:]:
        problem_rows.append((name, "duplicate_run_id", f"{path} ({size(logs)} steps) has the same run id as {kept_path} ({size(kept)} steps); kept the latter"))
    return kept


def _merge_status(logs: list[RunLog]) -> str:
    """The state of a run logged by several sources or jobs: that of the log(s) reaching its
    last step (a requeued job's later run decides, not the job killed before it); among
    those, crashed, then finished, then unfinished."""
    def last_step(log: RunLog) -> int:
        return max(log.rows, default=-1)

    final = max(last_step(log) for log in logs)
    statuses = [log.status for log in logs if last_step(log) == final]
    for status in ("crashed", "finished", "unfinished"):
        if status in statuses:
            return status
    return "unknown"


def _deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _compact(metrics: pd.DataFrame) -> pd.DataFrame:
    """Categorical string columns: a 1M-row frame loads and groups several times faster."""
    for column in ("run_id", "experiment", "task", "model", "algo", "metric"):
        metrics[column] = metrics[column].astype("category")
    metrics["seed"] = metrics["seed"].astype("int64")
    return metrics
