"""Value checks of config keys and estimator options: each check returns None when a value
is fine, else a phrase saying what would be accepted ("an int >= 1 or null"), for messages
such as ``gdpo.eps: -1 is not accepted; expected a number >= 0.0 or null``. A leaf module
(it imports nothing of the package), so the estimators' options declare their checks here
without importing the config layer.

The settings classes (`gdpo_nemo.config.settings`) and the local engine's ranges of NeMo RL
keys in the key tree (`gdpo_nemo.config.nemo_keys`) build their checks from these.
"""

from __future__ import annotations

import math
from typing import Any, Callable

__all__ = ["Check", "anything", "boolean", "integer", "is_int", "is_number", "mapping", "number", "one_of", "text"]

Check = Callable[[Any], "str | None"]


def is_int(value) -> bool:
    """True for an int that is not a bool (YAML's true is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """True for a finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(low: int | None = None, *, nullable: bool = False) -> Check:
    """An int (>= `low` when given), or also None when `nullable`."""

    def check(value):
        if value is None and nullable:
            return None
        if is_int(value) and (low is None or value >= low):
            return None
        bound = f" >= {low}" if low is not None else ""
        return f"an int{bound}" + (" or null" if nullable else "")

    return check


def number(low: float | None = None, high: float | None = None, *, nullable: bool = False, above: bool = False) -> Check:
    """A finite number in [low, high] (low excluded when `above`), or also None when `nullable`."""

    def check(value):
        if value is None and nullable:
            return None
        in_low = low is None or (value > low if above else value >= low) if is_number(value) else False
        if is_number(value) and in_low and (high is None or value <= high):
            return None
        if high is not None:
            span = f" in [{low}, {high}]"
        elif low is not None:
            span = f" {'>' if above else '>='} {low}"
        else:
            span = ""
        return f"a number{span}" + (" or null" if nullable else "")

    return check


def boolean(value) -> str | None:
    """True or False only (not 0/1)."""
    return None if isinstance(value, bool) else "true or false"


def one_of(*choices) -> Check:
    """One of `choices` (compared with ==; a bool never stands for 0 or 1)."""

    def check(value):
        if isinstance(value, bool) and not any(isinstance(c, bool) for c in choices):
            return f"one of {list(choices)}"
        return None if value in choices else f"one of {list(choices)}"

    return check


def text(*, nullable: bool = False) -> Check:
    """A non-empty string, or also None when `nullable`."""

    def check(value):
        if (value is None and nullable) or (isinstance(value, str) and value):
            return None
        return "a non-empty string" + (" or null" if nullable else "")

    return check


def mapping(value) -> str | None:
    """Any mapping."""
    return None if isinstance(value, dict) else "a mapping"


def anything(value) -> None:
    """Every value."""
    return None
