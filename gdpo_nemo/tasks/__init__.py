"""Tasks: a data loader, prompt template and named reward set for each paper experiment.

```python
from gdpo_nemo.tasks import get_task, TASKS

task = get_task(name, **options)   # name in TASKS: "toolcall", "gsm8k", "math", "code"
task.name
# its rewards: gdpo_nemo.rewards.get_reward_set(task.name, components=None, length_limit=None,
#   conditioned_length=False) -> RewardSet (the table `task.rewards` names; tasks never
#   import rewards: rewards reads this registry)
task.load(split="train", *, source="offline", path=None, limit=None, seed=0) -> list[Example]
    # source="offline": our generated set, deterministic for (seed, options); train and
    #   validation are disjoint for every pair of seeds; limit defaults to
    #   task.default_sizes[split].
    # source="file": a local file (or a folder of <split>.<ext> files):
    #   toolcall: ToolRL parquet/jsonl, columns prompt (system + user messages),
    #             reward_model.ground_truth
    #   gsm8k:    GSM8K jsonl, columns question, answer ("... #### N")
    #   math:     DeepScaleR-style jsonl/json/parquet, columns problem, answer
    #   code:     Eurus-2-RL-style parquet/jsonl, columns prompt,
    #             reward_model.ground_truth ({"inputs": [...], "outputs": [...]} or its JSON)
    #   A missing file or column raises ValueError naming the path and column.
task.demonstration(example, rng) -> str
    # a correct completion in the task's exact output format (supervised warm-start):
    #   toolcall "<think>...</think>\\n<tool_call>\\n{json per call}\\n</tool_call>"
    #            (or "<think>...</think>\\n<response>...</response>")
    #   gsm8k    "<think>...</think>\\n<answer>N</answer>"
    #   math     "...reasoning...\\n</think>\\n\\nThe answer is \\boxed{N}."
    #   code     "idea\\n\\n```python\\n<reference program>\\n```"
```

`Example(idx, messages, ground_truth, tests, meta)` is a frozen dataclass: `messages` the
chat prompt (optional system message, then the user message), `ground_truth` what the
reward set scores against (str, or the tests object for code), `tests` the tests object
for code (else None), `meta` provenance and generator details. Options per task and the
offline sets' contents are described in docs/tasks.md and in each task's module.
"""

from gdpo_nemo.tasks.base import TASKS, Example, PerTask, Task, get_task, register_task

# Importing the task modules registers them in TASKS.
# In this order (tool calling, GSM8K, math, code) every list of tasks shows them.
from gdpo_nemo.tasks import toolcall, gsm8k, math_problems, code_problems  # noqa: E402,F401  isort: skip

__all__ = ["TASKS", "Example", "PerTask", "Task", "get_task", "register_task"]
