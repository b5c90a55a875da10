"""The one error type of the run config."""

from __future__ import annotations

from typing import Sequence

from gdpo_nemo.errors import UserError

__all__ = ["ConfigError", "first_line"]


class ConfigError(UserError):
    """A run config, an experiment or a compose request is invalid.

    `problems` lists one line per problem, each starting with the key path at fault.
    """

    def __init__(self, problems: str | Sequence[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            message = f"{len(self.problems)} problems:\n  " + "\n  ".join(self.problems)
        super().__init__(message)


def first_line(err: Exception) -> str:
    """The first line of an exception's message (a library's multi-line error), or its type."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
