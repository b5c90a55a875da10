"""Experiment files (``experiments/<name>.yaml``) -> the runs they make (`RunSpec`).

An experiment file holds a description, optional defaults (``cluster``, ``seeds``,
``overrides``) and ``runs``: blocks, each the product of its tasks x models x algos x seeds.
Each run is named by ``gdpo_nemo.runs.run_id.RunId``; two runs with one name are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gdpo_nemo.checks import is_int
from gdpo_nemo.config.compose import compose, group_options, hydra_compose
from gdpo_nemo.config.errors import ConfigError, first_line
from gdpo_nemo.config.files import config_dir, experiments_dir
from gdpo_nemo.runs.run_id import RunId

__all__ = ["RunSpec", "list_experiments", "load_experiment"]


@dataclass(frozen=True)
class RunSpec:
    """One run of an experiment: what `compose` needs to build its config, and its id.

    task, model, algo, cluster: option names of the config groups (configs/<group>/<name>.yaml).
    overrides: extra Hydra overrides of the run (the experiment's, then the block's).
    run_id: the id the composed config carries (`RunId.from_config(compose(...))`).
    """

    run_id: RunId
    task: str
    model: str
    algo: str
    seed: int
    cluster: str
    overrides: tuple[str, ...] = field(default_factory=tuple)

    def compose(self) -> dict:
        """The resolved, validated run config of this run."""
        return compose(
            self.task,
            self.model,
            self.algo,
            cluster=self.cluster,
            seed=self.seed,
            experiment=self.run_id.experiment,
            overrides=self.overrides,
        )


EXPERIMENT_KEYS = ("description", "cluster", "seeds", "overrides", "runs")
BLOCK_KEYS = ("tasks", "models", "algos", "seeds", "cluster", "overrides", "label")


def list_experiments() -> dict[str, str]:
    """{experiment name: one-line description} of experiments/*.yaml, sorted by name."""
    found = {}
    for path in sorted(experiments_dir().glob("*.yaml")):
        data = _read_experiment_file(path)
        found[path.stem] = " ".join(str(data.get("description", "")).split())
    return found


def _read_experiment_file(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"experiment file {path}: not valid YAML ({first_line(err)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"experiment file {path}: must hold a mapping with keys {list(EXPERIMENT_KEYS)}")
    return data


def _str_list(value, where: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {value!r} must be a non-empty list of names")
    return list(value)


def _seed_list(value, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(is_int(v) and v >= 0 for v in value):
        raise ConfigError(f"{where}: {value!r} must be a non-empty list of non-negative ints")
    return list(value)


_IDENTITY_CACHE: dict = {}


def _identity_parts(task: str, model: str, algo: str, cluster: str) -> tuple[str, str]:
    """(gdpo.task, gdpo.model_tag) a task option and a model option compose to (cached;
    neither depends on the algo, which Hydra still needs to compose)."""
    key = (str(config_dir()), task, model, cluster)
    if key not in _IDENTITY_CACHE:
        cfg = hydra_compose([f"task={task}", f"model={model}", f"algo={algo}", f"cluster={cluster}"])
        _IDENTITY_CACHE[key] = (str(cfg.gdpo.task), str(cfg.gdpo.model_tag))
    return _IDENTITY_CACHE[key]


def load_experiment(name: str) -> list[RunSpec]:
    """The runs of experiments/<name>.yaml, in file order (block by block, then task, model,
    algo, seed).

    An experiment file holds `description`, optional defaults `cluster`, `seeds` and
    `overrides`, and `runs`: a list of blocks, each the product of its `tasks`, `models`,
    `algos` and `seeds` (optional `cluster`, `overrides`, and `label`, a format string for
    the run id's algo part such as "{algo}_3obj", so two blocks with the same algo stay
    apart). Raises ConfigError for an unknown experiment, a bad key or option name, and
    two runs with the same run id.
    """
    known = list_experiments()
    if name not in known:
        raise ConfigError(f"unknown experiment {name!r}; experiments are {sorted(known)}")
    data = _read_experiment_file(experiments_dir() / f"{name}.yaml")
    _refuse_unknown_keys(data, EXPERIMENT_KEYS, f"experiments/{name}.yaml")
    blocks = data.get("runs")
    if not isinstance(blocks, list) or not blocks:
        raise ConfigError(f"experiments/{name}.yaml: runs must be a non-empty list of blocks")
    specs: list[RunSpec] = []
    seen: dict[RunId, str] = {}
    for number, block in enumerate(blocks):
        where = f"experiments/{name}.yaml runs[{number}]"
        for spec in _block_runs(name, block, data, where):
            if spec.run_id in seen:
                raise ConfigError(
                    f"{where}: run {spec.run_id.name} is also made by {seen[spec.run_id]}; give one block a"
                    " `label` such as '{algo}_variant' to keep their runs apart"
                )
            seen[spec.run_id] = where
            specs.append(spec)
    return specs


def _refuse_unknown_keys(data: dict, accepted: tuple, where: str) -> None:
    unknown = sorted(set(data) - set(accepted))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; accepted: {list(accepted)}")


def _block_runs(name: str, block, data: dict, where: str) -> list[RunSpec]:
    """The runs of one block of experiment `name` (file defaults from `data`), in task,
    model, algo, seed order."""
    if not isinstance(block, dict):
        raise ConfigError(f"{where}: must be a mapping with keys {list(BLOCK_KEYS)}")
    _refuse_unknown_keys(block, BLOCK_KEYS, where)
    tasks = _str_list(block.get("tasks"), f"{where}.tasks")
    models = _str_list(block.get("models"), f"{where}.models")
    algos = _str_list(block.get("algos"), f"{where}.algos")
    seeds = _seed_list(block.get("seeds", data.get("seeds")), f"{where}.seeds")
    cluster = block.get("cluster", data.get("cluster", "local"))
    overrides = [*(data.get("overrides") or []), *(block.get("overrides") or [])]
    if not all(isinstance(o, str) for o in overrides):
        raise ConfigError(f"{where}.overrides: must be a list of key=value strings")
    label = block.get("label", "{algo}")
    if not isinstance(label, str) or "{algo}" not in label:
        raise ConfigError(f"{where}.label: {label!r} must be a format string containing {{algo}}")
    for group, values in (("task", tasks), ("model", models), ("algo", algos), ("cluster", [cluster])):
        accepted = group_options(group)
        for value in values:
            if value not in accepted:
                raise ConfigError(f"{where}: {group} {value!r} is not a {group} config; accepted: {accepted}")
    runs = []
    for task in tasks:
        for model in models:
            task_name, model_tag = _identity_parts(task, model, algos[0], cluster)
            for algo in algos:
                algo_label = label.format(algo=algo)
                run_overrides = [*overrides, f"gdpo.algo={algo_label}"] if algo_label != algo else list(overrides)
                for seed in seeds:
                    try:
                        run_id = RunId(name, task_name, model_tag, algo_label, seed)
                    except ValueError as err:
                        raise ConfigError(f"{where}: {err}") from None
                    runs.append(RunSpec(run_id, task, model, algo, seed, cluster, tuple(run_overrides)))
    return runs
