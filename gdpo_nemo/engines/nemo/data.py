"""Task rows for NeMo RL datasets, and the data processors that turn a row into a DatumSpec.

Rows come from gdpo_nemo.tasks (``get_task(task).load(...)``), which reads the paper's files
(ToolRL parquet, GSM8K jsonl, DeepScaleR with DeepSeek-R1's instruction, Eurus-2-RL code
parquet) or generates the task's offline set. A row keeps the chat prompt, the ground
truth and the tests as JSON text, so every row of every task has the same flat columns:

    {"messages": str, "ground_truth": str, "tests": str, "task_name": "gdpo_<task>"}

A processor has NeMo RL's signature ``(datum_dict, task_data_spec, tokenizer,
max_seq_length, idx) -> DatumSpec``: it renders the chat with the tokenizer's chat
template (generation prompt appended), tokenizes it, and attaches
``extra_env_info = {"ground_truth": ..., "tests": ...}`` for our environment. A prompt of
``max_seq_length`` tokens or more is cut to a stub and masked out (``loss_multiplier`` 0),
as NeMo RL's own processors do.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import torch

from gdpo_nemo.errors import UserError
from gdpo_nemo.tasks import PerTask

__all__ = [
    "PROCESSORS",
    "build_datum",
    "processor_for",
    "task_name_of",
    "task_rows",
]


def task_name_of(task: str) -> str:
    """NeMo RL's task name for our rows of `task` (it keys processors and environments)."""
    return f"gdpo_{task}"


def task_rows(
    task: str,
    split: str,
    *,
    source: str = "offline",
    data_path: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    task_options: Mapping | None = None,
) -> list[dict]:
    """The rows of one split of `task`: see the module docstring for their columns.

    source "offline" generates the task's own set (deterministic for seed and options);
    "file" reads `data_path` (a file or a folder of split files). Raises ValueError naming
    the argument, file, row or column at fault (from gdpo_nemo.tasks).
    """
    from gdpo_nemo.tasks import get_task

    examples = get_task(task, **dict(task_options or {})).load(
        split, source=source, path=data_path, limit=limit, seed=seed
    )
    name = task_name_of(task)
    return [
        {
            "messages": json.dumps(example.messages),
            "ground_truth": json.dumps(example.ground_truth),
            "tests": json.dumps(example.tests),
            "task_name": name,
        }
        for example in examples
    ]


def _messages(datum: Mapping, system_prompt: str | None) -> list[dict]:
    messages = json.loads(datum["messages"]) if isinstance(datum["messages"], str) else list(datum["messages"])
    if system_prompt:
        messages = [m for m in messages if m.get("role") != "system"]
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def _decode(value):
    return json.loads(value) if isinstance(value, str) else value


def build_datum(
    datum: Mapping,
    task_data_spec: Any,
    tokenizer: Any,
    max_seq_length: int | None,
    idx: int,
    *,
    task: str,
) -> dict:
    """One row as NeMo RL's DatumSpec dict.

    Returns {"message_log": [{"role": "user", "content": prompt text, "token_ids":
    LongTensor[L]}], "length": L, "extra_env_info": {"ground_truth", "tests"},
    "loss_multiplier": 1.0 (0.0 if L >= max_seq_length), "idx": idx, "task_name"}.
    A `task_data_spec.system_prompt` (from data.*.system_prompt_file) replaces the row's
    system message; rows carry their own prompts, so prompt_file is not used.
    """
    expected = task_name_of(task)
    if datum.get("task_name") != expected:
        raise UserError(f"processor {expected!r} got a row of task_name {datum.get('task_name')!r}")
    messages = _messages(datum, getattr(task_data_spec, "system_prompt", None))
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    token_ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"][0].to(torch.long)
    length = int(token_ids.shape[0])
    loss_multiplier = 1.0
    if max_seq_length is not None and length >= max_seq_length:
        token_ids = token_ids[: min(4, max_seq_length)]
        loss_multiplier = 0.0
    return {
        "message_log": [{"role": "user", "content": text, "token_ids": token_ids}],
        "length": length,
        "extra_env_info": {"ground_truth": _decode(datum["ground_truth"]), "tests": _decode(datum.get("tests"))},
        "loss_multiplier": loss_multiplier,
        "idx": idx,
        "task_name": expected,
    }


def processor_for(task: str):
    """NeMo RL's data processor of `task`'s rows (`build_datum` for that task), named
    ``<task>_processor`` for NeMo RL's registry and logs."""

    def processor(datum, task_data_spec, tokenizer, max_seq_length, idx):
        return build_datum(datum, task_data_spec, tokenizer, max_seq_length, idx, task=task)

    processor.__name__ = processor.__qualname__ = f"{task}_processor"
    processor.__doc__ = f"Rows of the {task!r} task as NeMo RL's DatumSpec (build_datum)."
    return processor


# NeMo RL processor name -> function, one per registered task (registered by plugin.register
# with register_processor).
PROCESSORS = PerTask(processor_for, key=task_name_of)  # read live: a task registered later is in it
