"""The units of work one pytest-xdist worker takes whole (scripts/test.sh: -n 2 --dist loadgroup).

Tests that share one expensive thing run on one worker, in collection order: the NeMo RL tier
is an inner pytest run in .venv-nemo whose results its tests report (tests/nemo_tier/conftest.py),
and the Slurm tests share the one-node cluster's two CPUs. A group is named by its folder under
tests/. The tier's release tests (NeMo RL v0.7.0, another source on PYTHONPATH) are an inner run
of their own, so a group of their own: the two inner runs (about 12 and 7 minutes) take one worker
each instead of running one after the other on the same worker. Every other test runs with the
rest of its file: a file's module-scoped fixture (a smoke study, a regenerated run) is then made
once, not once on each worker that drew one of its tests.
"""

from __future__ import annotations

GROUPS = ("nemo_tier", "slurm")
APART = {"tests/nemo_tier/test_release.py": "nemo_tier_release"}


def xdist_scope(nodeid: str) -> str:
    """The group of a test (its file in APART, else its folder in GROUPS), else its file."""
    path = nodeid.split("::")[0]
    if path in APART:
        return APART[path]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in GROUPS:
        return parts[1]
    return path
