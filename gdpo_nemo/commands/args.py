"""What every command shares: one KEY=VALUE parser and one way to report an error.

Exit codes, the same for every command (`gdpo-nemo <command>` and the `python -m` entry
points): 0 success, ``FAILED`` (1) the command ran but its work failed (bad rows, no runs,
a failed job or benchmark), ``BAD_INPUT`` (2) the command could not run with what it was
given (a flag, a file, a key). Bad input is raised as `gdpo_nemo.errors.UserError` by the
command (or by the logic it calls) and printed by the entry point as one line, never a
traceback; any other exception is a failure, shown with its traceback (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from gdpo_nemo.errors import UserError

FAILED = 1
BAD_INPUT = 2
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


def parse_with_overrides(parser, argv: list[str]):
    """`parser.parse_args(argv)` for a command whose positionals are a file and then
    ``KEY=VALUE`` overrides (``args.overrides``): flags may come between the overrides, so
    the items argparse leaves over are more overrides; an unknown flag is still an error
    (argparse's own message, exit 2)."""
    args, extra = parser.parse_known_args(argv)
    unknown = [item for item in extra if item.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.overrides = [*args.overrides, *extra]
    return args


def key_value(
    item: str,
    *,
    flag: str,
    form: str = "KEY=VALUE",
    accepted_keys: Iterable[str] | None = None,
    example: str | None = None,
    empty_value: bool = False,
) -> tuple[str, str]:
    """Split one ``KEY=VALUE`` argument at its first ``=``: ``"a=b=c"`` -> ``("a", "b=c")``.

    ``flag`` names where the item came from in messages (``--only``, ``config show``);
    ``form`` is how that flag spells its pairs (``TAG=KEY``, ``key=value``); a key outside
    ``accepted_keys`` (when given) is refused; an empty value is refused unless
    ``empty_value`` (Hydra overrides may set ``key=``). ValueError names the flag, the item
    and what is accepted, e.g. ``--only 'seed' is not key=value (keys: run, task)``.
    """
    keys = list(accepted_keys) if accepted_keys is not None else None
    key, sep, value = item.partition("=")
    if not sep or not key or not (value or empty_value):
        hints = ([f"keys: {', '.join(keys)}"] if keys else []) + ([f"e.g. {example}"] if example else [])
        raise UserError(f"{flag} {item!r} is not {form}" + (f" ({'; '.join(hints)})" if hints else ""))
    if keys is not None and key not in keys:
        raise UserError(f"{flag} {item!r}: unknown key {key!r}; accepted keys are {', '.join(keys)}")
    return key, value


def report_error(prog: str, message: object, code: int = BAD_INPUT) -> int:
    """Print ``<prog>: error: <message>`` on stderr (argparse's own form for usage errors)
    and return ``code``, so a command ends with ``return report_error(...)``.

    ``prog`` is the command as typed: ``gdpo-nemo sweep``, ``python -m gdpo_nemo.commands.nemo_run``.
    """
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that ends each flag's line with its default, when it has one worth saying (not
    None, False or empty) and the help does not say it already; never for a flag that stores
    a constant (`sweep --submit`: the shared destination's default is not this flag's)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if "%(default)" in text or "default" in text.lower() or isinstance(action, argparse._StoreConstAction):
            return text
        if default is None or default is False or default is argparse.SUPPRESS or default in ([], ""):
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            return f"{text} (default: %(default)s)"
        return text
