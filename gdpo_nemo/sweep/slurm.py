"""Thin wrappers around Slurm's client commands (sbatch, squeue, sacct, scancel).

Job states come from two sources, live first:
- `squeue --states=all`: pending and running jobs, and finished ones for the
  controller's MinJobAge (300 s by default; a day on slurm/local_cluster.sh's cluster);
- `sacct`: finished jobs of any age where the cluster keeps accounting (slurmdbd). On a
  cluster without it sacct answers "accounting storage is disabled" and adds nothing.
A job neither knows is reported as missing; the manifest then keeps its last known state.
"""

from __future__ import annotations

import getpass
import shutil
import subprocess
from pathlib import Path

from gdpo_nemo.sweep.errors import SlurmError, SweepError

# Slurm states after which a job never runs again without a new submission.
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
    }
)
_TIMEOUT_S = 60


def require(*commands: str, action: str) -> None:
    """Raise SweepError unless every Slurm command in `commands` is on PATH."""
    missing = [c for c in commands if shutil.which(c) is None]
    if missing:
        raise SweepError(
            f"{action} needs Slurm's {', '.join(missing)}, not found on PATH: run it on a Slurm login node,"
            " or start the one-node test cluster (slurm/local_cluster.sh start, after"
            " apt-get install slurmctld slurmd slurm-client munge); --dry-run needs no Slurm"
        )


def _run(argv: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(argv)}` did not answer within {_TIMEOUT_S}s") from None


def submit(script: Path, *, cwd: Path, dependency: str | None = None) -> str:
    """Submit `script` with sbatch from directory `cwd` (after `dependency`, e.g.
    "afterok:123", when given); return the job id."""
    extra = [f"--dependency={dependency}"] if dependency else []
    proc = _run(["sbatch", "--parsable", *extra, str(script)], cwd=cwd)
    if proc.returncode != 0:
        said = "; ".join(line.strip() for line in proc.stderr.splitlines() if line.strip())
        hint = ""
        for word, key in (("partition", "partition"), ("account", "account"), ("gres", "gres or gpus_per_node"),
                          ("time limit", "time"), ("memory", "mem")):
            if word in said.lower():
                hint = f" (the cluster refused the profile's {key})"
                break
        raise SlurmError(f"sbatch {script} failed (exit {proc.returncode}): {said}{hint}")
    # --parsable prints "jobid" or "jobid;cluster"
    job_id = proc.stdout.strip().splitlines()[-1].split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch {script} printed {proc.stdout.strip()!r}, not a job id")
    return job_id


def _parse_rows(text: str) -> dict[str, str]:
    """'jobid|STATE ...' lines -> {jobid: STATE}; the last row of a job id wins (requeues)."""
    states = {}
    for line in text.splitlines():
        job_id, _, state = line.strip().partition("|")
        if job_id and state:
            # sacct writes "CANCELLED by 0"; keep the state word only
            states[job_id] = state.split()[0].rstrip("+")
    return states


def job_states(job_ids: list[str]) -> dict[str, str]:
    """Slurm state (PENDING, RUNNING, COMPLETED, CANCELLED, ...) of each job id Slurm still knows."""
    if not job_ids:
        return {}
    ids = ",".join(sorted(set(job_ids)))
    proc = _run(["squeue", "--states=all", "--noheader", f"--jobs={ids}", "--format=%i|%T"])
    if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
        raise SlurmError(f"squeue failed (exit {proc.returncode}): {proc.stderr.strip()}")
    states = _parse_rows(proc.stdout) if proc.returncode == 0 else {}
    unknown = sorted(set(job_ids) - set(states))
    if unknown and shutil.which("sacct"):
        proc = _run(["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,State", "-j", ",".join(unknown)])
        if proc.returncode == 0:  # "accounting storage is disabled" on clusters without slurmdbd
            states.update({k: v for k, v in _parse_rows(proc.stdout).items() if k in unknown})
    return states


def active_jobs_by_script() -> dict[str, tuple[str, str]]:
    """Batch script path -> (job id, state) for this user's pending and running jobs.

    Lets `--submit` adopt a job it submitted but could not record, instead of
    submitting the same run twice.
    """
    proc = _run(["squeue", "--noheader", f"--user={getpass.getuser()}", "--format=%i|%T|%o"])
    if proc.returncode != 0:
        raise SlurmError(f"squeue failed (exit {proc.returncode}): {proc.stderr.strip()}")
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[1] not in TERMINAL_STATES:
            out[parts[2]] = (parts[0], parts[1])
    return out


def cancel(job_ids: list[str]) -> None:
    """scancel the given jobs."""
    if not job_ids:
        return
    proc = _run(["scancel", *job_ids])
    if proc.returncode != 0:
        raise SlurmError(f"scancel {' '.join(job_ids)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
