"""Steps 4-6 of a training step, over the whole rollout batch (NeMo RL's policy training):

    4. ratio   r_t = pi_theta(y_t) / pi_old(y_t) per response token (`_micro_batch_backward`)
    5. clip    loss = max(-A r_t, -A clip(r_t, 1 - eps_low, 1 + eps_high)) (+ beta KL_k3), loss.py
    6. step    one optimizer step per global batch, micro-batches accumulate, grad clipping

plus the frozen reference policy's logprobs for the KL term. Logprobs and the loss are fp32;
the forward passes run under the caller's `autocast`.
"""

from __future__ import annotations

import contextlib
import math
import sys

import torch

from gdpo_nemo.engines.local.generation import Rollouts, shared_prompt_logprobs
from gdpo_nemo.engines.local.loss import LossConfig, clipped_pg_loss

# The keys of `update_policy`'s result, logged as train/<key> in this order.
UPDATE_METRICS = ("loss", "grad_norm", "kl_penalty", "probs_ratio", "probs_ratio_clamped", "clip_fraction",
                  "skipped_updates")


def update_policy(model, optimizer, rollouts: Rollouts, advantages, reference_logprobs, loss_config: LossConfig,
                  policy: dict, temperature: float, device, autocast=contextlib.nullcontext) -> dict:
    """Steps 4-6 over the whole rollout batch: for each global batch of
    `train_global_batch_size` rows, accumulate micro-batch gradients of the clipped loss
    (normalized by the global batch's token / sample count), clip, step. `autocast()` is the
    forward passes' precision context; the loss is computed in fp32 outside it.

    An update whose clipped gradient norm is not finite is skipped (the weights stay as they
    were; `skipped_updates` counts them, and `grad_norm` shows the NaN or inf).

    Returns the means over global batches of `loss`, `kl_penalty` and `grad_norm`, the number
    of skipped updates, and the token means of `probs_ratio`, `probs_ratio_clamped` and
    `clip_fraction` (UPDATE_METRICS)."""
    rows_total = rollouts.completion_ids.shape[0]
    global_batch = policy["train_global_batch_size"]
    parameters = [p for p in model.parameters() if p.requires_grad]
    totals = {"loss": 0.0, "kl_penalty": 0.0, "probs_ratio_sum": 0.0, "probs_ratio_clamped_sum": 0.0,
              "clipped_tokens": 0.0}
    grad_norms, tokens_seen, num_global, skipped = [], 0.0, rows_total // global_batch, 0
    for start in range(0, rows_total, global_batch):
        batch_rows = list(range(start, start + global_batch))
        valid_tokens = float(rollouts.completion_mask[batch_rows].sum())
        optimizer.zero_grad(set_to_none=True)
        for rows in _chunks(batch_rows, policy["train_micro_batch_size"]):
            _, parts = _micro_batch_backward(model, rollouts, rows, advantages, reference_logprobs, loss_config,
                                             temperature, device, autocast, valid_tokens, len(batch_rows))
            for key in totals:
                totals[key] += parts[key]
        # 6. step: clip the global gradient norm, AdamW
        max_norm = policy["max_grad_norm"]
        norm = float(torch.nn.utils.clip_grad_norm_(parameters, max_norm if max_norm is not None else math.inf))
        grad_norms.append(norm)
        if math.isfinite(norm):
            optimizer.step()
        else:  # a NaN or inf gradient would make every weight NaN: leave them as they are
            skipped += 1
            print(f"warning: the gradient's norm is {norm} (not finite): this update is skipped, the weights are "
                  "unchanged (train/skipped_updates counts them)", file=sys.stderr, flush=True)
        tokens_seen += valid_tokens
    optimizer.zero_grad(set_to_none=True)
    return {
        "loss": totals["loss"] / num_global,
        "kl_penalty": totals["kl_penalty"] / num_global,
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "skipped_updates": skipped,
        "probs_ratio": totals["probs_ratio_sum"] / max(tokens_seen, 1.0),
        "probs_ratio_clamped": totals["probs_ratio_clamped_sum"] / max(tokens_seen, 1.0),
        "clip_fraction": totals["clipped_tokens"] / max(tokens_seen, 1.0),
    }


def _micro_batch_backward(model, rollouts: Rollouts, rows: list, advantages, reference_logprobs,
                          loss_config: LossConfig, temperature: float, device, autocast,
                          global_valid_tokens: float, global_valid_samples: int) -> tuple[torch.Tensor, dict]:
    """Steps 4-5 on micro-batch `rows`: the ratio's logprobs under the current weights, the
    clipped loss (normalized by the global batch), backward. Returns `clipped_pg_loss`'s
    (loss, metrics)."""
    index = torch.as_tensor(rows, dtype=torch.long, device=device)
    completion_mask = rollouts.completion_mask[index].to(device)
    # 4. ratio: logprobs of the sampled tokens under the current weights
    with autocast():
        logprobs = _logprobs_of_rows(model, rollouts, rows, temperature, device)
    width = logprobs.shape[1]
    old_logprobs = rollouts.logprobs[index, :width].to(device)
    # 5. clip: NeMo RL's ClippedPGLossFn
    loss, parts = clipped_pg_loss(
        logprobs,
        old_logprobs,
        advantages[index].to(device=device, dtype=logprobs.dtype),
        completion_mask[:, :width],
        loss_config,
        global_valid_tokens=global_valid_tokens,
        global_valid_samples=float(global_valid_samples),
        reference_logprobs=None if reference_logprobs is None else reference_logprobs[index, :width].to(device),
        generation_logprobs=old_logprobs,
    )
    loss.backward()
    return loss, parts


def reference_policy_logprobs(reference, rollouts: Rollouts, temperature: float, batch_size: int, device,
                              autocast=contextlib.nullcontext) -> torch.Tensor | None:
    """[N, C] logprobs of the completions under the frozen reference policy `reference`, for
    the KL term, `batch_size` rows (`policy.logprob_batch_size`) a forward pass; None when
    there is no reference (`loss_fn.reference_policy_kl_penalty` is 0)."""
    if reference is None:
        return None
    rows = range(rollouts.completion_ids.shape[0])
    with torch.no_grad(), autocast():
        return torch.cat([_logprobs_of_rows(reference, rollouts, chunk, temperature, device)
                          for chunk in _chunks(rows, batch_size)])


def _chunks(rows, size: int):
    rows = list(rows)
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def _logprobs_of_rows(model, rollouts: Rollouts, rows, temperature: float, device) -> torch.Tensor:
    """[len(rows), C] logprobs of the completions of `rows` (consecutive rows of one prompt
    share its forward pass: `shared_prompt_logprobs`)."""
    index = torch.as_tensor(rows, dtype=torch.long, device=rollouts.prompt_index.device)
    _, counts = torch.unique_consecutive(rollouts.prompt_index[index], return_counts=True)
    firsts = index[torch.cumsum(counts, 0) - counts]
    return shared_prompt_logprobs(model, rollouts.prompt_ids[firsts].to(device), rollouts.prompt_mask[firsts].to(device),
                                  counts, rollouts.completion_ids[index].to(device),
                                  rollouts.completion_mask[index].to(device), temperature)
