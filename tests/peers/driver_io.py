"""Input and output of the peer drivers (run in the peers' venvs, not in .venv).

A driver reads ``{"cases": [case, ...]}`` from the JSON file argv[1] and writes
``{case["id"]: {"float32": [...], "float64": [...]}}`` to argv[2]: the peer's advantages
with the rewards given to it as float32 (as the peers get them) and as float64 (the same
code with the float32 rounding removed). A case::

    {"id": str, "estimator": "grpo" | "grpo_no_std" | "gdpo", "names": [K names],
     "rewards": [[K floats] x B] (NaN allowed for TRL), "group_ids": [B ints],
     "weights": [K floats], "options": {...peer options...},
     "token_lengths": [B ints] (verl only)}

Only the standard library and torch: it runs in every venv.
"""

from __future__ import annotations

import json
import sys


def read_cases() -> list[dict]:
    with open(sys.argv[1]) as f:
        return json.load(f)["cases"]


def write_results(results: dict) -> None:
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)
