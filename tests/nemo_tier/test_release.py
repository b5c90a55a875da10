"""NeMo RL's v0.7.0 release beside the pinned main: our hooks in the release's own grpo_train.

The release (what NeMo RL's release containers hold) differs from the pin where the hooks
reach in: validate, grpo_train and run_multi_turn_rollout take one argument fewer, and its
CheckpointManager has no begin_finalization (a save is renamed by finalize_checkpoint right
away). tests/nemo_tier/release_scenarios.py runs, in .venv-nemo with the release first on
PYTHONPATH: the math run killed right after step 1's checkpoint, then (one process, one Ray)
every task once (math with DAPO and runs that move) and the killed run resumed. And the hooks
refuse, in one line naming the supported versions, a NeMo RL whose functions they would misread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from release_scenarios import MATH, MATRIX
from support import ACTOR_RUN, cpu_config

# The module's fixture runs the killed run and then every task with the resume in one more
# process (about 6 minutes idle, 11 or more on a loaded machine): the first test's setup holds
# all of it, so its limit is twice the tier's 900 s per test.
pytestmark = pytest.mark.timeout(1800)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RELEASE = REPO / ".nemo-rl-release" / "source"
SCENARIOS = HERE / "release_scenarios.py"
COMPONENTS = {"gsm8k": ["correctness", "format", "integer"], "toolcall": ["correctness", "format"],
              "code": ["bug", "length", "pass"], "math": ["correctness", "length"]}


def _release_env(tmp: Path) -> dict:
    if not (RELEASE / "nemo_rl" / "__init__.py").is_file():  # a skip here fails the outer test under CI=true
        pytest.skip(".nemo-rl-release/source: run scripts/setup_nemo.sh (it unpacks ../shared/vendor/nemo-rl-v0.7.0.tar.gz)")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(RELEASE), str(REPO)])
    env["RAY_TMPDIR"] = str(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    return env


def _scenario(env: dict, *args, expect_kill: bool = False) -> dict | None:
    done = subprocess.run([sys.executable, str(SCENARIOS), *map(str, args)], env=env, capture_output=True, text=True,
                          start_new_session=True, timeout=1500, cwd=REPO)
    if expect_kill:
        assert done.returncode == -signal.SIGKILL, (done.stdout + done.stderr)[-3000:]
        return None
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def release_runs(local_ray, tmp_path_factory):
    """The math run killed right after step 1's checkpoint (a process of its own), then one
    process: every task once, and the killed run resumed. What the killed run left is
    recorded before the resume, under "after_kill"."""
    if local_ray is None:
        return None
    from gdpo_nemo import config as cc
    from gdpo_nemo.runs import rundir

    from support import early_stopping_tiny

    out = tmp_path_factory.mktemp("release")
    env = _release_env(Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "release")
    stopper = early_stopping_tiny(out / "early_stopping_tiny")
    run_dir = out / "killed"
    config = cpu_config("math", MATRIX["math"], run_dir, stopper, tiny=False, **MATH)  # the matrix's math run
    source = out / "killed.yaml"
    source.write_text(cc.dump(config))
    _scenario(env, "killed", source, run_dir, stopper, expect_kill=True)
    after_kill = {"checkpoints": [s for s, _ in rundir.checkpoint_steps(run_dir / "checkpoints")],
                  "steps": [r["step"] for r in rundir.read_metrics(run_dir)]}
    seen = _scenario(env, "matrix", out, stopper, run_dir)
    return {**seen, "after_kill": after_kill, "killed_dir": str(run_dir)}


def test_the_release_is_v070_and_every_hook_fits_it(release_runs):
    if release_runs is None:
        return
    release = release_runs["nemo_rl"]
    assert release["version"].startswith("0.7.0") and RELEASE.resolve() in Path(release["file"]).resolve().parents
    assert release["problems"] == []


def test_each_release_run_starts_its_policy_worker_from_the_driver_not_from_an_initializer_actor(release_runs):
    """As at the pin (cluster.workers_started_by_the_driver): the release's
    IsolatedWorkerInitializer code runs in the driver, one policy worker per run, no
    initializer actor (a process importing the worker's module, ~20 s of CPU each). The
    worker is made in the driver too (driver_worker), but for ACTOR_RUN's: the release's Ray
    actor, whose numbers the killed and resumed run reproduces."""
    if release_runs is None:
        return
    from gdpo_nemo.engines.nemo.cpu.worker import CpuPolicyWorkerImpl

    runs = [*release_runs["runs"].values(), release_runs["resumed"]]
    assert [run["initializers_in_driver"] for run in runs] == [1] * len(runs)
    assert release_runs["actors"].get("IsolatedWorkerInitializer", 0) == 0, release_runs["actors"]
    assert release_runs["actors"].get(CpuPolicyWorkerImpl.__name__) == 1, release_runs["actors"]
    assert {task: run["worker"] for task, run in release_runs["runs"].items()} == {
        task: "actor" if task == ACTOR_RUN else "driver" for task in MATRIX}
    assert release_runs["resumed"]["worker"] == "driver"


@pytest.mark.parametrize("task", sorted(COMPONENTS))
def test_every_task_trains_in_the_releases_grpo_train_with_its_rewards_per_step(release_runs, task):
    if release_runs is None:
        return
    from gdpo_nemo.runs import rundir

    run = release_runs["runs"][task]
    run_dir = Path(run["run_dir"])
    records = rundir.read_metrics(run_dir)
    steps = 3 if task == "math" else 2
    assert [r["step"] for r in records] == list(range(1, steps + 1)) and rundir.is_done(run_dir)
    for record in records:
        assert {f"train/reward/{c}" for c in COMPONENTS[task]} <= set(record), sorted(record)
        assert {f"validation/reward/{c}" for c in COMPONENTS[task]} <= set(record)
    if task == "math":  # the run that moves: DAPO kept groups whose rewards differ, the weights changed
        assert run["moved"] and run["generate_calls"] >= steps


def test_a_release_run_killed_after_step_1_resumes_to_the_uninterrupted_numbers(release_runs):
    """The release renames a checkpoint in finalize_checkpoint right after saving it: held back
    by our hook until the step's record is written, a kill right after the rename leaves step 1's
    record, and the resumed run's steps 2-3 are the uninterrupted run's. The killed and resumed
    jobs' policy worker ran in the driver, the uninterrupted run's in a Ray actor: the same
    numbers from both."""
    if release_runs is None:
        return
    from gdpo_nemo.runs import rundir

    assert release_runs["after_kill"] == {"checkpoints": [1], "steps": [1]}  # written before the checkpoint was released
    assert Path(release_runs["resumed"]["run_dir"]) == Path(release_runs["killed_dir"]).resolve()
    mine = {r["step"]: r for r in rundir.read_metrics(Path(release_runs["killed_dir"]))}
    theirs = {r["step"]: r for r in rundir.read_metrics(Path(release_runs["runs"]["math"]["run_dir"]))}
    assert sorted(mine) == [1, 2, 3]
    for step in (1, 2, 3):
        for key in ("train/loss", "train/reward/length", "train/reward/correctness", "validation/reward/length",
                    "train/grad_norm"):
            assert mine[step][key] == pytest.approx(theirs[step][key], rel=1e-5, abs=1e-7), (step, key)


def test_a_nemo_rl_whose_functions_the_hooks_would_misread_is_refused_in_one_line(monkeypatch):
    """The pin here (this process imports it): fits; a validate that takes its step elsewhere,
    and a missing finalize_checkpoint, are refused before anything is replaced."""
    import nemo_rl.algorithms.grpo as grpo_module
    import nemo_rl.utils.checkpoint as checkpoint_module

    from gdpo_nemo.engines.nemo import interfaces, plugin

    assert interfaces.interface_problems() == []
    original_validate = plugin._unwrapped(grpo_module.validate)

    def validate(policy_generation, val_dataloader, tokenizer, step, val_task_to_env, master_config):
        return original_validate

    monkeypatch.setattr(grpo_module, "validate", validate)
    monkeypatch.delattr(checkpoint_module.CheckpointManager, "finalize_checkpoint")
    with pytest.raises(interfaces.UnsupportedNemoRL) as raised:
        plugin.install_hooks({"gdpo": {"estimator": "gdpo", "reward_components": ["a", "b"]}})
    message = str(raised.value)
    assert "\n" not in message and "nemo_rl.algorithms.grpo.validate takes (policy_generation, val_dataloader, tokenizer," \
                                   " step, val_task_to_env, master_config)" in message
    assert "CheckpointManager.finalize_checkpoint is missing" in message
    assert "Supported: main at 7ea279ab" in message and "v0.7.0" in message
    assert grpo_module.validate is validate  # nothing was replaced
