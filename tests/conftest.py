"""Shared test settings: quiet, offline, deterministic, and no state from outside the run."""

import os
import shutil
import tempfile

# No test may reach a hub or a W&B server: everything here is offline by construction.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The local engine's caches (the embedded model's conversion, warm-starts) live in a folder
# this test run makes and removes, never in ~/.cache: a conversion cached by an earlier
# install must not stand in for a missing install step (e.g. a package the conversion
# needs). Set unconditionally, so a user's GDPO_NEMO_CACHE is not read either. Subprocesses,
# Slurm jobs included, inherit it.
TEST_CACHE = tempfile.mkdtemp(prefix="gdpo-nemo-test-cache-")
os.environ["GDPO_NEMO_CACHE"] = TEST_CACHE


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TEST_CACHE, ignore_errors=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_ok: a requirement of tests/support/requirements.py that is met")
    config.addinivalue_line("markers", "requires_missing(message): a requirement missing under CI, or broken (fails)")


def pytest_runtest_setup(item):
    missing = item.get_closest_marker("requires_missing")
    if missing is not None:  # tests/support/requirements.py: missing under CI, or broken
        import pytest

        pytest.fail(missing.args[0], pytrace=False)
