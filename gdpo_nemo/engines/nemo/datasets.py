"""The dataset class NeMo RL loads by dotted path: ``gdpo_nemo.engines.nemo.datasets.TaskDataset``.

NeMo RL (pinned commit, ``load_response_dataset``) resolves a ``data.train.dataset_name``
that contains a dot as an import path, builds the class with every key of the dataset
config as keyword arguments, then calls ``set_task_spec`` and ``set_processor`` (methods
of its ``RawDataset``). The class exposes ``task_name``, ``dataset`` (a Hugging Face
``datasets.Dataset`` of rows) and ``val_dataset``.

`TaskDataset` subclasses NeMo RL's ``RawDataset`` when NeMo RL is installed; the rows come
from `data.task_rows`, so all of the data logic is tested without NeMo RL.
"""

from __future__ import annotations

from typing import Mapping

from gdpo_nemo.errors import UserError
from gdpo_nemo.engines.nemo.data import task_name_of, task_rows

__all__ = ["TaskDataset"]


def _raw_dataset_base():
    try:
        from nemo_rl.data.datasets.raw_dataset import RawDataset
    except ImportError:
        return object
    return RawDataset


class TaskDataset(_raw_dataset_base()):
    """One split of a gdpo_nemo task as a NeMo RL dataset.

    task: "toolcall" | "gsm8k" | "math" | "code". split: "train" | "validation".
    source: "offline" (the task's generated set) or "file" (`data_path`: a file or a folder
    of split files, see gdpo_nemo.tasks). limit: keep the first `limit` rows. seed: the
    offline set's seed. task_options: options of the task (gdpo_nemo.tasks.get_task).
    Other keys of NeMo RL's dataset config (processor, env_name, prompt files) are
    accepted and used by NeMo RL itself.
    """

    def __init__(
        self,
        task: str,
        split: str = "train",
        source: str = "offline",
        data_path: str | None = None,
        limit: int | None = None,
        seed: int = 0,
        task_options: Mapping | None = None,
        **nemo_rl_keys,
    ):
        from datasets import Dataset

        rows = task_rows(task, split, source=source, data_path=data_path, limit=limit, seed=seed, task_options=task_options)
        if not rows:
            raise UserError(f"data: task {task!r} split {split!r} from {source} {data_path or ''} has no rows")
        self.task_name = task_name_of(task)
        self.dataset = Dataset.from_list(rows)
        self.val_dataset = None
