"""Checks of the gdpo block that both engines run before any work.

`gdpo_problems(gdpo)` checks every key against its settings check (gdpo_nemo/config/settings.py)
and then the combinations no single key shows: the reward set against the task, weights
that name no component, GDPO's need for two components, and the estimator options that only
make sense together (scale_rewards "batch" is GRPO's, strict needs a preset and takes the
preset's numbers, token batch norm is GDPO's). The composer's `validate` and the local
engine's `check_config` both call it, so a config is refused the same way, by key path,
whichever engine it is meant for.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Mapping

from gdpo_nemo.config.checks import is_number
from gdpo_nemo.config.settings import GdpoSettings, multi_component_estimators

__all__ = ["gdpo_key_problems", "gdpo_problems", "reward_problems", "estimator_option_problems"]


def gdpo_key_problems(gdpo: Mapping, where: str = "gdpo") -> list[str]:
    """One line per gdpo key (not `local`, which its engine checks) whose value its settings
    check refuses: "gdpo.eps: -1 is not accepted; expected a number >= 0.0 or null"."""
    problems = []
    for item in fields(GdpoSettings):
        if item.metadata.get("section") is not None or item.name not in gdpo:
            continue
        accepted = item.metadata["check"](gdpo[item.name])
        if accepted is not None:
            problems.append(f"{where}.{item.name}: {gdpo[item.name]!r} is not accepted; expected {accepted}")
    return problems


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
    """Estimator options that contradict each other or the estimator."""
    problems = []
    estimator, preset = gdpo.get("estimator"), gdpo.get("preset")
    if gdpo.get("batch_norm", "sample") == "token" and estimator != "gdpo":
        problems.append(f"gdpo.batch_norm: 'token' only applies to gdpo.estimator 'gdpo', got {estimator!r}")
    if gdpo.get("scale_rewards", "group") == "batch" and estimator != "grpo":
        problems.append(
            f"gdpo.scale_rewards: 'batch' is TRL's GRPO option; gdpo.estimator {estimator!r} takes 'group' or 'none'"
        )
    if gdpo.get("strict", False):
        if preset is None:
            problems.append("gdpo.strict: true reproduces a peer exactly and needs gdpo.preset (nemo_rl, trl or verl)")
        for key in ("std_ddof", "eps"):
            if gdpo.get(key) is not None:
                problems.append(
                    f"gdpo.{key}: {gdpo[key]!r} with gdpo.strict true; strict takes the preset's {key}: set it to null"
                )
    return problems


def gdpo_problems(gdpo: Mapping) -> list[str]:
    """Every problem of a gdpo block, one line each starting with its key path; [] if none."""
    problems = gdpo_key_problems(gdpo)
    if problems:
        return problems
    return estimator_option_problems(gdpo) + reward_problems(gdpo)
