"""Run the math and code evaluations and write the files the analysis reads.

For each benchmark, writes (docs/analysis.md, "Eval files")::

    <run_dir>/eval/<benchmark>/step_<N>.json        {"run_id", "step", "benchmark", "samples",
                                                     "metrics": {...}, "problems": [...], ...}
    <run_dir>/eval/<benchmark>/step_<N>.responses.jsonl   every response with its scores

Math metrics: ``acc`` (pass@1 over k samples by math-verify), ``exceed`` (share of
responses over `exceed_limit` tokens). Code: ``pass`` (mean fraction of tests passed, the
pass reward), ``exceed``, ``bug`` (share of programs that did not run cleanly). Rows that
could not be read count as failed questions, and are listed under ``problems``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.evaluation import datasets, metrics
from gdpo_nemo.runs import rundir
from gdpo_nemo.tasks import TASKS
from gdpo_nemo.tasks.base import chat
from gdpo_nemo.tasks.prompts import CODE_SYSTEM_PROMPT, math_user_prompt

# The benchmarks of each task this runner evaluates: the task registry's (gdpo_nemo.tasks).
TASK_BENCHMARKS = {name: cls.benchmarks for name, cls in TASKS.items() if cls.evaluation == "runner"}


def check_benchmarks(task: str, benchmarks: list) -> list:
    """`benchmarks` if they are all benchmarks of `task` (math or code); else ValueError."""
    if task not in TASK_BENCHMARKS:
        raise UserError(f"--task {task!r}: this runner takes {', '.join(TASK_BENCHMARKS)} (toolcall: gdpo_nemo.evaluation.bfcl)")
    unknown = [b for b in benchmarks if b not in TASK_BENCHMARKS[task]]
    if unknown:
        raise UserError(f"--benchmarks {unknown}: not {task} benchmarks; accepted: {', '.join(TASK_BENCHMARKS[task])}")
    return list(benchmarks)


def benchmark_file(data_dir: Path, name: str) -> Path:
    """`<data_dir>/<name>.jsonl`, or `.json` when only that exists."""
    for suffix in datasets.FORMATS:
        candidate = Path(data_dir) / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    return Path(data_dir) / f"{name}.jsonl"


def _write(out_dir: Path, bench_name: str, step: int, payload: dict, responses: list) -> Path:
    target = rundir.eval_file(out_dir, bench_name, step)
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    # An earlier evaluation of this step is kept (replaced/<time>/), never overwritten.
    for earlier in (target, folder / f"step_{step}.responses.jsonl"):
        rundir.keep_earlier(earlier)
    with open(folder / f"step_{step}.responses.jsonl", "w") as handle:
        for row in responses:
            handle.write(json.dumps(row) + "\n")
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(target)  # the analysis never sees half a file
    return target


def _generation_error(response) -> dict:
    """A response that was not generated (its prompt filled the model's context) says why."""
    error = getattr(response, "error", None)
    return {"generation_error": error} if error else {}


def _responses(bench: datasets.Benchmark, backend, prompt_of, *, samples: int, max_new_tokens: int,
               temperature: float, top_p: float, progress=None) -> list:
    """[(item, response)] of every readable item's `samples` responses, item by item."""
    readable = [item for item in bench.items if item.error is None]
    if not readable:
        return []
    generated = backend.generate([prompt_of(item) for item in readable], samples=samples,
                                 max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                 progress=progress)
    return [(item, response) for item, responses in zip(readable, generated) for response in responses]


def _per_item(bench: datasets.Benchmark, flat: list, values: list) -> list:
    """[values of item's responses] for every item of the benchmark ([] for unreadable ones)."""
    by_index: dict = {}
    for (item, _), value in zip(flat, values):
        by_index.setdefault(item.index, []).append(value)
    return [by_index.get(item.index, []) for item in bench.items]


def _error_rows(bench: datasets.Benchmark) -> list:
    return [{"index": item.index, "error": item.error} for item in bench.items if item.error]


def evaluate_math(bench: datasets.Benchmark, backend, *, samples: int, max_new_tokens: int, temperature: float,
                  top_p: float, exceed_limit: int, progress=None, verifier=None) -> tuple[dict, list]:
    """(metrics, response rows) of one math benchmark; every response is judged in one batch."""
    from gdpo_nemo.rewards.math_rewards import score_batch

    flat = _responses(bench, backend, lambda item: chat(None, math_user_prompt(item.question)), samples=samples,
                      max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, progress=progress)
    correct = score_batch([r.text for _, r in flat], [item.reference for item, _ in flat], components=["correctness"],
                          verifier=verifier)[0]["correctness"] if flat else []
    rows = [{"index": item.index, "answer": item.reference, "response": response.text,
             "num_tokens": response.num_tokens, "truncated": response.truncated, "correct": value,
             **_generation_error(response)} for (item, response), value in zip(flat, correct)]
    lengths, truncated = [r.num_tokens for _, r in flat], [r.truncated for _, r in flat]
    return ({"acc": metrics.pass_at_1(_per_item(bench, flat, correct)),
             "exceed": metrics.exceed_share(lengths, exceed_limit, truncated)}, rows + _error_rows(bench))


def evaluate_code(bench: datasets.Benchmark, backend, *, samples: int, max_new_tokens: int, temperature: float,
                  top_p: float, exceed_limit: int, progress=None) -> tuple[dict, list]:
    """(metrics, response rows) of one code benchmark; every program runs in the sandbox."""
    from gdpo_nemo.rewards.code import score_code_batch

    flat = _responses(bench, backend, lambda item: chat(CODE_SYSTEM_PROMPT, item.question), samples=samples,
                      max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, progress=progress)
    scores = score_code_batch([r.text for _, r in flat], [item.reference for item, _ in flat],
                              components=["pass", "bug"]) if flat else {"pass": [], "bug": []}
    rows = [{"index": item.index, "response": response.text, "num_tokens": response.num_tokens,
             "truncated": response.truncated, "pass": p, "bug": b, **_generation_error(response)}
            for (item, response), p, b in zip(flat, scores["pass"], scores["bug"])]
    # an unreadable problem is a failed program per sample
    bug_free = list(scores["bug"]) + [0.0] * samples * sum(1 for item in bench.items if item.error)
    lengths, truncated = [r.num_tokens for _, r in flat], [r.truncated for _, r in flat]
    return ({"pass": metrics.mean_pass_fraction(_per_item(bench, flat, scores["pass"])),
             "exceed": metrics.exceed_share(lengths, exceed_limit, truncated),
             "bug": metrics.bug_ratio(bug_free)}, rows + _error_rows(bench))


def run_benchmarks(task: str, benchmarks: list, backend, *, data_dir: Path, out_dir: Path, run_id: str | None,
                   step: int, samples: int, max_new_tokens: int, temperature: float, top_p: float,
                   exceed_limit: int, files: dict | None = None, log=print) -> dict:
    """Evaluate each benchmark; a missing file is reported and skipped (the others still
    run). Returns {benchmark: metrics or {"error": message}}."""
    from tqdm import tqdm

    check_benchmarks(task, benchmarks)
    results = {}
    for name in benchmarks:
        path = Path((files or {}).get(name) or benchmark_file(data_dir, name))
        try:
            bench = (datasets.load_math if task == "math" else datasets.load_code)(name, path)
        except (FileNotFoundError, ValueError) as err:
            log(f"eval {name}: skipped: {err}")
            results[name] = {"error": str(err)}
            continue
        for problem in bench.problems:
            log(f"eval {name}: unreadable row counted as failed: {problem}")
        started = time.perf_counter()
        with tqdm(total=sum(item.error is None for item in bench.items), desc=f"eval {name}", unit="q") as bar:
            evaluate = evaluate_math if task == "math" else evaluate_code
            values, rows = evaluate(bench, backend, samples=samples, max_new_tokens=max_new_tokens,
                                    temperature=temperature, top_p=top_p, exceed_limit=exceed_limit, progress=bar.update)
        payload = {"run_id": run_id, "step": step, "benchmark": name, "samples": samples, "metrics": values,
                   "questions": len(bench.items), "unreadable_rows": len(bench.problems), "problems": bench.problems,
                   "file": str(path), "exceed_limit": exceed_limit, "max_new_tokens": max_new_tokens,
                   "temperature": temperature, "top_p": top_p, "seconds": round(time.perf_counter() - started, 2)}
        if run_id is None:
            del payload["run_id"]
        target = _write(out_dir, name, step, payload, rows)
        log(f"eval {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in values.items()) + f" -> {target}")
        results[name] = values
    return results
