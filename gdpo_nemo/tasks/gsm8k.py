"""Arithmetic word problems (the paper's GSM8K quick check; rewards: format, correctness,
integer).

Offline set: one-step problems, easy enough for a 135M model after a warm-start: addition
and subtraction of numbers up to `max_operand`, multiplication of factors 2..12, the
result always a non-negative integer. The operation is drawn uniformly from `operations`.
Train and validation never share an arithmetic fact (the split key is the operation and
its operands), so validation measures arithmetic the model was not shown.

Ground truth: the answer as digits, the text after `####` of a GSM8K solution. The output
format (system prompt `prompts.GSM8K_SYSTEM_PROMPT`) is `<think>...</think>\\n<answer>N</answer>`.

Files: GSM8K jsonl (or parquet/json) with `question` and `answer` (a worked solution
ending in `#### N`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from gdpo_nemo.errors import UserError
from gdpo_nemo.tasks import files, prompts
from gdpo_nemo.tasks.base import Draft, Task, chat, register_task

NAMES = ["Mia", "Leo", "Ava", "Noah", "Zara", "Omar", "Lily", "Ravi", "Emma", "Kofi", "Sofia", "Ben", "Yuki", "Ana"]
ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books", "stamps", "shells", "cards", "buttons"]

# {a} and {b} are the operands in the order of the operation; {name} and {item} vary.
TEMPLATES = {
    "add": (
        "{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?",
        "A box holds {a} {item} and another box holds {b} {item}. How many {item} are in the two boxes together?",
        "{name} collected {a} {item} on Monday and {b} {item} on Tuesday. How many {item} did {name} collect in all?",
        "There are {a} {item} on the table. {name} puts {b} more {item} on it. How many {item} are on the table?",
    ),
    "subtract": (
        "{name} had {a} {item} and gave {b} of them away. How many {item} does {name} have left?",
        "A jar held {a} {item}. {name} took out {b} {item}. How many {item} are still in the jar?",
        "{name} needs {a} {item} and already has {b}. How many more {item} does {name} need?",
    ),
    "multiply": (
        "{name} buys {a} bags with {b} {item} in each bag. How many {item} does {name} buy?",
        "There are {a} shelves with {b} {item} on each shelf. How many {item} are there in total?",
        "{name} packs {b} {item} into each of {a} boxes. How many {item} does {name} pack?",
    ),
}
_SYMBOLS = {"add": "+", "subtract": "-", "multiply": "*"}
_LEADS = ("", "Let me compute. ", "I need to work out the total. ", "Step by step: ")
_ANNOTATION = re.compile(r"<<[^>]*>>")


def final_answer(solution: str) -> str | None:
    """The final answer of a GSM8K solution: the text after its last `####`, stripped
    (None without `####`). Commas are kept, as the authors' recipe keeps them."""
    if "####" not in solution:
        return None
    return solution.rsplit("####", 1)[1].strip()


@register_task
@dataclass(frozen=True)
class Gsm8kTask(Task):
    """One-step arithmetic word problems in the GSM8K answer format.

    operations: which of "add", "subtract", "multiply" the offline set uses.
    max_operand: largest operand of additions and subtractions (multiplication uses 2..12).
    """

    name = "gsm8k"
    rewards = "gdpo_nemo.rewards.gsm8k:TASK_REWARDS"
    operations: tuple = ("add", "subtract", "multiply")
    max_operand: int = 99

    def __post_init__(self) -> None:
        super().__post_init__()
        self._subset_option("operations", TEMPLATES)
        self._int_option("max_operand", 10)

    def _draw(self, rng: random.Random) -> Draft:
        op = rng.choice(self.operations)
        if op == "add":
            a, b = rng.randint(2, self.max_operand), rng.randint(2, self.max_operand)
            answer = a + b
        elif op == "subtract":
            a = rng.randint(10, self.max_operand)
            b = rng.randint(1, a - 1)
            answer = a - b
        else:
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            answer = a * b
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        question = rng.choice(TEMPLATES[op]).format(a=a, b=b, name=name, item=item)
        steps = f"{a} {_SYMBOLS[op]} {b} = {answer}, so the answer is {answer}."
        return Draft(
            key=question,
            split_key=f"{op}:{a}:{b}",
            messages=chat(prompts.GSM8K_SYSTEM_PROMPT, question),
            ground_truth=str(answer),
            tests=None,
            meta={"operation": op, "operands": [a, b], "steps": steps},
        )

    def _from_record(self, record: dict, where: str) -> Draft:
        question = files.text_column(record, "question", where)
        solution = files.text_column(record, "answer", where)
        answer = final_answer(solution)
        if answer is None:
            raise UserError(f"{where}: column 'answer' has no '#### <final answer>' line")
        worked = _ANNOTATION.sub("", solution.rsplit("####", 1)[0]).split()
        steps = f"{' '.join(worked)} So the answer is {answer}." if worked else f"The answer is {answer}."
        return Draft(
            key="", split_key="", messages=chat(prompts.GSM8K_SYSTEM_PROMPT, question),
            ground_truth=answer, tests=None, meta={"steps": steps},
        )

    def demonstration(self, example, rng: random.Random) -> str:
        """`<think>reasoning</think>\\n<answer>N</answer>` with N the ground truth."""
        steps = example.meta.get("steps") or f"The answer is {example.ground_truth}."
        return f"<think>{rng.choice(_LEADS)}{steps}</think>\n<answer>{example.ground_truth}</answer>"
