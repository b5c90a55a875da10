"""BFCL-v3: our prompt and decoding, and bfcl-eval's own evaluator on its shipped v3 data.

The pure parts (prompt rendering, decoding, Correct Format, the overall columns) run
everywhere. The rest runs bfcl-eval (its virtualenv, scripts/setup_bfcl.sh): its inference
loop with our handler and its evaluator, fed by a replay of hand-made responses (to check
the scores by hand), the tiny random model (a model that never stops, and prompts longer
than its context) and the embedded SmolLM2 (end to end through the CLI into the analysis).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo.evaluation import bfcl, bfcl_format
from gdpo_nemo.evaluation.backends import Response
from tests.support.requirements import broken, requires

REPO = Path(__file__).resolve().parents[1]


def _needs_bfcl():
    """Missing .venv-bfcl: skipped (failed under CI=true); present but without a working
    bfcl-eval: failed everywhere."""
    try:
        bfcl.bfcl_python()
    except ValueError:
        return requires(False, "bfcl-eval in .venv-bfcl (bash scripts/setup_bfcl.sh, or set GDPO_BFCL_PYTHON)")
    try:
        bfcl.data_dir()
    except (ValueError, OSError, subprocess.SubprocessError) as error:
        return broken("bfcl-eval in .venv-bfcl", str(error))
    return requires(True, "bfcl-eval")


needs_bfcl = _needs_bfcl()


def call(tool: str, **parameters) -> str:
    return json.dumps({"name": tool, "parameters": parameters})


def calls(*lines: str) -> str:
    return "<think> I call the tool. </think>\n<tool_call>\n" + "\n".join(lines) + "\n</tool_call>"


REFUSAL = "<think> No tool fits. </think>\n<response> I cannot do that with these tools. </response>"


class Replay:
    """Hand-made responses in place of a model: `answer(history)` gives the response to a
    query from the dialogue history (the user message); every query is kept."""

    def __init__(self, answer):
        self.answer, self.queries = answer, []

    def generate(self, prompts, *, samples, **_):
        assert samples == 1
        self.queries += prompts
        return [[Response(self.answer(m[1]["content"]), 9, False, 100)] for m in prompts]


def by_question(table: dict):
    """An answer function: the response of the first key found in the history."""
    def answer(history: str) -> str:
        return next(text for key, text in table.items() if key in history)
    return answer


# ---------------------------------------------------------------------------------------
# Our prompt, decoding and Correct Format (no bfcl-eval needed)
# ---------------------------------------------------------------------------------------


def test_a_single_turn_entry_becomes_our_system_prompt_and_dialogue_record():
    entry = {"id": "simple_0", "question": [[{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Area of a 10 by 5 triangle?"}]],
             "function": [{"name": "area", "description": "Triangle area.",
                           "parameters": {"type": "dict", "properties": {"base": {"type": "float"},
                                                                         "sides": {"type": "tuple"}}}}]}
    system, user = bfcl_format.entry_messages(entry)
    assert system["content"].startswith("Be brief.\n\n") and "1. Name: area" in system["content"]
    assert '"type": "object"' in system["content"] and '"type": "number"' in system["content"]
    assert '"type": "array"' in system["content"] and '"dict"' not in system["content"]
    assert user["content"] == "**Dialogue Records History**\n<user> Area of a 10 by 5 triangle? </user>"


def test_the_multi_turn_history_keeps_calls_replies_and_observations_without_thinking():
    output = calls(call("cd", folder="docs")) + "\n<response> Moved. </response>"
    assert bfcl_format.assistant_record(output) == '<tool_call>\n{"name": "cd", "parameters": {"folder": "docs"}}\n</tool_call>\n<response> Moved. </response>'
    assert bfcl_format.assistant_record("  no tags at all ") == "no tags at all"
    assert bfcl_format.observation_record(["cd(folder='docs')", "ls()"], ['{"cwd": "docs"}', "Error during execution: x"]) == (
        '<obs>\n{"call": "cd(folder=\'docs\')", "result": "{\\"cwd\\": \\"docs\\"}"}\n'
        '{"call": "ls()", "result": "Error during execution: x"}\n</obs>')
    system, user = bfcl_format.prompt_messages([], [], ["<user> a </user>", "<obs>\nx\n</obs>"])
    assert user["content"] == "**Dialogue Records History**\n<user> a </user>\n<obs>\nx\n</obs>"


def test_our_tool_calls_decode_to_bfcl_ast_and_executable_forms():
    text = calls(call("area", base=10, h="5", ok=True), call("g"))
    assert bfcl_format.decode_calls(text) == [{"area": {"base": 10, "h": "5", "ok": True}}, {"g": {}}]
    assert bfcl_format.decode_execute(text) == ["area(base=10, h='5', ok=True)", "g()"]
    assert bfcl_format.decode_calls(REFUSAL) == [] and bfcl_format.decode_execute("no tags") == []
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        bfcl_format.decode_calls("<tool_call>\narea(base=10)\n</tool_call>")
    with pytest.raises(ValueError, match="line 2 is not an object with a string name"):
        bfcl_format.decode_calls('<tool_call>\n{"name": "f", "parameters": {}}\n{"name": 3}\n</tool_call>')


def test_correct_format_expects_a_call_a_refusal_or_for_multi_turn_steps_either():
    call_text, both = calls(call("f")), calls(call("f")) + "\n<response> ok </response>"
    assert bfcl_format.format_flags("live_simple", call_text) == [True]
    assert bfcl_format.format_flags("live_simple", REFUSAL) == [False]
    assert bfcl_format.format_flags("irrelevance", REFUSAL) == [True]
    assert bfcl_format.format_flags("live_irrelevance", call_text) == [False]
    assert bfcl_format.format_flags("simple", both) == [False]  # a call category wants the call alone
    assert bfcl_format.format_flags("multi_turn_base", [[call_text, REFUSAL], [both, "chat"]]) == [True, True, True, False]
    # bfcl-eval records an inference error as a string in place of the turns: one bad response
    assert bfcl_format.format_flags("multi_turn_base", "Error during inference: boom") == [False]
    assert bfcl_format.format_flags("simple", None) == [False]


def test_overall_columns_and_avg_acc_are_read_from_bfcl_csvs(tmp_path):
    # bfcl-eval's CSV layout, with the paper's Table 1 GDPO 1.5B values
    (tmp_path / "data_live.csv").write_text("Rank,Model,Live Overall Acc\n1,gdpo-nemo,55.36%")
    (tmp_path / "data_non_live.csv").write_text("Rank,Model,Non_Live Overall Acc\n1,gdpo-nemo,40.58%")
    (tmp_path / "data_multi_turn.csv").write_text("Rank,Model,Multi Turn Overall Acc\n1,gdpo-nemo,2.50%")
    overall = bfcl.read_overall(tmp_path)
    assert overall["live"] == pytest.approx(0.5536) and overall["multi_turn"] == pytest.approx(0.025)
    assert overall["avg_acc"] == pytest.approx(0.3281, abs=5e-5)  # (55.36 + 40.58 + 2.50) / 3
    (tmp_path / "data_multi_turn.csv").write_text("Rank,Model,Multi Turn Overall Acc\n1,gdpo-nemo,N/A")
    overall = bfcl.read_overall(tmp_path)
    assert overall["multi_turn"] is None and overall["avg_acc"] is None


def test_categories_groups_and_ids_are_checked_by_name():
    assert bfcl.check_categories(["multi_turn", "simple"]) == list(bfcl.MULTI_TURN) + ["simple"]
    assert len(bfcl.check_categories(None)) == 17  # every BFCL v3 category bfcl-eval scores
    with pytest.raises(ValueError, match=r"unknown BFCL v3 categories \['sql'\].*groups all, non_live"):
        bfcl.check_categories(["sql"])
    with pytest.raises(ValueError, match=r"--ids \['rest_0'\]: not BFCL v3 entry ids"):
        bfcl.check_ids(["simple_0", "rest_0"])


# ---------------------------------------------------------------------------------------
# bfcl-eval's inference loop and evaluator with our handler
# ---------------------------------------------------------------------------------------

SINGLE_TURN = {
    "base of 10 units and height of 5": calls(call("calculate_triangle_area", base=10, height=5)),  # simple_0: right
    "factorial of 5": calls(call("math.factorial", number=6)),  # simple_1: wrong value
    "hypotenuse": "I would call math.hypot.",  # simple_2: no tags at all
    "three sides are 5 units": "<think> t </think>\n<tool_call>\ntriangle_properties.get(side1=5)\n</tool_call>",  # multiple_0: not JSON
    "base is 10 meters and height is 5 meters": REFUSAL,  # irrelevance_0: right
    "user with the ID 7890": calls(call("get_user_info", user_id=7890, special="black")),  # live_simple_0-0-0: right
    "latitude 37.4224764": calls(call("requests.get", url="https://maps.example")),  # live_irrelevance_0-0-0: wrong
    "mapController": calls(call("GeometryPresentation.createPresentation", controller="mapController",
                                parent="mapArea")),  # java_0: right (Java values as strings)
    "userInputField": calls(call("validateUserInput", inputField="userInputField", isComplete=True)),  # javascript_0: a JSON bool, not "true"
    "Taylor Swift and Maroon 5": calls(call("spotify.play", artist="Taylor Swift", duration=20),
                                       call("spotify.play", artist="Maroon 5", duration=15)),  # parallel_0: right
}
SINGLE_TURN_IDS = ["simple_0", "simple_1", "simple_2", "multiple_0", "irrelevance_0", "live_simple_0-0-0",
                   "live_irrelevance_0-0-0", "java_0", "javascript_0", "parallel_0"]


@needs_bfcl
def test_hand_made_single_turn_responses_are_scored_by_bfcl_eval_and_read_by_the_analysis(tmp_path):
    from gdpo_nemo.analysis.load import load_source

    run_dir = tmp_path / "toolcall__toolcall__qwen2.5-1.5b__gdpo__seed1"
    replay = Replay(by_question(SINGLE_TURN))
    bfcl.run_bfcl(replay, ids=SINGLE_TURN_IDS, out_dir=run_dir, run_id=None, step=5, threads=4, log=lambda *a: None)
    assert len(replay.queries) == 10
    payload = json.loads((run_dir / "eval" / "bfcl" / "step_5.json").read_text())
    accuracy = {c: (v["accuracy"], v["total_count"]) for c, v in payload["categories"].items()}
    assert accuracy == {"simple": (pytest.approx(1 / 3), 3), "multiple": (0.0, 1), "irrelevance": (1.0, 1),
                        "live_simple": (1.0, 1), "live_irrelevance": (0.0, 1), "java": (1.0, 1),
                        "javascript": (0.0, 1), "parallel": (1.0, 1)}
    # Correct Format: all but simple_2 (no tags) and the call on live_irrelevance
    assert payload["metrics"]["correct_format"] == pytest.approx(8 / 10)
    # Non-Live by bfcl-eval's rule: mean of simple (mean of Python 1/3, Java 1, JavaScript 0),
    # multiple 0, parallel 1, parallel_multiple (not run: 0), irrelevance 1
    assert payload["overall"]["non_live"] == pytest.approx(((1 / 3 + 1 + 0) / 3 + 0 + 1 + 0 + 1) / 5, abs=5e-5)
    assert payload["overall"]["avg_acc"] == pytest.approx(sum(payload["overall"][k] for k in ("live", "non_live", "multi_turn")) / 3)
    assert payload["complete"] is False and payload["ids"] == SINGLE_TURN_IDS
    score = run_dir / "eval" / "bfcl" / "step_5" / "score"
    js = [json.loads(line) for line in (score / "gdpo-nemo" / "BFCL_v3_javascript_score.json").read_text().splitlines()]
    assert js[0]["correct_count"] == 0 and js[1]["error_type"] == "type_error:js"
    names = set(load_source(tmp_path, cache_dir=None, progress=False).metrics["metric"].astype(str))
    assert {"eval/bfcl/correct_format", "eval/bfcl/live", "eval/bfcl/non_live", "eval/bfcl/multi_turn",
            "eval/bfcl/category/java"} <= names


# multi_turn_base_3's ground truth, turn by turn (bfcl-eval's possible_answer file)
BASE_3 = {"files that have 'test'": [call("find", path=".", name="test")],
          "'backup_tests' folder": [call("cd", folder="projects"), call("cd", folder="photography"),
                                    call("cp", source="test_image1.jpg", destination="backup_tests"),
                                    call("cp", source="test_document.txt", destination="backup_tests")]}


def multi_turn_answer(history: str) -> str:
    """multi_turn_base_3: the right calls each turn, then a reply; any other entry: a reply."""
    if "files that have 'test'" not in history:
        return "<think> t </think>\n<response> Done. </response>"
    last_user = history[history.rindex("<user>"):]
    if "</obs>" in last_user:  # the calls ran: end the turn
        return "<think> done </think>\n<response> Done. </response>"
    return calls(*next(lines for key, lines in BASE_3.items() if key in last_user))


@needs_bfcl
def test_multi_turn_entries_run_bfcl_evals_own_loop_and_simulated_apis_with_our_handler(tmp_path):
    replay = Replay(multi_turn_answer)
    bfcl.run_bfcl(replay, ids=["multi_turn_base_3", "multi_turn_base_1", "multi_turn_miss_func_0"], out_dir=tmp_path,
                  run_id="toolcall__toolcall__tiny__gdpo__seed0", step=2, log=lambda *a: None)
    payload = json.loads((tmp_path / "eval" / "bfcl" / "step_2.json").read_text())
    assert payload["categories"]["multi_turn_base"] == {"accuracy": 0.5, "total_count": 2}
    assert payload["categories"]["multi_turn_miss_func"] == {"accuracy": 0.0, "total_count": 1}
    assert payload["metrics"]["correct_format"] == 1.0  # every step is a well-formed call or reply
    results = {json.loads(line)["id"]: json.loads(line) for line in
               (tmp_path / "eval" / "bfcl" / "step_2" / "result" / "gdpo-nemo" / "BFCL_v3_multi_turn_base_result.json")
               .read_text().splitlines()}
    assert [len(turn) for turn in results["multi_turn_base_3"]["result"]] == [2, 2]  # call, then reply; per turn
    # the calls were executed against bfcl-eval's file system and the results fed back
    observed = [q[1]["content"] for q in replay.queries if "'backup_tests' folder" in q[1]["content"]][-1]
    assert "copied to 'backup_tests/test_document.txt'" in observed
    # miss_func: `sort` is held out of the tools until turn 3, which says so
    miss = [q for q in replay.queries if "Move 'final_report.pdf'" in q[1]["content"] and "<user>" in q[1]["content"]]
    offered = [("Name: sort" in q[0]["content"], "I have updated some more functions" in q[1]["content"]) for q in miss]
    assert offered == [(False, False)] * 3 + [(True, True)] * 2


@needs_bfcl
def test_a_model_that_keeps_calling_is_stopped_by_bfcl_evals_step_limit(tmp_path):
    replay = Replay(lambda history: calls(call("ls")))
    bfcl.run_bfcl(replay, ids=["multi_turn_base_3"], out_dir=tmp_path, run_id=None, step=0, log=lambda *a: None)
    payload = json.loads((tmp_path / "eval" / "bfcl" / "step_0.json").read_text())
    assert len(replay.queries) == 21  # bfcl-eval's MAXIMUM_STEP_LIMIT of 20, then a forced quit
    assert payload["categories"]["multi_turn_base"]["accuracy"] == 0.0
    score = (tmp_path / "eval" / "bfcl" / "step_0" / "score" / "gdpo-nemo" / "BFCL_v3_multi_turn_base_score.json")
    assert json.loads(score.read_text().splitlines()[1])["error"]["error_type"] == "multi_turn:force_terminated"


@needs_bfcl
def test_the_tiny_model_never_stops_and_a_prompt_over_its_context_fails_the_entry_not_the_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "eval", "--task", "toolcall", "--model", "builtin:tiny",
                           "--ids", "simple_0", "multi_turn_base_3", "--max-new-tokens", "12", "--out", tmp_path],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = tmp_path / "eval" / "bfcl" / "step_0" / "result" / "gdpo-nemo"
    simple = json.loads((result / "BFCL_v3_simple_result.json").read_text())
    assert simple["output_token_count"] == 12  # cut at --max-new-tokens: the tiny model has no stop
    multi = json.loads((result / "BFCL_v3_multi_turn_base_result.json").read_text())
    # multi_turn_base_3's tools alone are ~14,000 bytes: over the byte-level model's 4,096 positions
    assert multi["result"].startswith("Error during inference:") and "leaves no room" in multi["result"]
    payload = json.loads((tmp_path / "eval" / "bfcl" / "step_0.json").read_text())
    assert payload["categories"] == {"simple": {"accuracy": 0.0, "total_count": 1},
                                     "multi_turn_base": {"accuracy": 0.0, "total_count": 1}}


@needs_bfcl
def test_bad_ids_and_a_broken_bfcl_environment_are_reported(tmp_path, monkeypatch):
    project = tmp_path / "eval" / "bfcl" / "step_0"
    with pytest.raises(ValueError, match=r"no entries \['simple_99999'\]"):
        bfcl.run_bfcl(Replay(lambda h: REFUSAL), ids=["simple_99999"], out_dir=tmp_path, run_id=None, step=0)
    assert not project.exists()  # nothing evaluated, nothing for the analysis to find
    monkeypatch.setenv("GDPO_BFCL_PYTHON", sys.executable)  # the training env: no bfcl_eval there
    with pytest.raises(RuntimeError, match=r"(?s)worker ended \(exit 1\).*No module named 'bfcl_eval'"):
        bfcl.run_bfcl(Replay(lambda h: REFUSAL), ids=["simple_0"], out_dir=tmp_path, run_id=None, step=0)
    assert sorted(p.name for p in project.iterdir()) == ["worker.log"]  # kept for the post-mortem


@needs_bfcl
@pytest.mark.slow
def test_bfcl_end_to_end_on_the_embedded_model_through_the_cli_into_the_analysis(tmp_path):
    from gdpo_nemo.analysis.load import load_source

    ids = ["simple_0", "multiple_0", "live_simple_0-0-0", "irrelevance_0", "java_0", "multi_turn_base_3"]
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "eval", "--task", "toolcall", "--model",
                           "builtin:smollm2-135m", "--ids", *ids, "--max-new-tokens", "48", "--out", tmp_path,
                           "--run-id", "toolcall__toolcall__smollm2-135m__base__seed0"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Avg Acc" in done.stdout and "Correct Format" in done.stdout
    payload = json.loads((tmp_path / "eval" / "bfcl" / "step_0.json").read_text())
    assert set(payload["categories"]) == {"simple", "multiple", "live_simple", "irrelevance", "java", "multi_turn_base"}
    assert all(v["total_count"] == 1 for v in payload["categories"].values())
    multi = json.loads((tmp_path / "eval" / "bfcl" / "step_0" / "result" / "gdpo-nemo"
                        / "BFCL_v3_multi_turn_base_result.json").read_text())
    assert len(multi["result"]) == 2  # both turns of multi_turn_base_3 were asked
    frame = load_source(tmp_path, cache_dir=None, progress=False).metrics
    rows = frame[frame["metric"].astype(str).str.startswith("eval/bfcl/")]
    assert set(rows["run_id"].astype(str)) == {"toolcall__toolcall__smollm2-135m__base__seed0"}
    assert {"eval/bfcl/live", "eval/bfcl/non_live", "eval/bfcl/multi_turn", "eval/bfcl/correct_format"} <= set(
        rows["metric"].astype(str))
