"""The quickstart's report: GRPO vs GDPO training curves and the summary table.

`gdpo-nemo quickstart` (gdpo_nemo.engines.local.quickstart) trains the two runs and hands
their metrics.jsonl records here:

    plot_curves     quickstart_curves.png: per-reward training curves, both methods on each
                    panel, and the share of zero-variance groups per reward
    summary_table   summary.md: first / final per-reward values of both methods, their
                    training time (the sum of their steps' times) and the command's wall time

`histories` maps a method's label ("GDPO", "GRPO") to its run's records in step order
(`gdpo_nemo.runs.rundir.read_metrics`); `names` are the reward components.
"""

from __future__ import annotations

from pathlib import Path

from gdpo_nemo.runs import metric_names as mn

# Steps averaged for the "first" and "final" values of the summary (single steps of 16
# rollouts are noisy), and the width of the curves' trailing mean.
WINDOW = 5
FIGURE_FILE = "quickstart_curves.png"
SUMMARY_FILE = "summary.md"


def write_report(histories: dict, names: list, seconds: dict, total: float, out: Path) -> tuple[Path, Path, str]:
    """Write `out`/quickstart_curves.png (`plot_curves`) and `out`/summary.md
    (`summary_table`; `seconds`: per method, the seconds its steps took, `total`: the wall
    seconds of the whole command).
    Returns (figure path, summary path, summary text)."""
    out = Path(out)
    figure = plot_curves(histories, names, out / FIGURE_FILE)
    table = summary_table(histories, names, seconds, total)
    summary = out / SUMMARY_FILE
    summary.write_text(table)
    return figure, summary, table


def _series(history: list, key: str) -> tuple[list, list]:
    """(steps, values) of `key` over the training steps (step > 0) that logged it."""
    points = [(r["step"], r[key]) for r in history if key in r and r[key] is not None and r["step"] > 0]
    return [p[0] for p in points], [p[1] for p in points]


def _window_mean(values: list, first: bool) -> float:
    part = values[:WINDOW] if first else values[-WINDOW:]
    return sum(part) / len(part) if part else float("nan")


def summary_table(histories: dict, names: list, seconds: dict, total: float) -> str:
    """Markdown table: per method, each reward's mean over the first and the last
    `WINDOW` steps, and the share of zero-variance groups."""
    lines = [
        f"Quickstart: GRPO vs GDPO, same seed and prompts. Values are means over the first / last {WINDOW} steps.",
        "",
        "| method | " + " | ".join(f"{n} (first -> final)" for n in names) + " | sum (first -> final) | zero-std share (first -> final) | training time |",
        "|---|" + "---|" * (len(names) + 3),
    ]
    for label, history in histories.items():
        cells = []
        for key in [mn.train(mn.reward(n)) for n in names] + [mn.train(mn.reward())]:
            _, values = _series(history, key)
            cells.append(f"{_window_mean(values, True):.3f} -> {_window_mean(values, False):.3f}")
        zero = [sum(r[mn.train(mn.zero_std_frac(n))] for n in names) / len(names) for r in history
                if mn.train(mn.zero_std_frac(names[0])) in r]
        cells.append(f"{_window_mean(zero, True):.2f} -> {_window_mean(zero, False):.2f}")
        cells.append(f"{seconds[label] / 60:.1f} min")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Training time: the sum of the run's step times (the two runs run side by side, one CPU thread each).",
              f"Wall time of the command (including model conversion and warm-start when not cached): {total / 60:.1f} min", ""]
    return "\n".join(lines)


def _smooth(values: list, width: int = WINDOW) -> list:
    """Trailing mean over the last `width` values (fewer at the start), same length."""
    out = []
    for i in range(len(values)):
        part = values[max(0, i - width + 1):i + 1]
        out.append(sum(part) / len(part))
    return out


def plot_curves(histories: dict, names: list, path: Path) -> Path:
    """`curves_figure` saved at `path`."""
    import matplotlib.pyplot as plt

    fig = curves_figure(histories, names)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curves_figure(histories: dict, names: list):
    """One panel per reward (and their sum), both methods on each; a second row with the
    share of groups in which that reward has zero variance. Each method in its registered
    colour (the estimator registry's PlotStyle, as in every report figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gdpo_nemo.analysis.figures import algo_style

    columns = len(names) + 1
    fig, axes = plt.subplots(2, columns, figsize=(3.4 * columns, 6.0), sharex=True, squeeze=False)
    colors = {label: algo_style(label.lower(), index).color for index, label in enumerate(histories)}
    panels = [(mn.train(mn.reward(n)), n) for n in names] + [(mn.train(mn.reward()), "sum of rewards")]
    for column, (key, title) in enumerate(panels):
        ax = axes[0][column]
        for label, history in histories.items():
            steps, values = _series(history, key)
            ax.plot(steps, values, color=colors.get(label), alpha=0.25, linewidth=1)
            ax.plot(steps, _smooth(values), color=colors.get(label), linewidth=2, label=label)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"train reward (mean; {WINDOW}-step average bold)")
    axes[0][0].legend()
    zero_panels = [(mn.train(mn.zero_std_frac(n)), n) for n in names]
    for column, (key, title) in enumerate(zero_panels):
        ax = axes[1][column]
        for label, history in histories.items():
            steps, values = _series(history, key)
            ax.plot(steps, _smooth(values), color=colors.get(label), linewidth=2, label=label)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"zero-variance groups: {title}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[1][0].set_ylabel("share of groups")
    ax = axes[1][columns - 1]
    for label, history in histories.items():
        steps, values = _series(history, mn.train(mn.DISTINCT_GROUPS))
        ax.plot(steps, _smooth(values), color=colors.get(label), linewidth=2, label=label)
    ax.set_title("distinct advantage groups")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    fig.suptitle("GRPO vs GDPO on the CPU quickstart (SmolLM2-135M-Instruct, arithmetic, 3 rewards)")
    fig.tight_layout()
    return fig
