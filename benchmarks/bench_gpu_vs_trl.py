"""One GPU: the local engine vs TRL's GRPOTrainer at the GPU study's shape.

    PYTHONPATH=. python benchmarks/bench_gpu_vs_trl.py [--steps 5] [any bench_vs_trl.py option]

benchmarks/bench_vs_trl.py with the GPU setting as defaults: SmolLM2-135M-Instruct, CUDA,
bf16 (fp32 weights and bf16 autocast in both trainers: TRL `bf16=True`, ours
`gdpo.local.autocast=bfloat16`), 32 prompts x 8 rollouts x 128 new tokens (EOS ignored, so
both generate 32,768 tokens a step), micro-batch 32, one optimizer update per step, 5 steps
of which the first is not timed. Everything else is matched as that file's docstring says.

Prints seconds per step, generation tokens/s and peak GPU memory of each, and the ratios
ours / TRL. Target: step time ratio <= 0.5. Later options override the defaults, so
`--device cpu --dtype float32 --model builtin:tiny --prompts 2 --generations 2
--max-new-tokens 4 --micro-batch 2 --steps 2` checks the script on a CPU (the tests do).
Needs the `bench` extra (trl).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_vs_trl  # noqa: E402  (a sibling script, not a package)

GPU_DEFAULTS = [
    "--model", "builtin:smollm2-135m",
    "--device", "cuda",
    "--dtype", "bfloat16",
    "--prompts", "32",
    "--generations", "8",
    "--max-new-tokens", "128",
    "--micro-batch", "32",
    "--steps", "5",
    "--target", "0.5",
]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return bench_vs_trl.main([*GPU_DEFAULTS, *argv])  # argparse: the last value of an option wins


if __name__ == "__main__":
    sys.exit(main())
