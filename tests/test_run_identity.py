"""Issue 24, item 3: the run id (run dir, W&B name and group, checkpoint dir) follows the
method the composed config runs, or the mismatch is refused (gdpo_nemo.config.identity)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gdpo_nemo.config.compose import compose, load_config_file
from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.engines.local.config import load_run_config
from gdpo_nemo.runs.run_id import RunId

REPO = Path(__file__).resolve().parents[1]
NAMES = (("logger", "log_dir"), ("logger", "wandb", "name"), ("logger", "wandb", "group"), ("checkpointing", "checkpoint_dir"))


def named(config: dict) -> list:
    out = []
    for path in NAMES:
        value = config
        for key in path:
            value = value[key]
        out.append(value)
    return out


def test_an_estimator_override_relabels_the_run_as_the_method_it_runs():
    # The case: algo=gdpo with gdpo.estimator=grpo is GRPO, named and stored as GRPO.
    overridden = compose("gsm8k", "tiny", "gdpo", overrides=["gdpo.estimator=grpo"])
    grpo = compose("gsm8k", "tiny", "grpo")
    gdpo = compose("gsm8k", "tiny", "gdpo")
    assert RunId.from_config(overridden).name == "adhoc__gsm8k__tiny__grpo__seed42"
    assert named(overridden) == named(grpo) != named(gdpo)


def test_weights_follow_to_their_preset_or_to_a_label_of_their_own():
    preset = compose("math", "tiny", "gdpo_wlen0.5", overrides=["gdpo.reward_weights.length=0.25"])
    assert preset["gdpo"]["algo"] == "gdpo_wlen0.25"
    own = compose("math", "tiny", "gdpo", overrides=["+gdpo.reward_weights={correctness: 1.0, length: 0.3}"])
    assert own["gdpo"]["algo"] == "gdpo_wcorrectness1-length0.3"
    assert "gdpo_wcorrectness1-length0.3" in own["logger"]["wandb"]["name"]


def test_a_label_that_names_another_methods_preset_is_refused_naming_the_ways_out():
    with pytest.raises(ConfigError) as raised:
        compose("gsm8k", "tiny", "gdpo", overrides=["gdpo.estimator=grpo", "gdpo.algo=gdpo"])
    message = str(raised.value)
    assert "gdpo.estimator='grpo' contradicts gdpo.algo='gdpo'" in message
    assert "choose algo=grpo" in message and "gdpo.algo=<a label of your own>" in message
    # A label of the user's own is theirs to choose.
    assert compose("gsm8k", "tiny", "gdpo", overrides=["gdpo.estimator=grpo", "gdpo.algo=mine"])["gdpo"]["algo"] == "mine"


def test_a_config_file_that_contradicts_itself_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    text = (REPO / "configs" / "local" / "tiny.yaml").read_text().replace("  estimator: gdpo", "  estimator: grpo")
    path.write_text(text)
    with pytest.raises(ValueError, match="contradicts gdpo.algo='gdpo'"):
        load_run_config(path)
    composed = tmp_path / "composed.yaml"

    config = compose("gsm8k", "tiny", "gdpo")
    config["gdpo"]["estimator"] = config["grpo"]["adv_estimator"]["name"] = "grpo"
    composed.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match="contradicts gdpo.algo='gdpo'"):
        load_config_file(composed)


def test_the_local_engine_names_an_overridden_run_after_its_method():
    config, _ = load_run_config(REPO / "configs" / "local" / "tiny.yaml", ["gdpo.estimator=grpo"])
    assert RunId.from_config(config).algo == "grpo"
