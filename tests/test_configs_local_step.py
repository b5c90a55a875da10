"""Every composed experiment config also runs one step on the local engine (CPU).

For each run of the paper's experiments, its config is composed with the model swapped for
the local engine's tiny random model (model=tiny), the local cluster profile (the task's
offline data instead of the paper's files), and the smoke experiment's size overrides
(experiments/smoke.yaml: 1 step, 2 prompts x 2 rollouts, 8 new tokens, no DAPO dynamic
sampling, which the local engine does not implement). Everything else (rewards, estimator,
weights, loss and optimizer settings) is the experiment's own file.

Deduplication (to stay within ~90 s on 2 CPU cores): two runs that differ only in the model,
seed, cluster or hyperparameter values exercise the same code once the model is tiny. What
changes the code path is the reward shape (task, components, conditioned length) and the
estimator kind (estimator, weighted or not, batch norm). The runs below are a greedy cover:
every reward shape and every estimator kind of the matrix runs at least once
(`test_the_chosen_runs_cover_every_shape_of_the_matrix` checks it).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import yaml

from gdpo_nemo import config_compose as cc

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
def matrix() -> tuple[dict, list]:
    """({(reward shape, estimator kind): first spec}, greedy cover of both shape sets)."""
    by_pair: dict = {}
    for name in PAPER_EXPERIMENTS:
        for spec in cc.load_experiment(name):
            key = (spec.task, spec.algo, tuple(spec.overrides))
            if key in {(s.task, s.algo, tuple(s.overrides)) for s in by_pair.values()}:
                continue
            by_pair.setdefault(_shapes(spec), spec)
    rewards_left = {pair[0] for pair in by_pair}
    kinds_left = {pair[1] for pair in by_pair}
    chosen = []
    while rewards_left or kinds_left:
        pair = max(by_pair, key=lambda p: (p[0] in rewards_left) + (p[1] in kinds_left))
        chosen.append(by_pair[pair])
        rewards_left.discard(pair[0])
        kinds_left.discard(pair[1])
    return by_pair, chosen


def test_the_chosen_runs_cover_every_shape_of_the_matrix():
    by_pair, chosen = matrix()
    chosen_pairs = {pair for pair, spec in by_pair.items() if spec in chosen}
    assert {p[0] for p in chosen_pairs} == {p[0] for p in by_pair}
    assert {p[1] for p in chosen_pairs} == {p[1] for p in by_pair}
    # the paper's matrix: 6 reward shapes (toolcall, gsm8k, math, conditioned math, code 2/3
    # objectives) and 6 estimator kinds (grpo, gdpo, grpo_no_std, gdpo_no_bn, weighted grpo/gdpo)
    assert len({p[0] for p in by_pair}) == 6 and len({p[1] for p in by_pair}) == 6
    assert len(chosen) < len(by_pair)


@pytest.mark.parametrize("spec", matrix()[1], ids=lambda s: f"{s.run_id.experiment}-{s.task}-{s.algo}")
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
