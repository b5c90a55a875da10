"""BFCL-v3 evaluation: our model answers, `bfcl-eval` runs the benchmark and scores it.

`bfcl-eval` 2025.7.17 (the last release that ships BFCL_v3 data; docs/eval.md, "BFCL-v3")
pins numpy 1.26 and a dozen API clients, so it lives in its own virtualenv
(`.venv-bfcl`, made by scripts/setup_bfcl.sh; or set ``GDPO_BFCL_PYTHON``). This module, in
the training environment, starts `bfcl_worker.py` there and serves its model queries with a
generation backend (HF or vLLM) over a pair of pipes: bfcl-eval's own inference loop (with
our handler, which renders our tool-calling prompt and decodes our ``<tool_call>`` output)
drives single-turn and multi-turn entries alike, executing multi-turn calls against its
simulated APIs, and its own evaluator scores them. Everything lands in the run dir::

    <run_dir>/eval/bfcl/step_<N>/result/gdpo-nemo/BFCL_v3_<category>_result.json   bfcl-eval's result files
    <run_dir>/eval/bfcl/step_<N>/score/...        its score files and data_{overall,live,non_live,multi_turn}.csv
    <run_dir>/eval/bfcl/step_<N>/worker.log       bfcl-eval's console output
    <run_dir>/eval/bfcl/step_<N>.json             {"metrics": {"correct_format"}, "overall", "categories", ...}

`gdpo_nemo.analysis` reads the CSVs (Live, Non-Live, Multi-Turn overall) and the JSON.
"""

from __future__ import annotations

import csv
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.evaluation import bfcl_format, metrics
from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.runs import rundir

MODEL = "gdpo-nemo"
NON_LIVE = ("simple", "multiple", "parallel", "parallel_multiple", "java", "javascript", "irrelevance")
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance", "live_relevance")
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
CATEGORIES = NON_LIVE + LIVE + MULTI_TURN
GROUPS = {"all": CATEGORIES, "non_live": NON_LIVE, "live": LIVE, "multi_turn": MULTI_TURN,
          "single_turn": NON_LIVE + LIVE}
# the leaderboard CSVs' overall columns (as gdpo_nemo.analysis.evals reads them)
OVERALL_COLUMNS = {"live": ("data_live.csv", "Live Overall Acc"),
                   "non_live": ("data_non_live.csv", "Non_Live Overall Acc"),
                   "multi_turn": ("data_multi_turn.csv", "Multi Turn Overall Acc")}
# the worker may be silent this long (scoring a full BFCL run) before it counts as hung
WORKER_SILENCE_S = 1800


def bfcl_python() -> Path:
    """The interpreter of the bfcl-eval virtualenv."""
    given = os.environ.get("GDPO_BFCL_PYTHON")
    path = Path(given) if given else REPO_ROOT / ".venv-bfcl" / "bin" / "python"
    if not path.exists():
        raise UserError(f"BFCL needs the bfcl-eval virtualenv, not found at {path}: run `bash scripts/setup.sh --all` (or scripts/setup_bfcl.sh)"
                         " (or set GDPO_BFCL_PYTHON to a Python with bfcl-eval==2025.7.17)")
    return path


def data_dir(python: Path | None = None) -> Path:
    """bfcl-eval's shipped data folder (BFCL_v3_*.json), found without importing the package."""
    code = ("import importlib.util, os; s = importlib.util.find_spec('bfcl_eval');"
            " print(os.path.join(list(s.submodule_search_locations)[0], 'data') if s else '')")
    out = subprocess.run([str(python or bfcl_python()), "-c", code], capture_output=True, text=True, timeout=60)
    folder = Path(out.stdout.strip()) if out.stdout.strip() else None
    if folder is None or not (folder / "BFCL_v3_simple.json").is_file():
        raise UserError(f"the bfcl-eval environment has no BFCL_v3 data ({out.stderr.strip()[-300:]});"
                         " install bfcl-eval==2025.7.17, the last release that ships v3")
    return folder


def check_categories(categories) -> list:
    """BFCL v3 category names (or the groups all, live, non_live, multi_turn, single_turn)
    expanded and checked; default: all of them."""
    chosen: list = []
    for name in categories or ["all"]:
        if name not in GROUPS and name not in CATEGORIES:
            raise UserError(f"unknown BFCL v3 categories [{name!r}]; accepted: {', '.join(CATEGORIES)}, or the groups"
                             f" {', '.join(GROUPS)}")
        chosen += [c for c in GROUPS.get(name, (name,)) if c not in chosen]
    return chosen


def check_ids(ids) -> list:
    """Entry ids (e.g. simple_0, live_simple_0-0-0, multi_turn_base_3) whose category exists."""
    bad = [i for i in ids if i.rsplit("_", 1)[0] not in CATEGORIES]
    if bad:
        raise UserError(f"--ids {bad}: not BFCL v3 entry ids; an id is <category>_<index> with a category of"
                         f" {', '.join(CATEGORIES)}")
    return list(dict.fromkeys(ids))


class _Worker:
    """The bfcl-eval process and its two pipes."""

    def __init__(self, python: Path, project: Path, args: list):
        requests_read, requests_write = os.pipe()  # worker -> us
        replies_read, replies_write = os.pipe()  # us -> worker
        self.log_path = project / "worker.log"
        env = dict(os.environ, BFCL_PROJECT_ROOT=str(project), PYTHONPATH="")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [str(python), str(Path(__file__).with_name("bfcl_worker.py")), "--repo", str(REPO_ROOT),
                 "--project-root", str(project), *args, "--request-fd", str(requests_write), "--reply-fd", str(replies_read)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                pass_fds=(requests_write, replies_read))
        os.close(requests_write)
        os.close(replies_read)
        self.requests = os.fdopen(requests_read, "r")
        self.replies = os.fdopen(replies_write, "w")

    def receive(self) -> dict | None:
        """The worker's next message, or None when it has closed its end (exited)."""
        ready, _, _ = select.select([self.requests], [], [], WORKER_SILENCE_S)
        if not ready:
            self.process.kill()
            raise RuntimeError(f"bfcl-eval's worker said nothing for {WORKER_SILENCE_S} s and was stopped; "
                               f"its log: {self.log_path}")
        line = self.requests.readline()
        return json.loads(line) if line else None

    def reply(self, message: dict) -> None:
        self.replies.write(json.dumps(message) + "\n")
        self.replies.flush()

    def failure(self) -> str:
        code = self.process.wait()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        return f"bfcl-eval's worker ended (exit {code}) before finishing; the end of {self.log_path}:\n{tail}"

    def close(self) -> None:
        for handle in (self.requests, self.replies):
            try:
                handle.close()
            except OSError:
                pass
        try:  # after "done" it only has to exit; after a failure its pipes are gone too
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _serve(worker: _Worker, backend, *, max_new_tokens: int, temperature: float) -> dict:
    """Answer the worker's queries until it is done; its per-category summary."""
    from tqdm import tqdm

    bar = None
    try:
        while True:
            message = worker.receive()
            if message is None:
                raise RuntimeError(worker.failure())
            kind = message.get("type")
            if kind == "error":
                raise UserError(message["message"])
            if kind == "start":
                bar = tqdm(total=message["total"], desc="bfcl " + " ".join(message["categories"])[:60], unit="entry")
            elif kind == "generate":
                if bar is not None:
                    bar.update(message["finished"] - bar.n)
                responses = backend.generate(message["prompts"], samples=1, max_new_tokens=max_new_tokens,
                                             temperature=temperature, top_p=1.0)
                worker.reply({"responses": [vars(r) for (r,) in responses]})
            elif kind == "done":
                if bar is not None:
                    bar.update(bar.total - bar.n)
                return message["categories"]
            else:
                raise RuntimeError(f"bfcl-eval's worker sent an unknown message {kind!r}")
    except BrokenPipeError:
        raise RuntimeError(worker.failure()) from None
    finally:
        if bar is not None:
            bar.close()


def read_overall(score_dir: Path) -> dict:
    """Live, Non-Live and Multi-Turn overall accuracy (fractions) from bfcl-eval's CSVs, and
    their mean, the paper's Avg Acc; None where a file or cell is missing or N/A."""
    overall = {}
    for name, (filename, column) in OVERALL_COLUMNS.items():
        value = None
        path = score_dir / filename
        if path.is_file():
            with path.open(newline="") as handle:
                rows = list(csv.DictReader(handle))
            cell = rows[0].get(column, "") if len(rows) == 1 else ""
            if cell.endswith("%"):
                value = float(cell[:-1]) / 100
        overall[name] = value
    parts = [overall[k] for k in ("live", "non_live", "multi_turn")]
    overall["avg_acc"] = None if None in parts else metrics.bfcl_average(*parts)
    return overall


def format_share(result_dir: Path, categories: list) -> float:
    """Correct Format: the share of all responses of the result files in the expected shape
    (bfcl_format.format_flags)."""
    flags = []
    for category in categories:
        path = result_dir / f"BFCL_v3_{category}_result.json"
        for line in path.read_text().splitlines() if path.is_file() else []:
            if line.strip():
                flags += bfcl_format.format_flags(category, json.loads(line).get("result"))
    return sum(flags) / len(flags) if flags else 0.0


def run_bfcl(backend, *, categories=None, ids=None, out_dir: Path, run_id: str | None, step: int,
             limit: int | None = None, max_new_tokens: int = 1024, temperature: float = 0.0, threads: int = 8,
             log=print) -> dict:
    """Generate, score and write one checkpoint's BFCL results (module docstring).

    categories: category names or groups (`check_categories`); ids: exact entry ids instead;
    limit: the first N entries of each category; threads: entries in flight, whose queries
    make one generation batch. Returns {"bfcl": metrics}."""
    ids = check_ids(ids) if ids else None
    categories = check_categories(None if ids else categories)
    python = bfcl_python()
    target = rundir.eval_file(out_dir, "bfcl", step)
    project = target.with_suffix("")  # eval/bfcl/step_<N>/: bfcl-eval's own project folder
    # a fresh evaluation of this step: no stale category scores or summary survive it
    shutil.rmtree(project, ignore_errors=True)
    target.unlink(missing_ok=True)
    project.mkdir(parents=True)
    args = ["--threads", str(threads)] + (["--ids", *ids] if ids else ["--categories", *categories])
    if limit and not ids:
        args += ["--limit", str(limit)]
    started = time.perf_counter()
    worker = _Worker(python, project, args)
    try:
        per_category = _serve(worker, backend, max_new_tokens=max_new_tokens, temperature=temperature)
    except ValueError:  # bad input: nothing was evaluated
        worker.close()
        shutil.rmtree(project, ignore_errors=True)
        raise
    except BaseException:
        # keep worker.log for the post-mortem; no half-written scores for the analysis to read
        worker.close()
        for partial in ("result", "score"):
            shutil.rmtree(project / partial, ignore_errors=True)
        raise
    worker.close()
    ran = list(per_category)
    overall = read_overall(project / "score")
    result_metrics = {"correct_format": format_share(project / "result" / MODEL, ran)}
    complete = ids is None and limit is None and set(ran) == set(CATEGORIES)
    payload = {"run_id": run_id, "step": step, "benchmark": "bfcl", "samples": 1, "metrics": result_metrics,
               # bfcl-eval's overall columns count a category that did not run as 0: they are the
               # paper's numbers only when every category ran in full ("complete")
               "overall": overall, "complete": complete, "categories": per_category, "limit": limit, "ids": ids,
               "max_new_tokens": max_new_tokens, "temperature": temperature,
               "seconds": round(time.perf_counter() - started, 2), "score_dir": str(project / "score")}
    if run_id is None:
        del payload["run_id"]
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(target)
    if not complete:
        log("bfcl: a sample (--limit, --ids or some categories): bfcl-eval's overall columns count what did not"
            " run as 0 and are not comparable with the paper")

    def pct(value):
        return "N/A" if value is None else f"{100 * value:.2f}"

    log(f"bfcl: Live {pct(overall['live'])}, Non-Live {pct(overall['non_live'])}, Multi-Turn"
        f" {pct(overall['multi_turn'])}, Avg Acc {pct(overall['avg_acc'])}, Correct Format"
        f" {pct(result_metrics['correct_format'])}; "
        + ", ".join(f"{c} {v['accuracy']:.3f} ({v['total_count']})" for c, v in per_category.items()) + f" -> {target}")
    return {"bfcl": result_metrics}
