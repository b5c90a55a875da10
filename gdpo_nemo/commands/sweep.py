"""`gdpo-nemo sweep EXPERIMENT --cluster PROFILE [--dry-run | --submit | --status | --cancel]`:
render, submit, watch and cancel the Slurm jobs of a paper experiment.

What each mode does: gdpo_nemo.sweep.actions. Bad input (experiment, profile, filter,
config, a Slurm command missing) exits 2 naming it, before anything is written or
submitted; a Slurm command that fails exits 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gdpo_nemo.commands.args import FAILED, key_value, report_error
from gdpo_nemo.sweep.errors import SlurmError
from gdpo_nemo.sweep.plan import FILTER_KEYS, SweepLayout
from gdpo_nemo.sweep.profiles import ENGINES


def only_filters(items: list[str]) -> dict[str, set[str]]:
    """`--only KEY=VALUE` arguments -> {key: accepted values}; several values of one key are
    OR-ed, keys AND-ed. ValueError names the item and the keys accepted (FILTER_KEYS)."""
    filters: dict[str, set[str]] = {}
    for item in items:
        key, value = key_value(item, flag="--only", form="key=value", accepted_keys=FILTER_KEYS)
        filters.setdefault(key, set()).add(value)
    return filters


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sweep command's arguments (cheap: imports no torch)."""
    parser.add_argument("experiment", help="experiment name (experiments/<name>.yaml)")
    parser.add_argument(
        "--cluster",
        metavar="PROFILE",
        help="cluster profile: a name from slurm/profiles/ or a path to a profile .yaml"
        " (required for --dry-run and --submit; --status/--cancel read it from the manifest)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_const", dest="mode", const="dry-run",
                      help="write and print the sbatch scripts, submit nothing (default)")
    mode.add_argument("--submit", action="store_const", dest="mode", const="submit",
                      help="submit runs not finished and not queued; safe to repeat")
    mode.add_argument("--status", action="store_const", dest="mode", const="status",
                      help="print each run's state from squeue/sacct and its run dir")
    mode.add_argument("--cancel", action="store_const", dest="mode", const="cancel",
                      help="scancel the sweep's pending and running jobs")
    parser.set_defaults(mode="dry-run")
    parser.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                        help=f"restrict to runs with KEY=VALUE, KEY in {', '.join(FILTER_KEYS)};"
                        " repeat a key to allow several values")
    parser.add_argument("--engine", choices=list(ENGINES), default=None,
                        help="nemo: NeMo RL through ray.sub; local: gdpo-nemo train"
                        " (default: each run's cluster config, e.g. smoke -> local, toolcall -> nemo)")
    parser.add_argument("--with-eval", action="store_true",
                        help="also render (and with --submit, submit) an evaluation job per run that starts when its"
                        " training job succeeds (--dependency=afterok) and runs `gdpo-nemo eval` on its newest"
                        " checkpoint with the profile's eval_args; local engine only")
    parser.add_argument("--nemo-rl-python", metavar="PYTHON", default=None,
                        help="check every nemo-engine run config with NeMo RL's own loader and MasterConfig, run by"
                        " this Python of NeMo RL's venv, before anything is written or submitted (default:"
                        " $GDPO_NEMO_RL_PYTHON, or this Python when it imports nemo_rl; otherwise not run)")
    parser.add_argument("--sweep-dir", type=Path, default=None,
                        help="where the sweep's files go (default: sweeps/<experiment> under the current directory)")


def run(args: argparse.Namespace) -> int:
    """Run the chosen mode; 0 on success, 1 when a Slurm command fails; bad input is a
    ValueError, which gdpo_nemo.cli reports (exit 2)."""
    from gdpo_nemo.sweep import actions

    layout = SweepLayout((args.sweep_dir or Path("sweeps") / args.experiment).resolve())
    try:
        filters = only_filters(args.only)
        if args.mode in ("dry-run", "submit"):
            return actions.render_and_submit(args.experiment, layout, args.cluster, filters, engine=args.engine,
                                             with_eval=args.with_eval, native_python=args.nemo_rl_python,
                                             submit=args.mode == "submit")
        mode = actions.status if args.mode == "status" else actions.cancel
        return mode(args.experiment, layout, args.cluster, filters)
    except SlurmError as err:
        return report_error("gdpo-nemo sweep", f"Slurm: {err}", FAILED)
