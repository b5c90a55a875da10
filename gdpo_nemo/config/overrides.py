"""Command-line overrides of a run config, in Hydra's grammar, for both engines.

    key.path=value     change a key that exists
    +key.path=value    add a key that does not exist
    ++key.path=value   set a key whether or not it exists
    ~key.path          delete a key

Values are Hydra's (``[1,2]``, ``{a: 1}``, ``null``, ``3e-4``, ``'quoted'``, ``${interp}``).
Parsing is Hydra's public ``OverridesParser``; applying is OmegaConf's public API. NeMo RL's
``examples/run_grpo.py`` applies its command line the same way (Hydra's parser on an
OmegaConf config), so a line that works for one engine works for the other.
"""

from __future__ import annotations

import copy
from typing import Callable, Iterable

from gdpo_nemo.errors import UserError
from gdpo_nemo.config.errors import ConfigError, first_line

__all__ = ["apply_overrides", "override_key", "parse_overrides"]


def override_key(override: str) -> str:
    """The dotted key an override string sets (`+a.b=1` -> `a.b`, `~a` -> `a`)."""
    key = override.split("=", 1)[0].strip()
    return key.lstrip("+~")


def parse_overrides(overrides: Iterable[str]) -> list:
    """Hydra ``Override`` objects of override strings; a ConfigError names bad syntax."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = list(overrides)
    for text in overrides:
        if "=" not in text and not text.startswith("~"):
            raise ConfigError(f"override {text!r} is not key=value (e.g. grpo.seed=3)")
    try:
        return OverridesParser.create().parse_overrides(overrides=overrides)
    except Exception as err:  # hydra's OverrideParseException names the bad text
        raise ConfigError(f"override syntax: {first_line(err)}") from None


_MISSING = object()


def apply_overrides(config: dict, overrides: Iterable[str], *, settable: Callable[[str], bool] | None = None) -> dict:
    """A copy of `config` (a plain dict, interpolations kept) with `overrides` applied.

    settable: keys that a plain `key=value` may set although the config lacks them (the
    local engine: the key tree's keys, config.nemo_keys, whose defaults fill a missing key
    later); without
    it a plain override of a missing key is an error, as in Hydra.
    Raises ConfigError naming the override at fault and why.
    """
    from omegaconf import OmegaConf

    overrides = [str(o) for o in overrides]
    if not overrides:
        return copy.deepcopy(config)
    parsed = parse_overrides(overrides)
    cfg = OmegaConf.create(copy.deepcopy(config))
    for item, text in zip(parsed, overrides):
        key = item.key_or_group
        exists = OmegaConf.select(cfg, key, default=_MISSING, throw_on_resolution_failure=False) is not _MISSING
        try:
            if item.is_delete():
                if not exists:
                    raise UserError(f"{key!r} is not in the config")
                _delete(cfg, key)
            elif item.is_add() and exists:
                raise UserError(f"{key!r} is already in the config (use {key}=value to change it)")
            elif not (item.is_add() or item.is_force_add()) and not exists and not (settable and settable(key)):
                near = _nearest_keys(cfg, key)
                if near:
                    raise UserError(f"{key!r} is not in the config: did you mean {' or '.join(near)}? "
                                     f"(to add a new key, +{key}=value)")
                raise UserError(f"{key!r} is not in the config (use +{key}=value to add it)")
            else:
                OmegaConf.update(cfg, key, item.value(), merge=True, force_add=True)
        except ValueError as err:
            raise ConfigError(f"{key}: override {text!r} failed: {err}") from None
        except Exception as err:  # OmegaConf's errors (a key under a non-mapping, ...)
            raise ConfigError(f"{key}: override {text!r} failed: {first_line(err)}") from None
    return OmegaConf.to_container(cfg, resolve=False)


def _nearest_keys(cfg, key: str) -> list[str]:
    """Keys of `cfg` (an OmegaConf config) spelled like `key` (`nearest_keys`)."""
    from omegaconf import OmegaConf

    return nearest_keys(OmegaConf.to_container(cfg, resolve=False), key)


def nearest_keys(config: dict, key: str) -> list[str]:
    """Key paths of `config` (a plain dict) spelled like `key`, at most two: what a
    misspelled override most likely meant."""
    import difflib

    paths: list[str] = []

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                path = f"{prefix}{name}"
                paths.append(path)
                walk(value, path + ".")

    walk(config, "")
    return difflib.get_close_matches(key, paths, n=2, cutoff=0.8)


def _delete(cfg, key: str) -> None:
    """Remove `key` (dotted) from an OmegaConf config."""
    from omegaconf import OmegaConf

    parent, _, last = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    node.pop(last)
