"""Run many sandboxed programs in parallel.

Each job is one program with its test cases. Jobs run on a thread pool: a thread only waits
on its sandbox's pipes, so threads are enough, and the sandboxes themselves are separate
processes that use every core. With `reuse=True` (the default) each thread keeps one
bubblewrap sandbox for job after job (`worker.SandboxWorker`: the sandbox is emptied between
programs and retired when it cannot be); with `reuse=False`, or on the rlimits backend,
every job gets a sandbox of its own.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from gdpo_nemo.errors import UserError
from gdpo_nemo.sandbox.limits import Limits
from gdpo_nemo.sandbox.protocol import Case
from gdpo_nemo.sandbox.runner import Sandbox, default_sandbox
from gdpo_nemo.sandbox.worker import SandboxWorker


def default_workers() -> int:
    """Parallel sandboxes by default: two per CPU this process may use. One per core leaves
    cores idle while a sandbox is starting up or waiting on its pipes."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, 2 * cpus)


class SandboxPool:
    """A fixed number of programs running at once, each in its own sandbox.

        with SandboxPool(workers=4) as pool:
            results = pool.run_many([(source, [Case(stdin="1\\n")]), ...])   # [[ExecResult]]

    workers: sandboxes running at once (default `default_workers()`).
    sandbox: how programs are isolated (default: the process-wide `default_sandbox()`).
    limits: default Limits of every job (a job may pass its own).
    reuse: keep one sandbox per worker for job after job (bubblewrap only; ~5x cheaper per
        trivial program, docs/sandbox.md); False starts a new sandbox for every job.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        sandbox: Sandbox | None = None,
        limits: Limits | None = None,
        reuse: bool = True,
    ):
        if workers is None:
            workers = default_workers()
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise UserError(f"workers must be a whole number >= 1, got {workers!r}")
        if limits is not None and not isinstance(limits, Limits):
            raise UserError(f"limits must be a gdpo_nemo.sandbox.Limits, got {type(limits).__name__}")
        self.workers = workers
        self.sandbox = default_sandbox() if sandbox is None else sandbox
        self.limits = Limits() if limits is None else limits
        self.reuse = bool(reuse)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox")
        self._local = threading.local()
        self._kept: list[SandboxWorker] = []
        self._kept_lock = threading.Lock()

    def _run(self, source: str, cases: list[Case], limits: Limits, stop_on_timeout: bool, judge) -> list:
        if not self.reuse or self.sandbox.active_backend != "bwrap":
            return self.sandbox.run_cases(source, cases, limits, stop_on_timeout=stop_on_timeout, judge=judge)
        worker = getattr(self._local, "worker", None)
        if worker is None:
            worker = self._local.worker = SandboxWorker(self.sandbox, self.limits.tmp_bytes)
            with self._kept_lock:
                self._kept.append(worker)
        return worker.run_cases(source, cases, limits, stop_on_timeout=stop_on_timeout, judge=judge)

    def submit(
        self, source: str, cases: Sequence[Case], limits: Limits | None = None, *, stop_on_timeout: bool = False,
        judge=None,
    ) -> Future:
        """Start one program on its cases; a Future of its list[ExecResult], or of what
        `judge(case index, result)` made of each (see `Sandbox.run_cases`)."""
        return self._executor.submit(self._run, source, list(cases), limits or self.limits, bool(stop_on_timeout), judge)

    def run_many(
        self, jobs: Iterable[tuple[str, Sequence[Case]]], limits: Limits | None = None, *, stop_on_timeout: bool = False,
        judge=None,
    ) -> list[list]:
        """Run every (source, cases) job, `workers` at a time; results in job order.

        judge: `judge(job index, case index, result)` is called with each case's ExecResult
            as it arrives (in a worker thread), and what it returns replaces the ExecResult:
            the harness then holds one case's output per worker, whatever the batch size,
            instead of every output of the batch until the end.
        Raises the first SandboxError (the sandbox broke) or ValueError (a bad job);
        never raises because of what a program does.
        """
        futures = [
            self.submit(source, cases, limits, stop_on_timeout=stop_on_timeout,
                        judge=None if judge is None else functools.partial(judge, job))
            for job, (source, cases) in enumerate(jobs)
        ]
        return [future.result() for future in futures]

    def close(self) -> None:
        """Wait for running jobs, then stop the threads and the kept sandboxes."""
        self._executor.shutdown(wait=True)
        with self._kept_lock:
            kept, self._kept = self._kept, []
        for worker in kept:
            worker.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


_shared: SandboxPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> SandboxPool:
    """The process-wide pool with default settings (created on first use; its threads and
    sandboxes stay idle between batches and are stopped at interpreter exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SandboxPool()
            atexit.register(_shared.close)
        return _shared
