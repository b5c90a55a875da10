"""NeMo RL's own verdict on a run config: its loader and ``MasterConfig``, as run_grpo.py uses them.

``examples/run_grpo.py`` (pinned commit) reads ``--config`` with ``nemo_rl.utils.config.
load_config``, applies Hydra overrides with ``parse_hydra_overrides``, resolves with
``OmegaConf.to_container(resolve=True)`` and builds ``MasterConfig(**config)`` (pydantic,
``nemo_rl/algorithms/grpo.py``). A config that step refuses never reaches a GPU; this module
runs the same four steps on the CPU so ``gdpo-nemo config show`` and ``gdpo-nemo sweep``
can refuse it before anything is submitted, with NeMo RL's own message.

Where NeMo RL is: in this interpreter when ``nemo_rl`` imports here, else in the Python
named by ``--nemo-rl-python`` / ``$GDPO_NEMO_RL_PYTHON`` (NeMo RL's venv, e.g.
``<nemo-rl checkout>/.venv/bin/python`` or this repo's ``.venv-nemo/bin/python``), which
runs ``python -m gdpo_nemo.engines.nemo.config_check FILE...`` (CHECK_MODULE) and answers
in JSON. Without either, `find_nemo_rl_python` returns None and the callers say the check
did not run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from gdpo_nemo.errors import UserError
from gdpo_nemo.layout import REPO_ROOT

__all__ = [
    "NEMO_RL_PYTHON_ENV",
    "check_config_file",
    "check_configs",
    "find_nemo_rl_python",
    "nemo_rl_importable",
    "refuse_what_nemo_rl_refuses",
]

NEMO_RL_PYTHON_ENV = "GDPO_NEMO_RL_PYTHON"
# What NeMo RL's Python runs to check config files (named here, never imported: this module
# is the library under that command).
CHECK_MODULE = "gdpo_nemo.engines.nemo.config_check"
_IN_PROCESS = "in-process"


def _loc(parts: Sequence) -> str:
    """A pydantic error location as a dotted key path (union branch names dropped)."""
    keys = []
    for part in parts:
        if isinstance(part, int):
            keys[-1:] = [f"{keys[-1]}[{part}]"] if keys else [f"[{part}]"]
        elif isinstance(part, str) and (part[:1].isupper() or "[" in part or part in ("typed-dict", "list", "none")):
            continue  # the name of a union member pydantic tried, not a key
        else:
            keys.append(str(part))
    return ".".join(keys) or "config"


@contextlib.contextmanager
def quiet_imports():
    """Keep the import-time warnings of NeMo RL's stack (torch's ``_pytree`` log records,
    torchao, pynvml's FutureWarning) off the terminal: they are not the caller's answer. Log
    records up to WARNING are dropped meanwhile (torch's handlers hold the stderr of the
    moment torch was imported, so a redirect alone misses them); errors still show."""
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def check_config_file(path, overrides: Sequence[str] = ()) -> list[str]:
    """What NeMo RL's run_grpo.py says of the config file `path` (with Hydra `overrides`),
    one line per problem, each starting with the key path at fault; [] if accepted.

    Needs ``nemo_rl`` importable in this interpreter.
    """
    from omegaconf import OmegaConf
    from pydantic import ValidationError

    with quiet_imports():
        from nemo_rl.algorithms.grpo import MasterConfig
        from nemo_rl.utils.config import load_config, parse_hydra_overrides, register_omegaconf_resolvers

    register_omegaconf_resolvers()
    try:
        config = load_config(str(path))
        if overrides:
            config = parse_hydra_overrides(config, list(overrides))
        plain = OmegaConf.to_container(config, resolve=True)
        MasterConfig(**plain)
    except ValidationError as err:
        errors = err.errors()
        # A section typed `XConfig | XConfigDisabled` fails both members; the Disabled one only
        # says `enabled` should be false, which is noise when the section is enabled.
        meaningful = [e for e in errors if not any(str(part).endswith("Disabled") for part in e["loc"])]
        return [
            f"{_loc(error['loc'])}: NeMo RL MasterConfig: {error['msg']} (got {error.get('input')!r})"
            for error in (meaningful or errors)
        ]
    except Exception as err:  # NeMo RL's loader raising (bad YAML, bad override, interpolation)
        return [f"config: NeMo RL's loader: {type(err).__name__}: {' '.join(str(err).split())}"]
    return []


def find_nemo_rl_python(explicit: str | None = None) -> str | None:
    """The Python that can run NeMo RL's check: `explicit`, else $GDPO_NEMO_RL_PYTHON, else
    this interpreter ("in-process") when ``nemo_rl`` imports here, else None."""
    chosen = explicit or os.environ.get(NEMO_RL_PYTHON_ENV)
    if chosen:
        if not (Path(chosen).is_file() and os.access(chosen, os.X_OK)):
            source = "--nemo-rl-python" if explicit else f"${NEMO_RL_PYTHON_ENV}"
            raise UserError(f"{source}={chosen!r} is not an executable Python; name NeMo RL's venv Python (…/bin/python)")
        return chosen
    return _IN_PROCESS if nemo_rl_importable() else None


def nemo_rl_importable() -> bool:
    """Whether NeMo RL's package imports in this interpreter (a folder named nemo_rl on the
    path without an __init__.py, such as a test folder, is a namespace package, not NeMo RL)."""
    spec = importlib.util.find_spec("nemo_rl")
    return spec is not None and spec.origin not in (None, "namespace")


def check_configs(configs: Mapping[str, Mapping], python: str) -> dict[str, list[str]]:
    """NeMo RL's problems with each named config ({name: [line, ...]}, [] when accepted).

    python: `find_nemo_rl_python`'s answer ("in-process" or a path). The configs are written
    as YAML files and read back by NeMo RL's loader, as run_grpo.py reads them.
    """
    from gdpo_nemo.config import dump

    with tempfile.TemporaryDirectory(prefix="gdpo-nemo-check-") as folder:
        files = {}
        for index, (name, config) in enumerate(configs.items()):
            files[name] = Path(folder) / f"{index}.yaml"
            files[name].write_text(dump(dict(config)))
        if python == _IN_PROCESS:
            return {name: check_config_file(path) for name, path in files.items()}
        done = subprocess.run(
            [python, "-m", CHECK_MODULE, *map(str, files.values())],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))},
        )
        if done.returncode != 0:
            tail = " ".join(done.stderr.strip().splitlines()[-3:])
            raise UserError(f"NeMo RL's config check could not run with {python}: {tail}")
        verdicts = json.loads(done.stdout.strip().splitlines()[-1])
        return {name: verdicts[str(path)] for name, path in files.items()}


def refuse_what_nemo_rl_refuses(
    configs: Mapping[str, Mapping], explicit_python: str | None = None, *, name_each: bool = False
) -> bool:
    """Raise ConfigError when NeMo RL's own check refuses any of the named configs: one line
    per problem carrying NeMo RL's message, prefixed with the config's name if `name_each`. Returns True when the check ran, False when no NeMo RL was found (see
    `find_nemo_rl_python`)."""
    from gdpo_nemo.config import ConfigError

    python = find_nemo_rl_python(explicit_python)
    if python is None:
        return False
    verdicts = check_configs(configs, python)
    problems = [f"{name}: {line}" if name_each else line for name, lines in verdicts.items() for line in lines]
    if problems:
        raise ConfigError(problems)
    return True

