"""Specification of `gdpo-nemo sweep` without a Slurm cluster: --dry-run and bad input.

--dry-run of every paper experiment on the sample profile (slurm/profiles/example.yaml)
is checked script by script: node count, gres, time, COMMAND and W&B names. Bad input
fails with exit status 2, a message naming it, and nothing written or submitted.
"""

import shlex
from pathlib import Path

import pytest
import yaml

from gdpo_nemo import cli
from gdpo_nemo.config import load_experiment
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.sweep.manifest import Manifest
from gdpo_nemo.sweep.plan import RunPlan, SweepLayout, write_plans
from gdpo_nemo.sweep.profiles import PROFILE_DIR
from gdpo_nemo.sweep.render import REPO_ROOT

# The paper's experiments and the nodes per run their cluster configs ask for (configs/cluster/).
PAPER_NODES = {"toolcall": 1, "gsm8k": 1, "math": 4, "math_conditioned_length": 4, "coding": 4}


def sweep(capsys, *argv):
    rc = cli.main(["sweep", *map(str, argv)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def directives(script: str) -> dict[str, str]:
    out = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line[len("#SBATCH --"):].partition("=")
            out[key] = value
    return out


def exported(script: str, name: str) -> str:
    line = next(line for line in script.splitlines() if line.startswith(f"export {name}="))
    return shlex.split(line.split("=", 1)[1])[0]


def profile_file(tmp_path, **changes) -> Path:
    raw = yaml.safe_load((PROFILE_DIR / "example.yaml").read_text())
    raw.update(changes)
    path = tmp_path / "mycluster.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in raw.items() if v is not ...}))
    return path


@pytest.mark.parametrize("experiment", sorted(PAPER_NODES))
def test_dry_run_of_each_paper_experiment_on_the_example_profile(experiment, tmp_path, capsys):
    rc, out, _ = sweep(capsys, experiment, "--cluster", "example", "--dry-run", "--sweep-dir", tmp_path)
    assert rc == 0
    runs = [spec.run_id for spec in load_experiment(experiment)]
    scripts = sorted((tmp_path / "jobs").glob("*.sbatch"))
    assert [p.stem for p in scripts] == sorted(r.name for r in runs)
    assert not (tmp_path / "manifest.json").exists()  # nothing submitted
    assert out.rstrip().endswith("nothing submitted (use --submit)")
    for path in scripts:
        run_id, script = RunId.parse(path.stem), path.read_text()
        assert f"==> {path} <==\n{script}" in out
        config_path = tmp_path / "configs" / f"{run_id.name}.yaml"
        config = yaml.safe_load(config_path.read_text())
        sbatch = directives(script)
        assert sbatch["nodes"] == str(PAPER_NODES[experiment]) == str(config["cluster"]["num_nodes"])
        assert (sbatch["gres"], sbatch["time"], sbatch["account"], sbatch["partition"]) == (
            "gpu:8", "04:00:00", "my_account", "batch")
        assert sbatch["job-name"] == run_id.name
        assert exported(script, "COMMAND") == (
            f"cd {Path.cwd()} && PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}} uv run --project"
            f" /lustre/fsw/my_account/nemo-rl python -m gdpo_nemo.commands.nemo_run --config {config_path}")
        assert "\nRAY_SUB=/lustre/fsw/my_account/nemo-rl/ray.sub\n" in script
        assert script.rstrip().endswith('\nexec bash "$RAY_SUB"')
        assert exported(script, "WANDB_NAME") == config["logger"]["wandb"]["name"] == run_id.name
        assert exported(script, "WANDB_RUN_GROUP") == config["logger"]["wandb"]["group"] == run_id.group
        assert config["logger"]["log_dir"] == str(tmp_path / "runs" / run_id.name)
        assert config["checkpointing"]["checkpoint_dir"] == str(tmp_path / "runs" / run_id.name / "checkpoints")
        assert config["gdpo"]["engine"] == "nemo"


@pytest.mark.parametrize("experiment", sorted(PAPER_NODES))
def test_with_engine_local_a_sweep_plans_only_runs_the_local_engines_train_accepts(experiment, tmp_path, capsys):
    """`--engine local` on a paper experiment: either the sweep refuses, with the line the
    local engine's train gives at its start (DAPO, a nemo-only feature), or every config it
    writes is one that train's own check (load_run_config) accepts. Planned jobs that fail at
    their start are what this forbids."""
    from gdpo_nemo.engines.local.config import load_run_config

    rc, _, err = sweep(capsys, experiment, "--cluster", "example", "--engine", "local", "--dry-run", "--sweep-dir", tmp_path / "s")
    from gdpo_nemo.config import compose

    spec = load_experiment(experiment)[0]  # the experiment's own config (its engine: nemo)
    own = compose(spec.task, spec.model, spec.algo, cluster=spec.cluster, seed=spec.seed, experiment=experiment,
                  overrides=spec.overrides)
    if own["grpo"]["use_dynamic_sampling"]:  # DAPO: the paper's math and coding runs
        assert_refused(rc, err, tmp_path / "s", "grpo.use_dynamic_sampling: True is not implemented by the local engine; accepted False")
        return
    assert rc == 0, err
    configs = sorted((tmp_path / "s" / "configs").glob("*.yaml"))
    assert len(configs) == len(load_experiment(experiment))
    for path in configs:
        load_run_config(path)  # raises what train would refuse


def test_dry_run_of_smoke_on_the_local_profile_renders_local_engine_jobs(tmp_path, capsys):
    rc, out, _ = sweep(capsys, "smoke", "--cluster", "local", "--sweep-dir", tmp_path)  # --dry-run is the default
    assert rc == 0
    scripts = sorted((tmp_path / "jobs").glob("*.sbatch"))
    assert len(scripts) == len(load_experiment("smoke")) == 12
    for path in scripts:
        script = path.read_text()
        assert directives(script)["nodes"] == "1" and directives(script)["partition"] == "local"
        assert f"-m gdpo_nemo.cli train --config {tmp_path}/configs/{path.stem}.yaml" in script
        # the job names its run dir itself, which is the config's logger.log_dir
        config = yaml.safe_load((tmp_path / "configs" / f"{path.stem}.yaml").read_text())
        assert f"RUN_DIR={config['logger']['log_dir']}" in script and config["logger"]["log_dir"].endswith(path.stem)
    assert "(local engine); nothing submitted" in out


def test_only_filters_runs_and_engine_overrides_the_cluster_configs(tmp_path, capsys):
    rc, out, _ = sweep(capsys, "toolcall", "--cluster", "example", "--sweep-dir", tmp_path, "--engine", "local",
                       "--only", "seed=0", "--only", "seed=1", "--only", "algo=gdpo_no_bn")
    assert rc == 0
    assert sorted(p.stem for p in (tmp_path / "jobs").glob("*.sbatch")) == [
        "toolcall__toolcall__qwen2.5-1.5b-instruct__gdpo_no_bn__seed0",
        "toolcall__toolcall__qwen2.5-1.5b-instruct__gdpo_no_bn__seed1",
    ]
    script = (tmp_path / "jobs" / "toolcall__toolcall__qwen2.5-1.5b-instruct__gdpo_no_bn__seed0.sbatch").read_text()
    assert "-m gdpo_nemo.cli train" in script and directives(script)["gres"] == "gpu:1"


def assert_refused(rc, err, sweep_dir, *fragments):
    assert rc == 2
    assert err.startswith("gdpo-nemo sweep: error: ")
    for fragment in fragments:
        assert fragment in err, err
    assert not sweep_dir.exists(), "nothing may be written on bad input"


def test_unknown_experiment_is_refused_naming_the_known_ones(tmp_path, capsys):
    rc, _, err = sweep(capsys, "toolcal", "--cluster", "example", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", "unknown experiment 'toolcal'", "toolcall", "math")


def test_unknown_profile_is_refused_naming_the_known_ones(tmp_path, capsys):
    rc, _, err = sweep(capsys, "toolcall", "--cluster", "nowhere", "--submit", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", "--cluster 'nowhere' is not a known profile", "example, local")


def test_profile_missing_a_required_key_is_refused(tmp_path, capsys):
    path = profile_file(tmp_path, partition=...)
    rc, _, err = sweep(capsys, "toolcall", "--cluster", path, "--submit", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", "missing required key(s) partition")


def test_config_whose_num_nodes_disagrees_with_the_profile_is_refused(tmp_path, capsys):
    path = profile_file(tmp_path, nodes=2)
    rc, _, err = sweep(capsys, "toolcall", "--cluster", path, "--submit", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", "profile 'mycluster'",
                   "cluster.num_nodes: 1 but the Slurm request has --nodes=2")


def test_config_whose_gpus_per_node_disagrees_with_the_profile_is_refused(tmp_path, capsys):
    path = profile_file(tmp_path, gpus_per_node=4, gres=None)
    rc, _, err = sweep(capsys, "gsm8k", "--cluster", path, "--dry-run", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", "cluster.gpus_per_node: 8 but the Slurm request gives 4 GPU(s)")


def test_submit_without_sbatch_on_path_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    rc, _, err = sweep(capsys, "smoke", "--cluster", "local", "--submit", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", "--submit needs Slurm's sbatch, squeue, not found on PATH")


def test_the_cpu_profile_runs_a_multi_node_paper_experiment_as_one_node_cpu_jobs(tmp_path, capsys):
    rc, out, _ = sweep(capsys, "math", "--cluster", "local_nemo_cpu", "--dry-run", "--sweep-dir", tmp_path)
    assert rc == 0 and PAPER_NODES["math"] > 1
    for path in sorted((tmp_path / "jobs").glob("*.sbatch")):
        lines = path.read_text().splitlines()
        assert "#SBATCH --nodes=1" in lines and not [l for l in lines if l.startswith(("#SBATCH --gres", "#SBATCH --exclusive"))]
        assert "gdpo_nemo.commands.nemo_smoke" in next(l for l in lines if l.startswith("export COMMAND="))


def test_a_cpu_profile_naming_a_model_folder_that_is_not_there_is_refused_before_sbatch(tmp_path, capsys):
    raw = yaml.safe_load((PROFILE_DIR / "local_nemo_cpu.yaml").read_text())
    raw["nemo_cpu"]["model"] = str(tmp_path / "no_model")
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    for mode in ("--submit", "--dry-run"):  # the dry run checks what the submission would
        rc, out, err = sweep(capsys, "math", "--cluster", str(path), mode, "--sweep-dir", tmp_path / "s")
        assert rc == 2 and err.strip().count("\n") == 0, (mode, err)
        assert f"nemo_cpu.model {str(tmp_path / 'no_model')!r} is not tiny, smollm2-135m or a model folder" in err
        assert not (tmp_path / "s" / "manifest.json").exists() and not (tmp_path / "s" / "jobs").exists()


def test_nemo_submit_needs_ray_sub_in_the_profiles_checkout(tmp_path, capsys):
    path = profile_file(tmp_path, nemo_rl_dir=str(tmp_path / "not-nemo-rl"))
    rc, _, err = sweep(capsys, "gsm8k", "--cluster", path, "--submit", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", f"nemo_rl_dir {tmp_path / 'not-nemo-rl'} has no ray.sub")


def test_nemo_engine_refuses_a_local_only_model(tmp_path, capsys):
    rc, _, err = sweep(capsys, "smoke", "--cluster", "example", "--engine", "nemo", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", "'builtin:tiny' is a local-engine model")


@pytest.mark.parametrize(("only", "message"), [
    ("colour=red", "unknown key 'colour'; accepted keys are run, task, model, algo, seed"),
    ("seed", "'seed' is not key=value"),
    ("model=gpt-5", "--only matches no run of the experiment; values present: model in qwen2.5-1.5b-instruct"),
])
def test_bad_only_filters_are_refused(only, message, tmp_path, capsys):
    rc, _, err = sweep(capsys, "toolcall", "--cluster", "example", "--only", only, "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", message)


def test_a_sweep_dir_with_whitespace_is_refused(tmp_path, capsys):
    rc, _, err = sweep(capsys, "gsm8k", "--cluster", "example", "--sweep-dir", tmp_path / "my sweep")
    assert_refused(rc, err, tmp_path / "my sweep", "contains whitespace, which #SBATCH")


def test_dry_run_and_submit_need_a_profile(tmp_path, capsys):
    rc, _, err = sweep(capsys, "smoke", "--submit", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", "--submit needs --cluster PROFILE")


def test_status_of_a_sweep_never_submitted_is_refused(tmp_path, capsys):
    rc, _, err = sweep(capsys, "smoke", "--status", "--sweep-dir", tmp_path / "s")
    assert_refused(rc, err, tmp_path / "s", f"no sweep manifest at {tmp_path / 's' / 'manifest.json'}")


def test_a_sweep_dir_of_another_profile_is_not_overwritten(tmp_path, capsys):
    tmp_path.joinpath("s").mkdir()
    Manifest(tmp_path / "s" / "manifest.json", "gsm8k", "othercluster", "nemo").save()
    rc, _, err = sweep(capsys, "gsm8k", "--cluster", "example", "--sweep-dir", tmp_path / "s")
    assert rc == 2 and "use the same --cluster/--engine or another --sweep-dir" in err
    assert not (tmp_path / "s" / "jobs").exists()


def test_a_started_runs_config_is_kept_when_the_experiment_changes(tmp_path):
    layout = SweepLayout(tmp_path)

    def plan(name, config_text):
        return RunPlan(RunId.parse(name), "local", layout.run_dir(name), layout.config_path(name),
                       layout.script_path(name), config_text, "#!/bin/bash\n")

    started, fresh = "e__t__m__a__seed0", "e__t__m__a__seed1"
    assert write_plans([plan(started, "steps: 10\n"), plan(fresh, "steps: 10\n")], layout) == []
    kept = write_plans([plan(started, "steps: 20\n"), plan(fresh, "steps: 20\n")], layout, started={started})
    assert kept == [started]
    assert layout.config_path(started).read_text() == "steps: 10\n"  # resumes as it started
    assert layout.config_path(fresh).read_text() == "steps: 20\n"  # never submitted: follows the experiment


def test_with_eval_renders_an_eval_job_per_local_run_and_refuses_what_it_cannot_evaluate(tmp_path, capsys):
    profile = profile_file(tmp_path, eval_args=["--samples", "4", "--benchmarks", "aime"])
    rc, out, err = sweep(capsys, "smoke", "--cluster", profile, "--dry-run", "--with-eval", "--only", "task=math",
                         "--sweep-dir", tmp_path / "s")
    assert rc == 0, err
    scripts = sorted((tmp_path / "s").rglob("*.eval.sbatch"))
    assert scripts and len(scripts) == len(list((tmp_path / "s").rglob("*__math__*.sbatch"))) - len(scripts)
    text = scripts[0].read_text()
    assert "gdpo_nemo.cli eval --task math --model \"$checkpoint\" --samples 4 --benchmarks aime" in text
    sbatch = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    for script in scripts:  # each eval job is named after its training job, and differs from it
        training = script.with_name(script.name.replace(".eval.sbatch", ".sbatch"))
        names = [[line for line in path.read_text().splitlines() if line.startswith("#SBATCH --job-name=")]
                 for path in (training, script)]
        assert len(names[0]) == 1 and names[1] == [names[0][0] + ".eval"], (script, names)
    assert not any("--dependency" in l or "--requeue" in l for l in sbatch)  # afterok comes on sbatch's command line
    assert f"==> {scripts[0]} <==" in out
    rc, _, err = sweep(capsys, "smoke", "--cluster", profile, "--dry-run", "--with-eval", "--only", "task=gsm8k",
                       "--sweep-dir", tmp_path / "g")
    assert rc == 2 and "task gsm8k has no evaluation benchmarks" in err
    rc, _, err = sweep(capsys, "toolcall", "--cluster", "example", "--dry-run", "--with-eval", "--sweep-dir", tmp_path / "t")
    assert rc == 2 and "local-engine runs only" in err


def test_dry_run_prints_the_runs_first_and_warns_on_placeholders_which_submit_refuses(tmp_path, capsys):
    rc, out, err = sweep(capsys, "smoke", "--cluster", "example", "--dry-run", "--sweep-dir", tmp_path / "a")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == f"12 run(s) of smoke for profile 'example' (local engine), under {tmp_path / 'a'}:"
    assert lines[1].split() == ["run", "engine", "config", "run", "dir"]
    assert lines[2].split()[:2] == ["smoke__toolcall__tiny__grpo__seed0", "local"]
    assert out.index("==> ") > out.index(lines[13])  # the scripts come after the table
    assert "placeholder values: account=my_account;" in err and "--submit refuses them" in err
    rc, _, err = sweep(capsys, "smoke", "--cluster", "example", "--submit", "--sweep-dir", tmp_path / "b")
    assert rc == 2 and "still holds placeholder values: account=my_account" in err and "before --submit" in err
    assert not (tmp_path / "b").exists()
    filled = profile_file(tmp_path, account="proj42", container="/images/nemo.sqsh", nemo_rl_dir="/opt/nemo-rl")
    rc, _, err = sweep(capsys, "smoke", "--cluster", filled, "--dry-run", "--sweep-dir", tmp_path / "c")
    assert rc == 0 and "placeholder" not in err


def test_a_moved_sweep_dir_reads_its_runs_where_they_are_and_its_kept_configs_follow(tmp_path, capsys):
    """A sweep dir moved after its runs started (a scratch purge, a copy to another disk): a
    finished run must not read INCOMPLETE, and a resubmitted run must continue in the dir as it
    is now, not write beside it under the old path through its kept config."""
    import shutil

    from gdpo_nemo.runs import rundir
    from gdpo_nemo.sweep.manifest import RunRecord

    before = tmp_path / "scratch" / "sweep"
    rc, _, err = sweep(capsys, "math", "--cluster", "local_nemo_cpu", "--dry-run", "--sweep-dir", before)
    assert rc == 0, err
    manifest = Manifest(before / "manifest.json", "math", "local_nemo_cpu", "nemo")
    names = sorted(p.stem for p in (before / "configs").glob("*.yaml"))
    for name in names:  # as --submit records them
        manifest.runs[name] = RunRecord(str(before / "runs" / name), str(before / "configs" / f"{name}.yaml"),
                                        str(before / "jobs" / f"{name}.sbatch"), state="RUNNING",
                                        jobs=[{"job_id": "7", "submitted": "t", "resume_from": None}])
    manifest.save()
    finished = before / "runs" / names[0]
    finished.mkdir(parents=True)
    rundir.mark_done(finished, "2\n")
    assert str(before) in (before / "configs" / f"{names[1]}.yaml").read_text()

    after = tmp_path / "project" / "sweep"
    after.parent.mkdir()
    shutil.move(str(before), str(after))
    moved = Manifest.load(after / "manifest.json")
    assert moved.moved_from == str(before.resolve())
    assert moved.runs[names[0]].run_dir == str(after.resolve() / "runs" / names[0]) and moved.runs[names[0]].done
    rc, _, err = sweep(capsys, "math", "--cluster", "local_nemo_cpu", "--dry-run", "--sweep-dir", after)
    assert rc == 0 and "this sweep dir was" in err and "kept configs" in err
    for name in names:
        config = yaml.safe_load((after / "configs" / f"{name}.yaml").read_text())
        assert config["logger"]["log_dir"] == str(after.resolve() / "runs" / name)
        assert str(before) not in (after / "configs" / f"{name}.yaml").read_text()
    assert "changed since it was first submitted" not in err  # a move is not a change of the run
