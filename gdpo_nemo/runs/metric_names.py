"""The one spelling of every metric key both engines write and the analysis reads.

Keys follow NeMo RL: a split prefix (``train/``, ``validation/``; ``timing/<split>/`` for
seconds) and a name. NeMo RL's own logger adds the split prefix to what a step returns, so the
NeMo RL plugin writes the bare names (`reward("format")` -> ``reward/format``) and the local
engine and the readers the prefixed ones (`train(reward("format"))` -> ``train/reward/format``).
Families of one key per reward component (``reward/<name>``, ``adv/zero_std_frac/<name>``,
``adv/gap/<name>``) are read back with `component` and `components`. Imports nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

TRAIN = "train"
VALIDATION = "validation"

REWARD = "reward"  # the sum of the weighted components (NeMo RL's total); a family per component
FILTERED_REWARD = "filtered_reward"  # NeMo RL's rewards of the samples kept by dynamic sampling
ZERO_STD_FRAC = "adv/zero_std_frac"  # per component: share of groups where it is constant
DISTINCT_GROUPS = "adv/distinct_groups"  # paper Fig. 3: distinct advantage tuples
COLLAPSED_FRAC = "adv/collapsed_frac"  # groups where GRPO merges distinct reward combinations
GAP = "adv/gap"  # per component: advantage gap between its levels
EXCEED_RATE = "exceed_rate"
ACCURACY = "accuracy"
AVG_LENGTH = "avg_length"
LOSS = "loss"
DATA_ERRORS = "data_errors"
GRAD_NORM = "grad_norm"
LR = "lr"
TOTAL_STEP_TIME = "total_step_time"
TOTAL_STEP_CPU_TIME = "total_step_cpu_time"
TOTAL_VALIDATION_TIME = "total_validation_time"


def name(family: str, component: str) -> str:
    """``<family>/<component>``: one key of a per-component family (bare)."""
    return f"{family}/{component}"


def reward(component: str | None = None) -> str:
    """``reward`` (the total), or ``reward/<component>``."""
    return REWARD if component is None else name(REWARD, component)


def zero_std_frac(component: str) -> str:
    return name(ZERO_STD_FRAC, component)


def gap(component: str) -> str:
    return name(GAP, component)


def key(split: str, bare: str) -> str:
    """``<split>/<bare>``: a bare name as logged under a split."""
    return f"{split}/{bare}"


def train(bare: str) -> str:
    """``train/<bare>``."""
    return key(TRAIN, bare)


def validation(bare: str) -> str:
    """``validation/<bare>``."""
    return key(VALIDATION, bare)


def timing(split: str, bare: str) -> str:
    """``timing/<split>/<bare>``: seconds."""
    return f"timing/{split}/{bare}"


def component(metric: str, family: str) -> str | None:
    """The component a key of `family` names (``train/reward/format`` with family
    ``train/reward`` -> ``format``), None for any other key (the family's total included)."""
    prefix = f"{family}/"
    return metric[len(prefix):] if metric.startswith(prefix) and len(metric) > len(prefix) else None


def components(metrics: Iterable[str], family: str) -> list[str]:
    """The components of `family` among `metrics`, in their order, each once."""
    return list(dict.fromkeys(c for c in (component(m, family) for m in metrics) if c is not None))


def prefix(split: str) -> str:
    """``<split>/``: what every key of `split` (TRAIN, VALIDATION) starts with."""
    return f"{split}/"


def is_split(metric: str, split: str) -> bool:
    """Whether `metric` is one of `split`'s keys (``train/...``)."""
    return metric.startswith(prefix(split))
