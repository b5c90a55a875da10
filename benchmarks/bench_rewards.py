"""Reward throughput: tool-calling and GSM8K rewards on one paper step, and math-verify costs.

    PYTHONPATH=. python benchmarks/bench_rewards.py [--responses 2048] [--repeats 5] [--skip-math]

Prints, for 2,048 responses (512 prompts x G = 4, one tool-calling step of the paper):
the seconds to score the tool-calling set and the GSM8K set (median of --repeats runs), and
their total against the 0.5 s target. Then the math verifier's costs: worker start,
seconds per answer, an answer stopped by the in-worker timer, and a stuck worker replaced.
The responses are synthetic but shaped like real ones: exact, partially right, malformed.
Last, the code judge's cost on hostile output shapes (the harness's CPU, GIL held): 8 MiB of
newlines after a correct stdout answer against the same bytes as one line, and a returned list
of 4 million zeros, and one of 350,000 pairs, against json.loads of its text alone
(--skip-judging leaves it out).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import time

from gdpo_nemo.rewards import get_reward_set, toolcall
from gdpo_nemo.rewards.math_verifier import GRACE_S, MathVerifier

TOOLS = ["get_weather", "search_flights", "convert_currency", "book_table", "get_stock_price"]


def _tool_call(rng: random.Random) -> dict:
    params = {f"arg{i}": rng.choice([rng.randint(0, 500), rng.choice(["Paris", "EUR", "2025-01-01"]), True]) for i in range(rng.randint(1, 4))}
    return {"name": rng.choice(TOOLS), "parameters": params}


def _tool_text(calls: list[dict], think: str = "Let me call the tool.") -> str:
    return f"<think>{think}</think>\n<tool_call>\n" + "\n".join(json.dumps(c) for c in calls) + "\n</tool_call>"


def toolcall_batch(count: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """`count` completions in groups of 4 per ground truth, mixing the cases the reward sees."""
    completions, ground_truths = [], []
    while len(completions) < count:
        gt_calls = [_tool_call(rng) for _ in range(rng.randint(1, 3))]
        ground_truth = _tool_text(gt_calls)
        for _ in range(4):
            case = rng.random()
            if case < 0.3:
                text = _tool_text(gt_calls)
            elif case < 0.6:
                changed = [dict(c, parameters={**c["parameters"], "arg0": "wrong"}) for c in gt_calls]
                text = _tool_text(changed[: rng.randint(1, len(changed))])
            elif case < 0.8:
                text = "<think>hmm</think>\n<tool_call>\n{\"name\": \"get_weather\", \"parameters\": {\n</tool_call>"
            else:
                text = "<think>no tool</think>\n<response>I cannot help with that.</response>"
            completions.append(text)
            ground_truths.append(ground_truth)
    return completions[:count], ground_truths[:count]


def gsm8k_batch(count: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """`count` completions: well formed right/wrong answers, unformatted ones, negative numbers."""
    completions, ground_truths = [], []
    for _ in range(count):
        answer = rng.randint(0, 10_000)
        reasoning = " ".join(rng.choice(["add", "then", "multiply", "so", str(rng.randint(0, 99))]) for _ in range(60))
        case = rng.random()
        if case < 0.4:
            text = f"<think>{reasoning}</think>\n<answer>{answer}</answer>"
        elif case < 0.7:
            text = f"<think>{reasoning}</think>\n<answer>{answer + 1}</answer>"
        elif case < 0.9:
            text = f"{reasoning} The answer is {answer}."
        else:
            text = f"<think>{reasoning}</think>\n<answer>-{answer}</answer>"
        completions.append(text)
        ground_truths.append(f"{reasoning}\n#### {answer}")
    return completions, ground_truths


def time_scoring(task: str, completions: list[str], ground_truths: list[str], repeats: int) -> float:
    """Median seconds of `score_batch` over `repeats` runs, each with a cold ground-truth
    cache (a new step brings new prompts; within it the G rollouts share one ground truth)."""
    reward_set = get_reward_set(task)
    runs = []
    for _ in range(repeats):
        toolcall.ground_truth_calls.cache_clear()
        start = time.perf_counter()
        reward_set.score_batch(completions, ground_truths)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def _in_process_seconds(golds: list[str], predictions: list[str]) -> float:
    """math-verify called directly (what the worker does, minus the pipe round trip)."""
    import logging

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold_cache: dict[str, list] = {}  # the worker caches parsed ground truths too
    start = time.perf_counter()
    for gold, prediction in zip(golds, predictions):
        if gold not in gold_cache:
            gold_cache[gold] = parse("\\boxed{" + gold + "}", [LatexExtractionConfig()], parsing_timeout=None)
        parsed_gold = gold_cache[gold]
        parsed = parse(prediction, [ExprExtractionConfig(), LatexExtractionConfig()], parsing_timeout=None)
        verify(parsed_gold, parsed, 6, timeout_seconds=None)
    return time.perf_counter() - start


def bench_math(answers: int, rng: random.Random) -> None:
    start = time.perf_counter()
    verifier = MathVerifier(timeout_s=1.0)
    verifier.check("1", "\\boxed{1}")
    print(f"math-verify worker start (incl. first answer): {time.perf_counter() - start:.2f} s")
    golds, predictions = [], []
    for _ in range(answers):
        value = rng.randint(1, 99)
        golds.append(f"\\frac{{{value}}}{{2}}")
        shown = rng.choice([f"{value / 2}", f"\\frac{{{value}}}{{2}}", f"{value + 1}/2"])
        predictions.append(f"Step by step ... so the result is \\boxed{{{shown}}}.")
    start = time.perf_counter()
    verifier.check_batch(golds, predictions)
    elapsed = time.perf_counter() - start
    print(f"math correctness, 1 worker: {answers} answers in {elapsed:.2f} s = {1000 * elapsed / answers:.2f} ms per answer")
    print(f"same answers in this process, no time limit: {1000 * _in_process_seconds(golds, predictions) / answers:.2f} ms per answer")
    start = time.perf_counter()
    verifier.check("1", "\\boxed{9^{9^{9^{9^{9}}}}}")
    print(f"hanging answer stopped by the in-worker timer (limit 1.0 s): {time.perf_counter() - start:.2f} s")
    (worker,) = verifier._live
    os.kill(worker.process.pid, signal.SIGSTOP)
    start = time.perf_counter()
    verifier.check("1", "\\boxed{1}")
    verifier.check("1", "\\boxed{1}")
    print(
        f"stuck worker killed after limit + {GRACE_S:.0f} s grace, then replaced and answering: "
        f"{time.perf_counter() - start:.2f} s"
    )
    verifier.close()


def _best_of(repeats: int, call) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_judging(repeats: int) -> None:
    from gdpo_nemo.rewards.code import output_matches
    from gdpo_nemo.sandbox.values import decode_values

    size = 8 << 20
    flood, one_line = "3" + "\n" * size, "3\n" + " " * size
    flood_s = _best_of(repeats, lambda: output_matches(flood, ["3"]))
    line_s = _best_of(repeats, lambda: output_matches(one_line, ["3"]))
    print(f"judging a correct answer then 8 MiB of newlines: {1000 * flood_s:.1f} ms;"
          f" the same bytes as one line: {1000 * line_s:.1f} ms (ratio {flood_s / line_s:.1f})")
    shapes = {  # plain members (decoded at C speed), and as many small containers as fit in 8 MiB
        "4M zeros": ["list", [0] * (4 << 20)],
        "350k pairs (tuples)": ["list", [["tuple", [i, i]] for i in range(350_000)]],
    }
    for name, value in shapes.items():
        text = json.dumps([value], separators=(",", ":"))
        decode_s = _best_of(repeats, lambda: decode_values(text, 1))
        json_s = _best_of(repeats, lambda: json.loads(text))
        print(f"decoding a returned list of {name} ({len(text) >> 20} MiB): {decode_s:.3f} s;"
              f" json.loads of its text alone: {json_s:.3f} s (ratio {decode_s / json_s:.1f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=2048, help="responses per task (paper step: 512 x 4)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--math-answers", type=int, default=256)
    parser.add_argument("--skip-math", action="store_true")
    parser.add_argument("--skip-judging", action="store_true")
    args = parser.parse_args(argv)
    rng = random.Random(0)

    tool_seconds = time_scoring("toolcall", *toolcall_batch(args.responses, rng), args.repeats)
    gsm8k_seconds = time_scoring("gsm8k", *gsm8k_batch(args.responses, rng), args.repeats)
    total = tool_seconds + gsm8k_seconds
    print(f"toolcall rewards (format, correctness) on {args.responses} responses: {tool_seconds:.3f} s")
    print(f"gsm8k rewards (format, correctness, integer) on {args.responses} responses: {gsm8k_seconds:.3f} s")
    print(f"total: {total:.3f} s (target < 0.5 s: {'met' if total < 0.5 else 'NOT met'})")
    if not args.skip_math:
        bench_math(args.math_answers, rng)
    if not args.skip_judging:
        bench_judging(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
