"""Supervised warm-start: a short pass on demonstrations so RL starts with reward variance.

Why: SmolLM2-135M-Instruct follows the paper's `<think>...</think>\\n<answer>N</answer>`
format 0 of 32 times out of the box (docs/local_engine.md, "The warm-start"), so binary format
rewards are constant in every group and give GRPO and GDPO nothing to learn from. The
paper's base models start at a low but non-zero rate (Qwen2.5-1.5B: 4.7% correct format on
BFCL). A few supervised steps on demonstrations written by our own code (`task.demonstration`)
bring the rate to a modest level, well below 100%, so every component varies from step 1.

What (`gdpo.local.warm_start`): `steps` AdamW steps at `lr` on batches of `batch_size`
demonstrations drawn from `examples` training items of the task (their own seed, so RL does
not see its prompts answered), loss on the completion tokens only (the prompt is context).
Off for users' own models unless they enable it.

Cache: the result is saved under `<cache>/warm_start/<key>/` where the key hashes the model,
task, task options, warm-start settings and seed, and the numerics it ran under: the device
(kind and name), the torch thread count (`gdpo.local.num_threads`; float sums depend on it),
the autocast dtype and the library versions (runs/provenance.py). So the GRPO and GDPO arms of
one seed share it, re-runs skip it, and a key never names two different sets of weights.
``warm_start.json`` beside the weights records all of it with the digests of the weights
before and after; a reused warm start is checked against both (`load_warm_start`).

Device: the pass runs on the run's `gdpo.local.device` under its `gdpo.local.autocast`
(fp32 weights; the saved checkpoint is fp32).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

import torch

from gdpo_nemo.engines.local.device import (attention_backends, autocast, prepare_device, resolve_device,
                                            torch_threads)
from gdpo_nemo.engines.local.models import base_seed, cache_dir, load_policy, load_pretrained, save_folder, shown
from gdpo_nemo.engines.local.optimizer import kernel_options
from gdpo_nemo.runs import cpu_pins, provenance

# The record a warm start keeps beside its weights.
RECORD = "warm_start.json"
# Offset between the RL seed and the seed of the demonstration items by default.
DEMONSTRATION_SEED_OFFSET = 1_000_003


def warm_start_numerics(config: dict) -> dict:
    """The numerics the warm start of `config` runs under (`provenance.numerics`): the run's
    device and autocast, fp32 weights, and the torch thread count `gdpo.local.num_threads`
    (null: this process's count)."""
    local = config["gdpo"]["local"]
    with torch_threads(local["num_threads"]):
        device = resolve_device(local["device"])
        if device.type == "cpu":
            cpu_pins.pin()  # the key must name the code paths the warm start will run under
        return provenance.numerics(device, dtype="float32", autocast=local["autocast"],
                                   attention=attention_backends(device))


def warm_start_expected(config: dict) -> dict:
    """What the warm start's key covers and its ``warm_start.json`` must record: the
    settings that make it, and the numerics and library versions it runs under."""
    gdpo = config["gdpo"]
    settings = gdpo["local"]["warm_start"]
    return {
        "model": config["policy"]["model_name"],
        "task": gdpo["task"],
        "task_options": gdpo["local"]["task_options"],
        "warm_start": {k: v for k, v in settings.items() if k != "enabled"},
        "seed": config["grpo"]["seed"],
        "chat_template_kwargs": config["policy"]["tokenizer"]["chat_template_kwargs"],
        **provenance.numerics_key(warm_start_numerics(config)),
        "version": 3,  # 3: fused AdamW on the CPU (optimizer.kernel_options)
    }


def _key(expected: dict) -> str:
    return hashlib.sha256(json.dumps(expected, sort_keys=True).encode()).hexdigest()[:16]


def warm_start_key(config: dict) -> str:
    """Hex digest naming the warm-started checkpoint of this config (`warm_start_expected`)."""
    return _key(warm_start_expected(config))


def warm_start_checkpoint(config: dict, log=print) -> Path:
    """Path of the warm-started checkpoint for `config`, training it first if not cached
    (on `gdpo.local.num_threads` torch threads; the count is part of the key)."""
    return _checkpoint(config, warm_start_expected(config), log)


def _checkpoint(config: dict, expected: dict, log) -> Path:
    key = _key(expected)
    target = cache_dir() / "warm_start" / key
    if (target / "config.json").is_file():
        provenance.check_cached(target, RECORD, expected)
        log(f"warm-start: using cached {shown(target)}")
        return target
    settings = config["gdpo"]["local"]["warm_start"]
    seed = config["grpo"]["seed"]
    model, tokenizer = load_policy(config["policy"]["model_name"], seed=seed, log=log)
    base_digest = provenance.state_digest(model)
    device = prepare_device(config["gdpo"]["local"])  # before the first CUDA matmul of this process
    model.to(device)
    started = time.perf_counter()
    with torch_threads(config["gdpo"]["local"]["num_threads"]):
        losses = supervised_warm_start(
            model, tokenizer, config["gdpo"]["task"], task_options=config["gdpo"]["local"]["task_options"],
            steps=settings["steps"], lr=settings["lr"], batch_size=settings["batch_size"],
            examples=settings["examples"],
            seed=settings["seed"] if settings["seed"] is not None else seed + DEMONSTRATION_SEED_OFFSET,
            chat_template_kwargs=config["policy"]["tokenizer"]["chat_template_kwargs"],
            progress=config["gdpo"]["local"]["progress"],
            autocast_dtype=config["gdpo"]["local"]["autocast"],
        )
    record = {**expected, "key": key, "base_digest": base_digest, "digest": provenance.state_digest(model),
              "losses": losses, "seconds": time.perf_counter() - started}
    save_folder(model, tokenizer, target, records={RECORD: record})
    log(f"warm-start: {settings['steps']} steps in {time.perf_counter() - started:.0f} s, saved to {shown(target)}")
    return target


def load_warm_start(config: dict, log=print) -> tuple:
    """`(model, tokenizer, start_weights)` of the warm start of `config` (made first when not
    cached), its weights checked against the digest recorded when it was made;
    `start_weights` says where they came from (`provenance.invocation_record`)."""
    expected = warm_start_expected(config)
    path = _checkpoint(config, expected, log)
    model, tokenizer = load_pretrained(path)
    record = provenance.check_cached(path, RECORD, expected, model=model)
    return model, tokenizer, {"source": f"warm_start/{path.name}", "digest": record["digest"],
                              "base_digest": record["base_digest"],
                              "base_seed": base_seed(config["policy"]["model_name"], config["grpo"]["seed"])}


def demonstration_batch(tokenizer, examples, demonstrations, *, chat_template_kwargs=None):
    """Right-padded `(input_ids, attention_mask, labels)` [n, L] for prompt + demonstration +
    EOS; labels are -100 on the prompt and padding (loss on the completion only)."""
    rows, labels = [], []
    for example, completion in zip(examples, demonstrations):
        prompt = tokenizer.apply_chat_template(example.messages, tokenize=False, add_generation_prompt=True,
                                               **(chat_template_kwargs or {}))
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        labels.append([-100] * len(prompt_ids) + answer_ids)
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    target = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (row, label) in enumerate(zip(rows, labels)):
        input_ids[i, :len(row)] = torch.tensor(row)
        attention[i, :len(row)] = 1
        target[i, :len(label)] = torch.tensor(label)
    return input_ids, attention, target


def supervised_warm_start(model, tokenizer, task_name: str, *, task_options=None, steps: int, lr: float,
                          batch_size: int, examples: int, seed: int, chat_template_kwargs=None,
                          progress: bool = True, autocast_dtype: str | None = None) -> list:
    """Train `model` in place, on its device, for `steps` AdamW steps on the task's
    demonstrations (forward passes under `autocast_dtype`, null = none). Returns the loss of
    each step (mean cross-entropy per completion token)."""
    from gdpo_nemo.tasks import get_task

    task = get_task(task_name, **(task_options or {}))
    items = task.load("train", source="offline", limit=examples, seed=seed)
    rng = random.Random(seed)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), **kernel_options(model, {"lr": lr, "weight_decay": 0.0}))
    losses = []
    bar = None
    if progress and steps:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, desc="warm-start", unit="step", dynamic_ncols=True)
    model.train()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for _ in range(steps):
            batch = rng.sample(items, min(batch_size, len(items)))
            demonstrations = [task.demonstration(example, rng) for example in batch]
            input_ids, attention, labels = demonstration_batch(tokenizer, batch, demonstrations,
                                                               chat_template_kwargs=chat_template_kwargs)
            with autocast(device, autocast_dtype):
                loss = model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                             labels=labels.to(device)).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"loss={losses[-1]:.3f}")
    if bar is not None:
        bar.close()
    model.eval()
    return losses
