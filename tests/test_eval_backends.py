"""Generation backends of `gdpo-nemo eval`: token budgets at the model's context, chunking
by prompt length, and the HF backend on the tiny random model (which never writes its stop
token, so every response runs to its budget)."""

from __future__ import annotations

import json

import pytest

from gdpo_nemo.evaluation import datasets
from gdpo_nemo.evaluation.backends import HFBackend, length_chunks, make_backend, token_budgets
from gdpo_nemo.evaluation.runner import evaluate_math


def test_token_budgets_leave_the_room_the_context_has():
    # context 100: 40 + 32 fits; 80 leaves 20; 100 and 130 leave none
    assert token_budgets([40, 80, 100, 130], 32, 100) == [32, 20, 0, 0]
    assert token_budgets([40, 10_000], 32, None) == [32, 32]  # no known context: no cap


def test_length_chunks_group_similar_lengths_and_cap_padding():
    lengths = [441, 506, 474, 3127, 793, 469]
    # sorted by length; the 3,127-token prompt would pad five short ones by ~6x: its own chunk
    assert length_chunks(range(6), lengths, 16) == [[0, 5, 2, 1, 4], [3]]
    assert length_chunks(range(5), [10] * 5, 2) == [[0, 1], [2, 3], [4]]
    assert length_chunks([], [], 4) == []


@pytest.fixture(scope="module")
def tiny():
    return HFBackend("builtin:tiny", batch_size=8)


def test_the_tiny_model_runs_to_its_budget_and_a_prompt_at_the_context_gets_less_or_none(tiny):
    assert tiny.context_length == 4096  # byte-level tokens
    short = [{"role": "user", "content": "hi"}]
    near = [{"role": "user", "content": "x" * 4050}]  # leaves fewer than 40 positions
    over = [{"role": "user", "content": "y" * 5000}]
    (a,), (b,), (c,), (d,) = tiny.generate([short, near, over, short], samples=1, max_new_tokens=40, temperature=1.0,
                                           top_p=1.0)
    assert (a.num_tokens, a.truncated, a.error) == (40, True, None)  # never stops: cut at max_new_tokens
    assert b.num_tokens == 4096 - b.prompt_tokens < 40 and b.truncated and b.error is None
    assert (c.text, c.num_tokens, c.truncated) == ("", 0, True)
    assert c.error == f"prompt of {c.prompt_tokens} tokens leaves no room in the model's context of 4096 tokens"
    assert d.num_tokens == 40 and d.prompt_tokens == a.prompt_tokens


def test_samples_per_prompt_and_a_seeded_stream_per_call(tiny):
    prompts = [[{"role": "user", "content": "one"}], [{"role": "user", "content": "two"}]]
    first = tiny.generate(prompts, samples=3, max_new_tokens=6, temperature=1.0, top_p=0.95)
    again = tiny.generate(prompts, samples=3, max_new_tokens=6, temperature=1.0, top_p=0.95)
    assert [len(r) for r in first] == [3, 3]
    assert [[x.text for x in r] for r in first] == [[x.text for x in r] for r in again]
    assert len({x.text for x in first[0]}) > 1  # the samples of a question differ


def test_a_question_longer_than_the_context_is_a_failed_exceeding_response_not_a_crash(tiny, tmp_path):
    path = tmp_path / "math.jsonl"
    path.write_text(json.dumps({"problem": "What is 1+1? " + "Think. " * 700, "answer": "2"}) + "\n"
                    + json.dumps({"problem": "What is 2+2?", "answer": "4"}) + "\n")
    values, rows = evaluate_math(datasets.load_math("math", path), tiny, samples=2, max_new_tokens=8, temperature=1.0,
                                 top_p=1.0, exceed_limit=4)
    assert values == {"acc": 0.0, "exceed": 1.0}
    assert [("generation_error" in r) for r in rows] == [True, True, False, False]
    assert "leaves no room" in rows[0]["generation_error"]


def test_the_vllm_backend_says_it_needs_vllm_and_unknown_backends_are_named():
    try:
        import vllm  # noqa: F401
        pytest.skip("vllm is installed here: the adapter is exercised on a GPU machine")
    except ImportError:
        pass
    with pytest.raises(ValueError, match="--backend vllm needs the vllm package"):
        make_backend("vllm", "builtin:smollm2-135m")
    with pytest.raises(ValueError, match=r"--backend 'tgi' is not known; accepted: hf, vllm"):
        make_backend("tgi", "builtin:tiny")
