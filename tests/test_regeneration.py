"""A committed result regenerates from its documented command (paper_figures/regeneration/).

The committed run is a short SmolLM2 GDPO run (experiments/regeneration.yaml): the GGUF
conversion, a warm start and two RL steps with reward variance, all from an empty cache.
Its documented command, run again here, must give every logged number again exactly, on any
x86-64 machine with AVX2 (the run and its check run under the CPU pins, gdpo_nemo.runs.cpu_pins);
and a warm start made under another thread count must get another key, while the same key
made in another process (the study runner's preparation vs the run itself) gives the same
weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo.runs import cpu_pins, provenance, rundir
from tests.support.numerics import user_environment

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "paper_figures" / "regeneration"
RUN = "regeneration__gsm8k__smollm2-135m__gdpo__seed0"
# Wall-clock figures: the only logged values that may differ between two runs of one command.
WALL_CLOCK = ("timing/", "memory/")


def documented_command() -> list[str]:
    """The command paper_figures/regeneration/README.md gives, word for word (the one line
    in its first bash block), with its output folder as written there."""
    text = (COMMITTED / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].strip()
    assert "\n" not in block, block
    return block.split()


def numbers(run_dir: Path) -> dict[int, dict]:
    """{step: {metric: value}} of a run dir, without the wall-clock figures."""
    return {record["step"]: {k: v for k, v in record.items() if not k.startswith(WALL_CLOCK)}
            for record in rundir.read_metrics(run_dir)}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    """The documented command run into an empty folder with an empty cache (the study
    runner's default cache is the output folder's own)."""
    command = documented_command()
    assert command[0] == "PYTHON=.venv/bin/python"  # the interpreter: this test's own
    command = command[1:]
    assert command[:3] == ["bash", "scripts/study.sh", "regeneration"] and "--out" in command
    out = tmp_path_factory.mktemp("regeneration") / "regeneration"
    command[command.index("--out") + 1] = str(out)
    env = {k: v for k, v in user_environment().items() if k != "GDPO_NEMO_CACHE"}  # pinned, as for a user
    env["PYTHON"] = sys.executable
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert not (out / ".cache").exists() or (out / ".cache" / "warm_start").is_dir()
    return out


def test_the_committed_run_is_finished_and_its_files_name_no_machine_path():
    run = COMMITTED / "runs" / RUN
    assert rundir.is_done(run)
    tracked = subprocess.run(["git", "ls-files", str(COMMITTED)], cwd=REPO, capture_output=True, text=True).stdout
    assert "/checkpoints/" not in tracked and "/.cache/" not in tracked  # the run's numbers, not its weights
    steps = numbers(run)
    assert sorted(steps) == [1, 2]
    # The run learned something to regenerate: rewards varied within its groups.
    assert any(0 < steps[s]["train/reward/integer"] < 1 or 0 < steps[s]["train/reward/format"] < 1 for s in steps)
    for path in [*COMMITTED.rglob("*.yaml"), *COMMITTED.rglob("*.log"), *COMMITTED.rglob("*.json")]:
        text = path.read_text()
        for machine in ("/work/", "/root/", "/home/", "/tmp/"):
            assert machine not in text, f"{path} names {machine}"


def test_the_documented_command_regenerates_every_number_of_the_committed_run(regenerated):
    committed, fresh = COMMITTED / "runs" / RUN, regenerated / "runs" / RUN
    then, now = provenance.read(committed)[0], provenance.read(fresh)[0]
    assert now["libraries"] == then["libraries"], "the libraries differ from the committed run's: reinstall with the README's setup"
    # The committed run was made under the CPU pins (ATen AVX2, oneMKL COMPATIBLE), which any
    # x86-64 CPU with AVX2 runs alike, Intel or AMD: compare on every such machine.
    assert cpu_pins.is_pinned(then["numerics"]), "the committed run was not made under the CPU pins: make it again"
    if provenance.cpu_instruction_sets() not in ("AVX2", "AVX512"):
        pytest.skip(f"this CPU ({provenance.cpu_model()}) has no AVX2: the pinned code paths cannot run here")
    assert now["numerics"] == then["numerics"], provenance.differences([then, now], ["committed", "here"], ("numerics",))
    weights = ("source", "digest", "base_digest")  # the same conversion and warm start, bit for bit
    assert {k: now["start_weights"][k] for k in weights} == {k: then["start_weights"][k] for k in weights}
    expected, found = numbers(committed), numbers(fresh)
    assert sorted(found) == sorted(expected)
    for step in expected:
        assert found[step] == expected[step], f"step {step}: " + ", ".join(
            f"{k}: {expected[step].get(k)} -> {found[step].get(k)}" for k in sorted(set(expected[step]) | set(found[step]))
            if expected[step].get(k) != found[step].get(k))[:2000]
    assert (regenerated / "configs" / f"{RUN}.yaml").read_text() == (COMMITTED / "configs" / f"{RUN}.yaml").read_text()


def test_the_regenerated_report_tables_equal_the_committed_ones(regenerated):
    for table in ("training_summary.csv", "paired.csv"):
        assert (regenerated / "report" / "tables" / table).read_text() == (COMMITTED / "report" / "tables" / table).read_text()
    assert "No problems found." in (regenerated / "report" / "problems.md").read_text()


# ---- the warm-start cache: one key, one set of weights --------------------------------

WARM_STARTS = """
import json, sys
from gdpo_nemo import config as cc
from gdpo_nemo.engines.local.config import resolve_and_check
from gdpo_nemo.engines.local import warm_start
from gdpo_nemo.engines.local.models import cache_dir, load_pretrained
from gdpo_nemo.runs.provenance import state_digest

def config(threads):
    return resolve_and_check(cc.compose("gsm8k", "tiny", "gdpo", cluster="local", seed=3, overrides=[
        "++gdpo.local.warm_start.enabled=true", "++gdpo.local.warm_start.steps=3", "++gdpo.local.warm_start.batch_size=4",
        f"++gdpo.local.num_threads={threads}", "++gdpo.local.progress=false"]))[0]

out = []
for threads, how, tamper in json.loads(sys.argv[1]):
    made = config(threads)
    record_path = cache_dir() / "warm_start" / warm_start.warm_start_key(made) / "warm_start.json"
    if tamper:
        record = json.loads(record_path.read_text())
        changed = {"digest": {**record, "digest": "0" * 16},
                   "threads": {**record, "numerics": {**record["numerics"], "threads": 7}}}[tamper]
        record_path.write_text(json.dumps(changed))
    try:
        if how == "prepare":  # the study runner's preparation: make it, then the files are what a run loads
            model, _ = load_pretrained(warm_start.warm_start_checkpoint(made, log=lambda m: None))
        else:  # the run itself: load (or make) and check against the record
            model = warm_start.load_warm_start(made, log=lambda m: None)[0]
        out.append({"key": warm_start.warm_start_key(made), "digest": state_digest(model)})
    except ValueError as err:
        out.append({"refused": str(err)})
    if tamper:
        record_path.write_text(json.dumps(record))
print(json.dumps(out))
"""


def warm_starts(cache: Path, steps: list) -> list[dict]:
    """Run `steps` ([threads, "prepare" | "train", tamper | None], ...) in one fresh process
    with the tiny model's warm start cached in `cache`; each gives its key and the digest of
    the weights the process ended up with, or the refusal."""
    env = dict(user_environment(), GDPO_NEMO_CACHE=str(cache), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", WARM_STARTS, json.dumps(steps)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_changed_thread_count_gives_another_key_never_the_same_key_with_other_weights(tmp_path):
    [prepared] = warm_starts(tmp_path / "a", [[1, "prepare", None]])
    # Another process (the run itself, in another cache) makes the same key's weights again;
    # another thread count gets another key, beside the first.
    trained, two = warm_starts(tmp_path / "b", [[1, "train", None], [2, "train", None]])
    assert prepared == trained
    assert two["key"] != prepared["key"]  # never the 1-thread model under the 2-thread key, or back
    assert sorted(p.name for p in (tmp_path / "b" / "warm_start").iterdir()) == sorted([prepared["key"], two["key"]])
    record = json.loads((tmp_path / "b" / "warm_start" / two["key"] / "warm_start.json").read_text())
    assert record["numerics"]["threads"] == 2 and record["digest"] == two["digest"]
    # A record whose weights or numerics are not the key's (damaged, copied from another
    # machine, made by another thread count) is refused, naming the folder; restored, reused.
    digest, threads, again = warm_starts(tmp_path / "a", [[1, "train", "digest"], [1, "prepare", "threads"],
                                                          [1, "train", None]])
    assert "its weights are not the ones recorded" in digest["refused"]
    assert "made under other numerics than its key says" in threads["refused"] and "numerics.threads" in threads["refused"]
    assert again == prepared
