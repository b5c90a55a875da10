"""The run id's algo label follows the method the config runs (issue 24, item 3).

`gdpo.algo` names the run (run dir, W&B name and group, checkpoint dir: gdpo_nemo.runs.run_id).
The presets of ``configs/algo/`` each fix the method behind a label: `gdpo.estimator` and
`gdpo.reward_weights` (METHOD_KEYS). When an override changes the method while the label
still names a preset that says otherwise (``algo=gdpo gdpo.estimator=grpo``), a run labelled
GDPO would run GRPO and share the real GDPO run's directory. `reconcile_algo` therefore

- relabels the run with the one preset whose method it now runs (here `grpo`; with no such
  preset, a label of the estimator and its weights, `auto_label`), and renames what was
  named after the old run id, when an override changed the method and none set `gdpo.algo`;
- refuses the config otherwise (a label the user set, a file that contradicts itself, a
  method no preset runs), naming the key, the preset and the ways out.

A label that is no preset's name (`gdpo.algo=my-ablation`) is the user's own and is taken
as it is.
"""

from __future__ import annotations

from functools import lru_cache

import yaml

from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.config.files import config_dir

METHOD_KEYS = ("estimator", "reward_weights")
# Keys named after the run id that follow a relabelled run (when they still hold the old name).
NAMED_KEYS = (("logger", "log_dir"), ("logger", "wandb", "name"), ("logger", "wandb", "group"),
              ("checkpointing", "checkpoint_dir"))


@lru_cache(maxsize=1)
def algo_presets() -> dict[str, dict]:
    """{preset name: its gdpo block} of configs/algo/*.yaml."""
    presets = {}
    for path in sorted((config_dir() / "algo").glob("*.yaml")):
        block = (yaml.safe_load(path.read_text()) or {}).get("gdpo") or {}
        presets[path.stem] = block
    return presets


def _method(gdpo: dict, preset: dict | None = None) -> tuple:
    source = gdpo if preset is None else preset
    weights = source.get("reward_weights") or {}
    return source.get("estimator", gdpo.get("estimator")), tuple(sorted((str(k), float(v)) for k, v in weights.items()))


def reconcile_algo(config: dict, override_keys, *, refuse: bool = True) -> str | None:
    """Check (and, when allowed, fix) that `gdpo.algo` names the method the config runs.
    `override_keys`: the keys the user's overrides set. The run is relabelled only when an
    override changed the method (gdpo.estimator, gdpo.reward_weights) and none set
    gdpo.algo; a label the user chose, or a file that contradicts itself, is refused
    instead. Returns the new label when the run was relabelled, else None. Raises
    ConfigError naming the key, the preset and the ways out (unless `refuse` is False: the
    composers relabel before deriving the names and refuse after validating the values, so
    that a bad value is reported as such)."""
    gdpo = config.get("gdpo")
    if not isinstance(gdpo, dict):
        return None
    presets = algo_presets()
    label = gdpo.get("algo")
    ours = _method(gdpo)
    if label not in presets or ours == _method(gdpo, presets[label]):
        return None
    keys = [str(key) for key in override_keys]
    method_changed = any(key == f"gdpo.{name}" or key.startswith(f"gdpo.{name}.") for key in keys for name in METHOD_KEYS)
    matches = [name for name, block in presets.items() if ours == _method(gdpo, block)]
    if method_changed and "gdpo.algo" not in keys:
        new = matches[0] if len(matches) == 1 else auto_label(gdpo)
        _relabel(config, label, new)
        return new
    if not refuse:
        return None
    preset = presets[label]
    theirs = _method(gdpo, preset)
    differ = [key for index, key in enumerate(METHOD_KEYS) if ours[index] != theirs[index]]
    shown = ", ".join(f"gdpo.{key}={gdpo.get(key)!r}" for key in differ)
    wanted = ", ".join(f"{key} {preset.get(key)!r}" for key in differ)
    ways = "name this variant with gdpo.algo=<a label of your own>"
    if matches:
        ways = f"choose algo={matches[0]} (the preset of this method), or {ways}"
    raise ConfigError(
        f"{shown} contradicts gdpo.algo={label!r}, whose preset configs/algo/{label}.yaml sets {wanted}: the run id, "
        f"run dir and W&B name would say {label}; {ways}"
    )


def auto_label(gdpo: dict) -> str:
    """The label of a method no preset runs: the estimator, then its weights if any, e.g.
    ``grpo_wcorrectness1-length0.3`` (in the run id's alphabet)."""
    estimator, weights = _method(gdpo)
    if not weights:
        return str(estimator)
    return f"{estimator}_w" + "-".join(f"{name}{value:g}" for name, value in weights)


def _relabel(config: dict, old: str, new: str) -> None:
    """Set gdpo.algo to `new`, and rename the `old` run id's name and group in NAMED_KEYS."""
    from gdpo_nemo.runs.run_id import RunId

    try:
        before = RunId.from_config(config)
    except (KeyError, TypeError, ValueError):
        before = None
    config["gdpo"]["algo"] = new
    if before is None:
        return
    after = RunId.from_config(config)
    for path in NAMED_KEYS:
        holder = config
        for key in path[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and isinstance(holder.get(path[-1]), str):
            value = holder[path[-1]]
            holder[path[-1]] = value.replace(before.name, after.name).replace(before.group, after.group)
