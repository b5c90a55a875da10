"""Everything `gdpo-nemo report` writes, from a loaded `Dataset`.

Output folder layout::

    <out>/README.md                 index: source, runs and their status, problems, tables, figures
    <out>/runs.csv                  the run table (status, last step, config facts)
    <out>/problems.md               every log problem found (non-numeric values, duplicates, ...)
    <out>/tables/<key>.{md,tex,csv} Tables 1-5 and the weight ablation (csv: one row per cell)
    <out>/tables/training_summary.{md,csv}  final values per method over seeds, 95 % t intervals
    <out>/tables/paired.{md,csv}            each method minus the baseline on the same seeds
    <out>/figures/curves__<experiment>__<task>__<model>.{png,pdf}
    <out>/figures/advantage_groups__<experiment>__<task>__<model>.{png,pdf}
    <out>/figures/fig3_advantage_groups.{png,pdf,json}
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from gdpo_nemo.analysis import figures, render
from gdpo_nemo.analysis.frame import Dataset
from gdpo_nemo.analysis.paper import PaperValues
from gdpo_nemo.analysis.tables import all_tables, incomplete_runs, paired_summary, training_summary


REWARD_FAMILY_NOTE = (
    "Training rewards are `train/reward/<name>`: with DAPO dynamic sampling, the step's generated samples before"
    " filtering (the unbiased view of the policy), as NeMo RL's `train/reward`; the trained (filtered) batch, what the"
    " estimator saw, is `train/filtered_reward/<name>` in each run's metrics (docs/interfaces.md, \"Which samples"
    " each reward family covers\")."
)


def problems_markdown(problems: pd.DataFrame) -> str:
    """The problems frame as a Markdown list grouped by kind ("No problems found." if empty)."""
    if problems.empty:
        return "No problems found.\n"
    lines = []
    for kind, group in problems.groupby("kind", sort=True):
        lines.append(f"**{kind}** ({len(group)})")
        lines += [f"- {'`' + r + '`: ' if r else ''}{d}" for r, d in zip(group["run_id"], group["detail"])]
        lines.append("")
    return "\n".join(lines)


def build_report(
    dataset: Dataset,
    out: str | Path,
    paper: PaperValues,
    *,
    source_label: str = "",
    smooth: int | None = None,
    include_incomplete: bool = False,
    expected_seeds: list[int] | None = None,
    fig3_counts: Path | None = None,
    fig3_samples: int = 20_000,
    resamples: int = 10_000,
    progress: bool = True,
    baseline: str = "grpo",
    window: float = 0.1,
) -> list[Path]:
    """Write every table and figure of `dataset` under `out`; return the written paths.

    `baseline` is the algo the paired comparison subtracts; `window` the share of each run's
    last steps whose ``train/*`` mean is its final value (`tables.final_values`)."""
    out = Path(out)
    tables_dir, figures_dir = out / "tables", out / "figures"
    tables_dir.mkdir(parents=True, exist_ok=True)
    figures_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    results = all_tables(dataset, paper, include_incomplete=include_incomplete, expected_seeds=expected_seeds, resamples=resamples)
    # A table none of whose cells has a run (gsm8k-only runs and the paper's Tables 1-5) is
    # not written: the index lists it as skipped instead of a page of "n=0".
    skipped = [result.spec.key for result in results if not _has_runs(result)]
    results = [result for result in results if _has_runs(result)]
    for result in results:
        for suffix, text in ((".md", render.to_markdown(result)), (".tex", render.to_latex(result))):
            path = tables_dir / f"{result.spec.key}{suffix}"
            path.write_text(text)
            written.append(path)
        path = tables_dir / f"{result.spec.key}.csv"
        result.cells.to_csv(path, index=False)
        written.append(path)
    left_out = {} if include_incomplete else incomplete_runs(dataset)
    summary = training_summary(dataset, window=window, resamples=resamples, include_incomplete=include_incomplete)
    paired = paired_summary(dataset, baseline=baseline, window=window, include_incomplete=include_incomplete)
    summary_text = render.summary_markdown(summary, left_out=left_out)
    paired_text = render.paired_markdown(paired, left_out=left_out)
    summary_md = summary_text + "\n" + paired_text
    for name, frame, text in (("training_summary", summary, summary_text), ("paired", paired, paired_text)):
        (tables_dir / f"{name}.md").write_text(text)
        frame.to_csv(tables_dir / f"{name}.csv", index=False)
        written += [tables_dir / f"{name}.md", tables_dir / f"{name}.csv"]

    curve_paths = figures.plot_reward_curves(dataset, figures_dir, smooth=smooth)
    diag_paths = figures.plot_diagnostics(dataset, figures_dir, smooth=smooth)
    diag_paths += figures.plot_mechanism(dataset, figures_dir, smooth=smooth)
    from gdpo_nemo.analysis.fig3 import fig3

    fig3_paths = fig3(figures_dir, counts_path=fig3_counts, samples=fig3_samples, progress=progress)
    written += curve_paths + diag_paths + fig3_paths

    dataset.runs.to_csv(out / "runs.csv", index=False)
    (out / "problems.md").write_text("# Problems found in the logs\n\n" + problems_markdown(dataset.problems))
    written += [out / "runs.csv", out / "problems.md"]

    index = _index(dataset, results, summary_md, curve_paths + diag_paths + fig3_paths, out, source_label, skipped)
    (out / "README.md").write_text(index)
    written.append(out / "README.md")
    return written


def _has_runs(result) -> bool:
    """True when at least one cell of a computed table has a run behind it."""
    cells = result.cells
    return "n" in cells and bool((cells["n"].fillna(0) > 0).any())


def _index(dataset: Dataset, results, summary_md: str, figure_paths: list[Path], out: Path, source_label: str,
           skipped: list | None = None) -> str:
    runs = dataset.runs
    lines = ["# GDPO report", "", f"Source: `{source_label}`" if source_label else "", "",
             f"{len(runs)} run(s), {len(dataset.metrics)} logged values, {len(dataset.problems)} problem(s) "
             "([problems.md](problems.md)); regenerate with `gdpo-nemo report`.", ""]
    if not runs.empty:
        lines += ["## Runs", "", "| run | status | last step | planned |", "|---|---|---|---|"]
        for r in runs.to_dict("records"):
            planned = "" if pd.isna(r["max_steps"]) else str(int(r["max_steps"]))
            last = "none yet" if pd.isna(r["last_step"]) or int(r["last_step"]) < 0 else str(int(r["last_step"]))
            lines.append(f"| `{r['run_id']}` | {r['status']} | {last} | {planned} |")
        lines.append("")
    lines += [REWARD_FAMILY_NOTE, ""]
    lines += ["## Figures", ""]
    for path in figure_paths:
        if path.suffix == ".png":
            rel = os.path.relpath(path, out)
            lines += [f"![{path.name[:-4]}]({rel})", f"([PDF]({rel[:-4]}.pdf))", ""]
    lines += ["## Tables", "", summary_md, ""]
    if skipped:
        lines += [f"Not written, no run in any of their cells: {', '.join(skipped)}.", ""]
    for result in results:
        lines += [render.to_markdown(result), f"LaTeX: [tables/{result.spec.key}.tex](tables/{result.spec.key}.tex)", ""]
    return "\n".join(lines)
