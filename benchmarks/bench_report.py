"""Benchmark: 60 runs x 500 steps x 40 metrics from the parquet cache to every table and figure.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_report.py [--runs 60 --steps 500 --metrics 40]

Builds a synthetic dataset (tests.support.synthetic), writes it to a parquet cache,
then times what `gdpo-nemo report` does after loading: reading the cache, Tables 1-5, the
weight ablation and the training summary (Markdown, LaTeX, CSV), the curve and diagnostic
figures (PNG + PDF) and Fig. 3 (from the committed counts). Prints the figures; asserts no
time (target on the 2-core dev machine: under 10 s in total).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--metrics", type=int, default=40)
    args = parser.parse_args()

    from gdpo_nemo.analysis import build
    from gdpo_nemo.analysis.load import read_cache, save_cache
    from gdpo_nemo.analysis.paper import DEFAULT_PAPER_VALUES, load_paper_values
    from tests.support.synthetic import synthetic_dataset

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset = synthetic_dataset(args.runs, args.steps, args.metrics)
        save_cache(dataset, tmp / "cache")
        print(f"dataset: {len(dataset.runs)} runs, {len(dataset.metrics):,} rows, "
              f"parquet {sum(p.stat().st_size for p in (tmp / 'cache').iterdir()) / 1e6:.1f} MB")
        started = time.perf_counter()
        loaded = read_cache(tmp / "cache")
        paper = load_paper_values()
        loaded_at = time.perf_counter()
        counts = DEFAULT_PAPER_VALUES.parent / "fig3_advantage_groups.json"
        written = build.build_report(loaded, tmp / "out", paper, fig3_counts=counts if counts.exists() else None, progress=False)
        done = time.perf_counter()
        figures = sum(1 for p in written if p.suffix in (".png", ".pdf"))
        print(f"read cache + paper values: {loaded_at - started:6.2f} s")
        print(f"tables + figures:          {done - loaded_at:6.2f} s  ({len(written)} files, {figures} figure files)")
        print(f"total (target < 10 s):     {done - started:6.2f} s")


if __name__ == "__main__":
    main()
