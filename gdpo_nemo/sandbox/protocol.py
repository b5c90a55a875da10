"""The wire protocol between the harness and the driver in the sandbox (`_driver.py`).

What a job is (`Case`), how it goes to the driver (`job_blob`: a header and a payload, each
an 8-byte length and a marshal blob), how the driver's report comes back (`FrameReader`:
READY, one CASE frame per case, DONE; `_driver_kernel.py` states the format) and what it
means (`collect`: one `ExecResult` per case). `runner` starts and ends the sandboxes that
speak it; nothing here starts a process.

Status of a case (`ExecResult.status`):
- "ok": the program exited with status 0 and left no process behind.
- "error": a runtime error: non-zero exit status (an uncaught exception exits 1) or a crash
  signal (SIGSEGV on runaway recursion, ...).
- "compile_error": the source does not compile (SyntaxError, NUL bytes, ...).
- "timeout": the CPU limit (SIGXCPU, or SIGKILL past it, or the case's processes together,
  with the cleanup of the files they left, past it) or the wall-clock limit was hit.
- "memory_limit": the program died with a MemoryError (the address-space limit).
- "output_limit": stdout or stderr reached `max_file_bytes`, or stdout (or a returned
  value) was longer than the `max_output_bytes` the harness keeps.
- "stray_process": the program exited 0 but left processes running (a daemon); they were
  killed.
- "skipped": not run, because an earlier case timed out and the run was asked to stop at
  the first timeout (`stop_on_timeout=True`).
- "sandbox_error": the driver never reported this case (the program killed it, which only
  the rlimits backend allows, or the whole run passed its deadline), or could not prepare it.
Only "ok" counts as having run without error.
"""

from __future__ import annotations

import logging
import marshal
import os
import select
import signal
import time
from dataclasses import dataclass

from gdpo_nemo.sandbox.isolation import Isolation
from gdpo_nemo.sandbox.limits import Limits
from gdpo_nemo.sandbox.notices import warn_once

log = logging.getLogger(__name__)

STATUSES = (
    "ok", "error", "compile_error", "timeout", "memory_limit", "output_limit", "stray_process", "skipped", "sandbox_error",
)
READ_CHUNK = 1 << 20
_SIGKILL = int(signal.SIGKILL)


class SandboxError(RuntimeError):
    """The sandbox itself failed (cannot start, broken protocol): not the program's fault."""


@dataclass(frozen=True)
class Case:
    """One test case of a program.

    stdin: text (or bytes) fed to the program's standard input ("stdio" cases).
    call: name of a function (or `Solution` method) to call after the program ran, with
        `args`; its return value comes back as JSON in `ExecResult.value` ("call" cases).
    evaluate: Python expressions evaluated, one after another, in the program's namespace
        after it ran, e.g. ("f(1)", "f(2)"); their values come back in `ExecResult.value`,
        encoded as `values.decode_values` reads them ("eval" cases). The harness judges
        them: the sandbox never sees what they are compared with. An exception is a
        runtime error of the program.
    """

    stdin: str | bytes = ""
    call: str | None = None
    args: tuple | list = ()
    evaluate: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.stdin, (str, bytes)):
            raise ValueError(f"Case.stdin must be str or bytes, got {type(self.stdin).__name__}")
        if self.call is not None and self.evaluate is not None:
            raise ValueError("a Case takes either call= or evaluate=, not both")
        if self.call is not None and (not isinstance(self.call, str) or not self.call.isidentifier()):
            raise ValueError(f"Case.call must be a Python identifier, got {self.call!r}")
        if not isinstance(self.args, (tuple, list)):
            raise ValueError(f"Case.args must be a list or tuple of arguments, got {type(self.args).__name__}")
        if self.evaluate is not None:
            if isinstance(self.evaluate, str) or not isinstance(self.evaluate, (tuple, list)) or not self.evaluate:
                raise ValueError(f"Case.evaluate must be a non-empty tuple of expressions, got {self.evaluate!r:.200}")
            object.__setattr__(self, "evaluate", tuple(self.evaluate))
            for expression in self.evaluate:
                if not isinstance(expression, str):
                    raise ValueError(f"Case.evaluate must hold strings of Python expressions, got {type(expression).__name__}")
                try:
                    compile(expression, "<evaluate>", "eval", dont_inherit=True)
                except Exception as err:  # SyntaxError, ValueError (NUL), RecursionError, MemoryError
                    raise ValueError(f"Case.evaluate expression does not compile ({type(err).__name__}: {err}): {expression[:200]!r}") from None

    @property
    def kind(self) -> str:
        """"stdio", "call" or "eval"."""
        return "call" if self.call is not None else "eval" if self.evaluate is not None else "stdio"

    def _wire(self) -> tuple:
        stdin = self.stdin.encode("utf-8", "surrogatepass") if isinstance(self.stdin, str) else bytes(self.stdin)
        return (self.kind, stdin, self.call, list(self.args), list(self.evaluate or ()))


@dataclass(frozen=True)
class ExecResult:
    """What one test case of a program did.

    status: one of STATUSES (module docstring). returncode: the exit status, or minus the
    signal that killed it (subprocess's convention), or None when it never ran (compile
    error, lost case). stdout/stderr: the kept output, decoded as UTF-8 (undecodable bytes
    replaced). wall_s / cpu_s: seconds of wall-clock time and of CPU time of the main process.
    value: "call" cases: the JSON text of the return value; "eval" cases: the encoded values
    (`values.decode_values`); None if the program never got there, "\\x00unserializable"
    if a value could not be encoded; stdio: None.
    """

    status: str
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    value: str | None = None

    @property
    def ok(self) -> bool:
        """True when the case ran to the end without error."""
        return self.status == "ok"


@dataclass
class _Frame:
    term: str
    number: int
    cpu_s: float
    wall_s: float
    out_total: int
    err_total: int
    value_total: int
    out: bytes
    err: bytes
    value: bytes
    strays: bool


@dataclass
class _Report:
    """What the driver reported for one job. `frames` holds per case index either the
    `_Frame` or, when a FrameReader was given `convert`, what that made of it."""

    started: bool  # it wrote READY: the sandbox came up
    protected: bool  # it made itself non-dumpable
    frames: dict[int, object]
    done: bool  # it wrote DONE after every case
    retiring: bool  # it will serve no further job (DONE 1)


# Parsed bytes are dropped from a FrameReader's buffer once this many have piled up.
_COMPACT_BYTES = 1 << 20


class FrameReader:
    """Reads the driver's report of one job as it arrives, each byte once.

    `feed` returns True once the report is complete (DONE after every case) or void:
    anything malformed, out of order or after DONE voids the whole report, because those
    bytes did not come from the driver as written.

    convert: called as `convert(index, frame)` as soon as a case's frame is complete; what it
        returns is kept instead of the frame, whose bytes are dropped. So the reader holds at
        most one case's output (and the caller whatever `convert` keeps), however many cases
        the job has.
    """

    def __init__(self, count: int, convert=None):
        self.count = count
        self.convert = convert
        self.data = bytearray()
        self.position = 0
        self.started = self.protected = self.done = self.void = False
        self.retiring = True
        self.frames: dict[int, object] = {}
        self._pending: tuple | None = None  # a frame header whose body has not all arrived

    def feed(self, chunk: bytes) -> bool:
        """Add the next bytes of the driver's output; True when nothing more is expected."""
        self.data += chunk
        while not (self.done or self.void):
            if not self._step():
                break
        if self.position >= _COMPACT_BYTES:
            del self.data[: self.position]
            self.position = 0
        return self.done or self.void

    def _step(self) -> bool:
        """Parse one line or frame body; False when more bytes are needed."""
        if self._pending is not None:
            fields, sizes = self._pending
            if len(self.data) - self.position < sum(sizes):
                return False
            bodies = []
            for size in sizes:
                bodies.append(bytes(self.data[self.position : self.position + size]))
                self.position += size
            index, term, number, cpu_s, wall_s, out_total, err_total, value_total, strays = fields
            frame = _Frame(term, number, cpu_s, wall_s, out_total, err_total, value_total, *bodies, strays)
            self.frames[index] = frame if self.convert is None else self.convert(index, frame)
            self._pending = None
            return True
        line_end = self.data.find(b"\n", self.position)
        if line_end < 0:
            if len(self.data) - self.position > 200:  # no line of the protocol is this long
                self.void = True
            return False
        line = bytes(self.data[self.position : line_end])
        self.position = line_end + 1
        if not self.started:
            if line not in (b"READY 0", b"READY 1"):
                self.void = True
                return False
            self.started, self.protected = True, line == b"READY 1"
            return True
        if line in (b"DONE 0", b"DONE 1"):
            if self.position != len(self.data) or len(self.frames) != self.count:
                self.void = True
            else:
                self.done, self.retiring = True, line == b"DONE 1"
            return False
        parts = line.split(b" ")
        if len(parts) != 13 or parts[0] != b"CASE":
            self.void = True
            return False
        try:
            index, number = int(parts[1]), int(parts[3])
            cpu_s, wall_s = float(parts[4]), float(parts[5])
            out_total, err_total, value_total, len_out, len_err, len_val, strays = (int(p) for p in parts[6:13])
        except ValueError:
            self.void = True
            return False
        if index != len(self.frames) or index >= self.count or min(len_out, len_err, len_val) < 0:
            self.void = True
            return False
        term = parts[2].decode("ascii", "replace")
        self._pending = ((index, term, number, cpu_s, wall_s, out_total, err_total, value_total, bool(strays)),
                         (len_out, len_err, len_val))
        return True

    def report(self) -> _Report:
        """What the driver reported (nothing but `started` if the report is void)."""
        if self.void:
            return _Report(self.started, False, {}, False, True)
        return _Report(self.started, self.protected, dict(self.frames), self.done, self.retiring)


def _status(frame: _Frame, limits: Limits) -> tuple[str, int | None]:
    """(status, returncode) of one reported case."""
    if frame.term == "compile":
        return "compile_error", None
    if frame.term == "skipped":
        return "skipped", None
    if frame.term == "setup":
        return "sandbox_error", None
    if frame.term == "wall":
        return "timeout", -_SIGKILL
    if frame.term == "cpu":
        # SIGXCPU, SIGKILL at the hard limit, or every process of the case together past it.
        return "timeout", frame.number  # minus the signal when one killed it
    if frame.term == "signal":
        if frame.number == int(signal.SIGXFSZ):
            return "output_limit", -frame.number
        return "error", -frame.number
    code = frame.number
    # More stdout (or a larger returned value) than the harness keeps: a limit hit, whatever
    # the exit status; the output cannot be judged and is no program's normal behaviour.
    cut = frame.out_total > len(frame.out) or frame.value_total > len(frame.value)
    if code == 0:
        if cut:
            return "output_limit", 0
        return ("stray_process" if frame.strays else "ok"), 0
    if cut or max(frame.out_total, frame.err_total) >= limits.max_file_bytes:
        return "output_limit", code
    # An uncaught exception's traceback ends with "<Type>: <message>" on its last line.
    if frame.err[-2000:].rstrip().rsplit(b"\n", 1)[-1].startswith(b"MemoryError"):
        return "memory_limit", code
    return "error", code


def _result(frame: _Frame, case: Case, limits: Limits) -> ExecResult:
    status, returncode = _status(frame, limits)
    value: str | None = None
    if case.kind in ("call", "eval") and frame.value:
        value = frame.value.decode("utf-8", "replace")
    return ExecResult(
        status=status,
        returncode=returncode,
        stdout=frame.out.decode("utf-8", "replace"),
        stderr=frame.err.decode("utf-8", "replace"),
        wall_s=frame.wall_s,
        cpu_s=frame.cpu_s,
        stdout_truncated=frame.out_total > len(frame.out),
        stderr_truncated=frame.err_total > len(frame.err),
        value=value,
    )


def judged_reader(cases: list[Case], limits: Limits, judge) -> FrameReader:
    """A FrameReader for a job's cases that hands each case's ExecResult to `judge(index,
    result)` as soon as it is complete and keeps only what `judge` returns (None: keeps the
    frames, read into ExecResults by `collect`)."""
    if judge is None:
        return FrameReader(len(cases))
    return FrameReader(len(cases), lambda index, frame: judge(index, _result(frame, cases[index], limits)))


def read_report(fd: int, deadline: float, reader: FrameReader) -> tuple[_Report, bool, bool]:
    """Feed `reader` from the driver's output `fd` until the report is complete or void, the
    driver's output ends, or `deadline` seconds pass: (the report, deadline passed?, output
    ended?). Each byte is parsed once, as it arrives."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    until = time.monotonic() + deadline
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return reader.report(), True, False
        if not poller.poll(int(left * 1000) + 1):
            continue
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            return reader.report(), False, True
        if reader.feed(chunk):
            # A void report means the driver cannot be trusted: its sandbox should end.
            return reader.report(), False, reader.void


def job_blob(isolation: Isolation, launch, source: str, cases: list[Case], limits: Limits, stop_on_timeout: bool,
             *, last: bool = False) -> bytes:
    """One job as the driver reads it: the header (limits, case kinds, seccomp filter) and
    the payload (source and cases), each an 8-byte big-endian length and a marshal blob.
    `last`: the sandbox ends after this job (a one-off run), so the driver skips what only
    keeps the sandbox clean for a next program (the job's marks and the checks after it).

    Raises ValueError when the cases' arguments are not plain data (or nest too deeply).
    """
    header = {
        "main_path": launch.main_path,
        "kinds": [case.kind for case in cases],
        "cpu_seconds": limits.cpu_rlimit,
        "wall_seconds": float(limits.wall_seconds),
        "memory_bytes": int(limits.memory_bytes),
        # The fallback without a uid of its own would count every process of the user.
        "max_processes": None if (isolation.backend == "rlimits" and isolation.uid is None) else limits.max_processes,
        "max_file_bytes": int(limits.max_file_bytes),
        "max_output_bytes": int(limits.max_output_bytes),
        "max_run_output_bytes": int(limits.max_run_output_bytes),
        "pid_namespace": launch.pid_namespace,
        "stop_on_timeout": bool(stop_on_timeout),
        "last": bool(last),
        "seccomp": isolation.seccomp_filter,
        "guard_sites": isolation.seccomp_guard_sites,
    }
    # The payload: the source, then per case its call data (marshal) and its stdin, raw. The
    # header says where each part lies, so a case's process reads only its own.
    parts = [source.encode("utf-8", "surrogatepass")]
    header["source"] = (0, len(parts[0]))
    layout = []
    at = len(parts[0])
    for case in cases:
        kind, stdin, name, args, expressions = case._wire()
        try:
            meta = marshal.dumps((name, args, expressions), 4)
        except ValueError as err:
            raise ValueError(f"Case.args must hold only JSON-like values (None, bool, int, float, str, list, dict): {err}") from None
        layout.append((at, len(meta), at + len(meta), len(stdin)))
        parts += [meta, stdin]
        at += len(meta) + len(stdin)
    header["layout"] = layout
    head = marshal.dumps(header, 4)
    return b"".join([len(head).to_bytes(8, "big"), head, at.to_bytes(8, "big"), *parts])


def collect(
    report: _Report, cases: list[Case], limits: Limits, timed_out: bool, stderr: bytes, exit_status, judge=None
) -> list:
    """One ExecResult per case from the driver's report (or, with `judge`, what it made of
    each, see `judged_reader`); cases it did not report are "timeout" when the harness gave
    up on the job, else "sandbox_error"."""
    text = stderr.decode("utf-8", "replace")[-2000:]
    if not report.started:
        if timed_out:
            lost = [ExecResult(status="timeout", returncode=None, stderr=text) for _ in cases]
            return lost if judge is None else [judge(index, result) for index, result in enumerate(lost)]
        raise SandboxError(f"the sandbox did not start (exit status {exit_status}): {text}")
    if not report.protected and report.frames:
        warn_once("unprotected", "gdpo_nemo.sandbox: the driver could not make itself non-dumpable (prctl); a "
                   "hostile program could tamper with its reports")
    lost = "timeout" if timed_out else "sandbox_error"
    results = []
    for index, case in enumerate(cases):
        if index not in report.frames:
            result = ExecResult(status=lost, returncode=None, stderr=text)
            results.append(result if judge is None else judge(index, result))
        elif judge is None:
            results.append(_result(report.frames[index], case, limits))
        else:
            results.append(report.frames[index])
    return results


def payload_bytes(blob: bytes) -> int:
    """Size of the payload part of a job blob (see `job_blob`): the driver holds it in a
    memfd in the sandbox for the whole job, so the sandbox's memory bound grows by it."""
    head = int.from_bytes(blob[:8], "big")
    return int.from_bytes(blob[8 + head : 16 + head], "big")

