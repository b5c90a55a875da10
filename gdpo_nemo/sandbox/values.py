"""Reading the values that "eval" cases send back (`Case(evaluate=...)`).

Inside the sandbox the driver encodes each value as JSON that keeps Python's types apart
(`_driver._encode`): str, int, float, bool and None as themselves; every container as a
two-element list [type name, items]: ["list", [...]], ["tuple", [...]], ["set", [...]],
["frozenset", [...]], ["dict", [[key, value], ...]], ["bytes", latin-1 text],
["complex", [real, imag]]. The text is written by the program's own process, so it is
untrusted: `decode_values` accepts exactly that grammar, bounds the nesting, and raises
ValueError for anything else. It never evaluates anything.
"""

from __future__ import annotations

import json

MAX_DEPTH = 200  # nesting followed when decoding (the driver encodes at most this deep)
_SEQUENCES = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}


def _decode(item: object, depth: int) -> object:
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if item is None or isinstance(item, (bool, int, float, str)):
        return item
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        raise ValueError(f"not an encoded value: {str(item)[:80]!r}")
    kind, body = item
    if kind in _SEQUENCES and isinstance(body, list):
        # set()/frozenset() raise TypeError for unhashable members (lists in a set): a
        # program's encoder made that up.
        return _SEQUENCES[kind](_decode(member, depth + 1) for member in body)
    if kind == "dict" and isinstance(body, list):
        pairs = []
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError("a dict item must be a [key, value] pair")
            pairs.append((_decode(pair[0], depth + 1), _decode(pair[1], depth + 1)))
        return dict(pairs)
    if kind == "bytes" and isinstance(body, str):
        return body.encode("latin-1")
    if kind == "complex" and isinstance(body, list) and len(body) == 2 and all(
        isinstance(part, (int, float)) and not isinstance(part, bool) for part in body
    ):
        return complex(body[0], body[1])
    raise ValueError(f"not an encoded value: {str(item)[:80]!r}")


def decode_values(text: str | None, count: int) -> list:
    """The `count` values of one "eval" case from `ExecResult.value`.

    Raises ValueError when the text is missing, not JSON, not `count` encoded values, nested
    deeper than MAX_DEPTH, or holds an unhashable member of a set or dict key.
    """
    if text is None:
        raise ValueError("no value came back")
    try:
        items = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"the values are not JSON ({type(err).__name__})") from None
    if not isinstance(items, list) or len(items) != count:
        raise ValueError(f"expected a list of {count} encoded values")
    try:
        return [_decode(item, 0) for item in items]
    except (TypeError, RecursionError, OverflowError) as err:
        raise ValueError(f"cannot decode a value ({type(err).__name__}: {err})") from None
