"""Specification of the Slurm wrappers (gdpo_nemo.sweep.slurm), against the real one-node cluster."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from gdpo_nemo.sweep import slurm
from gdpo_nemo.sweep.render import REPO_ROOT

STATE_DIR = Path(os.environ.get("GDPO_SLURM_STATE_DIR", "/var/lib/gdpo-slurm"))  # as slurm/local_cluster.sh

pytestmark = pytest.mark.slurm


def job_script(tmp_path, name, body, *options):
    path = tmp_path / f"{name}.sbatch"
    lines = ["#!/bin/bash", f"#SBATCH --job-name=gdpo-test-{name}", f"#SBATCH --output={tmp_path}/{name}-%j.out",
             "#SBATCH --time=2", "#SBATCH --mem=100M", *[f"#SBATCH {o}" for o in options], body]
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_terminal(job_ids, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = slurm.job_states(job_ids)
        if all(states.get(j) in slurm.TERMINAL_STATES for j in job_ids):
            return states
        time.sleep(0.5)
    raise AssertionError(f"jobs did not finish in {timeout_s}s: {slurm.job_states(job_ids)}")


def test_job_states_reports_completed_failed_and_cancelled_jobs(slurm_cluster, tmp_path):
    ok = slurm.submit(job_script(tmp_path, "ok", "exit 0"), cwd=tmp_path)
    bad = slurm.submit(job_script(tmp_path, "bad", "exit 3"), cwd=tmp_path)
    held = slurm.submit(job_script(tmp_path, "held", "sleep 60", "--hold"), cwd=tmp_path)
    slurm.cancel([held])
    assert wait_terminal([ok, bad, held]) == {ok: "COMPLETED", bad: "FAILED", held: "CANCELLED"}


def test_job_states_omits_jobs_slurm_does_not_know(slurm_cluster):
    assert slurm.job_states(["999999999"]) == {}


def test_active_jobs_are_found_by_their_script_path(slurm_cluster, tmp_path):
    path = job_script(tmp_path, "pending", "exit 0", "--hold")
    job_id = slurm.submit(path, cwd=tmp_path)
    try:
        assert slurm.active_jobs_by_script()[str(path)] == (job_id, "PENDING")
    finally:
        slurm.cancel([job_id])
    wait_terminal([job_id])
    assert str(path) not in slurm.active_jobs_by_script()


def test_a_failing_story_cancels_what_its_sweep_submitted_and_the_processes_it_started(slurm_cluster, tmp_path):
    from gdpo_nemo.sweep.manifest import Manifest, RunRecord
    from tests.support.slurm_jobs import cancelled_on_failure

    held = slurm.submit(job_script(tmp_path, "story", "sleep 60", "--hold"), cwd=tmp_path)
    manifest = Manifest(tmp_path / "manifest.json", "story", "local", "local")
    manifest.runs["run"] = RunRecord(str(tmp_path / "run"), "c.yaml", "s.sbatch", jobs=[{"job_id": held}])
    manifest.save()
    with pytest.raises(AssertionError, match="the story failed"):
        with cancelled_on_failure(tmp_path) as started:
            started.append(subprocess.Popen(["sleep", "60"], start_new_session=True))
            raise AssertionError("the story failed")
    assert wait_terminal([held]) == {held: "CANCELLED"}
    assert started[0].returncode == -9
    with cancelled_on_failure(tmp_path):  # a story that passes cancels nothing
        other = slurm.submit(job_script(tmp_path, "other", "sleep 60", "--hold"), cwd=tmp_path)
    assert slurm.job_states([other]) == {other: "PENDING"}
    slurm.cancel([other])
    wait_terminal([other])


def test_local_cluster_start_is_idempotent_and_leaves_the_node_idle(slurm_cluster):
    script = REPO_ROOT / "slurm" / "local_cluster.sh"
    pid_before = (STATE_DIR / "slurmctld.pid").read_text()
    proc = subprocess.run([str(script), "start"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(("is idle", "is mixed", "is allocated"))
    assert (STATE_DIR / "slurmctld.pid").read_text() == pid_before  # nothing restarted


def test_a_partition_the_cluster_does_not_have_is_one_line_naming_the_profile_key(slurm_cluster, tmp_path):
    script = job_script(tmp_path, "nowhere", "exit 0", "--partition=no_such_partition")
    with pytest.raises(slurm.SlurmError) as refused:
        slurm.submit(script, cwd=tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "no_such_partition" in message
    assert message.endswith("(the cluster refused the profile's partition)")
