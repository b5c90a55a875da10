"""What an engine is: the interface both engines implement, and the registry of engines.

An engine takes a run config (NeMo RL's keys plus the gdpo block, docs/interfaces.md) and
trains it into a run dir. The layers that use an engine (the config checks, the key walk, the
sweep) ask it through this interface, never by its name:

- what it is: `summary`, `command` (what a user or a Slurm job runs), `resume` (how an
  interrupted run continues: the same command again, never a mixed or truncated log),
  `metrics` (where its step metrics go in the run dir), and its Python entries `load`
  ("module:function" (path, overrides) -> config, checked for this engine before any work)
  and `train` (the entry that runs a loaded config);
- its keys: `keys` says how the key walk checks its configs: ``"schema"`` (every NeMo RL key
  is the engine's own: required and typed as NeMo RL's MasterConfig has them) or ``"tree"``
  (its column of the key tree, gdpo_nemo.config.nemo_keys: each key used in a range, ignored,
  or refused away from its neutral value; left-out keys filled); `fate` reads its cell of a
  key: from `column` (key path -> Fate, the engine's own package) where that names the key,
  else from the tree's column under the engine's name;
- its run config (whose ``logger.log_dir`` is the run dir on every engine): `drop_unread_keys`,
  `dataset_block_problems` and `config_problems` (what it cannot run, as lines naming the
  key), `cluster_problems` (the config against a Slurm request), `native_check` (the check
  of its configs by its own code, where it has one: NeMo RL's MasterConfig);
- its Slurm job: `template` (slurm/templates/<name>), `profile_problems` (what a profile
  lacks for it), `job_nodes`, `sbatch_resources` (the #SBATCH lines of its size) and
  `job_values` (the template's engine-specific placeholders); `evaluation_jobs`: whether
  the sweep can attach `gdpo-nemo eval` jobs to its runs.

Every list of engines (the gdpo.engine key, the key tree's walk, the sweep's --engine) is
`ENGINES`' keys. The built-in engines are found as plugins are, by module name
(BUILTIN_ENGINES: each module registers its engine when imported, on the registry's first
use), so this layer imports no engine; a third engine is its package, one line there, and its
job template (docs/architecture.md, "A third engine"). Torch-free and import-light.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from gdpo_nemo.errors import UserError

__all__ = ["BUILTIN_ENGINES", "ENGINES", "Engine", "engine", "register_engine"]

# The engines of this package, imported on the registry's first use (each registers itself).
BUILTIN_ENGINES = ("gdpo_nemo.engines.local.engine", "gdpo_nemo.engines.nemo.engine")

KEY_CHECKS = ("schema", "tree")


class Engine:
    """The interface. A subclass sets the class attributes and overrides what it does
    differently from these defaults (a single-process engine on one node, no own check)."""

    name: str = ""
    summary: str = ""
    load: str = ""
    train: str = ""
    command: str = ""
    resume: str = ""
    metrics: str = "metrics.jsonl"
    keys: str = "tree"
    column: Mapping | None = None
    template: str = ""
    evaluation_jobs: bool = False

    def fate(self, path: str, leaf):
        """This engine's cell (a nemo_keys.Fate) of the key at dotted `path`, whose tree entry
        is `leaf` (a nemo_keys.Leaf): `column`'s where it names the path, else the tree's."""
        if self.column is not None and path in self.column:
            return self.column[path]
        return leaf.fate(self.name)

    def entry(self, which: str = "train"):
        """The callable `load` or `train` names (imported now: it may import torch)."""
        module, function = getattr(self, which).split(":")
        return getattr(importlib.import_module(module), function)

    # -- the run config ---------------------------------------------------------------
    def drop_unread_keys(self, config: dict, keep: set[str]) -> None:
        """Remove from a composed `config` keys the engine would refuse and never reads (not
        those in `keep`: set by the user, so the checks report them)."""

    def dataset_block_problems(self, block: Mapping, where: str) -> list[str]:
        """What this engine refuses in one of our dataset blocks (at key path `where`)."""
        return []

    def config_problems(self, config: Mapping) -> list[str]:
        """What this engine cannot run in a config the key walk accepted, one line per key."""
        return []

    def start_problems(self, config: Mapping) -> list[str]:
        """What the engine's own start refuses in a composed, validated `config`, one line per
        key: a sweep plans no job that would fail there. The composer does not ask (`config
        show` may show a config for a look at it)."""
        return []

    def cluster_problems(self, config: Mapping, nodes: int, gpus_per_node: int) -> list[str]:
        """The config against the Slurm request that runs it (`nodes`, `gpus_per_node`)."""
        if nodes != 1:
            return [f"gdpo.engine: the {self.name} engine runs one process on one node; the Slurm request has --nodes={nodes}"]
        return []

    def native_check(self, python: str | None, *, name_each: bool = True):
        """The check of this engine's configs by the engine's own code, in the shape the sweep
        takes it (gdpo_nemo.sweep.actions.ConfigCheck: `run({name: config})`), or None where it
        has none. python: the Python of the engine's own environment (None: found)."""
        return None

    # -- its Slurm job ----------------------------------------------------------------
    def profile_problems(self, profile, *, submit: bool = False) -> list[str]:
        """What cluster profile `profile` lacks for this engine's jobs (`submit`: also what only
        a submission needs on this machine)."""
        return []

    def job_nodes(self, profile, config: Mapping) -> int:
        """The nodes one run's job asks for."""
        return 1

    def cluster_checked(self, profile) -> bool:
        """Whether a run's config must agree with its job's request on `profile`
        (`cluster_problems`)."""
        return True

    def sbatch_resources(self, profile) -> list[str]:
        """The sbatch options of one job's size (one task; the profile's CPUs and memory; at
        most one GPU)."""
        options = ["--ntasks=1"]
        if profile.cpus_per_task:
            options.append(f"--cpus-per-task={profile.cpus_per_task}")
        if profile.mem:
            options.append(f"--mem={profile.mem}")
        if profile.gpus_per_node > 0:
            options.append("--gres=gpu:1")
        return options

    def job_values(self, profile, *, run_dir: Path, config_path: Path, sweep_dir: Path, workdir: Path,
                   gpus_per_node: int, overrides: tuple[str, ...] = ()) -> dict[str, str]:
        """The values of the placeholders of `template` that are this engine's own (the sweep
        fills the shared ones: names, directives, setup, W&B names), shell-quoted."""
        raise NotImplementedError(f"engine {self.name!r} renders no Slurm job")

    def __repr__(self) -> str:
        return f"<engine {self.name}: {self.summary}>"


class _Registry(Mapping):
    """{name: Engine}, read live; the built-in engines are imported on its first use."""

    def __init__(self) -> None:
        self._engines: dict[str, Engine] = {}
        self._loaded = False

    def _load(self) -> dict[str, Engine]:
        if not self._loaded:
            self._loaded = True
            for module in BUILTIN_ENGINES:
                importlib.import_module(module)
            # One order whichever module was imported first: the built-ins as listed, then the rest.
            rank = {module: n for n, module in enumerate(BUILTIN_ENGINES)}
            ordered = sorted(self._engines.items(), key=lambda item: rank.get(type(item[1]).__module__, len(rank)))
            self._engines.clear()
            self._engines.update(ordered)
        return self._engines

    def __getitem__(self, name: str) -> Engine:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._load()))

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, name: object) -> bool:
        return name in self._load()

    def __repr__(self) -> str:
        return f"ENGINES({', '.join(self)})"


ENGINES = _Registry()


def register_engine(spec: Engine) -> Engine:
    """Add an engine (an instance of an `Engine` subclass); returns it."""
    if not isinstance(spec, Engine):
        raise UserError(f"{spec!r}: an engine is an instance of gdpo_nemo.config.engines.Engine")
    engines = ENGINES._engines  # registering never loads the built-ins: they register themselves this way
    if not spec.name or spec.name in engines:
        raise UserError(f"engine {spec.name!r}: a new, non-empty name is needed")
    for which in ("load", "train"):
        if getattr(spec, which).count(":") != 1:
            raise UserError(f"engine {spec.name!r}: {which} must be 'module:function'")
    if spec.keys not in KEY_CHECKS:
        raise UserError(f"engine {spec.name!r}: keys must be one of {list(KEY_CHECKS)}")
    engines[spec.name] = spec
    return spec


def engine(name: str) -> Engine:
    """The engine called `name`; a UserError naming the accepted ones."""
    if name not in ENGINES:
        raise UserError(f"engine {name!r} is not known: use one of {', '.join(ENGINES)}")
    return ENGINES[name]
