"""Small stdin/stdout programming problems (the paper's coding setting; rewards: pass,
length, bug).

Offline set: problems from templates with seeded parameters ("read n, print n * 7 + 3",
"print the line shifted 4 letters", ...). Each template carries a reference solution
(source text, what demonstrations show) and an independent case maker that computes the
expected output in Python, so the tests are not derived from the solution they check.
Each problem has `cases_per_problem` tests in APPS form
`{"inputs": [stdin str], "outputs": [stdout str]}`; the first one is shown in the
statement as an example. The template is drawn uniformly from `templates`.

Files: Eurus-2-RL-style parquet/jsonl/json with `prompt` (chat messages) and
`reward_model.ground_truth` (the tests object, or its JSON text). Rows whose `ability`
column is present and not "code" are skipped (Eurus-2-RL mixes math and code rows). An
optional `solution` (text) or `solutions` (list, or its JSON text) column supplies
demonstrations; without one, `demonstration` raises ValueError.
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from typing import Callable

from gdpo_nemo.errors import UserError
from gdpo_nemo.tasks import files, prompts
from gdpo_nemo.tasks.base import Draft, Task, chat, register_task

_PRIMES = [7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97]


def _word(rng: random.Random, low: int = 3, high: int = 10, letters: str = string.ascii_lowercase) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(low, high)))


def _numbers(rng: random.Random, low: int = -50, high: int = 50) -> list:
    return [rng.randint(low, high) for _ in range(rng.randint(1, 8))]


def _list_input(xs: list) -> str:
    return f"{len(xs)}\n{' '.join(map(str, xs))}\n"


def _shift(text: str, k: int) -> str:
    return "".join(chr((ord(c) - ord("a") + k) % 26 + ord("a")) for c in text)


def _factorial_mod(n: int, m: int) -> int:
    result = 1
    for i in range(2, n + 1):
        result = result * i % m
    return result


@dataclass(frozen=True)
class CodeTemplate:
    """One problem family.

    params: draws the template parameters.
    statement / solution / idea: format strings over the parameters (the problem text,
        the reference program, the one-line idea a demonstration states).
    case: draws one test for given parameters: (stdin text, expected stdout text).
    """

    params: Callable[[random.Random], dict]
    statement: str
    solution: str
    idea: str
    case: Callable[[random.Random, dict], tuple]


_LIST_INPUT = "The first line holds an integer n (1 <= n <= 8); the second holds n integers separated by spaces."
_CASE_METHODS = {"": str, ".upper()": str.upper, ".lower()": str.lower}


# Case makers: (rng, params) -> (stdin, expected stdout).
def _case_linear(r, p):
    n = r.randint(-100, 100)
    return f"{n}\n", f"{n * p['k'] + p['c']}\n"


def _case_weighted_sum(r, p):
    a, b = r.randint(-99, 99), r.randint(-99, 99)
    return f"{a} {b}\n", f"{p['p'] * a + p['q'] * b}\n"


def _case_reverse(r, p):
    word = _word(r, letters=string.ascii_letters)
    return f"{word}\n", _CASE_METHODS[p["case"]](word[::-1]) + "\n"


def _case_repeat(r, p):
    word = _word(r)
    return f"{word}\n", p["sep"].join([word] * p["k"]) + "\n"


def _case_count_above(r, p):
    xs = _numbers(r, -10, 60)
    return _list_input(xs), f"{len([x for x in xs if x > p['t']])}\n"


def _case_count_letter(r, p):
    # Letters drawn with extra weight on the counted one, so counts are rarely zero.
    word = _word(r, 5, 20, "abcdeimnorst" + p["ch"] * 3)
    return f"{word}\n", f"{sum(c == p['ch'] for c in word)}\n"


def _case_modulo(r, p):
    n = r.randint(0, 10**6)
    return f"{n}\n", f"{n % p['m']}\n"


def _case_divisible(r, p):
    # Half the cases are multiples, so both answers occur.
    n = r.choice([p["d"] * r.randint(1, 10_000 // p["d"]), r.randint(1, 10_000)])
    return f"{n}\n", ("YES" if n % p["d"] == 0 else "NO") + "\n"


def _case_multiples(r, p):
    n = r.randint(p["d"], 100)
    return f"{n}\n", " ".join(str(i) for i in range(1, n + 1) if i % p["d"] == 0) + "\n"


def _case_digit_sum(r, p):
    n = r.randint(0, 10**12 - 1)
    return f"{n}\n", f"{p['k'] * sum(map(int, str(n)))}\n"


def _case_power_sum(r, p):
    n = r.randint(1, 50)
    return f"{n}\n", f"{sum(i ** p['e'] for i in range(1, n + 1))}\n"


def _case_caesar(r, p):
    word = _word(r)
    return f"{word}\n", _shift(word, p["k"]) + "\n"


def _case_prefix(r, p):
    word = _word(r, p["k"], p["k"] + 8)
    return f"{word}\n", word[: p["k"]] + "\n"


def _case_extreme_plus(r, p):
    xs = _numbers(r)
    extreme = max(xs) if p["f"] == "max" else min(xs)
    return _list_input(xs), f"{extreme + p['c']}\n"


def _case_sort(r, p):
    xs = _numbers(r)
    return _list_input(xs), " ".join(map(str, sorted(xs, reverse=p["rev"] == "True"))) + "\n"


def _case_factorial_mod(r, p):
    n = r.randint(0, 30)
    return f"{n}\n", f"{_factorial_mod(n, p['m'])}\n"


def _case_range_sum(r, p):
    a, b = sorted((r.randint(-1000, 1000), r.randint(-1000, 1000)))
    return f"{a} {b}\n", f"{p['k'] * (a + b) * (b - a + 1) // 2}\n"


TEMPLATES = {
    "linear": CodeTemplate(
        lambda r: {"k": r.randint(2, 9), "c": r.randint(1, 20)},
        "Read one integer n (-100 <= n <= 100) and print n * {k} + {c}.",
        "n = int(input())\nprint(n * {k} + {c})\n",
        "Read n as an integer and print n * {k} + {c}.",
        _case_linear,
    ),
    "weighted_sum": CodeTemplate(
        lambda r: {"p": r.randint(1, 9), "q": r.randint(1, 9)},
        "Read two integers a and b from one line, separated by a space, and print {p} * a + {q} * b.",
        "a, b = map(int, input().split())\nprint({p} * a + {q} * b)\n",
        "Split the line into two integers and print {p} * a + {q} * b.",
        _case_weighted_sum,
    ),
    "reverse": CodeTemplate(
        lambda r: r.choice([{"case": "", "how": ""}, {"case": ".upper()", "how": " in upper case"},
                            {"case": ".lower()", "how": " in lower case"}]),
        "Read one line of letters and print it reversed{how}.",
        "s = input().strip()\nprint(s[::-1]{case})\n",
        "Reverse the string with a slice{how}.",
        _case_reverse,
    ),
    "repeat": CodeTemplate(
        lambda r: {"k": r.randint(2, 6), "sep": r.choice(["-", ",", "+", "|", "."])},
        "Read one word and print it {k} times on one line, separated by the character '{sep}'.",
        "w = input().strip()\nprint({sep!r}.join([w] * {k}))\n",
        "Join {k} copies of the word with '{sep}'.",
        _case_repeat,
    ),
    "count_above": CodeTemplate(
        lambda r: {"t": r.randint(0, 40)},
        _LIST_INPUT + " Print how many of the n integers are greater than {t}.",
        "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(1 for x in xs if x > {t}))\n",
        "Count the integers above {t}.",
        _case_count_above,
    ),
    "count_letter": CodeTemplate(
        lambda r: {"ch": r.choice(string.ascii_lowercase)},
        "Read one line of lowercase letters and print how many times the letter '{ch}' occurs in it.",
        "s = input().strip()\nprint(s.count({ch!r}))\n",
        "Count the occurrences of '{ch}' with str.count.",
        _case_count_letter,
    ),
    "modulo": CodeTemplate(
        lambda r: {"m": r.randint(2, 40)},
        "Read one non-negative integer n (n <= 1000000) and print the remainder of n divided by {m}.",
        "n = int(input())\nprint(n % {m})\n",
        "Print n % {m}.",
        _case_modulo,
    ),
    "divisible": CodeTemplate(
        lambda r: {"d": r.randint(2, 20)},
        "Read one integer n (1 <= n <= 10000). Print YES if n is divisible by {d}, otherwise print NO.",
        "n = int(input())\nprint('YES' if n % {d} == 0 else 'NO')\n",
        "Check whether n % {d} is zero.",
        _case_divisible,
    ),
    "multiples": CodeTemplate(
        lambda r: {"d": r.randint(2, 9)},
        "Read one integer n ({d} <= n <= 100) and print every number from 1 to n that is divisible by {d},"
        " in increasing order, on one line separated by spaces.",
        "n = int(input())\nprint(' '.join(str(i) for i in range({d}, n + 1, {d})))\n",
        "Step through the multiples of {d} up to n with range.",
        _case_multiples,
    ),
    "digit_sum": CodeTemplate(
        lambda r: {"k": r.randint(2, 9)},
        "Read one non-negative integer n (n < 10^12) and print the sum of its digits multiplied by {k}.",
        "n = input().strip()\nprint(sum(int(c) for c in n) * {k})\n",
        "Add up the digits of n and multiply the sum by {k}.",
        _case_digit_sum,
    ),
    "power_sum": CodeTemplate(
        lambda r: {"e": r.randint(1, 4)},
        "Read one integer n (1 <= n <= 50) and print the sum of i^{e} for i from 1 to n.",
        "n = int(input())\nprint(sum(i ** {e} for i in range(1, n + 1)))\n",
        "Sum i ** {e} over i = 1..n.",
        _case_power_sum,
    ),
    "caesar": CodeTemplate(
        lambda r: {"k": r.randint(1, 25)},
        "Read one line of lowercase letters and print it with every letter moved {k} places forward in the"
        " alphabet, wrapping from z back to a.",
        "s = input().strip()\nprint(''.join(chr((ord(c) - 97 + {k}) % 26 + 97) for c in s))\n",
        "Shift each letter by {k} modulo 26.",
        _case_caesar,
    ),
    "prefix": CodeTemplate(
        lambda r: {"k": r.randint(1, 8)},
        "Read one line of at least {k} letters and print its first {k} characters.",
        "s = input().strip()\nprint(s[:{k}])\n",
        "Print the slice s[:{k}].",
        _case_prefix,
    ),
    "extreme_plus": CodeTemplate(
        lambda r: r.choice([{"which": "largest", "f": "max"}, {"which": "smallest", "f": "min"}]) | {"c": r.randint(1, 20)},
        _LIST_INPUT + " Print the {which} of them plus {c}.",
        "n = int(input())\nxs = list(map(int, input().split()))\nprint({f}(xs) + {c})\n",
        "Take the {which} value with {f} and add {c}.",
        _case_extreme_plus,
    ),
    "sort": CodeTemplate(
        lambda r: r.choice([{"order": "increasing", "rev": "False"}, {"order": "decreasing", "rev": "True"}]),
        _LIST_INPUT + " Print them in {order} order on one line, separated by spaces.",
        "n = int(input())\nxs = list(map(int, input().split()))\nprint(' '.join(map(str, sorted(xs, reverse={rev}))))\n",
        "Sort the list ({order}) and join it with spaces.",
        _case_sort,
    ),
    "factorial_mod": CodeTemplate(
        lambda r: {"m": r.choice(_PRIMES)},
        "Read one integer n (0 <= n <= 30) and print n! modulo {m}.",
        "n = int(input())\nf = 1\nfor i in range(2, n + 1):\n    f = f * i % {m}\nprint(f % {m})\n",
        "Multiply 1..n, reducing modulo {m} at each step.",
        _case_factorial_mod,
    ),
    "range_sum": CodeTemplate(
        lambda r: {"k": r.randint(1, 9)},
        "Read two integers a and b (a <= b, both between -1000 and 1000) from one line and print {k} times"
        " the sum of all integers from a to b inclusive.",
        "a, b = map(int, input().split())\nprint({k} * sum(range(a, b + 1)))\n",
        "Sum range(a, b + 1) and multiply by {k}.",
        _case_range_sum,
    ),
}

_LEADS = ("", "Plan: ", "Idea: ", "Approach: ")


def parse_tests(value, where: str) -> dict:
    """A tests object from a data file: `{"inputs": [str], "outputs": [str]}` of equal
    length, or its JSON text. Other keys (e.g. APPS's `fn_name`) are kept. ValueError
    naming `where` otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise UserError(f"{where}: column 'reward_model.ground_truth' is text but not JSON tests ({err.msg})") from err
    if not isinstance(value, dict) or not isinstance(value.get("inputs"), list) or not isinstance(value.get("outputs"), list):
        raise UserError(f"{where}: column 'reward_model.ground_truth' must hold {{\"inputs\": [...], \"outputs\": [...]}}")
    if len(value["inputs"]) != len(value["outputs"]) or not value["inputs"]:
        raise UserError(
            f"{where}: column 'reward_model.ground_truth' has {len(value['inputs'])} inputs and"
            f" {len(value['outputs'])} outputs; they must be equal in number and at least 1"
        )
    return value


@register_task
@dataclass(frozen=True)
class CodeTask(Task):
    """Stdin/stdout programming problems with APPS-style tests.

    templates: which problem families the offline set draws from (keys of TEMPLATES).
    cases_per_problem: tests per problem (the first is shown in the statement).
    """

    name = "code"
    rewards = "gdpo_nemo.rewards:code_task_rewards"
    evaluation = "runner"
    benchmarks = ("apps", "codecontests", "codeforces", "taco")
    default_sizes = {"train": 256, "validation": 32}
    templates: tuple = tuple(TEMPLATES)
    cases_per_problem: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        self._subset_option("templates", TEMPLATES)
        self._int_option("cases_per_problem", 1)

    def _draw(self, rng: random.Random) -> Draft:
        key = rng.choice(self.templates)
        template = TEMPLATES[key]
        params = template.params(rng)
        statement = template.statement.format(**params)
        cases = [template.case(rng, params) for _ in range(self.cases_per_problem)]
        tests = {"inputs": [stdin for stdin, _ in cases], "outputs": [stdout for _, stdout in cases]}
        example_in, example_out = cases[0]
        problem = f"{statement}\n\nExample input:\n{example_in}\nExample output:\n{example_out}"
        return Draft(
            key=statement, split_key=statement,
            messages=chat(prompts.CODE_SYSTEM_PROMPT, problem),
            ground_truth=tests, tests=tests,
            meta={"template": key, "params": params, "solution": template.solution.format(**params),
                  "steps": template.idea.format(**params)},
        )

    def _from_record(self, record: dict, where: str) -> Draft | None:
        if "ability" in record and record["ability"] != "code":
            return None
        messages = files.chat_column(record, "prompt", where)
        tests = parse_tests(files.column(record, "reward_model.ground_truth", where), where)
        meta = {}
        solution = record.get("solution")
        solutions = record.get("solutions")
        if isinstance(solutions, str):
            try:
                solutions = json.loads(solutions)
            except json.JSONDecodeError:
                solutions = None
        if not (isinstance(solution, str) and solution.strip()) and isinstance(solutions, list) and solutions:
            solution = solutions[0]
        if isinstance(solution, str) and solution.strip():
            meta["solution"] = solution
        return Draft(key="", split_key="", messages=messages, ground_truth=tests, tests=tests, meta=meta)

    def demonstration(self, example, rng: random.Random) -> str:
        """A one-line idea, then the reference program in one ```python block."""
        solution = example.meta.get("solution")
        if not solution:
            raise UserError(
                f"code example idx={example.idx} has no reference solution (meta['solution']);"
                " demonstrations need the offline set or a data file with a 'solution' or 'solutions' column"
            )
        idea = example.meta.get("steps") or "Read the input, compute the answer and print it."
        return f"{rng.choice(_LEADS)}{idea}\n\n```python\n{solution.strip()}\n```"
