"""`gdpo-nemo notebooks`: execute the analysis notebooks on a source, headless.

    gdpo-nemo notebooks --source runs/ --out reports/notebooks

The work is gdpo_nemo.analysis.notebooks; this module reads the flags.
"""

from __future__ import annotations

import argparse
import re

from gdpo_nemo.commands.args import BAD_INPUT, FAILED, report_error

PROG = "gdpo-nemo notebooks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `notebooks` flags (cheap: imports nothing heavy)."""
    parser.add_argument("--source", default="runs", help="a folder of runs (relative to this folder) or wandb:ENTITY/PROJECT")
    parser.add_argument("--experiment", default=None, help="keep only runs of this experiment")
    parser.add_argument("--out", default="reports/notebooks", help="folder for the executed notebooks")
    parser.add_argument("--figures", default=None, help="folder for the curves' figures (default <out>/figures)")
    parser.add_argument("--only", choices=("01_tables.ipynb", "02_curves.ipynb"), action="append", default=None,
                        help="execute only this notebook (repeatable; default both)")


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def run(args: argparse.Namespace) -> int:
    """Execute the notebooks; 0 done. A cell's UserError (or one of its kinds: ConfigError,
    WandbUnavailable, ...) is bad input, as `gdpo-nemo report` says of the same source (one
    line on stderr, exit 2); any other failing cell exits 1 with its error's last line. No
    terminal colour codes either way."""
    from gdpo_nemo.analysis.notebooks import NOTEBOOKS, run_notebooks

    try:
        from nbclient.exceptions import CellExecutionError
    except ImportError:  # pragma: no cover - nbclient is a declared dependency
        CellExecutionError = RuntimeError
    try:
        run_notebooks(args.source, args.out, experiment=args.experiment, figures=args.figures,
                      names=tuple(args.only or NOTEBOOKS))
    except CellExecutionError as err:
        name, value = getattr(err, "ename", None), _ANSI.sub("", str(getattr(err, "evalue", "") or "")).strip()
        if name in _user_error_names() and value:
            return report_error(PROG, value.splitlines()[0], BAD_INPUT)
        lines = [line for line in _ANSI.sub("", str(err)).splitlines() if line.strip()]
        return report_error(PROG, f"a cell failed: {lines[-1] if lines else name}", FAILED)
    return 0


def _user_error_names() -> set[str]:
    """The class names a cell's UserError can carry (the kernel reports only the name): the
    class and its kinds, with the modules that define them imported (only on a failure)."""
    import importlib

    from gdpo_nemo.errors import UserError

    for module in ("config.errors", "sweep.errors", "rewards.base", "runs.provenance", "runs.tracking",
                   "estimators.general"):
        importlib.import_module(f"gdpo_nemo.{module}")
    names, pending = set(), [UserError]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return names
