"""`gdpo-nemo score`: score a JSONL file of completions with a task's reward set.

The row format and the scoring: gdpo_nemo.rewards.score_file. A summary line (rows, bad
rows, mean of each reward over all rows written) ends the run on stderr. Exit code: 0 all
rows good, 1 some rows bad (the output is still complete), 2 the command could not run (bad
arguments, unreadable input, an output that is the input under another name, or a code
task whose sandbox cannot run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gdpo_nemo.commands.args import BAD_INPUT, FAILED, report_error
from gdpo_nemo.tasks import TASKS



def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `score` options (cheap: imports nothing heavy)."""
    parser.add_argument("--task", required=True, choices=list(TASKS), help="which task's rewards to apply")
    parser.add_argument("input", metavar="IN.jsonl", help="rows with completion, ground_truth (code: tests); '-' reads stdin")
    parser.add_argument(
        "-o", "--output", metavar="OUT.jsonl",
        help="where to write scored rows; default IN.scored.jsonl beside the input ('-': stdout)",
    )  # fmt: skip
    parser.add_argument(
        "--components", metavar="A,B",
        help="comma-separated component names in order (default: the task's paper set)",
    )  # fmt: skip
    parser.add_argument("--length-limit", type=int, metavar="L", help="token limit of the length reward (default 4000 for math/code)")
    parser.add_argument("--conditioned-length", action="store_true", help="length pays only correct answers (always on for code)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    """Score args.input; see the module docstring for the exit codes."""
    from gdpo_nemo.rewards import get_reward_set
    from gdpo_nemo.rewards.score_file import ScoringStopped, default_output_path, score_file

    components = None
    if args.components:
        components = [name.strip() for name in args.components.split(",") if name.strip()]
    reward_set = get_reward_set(
        args.task, components, length_limit=args.length_limit, conditioned_length=args.conditioned_length
    )
    output_path = args.output or default_output_path(args.input)
    if output_path != "-":
        Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    try:
        summary = score_file(reward_set, args.input, output_path, progress=not args.no_progress)
    except ScoringStopped as err:
        return report_error("gdpo-nemo score", err, BAD_INPUT)
    means = " ".join(f"{name}={mean:.4f}" for name, mean in summary.means.items()) or "(no rows)"
    where = "stdout" if output_path == "-" else output_path
    print(
        f"scored {summary.rows} rows ({summary.bad_rows} bad) with {reward_set.task} rewards -> {where};"
        f" mean over all rows: {means}" + (" (bad rows count as each reward's lowest value)" if summary.bad_rows else ""),
        file=sys.stderr,
    )
    return FAILED if summary.bad_rows else 0
