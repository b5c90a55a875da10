"""The bfcl-eval side of `gdpo-nemo eval --task toolcall`: bfcl-eval's own generation loop
and evaluator, with our model handler; the model itself answers from the parent process.

Run by `gdpo_nemo.evaluation.bfcl` with the Python of the virtualenv that holds `bfcl-eval`
(its pinned dependencies do not fit the training environment, docs/eval.md)::

    <bfcl python> bfcl_worker.py --repo REPO --project-root DIR --categories simple multi_turn_base ...
        [--limit N] [--ids ID ...] --threads B --request-fd R --reply-fd W

1. Entries: bfcl-eval's shipped BFCL_v3 files, sorted by id; the first N of each category
   (``--limit``) or exactly the given ids; multi-turn entries get their function docs (and
   held-out functions) from bfcl-eval's `process_multi_turn_test_case`.
2. Generation: bfcl-eval's `multi_threaded_inference` runs each entry through our
   `GdpoNemoHandler` (its single-turn or multi-turn prompting loop: for multi-turn, the
   decoded calls are executed against bfcl-eval's simulated APIs and their results fed back,
   step by step, until the model makes no call, up to bfcl-eval's step limit). The handler's
   queries go to the parent over the fd pair as JSON lines; `ModelChannel` gathers the
   queries of the B entries in flight into one batch. bfcl-eval's `handler.write` writes
   ``DIR/result/gdpo-nemo/BFCL_v3_<category>_result.json``.
3. Scoring: bfcl-eval's `ast_file_runner`, `relevance_file_runner`, `multi_turn_runner` and
   `generate_leaderboard_csv` write ``DIR/score/gdpo-nemo/BFCL_v3_<category>_score.json`` and
   ``DIR/score/data_{overall,live,non_live,multi_turn}.csv``. When only some entries of a
   category ran, its prompts and answers are narrowed to those ids first (bfcl-eval's runners
   insist on whole files).

Protocol (one JSON object per line). Worker to parent: ``{"type": "start", "total": n}``,
``{"type": "generate", "prompts": [messages, ...], "finished": k}`` (the parent answers
``{"responses": [{"text", "num_tokens", "truncated", "prompt_tokens", "error"}, ...]}``),
``{"type": "done", "categories": {category: {"accuracy", "total_count"}}}``, or
``{"type": "error", "message": ...}`` for bad input (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from pathlib import Path

MODEL = "gdpo-nemo"
# A query batch is sent when every entry in flight waits on the model, or after this long
# (an entry between queries only executes calls against bfcl-eval's in-memory APIs).
BATCH_WAIT_S = 0.5


class ModelChannel:
    """Completions from the parent process, asked by many entry threads, sent in batches."""

    def __init__(self, send, receive, *, threads: int, total: int):
        self._send, self._receive = send, receive
        self._cond = threading.Condition()
        self._pending: list = []  # [(messages, slot)]
        self._first_pending_at = 0.0
        self.threads, self.total, self.finished = threads, total, 0
        self.broken: str | None = None

    def ask(self, messages: list) -> dict:
        """Called by an entry thread; blocks until the parent's reply for `messages`."""
        slot: dict = {}
        with self._cond:
            if self.broken:
                raise RuntimeError(self.broken)
            if not self._pending:
                self._first_pending_at = time.monotonic()
            self._pending.append((messages, slot))
            self._cond.notify_all()
            while "reply" not in slot:
                self._cond.wait()
        return slot["reply"]

    def entry_done(self) -> None:
        with self._cond:
            self.finished += 1
            self._cond.notify_all()

    def serve(self) -> None:
        """Main thread: forward batches of queries until every entry is done."""
        while True:
            with self._cond:
                while True:
                    in_flight = min(self.threads, self.total - self.finished)
                    if not self._pending and self.finished >= self.total:
                        return
                    waited = time.monotonic() - self._first_pending_at
                    if self._pending and (len(self._pending) >= in_flight or waited >= BATCH_WAIT_S):
                        break
                    self._cond.wait(timeout=BATCH_WAIT_S - waited if self._pending else None)
                batch, self._pending = self._pending, []
            try:
                self._send({"type": "generate", "prompts": [m for m, _ in batch], "finished": self.finished})
                replies = self._receive()["responses"]
                if len(replies) != len(batch):
                    raise RuntimeError(f"the model process answered {len(replies)} of {len(batch)} queries")
            except (OSError, ValueError, KeyError, RuntimeError) as err:
                replies = None
                self.broken = f"the model process is gone: {err}"
            with self._cond:
                for index, (_, slot) in enumerate(batch):
                    slot["reply"] = replies[index] if replies else {"error": self.broken}
                self._cond.notify_all()


def make_handler_class():
    """Our `BaseHandler` subclass (built here: bfcl_eval is importable only in its venv)."""
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    from bfcl_eval.model_handler.base_handler import BaseHandler
    from bfcl_eval.model_handler.model_style import ModelStyle
    from bfcl_eval.model_handler.utils import func_doc_language_specific_pre_processing

    from gdpo_nemo.evaluation import bfcl_format

    class GdpoNemoHandler(BaseHandler):
        """Prompting mode in our format (bfcl_format); the queries go to `self.channel`."""

        channel: ModelChannel | None = None

        def __init__(self, model_name, temperature) -> None:
            super().__init__(model_name, temperature)
            self.model_style = ModelStyle.OSSMODEL
            self.is_fc_model = False

        def decode_ast(self, result, language="Python"):
            return bfcl_format.decode_calls(result)

        def decode_execute(self, result):
            return bfcl_format.decode_execute(result)

        def _pre_query_processing_prompting(self, test_entry: dict) -> dict:
            category = test_entry["id"].rsplit("_", 1)[0]
            # bfcl-eval's own per-language hints and Java/JavaScript string types, as for every model
            functions = func_doc_language_specific_pre_processing(deepcopy(test_entry["function"]), category)
            held_out = {turn: func_doc_language_specific_pre_processing(deepcopy(docs), category)
                        for turn, docs in (test_entry.get("missed_function") or {}).items()}
            return {"functions": functions, "held_out": held_out, "entry_system": [], "records": [], "turn": 0}

        def _add_messages(self, data: dict, messages: list) -> dict:
            for message in messages:
                role, content = message.get("role"), str(message.get("content", ""))
                if role == "system":
                    data["entry_system"].append(content)
                elif role == "assistant":
                    data["records"].append(bfcl_format.assistant_record(content))
                else:
                    data["records"].append(bfcl_format.user_record(content))
            return data

        def add_first_turn_message_prompting(self, data: dict, first_turn_message: list) -> dict:
            return self._add_messages(data, first_turn_message)

        def _add_next_turn_user_message_prompting(self, data: dict, user_message: list) -> dict:
            data["turn"] += 1
            held = data["held_out"].get(str(data["turn"]))
            if held:  # the functions held out until now join the Available Tools
                data["functions"] = data["functions"] + held
                user_message = [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}]
            return self._add_messages(data, user_message)

        def _query_prompting(self, data: dict):
            messages = bfcl_format.prompt_messages(data["functions"], data["entry_system"], data["records"])
            data["inference_input_log"] = messages
            started = time.perf_counter()
            reply = self.channel.ask(messages)
            return reply, time.perf_counter() - started

        def _parse_query_response_prompting(self, api_response: dict) -> dict:
            if api_response.get("error"):  # bfcl-eval records the entry as an inference error
                raise RuntimeError(api_response["error"])
            return {"model_responses": api_response["text"], "input_token": api_response.get("prompt_tokens", 0),
                    "output_token": api_response.get("num_tokens", 0)}

        def _add_assistant_message_prompting(self, data: dict, model_response_data: dict) -> dict:
            data["records"].append(bfcl_format.assistant_record(model_response_data["model_responses"]))
            return data

        def _add_execution_results_prompting(self, data: dict, execution_results: list,
                                             model_response_data: dict) -> dict:
            data["records"].append(bfcl_format.observation_record(model_response_data["model_responses_decoded"],
                                                                  execution_results))
            return data

    return GdpoNemoHandler


def register(handler_class) -> None:
    """Our handler in bfcl-eval's model table (its evaluator looks models up there)."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING, ModelConfig

    MODEL_CONFIG_MAPPING[MODEL] = ModelConfig(
        model_name=MODEL, display_name=MODEL, url="https://arxiv.org/abs/2601.05242", org="gdpo_nemo",
        license="Apache-2.0", model_handler=handler_class, input_price=None, output_price=None, is_fc_model=False,
        underscore_to_dot=False)


class BadInput(ValueError):
    """An id or category bfcl-eval does not have."""


def select_entries(categories: list, limit: int | None, ids: list | None) -> tuple[list, list]:
    """(categories, entries): every entry of each category in id order, its first `limit`, or
    exactly `ids` (their categories then replace `categories`)."""
    from bfcl_eval.constants.category_mapping import TEST_FILE_MAPPING
    from bfcl_eval.constants.eval_config import PROMPT_PATH
    from bfcl_eval.utils import load_file

    if ids:
        wanted = list(dict.fromkeys(ids))
        categories = list(dict.fromkeys(i.rsplit("_", 1)[0] for i in wanted))
    unknown = [c for c in categories if c not in TEST_FILE_MAPPING]
    if unknown:
        raise BadInput(f"bfcl-eval has no BFCL v3 categories {unknown}; accepted: {', '.join(TEST_FILE_MAPPING)}")
    entries = []
    for category in categories:
        rows = load_file(PROMPT_PATH / TEST_FILE_MAPPING[category], sort_by_id=True)
        if ids:
            rows = [r for r in rows if r["id"] in wanted]
        elif limit:
            rows = rows[:limit]
        entries += rows
    if ids:
        missing = sorted(set(wanted) - {e["id"] for e in entries})
        if missing:
            raise BadInput(f"--ids: bfcl-eval's BFCL v3 data has no entries {missing} (ids look like simple_0,"
                           " live_simple_0-0-0, multi_turn_base_3)")
    return categories, entries


def generate(handler, entries: list, channel: ModelChannel, result_dir: Path) -> None:
    """bfcl-eval's inference on every entry (threads), then its result files."""
    from bfcl_eval._llm_response_generation import multi_threaded_inference, process_multi_turn_test_case
    from bfcl_eval.constants.category_mapping import VERSION_PREFIX
    from bfcl_eval.utils import sort_key

    entries = process_multi_turn_test_case(deepcopy(entries))
    for category in {e["id"].rsplit("_", 1)[0] for e in entries}:  # a fresh generation, not an append
        (result_dir / MODEL / f"{VERSION_PREFIX}_{category}_result.json").unlink(missing_ok=True)

    def one(entry: dict) -> dict:
        try:
            return multi_threaded_inference(handler, entry, include_input_log=False, exclude_state_log=False)
        finally:
            channel.entry_done()

    with ThreadPoolExecutor(max_workers=channel.threads) as pool:
        futures = [pool.submit(one, entry) for entry in entries]
        channel.serve()
        results = [f.result() for f in futures]
    if channel.broken:
        raise RuntimeError(channel.broken)
    handler.write(sorted(results, key=sort_key), result_dir=result_dir, update_mode=False)


def score(handler, categories: list, result_dir: Path, score_dir: Path) -> dict:
    """bfcl-eval's evaluator on the result files; {category: {"accuracy", "total_count"}}."""
    from bfcl_eval.constants.category_mapping import VERSION_PREFIX
    from bfcl_eval.constants.eval_config import POSSIBLE_ANSWER_PATH, PROMPT_PATH
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.eval_runner_helper import generate_leaderboard_csv, record_result
    from bfcl_eval.utils import (find_file_with_suffix, is_java, is_js, is_multi_turn, is_relevance_or_irrelevance,
                                 load_file)

    score_dir.mkdir(parents=True, exist_ok=True)
    table: dict = {}
    summary = {}
    for category in categories:
        results = load_file(result_dir / MODEL / f"{VERSION_PREFIX}_{category}_result.json", sort_by_id=True)
        ids = {row["id"] for row in results}
        prompts = [p for p in load_file(find_file_with_suffix(PROMPT_PATH, category), sort_by_id=True) if p["id"] in ids]
        if is_relevance_or_irrelevance(category):
            accuracy, total = eval_runner.relevance_file_runner(handler, results, prompts, MODEL, category, score_dir)
        else:
            answers = [a for a in load_file(find_file_with_suffix(POSSIBLE_ANSWER_PATH, category), sort_by_id=True)
                       if a["id"] in ids]
            if is_multi_turn(category):
                accuracy, total = eval_runner.multi_turn_runner(handler, results, prompts, answers, MODEL, category,
                                                                score_dir)
            else:
                language = "JavaScript" if is_js(category) else "Java" if is_java(category) else "Python"
                accuracy, total = eval_runner.ast_file_runner(handler, results, prompts, answers, language, category,
                                                              MODEL, score_dir)
        record_result(table, MODEL, category, accuracy, total)
        summary[category] = {"accuracy": accuracy, "total_count": total}
    # (no cost/latency columns: bfcl-eval's statistics need two or more timed entries)
    generate_leaderboard_csv(table, score_dir, [MODEL], categories)
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="the gdpo_nemo checkout (for bfcl_format)")
    parser.add_argument("--project-root", required=True)
    parser.add_argument("--categories", nargs="*", default=[])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--ids", nargs="*", default=None)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    args = parser.parse_args(argv)
    sys.path.insert(0, args.repo)
    requests = os.fdopen(args.request_fd, "w", buffering=1)
    replies = os.fdopen(args.reply_fd, "r")

    def send(message: dict) -> None:
        requests.write(json.dumps(message) + "\n")
        requests.flush()

    def receive() -> dict:
        line = replies.readline()
        if not line:
            raise OSError("its pipe closed")
        return json.loads(line)

    os.environ.setdefault("BFCL_PROJECT_ROOT", args.project_root)
    handler_class = make_handler_class()
    register(handler_class)
    root = Path(args.project_root)
    try:
        categories, entries = select_entries(args.categories, args.limit, args.ids)
    except BadInput as err:
        send({"type": "error", "message": str(err)})
        return 2
    send({"type": "start", "total": len(entries), "categories": categories})
    handler = handler_class(MODEL, temperature=0)
    handler.channel = ModelChannel(send, receive, threads=max(1, args.threads), total=len(entries))
    generate(handler, entries, handler.channel, root / "result")
    summary = score(handler, categories, root / "result", root / "score")
    send({"type": "done", "categories": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
