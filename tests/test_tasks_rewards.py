"""Tasks meet the reward registry: every demonstration earns the top of every component.

This is the contract the supervised warm-start relies on: a demonstration is a completion
the task's own reward set pays in full, so training on it teaches the rewarded format.
"""

from __future__ import annotations

import json
import random

import pytest

from gdpo_nemo.rewards import get_reward_set
from gdpo_nemo.tasks import get_task


def _demonstration_scores(name: str, examples, **reward_options):
    task = get_task(name)
    rewards = get_reward_set(name, **reward_options)
    rng = random.Random(7)
    demos = [task.demonstration(example, rng) for example in examples]
    scores = rewards.score_batch(
        demos,
        [e.ground_truth for e in examples],
        tests=[e.tests for e in examples] if name == "code" else None,
    )
    return rewards, scores


def test_task_reward_set_is_the_registry_set_of_the_same_name():
    assert get_reward_set("gsm8k").names == ["format", "correctness", "integer"]
    assert get_reward_set("toolcall").names == ["format", "correctness"]
    math = get_reward_set("math", ["length", "correctness"], length_limit=300, conditioned_length=True)
    assert (math.task, math.names, math.length_limit, math.conditioned_length) == ("math", ["length", "correctness"], 300, True)


def test_toolcall_demonstrations_score_format_1_and_correctness_3():
    examples = get_task("toolcall").load("validation", limit=200)
    rewards, scores = _demonstration_scores("toolcall", examples)
    assert rewards.ranges == {"format": (0.0, 1.0), "correctness": (-3.0, 3.0)}
    assert scores["format"] == [1.0] * len(examples)
    for example, correctness in zip(examples, scores["correctness"]):
        # ToolRL scores 0 whatever the answer when the ground truth calls no tool, so 0 is
        # the most a no-call item can earn.
        best = 0.0 if example.meta["kind"] == "no_call" else 3.0
        assert correctness == best, example.ground_truth
    assert {e.meta["kind"] for e in examples} == {"1_call", "2_call", "no_call"}


def test_a_wrong_argument_value_costs_correctness():
    # The converse check: the reward set does tell a demonstration from a near miss.
    task = get_task("toolcall")
    example = next(e for e in task.load(limit=50) if e.meta["kind"] == "1_call")
    demo = task.demonstration(example, random.Random(0))
    call = example.meta["calls"][0]
    key = next(iter(call["parameters"]))
    wrong = dict(call, parameters=dict(call["parameters"], **{key: "something else"}))
    broken = demo.replace(json.dumps(call), json.dumps(wrong))
    score = get_reward_set(task.name).score(broken, example.ground_truth)
    assert score["format"] == 1.0 and score["correctness"] < 3.0


def test_gsm8k_demonstrations_score_1_on_format_correctness_and_integer():
    examples = get_task("gsm8k").load("validation", limit=150)
    _, scores = _demonstration_scores("gsm8k", examples)
    assert scores == {name: [1.0] * len(examples) for name in ("format", "correctness", "integer")}


def test_math_demonstrations_are_verified_short_and_well_formed():
    examples = get_task("math").load("validation", limit=60)
    _, scores = _demonstration_scores(
        "math", examples, components=["correctness", "length", "format"], length_limit=400, conditioned_length=True
    )
    assert scores == {name: [1.0] * len(examples) for name in ("correctness", "length", "format")}


def test_file_loaded_demonstrations_score_the_maximum_too(tmp_path):
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text(json.dumps({"question": "Bo has 2 cats and gets 5 more. How many?", "answer": "2+5=<<2+5=7>>7\n#### 7"}) + "\n")
    math = tmp_path / "math.jsonl"
    math.write_text(json.dumps({"problem": "What is $\\frac{1}{2}+\\frac{1}{3}$?", "answer": "\\frac{5}{6}"}) + "\n")
    _, scores = _demonstration_scores("gsm8k", get_task("gsm8k").load(source="file", path=gsm8k))
    assert scores == {"format": [1.0], "correctness": [1.0], "integer": [1.0]}
    _, scores = _demonstration_scores("math", get_task("math").load(source="file", path=math))
    assert scores == {"correctness": [1.0], "length": [1.0]}
    system = "**Available Tools**\n1. Name: get_time\n   Parameters: {\"zone\": {\"type\": \"string\"}}"
    truths = [
        '<think>x</think>\n<tool_call>\n{"name": "get_time", "parameters": {"zone": "UTC"}}\n</tool_call>\n<response>Checking.</response>',
        '<think>x</think>\n<tool_call>\n{"name": "get_time", "parameters": {"zone": "UTC"}}\n{"name": "get_time", "parameters": {"zone": "CET"}}\n</tool_call>',
    ]
    toolrl = tmp_path / "toolrl.jsonl"
    toolrl.write_text("".join(
        json.dumps({"prompt": [{"role": "system", "content": system}, {"role": "user", "content": "Time in UTC?"}],
                    "reward_model": {"ground_truth": truth}}) + "\n"
        for truth in truths
    ))
    _, scores = _demonstration_scores("toolcall", get_task("toolcall").load(source="file", path=toolrl))
    assert scores == {"format": [1.0, 1.0], "correctness": [3.0, 3.0]}


def test_code_demonstrations_pass_every_test_in_the_sandbox():
    examples = get_task("code", cases_per_problem=3).load("validation", limit=12)
    rewards, scores = _demonstration_scores("code", examples)
    assert scores == {name: [rewards.ranges[name][1]] * len(examples) for name in rewards.names}
