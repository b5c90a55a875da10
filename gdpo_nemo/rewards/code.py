"""The coding rewards of the paper (its coding experiments; docs/rewards.md): pass, bug, conditioned length.

For each completion, the program is extracted (`extract_program`) and run on the problem's
test cases in the sandbox (`gdpo_nemo.sandbox`, all programs of a batch in parallel):

- `pass` in [0, 1]: the fraction of test cases passed.
- `bug` in {0, 1}: 1 if the program ran every test case without a compile error, a runtime
  error, a timeout, a resource limit or a leftover process (sandbox status "ok" on every
  case), else 0. A wrong answer is not a bug; crashing, hanging or being killed is, so a
  hostile program (fork bomb, memory bomb, endless loop, ...) earns pass 0 and bug 0.
- `length` in {0, 1}: the conditioned length reward, `length_reward(completion,
  length_limit, num_tokens, correct=(pass == 1.0))` (gdpo_nemo.rewards.length).

A completion without an extractable program earns 0 on every component. Nothing about the
completion ever raises. Broken tests (whatever is wrong: bad shape, nesting too deep for
Python or for the sandbox's wire format, statements too large to compile) are a data error:
the batch is scored, the bad rows get 0 everywhere, and `RewardDataError` (a ValueError
naming each bad row) is raised with the scores in its `.partial`.

Test-case formats (a JSON string of any of them is accepted too):

1. stdin/stdout, APPS/TACO/CodeContests and Eurus-2-RL-Data `reward_model.ground_truth`:
   `{"inputs": [stdin, ...], "outputs": [stdout, ...]}`, or an APPS row
   `{"input_output": <that, or its JSON>}`. An input or output given as a list of lines is
   joined with newlines (an input list also gets a final newline).
2. stdin/stdout as a list of pairs: `[{"input": stdin, "output": stdout}, ...]`.
3. function calls, APPS call-based and Eurus-2-RL-Data with `fn_name`:
   `{"fn_name": name, "inputs": [args, ...], "outputs": [value, ...]}`. `args` is a list
   of arguments (APPS), or a string with one JSON argument per line (Eurus/PRIME), in which
   case its output is a JSON string too. `name` may be a method of a `class Solution`
   (LeetCode style; `typing` names such as `List` are predefined for it).
4. assert statements, MBPP/HumanEval style: `["assert f(1) == 2", ...]`; each string is one
   test case. It is split in the harness (`gdpo_nemo.rewards.code_asserts`): only the parts
   that call the program (`f(1)`) are evaluated in the sandbox, after the program ran, in
   its namespace; the harness compares their values with the expected parts, which never
   reach the sandbox. An exception while evaluating is a runtime error of the program. A
   statement whose expected side the harness cannot compute from literals is refused as a
   data error (so is any statement of another form than code_asserts lists).

Comparisons:
- stdout: both texts are split into lines ("\\r\\n" counts as "\\n"), trailing whitespace is
  removed from every line and trailing empty lines are dropped; then they must be equal.
  Leading and inner whitespace count. Output cut at `Limits.max_output_bytes` fails.
- function calls: the return value, through JSON (tuples become lists), must `==` the
  expected value. APPS/TACO rows (arguments given as lists) wrap each answer in a
  one-element list, so there the value may also equal that list's only element; it never
  passes by equalling the first of several expected items (a `twoSum` returning 0 against
  `[0, 1]`). Eurus-2-RL/PRIME rows (JSON lines) are not wrapped: exact equality only.
- assert statements: Python's own comparison of the decoded values (a list is not a tuple).

Speed: after the first case of a program that times out, its remaining cases are not run and
count as failed (`stop_on_timeout`), which bounds a batch's wall-clock time.
"""

from __future__ import annotations

import json
import marshal
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gdpo_nemo.errors import UserError
from gdpo_nemo.rewards.base import RewardDataError
from gdpo_nemo.rewards.code_asserts import parse_assertion
from gdpo_nemo.rewards.length import length_reward
from gdpo_nemo.sandbox import Case, ExecResult, Limits, SandboxPool, shared_pool
from gdpo_nemo.sandbox.values import HostileValue, decode_values

CODE_RANGES = {"pass": (0.0, 1.0), "bug": (0.0, 1.0), "length": (0.0, 1.0)}
PYTHON_FENCE_TAGS = ("python", "python3", "py")


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info word, body) of every closed fenced block, in order.

    A fence opens on a line starting (after indentation) with 3 or more backticks, whose
    first following word is the info word; it closes on a line of at least as many
    backticks and nothing else. An unclosed block (a truncated completion) is dropped.
    """
    blocks = []
    opened = 0
    info = ""
    body: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        if opened:
            if stripped and set(stripped) == {"`"} and len(stripped) >= opened:
                blocks.append((info, "\n".join(body)))
                opened = 0
            else:
                body.append(line)
            continue
        if stripped.startswith("```"):
            ticks = len(stripped) - len(stripped.lstrip("`"))
            words = stripped[ticks:].split()
            if "`" in stripped[ticks:]:
                continue  # inline code such as ```print(1)```, not a fence
            opened, info, body = ticks, (words[0].lower() if words else ""), []
    return blocks


def extract_program(completion: str) -> str | None:
    """The program in a completion, or None.

    Rule: if the completion contains `</think>`, only the text after the last one is read
    (R1-style reasoning comes before it); if it contains `<think>` but no `</think>`, the
    reasoning never ended and there is no answer (None). In that text, the last closed
    fenced block tagged python/python3/py (any case) is the program; without one, the last
    closed block with no tag. Blocks tagged with another language are ignored, and a block
    that is empty or only whitespace counts as no program. Never raises.
    """
    if not isinstance(completion, str):
        return None
    text = completion
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    elif "<think>" in text:
        return None
    blocks = _fenced_blocks(text)
    tagged = [body for info, body in blocks if info in PYTHON_FENCE_TAGS]
    untagged = [body for info, body in blocks if info == ""]
    chosen = tagged[-1] if tagged else untagged[-1] if untagged else None
    if chosen is None or not chosen.strip():
        return None
    return chosen


def output_matches(text: str, expected: list[str]) -> bool:
    """Whether `normalize_output(text) == expected`, without building the list: the output's
    first len(expected) lines are compared one at a time (an 8 MiB output of 2-character lines
    would otherwise cost the harness about 33 times its size), and what follows them must be
    whitespace only, checked in one pass at C speed (a loop over its lines cost about 3 s of
    harness CPU for 8 MiB of newlines after a correct answer, 100 times one long line's cost)."""
    position, end = 0, len(text)
    for want in expected:
        if position > end:
            return False  # fewer lines than expected
        cut = text.find("\n", position)
        cut = end if cut < 0 else cut
        if text[position:cut].rstrip() != want:
            return False
        position = cut + 1
    # Every later line must be empty once its trailing whitespace goes: all of it whitespace.
    return position > end or not text[position:].strip()


def normalize_output(text: str) -> list[str]:
    """Lines of `text` with trailing whitespace removed and trailing empty lines dropped:
    what stdout comparison compares."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@dataclass(frozen=True)
class TestCase:
    """One parsed test: the sandbox `case` and what counts as passing it.

    expected: normalized stdout lines (stdio), the expected return value (call), or the
    `Assertion` that judges the evaluated values (assert tests).
    rule: how a call's value is compared: "exact" (Eurus-2-RL/PRIME rows: the value must
    equal the expected one) or "apps" (APPS/TACO rows, which wrap each answer in a
    one-element list: the value may equal the expected list or its only element).
    """

    __test__ = False  # not a pytest test class, despite the name

    case: Case
    expected: object = None
    rule: str = "exact"

    def passed(self, result: ExecResult) -> bool:
        """Whether `result` (the program's run on this case) passes it. Never raises."""
        return self.verdict(result)[0]

    def verdict(self, result: ExecResult) -> tuple[bool, bool]:
        """(passed, ran cleanly): whether `result` passes this case, and whether the program
        ran without error and sent back nothing built against the judge (values with
        colliding hashes, `sandbox.values.HostileValue`). Never raises."""
        if result.status != "ok":
            return False, result.ok
        if self.case.kind == "eval":
            try:
                values = decode_values(result.value, len(self.case.evaluate))
            except HostileValue:
                return False, False
            except (ValueError, TypeError, RecursionError, MemoryError, OverflowError):
                return False, result.ok
            return self.expected.judge(values), result.ok
        return self._passed(result), result.ok

    def _passed(self, result: ExecResult) -> bool:
        kind = self.case.kind
        try:
            if kind == "call":
                if result.value is None:
                    return False
                value = json.loads(result.value)
                expected = self.expected
                if value == expected:
                    return True
                # APPS stores `[answer]`; only that one-element wrapper may be looked into, so a
                # value can never pass by matching the first of several expected items.
                return self.rule == "apps" and isinstance(expected, list) and len(expected) == 1 and value == expected[0]
        except (ValueError, TypeError, RecursionError, MemoryError, OverflowError):
            return False
        return not result.stdout_truncated and output_matches(result.stdout, self.expected)


def _text(value: object, what: str, final_newline: bool) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value) + ("\n" if final_newline and value else "")
    raise UserError(f"{what} must be a string or a list of strings, got {type(value).__name__}")


def _call_args(value: object, index: int) -> tuple[list, bool]:
    """(arguments, given as JSON text?) of call-based input `index`."""
    if isinstance(value, list):
        return value, False
    if isinstance(value, str):
        try:
            return [json.loads(line) for line in value.split("\n") if line.strip()], True
        except ValueError as err:
            raise UserError(f"inputs[{index}] is not one JSON argument per line ({err})") from None
    raise UserError(f"inputs[{index}] must be a list of arguments or JSON lines, got {type(value).__name__}")


def _from_inputs_outputs(tests: dict) -> list[TestCase]:
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise UserError('needs "inputs" and "outputs" lists')
    if len(inputs) != len(outputs):
        raise UserError(f'has {len(inputs)} inputs but {len(outputs)} outputs')
    name = tests.get("fn_name")
    if name is None:
        return [
            TestCase(Case(stdin=_text(i, f"inputs[{k}]", True)), normalize_output(_text(o, f"outputs[{k}]", False)))
            for k, (i, o) in enumerate(zip(inputs, outputs))
        ]
    if not isinstance(name, str) or not name.isidentifier():
        raise UserError(f'"fn_name" must be a Python identifier, got {name!r}')
    parsed = []
    for k, (given, expected) in enumerate(zip(inputs, outputs)):
        args, as_json = _call_args(given, k)
        if as_json and isinstance(expected, str):
            try:
                expected = json.loads(expected)
            except ValueError as err:
                raise UserError(f"outputs[{k}] is not JSON ({err})") from None
        parsed.append(TestCase(Case(call=name, args=args), expected, "exact" if as_json else "apps"))
    return parsed


def parse_tests(tests: object) -> list[TestCase]:
    """The test cases of one problem, from any accepted format (module docstring).

    Raises ValueError naming what is wrong, whatever is wrong (deep nesting, huge statements,
    values the sandbox cannot carry included); at least one test case is required.
    """
    try:
        parsed = _parse_tests(tests)
        try:
            # What the sandbox will be sent must be sendable: marshal refuses deep nesting.
            marshal.dumps([test.case._wire() for test in parsed], 4)
        except ValueError as err:
            raise UserError(f"tests hold arguments the sandbox cannot be sent ({err})") from None
        return parsed
    except ValueError:
        raise
    except (RecursionError, MemoryError, TypeError, OverflowError, SyntaxError) as err:
        raise UserError(f"tests cannot be read ({type(err).__name__}: {str(err)[:200]})") from None


def _parse_tests(tests: object) -> list[TestCase]:
    if isinstance(tests, (bytes, bytearray)):
        try:
            tests = tests.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(f"tests are bytes but not UTF-8 ({err.reason})") from None
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except ValueError as err:
            raise UserError(f"tests are a string but not JSON ({err})") from None
    if isinstance(tests, dict) and "input_output" in tests:
        return _parse_tests(tests["input_output"])
    if isinstance(tests, dict):
        parsed = _from_inputs_outputs(tests)
    elif isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        parsed = []
        for statement in tests:
            assertion = parse_assertion(statement)
            parsed.append(TestCase(Case(evaluate=assertion.probes), assertion))
    elif isinstance(tests, list) and all(isinstance(t, dict) and {"input", "output"} <= set(t) for t in tests):
        parsed = [
            TestCase(Case(stdin=_text(t["input"], f"[{k}].input", True)), normalize_output(_text(t["output"], f"[{k}].output", False)))
            for k, t in enumerate(tests)
        ]
    else:
        raise UserError(
            'tests must be {"inputs": [...], "outputs": [...]} (optionally with "fn_name"), '
            '[{"input": ..., "output": ...}, ...], ["assert ...", ...], or the JSON of one of them; '
            f"got {type(tests).__name__}"
        )
    if not parsed:
        raise UserError("tests hold no test case")
    return parsed


def _check_components(components: object) -> list[str]:
    if isinstance(components, str) or not isinstance(components, Sequence) or not components:
        raise UserError(f"components must be a non-empty list of names from {list(CODE_RANGES)}, got {components!r}")
    unknown = [name for name in components if name not in CODE_RANGES]
    if unknown:
        raise UserError(f"unknown code reward component(s) {unknown}; accepted: {', '.join(CODE_RANGES)}")
    return list(components)


def score_code_batch(
    completions: list[str],
    tests: list,
    *,
    components: list[str],
    num_tokens: list[int | None] | None = None,
    length_limit: int | None = None,
    limits: Limits | None = None,
    pool: SandboxPool | None = None,
) -> dict[str, list[float]]:
    """{component: [value per completion]} for a batch of B completions.

    completions: B model outputs. tests: B test-case objects (module docstring).
    components: names from CODE_RANGES ("pass", "bug", "length"). num_tokens: None or B
    token counts for `length` (None entries: ceil(chars/4)). length_limit: tokens, needed
    when `length` is asked for (the paper: 4000). limits: per-case sandbox limits (default
    `Limits()`). pool: the SandboxPool to use (default: the process-wide shared pool).

    Raises ValueError for bad arguments, RewardDataError (a ValueError) naming the rows whose
    tests are broken after scoring the others, and SandboxError if the sandbox cannot run;
    never because of what a completion says or does.
    """
    names = _check_components(components)
    if isinstance(completions, (str, bytes)) or not isinstance(completions, Sequence):
        raise UserError(f"completions must be a list of strings, got {type(completions).__name__}")
    count = len(completions)
    if isinstance(tests, (str, bytes)) or not isinstance(tests, Sequence) or len(tests) != count:
        raise UserError(f"tests must be a list with one entry per completion ({count}), got {tests!r:.200}")
    if num_tokens is not None and (isinstance(num_tokens, (str, bytes)) or not isinstance(num_tokens, Sequence) or len(num_tokens) != count):
        raise UserError(f"num_tokens must be None or a list of {count} token counts, got {num_tokens!r:.200}")
    if "length" in names and (
        isinstance(length_limit, bool)
        or not isinstance(length_limit, (int, float))
        or not (math.isfinite(length_limit) and length_limit > 0)
    ):
        raise UserError(f"length_limit must be a positive number of tokens when 'length' is scored, got {length_limit!r}")

    errors: dict[int, str] = {}
    parsed: dict[int, list[TestCase]] = {}
    for row, row_tests in enumerate(tests):
        try:
            parsed[row] = parse_tests(row_tests)
        except Exception as err:  # parse_tests raises ValueError; anything else is still this row's data
            errors[row] = f"tests: {err}" if isinstance(err, ValueError) else f"tests: cannot be read ({type(err).__name__})"
    programs = {row: extract_program(completions[row]) for row in parsed}
    runnable = [row for row, program in programs.items() if program is not None]
    pool = shared_pool() if pool is None else pool

    def judge(job: int, index: int, result: ExecResult) -> tuple[bool, bool]:
        # Each case is judged as its result arrives and its output dropped: the harness never
        # holds a batch's outputs (8 MiB per case allowed) until the batch is done.
        return parsed[runnable[job]][index].verdict(result)

    results = pool.run_many(
        [(programs[row], [test.case for test in parsed[row]]) for row in runnable], limits,
        stop_on_timeout=True, judge=judge,
    )

    pass_rate = [0.0] * count
    bug_free = [0.0] * count
    for row, judged in zip(runnable, results):
        pass_rate[row] = sum(passed for passed, _ in judged) / len(judged)
        bug_free[row] = 1.0 if all(ok for _, ok in judged) else 0.0
    scores: dict[str, list[float]] = {name: [] for name in names}
    for row in range(count):
        has_program = programs.get(row) is not None
        for name in names:
            if name == "pass":
                value = pass_rate[row]
            elif name == "bug":
                value = bug_free[row]
            else:
                tokens = None if num_tokens is None else num_tokens[row]
                value = length_reward(completions[row], length_limit, tokens, correct=(pass_rate[row] == 1.0)) if has_program else 0.0
            scores[name].append(float(value))
    if errors:
        raise RewardDataError(errors, partial=scores)
    return scores
