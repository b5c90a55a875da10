"""`gdpo-nemo eval`: evaluate a model or a training checkpoint on the paper's benchmarks.

    gdpo-nemo eval --task {toolcall,math,code} --model PATH_OR_NAME [--benchmarks ...]
        [--samples K] [--backend hf|vllm] [--data-dir data/eval] [--file NAME=PATH ...]
        [--out RUN_DIR] [--run-id ID] [--step N] [--max-new-tokens T] [--exceed-limit L]
        [--limit N] [--ids ID ...]                                  (BFCL)

Defaults are the paper's evaluation settings (docs/eval.md, the options table): 16 samples per
question, temperature 0.6, top_p 0.95, 32k new tokens, Exceed over 4,000 tokens; BFCL is
greedy with one sample (every category, single- and multi-turn). On a CPU pass smaller
values. Results go to `<RUN_DIR>/eval/<benchmark>/step_<N>.json` (docs/eval.md), which
`gdpo-nemo report` reads.
When `--model` is a local-engine checkpoint `<run_dir>/checkpoints/step_<N>`, RUN_DIR and
N default to that run and step. The work is gdpo_nemo.evaluation; this module reads and
checks the flags.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.commands.args import FAILED, key_value, report_error
from gdpo_nemo.tasks import TASKS

PAPER_DEFAULTS = {"samples": 16, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 32768, "exceed_limit": 4000}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `eval` flags (cheap: imports nothing heavy)."""
    parser.add_argument("--task", required=True, choices=[name for name, task in TASKS.items() if task.evaluation])
    parser.add_argument("--model", required=True, help="builtin:smollm2-135m, a checkpoint dir, or a hub name")
    parser.add_argument("--benchmarks", nargs="+", default=None,
                        help="math: math aime amc minerva olympiad; code: apps codecontests codeforces taco;"
                             " toolcall: BFCL v3 categories or the groups all, live, non_live, multi_turn"
                             " (default: all of the task's)")
    parser.add_argument("--samples", type=int, default=None, help="responses per question (default 16; BFCL 1)")
    parser.add_argument("--backend", default="hf", choices=("hf", "vllm"), help="generation backend")
    parser.add_argument("--data-dir", default="data/eval", help="where <benchmark>.jsonl files are (default data/eval)")
    parser.add_argument("--file", action="append", default=[], metavar="NAME=PATH", help="a benchmark's file")
    parser.add_argument("--limit", type=int, default=None, help="BFCL: first N entries per category")
    parser.add_argument("--ids", nargs="+", default=None,
                        help="BFCL: exactly these entries (e.g. simple_0 live_simple_0-0-0 multi_turn_base_3)")
    parser.add_argument("--out", default=None, help="run dir the eval/ folder goes in (default: the checkpoint's run)")
    parser.add_argument("--run-id", default=None, help="run id to record (default: the run dir's)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step to record (default: the checkpoint's, else 0)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help=f"token limit per response (default {PAPER_DEFAULTS['max_new_tokens']}, the paper's; BFCL 1024)")
    parser.add_argument("--temperature", type=float, default=None,
                        help=f"sampling temperature (default {PAPER_DEFAULTS['temperature']}, the paper's)")
    parser.add_argument("--top-p", type=float, default=None, help=f"nucleus sampling (default {PAPER_DEFAULTS['top_p']}, the paper's)")
    parser.add_argument("--exceed-limit", type=int, default=PAPER_DEFAULTS["exceed_limit"],
                        help="responses longer than this many tokens count as exceeding (the paper's Exceed)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the model runs")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="sequences decoded together (hf backend); BFCL: also the entries in flight")


def _files(pairs: list) -> dict:
    """`--file NAME=PATH` arguments -> {benchmark name: path}."""
    return dict(key_value(pair, flag="--file", form="NAME=PATH", example="aime=data/aime24.jsonl") for pair in pairs)


def _run_id(out: Path, given: str | None) -> str | None:
    if given:
        return given
    from gdpo_nemo.runs import rundir
    from gdpo_nemo.runs.run_id import RunId

    try:
        config = rundir.read_config(out)
        return RunId.from_config(config).name if config is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def _unreadable_rows(out: Path, benchmark: str, step: int) -> int:
    """How many rows of `benchmark` could not be read, as its written results say (0 when
    they say nothing of it)."""
    import json

    from gdpo_nemo.runs import rundir

    try:
        payload = json.loads(rundir.eval_file(out, benchmark, step).read_text())
    except (OSError, ValueError):
        return 0
    value = payload.get("unreadable_rows", 0) if isinstance(payload, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _looks_like_a_path(model: str) -> bool:
    """A --model written as a path (not builtin:..., not a hub name such as org/name)."""
    # A hub name has at most one "/" (org/name); a path may have more, or start at a folder.
    return model.startswith(("/", "./", "../", "~")) or model.count("/") > 1 or (
        "/" in model and Path(model.split("/")[0]).exists())


def run(args: argparse.Namespace) -> int:
    """Check the options (ValueError, before a model is loaded), then run the benchmarks:
    gdpo_nemo.evaluation.runner (math, code) or gdpo_nemo.evaluation.bfcl (toolcall).
    1 when a benchmark failed or a row could not be read (the results are still written)."""
    from gdpo_nemo.evaluation.backends import make_backend, resolve_model

    for key in ("samples", "max_new_tokens", "limit", "batch_size"):
        value = getattr(args, key)
        if value is not None and value < 1:
            raise UserError(f"--{key.replace('_', '-')} must be at least 1, got {value}")
    if _looks_like_a_path(args.model) and not Path(args.model).expanduser().exists():
        raise UserError(f"--model {args.model}: no such checkpoint (expected a local-engine checkpoint dir such as "
                         "RUN_DIR/checkpoints/step_N, builtin:smollm2-135m, or a model name)")
    ref = resolve_model(args.model)
    out = Path(args.out) if args.out else ref.run_dir
    if out is None:
        raise UserError("--out RUN_DIR is needed when --model is not a local-engine checkpoint"
                         " (results go to RUN_DIR/eval/<benchmark>/step_<N>.json)")
    step = args.step if args.step is not None else (ref.step if ref.step is not None else 0)
    run_id = _run_id(out, args.run_id)
    files = _files(args.file)
    # bad options fail here, before a model is loaded
    if TASKS[args.task].evaluation == "bfcl":
        from gdpo_nemo.evaluation import bfcl

        if args.ids and args.benchmarks:
            raise UserError("--ids names the BFCL entries (and so their categories): leave out --benchmarks")
        if args.samples not in (None, 1):
            raise UserError(f"--samples {args.samples}: BFCL scores one response per entry (bfcl-eval's rule)")
        bfcl.check_ids(args.ids or [])
        bfcl.check_categories(args.benchmarks)
        bfcl.bfcl_python()
    else:
        from gdpo_nemo.evaluation.runner import TASK_BENCHMARKS, check_benchmarks, run_benchmarks

        if args.limit is not None or args.ids:
            raise UserError(f"--limit and --ids select BFCL entries (--task toolcall), not {args.task} questions")
        benchmarks = check_benchmarks(args.task, args.benchmarks or list(TASK_BENCHMARKS[args.task]))
        stray = sorted(set(files) - set(benchmarks))
        if stray:
            raise UserError(f"--file {stray[0]}=...: not among the benchmarks to run ({', '.join(benchmarks)})")
    backend = make_backend(args.backend, args.model, seed=args.seed, device=args.device, batch_size=args.batch_size)
    if TASKS[args.task].evaluation == "bfcl":
        try:
            results = bfcl.run_bfcl(backend, categories=args.benchmarks, ids=args.ids, out_dir=out, run_id=run_id,
                                    step=step, limit=args.limit, max_new_tokens=args.max_new_tokens or 1024,
                                    temperature=args.temperature if args.temperature is not None else 0.0,
                                    threads=args.batch_size)
        except RuntimeError as err:  # bfcl-eval's process failed: its log is named in the message
            return report_error("gdpo-nemo eval", f"bfcl: {err}", FAILED)
    else:
        samples = args.samples or PAPER_DEFAULTS["samples"]
        results = run_benchmarks(
            args.task, benchmarks, backend, data_dir=Path(args.data_dir), out_dir=out, run_id=run_id, step=step,
            samples=samples, max_new_tokens=args.max_new_tokens or PAPER_DEFAULTS["max_new_tokens"],
            temperature=args.temperature if args.temperature is not None else PAPER_DEFAULTS["temperature"],
            top_p=args.top_p if args.top_p is not None else PAPER_DEFAULTS["top_p"],
            exceed_limit=args.exceed_limit, files=files)
    failed = [name for name, values in results.items() if "error" in values]
    unreadable = sum(_unreadable_rows(out, name, step) for name in results if name not in failed)
    print(f"eval: {len(results) - len(failed)} of {len(results)} benchmark(s) written under {out / 'eval'}"
          + (f"; skipped: {', '.join(failed)}" if failed else "")
          + (f"; {unreadable} unreadable row(s) counted as failed questions" if unreadable else ""))
    # As `score`: the results are complete, but exit 1 says that some of the input was bad.
    return FAILED if failed or unreadable else 0
