"""BFCL entries in our tool-calling prompt, and our output in BFCL's decoded forms.

Pure functions, standard library only: the bfcl-eval process (`bfcl_worker.py`, run in the
separate virtualenv that holds `bfcl-eval`) renders prompts and decodes responses with
them, and the training environment reads them without bfcl-eval.

Prompt (the ToolRL layout the models are trained on, gdpo_nemo.tasks.prompts): the entry's
functions become the **Available Tools** of our system prompt (BFCL's schema types ``dict``,
``float``, ``tuple`` written as JSON Schema's ``object``, ``number``, ``array``); a system
message of the entry goes before it. The dialogue is one user message, ToolRL's
**Dialogue Records History**: ``<user> ... </user>`` for each user message, the model's
earlier outputs without their ``<think>`` part (``<tool_call>`` and ``<response>`` blocks),
and ``<obs> ... </obs>`` with the executed calls' results, one JSON line per call. Every
step of a multi-turn entry is asked as the next answer to that history.

Decoding: the first ``<tool_call>`` block, one JSON object ``{"name", "parameters"}`` per
line, becomes BFCL's decoded AST ``[{name: {argument: value}}, ...]`` (values as the model
wrote them; for Java and JavaScript bfcl-eval expects strings, as its prompt asks); the
executable form is ``["name(argument=value, ...)"]`` with Python literals. A block that does
not parse raises ValueError (bfcl-eval counts that as a decode failure); no block gives
``[]`` (no call: a multi-turn step with it ends the turn).

Correct Format (the paper's Table 1 column): the share of responses whose ToolRL format
reward (gdpo_nemo.rewards.toolcall) is 1 for the shape the entry expects: a tool call only
for the call categories, a response only for the irrelevance ones, and any of the three
shapes (call, response, both) for each step of a multi-turn entry, where the model decides
when the turn is done.
"""

from __future__ import annotations

import json
import re
from collections import namedtuple

from gdpo_nemo.errors import UserError
from gdpo_nemo.rewards.toolcall import format_reward

Tool = namedtuple("Tool", "name description schema")
IRRELEVANCE = re.compile(r"(^|_)irrelevance$")
_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)
_CALL_SHAPE = '<think> </think>\n<tool_call>\n{"name": "f", "parameters": {}}\n</tool_call>'
_RESPONSE_SHAPE = "<think> </think>\n<response> </response>"
_BOTH_SHAPE = _CALL_SHAPE + "\n<response> </response>"
_JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def _json_schema(node):
    """BFCL's parameter schema with its non-standard type names made JSON Schema's."""
    if isinstance(node, dict):
        out = {k: _json_schema(v) for k, v in node.items()}
        if isinstance(out.get("type"), str) and out["type"] in _JSON_SCHEMA_TYPES:
            out["type"] = _JSON_SCHEMA_TYPES[out["type"]]
        return out
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    return node


def system_prompt(functions: list, entry_system: list | tuple = ()) -> str:
    """Our tool-calling system prompt listing BFCL function docs `functions` as its tools,
    after the entry's own system messages `entry_system` (if any)."""
    from gdpo_nemo.tasks.prompts import toolcall_system_prompt

    tools = [Tool(f.get("name", ""), f.get("description", ""), _json_schema(f.get("parameters", {})))
             for f in functions]
    return "\n\n".join([*entry_system, toolcall_system_prompt(tools)])


def user_record(content: str) -> str:
    return f"<user> {content} </user>"


def assistant_record(text: str) -> str:
    """The model's earlier output as a history record: its ``<think>`` part dropped (the
    history keeps calls and replies, as ToolRL's), or the stripped text if nothing is left."""
    text = str(text).strip()
    kept = _THINK.sub("", text).strip()
    return kept or text


def observation_record(calls: list, results: list) -> str:
    """``<obs>`` with one JSON line ``{"call", "result"}`` per executed call."""
    lines = [json.dumps({"call": call, "result": result}, ensure_ascii=False) for call, result in zip(calls, results)]
    return "<obs>\n" + "\n".join(lines) + "\n</obs>"


def prompt_messages(functions: list, entry_system: list | tuple, records: list) -> list:
    """The chat messages of one query: our system prompt and the dialogue history."""
    return [{"role": "system", "content": system_prompt(functions, entry_system)},
            {"role": "user", "content": "**Dialogue Records History**\n" + "\n".join(records)}]


def entry_messages(entry: dict) -> list:
    """The chat messages of a single-turn BFCL entry (its first turn)."""
    entry_system, records = [], []
    for message in entry["question"][0]:
        role, content = message.get("role"), str(message.get("content", ""))
        if role == "system":
            entry_system.append(content)
        elif role == "assistant":
            records.append(assistant_record(content))
        else:
            records.append(user_record(content))
    return prompt_messages(entry.get("function") or [], entry_system, records)


def decode_calls(text: str) -> list:
    """Our response's tool calls as BFCL's decoded AST ``[{name: params}]`` (module docstring)."""
    if not isinstance(text, str) or "<tool_call>" not in text:
        return []
    block = text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0].strip()
    calls = []
    for number, line in enumerate(block.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            call = json.loads(line)
        except (ValueError, RecursionError) as err:
            raise UserError(f"tool call line {number} is not JSON: {err}") from None
        if (not isinstance(call, dict) or not isinstance(call.get("name"), str)
                or not isinstance(call.get("parameters", {}), dict)):
            raise UserError(f"tool call line {number} is not an object with a string name and a parameters object")
        calls.append({call["name"]: call.get("parameters", {})})
    return calls


def decode_execute(text: str) -> list:
    """Our response's tool calls as BFCL's executable strings ``["f(a=1, b='x')"]``."""
    return [f"{name}({', '.join(f'{k}={v!r}' for k, v in params.items())})"
            for call in decode_calls(text) for name, params in call.items()]


def correct_format(text, category: str) -> bool:
    """A single-turn response has the shape its category expects (module docstring)."""
    if not isinstance(text, str):
        return False
    shape = _RESPONSE_SHAPE if IRRELEVANCE.search(category) else _CALL_SHAPE
    return format_reward(text, shape) == 1.0


def step_format_ok(text) -> bool:
    """A multi-turn step is a well-formed call, response, or both."""
    return isinstance(text, str) and any(format_reward(text, shape) == 1.0
                                         for shape in (_CALL_SHAPE, _RESPONSE_SHAPE, _BOTH_SHAPE))


def format_flags(category: str, result) -> list:
    """One bool per response of a BFCL result entry's ``result``: a string for a single-turn
    entry, turns of step strings for a multi-turn one; anything else (bfcl-eval's record of an
    inference error) is one badly formatted response."""
    if category.startswith("multi_turn"):
        if not isinstance(result, list):
            return [False]
        return [step_format_ok(step) for turn in result if isinstance(turn, list) for step in turn]
    return [correct_format(result, category)]
