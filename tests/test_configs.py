"""Specification of the config tree, its composition and validation (gdpo_nemo.config).

Every experiment of the paper composes and validates; the paper's hyperparameters land on
NeMo RL's keys; gdpo.estimator maps onto grpo.adv_estimator; bad input fails before anything
launches, naming the key path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gdpo_nemo import config as cc
from gdpo_nemo.config import key_walk, nemo_keys
from gdpo_nemo.runs.run_id import RunId

REPO = Path(__file__).resolve().parents[1]
PAPER_EXPERIMENTS = ("toolcall", "math", "math_conditioned_length", "coding", "gsm8k")


@pytest.fixture(scope="module")
def toolcall_gdpo():
    return cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n8g", experiment="toolcall")


# ---------------------------------------------------------------------------------------
# Every experiment composes and validates
# ---------------------------------------------------------------------------------------


def test_the_paper_experiments_smoke_the_studies_and_the_regeneration_run_are_listed_with_descriptions():
    experiments = cc.list_experiments()
    assert set(experiments) == {*PAPER_EXPERIMENTS, "smoke", "gpu_study", "cpu_study", "tension_study", "regeneration"}
    assert all(len(description) > 20 for description in experiments.values())


@pytest.mark.parametrize("name", [*PAPER_EXPERIMENTS, "smoke", "gpu_study", "cpu_study", "tension_study", "regeneration"])
def test_every_run_of_the_experiment_composes_validates_and_names_itself(name):
    specs = cc.load_experiment(name)
    assert len({spec.run_id for spec in specs}) == len(specs)
    for spec in specs:
        config = spec.compose()  # compose() validates; a ConfigError fails the test
        assert RunId.from_config(config) == spec.run_id
        assert config["gdpo"]["experiment"] == name
        assert config["grpo"]["seed"] == spec.seed


@pytest.mark.parametrize("name", PAPER_EXPERIMENTS)
def test_every_paper_run_on_nemo_rl_logs_to_wandb_and_tensorboard_under_its_run_id(name):
    specs = cc.load_experiment(name)
    for spec in specs:
        config = spec.compose()
        assert config["gdpo"]["engine"] == "nemo"
        logger = config["logger"]
        assert (logger["wandb_enabled"], logger["tensorboard_enabled"]) == (True, True), spec.run_id
        assert (logger["wandb"]["name"], logger["wandb"]["group"]) == (spec.run_id.name, spec.run_id.group)


def test_one_key_turns_wandb_off_and_the_local_engine_keeps_it_off_by_default():
    off = cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n8g", overrides=["logger.wandb_enabled=false"])
    assert (off["logger"]["wandb_enabled"], off["logger"]["tensorboard_enabled"]) == (False, True)
    local = cc.compose("gsm8k", "tiny", "gdpo", cluster="local")
    assert local["logger"]["wandb_enabled"] is False


def test_tool_calling_runs_five_seeds_of_grpo_gdpo_and_grpo_no_std_on_both_models_plus_gdpo_no_bn():
    specs = cc.load_experiment("toolcall")
    runs = {(s.model, s.algo) for s in specs}
    assert runs == {
        (m, a) for m in ("qwen2.5-1.5b-instruct", "qwen2.5-3b-instruct") for a in ("grpo", "gdpo", "grpo_no_std")
    } | {("qwen2.5-1.5b-instruct", "gdpo_no_bn")}
    assert sorted({s.seed for s in specs}) == [0, 1, 2, 3, 4]
    assert len(specs) == 35


def test_weight_ablation_covers_w_length_one_to_a_quarter_for_grpo_and_gdpo():
    specs = cc.load_experiment("math_conditioned_length")
    weighted = [s for s in specs if "wlen" in s.algo]
    weights = {cc.compose(s.task, s.model, s.algo)["gdpo"]["reward_weights"]["length"] for s in weighted[:4]}
    assert weights == {1.0, 0.75, 0.5, 0.25}
    assert {s.algo.split("_")[0] for s in weighted} == {"grpo", "gdpo"}
    assert {s.task for s in specs} == {"math_conditioned", "math"}


def test_coding_keeps_two_and_three_objective_runs_apart_by_label():
    names = [spec.run_id.algo for spec in cc.load_experiment("coding")]
    assert names == ["grpo_2obj", "gdpo_2obj", "grpo_3obj", "gdpo_3obj"]


# ---------------------------------------------------------------------------------------
# Paper hyperparameters (docs/nemo_rl.md section 3) on NeMo RL's keys
# ---------------------------------------------------------------------------------------


def test_tool_calling_hyperparameters(toolcall_gdpo):
    c = toolcall_gdpo
    assert c["policy"]["optimizer"]["kwargs"]["lr"] == 1e-6
    assert (c["grpo"]["num_prompts_per_step"], c["grpo"]["num_generations_per_prompt"]) == (512, 4)
    assert c["data"]["max_input_seq_length"] == 2048
    assert c["policy"]["generation"]["max_new_tokens"] == 1024
    assert c["policy"]["max_total_sequence_length"] == 2048 + 1024
    assert (c["loss_fn"]["ratio_clip_min"], c["loss_fn"]["ratio_clip_max"]) == (0.2, 0.2)
    assert c["loss_fn"]["reference_policy_kl_penalty"] == 0.001
    assert c["grpo"]["max_num_epochs"] == 15
    assert c["gdpo"]["reward_components"] == ["format", "correctness"]


def test_math_hyperparameters_use_dynamic_sampling_clip_higher_and_mse_kl():
    c = cc.compose("math", "r1-distill-qwen-1.5b", "gdpo")
    assert (c["grpo"]["num_prompts_per_step"], c["grpo"]["num_generations_per_prompt"]) == (512, 16)
    assert c["grpo"]["use_dynamic_sampling"] is True
    assert c["policy"]["optimizer"]["kwargs"]["lr"] == 1e-6
    assert (c["data"]["max_input_seq_length"], c["policy"]["generation"]["max_new_tokens"]) == (1024, 8000)
    assert (c["loss_fn"]["ratio_clip_min"], c["loss_fn"]["ratio_clip_max"]) == (0.2, 0.28)
    assert c["loss_fn"]["token_level_loss"] is True
    assert (c["loss_fn"]["reference_policy_kl_penalty"], c["loss_fn"]["reference_policy_kl_type"]) == (0.0005, "k2")
    assert c["grpo"]["max_num_steps"] == 500
    assert (c["gdpo"]["length_limit"], c["gdpo"]["conditioned_length"]) == (4000, False)
    assert cc.compose("math_conditioned", "r1-distill-qwen-7b", "gdpo")["gdpo"]["conditioned_length"] is True


def test_coding_runs_400_steps_with_two_or_three_objectives():
    two = cc.compose("code_2obj", "r1-distill-qwen-7b", "grpo")
    three = cc.compose("code_3obj", "r1-distill-qwen-7b", "grpo")
    assert two["grpo"]["max_num_steps"] == three["grpo"]["max_num_steps"] == 400
    assert two["gdpo"]["reward_components"] == ["pass", "length"]
    assert three["gdpo"]["reward_components"] == ["pass", "length", "bug"]
    assert list(three["env"]) == ["gdpo_code"]


def test_gsm8k_quick_check_uses_lr_5e_6_cosine_with_ten_percent_warmup():
    c = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo")
    assert c["policy"]["optimizer"]["kwargs"]["lr"] == 5e-6
    warmup, cosine, milestones = c["policy"]["scheduler"]
    assert warmup["name"].endswith("LinearLR") and cosine["name"].endswith("CosineAnnealingLR")
    assert milestones["milestones"] == [warmup["kwargs"]["total_iters"]]
    steps = warmup["kwargs"]["total_iters"] + cosine["kwargs"]["T_max"]
    assert warmup["kwargs"]["total_iters"] == round(0.1 * steps)
    assert (c["grpo"]["num_generations_per_prompt"], c["grpo"]["max_num_epochs"]) == (16, 1)
    assert (c["data"]["max_input_seq_length"], c["policy"]["generation"]["max_new_tokens"]) == (512, 1024)


def test_environment_block_restates_the_gdpo_block(toolcall_gdpo):
    env = toolcall_gdpo["env"]["gdpo_toolcall"]
    assert env["components"] == toolcall_gdpo["gdpo"]["reward_components"]
    assert env["tokenizer"] == toolcall_gdpo["policy"]["model_name"]
    assert toolcall_gdpo["data"]["default"] == {
        "processor": "gdpo_toolcall",
        "env_name": "gdpo_toolcall",
        "prompt_file": None,
        "system_prompt_file": None,
    }


def test_run_names_directories_and_wandb_group_come_from_the_run_id(toolcall_gdpo, monkeypatch):
    name = "toolcall__toolcall__qwen2.5-1.5b-instruct__gdpo__seed42"
    assert toolcall_gdpo["logger"]["log_dir"] == f"runs/{name}"
    assert toolcall_gdpo["checkpointing"]["checkpoint_dir"] == f"runs/{name}/checkpoints"
    assert toolcall_gdpo["logger"]["wandb"]["name"] == name
    assert toolcall_gdpo["logger"]["wandb"]["group"] == name.rsplit("__", 1)[0]
    monkeypatch.setenv("GDPO_RUNS_DIR", "/scratch/runs")
    local = cc.compose("gsm8k", "tiny", "grpo", seed=3)  # the run dir on every engine
    assert local["logger"]["log_dir"] == "/scratch/runs/adhoc__gsm8k__tiny__grpo__seed3"
    assert local["checkpointing"]["checkpoint_dir"] == "/scratch/runs/adhoc__gsm8k__tiny__grpo__seed3/checkpoints"


# ---------------------------------------------------------------------------------------
# gdpo.estimator -> grpo.adv_estimator
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "algo, name, normalize, weights",
    [
        ("grpo", "grpo", True, None),
        ("grpo_no_std", "grpo", False, None),
        ("gdpo", "gdpo", True, None),
        ("gdpo_no_bn", "gdpo_no_bn", True, None),
        ("gdpo_wlen0.5", "gdpo", True, [1.0, 0.5]),  # sorted names: correctness, length
        ("grpo_wlen0.5", "grpo", True, [1.0, 0.5]),
    ],
)
def test_algo_maps_to_nemo_rl_adv_estimator(algo, name, normalize, weights):
    c = cc.compose("math", "r1-distill-qwen-1.5b", algo)
    adv = c["grpo"]["adv_estimator"]
    assert (adv["name"], adv["normalize_rewards"], adv["reward_weights"]) == (name, normalize, weights)
    assert adv["use_leave_one_out_baseline"] is False
    assert c["grpo"]["normalize_rewards"] == normalize


def test_native_gdpo_weights_follow_nemo_rl_sorted_component_order():
    # components in paper order [format, correctness]; NeMo RL sorts: correctness, format
    c = cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", overrides=["gdpo.reward_weights={format: 2.0}"])
    assert c["grpo"]["adv_estimator"]["reward_weights"] == [1.0, 2.0]


@pytest.mark.parametrize(
    "override",
    ["gdpo.batch_norm=token", "gdpo.preset=trl", "gdpo.std_ddof=0", "env.gdpo_toolcall.on_data_error='nan'"],
)
def test_settings_native_gdpo_cannot_express_route_to_our_estimator(override):
    plain = cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo")
    c = cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", overrides=[override])
    assert cc.needs_our_estimator(plain["gdpo"], plain["env"]) is False
    assert cc.needs_our_estimator(c["gdpo"], c["env"]) is True
    assert c["grpo"]["adv_estimator"]["name"] == "gdpo"  # the name stays readable; the hook decides


def test_weighted_grpo_is_computed_by_our_estimator_since_nemo_rl_sums_rewards_unweighted():
    c = cc.compose("math", "r1-distill-qwen-1.5b", "grpo_wlen0.5")
    assert cc.needs_our_estimator(c["gdpo"], c["env"]) is True
    assert cc.needs_our_estimator(cc.compose("math", "r1-distill-qwen-1.5b", "gdpo_wlen0.5")["gdpo"]) is False


def test_estimator_names_match_the_advantage_registry():
    from gdpo_nemo.estimators import ESTIMATORS

    assert set(cc.ESTIMATORS) == set(ESTIMATORS)


# ---------------------------------------------------------------------------------------
# Bad input fails before launch, naming the key path
# ---------------------------------------------------------------------------------------


def _problems(excinfo) -> str:
    return "\n".join(excinfo.value.problems)


def test_gdpo_with_one_reward_component_is_an_error():
    with pytest.raises(cc.ConfigError) as err:
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=["gdpo.reward_components=[correctness]"])
    assert "gdpo.reward_components" in _problems(err) and "at least 2" in _problems(err)


def test_gdpo_no_bn_with_one_component_is_an_error_but_grpo_is_fine():
    with pytest.raises(cc.ConfigError, match="gdpo.reward_components"):
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo_no_bn", overrides=["gdpo.reward_components=[format]"])
    c = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "grpo", overrides=["gdpo.reward_components=[format]"])
    assert c["env"]["gdpo_gsm8k"]["components"] == ["format"]


def test_weights_must_name_reward_components():
    with pytest.raises(cc.ConfigError) as err:
        cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", overrides=["gdpo.reward_weights={length: 0.5}"])
    assert "gdpo.reward_weights: ['length'] name no reward component" in _problems(err)


def test_weight_ablation_on_a_task_without_length_is_an_error():
    with pytest.raises(cc.ConfigError, match=r"gdpo.reward_weights: \['length'\]"):
        cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo_wlen0.5")


def test_unknown_component_for_the_task_is_an_error():
    with pytest.raises(cc.ConfigError, match="gdpo.reward_components: unknown reward component 'bug'"):
        cc.compose("math", "r1-distill-qwen-1.5b", "gdpo", overrides=["gdpo.reward_components=[correctness,bug]"])


def test_unknown_key_override_names_the_key_and_how_to_add_one():
    with pytest.raises(cc.ConfigError) as err:
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=["grpo.num_promts_per_step=8"])
    assert str(err.value).startswith("grpo.num_promts_per_step:")
    assert "+grpo.num_promts_per_step" in str(err.value)


def test_added_key_unknown_to_nemo_rl_is_an_error_naming_its_path():
    with pytest.raises(cc.ConfigError) as err:
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=["+loss_fn.ratio_clip_hgh=0.3"])
    assert "loss_fn.ratio_clip_hgh: unknown key" in _problems(err)


def test_mistyped_value_names_key_and_expected_type():
    with pytest.raises(cc.ConfigError) as err:
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=["grpo.num_prompts_per_step=many"])
    assert "grpo.num_prompts_per_step: 'many' is not int" in _problems(err)


def test_missing_required_key_is_an_error(toolcall_gdpo):
    config = yaml.safe_load(cc.dump(toolcall_gdpo))
    del config["logger"]["gpu_monitoring"]
    del config["policy"]["tokenizer"]["name"]
    with pytest.raises(cc.ConfigError) as err:
        cc.validate(config)
    assert "logger.gpu_monitoring: missing" in _problems(err)
    assert "policy.tokenizer.name: missing" in _problems(err)


def test_adv_estimator_contradicting_the_gdpo_block_is_an_error():
    with pytest.raises(cc.ConfigError) as err:
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=["grpo.adv_estimator.name=grpo"])
    assert "grpo.adv_estimator.name: 'grpo' contradicts the gdpo block" in _problems(err)


def test_environment_scoring_other_components_than_the_estimator_is_an_error():
    with pytest.raises(cc.ConfigError) as err:
        cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", overrides=["env.gdpo_toolcall.components=[format]"])
    assert "env.gdpo_toolcall.components" in _problems(err)


def test_nemo_engine_cannot_run_a_builtin_model():
    with pytest.raises(cc.ConfigError, match="policy.model_name: 'builtin:tiny'"):
        cc.compose("gsm8k", "tiny", "gdpo", cluster="nemo_1n1g")


def test_one_rollout_per_prompt_is_an_error():
    with pytest.raises(cc.ConfigError, match="grpo.num_generations_per_prompt: 1"):
        cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "grpo", overrides=["grpo.num_generations_per_prompt=1"])


@pytest.mark.parametrize("group, value", [("task", "toolcal"), ("model", "qwen-9b"), ("algo", "ppo"), ("cluster", "mars")])
def test_unknown_group_option_lists_the_accepted_ones(group, value):
    kwargs = {"task": "gsm8k", "model": "tiny", "algo": "gdpo", group: value}
    cluster = kwargs.pop("cluster", "local")
    with pytest.raises(cc.ConfigError) as err:
        cc.compose(kwargs["task"], kwargs["model"], kwargs["algo"], cluster=cluster)
    assert f"{group}={value!r} is not a {group} config" in str(err.value)
    assert repr(cc.group_options(group)[0]) in str(err.value)


def test_unknown_experiment_is_an_error_listing_experiments():
    with pytest.raises(cc.ConfigError, match=r"unknown experiment 'toolcalling'; experiments are \['coding'"):
        cc.load_experiment("toolcalling")


def test_two_blocks_making_the_same_run_id_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "clash.yaml").write_text(
        "description: two code variants without labels\nseeds: [0]\nruns:\n"
        "  - {tasks: [code_2obj], models: [tiny], algos: [grpo]}\n"
        "  - {tasks: [code_3obj], models: [tiny], algos: [grpo]}\n"
    )
    monkeypatch.setenv("GDPO_NEMO_EXPERIMENTS", str(tmp_path))
    with pytest.raises(cc.ConfigError, match="clash__code__tiny__grpo__seed0 is also made by"):
        cc.load_experiment("clash")


def test_experiment_block_with_unknown_key_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "typo.yaml").write_text("description: x\nruns:\n  - {tasks: [gsm8k], models: [tiny], algo: [grpo], seeds: [0]}\n")
    monkeypatch.setenv("GDPO_NEMO_EXPERIMENTS", str(tmp_path))
    with pytest.raises(cc.ConfigError, match=r"runs\[0\]: unknown key\(s\) \['algo'\]"):
        cc.load_experiment("typo")


# ---------------------------------------------------------------------------------------
# cluster.num_nodes against the Slurm request
# ---------------------------------------------------------------------------------------


def test_cluster_matching_the_slurm_request_passes(toolcall_gdpo):
    cc.check_cluster_consistency(toolcall_gdpo, nodes=1, gpus_per_node=8)


def test_cluster_num_nodes_different_from_the_slurm_request_is_an_error(toolcall_gdpo):
    with pytest.raises(cc.ConfigError) as err:
        cc.check_cluster_consistency(toolcall_gdpo, nodes=2, gpus_per_node=4)
    assert _problems(err).splitlines() == [
        "cluster.num_nodes: 1 but the Slurm request has --nodes=2; they must be equal",
        "cluster.gpus_per_node: 8 but the Slurm request gives 4 GPU(s) per node; they must be equal",
    ]


def test_local_engine_runs_on_exactly_one_node():
    local = cc.compose("gsm8k", "tiny", "grpo")
    cc.check_cluster_consistency(local, nodes=1, gpus_per_node=0)
    with pytest.raises(cc.ConfigError, match="--nodes=2"):
        cc.check_cluster_consistency(local, nodes=2, gpus_per_node=0)


# ---------------------------------------------------------------------------------------
# A user's own file: NeMo RL's loader semantics, the same validation
# ---------------------------------------------------------------------------------------


def test_user_file_with_defaults_inheritance_and_overrides_is_validated(tmp_path, toolcall_gdpo):
    (tmp_path / "parent.yaml").write_text(cc.dump(toolcall_gdpo))
    (tmp_path / "child.yaml").write_text("defaults: parent.yaml\ngrpo:\n  max_num_steps: 7\n")
    config = cc.load_config_file(tmp_path / "child.yaml", ["grpo.val_period=5"])
    assert (config["grpo"]["max_num_steps"], config["grpo"]["val_period"]) == (7, 5)
    assert config["policy"] == toolcall_gdpo["policy"]


def test_user_file_section_with_override_marker_replaces_the_parent_section(tmp_path, toolcall_gdpo):
    (tmp_path / "parent.yaml").write_text(cc.dump(toolcall_gdpo))
    (tmp_path / "child.yaml").write_text("defaults: parent.yaml\ncluster:\n  _override_: true\n  num_nodes: 2\n  gpus_per_node: 8\n")
    assert cc.load_config_file(tmp_path / "child.yaml")["cluster"] == {"num_nodes": 2, "gpus_per_node": 8}


def test_user_file_typo_is_reported_with_its_key_path(tmp_path, toolcall_gdpo):
    config = yaml.safe_load(cc.dump(toolcall_gdpo))
    config["policy"]["trian_micro_batch_size"] = 2
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(cc.ConfigError) as err:
        cc.load_config_file(tmp_path / "run.yaml")
    assert _problems(err).startswith("policy.trian_micro_batch_size: unknown key; policy accepts [")


def test_user_override_of_a_missing_key_is_reported(tmp_path, toolcall_gdpo):
    (tmp_path / "run.yaml").write_text(cc.dump(toolcall_gdpo))
    with pytest.raises(cc.ConfigError, match="^grpo.sead: override 'grpo.sead=1' failed"):
        cc.load_config_file(tmp_path / "run.yaml", ["grpo.sead=1"])


# ---------------------------------------------------------------------------------------
# The schema walker
# ---------------------------------------------------------------------------------------


def test_schema_walker_reports_unknown_missing_and_mistyped_keys():
    schema = {"a": "int", "b?": "float|null", "c": {"d": "list[str]"}}
    assert key_walk.check_against_schema({"a": 1, "c": {"d": ["x"]}}, schema) == []
    assert key_walk.check_against_schema({"a": True, "b": 2, "c": {"d": [1]}, "e": 0}, schema) == [
        "a: True is not int",
        "c.d: [1] is not list[str]",
        "e: unknown key; the top level accepts ['a', 'b', 'c']",
    ]
    assert key_walk.check_against_schema({"c": {}}, schema) == [
        "c.d: missing; expected list[str]",
        "a: missing; expected int",
    ]


def test_schema_keys_required_only_when_the_section_is_enabled():
    disabled = {"enabled": False}
    enabled = {"enabled": True}
    spec = nemo_keys.TREE["policy"]["dynamic_batching"]
    assert key_walk.check_against_schema(disabled, spec, "policy.dynamic_batching") == []
    assert key_walk.check_against_schema(enabled, spec, "policy.dynamic_batching") == [
        "policy.dynamic_batching.train_mb_tokens: missing (required when enabled is true); expected int",
        "policy.dynamic_batching.sequence_length_round: missing (required when enabled is true); expected int",
    ]


def test_the_walker_reports_every_problem_of_a_config_at_once(toolcall_gdpo):
    config = yaml.safe_load(cc.dump(toolcall_gdpo))
    config["grpo"]["num_prompt_per_step"] = 8  # misspelt
    config["loss_fn"]["ratio_clip_min"] = "0.2"  # a string
    del config["checkpointing"]["keep_top_k"]  # required by NeMo RL
    config["gdpo"]["eps"] = -1.0  # out of the setting's range
    problems = key_walk.walk(config).problems
    assert sorted(line.split(":")[0] for line in problems) == [
        "checkpointing.keep_top_k", "gdpo.eps", "grpo.num_prompt_per_step", "loss_fn.ratio_clip_min"]
    with pytest.raises(cc.ConfigError) as err:
        cc.validate(config)
    assert err.value.problems == problems and str(err.value).startswith("4 problems:")


def test_schema_dataset_may_be_one_mapping_or_a_list_of_them():
    data = {"max_input_seq_length": None, "shuffle": True}
    one = dict(data, train={"dataset_name": "x", "split": "train"})
    many = dict(data, train=[{"dataset_name": "x"}, {"dataset_name": "y", "splt": "test"}])
    assert key_walk.check_against_schema(one, nemo_keys.DATA, "data") == []
    problems = key_walk.check_against_schema(many, nemo_keys.DATA, "data")
    assert len(problems) == 1 and problems[0].startswith("data.train[1].splt: unknown key")


# ---------------------------------------------------------------------------------------
# gdpo-nemo config show / list
# ---------------------------------------------------------------------------------------


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gdpo_nemo.cli", "config", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


def test_config_show_prints_the_composed_yaml():
    shown = _cli("show", "task=gsm8k", "model=qwen2.5-1.5b-instruct", "algo=gdpo", "seed=3", "grpo.max_num_steps=9")
    assert shown.returncode == 0, shown.stderr
    expected = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", seed=3, overrides=["grpo.max_num_steps=9"])
    assert yaml.safe_load(shown.stdout) == expected


def test_config_show_without_algo_exits_2_and_lists_the_algos():
    shown = _cli("show", "task=gsm8k", "model=tiny")
    assert shown.returncode == 2
    assert "needs algo=" in shown.stderr and "gdpo_no_bn" in shown.stderr


def test_config_list_names_every_experiment_and_group_option():
    listed = _cli("list")
    assert listed.returncode == 0, listed.stderr
    for name in (*PAPER_EXPERIMENTS, "smoke", "math_conditioned", "r1-distill-qwen-7b", "nemo_4n8g"):
        assert name in listed.stdout
