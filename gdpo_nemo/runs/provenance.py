"""What a run's numbers depend on besides its config: code, libraries, numerics, starting weights.

Two runs with one config give the same numbers only when these agree too (on one kind of
machine): float reductions depend on the torch thread count and the CPU's or GPU's kernels,
library releases change kernels and defaults, an edited checkout changes the code, and a
cached warm start made under other numerics is another model. So:

- every run dir holds ``provenance.json``: one record per invocation (the start and every
  resume) with `code` (commit, dirty), `libraries`, `numerics` (device, thread count, weight
  dtype, autocast, the CPU code paths of gdpo_nemo.runs.cpu_pins, the device's name where
  the numbers depend on it), `machine` (the CPU and its instruction sets: recorded, not
  compared) and `start_weights` (digest of the weights step 0 started from, and where they
  came from);
- every cached model (converted checkpoint, warm start) is keyed by the same numerics
  (`numerics_key`), records them beside its weights with their digest, and is checked
  against both when it is reused (`check_cached`);
- `gdpo-nemo report` compares the records of the runs in one table (`differences`) and names
  every difference that changes numbers in its problems.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.runs.rundir import PROVENANCE_FILE

FILE = PROVENANCE_FILE  # gdpo_nemo.runs.rundir, which names every file of a run dir
# Libraries whose releases change a local run's numbers (kernels, sampling, tokenization).
LIBRARIES = ("torch", "transformers", "tokenizers", "numpy", "gguf")
# Fields of a record that change numbers; `differences` compares these (dotted paths).
NUMBER_FIELDS = ("code.commit", "code.dirty", "libraries", "numerics")


def library_versions(names=LIBRARIES) -> dict[str, str | None]:
    """{distribution: installed version, None when absent}, plus the Python version."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


@functools.lru_cache(maxsize=None)
def code_version(root: Path = REPO_ROOT) -> dict:
    """{"commit": HEAD's sha, "dirty": tracked files differ from it, "package": version} of
    the checkout this package runs from; commit and dirty are None outside a git checkout."""
    from gdpo_nemo import __version__

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit.strip() if commit else None,
            "dirty": None if status is None else bool(status.strip()),
            "package": __version__}


def git_root(path: Path) -> Path | None:
    """The top folder of the git repository that holds `path` (None: none, or no git)."""
    try:
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 and done.stdout.strip() else None


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo; the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_instruction_sets() -> str:
    """The widest vector instruction set the CPU has, as torch names it (``AVX512``, ``AVX2``,
    ``DEFAULT``): the hardware, whatever the pins make torch use (/proc/cpuinfo's flags)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    flags = next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "AVX512"
    return "AVX2" if {"avx2", "fma"} <= flags else "DEFAULT"


def device_name(device) -> str:
    """The kind of processor the numbers came from: the CUDA device's name, else the CPU's
    model name."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def machine() -> dict:
    """The machine a run ran on, beside its numerics: the CPU's name and its widest
    instruction set. Not a number field: under the CPU pins (gdpo_nemo.runs.cpu_pins) every
    x86-64 machine with AVX2 computes the same bits."""
    return {"cpu": cpu_model(), "cpu_instruction_sets": cpu_instruction_sets()}


def numerics(device, *, dtype: str = "float32", autocast: str | None = None, attention: str | None = None) -> dict:
    """The numerics in effect in this process for work on `device`: its kind, the torch thread
    count, the weight dtype and the autocast dtype; on the CPU the code paths torch's kernels
    take (`cpu_pins.state`: ATen's instruction set, oneMKL's branch, the pin mode) and, when
    they are not pinned in full, the CPU's name (the numbers then hold on that kind of CPU
    only); on CUDA the device's name and, when given, the attention kernels the caller allows
    (`attention`)."""
    import torch

    from gdpo_nemo.runs import cpu_pins

    device = torch.device(device)
    numbers = {"device": device.type, "threads": torch.get_num_threads(), "dtype": dtype, "autocast": autocast}
    if attention is not None:
        numbers["attention"] = attention
    if device.type == "cpu":
        numbers.update(cpu_pins.state())
        if not cpu_pins.is_pinned(numbers):
            numbers["device_name"] = device_name(device)
    else:
        numbers["device_name"] = device_name(device)
    return numbers


def numerics_key(numbers: dict, libraries: dict | None = None) -> dict:
    """What a cached model's key must cover so that one key never names two sets of weights:
    the numerics (`numerics`) and the library versions."""
    return {"numerics": dict(numbers), "libraries": dict(libraries or library_versions())}


def state_digest(model_or_state) -> str:
    """sha256 (hex, 16 digits) of a model's weights: every tensor's name, dtype, shape and
    bytes, in name order. Equal digests = bit-identical weights."""
    import torch

    state = model_or_state.state_dict() if hasattr(model_or_state, "state_dict") else model_or_state
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        raw = tensor.view(torch.uint8) if tensor.dim() > 0 else tensor.reshape(1).view(torch.uint8)
        digest.update(raw.numpy().tobytes())
    return digest.hexdigest()[:16]


class StaleCache(UserError):
    """A cached model whose recorded numerics or weights are not what its key promises."""


def check_cached(folder: Path, record_name: str, expected: dict, model=None) -> dict:
    """The record `folder/record_name` of a cached model, checked: its `numerics_key` part
    must equal `expected` and, when `model` (the loaded weights) is given, its `digest` must
    equal theirs. StaleCache naming the folder and the first difference otherwise (a cache
    made by an older release, another machine sharing the cache, a damaged file)."""
    path = Path(folder) / record_name
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise StaleCache(f"{folder}: cached model without a readable {record_name} ({err}); delete the folder"
                         " to make it again") from None
    found = {key: record.get(key) for key in expected}
    if found != expected:
        diff = differences([{"x": expected}, {"x": found}], ["expected", "cached"])
        raise StaleCache(f"{folder}: made under other numerics than its key says ({'; '.join(diff[:3])});"
                         " delete the folder to make it again")
    if model is not None and record.get("digest") not in (None, state_digest(model)):
        raise StaleCache(f"{folder}: its weights are not the ones recorded in {record_name} (digest"
                         f" {record.get('digest')}); delete the folder to make it again")
    return record


def invocation_record(*, numbers: dict, start_weights: dict, resumed_from: int | None = None,
                      libraries: dict | None = None) -> dict:
    """One invocation's provenance: when, code, libraries, numerics, starting weights."""
    return {
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "resumed_from_step": resumed_from,
        "code": code_version(),
        "libraries": libraries or library_versions(),
        "numerics": dict(numbers),
        "machine": machine(),
        "start_weights": dict(start_weights),
    }


def append(run_dir, record: dict) -> Path:
    """Add `record` to the run dir's provenance.json (one entry per invocation, the start
    first); written whole to a temporary file and renamed, so a crash never truncates it."""
    path = Path(run_dir) / FILE
    records = read(run_dir) or []
    records.append(record)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"invocations": records}, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def read(run_dir) -> list[dict] | None:
    """The invocation records of a run dir (None without provenance.json; ValueError when
    it cannot be read)."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return None
    try:
        records = json.loads(path.read_text())["invocations"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path}: unreadable provenance ({err})") from None
    if not isinstance(records, list):
        raise UserError(f"{path}: 'invocations' is not a list")
    return records


def _flatten(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        flat: dict = {}
        for key in sorted(value):
            flat.update(_flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def differences(records: list[dict], names: list[str], fields=None) -> list[str]:
    """Lines naming every field (dotted) where the `records` (one per name) disagree,
    restricted to `fields` (prefixes; None = all), e.g. ``numerics.threads: 1 (a) vs 2 (b)``."""
    flats = [_flatten(record) for record in records]
    keys = sorted(set().union(*flats)) if flats else []
    if fields is not None:
        keys = [k for k in keys if any(k == f or k.startswith(f + ".") for f in fields)]
    lines = []
    for key in keys:
        values: dict = {}
        for name, flat in zip(names, flats):
            values.setdefault(json.dumps(flat.get(key), sort_keys=True), []).append(name)
        if len(values) > 1:
            parts = [f"{value} ({', '.join(who[:3])}{' ...' if len(who) > 3 else ''})" for value, who in values.items()]
            lines.append(f"{key}: " + " vs ".join(parts))
    return lines
