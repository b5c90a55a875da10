"""Run configs against NeMo RL's own loader and MasterConfig (examples/run_grpo.py's path).

Every composed run of every experiment must pass the four steps run_grpo.py takes before
anything else (load_config, parse_hydra_overrides, OmegaConf.to_container(resolve=True),
MasterConfig(**config)); a user override NeMo RL refuses must be refused by
`gdpo-nemo config show` and `gdpo-nemo sweep` before anything is written or submitted,
with NeMo RL's own message.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gdpo_nemo import config as cc

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(cc.list_experiments())
# NeMo RL's SequencePackingConfig.microbatch_order is Literal["packer", "largest_first"];
# gdpo_nemo's copy of the schema types it as a string, so only NeMo RL's own check refuses it.
BAD_KEY = "policy.sequence_packing.microbatch_order"
BAD_FOR_NEMO_RL = f"{BAD_KEY}=shortest_first"
NEMO_RL_SAYS = "Input should be 'packer' or 'largest_first'"


def _gdpo_nemo(capsys, *args) -> tuple[int, str]:
    """`gdpo-nemo ARGS` run in this interpreter (NeMo RL's venv): (exit code, stderr)."""
    from gdpo_nemo.cli import main

    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_run_of_the_experiment_passes_nemo_rl_master_config(experiment):
    """One run per choice (task, model, algo, cluster, overrides): the seeds of a choice are
    one composition with grpo.seed, the names and dirs set (tests/test_configs_compose_cache.py
    proves it against Hydra's own composition), values NeMo RL's schema types alike; 50 runs
    of the 122, about half of this check's time."""
    from gdpo_nemo.engines.nemo.validation import check_configs

    specs = cc.load_experiment(experiment)
    first_seed = {}
    for spec in specs:
        first_seed.setdefault((spec.task, spec.model, spec.algo, spec.cluster, spec.overrides), spec)
    verdicts = check_configs({spec.run_id.name: spec.compose() for spec in first_seed.values()}, "in-process")
    refused = {name: lines for name, lines in verdicts.items() if lines}
    assert not refused, refused
    assert len(verdicts) == len(first_seed) > 0


def test_nemo_rl_refuses_a_config_our_schema_accepts_and_names_the_key():
    from gdpo_nemo.engines.nemo.validation import check_configs

    config = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n8g", overrides=[BAD_FOR_NEMO_RL])
    (lines,) = check_configs({"run": config}, "in-process").values()
    assert f"{BAD_KEY}: NeMo RL MasterConfig: {NEMO_RL_SAYS} (got 'shortest_first')" in lines


def test_config_show_refuses_what_nemo_rl_refuses_with_its_message(tmp_path, capsys):
    out = tmp_path / "run.yaml"
    code, err = _gdpo_nemo(capsys, "config", "show", "task=gsm8k", "model=qwen2.5-1.5b-instruct", "algo=gdpo",
                           "cluster=nemo_1n8g", BAD_FOR_NEMO_RL, "-o", out)
    assert code == 2, err
    # One error line (torch may warn about pynvml on stderr first when this test imports it).
    (error,) = [line for line in err.splitlines() if line.startswith("gdpo-nemo config: error: ")]
    assert f"{BAD_KEY}: NeMo RL MasterConfig: {NEMO_RL_SAYS} (got 'shortest_first')" in error
    assert not out.exists()


def test_sweep_refuses_before_sbatch_what_nemo_rl_refuses(tmp_path, capsys, monkeypatch):
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "badkv.yaml").write_text(
        "description: one gsm8k run with an override NeMo RL refuses\n"
        "cluster: nemo_1n8g\nseeds: [0]\n"
        f"overrides: [{BAD_FOR_NEMO_RL}]\n"
        "runs:\n  - {tasks: [gsm8k], models: [qwen2.5-1.5b-instruct], algos: [gdpo]}\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "sbatch-was-called"
    for tool in ("sbatch", "squeue", "sacct", "scancel"):  # a Slurm that only records being called
        (bin_dir / tool).write_text(f"#!/bin/sh\ntouch {called}\nexit 1\n")
        (bin_dir / tool).chmod(0o755)
    nemo_rl_dir = tmp_path / "nemo-rl"
    nemo_rl_dir.mkdir()
    (nemo_rl_dir / "ray.sub").write_text("#!/bin/bash\n")
    profile = tmp_path / "cluster.yaml"
    profile.write_text(
        "description: test\naccount: null\npartition: p\ntime: \"01:00:00\"\ngpus_per_node: 8\n"
        f"container: /images/nemo-rl-7ea279ab.sqsh\nnemo_rl_dir: {nemo_rl_dir}\n"
    )
    monkeypatch.setenv("GDPO_NEMO_EXPERIMENTS", str(experiments))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    sweep_dir = tmp_path / "sweep"
    code, err = _gdpo_nemo(capsys, "sweep", "badkv", "--cluster", profile, "--submit", "--sweep-dir", sweep_dir)
    assert code == 2, err
    assert "NeMo RL's own config check refuses this sweep" in err
    assert f"badkv__gsm8k__qwen2.5-1.5b-instruct__gdpo__seed0: {BAD_KEY}: NeMo RL MasterConfig: {NEMO_RL_SAYS}" in err
    assert not called.exists() and not sweep_dir.exists()


def test_an_offline_nemo_config_leaves_data_path_out_and_nemo_rl_accepts_it():
    from gdpo_nemo.engines.nemo.validation import check_configs

    config = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n8g",
                        overrides=["data.train.source=offline", "data.validation.source=offline"])
    assert "data_path" not in config["data"]["train"] and "data_path" not in config["data"]["validation"]
    assert check_configs({"run": config}, "in-process") == {"run": []}


@pytest.mark.parametrize("option, model, component", [
    ("toolcall", "qwen2.5-1.5b-instruct", "correctness"), ("gsm8k", "qwen2.5-1.5b-instruct", "correctness"),
    ("math", "r1-distill-qwen-1.5b", "correctness"), ("code_3obj", "r1-distill-qwen-7b", "pass"),
])
def test_checkpoints_rank_by_the_task_accuracy_component_not_the_reward_sum(option, model, component):
    config = cc.compose(option, model, "gdpo", cluster="nemo_1n8g")
    assert config["checkpointing"]["metric_name"] == f"val:reward/{component}"


def test_a_checkpoint_metric_naming_no_reward_component_is_refused():
    with pytest.raises(cc.ConfigError, match=r"checkpointing.metric_name: 'val:reward/accuracy' names no reward component"):
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n8g",
                   overrides=["checkpointing.metric_name=val:reward/accuracy"])
