"""The whole run config validated once, before any work, on both engines.

`validate(config)` (the composer, `load_config_file`, the NeMo RL entry point, the sweep)
checks, and reports every problem by key path in one ConfigError:

- the key tree (gdpo_nemo/config/nemo_keys.py: NeMo RL's keys and the gdpo block, whose
  leaves carry the settings checks of gdpo_nemo/config/settings.py): unknown, missing,
  mistyped keys, each reported by the one walker (gdpo_nemo/config/key_walk.py);
- the gdpo block as a whole (`check_keys`): what no single key shows: the reward set against the
  task, weights that name no component, GDPO's need for two components (`reward_problems`),
  and estimator options that only make sense together (`estimator_option_problems`:
  scale_rewards "batch" is GRPO's, strict needs a preset and takes its numbers, token batch
  norm is GDPO's);
- grpo.adv_estimator against the gdpo block, our environment and dataset blocks against the
  gdpo block, and what the nemo engine cannot run.

`check_keys(config, engine=...)` is the first two of these, and the local engine's
`check_config` (gdpo_nemo/engines/local/config.py, so `gdpo-nemo train`) runs it too, with
engine "local" (nothing missing: the defaults are filled; keys it does not implement held to
their neutral values): the same config gets the same lines on both engines, and weights
naming an unknown component are refused before any model loads.
"""

from __future__ import annotations

from typing import Mapping

from gdpo_nemo.config import key_walk, nemo_keys
from gdpo_nemo.checks import is_int, is_number
from gdpo_nemo.config.derive import (
    DATASET_CLASS,
    ENV_NAMES,
    PROCESSOR_NAMES,
    adv_estimator_for,
    estimator_decision,
    get_path,
    our_env_blocks,
)
from gdpo_nemo.config.engines import ENGINES
from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.config.settings import estimator_registry, multi_component_estimators
from gdpo_nemo.estimators.options import AdvantageOptions
from gdpo_nemo.runs.run_id import RunId

__all__ = [
    "ENV_SCHEMA",
    "ON_DATA_ERROR",
    "NO_GDPO_BLOCK",
    "check_cluster_consistency",
    "check_keys",
    "estimator_option_problems",
    "gdpo_key_problems",
    "reward_problems",
    "validate",
]

DATA_SOURCES = ("offline", "file")
NO_GDPO_BLOCK = "gdpo: missing; a run config needs the gdpo block (docs/interfaces.md, 'Run config')"
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


def gdpo_key_problems(gdpo: Mapping, where: str = "gdpo") -> list[str]:
    """One line per unknown, missing or refused gdpo key ("gdpo.eps: -1 is not accepted;
    expected a number >= 0.0 or null"): the key tree's walk of the gdpo block alone."""
    return key_walk.walk(dict(gdpo), nemo_keys.RUN_CONFIG["gdpo"], path=where).problems


def reward_problems(gdpo: Mapping) -> list[str]:
    """The reward set against the task (components null: the task's paper set), weights
    against the components, and multi-component estimators against the component count."""
    problems: list[str] = []
    estimator = gdpo.get("estimator")
    try:
        from gdpo_nemo.rewards import get_reward_set

        components = get_reward_set(
            gdpo.get("task"),
            gdpo.get("reward_components"),
            length_limit=gdpo.get("length_limit"),
            conditioned_length=gdpo.get("conditioned_length", False),
        ).names
    except ValueError as err:
        return [f"gdpo.reward_components: {err}"]
    if estimator in multi_component_estimators() and len(components) < 2:
        problems.append(
            f"gdpo.reward_components: {components} has {len(components)} component(s); gdpo.estimator"
            f" {estimator!r} normalizes each component separately and needs at least 2 (use grpo for one reward)"
        )
    weights = gdpo.get("reward_weights")
    if weights is not None:
        unknown = sorted(set(weights) - set(components))
        if unknown:
            problems.append(
                f"gdpo.reward_weights: {unknown} name no reward component; the components are {components}"
                " (weights are given by component name)"
            )
        for name, weight in weights.items():
            if not is_number(weight):
                problems.append(f"gdpo.reward_weights.{name}: {weight!r} is not a finite number")
    return problems


def estimator_option_problems(gdpo: Mapping) -> list[str]:
    """Estimator options that contradict each other or the estimator: `AdvantageOptions`'
    own checks (gdpo_nemo.estimators.options), named by their gdpo keys, plus the two that
    concern the config's nulls and its batch-norm kind."""
    estimator = gdpo.get("estimator")
    info = estimator_registry().get(estimator) if isinstance(estimator, str) else None
    if info is None:
        return []  # gdpo_key_problems names it
    problems = []
    if gdpo.get("batch_norm", "sample") == "token" and not info.token_batch_norm:
        token = " or ".join(repr(name) for name, entry in estimator_registry().items() if entry.token_batch_norm)
        problems.append(f"gdpo.batch_norm: 'token' only applies to gdpo.estimator {token}, got {estimator!r}")
    given = AdvantageOptions.given_by_gdpo(gdpo)
    options = AdvantageOptions.unchecked(given.pop("preset"), **given)
    problems += options.problems("gdpo.") + options.problems_with(info, "gdpo.")
    if options.strict is True:
        for key in ("std_ddof", "eps"):
            if gdpo.get(key) is not None:
                problems.append(
                    f"gdpo.{key}: {gdpo[key]!r} with gdpo.strict true; strict takes the preset's {key}: set it to null"
                )
    return problems


def check_keys(config: Mapping, *, engine: str = "nemo") -> key_walk.Walk:
    """The check both engines run first, with the same lines on both: the key tree walked for
    `engine` (`key_walk.walk`: every unknown, mistyped, and on nemo missing, key; on local
    also keys outside what it implements), then, when the gdpo block's keys are sound, the
    block as a whole: the run's name, estimator options together, the reward set.

    Returns the walk (`.problems`, `.config`: on the local engine with its defaults filled,
    `.ignored`). Raises ConfigError only when `config` is no mapping or has no gdpo block.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"config: {type(config).__name__} is not a mapping")
    if "gdpo" not in config:
        raise ConfigError(NO_GDPO_BLOCK)
    found = key_walk.walk(dict(config), engine=engine)
    gdpo = found.config.get("gdpo")
    if isinstance(gdpo, dict) and not any(line.startswith(("gdpo.", "gdpo:")) for line in found.problems):
        try:
            RunId.from_config(found.config)
        except (KeyError, TypeError, ValueError) as err:
            found.problems.append(f"gdpo: the run cannot be named: {err}")
        else:
            found.problems.extend(estimator_option_problems(gdpo) + reward_problems(gdpo))
    return found


def _check_estimator_keys(config: Mapping, problems: list[str]) -> None:
    gdpo = config["gdpo"]
    expected = adv_estimator_for(gdpo, our_env_blocks(config))
    actual = get_path(config, "grpo.adv_estimator", {}) or {}
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
        have = get_path(config, f"grpo.{key}")
        if have != expected[key]:
            problems.append(
                f"grpo.{key}: {have!r} differs from grpo.adv_estimator.{key}={expected[key]!r}; NeMo RL uses"
                " the first for dynamic sampling and logging and the second for advantages: keep them equal"
            )
    groups = get_path(config, "grpo.num_generations_per_prompt")
    if isinstance(groups, int) and groups < 2:
        problems.append(
            f"grpo.num_generations_per_prompt: {groups} rollout(s) per prompt; group-relative estimators need >= 2"
        )
    decided, why = estimator_decision(gdpo, our_env_blocks(config))
    if gdpo.get("computed_by") == "nemo_rl" and decided == "gdpo_nemo" and not gdpo.get("leave_one_out", False):
        problems.append(f"gdpo.computed_by: 'nemo_rl', but {why}; set it to gdpo_nemo or null (the composer decides)")


def _check_env_and_data(config: Mapping, problems: list[str]) -> None:
    gdpo = config["gdpo"]
    env = config.get("env") or {}
    for name, block in env.items():
        if name in ENV_NAMES.values():
            _check_env_block(name, block, gdpo, problems)
    data = config.get("data") or {}
    default = data.get("default") or {}
    for split in ("train", "validation"):
        blocks = data.get(split)
        if blocks is None:
            continue
        for index, block in enumerate(blocks if isinstance(blocks, list) else [blocks]):
            if isinstance(block, dict):
                where = f"data.{split}" + (f"[{index}]" if isinstance(blocks, list) else "")
                _check_data_block({**default, **block}, where, gdpo, env, problems)


def _check_env_block(name: str, block, gdpo: Mapping, problems: list[str]) -> None:
    """One of our environments' env.<name> block: its keys, and agreement with the gdpo block."""
    before = len(problems)
    problems.extend(key_walk.check_against_schema(block, ENV_SCHEMA, f"env.{name}"))
    if len(problems) > before:
        return
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
    problems.extend(env_value_problems(block, f"env.{name}"))


def env_value_problems(block: Mapping, where: str) -> list[str]:
    """An env.<name> block's worker count and data-error policy (its keys already checked
    against ENV_SCHEMA); also what the NeMo RL environment checks when it starts."""
    problems = []
    if block["num_workers"] < 1:
        problems.append(f"{where}.num_workers: {block['num_workers']} must be >= 1")
    if block["on_data_error"] not in ON_DATA_ERROR:
        problems.append(f"{where}.on_data_error: {block['on_data_error']!r} is not one of {list(ON_DATA_ERROR)}")
    return problems


def _check_data_block(merged: Mapping, where: str, gdpo: Mapping, env: Mapping, problems: list[str]) -> None:
    """One data.<split> block (data.default merged in): its environment, processor, dataset."""
    task = gdpo["task"]
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


def _check_dataset_block(block: Mapping, where: str, task: str, problems: list[str], engine: str) -> None:
    if block.get("task") != task:
        problems.append(f"{where}.task: {block.get('task')!r} differs from gdpo.task={task!r}")
    source = block.get("source", "offline")
    if source not in DATA_SOURCES:
        problems.append(f"{where}.source: {source!r} is not one of {list(DATA_SOURCES)}")
    if source == "file" and not block.get("data_path"):
        problems.append(f"{where}.data_path: missing; source 'file' reads a data file or folder")
    problems += ENGINES[engine].dataset_block_problems(block, where)
    if block.get("split") not in ("train", "validation"):
        problems.append(f"{where}.split: {block.get('split')!r} is not one of ['train', 'validation']")
    if block.get("prompt_file"):
        problems.append(f"{where}.prompt_file: must be null; gdpo_nemo's rows carry their prompts (use system_prompt_file to replace the system message)")


def _check_engine(config: Mapping, problems: list[str]) -> None:
    problems += ENGINES[config["gdpo"]["engine"]].config_problems(config)


def validate(config: dict) -> None:
    """Check a resolved run config; raise ConfigError listing every problem by key path.

    Checks the key tree (gdpo_nemo/config/nemo_keys.py: unknown, missing, mistyped keys of
    NeMo RL's config and the gdpo block, docs/interfaces.md), the reward set (GDPO needs >= 2 components;
    weights must name components), grpo.adv_estimator against gdpo.estimator, our
    environment and dataset blocks against the gdpo block, and what the nemo engine cannot
    run (a built-in model, async GRPO). Returns None when the config is valid.
    """
    problems = check_keys(config).problems
    if problems:
        raise ConfigError(problems)
    _check_estimator_keys(config, problems)
    _check_env_and_data(config, problems)
    _check_engine(config, problems)
    if problems:
        raise ConfigError(problems)


def check_cluster_consistency(config: Mapping, nodes: int, gpus_per_node: int) -> None:
    """Check a run config against the Slurm request that will run it.

    What must agree is the engine's (`Engine.cluster_problems`): on nemo, cluster.num_nodes
    and cluster.gpus_per_node (NeMo RL places workers from these numbers; a mismatch hangs or
    idles the allocation); on local, one process, so nodes must be 1. Raises ConfigError
    naming the key and both numbers.
    """
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if not is_int(value) or value < 0:
            raise ConfigError(f"Slurm request {name}={value!r} must be a non-negative int")
    problems = ENGINES[get_path(config, "gdpo.engine")].cluster_problems(config, nodes, gpus_per_node)
    if problems:
        raise ConfigError(problems)

