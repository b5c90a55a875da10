"""``python -m gdpo_nemo.commands.nemo_run --config CFG.yaml [--dry-run] [--run-grpo PATH]
[overrides]``: one NeMo RL GRPO run of a gdpo_nemo run config, in this process (what the
rendered Slurm jobs call, gdpo_nemo.engines.nemo.engine.NEMO_ENTRY_POINT; docs/nemo_rl.md).

This module is the command: its flags, error lines and exit codes; what runs is
gdpo_nemo.engines.nemo.run (load_nemo_config, find_run_grpo, launch)."""

from __future__ import annotations

import argparse
import sys

from gdpo_nemo.commands.args import BAD_INPUT, report_error
from gdpo_nemo.engines.nemo import run

PROG = "python -m gdpo_nemo.commands.nemo_run"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run NeMo RL's GRPO on a gdpo_nemo run config (GDPO estimators, multi-reward"
        " environments, per-component metrics). Extra arguments are Hydra overrides (key=value, +key=value).",
    )
    parser.add_argument("--config", required=True, help="run config YAML (gdpo-nemo config show ... -o FILE)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the resolved config; start nothing")
    parser.add_argument("--run-grpo", metavar="PATH",
                        help=f"NeMo RL's examples/run_grpo.py (default: ${run.RUN_GRPO_ENV}, ./examples, next to nemo_rl)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Validate, register, run NeMo RL's GRPO. Exit code 2 on a bad config or option."""
    args, overrides = _parser().parse_known_args(argv)
    unknown_flags = [o for o in overrides if o.startswith("-") and not o.startswith("~")]
    if unknown_flags:
        return report_error(PROG, f"unknown option(s) {unknown_flags}; overrides are key=value", BAD_INPUT)
    try:
        config = run.load_nemo_config(args.config, overrides)
        if args.dry_run:
            from gdpo_nemo.config import dump

            sys.stdout.write(dump(config))
            return 0
        script = run.find_run_grpo(args.run_grpo)
    except ValueError as err:  # ConfigError included
        return report_error(PROG, err, BAD_INPUT)
    run.launch(config, script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
