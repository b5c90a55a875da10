"""The `gdpo-nemo` command.

Each subcommand lives in the module that owns its logic; this file only maps names to
modules. A command module exposes two functions:

    add_arguments(parser: argparse.ArgumentParser) -> None   # must be cheap: no torch import
    run(args: argparse.Namespace) -> int                      # exit code

Modules are imported only when their subcommand is chosen (or for `--help`), so
`gdpo-nemo score` does not pay for importing torch or transformers.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "advantage-groups": ("gdpo_nemo.collapse_cli", "count distinct advantage groups (paper Fig. 3)"),
    "collapse-figures": ("gdpo_nemo.collapse_figures", "regenerate paper Fig. 2 table and Fig. 3 plots"),
    "score": ("gdpo_nemo.rewards.score_cli", "score a JSONL file of completions with a task's rewards"),
    "train": ("gdpo_nemo.engines.local.cli", "train one run on the local engine from a run config"),
    "quickstart": ("gdpo_nemo.engines.local.quickstart", "GRPO vs GDPO on the embedded CPU default"),
    "config": ("gdpo_nemo.config_cli", "compose, show and list the paper's run configs"),
    "sweep": ("gdpo_nemo.sweep", "render, submit, watch and cancel a Slurm sweep"),
    "report": ("gdpo_nemo.report", "regenerate the paper's tables and figures from logs"),
    "eval": ("gdpo_nemo.eval_cli", "evaluate a checkpoint on BFCL-v3, math or code benchmarks"),
}


def _load(name: str):
    module_name, _ = COMMANDS[name]
    return importlib.import_module(module_name)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gdpo-nemo",
        description="GDPO vs GRPO on NeMo RL and on a CPU local engine.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or only == name:
            try:
                _load(name).add_arguments(p)
            except ModuleNotFoundError as err:
                if err.name and module_name.startswith(err.name):
                    p.description = f"{help_text} (not available in this build: {err})"
                    continue
                raise
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    only = chosen if chosen in COMMANDS else None
    parser = build_parser(only=only if only else "__none__")
    if only is None:
        parser.print_help()
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    args = parser.parse_args(argv)
    try:
        return int(_load(args.command).run(args) or 0)
    except ValueError as err:
        # Bad input (a key, a file, an option): one clear line, no traceback.
        print(f"gdpo-nemo {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
