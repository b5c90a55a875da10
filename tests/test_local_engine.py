"""The local engine end to end on the tiny model: configs, runs, determinism, resume.

Runs use configs/local/tiny.yaml (`builtin:tiny`: a ~230 K-parameter Llama with random
weights and a byte tokenizer, built in code). Such a model writes no `<answer>` tags, so
most rewards are constant; runs that must move the weights use the math task with a short
`gdpo.length_limit`, whose length reward (1 if the completion has <= limit tokens) varies
between rollouts that stop early and rollouts that do not.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gdpo_nemo.engines.local.config import check_config, load_run_config
from gdpo_nemo.engines.local.trainer import train
from gdpo_nemo.runs.rundir import read_metrics, read_metrics_file

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "local" / "tiny.yaml"
# The math task's length reward varies on the tiny model when the limit is near the
# typical completion length, so advantages and gradients are non-zero.
VARYING = ("gdpo.task=math", "gdpo.length_limit=6", "policy.generation.max_new_tokens=10")
TASK_COMPONENTS = {
    "gsm8k": ["format", "correctness", "integer"],
    "toolcall": ["format", "correctness"],
    "math": ["correctness", "length"],
    "code": ["pass", "length", "bug"],
}


def tiny_config(*overrides):
    config, _ = load_run_config(TINY, list(overrides))
    return config


def without_timing(records):
    """Records minus wall-clock keys (`timing/*`) and the CUDA allocator's peaks (`memory/*`,
    logged on a GPU only): everything else must be reproducible."""
    return [{k: v for k, v in r.items() if not k.startswith(("timing/", "memory/"))} for r in records]


# ---------------------------------------------------------------------------------------
# Config checking: errors name the key and what is accepted.
# ---------------------------------------------------------------------------------------


def test_missing_keys_get_nemo_rl_defaults():
    config = tiny_config()
    assert config["loss_fn"]["kl_input_clamp_value"] == 20.0  # not in tiny.yaml
    assert config["grpo"]["val_start_at"] == -1
    assert config["policy"]["optimizer"]["kwargs"]["lr"] == 1e-3  # from the file


@pytest.mark.parametrize("override, key, accepted", [
    ("loss_fn.use_cispo=true", "loss_fn.use_cispo", "False"),
    ("grpo.use_dynamic_sampling=true", "grpo.use_dynamic_sampling", "False"),
    ("loss_fn.sequence_level_importance_ratios=true", "loss_fn.sequence_level_importance_ratios", "False"),
    ("policy.generation.top_p=0.9", "policy.generation.top_p", "1.0"),
    ("grpo.max_rollout_turns=2", "grpo.max_rollout_turns", "1"),
    ("loss_fn.truncated_importance_sampling_type=tis", "loss_fn.truncated_importance_sampling_type", "None"),
])
def test_unimplemented_algorithm_key_is_an_error_naming_key_and_accepted_value(override, key, accepted):
    with pytest.raises(ValueError) as error:
        tiny_config(override)
    message = str(error.value)
    assert key in message and "not implemented by the local engine" in message and accepted in message


def test_unknown_key_is_an_error_listing_the_section_keys():
    with pytest.raises(ValueError, match=r"grpo.num_prompt_per_step: unknown key; grpo accepts \[.*'num_prompts_per_step'"):
        tiny_config("+grpo.num_prompt_per_step=4")


@pytest.mark.parametrize("override, message", [
    ("grpo.num_generations_per_prompt=1", r"grpo.num_generations_per_prompt: 1 is not accepted; expected an int >= 2"),
    ("gdpo.estimator=ppo", r"gdpo.estimator: 'ppo' is not accepted; expected one of \['grpo', 'grpo_no_std', 'gdpo', 'gdpo_no_bn'\]"),
    ("loss_fn.reference_policy_kl_type=k4", r"loss_fn.reference_policy_kl_type: 'k4' is not accepted; expected one of \['k1', 'k2', 'k3'\]"),
    ("policy.train_global_batch_size=3", r"policy.train_global_batch_size: 3 must divide"),
    ("policy.model_name=builtin:gpt5", r"policy.model_name='builtin:gpt5' is not a built-in model"),
])
def test_bad_value_is_an_error_naming_the_key(override, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        config = tiny_config(override)
        train(config, tmp_path)  # model names are checked when the model loads


def test_cluster_only_keys_are_accepted_and_named_in_one_line():
    config, note = load_run_config(TINY, ["+cluster.num_nodes=4", "+policy.megatron_cfg.enabled=true",
                                          "+policy.generation.vllm_cfg.tensor_parallel_size=2"])
    assert note.count("\n") == 0
    for key in ("cluster", "policy.megatron_cfg", "policy.generation.vllm_cfg"):
        assert key in note
    assert config["cluster"] == {"num_nodes": 4}


def test_yaml_exponent_floats_are_numbers_and_defaults_inheritance_works(tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text(f"defaults: {TINY}\npolicy:\n  optimizer:\n    kwargs:\n      lr: 3e-4\n"
                     "logger:\n  _override_: true\n  log_dir: elsewhere\n")
    config, _ = load_run_config(child)
    assert config["policy"]["optimizer"]["kwargs"]["lr"] == 3e-4
    assert config["policy"]["optimizer"]["kwargs"]["betas"] == [0.9, 0.999]  # inherited
    # `_override_` replaces the parent's logger section: its wandb.project is gone (default back)
    assert config["logger"]["log_dir"] == "elsewhere"
    assert config["logger"]["wandb"]["project"] == "gdpo-nemo"


def test_config_without_gdpo_block_is_an_error():
    with pytest.raises(ValueError, match="gdpo: missing; a run config needs the gdpo block"):
        check_config({"grpo": {}})


# ---------------------------------------------------------------------------------------
# Runs.
# ---------------------------------------------------------------------------------------


# Every task with GDPO, every estimator on gsm8k (the tool-calling prompts are ~2,200 byte
# tokens, so that task runs once, with one prompt per step).
TASK_RUNS = [(task, "gdpo") for task in TASK_COMPONENTS] + [("gsm8k", e) for e in ("grpo", "grpo_no_std", "gdpo_no_bn")]


@pytest.mark.parametrize("task, estimator", TASK_RUNS)
def test_each_task_and_estimator_trains_and_logs_per_reward_metrics(task, estimator, tmp_path):
    # Byte-level tokens: the tool-calling system prompt (tool schemas) is ~2,200 tokens.
    config = tiny_config(f"gdpo.task={task}", f"gdpo.estimator={estimator}", "grpo.max_num_steps=2",
                         "gdpo.length_limit=8", "policy.max_total_sequence_length=4096",
                         f"grpo.num_prompts_per_step={1 if task == 'toolcall' else 2}")
    result = train(config, tmp_path)
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        for name in TASK_COMPONENTS[task]:
            assert f"train/reward/{name}" in record
            assert 0.0 <= record[f"train/adv/zero_std_frac/{name}"] <= 1.0
        assert record["train/reward"] == pytest.approx(sum(record[f"train/reward/{n}"] for n in TASK_COMPONENTS[task]))
        assert record["train/adv/distinct_groups"] >= 1
        for key in ("train/loss", "train/grad_norm", "train/advantages/mean", "train/mean_gen_tokens_per_sample",
                    "timing/train/total_step_time"):
            assert key in record
    assert (tmp_path / "config.yaml").exists() and (tmp_path / "DONE").exists()
    assert (tmp_path / "checkpoints" / "step_2" / "model.safetensors").exists()
    assert result.steps == 2


@pytest.mark.parametrize("conditioned", [False, True])
def test_a_length_task_logs_the_exceed_rate_and_what_grpo_merges_and_each_component_earns(conditioned, tmp_path):
    limit = 12
    config = tiny_config("gdpo.task=math", "gdpo.estimator=grpo", "grpo.max_num_steps=2", f"gdpo.length_limit={limit}",
                         f"gdpo.conditioned_length={str(conditioned).lower()}", "grpo.num_prompts_per_step=2",
                         "grpo.val_at_end=true", "grpo.max_val_samples=4", "grpo.val_batch_size=4")
    train(config, tmp_path)
    records = read_metrics(tmp_path)
    for record in records:
        assert 0.0 <= record["train/adv/collapsed_frac"] <= 1.0
        assert set(k for k in record if k.startswith("train/adv/gap/")) == {"train/adv/gap/correctness",
                                                                          "train/adv/gap/length"}
        within = 1.0 - record["train/exceed_rate"]
        if conditioned:  # paid only when short AND correct: at most the share within the limit
            assert record["train/reward/length"] <= within + 1e-9
        else:  # the length reward is the share within the limit, counted apart from the exceed rate
            assert record["train/reward/length"] == pytest.approx(within)
    assert "validation/exceed_rate" in records[-1]
    if not conditioned:
        assert records[-1]["validation/reward/length"] == pytest.approx(1.0 - records[-1]["validation/exceed_rate"])
    # A task without the length reward logs no exceed rate.
    train(tiny_config("grpo.max_num_steps=1"), tmp_path / "gsm8k")
    assert not any("exceed_rate" in key for key in read_metrics(tmp_path / "gsm8k")[0])


def test_varying_rewards_give_non_zero_advantages_and_gradients(tmp_path):
    train(tiny_config(*VARYING, "grpo.max_num_steps=2"), tmp_path)
    records = read_metrics(tmp_path)
    assert any(r["train/adv/zero_std_frac/length"] < 1.0 for r in records)
    assert any(r["train/grad_norm"] > 0 for r in records)
    assert any(r["train/advantages/max"] > 0 > r["train/advantages/min"] for r in records)


def test_two_runs_with_the_same_seed_log_identical_metrics(tmp_path):
    config = tiny_config(*VARYING, "grpo.max_num_steps=3")
    train(config, tmp_path / "a")
    train(config, tmp_path / "b")
    first, second = without_timing(read_metrics(tmp_path / "a")), without_timing(read_metrics(tmp_path / "b"))
    assert len(first) == 3 and first == second
    train(tiny_config(*VARYING, "grpo.max_num_steps=3", "grpo.seed=8"), tmp_path / "c")
    assert without_timing(read_metrics(tmp_path / "c")) != first


def test_validation_logs_validation_rewards_at_start_and_period(tmp_path):
    config = tiny_config("grpo.max_num_steps=2", "grpo.val_at_start=true", "grpo.val_period=2",
                         "grpo.max_val_samples=3")
    train(config, tmp_path)
    records = {r["step"]: r for r in read_metrics(tmp_path)}
    assert sorted(records) == [0, 1, 2]
    for step in (0, 2):
        for name in TASK_COMPONENTS["gsm8k"]:
            assert f"validation/reward/{name}" in records[step]
        assert records[step]["validation/accuracy"] == pytest.approx(records[step]["validation/reward"])
        assert records[step]["validation/avg_length"] > 0
    assert "validation/accuracy" not in records[1]


def test_kl_penalty_loads_a_frozen_reference_and_logs_a_positive_kl(tmp_path):
    train(tiny_config(*VARYING, "grpo.max_num_steps=3", "loss_fn.reference_policy_kl_penalty=0.1"), tmp_path)
    records = read_metrics(tmp_path)
    assert records[0]["train/kl_penalty"] == pytest.approx(0.0, abs=1e-6)  # policy == reference
    assert records[-1]["train/kl_penalty"] > 0


def test_several_global_batches_make_several_optimizer_steps_with_ratio_moving_off_one(tmp_path):
    # 2 prompts x 4 rollouts = 8 rows, global batch 2: four AdamW steps per GRPO step; after
    # the first one, pi_theta != pi_old, so the mean ratio is no longer exactly 1.
    train(tiny_config(*VARYING, "grpo.max_num_steps=1", "policy.train_global_batch_size=2",
                      "policy.train_micro_batch_size=1"), tmp_path)
    record = read_metrics(tmp_path)[0]
    assert abs(record["train/probs_ratio"] - 1.0) > 1e-6


def test_resume_with_a_changed_algorithm_key_is_refused(tmp_path):
    train(tiny_config("grpo.max_num_steps=1"), tmp_path)
    with pytest.raises(ValueError, match="gdpo.estimator"):
        train(tiny_config("grpo.max_num_steps=2", "gdpo.estimator=grpo"), tmp_path, resume=True)


def test_resume_accepts_a_run_saved_before_a_key_with_a_default_existed(tmp_path):
    """A code upgrade that adds a config key (filled by its default) between a run and its
    resume is not a change of settings; a changed value of that key still is."""
    import yaml

    train(tiny_config("grpo.max_num_steps=1"), tmp_path)
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    del saved["loss_fn"]["kl_input_clamp_value"]  # as if written before the key existed
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    lines = []
    train(tiny_config("grpo.max_num_steps=2"), tmp_path, resume=True, log=lines.append)
    assert any("resumed from" in line for line in lines)
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    with pytest.raises(ValueError, match="kl_input_clamp_value"):
        train(tiny_config("grpo.max_num_steps=3", "loss_fn.kl_input_clamp_value=5.0"), tmp_path, resume=True)


def test_a_shorter_run_is_the_start_of_a_longer_one_and_extending_it_by_resume_gives_the_longer_run(tmp_path):
    """The prompts do not depend on grpo.max_num_steps (they once did: the engine drew
    num_prompts_per_step x steps prompts, so a 2-step run trained on other prompts than the
    first 2 steps of a 4-step run, and a run resumed with more steps went on in another order)."""
    overrides = (*VARYING, "checkpointing.save_period=2", "grpo.num_prompts_per_step=2")
    train(tiny_config(*overrides, "grpo.max_num_steps=4"), tmp_path / "long", log=lambda *a: None)
    train(tiny_config(*overrides, "grpo.max_num_steps=2"), tmp_path / "short", log=lambda *a: None)
    long, short = (without_timing(read_metrics(tmp_path / name)) for name in ("long", "short"))
    assert [r["step"] for r in long] == [1, 2, 3, 4] and short == long[:2]
    train(tiny_config(*overrides, "grpo.max_num_steps=4"), tmp_path / "short", resume=True, log=lambda *a: None)
    assert without_timing(read_metrics(tmp_path / "short")) == long


def test_a_kill_between_a_checkpoint_and_its_log_line_loses_no_step(tmp_path):
    """A run killed after writing checkpoint N but before logging step N resumes from N
    without running it again; step N's record comes from the checkpoint."""
    overrides = (*VARYING, "checkpointing.save_period=2", "grpo.num_prompts_per_step=2")
    train(tiny_config(*overrides, "grpo.max_num_steps=4"), tmp_path / "whole", log=lambda *a: None)
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "whole", killed)
    # the state a kill right after writing checkpoint 2 leaves: step 2 not yet logged
    lines = (killed / "metrics.jsonl").read_text().splitlines()
    (killed / "metrics.jsonl").write_text(lines[0] + "\n")
    shutil.rmtree(killed / "checkpoints" / "step_4")
    (killed / "DONE").unlink()
    train(tiny_config(*overrides, "grpo.max_num_steps=4"), killed, resume=True, log=lambda *a: None)
    after = read_metrics(killed)
    assert [r["step"] for r in after] == [1, 2, 3, 4]
    assert without_timing(after) == without_timing(read_metrics(tmp_path / "whole"))


def test_warm_start_runs_once_and_is_reused_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GDPO_NEMO_CACHE", str(tmp_path / "cache"))
    overrides = ("grpo.max_num_steps=1", "gdpo.local.warm_start.enabled=true", "gdpo.local.warm_start.steps=2",
                 "gdpo.local.warm_start.batch_size=2")
    lines = []
    train(tiny_config(*overrides), tmp_path / "a", log=lines.append)
    assert any("warm-start: 2 steps" in line for line in lines)
    saved = list((tmp_path / "cache" / "warm_start").iterdir())
    assert len(saved) == 1 and json.loads((saved[0] / "warm_start.json").read_text())["losses"]
    lines.clear()
    # lr 0: the policy the run trains is what it loaded, so its first checkpoint must hold the
    # warm-started weights (not the base model's), read from the cache.
    frozen = (*overrides, "gdpo.estimator=grpo", "policy.optimizer.kwargs.lr=0.0", "policy.optimizer.kwargs.weight_decay=0.0",
              "checkpointing.save_period=1")
    train(tiny_config(*frozen), tmp_path / "b", log=lines.append)
    assert any("warm-start: using cached" in line for line in lines)
    warm = load_file(str(saved[0] / "model.safetensors"))
    trained = load_file(str(tmp_path / "b" / "checkpoints" / "step_1" / "model.safetensors"))
    assert set(warm) <= set(trained) and all(torch.equal(trained[name], warm[name]) for name in warm)
    train(tiny_config(*frozen, "gdpo.local.warm_start.enabled=false"), tmp_path / "c")  # the base: other weights
    base = load_file(str(tmp_path / "c" / "checkpoints" / "step_1" / "model.safetensors"))
    assert any(not torch.equal(base[name], warm[name]) for name in warm)


def _train_command(run_dir, *extra):
    return [sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", str(TINY), "--run-dir", str(run_dir),
            *VARYING, "grpo.max_num_steps=10", "checkpointing.save_period=3", "grpo.num_prompts_per_step=2",
            *extra]


def test_sigkill_after_a_checkpoint_then_resume_ends_with_the_uninterrupted_metrics(tmp_path):
    sigkill_then_resume(tmp_path)


def sigkill_then_resume(tmp_path, *extra):
    """Run 10 steps whole; run them again, SIGKILL after checkpoint 3, resume: the resumed
    run must log every step once and end with the whole run's metrics. `extra`: overrides."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    reference = subprocess.run(_train_command(tmp_path / "whole", *extra), env=env, capture_output=True, text=True,
                               timeout=300)
    assert reference.returncode == 0, reference.stderr

    killed_dir = tmp_path / "killed"
    process = subprocess.Popen(_train_command(killed_dir, *extra), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    checkpoint = killed_dir / "checkpoints" / "step_3"
    deadline = time.monotonic() + 240
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed_dir / "DONE").exists()
    logged_before_resume = read_metrics(killed_dir)
    assert len(logged_before_resume) < 10

    resumed = subprocess.run(_train_command(killed_dir, *extra, "--resume"), env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout
    whole, after = read_metrics(tmp_path / "whole"), read_metrics(killed_dir)
    assert [r["step"] for r in after] == list(range(1, 11))  # no step logged twice
    assert without_timing(after) == without_timing(whole)
    # What the killed run logged past the checkpoint it resumed from was set aside, not
    # dropped, and the resumed run logged the same again.
    resumed_from = int(re.search(r"resumed from .* \(step (\d+)\)", resumed.stdout).group(1))
    past = [r for r in logged_before_resume if r["step"] > resumed_from]
    aside = sorted(killed_dir.glob("metrics.after-step*.jsonl"))
    if past:
        [aside_file] = aside
        assert without_timing(read_metrics_file(aside_file)) == without_timing(past) == without_timing(after[resumed_from:len(logged_before_resume)])
    else:
        assert aside == []


def test_train_command_writes_the_run_dir_under_log_dir_named_by_run_id(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", str(TINY),
                           f"logger.log_dir={tmp_path}", "grpo.max_num_steps=1"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "test__gsm8k__tiny__gdpo__seed7"
    assert (run_dir / "metrics.jsonl").exists() and (run_dir / "DONE").exists()
    assert "train/reward/format" in done.stdout


def test_train_command_reports_a_bad_key_in_one_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", str(TINY),
                           "--run-dir", str(tmp_path), "loss_fn.use_cispo=true"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gdpo-nemo train: error: loss_fn.use_cispo: True is not implemented by the local engine; accepted False"]


def test_train_refuses_a_bad_config_with_the_nemo_paths_own_lines(tmp_path):
    """`gdpo-nemo train` and the NeMo path (load_config_file: what the NeMo RL entry point
    checks) walk the same key tree: the same bad keys get the same lines, all at once."""
    from gdpo_nemo import config as cc

    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(cc.dump(cc.compose("gsm8k", "tiny", "gdpo")))
    bad = ["+grpo.num_prompt_per_step=4", "loss_fn.ratio_clip_min=wide", "gdpo.eps=-1"]
    with pytest.raises(cc.ConfigError) as nemo_path:
        cc.load_config_file(run_yaml, bad)
    assert len(nemo_path.value.problems) == 3
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", str(run_yaml),
                           "--run-dir", str(tmp_path / "run"), *bad], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip() == f"gdpo-nemo train: error: {nemo_path.value}"


def test_run_dir_config_is_the_resolved_config(tmp_path):
    import yaml

    config = tiny_config("grpo.max_num_steps=1")
    train(config, tmp_path)
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == config


def test_tiny_model_is_seeded_and_small():
    from gdpo_nemo.engines.local.models import build_tiny_model, count_parameters

    a, tokenizer = build_tiny_model(seed=1)
    b, _ = build_tiny_model(seed=1)
    c, _ = build_tiny_model(seed=2)
    assert 100_000 < count_parameters(a) < 500_000
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    text = "<think> 12 + 7 </think>\n<answer>19</answer>"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # byte-level: lossless


def test_training_with_wandb_offline_mirrors_metrics_jsonl_in_the_run_dir(tmp_path, monkeypatch):
    from gdpo_nemo.runs.tracking import read_wandb_history

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    train(tiny_config("grpo.max_num_steps=2", "logger.wandb_enabled=true"), tmp_path)
    files = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    history = {row["_step"]: row for row in read_wandb_history(files[0])}
    for record in read_metrics(tmp_path):
        row = history[record["step"]]
        assert {k: row[k] for k in record if k != "step"} == {k: v for k, v in record.items() if k != "step"}


def test_a_cache_folder_another_process_finished_first_stays_and_no_temporary_is_left(tmp_path):
    """Two processes that share a cache (the suite's xdist workers, a study's runs) may make
    the same folder at once: the second rename finds the first's folder and keeps it."""
    import json

    from gdpo_nemo.engines.local.models import build_tiny_model, save_folder

    model, tokenizer = build_tiny_model(seed=0)
    target = tmp_path / "models" / "tiny"
    save_folder(model, tokenizer, target, records={"made.json": {"by": "first"}})
    assert save_folder(model, tokenizer, target, records={"made.json": {"by": "second"}}) == target
    assert json.loads((target / "made.json").read_text()) == {"by": "first"}
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny"]


def test_train_of_a_composed_config_runs_in_its_log_dir_which_is_the_run_dir(tmp_path, monkeypatch):
    """Issue 47: `logger.log_dir` meant the runs' root on the local engine and the run dir on
    the nemo engine; a composed config names the run dir on both, and `gdpo-nemo train` of it
    without --run-dir trains there, not in <run dir>/<run id>."""
    monkeypatch.setenv("GDPO_RUNS_DIR", str(tmp_path / "runs"))
    from gdpo_nemo import config as run_config
    from gdpo_nemo.commands.train import default_run_dir

    composed = run_config.compose("gsm8k", "tiny", "gdpo", seed=1)
    name = "adhoc__gsm8k__tiny__gdpo__seed1"
    assert composed["logger"]["log_dir"] == str(tmp_path / "runs" / name) == str(default_run_dir(composed))
    assert default_run_dir(dict(composed, logger={"log_dir": "runs"})) == Path("runs") / name  # a runs' root
    # trained as a user would, with a log_dir that is the run dir (the tiny config, made small)
    run_dir = tmp_path / "runs" / "test__gsm8k__tiny__gdpo__seed7"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", str(TINY),
                           f"logger.log_dir={run_dir}", "grpo.max_num_steps=1"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "DONE").exists() and not (run_dir / run_dir.name).exists()
