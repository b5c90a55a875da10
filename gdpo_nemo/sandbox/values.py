"""Reading the values that "eval" cases send back (`Case(evaluate=...)`).

Inside the sandbox the driver encodes each value as JSON that keeps Python's types apart
(`_driver_program._encode`): str, int, float, bool and None as themselves; every container as a
two-element list [type name, items]: ["list", [...]], ["tuple", [...]], ["set", [...]],
["frozenset", [...]], ["dict", [[key, value], ...]], ["bytes", latin-1 text],
["complex", [real, imag]]. The text is written by the program's own process, so it is
untrusted: `decode_values` accepts exactly that grammar, bounds the nesting, and raises
ValueError for anything else. It never evaluates anything.
"""

from __future__ import annotations

import json
from collections import Counter

MAX_DEPTH = 200  # nesting followed when decoding (the driver encodes at most this deep)
_SEQUENCES = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
# Unequal members of one container that share a hash value, per bucket and per decoded case.
# Legitimate values have a handful (-1 and -2 share CPython's hash); a set or dict built from
# n colliding values costs the harness n^2/2 comparisons with the GIL held (100,000 ints that
# all hash to 0: 102 s), so values past these budgets are refused before anything is built.
MAX_BUCKET_COLLISIONS = 8
MAX_CASE_COLLISIONS = 1024
# What JSON decodes a scalar to: a container of these only needs no decoding of its members.
_SCALARS = frozenset({type(None), bool, int, float, str})


class HostileValue(ValueError):
    """A decoded value built to make the harness's hashing quadratic (colliding hashes)."""


class _Budget:
    def __init__(self) -> None:
        self.collisions = 0

    def check(self, members: list) -> None:
        """Count the unequal members of one container that share a hash (linear: each member
        is compared only with the few distinct values already in its hash's bucket).

        Hashes are taken and counted at C speed first (their counter's keys are ints, each its
        own hash, so counting cannot collide): members whose hash no other member has are
        left out, and a bucket whose members are all one value of one type is passed whole.
        A returned list of 4 million zeros cost about 3 s of harness CPU through the
        member-by-member loop; a set of the hashes answers the common cases (all distinct,
        all one value) without the counter, which cost a small container 3 times as much."""
        if len(members) < 2:
            return
        try:
            hashes = list(map(hash, members))
        except TypeError:  # an unhashable member: the loop below skips it
            hashes = None
        if hashes is not None:
            shared = set(hashes)
            if len(shared) == len(members):  # no hash shared: the usual case, and the cheap test
                return
            if len(shared) > 1:  # keep the members whose hash another member has
                shared = {key for key, count in Counter(hashes).items() if count > 1}
                members = [m for m, key in zip(members, hashes) if key in shared]
            first = members[0]
            if len(shared) == 1 and members.count(first) == len(members) and set(map(type, members)) == {type(first)}:
                return
        buckets: dict[int, list] = {}
        for member in members:
            try:
                key = hash(member)
            except TypeError:  # unhashable members (lists) are never hashed by the judge either
                continue
            bucket = buckets.setdefault(key, [])
            if any(type(member) is type(seen) and member == seen for seen in bucket):
                continue
            bucket.append(member)
            if len(bucket) > 1:
                self.collisions += 1
                if len(bucket) > MAX_BUCKET_COLLISIONS or self.collisions > MAX_CASE_COLLISIONS:
                    raise HostileValue(f"{self.collisions} unequal values with colliding hashes (hash {key}): refused"
                                       " (a set of them would cost the harness quadratic time)")


def _decode(item: object, depth: int, budget: _Budget) -> object:
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if item is None or isinstance(item, (bool, int, float, str)):
        return item
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        raise ValueError(f"not an encoded value: {str(item)[:80]!r}")
    kind, body = item
    if kind in _SEQUENCES and isinstance(body, list):
        if set(map(type, body)) <= _SCALARS:  # nothing to decode inside (C speed)
            members = body
        else:
            members = [_decode(member, depth + 1, budget) for member in body]
        # Lists too: the judge may build a set of them (`set(f(x)) == {...}`).
        budget.check(members)
        # set()/frozenset() raise TypeError for unhashable members (lists in a set): a
        # program's encoder made that up.
        return members if kind == "list" else _SEQUENCES[kind](members)
    if kind == "dict" and isinstance(body, list):
        pairs = []
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError("a dict item must be a [key, value] pair")
            pairs.append((_decode(pair[0], depth + 1, budget), _decode(pair[1], depth + 1, budget)))
        budget.check([key for key, _ in pairs])
        budget.check([value for _, value in pairs])
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
    deeper than MAX_DEPTH, or holds an unhashable member of a set or dict key; HostileValue
    (a ValueError) when its containers hold more unequal values with colliding hashes than
    MAX_BUCKET_COLLISIONS in one bucket or MAX_CASE_COLLISIONS in all.
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
        budget = _Budget()
        decoded = [_decode(item, 0, budget) for item in items]
        budget.check(decoded)
        return decoded
    except (TypeError, RecursionError, OverflowError) as err:
        raise ValueError(f"cannot decode a value ({type(err).__name__}: {err})") from None
