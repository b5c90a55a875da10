"""Specification of the NeMo RL plugin's pure layer (no NeMo RL, no Ray needed).

Scoring (environment logic over the reward registry), the estimator adapter (NeMo RL's
`compute_advantage` call mapped onto gdpo_nemo.estimators), rollout metrics and collapse
diagnostics, the metrics.jsonl writer, the data processors (DatumSpec dicts), the hook
wrappers, and the entry point up to the point where NeMo RL would start.

The wrapper tests here call the wrappers around small functions written in place of NeMo
RL's rollout/validate/logger: the unit level, in .venv. The NeMo RL tier (tests/nemo_tier/,
run in .venv-nemo with NeMo RL's pinned source) runs the same hooks inside NeMo RL's own
grpo_train on this CPU; docs/nemo_rl.md lists what only a GPU cluster exercises.
"""

from __future__ import annotations

import json
import os
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gdpo_nemo import config as cc
from gdpo_nemo.estimators import compute_advantages
from gdpo_nemo.commands import nemo_run
from gdpo_nemo.config.settings import EstimatorSettings
from gdpo_nemo.estimators import AdvantageOptions
from gdpo_nemo.engines.nemo import data, metrics, plugin, run
from gdpo_nemo.engines.nemo.estimators import (
    AdvantageEstimator,
    create_estimator,
    group_ids_from_prompts,
    reward_components,
)
from gdpo_nemo.engines.nemo.scoring import EnvSettings, RewardScorer, assistant_text, load_token_counter
from gdpo_nemo.rewards import RewardDataError

REPO = Path(__file__).resolve().parents[1]
TOOL_GT = '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
TOOL_RIGHT = '<think>weather</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
TOOL_BROKEN_GT = '<tool_call>\n{"name": "a", "parameters": {}}\n\n{"name": "b", "parameters": {}}\n</tool_call>'


def _log(answer: str) -> list[dict]:
    return [{"role": "user", "content": "question"}, {"role": "assistant", "content": answer}]


def _env(task="toolcall", components=("format", "correctness"), **extra) -> EnvSettings:
    block = {
        "task": task,
        "components": list(components),
        "length_limit": None,
        "conditioned_length": False,
        "num_workers": 1,
        "tokenizer": None,
        "on_data_error": "lowest",
        **extra,
    }
    return EnvSettings.from_config(block)


@pytest.fixture(scope="module")
def tiny_tokenizer_dir(tmp_path_factory):
    """The local engine's byte-level tokenizer (one token per byte), saved as a folder."""
    from gdpo_nemo.engines.local.models import build_tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny_tokenizer")
    build_tiny_tokenizer().save_pretrained(folder)
    return str(folder)


# ---------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------


def test_assistant_text_joins_only_the_assistant_messages():
    log = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
           {"role": "assistant", "content": "a1"}, {"role": "environment", "content": "e"},
           {"role": "assistant", "content": "a2"}]
    assert assistant_text(log) == "a1a2"


def test_tool_calling_answers_score_format_and_correctness_under_reward_keys():
    scorer = RewardScorer(_env())
    result = scorer.score([_log(TOOL_RIGHT), _log("no tags at all")], [{"ground_truth": TOOL_GT}, {"ground_truth": TOOL_GT}])
    assert result.rewards == {"reward/format": [1.0, 0.0], "reward/correctness": [3.0, -3.0]}
    assert list(result.rewards) == scorer.keys == ["reward/format", "reward/correctness"]
    assert result.data_errors == {}


def test_length_counts_tokens_of_the_policy_tokenizer(tiny_tokenizer_dir):
    count = load_token_counter(tiny_tokenizer_dir)
    assert count("abcdefghij") == 10  # one token per byte
    scorer = RewardScorer(_env("math", ("correctness", "length"), length_limit=40), count)
    answers = ["The answer is \\boxed{4}.", "The answer is " + "x" * 30 + " \\boxed{4}."]  # 24 and 55 bytes
    result = scorer.score([_log(a) for a in answers], [{"ground_truth": "4"}] * 2)
    assert result.rewards == {"reward/correctness": [1.0, 1.0], "reward/length": [1.0, 0.0]}


def test_builtin_model_names_are_not_tokenizers_for_nemo_rl():
    with pytest.raises(ValueError, match="local-engine built-in"):
        load_token_counter("builtin:tiny")


def test_scoring_in_parallel_chunks_gives_the_same_rewards_in_order():
    logs = [_log(TOOL_RIGHT if i % 3 else "nothing") for i in range(7)]
    infos = [{"ground_truth": TOOL_GT}] * 7
    one = RewardScorer(_env(num_workers=1)).score(logs, infos)
    four = RewardScorer(_env(num_workers=4)).score(logs, infos)
    assert one == four
    assert four.rewards["reward/format"] == [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("policy, expected", [("lowest", [0.0, 0.0, 0.0]), ("nan", [0.0, math.nan, 0.0])])
def test_broken_ground_truth_row_gets_the_configured_value(policy, expected):
    scorer = RewardScorer(_env(on_data_error=policy, num_workers=2))
    result = scorer.score([_log("x")] * 3, [{"ground_truth": "<response>a</response>"}, {"ground_truth": TOOL_BROKEN_GT},
                                            {"ground_truth": "<response>b</response>"}])
    assert list(result.data_errors) == [1]
    got = result.rewards["reward/format"]
    assert [g if not math.isnan(g) else "nan" for g in got] == [e if not math.isnan(e) else "nan" for e in expected]


def test_broken_ground_truth_stops_the_run_when_asked():
    with pytest.raises(RewardDataError, match="row 1"):
        RewardScorer(_env(on_data_error="raise")).score([_log("x")] * 2, [{"ground_truth": TOOL_GT}, {"ground_truth": TOOL_BROKEN_GT}])


def test_env_settings_name_the_bad_key():
    with pytest.raises(ValueError, match="env.num_workers: 0 must be >= 1"):
        _env(num_workers=0)
    block = {"task": "toolcall", "components": ["format"], "componets": ["format"], "length_limit": None,
             "conditioned_length": False, "num_workers": 1, "tokenizer": None, "on_data_error": "lowest"}
    with pytest.raises(ValueError, match="env.componets: unknown key"):
        EnvSettings.from_config(block)


# ---------------------------------------------------------------------------------------
# Estimator adapter
# ---------------------------------------------------------------------------------------


def _batch(a, b, groups):
    prompt_ids = torch.tensor([[7, g, g] for g in groups])
    return prompt_ids, {"reward/a": torch.tensor(a, dtype=torch.float32), "reward/b": torch.tensor(b, dtype=torch.float32)}


def test_prompt_rows_define_the_groups():
    ids = group_ids_from_prompts(torch.tensor([[1, 2], [3, 4], [1, 2], [3, 4]]))
    assert ids[0] == ids[2] and ids[1] == ids[3] and ids[0] != ids[1]


def test_gdpo_no_bn_adapter_returns_hand_checked_token_level_advantages():
    # group 0: a = (1, 0), b = (1, 0) -> each normalized to +-1/sqrt(2)*sqrt(2)... per
    # component (x - 0.5) / std, std = 0.7071 (Bessel) -> +-0.7071; summed: +-1.4142.
    # group 1: both components constant -> 0.
    prompt_ids, batch = _batch([1, 0, 1, 1], [1, 0, 0, 0], [0, 0, 1, 1])
    estimator = AdvantageEstimator(EstimatorSettings(estimator="gdpo_no_bn", components=("a", "b")))
    mask = torch.ones(4, 5)
    adv = estimator.compute_advantage(prompt_ids=prompt_ids, rewards=batch["reward/a"] + batch["reward/b"], mask=mask,
                                      repeated_batch=batch, logprobs_policy=None)
    assert adv.shape == (4, 5) and adv.dtype == torch.float32
    assert torch.allclose(adv[:, 0], torch.tensor([math.sqrt(2), -math.sqrt(2), 0.0, 0.0]), atol=1e-5)
    assert torch.equal(adv, adv[:, :1].expand(4, 5))
    assert estimator.last_metrics == {"adv/distinct_groups": 2}


def test_adapter_matches_compute_advantages_for_weighted_grpo_with_token_batch_norm_off():
    prompt_ids, batch = _batch([1, 0, 1, 0, 0, 1], [0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 2, 2])
    settings = EstimatorSettings(estimator="grpo", components=("b", "a"),
                                 options=AdvantageOptions.resolve("nemo_rl", reward_weights={"a": 1.0, "b": 0.5}))
    adv = AdvantageEstimator(settings).compute_advantage(prompt_ids, None, torch.ones(6, 3), repeated_batch=batch)
    expected = compute_advantages({"a": batch["reward/a"], "b": batch["reward/b"]}, torch.tensor([0, 0, 1, 1, 2, 2]),
                                  "grpo", reward_weights={"a": 1.0, "b": 0.5})
    assert torch.allclose(adv[:, 0], expected)


def test_token_batch_norm_weights_samples_by_their_response_tokens():
    prompt_ids, batch = _batch([1, 0, 1, 1], [0, 1, 1, 0], [0, 0, 1, 1])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.float32)
    settings = EstimatorSettings(estimator="gdpo", components=("a", "b"), batch_norm="token")
    adv = AdvantageEstimator(settings).compute_advantage(prompt_ids, None, mask, repeated_batch=batch)
    sample = AdvantageEstimator(EstimatorSettings(estimator="gdpo", components=("a", "b"))).compute_advantage(
        prompt_ids, None, mask, repeated_batch=batch)
    tokens = mask.sum(1)
    weighted_mean = float((adv[:, 0] * tokens).sum() / tokens.sum())
    assert abs(weighted_mean) < 1e-5
    # and unit variance per token (Bessel over the 10 tokens, NeMo RL's batch eps 0)
    weighted_var = float((tokens * (adv[:, 0] - weighted_mean) ** 2).sum() / (tokens.sum() - 1))
    assert abs(weighted_var - 1.0) < 1e-5
    assert not torch.allclose(adv, sample)


def test_batch_components_must_match_the_gdpo_block():
    _, batch = _batch([1, 0], [0, 1], [0, 0])
    with pytest.raises(ValueError, match=r"reward components \['a', 'b'\] but gdpo.reward_components is \['a', 'c'\]"):
        reward_components(batch, ["a", "c"])


def _master(adv_name, algo_overrides=()):
    config = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=list(algo_overrides))
    config["grpo"]["adv_estimator"]["name"] = adv_name
    return config


def test_hook_keeps_nemo_rl_estimator_for_what_it_computes_natively():
    native = object()
    assert create_estimator(_master("gdpo"), lambda master: native) is native


def test_hook_builds_ours_for_gdpo_no_bn_and_for_settings_nemo_rl_lacks():
    config = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo_no_bn")
    ours = create_estimator(config, lambda master: pytest.fail("NeMo RL's estimator must not be built"))
    assert isinstance(ours, AdvantageEstimator) and ours.settings.estimator == "gdpo_no_bn"
    token = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo", overrides=["gdpo.batch_norm=token"])
    assert create_estimator(token, lambda master: None).settings.batch_norm == "token"


def test_hook_reads_the_gdpo_block_from_a_pydantic_style_master_config():
    config = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo_no_bn")
    grpo = SimpleNamespace(adv_estimator=SimpleNamespace(name="gdpo_no_bn"))
    master = SimpleNamespace(grpo=grpo, env=config["env"], model_extra={"gdpo": config["gdpo"]})
    assert create_estimator(master, lambda m: None).settings.components == ("format", "correctness", "integer")


# ---------------------------------------------------------------------------------------
# Rollout metrics and collapse diagnostics
# ---------------------------------------------------------------------------------------


def test_rollout_metrics_report_each_component_and_the_collapse_diagnostics():
    # two prompts (idx 0, 1) x 2 rollouts; format constant in prompt 1, correctness varies in both
    batch = {"idx": [0, 0, 1, 1], "reward/format": torch.tensor([1.0, 0.0, 1.0, 1.0]),
             "reward/correctness": torch.tensor([3.0, -3.0, 0.0, 3.0]), "total_reward": torch.zeros(4)}
    settings = EstimatorSettings(estimator="gdpo", components=("format", "correctness"))
    got = metrics.rollout_metrics(batch, settings)
    assert got["reward/format"] == 0.75 and got["reward/correctness"] == 0.75
    assert got["adv/zero_std_frac/format"] == 0.5 and got["adv/zero_std_frac/correctness"] == 0.0
    assert got["adv/distinct_groups"] == 2.0


def test_groups_of_one_sample_skip_the_group_diagnostics():
    batch = {"idx": [0, 1], "reward/format": torch.tensor([1.0, 0.0])}
    assert metrics.rollout_metrics(batch, None) == {"reward/format": 0.5}


def test_nan_rewards_are_left_out_of_the_component_mean():
    batch = {"idx": [0, 0], "reward/format": torch.tensor([1.0, math.nan])}
    assert metrics.rollout_metrics(batch, None)["reward/format"] == 1.0


def test_validation_collector_keeps_groups_of_different_batches_apart():
    collector = metrics.ValidationCollector(EstimatorSettings(estimator="grpo", components=("f",)))
    collector.add({"idx": [0, 0], "reward/f": torch.tensor([1.0, 1.0])})
    collector.add({"idx": [0, 0], "reward/f": torch.tensor([1.0, 0.0])})  # same idx, another batch
    got = collector.summary()
    assert got["reward/f"] == 0.75 and got["adv/zero_std_frac/f"] == 0.5


def test_metrics_writer_merges_calls_of_one_step_and_skips_non_scalars(tmp_path):
    writer = metrics.StepMetricsWriter(tmp_path)
    writer.log({"reward": 1.5, "reward/format": torch.tensor(0.5), "histogram/len": [1, 2]}, 1, "train")
    writer.log({"total_step_time": 3.0}, 1, "timing/train")
    writer.log({"gpu_util": 0.9}, 17, "ray")
    writer.log({"accuracy": 0.25}, 2, "validation")
    writer.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records == [
        {"step": 1, "train/reward": 1.5, "train/reward/format": 0.5, "timing/train/total_step_time": 3.0},
        {"step": 2, "validation/accuracy": 0.25},
    ]


def test_metrics_writer_closed_after_a_failure_leaves_out_the_step_that_did_not_finish(tmp_path, capsys):
    writer = metrics.StepMetricsWriter(tmp_path)
    writer.log({"reward": 1.0}, 1, "train")
    writer.log({"total_step_time": 3.0}, 1, "timing/train", finished=True)
    writer.log({"reward": 0.5}, 2, "train")  # the job fails before step 2's last call
    writer.close(complete=False)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records == [{"step": 1, "train/reward": 1.0, "timing/train/total_step_time": 3.0}]
    assert "step 2 did not finish; its 1 logged values are not written as a step" in capsys.readouterr().err


def test_metrics_writer_resuming_from_a_checkpoint_keeps_earlier_steps_only(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a": 1}\n{"step": 2, "a": 2}\n{"step": 3, "a": 3}\n')
    for kept in ("step_2", "step_1", "tmp_step_3"):  # NeMo RL keeps the top k; tmp_: a save cut short
        (tmp_path / "checkpoints" / kept).mkdir(parents=True)
    step = metrics.latest_checkpoint_step(tmp_path / "checkpoints")
    assert step == 2  # the newest complete one, not the oldest
    writer = metrics.StepMetricsWriter(tmp_path, resume_step=step)
    writer.log({"a": 30}, 3, "")
    writer.close()
    assert [json.loads(l)["a"] for l in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 30]


# ---------------------------------------------------------------------------------------
# Hook wrappers
# ---------------------------------------------------------------------------------------


def _grpo(dynamic_sampling=False, prompts=1, generations=2, scaling=False):
    """The part of NeMo RL's MasterConfig the dynamic-sampling hook reads (attribute style, as
    the pydantic model)."""
    grpo = SimpleNamespace(use_dynamic_sampling=dynamic_sampling, num_prompts_per_step=prompts,
                           num_generations_per_prompt=generations, reward_scaling=SimpleNamespace(enabled=scaling),
                           reward_shaping=SimpleNamespace(enabled=False))
    return SimpleNamespace(grpo=grpo)


def test_training_rollout_only_counts_data_errors_the_step_reports_them_with_its_batch():
    state = plugin.HookState(settings=EstimatorSettings(estimator="gdpo", components=("a", "b")))
    batch = {"idx": [0, 0], "reward/a": torch.tensor([1.0, 0.0]), "reward/b": torch.tensor([0.0, 0.0]),
             "total_reward": torch.tensor([1.0, 0.0])}

    def rollout(policy_generation, input_batch, **kwargs):  # stands in for NeMo RL's
        return batch, {"mean_gen_tokens_per_sample": 12.0}

    _, got = plugin.wrap_rollout(rollout, state)(None, None, max_seq_len=8)
    assert got == {"mean_gen_tokens_per_sample": 12.0}  # a rollout batch is not yet the trained batch

    def no_filter(repeated_batch, std, baseline, num_gen_batches, master_config, timer, cache=None):
        return repeated_batch, True, cache, {}  # NeMo RL's with use_dynamic_sampling false

    trained, complete, _, ds_metrics = plugin.wrap_dynamic_sampling(no_filter, state)(
        batch, torch.ones(2), torch.zeros(2), 1, _grpo(), None)
    got = {k: float(v[0]) for k, v in ds_metrics.items()}
    assert (got["reward/a"], got["reward/b"], got["adv/zero_std_frac/b"]) == (0.5, 0.0, 1.0)
    assert "filtered_reward/a" not in got and "reward_adjustment" not in got


def test_with_scaling_on_the_family_adds_up_to_nemo_rl_s_total_through_the_adjustment():
    state = plugin.HookState(settings=EstimatorSettings(estimator="grpo", components=("a", "b")))
    # NeMo RL's reward scaling mapped the sums [0, 2] onto [-1, 1]: the total is no longer the sum
    batch = {"idx": [0, 0], "reward/a": torch.tensor([1.0, 0.0]), "reward/b": torch.tensor([1.0, 0.0]),
             "total_reward": torch.tensor([1.0, -1.0])}
    _, _, _, ds_metrics = plugin.wrap_dynamic_sampling(lambda b, s, base, *a: (b, True, None, {}), state)(
        batch, torch.ones(2), torch.zeros(2), 1, _grpo(scaling=True), None)
    got = {k: float(v[0]) for k, v in ds_metrics.items()}
    assert got["reward/a"] == got["reward/b"] == 0.5
    assert got["reward_adjustment"] == -1.0  # (1 - 2 + -1 - 0) / 2
    assert got["reward/a"] + got["reward/b"] + got["reward_adjustment"] == 0.0  # NeMo RL's train/reward


def test_dapo_keeps_a_gdpo_group_when_any_one_component_varies_and_drops_it_when_none_does():
    from gdpo_nemo.engines.nemo.sampling import group_signal_spread

    settings = EstimatorSettings(estimator="gdpo", components=("correctness", "length"))
    batch = {"idx": [0, 0, 1, 1, 2, 2],
             "reward/correctness": torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]),  # varies in group 0 only
             "reward/length": torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0])}      # varies in group 1 only
    spread = group_signal_spread(batch, settings)
    assert spread.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]  # groups 0 and 1 train GDPO; group 2 has nothing


def test_a_step_whose_dynamic_sampling_gives_up_leaves_nothing_for_the_next_step():
    state = plugin.HookState(settings=EstimatorSettings(estimator="gdpo", components=("a", "b")))
    state.generated.append({"total_reward": torch.ones(2)})
    state.step_data_errors = 3

    def gives_up(*args):
        raise ValueError("Dynamic sampling has reached the maximum allowed number of batches")

    batch = {"idx": [0, 0], "reward/a": torch.tensor([1.0, 0.0]), "reward/b": torch.tensor([0.0, 1.0]),
             "total_reward": torch.tensor([1.0, 1.0])}
    with pytest.raises(ValueError):
        plugin.wrap_dynamic_sampling(gives_up, state)(batch, torch.ones(2), torch.zeros(2), 1, _grpo(True), None)
    assert state.generated == [] and state.step_data_errors is None


def test_wrapped_validate_adds_the_components_of_its_rollouts():
    state = plugin.HookState(settings=None)
    rollout = plugin.wrap_rollout(lambda *a, **k: ({"idx": [0], "reward/a": torch.tensor([a[0]])}, {}), state)

    def validate(values):  # stands in for NeMo RL's: rollouts, then accuracy of the sums
        for value in values:
            rollout(value)
        return {"accuracy": sum(values) / len(values)}, {"total_validation_time": 1.0}

    wrapped = plugin.wrap_validate(validate, state)
    val_metrics, timings = wrapped([1.0, 0.0, 0.0])
    assert val_metrics == {"accuracy": 1 / 3, "reward/a": pytest.approx(1 / 3)}
    assert state.in_validation is False
    assert rollout(1.0)[1] == {}  # a later training rollout is not collected
    # the next validation describes its own batches only, not the earlier ones too
    assert wrapped([1.0, 1.0])[0] == {"accuracy": 1.0, "reward/a": 1.0}


def test_wrapped_logger_mirrors_every_call_to_metrics_jsonl(tmp_path):
    calls = []
    writer = metrics.StepMetricsWriter(tmp_path)
    log_metrics = plugin.wrap_log_metrics(lambda self, m, step, prefix="", *a, **k: calls.append((m, step, prefix)), writer)
    log_metrics(None, {"loss": 0.5}, 3, "train")
    writer.close()
    assert calls == [({"loss": 0.5}, 3, "train")]
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 3, "train/loss": 0.5}


def test_a_resumed_job_replays_the_steps_before_its_checkpoint_into_its_new_wandb_run(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "train/loss": 1.0}\n{"step": 2, "train/loss": 2.0}\n'
                                            '{"step": 3, "train/loss": 3.0}\n')
    writer = metrics.StepMetricsWriter(tmp_path, resume_step=2)  # the checkpoint of step 2

    class WandbBackend:  # NeMo RL's WandbLogger surface
        def __init__(self):
            self.logged = []

        def log_metrics(self, values, step, prefix=""):
            self.logged.append((step, values))

    logger = SimpleNamespace(wandb_logger=WandbBackend())
    log_metrics = plugin.wrap_log_metrics(lambda self, m, step, prefix="", *a, **k: self.wandb_logger.log_metrics(m, step, prefix), writer)
    log_metrics(logger, {"loss": 3.5}, 3, "train")
    log_metrics(logger, {"loss": 4.0}, 4, "train")
    writer.close()
    # steps 1-2 replayed once, before the job's own step 3 (step 3 of the killed job is set aside)
    assert logger.wandb_logger.logged == [(1, {"train/loss": 1.0}), (2, {"train/loss": 2.0}), (3, {"loss": 3.5}), (4, {"loss": 4.0})]


def test_wandb_offline_runs_of_successive_jobs_join_into_one_history():
    from gdpo_nemo.analysis.frame import RunLog
    from gdpo_nemo.analysis.wandb_offline import chain_requeued_jobs
    from gdpo_nemo.runs.run_id import RunId

    run = RunId("journey", "math", "tiny", "gdpo", 1)
    first = RunLog(run, "wandb-offline", "/r/wandb/wandb/offline-run-20261126_100000-a", "unfinished",
                   rows={1: {"x": 1.0}, 2: {"x": 2.0}})  # killed during step 2, after checkpoint 1
    second = RunLog(run, "wandb-offline", "/r/wandb/wandb/offline-run-20261126_100500-b", "finished",
                    rows={1: {"x": 1.0}, 2: {"x": 2.5}, 3: {"x": 3.0}})
    other = RunLog(RunId("journey", "math", "tiny", "grpo", 1), "wandb-offline", "/s/wandb/wandb/offline-run-1-c", "finished",
                   rows={1: {"x": 9.0}})
    joined = chain_requeued_jobs([second, other, first])
    assert [(log.run_id.algo, log.status, {s: r["x"] for s, r in log.rows.items()}) for log in joined] == [
        ("gdpo", "finished", {1: 1.0, 2: 2.5, 3: 3.0}), ("grpo", "finished", {1: 9.0})]


def test_a_checkpoint_becomes_resumable_only_once_its_step_is_written(tmp_path):
    """grpo_train saves step N's checkpoint, then logs step N; a job killed between the two
    must resume from step N-1, not after a step no file holds."""
    state = plugin.HookState(settings=None)
    renamed = []

    class Manager:  # NeMo RL's CheckpointManager surface
        def begin_finalization(self, checkpoint_path, wait_fn=None):
            renamed.append(checkpoint_path)

    Manager.begin_finalization = plugin.defer_finalization(Manager, state)
    writer = metrics.StepMetricsWriter(tmp_path)
    log_metrics = plugin.wrap_log_metrics(lambda self, m, step, prefix="", *a, **k: None, writer, state)
    log_metrics(None, {"mean_gen_tokens_per_sample": 9.0}, 1, "train")
    Manager().begin_finalization("tmp_step_1")
    log_metrics(None, {"loss": 0.5}, 1, "train")
    assert renamed == [] and not (tmp_path / "metrics.jsonl").read_text()  # killed here: resume from step 0
    log_metrics(None, {"total_step_time": 2.0}, 1, "timing/train", step_finished=True)
    assert renamed == ["tmp_step_1"]
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {
        "step": 1, "train/mean_gen_tokens_per_sample": 9.0, "train/loss": 0.5, "timing/train/total_step_time": 2.0}
    writer.close()


def test_timeout_stop_is_noticed_so_the_run_is_not_done():
    class Checker:  # NeMo RL's TimeoutChecker surface
        def __init__(self, due):
            self.due = due

        def check_save(self):
            return self.due

    state = plugin.HookState(settings=None)
    watched = plugin.watch_timeout(Checker, state)
    assert watched(False).check_save() is False and state.timed_out is False
    assert watched(True).check_save() is True and state.timed_out is True


# ---------------------------------------------------------------------------------------
# Data processors
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["toolcall", "gsm8k", "math", "code"])
def test_task_rows_have_the_same_flat_columns_for_every_task(task):
    rows = data.task_rows(task, "train", limit=2)
    assert len(rows) == 2
    assert all(set(row) == {"messages", "ground_truth", "tests", "task_name"} for row in rows)
    assert all(isinstance(row[k], str) for row in rows for k in ("messages", "ground_truth", "tests"))
    assert rows[0]["task_name"] == f"gdpo_{task}"


@pytest.mark.parametrize("task", ["toolcall", "gsm8k", "math", "code"])
def test_processor_builds_a_datum_spec_with_the_chat_prompt_and_the_ground_truth(task, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from gdpo_nemo.tasks import get_task

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    example = get_task(task).load("train", limit=1)[0]
    row = data.task_rows(task, "train", limit=1)[0]
    datum = data.PROCESSORS[f"gdpo_{task}"](row, SimpleNamespace(system_prompt=None, prompt=None), tokenizer, 100_000, 5)
    text = tokenizer.apply_chat_template(example.messages, tokenize=False, add_generation_prompt=True)
    assert datum["message_log"][0]["content"] == text
    assert tokenizer.decode(datum["message_log"][0]["token_ids"]) == text
    assert datum["length"] == len(datum["message_log"][0]["token_ids"]) == len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert datum["loss_multiplier"] == 1.0
    assert datum["extra_env_info"] == {"ground_truth": example.ground_truth, "tests": example.tests}
    assert (datum["idx"], datum["task_name"]) == (5, f"gdpo_{task}")


def test_prompt_longer_than_the_limit_is_masked_out(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    row = data.task_rows("gsm8k", "train", limit=1)[0]
    datum = data.PROCESSORS["gdpo_gsm8k"](row, None, tokenizer, 16, 0)
    assert datum["loss_multiplier"] == 0.0 and len(datum["message_log"][0]["token_ids"]) == 4
    assert datum["length"] > 16


def test_system_prompt_file_replaces_the_rows_system_message(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    row = data.task_rows("gsm8k", "train", limit=1)[0]
    datum = data.PROCESSORS["gdpo_gsm8k"](row, SimpleNamespace(system_prompt="Be brief."), tokenizer, None, 0)
    assert datum["message_log"][0]["content"].startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_processor_rejects_rows_of_another_task(tiny_tokenizer_dir):
    row = data.task_rows("gsm8k", "train", limit=1)[0]
    with pytest.raises(ValueError, match="processor 'gdpo_math' got a row of task_name 'gdpo_gsm8k'"):
        data.PROCESSORS["gdpo_math"](row, None, None, None, 0)


def test_registered_names_agree_with_the_composer():
    from gdpo_nemo.engines.nemo.environment import ACTOR_FQN

    assert set(data.PROCESSORS) == set(cc.PROCESSOR_NAMES.values())
    module, name = ACTOR_FQN.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) is not None
    assert cc.DATASET_CLASS == "gdpo_nemo.engines.nemo.datasets.TaskDataset"


# ---------------------------------------------------------------------------------------
# Entry point, up to the launch
# ---------------------------------------------------------------------------------------


def _write_config(tmp_path, **kwargs) -> Path:
    config = cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n8g", **kwargs)
    path = tmp_path / "run.yaml"
    path.write_text(cc.dump(config))
    return path


def _entry(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gdpo_nemo.commands.nemo_run", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_entry_point_dry_run_validates_overrides_and_prints_the_config(tmp_path):
    done = _entry("--config", str(_write_config(tmp_path)), "--dry-run", "grpo.max_num_steps=3")
    assert done.returncode == 0, done.stderr
    assert "max_num_steps: 3" in done.stdout


def test_entry_point_stops_on_a_bad_override_before_launching(tmp_path):
    done = _entry("--config", str(_write_config(tmp_path)), "+policy.generaton.top_p=0.9")
    assert done.returncode == 2
    assert "policy.generaton: unknown key" in done.stderr


def test_entry_point_refuses_a_local_engine_config(tmp_path):
    config = cc.compose("gsm8k", "tiny", "gdpo")
    (tmp_path / "local.yaml").write_text(cc.dump(config))
    assert nemo_run.main(["--config", str(tmp_path / "local.yaml")]) == 2


def test_entry_point_finds_run_grpo_from_the_environment_or_says_where_it_looked(tmp_path, monkeypatch):
    script = tmp_path / "run_grpo.py"
    script.write_text("")
    monkeypatch.setenv(run.RUN_GRPO_ENV, str(script))
    assert run.find_run_grpo() == script.resolve()
    monkeypatch.delenv(run.RUN_GRPO_ENV)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="examples/run_grpo.py not found"):
        run.find_run_grpo()


def test_run_dir_gets_the_resolved_config_and_loses_a_stale_done(tmp_path):
    config = cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n8g",
                        overrides=[f"logger.log_dir={tmp_path / 'run'}"])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "DONE").write_text("")
    run_dir = run.prepare_run_dir(config)
    assert not (run_dir / "DONE").exists()
    assert cc.load_config_file(run_dir / "config.yaml") == config
