"""A sweep of four tiny local-engine runs on the real one-node Slurm cluster (slurm/local_cluster.sh).

One story, run once for the module (`story`), then checked behaviour by behaviour:

1. `--submit` submits the four runs with one command;
2. `--submit` again while they are queued or running submits nothing;
3. the long run is `scancel`led after its second checkpoint; the others finish;
4. `--status` shows it CANCELLED and the others COMPLETED;
5. `--submit` resubmits only the cancelled run, which resumes from its checkpoint;
6. Slurm requeues that job (`scontrol requeue`): the same job resumes again;
7. `--status` shows all four COMPLETED, and `--submit` then submits nothing.

Apart from the story, `--cancel` scancels a sweep's live job.

The experiment is the repository's `smoke` settings (tiny model, offline data) with
checkpoints after every step: three runs of 3 steps and one of 20 steps.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gdpo_nemo import cli
from gdpo_nemo.config import experiments_dir
from gdpo_nemo.sweep import slurm
from gdpo_nemo.sweep.manifest import Manifest
from tests.support.slurm_jobs import cancelled_on_failure

pytestmark = pytest.mark.slurm  # not `slow`: CI must run it (docs/slurm.md)

EXPERIMENT = "slurmsweep"
SHORT_STEPS, LONG_STEPS = 3, 20
LONG = f"{EXPERIMENT}__gsm8k__tiny__gdpo__seed1"
SHORT = [f"{EXPERIMENT}__gsm8k__tiny__grpo__seed0", f"{EXPERIMENT}__gsm8k__tiny__gdpo__seed0",
         f"{EXPERIMENT}__toolcall__tiny__gdpo__seed0"]
WAIT_S = 240  # per phase; a tiny run takes ~15 s on 2 idle cores


def write_experiment(folder: Path) -> None:
    """experiments/slurmsweep.yaml: smoke's overrides, checkpoints every step, 4 runs, one long."""
    smoke = yaml.safe_load((experiments_dir() / "smoke.yaml").read_text())
    changed = {"checkpointing.enabled": "true", "checkpointing.save_period": "1",
               "grpo.max_num_steps": str(SHORT_STEPS)}
    overrides = [o for o in smoke["overrides"] if o.split("=", 1)[0] not in changed]
    overrides += [f"{k}={v}" for k, v in changed.items()]
    experiment = {
        "description": "four tiny local-engine runs for tests/slurm/test_sweep_on_slurm.py",
        "cluster": "local",
        "seeds": [0],
        "overrides": overrides,
        "runs": [
            # the long run first, so it starts at once; its block override comes after the experiment's
            {"tasks": ["gsm8k"], "models": ["tiny"], "algos": ["gdpo"], "seeds": [1],
             "overrides": [f"grpo.max_num_steps={LONG_STEPS}"]},
            {"tasks": ["gsm8k", "toolcall"], "models": ["tiny"], "algos": ["gdpo"]},
            {"tasks": ["gsm8k"], "models": ["tiny"], "algos": ["grpo"]},
        ],
    }
    folder.mkdir(parents=True)
    (folder / f"{EXPERIMENT}.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))


@dataclass
class Story:
    sweep_dir: Path
    outputs: dict[str, str]
    long_jobs: list[str]
    manifest: Manifest

    def run_dir(self, name: str) -> Path:
        return self.sweep_dir / "runs" / name


def sweep(sweep_dir: Path, mode: str, *extra: str) -> str:
    """`gdpo-nemo sweep slurmsweep --cluster local <mode>`; its stdout (exit status must be 0)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["sweep", EXPERIMENT, "--cluster", "local", mode, "--sweep-dir", str(sweep_dir), *extra])
    assert rc == 0, out.getvalue()
    return out.getvalue()


def wait_for(what: str, condition, sweep_dir: Path, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    queue = subprocess.run(["squeue", "--states=all"], capture_output=True, text=True).stdout
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted((sweep_dir / "logs").glob("*.out")))
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{queue}\n{logs}")


def jobs_of(sweep_dir: Path, name: str) -> list[str]:
    return [job["job_id"] for job in Manifest.load(sweep_dir / "manifest.json").runs[name].jobs]


def all_ended(job_ids: list[str]) -> bool:
    states = slurm.job_states(job_ids)
    return all(states.get(j) in slurm.TERMINAL_STATES for j in job_ids)


def checkpoints(run_dir: Path) -> set[str]:
    return {p.name for p in (run_dir / "checkpoints").glob("step_*") if p.name[5:].isdigit()}


@pytest.fixture(scope="module")
def experiments(slurm_cluster, tmp_path_factory):
    """The test's experiments dir holding slurmsweep.yaml, made the composer's for the module."""
    folder = tmp_path_factory.mktemp("slurm_sweep") / "experiments"
    write_experiment(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GDPO_NEMO_EXPERIMENTS", str(folder))
        yield folder


@pytest.fixture(scope="module")
def story(experiments) -> Story:
    sweep_dir = experiments.parent / "sweeps" / EXPERIMENT
    outputs = {}
    long_dir = sweep_dir / "runs" / LONG

    with cancelled_on_failure(sweep_dir):
        outputs["first submit"] = sweep(sweep_dir, "--submit")
        outputs["submit while queued"] = sweep(sweep_dir, "--submit")

        first_long_job = jobs_of(sweep_dir, LONG)[0]
        wait_for("the long run's second checkpoint", lambda: {"step_2"} <= checkpoints(long_dir), sweep_dir)
        assert not (long_dir / "DONE").exists(), "the long run finished before it could be cancelled"
        subprocess.run(["scancel", first_long_job], check=True)
        first_jobs = [jobs_of(sweep_dir, n)[0] for n in [*SHORT, LONG]]
        wait_for("every first job to end", lambda: all_ended(first_jobs), sweep_dir)
        outputs["status after scancel"] = sweep(sweep_dir, "--status")
        outputs["checkpoints at cancel"] = " ".join(sorted(checkpoints(long_dir)))

        outputs["resubmit"] = sweep(sweep_dir, "--submit")
        second_long_job = jobs_of(sweep_dir, LONG)[-1]
        resumed_from = max(int(c[5:]) for c in checkpoints(long_dir))
        wait_for("a checkpoint of the resumed run",
                 lambda: any(int(c[5:]) >= resumed_from + 2 for c in checkpoints(long_dir)), sweep_dir)
        assert not (long_dir / "DONE").exists(), "the resumed run finished before it could be requeued"
        # Slurm's own requeue, as on preemption or node failure; the job starts again after
        # AuthInfo=cred_expire (15 s on the local cluster)
        subprocess.run(["scontrol", "requeue", second_long_job], check=True)
        wait_for("the long run's DONE", lambda: (long_dir / "DONE").exists(), sweep_dir)
        wait_for("its job to end", lambda: all_ended([second_long_job]), sweep_dir)

        outputs["final status"] = sweep(sweep_dir, "--status")
        outputs["submit when all finished"] = sweep(sweep_dir, "--submit")
    return Story(sweep_dir, outputs, [first_long_job, second_long_job], Manifest.load(sweep_dir / "manifest.json"))


def lines_starting(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(word + " ")]


def test_one_submit_command_submits_the_four_runs(story):
    out = story.outputs["first submit"]
    assert sorted(line.split()[1] for line in lines_starting(out, "submit")) == sorted([*SHORT, LONG])
    assert "submitted 4, resubmitted 0" in out


def test_submit_while_the_runs_are_queued_or_running_submits_nothing(story):
    out = story.outputs["submit while queued"]
    assert "submitted 0, resubmitted 0, adopted 0, left alone 4 queued/running" in out


def test_job_names_are_the_run_ids(story):
    queue = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i|%j",
                            f"--jobs={','.join(story.long_jobs)}"], capture_output=True, text=True).stdout
    assert {line.split("|")[1] for line in queue.split()} == {LONG}


def test_status_after_scancel_shows_the_cancelled_run_and_the_finished_ones(story):
    rows = {line.split()[0]: line.split()[1] for line in story.outputs["status after scancel"].splitlines()[1:-1]}
    assert rows == {**{name: "COMPLETED" for name in SHORT}, LONG: "CANCELLED"}


def test_every_run_finishes_through_slurm_with_its_steps_logged(story):
    for name, steps in [*((n, SHORT_STEPS) for n in SHORT), (LONG, LONG_STEPS)]:
        run_dir = story.run_dir(name)
        assert (run_dir / "DONE").is_file(), name
        logged = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert logged == list(range(1, steps + 1)), name  # the long run: no step lost or repeated
        assert (story.sweep_dir / "logs" / f"{name}-{jobs_of(story.sweep_dir, name)[0]}.out").is_file()


def test_next_submit_resubmits_only_the_cancelled_run_resuming_from_its_checkpoint(story):
    out = story.outputs["resubmit"]
    assert [line.split()[1] for line in lines_starting(out, "resubmit")] == [LONG]
    assert sorted(line.split()[1] for line in lines_starting(out, "skip")) == sorted(SHORT)
    latest_at_cancel = max(story.outputs["checkpoints at cancel"].split(), key=lambda c: int(c[5:]))
    assert f"resumes from {latest_at_cancel}" in out
    record = story.manifest.runs[LONG]
    assert [job["job_id"] for job in record.jobs] == story.long_jobs
    assert record.jobs[1]["resume_from"] == latest_at_cancel
    log = (story.sweep_dir / "logs" / f"{LONG}-{story.long_jobs[1]}.out").read_text()
    assert "(restart 0) on " in log and ": --resume" in log
    assert f"resumed from " in log and f"(step {latest_at_cancel[5:]})" in log


def test_a_requeued_job_resumes_under_the_same_job_id(story):
    log = (story.sweep_dir / "logs" / f"{LONG}-{story.long_jobs[1]}.out").read_text()
    assert "(restart 1) on " in log  # the same log file: --open-mode=append
    assert log.count("resumed from ") == 2
    assert len(story.manifest.runs[LONG].jobs) == 2  # no new submission for a requeue


def test_status_shows_every_run_completed(story):
    out = story.outputs["final status"]
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:-1]}
    assert rows == {name: "COMPLETED" for name in [*SHORT, LONG]}
    assert out.splitlines()[-1] == "4 run(s): 4 COMPLETED"


def test_submit_after_everything_finished_submits_nothing(story):
    out = story.outputs["submit when all finished"]
    assert "submitted 0, resubmitted 0, adopted 0, left alone 0 queued/running, skipped 4 finished" in out
    assert sum(len(r.jobs) for r in story.manifest.runs.values()) == 5


def test_cancel_scancels_the_sweeps_live_jobs(experiments, tmp_path):
    sweep_dir = tmp_path / "sweep"
    sweep(sweep_dir, "--submit", "--only", f"run={SHORT[0]}")
    out = sweep(sweep_dir, "--cancel")
    job_id = jobs_of(sweep_dir, SHORT[0])[0]
    assert out.splitlines()[0].startswith(f"cancelled {SHORT[0]}  job {job_id} (")
    assert out.splitlines()[-1] == "cancelled 1 job(s); 0 run(s) had no live job"
    wait_for("the cancelled job to end", lambda: all_ended([job_id]), sweep_dir)
    assert slurm.job_states([job_id]) == {job_id: "CANCELLED"}
    assert "CANCELLED" in sweep(sweep_dir, "--status").splitlines()[1].split()
