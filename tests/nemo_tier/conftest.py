"""The NeMo RL tier: tests that run against NeMo RL's real code, in .venv-nemo.

NeMo RL (pinned commit, not on PyPI) lives in its own venv, .venv-nemo, made by
scripts/setup_nemo.sh from ../shared/vendor's source archive: its pins (transformers < 5.9,
...) do not fit the project's .venv. The README's test command runs in .venv, so this file
makes the tier run where NeMo RL is:

- in .venv (NeMo RL not importable): the first test of a group to run starts ONE pytest in
  .venv-nemo over every selected test of the group (two groups: the release's tests, the
  rest; tests/support/groups.py), and each test here then reports the outcome that run gave
  it (its failure text included). Without .venv-nemo the tests
  are skipped, saying so, and fail under CI=true (scripts/setup.sh --all always makes it).
- in .venv-nemo (nemo_rl importable): the tests run, and their outcomes are written to
  $GDPO_NEMO_TIER_REPORT for the outer run.

The fixtures below start nothing in .venv (they give None there), so the outer run costs
one subprocess. The inner run's own durations are printed at the end of the outer run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gdpo_nemo.engines.nemo.validation import nemo_rl_importable

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NEMO_VENV_PYTHON = REPO / ".venv-nemo" / "bin" / "python"
NEMO_RL_CHECKOUT = REPO / ".nemo-rl" / "nemo-rl"
INSIDE = nemo_rl_importable()
REPORT_ENV = "GDPO_NEMO_TIER_REPORT"
_STATE: dict = {}


def _ours(item) -> bool:
    return HERE in Path(str(item.fspath)).resolve().parents


# ---------------------------------------------------------------------------------------
# Outside: delegate to one pytest run in .venv-nemo.
# ---------------------------------------------------------------------------------------


# The outer test that starts the inner run waits for all of it (the pin's tier and the
# release's are two runs, about 15-20 and 6-11 minutes on this machine): pytest-timeout's 900 s per test
# (pyproject.toml) killed that wait, and the next outer test started the whole inner run
# again. Each inner test keeps the 900 s limit inside .venv-nemo.
INNER_RUN_TIMEOUT_S = 3600


def pytest_collection_modifyitems(config, items):
    if not INSIDE:
        for item in items:
            if _ours(item):
                item.add_marker(pytest.mark.timeout(INNER_RUN_TIMEOUT_S))
    if INSIDE or NEMO_VENV_PYTHON.exists():
        return
    from tests.support.requirements import requires  # the outer run's (`tests` may be another package in .venv-nemo)

    missing = requires(False, f"{NEMO_VENV_PYTHON.relative_to(REPO)}: run scripts/setup_nemo.sh (scripts/setup.sh --all runs it)")
    for item in items:
        if _ours(item):
            item.add_marker(missing)


def unpinned_environment() -> dict:
    """This process's environment without the local engine's CPU pins (gdpo_nemo.runs.cpu_pins,
    set by tests/conftest.py): NeMo RL's own training loop is what this tier checks, not numbers
    that must regenerate, and oneMKL's COMPATIBLE branch would double its SmolLM2 steps."""
    from gdpo_nemo.runs import cpu_pins

    env = {k: v for k, v in os.environ.items() if k not in cpu_pins.PINNED_ENV}
    env[cpu_pins.MODE_ENV] = "native"
    return env


def _inner_run(item) -> dict:
    """Run every selected test of this item's group once in .venv-nemo; {nodeid: result}. The
    groups (tests/support/groups.py): the release's tests, and the rest of this folder; each is
    one inner run, on whichever xdist worker took the group (a worker's session.items holds
    every collected test, so the group is chosen here, not by what the worker was sent)."""
    from tests.support.groups import xdist_scope  # the outer run's (`tests` may be another package in .venv-nemo)

    group = xdist_scope(item.nodeid)
    runs = _STATE.setdefault("runs", {})
    if group in runs:
        return runs[group]
    nodeids = [other.nodeid for other in item.session.items if _ours(other) and xdist_scope(other.nodeid) == group]
    report = Path(tempfile.mkdtemp(prefix="gdpo-nemo-tier-")) / "report.json"
    # Ray keeps its sockets and the address of "the" local cluster in its temp dir: a dir of
    # this run's own (short: socket paths are limited) keeps other Ray users of the machine
    # and this tier from finding each other's clusters.
    ray_tmp = tempfile.mkdtemp(prefix="gr", dir="/tmp")
    command = [str(NEMO_VENV_PYTHON), "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:warnings", "-q", "--durations=0", *nodeids]
    try:
        done = subprocess.run(
            command, cwd=REPO, env={**unpinned_environment(), REPORT_ENV: str(report), "RAY_TMPDIR": ray_tmp},
            capture_output=True, text=True,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    _STATE.setdefault("outputs", {})[group] = done.stdout + done.stderr
    runs[group] = json.loads(report.read_text()) if report.is_file() else {}
    return runs[group]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if INSIDE or not _ours(pyfuncitem):
        return None
    result = _inner_run(pyfuncitem).get(pyfuncitem.nodeid)
    if result is None:
        tail = "\n".join(_output().splitlines()[-40:])
        pytest.fail(f"the NeMo RL tier run in .venv-nemo gave no result for {pyfuncitem.nodeid}; its output ends:\n{tail}", pytrace=False)
    if result["outcome"] == "skipped":  # nothing of this tier may skip in CI (tests/support/requirements.py)
        from tests.support.requirements import require

        require(False, f"what this test skipped for in .venv-nemo: {result['text']}")
    if result["outcome"] == "failed":
        pytest.fail(f"(in .venv-nemo, {result['duration']:.1f} s)\n{result['text']}", pytrace=False)
    return True


def _output() -> str:
    """What the inner runs of this process printed, one after the other."""
    return "\n".join(_STATE.get("outputs", {}).values())


def _inner_durations(output: str) -> list[str]:
    lines, shown = output.splitlines(), []
    for start, line in enumerate(lines):
        if not ("slowest" in line and "durations" in line):
            continue
        for line in lines[start + 1 :]:
            if line.startswith("=") or not line.strip():
                break
            shown.append(line)
    return shown


def pytest_terminal_summary(terminalreporter):
    """The inner run's durations at the end of the outer run, in one process. Under xdist the
    worker that ran the tier hands them over (pytest_sessionfinish below) to the controller,
    which never loads this file: tests/conftest.py prints them there."""
    if INSIDE or "outputs" not in _STATE:
        return
    shown = _inner_durations(_output())
    if shown:
        terminalreporter.write_sep("=", "NeMo RL tier: durations inside .venv-nemo")
        for line in shown:
            terminalreporter.write_line(line)


# ---------------------------------------------------------------------------------------
# Inside: record outcomes for the outer run.
# ---------------------------------------------------------------------------------------


def pytest_runtest_logreport(report):
    path = os.environ.get(REPORT_ENV)
    if not INSIDE or not path:
        return
    results = _STATE.setdefault("inner", {})
    entry = results.setdefault(report.nodeid, {"outcome": "passed", "text": "", "duration": 0.0})
    entry["duration"] += report.duration
    if report.failed:
        entry["outcome"], entry["text"] = "failed", f"[{report.when}] {report.longreprtext}"
    elif report.skipped and entry["outcome"] != "failed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        entry["outcome"], entry["text"] = "skipped", reason


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)  # set in an xdist worker
    if not INSIDE and workeroutput is not None and "outputs" in _STATE:
        workeroutput["nemo_tier_durations"] = _inner_durations(_output())
    path = os.environ.get(REPORT_ENV)
    if INSIDE and path:
        Path(path).write_text(json.dumps(_STATE.get("inner", {})))


# ---------------------------------------------------------------------------------------
# Fixtures (None outside .venv-nemo: nothing starts there).
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def other_ray():
    """Another Ray instance on the machine, started in a process of its own before the
    tier's Ray and running through the whole tier: nothing of ours or NeMo RL's may attach
    to it or fail because of it (users run beside other Ray jobs, CI beside other suites)."""
    if not INSIDE:
        yield None
        return
    temp = tempfile.mkdtemp(prefix="go", dir="/tmp")
    script = ("import ray, sys; ray.init(num_cpus=1, include_dashboard=False); "
              "print(ray.get_runtime_context().gcs_address, flush=True); sys.stdin.read()")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env={**env, "RAY_TMPDIR": temp}, start_new_session=True)
    address = process.stdout.readline().strip()
    try:
        yield address
    finally:
        import signal

        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:  # its raylet, GCS and workers share its process group
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="session")
def local_ray(other_ray):
    """A real local Ray of this process (no GPUs, 4 logical CPUs: NeMo RL's policy worker
    and our environment actors each hold one), started as the CPU path
    starts it (gdpo_nemo.engines.nemo.cpu.cluster: a private instance, RAY_ADDRESS naming
    it) while `other_ray` runs beside it; our package is importable in its workers."""
    if not INSIDE:
        yield None
        return
    import ray

    from gdpo_nemo.engines.nemo.cpu import cluster

    cluster.start_ray(num_cpus=4)
    yield ray
    cluster.stop_ray()


@pytest.fixture(scope="session")
def registered():
    """plugin.register_environments() and register_processors() done once (NeMo RL's registries)."""
    if not INSIDE:
        return None
    from gdpo_nemo.engines.nemo import plugin

    plugin.register_environments()
    plugin.register_processors()
    return plugin


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory):
    """The local engine's byte-level tokenizer (one token per byte) saved as a folder: a real
    Hugging Face tokenizer with a chat template that needs no hub."""
    if not INSIDE:
        return None
    from gdpo_nemo.engines.local.models import build_tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny_tokenizer")
    build_tiny_tokenizer().save_pretrained(folder)
    return str(folder)
