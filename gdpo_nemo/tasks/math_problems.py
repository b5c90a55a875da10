"""Competition-style math (the paper's math-with-length setting; rewards: correctness,
length).

Offline set: short arithmetic, number-theory and algebra questions written in LaTeX with
one exact answer that math-verify checks: products, linear equations, remainders, gcd,
lcm, fraction sums, powers, sums of ranges, square roots, percentages. The family is
drawn uniformly from `families`. The prompt is DeepSeek-R1's: a single user message (no
system prompt) ending in "Please reason step by step, and put your final answer within
\\boxed{}.". Ground truth: the answer in LaTeX (`42`, `-3`, `\\frac{7}{12}`).

Demonstrations follow R1's completion shape after its chat template opened `<think>`:
`reasoning\\n</think>\\n\\nThe answer is \\boxed{N}.`

Files: DeepScaleR-style jsonl/json/parquet with `problem` and `answer` (`solution`, when
present, feeds demonstrations).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

from gdpo_nemo.errors import UserError
from gdpo_nemo.tasks import files, prompts
from gdpo_nemo.tasks.base import Draft, Task, chat, register_task

_LEADS = ("", "Let me work through this. ", "I will compute it directly. ", "Step by step. ")


def latex_number(value) -> str:
    """An int or Fraction as LaTeX: `12`, `-3`, `\\frac{7}{12}`, `-\\frac{1}{2}`."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _product(rng):
    a, b = rng.randint(11, 99), rng.randint(11, 99)
    return f"Compute ${a} \\times {b}$.", a * b, f"{a} \\times {b} = {a * b}."


def _linear(rng):
    x, a, b = rng.randint(-20, 20), rng.randint(2, 9), rng.randint(-30, 30)
    c = a * x + b
    sign = "+" if b >= 0 else "-"
    move = f"Subtract {b} from" if b >= 0 else f"Add {-b} to"
    steps = f"{move} both sides: {a}x = {c - b}. Divide by {a}: x = {x}."
    return f"Solve for $x$: ${a}x {sign} {abs(b)} = {c}$.", x, steps


def _remainder(rng):
    n, m = rng.randint(100, 999), rng.randint(3, 13)
    q, r = divmod(n, m)
    return f"What is the remainder when ${n}$ is divided by ${m}$?", r, f"{n} = {m} \\cdot {q} + {r}, so the remainder is {r}."


def _gcd(rng):
    g = rng.randint(2, 15)
    a, b = g * rng.randint(2, 12), g * rng.randint(2, 12)
    d = math.gcd(a, b)
    return f"What is the greatest common divisor of ${a}$ and ${b}$?", d, f"Both {a} and {b} are multiples of {d}, and {a // d} and {b // d} share no factor, so the gcd is {d}."


def _lcm(rng):
    a, b = rng.randint(2, 30), rng.randint(2, 30)
    lcm = a * b // math.gcd(a, b)
    return f"What is the least common multiple of ${a}$ and ${b}$?", lcm, f"gcd({a}, {b}) = {math.gcd(a, b)}, so the lcm is {a} \\cdot {b} / {math.gcd(a, b)} = {lcm}."


def _fraction_sum(rng):
    p, q = rng.randint(1, 8), rng.randint(2, 9)
    r, s = rng.randint(1, 8), rng.randint(2, 9)
    total = Fraction(p, q) + Fraction(r, s)
    question = f"Compute $\\frac{{{p}}}{{{q}}} + \\frac{{{r}}}{{{s}}}$. Express your answer as a common fraction in lowest terms."
    steps = f"Over the common denominator {q * s}: ({p * s} + {r * q})/{q * s} = {latex_number(total)}."
    return question, total, steps


def _powers(rng):
    a, m, b, n = rng.randint(2, 5), rng.randint(2, 6), rng.randint(2, 5), rng.randint(2, 4)
    value = a**m - b**n
    return f"Evaluate ${a}^{{{m}}} - {b}^{{{n}}}$.", value, f"{a}^{m} = {a**m} and {b}^{n} = {b**n}, so the difference is {value}."


def _range_sum(rng):
    a = rng.randint(1, 20)
    b = a + rng.randint(5, 60)
    total = (a + b) * (b - a + 1) // 2
    return f"What is the sum of all integers from ${a}$ to ${b}$, inclusive?", total, f"There are {b - a + 1} terms averaging {Fraction(a + b, 2)}, so the sum is {total}."


def _square_root(rng):
    k = rng.randint(11, 40)
    return f"What is $\\sqrt{{{k * k}}}$?", k, f"{k}^2 = {k * k}, so the square root is {k}."


def _percent(rng):
    p = rng.choice([10, 20, 25, 40, 50, 75])
    n = 20 * rng.randint(1, 50)  # a multiple of 20, so every listed percentage gives an integer
    value = p * n // 100
    return f"What is ${p}\\%$ of ${n}$?", value, f"{p}\\% of {n} is {n} \\cdot {p}/100 = {value}."


FAMILIES = {
    "product": _product, "linear": _linear, "remainder": _remainder, "gcd": _gcd, "lcm": _lcm,
    "fraction_sum": _fraction_sum, "powers": _powers, "range_sum": _range_sum,
    "square_root": _square_root, "percent": _percent,
}


@register_task
@dataclass(frozen=True)
class MathTask(Task):
    """Short competition-style questions in DeepSeek-R1's prompt format.

    families: which question families the offline set draws from (keys of FAMILIES).
    """

    name = "math"
    rewards = "gdpo_nemo.rewards.math_rewards:TASK_REWARDS"
    evaluation = "runner"
    benchmarks = ("math", "aime", "amc", "minerva", "olympiad")
    families: tuple = tuple(FAMILIES)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._subset_option("families", FAMILIES)

    def _draw(self, rng: random.Random) -> Draft:
        family = rng.choice(self.families)
        question, answer, steps = FAMILIES[family](rng)
        return Draft(
            key=question, split_key=question,
            messages=chat(None, prompts.math_user_prompt(question)),
            ground_truth=latex_number(answer), tests=None,
            meta={"family": family, "steps": steps},
        )

    def _from_record(self, record: dict, where: str) -> Draft:
        problem = files.text_column(record, "problem", where)
        answer = files.column(record, "answer", where)
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or not str(answer).strip():
            raise UserError(f"{where}: column 'answer' must be a non-empty text or number, got {answer!r}")
        meta = {}
        solution = record.get("solution")
        if isinstance(solution, str) and solution.strip():
            meta["steps"] = solution.strip()
        return Draft(
            key="", split_key="", messages=chat(None, prompts.math_user_prompt(problem)),
            ground_truth=str(answer).strip(), tests=None, meta=meta,
        )

    def demonstration(self, example, rng: random.Random) -> str:
        """`reasoning\\n</think>\\n\\nThe answer is \\boxed{N}.` with N the ground truth."""
        steps = example.meta.get("steps") or "Working it out gives the result below."
        return f"{rng.choice(_LEADS)}{steps}\n</think>\n\nThe answer is \\boxed{{{example.ground_truth}}}."
