"""The GPU study (experiments/gpu_study.yaml), its one-command rerun (scripts/gpu_study.sh)
and the GPU benchmark against TRL (benchmarks/bench_gpu_vs_trl.py), checked on the CPU.

The experiment must be what the study claims (GRPO vs GDPO, gsm8k with 3 rewards and
toolcall with 2, 3 seeds, 32 prompts x 8 rollouts, 128-256 new tokens, on CUDA in bf16); the
script and the benchmark must run end to end, which `--smoke` / tiny sizes on the CPU show.
The real runs need a GPU (docs/gpu.md).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo import config as cc
from gdpo_nemo.engines.local.config import resolve_and_check
from gdpo_nemo.runs.rundir import read_metrics
from tests.support.plain_shell import checkout, run_as_written, script_of, script_smoke_commands
from tests.support.requirements import require

REPO = Path(__file__).resolve().parents[1]
COMPONENTS = {"gsm8k": ["format", "correctness", "integer"], "toolcall": ["format", "correctness"]}


def test_the_gpu_study_is_grpo_vs_gdpo_on_two_tasks_three_seeds_each_at_a_paper_like_batch_shape():
    specs = cc.load_experiment("gpu_study")
    assert sorted((s.task, s.algo, s.seed) for s in specs) == sorted(
        (task, algo, seed) for task in COMPONENTS for algo in ("grpo", "gdpo") for seed in (0, 1, 2))
    for spec in specs:
        config, _ = resolve_and_check(spec.compose())
        grpo, policy, local = config["grpo"], config["policy"], config["gdpo"]["local"]
        assert config["gdpo"]["reward_components"] == COMPONENTS[spec.task]
        assert config["gdpo"]["estimator"] == spec.algo
        assert policy["model_name"] == "builtin:smollm2-135m"
        assert (grpo["num_prompts_per_step"], grpo["num_generations_per_prompt"]) == (32, 8)
        assert 128 <= policy["generation"]["max_new_tokens"] <= 256
        assert policy["train_global_batch_size"] == 32 * 8  # one optimizer update per step
        assert (local["device"], local["autocast"], local["warm_start"]["enabled"]) == ("cuda", "bfloat16", True)


def _study(out, *args):
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_study.sh"), "--smoke", "--jobs", "2", "--out", str(out),
                           *args], env=env, cwd=out, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_the_docs_smoke_command_runs_every_run_side_by_side_then_reports_and_a_rerun_skips_finished_runs(tmp_path):
    """docs/gpu.md's smoke command, word for word from a user's shell (tests/support/plain_shell.py;
    tests/test_docs_commands.py leaves it to this test), then again."""
    [command] = [command for _, command in script_smoke_commands() if script_of(command) == "scripts/gpu_study.sh"]
    assert "--only seed=0" in command  # the runs checked below
    done = run_as_written(command, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = checkout(tmp_path) / "runs" / "gpu_study"  # the script's default --out
    names = sorted(p.name for p in (out / "runs").iterdir())
    assert names == sorted(f"gpu_study__{task}__tiny__{algo}__seed0" for task in COMPONENTS for algo in ("grpo", "gdpo"))
    for name in names:
        records = read_metrics(out / "runs" / name)
        assert [r["step"] for r in records] == [1, 2] and (out / "runs" / name / "DONE").is_file()
        task = name.split("__")[1]
        assert all(f"train/reward/{c}" in records[-1] for c in COMPONENTS[task])
    assert "4 of 4 run(s) finished" in done.stdout
    report = (out / "report" / "README.md").read_text()
    assert all(f"`{name}` | finished" in report for name in names)
    assert (out / "report" / "tables" / "training_summary.md").is_file()

    before = {name: (out / "runs" / name / "metrics.jsonl").read_text() for name in names}
    again = run_as_written(command, tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("done already") == 4 and "started" not in again.stdout
    assert before == {name: (out / "runs" / name / "metrics.jsonl").read_text() for name in names}


def test_the_study_script_names_a_bad_filter_and_starts_nothing(tmp_path):
    done = _study(tmp_path, "--only", "algo=ppo")
    assert done.returncode != 0
    assert "--only matches no run of the experiment" in done.stderr and "algo in gdpo, grpo" in done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_gpu_benchmark_against_trl_runs_at_tiny_size_on_the_cpu():
    # TRL lives in .venv-peers (scripts/setup_peers.sh; `scripts/setup.sh --all`), beside torch
    # and transformers of its own: the benchmark runs there, with the repo on its path.
    python = REPO / ".venv-peers" / "bin" / "python"
    require(python.exists(), "TRL in .venv-peers (scripts/setup_peers.sh)")
    done = subprocess.run([str(python), str(REPO / "benchmarks" / "bench_gpu_vs_trl.py"), "--device", "cpu",
                           "--dtype", "float32", "--model", "builtin:tiny", "--prompts", "2", "--generations", "2",
                           "--max-new-tokens", "4", "--micro-batch", "2", "--steps", "2"],
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 prompts x 2 generations x 4 new tokens" in done.stdout and "cpu float32" in done.stdout
    ratio = [line for line in done.stdout.splitlines() if line.startswith("ratio ours / TRL")]
    assert len(ratio) == 1 and "target <= 0.50" in ratio[0] and "generation tokens/s" in ratio[0]
    assert done.stdout.count("16 generated tokens/step") == 2  # both trainers: 2 x 2 rows x 4 tokens
