"""The clipped policy-gradient loss with NeMo RL's semantics (`ClippedPGLossFn`).

For response token t of sample i, with ratio r = exp(logp_theta - logp_old):

    clip_loss_t = max(-A_i * r, -A_i * clip(r, 1 - ratio_clip_min, 1 + ratio_clip_max))
    (dual clip, when ratio_clip_c is set and A_i < 0: min(clip_loss_t, -A_i * ratio_clip_c))
    kl_t        = beta * KL_k3(pi_theta || pi_ref) at token t   (only when beta > 0)

    token-level loss    = (sum_i sum_t mask_it (clip_loss_it + kl_it)) / valid tokens of the global batch
    sequence-level loss = (sum_i mean_t (clip_loss_it + kl_it)) / valid samples of the global batch

The denominators count the whole *global* batch (`policy.train_global_batch_size` samples),
not the micro-batch, so summing the micro-batch losses' gradients gives exactly the global
batch's gradient: that is how NeMo RL makes gradient accumulation exact.

KL estimators (Schulman, http://joschu.net/blog/kl-approx.html), with logr = logp_ref - logp:
k1 = -logr, k2 = logr^2 / 2, k3 = exp(logr) - 1 - logr; logr clamped to
+-kl_input_clamp_value and the result to +-kl_output_clamp_value, as NeMo RL does. The KL
is weighted by exp(logp - sg(logp)) (value 1, keeps the score-function gradient), or by
exp(logp - logp_generation) with `use_on_policy_kl_approximation`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gdpo_nemo.errors import UserError

# NeMo RL's masked_mean adds this to every normalization factor.
NORMALIZER_EPS = 1e-8


@dataclass(frozen=True)
class LossConfig:
    """The keys of the run config's `loss_fn` section the local engine uses (their fate in
    gdpo_nemo/config/nemo_keys.py; tests/test_configs_settings.py keeps the two equal)."""

    ratio_clip_min: float = 0.2
    ratio_clip_max: float = 0.2
    ratio_clip_c: float | None = None
    reference_policy_kl_penalty: float = 0.0
    reference_policy_kl_type: str = "k3"
    kl_input_clamp_value: float | None = 20.0
    kl_output_clamp_value: float | None = 10.0
    use_on_policy_kl_approximation: bool = False
    token_level_loss: bool = True
    force_on_policy_ratio: bool = False
    disable_ppo_ratio: bool = False

    @classmethod
    def from_config(cls, loss_fn: dict) -> "LossConfig":
        return cls(**{name: loss_fn[name] for name in cls.__dataclass_fields__})


def kl_estimate(
    logprobs: Tensor,
    reference_logprobs: Tensor,
    kl_type: str = "k3",
    input_clamp: float | None = 20.0,
    output_clamp: float | None = 10.0,
    weights: Tensor | None = None,
) -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled-token logprobs, [N, T] -> [N, T].

    Where the input clamp is active the weight is detached, so the clamp stops both the KL
    and the weight's gradient (NeMo RL's `calculate_kl`).
    """
    log_ratio = reference_logprobs - logprobs
    if input_clamp is not None:
        clamped = log_ratio.clamp(-input_clamp, input_clamp)
        if weights is not None:
            weights = torch.where(log_ratio == clamped, weights, weights.detach())
        log_ratio = clamped
    if kl_type == "k1":
        kl = -log_ratio
    elif kl_type == "k2":
        kl = log_ratio.square() / 2
    elif kl_type == "k3":
        kl = log_ratio.exp() - 1 - log_ratio
    else:
        raise UserError(f"loss_fn.reference_policy_kl_type={kl_type!r}: expected one of ['k1', 'k2', 'k3']")
    if weights is not None:
        kl = weights * kl
    if output_clamp is not None:
        kl = kl.clamp(-output_clamp, output_clamp)
    return kl


def _global_mean(values: Tensor, mask: Tensor, normalizer: float, token_level: bool) -> Tensor:
    """Token level: sum(values * mask) / normalizer. Sequence level: sum over samples of
    their token-mean / normalizer. `normalizer` counts the global batch."""
    if token_level:
        return (values * mask).sum() / (normalizer + NORMALIZER_EPS)
    per_sample = (values * mask).sum(-1) / (mask.sum(-1) + NORMALIZER_EPS)
    return per_sample.sum() / (normalizer + NORMALIZER_EPS)


def clipped_pg_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    config: LossConfig,
    *,
    global_valid_tokens: float,
    global_valid_samples: float,
    reference_logprobs: Tensor | None = None,
    generation_logprobs: Tensor | None = None,
) -> tuple[Tensor, dict]:
    """The loss of one micro-batch and its metrics.

    Args:
        logprobs: [N, T] log pi_theta of each response token (with grad).
        old_logprobs: [N, T] log pi_old of the same tokens (the policy that sampled them).
        advantages: [N] one advantage per sample, or [N, T].
        mask: [N, T] 1 for response tokens, 0 for padding.
        config: the loss settings.
        global_valid_tokens / global_valid_samples: response tokens / samples of the whole
            global batch this micro-batch belongs to (the loss denominators).
        reference_logprobs: [N, T] log pi_ref, needed when the KL penalty is > 0.
        generation_logprobs: [N, T] sampling logprobs, for the on-policy KL approximation.

    Returns:
        (loss, metrics): a scalar whose gradient is this micro-batch's share of the global
        batch gradient, and float metrics summed over micro-batches by the caller
        (`loss`, `kl_penalty`, `probs_ratio_sum`, `probs_ratio_clamped_sum`, `clipped_tokens`).
    """
    mask = mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    token_level = config.token_level_loss
    normalizer = global_valid_tokens if token_level else global_valid_samples

    kl_term = _kl_penalty(logprobs, reference_logprobs, generation_logprobs, mask, normalizer, config)
    ratio, ratio_clamped = _probability_ratio(logprobs, old_logprobs, config)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio_clamped
    clip_loss = torch.maximum(unclipped, clipped)
    if config.ratio_clip_c is not None:
        dual = -advantages * config.ratio_clip_c
        clip_loss = torch.where(advantages < 0, torch.minimum(clip_loss, dual), clip_loss)
    actor_loss = _global_mean(clip_loss, mask, normalizer, token_level)
    loss = actor_loss + kl_term

    with torch.no_grad():
        detached_ratio = ratio.detach() if not config.disable_ppo_ratio else torch.ones_like(ratio)
        metrics = {
            "loss": loss.item(),
            "kl_penalty": kl_term.item(),
            "probs_ratio_sum": float((detached_ratio * mask).sum()),
            "probs_ratio_clamped_sum": float((ratio_clamped.detach() * mask).sum() if not config.disable_ppo_ratio else mask.sum()),
            "clipped_tokens": float(((clipped > unclipped).to(mask.dtype) * mask).sum()),
        }
    return loss, metrics


def _probability_ratio(logprobs: Tensor, old_logprobs: Tensor, config: LossConfig) -> tuple[Tensor, Tensor]:
    """[N, T] ratio r = pi_theta / pi_old and clip(r, 1 - ratio_clip_min, 1 + ratio_clip_max).
    `force_on_policy_ratio`: r = exp(logp - sg(logp)) (value 1, gradient of logp), unclipped;
    `disable_ppo_ratio`: r = logp itself (REINFORCE: the loss is -A * log pi)."""
    if config.force_on_policy_ratio:
        ratio = torch.exp(logprobs - logprobs.detach())
        return ratio, ratio
    if config.disable_ppo_ratio:
        return logprobs, logprobs
    ratio = torch.exp(logprobs - old_logprobs)
    return ratio, ratio.clamp(1.0 - config.ratio_clip_min, 1.0 + config.ratio_clip_max)


def _kl_penalty(logprobs: Tensor, reference_logprobs: Tensor | None, generation_logprobs: Tensor | None,
                mask: Tensor, normalizer: float, config: LossConfig) -> Tensor:
    """Scalar beta * KL(pi_theta || pi_ref) term of the loss, averaged like the clipped loss
    (`_global_mean`); a zero scalar when beta = `reference_policy_kl_penalty` is 0."""
    beta = config.reference_policy_kl_penalty
    if beta <= 0:
        return logprobs.new_zeros(())
    if reference_logprobs is None:
        raise UserError("loss_fn.reference_policy_kl_penalty > 0 needs reference_logprobs")
    if config.use_on_policy_kl_approximation:
        if generation_logprobs is None:
            raise UserError("loss_fn.use_on_policy_kl_approximation needs generation_logprobs")
        weights = torch.exp(logprobs - generation_logprobs)
    else:
        weights = torch.exp(logprobs - logprobs.detach())
    weights = torch.nan_to_num(weights, nan=0.0, posinf=0.0, neginf=0.0)
    kl = beta * kl_estimate(
        logprobs,
        reference_logprobs,
        config.reference_policy_kl_type,
        config.kl_input_clamp_value,
        config.kl_output_clamp_value,
        weights,
    )
    return _global_mean(kl, mask, normalizer, config.token_level_loss)
