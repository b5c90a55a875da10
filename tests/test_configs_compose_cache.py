"""The composer keeps one unresolved composition per (choices, overrides, config tree, gdpo
defaults) for the process and sets each run's seed and experiment on a copy
(gdpo_nemo.config.compose._compose_resolved): the runs of a sweep then parse the YAML files once
per choice instead of once per seed. What it gives must be what Hydra composes for each run."""

from __future__ import annotations

import importlib
import shutil

import pytest

from gdpo_nemo import config as cc
from gdpo_nemo.config.files import to_plain

composer = importlib.import_module("gdpo_nemo.config.compose")  # the module (the package exports its function)


def _hydra(choices, seed, experiment, overrides):
    """Hydra's own composition of the run, in the composer's order (no kept composition)."""
    return to_plain(composer.hydra_compose([*choices, f"grpo.seed={seed}", f"gdpo.experiment={experiment}", *overrides]))


@pytest.mark.parametrize("experiment", sorted(cc.list_experiments()))
def test_each_run_gets_what_hydra_composes_for_it_with_its_own_seed(experiment):
    specs = cc.load_experiment(experiment)
    first = specs[0]
    same_choice = [s for s in specs if (s.task, s.model, s.algo, s.cluster, s.overrides) ==
                   (first.task, first.model, first.algo, first.cluster, first.overrides)][:2]
    for spec in same_choice + [specs[-1]]:
        choices = [f"task={spec.task}", f"model={spec.model}", f"algo={spec.algo}", f"cluster={spec.cluster}"]
        kept = composer._compose_resolved(choices, {"grpo.seed": spec.seed, "gdpo.experiment": spec.run_id.experiment},
                                          list(spec.overrides))
        assert kept == _hydra(choices, spec.seed, spec.run_id.experiment, list(spec.overrides)), spec.run_id.name
    if len(same_choice) == 2:  # two seeds of one choice: the second was a copy of the first's composition
        a, b = (spec.compose() for spec in same_choice)
        assert a["grpo"]["seed"] != b["grpo"]["seed"] and a["logger"]["log_dir"] != b["logger"]["log_dir"]


def test_an_interpolation_of_the_seed_reads_this_runs_seed():
    first = cc.compose("gsm8k", "tiny", "gdpo", seed=3, overrides=["+data.train.seed=${grpo.seed}"])
    second = cc.compose("gsm8k", "tiny", "gdpo", seed=4, overrides=["+data.train.seed=${grpo.seed}"])
    assert (first["data"]["train"]["seed"], second["data"]["train"]["seed"]) == (3, 4)


def test_an_override_of_the_seed_or_its_section_wins_as_in_hydras_order():
    assert cc.compose("gsm8k", "tiny", "gdpo", seed=3, overrides=["grpo.seed=9"])["grpo"]["seed"] == 9
    assert cc.compose("gsm8k", "tiny", "gdpo", seed=3, experiment="a", overrides=["gdpo.experiment=b"])["gdpo"]["experiment"] == "b"


def test_a_changed_config_file_is_read_again(tmp_path, monkeypatch):
    tree = tmp_path / "configs"
    shutil.copytree(cc.config_dir(), tree)
    monkeypatch.setenv("GDPO_NEMO_CONFIGS", str(tree))
    before = cc.compose("gsm8k", "tiny", "gdpo", seed=1)
    task_file = tree / "task" / "gsm8k.yaml"
    text = task_file.read_text()
    assert "max_num_steps: 1000000" in text
    task_file.write_text(text.replace("max_num_steps: 1000000", "max_num_steps: 7"))
    after = cc.compose("gsm8k", "tiny", "gdpo", seed=1)
    assert before["grpo"]["max_num_steps"] != 7 and after["grpo"]["max_num_steps"] == 7
