"""The one walker over the key tree (gdpo_nemo/config/nemo_keys.py): both engines check a
config with it, and the tests and the composer read the tree through it.

- `walk(config, engine=...)` reports every problem of the config (not the first), one line
  each, starting with the key path at fault and saying what is accepted::

      grpo.num_prompt_per_step: unknown key; grpo accepts [...]
      grpo.num_prompts_per_step: 'many' is not int
      checkpointing.keep_top_k: missing; expected int                     (nemo only)
      loss_fn.use_cispo: True is not implemented by the local engine; accepted False   (local only)

  ``engine="nemo"`` (keys "schema") requires what NeMo RL requires; an engine of the tree
  (``engine="local"``, or a third one; keys "tree") requires nothing and reads its own column
  of the tree (`Engine.fate`): it fills the defaults of used and refused keys, holds used keys
  to their range and refused keys to their neutral values, and lists the ignored keys present.
- `check_against_schema(config, schema)`: `walk`'s problems on engine "nemo", for a section
  of the tree or a schema of the same notation (the ``env.<name>`` blocks).
- `leaves()`, `has_key(path)`, `types()`, `column(engine)`: the tree read as (key path, Leaf)
  pairs, as a set of key paths, in the type notation alone (what
  tests/nemo_tier/test_schema_parity.py compares with NeMo RL's classes), and as one engine's
  column.

The notation walked (sections, `Leaf`, `Alt`, `ListOf`, ``WHEN_ENABLED``, the fates USED,
IGNORED, REFUSED) is described in gdpo_nemo/config/nemo_keys.py's docstring.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Any, Iterator

from gdpo_nemo.errors import UserError
from gdpo_nemo.config.nemo_keys import (
    ABSENT,
    IGNORED,
    REFUSED,
    RUN_CONFIG,
    TREE,
    USED,
    WHEN_ENABLED,
    Alt,
    Leaf,
    ListOf,
)
from gdpo_nemo.config.engines import ENGINES as _ENGINE_REGISTRY

__all__ = ["ENGINES", "Walk", "check_against_schema", "column", "has_key", "leaves", "types", "walk"]

ENGINES = _ENGINE_REGISTRY  # gdpo_nemo.config.engines, read live: each engine's fate of a key is its walk

# ---------------------------------------------------------------------------------------
# Reading the tree.
# ---------------------------------------------------------------------------------------


def _as_leaf(spec):
    """A bare type string is a leaf with no cells: every engine of the tree ignores it."""
    return Leaf(spec) if isinstance(spec, str) else spec


def _children(section: dict) -> dict:
    """{key: (spec, required)} of a section's listed keys."""
    return {
        key.rstrip("?"): (spec, not key.endswith("?")) for key, spec in section.items() if key not in ("*", WHEN_ENABLED)
    }


def leaves(spec=None, prefix: str = "") -> Iterator[tuple[str, Leaf]]:
    """(key path, Leaf) of every leaf of `spec` (default: `TREE`), each path once: the
    options of an Alt and the items of a ListOf share their key's path; an open section's
    other keys are `<section>.*`."""
    seen: set[str] = set()
    for path, leaf in _leaves(TREE if spec is None else spec, prefix):
        if path not in seen:
            seen.add(path)
            yield path, leaf


def column(engine: str) -> dict:
    """{key path: Fate} of `engine`'s column of NeMo RL's keys, as the tree writes it: what a
    third engine starts its own `Engine.column` from when its fates are mostly another's."""
    return {path: leaf.fate(engine) for path, leaf in leaves()}


def _leaves(spec, prefix: str) -> Iterator[tuple[str, Leaf]]:
    for key, child in spec.items():
        if key == WHEN_ENABLED:
            continue
        path = prefix + key.rstrip("?")
        yield from _leaves_of(child, path)


def _leaves_of(child, path: str) -> Iterator[tuple[str, Leaf]]:
    if isinstance(child, dict):
        yield from _leaves(child, path + ".")
    elif isinstance(child, ListOf):
        yield from _leaves_of(child.item, path)
    elif isinstance(child, Alt):  # its sections' keys (a bare "null" option is no key)
        for option in child.options:
            if not isinstance(option, (str, Leaf)):
                yield from _leaves_of(option, path)
    else:
        yield path, _as_leaf(child)


def has_key(path: str, spec=None) -> bool:
    """Whether dotted `path` names a key of `spec` (default: `RUN_CONFIG`), a leaf or a
    section (through the sections of Alt and ListOf; not an open section's other keys)."""
    nodes = [RUN_CONFIG if spec is None else spec]
    for part in path.split("."):
        found = []
        for node in nodes:
            for section in _sections_of(node):
                children = _children(section)
                if part in children:
                    found.append(children[part][0])
        if not found:
            return False
        nodes = found
    return True


def _sections_of(spec) -> list[dict]:
    if isinstance(spec, dict):
        return [spec]
    if isinstance(spec, ListOf):
        return _sections_of(spec.item)
    if isinstance(spec, Alt):
        return [section for option in spec.options for section in _sections_of(option)]
    return []


def types(spec=None):
    """`spec` (default: `TREE`) in the type notation alone (leaves as their type strings):
    what tests/nemo_tier/test_schema_parity.py compares with NeMo RL's classes."""
    spec = TREE if spec is None else spec
    if isinstance(spec, dict):
        return {key: child if key == WHEN_ENABLED else types(child) for key, child in spec.items()}
    if isinstance(spec, Alt):
        return Alt(*(types(option) for option in spec.options))
    if isinstance(spec, ListOf):
        return ListOf(types(spec.item))
    leaf = _as_leaf(spec)
    return leaf.type if isinstance(leaf.type, str) else "any"


def _has_fate(spec, path: str, wanted) -> bool:
    """Whether a key under `spec` (at `path`; not under a ListOf) satisfies `wanted(path, leaf)`."""
    if isinstance(spec, dict):
        prefix = f"{path}." if path else ""
        return any(_has_fate(child, prefix + key.rstrip("?"), wanted) for key, child in spec.items() if key != WHEN_ENABLED)
    if isinstance(spec, Alt):
        return any(_has_fate(option, path, wanted) for option in spec.options)
    if isinstance(spec, ListOf):
        return False
    return wanted(path, _as_leaf(spec))


def _filled(fate) -> bool:
    """A missing key of this fate is filled in."""
    return fate.kind == USED or (fate.kind == REFUSED and fate.accepted[0] is not ABSENT)


# ---------------------------------------------------------------------------------------
# The walker.
# ---------------------------------------------------------------------------------------

_PROBE = object()  # a value no check accepts: its answer is what the check accepts


def _describe(spec) -> str:
    if isinstance(spec, Leaf):
        return _describe(spec.type)
    if isinstance(spec, str):
        return " or ".join(spec.split("|"))
    if isinstance(spec, dict):
        return "a mapping"
    if isinstance(spec, ListOf):
        return "a list of mappings"
    if isinstance(spec, Alt):
        return " or ".join(_describe(option) for option in spec.options)
    if callable(spec):
        return spec(_PROBE)
    raise TypeError(f"bad schema spec {spec!r}")


def _matches_type(value, name: str) -> bool:
    if name == "any":
        return True
    if name == "null":
        return value is None
    if name == "bool":
        return isinstance(value, bool)
    if name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if name == "str":
        return isinstance(value, str)
    if name == "dict":
        return isinstance(value, dict)
    if name == "list":
        return isinstance(value, list)
    if name.startswith("list[") and name.endswith("]"):
        inner = name[5:-1]
        return isinstance(value, list) and all(_matches_type(item, inner) for item in value)
    raise TypeError(f"bad schema type {name!r}")


def _type_problem(value, type_) -> str | None:
    """None when `value` has the leaf's type, else the rest of the problem's line."""
    if callable(type_):
        accepted = type_(value)
        return None if accepted is None else f"is not accepted; expected {accepted}"
    if any(_matches_type(value, name) for name in type_.split("|")):
        return None
    return f"is not {_describe(type_)}"


def _neutral(value, accepted: tuple) -> bool:
    """`value` is one of a refused key's neutral values (a bool never stands for 0 or 1)."""
    return any(
        ok is not ABSENT and value == ok and (type(value) is type(ok) or ok is None or ok == {}) for ok in accepted
    )


def _shown(accepted: tuple) -> str:
    return " or ".join("leaving it out" if ok is ABSENT else repr(ok) for ok in accepted)


def _listed(section: dict) -> list[str]:
    return sorted(key.rstrip("?") for key in section if key not in ("*", WHEN_ENABLED))


def _same_shape(value, option) -> bool:
    if isinstance(option, dict):
        return isinstance(value, dict)
    if isinstance(option, ListOf):
        return isinstance(value, list)
    return False


_NOTHING = object()


@dataclass
class Walk:
    """What `walk` found.

    problems: one line per problem, each starting with its key path (empty: the config fits).
    config: a copy of the config; on an engine of the tree with its defaults filled in.
    ignored: an engine of the tree: the key paths present that it ignores (a section whose keys it all
    ignores is named once), in the config's order.
    """

    problems: list[str]
    config: Any
    ignored: list[str]


class _Walker:
    def __init__(self, engine: str):
        if engine not in ENGINES:
            raise UserError(f"engine {engine!r} is not one of {list(ENGINES)}")
        self.engine = engine
        self.spec = ENGINES[engine]
        self.local = self.spec.keys == "tree"  # its column of the key tree; "schema": NeMo RL's own
        self.problems: list[str] = []
        self.ignored: list[str] = []

    def fate(self, path: str, leaf: Leaf):
        """The engine's cell of the key at `path` (a list item's keys: the list's path, as
        `leaves` names them)."""
        return self.spec.fate(re.sub(r"\[\d+\]", "", path) if "[" in path else path, leaf)

    def inert(self, spec, path: str) -> bool:
        """Nothing under `spec` is used or refused by this engine: it ignores the whole key."""
        return not _has_fate(spec, path, lambda where, leaf: self.fate(where, leaf).kind != IGNORED)

    def fills(self, spec, path: str) -> bool:
        """This engine fills something under `spec` when it is left out."""
        return _has_fate(spec, path, lambda where, leaf: _filled(self.fate(where, leaf)))

    def node(self, value, spec, path: str, quiet: bool):
        """The checked copy of `value` at `path` against `spec`; `quiet`: inside a key the
        engine ignores as a whole (already named)."""
        if isinstance(spec, dict):
            return self.section(value, spec, path, quiet)
        if isinstance(spec, ListOf):
            if not isinstance(value, list):
                self.problems.append(f"{path}: {value!r} is not a list of mappings")
                return value
            return [self.node(item, spec.item, f"{path}[{index}]", quiet) for index, item in enumerate(value)]
        if isinstance(spec, Alt):
            return self.alt(value, spec, path, quiet)
        return self.leaf(value, _as_leaf(spec), path)

    def leaf(self, value, spec: Leaf, path: str):
        fate = self.fate(path, spec) if self.local else None
        used = fate is not None and fate.kind == USED and fate.local is not None
        refused = fate is not None and fate.kind == REFUSED
        if used and fate.local(value) is None:
            return copy.deepcopy(value)
        if refused and _neutral(value, fate.accepted):
            return copy.deepcopy(value)
        wrong = _type_problem(value, spec.type)
        if wrong is not None:
            self.problems.append(f"{path}: {value!r} {wrong}")
        elif used:
            self.problems.append(f"{path}: {value!r} is not accepted; expected {fate.local(value)}")
        elif refused:
            self.problems.append(f"{path}: {value!r} is not implemented by the {self.engine} engine; accepted {_shown(fate.accepted)}")
        return copy.deepcopy(value)

    def alt(self, value, spec: Alt, path: str, quiet: bool):
        if self.local and value is None:
            fill = next((o for o in spec.options if isinstance(o, dict) and self.fills(o, path)), None)
            if fill is not None:
                return self.section({}, fill, path, quiet)  # null: the engine's defaults, as if left out
        trials = []
        for option in spec.options:
            trial = _Walker(self.engine)
            out = trial.node(value, option, path, quiet)
            if not trial.problems:
                self.ignored.extend(trial.ignored)
                return out
            trials.append((option, trial.problems))
        # Report the problems of the option with the same shape as the value, if any.
        shaped = [found for option, found in trials if _same_shape(value, option)]
        if shaped:
            self.problems.extend(min(shaped, key=len))
        else:
            self.problems.append(f"{path}: {value!r} is not {_describe(spec)}")
        return value

    def section(self, value, spec: dict, path: str, quiet: bool):
        if self.local and value is None and self.fills(spec, path):
            value = {}  # null: the engine's defaults, as if left out
        if not isinstance(value, dict):
            self.problems.append(f"{path}: {value!r} is not a mapping (expected keys {_listed(spec)})")
            return value
        declared = _children(spec)
        prefix = f"{path}." if path else ""
        out = {}
        for key, item in value.items():
            where = f"{prefix}{key}"
            child = declared[key][0] if key in declared else spec.get("*", _NOTHING)
            if child is _NOTHING:
                self.problems.append(f"{where}: unknown key; {path or 'the top level'} accepts {_listed(spec)}")
                continue
            if self.local and not quiet and self.inert(child, where):
                self.ignored.append(where)
                out[key] = self.node(item, child, where, quiet=True)
            else:
                out[key] = self.node(item, child, where, quiet)
        if self.local:
            for key, (child, _) in declared.items():
                if key not in value:
                    filled = self.fill(child, f"{prefix}{key}")
                    if filled is not _NOTHING:
                        out[key] = filled
            return out
        required = [key for key, (_, needed) in declared.items() if needed]
        if value.get("enabled") is True:
            required += list(spec.get(WHEN_ENABLED, ()))
        for key in required:
            if key not in value:
                why = " (required when enabled is true)" if key in spec.get(WHEN_ENABLED, ()) else ""
                self.problems.append(f"{prefix}{key}: missing{why}; expected {_describe(declared[key][0])}")
        return out

    def fill(self, spec, path: str):
        """What the engine puts at a missing key (`_NOTHING`: nothing)."""
        if isinstance(spec, dict):
            return self.section({}, spec, path, quiet=True) if self.fills(spec, path) else _NOTHING
        if isinstance(spec, Alt):
            option = next((o for o in spec.options if isinstance(o, dict) and self.fills(o, path)), None)
            return self.section({}, option, path, quiet=True) if option is not None else _NOTHING
        if isinstance(spec, ListOf):
            return _NOTHING
        fate = self.fate(path, _as_leaf(spec))
        if fate.kind == USED:
            return copy.deepcopy(fate.default)
        if fate.kind == REFUSED and fate.accepted[0] is not ABSENT:
            return copy.deepcopy(fate.accepted[0])
        return _NOTHING


def walk(config, tree: dict | None = None, *, engine: str = "nemo", path: str = "") -> Walk:
    """Check `config` against `tree` (default: `RUN_CONFIG`, NeMo RL's keys and the gdpo
    block) for the engine that will run it; every problem, one line each.

    engine "nemo": unknown, missing and mistyped keys. An engine of the tree ("local"):
    unknown and mistyped keys, used keys outside the range its column says it implements,
    refused keys away from their neutral values; nothing is missing: used and refused keys
    left out take their defaults in `Walk.config`, and `Walk.ignored` names the ignored keys
    present.
    """
    walker = _Walker(engine)
    if not isinstance(config, dict):
        return Walk([f"{path or 'config'}: {type(config).__name__} is not a mapping"], config, [])
    out = walker.section(config, RUN_CONFIG if tree is None else tree, path, quiet=False)
    return Walk(walker.problems, out, walker.ignored)


def check_against_schema(config: dict, schema: dict | None = None, path: str = "") -> list[str]:
    """Every problem of `config` against `schema` (default: `RUN_CONFIG`) as NeMo RL would
    run it (`walk` with engine "nemo"), one line each.

    Each line starts with the dotted key path at fault, then says what was found and what is
    accepted. An empty list means the config matches.
    """
    return walk(config, schema, path=path).problems
