"""`gdpo-nemo report`: the paper's tables and figures from runs' logs, in one command.

    gdpo-nemo report --source wandb:ENTITY/PROJECT [--experiment NAME] --out paper_figures/
    gdpo-nemo report --source runs/ --out paper_figures/quickstart/

Sources: ``wandb:ENTITY/PROJECT`` (public API, progress bar per run downloaded) or a folder
of run dirs / NeMo RL log dirs / W&B offline files / eval results (docs/analysis.md).
The work is gdpo_nemo.analysis (load_source, build_report); this module reads the flags.
"""

from __future__ import annotations

import argparse
import sys

from gdpo_nemo.commands.args import FAILED, key_value, report_error


def _seeds(text: str) -> list[int]:
    """'0-4' or '0,1,3' -> list of ints."""
    try:
        if "-" in text:
            low, high = text.split("-", 1)
            return list(range(int(low), int(high) + 1))
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: expected a range like 0-4 or a list like 0,1,3") from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"--window {text!r}: expected a fraction in (0, 1], e.g. 0.1 for the last tenth of the steps")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `report` flags (cheap: imports nothing heavy)."""
    parser.add_argument("--source", action="append", required=True, metavar="SOURCE",
                        help="wandb:ENTITY/PROJECT or a folder of runs (repeatable: runs are pooled and checked for duplicates)")
    parser.add_argument("--experiment", default=None, help="keep only runs of this experiment (filters the W&B download)")
    parser.add_argument("--group", default=None, help="keep only one W&B group (a run id without its seed)")
    parser.add_argument("--out", default="paper_figures", help="output folder (default paper_figures/)")
    parser.add_argument("--paper-values", default=None, help="paper numbers YAML (default paper_figures/paper_values.yaml)")
    parser.add_argument("--model-map", action="append", default=[], metavar="TAG=KEY",
                        help="treat run model tag TAG as the paper's model KEY (e.g. qwen1.5b=qwen2.5-1.5b)")
    parser.add_argument("--seeds", type=_seeds, default=None, help="expected seeds, e.g. 0-4 (default: every seed seen)")
    parser.add_argument("--include-incomplete", action="store_true", help="keep crashed and short runs in the means")
    parser.add_argument("--baseline", default="grpo",
                        help="algo the paired comparison subtracts from every other algo of the same seeds (default grpo)")
    parser.add_argument("--window", type=_fraction, default=0.1,
                        help="share of each run's last logged steps whose train/* mean is its final value (default 0.1)")
    parser.add_argument("--smooth", type=int, default=None, help="rolling window of the curves in steps (default steps/25)")
    parser.add_argument("--cache", default=".cache/analysis", help="parquet cache folder (default .cache/analysis)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    parser.add_argument("--refresh", action="store_true", help="reload the sources even when cached (W&B: download again)")
    parser.add_argument("--fig3-counts", default=None, help="Fig. 3 counts JSON to reuse (default: paper_figures/fig3_advantage_groups.json if present)")
    parser.add_argument("--fig3-samples", type=int, default=20_000, help="random groups per sampled Fig. 3 point when counting anew")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    """Load the sources, build the report into --out; 1 when no run was found (the problems
    are printed), 2 on bad input (ValueError)."""
    from pathlib import Path

    from gdpo_nemo.analysis.build import build_report
    from gdpo_nemo.analysis.load import load_source
    from gdpo_nemo.analysis.paper import DEFAULT_PAPER_VALUES, load_paper_values

    model_map = dict(key_value(item, flag="--model-map", form="TAG=KEY", example="qwen1.5b=qwen2.5-1.5b")
                     for item in args.model_map)
    paper = load_paper_values(args.paper_values, model_map)
    dataset = load_source(args.source, experiment=args.experiment, group=args.group,
                          cache_dir=None if args.no_cache else args.cache, refresh=args.refresh, progress=not args.quiet)
    if dataset.runs.empty:
        for detail in dataset.problems["detail"]:
            print(f"gdpo-nemo report: {detail}", file=sys.stderr)
        return report_error("gdpo-nemo report", "no runs to report; nothing written", FAILED)
    default_counts = DEFAULT_PAPER_VALUES.parent / "fig3_advantage_groups.json"
    counts = Path(args.fig3_counts) if args.fig3_counts else (default_counts if default_counts.exists() else None)
    written = build_report(dataset, args.out, paper, source_label=" + ".join(args.source), smooth=args.smooth,
                           include_incomplete=args.include_incomplete, expected_seeds=args.seeds,
                           fig3_counts=counts, fig3_samples=args.fig3_samples, progress=not args.quiet,
                           baseline=args.baseline, window=args.window)
    print(f"{len(dataset.runs)} run(s), {len(dataset.problems)} problem(s); wrote {len(written)} files under {args.out}")
    for kind, count in dataset.problems["kind"].value_counts().sort_index().items():
        print(f"  problem: {kind} x{count} (see {Path(args.out) / 'problems.md'})", file=sys.stderr)
    return 0
