"""gdpo_nemo/config/nemo_keys.py against NeMo RL's own config classes, key by key, type by type.

gdpo_nemo keeps a copy of NeMo RL's GRPO config schema, the key tree `nemo_keys.TREE` (so
`gdpo-nemo config` and `gdpo-nemo train` refuse a bad key without NeMo RL installed, and
refuse unknown keys, which NeMo RL's extra="allow" classes keep silently). Its leaves also
carry their local-engine fate and default; the keys and types are compared here as types
alone (`key_walk.types()`), the defaults with the pydantic classes' own. These tests read NeMo RL's classes (MasterConfig and every
TypedDict / pydantic model under it) at the pinned commit and translate them into the copy's
notation, so the two cannot drift: every difference must be one of the deliberate ones
listed, with its reason, in nemo_keys.DEPARTURES.

Translation: a TypedDict or pydantic model is a section (NotRequired keys and fields with a
default end in "?"); ``X | None`` adds "null"; ``Literal[...]`` is the type of its values
(value sets are left to NeMo RL's own check); ``Annotated[X, ...]`` is X; ``dict[...]`` is
"dict"; ``list[int]`` etc. stay; a list of sections is ListOf; unions of ``XConfig`` /
``XConfigDisabled`` sections become one section with WHEN_ENABLED keys.
"""

from __future__ import annotations

import collections.abc
import enum
import os
import types
import typing
from pathlib import Path

from gdpo_nemo.config import key_walk, nemo_keys
from gdpo_nemo.config.key_walk import _describe
from gdpo_nemo.config.nemo_keys import WHEN_ENABLED, Alt, ListOf

_SCALARS = {int: "int", float: "float", bool: "bool", str: "str", type(None): "null", Path: "str", os.PathLike: "str"}


def _is_typeddict(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _is_model(tp) -> bool:
    from pydantic import BaseModel

    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _section(tp) -> dict:
    """A TypedDict or pydantic model as a schema section."""
    out: dict = {}
    if _is_model(tp):
        for name, info in tp.model_fields.items():
            out[name if info.is_required() else f"{name}?"] = translate(info.annotation)
        return out
    hints = typing.get_type_hints(tp, include_extras=True)
    for name, hint in hints.items():
        optional = name in tp.__optional_keys__
        out[name if not optional else f"{name}?"] = translate(hint)
    return out


def _strip(tp):
    origin = typing.get_origin(tp)
    while origin in (typing.Annotated, typing.NotRequired, typing.Required):
        tp = typing.get_args(tp)[0]
        origin = typing.get_origin(tp)
    return tp


def _merge_enabled(sections: list[dict]) -> dict:
    """`XConfig | XConfigDisabled` (each with an `enabled` key) as one section with WHEN_ENABLED."""
    keys = {}
    for section in sections:
        for key, spec in section.items():
            keys.setdefault(key.rstrip("?"), []).append((not key.endswith("?"), spec))
    merged: dict = {}
    when_enabled = []
    for key, found in keys.items():
        specs = [spec for _, spec in found]
        spec = specs[0] if all(s == specs[0] for s in specs) else _join(specs)
        if key == "enabled":
            merged["enabled"] = "bool"
        elif len(found) == len(sections) and all(required for required, _ in found):
            merged[key] = spec
        else:
            merged[f"{key}?"] = spec
            if any(required for required, _ in found):
                when_enabled.append(key)
    if when_enabled:
        merged[WHEN_ENABLED] = tuple(sorted(when_enabled))
    return merged


def _join(specs: list):
    if all(isinstance(s, str) for s in specs):
        names = sorted({name for s in specs for name in s.split("|")})
        return "|".join(names)
    return Alt(*specs)


def translate(tp):
    """One annotation of NeMo RL's config classes in nemo_keys's notation."""
    tp = _strip(tp)
    if tp is typing.Any or tp is object:
        return "any"
    if tp in _SCALARS:
        return _SCALARS[tp]
    if _is_typeddict(tp) or _is_model(tp):
        return _section(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "str"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in _SCALARS:  # os.PathLike[str] and the like
        return _SCALARS[origin]
    if origin is collections.abc.Callable:
        return "any"  # set in code, never in a YAML config
    if origin is typing.Literal:
        return "|".join(sorted({_SCALARS[type(v)] for v in args}))
    if origin in (typing.Union, types.UnionType):
        members = [translate(a) for a in args]
        sections = [m for m in members if isinstance(m, dict)]
        if len(sections) >= 2 and all("enabled" in s or "enabled?" in s for s in sections):
            rest = [m for m in members if not isinstance(m, dict)]
            members = [_merge_enabled(sections), *rest]
        return members[0] if len(members) == 1 else _join(members)
    if origin in (dict, collections.abc.Mapping) or tp in (dict, collections.abc.Mapping):
        return "dict"
    if origin in (list, tuple, collections.abc.Sequence) or tp in (list, tuple):
        if not args:
            return "list"
        inner = translate(args[0])
        if isinstance(inner, dict):
            return ListOf(inner)
        if inner in ("int", "float", "str", "bool"):
            return f"list[{inner}]"
        return "list"
    raise TypeError(f"no translation for {tp!r}")


def _options(spec) -> tuple:
    return spec.options if isinstance(spec, Alt) else (spec,)


def _leaves(options) -> set[str]:
    """The leaf type names of a spec's options; "float" stands for "float|int" (both sides
    accept an int where a float is asked)."""
    names = {name for option in options if isinstance(option, str) for name in option.split("|")}
    return names - {"int"} if "float" in names else names


def _overlap(a, b) -> int:
    if isinstance(a, ListOf) and isinstance(b, ListOf):
        return _overlap(a.item, b.item)
    if isinstance(a, dict) and isinstance(b, dict):
        return len({k.rstrip("?") for k in a} & {k.rstrip("?") for k in b})
    return -1


def _section_differences(ours: dict, theirs: dict, path: str) -> dict[str, str]:
    found: dict[str, str] = {}
    our_keys = {k.rstrip("?"): (k.endswith("?"), v) for k, v in ours.items() if k not in ("*", WHEN_ENABLED)}
    their_keys = {k.rstrip("?"): (k.endswith("?"), v) for k, v in theirs.items() if k not in ("*", WHEN_ENABLED)}
    if "*" in ours:  # an open section: only its listed keys are checked
        found[path] = f"open in gdpo_nemo's schema: only {sorted(our_keys)} checked"
        their_keys = {k: v for k, v in their_keys.items() if k in our_keys}
    for key in sorted(set(our_keys) | set(their_keys)):
        where = f"{path}.{key}" if path else key
        if key not in their_keys:
            found[where] = "only in gdpo_nemo's schema"
        elif key not in our_keys:
            found[where] = "missing from gdpo_nemo's schema"
        else:
            if our_keys[key][0] != their_keys[key][0]:
                found[where] = f"optional: ours {our_keys[key][0]}, NeMo RL {their_keys[key][0]}"
            found.update(differences(our_keys[key][1], their_keys[key][1], where))
    mine, other = sorted(ours.get(WHEN_ENABLED, ())), sorted(theirs.get(WHEN_ENABLED, ()))
    if "*" in ours:
        other = [key for key in other if key in our_keys]
    if mine != other:
        found[f"{path}.{WHEN_ENABLED}"] = f"ours {mine}, NeMo RL {other}"
    return found


def differences(ours, theirs, path: str = "") -> dict[str, str]:
    """{key path: what differs} between our spec and NeMo RL's (translated) spec: keys,
    optional or required, leaf types (null included), sections and lists of sections. A
    union's section options are compared with the option of the other side sharing the most
    keys; a shape only NeMo RL accepts is reported too."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return _section_differences(ours, theirs, path)
    if isinstance(ours, dict) and set(ours) == {"*"} and theirs == "dict":
        return {}  # any mapping on both sides
    if isinstance(ours, ListOf) and isinstance(theirs, ListOf):
        return differences(ours.item, theirs.item, f"{path}[]")
    found: dict[str, str] = {}
    mine, other = _options(ours), _options(theirs)
    if _leaves(mine) != _leaves(other):
        found[path] = f"ours {_describe(ours)}, NeMo RL {_describe(theirs)}"
    shaped_mine = [o for o in mine if not isinstance(o, str)]
    shaped_other = [o for o in other if not isinstance(o, str)]
    matched = set()
    for option in shaped_mine:
        candidates = [(i, o) for i, o in enumerate(shaped_other) if _overlap(option, o) >= 0]
        if not candidates:
            found[path] = f"ours {_describe(ours)}, NeMo RL {_describe(theirs)}"
            continue
        index, best = max(candidates, key=lambda pair: _overlap(option, pair[1]))
        matched.add(index)
        found.update(differences(option, best, path))
    unmatched = [o for i, o in enumerate(shaped_other) if i not in matched]
    if unmatched and path not in found:
        found[path] = f"NeMo RL also accepts {', '.join(_describe(o) for o in unmatched)} here"
    return found


def _nemo_rl_schema() -> dict:
    """MasterConfig as a section, with policy.generation read as VllmConfig: MasterConfig types
    it GenerationConfig (the base of every backend's config), and every config here uses the
    vllm backend, whose keys (vllm_cfg, ...) VllmConfig adds."""
    from nemo_rl.algorithms.grpo import MasterConfig
    from nemo_rl.models.generation.vllm.config import VllmConfig

    theirs = _section(MasterConfig)
    theirs["policy"]["generation?"] = translate(VllmConfig)
    return theirs


def test_nemo_rl_master_config_translates_into_the_schema_notation():
    theirs = _nemo_rl_schema()
    assert {"policy", "loss_fn", "env", "data", "grpo", "logger", "cluster", "checkpointing"} <= set(theirs)
    assert theirs["checkpointing"]["keep_top_k?"] == "int"
    assert theirs["data"]["train"].options[0]["data_path?"] == "str"


def test_our_schema_differs_from_nemo_rl_only_where_nemo_keys_says_why():
    found = differences(key_walk.types(), _nemo_rl_schema())
    unexplained = {path: what for path, what in found.items() if path not in nemo_keys.DEPARTURES}
    assert not unexplained, "\n".join(f"{path}: {what}" for path, what in sorted(unexplained.items()))


def test_every_departure_listed_in_nemo_keys_still_exists():
    found = differences(key_walk.types(), _nemo_rl_schema())
    stale = sorted(set(nemo_keys.DEPARTURES) - set(found))
    assert not stale, f"nemo_keys.DEPARTURES lists paths that no longer differ from NeMo RL: {stale}"


def test_the_comparison_catches_a_null_our_schema_would_accept_and_nemo_rl_refuses():
    ours = {"keep_top_k?": "int|null"}
    assert differences(ours, {"keep_top_k?": "int"}) == {"keep_top_k": "ours int or null, NeMo RL int"}


def _pydantic_defaults(tp, prefix: str = "") -> dict:
    """{key path: default} of every defaulted field of NeMo RL's pydantic config models under
    `tp` (through TypedDicts, unions and Optional)."""
    found: dict = {}
    if _is_model(tp):
        for name, info in tp.model_fields.items():
            if not info.is_required():
                found[prefix + name] = info.get_default(call_default_factory=True)
            found.update(_pydantic_defaults(info.annotation, f"{prefix}{name}."))
    elif _is_typeddict(tp):
        for name, hint in typing.get_type_hints(tp, include_extras=True).items():
            found.update(_pydantic_defaults(hint, f"{prefix}{name}."))
    else:
        for arg in typing.get_args(_strip(tp)):
            found.update(_pydantic_defaults(arg, prefix))
    return found


def test_what_the_local_engine_fills_in_is_nemo_rls_own_default_where_it_has_one():
    from nemo_rl.algorithms.grpo import MasterConfig

    theirs = _pydantic_defaults(MasterConfig)
    local = {path: leaf.fate("local") for path, leaf in key_walk.leaves()}  # the local engine's column
    ours = {
        path: fate.default if fate.kind == nemo_keys.USED else fate.accepted[0]
        for path, fate in local.items()
        if fate.kind == nemo_keys.USED or (fate.kind == nemo_keys.REFUSED and fate.accepted[0] is not nemo_keys.ABSENT)
    }
    compared = sorted(set(ours) & set(theirs))
    assert len(compared) >= 40  # grpo, loss_fn, reward_penalties, on_policy_distillation
    differ = {path: (ours[path], theirs[path]) for path in compared if ours[path] != theirs[path]}
    assert not differ, differ
