"""The engine interface (gdpo_nemo.config.engines): the behaviour both engines implement, every
list of engines read from its registry, and what a third engine costs: its package (a subclass
registered in one line) and its job template, nothing else."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from gdpo_nemo import checks
from gdpo_nemo.config import ConfigError, key_walk, nemo_keys, settings
from gdpo_nemo.config.engines import BUILTIN_ENGINES, ENGINES, Engine, engine, register_engine
from gdpo_nemo.sweep import profiles

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "gdpo_nemo"


def test_every_list_of_engines_is_the_registry():
    assert list(ENGINES) == ["local", "nemo"]
    assert settings.ENGINES is key_walk.ENGINES is profiles.ENGINES is ENGINES  # the registry itself, read live
    for name in ENGINES:
        key_walk.walk({}, engine=name)  # the key tree has a fate for every key on each engine
    with pytest.raises(ValueError, match="engine 'trl' is not known: use one of local, nemo"):
        engine("trl")


def test_the_builtin_engines_register_themselves_and_the_config_layer_imports_none():
    for module in BUILTIN_ENGINES:
        assert (PACKAGE / Path(*module.split(".")[1:])).with_suffix(".py").is_file()
    assert [type(spec).__module__ for spec in ENGINES.values()] == list(BUILTIN_ENGINES)
    # the modules are named as data (plugin discovery), not imported: no arrow from config up to engines
    tree = ast.parse((PACKAGE / "config" / "engines.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not any(name.startswith("gdpo_nemo.engines") for name in imported)


def test_each_engine_provides_the_contract_and_its_entries_are_real():
    for spec in ENGINES.values():
        assert isinstance(spec, Engine) and spec.keys in ("schema", "tree")
        assert spec.summary and spec.command and spec.resume and spec.metrics == "metrics.jsonl"
        assert callable(spec.entry("load")) and callable(spec.entry("train"))
        assert (REPO / "slurm" / "templates" / spec.template).is_file()
    # load: the config read and checked for this engine, before any work
    local = engine("local").entry("load")(REPO / "configs" / "local" / "tiny.yaml", [])[0]
    assert local["gdpo"]["engine"] == "local"
    with pytest.raises(ConfigError, match="this entry point runs gdpo.engine 'nemo' configs"):
        engine("nemo").entry("load")(REPO / "configs" / "local" / "tiny.yaml", [])


def test_the_behaviour_each_engine_gives_is_its_own():
    local, nemo = ENGINES["local"], ENGINES["nemo"]
    assert local.cluster_problems({}, 2, 0) and not local.cluster_problems({}, 1, 8)
    assert nemo.cluster_problems({"cluster": {"num_nodes": 2, "gpus_per_node": 8}}, 2, 8) == []
    assert local.native_check(None) is None and nemo.native_check(None).owner == "NeMo RL"
    assert (local.evaluation_jobs, nemo.evaluation_jobs) == (True, False)
    block = {"source": "offline", "data_path": "x.jsonl"}
    assert local.dataset_block_problems(block, "data.train") == []
    assert nemo.dataset_block_problems(block, "data.train")[0].startswith("data.train.data_path:")


def test_a_third_engine_needs_a_new_name_and_real_entries():
    with pytest.raises(ValueError, match="a new, non-empty name"):
        register_engine(ENGINES["local"])

    class NoEntries(Engine):
        name, load, train = "trl", "gdpo_nemo.x", "a:b"

    with pytest.raises(ValueError, match="load must be 'module:function'"):
        register_engine(NoEntries())
    with pytest.raises(ValueError, match="an instance of gdpo_nemo.config.engines.Engine"):
        register_engine("trl")
    assert "trl" not in ENGINES


THIRD_TEMPLATE = """#!/bin/bash
# {{run_name}} of {{experiment}} on profile {{profile}}
{{sbatch_directives}}
set -euo pipefail
{{setup}}
export WANDB_NAME={{wandb_name}} WANDB_RUN_GROUP={{wandb_group}}
exec {{python}} -c 'print("third engine")' {{config}}
"""


def test_a_third_engine_is_its_package_its_registration_and_its_job_template(tmp_path, monkeypatch, capsys):
    """A third engine, written as a user of TRL would: a subclass in a module of its own, one
    register_engine call, one template, and its column of the key tree where its fates differ
    from the tree's. The composer, the checks, the key walk and the sweep then take it with no
    change to any package module: its name is accepted as gdpo.engine and --engine, its
    configs are walked by its own column, and its jobs are rendered."""
    template_path = tmp_path / "third.sbatch"
    template_path.write_text(THIRD_TEMPLATE)

    class ThirdEngine(Engine):
        name = "third"
        summary = "a test's engine"
        load = "gdpo_nemo.engines.local.config:load_run_config"
        train = "gdpo_nemo.engines.local.trainer:train"
        command = "third-train RUN.yaml"
        resume = "the same command"
        keys = "tree"
        # the local engine's column but for three cells: it implements CISPO (the local engine
        # refuses it), refuses a sequence-level loss (the local engine has both) and fills
        # val_period its own way
        column = {
            **key_walk.column("local"),
            "loss_fn.use_cispo": nemo_keys.Fate(nemo_keys.USED, False),
            "loss_fn.token_level_loss": nemo_keys.Fate(nemo_keys.REFUSED, accepted=(True,)),
            "grpo.val_period": nemo_keys.Fate(nemo_keys.USED, 3, checks.integer(1)),
        }
        template = str(template_path)  # absolute: TEMPLATE_DIR / an absolute path is that path

        def config_problems(self, config):
            return [] if config["gdpo"]["estimator"] != "gdpo_no_bn" else ["gdpo.estimator: not on the third engine"]

        def job_values(self, profile, *, run_dir, config_path, **_):
            return {"python": shlex.quote(profile.python or "python"), "config": shlex.quote(str(config_path))}

    from gdpo_nemo import config as run_config
    from gdpo_nemo.cli import main

    spec = register_engine(ThirdEngine())
    try:
        assert list(ENGINES) == ["local", "nemo", "third"]
        config = run_config.compose("math", "smollm2-135m", "gdpo", cluster="local", overrides=["gdpo.engine=third"])
        run_config.validate(config)
        assert config["gdpo"]["engine"] == "third" and config["logger"]["log_dir"].endswith(config["logger"]["wandb"]["name"])
        with pytest.raises(ConfigError, match="gdpo.estimator: not on the third engine"):
            run_config.validate(run_config.compose("math", "smollm2-135m", "gdpo_no_bn", cluster="local",
                                                   overrides=["gdpo.engine=third"]))
        from gdpo_nemo.config.validate import check_keys

        cispo = run_config.compose("math", "smollm2-135m", "gdpo", cluster="local",
                                   overrides=["gdpo.engine=third", "loss_fn.use_cispo=true"])
        walked = {name: check_keys(cispo, engine=name).problems for name in ENGINES}
        assert walked["nemo"] == [] and "loss_fn.use_cispo: True is not implemented by the local engine; accepted False" \
            in walked["local"]  # its column: it implements CISPO, and refuses the rest the local engine refuses
        assert walked["third"] == [line.replace("local", "third") for line in walked["local"] if "use_cispo" not in line] != []
        sequence_loss = run_config.compose("gsm8k", "smollm2-135m", "gdpo", cluster="local",
                                           overrides=["gdpo.engine=third", "loss_fn.token_level_loss=false"])
        assert check_keys(sequence_loss, engine="local").problems == [] == check_keys(sequence_loss, engine="nemo").problems
        assert check_keys(sequence_loss, engine="third").problems == [
            "loss_fn.token_level_loss: False is not implemented by the third engine; accepted True"]
        filled = {name: key_walk.walk({"gdpo": {}}, engine=name).config for name in ("local", "third")}
        assert filled["third"]["grpo"]["val_period"] == 3 != filled["local"]["grpo"]["val_period"]
        assert filled["third"]["loss_fn"]["token_level_loss"] is True  # a refused key's neutral value fills it
        assert filled["third"]["gdpo"] == filled["local"]["gdpo"]  # the gdpo block: every engine's
        clipped = run_config.compose("math", "smollm2-135m", "gdpo", cluster="local",
                                            overrides=["gdpo.engine=third", "grpo.advantage_clip_low=-1.0"])
        assert [line.replace("local", "third") for line in check_keys(clipped, engine="local").problems] \
            == check_keys(clipped, engine="third").problems != []
        rc = main(["sweep", "smoke", "--cluster", "local", "--engine", "third", "--sweep-dir", str(tmp_path / "sweep"),
                   "--only", "seed=0", "--only", "algo=gdpo"])
        out = capsys.readouterr().out
        assert rc == 0 and "(third engine); nothing submitted" in out
        scripts = sorted((tmp_path / "sweep" / "jobs").glob("*.sbatch"))
        assert scripts
        for path in scripts:
            text = path.read_text()
            assert "#SBATCH --nodes=1" in text and "#SBATCH --ntasks=1" in text and "#SBATCH --requeue" in text
            assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
            saved = yaml.safe_load((tmp_path / "sweep" / "configs" / f"{path.stem}.yaml").read_text())
            assert saved["gdpo"]["engine"] == "third" and f"{path.stem}.yaml" in text
    finally:
        ENGINES._engines.pop(spec.name)
    assert list(ENGINES) == ["local", "nemo"]


def test_no_package_module_outside_an_engine_branches_on_an_engine_name():
    # Issue 47: code chose behaviour by `engine == "nemo"` in 11 modules; the engine now says.
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith("gdpo_nemo/engines/"):
            continue  # an engine checking that a config is its own
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "engine" in line and re.search(r"""[=!]= ["'](nemo|local)["']|in \(["'](nemo|local)["']""", line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)
