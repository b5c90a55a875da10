"""Calibrating the length limit l on a run's own first steps (`gdpo-nemo lengths`,
gdpo_nemo.engines.local.calibration): the profile's arithmetic by hand, and the command's
rollouts are the ones the run's first step trains on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gdpo_nemo.cli import main
from gdpo_nemo.engines.local.calibration import LengthProfile
from gdpo_nemo.runs.rundir import read_metrics

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "local" / "tiny.yaml"
MATH = ["gdpo.task=math", "gdpo.length_limit=10", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4"]


def profile() -> LengthProfile:
    return LengthProfile(lengths=[10, 20, 30, 40, 50, 60, 70, 80], truncated=[False] * 7 + [True],
                         rewards={"correctness": [1, 0, 0, 0, 1, 1, 1, 1], "length": [1, 1, 1, 1, 0, 0, 0, 0]},
                         group_size=4, max_new_tokens=80, limit=45)


def test_the_exceed_share_and_varying_groups_at_a_limit_are_counted_by_hand():
    lengths = profile()
    assert lengths.exceed_share(35) == 5 / 8                 # 40, 50, 60, 70, 80
    assert lengths.length_varying_share(35) == 0.5           # group 1 (10-40) varies; group 2 (50-80) all over
    assert lengths.length_varying_share(45) == 0.0           # each group on one side
    assert lengths.varying_share(lengths.rewards["correctness"]) == 0.5
    assert lengths.quantile(0.5) == 40 and lengths.quantile(0.2) == 20 and lengths.quantile(0.8) == 70


def test_the_suggested_limit_puts_the_exceed_share_nearest_one_half_and_none_when_nothing_can():
    assert profile().suggest() == 40  # 40..49 all leave 4 of 8 over; the smallest of the tie
    flat = LengthProfile(lengths=[30] * 8, truncated=[False] * 8, rewards={}, group_size=4, max_new_tokens=80)
    assert flat.suggest() is None  # every response the same length: 0 or 1, never 40-60 %
    text = profile().report([35, 45])
    assert "| 35 | 0.625 | 0.500 |" in text and "| length (l = 45) | 0.500 | 0.000 |" in text
    assert "suggested l" in text and ": 40" in text.splitlines()[-1]


def test_the_command_samples_exactly_the_rollouts_of_the_runs_first_step(tmp_path, capsys):
    out = tmp_path / "lengths.json"
    assert main(["lengths", "--config", str(TINY), "--batches", "1", "--json", str(out), *MATH]) == 0
    printed = capsys.readouterr().out
    assert "suggested l" in printed and "| l | exceed share |" in printed
    found = json.loads(out.read_text())
    assert len(found["lengths"]) == 8 and found["limit"] == 10
    assert main(["train", "--config", str(TINY), "--run-dir", str(tmp_path / "run"), "grpo.max_num_steps=1", *MATH]) == 0
    [step] = read_metrics(tmp_path / "run")
    lengths = found["lengths"]
    assert step["train/mean_gen_tokens_per_sample"] == pytest.approx(sum(lengths) / len(lengths))
    assert step["train/exceed_rate"] == pytest.approx(sum(x > 10 for x in lengths) / len(lengths))
    for name, values in found["rewards"].items():
        assert step[f"train/reward/{name}"] == pytest.approx(sum(values) / len(values))


def test_a_config_without_a_length_reward_is_refused_naming_the_key(capsys):
    assert main(["lengths", "--config", str(TINY)]) == 2
    assert "gdpo.reward_components" in capsys.readouterr().err
