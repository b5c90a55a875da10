"""The local engine's prompts: each split's examples with their chat prompts tokenized
once (`load_prompt_sets`), left-padded into batches (`left_pad`), and served to the steps
in a seeded order (`DataOrder`, whose position checkpoints save).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gdpo_nemo.errors import UserError


@dataclass
class PromptSet:
    """Examples of one split with their chat prompts tokenized (`ids[i]`: list of token ids)."""

    examples: list
    ids: list

    def __len__(self) -> int:
        return len(self.examples)


def tokenize_prompts(tokenizer, examples, *, chat_template_kwargs=None, max_length=None, log=print) -> PromptSet:
    """Apply the chat template (with the assistant turn opened) to every example; drop
    prompts longer than `max_length` tokens (`data.max_input_seq_length`) with a note."""
    kept, ids = [], []
    for example in examples:
        text = tokenizer.apply_chat_template(example.messages, tokenize=False, add_generation_prompt=True,
                                             **(chat_template_kwargs or {}))
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
        if max_length is not None and len(tokens) > max_length:
            continue
        kept.append(example)
        ids.append(tokens)
    if len(kept) < len(examples):
        log(f"dropped {len(examples) - len(kept)} of {len(examples)} prompts longer than data.max_input_seq_length={max_length}")
    return PromptSet(kept, ids)


def left_pad(sequences: list, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, P] ids and mask of token lists, padded on the left."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if seq:
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
    return ids, mask


@dataclass
class DataOrder:
    """Which prompts each step uses: a fresh seeded permutation per epoch (or file order when
    `data.shuffle` is false); incomplete last batches are dropped, as NeMo RL's loader does.
    `position` = {"epoch", "offset"} is saved in checkpoints."""

    size: int
    batch: int
    shuffle: bool
    seed: int
    position: dict = field(default_factory=lambda: {"epoch": 0, "offset": 0})

    @property
    def steps_per_epoch(self) -> int:
        """Whole batches in one pass over the prompts."""
        return self.size // self.batch

    def _order(self, epoch: int) -> list:
        if not self.shuffle:
            return list(range(self.size))
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.size, generator=generator).tolist()

    def next_batch(self) -> list:
        """The next `batch` prompt indices; starts the next epoch when fewer are left."""
        if self.position["offset"] + self.batch > self.size:
            self.position = {"epoch": self.position["epoch"] + 1, "offset": 0}
        start = self.position["offset"]
        indices = self._order(self.position["epoch"])[start:start + self.batch]
        self.position = {"epoch": self.position["epoch"], "offset": start + self.batch}
        return indices


def load_prompt_sets(config: dict, tokenizer, log=print) -> tuple[PromptSet, PromptSet | None, object]:
    """Train and validation prompts of `gdpo.task` and the task's reward set."""
    train, validation, reward_set = load_examples(config)
    kwargs = dict(chat_template_kwargs=config["policy"]["tokenizer"]["chat_template_kwargs"],
                  max_length=config["data"]["max_input_seq_length"], log=log)
    train_set = tokenize_prompts(tokenizer, train, **kwargs)
    grpo = config["grpo"]
    if len(train_set) < grpo["num_prompts_per_step"]:
        raise UserError(f"the train split has {len(train_set)} usable prompts, fewer than grpo.num_prompts_per_step="
                         f"{grpo['num_prompts_per_step']}")
    val_set = tokenize_prompts(tokenizer, validation, **kwargs) if validation is not None else None
    return train_set, val_set, reward_set


def load_examples(config: dict) -> tuple[list, list | None, object]:
    """(train examples, validation examples or None when the run never validates, reward set)
    of `gdpo.task`, untokenized: cheap, so a runner checks every run's data with it before
    its warm starts. ValueError when the data cannot give what the config asks (a split with
    fewer distinct items than grpo.max_val_samples, a missing data file)."""
    from gdpo_nemo.rewards import get_reward_set
    from gdpo_nemo.tasks import get_task

    gdpo, grpo, data = config["gdpo"], config["grpo"], config["data"]
    local = gdpo["local"]
    task = get_task(gdpo["task"], **local["task_options"])
    reward_set = get_reward_set(task.name, gdpo["reward_components"], length_limit=gdpo["length_limit"],
                                conditioned_length=gdpo["conditioned_length"])
    seed = grpo["seed"]

    def load(split, limit):
        if local["data_source"] == "file":
            section = data.get("train" if split == "train" else "validation") or {}
            path = section.get("data_path") if isinstance(section, dict) else None
            if not path:
                raise UserError(f"gdpo.local.data_source='file' needs data.{'train' if split == 'train' else 'validation'}.data_path")
            return task.load(split, source="file", path=path, limit=limit)
        return task.load(split, source="offline", limit=limit, seed=seed)

    # Every training prompt of the data (the task's whole offline set, or every row of the
    # data file) unless gdpo.local.train_size caps it, as NeMo RL's loader reads its whole
    # dataset: never a count made from grpo.max_num_steps, so a run's steps are the first
    # steps of a longer run of the same config, and a run extended by --resume (a larger
    # max_num_steps) goes on in the order it started with.
    train = load("train", local["train_size"])
    wants_validation = grpo["val_period"] > 0 or grpo["val_at_start"] or grpo["val_at_end"]
    validation = load("validation", grpo["max_val_samples"]) if wants_validation else None
    return train, validation, reward_set


