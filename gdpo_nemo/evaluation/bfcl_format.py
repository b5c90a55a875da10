"""BFCL entries in our tool-calling prompt, and our output in BFCL's decoded form.

Pure functions, standard library only: the BFCL checker process (`bfcl_check.py`, run in
the separate virtualenv that holds `bfcl-eval`) imports this module to decode responses.

Prompt: the BFCL entry's functions become the **Available Tools** of our tool-calling
system prompt (gdpo_nemo.tasks.prompts, the ToolRL layout the models were trained on), with
BFCL's schema type ``dict`` written as JSON Schema's ``object``; the entry's messages become
the dialogue records (a system message of the entry is put before our system prompt).

Decoding: the first ``<tool_call>`` block, one JSON object ``{"name", "parameters"}`` per
line, becomes BFCL's decoded AST ``[{name: {argument: value}}, ...]``; the executable form
is ``["name(argument=value, ...)"]`` with Python literals. A block that does not parse
raises ValueError (BFCL counts that as a decode failure); no block gives ``[]`` (no call).

Correct Format (the paper's Table 1 column): the share of responses whose format reward
(ToolRL's, gdpo_nemo.rewards.toolcall) is 1 for the shape the entry expects: a tool call
for the call categories, a plain response for the irrelevance categories.
"""

from __future__ import annotations

import json
import re
from collections import namedtuple

from gdpo_nemo.rewards.toolcall import format_reward

Tool = namedtuple("Tool", "name description schema")
IRRELEVANCE = re.compile(r"(^|_)irrelevance$")
_CALL_SHAPE = '<think> </think>\n<tool_call>\n{"name": "f", "parameters": {}}\n</tool_call>'
_RESPONSE_SHAPE = "<think> </think>\n<response> </response>"


def _json_schema(node):
    """BFCL's parameter schema with its non-standard type names made JSON Schema's."""
    if isinstance(node, dict):
        out = {k: _json_schema(v) for k, v in node.items()}
        if out.get("type") == "dict":
            out["type"] = "object"
        elif out.get("type") == "float":
            out["type"] = "number"
        elif out.get("type") == "tuple":
            out["type"] = "array"
        return out
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    return node


def entry_messages(entry: dict, turn: int = 0) -> list:
    """Chat messages of a single-turn BFCL entry (its first turn) in our prompt format."""
    from gdpo_nemo.tasks.prompts import toolcall_system_prompt  # not needed by the checker process

    functions = entry.get("function") or []
    tools = [Tool(f.get("name", ""), f.get("description", ""), _json_schema(f.get("parameters", {}))) for f in functions]
    system = toolcall_system_prompt(tools)
    records, extra_system = [], []
    for message in entry["question"][turn]:
        role, content = message.get("role"), str(message.get("content", ""))
        if role == "system":
            extra_system.append(content)
        else:
            records.append(f"<{role}> {content} </{role}>")
    if extra_system:
        system = "\n\n".join(extra_system + [system])
    return [{"role": "system", "content": system},
            {"role": "user", "content": "**Dialogue Records History**\n" + "\n".join(records)}]


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
            raise ValueError(f"tool call line {number} is not JSON: {err}") from None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(call.get("parameters", {}), dict):
            raise ValueError(f"tool call line {number} is not an object with a string name and a parameters object")
        calls.append({call["name"]: call.get("parameters", {})})
    return calls


def decode_execute(text: str) -> list:
    """Our response's tool calls as BFCL's executable strings ``["f(a=1, b='x')"]``."""
    return [f"{name}({', '.join(f'{k}={v!r}' for k, v in params.items())})"
            for call in decode_calls(text) for name, params in call.items()]


def correct_format(text: str, category: str) -> bool:
    """Our format reward is 1 for the shape the category expects (module docstring)."""
    shape = _RESPONSE_SHAPE if IRRELEVANCE.search(category) else _CALL_SHAPE
    return format_reward(text, shape) == 1.0
