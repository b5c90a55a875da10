"""The prompt texts of the offline tasks, written for this project.

The shapes follow the paper's setups (docs/tasks.md; the answer formats the rewards check are
in docs/rewards.md): ToolRL's system
prompt sections (**Available Tools** with JSON parameter schemas, **Output Format**) and
its `<think>` / `<tool_call>` / `<response>` tags with one JSON object per call line; the
GSM8K recipe's `<think>` / `<answer>` tags; DeepSeek-R1's "reason step by step ... within
\\boxed{}" user instruction for math; a fenced ```python program reading stdin for code.
"""

from __future__ import annotations

import json

TOOLCALL_SYSTEM_INTRO = (
    "You are an assistant that carries out the user's request by calling tools when a tool"
    " can do it, and by answering in your own words when none can."
)

TOOLCALL_OUTPUT_FORMAT = """**Output Format**
```plaintext
<think> your reasoning about the request </think>
<tool_call>
{"name": "tool name", "parameters": {"argument name": "argument value"}}
{"name": "another tool name", "parameters": {"argument name": "argument value"}}
</tool_call>
<response> your reply to the user </response>
```

**Rules**
1. Always begin with <think> ... </think>.
2. To call tools, write <tool_call> on its own line, then one JSON object per line, one line for each call, then </tool_call>. Each object has exactly two keys: "name" (a tool listed above) and "parameters" (an object with the arguments).
3. Write <response> ... </response> when you answer the user directly. You may write <tool_call>, <response> or both, each at most once, in that order.
4. Copy argument values exactly as the user gives them: numbers as JSON numbers, everything else as JSON strings. Leave out optional arguments the user did not mention."""


def toolcall_system_prompt(tools) -> str:
    """The system prompt of one tool-calling example: the intro, the numbered
    **Available Tools** (name, description, JSON schema of the parameters) and the output
    format. `tools`: a sequence of catalogue tools (objects with `name`, `description`,
    `schema`)."""
    lines = [TOOLCALL_SYSTEM_INTRO, "", "**Available Tools**", "You can call these tools:"]
    for number, tool in enumerate(tools, start=1):
        lines.append(f"{number}. Name: {tool.name}")
        lines.append(f"   Description: {tool.description}")
        lines.append(f"   Parameters: {json.dumps(tool.schema)}")
    lines += ["", TOOLCALL_OUTPUT_FORMAT]
    return "\n".join(lines)


def toolcall_user_prompt(request: str) -> str:
    """The user message of one tool-calling example: the dialogue so far, which in the
    single-turn offline set is the user's one request (ToolRL's `<user>` record shape)."""
    return f"**Dialogue Records History**\n<user> {request} </user>"


GSM8K_SYSTEM_PROMPT = """Solve the arithmetic word problem. Reason about it first, then state the final answer as a plain whole number. Write exactly this shape and nothing else:
<think> your reasoning </think>
<answer> the final number </answer>"""

# DeepSeek-R1's recommended math instruction, appended to the problem; R1 models take no
# system prompt.
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def math_user_prompt(problem: str) -> str:
    """The user message of one math example: the problem, then the R1 instruction."""
    return f"{problem.strip()}\n{MATH_INSTRUCTION}"


CODE_SYSTEM_PROMPT = """You are a careful Python programmer. Solve the task with a complete Python 3 program that reads its input from standard input and prints the answer to standard output, printing nothing else. Explain your idea in a sentence or two, then give the whole program in a single fenced block:
```python
# your program
```"""
