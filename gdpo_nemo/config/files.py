"""Where the config trees live, and reading and writing config files.

A run config file is read as NeMo RL reads its own: YAML with ``defaults: parent.yaml``
inheritance (a path or a list of them, relative to the file) and ``_override_: true`` in a
section to replace the parent's section instead of merging into it. Interpolations
(``${gdpo.task}``, NeMo RL's ``${mul:a,b}``) are resolved by `to_plain`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.layout import REPO_ROOT
# The one serialization of a config, under the name this package's API has always used.
from gdpo_nemo.runs.rundir import config_yaml as dump

__all__ = ["REPO_ROOT", "config_dir", "dump", "experiments_dir", "read_config_file", "read_with_inheritance", "to_plain"]



def config_dir() -> Path:
    """The Hydra config tree: $GDPO_NEMO_CONFIGS, else <repo>/configs."""
    return Path(os.environ.get("GDPO_NEMO_CONFIGS", REPO_ROOT / "configs")).resolve()


def experiments_dir() -> Path:
    """The experiment files: $GDPO_NEMO_EXPERIMENTS, else <repo>/experiments."""
    return Path(os.environ.get("GDPO_NEMO_EXPERIMENTS", REPO_ROOT / "experiments")).resolve()


def register_resolvers() -> None:
    """NeMo RL's interpolation resolvers (its configs use ${mul:a,b})."""
    from omegaconf import OmegaConf

    for name, fn in (
        ("mul", lambda a, b: a * b),
        ("add", lambda a, b: a + b),
        ("div", lambda a, b: a / b),
        ("max", lambda a, b: max(a, b)),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def to_plain(cfg) -> dict:
    """A resolved plain dict of an OmegaConf config or a plain dict; a missing (???) value or
    a failed interpolation is a ConfigError naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    register_resolvers()
    if isinstance(cfg, Mapping):
        cfg = OmegaConf.create(dict(cfg))
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"{key}: missing value (???): set it in a config group or with an override") from None
    except InterpolationResolutionError as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"{key}: interpolation failed: {err.msg if hasattr(err, 'msg') else err}") from None


def read_with_inheritance(path: Path, seen: tuple = ()):
    """A YAML config (an OmegaConf DictConfig, interpolations unresolved) with NeMo RL's
    `defaults: parent.yaml` inheritance and `_override_: true`."""
    from omegaconf import DictConfig, OmegaConf

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    if path.resolve() in seen:
        raise ConfigError(f"config file {str(path)!r} inherits from itself through 'defaults'")
    loaded = OmegaConf.load(path)
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping")
    parents = loaded.pop("defaults", None)
    if parents is None:
        return loaded
    merged = OmegaConf.create({})
    for parent in [parents] if isinstance(parents, str) else list(parents):
        parent_path = Path(str(parent))
        parent_path = parent_path if parent_path.is_absolute() else path.parent / parent_path
        merged = _merge_override(merged, read_with_inheritance(parent_path, seen + (path.resolve(),)))
    return _merge_override(merged, loaded)


def _merge_override(base, child):
    """OmegaConf merge where a child section with `_override_: true` replaces the base's."""
    from omegaconf import DictConfig, OmegaConf

    for key in list(child.keys()):
        value = child._get_node(key)
        if isinstance(value, DictConfig) and value.get("_override_", False):
            value.pop("_override_")
            if key in base:
                base.pop(key)
    return OmegaConf.merge(base, child)


def read_config_file(path) -> dict:
    """A run config file as a plain dict, inheritance applied, interpolations unresolved."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(read_with_inheritance(Path(path)), resolve=False)


