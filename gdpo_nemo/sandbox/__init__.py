"""Isolated execution of model-written Python programs (for the code rewards).

    from gdpo_nemo.sandbox import Case, Limits, SandboxPool, run_program

    result = run_program("print(input()[::-1])", stdin="abc\\n", limits=Limits(cpu_seconds=2))
    result.status, result.stdout          # "ok", "cba\\n"

    with SandboxPool() as pool:           # many programs at once
        per_program = pool.run_many([(source, [Case(stdin=s) for s in inputs]), ...])

Programs run under bubblewrap (no network, own PID namespace, read-only system, private
/tmp, scrubbed environment, unprivileged uid) with a seccomp filter, rlimits on CPU time,
address space, processes and file size, a cgroup per sandbox where the machine allows it,
and a wall-clock limit that kills the whole tree. Without bubblewrap, `Sandbox()` raises;
`Sandbox(backend="rlimits")` (or GDPO_NEMO_SANDBOX_BACKEND=rlimits) is the explicit, loudly
warned opt-in to run without isolation. docs/sandbox.md states the guarantee.
"""

from gdpo_nemo.sandbox.limits import Limits
from gdpo_nemo.sandbox.pool import SandboxPool, default_workers, shared_pool
from gdpo_nemo.sandbox.protocol import STATUSES, Case, ExecResult, SandboxError
from gdpo_nemo.sandbox.runner import Sandbox, default_sandbox, run_cases, run_program
from gdpo_nemo.sandbox.worker import SandboxWorker

__all__ = [
    "STATUSES",
    "Case",
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "SandboxWorker",
    "default_sandbox",
    "default_workers",
    "run_cases",
    "run_program",
    "shared_pool",
]
