"""gdpo_nemo's estimators behind NeMo RL's advantage-estimator interface.

NeMo RL (pinned commit) builds its estimator in ``nemo_rl.algorithms.grpo.
_create_advantage_estimator(master_config)`` from ``grpo.adv_estimator.name`` and calls,
once per step::

    advantages = estimator.compute_advantage(
        prompt_ids=...,          # Tensor[B, L]: each sample's padded prompt token ids
        rewards=...,             # Tensor[B]: total_reward (the sum of the components)
        mask=...,                # Tensor[B, T]: response-token mask x sample mask
        repeated_batch=...,      # the batch, with one Tensor[B] per "reward/<name>" key
        logprobs_policy=..., logprobs_reference=...,
    )                            # -> Tensor[B, T]

It knows grpo, gdpo, reinforce_plus_plus and opd. `AdvantageEstimator` adds what it lacks:
``gdpo_no_bn`` (the paper's ablation), and every gdpo block NeMo RL's grpo/gdpo cannot
express (weighted GRPO, token-level batch norm, the TRL/verl presets, NaN rewards left out
of the statistics; see ``gdpo_nemo.config.derive.estimator_decision``, whose answer the composer writes into ``gdpo.computed_by``). Leave-one-out runs use it
too: NeMo RL's float32 leave-one-out std turns the float residue of constant group-mates
into huge advantages (docs/estimators.md), ours gives them exactly 0. It reads the run config's
gdpo block and computes with ``gdpo_nemo.estimators.compute_advantages``;
`create_estimator` is the replacement for ``_create_advantage_estimator`` that
``plugin.install_hooks`` puts in place.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor

from gdpo_nemo.errors import UserError
from gdpo_nemo.estimators import ESTIMATORS, compute_advantages
from gdpo_nemo.estimators.collapse import distinct_advantage_groups
from gdpo_nemo.config.settings import EstimatorSettings
from gdpo_nemo.config.derive import LEAVE_ONE_OUT_REASON, estimator_decision, our_env_blocks
from gdpo_nemo.engines.nemo.scoring import REWARD_PREFIX
from gdpo_nemo.runs import metric_names as mn

__all__ = ["AdvantageEstimator", "create_estimator", "estimator_advantages", "group_ids_from_prompts", "reward_components", "section"]


def section(config: Any, name: str, default=None):
    """`config[name]` for a dict, or the attribute / pydantic extra field `name` of NeMo RL's
    MasterConfig (its ``gdpo`` block is an extra field)."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    if hasattr(config, name):
        return getattr(config, name)
    extra = getattr(config, "model_extra", None) or {}
    return extra.get(name, default)


def estimator_advantages(
    settings: EstimatorSettings, components: Mapping[str, Tensor], group_ids: Tensor, token_mask: Tensor | None = None
) -> Tensor:
    """Tensor[B] advantages of named components by ``compute_advantages`` with the gdpo
    block's options (`EstimatorSettings.from_gdpo(gdpo, nemo_engine=True)`: NeMo RL's
    treatment of single-sample groups under no preset);
    `token_mask` [B, T] is used only for batch_norm "token"."""
    return compute_advantages(
        dict(components), group_ids, settings.estimator, options=settings.options,
        token_mask=token_mask if settings.batch_norm == "token" else None,
    )


def group_ids_from_prompts(prompt_ids: Tensor) -> Tensor:
    """Tensor[B] group id per sample: samples with identical prompt token rows share a group
    (NeMo RL groups the same way). `prompt_ids`: Tensor[B, L] (or Tensor[B])."""
    prompt_ids = torch.as_tensor(prompt_ids)
    if prompt_ids.dim() == 1:
        prompt_ids = prompt_ids.unsqueeze(-1)
    _, inverse = torch.unique(prompt_ids, dim=0, return_inverse=True)
    return inverse


def reward_components(batch: Mapping, expected: Sequence[str] | None = None) -> dict[str, Tensor]:
    """{name: float Tensor[B]} of the batch's "reward/<name>" keys, sorted by name.

    With `expected` (the gdpo block's components) the names must match exactly: a missing
    or unexpected component is a ValueError naming both lists.
    """
    found = {key[len(REWARD_PREFIX):]: key for key in sorted(k for k in batch.keys() if isinstance(k, str) and k.startswith(REWARD_PREFIX))}
    if expected is not None and set(found) != set(expected):
        raise UserError(
            f"the rollout batch has reward components {sorted(found)} but gdpo.reward_components is"
            f" {list(expected)}: the environment and the gdpo block disagree"
        )
    return {name: torch.as_tensor(batch[key]).to(torch.float64).reshape(-1) for name, key in found.items()}


class AdvantageEstimator:
    """NeMo RL's estimator interface over gdpo_nemo.estimators.

    After each call `last_metrics` holds {"adv/distinct_groups": int} (NeMo RL's async
    trainer logs an estimator's last_metrics; the sync trainer gets the same number from
    the rollout hook).
    """

    def __init__(self, settings: EstimatorSettings):
        self.settings = settings
        self.last_metrics: dict[str, float] = {}

    def compute_advantage(self, prompt_ids, rewards, mask, repeated_batch=None, **kwargs) -> Tensor:
        """Advantages Tensor[B, T] (constant over each sample's tokens).

        prompt_ids: Tensor[B, L] prompt tokens (the groups). rewards: Tensor[B] total reward
        (unused: the components are read from `repeated_batch`). mask: Tensor[B, T] response
        tokens (sets the output shape; token-level batch norm weights samples by it).
        """
        if repeated_batch is None:
            raise UserError("gdpo_nemo's estimator needs repeated_batch with the reward/<name> components")
        components = reward_components(repeated_batch, self.settings.components)
        group_ids = group_ids_from_prompts(torch.as_tensor(prompt_ids).cpu())
        mask = torch.as_tensor(mask)
        advantages = estimator_advantages(self.settings, components, group_ids, token_mask=mask.detach().cpu())
        self.last_metrics = {mn.DISTINCT_GROUPS: distinct_advantage_groups(advantages, group_ids)}
        return advantages.to(device=mask.device, dtype=torch.float32).unsqueeze(-1).expand(mask.shape).clone()


def create_estimator(master_config: Any, original: Callable[[Any], Any], settings: EstimatorSettings | None = None):
    """Replacement for NeMo RL's ``_create_advantage_estimator``: ours for
    a grpo.adv_estimator.name NeMo RL lacks (a registry entry with no NeMo RL equivalent:
    gdpo_no_bn) and for any gdpo block NeMo RL cannot express; NeMo RL's own (`original`)
    otherwise. `settings`: the gdpo block's, when the caller built them already (the
    plugin's hook state); else built here from the master config's gdpo block."""
    name = section(section(section(master_config, "grpo"), "adv_estimator"), "name")
    ours_only = name in ESTIMATORS and ESTIMATORS[name].nemo_rl is None
    gdpo = section(master_config, "gdpo")
    if not isinstance(gdpo, Mapping):
        if ours_only:
            raise UserError(f"grpo.adv_estimator.name={name!r} is gdpo_nemo's and needs the run config's gdpo block")
        return original(master_config)
    computed_by = gdpo.get("computed_by")  # the composer's decision (config.derive.estimator_decision)
    if computed_by is None:  # a config the composer did not write: the same decision, made here once
        computed_by, _ = estimator_decision(gdpo, our_env_blocks({"env": dict(section(master_config, "env") or {})}))
    if computed_by == "nemo_rl" and not ours_only:
        return original(master_config)
    settings = settings if settings is not None else EstimatorSettings.from_gdpo(gdpo, nemo_engine=True)
    print(f"  ✓ Using gdpo_nemo advantage estimator {settings.estimator!r} (grpo.adv_estimator.name={name!r})")
    if gdpo.get("leave_one_out", False):
        print(f"    why: {LEAVE_ONE_OUT_REASON}")
    return AdvantageEstimator(settings)
