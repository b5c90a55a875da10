"""A length limit l calibrated on the starting policy's own lengths (`gdpo-nemo lengths`).

The length reward (1 if a response has at most l tokens) only teaches anything while it
varies inside groups; the paper's l = 4000 against R1 models' 8000-token budget puts many of
the base model's responses over it (Table 3's base Exceed: 26-92 %). A small model on short
problems needs its own l, read off its own lengths at the start of RL: `length_profile`
samples exactly the first steps' rollouts of a run config (the same warm-started weights,
prompts, sampling generator and settings as the trainer's first steps, without training),
scores them with the config's rewards, and `LengthProfile` tells, for each candidate l, the
share of responses over it and the share of groups in which the length reward varies, beside
each other reward's mean and its share of varying groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

# Calibration target of the study of rewards in tension (docs/tension_study.md): 40-60 % of
# the first step's responses over l.
TARGET_EXCEED = (0.4, 0.6)


@dataclass
class LengthProfile:
    """The first steps' rollouts of a run config, reduced to what calibrating l needs.

    lengths: [N] response tokens (the length reward's count); truncated: [N] whether the
    response hit max_new_tokens; rewards: {component: [N] values} under the config's l;
    group_size: G (rows g*G .. g*G+G-1 share a prompt)."""

    lengths: list[int]
    truncated: list[bool]
    rewards: dict[str, list[float]]
    group_size: int
    max_new_tokens: int
    limit: float | None = None
    meta: dict = field(default_factory=dict)

    def groups(self, values: list) -> list[list]:
        return [values[i:i + self.group_size] for i in range(0, len(values), self.group_size)]

    def exceed_share(self, limit: float) -> float:
        """Share of responses longer than `limit` tokens (the paper's Exceed, on these rollouts)."""
        return sum(length > limit for length in self.lengths) / len(self.lengths)

    def varying_share(self, values: list) -> float:
        """Share of groups in which `values` is not constant (groups that carry a signal)."""
        groups = self.groups(values)
        return sum(len(set(g)) > 1 for g in groups) / len(groups)

    def length_varying_share(self, limit: float) -> float:
        """Share of groups in which the length reward at `limit` varies."""
        return self.varying_share([length <= limit for length in self.lengths])

    def quantile(self, q: float) -> float:
        """The q-quantile of the lengths (lower value, no interpolation)."""
        ordered = sorted(self.lengths)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    def candidates(self, step: int = 2) -> list[int]:
        """Limits from the 20th to the 80th percentile of the lengths, every `step` tokens."""
        low, high = int(self.quantile(0.2)), int(self.quantile(0.8))
        return list(range(low - low % step, high + step, step))

    def suggest(self, target: tuple[float, float] = TARGET_EXCEED) -> int | None:
        """The limit whose exceed share is inside `target` and closest to its middle (ties:
        the one where the length reward varies in the most groups); None when none is."""
        middle = sum(target) / 2
        inside = [lim for lim in self.candidates(1) if target[0] <= self.exceed_share(lim) <= target[1]]
        if not inside:
            return None
        return min(inside, key=lambda lim: (abs(self.exceed_share(lim) - middle), -self.length_varying_share(lim), lim))

    def histogram(self, width: int = 4) -> list[tuple[int, int, int]]:
        """[(low, high, count)] of the lengths in bins of `width` tokens (low <= length < high)."""
        top = max(self.lengths) + 1
        return [(lo, lo + width, sum(lo <= x < lo + width for x in self.lengths)) for lo in range(0, top, width)
                if any(lo <= x < lo + width for x in self.lengths)]

    def report(self, limits: list[int] | None = None) -> str:
        """Markdown: the histogram, each candidate limit's exceed share and varying groups,
        each reward's mean and varying groups, and the suggested limit."""
        n, groups = len(self.lengths), len(self.lengths) // self.group_size
        lines = [f"{n} responses, {groups} groups of {self.group_size}; max_new_tokens {self.max_new_tokens},"
                 f" {sum(self.truncated)} truncated ({sum(self.truncated) / n:.0%}); lengths: min {min(self.lengths)},"
                 f" median {self.quantile(0.5):.0f}, max {max(self.lengths)}", "",
                 "| tokens | count | |", "|---|---|---|"]
        peak = max(count for _, _, count in self.histogram())
        for low, high, count in self.histogram():
            lines.append(f"| {low}-{high - 1} | {count} | {'#' * max(1, round(30 * count / peak))} |")
        lines += ["", "| l | exceed share | groups where length varies |", "|---|---|---|"]
        for limit in limits or self.candidates():
            lines.append(f"| {limit} | {self.exceed_share(limit):.3f} | {self.length_varying_share(limit):.3f} |")
        lines += ["", "| reward | mean | groups where it varies |", "|---|---|---|"]
        for name, values in self.rewards.items():
            shown = f"{name} (l = {self.limit:g})" if name == "length" and self.limit else name
            lines.append(f"| {shown} | {sum(values) / n:.3f} | {self.varying_share(values):.3f} |")
        best = self.suggest()
        lines += ["", f"suggested l (exceed share in {TARGET_EXCEED[0]:.0%}-{TARGET_EXCEED[1]:.0%}, closest to"
                  f" {sum(TARGET_EXCEED) / 2:.0%}): {best if best is not None else 'none; no limit gives that share'}"]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"lengths": self.lengths, "truncated": self.truncated, "rewards": self.rewards,
                "group_size": self.group_size, "max_new_tokens": self.max_new_tokens, "limit": self.limit,
                "suggested_limit": self.suggest(), **self.meta}


def length_profile(config: dict, batches: int = 1, log=print) -> LengthProfile:
    """Sample the rollouts of the first `batches` steps of `config` (a checked local-engine
    run config) as its run would, from the same starting weights, with its sampling settings,
    without training between them, and score them with its rewards."""
    import torch

    from gdpo_nemo.engines.local import device as dev
    from gdpo_nemo.engines.local import trainer
    from gdpo_nemo.engines.local.prompts import DataOrder, left_pad, load_prompt_sets
    from gdpo_nemo.engines.local.scoring import score

    grpo, local = config["grpo"], config["gdpo"]["local"]
    device = trainer._seed_and_pick_device(config)
    model, tokenizer, start_weights = trainer.load_initial_policy(config, log=log)
    model.to(device=device, dtype=dev.weight_dtype(local["dtype"])).eval()
    train_set, _, reward_set = load_prompt_sets({**config, "grpo": {**grpo, "val_period": 0, "val_at_start": False,
                                                                      "val_at_end": False}}, tokenizer, log=log)
    order = DataOrder(len(train_set), grpo["num_prompts_per_step"], config["data"]["shuffle"], grpo["seed"])
    # What trainer.sample reads from a run's state, for the same rollouts as its first steps.
    state = SimpleNamespace(config=config, model=model, device=device, pad_id=tokenizer.pad_token_id,
                            stop_ids=trainer.stop_token_ids(config, tokenizer),
                            autocast=lambda: dev.autocast(device, local["autocast"]))
    generator = dev.sampling_generator(device, grpo["seed"])
    temperature = config["policy"]["generation"]["temperature"]
    lengths, truncated, rewards, prompts = [], [], {}, []
    max_new_tokens = config["policy"]["generation"]["max_new_tokens"]
    with torch.no_grad():
        for batch in range(batches):
            indices = order.next_batch()
            examples = [train_set.examples[i] for i in indices]
            prompt_ids, prompt_mask = left_pad([train_set.ids[i] for i in indices], state.pad_id)
            rollouts = trainer.sample(state, prompt_ids, prompt_mask, grpo["num_generations_per_prompt"], temperature,
                                      None, None, generator)
            scores, _ = score(reward_set, tokenizer, rollouts, [e for e in examples
                                                                for _ in range(grpo["num_generations_per_prompt"])], log=log)
            prompts += [{"ground_truth": e.ground_truth, **{k: v for k, v in (e.meta or {}).items() if k == "family"}}
                        for e in examples]
            lengths += rollouts.lengths.tolist()
            truncated += rollouts.truncated.tolist()
            for name, values in scores.items():
                rewards.setdefault(name, []).extend(values.tolist())
            log(f"calibration: batch {batch + 1}/{batches} sampled")
    return LengthProfile(lengths=lengths, truncated=[bool(t) for t in truncated], rewards=rewards,
                         group_size=grpo["num_generations_per_prompt"], max_new_tokens=max_new_tokens,
                         limit=config["gdpo"]["length_limit"],
                         meta={"start_weights": start_weights, "seed": grpo["seed"], "batches": batches,
                               "prompts": prompts})
