"""The one override grammar of both engines (gdpo_nemo/config/overrides.py): Hydra's, parsed by
Hydra's public parser and applied with OmegaConf's public API."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdpo_nemo.config import ConfigError, apply_overrides
from gdpo_nemo.engines.local.config import load_run_config

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "local" / "tiny.yaml"


def test_change_add_force_add_and_delete():
    config = {"a": {"b": 1, "e": "x"}}
    out = apply_overrides(config, ["a.b=2", "+a.c=[1,2]", "++a.d={x: 1}", "++a.e=3e-4", "~a.b"])
    assert out == {"a": {"e": 3e-4, "c": [1, 2], "d": {"x": 1}}}
    assert config == {"a": {"b": 1, "e": "x"}}  # the input is left as it was


def test_interpolations_stay_unresolved_for_the_caller():
    assert apply_overrides({"a": 1, "b": 2}, ["b=${a}"]) == {"a": 1, "b": "${a}"}


@pytest.mark.parametrize(
    "override, message",
    [
        ("a.z=1", r"^a.z: override 'a.z=1' failed: 'a.z' is not in the config \(use \+a.z=value to add it\)"),
        ("+a.b=1", r"^a.b: override '\+a.b=1' failed: 'a.b' is already in the config"),
        ("~a.z", r"^a.z: override '~a.z' failed: 'a.z' is not in the config"),
        ("a.b", r"override 'a.b' is not key=value"),
        ("a.b=[1,", r"^override syntax: "),
    ],
)
def test_a_bad_override_names_its_key_and_why(override, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides({"a": {"b": 1}}, [override])


def test_settable_keys_may_be_set_plainly_though_the_config_lacks_them():
    assert apply_overrides({}, ["x.y=1"], settable=lambda key: key == "x.y") == {"x": {"y": 1}}


def test_the_local_engine_takes_the_same_grammar_as_the_composer():
    config, _ = load_run_config(TINY, ["~gdpo.reward_components", "++gdpo.reward_weights={integer: 0.5}",
                                       "grpo.seed=7", "gdpo.length_limit=6"])
    assert config["gdpo"]["reward_components"] is None  # deleted, then its default
    assert config["gdpo"]["reward_weights"] == {"integer": 0.5}
    assert (config["grpo"]["seed"], config["gdpo"]["length_limit"]) == (7, 6)


def test_no_module_imports_hydras_private_api():
    sources = [path for path in (REPO / "gdpo_nemo").rglob("*.py")]
    assert sources and not [str(p) for p in sources if "hydra._internal" in p.read_text()]
