"""`gdpo-nemo collapse-figures [--out paper_figures/]`: paper Fig. 2's table and Fig. 3.

The files and what they hold: gdpo_nemo.analysis.fig3 (write_collapse_figures).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `collapse-figures` flags (cheap: imports no torch)."""
    parser.add_argument("--out", default="paper_figures", help="output folder (default paper_figures/)")
    parser.add_argument("--samples", type=int, default=100_000, help="random groups per sampled point")
    parser.add_argument("--max-enumerate", type=int, default=None, help="exact enumeration limit (default 1000000: every point exact)")


def run(args: argparse.Namespace) -> int:
    """Write the figures into --out and print each written path."""
    from gdpo_nemo.analysis.fig3 import write_collapse_figures

    for path in write_collapse_figures(Path(args.out), samples=args.samples, max_enumerate=args.max_enumerate):
        print(path)
    return 0
