"""A reusable sandbox: one bubblewrap sandbox that serves programs one after another.

Starting a sandbox (bubblewrap's namespaces and mounts, an interpreter, the driver) is most
of the cost of running a trivial program. A `SandboxWorker` keeps one sandbox and its driver
running and sends it one job (a program and its cases) at a time; what each program gets is
unchanged: fresh forked processes that inherit nothing of earlier jobs (the driver never
holds a job's payload or a program's output in its memory, see `_driver`), its own rlimits
and seccomp filter, a sweep that kills every process it left, a private /tmp.

Between two programs the driver empties /tmp and resets its mode, times and extended
attributes; it retires the sandbox (the next job starts a fresh one) when /tmp cannot be
reset, when the program left System V IPC objects or sockets (TCP TIME_WAIT) in the
sandbox's namespaces, or when a job hits the harness's deadline or garbles its report. Only the
bubblewrap backend is reused: without namespaces, leftovers could not be told apart from the
rest of the machine.
"""

from __future__ import annotations

import os

import subprocess
import tempfile
import threading

from gdpo_nemo.sandbox.isolation import lease_host_uid, leased_uid
from gdpo_nemo.sandbox.limits import Limits
from gdpo_nemo.sandbox.protocol import Case, SandboxError, collect, job_blob, judged_reader, payload_bytes, read_report
from gdpo_nemo.sandbox.runner import Sandbox, give_back, kill_group, run_deadline, start_sandbox, take_root


class SandboxWorker:
    """One long-lived bubblewrap sandbox running jobs in turn. Not thread-safe: give each
    thread its own (SandboxPool does).

    sandbox: the Sandbox whose settings (interpreter, uid) it uses; must use bubblewrap.
    tmp_bytes: size of the sandbox's /tmp, fixed for its life (jobs asking another size run
        in a one-off sandbox instead).
    """

    def __init__(self, sandbox: Sandbox, tmp_bytes: int):
        if sandbox.active_backend != "bwrap":
            raise ValueError("only bubblewrap sandboxes can be reused; this Sandbox uses the unisolated rlimits backend")
        self.sandbox = sandbox
        self.tmp_bytes = tmp_bytes
        self._isolation = sandbox._get_isolation()
        # Each start of the sandbox runs as a host uid of its own (when the harness is root),
        # leased host-wide (isolation.lease_host_uid) and given back once that sandbox's
        # processes are gone: the kernel's per-uid tables (pipe buffer pages, file descriptors
        # in flight over unix sockets, process counts) are then that sandbox's alone, so no
        # program can fill them for a program in another sandbox, of this harness or another.
        self.uid: int | None = None  # the running sandbox's (None before a start, or not root)
        self.uids_used: list[int] = []  # one per start, in order
        self._held: list = []  # the running sandbox's uid lease and copy of the files (runtime.RuntimeRoot)
        self._launch = self._isolation.launch(tmp_bytes, None)  # what jobs are built for (uid and files are the start's)
        self._process: subprocess.Popen | None = None
        self._cgroup = None
        self._stderr = None
        self.started = 0  # sandboxes started over this worker's life
        self._lock = threading.Lock()

    def run_cases(
        self, source: str, cases: list[Case], limits: Limits | None = None, *, stop_on_timeout: bool = False,
        judge=None,
    ) -> list:
        """Like `Sandbox.run_cases` (`judge` included), in this worker's sandbox (started on
        first use, and again after it retired)."""
        limits = Limits() if limits is None else limits
        if not isinstance(source, str):
            raise ValueError(f"source must be a str of Python code, got {type(source).__name__}")
        cases = list(cases)
        if not cases:
            return []
        if limits.tmp_bytes != self.tmp_bytes:
            return self.sandbox.run_cases(source, cases, limits, stop_on_timeout=stop_on_timeout, judge=judge)
        blob = job_blob(self._isolation, self._launch, source, cases, limits, stop_on_timeout)
        with self._lock:
            return self._exchange(blob, cases, limits, judge)

    def _start(self, limits: Limits, payload: int) -> None:
        self._stderr = tempfile.TemporaryFile()  # never blocks the driver, read on failure
        try:
            if self._isolation.uid is not None:
                self._held.append(lease_host_uid())
                self.uid = leased_uid(self._held[-1])
                self.uids_used.append(self.uid)
            root = take_root(self._isolation)  # the files its programs read: this sandbox's alone
            if root is not None:
                self._held.append(root)
            launch = self._isolation.launch(self.tmp_bytes, None, uid=self.uid, root=root)
            self._cgroup = self.sandbox.new_cgroup(limits, payload)
        except BaseException:
            self._stop()  # gives the uid and the copy back
            raise
        try:
            self._process = start_sandbox(launch.argv, self._cgroup, stderr=self._stderr, cwd=None, env=self._launch.env)
        except BaseException:
            self._stop()
            raise
        self.started += 1

    def _exchange(self, blob: bytes, cases: list[Case], limits: Limits, judge) -> list:
        payload = payload_bytes(blob)
        for attempt in range(2):
            fresh = self._process is None or self._process.poll() is not None
            if not fresh and self._cgroup is not None:
                try:
                    self._cgroup.apply(limits, payload)
                except OSError:
                    fresh = True  # e.g. a lower memory bound than the sandbox now holds: start anew
            if fresh:
                self._stop()
                self._start(limits, payload)
            # A fresh sandbox first gets the driver's code (see isolation._BOOTSTRAP).
            sent = self._send((self._launch.stdin_prefix if fresh else b"") + blob)
            if sent:
                reader = judged_reader(cases, limits, judge)
                try:
                    report, timed_out, ended = read_report(self._process.stdout.fileno(), run_deadline(cases, limits), reader)
                except BaseException:
                    self._stop()  # `judge` raised (or we were interrupted): the report was left half read
                    raise
            if not sent or (not report.started and not fresh):
                # The sandbox ended between two jobs (killed from outside): start a new one
                # and send the job again, once.
                stderr = self._stop()
                if attempt:
                    raise SandboxError(f"the sandbox could not take a job: {stderr.decode('utf-8', 'replace')[-2000:]}")
                continue
            stderr = b""
            if timed_out or ended or not report.done or report.retiring:
                stderr = self._stop()
            return collect(report, cases, limits, timed_out, stderr, None, judge)
        raise AssertionError("unreachable")

    def _send(self, data: bytes) -> bool:
        try:
            self._process.stdin.write(data)
            self._process.stdin.flush()
            return True
        except OSError:
            return False

    def _stop(self) -> bytes:
        """End the sandbox now; its stderr (driver or bwrap diagnostics)."""
        process, self._process = self._process, None
        cgroup, self._cgroup = self._cgroup, None
        held, self._held, self.uid = self._held, [], None
        if process is not None:
            kill_group(process)
            for stream in (process.stdin, process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            process.wait()
        give_back(held, cgroup)  # once the sandbox's processes are gone: with its cgroup, or now
        if process is None:
            return b""
        self._stderr.seek(0)
        text = self._stderr.read()[-4000:]
        self._stderr.close()
        return text

    def close(self) -> None:
        """Stop the sandbox (a later job would start a new one)."""
        with self._lock:
            self._stop()
