"""Run identity: the (experiment, task, model, algo, seed) tuple that names a run everywhere.

The same name is the run dir, the W&B run name, and the Slurm job name; the name without the
seed is the W&B group, so seeds of one configuration aggregate together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gdpo_nemo.errors import UserError

_SEP = "__"
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True, order=True)
class RunId:
    experiment: str
    task: str
    model: str
    algo: str
    seed: int

    def __post_init__(self) -> None:
        for field in ("experiment", "task", "model", "algo"):
            value = getattr(self, field)
            if not isinstance(value, str) or not _PART.match(value) or _SEP in value:
                raise UserError(
                    f"run id {field}={value!r} is not allowed: use letters, digits, '.', '_', '+', '-'"
                    f" (no '{_SEP}', not starting with a symbol)"
                )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise UserError(f"run id seed={self.seed!r} must be a non-negative int")

    @property
    def group(self) -> str:
        """W&B group: every seed of one (experiment, task, model, algo)."""
        return _SEP.join((self.experiment, self.task, self.model, self.algo))

    @property
    def name(self) -> str:
        """Run dir name, W&B run name and Slurm job name."""
        return f"{self.group}{_SEP}seed{self.seed}"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, name: str) -> "RunId":
        parts = name.split(_SEP)
        if len(parts) != 5 or not parts[4].startswith("seed") or not parts[4][4:].isdigit():
            raise UserError(
                f"{name!r} is not a run id: expected experiment__task__model__algo__seed<N>"
            )
        return cls(parts[0], parts[1], parts[2], parts[3], int(parts[4][4:]))

    @classmethod
    def from_config(cls, config) -> "RunId":
        """The run id of a resolved run config (its `gdpo` block and `grpo.seed`)."""
        g = config["gdpo"]
        return cls(g["experiment"], g["task"], g["model_tag"], g["algo"], int(config["grpo"]["seed"]))
