"""Tool calling (the paper's ToolRL setting; rewards: format, correctness).

Offline set: each prompt offers `tools_per_prompt` tools of our catalogue
(`tool_catalogue.CATALOGUE`) in ToolRL's system-prompt shape, and the user's request
states every argument value. Mix per item (options `two_call_share`, `no_call_share`):
by default 70% need one call, 20% two calls (a third of those call the same tool twice),
10% need no call (the ground truth is a `<response>` only). The ground truth is a
ToolRL-format completion: `<think>...</think>\\n<tool_call>\\n{json per line}\\n</tool_call>`,
or `<think>...</think>\\n<response>...</response>`; JSON lines are `json.dumps` of
`{"name", "parameters"}` with parameters in schema order.

Files: ToolRL parquet (or jsonl/json with the same columns): `prompt` (system + user
messages) and `reward_model.ground_truth`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from gdpo_nemo.errors import UserError
from gdpo_nemo.tasks import files, prompts
from gdpo_nemo.tasks.base import Draft, Task, chat, register_task
from gdpo_nemo.tasks.tool_catalogue import CATALOGUE, CHAT_REQUESTS

_CALL_THOUGHTS = (
    "The user asks for something {tools} can do, and gives every argument, so I call it with those values.",
    "This needs {tools}. I copy the values from the request into the parameters.",
    "I should use {tools} with the exact values the user stated.",
)
_CHAT_THOUGHTS = (
    "None of the tools fits this request, so I answer directly.",
    "No tool is needed here; I reply to the user myself.",
    "The listed tools do not help with this, so I respond in words.",
)


def _sentence_start(text: str) -> str:
    return text[0].lower() + text[1:] if text[:1].isupper() and not text[1:2].isupper() else text


@register_task
@dataclass(frozen=True)
class ToolCallTask(Task):
    """ToolRL-style single-turn tool calling.

    tools_per_prompt: tools listed in each system prompt (the needed ones plus distractors).
    two_call_share: share of offline items whose answer is two calls.
    no_call_share: share of offline items no listed tool serves (answer: a response only).
    """

    name = "toolcall"
    rewards = "gdpo_nemo.rewards.toolcall:TASK_REWARDS"
    evaluation = "bfcl"
    tools_per_prompt: int = 3
    two_call_share: float = 0.2
    no_call_share: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        self._int_option("tools_per_prompt", 2, len(CATALOGUE))
        for option in ("two_call_share", "no_call_share"):
            value = getattr(self, option)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise UserError(f"{option}={value!r} must be a number from 0 to 1")
        if self.two_call_share + self.no_call_share > 1:
            raise UserError(
                f"two_call_share + no_call_share = {self.two_call_share + self.no_call_share} must be at most 1"
            )

    def _draw(self, rng: random.Random) -> Draft:
        kind = rng.random()
        if kind < self.no_call_share:
            return self._draw_chat(rng)
        count = 2 if kind < self.no_call_share + self.two_call_share else 1
        if count == 2 and rng.random() < 1 / 3:
            needed = [rng.choice(CATALOGUE)] * 2
        else:
            needed = rng.sample(CATALOGUE, count)
        calls, requests = [], []
        for tool in needed:
            call, request = self._call_and_request(tool, rng)
            if call in calls:  # the same tool twice with the same arguments says nothing new
                call, request = self._call_and_request(tool, rng)
            calls.append(call)
            requests.append(request)
        request = requests[0] if count == 1 else f"{requests[0]} Also, {_sentence_start(requests[1])}"
        offered = self._offer(needed, rng)
        names = " and ".join(dict.fromkeys(tool.name for tool in needed))
        thought = rng.choice(_CALL_THOUGHTS).format(tools=names)
        body = "\n".join(json.dumps(call) for call in calls)
        ground_truth = f"<think>{thought}</think>\n<tool_call>\n{body}\n</tool_call>"
        return Draft(
            key=f"{request}|{[t.name for t in offered]}",
            split_key=request,
            messages=chat(prompts.toolcall_system_prompt(offered), prompts.toolcall_user_prompt(request)),
            ground_truth=ground_truth,
            tests=None,
            meta={"kind": f"{count}_call", "tools": [t.name for t in offered], "calls": calls},
        )

    def _draw_chat(self, rng: random.Random) -> Draft:
        request, reply = rng.choice(CHAT_REQUESTS)
        offered = self._offer([], rng)
        thought = rng.choice(_CHAT_THOUGHTS)
        tool_names = [t.name for t in offered]
        return Draft(
            key=f"{request}|{tool_names}",
            split_key=f"{request}|{tool_names}",
            messages=chat(prompts.toolcall_system_prompt(offered), prompts.toolcall_user_prompt(request)),
            ground_truth=f"<think>{thought}</think>\n<response>{reply}</response>",
            tests=None,
            meta={"kind": "no_call", "tools": tool_names, "calls": []},
        )

    def _offer(self, needed: list, rng: random.Random) -> list:
        distinct = list(dict.fromkeys(needed))
        others = [tool for tool in CATALOGUE if tool not in distinct]
        offered = distinct + rng.sample(others, self.tools_per_prompt - len(distinct))
        rng.shuffle(offered)
        return offered

    @staticmethod
    def _call_and_request(tool, rng: random.Random) -> tuple:
        values = tool.sample(rng)
        kept = [p for p in tool.properties if p in tool.required or rng.random() < 0.5]
        parameters = {p: values[p] for p in kept}
        request = rng.choice(tool.requests).format(**values)
        extras = [tool.optional_phrases[p].format(**values) for p in kept if p not in tool.required]
        request = " ".join([request, *extras])
        return {"name": tool.name, "parameters": parameters}, request

    def _from_record(self, record: dict, where: str) -> Draft:
        messages = files.chat_column(record, "prompt", where)
        ground_truth = files.text_column(record, "reward_model.ground_truth", where)
        if "</think>" not in ground_truth:
            raise UserError(f"{where}: column 'reward_model.ground_truth' has no '</think>' (ToolRL ground truths start with <think>...</think>)")
        return Draft(key="", split_key="", messages=messages, ground_truth=ground_truth, tests=None, meta={})

    def demonstration(self, example, rng: random.Random) -> str:
        """The ground truth's tool calls and/or response behind a freshly worded
        `<think>`: exactly the shape whose format regex the ground truth selects."""
        _, tail = example.ground_truth.strip().split("</think>", 1)
        if "<tool_call>" in tail:
            names = []
            block = tail.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]
            for line in block.strip().splitlines():
                try:
                    names.append(json.loads(line)["name"])
                except (ValueError, TypeError, KeyError):
                    names.append("the tool")
            thought = rng.choice(_CALL_THOUGHTS).format(tools=" and ".join(dict.fromkeys(map(str, names))))
        else:
            thought = rng.choice(_CHAT_THOUGHTS)
        return f"<think>{thought}</think>{tail}"
