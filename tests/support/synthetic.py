"""Run dirs and datasets with known numbers, in the documented formats.

For the analysis tests (hand-checkable values in the exact on-disk layout of
docs/interfaces.md and docs/analysis.md, named by gdpo_nemo.runs.rundir) and for
benchmarks/bench_report.py (a large dataset straight into the parquet cache). Nothing here
is used by the report itself, so it lives with the tests, not in the package.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from gdpo_nemo.analysis.frame import RUN_COLUMNS, Dataset, PROBLEM_COLUMNS, _compact, run_metadata
from gdpo_nemo.runs import rundir
from gdpo_nemo.runs.run_id import RunId


def run_config(run_id: RunId, *, components=("format", "correctness"), max_steps: int | None = None,
               conditioned_length: bool = False, reward_weights: dict | None = None, estimator: str | None = None) -> dict:
    """A minimal resolved run config: the gdpo block and grpo.seed/max_num_steps."""
    config = {
        "grpo": {"seed": run_id.seed},
        "gdpo": {"experiment": run_id.experiment, "task": run_id.task, "model_tag": run_id.model, "algo": run_id.algo,
                 "estimator": estimator or run_id.algo, "reward_components": list(components),
                 "reward_weights": reward_weights, "conditioned_length": conditioned_length},
    }
    if max_steps is not None:
        config["grpo"]["max_num_steps"] = max_steps
    return config


def write_run_dir(root: Path, run_id: RunId, rows: list[dict], *, config: dict | None = None, done: bool = True) -> Path:
    """A run dir at ``root/<run name>``: config.yaml, metrics.jsonl (`rows`, each with "step"), DONE."""
    folder = Path(root) / run_id.name
    folder.mkdir(parents=True, exist_ok=True)
    rundir.write_config(folder, config if config is not None else run_config(run_id))
    with rundir.metrics_path(folder).open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    if done:
        rundir.mark_done(folder)
    return folder


def write_eval(run_dir: Path, run_id: RunId, benchmark: str, step: int, metrics: dict, samples: int = 1) -> Path:
    """One eval file ``<run_dir>/eval/<benchmark>/step_<step>.json`` (docs/analysis.md format)."""
    path = rundir.eval_file(run_dir, benchmark, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id.name, "step": step, "benchmark": benchmark,
                                "samples": samples, "metrics": metrics}))
    return path


def synthetic_dataset(num_runs: int = 60, steps: int = 500, num_metrics: int = 40, *, seed: int = 0) -> Dataset:
    """A dataset of `num_runs` runs x `steps` steps x `num_metrics` metrics (random walks).

    Runs are split over 3 tasks (gsm8k, toolcall, math) x 2 algos (grpo, gdpo) x seeds; metrics
    are ``train/reward``, ``train/reward/<c>`` for the task's components,
    ``train/adv/distinct_groups`` and filler ``train/extra_<i>`` up to `num_metrics`, plus one
    eval value per run and benchmark at the last step so every table has cells.
    """
    rng = np.random.default_rng(seed)
    tasks = {"gsm8k": ("format", "correctness", "integer"), "toolcall": ("format", "correctness"), "math": ("correctness", "length")}
    evals = {"gsm8k": {}, "toolcall": {"bfcl": ("live", "non_live", "multi_turn", "correct_format")},
             "math": {b: ("acc", "exceed") for b in ("math", "aime", "amc", "minerva", "olympiad")}}
    combos = [(t, a) for t in tasks for a in ("grpo", "gdpo")]
    parts, run_rows = [], []
    for index in range(num_runs):
        task, algo = combos[index % len(combos)]
        run_id = RunId("bench", task, "qwen2.5-1.5b", algo, index // len(combos))
        names = ["train/reward"] + [f"train/reward/{c}" for c in tasks[task]] + ["train/adv/distinct_groups"]
        names += [f"train/extra_{i}" for i in range(num_metrics - len(names))]
        walk = np.cumsum(rng.normal(0, 0.02, size=(steps, len(names))), axis=0) + 0.5
        step_col = np.repeat(np.arange(1, steps + 1), len(names))
        frame = pd.DataFrame({"step": step_col, "metric": np.tile(names, steps), "value": walk.reshape(-1)})
        extra = [(steps, f"eval/{b}/{m}", float(rng.uniform(0.1, 0.9))) for b, ms in evals[task].items() for m in ms]
        if extra:
            frame = pd.concat([frame, pd.DataFrame(extra, columns=["step", "metric", "value"])], ignore_index=True)
        for column, value in (("run_id", run_id.name), ("experiment", run_id.experiment), ("task", task),
                              ("model", run_id.model), ("algo", algo), ("seed", run_id.seed)):
            frame[column] = value
        parts.append(frame)
        meta = run_metadata(run_id, run_config(run_id, components=tasks[task], max_steps=steps))
        run_rows.append({"run_id": run_id.name, "experiment": "bench", "task": task, "model": run_id.model, "algo": algo,
                         "seed": run_id.seed, "source": "synthetic", "path": "", "status": "finished",
                         "last_step": steps, **meta})
    metrics = pd.concat(parts, ignore_index=True)[["run_id", "experiment", "task", "model", "algo", "seed", "step", "metric", "value"]]
    return Dataset(_compact(metrics), pd.DataFrame(run_rows, columns=RUN_COLUMNS), pd.DataFrame(columns=PROBLEM_COLUMNS))
