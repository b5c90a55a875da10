"""The sweep manifest (<sweep_dir>/manifest.json) and the state machine of a run.

The manifest records, for each run of a sweep, its paths, every job submitted for it
and its last known state. A run's state is derived, in this order of trust:

1. the run dir's DONE marker (written by the engine when all steps ran): COMPLETED;
2. otherwise Slurm's state of the run's latest job (squeue, then sacct);
3. otherwise (Slurm has forgotten the job) the state recorded last time, or LOST if
   that was a live state: the job ended unseen and the run did not finish.

`--submit` acts on the state: COMPLETED runs are skipped, live jobs are left alone, NEW
runs are submitted and every other state is resubmitted (the job script resumes from
the run's latest checkpoint).
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from gdpo_nemo.runs import rundir
from gdpo_nemo.sweep.errors import SweepError
from gdpo_nemo.sweep.slurm import TERMINAL_STATES

MANIFEST_VERSION = 1
NEW = "NEW"  # rendered, never submitted
COMPLETED = "COMPLETED"  # the run dir has DONE
INCOMPLETE = "INCOMPLETE"  # the job exited 0 but the run dir has no DONE
LOST = "LOST"  # Slurm no longer knows the job, and the run dir has no DONE
RESUBMIT_STATES = (TERMINAL_STATES - {COMPLETED}) | {INCOMPLETE, LOST}


def now() -> str:
    """UTC time stamp, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_state(*, done: bool, job_id: str | None, slurm_state: str | None, last_state: str) -> str:
    """A run's state from its DONE marker, its latest job and what Slurm says of that job.

    done: the run dir has DONE. job_id: latest job submitted for the run, None if never
    submitted. slurm_state: Slurm's state word for job_id (PENDING, RUNNING, COMPLETED,
    CANCELLED, ...), None if Slurm does not know the job. last_state: the state recorded
    in the manifest before this refresh.
    """
    if done:
        return COMPLETED
    if job_id is None:
        return NEW
    if slurm_state is None:
        return last_state if last_state in RESUBMIT_STATES else LOST
    if slurm_state == COMPLETED:
        return INCOMPLETE
    return slurm_state


def submit_action(state: str) -> str:
    """What `--submit` does with a run in `state`: 'skip', 'leave', 'submit' or 'resubmit'."""
    if state == COMPLETED:
        return "skip"
    if state == NEW:
        return "submit"
    if state in RESUBMIT_STATES:
        return "resubmit"
    return "leave"  # PENDING, RUNNING, COMPLETING, REQUEUED, SUSPENDED, ...: Slurm still owns it


def is_live(state: str) -> bool:
    """True while Slurm still owns the run's job (pending, running, requeued, ...)."""
    return submit_action(state) == "leave"


@dataclass
class RunRecord:
    """One run of the sweep: its paths, its jobs (oldest first) and its last known state."""

    run_dir: str
    config: str
    script: str
    state: str = NEW
    jobs: list[dict] = field(default_factory=list)  # {"job_id", "submitted", "resume_from"}
    updated: str = ""

    @property
    def job_id(self) -> str | None:
        """The latest job's id, None if the run was never submitted."""
        return self.jobs[-1]["job_id"] if self.jobs else None

    @property
    def done(self) -> bool:
        """The engine wrote DONE: every step of the run ran."""
        return rundir.is_done(self.run_dir)


@dataclass
class Manifest:
    """The manifest of one sweep dir: which experiment, profile and engine, and its runs by name."""

    path: Path
    experiment: str
    cluster: str
    engine: str
    created: str = field(default_factory=now)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    moved_from: str | None = None  # the sweep dir this manifest was written in, when it has moved since

    @classmethod
    def load(cls, path: Path) -> "Manifest | None":
        """The manifest at `path`, or None if there is none yet. A sweep dir moved (or copied)
        since it was written: its runs' paths are read relative to where it is now
        (`moved_from` says where it was)."""
        if not path.is_file():
            return None
        try:
            raw = json.loads(path.read_text())
            runs = {name: RunRecord(**record) for name, record in raw["runs"].items()}
            manifest = cls(path, raw["experiment"], raw["cluster"], raw["engine"], raw["created"], runs)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise SweepError(f"{path} is not a sweep manifest ({err}); move it away or use another --sweep-dir") from None
        root = str(path.parent.resolve())
        written_in = raw.get("root") or _common_root(runs.values())
        if written_in and written_in != root:
            manifest.moved_from = written_in
            for record in runs.values():
                record.run_dir, record.config, record.script = (rebase(p, written_in, root)
                                                                for p in (record.run_dir, record.config, record.script))
        return manifest

    def check_matches(self, *, experiment: str, cluster: str, engine: str) -> None:
        """Raise SweepError if this sweep dir belongs to another experiment, profile or engine."""
        ours = (self.experiment, self.cluster, self.engine)
        theirs = (experiment, cluster, engine)
        if ours != theirs:
            raise SweepError(
                f"{self.path.parent} holds the sweep of experiment {self.experiment!r} on profile {self.cluster!r}"
                f" with engine {self.engine!r}; this command asks for {experiment!r}, {cluster!r}, {engine!r}:"
                " use the same --cluster/--engine or another --sweep-dir"
            )

    def save(self) -> None:
        """Write atomically (temp file + rename), so a crash never leaves half a manifest."""
        raw = {
            "version": MANIFEST_VERSION,
            # Where its runs' kept configs point: the old dir until a submit or dry run has
            # pointed them here (actions._rebase_kept_configs); the records' paths are rebased.
            "root": self.moved_from or str(self.path.parent.resolve()),
            "experiment": self.experiment,
            "cluster": self.cluster,
            "engine": self.engine,
            "created": self.created,
            "runs": {name: asdict(record) for name, record in sorted(self.runs.items())},
        }
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(raw, indent=2) + "\n")
        os.replace(tmp, self.path)

    def refresh(self, names: list[str], slurm_states: dict[str, str]) -> None:
        """Recompute the state of the runs `names` from DONE markers and Slurm's job states."""
        for name in names:
            record = self.runs[name]
            state = run_state(
                done=record.done,
                job_id=record.job_id,
                slurm_state=slurm_states.get(record.job_id) if record.job_id else None,
                last_state=record.state,
            )
            if state != record.state:
                record.state, record.updated = state, now()


def rebase(path: str, old_root: str, new_root: str) -> str:
    """`path` under `old_root` as the same path under `new_root`; other paths as they are."""
    if path == old_root or path.startswith(old_root.rstrip("/") + "/"):
        return new_root + path[len(old_root):]
    return path


def _common_root(records) -> str | None:
    """Where a manifest written before it recorded its root was: its runs' dirs are
    ``<root>/runs/<name>``."""
    roots = {str(Path(r.run_dir).parent.parent) for r in records if Path(r.run_dir).parent.name == "runs"}
    return roots.pop() if len(roots) == 1 else None


@contextmanager
def locked(sweep_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the (existing) sweep dir, so two `--submit`s never submit a run twice."""
    with open(sweep_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
