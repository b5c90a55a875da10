"""The CPU code paths torch takes, pinned to ones every x86-64 machine with AVX2 runs the same.

A float result depends on the order and width of its sums, and torch's CPU builds pick both
by the processor: ATen's vectorized kernels (softmax, norms, attention, elementwise math)
dispatch on the widest instruction set the CPU has (AVX2 or AVX512), and oneMKL, which does
every fp32 matmul of the x86 wheels, picks its own kernels by CPU family. Measured on this
project's machines: the quickstart's GRPO run on an AMD EPYC without AVX-512 left the run
made on an Intel Xeon after step 11, and a matmul-and-softmax probe gives other bits on an
AMD EPYC with AVX-512 than the same probe with ATen held to AVX2.

So every process of the local engine (`gdpo-nemo train`, `quickstart` and `lengths`, the study
runner and its run processes, and the engine's `prepare_device` on the CPU) pins, before
torch's first kernel runs (NeMo RL's engine does not: its numbers come from its GPU cluster):

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels, which every x86-64 CPU of the last decade
  has (a CPU without AVX2 falls back to ATen's default kernels, and the record says so);
- oneMKL's ``COMPATIBLE`` branch of its conditional numerical reproducibility (``MKL_CBWR``):
  oneMKL refuses its AVX2 and AVX512 branches on non-Intel processors (`mkl_cbwr_set` returns
  "unsupported branch" on AMD, measured here), and its COMPATIBLE branch is the one it gives
  the same results for on Intel and non-Intel processors. It is also the slow one:
  benchmarks/bench_cpu_pins.py measures what each pin costs;
- ``ONEDNN_MAX_CPU_ISA=AVX2`` for oneDNN's kernels, for the same reason as ATen's.

Under COMPATIBLE, oneMKL's vector math (torch's ``sqrt``, ``exp``, ``sin``, ... on CPU tensors)
runs its SSE2 kernels, and those of ``sqrt``, ``log2``, ``log10``, ``tan``, ``atan``, ``asin``
and ``acos`` (float64 ``log`` too) start from ``rcpps``/``rsqrtps``, approximate instructions
with other bits on Intel and AMD: the pins cannot make those alike, so a run's numbers must not
call them on CPU tensors (the local engine's AdamW is torch's fused kernel for that reason:
`gdpo_nemo.engines.local.optimizer.kernel_options`).

``GDPO_NEMO_CPU_NUMERICS=native`` leaves torch's own choices (faster on some machines, same
numbers only on the same kind of CPU). `state()` reports what is in effect in this process,
and provenance records it with every run, so a run made under other code paths is named by
`gdpo-nemo report`.

This module imports nothing heavy: `pin()` sets the environment (inherited by child
processes) and, when torch is already loaded, sets oneMKL's branch through its C API before
its first call.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import warnings
from pathlib import Path

from gdpo_nemo.errors import UserError

MODE_ENV = "GDPO_NEMO_CPU_NUMERICS"
MODES = ("pinned", "native")
ATEN_CAPABILITY = "avx2"
# oneMKL's branch codes (mkl_cbwr.h: MKL_CBWR_AUTO = 2, MKL_CBWR_COMPATIBLE = 3, ...).
MKL_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2",
                9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}
MKL_PINNED = 3  # COMPATIBLE
MKL_BRANCH_FIELD = 1  # MKL_CBWR_BRANCH: ask mkl_cbwr_get for the branch
PINNED_ENV = {"ATEN_CPU_CAPABILITY": ATEN_CAPABILITY, "MKL_CBWR": MKL_BRANCHES[MKL_PINNED],
              "ONEDNN_MAX_CPU_ISA": "AVX2"}


def mode() -> str:
    """``pinned`` (default) or ``native``, from GDPO_NEMO_CPU_NUMERICS; ValueError naming the
    variable and the accepted values otherwise."""
    value = os.environ.get(MODE_ENV, "pinned").strip().lower() or "pinned"
    if value not in MODES:
        raise UserError(f"{MODE_ENV}={os.environ[MODE_ENV]!r}: expected one of {list(MODES)}")
    return value


@functools.lru_cache(maxsize=1)
def _mkl():
    """oneMKL's service library as linked into torch (the x86 wheels carry it statically in
    libtorch_cpu), or None where this torch has none (ARM, a build with another BLAS)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    library = Path(spec.submodule_search_locations[0]) / "lib" / "libtorch_cpu.so"
    try:
        lib = ctypes.CDLL(str(library))
        get, set_ = lib.mkl_serv_cbwr_get, lib.mkl_serv_cbwr_set
    except (OSError, AttributeError):
        return None
    get.argtypes, get.restype = [ctypes.c_int], ctypes.c_int
    set_.argtypes, set_.restype = [ctypes.c_int], ctypes.c_int
    return get, set_


def pin() -> str:
    """Pin this process (and the processes it starts) to the AVX2 / oneMKL-COMPATIBLE code
    paths, unless GDPO_NEMO_CPU_NUMERICS=native; the mode. Call it before torch runs its first
    kernel: once ATen has chosen its kernels, or oneMKL has run, the choice stays, and
    `state()` (so the run's provenance) shows which one holds."""
    chosen = mode()
    if chosen == "native":
        return chosen
    os.environ.update(PINNED_ENV)
    if "torch" in sys.modules:  # oneMKL read MKL_CBWR at its load: set the branch directly
        mkl = _mkl()
        if mkl is not None and mkl[0](MKL_BRANCH_FIELD) != MKL_PINNED and mkl[1](MKL_PINNED) != 0:
            warnings.warn(f"oneMKL already ran in this process under branch {mkl_branch()}: its matmuls are not"
                          " pinned here (start the process through gdpo-nemo, or call"
                          " gdpo_nemo.runs.cpu_pins.pin() before torch's first operation)", stacklevel=2)
    return chosen


def mkl_branch() -> str | None:
    """The oneMKL branch in effect (``COMPATIBLE``, ``AUTO``, ...), None without oneMKL."""
    mkl = _mkl()
    if mkl is None:
        return None
    code = mkl[0](MKL_BRANCH_FIELD)
    return MKL_BRANCHES.get(code, str(code))


def state() -> dict:
    """What decides this process's CPU code paths now: {"cpu_capability": ATen's kernels
    (AVX2, AVX512, DEFAULT, ...), "mkl_branch": oneMKL's branch, "cpu_numerics": the mode}.
    Two processes with equal states compute the same bits for the same work on any CPU that
    has these instructions."""
    import torch

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "mkl_branch": mkl_branch(),
            "cpu_numerics": mode()}


def is_pinned(numbers: dict) -> bool:
    """Whether a numerics record (`provenance.numerics`) was made under the pins in full. A
    torch without oneMKL (another BLAS picks its own kernels by CPU) is not: its numbers hold
    on that kind of CPU only."""
    return (numbers.get("cpu_numerics") == "pinned" and numbers.get("cpu_capability") == ATEN_CAPABILITY.upper()
            and numbers.get("mkl_branch") == MKL_BRANCHES[MKL_PINNED])
