"""Score BFCL-v3 results with `bfcl-eval`'s own evaluator, with our model handler.

Run by `gdpo_nemo.evaluation.bfcl` with the Python of the virtualenv that holds
`bfcl-eval` (its pinned dependencies, numpy 1.26 among them, do not fit the training
environment)::

    <bfcl python> bfcl_check.py --repo REPO --project-root DIR --categories simple live_simple ...

Reads ``DIR/result/gdpo-nemo/BFCL_v3_<category>_result.json`` (BFCL's result format: one
``{"id", "result"}`` per line, `result` our raw response text) and writes BFCL's score files
under ``DIR/score/``: ``gdpo-nemo/BFCL_v3_<category>_score.json`` and the leaderboard CSVs
``data_overall.csv``, ``data_live.csv``, ``data_non_live.csv``, ``data_multi_turn.csv``.

Our handler is a `BaseHandler` registered in bfcl-eval's model table under the name
``gdpo-nemo``: its `decode_ast` / `decode_execute` read our ``<tool_call>`` JSON lines
(gdpo_nemo.evaluation.bfcl_format). The checks themselves are bfcl-eval's:
`ast_file_runner` (and through it `ast_checker`), `relevance_file_runner`, and
`generate_leaderboard_csv`. When only some entries of a category were generated (a
sample), the category's prompts and possible answers are narrowed to those ids first: the
stock runner insists on whole categories.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MODEL = "gdpo-nemo"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True, help="the gdpo_nemo checkout (for bfcl_format)")
    parser.add_argument("--project-root", required=True)
    parser.add_argument("--categories", nargs="+", required=True)
    args = parser.parse_args(argv)
    sys.path.insert(0, args.repo)

    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING, ModelConfig
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.eval_runner_helper import generate_leaderboard_csv, record_result
    from bfcl_eval.model_handler.base_handler import BaseHandler
    from bfcl_eval.utils import find_file_with_suffix, is_relevance_or_irrelevance, load_file

    from gdpo_nemo.evaluation import bfcl_format

    class GdpoNemoHandler(BaseHandler):
        """Our prompt and output format (docs/eval.md); decoding only, generation is ours."""

        def __init__(self, model_name, temperature) -> None:
            super().__init__(model_name, temperature)
            self.is_fc_model = False

        def decode_ast(self, result, language="Python"):
            return bfcl_format.decode_calls(result)

        def decode_execute(self, result):
            return bfcl_format.decode_execute(result)

    MODEL_CONFIG_MAPPING[MODEL] = ModelConfig(
        model_name=MODEL, display_name=MODEL, url="https://github.com/", org="gdpo_nemo", license="Apache-2.0",
        model_handler=GdpoNemoHandler, input_price=None, output_price=None, is_fc_model=False, underscore_to_dot=False)

    root = Path(args.project_root)
    result_dir, score_dir = root / "result" / MODEL, root / "score"
    score_dir.mkdir(parents=True, exist_ok=True)
    from bfcl_eval.constants.eval_config import POSSIBLE_ANSWER_PATH, PROMPT_PATH

    handler = GdpoNemoHandler(MODEL, temperature=0)
    table: dict = {}
    summary = {}
    for category in args.categories:
        results = load_file(result_dir / f"BFCL_v3_{category}_result.json", sort_by_id=True)
        ids = {row["id"] for row in results}
        prompts = [p for p in load_file(find_file_with_suffix(PROMPT_PATH, category), sort_by_id=True) if p["id"] in ids]
        if is_relevance_or_irrelevance(category):
            accuracy, total = eval_runner.relevance_file_runner(handler, results, prompts, MODEL, category, score_dir)
        else:
            answers = [a for a in load_file(find_file_with_suffix(POSSIBLE_ANSWER_PATH, category), sort_by_id=True)
                       if a["id"] in ids]
            accuracy, total = eval_runner.ast_file_runner(handler, results, prompts, answers, "Python", category,
                                                          MODEL, score_dir)
        record_result(table, MODEL, category, accuracy, total)
        summary[category] = {"accuracy": accuracy, "total_count": total}
    generate_leaderboard_csv(table, score_dir, [MODEL], args.categories)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
