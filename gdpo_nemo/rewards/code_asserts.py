"""Assert-style tests (MBPP/HumanEval: `"assert f(1) == 2"`) judged outside the program.

A test statement is split in the harness: the parts that call the program ("probes", e.g.
`f(1)`) are evaluated in the sandbox, in the program's namespace, and their values come
back encoded (`gdpo_nemo.sandbox.values`); the expected parts (`2`) never leave the
harness, which computes them itself from literals and then applies the statement's
comparison to the decoded values. A program therefore cannot read the expected values,
return an object that equals everything, or patch whatever judges it: it only ever
produces plain values.

Accepted statements: one `assert` whose test is built from
- comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`, `in`, `not in`, chains such as
  `0 < f(x) < 5`; `is` / `is not` only against None, True or False),
- `not`, `and`, `or`,
- `math.isclose(a, b, rel_tol=..., abs_tol=...)` (or `isclose(...)`),
- `abs(a - b)` as a side of a comparison (float tolerance checks),
- the builtins `set/frozenset/tuple/list/dict/sorted/str/int/float/bool/complex/abs/round/
  len/min/max/sum/isinstance/all/any` applied to probes (`len(f(x)) == 3`,
  `isinstance(f(x), int)`): the harness applies them to the probe's value, so a program
  cannot replace them,
- a bare probe (`assert is_prime(7)`: its value must be truthy),
over sides that are either probes (they name something that is not a builtin) or constants
the harness evaluates itself: literals, containers of them, + - * / // on numbers,
`set/frozenset/tuple/list/dict/sorted/str/int/float/bool/complex/abs/round/len/min/max/sum`
of constants, `math.pi/e/inf/nan/tau` and `float('inf')`-style conversions. A constant side
that needs anything else (it would have to run in the sandbox, where the program could read
it) makes the statement unsupported: `parse_assertion` raises ValueError naming it.
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
from dataclasses import dataclass

from gdpo_nemo.errors import UserError

MAX_CONSTANT_ITEMS = 1_000_000  # elements a constant built by * may have
MAX_CONSTANT_WORK = 4_000_000  # units of work (about elements) one constant side may cost to build
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not,
}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.FloorDiv: operator.floordiv}
_CONSTRUCTORS = {
    "set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "dict": dict, "sorted": sorted, "str": str,
    "int": int, "float": float, "bool": bool, "complex": complex, "abs": abs, "round": round, "len": len,
    "min": min, "max": max, "sum": sum,
}
_MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan, "tau": math.tau}
# Builtins the harness applies itself to a probe's value (`isinstance(f(x), int)`,
# `len(f(x)) == 3`): inside the sandbox the program could replace them.
_HARNESS_FUNCTIONS = {**_CONSTRUCTORS, "isinstance": isinstance, "all": all, "any": any}
_TYPES = {kind.__name__: kind for kind in (int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset)}
# Names a test may use without them being the program's: a side made only of these is
# expected data, never sent to the sandbox.
_TEST_NAMES = set(dir(builtins)) | {"math"}


class _NotConstant(Exception):
    """The node needs something the harness will not evaluate."""


class _Budget:
    """Work a statement's constant sides may cost the harness, in units of about one element
    (an item of a container, a character of a string, 64 bits of an int), counted before the
    work is done: a data error past it, never a harness stuck parsing tests (issue 23:
    `sum([[0]*1000]*100000, [])` is 1e5 list concatenations of up to 1e8 items).
    Also bounds memory: what is built is at most this many elements."""

    def __init__(self, units: int):
        self.left = units

    def charge(self, units: int, what: str) -> None:
        self.left -= units
        if self.left < 0:
            raise _NotConstant(f"{what} costs more than {MAX_CONSTANT_WORK:,} units of work")

    def deep(self, value: object, what: str) -> None:
        """Charge the size of `value` counted through every container (a list repeated by
        reference counts each time, as comparing or printing it would)."""
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, (str, bytes)):
                self.charge(1 + len(item), what)
            elif isinstance(item, int):
                self.charge(1 + item.bit_length() // 64, what)
            elif isinstance(item, dict):
                self.charge(1 + len(item), what)
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, (list, tuple, set, frozenset)):
                self.charge(1 + len(item), what)
                stack.extend(item)
            else:
                self.charge(1, what)


def _size(value: object) -> int:
    if isinstance(value, int):
        return 1 + value.bit_length() // 64
    return len(value) if isinstance(value, (str, bytes, list, tuple, set, frozenset, dict)) else 1


def _constant(node: ast.AST, budget: _Budget) -> object:
    """The value of a constant expression, computed without running any code of the test,
    within `budget`."""
    if isinstance(node, ast.Constant):
        budget.charge(_size(node.value), "a literal")
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_constant(item, budget) for item in node.elts]
        if isinstance(node, ast.Set):
            budget.deep(items, "a set display")  # hashing reads every item in full
        return tuple(items) if isinstance(node, ast.Tuple) else list(items) if isinstance(node, ast.List) else set(items)
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise _NotConstant("a ** in a dict display")
        keys = [_constant(key, budget) for key in node.keys]
        budget.deep(keys, "a dict display")
        return dict(zip(keys, (_constant(value, budget) for value in node.values)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        value = _constant(node.operand, budget)
        if isinstance(node.op, ast.Not):
            return not value
        if not isinstance(value, (int, float, complex)):
            raise _NotConstant("a sign on something that is not a number")
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _constant(node.left, budget), _constant(node.right, budget)
        if isinstance(node.op, ast.Mult) and isinstance(left, (str, bytes, list, tuple)) and isinstance(right, int):
            if len(left) * max(right, 0) > MAX_CONSTANT_ITEMS:
                raise _NotConstant("a repeated sequence that large")
            budget.charge(len(left) * max(right, 0), "a repeated sequence")
        elif not all(isinstance(v, (int, float, complex)) for v in (left, right)):
            if not (isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, (str, bytes, list, tuple))):
                raise _NotConstant("arithmetic on something that is not a number")
            budget.charge(len(left) + len(right), "a concatenation")
        else:
            budget.charge(_size(left) * _size(right), "arithmetic")
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.Name) and node.id in _TYPES:
        return _TYPES[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math":
        if node.attr in _MATH_CONSTANTS:
            return _MATH_CONSTANTS[node.attr]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CONSTRUCTORS:
        args = [_constant(arg, budget) for arg in node.args]
        kwargs = {kw.arg: _constant(kw.value, budget) for kw in node.keywords if kw.arg is not None}
        if len(kwargs) != len(node.keywords):
            raise _NotConstant("** arguments")
        if node.func.id in ("int", "str") and args and isinstance(args[0], (str, int)) and len(str(args[0])) > 4300:
            raise _NotConstant("a number that long")
        what = f"{node.func.id}()"
        # Every builtin here reads its arguments in full at most once (sorting: n log n
        # comparisons, each as deep as the items), except sum() of sequences, which copies
        # the running total at every step.
        budget.deep(args, what)
        if node.func.id == "sorted" and args and isinstance(args[0], (list, tuple, set, frozenset, dict, str)):
            budget.charge(len(args[0]) * max(1, len(args[0]).bit_length()), what)
        if node.func.id == "sum" and args and isinstance(args[0], (list, tuple)):
            running = _size(args[1]) if len(args) > 1 else 0
            for item in args[0]:
                running += _size(item)
                budget.charge(running, what)
        try:
            return _CONSTRUCTORS[node.func.id](*args, **kwargs)
        except (TypeError, ValueError, OverflowError) as err:
            raise _NotConstant(f"{node.func.id}() fails: {err}") from None
    raise _NotConstant(f"{ast.unparse(node)[:80]} is not a literal")


def constant_value(node: ast.AST) -> object:
    """`_constant` within a fresh budget of MAX_CONSTANT_WORK; the value is charged in full
    too, since judging compares against all of it."""
    budget = _Budget(MAX_CONSTANT_WORK)
    value = _constant(node, budget)
    budget.deep(value, "the expected value")
    return value


def _names(node: ast.AST) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}


@dataclass(frozen=True)
class Assertion:
    """One assert statement, split: `probes` (expressions for the sandbox, in order) and the
    judgement the harness applies to their values."""

    statement: str
    probes: tuple[str, ...]
    _test: tuple

    def judge(self, values: list) -> bool:
        """Whether the statement holds for the probes' decoded values. Never raises."""
        try:
            return bool(_holds(self._test, values))
        except (ValueError, TypeError, ArithmeticError, RecursionError, MemoryError):
            return False


def _value(term: tuple, values: list) -> object:
    kind = term[0]
    if kind == "const":
        return term[1]
    if kind == "probe":
        return values[term[1]]
    if kind == "call":
        _, name, arguments, options = term
        return _HARNESS_FUNCTIONS[name](*(_value(argument, values) for argument in arguments), **options)
    left, right = _value(term[1], values), _value(term[2], values)  # "absdiff"
    numbers = (int, float, complex)
    if not (isinstance(left, numbers) and isinstance(right, numbers)):
        raise TypeError("abs(a - b) of something that is not a number")
    return abs(left - right)


def _holds(test: tuple, values: list) -> object:
    kind = test[0]
    if kind == "compare":
        _, terms, ops = test
        evaluated = [_value(term, values) for term in terms]
        return all(_COMPARE[op](a, b) for op, a, b in zip(ops, evaluated, evaluated[1:]))
    if kind == "not":
        return not _holds(test[1], values)
    if kind == "and":
        return all(_holds(part, values) for part in test[1])
    if kind == "or":
        return any(_holds(part, values) for part in test[1])
    if kind == "isclose":
        a, b = _value(test[1], values), _value(test[2], values)
        numbers = (int, float)
        if not (isinstance(a, numbers) and isinstance(b, numbers)):
            return False
        return math.isclose(a, b, **test[3])
    return bool(_value(test[1], values))  # "truth"


def parse_assertion(statement: str) -> Assertion:
    """Split one assert statement (module docstring). Raises ValueError naming what is not
    supported, or why it does not parse."""
    if not isinstance(statement, str):
        raise UserError(f"an assert test must be a string, got {type(statement).__name__}")
    try:
        tree = ast.parse(statement, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        raise UserError(f"assert test does not parse ({type(err).__name__}): {statement[:200]!r}") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise UserError(f"an assert test must be exactly one assert statement: {statement[:200]!r}")
    probes: list[str] = []

    def term(node: ast.AST) -> tuple:
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "abs"
            and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Sub)
        ):
            return ("absdiff", term(node.args[0].left), term(node.args[0].right))
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _HARNESS_FUNCTIONS
            and not _names(node) <= _TEST_NAMES
            and not any(isinstance(argument, ast.Starred) for argument in node.args)
            and all(keyword.arg is not None and _names(keyword.value) <= _TEST_NAMES for keyword in node.keywords)
        ):
            try:
                options = {keyword.arg: constant_value(keyword.value) for keyword in node.keywords}
            except _NotConstant:
                options = None  # sorted(..., key=lambda ...): the whole call goes to the sandbox
            if options is not None:
                return ("call", node.func.id, [term(argument) for argument in node.args], options)
        if _names(node) <= _TEST_NAMES:
            try:
                return ("const", constant_value(node))
            except (_NotConstant, RecursionError, MemoryError) as err:
                raise UserError(
                    f"assert test has an expected side the harness cannot compute without running it "
                    f"({err}): {statement[:200]!r}"
                ) from None
        if any(isinstance(sub, (ast.Compare, ast.BoolOp)) for sub in ast.walk(node)):
            # The program would compute that comparison itself, and could answer "equal".
            raise UserError(f"assert test of a form that cannot be judged outside the program: {statement[:200]!r}")
        probes.append(ast.unparse(node))
        return ("probe", len(probes) - 1)

    def test(node: ast.AST) -> tuple:
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.Is, ast.IsNot)) and not (
                    isinstance(right, ast.Constant) and right.value in (None, True, False) and type(right.value) in (type(None), bool)
                ):
                    raise UserError(f"assert test uses `is` with something other than None/True/False: {statement[:200]!r}")
            return ("compare", [term(node.left)] + [term(c) for c in node.comparators], [type(op) for op in node.ops])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ("not", test(node.operand))
        if isinstance(node, ast.BoolOp):
            return ("and" if isinstance(node.op, ast.And) else "or", [test(value) for value in node.values])
        if isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
             and node.func.value.id == "math" and node.func.attr == "isclose")
            or (isinstance(node.func, ast.Name) and node.func.id == "isclose")
        ) and len(node.args) == 2:
            options = {}
            for keyword in node.keywords:
                if keyword.arg not in ("rel_tol", "abs_tol"):
                    raise UserError(f"assert test passes isclose() an unknown option: {statement[:200]!r}")
                try:
                    options[keyword.arg] = float(constant_value(keyword.value))
                except (_NotConstant, TypeError, ValueError):
                    raise UserError(f"assert test's isclose() tolerance is not a number: {statement[:200]!r}") from None
            return ("isclose", term(node.args[0]), term(node.args[1]), options)
        if isinstance(node, (ast.Call, ast.Name, ast.Attribute, ast.Subscript)) and not _names(node) <= _TEST_NAMES:
            return ("truth", term(node))
        raise UserError(f"assert test of a form that cannot be judged outside the program: {statement[:200]!r}")

    judged = test(tree.body[0].test)
    if not probes:
        raise UserError(f"assert test never calls the program: {statement[:200]!r}")
    return Assertion(statement, tuple(probes), judged)
