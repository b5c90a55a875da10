"""The `gdpo-nemo` command's shared pieces: lazy subcommands, the KEY=VALUE parser, the
error line and its exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo.cli import COMMANDS, main
from gdpo_nemo.commands.args import BAD_INPUT, FAILED, key_value, report_error

REPO = Path(__file__).resolve().parents[1]


def _modules_after(argv: list[str]) -> set[str]:
    """The modules imported by `gdpo-nemo ARGV` run in a fresh interpreter."""
    code = ("import sys\nfrom gdpo_nemo.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('\\n'.join(sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
    return set(done.stderr.split())


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in COMMANDS)])
def test_help_of_every_command_imports_no_torch(argv):
    modules = _modules_after(argv)
    assert "gdpo_nemo.cli" in modules
    assert "torch" not in modules and "transformers" not in modules


def test_every_command_lives_in_gdpo_nemo_commands():
    assert all(module.startswith("gdpo_nemo.commands.") for module, _ in COMMANDS.values())


def test_key_value_splits_at_the_first_equals_sign():
    assert key_value("grpo.seed=a=b", flag="x") == ("grpo.seed", "a=b")


def test_key_value_refuses_a_missing_value_naming_flag_item_and_keys():
    with pytest.raises(ValueError) as error:
        key_value("seed", flag="--only", form="key=value", accepted_keys=["run", "seed"])
    assert str(error.value) == "--only 'seed' is not key=value (keys: run, seed)"


def test_key_value_refuses_an_unknown_key_naming_the_accepted_ones():
    with pytest.raises(ValueError) as error:
        key_value("colour=red", flag="--only", accepted_keys=["run", "seed"])
    assert str(error.value) == "--only 'colour=red': unknown key 'colour'; accepted keys are run, seed"


def test_key_value_gives_the_example_and_allows_an_empty_value_only_when_asked():
    with pytest.raises(ValueError) as error:
        key_value("aime=", flag="--file", form="NAME=PATH", example="aime=data/aime24.jsonl")
    assert str(error.value) == "--file 'aime=' is not NAME=PATH (e.g. aime=data/aime24.jsonl)"
    assert key_value("policy.lora=", flag="config show", empty_value=True) == ("policy.lora", "")


def test_report_error_prints_one_line_and_returns_the_code(capsys):
    assert report_error("gdpo-nemo sweep", "no manifest", FAILED) == 1
    assert capsys.readouterr().err == "gdpo-nemo sweep: error: no manifest\n"


def test_a_bad_key_value_exits_2_with_the_command_named(capsys):
    assert main(["report", "--source", "runs", "--model-map", "qwen"]) == BAD_INPUT
    err = capsys.readouterr().err
    assert err == "gdpo-nemo report: error: --model-map 'qwen' is not TAG=KEY (e.g. qwen1.5b=qwen2.5-1.5b)\n"


@pytest.mark.parametrize(("module", "argv", "message"), [
    ("gdpo_nemo.engines.local.parallel", [], "name an experiment (experiments/<name>.yaml), e.g. gpu_study"),
    ("gdpo_nemo.engines.nemo.run", ["--config", "run.yaml", "--bogus"],
     "unknown option(s) ['--bogus']; overrides are key=value"),
])
def test_the_python_m_entry_points_print_the_same_error_line(module, argv, message):
    done = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == BAD_INPUT
    assert done.stderr == f"python -m {module}: error: {message}\n"
