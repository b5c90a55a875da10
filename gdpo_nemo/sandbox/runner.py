"""Run one model-written Python program on its test cases inside the sandbox.

    sandbox = Sandbox()                                   # bubblewrap; SandboxError where it cannot work
    [result] = sandbox.run_cases(source, [Case(stdin="1 2\\n")], limits=Limits(cpu_seconds=2))
    result.status, result.stdout                          # "ok", "3\\n"

One sandbox invocation runs all cases of one program: the driver (`DRIVER_FILES`) starts
once and forks a fresh child per case, which reads the program from the job's payload,
compiles it and becomes it: about a millisecond instead of a new interpreter. Each case
gets fresh stdin/stdout/stderr, its own CPU and wall-clock limits and seccomp filter, a
sweep that kills anything the case left running, and a /tmp emptied of what earlier cases
wrote.

What a case's status means, and how jobs and reports cross to the driver and back, is
`protocol`'s part; this module starts, reuses and ends the sandboxes that run them (the
driver's source, the backend and its probe, cgroups, the rlimits backend's working
directory, the process-wide default Sandbox).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.sandbox._tree import empty_directory
from gdpo_nemo.sandbox.cgroups import CgroupRoot, SandboxCgroup
from gdpo_nemo.sandbox.isolation import BACKENDS, DEFAULT_UNPRIVILEGED_ID, Isolation, default_python, lease_host_uid, leased_uid
from gdpo_nemo.sandbox.limits import Limits
from gdpo_nemo.sandbox.notices import warn_once
from gdpo_nemo.sandbox.protocol import (
    Case,
    ExecResult,
    SandboxError,
    collect,
    job_blob,
    judged_reader,
    payload_bytes,
    read_report,
)

log = logging.getLogger(__name__)

# What runs inside the sandbox: the directory emptier, then the driver that uses it, whose
# files each use names the ones before them define (`_driver_kernel.py` says which does what);
# `_driver.py`'s last line starts it.
DRIVER_FILES = ("_tree.py", "_driver_kernel.py", "_driver_program.py", "_driver.py")
DRIVER_SOURCE = "\n".join((Path(__file__).parent / name).read_text(encoding="utf-8") for name in DRIVER_FILES)
# Seconds allowed for bubblewrap and the interpreter to start, on top of the cases' own wall
# limits, before the harness kills the whole run.
STARTUP_SLACK_S = 10.0
# Per-case slack for the driver's own work (fork, reading outputs) within the run deadline.
PER_CASE_SLACK_S = 0.5
BACKEND_ENV = "GDPO_NEMO_SANDBOX_BACKEND"


def _shout(message: str) -> None:
    """A warning that cannot be missed: logged, raised as a RuntimeWarning, and written to
    stderr, every time."""
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=4)
    try:
        sys.stderr.write(f"\n*** {message} ***\n\n")
    except (OSError, ValueError):
        pass


@dataclass
class Sandbox:
    """Where and how programs run. Thread-safe; one instance can serve a whole pool.

    backend: "bwrap" (the default: bubblewrap; raises SandboxError where it cannot work) or
        "rlimits", the explicit opt-in to run model-written programs WITHOUT isolation (the
        same driver, rlimits and seccomp filter, but the program sees the file system, the
        network and the harness's processes; docs/sandbox.md). Choosing "rlimits" warns
        loudly each time a Sandbox starts using it. `default_sandbox()` reads the
        environment variable GDPO_NEMO_SANDBOX_BACKEND (unset: "bwrap").
    python: interpreter for the programs (default `isolation.default_python()`); the driver
        needs CPython >= 3.8.
    uid: unprivileged uid/gid to run programs as when the harness is root and the backend is
        "rlimits" (default 65534); ignored when the harness is not root. A root harness runs
        each bubblewrap sandbox as a host uid of its own instead (`isolation.lease_host_uid`).
    cgroups: give each sandbox a cgroup bounding its memory, processes and CPU as a whole
        where the machine allows it (`cgroups.CgroupRoot.detect`; default True). Where it
        does not, bounds are per process and the Sandbox warns once.
    inet: let programs make AF_INET/AF_INET6 sockets (default False: only AF_UNIX, which
        test programs need for local IPC). TCP and UDP sockets reach state the sandbox
        cannot bound or reset: socket buffers charged to no cgroup here (18 unread loopback
        connections held 365 MiB of the host's TCP memory), the host's ephemeral-port table,
        the namespace's protocol counters. Turn it on only for a task whose tests need it.
    """

    backend: str = "bwrap"
    python: str | None = None
    uid: int | None = None
    cgroups: bool = True
    inet: bool = False
    _isolation: Isolation | None = field(default=None, init=False, repr=False, compare=False)
    _cgroup_root: CgroupRoot | None = field(default=None, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            hint = " (the silent fallback is gone: pass 'rlimits' to opt in to running without isolation)" if self.backend == "auto" else ""
            raise UserError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}{hint}")
        if self.python is None:
            self.python = default_python()
        if not os.access(self.python, os.X_OK):
            raise UserError(f"python must be an executable interpreter, got {self.python!r}")
        if os.geteuid() != 0:
            self.uid = None
        elif self.uid is None:
            self.uid = DEFAULT_UNPRIVILEGED_ID

    @property
    def active_backend(self) -> str:
        """"bwrap" or "rlimits": what runs programs (probes the machine on first use)."""
        return self._get_isolation().backend

    def _get_isolation(self) -> Isolation:
        with self._lock:
            if self._isolation is None:
                if self.cgroups:
                    self._cgroup_root = _shared_cgroup_root()
                self._isolation = self._choose()
                if self._isolation.backend == "bwrap" and self._isolation.runtime is None:
                    warn_once("runtime", f"gdpo_nemo.sandbox: programs read the host's files ({self._isolation.runtime_note});"
                               " their page cache is shared between sandboxes (docs/sandbox.md)")
            return self._isolation

    @property
    def bounded_per_sandbox(self) -> bool:
        """True when each sandbox gets a cgroup (memory, processes, CPU bounded as a whole)."""
        self._get_isolation()
        return self._cgroup_root is not None

    def new_cgroup(self, limits: Limits, payload: int = 0) -> SandboxCgroup | None:
        """A cgroup for one new sandbox, bounded for `limits` and a job payload of `payload`
        bytes, or None without cgroups."""
        if self._cgroup_root is None:
            return None
        cgroup = self._cgroup_root.create()
        try:
            cgroup.apply(limits, payload)
        except OSError as err:
            cgroup.remove()
            raise SandboxError(f"cannot bound the sandbox's cgroup: {err}") from err
        return cgroup

    def _choose(self) -> Isolation:
        if self.backend == "bwrap":
            try:
                isolation = Isolation("bwrap", self.python, self.uid, DRIVER_SOURCE, inet=self.inet)
                problem = self._probe(isolation)
                if problem is not None:
                    # A one-off sandbox's /proc with only its processes needs Linux >= 5.8;
                    # elsewhere it hides the host-wide files one bind at a time.
                    isolation.proc_subset = False
                    problem = self._probe(isolation)
                    if problem is None:
                        warn_once("proc-subset", "gdpo_nemo.sandbox: this kernel cannot mount /proc with subset=pid in a "
                                  "sandbox; one-off sandboxes hide its host-wide files one by one (slower starts)")
            except RuntimeError as err:
                problem = str(err)
            if problem is not None:
                raise SandboxError(
                    f"the bubblewrap sandbox does not work here: {problem}. Model-written programs never run "
                    "unisolated by default: install the Debian package `bubblewrap` and allow unprivileged user "
                    "namespaces, or opt in to running them WITHOUT isolation with Sandbox(backend='rlimits') or "
                    "GDPO_NEMO_SANDBOX_BACKEND=rlimits (development only; docs/sandbox.md)"
                )
            return isolation
        _shout(
            "gdpo_nemo.sandbox: UNISOLATED backend 'rlimits' chosen: model-written programs run with rlimits and a "
            "seccomp filter only; they can read your files (data, expected outputs, keys), reach the network and "
            "signal your processes. Never train on untrusted output this way."
        )
        try:
            isolation = Isolation("rlimits", self.python, self.uid, DRIVER_SOURCE, inet=self.inet)
        except RuntimeError as err:
            raise SandboxError(f"the rlimits sandbox does not work here: {err}") from None
        problem = self._probe(isolation)
        if problem is not None:
            raise SandboxError(f"the rlimits sandbox does not work here: {problem}")
        return isolation

    def _probe(self, isolation: Isolation) -> str | None:
        """None if a trivial program runs correctly with `isolation`, else what went wrong."""
        try:
            [result] = self._run(isolation, "print(6 * 7)", [Case()], Limits())
        except SandboxError as err:
            return str(err)
        if result.status != "ok" or result.stdout != "42\n":
            return f"a trivial program ended with status {result.status!r}: {result.stderr[-500:]!r}"
        return None

    def run_cases(
        self, source: str, cases: list[Case], limits: Limits | None = None, *, stop_on_timeout: bool = False,
        judge=None,
    ) -> list:
        """Run `source` once per case in one sandbox; one ExecResult per case, in order.

        stop_on_timeout: after the first case that times out, skip the rest (status
            "skipped") instead of letting each of them run into its limit too.
        judge: `judge(index, result)` is called with each case's ExecResult as soon as it
            arrives, and what it returns replaces the ExecResult in the returned list: the
            output is dropped at once, so the harness holds one case's output at a time
            however many cases and programs run (`gdpo_nemo.rewards.code` judges this way).
        Never raises because of what the program does; raises ValueError for bad arguments
        and SandboxError when the sandbox itself cannot run.
        """
        if not isinstance(source, str):
            raise UserError(f"source must be a str of Python code, got {type(source).__name__}")
        cases = list(cases)
        for case in cases:
            if not isinstance(case, Case):
                raise UserError(f"cases must be Case objects, got {type(case).__name__}")
        if not cases:
            return []
        limits = Limits() if limits is None else limits
        if not isinstance(limits, Limits):
            raise UserError(f"limits must be a gdpo_nemo.sandbox.Limits, got {type(limits).__name__}")
        return self._run(self._get_isolation(), source, cases, limits, bool(stop_on_timeout), judge)

    def run_program(self, source: str, stdin: str | bytes = "", limits: Limits | None = None) -> ExecResult:
        """Run `source` once with `stdin`; its ExecResult."""
        return self.run_cases(source, [Case(stdin=stdin)], limits)[0]

    def _run(
        self, isolation: Isolation, source: str, cases: list[Case], limits: Limits, stop_on_timeout: bool = False,
        judge=None,
    ) -> list:
        workdir = None
        if isolation.backend == "rlimits":
            workdir = tempfile.mkdtemp(prefix="gdpo-sandbox-")
            if isolation.uid is not None:
                os.chown(workdir, isolation.uid, isolation.uid)
        held = []  # what the sandbox holds until its processes are gone: its uid, its copy of the files
        try:
            root = None
            if isolation.backend == "bwrap":
                # as root, a host uid of its own, as each start of a pool worker's sandbox has
                if isolation.uid is not None:
                    held.append(lease_host_uid())
                root = take_root(isolation)
                if root is not None:
                    held.append(root)
            uid = leased_uid(held[0]) if isolation.uid is not None and isolation.backend == "bwrap" else None
            launch = isolation.launch(limits.tmp_bytes, workdir, uid=uid, root=root, one_off=True)
        except BaseException:
            give_back(held, None)
            if workdir is not None:
                _remove_tree(workdir)
            raise
        try:
            return self._run_in(isolation, launch, source, cases, limits, stop_on_timeout, judge, held)
        finally:
            if workdir is not None:
                _remove_tree(workdir)

    def _run_in(self, isolation, launch, source, cases, limits, stop_on_timeout, judge, held=()) -> list:
        """Run one job in a new sandbox; what it `held` (its uid's lease, its copy of the files)
        is given back once the sandbox's processes are gone (`give_back`)."""
        cgroup = None
        try:
            blob = job_blob(isolation, launch, source, cases, limits, stop_on_timeout, last=True)
            cgroup = self.new_cgroup(limits, payload_bytes(blob))
            return self._run_process(launch, cgroup, blob, cases, limits, judge)
        finally:
            give_back(held, cgroup)

    def _run_process(self, launch, cgroup, blob, cases, limits, judge) -> list:
        stderr = tempfile.TemporaryFile()  # never blocks the driver; read at the end
        try:
            process = start_sandbox(launch.argv, cgroup, stderr=stderr, cwd=launch.cwd, env=launch.env)
            reader = judged_reader(cases, limits, judge)
            timed_out = False
            try:
                # One job, then end of input: the driver exits after it.
                try:
                    process.stdin.write(launch.stdin_prefix + blob)
                    process.stdin.close()
                except OSError:
                    pass  # it ended early: what it reported (or not) says why
                report, timed_out, _ = read_report(process.stdout.fileno(), run_deadline(cases, limits), reader)
                if report.done:
                    try:
                        process.wait(timeout=STARTUP_SLACK_S)
                    except subprocess.TimeoutExpired:
                        pass
            finally:
                if process.poll() is None:
                    kill_group(process)
                process.wait()
                process.stdout.close()
            stderr.seek(0)
            text = stderr.read()[-4000:]
        finally:
            stderr.close()
        return collect(report, cases, limits, timed_out, text, process.returncode, judge)


def start_sandbox(argv: list[str], cgroup: SandboxCgroup | None, *, stderr, cwd: str | None, env: dict[str, str]) -> subprocess.Popen:
    """Start a sandbox (`argv`: setpriv and bubblewrap, or the rlimits backend's driver) in a
    session of its own, stdin and stdout piped, inside `cgroup` before anything of it runs.

    bubblewrap: its sandbox process (PID 1 of the sandbox, the driver-to-be) waits on
    `--block-fd` until the harness has moved it into the cgroup, by the PID that bubblewrap
    reports on `--info-fd`; every process of the sandbox is then forked inside the cgroup.
    That saves the `/bin/sh` that entered the cgroup first (an exec: about 1 ms of a fresh
    sandbox's ~40 ms of CPU). The rlimits backend still enters through `/bin/sh` (`wrap`).
    Raises SandboxError when the sandbox cannot be started or put in its cgroup (killed then).
    """
    bwrap_at = next((i for i, arg in enumerate(argv) if os.path.basename(arg) == "bwrap"), None)
    if cgroup is not None and bwrap_at is None:
        argv, cgroup = cgroup.wrap(argv), None
    if cgroup is None:
        return _popen(argv, stderr, cwd, env, ())
    info_read, info_write = os.pipe()
    block_read, block_write = os.pipe()
    try:
        try:
            argv = [*argv[:bwrap_at + 1], "--info-fd", str(info_write), "--block-fd", str(block_read), *argv[bwrap_at + 1:]]
            process = _popen(argv, stderr, cwd, env, (info_write, block_read))
        finally:
            os.close(info_write)
            os.close(block_read)
        try:
            pid = _sandbox_pid(info_read)
            if pid is not None:  # None: bubblewrap ended before making the sandbox (its stderr says why)
                cgroup.enter(pid)
                try:
                    os.write(block_write, b"\0")
                except BrokenPipeError:
                    pass  # it ended meanwhile: its (missing) report and its stderr say why
        except BaseException as err:
            kill_group(process)
            process.wait()
            for stream in (process.stdin, process.stdout):
                stream.close()
            if isinstance(err, OSError):
                raise SandboxError(f"cannot put the sandbox in its cgroup: {err}") from err
            raise
        return process
    finally:
        os.close(info_read)
        os.close(block_write)


def _popen(argv, stderr, cwd, env, pass_fds) -> subprocess.Popen:
    try:
        return subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            cwd=cwd, env=env, close_fds=True, start_new_session=True, pass_fds=pass_fds,
        )
    except OSError as err:
        raise SandboxError(f"cannot start {argv[0]}: {err}") from err


def _sandbox_pid(info_fd: int) -> int | None:
    """The host PID of bubblewrap's sandbox process, from what it writes on `--info-fd` (JSON,
    then it closes the descriptor); None when it closed it without a word (it failed first)."""
    poller = select.poll()
    poller.register(info_fd, select.POLLIN)
    data = b""
    deadline = time.monotonic() + STARTUP_SLACK_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxError(f"bubblewrap did not report its sandbox's PID within {STARTUP_SLACK_S:g} s")
        if not poller.poll(left * 1000):
            continue
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
    if not data:
        return None
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError) as err:
        raise SandboxError(f"bubblewrap's --info-fd said {data[:200]!r}, not its sandbox's PID") from err


def take_root(isolation: Isolation):
    """`isolation.take_root()`: the copy of the files programs read that a new sandbox holds
    alone (None where sandboxes read the host's files); SandboxError when none can be had."""
    try:
        return isolation.take_root()
    except OSError as err:
        raise SandboxError(f"no copy of the interpreter's files is free for a new sandbox: {err}") from err


def give_back(held, cgroup) -> None:
    """Release what a sandbox `held` (leases, its copy of the files) once its processes are
    gone: with its cgroup, removed here, when it has one; otherwise now (bwrap, the init of
    the sandbox's PID namespace, whose end kills the rest, has been waited for)."""
    if cgroup is not None:
        for lease in held:
            cgroup.hold_until_removed(lease)
        cgroup.remove()
    else:
        for lease in held:
            lease.release()


def run_deadline(cases: list[Case], limits: Limits) -> float:
    """Seconds a whole job may take before the harness kills its sandbox."""
    return STARTUP_SLACK_S + len(cases) * (limits.wall_seconds + PER_CASE_SLACK_S)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL to the process group of a sandbox started by this module."""
    # The run is a session of its own: killing the group reaches setpriv/bwrap or the
    # fallback's driver; bwrap's PID 1 then dies by PR_SET_PDEATHSIG and takes its PID
    # namespace with it.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass


def _remove_tree(path: str) -> None:
    """Remove the rlimits backend's working directory, whatever a program left in it (any
    depth, no permissions, links); best effort."""
    empty_directory(path)
    try:
        os.rmdir(path)
    except OSError:
        pass


_default: Sandbox | None = None
_default_lock = threading.Lock()
_cgroup_root: tuple[CgroupRoot | None, str] | None = None


def _shared_cgroup_root() -> CgroupRoot | None:
    """The process-wide root of per-sandbox cgroups (detected once; removed at exit), or
    None with a one-time warning saying why."""
    global _cgroup_root
    with _default_lock:
        if _cgroup_root is None:
            _cgroup_root = CgroupRoot.detect()
            if _cgroup_root[0] is not None:
                atexit.register(_cgroup_root[0].close)
        root, reason = _cgroup_root
    if root is None:
        warn_once("cgroups", f"gdpo_nemo.sandbox: no cgroup per sandbox ({reason}); memory, processes and CPU "
                   "are bounded per process only (docs/sandbox.md)")
    return root


def default_sandbox() -> Sandbox:
    """The process-wide Sandbox (created on first use): backend from the environment variable
    GDPO_NEMO_SANDBOX_BACKEND ("bwrap" when unset; "rlimits" is the opt-in to run without
    isolation)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox(backend=os.environ.get(BACKEND_ENV, "bwrap") or "bwrap")
        return _default


def run_cases(
    source: str, cases: list[Case], limits: Limits | None = None, *, stop_on_timeout: bool = False
) -> list[ExecResult]:
    """`default_sandbox().run_cases(...)`: run `source` on each case in one sandbox."""
    return default_sandbox().run_cases(source, cases, limits, stop_on_timeout=stop_on_timeout)


def run_program(source: str, stdin: str | bytes = "", limits: Limits | None = None) -> ExecResult:
    """`default_sandbox().run_program(...)`: run `source` once with `stdin`."""
    return default_sandbox().run_program(source, stdin, limits)
