"""Batched, KV-cached sampling of G completions per prompt, and sequence logprobs.

Sampling (`sample_completions`):

1. prefill each distinct prompt once (left-padded batch, one forward pass, KV cache kept);
2. repeat each prompt's cache G times (the G rollouts of a group share their prompt);
3. decode one token per step for the rows still running; a row stops at an EOS / stop token
   or after `max_new_tokens`. Finished rows are dropped from the batch (and from the KV
   cache), so the cost per step follows the rows still generating.

Randomness comes only from the `torch.Generator` passed in, which must be on the model's
device (torch.multinomial draws on the probabilities' device), so a seeded generator gives
the same completions on every run on the same device. Every tensor of the loop (KV cache,
tokens, logprobs, masks) stays on the prompts' device; sampling math is fp32 whatever the
model's or autocast's dtype. The log-probability of each sampled token under
the sampling distribution (logits / temperature) is returned with it: the policy that
sampled is the one being trained, so these are the old-policy logprobs of the ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gdpo_nemo.errors import UserError


@dataclass
class Rollouts:
    """A batch of N = prompts x G sequences; rows of one prompt are contiguous.

    prompt_ids:      [N, P] left-padded prompt tokens
    prompt_mask:     [N, P] 1 on prompt tokens
    completion_ids:  [N, C] right-padded completion tokens (EOS included when emitted)
    completion_mask: [N, C] 1 on generated tokens
    logprobs:        [N, C] log pi(token) under the sampling distribution, 0 on padding
    truncated:       [N] bool, True when the row hit max_new_tokens without a stop token
    prompt_index:    [N] long, which of the M prompts the row answers (row // G)
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor
    logprobs: Tensor
    truncated: Tensor
    prompt_index: Tensor

    @property
    def lengths(self) -> Tensor:
        """[N] generated tokens per row."""
        return self.completion_mask.sum(-1)


def _filter_logits(logits: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
    """Mask logits outside the top-k tokens and outside the smallest top-p nucleus."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Keep a token while the mass before it is < top_p (the first token always stays).
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _choose(logits: Tensor, temperature: float, top_k, top_p, generator) -> tuple[Tensor, Tensor]:
    """Next tokens [n] and their logprobs [n] from last-position logits [n, V]."""
    logits = logits.float()
    if temperature == 0:  # greedy
        logp = logits.log_softmax(-1)
        tokens = logits.argmax(-1)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
    logp = (logits / temperature).log_softmax(-1)
    filtered = _filter_logits(logp, top_k, top_p)
    probs = filtered.softmax(-1)
    tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


@torch.inference_mode()
def _sample_chunk(model, prompt_ids, prompt_mask, group_size, max_new_tokens, temperature,
                  top_k, top_p, stop_ids: Tensor, pad_id: int, generator) -> tuple:
    device = prompt_ids.device
    num_prompts = prompt_ids.shape[0]
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    last_logits = out.logits[:, -1, :]
    if group_size > 1:  # each prompt's cache serves its G rollouts
        cache.batch_repeat_interleave(group_size)
        last_logits = last_logits.repeat_interleave(group_size, 0)
        prompt_mask = prompt_mask.repeat_interleave(group_size, 0)
    rows = num_prompts * group_size
    next_position = prompt_mask.sum(-1)  # [rows]
    attention = prompt_mask
    tokens_out = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs_out = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.zeros(rows, dtype=torch.long, device=device)
    stopped = torch.zeros(rows, dtype=torch.bool, device=device)
    active = torch.arange(rows, device=device)  # rows still generating, in batch order
    for step in range(max_new_tokens):
        tokens, logprobs = _choose(last_logits, temperature, top_k, top_p, generator)
        tokens_out[active, step] = tokens
        logprobs_out[active, step] = logprobs
        lengths[active] += 1
        done = torch.isin(tokens, stop_ids)
        stopped[active[done]] = True
        if step == max_new_tokens - 1:
            break
        keep = ~done
        if not bool(keep.any()):
            break
        if not bool(keep.all()):  # drop finished rows from the batch and the KV cache
            kept = keep.nonzero().squeeze(-1)
            cache.batch_select_indices(kept)
            active, tokens = active[kept], tokens[kept]
            attention, next_position = attention[kept], next_position[kept]
        attention = torch.cat([attention, attention.new_ones((attention.shape[0], 1))], dim=-1)
        out = model(input_ids=tokens[:, None], attention_mask=attention,
                    position_ids=next_position[:, None], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        last_logits = out.logits[:, -1, :]
        next_position = next_position + 1
    width = int(lengths.max()) if rows else 0
    mask = torch.arange(width, device=device)[None, :] < lengths[:, None]
    return tokens_out[:, :width], mask.long(), logprobs_out[:, :width] * mask, ~stopped


def sample_completions(model, prompt_ids: Tensor, prompt_mask: Tensor, *, group_size: int,
                       max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                       top_p: float | None = None, stop_token_ids=(), pad_token_id: int = 0,
                       generator: torch.Generator | None = None, batch_size: int | None = None,
                       progress=None) -> Rollouts:
    """Sample `group_size` completions for each of the M prompts.

    Args:
        prompt_ids, prompt_mask: [M, P] left-padded prompts.
        group_size: G completions per prompt; output rows m*G .. m*G+G-1 belong to prompt m.
        max_new_tokens: completion length limit (tokens).
        temperature: 0 = greedy; top_k / top_p filter the sampling distribution only.
        stop_token_ids: tokens that end a completion (kept in it, as NeMo RL keeps EOS).
        generator: the only source of randomness; on the model's device.
        batch_size: at most this many sequences decode together (`policy.generation_batch_size`).
        progress: optional callable(n_prompts_done) for progress bars.

    Returns:
        `Rollouts` with N = M * G rows.
    """
    if not stop_token_ids:
        raise UserError("sample_completions needs at least one stop token id (the tokenizer's EOS)")
    device = prompt_ids.device
    if generator is not None and generator.device.type != device.type:
        raise UserError(f"generator is on {generator.device} but the prompts are on {device}: create it with"
                         f" torch.Generator(device={device.type!r}) (sampling draws on the model's device)")
    stop_ids = torch.tensor(sorted(set(int(i) for i in stop_token_ids)), device=device)
    prompts_per_chunk = max(1, (batch_size or prompt_ids.shape[0] * group_size) // group_size)
    chunks = []
    for start in range(0, prompt_ids.shape[0], prompts_per_chunk):
        ids = prompt_ids[start:start + prompts_per_chunk]
        mask = prompt_mask[start:start + prompts_per_chunk]
        keep = mask.any(0)  # drop all-pad columns of this chunk (left padding)
        first = int(keep.nonzero()[0]) if bool(keep.any()) else 0
        chunks.append(_sample_chunk(model, ids[:, first:], mask[:, first:], group_size, max_new_tokens,
                                    temperature, top_k, top_p, stop_ids, pad_token_id, generator))
        if progress is not None:
            progress(ids.shape[0])
    width = max(c[0].shape[1] for c in chunks)

    def pad_right(t: Tensor, value) -> Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

    return Rollouts(
        prompt_ids=prompt_ids.repeat_interleave(group_size, 0),
        prompt_mask=prompt_mask.repeat_interleave(group_size, 0),
        completion_ids=torch.cat([pad_right(c[0], pad_token_id) for c in chunks]),
        completion_mask=torch.cat([pad_right(c[1], 0) for c in chunks]),
        logprobs=torch.cat([pad_right(c[2], 0.0) for c in chunks]),
        truncated=torch.cat([c[3] for c in chunks]),
        prompt_index=torch.arange(prompt_ids.shape[0], device=device).repeat_interleave(group_size),
    )


def sequence_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                      completion_mask: Tensor, temperature: float = 1.0) -> Tensor:
    """log pi(completion token | prefix) for every completion position, [n, C].

    One forward pass over [prompt | completion]; only the C positions that predict a
    completion token go through the LM head (`logits_to_keep`). Logits are divided by the
    sampling temperature, as NeMo RL does for the logprobs of the loss. Gradients flow
    unless the caller disables them. Positions outside `completion_mask` hold garbage-free
    values that the caller must mask.
    """
    # Trim columns that are padding in every row (left of prompts, right of completions).
    full_width = completion_ids.shape[1]
    prompt_keep = prompt_mask.any(0)
    first = int(prompt_keep.nonzero()[0]) if bool(prompt_keep.any()) else 0
    width = max(int(completion_mask.sum(-1).max()) if completion_mask.numel() else 0, 1)
    width = min(width, full_width)
    prompt_ids, prompt_mask = prompt_ids[:, first:], prompt_mask[:, first:]
    completion_ids, completion_mask = completion_ids[:, :width], completion_mask[:, :width]
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                   use_cache=False, logits_to_keep=width + 1).logits[:, :-1, :]
    return _token_logprobs(logits, completion_ids, temperature, full_width)


def shared_prompt_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, counts: Tensor,
                           completion_ids: Tensor, completion_mask: Tensor, temperature: float = 1.0) -> Tensor:
    """`sequence_logprobs` for rows that share prompts, running each prompt only once.

    The G rollouts of a group have the same prompt; the prompt's keys and values are
    computed once (with gradients), repeated for its rows, and the completions attend to
    them through the KV cache. Same values as one forward pass per row (up to float
    rounding), (G - 1) / G less prompt compute.

    Args:
        prompt_ids, prompt_mask: [U, P] the distinct prompts, left-padded.
        counts: [U] how many consecutive rows answer each prompt (sum = n).
        completion_ids, completion_mask: [n, C] the rows' completions, right-padded.

    Returns:
        [n, C] log pi(completion token | prompt, earlier completion tokens).
    """
    full_width = completion_ids.shape[1]
    keep = prompt_mask.any(0)
    first = int(keep.nonzero()[0]) if bool(keep.any()) else 0
    prompt_ids, prompt_mask = prompt_ids[:, first:], prompt_mask[:, first:]
    width = min(max(int(completion_mask.sum(-1).max()) if completion_mask.numel() else 0, 1), full_width)
    completion_ids, completion_mask = completion_ids[:, :width], completion_mask[:, :width]

    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    counts = counts.to(prompt_ids.device)
    cache.batch_repeat_interleave(counts)
    logits = [out.logits[:, -1:, :].repeat_interleave(counts, 0)]  # predicts completion token 0
    if width > 1:
        attention = torch.cat([prompt_mask.repeat_interleave(counts, 0),
                               completion_mask[:, :width - 1].to(prompt_mask.dtype)], dim=1)
        start = prompt_mask.sum(-1).repeat_interleave(counts, 0)
        positions = start[:, None] + torch.arange(width - 1, device=start.device)[None, :]
        logits.append(model(input_ids=completion_ids[:, :width - 1], attention_mask=attention,
                            position_ids=positions, past_key_values=cache, use_cache=True).logits)
    logits = torch.cat(logits, dim=1)
    return _token_logprobs(logits, completion_ids, temperature, full_width)


def _token_logprobs(logits: Tensor, completion_ids: Tensor, temperature: float, full_width: int) -> Tensor:
    """log-probabilities of `completion_ids` [n, width] under `logits` [n, width, V] (divided
    by the sampling temperature), zero-padded on the right to `full_width` columns."""
    logits = logits.float()  # bf16 weights or autocast: the log-softmax is still fp32
    if temperature not in (0, 1):
        logits = logits / temperature
    logp = logits.log_softmax(-1).gather(-1, completion_ids[:, :, None]).squeeze(-1)
    width = logp.shape[1]
    if width < full_width:
        logp = torch.cat([logp, logp.new_zeros((logp.shape[0], full_width - width))], dim=1)
    return logp
