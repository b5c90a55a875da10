"""The evaluation job of `gdpo-nemo sweep --with-eval`, run as a plain bash script.

The rendered script is executed with the profile's interpreter set to a script that prints
its arguments one per line, so what it would start is shown argument by argument: the
`gdpo-nemo eval` command on the run's newest checkpoint. (The
afterok dependency on a real Slurm cluster: tests/slurm/test_sweep_eval_on_slurm.py.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from gdpo_nemo import cli
from gdpo_nemo.sweep.profiles import PROFILE_DIR

RUN = "smoke__math__tiny__gdpo__seed0"


def render(tmp_path: Path, capsys) -> Path:
    printer = tmp_path / "print-args"
    printer.write_text('#!/bin/sh\nfor arg in "$@"; do printf "%s\\n" "$arg"; done\n')
    printer.chmod(0o755)
    profile = yaml.safe_load((PROFILE_DIR / "local.yaml").read_text())
    profile.update(python=str(printer), eval_args=["--samples", "2", "--data-dir", "/data/eval files"])
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(profile))
    # a sweep dir with underscores and digits in its path, as pytest's and users' are
    rc = cli.main(["sweep", "smoke", "--cluster", str(tmp_path / "p.yaml"), "--dry-run", "--with-eval",
                   "--only", "task=math", "--sweep-dir", str(tmp_path / "sweep_2_of_10")])
    assert rc == 0, capsys.readouterr().err
    (script,) = [p for p in (tmp_path / "sweep_2_of_10").rglob(f"{RUN}.eval.sbatch")]
    return script


def run_script(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)


def test_the_eval_job_evaluates_the_highest_numbered_complete_checkpoint(tmp_path, capsys):
    script = render(tmp_path, capsys)
    checkpoints = tmp_path / "sweep_2_of_10" / "runs" / RUN / "checkpoints"
    for name in ("step_2", "step_9", "step_10", "step_12.tmp", "step_x"):  # .tmp: one being written
        (checkpoints / name).mkdir(parents=True)
    done = run_script(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["-m", "gdpo_nemo.cli", "eval", "--task", "math", "--model",
                                        str(checkpoints / "step_10"), "--samples", "2", "--data-dir", "/data/eval files"]


def test_the_eval_job_fails_when_training_left_no_checkpoint(tmp_path, capsys):
    script = render(tmp_path, capsys)
    done = run_script(script)
    assert done.returncode == 1 and "no checkpoint in" in done.stderr and done.stdout == ""
