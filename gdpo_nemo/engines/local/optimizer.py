"""The local engine's optimizer and LR schedule, from `policy.optimizer` and `policy.scheduler`
(NeMo RL's shapes): AdamW / Adam, stepped once per global batch, and torch's LR schedulers,
stepped once per GRPO step (trainer.py)."""

from __future__ import annotations

import torch

from gdpo_nemo.errors import UserError


def build_optimizer(model, policy: dict):
    """`policy.optimizer`: torch.optim.AdamW or torch.optim.Adam (the two names the config
    check accepts) over the model's parameters with `kwargs` (lr, weight_decay, betas, eps)."""
    name = policy["optimizer"]["name"]
    kwargs = dict(policy["optimizer"]["kwargs"])
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
