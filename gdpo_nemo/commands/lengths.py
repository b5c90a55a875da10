"""`gdpo-nemo lengths --config RUN.yaml [--batches N] [--limits L ...] [--json FILE] [key=value ...]`:
the response lengths of a run's first steps, to calibrate the length reward's limit l on the
starting policy (gdpo_nemo.engines.local.calibration). Prints a Markdown report: the length
histogram, each candidate l's exceed share and share of groups where the length reward
varies, each reward's mean, and the suggested l."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gdpo_nemo.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `lengths` flags (cheap: imports no torch)."""
    parser.add_argument("--config", required=True, help="run config YAML of the local engine (as `train` takes)")
    parser.add_argument("--batches", type=int, default=2,
                        help="how many of the run's first steps to sample (grpo.num_prompts_per_step prompts each)")
    parser.add_argument("--limits", type=int, nargs="*", default=None,
                        help="candidate limits l to tabulate (default: the 20th to 80th percentile, every 2 tokens)")
    parser.add_argument("--json", default=None, help="also write every length and reward to this JSON file")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides, e.g. grpo.seed=1 gdpo.length_limit=40")


def run(args: argparse.Namespace) -> int:
    """Sample, score and print the report; 0."""
    from gdpo_nemo.runs import cpu_pins

    cpu_pins.pin()  # before torch's first kernel, as the run it calibrates for
    from gdpo_nemo.engines.local.calibration import length_profile
    from gdpo_nemo.engines.local.config import load_run_config

    if args.batches < 1:
        raise UserError(f"--batches {args.batches}: expected an int >= 1")
    from gdpo_nemo.rewards import get_reward_set

    config, _ = load_run_config(args.config, args.overrides)
    gdpo = config["gdpo"]
    names = get_reward_set(gdpo["task"], gdpo["reward_components"], length_limit=gdpo["length_limit"],
                           conditioned_length=gdpo["conditioned_length"]).names
    if "length" not in names:
        raise UserError(f"gdpo.reward_components: the run's rewards are {names}, without 'length': calibrate a config"
                         " of a task with the length reward (task math, math_conditioned, code_2obj)")
    profile = length_profile(config, batches=args.batches, log=lambda message: print(message, flush=True))
    print(profile.report(args.limits))
    if args.json:
        Path(args.json).write_text(json.dumps(profile.to_json(), indent=1) + "\n")
        print(f"lengths and rewards: {args.json}")
    return 0
