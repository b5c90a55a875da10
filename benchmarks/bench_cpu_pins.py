"""Benchmark: what the CPU pins (gdpo_nemo.runs.cpu_pins) cost in speed, against torch's own
choices on the same machine in the same run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_cpu_pins.py [--repeats 3 --threads 1]

Each setting runs in a fresh process (the code paths are chosen at a process's first kernel),
on the embedded SmolLM2-135M-Instruct in fp32 on one thread, the local engine's two costs:
sampling 8 prompts x 4 completions of 48 new tokens (generation is most of a CPU step), and
one forward and backward pass of the policy loss's shape over the 32 sequences. Settings:

- native: torch's own choices (GDPO_NEMO_CPU_NUMERICS=native), the peer every ratio is against;
- aten-avx2: ATen held to AVX2, oneMKL left alone;
- pinned: the project's default, ATen AVX2 + oneMKL COMPATIBLE + oneDNN AVX2.

Prints seconds (best of --repeats) and the ratio to native for each part, and a digest of
each setting's logits, so a reader sees the pins change the code paths on this machine.
Asserts no time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

SETTINGS = {
    "native": {"GDPO_NEMO_CPU_NUMERICS": "native"},
    "aten-avx2": {"GDPO_NEMO_CPU_NUMERICS": "native", "ATEN_CPU_CAPABILITY": "avx2"},
    "pinned": {"GDPO_NEMO_CPU_NUMERICS": "pinned"},
}

CHILD = r"""
import hashlib, json, sys, time
from gdpo_nemo.runs import cpu_pins
cpu_pins.pin()
import torch
from gdpo_nemo.engines.local.generation import sample_completions
from gdpo_nemo.engines.local.models import load_policy
repeats, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
model, tokenizer = load_policy("builtin:smollm2-135m", log=lambda m: None)
prompts = [f"What is {a} + {b}? Answer with the number." for a, b in zip(range(11, 19), range(40, 48))]
texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
         for p in prompts]
batch = tokenizer(texts, return_tensors="pt", padding=True)
best_gen, best_train = float("inf"), float("inf")
for _ in range(repeats):
    started = time.perf_counter()
    with torch.no_grad():
        out = sample_completions(model, batch["input_ids"], batch["attention_mask"], group_size=4, max_new_tokens=48,
                                 temperature=1.0, stop_token_ids=[-1], pad_token_id=tokenizer.pad_token_id,
                                 generator=torch.Generator().manual_seed(0))
    best_gen = min(best_gen, time.perf_counter() - started)
    ids = torch.cat([out.prompt_ids, out.completion_ids], 1)
    mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
    started = time.perf_counter()
    model.train()
    logits = model(input_ids=ids, attention_mask=mask).logits
    loss = torch.log_softmax(logits.float(), -1).mean()
    loss.backward()
    model.zero_grad(set_to_none=True)
    model.eval()
    best_train = min(best_train, time.perf_counter() - started)
print(json.dumps({"generation_s": best_gen, "train_pass_s": best_train, "state": cpu_pins.state(),
                  "digest": hashlib.sha256(logits.detach().numpy().tobytes()).hexdigest()[:12]}))
"""


def run_setting(name: str, repeats: int, threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    env.update(SETTINGS[name])
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", CHILD, str(repeats), str(threads)], env=env, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{name}: failed\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from gdpo_nemo.runs.provenance import machine

    print(f"machine: {machine()}; {args.threads} torch thread(s), best of {args.repeats}")
    results = {name: run_setting(name, args.repeats, args.threads) for name in SETTINGS}
    base = results["native"]
    print(f"{'setting':<10} {'ATen':<8} {'oneMKL':<11} {'generation s':>12} {'ratio':>6} {'train pass s':>12} {'ratio':>6}"
          "  logits digest")
    for name, found in results.items():
        state = found["state"]
        print(f"{name:<10} {state['cpu_capability']:<8} {str(state['mkl_branch']):<11} {found['generation_s']:>12.2f}"
              f" {found['generation_s'] / base['generation_s']:>6.2f} {found['train_pass_s']:>12.2f}"
              f" {found['train_pass_s'] / base['train_pass_s']:>6.2f}  {found['digest']}")


if __name__ == "__main__":
    main()
