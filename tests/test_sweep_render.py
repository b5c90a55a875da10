"""Specification of the sbatch scripts `gdpo-nemo sweep` renders (gdpo_nemo.sweep.render).

The scripts are checked as text (their #SBATCH lines and exports), with `bash -n`, and the
local one run by bash with a stand-in interpreter;
that they really run is shown by tests/slurm/test_sweep_on_slurm.py.
"""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.sweep.profiles import parse_profile
from gdpo_nemo.config.engines import ENGINES
from gdpo_nemo.engines.nemo.engine import container_mounts, nemo_command
from gdpo_nemo.sweep.render import REPO_ROOT, fill, render_script

RUN = RunId("toolcall", "toolcall", "qwen2.5-1.5b", "gdpo", 3)
WORKDIR = Path("/lustre/me/gdpo")  # where `gdpo-nemo sweep` ran
SWEEP = WORKDIR / "sweeps" / "toolcall"
NEMO = {
    "account": "acct",
    "partition": "batch",
    "time": "04:00:00",
    "nodes": 2,
    "gpus_per_node": 8,
    "container": "/lustre/images/nemo-rl-7ea279ab.sqsh",
    "nemo_rl_dir": "/lustre/me/nemo-rl",
    "mounts": ["/lustre:/lustre"],
    "env": ["HF_HOME", "HF_TOKEN", "WANDB_API_KEY"],
}
LOCAL = {"account": None, "partition": "local", "time": "30:00", "nodes": 1, "gpus_per_node": 0,
         "cpus_per_task": 1, "mem": "4G"}


def profile(raw, **changes):
    return parse_profile({**raw, **changes}, name="t", path=Path("/p/t.yaml"))


def render(engine, prof, **kw):
    args = dict(
        run_id=RUN,
        profile=prof,
        run_dir=SWEEP / "runs" / RUN.name,
        config_path=SWEEP / "configs" / f"{RUN.name}.yaml",
        log_path=SWEEP / "logs" / f"{RUN.name}-%j.out",
        sweep_dir=SWEEP,
        workdir=WORKDIR,
        nodes=prof.nodes if engine == "nemo" else 1,
        gpus_per_node=prof.gpus_per_node,
    )
    return render_script(ENGINES[engine], **{**args, **kw})


def directives(script):
    return [line.split(None, 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]


def exported(script, name):
    """The value a `export NAME=...` line of the script gives NAME, shell-unquoted."""
    line = next(line for line in script.splitlines() if line.startswith(f"export {name}="))
    return shlex.split(line.split("=", 1)[1])[0]


def test_fill_refuses_missing_and_unused_values():
    assert fill("a {{x}} b", {"x": "1"}) == "a 1 b"
    with pytest.raises(ValueError, match="placeholders without value: \\['y'\\]"):
        fill("a {{x}} {{y}}", {"x": "1"})
    with pytest.raises(ValueError, match="values without placeholder: \\['z'\\]"):
        fill("a {{x}}", {"x": "1", "z": "2"})


def test_nemo_job_asks_for_the_profiles_nodes_gpus_time_and_names_itself_after_the_run():
    script = render("nemo", profile(NEMO))
    assert directives(script) == [
        f"--job-name={RUN.name}",
        "--partition=batch",
        "--account=acct",
        "--time=04:00:00",
        "--nodes=2",
        "--exclusive",
        "--gres=gpu:8",
        f"--chdir={WORKDIR}",
        f"--output={SWEEP}/logs/{RUN.name}-%j.out",
        "--open-mode=append",
        "--requeue",
        "--dependency=singleton",
        "--export=ALL,HF_HOME,HF_TOKEN,WANDB_API_KEY",
    ]
    assert RUN.name == "toolcall__toolcall__qwen2.5-1.5b__gdpo__seed3"


def test_nemo_job_runs_ray_sub_from_the_checkout_with_our_entry_point_as_command():
    script = render("nemo", profile(NEMO))
    config = SWEEP / "configs" / f"{RUN.name}.yaml"
    assert exported(script, "COMMAND") == (
        f"cd {WORKDIR} && PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}} "
        f"uv run --project /lustre/me/nemo-rl python -m gdpo_nemo.commands.nemo_run --config {config}"
    )
    assert exported(script, "CONTAINER") == "/lustre/images/nemo-rl-7ea279ab.sqsh"
    assert exported(script, "GPUS_PER_NODE") == "8"
    assert exported(script, "BASE_LOG_DIR") == f"{SWEEP}/runs/{RUN.name}/ray_logs"
    assert exported(script, "GDPO_NEMO_RUN_GRPO") == "/lustre/me/nemo-rl/examples/run_grpo.py"
    assert "RAY_SUB=/lustre/me/nemo-rl/ray.sub" in script.splitlines()
    assert script.rstrip().splitlines()[-1] == 'exec bash "$RAY_SUB"'


def test_a_nemo_cpu_profile_runs_nemo_rl_on_one_node_s_cpu_through_the_same_template():
    cpu = profile(NEMO, container=None, nemo_rl_dir=None, gpus_per_node=0, gres=None, cpus_per_task=2, mem="6G",
                  nemo_cpu={"model": "smollm2-135m", "steps": 3})
    script = render("nemo", cpu)
    run_dir, config = SWEEP / "runs" / RUN.name, SWEEP / "configs" / f"{RUN.name}.yaml"
    assert exported(script, "COMMAND") == (
        f"cd {WORKDIR} && PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}} {sys.executable} -m"
        f" gdpo_nemo.commands.nemo_smoke {config} --run-dir {run_dir} --continue --model smollm2-135m --steps 3 --prompts 2"
        " --generations 2 --max-new-tokens 32 --val-period 1 --max-gen-batches 2 --wandb")
    sbatch = directives(script)
    assert {"--ntasks=1", "--cpus-per-task=2", "--mem=6G"} <= set(sbatch)
    assert not [d for d in sbatch if d.startswith(("--gres", "--exclusive"))]
    assert "RAY_SUB=''" in script.splitlines() and 'exec bash -c "$COMMAND"' in script


def test_the_dapo_cap_and_the_profiles_overrides_reach_a_nemo_cpu_job_after_the_cpu_changes():
    """An experiment's own grpo.dynamic_sampling_max_gen_batches (which the CPU path would
    bound) and the profile's nemo_cpu.overrides reach the job as overrides of its own, in
    that order, after the flags; the experiment's other overrides stay in the config only."""
    cpu = profile(NEMO, container=None, nemo_rl_dir=None, gpus_per_node=0, gres=None,
                  nemo_cpu={"max_gen_batches": 3, "overrides": ["grpo.batch_multiplier=2", "policy.generation.temperature=0.8"]})
    script = render("nemo", cpu, overrides=("gdpo.length_limit=10", "grpo.dynamic_sampling_max_gen_batches=6"))
    command = exported(script, "COMMAND")
    assert command.endswith(" --max-gen-batches 3 --wandb grpo.dynamic_sampling_max_gen_batches=6"
                            " grpo.batch_multiplier=2 policy.generation.temperature=0.8")
    assert "length_limit" not in command
    import argparse
    import shlex

    from gdpo_nemo.commands.args import parse_with_overrides
    from gdpo_nemo.commands.nemo_smoke import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    words = shlex.split(command.split(" -m gdpo_nemo.commands.nemo_smoke ", 1)[1])
    args = parse_with_overrides(parser, words)
    assert args.max_gen_batches == 3 and args.continue_run and args.wandb
    assert args.overrides == ["grpo.dynamic_sampling_max_gen_batches=6", "grpo.batch_multiplier=2",
                              "policy.generation.temperature=0.8"]


def test_wandb_name_and_group_are_the_run_id():
    for engine, prof in (("nemo", profile(NEMO)), ("local", profile(LOCAL))):
        script = render(engine, prof)
        assert exported(script, "WANDB_NAME") == RUN.name
        assert exported(script, "WANDB_RUN_GROUP") == "toolcall__toolcall__qwen2.5-1.5b__gdpo"


def test_secrets_pass_by_name_never_by_value(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_do_not_write_me")
    monkeypatch.setenv("WANDB_API_KEY", "wandb_do_not_write_me")
    script = render("nemo", profile(NEMO))
    assert "do_not_write_me" not in script
    assert "--export=ALL,HF_HOME,HF_TOKEN,WANDB_API_KEY" in directives(script)


def test_mounts_add_checkout_repo_sweep_and_work_dirs_only_where_no_mount_covers_them():
    mounts = exported(render("nemo", profile(NEMO, mounts=[])), "MOUNTS").split(",")
    # the sweep dir lies in WORKDIR, so it needs no mount of its own
    assert sorted(mounts) == sorted(f"{p}:{p}" for p in ("/lustre/me/nemo-rl", REPO_ROOT, WORKDIR))
    covered = profile(NEMO, mounts=["/lustre:/lustre", str(REPO_ROOT)])
    assert container_mounts(covered, [Path("/lustre/me/nemo-rl"), REPO_ROOT, SWEEP]) == f"/lustre:/lustre,{REPO_ROOT}"
    # mapped elsewhere in the container: the host path would not resolve, so mount it as itself
    elsewhere = profile(NEMO, mounts=["/lustre:/data"])
    assert container_mounts(elsewhere, [Path("/lustre/me/nemo-rl"), SWEEP]) == (
        f"/lustre:/data,/lustre/me/nemo-rl:/lustre/me/nemo-rl,{SWEEP}:{SWEEP}"
    )
    assert container_mounts(profile(NEMO, mounts=[]), [Path("/a"), Path("/a/b")]) == "/a:/a"


def test_nemo_launcher_is_the_profiles():
    assert " srun-python -m gdpo_nemo.commands.nemo_run " in nemo_command(
        profile(NEMO, nemo_launcher="srun-python"), Path("/c.yaml"), WORKDIR
    )


def test_local_job_is_one_task_on_one_node_with_the_profiles_cpus_and_memory():
    assert directives(render("local", profile(LOCAL))) == [
        f"--job-name={RUN.name}",
        "--partition=local",
        "--time=30:00",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--mem=4G",
        f"--chdir={WORKDIR}",
        f"--output={SWEEP}/logs/{RUN.name}-%j.out",
        "--open-mode=append",
        "--requeue",
        "--dependency=singleton",
    ]


def test_local_job_on_a_gpu_profile_takes_one_gpu():
    assert "--gres=gpu:1" in directives(render("local", profile(NEMO)))


def test_local_job_runs_gdpo_nemo_train_with_config_and_run_dir_resuming_from_a_checkpoint():
    script = render("local", profile(LOCAL))
    last = script.rstrip().splitlines()[-1]
    assert last == (
        f"exec {sys.executable} -m gdpo_nemo.cli train --config {SWEEP}/configs/{RUN.name}.yaml"
        ' --run-dir "$RUN_DIR" "${resume[@]}"'
    )
    assert exported(script, "PYTHONPATH") == f"{REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}"
    assert f"RUN_DIR={SWEEP}/runs/{RUN.name}" in script


@pytest.mark.parametrize("checkpoints, resumes", [([], False), (["step_3"], True), (["step_3", "step_10"], True)])
def test_the_local_job_resumes_exactly_when_its_run_has_a_checkpoint(tmp_path, checkpoints, resumes):
    """The rendered script run by bash, with a stand-in interpreter that prints its arguments:
    a first start is fresh, a requeued job with a checkpoint passes --resume."""
    printer = tmp_path / "print-args"
    printer.write_text('#!/bin/sh\nfor arg in "$@"; do printf "%s\\n" "$arg"; done\n')
    printer.chmod(0o755)
    run_dir = tmp_path / "runs" / RUN.name
    for name in checkpoints:
        (run_dir / "checkpoints" / name).mkdir(parents=True)
    path = tmp_path / "job.sbatch"
    path.write_text(render("local", profile(LOCAL, python=str(printer)), run_dir=run_dir))
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    log, *args = done.stdout.splitlines()
    assert log.endswith("--resume" if resumes else "fresh start"), log
    assert args[:4] == ["-m", "gdpo_nemo.cli", "train", "--config"]
    assert args[5:7] == ["--run-dir", str(run_dir)]
    assert args[7:] == (["--resume"] if resumes else [])


def test_profile_setup_lines_and_extra_options_are_included_verbatim():
    script = render("local", profile(LOCAL, setup=["module load cuda", "source /venv/bin/activate"],
                                     sbatch_extra=["--qos=high"], python="/venv/bin/python"))
    assert "module load cuda\nsource /venv/bin/activate\n" in script
    assert directives(script)[-1] == "--qos=high"
    assert "exec /venv/bin/python -m gdpo_nemo.cli train" in script


@pytest.mark.parametrize("engine", ["nemo", "local"])
def test_rendered_scripts_are_valid_bash(engine, tmp_path):
    path = tmp_path / "job.sbatch"
    path.write_text(render(engine, profile(NEMO)))
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_paths_with_spaces_are_quoted(tmp_path):
    sweep = Path("/tmp/my sweeps/x")
    script = render("local", profile(LOCAL), run_dir=sweep / "runs" / RUN.name, sweep_dir=sweep,
                    config_path=sweep / "c.yaml", workdir=Path("/tmp/my sweeps"))
    assert f"RUN_DIR='{sweep}/runs/{RUN.name}'" in script
    assert f"--config '{sweep}/c.yaml'" in script
