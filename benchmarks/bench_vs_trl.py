"""Seconds per GRPO step: the local engine vs TRL's GRPOTrainer, same work, same process.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_vs_trl.py [--model builtin:smollm2-135m]
        [--steps 4] [--prompts 4] [--generations 4] [--max-new-tokens 64]
        [--device cpu|cuda] [--dtype float32|bfloat16] [--micro-batch 8]

Both trainers get the same model (fresh copies of `--model`), the same GSM8K-style prompts
(our offline set), the same G, the same number of new tokens per completion (EOS ignored,
so every completion is exactly `--max-new-tokens` long and both generate the same number of
tokens), the same three rewards, GDPO advantages with TRL's numerics
(`multi_objective_aggregation="normalize_then_sum"` vs `gdpo.estimator=gdpo,
gdpo.preset=trl`), the same loss settings (token-level loss over the global batch = TRL's
`loss_type="dapo"`, clip 0.2, beta 0: no reference model), the same optimizer (AdamW, constant
LR, grad clip 1.0), the same micro-batch (`--micro-batch`, 8) and optimizer updates (one per
step), on the same device with the same precision (`--dtype bfloat16`: fp32 weights and bf16
autocast for both, TRL's `bf16=True` and our `gdpo.local.autocast=bfloat16`).

Prints, for each, the wall seconds per step (median and mean; the first step is a warm-up and
not counted) and the CPU seconds per step (all threads; `time.process_time`), the generated
tokens and optimizer updates per step, generation tokens per second (median over the timed
steps: generated tokens / seconds inside generation; TRL's measured around its `generate`
call), the peak GPU memory of each trainer's run on CUDA (`torch.cuda.max_memory_allocated`,
reset between the two), and the ratios ours / TRL of the medians. Target: ratio <= 0.8 (CPU;
benchmarks/bench_gpu_vs_trl.py has the GPU setting and target). Needs `pip install trl` (the
`bench` extra). On a shared machine other
processes inflate wall time unevenly (spikes); the median and the CPU-time ratio are the
robust figures, and both trainers run in one process on the same machine.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LEARNING_RATE = 1e-6


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="builtin:smollm2-135m")
    parser.add_argument("--steps", type=int, default=4, help="steps per trainer (the first is not timed)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--order", choices=("trl-first", "ours-first"), default="trl-first")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="bfloat16: fp32 weights, bf16 autocast (both trainers)")
    parser.add_argument("--micro-batch", type=int, default=8, help="rows per forward/backward pass (both trainers)")
    parser.add_argument("--target", type=float, default=0.8, help="the step-time ratio the project aims at (printed)")
    args = parser.parse_args(argv)
    if (args.prompts * args.generations) % args.micro_batch:
        parser.error(f"--micro-batch {args.micro_batch} must divide prompts x generations = {args.prompts * args.generations}")
    return args


def ours_config(args, run_dir: Path) -> dict:
    from gdpo_nemo.engines.local.config import load_run_config

    overrides = [
        f"policy.model_name={args.model}",
        f"grpo.num_prompts_per_step={args.prompts}",
        f"grpo.num_generations_per_prompt={args.generations}",
        f"grpo.max_num_steps={args.steps}",
        f"grpo.seed={args.seed}",
        f"policy.generation.max_new_tokens={args.max_new_tokens}",
        f"policy.train_global_batch_size={args.prompts * args.generations}",
        f"policy.train_micro_batch_size={args.micro_batch}",
        f"policy.logprob_batch_size={args.micro_batch}",
        f"gdpo.local.device={args.device}",
        f"gdpo.local.autocast={'bfloat16' if args.dtype == 'bfloat16' else 'null'}",
        "gdpo.local.deterministic=false",  # TRL does not ask CUDA for deterministic kernels either
        f"policy.generation_batch_size={args.prompts * args.generations}",
        f"policy.optimizer.kwargs.lr={LEARNING_RATE}",
        "policy.max_total_sequence_length=1024",
        "data.max_input_seq_length=null",
        "gdpo.estimator=gdpo",
        "gdpo.preset=trl",
        "gdpo.std_ddof=null",
        "gdpo.eps=null",
        "gdpo.local.ignore_eos=true",
        "gdpo.local.warm_start.enabled=false",
        "gdpo.local.progress=false",
        "checkpointing.enabled=false",
        "loss_fn.reference_policy_kl_penalty=0.0",
        f"logger.log_dir={run_dir}",
    ]
    config, _ = load_run_config(REPO / "configs" / "local" / "quickstart_gsm8k.yaml", overrides)
    return config


def peak_memory_gib(device: str, reset: bool = False) -> float:
    """Peak CUDA memory allocated since the last reset (GiB); NaN off CUDA."""
    import torch

    if device != "cuda":
        return float("nan")
    if reset:
        import gc

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return torch.cuda.max_memory_allocated() / 1024 ** 3


def run_ours(args, workdir: Path) -> dict:
    from gdpo_nemo.engines.local.trainer import train
    from gdpo_nemo.runs.rundir import read_metrics

    run_dir = workdir / "ours"
    peak_memory_gib(args.device, reset=True)
    train(ours_config(args, workdir), run_dir)
    records = read_metrics(run_dir)
    tokens = [r["train/global_valid_toks"] for r in records]
    return {"seconds": [r["timing/train/total_step_time"] for r in records[1:]],
            "cpu_seconds": [r["timing/train/total_step_cpu_time"] for r in records[1:]],
            "generation_tokens_per_sec": [r["timing/train/generation_tokens_per_sec"] for r in records[1:]],
            "peak_memory_gib": peak_memory_gib(args.device),
            "tokens_per_step": statistics.mean(tokens), "updates_per_step": 1}


def run_trl(args, workdir: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from gdpo_nemo.engines.local.models import load_policy
    from gdpo_nemo.rewards import get_reward_set
    from gdpo_nemo.tasks import get_task

    peak_memory_gib(args.device, reset=True)
    model, tokenizer = load_policy(args.model, seed=args.seed)
    model.to(args.device)
    task = get_task("gsm8k")
    reward_set = get_reward_set(task.name)
    examples = task.load("train", limit=args.prompts * args.steps, seed=args.seed)
    dataset = Dataset.from_list([{"prompt": e.messages, "ground_truth": e.ground_truth} for e in examples])

    def reward_function(name):
        def reward(completions, ground_truth, **_):
            texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
            return reward_set.score_batch(texts, list(ground_truth))[name]

        reward.__name__ = name
        return reward

    step_ends, cpu_ends, tokens, updates, generation = [], [], [], [], []
    generate = model.generate

    def timed_generate(*positional, **keywords):
        """TRL's generation call, timed (synchronized on CUDA): (seconds, new tokens)."""
        if args.device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        out = generate(*positional, **keywords)
        if args.device == "cuda":
            torch.cuda.synchronize()
        prompt = keywords.get("input_ids", positional[0] if positional else None)
        sequences = getattr(out, "sequences", out)
        new_tokens = (sequences.shape[1] - prompt.shape[1]) * sequences.shape[0]  # EOS ignored: rows are full
        generation.append((time.perf_counter() - started, new_tokens))
        return out

    model.generate = timed_generate  # an instance attribute: TRL calls it on the unwrapped model

    class Timer(TrainerCallback):
        def on_train_begin(self, *_, **__):
            step_ends.append(time.perf_counter())
            cpu_ends.append(time.process_time())

        def on_step_end(self, *_, **__):
            step_ends.append(time.perf_counter())
            cpu_ends.append(time.process_time())
            updates.append(1)

        def on_log(self, _args, _state, _control, logs=None, **__):
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"] * args.prompts * args.generations)

    config = GRPOConfig(
        output_dir=str(workdir / "trl"),
        use_cpu=args.device == "cpu",
        bf16=args.dtype == "bfloat16",
        seed=args.seed,
        max_steps=args.steps,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.prompts * args.generations // args.micro_batch,
        num_generations=args.generations,
        max_completion_length=args.max_new_tokens,
        generation_kwargs={"min_new_tokens": args.max_new_tokens},  # EOS ignored, as ours
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        multi_objective_aggregation="normalize_then_sum",
        num_iterations=1,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_dropout=True,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward_function(n) for n in reward_set.names],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Timer()],
    )
    with torch.random.fork_rng(devices=[]):
        trainer.train()
    durations = [b - a for a, b in zip(step_ends, step_ends[1:])]
    cpu = [b - a for a, b in zip(cpu_ends, cpu_ends[1:])]
    # TRL generates a step's completions in one call (steps_per_generation = accumulation steps)
    return {"seconds": durations[1:], "cpu_seconds": cpu[1:],
            "generation_tokens_per_sec": [n / max(s, 1e-9) for s, n in generation[1:]],
            "peak_memory_gib": peak_memory_gib(args.device),
            "tokens_per_step": statistics.mean(tokens) if tokens else float("nan"),
            "updates_per_step": sum(updates) / max(len(durations), 1)}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.steps < 2:
        raise SystemExit("--steps must be >= 2 (the first step is a warm-up)")
    import torch

    print(f"bench_vs_trl: model {args.model}, {args.prompts} prompts x {args.generations} generations x "
          f"{args.max_new_tokens} new tokens, {args.steps} steps each (first not timed), micro-batch "
          f"{args.micro_batch}, {args.device} {args.dtype}, torch threads {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory(prefix="bench_vs_trl_") as tmp:
        workdir = Path(tmp)
        order = [("TRL GRPOTrainer", run_trl), ("gdpo_nemo local", run_ours)]
        if args.order == "ours-first":
            order.reverse()
        results = {name: fn(args, workdir) for name, fn in order}
    for name, result in results.items():
        print(f"{name:>16}: wall {statistics.median(result['seconds']):7.2f} s/step median, "
              f"{statistics.mean(result['seconds']):7.2f} mean (steps {', '.join(f'{s:.1f}' for s in result['seconds'])}); "
              f"CPU {statistics.median(result['cpu_seconds']):7.2f} s/step median; "
              f"{result['tokens_per_step']:.0f} generated tokens/step, {result['updates_per_step']:.0f} optimizer update/step; "
              f"generation {_median(result['generation_tokens_per_sec']):.0f} tokens/s; "
              f"peak GPU memory {result['peak_memory_gib']:.2f} GiB")
    ours, trl = results["gdpo_nemo local"], results["TRL GRPOTrainer"]
    wall = statistics.median(ours["seconds"]) / statistics.median(trl["seconds"])
    cpu = statistics.median(ours["cpu_seconds"]) / statistics.median(trl["cpu_seconds"])
    speed = _median(ours["generation_tokens_per_sec"]) / _median(trl["generation_tokens_per_sec"])
    memory = ours["peak_memory_gib"] / trl["peak_memory_gib"]
    print(f"ratio ours / TRL: wall {wall:.2f}, CPU {cpu:.2f} (median seconds per step; target <= {args.target:.2f}); "
          f"generation tokens/s {speed:.2f}x; peak GPU memory {memory:.2f}x")
    return 0


def _median(values) -> float:
    return statistics.median(values) if values else float("nan")


if __name__ == "__main__":
    sys.exit(main())
