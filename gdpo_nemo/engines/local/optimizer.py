"""The local engine's optimizer and LR schedule, from `policy.optimizer` and `policy.scheduler`
(NeMo RL's shapes): AdamW / Adam, stepped once per global batch, and torch's LR schedulers,
stepped once per GRPO step (trainer.py)."""

from __future__ import annotations

import torch

from gdpo_nemo.errors import UserError


def kernel_options(model, kwargs: dict) -> dict:
    """`kwargs` plus ``fused=True`` when the model's parameters are on the CPU and `kwargs`
    choose no implementation (``fused`` or ``foreach``).

    Why: torch's default Adam(W) on CPU tensors is its per-tensor loop, whose
    ``exp_avg_sq.sqrt()`` runs oneMKL's vector math. Under the CPU pins (oneMKL's COMPATIBLE
    branch, gdpo_nemo.runs.cpu_pins) that is oneMKL's SSE2 square root kernel, which starts
    from ``rsqrtps``, an approximate instruction whose bits differ between Intel and AMD
    processors: the same warm start gave other weights on an Intel Xeon than on an AMD EPYC.
    The fused CPU kernel is ATen's own (its square root is the exact ``sqrtps``, its kernels
    pinned to AVX2 like the rest of ATen's), the same bits on any x86-64 CPU with AVX2."""
    kwargs = dict(kwargs)
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    if on_cpu and "fused" not in kwargs and "foreach" not in kwargs:
        kwargs["fused"] = True
    return kwargs


def build_optimizer(model, policy: dict):
    """`policy.optimizer`: torch.optim.AdamW or torch.optim.Adam (the two names the config
    check accepts) over the model's parameters with `kwargs` (lr, weight_decay, betas, eps),
    torch's fused kernel on the CPU unless `kwargs` choose one (`kernel_options`)."""
    name = policy["optimizer"]["name"]
    kwargs = kernel_options(model, policy["optimizer"]["kwargs"])
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    cls = torch.optim.AdamW if name == "torch.optim.AdamW" else torch.optim.Adam
    try:
        return cls(model.parameters(), **kwargs)
    except TypeError as err:
        raise UserError(f"policy.optimizer.kwargs={kwargs}: {err}") from None


def build_scheduler(optimizer, spec):
    """NeMo RL's `policy.scheduler`: a list of `{name, kwargs}` entries (torch.optim.lr_scheduler
    classes) plus an optional `{milestones: [...]}` entry that chains them with SequentialLR;
    a single `{name, kwargs}` mapping; or null (constant LR). Stepped once per GRPO step."""
    if spec is None:
        return None
    entries = [spec] if isinstance(spec, dict) else list(spec)
    milestones = None
    schedulers = []
    for index, entry in enumerate(entries):
        where = f"policy.scheduler[{index}]"
        if not isinstance(entry, dict):
            raise UserError(f"{where}={entry!r}: expected {{name, kwargs}} or {{milestones}}")
        if "milestones" in entry and "name" not in entry:
            milestones = list(entry["milestones"])
            continue
        name = entry.get("name", "")
        prefix = "torch.optim.lr_scheduler."
        cls = getattr(torch.optim.lr_scheduler, name[len(prefix):], None) if name.startswith(prefix) else None
        if cls is None:
            raise UserError(f"{where}.name={name!r}: expected a torch.optim.lr_scheduler class, e.g. "
                             "'torch.optim.lr_scheduler.LinearLR'")
        try:
            schedulers.append(cls(optimizer, **(entry.get("kwargs") or {})))
        except TypeError as err:
            raise UserError(f"{where}.kwargs: {err}") from None
    if not schedulers:
        return None
    if len(schedulers) == 1:
        return schedulers[0]
    if milestones is None or len(milestones) != len(schedulers) - 1:
        raise UserError(f"policy.scheduler: {len(schedulers)} schedulers need a {{milestones: [...]}} entry with "
                         f"{len(schedulers) - 1} values")
    return torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers, milestones)
