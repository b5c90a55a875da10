"""Evaluation of trained checkpoints on the paper's benchmarks (docs/eval.md)."""
