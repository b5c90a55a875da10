"""Generation backends of `gdpo-nemo eval`: HF (always) and vLLM (when installed).

Both take chat prompts (lists of messages) and return, per prompt, `samples` responses as
`Response(text, num_tokens, truncated, prompt_tokens, error)`. A model that never stops is
cut at `max_new_tokens` and marked truncated; nothing waits longer than that. A prompt
whose length plus `max_new_tokens` exceeds the model's context gets only the room left (and
is marked truncated when it fills it); a prompt that fills the context by itself is not
generated at all: its responses are empty, truncated, and carry an `error` naming the
lengths (`token_budgets`). Either way the caller scores them as failures, never a crash.

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

from dataclasses import dataclass
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.runs import rundir

BACKENDS = ("hf", "vllm")


@dataclass
class Response:
    """One generated response. `num_tokens`: generated tokens; `truncated`: it hit the token
    budget without a stop token (or was not generated: `error`)."""

    text: str
    num_tokens: int
    truncated: bool
    prompt_tokens: int = 0
    error: str | None = None


def token_budgets(prompt_lengths: list, max_new_tokens: int, context_length: int | None) -> list:
    """New-token budget per prompt: `max_new_tokens`, less where prompt + completion would
    pass `context_length` (tokens); 0 where the prompt leaves no room at all."""
    if context_length is None:
        return [max_new_tokens] * len(prompt_lengths)
    return [max(0, min(max_new_tokens, context_length - n)) for n in prompt_lengths]


def length_chunks(indices: list, lengths: list, per_chunk: int, max_padding: float = 0.5) -> list:
    """`indices` in chunks of at most `per_chunk` prompts of similar length: sorted by length,
    a chunk closes before its left padding would exceed `max_padding` times its real tokens
    (a 3,000-token prompt padded beside 400-token ones would multiply their prefill cost)."""
    chunks: list = []
    chunk: list = []
    real = 0
    for i in sorted(indices, key=lambda i: lengths[i]):
        n = lengths[i]  # the longest so far: every row of the chunk is padded to it
        if chunk and (len(chunk) >= per_chunk or n * (len(chunk) + 1) > (1 + max_padding) * (real + n)):
            chunks.append(chunk)
            chunk, real = [], 0
        chunk.append(i)
        real += n
    return chunks + ([chunk] if chunk else [])


def no_room(prompt_tokens: int, context_length: int, samples: int) -> list:
    """The responses of a prompt that fills the model's context by itself."""
    error = f"prompt of {prompt_tokens} tokens leaves no room in the model's context of {context_length} tokens"
    return [Response("", 0, True, prompt_tokens, error) for _ in range(samples)]


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
    match = rundir.STEP_DIR.match(path.name)
    if match and (path / "model.safetensors").is_file() and path.parent.name == rundir.CHECKPOINTS_DIR:
        run_dir = path.parent.parent
        config = rundir.read_config(run_dir)
        if config is None:
            raise UserError(f"--model {model}: a local-engine checkpoint, but {rundir.config_path(run_dir)}"
                             " (its run's config) is missing")
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
            from gdpo_nemo.engines.local.checkpoint import load_weights

            load_weights(self.ref.checkpoint, self.model)
        self.device = torch.device("cuda" if device == "cuda" else "cpu")
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        self.seed = seed
        self.context_length = getattr(self.model.config, "max_position_embeddings", None)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts: list, *, samples: int, max_new_tokens: int, temperature: float, top_p: float,
                 progress=None) -> list:
        """[[Response] * samples for each prompt]. `progress(n)` is called as prompts finish.

        Prompts that fit the context with `max_new_tokens` to spare decode together in chunks
        of `batch_size` sequences; the few that do not get their own, smaller budget."""
        import torch

        # seeded per call: a benchmark's samples do not depend on what ran before it
        generator = torch.Generator(device=self.device).manual_seed(self.seed)
        tokenizer = self.tokenizer
        encoded = [tokenizer(tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True),
                             add_special_tokens=False)["input_ids"] for m in prompts]
        budgets = token_budgets([len(ids) for ids in encoded], max_new_tokens, self.context_length)
        out: list = [None] * len(prompts)
        full = [i for i, b in enumerate(budgets) if b == max_new_tokens]
        per_chunk = max(1, self.batch_size // max(samples, 1))
        groups = [(chunk, max_new_tokens) for chunk in length_chunks(full, [len(ids) for ids in encoded], per_chunk)]
        groups += [([i], b) for i, b in enumerate(budgets) if 0 < b < max_new_tokens]
        for i, b in enumerate(budgets):
            if b == 0:
                out[i] = no_room(len(encoded[i]), self.context_length, samples)
                if progress is not None:
                    progress(1)
        for indices, budget in groups:
            for i, responses in zip(indices, self._sample([encoded[i] for i in indices], samples, budget,
                                                          temperature, top_p, generator)):
                out[i] = responses
            if progress is not None:
                progress(len(indices))
        return out

    def _sample(self, prompt_ids: list, samples: int, max_new_tokens: int, temperature: float, top_p: float,
                generator) -> list:
        import torch

        from gdpo_nemo.engines.local.generation import sample_completions

        tokenizer = self.tokenizer
        batch = tokenizer.pad({"input_ids": prompt_ids}, return_tensors="pt")
        with torch.no_grad():
            rollouts = sample_completions(
                self.model, batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device),
                group_size=samples, max_new_tokens=max_new_tokens, temperature=temperature,
                top_p=top_p if top_p < 1.0 else None, stop_token_ids=[tokenizer.eos_token_id],
                pad_token_id=tokenizer.pad_token_id, generator=generator, batch_size=self.batch_size)
        decoded = tokenizer.batch_decode(
            [ids[mask.bool()] for ids, mask in zip(rollouts.completion_ids, rollouts.completion_mask)],
            skip_special_tokens=True)
        lengths = rollouts.completion_mask.sum(-1).tolist()
        truncated = rollouts.truncated.tolist()
        return [[Response(decoded[r], int(lengths[r]), bool(truncated[r]), len(prompt_ids[p]))
                 for r in range(p * samples, (p + 1) * samples)] for p in range(len(prompt_ids))]


class VLLMBackend:
    """vLLM adapter (GPU): `vllm.LLM.chat` with one `SamplingParams(n=samples, ...)` per prompt.
    Not exercised on the CPU development machine (docs/eval.md)."""

    def __init__(self, model: str, *, seed: int = 0, device: str = "cuda", batch_size: int = 0, log=print):
        try:
            from vllm import LLM
        except ImportError:
            raise UserError("--backend vllm needs the vllm package (a GPU machine); use --backend hf here") from None
        from gdpo_nemo.engines.local.models import BUILTIN_PREFIX, SMOLLM2, is_builtin, smollm2_checkpoint

        self.ref = resolve_model(model)
        if self.ref.checkpoint is not None:
            raise UserError("--backend vllm reads transformers checkpoints; a local-engine checkpoint needs --backend hf")
        name = self.ref.name
        if name == BUILTIN_PREFIX + SMOLLM2:
            name = str(smollm2_checkpoint(log=log))  # the plain fp32 copy of the embedded model
        elif is_builtin(name):
            raise UserError(f"--backend vllm: {name} is built in memory and has no files vLLM could load;"
                             " use --backend hf")
        self.llm = LLM(model=name, seed=seed)
        self.tokenizer = self.llm.get_tokenizer()
        self.context_length = self.llm.llm_engine.model_config.max_model_len
        self.seed = seed

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts: list, *, samples: int, max_new_tokens: int, temperature: float, top_p: float,
                 progress=None) -> list:
        """[[Response] * samples for each prompt]; the same budgets as `HFBackend`."""
        from vllm import SamplingParams

        lengths = [self.count_tokens(self.tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True))
                   for m in prompts]
        budgets = token_budgets(lengths, max_new_tokens, self.context_length)
        run = [i for i, b in enumerate(budgets) if b > 0]
        params = [SamplingParams(n=samples, temperature=temperature, top_p=top_p, max_tokens=budgets[i], seed=self.seed)
                  for i in run]
        results = self.llm.chat([prompts[i] for i in run], params, use_tqdm=False) if run else []
        out = [no_room(n, self.context_length, samples) for n in lengths]
        for i, result in zip(run, results):
            out[i] = [Response(c.text, len(c.token_ids), c.finish_reason == "length", lengths[i]) for c in result.outputs]
        if progress is not None:
            progress(len(prompts))
        return out


def make_backend(name: str, model: str, **options):
    if name not in BACKENDS:
        raise UserError(f"--backend {name!r} is not known; accepted: {', '.join(BACKENDS)}")
    return (HFBackend if name == "hf" else VLLMBackend)(model, **options)
