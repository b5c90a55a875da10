"""The units of work one pytest-xdist worker takes whole (scripts/test.sh: -n 2 --dist loadgroup).

Tests that share one expensive thing run on one worker, in collection order: the NeMo RL tier
is an inner pytest run in .venv-nemo whose results its tests report (tests/nemo_tier/conftest.py),
and the Slurm tests share the one-node cluster's two CPUs. A group is named by its folder under
tests/. The tier's release tests (NeMo RL v0.7.0, another source on PYTHONPATH) are an inner run
of their own, so a group of their own: the two inner runs (about 9.5 and 6 minutes idle) take one worker
each instead of running one after the other on the same worker. Every other test runs with the
rest of its file: a file's module-scoped fixture (a smoke study, a regenerated run) is then made
once, not once on each worker that drew one of its tests.

Units are handed out longest first (`COST`, then xdist's own order: most tests first), so no
long unit starts last while the other worker runs out of work: xdist's order alone put the
regeneration run (4 tests, about 4 minutes) among the last units, and the suite ended with it
on one worker and the other idle.
"""

from __future__ import annotations

GROUPS = ("nemo_tier", "slurm")
APART = {"tests/nemo_tier/test_release.py": "nemo_tier_release"}
# Seconds of test time per unit, from the clean clone's idle run of 2026-12-02 (c4b2c52,
# `--durations=0`, two workers): the order units are handed out in, longest first. A rough
# figure is enough; a unit not named here goes after these, in xdist's own order.
COST = {
    "nemo_tier": 566, "slurm": 364, "nemo_tier_release": 357, "tests/test_regeneration.py": 209,
    "tests/test_eval_bfcl.py": 133, "tests/test_run_dir_safety.py": 123, "tests/test_local_engine.py": 86,
    "tests/test_gpu_study.py": 80, "tests/test_tension_study.py": 67, "tests/test_eval.py": 66,
    "tests/test_cpu_study.py": 57, "tests/test_estimator_properties.py": 53, "tests/test_provenance.py": 50,
}


def xdist_scope(nodeid: str) -> str:
    """The group of a test (its file in APART, else its folder in GROUPS), else its file."""
    path = nodeid.split("::")[0]
    if path in APART:
        return APART[path]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in GROUPS:
        return parts[1]
    return path


def longest_first(workqueue) -> None:
    """Reorder an xdist work queue (an OrderedDict of unit -> tests) in place: the units of
    `COST` first, longest first; the others after them, in the order they had."""
    for unit in sorted((u for u in workqueue if u in COST), key=COST.get):
        workqueue.move_to_end(unit, last=False)
