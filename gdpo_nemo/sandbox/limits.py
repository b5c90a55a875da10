"""Resource limits of one sandboxed program run, with their defaults and why."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from gdpo_nemo.errors import UserError

MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """What one program may use. Every limit applies to each test case separately.

    cpu_seconds: CPU time per test case (rounded up to whole seconds), of each process
        (RLIMIT_CPU: SIGXCPU at the limit, SIGKILL one second later) and of all the case's
        processes together (past it the case is a timeout). Default 4 s:
        competitive-programming time limits are 1-2 s for C++, and Python needs more.
    wall_seconds: wall-clock time per test case; at the limit the whole process tree is
        killed. Default 8 s, twice the CPU limit, so a busy machine does not turn a correct
        program into a timeout while `sleep()` still cannot stall the batch.
    memory_bytes: address space of each process (RLIMIT_AS). Default 1 GiB: typical judges
        allow 256 MiB of data, and CPython plus a deep-recursion thread stack needs headroom.
        With a cgroup per sandbox (cgroups.py) the whole sandbox holds at most
        `memory_bytes + tmp_bytes + 128 MiB`; without, each process is bounded, so the
        sandbox as a whole can reach `memory_bytes * max_processes`.
    max_processes: processes plus threads the program may have at once, its main one
        included (RLIMIT_NPROC, counted per sandbox because each sandbox has its own user
        namespace). Default 16: enough for a thread pool, small enough that a fork bomb stops
        at once.
    max_file_bytes: largest file the program may write, stdout and stderr included
        (RLIMIT_FSIZE). Default 16 MiB.
    max_output_bytes: bytes of stdout and of a returned value kept per test case and sent
        back to the harness; the rest is dropped, flagged as truncated, and the case is an
        `output_limit` (stderr keeps at most 64 KiB: it only serves diagnostics, and is never
        a limit). Default 8 MiB, above the largest expected outputs of APPS/CodeContests/TACO.
    max_run_output_bytes: bytes sent back over all test cases of one run together; cases
        past the budget come back cut. Default 64 MiB. A caller that judges cases as they
        arrive (`run_many(..., judge=...)`, as the coding rewards do) holds one case's output
        per worker at a time; one that asks for every ExecResult holds up to this much per
        program it keeps.
    tmp_bytes: size of the private, memory-backed /tmp that is the program's working
        directory and $HOME (bubblewrap backend only). Default 64 MiB.
    """

    cpu_seconds: float = 4.0
    wall_seconds: float = 8.0
    memory_bytes: int = 1024 * MIB
    max_processes: int = 16
    max_file_bytes: int = 16 * MIB
    max_output_bytes: int = 8 * MIB
    max_run_output_bytes: int = 64 * MIB
    tmp_bytes: int = 64 * MIB

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            whole = spec.type in ("int", int)
            kinds = (int,) if whole else (int, float)
            if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or value <= 0:
                accepted = "a positive whole number" if whole else "a positive number"
                raise UserError(f"Limits.{spec.name} must be {accepted}, got {value!r}")
        if self.memory_bytes < 32 * MIB:
            raise UserError(
                f"Limits.memory_bytes must be at least {32 * MIB} (32 MiB: CPython itself needs it), got {self.memory_bytes}"
            )

    @property
    def cpu_rlimit(self) -> int:
        """The RLIMIT_CPU soft limit in whole seconds (`cpu_seconds` rounded up)."""
        return max(1, math.ceil(self.cpu_seconds))
