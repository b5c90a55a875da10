"""Issue 36: one engine contract (gdpo_nemo.config.engines) that both engines implement, and
every list of engines derived from its registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdpo_nemo.config import ConfigError, key_walk, settings
from gdpo_nemo.config.engines import ENGINES, Engine, engine, register_engine
from gdpo_nemo.sweep import profiles

REPO = Path(__file__).resolve().parents[1]


def test_every_list_of_engines_is_the_registry():
    assert list(ENGINES) == ["local", "nemo"]
    assert settings.ENGINES is key_walk.ENGINES is profiles.ENGINES is ENGINES  # the registry itself, read live
    for name in ENGINES:
        key_walk.walk({}, engine=name)  # the key tree has a fate for every key on each engine
    with pytest.raises(ValueError, match="engine 'trl' is not known: use one of local, nemo"):
        engine("trl")


def test_each_engine_provides_the_contract_and_its_entries_are_real():
    for spec in ENGINES.values():
        assert spec.summary and spec.command and spec.resume and spec.metrics == "metrics.jsonl"
        assert callable(spec.entry("load")) and callable(spec.entry("train"))
    # load: the config read and checked for this engine, before any work
    local = engine("local").entry("load")(REPO / "configs" / "local" / "tiny.yaml", [])[0]
    assert local["gdpo"]["engine"] == "local"
    with pytest.raises(ConfigError, match="this entry point runs gdpo.engine 'nemo' configs"):
        engine("nemo").entry("load")(REPO / "configs" / "local" / "tiny.yaml", [])


def test_a_third_engine_needs_a_new_name_and_real_entries():
    with pytest.raises(ValueError, match="a new, non-empty name"):
        register_engine(ENGINES["local"])
    with pytest.raises(ValueError, match="load must be 'module:function'"):
        register_engine(Engine("trl", "s", "gdpo_nemo.x", "a:b", "c", "r", "metrics.jsonl"))
    assert "trl" not in ENGINES
