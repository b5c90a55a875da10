"""`gdpo-nemo nemo-smoke`: what it refuses before anything starts, and the hand-over from
.venv (no NeMo RL) to .venv-nemo. Its runs themselves are tested in
tests/nemo_tier/test_grpo_train_cpu.py (the killed run goes through this command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo import config as cc
from gdpo_nemo.engines.nemo.cpu.smoke import MAX_GEN_BATCHES, SmokeSize, cpu_config
from tests.support.requirements import requires

REPO = Path(__file__).resolve().parents[1]
NEMO_PYTHON = REPO / ".venv-nemo" / "bin" / "python"


def _smoke(*args, cwd=None):
    return subprocess.run([str(Path(sys.executable).parent / "gdpo-nemo"), "nemo-smoke", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def run_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("smoke") / "run.yaml"
    config = cc.compose("math", "r1-distill-qwen-1.5b", "gdpo", cluster="nemo_1n8g", seed=3)
    path.write_text(cc.dump(config))
    return path


def test_the_cpu_config_changes_only_size_model_and_places_and_lists_each_change(run_yaml, tmp_path):
    config = cc.load_config_file(run_yaml)
    cpu = cpu_config(config, model_dir="/models/tiny", run_dir=tmp_path / "run", size=SmokeSize(steps=3, prompts=2, generations=4),
                     data="offline", tiny_model=False)
    c = cpu.config
    # what makes the run what it is stays
    for key in ("gdpo", "loss_fn"):
        assert c[key] == config[key]
    assert c["grpo"]["adv_estimator"] == config["grpo"]["adv_estimator"]
    assert c["checkpointing"]["metric_name"] == config["checkpointing"]["metric_name"] == "val:reward/correctness"
    # what a CPU cannot do, or would take hours, changes
    assert (c["policy"]["model_name"], c["policy"]["precision"], c["policy"]["sequence_packing"]["enabled"]) == ("/models/tiny", "float32", False)
    assert c["env"]["gdpo_math"]["tokenizer"] == "/models/tiny"
    assert c["grpo"]["dynamic_sampling_max_gen_batches"] == MAX_GEN_BATCHES == 2
    assert c["data"]["train"]["limit"] == 2 * 3 * (1 + MAX_GEN_BATCHES)  # every step and every redraw
    assert c["logger"]["log_dir"] == str((tmp_path / "run").resolve())
    assert c["checkpointing"]["checkpoint_dir"] == str((tmp_path / "run" / "checkpoints").resolve())
    assert any(line.startswith("policy.precision: 'bfloat16' -> 'float32'") for line in cpu.changes)


def test_builtin_tiny_turns_dapo_off_unless_the_overrides_keep_it(run_yaml, tmp_path):
    config = cc.load_config_file(run_yaml)
    off = cpu_config(config, model_dir="/m", run_dir=tmp_path, tiny_model=True)
    assert off.config["grpo"]["use_dynamic_sampling"] is False and off.config["data"]["train"]["limit"] == 2 * 2
    kept = cpu_config(config, model_dir="/m", run_dir=tmp_path, tiny_model=True, overrides=["grpo.use_dynamic_sampling=true"])
    assert kept.config["grpo"]["use_dynamic_sampling"] is True and kept.config["data"]["train"]["limit"] == 2 * 2 * 3


def test_a_bad_override_names_its_key(run_yaml, tmp_path):
    config = cc.load_config_file(run_yaml)
    with pytest.raises(cc.ConfigError, match="grpo.max_num_stepz"):
        cpu_config(config, model_dir="/m", run_dir=tmp_path, overrides=["grpo.max_num_stepz=3"])


@requires(NEMO_PYTHON.exists(), ".venv-nemo: run scripts/setup_nemo.sh (scripts/setup.sh --all runs it)")
def test_without_nemo_rl_the_command_hands_over_to_venv_nemo_and_refuses_a_bad_model(run_yaml, tmp_path):
    done = _smoke(run_yaml, "--model", "no-such-model", "--run-dir", tmp_path / "run")
    assert done.returncode == 2, done.stderr
    assert "--model 'no-such-model': expected one of tiny, smollm2-135m or a local Hugging Face checkpoint folder" in done.stderr
    assert "NeMo RL is not importable" not in done.stderr  # it ran in .venv-nemo


@requires(NEMO_PYTHON.exists(), ".venv-nemo: run scripts/setup_nemo.sh (scripts/setup.sh --all runs it)")
def test_a_run_dir_that_holds_a_run_is_never_written_without_resume(run_yaml, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    done = _smoke(run_yaml, "--run-dir", run_dir)
    assert done.returncode == 2
    assert "already holds files: pass --resume" in done.stderr
    assert (run_dir / "metrics.jsonl").read_text() == '{"step": 1}\n'
    done = _smoke(run_yaml, "--run-dir", tmp_path / "empty", "--resume")
    assert done.returncode == 2 and "holds no run" in done.stderr


@requires(NEMO_PYTHON.exists(), ".venv-nemo: run scripts/setup_nemo.sh (scripts/setup.sh --all runs it)")
def test_a_local_engine_config_is_refused_with_one_line(tmp_path):
    path = tmp_path / "local.yaml"
    path.write_text(cc.dump(cc.compose("gsm8k", "tiny", "gdpo", cluster="local", seed=0)))
    done = _smoke(path, "--run-dir", tmp_path / "run")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("gdpo-nemo nemo-smoke: error: gdpo.engine: 'local'")


def test_flags_may_come_between_the_overrides(monkeypatch):
    from gdpo_nemo import cli
    from gdpo_nemo.commands import nemo_smoke

    seen = []
    monkeypatch.setattr(nemo_smoke, "run", lambda args, argv=None: seen.append((args.config, args.overrides, args.steps)) or 0)
    assert cli.main(["nemo-smoke", "r.yaml", "grpo.a=1", "--steps", "3", "~x.b"]) == 0
    assert cli.main(["nemo-smoke", "r.yaml", "--steps", "4", "grpo.a=2"]) == 0
    assert seen == [("r.yaml", ["grpo.a=1", "~x.b"], 3), ("r.yaml", ["grpo.a=2"], 4)]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["nemo-smoke", "r.yaml", "--bogus"])
    assert exit_info.value.code == 2


def test_the_per_step_time_after_a_resume_divides_by_the_steps_this_invocation_ran(tmp_path):
    # Issue 37: after --resume the summary divided grpo_train's time by --steps ("8 s, 2.5 s per
    # step" after one step). The steps run are the training records this invocation added.
    import json

    from gdpo_nemo.commands.nemo_smoke import _trained_steps

    assert _trained_steps(tmp_path / "none") == set()
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in (
        {"step": 0, "validation/accuracy": 0.0}, {"step": 1, "train/loss": 0.1}, {"step": 1, "validation/accuracy": 0.0})))
    before = _trained_steps(tmp_path)
    with metrics.open("a") as handle:
        handle.write(json.dumps({"step": 2, "train/loss": 0.2}) + "\n")
    assert before == {1} and _trained_steps(tmp_path) - before == {2}


def test_what_needs_no_nemo_rl_is_refused_in_one_line_before_the_hand_over(tmp_path, run_yaml):
    # Issue 37: each error took 3-5 s and came after third-party warnings, because the command
    # first handed over to .venv-nemo. The flags, the model, the config and the run dir are
    # checked in the Python that was called: one line, nothing else on the terminal.
    from gdpo_nemo import cli

    for args, message in ((["--model", "nope"], "--model 'nope': expected one of tiny, smollm2-135m or a local Hugging Face checkpoint folder"),
                          (["--steps", "0"], "--steps 0: must be at least 1"),
                          (["--generations", "0"], "--generations 0: must be at least 1"),
                          (["--val-period", "-1"], "--val-period -1: must be 0 (never) or more")):
        done = _smoke(run_yaml, "--run-dir", tmp_path / "run", *args)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", f"gdpo-nemo nemo-smoke: error: {message}\n")
    assert not (tmp_path / "run").exists()
    held = tmp_path / "held"
    held.mkdir()
    (held / "metrics.jsonl").write_text("{}\n")
    calls = []
    import gdpo_nemo.commands.nemo_smoke as command

    original = command._hand_over
    command._hand_over = lambda argv: calls.append(argv) or 0
    try:
        assert cli.main(["nemo-smoke", str(run_yaml), "--run-dir", str(held)]) == 2  # refused here, not after a hand-over
        assert calls == []
    finally:
        command._hand_over = original


def test_the_smollm2_defaults_are_the_shape_whose_rewards_move_and_flags_win():
    import argparse

    from gdpo_nemo.commands.nemo_smoke import MODEL_SHAPES, _size

    def size(**flags):
        args = argparse.Namespace(**{"model": "tiny", "steps": 2, "prompts": 2, "generations": None, "max_new_tokens": None,
                                     "val_period": 1, "max_gen_batches": None, **flags})
        return (_size(args).generations, _size(args).max_new_tokens)

    assert MODEL_SHAPES == {"tiny": (2, 32), "smollm2-135m": (4, 64)}
    assert size() == (2, 32) and size(model="smollm2-135m") == (4, 64)
    assert size(model="/some/checkpoint") == (4, 64)  # a real model: the shape that moves
    assert size(model="smollm2-135m", generations=8) == (8, 64) and size(max_new_tokens=16) == (2, 16)


def test_the_dapo_stop_says_which_flags_to_raise():
    from gdpo_nemo.commands.nemo_smoke import _failure

    # NeMo RL's own message at the pinned commit (nemo_rl/algorithms/grpo.py)
    error = ValueError("Dynamic sampling has reached the maximum allowed number of batches (2). Consider evaluating the"
                       " complexity of your data or adjusting the num_prompts_per_step or num_generations_per_prompt"
                       " parameters to enhance the diversity of the samples.")
    line = _failure(error, SmokeSize(generations=4, max_new_tokens=64), cap=MAX_GEN_BATCHES)
    assert line.startswith("ValueError: Dynamic sampling has reached the maximum allowed number of batches (2).")
    for hint in ("raise --generations (now 4)", "--max-new-tokens (now 64)", "grpo.dynamic_sampling_max_gen_batches=N",
                 "--max-gen-batches N", "grpo.use_dynamic_sampling=false"):
        assert hint in line
    assert _failure(RuntimeError("boom\nmore"), SmokeSize()) == "RuntimeError: boom"


def test_the_cap_on_dapo_batches_is_a_flag_and_an_override_of_the_key_wins(run_yaml, tmp_path):
    config = cc.load_config_file(run_yaml)  # math: DAPO on, grpo.dynamic_sampling_max_gen_batches as composed
    configured = config["grpo"]["dynamic_sampling_max_gen_batches"]
    assert configured > 4

    def cap(**kw):
        size = SmokeSize(max_gen_batches=kw.pop("max_gen_batches", MAX_GEN_BATCHES))
        return cpu_config(config, model_dir="/m", run_dir=tmp_path, size=size, **kw).config["grpo"]["dynamic_sampling_max_gen_batches"]

    assert cap() == MAX_GEN_BATCHES == 2
    assert cap(max_gen_batches=4) == 4
    assert cap(overrides=["grpo.dynamic_sampling_max_gen_batches=6"]) == 6


def test_the_dapo_stop_names_nemo_rls_real_number_of_batches():
    from gdpo_nemo.commands.nemo_smoke import _failure

    err = ValueError("Dynamic sampling has reached the maximum allowed number of batches (2). Consider ...")
    line = _failure(err, SmokeSize(generations=4, max_new_tokens=32), cap=2)
    assert "all 3 batches (the first and 2 more" in line and "--max-gen-batches N" in line
    assert "nemo_cpu.max_gen_batches" in line and "\n" not in line


def test_a_resubmission_that_would_stop_at_the_same_dapo_cap_says_so_instead(run_yaml, tmp_path):
    from gdpo_nemo.commands.nemo_smoke import _refuse_a_repeat
    from gdpo_nemo.runs import lifecycle, rundir

    run_dir = tmp_path / "run"
    config = cpu_config(cc.load_config_file(run_yaml), model_dir="/m", run_dir=run_dir).config
    (run_dir / "checkpoints" / "step_2").mkdir(parents=True)
    stop = ValueError("Dynamic sampling has reached the maximum allowed number of batches (2). Consider ...")
    lifecycle.fail_run(run_dir, stop, config_digest=lifecycle.config_digest(config), checkpoint=2)
    with pytest.raises(ValueError, match="its last job stopped at DAPO's batch cap .* from the same checkpoint step 2"
                                         " with the same config") as raised:
        _refuse_a_repeat(run_dir, config)
    assert "nemo_cpu.max_gen_batches" in str(raised.value) and str(rundir.failed_path(run_dir)) in str(raised.value)
    # a larger cap, a newer checkpoint, or another failure: the job goes ahead
    raised_cap = {**config, "grpo": {**config["grpo"], "dynamic_sampling_max_gen_batches": 4}}
    _refuse_a_repeat(run_dir, raised_cap)
    (run_dir / "checkpoints" / "step_3").mkdir()
    _refuse_a_repeat(run_dir, config)
    (run_dir / "checkpoints" / "step_3").rmdir()
    lifecycle.fail_run(run_dir, RuntimeError("a node went away"), config_digest=lifecycle.config_digest(config), checkpoint=2)
    _refuse_a_repeat(run_dir, config)
