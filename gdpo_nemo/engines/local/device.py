"""Where the local engine computes, and in which precision (`gdpo.local.device`, `dtype`, `autocast`).

- device: ``cpu``, ``cuda`` (the current CUDA device) or ``auto`` (CUDA when torch sees one,
  else the CPU). The model, the KV cache, the sampling generator and every batch tensor live
  there; data order and decoding for the rewards stay on the host.
- dtype: the dtype of the weights (and so of AdamW's state): ``float32`` (default) or
  ``bfloat16``.
- autocast: ``null`` (default) or ``bfloat16``: mixed precision, fp32 weights and optimizer
  with the forward passes' matmuls in bf16 under ``torch.autocast`` (what TRL's and HF
  Trainer's ``bf16=True`` do). Works on CUDA and on CPUs with bf16 kernels.

Whatever the two dtypes, the numerics that decide the update stay fp32: sampling
probabilities, token logprobs (log_softmax of fp32 logits), ratios, advantages and the loss.

Determinism: a CPU run is bit-identical for a seed. On CUDA, `deterministic` (default on)
turns on ``torch.use_deterministic_algorithms`` (warn-only for ops with no deterministic
kernel) and cuBLAS's fixed workspace, so same-seed runs on the same GPU and software agree.

Attention on CUDA: the cuDNN backend of ``scaled_dot_product_attention`` is switched off
(`avoid_cudnn_attention`). With a padding mask, its backward returns NaN gradients on Hopper
GPUs in torch 2.11 for some sequence lengths (pytorch/pytorch#196678: a query row whose
logsumexp is below -88.7, which a fully masked left-padding row always is); on an H100 this
corrupted the weights of 4 of the GPU study's 6 tool-calling runs within 12 steps. Flash,
memory-efficient and math attention remain, and `update_policy` skips any update whose
gradient is not finite.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import torch

from gdpo_nemo.errors import UserError
from gdpo_nemo.runs import cpu_pins

DEVICES = ("cpu", "cuda", "auto")
WEIGHT_DTYPES = ("float32", "bfloat16")
AUTOCAST_DTYPES = (None, "bfloat16")
# cuBLAS needs a fixed workspace for reproducible matmuls (CUDA docs, "Results reproducibility").
CUBLAS_WORKSPACE = ":4096:8"


def resolve_device(name: str, key: str = "gdpo.local.device") -> torch.device:
    """``cpu`` | ``cuda`` | ``auto`` -> a torch.device; ValueError naming `key` when CUDA is
    asked for and torch sees none."""
    if name not in DEVICES:
        raise UserError(f"{key}={name!r}: expected one of {list(DEVICES)}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError(f"{key}='cuda' but torch sees no CUDA device (torch {torch.__version__}): use 'cpu' or 'auto'")
    return torch.device(name)


def weight_dtype(name: str, key: str = "gdpo.local.dtype") -> torch.dtype:
    if name not in WEIGHT_DTYPES:
        raise UserError(f"{key}={name!r}: expected one of {list(WEIGHT_DTYPES)}")
    return getattr(torch, name)


def autocast(device: torch.device, name: str | None, key: str = "gdpo.local.autocast"):
    """A context manager running the forward passes in `name`'s dtype on `device` (a no-op
    context for null)."""
    if name not in AUTOCAST_DTYPES:
        raise UserError(f"{key}={name!r}: expected one of {list(AUTOCAST_DTYPES)}")
    if name is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, name))


def make_deterministic(device: torch.device) -> None:
    """Ask CUDA for reproducible kernels (see the module docstring); nothing to do on the CPU.

    Must run before the process's first cuBLAS call for the workspace setting to apply."""
    if device.type != "cuda":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.use_deterministic_algorithms(True, warn_only=True)


# What `avoid_cudnn_attention` leaves on; part of a CUDA run's numerics (provenance.numerics).
CUDA_ATTENTION_BACKENDS = "flash,efficient,math"


def attention_backends(device: torch.device) -> str | None:
    """The attention kernels a run on `device` allows, for its numerics record: None on the
    CPU (torch picks as it always has)."""
    return CUDA_ATTENTION_BACKENDS if device.type == "cuda" else None


def prepare_device(local: dict) -> torch.device:
    """`gdpo.local.device` resolved and set up for this process, before its first CUDA work:
    reproducible kernels when `gdpo.local.deterministic`, no cuDNN attention; on the CPU the
    code paths every x86-64 machine with AVX2 runs alike (gdpo_nemo.runs.cpu_pins; a no-op
    when the process's entry pinned them already)."""
    device = resolve_device(local["device"])
    if device.type == "cpu":
        cpu_pins.pin()
    if local["deterministic"]:
        make_deterministic(device)
    avoid_cudnn_attention(device)
    return device


def avoid_cudnn_attention(device: torch.device) -> None:
    """Turn off cuDNN's attention kernels on CUDA (see the module docstring); nothing to do on
    the CPU. Process-wide; before the first forward pass of the process."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


@contextlib.contextmanager
def torch_threads(count: int | None):
    """Run the block with `count` torch CPU threads (None: leave the count as it is), and
    restore the previous count after it: float reductions depend on the count, so whatever
    is cached runs under a known one."""
    previous = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if count:
            torch.set_num_threads(previous)


def sampling_generator(device: torch.device, seed: int) -> torch.Generator:
    """The seeded generator sampling draws from, on `device` (torch.multinomial needs its
    generator on the probabilities' device)."""
    return torch.Generator(device=device).manual_seed(seed)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so a wall-clock timer read next covers them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_metrics(device: torch.device) -> dict:
    """``{"memory/gpu_peak_allocated_mb", "memory/gpu_peak_reserved_mb"}`` since the last
    `reset_peak_memory` (NeMo RL's peak_memory_* in MB); empty off CUDA."""
    if device.type != "cuda":
        return {}
    mib = 1024 ** 2
    return {
        "memory/gpu_peak_allocated_mb": torch.cuda.max_memory_allocated(device) / mib,
        "memory/gpu_peak_reserved_mb": torch.cuda.max_memory_reserved(device) / mib,
    }
