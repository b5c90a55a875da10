"""`gdpo-nemo advantage-groups`: count distinct advantage groups for (estimator, n, G).

The counting is gdpo_nemo.estimators.collapse.count_advantage_groups; this module reads the flags and
prints the table (or one JSON object per estimator with ``--json``).
"""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `advantage-groups` flags (cheap: imports no torch)."""
    parser.add_argument("--num-rewards", "-n", type=int, required=True, help="number of binary reward components n")
    parser.add_argument("--group-size", "-G", type=int, required=True, help="rollouts per prompt G (>= 2)")
    parser.add_argument(
        "--estimator",
        nargs="+",
        default=None,
        help="estimators to count (default: those of the paper's Fig. 3, grpo grpo_no_std gdpo;"
        " gdpo counts before batch norm)",
    )
    parser.add_argument(
        "--max-enumerate",
        type=int,
        default=None,
        help="enumerate exactly up to this many multisets, else sample (default 1000000: every Fig. 3 setting)",
    )
    parser.add_argument("--samples", type=int, default=200_000, help="random groups drawn when sampling")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling mode")
    parser.add_argument("--json", action="store_true", help="print one JSON object per estimator")


def run(args: argparse.Namespace) -> int:
    """Count each estimator's distinct groups and print them; an unknown estimator raises
    ValueError (exit 2)."""
    from gdpo_nemo.estimators.collapse import DEFAULT_MAX_ENUMERATE, count_advantage_groups
    from gdpo_nemo.analysis.fig3 import fig3_estimators

    max_enumerate = DEFAULT_MAX_ENUMERATE if args.max_enumerate is None else args.max_enumerate
    rows = [
        count_advantage_groups(
            name,
            args.num_rewards,
            args.group_size,
            max_enumerate=max_enumerate,
            samples=args.samples,
            seed=args.seed,
        )
        for name in args.estimator or fig3_estimators()
    ]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"n = {args.num_rewards} binary rewards, G = {args.group_size} rollouts "
          f"({rows[0]['num_multisets']} possible groups)")
    print(f"{'estimator':<14}{'distinct groups':>16}  method")
    for row in rows:
        note = "exact" if row["method"] == "exact" else f"sampled, lower bound ({row['groups_examined']} groups)"
        print(f"{row['estimator']:<14}{row['distinct_groups']:>16}  {note}")
    return 0
