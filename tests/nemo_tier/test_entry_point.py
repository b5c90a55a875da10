"""`python -m gdpo_nemo.commands.nemo_run` through NeMo RL's real examples/run_grpo.py.

The entry point validates the config, writes the run dir, registers our plugin and runs
run_grpo.py (found next to the installed nemo_rl, as in a NeMo RL checkout): NeMo RL then
loads the config, starts a local Ray, builds the tokenizer, our datasets and environment
actors, and its setup(): logger, checkpointer, dataloaders, then the RayVirtualCluster for
the policy, which asks Ray for a GPU. On this CPU machine that request is where it stops.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from gdpo_nemo import config as cc
from support import small_config


@pytest.fixture(scope="module")
def launched(tiny_tokenizer_dir, tmp_path_factory):
    """One launch of the entry point on a gsm8k GDPO config: (process, run dir)."""
    if tiny_tokenizer_dir is None:
        return None
    work = tmp_path_factory.mktemp("launch")
    run_dir = work / "runs" / "gsm8k-gdpo"
    config = small_config("gsm8k", tiny_tokenizer_dir, run_dir)
    path = work / "run.yaml"
    path.write_text(cc.dump(config))
    ray_tmp = tempfile.mkdtemp(prefix="gr", dir="/tmp")  # its own Ray: init_ray attaches to any it finds
    # NeMo RL retries an unplaceable GPU request 6 times with back-off (~1 min); once says it
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "1"}
    env.pop("GDPO_NEMO_RUN_GRPO", None)
    env.pop("RAY_ADDRESS", None)
    try:
        process = subprocess.run(
            [sys.executable, "-m", "gdpo_nemo.commands.nemo_run", "--config", str(path)],
            cwd=work, env=env, capture_output=True, text=True, timeout=420,
        )
    finally:  # the Ray that init_ray started ends with its driver (ray.init's atexit shutdown)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return process, run_dir


def test_the_launch_stops_only_where_nemo_rl_asks_ray_for_a_gpu(launched):
    process, _ = launched
    output = process.stdout + process.stderr
    assert process.returncode != 0
    assert "ResourceInsufficientError: Maximum number of retries reached" in output, output[-3000:]


def test_nemo_rl_loads_the_config_we_wrote_into_the_run_dir(launched):
    process, run_dir = launched
    assert (run_dir / "config.yaml").is_file()
    assert f"Loaded configuration from: {run_dir / 'config.yaml'}" in process.stdout
    assert f"Using log directory: {run_dir}\n" in process.stdout  # our hook: no exp_<N>/ added


def test_nemo_rl_builds_our_datasets_and_environment_actors(launched):
    process, _ = launched
    assert "Loaded training dataset gdpo_gsm8k with 2 samples" in process.stdout
    assert "Loaded validation dataset gdpo_gsm8k with 2 samples" in process.stdout


def test_nemo_rl_setup_builds_logger_checkpointer_and_dataloaders_before_the_gpu(launched):
    process, run_dir = launched
    assert "Training dataloader loaded with 1 samples" in process.stdout  # NeMo RL counts batches here
    assert "Validation dataloader loaded with 2 samples" in process.stdout
    assert not (run_dir / "DONE").exists()
