"""Fixtures for tests that need a real Slurm cluster: the one-node cluster of slurm/local_cluster.sh.

The tests here skip, with the reason, only where Slurm's daemons are not installed and
this is not CI; in CI (env CI=true) a cluster that cannot start fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL_CLUSTER = REPO_ROOT / "slurm" / "local_cluster.sh"


def _installed(binary: str) -> bool:
    return shutil.which(binary) is not None or Path("/usr/sbin", binary).is_file()


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """A running one-node Slurm cluster (started here if needed); yields its partition name."""
    in_ci = os.environ.get("CI", "").lower() == "true"
    if not all(_installed(b) for b in ("slurmctld", "slurmd", "munged", "sbatch")) and not in_ci:
        pytest.skip(
            "Slurm is not installed (apt-get install -y slurmctld slurmd slurm-client munge);"
            " in CI (CI=true) this test runs and fails instead"
        )
    proc = subprocess.run([str(LOCAL_CLUSTER), "start"], capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        pytest.fail(f"slurm/local_cluster.sh start failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return "local"
