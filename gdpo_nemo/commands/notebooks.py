"""`gdpo-nemo notebooks`: execute the analysis notebooks on a source, headless.

    gdpo-nemo notebooks --source runs/ --out reports/notebooks

The work is gdpo_nemo.analysis.notebooks; this module reads the flags.
"""

from __future__ import annotations

import argparse

from gdpo_nemo.commands.args import FAILED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `notebooks` flags (cheap: imports nothing heavy)."""
    parser.add_argument("--source", default="runs", help="a folder of runs (relative to this folder) or wandb:ENTITY/PROJECT")
    parser.add_argument("--experiment", default=None, help="keep only runs of this experiment")
    parser.add_argument("--out", default="reports/notebooks", help="folder for the executed notebooks")
    parser.add_argument("--figures", default=None, help="folder for the curves' figures (default <out>/figures)")
    parser.add_argument("--only", choices=("01_tables.ipynb", "02_curves.ipynb"), action="append", default=None,
                        help="execute only this notebook (repeatable; default both)")


def run(args: argparse.Namespace) -> int:
    """Execute the notebooks; 1 when a cell fails (its error is printed), 2 on bad input."""
    from gdpo_nemo.analysis.notebooks import NOTEBOOKS, run_notebooks

    try:
        from nbclient.exceptions import CellExecutionError
    except ImportError:  # pragma: no cover - nbclient is a declared dependency
        CellExecutionError = RuntimeError
    try:
        run_notebooks(args.source, args.out, experiment=args.experiment, figures=args.figures,
                      names=tuple(args.only or NOTEBOOKS))
    except CellExecutionError as err:
        lines = [line for line in str(err).splitlines() if line.strip()]
        print(f"gdpo-nemo notebooks: a cell failed: {lines[-1] if lines else err}")
        return FAILED
    return 0
