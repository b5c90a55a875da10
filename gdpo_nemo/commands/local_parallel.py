"""``python -m gdpo_nemo.commands.local_parallel EXPERIMENT [--out DIR] [--jobs N]
[--only KEY=VALUE ...] [--smoke] [key=value ...]``: an experiment's runs on this machine,
several local-engine processes at a time (scripts/gpu_study.sh, docs/gpu.md).

This module is the command: its flags, error lines and exit codes; what runs is
gdpo_nemo.engines.local.parallel (plan_runs, prepare_shared, run_all), whose docstring
says what happens, step by step."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from gdpo_nemo.commands.args import BAD_INPUT, FAILED, report_error
from gdpo_nemo.commands.sweep import only_filters
from gdpo_nemo.engines.local import parallel
from gdpo_nemo.runs import cpu_pins
from gdpo_nemo.runs.rundir import shown

PROG = "python -m gdpo_nemo.commands.local_parallel"  # this module, as typed (never "__main__")


def parse_args(argv=None) -> argparse.Namespace:
    """The command's flags."""
    parser = argparse.ArgumentParser(prog=PROG, description=parallel.__doc__.split("\n\n")[0])
    parser.add_argument("experiment", nargs="?", help="experiment name (experiments/<name>.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides applied to every run, last")
    parser.add_argument("--out", type=Path, default=None, help="output dir (default runs/<experiment>)")
    parser.add_argument("--jobs", type=int, default=6, help="runs at a time (default 6)")
    parser.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                        help="restrict to runs with KEY=VALUE (run, task, model, algo, seed), as gdpo-nemo sweep")
    parser.add_argument("--smoke", action="store_true", help="builtin:tiny on the CPU at toy sizes (tests)")
    return parser.parse_intermixed_args(argv)  # overrides may follow options


def main(argv=None) -> int:
    """Plan, prepare and run the experiment's runs; 0 every run finished, 1 some failed
    (named on stderr), 2 bad input."""
    args = parse_args(argv)
    try:  # this process computes warm-start keys; the runs inherit the environment
        cpu_pins.pin()
    except ValueError as err:
        return report_error(PROG, err, BAD_INPUT)
    if not args.experiment:
        return report_error(PROG, "name an experiment (experiments/<name>.yaml), e.g. gpu_study")
    if args.jobs < 1:
        return report_error(PROG, f"--jobs {args.jobs}: expected an int >= 1")
    out = (args.out or Path("runs") / args.experiment).resolve()
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    try:
        runs = parallel.plan_runs(args.experiment, out, only_filters(args.only), args.overrides, smoke=args.smoke,
                                  threads_per_run=threads)
    except ValueError as err:
        return report_error(PROG, err, BAD_INPUT)
    print(f"{len(runs)} run(s) of {args.experiment} into {shown(out)}, {args.jobs} at a time, "
          f"{threads} CPU thread(s) each unless the experiment pins gdpo.local.num_threads")
    started = time.monotonic()
    # SIGTERM (kill, a scheduler's stop) ends the runs too: run_all stops its children on exit.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    failed = parallel.run_all(runs, args.jobs, out=out)
    print(f"{len(runs) - len(failed)} of {len(runs)} run(s) finished; {time.monotonic() - started:.0f} s")
    if failed:
        return report_error(PROG, "failed: " + ", ".join(run.name for run in failed), FAILED)
    return 0


if __name__ == "__main__":
    sys.exit(main())
