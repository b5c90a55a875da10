"""SIGTERM during a NeMo RL run: `exit_on_sigterm` turns it into SystemExit so that the run's
`finally` blocks close its logs, and `reclaim_sigterm` puts that handler back after Ray's
driver replaced it. Its own module, imported by the run entry (`run`, `cpu/train`, the
nemo-smoke command) and by the plugin's Ray hook alike, so neither imports the other.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["exit_on_sigterm", "reclaim_sigterm"]


_SIGTERM_ACTIVE: list = []  # non-empty inside `exit_on_sigterm`


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def exit_on_sigterm():
    """Within the block, SIGTERM (Slurm's scancel, a requeue, a preemption: SIGKILL follows
    after KillWait) raises SystemExit(143) in the main thread instead of ending the process
    on the spot, so the `finally` blocks run: the metrics writer leaves out the step it was
    in (a step cut short is not a step; every finished step is already in metrics.jsonl, before
    its checkpoint is released), the W&B run ends failed and the run dir is marked FAILED, so
    the next job resumes from the last finished step's checkpoint. Ray's driver installs its own SIGTERM
    handler when it connects (it prints a trace and dies): `reclaim_sigterm` is called after
    that. Outside the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    _SIGTERM_ACTIVE.append(previous)
    try:
        yield
    finally:
        _SIGTERM_ACTIVE.pop()
        signal.signal(signal.SIGTERM, previous)


def reclaim_sigterm() -> None:
    """Put `exit_on_sigterm`'s handler back (after Ray connected and replaced it); a no-op
    outside that block or the main thread."""
    if _SIGTERM_ACTIVE and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
