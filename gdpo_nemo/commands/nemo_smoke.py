"""``gdpo-nemo nemo-smoke RUN.yaml [overrides] --steps 2``: a composed NeMo RL run config
through NeMo RL's real ``grpo_train`` on this CPU, before a job waits in a GPU queue.

The config keeps its task, rewards, estimator, loss and hooks; the model becomes builtin:tiny
(or the embedded SmolLM2), the batch a few prompts (gdpo_nemo.engines.nemo.cpu.smoke lists
every change). Per step it prints the rewards per component, the advantages and whose
estimator computed them; then a table of the logged metrics and the checkpoints NeMo RL
kept. NeMo RL's own output goes to ``<run dir>/nemo_rl.log`` (``--verbose``: the terminal).

NeMo RL must be importable: on a cluster, run it in NeMo RL's environment; in a checkout of
this project, a Python without NeMo RL hands over to ``.venv-nemo`` (scripts/setup_nemo.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

from gdpo_nemo.builtin_models import SMOLLM2, TINY
from gdpo_nemo.errors import UserError
from gdpo_nemo.commands.args import BAD_INPUT, FAILED, DefaultsHelpFormatter, parse_with_overrides, report_error
from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.runs import metric_names as mn

PROG = "gdpo-nemo nemo-smoke"
INTERMIXED_ARGS = True  # RUN.yaml, then overrides and flags in any order (gdpo_nemo.cli)
_DEFAULT_ROOT = Path("runs") / "nemo-smoke"
# --model -> (answers per prompt, new tokens) when --generations / --max-new-tokens are not
# given: the smallest shape whose rewards move for the embedded SmolLM2 (at 2 x 32 its
# gsm8k rewards were all 0 and its weights did not change; math stopped in DAPO's redraws).
MODEL_SHAPES = {TINY: (2, 32), SMOLLM2: (4, 64)}
# NeMo RL's words when DAPO has drawn every batch it may (nemo_rl/algorithms/grpo.py).
DAPO_STOP = "Dynamic sampling has reached the maximum"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = DefaultsHelpFormatter
    parser.add_argument("config", metavar="RUN.yaml", help="a gdpo.engine: nemo run config (gdpo-nemo config show ... -o RUN.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Hydra overrides, applied after the CPU changes")
    parser.add_argument("--steps", type=int, default=2, help="training steps")
    parser.add_argument("--model", default=TINY,
                        help=f"{TINY} (builtin:{TINY}, random weights, seconds per step), {SMOLLM2} (the embedded"
                        " SmolLM2-135M-Instruct, about a minute per step) or a local HF checkpoint folder")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step (and validation prompts)")
    parser.add_argument("--generations", type=int, default=None,
                        help=f"answers per prompt (default: 2 for {TINY}, 4 for {SMOLLM2} and a checkpoint folder)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help=f"answer length budget (default: 32 for {TINY}, 64 for {SMOLLM2} and a checkpoint folder)")
    parser.add_argument("--val-period", type=int, default=1, help="validate every N steps (0: never)")
    parser.add_argument("--max-gen-batches", type=int, default=None,
                        help="the CPU path's cap on DAPO's grpo.dynamic_sampling_max_gen_batches (default 2: each"
                        " extra batch is a whole generation round); a grpo.dynamic_sampling_max_gen_batches=N override"
                        " sets the value itself")
    parser.add_argument("--data", choices=("auto", "offline", "config"), default="auto",
                        help="the config's data files (config), the task's offline rows (offline), or the files when present")
    parser.add_argument("--run-dir", default=None,
                        help=f"where logs and checkpoints go (default: {_DEFAULT_ROOT}/<run name>; must not hold a run unless --resume)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its latest checkpoint")
    parser.add_argument("--continue", dest="continue_run", action="store_true",
                        help="continue the run in --run-dir when it holds one, start it there otherwise (what a sweep job"
                        " runs at its first start and at every requeue)")
    parser.add_argument("--wandb", action="store_true",
                        help="keep the config's W&B logging (offline files in the run dir when no W&B server answers);"
                        " by default a smoke run logs to TensorBoard and metrics.jsonl only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the policy worker")
    parser.add_argument("--verbose", action="store_true", help="NeMo RL's own output on the terminal, not in <run dir>/nemo_rl.log")


def _nemo_python() -> Path | None:
    """This checkout's .venv-nemo Python, when there is one."""
    candidate = REPO_ROOT / ".venv-nemo" / "bin" / "python"
    return candidate if candidate.is_file() else None


def _hand_over(argv: list[str]) -> int:
    """Re-run this command in .venv-nemo (NeMo RL is not importable here)."""
    python = _nemo_python()
    if python is None or Path(sys.prefix).resolve() == python.parents[1].resolve():
        raise UserError(
            "NeMo RL is not importable in this Python: run the command in NeMo RL's environment"
            " (on a cluster) or run scripts/setup_nemo.sh (a checkout of this project: makes .venv-nemo)"
        )
    sys.stdout.flush()
    os.execv(str(python), [str(python), "-m", "gdpo_nemo.commands.nemo_smoke", *argv])
    return FAILED  # not reached


def _run_dir(args, config: dict) -> Path:
    if args.run_dir:
        run_dir = Path(args.run_dir)
    else:
        name = str((config.get("logger") or {}).get("wandb", {}).get("name") or Path(args.config).stem)
        run_dir = _DEFAULT_ROOT / name
    run_dir = run_dir.resolve()
    continuing = getattr(args, "continue_run", False)
    if continuing:  # the sweep job's own dir: what it holds is an earlier attempt of this run
        args.resume = (run_dir / "config.yaml").is_file()
    if run_dir.exists() and any(run_dir.iterdir()) and not args.resume and not continuing:
        raise UserError(f"--run-dir {run_dir} already holds files: pass --resume to continue that run, or another --run-dir")
    if args.resume and not (run_dir / "config.yaml").is_file():
        raise UserError(f"--resume: {run_dir} holds no run (no config.yaml)")
    return run_dir


def _trained_steps(run_dir: Path) -> set:
    """The training steps metrics.jsonl holds (an empty set before the run dir exists)."""
    from gdpo_nemo.runs import rundir

    if not rundir.metrics_path(run_dir).exists():
        return set()
    return {r["step"] for r in rundir.read_metrics(run_dir) if r.get("step", 0) > 0 and mn.train(mn.LOSS) in r}


def _summary(run_dir: Path, out) -> None:
    from gdpo_nemo.runs import rundir

    records = rundir.read_metrics(run_dir)
    keys = (mn.train(mn.LOSS), mn.train(mn.REWARD), mn.train(mn.FILTERED_REWARD), mn.train(mn.GRAD_NORM),
            mn.timing(mn.TRAIN, mn.TOTAL_STEP_TIME))
    families = tuple(f"{family}/" for family in (mn.train(mn.REWARD), mn.train(mn.FILTERED_REWARD),
                                                  mn.validation(mn.REWARD)))  # docs/interfaces.md
    components = sorted({k for r in records for k in r if k.startswith(families)},
                        key=lambda k: (next(i for i, f in enumerate(families) if k.startswith(f)), k))
    print("\nlogged metrics (metrics.jsonl, from NeMo RL's Logger):", file=out)
    for record in records:
        shown = {k: record[k] for k in (*keys, *components, mn.validation(mn.ACCURACY), mn.train(mn.DATA_ERRORS)) if k in record}
        print(f"  step {record.get('step')}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                      for k, v in shown.items()), file=out)
    kept = [str(p.relative_to(run_dir)) for _, p in rundir.checkpoint_steps(rundir.checkpoints_dir(run_dir))]
    print(f"checkpoints kept by NeMo RL's CheckpointManager: {', '.join(kept) or 'none'}", file=out)


def _checked_input(args) -> tuple[dict, Path]:
    """What this command can check before NeMo RL loads (and before a hand-over to
    .venv-nemo, which costs seconds): the flags, the config file (this project's own check
    of the run config, engine first) and the run dir's rules; (config, run dir) or a
    ValueError naming the flag, key or path."""
    from gdpo_nemo.engines.nemo.cpu.models import check_model
    from gdpo_nemo.engines.nemo.run import load_nemo_config

    check_model(args.model)
    for flag in ("steps", "prompts", "generations", "max_new_tokens", "threads", "max_gen_batches"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UserError(f"--{flag.replace('_', '-')} {value}: must be at least 1")
    if args.val_period < 0:
        raise UserError(f"--val-period {args.val_period}: must be 0 (never) or more")
    config = load_nemo_config(args.config)
    return config, _run_dir(args, config)


def _size(args) -> "smoke.SmokeSize":
    """The run's size: the flags, and where one is not given, the model's default shape
    (MODEL_SHAPES: the embedded SmolLM2 needs more answers and tokens for its rewards to
    move than builtin:tiny, whose rewards never do)."""
    from gdpo_nemo.engines.nemo.cpu import smoke

    generations, max_new_tokens = MODEL_SHAPES.get(args.model, MODEL_SHAPES[SMOLLM2])
    return smoke.SmokeSize(steps=args.steps, prompts=args.prompts, generations=args.generations or generations,
                           max_new_tokens=args.max_new_tokens or max_new_tokens, val_period=args.val_period,
                           max_gen_batches=args.max_gen_batches or smoke.MAX_GEN_BATCHES)


def run(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Check, prepare and run the smoke run (module docstring); 0 finished, 1 failed."""
    out = sys.stdout
    # Third-party output of the imports and the model's preparation (warnings of torch,
    # pynvml, torchao, transformers; a shard-writing bar) goes to <run dir>/nemo_rl.log with
    # NeMo RL's own, not to the terminal (--verbose: the terminal).
    noise = io.StringIO()
    with contextlib.nullcontext() if args.verbose else contextlib.redirect_stderr(noise):
        config, run_dir = _checked_input(args)
        from gdpo_nemo.engines.nemo.validation import nemo_rl_importable

        importable = nemo_rl_importable()
    if not importable:
        return _hand_over(list(sys.argv[2:] if argv is None else argv))
    with contextlib.nullcontext() if args.verbose else contextlib.redirect_stderr(noise):
        from gdpo_nemo.engines.nemo.cpu import models, smoke

        model = models.model_folder(args.model, seed=int(config["grpo"]["seed"]), log=lambda m: print(m, file=out, flush=True))
        size = _size(args)
        cpu = smoke.cpu_config(config, model_dir=str(model), run_dir=run_dir, size=size, data=args.data,
                               tiny_model=args.model == TINY, overrides=args.overrides, keep_wandb=args.wandb)
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / "nemo_rl.log"
    if noise.getvalue():
        with open(log_path, "a") as log:
            log.write(noise.getvalue())
    _refuse_a_repeat(run_dir, cpu.config)
    (run_dir / "cpu_changes.txt").write_text("".join(line + "\n" for line in cpu.changes))
    print(f"{PROG}: {args.config} -> {run_dir}", file=out)
    print(f"  model {args.model} ({model}); {size.steps} steps of {size.prompts} prompts x {size.generations} answers,"
          f" at most {size.max_new_tokens} new tokens; task {config['gdpo']['task']}, estimator {cpu.config['gdpo']['estimator']}",
          file=out)
    print(f"  {len(cpu.changes)} keys changed for the CPU (list: {run_dir / 'cpu_changes.txt'})", file=out)
    for note in cpu.notes:
        print(f"  note: {note}", file=out)
    if not args.verbose:
        print(f"  NeMo RL's own output: {log_path}", file=out)
    out.flush()
    return _train(args, cpu, run_dir, size, out)


def _train(args, cpu, run_dir: Path, size, out) -> int:
    """NeMo RL's grpo_train on the CPU config, then the summary; 0 finished, 1 failed."""
    from gdpo_nemo.engines.nemo.cpu.train import train_on_cpu
    from gdpo_nemo.engines.nemo.signals import exit_on_sigterm

    log_path = run_dir / "nemo_rl.log"
    if cpu.config["logger"].get("wandb_enabled"):
        from gdpo_nemo.runs.tracking import settle_external_wandb

        settle_external_wandb(True, run_dir, log=lambda text: print(f"  {text}", file=out, flush=True))
    started = time.perf_counter()
    logged_before = _trained_steps(run_dir)  # a --resume run logs only the steps after its checkpoint
    with contextlib.ExitStack() as stack:
        if not args.verbose:
            log = stack.enter_context(open(log_path, "a"))
            stack.enter_context(contextlib.redirect_stdout(log))
            stack.enter_context(contextlib.redirect_stderr(log))
        try:
            with exit_on_sigterm():
                result = train_on_cpu(cpu.config, threads=args.threads, out=out)
        except Exception as err:  # what the smoke run exists to catch: say where, keep the log
            cap = cpu.config["grpo"].get("dynamic_sampling_max_gen_batches") if cpu.config["grpo"].get("use_dynamic_sampling") else None
            print(f"{PROG}: failed after {time.perf_counter() - started:.0f} s: {_failure(err, size, cap)}", file=out)
            if not args.verbose:
                print(f"  NeMo RL's output, with the traceback: {log_path}", file=out)
                import traceback

                traceback.print_exc(file=log)
            return FAILED
    _summary(run_dir, out)
    steps = max(1, len(_trained_steps(run_dir) - logged_before))  # the steps this invocation ran
    moved = None if result.weights_before is None else result.weights_after != result.weights_before
    print(f"policy weights changed: {moved}; generate calls {result.generate_calls}", file=out)
    print(f"time: imports {result.seconds.get('imports', 0):.0f} s (NeMo RL, torch), start {result.seconds.get('start', 0):.0f} s"
          f" (Ray, data, environments, policy worker), grpo_train"
          f" {result.seconds.get('train', 0):.0f} s ({result.seconds.get('train', 0) / steps:.1f} s per step,"
          f" validation and checkpoints included); total {time.perf_counter() - started:.0f} s", file=out)
    (run_dir / "cpu_run.json").write_text(json.dumps({
        "seconds": result.seconds, "generate_calls": result.generate_calls, "weights_before": result.weights_before,
        "weights_after": result.weights_after, "device_patches": result.device_patches}, indent=1))
    return 0


def _refuse_a_repeat(run_dir: Path, config: dict) -> None:
    """A job resubmitted after DAPO stopped its run, with the same config and no newer
    checkpoint, would draw the same prompts with the same seeds and stop the same way: say
    so (ValueError) instead of repeating it. Another failure, a changed config or a newer
    checkpoint goes ahead."""
    from gdpo_nemo.engines.nemo.metrics import latest_checkpoint_step
    from gdpo_nemo.runs import lifecycle, rundir

    failed = rundir.read_failed(run_dir)
    if not failed or DAPO_STOP not in str(failed.get("error", "")):
        return
    checkpoint = latest_checkpoint_step(config["checkpointing"]["checkpoint_dir"])
    if failed.get("config_digest") != lifecycle.config_digest(config) or failed.get("checkpoint") != checkpoint:
        return
    cap = config["grpo"].get("dynamic_sampling_max_gen_batches")
    resume = f"checkpoint step {checkpoint}" if checkpoint is not None else "the start"
    raise UserError(
        f"{run_dir}: its last job stopped at DAPO's batch cap (grpo.dynamic_sampling_max_gen_batches={cap}: NeMo RL"
        f" drew {cap + 1 if cap else 'its'} batches without a group whose rewards differ), and this job would resume"
        f" from the same {resume} with the same config, so it would draw the same prompts and stop the same way."
        " Change the run first: a larger cap (--max-gen-batches N; in a sweep the profile's nemo_cpu.max_gen_batches"
        " or the experiment's grpo.dynamic_sampling_max_gen_batches override), more --generations or"
        f" --max-new-tokens, or grpo.use_dynamic_sampling=false; or remove {rundir.failed_path(run_dir)} to try anyway")


def _failure(err: Exception, size, cap: int | None = None) -> str:
    """One line on why NeMo RL stopped, with what to change where we know it; `cap`: the
    run's grpo.dynamic_sampling_max_gen_batches."""
    text = str(err).strip()
    message = f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"
    if DAPO_STOP in text:
        drawn = f"{cap + 1} batches (the first and {cap} more: NeMo RL redraws while fewer than" \
                f" grpo.dynamic_sampling_max_gen_batches + 1 = {cap + 1} have been drawn)" if cap else "its batches"
        message += (f" (DAPO dynamic sampling: every group of {size.generations} answers had the same rewards in"
                    f" all {drawn}; raise --generations (now {size.generations}) or"
                    f" --max-new-tokens (now {size.max_new_tokens}) so that answers differ, allow more batches with"
                    f" --max-gen-batches N or a grpo.dynamic_sampling_max_gen_batches=N override (in a sweep: the"
                    " profile's nemo_cpu.max_gen_batches, or the experiment's override), or pass"
                    " grpo.use_dynamic_sampling=false;"
                    " NeMo RL stops a cluster run the same way)")
    return message


def main(argv: list[str] | None = None) -> int:
    """``python -m gdpo_nemo.commands.nemo_smoke ...`` (what the hand-over to .venv-nemo runs)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parse_with_overrides(parser, argv)
    try:
        return run(args, argv)
    except ValueError as err:
        return report_error(PROG, err, BAD_INPUT)


if __name__ == "__main__":
    sys.exit(main())
