"""What every task shares: the `Example` record, the `Task` base class, the registry.

A task subclass supplies three hooks: `_draw(rng)` makes one offline item, `_from_record`
turns one row of a local data file into an item, and `demonstration` writes a correct
completion. Everything else (splits, limits, seeds, file reading, reward sets, option
checking) lives here once.

Offline splits are disjoint by construction: an item belongs to the validation split when
the SHA-256 of its `split_key` falls in the first `validation_percent` (a task option, default
`VALIDATION_PERCENT`) of the hash range, else to train. The split of an item therefore never
depends on the seed, so the training set of any seed is disjoint from the validation set of
every seed with the same `validation_percent`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from gdpo_nemo.errors import UserError
from gdpo_nemo.tasks import files

SPLITS = ("train", "validation")
SOURCES = ("offline", "file")
# Share of the offline item space that goes to validation (by hash of the split key), unless
# a task's `validation_percent` option says otherwise (a small item space may need a larger
# held-out share to measure on enough distinct problems).
VALIDATION_PERCENT = 10
_VALIDATION_PERCENT_MAX = 50
# Draws allowed per requested item before the generator gives up (the item space of
# the chosen options is then too small for the requested limit).
_DRAWS_PER_ITEM = 200
_DRAWS_MINIMUM = 20_000


@dataclass(frozen=True)
class Example:
    """One prompt of a task with what its rewards need.

    idx: position in the list `Task.load` returned (0-based).
    messages: the chat given to the model, `[{"role": "system"|"user", "content": str}]`:
        an optional system message, then one user message.
    ground_truth: what the task's reward set scores against; a str for toolcall, gsm8k and
        math; for code the tests object `{"inputs": [str], "outputs": [str]}`.
    tests: for code the same tests object (stdin strings and expected stdout strings),
        else None.
    meta: provenance and generator details (`task`, `source`, `split`, and per task e.g.
        `steps` for the reasoning a demonstration uses, `solution` for code).
    """

    idx: int
    messages: list
    ground_truth: Any
    tests: Any = None
    meta: dict = field(default_factory=dict)


class Draft(NamedTuple):
    """An item before it gets its index: what the task hooks return."""

    key: str  # identity for de-duplication within a split
    split_key: str  # identity that decides train vs validation
    messages: list
    ground_truth: Any
    tests: Any
    meta: dict


def split_of(split_key: str, validation_percent: int = VALIDATION_PERCENT) -> str:
    """"validation" for `validation_percent` percent of keys (by SHA-256), else "train". A key
    in validation at some percent stays there at every larger one."""
    digest = hashlib.sha256(split_key.encode("utf-8")).digest()
    return "validation" if int.from_bytes(digest[:8], "big") % 100 < validation_percent else "train"


def chat(system: str | None, user: str) -> list:
    """The chat messages of one prompt: the system message (when given), then the user's."""
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": user})
    return messages


@dataclass(frozen=True)
class Task:
    """Base of the four paper tasks. Subclasses are frozen dataclasses whose fields are the
    task's options (so `get_task(name, **options)` checks option names and keeps them
    immutable), and set `name`, `rewards` and, where they differ from the defaults,
    `default_sizes`, `evaluation` and `benchmarks`.

    A registered task is the one place that names what belongs to it; every list of tasks
    (the gdpo.task key, `gdpo-nemo score --task`, the reward sets, NeMo RL's data processors
    `gdpo_<name>`, the evaluation and the sweep's evaluation jobs) is derived from `TASKS`.
    A new task is its module here (registered with `register_task` and imported by
    gdpo_nemo/tasks/__init__.py), its reward module and its config group.

    validation_percent: the share (1-50) of the offline item space held out for validation
        (every task's option; subclasses' __post_init__ call this class's)."""

    validation_percent: int = VALIDATION_PERCENT

    name: ClassVar[str] = ""
    # "module:attribute" of the task's reward table: a `TaskRewards`, or a function that
    # builds one (gdpo_nemo.rewards.task_rewards).
    rewards: ClassVar[str] = ""
    # How a model trained on the task is evaluated: "bfcl" (gdpo_nemo.evaluation.bfcl),
    # "runner" (gdpo_nemo.evaluation.runner on `benchmarks`), or None (none in the paper).
    evaluation: ClassVar[str | None] = None
    benchmarks: ClassVar[tuple[str, ...]] = ()
    # Offline items per split when `load` gets no limit.
    default_sizes: ClassVar[dict] = {"train": 2000, "validation": 200}

    # ---- what callers use -------------------------------------------------------------

    def load(
        self,
        split: str = "train",
        *,
        source: str = "offline",
        path=None,
        limit: int | None = None,
        seed: int = 0,
    ) -> list:
        """The examples of one split, as a list of `Example` with idx 0..n-1.

        split: "train" or "validation".
        source: "offline" generates the task's own set: deterministic for (seed, options),
            `limit` items (default `default_sizes[split]`), no item repeated, train and
            validation disjoint for every pair of seeds. "file" reads `path`: a .parquet,
            .jsonl or .json file, or a folder holding `<split>.<ext>` (validation also
            accepts `test` and `val`); rows keep their file order, the first `limit` are
            kept, and `seed` is unused.
        Raises ValueError naming the argument, file, row or column at fault.
        """
        if split not in SPLITS:
            raise UserError(f"split={split!r} is not known: use one of {list(SPLITS)}")
        if source not in SOURCES:
            raise UserError(f"source={source!r} is not known: use one of {list(SOURCES)}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise UserError(f"limit={limit!r} must be None or a non-negative int")
        if source == "offline":
            if path is not None:
                raise UserError(f"path={path!r} is only read with source='file' (source is 'offline')")
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise UserError(f"seed={seed!r} must be an int")
            count = self.default_sizes[split] if limit is None else limit
            drafts = self._generate(split, count, seed)
        else:
            if path is None:
                raise UserError(f"source='file' needs path= (a data file or a folder of split files) for task {self.name!r}")
            if self.validation_percent != VALIDATION_PERCENT:
                raise UserError(f"validation_percent={self.validation_percent!r} splits the offline set only: a data file's"
                                 " splits are its own files (leave the option out with source='file')")
            drafts = self._read(split, path, limit)
        return [
            Example(idx=i, messages=d.messages, ground_truth=d.ground_truth, tests=d.tests, meta=d.meta)
            for i, d in enumerate(drafts)
        ]

    def demonstration(self, example: Example, rng: random.Random) -> str:
        """A correct assistant completion of `example` in the task's exact output format,
        for the supervised warm-start; `rng` varies its wording. Subclasses implement it."""
        raise NotImplementedError(f"task {self.name!r} has no demonstration writer")

    # ---- hooks for subclasses ---------------------------------------------------------

    def _draw(self, rng: random.Random) -> Draft:
        """One offline item drawn with `rng` (its split is decided afterwards)."""
        raise NotImplementedError

    def _from_record(self, record: dict, where: str) -> Draft | None:
        """One data-file row as an item, or None to skip the row. `where` names the file
        and row for error messages."""
        raise NotImplementedError

    # ---- shared machinery -------------------------------------------------------------

    def __post_init__(self) -> None:
        self._int_option("validation_percent", 1, _VALIDATION_PERCENT_MAX)

    def _subset_option(self, option: str, accepted) -> None:
        """Check that option `option` is a non-empty list drawn from `accepted`; store it as a tuple."""
        value = getattr(self, option)
        chosen = tuple(value) if isinstance(value, (list, tuple)) else None
        if not chosen or any(item not in accepted for item in chosen):
            raise UserError(f"{option}={value!r} must be a non-empty list drawn from {list(accepted)}")
        object.__setattr__(self, option, chosen)

    def _int_option(self, option: str, minimum: int, maximum: int | None = None) -> None:
        """Check that option `option` is an int in [minimum, maximum]."""
        value = getattr(self, option)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None and value > maximum):
            bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
            raise UserError(f"{option}={value!r} must be an int {bounds}")

    def _options(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def _generate(self, split: str, count: int, seed: int) -> list:
        # One stream per (task, seed): both splits draw from it and keep their own items.
        rng = random.Random(f"gdpo_nemo.tasks/{self.name}/{seed}")
        seen: set = set()
        drafts: list = []
        budget = max(_DRAWS_MINIMUM, _DRAWS_PER_ITEM * count)
        for _ in range(budget):
            if len(drafts) == count:
                break
            draft = self._draw(rng)
            if draft.key in seen or split_of(draft.split_key, self.validation_percent) != split:
                continue
            seen.add(draft.key)
            meta = {"task": self.name, "source": "offline", "split": split, "seed": seed, **draft.meta}
            drafts.append(draft._replace(meta=meta))
        if len(drafts) < count:
            raise UserError(
                f"task {self.name!r} with options {self._options()} found only {len(drafts)} distinct"
                f" {split} items in {budget} draws, fewer than limit={count}: ask for fewer"
            )
        return drafts

    def _read(self, split: str, path, limit: int | None) -> list:
        data_file = files.split_file(path, split)
        drafts = []
        for row, record in enumerate(files.read_records(data_file)):
            if limit is not None and len(drafts) >= limit:
                break
            draft = self._from_record(record, f"{data_file}, row {row}")
            if draft is None:
                continue
            meta = {"task": self.name, "source": "file", "split": split, "path": str(data_file), "row": row, **draft.meta}
            drafts.append(draft._replace(meta=meta))
        return drafts


TASKS: dict = {}


class PerTask(Mapping):
    """A read-only {key: value} over the registered tasks, computed at each access, so a task
    registered after import is in it: `value(name)` for each task name (`where(task class)`
    chooses which), keyed by `key(name)` (default: the name)."""

    def __init__(self, value, *, key=None, where=None):
        self._value, self._key, self._where = value, key or (lambda name: name), where or (lambda cls: True)

    def _names(self) -> dict:
        return {self._key(name): name for name, cls in TASKS.items() if self._where(cls)}

    def __getitem__(self, key):
        return self._value(self._names()[key])

    def __iter__(self):
        return iter(list(self._names()))

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return f"PerTask({dict(self)!r})"


def register_task(cls):
    """Class decorator: make a `Task` subclass available to `get_task` under `cls.name`."""
    if not cls.name or cls.name in TASKS:
        raise UserError(f"task class {cls.__name__} needs a new, non-empty name (got {cls.name!r})")
    if cls.rewards.count(":") != 1:
        raise UserError(f"task class {cls.__name__} needs rewards = 'module:attribute' of its reward table")
    if cls.evaluation not in (None, "bfcl", "runner") or (cls.evaluation == "runner") != bool(cls.benchmarks):
        raise UserError(f"task class {cls.__name__}: evaluation is None, 'bfcl' or 'runner' (with benchmarks)")
    TASKS[cls.name] = cls
    return cls


def get_task(name: str, **options) -> Task:
    """The task called `name` ("toolcall", "gsm8k", "math" or "code"), built with `options`
    (the fields of its class, see docs/tasks.md). Unknown names or options: ValueError
    listing what is accepted."""
    if name not in TASKS:
        raise UserError(f"task {name!r} is not known: use one of {sorted(TASKS)}")
    cls = TASKS[name]
    accepted = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UserError(f"task {name!r} has no option(s) {unknown}: accepted options are {accepted}")
    return cls(**options)
