"""`gdpo-nemo train`: one local-engine run from a run config.

    gdpo-nemo train --config RUN.yaml [--run-dir DIR] [--resume | --overwrite] [key=value ...]

Overrides use NeMo RL's (Hydra's) grammar: `grpo.seed=3` changes a key, `+key=value` adds
one. The run dir defaults to `logger.log_dir`, the run dir of a composed config (on every
engine); a hand-written config may name the runs' root there instead (`log_dir: runs`), and
then the run goes to `<logger.log_dir>/<run id>` (docs/local_engine.md).
`--resume` continues from the newest checkpoint of the run dir on the same trajectory;
`--overwrite` moves an earlier run in the run dir into `replaced/<time>/` and starts again.
Without either, a run dir that holds files is refused: nothing in it is ever lost.
The training is gdpo_nemo.engines.local.trainer.train; this module reads the flags.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gdpo_nemo.runs import metric_names as mn


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `train` flags (cheap: imports no torch)."""
    parser.add_argument("--config", required=True, help="run config YAML (NeMo RL keys + gdpo block)")
    parser.add_argument("--run-dir", default=None,
                        help="where config.yaml, metrics.jsonl, checkpoints/ go (default: logger.log_dir when it ends in the"
                        " run id, as a composed config's does; else <logger.log_dir>/<run id>)")
    parser.add_argument("--resume", action="store_true", help="continue from the run dir's newest checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="move an earlier run in the run dir into replaced/<time>/ and start again")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides, e.g. grpo.max_num_steps=20 gdpo.estimator=grpo")


def default_run_dir(config: dict) -> Path:
    """Where a run goes without --run-dir: `logger.log_dir` when its last part is the run's id
    (the run dir, what the composer and the sweep write on every engine), else
    `<logger.log_dir>/<run id>` (a hand-written config naming the runs' root)."""
    from gdpo_nemo.runs.run_id import RunId

    log_dir, name = Path(config["logger"]["log_dir"]), RunId.from_config(config).name
    return log_dir if log_dir.name == name else log_dir / name


def run(args: argparse.Namespace) -> int:
    """Load the config with the overrides (ValueError on a bad key), train, print the final
    reward and validation metrics."""
    from gdpo_nemo.runs import cpu_pins

    cpu_pins.pin()  # before torch's first kernel: the CPU code paths every machine runs alike
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.trainer import train

    config, note = load_run_config(args.config, args.overrides)
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(config)
    result = train(config, run_dir, resume=args.resume, overwrite=args.overwrite, ignored_note=note)
    summary = {k: v for k, v in result.last_metrics.items() if k.startswith((mn.train(mn.REWARD), mn.prefix(mn.VALIDATION)))}
    ran = result.steps - result.started_from
    resumed = f", from the checkpoint of step {result.started_from}" if result.started_from else ""
    print(f"finished step {result.steps} ({ran} step{'s' if ran != 1 else ''} run now{resumed}) in "
          f"{result.wall_time_s:.0f} s; run dir {result.run_dir}")
    for key, value in summary.items():
        print(f"  {key}: {value:.4f}")
    return 0


def resume_hint(args: argparse.Namespace) -> str:
    """The command that continues an interrupted `train` (printed on Ctrl-C)."""
    import shlex

    parts = ["gdpo-nemo", "train", "--config", args.config]
    if args.run_dir:
        parts += ["--run-dir", args.run_dir]
    parts += ["--resume", *args.overrides]
    return " ".join(shlex.quote(part) for part in parts)
