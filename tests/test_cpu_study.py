"""The CPU study (experiments/cpu_study.yaml, scripts/cpu_study.sh, paper_figures/cpu_study/).

The experiment must be what docs/cpu_study.md says was measured and chosen; the script must
reach the parallel runner with this experiment; and the committed report must be what
`gdpo-nemo report` computes from the committed runs, so every number in it (and in the
README, which quotes it) can be regenerated.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo import config as cc
from gdpo_nemo.engines.local.config import resolve_and_check
from gdpo_nemo.runs import rundir
from gdpo_nemo.runs.rundir import read_metrics
from tests.support.studies import check_committed_pairs, check_committed_report, copy_committed

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "paper_figures" / "cpu_study"


SEEDS = range(10)


def test_the_cpu_study_is_grpo_vs_gdpo_over_ten_seeds_at_the_measured_shape():
    specs = cc.load_experiment("cpu_study")
    assert sorted((s.task, s.model, s.algo, s.seed) for s in specs) == sorted(
        ("gsm8k", "smollm2-135m", algo, seed) for algo in ("grpo", "gdpo") for seed in SEEDS)
    for spec in specs:
        config, _ = resolve_and_check(spec.compose())
        grpo, policy, gdpo = config["grpo"], config["policy"], config["gdpo"]
        assert (gdpo["estimator"], gdpo["reward_components"]) == (spec.algo, ["format", "correctness", "integer"])
        assert (policy["model_name"], gdpo["local"]["device"]) == ("builtin:smollm2-135m", "cpu")
        assert (grpo["num_prompts_per_step"], grpo["num_generations_per_prompt"], grpo["max_num_steps"]) == (4, 8, 30)
        assert policy["train_global_batch_size"] == 32  # one update per step
        assert gdpo["local"]["task_options"] == {}      # operands up to 99, + - x: docs/cpu_study.md's measured row
        warm = gdpo["local"]["warm_start"]
        assert (warm["enabled"], warm["steps"], warm["lr"]) == (True, 10, 3.0e-5)
        assert (grpo["val_at_end"], grpo["max_val_samples"], policy["generation"]["val_temperature"]) == (True, 640, 0.0)
        assert gdpo["local"]["num_threads"] == 1  # pinned: the same numbers on any machine of this kind
        assert config["checkpointing"]["metric_name"] is None  # the newest checkpoint is the resume point


def test_the_cpu_study_script_runs_this_experiment(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(["bash", str(REPO / "scripts" / "cpu_study.sh"), "--out", str(tmp_path), "--only", "seed=19"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "--only matches no run of the experiment" in done.stderr and "seed in 0, 1, 2, 3, 4, 5, 6, 7, 8, 9" in done.stderr
    assert not (tmp_path / "runs").exists()
    usage = subprocess.run(["bash", str(REPO / "scripts" / "study.sh")], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "usage: bash scripts/study.sh EXPERIMENT" in usage.stderr


def test_the_runner_runs_a_study_seed_by_seed_so_an_interrupted_study_leaves_whole_pairs(tmp_path):
    from gdpo_nemo.engines.local.parallel import plan_runs

    runs = plan_runs("cpu_study", tmp_path, threads_per_run=2)
    names = [run.name for run in runs]
    assert names == [f"cpu_study__gsm8k__smollm2-135m__{algo}__seed{seed}" for seed in SEEDS for algo in ("grpo", "gdpo")]
    text = runs[0].config_path.read_text()
    assert cc.load_config_file(runs[0].config_path)["gdpo"]["local"]["num_threads"] == 1  # the experiment's pinned count beats the runner's per-machine default
    assert str(tmp_path) not in text and f"log_dir: runs/{names[0]}" in text  # paths relative to the study's folder
    assert sorted(p.name for p in (tmp_path / "configs").iterdir()) == sorted(f"{name}.yaml" for name in names)


@pytest.fixture(scope="module")
def committed_copy(tmp_path_factory) -> Path:
    """The committed study's files (a clean clone's), copied out of this checkout."""
    return copy_committed(STUDY, tmp_path_factory.mktemp("committed") / "cpu_study")


def test_the_committed_study_holds_whole_seed_pairs_of_finished_runs_from_one_provenance():
    """The study is committed seed pair by seed pair as it finishes (it may take several
    sittings): every committed run is finished, both methods of each seed are there, and all
    of them ran the same clean code, libraries and numerics, each pair from one warm start."""
    check_committed_pairs(STUDY, "cpu_study__gsm8k__smollm2-135m", steps=30)


@pytest.mark.parametrize("table", ["training_summary", "paired"])
def test_the_committed_report_is_what_the_report_computes_from_the_committed_runs(tmp_path, table, committed_copy):
    check_committed_report(STUDY, "cpu_study", table, committed_copy, tmp_path)


def _processes_in(folder: Path) -> list[int]:
    """PIDs of the processes whose working dir is `folder` (the runner's runs run there)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_a_stopped_runner_stops_its_runs_and_the_same_command_finishes_them(tmp_path):
    """SIGTERM to the study runner (kill, a scheduler's stop) ends the runs it started, so
    none goes on writing into the study after its runner is gone; rerunning resumes them."""
    import signal
    import time

    out = tmp_path / "study"
    command = [sys.executable, "-m", "gdpo_nemo.commands.local_parallel", "cpu_study", "--smoke", "--jobs", "2",
               "--only", "seed=0", "--out", str(out), "grpo.max_num_steps=20"]
    env = {k: v for k, v in os.environ.items() if k != "GDPO_NEMO_CACHE"}
    runner = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any(
                any(r.get("step", 0) >= 2 for r in read_metrics(run)) for run in (out / "runs").glob("*")):
            time.sleep(0.5)
        assert len(_processes_in(out)) == 2, "both runs are running"
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 128 + signal.SIGTERM
        assert _processes_in(out) == []
    finally:
        os.killpg(runner.pid, signal.SIGKILL) if runner.poll() is None else None
    steps = {run.name: len(read_metrics(run)) for run in (out / "runs").iterdir()}
    time.sleep(2)
    assert {run.name: len(read_metrics(run)) for run in (out / "runs").iterdir()} == steps  # nothing writes on
    assert all(not rundir.is_done(out / "runs" / name) for name in steps)
    logs = {name: (out / "logs" / f"{name}.log").read_bytes() for name in steps}
    assert all(logs.values())  # the first sitting's output, to be kept
    done = subprocess.run([*command[:-1], "grpo.max_num_steps=20"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:]
    assert all(rundir.is_done(run) for run in (out / "runs").iterdir())
    # The rerun adds its output to each run's log: the first sitting's lines are still there,
    # whole, followed by the second's (a log opened for writing would start again empty).
    for name, before in logs.items():
        after = (out / "logs" / f"{name}.log").read_bytes()
        assert after.startswith(before) and b"finished step 20" in after[len(before):], name


def test_every_place_that_says_how_long_the_study_takes_says_the_same():
    # Issue 37: the README said 82 min / ~1.5 h and `config list` ~1.7 h. The measured figure
    # (about 5 hours idle, 18-34 min a seed pair) is quoted in four places; they must agree.
    import re

    places = {"README.md": None, "docs/cpu_study.md": None, "experiments/cpu_study.yaml": None,
              "paper_figures/cpu_study/README.md": None}
    for name in places:
        text = " ".join((REPO / name).read_text().split())
        places[name] = (re.findall(r"about (\d+) hours", text, flags=re.IGNORECASE)[:1],
                        re.findall(r"(\d+) ?(?:to|-) ?(\d+) min", text)[:1])
    assert set(map(str, places.values())) == {str((["5"], [("18", "34")]))}, places
