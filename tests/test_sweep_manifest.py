"""Specification of the sweep manifest and a run's state machine (gdpo_nemo.sweep.manifest).

A run's state: DONE marker first, then Slurm's state of its latest job, then the last
recorded state. `--submit` skips COMPLETED, leaves live jobs alone, submits NEW and
resubmits everything else.
"""

import json

import pytest

from gdpo_nemo.sweep.errors import SweepError
from gdpo_nemo.sweep.manifest import Manifest, RunRecord, is_live, run_state, submit_action


@pytest.mark.parametrize(
    ("done", "job_id", "slurm_state", "last_state", "expected"),
    [
        (False, None, None, "NEW", "NEW"),  # rendered, never submitted
        (True, None, None, "NEW", "COMPLETED"),  # finished by an earlier sweep: DONE is enough
        (False, "7", "PENDING", "PENDING", "PENDING"),
        (False, "7", "RUNNING", "PENDING", "RUNNING"),
        (True, "7", "RUNNING", "RUNNING", "COMPLETED"),  # DONE written, job still tearing down
        (True, "7", "CANCELLED", "RUNNING", "COMPLETED"),  # cancelled after the last step: still done
        (False, "7", "COMPLETED", "RUNNING", "INCOMPLETE"),  # exit 0 without DONE is not finished
        (False, "7", "CANCELLED", "RUNNING", "CANCELLED"),
        (False, "7", "TIMEOUT", "RUNNING", "TIMEOUT"),
        (False, "7", "FAILED", "RUNNING", "FAILED"),
        (False, "7", None, "FAILED", "FAILED"),  # Slurm forgot the job: keep what we saw
        (False, "7", None, "RUNNING", "LOST"),  # ended unseen, not finished
        (False, "7", None, "PENDING", "LOST"),
    ],
)
def test_run_state(done, job_id, slurm_state, last_state, expected):
    assert run_state(done=done, job_id=job_id, slurm_state=slurm_state, last_state=last_state) == expected


@pytest.mark.parametrize(
    ("state", "action"),
    [
        ("COMPLETED", "skip"),
        ("NEW", "submit"),
        ("PENDING", "leave"),
        ("RUNNING", "leave"),
        ("COMPLETING", "leave"),
        ("REQUEUED", "leave"),
        ("SUSPENDED", "leave"),
        ("FAILED", "resubmit"),
        ("CANCELLED", "resubmit"),
        ("TIMEOUT", "resubmit"),
        ("OUT_OF_MEMORY", "resubmit"),
        ("NODE_FAIL", "resubmit"),
        ("PREEMPTED", "resubmit"),
        ("INCOMPLETE", "resubmit"),
        ("LOST", "resubmit"),
    ],
)
def test_submit_action(state, action):
    assert submit_action(state) == action
    assert is_live(state) == (action == "leave")


def record(tmp_path, name, **kw):
    run_dir = tmp_path / "runs" / name
    run_dir.mkdir(parents=True)
    return RunRecord(str(run_dir), str(tmp_path / f"{name}.yaml"), str(tmp_path / f"{name}.sbatch"), **kw)


def test_refresh_prefers_the_done_marker_and_records_slurm_states(tmp_path):
    m = Manifest(tmp_path / "manifest.json", "smoke", "local", "local")
    m.runs["a"] = record(tmp_path, "a", state="RUNNING", jobs=[{"job_id": "1"}])
    m.runs["b"] = record(tmp_path, "b", state="RUNNING", jobs=[{"job_id": "2"}])
    m.runs["c"] = record(tmp_path, "c", state="PENDING", jobs=[{"job_id": "3"}])
    (tmp_path / "runs" / "a" / "DONE").write_text("")
    m.refresh(["a", "b", "c"], {"1": "RUNNING", "2": "CANCELLED"})
    assert {n: r.state for n, r in m.runs.items()} == {"a": "COMPLETED", "b": "CANCELLED", "c": "LOST"}


def test_refresh_looks_at_the_latest_job_only(tmp_path):
    m = Manifest(tmp_path / "manifest.json", "smoke", "local", "local")
    m.runs["a"] = record(tmp_path, "a", state="CANCELLED", jobs=[{"job_id": "1"}, {"job_id": "5"}])
    m.refresh(["a"], {"1": "CANCELLED", "5": "RUNNING"})
    assert m.runs["a"].state == "RUNNING" and m.runs["a"].job_id == "5"


def test_manifest_round_trips_through_json(tmp_path):
    m = Manifest(tmp_path / "manifest.json", "smoke", "local", "local")
    m.runs["a"] = record(tmp_path, "a", state="PENDING", jobs=[{"job_id": "4", "submitted": "t", "resume_from": None}])
    m.save()
    raw = json.loads(m.path.read_text())
    assert raw["version"] == 1 and raw["runs"]["a"]["jobs"][0]["job_id"] == "4"
    again = Manifest.load(m.path)
    assert again == m
    assert not (tmp_path / "manifest.json.tmp").exists()


def test_missing_manifest_loads_as_none_and_a_broken_one_is_refused(tmp_path):
    assert Manifest.load(tmp_path / "manifest.json") is None
    (tmp_path / "manifest.json").write_text('{"runs": 3}')
    with pytest.raises(SweepError, match="is not a sweep manifest"):
        Manifest.load(tmp_path / "manifest.json")


def test_a_sweep_dir_serves_one_experiment_profile_and_engine(tmp_path):
    m = Manifest(tmp_path / "manifest.json", "smoke", "local", "local")
    m.check_matches(experiment="smoke", cluster="local", engine="local")
    with pytest.raises(SweepError, match="use the same --cluster/--engine or another --sweep-dir"):
        m.check_matches(experiment="smoke", cluster="example", engine="nemo")
