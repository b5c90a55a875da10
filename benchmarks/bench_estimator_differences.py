"""How large each deliberate difference from the peers is on realistic rewards.

For each peer and setting: the robust default (`compute_advantages(..., preset=P)`) against
the peer's own arithmetic (`strict=True`, which tests/test_peer_conformance.py checks
against the peer's code), on simulated batches shaped like the paper's rewards. Prints the
largest |difference|, the share of samples differing by more than 1e-5, and the largest
|advantage| the peer gives. The table of docs/estimators.md is this output.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_estimator_differences.py [--prompts 64] [--group-size 8] [--seeds 20]
"""

from __future__ import annotations

import argparse

import torch

from gdpo_nemo.estimators import compute_advantages


def float32(values: torch.Tensor) -> torch.Tensor:
    return values.to(torch.float32).to(torch.float64)


def pass_rate_and_format(generator, prompts: int, group_size: int) -> dict:
    """Code task shape: pass rate over 3 tests (k/3) and a binary format reward; each prompt
    has its own difficulty, so many groups are constant at 1/3 or 2/3."""
    p = torch.rand(prompts, 1, generator=generator).expand(prompts, group_size)
    passed = torch.binomial(torch.full((prompts, group_size), 3.0), p, generator=generator)
    fmt = (torch.rand(prompts, group_size, generator=generator) < 0.9).double()
    return {"format": fmt.flatten(), "pass_rate": float32((passed / 3).flatten())}


def toolrl_shaped(generator, prompts: int, group_size: int) -> dict:
    """Tool-calling shape (ToolRL): format in {0, 1}, correctness in [-3, 3] from the share of
    matching calls and arguments (k/m with m in 1..5); the policy often repeats one answer."""
    denominators = torch.randint(1, 6, (prompts, 1), generator=generator).double().expand(prompts, group_size)
    k = torch.floor(torch.rand(prompts, group_size, generator=generator) * (denominators + 1))
    repeat = torch.rand(prompts, 1, generator=generator) < 0.5
    k = torch.where(repeat, k[:, :1].expand_as(k), k)
    correctness = float32(-3 + 6 * k / denominators)
    fmt = (torch.rand(prompts, group_size, generator=generator) < 0.8).double()
    return {"format": fmt.flatten(), "correctness": correctness.flatten()}


def math_and_length(generator, prompts: int, group_size: int) -> dict:
    """Math with a length reward: correctness binary, length 1 - tokens / 4000 (continuous)."""
    correct = (torch.rand(prompts, group_size, generator=generator) < 0.5).double()
    tokens = torch.randint(200, 4000, (prompts, group_size), generator=generator).double()
    return {"correctness": correct.flatten(), "length": float32((1 - tokens / 4000).flatten())}


SHAPES = {"pass-rate + format": pass_rate_and_format, "ToolRL-shaped": toolrl_shaped,
          "correctness + length": math_and_length}
SETTINGS = [
    ("nemo_rl", "grpo", {"leave_one_out": True}),
    ("nemo_rl", "grpo", {}),
    ("nemo_rl", "gdpo", {"leave_one_out": True}),
    ("nemo_rl", "gdpo", {}),
    ("trl", "grpo", {}),
    ("trl", "gdpo", {}),
    ("verl", "grpo", {}),
    ("verl", "gdpo", {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    group_ids = torch.arange(args.prompts).repeat_interleave(args.group_size)
    print(f"{args.seeds} batches of {args.prompts} prompts x {args.group_size} per shape")
    print("| peer | estimator | options | rewards | max abs diff | samples > 1e-5 | peer's max abs advantage |")
    print("|---|---|---|---|---|---|---|")
    for preset, estimator, options in SETTINGS:
        for shape, make in SHAPES.items():
            worst, differing, total, largest = 0.0, 0, 0, 0.0
            for seed in range(args.seeds):
                rewards = make(torch.Generator().manual_seed(seed), args.prompts, args.group_size)
                ours = compute_advantages(rewards, group_ids, estimator, preset=preset, **options).double()
                peer = compute_advantages(rewards, group_ids, estimator, preset=preset, strict=True, **options).double()
                diff = (ours - peer).abs()
                worst = max(worst, float(diff.max()))
                differing += int((diff > 1e-5).sum())
                total += diff.numel()
                largest = max(largest, float(peer.abs().max()))
            loo = "leave-one-out" if options.get("leave_one_out") else "-"
            print(f"| {preset} | {estimator} | {loo} | {shape} | {worst:.2g} | {differing / total:.1%} | {largest:.3g} |")


if __name__ == "__main__":
    main()
