"""The estimators' options: one frozen type, `AdvantageOptions`, that `compute_advantages`
takes, the run config's gdpo block fills (`AdvantageOptions.from_gdpo`) and the config
validation checks (`AdvantageOptions.problems`). Torch-free: composing and validating a
config imports no torch.

Numerical semantics of each option: gdpo_nemo.estimators (package docstring) and
docs/estimators.md.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from gdpo_nemo.errors import UserError
from gdpo_nemo.checks import boolean, number, one_of

__all__ = [
    "BATCH_NORMS",
    "PRESETS",
    "RESIDUE_EPSILONS",
    "SCALE_REWARDS",
    "SINGLE_SAMPLE_GROUPS",
    "AdvantageOptions",
    "weights_problem",
]

# When is a group "one value" (no signal, advantage exactly 0)? Decided from the rewards
# themselves (gdpo_nemo.estimators.groups.constant_within): a reward as given is exact, so a
# group of rewards is constant only when they are equal, whatever dtype they came in
# (bfloat16 3.0 and 3.03125 differ, as they do in float32; 1e6 and 1e6 + 1 in float64).
# Only a value this package summed (GRPO's weighted sum of K components, in float64, each
# less its group's smallest) carries residue of its own arithmetic: sums within
# RESIDUE_EPSILONS * (2K + 1) float64 epsilons of the group's largest sum of |terms| are one
# value (0.1 + 0.2 and 0.3 + 0.0 are).
# `AdvantageOptions.residue_tolerance` replaces that tolerance everywhere.
RESIDUE_EPSILONS = 2.0
SCALE_REWARDS = ("group", "batch", "none")
SINGLE_SAMPLE_GROUPS = ("raise", "zero")
# GDPO's batch norm per sample, or per token (verl's masked_whiten; the engines then pass a
# token mask). A gdpo-block key, not an option of the arithmetic: the token mask decides.
BATCH_NORMS = ("sample", "token")

PRESETS: dict[str, dict[str, object]] = {
    # NeMo RL main (GDPOAdvantageEstimator + calculate_baseline_and_std_per_prompt).
    "nemo_rl": {"std_ddof": 1, "eps": 1e-6, "batch_norm_eps": 0.0, "single_sample_groups": "zero"},
    # TRL >= 0.27, multi_objective_aggregation="normalize_then_sum".
    "trl": {"std_ddof": 1, "eps": 1e-4, "batch_norm_eps": 1e-4},
    # The GDPO authors' verl: group eps 1e-6, BN per token by masked_whiten (rsqrt(var + 1e-8)).
    "verl": {"std_ddof": 1, "eps": 1e-6, "batch_norm_eps": 1e-8},
}


def _real_value(value: Any) -> float | None:
    """`value` as a float when it is one finite real scalar (a Python, numpy or 0-d torch
    number; never a bool, which is a flag, not a weight), else None."""
    if isinstance(value, numbers.Real) and type(value).__name__ not in ("bool", "bool_"):
        number = float(value)
    elif getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        item = value.item()  # a 0-d torch tensor or numpy array
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            return None
        number = float(item)
    else:
        return None
    return number if math.isfinite(number) else None


def _is_number(value: Any) -> bool:
    return _real_value(value) is not None


def weights_problem(weights: Any) -> str | None:
    """None for a usable reward_weights value ({name: finite real scalar: a Python, numpy or
    0-d torch number} or None), else what is accepted. The one check of its form; the names are checked against the components where
    they are known (compute_advantages, the config's reward set)."""
    if weights is None:
        return None
    if not isinstance(weights, Mapping) or not all(isinstance(name, str) for name in weights):
        return f"a mapping {{component: number}} or null, got {weights!r}"
    bad = {name: value for name, value in weights.items() if not _is_number(value)}
    if bad:
        return f"finite numbers as weights, got {bad}"
    return None


_SAME = object()  # an option whose run-config default is its own default


def option(default: Any, meaning: str, source: str, check, *, config_default: Any = _SAME) -> Any:
    """An AdvantageOptions field declared once with what every other place needs of it: its
    `meaning` and `source` (the run config's documentation, docs/interfaces.md), its `check`
    (config.checks: None for a good value, else what is accepted; `problems()` and the gdpo
    block's validation both use it) and its default in a run config's gdpo block
    (`config_default`; null there means "the preset's value")."""
    return field(default=default, metadata={
        "meaning": meaning, "source": source, "check": check,
        "config_default": default if config_default is _SAME else config_default})


def _weights_check(value: Any) -> str | None:
    problem = weights_problem(value)
    return None if problem is None else problem.split(", got")[0]


@dataclass(frozen=True)
class AdvantageOptions:
    """Every option of the estimators but the estimator itself. Defaults are NeMo RL's
    numerics (the cluster engine) with a group of one sample refused; `resolve` applies a
    preset, `from_gdpo` reads a run config's gdpo block. Each field is declared once
    (`option`): the gdpo block's keys, defaults, documentation and checks are derived from
    these (gdpo_nemo.config.settings), so adding an option is one field here."""

    preset: str | None = option(
        None, "whose numerics the null options below take (nemo_rl, trl, verl; null: NeMo RL's defaults); needed by"
        " strict", "NeMo RL / TRL / verl", one_of(*PRESETS, None), config_default="nemo_rl")
    reward_weights: Mapping[str, float] | None = option(
        None, "{component: weight} (components not named weigh 1; null: all 1)", "paper sec. 3.2", _weights_check)
    leave_one_out: bool = option(
        False, "baseline and std from the other samples of the group", "NeMo RL use_leave_one_out_baseline (RLOO)",
        boolean)
    std_ddof: int = option(
        1, "delta degrees of freedom of every std (group and batch): 1 Bessel, 0 population; null: the preset's (1)",
        "all peers: 1", one_of(0, 1), config_default=None)
    eps: float = option(
        PRESETS["nemo_rl"]["eps"], "added to a non-zero group std before dividing; null: the preset's (nemo_rl 1e-6, trl 1e-4, verl 1e-6)",
        "NeMo RL / TRL / verl", number(0.0), config_default=None)
    batch_norm_eps: float = option(
        PRESETS["nemo_rl"]["batch_norm_eps"], "GDPO's batch norm: per sample added to the batch std, per token inside the square root of the"
        " variance; null: the preset's (nemo_rl 0, trl 1e-4, verl 1e-8)", "NeMo RL / TRL / verl masked_whiten",
        number(0.0), config_default=None)
    scale_rewards: str = option(
        "group", "what the group-centred reward is divided by: group std, batch std (grpo only), or none",
        "TRL scale_rewards; NeMo RL normalize_rewards false = none", one_of(*SCALE_REWARDS))
    single_sample_groups: str = option(
        "raise", "a group of one sample: raise, or zero advantage; null: the preset's (nemo_rl zero, else raise)",
        "NeMo RL", one_of(*SINGLE_SAMPLE_GROUPS), config_default=None)
    strict: bool = option(
        False, "reproduce the preset's peer bit for bit (its float32 formulas and residue); needs a preset",
        "docs/estimators.md", boolean)
    # At most 0.5: residue is a small fraction of the values, and the dense paths look at a
    # group's max and min only where its std is within 2 x tolerance x |its mean|, which
    # bounds the std of every constant group only while the tolerance is below about 0.64.
    residue_tolerance: float | None = option(
        None, "relative tolerance under which a group's values are one value (max - min <= tolerance x the group's"
        " largest sum of |terms|: |r| for a reward as given, |w r| for GRPO's one weighted reward, sum_k |w_k (r_k -"
        " the group's smallest r_k)| for GRPO's weighted sum of K >= 2); null: exact for a reward as given, 2 (2K + 1)"
        " float64 epsilons for GRPO's sum of K >= 2; 0: exact equality only; at most 0.5",
        "ours (docs/estimators.md)", number(0.0, 0.5, nullable=True))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(item.name for item in fields(cls))

    @classmethod
    def unchecked(cls, preset: str | None = None, **given: Any) -> "AdvantageOptions":
        """The options of `preset` (its numerics; None or an unknown name: the defaults) with
        `given` (None = keep), not checked: `problems()` says what is wrong with them."""
        numerics = PRESETS.get(preset, {}) if isinstance(preset, str) else {}
        return cls(preset=preset, **numerics).updated(**given)

    def updated(self, **given: Any) -> "AdvantageOptions":
        """These options with `given` (None = keep), not checked; a TypeError for a name that
        is not an option."""
        unknown = sorted(set(given) - set(self.names()))
        if unknown:
            raise TypeError(f"unknown advantage option(s) {unknown}; the options are {list(self.names())}")
        return replace(self, **{name: value for name, value in given.items() if value is not None})

    @classmethod
    def resolve(cls, preset: str | None = None, **given: Any) -> "AdvantageOptions":
        """`unchecked(preset, **given)`, checked: a ValueError naming every bad option, a
        TypeError for an unknown name."""
        return cls.unchecked(preset, **given).checked()

    @staticmethod
    def given_by_gdpo(gdpo: Mapping, *, nemo_engine: bool = False) -> dict[str, Any]:
        """The options a run config's gdpo block names (its nulls: the preset's), by field.

        nemo_engine: with no preset and single_sample_groups null, a group of one sample gets
        0 as under NeMo RL's native estimators (the local engine raises: usually wrong groups).
        """
        given = {name: gdpo.get(name) for name in AdvantageOptions.names()}
        if given["reward_weights"] is not None and isinstance(given["reward_weights"], Mapping):
            given["reward_weights"] = dict(given["reward_weights"])
        if given["single_sample_groups"] is None and nemo_engine and given["preset"] is None:
            given["single_sample_groups"] = "zero"
        return given

    @classmethod
    def from_gdpo(cls, gdpo: Mapping, *, nemo_engine: bool = False) -> "AdvantageOptions":
        """The options a run config's gdpo block asks for, checked (`given_by_gdpo`)."""
        given = cls.given_by_gdpo(gdpo, nemo_engine=nemo_engine)
        return cls.resolve(given.pop("preset"), **given)

    def checked(self) -> "AdvantageOptions":
        """These options, or a ValueError naming every problem (`problems`)."""
        problems = self.problems()
        if problems:
            raise UserError("; ".join(problems))
        if self.reward_weights is not None:  # numpy and torch scalars become the floats they are
            return replace(self, reward_weights={name: _real_value(w) for name, w in self.reward_weights.items()})
        return self

    def problems(self, prefix: str = "") -> list[str]:
        """What is wrong with these options, one line each naming the option (`prefix` before
        each name: "gdpo." in a run config); empty: nothing. Each field's own `check`, then
        what no single field can say."""
        problems = []
        for item in fields(self):
            value = getattr(self, item.name)
            accepted = item.metadata["check"](value)
            if accepted is not None:
                problems.append(f"{prefix}{item.name}: {value!r}; expected {accepted}")
        if self.strict is True and self.preset is None:
            problems.append(
                f"{prefix}strict: true reproduces a peer exactly and needs {prefix}preset ({', '.join(PRESETS)})"
            )
        return problems

    def problems_with(self, info, prefix: str = "") -> list[str]:
        """What these options contradict in estimator `info` (an EstimatorInfo)."""
        if self.scale_rewards in info.scale_rewards:
            return []
        why = "is TRL's GRPO option; " if self.scale_rewards == "batch" else ""
        accepted = " or ".join(repr(value) for value in info.scale_rewards)
        return [f"{prefix}scale_rewards: {self.scale_rewards!r} {why}{prefix}estimator {info.name!r} takes {accepted}"]
