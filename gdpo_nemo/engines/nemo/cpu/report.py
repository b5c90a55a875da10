"""What the CPU path records and prints of each step: whose estimator ran, on which rewards.

`AdvantageRecorder.install()` wraps NeMo RL's ``_create_advantage_estimator`` (after our
plugin's own hook, so it sees whichever estimator the run really gets: NeMo RL's class or
gdpo_nemo's) and, at every ``compute_advantage`` call, appends to
``<run dir>/advantages.jsonl`` one record per training step::

    {"step": 2, "estimator": "nemo_rl.algorithms.advantage_estimator.GDPOAdvantageEstimator",
     "ours": false, "group_ids": [0, 0, 1, 1], "components": {"correctness": [...], ...},
     "advantages": [...]}        # per sample: the value on its first response token

and prints one line of it. With NeMo RL's own ``train_data_step<N>.jsonl`` (the advantages
it trained on) this lets anyone recompute a step's advantages from its logged rewards.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Callable, TextIO

import torch

__all__ = ["ADVANTAGES_FILE", "AdvantageRecorder", "read_advantages"]

ADVANTAGES_FILE = "advantages.jsonl"
_RECORDER = "__gdpo_nemo_recorder__"
_HOOK = "__gdpo_nemo_hook__"  # plugin.py's mark: its re-install unwraps through this recorder too


def read_advantages(run_dir) -> dict[int, dict]:
    """{step: record} of ``<run_dir>/advantages.jsonl`` (a later record of a step wins)."""
    path = Path(run_dir) / ADVANTAGES_FILE
    records = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                records[int(record["step"])] = record
    return records


def _per_sample(advantages: torch.Tensor, mask) -> list[float | None]:
    """Each sample's advantage: its value on the first token of `mask` [B, T] (None when the
    sample has no response token); `advantages` [B] or [B, T]."""
    advantages = advantages.detach().to("cpu", torch.float64)
    if advantages.dim() == 1:
        return [float(a) for a in advantages]
    mask = torch.as_tensor(mask).detach().to("cpu").bool() if mask is not None else torch.ones_like(advantages, dtype=torch.bool)
    values = []
    for row, keep in zip(advantages, mask):
        where = torch.nonzero(keep).flatten()
        values.append(float(row[where[0]]) if len(where) else None)
    return values


def _short(values: list, limit: int = 8) -> str:
    shown = ", ".join("-" if v is None else f"{v:+.3f}" for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


class AdvantageRecorder:
    """Records and prints each training step's estimator call (see the module docstring).
    `first_step`: the step number of the first call (resumed runs start after their
    checkpoint); records of later steps already in the file are dropped (they belong to the
    run that was interrupted)."""

    def __init__(self, run_dir, *, first_step: int = 1, out: TextIO | None = None):
        self.path = Path(run_dir) / ADVANTAGES_FILE
        self.step = int(first_step)
        self.out = out
        self._lock = threading.Lock()
        kept = [r for s, r in sorted(read_advantages(run_dir).items()) if s < self.step]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".jsonl.tmp")
        temporary.write_text("".join(json.dumps(r) + "\n" for r in kept))
        temporary.replace(self.path)

    def install(self) -> None:
        """Wrap ``nemo_rl.algorithms.grpo._create_advantage_estimator`` (re-installing
        replaces an earlier recorder)."""
        import nemo_rl.algorithms.grpo as grpo_module

        create = grpo_module._create_advantage_estimator
        if getattr(create, _RECORDER, False):
            create = getattr(create, _HOOK)

        def create_and_record(master_config):
            estimator = create(master_config)
            self._watch(estimator)
            return estimator

        setattr(create_and_record, _RECORDER, True)
        setattr(create_and_record, _HOOK, create)
        grpo_module._create_advantage_estimator = create_and_record

    def _watch(self, estimator) -> None:
        compute: Callable = estimator.compute_advantage
        kind = type(estimator)
        name = f"{kind.__module__}.{kind.__qualname__}"
        ours = kind.__module__.startswith("gdpo_nemo.")
        label = getattr(getattr(estimator, "settings", None), "estimator", None)

        def compute_and_record(prompt_ids, rewards, mask, *args, **kwargs):
            advantages = compute(prompt_ids, rewards, mask, *args, **kwargs)
            batch = kwargs.get("repeated_batch", args[0] if args else None)
            self.record(name, ours, label, prompt_ids, batch, advantages, mask)
            return advantages

        estimator.compute_advantage = compute_and_record

    def record(self, name, ours, label, prompt_ids, batch, advantages, mask) -> None:
        from gdpo_nemo.engines.nemo.estimators import group_ids_from_prompts, reward_components

        components = {k: [float(x) for x in v] for k, v in reward_components(batch or {}).items()}
        groups = [int(g) for g in group_ids_from_prompts(torch.as_tensor(prompt_ids).cpu())]
        values = _per_sample(advantages, mask)
        with self._lock:
            record = {"step": self.step, "estimator": name, "ours": ours, "label": label, "group_ids": groups,
                      "components": components, "advantages": values}
            with open(self.path, "a") as handle:
                handle.write(json.dumps(record) + "\n")
            step, self.step = self.step, self.step + 1
        if self.out is not None:
            whose = f"gdpo_nemo's {label!r}" if ours else f"NeMo RL's {name.rsplit('.', 1)[-1]}"
            means = ", ".join(f"{k} {sum(v) / len(v):.3f}" for k, v in components.items() if v)
            finite = [v for v in values if v is not None and math.isfinite(v)]
            spread = f"{min(finite):+.3f}..{max(finite):+.3f}" if finite else "-"
            print(f"[step {step}] estimator: {whose} | rewards: {means} | {len(values)} samples in"
                  f" {len(set(groups))} groups | advantages {_short(values)} (range {spread})", file=self.out, flush=True)
