"""Compose the run config of one (task, model, algo, cluster) choice with Hydra.

``configs/base.yaml`` (whose gdpo block takes its defaults from gdpo_nemo/config/settings.py)
then one option of each group ``task/``, ``model/``, ``algo/``, ``cluster/``, then the
command-line overrides; then the NeMo RL keys that restate the gdpo block are derived
(gdpo_nemo.config.derive) and the whole config is validated (gdpo_nemo.config.validate)
before anything else runs. `load_config_file` does the same for a user's own YAML file.
"""

from __future__ import annotations

from typing import Sequence

from gdpo_nemo.checks import is_int
from gdpo_nemo.config.derive import derive, drop_unread_keys
from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.config.files import config_dir, read_with_inheritance, to_plain
from gdpo_nemo.config.identity import reconcile_algo
from gdpo_nemo.config.overrides import apply_overrides, nearest_keys, override_key
from gdpo_nemo.config.settings import gdpo_defaults
from gdpo_nemo.config.validate import validate

__all__ = ["GROUPS", "compose", "group_options", "hydra_compose", "load_config_file"]

GROUPS = ("task", "model", "algo", "cluster")


def group_options(group: str) -> list[str]:
    """The option names of one config group (configs/<group>/*.yaml), sorted."""
    if group not in GROUPS:
        raise ConfigError(f"unknown config group {group!r}; groups are {list(GROUPS)}")
    folder = config_dir() / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def hydra_compose(overrides: list[str]):
    """Hydra's composition of base.yaml with `overrides` (an unresolved DictConfig)."""
    from hydra import compose as compose_with_hydra
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    root = config_dir()
    if not (root / "base.yaml").is_file():
        raise ConfigError(f"config tree {root} has no base.yaml (set GDPO_NEMO_CONFIGS to the repo's configs/)")
    _store_gdpo_defaults()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(root), version_base=None):
            return compose_with_hydra(config_name="base", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(_explain_hydra_error(err, overrides)) from None
    finally:
        GlobalHydra.instance().clear()


# The unresolved compositions this process made, keyed by what they are made of (see
# `_compose_resolved`); cleared when it holds more than _COMPOSED_MAX of them.
_COMPOSED: dict[tuple, dict] = {}
_COMPOSED_MAX = 256


def _compose_resolved(choices: list[str], per_run: dict, overrides: list[str]) -> dict:
    """The resolved plain dict that Hydra composes from `choices` (group=option), then each
    `per_run` key set to its value, then `overrides`: what
    ``to_plain(hydra_compose([*choices, *per_run "key=value", *overrides]))`` gives.

    A composition is mostly Hydra reading and parsing the same YAML files again (about
    0.3 s a run), and the runs of a sweep differ mostly in their seed. So the unresolved
    composition of `choices` and `overrides` is kept for this process, keyed by them, by
    every file of the config tree (path, size, modification time) and by the gdpo block's
    defaults, and the per-run keys are set on a copy before interpolations are resolved
    (one that reads the seed reads this run's). An override that sets a per-run key
    itself (or a section above it) comes after them, as in Hydra's order: then nothing is kept."""
    touched = [override_key(o) for o in overrides]
    if any(key == path or path.startswith(f"{key}.") for key in touched for path in per_run):
        return to_plain(hydra_compose([*choices, *(f"{key}={value}" for key, value in per_run.items()), *overrides]))
    import copy
    import json

    from omegaconf import OmegaConf

    key = (_tree_state(), json.dumps(gdpo_defaults(with_local=False), sort_keys=True, default=repr), tuple(choices),
           tuple(overrides))
    composed = _COMPOSED.get(key)
    if composed is None:
        composed = OmegaConf.to_container(hydra_compose([*choices, *overrides]), resolve=False)
        if len(_COMPOSED) >= _COMPOSED_MAX:
            _COMPOSED.clear()
        _COMPOSED[key] = composed
    config = copy.deepcopy(composed)
    for path, value in per_run.items():
        *parents, leaf = path.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[leaf] = value
    return to_plain(config)


def _tree_state() -> tuple:
    """The config tree's folder and (path, size, modification time) of each of its files."""
    root = config_dir()
    files = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            files.append((str(path.relative_to(root)), stat.st_size, stat.st_mtime_ns))
    return (str(root), tuple(files))


def _store_gdpo_defaults() -> None:
    """Put the gdpo block's defaults (gdpo_nemo/config/settings.py) in Hydra's config store
    as `gdpo_settings`, the first entry of base.yaml's defaults list."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="gdpo_settings", node=gdpo_defaults(with_local=False), package="gdpo")


def _explain_hydra_error(err: Exception, overrides: list[str]) -> str:
    text = " ".join(str(err).split())
    for group in GROUPS:
        marker = f"In '{group}'"
        chosen = next((o.split("=", 1)[1] for o in overrides if o.startswith(f"{group}=")), None)
        if f"Could not find '{group}/" in text or (chosen and marker in text and "not found" in text):
            return f"{group}={chosen!r} is not a {group} config; accepted: {group_options(group)}"
    key = getattr(err, "full_key", None)
    if "Could not override" in text or "not in struct" in text:
        bad = next((o for o in overrides if override_key(o) and f"'{override_key(o)}'" in text), None)
        where = override_key(bad) if bad else (key or "override")
        near = _near_keys(where, overrides)
        if near:  # the words `gdpo-nemo train` and nemo-smoke use for the same mistake
            return f"{where}: {where!r} is not in the config: did you mean {' or '.join(near)}? (to add a new key, +{where}=value)"
        return f"{where}: {text} (add a new key with +{where}=VALUE)"
    return f"{key or 'config'}: {text}"


def _near_keys(key: str, overrides: list[str]) -> list[str]:
    """Keys spelled like `key` in the config the group choices among `overrides` compose
    (empty when that cannot be composed either)."""
    groups = [o for o in overrides if o.split("=", 1)[0] in GROUPS]
    try:
        return nearest_keys(to_plain(hydra_compose(groups)), key)
    except ConfigError:
        return []


def _check_choice(group: str, value) -> None:
    options = group_options(group)
    if not isinstance(value, str) or value not in options:
        raise ConfigError(f"{group}={value!r} is not a {group} config; accepted: {options}")


def compose(
    task: str,
    model: str,
    algo: str,
    *,
    cluster: str = "local",
    seed: int = 42,
    experiment: str = "adhoc",
    overrides: Sequence[str] = (),
) -> dict:
    """The resolved run config of one (task, model, algo, cluster) choice, validated.

    task, model, algo, cluster: option names in configs/<group>/ (see `group_options`).
    seed: grpo.seed. experiment: gdpo.experiment (the run id's first part).
    overrides: Hydra overrides applied last (`key=value`, `+key=value` for a new key).

    The NeMo RL keys that restate the gdpo block (grpo.adv_estimator, ...) and the run's
    names and directories (logger.log_dir = $GDPO_RUNS_DIR/<run id>, W&B name and group,
    checkpoint dir) are derived after composition unless an override sets them. The run dir
    is $GDPO_RUNS_DIR/<run id> (default runs/<run id>): logger.log_dir itself, on every engine.
    Returns a plain dict. Raises ConfigError naming the key path of every problem.
    """
    for group, value in (("task", task), ("model", model), ("algo", algo), ("cluster", cluster)):
        _check_choice(group, value)
    if not is_int(seed) or seed < 0:
        raise ConfigError(f"grpo.seed: seed={seed!r} must be a non-negative int")
    if isinstance(overrides, str):
        raise ConfigError(f"overrides must be a list of key=value strings, got the string {overrides!r}")
    overrides = [str(o) for o in overrides]
    for text in overrides:
        key = override_key(text)
        if key in GROUPS:
            raise ConfigError(f"{key}: choose the {key} with the {key}= argument, not an override ({text!r})")
    choices = [f"task={task}", f"model={model}", f"algo={algo}", f"cluster={cluster}"]
    config = _compose_resolved(choices, {"grpo.seed": seed, "gdpo.experiment": experiment}, overrides)
    keep = [override_key(o) for o in overrides]
    reconcile_algo(config, keep, refuse=False)  # before derive: the run id names the dirs
    derive(config, keep=keep)
    drop_unread_keys(config, keep=keep)
    validate(config)
    reconcile_algo(config, keep)
    return config



def load_config_file(path, overrides: Sequence[str] = (), *, engine: str | None = None, wrong_engine: str = "") -> dict:
    """Read a run config YAML as NeMo RL does (`defaults:` inheritance, `_override_`),
    apply Hydra-grammar overrides, resolve interpolations, fill the gdpo keys the file
    leaves out with their defaults (gdpo_nemo/config/settings.py) and validate.

    This is what `python -m gdpo_nemo.commands.nemo_run --config PATH [overrides]` checks
    before anything launches. Returns a plain dict; raises ConfigError. `engine`: the engine
    the caller runs; a config for another one is refused in one line, before the full check
    (`wrong_engine` says what to do instead).
    """
    config = to_plain(apply_overrides(to_plain(read_with_inheritance(path)), overrides))
    if isinstance(config.get("gdpo"), dict):
        defaults = {key: value for key, value in gdpo_defaults().items() if key != "local"}
        config["gdpo"] = {**defaults, **config["gdpo"]}
        if engine is not None and config["gdpo"]["engine"] != engine:
            raise ConfigError(f"gdpo.engine: {config['gdpo']['engine']!r}; {wrong_engine}")
    keys = [override_key(o) for o in overrides]
    reconcile_algo(config, keys, refuse=False)
    validate(config)
    reconcile_algo(config, keys)
    return config
