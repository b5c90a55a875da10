"""Paper Fig. 2 (toy table) and Fig. 3 (distinct advantage groups vs G and vs n).

`gdpo-nemo collapse-figures [--out paper_figures/]` (gdpo_nemo.commands.collapse_figures) writes
(the report writes Fig. 3 by `fig3`; the counting is gdpo_nemo.estimators.collapse)
  fig2_toy.md                           n=2, G=2: distinct groups per estimator
  fig3_advantage_groups.{png,pdf}       left: n=2, G=2..16; right: G=4, n=1..6
  fig3_advantage_groups.json            the plotted counts, with "exact" or "sampled" per point
Sampled points (settings too large to enumerate) are drawn hollow: they are lower bounds.
"""

from __future__ import annotations

import json
from pathlib import Path


# The estimators, labels and styles come from the registry (gdpo_nemo.estimators), imported
# inside the functions: `gdpo-nemo collapse-figures --help` must not import torch.


def fig3_estimators() -> list[str]:
    """The estimators drawn in the paper's Fig. 3 (registered with ``in_fig3``), in
    registration order: grpo, grpo_no_std, gdpo."""
    from gdpo_nemo.estimators import ESTIMATORS

    return [name for name, info in ESTIMATORS.items() if info.in_fig3]


def fig3_counts(
    group_sizes=range(2, 17), num_rewards_range=range(1, 7), *, max_enumerate=None, samples=100_000, progress=True
) -> dict:
    """Counts for both panels: {"vs_group_size": [...rows], "vs_num_rewards": [...rows]}."""
    from tqdm import tqdm

    from gdpo_nemo.estimators.collapse import DEFAULT_MAX_ENUMERATE, count_advantage_groups

    limit = DEFAULT_MAX_ENUMERATE if max_enumerate is None else max_enumerate
    settings = [("vs_group_size", 2, g) for g in group_sizes] + [("vs_num_rewards", n, 4) for n in num_rewards_range]
    out: dict[str, list] = {"vs_group_size": [], "vs_num_rewards": []}
    jobs = [(panel, n, g, e) for panel, n, g in settings for e in fig3_estimators()]
    for panel, n, g, estimator in tqdm(jobs, desc="counting advantage groups", disable=not progress):
        out[panel].append(count_advantage_groups(estimator, n, g, max_enumerate=limit, samples=samples))
    return out


def fig2_table() -> str:
    """Markdown table of the paper's toy (n=2 binary rewards, G=2), before batch norm."""
    from gdpo_nemo.estimators import estimator_info
    from gdpo_nemo.estimators.collapse import count_advantage_groups

    lines = ["| estimator | distinct advantage groups (n=2, G=2) |", "|---|---|"]
    for estimator in fig3_estimators():
        count = count_advantage_groups(estimator, 2, 2)["distinct_groups"]
        lines.append(f"| {estimator_info(estimator).label} | {count} |")
    return "\n".join(lines) + "\n"


def plot_fig3(counts: dict, out_stem: Path) -> list[Path]:
    """Draw both panels from `fig3_counts` output; write PNG and PDF; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gdpo_nemo.analysis.figures import algo_label, algo_style

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), constrained_layout=True)
    panels = (("vs_group_size", "group_size", "rollouts per prompt G (n = 2)"),
              ("vs_num_rewards", "num_rewards", "number of rewards n (G = 4)"))
    for ax, (panel, x_key, x_label) in zip(axes, panels):
        for index, estimator in enumerate(fig3_estimators()):
            rows = [r for r in counts[panel] if r["estimator"] == estimator]
            style = algo_style(estimator, index)
            color, marker = style.color, style.marker
            xs = [r[x_key] for r in rows]
            ys = [r["distinct_groups"] for r in rows]
            ax.plot(xs, ys, color=color, label=algo_label(estimator), linewidth=1.8)
            for x, y, r in zip(xs, ys, rows):
                filled = r["method"] == "exact"
                ax.plot([x], [y], marker=marker, color=color, markersize=5,
                        markerfacecolor=color if filled else "white")
        ax.set_xlabel(x_label)
        ax.set_ylabel("distinct advantage groups")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].legend(frameon=False)
    if any(r["method"] != "exact" for rows in counts.values() for r in rows):
        axes[1].text(0.02, 0.02, "hollow: sampled (lower bound)", transform=axes[1].transAxes, fontsize=8)
    fig.suptitle("Distinct advantage groups from binary rewards (before batch norm)", fontsize=11)
    paths = []
    for suffix in (".png", ".pdf"):
        path = out_stem.with_suffix(suffix)
        fig.savefig(path, dpi=200)
        paths.append(path)
    plt.close(fig)
    return paths


def write_collapse_figures(out_dir: Path, *, samples: int = 100_000, max_enumerate=None, progress=True) -> list[Path]:
    """Write Fig. 2's table and Fig. 3 (plot + data) into `out_dir`; return the written paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    toy = out_dir / "fig2_toy.md"
    toy.write_text(fig2_table())
    counts = fig3_counts(samples=samples, max_enumerate=max_enumerate, progress=progress)
    data = out_dir / "fig3_advantage_groups.json"
    data.write_text(json.dumps(counts, indent=1) + "\n")
    return [toy, data, *plot_fig3(counts, out_dir / "fig3_advantage_groups")]


def fig3(out_dir: Path, *, counts_path: Path | None = None, samples: int = 20_000, progress: bool = True) -> list[Path]:
    """Paper Fig. 3 into `out_dir` (the report's and the notebooks' entry).

    Reuses the counts JSON at `counts_path` (or ``out_dir/fig3_advantage_groups.json``) when
    it exists; else counts (exact where small, `samples` random groups where not) and saves it.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "fig3_advantage_groups.json"
    source = next((p for p in (counts_path, target) if p is not None and Path(p).exists()), None)
    if source is not None:
        counts = json.loads(Path(source).read_text())
    else:
        counts = fig3_counts(samples=samples, progress=progress)
    if source != target:
        target.write_text(json.dumps(counts, indent=1) + "\n")
    return [target, *plot_fig3(counts, out_dir / "fig3_advantage_groups")]
