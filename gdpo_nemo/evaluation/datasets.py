"""Benchmark files of the paper's evaluations, read from local files (no hub).

Math (Table 3-4): one JSON object per line (`.jsonl`) or a JSON list (`.json`). The
question is the first of ``problem``, ``question``, ``Problem``, ``prompt`` that is a
non-empty string; the reference answer the first of ``answer``, ``Answer``,
``final_answer`` (OlympiadBench: a list, its first element), ``expected_answer``,
``solution`` (MATH: the last ``\\boxed{...}`` of the worked solution). These cover the
common releases of MATH-500, AIME 2024, AMC, Minerva and OlympiadBench.

Code (Table 5): one object per line. The statement is the first of ``question`` (APPS,
TACO), ``description`` (CodeContests, Codeforces), ``problem``, ``prompt``; the tests come
from ``input_output`` (APPS, TACO: ``{"inputs", "outputs"[, "fn_name"]}`` or its JSON
text), the union of ``public_tests``, ``private_tests`` and ``generated_tests``
(CodeContests: ``{"input": [...], "output": [...]}`` each), ``official_tests``
(Codeforces: ``[{"input", "output"}, ...]``) or ``tests`` (any form of
gdpo_nemo.rewards.code). A call-based problem (tests with ``fn_name``, APPS / TACO) gets its
``starter_code`` and the function's name appended to the statement.

A row that cannot be read is reported with its line number and kept as a failed item: it
counts in the benchmark's denominator with the lowest score, so a broken file cannot raise
a benchmark's accuracy by shrinking it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.rewards.math_rewards import boxed_content
from gdpo_nemo.tasks import TASKS

# The benchmarks each task declares (gdpo_nemo.tasks): the math ones give a boxed answer, the
# code ones a program judged on test cases.
MATH_BENCHMARKS = TASKS["math"].benchmarks
CODE_BENCHMARKS = TASKS["code"].benchmarks
QUESTION_KEYS = ("problem", "question", "Problem", "prompt")
ANSWER_KEYS = ("answer", "Answer", "final_answer", "expected_answer")
CODE_STATEMENT_KEYS = ("question", "description", "problem", "prompt")
CODECONTESTS_TEST_KEYS = ("public_tests", "private_tests", "generated_tests")
FORMATS = (".jsonl", ".json")


@dataclass
class Item:
    """One benchmark question: its text, its reference (answer or tests), or why it is broken."""

    index: int
    question: str = ""
    reference: object = None
    error: str | None = None  # set for a row that could not be read: scored as a failure


@dataclass
class Benchmark:
    name: str
    path: Path
    items: list = field(default_factory=list)

    @property
    def problems(self) -> list:
        return [f"{self.path}: {item.error}" for item in self.items if item.error]


def _rows(path: Path) -> list:
    """[(line number, parsed object or None, error)] of a .jsonl or .json file."""
    if not path.is_file():
        raise FileNotFoundError(
            f"benchmark file {str(path)!r} does not exist (accepted: a .jsonl file with one JSON object per line,"
            " or a .json file holding a list of objects)")
    if path.suffix not in FORMATS:
        raise UserError(f"benchmark file {str(path)!r}: unknown format {path.suffix!r}; accepted: {', '.join(FORMATS)}")
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise UserError(f"benchmark file {str(path)!r} is not valid JSON: {err}") from None
        if not isinstance(data, list):
            raise UserError(f"benchmark file {str(path)!r} must hold a JSON list of objects, got {type(data).__name__}")
        return [(number, row, None) for number, row in enumerate(data, start=1)]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line), None))
        except json.JSONDecodeError as err:
            rows.append((number, None, f"line {number}: not valid JSON ({err.msg})"))
    return rows


def _first_text(row: dict, keys) -> str | None:
    for key in keys:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def math_answer(row: dict) -> str | None:
    """The reference answer of a math row (module docstring), as text."""
    for key in ANSWER_KEYS:
        value = row.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
    solution = row.get("solution")
    if isinstance(solution, str):
        return boxed_content(solution)
    return None


class _BadRow(ValueError):
    """A row that cannot be read; its message names the line and what was looked for."""


def _load(name: str, path, read_row) -> Benchmark:
    """Every row of the file as an `Item`; `read_row(row, number)` gives (question, reference)
    or raises _BadRow. Unreadable rows stay in as failed items (module docstring)."""
    bench = Benchmark(name, Path(path))
    for number, row, error in _rows(bench.path):
        index = len(bench.items)
        if error is None and not isinstance(row, dict):
            error = f"line {number}: expected a JSON object, got {type(row).__name__}"
        if error is None:
            try:
                question, reference = read_row(row, number)
                bench.items.append(Item(index, question, reference))
                continue
            except _BadRow as err:
                error = str(err)
        bench.items.append(Item(index, error=error))
    return bench


def _math_row(row: dict, number: int) -> tuple:
    question, answer = _first_text(row, QUESTION_KEYS), math_answer(row)
    if question is None:
        raise _BadRow(f"line {number}: no question (looked for {', '.join(QUESTION_KEYS)})")
    if answer is None:
        raise _BadRow(f"line {number}: no answer (looked for {', '.join(ANSWER_KEYS)} or a \\boxed{{}} solution)")
    return question, answer


def load_math(name: str, path) -> Benchmark:
    return _load(name, path, _math_row)


def _maybe_json(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def code_tests(row: dict):
    """The tests of a code row in a form `gdpo_nemo.rewards.code.parse_tests` reads, or None."""
    if row.get("input_output") not in (None, "", {}):
        return _maybe_json(row["input_output"])
    inputs, outputs = [], []
    for key in CODECONTESTS_TEST_KEYS:
        block = _maybe_json(row.get(key))
        if isinstance(block, dict):
            inputs += list(block.get("input") or [])
            outputs += list(block.get("output") or [])
    if inputs or outputs:
        return {"inputs": inputs, "outputs": outputs}
    official = _maybe_json(row.get("official_tests"))
    if isinstance(official, list) and official:
        return official
    tests = _maybe_json(row.get("tests"))
    return tests if tests not in (None, "", [], {}) else None


def _code_row(row: dict, number: int) -> tuple:
    from gdpo_nemo.rewards.code import parse_tests

    statement, tests = _first_text(row, CODE_STATEMENT_KEYS), code_tests(row)
    if statement is None:
        raise _BadRow(f"line {number}: no statement (looked for {', '.join(CODE_STATEMENT_KEYS)})")
    if tests is None:
        raise _BadRow(f"line {number}: no tests (looked for input_output, {', '.join(CODECONTESTS_TEST_KEYS)},"
                      " official_tests, tests)")
    try:
        parse_tests(tests)
    except ValueError as err:
        raise _BadRow(f"line {number}: unreadable tests ({err})") from None
    return call_based_statement(statement, tests, row.get("starter_code")), tests


def call_based_statement(statement: str, tests, starter_code) -> str:
    """A call-based problem (APPS / TACO tests with ``fn_name``) says so, with its starter
    code: the tests call that function with their arguments instead of feeding stdin."""
    name = tests.get("fn_name") if isinstance(tests, dict) else None
    if isinstance(starter_code, str) and starter_code.strip():
        statement += f"\n\nStart from this code:\n```python\n{starter_code.strip()}\n```"
    if isinstance(name, str) and name:
        statement += (f"\n\nWrite the function `{name}`: each test calls it with its arguments and compares"
                      " what it returns (no standard input or output).")
    return statement


def load_code(name: str, path) -> Benchmark:
    return _load(name, path, _code_row)
