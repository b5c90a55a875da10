"""Training curves over seeds, the advantage-group diagnostic, and Fig. 3.

- `plot_reward_curves`: one panel per reward component (``train/reward/<name>``) and the
  total (``train/reward``), one line per algo (mean over seeds) with a band of +-1 std
  over seeds, as the paper's tool-calling, GSM8K and math training figures.
- `plot_diagnostics`: ``train/adv/distinct_groups`` and ``train/adv/zero_std_frac/<name>``.
- `plot_mechanism`: for runs with a length reward, the mechanism beside the outcome: the share
  of trained groups in which GRPO merges distinct reward combinations
  (``train/adv/collapsed_frac``), each non-length reward and the exceed rate, with the
  plotted values in a CSV beside the figure.
- paper Fig. 2-3: gdpo_nemo.analysis.fig3.

Figures are sized for print (7.2 in wide at most, fonts >= 8 pt, lines 1.6 pt) and written
as PNG (200 dpi) and PDF. Curves are smoothed by a trailing rolling mean over `smooth`
logged steps (default: 1/25 of the steps, at least 1), applied to the seed mean and std;
the panel title says the window.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from gdpo_nemo.analysis.frame import Dataset
from gdpo_nemo.runs import metric_names as mn

# Algos that are not a registered estimator with a style (e.g. "grpo_wlen0.5") get these,
# by their place in the legend, with a dash-dot line.
_OTHER_COLORS = ("tab:red", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan")
RC = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 8, "xtick.labelsize": 7.5,
      "ytick.labelsize": 7.5, "lines.linewidth": 1.6, "axes.spines.top": False, "axes.spines.right": False}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# The registry (gdpo_nemo.estimators) is imported inside these functions, on first use.


def algo_label(algo: str) -> str:
    """Display name of an algo: the registered estimator's label (GRPO, GDPO w/o BN, ...),
    else the algo itself."""
    from gdpo_nemo.estimators import ESTIMATORS

    info = ESTIMATORS.get(algo)
    return algo if info is None else info.label


def algo_style(algo: str, index: int):
    """The `PlotStyle` of an algo: its registered estimator's, else a colour picked by its
    `index` in the legend (0-based), marker "o", dash-dot line."""
    from gdpo_nemo.estimators import ESTIMATORS, PlotStyle

    info = ESTIMATORS.get(algo)
    if info is not None and info.style is not None:
        return info.style
    return PlotStyle(_OTHER_COLORS[index % len(_OTHER_COLORS)], "o", "-.")


def _algo_order(algos) -> list[str]:
    """Registered estimators first, in registration order (the paper's), then the rest sorted."""
    from gdpo_nemo.estimators import ESTIMATORS

    known = [a for a in ESTIMATORS if a in algos]
    return known + sorted(a for a in algos if a not in known)


def curve_stats(metrics: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (algo, step): mean and std over runs of `metric`, and n runs; finite values only."""
    rows = metrics[(metrics["metric"] == metric) & np.isfinite(metrics["value"])]
    if rows.empty:
        return pd.DataFrame(columns=["algo", "step", "mean", "std", "n"])
    grouped = rows.groupby([rows["algo"].astype(str), "step"])["value"]
    out = grouped.agg(["mean", "std", "count"]).reset_index().rename(columns={"count": "n"})
    out["std"] = out["std"].fillna(0.0)
    return out


def default_smoothing(steps: int) -> int:
    """Rolling window used when none is given: 1/25 of the steps, at least 1."""
    return max(1, int(round(steps / 25)))


def _runs_with_data(dataset: Dataset, metrics: list[str]) -> dict[str, int]:
    """{algo: runs that logged a finite value of any of `metrics`}: the n of the legend."""
    rows = dataset.metrics[dataset.metrics["metric"].isin(metrics) & np.isfinite(dataset.metrics["value"])]
    return rows.groupby(rows["algo"].astype(str))["run_id"].nunique().to_dict() if not rows.empty else {}


def _legend_columns(labels: list[str], width_in: float) -> int:
    """How many legend entries fit side by side in `width_in` inches at 8 pt (about 0.075 in
    a character, plus the line sample and the gaps)."""
    widest = max((len(label) for label in labels), default=1)
    return max(1, min(len(labels), int(width_in // (0.075 * widest + 0.55))))


def plot_panels(dataset: Dataset, metrics: list[str], out_stem: Path, *, title: str, smooth: int | None = None,
                ylabels: dict | None = None, units: dict | None = None) -> list[Path]:
    """One panel per metric, one mean line and +-1 std band per algo (clipped to the range the
    runs logged, so a rate's band stays in [0, 1]; drawn only at steps with two or more runs,
    so a step one run reached is a point of the line, not a band pinched to it); markers on
    the lines of runs with few logged steps; each panel's y axis says what it counts (`units`,
    default "mean over runs"); the legend's n counts the runs with data in these panels, and
    wraps to the figure's width; margins come from the labels drawn. Returns [png, pdf]."""
    plt = _pyplot()
    panels = [m for m in metrics]
    columns = 2 if len(panels) == 4 else min(3, len(panels))
    nrows = math.ceil(len(panels) / columns)
    with plt.rc_context(RC):
        height, width = 2.1 * nrows + 1.0, max(4.8, 2.4 * columns + 0.4)
        fig, axes = plt.subplots(nrows, columns, figsize=(width, height), squeeze=False)
        algos = _algo_order(set(dataset.runs["algo"]))
        seeds = _runs_with_data(dataset, panels)
        spread = max(seeds.values(), default=0) > 1
        wanted = dataset.metrics[dataset.metrics["metric"].isin(panels)]  # one pass over the big frame
        for ax, metric in zip(axes.flat, panels):
            stats = curve_stats(wanted, metric)
            steps = stats["step"].nunique() if not stats.empty else 0
            window = smooth or default_smoothing(steps)
            values = wanted.loc[wanted["metric"] == metric, "value"]
            values = values[np.isfinite(values)]
            low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 0.0)
            for index, algo in enumerate(algos):
                curve = stats[stats["algo"] == algo].sort_values("step")
                if curve.empty:
                    continue
                mean = curve["mean"].rolling(window, min_periods=1).mean().to_numpy()
                std = curve["std"].rolling(window, min_periods=1).mean().to_numpy()
                style = algo_style(algo, index)
                color, line = style.color, style.linestyle
                marker = "o" if len(curve) <= 12 else None  # a short run is a few points: show them
                ax.plot(curve["step"], mean, color=color, linestyle=line, marker=marker, markersize=3,
                        label=f"{algo_label(algo)} (n={seeds.get(algo, 0)})")
                several = curve["n"].to_numpy() >= 2
                if seeds.get(algo, 0) > 1 and several.any():
                    ax.fill_between(curve["step"], np.clip(mean - std, low, high), np.clip(mean + std, low, high),
                                    where=several, interpolate=False, color=color, alpha=0.18, linewidth=0)
            name = (ylabels or {}).get(metric, metric)
            ax.set_title(name + (f" (rolling {window})" if window > 1 else ""))
            ax.set_ylabel((units or {}).get(metric, "mean over runs"))
            ax.set_xlabel("training step")
            ax.grid(True, alpha=0.3)
            if stats.empty:
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="0.4")
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        for ax in axes.flat:
            h, l = ax.get_legend_handles_labels()
            if len(h) > len(handles):
                handles, labels = h, l
        legend_rows = 0
        if handles:
            ncols = _legend_columns(labels, width - 0.2)
            legend_rows = math.ceil(len(handles) / ncols)
            fig.legend(handles, labels, loc="lower center", ncols=ncols, frameon=False)
        spread_note = ("mean ± 1 std over seeds (bands clipped to the logged range)" if spread
                       else "one run per method: no spread shown")
        fig.suptitle(title + "\n" + spread_note, fontsize=9)
        # Margins from what was drawn (tick labels like -0.04, the two-line title), with room
        # at the bottom for the legend's rows.
        bottom = (0.12 + 0.2 * legend_rows) / height
        fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0), h_pad=1.2, w_pad=1.0)  # tight_layout makes room for the suptitle
        paths = []
        out_stem.parent.mkdir(parents=True, exist_ok=True)
        for suffix in (".png", ".pdf"):
            path = out_stem.parent / (out_stem.name + suffix)  # not with_suffix: "qwen2.5-1.5b" has a dot
            fig.savefig(path, dpi=200)
            paths.append(path)
        plt.close(fig)
    return paths


def _groups(dataset: Dataset):
    for key, runs in dataset.runs.groupby(["experiment", "task", "model"], sort=True):
        ids = set(runs["run_id"])
        yield key, Dataset(dataset.metrics[dataset.metrics["run_id"].isin(ids)], runs, dataset.problems)


def _component_order(runs: pd.DataFrame, found: list[str]) -> list[str]:
    declared = [c for text in runs["reward_components"] for c in str(text).split(",") if c]
    order = list(dict.fromkeys(declared))
    return sorted(found, key=lambda name: (order.index(name) if name in order else len(order), name))


def plot_reward_curves(dataset: Dataset, out_dir: Path, *, smooth: int | None = None) -> list[Path]:
    """Per-reward training curves for every (experiment, task, model); returns written paths."""
    paths = []
    for (experiment, task, model), part in _groups(dataset):
        names = mn.components((str(m) for m in part.metrics["metric"].unique()), mn.train(mn.REWARD))
        components = _component_order(part.runs, names)
        metrics = [mn.train(mn.reward(c)) for c in components] + [mn.train(mn.reward())]
        logged = set(part.metrics["metric"].unique())
        if not any(m in logged for m in metrics):
            continue
        labels = {mn.train(mn.reward(c)): f"{c} reward" for c in components} | {mn.train(mn.reward()): "total reward"}
        paths += plot_panels(part, metrics, out_dir / f"curves__{experiment}__{task}__{model}",
                             title=f"{experiment} / {task} / {model}: training rewards", smooth=smooth, ylabels=labels)
    return paths


def plot_diagnostics(dataset: Dataset, out_dir: Path, *, smooth: int | None = None) -> list[Path]:
    """``train/adv/distinct_groups`` (and zero-std fractions) for every (experiment, task, model)."""
    paths = []
    for (experiment, task, model), part in _groups(dataset):
        present = [str(m) for m in part.metrics["metric"].unique()]
        zero = [mn.train(mn.zero_std_frac(c))
                for c in _component_order(part.runs, mn.components(present, mn.train(mn.ZERO_STD_FRAC)))]
        distinct = mn.train(mn.DISTINCT_GROUPS)
        metrics = ([distinct] if distinct in present else []) + zero
        if not metrics:
            continue
        labels = {distinct: "distinct advantage groups"} | {m: f"zero-std groups: {m.rsplit('/', 1)[1]}" for m in zero}
        units = {distinct: "groups with distinct\nadvantage tuples (count)"} | {
            m: "share of the batch's groups" for m in zero}
        paths += plot_panels(part, metrics, out_dir / f"advantage_groups__{experiment}__{task}__{model}",
                             title=f"{experiment} / {task} / {model}: advantage diagnostics", smooth=smooth, ylabels=labels,
                             units=units)
    return paths


MECHANISM_COLLAPSE = mn.train(mn.COLLAPSED_FRAC)
MECHANISM_EXCEED = mn.train(mn.EXCEED_RATE)


def plot_mechanism(dataset: Dataset, out_dir: Path, *, smooth: int | None = None) -> list[Path]:
    """For every (experiment, task, model) whose runs log both ``train/adv/collapsed_frac`` and
    ``train/exceed_rate`` (a length reward), one figure: the collapse share (the paper's Fig. 3
    count on the batches trained) beside each other reward's curve (accuracy) and the exceed
    rate, and ``mechanism__<experiment>__<task>__<model>.csv`` with the unsmoothed values
    plotted (algo, step, metric, mean over runs, std, n). Returns the written paths."""
    paths = []
    for (experiment, task, model), part in _groups(dataset):
        present = {str(m) for m in part.metrics["metric"].unique()}
        if not {MECHANISM_COLLAPSE, MECHANISM_EXCEED} <= present:
            continue
        names = mn.components(sorted(present), mn.train(mn.REWARD))
        outcome = [mn.train(mn.reward(c)) for c in _component_order(part.runs, names) if c != "length"]
        metrics = [MECHANISM_COLLAPSE, *outcome, MECHANISM_EXCEED]
        labels = {MECHANISM_COLLAPSE: "GRPO-collapsed groups", MECHANISM_EXCEED: "responses over the length limit"} | {
            m: f"{m.rsplit('/', 1)[1]} reward" for m in outcome}
        units = {MECHANISM_COLLAPSE: "share of the batch's groups", MECHANISM_EXCEED: "share of the batch's responses"}
        stem = out_dir / f"mechanism__{experiment}__{task}__{model}"
        paths += plot_panels(part, metrics, stem, title=f"{experiment} / {task} / {model}: mechanism and outcome",
                             smooth=smooth, ylabels=labels, units=units)
        wanted = part.metrics[part.metrics["metric"].isin(metrics)]
        table = pd.concat([curve_stats(wanted, m).assign(metric=m) for m in metrics], ignore_index=True)
        csv = stem.parent / (stem.name + ".csv")
        table[["algo", "step", "metric", "mean", "std", "n"]].sort_values(["metric", "algo", "step"]).to_csv(csv, index=False)
        paths.append(csv)
    return paths
