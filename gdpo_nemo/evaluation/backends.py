"""Generation backends of `gdpo-nemo eval`: HF (always) and vLLM (when installed).

Both take chat prompts (lists of messages) and return, per prompt, `samples` responses as
`Response(text, num_tokens, truncated)`. A model that never stops is cut at
`max_new_tokens` and marked truncated; nothing waits longer than that.

`--model` may name:
- ``builtin:smollm2-135m`` / ``builtin:tiny`` (gdpo_nemo.engines.local.models),
- a local-engine checkpoint ``<run_dir>/checkpoints/step_<N>`` (the run's base model with
  the checkpoint's weights; the run dir and step also name the outputs),
- a transformers checkpoint directory, or a hub name for users who have the hub.

vLLM (`VLLMBackend`) is an adapter over `vllm.LLM.generate` with `SamplingParams(n=samples,
temperature, top_p, max_tokens, seed)`; vllm is not installable on the CPU development
machine, so that adapter is not exercised there (docs/eval.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("hf", "vllm")
_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass
class Response:
    text: str
    num_tokens: int
    truncated: bool


@dataclass
class ModelRef:
    """What `--model` points to: the name to load, and the run dir / step it belongs to."""

    name: str
    checkpoint: Path | None = None  # a local-engine checkpoint dir with model.safetensors
    run_dir: Path | None = None
    step: int | None = None


def resolve_model(model: str) -> ModelRef:
    """Recognise a local-engine checkpoint (its run's config.yaml names the base model)."""
    path = Path(model)
    match = _STEP_DIR.match(path.name)
    if match and (path / "model.safetensors").is_file() and path.parent.name == "checkpoints":
        run_dir = path.parent.parent
        config_file = run_dir / "config.yaml"
        if not config_file.is_file():
            raise ValueError(f"--model {model}: a local-engine checkpoint, but {config_file} (its run's config) is missing")
        import yaml

        config = yaml.safe_load(config_file.read_text())
        return ModelRef(config["policy"]["model_name"], path, run_dir, int(match.group(1)))
    return ModelRef(model)


class HFBackend:
    """transformers model + our batched KV-cached sampler (gdpo_nemo.engines.local.generation)."""

    def __init__(self, model: str, *, seed: int = 0, device: str = "cpu", batch_size: int = 16, log=print):
        import torch

        from gdpo_nemo.engines.local.models import load_policy

        self.ref = resolve_model(model)
        self.model, self.tokenizer = load_policy(self.ref.name, seed=seed, log=log)
        if self.ref.checkpoint is not None:
            from safetensors.torch import load_file

            weights = load_file(str(self.ref.checkpoint / "model.safetensors"))
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
            missing = [k for k in missing if not k.endswith("lm_head.weight")]
            if missing or unexpected:
                raise ValueError(f"--model {model}: checkpoint does not fit {self.ref.name} "
                                 f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
        self.device = torch.device("cuda" if device == "cuda" else "cpu")
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        self.seed = seed

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts: list, *, samples: int, max_new_tokens: int, temperature: float, top_p: float,
                 progress=None) -> list:
        """[[Response] * samples for each prompt]. `progress(n)` is called as prompts finish."""
        import torch

        from gdpo_nemo.engines.local.generation import sample_completions

        generator = torch.Generator(device=self.device).manual_seed(self.seed)
        tokenizer = self.tokenizer
        out = []
        per_chunk = max(1, self.batch_size // max(samples, 1))
        for start in range(0, len(prompts), per_chunk):
            chunk = prompts[start:start + per_chunk]
            texts = [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in chunk]
            encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                rollouts = sample_completions(
                    self.model, encoded["input_ids"].to(self.device), encoded["attention_mask"].to(self.device),
                    group_size=samples, max_new_tokens=max_new_tokens, temperature=temperature,
                    top_p=top_p if top_p < 1.0 else None, stop_token_ids=[tokenizer.eos_token_id],
                    pad_token_id=tokenizer.pad_token_id, generator=generator, batch_size=self.batch_size)
            decoded = tokenizer.batch_decode(
                [ids[mask.bool()] for ids, mask in zip(rollouts.completion_ids, rollouts.completion_mask)],
                skip_special_tokens=True)
            lengths = rollouts.completion_mask.sum(-1).tolist()
            truncated = rollouts.truncated.tolist()
            for p in range(len(chunk)):
                rows = range(p * samples, (p + 1) * samples)
                out.append([Response(decoded[r], int(lengths[r]), bool(truncated[r])) for r in rows])
            if progress is not None:
                progress(len(chunk))
        return out


class VLLMBackend:
    """vLLM adapter (GPU). Not exercised on the CPU development machine."""

    def __init__(self, model: str, *, seed: int = 0, device: str = "cuda", batch_size: int = 0, log=print):
        try:
            from vllm import LLM
        except ImportError:
            raise ValueError("--backend vllm needs the vllm package (a GPU machine); use --backend hf here") from None
        self.ref = resolve_model(model)
        if self.ref.checkpoint is not None:
            raise ValueError("--backend vllm reads transformers checkpoints; a local-engine checkpoint needs --backend hf")
        self.llm = LLM(model=self.ref.name, seed=seed)
        self.tokenizer = self.llm.get_tokenizer()
        self.seed = seed

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts: list, *, samples: int, max_new_tokens: int, temperature: float, top_p: float,
                 progress=None) -> list:
        from vllm import SamplingParams

        params = SamplingParams(n=samples, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=self.seed)
        results = self.llm.chat(prompts, params, use_tqdm=False)
        out = [[Response(c.text, len(c.token_ids), c.finish_reason == "length") for c in r.outputs] for r in results]
        if progress is not None:
            progress(len(prompts))
        return out


def make_backend(name: str, model: str, **options):
    if name not in BACKENDS:
        raise ValueError(f"--backend {name!r} is not known; accepted: {', '.join(BACKENDS)}")
    return (HFBackend if name == "hf" else VLLMBackend)(model, **options)
