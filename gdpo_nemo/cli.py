"""The `gdpo-nemo` command.

Each subcommand is a module of gdpo_nemo.commands (its flags and the call into the module
that owns the work); this file only maps names to modules. A command module exposes two
functions:

    add_arguments(parser: argparse.ArgumentParser) -> None   # must be cheap: no torch import
    run(args: argparse.Namespace) -> int                      # exit code

Modules are imported only when their subcommand is chosen (or for `--help`), so
`gdpo-nemo score` does not pay for importing torch or transformers. A UserError out of a
command (gdpo_nemo.errors: what our own checks raise) is bad input: one line
`gdpo-nemo <command>: error: <message>` on stderr, exit 2 (gdpo_nemo.commands.args). Any
other exception, a ValueError from a library or a bug included, keeps its traceback, then one
line saying it is not the input's fault, exit 1.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import traceback

from gdpo_nemo.commands.args import (
    BAD_INPUT,
    FAILED,
    INTERRUPTED,
    DefaultsHelpFormatter,
    parse_with_overrides,
    report_error,
)
from gdpo_nemo.errors import UserError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "advantage-groups": ("gdpo_nemo.commands.advantage_groups", "count distinct advantage groups (paper Fig. 3)"),
    "collapse-figures": ("gdpo_nemo.commands.collapse_figures", "regenerate paper Fig. 2 table and Fig. 3 plots"),
    "score": ("gdpo_nemo.commands.score", "score a JSONL file of completions with a task's rewards"),
    "train": ("gdpo_nemo.commands.train", "train one run on the local engine from a run config"),
    "lengths": ("gdpo_nemo.commands.lengths", "response lengths of a run's first steps, to calibrate l"),
    "quickstart": ("gdpo_nemo.commands.quickstart", "GRPO vs GDPO on the embedded CPU default"),
    "config": ("gdpo_nemo.commands.config", "compose, show and list the paper's run configs"),
    "sweep": ("gdpo_nemo.commands.sweep", "render, submit, watch and cancel a Slurm sweep"),
    "report": ("gdpo_nemo.commands.report", "regenerate the paper's tables and figures from logs"),
    "notebooks": ("gdpo_nemo.commands.notebooks", "execute the analysis notebooks on a source, headless"),
    "nemo-smoke": ("gdpo_nemo.commands.nemo_smoke", "run a NeMo RL run config through NeMo RL's grpo_train on this CPU"),
    "eval": ("gdpo_nemo.commands.eval", "evaluate a checkpoint on BFCL-v3, math or code benchmarks"),
}


def _load(name: str):
    """The command module of subcommand `name` (imported now)."""
    module_name, _ = COMMANDS[name]
    return importlib.import_module(module_name)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The `gdpo-nemo` parser; only the subcommand `only` (every one when None) gets its
    flags, so only its module is imported."""
    from gdpo_nemo import __version__

    parser = argparse.ArgumentParser(
        prog="gdpo-nemo",
        description="GDPO vs GRPO on NeMo RL and on a CPU local engine.",
    )
    parser.add_argument("--version", action="version", version=f"gdpo-nemo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        # Every --help shows each flag's default.
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=DefaultsHelpFormatter)
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
    """Run `gdpo-nemo ARGV`; the exit code (gdpo_nemo.commands.args: 0, 1 failed, 2 bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    only = chosen if chosen in COMMANDS else None
    parser = build_parser(only=only if only else "__none__")
    if only is None:
        if chosen is not None:
            # Not a command: say so in one line, with the nearest commands.
            near = difflib.get_close_matches(chosen, list(COMMANDS), n=2, cutoff=0.5)
            hint = f" (did you mean {' or '.join(near)}?)" if near else ""
            return report_error("gdpo-nemo", f"invalid choice {chosen!r}{hint}; commands: {', '.join(COMMANDS)}", BAD_INPUT)
        if "--version" in argv:
            parser.parse_args(["--version"])
        parser.print_help()
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    # A command taking a file, then overrides (nemo-smoke), takes its flags among them.
    intermixed = getattr(_load(only), "INTERMIXED_ARGS", False)
    args = parse_with_overrides(parser, argv) if intermixed else parser.parse_args(argv)
    try:
        return int(_load(args.command).run(args) or 0)
    except UserError as err:
        # Bad input (a key, a file, an option): one clear line, no traceback.
        return report_error(f"gdpo-nemo {args.command}", err, BAD_INPUT)
    except (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError) as err:
        # A path that cannot be read or written (an output folder on a read-only disk, a
        # missing input): the path and why, in one line.
        if err.filename is None:
            raise
        why = err.strerror or type(err).__name__
        return report_error(f"gdpo-nemo {args.command}", f"{err.filename}: {why} (check the path, or pick another)",
                            BAD_INPUT)
    except BrokenPipeError:
        # The reader of our output went away (`gdpo-nemo config list | head`): stop quietly,
        # as other command-line tools do, instead of a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        # What is on disk is whole (metrics lines are flushed one by one, checkpoints are
        # written atomically); say how to go on instead of printing a traceback.
        hint = getattr(_load(args.command), "resume_hint", lambda _: None)(args)
        report_error(f"gdpo-nemo {args.command}", "interrupted" + (f"; to continue: {hint}" if hint else ""), INTERRUPTED)
        return INTERRUPTED
    except Exception as err:  # not the input's fault: the traceback, then what it was
        traceback.print_exc()
        summary = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return report_error(f"gdpo-nemo {args.command}",
                            f"internal error ({type(err).__name__}{': ' + summary if summary else ''}); the traceback"
                            " above says where. Not a problem with your input: please report it", FAILED)


if __name__ == "__main__":
    sys.exit(main())
