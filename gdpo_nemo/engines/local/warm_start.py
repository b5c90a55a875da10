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
task, task options, warm-start settings and seed (and, off the CPU defaults, the device kind
and autocast dtype the pass ran with), so the GRPO and GDPO arms of one seed share it and
re-runs skip it.

Device: the pass runs on the run's `gdpo.local.device` under its `gdpo.local.autocast`
(fp32 weights; the saved checkpoint is fp32).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path

import torch

from gdpo_nemo.engines.local.device import autocast, make_deterministic, resolve_device
from gdpo_nemo.engines.local.models import cache_dir, load_policy

# Offset between the RL seed and the seed of the demonstration items by default.
DEMONSTRATION_SEED_OFFSET = 1_000_003


def warm_start_key(config: dict) -> str:
    """Hex digest naming the warm-started checkpoint of this config."""
    gdpo = config["gdpo"]
    settings = gdpo["local"]["warm_start"]
    payload = {
        "model": config["policy"]["model_name"],
        "task": gdpo["task"],
        "task_options": gdpo["local"]["task_options"],
        "warm_start": {k: v for k, v in settings.items() if k != "enabled"},
        "seed": config["grpo"]["seed"],
        "chat_template_kwargs": config["policy"]["tokenizer"]["chat_template_kwargs"],
        "version": 1,
    }
    # Off the CPU in fp32 the numbers differ; the CPU key stays what it always was.
    device_kind = resolve_device(gdpo["local"]["device"]).type
    if device_kind != "cpu":
        payload["device"] = device_kind
    if gdpo["local"]["autocast"] is not None:
        payload["autocast"] = gdpo["local"]["autocast"]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def warm_start_checkpoint(config: dict, log=print) -> Path:
    """Path of the warm-started checkpoint for `config`, training it first if not cached."""
    target = cache_dir() / "warm_start" / warm_start_key(config)
    if (target / "config.json").is_file():
        log(f"warm-start: using cached {target}")
        return target
    settings = config["gdpo"]["local"]["warm_start"]
    seed = config["grpo"]["seed"]
    model, tokenizer = load_policy(config["policy"]["model_name"], seed=seed, log=log)
    device = resolve_device(config["gdpo"]["local"]["device"])
    if config["gdpo"]["local"]["deterministic"]:
        make_deterministic(device)  # before the first CUDA matmul of this process
    model.to(device)
    started = time.perf_counter()
    losses = supervised_warm_start(
        model, tokenizer, config["gdpo"]["task"], task_options=config["gdpo"]["local"]["task_options"],
        steps=settings["steps"], lr=settings["lr"], batch_size=settings["batch_size"],
        examples=settings["examples"],
        seed=settings["seed"] if settings["seed"] is not None else seed + DEMONSTRATION_SEED_OFFSET,
        chat_template_kwargs=config["policy"]["tokenizer"]["chat_template_kwargs"],
        progress=config["gdpo"]["local"]["progress"],
        autocast_dtype=config["gdpo"]["local"]["autocast"],
    )
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "warm_start.json").write_text(json.dumps({
        "settings": settings, "model": config["policy"]["model_name"], "task": config["gdpo"]["task"],
        "losses": losses, "seconds": time.perf_counter() - started,
    }, indent=1))
    if target.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(target)
    log(f"warm-start: {settings['steps']} steps in {time.perf_counter() - started:.0f} s, saved to {target}")
    return target


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
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
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
