"""`gdpo-nemo sweep --with-eval` on the real one-node Slurm cluster.

One tiny math run (2 steps, a checkpoint each step) is submitted with its evaluation job;
Slurm holds the evaluation until training succeeds (`--dependency=afterok:<train job>`),
then `gdpo-nemo eval` scores the run's newest checkpoint on a local AIME-format file and
writes `<run_dir>/eval/aime/step_2.json`, which the analysis reads under the run's id.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from gdpo_nemo import cli
from gdpo_nemo.config import experiments_dir
from gdpo_nemo.sweep import slurm
from gdpo_nemo.sweep.manifest import Manifest
from tests.support.slurm_jobs import cancelled_on_failure

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = "evalsweep"
RUN = f"{EXPERIMENT}__math__tiny__gdpo__seed0"


@pytest.fixture()
def setup(slurm_cluster, tmp_path, monkeypatch):
    smoke = yaml.safe_load((experiments_dir() / "smoke.yaml").read_text())
    changed = {"checkpointing.enabled": "true", "checkpointing.save_period": "1", "grpo.max_num_steps": "2"}
    overrides = [o for o in smoke["overrides"] if o.split("=", 1)[0] not in changed] + [f"{k}={v}" for k, v in changed.items()]
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / f"{EXPERIMENT}.yaml").write_text(yaml.safe_dump({
        "description": "one tiny math run with an evaluation job", "cluster": "local", "seeds": [0],
        "overrides": overrides, "runs": [{"tasks": ["math"], "models": ["tiny"], "algos": ["gdpo"]}]}))
    monkeypatch.setenv("GDPO_NEMO_EXPERIMENTS", str(tmp_path / "experiments"))
    profile = yaml.safe_load((REPO / "slurm" / "profiles" / "local.yaml").read_text())
    profile["eval_args"] = ["--data-dir", str(REPO / "tests" / "data" / "eval"), "--benchmarks", "aime",
                            "--samples", "2", "--max-new-tokens", "6"]
    (tmp_path / "evalprofile.yaml").write_text(yaml.safe_dump(profile))
    return tmp_path


def sweep(folder: Path, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["sweep", EXPERIMENT, "--cluster", str(folder / "evalprofile.yaml"), "--with-eval",
                       "--sweep-dir", str(folder / "sweep"), *args])
    assert rc == 0, out.getvalue()
    return out.getvalue()


def test_the_eval_job_waits_for_training_then_evaluates_the_newest_checkpoint(setup):
    with cancelled_on_failure(setup / "sweep"):
        out = sweep(setup, "--submit")
        assert "eval job" in out
        job = Manifest.load(setup / "sweep" / "manifest.json").runs[RUN].jobs[-1]
        train_id, eval_id = job["job_id"], job["eval_job_id"]
        shown = subprocess.run(["scontrol", "show", "job", eval_id], capture_output=True, text=True).stdout
        assert f"Dependency=afterok:{train_id}" in shown  # training takes > 10 s: still unfulfilled here
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            states = slurm.job_states([train_id, eval_id])
            if all(states.get(j) in slurm.TERMINAL_STATES for j in (train_id, eval_id)):
                break
            time.sleep(0.5)
        states = slurm.job_states([train_id, eval_id])
        logs = "\n".join(p.read_text()[-1500:] for p in (setup / "sweep" / "logs").glob("*.out"))
        assert states.get(train_id) == "COMPLETED" and states.get(eval_id) == "COMPLETED", f"{states}\n{logs}"
        run_dir = setup / "sweep" / "runs" / RUN
        payload = json.loads((run_dir / "eval" / "aime" / "step_2.json").read_text())
        assert payload["run_id"] == RUN and payload["samples"] == 2 and set(payload["metrics"]) == {"acc", "exceed"}
        # the eval job started only after the training job had ended
        assert _times(eval_id)["StartTime"] >= _times(train_id)["EndTime"]


def _times(job_id: str) -> dict:
    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    return dict(field.split("=", 1) for field in shown.split() if field.startswith(("StartTime=", "EndTime=")))
