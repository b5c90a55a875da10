"""Compose, validate and enumerate the run configs of the paper's experiments.

One run config = NeMo RL's GRPO config (pinned commit, shared/REFERENCE.md section 5) plus
our ``gdpo:`` block (docs/interfaces.md). It is composed with Hydra from the tree under
``configs/`` (``base.yaml`` and the groups ``task/``, ``model/``, ``algo/``, ``cluster/``),
then the NeMo RL keys that restate the gdpo block are derived from it, then the whole
config is validated:

- against NeMo RL's schema, written as data in ``gdpo_nemo/nemo_schema.py`` (unknown,
  missing or mistyped keys), and
- against our rules: the gdpo block's keys and values, GDPO's need for two or more reward
  components, weights that name existing components, the environment and data blocks
  agreeing with the gdpo block, ``grpo.adv_estimator`` agreeing with ``gdpo.estimator``.

Every problem is reported with its key path. Experiments (``experiments/<name>.yaml``)
list blocks of tasks x models x algos x seeds; ``load_experiment`` expands them into
``RunSpec`` values that name their runs with ``gdpo_nemo.run_id.RunId``.

The API the sweep and the CLI use::

    compose(task, model, algo, *, cluster="local", seed=42, experiment="adhoc", overrides=()) -> dict
    validate(config) -> None                       # raises ConfigError
    list_experiments() -> dict[str, str]
    load_experiment(name) -> list[RunSpec]
    check_cluster_consistency(config, nodes, gpus_per_node) -> None
    load_config_file(path, overrides=()) -> dict   # a user's own YAML, NeMo RL style

Nothing here imports torch or NeMo RL.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import yaml

from gdpo_nemo import nemo_schema
from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.config.settings import gdpo_defaults
from gdpo_nemo.config.validate import estimator_option_problems, gdpo_key_problems, reward_problems
from gdpo_nemo.run_id import RunId

__all__ = [
    "ConfigError",
    "RunSpec",
    "adv_estimator_for",
    "apply_overrides",
    "check_cluster_consistency",
    "compose",
    "config_dir",
    "dump",
    "experiments_dir",
    "group_options",
    "list_experiments",
    "load_config_file",
    "load_experiment",
    "needs_our_estimator",
    "run_id_of",
    "validate",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("task", "model", "algo", "cluster")

# The estimators of gdpo_nemo.advantages.ESTIMATORS (a test keeps the two equal; importing
# that module here would pull torch into `gdpo-nemo config`).
ESTIMATORS = ("grpo", "grpo_no_std", "gdpo", "gdpo_no_bn")
MULTI_COMPONENT_ESTIMATORS = ("gdpo", "gdpo_no_bn")
PRESETS = ("nemo_rl", "trl", "verl")
TASKS = ("toolcall", "gsm8k", "math", "code")
ENGINES = ("local", "nemo")
BATCH_NORMS = ("sample", "token")

# NeMo RL's own advantage estimator names at the pin, and the one our hook adds
# (gdpo_nemo/engines/nemo/estimators.py). The hook also computes grpo/gdpo whenever the
# gdpo block asks for what NeMo RL cannot (`needs_our_estimator`).
NATIVE_ADV_ESTIMATORS = ("grpo", "gdpo")
OUR_ADV_ESTIMATORS = ("gdpo_no_bn",)
NEMO_RL_GROUP_EPS = 1e-6  # the epsilon NeMo RL adds to a non-zero group std

# Our NeMo RL environments (gdpo_nemo/engines/nemo/environment.py) and data processors
# (gdpo_nemo/engines/nemo/data.py), one per task, registered by the plugin.
ENV_NAMES = {task: f"gdpo_{task}" for task in TASKS}
PROCESSOR_NAMES = {task: f"gdpo_{task}" for task in TASKS}
DATASET_CLASS = "gdpo_nemo.engines.nemo.datasets.TaskDataset"
DATA_SOURCES = ("offline", "file")
ON_DATA_ERROR = ("lowest", "nan", "raise")

# What our environments read from env.<name> (NeMo RL passes that block to the actor).
ENV_SCHEMA = {
    "task": "str",
    "components": "list[str]",
    "length_limit": "float|null",
    "conditioned_length": "bool",
    "num_workers": "int",
    "tokenizer": "str|null",
    "on_data_error": "str",
}

# The gdpo block (docs/interfaces.md). `local` belongs to the local engine, which checks it.
GDPO_SCHEMA = {
    "experiment": "str",
    "task": "str",
    "model_tag": "str",
    "algo": "str",
    "estimator": "str",
    "preset": "str|null",
    "reward_components": "list[str]",
    "reward_weights": "dict|null",
    "leave_one_out": "bool",
    "std_ddof": "int|null",
    "eps": "float|null",
    "batch_norm": "str",
    "scale_rewards": "str",
    "single_sample_groups": "str|null",
    "strict": "bool",
    "length_limit": "float|null",
    "conditioned_length": "bool",
    "engine": "str",
    "local?": "dict",
}

# Keys the composer writes from the gdpo block and the run id; a user override of one of
# them is kept (and then checked against the gdpo block by validate).
DERIVED_KEYS = (
    "grpo.adv_estimator",
    "grpo.normalize_rewards",
    "grpo.use_leave_one_out_baseline",
    "logger.log_dir",
    "logger.wandb.name",
    "logger.wandb.group",
    "checkpointing.checkpoint_dir",
)
RUNS_DIR_ENV = "GDPO_RUNS_DIR"


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


# ---------------------------------------------------------------------------------------
# Where the trees live.
# ---------------------------------------------------------------------------------------


def config_dir() -> Path:
    """The Hydra config tree: $GDPO_NEMO_CONFIGS, else <repo>/configs."""
    return Path(os.environ.get("GDPO_NEMO_CONFIGS", REPO_ROOT / "configs")).resolve()


def experiments_dir() -> Path:
    """The experiment files: $GDPO_NEMO_EXPERIMENTS, else <repo>/experiments."""
    return Path(os.environ.get("GDPO_NEMO_EXPERIMENTS", REPO_ROOT / "experiments")).resolve()


def group_options(group: str) -> list[str]:
    """The option names of one config group (configs/<group>/*.yaml), sorted."""
    if group not in GROUPS:
        raise ConfigError(f"unknown config group {group!r}; groups are {list(GROUPS)}")
    folder = config_dir() / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


# ---------------------------------------------------------------------------------------
# OmegaConf/Hydra plumbing.
# ---------------------------------------------------------------------------------------


def _register_resolvers() -> None:
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


def _to_plain(cfg) -> dict:
    """A resolved plain dict of an OmegaConf config; a missing (???) value is a ConfigError."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    _register_resolvers()
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"{key}: missing value (???): set it in a config group or with an override") from None
    except InterpolationResolutionError as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"{key}: interpolation failed: {err.msg if hasattr(err, 'msg') else err}") from None


def _override_key(override: str) -> str:
    """The dotted key an override string sets (`+a.b=1` -> `a.b`)."""
    key = override.split("=", 1)[0].strip()
    return key.lstrip("+~")


def apply_overrides(config: dict, overrides: Iterable[str]) -> dict:
    """`config` with Hydra-grammar overrides applied (NeMo RL's command-line semantics).

    `key=value` changes an existing key, `+key=value` adds a new one, `++key=value` does
    either, `~key` deletes. Values use Hydra's grammar (`[1,2]`, `{a: 1}`, `null`).
    Raises ConfigError naming the override at fault.
    """
    overrides = list(overrides)
    if not overrides:
        return copy.deepcopy(config)
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(copy.deepcopy(config))
    OmegaConf.set_struct(cfg, True)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    except Exception as err:  # hydra's OverrideParseException names the bad text
        raise ConfigError(f"override syntax: {err}") from None
    for item, text in zip(parsed, overrides):
        try:
            ConfigLoaderImpl._apply_overrides_to_config(overrides=[item], cfg=cfg)
        except Exception as err:
            raise ConfigError(f"{_override_key(text)}: override {text!r} failed: {_first_line(err)}") from None
    return _to_plain(cfg)


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _hydra_compose(overrides: list[str]):
    from hydra import compose as hydra_compose
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
            return hydra_compose(config_name="base", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(_explain_hydra_error(err, overrides)) from None
    finally:
        GlobalHydra.instance().clear()


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
        bad = next((o for o in overrides if _override_key(o) and f"'{_override_key(o)}'" in text), None)
        where = _override_key(bad) if bad else (key or "override")
        return f"{where}: {text} (add a new key with +{where}=VALUE)"
    return f"{key or 'config'}: {text}"


# ---------------------------------------------------------------------------------------
# Deriving NeMo RL keys from the gdpo block.
# ---------------------------------------------------------------------------------------


def _our_env_blocks(config: Mapping) -> dict:
    env = config.get("env") or {}
    return {name: block for name, block in env.items() if name in ENV_NAMES.values() and isinstance(block, dict)}


def needs_our_estimator(gdpo: Mapping, env_blocks: Mapping | None = None) -> bool:
    """Whether NeMo RL's native estimators cannot express the gdpo block (then the plugin's
    hook computes the advantages with gdpo_nemo.advantages).

    Native: grpo, grpo_no_std (grpo without normalization, also grpo with scale_rewards
    "none") and gdpo with per-sample batch norm and group scaling, NeMo RL's numerics
    (preset nemo_rl or none, std_ddof 1 or null, eps 1e-6 or null: null is the preset's),
    single-sample groups at 0, and finite rewards; grpo-family weights other than 1 are ours
    (NeMo RL sums rewards unweighted).
    """
    estimator = gdpo.get("estimator")
    if estimator not in ("grpo", "grpo_no_std", "gdpo"):
        return True
    if gdpo.get("preset") not in (None, "nemo_rl"):
        return True
    std_ddof, eps = gdpo.get("std_ddof"), gdpo.get("eps")
    if std_ddof not in (None, 1) or not (eps is None or _close(eps, NEMO_RL_GROUP_EPS)):
        return True
    if gdpo.get("batch_norm", "sample") != "sample":
        return True
    scale = gdpo.get("scale_rewards", "group")
    if scale == "batch" or (scale == "none" and estimator == "gdpo"):
        return True
    if gdpo.get("single_sample_groups") == "raise":
        return True
    weights = gdpo.get("reward_weights") or {}
    if estimator != "gdpo" and any(not _close(w, 1.0) for w in weights.values()):
        return True
    if any((block or {}).get("on_data_error") == "nan" for block in (env_blocks or {}).values()):
        return True  # NaN rewards poison NeMo RL's estimators; ours leave them out
    return False


def _close(a, b) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def adv_estimator_for(gdpo: Mapping, env_blocks: Mapping | None = None) -> dict:
    """The `grpo.adv_estimator` block that restates gdpo.estimator in NeMo RL's terms.

    grpo -> grpo; grpo_no_std -> grpo with normalize_rewards false; gdpo -> gdpo;
    gdpo_no_bn -> gdpo_no_bn (ours: NeMo RL has no such name). Weights other than 1 are
    written as NeMo RL's list, ordered by sorted component name. Whether NeMo RL's own
    estimator or gdpo_nemo's computes the advantages is `needs_our_estimator(gdpo)`: the
    plugin's hook decides from the gdpo block, so a weighted GRPO or a token-level batch
    norm keeps the readable name grpo / gdpo here (and the local engine accepts it).
    """
    estimator = gdpo.get("estimator")
    name = {"gdpo": "gdpo", "gdpo_no_bn": "gdpo_no_bn"}.get(estimator, "grpo")
    weights = gdpo.get("reward_weights")
    components = gdpo.get("reward_components") or []
    listed = None
    if weights and any(not _close(w, 1.0) for w in weights.values()):
        listed = [float(weights.get(component, 1.0)) for component in sorted(components)]
    return {
        "name": name,
        "normalize_rewards": estimator != "grpo_no_std" and gdpo.get("scale_rewards", "group") != "none",
        "use_leave_one_out_baseline": bool(gdpo.get("leave_one_out", False)),
        "reward_weights": listed,
        "minus_baseline": True,
    }


def run_id_of(config: Mapping) -> RunId:
    """The run id a config names itself by; a ConfigError if its parts are invalid."""
    try:
        return RunId.from_config(config)
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"gdpo: cannot name the run ({err}); check gdpo.experiment/task/model_tag/algo and grpo.seed") from None


def _set_path(config: dict, path: str, value) -> None:
    node = config
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _derive(config: dict, keep: Iterable[str]) -> None:
    """Write DERIVED_KEYS from the gdpo block and the run id, except those in `keep`."""
    keep = list(keep)

    def kept(path: str) -> bool:
        return any(k == path or k.startswith(path + ".") or path.startswith(k + ".") for k in keep)

    gdpo = config["gdpo"]
    adv = adv_estimator_for(gdpo, _our_env_blocks(config))
    run_id = run_id_of(config)
    runs_root = Path(os.environ.get(RUNS_DIR_ENV, "runs"))
    run_dir = runs_root / run_id.name
    # NeMo RL writes its logs into logger.log_dir itself: that is the run dir. The local
    # engine's `gdpo-nemo train` puts a run in <logger.log_dir>/<run id>: there it is the root.
    log_dir = run_dir if gdpo.get("engine") == "nemo" else runs_root
    values = {
        "grpo.adv_estimator": adv,
        "grpo.normalize_rewards": adv["normalize_rewards"],
        "grpo.use_leave_one_out_baseline": adv["use_leave_one_out_baseline"],
        "logger.log_dir": str(log_dir),
        "logger.wandb.name": run_id.name,
        "logger.wandb.group": run_id.group,
        "checkpointing.checkpoint_dir": str(run_dir / "checkpoints"),
    }
    for path, value in values.items():
        if not kept(path):
            _set_path(config, path, value)


# ---------------------------------------------------------------------------------------
# compose
# ---------------------------------------------------------------------------------------


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
    is $GDPO_RUNS_DIR/<run id> (default runs/<run id>): logger.log_dir itself for the nemo
    engine, its parent for the local engine (`gdpo-nemo train` appends the run id).
    Returns a plain dict. Raises ConfigError naming the key path of every problem.
    """
    for group, value in (("task", task), ("model", model), ("algo", algo), ("cluster", cluster)):
        _check_choice(group, value)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"grpo.seed: seed={seed!r} must be a non-negative int")
    if isinstance(overrides, str):
        raise ConfigError(f"overrides must be a list of key=value strings, got the string {overrides!r}")
    overrides = [str(o) for o in overrides]
    for text in overrides:
        key = _override_key(text)
        if key in GROUPS:
            raise ConfigError(f"{key}: choose the {key} with the {key}= argument, not an override ({text!r})")
    hydra_overrides = [
        f"task={task}",
        f"model={model}",
        f"algo={algo}",
        f"cluster={cluster}",
        f"grpo.seed={seed}",
        f"gdpo.experiment={experiment}",
        *overrides,
    ]
    config = _to_plain(_hydra_compose(hydra_overrides))
    _derive(config, keep=[_override_key(o) for o in overrides])
    _drop_unread_data_paths(config, keep=[_override_key(o) for o in overrides])
    validate(config)
    return config


def _drop_unread_data_paths(config: dict, keep: Iterable[str]) -> None:
    """Remove `data_path` from our dataset blocks whose source is "offline" (the task's
    generated set reads no file) in a nemo-engine config, unless an override set it (then
    validate refuses the pair).

    NeMo RL types data_path NotRequired[str]: a null there is refused by its MasterConfig, and
    a path with source offline is refused by our dataset; the task files' default path only
    serves source "file".
    """
    if _get(config, "gdpo.engine") != "nemo":
        return  # the local engine reads data_path by gdpo.local.data_source, not data.*.source
    keep = set(keep)
    data = config.get("data") or {}
    for split in ("train", "validation"):
        blocks = data.get(split)
        for block in blocks if isinstance(blocks, list) else [blocks]:
            if (
                isinstance(block, dict)
                and block.get("dataset_name") == DATASET_CLASS
                and block.get("source", "offline") == "offline"
                and "data_path" in block
                and f"data.{split}.data_path" not in keep
            ):
                del block["data_path"]


# ---------------------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------------------


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _get(config: Mapping, path: str, default=None):
    node = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def _check_gdpo_block(config: Mapping, problems: list[str]) -> None:
    gdpo = config["gdpo"]
    before = len(problems)
    problems.extend(nemo_schema.check_against_schema(gdpo, GDPO_SCHEMA, "gdpo"))
    if len(problems) > before:
        return
    problems.extend(gdpo_key_problems(gdpo))
    try:
        RunId.from_config(config)
    except (KeyError, TypeError, ValueError) as err:
        problems.append(f"gdpo: the run cannot be named: {err}")
    if len(problems) > before:
        return
    _check_rewards(gdpo, problems)


def _check_rewards(gdpo: Mapping, problems: list[str]) -> None:
    problems.extend(reward_problems(gdpo))
    problems.extend(estimator_option_problems(gdpo))


def _check_estimator_keys(config: Mapping, problems: list[str]) -> None:
    gdpo = config["gdpo"]
    expected = adv_estimator_for(gdpo, _our_env_blocks(config))
    actual = _get(config, "grpo.adv_estimator", {}) or {}
    for key, want in expected.items():
        if key == "minus_baseline":
            continue  # Reinforce++ only
        have = actual.get(key, None)
        if have != want:
            problems.append(
                f"grpo.adv_estimator.{key}: {have!r} contradicts the gdpo block (gdpo.estimator={gdpo['estimator']!r},"
                f" gdpo.leave_one_out={gdpo['leave_one_out']!r}, gdpo.reward_weights={gdpo['reward_weights']!r});"
                f" expected {want!r} (leave the key to the composer, or change the gdpo block)"
            )
    for key in ("normalize_rewards", "use_leave_one_out_baseline"):
        have = _get(config, f"grpo.{key}")
        if have != expected[key]:
            problems.append(
                f"grpo.{key}: {have!r} differs from grpo.adv_estimator.{key}={expected[key]!r}; NeMo RL uses"
                " the first for dynamic sampling and logging and the second for advantages: keep them equal"
            )
    groups = _get(config, "grpo.num_generations_per_prompt")
    if isinstance(groups, int) and groups < 2:
        problems.append(
            f"grpo.num_generations_per_prompt: {groups} rollout(s) per prompt; group-relative estimators need >= 2"
        )


def _check_env_and_data(config: Mapping, problems: list[str]) -> None:
    gdpo = config["gdpo"]
    task = gdpo["task"]
    env = config.get("env") or {}
    for name, block in env.items():
        if name in ENV_NAMES.values():
            before = len(problems)
            problems.extend(nemo_schema.check_against_schema(block, ENV_SCHEMA, f"env.{name}"))
            if len(problems) > before:
                continue
            if name != ENV_NAMES.get(block["task"]):
                problems.append(f"env.{name}.task: {block['task']!r} does not fit environment {name!r} (expects {name[5:]!r})")
            for key, gdpo_key in (
                ("task", "task"),
                ("components", "reward_components"),
                ("length_limit", "length_limit"),
                ("conditioned_length", "conditioned_length"),
            ):
                if block[key] != gdpo[gdpo_key]:
                    problems.append(
                        f"env.{name}.{key}: {block[key]!r} differs from gdpo.{gdpo_key}={gdpo[gdpo_key]!r}"
                        f" (the environment scores what the estimator normalizes; write ${{gdpo.{gdpo_key}}})"
                    )
            if block["num_workers"] < 1:
                problems.append(f"env.{name}.num_workers: {block['num_workers']} must be >= 1")
            if block["on_data_error"] not in ON_DATA_ERROR:
                problems.append(f"env.{name}.on_data_error: {block['on_data_error']!r} is not one of {list(ON_DATA_ERROR)}")
    data = config.get("data") or {}
    default = data.get("default") or {}
    for split in ("train", "validation"):
        blocks = data.get(split)
        if blocks is None:
            continue
        for index, block in enumerate(blocks if isinstance(blocks, list) else [blocks]):
            if not isinstance(block, dict):
                continue
            where = f"data.{split}" + (f"[{index}]" if isinstance(blocks, list) else "")
            merged = {**default, **block}
            env_name = merged.get("env_name")
            if env_name is None:
                problems.append(f"{where}.env_name: missing (set data.default.env_name or {where}.env_name)")
            elif env_name not in env:
                problems.append(f"{where}.env_name: {env_name!r} has no env.{env_name} block; env has {sorted(env)}")
            elif env_name in ENV_NAMES.values() and env_name != ENV_NAMES[task]:
                problems.append(f"{where}.env_name: {env_name!r} does not score gdpo.task={task!r}; use {ENV_NAMES[task]!r}")
            processor = merged.get("processor")
            if processor in PROCESSOR_NAMES.values() and processor != PROCESSOR_NAMES[task]:
                problems.append(f"{where}.processor: {processor!r} does not fit gdpo.task={task!r}; use {PROCESSOR_NAMES[task]!r}")
            if merged.get("dataset_name") == DATASET_CLASS:
                _check_dataset_block(merged, where, task, problems, engine=gdpo["engine"])


def _check_dataset_block(block: Mapping, where: str, task: str, problems: list[str], engine: str = "nemo") -> None:
    if block.get("task") != task:
        problems.append(f"{where}.task: {block.get('task')!r} differs from gdpo.task={task!r}")
    source = block.get("source", "offline")
    if source not in DATA_SOURCES:
        problems.append(f"{where}.source: {source!r} is not one of {list(DATA_SOURCES)}")
    if source == "file" and not block.get("data_path"):
        problems.append(f"{where}.data_path: missing; source 'file' reads a data file or folder")
    if source == "offline" and "data_path" in block and engine == "nemo":
        problems.append(
            f"{where}.data_path: {block['data_path']!r} but source is 'offline' (the task's generated set reads"
            " no file): remove data_path (~" + where + ".data_path) or set source: file"
        )
    if block.get("split") not in ("train", "validation"):
        problems.append(f"{where}.split: {block.get('split')!r} is not one of ['train', 'validation']")
    if block.get("prompt_file"):
        problems.append(f"{where}.prompt_file: must be null; gdpo_nemo's rows carry their prompts (use system_prompt_file to replace the system message)")


def _check_engine(config: Mapping, problems: list[str]) -> None:
    if config["gdpo"]["engine"] != "nemo":
        return
    model = _get(config, "policy.model_name")
    if isinstance(model, str) and model.startswith("builtin:"):
        problems.append(f"policy.model_name: {model!r} is a local-engine model; NeMo RL needs a hub name or checkpoint path")
    if _get(config, "grpo.async_grpo.enabled"):
        problems.append("grpo.async_grpo.enabled: true is not supported: gdpo_nemo's metric hooks wrap the synchronous trainer")
    if (_get(config, "data_plane") or {}).get("enabled"):
        problems.append("data_plane.enabled: true is not supported: gdpo_nemo's hooks wrap the legacy synchronous trainer")
    metric = _get(config, "checkpointing.metric_name")
    prefix, _, name = str(metric).partition(":")
    if prefix in ("val", "train") and name.startswith("reward/"):
        components = config["gdpo"]["reward_components"]
        if name[len("reward/"):] not in components:
            problems.append(
                f"checkpointing.metric_name: {metric!r} names no reward component; gdpo_nemo logs"
                f" {[f'{prefix}:reward/{c}' for c in components]}"
            )
    generation = _get(config, "policy.generation") or {}
    if generation.get("backend") == "vllm" and "vllm_cfg" not in generation:
        problems.append("policy.generation.vllm_cfg: missing; backend 'vllm' needs it")


def validate(config: dict) -> None:
    """Check a resolved run config; raise ConfigError listing every problem by key path.

    Checks NeMo RL's schema (gdpo_nemo/nemo_schema.py: unknown, missing, mistyped keys),
    the gdpo block (docs/interfaces.md), the reward set (GDPO needs >= 2 components;
    weights must name components), grpo.adv_estimator against gdpo.estimator, our
    environment and dataset blocks against the gdpo block, and what the nemo engine cannot
    run (a built-in model, async GRPO). Returns None when the config is valid.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"config: {type(config).__name__} is not a mapping")
    if "gdpo" not in config:
        raise ConfigError("gdpo: missing; a run config needs the gdpo block (docs/interfaces.md, 'Run config')")
    problems = nemo_schema.check_against_schema(dict(config), dict(nemo_schema.SCHEMA, gdpo="dict"))
    if isinstance(config.get("gdpo"), dict):
        _check_gdpo_block(config, problems)
    if problems:
        raise ConfigError(problems)
    _check_estimator_keys(config, problems)
    _check_env_and_data(config, problems)
    _check_engine(config, problems)
    if problems:
        raise ConfigError(problems)


def check_cluster_consistency(config: Mapping, nodes: int, gpus_per_node: int) -> None:
    """Check a run config against the Slurm request that will run it.

    nemo engine: cluster.num_nodes must equal the request's --nodes and
    cluster.gpus_per_node its GPUs per node (NeMo RL places workers from these numbers; a
    mismatch hangs or idles the allocation). local engine: one process, so nodes must be 1.
    Raises ConfigError naming the key and both numbers.
    """
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"Slurm request {name}={value!r} must be a non-negative int")
    engine = _get(config, "gdpo.engine")
    if engine == "local":
        if nodes != 1:
            raise ConfigError(f"gdpo.engine: the local engine runs one process on one node; the Slurm request has --nodes={nodes}")
        return
    problems = []
    have_nodes = _get(config, "cluster.num_nodes")
    have_gpus = _get(config, "cluster.gpus_per_node")
    if have_nodes != nodes:
        problems.append(f"cluster.num_nodes: {have_nodes!r} but the Slurm request has --nodes={nodes}; they must be equal")
    if have_gpus != gpus_per_node:
        problems.append(
            f"cluster.gpus_per_node: {have_gpus!r} but the Slurm request gives {gpus_per_node} GPU(s) per node; they must be equal"
        )
    if problems:
        raise ConfigError(problems)


# ---------------------------------------------------------------------------------------
# A user's own config file (NeMo RL's loader semantics).
# ---------------------------------------------------------------------------------------


def _read_with_inheritance(path: Path, seen: tuple = ()) -> dict:
    """A YAML config with NeMo RL's `defaults: parent.yaml` inheritance and `_override_: true`."""
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
        merged = _merge_override(merged, _read_with_inheritance(parent_path, seen + (path.resolve(),)))
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


def load_config_file(path, overrides: Sequence[str] = ()) -> dict:
    """Read a run config YAML as NeMo RL does (`defaults:` inheritance, `_override_`),
    apply Hydra-grammar overrides, resolve interpolations and validate.

    This is what `python -m gdpo_nemo.engines.nemo.run --config PATH [overrides]` checks
    before anything launches. Returns a plain dict; raises ConfigError.
    """
    from omegaconf import OmegaConf

    cfg = _read_with_inheritance(Path(path))
    config = apply_overrides(_to_plain(OmegaConf.create(cfg)), overrides)
    validate(config)
    return config


def dump(config: Mapping) -> str:
    """The config as YAML text, keys in their composed order."""
    return yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=None, width=100)


# ---------------------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------------------

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
        raise ConfigError(f"experiment file {path}: not valid YAML ({_first_line(err)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"experiment file {path}: must hold a mapping with keys {list(EXPERIMENT_KEYS)}")
    return data


def _str_list(value, where: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {value!r} must be a non-empty list of names")
    return list(value)


def _seed_list(value, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise ConfigError(f"{where}: {value!r} must be a non-empty list of non-negative ints")
    return list(value)


_IDENTITY_CACHE: dict = {}


def _identity_parts(task: str, model: str, algo: str, cluster: str) -> tuple[str, str]:
    """(gdpo.task, gdpo.model_tag) a task option and a model option compose to (cached;
    neither depends on the algo, which Hydra still needs to compose)."""
    key = (str(config_dir()), task, model, cluster)
    if key not in _IDENTITY_CACHE:
        cfg = _hydra_compose([f"task={task}", f"model={model}", f"algo={algo}", f"cluster={cluster}"])
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
    path = experiments_dir() / f"{name}.yaml"
    data = _read_experiment_file(path)
    unknown = sorted(set(data) - set(EXPERIMENT_KEYS))
    if unknown:
        raise ConfigError(f"experiments/{name}.yaml: unknown key(s) {unknown}; accepted: {list(EXPERIMENT_KEYS)}")
    blocks = data.get("runs")
    if not isinstance(blocks, list) or not blocks:
        raise ConfigError(f"experiments/{name}.yaml: runs must be a non-empty list of blocks")
    base_overrides = data.get("overrides") or []
    specs: list[RunSpec] = []
    seen: dict[RunId, str] = {}
    for number, block in enumerate(blocks):
        where = f"experiments/{name}.yaml runs[{number}]"
        if not isinstance(block, dict):
            raise ConfigError(f"{where}: must be a mapping with keys {list(BLOCK_KEYS)}")
        extra = sorted(set(block) - set(BLOCK_KEYS))
        if extra:
            raise ConfigError(f"{where}: unknown key(s) {extra}; accepted: {list(BLOCK_KEYS)}")
        tasks = _str_list(block.get("tasks"), f"{where}.tasks")
        models = _str_list(block.get("models"), f"{where}.models")
        algos = _str_list(block.get("algos"), f"{where}.algos")
        seeds = _seed_list(block.get("seeds", data.get("seeds")), f"{where}.seeds")
        cluster = block.get("cluster", data.get("cluster", "local"))
        overrides = [*base_overrides, *(block.get("overrides") or [])]
        if not all(isinstance(o, str) for o in overrides):
            raise ConfigError(f"{where}.overrides: must be a list of key=value strings")
        label = block.get("label", "{algo}")
        if not isinstance(label, str) or "{algo}" not in label:
            raise ConfigError(f"{where}.label: {label!r} must be a format string containing {{algo}}")
        for group, values in (("task", tasks), ("model", models), ("algo", algos), ("cluster", [cluster])):
            for value in values:
                if value not in group_options(group):
                    raise ConfigError(f"{where}: {group} {value!r} is not a {group} config; accepted: {group_options(group)}")
        for task in tasks:
            for model in models:
                task_name, model_tag = _identity_parts(task, model, algos[0], cluster)
                for algo in algos:
                    algo_label = label.format(algo=algo)
                    run_overrides = list(overrides)
                    if algo_label != algo:
                        run_overrides.append(f"gdpo.algo={algo_label}")
                    for seed in seeds:
                        try:
                            run_id = RunId(name, task_name, model_tag, algo_label, seed)
                        except ValueError as err:
                            raise ConfigError(f"{where}: {err}") from None
                        if run_id in seen:
                            raise ConfigError(
                                f"{where}: run {run_id.name} is also made by {seen[run_id]}; give one block a"
                                " `label` such as '{algo}_variant' to keep their runs apart"
                            )
                        seen[run_id] = where
                        specs.append(RunSpec(run_id, task, model, algo, seed, cluster, tuple(run_overrides)))
    return specs
