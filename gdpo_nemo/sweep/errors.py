"""The one error type of `gdpo-nemo sweep`: raised before anything is written or submitted."""

from __future__ import annotations

from gdpo_nemo.errors import UserError


class SweepError(UserError):
    """Bad input to a sweep (experiment, profile, filter, config, missing Slurm command).

    The message names the input at fault and what would be accepted.
    """


class SlurmError(RuntimeError):
    """A Slurm command failed (controller unreachable, rejected submission, ...)."""
