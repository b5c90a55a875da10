"""Every run dir says what its numbers depend on (provenance.json), and the report names runs
compared in one table whose provenance differs in what changes numbers.

Real runs throughout: the study runner's smoke study (builtin:tiny, two seeds, both methods,
warm-started), a real resume, the NeMo RL engine's run-dir preparation, and the report
command; tampered provenance stands for runs made by other code, libraries or weights.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gdpo_nemo import config as cc
from gdpo_nemo.runs import provenance, rundir
from tests.support.numerics import user_environment

REPO = Path(__file__).resolve().parents[1]


def run_report(source: Path, out: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "report", "--source", str(source),
                           "--experiment", "cpu_study", "--out", str(out), "--no-cache", "--quiet"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return (out / "problems.md").read_text()


@pytest.fixture(scope="module")
def code_at_start() -> dict:
    """The checkout's code version when the study started (a commit made while the tests run
    moves HEAD; the runs record the one they ran)."""
    return provenance.code_version()


@pytest.fixture(scope="module")
def study(tmp_path_factory, code_at_start) -> Path:
    """The smoke CPU study, seeds 0 and 1: four finished tiny runs made by the study runner."""
    out = tmp_path_factory.mktemp("provenance") / "study"
    env = {k: v for k, v in user_environment().items() if k != "GDPO_NEMO_CACHE"}  # pinned, as for a user
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.commands.local_parallel", "cpu_study", "--smoke",
                           "--jobs", "2", "--only", "seed=0", "--only", "seed=1", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return out


def runs_of(runs: Path) -> dict[str, Path]:
    """{"grpo0": run dir, ...} of a folder of run dirs."""
    return {p.name.split("__")[3] + p.name[-1]: p for p in sorted(runs.iterdir())}


def test_each_run_records_code_libraries_numerics_and_the_weights_it_started_from(study, code_at_start):
    runs = runs_of(study / "runs")
    assert sorted(runs) == ["gdpo0", "gdpo1", "grpo0", "grpo1"]
    records = {name: provenance.read(path) for name, path in runs.items()}
    for name, invocations in records.items():
        assert len(invocations) == 1 and invocations[0]["resumed_from_step"] is None
        first = invocations[0]
        assert first["code"] == code_at_start
        assert first["code"]["commit"] and len(first["code"]["commit"]) == 40
        assert first["libraries"]["torch"] == torch.__version__
        assert first["numerics"]["device"] == "cpu" and first["numerics"]["dtype"] == "float32"
        assert first["numerics"]["threads"] == 1  # the study runner's one thread per run on 2 jobs and 2 cores
        assert first["start_weights"]["source"].startswith("warm_start/")
    # Both methods of a seed start from one warm start; the seeds from one base model.
    assert records["grpo0"][0]["start_weights"] == records["gdpo0"][0]["start_weights"]
    assert records["grpo0"][0]["start_weights"]["digest"] != records["grpo1"][0]["start_weights"]["digest"]
    # builtin:tiny draws its weights from the seed, so its base differs by seed, and says so.
    assert records["grpo0"][0]["start_weights"]["base_digest"] != records["grpo1"][0]["start_weights"]["base_digest"]
    assert [records[n][0]["start_weights"]["base_seed"] for n in ("grpo0", "grpo1")] == [0, 1]
    # The digest is of the weights the run actually loaded (the cached warm start's files).
    cached = study / ".cache" / "warm_start" / records["grpo0"][0]["start_weights"]["source"].split("/")[1]
    from gdpo_nemo.engines.local.models import load_pretrained

    model, _ = load_pretrained(cached)
    assert provenance.state_digest(model) == records["grpo0"][0]["start_weights"]["digest"]


def test_the_report_names_runs_whose_provenance_differs_in_what_changes_numbers(study, tmp_path):
    assert run_report(study / "runs", tmp_path / "clean").strip().endswith("No problems found.")
    copy = tmp_path / "runs"
    shutil.copytree(study / "runs", copy, ignore=shutil.ignore_patterns("checkpoints"))
    runs = runs_of(copy)

    def edit(name: str, change) -> None:
        path = runs[name] / provenance.FILE
        data = json.loads(path.read_text())
        change(data["invocations"])
        path.write_text(json.dumps(data))

    edit("gdpo1", lambda inv: inv[0]["libraries"].update(torch="2.99.0"))                 # other libraries
    edit("grpo0", lambda inv: inv[0]["start_weights"].update(digest="feedfacefeedface"))  # other weights, same seed
    edit("gdpo0", lambda inv: inv.append({**inv[0], "resumed_from_step": 1,                # resumed under other code
                                          "code": {**inv[0]["code"], "commit": "0" * 40}}))
    problems = run_report(copy, tmp_path / "tampered")
    lines = [line for line in problems.splitlines() if line.startswith("- ")]
    mismatch = [line for line in lines if "libraries.torch" in line]
    assert len(mismatch) == 1 and "2.99.0" in mismatch[0] and "cpu_study__gsm8k__tiny__gdpo__seed1" in mismatch[0]
    weights = [line for line in lines if "did not start from the same weights" in line]
    assert len(weights) == 1 and "seed 0" in weights[0] and "feedfacefeedface" in weights[0]
    changed = [line for line in lines if "resumed under other numbers" in line]
    assert len(changed) == 1 and "cpu_study__gsm8k__tiny__gdpo__seed0" in changed[0] and "code.commit" in changed[0]
    assert "**provenance_mismatch** (2)" in problems and "**provenance_changed** (1)" in problems

    (runs["grpo1"] / provenance.FILE).unlink()  # a run dir from before provenance existed
    problems = run_report(copy, tmp_path / "missing")
    assert "**no_provenance** (1)" in problems and "`cpu_study__gsm8k__tiny__grpo__seed1`: its run dir has no provenance.json, unlike" in problems


def test_the_report_names_a_resume_from_other_weights_and_runs_off_the_cpu_pins_but_not_another_cpu(study, tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(study / "runs", copy, ignore=shutil.ignore_patterns("checkpoints"))
    runs = runs_of(copy)
    first = {name: provenance.read(path)[0] for name, path in runs.items()}
    # Made under the pins: ATen's AVX2 kernels and oneMKL's COMPATIBLE branch, whatever the CPU.
    for record in first.values():
        assert {k: record["numerics"][k] for k in ("cpu_numerics", "cpu_capability", "mkl_branch")} == {
            "cpu_numerics": "pinned", "cpu_capability": "AVX2", "mkl_branch": "COMPATIBLE"}
        assert "device_name" not in record["numerics"] and record["machine"] == provenance.machine()

    def edit(name: str, change) -> None:
        path = runs[name] / provenance.FILE
        data = json.loads(path.read_text())
        change(data["invocations"])
        path.write_text(json.dumps(data))

    # Resumed from other starting weights (a warm-start cache made again differently).
    edit("grpo1", lambda inv: inv.append({**inv[0], "resumed_from_step": 1,
                                          "start_weights": {**inv[0]["start_weights"], "digest": "0123456789abcdef"}}))
    # Another CPU under the pins: the same numbers, so nothing to name.
    edit("grpo0", lambda inv: inv[0].update(machine={"cpu": "Intel(R) Xeon(R) Processor", "cpu_instruction_sets": "AVX2"}))
    problems = run_report(copy, tmp_path / "resumed")
    lines = [line for line in problems.splitlines() if line.startswith("- ")]
    assert len(lines) == 1, problems
    assert "cpu_study__gsm8k__tiny__grpo__seed1" in lines[0] and "resumed under other numbers" in lines[0]
    assert "start_weights.digest" in lines[0] and "0123456789abcdef" in lines[0]
    # A run made off the pins (GDPO_NEMO_CPU_NUMERICS=native on an AVX-512 machine).
    edit("gdpo1", lambda inv: inv[0]["numerics"].update(cpu_numerics="native", cpu_capability="AVX512",
                                                        mkl_branch="OFF", device_name="AMD EPYC"))
    problems = run_report(copy, tmp_path / "native")
    [mismatch] = [line for line in problems.splitlines() if line.startswith("- ") and "differ in what changes" in line]
    assert "numerics.cpu_capability" in mismatch and "AVX512" in mismatch and "numerics.mkl_branch" in mismatch
    assert "cpu_study__gsm8k__tiny__gdpo__seed1" in mismatch and "machine" not in mismatch


def test_a_resumed_run_adds_an_invocation_and_keeps_its_provenance(tmp_path):
    from gdpo_nemo.engines.local.config import resolve_and_check
    from gdpo_nemo.engines.local.trainer import train

    def config(steps: int) -> dict:
        composed = cc.compose("gsm8k", "tiny", "grpo", cluster="local", seed=0, overrides=[
            f"grpo.max_num_steps={steps}", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
            "policy.train_global_batch_size=4", "policy.train_micro_batch_size=2", "policy.generation_batch_size=4",
            "policy.logprob_batch_size=4", "policy.generation.max_new_tokens=4", "policy.max_total_sequence_length=4096",
            "data.max_input_seq_length=null", "grpo.val_period=0", "grpo.val_at_end=false",
            "checkpointing.save_period=1", "++gdpo.local.progress=false", "++gdpo.local.num_threads=1"])
        return resolve_and_check(composed)[0]

    run_dir = tmp_path / "run"
    train(config(1), run_dir, log=lambda m: None)
    train(config(2), run_dir, resume=True, log=lambda m: None)
    invocations = provenance.read(run_dir)
    assert [i["resumed_from_step"] for i in invocations] == [None, 1]
    assert invocations[0]["start_weights"]["source"] == "builtin:tiny"
    assert invocations[0]["start_weights"]["base_seed"] == 0
    fields = (*provenance.NUMBER_FIELDS, "start_weights")
    assert provenance.differences(invocations, ["start", "resume"], fields) == []
    assert [r["step"] for r in rundir.read_metrics(run_dir)] == [1, 2]


def test_a_nemo_run_dir_records_its_code_libraries_and_model(tmp_path):
    from gdpo_nemo.engines.nemo import run

    config = cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", cluster="nemo_1n8g",
                        overrides=[f"logger.log_dir={tmp_path / 'run'}",
                                   f"checkpointing.checkpoint_dir={tmp_path / 'run' / 'checkpoints'}"])
    (tmp_path / "run" / "checkpoints" / "step_3").mkdir(parents=True)
    run_dir = run.prepare_run_dir(config)
    (record,) = provenance.read(run_dir)
    assert record["numerics"]["engine"] == "nemo" and record["numerics"]["precision"] == config["policy"]["precision"]
    assert record["start_weights"] == {"source": config["policy"]["model_name"], "digest": None}
    assert record["resumed_from_step"] == 3
    assert set(run.NEMO_LIBRARIES) <= set(record["libraries"]) and record["code"]["commit"]


def test_the_weights_digest_sees_one_bit_and_every_dtype():
    state = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a": torch.ones(4, dtype=torch.bfloat16),
             "s": torch.tensor(3.0)}
    digest = provenance.state_digest(state)
    assert provenance.state_digest(dict(reversed(list(state.items())))) == digest  # name order, not insertion order
    flipped = state["b"].clone()
    flipped.view(torch.int32)[0, 0] ^= 1  # the last bit of one float
    assert provenance.state_digest({**state, "b": flipped}) != digest
    assert provenance.state_digest({**state, "b": state["b"].reshape(3, 2)}) != digest  # shape counts
    assert provenance.state_digest({**state, "a": state["a"].to(torch.float16)}) != digest  # dtype counts
