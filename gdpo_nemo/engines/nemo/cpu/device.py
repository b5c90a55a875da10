"""CUDA -> CPU for NeMo RL's DTensor policy worker, in the worker's own process.

NeMo RL's DTensor policy workers (v2 with nemo_automodel, and v1) assume CUDA with no
option to turn it off. Inside a CPU worker, `install()` replaces a few torch / Ray / NeMo
RL functions once, and `on_cpu(method)` runs each worker method under `CudaAsCpu`, a
torch function mode that sends every torch call naming device "cuda" to the CPU. FSDP2,
DTensor, ``set_model_state_dict`` and torch's distributed checkpoint run on a gloo CPU
mesh as they are, so nothing else of the worker is changed.

`CALL_SITES` names every CUDA call site on the training-step path of the pinned commit
(path, line, the text found on that line, and what covers it); tests/nemo_tier checks
each against NeMo RL's source, so a new pin that moves or changes one fails loudly.
Nothing here is used on a GPU cluster: `gdpo_nemo.engines.nemo.cpu` is only the CPU path.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Callable, NamedTuple

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["CALL_SITES", "CallSite", "CudaAsCpu", "install", "installed_patches", "on_cpu"]


class CallSite(NamedTuple):
    """One CUDA-only call of NeMo RL at the pin: `path` (under the checkout), `line`
    (1-based), `text` (a substring of that line) and `covered_by` (which patch of this
    module makes it run on a CPU)."""

    path: str
    line: int
    text: str
    covered_by: str


_V2 = "nemo_rl/models/policy/workers/dtensor_policy_worker_v2.py"
_V1 = "nemo_rl/models/policy/workers/dtensor_policy_worker.py"
_BASE = "nemo_rl/models/policy/workers/base_policy_worker.py"
_SETUP = "nemo_rl/models/automodel/setup.py"
_DATA = "nemo_rl/models/automodel/data.py"
_TRAIN = "nemo_rl/models/automodel/train.py"
_MODE = "CudaAsCpu"

CALL_SITES: tuple[CallSite, ...] = (
    # worker start
    CallSite(_V2, 251, "bind_to_gpu_numa(int(ray.get_gpu_ids()[0]))", "ray.get_gpu_ids, numa_utils.bind_to_gpu_numa"),
    CallSite(_SETUP, 452, 'backend = "nccl"', "torch.distributed.init_process_group"),
    CallSite(_SETUP, 453, "torch.distributed.init_process_group(backend=backend)", "torch.distributed.init_process_group"),
    CallSite(_SETUP, 507, "device_mesh, moe_mesh = create_device_mesh(", "torch.distributed.device_mesh.init_device_mesh"),
    CallSite(_SETUP, 734, "cuda.enable_cudnn_sdp(False)", "harmless on a CPU build (a flag)"),
    # train / get_logprobs
    CallSite(_V2, 199, 'torch.autocast(device_type="cuda", dtype=dtype)',
             "torch itself: CUDA autocast on a build without CUDA warns and disables itself (fp32 here)"),
    CallSite(_V2, 418, 'torch.tensor(data.size, device="cuda")', _MODE),
    CallSite(_V2, 472, "torch.cuda.empty_cache()", "torch.cuda.empty_cache"),
    CallSite(_V2, 476, 'data = data.to("cuda")', _MODE + " (BatchedDataDict.to -> Tensor.to)"),
    CallSite(_V2, 630, 'data.to("cuda")', _MODE),
    CallSite(_DATA, 233, 'torch.tensor([iterator_len], device="cuda")', _MODE),
    CallSite(_DATA, 276, 'input_ids = mb.get("input_ids").cuda()', _MODE + " (Tensor.cuda)"),
    CallSite(_DATA, 418, "torch.tensor([local_valid_seqs, local_valid_toks]).cuda()", _MODE + " (Tensor.cuda)"),
    CallSite(_TRAIN, 1119, 'torch.tensor(losses, device="cuda")', _MODE),
    CallSite(_TRAIN, 1132, "torch.cuda.get_device_name()", "torch.cuda.get_device_name"),
    CallSite(_V2, 401, 'wrap_with_nvtx_name("dtensor_policy_worker_v2/train")', "torch.cuda.nvtx.range_push/range_pop"),
    CallSite("nemo_rl/utils/nsys.py", 118, "torch.cuda.nvtx.range_push(name)", "torch.cuda.nvtx.range_push"),
    CallSite("nemo_rl/utils/nsys.py", 120, "torch.cuda.nvtx.range_pop()", "torch.cuda.nvtx.range_pop"),
    # prepare / offload around generation and training (colocated)
    CallSite(_V2, 996, "torch.cuda.synchronize()", "torch.cuda.synchronize"),
    CallSite(_V2, 1234, "self.move_to_cuda(self.model)", _MODE + " (nn.Module.to)"),
    CallSite(_V2, 1241, "torch.randn(1).cuda()", _MODE + " (Tensor.cuda)"),
    CallSite(_V2, 1267, 'self.move_optimizer_to_device("cuda")', _MODE),
    CallSite(_V2, 1300, "torch.cuda.memory_allocated()", "torch.cuda.memory_allocated/memory_reserved"),
    CallSite(_BASE, 51, "device = torch.cuda.current_device()", "torch.cuda.current_device"),
    CallSite(_BASE, 114, "torch.cuda.reset_peak_memory_stats()", "torch.cuda.reset_peak_memory_stats"),
    CallSite(_BASE, 184, "torch.cuda.current_device()", "ray.get_gpu_ids"),
    # the v1 worker (policy.dtensor_cfg._v2: false)
    CallSite(_V1, 230, "bind_to_gpu_numa(int(ray.get_gpu_ids()[0]))", "ray.get_gpu_ids, numa_utils.bind_to_gpu_numa"),
    CallSite(_V1, 262, 'init_process_group(backend="nccl")', "torch.distributed.init_process_group"),
    CallSite(_V1, 1013, "torch.cuda.get_device_name", "torch.cuda.get_device_name"),
)

_NON_CUDA_DEVICE = "cpu"


def _to_cpu(device):
    """`device` with every CUDA spelling ("cuda", "cuda:0", torch.device("cuda"), an
    ordinal) replaced by the CPU; anything else unchanged."""
    if isinstance(device, str) and device.startswith("cuda"):
        return _NON_CUDA_DEVICE
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device(_NON_CUDA_DEVICE)
    if isinstance(device, int) and not isinstance(device, bool):
        return _NON_CUDA_DEVICE
    return device


class CudaAsCpu(TorchFunctionMode):
    """Inside this mode, torch calls that name a CUDA device run on the CPU.

    Covers ``device=`` keywords (``torch.tensor``, ``torch.zeros``, ...), ``Tensor.to(device)``, ``Tensor.cuda()``,
    ``nn.Module.to(device)`` (through torch's ``_parse_to``), and pinned memory (dropped:
    pinning needs CUDA).
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda or func is torch.Tensor.pin_memory:
            return args[0]
        if "device" in kwargs:
            kwargs["device"] = _to_cpu(kwargs["device"])
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        if func in (torch.Tensor.to, torch._C._nn._parse_to) and args:
            first = 1 if func is torch.Tensor.to else 0
            if len(args) > first and not isinstance(args[first], (torch.dtype, torch.Tensor)):
                args = (*args[:first], _to_cpu(args[first]), *args[first + 1:])
        return func(*args, **kwargs)


_LOCK = threading.Lock()
_PATCHES: list[str] = []


def installed_patches() -> list[str]:
    """What `install()` replaced in this process, one line each (empty before it ran)."""
    return list(_PATCHES)


def install() -> list[str]:
    """Replace the process-wide CUDA entry points of `CALL_SITES` (idempotent); returns
    `installed_patches()`. Call it in the worker process before NeMo RL's worker runs."""
    with _LOCK:
        if _PATCHES:
            return list(_PATCHES)
        import ray
        import torch.distributed as dist
        import torch.distributed.device_mesh as device_mesh

        init_process_group = dist.init_process_group

        def gloo_process_group(*args, backend=None, **kwargs):
            if not args and not ({"init_method", "store"} & set(kwargs)) and os.environ.get("WORLD_SIZE") == "1":
                # One worker (the CPU path's): an in-memory store, no TCP port. NeMo RL picks the
                # master port by binding a random one of 1400-1999 and letting it go; with
                # several jobs on one node, another job took it before this bind (EADDRINUSE).
                kwargs.update(store=dist.HashStore(), rank=0, world_size=1)
            return init_process_group(*args, backend="gloo", **kwargs)

        dist.init_process_group = gloo_process_group
        _PATCHES.append("torch.distributed.init_process_group: any backend -> gloo (one worker: an in-memory store)")

        init_device_mesh = device_mesh.init_device_mesh

        def cpu_device_mesh(device_type, *args, **kwargs):
            return init_device_mesh(_to_cpu(device_type), *args, **kwargs)

        device_mesh.init_device_mesh = cpu_device_mesh
        _PATCHES.append("torch.distributed.device_mesh.init_device_mesh: cuda -> cpu")

        replacements: dict[str, Callable] = {
            "synchronize": lambda *a, **k: None,
            "empty_cache": lambda *a, **k: None,
            "current_device": lambda: 0,
            "get_device_name": lambda *a, **k: "cpu",
            "mem_get_info": lambda *a, **k: (0, 0),
            "memory_allocated": lambda *a, **k: 0,
            "memory_reserved": lambda *a, **k: 0,
            "max_memory_allocated": lambda *a, **k: 0,
            "max_memory_reserved": lambda *a, **k: 0,
            "reset_peak_memory_stats": lambda *a, **k: None,
        }
        for name, replacement in replacements.items():
            setattr(torch.cuda, name, replacement)
            _PATCHES.append(f"torch.cuda.{name}: CPU stand-in")
        torch.cuda.nvtx.range_push = lambda *a, **k: None
        torch.cuda.nvtx.range_pop = lambda *a, **k: None
        _PATCHES.append("torch.cuda.nvtx.range_push/range_pop: no-ops")

        ray.get_gpu_ids = lambda: [0]
        _PATCHES.append("ray.get_gpu_ids: [0] (the worker's one virtual device)")
        import nemo_rl.distributed.numa_utils as numa_utils

        numa_utils.bind_to_gpu_numa = lambda *a, **k: None
        _PATCHES.append("nemo_rl.distributed.numa_utils.bind_to_gpu_numa: no-op")
        _PATCHES.append(f"{_MODE}: torch function mode around every worker method")
        return list(_PATCHES)


def on_cpu(method: Callable) -> Callable:
    """`method` run inside `CudaAsCpu` (torch function modes hold per thread, and Ray may
    call an actor's methods on another thread than the one that built it)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with CudaAsCpu():
            return method(*args, **kwargs)

    return wrapper
