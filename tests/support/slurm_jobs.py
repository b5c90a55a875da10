"""What the Slurm tests share beyond fixtures."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


@contextlib.contextmanager
def cancelled_on_failure(sweep_dir: Path):
    """A story that fails cancels every job its sweep submitted (and ends the processes it
    started beside them: append them to the list it gives) before the failure propagates: a
    job left running holds the one node, and every later Slurm test of the session would wait
    PENDING behind it."""
    from gdpo_nemo.sweep import slurm
    from gdpo_nemo.sweep.manifest import Manifest

    processes: list[subprocess.Popen] = []
    try:
        yield processes
    except BaseException:
        manifest = Path(sweep_dir) / "manifest.json"
        if manifest.is_file():
            jobs = [job for run in Manifest.load(manifest).runs.values() for job in run.jobs]
            ids = [job[key] for job in jobs for key in ("job_id", "eval_job_id") if job.get(key)]
            with contextlib.suppress(Exception):  # the story's own failure is the one to see
                slurm.cancel(ids)
        for process in processes:
            if process.poll() is None:  # started with start_new_session: its whole group
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        raise
