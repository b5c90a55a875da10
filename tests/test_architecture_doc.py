"""Issue 47: docs/architecture.md is true to the code: every module and package it names exists.

It names modules two ways: dotted (`gdpo_nemo.config.experiments`) and as paths inside the
package (`config/settings`, `engines/nemo/cpu/`, `sandbox/_driver.py`); run-dir folders it
shows (`wandb/`, `eval/`) and the repository's own folders (`configs/`) are not modules.
"""

from __future__ import annotations

import ast
import re

import yaml
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "gdpo_nemo"
DOC = REPO / "docs" / "architecture.md"


def _exists(parts: list[str]) -> bool:
    path = PACKAGE.joinpath(*parts) if parts else PACKAGE
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() or path.is_file()


def named_modules() -> list[str]:
    text = DOC.read_text()
    # brace lists name several: engines/{nemo/run,local/parallel}
    for _ in range(3):
        text = re.sub(r"([\w./]*)\{([^{}`]*)\}([\w./]*)",
                      lambda m: " ".join(m.group(1) + part + m.group(3) for part in m.group(2).split(",")), text)
    names = set(re.findall(r"gdpo_nemo(?:\.[a-z_][a-z0-9_]*)+", text))
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    for path in re.findall(r"`([a-z_][a-z0-9_]*(?:/[a-z_][a-z0-9_.]*)*/?)`", text):
        top = path.split("/")[0]
        if top in packages and "/" in path:
            names.add(path)
    return sorted(names)


def test_every_module_the_architecture_doc_names_exists():
    names = named_modules()
    assert len(names) > 30  # the doc names most of the package
    missing = []
    for name in names:
        if name.startswith("gdpo_nemo."):
            parts = name.split(".")[1:]
            # a dotted name may end in a function or class of its module: the module must exist
            if not (_exists(parts) or _exists(parts[:-1])):
                missing.append(name)
        else:
            parts = [p for p in name.rstrip("/").split("/") if p]
            if parts[-1].endswith(".py"):
                ok = (PACKAGE.joinpath(*parts)).is_file()
            else:
                ok = _exists(parts)
            if not ok:
                missing.append(name)
    assert missing == [], f"docs/architecture.md names modules that do not exist: {missing}"


def import_graph() -> dict[str, set[str]]:
    """{module: the package modules it imports}, counting imports inside functions; `from
    package import name` points at the submodule `name` when there is one."""
    import ast

    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                found = owner(target) if target.startswith("gdpo_nemo") else None
                if found and found != name:
                    graph[name].add(found)
    return graph


def test_there_is_no_import_circle_counting_imports_inside_functions():
    graph = import_graph()
    assert len(graph) > 100 and graph["gdpo_nemo.engines.nemo.plugin"]
    # Depth-first search for a back edge; report one circle if there is any.
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state:
            circle = visit(start)
            assert circle is None, " -> ".join(circle)


def test_config_and_sweep_import_no_engine():
    # The engine contract lives in the config layer that reads it (config/engines): no arrow
    # runs from config or sweep up to the engines, not even inside a function.
    graph = import_graph()
    up = {(name, target) for name, targets in graph.items() for target in targets
          if name.startswith(("gdpo_nemo.config", "gdpo_nemo.sweep")) and target.startswith("gdpo_nemo.engines")}
    assert up == set()


def test_the_repository_root_is_found_in_one_module():
    # Issue 47: eight modules each computed it from their own depth in the package.
    found = []
    for path in PACKAGE.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"Path\(__file__\)\.resolve\(\)\.parents\[|gdpo_nemo\.__file__", line):
                found.append(f"{path.relative_to(REPO)}:{number}")
    assert found == ["gdpo_nemo/layout.py:14"], found


def _docstrings(tree) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def test_metric_keys_are_spelled_in_one_module():
    # Issue 47: train/reward/*, adv/zero_std_frac/*, validation/*, timing/* were spelled by hand
    # in 19 modules; every writer and reader now takes them from runs/metric_names.
    spelled = re.compile(r"^(train|validation|timing)/|^adv/|^(train|validation)/reward")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative == "gdpo_nemo/runs/metric_names.py":
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
                text = str(node.values[0].value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                text = node.value
            else:
                continue
            if spelled.match(text):
                found.append(f"{relative}:{node.lineno}: {text!r}")
    assert found == [], "\n".join(found)


def test_the_builtin_model_names_are_spelled_in_one_module():
    # Issue 47: the embedded models were named in 4 places with 2 spellings ("smollm2" on the
    # nemo CPU path, "smollm2-135m" on the local engine); every reader now imports them.
    from gdpo_nemo import builtin_models

    names = set(builtin_models.BUILTIN_MODELS) | {"smollm2"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative == "gdpo_nemo/builtin_models.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                bare = node.value.removeprefix(builtin_models.BUILTIN_PREFIX)
                if bare in names:
                    found.append(f"{relative}:{node.lineno}: {node.value!r}")
    assert found == [], "\n".join(found)
    from gdpo_nemo.commands.nemo_smoke import MODEL_SHAPES
    from gdpo_nemo.engines.nemo.cpu.models import MODELS
    from gdpo_nemo.engines.nemo.engine import CPU_MODELS

    assert set(MODELS) == set(CPU_MODELS) == set(MODEL_SHAPES) == set(builtin_models.BUILTIN_MODELS)
    configs = {yaml.safe_load(path.read_text())["policy"]["model_name"] for path in (REPO / "configs" / "model").glob("*.yaml")}
    assert {builtin_models.BUILTIN_PREFIX + name for name in builtin_models.BUILTIN_MODELS} <= configs
