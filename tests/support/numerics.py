"""The CPU code paths the test suite runs on, and the environment of a user's run.

The suite's own SmolLM2 steps run on torch's native kernels (``GDPO_NEMO_CPU_NUMERICS=native``,
set by tests/conftest.py): the pins (gdpo_nemo.runs.cpu_pins) put every fp32 matmul on oneMKL's
COMPATIBLE branch, about twice the time of a SmolLM2 step (benchmarks/bench_cpu_pins.py), and
those tests compare nothing across machines. The tests of what a user's run computes by default
(the committed run regenerated, a study's provenance, the docs' commands, the pins themselves)
start their processes in `user_environment()`, where the pins hold as they do for a user.
"""

from __future__ import annotations

import os

from gdpo_nemo.runs import cpu_pins


def user_environment(base: dict | None = None) -> dict:
    """`base` (default: this process's environment) without the suite's numerics choice: the
    processes started with it pin their CPU code paths as a user's `gdpo-nemo` does."""
    env = dict(os.environ if base is None else base)
    env.pop(cpu_pins.MODE_ENV, None)
    return env
