"""BFCL-v3 evaluation: our generation, `bfcl-eval`'s data and evaluator.

`bfcl-eval` 2025.7.17 (the last release that ships BFCL_v3 data, shared/REFERENCE.md
section 6) pins numpy 1.26 and a dozen API clients, so it lives in its own virtualenv
(`.venv-bfcl`, made by scripts/setup_bfcl.sh; or set ``GDPO_BFCL_PYTHON``). This module,
in the training environment, reads the v3 entries from that package's data folder,
generates one greedy response per entry in our tool-calling prompt (bfcl_format), writes
them in BFCL's result format and runs `bfcl_check.py` there, which scores them with
bfcl-eval's own checkers. Everything lands in the run dir::

    <run_dir>/eval/bfcl/step_<N>/result/gdpo-nemo/BFCL_v3_<category>_result.json
    <run_dir>/eval/bfcl/step_<N>/score/...        bfcl-eval's score files and CSVs
    <run_dir>/eval/bfcl/step_<N>.json             {"metrics": {"correct_format", ...}}

`gdpo_nemo.analysis` reads the CSVs (Live, Non-Live, Multi-Turn overall) and the JSON.

Categories: the Python single-turn ones (AST: simple, multiple, parallel,
parallel_multiple and their live_ versions; relevance: irrelevance, live_irrelevance,
live_relevance). Multi-turn categories need the model to act on executed tool results
turn by turn; that loop is not built yet, so they are refused by name and Multi-Turn
(and hence the paper's Avg Acc) stays N/A (docs/eval.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from gdpo_nemo.evaluation import bfcl_format

REPO = Path(__file__).resolve().parents[2]
MODEL = "gdpo-nemo"
NON_LIVE = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance", "live_relevance")
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
CATEGORIES = NON_LIVE + LIVE


def bfcl_python() -> Path:
    """The interpreter of the bfcl-eval virtualenv."""
    given = os.environ.get("GDPO_BFCL_PYTHON")
    path = Path(given) if given else REPO / ".venv-bfcl" / "bin" / "python"
    if not path.exists():
        raise ValueError(f"BFCL needs the bfcl-eval virtualenv, not found at {path}: run `bash scripts/setup_bfcl.sh`"
                         " (or set GDPO_BFCL_PYTHON to a Python with bfcl-eval==2025.7.17)")
    return path


def data_dir(python: Path | None = None) -> Path:
    """bfcl-eval's shipped data folder (BFCL_v3_*.json), found without importing the package."""
    code = ("import importlib.util, os; s = importlib.util.find_spec('bfcl_eval');"
            " print(os.path.join(list(s.submodule_search_locations)[0], 'data') if s else '')")
    out = subprocess.run([str(python or bfcl_python()), "-c", code], capture_output=True, text=True, timeout=60)
    folder = Path(out.stdout.strip()) if out.stdout.strip() else None
    if folder is None or not (folder / "BFCL_v3_simple.json").is_file():
        raise ValueError(f"the bfcl-eval environment has no BFCL_v3 data ({out.stderr.strip()[-300:]});"
                         " install bfcl-eval==2025.7.17, the last release that ships v3")
    return folder


def load_entries(category: str, limit: int | None = None, folder: Path | None = None) -> list:
    path = (folder or data_dir()) / f"BFCL_v3_{category}.json"
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return entries[:limit] if limit else entries


def check_categories(categories) -> list:
    categories = list(categories or CATEGORIES)
    multi = [c for c in categories if c in MULTI_TURN]
    if multi:
        raise ValueError(f"BFCL multi-turn categories {multi} are not supported yet (the turn-by-turn execution"
                         f" loop is not built); accepted: {', '.join(CATEGORIES)}")
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown BFCL v3 categories {unknown}; accepted: {', '.join(CATEGORIES)}")
    return categories


def score(project: Path, categories: list, python: Path | None = None) -> dict:
    """Run bfcl-eval's evaluator on the result files under `project`; {category: accuracy, count}."""
    env = dict(os.environ, BFCL_PROJECT_ROOT=str(project), PYTHONPATH="")
    done = subprocess.run([str(python or bfcl_python()), str(Path(__file__).with_name("bfcl_check.py")),
                           "--repo", str(REPO), "--project-root", str(project), "--categories", *categories],
                          capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"bfcl-eval's evaluator failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_bfcl(backend, *, categories, out_dir: Path, run_id: str | None, step: int, limit: int | None = None,
             max_new_tokens: int = 1024, temperature: float = 0.0, log=print) -> dict:
    """Generate, score and write one checkpoint's BFCL results (module docstring)."""
    from tqdm import tqdm

    categories = check_categories(categories)
    python = bfcl_python()
    folder = data_dir(python)
    project = Path(out_dir) / "eval" / "bfcl" / f"step_{step}"
    results_dir = project / "result" / MODEL
    results_dir.mkdir(parents=True, exist_ok=True)
    formats = []
    for category in categories:
        entries = load_entries(category, limit, folder)
        with tqdm(total=len(entries), desc=f"bfcl {category}", unit="q") as bar:
            responses = backend.generate([bfcl_format.entry_messages(e) for e in entries], samples=1,
                                         max_new_tokens=max_new_tokens, temperature=temperature, top_p=1.0,
                                         progress=bar.update)
        with open(results_dir / f"BFCL_v3_{category}_result.json", "w") as handle:
            for entry, (response,) in zip(entries, responses):
                handle.write(json.dumps({"id": entry["id"], "result": response.text,
                                         "output_token_count": response.num_tokens}) + "\n")
                formats.append(bfcl_format.correct_format(response.text, category))
    per_category = score(project, categories, python)
    metrics = {"correct_format": sum(formats) / len(formats) if formats else 0.0}
    # per-category accuracies reach the analysis from bfcl-eval's own score files
    payload = {"run_id": run_id, "step": step, "benchmark": "bfcl", "samples": 1, "metrics": metrics,
               "categories": per_category, "limit": limit, "max_new_tokens": max_new_tokens,
               # bfcl-eval's overall columns count a category not run as 0: they are the
               # paper's numbers only when every category ran in full
               "complete": limit is None and set(categories) == set(CATEGORIES),
               "score_dir": str(project / "score")}
    if run_id is None:
        del payload["run_id"]
    target = Path(out_dir) / "eval" / "bfcl" / f"step_{step}.json"
    target.write_text(json.dumps(payload, indent=1))
    if not payload["complete"]:
        log("bfcl: a sample (--limit or a subset of categories): bfcl-eval's Live / Non-Live overall columns"
            " count the categories not run as 0 and are not comparable with the paper")
    log(f"bfcl: correct format {metrics['correct_format']:.3f}; "
        + ", ".join(f"{c} {v['accuracy']:.3f} ({v['total_count']})" for c, v in per_category.items()) + f" -> {target}")
    return {"bfcl": metrics}

