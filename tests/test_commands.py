"""The `gdpo-nemo` command's shared pieces: lazy subcommands, the KEY=VALUE parser, the
error line and its exit codes."""

from __future__ import annotations

import ast
import json
import re
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
    ("gdpo_nemo.commands.local_parallel", [], "name an experiment (experiments/<name>.yaml), e.g. gpu_study"),
    ("gdpo_nemo.commands.nemo_run", ["--config", "run.yaml", "--bogus"],
     "unknown option(s) ['--bogus']; overrides are key=value"),
])
def test_the_python_m_entry_points_print_the_same_error_line(module, argv, message):
    done = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == BAD_INPUT
    assert done.stderr == f"python -m {module}: error: {message}\n"


# The programs with a `__main__` block outside commands/: the console entry; bfcl-eval's
# worker, started by its path in bfcl-eval's own venv where gdpo_nemo does not import; and
# the processes the engines start themselves (a local run side by side with others, NeMo
# RL's config check in NeMo RL's Python): an engine starts its own entry, never a command.
MAIN_OUTSIDE_COMMANDS = {"gdpo_nemo/cli.py", "gdpo_nemo/evaluation/bfcl_worker.py", "gdpo_nemo/engines/local/worker.py",
                         "gdpo_nemo/engines/nemo/config_check.py"}


def _package_modules():
    for path in sorted((REPO / "gdpo_nemo").rglob("*.py")):
        yield path.relative_to(REPO).as_posix(), ast.parse(path.read_text())


def test_no_layer_starts_a_command_module_by_name():
    # Issue 36: engines/local/parallel and engines/nemo/validation started
    # `python -m gdpo_nemo.commands...`, their own callers: an import circle through the back
    # door. A module name of gdpo_nemo.commands written as a string outside cli and commands/.
    named = {(name, node.value) for name, tree in _package_modules() if not name.startswith("gdpo_nemo/commands/")
             and name != "gdpo_nemo/cli.py" for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.fullmatch(r"gdpo_nemo\.commands(\.\w+)*", node.value)}
    # The Slurm jobs the nemo engine renders for the sweep are users of the commands, as a person typing them is.
    assert named == {("gdpo_nemo/engines/nemo/engine.py", "gdpo_nemo.commands.nemo_run"),
                     ("gdpo_nemo/engines/nemo/engine.py", "gdpo_nemo.commands.nemo_smoke")}


def test_only_the_commands_have_a_main_block():
    with_main = {name for name, tree in _package_modules() for node in tree.body
                 if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)}
    assert with_main - MAIN_OUTSIDE_COMMANDS == {name for name in with_main if name.startswith("gdpo_nemo/commands/")}
    assert MAIN_OUTSIDE_COMMANDS <= with_main


def test_nothing_but_the_cli_imports_the_commands():
    importers = set()
    for name, tree in _package_modules():
        for node in ast.walk(tree):
            targets = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                       else [f"{node.module}.{alias.name}" for alias in node.names] if isinstance(node, ast.ImportFrom)
                       else [])
            if any(t == "gdpo_nemo.commands" or t.startswith("gdpo_nemo.commands.") for t in targets):
                importers.add(name)
    assert {name for name in importers if not name.startswith("gdpo_nemo/commands/")} <= {"gdpo_nemo/cli.py"}


def test_the_nemo_config_check_prints_each_files_problems_as_one_json_line(monkeypatch, capsys):
    from gdpo_nemo.engines.nemo import config_check as nemo_validation

    verdicts = {"good.yaml": [],
                "bad.yaml": ["grpo.max_num_steps: NeMo RL MasterConfig: Input should be a valid integer"]}
    monkeypatch.setattr(nemo_validation, "check_config_file", lambda path: verdicts[path])
    assert nemo_validation.main(["good.yaml", "bad.yaml"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == verdicts
