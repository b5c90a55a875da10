"""Every composed experiment config also runs one step on the local engine (CPU).

For each run of the paper's experiments, its config is composed with the model swapped for
the local engine's tiny random model (model=tiny), the local cluster profile (the task's
offline data instead of the paper's files), and the smoke experiment's size overrides
(experiments/smoke.yaml: 1 step, 2 prompts x 2 rollouts, 8 new tokens, no DAPO dynamic
sampling, which the local engine does not implement). Everything else (rewards, estimator,
weights, loss and optimizer settings) is the experiment's own file.

Every distinct config runs: two runs of an experiment that differ only in the model (swapped
for the tiny one here) or the seed compose to the same file up to those keys, so one of them
stands for both; everything else (task, algo, overrides: rewards, estimator, weights,
conditioned length) runs as its own step. 22 steps of about a second each.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import yaml

from gdpo_nemo import config as cc

PAPER_EXPERIMENTS = ("toolcall", "math", "math_conditioned_length", "coding", "gsm8k")
SMOKE_FILE = Path(__file__).resolve().parents[1] / "experiments" / "smoke.yaml"


def _tiny_overrides() -> list[str]:
    return list(yaml.safe_load(SMOKE_FILE.read_text())["overrides"])


def _shapes(spec) -> tuple[tuple, tuple]:
    gdpo = cc.compose(spec.task, "tiny", spec.algo, overrides=[o for o in spec.overrides if o.startswith("gdpo.")])["gdpo"]
    reward = (gdpo["task"], tuple(gdpo["reward_components"]), gdpo["conditioned_length"])
    weighted = any(w != 1 for w in (gdpo["reward_weights"] or {}).values())
    estimator = (gdpo["estimator"], weighted, gdpo["batch_norm"])
    return reward, estimator


@functools.lru_cache(maxsize=1)
def distinct_runs() -> list:
    """One run per distinct (experiment, task, algo, overrides) of the paper's matrix."""
    seen, runs = set(), []
    for name in PAPER_EXPERIMENTS:
        for spec in cc.load_experiment(name):
            key = (name, spec.task, spec.algo, tuple(spec.overrides))
            if key not in seen:
                seen.add(key)
                runs.append(spec)
    return runs


def test_the_runs_cover_every_reward_shape_and_estimator_kind_of_the_matrix():
    shapes = {_shapes(spec) for spec in distinct_runs()}
    # the paper's matrix: 6 reward shapes (toolcall, gsm8k, math, conditioned math, code 2/3
    # objectives) and 6 estimator kinds (grpo, gdpo, grpo_no_std, gdpo_no_bn, weighted grpo/gdpo)
    assert len({pair[0] for pair in shapes}) == 6 and len({pair[1] for pair in shapes}) == 6


@pytest.mark.parametrize("spec", distinct_runs(), ids=lambda s: f"{s.run_id.experiment}-{s.task}-{s.algo}")
def test_experiment_config_runs_one_step_on_the_local_engine(spec, tmp_path):
    from gdpo_nemo.engines.local import config as local_config
    from gdpo_nemo.engines.local import trainer

    config = cc.compose(
        spec.task,
        "tiny",
        spec.algo,
        cluster="local",
        seed=spec.seed,
        experiment=spec.run_id.experiment,
        overrides=[*spec.overrides, *_tiny_overrides()],
    )
    assert config["gdpo"]["engine"] == "local"
    checked, _ = local_config.resolve_and_check(config)
    result = trainer.train(checked, tmp_path, log=lambda *a, **k: None)
    assert result.steps == 1
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 1
    for name in config["gdpo"]["reward_components"]:
        assert f"train/reward/{name}" in records[-1]
    assert (tmp_path / "DONE").is_file()
