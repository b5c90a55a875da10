"""The one type of a user's mistake, at the bottom of the package (it imports nothing).

`UserError` is what our own checks raise for bad input: a config key, a file, an option, an
API argument. It is a ValueError, so `except ValueError` still catches it. The command line
(gdpo_nemo.cli) shows a UserError as one line and exits 2; any other exception, a ValueError
from a library or a bug of ours included, keeps its traceback and exits 1, so a bug never
reads as a user mistake.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(ValueError):
    """Bad input, found by one of our checks; the message names the input at fault and what
    would be accepted."""
