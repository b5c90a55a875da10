"""Evaluation results: our eval files and BFCL score folders (docs/analysis.md, "Eval files").

Our format, one JSON file per (run, benchmark, checkpoint step)::

    <run_dir>/eval/<benchmark>/step_<N>.json
    {"run_id": "<experiment>__<task>__<model>__<algo>__seed<S>", "step": N,
     "benchmark": "aime", "samples": 16,
     "metrics": {"acc": 0.294, "exceed": 0.065}}

Metric values are fractions in [0, 1] (the tables print percent). Names the tables read:
math ``acc`` (pass@1 averaged over the k = ``samples`` responses per question) and
``exceed`` (share of responses longer than the length limit); code ``pass``, ``exceed``,
``bug`` (share of programs with a compile or runtime error); BFCL ``correct_format``.
Each lands in the tidy frame as metric ``eval/<benchmark>/<name>`` at step N.

BFCL: ``bfcl evaluate`` (package ``bfcl-eval``) run with its project root at
``<run_dir>/eval/bfcl/step_<N>/`` writes ``score/data_live.csv``, ``data_non_live.csv``,
``data_multi_turn.csv`` (columns "Live Overall Acc", "Non_Live Overall Acc",
"Multi Turn Overall Acc"; cells like "55.36%" or "N/A") and per category
``score/<model>/**/BFCL_v3_<category>_score.json`` whose first line is
``{"accuracy": a, "correct_count": c, "total_count": t}``. They become
``eval/bfcl/{live,non_live,multi_turn}`` and ``eval/bfcl/category/<category>``.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from gdpo_nemo.analysis.frame import RunLog, to_number
from gdpo_nemo.runs import rundir
from gdpo_nemo.runs.run_id import RunId

EVAL_FILE = re.compile(r"^step_(\d+)\.json$")
BFCL_OVERALL = {
    "data_live.csv": ("Live Overall Acc", "live"),
    "data_non_live.csv": ("Non_Live Overall Acc", "non_live"),
    "data_multi_turn.csv": ("Multi Turn Overall Acc", "multi_turn"),
}
_BFCL_CATEGORY = re.compile(r"^BFCL_v\d+_(.+)_score\.json$")


def find_eval_files(root: Path) -> list[Path]:
    """Every ``eval/<benchmark>/step_<N>.json`` under `root`."""
    return sorted(p for p in root.rglob("step_*.json") if p.parent.parent.name == rundir.EVAL_DIR and EVAL_FILE.match(p.name))


def find_bfcl_score_dirs(root: Path) -> list[Path]:
    """Every ``eval/bfcl/step_<N>/score`` folder under `root`."""
    return sorted(p for p in root.rglob("score") if p.is_dir() and rundir.STEP_DIR.match(p.parent.name)
                  and p.parent.parent.name == "bfcl" and p.parent.parent.parent.name == rundir.EVAL_DIR)


def read_eval_file(path: Path, default_run: RunId | None, problems: list) -> RunLog | None:
    """One eval JSON file as a `RunLog` with ``eval/<benchmark>/<name>`` rows at its step.

    The run is the file's ``run_id`` field, else `default_run` (the enclosing run dir).
    Unreadable files and missing fields become problems (returns None).
    """
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        problems.append(("", "unreadable_eval", f"{path}: {err}"))
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("metrics"), dict):
        problems.append(("", "unreadable_eval", f"{path}: expected an object with a 'metrics' object"))
        return None
    try:
        run_id = RunId.parse(payload["run_id"]) if payload.get("run_id") else default_run
    except ValueError as err:
        problems.append(("", "unreadable_eval", f"{path}: {err}"))
        return None
    if run_id is None:
        problems.append(("", "unreadable_eval", f"{path}: no 'run_id' field and not inside a run dir"))
        return None
    if default_run is not None and run_id != default_run:
        problems.append((run_id.name, "eval_run_mismatch", f"{path} says run_id {run_id.name} but lies in run dir {default_run.name}; filed under {run_id.name}"))
    step_match = EVAL_FILE.match(path.name)
    step = payload.get("step", int(step_match.group(1)))
    benchmark = payload.get("benchmark") or path.parent.name
    log = RunLog(run_id=run_id, source="eval", path=str(path.parent.parent.parent), priority=3)
    for name, value in payload["metrics"].items():
        log.add(int(step), f"eval/{benchmark}/{name}", value)
    if "samples" in payload:
        log.add(int(step), f"eval/{benchmark}/samples", payload["samples"])
    return log


def bfcl_summary_run_id(score_dir: Path) -> RunId | None:
    """The ``run_id`` that `gdpo-nemo eval` recorded next to a BFCL score folder
    (``eval/bfcl/step_<N>.json``), for BFCL results outside a run dir (a base model)."""
    summary = score_dir.parent.parent / f"{score_dir.parent.name}.json"
    try:
        name = json.loads(summary.read_text()).get("run_id")
        return RunId.parse(name) if name else None
    except (OSError, ValueError, AttributeError):
        return None


def read_bfcl_score_dir(score_dir: Path, run_id: RunId, problems: list) -> RunLog | None:
    """A BFCL ``score/`` folder (one model) as ``eval/bfcl/*`` rows at its step."""
    step = int(rundir.STEP_DIR.match(score_dir.parent.name).group(1))
    log = RunLog(run_id=run_id, source="eval", path=str(score_dir.parent.parent.parent.parent), priority=3)
    for filename, (column, metric) in BFCL_OVERALL.items():
        path = score_dir / filename
        if not path.exists():
            problems.append((run_id.name, "missing_bfcl_file", f"{path} is missing: no eval/bfcl/{metric} at step {step}"))
            continue
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        if len(rows) != 1 or column not in rows[0]:
            problems.append((run_id.name, "unreadable_eval", f"{path}: expected one model row with column {column!r}, found {len(rows)} row(s)"))
            continue
        log.add(step, f"eval/bfcl/{metric}", rows[0][column])
    for path in sorted(score_dir.rglob("*_score.json")):
        match = _BFCL_CATEGORY.match(path.name)
        if not match:
            continue
        try:
            first = json.loads(path.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError) as err:
            problems.append((run_id.name, "unreadable_eval", f"{path}: {err}"))
            continue
        if isinstance(first, dict) and to_number(first.get("accuracy")) is not None:
            log.add(step, f"eval/bfcl/category/{match.group(1)}", first["accuracy"])
    return log if log.rows else None
