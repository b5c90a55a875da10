"""`gdpo-nemo quickstart [--out DIR] [--steps N] [--config RUN.yaml]`: GRPO vs GDPO on the
embedded CPU default, end to end (what it trains and writes: gdpo_nemo.engines.local.quickstart)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.engines.local.quickstart import QUICKSTART_CONFIG, run_quickstart  # cheap: that module imports torch lazily


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The quickstart's flags: --out, --steps, --config."""
    parser.add_argument("--out", default="runs/quickstart", help="output dir (default: runs/quickstart)")
    parser.add_argument("--steps", type=int, default=None, help="RL steps per method (default: the config's)")
    parser.add_argument("--config", default=str(QUICKSTART_CONFIG), help="run config (default: the quickstart's)")


def run(args: argparse.Namespace) -> int:
    """Train both arms, write the figure and summary.md into --out, print the table and
    where the files are."""
    from gdpo_nemo.runs import cpu_pins

    cpu_pins.pin()  # the conversion and warm start here, the runs in processes that inherit it
    if not Path(args.config).is_file():
        raise UserError(f"--config {args.config} does not exist (the quickstart config ships in the repo's"
                         " configs/local/; run from a checkout or pass --config)")
    figure, summary, table, total = run_quickstart(args.config, Path(args.out), args.steps)
    print(table)
    print(f"figure: {figure}\nsummary: {summary}\nwall time: {total / 60:.1f} min")
    return 0


def resume_hint(args: argparse.Namespace) -> str:
    """What continues an interrupted quickstart (printed on Ctrl-C): the same command, whose
    runs resume from their checkpoints."""
    import shlex

    parts = ["gdpo-nemo", "quickstart", "--out", args.out]
    if args.steps is not None:
        parts += ["--steps", str(args.steps)]
    if args.config != str(QUICKSTART_CONFIG):
        parts += ["--config", args.config]
    return " ".join(shlex.quote(part) for part in parts)
