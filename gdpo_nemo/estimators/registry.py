"""The registry of advantage estimators: each estimator is a small pure function registered by
name with everything the rest of the package needs to know of it (display label, plot style,
NeMo RL's own equivalent, how collapse counts it, its dense form, ...). `ESTIMATORS` /
`estimator_info` are the one source of estimator names for configs, engines, collapse
counting, tables and figures. Torch-free, built-ins included: gdpo_nemo.estimators.builtin
registers them (every public name of `gdpo_nemo.estimators` imports it) with functions that
import gdpo_nemo.estimators.general, and torch, on their first call.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from gdpo_nemo.errors import UserError
from gdpo_nemo.estimators.options import SCALE_REWARDS, AdvantageOptions

if TYPE_CHECKING:
    from torch import Tensor

    from gdpo_nemo.estimators.groups import Groups

__all__ = [
    "COLLAPSE_KINDS",
    "ESTIMATORS",
    "DenseForm",
    "EstimatorInfo",
    "NemoRLEstimator",
    "PlotStyle",
    "estimator_info",
    "register_estimator",
    "unregister_estimator",
]

EstimatorFn = Callable[["Tensor", "Tensor", "Groups", "Tensor", AdvantageOptions, "Tensor | None"], "Tensor"]

# How gdpo_nemo.estimators.collapse counts an estimator's distinct advantage groups for binary rewards
# (paper Fig. 3), by the shape of its formula: "centred_sum" (the reward sum minus its group
# mean, grpo_no_std), "normalized_sum" (that over its group std, grpo), "normalized_components"
# (each reward over its own group std, then summed: gdpo; batch norm does not change the count).
COLLAPSE_KINDS = ("centred_sum", "normalized_sum", "normalized_components")


@dataclass(frozen=True)
class PlotStyle:
    """How figures draw an estimator: the same colour in every figure of the paper."""

    color: str
    """A matplotlib colour ("tab:blue")."""
    marker: str
    """A matplotlib marker of its points (paper Fig. 3: "o", "s", "^")."""
    linestyle: str
    """A matplotlib line style of its training curves ("-", "--")."""


@dataclass(frozen=True)
class NemoRLEstimator:
    """NeMo RL's own advantage estimator that computes the same thing (grpo.adv_estimator)."""

    name: str
    """NeMo RL's grpo.adv_estimator.name ("grpo", "gdpo")."""
    normalize_rewards: bool = True
    """NeMo RL's grpo.adv_estimator.normalize_rewards (false: no division by the group std)."""


@dataclass(frozen=True)
class DenseForm:
    """What the dense path of `compute_advantages` (equal-size groups in order, no token mask)
    computes for an estimator, by structure rather than by name: each reward (when
    multi-component) or the weighted reward sum is centred in its group, divided by its
    group std when `divide_by_group_std` (and scale_rewards is "group"), summed, and
    batch-normalized when `batch_norm`."""

    divide_by_group_std: bool = True
    batch_norm: bool = False

    def divides(self, options: AdvantageOptions) -> bool:
        """Whether the centred values are divided by their group std under `options`."""
        return self.divide_by_group_std and options.scale_rewards == "group"


@dataclass(frozen=True)
class EstimatorInfo:
    """One registered advantage estimator: its function and everything the rest of the
    package needs to know about it, declared once at `register_estimator`.

    Calling an `EstimatorInfo` calls its function (see `register_estimator` for the
    signature), so ``ESTIMATORS[name](...)`` computes advantages."""

    name: str
    """The config's name (gdpo.estimator), lower case."""
    fn: EstimatorFn
    label: str
    """Display name in tables and figure legends ("GDPO w/o BN")."""
    multi_component: bool = False
    """Normalizes each reward component separately: needs at least 2 components."""
    nemo_rl: NemoRLEstimator | None = None
    """NeMo RL's own estimator for it, or None when only gdpo_nemo's hook can run it."""
    collapse_key: str | Callable[[tuple[int, ...], int], object] | None = None
    """How gdpo_nemo.estimators.collapse counts its distinct advantage groups: a kind of
    `COLLAPSE_KINDS`, or a function (group as G ints whose bit k is reward k, num_rewards)
    -> a hashable key equal exactly for equal sorted advantage tuples; None: not countable."""
    style: PlotStyle | None = None
    """None: figures give it a colour of their own (dash-dot line)."""
    in_fig3: bool = False
    """Drawn in the paper's Fig. 3 (and its Fig. 2 toy table); needs `collapse_key`."""
    dense: DenseForm | None = None
    """Its form on the dense fast path; None: always the general path (its `fn`)."""
    token_batch_norm: bool = False
    """Ends with a batch normalization that a token_mask makes per token (verl): the one
    estimator gdpo.batch_norm "token" applies to."""
    scale_rewards: tuple[str, ...] = ("group", "none")
    """The values of AdvantageOptions.scale_rewards it accepts ("batch" is TRL's, GRPO only)."""

    def __call__(self, rewards, valid, groups, weights, options, token_mask):
        """The estimator: advantages [B] float64 (arguments as in `register_estimator`)."""
        return self.fn(rewards, valid, groups, weights, options, token_mask)


_REGISTRY: dict[str, EstimatorInfo] = {}
ESTIMATORS: Mapping[str, EstimatorInfo] = MappingProxyType(_REGISTRY)
"""Read-only view {name: EstimatorInfo} of the registered estimators, in registration order
(the display order of tables and figures)."""


def estimator_info(name: str) -> EstimatorInfo:
    """The registered estimator `name`; a ValueError naming it and the accepted names if none."""
    info = _REGISTRY.get(name) if isinstance(name, str) else None
    if info is None:
        raise UserError(f"unknown estimator {name!r}; expected one of {list(_REGISTRY)}")
    return info


def register_estimator(
    name: str,
    *,
    label: str | None = None,
    multi_component: bool = False,
    nemo_rl: NemoRLEstimator | None = None,
    collapse_key: str | Callable[[tuple[int, ...], int], object] | None = None,
    style: PlotStyle | None = None,
    in_fig3: bool = False,
    dense: DenseForm | None = None,
    scale_rewards: Sequence[str] = ("group", "none"),
    token_batch_norm: bool = False,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register an estimator under `name`, with its metadata (fields of `EstimatorInfo`;
    `label` defaults to `name`).

    The function receives `(rewards [B, K] float64 with NaN already zeroed, valid [B, K] bool,
    groups, weights [K] float64, options, token_mask [B, T] or None)` and returns the
    advantage [B] float64; samples with no valid component must get 0. The decorator
    returns the function unchanged.
    """
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise UserError(f"estimator name {name!r}: expected a lower-case Python identifier (it is a config value)")
    if isinstance(collapse_key, str) and collapse_key not in COLLAPSE_KINDS:
        raise UserError(
            f"estimator {name!r}: collapse_key {collapse_key!r}; expected one of {list(COLLAPSE_KINDS)} or a function"
        )
    if in_fig3 and collapse_key is None:
        raise UserError(f"estimator {name!r}: in_fig3 needs a collapse_key (Fig. 3 counts its advantage groups)")
    unknown = [value for value in scale_rewards if value not in SCALE_REWARDS]
    if unknown or not scale_rewards:
        raise UserError(
            f"estimator {name!r}: scale_rewards {list(scale_rewards)}; expected a non-empty subset of {list(SCALE_REWARDS)}"
        )

    def decorate(fn: EstimatorFn) -> EstimatorFn:
        if name in _REGISTRY:
            raise UserError(f"advantage estimator {name!r} is already registered")
        _REGISTRY[name] = EstimatorInfo(
            name=name, fn=fn, label=name if label is None else label, multi_component=multi_component,
            nemo_rl=nemo_rl, collapse_key=collapse_key, style=style, in_fig3=in_fig3, dense=dense,
            scale_rewards=tuple(scale_rewards), token_batch_norm=token_batch_norm,
        )
        return fn

    return decorate


def unregister_estimator(name: str) -> EstimatorInfo:
    """Remove the estimator `name` and return its entry (for tests and plugins that
    register one for a while); a ValueError if it is not registered."""
    info = estimator_info(name)
    del _REGISTRY[name]
    return info
